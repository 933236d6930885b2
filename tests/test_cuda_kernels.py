"""CUDA kernels: compile everywhere nvcc is; byte parity with the NumPy reference on a GPU."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import horovod_q8 as q
from horovod_q8.formats import get, names

KERNELS = sorted((Path(__file__).parent.parent / "kernels").glob("*.cu"))


def test_kernel_sources_are_shipped():
    from horovod_q8.backends import cuda
    assert KERNELS and "encode_codebook" in cuda.kernel_source()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("source", KERNELS, ids=lambda p: p.name)
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_kernel_compiles_with_nvcc(source, arch, tmp_path):
    proc = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "--std=c++14", str(source),
                           "-o", str(tmp_path / "out.ptx")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("kw", [{}, {"block_size": 0}, {"block_size": 100}, {"rounding": "stochastic", "seed": 3}])
def test_cuda_bytes_match_reference(cp, name, kw):
    if get(name).kind == "threshold" and kw:
        pytest.skip("threshold formats have no blocks or rounding options")
    rng = np.random.default_rng(0)
    for n in (1, 3, 1023, 1025, 70001, 1 << 20):
        x = (rng.laplace(size=n) * rng.lognormal(0, 1.5, n)).astype(np.float32)
        x[:: max(1, n // 3)] = [np.nan, np.inf, -np.inf, 0.0][: len(x[:: max(1, n // 3)])]
        fmt = get(name, **kw).for_shape((n,))
        r_host = np.zeros(n, np.float32) if fmt.uses_residual else None
        r_dev = None if r_host is None else cp.asarray(r_host)
        ref = q.quantize(x, fmt, residual=r_host, backend="reference")
        dev = q.quantize(cp.asarray(x), fmt, residual=r_dev)
        assert np.array_equal(ref, cp.asnumpy(dev)), (name, kw, n)
        if r_host is not None:
            assert np.array_equal(r_host, cp.asnumpy(r_dev))
        y_ref = q.dequantize(ref, fmt, n, backend="reference")
        y_dev = q.dequantize(cp.asarray(ref), fmt, n)
        assert np.array_equal(y_ref, cp.asnumpy(y_dev), equal_nan=True)
        acc = cp.ones(n, cp.float32)
        q.dequantize(cp.asarray(ref), fmt, n, out=acc, accumulate=True)
        np.testing.assert_array_equal(cp.asnumpy(acc), np.float32(1) + y_ref)


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
