// HMM passes for large N (core/src/hmm/gpu/batched.rs launches these): all
// sequences of a batch advance one time step together, and each step is
// one matrix product (sequences x states) x (states x states) tiled over
// the whole grid, with a grid-wide barrier between steps. The kernels are
// launched cooperatively, so every block is resident and the barrier is
// safe; a pass over a batch is still one launch.
//
// Rows are the batch's sequences sorted by decreasing length, so
// the rows still running at a step are a prefix and finished tiles are
// skipped. The forward pass aligns sequences at their starts, the backward
// pass at their ends, as the one-sequence kernels of hmm.cu do. Per-symbol
// storage (alpha, scale, gamma, tmp) uses hmm.cu's layouts, so the counting
// kernels of either file read it.
//
// The certificate of the scaled passes and the beta masking are hmm.cu's
// (see there): a positive unscaled value below `theta` enters its row's sum
// as NaN, which stops the row with log-likelihood NaN (as does any row when
// theta > 1); the backward pass skips rows whose log-likelihood is not
// finite and sets beta to 0 where alpha is 0. hmm_m_step keeps the new
// model's smallest positive probabilities (`mins`) for the next forward
// pass's theta.
//
// Each step's sums over states run in a different order from the CPU's
// (tiles of HMB_BK, partial row sums per chunk of 16 columns), so results
// agree with the CPU to rounding; every sum has a fixed order, the same in
// both tilings (HMB_RESIDENT), so they are deterministic and do not depend
// on the batch.

#define HMB_BM 32           // rows (sequences) per tile
// Columns (states) per tile, and where the right operand (the transitions)
// is read. HMB_RESIDENT 0: streamed from L2 at every step with the left
// operand. HMB_RESIDENT 1: each block keeps one column tile for the whole
// launch and holds those HMB_BN columns (all N rows) in shared memory, read
// once; a step then reads only the left operand, so narrow tiles spread a
// few sequences over every multiprocessor (N = 1,024 with 64 sequences: 128
// tiles of 16 columns instead of 32 of 64). The host compiles both.
#ifndef HMB_BN
#define HMB_BN 64
#endif
#ifndef HMB_RESIDENT
#define HMB_RESIDENT 0
#endif
static_assert(HMB_BN % 16 == 0, "a warp's columns are whole 16 x 8 fragments");
// A row's sum over states is kept as partial sums of HMB_CHUNK columns
// (hmb_chunk_sum), added in chunk order: the same order whatever the tile
// width, so both tilings give identical results.
#define HMB_CHUNK 16
#define HMB_CHUNKS(N) (((N) + HMB_CHUNK - 1) / HMB_CHUNK)
#define HMB_BK 16           // states summed per shared-memory stage
#ifndef HMB_STAGES
#define HMB_STAGES 3        // stages of a group's copy pipeline (4 for narrow tiles where they fit)
#endif
#define HMB_GROUP 128       // threads of a group (4 warps)
#define HMB_GROUPS 4        // groups of a block, each summing every 4th stage
#define HMB_THREADS (HMB_GROUP * HMB_GROUPS)
// Padded rows of the stage buffers (left operand by row, right operand by
// k): with 4 extra doubles, the 32 lanes of a tensor-core fragment load hit
// every bank pair exactly twice (optimal).
#define HMB_AS (HMB_BK + 4)
#define HMB_BS (HMB_BN + 4)
// Row stride of the state-vector buffers: N rounded up to even, so that
// every row starts 16-byte aligned for the asynchronous copies. The pad
// column is never written and stays 0.
#define HMB_LD(N) (((N) + 1) & ~1)

#define HMB_POS_INF __longlong_as_double(0x7ff0000000000000ULL)

// hmm.cu's hmm_theta (this file is compiled on its own).
__device__ __forceinline__ double hmb_theta(const unsigned long long* __restrict__ mins) {
    const unsigned long long ka = mins[0], ke = mins[1];
    if (ka == 0 || ke == 0) return HMB_POS_INF;
    const double phi = __longlong_as_double(~ka) * __longlong_as_double(~ke);
    return phi > 0.0 && phi < HMB_POS_INF ? 0x1p-960 / phi : HMB_POS_INF;
}

// Grid-wide barrier: *bar counts every block's arrivals over the launch,
// and the k-th barrier is passed when it reaches k x gridDim.x (no reset,
// so the last block to arrive does no more than the others). Launches that
// share `bar` have the same grid and pass whole barriers, so the count is
// a multiple of the grid when each starts (zero when allocated); 64 bits
// never wrap. Safe only under a cooperative launch (all blocks resident).
// The block's writes are published by thread 0's release add (after the
// block barrier, which orders them before it) and the other blocks' are
// seen through its acquire loads (before the block barrier that releases
// the block): CUTLASS's grid barrier. Two full fences instead cost 1-4%
// of a batched pass at N = 1,024 (BENCHMARKS.md).
__device__ void hmb_grid_sync(unsigned long long* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned long long grid = gridDim.x;
        unsigned long long old, now;
#if __CUDA_ARCH__ >= 700
        asm volatile("atom.add.release.gpu.u64 %0, [%1], 1;" : "=l"(old) : "l"(bar) : "memory");
#else
        __threadfence();
        old = atomicAdd(bar, 1ull);
#endif
        const unsigned long long target = (old / grid + 1) * grid;
        do {
#if __CUDA_ARCH__ >= 700
            asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(now) : "l"(bar) : "memory");
#else
            now = *(volatile unsigned long long*)bar;
#endif
        } while (now < target);
#if __CUDA_ARCH__ < 700
        __threadfence();
#endif
    }
    __syncthreads();
}

// Per-row data of a tile, refreshed for every tile and step.
struct HmbRows {
    long long rel[HMB_BM];   // first symbol of the row's sequence, batch-relative
    long long len[HMB_BM];   // its length (0: no such row)
    double mul[HMB_BM];      // factor applied to the left operand's row
    long long erow[HMB_BM];  // emission row applied to the output, -1: none
    int seq[HMB_BM];         // sequence index - s0
    int was[HMB_BM];         // forward: the row ran at the previous step
};

// The stage buffers of one group (dynamic shared memory holds HMB_GROUPS).
struct HmbStage {
    __align__(16) double a[HMB_STAGES][HMB_BM][HMB_AS];  // left operand (row, k)
#if !HMB_RESIDENT
    __align__(16) double b[HMB_STAGES][HMB_BK][HMB_BS];  // right operand (k, column)
#endif
};

static_assert(HMB_BM * (HMB_BN + 1) <= sizeof(HmbStage) / sizeof(double), "a stage buffer holds a tile");

// The static shared memory of one block.
struct HmbShared {
    HmbRows rows;
};

// The products run on the FP64 tensor cores (mma m16n8k4): warp w of a
// group owns the 16 x HMB_BN / 2 block of tile rows 16 (w / 2) + 0..15 and
// columns HMB_BN / 2 (w % 2) + 0..HMB_BN / 2 - 1 (HMB_NF 16 x 8 output
// fragments). Lane l (g = l / 4, c = l % 4) holds, for q < HMB_OUT, row
// hmb_out_row(q) = 16 (w / 2) + g + 8 (q / (2 HMB_NF)) and column
// hmb_out_col(q) = HMB_BN / 2 (w % 2) + 8 ((q / 2) % HMB_NF) + 2c + q % 2.
// Group 0 holds the tile's sums after hmb_tile_product and writes the
// outputs.
#define HMB_NF (HMB_BN / 16)
#define HMB_OUT (4 * HMB_NF)
// Whether the forward pass sums each row's scale after the step's product
// (its loads issued before it, so their trip from L2 overlaps it) rather
// than before. Narrow tiles have registers to spare; wide ones spilled
// and were slower (BENCHMARKS.md).
#ifndef HMB_SCALE_LATE
#define HMB_SCALE_LATE (HMB_BN <= 16)
#endif
__device__ __forceinline__ int hmb_gtid() { return threadIdx.x & (HMB_GROUP - 1); }
__device__ __forceinline__ int hmb_warp() { return hmb_gtid() >> 5; }
__device__ __forceinline__ int hmb_out_row(int q) { return 16 * (hmb_warp() >> 1) + ((threadIdx.x & 31) >> 2) + 8 * (q / (2 * HMB_NF)); }
__device__ __forceinline__ int hmb_out_col(int q) {
    return (HMB_BN / 2) * (hmb_warp() & 1) + 8 * ((q >> 1) % HMB_NF) + 2 * (threadIdx.x & 3) + (q & 1);
}

// (d0, d1; d2, d3) += (a0; a1) x b for one 16 x 8 x 4 fragment: rows g and
// g + 8 of A, as two 8 x 8 x 4 fragments before sm_90.
__device__ __forceinline__ void hmb_mma16(double& d0, double& d1, double& d2, double& d3, double a0, double a1, double b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                 : "+d"(d0), "+d"(d1), "+d"(d2), "+d"(d3) : "d"(a0), "d"(a1), "d"(b));
#else
    mma_f64_8x8x4(d0, d1, a0, b);
    mma_f64_8x8x4(d2, d3, a1, b);
#endif
}

// Asynchronous copies from global to shared memory (before sm_80, plain
// copies); `ok` false fills zeros without reading `src`. hmb_copy_l2 reads
// through L2 only, for data other blocks write during the launch (L1 is
// not coherent); hmb_copy_ro may be served by L1, for read-only data.
__device__ __forceinline__ void hmb_copy_l2(double* dst, const double* src, bool ok) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src),
                 "r"(ok ? 16 : 0) : "memory");
#else
    const double2 v = ok ? __ldcg(reinterpret_cast<const double2*>(src)) : make_double2(0.0, 0.0);
    *reinterpret_cast<double2*>(dst) = v;
#endif
}
template <int BYTES>
__device__ __forceinline__ void hmb_copy_ro(double* dst, const double* src, bool ok) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src),
                 "n"(BYTES), "r"(ok ? BYTES : 0) : "memory");
#else
    for (int i = 0; i < BYTES / 8; ++i) dst[i] = ok ? src[i] : 0.0;
#endif
}
__device__ __forceinline__ void hmb_copy_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Wait until at most PENDING committed copy groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void hmb_copy_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
#endif
}

// Barrier of the HMB_GROUP threads of group g (named barrier 1 + g; 0 is
// __syncthreads).
__device__ __forceinline__ void hmb_group_sync(int g) {
    asm volatile("bar.sync %0, %1;" ::"r"(1 + g), "n"(HMB_GROUP) : "memory");
}

// Copy the HMB_BK x HMB_BN block of `right` (row-major, N columns) at
// (k0, col0) into `dst` (rows of HMB_BS), zeros outside N x N; each of the
// HMB_GROUP threads `tid` copies its share. 16-byte copies need N even.
__device__ __forceinline__ void hmb_load_right(double (*dst)[HMB_BS], const double* __restrict__ right, int N, int k0,
                                               int col0, int tid) {
    if ((N & 1) == 0) {
#pragma unroll
        for (int q = 0; q < HMB_BK * HMB_BN / 2 / HMB_GROUP; ++q) {
            const int idx = tid + HMB_GROUP * q, k = idx / (HMB_BN / 2), c = 2 * (idx % (HMB_BN / 2));
            const bool ok = k0 + k < N && col0 + c < N;
            hmb_copy_ro<16>(&dst[k][c], ok ? right + (long long)(k0 + k) * N + col0 + c : right, ok);
        }
    } else {
#pragma unroll
        for (int q = 0; q < HMB_BK * HMB_BN / HMB_GROUP; ++q) {
            const int idx = tid + HMB_GROUP * q, k = idx / HMB_BN, c = idx % HMB_BN;
            const bool ok = k0 + k < N && col0 + c < N;
            hmb_copy_ro<8>(&dst[k][c], ok ? right + (long long)(k0 + k) * N + col0 + c : right, ok);
        }
    }
}

#if HMB_RESIDENT
// Index of (k, column c) in a block's resident slice: rows of HMB_BN, with
// c stored at c ^ 8 (k % 2), so that a fragment's 4 k x 8 columns hit
// every bank pair exactly twice (optimal) without padding.
__device__ __forceinline__ int hmb_res_at(int k, int c) { return k * HMB_BN + (c ^ ((k & 1) << 3)); }

