// Gibbs sampling of hierarchical GLMs with slice updates (core/src/gibbs/gpu.rs).
//
// One sweep is a few launches queued without host synchronisation:
//   hb_beta_tiles  (chain, group) pairs, `tile` lanes each (8 lanes for small
//                  groups, packed 4 to a warp; 32 for medium groups): the
//                  lanes sum the group's log-likelihood (log-posterior-
//                  parallel), the tiles run independently (block-parallel);
//   hb_beta_block  large groups, a whole block each (split over its threads),
//                  and medium ones too when their warps are too few;
//   hb_scalar_*    the scalars whose log-likelihood sums over every row
//                  (gamma before hb_global; after it the non-centred mu_k
//                  and tau_k, the negative binomial's shape and the ordinal
//                  cut-points), one at a time: each a
//                  slice update whose candidates are evaluated in batches by
//                  the whole grid (below, "Scalars summed over every row"),
//                  or for the non-centred mu_k (and tau_k, on many rows) a
//                  Newton step (hb_newton_*);
//   hb_global      one block per chain: mu (conjugate), tau and the
//                  gaussian's sigma (slice), then the draw is written to the
//                  device buffer if kept.
// Every lane of a tile computes the same sums (butterfly reduction), so the
// slice decisions are uniform within a tile; tiles that finish early simply
// stop (their shuffles use the tile's mask), and never stall the others.
//
// Random numbers: Philox4x32-10, keyed by the seed, counter (draw, block,
// sweep, chain): the same (seed, chain, sweep, block) addressing as the CPU
// streams, but not the same numbers (GPU draws agree in distribution).
//
// HB_FAMILY: 0 gaussian, 1 binomial (logit), 2 poisson (log), 3 negative
// binomial (log; the chain's `sigma` holds its shape phi), 4 ordinal
// (cumulative logit; the chain's cut-points theta_1 = 0 < ... < theta_{C-1}
// in `cuts`, the free ones slice-updated as ordinal.rs does).
//
// Correlated coefficients (lme4's `(1 + x | g)`): `prec` (chains x K x K,
// Sigma^-1) is non-NULL; a coefficient's prior given its group's others is
// N(mu_j - sum_{l != j} P_jl (b_l - mu_l) / P_jj, 1 / P_jj), and hb_global
// draws mu | beta, Sigma and Sigma | beta, mu ~ inverse-Wishart exactly (as
// core/src/gibbs/covariance.rs), every thread of the block computing the
// same small matrices with the same random numbers. K <= HB_KMAX.
//
// An offset (glm's) needs nothing here: it is part of eta from the start
// (the host's starting state) and eta is only ever updated incrementally.
// Binomial trials per row come in `trials` (NULL: one trial per row).
// tau and sigma are sampled on the log scale within [log floor, log
// scale_max] (core/src/gibbs/model.rs, SCALE_FLOOR_REL), so 1/scale^2 never
// overflows and no draw is NaN.

#ifndef HB_FAMILY
#define HB_FAMILY 1
#endif

#define HB_INF __longlong_as_double(0x7ff0000000000000LL)
// Most correlated coefficients per group (gpu.rs: CORRELATED_MAX_K).
#define HB_KMAX 8

// softplus by tables.cuh's exp(-|x|) and ln(1 + t) on [0, 1]: about 20
// float64 instructions where libdevice's exp and log1p take about 60, and
// the group updates spent half their time there. Against libm's, relative
// error below 1.8e-15 on [-40, 40] (8e6 points, a C++ copy of these
// operations), inf at inf, 0 at -inf, NaN at NaN. Every kernel that takes
// hb_loglik starts with HB_LOAD_TABLES() (the gaussian and Poisson
// families take no softplus).
#if HB_FAMILY == 1 || HB_FAMILY == 3 || HB_FAMILY == 4
#define HB_LOAD_TABLES() do { load_exp_table(); load_log1p_table(); __syncthreads(); } while (0)
__device__ __forceinline__ double hb_softplus(double x) {
    return fmax(x, 0.0) + log1p_unit(exp_neg_abs(x));
}
#else
#define HB_LOAD_TABLES() do {} while (0)
__device__ __forceinline__ double hb_softplus(double x) {
    return x > 0.0 ? x + log1p(exp(-x)) : log1p(exp(x));
}
#endif

// What a chain's parameters besides eta give hb_loglik: `v`, 1 / sigma^2
// (gaussian) or the shape phi (negative binomial); `cuts`, the ordinal
// family's ncuts cut-points.
struct HbAux {
    double v;
    const double* cuts;
    const double* gaps;  // per middle category c: log(1 - e^(theta_{c-1} - theta_c))
    int ncuts;
};

// log P(y = c) under the cumulative logit (model.rs: ordinal_loglik), cut
// `which` read as `t` (the cut-points' own updates; -1: none). With a, b
// the category's cut-points less eta (-inf below the first, +inf above the
// last), log(F(b) - F(a)) = log(1 - e^(a - b)) - softplus(-b) - softplus(a):
// one formula for every category, so a warp's rows do not diverge, and the
// first term (from the cut-points themselves, so close ones keep their gap)
// is the chain's table `gaps` unless a cut-point moves.
__device__ __forceinline__ double hb_ordinal(double y, double eta, const double* cuts, const double* gaps, int ncuts, int which, double t) {
    const int c = (int)y;
    auto cut = [&](int i) { return i == which ? t : cuts[i]; };
    const bool lo = c >= 2, hi = c <= ncuts;
    const double a = lo ? cut(c - 2) - eta : -HB_INF;
    const double b = hi ? cut(c - 1) - eta : HB_INF;
    double g = 0.0;
    if (lo && hi) g = which < 0 ? gaps[c - 2] : log(-expm1(cut(c - 2) - cut(c - 1)));
    return g - hb_softplus(-b) - hb_softplus(a);
}

// `n`: binomial trials (ignored by the other families).
__device__ __forceinline__ double hb_loglik(double y, double n, double eta, const HbAux& aux) {
#if HB_FAMILY == 0
    const double r = y - eta;
    return -0.5 * r * r * aux.v;
#elif HB_FAMILY == 1
    return y * eta - n * hb_softplus(eta);
#elif HB_FAMILY == 2
    return y * eta - exp(eta);
#elif HB_FAMILY == 3
    // y eta - (y + phi) log(phi + e^eta), less terms free of eta.
    const double e = eta - log(aux.v);
    return y * e - (y + aux.v) * hb_softplus(e);
#else
    return hb_ordinal(y, eta, aux.cuts, aux.gaps, aux.ncuts, -1, 0.0);
#endif
}

#if HB_FAMILY != 4
// hb_loglik with its first and second derivatives in eta (model.rs:
// loglik_curve; never positive, so the non-centred mu's Newton step
// applies). Binomial: weight n on softplus(eta); negative binomial: y +
// phi on softplus(eta - log phi).
__device__ __forceinline__ double hb_loglik_curve(double y, double n, double eta, const HbAux& aux, double& d1, double& d2) {
#if HB_FAMILY == 0
    const double r = y - eta;
    d1 = r * aux.v;
    d2 = -aux.v;
    return -0.5 * r * r * aux.v;
#elif HB_FAMILY == 2
    const double m = exp(eta);
    d1 = y - m;
    d2 = -m;
    return y * eta - m;
#else
    const double e = HB_FAMILY == 1 ? eta : eta - log(aux.v);
    const double wgt = HB_FAMILY == 1 ? n : y + aux.v;
    const double t = exp_neg_abs(e), inv = 1.0 / (1.0 + t);
    d1 = y - wgt * (e > 0.0 ? inv : t * inv);
    d2 = -wgt * t * inv * inv;
    return y * e - wgt * (fmax(e, 0.0) + log1p_unit(t));
#endif
}
#endif

__device__ __forceinline__ double hb_trials(const double* trials, long long i) {
    return trials ? trials[i] : 1.0;
}

// ---------------------------------------------------------------------------
// Philox4x32-10
// ---------------------------------------------------------------------------

__device__ __forceinline__ uint4 philox(uint4 c, uint2 k) {
    for (int i = 0; i < 10; ++i) {
        const unsigned hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        const unsigned hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k.x += 0x9E3779B9u;
        k.y += 0xBB67AE85u;
    }
    return c;
}

struct HbRng {
    uint2 key;
    uint4 ctr;
    double spare;
    bool has_spare;

    __device__ HbRng(unsigned long long seed, int chain, int sweep, int block)
        : key(make_uint2((unsigned)seed, (unsigned)(seed >> 32))),
          ctr(make_uint4(0u, (unsigned)block, (unsigned)sweep, (unsigned)chain)),
          spare(0.0), has_spare(false) {}

    // Uniform on (0, 1) from 53 bits.
    __device__ static double unit(unsigned a, unsigned b) {
        const unsigned long long v = ((unsigned long long)(a >> 5) << 26) | (b >> 6);
        return ((double)v + 0.5) * (1.0 / 9007199254740992.0);
    }
    __device__ double uniform() {
        if (has_spare) {
            has_spare = false;
            return spare;
        }
        const uint4 r = philox(ctr, key);
        ctr.x += 1u;
        spare = unit(r.z, r.w);
        has_spare = true;
        return unit(r.x, r.y);
    }
    __device__ double normal() {
        const double u1 = uniform(), u2 = uniform();
        return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    }
    // Gamma(shape, 1) (Marsaglia and Tsang 2000; below 1 by Gamma(shape + 1)
    // U^(1/shape)), as the CPU's Rng::gamma.
    __device__ double gamma(double shape) {
        double boost = 1.0;
        if (shape < 1.0) {
            boost = pow(uniform(), 1.0 / shape);
            shape += 1.0;
        }
        const double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
        for (;;) {
            const double z = normal();
            const double t = 1.0 + c * z;
            const double v = t * t * t;
            if (v <= 0.0) continue;
            if (log(uniform()) < 0.5 * z * z + d - d * v + d * log(v)) return d * v * boost;
        }
    }
};

// ---------------------------------------------------------------------------
// Small dense matrices (K x K, row-major, K <= HB_KMAX) for the correlated
// model's conjugate draws.
// ---------------------------------------------------------------------------

// Lower Cholesky factor of `a` into `l`; false when not positive definite.
__device__ bool hb_cholesky(const double* a, double* l, int k) {
    for (int i = 0; i < k; ++i) {
        for (int j = 0; j <= i; ++j) {
            double s = a[i * k + j];
            for (int m = 0; m < j; ++m) s -= l[i * k + m] * l[j * k + m];
            if (i == j) {
                if (!(s > 0.0)) return false;
                l[i * k + i] = sqrt(s);
            } else {
                l[i * k + j] = s / l[j * k + j];
            }
        }
        for (int j = i + 1; j < k; ++j) l[i * k + j] = 0.0;
    }
    return true;
}

