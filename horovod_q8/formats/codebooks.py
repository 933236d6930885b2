"""The value tables of the codebook formats, and the lookup tables derived from them.

Every codebook is a sorted list of at most 2**bits distinct float32 values in [-1, 1]
that contains 0 and whose largest value is exactly 1. A code is the index of a value in
that sorted list. `docs/formats.md` gives the construction of each table.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


def _normalise(positive: list[float]) -> np.ndarray:
    """Mirror positive magnitudes, add 0, scale so the largest value is 1, sort."""
    pos = np.asarray(positive, dtype=np.float64)
    pos = pos / pos.max()
    values = np.concatenate([-pos, [0.0], pos]).astype(np.float32)
    return np.unique(values)  # sorted, duplicates removed


def linear_values() -> np.ndarray:
    """Linear quantization: k/127 for k in -127..127."""
    return _normalise([k / 127 for k in range(1, 128)])


def mantissa_values() -> np.ndarray:
    """8-bit mantissa approximation: a minifloat with 1 sign, 3 exponent, 4 mantissa bits.

    Exponent field e=1..7 gives 2**(e-7) * (1 + m/16); e=0 gives subnormals 2**-6 * m/16.
    """
    pos = [2.0 ** -6 * m / 16 for m in range(1, 16)]
    pos += [2.0 ** (e - 7) * (1 + m / 16) for e in range(1, 8) for m in range(16)]
    return _normalise(pos)


def _tree(exponent_values: range, fraction_bits) -> list[float]:
    """Decimal exponent 10**-z times a linear fraction in [0.1, 1] (bin midpoints)."""
    out = []
    for z in exponent_values:
        f = fraction_bits(z)
        out += [10.0 ** -z * (0.1 + 0.9 * (k + 0.5) / 2 ** f) for k in range(2 ** f)]
    return out


def static_tree_values() -> np.ndarray:
    """Static tree: a fixed split of the 7 magnitude bits, 3 exponent bits and 4 fraction bits.

    The smallest magnitude (z=7, k=0) is dropped to make room for an exact zero.
    """
    pos = sorted(_tree(range(8), lambda z: 4))[1:]
    return _normalise(pos)


def dynamic_tree_values() -> np.ndarray:
    """Dynamic tree (Dettmers): the number of leading zero bits z is the decimal exponent,
    a 1 bit ends it, and the remaining 6 - z bits are a linear fraction in [0.1, 1]."""
    return _normalise(_tree(range(7), lambda z: 6 - z))


def q4_values() -> np.ndarray:
    """4-bit normal-quantile codebook: 0 and +-Phi^-1(0.5 + i/7 * 15/32), i=1..7, normalised."""
    nd = NormalDist()
    return _normalise([nd.inv_cdf(0.5 + i / 7 * (0.5 - 1 / 32)) for i in range(1, 8)])


def _normalise_unsigned(positive: list[float]) -> np.ndarray:
    """Add 0 to positive magnitudes, scale so the largest value is 1, sort."""
    pos = np.asarray(positive, dtype=np.float64)
    return np.unique(np.concatenate([[0.0], pos / pos.max()]).astype(np.float32))


# The unsigned variants, for blocks with no negative value (ReLU outputs): the sign bit
# becomes one more bit of the same construction, so every code is a value >= 0.

def linear_unsigned_values() -> np.ndarray:
    """k/255 for k in 0..255."""
    return _normalise_unsigned([k / 255 for k in range(1, 256)])


def mantissa_unsigned_values() -> np.ndarray:
    """3 exponent and 5 mantissa bits: 2**(e-7) * (1 + m/32), subnormals 2**-6 * m/32."""
    pos = [2.0 ** -6 * m / 32 for m in range(1, 32)]
    pos += [2.0 ** (e - 7) * (1 + m / 32) for e in range(1, 8) for m in range(32)]
    return _normalise_unsigned(pos)


def static_tree_unsigned_values() -> np.ndarray:
    """3 exponent bits and 5 fraction bits; the smallest magnitude makes room for zero."""
    return _normalise_unsigned(sorted(_tree(range(8), lambda z: 5))[1:])


def dynamic_tree_unsigned_values() -> np.ndarray:
    """z leading zeros, a 1 bit, then 7 - z fraction bits (z = 0..7)."""
    return _normalise_unsigned(_tree(range(8), lambda z: 7 - z))


def q4_unsigned_values() -> np.ndarray:
    """0 and the half-normal quantiles Phi^-1(0.5 + i/15 * 15/32), i=1..15, normalised."""
    nd = NormalDist()
    return _normalise_unsigned([nd.inv_cdf(0.5 + i / 15 * (0.5 - 1 / 32)) for i in range(1, 16)])


VALUE_TABLES = {
    "linear": linear_values,
    "mantissa": mantissa_values,
    "static_tree": static_tree_values,
    "dynamic_tree": dynamic_tree_values,
    "q4": q4_values,
    "linear_unsigned": linear_unsigned_values,
    "mantissa_unsigned": mantissa_unsigned_values,
    "static_tree_unsigned": static_tree_unsigned_values,
    "dynamic_tree_unsigned": dynamic_tree_unsigned_values,
    "q4_unsigned": q4_unsigned_values,
}
UNSIGNED_SUFFIX = "_unsigned"


@dataclass(frozen=True)
class CodebookTables:
    """Everything an encoder or decoder needs, padded to fixed sizes for the kernels."""

    values: np.ndarray  # float32[2**bits]; entries past `size` repeat the last value
    mids: np.ndarray  # float32[2**bits]; mids[i] = (values[i]+values[i+1])/2, +inf past size-2
    lut: np.ndarray  # uint8[65536]; lut[bits(v) >> 16] = count(mids < smallest v of that key)
    carry: np.ndarray  # uint32[65536] (8-bit tables, else empty): see carry_table
    size: int  # number of distinct values
    zero_code: int  # index of 0.0
    positive_mid_bits: np.ndarray  # int32 bits of the positive mids if the table is symmetric about 0, else empty


def _key_range(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest float32 whose top 16 bits equal each key."""
    lo_bits = (keys.astype(np.uint32) << 16)
    hi_bits = lo_bits | np.uint32(0xFFFF)
    a, b = lo_bits.view(np.float32), hi_bits.view(np.float32)
    negative = keys >= 0x8000
    return np.where(negative, b, a), np.where(negative, a, b)


