#!/usr/bin/env bash
# The CUDA kernels without a GPU (docs/gpu.md), in the mirror of the GPU machine's stack
# (scripts/setup_mirror.sh: Python 3.12, NumPy 2, CuPy 14 + NVRTC 13.0, torch 2.11):
#   1. kernels/codec.cu compiled as CuPy compiles it (NVRTC, CuPy's options) for sm_90 and sm_80:
#      no error, warning or spill;
#   2. the host build of the same file and backends/cuda.py on the host device: every byte equal
#      to the NumPy reference, the emulator's race, bounds and ftz checks, the engine, torch;
#      this is scripts/gpu_check.sh itself with HOROVOD_Q8_GPU_CHECK_HOST=1.
# Exit status non-zero on any difference. Logs under $OUT (default ./cuda_host_out).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$REPO/cuda_host_out}"
mkdir -p "$OUT"
cd "$REPO"
if ! MIRROR="$(bash scripts/setup_mirror.sh)"; then
  echo "cuda host check: FAILED: could not build the mirror environment"; exit 1
fi
PY="$MIRROR/bin/python"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fail=()

"$PY" -m horovod_q8.backends.nvrtc_check > "$OUT/nvrtc.txt" 2>&1 || fail+=("NVRTC compile (see $OUT/nvrtc.txt)")
cat "$OUT/nvrtc.txt"
kernels="$(sed -n '/^sm_90/,/^sm_/p' "$OUT/nvrtc.txt" | grep -c ' registers ')"

OUT="$OUT/gpu_check" PYTHON="$PY" HOROVOD_Q8_GPU_CHECK_HOST=1 bash scripts/gpu_check.sh > "$OUT/gpu_check.txt" 2>&1 \
  || fail+=("host build parity, engine, torch (see $OUT/gpu_check/pytest.txt)")
tail -3 "$OUT/gpu_check/pytest.txt"
cases="$(grep -Eo '[0-9]+ passed' "$OUT/gpu_check/pytest.txt" | tail -1 | cut -d' ' -f1)"
failed="$(grep -E '^FAILED' "$OUT/gpu_check/pytest.txt" | cut -d' ' -f2 | tr '\n' ' ')"

if [ ${#fail[@]} -eq 0 ]; then
  echo "cuda host check: ${kernels} kernels, ${cases:-0} cases, all identical"
else
  echo "cuda host check: FAILED: ${fail[*]}${failed:+; failing: $failed}"
  exit 1
fi
