//! EM on the CPU backend against hand computation, invariants and recovery.

mod common;

use bulkem_core::em::{cpu, fit_many, simulate, EmConfig, Family, FitStatus, MixParams, Precision, Prepared};
use bulkem_core::exec::Exec;

fn ig_data(n: usize, seed: u64) -> Vec<f64> {
    simulate::mixture(Family::InvGauss, &simulate::demo_params(), n, seed)
}

/// One EM iteration written out directly from the textbook formulas.
fn hand_em_step(family: Family, x: &[f64], p: &MixParams) -> (MixParams, f64) {
    let m = p.components();
    let n = x.len() as f64;
    let dens: Vec<Vec<f64>> = x
        .iter()
        .map(|&xi| (0..m).map(|j| p.alpha[j] * family.log_density(xi, p.mu[j], p.scale[j]).exp()).collect())
        .collect();
    let loglik: f64 = dens.iter().map(|d| d.iter().sum::<f64>().ln()).sum();
    let w: Vec<Vec<f64>> = dens.iter().map(|d| { let s: f64 = d.iter().sum(); d.iter().map(|v| v / s).collect() }).collect();
    let mut out = MixParams { alpha: vec![0.0; m], mu: vec![0.0; m], scale: vec![0.0; m] };
    for j in 0..m {
        let sw: f64 = w.iter().map(|r| r[j]).sum();
        let mu = x.iter().zip(&w).map(|(xi, r)| r[j] * xi).sum::<f64>() / sw;
        out.alpha[j] = sw / n;
        out.mu[j] = mu;
        out.scale[j] = match family {
            Family::InvGauss => sw / x.iter().zip(&w).map(|(xi, r)| r[j] * (1.0 / xi - 1.0 / mu)).sum::<f64>(),
            Family::Normal => (x.iter().zip(&w).map(|(xi, r)| r[j] * (xi - mu).powi(2)).sum::<f64>() / sw).sqrt(),
            other => unreachable!("the hand-written step covers inverse Gaussian and Normal, not {other:?}"),
        };
    }
    (out, loglik)
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-300)
}

#[test]
fn one_em_step_matches_hand_computation() {
    let x = [0.4, 0.9, 1.1, 1.3, 2.0, 2.7, 3.5, 5.0, 8.0, 0.2];
    for family in [Family::InvGauss, Family::Normal] {
        let init = MixParams { alpha: vec![0.4, 0.6], mu: vec![1.0, 3.0], scale: vec![2.0, 1.5] };
        let config = EmConfig::new(family, 2).inits(vec![init.clone()]).max_iters(1).epsilon(0.0).check().unwrap();
        let fit = &fit_many(&[&x[..]], &config, &Exec::cpu()).unwrap()[0];
        let (want, _) = hand_em_step(family, &x, &init);
        let (_, want_ll) = hand_em_step(family, &x, &want);
        assert_eq!(fit.iterations, 1);
        assert_eq!(fit.status, FitStatus::MaxIters);
        for j in 0..2 {
            assert!(close(fit.params.alpha[j], want.alpha[j], 1e-12), "{family:?} alpha");
            assert!(close(fit.params.mu[j], want.mu[j], 1e-12), "{family:?} mu");
            assert!(close(fit.params.scale[j], want.scale[j], 1e-12), "{family:?} scale");
        }
        // The reported log-likelihood is that of the returned parameters.
        assert!(close(fit.loglik, want_ll, 1e-12), "{family:?} loglik {} vs {want_ll}", fit.loglik);
    }
}

#[test]
fn e_step_loglik_matches_direct_sum_for_many_components() {
    // M = 9 uses the heap path and several log blocks.
    let x = ig_data(3000, 3);
    let m = 9;
    let p = MixParams {
        alpha: vec![1.0 / m as f64; m],
        mu: (0..m).map(|j| 0.5 + j as f64 * 0.4).collect(),
        scale: (0..m).map(|j| 0.3 + j as f64).collect(),
    };
    let prep = Prepared::new(Family::InvGauss, &x);
    let nat: Vec<_> = (0..m).map(|j| Family::InvGauss.natural(p.alpha[j], p.mu[j], p.scale[j], 0.0)).collect();
    let mut sums = vec![[0.0; 3]; m];
    let ll = cpu::e_step(&prep, &nat, &mut sums) + prep.shared;
    let (_, want) = hand_em_step(Family::InvGauss, &x, &p);
    assert!(close(ll, want, 1e-12), "{ll} vs {want}");
    let total: f64 = sums.iter().map(|s| s[0]).sum();
    assert!(close(total, x.len() as f64, 1e-12));
}

