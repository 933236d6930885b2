"""The seam between the compressed allreduce and whoever moves its bytes.

`engine.compressed_sum` is written once against `Transport`; a transport supplies the local
steps' execution (a host call in TensorFlow, a plain call or a codec thread elsewhere), the
two byte collectives that never add (alltoallv, allgatherv) and where buffers live.
Transports: `tensorflow.transport.HorovodTransport`, `collective.mpi.MpiTransport`,
`collective.threads.ThreadTransport`.
"""
from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any, Callable, List, Optional, Protocol, Sequence, Tuple

import numpy as np

# What a local step produces: (number of elements, NumPy dtype).
OutSpec = Tuple[int, Any]


class ResidualStore(Protocol):
    """Owner of error-feedback state: one residual per key, created on first use, zeros."""

    def residual(self, key: str, n: int) -> Any:
        ...


class Transport(Protocol):
    """Runs one rank's part of the compressed allreduce."""

    rank: int
    size: int

    def local(self, label: str, fn: Callable, inputs: Sequence, out: OutSpec,
              residual: Any = None, seed: Any = None) -> Any:
        """fn(*inputs, residual, seed) -> array of `out`; residual is updated in place by fn."""

    def alltoallv(self, buf: Any, send_splits: Sequence[int], recv_splits: Sequence[int],
                  name: Optional[str]) -> Any:
        """Send send_splits[r] bytes of buf to rank r; receive recv_splits[r] from each, in rank order."""

    def allgatherv(self, buf: Any, sizes: Sequence[int], name: Optional[str]) -> Any:
        """Every rank's bytes (sizes[r] from rank r) concatenated in rank order."""

    def split(self, flat: Any, sizes: Sequence[int]) -> list:
        """Consecutive pieces of a flat tensor."""

    def finish(self, label: str, steps: Sequence[Tuple[Callable, Sequence]], sizes: Sequence[int],
               key: str) -> Any:
        """The float32 result: steps[k] = (fn, inputs) is piece k's last local step, which
        writes its sizes[k] elements by fn(out, *inputs) (out: where they go, or None: fn
        allocates); the pieces lie one after another."""

    def buffer(self, key: str, size: int, dtype) -> Optional[np.ndarray]:
        """An output buffer for a local step (called when the step runs), or None."""


class ArrayResiduals:
    """Residuals as NumPy (or CuPy) arrays owned by this object (a DDP hook's or a benchmark's)."""

    def __init__(self, xp=np) -> None:
        self.xp = xp
        self.arrays: dict = {}

    def residual(self, key: str, n: int):
        a = self.arrays.get(key)
        if a is None or a.size != n:
            a = self.arrays[key] = self.xp.zeros(int(n), dtype=self.xp.float32)
        return a


class Buffers:
    """Persistent buffers by (key, size, dtype), allocated on first use (as Horovod's fusion
    buffer): timed calls after the first pay no page faults for fresh memory."""

    def __init__(self) -> None:
        self._buffers: dict = {}

    def __call__(self, key: str, size: int, dtype) -> np.ndarray:
        k = (key, int(size), np.dtype(dtype).str)
        if k not in self._buffers:
            self._buffers[k] = np.empty(int(size), dtype)
        return self._buffers[k]


