// Convergence diagnostics on the device (core/src/gibbs/gpu/diagnostics.rs):
// the rank-normalised split R-hat, bulk ESS and tail ESS of every parameter,
// as core/src/gibbs/diagnostics.rs computes them (Vehtari et al. 2021, the
// `posterior` package's definitions), so that a target run's checks need
// not bring the draws back to the host.
//
// One block of DG_THREADS threads per parameter (grid-stride). A parameter's
// draws (chains x n, draw fastest, as hb_draws_order lays them out) are
// sorted once with their places among the split chains (bitonic, padded to
// a power of two with +inf); that order gives
//   - the median and the 5% and 95% quantiles (type 7, every draw);
//   - the bulk's ranks: a run of equal values shares the mean of its ranks,
//     and the ranks count only the split chains' draws (an odd n drops each
//     chain's middle draw: the values of those few are kept in `mid`, so a
//     rank is a position less the dropped draws below it);
//   - the tail indicators I(x <= q), read straight off the values.
// The folded draws |x - median| are then sorted again for their ranks.
// ESS is Geyer's initial monotone sequence, its autocovariances summed by
// the block DG_LAGS lags at a time, only as far as the sequence needs.
//
// Working arrays, in dynamic shared memory when they fit, else in `scratch`
// (global, `stride` doubles per block; the same code through generic
// pointers): key[P], z[L], rho[max(n/2, 2)], cm[2 chains], cv[2 chains],
// mid[chains] as doubles, then place[P] as ints (diagnostics.rs sizes them).

#define DG_THREADS 256
#define DG_WARPS (DG_THREADS / 32)
#define DG_LAGS 8
#define DG_DROPPED (-1)
#define DG_INF __longlong_as_double(0x7ff0000000000000LL)
#define DG_NAN __longlong_as_double(0x7ff8000000000000LL)
#define DG_EPS 2.220446049250313e-16

// A block's partial sums: a slot per warp and value, then the totals.
__shared__ double dg_red[DG_WARPS * DG_LAGS + DG_LAGS];

// Inverse of the standard normal distribution function: the host's qnorm
// (Acklam's approximation), the same operations.
__device__ double dg_qnorm(double p) {
    if (!(p > 0.0 && p < 1.0)) return p == 0.0 ? -DG_INF : (p == 1.0 ? DG_INF : DG_NAN);
    const double a0 = -3.969683028665376e1, a1 = 2.209460984245205e2, a2 = -2.759285104469687e2, a3 = 1.383577518672690e2, a4 = -3.066479806614716e1, a5 = 2.506628277459239;
    const double b0 = -5.447609879822406e1, b1 = 1.615858368580409e2, b2 = -1.556989798598866e2, b3 = 6.680131188771972e1, b4 = -1.328068155288572e1;
    const double c0 = -7.784894002430293e-3, c1 = -3.223964580411365e-1, c2 = -2.400758277161838, c3 = -2.549732539343734, c4 = 4.374664141464968, c5 = 2.938163982698783;
    const double d0 = 7.784695709041462e-3, d1 = 3.224671290700398e-1, d2 = 2.445134137142996, d3 = 3.754408661907416;
    const double low = 0.02425;
    if (p < low) {
        const double q = sqrt(-2.0 * log(p));
        return (((((c0 * q + c1) * q + c2) * q + c3) * q + c4) * q + c5) / ((((d0 * q + d1) * q + d2) * q + d3) * q + 1.0);
    }
    if (p <= 1.0 - low) {
        const double q = p - 0.5, r = q * q;
        return (((((a0 * r + a1) * r + a2) * r + a3) * r + a4) * r + a5) * q / (((((b0 * r + b1) * r + b2) * r + b3) * r + b4) * r + 1.0);
    }
    const double q = sqrt(-2.0 * log(1.0 - p));
    return -(((((c0 * q + c1) * q + c2) * q + c3) * q + c4) * q + c5) / ((((d0 * q + d1) * q + d2) * q + d3) * q + 1.0);
}

