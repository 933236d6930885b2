"""Framework-free API: quantize a float array into a packed uint8 buffer, and back.

Works on NumPy arrays (Numba kernels, or the NumPy reference without Numba) and on CuPy
arrays (CUDA kernels); the buffer lives where the input lives.
"""
from __future__ import annotations

from typing import Optional, Union

import numpy as np

from horovod_q8 import backends
from horovod_q8.formats import Format, get

FormatLike = Union[str, Format]


def _xp(x):
    return backends._compat.cupy() if backends._compat.is_cupy_array(x) else np


def _resolve(fmt: FormatLike, shape) -> Format:
    return get(fmt).for_shape(shape) if isinstance(fmt, str) else fmt.for_shape(shape)


def as_float32(x):
    """x flattened to contiguous float32; integer and bool arrays are refused."""
    xp = _xp(x)
    if x.dtype.kind != "f":
        raise TypeError(f"only floating-point arrays are quantized, got {x.dtype}; "
                        "send integer tensors uncompressed")
    return xp.ascontiguousarray(x.reshape(-1), dtype=xp.float32)


def quantize(x, fmt: FormatLike = "q8", *, residual=None, seed: Optional[int] = None,
             backend: Optional[str] = None):
    """Quantize array `x` (any shape, float16/32/64) into a packed uint8 buffer.

    residual: float32 array of x.size, the error feedback of threshold formats, updated in
    place. Its sum with x is what gets quantized. seed: stochastic-rounding seed.
    """
    f = _resolve(fmt, x.shape)
    if residual is not None and residual.size != x.size:
        raise ValueError(f"residual has {residual.size} elements, x has {x.size}")
    be = backends.get(backend) if backend else backends.for_array(x)
    return be.encode(as_float32(x), f, residual=residual, seed=seed)


def dequantize(buf, fmt: FormatLike, shape, *, dtype=np.float32, out=None,
               accumulate: bool = False, backend: Optional[str] = None):
    """Dequantize a buffer from `quantize` into an array of `shape` and `dtype`.

    accumulate: add into `out` (float32) instead of overwriting it.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    f = _resolve(fmt, shape)
    n = int(np.prod(shape, dtype=np.int64))
    if buf.size != f.nbytes(n):
        raise ValueError(f"{f.name}: buffer has {buf.size} bytes, {f.nbytes(n)} expected for shape {shape}")
    be = backends.get(backend) if backend else backends.for_array(buf)
    if out is not None:
        flat = out.reshape(-1) if out.flags.c_contiguous else out.flatten()  # strided: decoded apart, written back
        be.decode(buf, f, n, out=flat, accumulate=accumulate)
        if not out.flags.c_contiguous:
            out[...] = flat.reshape(out.shape)
        return out
    values = be.decode(buf, f, n).reshape(shape)
    return values if np.dtype(dtype) == np.float32 else values.astype(dtype)


def nbytes(fmt: FormatLike, shape) -> int:
    """Bytes of the packed buffer for a tensor of `shape`."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return _resolve(fmt, shape).nbytes(int(np.prod(shape, dtype=np.int64)))
