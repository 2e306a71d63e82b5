#!/usr/bin/env bash
# What watching a job costs: q0 and tumble (RocksDB, 1 s checkpoints) on the 5M-bid CSV with
# `weir run`, once without the web endpoint and once with it on and scraped every second
# (/metrics, and the dashboard's /jobs/1 and /jobs/1/checkpoints), in pairs, RUNS pairs per
# query, alternating which runs first. Counts the weir process's CPU time (user + system, from wait4). Release build.
#
#   bash benches/web_cost.sh            (BIDS=/tmp/nexmark/bids_5m.csv RUNS=11)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
BIDS="${BIDS:-/tmp/nexmark/bids_5m.csv}"
RUNS="${RUNS:-11}"
OUT="${OUT:-/tmp/weir-web-cost}"
rm -rf "$OUT" && mkdir -p "$OUT"
cargo build --release -p weir-cli --quiet
WEIR="$CARGO_TARGET_DIR/release/weir"

BID="CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  date_time TIMESTAMP(3), extra STRING, WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH ('connector' = 'filesystem', 'path' = '$BIDS', 'format' = 'csv');"
cat > "$OUT/q0.sql" <<SQL
SET 'parallelism' = '1';
$BID
CREATE TABLE sink (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3), extra STRING)
  WITH ('connector' = 'blackhole');
INSERT INTO sink SELECT auction, bidder, price, date_time, extra FROM bid;
SQL
cat > "$OUT/tumble.sql" <<SQL
SET 'parallelism' = '1';
SET 'state.backend' = 'rocksdb';
SET 'checkpoint.interval' = '1s';
SET 'checkpoint.dir' = '$OUT/checkpoints';
$BID
CREATE TABLE sink (auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT, sum_price BIGINT)
  WITH ('connector' = 'blackhole');
INSERT INTO sink SELECT auction, window_start, window_end, COUNT(*) AS cnt, SUM(price) AS sum_price
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end;
SQL

python3 - "$WEIR" "$OUT" "$RUNS" <<'PY'
import os, socket, statistics, subprocess, sys, threading, time, urllib.request

weir, out, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def run(query, web):
    args = [weir, "run", "--from-scratch"]
    port = free_port()
    if web:
        args += ["--web", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(args + [f"{out}/{query}.sql"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scrapes = [0]
    def scrape():
        while proc.poll() is None:
            for path in ["/metrics", "/jobs/1", "/jobs/1/checkpoints"]:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read()
                    scrapes[0] += 1
                except Exception:
                    pass
            time.sleep(1)
    scraper = threading.Thread(target=scrape, daemon=True)
    if web:
        scraper.start()
    began = time.time()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = status
    if status != 0:
        sys.exit(f"{query} failed (status {status})")
    return usage.ru_utime + usage.ru_stime, time.time() - began, scrapes[0]

print(f"{'query':8} {'pair':>4} {'off CPU-s':>10} {'on CPU-s':>9} {'scrapes':>8} {'on/off':>7}")
for query in ["q0", "tumble"]:
    ratios = []
    offs, ons = [], []
    for i in range(runs):
        # Which of the pair runs first alternates, so that a drift of the machine cancels out.
        if i % 2 == 0:
            off, _, _ = run(query, False)
            on, _, n = run(query, True)
        else:
            on, _, n = run(query, True)
            off, _, _ = run(query, False)
        offs.append(off); ons.append(on); ratios.append(on / off)
        print(f"{query:8} {i + 1:>4} {off:>10.2f} {on:>9.2f} {n:>8} {on / off:>7.3f}", flush=True)
    print(f"{query:8} {'med':>4} {statistics.median(offs):>10.2f} {statistics.median(ons):>9.2f} {'':>8} "
          f"{statistics.median(ratios):>7.3f}  (median of the pairs' ratios)")
    print(f"{query:8} {'sum':>4} {sum(offs):>10.2f} {sum(ons):>9.2f} {'':>8} {sum(ons) / sum(offs):>7.3f}  (all runs)")
PY
