// Density emissions of the HMM (src/hmm/emission/*.rs), on the device.
//
// A density emission's block (prepended by the host, one per family)
// defines, for per-state parameters `ep`:
//   hmm_emis_log(ep, N, j, x)      log p_j(x) up to a term shared by all states
//   hmm_emis_shared(x)             that shared term
//   HMM_STATS                      S, the sufficient statistics per state
//   hmm_emis_feature(k, x, i, ep)  phi_k(x) for state i (statistic k < S)
// The recursions of hmm.cu read the emission as a table of rows: this file
// writes the row of every observation (position p of the flat sequences is
// "symbol" p: the host uploads symbols 0, 1, 2, ...), as the CPU's rows
// (emission/mod.rs, scale_logs): linear rows divided by their largest value
// (whose log, with the shared term, is the position's shift, added to the
// log-likelihood), or log rows.

#define HMM_EMIS_INF __longlong_as_double(0x7ff0000000000000ULL)

// The rows of positions [0, total): rows[p * N + j]. Linear rows
// (log_space == 0) also give shift[p] and rowmin[p], the smallest value of
// a state with a positive density (0 when one underflowed, and for a row
// whose densities are all 0), and may leave the rows out (rows null: the
// forward kernel of N <= 8 computes them). One warp per position, lanes
// over states.
extern "C" __global__ void hmm_emission_rows(
    int N, long long total, const double* __restrict__ obs, const double* __restrict__ ep,
    int log_space, double* __restrict__ rows, double* __restrict__ shift, double* __restrict__ rowmin)
{
    const int lane = threadIdx.x & 31;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long p = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; p < total; p += warps) {
        const double x = obs[p];
        const double k = hmm_emis_shared(x);
        if (log_space) {
            for (int j = lane; j < N; j += 32) rows[p * N + j] = hmm_emis_log(ep, N, j, x) + k;
            continue;
        }
        double top = HMM_NEG_INF;
        for (int j = lane; j < N; j += 32) top = fmax(top, hmm_emis_log(ep, N, j, x));
        top = warp_max(top);
        const bool none = !(top > HMM_NEG_INF);
        double mn = HMM_EMIS_INF;
        for (int j = lane; j < N; j += 32) {
            const double l = hmm_emis_log(ep, N, j, x);
            const double v = none ? 0.0 : exp(l - top);
            if (l > HMM_NEG_INF && v < mn) mn = v;
            if (rows) rows[p * N + j] = v;
        }
        mn = warp_min(mn);
        if (lane == 0) {
            shift[p] = none ? 0.0 : top + k;
            rowmin[p] = none ? 0.0 : mn;
        }
    }
}

// hmm_emission_rows with a thread per position, for N <= MAXN (a warp per
// position left most of its lanes idle at few states, and at 9-32 states
// spent most of its instructions on the row's maximum and minimum across
// lanes: 2.85 ms for 10^7 positions of 32 states on an H200). The same
// values: a row's largest and smallest entries do not depend on the order
// they are taken in. A thread's row goes through the block's shared tile
// (blockDim.x rows of N | 1 doubles, when `rows` is not null), so the
// block writes its rows to memory in order, not N doubles apart.
template <int MAXN>
__device__ __forceinline__ void hmm_emission_rows_by_position(
    int N, long long total, const double* __restrict__ obs, const double* __restrict__ ep,
    int log_space, double* __restrict__ rows, double* __restrict__ shift, double* __restrict__ rowmin)
{
    extern __shared__ double tile[];
    const int S = N | 1;  // odd: a warp's writes of column j hit distinct banks
    const int B = blockDim.x;
    const long long stride = (long long)gridDim.x * B;
    // Every thread of a block takes the same number of turns (the tile's
    // barriers).
    for (long long p0 = (long long)blockIdx.x * B; p0 < total; p0 += stride) {
        const long long p = p0 + threadIdx.x;
        if (p < total) {
            const double x = obs[p];
            const double k = hmm_emis_shared(x);
            double l[MAXN];
            double top = HMM_NEG_INF;
#pragma unroll
            for (int j = 0; j < MAXN; ++j) {
                if (j < N) {
                    l[j] = hmm_emis_log(ep, N, j, x);
                    top = fmax(top, l[j]);
                }
            }
            if (log_space) {
#pragma unroll
                for (int j = 0; j < MAXN; ++j)
                    if (j < N) l[j] += k;
            } else {
                const bool none = !(top > HMM_NEG_INF);
                double mn = HMM_EMIS_INF;
#pragma unroll
                for (int j = 0; j < MAXN; ++j) {
                    if (j < N) {
                        const double v = none ? 0.0 : exp(l[j] - top);
                        if (l[j] > HMM_NEG_INF && v < mn) mn = v;
                        l[j] = v;
                    }
                }
                shift[p] = none ? 0.0 : top + k;
                rowmin[p] = none ? 0.0 : mn;
            }
            if (rows) {
#pragma unroll
                for (int j = 0; j < MAXN; ++j)
                    if (j < N) tile[threadIdx.x * S + j] = l[j];
            }
        }
        if (!rows) continue;
        __syncthreads();
        // The block's rows are rows[p0 * N, (p0 + count) * N): element e of
        // them is row e / N, state e % N, stepped without dividing.
        const int count = (int)min((long long)B, total - p0);
        const int size = count * N, dq = B / N, dr = B % N;
        int r = threadIdx.x / N, j = threadIdx.x % N;
        double* out = rows + p0 * N;
        for (int e = threadIdx.x; e < size; e += B) {
            out[e] = tile[r * S + j];
            r += dq;
            j += dr;
            if (j >= N) { j -= N; ++r; }
        }
        __syncthreads();
    }
}

