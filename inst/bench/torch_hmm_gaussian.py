# Peer: batched HMM with univariate Gaussian emissions (per-state mean and sd)
# on one GPU, float64: the Gaussian counterpart of ../shared/peers/torch_hmm.py
# (same structure, same scaled-probability recursion with one GEMM per step).
# Times forward log-likelihood, Viterbi (max-plus, log space) and one
# Baum-Welch iteration (start, transitions and the Gaussian M-step: weighted
# means and variances from sums of gamma, gamma*x, gamma*x^2 per state) for
# M sequences of length T over N states, median of 5 timed with CUDA events.
# Emissions per time step: log densities (M,N) from the observations (M,T),
# shifted by their max over states before exp; the shift is added back to the
# log-likelihood (so outliers far from every mean don't underflow to 0).
# Usage: python3 torch_hmm_gaussian.py N M T
#        python3 torch_hmm_gaussian.py --check   (tiny case vs brute force over
#        all N^T paths; runs on the CPU when CUDA is absent)
import sys, math, time, itertools, torch

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

def timeit(fn, reps=5):
    cuda = torch.cuda.is_available()
    fn()
    if cuda: torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter(); fn(); ts.append(1e3 * (time.perf_counter() - t0))
    ts.sort(); return ts[len(ts) // 2]

def emis_consts(mu, sd):
    # per-state constants for log N(x | mu, sd^2) = -0.5 ((x-mu)/sd)^2 + c
    return mu[None, :], 1.0 / sd[None, :], (-torch.log(sd) - HALF_LOG_2PI)[None, :]

def log_dens(x, k):
    # x: (M,) observations at one time step -> (M,N) log densities
    mu, isd, c = k
    z = (x[:, None] - mu) * isd
    return c - 0.5 * z * z

def shifted_dens(x, k):
    # (M,N) densities scaled by exp(-max over states), and the shift (M,)
    lb = log_dens(x, k)
    sh = lb.max(1, keepdim=True).values
    return torch.exp(lb - sh), sh[:, 0]

def forward(pi, A, mu, sd, X, keep_scales=False):
    # X: (M,T) float64; returns scaled alphas (T,M,N), log-likelihood (M,) [, scales (T,M,1)]
    M, T = X.shape
    k = emis_consts(mu, sd)
    b, sh = shifted_dens(X[:, 0], k)
    a = pi[None, :] * b
    c = a.sum(1, keepdim=True); a = a / c
    ll = torch.log(c[:, 0]) + sh
    alphas, cs = [a], [c]
    for t in range(1, T):
        b, sh = shifted_dens(X[:, t], k)
        a = (a @ A) * b
        c = a.sum(1, keepdim=True); a = a / c
        ll = ll + torch.log(c[:, 0]) + sh; alphas.append(a); cs.append(c)
    if keep_scales:
        return torch.stack(alphas), ll, torch.stack(cs)
    return torch.stack(alphas), ll

def viterbi(pi, A, mu, sd, X):
    M, T = X.shape
    lA = torch.log(A)
    k = emis_consts(mu, sd)
    d = torch.log(pi)[None, :] + log_dens(X[:, 0], k)
    bps = []
    for t in range(1, T):
        s = d[:, :, None] + lA[None]          # (M,N,N)
        d, bp = s.max(1)
        d = d + log_dens(X[:, t], k); bps.append(bp)
    best, last = d.max(1)
    path = [last]
    for bp in reversed(bps):
        last = bp.gather(1, last[:, None])[:, 0]; path.append(last)
    return best, torch.stack(path[::-1], 1)

def baum_welch_step(pi, A, mu, sd, X):
    M, T = X.shape
    N = A.shape[0]
    # scaled forward-backward (Rabiner): gamma_t = alpha_t * beta_t,
    # xi_t(i,j) = alpha_t(i) A(i,j) b_j(x_t+1) beta_t+1(j) / c_t+1, with b the
    # same max-shifted densities as in the forward pass (the shift cancels).
    alphas, ll, cs = forward(pi, A, mu, sd, X, keep_scales=True)
    k = emis_consts(mu, sd)
    b = torch.ones(M, N, dtype=A.dtype, device=A.device)
    xi = torch.zeros(N, N, dtype=A.dtype, device=A.device)
    g = alphas[T - 1] * b
    x = X[:, T - 1]
    sg, sx, sxx = g.sum(0), x @ g, (x * x) @ g        # (N,) each
    g0 = None
    for t in range(T - 2, -1, -1):
        e, _ = shifted_dens(X[:, t + 1], k)
        eb = e * b / cs[t + 1]                         # (M,N)
        xi += A * (alphas[t].T @ eb)                   # (N,N) summed over sequences
        b = eb @ A.T
        g = alphas[t] * b                              # (M,N), rows sum to 1
        x = X[:, t]
        sg += g.sum(0); sx += x @ g; sxx += (x * x) @ g
        g0 = g
    pi2 = g0.mean(0) if g0 is not None else (alphas[0] * b).mean(0)
    A2 = xi / xi.sum(1, keepdim=True)
    mu2 = sx / sg
    sd2 = torch.sqrt((sxx / sg - mu2 * mu2).clamp_min(1e-300))
    return pi2, A2, mu2, sd2, ll

def random_model(N, M, T, dev, dt=torch.float64):
    A = torch.rand(N, N, dtype=dt, device=dev); A /= A.sum(1, keepdim=True)
    pi = torch.full((N,), 1.0 / N, dtype=dt, device=dev)
    mu = 3.0 * torch.randn(N, dtype=dt, device=dev)
    sd = 0.5 + torch.rand(N, dtype=dt, device=dev)
    # observations: each drawn from a random state's density
    S = torch.randint(0, N, (M, T), device=dev)
    X = mu[S] + sd[S] * torch.randn(M, T, dtype=dt, device=dev)
    return pi, A, mu, sd, X

def check():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    N, M, T = 3, 4, 7
    torch.manual_seed(1)
    pi, A, mu, sd, X = random_model(N, M, T, dev)
    pi = torch.rand(N, dtype=pi.dtype, device=dev); pi /= pi.sum()
    X[0, 3] = 80.0       # an outlier: every state's density underflows without the shift
    # brute force over all N^T paths, in log space
    P = torch.tensor(list(itertools.product(range(N), repeat=T)), device=dev)   # (K,T)
    lA = torch.log(A)
    lp_path = torch.log(pi)[P[:, 0]] + lA[P[:, :-1], P[:, 1:]].sum(1)          # (K,)
    k = emis_consts(mu, sd)
    LD = torch.stack([log_dens(X[:, t], k) for t in range(T)], 1)             # (M,T,N)
    le = LD[:, torch.arange(T, device=dev)[None, :], P].sum(2)                  # (M,K)
    tot = lp_path[None, :] + le                                                 # (M,K)
    ll_bf, vit_bf = torch.logsumexp(tot, 1), tot.max(1).values
    _, ll = forward(pi, A, mu, sd, X)
    best, path = viterbi(pi, A, mu, sd, X)
    # log-prob of the returned Viterbi path itself
    kpath = (path * (N ** torch.arange(T - 1, -1, -1, device=dev))[None, :]).sum(1)
    vit_path = tot.gather(1, kpath[:, None])[:, 0]
    # Baum-Welch step vs brute-force posteriors over paths
    w = torch.softmax(tot, 1)                                                   # (M,K)
    oh = torch.nn.functional.one_hot(P, N).to(X.dtype)                          # (K,T,N)
    gam = torch.einsum("mk,ktn->mtn", w, oh)                                    # (M,T,N)
    xi = torch.einsum("mk,kti,ktj->ij", w, oh[:, :-1], oh[:, 1:])
    sg = gam.sum((0, 1))
    mu_bf = torch.einsum("mtn,mt->n", gam, X) / sg
    var_bf = torch.einsum("mtn,mt->n", gam, X * X) / sg - mu_bf ** 2
    pi2, A2, mu2, sd2, ll2 = baum_welch_step(pi, A, mu, sd, X)
    # without the max shift the outlier sequence's likelihood is lost
    a = pi[None, :] * torch.exp(LD[:, 0]); lnaive = torch.log(a.sum(1)); a = a / a.sum(1, keepdim=True)
    for t in range(1, T):
        a = (a @ A) * torch.exp(LD[:, t]); c = a.sum(1); lnaive = lnaive + torch.log(c); a = a / c[:, None]
    mx = lambda u, v: (u - v).abs().max().item()
    print(f"check on {dev}: N={N} M={M} T={T}, {N ** T} paths, X[0,3]={X[0, 3].item():g} (outlier)")
    print(f"  forward log-lik: max abs diff vs brute-force logsumexp = {mx(ll, ll_bf):.3e}  (ll = {[round(v, 4) for v in ll.tolist()]})")
    print(f"  viterbi log-prob: max abs diff vs brute-force max = {mx(best, vit_bf):.3e}; returned path's log-prob vs max = {mx(vit_path, vit_bf):.3e}")
    print(f"  baum-welch: max abs diff pi {mx(pi2, gam[:, 0].mean(0)):.3e}, A {mx(A2, xi / xi.sum(1, keepdim=True)):.3e}, "
          f"mean {mx(mu2, mu_bf):.3e}, sd {mx(sd2, var_bf.sqrt()):.3e}, ll {mx(ll2, ll_bf):.3e}")
    print(f"  unshifted recursion for comparison: log-lik {[round(v, 4) for v in lnaive.tolist()]}")

def main():
    if "--check" in sys.argv[1:]:
        check(); return
    N, M, T = [int(v) for v in sys.argv[1:4]]
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    pi, A, mu, sd, X = random_model(N, M, T, dev)
    tf = timeit(lambda: forward(pi, A, mu, sd, X))
    tv = timeit(lambda: viterbi(pi, A, mu, sd, X))
    tb = timeit(lambda: baum_welch_step(pi, A, mu, sd, X))
    print(f"torch_hmm_gaussian N={N} M={M} T={T}: forward {tf:.2f} ms, viterbi {tv:.2f} ms, baum-welch iter {tb:.2f} ms")

if __name__ == "__main__":
    main()
