// horovod_q8 8- and 4-bit codebook encode / decode, 4-bit threshold codes and the sum of k
// ranks' codes for x86-64 CPUs with AVX-512, called through ctypes by
// horovod_q8/backends/native.py. Byte-for-byte the same as horovod_q8/formats/reference.py
// (docs/formats.md): code = count(mids < x / scale), 16 elements per instruction.
//
// Why native: the Numba kernel looks each element's code up in a 64 KB table one element at
// a time; here the 8-bit code comes from the value's segment and an estimate inside it, held
// in registers (see codes16). Built with -ffp-contract=off: a fused multiply-add would
// change the last bit of a decoded sum relative to the other backends.
#include <stdint.h>
#include <string.h>
#include <immintrin.h>

#define ABS_MASK 0x7FFFFFFFu
#define INF_BITS 0x7F800000u
#define NAN_BITS 0x7FC00000u
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
// Floats ahead of the absmax loads that the encodes prefetch (16 KB): without it the q8 encode
// of 25.6M from memory took 1.27x as long on Zen 5 (scripts/codec_ablation.py, docs/performance.md).
#define PREFETCH_AHEAD 4096
// Decoded outputs from this size (bytes) are written with streaming stores: they cannot stay in
// a last-level cache anyway, and the stores then skip reading every line before writing it.
#define STREAM_MIN_BYTES ((int64_t)32 << 20)

int hq8_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

static inline __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

// The largest |x| as bits (m accumulates them), NaN's canonical bits where any is NaN.
AVX512 static inline __m512i absmax_acc(__m512i m, const float *x, int64_t from, int64_t to) {
    const __m512i abs_mask = _mm512_set1_epi32((int)ABS_MASK);
    for (int64_t i = from; i < to; i += 16)
        m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_maskz_loadu_epi32(tail_mask(to - i), x + i), abs_mask));
    return m;
}

AVX512 static inline uint32_t absmax_final(__m512i m) {
    uint32_t b = _mm512_reduce_max_epu32(m);
    return b > INF_BITS ? NAN_BITS : b;  // any NaN gives the canonical NaN
}

// Elements of the block that starts at s: `block`, fewer for the last, 0 past the end.
static inline int64_t block_len(int64_t s, int64_t block, int64_t n) {
    return s >= n ? 0 : (s + block < n ? block : n - s);
}

AVX512 static uint32_t absmax_bits(const float *x, int64_t n) {
    return absmax_final(absmax_acc(_mm512_setzero_si512(), x, 0, n));
}

// The code of v = x / scale for a table symmetric about 0 (codes center - 127 .. center + 127):
// cnt = count(positive mids < |v|) (for v < 0: <= |v|, i.e. < the next float, as bits + 1),
// code = center +- cnt. The positive values fall into segments where they are evenly spaced (a
// decade of the dynamic tree); the segment d = count(lowest mids of segments < a) comes from a's
// binary exponent and one comparison, and inside it w = a * c1[d] - c0[d] estimates W + center +
// the count: it rises with a and equals W + center + j + 1 exactly at the j-th mid (checked
// where the tables are built), so where w is not a whole number the code is its integer part,
// less W, once w is clamped to the segment's codes. With W = 256, w lies in [256, 512), where a
// float's bits 15-22 are that integer part and bits 0-14 the fraction: the code is bits >> 15
// (its low byte), a tie a zero fraction. A vector with a tie takes the exact comparison with
// that mid instead (a 128-entry lookup held in eight registers). tests/test_native_codec.py
// checks every float32 in [-1, 1].
#define W_BITS_15 0x8700  // the bits of 256.0f (W) >> 15
typedef struct {
    int32_t pmid[128];       // bits of the positive mids, ascending, padded with +Inf bits
    int32_t d_exp[32];       // count of segments' lowest mids below 2**(e - 127) for e = 96..127
    int32_t lo_next[16];     // by d: bits of segment d+1's lowest mid (+Inf bits past the last)
    float w_lo[16], w_hi[16];  // by d: W + its lowest and highest code, + 0.5: w's clamp (never a tie)
    float c1[16], c0[16];    // by d: the estimate's slope and offset
    float pos[128];          // table[center + j] for j = 0..127 (the last repeats the largest)
    int32_t center;
    int32_t clamp_low;       // whether w can fall below w_lo (just above a segment's lowest mid)
} hq8_symmetric;

// t[8]: 128 int32 entries; permutex2var picks from 32 (index bits 0-4), bits 5 and 6 choose.
AVX512 static inline __m512i lookup128(const __m512i t[8], __m512i idx) {
    __mmask16 b5 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
    __mmask16 b6 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(64));
    __m512i lo = _mm512_mask_blend_epi32(b5, _mm512_permutex2var_epi32(t[0], idx, t[1]),
                                         _mm512_permutex2var_epi32(t[2], idx, t[3]));
    __m512i hi = _mm512_mask_blend_epi32(b5, _mm512_permutex2var_epi32(t[4], idx, t[5]),
                                         _mm512_permutex2var_epi32(t[6], idx, t[7]));
    return _mm512_mask_blend_epi32(b6, lo, hi);
}

