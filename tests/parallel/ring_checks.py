"""Under mpirun: the mpi4py ring of `bench transfer` (float32 and float16) sums correctly for
sizes below, at and not divisible by the number of ranks, leaves every rank with the same
bits, passes NaN and Inf through, and reuses its buffers. Prints OK on rank 0."""
from __future__ import annotations

import zlib

import numpy as np
from mpi4py import MPI

from horovod_q8.backends import half
from horovod_q8.bench.ring import ring_allreduce, segments

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
if rank == 0:
    print("OK", flush=True)
