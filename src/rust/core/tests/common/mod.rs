//! Helpers shared by the GPU integration tests (`mod common;` in each).

use bulkem_core::exec::{Backend, Exec};
use bulkem_core::gpu;

/// Whether a CUDA device is usable; prints why not (the test then returns early).
#[allow(dead_code)]
pub fn gpu_or_skip() -> bool {
    let probe = gpu::probe();
    if !probe.usable() {
        eprintln!("skipped: no usable CUDA device ({})", probe.reason);
    }
    probe.usable()
}

/// The CUDA backend with the CPU defaults otherwise.
#[allow(dead_code)]
pub fn cuda() -> Exec {
    Exec { backend: Backend::Cuda, ..Exec::cpu() }
}

/// Where a fit with `precision = "mixed"` differs from the float64 fit of
/// the same dataset by more than the documented tolerances: the kept
/// log-likelihood to 1e-7 relative (the bound), each parameter to
/// 1e-4 relative (float32 weights move the fixed point by about 1e-7
/// relative; a flat likelihood magnifies that in the parameters, not in the
/// log-likelihood; checked when `params`), and the same status. None when
/// they agree.
#[allow(dead_code)]
pub fn mixed_disagreement(double: &bulkem_core::em::MixFit, mixed: &bulkem_core::em::MixFit, params: bool) -> Option<String> {
    let rel = |a: f64, b: f64| if a == b { 0.0 } else { (a - b).abs() / b.abs().max(1e-300) };
    if double.success() != mixed.success() {
        return Some(format!("status {:?} (double) vs {:?} (mixed): {:?}", double.status, mixed.status, mixed.message));
    }
    if !double.success() {
        return None;
    }
    let runs = format!(
        "start {}/{}, {} / {} iterations, {:?} / {:?}",
        mixed.best_start, double.best_start, mixed.iterations, double.iterations, mixed.status, double.status
    );
    if rel(mixed.loglik, double.loglik) > 1e-7 {
        return Some(format!("loglik {} (mixed) vs {} (double); {runs}", mixed.loglik, double.loglik));
    }
    if !params {
        return None;
    }
    let (a, b) = (&mixed.params, &double.params);
    for (name, x, y) in [("alpha", &a.alpha, &b.alpha), ("first", &a.mu, &b.mu), ("second", &a.scale, &b.scale)] {
        for (p, q) in x.iter().zip(y.iter()) {
            if !(p.is_nan() && q.is_nan()) && rel(*p, *q) > 1e-4 {
                return Some(format!("{name} {x:?} (mixed) vs {y:?} (double); loglik {} vs {}; {runs}", mixed.loglik, double.loglik));
            }
        }
    }
    None
}

/// Integer weights for `n` observations (0 to 3, from a fixed stream) and
/// the data with each observation repeated that many times: a weighted fit
/// of `x` must equal the unweighted fit of the repeats.
#[allow(dead_code)]
pub fn integer_weights(x: &[f64], seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let w: Vec<f64> = x
        .iter()
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % 4) as f64
        })
        .collect();
    let repeated = x.iter().zip(&w).flat_map(|(&xi, &wi)| std::iter::repeat_n(xi, wi as usize)).collect();
    (w, repeated)
}

/// Mixture parameters with components of every family that are well apart.
#[allow(dead_code)]
pub fn spread_params(family: bulkem_core::em::Family, m: usize) -> bulkem_core::em::MixParams {
    use bulkem_core::em::Family;
    let j = |f: &dyn Fn(f64) -> f64| (0..m).map(|j| f(j as f64)).collect::<Vec<_>>();
    let (mu, scale) = match family {
        Family::InvGauss => (j(&|j| 1.0 + 2.0 * j), j(&|j| 30.0 / (1.0 + 10.0 * j))),
        Family::Normal => (j(&|j| 4.0 * j), j(&|j| 1.0 + 0.3 * j)),
        Family::Gamma => (j(&|j| 2.0 + 3.0 * j), j(&|j| (2.0 + 3.0 * j) / (1.0 + 3.0 * j))),
        Family::LogNormal => (j(&|j| 1.5 * j), j(&|j| 0.4 + 0.1 * j)),
        Family::Poisson => (j(&|j| 2.0 + 8.0 * j), vec![f64::NAN; m]),
        Family::Exponential => (j(&|j| 1.0 / (1.0 + 5.0 * j)), vec![f64::NAN; m]),
    };
    bulkem_core::em::MixParams { alpha: vec![1.0 / m as f64; m], mu, scale }
}

