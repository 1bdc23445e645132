// Few long sequences, parallel in time (core/src/hmm/gpu/scan.rs launches
// these; core/src/hmm/scan.rs is the reference they follow step by step,
// and its module doc says why the results are exact to rounding).
//
// Steps 1..T-1 of each sequence are cut into chunks (cb[c] <= t < ce[c],
// absolute symbol positions; chunk_seq[c] its sequence; co[s]..co[s+1] the
// chunks of sequence s). Per chunk c:
//   hmm_scan_products      R_c = prod of A diag(e(o_t)), one thread per row,
//                          rows kept in range by powers of two (log scale L)
//   hmm_scan_bounds        one warp per sequence: log forward vectors
//                          before every chunk (fwd, (c + s) x N) and after
//                          the last, log backward vectors at every chunk's
//                          last step (bwd, c x N), the log-likelihood
//   hmm_scan_posterior     one warp per chunk: the ordinary scaled
//                          recursions from the chunk's boundary vectors
// and for Viterbi, in log space (adds and compares only):
//   hmm_scan_vit_products  the max-plus product of the chunk, per row
//   hmm_scan_vit_bounds    best vectors at the boundaries with a
//                          back-pointer per chunk and state, the best
//                          log-probability, each chunk's start and end state
//   hmm_scan_vit_paths     one warp per chunk: the best path from its start
//                          to its end state, back-pointers in shared memory
// SCAN_N (the number of states, at most 32) is fixed at compile time, so
// vectors live in registers. Tables as kernels/hmm.cu lays them out:
// trans[i * N + j] = P(j | i), emis_k[k * N + i] = P(k | i), logs likewise.
// A sequence whose linear steps leave the scan's floor (hmm::scan::FLOOR)
// is marked uncertain (bad[s], then log-likelihood NaN) and the host
// computes it sequentially.

#ifndef SCAN_N
#define SCAN_N 1
#endif
#define SN SCAN_N
#define SCAN_RANGE 256
#define SCAN_NO_STATE 0xffffffffu

__device__ __forceinline__ double scan_pow2(int e) { return __hiloint2double((1023 + e) << 20, 0); }
#define SCAN_FLOOR scan_pow2(-500)

// One row of a chunk's product over steps [b, e), starting from state i:
// sum-product (MAXPLUS false: linear tables, rescaled; returns false when
// uncertain) or max-plus (log tables). Writes the row to out and its log
// scale to *l (-inf: a zero row).
template <bool MAXPLUS>
__device__ bool scan_row(const double* __restrict__ sa, const double* __restrict__ emis_k,
                         const unsigned* __restrict__ sym, long long b, long long e, int i,
                         double* __restrict__ out, double* __restrict__ l)
{
    double r[SN];
#pragma unroll
    for (int j = 0; j < SN; ++j) r[j] = (j == i) ? (MAXPLUS ? 0.0 : 1.0) : (MAXPLUS ? HMM_NEG_INF : 0.0);
    long long ex = 0;
    bool zero = false;
    for (long long t = b; t < e; ++t) {
        const double* em = emis_k + (long long)sym[t] * SN;
        double nx[SN];
        double m = MAXPLUS ? HMM_NEG_INF : 0.0;
#pragma unroll
        for (int j = 0; j < SN; ++j) {
            double acc = MAXPLUS ? HMM_NEG_INF : 0.0;
#pragma unroll
            for (int k = 0; k < SN; ++k) {
                if (MAXPLUS) {
                    const double v = r[k] + sa[k * SN + j];
                    acc = v > acc ? v : acc;
                } else {
                    acc = fma(r[k], sa[k * SN + j], acc);
                }
            }
            nx[j] = MAXPLUS ? acc + em[j] : acc * em[j];
            m = fmax(m, nx[j]);
        }
        if (!MAXPLUS) {
            if (!(m >= SCAN_FLOOR)) {
                bool none = true;
#pragma unroll
                for (int j = 0; j < SN; ++j) none = none && em[j] == 0.0;
                if (m == 0.0 && none) { zero = true; break; }
                return false;
            }
            const int q = ilogb(m);
            if (q < -SCAN_RANGE || q > SCAN_RANGE) {
                const double f = scan_pow2(-q);
#pragma unroll
                for (int j = 0; j < SN; ++j) nx[j] *= f;
                ex += q;
            }
        }
#pragma unroll
        for (int j = 0; j < SN; ++j) r[j] = nx[j];
    }
    if (MAXPLUS) {
#pragma unroll
        for (int j = 0; j < SN; ++j) out[j] = r[j];
        return true;
    }
    if (zero) {
#pragma unroll
        for (int j = 0; j < SN; ++j) out[j] = 0.0;
        *l = HMM_NEG_INF;
        return true;
    }
    double m = 0.0;
#pragma unroll
    for (int j = 0; j < SN; ++j) m = fmax(m, r[j]);
    const int q = ilogb(m);
    const double f = scan_pow2(-q);
#pragma unroll
    for (int j = 0; j < SN; ++j) out[j] = r[j] * f;
    *l = (double)(ex + q) * 0.6931471805599453;
    return true;
}

