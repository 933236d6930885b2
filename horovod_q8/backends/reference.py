"""NumPy backend: the reference implementation behind the backend signatures."""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from horovod_q8.backends.common import check_decode_scale, decode_sum_by_parts
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
    check_decode_scale(scale, accumulate)
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


# (sum of the values of bufs, in order) * scale into out: one decode per part
decode_sum = functools.partial(decode_sum_by_parts, decode)
