"""CUDA backend: CuPy RawKernels compiled lazily from kernels/codec.cu.

CuPy compiles them with NVRTC (`nvrtc_check.compile_like_cupy` repeats that without a GPU); the
host build (`cuda_host`) runs this module unchanged on the CPU."""
from __future__ import annotations

import functools
from typing import Optional

from horovod_q8 import _compat
from horovod_q8.backends.common import check_decode_scale, decode_sum_by_parts, kernel_source
from horovod_q8.formats.codebooks import tables
from horovod_q8.formats.spec import CODEBOOK, Format

THREADS = 256
MAX_BLOCKS = 65535 * 4  # grid cap; the kernels' grid-stride loops cover the rest
OPTIONS = ("--std=c++14",)


def _cp():
    cp = _compat.cupy()
    if cp is None:
        raise RuntimeError("the CUDA backend needs CuPy and a visible GPU")
    return cp


@functools.lru_cache(maxsize=None)
def _module(cp):
    return cp.RawModule(code=kernel_source(), options=OPTIONS)


@functools.lru_cache(maxsize=None)
def _device_table(cp, fmt: Format, which: str):
    if which == "decode":
        return cp.asarray(fmt.decode_table())
    if which == "levels":
        return cp.asarray(list(fmt.levels), dtype=cp.float32)
    t = tables(fmt.codebook, fmt.bits)
    return cp.asarray(getattr(t, which))


def _grid(work: int) -> tuple:
    return (max(1, min(-(-work // THREADS), MAX_BLOCKS)),)


def encode(x, fmt: Format, residual=None, seed: Optional[int] = None, out=None):
    """Quantize a float32 1-D CuPy array; same bytes as formats.reference.encode."""
    cp = _cp()
    n = x.size
    if out is None:
        out = cp.empty(fmt.nbytes(n), dtype=cp.uint8)
    nb = fmt.n_blocks(n)
    if n == 0:
        return out
    per = 8 // fmt.bits
    codes = out[4 * nb:]
    mod = _module(cp)
    if fmt.kind == CODEBOOK:
        block = fmt.block_for(n)
        scale_bits = out[: 4 * nb].view(cp.uint32)
        scale_bits.fill(0)
        seg = min(block, 8192)
        segs = -(-block // seg)
        mod.get_function("block_absmax_bits")(
            (nb * segs,), (THREADS,), (x, cp.int64(n), cp.int64(block), cp.int64(seg),
                                       cp.int64(segs), scale_bits))
        t = tables(fmt.codebook, fmt.bits)
        mod.get_function("encode_codebook")(
            _grid(-(-n // per)), (THREADS,),
            (x, cp.int64(n), cp.int64(block), scale_bits.view(cp.float32), codes,
             _device_table(cp, fmt, "mids"), _device_table(cp, fmt, "values"), cp.int32(t.size),
             cp.int32(fmt.bits), cp.int32(fmt.rounding == "stochastic"),
             cp.uint32((fmt.seed if seed is None else seed) & 0xFFFFFFFF)))
    else:
        use = residual is not None
        r = residual if use else cp.empty(1, cp.float32)
        mod.get_function("encode_threshold")(
            _grid(-(-n // per)), (THREADS,),
            (x, cp.int64(n), r, cp.int32(use), codes, _device_table(cp, fmt, "levels"),
             cp.int32(len(fmt.levels)), cp.int32(fmt.bits)))
    return out


def decode(buf, fmt: Format, n: int, out=None, accumulate: bool = False, scale: float = 1.0):
    """Dequantize into a float32 CuPy array (or add into it when accumulate); times float32
    `scale` (not with accumulate)."""
    check_decode_scale(scale, accumulate)
    return _decode(buf, fmt, n, out, accumulate, scale)


def _decode(buf, fmt: Format, n: int, out, accumulate: bool, factor: float):
    """out = decoded (or out + decoded), then times float32 `factor`, in one kernel: a CuPy
    elementwise multiply would flush subnormal products (CuPy compiles with -ftz=true)."""
    cp = _cp()
    if out is None:
        out = cp.zeros(n, cp.float32) if accumulate else cp.empty(n, cp.float32)
    if n == 0:
        return out
    nb = fmt.n_blocks(n)
    per = 8 // fmt.bits
    scales = buf[: 4 * nb].view(cp.float32) if nb else cp.empty(1, cp.float32)
    _module(cp).get_function("decode")(
        _grid(-(-n // per)), (THREADS,),
        (buf[4 * nb:], cp.int64(n), cp.int64(fmt.block_for(n)), scales, cp.int32(fmt.has_scales),
         _device_table(cp, fmt, "decode"), cp.int32(fmt.bits), out, cp.int32(accumulate),
         cp.float32(factor)))
    return out


def decode_sum(bufs, fmt: Format, n: int, out, scale: float = 1.0):
    """out = (sum of the values of `bufs`, added in order) * float32 `scale`: one decode per part,
    the last one applying the factor."""
    if not bufs:
        return decode_sum_by_parts(decode, bufs, fmt, n, out, scale)
    for r, buf in enumerate(bufs):
        _decode(buf, fmt, n, out, r > 0, scale if r == len(bufs) - 1 else 1.0)
    return out