// One thread per (chunk, row); the step table (trans or its log) in shared
// memory, read by every thread at the same address.
template <bool MAXPLUS>
__device__ void scan_products(const double* __restrict__ trans, const double* __restrict__ emis_k,
                              const unsigned* __restrict__ sym, const long long* __restrict__ cb,
                              const long long* __restrict__ ce, const int* __restrict__ chunk_seq, int C,
                              double* __restrict__ R, double* __restrict__ L, int* __restrict__ bad)
{
    __shared__ double sa[SN * SN];
    for (int k = threadIdx.x; k < SN * SN; k += blockDim.x) sa[k] = trans[k];
    __syncthreads();
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (long long)C * SN) return;
    const int c = (int)(g / SN), i = (int)(g % SN);
    double l = 0.0;
    if (!scan_row<MAXPLUS>(sa, emis_k, sym, cb[c], ce[c], i, R + g * SN, &l)) {
        bad[chunk_seq[c]] = 1;
        return;
    }
    if (!MAXPLUS) L[g] = l;
}

extern "C" __global__ void hmm_scan_products(
    const double* __restrict__ trans, const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ cb, const long long* __restrict__ ce, const int* __restrict__ chunk_seq, int C,
    double* __restrict__ R, double* __restrict__ L, int* __restrict__ bad)
{
    scan_products<false>(trans, emis_k, sym, cb, ce, chunk_seq, C, R, L, bad);
}

extern "C" __global__ void hmm_scan_vit_products(
    const double* __restrict__ ltrans, const double* __restrict__ lemis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ cb, const long long* __restrict__ ce, const int* __restrict__ chunk_seq, int C,
    double* __restrict__ D)
{
    scan_products<true>(ltrans, lemis_k, sym, cb, ce, chunk_seq, C, D, nullptr, nullptr);
}

