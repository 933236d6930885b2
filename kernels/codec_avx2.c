// horovod_q8 8- and 4-bit codebook encodes, 4- and 2-bit threshold encodes, 8-, 4- and 2-bit
// decodes and the sum of k ranks' codes for x86-64 CPUs with AVX2 (Zen 2/3, Haswell and later),
// called through ctypes by horovod_q8/backends/native.py where codec_x86.c's AVX-512 kernels do
// not run. Byte-for-byte the same as horovod_q8/formats/reference.py (docs/formats.md):
// code = count(mids < x / scale).
//
// The 8-bit search is one lookup in a table of cells (a float's bits >> 17: 64 cells per binade,
// each holding at most one mid), whose entry gives the count below the cell and, added to the
// float's low 17 bits, carries one more where the cell's mid lies below it; eight scalar loads
// per vector, their indices moved out as four 64-bit words. q4's count comes from two mids
// looked up by binade, and so does the 4-bit threshold count where the levels allow it.
// Built with -ffp-contract=off.
#include <stdint.h>
#include <string.h>
#include <immintrin.h>

#define ABS_MASK 0x7FFFFFFFu
#define INF_BITS 0x7F800000u
#define NAN_BITS 0x7FC00000u
#define AVX2 __attribute__((target("avx2")))
#define PREFETCH_AHEAD 4096  // floats the absmax pass prefetches ahead of its loads (16 KB), as codec_x86.c
#define STREAM_MIN_BYTES ((int64_t)32 << 20)  // decoded outputs from this size use streaming stores, as codec_x86.c

int hq8_avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

// The cell table of a symmetric 8-bit codebook (codes center - 127 .. center + 127) for the
// search: a = |v|'s bits (plus one where v < 0: then the count is of mids <= |v|), cell
// (a >> CELL_SHIFT) - lo, at least 0. Entry: ((center + the count of mids below the cell) << 24)
// + 2**24 - 1 - t, t the low CELL_SHIFT bits of the cell's mid (2**CELL_SHIFT - 1 where it has
// none), so that (entry + (a & CELL_MASK)) >> 24 is the code of a: the sum carries exactly where
// a's low bits exceed t. Cell 0 (and everything below it) holds no mid.
#define CELL_SHIFT 17
#define CELL_MASK ((1 << CELL_SHIFT) - 1)
#define CELLS_MAX 2048  // 32 binades: a first mid from 2**-31
typedef struct {
    int32_t cells[CELLS_MAX];
    int32_t lo, center;
} hq8_avx2_symmetric;

static inline int64_t block_len(int64_t b, int64_t block, int64_t n) {
    int64_t s = b * block;
    return s + block < n ? block : n - s;
}

AVX2 static uint32_t absmax_bits(const float *x, int64_t n) {
    __m256i m = _mm256_setzero_si256();
    const __m256i abs_mask = _mm256_set1_epi32((int)ABS_MASK);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if (!(i & 15)) _mm_prefetch((const char *)(x + i + PREFETCH_AHEAD), _MM_HINT_T0);  // a line per 16
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), abs_mask));
    }
    uint32_t lanes[8], b = 0;
    _mm256_storeu_si256((__m256i *)lanes, m);
    for (int q = 0; q < 8; q++) b = lanes[q] > b ? lanes[q] : b;
    for (; i < n; i++) {
        uint32_t v;
        memcpy(&v, x + i, 4);
        v &= ABS_MASK;
        b = v > b ? v : b;
    }
    return b > INF_BITS ? NAN_BITS : b;  // any NaN gives the canonical NaN
}

// m (absmax bits so far) with those of the 32 floats at p, prefetching ahead.
AVX2 static inline __m256i absmax32(__m256i m, const float *p) {
    const __m256i abs_mask = _mm256_set1_epi32((int)ABS_MASK);
    _mm_prefetch((const char *)(p + PREFETCH_AHEAD), _MM_HINT_T0);
    _mm_prefetch((const char *)(p + PREFETCH_AHEAD + 16), _MM_HINT_T0);
    for (int q = 0; q < 4; q++) m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + 8 * q)), abs_mask));
    return m;
}

// The absmax bits of a block whose first elements m holds (absmax32) and whose n others are at x.
AVX2 static uint32_t absmax_rest(__m256i m, const float *x, int64_t n) {
    uint32_t lanes[8], b = absmax_bits(x, n);
    _mm256_storeu_si256((__m256i *)lanes, m);
    for (int q = 0; q < 8; q++) b = lanes[q] > b ? lanes[q] : b;
    return b > INF_BITS ? NAN_BITS : b;
}

