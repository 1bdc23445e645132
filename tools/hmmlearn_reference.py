#!/usr/bin/env python3
"""Reference values from hmmlearn for HMMs with Gaussian and Poisson emissions.

What it makes
-------------
src/rust/core/tests/data/hmmlearn_emissions.json: 12 small hidden Markov
models (6 with univariate Gaussian emissions, hmmlearn GaussianHMM with
covariance_type="diag" and one feature; 6 with Poisson emissions, hmmlearn
PoissonHMM with one feature), a few simulated sequences for each, and what
hmmlearn computes for them: per-sequence log-likelihood (score), Viterbi log
probability and path (decode), posterior state probabilities (predict_proba),
and 10 Baum-Welch iterations from the given model over all sequences jointly
(fit), with hmmlearn's priors set so that the M-step is plain maximum
likelihood.

File layout: {"meta": {...}, "cases": [case, ...]}; each case has
  name, emission ("gaussian" | "poisson"), n_states,
  start [N], trans [N*N] row-major (trans[i*N+j] = P(j | i)),
  params {"mean": [N], "sd": [N]} or {"rate": [N]},
  lengths [S], obs (all sequences concatenated; floats or integers),
  loglik [S], viterbi_log_prob [S], viterbi_path (flat, 0-based states),
  viterbi_margin [S] (extra: best minus runner-up path log probability, from
       the numpy check below; null for one state; sequences are redrawn
       until it is >= 1e-6, so the Viterbi paths have no ties),
  posterior (flat, time-major, N values per observation),
  fit {iterations, history (log-likelihood before each M-step: history[0]
       is that of the given model), start, trans, params, loglik (total
       log-likelihood of the fitted model over all sequences)}.
Gaussian sd is sqrt of hmmlearn's variance (covars_). The given sds are
multiples of 1/64, so sd*sd is exact in double precision.

hmmlearn settings (see ML_GAUSSIAN / ML_POISSON below): implementation="log",
init_params="" (the given parameters are the starting point), tol=-inf and
n_iter=10 (never stops early), startprob_prior=transmat_prior=1.0 (no
pseudocount); GaussianHMM: means_prior=0, means_weight=0, covars_prior=0,
covars_weight=1 (the default covars_prior=1e-2 would NOT be ML); min_covar is
only used when hmmlearn initialises covars itself, so it has no effect here;
PoissonHMM: lambdas_prior=0, lambdas_weight=0.

The script also checks everything against an independent numpy
implementation (scaled forward-backward, Viterbi, plain ML Baum-Welch) and
fails if they disagree; e.g. history[1] equals the log-likelihood after one
hand-computed Baum-Welch step. The largest differences go to meta.checks.

How to run (deterministic: fixed seeds, numpy Generator streams)
----------------------------------------------------------------
  python3 -m venv /tmp/hlvenv
  /tmp/hlvenv/bin/pip install hmmlearn==0.3.3 numpy scipy scikit-learn
  /tmp/hlvenv/bin/python tools/hmmlearn_reference.py      # from the repo root
Made with hmmlearn 0.3.3, numpy 2.4.6, scipy 1.17.1, scikit-learn 1.9.1,
Python 3.11 (the versions used are also recorded in meta).
"""

import json
import math
import os
import sys

import numpy as np
import hmmlearn
from hmmlearn.hmm import GaussianHMM, PoissonHMM
import scipy
import sklearn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src",
                   "rust", "core", "tests", "data", "hmmlearn_emissions.json")
N_ITER = 10
MIN_MARGIN = 1e-6
IMPLEMENTATION = "log"

COMMON = dict(startprob_prior=1.0, transmat_prior=1.0, algorithm="viterbi",
              n_iter=N_ITER, tol=-np.inf, init_params="",
              implementation=IMPLEMENTATION)
ML_GAUSSIAN = dict(covariance_type="diag", min_covar=1e-3, means_prior=0.0,
                   means_weight=0.0, covars_prior=0.0, covars_weight=1.0,
                   params="stmc", **COMMON)
ML_POISSON = dict(lambdas_prior=0.0, lambdas_weight=0.0, params="stl",
                  **COMMON)


