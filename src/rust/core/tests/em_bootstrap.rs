//! Bootstrap replicates on the CPU (the reference): the LRT statistics and
//! standard errors do not depend on threads or on which datasets share the
//! call, the LRT separates one component from two, and the standard errors
//! of a one-component Normal fit agree with the textbook sigma / sqrt(n).
//! Censored data's replicates are censored as the data were.

mod common;

use bulkem_core::em::bootstrap::{lrt_replicates, se_replicates, Resample};
use bulkem_core::em::censored::Censoring;
use bulkem_core::em::replicate_censoring::plans;
use bulkem_core::em::{fit_many, simulate, EmConfig, Family, MixFit, MixParams};
use bulkem_core::error::Error;
use bulkem_core::exec::Exec;

fn fit(family: Family, data: &[&[f64]], k: usize) -> Vec<MixFit> {
    let config = EmConfig::new(family, k).random_inits(10).seed(3).max_iters(500).epsilon(1e-10).check().unwrap();
    fit_many(data, &config, &Exec::cpu()).unwrap()
}

fn template(family: Family) -> EmConfig {
    EmConfig::new(family, 1).seed(11).max_iters(500).epsilon(1e-10)
}

fn params(fits: &[MixFit]) -> Vec<MixParams> {
    fits.iter().map(|f| f.params.clone()).collect()
}

fn two_normals(n: usize, gap: f64, seed: u64) -> Vec<f64> {
    let p = MixParams { alpha: vec![0.5, 0.5], mu: vec![0.0, gap], scale: vec![1.0, 1.0] };
    simulate::mixture(Family::Normal, &p, n, seed)
}

#[test]
fn lrt_separates_one_component_from_two() {
    let one = two_normals(300, 0.0, 1);
    let two = two_normals(300, 6.0, 2);
    let data: Vec<&[f64]> = vec![&one, &two];
    let (f1, f2) = (fit(Family::Normal, &data, 1), fit(Family::Normal, &data, 2));
    let b = 60;
    let sizes = [one.len(), two.len()];
    let stats = lrt_replicates(&[0, 1], &sizes, None, &params(&f1), &params(&f2), &template(Family::Normal), b, &Exec::cpu()).unwrap();
    assert_eq!(stats.len(), 2 * b);
    assert!(stats.iter().all(|s| s.is_finite()), "every replicate fits");
    for d in 0..2 {
        let observed = 2.0 * (f2[d].loglik - f1[d].loglik);
        let reps = &stats[d * b..(d + 1) * b];
        // The alternative starts at the observed fit, not at the null: as
        // in mclust, a replicate's may stop at a local optimum below the
        // null's, but rarely.
        let below = reps.iter().filter(|&&s| s < -1e-6).count();
        assert!(below <= b / 10, "dataset {d}: {below} negative statistics: {reps:?}");
        let exceed = reps.iter().filter(|&&s| s >= observed).count();
        if d == 0 {
            assert!(exceed >= 3, "one component: the observed {observed} is exceeded by {exceed} of {b}");
        } else {
            assert_eq!(exceed, 0, "two components 6 sd apart: observed {observed}");
            assert!(reps.iter().all(|&s| s < 30.0), "the null's replicates stay small: {reps:?}");
        }
    }
}

#[test]
fn lrt_replicates_do_not_depend_on_threads_or_neighbours() {
    let x = two_normals(200, 2.0, 4);
    let y = two_normals(150, 3.0, 5);
    let data: Vec<&[f64]> = vec![&x, &y];
    let (f1, f2) = (fit(Family::Normal, &data, 1), fit(Family::Normal, &data, 2));
    let t = template(Family::Normal);
    let both = lrt_replicates(&[0, 1], &[200, 150], None, &params(&f1), &params(&f2), &t, 20, &Exec::cpu()).unwrap();
    let one_thread = lrt_replicates(&[0, 1], &[200, 150], None, &params(&f1), &params(&f2), &t, 20, &Exec::cpu().threads(1)).unwrap();
    assert_eq!(both, one_thread);
    // The second dataset alone, at its global index, draws the same replicates.
    let alone = lrt_replicates(&[1], &[150], None, &params(&f1[1..]), &params(&f2[1..]), &t, 20, &Exec::cpu()).unwrap();
    assert_eq!(&both[20..], &alone[..]);
    let reseeded = lrt_replicates(&[0, 1], &[200, 150], None, &params(&f1), &params(&f2), &t.seed(12), 20, &Exec::cpu()).unwrap();
    assert_ne!(both, reseeded);
}

