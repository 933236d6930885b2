"""The formats: error budgets over many random draws, edge cases, and the byte layout."""
from __future__ import annotations

import numpy as np
import pytest

import horovod_q8 as q
from horovod_q8.formats import codebooks, get, names
from horovod_q8.formats import reference as R

CODEBOOK_FORMATS = ["q8", "q8_linear", "q8_mantissa", "q8_static_tree", "q4"]
BACKENDS = ["reference", "cpu"]


def max_gap(fmt) -> float:
    t = codebooks.tables(fmt.codebook, fmt.bits)
    return float(np.diff(t.values[: t.size]).max())


def heavy_tailed(rng, n):
    return (rng.laplace(size=n) * rng.lognormal(0, 1.5, size=n)).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CODEBOOK_FORMATS)
@pytest.mark.parametrize("block", [0, 64, 1000])
def test_nearest_error_within_half_gap(name, block, backend, rng):
    """Nearest rounding: every element lies within half the widest codebook gap times its scale."""
    fmt = get(name, block_size=block)
    for draw in range(20):
        n = int(rng.integers(1, 5000))
        x = heavy_tailed(rng, n) if draw % 2 else rng.standard_normal(n).astype(np.float32)
        y = q.dequantize(q.quantize(x, fmt, backend=backend), fmt, n, backend=backend)
        b = fmt.block_for(n)
        scale = np.repeat(R.block_scales(x, b), b)[:n]
        assert np.all(np.abs(y - x) <= scale * max_gap(fmt) / 2 * (1 + 1e-5) + 1e-30)


@pytest.mark.parametrize("name,budget", [("q8", 0.02), ("q8_linear", 0.012), ("q8_mantissa", 0.02),
                                         ("q8_static_tree", 0.06), ("q4", 0.14)])
def test_mean_relative_error_budget(name, budget, rng):
    """Mean |error| / mean |x| on Gaussian data over many draws, blocks of 1024."""
    errs = []
    for _ in range(30):
        x = rng.standard_normal(20000).astype(np.float32)
        y = q.dequantize(q.quantize(x, name), name, x.size)
        errs.append(np.abs(y - x).mean() / np.abs(x).mean())
    assert max(errs) < budget


def test_dynamic_tree_beats_linear_on_heavy_tails(rng):
    """Dettmers' finding, with one scale per tensor as in the paper."""
    x = heavy_tailed(rng, 200000)
    rel = {}
    for name in ("q8", "q8_linear"):
        fmt = get(name, block_size=0)
        y = q.dequantize(q.quantize(x, fmt), fmt, x.size)
        rel[name] = np.abs(y - x).mean() / np.abs(x).mean()
    assert rel["q8"] < rel["q8_linear"] / 2


@pytest.mark.parametrize("name", CODEBOOK_FORMATS)
def test_stochastic_rounding_is_unbiased_and_seeded(name, rng):
    fmt = get(name, rounding="stochastic", block_size=256)
    x = rng.standard_normal(4096).astype(np.float32)
    a = q.quantize(x, fmt, seed=1)
    assert np.array_equal(a, q.quantize(x, fmt, seed=1))
    assert not np.array_equal(a, q.quantize(x, fmt, seed=2))
    mean = np.mean([q.dequantize(q.quantize(x, fmt, seed=s), fmt, x.size) for s in range(200)], axis=0)
    scale = np.repeat(R.block_scales(x, 256), 256)
    # each draw errs by at most one gap; the mean of 200 independent draws shrinks ~ 1/sqrt(200)
    assert np.abs(mean - x).max() <= (scale * max_gap(fmt) * 0.3).max()
    assert abs(float((mean - x).mean())) < 1e-3 * float(np.abs(x).mean())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,levels", [("twobit", (0.5,)), ("q4_threshold", None)])