# ----------------------------------------------------------------- cases --

def case_specs():
    """name, emission, N, seed, options."""
    return [
        ("gauss_n1", "gaussian", 1, 101, dict(n_seq=3, len1=True)),
        ("gauss_n2", "gaussian", 2, 102, dict(n_seq=5, len1=True)),
        ("gauss_n3_zero_trans", "gaussian", 3, 103,
         dict(n_seq=6, len1=True, zero_trans=(1, 2))),
        ("gauss_n3_zero_start", "gaussian", 3, 104,
         dict(n_seq=4, len1=True, zero_start=0)),
        ("gauss_n4", "gaussian", 4, 105, dict(n_seq=8, len1=True)),
        ("gauss_n2_separated", "gaussian", 2, 106,
         dict(n_seq=5, len1=True, separated=True)),
        ("pois_n1", "poisson", 1, 201, dict(n_seq=3, len1=True)),
        ("pois_n2", "poisson", 2, 202, dict(n_seq=5, len1=True)),
        ("pois_n3_zero_trans", "poisson", 3, 203,
         dict(n_seq=6, len1=True, zero_trans=(0, 2))),
        ("pois_n3_zero_start", "poisson", 3, 204,
         dict(n_seq=4, len1=True, zero_start=2)),
        ("pois_n4", "poisson", 4, 205, dict(n_seq=8, len1=True)),
        ("pois_n3_small_rate", "poisson", 3, 206,
         dict(n_seq=5, len1=True, small_rate=True)),
    ]


def make_case(name, emission, n, seed, opt):
    rng = np.random.default_rng(seed)
    start = rng.dirichlet(np.ones(n))
    trans = rng.dirichlet(np.ones(n), size=n)
    if "zero_start" in opt:
        start[opt["zero_start"]] = 0.0
        start /= start.sum()
    if "zero_trans" in opt:
        i, j = opt["zero_trans"]
        trans[i, j] = 0.0
        trans[i] /= trans[i].sum()
    if emission == "gaussian":
        if opt.get("separated"):
            mean = np.array([0.0, 60.0])
            sd = np.array([1.0, 1.0])
        else:
            mean = np.sort(rng.uniform(-4.0, 4.0, size=n))
            sd = np.round(rng.uniform(0.5, 2.0, size=n) * 64) / 64
        params = {"mean": mean, "sd": sd}
    else:
        if opt.get("small_rate"):
            rate = np.array([0.05, 4.0, 20.0])
        else:
            rate = np.sort(rng.uniform(0.5, 20.0, size=n))
        params = {"rate": rate}
    lengths = rng.integers(1, 61, size=opt["n_seq"])
    if opt.get("len1"):
        lengths[rng.integers(0, opt["n_seq"])] = 1
    c = dict(name=name, emission=emission, n_states=n, start=start,
             trans=trans, params=params, lengths=lengths, seqs=[])
    longest = int(np.argmax(lengths))
    for k, t_len in enumerate(lengths):
        # Simulate; redraw (up to 100 times) a sequence whose Viterbi path
        # is not unique by a margin of MIN_MARGIN in log probability (integer
        # counts easily give exact ties, e.g. states 0,1 vs 1,0 on two equal
        # counts between the same neighbours).
        for _ in range(100):
            s = rng.choice(n, p=start)
            xs = []
            for t in range(t_len):
                if t > 0:
                    s = rng.choice(n, p=trans[s])
                if emission == "gaussian":
                    xs.append(rng.normal(mean[s], sd[s]))
                else:
                    xs.append(int(rng.poisson(rate[s])))
            x = np.array(xs)
            if opt.get("small_rate") and k == longest:
                # Extreme counts (not simulated): up to 50, and zeros, so the
                # rate-0.05 state's pmf spans exp(-300)..exp(-0.05).
                x[[1, 3, 4]] = [50, 0, 0]
                x[-1] = 37
            if viterbi_margin(c, x) >= MIN_MARGIN:
                break
        else:
            raise RuntimeError(f"{name}: no sequence without a Viterbi tie")
        c["seqs"].append(x)
    return c


# --------------------------------------------------------------- hmmlearn --

