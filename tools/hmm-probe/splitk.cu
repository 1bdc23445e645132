// Probe (not part of the package): how short can one step of the forward
// pass at N = 1,024 states, M = 64 sequences be when the product is split
// along k over the blocks of a cluster? Each block keeps a KR x NC block of
// the transitions in registers, reads only its KR columns of the 64 state
// vectors (so a step moves N / NC x 512 KB through L2, not 64 x 512 KB),
// and the cluster sums its KS partial products: each block stores its
// fragments into the shared memory of the block that owns their columns
// (distributed shared memory), and after the cluster's barrier each owner
// adds them in a fixed order, times the step's emission entries, and writes
// its columns. A grid barrier separates the steps, as in hmm_batched.cu.
// Not modelled: the rows' scales and lengths, the start step.
//
// An H200 runs at most 15 clusters of 8 such blocks at once (30 of 4),
// fewer than the 16 (32) column tiles of N = 1,024, so the probe computes
// the first 15 (30) and checks those columns: each block does the work of
// the full design, and a kernel for the package would give 8 or 9 column
// units of 8 to each of 15 clusters.
//
// Build (nvcc, sm_90; here or on the device) and run on the device:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o splitk tools/hmm-probe/splitk.cu && ./splitk
// It checks one step against the CPU, then times 256 steps per variant
// (BENCHMARKS.md, "HMM at 1,024 states: the product split along k over a
// cluster").
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
// The package's helpers: the tensor-core product, the copies and the grid
// barrier of the batched passes.
#include "../../src/rust/core/kernels/common.cuh"
#include "../../src/rust/core/kernels/hmm_batched.cu"
namespace cg = cooperative_groups;

