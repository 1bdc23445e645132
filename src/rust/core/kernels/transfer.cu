// Compact integer copies between host and device (src/gpu/transfer.rs):
// small integers (symbols below V, states below N) cross the bus as 1 or 2
// bytes each and are widened to or narrowed from 32 bits here, so a copy
// moves a quarter or half of the bytes. When `sentinel` is set, the
// all-ones value of the narrow width stands for 0xFFFFFFFF (a Viterbi
// path's "no state") and back.

__device__ __forceinline__ unsigned transfer_all_ones(int width) {
    return width == 1 ? 0xFFu : 0xFFFFu;
}

// dst[i] = the width-byte little-endian integer at src + i * width.
extern "C" __global__ void widen_u32(const unsigned char* __restrict__ src, int width, long long n, int sentinel, unsigned* __restrict__ dst)
{
    const unsigned ones = transfer_all_ones(width);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned v = width == 1 ? (unsigned)src[i] : (unsigned)((const unsigned short*)src)[i];
        dst[i] = (sentinel && v == ones) ? 0xFFFFFFFFu : v;
    }
}

// The inverse of widen_u32: src[i] (below 2^(8 width), or 0xFFFFFFFF when
// `sentinel`) as width bytes at dst + i * width.
extern "C" __global__ void narrow_u32(const unsigned* __restrict__ src, int width, long long n, int sentinel, unsigned char* __restrict__ dst)
{
    const unsigned ones = transfer_all_ones(width);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned v = src[i];
        if (sentinel && v == 0xFFFFFFFFu) v = ones;
        if (width == 1) dst[i] = (unsigned char)v;
        else ((unsigned short*)dst)[i] = (unsigned short)v;
    }
}

// out = a (rows x cols, row-major), transposed when `transpose` (out is
// then cols x rows), and with log taken of each value when `take_log`: the
// tables the HMM kernels read, made from the model as the user holds it
// (a transposed copy on the host would cost a page fault per 4 KiB of it).
// 32 x 32 tiles through shared memory, blockDim (32, 8).
extern "C" __global__ void layout_f64(const double* __restrict__ a, int rows, int cols, int transpose, int take_log, double* __restrict__ out)
{
    __shared__ double tile[32][33];
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    for (int k = threadIdx.y; k < 32; k += 8) {
        const int r = r0 + k, c = c0 + threadIdx.x;
        if (r < rows && c < cols) {
            double v = a[(long long)r * cols + c];
            if (take_log) v = log(v);
            if (transpose) tile[k][threadIdx.x] = v;
            else out[(long long)r * cols + c] = v;
        }
    }
    if (!transpose) return;
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
        const int c = c0 + k, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out[(long long)c * rows + r] = tile[threadIdx.x][k];
    }
}

// Time-major rows (n values per observation) as one column-major T_s x n
// matrix per sequence, at the same place in `out`, NaN as the value whose
// bits are `missing` (R's NA): the posteriors as R's matrices hold them,
// so that they cross the bus straight into R's memory with no pass on the
// host (src/hmm/gpu/passes.rs). Sequences first .. first + count, their
// observations off[s] .. off[s + 1], the rows from row off[first]. Blocks
// stride over the sequences (x) and over a sequence's tiles (y: few long
// sequences, one block each, left the device idle: one sequence of 262,144
// steps took milliseconds), 32 x 32 tiles through shared memory as
// layout_f64, blockDim (32, 8).
extern "C" __global__ void columns_by_sequence_f64(const double* __restrict__ rows, const long long* __restrict__ off, int first, int count, int n,
                                                   unsigned long long missing, double* __restrict__ out)
{
    __shared__ double tile[32][33];
    const double na = __longlong_as_double((long long)missing);
    const long long base = off[first];
    const int tiles_c = (n + 31) / 32;
    for (int s = blockIdx.x; s < count; s += gridDim.x) {
        const long long a = off[first + s], t = off[first + s + 1] - a;
        const double* src = rows + (a - base) * n;
        double* dst = out + (a - base) * n;
        const long long tiles = ((t + 31) / 32) * tiles_c;
        for (long long k = blockIdx.y; k < tiles; k += gridDim.y) {
            const long long r0 = (k / tiles_c) * 32;
            const int c0 = (int)(k % tiles_c) * 32;
            for (int i = threadIdx.y; i < 32; i += 8) {
                const long long r = r0 + i;
                const int c = c0 + threadIdx.x;
                if (r < t && c < n) tile[i][threadIdx.x] = src[r * n + c];
            }
            __syncthreads();
            for (int i = threadIdx.y; i < 32; i += 8) {
                const int c = c0 + i;
                const long long r = r0 + threadIdx.x;
                if (r < t && c < n) {
                    const double v = tile[threadIdx.x][i];
                    dst[(long long)c * t + r] = v != v ? na : v;
                }
            }
            __syncthreads();
        }
    }
}

// Datasets laid end to end, less some of each one's values: part d is
// full[full_off[d] .. full_off[d + 1]) less the positions skip[skip_start[d]
// .. skip_start[d + 1]) (increasing, relative to the part), into
// out[full_off[d] - skip_start[d] ..]: the exact observations of censored data, made on the
// device from the values as the user holds them (a host copy of them all
// would cost a pass over the host's memory and its page faults). One block
// per part; each value's place is its position less the skipped ones
// before it (a binary search).
extern "C" __global__ void compact_f64(const double* __restrict__ full, const long long* __restrict__ full_off,
                                       const int* __restrict__ skip, const long long* __restrict__ skip_start,
                                       double* __restrict__ out)
{
    const int d = blockIdx.x;
    const long long n = full_off[d + 1] - full_off[d], at = full_off[d] - skip_start[d];
    const int* s = skip + skip_start[d];
    const int count = (int)(skip_start[d + 1] - skip_start[d]);  // at most the part's length
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        int lo = 0, hi = count;  // the first skipped position >= i
        while (lo < hi) {
            const int mid = (lo + hi) >> 1;
            if (s[mid] < i) lo = mid + 1;
            else hi = mid;
        }
        if (lo < count && s[lo] == i) continue;
        out[at + i - lo] = full[full_off[d] + i];
    }
}