// The quotient an element of a block whose scale is +Inf (it holds +-Inf) is coded as: +-Inf -> +-1, finite -> 0.
static inline float overflowed(float x) {
    return x == __builtin_inff() ? 1.0f : (x == -__builtin_inff() ? -1.0f : 0.0f);
}

static uint8_t code_one(float v, const hq8_avx2_symmetric *T) {
    uint32_t b;
    memcpy(&b, &v, 4);
    uint32_t neg = b >> 31, a = (b & ABS_MASK) + neg, cell = a >> CELL_SHIFT;
    uint32_t code = ((uint32_t)T->cells[cell > (uint32_t)T->lo ? cell - (uint32_t)T->lo : 0] + (a & CELL_MASK)) >> 24;
    return (uint8_t)(neg ? 2 * T->center - code : code);
}

// 8 codes (int32 lanes, 0..255) -> 8 bytes.
AVX2 static inline void store8(uint8_t *dst, __m256i c) {
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i p = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(c, pick), _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64((__m128i *)dst, _mm256_castsi256_si128(p));
}

// 32 codes (the low bytes of 4 x 8 int32 lanes) -> 32 bytes: two packs and one permute.
AVX2 static inline void store32_8(uint8_t *dst, __m256i c0, __m256i c1, __m256i c2, __m256i c3) {
    const __m256i m = _mm256_set1_epi32(255);
    __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(_mm256_and_si256(c0, m), _mm256_and_si256(c1, m)),
                                    _mm256_packs_epi32(_mm256_and_si256(c2, m), _mm256_and_si256(c3, m)));
    _mm256_storeu_si256((__m256i *)dst, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// The codes of x / s for 8 elements (b: the bits of x / s, quot8), in the low byte of each lane:
// one cell lookup each (see hq8_avx2_symmetric). The indices leave the vector as four 64-bit
// words, and the entries enter it by inserts from memory: on Zen 3, 0.50 ns per element from
// memory against 0.61 through a store and eight index loads or with _mm256_i32gather_epi32, and
// 0.61 for the segment search this replaced (docs/performance.md).
AVX2 static inline __attribute__((always_inline)) __m256i codes8(__m256i b, const int32_t *cells, __m256i lo_bits,
                                                                 __m256i twice_center) {
    __m256i neg = _mm256_srai_epi32(b, 31);  // -1 where the sign bit is set
    __m256i a = _mm256_sub_epi32(_mm256_and_si256(b, _mm256_set1_epi32((int)ABS_MASK)), neg);
    // (a >> 17) - lo, at least 0: lo << 17 has no bits in the low 16, so a saturating 16-bit
    // subtraction takes it from the high half alone
    __m256i cell = _mm256_srli_epi32(_mm256_subs_epu16(a, lo_bits), CELL_SHIFT);
    __m128i l = _mm256_castsi256_si128(cell), h = _mm256_extracti128_si256(cell, 1);
    uint64_t q0 = (uint64_t)_mm_cvtsi128_si64(l), q1 = (uint64_t)_mm_extract_epi64(l, 1);
    uint64_t q2 = (uint64_t)_mm_cvtsi128_si64(h), q3 = (uint64_t)_mm_extract_epi64(h, 1);
    __m128i e0 = _mm_cvtsi32_si128(cells[(uint32_t)q0]), e1 = _mm_cvtsi32_si128(cells[(uint32_t)q2]);
    e0 = _mm_insert_epi32(e0, cells[q0 >> 32], 1);
    e1 = _mm_insert_epi32(e1, cells[q2 >> 32], 1);
    e0 = _mm_insert_epi32(e0, cells[(uint32_t)q1], 2);
    e1 = _mm_insert_epi32(e1, cells[(uint32_t)q3], 2);
    e0 = _mm_insert_epi32(e0, cells[q1 >> 32], 3);
    e1 = _mm_insert_epi32(e1, cells[q3 >> 32], 3);
    __m256i e = _mm256_inserti128_si256(_mm256_castsi128_si256(e0), e1, 1);
    __m256i code = _mm256_srli_epi32(_mm256_add_epi32(e, _mm256_and_si256(a, _mm256_set1_epi32(CELL_MASK))), 24);
    return _mm256_blendv_epi8(code, _mm256_sub_epi32(twice_center, code), neg);
}

AVX2 static inline __m256i quot8(const float *x, __m256 vs) {
    return _mm256_castps_si256(_mm256_div_ps(_mm256_loadu_ps(x), vs));
}

// Scales (absmax bits per block of `block` elements, the last one shorter) and 8-bit codes.
// Each quotient is taken two vectors ahead of the steps that use it, as in codec_x86.c: the
// division heads their chain. With the prefetch: 16.9 -> 13.7 ms per 25.6M on Zen 5
// (scripts/avx2_encode.py, docs/performance.md).
AVX2 void hq8_avx2_encode8(const float *x, int64_t n, int64_t block, uint32_t *scale_bits, uint8_t *codes,
                           const hq8_avx2_symmetric *T) {
    const __m256i lo_bits = _mm256_set1_epi32(T->lo << CELL_SHIFT);
    const __m256i twice_center = _mm256_set1_epi32(2 * T->center);
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    uint32_t next = nb ? absmax_bits(x, n < block ? n : block) : 0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t s = b * block, len = block_len(b, block, n), nlen = b + 1 < nb ? block_len(b + 1, block, n) : 0;
        const float *xs = x + s, *nx = xs + len;
        uint8_t *cs = codes + s;
        uint32_t sb = next;
        scale_bits[b] = sb;
        if (sb == 0 || sb >= INF_BITS) {  // all zeros, a NaN or an overflowed block
            if (sb == INF_BITS)
                for (int64_t i = 0; i < len; i++) cs[i] = code_one(overflowed(xs[i]), T);
            else
                memset(cs, T->center, (size_t)len);  // every code is 0.0's
            next = absmax_bits(nx, nlen);
            continue;
        }
        float sc;
        memcpy(&sc, &sb, 4);
        const __m256 vs = _mm256_set1_ps(sc);
        // the next block's absmax in the same loop: its loads from memory overlap this block's arithmetic
        __m256i m = _mm256_setzero_si256(), qa[4], qn[4], c[4];
        const int64_t both = (nlen < len ? nlen : len) & ~(int64_t)31;
        int64_t i = 0;
        for (int q = 0; q < 4 && len >= 32; q++) qa[q] = quot8(xs + 8 * q, vs);
        for (; i + 32 <= len; i += 32) {  // each quotient taken 32 elements ahead: the division heads the chain
            if (i < both) m = absmax32(m, nx + i);
            for (int q = 0; q < 4; q++) qn[q] = i + 64 <= len ? quot8(xs + i + 32 + 8 * q, vs) : qa[q];
            for (int q = 0; q < 4; q++) c[q] = codes8(qa[q], T->cells, lo_bits, twice_center);
            store32_8(cs + i, c[0], c[1], c[2], c[3]);
            for (int q = 0; q < 4; q++) qa[q] = qn[q];
        }
        for (; i + 8 <= len; i += 8)
            store8(cs + i, codes8(quot8(xs + i, vs), T->cells, lo_bits, twice_center));
        for (; i < len; i++) cs[i] = code_one(xs[i] / sc, T);
        next = absmax_rest(m, nx + both, nlen - both);
    }
}