def hmmlearn_model(c, start, trans, params):
    n = c["n_states"]
    if c["emission"] == "gaussian":
        m = GaussianHMM(n_components=n, **ML_GAUSSIAN)
        m.means_ = np.asarray(params["mean"], float).reshape(n, 1)
        m.covars_ = (np.asarray(params["sd"], float) ** 2).reshape(n, 1)
    else:
        m = PoissonHMM(n_components=n, **ML_POISSON)
        m.lambdas_ = np.asarray(params["rate"], float).reshape(n, 1)
    m.startprob_ = np.array(start, float)
    m.transmat_ = np.array(trans, float)
    return m


def hmmlearn_params(c, m):
    if c["emission"] == "gaussian":
        return {"mean": m.means_[:, 0].copy(),
                "sd": np.sqrt(m._covars_[:, 0])}
    return {"rate": m.lambdas_[:, 0].copy()}


def column(c, x):
    return np.asarray(x).reshape(-1, 1)


def run_hmmlearn(c, implementation=IMPLEMENTATION):
    m = hmmlearn_model(c, c["start"], c["trans"], c["params"])
    m.implementation = implementation
    out = dict(loglik=[], viterbi_log_prob=[], viterbi_path=[], posterior=[])
    for x in c["seqs"]:
        X = column(c, x)
        out["loglik"].append(m.score(X))
        lp, path = m.decode(X, algorithm="viterbi")
        out["viterbi_log_prob"].append(lp)
        out["viterbi_path"].append(path)
        out["posterior"].append(m.predict_proba(X))
    X = column(c, np.concatenate(c["seqs"]))
    f = hmmlearn_model(c, c["start"], c["trans"], c["params"])
    f.implementation = implementation
    f.fit(X, c["lengths"])
    assert f.monitor_.iter == N_ITER and len(f.monitor_.history) == N_ITER
    out["fit"] = dict(iterations=f.monitor_.iter,
                      history=list(f.monitor_.history),
                      start=f.startprob_.copy(), trans=f.transmat_.copy(),
                      params=hmmlearn_params(c, f),
                      loglik=f.score(X, c["lengths"]))
    return out


# ------------------------------------------------ independent numpy check --

def log_emission(c, params, x):
    """T x N emission log densities."""
    x = np.asarray(x, float)
    if c["emission"] == "gaussian":
        mu, sd = np.asarray(params["mean"]), np.asarray(params["sd"])
        z = (x[:, None] - mu[None, :]) / sd[None, :]
        return -0.5 * math.log(2 * math.pi) - np.log(sd)[None, :] - 0.5 * z * z
    lam = np.asarray(params["rate"])
    lg = np.array([math.lgamma(v + 1.0) for v in x])
    return x[:, None] * np.log(lam)[None, :] - lam[None, :] - lg[:, None]


def forward_backward(start, trans, logb):
    """Scaled forward-backward; emissions rescaled per time step by their max."""
    t_len, n = logb.shape
    mx = logb.max(axis=1)
    b = np.exp(logb - mx[:, None])
    alpha = np.zeros((t_len, n))
    scale = np.zeros(t_len)
    a = start * b[0]
    for t in range(t_len):
        if t > 0:
            a = (alpha[t - 1] @ trans) * b[t]
        scale[t] = a.sum()
        alpha[t] = a / scale[t]
    beta = np.ones((t_len, n))
    for t in range(t_len - 2, -1, -1):
        beta[t] = trans @ (b[t + 1] * beta[t + 1]) / scale[t + 1]
    gamma = alpha * beta
    gamma /= gamma.sum(axis=1, keepdims=True)
    xi = np.zeros((n, n))
    for t in range(t_len - 1):
        xi += (alpha[t][:, None] * trans
               * (b[t + 1] * beta[t + 1])[None, :] / scale[t + 1])
    return np.log(scale).sum() + mx.sum(), gamma, xi


def viterbi(start, trans, logb):
    with np.errstate(divide="ignore"):
        ls, lt = np.log(start), np.log(trans)
    t_len, n = logb.shape
    d = ls + logb[0]
    back = np.zeros((t_len, n), int)
    for t in range(1, t_len):
        cand = d[:, None] + lt
        back[t] = cand.argmax(axis=0)
        d = cand.max(axis=0) + logb[t]
    path = [int(d.argmax())]
    for t in range(t_len - 1, 0, -1):
        path.append(int(back[t][path[-1]]))
    return d.max(), np.array(path[::-1])


