// Hidden Markov models over many sequences (core/src/hmm/gpu.rs launches
// these). One block per sequence at a time (blocks stride over the
// sequences of a batch); the threads of a block share the states; every
// time step of a pass runs inside the kernel, so a pass over all sequences
// is one launch. Tables the block reads at every step (transitions, count
// accumulators) live in shared memory when they fit, else in global memory
// (L2).
//
// Arithmetic follows the CPU reference (core/src/hmm/forward.rs,
// backward.rs, viterbi.rs) term by term, each state's sum running over the
// other states in increasing order (the *_warp kernels split it into four
// interleaved chains, hmm_forward_mma sums on the tensor cores, and the
// forward passes of both scale after the product);
// products are fused into the sums (fma), and the sums over states of a
// step (the scales) are reduced in a different order, so forward-backward
// results agree with the CPU to rounding. Viterbi only adds and compares, so its values and paths are
// bit-identical to the CPU's.
//
// The scaled passes carry the CPU's certificate (core/src/hmm/tables.rs,
// Tables::theta): a positive unscaled forward value below `theta` means the
// next step could underflow, so the value enters the step's sum as NaN,
// which stops the sequence like a zero scale does; its log-likelihood is
// then NaN ("uncertain"), no posteriors or counts are made for it, and the
// host computes it on the CPU in log space. `theta` comes from the model's
// two smallest positive probabilities, kept on the device (`mins`, see
// hmm_theta) so that a fit's M-step on the device needs no copy to the
// host; with theta > 1 (no step can be certified) every sequence is
// uncertain. The backward passes set beta to
// 0 where alpha is 0 (such a state takes part in no posterior or count, and
// its beta may overflow: 0 x inf would be NaN) and skip every sequence
// whose log-likelihood is not finite (-inf: impossible; NaN: uncertain).
//
// Layouts: symbols flat (unsigned, 0-based; HMM_SYM_PAD zeros after the
// last sequence, so the *_warp kernels read ahead unchecked) with long long
// offsets; a
// batch [s0, s1) stores per-symbol data (alphas, scales, back-pointers,
// posteriors) from off[s0] on, `rel` = off[s] - off[s0]. Matrices row-major:
// trans[i*N + j] = P(j | i), trans_t[j*N + i] = P(j | i), emis_k[k*N + i] =
// P(symbol k | state i); log tables likewise.

#define HMM_NO_STATE 0xffffffffu

// The emission counts of position p (symbol o) in state i with posterior
// g, into acc (statistic k of state i at acc[k * stride + i]): by symbol
// for categorical emissions; a density emission (HMM_DENSITY, its block of
// hmm_emission.cu's functions prepended) adds g phi_k(x_p) to each of its
// HMM_STATS statistics, reading x_p from `obs` and its parameters from `ep`
// (parameters of the backward kernels, unused otherwise).
#ifdef HMM_DENSITY
#define HMM_ADD_EMISSION(acc, stride, o, p, i, g) \
    do { \
        const double x_ = obs[p]; \
        for (int k_ = 0; k_ < HMM_STATS; ++k_) (acc)[(long long)k_ * (stride) + (i)] += (g) * hmm_emis_feature(k_, x_, (i), ep); \
    } while (0)
#else
#define HMM_ADD_EMISSION(acc, stride, o, p, i, g) ((acc)[(long long)(o) * (stride) + (i)] += (g))
#endif
#define HMM_POS_INF __longlong_as_double(0x7ff0000000000000ULL)
#define HMM_SYM_PAD 3

// Write a sequence's Viterbi result: log-probability `best` (to *logp) and
// the path ending in state `last`, walked back through the back-pointers
// (T x N from row `rel`); an impossible sequence gets HMM_NO_STATE
// throughout. One thread.
template <typename Back>
__device__ void hmm_backtrack(double best, int last, long long T, long long rel, int N,
                              const Back* __restrict__ back, unsigned* __restrict__ path, double* logp)
{
    *logp = best;
    if (best == HMM_NEG_INF) {
        for (long long t = 0; t < T; ++t) path[rel + t] = HMM_NO_STATE;
        return;
    }
    path[rel + T - 1] = (unsigned)last;
    for (long long t = T - 1; t > 0; --t) {
        last = back[(rel + t) * N + last];
        path[rel + t - 1] = (unsigned)last;
    }
}

// theta of the model whose smallest positive start-or-transition and
// emission probabilities are mins[0] and mins[1], stored bit-inverted
// (~bits: 0 means none, and the smallest value has the largest key, so the
// device M-step keeps them with atomicMax). As Tables::theta computes it:
// 2^-960 / (a * e), or +inf.
__device__ __forceinline__ double hmm_theta(const unsigned long long* __restrict__ mins) {
    const unsigned long long ka = mins[0], ke = mins[1];
    if (ka == 0 || ke == 0) return HMM_POS_INF;
    const double phi = __longlong_as_double(~ka) * __longlong_as_double(~ke);
    return phi > 0.0 && phi < HMM_POS_INF ? 0x1p-960 / phi : HMM_POS_INF;
}

// x as it enters a step's sum: NaN when positive and below theta.
__device__ __forceinline__ double hmm_certified(double x, double theta) {
    return (x > 0.0 && x < theta) ? HMM_NAN : x;
}

// The log-likelihood of a sequence whose scale `c` was not positive: -inf
// (c = 0, impossible) or NaN (uncertain; always when theta > 1, where even
// a zero is not certified).
__device__ __forceinline__ double hmm_dead(double c, double theta) {
    return c == c && theta <= 1.0 ? HMM_NEG_INF : HMM_NAN;
}

// Whether a sequence has a finite log-likelihood (never +inf; the backward
// passes skip -inf and NaN).
__device__ __forceinline__ bool hmm_alive(double ll) {
    return ll > HMM_NEG_INF;
}

// Copy `n` doubles to shared memory (block-wide; caller syncs).
__device__ __forceinline__ void hmm_copy(double* dst, const double* src, long long n) {
    for (long long k = threadIdx.x; k < n; k += blockDim.x) dst[k] = src[k];
}

// Scaled forward pass. With `alpha` and `scale` non-null, every scaled
// alpha (T x N) and scale (T) of the batch is stored for a backward pass.
// loglik[s - s0] = log P(sequence), -inf when impossible.
// Shared: cur[N], nxt[N], red[32], then trans (N*N) when trans_smem.
extern "C" __global__ void hmm_forward(
    int N, const double* __restrict__ start, const double* __restrict__ trans,
    const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    double* __restrict__ alpha, double* __restrict__ scale, double* __restrict__ loglik,
    int trans_smem, const unsigned long long* __restrict__ mins)
{
    extern __shared__ double sm[];
    const double theta = hmm_theta(mins);
    double* cur = sm;
    double* nxt = sm + N;
    double* red = sm + 2 * N;
    const double* A = trans;
    if (trans_smem) {
        double* As = red + 32;
        hmm_copy(As, trans, (long long)N * N);
        A = As;
    }
    __syncthreads();
    const long long base = off[s0];
    for (int s = s0 + blockIdx.x; s < s1; s += gridDim.x) {
        const long long b = off[s];
        const long long T = off[s + 1] - b;
        const long long rel = b - base;
        const double* e = emis_k + (long long)sym[b] * N;
        double part = 0.0;
        for (int j = threadIdx.x; j < N; j += blockDim.x) {
            double x = start[j] * e[j];
            cur[j] = x;
            part += hmm_certified(x, theta);
        }
        double c = block_sum(part, red);
        bool dead = !(c > 0.0);
        double ll = dead ? hmm_dead(c, theta) : log(c);
        if (!dead) {
            double r = 1.0 / c;
            for (int j = threadIdx.x; j < N; j += blockDim.x) {
                cur[j] *= r;
                if (alpha) alpha[rel * N + j] = cur[j];
            }
            if (scale && threadIdx.x == 0) scale[rel] = c;
        }
        __syncthreads();
        for (long long t = 1; t < T && !dead; ++t) {
            e = emis_k + (long long)sym[b + t] * N;
            part = 0.0;
            for (int j = threadIdx.x; j < N; j += blockDim.x) {
                double acc = 0.0;
                for (int i = 0; i < N; ++i) acc = fma(cur[i], A[(long long)i * N + j], acc);
                double x = acc * e[j];
                nxt[j] = x;
                part += hmm_certified(x, theta);
            }
            c = block_sum(part, red);
            if (!(c > 0.0)) {
                dead = true;
                ll = hmm_dead(c, theta);
                break;
            }
            ll += log(c);
            double r = 1.0 / c;
            for (int j = threadIdx.x; j < N; j += blockDim.x) {
                double x = nxt[j] * r;
                nxt[j] = x;
                if (alpha) alpha[(rel + t) * N + j] = x;
            }
            if (scale && threadIdx.x == 0) scale[rel + t] = c;
            double* tmp = cur;
            cur = nxt;
            nxt = tmp;
            __syncthreads();
        }
        if (threadIdx.x == 0) loglik[s - s0] = ll;
        __syncthreads();
    }
}