typedef struct {
    __m512i pm[8], dx[2], next_at[2], e_low, tie_base, twice_center;  // next_at: lo_next[d_exp[e]] by e
    __m512 w_lo, w_hi, c1, c0;
} search16;

// The first step of every codebook encode: a = the bits of |x / s|, one more where x / s < 0
// (*neg), so that count(mid < a) counts the mids <= |x / s| there.
AVX512 static inline __attribute__((always_inline)) __m512i quot16(__m512 xv, __m512 vs, __mmask16 *neg) {
    __m512i b = _mm512_castps_si512(_mm512_div_ps(xv, vs));
    *neg = _mm512_cmplt_epi32_mask(b, _mm512_setzero_si512());
    __m512i a = _mm512_and_si512(b, _mm512_set1_epi32((int)ABS_MASK));
    return _mm512_mask_add_epi32(a, *neg, a, _mm512_set1_epi32(1));
}

// The 8-bit codes of quot16's a and neg. clamp_low: a constant where it is inlined, so each
// table kind gets its own loop.
AVX512 static inline __attribute__((always_inline)) __m128i codes16q(__m512i a, __mmask16 neg, const search16 *S,
                                                                     const int clamp_low) {
    const __m512i one = _mm512_set1_epi32(1);
    // the segment: from a's binary exponent (at most one segment starts in a binade), then one compare
    // with the next segment's lowest mid, looked up by the exponent too: off the chain through d
    __m512i e = _mm512_srli_epi32(_mm512_subs_epu16(a, S->e_low), 23);  // exponent - 96, at least 0
    __m512i d = _mm512_permutex2var_epi32(S->dx[0], e, S->dx[1]);
    d = _mm512_mask_add_epi32(d, _mm512_cmpgt_epi32_mask(a, _mm512_permutex2var_epi32(S->next_at[0], e, S->next_at[1])),
                              d, one);
    __m512 w = _mm512_sub_ps(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_permutexvar_ps(d, S->c1)),
                             _mm512_permutexvar_ps(d, S->c0));
    if (clamp_low) w = _mm512_max_ps(w, _mm512_permutexvar_ps(d, S->w_lo));
    w = _mm512_min_ps(w, _mm512_permutexvar_ps(d, S->w_hi));
    __m512i code = _mm512_srli_epi32(_mm512_castps_si512(w), 15);  // W_BITS_15 + the code: its low byte is the code
    __mmask16 tie = ~_mm512_test_epi32_mask(_mm512_castps_si512(w), _mm512_set1_epi32(0x7FFF));
    if (tie) {  // w = W + center + j + 1 at a's lane: the code is one less unless the j-th mid < a
        __m512i next = lookup128(S->pm, _mm512_sub_epi32(code, S->tie_base));
        code = _mm512_mask_sub_epi32(code, tie & _mm512_cmpge_epi32_mask(next, a), code, one);
    }
    return _mm512_cvtepi32_epi8(_mm512_mask_sub_epi32(code, neg, S->twice_center, code));
}

AVX512 static inline __attribute__((always_inline)) __m128i codes16(__m512 xv, __m512 vs, const search16 *S,
                                                                    const int clamp_low) {
    __mmask16 neg;
    __m512i a = quot16(xv, vs, &neg);
    return codes16q(a, neg, S, clamp_low);
}

// A symmetric 4-bit table with 7 positive mids (q4): code = center +- count(pmid < a), a as for
// 8 bits. The count comes from a's cell, h = (a's high 16 bits - lo, at least 0) >> shift, which
// holds at most one mid (the first cell everything below): below[h] + (mid[h] < a), two
// 16-entry lookups (checked where the cells are made, native.cells4).
typedef struct {
    int32_t below[16];  // by cell: count of the mids in the cells below it
    int32_t mid[16];    // by cell: bits of its mid, +Inf bits where it has none
    int32_t pmid[7];    // bits of the positive mids, ascending
    int32_t lo, shift, center;
} hq8_cells4;

typedef struct {
    __m512i code_below, mid, lo, twice_center;
    __m128i shift;
} cells16;

// The 4-bit codes (int32 lanes) of quot16's a and neg.
AVX512 static inline __m512i codes16_q4(__m512i a, __mmask16 neg, const cells16 *C) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512i h = _mm512_srl_epi32(_mm512_subs_epu16(a, C->lo), C->shift);
    __m512i code = _mm512_permutexvar_epi32(h, C->code_below);
    code = _mm512_mask_add_epi32(code, _mm512_cmpgt_epi32_mask(a, _mm512_permutexvar_epi32(h, C->mid)), code, one);
    return _mm512_mask_sub_epi32(code, neg, C->twice_center, code);
}

// 16 codes (int32 lanes) -> 8 bytes: each 64-bit lane holds an even code low, the odd one at bit 32.
AVX512 static inline __m128i pack16_4(__m512i c) {
    return _mm512_cvtepi64_epi8(_mm512_or_si512(c, _mm512_srli_epi64(c, 28)));
}

