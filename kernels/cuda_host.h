// The host build of kernels/codec.cu: the same file, unchanged, compiled by the system C++ compiler
// and run on the CPU (horovod_q8/backends/cuda_host.py builds and drives it; docs/gpu.md).
//
// A block's threads are fibers on one OS thread. Between two synchronisation points each fiber
// runs alone, in an order drawn at random for every block and every round, so code that depends
// on an ordering a barrier does not give fails. __syncthreads is a real barrier (every thread of
// the block, none exited); warp shuffles exchange values among the lanes their mask names, all
// of which must be present (no partial warps); __shared__ storage is poisoned before every block;
// float32 arithmetic runs with the x86 DAZ and FTZ modes on, as CuPy's -ftz=true does on a GPU.
// Launch shapes are checked against CUDA's limits. x86-64 only (the fiber switch and MXCSR).
#pragma once

#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <xmmintrin.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// NVRTC has no host math headers: what they define as macros is undefined there, so here too.
#undef INFINITY
#undef NAN
#undef HUGE_VAL
#undef HUGE_VALF

#if !defined(__x86_64__)
#error "the CUDA host build runs on x86-64 only"
#endif

struct dim3 {
    unsigned int x, y, z;
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static __attribute__((section("hq8_shared"), used, aligned(16)))

extern "C" __attribute__((visibility("hidden"))) char __start_hq8_shared[], __stop_hq8_shared[];
// The section exists even for kernels without __shared__ storage.
__attribute__((section("hq8_shared"), used)) static char hq8_shared_anchor[16];

namespace hq8host {

enum class State { ready, barrier, shuffle, done };

struct Fiber {
    void* sp = nullptr;
    State state = State::ready;
    dim3 tid{0, 0, 0};
    unsigned int linear = 0;
    unsigned long long value = 0, result = 0;  // a shuffle's operand and result, as bits
    unsigned int mask = 0;
    int delta = 0, width = 32;
};

struct Grid {
    dim3 grid{1, 1, 1}, block{1, 1, 1}, bidx{0, 0, 0};
    std::vector<Fiber> fibers;
    std::vector<std::vector<char>> stacks;
    Fiber* cur = nullptr;
    void* sched_sp = nullptr;
    void (*body)(void*) = nullptr;
    void* ctx = nullptr;
    std::mt19937_64 rng;
    std::string error;  // set by a fiber that failed; the scheduler raises it
};

static Grid G;
static const size_t kStack = 64 * 1024;
static const unsigned int kMaxShared = 48 * 1024;

extern "C" void hq8_fiber_switch(void** save_sp, void* load_sp);
// Saves the callee-saved registers on the current stack, stores its pointer in *save_sp, and
// resumes the stack load_sp (a fiber's, or the scheduler's).
asm(R"(
    .text
    .p2align 4
    .hidden hq8_fiber_switch
    .type hq8_fiber_switch,@function
hq8_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size hq8_fiber_switch, .-hq8_fiber_switch
)");

inline void yield_to_scheduler() {
    asm volatile("" ::: "memory");
    hq8_fiber_switch(&G.cur->sp, G.sched_sp);
    asm volatile("" ::: "memory");
}

// From inside a fiber: no exception may unwind a fiber's stack, so the scheduler raises it.
[[noreturn]] inline void fail(const std::string& msg) {
    G.error = msg;
    G.cur->state = State::done;
    yield_to_scheduler();
    __builtin_trap();
}

[[noreturn]] inline void fiber_main() {
    G.body(G.ctx);
    G.cur->state = State::done;
    yield_to_scheduler();
    __builtin_trap();  // a finished fiber is never resumed
}

inline void start_fiber(size_t i) {
    char* top = G.stacks[i].data() + G.stacks[i].size();
    uintptr_t t = reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15);
    void** slot = reinterpret_cast<void**>(t - 16);
    slot[0] = reinterpret_cast<void*>(&fiber_main);  // hq8_fiber_switch's `ret` enters here
    slot[1] = nullptr;
    void** sp = slot - 6;  // six callee-saved registers, popped as zeros
    for (int r = 0; r < 6; ++r) sp[r] = nullptr;
    G.fibers[i].sp = sp;
}

inline void resume(Fiber& f) {
    G.cur = &f;
    asm volatile("" ::: "memory");
    hq8_fiber_switch(&G.sched_sp, f.sp);
    asm volatile("" ::: "memory");
}

inline std::string where() {
    return "block (" + std::to_string(G.bidx.x) + "," + std::to_string(G.bidx.y) + "," +
           std::to_string(G.bidx.z) + ")";
}

// Lanes of warp `w` waiting at a shuffle: exchange where every lane of a mask has arrived.
inline bool resolve_warp(size_t w, size_t n_threads) {
    size_t first = w * 32, last = std::min(first + 32, n_threads);
    bool progress = false;
    for (size_t l = first; l < last; ++l) {
        Fiber& f = G.fibers[l];
        if (f.state != State::shuffle) continue;
        unsigned int lane = unsigned(l - first), mask = f.mask;
        if (!(mask >> lane & 1u))
            throw std::runtime_error(where() + ": thread " + std::to_string(l) +
                                     " calls a shuffle whose mask does not name its own lane");
        for (unsigned int k = 0; k < 32; ++k) {
            if (!(mask >> k & 1u)) continue;
            if (first + k >= last)
                throw std::runtime_error(where() + ": shuffle mask names lane " + std::to_string(k) +
                                         " of a partial warp (" + std::to_string(last - first) +
                                         " lanes)");
            Fiber& o = G.fibers[first + k];
            if (o.state == State::done || o.state == State::barrier)
                throw std::runtime_error(where() + ": shuffle mask names lane " + std::to_string(k) +
                                         ", which " +
                                         (o.state == State::done ? "has exited" : "waits at __syncthreads"));
            if (o.state != State::shuffle) return progress;
            if (o.mask != mask || o.width != f.width)
                throw std::runtime_error(where() + ": lanes of one warp shuffle with different masks or widths");
        }
        for (unsigned int k = 0; k < 32; ++k) {
            if (!(mask >> k & 1u)) continue;
            Fiber& o = G.fibers[first + k];
            int width = o.width;
            unsigned int src = k + unsigned(o.delta);
            if ((k % unsigned(width)) + unsigned(o.delta) >= unsigned(width)) {
                o.result = o.value;  // CUDA: a source beyond the segment gives the lane's own value
            } else {
                if (!(mask >> src & 1u))
                    throw std::runtime_error(where() + ": lane " + std::to_string(k) +
                                             " reads lane " + std::to_string(src) + ", outside the mask");
                o.result = G.fibers[first + src].value;
            }
        }
        for (unsigned int k = 0; k < 32; ++k)
            if (mask >> k & 1u) G.fibers[first + k].state = State::ready;
        progress = true;
    }
    return progress;
}

inline void run_block(size_t n_threads) {
    memset(__start_hq8_shared, 0xff, size_t(__stop_hq8_shared - __start_hq8_shared));
    for (size_t i = 0; i < n_threads; ++i) {
        Fiber& f = G.fibers[i];
        f.state = State::ready;
        f.linear = unsigned(i);
        f.tid = dim3{unsigned(i % G.block.x), unsigned(i / G.block.x % G.block.y),
                     unsigned(i / (size_t(G.block.x) * G.block.y))};
        start_fiber(i);
    }
    std::vector<size_t> order;
    for (;;) {
        order.clear();
        for (size_t i = 0; i < n_threads; ++i)
            if (G.fibers[i].state == State::ready) order.push_back(i);
        std::shuffle(order.begin(), order.end(), G.rng);
        for (size_t i : order) {
            resume(G.fibers[i]);
            if (!G.error.empty()) throw std::runtime_error(where() + ": thread " + std::to_string(i) + ": " + G.error);
        }
        size_t done = 0, barrier = 0, shuffle = 0;
        for (size_t i = 0; i < n_threads; ++i) {
            State s = G.fibers[i].state;
            done += s == State::done;
            barrier += s == State::barrier;
            shuffle += s == State::shuffle;
        }
        if (done == n_threads) return;
        bool progress = false;
        for (size_t w = 0; shuffle && w * 32 < n_threads; ++w) progress |= resolve_warp(w, n_threads);
        if (progress) continue;
        if (barrier && barrier + done == n_threads && !shuffle) {
            if (done)
                throw std::runtime_error(where() + ": __syncthreads reached by " + std::to_string(barrier) +
                                         " threads while " + std::to_string(done) + " have exited");
            for (size_t i = 0; i < n_threads; ++i) G.fibers[i].state = State::ready;
            continue;
        }
        throw std::runtime_error(where() + ": deadlock: " + std::to_string(barrier) + " threads at __syncthreads, " +
                                 std::to_string(shuffle) + " at a shuffle, " + std::to_string(done) + " exited");
    }
}

inline void run_grid(dim3 grid, dim3 block) {
    size_t n_threads = size_t(block.x) * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
        throw std::invalid_argument("launch: a grid or block dimension is 0");
    if (n_threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
        throw std::invalid_argument("launch: more than 1024 threads per block, or a block dimension over CUDA's limit");
    if (grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u)
        throw std::invalid_argument("launch: grid dimension over CUDA's limit (x < 2^31, y and z <= 65535)");
    if (size_t(__stop_hq8_shared - __start_hq8_shared) > kMaxShared)
        throw std::invalid_argument("launch: static __shared__ storage over 48 KB");
    G.grid = grid;
    G.block = block;
    if (G.fibers.size() < n_threads) {
        G.fibers.resize(n_threads);
        while (G.stacks.size() < n_threads) G.stacks.emplace_back(kStack);
    }
    for (unsigned int z = 0; z < grid.z; ++z)
        for (unsigned int y = 0; y < grid.y; ++y)
            for (unsigned int x = 0; x < grid.x; ++x) {
                G.bidx = dim3{x, y, z};
                run_block(n_threads);
            }
}

template <class... A>
struct Call {
    void (*fn)(A...);
    void** args;
    template <size_t... I>
    void invoke(std::index_sequence<I...>) {
        fn(*static_cast<typename std::remove_reference<A>::type*>(args[I])...);
    }
    static void body(void* self) { static_cast<Call*>(self)->invoke(std::index_sequence_for<A...>{}); }
};

// One letter per parameter: p pointer, i int, I unsigned int, q long long, Q unsigned long long,
// f float, d double. The Python side checks every argument against it before a launch.
template <class T>
char type_code() {
    if (std::is_pointer<T>::value) return 'p';
    if (std::is_same<T, int>::value) return 'i';
    if (std::is_same<T, unsigned int>::value) return 'I';
    if (std::is_same<T, long long>::value) return 'q';
    if (std::is_same<T, unsigned long long>::value) return 'Q';
    if (std::is_same<T, float>::value) return 'f';
    if (std::is_same<T, double>::value) return 'd';
    return '?';
}

template <class... A>
const char* signature(void (*)(A...)) {
    static const std::string s{type_code<A>()..., '\0'};
    return s.c_str();
}

template <class... A>
int launch(void (*fn)(A...), const unsigned int* grid, const unsigned int* block, void** args,
           unsigned long long seed, char* err, size_t err_len) {
    Call<A...> call{fn, args};
    G.body = &Call<A...>::body;
    G.ctx = &call;
    G.rng.seed(seed);
    G.error.clear();
    unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);  // FTZ | DAZ: CuPy compiles with -ftz=true
    int rc = 0;
    try {
        run_grid(dim3{grid[0], grid[1], grid[2]}, dim3{block[0], block[1], block[2]});
    } catch (const std::exception& e) {
        snprintf(err, err_len, "%s", e.what());
        rc = 1;
    }
    _mm_setcsr(csr);
    return rc;
}

inline Fiber& self() { return *G.cur; }

}  // namespace hq8host

