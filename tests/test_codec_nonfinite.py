"""Overflow at the codec level: a block holding ±Inf keeps its infinities (issue 15).

The two-phase allreduce sums the ranks' decoded chunks in float32 and quantizes the sum again;
a sum that overflows to ±Inf must come back as inf of its sign (as Horovod's own sum gives),
never as a finite value, while a NaN still gives NaN.
"""
from __future__ import annotations

import numpy as np
import pytest

import horovod_q8 as q
from horovod_q8.backends import cpu_kernels
from horovod_q8.formats import codebooks, get
from horovod_q8.formats import reference as R

CODEBOOK_FORMATS = ["q8", "q8_linear", "q8_mantissa", "q8_static_tree", "q4"]
THRESHOLD_FORMATS = ["twobit", "q4_threshold"]
BACKENDS = ["reference", "cpu"]
INF_BITS, NAN_BITS = 0x7F800000, 0x7FC00000


def roundtrip(x, fmt, backend):
    fmt = get(fmt).for_shape(x.shape) if isinstance(fmt, str) else fmt
    r = np.zeros(x.size, np.float32) if fmt.uses_residual else None
    buf = q.quantize(x, fmt, residual=r, backend=backend)
    return buf, q.dequantize(buf, fmt, x.shape, backend=backend), r


def scale_bits(buf, fmt, n):
    return buf[: 4 * fmt.n_blocks(n)].view(np.uint32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CODEBOOK_FORMATS)
def test_inf_elements_come_back_as_inf_of_their_sign(name, backend, rng):
    x = rng.standard_normal(3000).astype(np.float32)
    x[1100], x[1500], x[2000] = np.inf, -np.inf, np.inf
    fmt = get(name)
    buf, y, _ = roundtrip(x, fmt, backend)
    assert y[1100] == np.inf and y[1500] == -np.inf and y[2000] == np.inf
    assert scale_bits(buf, fmt, x.size)[1] == INF_BITS  # the overflowed block's scale is +Inf
    others = np.ones(x.size, bool)
    others[[1100, 1500, 2000]] = False
    assert np.isnan(y[1024:2048][others[1024:2048]]).all()  # its finite elements: non-finite, never finite
    assert np.isfinite(y[:1024]).all() and np.isfinite(y[2048:]).all()  # other blocks untouched
    alone = q.dequantize(q.quantize(x[2048:], fmt, backend=backend), fmt, x.size - 2048, backend=backend)
    np.testing.assert_array_equal(y[2048:], alone)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CODEBOOK_FORMATS)
def test_nan_wins_over_inf_in_a_block(name, backend, rng):
    x = rng.standard_normal(2048).astype(np.float32)
    x[10], x[20], x[1030] = np.inf, np.nan, np.nan
    fmt = get(name)
    buf, y, _ = roundtrip(x, fmt, backend)
    assert scale_bits(buf, fmt, x.size).tolist() == [NAN_BITS, NAN_BITS]
    assert np.isnan(y).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CODEBOOK_FORMATS)
def test_all_inf_block_and_stochastic_rounding(name, backend):
    x = np.array([np.inf, -np.inf, -np.inf, np.inf, 0.0], np.float32)
    for fmt in (get(name), get(name, rounding="stochastic", seed=5)):
        buf, y, _ = roundtrip(x, fmt, backend)
        np.testing.assert_array_equal(y[:4], x[:4])
        assert np.isnan(y[4])


@pytest.mark.parametrize("name", CODEBOOK_FORMATS)
def test_finite_blocks_keep_the_absmax_spec(name, rng):
    """Finite data: scales are the absmax, codes count(mids < x/scale), independently computed."""
    fmt = get(name, block_size=256)
    t = codebooks.tables(fmt.codebook, fmt.bits)
    x = (rng.laplace(size=4096) * rng.lognormal(0, 2, 4096)).astype(np.float32)
    x[:256] = 0.0
    s = np.abs(x.reshape(-1, 256)).max(axis=1).astype(np.float32)
    with np.errstate(invalid="ignore"):
        v = np.where(np.repeat(s, 256) > 0, x / np.repeat(s, 256), 0).astype(np.float32)
    codes = np.array([np.count_nonzero(t.mids[: t.size - 1] < e) for e in v], np.uint8)
    for backend in BACKENDS:
        buf = q.quantize(x, fmt, backend=backend)
        np.testing.assert_array_equal(buf[: 4 * 16].view(np.float32), s)
        np.testing.assert_array_equal(R.unpack(buf[4 * 16:], fmt.bits, x.size), codes)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", THRESHOLD_FORMATS)
def test_threshold_formats_send_nan_for_inf(name, backend, rng):
    """Every threshold code is taken (levels of both signs and the one non-finite code), so ±Inf
    decodes to NaN, as NaN does: non-finite, never finite. The residual of that element restarts."""
    x = (rng.standard_normal(1000) * 0.01).astype(np.float32)
    x[3], x[4], x[5] = np.inf, -np.inf, np.nan
    _, y, r = roundtrip(x, name, backend)
    assert np.isnan(y[3:6]).all() and np.isfinite(y[6:]).all() and np.isfinite(y[:3]).all()
    assert (r[3:6] == 0).all()


@pytest.mark.parametrize("name", CODEBOOK_FORMATS)
@pytest.mark.parametrize("block", [64, 100, 1024, 0])
@pytest.mark.parametrize("n", [5, 1000, 70_001, cpu_kernels.FUSED_MAX + 3, 300_001])
def test_cpu_paths_match_reference_with_infinities(name, block, n, rng):
    """Fused (block by block) and two-pass kernels, serial and parallel: the reference's bytes."""
    x = rng.standard_normal(n).astype(np.float32)
    x[:: max(1, n // 7)] = np.inf
    x[3:: max(1, n // 5)] = -np.inf
    if n > 100:
        x[n // 2] = np.nan
    fmt = get(name, block_size=block)
    a = q.quantize(x, fmt, backend="reference")
    b = q.quantize(x, fmt, backend="cpu")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(q.dequantize(a, fmt, n, backend="reference"),
                                  q.dequantize(a, fmt, n, backend="cpu"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["q8", "q4"])
def test_two_phase_sum_of_large_values_overflows_to_inf(name, backend):
    """Three ranks near float32's maximum, summed as the two-phase schedule does: decode each
    rank's bytes into a float32 sum, quantize the sum, decode. Overflowed elements are inf of
    the exact sum's sign; elements of other blocks stay close to the exact sum."""
    big = np.float32(3.0e38)
    rng = np.random.default_rng(1)
    n = 4096
    ranks = [(rng.standard_normal(n) * 0.01).astype(np.float32) for _ in range(3)]
    for x in ranks:
        x[100], x[200], x[3000] = big, -big, big / 4
    fmt = get(name)
    total = np.zeros(n, np.float32)
    with np.errstate(over="ignore"):  # the float32 sum overflows, as it should
        for x in ranks:
            q.dequantize(q.quantize(x, fmt, backend=backend), fmt, n, out=total, accumulate=True, backend=backend)
        exact = np.sum(np.stack(ranks), axis=0, dtype=np.float32)
    assert exact[100] == np.inf and exact[200] == -np.inf and np.isfinite(exact[3000])
    y = q.dequantize(q.quantize(total, fmt, backend=backend), fmt, n, backend=backend)
    assert y[100] == np.inf and y[200] == -np.inf
    assert not np.isfinite(y[:1024]).any()  # the overflowed block: never a finite wrong value
    np.testing.assert_allclose(y[3000], exact[3000], rtol=0.05)
    assert np.isfinite(y[1024:]).all()