// Inverse of lower-triangular `l` into `inv`.
__device__ void hb_lower_inverse(const double* l, double* inv, int k) {
    for (int c = 0; c < k; ++c) {
        for (int i = 0; i < k; ++i) {
            if (i < c) { inv[i * k + c] = 0.0; continue; }
            double s = i == c ? 1.0 : 0.0;
            for (int m = c; m < i; ++m) s -= l[i * k + m] * inv[m * k + c];
            inv[i * k + c] = s / l[i * k + i];
        }
    }
}

// out = x x' (x lower triangular or full).
__device__ void hb_outer(const double* x, double* out, int k) {
    for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j) {
            double s = 0.0;
            for (int m = 0; m < k; ++m) s += x[i * k + m] * x[j * k + m];
            out[i * k + j] = s;
        }
}

// Sigma ~ inverse-Wishart(df, s) by Bartlett's decomposition (as
// covariance.rs): with s = A A' and B lower triangular (B_ii^2 ~ chi^2(df -
// i), B_ij ~ N(0, 1) below), Sigma = C C' with C = A (B^-1)' into `s`, and
// Sigma^-1 = D D' with D = (A^-1)' B into `prec`. False when s is not
// positive definite or a result is not finite (then `s` and `prec` are
// not to be used). Every thread of a block may call it with the same
// arguments and stream: it draws the same numbers.
__device__ bool hb_draw_inverse_wishart(double df, double* s, double* prec, int K, HbRng& rng) {
    double a[HB_KMAX * HB_KMAX], b[HB_KMAX * HB_KMAX], ai[HB_KMAX * HB_KMAX], bi[HB_KMAX * HB_KMAX];
    double cm[HB_KMAX * HB_KMAX], dm[HB_KMAX * HB_KMAX];
    for (int i = 0; i < K; ++i)
        for (int j = 0; j < K; ++j) b[i * K + j] = j > i ? 0.0 : j == i ? sqrt(2.0 * rng.gamma(0.5 * (df - i))) : rng.normal();
    if (!hb_cholesky(s, a, K)) return false;
    hb_lower_inverse(a, ai, K);
    hb_lower_inverse(b, bi, K);
    for (int i = 0; i < K; ++i)
        for (int j = 0; j < K; ++j) {
            double cij = 0.0, dij = 0.0;
            for (int t = 0; t < K; ++t) {
                cij += a[i * K + t] * bi[j * K + t];
                dij += ai[t * K + i] * b[t * K + j];
            }
            cm[i * K + j] = cij;
            dm[i * K + j] = dij;
        }
    hb_outer(cm, s, K);
    hb_outer(dm, prec, K);
    bool ok = true;
    for (int i = 0; i < K * K; ++i) ok = ok && isfinite(s[i]) && isfinite(prec[i]);
    return ok;
}

// ---------------------------------------------------------------------------
// Neal's slice sampler (as core/src/gibbs/slice.rs)
// ---------------------------------------------------------------------------

struct HbStep {
    double x, logf;
    int evals;
    int stuck;
};

template <class F>
__device__ HbStep hb_slice(double x0, double f0, F& logf, double w, int m, double lower, double upper, HbRng& rng) {
    HbStep out = {x0, f0, 0, 0};
    auto f = [&](double x) -> double {
        if (x < lower || x > upper) return -HB_INF;
        out.evals += 1;
        return logf(x);
    };
    const double y = f0 + log(rng.uniform());
    double left = x0 - w * rng.uniform();
    double right = left + w;
    int j = (int)floor(m * rng.uniform());
    if (j > m - 1) j = m - 1;
    int k = m - 1 - j;
    while (j > 0 && left > lower && f(left) > y) { left -= w; --j; }
    while (k > 0 && right < upper && f(right) > y) { right += w; --k; }
    left = fmax(left, lower);
    right = fmin(right, upper);
    for (int s = 0; s < SLICE_MAX_SHRINKS; ++s) {
        const double x1 = left + (right - left) * rng.uniform();
        const double f1 = f(x1);
        if (f1 > y) {
            out.x = x1;
            out.logf = f1;
            return out;
        }
        if (x1 < x0) left = x1; else right = x1;
        if (right - left <= 2.220446049250313e-16 * fmax(fabs(x0), 2.2250738585072014e-308)) break;
    }
    out.stuck = 1;
    return out;
}

// Everything the group updates read.
struct HbArgs {
    const double* y;
    const double* x;      // n x K, by column (a coefficient's rows contiguous)
    const long long* offsets;
    int G, K, n, ncoord;
    double* beta;         // chains x G x K
    const double* mu;     // chains x K
    const double* tau;    // chains x K
    const double* sigma;  // chains
    double* eta;          // chains x n
    double* widths;       // chains x ncoord
    double* moved;        // chains x ncoord
    int sweep, adapting, adapt_now, m;
    double adapt_factor, adapt_window;
    unsigned long long seed;
    unsigned long long* counters;  // beta evals, gamma evals, scale evals, stuck
    int chain0;                    // global index of chain 0 (random streams only)
    const double* trials;          // binomial trials per row, or NULL (one each)
    unsigned long long* stuck_by;  // chains x ncoord: stuck updates per coordinate
    const double* prec;            // chains x K x K (Sigma^-1), or NULL (independent)
    double* cuts;                  // ordinal: chains x ncuts cut-points, else NULL
    int ncuts;
    double* gaps;                  //   and chains x ncuts HbAux::gaps (ncuts - 1 used)
    const int* row_group;          // n: each row's group (the non-centred updates)
    int nc_coords;                 // the last nc_coords of ncoord: the non-centred updates' widths
};

// Chain c's HbAux.
__device__ __forceinline__ HbAux hb_aux(const HbArgs& a, int c) {
    const double sigma = a.sigma[c];
    HbAux out;
    out.v = HB_FAMILY == 0 ? 1.0 / (sigma * sigma) : HB_FAMILY == 3 ? sigma : 1.0;
    out.cuts = a.cuts ? a.cuts + (size_t)c * a.ncuts : nullptr;
    out.gaps = a.gaps ? a.gaps + (size_t)c * a.ncuts : nullptr;
    out.ncuts = a.ncuts;
    return out;
}

// The coordinate-wise slice updates of group g of chain c, by `nthreads`
// threads (thread `lane` owns rows r0 + lane, r0 + lane + nthreads, ...),
// `reduce` summing over them and returning the same total to every thread.
template <class R>
__device__ void hb_update_group(const HbArgs& a, int c, int g, int lane, int nthreads, R& reduce) {
    const long long r0 = a.offsets[g], r1 = a.offsets[g + 1];
    const int K = a.K;
    double* eta = a.eta + (size_t)c * a.n;
    double* b = a.beta + ((size_t)c * a.G + g) * K;
    const HbAux inv_var = hb_aux(a, c);
    HbRng rng(a.seed, a.chain0 + c, a.sweep, g);
    double d0 = 0.0, b0 = 0.0, mu = 0.0, inv_tau = 1.0;
    // Correlated: this group's coefficients, as every lane of the tile has
    // them (the slice's decisions are uniform over the tile).
    const double* P = a.prec ? a.prec + (size_t)c * K * K : nullptr;
    double bl[HB_KMAX];
    if (P) for (int j = 0; j < K; ++j) bl[j] = b[j];
    const double* xj = a.x;  // the coordinate's column
    auto lik = [&](double d) -> double {
        double s = 0.0;
        for (long long i = r0 + lane; i < r1; i += nthreads) s += hb_loglik(a.y[i], hb_trials(a.trials, i), eta[i] + xj[i] * d, inv_var);
        return reduce(s);
    };
    auto post = [&](double v) -> double {
        const double z = (v - mu) * inv_tau;
        return lik(v - b0) - 0.5 * z * z;
    };
    double L = lik(d0);
    long long evals = 1, stuck = 0;
    double* w = a.widths + (size_t)c * a.ncoord + (size_t)g * K;
    double* moved = a.moved + (size_t)c * a.ncoord + (size_t)g * K;
    unsigned long long* stuck_by = a.stuck_by + (size_t)c * a.ncoord + (size_t)g * K;
    for (int j = 0; j < K; ++j) {
        xj = a.x + (size_t)j * a.n;
        b0 = b[j];
        if (P) {
            const double pjj = P[j * K + j];
            double pull = 0.0;
            for (int l = 0; l < K; ++l)
                if (l != j) pull += P[j * K + l] * (bl[l] - a.mu[c * K + l]);
            mu = a.mu[c * K + j] - pull / pjj;
            inv_tau = sqrt(pjj);
        } else {
            mu = a.mu[c * K + j];
            inv_tau = 1.0 / a.tau[c * K + j];
        }
        const double z0 = (b0 - mu) * inv_tau;
        const HbStep st = hb_slice(b0, L - 0.5 * z0 * z0, post, w[j], a.m, -HB_INF, HB_INF, rng);
        evals += st.evals;
        stuck += st.stuck;
        if (lane == 0 && st.stuck) stuck_by[j] += 1;
        const double delta = st.x - b0;
        if (delta != 0.0) {
            for (long long i = r0 + lane; i < r1; i += nthreads) eta[i] += xj[i] * delta;
            const double z1 = (st.x - mu) * inv_tau;
            L = st.logf + 0.5 * z1 * z1;
            if (lane == 0) b[j] = st.x;
            if (P) bl[j] = st.x;
        }
        if (lane == 0 && a.adapting) moved[j] += fabs(delta);
    }
    if (lane == 0) {
        if (a.adapt_now) {
            for (int j = 0; j < K; ++j) {
                const double target = a.adapt_factor * moved[j] / a.adapt_window;
                if (isfinite(target) && target > 0.0) w[j] = sqrt(w[j] * target);
                moved[j] = 0.0;
            }
        }
        atomicAdd(&a.counters[0], (unsigned long long)evals);
        if (stuck) atomicAdd(&a.counters[3], (unsigned long long)stuck);
    }
}

