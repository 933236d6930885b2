"""The engine's transport in TensorFlow: local steps as host calls, bytes through Horovod's
`alltoall` / `allgather` (collectives that never add), pieces through tf.split and a chain
of host calls that fill one result."""
from __future__ import annotations

import weakref
from typing import Callable, Optional, Sequence

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.collective import pieces
from horovod_q8.collective.transport import AlignedPool
from horovod_q8.tensorflow.bridge import host_call


class PhaseOrder:
    """Host calls of one phase (their label: encode, reduce, decode) run in the order they were
    built, one after another; different phases stay free to overlap.

    Without it TensorFlow starts the buckets' encodes in any order, so the ranks submit their
    collectives in different orders and Horovod waits for a collective that every rank has
    submitted while the wire stays idle. In order, bucket k's bytes go out while bucket k+1 is
    encoded. One per traced reduction: its ops belong to that graph.
    """

    def __init__(self) -> None:
        self._last: dict = {}

    def after(self, label: str) -> list:
        """The ops a new host call of this phase must wait for."""
        return [self._last[label]] if label in self._last else []

    def record(self, label: str, op) -> None:
        self._last[label] = op


def gather_bytes(buf: tf.Tensor, size: int, name: Optional[str]) -> tf.Tensor:
    """Every rank's 1-D buf in rank order, as an allgather, sent as an alltoall of `size` copies:
    the same bytes on the wire (the copy to itself stays local), and Horovod fuses the allgathers
    that wait in one cycle but never alltoalls. Fused, no decode of a step's buckets starts before
    the last of its group has arrived: ResNet-50's step as allgathers took 285 ms against 268 at
    2 x 1 Gbit/s, 48.5 against 43.5 unshaped, 498 against 470 on 4 hosts at 1 Gbit/s (Gloo: even;
    a scratch A/B of one tree, no log; docs/auto.md)."""
    n = buf.shape[0]
    splits = [int(n)] * size if n is not None else tf.fill([size], tf.shape(buf)[0])
    received, _ = hvd.alltoall(tf.concat([buf] * size, axis=0), splits=splits, name=name)
    return received


class HorovodTransport:
    """One rank inside a TensorFlow graph (or eagerly). Residuals are tf.Variables: a local
    step gets a copy and its update comes back as a second output, assigned after.

    order: a PhaseOrder shared by the buckets of one reduction (None: host calls unordered)."""

    def __init__(self, named: bool = True, order: Optional[PhaseOrder] = None) -> None:
        self.rank, self.size = hvd.rank(), hvd.size()
        self.named = named  # eager calls go unnamed: Horovod names them itself
        self.order = order

    def local(self, label: str, fn: Callable, inputs: Sequence, out, residual=None, seed=None):
        if self.order is None:
            return self._local(label, fn, inputs, out, residual, seed)
        with tf.control_dependencies(self.order.after(label)):
            y = self._local(label, fn, inputs, out, residual, seed)
        self.order.record(label, y.op)
        return y

    def _local(self, label: str, fn: Callable, inputs: Sequence, out, residual, seed):
        seed = tf.constant(0, tf.int64) if seed is None else seed
        n, dtype = out
        out_dtype = tf.as_dtype(np.dtype(dtype))
        if residual is None:
            (y,) = host_call(lambda *a: fn(*a[:-1], None, a[-1]), [*inputs, seed], [out_dtype], [(n,)], label,
                             pure=True)
            return y

        def with_residual(*a):
            r = _POOL(a[-2].size, np.float32)  # TF's input buffers are read-only
            r[...] = a[-2]
            return fn(*a[:-2], r, a[-1]), r

        y, new_r = host_call(with_residual, [*inputs, residual.read_value(), seed],
                             [out_dtype, tf.float32], [(n,), residual.shape], label, pure=True)
        with tf.control_dependencies([residual.assign(new_r)]):
            return tf.identity(y)

    def _name(self, name: Optional[str]) -> Optional[str]:
        return name if self.named else None

    def alltoallv(self, buf, send_splits, recv_splits, name):
        received, _ = hvd.alltoall(buf, splits=list(send_splits), name=self._name(name))
        received.set_shape((sum(recv_splits),))
        return received

    def allgatherv(self, buf, sizes, name):
        gathered = gather_bytes(buf, self.size, self._name(name))
        gathered.set_shape((sum(sizes),))
        return gathered

    def split(self, flat, sizes):
        return tf.split(flat, list(sizes))

    def finish(self, label, steps, sizes, key):
        if len(steps) == 1:
            (fn, inputs), = steps
            return self.local(label, lambda *a: fn(_POOL(sizes[0], np.float32), *a[:-2]), inputs,
                              (sizes[0], np.float32))
        # Pieces write one result in a chain of host calls, each passing the whole buffer on
        # (aliased, not copied: it is 64-byte aligned), so no tf.concat copies it at the end.
        total, starts = int(sum(sizes)), pieces.offsets(sizes)
        result = None
        for k, (fn, inputs) in enumerate(steps):
            def step(*a, k=k, fn=fn):
                buf = _POOL(total, np.float32) if k == 0 else _writable(a[0])
                fn(buf[starts[k]:starts[k + 1]], *a[int(k > 0):-2])
                if k < len(steps) - 1:
                    _PASSED[buf.ctypes.data] = buf
                return buf
            result = self.local(label, step, ([result] if k else []) + list(inputs), (total, np.float32))
        return result

    def buffer(self, key: str, size: int, dtype) -> np.ndarray:
        # TF aliases what a host call returns (64-byte aligned, so no copy) and may keep it
        # after the step: the pool hands a buffer out again only once nothing refers to it.
        return _POOL(size, dtype)


# Every host call's output buffers, reused across steps once TensorFlow has let go of them.
_POOL = AlignedPool()

# Result buffers on their way from one piece's host call to the next, by data address. Weak:
# TF holds the array while it aliases it; if it copied instead, the entry goes by itself.
_PASSED: "weakref.WeakValueDictionary[int, np.ndarray]" = weakref.WeakValueDictionary()


def _writable(received: np.ndarray) -> np.ndarray:
    """Our own buffer behind a host call's (read-only) input; a copy if TF did not alias it."""
    buf = _PASSED.pop(received.ctypes.data, None)
    if buf is None or buf.size != received.size:
        buf = _POOL(received.size, np.float32)
        buf[...] = received
    return buf