// Viterbi in log space: back-pointers (unsigned short, T x N per sequence)
// in `back`, then thread 0 walks back. Ties go to the lowest state, as on
// the CPU. path is laid out like the batch's symbols; logp[s - s0].
// Shared: cur[N], nxt[N], then ltrans (N*N) when trans_smem.
extern "C" __global__ void hmm_viterbi(
    int N, const double* __restrict__ lstart, const double* __restrict__ ltrans,
    const double* __restrict__ lemis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    unsigned short* __restrict__ back, unsigned* __restrict__ path, double* __restrict__ logp,
    int trans_smem)
{
    extern __shared__ double sm[];
    double* cur = sm;
    double* nxt = sm + N;
    const double* L = ltrans;
    if (trans_smem) {
        double* Ls = sm + 2 * N;
        hmm_copy(Ls, ltrans, (long long)N * N);
        L = Ls;
    }
    __syncthreads();
    const long long base = off[s0];
    for (int s = s0 + blockIdx.x; s < s1; s += gridDim.x) {
        const long long b = off[s];
        const long long T = off[s + 1] - b;
        const long long rel = b - base;
        const double* e = lemis_k + (long long)sym[b] * N;
        for (int j = threadIdx.x; j < N; j += blockDim.x) cur[j] = lstart[j] + e[j];
        __syncthreads();
        for (long long t = 1; t < T; ++t) {
            e = lemis_k + (long long)sym[b + t] * N;
            unsigned short* bp = back + (rel + t) * N;
            for (int j = threadIdx.x; j < N; j += blockDim.x) {
                double best = HMM_NEG_INF;
                int arg = 0;
                for (int i = 0; i < N; ++i) {
                    double v = cur[i] + L[(long long)i * N + j];
                    if (v > best) {
                        best = v;
                        arg = i;
                    }
                }
                nxt[j] = best + e[j];
                bp[j] = (unsigned short)arg;
            }
            double* tmp = cur;
            cur = nxt;
            nxt = tmp;
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            double best = HMM_NEG_INF;
            int arg = 0;
            for (int j = 0; j < N; ++j) {
                if (cur[j] > best) {
                    best = cur[j];
                    arg = j;
                }
            }
            hmm_backtrack(best, arg, T, rel, N, back, path, &logp[s - s0]);
        }
        __syncthreads();
    }
}

// hmm_viterbi for 33 to 128 states, HMM_VG_SEQS sequences a block: the
// block's threads are two halves of a thread per state, each half keeping
// four of the sequences' running maxima, so every read of a log transition
// from shared memory serves four sequences (hmm_viterbi: one). The rows'
// log vectors are stored state by state, a state's eight side by side
// (read as two broadcast 16-byte loads). The same additions and
// comparisons as hmm_viterbi, in the same order: values and paths are
// bit-identical to the CPU's. A sequence past its end keeps its last
// vector; thread r then walks sequence r's path back.
// Shared: the log transitions (N*N, rounded up to even), then two
// vectors of N x HMM_VG_SEQS.
#define HMM_VG_SEQS 8
#define HMM_VG_MINE 4  // sequences a thread keeps

extern "C" __global__ void hmm_viterbi_group(
    int N, const double* __restrict__ lstart, const double* __restrict__ ltrans,
    const double* __restrict__ lemis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    unsigned short* __restrict__ back, unsigned* __restrict__ path, double* __restrict__ logp)
{
    extern __shared__ double sm[];
    double* L = sm;
    // The vectors from an even double: 16-byte aligned.
    double* const vec0 = sm + ((long long)N * N + 1) / 2 * 2;
    double* const vec1 = vec0 + (long long)N * HMM_VG_SEQS;
    hmm_copy(L, ltrans, (long long)N * N);
    const int half = blockDim.x / 2;
    const int j = threadIdx.x % half, r0 = HMM_VG_MINE * (threadIdx.x / half);
    const long long base = off[s0];
    const int groups = (s1 - s0 + HMM_VG_SEQS - 1) / HMM_VG_SEQS;
    __syncthreads();
    for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
        const int first = s0 + grp * HMM_VG_SEQS;
        // The thread's sequences: first + r0 + k, positions b[k] .. b[k] + T[k] - 1.
        long long b[HMM_VG_MINE], T[HMM_VG_MINE], tmax = 0;
#pragma unroll
        for (int k = 0; k < HMM_VG_MINE; ++k) {
            const int s = first + r0 + k;
            b[k] = s < s1 ? off[s] : 0;
            T[k] = s < s1 ? off[s + 1] - b[k] : 0;
        }
        for (int r = 0; r < HMM_VG_SEQS && first + r < s1; ++r) tmax = max(tmax, off[first + r + 1] - off[first + r]);
        if (j < N) {
#pragma unroll
            for (int k = 0; k < HMM_VG_MINE; ++k)
                vec0[j * HMM_VG_SEQS + r0 + k] = T[k] > 0 ? lstart[j] + lemis_k[(long long)sym[b[k]] * N + j] : HMM_NEG_INF;
        }
        __syncthreads();
        for (long long t = 1; t < tmax; ++t) {
            const double* cur = (t & 1) ? vec0 : vec1;
            double* nxt = (t & 1) ? vec1 : vec0;
            if (j < N) {
                double e[HMM_VG_MINE], best[HMM_VG_MINE];
                int arg[HMM_VG_MINE];
#pragma unroll
                for (int k = 0; k < HMM_VG_MINE; ++k) {
                    e[k] = t < T[k] ? lemis_k[(long long)sym[b[k] + t] * N + j] : 0.0;
                    best[k] = HMM_NEG_INF;
                    arg[k] = 0;
                }
                for (int i = 0; i < N; ++i) {
                    const double a = L[(long long)i * N + j];
                    const double2 c01 = *reinterpret_cast<const double2*>(&cur[i * HMM_VG_SEQS + r0]);
                    const double2 c23 = *reinterpret_cast<const double2*>(&cur[i * HMM_VG_SEQS + r0 + 2]);
                    const double c[HMM_VG_MINE] = {c01.x, c01.y, c23.x, c23.y};
#pragma unroll
                    for (int k = 0; k < HMM_VG_MINE; ++k) {
                        const double v = c[k] + a;
                        if (v > best[k]) {
                            best[k] = v;
                            arg[k] = i;
                        }
                    }
                }
#pragma unroll
                for (int k = 0; k < HMM_VG_MINE; ++k) {
                    const bool on = t < T[k];
                    nxt[j * HMM_VG_SEQS + r0 + k] = on ? best[k] + e[k] : cur[j * HMM_VG_SEQS + r0 + k];
                    if (on) back[(b[k] - base + t) * N + j] = (unsigned short)arg[k];
                }
            }
            __syncthreads();
        }
        // Thread r: sequence first + r's last state and path.
        const int r = threadIdx.x;
        if (r < HMM_VG_SEQS && first + r < s1) {
            const double* last = (tmax & 1) ? vec0 : vec1;
            double best = HMM_NEG_INF;
            int arg = 0;
            for (int jj = 0; jj < N; ++jj) {
                const double v = last[jj * HMM_VG_SEQS + r];
                if (v > best) {
                    best = v;
                    arg = jj;
                }
            }
            const long long bs = off[first + r];
            hmm_backtrack(best, arg, off[first + r + 1] - bs, bs - base, N, back, path, &logp[first + r - s0]);
        }
        __syncthreads();
    }
}

