"""On a CPU with AVX-512: the sum of k ranks' codes of one 25.6M tensor, times 1/2 (an
average), by the one-pass kernels (native.sum_ranks: AVX-512 hq8_sum, AVX2 hq8_avx2_sum) against the AVX-512 decodes by parts
(decode + k - 1 accumulating decodes, the factor in the last one or a scaling pass, as
backends.decode_sum_by_parts calls cpu.decode), interleaved, min of 11, one thread; bits compared."""
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
assert native.library() is not None, "this probe compares against the AVX-512 decode"
native.library_avx2 = lambda: native._load("avx2")[0]  # the AVX2 kernel too, which the product does not use here
for name in ("q8", "q4"):
    fmt = get(name)
    nb = fmt.n_blocks(n)
    bufs = [cpu.encode(rng.standard_normal(n, dtype=np.float32), fmt) for _ in range(2)]
    for k in (1, 2):
        a, b = np.empty(n, np.float32), np.empty(n, np.float32)
        parts = ([x[4 * nb:] for x in bufs[:k]], n, fmt.block_for(n), fmt.bits,
                 [x[: 4 * nb].view(np.float32) for x in bufs[:k]])
        c = np.empty(n, np.float32)
        runs = {"AVX-512 one pass": lambda: native.sum_ranks(*parts, cpu.native_decoder(fmt, n), c, 1, post=0.5,
                                                             isa="avx512"),
                "AVX2 one pass": lambda: native.sum_ranks(*parts, native.decode_values(fmt), a, 1, post=0.5),
                "AVX-512 by parts": lambda: backends.decode_sum_by_parts(cpu.decode, bufs[:k], fmt, n, b, 0.5)}
        best = dict.fromkeys(runs, 1e9)
        for _ in range(11):
            for key, f in runs.items():
                t = time.perf_counter()
                f()
                best[key] = min(best[key], time.perf_counter() - t)
        same = np.array_equal(a.view(np.uint32), b.view(np.uint32)) and np.array_equal(c.view(np.uint32), b.view(np.uint32))
        print(f"{name} k={k}: " + ", ".join(f"{key} {v * 1e3:.1f} ms" for key, v in best.items()) + f", same bits: {same}")
