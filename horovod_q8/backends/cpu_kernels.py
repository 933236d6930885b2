"""Numba kernels for CPUs: the same bytes as `formats.reference`, parallel and in one pass.

Called only through `backends.cpu`; every array argument is contiguous and float32/uint8.
Each kernel exists twice: serial, and parallel over chunks (`PARALLEL[...]`) for large
tensors, where it pays for waking the thread pool.

Speed comes from loops LLVM vectorises: each inner loop runs over a slice from index 0 (an
index like `x[start + i]` may be negative to Numba, which then checks it and gives up on
SIMD), and the work of one block (absmax, divide, table search, packing) runs while the
block is in the L1 cache instead of one pass over the whole tensor per step. Where LLVM leaves
a loop scalar (the 8-bit search's and decode's table reads), `numba_vectors` writes its
vector IR by hand.
"""
from __future__ import annotations

import functools
import types
from typing import Optional

import numba
import numpy as np
from numba import njit, prange

from horovod_q8.backends.numba_vectors import ACCUMULATE, CODES_STEP, DECODE, LANES, PAIR, carry_codes
from horovod_q8.backends.numba_vectors import accumulate2, accumulate4, accumulate8, decode2, decode4, decode8, pair8
from horovod_q8.cores import codec_threads

# Numba's cache files are keyed by this file's timestamp and size alone, not by the modules whose
# IR its kernels inline: a change to numba_vectors.py comes with a new digest here, so that
# every cached kernel is compiled again (tests/test_codec_kernels.py checks it). Every function
# that inlines that IR is defined in this file. A tree copied with its timestamps kept onto a
# cache of the old one would still load the old code: the digest keeps the file's size.
NUMBA_VECTORS_DIGEST = "29ec8e3ec39b0867"

ABS_MASK = np.uint32(0x7FFFFFFF)
INF_BITS = np.uint32(0x7F800000)
NAN_BITS = np.uint32(0x7FC00000)
CHUNK = 16384  # elements per parallel work item; a multiple of 8 so packed bytes never straddle
FUSED_MAX = 1 << 16  # largest block encoded in one pass (scale and codes while it is cached)


@njit(cache=True)
def _absmax_bits(xb):
    """max |x| over a block as float32 bits; integer max orders non-negative floats and vectorises."""
    m = np.uint32(0)
    for i in range(xb.size):
        v = np.uint32(xb[i] & ABS_MASK)  # Numba widens integer results to 64 bits unless told
        m = v if v > m else m
    return m


@njit(cache=True)
def _scale_bits(m):
    """A block's scale from its absmax bits: any NaN gives the canonical NaN, ±Inf gives +Inf."""
    return NAN_BITS if m > INF_BITS else m


@njit(cache=True)
def _uniform(seed, i):
    h = (np.uint64(i) + np.uint64(seed) * np.uint64(0x9E3779B9)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x7FEB352D)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(0x846CA68B)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    return np.float32(h >> np.uint64(8)) * np.float32(2.0 ** -24)


@njit(cache=True)
def _divide(xs, s, vt):
    """vt = xs / s: the IEEE division of the spec (a reciprocal would change some bytes)."""
    for i in range(xs.size):
        vt[i] = xs[i] / s


@njit(cache=True)
def _divide_overflowed(xs, vt):
    """The values of a block whose scale is +Inf: ±Inf -> ±1, every finite element -> 0."""
    for i in range(xs.size):
        a = xs[i]
        vt[i] = np.float32(1.0) if a == np.inf else (np.float32(-1.0) if a == -np.inf else np.float32(0.0))


@njit(cache=True)
def _nearest_carry(vt, length, carry, hi, lo, ct):
    """ct = count(mids < v) for an 8-bit table: (carry[key] + low) >> 16 (codebooks.carry_table).

    The keys first, in a loop that vectorises, then the lookups alone: one table read per code
    (about 0.5 ns on Zen 3, where a table read, a read of the mid and a comparison took 0.8: a
    scratch timing, no log); the whole encode is 0-7% faster (docs/performance.md, the Numba
    codec table).
    """
    vb = vt.view(np.int32)
    for i in range(length):
        b = vb[i]
        hi[i] = np.uint16(np.uint32(b) >> np.uint32(16))
        lo[i] = np.uint16((b ^ (b >> np.int32(31))) & np.int32(0xFFFF))  # inverted where v < 0
    for i in range(length):
        ct[i] = np.uint8((carry[hi[i]] + np.uint32(lo[i])) >> np.uint32(16))


