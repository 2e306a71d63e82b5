#!/usr/bin/env bash
# Build Weir and run every test: unit tests, the sqllogictest suites in sql-tests/ and the
# integration tests (CLI, shell through a pseudo-terminal, embedded API, Kafka against a
# Kafka-protocol broker on loopback, PostgreSQL against throwaway servers that
# scripts/postgres.sh starts as an unprivileged user, checkpoints in an S3-compatible store
# that scripts/object-store.sh starts and in Azure's emulator that scripts/azurite.sh starts).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
# The Kafka tests start their own broker through this script; install it first (pinned).
scripts/kafka-broker.sh install >/dev/null
# The web endpoint's tests: a real browser (Debian's chromium) and Prometheus' own parser.
scripts/chromium.sh install >/dev/null
scripts/parse-metrics.sh install
# Iceberg tables and Avro read back by independent readers (pyiceberg, fastavro; pinned by hash).
scripts/lake.sh install
# Checkpoints in an object store: an S3-compatible server (pinned by hash).
scripts/object-store.sh install
# ... and Azure Blob Storage's emulator (npm, pinned by the lock file's hashes).
scripts/azurite.sh install
cargo test --workspace --no-fail-fast
