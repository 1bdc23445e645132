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

