#!/usr/bin/env bash
# Processing-time windows (Nexmark q12: bids per bidder in 10 s TUMBLE windows over PROCTIME()),
# Weir then Flink, in one run:
#   bash benches/compare_flink_proctime.sh [BIDS_DIR]   (default /tmp/nexmark, from ../shared/flink-anchor/setup.sh)
# Both: 5M bids from CSV, blackhole sink, p=1, state in memory (Flink's heap backend), no
# checkpoints; Flink 1.20.5 from ../shared/flink-anchor, copied with benches/flink/q12.sql added
# to its queries. Release build; best of REPEAT (default 3). Events per CPU-second of the
# engine's process. (Flink does not fire processing-time windows still open when a bounded
# input ends; Weir does. It changes the rows written, not the work per event.)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
DATA="${1:-/tmp/nexmark}"
OUT="${OUT:-/tmp/weir-vs-flink-proctime}"
REPEAT="${REPEAT:-3}"
mkdir -p "$OUT"
rm -f "$OUT/weir.jsonl" "$OUT/flink.jsonl"
cargo bench --quiet --workspace --bench nexmark -- --source "csv:$DATA/bids_5m.csv" --queries q12,tumble \
  --parallelism 1 --repeat "$REPEAT" --out "$OUT/weir.jsonl"
ANCHOR="$OUT/flink-anchor"
rm -rf "$ANCHOR"
cp -r ../shared/flink-anchor "$ANCHOR"
chmod -R u+w "$ANCHOR"
cp benches/flink/q12.sql "$ANCHOR/sql/q12.sql"
/tmp/flinkenv/bin/python "$ANCHOR/flink_nexmark.py" --bids "$DATA/bids_5m.csv" --queries q12,tumble \
  --sink blackhole --parallelism 1 --repeat "$REPEAT" --warmup "$DATA/bids_100k.csv" \
  --results "$OUT/flink.jsonl" >/dev/null 2>&1 || true
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
weir = [json.loads(l) for l in open(f"{out}/weir.jsonl")]
try:
    flink = [json.loads(l) for l in open(f"{out}/flink.jsonl")]
except FileNotFoundError:
    flink = []
print(f"{'query':8} {'weir events/CPU-s':>18} {'flink events/CPU-s':>19} {'ratio':>6} {'weir events/s':>14} {'flink events/s':>15}")
for q in ("q12", "tumble"):
    w = max((r for r in weir if r["query"] == q), key=lambda r: r["events_per_cpu_s"])
    fs = [r for r in flink if r["query"] == q]
    f_cpu = max((r["bids"] / r["jvm_cpu_s"] for r in fs), default=float("nan"))
    f_wall = max((r["eps_wall"] for r in fs), default=float("nan"))
    print(f"{q:8} {w['events_per_cpu_s']:>18,.0f} {f_cpu:>19,.0f} {w['events_per_cpu_s'] / f_cpu:>6.2f} "
          f"{w['events_per_s']:>14,.0f} {f_wall:>15,.0f}")
PY
