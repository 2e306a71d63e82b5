#!/usr/bin/env bash
# One job on 1, 2 and 3 `weir worker` processes against `weir run` of the same file, release
# build, on the loopback test broker (scripts/kafka-broker.sh):
#   [EVENTS=100000] [PARTITIONS=6] [REPEAT=3] bash benches/workers.sh
# The job: Nexmark bids from a Kafka topic of PARTITIONS partitions, COUNT(*) per auction (a
# keyed aggregate behind a hash exchange, which workers cut into a repartition topic of
# 'parallelism' partitions), upserted by key into a Kafka topic exactly once, 1 s
# checkpoints. Each way runs REPEAT times over EVENTS/2 and over EVENTS events, and each run's
# output is checked (the committed counts add up to the bids). Printed, as medians: the wall
# time to the last task's end, events per second, the CPU time of Weir's processes and of
# the broker.
# The difference between the two sizes, per event, is the cost of a record without the fixed
# costs (process start, group joins and rebalances, the checkpoints before the end commits);
# the 1-worker figure minus `weir run`'s is the repartition hop's per-record cost against the
# in-process exchange. The broker shares this machine's two cores with the workers and slows
# down past about 100k records.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -p weir-cli --quiet
WEIR="$CARGO_TARGET_DIR/release/weir"
EVENTS="${EVENTS:-100000}"
PARTITIONS="${PARTITIONS:-6}"
REPEAT="${REPEAT:-3}"
DIR="$(mktemp -d)"
PORT="${PORT:-29093}"
PID="$(scripts/kafka-broker.sh start "$PORT" "$DIR/broker")"
trap 'kill "$PID" 2>/dev/null || true' EXIT
broker_cpu() { # seconds of CPU the broker has used
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$PID/stat"
}
bids_table() { # topic
  echo "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
  WITH ('connector' = 'kafka', 'topic' = '$1', 'properties.bootstrap.servers' = '127.0.0.1:$PORT',
        'format' = 'json', 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset')"
}
load() { # topic events
  python3 scripts/kafka-create-topic.py "127.0.0.1:$PORT" "$1" "$PARTITIONS"
  cat > "$DIR/load-$1.sql" <<SQL
SET 'parallelism' = '1';
CREATE TABLE gen (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '$2');
$(bids_table "$1");
INSERT INTO bids SELECT * FROM gen;
SQL
  "$WEIR" run "$DIR/load-$1.sql" >/dev/null
}
job() { # name topic -> the job's SQL
  cat <<SQL
SET 'parallelism' = '6';
SET 'checkpoint.interval' = '1s';
SET 'checkpoint.dir' = '$DIR/checkpoints-$1';
SET 'pipeline.name' = '$1';
$(bids_table "$2");
CREATE TABLE counts_$1 (auction BIGINT, n BIGINT, PRIMARY KEY (auction) NOT ENFORCED)
  WITH ('connector' = 'upsert-kafka', 'topic' = 'counts-$1', 'properties.bootstrap.servers' = '127.0.0.1:$PORT',
        'key.format' = 'json', 'value.format' = 'json', 'sink.delivery-guarantee' = 'exactly-once',
        'sink.transactional-id-prefix' = 'counts-$1');
INSERT INTO counts_$1 SELECT auction, COUNT(*) FROM bids GROUP BY auction;
SQL
}
check() { # name size: the committed counts add up to every bid, once
  cat > "$DIR/check-$1.sql" <<SQL
CREATE TABLE counts (auction BIGINT, n BIGINT, PRIMARY KEY (auction) NOT ENFORCED)
  WITH ('connector' = 'upsert-kafka', 'topic' = 'counts-$1', 'properties.bootstrap.servers' = '127.0.0.1:$PORT',
        'key.format' = 'json', 'value.format' = 'json', 'scan.bounded.mode' = 'latest-offset');
SELECT SUM(n) AS bids FROM counts;
SQL
  local want=$([ "$2" = small ] && echo "$BIDS_SMALL" || echo "$BIDS_LARGE")
  # A commit's markers reach the partitions just after it returns: a reader right after the
  # last one may still stop before them.
  for _ in 1 2 3 4 5; do
    "$WEIR" run "$DIR/check-$1.sql" 2>&1 | grep -qw "$want" && return 0
    sleep 1
  done
  echo "$1: the committed counts do not add up to $want bids:" >&2
  "$WEIR" run "$DIR/check-$1.sql" >&2 || true
  return 1
}
run() { # way size repetition -> "wall weir_cpu broker_cpu"
  local way="$1" size="$2" name="w$1_$2_$3" start end before pids=()
  job "$name" "bids-$size" > "$DIR/$name.sql"
  before=$(broker_cpu)
  start=$(date +%s.%N)
  if [ "$way" = inproc ]; then
    /usr/bin/time -f "%U %S" -o "$DIR/$name-1.time" "$WEIR" run "$DIR/$name.sql" >/dev/null 2>"$DIR/$name-1.log" ||
      { cat "$DIR/$name-1.log" >&2; return 1; }
  else
    for i in $(seq 1 "$way"); do
      /usr/bin/time -f "%U %S" -o "$DIR/$name-$i.time" "$WEIR" worker "$DIR/$name.sql" --id "$name-$i" >/dev/null 2>"$DIR/$name-$i.log" &
      pids+=($!)
    done
    for i in "${!pids[@]}"; do
      wait "${pids[$i]}" || { cat "$DIR/$name-$(( i + 1 )).log" >&2; return 1; }
    done
  fi
  end=$(date +%s.%N)
  check "$name" "$size"
  echo "$(echo "$end - $start" | bc) $(cat "$DIR/$name"-*.time | awk '{s += $1 + $2} END {print s}') $(echo "$(broker_cpu) - $before" | bc)"
}
SMALL=$(( EVENTS / 2 ))
load "bids-small" "$SMALL"
load "bids-large" "$EVENTS"
BIDS_SMALL=$(( SMALL * 46 / 50 ))
BIDS_LARGE=$(( EVENTS * 46 / 50 ))
echo "bids: $BIDS_SMALL and $BIDS_LARGE, in topics of $PARTITIONS partitions; parallelism 6"
printf '%-16s %9s %11s %9s %9s %15s %15s\n' way wall events/s "Weir CPU" "broker" "Weir us/event" "broker us/event"
for way in inproc 1 2 3; do
  : > "$DIR/small.txt"
  : > "$DIR/large.txt"
  for r in $(seq 1 "$REPEAT"); do
    run "$way" small "$r" >> "$DIR/small.txt"
    run "$way" large "$r" >> "$DIR/large.txt"
  done
  label=$([ "$way" = inproc ] && echo "weir run" || echo "$way worker(s)")
  python3 -c "
import statistics, sys
label, small, large, ns, nl = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
med = lambda f: [statistics.median(c) for c in zip(*[map(float, l.split()) for l in open(f) if l.strip()])]
(ws, cs, bs), (wl, cl, bl) = med(small), med(large)
d = nl - ns
print(f'{label:16} {wl:7.2f} s {nl / wl:11.0f} {cl:7.2f} s {bl:7.2f} s {(cl - cs) / d * 1e6:15.1f} {(bl - bs) / d * 1e6:15.1f}')
" "$label" "$DIR/small.txt" "$DIR/large.txt" "$BIDS_SMALL" "$BIDS_LARGE"
done
echo "(medians of $REPEAT runs; wall, events/s and CPU: the larger input; us/event: the difference between the two sizes, per bid)"
