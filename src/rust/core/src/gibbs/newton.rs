//! A Metropolis-Hastings step with a Newton proposal, for a scalar whose
//! log density is concave and sums over every row (the interweaving's
//! non-centred mu_k and tau_k). From x0, the proposal is N(x0 - f'/f'', -1/f''): the
//! normal that matches the log density's slope and curvature at x0 (one
//! Newton step, with the curvature's spread). The reverse proposal is built
//! the same way at the candidate, so the step leaves the target exactly
//! invariant. Where the target is nearly normal (many rows: the
//! non-centred mu and tau are pinned by every observation) the candidate is close
//! to an exact draw and is almost always accepted; two passes over the rows
//! replace a slice update's five or more, each of which also evaluates
//! only the density, not its shape. Far in a tail whose curvature changes
//! fast (a Poisson's left tail) the proposals overshoot and are refused;
//! the interweaving's steps follow the centred updates, which keep mu and
//! tau in the bulk and move them regardless.
//!
//! kernels/gibbs.cu (hb_newton_decide) takes the same step.

use super::Rng;

/// A log density's value, slope and curvature at one point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Curve {
    pub f: f64,
    pub d1: f64,
    pub d2: f64,
}

impl Curve {
    /// The Newton proposal's mean and variance from here; None where the
    /// curvature is not negative or a value is not finite (no proposal).
    pub fn proposal(&self, x: f64) -> Option<(f64, f64)> {
        let ok = self.f.is_finite() && self.d1.is_finite() && self.d2 < 0.0 && self.d2.is_finite();
        ok.then(|| (x - self.d1 / self.d2, -1.0 / self.d2)).filter(|(m, v)| m.is_finite() && *v > 0.0 && v.is_finite())
    }
}

/// Log density of N(mean, var) at x, less the constant.
fn log_normal(x: f64, (mean, var): (f64, f64)) -> f64 {
    -0.5 * ((x - mean) * (x - mean) / var + var.ln())
}

/// The log acceptance ratio of a move x0 -> x1, given the target's curves
/// at both; -inf where either has no proposal (the move is refused in both
/// directions, so refusing keeps the balance).
pub fn log_accept(x0: f64, c0: &Curve, x1: f64, c1: &Curve) -> f64 {
    match (c0.proposal(x0), c1.proposal(x1)) {
        (Some(q0), Some(q1)) => c1.f - c0.f + log_normal(x0, q1) - log_normal(x1, q0),
        _ => f64::NEG_INFINITY,
    }
}

