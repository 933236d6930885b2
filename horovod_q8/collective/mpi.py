"""mpi4py transport: the engine over MPI, timed per phase (the transfer benchmark's product path).

alltoallv is MPI_Alltoallv; allgatherv is a ring of Sendrecv steps, which reached the ring's
link rate on the emulated cluster where OpenMPI's Allgatherv did not
(docs/runs/cluster/2026-11-30-66d42d6/collective_check_4x1gbit.log). With `codec_thread`, local steps run on one
worker thread (the Numba kernels release the GIL) while the calling thread runs MPI, so one
piece's bytes move while another piece is coded. Only the calling thread calls MPI.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Optional, Sequence

import numpy as np

from horovod_q8.collective.transport import ArrayTransport, Buffers, wait


def offsets(sizes: Sequence[int]) -> list:
    return [0, *np.cumsum(sizes, dtype=np.int64).tolist()[:-1]]


def ring_allgatherv(comm, mine: np.ndarray, gathered: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Allgather of byte blocks (rank r's block has sizes[r] bytes, in rank order) as P-1 ring
    steps, each rank forwarding to the next the block it received last."""
    rank, size = comm.Get_rank(), comm.Get_size()
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    block = lambda r: gathered[starts[r % size]:starts[r % size + 1]]  # noqa: E731
    block(rank)[:] = mine
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        comm.Sendrecv(block(rank - step), right, recvbuf=block(rank - step - 1), source=left)
    return gathered


class MpiTransport(ArrayTransport):
    """One rank over an mpi4py communicator; `seconds` holds the time per phase since reset()."""

    def __init__(self, comm, buffers: Optional[Buffers] = None, codec_thread: bool = False) -> None:
        super().__init__(buffers or Buffers())
        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()
        self._pool = ThreadPoolExecutor(max_workers=1) if codec_thread else None
        self.seconds: Dict[str, float] = {}
        self.reset()

    def reset(self) -> None:
        self.seconds = {"codec": 0.0, "wire": 0.0}

    def local(self, label: str, fn: Callable, inputs: Sequence, out, residual=None, seed=None):
        def run():
            t = time.perf_counter()
            y = super(MpiTransport, self).local(label, fn, inputs, out, residual, seed)
            self.seconds["codec"] += time.perf_counter() - t  # one codec thread: no race
            return y
        return self._pool.submit(run) if self._pool else run()

    def alltoallv(self, buf, send_splits, recv_splits, name):
        from mpi4py import MPI

        buf = wait(buf)
        received = self.buffer(f"{name}.received", sum(recv_splits), np.uint8)
        t = time.perf_counter()
        self.comm.Alltoallv([buf, (list(send_splits), offsets(send_splits)), MPI.BYTE],
                            [received, (list(recv_splits), offsets(recv_splits)), MPI.BYTE])
        self.seconds["wire"] += time.perf_counter() - t
        return received

    def allgatherv(self, buf, sizes, name):
        buf = wait(buf)
        gathered = self.buffer(f"{name}.gathered", sum(sizes), np.uint8)
        t = time.perf_counter()
        ring_allgatherv(self.comm, buf, gathered, sizes)
        self.seconds["wire"] += time.perf_counter() - t
        return gathered
