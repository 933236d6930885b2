"""The CUDA host build finds what a GPU would get wrong: races around barriers and shuffles,
writes outside an allocation, kernel-argument mix-ups, float32 results that depend on CuPy's
-ftz=true. Each case mutates kernels/codec.cu (or launches a small kernel) and must fail."""
from __future__ import annotations

import numpy as np
import pytest

import horovod_q8 as q
from horovod_q8.backends import cuda, cuda_host
from horovod_q8.formats import get

pytestmark = pytest.mark.skipif(cuda_host.unavailable() is not None, reason=str(cuda_host.unavailable()))


@pytest.fixture
def dev():
    with cuda_host.device() as d:
        yield d


def _with_source(monkeypatch, old: str, new: str, count: int = 1) -> None:
    """Run backends.cuda on kernels/codec.cu with `old` replaced by `new`."""
    src = cuda.kernel_source()
    assert src.count(old) == count, old
    monkeypatch.setattr(cuda, "kernel_source", lambda: src.replace(old, new))
    cuda._module.cache_clear()
    monkeypatch.setattr(cuda, "_module", cuda._module)


@pytest.fixture(autouse=True)
def _fresh_module():
    cuda._module.cache_clear()
    yield
    cuda._module.cache_clear()


def _parity(dev, name: str, x: np.ndarray) -> bool:
    fmt = get(name).for_shape(x.shape)
    ref = q.quantize(x, fmt, backend="reference")
    if not np.array_equal(ref, dev.asnumpy(q.quantize(dev.asarray(x), fmt))):
        return False
    y = dev.asnumpy(q.dequantize(dev.asarray(ref), fmt, x.size))
    return np.array_equal(q.dequantize(ref, fmt, x.size, backend="reference"), y, equal_nan=True)


X = np.random.default_rng(0).standard_normal(50_001).astype(np.float32)


@pytest.mark.parametrize("name", ["q8", "q4"])
def test_shipped_kernels_pass(dev, name):
    assert _parity(dev, name, X)


@pytest.mark.parametrize("kernel_line", [
    "    for (int t = threadIdx.x; t < L; t += blockDim.x) { s_mids[t] = widen(mids[t]); s_vals[t] = widen(values[t]); }\n    __syncthreads();",
    "    for (int t = threadIdx.x; t < L; t += blockDim.x) s_table[t] = widen(table[t]);\n    __syncthreads();",
    "    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;\n    __syncthreads();",
], ids=["encode", "decode", "absmax"])
def test_a_dropped_syncthreads_fails(dev, monkeypatch, kernel_line):
    _with_source(monkeypatch, kernel_line, kernel_line.replace("__syncthreads();", ""))
    assert not _parity(dev, "q4", X)


def test_a_wrong_shuffle_offset_fails(dev, monkeypatch):
    _with_source(monkeypatch, "for (int off = 16; off > 0; off >>= 1)", "for (int off = 8; off > 0; off >>= 1)", 2)
    assert not _parity(dev, "q8", X)


@pytest.mark.parametrize("old,new", [
    ("long long end = min(min(start + seg, (b + 1) * block), n);",
     "long long end = min(min(start + seg + 1, (b + 1) * block + 1), n + 1);"),
    ("            if (j >= n) break;\n            double t", "            if (j > n) break;\n            double t"),
    ("codes[k] = (unsigned char)acc;\n    }\n}\n\n// Threshold", "codes[k + 1] = (unsigned char)acc;\n    }\n}\n\n// Threshold"),
], ids=["absmax-end", "decode-tail", "encode-index"])
def test_an_off_by_one_fails(dev, monkeypatch, old, new):
    _with_source(monkeypatch, old, new)
    with pytest.raises((AssertionError, RuntimeError)):
        assert _parity(dev, "q4", X[:4099])  # odd: the last byte holds one code


