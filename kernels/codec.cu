// horovod_q8 quantize / dequantize kernels, compiled by CuPy (RawModule, NVRTC) and, unchanged,
// by the host build (kernels/cuda_host.h) that runs them on the CPU in CI.
// Byte-for-byte the same as horovod_q8/formats/reference.py; see docs/formats.md.
//
// CuPy compiles every RawModule with -ftz=true, which flushes float32 subnormal inputs and results
// of every float32 instruction (arithmetic and compares) to zero. So no float32 arithmetic or
// compare here sees a value that may be subnormal: values are widened to double exactly (bits, not
// a float32 conversion), computed in double (never flushed; a single float32 op computed in double
// and rounded once gives the float32 result, as 53 >= 2 * 24 + 2), and narrowed back with an
// integer rounding below 2^-126. The explicit __d*_rn intrinsics keep the compiler from fusing
// multiply-adds.

#define ABS_MASK 0x7fffffffu
#define EXP_MASK 0x7f800000u
#define INF_BITS 0x7f800000u
#define NAN_BITS 0x7fc00000u
#define MAX_CODES 256

extern "C" {

// x as a double, exactly, also when x is subnormal (a float32 conversion would flush it).
__device__ __forceinline__ double widen(float x) {
    unsigned int b = __float_as_uint(x);
    if ((b & EXP_MASK) != 0u) return (double)x;
    double m = __dmul_rn((double)(int)(b & 0x7fffffu), __longlong_as_double(0x36a0000000000000LL));  // 2^-149
    return (b >> 31) ? -m : m;
}

// d rounded to the nearest float32 (ties to even), also when the result is subnormal.
__device__ __forceinline__ float narrow(double d) {
    double a = fabs(d);
    if (!(a < __longlong_as_double(0x3810000000000000LL))) return __double2float_rn(d);  // >= 2^-126, Inf, NaN
    unsigned int m = (unsigned int)__double2ll_rn(__dmul_rn(a, __longlong_as_double(0x4940000000000000LL)));  // * 2^149
    return __uint_as_float((__double_as_longlong(d) < 0 ? 0x80000000u : 0u) | m);
}

__device__ __forceinline__ float uniform01(unsigned int seed, unsigned long long i) {
    unsigned int h = (unsigned int)i + seed * 0x9E3779B9u;
    h ^= h >> 16; h *= 0x7FEB352Du;
    h ^= h >> 15; h *= 0x846CA68Bu;
    h ^= h >> 16;
    return (float)(h >> 8) * 5.9604644775390625e-8f;  // 2**-24; operands and result normal or 0
}

// Absmax of each block as float32 bits: NaN bits if the block holds a NaN, else +Inf bits if
// it holds ±Inf (an overflowed sum). grid.x = n_blocks * segs_per_block; scale_bits zeroed first.
__global__ void block_absmax_bits(const float* __restrict__ x, long long n, long long block,
                                  long long seg, long long segs_per_block,
                                  unsigned int* __restrict__ scale_bits) {
    __shared__ unsigned int warp_max[32];
    long long b = blockIdx.x / segs_per_block;
    long long start = b * block + (blockIdx.x % segs_per_block) * seg;
    long long end = min(min(start + seg, (b + 1) * block), n);
    unsigned int m = 0;
    for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
        unsigned int v = __float_as_uint(x[i]) & ABS_MASK;
        if (v > INF_BITS) v = NAN_BITS;  // one canonical NaN; NAN_BITS > INF_BITS, so NaN wins the max
        m = max(m, v);
    }
    for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_down_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < (blockDim.x + 31) / 32 ? warp_max[threadIdx.x] : 0u;
        for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_down_sync(0xffffffffu, m, off));
        if (threadIdx.x == 0 && m > 0) atomicMax(&scale_bits[b], m);
    }
}

// v = x / scale; for a block whose scale is +Inf: ±1 for ±Inf, 0 for every finite x; 0 for a
// zero or NaN scale.
__device__ __forceinline__ float scaled_value(float xj, float s) {
    unsigned int sb = __float_as_uint(s), xb = __float_as_uint(xj);
    if (sb != 0u && sb < INF_BITS) return narrow(__ddiv_rn(widen(xj), widen(s)));
    if (sb == INF_BITS && (xb & ABS_MASK) == INF_BITS) return __uint_as_float((xb & 0x80000000u) | 0x3f800000u);
    return 0.0f;
}

