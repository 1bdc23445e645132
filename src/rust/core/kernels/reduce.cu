// Reductions of one vector of doubles on the GPU, one launch each:
//   tree_pairwise / tree_div2  the tree of src/reduce/tree.rs, bit for bit;
//   tree_small_*               the same tree for n <= 256 (one warp);
//   plain_naive / plain_kahan  per-thread sums merged in a fixed order;
//   exact_sum / exact_bins     the exact accumulator of src/reduce/superacc.rs.
// REDUCE_SINGLE = 1 rounds every input to binary32 and computes in float.
// Explicit _rn intrinsics keep the compiler from fusing a*0.5 + b*0.5 into
// an FMA, which would change the bits the CPU computes.

#ifndef REDUCE_SINGLE
#define REDUCE_SINGLE 0
#endif

#if REDUCE_SINGLE
typedef float real;
__device__ __forceinline__ real to_real(double v) { return __double2float_rn(v); }
__device__ __forceinline__ real add_rn(real a, real b) { return __fadd_rn(a, b); }
__device__ __forceinline__ real mul_rn(real a, real b) { return __fmul_rn(a, b); }
__device__ __forceinline__ real div_rn(real a, real b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ real count_real(long long n) { return __ll2float_rn(n); }
#else
typedef double real;
__device__ __forceinline__ real to_real(double v) { return v; }
__device__ __forceinline__ real add_rn(real a, real b) { return __dadd_rn(a, b); }
__device__ __forceinline__ real mul_rn(real a, real b) { return __dmul_rn(a, b); }
__device__ __forceinline__ real div_rn(real a, real b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ real count_real(long long n) { return __ll2double_rn(n); }
#endif

// What the output means (matches reduce::Kind on the host).
#define KIND_SUM 0
#define KIND_MEAN 1

// ---------------------------------------------------------------------------
// The pairwise / div2 tree.

// The tree's combine: a + b, or a/2 + b/2 (both commutative bit for bit, so
// a butterfly exchange computes each node in every lane of the pair).
template <int HALVE>
__device__ __forceinline__ real combine(real a, real b) {
    return HALVE ? add_rn(mul_rn(a, (real)0.5), mul_rn(b, (real)0.5)) : add_rn(a, b);
}

// Elements per warp step: 4 aligned 64-element subtrees, one double2 per
// lane each, loaded together so that 2 KB per warp are in flight.
#define STEP 256
#define STEP_LOG2 8

// The subtree over x[base .. base + 256) (zero beyond n), in every lane.
template <int HALVE>
__device__ __forceinline__ real step_value(const double* __restrict__ x, long long base, long long n) {
    const int lane = threadIdx.x & 31;
    double2 v[4];
    if (base + STEP <= n) {
#pragma unroll
        for (int c = 0; c < 4; ++c) v[c] = __ldcs(reinterpret_cast<const double2*>(x + base + 64 * c) + lane);
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const long long i = base + 64 * c + 2 * lane;
            v[c].x = i < n ? x[i] : 0.0;
            v[c].y = i + 1 < n ? x[i + 1] : 0.0;
        }
    }
    real s[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        real t = combine<HALVE>(to_real(v[c].x), to_real(v[c].y));
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) t = combine<HALVE>(t, __shfl_xor_sync(FULL_MASK, t, o));
        s[c] = t;
    }
    return combine<HALVE>(combine<HALVE>(s[0], s[1]), combine<HALVE>(s[2], s[3]));
}

// The subtree over the aligned tile x[base .. base + 2^tile_log2), by one
// warp: steps are merged like a binary counter whose level k waits in lane
// k's register, so no local memory is needed.
template <int HALVE>
__device__ real tile_value(const double* __restrict__ x, long long base, long long n, int tile_log2) {
    const int lane = threadIdx.x & 31;
    const unsigned steps = 1u << (tile_log2 - STEP_LOG2);
    real slot = (real)0;
    for (unsigned k = 0; k < steps; ++k) {
        const long long at = base + (long long)k * STEP;
        // Steps wholly in the padding are 0, but still enter the counter.
        real v = at < n ? step_value<HALVE>(x, at, n) : (real)0;
        int level = 0;
        for (unsigned c = k; c & 1u; c >>= 1) {
            v = combine<HALVE>(__shfl_sync(FULL_MASK, slot, level), v);
            ++level;
        }
        if (lane == level) slot = v;
    }
    return __shfl_sync(FULL_MASK, slot, tile_log2 - STEP_LOG2);
}

