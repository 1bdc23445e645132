// Mixture EM on the GPU (bulkem_core::em::gpu drives these kernels).
//
// Compiled by NVRTC once per (device, family, EM_M) with -DEM_M=<components
// 1..8>. The core prepends (src/gpu/kernels.rs, src/em/gpu/mod.rs): its
// tolerances and the exp's constants, common.cuh, tables.cuh (exp_neg_abs,
// whose table each kernel loads with load_exp_table, and log1p_unit, whose
// table the weighted kernels load with load_log1p_table), the status codes
// and launch sizes (EM_WARPS), em_math.cuh (rcp_sum, rcp_terms, the normal
// CDF's helpers), and the family's CUDA block, which defines
//   fam_features(x, centre, u, v), fam_shared_term(x),
//   fam_natural(first, second, centre, a, b, c), fam_m_step(sw, su, sv, centre, first, second)
// (first, second in-out: the current parameters in, the new ones out)
// and, where the family has them, fam_first_given_second,
// fam_second_given_first (constraints) and fam_upper_tail / fam_lower_tail
// (censored data; their last argument, lanes, is how many lanes of the warp
// call them together with the same arguments, which an iterative tail may
// share out; the host defines FAM_TAILS_ITERATE where they do, pool_tails),
// next to the family's Rust definition (src/em/family/<family>.rs). Double
// precision throughout. The arithmetic mirrors the CPU backend (src/em/cpu.rs),
// which is the reference: log(alpha_j f_j(x)) = a_j + b_j*u + c_j*v + k(x).

#ifndef EM_M
#error "EM_M (number of components) must be defined"
#endif

#define NSTAT (3 * EM_M)

// Observation weights as the kernels read them (EM_WEIGHTED): float32 when
// every weight of the call is one exactly (counts, and the like:
// EM_WEIGHTS_FLOAT; src/em/gpu/pairs.rs, KernelWeights), half the bytes to
// copy and to read each iteration, and float64 otherwise. Either is read
// into a double, so the arithmetic is the same.
#ifdef EM_WEIGHTS_FLOAT
typedef float weight_t;
#else
typedef double weight_t;
#endif

// Natural parameters of every component from (alpha, first, second).
__device__ void naturals(const double* p, double centre, double* A, double* B, double* C) {
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        fam_natural(p[EM_M + j], p[2 * EM_M + j], centre, A[j], B[j], C[j]);
        A[j] += log(p[j]);
    }
}

// Exact M-step of every component from its sums (total: the sum of the
// observation weights, n when unweighted); returns a status.
__device__ int m_step(const double* S, double total, double centre, double* p) {
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        const double sw = S[3 * j], su = S[3 * j + 1], sv = S[3 * j + 2];
        if (!(sw > MIN_COMPONENT_WEIGHT)) return ST_EMPTY;
        // In: the current parameters (an iterative M-step starts there); out: the new ones.
        double first = p[EM_M + j], second = p[2 * EM_M + j];
        const int status = fam_m_step(sw, su, sv, centre, first, second);
        if (status != ST_RUNNING) return status;
        p[j] = sw / total; p[EM_M + j] = first; p[2 * EM_M + j] = second;
    }
    return ST_RUNNING;
}

// The same two steps for a whole warp (em_warp): lane j < EM_M computes
// component j, once instead of in every lane, and shuffles share the
// results. An iterative M-step (the gamma shape's Newton solve) then costs
// one component's time, not M.
__device__ void naturals_warp(const double* p, double centre, double* A, double* B, double* C) {
    const int lane = threadIdx.x & 31;
    double a = 0.0, b = 0.0, c = 0.0;
    if (lane < EM_M) {
        fam_natural(p[EM_M + lane], p[2 * EM_M + lane], centre, a, b, c);
        a += log(p[lane]);
    }
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        A[j] = __shfl_sync(FULL_MASK, a, j);
        B[j] = __shfl_sync(FULL_MASK, b, j);
        C[j] = __shfl_sync(FULL_MASK, c, j);
    }
}

// As m_step: the status of the first component that fails, the parameters
// updated only when none does. `p` is the warp's row in shared memory.
__device__ int m_step_warp(const double* S, double total, double centre, double* p) {
    const int lane = threadIdx.x & 31;
    double sw = 0.0, su = 0.0, sv = 0.0;
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        if (lane == j) { sw = S[3 * j]; su = S[3 * j + 1]; sv = S[3 * j + 2]; }
    }
    int status = ST_RUNNING;
    double first = 0.0, second = 0.0;
    if (lane < EM_M) {
        first = p[EM_M + lane]; second = p[2 * EM_M + lane];
        status = (sw > MIN_COMPONENT_WEIGHT) ? fam_m_step(sw, su, sv, centre, first, second) : ST_EMPTY;
    }
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        const int sj = __shfl_sync(FULL_MASK, status, j);
        if (sj != ST_RUNNING) return sj;
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        const double wj = __shfl_sync(FULL_MASK, sw, j), fj = __shfl_sync(FULL_MASK, first, j), gj = __shfl_sync(FULL_MASK, second, j);
        if (lane == 0) { p[j] = wj / total; p[EM_M + j] = fj; p[2 * EM_M + j] = gj; }
    }
    __syncwarp();
    return ST_RUNNING;
}

#ifndef FAM_FIRST_GIVEN_SECOND
// The first parameter given the second (Family::first_given_second's
// default): the unconstrained update's, for families whose first update
// does not depend on the second.
__device__ int fam_first_given_second(double sw, double su, double sv, double centre, double second, double& first) {
    double f = first, s = second;
    const int status = fam_m_step(sw, su, sv, centre, f, s);
    if (status == ST_RUNNING) first = f;
    return status;
}
#endif

#ifdef EM_CONSTRAINED
#if FAM_SECOND && !defined(FAM_SECOND_GIVEN_FIRST)
#error "constraints need the family's fam_second_given_first"
#endif
// The ECM step of src/em/constraints.rs (Constraints::m_step), the same
// operations in the same order. held: the held alpha, first and second
// parameters (EM_M each, NaN where free), then 1 when one second parameter
// is shared by every component.
__device__ int m_step_constrained(const double* S, double centre, const double* held, double* p) {
#pragma unroll
    for (int j = 0; j < EM_M; ++j)
        if (!(S[3 * j] > MIN_COMPONENT_WEIGHT)) return ST_EMPTY;
    const bool equal = held[3 * EM_M] != 0.0;
    double held_sum = 0.0, free_sw = 0.0;
    for (int j = 0; j < EM_M; ++j) {
        if (isnan(held[j])) free_sw += S[3 * j]; else held_sum += held[j];
    }
    double q[NSTAT];
    for (int k = 0; k < NSTAT; ++k) q[k] = p[k];
    for (int j = 0; j < EM_M; ++j) q[j] = isnan(held[j]) ? S[3 * j] / free_sw * (1.0 - held_sum) : held[j];
    // First parameters given the current seconds (a component with nothing
    // held and no shared second takes its unconstrained update).
    for (int j = 0; j < EM_M; ++j) {
        if (!isnan(held[EM_M + j])) continue;
        const double sw = S[3 * j], su = S[3 * j + 1], sv = S[3 * j + 2];
        const bool free = !equal && isnan(held[2 * EM_M + j]);
        int status;
        if (free || !FAM_SECOND) {
            double first = q[EM_M + j], second = q[2 * EM_M + j];
            status = fam_m_step(sw, su, sv, centre, first, second);
            q[EM_M + j] = first;
            if (FAM_SECOND) q[2 * EM_M + j] = second;
        } else {
            status = fam_first_given_second(sw, su, sv, centre, q[2 * EM_M + j], q[EM_M + j]);
        }
        if (status != ST_RUNNING) return status;
    }
#if FAM_SECOND
    // Second parameters given the new firsts: one shared by all, or a
    // component's own where its first is held.
    if (equal) {
        double shared = 0.0;
        const int status = fam_second_given_first(S, q + EM_M, (1u << EM_M) - 1u, centre, shared);
        if (status != ST_RUNNING) return status;
        for (int j = 0; j < EM_M; ++j) q[2 * EM_M + j] = shared;
    } else {
        for (int j = 0; j < EM_M; ++j) {
            if (isnan(held[EM_M + j]) || !isnan(held[2 * EM_M + j])) continue;
            const int status = fam_second_given_first(S, q + EM_M, 1u << j, centre, q[2 * EM_M + j]);
            if (status != ST_RUNNING) return status;
        }
    }
#endif
    for (int k = 0; k < NSTAT; ++k) p[k] = q[k];
    return ST_RUNNING;
}