// The block's totals of each thread's v[0..count), in dg_red[DG_WARPS *
// DG_LAGS + i] for every thread to read (until the next call).
__device__ void dg_block_sums(const double* v, int count) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int i = 0; i < count; ++i) {
        double s = v[i];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) dg_red[warp * DG_LAGS + i] = s;
    }
    __syncthreads();
    if (threadIdx.x < count) {
        double s = 0.0;
        for (int w = 0; w < DG_WARPS; ++w) s += dg_red[w * DG_LAGS + threadIdx.x];
        dg_red[DG_WARPS * DG_LAGS + threadIdx.x] = s;
    }
    __syncthreads();
}

// One value computed by thread 0 handed to every thread.
__device__ double dg_broadcast(double v) {
    __syncthreads();
    if (threadIdx.x == 0) dg_red[DG_WARPS * DG_LAGS] = v;
    __syncthreads();
    const double r = dg_red[DG_WARPS * DG_LAGS];
    __syncthreads();
    return r;
}

// Sort key[0..P) ascending, carrying place[] (P a power of two).
__device__ void dg_sort(double* key, int* place, int P) {
    for (int k = 2; k <= P; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < P / 2; t += DG_THREADS) {
                const int i = 2 * j * (t / j) + t % j, l = i + j;
                const bool up = (i & k) == 0;
                const double a = key[i], b = key[l];
                if ((a > b) == up) {
                    key[i] = b;
                    key[l] = a;
                    const int pi = place[i];
                    place[i] = place[l];
                    place[l] = pi;
                }
            }
            __syncthreads();
        }
    }
}

// First index in key[0..S) whose value is > v (upper) or >= v (lower).
__device__ int dg_bound(const double* key, int S, double v, bool upper) {
    int lo = 0, hi = S;
    while (lo < hi) {
        const int m = (lo + hi) / 2;
        if (upper ? key[m] <= v : key[m] < v) lo = m + 1; else hi = m;
    }
    return lo;
}

// z[place] = qnorm((r - 3/8) / (L + 1/4)) for every split-chain draw of the
// sorted key[0..S), r its rank among the L split-chain draws (1-based, ties
// averaged); `mid` holds the dropped middle draws (ndropped of them), to be
// transformed by `fold` (|x - median| when folding) like the keys already were.
__device__ void dg_ranks(const double* key, const int* place, int S, int L, const double* mid, int ndropped, bool fold, double median, double* z) {
    const double s = (double)L;
    for (int pos = threadIdx.x; pos < S; pos += DG_THREADS) {
        const int q = place[pos];
        if (q == DG_DROPPED) continue;
        const double v = key[pos];
        const bool tied = (pos > 0 && key[pos - 1] == v) || (pos + 1 < S && key[pos + 1] == v);
        const int lo = tied ? dg_bound(key, S, v, false) : pos, hi = tied ? dg_bound(key, S, v, true) : pos + 1;
        int below = 0, at_or_below = 0;
        for (int c = 0; c < ndropped; ++c) {
            const double m = fold ? fabs(mid[c] - median) : mid[c];
            below += m < v;
            at_or_below += m <= v;
        }
        const int i = lo - below, j = hi - at_or_below - 1;
        z[q] = dg_qnorm(((double)(i + j) / 2.0 + 1.0 - 0.375) / (s + 0.25));
    }
    __syncthreads();
}

// Mean and variance of each of the m chains of length n in x.
__device__ void dg_chain_stats(const double* x, int n, int m, double* cm, double* cv) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int c = warp; c < m; c += DG_WARPS) {
        const double* v = x + (long long)c * n;
        double s = 0.0;
        for (int t = lane; t < n; t += 32) s += v[t];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        const double mu = s / n;
        double ss = 0.0;
        for (int t = lane; t < n; t += 32) ss += (v[t] - mu) * (v[t] - mu);
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) {
            cm[c] = mu;
            cv[c] = ss / (n - 1.0);
        }
    }
    __syncthreads();
}

// Sample variance of v[0..m) (thread-local).
__device__ double dg_var(const double* v, int m) {
    double s = 0.0;
    for (int i = 0; i < m; ++i) s += v[i];
    const double mu = s / m;
    double ss = 0.0;
    for (int i = 0; i < m; ++i) ss += (v[i] - mu) * (v[i] - mu);
    return ss / (m - 1.0);
}

