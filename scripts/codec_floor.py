"""How close q8's encode + decode can come to a copy with each CPU kernel family, whatever its
search: the shipped kernels beside timing-only variants that skip the search (the codes are the
quotient's top bits) and the decode's table lookups (each code converted to a float), a
float32 copy, and what that leaves for the search and the lookups under a target ratio.

    python scripts/codec_floor.py [--kernels avx2,numba] [--elements 25600000] [--rounds 9]

AVX2 rows build variants of kernels/codec_avx2.c (text substitutions of this tree's source,
built as the product builds it, on any x86-64 CPU with AVX2 and FMA); three of them are exact
alternatives (a search: the segment from 7 compares, then the AVX-512 kernel's affine estimate;
two decodes: one fma per value with a correction held in a register, and a table of pairs of
values, one load per two codes), and `same bytes as shipped` says which rows give the
shipped kernel's bytes. Numba rows run this tree's
Numba kernels (`HOROVOD_Q8_NATIVE=0`, one thread) beside Numba loops without the search or the
lookups, and one exact alternative search: the AVX-512 kernel's segment estimate, the segment's
constants picked by chains of selects (vectorisable: no table read). Rounds interleave the rows; the minimum is kept.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

os.environ["HOROVOD_Q8_NATIVE"] = "0"  # the Numba rows: the product's Numba path; AVX2 rows load their own builds
os.environ["NUMBA_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from horovod_q8.backends import cpu, cpu_kernels, native  # noqa: E402
from horovod_q8.bench.common import machine  # noqa: E402
from horovod_q8.collective.transport import AlignedPool  # noqa: E402
from horovod_q8.formats import spec  # noqa: E402
from horovod_q8.formats.codebooks import tables  # noqa: E402

SOURCE = REPO / "kernels" / "codec_avx2.c"
TARGETS = {"avx2": 1.5, "numba": 2.5}  # (encode + decode) / copy, issue 34
CODES8_BODY = "    __m256i neg = _mm256_srai_epi32(b, 31);  // -1 where the sign bit is set\n"
CODES8_END = "    return _mm256_blendv_epi8(code, _mm256_sub_epi32(twice_center, code), neg);\n}\n"
VALUES8_BODY = "    uint64_t w;\n    memcpy(&w, c, 8);\n    typedef int32_t bits32"
VALUES8_END = "    return _mm256_castsi256_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), h, 1));\n}\n"


def _between(s: str, start: str, end: str) -> Tuple[int, int]:
    """The span from `start` to the end of the first `end` after it; each must be found once."""
    if s.count(start) != 1:
        raise SystemExit(f"codec_floor: {start[:60]!r}... is not in {SOURCE} exactly once; update this script")
    i = s.index(start)
    return i, s.index(end, i) + len(end)


def _replace_body(s: str, start: str, end: str, body: str) -> str:
    i, j = _between(s, start, end)
    return s[:i] + body + s[j:]


def _segment_search() -> str:
    """codes8's body as the segment estimate: d = count(segments' lowest mids < a), 7 compares;
    w = a * c1[d] - c0[d], clamped; the code from w's bits, a tie through the cell lookup."""
    T = native.symmetric_tables("dynamic_tree")
    f32 = lambda v: ", ".join(f"{float(np.float32(x))!r}f" for x in v)  # noqa: E731
    return f"""
    static const int32_t lows[7] = {{{", ".join(str(int(v)) for v in T.lo_next[:7])}}};
    static const float c1[8] = {{{f32(T.c1[:8])}}}, c0[8] = {{{f32(T.c0[:8])}}}, wh[8] = {{{f32(T.w_hi[:8])}}};
    __m256i neg = _mm256_srai_epi32(b, 31);
    __m256i a = _mm256_sub_epi32(_mm256_and_si256(b, _mm256_set1_epi32((int)ABS_MASK)), neg);
    __m256i d = _mm256_setzero_si256();
    for (int q = 0; q < 7; q++) d = _mm256_sub_epi32(d, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(lows[q])));
    __m256 w = _mm256_sub_ps(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_permutevar8x32_ps(_mm256_loadu_ps(c1), d)),
                             _mm256_permutevar8x32_ps(_mm256_loadu_ps(c0), d));
    __m256i wb = _mm256_castps_si256(_mm256_min_ps(w, _mm256_permutevar8x32_ps(_mm256_loadu_ps(wh), d)));
    __m256i code = _mm256_srli_epi32(wb, 15);
    code = _mm256_blendv_epi8(code, _mm256_sub_epi32(twice_center, code), neg);
    int tie = _mm256_movemask_ps(_mm256_castsi256_ps(
        _mm256_cmpeq_epi32(_mm256_and_si256(wb, _mm256_set1_epi32(0x7FFF)), _mm256_setzero_si256())));
    if (__builtin_expect(tie, 0)) {{
        __m256i cell = _mm256_srli_epi32(_mm256_subs_epu16(a, lo_bits), CELL_SHIFT);
        __m256i exact = _mm256_srli_epi32(_mm256_add_epi32(_mm256_i32gather_epi32(cells, cell, 4),
                                                           _mm256_and_si256(a, _mm256_set1_epi32(CELL_MASK))), 24);
        exact = _mm256_blendv_epi8(exact, _mm256_sub_epi32(twice_center, exact), neg);
        code = _mm256_blendv_epi8(code, exact, _mm256_cmpeq_epi32(_mm256_and_si256(wb, _mm256_set1_epi32(0x7FFF)),
                                                                  _mm256_setzero_si256()));
    }}
    return code;
}}
"""