// m_step_warp's constrained form: every lane runs the (cheap, closed-form
// or one Newton solve per component) step on the same sums; lane 0 writes.
__device__ int m_step_warp_constrained(const double* S, double centre, const double* held, double* p) {
    double q[NSTAT];
    for (int k = 0; k < NSTAT; ++k) q[k] = p[k];
    const int status = m_step_constrained(S, centre, held, q);
    __syncwarp();
    if (status == ST_RUNNING && (threadIdx.x & 31) == 0)
        for (int k = 0; k < NSTAT; ++k) p[k] = q[k];
    __syncwarp();
    return status;
}
#endif

#ifdef EM_CENSORED
#ifndef FAM_UPPER_TAIL
#error "censored data need the family's fam_upper_tail and fam_lower_tail"
#endif
// Censored observations (src/em/censored.rs): each distinct interval
// (lower, upper] once, with the total weight of its observations, as
// (lower, upper, weight) triples; cens_start[d] .. cens_start[d + 1] are
// dataset d's.
#define EM_INF __longlong_as_double(0x7ff0000000000000LL)
__device__ __forceinline__ void upper_tail(double c, double first, double second, double centre, double* t, int lanes) {
    if (c == EM_INF) { t[0] = t[1] = t[2] = 0.0; return; }
    fam_upper_tail(c, first, second, centre, t, lanes);
}
__device__ __forceinline__ void lower_tail(double c, double first, double second, double centre, double* t, int lanes) {
    if (c == EM_INF) { fam_upper_tail(-EM_INF, first, second, centre, t, lanes); return; }
    if (c == -EM_INF) { t[0] = t[1] = t[2] = 0.0; return; }
    fam_lower_tail(c, first, second, centre, t, lanes);
}

// censored::interval: P(lo < X <= hi) and the features' partial means, as
// a difference of tails each at most 1/2 (upper tails above the median,
// lower tails below it, the whole less both outer tails around it).
// Not inlined: six tails in its branches, rarely called (compile time).
// `lanes` lanes call it together with the same arguments (so they take the
// same branches) and may share its tails' work.
__device__ __noinline__ void interval(double lo, double hi, double first, double second, double centre, double* part, int lanes) {
    double a[3], b[3], w[3];
    upper_tail(lo, first, second, centre, a, lanes);
    // A right-censored value's part is its upper tail, whatever its size
    // (no difference to lose digits in): one tail, not two.
    if (a[0] <= 0.5 || hi == EM_INF) {
        upper_tail(hi, first, second, centre, b, lanes);
        for (int k = 0; k < 3; ++k) part[k] = a[k] - b[k];
        return;
    }
    lower_tail(hi, first, second, centre, b, lanes);
    if (b[0] <= 0.5 || lo == -EM_INF) {
        lower_tail(lo, first, second, centre, a, lanes);
        for (int k = 0; k < 3; ++k) part[k] = b[k] - a[k];
        return;
    }
    upper_tail(-EM_INF, first, second, centre, w, lanes);
    lower_tail(lo, first, second, centre, a, lanes);
    upper_tail(hi, first, second, centre, b, lanes);
    for (int k = 0; k < 3; ++k) part[k] = (w[k] - a[k]) - b[k];
}

// One interval's E-step share at parameters p (censored::e_step): its sums
// added to S, its weighted log-likelihood returned (-inf when no component
// gives the interval any probability).
__device__ double censored_obs(double lo, double hi, double wt, const double* p, double centre, double* S) {
    if (wt == 0.0) return 0.0;
    double part[NSTAT], logs[EM_M];
    double top = -__longlong_as_double(0x7ff0000000000000LL);
    for (int j = 0; j < EM_M; ++j) {
        interval(lo, hi, p[EM_M + j], p[2 * EM_M + j], centre, part + 3 * j, 1);
        logs[j] = log(p[j]) + log(part[3 * j]);
        top = fmax(top, logs[j]);
    }
    if (top == -__longlong_as_double(0x7ff0000000000000LL)) return top;
    double total = 0.0;
    for (int j = 0; j < EM_M; ++j) total += exp(logs[j] - top);
    for (int j = 0; j < EM_M; ++j) {
        const double w = wt * exp(logs[j] - top) / total;
        if (w > 0.0) {
            S[3 * j] += w;
            S[3 * j + 1] += w * part[3 * j + 1] / part[3 * j];
            S[3 * j + 2] += w * part[3 * j + 2] / part[3 * j];
        }
    }
    return wt * (top + log(total));
}

// The censored share of a warp's E-step (censored_obs spread over lanes):
// an interval's M components are computed side by side by M groups of
// `lanes` lanes each, 32 / (M lanes) intervals a round, which share their
// logs by shuffles, so a dataset with one time-out waits for its slowest
// component's tail, not for all of them in turn (the gamma's and Poisson's
// tails iterate). With few intervals a group has several lanes, which
// share the tail's iterations (sp_inc_gamma_cf_group): 16 for M = 2 and
// one interval, 2 for 9 to 16 (interval, component) pairs (where the tails
// iterate, 8 or fewer go to the tail warp instead: pool_tails, in em_warp).
// `pooled`, where the block has computed this warp's parts
// (pool_tails: count * M <= EM_POOL, lane q's (interval, component) part
// at pooled[3 q]), replaces the tails. The sums, added to S (already the
// warp's total), and the log-likelihood are the same in every lane.
__device__ double warp_e_step_censored(const double* cens, int count, const double* p, double centre, double* S,
                                       const double* pooled = nullptr) {
    const double inf = __longlong_as_double(0x7ff0000000000000LL);
    const int lane = threadIdx.x & 31;
    // Lanes per (interval, component): the largest power of 2 with every
    // interval in one round, at most 32 / M (1 with pooled parts).
    int lanes = 1;
    while (!pooled && 2 * lanes * EM_M * count <= 32 && 2 * lanes * EM_M <= 32) lanes *= 2;
    const int group = lane / lanes, r = lane % lanes;
    const int per = 32 / (EM_M * lanes), j = group % EM_M, slot = group / EM_M;
    double c0 = 0.0, c1 = 0.0, c2 = 0.0, ll = 0.0;
    for (int base = 0; base < count; base += per) {
        const int i = base + slot;
        const double wt = slot < per && i < count ? cens[3 * i + 2] : 0.0;
        double part[3] = {0.0, 0.0, 0.0};
        double lg = -inf;
        if (wt != 0.0) {
            if (pooled) {
                for (int k = 0; k < 3; ++k) part[k] = pooled[3 * (i * EM_M + j) + k];
            } else {
                interval(cens[3 * i], cens[3 * i + 1], p[EM_M + j], p[2 * EM_M + j], centre, part, lanes);
            }
            lg = log(p[j]) + log(part[0]);
        }
        // (Lanes past the last whole interval read some lane's log; theirs is unused.)
        double top = -inf;
        for (int m = 0; m < EM_M; ++m) top = fmax(top, __shfl_sync(FULL_MASK, lg, ((slot * EM_M + m) * lanes) & 31));
        double total = 0.0;
        for (int m = 0; m < EM_M; ++m) total += exp(__shfl_sync(FULL_MASK, lg, ((slot * EM_M + m) * lanes) & 31) - top);
        // A group's lanes hold the same values: its first adds them.
        if (wt == 0.0 || r != 0) continue;
        if (top == -inf) {
            if (j == 0) ll += top;  // no component gives the interval any probability
            continue;
        }
        const double w = wt * exp(lg - top) / total;
        if (w > 0.0) {
            c0 += w;
            c1 += w * part[1] / part[0];
            c2 += w * part[2] / part[0];
        }
        if (j == 0) ll += wt * (top + log(total));
    }
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) {
        const double mine = k / 3 == j ? (k % 3 == 0 ? c0 : k % 3 == 1 ? c1 : c2) : 0.0;
        S[k] += warp_sum(mine);
    }
    return warp_sum(ll);
}

