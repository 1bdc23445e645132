//! Observation weights on the CPU (the reference): integer weights fit as
//! the data with each observation repeated, the weighted log-likelihood is
//! the weighted sum of log-densities, criteria count the total weight, and
//! bad weights are refused with the argument named.

mod common;
use common::{integer_weights, spread_params};

use bulkem_core::em::{fit_many, mixture_log_density, select_many, simulate, Criterion, EmConfig, Family, MixFit};
use bulkem_core::error::Error;
use bulkem_core::exec::Exec;

fn rel(a: f64, b: f64) -> f64 {
    if a == b { 0.0 } else { (a - b).abs() / b.abs().max(1e-300) }
}

/// Where two fits differ beyond `tol` (relative, every parameter and the
/// log-likelihood), or None. Converged fits may stop up to 10 iterations
/// apart: the change of the log-likelihood crosses epsilon within rounding
/// (10: a slow, flat climb).
fn differs(a: &MixFit, b: &MixFit, tol: f64) -> Option<String> {
    let slack = if a.status == bulkem_core::em::FitStatus::Converged { 10 } else { 0 };
    if a.status != b.status || a.iterations.abs_diff(b.iterations) > slack {
        return Some(format!("status/iterations {:?}/{} vs {:?}/{}", a.status, a.iterations, b.status, b.iterations));
    }
    if rel(a.loglik, b.loglik) > tol {
        return Some(format!("loglik {} vs {}", a.loglik, b.loglik));
    }
    let (p, q) = (&a.params, &b.params);
    for (name, x, y) in [("alpha", &p.alpha, &q.alpha), ("first", &p.mu, &q.mu), ("second", &p.scale, &q.scale)] {
        for (u, v) in x.iter().zip(y) {
            if !(u.is_nan() && v.is_nan()) && rel(*u, *v) > tol {
                return Some(format!("{name} {x:?} vs {y:?}"));
            }
        }
    }
    None
}

