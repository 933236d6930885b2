// horovod_q8 8-bit codebook encode / decode and the sum of k ranks' codes for x86-64 CPUs with
// AVX2 (Zen 2/3, Haswell and later), called through ctypes by horovod_q8/backends/native.py
// where codec_x86.c's AVX-512 kernels do not run. Byte-for-byte the same as
// horovod_q8/formats/reference.py (docs/formats.md): code = count(mids < x / scale).
//
// The search is codec_x86.c's, 8 elements per instruction: the segment of evenly spaced values
// from compares with each segment's lowest mid (at most 7 segments: lookups by segment are one
// 8-entry permute), an affine estimate of the count at most one under, and one exact compare
// with the next midpoint (a gather from a table in L1). Built with -ffp-contract=off.
#include <stdint.h>
#include <string.h>
#include <immintrin.h>

#define ABS_MASK 0x7FFFFFFFu
#define INF_BITS 0x7F800000u
#define NAN_BITS 0x7FC00000u
#define AVX2 __attribute__((target("avx2")))
#define PREFETCH_AHEAD 4096  // floats the absmax pass prefetches ahead of its loads (16 KB), as codec_x86.c

int hq8_avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

// The tables of a symmetric 8-bit codebook (codes center - 127 .. center + 127) for the search.
typedef struct {
    int32_t mid_at[256];  // [center + j]: bits of the j-th positive mid, ascending, +Inf bits past the last
    int32_t lows[8];      // bits of each segment's lowest mid, ascending, +Inf bits past the last
    int32_t bottom[8];    // by segment d: center + count of mids up to the segment's lowest
    int32_t top[8];       // by d: center + count of mids below the segment's highest value
    float c1[8], c0[8];   // by d: u = a * c1 - c0 estimates center + count(mids < a)
    float eps;            // the largest |u - (center + j + 0.5)| at the j-th mid of any segment
    int32_t center;
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

static uint8_t code_one(float v, const hq8_avx2_symmetric *T) {
    int32_t b;
    memcpy(&b, &v, 4);
    int32_t neg = b < 0, a = (b & (int32_t)ABS_MASK) + neg, cnt = 0;
    for (int j = 0; j < 128; j++) cnt += T->mid_at[T->center + j] < a;
    return (uint8_t)(neg ? T->center - cnt : T->center + cnt);
}

// 8 codes (int32 lanes, 0..255) -> 8 bytes.
AVX2 static inline void store8(uint8_t *dst, __m256i c) {
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i p = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(c, pick), _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64((__m128i *)dst, _mm256_castsi256_si128(p));
}

// The codes of x / s for 8 elements (codec_x86.c's codes16 has the argument for the estimate).
// The mid where the count steps from j to j + 1 has u within eps of j + 0.5 (eps is 0 for
// every table here), u rises with a, and floor(u) is never above the count and at most one
// under: so where the fraction of u is further than eps from 0.5 the count is floor(u) + (the
// fraction > 0.5), clamped to the segment; only a vector with a lane within eps of 0.5 pays
// the exact comparison (a gather, slow on these CPUs). b: the bits of x / s (quot8).
AVX2 static inline __attribute__((always_inline)) __m256i codes8(
        __m256i b, const hq8_avx2_symmetric *T, const __m256i lows[7], __m256i bottom, __m256i top, __m256 c1,
        __m256 c0, __m256 eps, __m256i twice_center) {
    __m256i neg = _mm256_srai_epi32(b, 31);  // -1 where the sign bit is set
    __m256i a = _mm256_sub_epi32(_mm256_and_si256(b, _mm256_set1_epi32((int)ABS_MASK)), neg);
    __m256i d = _mm256_setzero_si256();
    for (int q = 0; q < 7; q++) d = _mm256_sub_epi32(d, _mm256_cmpgt_epi32(a, lows[q]));
    __m256 u = _mm256_sub_ps(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_permutevar8x32_ps(c1, d)),
                             _mm256_permutevar8x32_ps(c0, d));
    __m256i f = _mm256_cvttps_epi32(u);  // u > 0: floor
    __m256 frac = _mm256_sub_ps(u, _mm256_cvtepi32_ps(f));
    __m256 off = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(frac, _mm256_set1_ps(0.5f)));
    __m256i dtop = _mm256_permutevar8x32_epi32(top, d), cnt;  // center + count
    if (_mm256_movemask_ps(_mm256_cmp_ps(off, eps, _CMP_LE_OQ))) {
        cnt = _mm256_min_epi32(f, dtop);
        cnt = _mm256_sub_epi32(cnt, _mm256_cmpgt_epi32(a, _mm256_i32gather_epi32(T->mid_at, cnt, 4)));
    } else {
        cnt = _mm256_sub_epi32(f, _mm256_castps_si256(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GT_OQ)));
        cnt = _mm256_min_epi32(_mm256_max_epi32(cnt, _mm256_permutevar8x32_epi32(bottom, d)), dtop);
    }
    return _mm256_blendv_epi8(cnt, _mm256_sub_epi32(twice_center, cnt), neg);
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
    __m256i lows[7];
    for (int q = 0; q < 7; q++) lows[q] = _mm256_set1_epi32(T->lows[q]);
    const __m256i top = _mm256_loadu_si256((const __m256i *)T->top);
    const __m256i bottom = _mm256_loadu_si256((const __m256i *)T->bottom);
    const __m256 c1 = _mm256_loadu_ps(T->c1), c0 = _mm256_loadu_ps(T->c0), eps = _mm256_set1_ps(T->eps);
    const __m256i twice_center = _mm256_set1_epi32(2 * T->center);
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t s = b * block, len = block_len(b, block, n);
        const float *xs = x + s;
        uint8_t *cs = codes + s;
        uint32_t sb = absmax_bits(xs, len);
        scale_bits[b] = sb;
        if (sb == 0 || sb > INF_BITS) {
            memset(cs, T->center, (size_t)len);  // all zeros, or a NaN: every code is 0.0's
            continue;
        }
        if (sb == INF_BITS) {  // +-Inf -> +-1, every finite element -> 0
            for (int64_t i = 0; i < len; i++)
                cs[i] = code_one(xs[i] == __builtin_inff() ? 1.0f : (xs[i] == -__builtin_inff() ? -1.0f : 0.0f), T);
            continue;
        }
        float sc;
        memcpy(&sc, &sb, 4);
        const __m256 vs = _mm256_set1_ps(sc);
        const int64_t full = len & ~(int64_t)7;
        __m256i q0 = full ? quot8(xs, vs) : _mm256_setzero_si256(), q1 = full > 8 ? quot8(xs + 8, vs) : q0, q2 = q1;
        int64_t i = 0;
        for (; i < full; i += 8) {
            if (i + 16 < full) q2 = quot8(xs + i + 16, vs);
            store8(cs + i, codes8(q0, T, lows, bottom, top, c1, c0, eps, twice_center));
            q0 = q1, q1 = q2;
        }
        for (; i < len; i++) cs[i] = code_one(xs[i] / sc, T);
    }
}