def viterbi_margin(c, x, start=None, trans=None, params=None):
    """Log probability of the best state path minus that of the runner-up
    (inf for one state), from max-marginals: the runner-up differs from the
    best path at some (t, s), and the best path through (t, s) is
    delta_t(s) + psi_t(s)."""
    start = c["start"] if start is None else start
    trans = c["trans"] if trans is None else trans
    params = c["params"] if params is None else params
    logb = log_emission(c, params, x)
    with np.errstate(divide="ignore"):
        ls, lt = np.log(start), np.log(trans)
    t_len, n = logb.shape
    delta = np.zeros((t_len, n))
    delta[0] = ls + logb[0]
    for t in range(1, t_len):
        delta[t] = (delta[t - 1][:, None] + lt).max(axis=0) + logb[t]
    psi = np.zeros((t_len, n))
    for t in range(t_len - 2, -1, -1):
        psi[t] = (lt + (logb[t + 1] + psi[t + 1])[None, :]).max(axis=1)
    mm = delta + psi
    best = mm.max(axis=1)
    _, path = viterbi(start, trans, logb)
    mm[np.arange(t_len), path] = -np.inf
    return float(best.max() - mm.max())


def em_step(c, start, trans, params):
    """One plain-ML Baum-Welch step; returns (loglik before, new model)."""
    n = c["n_states"]
    ll = 0.0
    s0, xi_all = np.zeros(n), np.zeros((n, n))
    w, wx, wxx = np.zeros(n), np.zeros(n), []
    gammas = []
    for x in c["seqs"]:
        l, g, xi = forward_backward(start, trans, log_emission(c, params, x))
        ll += l
        s0 += g[0]
        xi_all += xi
        w += g.sum(axis=0)
        wx += g.T @ np.asarray(x, float)
        gammas.append(g)
    new_start = s0 / s0.sum()
    new_trans = xi_all / xi_all.sum(axis=1, keepdims=True)
    mean = wx / w
    if c["emission"] == "gaussian":
        var = np.zeros(n)
        for x, g in zip(c["seqs"], gammas):
            var += (g * (np.asarray(x)[:, None] - mean[None, :]) ** 2).sum(0)
        new_params = {"mean": mean, "sd": np.sqrt(var / w)}
    else:
        new_params = {"rate": mean}
    return ll, new_start, new_trans, new_params


def total_loglik(c, start, trans, params):
    return sum(forward_backward(start, trans, log_emission(c, params, x))[0]
               for x in c["seqs"])


def relerr(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)), initial=0))


def check_case(c, h, checks):
    """Compare hmmlearn (h) with the numpy implementation; assert agreement."""
    err = {}
    lls, posts, vlp, vpaths = [], [], [], []
    for x in c["seqs"]:
        logb = log_emission(c, c["params"], x)
        ll, g, _ = forward_backward(c["start"], c["trans"], logb)
        lls.append(ll)
        posts.append(g)
        lp, path = viterbi(c["start"], c["trans"], logb)
        vlp.append(lp)
        vpaths.append(path)
    err["loglik"] = relerr(h["loglik"], lls)
    err["posterior"] = relerr(np.concatenate(h["posterior"]),
                              np.concatenate(posts))
    err["viterbi_log_prob"] = relerr(h["viterbi_log_prob"], vlp)
    assert all((a == b).all() for a, b in zip(h["viterbi_path"], vpaths)), \
        c["name"] + ": viterbi path"
    # Baum-Welch, N_ITER plain-ML steps by hand.
    start, trans, params = c["start"], c["trans"], c["params"]
    hist = []
    for _ in range(N_ITER):
        ll, start, trans, params = em_step(c, start, trans, params)
        hist.append(ll)
    fit = h["fit"]
    err["history"] = relerr(fit["history"], hist)
    err["fit_start"] = relerr(fit["start"], start)
    err["fit_trans"] = relerr(fit["trans"], trans)
    err["fit_params"] = max(relerr(fit["params"][k], params[k])
                            for k in params)
    err["fit_loglik"] = relerr(fit["loglik"],
                               total_loglik(c, start, trans, params))
    tol = {"loglik": 1e-12, "posterior": 1e-10, "viterbi_log_prob": 1e-12,
           "history": 1e-10, "fit_start": 1e-9, "fit_trans": 1e-9,
           "fit_params": 1e-9, "fit_loglik": 1e-10}
    for k, v in err.items():
        assert v <= tol[k], f"{c['name']}: {k} differs by {v:.3g}"
        checks[k] = max(checks.get(k, 0.0), v)
    # hmmlearn's own scaling implementation should agree too.
    hs = run_hmmlearn(c, "scaling")
    d = max(relerr(hs["loglik"], h["loglik"]),
            relerr(hs["fit"]["history"], fit["history"]),
            relerr(hs["fit"]["loglik"], fit["loglik"]))
    assert d <= 1e-10, f"{c['name']}: scaling vs log {d:.3g}"
    checks["hmmlearn_scaling_vs_log"] = max(
        checks.get("hmmlearn_scaling_vs_log", 0.0), d)


