// Runs the kernels of src/rust/core/kernels/hmm.cu under emu.h and checks
// them against a plain C++ reference of the same recursions, for small
// models (including exact zeros and impossible sequences), every kernel
// variant (shared/global tables, shared/global accumulators, 256-thread blocks, the
// transition-count GEMM) and grids smaller than the work (grid-stride);
// and the certificate of the scaled passes (uncertain sequences come back
// NaN, with NaN posteriors and no counts) and the beta masking (a state
// that cannot be reached but would explain the data gives no NaN).
// Build and run: tools/cuda-emu/run.sh
#include "emu.h"
#include "gen_hmm_emu_test.h"
#include <cstdio>
#include <random>
#include <algorithm>
using std::vector;

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { ++failures; if (failures < 20) { std::printf("FAIL %s:%d: ", __FILE__, __LINE__); std::printf(__VA_ARGS__); std::printf("\n"); } } } while (0)

struct Model { int N, V; vector<double> start, trans, emis; };

static vector<double> simplex(std::mt19937_64& g, int len, bool zeros) {
    std::uniform_real_distribution<double> u(0.01, 1.0);
    vector<double> x(len);
    for (auto& v : x) v = u(g);
    // Half the entries 0 (at least one kept), so some sequences are impossible.
    if (zeros && len > 1) { for (auto& v : x) if (g() % 2) v = 0.0; x[g() % len] = 0.5; }
    double s = 0; for (double v : x) s += v;
    for (auto& v : x) v /= s;
    return x;
}

static Model random_model(int N, int V, bool zeros, unsigned seed) {
    std::mt19937_64 g(seed);
    Model m{N, V, simplex(g, N, false), {}, {}};
    for (int i = 0; i < N; ++i) { auto r = simplex(g, N, zeros); m.trans.insert(m.trans.end(), r.begin(), r.end()); }
    for (int i = 0; i < N; ++i) { auto r = simplex(g, V, zeros); m.emis.insert(m.emis.end(), r.begin(), r.end()); }
    if (zeros && V > 2) {
        // No state emits the last symbol: sequences holding it are impossible.
        for (int i = 0; i < N; ++i) {
            double* row = &m.emis[i * V];
            row[V - 1] = 0.0;
            double s = 0; for (int k = 0; k < V; ++k) s += row[k];
            if (s == 0) { row[0] = 1.0; s = 1.0; }
            for (int k = 0; k < V; ++k) row[k] /= s;
        }
    }
    return m;
}

// ---- reference --------------------------------------------------------------
struct Ref { double ll; vector<double> gamma; vector<double> start, xi, emis; vector<unsigned> path; double logp; };

static Ref reference(const Model& m, const unsigned* o, int T) {
    int N = m.N, V = m.V;
    Ref r; r.start.assign(N, 0); r.xi.assign(N * N, 0); r.emis.assign(V * N, 0); r.gamma.assign(T * N, 0);
    vector<double> a(T * N), c(T);
    r.ll = 0;
    bool dead = false;
    for (int t = 0; t < T && !dead; ++t) {
        double s = 0;
        for (int j = 0; j < N; ++j) {
            double x;
            if (t == 0) x = m.start[j];
            else { x = 0; for (int i = 0; i < N; ++i) x += a[(t - 1) * N + i] * m.trans[i * N + j]; }
            x *= m.emis[j * V + o[t]];
            a[t * N + j] = x; s += x;
        }
        if (!(s > 0)) { dead = true; break; }
        c[t] = s; r.ll += std::log(s);
        for (int j = 0; j < N; ++j) a[t * N + j] /= s;
    }
    if (dead) r.ll = -INFINITY;
    else {
        vector<double> b(N, 1.0), nb(N), w(N);
        for (int i = 0; i < N; ++i) r.gamma[(T - 1) * N + i] = a[(T - 1) * N + i];
        for (int t = T - 2; t >= 0; --t) {
            for (int j = 0; j < N; ++j) w[j] = m.emis[j * V + o[t + 1]] * b[j] / c[t + 1];
            for (int i = 0; i < N; ++i) {
                for (int j = 0; j < N; ++j) r.xi[i * N + j] += a[t * N + i] * w[j];
                double s = 0; for (int j = 0; j < N; ++j) s += m.trans[i * N + j] * w[j];
                // beta is 0 where alpha is (the kernels' masking).
                if (a[t * N + i] == 0) s = 0;
                nb[i] = s; r.gamma[t * N + i] = a[t * N + i] * s;
            }
            b = nb;
        }
        for (int t = 0; t < T; ++t) for (int i = 0; i < N; ++i) r.emis[o[t] * N + i] += r.gamma[t * N + i];
        for (int i = 0; i < N; ++i) r.start[i] = r.gamma[i];
    }
    // Viterbi, ties to the lowest index.
    vector<double> d(N), nd(N); vector<unsigned> bp(T * N);
    for (int j = 0; j < N; ++j) d[j] = std::log(m.start[j]) + std::log(m.emis[j * V + o[0]]);
    for (int t = 1; t < T; ++t) {
        for (int j = 0; j < N; ++j) {
            double best = -INFINITY; unsigned arg = 0;
            for (int i = 0; i < N; ++i) { double v = d[i] + std::log(m.trans[i * N + j]); if (v > best) { best = v; arg = i; } }
            nd[j] = best + std::log(m.emis[j * V + o[t]]); bp[t * N + j] = arg;
        }
        d = nd;
    }
    double best = -INFINITY; unsigned arg = 0;
    for (int j = 0; j < N; ++j) if (d[j] > best) { best = d[j]; arg = j; }
    r.logp = best; r.path.assign(T, 0xffffffffu);
    if (best > -INFINITY) {
        r.path[T - 1] = arg;
        for (int t = T - 1; t > 0; --t) { arg = bp[t * N + arg]; r.path[t - 1] = arg; }
    }
    return r;
}