#[test]
fn loglik_never_decreases() {
    for (family, seed) in [(Family::InvGauss, 1u64), (Family::Normal, 2), (Family::InvGauss, 3)] {
        let x = match family {
            Family::InvGauss => ig_data(500, seed),
            _ => simulate::mixture(
                family,
                &MixParams { alpha: vec![0.5, 0.3, 0.2], mu: vec![0.0, 3.0, 7.0], scale: vec![1.0, 0.5, 2.0] },
                500,
                seed,
            ),
        };
        for m in 1..=4 {
            let config = EmConfig::new(family, m).random_inits(4).seed(seed).max_iters(300).epsilon(0.0).keep_trace(true).check().unwrap();
            let fit = &fit_many(&[&x[..]], &config, &Exec::cpu()).unwrap()[0];
            if fit.status == FitStatus::Failed {
                continue;
            }
            for w in fit.trace.windows(2) {
                assert!(w[1] >= w[0] - 1e-9 * w[0].abs(), "{family:?} M={m}: {} then {}", w[0], w[1]);
            }
        }
    }
}

#[test]
fn identical_results_for_any_thread_count() {
    let data: Vec<Vec<f64>> = (0..24).map(|d| ig_data(300 + 7 * d, 100 + d as u64)).collect();
    let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
    let config = EmConfig::new(Family::InvGauss, 2).random_inits(5).seed(9).check().unwrap();
    let one = fit_many(&refs, &config, &Exec::cpu().threads(1)).unwrap();
    let two = fit_many(&refs, &config, &Exec::cpu().threads(2)).unwrap();
    let three = fit_many(&refs, &config, &Exec::cpu().threads(3)).unwrap();
    // Debug text compares failed starts' NaN log-likelihoods as equal.
    let text = |f: &[bulkem_core::em::MixFit]| format!("{f:?}");
    assert_eq!(text(&one), text(&two));
    assert_eq!(text(&one), text(&three));
    // Chunked calls with a dataset offset give the same answer as one call.
    let head = fit_many(&refs[..10], &config, &Exec::cpu()).unwrap();
    let tail_cfg = EmConfig::new(Family::InvGauss, 2).random_inits(5).seed(9).dataset_offset(10).check().unwrap();
    let tail = fit_many(&refs[10..], &tail_cfg, &Exec::cpu()).unwrap();
    assert_eq!(text(&one), text(&[head, tail].concat()));
}

#[test]
fn recovers_the_demo_mixture() {
    let truth = simulate::demo_params();
    let data: Vec<Vec<f64>> = (0..8).map(|d| ig_data(4000, 500 + d)).collect();
    let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
    let config = EmConfig::new(Family::InvGauss, 2).random_inits(10).seed(1).max_iters(1000).epsilon(1e-8).check().unwrap();
    for fit in fit_many(&refs, &config, &Exec::cpu()).unwrap() {
        assert_eq!(fit.status, FitStatus::Converged);
        assert!((fit.params.alpha[0] - truth.alpha[0]).abs() < 0.05, "{:?}", fit.params);
        assert!((fit.params.mu[0] - truth.mu[0]).abs() < 0.05, "{:?}", fit.params);
        assert!((fit.params.mu[1] - truth.mu[1]).abs() < 0.6, "{:?}", fit.params);
        assert!((fit.params.scale[0] / truth.scale[0] - 1.0).abs() < 0.3, "{:?}", fit.params);
        assert!((fit.params.scale[1] / truth.scale[1] - 1.0).abs() < 0.3, "{:?}", fit.params);
        // The kept start is the best, up to ties (START_TIE_REL).
        let best = fit.start_logliks.iter().cloned().filter(|v| v.is_finite()).fold(f64::NEG_INFINITY, f64::max);
        assert!(fit.loglik >= best - 1e-9 * best.abs(), "{} vs best {best}", fit.loglik);
        let first_tied = fit.start_logliks.iter().position(|&l| l >= best - 1e-9 * best.abs());
        assert_eq!(Some(fit.best_start), first_tied);
    }
}

