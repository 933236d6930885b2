"""The engine's transport in TensorFlow: local steps as host calls, bytes through Horovod's
`alltoall` / `allgather` (collectives that never add), pieces through tf.split / tf.concat."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.collective.transport import aligned_empty
from horovod_q8.tensorflow.bridge import host_call


class HorovodTransport:
    """One rank inside a TensorFlow graph (or eagerly). Residuals are tf.Variables: a local
    step gets a copy and its update comes back as a second output, assigned after."""

    def __init__(self, named: bool = True) -> None:
        self.rank, self.size = hvd.rank(), hvd.size()
        self.named = named  # eager calls go unnamed: Horovod names them itself

    def local(self, label: str, fn: Callable, inputs: Sequence, out, residual=None, seed=None):
        seed = tf.constant(0, tf.int64) if seed is None else seed
        n, dtype = out
        out_dtype = tf.as_dtype(np.dtype(dtype))
        if residual is None:
            (y,) = host_call(lambda *a: fn(*a[:-1], None, a[-1]), [*inputs, seed], [out_dtype], [(n,)], label)
            return y

        def with_residual(*a):
            r = aligned_empty(a[-2].size, np.float32)  # TF's input buffers are read-only
            r[...] = a[-2]
            return fn(*a[:-2], r, a[-1]), r

        y, new_r = host_call(with_residual, [*inputs, residual.read_value(), seed],
                             [out_dtype, tf.float32], [(n,), residual.shape], label)
        with tf.control_dependencies([residual.assign(new_r)]):
            return tf.identity(y)

    def _name(self, name: Optional[str]) -> Optional[str]:
        return name if self.named else None

    def alltoallv(self, buf, send_splits, recv_splits, name):
        received, _ = hvd.alltoall(buf, splits=list(send_splits), name=self._name(name))
        received.set_shape((sum(recv_splits),))
        return received

    def allgatherv(self, buf, sizes, name):
        gathered = hvd.allgather(buf, name=self._name(name))
        gathered.set_shape((sum(sizes),))
        return gathered

    def split(self, flat, sizes):
        return tf.split(flat, list(sizes))

    def concat(self, parts, out):
        return parts[0] if len(parts) == 1 else tf.concat(list(parts), axis=0)

    def buffer(self, key: str, size: int, dtype) -> np.ndarray:
        # Fresh per call: TF aliases what a host call returns (64-byte aligned, so no copy)
        # and may keep it alive after the step, so it is never reused.
        return aligned_empty(size, dtype)

    def result_buffer(self, key: str, n: int) -> None:
        return None  # the pieces are joined by tf.concat
