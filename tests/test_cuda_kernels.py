"""CUDA kernels: they compile as CuPy compiles them (NVRTC) and as nvcc does; every byte they
produce equals the NumPy reference's, on a GPU or on the CUDA host build (cp fixture)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import horovod_q8 as q
from horovod_q8.backends import cuda
from horovod_q8.formats import get, names

KERNELS = sorted((Path(__file__).parent.parent / "kernels").glob("*.cu"))
SUBNORMAL = np.float32(2.0 ** -140)


def test_kernel_sources_are_shipped():
    assert KERNELS and "encode_codebook" in cuda.kernel_source()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("source", KERNELS, ids=lambda p: p.name)
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_kernel_compiles_with_nvcc(source, arch, tmp_path):
    proc = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "--std=c++14", str(source),
                           "-o", str(tmp_path / "out.ptx")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("arch", ["90", "80"])
def test_kernel_compiles_as_cupy_compiles_it(arch):
    """CuPy's NVRTC path with CuPy's options: no error, no warning, no spill (the host math
    headers nvcc includes are not there: INFINITY, for one, is undefined)."""
    pytest.importorskip("cupy")
    from horovod_q8.backends import nvrtc_check
    nvrtc_check.check_cupy_assembly()
    r = nvrtc_check.compile_like_cupy(cuda.kernel_source(), cuda.OPTIONS, arch)
    assert "-ftz=true" in r.options and f"-arch=sm_{arch}" in r.options
    assert r.ok, (r.error, r.warnings, r.kernels)
    assert sorted(k.name for k in r.kernels) == sorted(
        ["block_absmax_bits", "encode_codebook", "encode_threshold", "decode"])
    broken = cuda.kernel_source().replace("return 0.0f;", "return INFINITY;")
    bad = nvrtc_check.compile_like_cupy(broken, cuda.OPTIONS, arch)
    assert not bad.ok and "INFINITY" in bad.error


def _inputs(rng, n: int) -> np.ndarray:
    """Laplace x lognormal magnitudes, NaN/Inf/0 at a few places, and blocks of subnormals."""
    x = (rng.laplace(size=n) * rng.lognormal(0, 1.5, n)).astype(np.float32)
    x[:: max(1, n // 3)] = [np.nan, np.inf, -np.inf, 0.0][: len(x[:: max(1, n // 3)])]
    if n > 4:
        lo, hi = n // 4, n // 4 + min(n // 4, 2500)
        x[lo:hi] = (rng.standard_normal(hi - lo) * SUBNORMAL).astype(np.float32)  # subnormal scales
        x[hi: hi + 50] *= np.float32(2.0 ** -120)  # normal values whose quotients are subnormal
    return x


def _check_format(cp, fmt, x):
    n = x.size
    r_host = np.zeros(n, np.float32) if fmt.uses_residual else None
    r_dev = None if r_host is None else cp.asarray(r_host)
    for step in range(2 if r_host is not None else 1):  # a second step sees the residual
        ref = q.quantize(x, fmt, residual=r_host, backend="reference")
        dev = q.quantize(cp.asarray(x), fmt, residual=r_dev)
        assert np.array_equal(ref, cp.asnumpy(dev)), (fmt.name, n, step)
        if r_host is not None:
            assert np.array_equal(r_host, cp.asnumpy(r_dev)), (fmt.name, n, step)
    y_ref = q.dequantize(ref, fmt, n, backend="reference")
    y_dev = cp.asnumpy(q.dequantize(cp.asarray(ref), fmt, n))
    assert np.array_equal(y_ref, y_dev, equal_nan=True), fmt.name
    acc = cp.asarray(np.full(n, SUBNORMAL, np.float32))
    q.dequantize(cp.asarray(ref), fmt, n, out=acc, accumulate=True)
    assert np.array_equal(cp.asnumpy(acc), SUBNORMAL + y_ref, equal_nan=True), fmt.name


@pytest.mark.gpu
@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("kw", [{}, {"block_size": 0}, {"block_size": 100}, {"rounding": "stochastic", "seed": 3}],
                         ids=["default", "whole", "block100", "stochastic"])
def test_cuda_bytes_match_reference(cp, name, kw):
    if get(name).kind == "threshold" and kw:
        pytest.skip("threshold formats have no blocks or rounding options")
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 31, 1023, 1025, 70001, 1 << 20):
        _check_format(cp, get(name, **kw).for_shape((n,)), _inputs(rng, n))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["q8", "q4", "q8_linear", "twobit", "q4_threshold"])
def test_cuda_edges(cp, name):
    """Empty, all zeros, all subnormal (one block), ±0, the largest floats."""
    for x in (np.zeros(0, np.float32), np.zeros(5000, np.float32),
              np.full(3000, -SUBNORMAL), np.array([-0.0, 0.0, -0.0], np.float32),
              np.array([3.4e38, -3.4e38, 1.0, -2e38], np.float32),
              np.array([1e-45, -1e-45, 2e-45], np.float32)):
        fmt = get(name).for_shape(x.shape)
        if x.size:
            _check_format(cp, fmt, x)
        else:
            assert cp.asnumpy(q.quantize(cp.asarray(x), fmt)).size == fmt.nbytes(0)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["q8", "q4", "twobit"])
def test_grid_stride_loops_cover_more_than_one_grid(cp, name, monkeypatch):
    """More work than the grid holds: each thread takes several strides (as on a GPU for
    tensors over 67M elements, where the grid is capped)."""
    monkeypatch.setattr(cuda, "MAX_BLOCKS", 3)
    rng = np.random.default_rng(1)
    for n in (777, 3 * 256 * 2 + 5, 100_003):
        _check_format(cp, get(name).for_shape((n,)), _inputs(rng, n))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["q8", "q4", "q4_threshold"])
def test_decode_factor_and_sum_of_ranks(cp, name):
    """decode(scale=f) and decode_sum (the ranks' sum in order, times f) in the kernel: the same
    bits as the reference backend, subnormal products included."""
    rng = np.random.default_rng(2)
    n = 40_000
    fmt = get(name).for_shape((n,))
    bufs = [q.quantize(_inputs(rng, n), fmt, residual=np.zeros(n, np.float32) if fmt.uses_residual else None,
                       backend="reference") for _ in range(3)]
    from horovod_q8 import backends
    ref_be, dev_be = backends.get("reference"), cuda
    for f in (1.0, 1 / 3, 2.0 ** -20):
        want = ref_be.decode(bufs[0], fmt, n, scale=f)
        got = dev_be.decode(cp.asarray(bufs[0]), fmt, n, scale=f)
        assert np.array_equal(want, cp.asnumpy(got), equal_nan=True), f
        want = ref_be.decode_sum(bufs, fmt, n, np.empty(n, np.float32), f)
        got = dev_be.decode_sum([cp.asarray(b) for b in bufs], fmt, n, cp.empty(n, cp.float32), f)
        assert np.array_equal(want, cp.asnumpy(got), equal_nan=True), f


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["q8", "q8_linear", "q4"])
@pytest.mark.parametrize("kw", [{}, {"rounding": "stochastic", "seed": 3}, {"block_size": 0}])
def test_cuda_overflowed_block_keeps_its_infinities(cp, name, kw):
    """A block holding ±Inf and no NaN: scale +Inf, ±Inf decodes to ±Inf (docs/formats.md, Overflow)."""
    x = np.random.default_rng(1).standard_normal(3000).astype(np.float32)
    x[1100], x[1500] = np.inf, -np.inf
    fmt = get(name, **kw)
    if fmt.block_size:
        x[2500] = np.nan  # another block: NaN there, the Inf block keeps its infinities
    ref = q.quantize(x, fmt, backend="reference")
    dev = cp.asnumpy(q.quantize(cp.asarray(x), fmt))
    assert np.array_equal(ref, dev)
    y = cp.asnumpy(q.dequantize(cp.asarray(dev), fmt, x.size))
    assert y[1100] == np.inf and y[1500] == -np.inf
    assert np.isnan(y[2500])  # a NaN input, or (one block) a finite element of the Inf block
    assert np.isfinite(y[:1024]).all() == bool(fmt.block_size)
