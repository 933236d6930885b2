"""How TensorFlow tensors reach the kernels: NumPy on CPU, CuPy through DLPack on GPU.

Collectives never run in here: only the local steps of `horovod_q8.collective.plan`.
"""
from __future__ import annotations

import time
from typing import Callable, List, Optional, Sequence

import tensorflow as tf

from horovod_q8 import _compat

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

        outs = tf.numpy_function(body, list(inputs), list(dtypes), stateful=not pure, name=name)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for o, s in zip(outs, shapes):
        o.set_shape(s)
    return outs