@njit(cache=True)
def _divided_codes8(xs, scale, carry, ct):
    """ct = count(mids < xs / scale) for an 8-bit table, len(xs) a multiple of CODES_STEP: the
    division and the carry lookup of `_nearest_carry` a vector at a time, without its scratch
    (`numba_vectors.carry_codes`: LLVM leaves `_nearest_carry`'s table read scalar)."""
    for i in range(0, xs.size, CODES_STEP):
        carry_codes(xs, i, scale, carry, ct)


@njit(cache=True)
def _nearest_count16(vt, length, mids, c32):
    """c32 = count(mids < v) for a 4-bit table (mids padded with +inf): 15 compares that vectorise.

    Counted in int32 (a uint8 result makes LLVM pack every comparison to bytes).
    """
    m0, m1, m2, m3, m4 = mids[0], mids[1], mids[2], mids[3], mids[4]
    m5, m6, m7, m8, m9 = mids[5], mids[6], mids[7], mids[8], mids[9]
    m10, m11, m12, m13, m14 = mids[10], mids[11], mids[12], mids[13], mids[14]
    for i in range(length):
        v = vt[i]
        c = np.int32(m0 < v)
        c = np.int32(c + np.int32(m1 < v))
        c = np.int32(c + np.int32(m2 < v))
        c = np.int32(c + np.int32(m3 < v))
        c = np.int32(c + np.int32(m4 < v))
        c = np.int32(c + np.int32(m5 < v))
        c = np.int32(c + np.int32(m6 < v))
        c = np.int32(c + np.int32(m7 < v))
        c = np.int32(c + np.int32(m8 < v))
        c = np.int32(c + np.int32(m9 < v))
        c = np.int32(c + np.int32(m10 < v))
        c = np.int32(c + np.int32(m11 < v))
        c = np.int32(c + np.int32(m12 < v))
        c = np.int32(c + np.int32(m13 < v))
        c32[i] = np.int32(c + np.int32(m14 < v))


@njit(cache=True)
def _nearest_symmetric7(vt, length, pos, center, c32):
    """c32 = count(mids < v) for a table symmetric about 0 with 7 positive mids (q4), as bits.

    v >= 0: center + #{p < v}; v < 0: center - #{p <= |v|} = center - #{p < next float after |v|}.
    Positive floats order like their bits, so 7 int32 compares do it (-0.0 gives center, as 0.0).
    """
    p0, p1, p2, p3, p4, p5, p6 = pos[0], pos[1], pos[2], pos[3], pos[4], pos[5], pos[6]
    vb = vt.view(np.int32)
    for i in range(length):
        b = vb[i]
        neg = np.int32(b < 0)
        a = np.int32(np.int32(b & np.int32(0x7FFFFFFF)) + neg)
        c = np.int32(p0 < a)
        c = np.int32(c + np.int32(p1 < a))
        c = np.int32(c + np.int32(p2 < a))
        c = np.int32(c + np.int32(p3 < a))
        c = np.int32(c + np.int32(p4 < a))
        c = np.int32(c + np.int32(p5 < a))
        c = np.int32(c + np.int32(p6 < a))
        c32[i] = np.int32(center + np.int32(np.int32(1 - 2 * neg) * c))


@njit(cache=True)
def _stochastic(vt, length, values, size, seed, index0, ct):
    """Between the neighbouring values lo <= v < hi, up with probability (v - lo) / (hi - lo)."""
    for j in range(length):
        v = vt[j]
        lo, hi = 0, size  # largest lo with values[lo] <= v
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if values[mid] <= v:
                lo = mid
            else:
                hi = mid
        code = lo
        if lo < size - 1 and values[lo] != v:
            p = (v - values[lo]) / (values[lo + 1] - values[lo])
            if _uniform(seed, index0 + j) < p:
                code = lo + 1
        ct[j] = code