// A censored dataset with few intervals (count * M <= EM_POOL) has its
// tails computed by the block's last warp alone (the tail warp), each of
// the other warps' (interval, component) parts on a lane of its own (warp
// w's q-th at parts[w][3 q]), while those warps take the exact
// observations' E-step. Each lane runs its tail alone (the sequential
// continued fraction, as the CPU does). A warp that computes its own M
// tails takes a whole round of instructions for them (for M = 2 and one
// time-out, 16 lanes sharing each continued fraction: about 2,800
// instructions a warp and iteration, a third of the gamma's censored
// kernel; Nsight Compute on an H200, BENCHMARKS.md, issue 25); here the
// block's 14 tails take one round, and off the E-step's path. EM_POOL
// bounds the tail warp's work to two rounds (7 warps' 8 tails each); more
// intervals fill a warp's own round (warp_e_step_censored). EM_POOL and
// FAM_TAILS_ITERATE come from the host (em_prelude), which gives such a
// block one pair fewer (em::gpu::warp::prepare_warp).
// need[w]: warp w takes an E-step now.
__device__ void pool_tails(const double* cens, int count, const double (*params)[NSTAT], const bool* need, double centre,
                           double (*parts)[3 * EM_POOL]) {
    const int per = count * EM_M;
    for (int r = threadIdx.x & 31; r < (EM_WARPS - 1) * per; r += 32) {
        const int w = r / per, q = r % per, i = q / EM_M, j = q % EM_M;
        if (!need[w] || cens[3 * i + 2] == 0.0) continue;
        double part[3];
        interval(cens[3 * i], cens[3 * i + 1], params[w][EM_M + j], params[w][2 * EM_M + j], centre, part, 1);
        for (int k = 0; k < 3; ++k) parts[w][3 * q + k] = part[k];
    }
}
#endif

// Observations of a lane per step of the E-step loops (a divisor of 16).
// Measured on an H200 (BENCHMARKS.md, issue 20): 4 for M = 2 took 3.13 s
// against 3.40 for the 40,000-dataset EM's kernels (mixed: 1.87 / 1.88,
// and 4 spills there). Larger M keep 1: their registers limit the blocks
// per SM.
#ifndef EM_UNROLL
#if EM_M <= 2 && !defined(EM_MIXED)
#define EM_UNROLL 4
#else
#define EM_UNROLL 1
#endif
#endif

// Observations per lane between two logs of the product of the
// per-observation sums (each in [1, M]), as on the CPU.
#define LOG_BLOCK (EM_M <= 2 ? 512 : 128)

#if EM_M == 2
// Two components' weights from d = l1 - l0 into the sums S; returns the
// observation's sum of exp terms, 1 + e^-|d|.
__device__ __forceinline__ double add_weights_m2(double d, double u, double v, double* S) {
    const double e = exp_neg_abs(d);  // ratio of the smaller to the larger term
    const double s = 1.0 + e;
    const double w_top = rcp_terms(s), w_low = e * w_top;
    // d > 0 by its sign bit, an integer test rather than a float64 one: at
    // d = +0 the weights are equal, and a NaN reaches ll through e and prod.
    const bool up = __double2hiint(d) >= 0;
    const double w0 = up ? w_low : w_top, w1 = up ? w_top : w_low;
    S[0] += w0; S[1] += w0 * u; S[2] += w0 * v;
    S[3] += w1; S[4] += w1 * u; S[5] += w1 * v;
    return s;
}
#endif

// One observation's E-step contribution: weighted sums into S, the max into
// maxsum, the sum of exp into prod. DIRECT (M = 2): d = l1 - l0 from the
// differenced coefficients D, as e_obs_weights, so that a fit whose
// iterations skip the log-likelihood and its traced rerun take the same
// steps; else from l1 - l0.
template <bool DIRECT = false>
__device__ __forceinline__ void e_obs(double u, double v, const double* A, const double* B, const double* C,
                                      double* S, double& maxsum, double& prod, const double* D = nullptr) {
#if EM_M == 1
    const double l0 = A[0] + B[0] * u + C[0] * v;
    S[0] += 1.0; S[1] += u; S[2] += v;
    maxsum += l0;
#elif EM_M == 2
    const double l0 = A[0] + B[0] * u + C[0] * v;
    const double l1 = A[1] + B[1] * u + C[1] * v;
    const double d = DIRECT ? D[0] + D[1] * u + D[2] * v : l1 - l0;
    prod *= add_weights_m2(d, u, v, S);
    maxsum += __double2hiint(d) >= 0 ? l1 : l0;
#else
    double l[EM_M];
    double top = -__longlong_as_double(0x7ff0000000000000LL);  // -inf (no math.h under NVRTC)
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        l[j] = A[j] + B[j] * u + C[j] * v;
        // A compare and select, not fmax (which handles NaN in 5 instructions):
        // a NaN l[j] still reaches ll through its exp.
        top = l[j] > top ? l[j] : top;
    }
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        l[j] = exp_neg_abs(l[j] - top);
        s += l[j];
    }
    const double r = rcp_terms(s);
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        const double w = l[j] * r;
        S[3 * j] += w; S[3 * j + 1] += w * u; S[3 * j + 2] += w * v;
    }
    maxsum += top;
    prod *= s;
#endif
}

#ifdef EM_WEIGHTED
// With observation weights (EM_WEIGHTED defined; em::cpu::e_step_weighted):
// the observation's sums and log-likelihood term times its weight, one log
// per observation; weight-0 observations add nothing. Without LL (a fixed
// number of iterations: all but the last, as the CPU's Wanted::Sums), the
// log is left out and w (top + s) added instead, finite exactly when the
// log-likelihood is; the sums are the same bits.
template <bool LL>
__device__ __forceinline__ void e_obs_weighted(double u, double v, double wi, const double* A, const double* B,
                                               const double* C, double* S, double& ll) {
    if (wi == 0.0) return;
#if EM_M == 2
    // One exp, as e_obs; ln(1 + e) by log1p_unit's table (e in [0, 1]).
    const double l0 = A[0] + B[0] * u + C[0] * v;
    const double l1 = A[1] + B[1] * u + C[1] * v;
    const double d = l1 - l0;
    const double e = exp_neg_abs(d);
    const double w_top = wi * rcp_terms(1.0 + e), w_low = e * w_top;
    const double w0 = d > 0.0 ? w_low : w_top, w1 = d > 0.0 ? w_top : w_low;
    S[0] += w0; S[1] = fma(w0, u, S[1]); S[2] = fma(w0, v, S[2]);
    S[3] += w1; S[4] = fma(w1, u, S[4]); S[5] = fma(w1, v, S[5]);
    ll += wi * (fmax(l0, l1) + (LL ? log1p_unit(e) : e));
#else
    double l[EM_M];
    double top = -__longlong_as_double(0x7ff0000000000000LL);
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        l[j] = A[j] + B[j] * u + C[j] * v;
        top = l[j] > top ? l[j] : top;
    }
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        l[j] = exp_neg_abs(l[j] - top);
        s += l[j];
    }
    const double r = wi * rcp_terms(s);
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        const double w = l[j] * r;
        S[3 * j] += w; S[3 * j + 1] += w * u; S[3 * j + 2] += w * v;
    }
    ll += wi * (top + (LL ? log(s) : s));