def test_threshold_residual_conserves_the_signal(name, levels, backend, rng):
    """decoded + new residual == x + old residual, and the residual stays below the top level."""
    fmt = get(name).for_shape((3, 3, 8, 8))
    residual = np.zeros(4096, np.float32)
    total_sent = np.zeros(4096, np.float64)
    total_x = np.zeros(4096, np.float64)
    for step in range(50):
        x = (rng.standard_normal(4096) * 0.01).astype(np.float32)
        before = residual.copy()
        y = q.dequantize(q.quantize(x, fmt, residual=residual, backend=backend), fmt, 4096, backend=backend)
        np.testing.assert_allclose(y + residual, x + before, rtol=1e-6, atol=1e-7)
        assert np.all(np.isin(y, np.concatenate([[0], fmt.levels, -np.asarray(fmt.levels)]).astype(np.float32)))
        total_sent += y
        total_x += x
    np.testing.assert_allclose(total_sent + residual, total_x, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", names())
class TestEdgeCases:
    def roundtrip(self, x, name, backend, **kw):
        fmt = get(name).for_shape(x.shape)
        r = np.zeros(x.size, np.float32) if fmt.uses_residual else None
        buf = q.quantize(x, fmt, residual=r, backend=backend)
        assert buf.dtype == np.uint8 and buf.size == q.nbytes(fmt, x.shape)
        return q.dequantize(buf, fmt, x.shape, dtype=x.dtype, backend=backend, **kw)

    def test_empty(self, name, backend):
        y = self.roundtrip(np.zeros(0, np.float32), name, backend)
        assert y.shape == (0,)

    def test_one_element(self, name, backend):
        y = self.roundtrip(np.array([0.75], np.float32), name, backend)
        assert y.shape == (1,)
        if get(name).kind == "codebook":
            assert y[0] == np.float32(0.75)  # the absmax element is exact: the top code is 1.0

    def test_not_divisible_by_block_or_pack(self, name, backend, rng):
        x = rng.standard_normal(1024 * 3 + 5).astype(np.float32)
        y = self.roundtrip(x, name, backend)
        assert y.shape == x.shape and np.all(np.isfinite(y))

    def test_all_zeros(self, name, backend):
        y = self.roundtrip(np.zeros((7, 13), np.float32), name, backend)
        assert y.shape == (7, 13) and not np.any(y)

    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    def test_non_finite_propagates(self, name, backend, bad, rng):
        x = rng.standard_normal(3000).astype(np.float32)
        x[1500] = bad
        y = self.roundtrip(x, name, backend)
        assert not np.isfinite(y[1500])
        assert np.isfinite(y[:1024]).all()  # other blocks are untouched

    @pytest.mark.parametrize("dtype", [np.float16, np.float64])
    def test_other_float_dtypes(self, name, backend, dtype, rng):
        x = (rng.standard_normal(999) * 0.05).astype(dtype)
        y = self.roundtrip(x, name, backend)
        assert y.dtype == dtype and y.shape == x.shape

    @pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_])
    def test_integer_input_is_refused(self, name, backend, dtype):
        with pytest.raises(TypeError, match="send integer tensors uncompressed"):
            q.quantize(np.ones(10, dtype), name, backend=backend)


def test_byte_layout_example():
    """The worked example of docs/formats.md: q4 on [1, -1, 0] with one block."""
    buf = q.quantize(np.array([1.0, -1.0, 0.0], np.float32), "q4")
    assert buf.tolist() == [0x00, 0x00, 0x80, 0x3F, 0x0E, 0x07]
    buf = q.quantize(np.array([0.5, -0.5, 0.0, np.nan, 0.1], np.float32), "twobit")
    assert buf.tolist() == [0b10_00_11_01, 0b00]


def test_unknown_names_and_options_are_clear_errors():
    with pytest.raises(ValueError, match="unknown format 'q7'.*q8_linear"):
        get("q7")
    with pytest.raises(ValueError, match="rounding"):
        get("q8", rounding="up")
    with pytest.raises(ValueError, match="codebook format"):
        get("q8", threshold=0.1)
    with pytest.raises(ValueError, match="groups"):
        get("q4_threshold", levels={"lstm": 0.1})
    with pytest.raises(ValueError, match="buffer has"):
        q.dequantize(np.zeros(3, np.uint8), "q8", 10)


def test_q4_threshold_groups_by_rank():
    fmt = get("q4_threshold", levels={"conv": 0.08, "dense": 0.04, "other": 0.02})
    assert fmt.for_shape((3, 3, 1, 8)).levels[-1] == pytest.approx(0.08)
    assert fmt.for_shape((128, 10)).levels[-1] == pytest.approx(0.04)
    assert fmt.for_shape((10,)).levels[-1] == pytest.approx(0.02)
    assert len(fmt.for_shape((10,)).levels) == 7


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("kw", [{}, {"block_size": 0}, {"block_size": 100}, {"rounding": "stochastic", "seed": 9}])
def test_cpu_backend_matches_reference_bytes(name, kw, rng):
    if get(name).kind == "threshold" and kw:
        pytest.skip("threshold formats have no blocks or rounding options")
    for n in (1, 3, 1023, 1025, 70001, 300_001):  # the last one takes the parallel kernels
        fmt = get(name, **kw).for_shape((n,))
        x = heavy_tailed(rng, n)
        x[:: max(1, n // 3)] = [np.nan, np.inf, -np.inf, 0.0][: len(x[:: max(1, n // 3)])]
        r1 = np.zeros(n, np.float32) if fmt.uses_residual else None
        r2 = None if r1 is None else r1.copy()
        a = q.quantize(x, fmt, residual=r1, backend="reference")
        b = q.quantize(x, fmt, residual=r2, backend="cpu")
        assert np.array_equal(a, b)
        if r1 is not None:
            assert np.array_equal(r1, r2)
        ya = q.dequantize(a, fmt, n, backend="reference")
        yb = q.dequantize(a, fmt, n, backend="cpu")
        assert np.array_equal(ya, yb, equal_nan=True)


@pytest.mark.parametrize("name", [n for n in codebooks.VALUE_TABLES if n.endswith(codebooks.UNSIGNED_SUFFIX)])
def test_unsigned_tables_fill_every_code_with_a_non_negative_value(name):
    """The sign bit becomes a precision bit: 2**bits distinct values in [0, 1], with 0 and 1."""
    bits = 4 if name.startswith("q4") else 8
    t = codebooks.tables(name, bits)
    values = t.values[: t.size]
    assert t.size == 2 ** bits and values[0] == 0.0 and values[-1] == 1.0
    assert np.all(np.diff(values) > 0)
    signed = codebooks.tables(name[: -len(codebooks.UNSIGNED_SUFFIX)], bits)
    assert np.diff(values).max() <= np.diff(signed.values[: signed.size]).max()
