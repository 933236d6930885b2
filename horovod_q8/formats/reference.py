"""The NumPy reference implementation: the specification every backend must match byte for byte.

Buffer layout (docs/formats.md): float32 little-endian scales, one per block (codebook
formats only), followed by the codes packed low bits first (8/bits codes per byte).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from horovod_q8.formats.codebooks import tables
from horovod_q8.formats.spec import CODEBOOK, Format

_GOLDEN = np.uint32(0x9E3779B9)


def uniform(seed: int, index: np.ndarray) -> np.ndarray:
    """Counter-based uniform float32 in [0, 1) for each element index (stochastic rounding)."""
    with np.errstate(over="ignore"):
        h = index.astype(np.uint32) + np.uint32(seed & 0xFFFFFFFF) * _GOLDEN
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x7FEB352D)
        h ^= h >> np.uint32(15)
        h *= np.uint32(0x846CA68B)
        h ^= h >> np.uint32(16)
    return (h >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack uint8 codes of `bits` bits, 8/bits per byte, the first code in the lowest bits."""
    per = 8 // bits
    if per == 1:
        return codes.astype(np.uint8)
    padded = np.zeros(-(-codes.size // per) * per, dtype=np.uint8)
    padded[: codes.size] = codes
    groups = padded.reshape(-1, per)
    shifts = (np.arange(per, dtype=np.uint8) * bits)
    return np.bitwise_or.reduce(groups << shifts, axis=1).astype(np.uint8)


def unpack(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Inverse of `pack`: the first n codes."""
    per = 8 // bits
    if per == 1:
        return packed[:n]
    shifts = (np.arange(per, dtype=np.uint8) * bits)
    codes = (packed[:, None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(-1)[:n]


def block_scales(x: np.ndarray, block: int) -> np.ndarray:
    """Absmax per block: NaN for a block holding any NaN, +Inf for one holding ±Inf and no NaN."""
    nb = -(-x.size // block)
    padded = np.zeros(nb * block, dtype=np.float32)
    padded[: x.size] = x
    rows = np.abs(padded.reshape(nb, block))
    with np.errstate(invalid="ignore"):
        scales = rows.max(axis=1)  # a NaN propagates through max, an Inf is the max
    scales[np.isnan(scales)] = np.nan  # one canonical NaN, bits 0x7FC00000
    return scales.astype(np.float32)


def scaled(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """v = x / s per element (s: each element's block scale), the value the codebook rounds.

    A finite positive scale divides; an infinite scale (an overflowed block) sends ±Inf as ±1
    and everything else as 0; a zero or NaN scale gives 0.
    """
    finite = np.isfinite(s) & (s > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.where(finite, x / np.where(finite, s, np.float32(1)), np.float32(0))
    v = np.where(np.isinf(s) & np.isinf(x), np.sign(x), v)
    return v.astype(np.float32)


def _codebook_codes(x: np.ndarray, fmt: Format, scales: np.ndarray, seed: int) -> np.ndarray:
    t = tables(fmt.codebook, fmt.bits)
    block = fmt.block_for(x.size)
    v = scaled(x, np.repeat(scales, block)[: x.size])
    if fmt.rounding == "nearest":
        codes = np.searchsorted(t.mids[: t.size - 1], v, side="left")
    else:
        values = t.values[: t.size]
        lo = np.clip(np.searchsorted(values, v, side="right") - 1, 0, t.size - 1)
        hi = np.minimum(lo + 1, t.size - 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = ((v - values[lo]) / (values[hi] - values[lo])).astype(np.float32)
        u = uniform(seed, np.arange(x.size, dtype=np.uint32))
        codes = lo + ((hi > lo) & (u < p))
    return codes.astype(np.uint8)


def _threshold_codes(x: np.ndarray, fmt: Format, residual: Optional[np.ndarray]) -> np.ndarray:
    g = x + residual if residual is not None else x.copy()
    levels = np.asarray(fmt.levels, dtype=np.float32)
    finite = np.isfinite(g)
    a = np.where(finite, np.abs(g), np.float32(0))
    k = np.searchsorted(levels, a, side="right")
    val = np.where(k > 0, levels[np.maximum(k - 1, 0)], np.float32(0)).astype(np.float32)
    neg = (g < 0) & (k > 0)
    half = 1 << (fmt.bits - 1)
    codes = np.where(finite, k + neg * half, half).astype(np.uint8)
    if residual is not None:
        residual[...] = np.where(finite, g - np.where(neg, -val, val), np.float32(0))
    return codes


def encode(x: np.ndarray, fmt: Format, residual: Optional[np.ndarray] = None,
           seed: Optional[int] = None) -> np.ndarray:
    """Quantize float32 `x` (1-D) into the packed uint8 buffer of `fmt`.

    residual (threshold formats): float32 error feedback, updated in place.
    seed: stochastic rounding seed (defaults to fmt.seed).
    """
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty(fmt.nbytes(x.size), dtype=np.uint8)
    if fmt.kind == CODEBOOK:
        scales = block_scales(x, fmt.block_for(x.size)) if x.size else np.zeros(0, np.float32)
        codes = _codebook_codes(x, fmt, scales, fmt.seed if seed is None else seed)
        out[: 4 * scales.size] = scales.view(np.uint8)
    else:
        codes = _threshold_codes(x, fmt, residual)
    out[4 * fmt.n_blocks(x.size):] = pack(codes, fmt.bits)
    return out


def decode(buf: np.ndarray, fmt: Format, n: int) -> np.ndarray:
    """Dequantize a packed buffer of `fmt` holding n elements to float32."""
    if buf.size != fmt.nbytes(n):
        raise ValueError(f"{fmt.name}: buffer has {buf.size} bytes, {fmt.nbytes(n)} expected for {n} elements")
    nb = fmt.n_blocks(n)
    codes = unpack(buf[4 * nb:], fmt.bits, n)
    values = fmt.decode_table()[codes]
    if fmt.kind == CODEBOOK and n:
        scales = buf[: 4 * nb].view(np.float32)
        with np.errstate(invalid="ignore"):  # 0 * Inf: the finite elements of an overflowed block
            values = values * np.repeat(scales, fmt.block_for(n))[:n]
    return values.astype(np.float32)
