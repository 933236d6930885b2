"""A ring allreduce in mpi4py (reduce-scatter, then allgather) over buffers that persist
across calls: the uncompressed baselines of `bench transfer` next to OpenMPI's own ring.

The algorithm is OpenMPI's ring (and Horovod's): 2(P-1) steps, each rank sending one of P
segments to the next rank while receiving one from the previous. OpenMPI allocates its
receive segments on every call; this one reuses `recv`, as Horovod reuses its fusion buffer.
"""
from __future__ import annotations

import time
from typing import Callable, List, Tuple

import numpy as np


def segments(n: int, size: int) -> List[Tuple[int, int]]:
    """[start, end) of each rank's segment: sizes differ by at most one element."""
    bounds = [k * n // size for k in range(size + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def ring_allreduce(comm, buf: np.ndarray, recv: np.ndarray,
                   add: Callable[[np.ndarray, np.ndarray], object]) -> Tuple[float, float]:
    """Sum the 1-D `buf` over every rank of `comm`, in place; every rank ends with the same bits.

    recv: scratch of at least one segment, same dtype. add(received, into) adds in place.
    Returns (seconds in Sendrecv, seconds in add).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    segs = segments(buf.size, size)
    right, left = (rank + 1) % size, (rank - 1) % size
    raw, scratch = buf.view(np.uint8), recv.view(np.uint8)
    item = buf.itemsize
    wire = adds = 0.0

    def part(k: int):
        s, e = segs[k % size]
        return raw[s * item:e * item], buf[s:e]

    for step in range(size - 1):  # reduce-scatter: rank r ends owning segment r + 1, summed
        send, _ = part(rank - step)
        into_raw, into = part(rank - step - 1)
        t = time.perf_counter()
        comm.Sendrecv(send, right, recvbuf=scratch[:into_raw.size], source=left)
        t1 = time.perf_counter()
        add(recv[:into.size], into)
        adds += time.perf_counter() - t1
        wire += t1 - t
    for step in range(size - 1):  # allgather the summed segments
        send, _ = part(rank + 1 - step)
        into_raw, _ = part(rank - step)
        t = time.perf_counter()
        comm.Sendrecv(send, right, recvbuf=into_raw, source=left)
        wire += time.perf_counter() - t
    return wire, adds