__device__ __forceinline__ double tile_sum(double v, unsigned mask, int tile) {
    for (int o = tile >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
    return v;
}

// (chain, group) pairs of `groups` (n_items of them per chain), `tile`
// lanes each; tile divides 32 and blockDim.x.
// At most 85 registers, so that three blocks share a multiprocessor: the
// updates wait on shuffles and exp/log1p chains, and only more warps
// hide that (ptxas left to itself took 154 registers, one block per
// multiprocessor, 1.76x slower).
extern "C" __global__ void __launch_bounds__(256, 3) hb_beta_tiles(HbArgs a, const int* groups, int n_items, int chains, int tile) {
    HB_LOAD_TABLES();
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long item = t / tile;
    if (item >= (long long)n_items * chains) return;  // whole tiles leave together
    const int lane = (int)(t % tile);
    const int c = (int)(item / n_items);
    const int g = groups[item % n_items];
    const int base = ((int)(threadIdx.x & 31) / tile) * tile;
    const unsigned mask = tile == 32 ? FULL_MASK : (((1u << tile) - 1u) << base);
    auto reduce = [&](double v) { return tile_sum(v, mask, tile); };
    hb_update_group(a, c, g, lane, tile, reduce);
}

// One block per (chain, group): the large groups, 256 threads; medium ones
// when a warp each would leave the device under-filled, 64 to 256
// (gpu.rs: medium_threads). The register bound is hb_beta_tiles'.
extern "C" __global__ void __launch_bounds__(256, 3) hb_beta_block(HbArgs a, const int* groups, int n_items) {
    HB_LOAD_TABLES();
    __shared__ double scratch[32];
    const int c = blockIdx.x / n_items;
    const int g = groups[blockIdx.x % n_items];
    auto reduce = [&](double v) { return block_sum(v, scratch); };
    hb_update_group(a, c, g, threadIdx.x, blockDim.x, reduce);
}

// Scale prior log densities (prior.rs): log prior density of a positive
// parameter s: 0 half-Cauchy(0, a), 1 half-normal(0, a), 3 gamma with shape
// a and rate b, 4 half-t with scale a and b degrees of freedom.
__device__ __forceinline__ double hb_scale_prior(int kind, double a, double b, double s) {
    if (kind == 3) return (a - 1.0) * log(s) - b * s;
    const double r = s / a;
    if (kind == 4) return -0.5 * (b + 1.0) * log1p(r * r / b);
    return kind == 0 ? -log1p(r * r) : -0.5 * r * r;
}

// hb_scale_prior at s > 0 with its first and second derivatives in s
// (prior.rs: log_density_curve; the non-centred tau_j's Newton step).
__device__ __forceinline__ double hb_scale_prior_curve(int kind, double a, double b, double s, double& d1, double& d2) {
    if (kind == 3) {
        d1 = (a - 1.0) / s - b;
        d2 = -(a - 1.0) / (s * s);
    } else if (kind == 1) {
        d1 = -s / (a * a);
        d2 = -1.0 / (a * a);
    } else {
        // Half-t (half-Cauchy: 1 df): -(df + 1)/2 ln(c + s^2), c = df a^2.
        const double df = kind == 4 ? b : 1.0, q = df * a * a + s * s;
        d1 = -(df + 1.0) * s / q;
        d2 = -(df + 1.0) * (df * a * a - s * s) / (q * q);
    }
    return hb_scale_prior(kind, a, b, s);
}

// ---------------------------------------------------------------------------
// The LKJ prior of a covariance (as core/src/gibbs/lkj.rs): coordinates
// theta = (log sd_1..K, atanh of the canonical partial correlations in the
// row order of Omega's Cholesky factor), each slice-updated once per sweep,
// the sds first, with the same random numbers and in the same order as
// lkj::update. Every thread of a block may call these with the same
// arguments and stream: they compute the same values.
// ---------------------------------------------------------------------------

#define HB_LKJ_Y_MAX 15.0
#define HB_LKJ_Y_WIDTH 1.0
#define HB_THETA_MAX (HB_KMAX * (HB_KMAX + 1) / 2)

// log(1 - tanh(y)^2) = -2 log cosh(y), without cancellation.
__device__ __forceinline__ double hb_log_sech2(double y) {
    const double a = fabs(y);
    return -2.0 * (a + log1p(exp(-2.0 * a)) - 0.6931471805599453);
}

// Omega's Cholesky factor from the y coordinates into l; the sum of log l_ii.
__device__ double hb_lkj_factor(const double* y, int K, double* l) {
    double log_diag = 0.0;
    int m = 0;
    for (int i = 0; i < K; ++i) {
        double c = 1.0;
        for (int j = 0; j < K; ++j) l[i * K + j] = 0.0;
        for (int j = 0; j < i; ++j) {
            l[i * K + j] = tanh(y[m]) * c;
            c /= cosh(y[m]);
            log_diag += 0.5 * hb_log_sech2(y[m]);
            ++m;
        }
        l[i * K + i] = c;
    }
    return log_diag;
}

// lkj::log_density: the sds' priors (kind, a, b of hb_scale_prior) and
// LKJ(eta), given `count` vectors with scatter matrix S.
__device__ double hb_lkj_logf(const double* theta, int K, double count, const double* S, double eta, int sd_kind, double sd_a, double sd_b) {
    double l[HB_KMAX * HB_KMAX], w[HB_KMAX * HB_KMAX], inv_sd[HB_KMAX];
    const double* y = theta + K;
    const double log_diag = hb_lkj_factor(y, K, l);
    double lp = 0.0, usum = 0.0;
    for (int k = 0; k < K; ++k) {
        lp += hb_scale_prior(sd_kind, sd_a, sd_b, exp(theta[k])) + theta[k];
        usum += theta[k];
        inv_sd[k] = exp(-theta[k]);
    }
    int m = 0;
    for (int i = 0; i < K; ++i)
        for (int j = 0; j < i; ++j) lp += (eta + 0.5 * (K - 2.0 - j)) * hb_log_sech2(y[m++]);
    for (int c = 0; c < K; ++c)
        for (int i = c; i < K; ++i) {
            double s = i == c ? 1.0 : 0.0;
            for (int t = c; t < i; ++t) s -= l[i * K + t] * w[t * K + c];
            w[i * K + c] = s / l[i * K + i];
        }
    double trace = 0.0;
    for (int i = 0; i < K; ++i)
        for (int a = 0; a <= i; ++a) {
            double wa = 0.0;
            for (int b = 0; b <= i; ++b) wa += w[i * K + b] * S[b * K + a] * inv_sd[b] * inv_sd[a];
            trace += wa * w[i * K + a];
        }
    return lp - count * (usum + log_diag) - 0.5 * trace;
}

// lkj::theta_of; false when Omega has no Cholesky factor or a coordinate
// is not finite.
__device__ bool hb_lkj_theta(const double* cov, int K, double* theta) {
    double om[HB_KMAX * HB_KMAX], l[HB_KMAX * HB_KMAX], sd[HB_KMAX];
    for (int i = 0; i < K; ++i) sd[i] = sqrt(cov[i * K + i]);
    for (int x = 0; x < K * K; ++x) om[x] = cov[x] / (sd[x / K] * sd[x % K]);
    if (!hb_cholesky(om, l, K)) return false;
    bool ok = true;
    for (int i = 0; i < K; ++i) {
        theta[i] = log(sd[i]);
        ok = ok && isfinite(theta[i]);
    }
    int m = K;
    for (int i = 0; i < K; ++i) {
        double c = 1.0;
        for (int j = 0; j < i; ++j) {
            const double z = fmin(fmax(l[i * K + j] / c, -1.0), 1.0);
            theta[m] = fmin(fmax(atanh(z), -HB_LKJ_Y_MAX), HB_LKJ_Y_MAX);
            ok = ok && isfinite(theta[m]);
            ++m;
            c *= sqrt(fmax(1.0 - z * z, 0.0));
        }
    }
    return ok;
}

// lkj::cov_of: Sigma into cov, its inverse into prec.
__device__ void hb_lkj_cov(const double* theta, int K, double* cov, double* prec) {
    double l[HB_KMAX * HB_KMAX], w[HB_KMAX * HB_KMAX], sd[HB_KMAX];
    hb_lkj_factor(theta + K, K, l);
    for (int k = 0; k < K; ++k) sd[k] = exp(theta[k]);
    for (int c = 0; c < K; ++c)
        for (int i = c; i < K; ++i) {
            double s = i == c ? 1.0 : 0.0;
            for (int t = c; t < i; ++t) s -= l[i * K + t] * w[t * K + c];
            w[i * K + c] = s / l[i * K + i];
        }
    for (int a = 0; a < K; ++a)
        for (int b = 0; b < K; ++b) {
            double om = 0.0, oi = 0.0;
            for (int t = 0; t <= min(a, b); ++t) om += l[a * K + t] * l[b * K + t];
            for (int t = max(a, b); t < K; ++t) oi += w[t * K + a] * w[t * K + b];
            cov[a * K + b] = sd[a] * sd[b] * om;
            prec[a * K + b] = oi / (sd[a] * sd[b]);
        }
}

// lkj::update then lkj::cov_of: Sigma (now `now`) of K terms given `count`
// vectors with scatter S, under LKJ(eta) and the sds' prior (kind, a, b),
// into cov and prec. The sds' slice widths are w[0..K), floors
// floors[0..K); their moves are written to moved[0..K) (every thread's
// own copy) and their stuck updates (a correlation's against its row's sd)
// to stuck[0..K). False when `now` has no coordinates.
__device__ bool hb_lkj_draw(const double* now, const double* S, int K, double count, double eta, int sd_kind, double sd_a, double sd_b,
                            const double* w, const double* floors, double ceiling, int m, HbRng& rng,
                            double* cov, double* prec, long long& evals, int* stuck, double* moved) {
    double theta[HB_THETA_MAX];
    if (!hb_lkj_theta(now, K, theta)) return false;
    const int n = K + K * (K - 1) / 2;
    int row = 0, left_in_row = 0;
    for (int c = 0; c < n; ++c) {
        // The row of correlation c (rows 1, 2, 2, 3, 3, 3, ...).
        if (c >= K) {
            if (left_in_row == 0) { ++row; left_in_row = row; }
            --left_in_row;
        }
        const double x0 = theta[c];
        auto logf = [&](double x) -> double {
            theta[c] = x;
            return hb_lkj_logf(theta, K, count, S, eta, sd_kind, sd_a, sd_b);
        };
        const double f0 = logf(x0);
        const HbStep st = c < K ? hb_slice(x0, f0, logf, w[c], m, log(floors[c]), log(ceiling), rng)
                                : hb_slice(x0, f0, logf, HB_LKJ_Y_WIDTH, m, -HB_LKJ_Y_MAX, HB_LKJ_Y_MAX, rng);
        theta[c] = st.x;
        evals += st.evals + 1;
        stuck[c < K ? c : row] += st.stuck;
        if (c < K) moved[c] = fabs(st.x - x0);
    }
    hb_lkj_cov(theta, K, cov, prec);
    return true;
}

struct HbGlobal {
    const double* z;   // n x P
    int P;
    double* gamma;     // chains x P
    double* mu;        // chains x K
    double* tau;       // chains x K
    double* sigma;     // chains
    double mu_mean, mu_sd, gamma_sd;
    int tau_kind, sigma_kind;  // 0 half-Cauchy, 1 half-normal, 2 fixed, 3 gamma, 4 half-t
    double tau_scale, sigma_scale, sigma_rate, tau_rate;
    // Draws: chains x kept x params; -1: not kept this sweep.
    double* draws;
    int kept, params, draw_index;
    double sigma_floor, scale_max;  // sampled range of sigma (and tau's ceiling)
    double aux_max;                 // ceiling of the auxiliary parameter
    double* cov;                    // correlated: chains x K x K Sigma, or NULL
    double* prec;                   //   and its inverse
    double cov_df, cov_s0;          //   inverse-Wishart(df, s0 I), s0 = df scale^2
    const double* tau_floor;        // K floors of tau
    double lkj_eta;                 // > 0: Sigma's prior is LKJ(eta) with the sds under tau's, not the inverse-Wishart
};

// The warmup's width adaptation of coordinate i (adapt.rs).
__device__ __forceinline__ void hb_adapt_width(const HbArgs& a, double* w, double* moved, int i) {
    const double target = a.adapt_factor * moved[i] / a.adapt_window;
    if (isfinite(target) && target > 0.0) w[i] = sqrt(w[i] * target);
    moved[i] = 0.0;
}

// The LKJ update of a block (chain c) of hb_global or hb_factor_global:
// hb_lkj_draw from the current Sigma `now` of K terms given `count`
// vectors with scatter `sm` (replaced by the new Sigma; its inverse into
// `prec`), under LKJ(eta) and tau's prior, the sds being chain c's sweep
// coordinates idx0.. (their widths, floors `floors`, stuck counts and,
// warming up, moves). Called by every thread of the block.
__device__ bool hb_lkj_sweep(const HbArgs& a, const HbGlobal& h, int c, const double* now, double* sm, double* prec, int K, int count,
                             double eta, int idx0, const double* floors, HbRng& rng, long long& scale_evals, long long& stuck) {
    double sc[HB_KMAX * HB_KMAX], mv[HB_KMAX];
    int st[HB_KMAX];
    for (int i = 0; i < K * K; ++i) sc[i] = sm[i];
    for (int k = 0; k < K; ++k) st[k] = 0;
    const double* w = a.widths + (size_t)c * a.ncoord + idx0;
    const bool ok = hb_lkj_draw(now, sc, K, count, eta, h.tau_kind, h.tau_scale, h.tau_rate, w, floors, h.scale_max, a.m, rng,
                                sm, prec, scale_evals, st, mv);
    __syncthreads();
    if (ok)
        for (int k = 0; k < K; ++k) {
            stuck += st[k];
            if (threadIdx.x == 0) {
                a.stuck_by[(size_t)c * a.ncoord + idx0 + k] += st[k];
                if (a.adapting) a.moved[(size_t)c * a.ncoord + idx0 + k] += mv[k];
            }
        }
    return ok;
}

// Whether sweep coordinate i is a scalar summed over every row (gamma, the
// negative binomial's shape, a free cut-point, a non-centred mu_k or
// tau_k), adapted by hb_scalar_finish.
__device__ __forceinline__ bool hb_scalar_coord(const HbArgs& a, int i, int P) {
    const int base = a.G * a.K;
    if (i < base) return false;
    if (i >= a.ncoord - a.nc_coords) return true;
    if (i < base + P) return true;
    const int aux = base + P + a.K;
    return (HB_FAMILY == 3 && i == aux) || (HB_FAMILY == 4 && i > aux && i < aux + a.ncuts);
}

// One block per chain: mu, tau, the gaussian's sigma; then record the draw
// (the scalars updated after it overwrite their own entries).
extern "C" __global__ void hb_global(HbArgs a, HbGlobal h) {
    __shared__ double scratch[32];
    const int c = blockIdx.x;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int G = a.G, K = a.K, n = a.n, P = h.P;
    double* eta = a.eta + (size_t)c * n;
    const double* beta = a.beta + (size_t)c * G * K;
    double* w = a.widths + (size_t)c * a.ncoord;
    double* moved = a.moved + (size_t)c * a.ncoord;
    HbRng rng(a.seed, a.chain0 + c, a.sweep, G);
    long long scale_evals = 0, stuck = 0;

    if (h.cov) {
        // Correlated: mu | beta, Sigma ~ N(Q^-1 r, Q^-1), Q = I / s0^2 + G
        // Sigma^-1, r = m0 / s0^2 + Sigma^-1 sum_g beta_g; then Sigma | beta,
        // mu ~ inverse-Wishart(df + G, s0 I + sum_g (beta_g - mu)(beta_g -
        // mu)') by Bartlett's decomposition. Every thread computes both.
        double* prec = h.prec + (size_t)c * K * K;
        double* S = h.cov + (size_t)c * K * K;
        double sum[HB_KMAX], m[HB_KMAX], q[HB_KMAX * HB_KMAX], l[HB_KMAX * HB_KMAX], rhs[HB_KMAX];
        for (int k = 0; k < K; ++k) {
            double s = 0.0;
            for (int g = tid; g < G; g += nt) s += beta[(size_t)g * K + k];
            sum[k] = block_sum(s, scratch);
        }
        const double s02 = h.mu_sd * h.mu_sd;
        for (int i = 0; i < K; ++i) {
            double r = h.mu_mean / s02;
            for (int j = 0; j < K; ++j) {
                q[i * K + j] = G * prec[i * K + j] + (i == j ? 1.0 / s02 : 0.0);
                r += prec[i * K + j] * sum[j];
            }
            rhs[i] = r;
        }
        for (int k = 0; k < K; ++k) m[k] = h.mu[c * K + k];
        if (hb_cholesky(q, l, K)) {
            for (int i = 0; i < K; ++i) {
                double v = rhs[i];
                for (int j = 0; j < i; ++j) v -= l[i * K + j] * rhs[j];
                rhs[i] = v / l[i * K + i];
            }
            for (int i = 0; i < K; ++i) rhs[i] += rng.normal();
            for (int i = K - 1; i >= 0; --i) {
                double v = rhs[i];
                for (int j = i + 1; j < K; ++j) v -= l[j * K + i] * m[j];
                m[i] = v / l[i * K + i];
            }
        }
        __syncthreads();
        if (tid == 0) for (int k = 0; k < K; ++k) h.mu[c * K + k] = m[k];
        double sm[HB_KMAX * HB_KMAX], ca[HB_KMAX * HB_KMAX];
        for (int i = 0; i < K; ++i) {
            for (int j = 0; j <= i; ++j) {
                double s = 0.0;
                for (int g = tid; g < G; g += nt) s += (beta[(size_t)g * K + i] - m[i]) * (beta[(size_t)g * K + j] - m[j]);
                const double v = block_sum(s, scratch) + (i == j ? h.cov_s0 : 0.0);
                sm[i * K + j] = v;
                sm[j * K + i] = v;
            }
        }
        // LKJ (cov_s0 is 0): slice updates from the current Sigma, the sds
        // with tau's widths and floors.
        const bool ok = h.lkj_eta > 0.0 ? hb_lkj_sweep(a, h, c, S, sm, ca, K, G, h.lkj_eta, G * K + P, h.tau_floor, rng, scale_evals, stuck)
                                        : hb_draw_inverse_wishart(h.cov_df + G, sm, ca, K, rng);
        __syncthreads();
        if (ok) {
            if (tid == 0) {
                for (int i = 0; i < K * K; ++i) {
                    S[i] = sm[i];
                    prec[i] = ca[i];
                }
                for (int k = 0; k < K; ++k) h.tau[c * K + k] = sqrt(sm[k * K + k]);
            }
        } else {
            stuck += K;
            if (tid == 0)
                for (int k = 0; k < K; ++k) a.stuck_by[(size_t)c * a.ncoord + G * K + P + k] += 1;
        }
        __syncthreads();
    } else {
    // mu: conjugate normal.
        for (int k = 0; k < K; ++k) {
            double s = 0.0;
            for (int g = tid; g < G; g += nt) s += beta[(size_t)g * K + k];
            s = block_sum(s, scratch);
            const double t2 = h.tau[c * K + k] * h.tau[c * K + k];
            const double s02 = h.mu_sd * h.mu_sd;
            const double prec = 1.0 / s02 + G / t2;
            const double mean = (h.mu_mean / s02 + s / t2) / prec;
            const double v = mean + rng.normal() / sqrt(prec);
            if (tid == 0) h.mu[c * K + k] = v;
            __syncthreads();
        }
        // tau: slice on log tau.
        if (h.tau_kind != 2) {
            for (int k = 0; k < K; ++k) {
                const double m = h.mu[c * K + k];
                double s = 0.0;
                for (int g = tid; g < G; g += nt) {
                    const double r = beta[(size_t)g * K + k] - m;
                    s += r * r;
                }
                const double ss = block_sum(s, scratch);
                auto logf = [&](double u) -> double {
                    return hb_scale_prior(h.tau_kind, h.tau_scale, h.tau_rate, exp(u)) + (1.0 - G) * u - 0.5 * ss * exp(-2.0 * u);
                };
                const int idx = G * K + P + k;
                const double u0 = log(h.tau[c * K + k]);
                const HbStep st = hb_slice(u0, logf(u0), logf, w[idx], a.m, log(h.tau_floor[k]), log(h.scale_max), rng);
                scale_evals += st.evals + 1;
                stuck += st.stuck;
                if (tid == 0 && st.stuck) a.stuck_by[(size_t)c * a.ncoord + idx] += 1;
                __syncthreads();
                if (tid == 0) {
                    h.tau[c * K + k] = exp(st.x);
                    if (a.adapting) moved[idx] += fabs(st.x - u0);
                }
            }
        }
    }
    // sigma on the log scale, from the residual sum of squares.
    if (HB_FAMILY == 0 && h.sigma_kind != 2) {
        double s = 0.0;
        for (int i = tid; i < n; i += nt) {
            const double r = a.y[i] - eta[i];
            s += r * r;
        }
        const double rss = block_sum(s, scratch);
        auto logf = [&](double u) -> double {
            return hb_scale_prior(h.sigma_kind, h.sigma_scale, h.sigma_rate, exp(u)) + u - n * u - 0.5 * rss * exp(-2.0 * u);
        };
        const int idx = G * K + P + K;
        const double u0 = log(h.sigma[c]);
        const HbStep st = hb_slice(u0, logf(u0), logf, w[idx], a.m, log(h.sigma_floor), log(h.aux_max), rng);
        scale_evals += st.evals + 1;
        stuck += st.stuck;
        if (tid == 0 && st.stuck) a.stuck_by[(size_t)c * a.ncoord + idx] += 1;
        __syncthreads();
        if (tid == 0) {
            h.sigma[c] = exp(st.x);
            if (a.adapting) moved[idx] += fabs(st.x - u0);
        }
    }
    __syncthreads();
    if (tid == 0) {
        if (a.adapt_now) {
            for (int i = G * K; i < a.ncoord; ++i)
                if (!hb_scalar_coord(a, i, P)) hb_adapt_width(a, w, moved, i);
        }
        atomicAdd(&a.counters[2], (unsigned long long)scale_evals);
        if (stuck) atomicAdd(&a.counters[3], (unsigned long long)stuck);
    }
    // The draw, in the CPU order: beta, mu, tau, gamma, the auxiliary parameter.
    if (h.draw_index >= 0) {
        double* out = h.draws + ((size_t)c * h.kept + h.draw_index) * h.params;
        for (int i = tid; i < G * K; i += nt) out[i] = beta[i];
        if (tid == 0) {
            for (int k = 0; k < K; ++k) out[G * K + k] = h.mu[c * K + k];
            for (int k = 0; k < K; ++k) out[G * K + K + k] = h.tau[c * K + k];
            for (int j = 0; j < P; ++j) out[G * K + 2 * K + j] = h.gamma[c * P + j];
            const int aux = HB_FAMILY == 0 || HB_FAMILY == 3;
            if (aux) out[G * K + 2 * K + P] = h.sigma[c];
            int at = G * K + 2 * K + P + aux;
            if (h.cov) {
                // The correlations, pairs (0,1), (0,2), ..., (1,2), ...
                const double* S = h.cov + (size_t)c * K * K;
                for (int i = 0; i < K; ++i)
                    for (int j = i + 1; j < K; ++j) out[at++] = S[i * K + j] / sqrt(S[i * K + i] * S[j * K + j]);
            }
            // Ordinal: brms's cut-points, theta_c - mu_1.
            for (int j = 0; j < a.ncuts; ++j) out[at++] = a.cuts[(size_t)c * a.ncuts + j] - h.mu[c * K];
        }
    }
}

// ---------------------------------------------------------------------------
// Scalars summed over every row: a global coefficient gamma_j, the negative
// binomial's shape (on the log scale), a free ordinal cut-point, and the
// groups' mu_k and tau_k again in the non-centred parameterisation (the
// interweaving of sweep.rs: alpha_g = (beta_gk - mu_k) / tau_k held, a
// shift of mu_k moves every beta_gk, a new tau_k stretches them; after
// hb_global's centred updates, as on the CPU). Each is one
// slice update (hb_slice's steps in hb_slice's order, from the scalar's own
// stream) kept as a state machine, so that its candidates can be evaluated
// in batches by the whole grid instead of one block per chain:
//   hb_scalar_start   per chain: the slice's level, the first interval and
//                     the first batch: x0 and the stepping-out points (their
//                     positions are known before any is evaluated);
//   hb_scalar_eval    (row blocks x chains): each block sums its rows' terms
//                     at every candidate into one partial per candidate;
//   hb_scalar_decide  one block per chain: the partials summed in a fixed
//                     order, the candidates consumed as hb_slice would have
//                     evaluated them, the next batch planned (shrinkage
//                     proposals, each assuming the ones before it rejected:
//                     the interval after a rejection is known in advance);
//                     batches grow from a few candidates (a slice update
//                     with adapted widths takes about 5 evaluations, and
//                     each candidate costs every row's term);
//   hb_scalar_finish  one block per chain: whatever is left, a candidate at
//                     a time summed by the block (all of it on few rows,
//                     where the host queues no rounds), then the new value,
//                     counters, width adaptation and the draw's entry;
//   hb_scalar_apply   gamma and the non-centred updates: eta's move over the
//                     grid;
//   hb_scalar_groups  the non-centred updates: the groups' beta_gk moved
//                     with mu_k or tau_k (and their kept draws).
// The host queues start, a fixed number of eval/decide rounds and finish
// without waiting; a round whose chain is done returns at once. Candidates
// after the accepted one are evaluated and dropped with their random
// numbers, which changes no draw's distribution.
// ---------------------------------------------------------------------------

#define HB_CANDIDATES 16
#define HB_SCALAR_STATE_DOUBLES 96

// What an HbScalar updates; the non-centred ones come last.
enum { HB_S_GAMMA, HB_S_SHAPE, HB_S_CUT, HB_S_NC_MU, HB_S_NC_TAU, HB_S_NC_SD };

struct HbScalar {
    int what;          // HB_S_*: gamma_j, the shape's log, cut-point j, mu_j,
                       // log tau_j and a factor's log sd_j non-centred
    int j;
    int coord;         // sweep coordinate (widths, moved, stuck_by), or -1:
                       // the fixed `width`, not adapted
    int stream;        // random stream (the block number of HbRng)
    int draw_at;       // place in a draw, or -1 (gamma's: hb_global writes it)
    double* state;     // chains x HB_SCALAR_STATE_DOUBLES
    double* partials;  // chains x nb x HB_CANDIDATES
    int nb;            // row blocks per chain of hb_scalar_eval
    // HB_S_NC_SD: the grouping factor's (HbFactor's) buffers
    const double* fw;    // n x fk columns
    double* fu;          // chains x fl x fk effects
    double* fsd;         // chains x fk sds
    const int* flevel;   // n: each row's level
    double ffloor;       // sd_j's floor
    double width;        // the slice width when coord < 0
    int fl, fk;
    int newton;          // a non-centred mu_j or tau_j: a Newton step, not a slice
};

enum { HB_NEED_F0, HB_STEPPING, HB_SHRINKING, HB_DONE, HB_NEWTON0, HB_NEWTON1 };
enum { HB_AT_X0, HB_AT_LEFT, HB_AT_RIGHT, HB_AT_SHRINK };

struct HbSliceState {
    HbRng rng;
    double x0, y, logu, w, lower, upper, left, right, x;
    double base;  // the non-centred updates: mu_j or tau_j before (exactly)
    int phase, steps_left, steps_right, left_open, right_open;
    int shrinks, evals, stuck, nt, collapse_at;
    int noncentred, skip;  // skip: x0's log density not finite (sweep.rs: non_centred_step)
    int linear;            // a Newton step of tau_j: x0, x and t[0] are tau_j itself, not its log
    double nf, nmean, nvar;  // a Newton step's log density at x0 and its proposal
    double t[HB_CANDIDATES];  // the batch's candidates
    int at[HB_CANDIDATES];    // and what each is (HB_AT_*)
};
static_assert(sizeof(HbSliceState) <= HB_SCALAR_STATE_DOUBLES * sizeof(double), "HbSliceState outgrew its buffer");

__device__ __forceinline__ HbSliceState* hb_scalar_state(const HbScalar& s, int c) {
    return reinterpret_cast<HbSliceState*>(s.state + (size_t)c * HB_SCALAR_STATE_DOUBLES);
}

// The next batch of at most `cap` candidates (cap >= 1).
__device__ void hb_slice_plan(HbSliceState& st, int cap) {
    int n = 0;
    if (st.phase == HB_NEED_F0) {
        st.t[n] = st.x0;
        st.at[n++] = HB_AT_X0;
    }
    if (st.phase != HB_SHRINKING) {
        // Stepping out: the room split between the open sides, left first.
        const int room = cap - n;
        const int nl = st.left_open ? (st.right_open ? (room + 1) / 2 : room) : 0;
        const int nr = st.right_open ? room - nl : 0;
        double p = st.left;
        for (int i = 0; i < nl && i < st.steps_left && p > st.lower; ++i, p -= st.w) {
            st.t[n] = p;
            st.at[n++] = HB_AT_LEFT;
        }
        p = st.right;
        for (int i = 0; i < nr && i < st.steps_right && p < st.upper; ++i, p += st.w) {
            st.t[n] = p;
            st.at[n++] = HB_AT_RIGHT;
        }
    } else {
        double left = st.left, right = st.right;
        st.collapse_at = -1;
        for (int s = st.shrinks; n < cap && s < SLICE_MAX_SHRINKS; ++s) {
            const double x1 = left + (right - left) * st.rng.uniform();
            st.t[n] = x1;
            st.at[n++] = HB_AT_SHRINK;
            if (x1 < st.x0) left = x1; else right = x1;
            if (right - left <= 2.220446049250313e-16 * fmax(fabs(st.x0), 2.2250738585072014e-308)) {
                st.collapse_at = n - 1;
                break;
            }
        }
    }
    st.nt = n;
}

// The batch's log-densities `f`, in hb_slice's order: the level from x0,
// each side's steps while they stay above it, then the first shrinkage
// proposal above it (or stuck, as hb_slice).
__device__ void hb_slice_consume(HbSliceState& st, const double* f) {
    const int n = st.nt;
    st.nt = 0;
    for (int p = 0; p < n; ++p) {
        const int at = st.at[p];
        if (at == HB_AT_X0) {
            if (st.noncentred && !isfinite(f[p])) {
                st.skip = 1;
                st.phase = HB_DONE;
                return;
            }
            st.y = f[p] + st.logu;
            st.phase = HB_STEPPING;
        } else if (at == HB_AT_LEFT && st.left_open) {
            st.evals += 1;
            if (f[p] > st.y) {
                st.left -= st.w;
                st.steps_left -= 1;
                st.left_open = st.steps_left > 0 && st.left > st.lower;
            } else {
                st.left_open = 0;
            }
        } else if (at == HB_AT_RIGHT && st.right_open) {
            st.evals += 1;
            if (f[p] > st.y) {
                st.right += st.w;
                st.steps_right -= 1;
                st.right_open = st.steps_right > 0 && st.right < st.upper;
            } else {
                st.right_open = 0;
            }
        } else if (at == HB_AT_SHRINK) {
            st.evals += 1;
            if (f[p] > st.y) {
                st.x = st.t[p];
                st.phase = HB_DONE;
                return;
            }
            if (st.t[p] < st.x0) st.left = st.t[p]; else st.right = st.t[p];
            st.shrinks += 1;
            if (p == st.collapse_at || st.shrinks >= SLICE_MAX_SHRINKS) {
                st.stuck = 1;
                st.phase = HB_DONE;
                return;
            }
        }
    }
    if (st.phase == HB_STEPPING && !st.left_open && !st.right_open) {
        st.left = fmax(st.left, st.lower);
        st.right = fmin(st.right, st.upper);
        st.phase = HB_SHRINKING;
    }
}

// Row i's slope in tau_j: x_ij alpha_g, alpha_g = (beta_gj - mu_j) / tau_j
// with `base` = tau_j before the update (beta and mu are unchanged until
// hb_scalar_groups).
__device__ __forceinline__ double hb_nc_tau_slope(const HbArgs& a, const HbGlobal& h, const HbScalar& s, int c, long long i, double base) {
    const int g = a.row_group[i];
    return a.x[(size_t)s.j * a.n + i] * ((a.beta[((size_t)c * a.G + g) * a.K + s.j] - h.mu[c * a.K + s.j]) / base);
}

// The non-centred updates: row i's eta moves by slope x delta, slope =
// x_ij (mu_j) or x_ij alpha_g (tau_j: hb_nc_tau_slope), delta = t - mu_j
// or e^t - tau_j (t - tau_j when `linear`: a Newton step of tau_j). A
// factor's sd_j likewise (factor.rs: interweave_factor): slope w_ij u_lj /
// sd_j, l row i's level, delta e^t - sd_j.
__device__ __forceinline__ double hb_nc_move(const HbArgs& a, const HbGlobal& h, const HbScalar& s, int c, long long i, double t, double base, bool linear) {
    if (s.what == HB_S_NC_SD) {
        const double u = s.fu[((size_t)c * s.fl + s.flevel[i]) * s.fk + s.j];
        return s.fw[i * s.fk + s.j] * (u / base) * (exp(t) - base);
    }
    if (s.what == HB_S_NC_MU) return a.x[(size_t)s.j * a.n + i] * (t - base);
    return hb_nc_tau_slope(a, h, s, c, i, base) * ((linear ? t : exp(t)) - base);
}

// Whether row i's term depends on the scalar (a cut-point: only rows in
// the categories either side of it).
__device__ __forceinline__ bool hb_scalar_uses(const HbArgs& a, const HbScalar& s, long long i) {
    if (s.what != HB_S_CUT) return true;
    const int cat = (int)a.y[i];
    return cat == s.j + 1 || cat == s.j + 2;
}

// Row i's term of the scalar's log-likelihood at t (x0: the value eta and
// the chain's state hold; lgv: the shape's lgamma(e^t), subtracted row by
// row so that large shapes keep their digits), less terms free of t.
__device__ __forceinline__ double hb_scalar_row(const HbArgs& a, const HbGlobal& h, const HbScalar& s, const HbAux& aux, const double* eta, long long i, double t, double x0, double lgv, int c, double base) {
    const double y = a.y[i];
    if (s.what == HB_S_GAMMA) return hb_loglik(y, hb_trials(a.trials, i), eta[i] + h.z[(size_t)i * h.P + s.j] * (t - x0), aux);
    if (s.what >= HB_S_NC_MU) return hb_loglik(y, hb_trials(a.trials, i), eta[i] + hb_nc_move(a, h, s, c, i, t, base, false), aux);
    if (s.what == HB_S_SHAPE) {
        const double v = exp(t);
        return lgamma(y + v) - lgv - y * t - (y + v) * hb_softplus(eta[i] - t);
    }
    return hb_ordinal(y, eta[i], aux.cuts, aux.gaps, aux.ncuts, s.j, t);
}

// The scalar's log prior (with a log scale's Jacobian).
__device__ __forceinline__ double hb_scalar_prior(const HbGlobal& h, const HbScalar& s, double t) {
    if (s.what == HB_S_SHAPE) return hb_scale_prior(h.sigma_kind, h.sigma_scale, h.sigma_rate, exp(t)) + t;
    if (s.what == HB_S_NC_TAU || s.what == HB_S_NC_SD) return hb_scale_prior(h.tau_kind, h.tau_scale, h.tau_rate, exp(t)) + t;
    if (s.what == HB_S_NC_MU) {
        const double z = (t - h.mu_mean) / h.mu_sd;
        return -0.5 * z * z;
    }
    const double z = t / h.gamma_sd;
    return -0.5 * z * z;
}

extern "C" __global__ void hb_scalar_start(HbArgs a, HbGlobal h, HbScalar s, int cap) {
    const int c = blockIdx.x;
    if (threadIdx.x != 0) return;
    HbSliceState& st = *hb_scalar_state(s, c);
    if (s.what == HB_S_GAMMA) {
        st.x0 = h.gamma[c * h.P + s.j];
        st.lower = -HB_INF;
        st.upper = HB_INF;
    } else if (s.what == HB_S_SHAPE) {
        st.x0 = log(h.sigma[c]);
        st.lower = log(h.sigma_floor);
        st.upper = log(h.aux_max);
    } else if (s.what == HB_S_CUT) {
        const double* cuts = a.cuts + (size_t)c * a.ncuts;
        st.x0 = cuts[s.j];
        st.lower = cuts[s.j - 1];
        st.upper = s.j + 1 < a.ncuts ? cuts[s.j + 1] : HB_INF;
    } else if (s.what == HB_S_NC_MU) {
        st.x0 = st.base = h.mu[c * a.K + s.j];
        st.lower = -HB_INF;
        st.upper = HB_INF;
    } else if (s.what == HB_S_NC_TAU) {
        st.base = h.tau[c * a.K + s.j];
        st.x0 = log(st.base);
        st.lower = log(h.tau_floor[s.j]);
        st.upper = log(h.scale_max);
    } else {
        st.base = s.fsd[c * s.fk + s.j];
        st.x0 = log(st.base);
        st.lower = log(s.ffloor);
        st.upper = log(h.scale_max);
    }
    st.noncentred = s.what >= HB_S_NC_MU;
    st.skip = 0;
    st.linear = 0;
#if HB_FAMILY != 4
    if (s.newton) {
        // A Newton step (hb_newton_decide), from the scalar's own stream;
        // tau_j's in tau_j itself (sweep.rs: interweave_with).
        if (s.what == HB_S_NC_TAU) {
            st.x0 = st.base;
            st.lower = h.tau_floor[s.j];
            st.upper = h.scale_max;
            st.linear = 1;
        }
        st.rng = HbRng(a.seed, a.chain0 + c, a.sweep, s.stream);
        st.x = st.t[0] = st.x0;
        st.nt = 1;
        st.phase = HB_NEWTON0;
        st.evals = 1;
        st.stuck = st.shrinks = 0;
        return;
    }
#endif
    // hb_slice's first three numbers: the level, the interval, the split.
    st.rng = HbRng(a.seed, a.chain0 + c, a.sweep, s.stream);
    st.x = st.x0;
    st.w = s.coord >= 0 ? a.widths[(size_t)c * a.ncoord + s.coord] : s.width;
    st.logu = log(st.rng.uniform());
    st.left = st.x0 - st.w * st.rng.uniform();
    st.right = st.left + st.w;
    int j = (int)floor(a.m * st.rng.uniform());
    if (j > a.m - 1) j = a.m - 1;
    st.steps_left = j;
    st.steps_right = a.m - 1 - j;
    st.left_open = st.steps_left > 0 && st.left > st.lower;
    st.right_open = st.steps_right > 0 && st.right < st.upper;
    st.phase = HB_NEED_F0;
    st.y = 0.0;
    st.shrinks = st.evals = st.stuck = 0;
    st.collapse_at = -1;
    hb_slice_plan(st, cap);
}

// Grid (nb, chains): block b's partial sums of rows b x 256 + tid, strided
// by the grid, at each candidate.
extern "C" __global__ void __launch_bounds__(256) hb_scalar_eval(HbArgs a, HbGlobal h, HbScalar s) {
    HB_LOAD_TABLES();
    __shared__ double t[HB_CANDIDATES], lgv[HB_CANDIDATES];
    __shared__ double scratch[32 * HB_CANDIDATES];
    const int c = blockIdx.y;
    const HbSliceState& st = *hb_scalar_state(s, c);
    if (st.phase == HB_DONE) return;
    const int m = st.nt;
    if (threadIdx.x < m) {
        t[threadIdx.x] = st.t[threadIdx.x];
        lgv[threadIdx.x] = s.what == HB_S_SHAPE ? lgamma(exp(st.t[threadIdx.x])) : 0.0;
    }
    const double x0 = st.x0, base = st.base;
    __syncthreads();
    const double* eta = a.eta + (size_t)c * a.n;
    const HbAux aux = hb_aux(a, c);
    double acc[HB_CANDIDATES];
    for (int p = 0; p < m; ++p) acc[p] = 0.0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x) {
        if (!hb_scalar_uses(a, s, i)) continue;
        for (int p = 0; p < m; ++p) acc[p] += hb_scalar_row(a, h, s, aux, eta, i, t[p], x0, lgv[p], c, base);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int p = 0; p < m; ++p) {
        const double v = warp_sum(acc[p]);
        if (lane == 0) scratch[warp * HB_CANDIDATES + p] = v;
    }
    __syncthreads();
    if (threadIdx.x < m) {
        double total = 0.0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += scratch[w * HB_CANDIDATES + threadIdx.x];
        s.partials[((size_t)c * s.nb + blockIdx.x) * HB_CANDIDATES + threadIdx.x] = total;
    }
}