// Turns the tree's value into the requested sum or mean (src/reduce/cpu.rs).
template <int HALVE>
__device__ double tree_result(real v, long long n, double padded, double correction, int kind) {
    if (HALVE) return (double)mul_rn(v, kind == KIND_SUM ? (real)padded : (real)correction);
    return (double)(kind == KIND_SUM ? v : div_rn(v, count_real(n)));
}

// Largest number of leaves the last block reduces (in shared memory).
#define MAX_LEAVES 4096

// Block b reduces the aligned block tile of 2^(tile_log2 + block_levels)
// elements: warp w the w-th warp tile, then the warps' values by the tree.
// The last block to finish reduces the block values (padded with zeros to
// 2^leaves_log2 leaves) and writes the result.
template <int HALVE>
__device__ void tree_kernel(const double* __restrict__ x, long long n, int tile_log2, int block_levels, int leaves_log2,
                            real* __restrict__ leaves, unsigned* counter, double* out, double padded, double correction, int kind) {
    __shared__ real warp_values[8];
    __shared__ real last[MAX_LEAVES];
    __shared__ bool is_last;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long tile = ((long long)blockIdx.x << block_levels) + warp;
    const real v = tile_value<HALVE>(x, tile << tile_log2, n, tile_log2);
    if (lane == 0) warp_values[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int width = 1 << block_levels; width > 1; width >>= 1)
            for (int j = 0; j < width / 2; ++j) warp_values[j] = combine<HALVE>(warp_values[2 * j], warp_values[2 * j + 1]);
        leaves[blockIdx.x] = warp_values[0];
        __threadfence();
        is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;
    const int count = 1 << leaves_log2;
    for (int i = threadIdx.x; i < count; i += blockDim.x) last[i] = i < (int)gridDim.x ? __ldcg(leaves + i) : (real)0;
    __syncthreads();
    // Node j of level l sits at j * 2^l, so each level reads and writes
    // disjoint slots.
    for (int stride = 1; stride < count; stride <<= 1) {
        for (int i = 2 * stride * threadIdx.x; i < count; i += 2 * stride * blockDim.x)
            last[i] = combine<HALVE>(last[i], last[i + stride]);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[0] = tree_result<HALVE>(last[0], n, padded, correction, kind);
        *counter = 0;
    }
}

// The tree for n <= 256 (padded size 2^padded_log2), by one warp.
template <int HALVE>
__device__ void tree_small_kernel(const double* __restrict__ x, long long n, int padded_log2, double* out, double padded,
                                  double correction, int kind) {
    const int lane = threadIdx.x & 31;
    real v;
    if (padded_log2 == 0) {
        v = to_real(x[0]);
    } else {
        // 64-element chunks: one level in the lane, the rest by butterfly.
        const int chunks = padded_log2 > 6 ? 1 << (padded_log2 - 6) : 1;
        const int levels = (padded_log2 > 6 ? 6 : padded_log2) - 1;
        real c[4];
        for (int k = 0; k < chunks; ++k) {
            const long long i = 64 * k + 2 * lane;
            real t = combine<HALVE>(to_real(i < n ? x[i] : 0.0), to_real(i + 1 < n ? x[i + 1] : 0.0));
            for (int l = 0; l < levels; ++l) t = combine<HALVE>(t, __shfl_xor_sync(FULL_MASK, t, 1 << l));
            c[k] = t;
        }
        if (chunks == 1) v = c[0];
        else if (chunks == 2) v = combine<HALVE>(c[0], c[1]);
        else v = combine<HALVE>(combine<HALVE>(c[0], c[1]), combine<HALVE>(c[2], c[3]));
    }
    if (lane == 0) out[0] = tree_result<HALVE>(v, n, padded, correction, kind);
}