def bucket_lut(edges: np.ndarray, side: str, what: str) -> np.ndarray:
    """uint8[65536]: for each top-16-bit key of a float32 in [-1, 1] (any float for side
    "right"), searchsorted(edges, smallest float of that key, side). The kernels add one
    comparison with the next edge, exact as long as no key spans two edges (checked here).
    """
    vmin, vmax = _key_range(np.arange(65536, dtype=np.uint32))
    with np.errstate(invalid="ignore"):
        lo = np.searchsorted(edges, vmin, side=side)
        hi = np.searchsorted(edges, vmax, side=side)
    in_range = np.isfinite(vmin) & np.isfinite(vmax)
    if side == "left":
        in_range &= (vmax >= -1) & (vmin <= 1)
    if np.any((hi - lo)[in_range] > 1):
        raise ValueError(f"{what}: two edges are too close together for the 16-bit lookup")
    return np.where(in_range, lo, 0).astype(np.uint8)


def carry_table(lut: np.ndarray, mids: np.ndarray) -> np.ndarray:
    """uint32[65536]: count(mids < v) = (carry[key] + low) >> 16 for every float32 v in [-1, 1],
    key = bits(v) >> 16, low = its low 16 bits, inverted for a negative v (whose value falls as
    they rise). Entry: (lut[key] << 16) + (0xFFFF - t), t the inverted-or-not low bits of the
    one mid a key may hold (mids[lut[key]]), so that the sum carries exactly where v is above
    it; lut[key] << 16 alone where the key holds none (it never carries). One lookup and no
    comparison."""
    keys = np.arange(65536, dtype=np.uint32)
    k = lut.astype(np.uint32)
    mid_bits = mids[k].view(np.uint32)
    inside = np.isfinite(mids[k]) & ((mid_bits >> 16) == keys)
    low = mid_bits & np.uint32(0xFFFF)
    t = np.where(keys >= 0x8000, np.uint32(0xFFFF) - low, low)
    return (k << 16) + np.where(inside, np.uint32(0xFFFF) - t, np.uint32(0)).astype(np.uint32)


@functools.lru_cache(maxsize=None)
def threshold_tables(levels: tuple) -> tuple:
    """(lut, padded levels) for a threshold format: k = count(levels <= |g|)."""
    lv = np.asarray(levels, dtype=np.float32)
    padded = np.full(len(lv) + 1, np.inf, dtype=np.float32)
    padded[: len(lv)] = lv
    return bucket_lut(lv, "right", f"levels {levels}"), padded


@functools.lru_cache(maxsize=None)
def tables(name: str, bits: int) -> CodebookTables:
    """Build (once) the padded tables of codebook `name` for a `bits`-bit code."""
    values = VALUE_TABLES[name]()
    n_codes = 2 ** bits
    if len(values) > n_codes or values[-1] != 1.0 or 0.0 not in values:
        raise ValueError(f"codebook {name!r} does not fit {bits} bits")
    size = len(values)
    mids64 = (values[:-1].astype(np.float64) + values[1:]) / 2
    mids = np.full(n_codes, np.inf, dtype=np.float32)
    mids[: size - 1] = mids64.astype(np.float32)
    padded = np.full(n_codes, values[-1], dtype=np.float32)
    padded[:size] = values

    lut = bucket_lut(mids[: size - 1], "left", name)
    zero_code = int(np.nonzero(values == 0.0)[0][0])
    real = mids[: size - 1]
    symmetric = bool(np.array_equal(real, -real[::-1]))
    positive = real[real > 0].view(np.int32).copy() if symmetric else np.zeros(0, np.int32)
    carry = carry_table(lut, mids) if bits == 8 else np.zeros(0, np.uint32)
    return CodebookTables(padded, mids, lut, carry, size, zero_code, positive)
