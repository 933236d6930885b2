"""CPU backend: the native AVX-512 or AVX2 kernels where they apply (`backends.native`), else
the Numba ones, behind the same signatures as the NumPy reference."""
from __future__ import annotations

import functools
from typing import Optional, Sequence

import numpy as np

from horovod_q8.backends import cpu_kernels as K
from horovod_q8.backends import native
from horovod_q8.backends.common import check_decode_scale, check_sizes, decode_sum_by_parts
from horovod_q8.formats.codebooks import tables
from horovod_q8.formats.spec import CODEBOOK, Format

MAX_LEVELS = 7  # the threshold kernel's unrolled level count: 2 ** (bits - 1) - 1 for 4 bits


def native_encoder(fmt: Format, n: int):
    """The native kernel's tables if it encodes `fmt` for n elements here, else None: the
    AVX-512 kernels' (8- or 4-bit), else the AVX2 ones' (native.Avx2Tables, native.Avx2Q4)."""
    if fmt.kind != CODEBOOK or fmt.rounding != "nearest":
        return None
    avx512 = native.library() is not None
    if not avx512 and native.library_avx2() is None:
        return None
    if fmt.bits == 8:
        return native.symmetric_tables(fmt.codebook) if avx512 else native.avx2_tables(fmt.codebook)
    if fmt.bits != 4 or not _byte_blocks(fmt, n):
        return None
    return native.cells4(fmt.codebook) if avx512 else native.avx2_q4(fmt.codebook)


def native_decoder(fmt: Format, n: int):
    """The native kernel's table if it decodes `fmt` for n elements here, else None."""
    if native.library() is None or not _byte_blocks(fmt, n):
        return None
    if fmt.bits == 8 and fmt.kind == CODEBOOK:
        return native.symmetric_tables(fmt.codebook)
    if fmt.bits not in (2, 4):
        return None
    table = np.zeros(16, np.float32)  # the kernel reads 16 entries
    table[: 2 ** fmt.bits] = fmt.decode_table()
    return table


def avx2_decodes(fmt: Format, n: int) -> bool:
    """Whether the AVX2 kernel decodes (and sums) `fmt` for n elements here."""
    return fmt.bits in (2, 4, 8) and native.library_avx2() is not None and _byte_blocks(fmt, n)


def _byte_blocks(fmt: Format, n: int) -> bool:
    """Every block's codes start on a byte."""
    return fmt.n_blocks(n) <= 1 or fmt.block_for(n) * fmt.bits % 8 == 0


def threads(n: int) -> int:
    """Threads for n elements: one below `PARALLEL_MIN`, else as many as Numba's kernels use."""
    return 1 if n < K.PARALLEL_MIN else K.parallel_threads()


@functools.lru_cache(maxsize=None)
def padded_levels(levels: tuple) -> np.ndarray:
    """float32[MAX_LEVELS]: a threshold format's levels, then +inf (never <= a finite |g|)."""
    out = np.full(MAX_LEVELS, np.inf, dtype=np.float32)
    out[: len(levels)] = np.asarray(levels, dtype=np.float32)
    return out


