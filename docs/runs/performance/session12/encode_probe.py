"""q8 encode of 25.6M float32, one thread: the AVX2 kernel against the Numba kernel, interleaved, min of 15; bytes compared."""
import numpy as np, time, os
from horovod_q8.backends import native, cpu
from horovod_q8.backends.cpu_kernels import SERIAL
from horovod_q8.formats import get, codebooks
fmt = get("q8"); n = 25_600_000; nb = fmt.n_blocks(n)
x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
t = codebooks.tables("dynamic_tree", 8); T = native.avx2_tables("dynamic_tree")
a = np.empty(fmt.nbytes(n), np.uint8); b = np.empty_like(a)
def numba(): SERIAL["encode_codebook"](x, n, 1024, b[:4*nb].view(np.uint32), b[4*nb:], t.lut, t.mids, t.values, t.positive_mid_bits, t.size, 8, t.zero_code, False, 0)
def avx2(): native.encode8(x, n, 1024, a[:4*nb].view(np.uint32), a[4*nb:], T, 1)
numba(); avx2(); assert np.array_equal(a, b)
best = {"numba": 1e9, "avx2": 1e9}
for _ in range(15):
    for k, f in (("numba", numba), ("avx2", avx2)):
        t0 = time.perf_counter(); f(); best[k] = min(best[k], time.perf_counter() - t0)
print({k: round(v * 1e3, 1) for k, v in best.items()})