/// `x` with the values above `c` right-censored there (their stand-in is
/// c) and, with `bins = Some(w)`, every 7th other value interval-censored
/// into its bin of width w (many observations share an interval).
#[allow(dead_code)]
pub fn censor(x: &[f64], c: f64, bins: Option<f64>) -> (Vec<f64>, bulkem_core::em::censored::Censoring) {
    let mut cens = bulkem_core::em::censored::Censoring::default();
    let mut mark = |i: usize, lo: f64, hi: f64| {
        cens.index.push(i);
        cens.lower.push(lo);
        cens.upper.push(hi);
    };
    let y = x
        .iter()
        .enumerate()
        .map(|(i, &v)| match bins {
            _ if v > c => {
                mark(i, c, f64::INFINITY);
                c
            }
            Some(w) if i % 7 == 0 => {
                let lo = (v / w).floor() * w;
                mark(i, lo, lo + w);
                v
            }
            _ => v,
        })
        .collect();
    (y, cens)
}


/// log P(seq, path) of a state path of a categorical HMM.
#[allow(dead_code)]
pub fn path_logp(m: &bulkem_core::hmm::HmmModel, seq: &[u32], path: &[u32]) -> f64 {
    let (n, v) = (m.n_states, m.emission.n_symbols);
    // Logs taken apart: a product of two probabilities can underflow.
    let mut lp = m.start[path[0] as usize].ln() + m.emission.probs[path[0] as usize * v + seq[0] as usize].ln();
    for t in 1..seq.len() {
        let (i, j) = (path[t - 1] as usize, path[t] as usize);
        lp += m.trans[i * n + j].ln() + m.emission.probs[j * v + seq[t] as usize].ln();
    }
    lp
}

#[allow(dead_code)]
pub mod diagnostic_cases;

/// `hmm::posterior_into` into one matrix per sequence on `exec` is bit for
/// bit `posterior` (the plain pass's result) laid out on the host, NaN as
/// -1 (`what` names the case).
#[allow(dead_code)]
pub fn check_posterior_layout<E: bulkem_core::hmm::Emission>(model: &bulkem_core::hmm::HmmModel<E>, seqs: &bulkem_core::hmm::Sequences<E::Obs>, exec: &Exec, posterior: &bulkem_core::hmm::Posterior, what: &str) {
    let (mats, ll) = posterior_laid_out(model, seqs, exec);
    assert_eq!(ll.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), posterior.loglik.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "{what}: log-likelihoods with the layout");
    let n = model.n_states;
    let mut want: Vec<Vec<f64>> = seqs.offsets.windows(2).map(|w| vec![0.0; (w[1] - w[0]) * n]).collect();
    let mut outs: Vec<&mut [f64]> = want.iter_mut().map(|x| &mut x[..]).collect();
    bulkem_core::hmm::layout::columns_by_sequence(&posterior.probs, &seqs.offsets, n, &mut outs, -1.0);
    assert!(mats.iter().flatten().eq(want.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>().iter()), "{what}: posteriors laid out");
}

/// The posteriors into one matrix per sequence (`hmm::posterior_into`, NaN
/// as -1), as bits, and the log-likelihoods.
#[allow(dead_code)]
pub fn posterior_laid_out<E: bulkem_core::hmm::Emission>(model: &bulkem_core::hmm::HmmModel<E>, seqs: &bulkem_core::hmm::Sequences<E::Obs>, exec: &Exec) -> (Vec<Vec<u64>>, Vec<f64>) {
    let n = model.n_states;
    let mut mats: Vec<Vec<f64>> = seqs.offsets.windows(2).map(|w| vec![0.0; (w[1] - w[0]) * n]).collect();
    let mut outs: Vec<&mut [f64]> = mats.iter_mut().map(|x| &mut x[..]).collect();
    let ll = bulkem_core::hmm::posterior_into(model, seqs, exec, &mut outs, -1.0).unwrap();
    (mats.iter().map(|m| m.iter().map(|x| x.to_bits()).collect()).collect(), ll)
}

/// A pass's results as bits: log-likelihoods, Viterbi paths with their
/// log-probabilities, posteriors with their log-likelihoods.
#[allow(dead_code)]
pub fn pass_bits<E: bulkem_core::hmm::Emission>(model: &bulkem_core::hmm::HmmModel<E>, seqs: &bulkem_core::hmm::Sequences<E::Obs>, exec: &Exec) -> Vec<u64> {
    try_pass_bits(model, seqs, exec).unwrap()
}