# ------------------------------------------------------------------ main --

def floats(a):
    return [float(v) for v in np.asarray(a, float).ravel()]


def params_json(p):
    return {k: floats(v) for k, v in p.items()}


def main():
    assert hmmlearn.__version__ == "0.3.3", hmmlearn.__version__
    cases, checks = [], {}
    for spec in case_specs():
        c = make_case(*spec)
        h = run_hmmlearn(c)
        check_case(c, h, checks)
        if c["emission"] == "gaussian":
            obs = floats(np.concatenate(c["seqs"]))
        else:
            obs = [int(v) for v in np.concatenate(c["seqs"])]
        fit = h["fit"]
        cases.append({
            "name": c["name"],
            "emission": c["emission"],
            "n_states": c["n_states"],
            "start": floats(c["start"]),
            "trans": floats(c["trans"]),
            "params": params_json(c["params"]),
            "lengths": [int(v) for v in c["lengths"]],
            "obs": obs,
            "loglik": floats(h["loglik"]),
            "viterbi_log_prob": floats(h["viterbi_log_prob"]),
            "viterbi_path": [int(v) for v in np.concatenate(h["viterbi_path"])],
            "viterbi_margin": [m if math.isfinite(m) else None
                               for m in (viterbi_margin(c, x)
                                         for x in c["seqs"])],
            "posterior": floats(np.concatenate(h["posterior"])),
            "fit": {
                "iterations": int(fit["iterations"]),
                "history": floats(fit["history"]),
                "start": floats(fit["start"]),
                "trans": floats(fit["trans"]),
                "params": params_json(fit["params"]),
                "loglik": float(fit["loglik"]),
            },
        })
    settings = {k: (repr(v) if isinstance(v, float) and not math.isfinite(v)
                    else v) for k, v in ML_GAUSSIAN.items()}
    meta = {
        "generator": "tools/hmmlearn_reference.py",
        "versions": {"hmmlearn": hmmlearn.__version__,
                     "numpy": np.__version__, "scipy": scipy.__version__,
                     "scikit-learn": sklearn.__version__,
                     "python": sys.version.split()[0]},
        "implementation": IMPLEMENTATION,
        "gaussian_settings": settings,
        "poisson_settings": {k: (repr(v) if isinstance(v, float)
                                 and not math.isfinite(v) else v)
                             for k, v in ML_POISSON.items()},
        "checks": {"description": "largest relative difference "
                   "|a-b|/max(1,|b|) between hmmlearn and the independent "
                   "numpy implementation over all cases", **checks},
    }
    text = ('{"meta": ' + json.dumps(meta, allow_nan=False) + ',\n"cases": [\n'
            + ",\n".join(json.dumps(c, allow_nan=False) for c in cases)
            + "\n]}\n")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(text)
    print(f"wrote {os.path.normpath(OUT)} ({len(text)} bytes, "
          f"{len(cases)} cases)")
    print(json.dumps(checks, indent=1))


if __name__ == "__main__":
    main()