// Fill a block's resident slice: columns col0.. of `right` (N x N,
// row-major), rows up to N rounded up to HMB_BK, zeros outside N x N.
__device__ void hmb_load_resident(double* __restrict__ res, const double* __restrict__ right, int N, int col0) {
    const int krows = (N + HMB_BK - 1) / HMB_BK * HMB_BK;
    for (int i = threadIdx.x; i < krows * HMB_BN; i += blockDim.x) {
        const int k = i / HMB_BN, c = i % HMB_BN, j = col0 + c;
        res[hmb_res_at(k, c)] = (k < N && j < N) ? right[(long long)k * N + j] : 0.0;
    }
    __syncthreads();
}
#endif

// One HMB_BK-deep stage of a warp's products (see hmb_out_row): the left
// operand `a` by row; the right one `b`, the stage buffer (by k) or, with
// HMB_RESIDENT, the block's slice, whose rows k0.. this stage sums.
__device__ __forceinline__ void hmb_stage_mma(const double (*a)[HMB_AS], const double* __restrict__ b, int k0, double acc[HMB_OUT]) {
    const int tid = hmb_gtid(), w = tid >> 5, g = (tid & 31) >> 2, kq = tid & 3;
    const int arow = 16 * (w >> 1) + g, bcol = (HMB_BN / 2) * (w & 1) + g;
#pragma unroll
    for (int k4 = 0; k4 < HMB_BK; k4 += 4) {
        const double a0 = a[arow][k4 + kq], a1 = a[arow + 8][k4 + kq];
#pragma unroll
        for (int j = 0; j < HMB_NF; ++j) {
#if HMB_RESIDENT
            const double bv = b[hmb_res_at(k0 + k4 + kq, 8 * j + bcol)];
#else
            const double bv = b[(k4 + kq) * HMB_BS + 8 * j + bcol];
#endif
            hmb_mma16(acc[2 * j], acc[2 * j + 1], acc[2 * HMB_NF + 2 * j], acc[2 * HMB_NF + 2 * j + 1], a0, a1, bv);
        }
    }
}

// The left operand of a tile's product: L(r, k) = src[(row0 + r) *
// HMB_LD(N) + k] for rows below `run` and, with `len` (shared), whose len
// is positive; zeros for the others.
struct HmbLeft {
    const double* src;
    int row0, run;
    const long long* len;
};

// Copy stage k0 of a tile's product into group buffer `buf` of `st`: the
// left operand's rows by 16-byte copies (ld and k0 are even), L2 only, as
// other blocks wrote src during this launch; without HMB_RESIDENT, the
// right operand's block too.
__device__ __forceinline__ void hmb_stage_load(HmbStage& st, int buf, int k0, int N, const HmbLeft& l, const double* __restrict__ right,
                                               int col0) {
    const int tid = hmb_gtid();
    const long long ld = HMB_LD(N);
#pragma unroll
    for (int q = 0; q < HMB_BM * HMB_BK / 2 / HMB_GROUP; ++q) {
        const int idx = tid + HMB_GROUP * q, r = idx / (HMB_BK / 2), k = 2 * (idx % (HMB_BK / 2));
        const bool ok = l.row0 + r < l.run && (l.len == nullptr || l.len[r] > 0) && k0 + k < N;
        hmb_copy_l2(&st.a[buf][r][k], ok ? l.src + (l.row0 + r) * ld + k0 + k : l.src, ok);
    }
#if !HMB_RESIDENT
    hmb_load_right(st.b[buf], right, N, k0, col0, tid);
#endif
}

// Group g sums stages g, g + HMB_GROUPS, ... of k: rounds of the groups
// (every group runs as many; a group past N idles) and group g's k0 at a round.
__device__ __forceinline__ int hmb_rounds(int N) { return (N + HMB_BK * HMB_GROUPS - 1) / (HMB_BK * HMB_GROUPS); }
__device__ __forceinline__ int hmb_stage_k0(int round) { return (threadIdx.x / HMB_GROUP) * HMB_BK + round * HMB_BK * HMB_GROUPS; }

// acc (hmb_out_row / hmb_out_col) = L x R over k in [0, N) for the tile at
// (l.row0, col0), where L is HmbLeft's and R(k, c) = right[k * N + col0 +
// c] (zeros for columns >= N; with HMB_RESIDENT, `right` is the block's
// slice of those columns, hmb_res_at). Group g sums stages g, g +
// HMB_GROUPS, ... through its own HMB_STAGES-deep pipeline of asynchronous
// copies, synchronised by its own barrier, so the four groups (four warps
// per scheduler) never wait for one another; their sums are then added in
// group order into group 0's `acc` (deterministic).
__device__ void hmb_tile_product(int N, const HmbLeft& l, const double* __restrict__ right, int col0, HmbStage* stages,
                                 double acc[HMB_OUT])
{
    const int tid = hmb_gtid(), group = threadIdx.x / HMB_GROUP;
    HmbStage& st = stages[group];
#pragma unroll
    for (int q = 0; q < HMB_OUT; ++q) acc[q] = 0.0;
    const int rounds = hmb_rounds(N);
#pragma unroll
    for (int s = 0; s < HMB_STAGES - 1; ++s) {
        if (s < rounds && hmb_stage_k0(s) < N) hmb_stage_load(st, s, hmb_stage_k0(s), N, l, right, col0);
        hmb_copy_commit();
    }
    for (int round = 0; round < rounds; ++round) {
        hmb_copy_wait<HMB_STAGES - 2>();
        // Stage `round` is in for every thread of the group, and the buffer
        // refilled next (read at round - 1) is free.
        hmb_group_sync(group);
        const int next = round + HMB_STAGES - 1;
        if (next < rounds && hmb_stage_k0(next) < N) hmb_stage_load(st, next % HMB_STAGES, hmb_stage_k0(next), N, l, right, col0);
        hmb_copy_commit();
        if (hmb_stage_k0(round) < N) {
#if HMB_RESIDENT
            const double* b = right;
#else
            const double* b = &st.b[round % HMB_STAGES][0][0];
#endif
            hmb_stage_mma(st.a[round % HMB_STAGES], b, hmb_stage_k0(round), acc);
        }
    }
    // Sum the groups' tiles into group 0, in group order (each group's own
    // stage buffers hold its sums).
    static_assert(HMB_OUT * HMB_GROUP <= sizeof(HmbStage) / sizeof(double), "stage buffers hold a group's sums");
    __syncthreads();
    double* mine = &st.a[0][0][0];
    if (group > 0) {
#pragma unroll
        for (int q = 0; q < HMB_OUT; ++q) mine[q * HMB_GROUP + tid] = acc[q];
    }
    __syncthreads();
    if (group == 0) {
        for (int g = 1; g < HMB_GROUPS; ++g) {
            const double* theirs = &stages[g].a[0][0][0];
#pragma unroll
            for (int q = 0; q < HMB_OUT; ++q) acc[q] += theirs[q * HMB_GROUP + tid];
        }
    }
}

// Sum of one row's HMB_CHUNK consecutive values v[0..16), in the order
// the mma layout made natural when it was summed in registers: each of 4
// lanes adds its columns (2c, 2c + 1, 8 + 2c, 9 + 2c), then the lanes by
// pairs. Every tiling sums a chunk this way.
__device__ __forceinline__ double hmb_chunk_sum(const double* v) {
    double l[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) l[c] = ((v[2 * c] + v[2 * c + 1]) + v[8 + 2 * c]) + v[9 + 2 * c];
    return (l[0] + l[1]) + (l[2] + l[3]);
}

// The per-row arrays of a batch, sorted by decreasing length (the host
// builds them once): first symbol (batch-relative), length, sequence - s0,
// and running[t] = rows whose length exceeds t.
struct HmbBatch {
    const long long* rel;
    const long long* len;
    const int* seq;
    const int* running;
};

// Load the tile's row data: rows [row0, row0 + HMB_BM) of the sorted batch,
// those >= run left empty.
__device__ void hmb_load_rows(HmbShared& sh, int row0, int run, const HmbBatch& bt)
{
    for (int r = threadIdx.x; r < HMB_BM; r += blockDim.x) {
        const int row = row0 + r;
        const bool in = row < run;
        sh.rows.seq[r] = in ? bt.seq[row] : 0;
        sh.rows.rel[r] = in ? bt.rel[row] : 0;
        sh.rows.len[r] = in ? bt.len[row] : 0;
        sh.rows.mul[r] = 0.0;
        sh.rows.erow[r] = -1;
    }
}

// The shape of a batched pass: column tiles per row tile, tiles, and the
// longest row's length (rows are sorted).
struct HmbGrid {
    int col_tiles, tiles;
    long long longest;
};

__device__ HmbGrid hmb_grid(int N, int rows, const long long* __restrict__ row_len) {
    const int col_tiles = (N + HMB_BN - 1) / HMB_BN;
    return {col_tiles, ((rows + HMB_BM - 1) / HMB_BM) * col_tiles, rows > 0 ? row_len[0] : 0};
}

// The scale of row `row` (0 unless `was`): the sum of its chunk sums
// (ps[row * chunks + m]), read by a half-warp at once (lane l holds chunks
// l, l + 16, ...) and added by a butterfly: a fixed order, the same
// whatever the tiling, and every lane of the half ends with the same
// value. Every lane of the warp calls it (the shuffles are unconditional).
// `x` and `from`: the lane's sum of its chunks below 16 `from` (see
// hmb_row_scale_load), and the chunks it then reads itself.
__device__ __forceinline__ double hmb_row_scale(const double* __restrict__ ps, int chunks, int row, bool was, double x = 0.0, int from = 0) {
    if (was)
        for (int m = (threadIdx.x & 15) + 16 * from; m < chunks; m += 16) x += __ldcg(&ps[(long long)row * chunks + m]);
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) x += __shfl_xor_sync(FULL_MASK, x, o);
    return x;
}

// The first HMB_PS_HELD chunk sums of a lane (for hmb_row_scale), loaded
// before a step's product so that their trip from L2 overlaps it, and
// their sum after it (a missing chunk's 0.0 adds nothing: x starts at
// +0.0, so its bits are those of hmb_row_scale's).
#define HMB_PS_HELD 4
__device__ __forceinline__ void hmb_row_scale_load(const double* __restrict__ ps, int chunks, int row, bool was, double held[HMB_PS_HELD]) {
#pragma unroll
    for (int i = 0; i < HMB_PS_HELD; ++i) {
        const int m = (threadIdx.x & 15) + 16 * i;
        held[i] = was && m < chunks ? __ldcg(&ps[(long long)row * chunks + m]) : 0.0;
    }
}
__device__ __forceinline__ double hmb_row_scale_held(const double* __restrict__ ps, int chunks, int row, bool was, const double held[HMB_PS_HELD]) {
    double x = 0.0;
#pragma unroll
    for (int i = 0; i < HMB_PS_HELD; ++i) x += held[i];
    return hmb_row_scale(ps, chunks, row, was, x, HMB_PS_HELD);
}

// Doubles of a block's stage buffers.
#define HMB_STAGE_DOUBLES (HMB_GROUPS * (int)(sizeof(HmbStage) / sizeof(double)))

// The right operand of a launch's products: `right` itself, or with
// HMB_RESIDENT the block's slice of its column tile, loaded here (the grid
// is a multiple of the column tiles, so a block's tiles share one column
// tile). Every thread calls it.
__device__ const double* hmb_right(const double* __restrict__ right, int N, int col_tiles, double* dynamic) {
#if HMB_RESIDENT
    double* res = dynamic + HMB_STAGE_DOUBLES;
    hmb_load_resident(res, right, N, (blockIdx.x % col_tiles) * HMB_BN);
    return res;
#else
    return right;
#endif
}