// One thread per output byte. Nearest: code = count(mids < x/scale). Stochastic: between
// the neighbouring values, up with probability (v - lo) / (hi - lo).
__global__ void encode_codebook(const float* __restrict__ x, long long n, long long block,
                                const float* __restrict__ scales, unsigned char* __restrict__ codes,
                                const float* __restrict__ mids, const float* __restrict__ values,
                                int size, int bits, int stochastic, unsigned int seed) {
    __shared__ double s_mids[MAX_CODES], s_vals[MAX_CODES];
    const int L = 1 << bits;
    for (int t = threadIdx.x; t < L; t += blockDim.x) { s_mids[t] = widen(mids[t]); s_vals[t] = widen(values[t]); }
    __syncthreads();
    const int per = 8 / bits;
    const long long nbytes = (n + per - 1) / per;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < nbytes;
         k += (long long)gridDim.x * blockDim.x) {
        unsigned int acc = 0;
        for (int q = 0; q < per; ++q) {
            long long j = k * per + q;
            if (j >= n) break;
            const double v = widen(scaled_value(x[j], scales[j / block]));
            int code = 0;
            if (!stochastic) {
                for (int step = L / 2; step > 0; step >>= 1)
                    if (s_mids[code + step - 1] < v) code += step;
            } else {
                int c = 0;  // count(values <= v)
                for (int step = L / 2; step > 0; step >>= 1)
                    if (s_vals[c + step - 1] <= v) c += step;
                if (s_vals[L - 1] <= v) c = L;
                int lo = min(max(c - 1, 0), size - 1);
                code = lo;
                if (lo < size - 1 && s_vals[lo] != v) {
                    double num = widen(narrow(__dsub_rn(v, s_vals[lo])));
                    double den = widen(narrow(__dsub_rn(s_vals[lo + 1], s_vals[lo])));
                    if (widen(uniform01(seed, (unsigned long long)j)) < widen(narrow(__ddiv_rn(num, den)))) code = lo + 1;
                }
            }
            acc |= (unsigned int)code << (q * bits);
        }
        codes[k] = (unsigned char)acc;
    }
}

// Threshold formats (twobit, q4_threshold): g = x + residual; k = count(levels <= |g|);
// code = k, plus the sign bit when g < 0 and k > 0; a non-finite g gives the sign bit alone.
__global__ void encode_threshold(const float* __restrict__ x, long long n, float* __restrict__ residual,
                                 int use_residual, unsigned char* __restrict__ codes,
                                 const float* __restrict__ levels, int n_levels, int bits) {
    const int per = 8 / bits, half = 1 << (bits - 1);
    const long long nbytes = (n + per - 1) / per;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < nbytes;
         k += (long long)gridDim.x * blockDim.x) {
        unsigned int acc = 0;
        for (int q = 0; q < per; ++q) {
            long long j = k * per + q;
            if (j >= n) break;
            const double g = widen(use_residual ? narrow(__dadd_rn(widen(x[j]), widen(residual[j]))) : x[j]);
            int code;
            if (!(fabs(g) <= __longlong_as_double(0x47efffffe0000000LL))) {  // not finite (max float32)
                code = half;
                if (use_residual) residual[j] = 0.0f;
            } else {
                int m = 0;
                while (m < n_levels && widen(levels[m]) <= fabs(g)) ++m;
                double val = m > 0 ? widen(levels[m - 1]) : 0.0;
                bool neg = g < 0.0 && m > 0;
                code = neg ? m + half : m;
                if (use_residual) residual[j] = narrow(neg ? __dadd_rn(g, val) : __dsub_rn(g, val));
            }
            acc |= (unsigned int)code << (q * bits);
        }
        codes[k] = (unsigned char)acc;
    }
}

// out = table[code] * scale (then times factor), or out = (out + that) * factor when accumulate.
// factor 1 is exact: it is the identity. One thread per input byte.
__global__ void decode(const unsigned char* __restrict__ codes, long long n, long long block,
                       const float* __restrict__ scales, int has_scales,
                       const float* __restrict__ table, int bits, float* __restrict__ out,
                       int accumulate, float factor) {
    __shared__ double s_table[MAX_CODES];
    const int L = 1 << bits;
    for (int t = threadIdx.x; t < L; t += blockDim.x) s_table[t] = widen(table[t]);
    __syncthreads();
    const int per = 8 / bits;
    const unsigned int mask = (1u << bits) - 1u;
    const long long nbytes = (n + per - 1) / per;
    const double f = widen(factor);
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < nbytes;
         k += (long long)gridDim.x * blockDim.x) {
        unsigned int byte = codes[k];
        for (int q = 0; q < per; ++q) {
            long long j = k * per + q;
            if (j >= n) break;
            double t = s_table[(byte >> (q * bits)) & mask];
            float val = has_scales ? narrow(__dmul_rn(t, widen(scales[j / block]))) : narrow(t);
            if (accumulate) val = narrow(__dadd_rn(widen(out[j]), widen(val)));
            out[j] = f == 1.0 ? val : narrow(__dmul_rn(widen(val), f));
        }
    }
}

}  // extern "C"