// One warp (block) per sequence, lane j = state j.
extern "C" __global__ void hmm_scan_bounds(
    const double* __restrict__ start, const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, const int* __restrict__ co, int M,
    const double* __restrict__ R, const double* __restrict__ L, const int* __restrict__ bad,
    double* __restrict__ fwd, double* __restrict__ bwd, double* __restrict__ loglik)
{
    const int s = blockIdx.x, lane = threadIdx.x;
    if (s >= M) return;
    const bool on = lane < SN;
    const int c0 = co[s], c1 = co[s + 1];
    // Logs taken apart: the product can underflow. (A density's first step
    // is certified by the host, which marks a sequence whose first scale is
    // below DENSE_MIN uncertain, as the sequential passes do.)
    double a = on ? log(start[lane]) + log(emis_k[(long long)sym[off[s]] * SN + lane]) : HMM_NEG_INF;
    double* fw = fwd + (long long)(c0 + s) * SN;
    if (on) fw[lane] = a;
    for (int c = c0; c < c1; ++c) {
        const double u = on ? a + L[(long long)c * SN + lane] : HMM_NEG_INF;
        const double top = warp_max(u);
        const double w = top == HMM_NEG_INF ? 0.0 : exp(u - top);
        const double* rc = R + (long long)c * SN * SN + (on ? lane : 0);
        double v = 0.0;
#pragma unroll
        for (int i = 0; i < SN; ++i) v = fma(__shfl_sync(FULL_MASK, w, i), rc[i * SN], v);
        a = (on && top != HMM_NEG_INF) ? log(v) + top : HMM_NEG_INF;
        if (on) fw[(long long)(c - c0 + 1) * SN + lane] = a;
    }
    const double top = warp_max(a);
    const double sum = warp_sum(top == HMM_NEG_INF ? 0.0 : exp(a - top));
    double ll = top == HMM_NEG_INF ? HMM_NEG_INF : log(sum) + top;
    if (bad[s]) ll = HMM_NAN;
    if (lane == 0) loglik[s] = ll;
    if (bwd == nullptr) return;
    double b = 0.0;
    if (on) bwd[(long long)(c1 - 1) * SN + lane] = 0.0;
    for (int c = c1 - 1; c > c0; --c) {
        const double tb = warp_max(on ? b : HMM_NEG_INF);
        const double x = (on && tb != HMM_NEG_INF) ? exp(b - tb) : 0.0;
        const double* rc = R + ((long long)c * SN + (on ? lane : 0)) * SN;
        double acc = 0.0;
#pragma unroll
        for (int j = 0; j < SN; ++j) acc = fma(rc[j], __shfl_sync(FULL_MASK, x, j), acc);
        const double l = on ? L[(long long)c * SN + lane] : HMM_NEG_INF;
        b = (tb == HMM_NEG_INF || l == HMM_NEG_INF) ? HMM_NEG_INF : log(acc) + tb + l;
        if (on) bwd[(long long)(c - 1) * SN + lane] = b;
    }
}