@njit(cache=True)
def _segment_codes(xs, sbits, scale, vt, hi, lo, ct, carry, mids, values, pos, size, bits, zero_code, stochastic,
                   seed, index0):
    """Unpacked codes ct[:len(xs)] of elements xs of one block, whose scale is `scale` (bits `sbits`).

    pos: the positive mids' bits of a symmetric 4-bit table (7 of them), else empty; vt, hi, lo:
    scratch of at least len(xs).
    """
    length = xs.size
    if sbits == 0 or sbits > INF_BITS:  # all zeros, or a NaN in the block: every code is 0.0's
        for i in range(length):
            ct[i] = zero_code
        return
    if sbits == INF_BITS:
        _divide_overflowed(xs, vt)
    elif bits == 8 and not stochastic:
        body = length - length % CODES_STEP
        _divided_codes8(xs[:body], scale, carry, ct)
        if body < length:
            _divide(xs[body:], scale, vt)
            _nearest_carry(vt, length - body, carry, hi, lo, ct[body:])
        return
    else:
        _divide(xs, scale, vt)
    if stochastic:
        _stochastic(vt, length, values, size, seed, index0, ct)
    elif bits == 8:
        _nearest_carry(vt, length, carry, hi, lo, ct)
    elif pos.size == 7:
        _nearest_symmetric7(vt, length, pos, np.int32(zero_code), ct)
    else:
        _nearest_count16(vt, length, mids, ct)


@njit(cache=True)
def _pack(c32, length, bits, out):
    """Pack `length` int32 codes into out, 8/bits per byte, the first code in the lowest bits."""
    per = 8 // bits
    full = length // per
    if bits == 4:
        for k in range(full):
            out[k] = np.uint8(c32[2 * k] | (c32[2 * k + 1] << np.int32(4)))
    else:
        for k in range(full):
            out[k] = np.uint8(c32[4 * k] | (c32[4 * k + 1] << np.int32(2)) | (c32[4 * k + 2] << np.int32(4))
                              | (c32[4 * k + 3] << np.int32(6)))
    if length % per:
        acc = np.int32(0)
        for q in range(length % per):
            acc |= c32[per * full + q] << np.int32(bits * q)
        out[full] = np.uint8(acc)