// The forward kernels' `mins` as the host uploads them (gpu/mod.rs,
// min_key): the smallest positive start-or-transition and emission
// probabilities, bit-inverted.
struct Mins { unsigned long long k[2]; };
static Mins mins_of(const Model& m) {
    auto min_pos = [](const vector<double>& x) { double r = INFINITY; for (double p : x) if (p > 0 && p < r) r = p; return r; };
    auto key = [](double p) { unsigned long long b; std::memcpy(&b, &p, 8); return p > 0 && std::isfinite(p) ? ~b : 0ULL; };
    return Mins{{key(std::min(min_pos(m.start), min_pos(m.trans))), key(min_pos(m.emis))}};
}

static bool close(double a, double b, double tol) {
    if (a == b) return true;
    if (std::isnan(a) && std::isnan(b)) return true;
    return std::fabs(a - b) <= tol * std::max(1.0, std::fabs(b));
}

static unsigned threads_for(int n, unsigned cap) { unsigned t = (n + 31) / 32 * 32; return std::min(std::max(t, 32u), cap); }

// Every entry equal: every path ties, so Viterbi must take state 0 throughout.
static void make_uniform(Model& m) {
    for (auto& v : m.start) v = 1.0 / m.N;
    for (auto& v : m.trans) v = 1.0 / m.N;
    for (auto& v : m.emis) v = 1.0 / m.V;
}