def encode(x: np.ndarray, fmt: Format, residual: Optional[np.ndarray] = None,
           seed: Optional[int] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Quantize float32 1-D `x` into `out` (allocated when None); see formats.reference.encode."""
    n = x.size
    if out is None:
        out = np.empty(fmt.nbytes(n), dtype=np.uint8)
    check_sizes("encode", fmt, n, out_min=fmt.nbytes(n), out=out)
    nb = fmt.n_blocks(n)
    encode_into(x, fmt, out[: 4 * nb].view(np.uint32), out[4 * nb:], residual, seed)
    return out


def encode_into(x: np.ndarray, fmt: Format, scale_bits: np.ndarray, codes: np.ndarray,
                residual: Optional[np.ndarray] = None, seed: Optional[int] = None) -> None:
    """encode's scales (as uint32 bits, fmt.n_blocks(x.size) of them) and codes into two
    separate buffers: a bucket's members encode straight into its buffer (collective.bucket_parts)."""
    n = x.size
    if n == 0:
        return
    if scale_bits.size < fmt.n_blocks(n) or codes.size < fmt.nbytes(n) - 4 * fmt.n_blocks(n):
        raise ValueError(f"encode: {scale_bits.size} scales and {codes.size} code bytes, "
                         f"{fmt.n_blocks(n)} and {fmt.nbytes(n) - 4 * fmt.n_blocks(n)} needed for {n} elements")
    x = np.ascontiguousarray(x)  # every kernel reads x whole, as one run
    nt = native_encoder(fmt, n)
    if nt is not None and fmt.bits == 8:
        native.encode8(x, n, fmt.block_for(n), scale_bits, codes, nt, threads(n))
    elif nt is not None:
        native.encode4(x, n, fmt.block_for(n), scale_bits, codes, nt, threads(n))
    elif fmt.kind == CODEBOOK:
        t = tables(fmt.codebook, fmt.bits)
        seed = (fmt.seed if seed is None else seed) & 0xFFFFFFFF
        K.kernel("encode_codebook", n)(
            x, n, fmt.block_for(n), scale_bits, codes, t.carry, t.mids, t.values,
            t.positive_mid_bits, t.size, fmt.bits, t.zero_code, fmt.rounding == "stochastic", seed)
    elif fmt.bits in (2, 4) and native.in_use() and x.flags.c_contiguous and \
            (residual is None or residual.flags.c_contiguous):
        native.threshold(x, n, residual, codes, padded_levels(tuple(fmt.levels)), fmt.bits, threads(n))
    else:
        use = residual is not None
        r = residual if use else np.empty(0, np.float32)
        K.kernel("encode_threshold", n)(x, n, r, use, codes, padded_levels(tuple(fmt.levels)), len(fmt.levels),
                                        fmt.bits)


def decode(buf: np.ndarray, fmt: Format, n: int, out: Optional[np.ndarray] = None,
           accumulate: bool = False, scale: float = 1.0) -> np.ndarray:
    """Dequantize into float32 `out` (or add into it when accumulate); times float32 `scale`
    (not with accumulate), in the same pass where the native kernels apply."""
    check_decode_scale(scale, accumulate)
    if out is None:
        out = np.zeros(n, dtype=np.float32) if accumulate else np.empty(n, dtype=np.float32)
    check_sizes("decode", fmt, n, [buf], out)
    if n == 0:
        return out
    nb = fmt.n_blocks(n)
    nt = native_decoder(fmt, n) if out.flags.c_contiguous else None
    if nt is not None:
        scales = buf[: 4 * nb].view(np.float32) if fmt.has_scales else None
        native.decode(buf[4 * nb:], n, fmt.block_for(n), fmt.bits, scales, nt, out, accumulate, threads(n),
                      float(np.float32(scale)))
        return out
    if out.flags.c_contiguous and avx2_decodes(fmt, n):
        return _sum([buf], fmt, n, out, scale, native.decode_values(fmt), "avx2", accumulate)
    _numba_decode([buf], fmt, n, out, K.ACCUMULATE if accumulate else K.DECODE, scale)
    return out


def decode_sum(bufs: Sequence[np.ndarray], fmt: Format, n: int, out: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """float32 `out` = (sum of the values of `bufs` in order) * `scale`, in one pass where the
    native kernels apply (the bits of backends.decode_sum_by_parts)."""
    check_sizes("decode_sum", fmt, n, bufs, out)
    if bufs and n and out.flags.c_contiguous:
        nt = native_decoder(fmt, n)
        if nt is not None:
            return _sum(bufs, fmt, n, out, scale, nt, "avx512")
        if avx2_decodes(fmt, n):
            return _sum(bufs, fmt, n, out, scale, native.decode_values(fmt), "avx2")
        # Numba: one part decoded times the factor, or the first two in one pass and each
        # further one added in one, the factor in the last pass
        last = len(bufs) - 1
        _numba_decode(bufs[:2], fmt, n, out, K.PAIR if last else K.DECODE, scale if last <= 1 else 1.0)
        for r in range(2, len(bufs)):
            _numba_decode([bufs[r]], fmt, n, out, K.ACCUMULATE, scale if r == last else 1.0)
        return out
    return decode_sum_by_parts(decode, bufs, fmt, n, out, scale)


def _numba_decode(bufs: Sequence[np.ndarray], fmt: Format, n: int, out: np.ndarray, mode: int,
                  scale: float) -> None:
    """The Numba decode (`cpu_kernels.decode`) of one part, or of two in `K.PAIR` mode, into
    float32 `out`, times float32 `scale` in the same pass (the bits of decoding, adding, then
    scaling)."""
    nb = fmt.n_blocks(n)
    b0, b1 = bufs[0], bufs[-1]
    K.kernel("decode", n)(b0[4 * nb:], b1[4 * nb:], n, fmt.block_for(n), b0[: 4 * nb].view(np.float32),
                          b1[: 4 * nb].view(np.float32), fmt.has_scales, fmt.decode_table(), fmt.bits, out, mode,
                          np.float32(scale))


def _sum(bufs: Sequence[np.ndarray], fmt: Format, n: int, out: np.ndarray, scale: float, table, isa: str,
         accumulate: bool = False) -> np.ndarray:
    nb = fmt.n_blocks(n)
    scales = [b[: 4 * nb].view(np.float32) for b in bufs] if fmt.has_scales else None
    native.sum_ranks([b[4 * nb:] for b in bufs], n, fmt.block_for(n), fmt.bits, scales, table, out, threads(n),
                     accumulate, float(np.float32(scale)), isa)
    return out
