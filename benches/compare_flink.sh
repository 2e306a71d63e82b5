#!/usr/bin/env bash
# Weir and Flink on the same 5M-bid files, one after the other, in one run:
#   bash benches/compare_flink.sh [BIDS_DIR]   (default /tmp/nexmark, made by ../shared/flink-anchor/setup.sh)
# Prints both sets of figures and the ratios the runtime issue asks for. Release build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
DATA="${1:-/tmp/nexmark}"
OUT="${OUT:-/tmp/weir-vs-flink}"
mkdir -p "$OUT"
rm -f "$OUT/weir.jsonl"
bench() { cargo bench --quiet --workspace --bench nexmark -- "$@" --repeat 3 --out "$OUT/weir.jsonl"; }
bench --source "parse:$DATA/bids_5m.csv,csv:$DATA/bids_5m.csv" --queries q0,q1,q2,q14,q21,q22 --parallelism 1
bench --source "csv:$DATA/bids_5m.csv,parquet:$DATA/bids_5m.parquet,generator:5000000" --queries q0 --parallelism 2
bench --source "parquet:$DATA/bids_5m.parquet,generator:5000000" --queries q0 --parallelism 1
ANCHOR=../shared/flink-anchor
if [ -x /tmp/flinkenv/bin/python ] && [ -d "$ANCHOR" ]; then
  /tmp/flinkenv/bin/python "$ANCHOR/flink_nexmark.py" --bids "$DATA/bids_5m.csv" --queries q0,q1,q2 \
    --sink blackhole --parallelism 1 --repeat 3 --warmup "$DATA/bids_100k.csv" 2>/dev/null | grep '^{' > "$OUT/flink.jsonl"
  python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
weir = [json.loads(l) for l in open(f"{out}/weir.jsonl")]
flink = [json.loads(l) for l in open(f"{out}/flink.jsonl")]
parse = next(r for r in weir if r["query"] == "parse")
print(f"\narrow-csv parse only: {parse['events_per_cpu_s']:,.0f} rows per CPU-second")
print(f"{'query':6} {'weir ev/CPU-s':>14} {'flink ev/CPU-s':>15} {'ratio':>6} {'vs parse':>9}")
for q in ["q0", "q1", "q2"]:
    w = next(r for r in weir if r["query"] == q and r["source"].startswith("csv:") and r["parallelism"] == 1)
    fs = [r for r in flink if r["query"] == q]
    f = max(r["bids"] / r["jvm_cpu_s"] for r in fs)
    print(f"{q:6} {w['events_per_cpu_s']:>14,.0f} {f:>15,.0f} {w['events_per_cpu_s']/f:>6.2f} {w['events_per_cpu_s']/parse['events_per_cpu_s']:>9.2f}")
w2 = next(r for r in weir if r["query"] == "q0" and r["source"].startswith("csv:") and r["parallelism"] == 2)
f0 = max(r["eps_net"] for r in flink if r["query"] == "q0")
print(f"q0 p=2 wall: weir {w2['events_per_s']:,.0f}/s, flink p=1 {f0:,.0f}/s, ratio {w2['events_per_s']/f0:.2f}")
PY
fi
