#!/usr/bin/env bash
# One set-up path for the README, .ci/run and developers.
# Installs Debian's OpenMPI and Fashion-MNIST, then a venv with tensorflow-cpu 2.15.1,
# torch 2.0.1 and Horovod 0.28.1 built for both (Gloo + MPI), reused when it already matches.
# Prints the venv path last.
#
# torch 2.0.1 is the newest torch Horovod 0.28.1 (its last release) builds against: Horovod
# compiles its torch extension as C++14, and torch >= 2.1's headers stop with (2.1.2)
#   torch/include/torch/csrc/api/include/torch/all.h:4:2: error: #error C++17 or later
#   compatible compiler is required to use PyTorch.
# (docs/torch.md). PyPI has only the CUDA build of 2.0.1 (+cu117 and its nvidia-* wheels); it
# runs on CPU. Two build-time steps, both for torch 2.0.1: setuptools < 70 (its cpp_extension
# imports pkg_resources.packaging), and torch's CUDA_HOME hidden from Horovod's build
# (sitecustomize below), so that it builds the CPU extension rather than look for a CUDA runtime.
set -euo pipefail

# HOROVOD_Q8_REPO: the checkout to install (only to try a copy of this script kept elsewhere).
REPO="${HOROVOD_Q8_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
VENV="${HOROVOD_Q8_VENV:-$HOME/.cache/horovod_q8/venv}"
TORCH=2.0.1
REQ="req=$(sha1sum "$REPO/scripts/requirements.txt" | cut -c1-12)"
STAMP_WANT="tf=2.15.1 torch=$TORCH hvd=0.28.1 $REQ"
# Where torch cannot be downloaded (PyPI unreachable), Horovod is built for TensorFlow only and
# the venv says so; it is reused as it is (the torch tests skip): remove it to try again.
STAMP_NO_TORCH="tf=2.15.1 torch=none hvd=0.28.1 $REQ"

log() { echo "[setup] $*" >&2; }
# pip, quiet, without the noise of this machine's unused local index folders; fails as pip fails.
pip_q() {
  "$VENV/bin/pip" install -q "$@" 2>&1 | { grep -v -e "^WARNING: Location" -e "^  " || true; } >&2
  return "${PIPESTATUS[0]}"
}

need_apt=()
command -v mpirun >/dev/null || need_apt+=(openmpi-bin)
[ -e /usr/include/x86_64-linux-gnu/openmpi ] || dpkg -s libopenmpi-dev >/dev/null 2>&1 || need_apt+=(libopenmpi-dev)
[ -d /usr/share/datasets/fashion-mnist ] || need_apt+=(dataset-fashion-mnist)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v slurmctld >/dev/null || need_apt+=(slurm-wlm)   # the single-node Slurm of tests/test_slurm.py
command -v munged >/dev/null || need_apt+=(munge)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# One build at a time per venv: a second set-up waits here, then finds the stamp and reuses.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.setup-lock"
flock 9

stamp="$(cat "$VENV/.horovod_q8_stamp" 2>/dev/null || true)"
if [ "$stamp" = "$STAMP_WANT" ]; then
  log "reusing venv $VENV"
elif [ "$stamp" = "$STAMP_NO_TORCH" ]; then
  log "reusing venv $VENV, built without torch (torch $TORCH could not be installed then; rm -rf it to retry)"
else
  log "building venv $VENV (torch is 2.2 GB; Horovod compiles for about 6 minutes)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  pip_q --upgrade pip wheel setuptools
  pip_q -r "$REPO/scripts/requirements.txt"
  nocuda="$(mktemp -d)"
  printf '%s\n' "import torch.utils.cpp_extension as _e" "_e.CUDA_HOME = None" > "$nocuda/sitecustomize.py"
  if pip_q "setuptools<70" "torch==$TORCH"; then
    stamp="$STAMP_WANT" check="import horovod.torch, horovod.tensorflow"
  else
    log "torch $TORCH could not be installed: building Horovod for TensorFlow only"
    stamp="$STAMP_NO_TORCH" check="import horovod.tensorflow"
  fi
  (
    export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_MXNET=1
    export MAKEFLAGS="-j$(nproc)"
    if [ "$stamp" = "$STAMP_WANT" ]; then
      export HOROVOD_WITH_PYTORCH=1 PYTHONPATH="$nocuda"   # the build sees no CUDA_HOME
    else
      export HOROVOD_WITHOUT_PYTORCH=1
    fi
    pip_q --no-build-isolation --no-cache-dir horovod==0.28.1
  )
  rm -rf "$nocuda"
  "$VENV/bin/python" -c "$check" 2>/dev/null || { log "Horovod built without an extension ($check fails)"; exit 1; }
  echo "$stamp" > "$VENV/.horovod_q8_stamp"
fi
# The package itself is always reinstalled (editable) from this checkout.
pip_q --no-deps --no-build-isolation -e "$REPO"
# Numba compiles the CPU kernels once and caches them beside their source: do it now, not in
# the first training step.
"$VENV/bin/python" -m horovod_q8.backends.warmup >&2
echo "$VENV"