// Scaled forward pass of a batch of `rows` sequences (HmbBatch's arrays;
// sym[base + rel + t] is symbol t of a row). buf0/buf1: rows x HMB_LD(N)
// each, zeroed once (unnormalised alphas of the previous and current step);
// psum: 2 x rows x HMB_CHUNKS(N) (each row's sums by chunk of columns,
// by step parity); llacc: rows; bar: hmb_grid_sync's counter. With alpha and scale, every
// scaled alpha and scale is stored as by hmm_forward. loglik[s - s0] = log
// P(sequence), -inf when impossible. With HMB_RESIDENT, the grid is a
// multiple of ceil(N / HMB_BN) and dynamic shared memory also holds the
// slice (N rounded up to HMB_BK rows of HMB_BN).
// One block a multiprocessor (the shared memory allows no more), so ptxas
// may use up to 128 registers: without saying so it kept the forward pass
// at 64 and spilled the rows' data held across steps.
extern "C" __global__ void __launch_bounds__(HMB_THREADS, 1) hmm_forward_batched(
    int N, const double* __restrict__ start, const double* __restrict__ trans,
    const double* __restrict__ emis_k, const unsigned* __restrict__ sym, long long base, int rows,
    const long long* __restrict__ row_rel, const long long* __restrict__ row_len,
    const int* __restrict__ row_seq, const int* __restrict__ running,
    double* __restrict__ buf0, double* __restrict__ buf1, double* __restrict__ psum,
    double* __restrict__ llacc, unsigned long long* __restrict__ bar,
    double* __restrict__ alpha, double* __restrict__ scale, double* __restrict__ loglik,
    const unsigned long long* __restrict__ mins)
{
    const double theta = hmb_theta(mins);
    __shared__ HmbShared sh;
    extern __shared__ double hmb_dynamic[];
    HmbStage* stages = reinterpret_cast<HmbStage*>(hmb_dynamic);
    const HmbBatch bt = {row_rel, row_len, row_seq, running};
    const HmbGrid gr = hmb_grid(N, rows, row_len);
    const int col_tiles = gr.col_tiles, tiles = gr.tiles, chunks = HMB_CHUNKS(N);
    const long long Tmax = gr.longest;
    const long long ld = HMB_LD(N);
    const double* right = hmb_right(trans, N, col_tiles, hmb_dynamic);
    // The row of the block's first tile that a half-warp handles: its data
    // do not change from step to step, so they are read once, and its next
    // symbol and the next step's count of running rows are read before the
    // grid barrier, where their latency hides in the barrier's (they were
    // two dependent L2 round trips after it).
    const int first_row = (blockIdx.x / col_tiles) * HMB_BM + (threadIdx.x >> 4);
    const bool first_in = (int)blockIdx.x < tiles && first_row < rows;
    const long long f_rel = first_in ? bt.rel[first_row] : 0, f_len = first_in ? bt.len[first_row] : 0;
    const int f_seq = first_in ? bt.seq[first_row] : 0;
    unsigned f_sym = first_in && f_len > 0 ? sym[base + f_rel] : 0;  // its symbol at step t
    int run_at = Tmax > 0 ? running[0] : 0, run_before = 0;         // running[t], running[t - 1]
    for (long long t = 0; t <= Tmax; ++t) {
        // Step t computes the rows running at t, and finishes step t - 1
        // (scales, stored alphas, log-likelihoods) for the rows running
        // then, a superset (lengths are sorted).
        const double* cur = ((t - 1) & 1) ? buf1 : buf0;
        double* nxt = (t & 1) ? buf1 : buf0;
        double* ps = psum + (t & 1) * (long long)chunks * rows;
        const double* prev_ps = psum + ((t - 1) & 1) * (long long)chunks * rows;
        const int run_prev = t > 0 ? run_before : 0;
        const int run = t < Tmax ? run_at : 0;
        const int run_any = t > 0 ? run_prev : run;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int row0 = (tile / col_tiles) * HMB_BM, ct = tile % col_tiles, col0 = ct * HMB_BN;
            if (row0 >= run_any) continue;
            // A half-warp per row (all rows at once): its scale
            // (hmb_row_scale), and its first lane fills the row's data.
            // With HMB_SCALE_LATE the scale's loads are issued here and
            // summed after the product, which does not need them. The
            // __syncthreads also waits for the previous tile's use of sh.
            static_assert(HMB_THREADS / 16 == HMB_BM, "a half-warp per row");
            __syncthreads();
            const int r = threadIdx.x >> 4, row = row0 + r;
            const bool was = row < run_prev, now = row < run, first = tile == (int)blockIdx.x;
            // Loads independent of the scale's, issued first (none for the
            // first tile).
            const long long rel = (was || now) ? (first ? f_rel : bt.rel[row]) : 0, len = (was || now) ? (first ? f_len : bt.len[row]) : 0;
            const long long erow = now ? (long long)(first ? f_sym : sym[base + rel + t]) * N : -1;
            const int seq = was ? (first ? f_seq : bt.seq[row]) : 0;
            double held[HMB_PS_HELD];
            if (HMB_SCALE_LATE) hmb_row_scale_load(prev_ps, chunks, row, was, held);
            const bool ll_row = (threadIdx.x & 15) == 0 && was && ct == 0;
            const double ll_before = HMB_SCALE_LATE && ll_row && t > 1 ? llacc[row] : 0.0;
            // Step t - 1's scale c of the row: its factor for step t, and its
            // log-likelihood, scale and (at its end) loglik.
            const auto finish = [&](double c) {
                if ((threadIdx.x & 15) != 0) return;
                // An impossible row stays all zeros (and its scale 0).
                sh.rows.mul[r] = c > 0.0 ? 1.0 / c : 0.0;
                if (!ll_row) return;
                // c NaN: uncertain (NaN from then on); 0: impossible.
                const double before = HMB_SCALE_LATE ? ll_before : t > 1 ? llacc[row] : 0.0;
                const double l = before + (c > 0.0 ? log(c) : c == c && theta <= 1.0 ? HMM_NEG_INF : HMM_NAN);
                llacc[row] = l;
                if (scale && c > 0.0) scale[rel + t - 1] = c;
                if (len == t) loglik[seq] = l;
            };
            if (!HMB_SCALE_LATE) finish(hmb_row_scale(prev_ps, chunks, row, was));
            if ((threadIdx.x & 15) == 0) {
                sh.rows.rel[r] = rel;
                sh.rows.len[r] = now ? len : 0;
                sh.rows.erow[r] = erow;
                sh.rows.was[r] = was;
            }
            __syncthreads();
            // Step t: nxt = (cur A) / c_{t-1} .* e(o_t), or start .* e(o_0).
            const bool step = row0 < run;
            double acc[HMB_OUT];
            if (step && t > 0) hmb_tile_product(N, {cur, row0, run, nullptr}, right, col0, stages, acc);
            if (HMB_SCALE_LATE) {
                finish(hmb_row_scale_held(prev_ps, chunks, row, was, held));
                __syncthreads();
            }
            if (threadIdx.x >= HMB_GROUP) {
                // The other groups store step t - 1's scaled alphas while
                // group 0 writes step t.
                if (alpha) {
                    for (int q = threadIdx.x - HMB_GROUP; q < HMB_BM * HMB_BN; q += HMB_THREADS - HMB_GROUP) {
                        const int r = q / HMB_BN, j = col0 + q % HMB_BN;
                        if (sh.rows.was[r] && j < N && sh.rows.mul[r] > 0.0)
                            alpha[(sh.rows.rel[r] + t - 1) * N + j] = __ldcg(&cur[(row0 + r) * ld + j]) * sh.rows.mul[r];
                    }
                }
                continue;
            }
            if (!step) continue;
            // Each row's chunk sums (hmb_chunk_sum's order) of the terms: x,
            // NaN below the certificate, 0 at columns >= N.
            double term[HMB_OUT];
#pragma unroll
            for (int q = 0; q < HMB_OUT; ++q) {
                const int r = hmb_out_row(q), j = col0 + hmb_out_col(q);
                term[q] = 0.0;
                if (sh.rows.len[r] > 0 && j < N) {
                    const double x = (t > 0 ? acc[q] * sh.rows.mul[r] : start[j]) * emis_k[sh.rows.erow[r] + j];
                    nxt[(row0 + r) * ld + j] = x;
                    term[q] = (x > 0.0 && x < theta) ? HMM_NAN : x;
                }
            }
#if HMB_NF >= 2
            // A warp holds whole chunks (fragments 2m and 2m + 1 of a row):
            // each lane adds its four columns, then the four lanes of the row
            // by pairs, in registers.
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int m = 0; m < HMB_NF / 2; ++m) {
                    const int q = 4 * m + 2 * HMB_NF * h;
                    double l = ((term[q] + term[q + 1]) + term[q + 2]) + term[q + 3];
                    l += __shfl_xor_sync(FULL_MASK, l, 1);
                    l += __shfl_xor_sync(FULL_MASK, l, 2);
                    const int r = hmb_out_row(q), col = col0 + hmb_out_col(q) - 2 * (threadIdx.x & 3);
                    if ((threadIdx.x & 3) == 0 && sh.rows.len[r] > 0 && col < N)
                        ps[(long long)(row0 + r) * chunks + col / HMB_CHUNK] = l;
                }
            }
#else
            // A chunk spans two warps: through group 0's stage buffers
            // (free after the product), a thread per (row, chunk).
            double (*terms)[HMB_BN + 1] = reinterpret_cast<double (*)[HMB_BN + 1]>(&stages[0].a[0][0][0]);
#pragma unroll
            for (int q = 0; q < HMB_OUT; ++q) terms[hmb_out_row(q)][hmb_out_col(q)] = term[q];
            hmb_group_sync(0);
            for (int p = hmb_gtid(); p < HMB_BM * (HMB_BN / HMB_CHUNK); p += HMB_GROUP) {
                const int r = p / (HMB_BN / HMB_CHUNK), m = p % (HMB_BN / HMB_CHUNK);
                if (sh.rows.len[r] > 0 && col0 + HMB_CHUNK * m < N)
                    ps[(long long)(row0 + r) * chunks + col0 / HMB_CHUNK + m] = hmb_chunk_sum(&terms[r][HMB_CHUNK * m]);
            }
#endif
        }
        run_before = run_at;
        run_at = t + 1 < Tmax ? running[t + 1] : 0;
        if (first_in && t + 1 < f_len) f_sym = sym[base + f_rel + t + 1];
        if (t < Tmax) hmb_grid_sync(bar);
    }
}

// The backward pass's last step at column j of a row (first symbol rel,
// length len > 0; `ok`: its sequence possible): beta = 1, gamma = alpha,
// w = B(o_{len-1}) / c_{len-1} into *w_out and tmp_out's last two rows; an
// impossible row's gamma rows NaN and tmp rows zero (*w_out untouched).
__device__ __forceinline__ void hmb_backward_last(int N, int j, long long rel, long long len, bool ok, const double* __restrict__ emis_k,
                                                  const unsigned* __restrict__ sym, long long base, const double* __restrict__ alpha,
                                                  const double* __restrict__ scale, double* w_out, double* gamma, double* tmp_out) {
    if (!ok) {
        for (long long t = 0; t < len; ++t) {
            if (gamma) gamma[(rel + t) * N + j] = HMM_NAN;
            if (tmp_out) tmp_out[(rel + t) * N + j] = 0.0;
        }
        return;
    }
    const long long last = rel + len - 1;
    const double w = emis_k[(long long)sym[base + last] * N + j] / scale[last];
    *w_out = w;
    if (gamma) gamma[last * N + j] = alpha[last * N + j];
    if (tmp_out) {
        tmp_out[last * N + j] = 0.0;
        if (len > 1) tmp_out[(last - 1) * N + j] = w;
    }
}