// ---- 4-bit codes of a symmetric table with 7 positive mids (q4), two per byte, the first low ----

// count(pmid < a) from a's binade: idx = its exponent - 120, at least 0 (|x / s| <= 1, so at
// most 7), holds at most two mids (checked where the table is built, native.avx2_q4):
// below[idx] + (m1[idx] < a) + (m2[idx] < a), three 8-entry permutes and two compares.
#define Q4_EXP_LOW 120
typedef struct {
    int32_t neg_below[8];  // by idx: minus the count of mids in the binades below
    int32_t m1[8], m2[8];  // by idx: bits of its mids, ascending, +Inf bits where it has fewer
    int32_t pmid[7];       // bits of the positive mids, ascending
    int32_t center;
} hq8_avx2_q4;

static int code_one_q4(float v, const hq8_avx2_q4 *T) {
    int32_t b;
    memcpy(&b, &v, 4);
    int32_t neg = b < 0, a = (b & (int32_t)ABS_MASK) + neg, cnt = 0;
    for (int q = 0; q < 7; q++) cnt += T->pmid[q] < a;
    return neg ? T->center - cnt : T->center + cnt;
}

// Code i of a block's codes; the first of a byte clears it (a last odd code leaves the high nibble 0).
static inline void put4(uint8_t *codes, int64_t i, int c) {
    uint8_t *p = codes + i / 2;
    *p = i & 1 ? (uint8_t)((*p & 15) | (c << 4)) : (uint8_t)c;
}

typedef struct {
    __m256i neg_below, m1, m2;
} binades8;

