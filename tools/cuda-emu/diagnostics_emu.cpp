// Runs mcmc_diagnostics of src/rust/core/kernels/diagnostics.cu under
// emu.h on one case: `diagnostics_emu IN OUT`. IN holds int64 n, chains,
// parameters and global (1: working arrays in global memory), then the
// draws (parameter, chain, draw fastest) as doubles; OUT gets the R-hats,
// bulk ESS and tail ESS (3 x parameters doubles). The comparison with the
// host's diagnostics is core/tests/gibbs_diagnostics.rs (run.sh runs it).
#include "emu.h"
#include "gen_diagnostics_emu.h"
#include <algorithm>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = std::fopen(argv[1], "rb");
    long long h[4];
    if (!f || std::fread(h, 8, 4, f) != 4) return 1;
    const long long n = h[0], chains = h[1], count = h[2], global = h[3];
    std::vector<double> x(n * chains * count);
    if (std::fread(x.data(), 8, x.size(), f) != x.size()) return 1;
    std::fclose(f);
    long long P = 2;
    while (P < n * chains) P *= 2;
    // The working arrays' doubles, as gibbs/gpu/diagnostics.rs sizes them.
    const long long half = n / 2;
    const long long doubles = P + std::max(2 * chains * half, 1LL) + std::max(half, 2LL) + 5 * chains + (P + 1) / 2;
    // Three blocks: fewer than most cases' parameters (grid-stride).
    const unsigned blocks = 3;
    std::vector<double> out(3 * count), scratch(global ? blocks * doubles : 0, std::nan(""));
    emu_launch(emu_dim3{blocks, 1, 1}, 256, global ? 0 : doubles * 8, mcmc_diagnostics, (const double*)x.data(), (int)n, (int)chains, count, (int)P,
               global ? scratch.data() : (double*)nullptr, doubles, out.data());
    f = std::fopen(argv[2], "wb");
    if (!f || std::fwrite(out.data(), 8, out.size(), f) != out.size()) return 1;
    std::fclose(f);
    return 0;
}