// Codes of x[0, both) (both a multiple of 16) and, in the same loop, the absmax of nx[0, both)
// into *m: `bits` 8 (S) or 4 (C), a constant where it is inlined. The division heads a chain
// of some twenty dependent steps; taking the quotients two vectors ahead keeps the steps waiting
// on it from filling the scheduler (scripts/codec_ablation.py's "quotients not taken ahead" row).
AVX512 static inline __attribute__((always_inline)) void codes_ahead(
        const int bits, const float *x, int64_t both, __m512 vs, const float *nx, __m512i *m, uint8_t *codes,
        const search16 *S, const cells16 *C, const int clamp_low) {
    if (both == 0) return;
    const __m512i abs_mask = _mm512_set1_epi32((int)ABS_MASK);
    __mmask16 n0, n1 = 0, n2 = 0;
    __m512i a0 = quot16(_mm512_loadu_ps(x), vs, &n0), a1 = a0, a2 = a0;
    if (both > 16) a1 = quot16(_mm512_loadu_ps(x + 16), vs, &n1);
    for (int64_t i = 0; i < both; i += 16) {
        _mm_prefetch((const char *)(nx + i + PREFETCH_AHEAD), _MM_HINT_T0);
        *m = _mm512_max_epu32(*m, _mm512_and_si512(_mm512_loadu_si512(nx + i), abs_mask));
        if (i + 32 < both) a2 = quot16(_mm512_loadu_ps(x + i + 32), vs, &n2);
        if (bits == 8) _mm_storeu_si128((__m128i *)(codes + i), codes16q(a0, n0, S, clamp_low));
        else _mm_storel_epi64((__m128i *)(codes + i / 2), pack16_4(codes16_q4(a0, n0, C)));
        a0 = a1, n0 = n1, a1 = a2, n1 = n2;
    }
}

// The codes of block x (n elements) and, in the same loop, the absmax bits of the next block
// (nx, nn elements, nn <= n or none): its loads from memory overlap this block's arithmetic.
AVX512 static inline __attribute__((always_inline)) uint32_t codes_symmetric_k(
        const float *x, int64_t n, float s, uint8_t *codes, const hq8_symmetric *T, const float *nx, int64_t nn,
        const int clamp_low) {
    const __m512 vs = _mm512_set1_ps(s);
    search16 S;
    for (int q = 0; q < 8; q++) S.pm[q] = _mm512_loadu_si512(T->pmid + 16 * q);
    for (int q = 0; q < 2; q++) S.dx[q] = _mm512_loadu_si512(T->d_exp + 16 * q);
    const __m512i lo_next = _mm512_loadu_si512(T->lo_next);
    for (int q = 0; q < 2; q++) S.next_at[q] = _mm512_permutexvar_epi32(S.dx[q], lo_next);
    S.e_low = _mm512_set1_epi32(96 << 23);
    S.tie_base = _mm512_set1_epi32(W_BITS_15 + T->center + 1);
    S.twice_center = _mm512_set1_epi32(2 * T->center);
    S.w_lo = _mm512_loadu_ps(T->w_lo), S.w_hi = _mm512_loadu_ps(T->w_hi);
    S.c1 = _mm512_loadu_ps(T->c1), S.c0 = _mm512_loadu_ps(T->c0);
    __m512i m = _mm512_setzero_si512();
    const int64_t both = (nn < n ? nn : n) & ~(int64_t)15;
    int64_t i = both;
    codes_ahead(8, x, both, vs, nx, &m, codes, &S, NULL, clamp_low);
    for (; i + 16 <= n; i += 16)
        _mm_storeu_si128((__m128i *)(codes + i), codes16(_mm512_loadu_ps(x + i), vs, &S, clamp_low));
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        _mm_mask_storeu_epi8(codes + i, k, codes16(_mm512_maskz_loadu_ps(k, x + i), vs, &S, clamp_low));
    }
    return absmax_final(absmax_acc(m, nx, both, nn));
}

AVX512 static uint32_t codes_symmetric(const float *x, int64_t n, float s, uint8_t *codes, const hq8_symmetric *T,
                                       const float *nx, int64_t nn) {
    return T->clamp_low ? codes_symmetric_k(x, n, s, codes, T, nx, nn, 1) : codes_symmetric_k(x, n, s, codes, T, nx, nn, 0);
}

static uint8_t code_one(float v, const hq8_symmetric *T) {
    int32_t b;
    memcpy(&b, &v, 4);
    int32_t neg = b < 0, a = (b & (int32_t)ABS_MASK) + neg, cnt = 0;
    for (int j = 0; j < 128; j++) cnt += T->pmid[j] < a;
    return (uint8_t)(neg ? T->center - cnt : T->center + cnt);
}