def _arithmetic_constants() -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, C, W) of the arithmetic decode: q8's positive value m (1..127) in decade d = floor(log2 m)
    is fma(A, m - 2**d, C) (C the decade's first value, A the slope with the fewest misses), plus
    a correction of -1, 0 or +1 in its bits, two bits per m in the 8 words W; A and C are indexed
    as the kernel indexes them, by the low 3 bits of float(m)'s biased exponent."""
    p = native.decode_values(spec.get("q8"))[127:255].astype(np.float32)
    a, c, corr = np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros(128, np.int64)
    for d in range(7):
        lo, hi, i = 2 ** d, 2 ** (d + 1), (127 + d) & 7
        c[i], k = p[lo], np.arange(2 ** d, dtype=np.float64)
        guess = np.float32((np.float64(p[hi - 1]) - p[lo]) / max(hi - 1 - lo, 1))
        best = None
        for slope in (guess.view(np.int32) + np.arange(-64, 65, dtype=np.int32)).view(np.float32):
            y = (np.float64(slope) * k + np.float64(c[i])).astype(np.float32)  # one rounding: the fma's
            miss = p[lo:hi].view(np.int32).astype(np.int64) - y.view(np.int32)
            if best is None or (abs(miss).max(), abs(miss).sum()) < best[0]:
                best = ((abs(miss).max(), abs(miss).sum()), slope, miss)
        if best[0][0] > 1:
            raise SystemExit(f"codec_floor: decade {d} of q8 misses by {best[0][0]} ulps; the decode needs more bits")
        a[i], corr[lo:hi] = best[1], best[2]
    w = np.zeros(8, np.int64)
    for m in range(128):
        w[m >> 4] |= (int(corr[m]) & 3) << (2 * (m & 15))
    return a, c, w.astype(np.uint32).view(np.int32)


def _arithmetic_decode() -> str:
    """values8_8's body without a lookup: code -> m = |code - 127| -> fma(A[d], k, C[d]), its bits
    corrected from a register, times the sign (0 for code 127); q8's table only."""
    a, c, w = _arithmetic_constants()
    f32 = lambda v: ", ".join(f"{float(x)!r}f" for x in v)  # noqa: E731
    return f"""
    (void)table;
    const __m256 A = _mm256_setr_ps({f32(a)}), C = _mm256_setr_ps({f32(c)});
    const __m256i W = _mm256_setr_epi32({", ".join(str(int(x)) for x in w)});
    __m256i s = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)c)), _mm256_set1_epi32(127));
    __m256i m = _mm256_min_epi32(_mm256_abs_epi32(s), _mm256_set1_epi32(127));
    __m256 mf = _mm256_cvtepi32_ps(m);
    __m256 k = _mm256_sub_ps(mf, _mm256_and_ps(mf, _mm256_castsi256_ps(_mm256_set1_epi32((int)0xFF800000u))));
    __m256i d = _mm256_srli_epi32(_mm256_castps_si256(mf), 23);
    __m256 y = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(A, d), k, _mm256_permutevar8x32_ps(C, d));
    __m256i sh = _mm256_sub_epi32(_mm256_set1_epi32(30), _mm256_slli_epi32(_mm256_and_si256(m, _mm256_set1_epi32(15)), 1));
    __m256i fix = _mm256_srai_epi32(_mm256_sllv_epi32(_mm256_permutevar8x32_epi32(W, _mm256_srli_epi32(m, 4)), sh), 30);
    y = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), fix));
    return _mm256_mul_ps(y, _mm256_cvtepi32_ps(_mm256_sign_epi32(_mm256_set1_epi32(1), s)));
}}
"""


PAIR_LOOKUP = """
    const double *pairs = (const double *)table;  // entry c0 | c1 << 8: (table[c0], table[c1])
    uint64_t w;
    memcpy(&w, c, 8);
    __m128d a = _mm_loadh_pd(_mm_load_sd(pairs + (w & 0xFFFF)), pairs + ((w >> 16) & 0xFFFF));
    __m128d h = _mm_loadh_pd(_mm_load_sd(pairs + ((w >> 32) & 0xFFFF)), pairs + (w >> 48));
    return _mm256_castpd_ps(_mm256_insertf128_pd(_mm256_castpd128_pd256(a), h, 1));
}
"""


def pair_table(table: np.ndarray) -> np.ndarray:
    """The pair variant's table: 65,536 entries of two floats (512 KB)."""
    pairs = np.empty((256, 256, 2), np.float32)
    pairs[:, :, 0], pairs[:, :, 1] = table[None, :], table[:, None]
    return pairs.reshape(-1)


def avx2_variants() -> Dict[str, str]:
    """Sources of the AVX2 rows by label."""
    s = SOURCE.read_text()
    no_search = "    (void)cells; (void)lo_bits; (void)twice_center;\n    return _mm256_srli_epi32(b, 24);\n}\n"
    no_lookup = "    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)c)));\n}\n"
    fma = s.replace('#define AVX2 __attribute__((target("avx2")))', '#define AVX2 __attribute__((target("avx2,fma")))')
    pairs = _replace_body(s, VALUES8_BODY, VALUES8_END, PAIR_LOOKUP)
    scalar = "    if (bits == 8) return table[c[i]];\n"
    if pairs.count(scalar) != 1:
        raise SystemExit(f"codec_floor: value_one's 8-bit lookup is not in {SOURCE} exactly once; update this script")
    out = {
        "shipped": s,
        "no search": _replace_body(s, CODES8_BODY, CODES8_END, no_search),
        "segment search (7 compares, exact)": _replace_body(s, CODES8_BODY, CODES8_END, _segment_search()),
        "no table lookups": _replace_body(s, VALUES8_BODY, VALUES8_END, no_lookup),
        "arithmetic decode (exact)": _replace_body(fma, VALUES8_BODY, VALUES8_END, _arithmetic_decode()),
        "pair table (two floats a load, exact)": pairs.replace(scalar, "    if (bits == 8) return table[514 * c[i]];\n"),
    }
    if not _has_fma():
        del out["arithmetic decode (exact)"]
    return out


def _has_fma() -> bool:
    """Whether this CPU runs fused multiply-adds (every AVX2 CPU this project meets does)."""
    try:
        return " fma " in Path("/proc/cpuinfo").read_text().replace("\n", " ") + " "
    except OSError:
        return False


DECODE_ONLY = ("no table lookups", "arithmetic decode (exact)", "pair table (two floats a load, exact)")


@njit(cache=False)
def _numba_encode_floor(x, block, scale_bits, codes):
    """The Numba encode's passes without its search: absmax, the division, one byte per element."""
    xb = x.view(np.uint32)
    for b in range((x.size + block - 1) // block):
        s, e = b * block, min(b * block + block, x.size)
        xs = xb[s:e]
        m = np.uint32(0)
        for i in range(xs.size):
            u = np.uint32(xs[i] & np.uint32(0x7FFFFFFF))
            m = u if u > m else m
        scale_bits[b] = m
        sc = scale_bits.view(np.float32)[b]
        xf, cs = x[s:e], codes[s:e]
        for i in range(xf.size):
            cs[i] = np.uint8(np.int32(xf[i] / sc * np.float32(127.0)) + np.int32(127))


@njit(cache=False)
def _numba_decode_floor(codes, block, scales, out):
    """The Numba decode without its table: each code converted to a float, times the scale."""
    for b in range((codes.size + block - 1) // block):
        s, e = b * block, min(b * block + block, codes.size)
        cs, os_, sc = codes[s:e], out[s:e], scales[b]
        for i in range(cs.size):
            os_[i] = np.float32(cs[i]) * sc


def _chain_constants() -> Tuple[np.ndarray, np.ndarray]:
    """The Numba segment search's constants for q8: the segments' lowest mids as bits (8, padded
    with +Inf bits), and by segment d = 0..8 the rows c1, c0, w_hi (native.symmetric_tables)."""
    T = native.symmetric_tables("dynamic_tree")
    if T.clamp_low:
        raise SystemExit("codec_floor: q8's segment estimate needs a lower clamp; update this script")
    lows = np.array(T.lo_next[:8], np.int32)
    coef = np.array([T.c1[:9], T.c0[:9], T.w_hi[:9]], np.float32)
    return lows, coef


@njit(cache=False)
def _chain_codes(vt, vb, lows, coef, center, wt, ct):
    """ct = q8's codes of vt from the segment estimate, the segment d = count(lows < a) picked by
    a chain of selects (no table read: a loop LLVM may vectorise); whether any w is a tie."""
    l0, l1, l2, l3, l4, l5, l6, l7 = lows[0], lows[1], lows[2], lows[3], lows[4], lows[5], lows[6], lows[7]
    a0, a1, a2, a3, a4, a5, a6, a7, a8 = coef[0, 0], coef[0, 1], coef[0, 2], coef[0, 3], coef[0, 4], coef[0, 5], \
        coef[0, 6], coef[0, 7], coef[0, 8]
    b0, b1, b2, b3, b4, b5, b6, b7, b8 = coef[1, 0], coef[1, 1], coef[1, 2], coef[1, 3], coef[1, 4], coef[1, 5], \
        coef[1, 6], coef[1, 7], coef[1, 8]
    h0, h1, h2, h3, h4, h5, h6, h7, h8 = coef[2, 0], coef[2, 1], coef[2, 2], coef[2, 3], coef[2, 4], coef[2, 5], \
        coef[2, 6], coef[2, 7], coef[2, 8]
    for i in range(vt.size):  # locals, not table reads: the stores below could alias the tables
        b = vb[i]
        a = np.int32(np.int32(b & np.int32(0x7FFFFFFF)) - (b >> np.int32(31)))
        k1, k0, hi = a0, b0, h0
        k1, k0, hi = (a1, b1, h1) if a > l0 else (k1, k0, hi)
        k1, k0, hi = (a2, b2, h2) if a > l1 else (k1, k0, hi)
        k1, k0, hi = (a3, b3, h3) if a > l2 else (k1, k0, hi)
        k1, k0, hi = (a4, b4, h4) if a > l3 else (k1, k0, hi)
        k1, k0, hi = (a5, b5, h5) if a > l4 else (k1, k0, hi)
        k1, k0, hi = (a6, b6, h6) if a > l5 else (k1, k0, hi)
        k1, k0, hi = (a7, b7, h7) if a > l6 else (k1, k0, hi)
        k1, k0, hi = (a8, b8, h8) if a > l7 else (k1, k0, hi)
        wt[i] = min(abs(vt[i]) * k1 - k0, hi)  # |v| for a: they differ only on a mid, a tie
    wb = wt.view(np.int32)
    ties = np.int32(0)
    for i in range(vt.size):
        ties |= np.int32((wb[i] & np.int32(0x7FFF)) == 0)
        c = np.int32((wb[i] >> np.int32(15)) & np.int32(255))
        ct[i] = np.uint8(np.int32(2 * center) - c if vb[i] < 0 else c)
    return ties


@njit(cache=False)
def _numba_encode_chain(x, block, scale_bits, codes, lows, coef, center, carry, mids, values, pos):
    """The Numba encode with `_chain_codes` as its search; a block with a tie, a zero or a
    non-finite scale takes the shipped search."""
    xb = x.view(np.uint32)
    vt, wt = np.empty(block, np.float32), np.empty(block, np.float32)
    hi, lo = np.empty(block, np.uint16), np.empty(block, np.uint16)
    for b in range((x.size + block - 1) // block):
        s, e = b * block, min(b * block + block, x.size)
        sb = cpu_kernels._scale_bits(cpu_kernels._absmax_bits(xb[s:e]))
        scale_bits[b] = sb
        sc, n = scale_bits.view(np.float32)[b], e - s
        if 0 < sb < cpu_kernels.INF_BITS:
            cpu_kernels._divide(x[s:e], sc, vt[:n])
            if not _chain_codes(vt[:n], vt[:n].view(np.int32), lows, coef, center, wt[:n], codes[s:e]):
                continue
        cpu_kernels._segment_codes(x[s:e], sb, sc, vt, hi, lo, codes[s:e], carry, mids, values, pos, 255, 8, center,
                                   False, 0, s)


def avx2_rows(x: np.ndarray, block: int, aligned) -> List[Tuple[str, str, Callable[[], None], Callable[[], bytes]]]:
    """(label, encode|decode, run, result) for the AVX2 family."""
    n, nb = x.size, -(-x.size // block)
    T, table = native.avx2_tables("dynamic_tree"), native.decode_values(spec.get("q8"))
    buf = cpu.encode(x, spec.get("q8"))  # the codes every decode row reads (Numba's: the same bytes)
    scales, codes = buf[: 4 * nb].view(np.float32), buf[4 * nb:]
    rows = []
    for k, (label, src) in enumerate(avx2_variants().items()):
        lib = native.load_variant(f"codec_avx2_floor{k}.c", src, "avx2")
        if label not in DECODE_ONLY:
            sb, c = np.empty(nb, np.uint32), aligned(n, np.uint8)
            run = (lambda lib=lib, sb=sb, c=c: lib.hq8_avx2_encode8(x.ctypes.data, n, block, sb.ctypes.data,
                                                                     c.ctypes.data, ctypes.byref(T)))
            rows.append((label, "encode", run, lambda sb=sb, c=c: sb.tobytes() + c.tobytes()))
        if label == "shipped" or label in DECODE_ONLY:
            o = aligned(n, np.float32)
            cp, sp = (ctypes.c_void_p * 1)(codes.ctypes.data), (ctypes.c_void_p * 1)(scales.ctypes.data)
            t = pair_table(table) if label.startswith("pair") else table
            run = (lambda lib=lib, o=o, cp=cp, sp=sp, buf=buf, t=t: lib.hq8_avx2_sum(  # buf: alive while cp, sp
                8, cp, sp, 1, n, block, t.ctypes.data, o.ctypes.data, 0, 1.0, n))  # point into it
            rows.append((label, "decode", run, lambda o=o: o.tobytes()))
    return rows


def numba_rows(x: np.ndarray, block: int, aligned) -> List[Tuple[str, str, Callable[[], None], Callable[[], bytes]]]:
    """(label, encode|decode, run, result) for the Numba family."""
    fmt, n, nb = spec.get("q8"), x.size, -(-x.size // block)
    buf = cpu.encode(x, fmt)
    eo, fo, sb, c = aligned(n, np.float32), aligned(n, np.float32), np.empty(nb, np.uint32), aligned(n, np.uint8)
    scales = buf[: 4 * nb].view(np.float32)
    ssb, sc = np.empty(nb, np.uint32), aligned(n, np.uint8)
    t, (lows, coef) = tables("dynamic_tree", 8), _chain_constants()
    csb, cc = np.empty(nb, np.uint32), aligned(n, np.uint8)
    chain = (lambda: _numba_encode_chain(x, block, csb, cc, lows, coef, t.zero_code, t.carry, t.mids, t.values,
                                         np.empty(0, np.int32)))
    return [("shipped", "encode", lambda: cpu.encode_into(x, fmt, ssb, sc), lambda: ssb.tobytes() + sc.tobytes()),
            ("no search", "encode", lambda: _numba_encode_floor(x, block, sb, c), lambda: sb.tobytes() + c.tobytes()),
            ("segment search (select chains, exact)", "encode", chain, lambda: csb.tobytes() + cc.tobytes()),
            ("shipped", "decode", lambda: cpu.decode(buf, fmt, n, out=eo), lambda: eo.tobytes()),
            ("no table lookups", "decode", lambda: _numba_decode_floor(buf[4 * nb:], block, scales, fo),
             lambda: fo.tobytes())]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", default="avx2,numba", help="families: avx2, numba")
    p.add_argument("--elements", type=int, default=25_600_000)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    families = [f for f in args.kernels.split(",") if f]
    unknown = sorted(set(families) - set(TARGETS))
    if unknown:
        raise SystemExit(f"codec_floor: unknown kernel families {unknown}; known: {sorted(TARGETS)}")
    aligned = AlignedPool(per_size=0)
    x = aligned(args.elements, np.float32)
    x[:] = np.random.default_rng(0).standard_normal(args.elements)
    y = aligned(args.elements, np.float32)
    rows = {f: (avx2_rows if f == "avx2" else numba_rows)(x, args.block, aligned) for f in families}
    best: Dict[Tuple[str, str, str], float] = {}
    for _ in range(args.rounds):
        t = time.perf_counter()
        np.copyto(y, x)
        best["copy", "", ""] = min(best.get(("copy", "", ""), 1e9), time.perf_counter() - t)
        for f, rs in rows.items():
            for label, op, run, _ in rs:
                t = time.perf_counter()
                run()
                best[f, label, op] = min(best.get((f, label, op), 1e9), time.perf_counter() - t)
    copy = best["copy", "", ""] * 1e3
    print(f"# q8 (dynamic tree), {args.elements} float32 (Gaussian), blocks of {args.block}, min of {args.rounds} "
          f"interleaved rounds, one thread; a float32 copy {copy:.2f} ms; {machine()}\n")
    print("| kernels | variant | op | ms | same bytes as shipped |")
    print("|---|---|---|---|---|")
    for f, rs in rows.items():
        shipped = {op: res() for label, op, _, res in rs if label == "shipped"}
        for label, op, _, res in rs:
            same = res() == shipped[op]
            print(f"| {f} | {label} | {op} | {best[f, label, op] * 1e3:.2f} | {same} |")
    print()
    for f in rows:
        ms = lambda label, op: best[f, label, op] * 1e3  # noqa: E731
        budget = TARGETS[f] * copy
        floor = ms("no search", "encode") + ms("no table lookups", "decode")
        spent = ms("shipped", "encode") + ms("shipped", "decode") - floor
        room = budget - floor
        share = f"{spent / room:.1f}x the room" if room > 0 else "no room at all"
        total = ms("shipped", "encode") + ms("shipped", "decode")
        print(f"{f}: target {TARGETS[f]}x a copy = {budget:.2f} ms for encode + decode; without the search and "
              f"the lookups {floor:.2f} ms ({floor / copy:.2f}x), leaving {room:.2f} ms for both; the shipped "
              f"kernels spend {spent:.2f} ms on them ({share}), {total:.2f} ms in all ({total / copy:.2f}x)")
        decodes = [label for label, op, _, _ in rows[f] if op == "decode" and label != "no table lookups"]
        exact = min(decodes, key=lambda label: ms(label, "decode"))
        free = ms("no search", "encode") + ms(exact, "decode")
        print(f"{f}: with a search that cost nothing and the fastest exact decode ({exact}, "
              f"{ms(exact, 'decode'):.2f} ms): {free:.2f} ms, {free / copy:.2f}x a copy")


if __name__ == "__main__":
    main()
