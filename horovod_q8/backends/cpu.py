"""CPU backend: the Numba kernels behind the same signatures as the NumPy reference."""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from horovod_q8.backends import cpu_kernels as K
from horovod_q8.formats.codebooks import tables
from horovod_q8.formats.spec import CODEBOOK, Format

MAX_LEVELS = 7  # the threshold kernel's unrolled level count: 2 ** (bits - 1) - 1 for 4 bits


@functools.lru_cache(maxsize=None)
def padded_levels(levels: tuple) -> np.ndarray:
    """float32[MAX_LEVELS]: a threshold format's levels, then +inf (never <= a finite |g|)."""
    out = np.full(MAX_LEVELS, np.inf, dtype=np.float32)
    out[: len(levels)] = np.asarray(levels, dtype=np.float32)
    return out


def encode(x: np.ndarray, fmt: Format, residual: Optional[np.ndarray] = None,
           seed: Optional[int] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Quantize float32 1-D `x` into `out` (allocated when None); see formats.reference.encode."""
    n = x.size
    if out is None:
        out = np.empty(fmt.nbytes(n), dtype=np.uint8)
    nb = fmt.n_blocks(n)
    codes = out[4 * nb:]
    if n == 0:
        return out
    if fmt.kind == CODEBOOK:
        t = tables(fmt.codebook, fmt.bits)
        seed = (fmt.seed if seed is None else seed) & 0xFFFFFFFF
        K.kernel("encode_codebook", n)(
            x, n, fmt.block_for(n), out[: 4 * nb].view(np.uint32), codes, t.lut, t.mids, t.values,
            t.positive_mid_bits, t.size, fmt.bits, t.zero_code, fmt.rounding == "stochastic", seed)
    else:
        use = residual is not None
        r = residual if use else np.empty(0, np.float32)
        K.kernel("encode_threshold", n)(x, n, r, use, codes, padded_levels(tuple(fmt.levels)), len(fmt.levels),
                                        fmt.bits)
    return out


def decode(buf: np.ndarray, fmt: Format, n: int, out: Optional[np.ndarray] = None,
           accumulate: bool = False) -> np.ndarray:
    """Dequantize into float32 `out` (or add into it when accumulate)."""
    if out is None:
        out = np.zeros(n, dtype=np.float32) if accumulate else np.empty(n, dtype=np.float32)
    if n == 0:
        return out
    nb = fmt.n_blocks(n)
    K.kernel("decode", n)(buf[4 * nb:], n, fmt.block_for(n), buf[: 4 * nb].view(np.float32), fmt.has_scales,
                          fmt.decode_table(), fmt.bits, out, accumulate)
    return out