// A block whose scale is +Inf (it holds ±Inf): ±Inf -> ±1, every finite element -> 0.
static void codes_overflowed(const float *x, int64_t n, uint8_t *codes, const hq8_symmetric *T) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] == __builtin_inff() ? 1.0f : (x[i] == -__builtin_inff() ? -1.0f : 0.0f);
        codes[i] = code_one(v, T);
    }
}

// Scales (absmax bits per block of `block` elements, the last one shorter) and 8-bit codes.
void hq8_encode8(const float *x, int64_t n, int64_t block, uint32_t *scale_bits, uint8_t *codes,
                 const hq8_symmetric *T) {
    int zero_code = T->center;
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    uint32_t next = nb ? absmax_bits(x, n < block ? n : block) : 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t s = b * block, len = block_len(s, block, n), ns = s + len, nlen = block_len(ns, block, n);
        uint32_t sb = next;
        scale_bits[b] = sb;
        if (sb == 0 || sb > INF_BITS) {
            memset(codes + s, zero_code, (size_t)len);  // all zeros, or a NaN: every code is 0.0's
            next = absmax_bits(x + ns, nlen);
        } else if (sb == INF_BITS) {
            codes_overflowed(x + s, len, codes + s, T);
            next = absmax_bits(x + ns, nlen);
        } else {
            float sc;
            memcpy(&sc, &sb, 4);
            next = codes_symmetric(x + s, len, sc, codes + s, T, x + ns, nlen);
        }
    }
}

// Whether a decode into out, part of an output of `span` floats that other threads may be
// writing the rest of, uses streaming stores: the whole output large enough, not accumulating,
// and out aligned to `align` bytes (each block's first `lead` elements are then stored as a
// tail is, the rest as 64-byte-aligned vectors).
static inline int streams(const float *out, int64_t span, int accumulate, int align) {
    return !accumulate && span * 4 >= STREAM_MIN_BYTES && !((uintptr_t)out & (uintptr_t)(align - 1));
}

// Elements of a block at o (len of them) before its first 64-byte boundary, where streaming starts.
static inline int64_t lead(const float *o, int64_t len, int stream) {
    int64_t k = stream ? (int64_t)((-(uintptr_t)o & 63) / 4) : 0;
    return k < len ? k : len;
}

AVX512 static inline void store16(float *o, __m512 v, int stream) {
    if (stream) _mm512_stream_ps(o, v);
    else _mm512_storeu_ps(o, v);
}

// The values of 16 codes: table[center + j] = pos[j], table[center - j] = -pos[j] (exact
// negation, checked where the tables are built); code 255 is the padding, pos[127].
AVX512 static inline __m512 values16(__m128i c8, const __m512i pv[8], __m512i center) {
    __m512i j = _mm512_sub_epi32(_mm512_cvtepu8_epi32(c8), center);
    __mmask16 neg = _mm512_cmplt_epi32_mask(j, _mm512_setzero_si512());
    j = _mm512_min_epi32(_mm512_abs_epi32(j), _mm512_set1_epi32(127));
    __m512i v = lookup128(pv, j);
    return _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, neg, v, _mm512_set1_epi32((int)0x80000000u)));
}

// Elements i .. i + k - 1 (k < 16) of a block, as hq8_decode8's vector loops compute them.
AVX512 static inline void few8(const uint8_t *c, float *o, int64_t i, int64_t k, const __m512i pv[8], __m512i center,
                               __m512 vs, int scaled, __m512 vp, int accumulate) {
    __mmask16 m = tail_mask(k);
    __m512 v = _mm512_mul_ps(values16(_mm_maskz_loadu_epi8(m, c + i), pv, center), vs);
    if (scaled) v = _mm512_mul_ps(v, vp);
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, o + i), v);
    _mm512_mask_storeu_ps(o + i, m, v);
}

// out = table[code] * scale (or out += it), 8-bit codes of a symmetric table; scales NULL
// means scale 1 (the product with 1 is exact, as the other backends compute it). post != 1
// (not with accumulate): out = (table[code] * scale) * post, the caller's op factor, rounded
// twice as a second pass would round it. span: the floats of the whole output that out is part
// of (see streams).
AVX512 void hq8_decode8(const uint8_t *codes, int64_t n, int64_t block, const float *scales,
                        const hq8_symmetric *T, float *out, int accumulate, float post, int64_t span) {
    const __m512 vp = _mm512_set1_ps(post);
    const int scaled = post != 1.0f;
    __m512i pv[8];
    for (int q = 0; q < 8; q++) pv[q] = _mm512_loadu_si512(T->pos + 16 * q);
    const __m512i center = _mm512_set1_epi32(T->center);
    const int stream = streams(out, span, accumulate, 4);
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t s = b * block, len = (s + block < n ? block : n - s);
        const __m512 vs = _mm512_set1_ps(scales ? scales[b] : 1.0f);
        const uint8_t *c = codes + s;
        float *o = out + s;
        int64_t i = lead(o, len, stream);
        if (i) few8(c, o, 0, i, pv, center, vs, scaled, vp, 0);
        if (accumulate) {
            for (; i + 16 <= len; i += 16) {
                __m512 v = _mm512_mul_ps(values16(_mm_loadu_si128((const __m128i *)(c + i)), pv, center), vs);
                _mm512_storeu_ps(o + i, _mm512_add_ps(_mm512_loadu_ps(o + i), v));
            }
        } else if (scaled) {
            for (; i + 16 <= len; i += 16) {
                __m512 v = _mm512_mul_ps(values16(_mm_loadu_si128((const __m128i *)(c + i)), pv, center), vs);
                store16(o + i, _mm512_mul_ps(v, vp), stream);
            }
        } else {
            for (; i + 16 <= len; i += 16)
                store16(o + i, _mm512_mul_ps(values16(_mm_loadu_si128((const __m128i *)(c + i)), pv, center), vs), stream);
        }
        if (i < len) few8(c, o, i, len - i, pv, center, vs, scaled, vp, accumulate);
    }
    if (stream) _mm_sfence();  // the streamed stores are ordered before whatever reads out next
}

