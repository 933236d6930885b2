#!/usr/bin/env bash
# The GPU check (docs/gpu.md), one command on a GPU machine with Python 3, torch, CuPy and
# NumPy; no TensorFlow, Horovod or network needed. Results go under $OUT (default ./gpu_out):
#   env.txt       versions, GPU, which CPU backend the NumPy side used
#   pytest.txt    byte parity of every CUDA kernel with the NumPy reference, the engine's N-rank
#                 schedule on CuPy arrays against NumPy's bits, torch's DLPack path (pointers)
#   bench.json    encode / decode / device-to-device copy per format, and the ratio to the copy
#   summary.txt   one line per part, PASS or FAIL; the exit code is non-zero if any failed
# Missing pure-Python packages (pytest) can travel as wheels in .whl/ at the repo root.
# HOROVOD_Q8_GPU_CHECK_HOST=1 runs the parts that need no device, on the CUDA host build
# (scripts/cuda_host_check.sh does, in the mirror of this machine's stack): no throughput bench.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$REPO/gpu_out}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
cd "$REPO"
HOST="${HOROVOD_Q8_GPU_CHECK_HOST:-0}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[ "$HOST" = 1 ] || export HOROVOD_Q8_REQUIRE_GPU=1
exec > >(tee "$OUT/gpu_check.log") 2>&1
status=0
say() { echo "$1" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"

if ! "$PY" -c "import pytest" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu_check_site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/gpu_check_site"
fi
# The NumPy side: Numba's kernels where they import and run here, else the NumPy reference.
if ! timeout 300 "$PY" -c "
import numpy as np, horovod_q8 as q
from horovod_q8 import _compat
assert _compat.has_numba()
x = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
assert np.array_equal(q.quantize(x, 'q8'), q.quantize(x, 'q8', backend='reference'))
" >/dev/null 2>&1; then
  export HOROVOD_Q8_BACKEND=numpy
fi
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  "$PY" - <<'EOF'
import sys, numpy, os
print("python", sys.version.split()[0], "numpy", numpy.__version__)
for mod in ("torch", "cupy", "numba", "pytest"):
    try:
        print(mod, __import__(mod).__version__)
    except Exception as e:
        print(mod, "missing:", type(e).__name__, e)
from horovod_q8 import _compat
print("cpu backend:", "numpy reference (HOROVOD_Q8_BACKEND=numpy)" if not _compat.has_numba() else "numba")
print("cupy sees a GPU:", _compat.cupy() is not None)
EOF
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

timeout 360 "$PY" -m pytest -q -p no:cacheprovider -rfEs tests/test_cuda_kernels.py tests/test_cuda_host.py \
  tests/test_gpu_paths.py tests/test_torch_engine.py > "$OUT/pytest.txt" 2>&1
rc=$?
tail -5 "$OUT/pytest.txt"
if [ $rc -eq 0 ]; then say "PASS parity, engine on CuPy, DLPack ($(tail -1 "$OUT/pytest.txt"))"
else say "FAIL parity/engine/DLPack tests: pytest rc=$rc (see pytest.txt)"; status=1; fi

if [ "$HOST" = 1 ]; then say "SKIP throughput bench (host build: no device)"; exit $status; fi
timeout 120 "$PY" - "$OUT/bench.json" <<'EOF'
"""Kernel throughput per format against a device-to-device copy of the same tensor, interleaved
rounds (one call of each op per round), median of the rounds, CUDA events."""
import json, sys
import cupy as cp
import numpy as np
from horovod_q8.backends import cuda
from horovod_q8.formats import get, names

N, ROUNDS = 1 << 26, 15  # 256 MB of float32
x = cp.random.default_rng(0).standard_normal(N, dtype=cp.float32)
y = cp.empty_like(x)
fmts = [get(n).for_group("dense") for n in names()]
bufs = {f.name: cp.empty(f.nbytes(N), cp.uint8) for f in fmts}
res = {f.name: (cp.zeros(N, cp.float32) if f.uses_residual else None) for f in fmts}
ops = {"copy": lambda: cp.copyto(y, x)}
for f in fmts:
    ops[f"{f.name}.encode"] = lambda f=f: cuda.encode(x, f, residual=res[f.name], out=bufs[f.name])
    ops[f"{f.name}.decode"] = lambda f=f: cuda.decode(bufs[f.name], f, N, out=y)
times = {k: [] for k in ops}
start, stop = cp.cuda.Event(), cp.cuda.Event()
for r in range(ROUNDS + 1):
    for k, fn in ops.items():
        start.record(); fn(); stop.record(); stop.synchronize()
        if r:
            times[k].append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
med = {k: float(np.median(v)) for k, v in times.items()}
copy = med["copy"]
rows = {"elements": N, "copy_s": copy, "copy_GBps_read_plus_write": 8 * N / copy / 1e9, "formats": {}}
print(f"copy of {4 * N / 1e6:.0f} MB: {copy * 1e3:.3f} ms, {8 * N / copy / 1e9:.0f} GB/s read+write")
for f in fmts:
    e, d = med[f"{f.name}.encode"], med[f"{f.name}.decode"]
    ratio = copy / (e + d)
    rows["formats"][f.name] = {"encode_s": e, "decode_s": d, "encode_plus_decode_vs_copy": ratio,
                               "encode_GBps_of_float32": 4 * N / e / 1e9, "decode_GBps_of_float32": 4 * N / d / 1e9}
    print(f"{f.name:16s} encode {e * 1e3:7.3f} ms  decode {d * 1e3:7.3f} ms  copy/(enc+dec) {ratio:5.2f}")
q8 = rows["formats"]["q8"]["encode_plus_decode_vs_copy"]
rows["target_q8_at_least_0.8_of_copy"] = bool(q8 >= 0.8)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
print("q8 encode+decode at", f"{q8:.2f}", "of the copy's rate:", "target met" if q8 >= 0.8 else "below the 0.8 target")
EOF
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$OUT/bench.json" ]; then say "FAIL throughput bench: rc=$rc"; status=1
else
  q8="$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.2f' % d['formats']['q8']['encode_plus_decode_vs_copy'])" "$OUT/bench.json")"
  if "$PY" -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['target_q8_at_least_0.8_of_copy'] else 1)" "$OUT/bench.json"; then
    say "PASS throughput: q8 encode+decode at $q8 of the device copy's rate (target 0.8)"
  else say "FAIL throughput: q8 encode+decode at $q8 of the device copy's rate (target 0.8)"; status=1; fi
fi
exit $status