extern "C" __global__ void tree_pairwise(const double* __restrict__ x, long long n, int tile_log2, int block_levels, int leaves_log2,
                                         real* leaves, unsigned* counter, double* out, double padded, double correction, int kind) {
    tree_kernel<0>(x, n, tile_log2, block_levels, leaves_log2, leaves, counter, out, padded, correction, kind);
}

extern "C" __global__ void tree_div2(const double* __restrict__ x, long long n, int tile_log2, int block_levels, int leaves_log2,
                                     real* leaves, unsigned* counter, double* out, double padded, double correction, int kind) {
    tree_kernel<1>(x, n, tile_log2, block_levels, leaves_log2, leaves, counter, out, padded, correction, kind);
}

extern "C" __global__ void tree_small_pairwise(const double* __restrict__ x, long long n, int padded_log2, double* out, double padded,
                                               double correction, int kind) {
    tree_small_kernel<0>(x, n, padded_log2, out, padded, correction, kind);
}

extern "C" __global__ void tree_small_div2(const double* __restrict__ x, long long n, int padded_log2, double* out, double padded,
                                           double correction, int kind) {
    tree_small_kernel<1>(x, n, padded_log2, out, padded, correction, kind);
}

// ---------------------------------------------------------------------------
// Grid-stride traversal shared by the plain and exact sums: every thread
// visits its elements in a fixed order, 8 per round (4 double2 loads in
// flight), and the odd last element goes to thread 0.

template <typename F>
__device__ __forceinline__ void for_each_element(const double* __restrict__ x, long long n, F&& f) {
    const long long pairs = n >> 1;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const double2* x2 = reinterpret_cast<const double2*>(x);
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; p + 3 * stride < pairs; p += 4 * stride) {
        double2 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = __ldcs(x2 + p + k * stride);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            f(v[k].x);
            f(v[k].y);
        }
    }
    for (; p < pairs; p += stride) {
        const double2 v = __ldcs(x2 + p);
        f(v.x);
        f(v.y);
    }
    if ((n & 1) && blockIdx.x == 0 && threadIdx.x == 0) f(x[n - 1]);
}

// Is this block the last of the grid to finish? (After its results are
// written and fenced.)
__device__ bool last_block(unsigned* counter) {
    __shared__ bool is_last;
    // Every thread's global writes and atomics are visible before the ticket.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    return is_last;
}

// ---------------------------------------------------------------------------
// Plain and compensated sums. Not the CPU's order (see src/reduce/gpu.rs):
// each thread sums its elements, then lanes, warps and blocks are merged in
// a fixed order, so a given launch configuration is deterministic.

// A running sum with Neumaier's compensation (c stays 0 for naive sums).
struct Running {
    real s, c;
};

template <int KAHAN>
__device__ __forceinline__ void running_add(Running& a, real v) {
    const real t = add_rn(a.s, v);
    if (KAHAN) {
        const real err = fabs(a.s) >= fabs(v) ? add_rn(add_rn(a.s, -t), v) : add_rn(add_rn(v, -t), a.s);
        a.c = add_rn(a.c, err);
    }
    a.s = t;
}

template <int KAHAN>
__device__ __forceinline__ void running_merge(Running& a, Running b) {
    running_add<KAHAN>(a, b.s);
    a.c = add_rn(a.c, b.c);
}

template <int KAHAN>
__device__ Running block_running(Running r, Running* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        Running other = {__shfl_down_sync(FULL_MASK, r.s, o), __shfl_down_sync(FULL_MASK, r.c, o)};
        if ((lane & (2 * o - 1)) == 0) running_merge<KAHAN>(r, other);
    }
    if (lane == 0) scratch[warp] = r;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w) running_merge<KAHAN>(r, scratch[w]);
    return r;
}