// Scaled backward pass over a batch whose forward pass stored alpha and
// scale. Writes posterior rows to `gamma` (non-null) and/or adds the
// Baum-Welch expected counts of the block's sequences to its accumulator
// `partial + blockIdx.x * (N + N*N + V*N)` (non-null): start (N), trans_raw
// (N*N, without the factor A_ij), emis (by symbol, V*N). With `tmp_out`
// (every N past the warp kernels' 32 states), the transition counts are
// left to hmm_xi_gemm (hmm_batched.cu): row t of each sequence receives
// B(o_{t+1}) .* beta_hat_{t+1} / c_{t+1}, the last row stays 0.
// Impossible sequences (loglik -inf) get NaN rows and no counts.
// Shared: beta[N], beta2[N], tmp[N], then trans_t (N*N) when trans_smem,
// then the accumulator when acc_smem (loaded from and stored back to
// global memory around the pass, so batches add up).
extern "C" __global__ void hmm_backward(
    int N, int V, const double* __restrict__ trans_t, const double* __restrict__ emis_k,
    const unsigned* __restrict__ sym, const long long* __restrict__ off, int s0, int s1,
    const double* __restrict__ alpha, const double* __restrict__ scale,
    const double* __restrict__ loglik, double* __restrict__ gamma, double* __restrict__ partial,
    double* __restrict__ tmp_out, int trans_smem, int acc_smem,
    const double* __restrict__ obs, const double* __restrict__ ep)
{
    extern __shared__ double sm[];
    double* beta = sm;
    double* beta2 = sm + N;
    double* tmp = sm + 2 * N;
    double* next_free = sm + 3 * N;
    const double* AT = trans_t;
    if (trans_smem) {
        hmm_copy(next_free, trans_t, (long long)N * N);
        AT = next_free;
        next_free += (long long)N * N;
    }
    const long long acc_size = (long long)N + (long long)N * N + (long long)V * N;
    double* acc = 0;
    if (partial) {
        double* mine = partial + blockIdx.x * acc_size;
        if (acc_smem) {
            hmm_copy(next_free, mine, acc_size);
            acc = next_free;
        } else {
            acc = mine;
        }
    }
    __syncthreads();
    double* acc_start = acc;
    double* acc_xi = acc ? acc + N : 0;
    double* acc_emis = acc ? acc + N + (long long)N * N : 0;
    const long long base = off[s0];
    for (int s = s0 + blockIdx.x; s < s1; s += gridDim.x) {
        const long long b = off[s];
        const long long T = off[s + 1] - b;
        const long long rel = b - base;
        if (!hmm_alive(loglik[s - s0])) {
            if (gamma) {
                for (long long k = threadIdx.x; k < T * N; k += blockDim.x) gamma[rel * N + k] = HMM_NAN;
            }
            continue;
        }
        // t = T - 1: beta = 1, gamma = alpha.
        {
            const long long t = T - 1;
            const unsigned o = sym[b + t];
            for (int i = threadIdx.x; i < N; i += blockDim.x) {
                beta[i] = 1.0;
                double g = alpha[(rel + t) * N + i];
                if (gamma) gamma[(rel + t) * N + i] = g;
                if (acc) {
                    HMM_ADD_EMISSION(acc_emis, N, o, b + t, i, g);
                    if (t == 0) acc_start[i] += g;
                }
            }
        }
        __syncthreads();
        for (long long t = T - 2; t >= 0; --t) {
            const double* e = emis_k + (long long)sym[b + t + 1] * N;
            const double r = 1.0 / scale[rel + t + 1];
            for (int j = threadIdx.x; j < N; j += blockDim.x) {
                tmp[j] = e[j] * beta[j] * r;
                if (tmp_out) tmp_out[(rel + t) * N + j] = tmp[j];
            }
            __syncthreads();
            const double* a_t = alpha + (rel + t) * N;
            if (acc && !tmp_out) {
                // Thread j owns column j of the counts (no division per entry).
                for (int i = 0; i < N; ++i) {
                    const double a = a_t[i];
                    if (a != 0.0) {
                        double* row = acc_xi + (long long)i * N;
                        for (int j = threadIdx.x; j < N; j += blockDim.x) row[j] = fma(a, tmp[j], row[j]);
                    }
                }
            }
            const unsigned o = sym[b + t];
            for (int i = threadIdx.x; i < N; i += blockDim.x) {
                double sum = 0.0;
                for (int j = 0; j < N; ++j) sum = fma(AT[(long long)j * N + i], tmp[j], sum);
                const double a = a_t[i];
                if (a == 0.0) sum = 0.0;
                beta2[i] = sum;
                double g = a * sum;
                if (gamma) gamma[(rel + t) * N + i] = g;
                if (acc) {
                    HMM_ADD_EMISSION(acc_emis, N, o, b + t, i, g);
                    if (t == 0) acc_start[i] += g;
                }
            }
            __syncthreads();
            double* swap = beta;
            beta = beta2;
            beta2 = swap;
        }
        __syncthreads();
    }
    if (partial && acc_smem) {
        __syncthreads();
        double* mine = partial + blockIdx.x * acc_size;
        for (long long k = threadIdx.x; k < acc_size; k += blockDim.x) mine[k] = acc[k];
    }
}

// Sum the accumulators (deterministic): out[k] = sum_g partial[g * size + k].
// A block owns 32 consecutive k; its warp w sums accumulators w, w + W, ...
// (W warps, up to 32), then the W partial sums are added in warp order, so
// a few thousand accumulators are read by many threads at once.
extern "C" __global__ void hmm_reduce(const double* __restrict__ partial, int blocks, long long size,
                                      double* __restrict__ out)
{
    __shared__ double part[32][33];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const long long k = blockIdx.x * 32LL + lane;
    double s = 0.0;
    if (k < size)
        for (int g = warp; g < blocks; g += warps) s += partial[(long long)g * size + k];
    part[warp][lane] = s;
    __syncthreads();
    if (warp == 0 && k < size) {
        double total = 0.0;
        for (int w = 0; w < warps; ++w) total += part[w][lane];
        out[k] = total;
    }
}

// ---- Small N (<= 32): one warp per sequence ----------------------------------
// Lane j owns state j: its column (forward, Viterbi) or row (backward) of
// the transition matrix lives in registers, the state vector of the
// previous step is broadcast through the warp's slice of shared memory, and
// only warp-level synchronisation is needed, so a block runs HMM_WARPS
// sequences at a time. Lanes >= N hold zeros (probabilities) or -inf (logs)
// and contribute nothing. The scales are multiplied up and a logarithm
// taken only when the product gets small, not at every step.

#define HMM_WARPS 4
#define HMM_WN 32

// Add log(c) to the log-likelihood `ll` lazily through the running product
// `m` (>= 1e-200, and c >= 1e-100 when multiplied, so it never underflows).
__device__ __forceinline__ void hmm_add_log(double c, double& m, double& ll) {
    if (c < 1e-100) {
        ll += log(c);
    } else {
        m *= c;
        if (m < 1e-200) {
            ll += log(m);
            m = 1.0;
        }
    }
}

