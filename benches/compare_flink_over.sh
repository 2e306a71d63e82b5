#!/usr/bin/env bash
# OVER aggregates, an anti join and MATCH_RECOGNIZE, Weir then Flink, in one run:
#   bash benches/compare_flink_over.sh [BIDS_DIR]   (default /tmp/nexmark, from ../shared/flink-anchor/setup.sh)
# Queries: over_avg (a moving average per auction over its last 10 bids), over_lag (each
# bidder's previous price), anti (bids of auctions without a bid over 9,000,000) and match
# (three rising prices in a row per auction within 10 seconds, MATCH_RECOGNIZE).
# Both engines: RocksDB state, 1 s checkpoints (Flink's incremental), p=1, the bids of BIDS from CSV,
# blackhole sink. Flink 1.20.5 from a copy of ../shared/flink-anchor with benches/flink/<q>.sql
# added. Release build; best of REPEAT (default 2). Prints events per CPU-second, the ratio,
# and Weir's peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
DATA="${1:-/tmp/nexmark}"
OUT="${OUT:-/tmp/weir-vs-flink-over}"
REPEAT="${REPEAT:-2}"
QUERIES="${QUERIES:-over_avg,over_lag,anti,match}"
# The bids file of DATA both engines read (bids_1m.csv: Flink's over_avg alone runs past 30 CPU-minutes on 5M).
BIDS="${BIDS:-bids_5m.csv}"
mkdir -p "$OUT"
rm -f "$OUT/weir.jsonl" "$OUT/flink.jsonl"
cargo bench --quiet --workspace --bench nexmark -- --source "csv:$DATA/$BIDS" --queries "$QUERIES" \
  --parallelism 1 --repeat "$REPEAT" --out "$OUT/weir.jsonl" --state-backend rocksdb --checkpoint-interval 1s
ANCHOR="$OUT/flink-anchor"
rm -rf "$ANCHOR" /tmp/flink-ckpt-weir-over
cp -r ../shared/flink-anchor "$ANCHOR"
chmod -R u+w "$ANCHOR"
for q in ${QUERIES//,/ }; do cp "benches/flink/$q.sql" "$ANCHOR/sql/$q.sql"; done
/tmp/flinkenv/bin/python "$ANCHOR/flink_nexmark_state.py" --bids "$DATA/$BIDS" --queries "$QUERIES" \
  --parallelism 1 --repeat "$REPEAT" --warmup "$DATA/bids_100k.csv" \
  --conf state.backend.type=rocksdb --conf execution.checkpointing.interval=1s \
  --conf execution.checkpointing.incremental=true \
  --conf execution.checkpointing.dir=file:///tmp/flink-ckpt-weir-over 2>/dev/null | grep '^{' > "$OUT/flink.jsonl" || true
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
weir = [json.loads(l) for l in open(f"{out}/weir.jsonl")]
flink = [json.loads(l) for l in open(f"{out}/flink.jsonl")]
print(f"{'query':10} {'Weir ev/CPU-s':>14} {'Flink ev/CPU-s':>15} {'ratio':>8} {'Weir peak MB':>13}")
for q in sorted({r["query"] for r in weir}):
    w = max((r for r in weir if r["query"] == q), key=lambda r: r["events_per_cpu_s"])
    fs = [r["bids"] / r["jvm_cpu_s"] for r in flink if r.get("query") == q and r.get("jvm_cpu_s")]
    f = max(fs) if fs else float("nan")
    print(f"{q:10} {w['events_per_cpu_s']:>14,.0f} {f:>15,.0f} {w['events_per_cpu_s'] / f:>7.2f}x {w['peak_rss_mb']:>13.1f}")
PY
