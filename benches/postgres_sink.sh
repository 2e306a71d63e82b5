#!/usr/bin/env bash
# Throughput of the jdbc (PostgreSQL) sink, release build, against `COPY` of the same rows by
# psql as the ceiling, on one throwaway server (scripts/postgres.sh). Rows: Nexmark auctions
# (unique ids) from the built-in generator, upserted by id into an empty table (inserts
# through ON CONFLICT) and then again into the full one (every row an update), for each
# delivery guarantee, with 1 s checkpoints. Best of REPEAT runs each.
#   [ROWS=300000] [REPEAT=3] [PARALLELISM=1] bash benches/postgres_sink.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -p weir-cli --quiet
WEIR="$CARGO_TARGET_DIR/release/weir"
ROWS="${ROWS:-300000}"
REPEAT="${REPEAT:-3}"
PARALLELISM="${PARALLELISM:-1}"
# An epoch of 50 Nexmark events holds 3 auctions.
[ $(( ROWS % 3 )) -eq 0 ] || { echo "ROWS must be a multiple of 3" >&2; exit 2; }
EVENTS=$(( ROWS / 3 * 50 ))
DIR="$(mktemp -d)"
chmod 755 "$DIR"
read -r PORT _ < <(scripts/postgres.sh start "$DIR/pg")
trap 'scripts/postgres.sh stop "$DIR/pg"' EXIT
export PGOPTIONS="-c client_min_messages=warning"
PSQL=(psql -h 127.0.0.1 -p "$PORT" -U weir -d weir -X -q -v ON_ERROR_STOP=1)
COLUMNS="id bigint PRIMARY KEY, itemName text, description text, initialBid bigint, reserve bigint,
  dateTime timestamp, expires timestamp, seller bigint, category bigint, extra text"

now() { date +%s.%N; }
rate() { python3 -c "import sys; print(f'{int($1 / ($3 - $2)):,}')"; }
best() { sort -t, -k1 -n -r | head -n 1; }

job() { # job MODE TABLE
  cat > "$DIR/$1.sql" <<SQL
SET 'parallelism' = '$PARALLELISM';
SET 'checkpoint.interval' = '1s';
SET 'checkpoint.dir' = '$DIR/checkpoints-$1';
CREATE TABLE gen (id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT,
  dateTime TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING)
  WITH ('connector' = 'nexmark', 'table' = 'auction', 'events' = '$EVENTS');
CREATE TABLE out (id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT,
  dateTime TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING,
  PRIMARY KEY (id) NOT ENFORCED)
  WITH ('connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:$PORT/weir', 'table-name' = '$2',
        'username' = 'weir', 'sink.delivery-guarantee' = '$1');
INSERT INTO out SELECT * FROM gen;
SQL
}

weir_run() { # weir_run MODE TABLE -> "rows/s,seconds,cpu"
  rm -rf "$DIR/checkpoints-$1"
  local t0 t1
  t0=$(now)
  /usr/bin/time -f "%U %S" -o "$DIR/time" "$WEIR" run "$DIR/$1.sql" >/dev/null 2>"$DIR/err" || { cat "$DIR/err" >&2; exit 1; }
  t1=$(now)
  local n
  n=$("${PSQL[@]}" -At -c "SELECT count(*) FROM $2")
  [ "$n" = "$ROWS" ] || { echo "$1 into $2: $n rows, expected $ROWS" >&2; exit 1; }
  read -r user sys < "$DIR/time"
  echo "$(rate "$ROWS" "$t0" "$t1"),$(python3 -c "print(f'{$t1 - $t0:.2f}')"),$(python3 -c "print(f'{$user + $sys:.2f}')")"
}

# The rows, once, for COPY.
"${PSQL[@]}" -c "CREATE TABLE seed ($COLUMNS)"
job none seed
weir_run none seed >/dev/null
"${PSQL[@]}" -c "\\copy seed TO '$DIR/rows.csv' CSV"

echo "rows: $ROWS (Nexmark auctions), parallelism $PARALLELISM, best of $REPEAT; rows/s, wall s, weir CPU s"
for i in $(seq 1 "$REPEAT"); do
  "${PSQL[@]}" -c "DROP TABLE IF EXISTS copied; CREATE TABLE copied ($COLUMNS)"
  t0=$(now)
  "${PSQL[@]}" -c "\\copy copied FROM '$DIR/rows.csv' CSV"
  t1=$(now)
  echo "$(rate "$ROWS" "$t0" "$t1"),$(python3 -c "print(f'{$t1 - $t0:.2f}')")"
done | sort -t, -k1 -n -r | head -n 1 | sed 's/^/COPY (psql, into an empty table with its primary key): /'

# The other batched path: COPY into a temporary table, then one INSERT … SELECT … ON CONFLICT
# (by psql, the same rows): what Weir's array statements are measured against.
SET_LIST="itemName = EXCLUDED.itemName, description = EXCLUDED.description, initialBid = EXCLUDED.initialBid,
  reserve = EXCLUDED.reserve, dateTime = EXCLUDED.dateTime, expires = EXCLUDED.expires, seller = EXCLUDED.seller,
  category = EXCLUDED.category, extra = EXCLUDED.extra"
cat > "$DIR/copy_upsert.sql" <<SQL
BEGIN;
CREATE TEMP TABLE staged (LIKE copied) ON COMMIT DROP;
\copy staged FROM '$DIR/rows.csv' CSV
INSERT INTO copied SELECT * FROM staged ON CONFLICT (id) DO UPDATE SET $SET_LIST;
COMMIT;
SQL
insert=""; update=""
for i in $(seq 1 "$REPEAT"); do
  "${PSQL[@]}" -c "DROP TABLE IF EXISTS copied; CREATE TABLE copied ($COLUMNS)"
  for pass in insert update; do
    t0=$(now)
    "${PSQL[@]}" -f "$DIR/copy_upsert.sql"
    t1=$(now)
    line="$(rate "$ROWS" "$t0" "$t1"),$(python3 -c "print(f'{$t1 - $t0:.2f}')")"$'\n'
    if [ "$pass" = insert ]; then insert+="$line"; else update+="$line"; fi
  done
done
echo "COPY into a temporary table + INSERT … ON CONFLICT (psql), into an empty table: $(printf '%s' "$insert" | best)"
echo "COPY into a temporary table + INSERT … ON CONFLICT (psql), into the full table: $(printf '%s' "$update" | best)"

for mode in none at-least-once exactly-once; do
  table="up_${mode//-/_}"
  job "$mode" "$table"
  insert=""; update=""
  for i in $(seq 1 "$REPEAT"); do
    "${PSQL[@]}" -c "DROP TABLE IF EXISTS $table; CREATE TABLE $table ($COLUMNS)"
    insert+="$(weir_run "$mode" "$table")"$'\n'
    update+="$(weir_run "$mode" "$table")"$'\n'
  done
  echo "weir $mode, upsert into an empty table: $(printf '%s' "$insert" | best)"
  echo "weir $mode, upsert into the full table (every row an update): $(printf '%s' "$update" | best)"
done
