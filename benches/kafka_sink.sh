#!/usr/bin/env bash
# Throughput of the Kafka sink, release build: Nexmark bids from the built-in generator into a
# Kafka topic on a loopback broker (scripts/kafka-broker.sh), with 1 s checkpoints, for each
# delivery guarantee. Prints wall time and the weir process's CPU time per mode.
#   [INTERVAL=1s] bash benches/kafka_sink.sh [EVENTS]      (default 300000 events = 276000 bids)
# The broker is the test broker (noida-db), which slows down past about 100k records: the
# figures bound what the sink costs Weir (CPU) more than what a Kafka cluster would take.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release --workspace --benches --quiet
WEIR="$CARGO_TARGET_DIR/release/weir"
EVENTS="${1:-300000}"
INTERVAL="${INTERVAL:-1s}"
DIR="$(mktemp -d)"
PORT="${PORT:-29092}"
PID="$(scripts/kafka-broker.sh start "$PORT" "$DIR/broker")"
trap 'kill "$PID" 2>/dev/null || true' EXIT
for mode in none at-least-once exactly-once; do
  cat > "$DIR/$mode.sql" <<SQL
SET 'parallelism' = '1';
SET 'checkpoint.interval' = '$INTERVAL';
SET 'checkpoint.dir' = '$DIR/checkpoints-$mode';
CREATE TABLE gen (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time TIMESTAMP(3), extra STRING)
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '$EVENTS');
CREATE TABLE out (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time TIMESTAMP(3), extra STRING)
  WITH ('connector' = 'kafka', 'topic' = 'bids-$mode', 'properties.bootstrap.servers' = '127.0.0.1:$PORT',
        'format' = 'json', 'key.fields' = 'auction', 'sink.delivery-guarantee' = '$mode',
        'sink.transactional-id-prefix' = 'bench-$mode');
INSERT INTO out SELECT * FROM gen;
SQL
  /usr/bin/time -f "$mode: wall %e s, user %U s, sys %S s" "$WEIR" run "$DIR/$mode.sql" 2>&1 >/dev/null \
    | grep -E "^$mode:|error" || true
  # What a read_committed consumer sees in the topic afterwards.
  cat > "$DIR/check-$mode.sql" <<SQL
SET 'parallelism' = '1';
CREATE TABLE t (auction BIGINT) WITH ('connector' = 'kafka', 'topic' = 'bids-$mode',
  'properties.bootstrap.servers' = '127.0.0.1:$PORT', 'format' = 'json',
  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset');
CREATE TABLE devnull (auction BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO devnull SELECT auction FROM t;
SQL
  "$WEIR" run "$DIR/check-$mode.sql" 2>&1 | grep -iE "rows? (read|written)|finished" | sed "s/^/  $mode read back: /" || true
done
echo "bids per mode: $(( EVENTS * 46 / 50 ))"
