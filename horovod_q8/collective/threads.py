"""N ranks as threads of one process: the engine's numerics without horovodrun, in seconds.

The collectives perform exactly the byte moves of MPI's: alltoallv hands rank q the q-th
slice of every rank's buffer, allgatherv concatenates every rank's buffer in rank order.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence

import numpy as np

from horovod_q8.collective.transport import ArrayTransport, Buffers, wait

TIMEOUT_S = 120.0  # a rank that never arrives fails the run instead of hanging it


class _Hub:
    """Where the ranks of one run leave and pick up their buffers."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.slots: List = [None] * size
        self.barrier = threading.Barrier(size, timeout=TIMEOUT_S)

    def exchange(self, rank: int, item) -> list:
        self.slots[rank] = item
        self.barrier.wait()
        everyone = list(self.slots)
        self.barrier.wait()  # nobody overwrites a slot before everyone has read it
        return everyone


class ThreadTransport(ArrayTransport):
    """One rank of an in-process run; collectives meet at a shared hub."""

    def __init__(self, hub: _Hub, rank: int, buffers: Optional[Buffers] = None) -> None:
        super().__init__(buffers)
        self.hub, self.rank, self.size = hub, rank, hub.size
        self.names: List[Optional[str]] = []  # collective names in call order, for checks

    def _check_name(self, name: Optional[str]) -> None:
        self.names.append(name)
        names = self.hub.exchange(self.rank, name)
        if len(set(names)) != 1:
            raise RuntimeError(f"ranks issued different collectives at once: {names}")

    def alltoallv(self, buf, send_splits: Sequence[int], recv_splits: Sequence[int], name):
        self._check_name(name)
        buf = wait(buf)
        starts = np.concatenate([[0], np.cumsum(send_splits, dtype=np.int64)])
        parts = [buf[starts[r]:starts[r + 1]] for r in range(self.size)]
        everyone = self.hub.exchange(self.rank, parts)
        got = [everyone[src][self.rank] for src in range(self.size)]
        if [g.size for g in got] != list(recv_splits):
            raise RuntimeError(f"rank {self.rank} expected {list(recv_splits)} bytes, got {[g.size for g in got]}")
        return np.concatenate(got) if got else np.empty(0, np.uint8)

    def allgatherv(self, buf, sizes: Sequence[int], name):
        self._check_name(name)
        everyone = self.hub.exchange(self.rank, wait(buf))
        if [e.size for e in everyone] != list(sizes):
            raise RuntimeError(f"allgatherv expected {list(sizes)} bytes, got {[e.size for e in everyone]}")
        return np.concatenate(everyone)


def run_ranks(size: int, fn: Callable[[ThreadTransport], object],
              buffers: bool = False) -> list:
    """fn(transport) on `size` ranks at once; every rank's result, in rank order.

    An exception on any rank aborts the others' collectives and is raised here.
    buffers: give each rank persistent buffers (as the benchmarks and Horovod's fusion buffer).
    """
    hub = _Hub(size)
    transports = [ThreadTransport(hub, r, Buffers() if buffers else None) for r in range(size)]

    def one(t: ThreadTransport):
        try:
            return fn(t)
        except BaseException:
            hub.barrier.abort()
            raise

    with ThreadPoolExecutor(max_workers=size) as pool:
        futures = [pool.submit(one, t) for t in transports]
        errors = []
        results = []
        for f in futures:
            try:
                results.append(f.result())
            except threading.BrokenBarrierError as e:
                errors.append(e)
                results.append(None)
            except BaseException as e:  # the first real error wins over the aborted barriers
                raise e
        if errors:
            raise RuntimeError("a rank did not reach a collective in time") from errors[0]
    return results