static void run_case(int N, int V, bool zeros, unsigned seed, unsigned G, bool uniform = false) {
    Model m = random_model(N, V, zeros, seed);
    if (uniform) make_uniform(m);
    std::mt19937_64 g(seed * 7 + 1);
    int M = 9;
    vector<long long> off{0}; vector<unsigned> sym;
    for (int s = 0; s < M; ++s) { int T = 1 + g() % 12; for (int t = 0; t < T; ++t) sym.push_back(g() % V); off.push_back(sym.size()); }
    long long S = sym.size();
    sym.resize(S + HMM_SYM_PAD, 0);  // as the host uploads them
    sym.shrink_to_fit();             // so AddressSanitizer sees a read past the padding
    vector<double> trans_t(N * N), emis_k(V * N), ltrans(N * N), lstart(N), lemis_k(V * N);
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) { trans_t[j * N + i] = m.trans[i * N + j]; ltrans[i * N + j] = std::log(m.trans[i * N + j]); }
    for (int i = 0; i < N; ++i) for (int k = 0; k < V; ++k) { emis_k[k * N + i] = m.emis[i * V + k]; lemis_k[k * N + i] = std::log(m.emis[i * V + k]); }
    for (int i = 0; i < N; ++i) lstart[i] = std::log(m.start[i]);
    vector<Ref> ref;
    int impossible = 0;
    for (int s = 0; s < M; ++s) { ref.push_back(reference(m, &sym[off[s]], off[s + 1] - off[s])); impossible += ref.back().ll == -INFINITY; }
    long long size = N + (long long)N * N + (long long)V * N;
    const Mins mins = mins_of(m);
    const unsigned long long* theta = mins.k;

    // narrow = 1 runs the kernels with 256 threads a block, fewer than the
    // states of the larger models (threads stride over states). The passes
    // for large N, Viterbi included, are hmm_batched.cu's, tested on a GPU
    // (their grid barrier needs resident blocks).
    for (int narrow = 0; narrow < 2; ++narrow) {
        // Forward, keeping alphas.
        vector<double> alpha(S * N, 0.0), scale(S, 0.0), ll(M, 0.0);
        unsigned fthreads = threads_for(N, narrow ? 256 : 512);
        for (int trans_smem = 0; trans_smem < 2; ++trans_smem) {
            emu_launch({std::min(G, (unsigned)M), 1, 1}, fthreads, (2 * N + 32 + trans_smem * N * N) * 8, hmm_forward, N, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, alpha.data(), scale.data(), ll.data(), trans_smem, theta);
            for (int s = 0; s < M; ++s) CHECK(close(ll[s], ref[s].ll, 1e-12), "N=%d narrow=%d forward seq %d: %g vs %g", N, narrow, s, ll[s], ref[s].ll);
        }
        // Posteriors.
        vector<double> gamma(S * N, 0.0);
        const double* nul = nullptr; double* nulw = nullptr;
        emu_launch({std::min(G, (unsigned)M), 1, 1}, fthreads, (3 * N + N * N) * 8, hmm_backward, N, V, trans_t.data(), emis_k.data(), sym.data(), off.data(), 0, M, (const double*)alpha.data(), (const double*)scale.data(), (const double*)ll.data(), gamma.data(), nulw, nulw, 1, 0, nulw, nulw);
        (void)nul;
        for (int s = 0; s < M; ++s)
            for (long long k = 0; k < (off[s + 1] - off[s]) * N; ++k)
                CHECK(close(gamma[off[s] * N + k], ref[s].ll == -INFINITY ? NAN : ref[s].gamma[k], 1e-12), "N=%d narrow=%d gamma seq %d k %lld: %g vs %g", N, narrow, s, k, gamma[off[s] * N + k], ref[s].gamma[k]);
        // Counts: in-kernel (shared or global accumulators) and by the GEMM.
        for (int mode = 0; mode < 3; ++mode) {
            unsigned slots = std::min(G, (unsigned)M);
            vector<double> partial(slots * size, 0.0), tmp(S * N, 0.0), total(size, 0.0);
            double* tmp_out = mode == 2 ? tmp.data() : nullptr;
            emu_launch({slots, 1, 1}, fthreads, (3 * N + N * N + (mode == 0 ? size : 0)) * 8, hmm_backward, N, V, trans_t.data(), emis_k.data(), sym.data(), off.data(), 0, M, (const double*)alpha.data(), (const double*)scale.data(), (const double*)ll.data(), nulw, partial.data(), tmp_out, 1, mode == 0 ? 1 : 0, nulw, nulw);
            if (mode == 2) {
                // The product hmm_xi_gemm (hmm_batched.cu, tensor cores,
                // tested on a GPU) computes from hmm_backward's tmp rows.
                for (long long r = 0; r < S; ++r)
                    for (int i = 0; i < N; ++i)
                        for (int j = 0; j < N; ++j) partial[N + (long long)i * N + j] += alpha[r * N + i] * tmp[r * N + j];
            }
            emu_launch({(unsigned)((size + 31) / 32), 1, 1}, 64, 0, hmm_reduce, (const double*)partial.data(), (int)slots, size, total.data());
            vector<double> want(size, 0.0);
            for (int s = 0; s < M; ++s) {
                if (ref[s].ll == -INFINITY) continue;
                for (int i = 0; i < N; ++i) want[i] += ref[s].start[i];
                for (int k = 0; k < N * N; ++k) want[N + k] += ref[s].xi[k];
                for (int k = 0; k < V * N; ++k) want[N + N * N + k] += ref[s].emis[k];
            }
            for (long long k = 0; k < size; ++k) CHECK(close(total[k], want[k], 1e-11), "N=%d narrow=%d mode %d count %lld: %g vs %g", N, narrow, mode, k, total[k], want[k]);
        }
        // Viterbi.
        for (int trans_smem = 0; trans_smem < 2; ++trans_smem) {
            vector<unsigned short> back(S * N, 0); vector<unsigned> path(S, 7); vector<double> logp(M, 0.0);
            emu_launch({std::min(G, (unsigned)M), 1, 1}, fthreads, (2 * N + trans_smem * N * N) * 8, hmm_viterbi, N, lstart.data(), ltrans.data(), lemis_k.data(), sym.data(), off.data(), 0, M, back.data(), path.data(), logp.data(), trans_smem);
            for (int s = 0; s < M; ++s) {
                CHECK(logp[s] == ref[s].logp, "N=%d narrow=%d viterbi logp seq %d: %.17g vs %.17g", N, narrow, s, logp[s], ref[s].logp);
                for (long long t = 0; t < off[s + 1] - off[s]; ++t) CHECK(path[off[s] + t] == ref[s].path[t], "N=%d narrow=%d viterbi path seq %d t %lld: %u vs %u", N, narrow, s, t, path[off[s] + t], ref[s].path[t]);
            }
        }
        // A batch that starts in the middle: sequences [3, 9) only.
        vector<double> ll2(6, 0.0), a2((S - off[3]) * N, 0.0), sc2(S - off[3], 0.0);
        emu_launch({2, 1, 1}, fthreads, (2 * N + 32) * 8, hmm_forward, N, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 3, M, a2.data(), sc2.data(), ll2.data(), 0, theta);
        for (int s = 3; s < M; ++s) CHECK(close(ll2[s - 3], ref[s].ll, 1e-12), "N=%d narrow=%d batch forward seq %d", N, narrow, s);
        for (long long k = 0; k < (S - off[3]) * N; ++k) CHECK(a2[k] == alpha[off[3] * N + k], "N=%d narrow=%d batch alpha %lld", N, narrow, k);
    }
    if (N > 32 && N <= 128) {
        // A block per group of sequences (hmm.cu's HMM_GK at its default
        // 8: eight warps, columns past N zero): the forward pass 16 a block
        // (its mma by the shuffles' fallback) and Viterbi 8 a block (two
        // groups, the second part-filled), over all sequences and over a
        // batch from sequence 3.
        vector<double> lg(M, 0.0), lg2(M - 3, 0.0);
        emu_launch({1, 1, 1}, 256, 0, hmm_forward_group, N, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, lg.data(), theta);
        for (int s = 0; s < M; ++s) CHECK(close(lg[s], ref[s].ll, 1e-12), "N=%d group forward seq %d: %.17g vs %.17g", N, s, lg[s], ref[s].ll);
        emu_launch({2, 1, 1}, 256, 0, hmm_forward_group, N, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 3, M, lg2.data(), theta);
        for (int s = 3; s < M; ++s) CHECK(close(lg2[s - 3], ref[s].ll, 1e-12), "N=%d group forward batch seq %d: %.17g vs %.17g", N, s, lg2[s - 3], ref[s].ll);
        const unsigned vthreads = 2 * ((N + 31) / 32 * 32);
        const size_t vsmem = ((size_t)(N * N + 1) / 2 * 2 + 2 * N * 8) * 8;
        for (int first = 0; first < 4; first += 3) {
            vector<unsigned short> back(S * N, 0); vector<unsigned> path(S, 7); vector<double> logp(M - first, 0.0);
            emu_launch({std::min(G, 2u), 1, 1}, vthreads, vsmem, hmm_viterbi_group, N, lstart.data(), ltrans.data(), lemis_k.data(), sym.data(), off.data(), first, M, back.data(), path.data(), logp.data());
            for (int s = first; s < M; ++s) {
                CHECK(logp[s - first] == ref[s].logp, "N=%d group viterbi from %d logp seq %d: %.17g vs %.17g", N, first, s, logp[s - first], ref[s].logp);
                for (long long t = 0; t < off[s + 1] - off[s]; ++t) CHECK(path[off[s] - off[first] + t] == ref[s].path[t], "N=%d group viterbi from %d path seq %d t %lld: %u vs %u", N, first, s, t, path[off[s] - off[first] + t], ref[s].path[t]);
            }
        }
    }
    if (N <= 32) {
        // The warp-per-sequence kernels (4 warps per block).
        unsigned blocks = std::min(G, (unsigned)(M + 3) / 4);
        vector<double> alpha(S * N, 0.0), scale(S, 0.0), ll(M, 0.0);
        emu_launch({blocks, 1, 1}, 128, 4 * 32 * 8, hmm_forward_warp, N, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, alpha.data(), scale.data(), ll.data(), theta);
        for (int s = 0; s < M; ++s) CHECK(close(ll[s], ref[s].ll, 1e-12), "N=%d warp forward seq %d: %.17g vs %.17g", N, s, ll[s], ref[s].ll);
        // The 16-sequences-a-warp kernel (its mma by the shuffles'
        // fallback): the same log-likelihoods, alphas and scales, over all
        // sequences (rows past the last unused) and over a later batch.
        {
            vector<double> am(S * N, 0.0), sm_(S, 0.0), lm(M, 0.0);
            emu_launch({1, 1, 1}, 128, 0, hmm_forward_mma, N, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, am.data(), sm_.data(), lm.data(), theta);
            for (int s = 0; s < M; ++s) CHECK(close(lm[s], ref[s].ll, 1e-12), "N=%d mma forward seq %d: %.17g vs %.17g", N, s, lm[s], ref[s].ll);
            for (int s = 0; s < M; ++s) {
                if (ref[s].ll == -INFINITY) continue;
                for (long long k = off[s] * N; k < off[s + 1] * N; ++k) CHECK(close(am[k], alpha[k], 1e-12), "N=%d mma alpha %lld: %.17g vs %.17g", N, k, am[k], alpha[k]);
                for (long long k = off[s]; k < off[s + 1]; ++k) CHECK(close(sm_[k], scale[k], 1e-12), "N=%d mma scale %lld: %.17g vs %.17g", N, k, sm_[k], scale[k]);
            }
            vector<double> a2((S - off[3]) * N, 0.0), s2(S - off[3], 0.0), l2(M - 3, 0.0);
            emu_launch({1, 1, 1}, 128, 0, hmm_forward_mma, N, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 3, M, a2.data(), s2.data(), l2.data(), theta);
            for (int s = 3; s < M; ++s) CHECK(l2[s - 3] == lm[s], "N=%d mma batch seq %d: %.17g vs %.17g", N, s, l2[s - 3], lm[s]);
        }
        vector<double> gamma(S * N, 0.0);
        double* nulw = nullptr;
        emu_launch({blocks, 1, 1}, 128, 4 * 32 * 8, hmm_backward_warp, N, V, m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, (const double*)alpha.data(), (const double*)scale.data(), (const double*)ll.data(), gamma.data(), nulw, nulw, nulw);
        for (int s = 0; s < M; ++s)
            for (long long k = 0; k < (off[s + 1] - off[s]) * N; ++k)
                CHECK(close(gamma[off[s] * N + k], ref[s].ll == -INFINITY ? NAN : ref[s].gamma[k], 1e-12), "N=%d warp gamma seq %d k %lld: %g vs %g", N, s, k, gamma[off[s] * N + k], ref[s].gamma[k]);
        // Counts in two batches ([0, 4) and [4, M)) into the same slots.
        unsigned slots = blocks * 4;
        vector<double> partial(slots * size, 0.0), total(size, 0.0);
        for (int half = 0; half < 2; ++half) {
            int a0 = half ? 4 : 0, a1 = half ? M : 4;
            vector<double> al((off[a1] - off[a0]) * N, 0.0), sc(off[a1] - off[a0], 0.0), l2(a1 - a0, 0.0);
            unsigned bl = std::min(blocks, (unsigned)(a1 - a0 + 3) / 4);
            emu_launch({bl, 1, 1}, 128, 4 * 32 * 8, hmm_forward_warp, N, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), a0, a1, al.data(), sc.data(), l2.data(), theta);
            emu_launch({bl, 1, 1}, 128, (4 * 32 + 4 * V * 32) * 8, hmm_backward_warp, N, V, m.trans.data(), emis_k.data(), sym.data(), off.data(), a0, a1, (const double*)al.data(), (const double*)sc.data(), (const double*)l2.data(), nulw, partial.data(), nulw, nulw);
        }
        emu_launch({(unsigned)((size + 31) / 32), 1, 1}, 64, 0, hmm_reduce, (const double*)partial.data(), (int)slots, size, total.data());
        vector<double> want(size, 0.0);
        for (int s = 0; s < M; ++s) {
            if (ref[s].ll == -INFINITY) continue;
            for (int i = 0; i < N; ++i) want[i] += ref[s].start[i];
            for (int k = 0; k < N * N; ++k) want[N + k] += ref[s].xi[k];
            for (int k = 0; k < V * N; ++k) want[N + N * N + k] += ref[s].emis[k];
        }
        for (long long k = 0; k < size; ++k) CHECK(close(total[k], want[k], 1e-11), "N=%d warp count %lld: %g vs %g", N, k, total[k], want[k]);
        vector<unsigned char> back(S * N, 0); vector<unsigned> path(S, 7); vector<double> logp(M, 0.0);
        emu_launch({blocks, 1, 1}, 128, 4 * 32 * 8, hmm_viterbi_warp, N, lstart.data(), ltrans.data(), lemis_k.data(), sym.data(), off.data(), 0, M, back.data(), path.data(), logp.data(), nulw, nulw);
        for (int s = 0; s < M; ++s) {
            CHECK(logp[s] == ref[s].logp, "N=%d warp viterbi logp seq %d: %.17g vs %.17g", N, s, logp[s], ref[s].logp);
            for (long long t = 0; t < off[s + 1] - off[s]; ++t) CHECK(path[off[s] + t] == ref[s].path[t], "N=%d warp viterbi path seq %d t %lld", N, s, t);
        }
    }
    // The thread-per-sequence kernels (N <= 8, one compiled N each): the
    // forward's log-likelihoods and alphas, the warp backward's posteriors
    // from them, a later batch alone, and Viterbi bit for bit.
    auto thread_kernels = [&]<int TN>() {
        double* nulw = nullptr;
        vector<double> alpha(S * N, 0.0), scale(S, 0.0), ll(M, 0.0), gamma(S * N, 0.0);
        emu_launch({std::min(G, 2u), 1, 1}, 32, TN * TN * 8, hmm_forward_thread_n<TN>, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, alpha.data(), scale.data(), ll.data(), theta, nulw, nulw);
        for (int s = 0; s < M; ++s) CHECK(close(ll[s], ref[s].ll, 1e-12), "N=%d thread forward seq %d: %.17g vs %.17g", N, s, ll[s], ref[s].ll);
        emu_launch({1, 1, 1}, 128, 4 * 32 * 8, hmm_backward_warp, N, V, m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, (const double*)alpha.data(), (const double*)scale.data(), (const double*)ll.data(), gamma.data(), nulw, nulw, nulw);
        for (int s = 0; s < M; ++s)
            for (long long k = 0; k < (off[s + 1] - off[s]) * N; ++k)
                CHECK(close(gamma[off[s] * N + k], ref[s].ll == -INFINITY ? NAN : ref[s].gamma[k], 1e-12), "N=%d thread gamma seq %d k %lld: %g vs %g", N, s, k, gamma[off[s] * N + k], ref[s].gamma[k]);
        vector<double> l2(M - 3, 0.0);
        emu_launch({1, 1, 1}, 32, TN * TN * 8, hmm_forward_thread_n<TN>, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 3, M, nulw, nulw, l2.data(), theta, nulw, nulw);
        for (int s = 3; s < M; ++s) CHECK(l2[s - 3] == ll[s] || (std::isnan(l2[s - 3]) && std::isnan(ll[s])), "N=%d thread forward batch seq %d", N, s);
        vector<unsigned char> back(S * N, 0); vector<unsigned> path(S, 7); vector<double> logp(M, 0.0);
        emu_launch({std::min(G, 2u), 1, 1}, 32, TN * TN * 8, hmm_viterbi_thread_n<TN>, lstart.data(), ltrans.data(), lemis_k.data(), sym.data(), off.data(), 0, M, back.data(), path.data(), logp.data(), nulw, nulw);
        for (int s = 0; s < M; ++s) {
            CHECK(logp[s] == ref[s].logp, "N=%d thread viterbi logp seq %d: %.17g vs %.17g", N, s, logp[s], ref[s].logp);
            for (long long t = 0; t < off[s + 1] - off[s]; ++t) CHECK(path[off[s] + t] == ref[s].path[t], "N=%d thread viterbi path seq %d t %lld", N, s, t);
        }
    };
    switch (N) {
        case 1: thread_kernels.template operator()<1>(); break;
        case 2: thread_kernels.template operator()<2>(); break;
        case 3: thread_kernels.template operator()<3>(); break;
        case 4: thread_kernels.template operator()<4>(); break;
        case 5: thread_kernels.template operator()<5>(); break;
        case 6: thread_kernels.template operator()<6>(); break;
        case 7: thread_kernels.template operator()<7>(); break;
        case 8: thread_kernels.template operator()<8>(); break;
        default: break;
    }
    std::printf("N=%d V=%d zeros=%d uniform=%d: %d sequences (%d impossible) checked\n", N, V, zeros, uniform, M, impossible);
}

