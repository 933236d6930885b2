#!/usr/bin/env bash
# The GPU machine's Python stack, mirrored on this CPU machine (docs/gpu.md): Python 3.12, NumPy 2,
# CuPy 14 for CUDA 13 with its NVRTC pinned to the CUDA release of the ptxas here, torch 2.11 (PyPI's
# CUDA build; it runs on the CPU), pytest; no TensorFlow, Horovod or Numba, as there. Built once
# (about 3 GB, a few minutes), reused while this file is unchanged. Prints the venv's path.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HOROVOD_Q8_MIRROR_VENV:-$HOME/.cache/horovod_q8/venv-gpu-mirror}"
REQS=("numpy>=2,<3" "cupy-cuda13x==14.2.0" "nvidia-cuda-nvrtc==13.0.88" "torch==2.11.0" "pytest")
stamp="$(cat "$REPO/scripts/setup_mirror.sh" | sha256sum | cut -c1-16)"
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$stamp" ]; then echo "$VENV"; exit 0; fi
py=""
for c in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 python3.12; do
  if "$c" -c "import sys, venv; assert sys.version_info[:2] == (3, 12)" >/dev/null 2>&1; then py="$c"; break; fi
done
if [ -z "$py" ]; then
  echo "setup_mirror: Python 3.12 is needed (the GPU machine's); install it (e.g. pyenv install 3.12)" >&2
  exit 1
fi
echo "[setup_mirror] building $VENV with $py: ${REQS[*]}" >&2
rm -rf "$VENV"
"$py" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "${REQS[@]}" >&2
echo "$stamp" > "$VENV/.stamp"
echo "$VENV"