// One block per chain: the batch's sums, consumed; the next batch planned.
// `cap`: the next batch's size (the host's schedule; see gpu/scalar.rs).
extern "C" __global__ void hb_scalar_decide(HbArgs a, HbGlobal h, HbScalar s, int cap) {
    __shared__ double scratch[32];
    __shared__ double f[HB_CANDIDATES];
    const int c = blockIdx.x;
    HbSliceState& st = *hb_scalar_state(s, c);
    if (st.phase == HB_DONE) return;
    const int m = st.nt;
    for (int p = 0; p < m; ++p) {
        double v = 0.0;
        for (int b = threadIdx.x; b < s.nb; b += blockDim.x) v += s.partials[((size_t)c * s.nb + b) * HB_CANDIDATES + p];
        v = block_sum(v, scratch);
        if (threadIdx.x == 0) f[p] = v + hb_scalar_prior(h, s, st.t[p]);
    }
    if (threadIdx.x == 0) {
        hb_slice_consume(st, f);
        if (st.phase != HB_DONE) hb_slice_plan(st, cap);
    }
}

// One block per chain: the slice finished a candidate at a time, then its
// result recorded as hb_global records its own scalars.
extern "C" __global__ void hb_scalar_finish(HbArgs a, HbGlobal h, HbScalar s) {
    HB_LOAD_TABLES();
    __shared__ double scratch[32];
    __shared__ double f[HB_CANDIDATES];
    const int c = blockIdx.x;
    const int tid = threadIdx.x, nt = blockDim.x;
    HbSliceState& st = *hb_scalar_state(s, c);
    const double* eta = a.eta + (size_t)c * a.n;
    const HbAux aux = hb_aux(a, c);
    for (;;) {
        __syncthreads();
        if (st.phase == HB_DONE) break;
        const int m = st.nt;
        const double x0 = st.x0, base = st.base;
        for (int p = 0; p < m; ++p) {
            const double t = st.t[p], lgv = s.what == HB_S_SHAPE ? lgamma(exp(t)) : 0.0;
            double v = 0.0;
            for (long long i = tid; i < a.n; i += nt)
                if (hb_scalar_uses(a, s, i)) v += hb_scalar_row(a, h, s, aux, eta, i, t, x0, lgv, c, base);
            v = block_sum(v, scratch);
            if (tid == 0) f[p] = v + hb_scalar_prior(h, s, t);
        }
        if (tid == 0) {
            hb_slice_consume(st, f);
            if (st.phase != HB_DONE) hb_slice_plan(st, 1);
        }
    }
    if (tid != 0) return;
    double* w = a.widths + (size_t)c * a.ncoord;
    double* moved = a.moved + (size_t)c * a.ncoord;
    if (s.what >= HB_S_NC_MU) {
        // As sweep.rs's non_centred_step: no move when x0's density is not
        // finite (then nothing is counted), when stuck (not counted: the
        // centred update still moves) or when the slice stayed.
        if (!st.skip) atomicAdd(&a.counters[2], (unsigned long long)(st.evals + 1));
        if (st.skip || st.stuck || !isfinite(st.x)) st.x = st.x0;
        double* value = s.what == HB_S_NC_MU ? &h.mu[c * a.K + s.j] : s.what == HB_S_NC_TAU ? &h.tau[c * a.K + s.j] : &s.fsd[c * s.fk + s.j];
        if (st.x != st.x0) {
            *value = s.what == HB_S_NC_MU || st.linear ? st.x : exp(st.x);
            // (tau_j's width is on the log scale, as sweep.rs's.)
            if (a.adapting && s.coord >= 0) moved[s.coord] += st.linear ? fabs(log(st.x) - log(st.x0)) : fabs(st.x - st.x0);
        }
        if (a.adapt_now && s.coord >= 0) hb_adapt_width(a, w, moved, s.coord);
        if (h.draw_index >= 0) h.draws[((size_t)c * h.kept + h.draw_index) * h.params + s.draw_at] = *value;
        return;
    }
    const double x = st.x;
    if (s.what == HB_S_GAMMA) h.gamma[c * h.P + s.j] = x;
    else if (s.what == HB_S_SHAPE) h.sigma[c] = exp(x);
    else {
        // The cut-point, and the gaps of the categories either side.
        double* cuts = a.cuts + (size_t)c * a.ncuts;
        double* gaps = a.gaps + (size_t)c * a.ncuts;
        cuts[s.j] = x;
        gaps[s.j - 1] = log(-expm1(cuts[s.j - 1] - x));
        if (s.j + 1 < a.ncuts) gaps[s.j] = log(-expm1(x - cuts[s.j + 1]));
    }
    atomicAdd(&a.counters[s.what == HB_S_GAMMA ? 1 : 2], (unsigned long long)(st.evals + 1));
    const size_t at = (size_t)c * a.ncoord + s.coord;
    if (st.stuck) {
        atomicAdd(&a.counters[3], 1ull);
        a.stuck_by[at] += 1;
    }
    if (a.adapting) moved[s.coord] += fabs(x - st.x0);
    if (a.adapt_now) hb_adapt_width(a, w, moved, s.coord);
    // The shape as phi; a cut-point as brms's, theta_j - mu_1.
    if (h.draw_index >= 0 && s.draw_at >= 0)
        h.draws[((size_t)c * h.kept + h.draw_index) * h.params + s.draw_at] = s.what == HB_S_SHAPE ? exp(x) : x - h.mu[c * a.K];
}

