"""The native codec: kernels/codec_x86.c (AVX-512) and kernels/codec_avx2.c (AVX2), built
with the system C compiler on first use, cached, called through ctypes by `backends.cpu`;
the same bytes as the reference.

AVX-512 (when the CPU has it): nearest-rounded 8-bit codebooks (q8 and the three other 8-bit
tables), nearest-rounded q4, 4- and 2-bit threshold codes (with or without a residual), and
decoding any 8-bit codebook or 4- or 2-bit format. AVX2 (where AVX-512 is missing):
nearest-rounded 8-bit codebooks (the four symmetric ones), nearest-rounded
q4, 4- and 2-bit threshold codes, decoding any 8-, 4- or 2-bit format, and the sum of every rank's codes in one pass. Everything
else, or HOROVOD_Q8_NATIVE=0, keeps the Numba kernels; HOROVOD_Q8_NATIVE=avx2 uses the AVX2
kernels on a CPU with AVX-512 too (so that they can be tested there). Each table is checked
where it is built (`symmetric_tables`, `cells4`, `avx2_tables`, `avx2_q4`) to fit its kernel's
search, and tests/test_native_codec.py checks every float32 in [-1, 1].
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from horovod_q8.backends.common import kernel_source
from horovod_q8.formats.codebooks import tables

SOURCES = {"avx512": "codec_x86.c", "avx2": "codec_avx2.c"}
NAMES = {"avx512": "AVX-512", "avx2": "AVX2"}
FLAGS = ("-O3", "-shared", "-fPIC", "-ffp-contract=off")  # no fused multiply-adds: exact products and sums
# The AVX2 kernels' loops start on a cache line: on Zen 3 the 8-bit decode (an unchanged loop) took
# 9.7 or 8.7 ms per 25.6M codes as edits elsewhere in the file moved it (docs/performance.md).
ISA_FLAGS = {"avx512": FLAGS, "avx2": FLAGS + ("-falign-loops=64",)}
INF_BITS = 0x7F800000
EXP_LOW = 96  # the kernel's exponent table covers binades 2**(96-127) .. 2**0
W_OFFSET = 256  # the 8-bit estimate counts from 256 + center: in [256, 512) a float's bits hold the code
_I32, _F32 = ctypes.c_int32, ctypes.c_float
AVX2_CELL_SHIFT, AVX2_CELLS_MAX = 17, 2048  # the AVX2 8-bit encoder's cells: a's bits >> 17, at most 2048


class SymmetricTables(ctypes.Structure):
    """The kernel's `hq8_symmetric`: field for field, see kernels/codec_x86.c."""

    _fields_ = [("pmid", _I32 * 128), ("d_exp", _I32 * 32), ("lo_next", _I32 * 16), ("w_lo", _F32 * 16),
                ("w_hi", _F32 * 16), ("c1", _F32 * 16), ("c0", _F32 * 16), ("pos", _F32 * 128),
                ("center", _I32), ("clamp_low", _I32)]


class Cells4(ctypes.Structure):
    """The kernel's `hq8_cells4`: field for field, see kernels/codec_x86.c."""

    _fields_ = [("below", _I32 * 16), ("mid", _I32 * 16), ("pmid", _I32 * 7), ("lo", _I32), ("shift", _I32),
                ("center", _I32)]


class Avx2Q4(ctypes.Structure):
    """The AVX2 kernel's `hq8_avx2_q4`: field for field, see kernels/codec_avx2.c."""

    _fields_ = [("neg_below", _I32 * 8), ("m1", _I32 * 8), ("m2", _I32 * 8), ("pmid", _I32 * 7), ("center", _I32)]


class Avx2Tables(ctypes.Structure):
    """The AVX2 kernel's `hq8_avx2_symmetric`: field for field, see kernels/codec_avx2.c."""

    _fields_ = [("cells", _I32 * AVX2_CELLS_MAX), ("lo", _I32), ("center", _I32)]


def cache_dir() -> Path:
    return Path(os.environ.get("HOROVOD_Q8_CACHE", Path.home() / ".cache" / "horovod_q8")) / "native"


