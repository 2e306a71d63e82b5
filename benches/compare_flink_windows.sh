#!/usr/bin/env bash
# Windowed queries with RocksDB state and 1 s checkpoints, Weir then Flink, in one run:
#   bash benches/compare_flink_windows.sh [BIDS_DIR]   (default /tmp/nexmark, from ../shared/flink-anchor/setup.sh)
# Weir: tumble and q5 without checkpoints and with 1 s checkpoints, state in RocksDB, p=1.
# Flink 1.20.5: RocksDB state backend, 1 s incremental checkpoints, p=1 (../shared/flink-anchor).
# Release build; best of REPEAT (default 3) for each.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
DATA="${1:-/tmp/nexmark}"
OUT="${OUT:-/tmp/weir-vs-flink-windows}"
REPEAT="${REPEAT:-3}"
QUERIES="${QUERIES:-tumble,q5}"
mkdir -p "$OUT"
rm -f "$OUT/weir.jsonl" "$OUT/flink.jsonl"
bench() { cargo bench --quiet --workspace --bench nexmark -- --source "csv:$DATA/bids_5m.csv" --queries "$QUERIES" \
  --parallelism 1 --state-backend rocksdb --repeat "$REPEAT" --out "$OUT/weir.jsonl" "$@"; }
bench
bench --checkpoint-interval 1s
ANCHOR=../shared/flink-anchor
rm -rf /tmp/flink-ckpt-weir-compare
/tmp/flinkenv/bin/python "$ANCHOR/flink_nexmark_state.py" --bids "$DATA/bids_5m.csv" --queries "$QUERIES" \
  --parallelism 1 --repeat "$REPEAT" --warmup "$DATA/bids_100k.csv" \
  --conf state.backend.type=rocksdb --conf execution.checkpointing.interval=1s \
  --conf execution.checkpointing.incremental=true \
  --conf execution.checkpointing.dir=file:///tmp/flink-ckpt-weir-compare 2>/dev/null | grep '^{' > "$OUT/flink.jsonl" || true
python3 - "$OUT" "$QUERIES" <<'PY'
import json, sys
out, queries = sys.argv[1], sys.argv[2].split(",")
weir = [json.loads(l) for l in open(f"{out}/weir.jsonl")]
flink = [json.loads(l) for l in open(f"{out}/flink.jsonl")]
print(f"{'query':7} {'weir':>12} {'weir 1s ckpt':>13} {'ckpt cost':>10} {'flink 1s ckpt':>14} {'ratio':>6}   (events per CPU-second)")
for q in queries:
    ckpted = lambda r: r.get("checkpoint_interval", "none") != "none"
    plain = max(r["events_per_cpu_s"] for r in weir if r["query"] == q and not ckpted(r))
    ckpt = max(r["events_per_cpu_s"] for r in weir if r["query"] == q and ckpted(r))
    fs = [r for r in flink if r["query"] == q]
    f = max(r["bids"] / r["jvm_cpu_s"] for r in fs) if fs else float("nan")
    print(f"{q:7} {plain:>12,.0f} {ckpt:>13,.0f} {1 - ckpt / plain:>9.1%} {f:>14,.0f} {ckpt / f:>6.2f}")
PY
