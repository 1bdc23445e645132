// A tiny CPU emulation of the CUDA features the bulkem kernels use, to run
// their logic without a GPU: every thread of a block is an OS thread,
// __syncthreads and warp shuffles are barriers, blocks run one after the
// other (so `static` locals stand for __shared__ arrays). Not a race
// detector and not a performance model: it checks indexing and arithmetic.
#pragma once
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct emu_dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local emu_dim3 threadIdx, blockIdx;
inline emu_dim3 blockDim, gridDim;
inline std::vector<double> emu_smem_buf;
inline std::unique_ptr<std::barrier<>> emu_block_bar;
struct EmuWarp { double slot[32]; std::unique_ptr<std::barrier<>> bar; };
inline std::vector<EmuWarp> emu_warps;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
using std::fmax;
using std::fmin;
using std::isfinite;
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define EMU_SMEM (emu_smem_buf.data())

inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
inline void __syncwarp() { emu_warps[threadIdx.x / 32].bar->arrive_and_wait(); }
struct alignas(16) double2 { double x, y; };
// A warp's lanes exchange values through its slots (any 8-byte-or-smaller
// type), as the shuffles do.
template <class T>
inline T emu_exchange(T v, int src_lane) {
    static_assert(sizeof(T) <= 8);
    auto& w = emu_warps[threadIdx.x / 32];
    int lane = threadIdx.x % 32;
    std::memcpy(&w.slot[lane], &v, sizeof(T));
    w.bar->arrive_and_wait();
    T r;
    std::memcpy(&r, &w.slot[src_lane], sizeof(T));
    w.bar->arrive_and_wait();
    return r;
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int o) { return emu_exchange(v, (int)(threadIdx.x % 32) ^ o); }
template <class T>
inline T __shfl_sync(unsigned, T v, int src) { return emu_exchange(v, src & 31); }
inline double2 make_double2(double x, double y) { return double2{x, y}; }
// CUDA's integer min and max.
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline double __longlong_as_double(unsigned long long x) { double d; std::memcpy(&d, &x, 8); return d; }

// Run `kernel(args...)` on a grid of blocks of `threads` threads (a multiple of 32).
template <class F, class... A>
void emu_launch(emu_dim3 grid, unsigned threads, size_t smem_bytes, F kernel, A... args) {
    gridDim = grid;
    blockDim = emu_dim3{threads, 1, 1};
    emu_smem_buf.assign(smem_bytes / 8 + 1, std::nan(""));
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                emu_block_bar = std::make_unique<std::barrier<>>(threads);
                emu_warps.clear();
                emu_warps.resize(threads / 32);
                for (auto& w : emu_warps) w.bar = std::make_unique<std::barrier<>>(32);
                std::vector<std::thread> ts;
                for (unsigned t = 0; t < threads; ++t)
                    ts.emplace_back([=] {
                        threadIdx = emu_dim3{t, 0, 0};
                        blockIdx = emu_dim3{x, y, z};
                        kernel(args...);
                    });
                for (auto& t : ts) t.join();
            }
}
