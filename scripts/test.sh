#!/usr/bin/env bash
# Build Weir and run every test: unit tests, the sqllogictest suites in sql-tests/ and the
# integration tests (CLI, shell through a pseudo-terminal, embedded API).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo test --workspace --no-fail-fast