// One warp (block) per chunk, lane j = state j: forward vectors of the
// chunk (normalised to sum 1) into probs, then backward from the chunk's
// end, turning them into posteriors. The first chunk of a sequence also
// writes step 0. With counts (Baum-Welch), the chunk's expected counts go
// to its slot (start N, transitions N x N as exact counts, emissions V x N
// by symbol): the transition into each of its steps, the first one's from
// the forward vector before the chunk. A density emission (HMM_DENSITY,
// its block of hmm_emission.cu's functions prepended; V = HMM_STATS) adds
// its statistics phi_k(obs[t]) instead, with its parameters `ep`.
extern "C" __global__ void hmm_scan_posterior(
    const double* __restrict__ trans, const double* __restrict__ emis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, const long long* __restrict__ cb, const long long* __restrict__ ce,
    const int* __restrict__ chunk_seq, const int* __restrict__ co,
    const double* __restrict__ fwd, const double* __restrict__ bwd, double* loglik, double* __restrict__ probs,
    int V, double* __restrict__ counts, const double* __restrict__ obs, const double* __restrict__ ep)
{
    // Rows padded to SN + 1: lane i reads row i without bank conflicts.
    __shared__ double sa[SN * (SN + 1)];
    for (int k = threadIdx.x; k < SN * SN; k += blockDim.x) sa[(k / SN) * (SN + 1) + k % SN] = trans[k];
    __syncthreads();
    const int c = blockIdx.x, lane = threadIdx.x;
    const bool on = lane < SN;
    const int s = chunk_seq[c];
    // Another chunk of s may set loglik[s] to NaN (uncertain) while this one
    // runs: the host then recomputes s and ignores its rows and counts.
    const double ll = loglik[s];
    if (isnan(ll)) return;
    const long long b = cb[c], e = ce[c];
    const bool first_chunk = c == co[s];
    const long long first = first_chunk ? off[s] : b;
    if (ll == HMM_NEG_INF) {
        if (on)
            for (long long t = first; t < e; ++t) probs[t * SN + lane] = HMM_NAN;
        return;
    }
    const double* fa = fwd + (long long)(c + s) * SN;
    double x = on ? fa[lane] : HMM_NEG_INF;
    double top = warp_max(x);
    x = on ? exp(x - top) : 0.0;
    x = x / warp_sum(x);
    const double before = x;
    if (first_chunk && on) probs[first * SN + lane] = x;
    for (long long t = b; t < e; ++t) {
        double y = 0.0;
#pragma unroll
        for (int i = 0; i < SN; ++i) y = fma(__shfl_sync(FULL_MASK, x, i), sa[i * (SN + 1) + (on ? lane : 0)], y);
        y = on ? y * emis_k[(long long)sym[t] * SN + lane] : 0.0;
        if (!(warp_max(y) >= SCAN_FLOOR)) {
            if (lane == 0) loglik[s] = HMM_NAN;
            return;
        }
        y = y / warp_sum(y);
        if (on) probs[t * SN + lane] = y;
        x = y;
    }
    const double be = on ? bwd[(long long)c * SN + lane] : HMM_NEG_INF;
    top = warp_max(be);
    double beta = on ? exp(be - top) : 0.0;
    double* slot = counts ? counts + (long long)c * (SN + SN * SN + (long long)V * SN) : nullptr;
    double xacc[SN];
#pragma unroll
    for (int i = 0; i < SN; ++i) xacc[i] = 0.0;
    for (long long t = e - 1; t >= first; --t) {
        const double g = on ? probs[t * SN + lane] * beta : 0.0;
        const double z = warp_sum(g);
        if (!(z >= SCAN_FLOOR)) {
            if (lane == 0) loglik[s] = HMM_NAN;
            return;
        }
        if (on) probs[t * SN + lane] = g / z;
        if (slot && on) {
#ifdef HMM_DENSITY
            for (int k = 0; k < HMM_STATS; ++k) slot[SN + SN * SN + k * SN + lane] += (g / z) * hmm_emis_feature(k, obs[t], lane, ep);
#else
            slot[SN + SN * SN + (long long)sym[t] * SN + lane] += g / z;
#endif
            if (t == off[s]) slot[lane] += g / z;
        }
        if (t > first || (slot && !first_chunk)) {
            const double q = on ? emis_k[(long long)sym[t] * SN + lane] * beta : 0.0;
            if (slot) {
                // xi(i, j) = prev_i A_ij q_j / Z: lane j keeps column j.
                const double prev = t > first ? (on ? probs[(t - 1) * SN + lane] : 0.0) : before;
                double pa = 0.0;
#pragma unroll
                for (int i = 0; i < SN; ++i) pa = fma(__shfl_sync(FULL_MASK, prev, i), sa[i * (SN + 1) + (on ? lane : 0)], pa);
                const double zx = warp_sum(on ? pa * q : 0.0);
                if (zx > 0.0) {
                    const double w = q / zx;
#pragma unroll
                    for (int i = 0; i < SN; ++i) xacc[i] = fma(__shfl_sync(FULL_MASK, prev, i) * sa[i * (SN + 1) + (on ? lane : 0)], w, xacc[i]);
                }
            }
            if (!(t > first)) break;
            double nb = 0.0;
#pragma unroll
            for (int j = 0; j < SN; ++j) nb = fma(sa[(on ? lane : 0) * (SN + 1) + j], __shfl_sync(FULL_MASK, q, j), nb);
            nb = on ? nb : 0.0;
            const double m = warp_max(nb);
            if (!(m >= SCAN_FLOOR)) {
                if (lane == 0) loglik[s] = HMM_NAN;
                return;
            }
            beta = nb / m;
        }
    }
    if (slot && on)
#pragma unroll
        for (int i = 0; i < SN; ++i) slot[SN + i * SN + lane] = xacc[i];
}

// The best of lanes' values (lowest lane on ties) and its lane.
__device__ __forceinline__ void warp_argmax(double& best, int& arg) {
    for (int o = 16; o > 0; o >>= 1) {
        const double ob = __shfl_xor_sync(FULL_MASK, best, o);
        const int oa = __shfl_xor_sync(FULL_MASK, arg, o);
        if (ob > best || (ob == best && oa < arg)) { best = ob; arg = oa; }
    }
}