def test_float32_division_under_ftz_fails_on_subnormals(dev, monkeypatch):
    """What the kernels did before: __fdiv_rn, which CuPy's -ftz=true flushes."""
    _with_source(monkeypatch, "narrow(__ddiv_rn(widen(xj), widen(s)))", "__fdiv_rn(xj, s)")
    assert _parity(dev, "q8", X)
    tiny = (X * np.float32(2.0 ** -140)).astype(np.float32)
    assert not _parity(dev, "q8", tiny)


TOY = r'''
extern "C" {
__global__ void exit_early(int* out) {
    if (threadIdx.x == 0) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
__global__ void partial_warp(unsigned int* out) {
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, threadIdx.x, 1);
}
__global__ void one_past(float* out, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;
}
__global__ void scalars(long long n, float f, int* out) { out[0] = (int)n + (int)f; }
}
'''


def test_launch_faults_are_named(dev):
    mod = dev.RawModule(code=TOY)
    out = dev.zeros(64, dev.int32)
    with pytest.raises(RuntimeError, match="__syncthreads reached by 63 threads while 1 have exited"):
        mod.get_function("exit_early")((1,), (64,), (out,))
    with pytest.raises(RuntimeError, match="partial warp"):
        mod.get_function("partial_warp")((1,), (40,), (dev.zeros(40, dev.uint32),))
    with pytest.raises(RuntimeError, match="wrote 4 byte\\(s\\) after"):
        mod.get_function("one_past")((2,), (32,), (dev.zeros(50, dev.float32), dev.int64(50)))
    with pytest.raises(RuntimeError, match="1024 threads"):
        mod.get_function("one_past")((1,), (2048,), (dev.zeros(50, dev.float32), dev.int64(50)))
    f = mod.get_function("scalars")
    assert f.signature == "qfp"
    with pytest.raises(TypeError, match="argument 0 must be int64"):
        f((1,), (1,), (dev.int32(3), dev.float32(2), out))
    with pytest.raises(TypeError, match="argument 2 must be a device array"):
        f((1,), (1,), (dev.int64(3), dev.float32(2), np.zeros(1, np.int32)))
    f((1,), (1,), (dev.int64(3), dev.float32(2), out))
    assert dev.asnumpy(out)[0] == 5


def test_device_arrays_behave_as_cupy_arrays(dev):
    tiny = dev.asarray(np.array([1e-40, 1.0], np.float32))
    assert dev.asnumpy(tiny * dev.float32(1))[0] == 0  # CuPy's elementwise kernels flush (-ftz=true)
    assert np.array([1e-40], np.float32)[0] * np.float32(1) != 0  # NumPy does not
    with pytest.raises(TypeError, match="host"):
        tiny + np.ones(2, np.float32)
    buf = dev.empty(4, dev.float32)
    assert np.isnan(dev.asnumpy(buf)).all()  # uninitialised device memory is poisoned
    y = buf
    y *= dev.float32(2)
    assert y is buf and isinstance(y, dev.ndarray)


def test_a_source_that_does_not_compile_names_the_line(dev):
    with pytest.raises(cuda_host.CompileError, match=r"codec.cu:\d+"):
        dev.RawModule(code=cuda.kernel_source().replace("return 0.0f;", "return INFINITY;"))


def test_doctor_compiles_the_kernels_as_cupy_does():
    """`horovod-q8 doctor` checks the kernels with NVRTC where CuPy is installed, GPU or not, and
    so catches what `nvcc -ptx` lets through (INFINITY, which NVRTC does not define)."""
    pytest.importorskip("cupy")
    from horovod_q8 import doctor
    from horovod_q8.doctor_paths import FIX, OK, SKIP

    state, line = doctor._kernels()
    assert state in (OK, SKIP) and "NVRTC" in line, line
    state, line = doctor._kernels(cuda.kernel_source() + "\n__device__ float hq8_inf() { return INFINITY; }\n")
    assert state == FIX and "INFINITY" in line, line
