"""The engine's transport over horovod.torch: deferred local steps, name-matched async collectives.

horovod.torch reduces from backward hooks, and ranks reach the hooks in different orders, so
no rank may wait on a collective while another rank may still be waiting on a different one.
Horovod matches collectives by name, not by order, so this transport waits only in two
rounds that never depend on each other:

1. `compressed_sum` runs at once: the first collective of each tensor (the alltoall of
   two-phase; the allgather of the allgather schedule) is submitted without waiting, and
   every later step is deferred (`Deferred`).
2. `flush()` (before the first result of a step is read) submits every pending allgather,
   in any order: an allgather waits only on its own alltoall, which every rank submitted in
   round 1. Only then does anyone wait on an allgather.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Union

import horovod.torch as hvd
import torch

from horovod_q8.collective.transport import ArrayTransport, Buffers
from horovod_q8.torch.tensors import TensorBuffers, as_array, as_tensor


class Deferred:
    """A value computed on first `result()`; `waits` when computing it waits on a collective."""

    def __init__(self, fn: Callable[[], Any], waits: bool) -> None:
        self._fn: Optional[Callable[[], Any]] = fn
        self._value: Any = None
        self.waits = waits

    def result(self):
        if self._fn is not None:
            self._value, self._fn = self._fn(), None
        return self._value


def _waits(x) -> bool:
    return isinstance(x, Deferred) and x.waits and x._fn is not None


def value(x):
    return x.result() if isinstance(x, Deferred) else x


class _Gather(Deferred):
    """An allgather submitted at `submit()` (its input computed then) and waited at `result()`.

    A plain allgather, unlike the TensorFlow transport's alltoall of N copies (`gather_bytes`):
    here that measured slower, one 25.6M tensor's q8 in 277-281 ms against 247-265 at 2 x 1
    Gbit/s, and no faster for the optimizer's buckets (scratch A/B beside 423c953, no log).
    """

    def __init__(self, buf, name: Optional[str]) -> None:
        super().__init__(self._wait, waits=True)
        self.buf, self.name, self.handle = buf, name, None

    def submit(self) -> None:
        if self.handle is None:
            self.handle = hvd.allgather_async(as_tensor(value(self.buf)), name=self.name)
            self.buf = None

    def _wait(self):
        self.submit()
        return as_array(hvd.synchronize(self.handle))


class HorovodTorchTransport(ArrayTransport):
    """One rank over horovod.torch. `pending` holds the allgathers not yet submitted.

    buffers: None (fresh arrays per call: a result may outlive the call, as `hvd.allreduce`'s
    does), or persistent ones for a caller that copies each result out before its next call
    (the optimizer: a fresh 100 MB array costs its page faults on every step). pending: a list
    shared with another transport, so that either's `flush()` submits both's allgathers (no
    rank then waits on one that another rank has not submitted).
    """

    def __init__(self, buffers: Union[Buffers, TensorBuffers, None] = None,
                 pending: Optional[List["_Gather"]] = None) -> None:
        super().__init__(buffers)
        self.rank, self.size = hvd.rank(), hvd.size()
        self.pending: List[_Gather] = [] if pending is None else pending

    def local(self, label: str, fn: Callable, inputs: Sequence, out, residual=None, seed=None):
        seed = 0 if seed is None else int(seed)
        return Deferred(lambda: fn(*[value(x) for x in inputs], residual, seed), any(_waits(x) for x in inputs))

    def alltoallv(self, buf, send_splits, recv_splits, name):
        if _waits(buf):
            raise RuntimeError("horovod_q8: an alltoall must not wait on another collective")
        splits = torch.tensor([int(s) for s in send_splits], dtype=torch.int32)
        handle = hvd.alltoall_async(as_tensor(value(buf)), splits=splits, name=name)
        return Deferred(lambda: as_array(hvd.synchronize(handle)[0]), waits=True)

    def allgatherv(self, buf, sizes, name):
        g = _Gather(buf, name)
        if _waits(buf):
            self.pending.append(g)  # round 2: its input waits on an alltoall
        else:
            g.submit()
        return g

    def concat(self, parts, out):
        return Deferred(lambda: ArrayTransport.concat(self, [value(p) for p in parts], out),
                        any(_waits(p) for p in parts))

    def flush(self) -> None:
        """Submit every pending allgather (round 2); call before waiting on any result."""
        flush_pending(self.pending)


def flush_pending(pending: List["_Gather"]) -> None:
    """Submit these pending allgathers, emptying the list (in place: transports may share it)."""
    gathers = list(pending)
    pending.clear()
    for g in gathers:
        g.submit()