def _compiler() -> Optional[str]:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def build(name: str, source: str, cc: str, flags: Sequence[str] = FLAGS) -> Path:
    """The shared library of kernel file `name` holding `source`, compiled once per (source,
    compiler, flags) and cached.

    Written to a temporary name and renamed: ranks starting together may build it at once.
    """
    key = hashlib.sha256("\0".join((source, cc, *flags)).encode()).hexdigest()[:16]
    lib = cache_dir() / f"{Path(name).stem}-{key}.so"
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        src, out = Path(tmp) / name, Path(tmp) / lib.name
        src.write_text(source)
        subprocess.run([cc, *flags, "-o", str(out), str(src)], check=True, capture_output=True, text=True)
        os.replace(out, lib)
    return lib


MODES = ("1", "0", "avx2")  # HOROVOD_Q8_NATIVE: the best kernels here, none, AVX2 even where AVX-512 runs


def _mode() -> str:
    mode = os.environ.get("HOROVOD_Q8_NATIVE", "1")
    if mode not in MODES:
        raise ValueError(f"HOROVOD_Q8_NATIVE={mode!r}: use 1 (native kernels, the default), 0 (none) or avx2")
    return mode


@functools.lru_cache(maxsize=None)
def _load(isa: str) -> tuple[Optional[ctypes.CDLL], str]:
    """(the loaded kernel library for instruction set `isa` or None, why)."""
    mode = _mode()
    if mode == "0":
        return None, "switched off (HOROVOD_Q8_NATIVE=0)"
    if mode == "avx2" and isa == "avx512":
        return None, "AVX2 chosen (HOROVOD_Q8_NATIVE=avx2)"
    if os.uname().machine not in ("x86_64", "AMD64"):
        return None, f"not an x86-64 CPU ({os.uname().machine})"
    cc = _compiler()
    if cc is None:
        return None, "no C compiler (gcc or $CC)"
    name = SOURCES[isa]
    try:
        path = build(name, kernel_source(name), cc, ISA_FLAGS[isa])
        lib = ctypes.CDLL(str(path))
    except subprocess.CalledProcessError as e:
        return None, f"{cc} failed: {e.stderr[-300:]}"
    except OSError as e:
        return None, f"cannot build or load {name}: {e}"
    if isa == "avx512" and not lib.hq8_supported():
        return None, "the CPU has no AVX-512 (F, BW, VL)"
    if isa == "avx2" and not lib.hq8_avx2_supported():
        return None, "the CPU has no AVX2"
    declare(lib, isa)
    return lib, f"{NAMES[isa]} kernels built with {cc} ({path})"


_P, _I64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
SIGNATURES = {
    "avx512": {"hq8_encode8": [_P, _I64, _I64, _P, _P, _P], "hq8_encode4": [_P, _I64, _I64, _P, _P, _P],
               "hq8_decode8": [_P, _I64, _I64, _P, _P, _P, _INT, _F32, _I64],
               "hq8_decode4": [_P, _I64, _I64, _P, _P, _P, _INT, _F32, _I64],
               "hq8_decode2": [_P, _I64, _I64, _P, _P, _P, _INT, _F32, _I64],
               "hq8_threshold": [_P, _I64, _P, _P, _P, _INT, _P],
               "hq8_sum": [_INT, _P, _P, _INT, _I64, _I64, _P, _P, _INT, _F32]},
    "avx2": {"hq8_avx2_encode8": [_P, _I64, _I64, _P, _P, _P], "hq8_avx2_encode4": [_P, _I64, _I64, _P, _P, _P],
             "hq8_avx2_threshold": [_P, _I64, _P, _P, _P, _INT, _P],
             "hq8_avx2_sum": [_INT, _P, _P, _INT, _I64, _I64, _P, _P, _INT, _F32, _I64]},
}


def declare(lib: ctypes.CDLL, isa: str, missing_ok: bool = False) -> None:
    """The argument types of every kernel of `isa` in lib (all return void); missing_ok: skip
    those lib lacks (an older revision's kernel file)."""
    for fn, args in SIGNATURES[isa].items():
        if missing_ok and not hasattr(lib, fn):
            continue
        getattr(lib, fn).argtypes, getattr(lib, fn).restype = args, None


def load_variant(name: str, source: str, isa: str) -> ctypes.CDLL:
    """`source` (a variant of a kernel file, for the scripts that time one) built as the product
    builds its kernels, cached under `name`, loaded and declared for `isa` (those it has)."""
    lib = ctypes.CDLL(str(build(name, source, _compiler(), ISA_FLAGS[isa])))
    declare(lib, isa, missing_ok=True)
    return lib


