#!/usr/bin/env bash
# One set-up path for the README, .ci/run and developers.
# Installs Debian's OpenMPI and Fashion-MNIST, then a venv with tensorflow-cpu 2.15.1 and
# Horovod 0.28.1 (Gloo + MPI), reused when it already matches. Prints the venv path last.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HOROVOD_Q8_VENV:-$HOME/.cache/horovod_q8/venv}"
STAMP_WANT="tf=2.15.1 hvd=0.28.1 req=$(sha1sum "$REPO/scripts/requirements.txt" | cut -c1-12)"

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

if [ -f "$VENV/.horovod_q8_stamp" ] && [ "$(cat "$VENV/.horovod_q8_stamp")" = "$STAMP_WANT" ]; then
  log "reusing venv $VENV"
else
  log "building venv $VENV (Horovod compiles for about 3 minutes)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  pip_q --upgrade pip wheel setuptools
  pip_q -r "$REPO/scripts/requirements.txt"
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    pip_q --no-build-isolation --no-cache-dir horovod==0.28.1
  echo "$STAMP_WANT" > "$VENV/.horovod_q8_stamp"
fi
# The package itself is always reinstalled (editable) from this checkout.
pip_q --no-deps --no-build-isolation -e "$REPO"
# Numba compiles the CPU kernels once and caches them beside their source: do it now, not in
# the first training step.
"$VENV/bin/python" -m horovod_q8.backends.warmup >&2
echo "$VENV"