#[test]
fn unfittable_and_failing_datasets_do_not_affect_others() {
    let good = ig_data(400, 11);
    let data: Vec<&[f64]> = vec![&good, &[1.0, 2.0][..], &[3.0; 20][..], &good];
    let config = EmConfig::new(Family::InvGauss, 2).random_inits(3).seed(4).check().unwrap();
    let fits = fit_many(&data, &config, &Exec::cpu()).unwrap();
    assert_eq!(fits[1].status, FitStatus::Failed);
    assert!(fits[1].message.as_deref().unwrap().contains("at least 5"), "{:?}", fits[1].message);
    assert!(fits[1].params.mu.iter().all(|v| v.is_nan()));
    assert_eq!(fits[2].status, FitStatus::Failed);
    assert!(fits[2].message.as_deref().unwrap().contains("equal"));
    // The good datasets get exactly what they get when fitted alone at their index.
    for d in [0usize, 3] {
        let alone_cfg = EmConfig::new(Family::InvGauss, 2).random_inits(3).seed(4).dataset_offset(d).check().unwrap();
        let alone = fit_many(&[&good[..]], &alone_cfg, &Exec::cpu()).unwrap();
        assert!(fits[d].success());
        assert_eq!(fits[d], alone[0]);
    }
}

fn range_error(family: Family, x: &[f64]) -> Option<String> {
    bulkem_core::em::validate(family, x, 3).err().map(|e| {
        assert_eq!(e.kind(), bulkem_core::ErrorKind::Input, "{e}");
        e.to_string()
    })
}

#[test]
fn inverse_gaussian_data_must_keep_mean_squares_finite_and_normal() {
    use bulkem_core::em::{IG_MAX, IG_MIN};
    // The bounds are exactly where 2 x^2 stops being a finite normal double.
    assert!((2.0 * IG_MAX * IG_MAX).is_finite() && 2.0 * IG_MIN * IG_MIN >= f64::MIN_POSITIVE);
    assert!(range_error(Family::InvGauss, &[1.0, IG_MAX, IG_MIN]).is_none());
    let over = range_error(Family::InvGauss, &[1.0, 2.0, IG_MAX.next_up()]).unwrap();
    assert!(over.contains("dataset 3 has 6.7e153 at position 3") && over.contains("overflows"), "{over}");
    let under = range_error(Family::InvGauss, &[IG_MIN.next_down(), 1.0]).unwrap();
    assert!(under.contains("position 1") && under.contains("underflows"), "{under}");
    // The cases: a "converged" fit with mu = (1.3e149, 2e299) before.
    let e = range_error(Family::InvGauss, &[1e-300, 1e300, 1.0, 2.0, 3.0, 4.0]).unwrap();
    assert!(e.contains("1e-300 at position 1"), "{e}");
    let e = range_error(Family::InvGauss, &[1.0, 2.0, 3.0, 1e308, 5.0]).unwrap();
    assert!(e.contains("1e308 at position 4") && e.contains("overflows"), "{e}");
    // fit_many refuses such data before any work.
    let config = EmConfig::new(Family::InvGauss, 2).check().unwrap();
    let err = fit_many(&[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0][..], &[1e-300, 1e300, 1.0, 2.0, 3.0, 4.0][..]], &config, &Exec::cpu()).unwrap_err();
    assert!(err.to_string().contains("dataset 2"), "{err}");
}