// Minus the signed count of 8 quotients (bits b): -count(pmid < a) for b >= 0, count(pmid <= |b|)
// for b < 0 (a = the bits of |x / s|, one more where x / s < 0), so that the code is center - it.
AVX2 static inline __attribute__((always_inline)) __m256i counts8_q4(__m256i b, const binades8 *B) {
    __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32((int)ABS_MASK));
    __m256i a = _mm256_add_epi32(mag, _mm256_srli_epi32(b, 31));
    // the binade of mag, not a: where a is the next power of 2, no mid lies in [mag, a)
    __m256i idx = _mm256_subs_epu16(_mm256_srli_epi32(mag, 23), _mm256_set1_epi32(Q4_EXP_LOW));
    __m256i s = _mm256_add_epi32(_mm256_permutevar8x32_epi32(B->neg_below, idx),
                                 _mm256_cmpgt_epi32(a, _mm256_permutevar8x32_epi32(B->m1, idx)));
    s = _mm256_add_epi32(s, _mm256_cmpgt_epi32(a, _mm256_permutevar8x32_epi32(B->m2, idx)));
    return _mm256_sign_epi32(s, b);  // b = 0 (+0.0) has count 0
}

// 32 codes (4 x 8 int32 lanes, -128..127) -> 32 bytes; each 128-bit lane then holds runs of 4
// consecutive elements: 0-3, 8-11, 16-19, 24-27 in the first, 4-7, ... in the second.
AVX2 static inline __m256i bytes32(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
    return _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
}

// bytes32's codes (0..15) in pairs: even + 16 * odd, 16-bit lanes.
AVX2 static inline __m256i pairs4(__m256i b) {
    return _mm256_maddubs_epi16(_mm256_set1_epi16(0x1001), b);
}

// Packed bytes (16-bit lanes of pairs4's order, each <= 255) -> 16 bytes in element order: the
// two lanes' entries interleave.
AVX2 static inline void store16_pairs(uint8_t *dst, __m256i w) {
    __m256i p = _mm256_packus_epi16(w, w);
    _mm_storeu_si128((__m128i *)dst, _mm_unpacklo_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1)));
}

// 32 signed counts (-7..7) -> 16 bytes of codes center - count.
AVX2 static inline void store32_4(uint8_t *dst, __m256i c0, __m256i c1, __m256i c2, __m256i c3,
                                  __m256i center17) {
    store16_pairs(dst, _mm256_sub_epi16(center17, pairs4(bytes32(c0, c1, c2, c3))));
}

// The codes of block x (n elements, from a byte) and, in the same loop, the absmax bits of the
// next block (nx, nn elements): its loads from memory overlap this block's arithmetic.
AVX2 static uint32_t codes_q4(const float *x, int64_t n, float sc, uint8_t *codes, const hq8_avx2_q4 *T,
                              const float *nx, int64_t nn) {
    binades8 B;
    B.neg_below = _mm256_loadu_si256((const __m256i *)T->neg_below);
    B.m1 = _mm256_loadu_si256((const __m256i *)T->m1), B.m2 = _mm256_loadu_si256((const __m256i *)T->m2);
    const __m256i center17 = _mm256_set1_epi16((short)(17 * T->center));
    const __m256 vs = _mm256_set1_ps(sc);
    __m256i m = _mm256_setzero_si256();
    const int64_t both = (nn < n ? nn : n) & ~(int64_t)31;
    int64_t i = 0;
    __m256i qa[4], qn[4];
    for (int q = 0; q < 4 && n >= 32; q++) qa[q] = quot8(x + 8 * q, vs);
    // each quotient taken 32 elements ahead, as in hq8_avx2_encode8: the division heads the chain
    // of each count (Zen 5, 25.6M: 5.06 -> 4.37 ms, docs/performance.md)
    for (; i + 32 <= n; i += 32) {
        if (i < both) m = absmax32(m, nx + i);
        for (int q = 0; q < 4; q++) qn[q] = i + 64 <= n ? quot8(x + i + 32 + 8 * q, vs) : qa[q];
        store32_4(codes + i / 2, counts8_q4(qa[0], &B), counts8_q4(qa[1], &B), counts8_q4(qa[2], &B),
                  counts8_q4(qa[3], &B), center17);
        for (int q = 0; q < 4; q++) qa[q] = qn[q];
    }
    for (; i < n; i++) put4(codes, i, code_one_q4(x[i] / sc, T));
    return absmax_rest(m, nx + both, nn - both);
}