#endif
}

// warp_e_step with weights (wt: the dataset's weights in shared memory);
// without LL, e_obs_weighted's finite stand-in for the log-likelihood.
template <bool LL = true>
__device__ double warp_e_step_weighted(const double2* uv, const double* wt, int n, const double* A, const double* B,
                                       const double* C, double* S) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) S[k] = 0.0;
    double ll = 0.0;
    int i = lane;
    // EM_UNROLL observations of a lane per step, as warp_e_step.
    for (; i + 32 * (EM_UNROLL - 1) < n; i += 32 * EM_UNROLL) {
#pragma unroll
        for (int k = 0; k < EM_UNROLL; ++k) {
            const double2 f = uv[i + 32 * k];
            e_obs_weighted<LL>(f.x, f.y, wt[i + 32 * k], A, B, C, S, ll);
        }
    }
    for (; i < n; i += 32) {
        const double2 f = uv[i];
        e_obs_weighted<LL>(f.x, f.y, wt[i], A, B, C, S, ll);
    }
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) S[k] = warp_sum(S[k]);
    return warp_sum(ll);
}
#endif

#ifdef EM_MIXED
// precision = "mixed" (EM_MIXED defined): the CPU's em::cpu::e_step_mixed.
// The log-densities and their maximum stay float64 (they cancel large
// terms); the weights (exp, sum, reciprocal) are float32 on the SFU, and
// their sums float32 over groups of MIXED_GROUP observations of a lane,
// added in float64. The features also sit in shared memory as float32
// (uvf), so the sums take no conversions per observation.
#define MIXED_GROUP 16
// Observations per unrolled step within a group (a divisor of MIXED_GROUP).
// Measured on an H200 (BENCHMARKS.md, issue 20), M = 2: a launch of 2,000
// datasets x 100 starts x 100 iterations took 59.5 ms with 16 and 63.3 ms
// with 4 (ncu); larger M, whose registers bind, keep 4.
#ifndef EM_MIXED_UNROLL
#if EM_M <= 2
#define EM_MIXED_UNROLL 16
#else
#define EM_MIXED_UNROLL 4
#endif
#endif

__device__ __forceinline__ float ex2_f32(float t) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(t));
    return y;
}
__device__ __forceinline__ float exp_f32(float t) { return ex2_f32(t * 1.4426950408889634f); }
__device__ __forceinline__ float rcp_f32(float s) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
    return r;
}

// LL false: the sums alone (no maximum or product for the log-likelihood).
template <bool LL>
__device__ __forceinline__ void e_obs_mixed(double u, double v, float uf, float vf, const double* A, const double* B,
                                            const double* C, float* G, double& maxsum, float& prod) {
#if EM_M == 1
    const double l0 = A[0] + B[0] * u + C[0] * v;
    G[0] += 1.0f; G[1] += uf; G[2] += vf;
    if (LL) maxsum += l0;
#elif EM_M == 2
    // A, B, C hold the coefficients of (l1 - l0) / ln 2 (warp_e_step_mixed),
    // so the exp is one ex2; maxsum gathers max(l1 - l0, 0) / ln 2, and
    // sum_i l0 comes from the dataset's sums of u and v.
    const double d = A[0] + B[0] * u + C[0] * v;
    const float t = (float)d;
    const float e = ex2_f32(-fabsf(t));
    const float s = 1.0f + e;
    const float w_top = rcp_f32(s), w_low = e * w_top;
    const bool hi = t > 0.0f;
    const float w0 = hi ? w_low : w_top;
    G[0] += w0; G[1] = fmaf(w0, uf, G[1]); G[2] = fmaf(w0, vf, G[2]);
    // Without the log-likelihood, the other component's sums are the
    // dataset's totals less these (warp_e_step_mixed).
    if (LL) {
        const float w1 = hi ? w_top : w_low;
        G[3] += w1; G[4] = fmaf(w1, uf, G[4]); G[5] = fmaf(w1, vf, G[5]);
        maxsum += hi ? d : 0.0;
        prod *= s;
    }
#else
    double l[EM_M];
    double top = -__longlong_as_double(0x7ff0000000000000LL);
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        l[j] = A[j] + B[j] * u + C[j] * v;
        top = l[j] > top ? l[j] : top;
    }
    float e[EM_M];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        e[j] = exp_f32((float)(l[j] - top));
        s += e[j];
    }
    const float r = rcp_f32(s);
#pragma unroll
    for (int j = 0; j < EM_M; ++j) {
        const float w = e[j] * r;
        G[3 * j] += w; G[3 * j + 1] = fmaf(w, uf, G[3 * j + 1]); G[3 * j + 2] = fmaf(w, vf, G[3 * j + 2]);
    }
    if (LL) { maxsum += top; prod *= s; }
#endif
}

// A lane's float32 group sums and product into its float64 ones.
__device__ __forceinline__ void flush_group(float* G, double* S, float& prod32, double& prod) {
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) { S[k] += (double)G[k]; G[k] = 0.0f; }
    prod *= (double)prod32;
    prod32 = 1.0f;
}
#endif

// ---------------------------------------------------------------------------
// Small datasets: one warp per (dataset, start), the dataset's features in
// shared memory, shared by the warps of the block (the dataset's starts).
// The whole EM runs in this one launch; each warp stops at its own
// convergence.

// E-step of one warp over n observations in shared memory. All lanes return
// the same sums and log-likelihood (without the shared term). DIRECT: as
// e_obs.
template <bool DIRECT = false>
__device__ double warp_e_step(const double2* uv, int n, const double* A, const double* B, const double* C, double* S) {
    const int lane = threadIdx.x & 31;
#if EM_M == 2
    const double D[3] = {A[1] - A[0], B[1] - B[0], C[1] - C[0]};
#else
    const double* D = nullptr;
#endif
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) S[k] = 0.0;
    double maxsum = 0.0, logsum = 0.0, prod = 1.0;
    int in_block = 0;
    int i = lane;
    // EM_UNROLL observations of a lane per step: their chains of dependent
    // instructions interleave, in the same order of summation as one at a
    // time (LOG_BLOCK is a multiple of EM_UNROLL).
    for (; i + 32 * (EM_UNROLL - 1) < n; i += 32 * EM_UNROLL) {
#pragma unroll
        for (int k = 0; k < EM_UNROLL; ++k) {
            const double2 f = uv[i + 32 * k];
            e_obs<DIRECT>(f.x, f.y, A, B, C, S, maxsum, prod, D);
        }
        if ((in_block += EM_UNROLL) == LOG_BLOCK) {
            logsum += log(prod);
            prod = 1.0;
            in_block = 0;
        }
    }
    for (; i < n; i += 32) {
        const double2 f = uv[i];
        e_obs<DIRECT>(f.x, f.y, A, B, C, S, maxsum, prod, D);
        if (++in_block == LOG_BLOCK) {
            logsum += log(prod);
            prod = 1.0;
            in_block = 0;
        }
    }
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) S[k] = warp_sum(S[k]);
    return warp_sum(maxsum + (logsum + log(prod)));
}