#[test]
fn normal_standard_errors_match_sigma_over_root_n() {
    let n = 400;
    let x = simulate::mixture(Family::Normal, &MixParams { alpha: vec![1.0], mu: vec![5.0], scale: vec![2.0] }, n, 7);
    let data: Vec<&[f64]> = vec![&x];
    let f = fit(Family::Normal, &data, 1);
    let sigma = f[0].params.scale[0];
    for kind in [Resample::Nonparametric, Resample::Parametric] {
        let s = se_replicates(&[0], &data, None, &params(&f), kind, 0.95, &template(Family::Normal), 400, true, &Exec::cpu()).unwrap();
        assert_eq!(s.len(), 1);
        let s = &s[0];
        assert_eq!(s.ok, 400);
        assert_eq!(s.replicates.as_ref().map(Vec::len), Some(400));
        // The standard error of an sd from 400 replicates is about 3.5 %.
        let se_mu = sigma / (n as f64).sqrt();
        let se_sigma = sigma / (2.0 * n as f64).sqrt();
        assert!((s.se.mu[0] / se_mu - 1.0).abs() < 0.15, "{kind:?}: se(mu) {} vs {se_mu}", s.se.mu[0]);
        assert!((s.se.scale[0] / se_sigma - 1.0).abs() < 0.2, "{kind:?}: se(sigma) {} vs {se_sigma}", s.se.scale[0]);
        assert_eq!(s.se.alpha[0], 0.0, "one component: alpha is 1 in every replicate");
        let (lo, hi) = (s.lower.mu[0], s.upper.mu[0]);
        assert!(lo < f[0].params.mu[0] && f[0].params.mu[0] < hi);
        assert!(((hi - lo) / (2.0 * 1.96 * se_mu) - 1.0).abs() < 0.2, "{kind:?}: interval {lo}..{hi}");
    }
}

#[test]
fn standard_errors_for_every_family_and_two_components() {
    for family in &Family::ALL {
        let p = common::spread_params(*family, 2);
        let x = simulate::mixture(*family, &p, 500, 8);
        let data: Vec<&[f64]> = vec![&x];
        let f = fit(*family, &data, 2);
        assert!(f[0].success(), "{family:?}: {:?}", f[0].message);
        let s = se_replicates(&[0], &data, None, &params(&f), Resample::Nonparametric, 0.9, &template(*family), 30, false, &Exec::cpu()).unwrap();
        let s = &s[0];
        assert!(s.ok >= 25, "{family:?}: {} of 30 replicates fitted", s.ok);
        assert!(s.replicates.is_none());
        let gap = (f[0].params.mu[1] - f[0].params.mu[0]).abs();
        for j in 0..2 {
            assert!(s.se.alpha[j] > 0.0 && s.se.mu[j] > 0.0, "{family:?}: {:?}", s.se);
            // Components that kept their identity: no swapped replicates
            // widening the spread to the distance between the components
            // (not for the gamma's shape, whose replicates have a heavy
            // tail: a few reach shapes of 70).
            assert!(*family == Family::Gamma || s.se.mu[j] < 0.25 * gap, "{family:?}: se {:?} against components {gap} apart", s.se.mu);
            assert!(s.lower.mu[j] <= s.upper.mu[j]);
        }
        // Two components: their alphas are 1 minus each other in every replicate.
        assert!((s.se.alpha[0] - s.se.alpha[1]).abs() < 1e-9 * s.se.alpha[0].max(1.0));
    }
}

