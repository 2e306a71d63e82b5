#!/usr/bin/env bash
# A real browser for the dashboard's tests: Debian's chromium, run headless. Installs it if
# missing and prints the binary's path.
#
#   scripts/chromium.sh install
set -euo pipefail

install() {
  for bin in chromium chromium-browser; do
    if command -v "$bin" >/dev/null 2>&1; then
      command -v "$bin"
      return
    fi
  done
  echo "chromium: installing Debian's chromium" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2
  # Fonts so that the screenshots show text.
  $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
  command -v chromium
}

case "${1:-}" in
  install) install ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