// The non-centred mu_j's and tau_j's Newton steps (core/src/gibbs/newton.rs):
// eta is linear in each, so the log-likelihood is concave in it for every
// family but the ordinal, and from x0 the proposal is N(x0 - f'/f'',
// -1/f''), accepted by Metropolis-Hastings with the reverse proposal built
// the same way at the candidate. Queued as hb_scalar_start,
// (hb_newton_eval, hb_newton_decide) at x0 and at the candidate, then
// hb_scalar_finish, apply and groups as for a slice update: two passes
// over the rows instead of a slice's batches (33 candidates in four
// rounds).
//
// Grid (nb, chains): block b's partial sums of rows b x 256 + tid, strided
// by the grid, of (f, f' v, f'' v^2) at t[0], v row i's slope (x_ij, or
// x_ij alpha_g for tau_j).
extern "C" __global__ void __launch_bounds__(256) hb_newton_eval(HbArgs a, HbGlobal h, HbScalar s) {
    HB_LOAD_TABLES();
#if HB_FAMILY != 4
    __shared__ double scratch[32 * 3];
    const int c = blockIdx.y;
    const HbSliceState& st = *hb_scalar_state(s, c);
    if (st.phase != HB_NEWTON0 && st.phase != HB_NEWTON1) return;
    const double d = st.t[0] - st.base;
    const double* eta = a.eta + (size_t)c * a.n;
    const HbAux aux = hb_aux(a, c);
    const bool tau = s.what == HB_S_NC_TAU;
    double acc[3] = {0.0, 0.0, 0.0};
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x) {
        const double x = tau ? hb_nc_tau_slope(a, h, s, c, i, st.base) : a.x[(size_t)s.j * a.n + i];
        double d1, d2;
        acc[0] += hb_loglik_curve(a.y[i], hb_trials(a.trials, i), eta[i] + x * d, aux, d1, d2);
        acc[1] += d1 * x;
        acc[2] += d2 * x * x;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int p = 0; p < 3; ++p) {
        const double v = warp_sum(acc[p]);
        if (lane == 0) scratch[warp * 3 + p] = v;
    }
    __syncthreads();
    if (threadIdx.x < 3) {
        double total = 0.0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += scratch[w * 3 + threadIdx.x];
        s.partials[((size_t)c * s.nb + blockIdx.x) * HB_CANDIDATES + threadIdx.x] = total;
    }