def library() -> Optional[ctypes.CDLL]:
    """The loaded AVX-512 kernel library, or None: switched off, not x86-64, no compiler, no AVX-512."""
    return _load("avx512")[0]


def library_avx2() -> Optional[ctypes.CDLL]:
    """The AVX2 kernels, where the AVX-512 ones are not used and the CPU has AVX2; else None."""
    return None if library() is not None else _load("avx2")[0]


def in_use() -> bool:
    """Whether any native kernels run here."""
    return library() is not None or library_avx2() is not None


def describe() -> str:
    """Which native kernels are in use, and why not the others."""
    if library() is not None:
        return _load("avx512")[1]
    avx2, why = _load("avx2")
    if avx2 is None:
        return f"AVX-512: {_load('avx512')[1]}; AVX2: {why}"
    return f"{why}; for 8-bit, q4 and threshold encodes, 8-, 4- and 2-bit decodes and the ranks' sum (AVX-512: {_load('avx512')[1]})"


def _segments(pos: np.ndarray) -> list[tuple[int, int]]:
    """Runs of evenly spaced positive values, as (first index, count)."""
    out, j = [], 0
    while j < len(pos):
        m = min(2, len(pos) - j)
        step = pos[j + 1] - pos[j] if m == 2 else 0.0
        while j + m < len(pos) and abs(pos[j + m] - pos[j + m - 1] - step) <= 1e-3 * step:
            m += 1
        out.append((j, m))
        j += m
    return out


def _symmetric(name: str):
    """(center, positive values, positive mids, segments, each segment's lowest mid) of 8-bit
    codebook `name`, or None unless its 255 values are symmetric about 0 (exactly)."""
    t = tables(name, 8)
    c, vals = t.zero_code, t.values[: t.size]
    if t.size != 255 or c != 127 or not np.array_equal(vals[c:], -vals[c::-1]):
        return None
    pos = vals[c + 1:].astype(np.float64)
    pm = t.mids[c: t.size - 1]  # the positive mids, the first between 0 and the smallest value
    segs = _segments(pos)
    return c, pos, pm, segs, np.array([pm[j0] for j0, _ in segs], np.float32)


def _estimate(pos: np.ndarray, pm: np.ndarray, j0: int, m: int, offset: int) -> tuple:
    """(c1, c0, off) of segment (j0, m), m > 1, in float32: u = a * c1 - c0 estimates offset +
    the count of the segment's mids below a; off: the largest |u - (offset + i + 0.5)| at its
    i-th mid, u computed as the kernels compute it."""
    step = (pos[j0 + m - 1] - pos[j0]) / (m - 1)
    c1, c0 = np.float32(1 / step), np.float32(pos[j0] / step - offset)
    u = pm[j0 + 1: j0 + m] * c1 - c0
    return c1, c0, float(np.max(np.abs(u.astype(np.float64) - offset - np.arange(m - 1) - 0.5)))


def _positive_values(name: str) -> list:
    """table[center + j] for j = 0..127, the last repeating the largest."""
    t = tables(name, 8)
    out = np.full(128, t.values[t.size - 1], np.float32)
    out[: t.size - t.zero_code] = t.values[t.zero_code: t.size]
    return out.tolist()


@functools.lru_cache(maxsize=None)
def symmetric_tables(name: str) -> Optional[SymmetricTables]:
    """The AVX-512 kernel's tables for 8-bit codebook `name`, or None where it does not fit the
    kernel: 255 values symmetric about 0 (exactly), at most 15 evenly spaced segments of positive
    values, at most one starting per binade, none below 2**-31, and the estimate inside each
    exactly W_OFFSET + center + j + 1 at the segment's j-th mid (see kernels/codec_x86.c)."""
    sym = _symmetric(name)
    if sym is None:
        return None
    c, pos, pm, segs, lows = sym
    exps = lows.view(np.int32) >> 23
    if len(segs) > 15 or lows.min() < 2.0 ** (EXP_LOW - 127) or len(set(exps.tolist())) != len(segs):
        return None
    T = SymmetricTables()
    pmid = np.full(128, INF_BITS, np.int32)
    pmid[: len(pm)] = pm.view(np.int32)
    T.pmid[:] = pmid.tolist()
    T.lo_next[:] = np.concatenate([lows.view(np.int32), np.full(16 - len(segs), INF_BITS, np.int32)]).tolist()
    binades = (2.0 ** (np.arange(EXP_LOW, 128) - 127)).astype(np.float32)
    T.d_exp[:] = [int(np.count_nonzero(lows < e)) for e in binades]
    T.w_lo[0] = T.w_hi[0] = W_OFFSET + c + 0.5
    T.c0[0] = -T.w_lo[0]
    for d, (j0, m) in enumerate(segs, start=1):
        base = c + j0 + 1
        T.w_lo[d], T.w_hi[d] = W_OFFSET + base + 0.5, W_OFFSET + base + m - 1 + 0.5
        T.c0[d] = -T.w_lo[d]
        if m > 1:
            T.c1[d], T.c0[d], off = _estimate(pos, pm, j0, m, W_OFFSET + base + 0.5)
            if off != 0:
                return None
            lowest = (pm[j0: j0 + 1].view(np.int32) + 1).view(np.float32)  # the segment's smallest a
            T.clamp_low |= bool(lowest * np.float32(T.c1[d]) - np.float32(T.c0[d]) < T.w_lo[d] - 0.5)
    T.pos[:] = _positive_values(name)
    T.center = c
    return T


