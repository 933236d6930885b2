#!/usr/bin/env bash
# The test command: set-up (reused when current), then every test, unit and parallel; with no
# arguments (CI), then, in the mirror of the GPU machine's stack (Python 3.12, NumPy 2, torch 2.11),
# the CUDA host check (scripts/cuda_host_check.sh) and today's-torch lane (scripts/torch_lane.sh).
# Arguments go to pytest and skip both.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$REPO/scripts/setup.sh")"
cd "$REPO"
export TF_CPP_MIN_LOG_LEVEL=2
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" tests
if [ $# -eq 0 ]; then
  bash "$REPO/scripts/cuda_host_check.sh"
  bash "$REPO/scripts/torch_lane.sh"
fi
