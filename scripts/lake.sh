#!/usr/bin/env bash
# The tests' independent readers of what Weir writes into data lakes and Avro: pyiceberg
# (over pyarrow) for Iceberg tables, fastavro for Avro. Pinned by hash, in a virtualenv under
# ~/.cache/weir. See scripts/lake.py for the commands.
#
#   scripts/lake.sh install     install if missing
#   scripts/lake.sh ARGS…       run scripts/lake.py ARGS…
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${WEIR_LAKE_VENV:-$HOME/.cache/weir/lake-venv}"

install() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import pyiceberg, fastavro, psycopg2, cramjam' 2>/dev/null; then
    return
  fi
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$HERE/lake-requirements.txt" >&2
}

case "${1:-}" in
  install) install ;;
  "") echo "usage: $0 install | table … | sql-table … | poll … | prune …" >&2; exit 2 ;;
  *) install; exec "$VENV/bin/python" "$HERE/lake.py" "$@" ;;
esac