#if EM_M == 2 && !defined(EM_WEIGHTED)
#define EM_WEIGHTS_ONLY
// The E-step's sums without the log-likelihood, for the iterations whose
// log-likelihood nothing reads (a fixed number of iterations, epsilon = 0,
// and no trace: all but the last). Per observation, d = l1 - l0 comes from
// the differenced coefficients (2 FMAs where l0, l1 and d take 5; its
// rounding is of the same terms' size), and no maximum or product is
// gathered for the log: 5 float64 instructions fewer than e_obs. (The
// 40,000-dataset float64 EM: 2.27-2.29 s against 2.68-2.70 on an H200,
// BENCHMARKS.md, issue 20.)
__device__ __forceinline__ void e_obs_weights(double u, double v, const double* D, double* S) {
    add_weights_m2(D[0] + D[1] * u + D[2] * v, u, v, S);
}

__device__ void warp_e_step_weights(const double2* uv, int n, const double* A, const double* B, const double* C, double* S) {
    const int lane = threadIdx.x & 31;
    const double D[3] = {A[1] - A[0], B[1] - B[0], C[1] - C[0]};
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) S[k] = 0.0;
    int i = lane;
    for (; i + 32 * (EM_UNROLL - 1) < n; i += 32 * EM_UNROLL) {
#pragma unroll
        for (int k = 0; k < EM_UNROLL; ++k) {
            const double2 f = uv[i + 32 * k];
            e_obs_weights(f.x, f.y, D, S);
        }
    }
    for (; i < n; i += 32) {
        const double2 f = uv[i];
        e_obs_weights(f.x, f.y, D, S);
    }
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) S[k] = warp_sum(S[k]);
}

// Whether every sum is finite: what a skipped log-likelihood would have
// told (a NaN or infinite observation term reaches the sums).
__device__ __forceinline__ bool sums_finite(const double* S) {
    double t = 0.0;
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) t += S[k] * 0.0;
    return t == 0.0;
}
#endif

#ifdef EM_MIXED
// warp_e_step with the mixed E-step (e_obs_mixed); uvf holds the features
// as float32. LL false: the sums alone, the value returned meaningless.
template <bool LL>
__device__ double warp_e_step_mixed(const double2* uv, const float2* uvf, int n, const double* A_in, const double* B_in,
                                    const double* C_in, double sum_u, double sum_v, double* S) {
    const int lane = threadIdx.x & 31;
#if EM_M == 2
    // Sums alone: one component's sums are gathered (the one of the
    // smaller weight in the previous E-step's sums, which S holds), the
    // other's are the dataset's totals less them: three float32 sums an
    // observation instead of six. Gathering the smaller keeps the
    // difference accurate (its rounding is relative to the larger).
    // Selects, not indices: the coefficients and sums are registers.
    const bool b1 = !LL && S[3] < S[0];
    const double sign = b1 ? -1.0 : 1.0;
    const double A[1] = {sign * (A_in[1] - A_in[0]) * EXP_LOG2_E}, B[1] = {sign * (B_in[1] - B_in[0]) * EXP_LOG2_E},
                 C[1] = {sign * (C_in[1] - C_in[0]) * EXP_LOG2_E};
#else
    const double *A = A_in, *B = B_in, *C = C_in;
#endif
    float G[NSTAT];
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) { S[k] = 0.0; G[k] = 0.0f; }
    double maxsum = 0.0, logsum = 0.0, prod = 1.0;
    float prod32 = 1.0f;
    int in_block = 0;
    // Whole groups first: MIXED_GROUP observations of each lane, with no
    // bounds checks and no counters between them (a counter per
    // observation had cost a compare and a branch each), then the rest.
    // Each lane takes its observations in the same order and flushes
    // after the same ones as one observation a step would.
    const int whole = n - n % (32 * MIXED_GROUP);
    int base = 0;
    for (; base < whole; base += 32 * MIXED_GROUP) {
#pragma unroll EM_MIXED_UNROLL
        for (int k = 0; k < MIXED_GROUP; ++k) {
            const int i = base + lane + 32 * k;
            const double2 f = uv[i];
            const float2 g = uvf[i];
            e_obs_mixed<LL>(f.x, f.y, g.x, g.y, A, B, C, G, maxsum, prod32);
        }
        flush_group(G, S, prod32, prod);
        if ((in_block += MIXED_GROUP) == LOG_BLOCK) {
            logsum += log(prod);
            prod = 1.0;
            in_block = 0;
        }
    }
    for (int i = base + lane; i < n; i += 32) {
        const double2 f = uv[i];
        const float2 g = uvf[i];
        e_obs_mixed<LL>(f.x, f.y, g.x, g.y, A, B, C, G, maxsum, prod32);
    }
    flush_group(G, S, prod32, prod);
#if EM_M == 2
    if (!LL) {
        const double own[3] = {warp_sum(S[0]), warp_sum(S[1]), warp_sum(S[2])};
        const double total[3] = {(double)n, sum_u, sum_v};
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            const double other = total[k] - own[k];
            S[k] = b1 ? other : own[k];
            S[3 + k] = b1 ? own[k] : other;
        }
        return 0.0;
    }
#endif
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) S[k] = warp_sum(S[k]);
#if EM_M == 2
    const double l0_sum = A_in[0] * n + B_in[0] * sum_u + C_in[0] * sum_v;
    return l0_sum + warp_sum(maxsum * EXP_LN2_HI + (logsum + log(prod)));
#else
    return warp_sum(maxsum + (logsum + log(prod)));
#endif
}
#endif

// 256 threads (EM_WARPS = 8 warps). Minimum blocks per SM, by M (it caps registers at
// 65536 / (256 x blocks)): 3 (80 registers) fits M <= 2 without spills.
// Censored data with M <= 2 run 4 blocks, and with M = 3 run 3 where the
// tails iterate: their tails are calls, whose latency more blocks' warps
// hide, spills and all (H200, issue 25: the gamma's censored M <= 2
// kernels 1.04 -> 0.98 s;
// M = 3, 80 registers and 1,456 bytes of spills, 0.63-0.66 s of kernels
// against 0.68-0.72 at 2 blocks, 128 registers and 856 bytes). M = 3..6
// otherwise run 2 blocks (128 registers). Asked for 1, ptxas (NVRTC 13.0,
// sm_90) takes more than 128 in many of their variants, which leaves room
// for one block (8 warps) per SM: 130-139 for M = 4 (the gamma's, every
// mixed-precision kernel, censored ones), 155-181 for M = 6, and 188-252
// for the censored gamma and Poisson (the tails' iterations). Asked for 2
// they need 117-128, without spills but for those censored kernels
// (600-2,100 bytes) and a few constrained or mixed ones (4-236). Timed on
// an H200 against 1 block (20,000 datasets, BENCHMARKS.md): the gamma's
// M = 4 kernels 0.65-0.68 s against 0.97, M = 6 0.96-0.97 against 1.17,
// censored M = 6 1.18-1.20 against 1.61-1.64; M = 5 499 ms per launch
// against 660 on an H100 (issue 16). M >= 7 keeps 1 (spills of 56-2,200
// bytes at 2; not timed). Definable with -DEM_MIN_BLOCKS for experiments.
#ifndef EM_MIN_BLOCKS
#if EM_M <= 2 && defined(EM_CENSORED)
#define EM_MIN_BLOCKS 4
#elif EM_M <= 2 || (EM_M == 3 && defined(EM_CENSORED) && defined(FAM_TAILS_ITERATE))
#define EM_MIN_BLOCKS 3
#elif EM_M <= 6
#define EM_MIN_BLOCKS 2
#else
#define EM_MIN_BLOCKS 1
#endif
#endif