#endif
}

// One block per chain: the sums with the scalar's prior; at x0 the
// candidate is drawn, at the candidate it is accepted or not (newton.rs:
// newton_step). No proposal (a value not finite, a curvature not negative)
// leaves the scalar; a candidate outside tau_j's bounds is refused (the
// target is zero there).
extern "C" __global__ void hb_newton_decide(HbArgs a, HbGlobal h, HbScalar s) {
#if HB_FAMILY != 4
    __shared__ double scratch[32];
    __shared__ double sums[3];
    const int c = blockIdx.x;
    HbSliceState& st = *hb_scalar_state(s, c);
    if (st.phase != HB_NEWTON0 && st.phase != HB_NEWTON1) return;
    for (int p = 0; p < 3; ++p) {
        double v = 0.0;
        for (int b = threadIdx.x; b < s.nb; b += blockDim.x) v += s.partials[((size_t)c * s.nb + b) * HB_CANDIDATES + p];
        v = block_sum(v, scratch);
        if (threadIdx.x == 0) sums[p] = v;
    }
    if (threadIdx.x != 0) return;
    const double t = st.t[0];
    double f = sums[0], d1 = sums[1], d2 = sums[2];
    if (st.linear) {
        double p1, p2;
        f += hb_scale_prior_curve(h.tau_kind, h.tau_scale, h.tau_rate, t, p1, p2);
        d1 += p1;
        d2 += p2;
    } else {
        const double inv_var = 1.0 / (h.mu_sd * h.mu_sd);
        f += hb_scalar_prior(h, s, t);
        d1 -= (t - h.mu_mean) * inv_var;
        d2 -= inv_var;
    }
    const double mean = t - d1 / d2, var = -1.0 / d2;
    const bool ok = isfinite(f) && isfinite(mean) && d2 < 0.0 && var > 0.0 && isfinite(var);
    if (st.phase == HB_NEWTON0) {
        st.phase = HB_DONE;
        if (!ok) return;
        const double x1 = mean + sqrt(var) * st.rng.normal();
        if (!isfinite(x1) || x1 < st.lower || x1 > st.upper) return;
        st.nf = f;
        st.nmean = mean;
        st.nvar = var;
        st.t[0] = x1;
        st.phase = HB_NEWTON1;
        return;
    }
    st.phase = HB_DONE;
    if (!ok) return;
    const double x0 = st.x0;
    const double back = -0.5 * ((x0 - mean) * (x0 - mean) / var + log(var));
    const double fore = -0.5 * ((t - st.nmean) * (t - st.nmean) / st.nvar + log(st.nvar));
    if (log(st.rng.uniform()) < f - st.nf + back - fore) st.x = t;
#endif
}