// ---- 4-bit codes, two per byte, the first in the low nibble ----

// Code j of `bits` (4 or 2) bits each, the first of a byte in its lowest bits.
static void put_code(uint8_t *codes, int64_t j, int c, int bits) {
    const int per = 8 / bits, shift = (int)(j % per) * bits;
    uint8_t *p = codes + j / per;
    // a byte's first code clears it: the later ones follow, or stay 0 past the end
    *p = shift ? (uint8_t)((*p & ((1 << shift) - 1)) | (c << shift)) : (uint8_t)c;
}

static int code_one_q4(float v, const int32_t *pmid, int center) {
    int32_t b;
    memcpy(&b, &v, 4);
    int32_t neg = b < 0, a = (b & (int32_t)ABS_MASK) + neg, cnt = 0;
    for (int q = 0; q < 7; q++) cnt += pmid[q] < a;
    return neg ? center - cnt : center + cnt;
}

// The 4-bit codes of block x (n elements, from a byte) and the absmax bits of the next block
// (nx, nn elements), as codes_symmetric.
AVX512 static uint32_t codes_q4(const float *x, int64_t n, float s, uint8_t *codes, const hq8_cells4 *T,
                                const float *nx, int64_t nn) {
    const __m512 vs = _mm512_set1_ps(s);
    cells16 C;
    C.code_below = _mm512_add_epi32(_mm512_loadu_si512(T->below), _mm512_set1_epi32(T->center));
    C.mid = _mm512_loadu_si512(T->mid);
    C.lo = _mm512_set1_epi32((int)((uint32_t)T->lo << 16));
    C.shift = _mm_cvtsi32_si128(16 + T->shift);
    C.twice_center = _mm512_set1_epi32(2 * T->center);
    __m512i m = _mm512_setzero_si512();
    const int64_t both = (nn < n ? nn : n) & ~(int64_t)15;
    int64_t i = both;
    codes_ahead(4, x, both, vs, nx, &m, codes, NULL, &C, 0);
    for (; i + 16 <= n; i += 16) {
        __mmask16 neg;
        __m512i a = quot16(_mm512_loadu_ps(x + i), vs, &neg);
        _mm_storel_epi64((__m128i *)(codes + i / 2), pack16_4(codes16_q4(a, neg, &C)));
    }
    for (; i < n; i++) put_code(codes, i, code_one_q4(x[i] / s, T->pmid, T->center), 4);
    return absmax_final(absmax_acc(m, nx, both, nn));
}

// Scales and 4-bit codes; `block` even (or one block), so every block starts on a byte.
void hq8_encode4(const float *x, int64_t n, int64_t block, uint32_t *scale_bits, uint8_t *codes,
                 const hq8_cells4 *T) {
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    uint32_t next = nb ? absmax_bits(x, n < block ? n : block) : 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t s = b * block, len = block_len(s, block, n), ns = s + len, nlen = block_len(ns, block, n);
        uint32_t sb = next;
        scale_bits[b] = sb;
        const float *xs = x + s;
        uint8_t *cs = codes + s / 2;
        if (sb == 0 || sb >= INF_BITS) {  // zeros or NaN: 0.0's code; +Inf: +-1 or 0
            for (int64_t i = 0; i < len; i++) {
                float v = sb == INF_BITS ? (xs[i] == __builtin_inff() ? 1.0f : (xs[i] == -__builtin_inff() ? -1.0f : 0.0f)) : 0.0f;
                put_code(cs, i, code_one_q4(v, T->pmid, T->center), 4);
            }
            next = absmax_bits(x + ns, nlen);
            continue;
        }
        float sc;
        memcpy(&sc, &sb, 4);
        next = codes_q4(xs, len, sc, cs, T, x + ns, nlen);
    }
}

// 4 bytes at p into the low lane (GCC before 11 has no _mm_loadu_si32).
AVX512 static inline __m128i load4(const uint8_t *p) {
    int32_t w;
    memcpy(&w, p, 4);
    return _mm_cvtsi32_si128(w);
}