// hmm_forward_split: the forward pass (log-likelihoods, and with alpha the
// scaled alphas and scales) of up to HMS_ROWS sequences of N <= HMS_KS x
// HMS_KR states, a step's product split along k over the HMS_KS blocks of
// a cluster (sm_90).
// hmm_forward_batched's narrow tiles read every row's whole state vector in
// each of N / 16 column tiles at every step (8.6 GB over a pass at N =
// 1,024, M = 64, T = 256), and a step took about 10 us, bound by moving
// them. Here a block keeps a HMS_KR x 8U slice of the transitions (rows
// k_base.., its cluster's U column units of 8 columns) and reads only its
// HMS_KR columns of the state vectors, so a step moves the vectors through
// L2 ceil(N / 8) / U times (15 at N = 1,024), not N / 16.
//
// Warp w computes rows 32 (w / 4) + 0..31 of units w % 4 and w % 4 + 4,
// their transitions held in registers for the whole pass; a ninth unit
// (where fewer than ceil(N / 64) clusters fit at once) is read from shared
// memory, each warp summing a quarter of its k, the quarters added in the
// block. Each block stores its partial product's fragments in the shared
// memory of the block of its cluster that owns their columns (unit u: rank
// u % HMS_KS), and its rows' partial sums of the slice (the terms of the
// previous step's scales, certified as in hmm_forward_batched) in every
// block's; after the cluster's barrier each owner adds them in rank order,
// scales, multiplies by the emission entries and writes its columns. A
// grid barrier separates the steps. Every sum has a fixed order that does
// not depend on the grid; it is not hmm_forward_batched's, so the two agree
// to rounding. tools/hmm-probe/splitk.cu measured the design first.
//
// Arguments as hmm_forward_batched's, less psum and llacc; with alpha and
// scale, every scaled alpha and scale is stored as there (each block its
// slice of some rows, after the cluster's barrier gives their scales);
// `bar` is this kernel's own arrival count. The grid is HMS_KS x clusters,
// each cluster's units an even share of ceil(N / 8), at most HMS_MAXU; one
// block a multiprocessor, launched cooperatively; HMS_SMEM bytes of dynamic
// shared memory. Below sm_90 (no clusters) the kernel is empty and the host
// never launches it.
#ifndef HMS_KS
#define HMS_KS 8
#endif
#define HMS_KR 128
#define HMS_KK (HMS_KR / 16)              // mma k steps of a block
#define HMS_ROWS 64
#define HMS_THREADS 256
#define HMS_MAXU 9
#define HMS_LDA (HMS_KR + 4)              // 4 (mod 16): conflict-free A fragments
#define HMS_LDX 12                        // 12 (mod 16): conflict-free B fragments of the ninth unit
#define HMS_OWN 16                        // columns a block owns at most (units r, r + HMS_KS)
#define HMS_CHUNK 32                      // k of a copy chunk of the slice
#define HMS_CHUNKS (HMS_KR / HMS_CHUNK)
#define HMS_SMEM (8 * (HMS_ROWS * HMS_LDA + HMS_KR * HMS_LDX + 4 * HMS_ROWS * 8 + HMS_KS * HMS_ROWS * HMS_OWN + HMS_KS * HMS_ROWS + 8 * HMS_THREADS + HMS_ROWS))

#if __CUDA_ARCH__ >= 900
// The address of `p` (this block's shared memory) in the block of rank
// `rank` of the cluster.
__device__ __forceinline__ unsigned hms_remote(const double* p, int rank) {
    unsigned at;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(at) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
    return at;
}
__device__ __forceinline__ void hms_put(unsigned at, double x) {
    asm volatile("st.shared::cluster.f64 [%0], %1;" ::"r"(at), "d"(x) : "memory");
}
__device__ __forceinline__ void hms_put2(unsigned at, double x, double y) {
    asm volatile("st.shared::cluster.v2.f64 [%0], {%1, %2};" ::"r"(at), "d"(x), "d"(y) : "memory");
}
// The cluster's barrier: the stores of its blocks before it are seen after it.
__device__ __forceinline__ void hms_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Wait until at most `pending` chunks' copies are in flight (a constant once unrolled).
__device__ __forceinline__ void hms_wait(int pending) {
    switch (pending) {
        case 0: hmb_copy_wait<0>(); break;
        case 1: hmb_copy_wait<1>(); break;
        case 2: hmb_copy_wait<2>(); break;
        default: hmb_copy_wait<3>(); break;
    }
}
// Store the fragment pair (rows r, r + 8; columns 2q, 2q + 1 of unit u) in
// recv of u's owner: recv[from][row][8 (u / HMS_KS) + column].
__device__ __forceinline__ void hms_send(double* recv, int from, int r, int q, int u, const double (&d)[4]) {
    const unsigned at = hms_remote(recv + (from * HMS_ROWS + r) * HMS_OWN + 8 * (u / HMS_KS) + 2 * q, u % HMS_KS);
    hms_put2(at, d[0], d[1]);
    hms_put2(at + 8 * HMS_OWN * (unsigned)sizeof(double), d[2], d[3]);
}

// A block of a split launch: its rank in its cluster, its cluster's column
// units (U of them from column col_base), its rows of the transitions
// (k_base..), and its threads' roles. Warp w computes rows 32 rh + 0..31
// (fragments 2 rh, 2 rh + 1) of units uq and uq + 4, and k steps 2 uq, 2 uq
// + 1 of the ninth unit; as an owner, thread tid sums row orow at columns
// 2 op, 2 op + 1 of its units (rank, rank + HMS_KS: `owned` of them below U).
struct HmsBlock {
    int rank, cluster, clusters, tid, g, q, rh, uq, orow, op, U, owned, col_base, k_base;
    bool ninth;
};

__device__ __forceinline__ HmsBlock hms_block(int N) {
    HmsBlock k;
    k.rank = blockIdx.x % HMS_KS, k.cluster = blockIdx.x / HMS_KS, k.clusters = gridDim.x / HMS_KS;
    k.tid = threadIdx.x;
    const int w = k.tid >> 5;
    k.g = (k.tid & 31) >> 2, k.q = k.tid & 3, k.rh = w >> 2, k.uq = w & 3;
    k.orow = k.tid >> 2, k.op = k.tid & 3;
    const int units = (N + 7) / 8;
    const int u0 = (int)((long long)k.cluster * units / k.clusters);
    k.U = (int)((long long)(k.cluster + 1) * units / k.clusters) - u0;
    k.owned = (k.rank < k.U) + (k.rank + HMS_KS < k.U);
    k.col_base = 8 * u0, k.k_base = HMS_KR * k.rank;
    k.ninth = k.U > 8;
    return k;
}

// Column `col` of owned unit `j` (0, 1) of thread `op`, pair element `e`.
__device__ __forceinline__ int hms_col(const HmsBlock& k, int j, int e) {
    return k.col_base + 8 * (k.rank + HMS_KS * j) + 2 * k.op + e;
}

// The block's transitions from `right` (N x N, row from, column to) for the
// whole pass: the first 8 units' in b, b[kk][j][v] = right(k_base + 16 kk
// + q + 4 v, unit uq + 4 j, column g), the ninth unit's in bx; zeros past N
// and past the cluster's units.
__device__ __forceinline__ void hms_load_right(const HmsBlock& k, int N, const double* __restrict__ right, double (&b)[HMS_KK][2][4], double* bx) {
    const auto p_at = [&](int kr, int c) { const int from = k.k_base + kr, to = k.col_base + c; return c < 8 * k.U && from < N && to < N ? right[(long long)from * N + to] : 0.0; };
#pragma unroll
    for (int kk = 0; kk < HMS_KK; ++kk)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) b[kk][j][v] = p_at(16 * kk + k.q + 4 * v, 8 * (k.uq + 4 * j) + k.g);
    for (int i = k.tid; i < HMS_KR * 8; i += HMS_THREADS) bx[(i / 8) * HMS_LDX + i % 8] = p_at(i / 8, 64 + i % 8);
}

// Copy the block's slice of `cur` (rows below `run`; zeros for the others
// and past N) into `as`, in HMS_CHUNKS commit groups of HMS_CHUNK columns.
__device__ __forceinline__ void hms_copy_slice(const HmsBlock& k, int N, double* as, const double* cur, int run) {
    const long long ld = HMB_LD(N);
#pragma unroll
    for (int ch = 0; ch < HMS_CHUNKS; ++ch) {
        for (int i = k.tid; i < HMS_ROWS * HMS_CHUNK / 2; i += HMS_THREADS) {
            const int r = i / (HMS_CHUNK / 2), c = ch * HMS_CHUNK + 2 * (i % (HMS_CHUNK / 2));
            hmb_copy_l2(as + r * HMS_LDA + c, cur + r * ld + k.k_base + c, r < run && k.k_base + c < N);
        }
        hmb_copy_commit();
    }
}

