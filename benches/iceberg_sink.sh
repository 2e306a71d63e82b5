#!/usr/bin/env bash
# Throughput of the Iceberg sink against the filesystem sink writing Parquet, release build,
# same rows, same machine: Nexmark bids from the built-in generator, p=1, 1 s checkpoints
# (each a snapshot, or published files), zstd in both. Rows are counted back by pyarrow and
# pyiceberg (scripts/lake.sh). Best of REPEAT runs each; rows per second and per CPU-second.
#   [EVENTS=5000000] [REPEAT=3] bash benches/iceberg_sink.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
scripts/lake.sh install
cargo build --release -p weir-cli --quiet
WEIR="$CARGO_TARGET_DIR/release/weir"
EVENTS="${EVENTS:-5000000}"
REPEAT="${REPEAT:-3}"
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT

job() { # job NAME SINK_OPTIONS
  cat > "$DIR/$1.sql" <<SQL
SET 'checkpoint.interval' = '1s';
SET 'checkpoint.dir' = '$DIR/checkpoints-$1';
CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  date_time TIMESTAMP(3), extra STRING) WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '$EVENTS');
CREATE TABLE out (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
  date_time TIMESTAMP(3), extra STRING) WITH ($2);
INSERT INTO out SELECT * FROM bid;
SQL
}

run() { # run NAME COUNT_TARGET -> "rows,seconds,cpu"
  rm -rf "$DIR/checkpoints-$1" "$DIR/out-$1"
  local t0 t1
  t0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$DIR/time" "$WEIR" run "$DIR/$1.sql" >/dev/null 2>"$DIR/err" || { cat "$DIR/err" >&2; exit 1; }
  t1=$(date +%s.%N)
  local target="$2"
  [ -d "$target/metadata" ] && target=$(ls "$target"/metadata/v*.metadata.json | sort -V | tail -n 1)
  local n
  n=$(scripts/lake.sh count "$target")
  read -r user sys < "$DIR/time"
  echo "$n,$(python3 -c "print(f'{$t1 - $t0:.2f}')"),$(python3 -c "print(f'{$user + $sys:.2f}')")"
}

job parquet "'connector' = 'filesystem', 'format' = 'parquet', 'parquet.compression' = 'zstd', 'path' = '$DIR/out-parquet'"
job iceberg "'connector' = 'iceberg', 'catalog-type' = 'hadoop', 'warehouse' = '$DIR/out-iceberg', 'catalog-database' = 'db'"

declare -A best
for sink in parquet iceberg; do
  for _ in $(seq "$REPEAT"); do
    if [ "$sink" = parquet ]; then r=$(run parquet "$DIR/out-parquet"); else r=$(run iceberg "$DIR/out-iceberg/db/out"); fi
    echo "$sink: rows,seconds,cpu = $r" >&2
    IFS=, read -r n secs cpu <<< "$r"
    if [ -n "${rows:-}" ] && [ "$n" != "$rows" ]; then echo "$sink wrote $n rows, the other $rows" >&2; exit 1; fi
    rows=$n
    prev="${best[$sink]:-}"
    if [ -z "$prev" ] || python3 -c "import sys; sys.exit(0 if $secs < ${prev%%,*} else 1)"; then best[$sink]="$secs,$cpu"; fi
  done
done
python3 - "$rows" "${best[parquet]}" "${best[iceberg]}" <<'PY'
import sys
rows = int(sys.argv[1])
(ps, pc), (is_, ic) = (map(float, a.split(",")) for a in sys.argv[2:4])
print(f"rows: {rows:,} (Nexmark bids, 7 columns), p=1, 1 s checkpoints, zstd, best of runs")
print(f"{'sink':<10}{'rows/s':>14}{'rows/CPU-s':>14}{'seconds':>10}")
print(f"{'parquet':<10}{rows/ps:>14,.0f}{rows/pc:>14,.0f}{ps:>10.2f}")
print(f"{'iceberg':<10}{rows/is_:>14,.0f}{rows/ic:>14,.0f}{is_:>10.2f}")
print(f"iceberg / parquet: {ps/is_:.2f} (rows/s), {pc/ic:.2f} (rows/CPU-s)")
PY
