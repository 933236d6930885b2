"""Compile and cache every CPU kernel once (`python -m horovod_q8.backends.warmup`).

Numba caches compiled kernels beside their source (`cache=True`), the native AVX-512 or AVX2 kernels
are built once into ~/.cache/horovod_q8/native; set-up runs this so a job's first step does
not pay the compilation (tens of seconds per process otherwise).
Both variants run: serial below `cpu_kernels.PARALLEL_MIN` elements, parallel above.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

from horovod_q8 import _compat, codec
from horovod_q8.formats import get, names


def warm() -> float:
    """Seconds spent encoding and decoding every format at both sizes, from writable arrays and
    from read-only ones: Numba compiles each kind apart, and TensorFlow hands the engine
    read-only tensors (compiled at the first step, they cost 19 s on 2 loopback ranks,
    docs/runs/auto/2026-12-06-852d1cb/loopback_numba.log)."""
    from horovod_q8.backends import cpu_kernels

    t = time.perf_counter()
    rng = np.random.default_rng(0)
    for n in (4099, cpu_kernels.PARALLEL_MIN + 4099):
        for writable in (True, False):
            x = rng.standard_normal(n).astype(np.float32)
            x.setflags(write=writable)
            for name in names():
                fmt = get(name).for_group("dense")
                residual = np.zeros(n, np.float32) if fmt.uses_residual else None
                buf = codec.quantize(x, fmt, residual=residual)
                buf.setflags(write=writable)
                out = codec.dequantize(buf, fmt, n)
                codec.dequantize(buf, fmt, n, out=out, accumulate=True)
                if fmt.kind == "codebook":
                    codec.quantize(x, get(name, rounding="stochastic"), seed=1)
    return time.perf_counter() - t


def main() -> None:
    if not _compat.has_numba():
        print("numba missing: nothing to compile")
        return
    from horovod_q8.backends import native
    print(f"CPU kernels compiled and cached in {warm():.1f} s; native: {native.describe()}")
    if native.in_use():
        # the Numba kernels too, which the native ones replace here: a job with
        # HOROVOD_Q8_NATIVE=0 would otherwise compile them at its first step (12 s per rank)
        env = {**os.environ, "HOROVOD_Q8_NATIVE": "0"}
        subprocess.run([sys.executable, "-m", "horovod_q8.backends.warmup"], env=env, check=True)


if __name__ == "__main__":
    main()
