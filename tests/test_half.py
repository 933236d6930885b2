"""The float16 kernels behind the fp16 baseline: NumPy's bits, exhaustively where it is cheap."""
from __future__ import annotations

import numpy as np
import pytest

from horovod_q8.bench import half

ALL_HALVES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def same_bits(got: np.ndarray, ref: np.ndarray) -> None:
    """Identical bits, except that any NaN may stand for a NaN of the same sign."""
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(np.signbit(got[nan]), np.signbit(ref[nan]))
    assert np.array_equal(got[~nan].view(f"u{got.itemsize}"), ref[~nan].view(f"u{ref.itemsize}"))


@pytest.mark.parametrize("seed", range(3))
def test_to_half_rounds_as_numpy_on_random_bit_patterns(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 1 << 32, 1 << 21, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        same_bits(half.to_half(x), x.astype(np.float16))


def test_to_half_edges():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.99, 65520, -65520,
                  2.0 ** -24, 2.0 ** -25, -(2.0 ** -25) * 3, 2.0 ** -25 * 1.0000001, 6.1035156e-05,
                  1e-45, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 3e38], np.float32)
    with np.errstate(all="ignore"):
        same_bits(half.to_half(x), x.astype(np.float16))
    # every float16 value, widened, comes back unchanged
    same_bits(half.to_half(ALL_HALVES.astype(np.float32)), ALL_HALVES)


def test_to_float_is_exact_for_every_half():
    same_bits(half.to_float(ALL_HALVES), ALL_HALVES.astype(np.float32))


@pytest.mark.parametrize("shift", [1, 12345, 40000])
def test_add_into_is_the_float32_sum_rounded_once(shift):
    a, b = ALL_HALVES.copy(), np.roll(ALL_HALVES, shift)
    with np.errstate(all="ignore"):
        ref = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    same_bits(half.add_into(a, b), ref)


@pytest.mark.parametrize("n", [0, 1, 4095, 4097])
def test_sizes_around_the_chunk(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    h = half.to_half(x)
    same_bits(h, x.astype(np.float16))
    same_bits(half.to_float(h), h.astype(np.float32))
    b = h[::-1].copy()
    same_bits(half.add_into(h, b), (h.astype(np.float32) + h[::-1].astype(np.float32)).astype(np.float16))
