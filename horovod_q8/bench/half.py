"""IEEE float16 on CPUs at memory speed: the fp16 baseline the benchmarks compare against.

NumPy converts and adds float16 at 100-300 M elements/s; Horovod's fp16 compression casts with
F16C instructions and sums float16 by converting to float32 and back (horovod/common/half.h).
These kernels do the same in integer arithmetic that LLVM vectorises, with NumPy's rounding
(to nearest, ties to even; overflow to Inf; NaN stays NaN with its sign), so a benchmark's
fp16 is timed as a real fp16 allreduce would run, not at NumPy's speed.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from numba import njit

_SIGN = np.uint32(0x80000000)
_F32_INF = np.uint32(255 << 23)
_F16_MAX = np.uint32((127 + 16) << 23)  # 2^16: this and above round to Inf in float16
_SMALLEST_NORMAL = np.uint32(113 << 23)  # 2^-14
_CHUNK = 4096


@njit(cache=True, inline="always")
def _to_half_bits(f: np.uint32, magnitude: np.float32) -> np.uint16:
    """float16 bits of the float32 with bits f; `magnitude` is its absolute value."""
    sign = f & _SIGN
    f ^= sign
    if f >= _F16_MAX:
        o = np.uint32(0x7E00) if f > _F32_INF else np.uint32(0x7C00)
    elif f < _SMALLEST_NORMAL:  # subnormal or zero in float16: units of 2^-24, ties to even
        o = np.uint32(np.rint(magnitude * np.float32(2.0 ** 24)))
    else:
        odd = (f >> np.uint32(13)) & np.uint32(1)
        f += np.uint32(((15 - 127) << 23) + 0xFFF) + odd  # rebias and round half to even
        o = f >> np.uint32(13)
    return np.uint16(o | (sign >> np.uint32(16)))


@njit(cache=True, nogil=True)
def _encode(x, xbits, out):
    for i in range(x.size):
        out[i] = _to_half_bits(xbits[i], abs(x[i]))


@njit(cache=True, inline="always")
def _widen_bits(h: np.uint16) -> np.uint32:
    """float32 bits of a float16, exact except subnormals (which come out as zero)."""
    h32 = np.uint32(h)
    e = h32 & np.uint32(0x7C00)
    o = ((h32 & np.uint32(0x7FFF)) << np.uint32(13)) + np.uint32(112 << 23)
    if e == np.uint32(0x7C00):  # Inf/NaN: float32's top exponent
        o += np.uint32(112 << 23)
    elif e == 0:
        o = np.uint32(0)
    return o | ((h32 & np.uint32(0x8000)) << np.uint32(16))


@njit(cache=True, nogil=True)
def _widen(hbits, out, obits):
    """float32 values of float16 bits (the loop over all elements vectorises; subnormals,
    rare, are patched after it, only when there is one)."""
    subnormal = False
    for j in range(hbits.size):
        obits[j] = _widen_bits(hbits[j])
        subnormal |= (hbits[j] & np.uint16(0x7C00)) == 0
    if subnormal:
        for j in range(hbits.size):
            h = hbits[j]
            if (h & np.uint16(0x7C00)) == 0 and (h & np.uint16(0x3FF)) != 0:
                v = np.float32(h & np.uint16(0x3FF)) * np.float32(2.0 ** -24)
                out[j] = -v if h & np.uint16(0x8000) else v


@njit(cache=True, nogil=True)
def _sum_into(abits, bbits):
    """bbits = half(float(a) + float(b)), a chunk at a time through float32 scratch."""
    a, b = np.empty(_CHUNK, np.float32), np.empty(_CHUNK, np.float32)
    a_bits, b_bits = a.view(np.uint32), b.view(np.uint32)
    for start in range(0, abits.size, _CHUNK):
        m = min(_CHUNK, abits.size - start)
        ha, hb = abits[start:start + m], bbits[start:start + m]
        fa, fb, ua, ub = a[:m], b[:m], a_bits[:m], b_bits[:m]
        _widen(ha, fa, ua)
        _widen(hb, fb, ub)
        for j in range(m):
            fa[j] += fb[j]
        _encode(fa, ua, hb)


def to_half(x: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """float32 -> float16, rounded as NumPy's astype(np.float16)."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty(x.size, np.float16) if out is None else out
    _encode(x, x.view(np.uint32), out.view(np.uint16))
    return out


def to_float(h: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """float16 -> float32 (exact)."""
    h = np.ascontiguousarray(h, dtype=np.float16).reshape(-1)
    out = np.empty(h.size, np.float32) if out is None else out
    _widen(h.view(np.uint16), out, out.view(np.uint32))
    return out


def add_into(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """b += a for float16 arrays, each sum taken in float32 and rounded once, as Horovod's
    float16 sum op does."""
    _sum_into(a.view(np.uint16), b.view(np.uint16))
    return b
