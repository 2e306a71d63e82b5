#!/usr/bin/env bash
# An updating query (Nexmark q17: unbounded GROUP BY auction, day) Weir then Flink, in one run:
#   bash benches/compare_flink_updating.sh [BIDS_DIR]   (default /tmp/nexmark, from ../shared/flink-anchor/setup.sh)
# Weir: memory state, and RocksDB state with 1 s checkpoints, p=1, blackhole sink.
# Flink 1.20.5: RocksDB state backend, 1 s incremental checkpoints, p=1 (../shared/flink-anchor,
# copied with benches/flink/q17.sql added to its queries). Release build; best of REPEAT (default 3).
# Also the changelog rows each engine emits per input row.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
DATA="${1:-/tmp/nexmark}"
OUT="${OUT:-/tmp/weir-vs-flink-updating}"
REPEAT="${REPEAT:-3}"
mkdir -p "$OUT"
rm -f "$OUT/weir.jsonl" "$OUT/flink.jsonl"
bench() { cargo bench --quiet --workspace --bench nexmark -- --source "csv:$DATA/bids_5m.csv" --queries q17 \
  --parallelism 1 --repeat "$REPEAT" --out "$OUT/weir.jsonl" "$@"; }
bench --state-backend memory
bench --state-backend rocksdb --checkpoint-interval 1s
ANCHOR="$OUT/flink-anchor"
rm -rf "$ANCHOR" /tmp/flink-ckpt-weir-updating
cp -r ../shared/flink-anchor "$ANCHOR"
chmod -R u+w "$ANCHOR"
cp benches/flink/q17.sql "$ANCHOR/sql/q17.sql"
/tmp/flinkenv/bin/python "$ANCHOR/flink_nexmark_state.py" --bids "$DATA/bids_5m.csv" --queries q17 \
  --parallelism 1 --repeat "$REPEAT" --warmup "$DATA/bids_100k.csv" \
  --conf state.backend.type=rocksdb --conf execution.checkpointing.interval=1s \
  --conf execution.checkpointing.incremental=true \
  --conf execution.checkpointing.dir=file:///tmp/flink-ckpt-weir-updating 2>/dev/null | grep '^{' > "$OUT/flink.jsonl" || true
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
weir = [json.loads(l) for l in open(f"{out}/weir.jsonl")]
flink = [json.loads(l) for l in open(f"{out}/flink.jsonl")]
best = lambda rs: max(rs, key=lambda r: r["events_per_cpu_s"])
mem = best([r for r in weir if r["state_backend"] == "memory"])
rocks = best([r for r in weir if r["state_backend"] == "rocksdb"])
f = max(r["bids"] / r["jvm_cpu_s"] for r in flink) if flink else float("nan")
print(f"{'q17':24} {'events/CPU-s':>13} {'peak MB':>8} {'changes/row':>12} {'vs Flink':>9}")
for name, r in [("weir memory", mem), ("weir rocksdb, 1s ckpt", rocks)]:
    print(f"{name:24} {r['events_per_cpu_s']:>13,.0f} {r['peak_rss_mb']:>8.1f} {r['rows_out'] / r['events']:>12.3f} {r['events_per_cpu_s'] / f:>8.2f}x")
# Flink without mini-batch emits per input row: +I for a group's first row, then a -U/+U pair
# (q17's count changes with every row): 2 - groups/rows changelog rows per input row.
print(f"{'flink rocksdb, 1s ckpt':24} {f:>13,.0f} {'':>8} {'2 - g/rows':>12}")
PY