#[test]
fn normal_data_must_keep_sums_of_squares_finite_and_normal() {
    use bulkem_core::em::{NORMAL_MAX_SUM_SQUARES, NORMAL_MIN_MEAN_SQUARE};
    // [a, -a]: centre 0, sum of squares 2 a^2, at the bound and just past it.
    let mut a = (NORMAL_MAX_SUM_SQUARES / 2.0).sqrt();
    while 2.0 * a * a > NORMAL_MAX_SUM_SQUARES {
        a = a.next_down();
    }
    while 2.0 * a.next_up() * a.next_up() <= NORMAL_MAX_SUM_SQUARES {
        a = a.next_up();
    }
    assert!(range_error(Family::Normal, &[a, -a]).is_none());
    let over = range_error(Family::Normal, &[a.next_up(), -a.next_up()]).unwrap();
    assert!(over.contains("dataset 3") && over.contains("overflow"), "{over}");
    let e = range_error(Family::Normal, &[1e308, 1.0, 2.0, 3.0, 4.0]).unwrap();
    assert!(e.contains("overflow") && e.contains("1e308"), "{e}");
    // The sum itself overflows: the centre is not finite.
    let e = range_error(Family::Normal, &[1e308, 1e308, 1.0]).unwrap();
    assert!(e.contains("sum") && e.contains("overflows"), "{e}");
    // Values that differ by too little for their variances to be normal numbers.
    let b = (NORMAL_MIN_MEAN_SQUARE * 1.5).sqrt();
    assert!(range_error(Family::Normal, &[b, -b]).is_none());
    let e = range_error(Family::Normal, &[b / 2.0, -b / 2.0]).unwrap();
    assert!(e.contains("underflow"), "{e}");
    // Squares that underflow to zero although the values differ.
    assert!(range_error(Family::Normal, &[1e-170, 2e-170, 3e-170]).unwrap().contains("underflow"));
    // Empty and equal datasets are left to the fit, which reports them as unfittable.
    assert!(range_error(Family::Normal, &[]).is_none());
    assert!(range_error(Family::InvGauss, &[]).is_none());
    assert!(range_error(Family::Normal, &[5.0; 10]).is_none());
    assert!(range_error(Family::Normal, &[1e-320; 10]).is_none());
}

#[test]
fn data_near_the_range_limits_fit_like_rescaled_data() {
    // Inverse Gaussian mixtures are closed under scaling: x 2^500 gives mu and
    // lambda x 2^500 and a log-likelihood n 500 ln 2 lower.
    let x = ig_data(800, 21);
    let scale = 2f64.powi(500);
    let big: Vec<f64> = x.iter().map(|v| v * scale).collect();
    let tiny: Vec<f64> = x.iter().map(|v| v / scale).collect();
    let config = EmConfig::new(Family::InvGauss, 2).random_inits(3).seed(2).max_iters(100).epsilon(0.0).check().unwrap();
    // One call per dataset: the same random streams, so the same starts, scaled.
    let fits: Vec<_> = [&x, &big, &tiny].iter().map(|d| fit_many(&[&d[..]], &config, &Exec::cpu()).unwrap().remove(0)).collect();
    let offsets = [0.0, -(x.len() as f64) * 500.0 * 2f64.ln(), x.len() as f64 * 500.0 * 2f64.ln()];
    let scales = [1.0, scale, 1.0 / scale];
    for d in 1..3 {
        assert!(fits[d].success(), "{:?}", fits[d].message);
        assert_eq!(fits[d].best_start, fits[0].best_start);
        assert_eq!(fits[d].init.mu.iter().map(|m| m / scales[d]).collect::<Vec<_>>(), fits[0].init.mu);
        for j in 0..2 {
            assert!(close(fits[d].params.mu[j] / scales[d], fits[0].params.mu[j], 1e-8), "{:?} vs {:?}", fits[d].params, fits[0].params);
            assert!(close(fits[d].params.scale[j] / scales[d], fits[0].params.scale[j], 1e-8), "{:?} vs {:?}", fits[d].params, fits[0].params);
        }
        assert!(close(fits[d].loglik - offsets[d], fits[0].loglik, 1e-9), "{} vs {}", fits[d].loglik, fits[0].loglik);
    }
}

#[test]
fn sizes_beyond_memory_are_refused_before_allocating() {
    let x = [1.0, 2.0, 3.0, 4.0];
    let config = EmConfig::new(Family::InvGauss, 1_000_000_000_000).check().unwrap();
    let err = fit_many(&[&x[..]], &config, &Exec::cpu()).unwrap_err();
    assert_eq!(err.kind(), bulkem_core::ErrorKind::Memory);
    assert!(err.to_string().starts_with("`num.components = 1000000000000`"), "{err}");
    assert!(err.to_string().contains(" needs "), "{err}");

    let many: Vec<&[f64]> = vec![&x[..]; 100_000];
    let config = EmConfig::new(Family::Normal, 2).random_inits(1 << 24).check().unwrap();
    let err = fit_many(&many, &config, &Exec::cpu()).unwrap_err();
    assert_eq!(err.kind(), bulkem_core::ErrorKind::Memory);
    assert!(err.to_string().starts_with("`random.inits = 16777216`"), "{err}");
}