// The max over predecessors i of (lane value of lane i) + col[i], lowest i
// on ties: a Viterbi step's best and back-pointer for this lane's state.
__device__ __forceinline__ double scan_vit_step(double d, const double* col, int& arg) {
    double best = HMM_NEG_INF;
    arg = 0;
#pragma unroll
    for (int i = 0; i < SN; ++i) {
        const double v = __shfl_sync(FULL_MASK, d, i) + col[i];
        if (v > best) { best = v; arg = i; }
    }
    return best;
}

// One warp (block) per sequence.
extern "C" __global__ void hmm_scan_vit_bounds(
    const double* __restrict__ lstart, const double* __restrict__ lemis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ off, const int* __restrict__ co, int M, const double* __restrict__ D,
    unsigned char* ptr, unsigned* __restrict__ starts, unsigned* __restrict__ ends,
    double* __restrict__ logp, unsigned* __restrict__ path)
{
    const int s = blockIdx.x, lane = threadIdx.x;
    if (s >= M) return;
    const bool on = lane < SN;
    const int c0 = co[s], c1 = co[s + 1];
    double d = on ? lstart[lane] + lemis_k[(long long)sym[off[s]] * SN + lane] : HMM_NEG_INF;
    for (int c = c0; c < c1; ++c) {
        double col[SN];
        const double* dc = D + (long long)c * SN * SN + (on ? lane : 0);
#pragma unroll
        for (int i = 0; i < SN; ++i) col[i] = dc[i * SN];
        int arg;
        const double best = scan_vit_step(d, col, arg);
        if (on) ptr[(long long)c * SN + lane] = (unsigned char)arg;
        d = on ? best : HMM_NEG_INF;
    }
    double best = d;
    int last = on ? lane : 32;
    warp_argmax(best, last);
    if (lane == 0) logp[s] = best;
    if (best == HMM_NEG_INF) {
        for (long long t = off[s] + lane; t < off[s + 1]; t += 32) path[t] = SCAN_NO_STATE;
        return;
    }
    __syncwarp();
    if (lane == 0) {
        for (int c = c1 - 1; c >= c0; --c) {
            ends[c] = (unsigned)last;
            last = ptr[(long long)c * SN + last];
            starts[c] = (unsigned)last;
        }
        path[off[s]] = (unsigned)last;
    }
}

// One warp (block) per chunk: the best path from the chunk's start state
// to its end state; back-pointers (steps x N bytes) in shared memory.
extern "C" __global__ void hmm_scan_vit_paths(
    const double* __restrict__ ltrans, const double* __restrict__ lemis_k, const unsigned* __restrict__ sym,
    const long long* __restrict__ cb, const long long* __restrict__ ce, const int* __restrict__ chunk_seq,
    const double* __restrict__ logp, const unsigned* __restrict__ starts, const unsigned* __restrict__ ends,
    unsigned* __restrict__ path)
{
    extern __shared__ unsigned char bk[];
    const int c = blockIdx.x, lane = threadIdx.x;
    const bool on = lane < SN;
    if (logp[chunk_seq[c]] == HMM_NEG_INF) return;
    double col[SN];
#pragma unroll
    for (int i = 0; i < SN; ++i) col[i] = ltrans[i * SN + (on ? lane : 0)];
    const long long b = cb[c], e = ce[c];
    double d = (on && lane == (int)starts[c]) ? 0.0 : HMM_NEG_INF;
    for (long long t = b; t < e; ++t) {
        int arg;
        const double best = scan_vit_step(d, col, arg);
        if (on) bk[(t - b) * SN + lane] = (unsigned char)arg;
        d = on ? best + lemis_k[(long long)sym[t] * SN + lane] : HMM_NEG_INF;
    }
    __syncwarp();
    if (lane == 0) {
        int st = (int)ends[c];
        for (long long t = e - 1; t >= b; --t) {
            path[t] = (unsigned)st;
            st = bk[(t - b) * SN + st];
        }
    }
}
