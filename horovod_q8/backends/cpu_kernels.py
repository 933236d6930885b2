"""Numba kernels for CPUs: the same bytes as `formats.reference`, parallel and in one pass.

Called only through `backends.cpu`; every array argument is contiguous and float32/uint8.
Each kernel exists twice: serial, and parallel over chunks (`PARALLEL[...]`) for large
tensors, where it pays for waking the thread pool.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

ABS_MASK = np.uint32(0x7FFFFFFF)
INF_BITS = np.uint32(0x7F800000)
NAN_BITS = np.uint32(0x7FC00000)
CHUNK = 16384  # elements per parallel work item; a multiple of 8 so packed bytes never straddle


def block_scale_bits(xbits, n, block, seg, scale_bits):
    """Absmax per block as float32 bits, NaN bits for a block holding NaN/Inf.

    Integer max on |x|'s bits orders non-negative floats correctly and vectorises; any bit
    pattern >= INF_BITS is Inf or NaN. Blocks are cut into segments of `seg` for parallelism.
    """
    nb = scale_bits.size
    segs_per_block = (block + seg - 1) // seg
    partial = np.zeros(nb * segs_per_block, dtype=np.uint32)
    for p in prange(nb * segs_per_block):
        b = p // segs_per_block
        s = b * block + (p % segs_per_block) * seg
        e = min(s + seg, (b + 1) * block, n)
        m = np.uint32(0)
        for i in range(s, e):
            v = xbits[i] & ABS_MASK
            m = v if v > m else m
        partial[p] = m
    for b in range(nb):
        m = np.uint32(0)
        for q in range(segs_per_block):
            v = partial[b * segs_per_block + q]
            m = v if v > m else m
        scale_bits[b] = NAN_BITS if m >= INF_BITS else m


@njit(cache=True, inline="always")
def _uniform(seed, i):
    h = (np.uint64(i) + np.uint64(seed) * np.uint64(0x9E3779B9)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x7FEB352D)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(0x846CA68B)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    return np.float32(h >> np.uint64(8)) * np.float32(2.0 ** -24)


@njit(cache=True, inline="always")
def _pack_chunk(ctmp, length, bits, codes, byte0):
    """Pack `length` codes into bytes from codes[byte0], the first code in the lowest bits."""
    if bits == 8:
        for j in range(length):
            codes[byte0 + j] = ctmp[j]
    elif bits == 4:
        full = length // 2
        for k in range(full):
            codes[byte0 + k] = ctmp[2 * k] | (ctmp[2 * k + 1] << np.uint8(4))
        if length % 2:
            codes[byte0 + full] = ctmp[length - 1]
    else:
        full = length // 4
        for k in range(full):
            codes[byte0 + k] = (ctmp[4 * k] | (ctmp[4 * k + 1] << np.uint8(2))
                                | (ctmp[4 * k + 2] << np.uint8(4)) | (ctmp[4 * k + 3] << np.uint8(6)))
        if length % 4:
            acc = np.uint8(0)
            for q in range(length % 4):
                acc |= ctmp[4 * full + q] << np.uint8(2 * q)
            codes[byte0 + full] = acc


def encode_codebook(x, n, block, scales, codes, lut, mids, values, size, bits, stochastic, seed):
    """Codes = count(mids < x/scale) (nearest) or stochastic rounding between neighbours."""
    nchunks = (n + CHUNK - 1) // CHUNK
    per = 8 // bits
    for c in prange(nchunks):
        start = c * CHUNK
        end = min(start + CHUNK, n)
        vtmp = np.empty(end - start, dtype=np.float32)
        ctmp = np.empty(end - start, dtype=np.uint8)
        i = start
        while i < end:
            b = i // block
            e = min(end, (b + 1) * block)
            s = scales[b]
            if s > 0 and s < np.inf:
                for j in range(i, e):
                    vtmp[j - start] = x[j] / s
            else:
                for j in range(i, e):
                    vtmp[j - start] = np.float32(0)
            i = e
        vbits = vtmp.view(np.uint32)
        if not stochastic and bits == 8:  # straight into the output, no packing pass
            for j in range(end - start):
                k = lut[vbits[j] >> np.uint32(16)]
                codes[start + j] = k + (mids[k] < vtmp[j])
            continue
        if not stochastic:
            for j in range(end - start):
                k = lut[vbits[j] >> np.uint32(16)]
                ctmp[j] = k + (mids[k] < vtmp[j])
        else:
            for j in range(end - start):
                v = vtmp[j]
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
                    if _uniform(seed, start + j) < p:
                        code = lo + 1
                ctmp[j] = code
        _pack_chunk(ctmp, end - start, bits, codes, start // per)


def encode_threshold(x, n, residual, use_residual, codes, lut, levels, table, bits):
    """Sign + magnitude index k = count(levels <= |x + residual|); residual keeps the rest.

    levels is padded with +inf; k = lut[bits(|g|) >> 16] + (levels[that] <= |g|), as for codebooks;
    table[code] is the signed value sent for a code (the format's decode table).
    """
    nchunks = (n + CHUNK - 1) // CHUNK
    per = 8 // bits
    half = 1 << (bits - 1)
    for c in prange(nchunks):
        start = c * CHUNK
        end = min(start + CHUNK, n)
        length = end - start
        gtmp = np.empty(length, dtype=np.float32)
        atmp = np.empty(length, dtype=np.float32)
        ctmp = np.empty(length, dtype=np.uint8)
        if use_residual:
            for j in range(length):
                gtmp[j] = x[start + j] + residual[start + j]
        else:
            for j in range(length):
                gtmp[j] = x[start + j]
        for j in range(length):
            atmp[j] = abs(gtmp[j])
        abits = atmp.view(np.uint32)
        for j in range(length):
            k = lut[abits[j] >> np.uint32(16)]
            k += levels[k] <= atmp[j]
            neg = (gtmp[j] < 0) & (k > 0)
            ctmp[j] = half if abits[j] >= INF_BITS else k + half * neg
        if use_residual:
            # table[code] is the signed value sent; a non-finite g restarts from 0.
            for j in range(length):
                c = ctmp[j]
                residual[start + j] = np.float32(0) if c == half else gtmp[j] - table[c]
        _pack_chunk(ctmp, length, bits, codes, start // per)


@njit(cache=True, inline="always")
def _decode_one(codes, j, lp, per, bits, mask, table, s, out, accumulate):
    code = (codes[j >> lp] >> ((j & (per - 1)) * bits)) & mask
    if accumulate:
        out[j] += table[code] * s
    else:
        out[j] = table[code] * s


def decode(codes, n, block, scales, has_scales, table, bits, out, accumulate):
    """out = table[code] * scale (or out += it); threshold formats have no scales."""
    nchunks = (n + CHUNK - 1) // CHUNK
    per = 8 // bits
    lp = 0 if per == 1 else (1 if per == 2 else 2)
    mask = (1 << bits) - 1
    for c in prange(nchunks):
        start = c * CHUNK
        end = min(start + CHUNK, n)
        i = start
        while i < end:
            s = np.float32(1)
            e = end
            if has_scales:
                b = i // block
                e = min(end, (b + 1) * block)
                s = scales[b]
            if per == 1:
                if accumulate:
                    for j in range(i, e):
                        out[j] += table[codes[j]] * s
                else:
                    for j in range(i, e):
                        out[j] = table[codes[j]] * s
            else:
                # unaligned head and tail element by element; whole bytes in between
                head = min(e, (i + per - 1) & ~(per - 1))
                body = head + ((e - head) // per) * per
                for j in range(i, head):
                    _decode_one(codes, j, lp, per, bits, mask, table, s, out, accumulate)
                if per == 2:
                    for k in range(head >> 1, body >> 1):
                        byte = codes[k]
                        v0 = table[byte & 15] * s
                        v1 = table[byte >> 4] * s
                        if accumulate:
                            out[2 * k] += v0
                            out[2 * k + 1] += v1
                        else:
                            out[2 * k] = v0
                            out[2 * k + 1] = v1
                else:
                    for k in range(head >> 2, body >> 2):
                        byte = codes[k]
                        for q in range(4):
                            v = table[(byte >> (2 * q)) & 3] * s
                            if accumulate:
                                out[4 * k + q] += v
                            else:
                                out[4 * k + q] = v
                for j in range(body, e):
                    _decode_one(codes, j, lp, per, bits, mask, table, s, out, accumulate)
            i = e


_KERNELS = (block_scale_bits, encode_codebook, encode_threshold, decode)
# nogil: TensorFlow may run two host calls (pieces of one pipelined tensor) at once
SERIAL = {f.__name__: njit(cache=True, nogil=True)(f) for f in _KERNELS}
PARALLEL = {f.__name__: njit(cache=True, parallel=True, nogil=True)(f) for f in _KERNELS}
PARALLEL_MIN = 1 << 18  # elements


def kernel(name: str, n: int):
    """The serial or the parallel variant of a kernel for n elements."""
    return (PARALLEL if n >= PARALLEL_MIN else SERIAL)[name]