#[test]
fn many_starts_keep_only_candidates_and_choose_as_before() {
    // The kept start is the first within the tie tolerance of the best,
    // whatever the order in which the threads finish the starts.
    let x = ig_data(300, 17);
    let config = EmConfig::new(Family::InvGauss, 3).random_inits(64).seed(8).max_iters(50).keep_trace(true).check().unwrap();
    let one = fit_many(&[&x[..]], &config, &Exec::cpu().threads(1)).unwrap();
    let three = fit_many(&[&x[..]], &config, &Exec::cpu().threads(3)).unwrap();
    assert_eq!(one, three);
    let fit = &one[0];
    let ok: Vec<bool> = fit.start_logliks.iter().map(|l| l.is_finite()).collect();
    assert_eq!(Some(fit.best_start), bulkem_core::em::best_start(&fit.start_logliks, &ok));
    assert_eq!(fit.loglik, fit.start_logliks[fit.best_start]);
    assert_eq!(fit.trace.last(), Some(&fit.loglik));
    // Unfittable data: every start reported failed, without running any.
    let few = EmConfig::new(Family::InvGauss, 2).random_inits(1 << 20).check().unwrap();
    let f = &fit_many(&[&[1.0, 2.0][..]], &few, &Exec::cpu()).unwrap()[0];
    assert_eq!(f.start_logliks.len(), 1 << 20);
    assert!(f.message.as_deref().unwrap().contains("all 1048576 starts failed"), "{:?}", f.message);
}

#[test]
fn an_interrupt_stops_one_long_dataset_within_a_second() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let x = ig_data(2_000_000, 5);
    let monitor = Arc::new(bulkem_core::exec::Monitor::new());
    let exec = Exec::cpu().threads(2).with_monitor(monitor.clone());
    let config = EmConfig::new(Family::InvGauss, 2).random_inits(100).max_iters(1000).epsilon(0.0).keep_trace(true).keep_posterior(true).check().unwrap();
    let cancelled_at = std::thread::scope(|scope| {
        let m = monitor.clone();
        let canceller = scope.spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            m.cancel();
            Instant::now()
        });
        let out = fit_many(&[&x[..]], &config, &exec);
        let stopped = Instant::now();
        assert_eq!(out.unwrap_err(), bulkem_core::Error::Interrupted);
        let at = canceller.join().unwrap();
        stopped.duration_since(at)
    });
    assert!(cancelled_at < Duration::from_secs(1), "stopped {cancelled_at:?} after the interrupt");
}

#[test]
fn selection_keeps_each_numbers_own_fit_and_picks_the_best_criterion() {
    use bulkem_core::em::{select_many, Criterion};
    let truth = simulate::demo_params();
    let data: Vec<Vec<f64>> = (0..6).map(|d| simulate::mixture(Family::InvGauss, &truth, 800, 70 + d)).collect();
    let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
    let base = EmConfig::new(Family::InvGauss, 1).random_inits(8).seed(4).max_iters(500).epsilon(1e-8);
    let ks = [1, 2, 3];
    let config = base.clone().check().unwrap();
    for criterion in [Criterion::Bic, Criterion::Aic, Criterion::Icl] {
        let sel = select_many(&refs, &config, &ks, criterion, &Exec::cpu()).unwrap();
        // Each candidate's fit is the one a call with that number alone gives.
        for (k, &m) in ks.iter().enumerate() {
            let alone = fit_many(&refs, &base.with_components(m).check().unwrap(), &Exec::cpu()).unwrap();
            for d in 0..data.len() {
                let f = &alone[d];
                let want = if f.success() {
                    let n = f.n as f64;
                    let df = (3 * m - 1) as f64;
                    let icl_term = match criterion {
                        Criterion::Icl => {
                            // sum_i log max_j z_ij, by brute force.
                            let z: f64 = data[d].iter().map(|&x| {
                                let w: Vec<f64> = (0..m).map(|j| f.params.alpha[j] * Family::InvGauss.log_density(x, f.params.mu[j], f.params.scale[j]).exp()).collect();
                                let total: f64 = w.iter().sum();
                                (w.iter().cloned().fold(0.0, f64::max) / total).ln()
                            }).sum();
                            -2.0 * z
                        }
                        _ => 0.0,
                    };
                    -2.0 * f.loglik + icl_term + if criterion == Criterion::Aic { 2.0 * df } else { df * n.ln() }
                } else {
                    f64::NAN
                };
                let got = sel.criteria[d * ks.len() + k];
                assert!((got.is_nan() && want.is_nan()) || (got - want).abs() <= 1e-8 * want.abs(), "{criterion:?} d={d} M={m}: {got} vs {want}");
            }
        }
        for d in 0..data.len() {
            let row = &sel.criteria[d * ks.len()..(d + 1) * ks.len()];
            let best = row.iter().cloned().filter(|v| v.is_finite()).fold(f64::INFINITY, f64::min);
            assert_eq!(row[sel.chosen[d]], best);
            assert_eq!(sel.fits[d].params.components(), ks[sel.chosen[d]]);
        }
        // Two well-separated components: BIC and ICL choose M = 2.
        if criterion != Criterion::Aic {
            assert!(sel.chosen.iter().all(|&k| k == 1), "{criterion:?}: {:?}", sel.chosen);
        }
    }
    // Given starting values are for one number of components only.
    let p = MixParams { alpha: vec![1.0], mu: vec![1.0], scale: vec![1.0] };
    let given = EmConfig::new(Family::InvGauss, 1).inits(vec![p]).check().unwrap();
    assert!(select_many(&refs, &given, &[1, 2], Criterion::Bic, &Exec::cpu()).is_err());
    assert!(select_many(&refs, &config, &[2, 1], Criterion::Bic, &Exec::cpu()).is_err());
}

