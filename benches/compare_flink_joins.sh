#!/usr/bin/env bash
# Joins and ranking (Nexmark q20 join, q19 Top-N, q18 deduplication), Weir then Flink, in one run:
#   bash benches/compare_flink_joins.sh [DATA_DIR]   (bids_5m.csv and auctions_5m.csv; make them with
#   ../shared/flink-anchor/nexmark_gen.py --bids 5000000 --persons-auctions --out DATA_DIR)
# Weir: memory state, and RocksDB state with 1 s checkpoints, p=1, blackhole sink.
# Flink 1.20.5: RocksDB state backend, 1 s incremental checkpoints, p=1 (../shared/flink-anchor,
# copied with benches/flink/q18.sql, q19.sql, q20.sql added to its queries). Release build;
# best of REPEAT (default 3); QUERIES picks some (default q20,q19,q18).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
DATA="${1:-/tmp/nexmark-pa}"
OUT="${OUT:-/tmp/weir-vs-flink-joins}"
REPEAT="${REPEAT:-3}"
QUERIES="${QUERIES:-q20,q19,q18}"
mkdir -p "$OUT"
rm -f "$OUT/weir.jsonl" "$OUT/flink.jsonl"
bench() { cargo bench --quiet --workspace --bench nexmark -- --source "csv:$DATA/bids_5m.csv" --queries "$QUERIES" \
  --parallelism 1 --repeat "$REPEAT" --out "$OUT/weir.jsonl" "$@"; }
bench --state-backend memory
bench --state-backend rocksdb --checkpoint-interval 1s
ANCHOR="$OUT/flink-anchor"
rm -rf "$ANCHOR" /tmp/flink-ckpt-weir-joins
cp -r ../shared/flink-anchor "$ANCHOR"
chmod -R u+w "$ANCHOR"
for q in q18 q19 q20; do
  sed "s#AUCTIONS_PATH#$DATA/auctions_5m.csv#" "benches/flink/$q.sql" > "$ANCHOR/sql/$q.sql"
done
/tmp/flinkenv/bin/python "$ANCHOR/flink_nexmark_state.py" --bids "$DATA/bids_5m.csv" --queries "$QUERIES" \
  --parallelism 1 --repeat "$REPEAT" --warmup "${WARMUP:-/tmp/nexmark/bids_100k.csv}" \
  --conf state.backend.type=rocksdb --conf execution.checkpointing.interval=1s \
  --conf execution.checkpointing.incremental=true \
  --conf execution.checkpointing.dir=file:///tmp/flink-ckpt-weir-joins 2>/dev/null | grep '^{' > "$OUT/flink.jsonl" || true
python3 - "$OUT" "$QUERIES" <<'PY'
import json, sys
out, queries = sys.argv[1], sys.argv[2].split(",")
weir = [json.loads(l) for l in open(f"{out}/weir.jsonl")]
flink = [json.loads(l) for l in open(f"{out}/flink.jsonl")]
print(f"{'query':6} {'engine':24} {'events/CPU-s':>13} {'events/s':>10} {'peak MB':>8} {'vs Flink':>9}")
for q in queries:
    fl = [r["bids"] / r["jvm_cpu_s"] for r in flink if r["query"] == q]
    f = max(fl) if fl else float("nan")
    for backend, name in [("memory", "weir memory"), ("rocksdb", "weir rocksdb, 1s ckpt")]:
        rs = [r for r in weir if r["query"] == q and r["state_backend"] == backend]
        if not rs:
            continue
        r = max(rs, key=lambda r: r["events_per_cpu_s"])
        print(f"{q:6} {name:24} {r['events_per_cpu_s']:>13,.0f} {r['events_per_s']:>10,.0f} {r['peak_rss_mb']:>8.1f} {r['events_per_cpu_s'] / f:>8.2f}x")
    fe = [r["eps_wall"] for r in flink if r["query"] == q]
    print(f"{q:6} {'flink rocksdb, 1s ckpt':24} {f:>13,.0f} {max(fe) if fe else 0:>10,.0f}")
PY