#[test]
fn weighted_templates_are_refused() {
    let x = two_normals(50, 0.0, 9);
    let data: Vec<&[f64]> = vec![&x];
    let f = fit(Family::Normal, &data, 1);
    let t = template(Family::Normal).weights(vec![vec![1.0; 50]]);
    match se_replicates(&[0], &data, None, &params(&f), Resample::Parametric, 0.95, &t, 5, false, &Exec::cpu()) {
        Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "weights"),
        other => panic!("expected a weights error, got {other:?}"),
    }
}

/// `x` right-censored at `at` (a time-out): stand-ins at `at`.
fn time_out(x: &[f64], at: f64) -> (Vec<f64>, Censoring) {
    let mut c = Censoring::default();
    let v = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if v > at {
                c.index.push(i);
                c.lower.push(at);
                c.upper.push(f64::INFINITY);
                at
            } else {
                v
            }
        })
        .collect();
    (v, c)
}

#[test]
fn censored_lrt_replicates_are_censored_and_do_not_depend_on_threads() {
    let (one, c1) = time_out(&two_normals(300, 0.0, 6), 0.8);
    let (two, c2) = time_out(&two_normals(300, 6.0, 7), 5.0);
    let data: Vec<&[f64]> = vec![&one, &two];
    let censoring = vec![c1, c2];
    let fit = |k| {
        let config = EmConfig::new(Family::Normal, k).random_inits(10).seed(3).max_iters(500).epsilon(1e-10).censoring(censoring.clone());
        fit_many(&data, &config.check().unwrap(), &Exec::cpu()).unwrap()
    };
    let (f1, f2) = (fit(1), fit(2));
    let p = plans(&data, &censoring, false, &[0, 1]).unwrap();
    let t = template(Family::Normal);
    let b = 40;
    let run = |exec: &Exec, plans| lrt_replicates(&[0, 1], &[300, 300], plans, &params(&f1), &params(&f2), &t, b, exec).unwrap();
    let stats = run(&Exec::cpu(), Some(&p));
    assert_eq!(stats, run(&Exec::cpu().threads(1), Some(&p)));
    assert_ne!(stats, run(&Exec::cpu(), None), "censoring changes the replicates");
    assert!(stats.iter().filter(|s| s.is_finite()).count() >= 2 * b - 4);
    let observed = |d: usize| 2.0 * (f2[d].loglik - f1[d].loglik);
    let exceed = |d: usize| stats[d * b..(d + 1) * b].iter().filter(|&&s| s >= observed(d)).count();
    assert!(exceed(0) >= 3, "one component, 21% censored: {} of {b} exceed {}", exceed(0), observed(0));
    assert_eq!(exceed(1), 0, "two components 6 sd apart, the upper one half censored: observed {}", observed(1));
}

/// A censored dataset's standard error of mu, parametric and resampled,
/// against the uncensored sigma / sqrt(n): censoring 69% of the data at
/// -0.5 sd leaves about 0.35 of the information about mu, so the right
/// standard error is about 1.7 times sigma / sqrt(n).
#[test]
fn censored_standard_errors_carry_the_censoring() {
    let n = 400;
    let (x, c) = time_out(&two_normals(n, 0.0, 9), -0.5);
    let data: Vec<&[f64]> = vec![&x];
    let config = EmConfig::new(Family::Normal, 1).random_inits(5).seed(3).max_iters(2000).epsilon(1e-10).censoring(vec![c.clone()]);
    let f = fit_many(&data, &config.check().unwrap(), &Exec::cpu()).unwrap();
    let textbook = f[0].params.scale[0] / (n as f64).sqrt();
    for kind in [Resample::Parametric, Resample::Nonparametric] {
        let s = se_replicates(&[0], &data, Some(std::slice::from_ref(&c)), &params(&f), kind, 0.95, &template(Family::Normal), 300, false, &Exec::cpu()).unwrap();
        let ratio = s[0].se.mu[0] / textbook;
        assert!(ratio > 1.4 && ratio < 2.1, "{kind:?}: se(mu) {} is {ratio} x sigma / sqrt(n)", s[0].se.mu[0]);
        let plain = se_replicates(&[0], &data, None, &params(&f), kind, 0.95, &template(Family::Normal), 300, false, &Exec::cpu()).unwrap();
        assert_ne!(plain[0].se.mu[0], s[0].se.mu[0]);
    }
}