// The values of the `bits`-bit codes (4 or 2, a constant where it is inlined) of elements
// i .. i + 15 of `c` (i a multiple of 8 / bits), of which `left` exist: only their bytes are read.
AVX512 static inline __attribute__((always_inline)) __m512 values16_p(const int bits, const uint8_t *c, int64_t i,
                                                                      int64_t left, __m512 t) {
    const int per = 8 / bits;
    const int64_t bytes = left >= 16 ? 16 / per : (left + per - 1) / per;
    const uint8_t *p = c + i / per;
    const __m128i raw = left < 16 ? _mm_maskz_loadu_epi8((__mmask16)((1u << bytes) - 1u), p)
                        : bits == 4 ? _mm_loadl_epi64((const __m128i *)p) : load4(p);
    if (bits == 4) {  // each 64-bit lane: byte k's low nibble at bit 0, its high one at bit 32
        __m512i w = _mm512_cvtepu8_epi64(raw);
        w = _mm512_and_si512(_mm512_or_si512(w, _mm512_slli_epi64(w, 28)), _mm512_set1_epi64(0x0000000F0000000FLL));
        return _mm512_permutexvar_ps(w, t);
    }
    // 2 bits: lane k's code is bits 2k, 2k + 1 of the 4 bytes read as one little-endian word
    const __m512i shifts = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i w = _mm512_srlv_epi32(_mm512_broadcastd_epi32(raw), shifts);
    return _mm512_permutexvar_ps(_mm512_and_si512(w, _mm512_set1_epi32(3)), t);
}

// Elements i .. i + k - 1 (k < 16) of a block, as decode_packed's vector loop computes them.
AVX512 static inline __attribute__((always_inline)) void few_packed(
        const int bits, const uint8_t *c, float *o, int64_t i, int64_t k, __m512 t, __m512 vs, int scaled, __m512 vp,
        int accumulate) {
    __mmask16 m = tail_mask(k);
    __m512 v = _mm512_mul_ps(values16_p(bits, c, i, k, t), vs);
    if (scaled) v = _mm512_mul_ps(v, vp);
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, o + i), v);
    _mm512_mask_storeu_ps(o + i, m, v);
}

// out = table[code] * scale (or out += it) of `bits`-bit codes (4 or 2), any 16-entry table;
// scales NULL means scale 1; every block starts on a byte; post and span as in hq8_decode8.
AVX512 static inline __attribute__((always_inline)) void decode_packed(
        const int bits, const uint8_t *codes, int64_t n, int64_t block, const float *scales, const float *table,
        float *out, int accumulate, float post, int64_t span) {
    const __m512 vp = _mm512_set1_ps(post);
    const int scaled = post != 1.0f, per = 8 / bits;
    const __m512 t = _mm512_loadu_ps(table);
    const int stream = streams(out, span, accumulate, 4 * per);  // every block's lead a whole byte's codes
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t s = b * block, len = (s + block < n ? block : n - s);
        const __m512 vs = _mm512_set1_ps(scales ? scales[b] : 1.0f);
        const uint8_t *c = codes + s / per;
        float *o = out + s;
        int64_t i = lead(o, len, stream);
        if (i) few_packed(bits, c, o, 0, i, t, vs, scaled, vp, 0);
        for (; i + 16 <= len; i += 16) {
            __m512 v = _mm512_mul_ps(values16_p(bits, c, i, 16, t), vs);
            if (scaled) v = _mm512_mul_ps(v, vp);
            if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(o + i), v);
            store16(o + i, v, stream);
        }
        if (i < len) few_packed(bits, c, o, i, len - i, t, vs, scaled, vp, accumulate);
    }
    if (stream) _mm_sfence();
}

AVX512 void hq8_decode4(const uint8_t *codes, int64_t n, int64_t block, const float *scales,
                        const float *table, float *out, int accumulate, float post, int64_t span) {
    decode_packed(4, codes, n, block, scales, table, out, accumulate, post, span);
}

AVX512 void hq8_decode2(const uint8_t *codes, int64_t n, int64_t block, const float *scales,
                        const float *table, float *out, int accumulate, float post, int64_t span) {
    decode_packed(2, codes, n, block, scales, table, out, accumulate, post, span);
}

// ---- the sum of k ranks' codes in one pass ----

// The values of 16 codes of any width: 8-bit ones at c + i (all 16 there, or `m` masks
// them), 4- and 2-bit ones as values16_p reads them.
AVX512 static inline __m512 values16_any(const int bits, const uint8_t *c, int64_t i, int64_t left, __mmask16 m,
                                         const __m512i pv[8], __m512i center, __m512 t4) {
    if (bits != 8) return values16_p(bits, c, i, left, t4);
    return values16(left >= 16 ? _mm_loadu_si128((const __m128i *)(c + i)) : _mm_maskz_loadu_epi8(m, c + i), pv, center);
}