/// One step from x0 (whose curve is `c0`), `curve` evaluating the target
/// at a candidate: the new value (x0 when refused) and whether it moved.
/// Draws a normal and then a uniform from `rng`.
pub fn newton_step(x0: f64, c0: &Curve, curve: impl FnOnce(f64) -> Curve, rng: &mut Rng) -> (f64, bool) {
    let Some((mean, var)) = c0.proposal(x0) else {
        return (x0, false);
    };
    let x1 = mean + var.sqrt() * rng.normal();
    let c1 = curve(x1);
    let accept = rng.uniform().ln() < log_accept(x0, c0, x1, &c1);
    if accept && x1.is_finite() {
        (x1, true)
    } else {
        (x0, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gibbs::random::{stream, Block};

    /// A Poisson log-likelihood in a shift d of the log rate (rows with
    /// counts y and base log rates e) plus a normal prior: concave, skewed
    /// where counts are few.
    fn poisson_curve(d: f64, y: &[f64], e: &[f64], prior_sd: f64) -> Curve {
        let mut c = Curve { f: -0.5 * (d / prior_sd).powi(2), d1: -d / prior_sd.powi(2), d2: -1.0 / prior_sd.powi(2) };
        for (&y, &e) in y.iter().zip(e) {
            let m = (e + d).exp();
            c.f += y * (e + d) - m;
            c.d1 += y - m;
            c.d2 -= m;
        }
        c
    }

    /// The chain of steps has the target's mean and variance (by
    /// quadrature) on a skewed target where the proposal is not exact; the
    /// same chain accepting every proposal (no reverse proposal's
    /// correction) misses the mean by many standard errors.
    #[test]
    fn newton_steps_leave_a_skewed_target_invariant() {
        let y = [0.0, 1.0, 0.0, 2.0, 3.0, 1.0, 0.0, 5.0, 1.0, 2.0, 0.0, 1.0];
        let e = [-0.5, 0.3, 0.1, -1.0, 0.2, -0.3, 0.5, 0.9, -0.2, 0.0, -1.5, 0.4];
        let curve = |d: f64| poisson_curve(d, &y, &e, 3.0);
        // Quadrature on a fine grid.
        let grid: Vec<f64> = (0..200_001).map(|i| -15.0 + 25.0 * i as f64 / 200_000.0).collect();
        let top = grid.iter().map(|&d| curve(d).f).fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = grid.iter().map(|&d| (curve(d).f - top).exp()).collect();
        let z: f64 = w.iter().sum();
        let mean = grid.iter().zip(&w).map(|(d, w)| d * w).sum::<f64>() / z;
        let var = grid.iter().zip(&w).map(|(d, w)| (d - mean).powi(2) * w).sum::<f64>() / z;
        let n = 200_000;
        let se = (var / n as f64).sqrt();
        let chain = |corrected: bool| {
            let mut rng = stream(7, 0, 0, Block::Init, 1);
            let (mut x, mut c, mut moved) = (0.0, curve(0.0), 0usize);
            let (mut s1, mut s2) = (0.0, 0.0);
            for _ in 0..n {
                let (x1, m) = if corrected {
                    newton_step(x, &c, curve, &mut rng)
                } else {
                    let (m, v) = c.proposal(x).unwrap();
                    (m + v.sqrt() * rng.normal(), true)
                };
                if m {
                    (x, c) = (x1, curve(x1));
                    moved += 1;
                }
                s1 += x;
                s2 += x * x;
            }
            (s1 / n as f64, s2 / n as f64 - (s1 / n as f64).powi(2), moved as f64 / n as f64)
        };
        let (m, v, rate) = chain(true);
        // Steps are nearly independent (most are accepted): a few
        // standard errors of n independent draws.
        assert!((m - mean).abs() < 5.0 * se, "mean {m} against {mean} (se {se})");
        assert!((v / var - 1.0).abs() < 0.03, "variance {v} against {var}");
        assert!(rate > 0.7 && rate < 1.0, "acceptance {rate}");
        let (m, _, _) = chain(false);
        assert!((m - mean).abs() > 30.0 * se, "uncorrected mean {m} against {mean} (se {se})");
    }

    /// Every family's curve is its log-likelihood and that one's
    /// derivatives (central differences), far into the tails.
    #[test]
    fn loglik_curves_are_the_loglik_and_its_derivatives() {
        use crate::gibbs::{Aux, Family};
        for family in [Family::Gaussian, Family::Binomial, Family::Poisson, Family::NegBinomial] {
            let aux = Aux { value: if family == Family::NegBinomial { 2.5 } else { 0.7 }, cuts: &[] };
            for (y, n) in [(0.0, 1.0), (1.0, 1.0), (3.0, 5.0)] {
                for eta in [-30.0, -3.2, -0.1, 0.0, 0.4, 2.7, 25.0] {
                    let (f, d1, d2) = family.loglik_curve(y, n, eta, aux);
                    let exact = family.loglik_trials(y, n, eta, aux);
                    assert!((f - exact).abs() <= 1e-13 * exact.abs().max(1.0), "{family:?} f at {eta}: {f} against {exact}");
                    let h = 1e-6 * (1.0 + f64::abs(eta));
                    let at = |e: f64| family.loglik_curve(y, n, e, aux);
                    let slope = (at(eta + h).0 - at(eta - h).0) / (2.0 * h);
                    let bend = (at(eta + h).1 - at(eta - h).1) / (2.0 * h);
                    assert!((slope - d1).abs() <= 1e-6 * d1.abs().max(1.0), "{family:?} f' at {eta}: {d1} against {slope}");
                    assert!((bend - d2).abs() <= 1e-6 * d2.abs().max(1.0), "{family:?} f'' at {eta}: {d2} against {bend}");
                    assert!(d2 <= 0.0);
                }
            }
        }
    }

    #[test]
    fn no_proposal_where_the_curve_is_not_concave() {
        let flat = Curve { f: 0.0, d1: 1.0, d2: 0.0 };
        assert_eq!(flat.proposal(0.0), None);
        let c = Curve { f: -1.0, d1: 2.0, d2: -4.0 };
        assert_eq!(c.proposal(1.0), Some((1.5, 0.25)));
        assert_eq!(log_accept(0.0, &flat, 1.0, &c), f64::NEG_INFINITY);
    }
}
