#!/usr/bin/env bash
# Every Nexmark query both engines run (nexmark-flink's text), Weir then Flink 1.20.5 in one
# run, p=1, RocksDB state, 1 s incremental checkpoints, over the same CSV files:
#   bash benches/nexmark_vs_flink.sh [QUERIES]   (default: q0–q23 but q6 and q14, which Flink 1.20 does not run)
# Needs ../shared/flink-anchor/setup.sh's venv and files (/tmp/flinkenv, /tmp/nexmark); the
# release build is made here. Prints one table (also OUT/table.md); see benches/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
DATA="${DATA:-/tmp/nexmark}"
OUT="${OUT:-/tmp/nexmark-vs-flink}"
REPEAT="${REPEAT:-2}"
[ -x /tmp/flinkenv/bin/python ] && [ -f "$DATA/bids_5m.csv" ] || bash ../shared/flink-anchor/setup.sh >&2
# The persons and auctions of the 5M-bid events (setup.sh writes them for the smaller sets only).
[ -f "$DATA/persons_5m.csv" ] || /tmp/flinkenv/bin/python ../shared/flink-anchor/nexmark_gen.py --bids 5000000 \
  --out "$DATA" --formats csv --persons-auctions >&2
cargo build --quiet --release -p weir-cli
rm -rf "$OUT" && mkdir -p "$OUT"
args=(--weir "$CARGO_TARGET_DIR/release/weir" --data "$DATA" --out "$OUT" --repeat "$REPEAT")
[ -n "${1:-}" ] && args+=(--queries "$1")
/tmp/flinkenv/bin/python benches/nexmark_vs_flink.py "${args[@]}" "${@:2}"