// A block holds the starts (pairs) of one dataset, block_pairs of them; its
// warps (but a tail warp, pool_tails) take the next pair from a shared
// counter, so a warp whose start converged early runs another instead of
// idling, and the dataset is staged once for all of them. A pair's result
// does not depend on which warp ran it (each warp sums in its own fixed
// lane order).
extern "C" __global__ void __launch_bounds__(32 * EM_WARPS, EM_MIN_BLOCKS) em_warp(
    const double* __restrict__ x, const weight_t* __restrict__ weights, const double* __restrict__ totals,
    const long long* __restrict__ offsets, const int* __restrict__ lengths,
    const double* __restrict__ centres, const int* __restrict__ block_dataset, const int* __restrict__ block_pair0,
    const int* __restrict__ block_pairs, const double* __restrict__ init, double* __restrict__ out_params,
    double* __restrict__ out_ll, int* __restrict__ out_iters, int* __restrict__ out_status,
    double* __restrict__ trace, int max_iters, double epsilon, const double* __restrict__ held,
    const double* __restrict__ cens, const long long* __restrict__ cens_start)
{
    extern __shared__ double2 uv[];  // the dataset's features (u, v)
    __shared__ int next_pair;
    __shared__ double params[EM_WARPS][NSTAT];
#ifdef EM_CENSORED
    __shared__ bool step_need[EM_WARPS];
    __shared__ double pool_parts[EM_WARPS][3 * EM_POOL];
#endif
    const int d = block_dataset[blockIdx.x];
    const int n = lengths[d];
    const double* xd = x + offsets[d];
    const double centre = centres[d];
    const double total = totals[d];  // the sum of the weights (n when unweighted)
#ifdef EM_CENSORED
    const double* cd = cens + 3 * (long long)cens_start[d];
    const int n_cens = (int)(cens_start[d + 1] - cens_start[d]);  // at most the dataset's length
#endif
#ifdef EM_MIXED
    float2* uvf = reinterpret_cast<float2*>(uv + n);  // after the float64 features
#endif
#ifdef EM_WEIGHTED
    double* wt = reinterpret_cast<double*>(uv + n);  // the weights, after the features
    const weight_t* wd = weights + offsets[d];
#elif defined(EM_CENSORED)
    const double* wt = nullptr;  // unweighted: the exact observations alone
#endif

    if (threadIdx.x == 0) next_pair = 0;
    load_exp_table();  // exp_neg_abs's table, published by the barrier below
#ifdef EM_WEIGHTED
    load_log1p_table();  // and log1p_unit's
#endif
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        double u, v;
        fam_features(xd[i], centre, u, v);
        uv[i] = make_double2(u, v);
#ifdef EM_MIXED
        uvf[i] = make_float2((float)u, (float)v);
#endif
#ifdef EM_WEIGHTED
        wt[i] = wd[i];
#endif
    }
    __syncthreads();

    const int lane = threadIdx.x & 31;
    const int pairs = block_pairs[blockIdx.x];

    // The shared log-density term, summed by each warp in the same order
    // whatever the block's shape, so a rerun of one start repeats it exactly.
    double k_local = 0.0;
#ifdef EM_WEIGHTED
    for (int i = lane; i < n; i += 32) k_local += wt[i] == 0.0 ? 0.0 : wt[i] * fam_shared_term(xd[i]);
#else
    for (int i = lane; i < n; i += 32) k_local += fam_shared_term(xd[i]);
#endif
    const double shared_k = warp_sum(k_local);
#ifdef EM_MIXED
    // The dataset's sums of the features (the mixed E-step's sum of l0 for M = 2).
    double su_local = 0.0, sv_local = 0.0;
    for (int i = lane; i < n; i += 32) { su_local += uv[i].x; sv_local += uv[i].y; }
    const double sum_u = warp_sum(su_local), sum_v = warp_sum(sv_local);
#endif

    // The parameters live in shared memory (one row per warp, every lane
    // writing the same values): they are read once per iteration, and
    // registers are what limits the blocks per SM for M >= 4.
    double* p = params[threadIdx.x >> 5];
    double A[EM_M], B[EM_M], C[EM_M], S[NSTAT];
    double* my_trace = nullptr;
    int pair = -1, iter = 0, status = ST_RUNNING;
    double ll = 0.0;
#ifdef EM_MIXED
    // Mixed E-steps until the change of the log-likelihood is within its
    // float32 noise; then, if epsilon is below that noise (and not 0),
    // float64 from a float64 E-step at the same parameters (as
    // em::cpu::run_iterations).
    const double noise = MIXED_NOISE * sqrt((double)n);
    const bool polish = epsilon > 0.0 && epsilon < noise;
    bool mixed_now = true;
#define E_STEP_NOW(S) (mixed_now ? warp_e_step_mixed<true>(uv, uvf, n, A, B, C, sum_u, sum_v, S) : warp_e_step(uv, n, A, B, C, S))
#elif defined(EM_CENSORED)
    // The exact observations' share (unweighted, they are the dataset's
    // values without the censored ones; weighted, the censored ones'
    // stand-ins weigh 0), taken before the intervals' (at p): `exact`.
#if defined(EM_WEIGHTS_ONLY)
    // As below, the differenced coefficients in a fixed-iteration fit.
    const bool fixed = !(epsilon > 0.0);
#define EXACT_NOW(S) (fixed ? warp_e_step<true>(uv, n, A, B, C, S) : warp_e_step(uv, n, A, B, C, S))
#elif defined(EM_WEIGHTED)
#define EXACT_NOW(S) warp_e_step_weighted(uv, wt, n, A, B, C, S)
#else
#define EXACT_NOW(S) warp_e_step(uv, n, A, B, C, S)
#endif
#define E_STEP_NOW(S) (exact + warp_e_step_censored(cd, n_cens, p, centre, S, pooled))
#elif defined(EM_WEIGHTED)
#define E_STEP_NOW(S) warp_e_step_weighted(uv, wt, n, A, B, C, S)
#elif defined(EM_WEIGHTS_ONLY)
    // A fixed number of iterations (epsilon 0) takes d = l1 - l0 from the
    // differenced coefficients throughout (e_obs_weights).
    const bool fixed = !(epsilon > 0.0);
#define E_STEP_NOW(S) (fixed ? warp_e_step<true>(uv, n, A, B, C, S) : warp_e_step(uv, n, A, B, C, S))
#else
#define E_STEP_NOW(S) warp_e_step(uv, n, A, B, C, S)
#endif
#if defined(EM_WEIGHTS_ONLY) || (defined(EM_WEIGHTED) && !defined(EM_CENSORED))
    // Nothing reads the log-likelihood of an iteration but the last
    // when the iterations are fixed and no trace is kept.
    bool ll_each = true;
#endif
#ifdef EM_CENSORED
    // Few intervals of a family whose tails iterate (the gamma's and the
    // Poisson's): the last warp computes the others' tails (pool_tails).
    // Closed-form tails cost a warp less than its share of the E-steps
    // (the inverse Gaussian's censored call took the same time either way,
    // BENCHMARKS.md, issue 25).
#ifdef FAM_TAILS_ITERATE
    const bool pool = n_cens > 0 && n_cens * EM_M <= EM_POOL;
#else
    const bool pool = false;
#endif
    const bool tail_warp = pool && (threadIdx.x >> 5) == EM_WARPS - 1;
    const double* pooled = pool ? pool_parts[threadIdx.x >> 5] : nullptr;
