#!/usr/bin/env bash
# Today's torch without Horovod, beside the pinned torch 2.0.1 + Horovod 0.28.1 of the main venv:
# the DDP hook's tests (real 2- and 3-rank Gloo runs under torch.multiprocessing), the engine on
# torch tensors, the ranks' agreement, in the mirror venv (scripts/setup_mirror.sh: Python 3.12,
# NumPy 2, torch 2.11, the GPU machine's versions). Arguments go to pytest.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
MIRROR="$(bash scripts/setup_mirror.sh)" || { echo "torch lane: FAILED: no mirror environment"; exit 1; }
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
versions="$("$MIRROR/bin/python" -c 'import sys, numpy, torch; print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, NumPy {numpy.__version__}")')"
"$MIRROR/bin/python" -m pytest -q -p no:cacheprovider -rfEs "$@" tests/test_torch_ddp.py tests/test_torch_engine.py \
  tests/test_agreement.py
rc=$?
echo "torch lane ($versions): $([ $rc -eq 0 ] && echo passed || echo FAILED)"
exit $rc