/// Each family recovers the mixture it simulated from (5,000 observations,
/// well-separated components), its log-likelihood is the sum of the
/// textbook mixture log-densities, and its M-step is a fixed point.
#[test]
fn every_family_recovers_its_parameters() {
    let nan = f64::NAN;
    let cases = [
        (Family::Gamma, MixParams { alpha: vec![0.35, 0.65], mu: vec![2.0, 9.0], scale: vec![2.0, 0.9] }),
        (Family::LogNormal, MixParams { alpha: vec![0.4, 0.6], mu: vec![0.0, 2.5], scale: vec![0.3, 0.5] }),
        (Family::Poisson, MixParams { alpha: vec![0.3, 0.7], mu: vec![1.5, 14.0], scale: vec![nan, nan] }),
        (Family::Exponential, MixParams { alpha: vec![0.5, 0.5], mu: vec![5.0, 0.1], scale: vec![nan, nan] }),
        (Family::InvGauss, simulate::demo_params()),
    ];
    for (family, truth) in cases {
        let x = simulate::mixture(family, &truth, 5000, 42);
        let config = EmConfig::new(family, 2).random_inits(10).seed(3).max_iters(2000).epsilon(1e-10).check().unwrap();
        let fit = &fit_many(&[&x[..]], &config, &Exec::cpu()).unwrap()[0];
        assert_eq!(fit.status, FitStatus::Converged, "{family:?}: {:?}", fit.message);
        let p = fit.params.clone();
        // Components in the truth's order (by the first parameter's rank).
        let order = |v: &[f64]| if v[0] <= v[1] { [0, 1] } else { [1, 0] };
        let (o_fit, o_true) = (order(&p.mu), order(&truth.mu));
        let tol = if family == Family::Exponential { 0.25 } else { 0.12 };
        for k in 0..2 {
            let (f, t) = (o_fit[k], o_true[k]);
            let close = |a: f64, b: f64| (a - b).abs() <= tol * b.abs().max(0.1);
            assert!(close(p.alpha[f], truth.alpha[t]), "{family:?} alpha: {:?} vs {:?}", p, truth);
            assert!(close(p.mu[f], truth.mu[t]), "{family:?} first: {:?} vs {:?}", p, truth);
            if !truth.scale[t].is_nan() {
                assert!(close(p.scale[f], truth.scale[t]), "{family:?} second: {:?} vs {:?}", p, truth);
            }
        }
        let ll: f64 = bulkem_core::em::mixture_log_density(family, &x, &fit.params).iter().sum();
        assert!((ll - fit.loglik).abs() < 1e-10 * ll.abs(), "{family:?}: loglik {} vs textbook {ll}", fit.loglik);
        // One more EM step from the fit changes nothing beyond rounding.
        let prep = Prepared::new(family, &x);
        let nat: Vec<_> = (0..2).map(|j| family.natural(p.alpha[j], p.mu[j], p.scale[j], prep.centre)).collect();
        let mut sums = vec![[0.0; 3]; 2];
        cpu::e_step(&prep, &nat, &mut sums);
        for j in 0..2 {
            let (a, f1, f2) = family.m_step(sums[j][0], sums[j][1], sums[j][2], prep.total, prep.centre, (p.mu[j], p.scale[j])).unwrap();
            assert!((a - p.alpha[j]).abs() < 1e-6 && (f1 - p.mu[j]).abs() < 1e-6 * p.mu[j].abs().max(1.0), "{family:?}");
            assert!(f2.is_nan() == p.scale[j].is_nan() && (f2.is_nan() || (f2 - p.scale[j]).abs() < 1e-6 * p.scale[j]));
        }
    }
}

