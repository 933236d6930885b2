#!/usr/bin/env bash
# The test command: set-up (reused when current), then every test, unit and parallel; with no
# arguments (CI), then the CUDA host check in the mirror of the GPU machine's stack
# (scripts/cuda_host_check.sh). Arguments go to pytest and skip the CUDA host check.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$REPO/scripts/setup.sh")"
cd "$REPO"
export TF_CPP_MIN_LOG_LEVEL=2
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" tests
if [ $# -eq 0 ]; then
  bash "$REPO/scripts/cuda_host_check.sh"
fi