// Sum over i of w[i] * col[i] for the 32 entries of a warp's shared slice
// `w` (broadcast reads) and a lane's register column `col`, in four
// independent chains (i mod 4) so the step's latency is a quarter of one
// chain's.
__device__ __forceinline__ double hmm_dot32(const double* w, const double (&col)[HMM_WN]) {
    const double2* w2 = reinterpret_cast<const double2*>(w);
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
    for (int i = 0; i < HMM_WN / 2; ++i) {
        const double2 p = w2[i];
        acc[(2 * i) & 3] = fma(p.x, col[2 * i], acc[(2 * i) & 3]);
        acc[(2 * i + 1) & 3] = fma(p.y, col[2 * i + 1], acc[(2 * i + 1) & 3]);
    }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// hmm_forward for N <= 32. Shared: HMM_WARPS * 32 doubles.
// The product of a step runs on the previous step's unscaled vector x and
// is scaled by 1/c afterwards, so the scale (a warp sum and a reciprocal)
// is computed alongside the product instead of before it.
extern "C" __global__ void hmm_forward_warp(
    int N, const double* __restrict__ start, const double* __restrict__ trans,
    const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    double* __restrict__ alpha, double* __restrict__ scale, double* __restrict__ loglik,
    const unsigned long long* __restrict__ mins)
{
    extern __shared__ double sm[];
    const double theta = hmm_theta(mins);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double* wal = sm + warp * HMM_WN;
    const bool on = lane < N;
    double a_col[HMM_WN];
#pragma unroll
    for (int i = 0; i < HMM_WN; ++i) a_col[i] = (on && i < N) ? trans[(long long)i * N + lane] : 0.0;
    const long long base = off[s0];
    for (int s = s0 + blockIdx.x * HMM_WARPS + warp; s < s1; s += gridDim.x * HMM_WARPS) {
        const long long b = off[s];
        const long long T = off[s + 1] - b;
        const long long rel = b - base;
        double x = on ? start[lane] * emis_k[(long long)sym[b] * N + lane] : 0.0;
        double m = 1.0, ll = 0.0;  // log P = ll + log(m)
        bool dead = false;
        // The next step's emission row is loaded one step ahead and its
        // symbol two (past the end: the next sequence's or padding, unused),
        // so their latency overlaps a step's arithmetic. Indices, not
        // pointers: kernel parameters cost no registers, and this kernel
        // uses 126, under the 128 that keep 16 warps on a multiprocessor
        // (with 4 more it spilled and ran 2.4x slower).
        double e_next = on ? emis_k[(long long)sym[b + 1] * N + lane] : 0.0;
        unsigned o_ahead = sym[b + 2];  // symbol t + 1 in step t
        // Step t: x is step t - 1's unscaled vector, c its scale.
        for (long long t = 1;; ++t) {
            const bool more = t < T;
            const double e = e_next;
            if (on) e_next = emis_k[(long long)o_ahead * N + lane];
            o_ahead = sym[b + t + 2];
            __syncwarp();
            wal[lane] = x;
            __syncwarp();
            const double c = warp_sum(hmm_certified(x, theta));
            const double y = more ? hmm_dot32(wal, a_col) : 0.0;
            if (!(c > 0.0)) {
                dead = true;
                ll = hmm_dead(c, theta);
                break;
            }
            const double r = 1.0 / c;
            hmm_add_log(c, m, ll);
            if (alpha && on) alpha[(rel + t - 1) * N + lane] = x * r;
            if (scale && lane == 0) scale[rel + t - 1] = c;
            if (!more) break;
            x = y * (r * e);
        }
        if (lane == 0) loglik[s - s0] = dead ? ll : ll + log(m);
    }
}

// hmm_forward_mma: hmm_forward_warp's pass for many sequences, on the FP64
// tensor cores. A warp runs 16 sequences at once as the rows of a 16 x 32 matrix of state
// vectors, so a step's product by the 32 x 32 transitions is 8 mma
// m16n8k16 instead of 32 fma a lane for each sequence. Lane l (g = l / 4,
// q = l % 4) holds rows g and g + 8 (h = 0, 1), states hmm_mma_state(q,
// k), k < 8, of each: the columns the product's output fragment gives it,
// and, with the transitions' rows taken in that order, the entries its
// input fragment needs, so no value crosses lanes but the scale's sum (two
// shuffles in the quad). The transitions' fragments stay in registers. A
// warp's sequences run to the longest of them; a row whose sequence has
// ended (or died) stops storing and is never read again (the rows of a
// product do not mix). The product runs on the previous step's unscaled
// vector x, scaled by 1/c afterwards. No shared memory.
//
// Its steps are long (a chain of dependent instructions, one or two warps
// a scheduler), so it is the faster kernel only with enough sequences to
// fill the device: at N = 32, T = 1,000 on an H200 (categorical) it took
// 0.94 ms for any count from 264 to 6,336 sequences, hmm_forward_warp 0.39
// ms at 264, 0.54 at 2,112, 1.06 at 4,224 and 2.62 at 10,000 (this kernel
// 1.25); the host chooses (plan.rs, forward_mma). The m8n8k4 shape (8
// sequences a warp) took 1.19 ms at 10,000: on sm_90 ptxas pads it with
// NOPs, and its pipe bounded it.
#define HMM_MMA_SEQS 16
#ifndef HMM_MMA_AHEAD
#define HMM_MMA_AHEAD 1
#endif

__device__ __forceinline__ int hmm_mma_state(int q, int k) { return 8 * (k >> 1) + 2 * q + (k & 1); }

// The emission row of symbol o at the lane's states into e, zeros with
// `ok` false (past the row's sequence) or past N.
__device__ __forceinline__ void hmm_mma_row(const double* __restrict__ emis_k, unsigned o, int N, int q, bool ok, double (&e)[8]) {
    const double* row = emis_k + (long long)o * N;
    if ((N & 1) == 0) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int st = hmm_mma_state(q, 2 * j);
            const double2 v = ok && st < N ? *reinterpret_cast<const double2*>(row + st) : make_double2(0.0, 0.0);
            e[2 * j] = v.x;
            e[2 * j + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int st = hmm_mma_state(q, k);
            e[k] = ok && st < N ? row[st] : 0.0;
        }
    }
}

// out[st] = r x[k] for the lane's states st = hmm_mma_state(q, k) < N.
__device__ __forceinline__ void hmm_mma_store(double* __restrict__ out, int N, int q, const double (&x)[8], double r) {
    if ((N & 1) == 0) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int st = hmm_mma_state(q, 2 * j);
            if (st < N) *reinterpret_cast<double2*>(out + st) = make_double2(x[2 * j] * r, x[2 * j + 1] * r);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int st = hmm_mma_state(q, k);
            if (st < N) out[st] = x[k] * r;
        }
    }
}

// Rows g and g + 8 (h = 0, 1) of a group of 16 consecutive sequences
// from `first` (those from s1 on are not valid, their first position
// `none`): first positions, lengths and a forward pass's state (log P = ll
// + log(m)); returns the group's longest length, over the warp's lanes,
// which hold all 16 rows.
__device__ __forceinline__ long long hmm_rows16(const long long* __restrict__ off, int first, int s1, int g, long long none, long long (&b)[2],
                                                long long (&T)[2], bool (&valid)[2], bool (&done)[2], bool (&dead)[2], double (&m)[2], double (&ll)[2])
{
    long long tmax = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int s = first + g + 8 * h;
        valid[h] = s < s1;
        b[h] = valid[h] ? off[s] : none;
        T[h] = valid[h] ? off[s + 1] - b[h] : 0;
        tmax = max(tmax, T[h]);
        done[h] = !valid[h];
        dead[h] = false;
        m[h] = 1.0;
        ll[h] = 0.0;
    }
    for (int o = 16; o > 0; o >>= 1) tmax = max(tmax, __shfl_xor_sync(FULL_MASK, tmax, o));
    return tmax;
}

// Whether a row not yet done takes its scale c of step t - 1 (positive):
// log(c) is added and the row is done at its length T. Otherwise the row
// is dead, its log-likelihood -inf or NaN (hmm_dead).
__device__ __forceinline__ bool hmm_row_takes(double c, double theta, long long t, long long T, bool& done, bool& dead, double& m, double& ll)
{
    if (!(c > 0.0)) {
        dead = done = true;
        ll = hmm_dead(c, theta);
        return false;
    }
    hmm_add_log(c, m, ll);
    done = t >= T;
    return true;
}

