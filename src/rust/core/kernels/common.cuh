// Device helpers shared by the bulkem kernels. Prepended to each kernel
// source by the host (NVRTC compiles one string; no include paths needed).

#define FULL_MASK 0xffffffffu
#define HMM_NEG_INF __longlong_as_double(0xfff0000000000000ULL)
#define HMM_NAN __longlong_as_double(0x7ff8000000000000ULL)

// Sum over the 32 lanes of a warp; every lane gets the same total, summed
// in the same (butterfly) order, so the result is deterministic.
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// The largest and smallest value over the 32 lanes of a warp (every lane
// gets it; fmax and fmin skip NaN).
__device__ __forceinline__ double warp_max(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

__device__ __forceinline__ double warp_min(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmin(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// Sum over a block: every thread gets the same total, in a fixed order.
// `scratch` holds at least one double per warp.
__device__ double block_sum(double v, double* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < warps; ++w) total += scratch[w];
    __syncthreads();
    return total;
}


// d += a x b for one 8 x 8 x 4 fragment of the FP64 tensor cores (mma
// m8n8k4): lane l (g = l / 4, q = l % 4) holds a = A[g][q], b = B[q][g]
// and (d0, d1) = D[g][2q], D[g][2q + 1]. Before sm_80 (no FP64 mma), the
// same sums by shuffles.
__device__ __forceinline__ void mma_f64_8x8x4(double& d0, double& d1, double a, double b) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
                 : "+d"(d0), "+d"(d1) : "d"(a), "d"(b));
#else
    const int lane = threadIdx.x & 31, row = lane >> 2, col = 2 * (lane & 3);
    for (int k = 0; k < 4; ++k) {
        const double x = __shfl_sync(FULL_MASK, a, row * 4 + k);
        d0 = fma(x, __shfl_sync(FULL_MASK, b, col * 4 + k), d0);
        d1 = fma(x, __shfl_sync(FULL_MASK, b, (col + 1) * 4 + k), d1);
    }
#endif
}

// d += a x b for one 16 x 8 x 16 fragment (mma m16n8k16, sm_90): lane l
// (g = l / 4, q = l % 4) holds a[v] = A[g + 8 (v % 2)][q + 4 (v / 2)],
// b[v] = B[q + 4v][g], and (d0, d1, d2, d3) = D[g][2q], D[g][2q + 1],
// D[g + 8][2q], D[g + 8][2q + 1]. Before sm_90, as 8 x 8 x 4 fragments.
__device__ __forceinline__ void mma_f64_16x8x16(double& d0, double& d1, double& d2, double& d3, const double (&a)[8],
                                                const double (&b)[4]) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7, %8, %9, %10, %11}, "
                 "{%12, %13, %14, %15}, {%0, %1, %2, %3};"
                 : "+d"(d0), "+d"(d1), "+d"(d2), "+d"(d3)
                 : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]), "d"(b[1]),
                   "d"(b[2]), "d"(b[3]));
#else
    for (int i = 0; i < 4; ++i) {
        mma_f64_8x8x4(d0, d1, a[2 * i], b[i]);
        mma_f64_8x8x4(d2, d3, a[2 * i + 1], b[i]);
    }
#endif
}