#endif

    // A step is one E-step of each warp that has a pair: at the pair's
    // starting values, or after its next M-step. A warp whose pair is done
    // writes it out and takes the next, so it idles only once none is left.
    // Censored kernels with a tail warp take their steps together, so that
    // it computes the step's tails (pool_tails) beside the exact
    // observations' E-steps, between two barriers.
    for (;;) {
        bool need = false;
        while (!need) {
            if (pair >= 0) {
                if (status == ST_RUNNING && iter < max_iters) {
                    ++iter;
#ifdef EM_CONSTRAINED
                    status = m_step_warp_constrained(S, centre, held, p);
#else
                    status = m_step_warp(S, total, centre, p);
#endif
                    if (status == ST_RUNNING) {
                        naturals_warp(p, centre, A, B, C);
                        need = true;
                        continue;
                    }
                }
                if (status == ST_RUNNING) status = ST_MAX_ITERS;
#ifdef EM_MIXED
                // The reported log-likelihood is float64's: one more E-step at the
                // final parameters when the last one was mixed.
                if (mixed_now && (status == ST_CONVERGED || status == ST_MAX_ITERS)) {
                    ll = warp_e_step(uv, n, A, B, C, S) + shared_k;
                    if (!isfinite(ll)) status = ST_NONFINITE;
                    else if (my_trace && lane == 0 && iter > 0) my_trace[iter - 1] = ll;
                }
#endif
                if (lane == 0) {
                    for (int j = 0; j < NSTAT; ++j) out_params[(long long)pair * NSTAT + j] = p[j];
                    out_ll[pair] = ll;
                    out_iters[pair] = iter;
                    out_status[pair] = status;
                }
                pair = -1;
            }
#ifdef EM_CENSORED
            if (tail_warp) break;
#endif
            int k = 0;
            if (lane == 0) k = atomicAdd(&next_pair, 1);
            k = __shfl_sync(FULL_MASK, k, 0);
            if (k >= pairs) break;
            pair = block_pair0[blockIdx.x] + k;
#pragma unroll
            for (int j = 0; j < NSTAT; ++j) p[j] = init[(long long)pair * NSTAT + j];
            __syncwarp();
            my_trace = trace ? trace + (long long)pair * max_iters : nullptr;
            naturals_warp(p, centre, A, B, C);
            iter = 0;
            status = ST_RUNNING;
#ifdef EM_MIXED
            mixed_now = true;
#endif
#if defined(EM_WEIGHTS_ONLY) || (defined(EM_WEIGHTED) && !defined(EM_CENSORED))
            ll_each = epsilon > 0.0 || my_trace != nullptr;
#endif
            need = true;
        }
#ifdef EM_CENSORED
        if (pool) {
            if (lane == 0) step_need[threadIdx.x >> 5] = need;
            if (!__syncthreads_or(need)) break;
        } else if (!need) {
            break;
        }
        double exact = 0.0;
        if (tail_warp) {
            pool_tails(cd, n_cens, params, step_need, centre, pool_parts);
        } else if (need) {
#ifdef EM_WEIGHTS_ONLY
            if (iter > 0 && !ll_each && iter < max_iters) warp_e_step_weights(uv, n, A, B, C, S);
            else
#endif
                exact = EXACT_NOW(S);
        }
        if (pool) __syncthreads();
        if (!need) continue;
#else
        if (!need) break;
#endif
        if (iter == 0) {
            ll = E_STEP_NOW(S) + shared_k;
            if (!isfinite(ll)) status = ST_BAD_START;
            continue;
        }
#if defined(EM_WEIGHTED) && !defined(EM_CENSORED)
        if (!ll_each && iter < max_iters) {
            if (!isfinite(warp_e_step_weighted<false>(uv, wt, n, A, B, C, S))) status = ST_NONFINITE;
            continue;
        }
#endif
#ifdef EM_WEIGHTS_ONLY
        if (!ll_each && iter < max_iters) {
#ifdef EM_MIXED
            warp_e_step_mixed<false>(uv, uvf, n, A, B, C, sum_u, sum_v, S);
#elif !defined(EM_CENSORED)
            warp_e_step_weights(uv, n, A, B, C, S);
#else
            // The intervals' sums added to the exact ones' (taken above);
            // their log-likelihood (-inf where no component gives an
            // interval probability) is cheap beside their tails, and tells
            // what ll would.
            const double cens_ll = warp_e_step_censored(cd, n_cens, p, centre, S, pooled);
            if (!isfinite(cens_ll)) { status = ST_NONFINITE; continue; }
#endif
            if (!sums_finite(S)) status = ST_NONFINITE;
            continue;
        }
#ifdef EM_MIXED
        // The last iteration's E-step is the float64 one as the pair ends.
        if (!ll_each) continue;
#endif
#endif
        double new_ll = E_STEP_NOW(S) + shared_k;
        double change = fabs(new_ll - ll);
#ifdef EM_MIXED
        if (mixed_now && polish && change < noise) {
            mixed_now = false;
            new_ll = warp_e_step(uv, n, A, B, C, S) + shared_k;
            change = __longlong_as_double(0x7ff0000000000000LL);  // +inf: no stop here
        }
#endif
        if (!isfinite(new_ll)) { status = ST_NONFINITE; continue; }
        if (my_trace && lane == 0) my_trace[iter - 1] = new_ll;
        ll = new_ll;
        if (change < epsilon) status = ST_CONVERGED;
    }
#undef E_STEP_NOW
#undef EXACT_NOW
}

// ---------------------------------------------------------------------------
// Large datasets: many blocks per (dataset, start), one launch (em_grid) per
// EM iteration, queued back to back with no host synchronisation. Each
// block sums its share of the E-step; the last block of a pair to finish
// (a counter per pair) adds the blocks' sums in block order and takes the
// same decisions as the warp kernel's loop (convergence, M-step). Finished
// pairs make the launch return at once. One launch instead of two saves a
// launch and the second kernel's start per iteration (about 10 us of 90 on
// an H200 at 10^7 observations; BENCHMARKS.md, issue 20).

// Pair state, in device memory: params[NSTAT], ll, shared_k, iter, status.
#define STATE_LEN (NSTAT + 4)
#define PARTIAL_LEN (NSTAT + 2)

// Observations of a thread per step of em_grid's loop: the loads of a step
// are issued together, and their chains of arithmetic interleave.
#ifndef EM_GRID_UNROLL
#define EM_GRID_UNROLL EM_UNROLL
#endif

// The iteration's end for one pair, run by the whole last block: the sum of
// the blocks' partial sums in block order, then thread 0 updates the state.
// Not inlined: its registers would otherwise count against the E-step loop.
__device__ __noinline__ void grid_update(int pair, double total, double centre, double* st, const double* partial, int blocks,
                            double* trace, const int* pair_global, int max_iters, double epsilon, const double* held,
                            double* scratch)
{
    double tot[PARTIAL_LEN];
#pragma unroll
    for (int k = 0; k < PARTIAL_LEN; ++k) tot[k] = 0.0;
    for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
        const double* in = partial + ((long long)pair * blocks + b) * PARTIAL_LEN;
        // Through L2 (__ldcg): other blocks wrote these in this launch.
#pragma unroll
        for (int k = 0; k < PARTIAL_LEN; ++k) tot[k] += __ldcg(in + k);
    }