extern "C" __global__ void __launch_bounds__(32 * HMM_WARPS, 2) hmm_forward_mma(
    int N, const double* __restrict__ start, const double* __restrict__ trans,
    const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    double* __restrict__ alpha, double* __restrict__ scale, double* __restrict__ loglik,
    const unsigned long long* __restrict__ mins)
{
    const double theta = hmm_theta(mins);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    // b_frag[s][j][v] = B[q + 4v][g] of 16-deep slice s and columns 8j ..
    // 8j + 7: P(to 8j + g | from hmm_mma_state(q, 4s + v)).
    double b_frag[2][4][4];
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int from = hmm_mma_state(q, 4 * s + v), to = 8 * j + g;
                b_frag[s][j][v] = from < N && to < N ? trans[(long long)from * N + to] : 0.0;
            }
    const long long base = off[s0];
    const int groups = (s1 - s0 + HMM_MMA_SEQS - 1) / HMM_MMA_SEQS;
    for (int grp = blockIdx.x * HMM_WARPS + warp; grp < groups; grp += gridDim.x * HMM_WARPS) {
        // Row h: sequence s0 + 16 grp + g + 8h, positions b[h] .. b[h] + T[h] - 1.
        long long b[2], T[2];
        bool valid[2], done[2], dead[2];
        double m[2], ll[2];  // log P = ll + log(m)
        const long long tmax = hmm_rows16(off, s0 + grp * HMM_MMA_SEQS, s1, g, base, b, T, valid, done, dead, m, ll);
        // The symbol of row h at step t (clamped to its sequence).
        auto sym_at = [&](int h, long long t) { return sym[b[h] + max(min(t, T[h] - 1), 0LL)]; };
        double x[2][8];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            double e0[8];
            hmm_mma_row(emis_k, sym_at(h, 0), N, q, valid[h], e0);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int st = hmm_mma_state(q, k);
                x[h][k] = st < N ? start[st] * e0[k] : 0.0;
            }
        }
        // Emission rows of steps t .. t + HMM_MMA_AHEAD - 1 in e[0 ..], the
        // symbols of step t + HMM_MMA_AHEAD in o_ahead: issued that many
        // steps before they are used, so their latency overlaps the steps'
        // arithmetic.
        double e[HMM_MMA_AHEAD][2][8];
        unsigned o_ahead[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int a = 0; a < HMM_MMA_AHEAD; ++a) hmm_mma_row(emis_k, sym_at(h, 1 + a), N, q, 1 + a < T[h], e[a][h]);
            o_ahead[h] = sym_at(h, 1 + HMM_MMA_AHEAD);
        }
        // Step t: x is step t - 1's unscaled vector, c its scale.
        for (long long t = 1; t <= tmax; ++t) {
            double c[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                c[h] = 0.0;
#pragma unroll
                for (int k = 0; k < 8; ++k) c[h] += hmm_certified(x[h][k], theta);
                c[h] += __shfl_xor_sync(FULL_MASK, c[h], 1);
                c[h] += __shfl_xor_sync(FULL_MASK, c[h], 2);
            }
            double y[2][8];
#pragma unroll
            for (int k = 0; k < 8; ++k) y[0][k] = y[1][k] = 0.0;
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                double a[8];
#pragma unroll
                for (int v = 0; v < 8; ++v) a[v] = x[v & 1][4 * s + (v >> 1)];
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_f64_16x8x16(y[0][2 * j], y[0][2 * j + 1], y[1][2 * j], y[1][2 * j + 1], a, b_frag[s][j]);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                double r = 0.0;
                if (!done[h] && hmm_row_takes(c[h], theta, t, T[h], done[h], dead[h], m[h], ll[h])) {
                    const long long rel = b[h] - base;
                    r = 1.0 / c[h];
                    if (alpha) hmm_mma_store(alpha + (rel + t - 1) * N, N, q, x[h], r);
                    if (scale && q == 0) scale[rel + t - 1] = c[h];
                }
#pragma unroll
                for (int k = 0; k < 8; ++k) x[h][k] = y[h][k] * (r * e[0][h][k]);
#pragma unroll
                for (int a = 0; a + 1 < HMM_MMA_AHEAD; ++a)
#pragma unroll
                    for (int k = 0; k < 8; ++k) e[a][h][k] = e[a + 1][h][k];
                hmm_mma_row(emis_k, o_ahead[h], N, q, !done[h] && t + HMM_MMA_AHEAD < T[h], e[HMM_MMA_AHEAD - 1][h]);
                o_ahead[h] = sym_at(h, t + 1 + HMM_MMA_AHEAD);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h)
            if (valid[h] && q == 0) loglik[grp * HMM_MMA_SEQS + g + 8 * h] = dead[h] ? ll[h] : ll[h] + log(m[h]);
    }
}

// ---- 33 to 128 states: a block per group of 16 sequences ----------------------
// hmm_forward for N <= 16 HMM_GK (compiled for each N's HMM_GK, its
// 16-state slices), HMM_GROUP_SEQS sequences a block of HMM_GK warps. A
// step of the group is one product of its 16 rows' vectors with the
// transitions on the FP64 tensor cores: warp w computes columns 16w ..
// 16w + 15, its slice of the transitions held in registers for the whole
// pass, and the rows' vectors cross between warps through shared memory,
// one __syncthreads a step. A block per sequence (hmm_forward) reads all
// the transitions from shared memory at every step for one row, and the
// batched kernels wait on a grid barrier at every step; here 16 rows share
// each read and no barrier spans blocks. As in hmm_forward_mma the scale
// applies after the product and each state's sum runs in the tensor cores'
// order, so results agree with the CPU to rounding; a row's sum over its
// states is the warps' partial sums (each over its 16 columns) added in
// warp order.
#ifndef HMM_GK
#define HMM_GK 8
#endif
#define HMM_GROUP_SEQS 16
// Row stride of the shared vectors, 4 (mod 16) doubles: the 32 lanes'
// reads of an A fragment fall in distinct banks, a wavefront a half-warp.
#define HMM_GLD (16 * HMM_GK + 4)

// The lane's four emission entries of symbol o for row h (columns col0 +
// 8j + u, j, u in {0, 1}), zeros with `ok` false or past N.
__device__ __forceinline__ void hmm_group_row(const double* __restrict__ emis_k, unsigned o, int N, int col0, bool ok, double (&e)[2][2]) {
    const double* row = emis_k + (long long)o * N;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int col = col0 + 8 * j;
        if ((N & 1) == 0) {
            const double2 v = ok && col < N ? *reinterpret_cast<const double2*>(row + col) : make_double2(0.0, 0.0);
            e[j][0] = v.x;
            e[j][1] = v.y;
        } else {
            e[j][0] = ok && col < N ? row[col] : 0.0;
            e[j][1] = ok && col + 1 < N ? row[col + 1] : 0.0;
        }
    }
}

extern "C" __global__ void __launch_bounds__(32 * HMM_GK, 1) hmm_forward_group(
    int N, const double* __restrict__ start, const double* __restrict__ trans,
    const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    double* __restrict__ loglik, const unsigned long long* __restrict__ mins)
{
    // xs[p][r]: row r's unscaled vector of the steps of parity p; part[p][w][r]:
    // its certified sum over warp w's columns.
    __shared__ __align__(16) double xs[2][HMM_GROUP_SEQS][HMM_GLD];
    __shared__ double part[2][HMM_GK][HMM_GROUP_SEQS];
    const double theta = hmm_theta(mins);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    // The lane's columns: col0 + 8j + u (j, u in {0, 1}).
    const int col0 = 16 * w + 2 * q;
    // b[k][j][v] = B[q + 4v][g] of slice k and columns 16w + 8j ..: P(to
    // 16w + 8j + g | from 16k + q + 4v).
    double b[HMM_GK][2][4];
#pragma unroll
    for (int k = 0; k < HMM_GK; ++k)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int from = 16 * k + q + 4 * v, to = 16 * w + 8 * j + g;
                b[k][j][v] = from < N && to < N ? trans[(long long)from * N + to] : 0.0;
            }
    const int groups = (s1 - s0 + HMM_GROUP_SEQS - 1) / HMM_GROUP_SEQS;
    for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
        // Row h of the lane: sequence s0 + 16 grp + g + 8h, positions b0[h] .. b0[h] + T[h] - 1.
        long long b0[2], T[2];
        bool valid[2], done[2], dead[2];
        double m[2], ll[2];  // log P = ll + log(m)
        const long long tmax = hmm_rows16(off, s0 + grp * HMM_GROUP_SEQS, s1, g, 0, b0, T, valid, done, dead, m, ll);
        auto sym_at = [&](int h, long long t) { return sym[b0[h] + max(min(t, T[h] - 1), 0LL)]; };
        // Row h's vector at the lane's columns into xs[p], its sum into part[p].
        auto put = [&](int p, int h, const double (&x)[2][2]) {
            double s = 0.0;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                *reinterpret_cast<double2*>(&xs[p][g + 8 * h][col0 + 8 * j]) = make_double2(x[j][0], x[j][1]);
                s += hmm_certified(x[j][0], theta) + hmm_certified(x[j][1], theta);
            }
            s += __shfl_xor_sync(FULL_MASK, s, 1);
            s += __shfl_xor_sync(FULL_MASK, s, 2);
            if (q == 0) part[p][w][g + 8 * h] = s;
        };
        // Step 0, and the emission entries of step 1 (each step loads the
        // next step's, so their latency overlaps a step's work).
        double e[2][2][2];
        unsigned o_ahead[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            double x[2][2];
            hmm_group_row(emis_k, sym_at(h, 0), N, col0, valid[h], x);
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const int col = col0 + 8 * j + u;
                    x[j][u] = col < N ? start[col] * x[j][u] : 0.0;
                }
            put(0, h, x);
            hmm_group_row(emis_k, sym_at(h, 1), N, col0, 1 < T[h], e[h]);
            o_ahead[h] = sym_at(h, 2);
        }
        __syncthreads();
        // Step t: xs[(t - 1) & 1] holds step t - 1's unscaled vectors, c
        // their scales.
        for (long long t = 1; t <= tmax; ++t) {
            const int p = (t - 1) & 1;
            double c[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                c[h] = 0.0;
#pragma unroll
                for (int k = 0; k < HMM_GK; ++k) c[h] += part[p][k][g + 8 * h];
            }
            // y[j] = D[g][8j + 2q], D[g][8j + 2q + 1], D[g + 8][..], D[g + 8][.. + 1].
            double y[2][4] = {{0.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 0.0}};
#pragma unroll
            for (int k = 0; k < HMM_GK; ++k) {
                double a[8];
#pragma unroll
                for (int v = 0; v < 8; ++v) a[v] = xs[p][g + 8 * (v & 1)][16 * k + q + 4 * (v >> 1)];
#pragma unroll
                for (int j = 0; j < 2; ++j) mma_f64_16x8x16(y[j][0], y[j][1], y[j][2], y[j][3], a, b[k][j]);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                double r = 0.0;
                if (!done[h] && hmm_row_takes(c[h], theta, t, T[h], done[h], dead[h], m[h], ll[h])) r = 1.0 / c[h];
                double x[2][2];
#pragma unroll
                for (int j = 0; j < 2; ++j)
#pragma unroll
                    for (int u = 0; u < 2; ++u) x[j][u] = y[j][2 * h + u] * (r * e[h][j][u]);
                put(1 - p, h, x);
                hmm_group_row(emis_k, o_ahead[h], N, col0, !done[h] && t + 1 < T[h], e[h]);
                o_ahead[h] = sym_at(h, t + 2);
            }
            __syncthreads();
        }
        if (w == 0 && q == 0) {
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (valid[h]) loglik[grp * HMM_GROUP_SEQS + g + 8 * h] = dead[h] ? ll[h] : ll[h] + log(m[h]);
        }
    }
}