// The step's product of the slice (as hms_copy_slice committed it, the
// chunks waited for in turn) with the block's transitions: the fragments
// of the first 8 units stored in their owners' recv, then `between()`,
// then the ninth unit's (each warp a quarter of its k, the quarters added
// in quarter order through xq) stored in its owner's. The owners read recv
// after the cluster's barrier.
template <class Between>
__device__ __forceinline__ void hms_product(const HmsBlock& k, const double* as, const double* bx, double* xq, double* recv, const double (&b)[HMS_KK][2][4], Between between) {
    double acc[2][2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[m][0][v] = acc[m][1][v] = 0.0;
    // A fragment of rows 32 rh + 16 m.. at k steps from k0.
    const auto a_frag = [&](int m, int k0, double (&a)[8]) {
#pragma unroll
        for (int v = 0; v < 8; ++v) a[v] = as[(32 * k.rh + 16 * m + k.g + 8 * (v & 1)) * HMS_LDA + k0 + k.q + 4 * (v >> 1)];
    };
#pragma unroll
    for (int ch = 0; ch < HMS_CHUNKS; ++ch) {
        hms_wait(HMS_CHUNKS - 1 - ch);
        __syncthreads();
#pragma unroll
        for (int kq = 0; kq < HMS_CHUNK / 16; ++kq) {
            const int kk = ch * (HMS_CHUNK / 16) + kq;
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                double a[8];
                a_frag(m, 16 * kk, a);
#pragma unroll
                for (int j = 0; j < 2; ++j) mma_f64_16x8x16(acc[m][j][0], acc[m][j][1], acc[m][j][2], acc[m][j][3], a, b[kk][j]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            if (k.uq + 4 * j < k.U) hms_send(recv, k.rank, 32 * k.rh + 16 * m + k.g, k.q, k.uq + 4 * j, acc[m][j]);
    between();
    if (!k.ninth) return;
    double accx[2][4] = {{0.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 0.0}};
#pragma unroll
    for (int kq = 0; kq < 2; ++kq) {
        const int k0 = 16 * (2 * k.uq + kq);
        double bb[4];
#pragma unroll
        for (int v = 0; v < 4; ++v) bb[v] = bx[(k0 + k.q + 4 * v) * HMS_LDX + k.g];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            double a[8];
            a_frag(m, k0, a);
            mma_f64_16x8x16(accx[m][0], accx[m][1], accx[m][2], accx[m][3], a, bb);
        }
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
        double* x = xq + (k.uq * HMS_ROWS + 32 * k.rh + 16 * m + k.g) * 8 + 2 * k.q;
        *reinterpret_cast<double2*>(x) = make_double2(accx[m][0], accx[m][1]);
        *reinterpret_cast<double2*>(x + 64) = make_double2(accx[m][2], accx[m][3]);
    }
    __syncthreads();
    double d[2] = {0.0, 0.0};
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) {
        const double2 x = *reinterpret_cast<const double2*>(xq + (kq * HMS_ROWS + k.orow) * 8 + 2 * k.op);
        d[0] += x.x;
        d[1] += x.y;
    }
    hms_put2(hms_remote(recv + (k.rank * HMS_ROWS + k.orow) * HMS_OWN + 8 * (8 / HMS_KS) + 2 * k.op, 8 % HMS_KS), d[0], d[1]);
}

// The owner's sums of owned unit j at its two columns: the ranks'
// fragments in rank order.
__device__ __forceinline__ double2 hms_owned_sum(const HmsBlock& k, const double* recv, int j) {
    double v0 = 0.0, v1 = 0.0;
#pragma unroll
    for (int from = 0; from < HMS_KS; ++from) {
        const double2 p = *reinterpret_cast<const double2*>(recv + (from * HMS_ROWS + k.orow) * HMS_OWN + 8 * j + 2 * k.op);
        v0 += p.x;
        v1 += p.y;
    }
    return make_double2(v0, v1);
}

// Store x at p and, with `pair`, y after it: one 16-byte store where p is
// aligned to it (N even), else two (a backward step's results cost three
// times its forward step's stores).
__device__ __forceinline__ void hms_store2(double* p, double x, double y, bool pair) {
    if (pair && (reinterpret_cast<unsigned long long>(p) & 15) == 0) {
        *reinterpret_cast<double2*>(p) = make_double2(x, y);
    } else {
        p[0] = x;
        if (pair) p[1] = y;
    }
}

// The shared memory of a split block (HMS_SMEM bytes).
struct HmsShared {
    double* as;    // [HMS_ROWS][HMS_LDA]: the slice of the state vectors
    double* bx;    // [HMS_KR][HMS_LDX]: the ninth unit's transitions
    double* xq;    // [4][HMS_ROWS][8]: the ninth unit's quarters
    double* recv;  // [HMS_KS][HMS_ROWS][HMS_OWN]: the ranks' fragments of the owned columns
    double* rsum;  // [HMS_KS][HMS_ROWS]: the ranks' sums of the slice's rows
    double* es;    // [HMS_THREADS][4]: each owner thread's emission entries
    double* ea;    // [HMS_THREADS][4]: each owner thread's alphas (backward)
    long long* rel; // [HMS_ROWS]: the rows' first symbols (forward, storing alphas)
};
__device__ __forceinline__ HmsShared hms_shared(double* dynamic) {
    HmsShared m;
    m.as = dynamic;
    m.bx = m.as + HMS_ROWS * HMS_LDA;
    m.xq = m.bx + HMS_KR * HMS_LDX;
    m.recv = m.xq + 4 * HMS_ROWS * 8;
    m.rsum = m.recv + HMS_KS * HMS_ROWS * HMS_OWN;
    m.es = m.rsum + HMS_KS * HMS_ROWS;
    m.ea = m.es + 4 * HMS_THREADS;
    m.rel = reinterpret_cast<long long*>(m.ea + 4 * HMS_THREADS);
    return m;
}
#endif

extern "C" __global__ void
#if __CUDA_ARCH__ >= 900
__cluster_dims__(HMS_KS, 1, 1)
#endif
__launch_bounds__(HMS_THREADS, 1) hmm_forward_split(
    int N, const double* __restrict__ start, const double* __restrict__ trans,
    const double* __restrict__ emis_k, const unsigned* __restrict__ sym, long long base, int rows,
    const long long* __restrict__ row_rel, const long long* __restrict__ row_len,
    const int* __restrict__ row_seq, const int* __restrict__ running,
    double* __restrict__ buf0, double* __restrict__ buf1, unsigned long long* __restrict__ bar,
    double* __restrict__ alpha, double* __restrict__ scale, double* __restrict__ loglik,
    const unsigned long long* __restrict__ mins)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) double hms_dynamic[];
    const HmsShared sm = hms_shared(hms_dynamic);
    const double theta = hmb_theta(mins);
    const HmsBlock k = hms_block(N);
    const long long ld = HMB_LD(N);
    double b[HMS_KK][2][4];
    hms_load_right(k, N, trans, b, sm.bx);
    const int orow = k.orow, op = k.op, tid = k.tid;
    const bool in_batch = orow < rows;
    const long long o_rel = in_batch ? row_rel[orow] : 0, o_len = in_batch ? row_len[orow] : 0;
    const int o_seq = in_batch ? row_seq[orow] : 0;
    const long long Tmax = rows > 0 ? row_len[0] : 0;
    double ll = 0.0;  // the row's log-likelihood (kept by block 0)
    unsigned o_sym = o_len > 0 ? sym[base + o_rel] : 0;  // its symbol at step t
    if (tid < HMS_ROWS) sm.rel[tid] = tid < rows ? row_rel[tid] : 0;
    __syncthreads();
    for (long long t = 0; t <= Tmax; ++t) {
        // Step t computes the rows running at t, and takes step t - 1's
        // scales of the rows running then (a superset: lengths are sorted).
        const double* cur = ((t - 1) & 1) ? buf1 : buf0;
        double* nxt = (t & 1) ? buf1 : buf0;
        const int run = running[t], run_prev = t > 0 ? running[t - 1] : 0;
        const bool now = orow < run;
        // The emission entries of the owned columns, copied into es[tid]
        // (zeros where none) ahead of the slice, so that they land during
        // the product without holding registers; and the next symbol.
        {
            const double* erow = emis_k + (long long)o_sym * N;
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = hms_col(k, j, e);
                    hmb_copy_ro<8>(sm.es + 4 * tid + 2 * j + e, erow + col, now && j < k.owned && col < N);
                }
            hmb_copy_commit();
            o_sym = t + 1 < o_len ? sym[base + o_rel + t + 1] : 0;
        }
        if (t == 0) hmb_copy_wait<0>();
        double mul = 0.0;  // 1 / c_{t-1} of row orow
        if (t > 0) {
            hms_copy_slice(k, N, sm.as, cur, run_prev);
            hms_product(k, sm.as, sm.bx, sm.xq, sm.recv, b, [&] {
                // This rank's sums of the slice's rows (NaN below the
                // certificate; lane op adds columns op, op + 4, ...), to
                // every block of the cluster: lane op stores to ranks op,
                // op + 4.
                const double* v = sm.as + orow * HMS_LDA + op;
                double s4[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll 8
                for (int i = 0; i < HMS_KR / 4; ++i) s4[i & 3] += (v[4 * i] > 0.0 && v[4 * i] < theta) ? HMM_NAN : v[4 * i];
                double s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
                s += __shfl_xor_sync(FULL_MASK, s, 1);
                s += __shfl_xor_sync(FULL_MASK, s, 2);
                for (int to = op; to < HMS_KS; to += 4) hms_put(hms_remote(sm.rsum + k.rank * HMS_ROWS + orow, to), s);
            });
            hms_cluster_sync();
            // c_{t-1} of the row: the ranks' sums in rank order; as
            // hmm_forward_batched, NaN when uncertain, 0 when impossible.
            double c = 0.0;
#pragma unroll
            for (int from = 0; from < HMS_KS; ++from) c += sm.rsum[from * HMS_ROWS + orow];
            const bool was = orow < run_prev;
            mul = was && c > 0.0 ? 1.0 / c : 0.0;
            if (blockIdx.x == 0 && op == 0 && was) {
                ll += c > 0.0 ? log(c) : c == c && theta <= 1.0 ? HMM_NEG_INF : HMM_NAN;
                if (o_len == t) loglik[o_seq] = ll;
            }
            if (alpha) {
                // Step t - 1's scaled alphas, as hmm_forward_batched stores
                // them: each block its slice of the rows of one cluster
                // (row r: cluster r mod clusters), a thread a column, each
                // taking the row's scale from the ranks' sums in rank order
                // (as the owners); rank 0 the scale. (The row's four owner
                // threads storing it, 32 values each, cost 1 us a step.)
                for (int e = tid;; e += HMS_THREADS) {
                    const int r = k.cluster + k.clusters * (e / HMS_KR), i = e % HMS_KR;
                    if (r >= run_prev) break;
                    double cr = 0.0;
#pragma unroll
                    for (int from = 0; from < HMS_KS; ++from) cr += sm.rsum[from * HMS_ROWS + r];
                    if (!(cr > 0.0) || k.k_base + i >= N) continue;
                    alpha[(sm.rel[r] + t - 1) * N + k.k_base + i] = sm.as[r * HMS_LDA + i] * (1.0 / cr);
                    if (k.rank == 0 && i == 0) scale[sm.rel[r] + t - 1] = cr;
                }
            }
        }
        // Step t of the owned columns: (the ranks' fragments in rank order)
        // / c_{t-1} .* e(o_t), or start .* e(o_0).
        if (now) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                if (j >= k.owned) break;
                const int col = hms_col(k, j, 0);
                double v0 = 0.0, v1 = 0.0;
                if (t == 0) {
                    v0 = col < N ? start[col] : 0.0;
                    v1 = col + 1 < N ? start[col + 1] : 0.0;
                } else {
                    const double2 v = hms_owned_sum(k, sm.recv, j);
                    v0 = v.x * mul;
                    v1 = v.y * mul;
                }
                const double e0 = sm.es[4 * tid + 2 * j], e1 = sm.es[4 * tid + 2 * j + 1];
                double* out = nxt + orow * ld + col;
                if (col + 1 < N) __stcg(reinterpret_cast<double2*>(out), make_double2(v0 * e0, v1 * e1));
                else if (col < N) __stcg(out, v0 * e0);
            }
        }
        if (t < Tmax) hmb_grid_sync(bar);
    }
#endif
}

// hmm_backward_split: hmm_backward_batched's pass (same arguments and
// results) for the batches hmm_forward_split runs, each step's product
// split the same way. Its right operand is the transposed transitions, its
// left the rows w_{t+1} = B(o_{t+1}) .* beta_hat_{t+1} / c_{t+1} that the
// step before wrote; there are no scales to sum. Each owner thread copies
// its alphas and the next emission entries into shared memory ahead of the
// product; after the cluster's barrier it adds the ranks' fragments in
// rank order (beta_hat_t), writes gamma = alpha .* beta_hat_t and, but at
// t = 0, w_t to the next step's buffer and to tmp_out. Rows whose sequence
// is impossible or uncertain (loglik not above -inf) get NaN gamma rows
// and zero tmp rows, as there.
extern "C" __global__ void
#if __CUDA_ARCH__ >= 900
__cluster_dims__(HMS_KS, 1, 1)
#endif
__launch_bounds__(HMS_THREADS, 1) hmm_backward_split(
    int N, const double* __restrict__ trans_t, const double* __restrict__ emis_k,
    const unsigned* __restrict__ sym, long long base, int rows,
    const long long* __restrict__ row_rel, const long long* __restrict__ row_len,
    const int* __restrict__ row_seq, const int* __restrict__ running,
    double* __restrict__ buf0, double* __restrict__ buf1,
    unsigned long long* __restrict__ bar, const double* __restrict__ alpha, const double* __restrict__ scale,
    const double* __restrict__ loglik, double* __restrict__ gamma, double* __restrict__ tmp_out)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) double hms_dynamic[];
    const HmsShared sm = hms_shared(hms_dynamic);
    const HmsBlock k = hms_block(N);
    const long long ld = HMB_LD(N);
    double b[HMS_KK][2][4];
    hms_load_right(k, N, trans_t, b, sm.bx);
    const int orow = k.orow, tid = k.tid;
    const bool in_batch = orow < rows;
    const long long o_rel = in_batch ? row_rel[orow] : 0, o_len = in_batch ? row_len[orow] : 0;
    const bool o_ok = in_batch && loglik[row_seq[orow]] > HMM_NEG_INF;
    const long long Tmax = rows > 0 ? row_len[0] : 0;
    // Each block owns its columns of every row: the last step (beta = 1,
    // gamma = alpha, w = B(o_{len-1}) / c_{len-1}) or an impossible row's
    // NaN and zero rows; 0 in the buffer for the latter.
    if (in_batch && k.rank < k.U) {
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = hms_col(k, j, e);
                if (j >= k.owned || col >= N) continue;
                buf0[orow * ld + col] = 0.0;
                hmb_backward_last(N, col, o_rel, o_len, o_ok, emis_k, sym, base, alpha, scale, buf0 + orow * ld + col, gamma, tmp_out);
            }
    }
    for (long long u = 0; u + 1 < Tmax; ++u) {
        hmb_grid_sync(bar);
        const double* cur = (u & 1) ? buf1 : buf0;
        double* nxt = (u & 1) ? buf0 : buf1;
        // Rows with t = len - 2 - u >= 0 (a prefix: lengths are sorted).
        const int run = running[u + 1];
        const long long t = o_len - 2 - u, at = o_rel + t;
        const bool now = orow < run && o_ok, wnext = now && t > 0;
        // The row's alphas at t and emission entries at t (for w_t, none
        // at t = 0) of the owned columns, copied into ea[tid] and es[tid]
        // (zeros where none) ahead of the slice, so that they land during
        // the product; and the scale c_t.
        {
            const double* erow = emis_k + (long long)(wnext ? sym[base + at] : 0) * N;
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = hms_col(k, j, e);
                    const bool ok = j < k.owned && col < N;
                    hmb_copy_ro<8>(sm.ea + 4 * tid + 2 * j + e, alpha + at * N + col, now && ok);
                    hmb_copy_ro<8>(sm.es + 4 * tid + 2 * j + e, erow + col, wnext && ok);
                }
            hmb_copy_commit();
        }
        const double mul = wnext ? 1.0 / scale[at] : 0.0;
        hms_copy_slice(k, N, sm.as, cur, run);
        hms_product(k, sm.as, sm.bx, sm.xq, sm.recv, b, [] {});
        hms_cluster_sync();
        if (!now) {
            // An impossible row's next slice: zeros, as its first.
            if (orow < run && in_batch)
                for (int j = 0; j < k.owned; ++j)
                    for (int e = 0; e < 2; ++e)
                        if (hms_col(k, j, e) < N) nxt[orow * ld + hms_col(k, j, e)] = 0.0;
            continue;
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            if (j >= k.owned) break;
            const int col = hms_col(k, j, 0);
            if (col >= N) continue;
            const bool pair = col + 1 < N;
            const double2 beta = hms_owned_sum(k, sm.recv, j);
            const double* a = sm.ea + 4 * tid + 2 * j;
            const double b0 = a[0] == 0.0 ? 0.0 : beta.x, b1 = a[1] == 0.0 ? 0.0 : beta.y;
            if (gamma) hms_store2(gamma + at * N + col, a[0] * b0, a[1] * b1, pair);
            if (!wnext) continue;
            const double* e = sm.es + 4 * tid + 2 * j;
            const double w0 = b0 * e[0] * mul, w1 = b1 * e[1] * mul;
            hms_store2(nxt + orow * ld + col, w0, w1, pair);
            if (tmp_out) hms_store2(tmp_out + (at - 1) * N + col, w0, w1, pair);
        }
    }
