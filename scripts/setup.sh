#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs to build Weir. Idempotent; installs only what
# is missing. Sourced by the other scripts; exports CARGO_TARGET_DIR so that every build
# (yours, the tests', CI's) reuses one persistent target directory.
set -euo pipefail

# System packages the build needs: a C/C++ toolchain (librdkafka builds with it), libclang
# for RocksDB's bindings; OpenSSL's headers for librdkafka's TLS and SASL (SCRAM); Python with venv
# for the tests' Kafka-protocol broker.
APT_PACKAGES=(gcc g++ make pkg-config libclang-dev libssl-dev openssl python3 python3-venv)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install a Rust toolchain (1.85 or newer, e.g. with rustup) and retry" >&2
  exit 1
fi

# PostgreSQL for the jdbc connector's tests (a throwaway server each, started by
# scripts/postgres.sh): Debian's package, without its own cluster.
"$(dirname "${BASH_SOURCE[0]}")/postgres.sh" install >/dev/null

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
mkdir -p "$CARGO_TARGET_DIR"