#define CHECK(x)                                                                                       \
    do {                                                                                               \
        cudaError_t e_ = (x);                                                                          \
        if (e_ != cudaSuccess) {                                                                       \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                  \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

constexpr int N = 1024, M = 64, V = 64;

// Wait until at most p copy groups are pending (p a constant once unrolled).
__device__ __forceinline__ void wait_pending(int p) {
    switch (p) {
        case 0: hmb_copy_wait<0>(); break;
        case 1: hmb_copy_wait<1>(); break;
        case 2: hmb_copy_wait<2>(); break;
        case 3: hmb_copy_wait<3>(); break;
        case 4: hmb_copy_wait<4>(); break;
        case 5: hmb_copy_wait<5>(); break;
        case 6: hmb_copy_wait<6>(); break;
        default: hmb_copy_wait<7>(); break;
    }
}

// Modes (bits): 1 skip the grid barrier, 2 skip the products, 4 skip the
// cluster's sums (timing only: results are wrong with any bit set).
// KS blocks a cluster (k split KS ways), NS clusters (column tiles), W
// warps a block.
template <int KS, int NS_, int W>
struct Cfg {
    static constexpr int WARPS = W, THREADS = 32 * W;
    static constexpr int NS = NS_;             // clusters = column tiles
    static constexpr int NC = N / NS;          // columns of a cluster
    static constexpr int KR = N / KS;          // k of a block
    static constexpr int CG = NC / 16;         // warps' column groups (16 columns each)
    static constexpr int RG = 2;               // row groups (32 rows each)
    static constexpr int KP = WARPS / (CG * RG);  // k parts
    static constexpr int KW = KR / KP;         // k of a warp
    static constexpr int KK = KW / 16;         // mma k steps of a warp
    static constexpr int CH = 4 * KP;          // copy chunks of a step
    static constexpr int LDA = KR + 4;         // row stride of the state vectors' slice
    static constexpr int OUTC = NC / KS;       // columns a block sums and writes
    static constexpr int TPR = OUTC / 2;       // threads of an output row
    static constexpr size_t SMEM = (size_t)M * LDA * 8 + (size_t)KS * KP * M * OUTC * 8;
    static_assert(M * TPR == THREADS, "a thread sums 2 columns of a row");
    static_assert(CG * RG * KP == WARPS, "warp grid");
    static_assert(KK * 8 <= 64, "transitions in registers");
};

template <int KS, int NS, int W>
__global__ void __launch_bounds__(32 * W, 8 / W)
    splitk(const double* __restrict__ trans, const double* __restrict__ emis, const unsigned char* __restrict__ sym,
           double* alpha, double* sums, unsigned long long* bar, int T, int mode) {
    using C = Cfg<KS, NS, W>;
    extern __shared__ __align__(16) double smem[];
    double* as = smem;                          // [M][LDA]
    double* part = smem + (size_t)M * C::LDA;   // recv[KS][KP][M][8]
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = cluster.block_rank(), ctile = blockIdx.x / KS;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, q = lane & 3;
    const int cgp = w % C::CG, rg = (w / C::CG) % C::RG, kp = w / (C::CG * C::RG);
    const int col_base = ctile * C::NC, k_base = rank * C::KR;
    // b[kk][j][v] = P(to col_base + 16 cgp + 8 j + g | from k_base + KW kp + 16 kk + q + 4 v).
    double b[C::KK][2][4];
#pragma unroll
    for (int kk = 0; kk < C::KK; ++kk)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int from = k_base + C::KW * kp + 16 * kk + q + 4 * v, to = col_base + 16 * cgp + 8 * j + g;
                b[kk][j][v] = trans[(long long)from * N + to];
            }
    // The columns this block writes: out_col0 + 2 (tid % 4) + 0..1 of row tid / 4.
    const int orow = tid / C::TPR, ocol = rank * C::OUTC + 2 * (tid % C::TPR);
    for (int t = 1; t < T; ++t) {
        const double* src = alpha + (size_t)((t - 1) & 1) * M * N;
        double* dst = alpha + (size_t)(t & 1) * M * N;
        // The step's emission entries, read now so that their trips overlap the product.
        const unsigned o = sym[(size_t)orow * 4096 + t];
        const double2 e = __ldg(reinterpret_cast<const double2*>(emis + (size_t)o * N + col_base + ocol));
        // Copy chunk i of k part p as commit group i KP + p, so every part's
        // first chunk lands first.
        constexpr int CK = C::KW / (C::CH / C::KP);  // k of a chunk
        for (int i = 0; i < C::CH / C::KP; ++i)
            for (int p = 0; p < C::KP; ++p) {
                const int k0 = p * C::KW + i * CK;
                for (int e = tid; e < M * CK / 2; e += C::THREADS) {
                    const int r = e / (CK / 2), c = 2 * (e % (CK / 2));
                    hmb_copy_l2(as + r * C::LDA + k0 + c, src + (size_t)r * N + k_base + k0 + c, true);
                }
                hmb_copy_commit();
            }
        double acc[2][2][4] = {};
        constexpr int KK_CH = C::KK / (C::CH / C::KP);  // mma k steps per chunk
#pragma unroll
        for (int i = 0; i < C::CH / C::KP; ++i) {
            wait_pending(C::CH - 1 - (i * C::KP + C::KP - 1));
            __syncthreads();
            if (!(mode & 2)) {
#pragma unroll
                for (int kq = 0; kq < KK_CH; ++kq) {
                    const int kk = i * KK_CH + kq;
                    const int kcol = C::KW * kp + 16 * kk + q;
                    double a[2][8];
#pragma unroll
                    for (int mf = 0; mf < 2; ++mf)
#pragma unroll
                        for (int v = 0; v < 8; ++v) a[mf][v] = as[(32 * rg + 16 * mf + g + 8 * (v & 1)) * C::LDA + kcol + 4 * (v >> 1)];
#pragma unroll
                    for (int mf = 0; mf < 2; ++mf)
#pragma unroll
                        for (int j = 0; j < 2; ++j) mma_f64_16x8x16(acc[mf][j][0], acc[mf][j][1], acc[mf][j][2], acc[mf][j][3], a[mf], b[kk][j]);
                }
            }
        }
        // Each fragment's columns belong to one block of the cluster (2 cgp +
        // j): store it there, recv[rank][kp][row][0..7], by distributed
        // shared memory (stores do not wait, as loads from it would).
#pragma unroll
        for (int mf = 0; mf < 2; ++mf)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int r = 32 * rg + 16 * mf + g, c = 16 * cgp + 8 * j + 2 * q;
                const int owner = (mode & 4) ? rank : c / C::OUTC;
                double* there = cluster.map_shared_rank(part, owner) + ((size_t)(rank * C::KP + kp) * M + r) * C::OUTC + c % C::OUTC;
                *reinterpret_cast<double2*>(there) = make_double2(acc[mf][j][0], acc[mf][j][1]);
                *reinterpret_cast<double2*>(there + 8 * C::OUTC) = make_double2(acc[mf][j][2], acc[mf][j][3]);
            }
        cluster.sync();
        double2 s = make_double2(0.0, 0.0);
#pragma unroll
        for (int src = 0; src < KS * C::KP; ++src) {
            const double2 v = *reinterpret_cast<const double2*>(part + ((size_t)src * M + orow) * C::OUTC + 2 * (tid % C::TPR));
            s.x += v.x;
            s.y += v.y;
        }
        s.x *= e.x;
        s.y *= e.y;
        __stcg(reinterpret_cast<double2*>(dst + (size_t)orow * N + col_base + ocol), s);
        double rs = s.x + s.y;
#pragma unroll
        for (int x = 1; x < C::TPR; x *= 2) rs += __shfl_xor_sync(0xffffffffu, rs, x);
        if (tid % C::TPR == 0) __stcg(sums + (size_t)orow * gridDim.x + blockIdx.x, rs);
        if (!(mode & 1)) hmb_grid_sync(bar);
        else cluster.sync();
    }
    cluster.sync();
}