#define HMM_ROW_THREAD_MAX 8
#define HMM_ROW_THREAD_WIDE_MAX 32
extern "C" __global__ void hmm_emission_rows_thread(
    int N, long long total, const double* __restrict__ obs, const double* __restrict__ ep,
    int log_space, double* __restrict__ rows, double* __restrict__ shift, double* __restrict__ rowmin)
{
    hmm_emission_rows_by_position<HMM_ROW_THREAD_MAX>(N, total, obs, ep, log_space, rows, shift, rowmin);
}

extern "C" __global__ void hmm_emission_rows_thread_wide(
    int N, long long total, const double* __restrict__ obs, const double* __restrict__ ep,
    int log_space, double* __restrict__ rows, double* __restrict__ shift, double* __restrict__ rowmin)
{
    hmm_emission_rows_by_position<HMM_ROW_THREAD_WIDE_MAX>(N, total, obs, ep, log_space, rows, shift, rowmin);
}

// sym[p] = p for the `total` positions: each position reads its own row.
extern "C" __global__ void hmm_positions(long long total, unsigned* __restrict__ sym)
{
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += (long long)gridDim.x * blockDim.x)
        sym[p] = (unsigned)p;
}

// Per sequence s of [s0, s1): the sum of its positions' shifts, the
// smallest row minimum and the first step's scale sum_j start_j e_j(o_1)
// (linear rows; with rows null, N <= 32, the first row is computed from
// the observation `obs` as hmm_emission_rows computes it). One block per
// sequence (a warp where sequences are short, up to 1,024 threads where
// they are long: one sequence of 262,144 steps was one warp's 8,192 loads
// in a row); threads sum strided positions, then a fixed tree (warp
// shuffles, the warps in order), so the sums are deterministic.
extern "C" __global__ void hmm_sequence_shifts(
    int N, const long long* __restrict__ off, int s0, int s1, const double* __restrict__ shift,
    const double* __restrict__ rowmin, const double* __restrict__ start, const double* __restrict__ rows,
    double* __restrict__ shift_sum, double* __restrict__ min_all, double* __restrict__ first_scale,
    const double* __restrict__ obs, const double* __restrict__ ep)
{
    __shared__ double part_sum[32], part_min[32], part_c[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int s = s0 + (int)blockIdx.x; s < s1; s += gridDim.x) {
        const long long b = off[s], e = off[s + 1];
        double sum = 0.0, mn = HMM_EMIS_INF;
        for (long long p = b + threadIdx.x; p < e; p += blockDim.x) {
            sum += shift[p];
            mn = fmin(mn, rowmin[p]);
        }
        double c = 0.0;
        if (rows) {
            for (int j = threadIdx.x; j < N; j += blockDim.x) c += start[j] * rows[b * N + j];
        } else if (warp == 0) {
            const bool on = lane < N;
            const double l = on ? hmm_emis_log(ep, N, lane, obs[b]) : HMM_NEG_INF;
            const double top = warp_max(l);
            if (on && top > HMM_NEG_INF) c = start[lane] * exp(l - top);
        }
        sum = warp_sum(sum);
        mn = warp_min(mn);
        c = warp_sum(c);
        if (lane == 0) { part_sum[warp] = sum; part_min[warp] = mn; part_c[warp] = c; }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < warps; ++w) { sum += part_sum[w]; mn = fmin(mn, part_min[w]); c += part_c[w]; }
            shift_sum[s - s0] = sum;
            min_all[s - s0] = mn;
            first_scale[s - s0] = c;
        }
        // The partials are read before the next sequence writes them.
        __syncthreads();
    }
}