// gamma_j's or a non-centred update's move into eta, over the grid (nb,
// chains); before hb_scalar_groups (tau_j's slopes read the old beta).
extern "C" __global__ void hb_scalar_apply(HbArgs a, HbGlobal h, HbScalar s) {
    const int c = blockIdx.y;
    const HbSliceState& st = *hb_scalar_state(s, c);
    const double d = st.x - st.x0;
    if (d == 0.0) return;
    double* eta = a.eta + (size_t)c * a.n;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x)
        eta[i] += s.what == HB_S_GAMMA ? h.z[(size_t)i * h.P + s.j] * d : hb_nc_move(a, h, s, c, i, st.x, st.base, st.linear);
}

// A non-centred update's move of every group's beta_gj (a thread per
// group, grid (groups / 256, chains)), or of every level's u_lj (a factor's
// sd_j: a thread per level), and of their kept draws.
extern "C" __global__ void hb_scalar_groups(HbArgs a, HbGlobal h, HbScalar s) {
    const int c = blockIdx.y;
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const HbSliceState& st = *hb_scalar_state(s, c);
    if (st.x == st.x0) return;
    if (s.what == HB_S_NC_SD) {
        if (g >= s.fl) return;
        double& u = s.fu[((size_t)c * s.fl + g) * s.fk + s.j];
        u = exp(st.x) * (u / st.base);
        // The factor's draws: L x KF effects, then the KF sds (draw_at is sd_j's).
        if (h.draw_index >= 0) h.draws[((size_t)c * h.kept + h.draw_index) * h.params + s.draw_at - (size_t)s.fl * s.fk - s.j + (size_t)g * s.fk + s.j] = u;
        return;
    }
    if (g >= a.G) return;
    double& b = a.beta[((size_t)c * a.G + g) * a.K + s.j];
    if (s.what == HB_S_NC_MU) {
        b += st.x - st.x0;
    } else {
        const double mu = h.mu[c * a.K + s.j];
        b = mu + (st.linear ? st.x : exp(st.x)) * ((b - mu) / st.base);
    }
    if (h.draw_index >= 0) h.draws[((size_t)c * h.kept + h.draw_index) * h.params + (size_t)g * a.K + s.j] = b;
}

// ---------------------------------------------------------------------------
// Grouping factors besides the groups (core/src/gibbs/factor.rs): the
// `(1 | week)` of `(1 + x | store) + (1 | week)`. A factor's effects have
// mean zero and independent sds, or a full covariance (`cov`, `prec`: its
// terms correlated, `(1 + x | week)`); its levels own rows scattered through the
// data (listed level by level in `rows`), so each (chain, level) gathers
// them. Launched after the groups' kernels, before gamma and hb_global.
// ---------------------------------------------------------------------------

struct HbFactor {
    const int* start;     // L + 1 offsets into rows
    const int* rows;      // row indices, level by level
    const double* w;      // n x KF, row-major: the terms' columns
    double* u;            // chains x L x KF effects
    double* sd;           // chains x KF
    const double* floor;  // KF floors of the sds
    const int* partner;   // KF (kind, index): 0 none, 1 the groups' column, 2 a global column
    double* cov;          // correlated terms: chains x KF x KF Sigma_f, or NULL (independent)
    double* prec;         //   and its inverse
    double cov_df, cov_s0;  //   inverse-Wishart(df, s0 I), s0 = df scale^2
    int L, KF;
    int coord;            // sweep coordinate of level 0's first effect; the sds follow the effects
    int rng_base;         // random stream of level 0; rng_base + L: the sds and the shift
    int draw_at;          // the factor's first parameter in a draw
    double lkj_eta;       // > 0: Sigma_f's prior is LKJ(eta) with the sds under tau's, not the inverse-Wishart
};