/// [`pass_bits`], or the first pass's error.
#[allow(dead_code)]
pub fn try_pass_bits<E: bulkem_core::hmm::Emission>(model: &bulkem_core::hmm::HmmModel<E>, seqs: &bulkem_core::hmm::Sequences<E::Obs>, exec: &Exec) -> bulkem_core::Result<Vec<u64>> {
    use bulkem_core::hmm;
    let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<u64>>();
    let mut all = bits(&hmm::loglik(model, seqs, exec)?);
    let v = hmm::viterbi(model, seqs, exec)?;
    all.extend(v.states.iter().map(|&s| s as u64));
    all.extend(bits(&v.log_prob));
    let p = hmm::posterior(model, seqs, exec)?;
    all.extend(bits(&p.probs));
    all.extend(bits(&p.loglik));
    Ok(all)
}

/// Kept models ([`bulkem_core::hmm::keep_model`]) on `exec`: every pass
/// with a kept `model`, run twice, gives the bits of the same model not
/// kept; `changed` (one value of `model` changed, as R changes a matrix in
/// place) is not found under `model`'s tables, and once kept gives its own
/// results; `model` kept still gives its own after it. A model is keyed
/// by its start, its transitions and `params` of its emission.
#[allow(dead_code)]
pub fn check_kept_models<E: bulkem_core::hmm::Emission>(model: &bulkem_core::hmm::HmmModel<E>, changed: &bulkem_core::hmm::HmmModel<E>, seqs: &bulkem_core::hmm::Sequences<E::Obs>, exec: &Exec, what: &str, params: impl Fn(&E) -> Vec<f64>) {
    use bulkem_core::hmm;
    let tables = |m: &hmm::HmmModel<E>| vec![m.start.clone(), m.trans.clone(), params(&m.emission)];
    let (t1, t2) = (tables(model), tables(changed));
    let (k1, k2): (Vec<&[f64]>, Vec<&[f64]>) = (t1.iter().map(|t| &t[..]).collect(), t2.iter().map(|t| &t[..]).collect());
    let (want1, want2) = (pass_bits(model, seqs, exec), pass_bits(changed, seqs, exec));
    assert!(want1 != want2, "{what}: the changed model must give other results");
    let kept = match hmm::find_kept_model(&k1) {
        Some(m) => m,
        None => hmm::keep_model(&k1, model.clone()),
    };
    for round in 0..2 {
        assert!(pass_bits(&kept, seqs, exec) == want1, "{what}: a kept model's results, round {round}");
        let again = hmm::find_kept_model::<E>(&k1).expect("a model just kept");
        assert!(std::sync::Arc::ptr_eq(&again, &kept), "{what}: the kept model found again");
    }
    if hmm::find_kept_model::<E>(&k2).is_none() {
        let other = hmm::keep_model(&k2, changed.clone());
        assert!(pass_bits(&other, seqs, exec) == want2, "{what}: the changed model's results");
    }
    assert!(pass_bits(&kept, seqs, exec) == want1, "{what}: the first model's results after the second");
    // Run as R's glue runs a kept model: the pass started at once, its
    // tables compared beside it; each model gets its own results, and a
    // model kept under neither's tables none (the pass stopped).
    let fresh = || Exec { monitor: std::sync::Arc::new(bulkem_core::exec::Monitor::new()), ..exec.clone() };
    let on_kept = |k: &[&[f64]]| {
        let e = fresh();
        let out = e.within(|| hmm::on_kept_model(k, &e, |m: &hmm::HmmModel<E>| try_pass_bits(m, seqs, &e)));
        (out.map(|r| r.expect("a kept model's passes")), e.monitor.is_cancelled())
    };
    for _ in 0..2 {
        assert!(on_kept(&k1) == (Some(want1.clone()), false), "{what}: a kept model's pass beside its lookup");
        assert!(on_kept(&k2) == (Some(want2.clone()), false), "{what}: the changed model's pass beside its lookup");
    }
    let mut t3 = t1.clone();
    let last = t3[1].len() - 2;
    t3[1][last] += 1e-3;
    let k3: Vec<&[f64]> = t3.iter().map(|t| &t[..]).collect();
    assert!(on_kept(&k3).0.is_none(), "{what}: tables kept for no model run no pass");
}

/// `model` with a fraction `by` of row 0's largest transition moved to the
/// next state's.
#[allow(dead_code)]
pub fn nudged<E: bulkem_core::hmm::Emission>(model: &bulkem_core::hmm::HmmModel<E>, by: f64) -> bulkem_core::hmm::HmmModel<E> {
    let mut m = model.clone();
    let n = m.n_states;
    let j = (0..n).max_by(|&a, &b| m.trans[a].total_cmp(&m.trans[b])).unwrap_or(0);
    let d = m.trans[j] * by;
    m.trans[j] -= d;
    m.trans[(j + 1) % n] += d;
    m
}