// Scales (absmax bits per block of `block` elements, the last one shorter) and 4-bit codes;
// `block` even (or one block), so every block starts on a byte.
AVX2 void hq8_avx2_encode4(const float *x, int64_t n, int64_t block, uint32_t *scale_bits, uint8_t *codes,
                           const hq8_avx2_q4 *T) {
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    uint32_t next = nb ? absmax_bits(x, n < block ? n : block) : 0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t s = b * block, len = block_len(b, block, n), nlen = b + 1 < nb ? block_len(b + 1, block, n) : 0;
        const float *xs = x + s, *nx = xs + len;
        uint8_t *cs = codes + s / 2;
        uint32_t sb = next;
        scale_bits[b] = sb;
        if (sb == 0 || sb > INF_BITS) {  // all zeros, or a NaN: every code is 0.0's
            memset(cs, T->center * 17, (size_t)(len / 2));
            if (len & 1) cs[len / 2] = (uint8_t)T->center;
            next = absmax_bits(nx, nlen);
        } else if (sb == INF_BITS) {
            for (int64_t i = 0; i < len; i++) put4(cs, i, code_one_q4(overflowed(xs[i]), T));
            next = absmax_bits(nx, nlen);
        } else {
            float sc;
            memcpy(&sc, &sb, 4);
            next = codes_q4(xs, len, sc, cs, T, nx, nlen);
        }
    }
}

// ---- threshold codes (sign + level index, as MXNet's 2-bit ones), with or without a residual ----

// The 4-bit levels by binade, where they lie in at most 8 binades with at most two in each (as
// halving levels do): count(levels <= |g|) = below[idx] + (A > l1[idx]) + (A > l2[idx]), A the
// bits of |g|, idx its binade from the lowest level's (e0), clamped to [0, 7]; l1, l2: the bits
// of the binade's levels minus one (INT32_MAX where it has fewer); built by native.py
// (level_binades). Three permutes and two compares in place of seven compares.
typedef struct {
    __m256i below, l1, l2, e0;
} level_binades;

// k = count(levels <= |g|) over the first nlev levels (a constant where it is inlined), by
// binade where LB is not NULL; code = k, or k + half when g < 0 < k, half for a non-finite g;
// the residual keeps g - the value sent (0 for a non-finite g): codec_x86.c's threshold16, 8
// lanes. vals: 0, then the levels; neg_vals: 0, then minus the levels; neg_codes: 0, then k + half.
AVX2 static inline __attribute__((always_inline)) __m256i threshold8(__m256 g, const __m256 lv[7], const int nlev,
                                                                      const level_binades *LB, __m256 vals,
                                                                      __m256 neg_vals, __m256i neg_codes,
                                                                      __m256i half, __m256 *rs) {
    __m256 a = _mm256_and_ps(g, _mm256_castsi256_ps(_mm256_set1_epi32((int)ABS_MASK)));
    __m256i k;
    if (LB) {
        __m256i A = _mm256_castps_si256(a);
        __m256i idx = _mm256_min_epu32(_mm256_subs_epu16(_mm256_srli_epi32(A, 23), LB->e0), _mm256_set1_epi32(7));
        k = _mm256_sub_epi32(_mm256_permutevar8x32_epi32(LB->below, idx),
                             _mm256_cmpgt_epi32(A, _mm256_permutevar8x32_epi32(LB->l1, idx)));
        k = _mm256_sub_epi32(k, _mm256_cmpgt_epi32(A, _mm256_permutevar8x32_epi32(LB->l2, idx)));
    } else {
        k = _mm256_setzero_si256();
        for (int q = 0; q < nlev; q++) k = _mm256_sub_epi32(k, _mm256_castps_si256(_mm256_cmp_ps(lv[q], a, _CMP_LE_OQ)));
    }
    // g < 0 (a negative zero too, whose k is 0: entry 0 of the negative tables is k = 0's)
    __m256 sent = _mm256_blendv_ps(_mm256_permutevar8x32_ps(vals, k), _mm256_permutevar8x32_ps(neg_vals, k), g);
    __m256i code = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(k),
                                                        _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(neg_codes, k)), g));
    __m256 finite = _mm256_cmp_ps(a, _mm256_set1_ps(__builtin_inff()), _CMP_LT_OQ);
    *rs = _mm256_and_ps(_mm256_sub_ps(g, sent), finite);
    return _mm256_blendv_epi8(half, code, _mm256_castps_si256(finite));
}

// 32 2-bit codes -> 8 bytes: bytes32's runs of 4 make a byte each (c0 + 4 c1 + 16 c2 + 64 c3),
// and the two lanes' bytes interleave.
AVX2 static inline void store32_2(uint8_t *dst, __m256i b) {
    __m256i q = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi16(0x0401), b), _mm256_set1_epi32(0x00100001));
    __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(q, q), q);
    _mm_storel_epi64((__m128i *)dst, _mm_unpacklo_epi8(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1)));
}

