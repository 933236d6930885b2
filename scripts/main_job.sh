#!/usr/bin/env bash
# The main job: set-up (reused when current), then a 2-process Horovod training on real data
# for none / fp16 / q8 / q4 / auto, printed side by side. Extra arguments go to `horovod-q8 compare`.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$REPO/scripts/setup.sh")"
exec "$VENV/bin/horovod-q8" compare "$@"