// Split R-hat of the m chains of length n in x (the host's rhat_basic).
__device__ double dg_rhat(const double* x, int n, int m, double* cm, double* cv) {
    dg_chain_stats(x, n, m, cm, cv);
    double r = 0.0;
    if (threadIdx.x == 0) {
        double within = 0.0;
        for (int c = 0; c < m; ++c) within += cv[c];
        within /= m;
        const double nf = n, between = nf * dg_var(cm, m);
        r = sqrt((between / within + nf - 1.0) / nf);
    }
    return dg_broadcast(r);
}

// Mean over the m chains of the biased autocovariances at lags lag0 ..
// lag0 + DG_LAGS - 1, into out.
__device__ void dg_acov(const double* x, int n, int m, const double* cm, int lag0, double* out) {
    double acc[DG_LAGS];
    for (int l = 0; l < DG_LAGS; ++l) acc[l] = 0.0;
    for (int e = threadIdx.x; e < m * n; e += DG_THREADS) {
        const int c = e / n, t = e - c * n;
        const double a = x[e] - cm[c];
#pragma unroll
        for (int l = 0; l < DG_LAGS; ++l)
            if (t + lag0 + l < n) acc[l] += a * (x[e + lag0 + l] - cm[c]);
    }
    dg_block_sums(acc, DG_LAGS);
    for (int l = 0; l < DG_LAGS; ++l) out[l] = dg_red[DG_WARPS * DG_LAGS + l] / n / m;
    __syncthreads();
}

// ESS of the m chains of length n in x (the host's ess_flat): Geyer's
// initial monotone sequence. rho holds n values.
__device__ double dg_ess(const double* x, int n, int m, double* cm, double* cv, double* rho) {
    if (n < 3) return DG_NAN;
    dg_chain_stats(x, n, m, cm, cv);
    double cache[DG_LAGS];
    int base = -2 * DG_LAGS;
    // Every thread runs this loop alike (the sums are the block's).
    auto acov = [&](int lag) -> double {
        if (lag >= n) return 0.0;
        if (lag < base || lag >= base + DG_LAGS) {
            dg_acov(x, n, m, cm, lag, cache);
            base = lag;
        }
        return cache[lag - base];
    };
    const double nf = n;
    const double mean_var = acov(0) * nf / (nf - 1.0);
    double var_plus = mean_var * (nf - 1.0) / nf;
    if (m > 1) var_plus += dg_var(cm, m);
    auto rho_at = [&](int lag) { return 1.0 - (mean_var - acov(lag)) / var_plus; };
    const bool lead = threadIdx.x == 0;
    int t = 0;
    double even = 1.0, odd = rho_at(1);
    if (lead) {
        rho[0] = even;
        rho[1] = odd;
    }
    while (t + 5 < n && isfinite(even + odd) && even + odd > 0.0) {
        t += 2;
        even = rho_at(t);
        odd = rho_at(t + 1);
        if (lead) {
            const bool keep = even + odd >= 0.0;
            rho[t] = keep ? even : 0.0;
            rho[t + 1] = keep ? odd : 0.0;
        }
    }
    double ess = 0.0;
    if (lead) {
        const int max_t = t;
        if (even > 0.0) rho[max_t] = even;
        for (int u = 0; u + 4 <= max_t;) {
            u += 2;
            if (rho[u] + rho[u + 1] > rho[u - 2] + rho[u - 1]) {
                rho[u] = (rho[u - 2] + rho[u - 1]) / 2.0;
                rho[u + 1] = rho[u];
            }
        }
        double head = 0.0;
        if (max_t == 0) head = rho[0];
        else for (int u = 0; u < max_t; ++u) head += rho[u];
        const double total = (double)m * n;
        const double tau = fmax(-1.0 + 2.0 * head + rho[max_t], 1.0 / log10(total));
        ess = total / tau;
    }
    return dg_broadcast(ess);
}

