#!/usr/bin/env bash
# Scrape a Weir endpoint's /metrics and parse it with Prometheus' own Python client (pinned by
# hash, in a virtualenv under ~/.cache/weir): the tests' independent reader of the format.
#
#   scripts/parse-metrics.sh install     install if missing
#   scripts/parse-metrics.sh URL         print every sample as a JSON line: [name, {labels}, value]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${WEIR_METRICS_VENV:-$HOME/.cache/weir/metrics-venv}"

install() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import prometheus_client' 2>/dev/null; then
    return
  fi
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$HERE/web-test-requirements.txt" >&2
}

case "${1:-}" in
  install) install ;;
  http://*)
    install
    "$VENV/bin/python" - "$1" <<'PY'
import json, sys, urllib.request
from prometheus_client.openmetrics.parser import text_string_to_metric_families

with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
    kind = r.headers.get("Content-Type", "")
    text = r.read().decode("utf-8")
if not kind.startswith("application/openmetrics-text"):
    sys.exit(f"unexpected Content-Type: {kind}")
for family in text_string_to_metric_families(text):
    for s in family.samples:
        print(json.dumps([s.name, s.labels, s.value]))
PY
    ;;
  *) echo "usage: $0 install | URL" >&2; exit 2 ;;
esac