/// The lognormal fit of x is the Normal fit of log x: the same parameters
/// (meanlog, sdlog = mu, sigma) and log-likelihoods that differ by sum log x.
#[test]
fn lognormal_is_the_normal_fit_on_the_log_scale() {
    let truth = MixParams { alpha: vec![0.4, 0.6], mu: vec![0.0, 2.0], scale: vec![0.3, 0.6] };
    let x = simulate::mixture(Family::LogNormal, &truth, 2000, 7);
    let logx: Vec<f64> = x.iter().map(|v| v.ln()).collect();
    let fit = |family: Family, data: &[f64]| {
        let config = EmConfig::new(family, 2).random_inits(5).seed(9).starts_by(bulkem_core::em::StartMethod::Subsets).max_iters(500).epsilon(1e-9).check().unwrap();
        fit_many(&[data], &config, &Exec::cpu()).unwrap().remove(0)
    };
    let (ln, nm) = (fit(Family::LogNormal, &x), fit(Family::Normal, &logx));
    assert_eq!(ln.iterations, nm.iterations);
    for j in 0..2 {
        assert!((ln.params.mu[j] - nm.params.mu[j]).abs() < 1e-12 && (ln.params.scale[j] - nm.params.scale[j]).abs() < 1e-12);
    }
    let jacobian: f64 = logx.iter().sum();
    assert!((ln.loglik - (nm.loglik - jacobian)).abs() < 1e-10 * ln.loglik.abs());
}

#[test]
fn family_data_are_checked() {
    let problem = |family: Family, v: f64| family.observation_problem(v).map(str::to_string);
    assert!(problem(Family::Poisson, 2.5).unwrap().contains("counts"));
    assert!(problem(Family::Poisson, -1.0).is_some() && problem(Family::Poisson, 0.0).is_none());
    assert!(problem(Family::Gamma, 0.0).unwrap().contains("positive"));
    assert!(problem(Family::Exponential, 0.0).is_none() && problem(Family::Exponential, -0.1).is_some());
    assert!(problem(Family::LogNormal, -2.0).is_some());
}

