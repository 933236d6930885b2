"""NumPy backend: the reference implementation behind the backend signatures."""
from __future__ import annotations

from typing import Optional

import numpy as np

from horovod_q8.formats import reference as R
from horovod_q8.formats.spec import Format


def encode(x: np.ndarray, fmt: Format, residual=None, seed: Optional[int] = None, out=None):
    buf = R.encode(x, fmt, residual=residual, seed=seed)
    if out is None:
        return buf
    out[...] = buf
    return out


def decode(buf: np.ndarray, fmt: Format, n: int, out=None, accumulate: bool = False, scale: float = 1.0):
    """Dequantize (times float32 `scale`, not with accumulate)."""
    if scale != 1.0 and accumulate:
        raise ValueError("decode: scale applies to decoded values, not to an accumulation")
    values = R.decode(buf, fmt, n)
    if scale != 1.0:
        values *= np.float32(scale)
    if out is None:
        return values
    if accumulate:
        out += values
    else:
        out[...] = values
    return out