static std::vector<double> host_steps(const std::vector<double>& a0, const std::vector<double>& trans, const std::vector<double>& emis,
                                      const std::vector<unsigned char>& sym, int T) {
    std::vector<double> a = a0, nxt(M * N);
    for (int t = 1; t < T; ++t) {
        for (int r = 0; r < M; ++r) {
            for (int j = 0; j < N; ++j) nxt[r * N + j] = 0.0;
            for (int k = 0; k < N; ++k) {
                const double x = a[r * N + k];
                const double* row = &trans[(size_t)k * N];
                for (int j = 0; j < N; ++j) nxt[r * N + j] += x * row[j];
            }
            const unsigned o = sym[(size_t)r * 4096 + t];
            for (int j = 0; j < N; ++j) nxt[r * N + j] *= emis[(size_t)o * N + j];
        }
        a.swap(nxt);
    }
    return a;
}

template <int KS, int NS, int W>
static void run(const double* d_trans, const double* d_emis, const unsigned char* d_sym, double* d_alpha, double* d_sums,
                unsigned long long* d_bar, const std::vector<double>& a0, const std::vector<double>& ref3) {
    using C = Cfg<KS, NS, W>;
    auto kern = splitk<KS, NS, W>;
    CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(NS * KS);
    cfg.blockDim = dim3(C::THREADS);
    cfg.dynamicSmemBytes = C::SMEM;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = KS;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeCooperative;
    attr[1].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, kern, &cfg));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, kern));
    printf("KS %d: %d clusters of %d columns, k %d per block, %d warps, %d k parts; smem %zu B, %d registers, %zu B spilled; max active clusters %d (need %d)\n",
           KS, C::NS, C::NC, C::KR, W, C::KP, C::SMEM, fa.numRegs, (size_t)fa.localSizeBytes, clusters, C::NS);
    // With fewer co-resident clusters than column tiles, the last tiles are
    // left out: each block's work is the full design's, the step's time
    // with it (a design for this GPU would give 8 or 9 column units to
    // each of 15 clusters: 9 / 8 of the products).
    const int ns = std::min(clusters, C::NS);
    if (ns < C::NS) printf("KS %d: %d of %d column tiles (columns 0..%d checked and computed)\n", KS, ns, C::NS, ns * C::NC - 1);
    cfg.gridDim = dim3(ns * KS);
    cfg.numAttrs = 2;
    // Correctness: 3 steps against the CPU.
    auto launch = [&](int T, int mode) {
        CHECK(cudaMemcpy(d_alpha, a0.data(), sizeof(double) * M * N, cudaMemcpyHostToDevice));
        CHECK(cudaMemset(d_bar, 0, 8));
        cudaError_t e = cudaLaunchKernelEx(&cfg, kern, d_trans, d_emis, d_sym, d_alpha, d_sums, d_bar, T, mode);
        if (e != cudaSuccess && cfg.numAttrs == 2) {
            // 128 blocks of one a multiprocessor are resident anyway.
            printf("KS %d: cooperative launch with clusters refused (%s); launched without\n", KS, cudaGetErrorString(e));
            cudaGetLastError();
            cfg.numAttrs = 1;
            e = cudaLaunchKernelEx(&cfg, kern, d_trans, d_emis, d_sym, d_alpha, d_sums, d_bar, T, mode);
        }
        CHECK(e);
    };
    launch(2, 0);
    CHECK(cudaDeviceSynchronize());
    std::vector<double> got(M * N);
    CHECK(cudaMemcpy(got.data(), d_alpha + (size_t)(1 & 1) * M * N, sizeof(double) * M * N, cudaMemcpyDeviceToHost));
    double worst = 0.0;
    for (int r = 0; r < M; ++r)
        for (int j = 0; j < ns * C::NC; ++j) worst = std::max(worst, std::fabs(got[r * N + j] - ref3[r * N + j]) / std::fabs(ref3[r * N + j]));
    printf("KS %d: one step, largest relative difference from the CPU %.3e\n", KS, worst);
    const char* names[] = {"full", "no grid barrier", "no products", "no barrier, no products", "no cluster sums", "", "", "only the step's copies and writes"};
    for (int mode : {0, 1, 2, 4, 3, 7}) {
        std::vector<float> ms;
        for (int rep = 0; rep < 7; ++rep) {
            cudaEvent_t a, b;
            CHECK(cudaEventCreate(&a));
            CHECK(cudaEventCreate(&b));
            CHECK(cudaMemset(d_bar, 0, 8));
            CHECK(cudaEventRecord(a));
            CHECK(cudaLaunchKernelEx(&cfg, kern, d_trans, d_emis, d_sym, d_alpha, d_sums, d_bar, 256, mode));
            CHECK(cudaEventRecord(b));
            CHECK(cudaEventSynchronize(b));
            float x;
            CHECK(cudaEventElapsedTime(&x, a, b));
            ms.push_back(x);
        }
        std::sort(ms.begin(), ms.end());
        printf("KS %d, %-34s 256 steps: median %.3f ms (min %.3f), %.2f us a step\n", KS, names[mode], ms[3], ms[0], ms[3] * 1e3 / 255);
    }
}