#endif
}

// Scaled backward pass of a batch whose forward pass stored alpha and
// scale (hmm_forward_batched, or any forward kernel: same layouts). Row
// order as in the forward pass. The step computing beta_hat_t multiplies
// the transitions with w_{t+1} = B(o_{t+1}) .* beta_hat_{t+1} / c_{t+1},
// which the step before wrote to cur (so the product's operands are plain
// copies). Writes posterior rows to `gamma` (non-null) and, with
// `tmp_out`, row t of each sequence receives w_{t+1} for hmm_xi_gemm, the
// last row 0. Impossible sequences (loglik -inf) get NaN gamma rows and
// zero tmp rows.
extern "C" __global__ void __launch_bounds__(HMB_THREADS, 1) hmm_backward_batched(
    int N, const double* __restrict__ trans_t, const double* __restrict__ emis_k,
    const unsigned* __restrict__ sym, long long base, int rows,
    const long long* __restrict__ row_rel, const long long* __restrict__ row_len,
    const int* __restrict__ row_seq, const int* __restrict__ running,
    double* __restrict__ buf0, double* __restrict__ buf1,
    unsigned long long* __restrict__ bar, const double* __restrict__ alpha, const double* __restrict__ scale,
    const double* __restrict__ loglik, double* __restrict__ gamma, double* __restrict__ tmp_out)
{
    __shared__ HmbShared sh;
    __shared__ long long t_of[HMB_BM];
    extern __shared__ double hmb_dynamic[];
    HmbStage* stages = reinterpret_cast<HmbStage*>(hmb_dynamic);
    const HmbBatch bt = {row_rel, row_len, row_seq, running};
    const HmbGrid gr = hmb_grid(N, rows, row_len);
    const int col_tiles = gr.col_tiles, tiles = gr.tiles;
    const long long Tmax = gr.longest;
    const long long ld = HMB_LD(N);
    const double* right = hmb_right(trans_t, N, col_tiles, hmb_dynamic);
    // Last step: beta = 1, gamma = alpha, w = B(o_{len-1}) / c_{len-1};
    // impossible rows: NaN / zero rows.
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int row0 = (tile / col_tiles) * HMB_BM, col0 = (tile % col_tiles) * HMB_BN;
        __syncthreads();
        hmb_load_rows(sh, row0, rows, bt);
        __syncthreads();
        for (int q = threadIdx.x; q < HMB_BM * HMB_BN; q += blockDim.x) {
            const int r = q / HMB_BN, j = col0 + q % HMB_BN;
            const long long len = sh.rows.len[r];
            if (len == 0 || j >= N) continue;
            const bool ok = loglik[sh.rows.seq[r]] > HMM_NEG_INF;
            hmb_backward_last(N, j, sh.rows.rel[r], len, ok, emis_k, sym, base, alpha, scale, buf0 + (row0 + r) * ld + j, gamma, tmp_out);
        }
    }
    // Row r of the block's first tile (thread r): its data, read once, and
    // the symbol and scale of its next step, read before the grid barrier
    // with the next step's count of running rows, so that their latency
    // hides in the barrier's (as in the forward pass).
    const int first_row = (blockIdx.x / col_tiles) * HMB_BM + threadIdx.x;
    const bool first_in = threadIdx.x < HMB_BM && (int)blockIdx.x < tiles && first_row < rows;
    const long long f_rel = first_in ? bt.rel[first_row] : 0, f_len = first_in ? bt.len[first_row] : 0;
    const int f_seq = first_in ? bt.seq[first_row] : 0;
    const bool f_ok = first_in && loglik[f_seq] > HMM_NEG_INF;
    // w_t's symbol and scale at step u (at = rel + len - 2 - u > rel).
    const auto f_at = [&](long long u) { return f_rel + f_len - 2 - u; };
    unsigned f_sym = 0;
    double f_scale = 1.0;
    if (f_ok && f_at(0) > f_rel) f_sym = sym[base + f_at(0)], f_scale = scale[f_at(0)];
    int run_at = Tmax > 1 ? running[1] : 0;  // running[u + 1]
    for (long long u = 0; u + 1 < Tmax; ++u) {
        hmb_grid_sync(bar);
        const double* cur = (u & 1) ? buf1 : buf0;
        double* nxt = (u & 1) ? buf0 : buf1;
        // Rows with t = len - 2 - u >= 0.
        const int run = run_at;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int row0 = (tile / col_tiles) * HMB_BM, col0 = (tile % col_tiles) * HMB_BN;
            if (row0 >= run) continue;
            __syncthreads();
            if (tile == (int)blockIdx.x) {
                // The first tile's rows from the registers.
                if (threadIdx.x < HMB_BM) {
                    const int r = threadIdx.x;
                    const long long len = row0 + r < run ? f_len : 0;
                    t_of[r] = len - 2 - u;
                    const bool on = len > 0 && f_ok;
                    sh.rows.seq[r] = on ? f_seq : 0;
                    sh.rows.rel[r] = on ? f_rel : 0;
                    sh.rows.len[r] = on ? len : 0;
                    sh.rows.erow[r] = on && f_at(u) > f_rel ? (long long)f_sym * N : -1;
                    sh.rows.mul[r] = on && f_at(u) > f_rel ? 1.0 / f_scale : 0.0;
                }
            } else {
                hmb_load_rows(sh, row0, run, bt);
                __syncthreads();
                for (int r = threadIdx.x; r < HMB_BM; r += blockDim.x) {
                    const long long len = sh.rows.len[r];
                    t_of[r] = len - 2 - u;
                    if (len == 0) continue;
                    if (!(loglik[sh.rows.seq[r]] > HMM_NEG_INF)) {
                        sh.rows.len[r] = 0;
                        continue;
                    }
                    // w_t for the next step (none after t = 0).
                    const long long at = sh.rows.rel[r] + len - 2 - u;
                    if (at > sh.rows.rel[r]) {
                        sh.rows.erow[r] = (long long)sym[base + at] * N;
                        sh.rows.mul[r] = 1.0 / scale[at];
                    }
                }
            }
            __syncthreads();
            double acc[HMB_OUT];
            hmb_tile_product(N, {cur, row0, run, sh.rows.len}, right, col0, stages, acc);
            // Group 0 holds beta_hat in the mma layout (a warp's store
            // would touch 8 rows at stride 2). Through shared memory (group
            // 0's stage buffers, free after the product) every thread of
            // the block then handles consecutive columns of a row, so the
            // alpha reads and the gamma, w and tmp writes are coalesced
            // (N = 512, M = 512, T = 16: 343 -> 253 us). The forward pass
            // gained nothing from the same change: its other groups already
            // store the alphas coalesced while group 0 writes the step.
            double (*beta)[HMB_BN + 1] = reinterpret_cast<double (*)[HMB_BN + 1]>(&stages[0].a[0][0][0]);
            if (threadIdx.x < HMB_GROUP) {
#pragma unroll
                for (int q = 0; q < HMB_OUT; ++q) beta[hmb_out_row(q)][hmb_out_col(q)] = acc[q];
            }
            __syncthreads();
            for (int q = threadIdx.x; q < HMB_BM * HMB_BN; q += blockDim.x) {
                const int r = q / HMB_BN, c = q % HMB_BN, j = col0 + c;
                if (sh.rows.len[r] == 0 || j >= N) continue;
                const long long at = (sh.rows.rel[r] + t_of[r]) * N;
                const double a = alpha[at + j];
                const double b = a == 0.0 ? 0.0 : beta[r][c];
                if (gamma) gamma[at + j] = a * b;
                if (sh.rows.erow[r] < 0) continue;
                const double w = b * emis_k[sh.rows.erow[r] + j] * sh.rows.mul[r];
                nxt[(row0 + r) * ld + j] = w;
                if (tmp_out) tmp_out[at - N + j] = w;
            }
        }
        run_at = u + 2 < Tmax ? running[u + 2] : 0;
        if (f_ok && f_at(u + 1) > f_rel) f_sym = sym[base + f_at(u + 1)], f_scale = scale[f_at(u + 1)];
    }
}

// Start and emission counts of a batch from its posteriors (gamma, laid out
// like the batch's symbols), added to counts = start (N), transitions
// (N*N, untouched), emissions by symbol (V*N). The host groups the batch's
// positions by symbol (by_sym_off[V + 1] into by_sym_pos, batch-relative,
// with by_sym_seq = sequence - s0), so every count is summed in a fixed
// order. Block (v, y) for v < V sums the positions of symbol v; blocks
// with v == V sum the first position of every sequence. Impossible
// sequences (loglik -inf) are skipped.
#define HMB_COUNT_THREADS 256
extern "C" __global__ void __launch_bounds__(HMB_COUNT_THREADS) hmm_count_emissions(
    int N, int V, const long long* __restrict__ by_sym_off, const long long* __restrict__ by_sym_pos,
    const int* __restrict__ by_sym_seq, const long long* __restrict__ off, int s0, int s1,
    const double* __restrict__ loglik, const double* __restrict__ gamma, double* __restrict__ counts)
{
    // A chunk of positions (row offsets, 0 for impossible sequences'
    // positions, which are skipped) is staged in shared memory, so each
    // thread's loads of gamma are independent of one another.
    __shared__ long long at[HMB_COUNT_THREADS];
    const int v = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    const long long base = off[s0];
    const long long p0 = v < V ? by_sym_off[v] : 0;
    const long long p1 = v < V ? by_sym_off[v + 1] : s1 - s0;
    double s = 0.0;
    for (long long c = p0; c < p1; c += blockDim.x) {
        const long long p = c + threadIdx.x;
        if (p < p1) {
            const int q = v < V ? by_sym_seq[p] : (int)(p);
            const long long row = v < V ? by_sym_pos[p] : off[s0 + q] - base;
            at[threadIdx.x] = loglik[q] > HMM_NEG_INF ? row * N + 1 : 0;
        }
        __syncthreads();
        const int n = (int)(p1 - c < blockDim.x ? p1 - c : blockDim.x);
        if (i < N) {
            // Eight loads issued before their adds (with a conditional load
            // per add: 55 us instead of 41 at N = V = 512, 8,192 positions,
            // ncu: 78 cycles per issued instruction); a skipped position
            // adds +0, which changes no sum. The remainder has its own loop:
            // one loop guarding k + u < n per load took 52 us.
            int k = 0;
            for (; k + 8 <= n; k += 8) {
                double x[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    const long long a = at[k + u];
                    x[u] = a ? gamma[a - 1 + i] : 0.0;
                }
#pragma unroll
                for (int u = 0; u < 8; ++u) s += x[u];
            }
            for (; k < n; ++k) {
                const long long a = at[k];
                if (a) s += gamma[a - 1 + i];
            }
        }
        __syncthreads();
    }
    if (i >= N) return;
    if (v < V) counts[(long long)N + (long long)N * N + (long long)v * N + i] += s;
    else counts[i] += s;
}