template <int KAHAN>
__device__ void plain_kernel(const double* __restrict__ x, long long n, Running* partials, unsigned* counter, double* out, int kind) {
    __shared__ Running scratch[32];
    Running r = {(real)0, (real)0};
    for_each_element(x, n, [&](double v) { running_add<KAHAN>(r, to_real(v)); });
    r = block_running<KAHAN>(r, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = r;
    if (!last_block(counter)) return;
    // The last block merges the block results: contiguous runs per thread,
    // then the block merge above, so the order is fixed.
    Running t = {(real)0, (real)0};
    const int per = (gridDim.x + blockDim.x - 1) / blockDim.x;
    for (int i = threadIdx.x * per; i < (int)gridDim.x && i < (int)(threadIdx.x + 1) * per; ++i) {
        Running p = {__ldcg(&partials[i].s), __ldcg(&partials[i].c)};
        running_merge<KAHAN>(t, p);
    }
    __syncthreads();
    t = block_running<KAHAN>(t, scratch);
    if (threadIdx.x == 0) {
        // Once s is Inf or NaN the compensation is meaningless (as on the CPU).
        const real sum = isfinite(t.s) ? add_rn(t.s, t.c) : t.s;
        out[0] = (double)(kind == KIND_SUM ? sum : div_rn(sum, count_real(n)));
        *counter = 0;
    }
}

extern "C" __global__ void plain_naive(const double* __restrict__ x, long long n, Running* partials, unsigned* counter, double* out, int kind) {
    plain_kernel<0>(x, n, partials, counter, out, kind);
}

extern "C" __global__ void plain_kahan(const double* __restrict__ x, long long n, Running* partials, unsigned* counter, double* out, int kind) {
    plain_kernel<1>(x, n, partials, counter, out, kind);
}

// ---------------------------------------------------------------------------
// The exact sum. Each thread keeps a two-term expansion (e0, e1) updated by
// error-free TwoSum steps, so e0 + e1 + (what was flushed) is always the
// exact sum of its finite inputs; a nonzero remainder of the second step
// (rare: the thread's inputs then span more than ~100 bits) is added to the
// block's superaccumulator, which finally takes e0 and e1 too. The blocks'
// accumulators are added into one in global memory, which the last block
// hands to the host (bins) for the single correct rounding. Format: bin e
// (biased exponent) is a signed 128-bit integer of significands, as two
// 64-bit words (low, high) here, followed by one word of flags (as in
// superacc.rs, plus overflow).

#define SA_BINS 2047
#define FLAG_NAN 1u
#define FLAG_POS_INF 2u
#define FLAG_NEG_INF 4u
// A finite input made an expansion overflow: the host reruns exact_bins.
#define FLAG_OVERFLOW 8u

// Add a finite double exactly into 128-bit bins (low word first; a carry out
// of the low word goes into the high word).
__device__ __forceinline__ void bins_add(unsigned long long* bins, double v) {
    const unsigned long long bits = (unsigned long long)__double_as_longlong(v);
    const int e = (int)((bits >> 52) & 0x7ff);
    const unsigned long long m = (bits & 0xfffffffffffffull) | ((unsigned long long)(e != 0) << 52);
    if (m == 0) return;
    const long long sv = (bits >> 63) ? -(long long)m : (long long)m;
    const unsigned long long lo = (unsigned long long)sv;
    const unsigned long long old = atomicAdd(&bins[2 * e], lo);
    const unsigned long long hi = (sv < 0 ? ~0ull : 0ull) + (old + lo < old ? 1ull : 0ull);
    if (hi) atomicAdd(&bins[2 * e + 1], hi);
}

__device__ __forceinline__ unsigned special_flag(double v) {
    return isnan(v) ? FLAG_NAN : (v > 0 ? FLAG_POS_INF : FLAG_NEG_INF);
}

__device__ __forceinline__ bool finite_value(double v) {
    return fabs(v) < __longlong_as_double(0x7ff0000000000000ll);
}

// a + b = s + err exactly (Knuth's TwoSum; no branch, no FMA involved).
__device__ __forceinline__ double two_sum(double a, double b, double& err) {
    const double s = __dadd_rn(a, b);
    const double bp = __dsub_rn(s, a);
    err = __dadd_rn(__dsub_rn(a, __dsub_rn(s, bp)), __dsub_rn(b, bp));
    return s;
}

// A remainder the expansion cannot hold goes into the bins (or, if an
// overflow made it non-finite, raises the flag).
__device__ __forceinline__ void shed(unsigned long long* bins, double rem, unsigned& flags) {
    if (rem == 0.0) return;
    if (finite_value(rem)) bins_add(bins, rem);
    else flags |= FLAG_OVERFLOW;
}

// DIRECT = 1: every input goes straight into the bins (slow, never
// overflows; used after an expansion overflowed).
template <int DIRECT>
__device__ void exact_kernel(const double* __restrict__ x, long long n, unsigned long long* global_bins, unsigned* global_flags,
                             unsigned* counter, unsigned long long* out_bins) {
    __shared__ unsigned long long bins[2 * SA_BINS];
    for (int i = threadIdx.x; i < 2 * SA_BINS; i += blockDim.x) bins[i] = 0;
    __syncthreads();
    double e0 = 0.0, e1 = 0.0;
    unsigned flags = 0;
    for_each_element(x, n, [&](double v) {
        if (REDUCE_SINGLE) v = (double)__double2float_rn(v);
        if (!finite_value(v)) {
            flags |= special_flag(v);
        } else if (DIRECT) {
            bins_add(bins, v);
        } else {
            double r, r2;
            e0 = two_sum(e0, v, r);
            e1 = two_sum(e1, r, r2);
            shed(bins, r2, flags);
        }
    });
    // Merge the warp's expansions into lane 0's (error-free, remainders to
    // the bins), so that the block's bins take 2 values per warp, not per
    // thread (same-address shared atomics serialise).
    const int lane = threadIdx.x & 31;
    for (int o = 16; o > 0; o >>= 1) {
        const double b0 = __shfl_down_sync(FULL_MASK, e0, o), b1 = __shfl_down_sync(FULL_MASK, e1, o);
        if (lane < o) {
            double r, r2, r3;
            e0 = two_sum(e0, b0, r);
            e1 = two_sum(e1, b1, r2);
            e1 = two_sum(e1, r, r3);
            shed(bins, r2, flags);
            shed(bins, r3, flags);
        }
    }
    if (lane == 0) {
        if (finite_value(e0) && finite_value(e1)) {
            bins_add(bins, e0);
            bins_add(bins, e1);
        } else {
            flags |= FLAG_OVERFLOW;
        }
    }
    if (flags) atomicOr(global_flags, flags);
    __syncthreads();
    for (int e = threadIdx.x; e < SA_BINS; e += blockDim.x) {
        const unsigned long long lo = bins[2 * e], hi = bins[2 * e + 1];
        if (lo == 0 && hi == 0) continue;
        const unsigned long long old = atomicAdd(&global_bins[2 * e], lo);
        const unsigned long long high = hi + (old + lo < old ? 1ull : 0ull);
        if (high) atomicAdd(&global_bins[2 * e + 1], high);
    }
    if (!last_block(counter)) return;
    // Hand the total to the host and leave the accumulator empty for the
    // next call: all loads first, so their latencies overlap.
    constexpr int PER_THREAD = (2 * SA_BINS + 255) / 256;
    unsigned long long words[PER_THREAD];
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        words[k] = i < 2 * SA_BINS ? __ldcg(&global_bins[i]) : 0ull;
    }
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < 2 * SA_BINS) {
            out_bins[i] = words[k];
            global_bins[i] = 0;
        }
    }
    // Blocks of fewer than 256 threads finish the rest in a plain loop.
    for (int i = threadIdx.x + PER_THREAD * blockDim.x; i < 2 * SA_BINS; i += blockDim.x) {
        out_bins[i] = __ldcg(&global_bins[i]);
        global_bins[i] = 0;
    }
    if (threadIdx.x == 0) {
        out_bins[2 * SA_BINS] = atomicExch(global_flags, 0u);
        *counter = 0;
    }
}

extern "C" __global__ void exact_sum(const double* __restrict__ x, long long n, unsigned long long* global_bins, unsigned* global_flags,
                                     unsigned* counter, unsigned long long* out_bins) {
    exact_kernel<0>(x, n, global_bins, global_flags, counter, out_bins);
}

extern "C" __global__ void exact_bins(const double* __restrict__ x, long long n, unsigned long long* global_bins, unsigned* global_flags,
                                      unsigned* counter, unsigned long long* out_bins) {
    exact_kernel<1>(x, n, global_bins, global_flags, counter, out_bins);
}