int main() {
    srand(7);
    auto unif = [] { return (rand() + 0.5) / (RAND_MAX + 1.0); };
    std::vector<double> trans((size_t)N * N), emis((size_t)V * N), a0((size_t)M * N);
    for (int i = 0; i < N; ++i) {
        double s = 0.0;
        for (int j = 0; j < N; ++j) s += trans[(size_t)i * N + j] = unif();
        for (int j = 0; j < N; ++j) trans[(size_t)i * N + j] /= s;
    }
    for (auto& e : emis) e = 0.9 + 0.2 * unif();
    for (auto& a : a0) a = unif() / N;
    std::vector<unsigned char> sym((size_t)M * 4096);
    for (auto& s : sym) s = rand() % V;
    const std::vector<double> ref3 = host_steps(a0, trans, emis, sym, 2);
    double *d_trans, *d_emis, *d_alpha, *d_sums;
    unsigned char* d_sym;
    unsigned long long* d_bar;
    CHECK(cudaMalloc(&d_trans, sizeof(double) * N * N));
    CHECK(cudaMalloc(&d_emis, sizeof(double) * V * N));
    CHECK(cudaMalloc(&d_alpha, sizeof(double) * 2 * M * N));
    CHECK(cudaMalloc(&d_sums, sizeof(double) * M * 256));
    CHECK(cudaMalloc(&d_sym, M * 4096));
    CHECK(cudaMalloc(&d_bar, 8));
    CHECK(cudaMemcpy(d_trans, trans.data(), sizeof(double) * N * N, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_emis, emis.data(), sizeof(double) * V * N, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_sym, sym.data(), M * 4096, cudaMemcpyHostToDevice));
    run<8, 16, 8>(d_trans, d_emis, d_sym, d_alpha, d_sums, d_bar, a0, ref3);
    run<8, 32, 4>(d_trans, d_emis, d_sym, d_alpha, d_sums, d_bar, a0, ref3);
    run<4, 32, 8>(d_trans, d_emis, d_sym, d_alpha, d_sums, d_bar, a0, ref3);
    return 0;
}