// The certificate and the masking, on both kernel families. Model "coins":
// two states that never switch, emitting symbol 0 with 0.9 / 0.1: after
// about 300 symbols 0 the second state's weight is below theta, so the
// sequence is uncertain (NaN; the host computes it in log space). Model
// "unreachable": state 1 cannot be reached but alone emits symbol 1 with
// probability 1, so its beta doubles every step (2^2000 overflows); the
// posteriors must stay finite (state 0 throughout) and the counts exact.
// Model "subnormal" (the issue's: a 1e-320 start, a 1e-310 emission):
// theta > 1, no step can be certified, so every sequence is uncertain, also
// one whose first step underflows to 0.
static void run_certificate_case() {
    for (int model = 0; model < 3; ++model) {
        Model m{2, 2, {0.5, 0.5}, {1, 0, 0, 1}, {0.9, 0.1, 0.1, 0.9}};
        if (model == 1) m = Model{2, 2, {1, 0}, {1, 0, 0, 1}, {0.5, 0.5, 0, 1}};
        if (model == 2) m = Model{2, 2, {1e-320, 1 - 1e-320}, {1, 0, 0, 1}, {1e-310, 1 - 1e-310, 0, 1}};
        const Mins mins = mins_of(m);
        const unsigned long long* theta = mins.k;
        vector<vector<unsigned>> seqs;
        if (model == 0) seqs = {vector<unsigned>(400, 0), vector<unsigned>(40, 0), {1, 1, 0}};
        else if (model == 1) { vector<unsigned> x(2001, 1); x[0] = 0; seqs = {x, {0, 0, 1}}; }
        else seqs = {{0}, {1, 1, 0}, {1, 1}};
        vector<long long> off{0}; vector<unsigned> sym;
        for (auto& q : seqs) { sym.insert(sym.end(), q.begin(), q.end()); off.push_back(sym.size()); }
        int M = seqs.size();
        long long S = sym.size();
        sym.resize(S + HMM_SYM_PAD, 0);
        vector<double> trans_t(4), emis_k(4);
        for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) { trans_t[j * 2 + i] = m.trans[i * 2 + j]; emis_k[j * 2 + i] = m.emis[i * 2 + j]; }
        double* nulw = nullptr;
        // warp = 2: the thread-per-sequence forward, then the warp backward.
        for (int warp = 0; warp < 3; ++warp) {
            vector<double> alpha(S * 2, 0.0), scale(S, 0.0), ll(M, 0.0), gamma(S * 2, 0.0);
            long long size = 2 + 4 + 4;
            vector<double> partial(4 * size, 0.0);
            if (warp) {
                if (warp == 2)
                    emu_launch({1, 1, 1}, 32, 4 * 8, hmm_forward_thread_n<2>, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, alpha.data(), scale.data(), ll.data(), theta, nulw, nulw);
                else
                    emu_launch({1, 1, 1}, 128, 4 * 32 * 8, hmm_forward_warp, 2, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, alpha.data(), scale.data(), ll.data(), theta);
                emu_launch({1, 1, 1}, 128, 4 * 32 * 8, hmm_backward_warp, 2, 2, m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, (const double*)alpha.data(), (const double*)scale.data(), (const double*)ll.data(), gamma.data(), nulw, nulw, nulw);
                emu_launch({1, 1, 1}, 128, (4 * 32 + 4 * 2 * 32) * 8, hmm_backward_warp, 2, 2, m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, (const double*)alpha.data(), (const double*)scale.data(), (const double*)ll.data(), nulw, partial.data(), nulw, nulw);
            } else {
                emu_launch({2, 1, 1}, 32, (2 * 2 + 32) * 8, hmm_forward, 2, m.start.data(), m.trans.data(), emis_k.data(), sym.data(), off.data(), 0, M, alpha.data(), scale.data(), ll.data(), 0, theta);
                emu_launch({2, 1, 1}, 32, 3 * 2 * 8, hmm_backward, 2, 2, trans_t.data(), emis_k.data(), sym.data(), off.data(), 0, M, (const double*)alpha.data(), (const double*)scale.data(), (const double*)ll.data(), gamma.data(), nulw, nulw, 0, 0, nulw, nulw);
                emu_launch({1, 1, 1}, 32, 3 * 2 * 8, hmm_backward, 2, 2, trans_t.data(), emis_k.data(), sym.data(), off.data(), 0, M, (const double*)alpha.data(), (const double*)scale.data(), (const double*)ll.data(), nulw, partial.data(), nulw, 0, 0, nulw, nulw);
            }
            vector<double> counts(size, 0.0);
            for (int g = 0; g < 4; ++g) for (long long k = 0; k < size; ++k) counts[k] += partial[g * size + k];
            if (model == 0) {
                CHECK(std::isnan(ll[0]), "warp=%d coins: 400 tosses must be uncertain, got %g", warp, ll[0]);
                double want1 = std::log(0.5 * std::pow(0.9, 40) + 0.5 * std::pow(0.1, 40));
                CHECK(close(ll[1], want1, 1e-12), "warp=%d coins: 40 tosses %.17g vs %.17g", warp, ll[1], want1);
                for (long long k = 0; k < 400 * 2; ++k) CHECK(std::isnan(gamma[k]), "warp=%d coins: uncertain posterior %lld not NaN", warp, k);
                // Counts from the certain sequences only: 40 + 3 symbols.
                double emitted = 0; for (int k = 6; k < 10; ++k) emitted += counts[k];
                CHECK(close(emitted, 43.0, 1e-12), "warp=%d coins: %g emissions counted, want 43", warp, emitted);
            } else if (model == 2) {
                for (int q = 0; q < M; ++q) CHECK(std::isnan(ll[q]), "warp=%d subnormal: sequence %d must be uncertain, got %g", warp, q, ll[q]);
                for (long long k = 0; k < size; ++k) CHECK(counts[k] == 0.0, "warp=%d subnormal: count %lld = %g", warp, k, counts[k]);
            } else {
                CHECK(close(ll[0], 2001 * std::log(0.5), 1e-12), "warp=%d unreachable: %.17g", warp, ll[0]);
                for (long long t = 0; t < 2001; ++t) CHECK(gamma[t * 2] == 1.0 && gamma[t * 2 + 1] == 0.0, "warp=%d unreachable: gamma at %lld = (%g, %g)", warp, t, gamma[t * 2], gamma[t * 2 + 1]);
                for (long long k = 0; k < size; ++k) CHECK(std::isfinite(counts[k]), "warp=%d unreachable: count %lld = %g", warp, k, counts[k]);
                // xi(0, 0) (raw; A_00 = 1): 2000 + 2 transitions.
                CHECK(close(counts[2], 2002.0, 1e-12), "warp=%d unreachable: xi(0,0) %g", warp, counts[2]);
            }
        }
    }
    std::printf("certificate and masking checked\n");
}

int main() {
    run_certificate_case();
    for (unsigned G : {2u, 5u}) {
        run_case(1, 3, false, 1, G);
        run_case(3, 4, true, 2, G);
        run_case(5, 2, true, 3, G);
        run_case(32, 3, true, 6, G);
        run_case(32, 5, false, 7, G);
        run_case(20, 12, true, 8, G);
        run_case(3, 9, true, 9, G);
        run_case(33, 5, false, 4, G);
        run_case(70, 6, true, 5, G);
        run_case(47, 4, false, 15, G, true);
        run_case(32, 4, false, 10, G, true);
        run_case(7, 3, false, 11, G, true);
        run_case(8, 6, true, 12, G);
        run_case(2, 5, true, 13, G);
        run_case(4, 3, false, 14, G, true);
    }
    std::printf(failures ? "%d FAILURES\n" : "all passed\n", failures);
    return failures != 0;
}