// hmm_viterbi for N <= 32, back-pointers as bytes. Shared: HMM_WARPS * 32
// doubles.
// The log emission row entry of the lane's state for the key read ahead:
// a symbol's row of the table lemis_k (el = lemis_k + lane), or, for a
// density (HMM_DENSITY), the observation itself, whose log density is
// computed here (no table of rows: `obs` padded by HMM_SYM_PAD values).
#ifdef HMM_DENSITY
#define HMM_VIT_KEY(p) (obs[p])
#define HMM_VIT_ROW(k) (hmm_emis_log(ep, N, lane, (k)) + hmm_emis_shared(k))
typedef double hmm_vit_key;
#else
#define HMM_VIT_KEY(p) (sym[p])
#define HMM_VIT_ROW(k) (el[(long long)(k) * N])
typedef unsigned hmm_vit_key;
#endif

extern "C" __global__ void hmm_viterbi_warp(
    int N, const double* __restrict__ lstart, const double* __restrict__ ltrans,
    const double* __restrict__ lemis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    unsigned char* __restrict__ back, unsigned* __restrict__ path, double* __restrict__ logp,
    const double* __restrict__ obs, const double* __restrict__ ep)
{
    extern __shared__ double sm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double* wal = sm + warp * HMM_WN;
    const bool on = lane < N;
    double l_col[HMM_WN];
#pragma unroll
    for (int i = 0; i < HMM_WN; ++i) l_col[i] = (on && i < N) ? ltrans[(long long)i * N + lane] : HMM_NEG_INF;
    const long long base = off[s0];
    for (int s = s0 + blockIdx.x * HMM_WARPS + warp; s < s1; s += gridDim.x * HMM_WARPS) {
        const long long b = off[s];
        const long long T = off[s + 1] - b;
        const long long rel = b - base;
        const double* el = lemis_k + lane;
        unsigned char* bk = back + (rel + 1) * N + lane;  // row t in step t
        double d = on ? lstart[lane] + HMM_VIT_ROW(HMM_VIT_KEY(b)) : HMM_NEG_INF;
        // Read ahead as in hmm_forward_warp.
        double e_next = on ? HMM_VIT_ROW(HMM_VIT_KEY(b + 1)) : 0.0;
        hmm_vit_key o_ahead = HMM_VIT_KEY(b + 2);
        for (long long t = 1; t < T; ++t) {
            const double e = e_next;
            if (on) e_next = HMM_VIT_ROW(o_ahead);
            o_ahead = HMM_VIT_KEY(b + t + 2);
            __syncwarp();
            wal[lane] = d;
            __syncwarp();
            double best = HMM_NEG_INF;
            int arg = 0;
            const double2* w2 = reinterpret_cast<const double2*>(wal);
#pragma unroll
            for (int i = 0; i < HMM_WN / 2; ++i) {
                const double2 p = w2[i];
                const double v0 = p.x + l_col[2 * i], v1 = p.y + l_col[2 * i + 1];
                if (v0 > best) { best = v0; arg = 2 * i; }
                if (v1 > best) { best = v1; arg = 2 * i + 1; }
            }
            d = on ? best + e : HMM_NEG_INF;
            if (on) *bk = (unsigned char)arg;
            bk += N;
        }
        // Final argmax, ties to the lowest state.
        double best = d;
        int arg = on ? lane : HMM_WN;
        for (int o = 16; o > 0; o >>= 1) {
            const double ob = __shfl_xor_sync(FULL_MASK, best, o);
            const int oa = (int)__shfl_xor_sync(FULL_MASK, (double)arg, o);
            if (ob > best || (ob == best && oa < arg)) { best = ob; arg = oa; }
        }
        __syncwarp();
        if (lane == 0) {
            hmm_backtrack(best, arg, T, rel, N, back, path, &logp[s - s0]);
        }
    }
}

