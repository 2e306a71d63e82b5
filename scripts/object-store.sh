#!/usr/bin/env bash
# An S3-compatible object store on loopback for tests and CI: moto's server mode from PyPI,
# pinned by hash, in a virtualenv under ~/.cache/weir. It is an emulator of S3's API: no real
# object store (MinIO, Ceph's gateway, Garage) installs on this machine from Debian's
# packages, PyPI or npm. It keeps objects in memory and takes any credentials; it does honour
# conditional writes (If-None-Match), which Weir's manifests use.
#
#   scripts/object-store.sh install              install if missing
#   scripts/object-store.sh start PORT BUCKET    start a store, create BUCKET, wait until it
#                                                answers, print its pid
#
# Weir talks S3's HTTP API to it through the object_store crate; nothing in Weir depends on
# this server.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${WEIR_OBJECT_STORE_VENV:-$HOME/.cache/weir/object-store-venv}"

install() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import moto.server, flask' 2>/dev/null; then
    return
  fi
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$HERE/object-store-requirements.txt" >&2
}

case "${1:-}" in
  install)
    install
    ;;
  start)
    port="${2:?port}"
    bucket="${3:?bucket}"
    install
    log="${TMPDIR:-/tmp}/weir-object-store-$port.log"
    "$VENV/bin/python" -m moto.server -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do
      # A bucket is created with a plain PUT: moto takes any credentials.
      if "$VENV/bin/python" -c 'import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1], method="PUT"), timeout=1)' \
        "http://127.0.0.1:$port/$bucket" >/dev/null 2>&1; then
        echo "$pid"
        exit 0
      fi
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "object-store: the server exited; its log:" >&2
        cat "$log" >&2
        exit 1
      fi
      sleep 0.1
    done
    echo "object-store: no server on port $port after 10 s" >&2
    kill "$pid" 2>/dev/null || true
    exit 1
    ;;
  *)
    echo "usage: $0 install | start PORT BUCKET" >&2
    exit 2
    ;;
esac
