"""Under mpirun: the mpi4py schedules of `bench transfer`.

- the ring (float32 and float16) sums correctly for sizes below, at and not divisible by the
  number of ranks, leaves every rank with the same bits, passes NaN and Inf through, and
  reuses its buffers;
- the pipelined compressed schedule (pieces, codec thread) gives every rank the same bits,
  the same bits as the whole-tensor schedule when there is one piece, stays within the
  format's error budget for uneven pieces, and keeps NaN/Inf in their own elements.
Prints OK on rank 0."""
from __future__ import annotations

import zlib

import numpy as np
from mpi4py import MPI

from horovod_q8.bench import half
from horovod_q8.bench.pipelined import product_sum
from horovod_q8.bench.ring import ring_allreduce, segments
from horovod_q8.bench.transfer import Reducers
from horovod_q8.collective.mpi import MpiTransport
from horovod_q8.collective.transport import Buffers

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def add32(received, into):
    np.add(into, received, out=into)


def same_everywhere(x: np.ndarray) -> bool:
    return len(set(comm.allgather(zlib.crc32(x.tobytes())))) == 1


for n in (0, 1, size - 1, size, 7 * size + 1, 100_003):
    assert sum(e - s for s, e in segments(n, size)) == n
    x = np.random.default_rng(1000 * rank + n).standard_normal(n).astype(np.float32)
    exact = np.zeros(n, np.float64)
    comm.Allreduce(x.astype(np.float64), exact)
    recv = np.full(-(-n // size) + 3, np.nan, np.float32)  # garbage scratch, larger than needed
    for _ in range(2):  # the second call reuses the buffers
        buf = x.copy()
        ring_allreduce(comm, buf, recv, add32)
        assert np.allclose(buf, exact, rtol=1e-5, atol=1e-5), n
        assert same_everywhere(buf), n
    h = half.to_half(x)
    ring_allreduce(comm, h, np.empty(-(-n // size), np.float16), half.add_into)
    assert np.allclose(h.astype(np.float64), exact, rtol=4e-3, atol=4e-3 * size), n
    assert same_everywhere(h), n

x = np.ones(10, np.float32)
x[3] = np.nan if rank == 0 else 1.0
x[5] = np.inf
ring_allreduce(comm, x, np.empty(10, np.float32), add32)
assert np.isnan(x[3]) and x[5] == np.inf and x[0] == size, x

class GarbageBuffers(Buffers):
    """Buffers that start full of garbage: every byte must be written."""

    def __call__(self, key, size, dtype):
        fresh = (key, int(size), np.dtype(dtype).str) not in self._buffers
        buf = super().__call__(key, size, dtype)
        if fresh:
            buf.fill(7)
        return buf


def pipelined(x, name, piece):
    return product_sum(MpiTransport(comm, GarbageBuffers(), codec_thread=True), x, name, piece)


for name, n, piece in (("q8", 100_003, 8192), ("q4", 50_000, 4096), ("twobit", 30_001, 5000)):
    x = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
    exact = np.zeros(n, np.float64)
    comm.Allreduce(x.astype(np.float64), exact)
    y, phases = pipelined(x, name, piece)
    assert same_everywhere(y), name
    assert phases["wire"] > 0 and phases["codec"] > 0, phases
    if name != "twobit":  # threshold formats keep no residual here: no budget to meet
        err = np.abs(y - exact).mean() / np.abs(exact).mean()
        assert err < {"q8": 0.03, "q4": 0.3}[name], (name, err)
    whole = Reducers(comm, x)
    whole.compressed(name)  # the whole-tensor schedule of `bench transfer`
    one, _ = pipelined(x, name, n)  # a single piece: the same steps, the same bits
    assert np.array_equal(one, whole.result), name

x = np.random.default_rng(rank).standard_normal(20_000).astype(np.float32)
if rank == 0:
    x[5] = np.nan
x[15_000] = np.inf
y, _ = pipelined(x, "q8", 4096)
assert not np.isfinite(y[5]) and not np.isfinite(y[15_000]), y[[5, 15_000]]
assert np.isfinite(y[4096:12_288]).all()
if rank == 0:
    print("OK", flush=True)