def encode_codebook(x, n, block, scale_bits, codes, carry, mids, values, pos, size, bits, zero_code, stochastic,
                    seed):
    """Scales (absmax per block) and codes (count(mids < x/scale), or stochastic rounding).

    Blocks up to FUSED_MAX whose packed codes start on a byte: one pass, block by block, a
    work item being a run of whole blocks. Otherwise the scales first (segments of huge blocks
    in parallel), then the codes chunk by chunk. 8-bit codes go straight into the output;
    4-bit ones through an int32 buffer, then packed.
    """
    per = 8 // bits
    nb = scale_bits.size
    xb = x.view(np.uint32)
    scales = scale_bits.view(np.float32)
    if block <= FUSED_MAX and (block % 8 == 0 or nb == 1):
        bpi = max(1, CHUNK // block)  # blocks per work item
        for it in prange((nb + bpi - 1) // bpi):
            vt = np.empty(block, dtype=np.float32)
            hi = np.empty(block if bits == 8 else 0, dtype=np.uint16)
            lo = np.empty(block if bits == 8 else 0, dtype=np.uint16)
            ct = np.empty(block if bits < 8 else 0, dtype=np.int32)
            for b in range(it * bpi, min(nb, (it + 1) * bpi)):
                s = b * block
                e = min(s + block, n)
                sb = _scale_bits(_absmax_bits(xb[s:e]))
                scale_bits[b] = sb
                if bits == 8 and not stochastic and 0 < sb < INF_BITS:
                    # indices into x and codes, not slices of them: a slice per block and a call
                    # with its arrays cost more than the block's search (see _divided_codes8)
                    body = s + (e - s) // CODES_STEP * CODES_STEP
                    for i in range(s, body, CODES_STEP):
                        carry_codes(x, i, scales[b], carry, codes)
                    if body < e:
                        _segment_codes(x[body:e], sb, scales[b], vt, hi, lo, codes[body:e], carry, mids, values, pos,
                                       size, bits, zero_code, stochastic, seed, body)
                elif bits == 8:
                    _segment_codes(x[s:e], sb, scales[b], vt, hi, lo, codes[s:e], carry, mids, values, pos, size, bits,
                                   zero_code, stochastic, seed, s)
                else:
                    _segment_codes(x[s:e], sb, scales[b], vt, hi, lo, ct, carry, mids, values, pos, size, bits,
                                   zero_code, stochastic, seed, s)
                    _pack(ct, e - s, bits, codes[s // per:])
        return
    seg = min(block, 1 << 16)
    segs_per_block = (block + seg - 1) // seg
    partial = np.zeros(nb * segs_per_block, dtype=np.uint32)
    for p in prange(nb * segs_per_block):
        b = p // segs_per_block
        s = b * block + (p % segs_per_block) * seg
        e = min(s + seg, (b + 1) * block, n)
        partial[p] = _absmax_bits(xb[s:e])
    for b in range(nb):
        m = np.uint32(0)
        for q in range(segs_per_block):
            v = partial[b * segs_per_block + q]
            m = v if v > m else m
        scale_bits[b] = _scale_bits(m)
    for c in prange((n + CHUNK - 1) // CHUNK):
        start = c * CHUNK
        end = min(start + CHUNK, n)
        vt = np.empty(end - start, dtype=np.float32)
        hi = np.empty(end - start if bits == 8 else 0, dtype=np.uint16)
        lo = np.empty(end - start if bits == 8 else 0, dtype=np.uint16)
        ct = np.empty(end - start if bits < 8 else 0, dtype=np.int32)
        i = start
        while i < end:
            b = i // block
            e = min(end, (b + 1) * block)
            if bits == 8:
                _segment_codes(x[i:e], scale_bits[b], scales[b], vt, hi, lo, codes[i:e], carry, mids, values, pos, size,
                               bits, zero_code, stochastic, seed, i)
            else:
                _segment_codes(x[i:e], scale_bits[b], scales[b], vt, hi, lo, ct[i - start:], carry, mids, values, pos,
                               size, bits, zero_code, stochastic, seed, i)
            i = e
        if bits < 8:
            _pack(ct, end - start, bits, codes[start // per:])


@njit(cache=True)
def _threshold_codes(gs, levels, half, c32, rs, use_residual):
    """Codes of g: k = count(levels <= |g|), plus the sign bit `half` when g < 0 < k; half alone
    for a non-finite g. With use_residual, rs = g - the value sent (0 for a non-finite g).

    levels: 7 entries, padded with +inf. Only selects between constants in the loop, no integer
    arithmetic: Numba widens integer results to 64 bits (half the SIMD lanes), and a float-to-int
    conversion inside a condition becomes slow masked stores. g - (-val) is g + val bit for bit.
    """
    l0, l1, l2, l3, l4, l5, l6 = levels[0], levels[1], levels[2], levels[3], levels[4], levels[5], levels[6]
    zero, z, h = np.float32(0), np.int32(0), np.int32(half)
    p1, p2, p3, p4, p5, p6, p7 = (np.int32(1), np.int32(2), np.int32(3), np.int32(4), np.int32(5), np.int32(6),
                                  np.int32(7))
    n1, n2, n3, n4, n5, n6, n7 = (np.int32(1 + half), np.int32(2 + half), np.int32(3 + half),
                                  np.int32(4 + half), np.int32(5 + half), np.int32(6 + half), np.int32(7 + half))
    for j in range(gs.size):
        g = gs[j]
        a = abs(g)
        val, kp, kn = zero, z, z
        if l0 <= a:
            val, kp, kn = l0, p1, n1
        if l1 <= a:
            val, kp, kn = l1, p2, n2
        if l2 <= a:
            val, kp, kn = l2, p3, n3
        if l3 <= a:
            val, kp, kn = l3, p4, n4
        if l4 <= a:
            val, kp, kn = l4, p5, n5
        if l5 <= a:
            val, kp, kn = l5, p6, n6
        if l6 <= a:
            val, kp, kn = l6, p7, n7
        neg = g < zero
        finite = a < np.float32(np.inf)
        code = kn if neg else kp
        c32[j] = code if finite else h
        if use_residual:
            sent = -val if neg else val
            rs[j] = (g - sent) if finite else zero


@njit(cache=True)
def _threshold_codes1(gs, level, half, c32, rs, use_residual):
    """`_threshold_codes` for a single level (twobit): one comparison per element."""
    zero, z, h = np.float32(0), np.int32(0), np.int32(half)
    p1, n1 = np.int32(1), np.int32(1 + half)
    for j in range(gs.size):
        g = gs[j]
        a = abs(g)
        hit = level <= a
        neg = g < zero
        finite = a < np.float32(np.inf)
        code = (n1 if neg else p1) if hit else z
        c32[j] = code if finite else h
        if use_residual:
            val = level if hit else zero
            sent = -val if neg else val
            rs[j] = (g - sent) if finite else zero


@njit(cache=True)
def _threshold_chunk(gs, levels, n_levels, half, c32, rs, use_residual):
    """The codes (and residual) of one chunk; the `if` outside the loops keeps them branch-free."""
    if n_levels == 1:
        if use_residual:
            _threshold_codes1(gs, levels[0], half, c32, rs, True)
        else:
            _threshold_codes1(gs, levels[0], half, c32, rs, False)
    elif use_residual:
        _threshold_codes(gs, levels, half, c32, rs, True)
    else:
        _threshold_codes(gs, levels, half, c32, rs, False)


def encode_threshold(x, n, residual, use_residual, codes, levels, n_levels, bits):
    """Sign + magnitude index of g = x + residual; the residual keeps what was not sent."""
    per = 8 // bits
    half = np.int32(1 << (bits - 1))
    for c in prange((n + CHUNK - 1) // CHUNK):
        start = c * CHUNK
        end = min(start + CHUNK, n)
        length = end - start
        ct = np.empty(length, dtype=np.int32)
        xs = x[start:end]
        if use_residual:
            gt = np.empty(length, dtype=np.float32)
            rs = residual[start:end]
            for j in range(length):
                gt[j] = xs[j] + rs[j]
            _threshold_chunk(gt, levels, n_levels, half, ct, rs, True)
        else:
            _threshold_chunk(xs, levels, n_levels, half, ct, residual, False)  # an empty array, not written
        _pack(ct, length, bits, codes[start // per:])


@njit(cache=True)
def _scaled_table(table, s, post, st):
    """st = table * s (* post where post != 1): the products decoding then multiplying by post
    per element gives, one per code."""
    for i in range(st.size):
        st[i] = table[i] * s
    if post != 1:
        for i in range(st.size):
            st[i] = st[i] * post


@njit(cache=True)
def _code(codes, j, per, bits):
    return (codes[j // per] >> ((j % per) * bits)) & ((1 << bits) - 1)


@njit(cache=True)
def _decode_one(codes, codes1, j, per, bits, st, st1, out, mode, post):
    v = st[_code(codes, j, per, bits)]
    if mode == PAIR:
        out[j] = (v + st1[_code(codes1, j, per, bits)]) * post
    elif mode == ACCUMULATE:
        out[j] = (out[j] + v) * post
    else:
        out[j] = v


@njit(cache=True)
def _pair_packed(cs, cs1, st, st1, post, os, bits):
    """(st[code] + st1[code1]) * post over whole bytes of 4- or 2-bit codes (os: 8 / bits values
    per byte): loops LLVM vectorises by itself, faster for narrow codes than numba_vectors' eight
    table reads per step (twobit's sum of 2 ranks 10.0 against 11.2 ms per 25.6M, Zen 4)."""
    if bits == 4:
        for k in range(cs.size):
            b0, b1 = cs[k], cs1[k]
            os[2 * k] = (st[b0 & np.uint8(15)] + st1[b1 & np.uint8(15)]) * post
            os[2 * k + 1] = (st[b0 >> np.uint8(4)] + st1[b1 >> np.uint8(4)]) * post
    else:
        for k in range(cs.size):
            b0, b1 = cs[k], cs1[k]
            for q in range(4):
                sh = np.uint8(2 * q)
                os[4 * k + q] = (st[(b0 >> sh) & np.uint8(3)] + st1[(b1 >> sh) & np.uint8(3)]) * post


@njit(cache=True)
def _decode_run(codes, codes1, i, e, bits, st, st1, out, mode, post):
    """Elements [i, e) of one block: eight at a time through `numba_vectors`' steps (pairs of
    narrow codes through _pair_packed), a head before the first whole byte and a tail one by one.
    Each (width, mode) has its own loop: a width or mode tested per element made these decodes
    3-4x slower, and one tested per step in the IR (LLVM left the branch in the loop) made the
    8-bit decode 7.4 ms per 25.6M against 6.5."""
    per = 8 // bits
    head = min(e, (i + per - 1) // per * per)
    body = head + (e - head) // LANES * LANES
    for j in range(i, head):
        _decode_one(codes, codes1, j, per, bits, st, st1, out, mode, post)
    if bits == 8:
        if mode == DECODE:
            for j in range(head, body, LANES):
                decode8(codes, codes1, j, st, st1, post, out)
        elif mode == ACCUMULATE:
            for j in range(head, body, LANES):
                accumulate8(codes, codes1, j, st, st1, post, out)
        else:
            for j in range(head, body, LANES):
                pair8(codes, codes1, j, st, st1, post, out)
    elif bits == 4:
        if mode == DECODE:
            for j in range(head, body, LANES):
                decode4(codes, codes1, j, st, st1, post, out)
        elif mode == ACCUMULATE:
            for j in range(head, body, LANES):
                accumulate4(codes, codes1, j, st, st1, post, out)
        else:
            _pair_packed(codes[head // 2: body // 2], codes1[head // 2: body // 2], st, st1, post, out[head:body], 4)
    else:
        if mode == DECODE:
            for j in range(head, body, LANES):
                decode2(codes, codes1, j, st, st1, post, out)
        elif mode == ACCUMULATE:
            for j in range(head, body, LANES):
                accumulate2(codes, codes1, j, st, st1, post, out)
        else:
            _pair_packed(codes[head // 4: body // 4], codes1[head // 4: body // 4], st, st1, post, out[head:body], 2)
    for j in range(body, e):
        _decode_one(codes, codes1, j, per, bits, st, st1, out, mode, post)


def decode(codes, codes1, n, block, scales, scales1, has_scales, table, bits, out, mode, post):
    """mode DECODE: out = table[code] * scale * post; ACCUMULATE: out = (out + table[code] *
    scale) * post; PAIR: out = (value of codes + value of codes1) * post, two ranks' parts in
    one pass. Threshold formats have no scales (scale 1); post is float32."""
    for c in prange((n + CHUNK - 1) // CHUNK):
        start = c * CHUNK
        end = min(start + CHUNK, n)
        st = np.empty(table.size, dtype=np.float32)
        st1 = np.empty(table.size if mode == PAIR else 0, dtype=np.float32)
        i = start
        while i < end:
            s = np.float32(1)
            s1 = np.float32(1)
            e = end
            if has_scales:
                b = i // block
                e = min(end, (b + 1) * block)
                s = scales[b]
                if mode == PAIR:
                    s1 = scales1[b]
            _scaled_table(table, s, post if mode == DECODE else np.float32(1), st)
            if mode == PAIR:
                _scaled_table(table, s1, np.float32(1), st1)
            _decode_run(codes, codes1, i, e, bits, st, st1, out, mode, post)
            i = e


def _compiled(f, parallel: bool):
    """A dispatcher for kernel f under its own name, f_serial or f_parallel.

    Numba names a cache file after the function and keys it by signature, not by the parallel
    flag: compiled from one function, the serial and the parallel variants would share one
    file, and whichever was cached first would run for both (the parallel one on one thread).
    nogil: TensorFlow may run two host calls (pieces of one pipelined tensor) at once.
    """
    suffix = "_parallel" if parallel else "_serial"
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__ + suffix, f.__defaults__, f.__closure__)
    g.__qualname__ = f.__qualname__ + suffix
    return njit(cache=True, parallel=parallel, nogil=True)(g)


_KERNELS = (encode_codebook, encode_threshold, decode)
SERIAL = {f.__name__: _compiled(f, parallel=False) for f in _KERNELS}
PARALLEL = {f.__name__: _compiled(f, parallel=True) for f in _KERNELS}
PARALLEL_MIN = 1 << 18  # elements


THREADS: Optional[int] = None  # set to time other counts (`horovod-q8 bench codec --threads`)


@functools.lru_cache(maxsize=None)
def _share() -> int:
    return max(1, min(codec_threads()[0], numba.config.NUMBA_NUM_THREADS))


def parallel_threads() -> int:
    """Threads of a parallel kernel (and of the native kernels' pool): THREADS where set, else
    `cores.codec_threads()`, at most Numba's pool."""
    return THREADS or _share()


def kernel(name: str, n: int):
    """The serial or the parallel variant of a kernel for n elements; the parallel one on
    `parallel_threads()` threads (Numba keeps that count per calling thread, so it is set on
    every call: about 1 us)."""
    if n < PARALLEL_MIN:
        return SERIAL[name]
    numba.set_num_threads(parallel_threads())
    return PARALLEL[name]
