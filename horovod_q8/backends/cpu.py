"""CPU backend: the Numba kernels behind the same signatures as the NumPy reference."""
from __future__ import annotations

from typing import Optional

import numpy as np

from horovod_q8.backends import cpu_kernels as K
from horovod_q8.formats.codebooks import tables, threshold_tables
from horovod_q8.formats.spec import CODEBOOK, Format


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
        block = fmt.block_for(n)
        scale_bits = out[: 4 * nb].view(np.uint32)
        K.kernel("block_scale_bits", n)(x.view(np.uint32), n, block, min(block, 1 << 16), scale_bits)
        t = tables(fmt.codebook, fmt.bits)
        K.kernel("encode_codebook", n)(x, n, block, scale_bits.view(np.float32), codes, t.lut, t.mids,
                          t.values, t.size, fmt.bits, fmt.rounding == "stochastic",
                          (fmt.seed if seed is None else seed) & 0xFFFFFFFF)
    else:
        use = residual is not None
        r = residual if use else np.empty(0, np.float32)
        lut, levels = threshold_tables(tuple(fmt.levels))
        K.kernel("encode_threshold", n)(x, n, r, use, codes, lut, levels, fmt.decode_table(), fmt.bits)
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
