# Peer for issue 26: hierarchical logistic regression with correlated group
# coefficients (lme4's `(1 + x1 + x2 | g)`), NumPyro NUTS on the GPU,
# float64, non-centred: beta_g = mu + diag(tau) L z_g, L ~ LKJCholesky(K, 1),
# tau ~ half-normal(2), mu ~ N(0, 5^2) (brms's kind of prior). The data are
# those of shared/peers/numpyro_hblogit.py (the same generator and key).
# Reports wall time (compilation included, as the peer does) and the
# minimum ESS (NumPyro's effective_sample_size) over the group
# coefficients and over every parameter (mu, tau, the correlations, beta).
# Usage: python3 numpyro_hblogit_corr.py G n K warmup samples chains
import sys, time
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpyro, numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS
from numpyro.diagnostics import effective_sample_size

def model(X, g, G, K, y=None):
    mu = numpyro.sample("mu", dist.Normal(0, 5).expand([K]).to_event(1))
    tau = numpyro.sample("tau", dist.HalfNormal(2).expand([K]).to_event(1))
    L = numpyro.sample("L", dist.LKJCholesky(K, 1.0))
    with numpyro.plate("groups", G):
        z = numpyro.sample("z", dist.Normal(0, 1).expand([K]).to_event(1))
    beta = numpyro.deterministic("beta", mu + z @ (tau[:, None] * L).T)
    logits = jnp.sum(X * beta[g], -1)
    numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y)

def main():
    G, n, K, W, S, C = [int(v) for v in sys.argv[1:7]]
    key = jax.random.PRNGKey(0)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    X = jnp.concatenate([jnp.ones((G * n, 1)), jax.random.normal(k1, (G * n, K - 1))], 1)
    g = jnp.repeat(jnp.arange(G), n)
    beta = jnp.array([0.5] + [1.0] * (K - 1)) + 0.5 * jax.random.normal(k2, (G, K))
    y = jax.random.bernoulli(k3, jax.nn.sigmoid(jnp.sum(X * beta[g], -1))).astype(jnp.float64)
    mcmc = MCMC(NUTS(model), num_warmup=W, num_samples=S, num_chains=C,
                chain_method="vectorized", progress_bar=False)
    t0 = time.time(); mcmc.run(k4, X, g, G, K, y); jax.block_until_ready(mcmc.get_samples()); t1 = time.time()
    s = jax.device_get(mcmc.get_samples(group_by_chain=True))
    ess_beta = effective_sample_size(s["beta"])
    L = s["L"]
    corr = jnp.einsum("cdij,cdkj->cdik", L, L)
    iu = jnp.triu_indices(K, 1)
    parts = [ess_beta.ravel(), effective_sample_size(s["mu"]).ravel(), effective_sample_size(s["tau"]).ravel(),
             effective_sample_size(corr[:, :, iu[0], iu[1]]).ravel()]
    ess_all = jnp.concatenate(parts)
    print(f"numpyro_hblogit_corr G={G} n={n} K={K} warmup={W} samples={S} chains={C}: {t1-t0:.1f} s total (incl. compile), "
          f"min ESS groups {float(ess_beta.min()):.0f}, all {ess_all.size} parameters {float(ess_all.min()):.0f}, "
          f"min ESS/s all {float(ess_all.min())/(t1-t0):.2f}, median ESS groups {float(jnp.median(ess_beta)):.0f}")

if __name__ == "__main__":
    main()