Q4_EXP_LOW = 120  # the AVX2 4-bit encoder's first binade (2**(120-127)), kernels/codec_avx2.c
A_TOP = 0x3F800001  # the largest a the kernels see: the bits of 1.0, plus one for a negative v


@functools.lru_cache(maxsize=None)
def cells4(name: str) -> Optional[Cells4]:
    """The AVX-512 4-bit encoder's cells for 4-bit codebook `name`, or None where it does not
    fit: 7 positive mids (symmetric about 0), each in its own cell h(a) = (a >> 16, less lo,
    at least 0) >> shift of at most 16; the coarsest cells that separate them."""
    t = tables(name, 4)
    pm = t.positive_mid_bits.astype(np.int64)
    if pm.size != 7:
        return None
    for shift in range(7, -1, -1):
        lo = max(((A_TOP >> 16 >> shift) - 15) << shift, 0)
        cells = np.maximum((pm >> 16) - lo, 0) >> shift
        if len(set(cells.tolist())) < pm.size:
            continue
        T = Cells4()
        T.below[:] = [int(np.count_nonzero(cells < h)) for h in range(16)]
        mid = np.full(16, INF_BITS, np.int64)
        mid[cells] = pm
        T.mid[:] = mid.tolist()
        T.pmid[:] = pm.tolist()
        T.lo, T.shift, T.center = lo, shift, t.zero_code
        return T
    return None


@functools.lru_cache(maxsize=None)
def avx2_tables(name: str) -> Optional[Avx2Tables]:
    """The AVX2 8-bit encoder's cell table for codebook `name`, or None where it does not fit:
    255 values symmetric about 0 (exactly), at most one positive mid in each cell (a's bits >>
    AVX2_CELL_SHIFT) and at most AVX2_CELLS_MAX cells from the one below the first mid's to
    that of the largest a, 1.0's bits plus one (see kernels/codec_avx2.c)."""
    sym = _symmetric(name)
    if sym is None:
        return None
    c, pm = sym[0], sym[2].view(np.int32).astype(np.int64)
    mask = (1 << AVX2_CELL_SHIFT) - 1
    lo = int(pm[0] >> AVX2_CELL_SHIFT) - 1  # cell 0 (and all below, clamped to it) holds no mid
    n = (A_TOP >> AVX2_CELL_SHIFT) - lo + 1
    cell = (pm >> AVX2_CELL_SHIFT) - lo
    if n > AVX2_CELLS_MAX or np.bincount(cell).max() > 1:
        return None
    starts = (lo + np.arange(n, dtype=np.int64)) << AVX2_CELL_SHIFT
    below = np.searchsorted(pm, starts)  # mids below each cell's lowest a
    t = np.full(n, mask, np.int64)
    t[cell] = pm & mask
    cells = np.zeros(AVX2_CELLS_MAX, np.int64)
    cells[:n] = ((c + below) << 24) + (1 << 24) - 1 - t
    T = Avx2Tables()
    T.cells[:] = cells.astype(np.uint32).view(np.int32).tolist()
    T.lo, T.center = lo, c
    return T


