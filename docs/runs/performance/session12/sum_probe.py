"""The 2-rank sum of q8 codes (plan.sum_gathered's work for one 25.6M tensor, times 1/2 for an
average): one fused pass (cpu.decode_sum) against decode + accumulating decode + scaling pass
(backends.decode_sum_by_parts), interleaved, min of 11, one thread; the bits compared."""
import time

import numba
import numpy as np

from horovod_q8 import backends
from horovod_q8.backends import cpu, native
from horovod_q8.formats import get

numba.set_num_threads(1)
n = 25_600_000
rng = np.random.default_rng(0)
print(native.describe())
for name in ("q8", "q4"):
    fmt = get(name)
    bufs = [cpu.encode(rng.standard_normal(n, dtype=np.float32), fmt) for _ in range(2)]
    a, b = np.empty(n, np.float32), np.empty(n, np.float32)
    runs = {"one pass": lambda: cpu.decode_sum(bufs, fmt, n, a, 0.5),
            "by parts": lambda: backends.decode_sum_by_parts(cpu.decode, bufs, fmt, n, b, 0.5)}
    best = dict.fromkeys(runs, 1e9)
    for _ in range(11):
        for k, f in runs.items():
            t = time.perf_counter()
            f()
            best[k] = min(best[k], time.perf_counter() - t)
    same = np.array_equal(a.view(np.uint32), b.view(np.uint32))
    print(f"{name}: one pass {best['one pass'] * 1e3:.1f} ms, by parts {best['by parts'] * 1e3:.1f} ms, same bits: {same}")