#[test]
fn integer_weights_fit_as_repeated_observations() {
    let mut bad = Vec::new();
    for family in Family::ALL {
        for m in 1..=3 {
            let p = spread_params(family, m);
            for (i, n) in [60usize, 400, 3000].into_iter().enumerate() {
                let x = simulate::mixture(family, &p, n, 900 + 10 * m as u64 + i as u64);
                let (w, repeated) = integer_weights(&x, i as u64 + 7);
                // The same start for both (random starts draw from the data,
                // which differ), a fixed number of iterations and converged.
                for (iters, eps) in [(150, 0.0), (2000, 1e-10)] {
                    let config = EmConfig::new(family, m).inits(vec![p.clone()]).max_iters(iters).epsilon(eps);
                    let weighted = fit_many(&[&x[..]], &config.clone().weights(vec![w.clone()]).check().unwrap(), &Exec::cpu()).unwrap();
                    let plain = fit_many(&[&repeated[..]], &config.check().unwrap(), &Exec::cpu()).unwrap();
                    let (a, b) = (&weighted[0], &plain[0]);
                    assert_eq!(a.n, n);
                    assert_eq!(a.weight_total, Some(repeated.len() as f64));
                    assert_eq!(a.nobs(), b.nobs());
                    // Fixed iterations: the same fit to 1e-8. Converged: the
                    // two may stop an iteration apart, which moves
                    // parameters along a flat likelihood by about 1e-7.
                    let params_tol = if eps == 0.0 { 1e-8 } else { 1e-5 };
                    if rel(a.loglik, b.loglik) > 1e-10 {
                        bad.push(format!("{family:?} M={m} n={n} epsilon {eps}: loglik {} vs {}", a.loglik, b.loglik));
                    }
                    if let Some(why) = differs(a, b, params_tol) {
                        bad.push(format!("{family:?} M={m} n={n} epsilon {eps}: {why}"));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} disagreements:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn weighted_loglik_is_the_weighted_sum_of_log_densities() {
    for family in Family::ALL {
        let p = spread_params(family, 2);
        let x = simulate::mixture(family, &p, 500, 41);
        let w: Vec<f64> = (0..x.len()).map(|i| 0.25 + (i % 7) as f64 * 0.5).collect();
        let config = EmConfig::new(family, 2).random_inits(4).seed(3).weights(vec![w.clone()]).check().unwrap();
        let fit = &fit_many(&[&x[..]], &config, &Exec::cpu()).unwrap()[0];
        assert!(fit.success(), "{family:?}: {:?}", fit.message);
        let direct: f64 = mixture_log_density(family, &x, &fit.params).iter().zip(&w).map(|(l, wi)| wi * l).sum();
        assert!(rel(fit.loglik, direct) < 1e-10, "{family:?}: {} vs {direct}", fit.loglik);
        // The mixing proportions sum to 1 over the total weight.
        assert!((fit.params.alpha.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(fit.weight_total, Some(w.iter().sum()));
    }
}

#[test]
fn unit_weights_change_nothing_and_zero_weights_drop_observations() {
    let p = spread_params(Family::InvGauss, 2);
    let x = simulate::mixture(Family::InvGauss, &p, 800, 5);
    let base = EmConfig::new(Family::InvGauss, 2).random_inits(6).seed(9).epsilon(1e-10).max_iters(3000);
    let plain = fit_many(&[&x[..]], &base.clone().check().unwrap(), &Exec::cpu()).unwrap();
    let ones = fit_many(&[&x[..]], &base.clone().weights(vec![vec![1.0; x.len()]]).check().unwrap(), &Exec::cpu()).unwrap();
    assert!(differs(&plain[0], &ones[0], 1e-10).is_none(), "{:?}", differs(&plain[0], &ones[0], 1e-10));
    // Zero weights on the last 300 observations: the fit of the first 500,
    // from the same start.
    let start = vec![plain[0].params.clone()];
    let w: Vec<f64> = (0..x.len()).map(|i| if i < 500 { 1.0 } else { 0.0 }).collect();
    let given = base.inits(start);
    let zeroed = fit_many(&[&x[..]], &given.clone().weights(vec![w]).check().unwrap(), &Exec::cpu()).unwrap();
    let head = fit_many(&[&x[..500]], &given.check().unwrap(), &Exec::cpu()).unwrap();
    assert!(differs(&zeroed[0], &head[0], 1e-8).is_none(), "{:?}", differs(&zeroed[0], &head[0], 1e-8));
}

#[test]
fn criteria_count_the_total_weight() {
    let p = spread_params(Family::Normal, 2);
    let x = simulate::mixture(Family::Normal, &p, 300, 12);
    let (w, repeated) = integer_weights(&x, 3);
    let config = EmConfig::new(Family::Normal, 1).random_inits(5).seed(1).epsilon(1e-10).max_iters(2000);
    let weighted = select_many(&[&x[..]], &config.clone().weights(vec![w]).check().unwrap(), &[1, 2, 3], Criterion::Bic, &Exec::cpu()).unwrap();
    let fit = &weighted.fits[0];
    let df = Family::Normal.parameters(weighted.chosen[0] + 1) as f64;
    let bic = -2.0 * fit.loglik + df * (repeated.len() as f64).ln();
    assert!(rel(weighted.criteria[weighted.chosen[0]], bic) < 1e-12, "{} vs {bic}", weighted.criteria[weighted.chosen[0]]);
}

#[test]
fn bad_weights_are_refused_naming_the_dataset() {
    let x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let fit = |w: Vec<Vec<f64>>| fit_many(&[&x[..]], &EmConfig::new(Family::Normal, 1).weights(w).check().unwrap(), &Exec::cpu());
    let message = |w: Vec<Vec<f64>>| match fit(w) {
        Err(Error::InvalidArgument { arg, problem: message }) => {
            assert_eq!(arg, "weights");
            message
        }
        other => panic!("expected a weights error, got {other:?}"),
    };
    assert!(message(vec![]).contains("one weight vector per dataset (1), not 0"));
    assert!(message(vec![vec![1.0; 5]]).contains("dataset 1 has 6 observations but 5 weights"));
    assert!(message(vec![vec![1.0, 1.0, -1.0, 1.0, 1.0, 1.0]]).contains("weight 3 of dataset 1 is -1"));
    assert!(message(vec![vec![1.0, f64::NAN, 1.0, 1.0, 1.0, 1.0]]).contains("weight 2"));
    assert!(message(vec![vec![0.0; 6]]).contains("every weight of dataset 1 is 0"));
    // Too few observations of weight > 0: that dataset fails, with why.
    let few = fit(vec![vec![1.0, 1.0, 0.0, 0.0, 0.0, 0.0]]).unwrap();
    assert!(!few[0].success());
    assert!(few[0].message.as_deref().unwrap_or("").contains("of weight > 0"), "{:?}", few[0].message);
}

/// Converging weighted fits take an iteration's log-likelihood only where
/// the stopping rule could be met (`em::cpu`'s Q-gain bound); with a trace
/// kept they take every one. Both must stop at the same iteration with the
/// same bits: status, iterations, log-likelihood and parameters.
#[test]
fn converging_weighted_fits_stop_where_every_loglik_would() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for family in Family::ALL {
        for m in 1..=4 {
            let p = spread_params(family, m);
            for (i, n) in [50usize, 700, 4000].into_iter().enumerate() {
                let x = simulate::mixture(family, &p, n, 300 + 10 * m as u64 + i as u64);
                // Real-valued weights in (0, 2), some 0.
                let mut state = 17 + i as u64;
                let w: Vec<f64> = x
                    .iter()
                    .map(|_| {
                        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let u = (state >> 11) as f64 / (1u64 << 53) as f64;
                        if u < 0.05 { 0.0 } else { 2.0 * u }
                    })
                    .collect();
                for eps in [1e-2, 1e-6, 1e-10] {
                    let config = EmConfig::new(family, m).random_inits(3).seed(5 + i as u64).max_iters(400).epsilon(eps).weights(vec![w.clone()]);
                    let lazy = fit_many(&[&x[..]], &config.clone().check().unwrap(), &Exec::cpu()).unwrap();
                    let every = fit_many(&[&x[..]], &config.keep_trace(true).check().unwrap(), &Exec::cpu()).unwrap();
                    let (a, b) = (&lazy[0], &every[0]);
                    checked += 1;
                    let same = a.status == b.status
                        && a.iterations == b.iterations
                        && a.loglik.to_bits() == b.loglik.to_bits()
                        && [(&a.params.alpha, &b.params.alpha), (&a.params.mu, &b.params.mu), (&a.params.scale, &b.params.scale)]
                            .iter()
                            .all(|(x, y)| x.iter().zip(y.iter()).all(|(u, v)| u.to_bits() == v.to_bits()));
                    if !same {
                        bad.push(format!(
                            "{family:?} M={m} n={n} epsilon {eps}: {:?}/{} ll {} vs {:?}/{} ll {}",
                            a.status, a.iterations, a.loglik, b.status, b.iterations, b.loglik
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 100);
    assert!(bad.is_empty(), "{} of {checked} differ:\n{}", bad.len(), bad.join("\n"));
}