// out: rhat[count], then bulk ESS[count], then tail ESS[count].
extern "C" __global__ void __launch_bounds__(DG_THREADS) mcmc_diagnostics(const double* draws, int n, int chains, long long count, int P,
                                                                         double* scratch, long long stride, double* out) {
    extern __shared__ double sm[];
    double* key = scratch ? scratch + blockIdx.x * stride : sm;
    const int S = chains * n, half = n / 2, second = (n + 1) / 2, L = 2 * chains * half;
    double* z = key + P;
    double* rho = z + (L > 1 ? L : 1);
    double* cm = rho + (half > 2 ? half : 2);
    double* cv = cm + 2 * chains;
    double* mid = cv + 2 * chains;
    int* place = (int*)(mid + chains);
    const int ndropped = n % 2 == 1 ? chains : 0;
    for (long long q = blockIdx.x; q < count; q += gridDim.x) {
        const double* x = draws + q * S;
        const double first = x[0];
        double flags[2] = {0.0, 0.0};  // any non-finite, any different from the first
        for (int t = threadIdx.x; t < P; t += DG_THREADS) {
            if (t < S) {
                const double v = x[t];
                const int c = t / n, i = t - c * n;
                key[t] = v;
                place[t] = i < half ? 2 * c * half + i : (i >= second ? (2 * c + 1) * half + i - second : DG_DROPPED);
                if (!isfinite(v)) flags[0] = 1.0;
                if (fabs(v - first) > DG_EPS * fmax(fabs(first), 1.0)) flags[1] = 1.0;
            } else {
                key[t] = DG_INF;
                place[t] = DG_DROPPED;
            }
        }
        for (int c = threadIdx.x; c < ndropped; c += DG_THREADS) mid[c] = x[c * n + half];
        dg_block_sums(flags, 2);
        const bool degenerate = dg_red[DG_WARPS * DG_LAGS] > 0.0 || dg_red[DG_WARPS * DG_LAGS + 1] == 0.0;
        __syncthreads();
        double rhat = DG_NAN, bulk = DG_NAN, tail = DG_NAN;
        if (!degenerate && n >= 2) {
            dg_sort(key, place, P);
            const double median = S % 2 == 1 ? key[S / 2] : 0.5 * (key[S / 2 - 1] + key[S / 2]);
            dg_ranks(key, place, S, L, mid, ndropped, false, 0.0, z);
            rhat = dg_rhat(z, half, 2 * chains, cm, cv);
            if (n >= 4) {
                bulk = dg_ess(z, half, 2 * chains, cm, cv, rho);
                double cut_ess[2];
                for (int k = 0; k < 2; ++k) {
                    // Type 7 quantile of every draw.
                    const double h = (S - 1) * (k == 0 ? 0.05 : 0.95);
                    const int lo = (int)floor(h), hi = lo + 1 < S ? lo + 1 : S - 1;
                    const double cut = key[lo] + (h - lo) * (key[hi] - key[lo]);
                    const int below = dg_bound(key, S, cut, true);
                    cut_ess[k] = DG_NAN;
                    if (below == 0 || below == S) continue;
                    for (int pos = threadIdx.x; pos < S; pos += DG_THREADS)
                        if (place[pos] != DG_DROPPED) z[place[pos]] = pos < below ? 1.0 : 0.0;
                    __syncthreads();
                    cut_ess[k] = dg_ess(z, half, 2 * chains, cm, cv, rho);
                }
                tail = fmin(cut_ess[0], cut_ess[1]);
            }
            __syncthreads();  // every thread done reading the sorted draws
            for (int pos = threadIdx.x; pos < S; pos += DG_THREADS) key[pos] = fabs(key[pos] - median);
            __syncthreads();
            dg_sort(key, place, P);
            dg_ranks(key, place, S, L, mid, ndropped, true, median, z);
            rhat = fmax(rhat, dg_rhat(z, half, 2 * chains, cm, cv));
        }
        if (threadIdx.x == 0) {
            out[q] = rhat;
            out[count + q] = bulk;
            out[2 * count + q] = tail;
        }
        __syncthreads();
    }
}