// Keep the smallest positive value of `p` over a warp in *key (bit-inverted,
// see hmm.cu's hmm_theta), one atomic per warp; p <= 0 counts as none.
__device__ __forceinline__ void hmb_keep_min(double p, unsigned long long* key) {
    unsigned long long k = p > 0.0 && p < HMB_POS_INF ? ~(unsigned long long)__double_as_longlong(p) : 0ULL;
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long other = __shfl_xor_sync(FULL_MASK, k, o);
        k = other > k ? other : k;
    }
    if ((threadIdx.x & 31) == 0 && k != 0) atomicMax(key, k);
}

// The smallest positive start-or-transition (mins[0]) and emission
// (mins[1]) probabilities of tables copied from the host, as
// hmb_keep_min keeps them (mins zeroed by the host): the forward kernels'
// certificate without a pass over the tables on the host (0.06-0.10 ms at
// N = 512). `emis` in any order (N * V values). Grid-stride; blockDim: a
// multiple of 32.
extern "C" __global__ void hmm_table_mins(
    int N, long long n_emis, const double* __restrict__ start, const double* __restrict__ trans,
    const double* __restrict__ emis, unsigned long long* __restrict__ mins)
{
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n_a = (long long)N + (long long)N * N;
    double low_a = HMB_POS_INF, low_e = HMB_POS_INF;
    for (long long k = first; k < n_a; k += stride) {
        const double p = k < N ? start[k] : trans[k - N];
        if (p > 0.0 && p < low_a) low_a = p;
    }
    for (long long k = first; k < n_emis; k += stride) {
        const double p = emis[k];
        if (p > 0.0 && p < low_e) low_e = p;
    }
    hmb_keep_min(low_a, &mins[0]);
    hmb_keep_min(low_e, &mins[1]);
}

// The M-step on the device: from the counts (start, trans_raw, emissions by
// symbol) and the current tables, the next tables (start, trans, trans_t,
// emis_k), as core/src/hmm/baum_welch.rs's m_step: each probability vector
// is counts + pc normalised, and a vector with no (or non-finite) mass
// keeps its old values. Block i < N re-estimates row i of the transitions
// and emissions; block N the start probabilities. mins2 (zeroed by the
// host) receives the new tables' smallest positive start-or-transition and
// emission probabilities; low_trans (zeroed, or null) the smallest
// transition, zeros included, in the same key (a density emission's
// certificate asks whether every transition is dense). V = 0 (a density
// emission, whose M-step runs on the host): start and transitions only.
// Shared: 32 doubles. blockDim: a multiple of 32.
extern "C" __global__ void hmm_m_step(
    int N, int V, double pc, const double* __restrict__ counts,
    const double* __restrict__ start, const double* __restrict__ trans, const double* __restrict__ emis_k,
    double* __restrict__ start2, double* __restrict__ trans2, double* __restrict__ trans_t2,
    double* __restrict__ emis_k2, unsigned long long* __restrict__ mins2,
    unsigned long long* __restrict__ low_trans)
{
    __shared__ double red[32];
    const int i = blockIdx.x;
    const double* c_start = counts;
    const double* c_trans = counts + N;
    const double* c_emis = counts + N + (long long)N * N;
    if (i == N) {
        double s = 0.0;
        for (int j = threadIdx.x; j < N; j += blockDim.x) s += c_start[j] + pc;
        s = block_sum(s, red);
        const bool ok = s > 0.0 && isfinite(s);
        double low = HMB_POS_INF;
        for (int j = threadIdx.x; j < N; j += blockDim.x) {
            const double p = ok ? (c_start[j] + pc) / s : start[j];
            start2[j] = p;
            if (p > 0.0 && p < low) low = p;
        }
        hmb_keep_min(low, &mins2[0]);
        return;
    }
    const long long row = (long long)i * N;
    double s = 0.0;
    // A zero transition has no count, whatever its raw sum (0 x inf = NaN).
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += (trans[row + j] > 0.0 ? trans[row + j] * c_trans[row + j] : 0.0) + pc;
    s = block_sum(s, red);
    bool ok = s > 0.0 && isfinite(s);
    double low = HMB_POS_INF, low0 = HMB_POS_INF;
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        const double p = ok ? ((trans[row + j] > 0.0 ? trans[row + j] * c_trans[row + j] : 0.0) + pc) / s : trans[row + j];
        trans2[row + j] = p;
        trans_t2[(long long)j * N + i] = p;
        if (p > 0.0 && p < low) low = p;
        if (p < low0) low0 = p;
    }
    hmb_keep_min(low, &mins2[0]);
    if (low_trans) {
        // ~bits orders non-negative doubles downwards, 0 included.
        unsigned long long k = low0 >= 0.0 ? ~(unsigned long long)__double_as_longlong(low0) : 0ULL;
        for (int o = 16; o > 0; o >>= 1) {
            const unsigned long long other = __shfl_xor_sync(FULL_MASK, k, o);
            k = other > k ? other : k;
        }
        if ((threadIdx.x & 31) == 0) atomicMax(low_trans, k);
    }
    if (V == 0) return;
    s = 0.0;
    for (int k = threadIdx.x; k < V; k += blockDim.x) s += c_emis[(long long)k * N + i] + pc;
    s = block_sum(s, red);
    ok = s > 0.0 && isfinite(s);
    low = HMB_POS_INF;
    for (int k = threadIdx.x; k < V; k += blockDim.x) {
        const long long at = (long long)k * N + i;
        const double p = ok ? (c_emis[at] + pc) / s : emis_k[at];
        emis_k2[at] = p;
        if (p > 0.0 && p < low) low = p;
    }
    hmb_keep_min(low, &mins2[1]);
}

// Transition counts of a batch, as one matrix product over all its time
// steps: xi_raw(i, j) += sum_r alpha[r, i] * tmp[r, j] (rows r = symbols
// of the batch; tmp's last row of each sequence is 0). Used for large N
// and wherever per-step count updates would go to global memory. Output
// tiles of XI_TILE x XI_TILE per block of 4 warps (32 x 32 each, on the
// tensor cores as in hmb_stage_mma); rows are streamed through an
// XI_STAGES-deep pipeline of asynchronous copies. blockIdx.z splits the
// rows: split z adds its sums, in row order, into the transition part of
// accumulator z. Dynamic shared memory: XI_STAGES XiStage.
#define XI_TILE 64
#define XI_BK 16
#define XI_STAGES 4
#define XI_THREADS 128
#define XI_S (XI_TILE + 4)
struct XiStage {
    __align__(16) double a[XI_BK][XI_S];  // alpha rows (r, i)
    __align__(16) double b[XI_BK][XI_S];  // tmp rows (r, j)
};
extern "C" __global__ void __launch_bounds__(XI_THREADS) hmm_xi_gemm(int N, long long rows,
                                                                    const double* __restrict__ alpha,
                                                                    const double* __restrict__ tmp,
                                                                    double* __restrict__ partial, long long acc_size)
{
    extern __shared__ double hmb_dynamic[];
    XiStage* st = reinterpret_cast<XiStage*>(hmb_dynamic);
    const int tid = threadIdx.x, w = tid >> 5, g = (tid & 31) >> 2, kq = tid & 3;
    const int i0 = blockIdx.x * XI_TILE, j0 = blockIdx.y * XI_TILE;
    const long long per = (rows + gridDim.z - 1) / gridDim.z;
    const long long r0 = blockIdx.z * per;
    const long long r1 = r0 + per < rows ? r0 + per : rows;
    const long long ktiles = r1 > r0 ? (r1 - r0 + XI_BK - 1) / XI_BK : 0;
    // Copy rows [rb, rb + XI_BK) of both operands' column tiles into stage buf.
    auto load = [&](int buf, long long rb) {
        if ((N & 1) == 0) {
#pragma unroll
            for (int q = 0; q < XI_BK * XI_TILE / 2 / XI_THREADS; ++q) {
                const int idx = tid + XI_THREADS * q, k = idx / (XI_TILE / 2), c = 2 * (idx % (XI_TILE / 2));
                const long long r = rb + k;
                const bool oa = r < r1 && i0 + c < N, ob = r < r1 && j0 + c < N;
                hmb_copy_ro<16>(&st[buf].a[k][c], oa ? alpha + r * N + i0 + c : alpha, oa);
                hmb_copy_ro<16>(&st[buf].b[k][c], ob ? tmp + r * N + j0 + c : tmp, ob);
            }
        } else {
#pragma unroll
            for (int q = 0; q < XI_BK * XI_TILE / XI_THREADS; ++q) {
                const int idx = tid + XI_THREADS * q, k = idx / XI_TILE, c = idx % XI_TILE;
                const long long r = rb + k;
                const bool oa = r < r1 && i0 + c < N, ob = r < r1 && j0 + c < N;
                hmb_copy_ro<8>(&st[buf].a[k][c], oa ? alpha + r * N + i0 + c : alpha, oa);
                hmb_copy_ro<8>(&st[buf].b[k][c], ob ? tmp + r * N + j0 + c : tmp, ob);
            }
        }
    };
#pragma unroll
    for (int s = 0; s < XI_STAGES - 1; ++s) {
        if (s < ktiles) load(s, r0 + (long long)s * XI_BK);
        hmb_copy_commit();
    }
    // Warp w: rows i0 + 32 (w / 2) + 0..31, columns j0 + 32 (w % 2) + 0..31,
    // as 2 x 4 fragments of 16 x 8 (layout of hmb_out_row).
    const int ib = 32 * (w >> 1), jb = 32 * (w & 1);
    double acc[2][4][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[m][n][q] = 0.0;
    for (long long kt = 0; kt < ktiles; ++kt) {
        hmb_copy_wait<XI_STAGES - 2>();
        __syncthreads();
        const long long next = kt + XI_STAGES - 1;
        if (next < ktiles) load((int)(next % XI_STAGES), r0 + next * XI_BK);
        hmb_copy_commit();
        const XiStage& s = st[kt % XI_STAGES];
#pragma unroll
        for (int k4 = 0; k4 < XI_BK; k4 += 4) {
            double a[2][2], b[4];
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                a[m][0] = s.a[k4 + kq][ib + 16 * m + g];
                a[m][1] = s.a[k4 + kq][ib + 16 * m + g + 8];
            }
#pragma unroll
            for (int n = 0; n < 4; ++n) b[n] = s.b[k4 + kq][jb + 8 * n + g];
#pragma unroll
            for (int m = 0; m < 2; ++m)
#pragma unroll
                for (int n = 0; n < 4; ++n)
                    hmb_mma16(acc[m][n][0], acc[m][n][1], acc[m][n][2], acc[m][n][3], a[m][0], a[m][1], b[n]);
        }
    }
    double* xi = partial + blockIdx.z * acc_size + N;
    const int c2 = 2 * (tid & 3);
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int i = i0 + ib + 16 * m + g + 8 * (q >> 1), j = j0 + jb + 8 * n + c2 + (q & 1);
                if (i < N && j < N) xi[(long long)i * N + j] += acc[m][n][q];
            }
}

