"""How TensorFlow tensors reach the kernels: NumPy on CPU, CuPy through DLPack on GPU.

Collectives never run in here: only the local steps of `horovod_q8.collective.plan`.
"""
from __future__ import annotations

import time
from typing import Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from horovod_q8 import _compat
from horovod_q8.collective.transport import ALIGN_BYTES

# When a list, every CPU host call appends (label, enter, exit) in perf_counter seconds:
# `bench allreduce --breakdown` reads it. None (the default) costs nothing.
PROFILE: Optional[List[tuple]] = None


def _on_gpu(tensors: Sequence[tf.Tensor]) -> bool:
    return any("GPU" in (t.device or "").upper() for t in tensors) and _compat.cupy() is not None


def _gpu_call(fn: Callable, inputs: Sequence[tf.Tensor], dtypes: Sequence[tf.DType]):
    """Run fn on CuPy views of GPU tensors (no host copy). Untested here: no TF GPU build."""
    cp = _compat.cupy()

    def body(*eager):
        # TF and CuPy use different streams: wait for TF's producers, then for our kernels.
        tf.test.experimental.sync_devices()
        arrays = [cp.from_dlpack(tf.experimental.dlpack.to_dlpack(t)) if t.dtype != tf.int64
                  else int(t.numpy()) for t in eager]
        outs = fn(*arrays)
        outs = outs if isinstance(outs, tuple) else (outs,)
        cp.cuda.get_current_stream().synchronize()
        return [tf.experimental.dlpack.from_dlpack(o.toDlpack()) for o in outs]

    return tf.py_function(body, list(inputs), list(dtypes))


def _scalar(a):
    """A 0-d input as a Python number: int for integers (seeds), float otherwise (scales)."""
    return int(a) if a.dtype.kind in "iub" else float(a)


def _as_tensor(a, dtype: tf.DType) -> tf.Tensor:
    """A host call's result as an eager tensor over the same memory where it can be (writable,
    contiguous, aligned as TensorFlow aliases in a graph, of the declared dtype), else a copy."""
    a = np.asarray(a)
    if (a.dtype == dtype.as_numpy_dtype and a.size and a.flags.writeable and a.flags.c_contiguous
            and a.ctypes.data % ALIGN_BYTES == 0):
        return tf.experimental.dlpack.from_dlpack(a.__dlpack__())  # holds `a`: the pool waits for it
    return tf.convert_to_tensor(a, dtype)


def _eager_call(body: Callable, inputs: Sequence[tf.Tensor], dtypes: Sequence[tf.DType]) -> list:
    """Eagerly, `body` on the inputs' own memory (np.asarray: read-only views, as a graph's
    host call gets) and its results as tensors over its arrays. tf.numpy_function copies both
    ways in eager mode: 17.7 ms for a 16 MiB result, and the eager q8 allreduce of 4M elements
    took 2.8x the traced one's time (docs/runs/auto/2026-12-05-4ac2723/eager_vs_traced_loopback.log)."""
    outs = body(*[np.asarray(t) for t in inputs])
    if len(outs) != len(dtypes):
        raise ValueError(f"a host call returned {len(outs)} arrays, {len(dtypes)} declared")
    return [_as_tensor(o, d) for o, d in zip(outs, dtypes)]


def host_call(fn: Callable, inputs: Sequence[tf.Tensor], dtypes: Sequence[tf.DType],
              shapes: Sequence[tuple], name: str, pure: bool = False) -> list:
    """Call fn(arrays...) -> arrays as one op and restore static shapes.

    Scalars arrive as Python numbers (int64 seeds as ints, float scales as floats); other
    tensors as NumPy or CuPy arrays. pure: fn's outputs depend on its inputs alone, with no
    other effect, so the op is stateless. tf.function runs stateful ops without resource
    inputs one after another in program order (auto control dependencies), which kept every
    bucket's and piece's host calls in one chain: the next bucket's encode waited for the last
    one's decode while the wire was busy.
    """
    if _on_gpu(inputs):
        outs = _gpu_call(fn, inputs, dtypes)
    else:
        def body(*arrays):
            enter = time.perf_counter()
            arrays = [_scalar(a) if getattr(a, "dtype", None) is not None and a.ndim == 0 else a
                      for a in arrays]
            res = fn(*arrays)
            if PROFILE is not None:
                PROFILE.append((name, enter, time.perf_counter()))
            return res if isinstance(res, tuple) else (res,)

        outs = (_eager_call(body, inputs, dtypes) if tf.executing_eagerly() else
                tf.numpy_function(body, list(inputs), list(dtypes), stateful=not pure, name=name))
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for o, s in zip(outs, shapes):
        o.set_shape(s)
    return outs