// ---- decoding: 8-bit codes of a symmetric table, 4-bit codes of any 16-entry table ----

AVX2 static inline __m256 values8_8(const uint8_t *c, const float *table) {
    return _mm256_i32gather_ps(table, _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)c)), 4);
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

static inline float value_one(int bits, const uint8_t *c, int64_t i, const float *table) {
    return bits == 8 ? table[c[i]] : table[(c[i >> 1] >> (4 * (i & 1))) & 15];
}

// out = (v_0 + v_1 + ... + v_{k-1}) * post, v_r = table[code] * scale of part r, added in part
// (rank) order: the bits of decoding part 0, accumulating parts 1..k-1 and scaling by post
// (skipped when post is 1), in one pass. k = 1 is a decode, and with accumulate (k = 1 only)
// out += v_0. bits 8: table is float[256]; 4: float[16], `block` even (or one block).
// scales NULL: scale 1 for every part.
AVX2 static inline __attribute__((always_inline)) void
sum_parts(const int bits, const uint8_t *const *codes, const float *const *scales, int k, int64_t n, int64_t block,
          const float *table, float *out, int accumulate, float post) {
    const __m256 vp = _mm256_set1_ps(post);
    const int scaled = post != 1.0f;
    const __m256 lo = _mm256_loadu_ps(table), hi = bits == 4 ? _mm256_loadu_ps(table + 8) : lo;
    int64_t nb = block > 0 ? (n + block - 1) / block : 0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t s = b * block, len = block_len(b, block, n), cs = bits == 8 ? s : s / 2;
        float *o = out + s;
        const uint8_t *cr[k];  // this block's codes and scales by rank, read once: stores to out may alias them
        float sr[k];
        for (int r = 0; r < k; r++) cr[r] = codes[r] + cs, sr[r] = scales ? scales[r][b] : 1.0f;
        int64_t i = 0;
        for (; i + 8 <= len; i += 8) {
            __m256 acc = _mm256_setzero_ps();
            for (int r = 0; r < k; r++) {
                const uint8_t *c = cr[r] + i * bits / 8;
                __m256 v = bits == 8 ? values8_8(c, table) : values8_4(c, lo, hi);
                v = _mm256_mul_ps(v, _mm256_set1_ps(sr[r]));
                acc = r == 0 ? v : _mm256_add_ps(acc, v);
            }
            if (accumulate) acc = _mm256_add_ps(_mm256_loadu_ps(o + i), acc);
            if (scaled) acc = _mm256_mul_ps(acc, vp);
            _mm256_storeu_ps(o + i, acc);
        }
        for (; i < len; i++) {
            float acc = 0.0f;
            for (int r = 0; r < k; r++) {
                float v = value_one(bits, cr[r], i, table) * sr[r];
                acc = r == 0 ? v : acc + v;
            }
            if (accumulate) acc = o[i] + acc;
            o[i] = scaled ? acc * post : acc;
        }
    }
}

AVX2 void hq8_avx2_sum(int bits, const uint8_t *const *codes, const float *const *scales, int k, int64_t n,
                       int64_t block, const float *table, float *out, int accumulate, float post) {
    if (bits == 8) sum_parts(8, codes, scales, k, n, block, table, out, accumulate, post);  // one loop each
    else sum_parts(4, codes, scales, k, n, block, table, out, accumulate, post);
}