def _by_binade(bits: np.ndarray, idx: np.ndarray, width: int, fill: int) -> Optional[np.ndarray]:
    """int64[3, width] of sorted float bits grouped by binade index idx: how many lie in the
    binades below each, and each binade's first and second (fill where it has fewer); None
    where an index reaches width or a binade holds three (the kernels' two compares)."""
    if idx.max() >= width or np.bincount(idx).max() > 2:
        return None
    out = np.full((3, width), fill, np.int64)
    out[0] = [np.count_nonzero(idx < d) for d in range(width)]
    for d in np.unique(idx):
        mine = bits[idx == d]
        out[1:1 + mine.size, d] = mine
    return out


@functools.lru_cache(maxsize=None)
def avx2_q4(name: str) -> Optional[Avx2Q4]:
    """The AVX2 4-bit encoder's table for 4-bit codebook `name`, or None where it does not fit:
    symmetric about 0 with 7 positive mids, at most two in each binade idx = exponent -
    Q4_EXP_LOW (at least 0, all below in the first), idx at most 7 (see kernels/codec_avx2.c)."""
    t = tables(name, 4)
    pm = t.positive_mid_bits.astype(np.int64)
    if pm.size != 7:
        return None
    m = _by_binade(pm, np.maximum((pm >> 23) - Q4_EXP_LOW, 0), 8, INF_BITS)
    if m is None:
        return None
    T = Avx2Q4()
    T.neg_below[:] = (-m[0]).tolist()
    T.m1[:], T.m2[:] = m[1].tolist(), m[2].tolist()
    T.pmid[:] = pm.tolist()
    T.center = t.zero_code
    return T


@functools.lru_cache(maxsize=None)
def level_binades(levels: bytes, width: int) -> Optional[np.ndarray]:
    """The 4-bit threshold encode's levels by binade (kernels' level_binades), `width` 8 (AVX2)
    or 16 (AVX-512): int32[3 * width + 1], below | l1 | l2 | e0 (l1, l2: the levels' bits minus
    one); None where the finite levels (float32 bits, padded with +inf) span more than `width`
    binades or put three in one."""
    b = np.frombuffer(levels, np.uint32).astype(np.int64)
    b = b[b != INF_BITS]
    if b.size == 0 or (b > INF_BITS).any() or (np.diff(b) <= 0).any():  # none, negative, NaN or unsorted
        return None
    t = _by_binade(b - 1, (b >> 23) - (b[0] >> 23), width, 0x7FFFFFFF)
    if t is None:
        return None
    return np.concatenate([t.reshape(-1), [b[0] >> 23]]).astype(np.int32)


@functools.lru_cache(maxsize=None)
def decode_values(fmt) -> np.ndarray:
    """float32[2**bits] values of every code for the AVX2 decode (8 bits: 256, padded with the last)."""
    t = np.asarray(fmt.decode_table(), np.float32)
    out = np.full(2 ** fmt.bits, t[-1], np.float32)
    out[: min(t.size, out.size)] = t[: out.size]
    return out


@functools.lru_cache(maxsize=None)
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="horovod_q8_codec")


