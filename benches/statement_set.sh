#!/usr/bin/env bash
# A statement set against its INSERTs alone, release build: Nexmark q0 (pass-through) and the
# tumble aggregate over the same bids file, each alone, then both as one statement set, each
# into a blackhole table, p=1, best of 3. The set reads the file once for both INSERTs, so it
# should cost little more CPU than the more expensive INSERT alone; the last line gives the
# ratio.
#   bash benches/statement_set.sh [BIDS_CSV]
# (default /tmp/nexmark/bids_5m.csv, from ../shared/flink-anchor/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
BIDS="${1:-/tmp/nexmark/bids_5m.csv}"
OUT="${OUT:-benches/results/$(date +%F)-statement-set.jsonl}"
cargo bench -p weir-cli --bench nexmark -- --source "csv:$BIDS" --queries q0,tumble,q0+tumble \
  --parallelism 1 --repeat 3 --out "$OUT"
python3 - "$OUT" <<'PY'
import json, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[r["query"]] = r  # the last run of each query
print(f"{'query':<12}{'events':>10}{'cpu_s':>9}{'events/cpu-s':>15}{'rss MB':>9}")
for q in ("q0", "tumble", "q0+tumble"):
    r = runs[q]
    print(f"{q:<12}{r['events']:>10}{r['cpu_s']:>9.2f}{r['events_per_cpu_s']:>15.0f}{r['peak_rss_mb']:>9.0f}")
alone = max(runs["q0"]["cpu_s"], runs["tumble"]["cpu_s"])
print(f"statement set CPU / the more expensive INSERT alone: {runs['q0+tumble']['cpu_s'] / alone:.3f}x")
print(f"statement set CPU / both INSERTs run apart: {runs['q0+tumble']['cpu_s'] / (runs['q0']['cpu_s'] + runs['tumble']['cpu_s']):.3f}x")
PY
