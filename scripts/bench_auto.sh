#!/usr/bin/env bash
# Auto against every fixed compression, on 2 ranks, over each link and kernel family this machine
# has: loopback (horovodrun, Gloo), emulated 2 hosts at 1 Gbit/s, 10 Gbit/s and unshaped
# (`horovod-q8 cluster`, as root), with every kernel family the CPU runs: AVX-512 where it has it,
# AVX2 (HOROVOD_Q8_NATIVE=avx2 on an AVX-512 CPU) and Numba only (HOROVOD_Q8_NATIVE=0). One
# `horovod-q8 bench auto` run per cell, each its own log in docs/runs/auto/<date>-<commit>/, then
# the table and plot (docs/auto.md, docs/auto.png).
#   bash scripts/bench_auto.sh [--repeats N] [--cells "loopback 1gbit 10gbit none"] [--kernels "avx512 avx2 numba"]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$REPO/scripts/setup.sh")"
export PATH="$VENV/bin:$PATH" TF_CPP_MIN_LOG_LEVEL=2
REPEATS=41
CELLS="loopback 1gbit 10gbit none"
KERNELS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS="$2"; shift 2 ;;
    --cells) CELLS="$2"; shift 2 ;;
    --kernels) KERNELS="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
OUT="$REPO/docs/runs/auto/$(date -u +%F)-$(git -C "$REPO" rev-parse --short HEAD)"
mkdir -p "$OUT"
native="$(python -c 'from horovod_q8.backends import native; print("avx512" if native.library() else "avx2" if native.library_avx2() else "numba")')"
case "$native" in
  avx512) have="avx512 avx2 numba" ;;
  avx2) have="avx2 numba" ;;
  *) have="numba" ;;
esac
for kernels in ${KERNELS:-$have}; do
  case " $have " in
    *" $kernels "*) ;;
    *) echo "--kernels: $kernels does not run here (this CPU runs: $have)" >&2; exit 2 ;;
  esac
done
for kernels in ${KERNELS:-$have}; do
  for cell in $CELLS; do
    log="$OUT/${cell}_${kernels}.log"
    env_native=()
    [ "$kernels" = numba ] && env_native=(HOROVOD_Q8_NATIVE=0)
    [ "$kernels" = avx2 ] && [ "$native" = avx512 ] && env_native=(HOROVOD_Q8_NATIVE=avx2)
    echo "== $cell, $kernels kernels -> $log"
    if [ "$cell" = loopback ]; then
      cmd=(horovodrun -np 2 -H localhost:2 --gloo horovod-q8 bench auto --repeats "$REPEATS")
    else
      cmd=(horovod-q8 cluster --hosts 2 --bandwidth "$cell" --timeout 1500 -- horovod-q8 bench auto --repeats "$REPEATS")
    fi
    { echo "\$ ${env_native[*]} ${cmd[*]}"; env "${env_native[@]}" "${cmd[@]}" 2>&1; } \
      | grep -v -e "tensorflow/core" -e "rebuild TensorFlow" -e "retracing" > "$log"
  done
done
python -m horovod_q8.bench.auto_report "$OUT" --markdown "$REPO/docs/auto_table.md" --plot "$REPO/docs/auto.png"
