#!/usr/bin/env bash
# Incremental RocksDB checkpoints into a local directory and into an S3-compatible object
# store, side by side: the incremental_state bench run twice over the same state (KEYS keys
# of 100 bytes, ROUNDS rounds updating 1% of them), once with the shared files in a local
# directory and once in a bucket of the S3-compatible server of the tests
# (scripts/object-store.sh, an emulator on loopback). Prints per checkpoint the bytes uploaded
# against the bytes referenced, and the time to begin and to upload it. Release build.
#
#   bash benches/checkpoint_storage.sh [KEYS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS="${1:-10000000}"
ROUNDS="${2:-5}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
cargo bench -p weir-state --bench incremental_state --no-run >/dev/null 2>&1
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PID=$(scripts/object-store.sh start "$PORT" weir)
trap 'kill $PID 2>/dev/null || true' EXIT
DIR="${TMPDIR:-/tmp}/weir-checkpoint-storage-bench"

echo "== local directory ($KEYS keys, $ROUNDS rounds)"
cargo bench -p weir-state --bench incremental_state -- "$KEYS" "$ROUNDS" "$DIR" 2>/dev/null
echo "== S3-compatible store on loopback"
AWS_ENDPOINT="http://127.0.0.1:$PORT" AWS_ALLOW_HTTP=true AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_VIRTUAL_HOSTED_STYLE_REQUEST=false \
  SHARED="s3://weir/bench" \
  cargo bench -p weir-state --bench incremental_state -- "$KEYS" "$ROUNDS" "$DIR" 2>/dev/null
rm -rf "$DIR"
