//! Censored and binned data on the CPU (the reference; em_gpu checks the
//! GPU against it): the log-likelihood is that of the observed data (densities of
//! the exact values, interval masses of the censored ones, here by
//! numerical integration) and never decreases, datasets without censoring
//! fit as before, a histogram fits as interval-censored data with counts
//! as weights, and what cannot be fitted is refused.

mod common;

use bulkem_core::em::censored::Censoring;
use bulkem_core::em::{fit_many, mixture_log_density, simulate, EmConfig, Family, MixFit, MixParams};
use bulkem_core::error::Error;
use bulkem_core::exec::Exec;

fn config(family: Family) -> EmConfig {
    EmConfig::new(family, 2).random_inits(6).seed(3).max_iters(2000).epsilon(1e-11).keep_trace(true)
}

/// Right-censor `x` at `c`: values above c become c, censored in (c, inf).
fn censor_right(x: &[f64], c: f64) -> (Vec<f64>, Censoring) {
    common::censor(x, c, None)
}

/// log P(a < X <= b) under the mixture by Simpson's rule (b finite).
fn log_mass(family: Family, p: &MixParams, a: f64, b: f64) -> f64 {
    let n = 20_000;
    let h = (b - a) / n as f64;
    let s: f64 = (0..=n)
        .map(|k| {
            let x = a + k as f64 * h;
            let w = if k == 0 || k == n { 1.0 } else if k % 2 == 1 { 4.0 } else { 2.0 };
            w * mixture_log_density(family, &[x], p)[0].exp()
        })
        .sum();
    (s * h / 3.0).ln()
}

fn non_decreasing(f: &MixFit) {
    for w in f.trace.windows(2) {
        assert!(w[1] >= w[0] - 1e-9 * w[0].abs(), "log-likelihood decreased: {} -> {}", w[0], w[1]);
    }
}

#[test]
fn right_censored_fits_have_the_observed_data_log_likelihood() {
    for family in Family::ALL {
        let p = match family {
            Family::InvGauss => MixParams { alpha: vec![0.4, 0.6], mu: vec![1.0, 3.0], scale: vec![10.0, 8.0] },
            Family::Normal => MixParams { alpha: vec![0.4, 0.6], mu: vec![0.0, 4.0], scale: vec![1.0, 1.5] },
            Family::LogNormal => MixParams { alpha: vec![0.4, 0.6], mu: vec![0.0, 1.5], scale: vec![0.3, 0.4] },
            Family::Gamma => MixParams { alpha: vec![0.4, 0.6], mu: vec![2.0, 9.0], scale: vec![2.0, 1.5] },
            Family::Poisson => MixParams { alpha: vec![0.4, 0.6], mu: vec![2.0, 9.0], scale: vec![f64::NAN; 2] },
            Family::Exponential => MixParams { alpha: vec![0.4, 0.6], mu: vec![3.0, 0.5], scale: vec![f64::NAN; 2] },
        };
        let x = simulate::mixture(family, &p, 800, 7);
        let mut sorted = x.clone();
        sorted.sort_by(f64::total_cmp);
        let c = sorted[680];
        let (y, cens) = censor_right(&x, c);
        let censored = cens.index.len();
        let cfg = config(family).censoring(vec![cens]).check().unwrap();
        let f = fit_many(&[&y], &cfg, &Exec::cpu()).unwrap().remove(0);
        assert!(f.success(), "{family:?}: {:?}", f.message);
        non_decreasing(&f);
        assert_eq!(f.n, 800);
        // The observed-data log-likelihood: exact densities plus the
        // censored values' log P(X > c) (to a far upper bound).
        let exact: f64 = mixture_log_density(family, &y, &f.params).iter().zip(&x).filter(|(_, &v)| v <= c).map(|(l, _)| l).sum();
        let upper = c + 60.0 * sorted[799].abs().max(1.0);
        let tail = if family == Family::Poisson {
            // Counts: P(X > c) as a sum of probabilities.
            let ks: Vec<f64> = (c as usize + 1..c as usize + 400).map(|k| k as f64).collect();
            mixture_log_density(family, &ks, &f.params).iter().map(|l| l.exp()).sum::<f64>().ln()
        } else {
            log_mass(family, &f.params, c, upper)
        };
        let want = exact + censored as f64 * tail;
        assert!((f.loglik - want).abs() < 1e-6 * want.abs(), "{family:?}: {} vs {want}", f.loglik);
    }
}