// sum_ranks for one code width, a constant where it is inlined, so each width gets its own loop.
AVX512 static inline __attribute__((always_inline)) void sum_width(
        const int bits, const uint8_t *const *codes, const float *const *scales, int k, int64_t n, int64_t block,
        const void *table, float *out, int accumulate, float post) {
    const __m512 vp = _mm512_set1_ps(post);
    const int scaled = post != 1.0f;
    const hq8_symmetric *T = (const hq8_symmetric *)table;
    __m512i pv[8];
    __m512i center = _mm512_setzero_si512();
    __m512 t4 = _mm512_setzero_ps();
    if (bits == 8) {
        for (int q = 0; q < 8; q++) pv[q] = _mm512_loadu_si512(T->pos + 16 * q);
        center = _mm512_set1_epi32(T->center);
    } else {
        t4 = _mm512_loadu_ps((const float *)table);
    }
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t s = b * block, len = (s + block < n ? block : n - s), cs = s / (8 / bits);
        float *o = out + s;
        const uint8_t *cr[k];  // this block's codes and scales by rank, read once: stores to out may alias them
        float sr[k];
        for (int r = 0; r < k; r++) cr[r] = codes[r] + cs, sr[r] = scales ? scales[r][b] : 1.0f;
        for (int64_t i = 0; i < len; i += 16) {
            const int64_t left = len - i;
            const __mmask16 m = tail_mask(left);
            __m512 acc = _mm512_setzero_ps();
            for (int r = 0; r < k; r++) {
                __m512 v = values16_any(bits, cr[r], i, left, m, pv, center, t4);
                v = _mm512_mul_ps(v, _mm512_set1_ps(sr[r]));
                acc = r == 0 ? v : _mm512_add_ps(acc, v);
            }
            if (left >= 16) {
                if (accumulate) acc = _mm512_add_ps(_mm512_loadu_ps(o + i), acc);
                if (scaled) acc = _mm512_mul_ps(acc, vp);
                _mm512_storeu_ps(o + i, acc);
            } else {
                if (accumulate) acc = _mm512_add_ps(_mm512_maskz_loadu_ps(m, o + i), acc);
                if (scaled) acc = _mm512_mul_ps(acc, vp);
                _mm512_mask_storeu_ps(o + i, m, acc);
            }
        }
    }
}

// out = (v_0 + ... + v_{k-1}) * post, v_r = value(codes[r]) * scales[r][block], added in rank
// order (out = out + v_0 with accumulate, k = 1): the bits of hq8_decode8/4/2 and k - 1
// accumulating ones, then a scaling pass. table: hq8_symmetric* (8-bit) or float[16] (4- or
// 2-bit, every block starting on a byte). scales NULL means 1.
AVX512 void hq8_sum(int bits, const uint8_t *const *codes, const float *const *scales, int k, int64_t n,
                    int64_t block, const void *table, float *out, int accumulate, float post) {
    if (bits == 8) sum_width(8, codes, scales, k, n, block, table, out, accumulate, post);
    else if (bits == 4) sum_width(4, codes, scales, k, n, block, table, out, accumulate, post);
    else sum_width(2, codes, scales, k, n, block, table, out, accumulate, post);
}

// ---- threshold codes (sign + level index, as MXNet's 2-bit ones), with or without a residual ----

// 16 codes (int32 lanes, 0..3) -> 4 bytes, four to a byte, the first in the lowest bits.
AVX512 static inline __m128i pack16_2(__m512i c) {
    __m128i b = _mm512_cvtepi32_epi8(c);                                    // 16 bytes: c0 .. c15
    __m128i pairs = _mm_maddubs_epi16(b, _mm_set1_epi16(0x0401));            // c0 + 4 c1, ...
    return _mm_cvtepi32_epi8(_mm_madd_epi16(pairs, _mm_set1_epi32(0x00100001)));  // + 16 (c2 + 4 c3)
}

// The 4-bit levels by binade, where they lie in at most 16 binades with at most two in each (as
// halving levels do): count(levels <= |g|) = below[idx] + (A > l1[idx]) + (A > l2[idx]), A the
// bits of |g|, idx its binade from the lowest level's, clamped to [0, 15]; l1, l2: the bits of
// the binade's levels minus one (INT32_MAX where it has fewer), as codec_avx2.c's, 16 wide;
// built by native.py (level_binades).
typedef struct {
    __m512i below, l1, l2, e0;
} level_binades16;