// hmm_backward for N <= 32: lane i owns state i and row i of A (registers),
// and with counting, row i of the transition counts (registers), its
// column of the emission counts (the warp's shared slice, V * 32 doubles)
// and its start count; each warp adds them to accumulator
// `partial + (blockIdx.x * HMM_WARPS + warp) * (N + N*N + V*N)` at the end.
// Shared: HMM_WARPS * 32 doubles, plus HMM_WARPS * V * 32 when counting.
extern "C" __global__ void hmm_backward_warp(
    int N, int V, const double* __restrict__ trans, const double* __restrict__ emis_k,
    const unsigned* __restrict__ sym, const long long* __restrict__ off, int s0, int s1,
    const double* __restrict__ alpha, const double* __restrict__ scale,
    const double* __restrict__ loglik, double* __restrict__ gamma, double* __restrict__ partial,
    const double* __restrict__ obs, const double* __restrict__ ep)
{
    extern __shared__ double sm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double* wal = sm + warp * HMM_WN;
    double* w_emis = sm + HMM_WARPS * HMM_WN + (long long)warp * V * HMM_WN;
    const bool on = lane < N;
    double a_row[HMM_WN], xi[HMM_WN];
#pragma unroll
    for (int j = 0; j < HMM_WN; ++j) {
        a_row[j] = (on && j < N) ? trans[(long long)lane * N + j] : 0.0;
        xi[j] = 0.0;
    }
    double st = 0.0;
    if (partial)
        for (int k = 0; k < V; ++k) w_emis[k * HMM_WN + lane] = 0.0;
    const long long base = off[s0];
    for (int s = s0 + blockIdx.x * HMM_WARPS + warp; s < s1; s += gridDim.x * HMM_WARPS) {
        const long long b = off[s];
        const long long T = off[s + 1] - b;
        const long long rel = b - base;
        if (!hmm_alive(loglik[s - s0])) {
            if (gamma)
                for (long long k = lane; k < T * N; k += 32) gamma[rel * N + k] = HMM_NAN;
            continue;
        }
        double beta = 1.0;
        double g = on ? alpha[(rel + T - 1) * N + lane] : 0.0;
        if (on) {
            if (gamma) gamma[(rel + T - 1) * N + lane] = g;
            if (partial) {
                HMM_ADD_EMISSION(w_emis, HMM_WN, sym[b + T - 1], b + T - 1, lane, g);
                if (T == 1) st += g;
            }
        }
        // Loads for step t - 1 are issued during step t, the symbol a step
        // earlier; at t = 0 they repeat row 0 (in bounds, unused).
        const unsigned* sq = sym + b;
        const double* el = emis_k + lane;  // the lane's state in emission row k: el[k * N]
        const double* al = alpha + rel * N + lane;
        double e_next = on && T > 1 ? el[(long long)sq[T - 1] * N] : 0.0;
        double c_next = T > 1 ? scale[rel + T - 1] : 1.0;
        double a_next = on && T > 1 ? al[(T - 2) * N] : 0.0;
        unsigned o_ahead = T > 1 ? sq[T - 2] : 0;  // symbol t in step t
        for (long long t = T - 2; t >= 0; --t) {
            // e(o_{t+1}) / c_{t+1}, from loads issued a step ago: off the
            // chain from one step's beta to the next.
            const double er = e_next * (1.0 / c_next);
            const double a_t = a_next;
            const unsigned o_t = o_ahead;
            const long long tp = t > 0 ? t - 1 : 0;
            if (on) {
                e_next = el[(long long)o_t * N];
                a_next = al[tp * N];
            }
            c_next = scale[rel + t];
            o_ahead = sq[tp];
            __syncwarp();
            wal[lane] = beta * er;
            __syncwarp();
            double sum;
            if (partial) {
                const double2* w2 = reinterpret_cast<const double2*>(wal);
                double acc[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
                for (int j = 0; j < HMM_WN / 2; ++j) {
                    const double2 p = w2[j];
                    acc[(2 * j) & 3] = fma(a_row[2 * j], p.x, acc[(2 * j) & 3]);
                    acc[(2 * j + 1) & 3] = fma(a_row[2 * j + 1], p.y, acc[(2 * j + 1) & 3]);
                    xi[2 * j] = fma(a_t, p.x, xi[2 * j]);
                    xi[2 * j + 1] = fma(a_t, p.y, xi[2 * j + 1]);
                }
                sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
            } else {
                sum = hmm_dot32(wal, a_row);
            }
            beta = a_t == 0.0 ? 0.0 : sum;
            g = a_t * beta;
            if (on) {
                if (gamma) gamma[(rel + t) * N + lane] = g;
                if (partial) {
                    HMM_ADD_EMISSION(w_emis, HMM_WN, o_t, b + t, lane, g);
                    if (t == 0) st += g;
                }
            }
        }
    }
    if (partial) {
        __syncwarp();
        double* mine = partial + ((long long)blockIdx.x * HMM_WARPS + warp) * ((long long)N + (long long)N * N + (long long)V * N);
        // Added, not stored: a slot collects every batch of the E-step.
        if (on) {
            mine[lane] += st;
#pragma unroll
            for (int j = 0; j < HMM_WN; ++j)
                if (j < N) mine[N + (long long)lane * N + j] += xi[j];
            for (int k = 0; k < V; ++k) mine[N + (long long)N * N + (long long)k * N + lane] += w_emis[k * HMM_WN + lane];
        }
    }
}

// ---- Few states (N <= 8): one thread per sequence -----------------------------
// With a handful of states a warp per sequence leaves most lanes idle and
// pays a warp reduction every step. Here a thread keeps its sequence's
// state vector in registers; the transitions are in shared memory, read by
// every thread at the same address (broadcast). Compiled for one N at a
// time (HMM_TN): the loops unroll and the vectors stay in registers. Same
// layouts, results and certificate as the *_warp kernels; the sums over
// states run in increasing order, as on the CPU.

#ifndef HMM_TN
#define HMM_TN 4
#endif

// The emission row of position p for N = TN into e: symbol sym[p]'s row
// of emis_k, or, for a density (HMM_DENSITY), the row of observation
// obs[p] computed as hmm_emission_rows_thread writes it (no table of rows).
template <int TN>
__device__ __forceinline__ void hmm_row_t(const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
                                          const double* __restrict__ obs, const double* __restrict__ ep,
                                          long long p, double (&e)[TN])
{
#ifdef HMM_DENSITY
    const double x = obs[p];
    double top = HMM_NEG_INF;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        e[j] = hmm_emis_log(ep, TN, j, x);
        top = fmax(top, e[j]);
    }
    const bool none = !(top > HMM_NEG_INF);
#pragma unroll
    for (int j = 0; j < TN; ++j) e[j] = none ? 0.0 : exp(e[j] - top);
#else
    const double* row = emis_k + (long long)sym[p] * TN;
#pragma unroll
    for (int j = 0; j < TN; ++j) e[j] = row[j];
#endif
}

// hmm_forward_warp for N = TN. Shared: TN * TN doubles (the transitions).
// A density's rows are computed here from its observations `obs` and
// parameters `ep` (HMM_DENSITY; unused otherwise), not read from a table:
// at N = 4, M = 100,000, T = 200 the table was 640 MB written and read
// back, and the pass on the device took 1.29 ms with it, 0.83 without it
// (H200). The warp kernel keeps its table: computing each row's log
// densities, their maximum and 32 exponentials inside its step made the
// pass at N = 32, M = 10,000, T = 1,000 take 6.95 ms instead of 5.46.
template <int TN>
__device__ __forceinline__ void hmm_forward_thread_n(
    const double* __restrict__ start, const double* __restrict__ trans,
    const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    double* __restrict__ alpha, double* __restrict__ scale, double* __restrict__ loglik,
    const unsigned long long* __restrict__ mins, const double* __restrict__ obs, const double* __restrict__ ep)
{
    extern __shared__ double sm[];
    double* a = sm;
    for (int k = threadIdx.x; k < TN * TN; k += blockDim.x) a[k] = trans[k];
    __syncthreads();
    const double theta = hmm_theta(mins);
    const long long base = off[s0];
    for (int s = s0 + blockIdx.x * blockDim.x + threadIdx.x; s < s1; s += gridDim.x * blockDim.x) {
        const long long b = off[s];
        const long long T = off[s + 1] - b;
        const long long rel = b - base;
        double x[TN], row[TN];
        hmm_row_t<TN>(emis_k, sym, obs, ep, b, row);
#pragma unroll
        for (int i = 0; i < TN; ++i) x[i] = start[i] * row[i];
        double m = 1.0, ll = 0.0;  // log P = ll + log(m)
        bool dead = false;
        // Step t: x is step t - 1's unscaled vector, c its scale.
        for (long long t = 1;; ++t) {
            double c = 0.0;
#pragma unroll
            for (int i = 0; i < TN; ++i) c += hmm_certified(x[i], theta);
            if (!(c > 0.0)) {
                dead = true;
                ll = hmm_dead(c, theta);
                break;
            }
            const double r = 1.0 / c;
            hmm_add_log(c, m, ll);
            if (alpha) {
#pragma unroll
                for (int i = 0; i < TN; ++i) alpha[(rel + t - 1) * TN + i] = x[i] * r;
            }
            if (scale) scale[rel + t - 1] = c;
            if (t >= T) break;
            hmm_row_t<TN>(emis_k, sym, obs, ep, b + t, row);
            double y[TN];
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                double acc = 0.0;
#pragma unroll
                for (int i = 0; i < TN; ++i) acc = fma(x[i], a[i * TN + j], acc);
                y[j] = acc;
            }
#pragma unroll
            for (int j = 0; j < TN; ++j) x[j] = y[j] * (r * row[j]);
        }
        loglik[s - s0] = dead ? ll : ll + log(m);
    }
}

extern "C" __global__ void hmm_forward_thread(
    int N, const double* __restrict__ start, const double* __restrict__ trans,
    const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    double* __restrict__ alpha, double* __restrict__ scale, double* __restrict__ loglik,
    const unsigned long long* __restrict__ mins, const double* __restrict__ obs, const double* __restrict__ ep)
{
    hmm_forward_thread_n<HMM_TN>(start, trans, emis_k, sym, off, s0, s1, alpha, scale, loglik, mins, obs, ep);
}

// The emission counts of position p (symbol o) in state i with posterior g
// into a thread's interleaved counts (count c at acc[c * stride]; emission
// count (k, i) is c = k * TN + i), as HMM_ADD_EMISSION.
#ifdef HMM_DENSITY
#define HMM_ADD_EMISSION_T(acc, stride, TN, o, p, i, g) \
    do { \
        const double x_ = obs[p]; \
        for (int k_ = 0; k_ < HMM_STATS; ++k_) (acc)[((long long)k_ * (TN) + (i)) * (stride)] += (g) * hmm_emis_feature(k_, x_, (i), ep); \
    } while (0)
#else
#define HMM_ADD_EMISSION_T(acc, stride, TN, o, p, i, g) ((acc)[((long long)(o) * (TN) + (i)) * (stride)] += (g))
#endif

