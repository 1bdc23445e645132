//! Constraints on the CPU (the reference; em_gpu checks the GPU against it): held values
//! stay held, a shared second parameter is shared, the log-likelihood never
//! decreases (ECM), constraints that hold at the free optimum change
//! nothing, the degrees of freedom count the free parameters, and
//! constraints that cannot apply are refused with the argument named.

mod common;

use bulkem_core::em::{fit_many, simulate, Constraints, EmConfig, Family, MixFit};
use bulkem_core::error::Error;
use bulkem_core::exec::Exec;

fn fit(family: Family, x: &[f64], c: Option<Constraints>) -> MixFit {
    let mut config = EmConfig::new(family, 2).random_inits(8).seed(4).max_iters(3000).epsilon(1e-12).keep_trace(true);
    if let Some(c) = c {
        config = config.constraints(c);
    }
    fit_many(&[x], &config.check().unwrap(), &Exec::cpu()).unwrap().remove(0)
}

fn data(family: Family, seed: u64) -> Vec<f64> {
    simulate::mixture(family, &common::spread_params(family, 2), 600, seed)
}

fn non_decreasing(f: &MixFit) {
    for w in f.trace.windows(2) {
        assert!(w[1] >= w[0] - 1e-9 * w[0].abs(), "log-likelihood decreased: {} -> {}", w[0], w[1]);
    }
}

#[test]
fn equal_second_is_shared_and_climbs() {
    for family in [Family::Normal, Family::LogNormal, Family::InvGauss, Family::Gamma] {
        let x = data(family, 1);
        let free = fit(family, &x, None);
        let eq = fit(family, &x, Some(Constraints { equal_second: true, ..Default::default() }));
        assert!(eq.success(), "{family:?}: {:?}", eq.message);
        assert_eq!(eq.params.scale[0], eq.params.scale[1], "{family:?}");
        assert!(eq.loglik <= free.loglik + 1e-6 * free.loglik.abs(), "{family:?}: a constrained optimum above the free one");
        non_decreasing(&eq);
    }
}

#[test]
fn held_values_stay_held_and_the_fit_climbs() {
    for family in Family::ALL {
        let x = data(family, 2);
        let free = fit(family, &x, None);
        let p = &free.params;
        // Hold the second component's first parameter away from its free
        // value, and the first component's weight.
        let c = Constraints { alpha: vec![Some(0.4), None], first: vec![None, Some(p.mu[1] * 1.1)], ..Default::default() };
        let f = fit(family, &x, Some(c));
        assert!(f.success(), "{family:?}: {:?}", f.message);
        assert_eq!(f.params.alpha, vec![0.4, 0.6], "{family:?}");
        assert_eq!(f.params.mu[1], p.mu[1] * 1.1, "{family:?}");
        assert!(f.loglik < free.loglik, "{family:?}");
        non_decreasing(&f);
    }
}

#[test]
fn constraints_met_by_the_free_optimum_change_nothing() {
    for family in [Family::Normal, Family::InvGauss, Family::Gamma, Family::Poisson] {
        let x = data(family, 3);
        let free = fit(family, &x, None);
        let p = &free.params;
        let mut c = Constraints { first: vec![Some(p.mu[0]), None], alpha: vec![None, Some(p.alpha[1])], ..Default::default() };
        if family.info().second.is_some() {
            c.second = vec![None, Some(p.scale[1])];
        }
        let f = fit(family, &x, Some(c));
        assert!((f.loglik - free.loglik).abs() < 1e-8 * free.loglik.abs(), "{family:?}: {} vs {}", f.loglik, free.loglik);
        for (a, b) in f.params.mu.iter().zip(&p.mu) {
            assert!((a / b - 1.0).abs() < 1e-5, "{family:?}: mu {:?} vs {:?}", f.params.mu, p.mu);
        }
    }
}

#[test]
fn degrees_of_freedom_count_free_parameters() {
    let df = |family: Family, c: Constraints| EmConfig::new(family, 3).constraints(c).check().unwrap().free_parameters();
    assert_eq!(EmConfig::new(Family::Normal, 3).free_parameters(), 8);
    assert_eq!(df(Family::Normal, Constraints { equal_second: true, ..Default::default() }), 6);
    assert_eq!(df(Family::Normal, Constraints { first: vec![Some(0.0), None, None], ..Default::default() }), 7);
    assert_eq!(df(Family::Normal, Constraints { alpha: vec![Some(0.2), Some(0.3), None], ..Default::default() }), 6);
    assert_eq!(df(Family::Poisson, Constraints { first: vec![None, Some(2.0), None], ..Default::default() }), 4);
}

#[test]
fn constraints_that_cannot_apply_are_refused() {
    let bad = |family: Family, c: Constraints, arg: &str| match EmConfig::new(family, 2).constraints(c).check() {
        Err(Error::InvalidArgument { arg: a, problem }) => assert_eq!(a, arg, "{problem}"),
        other => panic!("expected an error about {arg}, got {other:?}"),
    };
    bad(Family::Poisson, Constraints { equal_second: true, ..Default::default() }, "equal");
    bad(Family::Normal, Constraints { first: vec![Some(1.0)], ..Default::default() }, "fixed");
    bad(Family::Normal, Constraints { alpha: vec![Some(0.7), Some(0.7)], ..Default::default() }, "fixed");
    bad(Family::Normal, Constraints { alpha: vec![Some(1.0), None], ..Default::default() }, "fixed");
    bad(Family::InvGauss, Constraints { first: vec![Some(-1.0), None], ..Default::default() }, "fixed");
    bad(Family::Normal, Constraints { second: vec![Some(0.0), None], ..Default::default() }, "fixed");
    bad(Family::Normal, Constraints { equal_second: true, second: vec![Some(1.0), None], ..Default::default() }, "fixed");
}