// ---- Viterbi for large N: max-plus products over the whole grid ----------
// Every step is one max-plus product (rows x states) x (states x states),
// tiled over the grid as the forward pass's products are, with a grid
// barrier between steps (cooperative launch). Instead of back-pointers,
// every row's log vector of every step is kept (`vals`, P doubles per
// symbol, P = N rounded up to HMV_BN, pad columns -inf), so the product's
// inner loop is one add and one compare-and-select per pair and keeps no
// index. The walk back then recomputes each pointer from the vector of the
// step before:
// the first i maximising vals_{t-1}[i] + log A[i][j], the same sums the
// CPU compares (strictly greater, lowest state on ties), so values and
// paths are bit-identical to the CPU's. No log value is -0 (logs of
// probabilities <= 1 are +0 or negative), so the max of a set of sums does
// not depend on the order it is taken in.
#define HMV_BM 16            // rows per tile
#define HMV_BN 32            // columns per tile, a lane each
#define HMV_BK 16            // k per stage
#define HMV_RM 8             // rows per thread
#define HMV_GROUP 64         // threads of a group: 2 warps x 8 rows
#define HMV_GROUPS 8         // groups of a block, each taking every 8th stage
#define HMV_THREADS (HMV_GROUP * HMV_GROUPS)
#define HMV_STAGES 3
#define HMV_NO_STATE 0xffffffffu

struct HmvStage {
    __align__(16) double a[HMV_STAGES][HMV_BM][HMV_BK];  // row vectors (row, k)
    __align__(16) double b[HMV_STAGES][HMV_BK][HMV_BN];  // log transitions (k, column)
};
static_assert(HMV_BM * HMV_BN <= sizeof(HmvStage) / sizeof(double), "a stage buffer holds a group's maxima");

// The larger of a and b (no NaN arrives here): a compare and a select.
// fmax, with its NaN rules, took about 10 instructions per pair in all
// (N = 1024, Nsight Compute).
__device__ __forceinline__ double hmv_max(double a, double b) {
    return b > a ? b : a;
}

__device__ __forceinline__ void hmv_group_sync(int g) {
    asm volatile("bar.sync %0, %1;" ::"r"(1 + g), "n"(HMV_GROUP) : "memory");
}

// lp[i * P + j] = ltrans[i * N + j] and lpt[j * P + i] the same, -inf
// outside N x N (the products read whole tiles without bounds checks).
extern "C" __global__ void hmm_vit_pad(int N, int P, const double* __restrict__ ltrans, double* __restrict__ lp,
                                       double* __restrict__ lpt)
{
    const long long size = (long long)P * P;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < size; q += (long long)gridDim.x * blockDim.x) {
        const int i = (int)(q / P), j = (int)(q % P);
        const double v = i < N && j < N ? ltrans[(long long)i * N + j] : HMM_NEG_INF;
        lp[q] = v;
        lpt[(long long)j * P + i] = v;
    }
}

// best[r] = max over k of a(8w + r, k) + b(k, lane) over group g's stages
// (g, g + HMV_GROUPS, ...) of the tile at col0, where a's rows are
// vals[prev[r] + k] (prev[r] < 0: a row not running, left unloaded, whose
// maxima are never used) and b = lp[k * P + col0 + c]. Each group streams
// its stages through its own pipeline of asynchronous copies.
__device__ void hmv_tile_max(int P, int col0, const double* __restrict__ vals, const double* __restrict__ lp,
                             const long long* prev, HmvStage* stages, double best[HMV_RM])
{
    const int group = threadIdx.x / HMV_GROUP, tid = threadIdx.x % HMV_GROUP;
    const int w = tid >> 5, lane = tid & 31;
    HmvStage& st = stages[group];
#pragma unroll
    for (int r = 0; r < HMV_RM; ++r) best[r] = HMM_NEG_INF;
    auto load = [&](int buf, int k0) {
#pragma unroll
        for (int q = 0; q < HMV_BM * HMV_BK / 2 / HMV_GROUP; ++q) {
            const int idx = tid + HMV_GROUP * q, r = idx / (HMV_BK / 2), k = 2 * (idx % (HMV_BK / 2));
            // Written by other blocks during this launch: through L2 only.
            if (prev[r] >= 0) hmb_copy_l2(&st.a[buf][r][k], vals + prev[r] + k0 + k, true);
        }
#pragma unroll
        for (int q = 0; q < HMV_BK * HMV_BN / 2 / HMV_GROUP; ++q) {
            const int idx = tid + HMV_GROUP * q, k = idx / (HMV_BN / 2), c = 2 * (idx % (HMV_BN / 2));
            hmb_copy_ro<16>(&st.b[buf][k][c], lp + (long long)(k0 + k) * P + col0 + c, true);
        }
    };
    const int stride = HMV_BK * HMV_GROUPS, kg = group * HMV_BK;
    const int rounds = (P - kg + stride - 1) / stride;  // this group's stages
#pragma unroll
    for (int s = 0; s < HMV_STAGES - 1; ++s) {
        if (s < rounds) load(s, kg + s * stride);
        hmb_copy_commit();
    }
    for (int round = 0; round < rounds; ++round) {
        hmb_copy_wait<HMV_STAGES - 2>();
        hmv_group_sync(group);
        const int next = round + HMV_STAGES - 1;
        if (next < rounds) load(next % HMV_STAGES, kg + next * stride);
        hmb_copy_commit();
        const double(*a)[HMV_BK] = st.a[round % HMV_STAGES];
        const double(*b)[HMV_BN] = st.b[round % HMV_STAGES];
#pragma unroll
        for (int k = 0; k < HMV_BK; k += 2) {
            const double b0 = b[k][lane], b1 = b[k + 1][lane];
#pragma unroll
            for (int r = 0; r < HMV_RM; ++r) {
                const double2 x = *reinterpret_cast<const double2*>(&a[HMV_RM * w + r][k]);
                best[r] = hmv_max(best[r], x.x + b0);
                best[r] = hmv_max(best[r], x.y + b1);
            }
        }
    }
    hmb_copy_wait<0>();
}

// (b, a) becomes the first of (b, a) and (ob, oa): the larger value, or
// the lower index on a tie.
__device__ __forceinline__ void hmv_keep_first(double& b, int& a, double ob, int oa) {
    if (ob > b || (ob == b && oa < a)) {
        b = ob;
        a = oa;
    }
}

// The first i < P maximising x[i] (+ y[i] when y is non-null), over the
// block (thread k takes i = k, k + blockDim.x, ...; then warps, then the
// warps' results in shared `red_b` / `red_a`, 32 each); every thread gets
// (best, arg). All -inf: (-inf, 0), as the CPU's strictly-greater scan
// from -inf gives. The loads of a step are independent of one another, so
// a step of the walk back costs about one L2 round trip.
__device__ void hmv_first_max(const double* __restrict__ x, const double* __restrict__ y, int P, double* red_b,
                              int* red_a, double& best, int& arg)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    double b = HMM_NEG_INF;
    int a = 0x7fffffff;
    for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const double v = y ? __ldcg(&x[i]) + __ldg(&y[i]) : __ldcg(&x[i]);
        hmv_keep_first(b, a, v, i);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) hmv_keep_first(b, a, __shfl_xor_sync(FULL_MASK, b, o), __shfl_xor_sync(FULL_MASK, a, o));
    if (lane == 0) {
        red_b[warp] = b;
        red_a[warp] = a;
    }
    __syncthreads();
    b = lane < warps ? red_b[lane] : HMM_NEG_INF;
    a = lane < warps ? red_a[lane] : 0x7fffffff;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) hmv_keep_first(b, a, __shfl_xor_sync(FULL_MASK, b, o), __shfl_xor_sync(FULL_MASK, a, o));
    __syncthreads();  // red_* free for the next call
    best = b;
    arg = a;
}

// Viterbi over a batch of `rows` sequences (HmbBatch's arrays, sorted by
// decreasing length; sym[base + rel + t] is symbol t of a row): lp / lpt
// from hmm_vit_pad, vals holds P doubles per symbol of the batch (every
// entry a row reads is written first), bar a zeroed hmb_grid_sync counter. Then a
// block per row walks back: path as hmm.cu's Viterbi kernels lay it out
// (HMV_NO_STATE throughout for an impossible sequence), logp[s - s0].
extern "C" __global__ void __launch_bounds__(HMV_THREADS) hmm_viterbi_batched(
    int N, int P, const double* __restrict__ lstart, const double* __restrict__ lp, const double* __restrict__ lpt,
    const double* __restrict__ lemis_k, const unsigned* __restrict__ sym, long long base, int rows,
    const long long* __restrict__ row_rel, const long long* __restrict__ row_len,
    const int* __restrict__ row_seq, const int* __restrict__ running,
    double* __restrict__ vals, unsigned long long* __restrict__ bar, unsigned* __restrict__ path, double* __restrict__ logp)
{
    __shared__ long long prev[HMV_BM], out[HMV_BM], erow[HMV_BM];
    extern __shared__ double hmb_dynamic[];
    HmvStage* stages = reinterpret_cast<HmvStage*>(hmb_dynamic);
    const int col_tiles = P / HMV_BN;
    const int tiles = ((rows + HMV_BM - 1) / HMV_BM) * col_tiles;
    const long long Tmax = rows > 0 ? row_len[0] : 0;
    for (long long t = 0; t < Tmax; ++t) {
        const int run = running[t];
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int row0 = (tile / col_tiles) * HMV_BM, col0 = (tile % col_tiles) * HMV_BN;
            if (row0 >= run) continue;
            __syncthreads();
            if (threadIdx.x < HMV_BM) {
                const int r = threadIdx.x, row = row0 + r;
                const bool on = row < run;
                const long long rel = on ? row_rel[row] : 0;
                out[r] = on ? (rel + t) * P : -1;
                prev[r] = on && t > 0 ? (rel + t - 1) * P : -1;
                erow[r] = on ? (long long)sym[base + rel + t] * N : 0;
            }
            __syncthreads();
            // Group g's maxima, then the maximum over groups, one output each.
            double* part = &stages[0].a[0][0][0];
            if (t > 0) {
                double best[HMV_RM];
                hmv_tile_max(P, col0, vals, lp, prev, stages, best);
                __syncthreads();
                const int group = threadIdx.x / HMV_GROUP, tid = threadIdx.x % HMV_GROUP;
                double* mine = &stages[group].a[0][0][0];
#pragma unroll
                for (int r = 0; r < HMV_RM; ++r) mine[(HMV_RM * (tid >> 5) + r) * HMV_BN + (tid & 31)] = best[r];
                __syncthreads();
            }
            for (int q = threadIdx.x; q < HMV_BM * HMV_BN; q += blockDim.x) {
                const int r = q / HMV_BN, j = col0 + q % HMV_BN;
                if (out[r] < 0) continue;
                double v = HMM_NEG_INF;
                if (j < N) {
                    double m = t > 0 ? part[q] : lstart[j];
                    if (t > 0) {
                        for (int g = 1; g < HMV_GROUPS; ++g) m = hmv_max(m, (&stages[g].a[0][0][0])[q]);
                    }
                    v = m + lemis_k[erow[r] + j];
                }
                vals[out[r] + j] = v;
            }
        }
        hmb_grid_sync(bar);
    }
    // Walk back, a block per row.
    __shared__ double red_b[32];
    __shared__ int red_a[32];
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const long long rel = row_rel[row], len = row_len[row];
        double best;
        int arg;
        hmv_first_max(vals + (rel + len - 1) * P, nullptr, P, red_b, red_a, best, arg);
        if (threadIdx.x == 0) logp[row_seq[row]] = best;
        if (best == HMM_NEG_INF) {
            for (long long t = threadIdx.x; t < len; t += blockDim.x) path[rel + t] = HMV_NO_STATE;
            continue;
        }
        if (threadIdx.x == 0) path[rel + len - 1] = (unsigned)arg;
        for (long long t = len - 1; t > 0; --t) {
            double b;
            hmv_first_max(vals + (rel + t - 1) * P, lpt + (long long)arg * P, P, red_b, red_a, b, arg);
            if (threadIdx.x == 0) path[rel + t - 1] = (unsigned)arg;
        }
    }
}
