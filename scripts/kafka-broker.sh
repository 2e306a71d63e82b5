#!/usr/bin/env bash
# A Kafka-protocol broker on loopback for tests and CI (Apache Kafka cannot be installed
# here): the noida-db binary from PyPI, pinned by hash, in a virtualenv under ~/.cache/weir.
#
#   scripts/kafka-broker.sh install              install if missing; print the binary's path
#   scripts/kafka-broker.sh start PORT DATA_DIR  start a broker (fresh DATA_DIR), wait until it
#                                                accepts connections, print its pid
#
# Weir talks plain Kafka protocol to it; nothing in Weir depends on this broker.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${WEIR_NOIDA_VENV:-$HOME/.cache/weir/noida-venv}"

binary() {
  "$VENV/bin/python" -c 'import os, noida_db; print(os.path.join(os.path.dirname(noida_db.__file__), "noida-db"))'
}

install() {
  if [ -x "$VENV/bin/python" ] && bin="$(binary 2>/dev/null)" && [ -x "$bin" ]; then
    echo "$bin"
    return
  fi
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$HERE/noida-requirements.txt" >&2
  bin="$(binary)"
  chmod +x "$bin"
  echo "$bin"
}

case "${1:-}" in
  install)
    install
    ;;
  start)
    port="${2:?port}"
    data="${3:?data dir}"
    bin="$(install)"
    rm -rf "$data"
    mkdir -p "$data"
    "$bin" start --only kafka --host 127.0.0.1 --kafka-port "$port" --data-dir "$data" >"$data.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "$pid"
        exit 0
      fi
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "kafka-broker: the broker exited; its log:" >&2
        cat "$data.log" >&2
        exit 1
      fi
      sleep 0.05
    done
    echo "kafka-broker: no broker on port $port after 10 s" >&2
    kill "$pid" 2>/dev/null || true
    exit 1
    ;;
  *)
    echo "usage: $0 install | start PORT DATA_DIR" >&2
    exit 2
    ;;
esac