// k = count(levels <= |g|) over the first nlev levels (a constant where it is inlined), by
// binade where LB is not NULL; code = k, or k + half when g < 0 < k, half for a non-finite g;
// the residual keeps g - the value sent (0 for a non-finite g). vals: 0, then the levels (the
// value of count k is vals[k]).
AVX512 static inline __attribute__((always_inline)) __m512i threshold16(__m512 g, const __m512 lv[7], const int nlev,
                                                                        const level_binades16 *LB, __m512 vals,
                                                                        __m512i half, __m512 *rs) {
    __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(g), _mm512_set1_epi32((int)ABS_MASK)));
    __m512i k;
    if (LB) {
        __m512i A = _mm512_castps_si512(a);
        __m512i idx = _mm512_min_epu32(_mm512_subs_epu16(_mm512_srli_epi32(A, 23), LB->e0), _mm512_set1_epi32(15));
        k = _mm512_permutexvar_epi32(idx, LB->below);
        k = _mm512_mask_add_epi32(k, _mm512_cmpgt_epi32_mask(A, _mm512_permutexvar_epi32(idx, LB->l1)), k,
                                  _mm512_set1_epi32(1));
        k = _mm512_mask_add_epi32(k, _mm512_cmpgt_epi32_mask(A, _mm512_permutexvar_epi32(idx, LB->l2)), k,
                                  _mm512_set1_epi32(1));
    } else {
        k = _mm512_setzero_si512();
        for (int q = 0; q < nlev; q++)
            k = _mm512_mask_add_epi32(k, _mm512_cmp_ps_mask(lv[q], a, _CMP_LE_OQ), k, _mm512_set1_epi32(1));
    }
    __m512 val = _mm512_permutexvar_ps(k, vals);  // levels increase: the largest level <= |g|
    __mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
    __mmask16 finite = _mm512_cmp_ps_mask(a, _mm512_set1_ps(__builtin_inff()), _CMP_LT_OQ);
    __m512i code = _mm512_mask_add_epi32(k, neg & _mm512_test_epi32_mask(k, k), k, half);
    code = _mm512_mask_mov_epi32(code, (__mmask16)~finite, half);
    __m512i vb = _mm512_castps_si512(val);
    __m512 sent = _mm512_castsi512_ps(_mm512_mask_xor_epi32(vb, neg, vb, _mm512_set1_epi32((int)0x80000000u)));
    *rs = _mm512_maskz_sub_ps(finite, g, sent);
    return code;
}

static int threshold_one(float g, const float *levels, int nlev, int half, float *rs) {
    float a = __builtin_fabsf(g), val = 0.0f;
    int k = 0;
    for (int q = 0; q < nlev; q++)
        if (levels[q] <= a) { val = levels[q]; k = q + 1; }
    int neg = g < 0.0f, finite = a < __builtin_inff();
    *rs = finite ? g - (neg ? -val : val) : 0.0f;
    if (!finite) return half;
    return neg && k ? k + half : k;
}

AVX512 static inline __attribute__((always_inline)) void threshold_k(
        const int bits, const float *x, int64_t n, float *residual, uint8_t *codes, const float *levels,
        const level_binades16 *LB) {
    const int nlev = (1 << (bits - 1)) - 1, half = 1 << (bits - 1), per = 8 / bits;
    __m512 lv[7];
    for (int q = 0; q < nlev; q++) lv[q] = _mm512_set1_ps(levels[q]);
    float v[16] = {0.0f};
    for (int q = 0; q < nlev; q++) v[q + 1] = levels[q];
    const __m512 vals = _mm512_loadu_ps(v);
    const __m512i vh = _mm512_set1_epi32(half);
    int64_t i = 0;
    __m512 rs;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(x + i + PREFETCH_AHEAD), _MM_HINT_T0);
        if (residual) _mm_prefetch((const char *)(residual + i + PREFETCH_AHEAD), _MM_HINT_T0);
        __m512 g = _mm512_loadu_ps(x + i);
        if (residual) g = _mm512_add_ps(g, _mm512_loadu_ps(residual + i));
        __m512i c = threshold16(g, lv, nlev, LB, vals, vh, &rs);
        if (residual) _mm512_storeu_ps(residual + i, rs);
        if (bits == 4) _mm_storel_epi64((__m128i *)(codes + i / per), pack16_4(c));
        else {
            int32_t w = _mm_cvtsi128_si32(pack16_2(c));
            memcpy(codes + i / per, &w, 4);
        }
    }
    for (; i < n; i++) {
        float r, g = residual ? x[i] + residual[i] : x[i];
        put_code(codes, i, threshold_one(g, levels, nlev, half, &r), bits);
        if (residual) residual[i] = r;
    }
}

// `bits`-bit threshold codes (4: 7 levels, 2: one) of g = x (+ residual, updated in place when
// residual is not NULL), 8 / bits to a byte. levels: increasing, padded with +Inf to 7;
// binades: their level_binades (4 bits, 16 wide), or NULL where they do not fit one.
AVX512 void hq8_threshold(const float *x, int64_t n, float *residual, uint8_t *codes, const float *levels, int bits,
                          const int32_t *binades) {
    if (bits == 2) {
        threshold_k(2, x, n, residual, codes, levels, NULL);
    } else if (binades) {  // below[16], l1[16], l2[16], e0
        const level_binades16 L = {_mm512_loadu_si512(binades), _mm512_loadu_si512(binades + 16),
                                   _mm512_loadu_si512(binades + 32), _mm512_set1_epi32(binades[48])};
        threshold_k(4, x, n, residual, codes, levels, &L);
    } else {
        threshold_k(4, x, n, residual, codes, levels, NULL);
    }
}