def _split(n: int, block: int, threads: int) -> list[tuple[int, int]]:
    """Block-aligned element ranges, one per thread, for a tensor of n elements."""
    if threads <= 1:
        return [(0, n)]
    nb = -(-n // block)
    cut = [min(n, (nb * k // threads) * block) for k in range(threads + 1)]
    return [(a, b) for a, b in zip(cut, cut[1:]) if b > a]


def _in_parts(n: int, block: int, threads: int, call) -> None:
    """call(a, b) for block-aligned ranges [a, b) of n elements, one per thread, the first on
    this thread (ctypes releases the GIL)."""
    parts = _split(n, block, threads)
    futures = [_pool(len(parts)).submit(call, a, b) for a, b in parts[1:]]
    call(*parts[0])
    for f in futures:
        f.result()


def encode8(x: np.ndarray, n: int, block: int, scale_bits: np.ndarray, codes: np.ndarray, T, threads: int) -> None:
    """Scales and nearest 8-bit codes of float32 x (contiguous), `threads` at most: the AVX-512
    kernel for SymmetricTables, the AVX2 one for Avx2Tables."""
    fn = library().hq8_encode8 if isinstance(T, SymmetricTables) else library_avx2().hq8_avx2_encode8
    xp, sp, cp, t = x.ctypes.data, scale_bits.ctypes.data, codes.ctypes.data, ctypes.byref(T)
    _in_parts(n, block, threads, lambda a, b: fn(xp + 4 * a, b - a, block, sp + 4 * (a // block), cp + a, t))


def encode4(x: np.ndarray, n: int, block: int, scale_bits: np.ndarray, codes: np.ndarray, T, threads: int) -> None:
    """Scales and nearest 4-bit codes for a table symmetric about 0 with 7 positive mids: the
    AVX-512 kernel for T from `cells4`, the AVX2 one for `avx2_q4`'s; `block` even or n <= block,
    so that every block starts on a byte."""
    fn = library().hq8_encode4 if isinstance(T, Cells4) else library_avx2().hq8_avx2_encode4
    xp, sp, cp, t = x.ctypes.data, scale_bits.ctypes.data, codes.ctypes.data, ctypes.byref(T)
    _in_parts(n, block, threads, lambda a, b: fn(xp + 4 * a, b - a, block, sp + 4 * (a // block), cp + a // 2, t))


def threshold(x: np.ndarray, n: int, residual: Optional[np.ndarray], codes: np.ndarray, levels: np.ndarray,
              bits: int, threads: int) -> None:
    """`bits`-bit (4 or 2) threshold codes of g = x (+ residual, which keeps what was not sent);
    levels: float32[7], padded with +inf. The AVX-512 kernel where it runs, else the AVX2 one."""
    wide = library() is not None
    fn = library().hq8_threshold if wide else library_avx2().hq8_avx2_threshold
    levels = np.ascontiguousarray(levels, np.float32)
    binades = level_binades(levels.tobytes(), 16 if wide else 8) if bits == 4 else None
    xp, cp, lp = x.ctypes.data, codes.ctypes.data, levels.ctypes.data
    bp = None if binades is None else binades.ctypes.data
    rp = residual.ctypes.data if residual is not None else None
    _in_parts(n, 1 << 14, threads, lambda a, b: fn(
        xp + 4 * a, b - a, None if rp is None else rp + 4 * a, cp + a * bits // 8, lp, bits, bp))


def decode(codes: np.ndarray, n: int, block: int, bits: int, scales: Optional[np.ndarray], table,
           out: np.ndarray, accumulate: bool, threads: int, post: float = 1.0) -> None:
    """out = value * scale (or out += it) of 8-bit codes (table: SymmetricTables) or 4- or 2-bit
    ones (table: float32[16]); scales None means 1; post: a further float32 factor (not with accumulate)."""
    lib = library()
    fn, t = (lib.hq8_decode8, ctypes.byref(table)) if bits == 8 else \
        (lib.hq8_decode4 if bits == 4 else lib.hq8_decode2, table.ctypes.data)
    cp, op = codes.ctypes.data, out.ctypes.data
    sp = scales.ctypes.data if scales is not None else None
    _in_parts(n, block, threads, lambda a, b: fn(cp + a * bits // 8, b - a, block,
                                                 None if sp is None else sp + 4 * (a // block), t, op + 4 * a,
                                                 int(accumulate), post, n))


def sum_ranks(codes: list, n: int, block: int, bits: int, scales: Optional[list], table, out: np.ndarray,
              threads: int, accumulate: bool = False, post: float = 1.0, isa: str = "avx2") -> None:
    """out = (v_0 + ... + v_{k-1}) * post, v_r = value of part r's code * its block's scale,
    added in part order in one pass: the bits of a decode, k - 1 accumulating decodes and a
    scaling pass. One part with accumulate: out += v_0. scales None means 1 for every part.
    isa "avx512": table is the AVX-512 decode's (SymmetricTables, or float32[16] for 4 or 2 bits);
    "avx2": decode_values's array."""
    k = len(codes)
    if accumulate and k != 1:
        raise ValueError("sum_ranks: accumulate adds one part")
    if isa == "avx512":
        fn, tp = library().hq8_sum, ctypes.addressof(table) if bits == 8 else table.ctypes.data
    else:
        fn, tp = library_avx2().hq8_avx2_sum, table.ctypes.data
    span = (n,) if isa == "avx2" else ()  # the whole output: whether the AVX2 decode streams its stores
    cps = [c.ctypes.data for c in codes]
    sps = None if scales is None else [s.ctypes.data for s in scales]
    op = out.ctypes.data

    def call(a: int, b: int) -> None:
        cp = (ctypes.c_void_p * k)(*[c + a * bits // 8 for c in cps])
        sp = None if sps is None else (ctypes.c_void_p * k)(*[s + 4 * (a // block) for s in sps])
        fn(bits, cp, sp, k, b - a, block, tp, op + 4 * a, int(accumulate), post, *span)

    _in_parts(n, block, threads, call)
