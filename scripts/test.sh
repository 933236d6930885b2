#!/usr/bin/env bash
# The test command: set-up (reused when current), then every test, unit and parallel.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$REPO/scripts/setup.sh")"
cd "$REPO"
export TF_CPP_MIN_LOG_LEVEL=2
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" tests