/// The mixed E-step's sums and log-likelihood are the float64 E-step's to
/// float32 rounding: weights to about 1e-7 relative (sums of n of them to
/// 1e-6), the log-likelihood to about sqrt(n) * 1e-7 absolute.
#[test]
fn the_mixed_e_step_is_the_double_one_to_float32_rounding() {
    for family in Family::ALL {
        for m in 1..=5 {
            let p = MixParams {
                alpha: vec![1.0 / m as f64; m],
                mu: (0..m).map(|j| match family {
                    Family::Normal | Family::LogNormal => j as f64,
                    _ => 1.0 + 2.0 * j as f64,
                }).collect(),
                scale: (0..m).map(|j| match family {
                    Family::Poisson | Family::Exponential => f64::NAN,
                    Family::InvGauss => 20.0 / (1.0 + j as f64),
                    _ => 0.5 + 0.2 * j as f64,
                }).collect(),
            };
            let x = simulate::mixture(family, &p, 3000, 5 + m as u64);
            let prep = Prepared::new(family, &x);
            let nat: Vec<_> = (0..m).map(|j| family.natural(p.alpha[j], p.mu[j], p.scale[j], prep.centre)).collect();
            let (mut d, mut f) = (vec![[0.0; 3]; m], vec![[0.0; 3]; m]);
            let (ld, lf) = (cpu::e_step(&prep, &nat, &mut d), cpu::e_step_mixed(&prep, &nat, &mut f, cpu::Wanted::LogLik));
            assert!((ld - lf).abs() <= 1e-5 * (x.len() as f64).sqrt() * (1.0 + ld.abs() / x.len() as f64), "{family:?} M={m}: {lf} vs {ld}");
            for j in 0..m {
                for k in 0..3 {
                    let scale: f64 = prep.features().map(|(u, v)| [1.0, u.abs(), v.abs()][k]).sum();
                    assert!((d[j][k] - f[j][k]).abs() <= 2e-6 * scale, "{family:?} M={m} sum {k} of component {j}: {} vs {}", f[j][k], d[j][k]);
                }
            }
            if m == 2 {
                // Sums alone: one component's are the totals less the
                // other's (the one of the larger previous weight; both
                // ways), as close to float64's, and the two add up to the
                // data's totals.
                for previous in [[[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]], [[2.0, 0.0, 0.0], [1.0, 0.0, 0.0]]] {
                    let mut g = previous.to_vec();
                    assert!(cpu::e_step_mixed(&prep, &nat, &mut g, cpu::Wanted::Sums).is_finite());
                    let totals = [x.len() as f64, prep.u.iter().sum::<f64>(), prep.v.iter().sum::<f64>()];
                    for k in 0..3 {
                        let scale: f64 = prep.features().map(|(u, v)| [1.0, u.abs(), v.abs()][k]).sum();
                        assert!((g[0][k] + g[1][k] - totals[k]).abs() <= 1e-12 * scale, "{family:?} sum {k}: {} + {} vs {}", g[0][k], g[1][k], totals[k]);
                        for j in 0..2 {
                            assert!((d[j][k] - g[j][k]).abs() <= 2e-6 * scale, "{family:?} sums only, sum {k} of component {j}: {} vs {}", g[j][k], d[j][k]);
                        }
                    }
                }
            }
        }
    }
}

/// precision = "mixed" keeps the start and the log-likelihood of the
/// float64 fit (to 1e-7 relative) for every family and M = 1..4.
#[test]
fn mixed_precision_fits_match_double() {
    let mut bad = Vec::new();
    for family in Family::ALL {
        for m in 1..=4usize {
            let p = MixParams {
                alpha: vec![1.0 / m as f64; m],
                mu: (0..m).map(|j| match family {
                    Family::Normal | Family::LogNormal => 1.5 * j as f64,
                    Family::Exponential => 1.0 / (1.0 + 5.0 * j as f64),
                    _ => 2.0 + 6.0 * j as f64,
                }).collect(),
                scale: (0..m).map(|j| match family {
                    Family::Poisson | Family::Exponential => f64::NAN,
                    Family::InvGauss => 30.0 / (1.0 + 3.0 * j as f64),
                    Family::Gamma => 4.0,
                    _ => 0.4 + 0.1 * j as f64,
                }).collect(),
            };
            let data: Vec<Vec<f64>> = [150usize, 800, 2000, 4000].iter().enumerate().map(|(i, &n)| simulate::mixture(family, &p, n, 31 * m as u64 + i as u64)).collect();
            let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
            // Converged below the float32 noise (float64 at the end), and a
            // fixed 1,500 iterations (float32 weights throughout: the fixed
            // point moves along flat directions of the likelihood, so only
            // the log-likelihood is compared).
            for (iters, eps) in [(3000, 1e-9), (1500, 0.0)] {
                let config = EmConfig::new(family, m).random_inits(8).seed(2).max_iters(iters).epsilon(eps);
                let double = fit_many(&refs, &config.clone().check().unwrap(), &Exec::cpu()).unwrap();
                let mixed = fit_many(&refs, &config.precision(Precision::Mixed).check().unwrap(), &Exec::cpu()).unwrap();
                for (d, (a, b)) in double.iter().zip(&mixed).enumerate() {
                    if let Some(why) = common::mixed_disagreement(a, b, eps > 0.0) {
                        bad.push(format!("{family:?} M={m} epsilon {eps} dataset {d} (n = {}): {why}", data[d].len()));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} disagreements:\n{}", bad.len(), bad.join("\n"));
}