#define threadIdx (::hq8host::self().tid)
#define blockIdx (::hq8host::G.bidx)
#define blockDim (::hq8host::G.block)
#define gridDim (::hq8host::G.grid)

inline void __syncthreads() {
    ::hq8host::self().state = ::hq8host::State::barrier;
    ::hq8host::yield_to_scheduler();
}

template <class T>
T hq8_shuffle(unsigned int mask, T v, int delta, int width) {
    static_assert(sizeof(T) <= 8, "shuffle of a type over 8 bytes");
    ::hq8host::Fiber& f = ::hq8host::self();
    if (width <= 0 || width > 32 || (width & (width - 1)))
        ::hq8host::fail("shuffle width must be a power of 2 up to 32");
    f.value = 0;
    memcpy(&f.value, &v, sizeof(T));
    f.mask = mask;
    f.delta = delta;
    f.width = width;
    f.state = ::hq8host::State::shuffle;
    ::hq8host::yield_to_scheduler();
    T r;
    memcpy(&r, &f.result, sizeof(T));
    return r;
}

template <class T>
T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
    return hq8_shuffle(mask, v, int(delta), width);
}

inline unsigned int atomicMax(unsigned int* p, unsigned int v) {
    unsigned int old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }
inline float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }
inline int __float_as_int(float x) { int u; memcpy(&u, &x, 4); return u; }
inline long long __double_as_longlong(double x) { long long u; memcpy(&u, &x, 8); return u; }
inline double __longlong_as_double(long long u) { double x; memcpy(&x, &u, 8); return x; }
// volatile: each is one IEEE operation in the current rounding mode, never folded or fused
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
inline double __dsub_rn(double a, double b) { volatile double r = a - b; return r; }
inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
inline double __ddiv_rn(double a, double b) { volatile double r = a / b; return r; }
inline float __double2float_rn(double d) { volatile float r = (float)d; return r; }
inline long long __double2ll_rn(double d) { return llrint(d); }

// One exported launcher and signature per kernel: the generated translation unit lists them.
#define HQ8_HOST_KERNEL(name)                                                                          \
    extern "C" int hq8_launch_##name(const unsigned int* g, const unsigned int* b, void** args,       \
                                     unsigned long long seed, char* err, size_t err_len) {             \
        return ::hq8host::launch(name, g, b, args, seed, err, err_len);                               \
    }                                                                                                  \
    extern "C" const char* hq8_signature_##name() { return ::hq8host::signature(name); }

extern "C" unsigned int hq8_host_set_ftz(int on) {
    unsigned int csr = _mm_getcsr();
    _mm_setcsr(on ? (csr | 0x8040u) : (csr & ~0x8040u));
    return csr;
}