class ArrayTransport:
    """What every NumPy transport shares: local steps called directly, views for pieces."""

    rank: int
    size: int

    def __init__(self, buffers: Optional[Buffers] = None) -> None:
        self.buffers = buffers

    def local(self, label: str, fn: Callable, inputs: Sequence, out: OutSpec,
              residual: Any = None, seed: Any = None) -> Any:
        return fn(*[wait(x) for x in inputs], residual, 0 if seed is None else int(seed))

    def split(self, flat, sizes: Sequence[int]) -> list:
        starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        return [flat[starts[k]:starts[k + 1]] for k in range(len(sizes))]

    def finish(self, label: str, steps: Sequence[Tuple[Callable, Sequence]], sizes: Sequence[int],
               key: str) -> Any:
        # One persistent result buffer that every piece writes its slice of (no join); without
        # buffers each piece allocates (on its array's device) and the pieces are joined.
        out = self.buffer(f"{key}.out", sum(sizes), np.float32)
        dsts = self.split(out, sizes) if out is not None else [None] * len(sizes)
        parts = [self.local(label, lambda *a, fn=fn, dst=dst: fn(dst, *a[:-2]), inputs, (n, np.float32))
                 for (fn, inputs), dst, n in zip(steps, dsts, sizes)]
        return self.concat(parts, out)

    def concat(self, parts: Sequence, out):
        """The pieces joined; `out` is the buffer they were written into, when there is one."""
        parts = [wait(p) for p in parts]
        if out is not None:
            return out  # every piece was decoded into its slice of out
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def buffer(self, key: str, size: int, dtype) -> Optional[np.ndarray]:
        return None if self.buffers is None else self.buffers(key, size, dtype)


ALIGN_BYTES = 64


class AlignedPool:
    """64-byte-aligned buffers, reused once nothing refers to them any more.

    Aligned, because TensorFlow aliases such an array when a host call returns it and copies
    any other (NumPy's own large arrays are 16-byte aligned): 83.5 ms against 0.5 ms for 100 MB
    here (DESIGN.md section 5). Reused, because a fresh 100 MB array costs 15-80 ms more than a
    reused one here, all page faults (scripts/buffer_first_touch.py; its log in
    docs/runs/page_faults/2026-12-01-6900b67/). TF
    may keep an aliased result after the step (in a variable, in a later op's output); while it
    does, it holds the returned array, and every NumPy view holds its memory's owner through
    `.base`. So an owner whose only reference is this pool's is unused everywhere, and only
    such a one is handed out again.
    """

    def __init__(self, per_size: int = 4, max_bytes: int = 1 << 30) -> None:
        self.per_size = per_size  # owners kept per byte size; beyond them, fresh arrays
        self.max_bytes = max_bytes  # beyond it, unused owners of other sizes go, least recent first
        self._owners: "OrderedDict[int, List[np.ndarray]]" = OrderedDict()
        self._lock = threading.Lock()  # host calls run on several TensorFlow threads

    def __call__(self, size: int, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = int(size) * dtype.itemsize
        with self._lock:
            owners = self._owners.setdefault(nbytes, [])
            self._owners.move_to_end(nbytes)
            for i in range(len(owners)):
                if sys.getrefcount(owners[i]) == _ONLY_LISTED:
                    return _aligned_view(owners[i], nbytes, dtype)
            raw = np.empty(nbytes + ALIGN_BYTES, np.uint8)
            if len(owners) < self.per_size:
                owners.append(raw)
                self._evict(keep=nbytes)
            return _aligned_view(raw, nbytes, dtype)

    def _evict(self, keep: int) -> None:
        for nbytes in list(self._owners):
            if self.held_bytes() <= self.max_bytes:
                return
            if nbytes != keep:
                owners = self._owners[nbytes]
                used = [i for i in range(len(owners)) if sys.getrefcount(owners[i]) > _ONLY_LISTED]
                owners[:] = [owners[i] for i in used]
                if not owners:
                    del self._owners[nbytes]

    def held_bytes(self) -> int:
        return sum(raw.nbytes for owners in self._owners.values() for raw in owners)


# sys.getrefcount(owners[i]) of an owner the pool's list alone refers to: the list and
# getrefcount's argument.
_ONLY_LISTED = 2


def _aligned_view(raw: np.ndarray, nbytes: int, dtype: np.dtype) -> np.ndarray:
    start = -raw.ctypes.data % ALIGN_BYTES
    return raw[start:start + nbytes].view(dtype)


def wait(x):
    """The value of x, waiting for it when a codec thread still computes it."""
    return x.result() if hasattr(x, "result") and callable(x.result) else x
