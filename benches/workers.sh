#!/usr/bin/env bash
# One job on 1, 2 and 3 `weir worker` processes against `weir run` of the same file, release
# build, on the loopback test broker (scripts/kafka-broker.sh):
#   [EVENTS=50000] bash benches/workers.sh
# The job: Nexmark bids from a Kafka topic, COUNT(*) per auction (a keyed aggregate behind a
# hash exchange, which workers cut into a repartition topic of 'parallelism' partitions),
# upserted by key into a Kafka topic exactly once, 1 s checkpoints. Prints per run the wall
# time to the last task's end, events per second, and the CPU time of all its processes.
# It does not isolate the repartition hop: `weir run`'s exactly-once Kafka sink opens a
# producer per transaction and sink task, where a worker's task has one. The broker shares this machine's two cores
# with the workers and slows down past about 100k records: the figures bound what workers
# cost Weir more than what a Kafka cluster would take.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -p weir-cli --quiet
WEIR="$CARGO_TARGET_DIR/release/weir"
EVENTS="${EVENTS:-50000}"
BIDS=$(( EVENTS * 46 / 50 ))
DIR="$(mktemp -d)"
PORT="${PORT:-29093}"
PID="$(scripts/kafka-broker.sh start "$PORT" "$DIR/broker")"
trap 'kill "$PID" 2>/dev/null || true' EXIT
BIDS_TABLE="CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
  WITH ('connector' = 'kafka', 'topic' = 'bids', 'properties.bootstrap.servers' = '127.0.0.1:$PORT',
        'format' = 'json', 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset')"
cat > "$DIR/load.sql" <<SQL
SET 'parallelism' = '1';
CREATE TABLE gen (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '$EVENTS');
$BIDS_TABLE;
INSERT INTO bids SELECT * FROM gen;
SQL
"$WEIR" run "$DIR/load.sql" >/dev/null
job() { # name -> the job's SQL
  cat <<SQL
SET 'parallelism' = '6';
SET 'checkpoint.interval' = '1s';
SET 'checkpoint.dir' = '$DIR/checkpoints-$1';
SET 'pipeline.name' = '$1';
$BIDS_TABLE;
CREATE TABLE counts_$1 (auction BIGINT, n BIGINT, PRIMARY KEY (auction) NOT ENFORCED)
  WITH ('connector' = 'upsert-kafka', 'topic' = 'counts-$1', 'properties.bootstrap.servers' = '127.0.0.1:$PORT',
        'key.format' = 'json', 'value.format' = 'json', 'sink.delivery-guarantee' = 'exactly-once',
        'sink.transactional-id-prefix' = 'counts-$1');
INSERT INTO counts_$1 SELECT auction, COUNT(*) FROM bids GROUP BY auction;
SQL
}
report() { # label wall cpu
  python3 -c "import sys; l, w, c, b = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]);
print(f'{l:18} wall {w:6.2f} s  {b / w:9.0f} events/s  CPU {c:6.2f} s  {c / b * 1e6:6.1f} us/event')" "$1" "$2" "$3" "$BIDS"
}
job inproc > "$DIR/inproc.sql"
start=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o "$DIR/inproc.time" "$WEIR" run "$DIR/inproc.sql" >/dev/null 2>&1
end=$(date +%s.%N)
INPROC_CPU=$(awk '{print $1 + $2}' "$DIR/inproc.time")
report "weir run (p=6)" "$(echo "$end - $start" | bc)" "$INPROC_CPU"
for workers in 1 2 3; do
  name="w$workers"
  job "$name" > "$DIR/$name.sql"
  start=$(date +%s.%N)
  pids=()
  for i in $(seq 1 "$workers"); do
    /usr/bin/time -f "%U %S" -o "$DIR/$name-$i.time" "$WEIR" worker "$DIR/$name.sql" --id "$name-$i" >/dev/null 2>"$DIR/$name-$i.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  end=$(date +%s.%N)
  cpu=$(cat "$DIR/$name"-*.time | awk '{s += $1 + $2} END {print s}')
  report "$workers worker(s)" "$(echo "$end - $start" | bc)" "$cpu"
done
echo "bids: $BIDS; the bids topic has $("$WEIR" status "$DIR/w1.sql" 2>/dev/null | grep -c '^    1/') partition(s)"