// Elements [0, 32) of x (and residual): codes into dst (32 * bits / 8 bytes), the residual updated.
AVX2 static inline __attribute__((always_inline)) void threshold32(
        const int bits, const float *x, float *residual, uint8_t *dst, const __m256 lv[7], const level_binades *LB,
        __m256 vals, __m256 neg_vals, __m256i neg_codes, __m256i half) {
    __m256i c[4];
    for (int q = 0; q < 4; q++) {
        __m256 g = _mm256_loadu_ps(x + 8 * q), rs;
        if (residual) g = _mm256_add_ps(g, _mm256_loadu_ps(residual + 8 * q));
        c[q] = threshold8(g, lv, (1 << (bits - 1)) - 1, LB, vals, neg_vals, neg_codes, half, &rs);
        if (residual) _mm256_storeu_ps(residual + 8 * q, rs);
    }
    __m256i b = bytes32(c[0], c[1], c[2], c[3]);
    if (bits == 4) store16_pairs(dst, pairs4(b));
    else store32_2(dst, b);
}

AVX2 static inline __attribute__((always_inline)) void threshold_k(
        const int bits, const float *x, int64_t n, float *residual, uint8_t *codes, const float *levels,
        const level_binades *LB) {
    const int nlev = (1 << (bits - 1)) - 1;
    __m256 lv[7];
    for (int q = 0; q < nlev; q++) lv[q] = _mm256_set1_ps(levels[q]);
    float v[8] = {0.0f}, nv[8] = {0.0f};
    int32_t nc[8] = {0};
    for (int q = 0; q < nlev; q++) v[q + 1] = levels[q], nv[q + 1] = -levels[q], nc[q + 1] = q + 1 + (1 << (bits - 1));
    const __m256 vals = _mm256_loadu_ps(v), neg_vals = _mm256_loadu_ps(nv);
    const __m256i neg_codes = _mm256_loadu_si256((const __m256i *)nc);
    const __m256i half = _mm256_set1_epi32(1 << (bits - 1));
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(x + i + PREFETCH_AHEAD), _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i + PREFETCH_AHEAD + 16), _MM_HINT_T0);
        if (residual) {
            _mm_prefetch((const char *)(residual + i + PREFETCH_AHEAD), _MM_HINT_T0);
            _mm_prefetch((const char *)(residual + i + PREFETCH_AHEAD + 16), _MM_HINT_T0);
        }
        threshold32(bits, x + i, residual ? residual + i : NULL, codes + i * bits / 8, lv, LB, vals, neg_vals, neg_codes, half);
    }
    if (i < n) {  // the tail through the same vectors: padded with zeros (code 0, the unused bits 0)
        const int64_t left = n - i;
        float xt[32] = {0.0f}, rt[32] = {0.0f};
        uint8_t ct[16];
        memcpy(xt, x + i, (size_t)left * 4);
        if (residual) memcpy(rt, residual + i, (size_t)left * 4);
        threshold32(bits, xt, residual ? rt : NULL, ct, lv, LB, vals, neg_vals, neg_codes, half);
        memcpy(codes + i * bits / 8, ct, (size_t)((left * bits + 7) / 8));
        if (residual) memcpy(residual + i, rt, (size_t)left * 4);
    }
}

// `bits`-bit threshold codes (4: 7 levels, 2: one) of g = x (+ residual, updated in place when
// residual is not NULL), 8 / bits to a byte, from a byte. levels: increasing, padded with +Inf to
// 7; binades: their level_binades (4 bits), or NULL where they do not fit one.
AVX2 void hq8_avx2_threshold(const float *x, int64_t n, float *residual, uint8_t *codes, const float *levels,
                             int bits, const int32_t *binades) {
    if (bits == 2) {
        threshold_k(2, x, n, residual, codes, levels, NULL);
    } else if (binades) {  // below[8], l1[8], l2[8], e0
        const level_binades L = {_mm256_loadu_si256((const __m256i *)binades),
                                 _mm256_loadu_si256((const __m256i *)(binades + 8)),
                                 _mm256_loadu_si256((const __m256i *)(binades + 16)), _mm256_set1_epi32(binades[24])};
        threshold_k(4, x, n, residual, codes, levels, &L);
    } else {
        threshold_k(4, x, n, residual, codes, levels, NULL);
    }
}

// ---- decoding: 8-bit codes of a symmetric table, 4- and 2-bit codes of any 16- or 4-entry table ----

