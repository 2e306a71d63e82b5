#!/usr/bin/env bash
# Build Weir and run the quickstart job: a shipped sample of Nexmark bids through a
# continuous query to the console. No external service.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo run --quiet -p weir-cli -- run examples/quickstart.sql
