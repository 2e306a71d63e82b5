#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for tests, CI and benchmarks: Debian's
# `postgresql` package (installed if missing), a cluster made by `initdb` in a directory of
# the caller's, run as an unprivileged user (PostgreSQL refuses to run as root, and CI runs
# as root).
#
#   scripts/postgres.sh install          install the server if missing; print its bin directory
#   scripts/postgres.sh start DATA_DIR   initdb into DATA_DIR (made fresh), start a server on a
#                                        free loopback port; print "PORT PID". Superuser 'weir',
#                                        database 'weir', no password (trust, loopback only).
#   scripts/postgres.sh stop DATA_DIR    stop it (immediate) and remove DATA_DIR
#
# Settings: max_prepared_transactions = 64, or $WEIR_POSTGRES_MAX_PREPARED (the exactly-once
# sink prepares one transaction per task per checkpoint); fsync off, since the cluster is
# thrown away.
set -euo pipefail

bindir() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

install() {
  if ! bindir >/dev/null; then
    echo "postgres: installing Debian's postgresql" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # The package's own cluster is not used (and not created): only the binaries.
    $SUDO mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/weir.conf >/dev/null
    $SUDO apt-get install -y -qq --no-install-recommends postgresql >&2
  fi
  bindir
}

# Run a command as the unprivileged user when we are root.
as_user() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "${WEIR_POSTGRES_USER:-postgres}" -- "$@"
  else
    "$@"
  fi
}

case "${1:-}" in
  install)
    install
    ;;
  start)
    data="${2:?data dir}"
    bin="$(install)"
    # Some machines ship /dev/null as 0600, which breaks initdb for any user but root;
    # Debian's own mode is 0666.
    if [ "$(stat -c %a /dev/null)" != "666" ]; then
      SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
      $SUDO chmod 0666 /dev/null
    fi
    rm -rf "$data"
    mkdir -p "$data"
    if [ "$(id -u)" -eq 0 ]; then
      chown "${WEIR_POSTGRES_USER:-postgres}" "$data"
      # The user must reach the directory through its parents.
      p="$(dirname "$(realpath "$data")")"
      while [ "$p" != "/" ]; do chmod o+x "$p" 2>/dev/null || true; p="$(dirname "$p")"; done
    fi
    as_user "$bin/initdb" -D "$data/db" -U weir -A trust -E UTF8 --no-locale >"$data/initdb.log" 2>&1 || {
      echo "postgres: initdb failed; its log:" >&2
      cat "$data/initdb.log" >&2
      exit 1
    }
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    cat >>"$data/db/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$data'
max_prepared_transactions = ${WEIR_POSTGRES_MAX_PREPARED:-64}
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 256MB
EOF
    as_user "$bin/pg_ctl" -D "$data/db" -l "$data/server.log" -w -t 60 start >/dev/null || {
      echo "postgres: the server did not start; its log:" >&2
      cat "$data/server.log" >&2
      exit 1
    }
    as_user "$bin/createdb" -h 127.0.0.1 -p "$port" -U weir weir
    echo "$port $(head -n 1 "$data/db/postmaster.pid")"
    ;;
  stop)
    data="${2:?data dir}"
    bin="$(bindir)"
    if [ -f "$data/db/postmaster.pid" ]; then
      as_user "$bin/pg_ctl" -D "$data/db" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$data"
    ;;
  *)
    echo "usage: $0 install | start DATA_DIR | stop DATA_DIR" >&2
    exit 2
    ;;
esac