// 8 8-bit codes from 8 bytes: eight scalar loads from the table (in L1), inserted into two
// halves as integers. On Zen 3, 0.28 ns per element in L2 against 0.50 for _mm256_i32gather_ps,
// whose micro-coded gather issues as many loads and costs more besides; on Zen 4, 25.6M decoded
// in 6.9 ms against 7.6 with float inserts (insertps), the sum of 2 ranks 11.0 against 12.3
// (docs/performance.md).
AVX2 static inline __m256 values8_8(const uint8_t *c, const float *table) {
    uint64_t w;
    memcpy(&w, c, 8);
    typedef int32_t bits32 __attribute__((may_alias));  // the float table read as its bits
    const bits32 *t = (const bits32 *)table;
    __m128i a = _mm_cvtsi32_si128(t[w & 255]), h = _mm_cvtsi32_si128(t[(w >> 32) & 255]);
    a = _mm_insert_epi32(a, t[(w >> 8) & 255], 1);
    h = _mm_insert_epi32(h, t[(w >> 40) & 255], 1);
    a = _mm_insert_epi32(a, t[(w >> 16) & 255], 2);
    h = _mm_insert_epi32(h, t[(w >> 48) & 255], 2);
    a = _mm_insert_epi32(a, t[(w >> 24) & 255], 3);
    h = _mm_insert_epi32(h, t[w >> 56], 3);
    return _mm256_castsi256_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), h, 1));
}

// 8 4-bit codes from 4 bytes (the first in the low nibble): two 8-entry permutes, bit 3 picks.
AVX2 static inline __m256 values8_4(const uint8_t *c, __m256 lo, __m256 hi) {
    int32_t raw;
    memcpy(&raw, c, 4);
    __m256i w = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(raw));
    __m256i k = _mm256_and_si256(_mm256_or_si256(w, _mm256_slli_epi64(w, 28)), _mm256_set1_epi64x(0x0000000F0000000FLL));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, k), _mm256_permutevar8x32_ps(hi, k),
                            _mm256_castsi256_ps(_mm256_slli_epi32(k, 28)));
}