#pragma unroll
    for (int k = 0; k < PARTIAL_LEN; ++k) tot[k] = block_sum(tot[k], scratch);
    if (threadIdx.x != 0) return;

    int iter = (int)st[NSTAT + 2];
    int status = ST_RUNNING;
    if (iter == 0) st[NSTAT + 1] = tot[NSTAT + 1];  // shared term, summed on the first pass
    const double new_ll = tot[NSTAT] + st[NSTAT + 1];
    if (iter == 0) {
        if (!isfinite(new_ll)) status = ST_BAD_START;
    } else if (!isfinite(new_ll)) {
        status = ST_NONFINITE;
    } else {
        if (trace) trace[(long long)pair_global[pair] * max_iters + iter - 1] = new_ll;
        if (fabs(new_ll - st[NSTAT]) < epsilon) status = ST_CONVERGED;
    }
    if (isfinite(new_ll) || iter == 0) st[NSTAT] = new_ll;
    if (status == ST_RUNNING && iter == max_iters) status = ST_MAX_ITERS;
    if (status == ST_RUNNING) {
        double p[NSTAT];
#pragma unroll
        for (int k = 0; k < NSTAT; ++k) p[k] = st[k];
        ++iter;
#ifdef EM_CONSTRAINED
        status = m_step_constrained(tot, centre, held, p);
#else
        status = m_step(tot, total, centre, p);
#endif
        if (status == ST_RUNNING) {
            for (int k = 0; k < NSTAT; ++k) st[k] = p[k];
        }
    }
    st[NSTAT + 2] = (double)iter;
    st[NSTAT + 3] = (double)status;
}

// Minimum resident blocks per SM (caps registers). grid_update is not
// inlined, so its registers do not count against the E-step loop's.
#ifndef EM_GRID_MIN_BLOCKS
#if EM_M <= 2
#define EM_GRID_MIN_BLOCKS 3
#else
#define EM_GRID_MIN_BLOCKS 1
#endif
#endif

#ifdef EM_WEIGHTED
// em_grid's weighted E-step over a thread's observations from i (left at
// n); returns their log-likelihood, or without LL e_obs_weighted's finite
// stand-in for it (an iteration whose log-likelihood is not read: as the
// CPU's Wanted::Sums). On the first pass it adds the shared term to k_local.
template <bool LL>
__device__ __forceinline__ double grid_e_step_weighted(const double* xd, const weight_t* wd, int n, long long& i, long long stride,
                                                       double centre, const double* A, const double* B, const double* C, double* S,
                                                       int first, double& k_local) {
    double ll_w = 0.0;
    for (; i + (EM_GRID_UNROLL - 1) * stride < n; i += EM_GRID_UNROLL * stride) {
        double xs[EM_GRID_UNROLL], ws[EM_GRID_UNROLL];
#pragma unroll
        for (int k = 0; k < EM_GRID_UNROLL; ++k) { xs[k] = xd[i + k * stride]; ws[k] = wd[i + k * stride]; }
#pragma unroll
        for (int k = 0; k < EM_GRID_UNROLL; ++k) {
            double u, v;
            fam_features(xs[k], centre, u, v);
            e_obs_weighted<LL>(u, v, ws[k], A, B, C, S, ll_w);
            if (first && ws[k] != 0.0) k_local += ws[k] * fam_shared_term(xs[k]);
        }
    }
    for (; i < n; i += stride) {
        const double xi = xd[i], wi = wd[i];
        double u, v;
        fam_features(xi, centre, u, v);
        e_obs_weighted<LL>(u, v, wi, A, B, C, S, ll_w);
        if (first && wi != 0.0) k_local += wi * fam_shared_term(xi);
    }
    return ll_w;
}
#endif

// ll_wanted: whether this launch's log-likelihood is read (0 only for the
// weighted kernels' iterations before the last of a fixed number without
// a trace: the CPU's Wanted::Sums; the unweighted E-step takes its logs a
// block of observations at a time, and always computes it).
extern "C" __global__ void __launch_bounds__(256, EM_GRID_MIN_BLOCKS) em_grid(
    const double* __restrict__ x, const weight_t* __restrict__ weights, const double* __restrict__ totals,
    const long long* __restrict__ offsets, const int* __restrict__ lengths,
    const double* __restrict__ centres, const int* __restrict__ pair_dataset, double* __restrict__ state,
    double* __restrict__ partial, unsigned* __restrict__ arrivals, int first, double* __restrict__ trace,
    const int* __restrict__ pair_global, int max_iters, double epsilon, const double* __restrict__ held,
    const double* __restrict__ cens, const long long* __restrict__ cens_start, int ll_wanted)
{
    __shared__ double scratch[32];
    __shared__ unsigned arrived;
    const int pair = blockIdx.y;
    double* st = state + (long long)pair * STATE_LEN;
    if ((int)st[NSTAT + 3] != ST_RUNNING) return;  // the same for every block of the pair
    const int d = pair_dataset[pair];
    const int n = lengths[d];
    const double* xd = x + offsets[d];
    load_exp_table();  // exp_neg_abs's table
#ifdef EM_WEIGHTED
    load_log1p_table();  // and log1p_unit's
#endif
    __syncthreads();
    const double centre = centres[d];
    double A[EM_M], B[EM_M], C[EM_M], S[NSTAT], p[NSTAT];
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) { p[k] = st[k]; S[k] = 0.0; }
    naturals(p, centre, A, B, C);
    double maxsum = 0.0, logsum = 0.0, prod = 1.0, k_local = 0.0;
    int in_block = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#ifdef EM_WEIGHTED
    const weight_t* wd = weights + offsets[d];
    maxsum = ll_wanted ? grid_e_step_weighted<true>(xd, wd, n, i, stride, centre, A, B, C, S, first, k_local)
                       : grid_e_step_weighted<false>(xd, wd, n, i, stride, centre, A, B, C, S, first, k_local);
#endif
    // LOG_BLOCK is a multiple of EM_GRID_UNROLL; the tail never reaches it.
    for (; i + (EM_GRID_UNROLL - 1) * stride < n; i += EM_GRID_UNROLL * stride) {
        double xs[EM_GRID_UNROLL];
#pragma unroll
        for (int k = 0; k < EM_GRID_UNROLL; ++k) xs[k] = xd[i + k * stride];
#pragma unroll
        for (int k = 0; k < EM_GRID_UNROLL; ++k) {
            double u, v;
            fam_features(xs[k], centre, u, v);
            e_obs(u, v, A, B, C, S, maxsum, prod);
            if (first) k_local += fam_shared_term(xs[k]);
        }
        if ((in_block += EM_GRID_UNROLL) == LOG_BLOCK) {
            logsum += log(prod);
            prod = 1.0;
            in_block = 0;
        }
    }
    for (; i < n; i += stride) {
        const double xi = xd[i];
        double u, v;
        fam_features(xi, centre, u, v);
        e_obs(u, v, A, B, C, S, maxsum, prod);
        if (first) k_local += fam_shared_term(xi);
    }
#ifdef EM_CENSORED
    // The censored intervals, by the first block's threads.
    if (blockIdx.x == 0) {
        const double* cd = cens + 3 * (long long)cens_start[d];
        const int n_cens = (int)(cens_start[d + 1] - cens_start[d]);  // at most the dataset's length
        for (int c = threadIdx.x; c < n_cens; c += blockDim.x) maxsum += censored_obs(cd[3 * c], cd[3 * c + 1], cd[3 * c + 2], p, centre, S);
    }
#endif
    double* out = partial + ((long long)pair * gridDim.x + blockIdx.x) * PARTIAL_LEN;
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) {
        const double t = block_sum(S[k], scratch);
        if (threadIdx.x == 0) out[k] = t;
    }
    const double ll = block_sum(maxsum + (logsum + log(prod)), scratch);
    const double kk = block_sum(k_local, scratch);
    if (threadIdx.x == 0) {
        out[NSTAT] = ll;
        out[NSTAT + 1] = kk;
        // The sums visible to every block before the arrival is counted.
        __threadfence();
        arrived = atomicAdd(arrivals + pair, 1u);
    }
    __syncthreads();
    if (arrived != gridDim.x - 1) return;
    __threadfence();
    grid_update(pair, totals[d], centre, st, partial, gridDim.x, trace, pair_global, max_iters, epsilon, held, scratch);
    if (threadIdx.x == 0) arrivals[pair] = 0u;  // ready for the next launch
}
