# Peer: dynamax (JAX) HMM inference with univariate Gaussian emissions (a
# mean and a standard deviation per state), batched over sequences with
# vmap, float64: the Gaussian counterpart of ../shared/peers/dynamax_hmm.py
# (same inference functions, same timing). dynamax's inference takes a
# (T, N) matrix of log densities; here it is computed inside the jitted
# pass from the observations, as a dynamax GaussianHMM does.
# Times the forward log-likelihood (hmm_filter), Viterbi
# (hmm_posterior_mode), the posteriors (hmm_smoother's smoothed_probs,
# returned as one (M, T, N) array) and one Baum-Welch iteration (smoother
# with expected transitions, then the closed-form M-step: start,
# transitions, weighted means and standard deviations) for M sequences of
# length T over N states: once with the observations already on the
# device, once from host memory (observations copied in, results back),
# median of 5 after a warm-up.
# With M = 1 (one long sequence) it times instead the sequential passes and
# dynamax's parallel-in-time ones (associative scan: filter and smoother;
# dynamax has no parallel Viterbi), 3 runs after a warm-up.
# Usage: python3 dynamax_hmm_gaussian.py N M T
# Needs dynamax 1.0.3 (and its tfp-nightly, dm-tree, gast, decorator, fastprogress).
import os, sys, time, types, importlib.util
import numpy as np
if sys.argv[2:3] == ["1"]:
    # As in dynamax_hmm.py: XLA's Triton GEMM fusion aborts the process on
    # the parallel smoother at long T; cuBLAS is used instead.
    os.environ.setdefault("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=false")
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp

def load_inference():
    """dynamax's HMM inference module; if the package's models (TFP) fail to
    import, load the inference module alone (it needs only JAX)."""
    try:
        from dynamax.hidden_markov_model import inference
        return inference, "package"
    except Exception as e:  # noqa: BLE001
        why = str(e).splitlines()[0][:120]
        spec = importlib.util.find_spec("dynamax")
        root = spec.submodule_search_locations[0]
        for name, path in (("dynamax", root), ("dynamax.hidden_markov_model", root + "/hidden_markov_model")):
            m = types.ModuleType(name); m.__path__ = [path]; sys.modules[name] = m
        import dynamax.hidden_markov_model.inference as inference
        return inference, f"module alone ({why})"

hi, how = load_inference()
HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)

def timeit(fn, reps=5):
    jax.block_until_ready(fn())
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); jax.block_until_ready(fn()); ts.append(time.perf_counter() - t0)
    return sorted(ts)[reps // 2] * 1e3

def log_dens(mu, sd, o):
    # o: (T,) observations of one sequence -> (T, N) log densities
    z = (o[:, None] - mu) / sd
    return -0.5 * z * z - jnp.log(sd) - HALF_LOG_2PI

@jax.jit
def forward(pi, A, mu, sd, O):
    return jax.vmap(lambda o: hi.hmm_filter(pi, A, log_dens(mu, sd, o)).marginal_loglik)(O)

@jax.jit
def viterbi(pi, A, mu, sd, O):
    return jax.vmap(lambda o: hi.hmm_posterior_mode(pi, A, log_dens(mu, sd, o)))(O)

@jax.jit
def posterior(pi, A, mu, sd, O):
    return jax.vmap(lambda o: hi.hmm_smoother(pi, A, log_dens(mu, sd, o)).smoothed_probs)(O)

@jax.jit
def baum_welch_step(pi, A, mu, sd, O):
    def one(o):
        post = hi.hmm_smoother(pi, A, log_dens(mu, sd, o))
        return post.marginal_loglik, post.smoothed_probs, post.trans_probs
    ll, sm, tr = jax.vmap(one)(O)
    xi = tr.sum(0)
    w = sm.sum((0, 1))
    m1 = jnp.einsum("mtn,mt->n", sm, O) / w
    m2 = jnp.einsum("mtn,mt->n", sm, O * O) / w
    return sm[:, 0].mean(0), xi / xi.sum(1, keepdims=True), m1, jnp.sqrt(jnp.maximum(m2 - m1 * m1, 0.0)), ll.sum()

def one_long_sequence(pi_d, A_d, mu_d, sd_d, O_host):
    from dynamax.hidden_markov_model import parallel_inference as par
    em = lambda o: log_dens(mu_d, sd_d, o)
    passes = {
        "forward (sequential scan)": jax.jit(lambda o: hi.hmm_filter(pi_d, A_d, em(o)).marginal_loglik),
        "forward (parallel scan)": jax.jit(lambda o: par.hmm_filter(pi_d, A_d, em(o)).marginal_loglik),
        "posterior (sequential)": jax.jit(lambda o: hi.hmm_smoother(pi_d, A_d, em(o)).smoothed_probs),
        "viterbi (sequential)": jax.jit(lambda o: hi.hmm_posterior_mode(pi_d, A_d, em(o))),
        "posterior (parallel scan)": jax.jit(lambda o: par.hmm_smoother(pi_d, A_d, em(o)).smoothed_probs),
    }
    o_d = jnp.asarray(O_host[0])
    lf, lp = float(passes["forward (sequential scan)"](o_d)), float(passes["forward (parallel scan)"](o_d))
    print(f"  loglik sequential {lf:.10e}, parallel {lp:.10e}", flush=True)
    for name, f in passes.items():
        try:
            dev = timeit(lambda: f(o_d), reps=3)
            host = timeit(lambda: np.asarray(f(jnp.asarray(O_host[0]))), reps=3)
            print(f"  {name}: {dev:.2f} ms on the device, {host:.2f} ms from host memory", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"  {name}: failed: {str(e).splitlines()[0][:160]}")

def main():
    N, M, T = [int(v) for v in sys.argv[1:4]]
    rng = np.random.default_rng(0)
    A = rng.random((N, N)); A /= A.sum(1, keepdims=True)
    pi = np.full(N, 1.0 / N)
    mu = np.linspace(-3.0, 3.0, N); sd = np.full(N, 1.0)
    O_host = rng.normal(0.0, 2.0, (M, T))
    pi_d, A_d, mu_d, sd_d, O_d = (jax.device_put(x) for x in (pi, A, mu, sd, O_host))
    kind = jax.devices()[0].device_kind
    if M == 1:
        print(f"dynamax_hmm_gaussian one sequence N={N} T={T} on {kind} (dynamax {how}):")
        return one_long_sequence(pi_d, A_d, mu_d, sd_d, O_host)
    ll = float(forward(pi_d, A_d, mu_d, sd_d, O_d).sum())
    assert np.isfinite(ll), "non-finite log-likelihood"
    passes = {
        "forward": (forward, np.asarray),
        "viterbi": (viterbi, np.asarray),
        "posterior": (posterior, np.asarray),
        "baum-welch iter": (baum_welch_step, jax.device_get),
    }
    dev = {k: timeit(lambda f=f: f(pi_d, A_d, mu_d, sd_d, O_d)) for k, (f, _) in passes.items()}
    host = {k: timeit(lambda f=f, g=g: g(f(pi_d, A_d, mu_d, sd_d, jnp.asarray(O_host)))) for k, (f, g) in passes.items()}
    print(f"dynamax_hmm_gaussian N={N} M={M} T={T} on {kind} (dynamax {how}; total loglik {ll:.6e}):")
    print("  data on the device: " + ", ".join(f"{k} {v:.2f} ms" for k, v in dev.items()))
    print("  from host memory:   " + ", ".join(f"{k} {v:.2f} ms" for k, v in host.items()))

if __name__ == "__main__":
    main()
