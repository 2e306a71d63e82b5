#!/usr/bin/env bash
# Azure Blob Storage's emulator (Azurite, Microsoft's, from the npm registry) on loopback, for
# the tests of checkpoints in `az://` storage. Installed with `npm ci` from the lock file in
# scripts/azurite/ (every package pinned by its integrity hash) into ~/.cache/weir/azurite.
#
#   scripts/azurite.sh install                 install if missing
#   scripts/azurite.sh start PORT CONTAINER    start the blob service (fresh data), create
#                                              CONTAINER, print the pid
#
# The account is the emulator's well-known one: devstoreaccount1 and its published key.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PREFIX="${WEIR_AZURITE_DIR:-$HOME/.cache/weir/azurite}"

install() {
  if [ -x "$PREFIX/node_modules/.bin/azurite-blob" ] && cmp -s "$HERE/azurite/package-lock.json" "$PREFIX/package-lock.json"; then
    return
  fi
  if ! command -v npm >/dev/null 2>&1; then
    # These machines ship Node.js; a bare Debian 12 gets Debian's.
    echo "azurite: installing Debian's nodejs and npm" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >&2
  fi
  mkdir -p "$PREFIX"
  cp "$HERE/azurite/package.json" "$HERE/azurite/package-lock.json" "$HERE/azurite/create-container.js" "$PREFIX/"
  (cd "$PREFIX" && npm ci --no-audit --no-fund --loglevel=error >&2)
}

case "${1:-}" in
  install)
    install
    ;;
  start)
    port="${2:?port}"
    container="${3:?container}"
    install
    data="$(mktemp -d "${TMPDIR:-/tmp}/weir-azurite-XXXXXX")"
    "$PREFIX/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$port" --location "$data" \
      --silent --skipApiVersionCheck >"$data.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        (cd "$PREFIX" && node create-container.js "$port" "$container")
        echo "$pid"
        exit 0
      fi
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "azurite: the emulator exited; its log:" >&2
        cat "$data.log" >&2
        exit 1
      fi
      sleep 0.05
    done
    echo "azurite: nothing on port $port after 10 s" >&2
    kill "$pid" 2>/dev/null || true
    exit 1
    ;;
  *)
    echo "usage: $0 install | start PORT CONTAINER" >&2
    exit 2
    ;;
esac