// hmm_backward_warp for N = TN: a thread per sequence, its beta in
// registers, the transitions in shared memory (read at one address by
// every thread). Counting, a thread keeps its start and transition counts
// in registers and its emission counts (V * TN, by symbol) in its own
// column of shared memory (count c of thread x at counts[c * blockDim.x +
// x]: no bank conflicts); at the end the block adds its threads' counts in
// thread order into accumulator `partial + blockIdx.x * (TN + TN*TN +
// V*TN)` (the same layout as hmm_backward_warp's). Sums over states run in
// increasing order. Shared: TN * TN doubles, plus blockDim.x * (TN + TN*TN
// + V*TN) when counting.
template <int TN>
__device__ __forceinline__ void hmm_backward_thread_n(
    int V, const double* __restrict__ trans, const double* __restrict__ emis_k,
    const unsigned* __restrict__ sym, const long long* __restrict__ off, int s0, int s1,
    const double* __restrict__ alpha, const double* __restrict__ scale,
    const double* __restrict__ loglik, double* __restrict__ gamma, double* __restrict__ partial,
    const double* __restrict__ obs, const double* __restrict__ ep)
{
    extern __shared__ double sm[];
    double* a = sm;
    const int size = TN + TN * TN + V * TN, bd = blockDim.x;
    double* counts = sm + TN * TN;
    double* mine = counts + threadIdx.x;  // count c at mine[c * bd]
    double* emis_counts = mine + (long long)(TN + TN * TN) * bd;
    for (int k = threadIdx.x; k < TN * TN; k += bd) a[k] = trans[k];
    if (partial)
        for (int c = 0; c < size; ++c) mine[(long long)c * bd] = 0.0;
    __syncthreads();
    double st[TN], xi[TN][TN];
#pragma unroll
    for (int i = 0; i < TN; ++i) {
        st[i] = 0.0;
#pragma unroll
        for (int j = 0; j < TN; ++j) xi[i][j] = 0.0;
    }
    const long long base = off[s0];
    for (int s = s0 + blockIdx.x * bd + threadIdx.x; s < s1; s += gridDim.x * bd) {
        const long long b = off[s];
        const long long T = off[s + 1] - b;
        const long long rel = b - base;
        if (!hmm_alive(loglik[s - s0])) {
            if (gamma)
                for (long long k = 0; k < T * TN; ++k) gamma[rel * TN + k] = HMM_NAN;
            continue;
        }
        double beta[TN];
        {
            const double* al = alpha + (rel + T - 1) * TN;
#pragma unroll
            for (int i = 0; i < TN; ++i) {
                beta[i] = 1.0;
                const double g = al[i];
                if (gamma) gamma[(rel + T - 1) * TN + i] = g;
                if (partial) {
                    HMM_ADD_EMISSION_T(emis_counts, bd, TN, sym[b + T - 1], b + T - 1, i, g);
                    if (T == 1) st[i] += g;
                }
            }
        }
        for (long long t = T - 2; t >= 0; --t) {
            // w_j = beta_{t+1}(j) e_j(o_{t+1}) / c_{t+1}, as hmm_backward_warp.
            const double* e = emis_k + (long long)sym[b + t + 1] * TN;
            const double r = 1.0 / scale[rel + t + 1];
            const double* al = alpha + (rel + t) * TN;
            double w[TN], at[TN];
#pragma unroll
            for (int j = 0; j < TN; ++j) w[j] = beta[j] * (e[j] * r);
#pragma unroll
            for (int i = 0; i < TN; ++i) at[i] = al[i];
            const unsigned o = sym[b + t];
#pragma unroll
            for (int i = 0; i < TN; ++i) {
                double sum = 0.0;
#pragma unroll
                for (int j = 0; j < TN; ++j) sum = fma(a[i * TN + j], w[j], sum);
                beta[i] = at[i] == 0.0 ? 0.0 : sum;
                const double g = at[i] * beta[i];
                if (gamma) gamma[(rel + t) * TN + i] = g;
                if (partial) {
#pragma unroll
                    for (int j = 0; j < TN; ++j) xi[i][j] = fma(at[i], w[j], xi[i][j]);
                    HMM_ADD_EMISSION_T(emis_counts, bd, TN, o, b + t, i, g);
                    if (t == 0) st[i] += g;
                }
            }
        }
    }
    if (!partial) return;
#pragma unroll
    for (int i = 0; i < TN; ++i) {
        mine[(long long)i * bd] = st[i];
#pragma unroll
        for (int j = 0; j < TN; ++j) mine[(long long)(TN + i * TN + j) * bd] = xi[i][j];
    }
    __syncthreads();
    // Added, not stored: a slot collects every batch of the E-step.
    double* slot = partial + (long long)blockIdx.x * size;
    for (int c = threadIdx.x; c < size; c += bd) {
        double sum = 0.0;
        for (int x = 0; x < bd; ++x) sum += counts[(long long)c * bd + x];
        slot[c] += sum;
    }
}

extern "C" __global__ void hmm_backward_thread(
    int N, int V, const double* __restrict__ trans, const double* __restrict__ emis_k,
    const unsigned* __restrict__ sym, const long long* __restrict__ off, int s0, int s1,
    const double* __restrict__ alpha, const double* __restrict__ scale,
    const double* __restrict__ loglik, double* __restrict__ gamma, double* __restrict__ partial,
    const double* __restrict__ obs, const double* __restrict__ ep)
{
    hmm_backward_thread_n<HMM_TN>(V, trans, emis_k, sym, off, s0, s1, alpha, scale, loglik, gamma, partial, obs, ep);
}

// The log emission of state j for key k (a symbol, or a density's
// observation), as HMM_VIT_ROW for lane j.
#ifdef HMM_DENSITY
#define HMM_VIT_ROW_OF(k, j, TN) (hmm_emis_log(ep, (TN), (j), (k)) + hmm_emis_shared(k))
#else
#define HMM_VIT_ROW_OF(k, j, TN) (lemis_k[(long long)(k) * (TN) + (j)])
#endif

// hmm_viterbi_warp for N = TN: back-pointers as bytes, ties to the lowest
// state; bit-identical to it and to the CPU. Shared: TN * TN doubles (the
// log transitions).
template <int TN>
__device__ __forceinline__ void hmm_viterbi_thread_n(
    const double* __restrict__ lstart, const double* __restrict__ ltrans,
    const double* __restrict__ lemis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    unsigned char* __restrict__ back, unsigned* __restrict__ path, double* __restrict__ logp,
    const double* __restrict__ obs, const double* __restrict__ ep)
{
    extern __shared__ double sm[];
    double* lt = sm;
    for (int k = threadIdx.x; k < TN * TN; k += blockDim.x) lt[k] = ltrans[k];
    __syncthreads();
    const long long base = off[s0];
    for (int s = s0 + blockIdx.x * blockDim.x + threadIdx.x; s < s1; s += gridDim.x * blockDim.x) {
        const long long b = off[s];
        const long long T = off[s + 1] - b;
        const long long rel = b - base;
        double d[TN];
        {
            const hmm_vit_key k = HMM_VIT_KEY(b);
#pragma unroll
            for (int i = 0; i < TN; ++i) d[i] = lstart[i] + HMM_VIT_ROW_OF(k, i, TN);
        }
        for (long long t = 1; t < T; ++t) {
            const hmm_vit_key k = HMM_VIT_KEY(b + t);
            unsigned char* bp = back + (rel + t) * TN;
            double nd[TN];
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                double best = HMM_NEG_INF;
                int arg = 0;
#pragma unroll
                for (int i = 0; i < TN; ++i) {
                    const double v = d[i] + lt[i * TN + j];
                    if (v > best) { best = v; arg = i; }
                }
                nd[j] = best + HMM_VIT_ROW_OF(k, j, TN);
                bp[j] = (unsigned char)arg;
            }
#pragma unroll
            for (int j = 0; j < TN; ++j) d[j] = nd[j];
        }
        double best = d[0];
        int arg = 0;
#pragma unroll
        for (int j = 1; j < TN; ++j) {
            if (d[j] > best) { best = d[j]; arg = j; }
        }
        hmm_backtrack(best, arg, T, rel, TN, back, path, &logp[s - s0]);
    }
}

extern "C" __global__ void hmm_viterbi_thread(
    int N, const double* __restrict__ lstart, const double* __restrict__ ltrans,
    const double* __restrict__ lemis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, int s0, int s1,
    unsigned char* __restrict__ back, unsigned* __restrict__ path, double* __restrict__ logp,
    const double* __restrict__ obs, const double* __restrict__ ep)
{
    hmm_viterbi_thread_n<HMM_TN>(lstart, ltrans, lemis_k, sym, off, s0, s1, back, path, logp, obs, ep);
}