#[test]
fn a_histogram_fits_as_interval_censored_counts() {
    let p = MixParams { alpha: vec![0.3, 0.7], mu: vec![1.0, 3.0], scale: vec![30.0, 5.0] };
    let x = simulate::mixture(Family::InvGauss, &p, 5000, 2);
    // Bins of 0.25 up to 10, and an open last bin (10, inf).
    let mut edges: Vec<f64> = (0..=40).map(|k| 0.25 * k as f64).collect();
    edges.push(f64::INFINITY);
    let mut counts = vec![0.0; edges.len() - 1];
    for v in &x {
        if let Some(k) = edges.windows(2).position(|e| *v > e[0] && *v <= e[1]) {
            counts[k] += 1.0;
        }
    }
    let bins: Vec<usize> = (0..counts.len()).filter(|&k| counts[k] > 0.0).collect();
    let mids: Vec<f64> = bins.iter().map(|&k| if edges[k + 1].is_finite() { 0.5 * (edges[k] + edges[k + 1]) } else { edges[k] }).collect();
    let cens = Censoring { index: (0..bins.len()).collect(), lower: bins.iter().map(|&k| edges[k]).collect(), upper: bins.iter().map(|&k| edges[k + 1]).collect() };
    let w: Vec<f64> = bins.iter().map(|&k| counts[k]).collect();
    let cfg = config(Family::InvGauss).censoring(vec![cens]).weights(vec![w.clone()]).check().unwrap();
    let f = fit_many(&[&mids], &cfg, &Exec::cpu()).unwrap().remove(0);
    assert!(f.success(), "{:?}", f.message);
    non_decreasing(&f);
    assert_eq!(f.nobs(), w.iter().sum::<f64>());
    let want: f64 = bins.iter().zip(&w).map(|(&k, c)| c * log_mass(Family::InvGauss, &f.params, edges[k], edges[k + 1].min(400.0))).sum();
    assert!((f.loglik - want).abs() < 1e-6 * want.abs(), "{} vs {want}", f.loglik);
    // The binned fit is near the fit of the raw data.
    let raw = fit_many(&[&x], &config(Family::InvGauss).check().unwrap(), &Exec::cpu()).unwrap().remove(0);
    for j in 0..2 {
        assert!((f.params.mu[j] / raw.params.mu[j] - 1.0).abs() < 0.05, "{:?} vs {:?}", f.params, raw.params);
    }
}

/// keep.posterior and ICL with censored observations: a censored row is
/// alpha_j P_j(interval) normalised, an exact row the density's; ICL is
/// BIC less twice the sum of log max_j z_ij over every observation.
#[test]
fn posterior_and_icl_cover_the_censored_observations() {
    use bulkem_core::em::{select_many, Criterion};
    let family = Family::InvGauss;
    let truth = MixParams { alpha: vec![0.4, 0.6], mu: vec![1.0, 3.0], scale: vec![20.0, 8.0] };
    let (x, cens) = censor_right(&simulate::mixture(family, &truth, 400, 7), 3.5);
    assert!(!cens.index.is_empty());
    let cfg = config(family).censoring(vec![cens.clone()]);
    let fit = fit_many(&[&x], &cfg.clone().keep_posterior(true).check().unwrap(), &Exec::cpu()).unwrap().remove(0);
    let z = fit.posterior.as_ref().expect("a posterior");
    let (n, p) = (x.len(), &fit.params);
    let mut classification = 0.0;
    for i in 0..n {
        let row: Vec<f64> = (0..2).map(|j| z[j * n + i]).collect();
        assert!((row[0] + row[1] - 1.0).abs() < 1e-12, "row {i}: {row:?}");
        let want: Vec<f64> = match cens.index.iter().position(|&k| k == i) {
            Some(k) => (0..2).map(|j| p.alpha[j] * family.upper_tail(cens.lower[k], p.mu[j], p.scale[j], 0.0).unwrap()[0]).collect(),
            None => (0..2).map(|j| p.alpha[j] * family.log_density(x[i], p.mu[j], p.scale[j]).exp()).collect(),
        };
        let total = want[0] + want[1];
        for j in 0..2 {
            assert!((row[j] - want[j] / total).abs() < 1e-10, "row {i}, component {j}: {} vs {}", row[j], want[j] / total);
        }
        classification += row[0].max(row[1]).ln();
    }
    let bic = select_many(&[&x], &cfg.clone().check().unwrap(), &[2], Criterion::Bic, &Exec::cpu()).unwrap().criteria[0];
    let icl = select_many(&[&x], &cfg.check().unwrap(), &[2], Criterion::Icl, &Exec::cpu()).unwrap().criteria[0];
    assert!((icl - (bic - 2.0 * classification)).abs() < 1e-8 * bic.abs(), "ICL {icl} vs BIC {bic} - 2 x {classification}");
}

#[test]
fn without_censored_observations_the_fit_is_unchanged() {
    let x = simulate::mixture(Family::Normal, &MixParams { alpha: vec![0.5, 0.5], mu: vec![0.0, 3.0], scale: vec![1.0, 1.0] }, 300, 4);
    let plain = fit_many(&[&x], &config(Family::Normal).check().unwrap(), &Exec::cpu()).unwrap().remove(0);
    let none = fit_many(&[&x], &config(Family::Normal).censoring(vec![Censoring::default()]).check().unwrap(), &Exec::cpu()).unwrap().remove(0);
    assert_eq!(plain, none);
}

#[test]
fn what_cannot_be_fitted_is_refused() {
    let x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
    let cens = || Censoring { index: vec![6], lower: vec![7.0], upper: vec![f64::INFINITY] };
    // A count censored in (7.2, 7.8], which holds no whole number.
    let no_count = Censoring { index: vec![6], lower: vec![7.2], upper: vec![7.8] };
    match fit_many(&[&x], &config(Family::Poisson).censoring(vec![no_count]).check().unwrap(), &Exec::cpu()) {
        Err(Error::InvalidArgument { arg, problem }) => assert!(arg == "datasets" && problem.contains("hold a count"), "{problem}"),
        other => panic!("{other:?}"),
    }
    assert!(fit_many(&[&x], &config(Family::Poisson).censoring(vec![cens()]).check().unwrap(), &Exec::cpu()).is_ok());
    let bad = Censoring { index: vec![6], lower: vec![7.0], upper: vec![7.0] };
    match fit_many(&[&x], &config(Family::InvGauss).censoring(vec![bad]).check().unwrap(), &Exec::cpu()) {
        Err(Error::InvalidArgument { problem, .. }) => assert!(problem.contains("lower < upper"), "{problem}"),
        other => panic!("{other:?}"),
    }
}