// The coordinate-wise slice updates of level l of chain c, as
// hb_update_group with rows gathered through f.rows and prior N(0, sd^2)
// (correlated: N(centre, 1 / P_jj) given the level's other effects, with
// mean zero).
template <class R>
__device__ void hb_update_level(const HbArgs& a, const HbFactor& f, int c, int l, int lane, int nthreads, R& reduce) {
    const int r0 = f.start[l], r1 = f.start[l + 1];
    const int K = f.KF;
    double* eta = a.eta + (size_t)c * a.n;
    double* u = f.u + ((size_t)c * f.L + l) * K;
    const HbAux aux = hb_aux(a, c);
    HbRng rng(a.seed, a.chain0 + c, a.sweep, f.rng_base + l);
    int jc = 0;
    double b0 = 0.0, centre = 0.0, inv_sd = 1.0;
    // Correlated: this level's effects, as every lane has them.
    const double* P = f.prec ? f.prec + (size_t)c * K * K : nullptr;
    double ul[HB_KMAX];
    if (P) for (int j = 0; j < K; ++j) ul[j] = u[j];
    auto lik = [&](double d) -> double {
        double s = 0.0;
        for (int r = r0 + lane; r < r1; r += nthreads) {
            const int i = f.rows[r];
            s += hb_loglik(a.y[i], hb_trials(a.trials, i), eta[i] + f.w[(size_t)i * K + jc] * d, aux);
        }
        return reduce(s);
    };
    auto post = [&](double v) -> double {
        const double z = (v - centre) * inv_sd;
        return lik(v - b0) - 0.5 * z * z;
    };
    double L = lik(0.0);
    long long evals = 1, stuck = 0;
    const size_t base = (size_t)c * a.ncoord + f.coord + (size_t)l * K;
    for (int j = 0; j < K; ++j) {
        jc = j;
        b0 = u[j];
        if (P) {
            const double pjj = P[j * K + j];
            double pull = 0.0;
            for (int q = 0; q < K; ++q)
                if (q != j) pull += P[j * K + q] * ul[q];
            centre = -pull / pjj;
            inv_sd = sqrt(pjj);
        } else {
            inv_sd = 1.0 / f.sd[c * K + j];
        }
        const double z0 = (b0 - centre) * inv_sd;
        const HbStep st = hb_slice(b0, L - 0.5 * z0 * z0, post, a.widths[base + j], a.m, -HB_INF, HB_INF, rng);
        evals += st.evals;
        stuck += st.stuck;
        if (lane == 0 && st.stuck) a.stuck_by[base + j] += 1;
        const double delta = st.x - b0;
        if (delta != 0.0) {
            for (int r = r0 + lane; r < r1; r += nthreads) {
                const int i = f.rows[r];
                eta[i] += f.w[(size_t)i * K + j] * delta;
            }
            const double z1 = (st.x - centre) * inv_sd;
            L = st.logf + 0.5 * z1 * z1;
            if (lane == 0) u[j] = st.x;
            if (P) ul[j] = st.x;
        }
        if (lane == 0 && a.adapting) a.moved[base + j] += fabs(delta);
    }
    if (lane == 0) {
        if (a.adapt_now) {
            for (int j = 0; j < K; ++j) {
                const double target = a.adapt_factor * a.moved[base + j] / a.adapt_window;
                if (isfinite(target) && target > 0.0) a.widths[base + j] = sqrt(a.widths[base + j] * target);
                a.moved[base + j] = 0.0;
            }
        }
        atomicAdd(&a.counters[0], (unsigned long long)evals);
        if (stuck) atomicAdd(&a.counters[3], (unsigned long long)stuck);
    }
}

// (chain, level) pairs, a warp each.
extern "C" __global__ void hb_levels_warp(HbArgs a, HbFactor f, int chains) {
    HB_LOAD_TABLES();
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long item = t / 32;
    if (item >= (long long)f.L * chains) return;  // whole warps leave together
    const int c = (int)(item / f.L), l = (int)(item % f.L);
    auto reduce = [&](double v) { return tile_sum(v, FULL_MASK, 32); };
    hb_update_level(a, f, c, l, (int)(t % 32), 32, reduce);
}

// One block per (chain, level): levels with many rows.
extern "C" __global__ void hb_levels_block(HbArgs a, HbFactor f) {
    HB_LOAD_TABLES();
    __shared__ double scratch[32];
    const int c = blockIdx.x / f.L, l = blockIdx.x % f.L;
    auto reduce = [&](double v) { return block_sum(v, scratch); };
    hb_update_level(a, f, c, l, threadIdx.x, blockDim.x, reduce);
}

// One block per chain: each sd (slice on log sd under the prior of tau;
// correlated: Sigma_f | u ~ inverse-Wishart(df + L, s0 I + sum_l u_l u_l')
// exactly, or under LKJ by hb_lkj_draw), then the exact shift of each term with a partner column
// against it (as factor.rs: every effect falls by c, the partner rises by
// c, with mu's or a global coefficient's prior), then the factor's part
// of the draw.
extern "C" __global__ void hb_factor_global(HbArgs a, HbGlobal h, HbFactor f) {
    __shared__ double scratch[32];
    const int c = blockIdx.x;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int K = f.KF, L = f.L;
    double* u = f.u + (size_t)c * L * K;
    double* sd = f.sd + (size_t)c * K;
    double* w = a.widths + (size_t)c * a.ncoord;
    double* moved = a.moved + (size_t)c * a.ncoord;
    HbRng rng(a.seed, a.chain0 + c, a.sweep, f.rng_base + L);
    long long scale_evals = 0, stuck = 0;
    double* S = f.cov ? f.cov + (size_t)c * K * K : nullptr;
    double* Q = f.prec ? f.prec + (size_t)c * K * K : nullptr;
    if (S) {
        double sm[HB_KMAX * HB_KMAX], pr[HB_KMAX * HB_KMAX];
        for (int i = 0; i < K; ++i)
            for (int j = 0; j <= i; ++j) {
                double s = 0.0;
                for (int l = tid; l < L; l += nt) s += u[(size_t)l * K + i] * u[(size_t)l * K + j];
                const double v = block_sum(s, scratch) + (i == j ? f.cov_s0 : 0.0);
                sm[i * K + j] = v;
                sm[j * K + i] = v;
            }
        const bool ok = f.lkj_eta > 0.0 ? hb_lkj_sweep(a, h, c, S, sm, pr, K, L, f.lkj_eta, f.coord + L * K, f.floor, rng, scale_evals, stuck)
                                        : hb_draw_inverse_wishart(f.cov_df + L, sm, pr, K, rng);
        __syncthreads();
        if (ok) {
            if (tid == 0) {
                for (int i = 0; i < K * K; ++i) {
                    S[i] = sm[i];
                    Q[i] = pr[i];
                }
                for (int j = 0; j < K; ++j) sd[j] = sqrt(sm[j * K + j]);
            }
        } else {
            stuck += K;
            if (tid == 0)
                for (int j = 0; j < K; ++j) a.stuck_by[(size_t)c * a.ncoord + f.coord + L * K + j] += 1;
        }
        __syncthreads();
    } else if (h.tau_kind != 2) {
        for (int j = 0; j < K; ++j) {
            double s = 0.0;
            for (int l = tid; l < L; l += nt) s += u[(size_t)l * K + j] * u[(size_t)l * K + j];
            const double ss = block_sum(s, scratch);
            auto logf = [&](double v) -> double {
                return hb_scale_prior(h.tau_kind, h.tau_scale, h.tau_rate, exp(v)) + (1.0 - L) * v - 0.5 * ss * exp(-2.0 * v);
            };
            const int idx = f.coord + L * K + j;
            const double v0 = log(sd[j]);
            const HbStep st = hb_slice(v0, logf(v0), logf, w[idx], a.m, log(f.floor[j]), log(h.scale_max), rng);
            scale_evals += st.evals + 1;
            stuck += st.stuck;
            if (tid == 0 && st.stuck) a.stuck_by[(size_t)c * a.ncoord + idx] += 1;
            __syncthreads();
            if (tid == 0) {
                sd[j] = exp(st.x);
                if (a.adapting) moved[idx] += fabs(st.x - v0);
            }
            __syncthreads();
        }
    }
    for (int j = 0; j < K; ++j) {
        const int kind = f.partner[2 * j], q = f.partner[2 * j + 1];
        if (kind == 0) continue;
        // Row j of Sigma_f^-1 (diag(1 / sd^2) when independent) times the
        // effects' sums over the levels.
        double qjj, qu = 0.0;
        for (int i = 0; i < K; ++i) {
            if (!Q && i != j) continue;
            double s = 0.0;
            for (int l = tid; l < L; l += nt) s += u[(size_t)l * K + i];
            const double sum = block_sum(s, scratch);
            qu += (Q ? Q[j * K + i] : 1.0 / (sd[j] * sd[j])) * sum;
        }
        qjj = Q ? Q[j * K + j] : 1.0 / (sd[j] * sd[j]);
        const double av = kind == 1 ? h.mu[c * a.K + q] : h.gamma[c * h.P + q];
        const double m = kind == 1 ? h.mu_mean : 0.0, sp = kind == 1 ? h.mu_sd : h.gamma_sd;
        const double prec = L * qjj + 1.0 / (sp * sp);
        const double mean = (qu - (av - m) / (sp * sp)) / prec;
        const double shift = mean + rng.normal() / sqrt(prec);
        __syncthreads();
        if (isfinite(shift)) {
            for (int l = tid; l < L; l += nt) u[(size_t)l * K + j] -= shift;
            if (kind == 1) {
                for (int g = tid; g < a.G; g += nt) a.beta[((size_t)c * a.G + g) * a.K + q] += shift;
                if (tid == 0) h.mu[c * a.K + q] += shift;
            } else if (tid == 0) {
                h.gamma[c * h.P + q] += shift;
            }
        }
        __syncthreads();
    }
    if (tid == 0) {
        atomicAdd(&a.counters[2], (unsigned long long)scale_evals);
        if (stuck) atomicAdd(&a.counters[3], (unsigned long long)stuck);
    }
    if (h.draw_index >= 0) {
        double* out = h.draws + ((size_t)c * h.kept + h.draw_index) * h.params + f.draw_at;
        for (int i = tid; i < L * K; i += nt) out[i] = u[i];
        if (tid == 0) {
            for (int j = 0; j < K; ++j) out[L * K + j] = sd[j];
            // Correlated: pairs (0,1), (0,2), ..., (1,2), ...
            if (S) {
                int at = L * K + K;
                for (int i = 0; i < K; ++i)
                    for (int j = i + 1; j < K; ++j) out[at++] = S[i * K + j] / sqrt(S[i * K + i] * S[j * K + j]);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The kept draws in the host's (R's) order, for a check or the result:
// parameters [q0, q0 + count / (chains now)) of the draws buffer (chain c's
// draw i at (c cap + i) params, core/src/gibbs/gpu/draws.rs) as draw
// fastest, then chain, then parameter. Writes are coalesced; each read
// takes a sector for one value, a few milliseconds per gigabyte.
// ---------------------------------------------------------------------------

extern "C" __global__ void hb_draws_order(const double* draws, long long params, long long cap, int now, int chains,
                                          long long q0, long long count, double* out) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < count; k += (long long)gridDim.x * blockDim.x) {
        const long long i = k % now, rest = k / now;
        const long long c = rest % chains, q = q0 + rest / chains;
        out[k] = draws[(c * cap + i) * params + q];
    }
}