// 8 2-bit codes from 2 bytes (the first in the lowest bits): one 8-entry permute.
AVX2 static inline __m256 values8_2(const uint8_t *c, __m256 lo) {
    uint16_t raw;
    memcpy(&raw, c, 2);
    __m256i w = _mm256_srlv_epi32(_mm256_set1_epi32(raw), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    return _mm256_permutevar8x32_ps(lo, w);  // the permute reads the low 3 bits: bit 2 picks a copy of the 4
}

static inline float value_one(int bits, const uint8_t *c, int64_t i, const float *table) {
    if (bits == 8) return table[c[i]];
    const int per = 8 / bits;
    return table[(c[i / per] >> (bits * (i % per))) & ((1 << bits) - 1)];
}

// Element i of sum_parts (scalar: a block's head or tail where a vector does not fit).
static inline float sum_one(int bits, const uint8_t *const *cr, const float *sr, int k, int64_t i,
                            const float *table, const float *o, int accumulate, float post) {
    float acc = 0.0f;
    for (int r = 0; r < k; r++) {
        float v = value_one(bits, cr[r], i, table) * sr[r];
        acc = r == 0 ? v : acc + v;
    }
    if (accumulate) acc = o[i] + acc;
    return post != 1.0f ? acc * post : acc;
}

// Lanes [a, b) of v to o + a .. o + b - 1 with streaming stores: a block's head and tail beside
// the loop's streamed vectors, so that no line is both streamed and stored to (on Zen 3 a
// decode of 25.6M q8 codes took 16.5 ms with ordinary stores there against 8.8 without a head).
AVX2 static inline void stream_lanes(float *o, __m256 v, int a, int b) {
    int32_t t[8];
    _mm256_storeu_si256((__m256i *)t, _mm256_castps_si256(v));
    for (int j = a; j < b; j++) _mm_stream_si32((int *)(o + j), t[j]);
}

// Elements i .. i + 7 of sum_parts (i a multiple of 8 / bits): v_0 + ... + v_{k-1} (+ o, times post).
AVX2 static inline __attribute__((always_inline)) __m256 sum8(
        const int bits, const uint8_t *const *cr, const float *sr, int k, int64_t i, const float *table, __m256 lo,
        __m256 hi, const float *o, int accumulate, int scaled, __m256 vp) {
    __m256 acc = _mm256_setzero_ps();
    for (int r = 0; r < k; r++) {
        const uint8_t *c = cr[r] + i * bits / 8;
        __m256 v = bits == 8 ? values8_8(c, table) : bits == 4 ? values8_4(c, lo, hi) : values8_2(c, lo);
        v = _mm256_mul_ps(v, _mm256_set1_ps(sr[r]));
        acc = r == 0 ? v : _mm256_add_ps(acc, v);
    }
    if (accumulate) acc = _mm256_add_ps(_mm256_loadu_ps(o + i), acc);
    return scaled ? _mm256_mul_ps(acc, vp) : acc;
}

// out = (v_0 + v_1 + ... + v_{k-1}) * post, v_r = table[code] * scale of part r, added in part
// (rank) order: the bits of decoding part 0, accumulating parts 1..k-1 and scaling by post
// (skipped when post is 1), in one pass. k = 1 is a decode, and with accumulate (k = 1 only)
// out += v_0. bits 8: table is float[256]; 4: float[16]; 2: float[4]; `block` a multiple of
// 8 / bits (or one block); scales NULL: scale 1 for every part. A decode (k = 1, not
// accumulating) into an output of `span` floats (this part and the other threads') of at least
// STREAM_MIN_BYTES, out aligned to a byte's codes, uses streaming stores from each block's first
// 32-byte boundary, as codec_x86.c's decodes: the stores then skip reading every line before
// writing it. Without accumulate, a block's tail is its last 8 elements, overlapping the loop's
// (the same values written twice), and a streamed block's head the lanes of its first 8.
AVX2 static inline __attribute__((always_inline)) void
sum_parts(const int bits, const uint8_t *const *codes, const float *const *scales, int k, int64_t n, int64_t block,
          const float *table, float *out, int accumulate, float post, int64_t span) {
    const __m256 vp = _mm256_set1_ps(post);
    const int scaled = post != 1.0f, per = 8 / bits;
    const int stream = k == 1 && !accumulate && span * 4 >= STREAM_MIN_BYTES &&
                       !((uintptr_t)out & (uintptr_t)(32 / bits - 1));  // each block's head whole bytes
    const __m256 lo = bits == 2 ? _mm256_broadcast_ps((const __m128 *)table) : _mm256_loadu_ps(table);
    const __m256 hi = bits == 4 ? _mm256_loadu_ps(table + 8) : lo;
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t s = b * block, len = block_len(b, block, n), cs = s * bits / 8;
        float *o = out + s;
        const uint8_t *cr[k];  // this block's codes and scales by rank, read once: stores to out may alias them
        float sr[k];
        for (int r = 0; r < k; r++) cr[r] = codes[r] + cs, sr[r] = scales ? scales[r][b] : 1.0f;
        if (len < 8) {
            for (int64_t i = 0; i < len; i++) o[i] = sum_one(bits, cr, sr, k, i, table, o, accumulate, post);
            continue;
        }
        int64_t i = stream ? (int64_t)((-(uintptr_t)o & 31) / 4) : 0;  // the head, before a 32-byte boundary
        if (i) stream_lanes(o, sum8(bits, cr, sr, k, 0, table, lo, hi, o, 0, scaled, vp), 0, (int)i);
        for (; i + 8 <= len; i += 8) {
            __m256 v = sum8(bits, cr, sr, k, i, table, lo, hi, o, accumulate, scaled, vp);
            if (stream) _mm256_stream_ps(o + i, v);
            else _mm256_storeu_ps(o + i, v);
        }
        if (i < len && !accumulate && (len - 8) % per == 0) {  // the tail: the block's last 8, overlapping
            __m256 v = sum8(bits, cr, sr, k, len - 8, table, lo, hi, o, 0, scaled, vp);
            if (stream) stream_lanes(o + len - 8, v, (int)(i - (len - 8)), 8);
            else _mm256_storeu_ps(o + len - 8, v);
        } else {
            for (; i < len; i++) o[i] = sum_one(bits, cr, sr, k, i, table, o, accumulate, post);
        }
    }
    if (stream) _mm_sfence();  // the streamed stores are ordered before whatever reads out next
}

// sum_parts with the width and, for one and two parts (a decode; the sum of 2 ranks), the part
// count constants, so that each gets its own loop: 25.6M q8 codes decoded in 11.9 ms with k a
// variable, 8.3 with k = 1 (Zen 3).
AVX2 static inline __attribute__((always_inline)) void sum_k(
        const int bits, const uint8_t *const *codes, const float *const *scales, int k, int64_t n, int64_t block,
        const float *table, float *out, int accumulate, float post, int64_t span) {
    if (k == 1) sum_parts(bits, codes, scales, 1, n, block, table, out, accumulate, post, span);
    else if (k == 2) sum_parts(bits, codes, scales, 2, n, block, table, out, accumulate, post, span);
    else sum_parts(bits, codes, scales, k, n, block, table, out, accumulate, post, span);
}

AVX2 void hq8_avx2_sum(int bits, const uint8_t *const *codes, const float *const *scales, int k, int64_t n,
                       int64_t block, const float *table, float *out, int accumulate, float post, int64_t span) {
    if (bits == 8) sum_k(8, codes, scales, k, n, block, table, out, accumulate, post, span);
    else if (bits == 4) sum_k(4, codes, scales, k, n, block, table, out, accumulate, post, span);
    else sum_k(2, codes, scales, k, n, block, table, out, accumulate, post, span);
}