// The certificate's keys of density rows (hmm.cu's hmm_theta reads them)
// from hmm_sequence_shifts' per-sequence sums, on the device so that the
// forward pass follows without a round trip to the host (the host reads
// the shifts with the results). Dense transitions (`dense`): `big` for
// both, unless a fit's E-step (`counting`) has a sequence whose first
// scale is below `dense_min`; else the smallest positive start or
// transition probability (`chain_min`) and the smallest row minimum. A
// key is the value's bits inverted, 0 for none (memory.rs, min_key). One
// block.
__device__ __forceinline__ unsigned long long hmm_min_key(double p) {
    return p > 0.0 && p < HMM_EMIS_INF ? ~(unsigned long long)__double_as_longlong(p) : 0ULL;
}
extern "C" __global__ void hmm_density_keys(
    int count, int dense, int counting, double dense_min, double big, double chain_min,
    const double* __restrict__ min_all, const double* __restrict__ first_scale,
    unsigned long long* __restrict__ keys)
{
    __shared__ double mins[32];
    __shared__ int bads[32];
    double mn = HMM_EMIS_INF;
    int bad = 0;
    for (int s = threadIdx.x; s < count; s += blockDim.x) {
        mn = fmin(mn, min_all[s]);
        bad |= !(first_scale[s] >= dense_min);
    }
    mn = warp_min(mn);
    bad = __any_sync(0xffffffffu, bad);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { mins[warp] = mn; bads[warp] = bad; }
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) { mn = fmin(mn, mins[w]); bad |= bads[w]; }
    if (dense && !(counting && bad)) {
        keys[0] = hmm_min_key(big);
        keys[1] = hmm_min_key(big);
    } else {
        keys[0] = hmm_min_key(chain_min);
        keys[1] = hmm_min_key(mn);
    }
}

// The emission statistics and start counts of a batch from its posteriors
// (large N, where the backward pass writes gamma): block (k, y), k < S,
// adds sum_p gamma_p(i) phi_k(x_p) for states i of the block's y to
// counts[N + N*N + k*N + i]; blocks with k == S add the first position of
// every sequence to counts[i]. Positions in order, impossible and
// uncertain sequences skipped, so every count is summed in a fixed order.
#define HMM_STATS_THREADS 256
extern "C" __global__ void __launch_bounds__(HMM_STATS_THREADS) hmm_count_stats(
    int N, const long long* __restrict__ off, int s0, int s1, const double* __restrict__ loglik,
    const double* __restrict__ gamma, const double* __restrict__ obs, const double* __restrict__ ep,
    double* __restrict__ counts)
{
    const int k = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const long long base = off[s0];
    double s = 0.0;
    for (int q = s0; q < s1; ++q) {
        if (!(loglik[q - s0] > HMM_NEG_INF)) continue;
        const long long b = off[q], e = off[q + 1];
        if (k == HMM_STATS) {
            s += gamma[(b - base) * N + i];
            continue;
        }
        // Eight loads issued before their adds (as hmm_count_emissions),
        // then the remainder; the order of the adds is fixed.
        long long p = b;
        for (; p + 8 <= e; p += 8) {
            double g[8], x[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                g[u] = gamma[(p + u - base) * N + i];
                x[u] = obs[p + u];
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) s += g[u] * hmm_emis_feature(k, x[u], i, ep);
        }
        for (; p < e; ++p) s += gamma[(p - base) * N + i] * hmm_emis_feature(k, obs[p], i, ep);
    }
    if (k == HMM_STATS) counts[i] += s;
    else counts[N + (long long)N * N + (long long)k * N + i] += s;
}
