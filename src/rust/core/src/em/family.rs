//! The component families, written as exponential families.
//!
//! For both families the component log-density is linear in two features of
//! the observation, log f(x) = a + b*u + c*v + k(x), so one E-step serves
//! both and the M-step needs only the sums of w, w*u and w*v:
//! - inverse Gaussian: u = x, v = 1/x, k(x) = -1.5 log x;
//! - Normal: u = x - centre, v = u^2, k(x) = 0 (centring keeps v accurate).

use std::f64::consts::PI;

use crate::tolerances::{COLLAPSE_REL, MIN_COMPONENT_WEIGHT};

/// Component distribution of a mixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Inverse Gaussian with mean `mu` and shape `lambda`.
    InvGauss,
    /// Normal with mean `mu` and standard deviation `sigma`.
    Normal,
}

/// Range of inverse Gaussian data (and means) the EM can represent: the
/// E-step computes 2 mu^2 for means mu within the data's range, which must
/// stay a finite normal double (see `data::check_range`).
pub const IG_MIN: f64 = 1.4916681462400413e-154; // 2^-511
pub const IG_MAX: f64 = 6.703903964971299e153; // 2^511

/// Normal data: the largest sum of squared deviations from the centre the
/// E-step's sums may reach (half the largest double: weighted partial sums
/// in any order stay finite), and the smallest mean squared deviation, below
/// which a variance that passes the collapse rule could be subnormal.
pub const NORMAL_MAX_SUM_SQUARES: f64 = f64::MAX / 2.0;
pub const NORMAL_MIN_MEAN_SQUARE: f64 = f64::MIN_POSITIVE / COLLAPSE_REL;

/// Why an M-step failed when a component's total weight vanished.
pub const EMPTY_COMPONENT: &str = "a component lost all its observations";

/// Why an M-step could not give valid parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MStepFailure {
    /// The component's total weight vanished.
    Empty,
    /// The component sits on (nearly) a single value.
    Collapsed,
}

/// Natural parameters of one weighted component: log(alpha * f(x)) = a + b*u + c*v + k(x).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Natural {
    pub a: f64,
    pub b: f64,
    pub c: f64,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::InvGauss => "invgauss",
            Family::Normal => "normal",
        }
    }

    pub fn parse(name: &str) -> Option<Family> {
        match name {
            "invgauss" => Some(Family::InvGauss),
            "normal" => Some(Family::Normal),
            _ => None,
        }
    }

    /// Name of the second component parameter, as the R user sees it.
    pub fn scale_name(self) -> &'static str {
        match self {
            Family::InvGauss => "lambda",
            Family::Normal => "sigma",
        }
    }

    /// Why `x` cannot be an observation of this family, if it cannot.
    pub fn observation_problem(self, x: f64) -> Option<&'static str> {
        if !x.is_finite() {
            return Some("values must be finite (no NA, NaN or Inf)");
        }
        if self == Family::InvGauss && x <= 0.0 {
            return Some("inverse Gaussian data must be strictly positive");
        }
        None
    }

    /// Centre subtracted from the data before computing features.
    pub fn centre(self, x: &[f64]) -> f64 {
        match self {
            Family::InvGauss => 0.0,
            Family::Normal => x.iter().sum::<f64>() / x.len() as f64,
        }
    }

    /// The features (u, v) of one observation.
    #[inline(always)]
    pub fn features(self, x: f64, centre: f64) -> (f64, f64) {
        match self {
            Family::InvGauss => (x, 1.0 / x),
            Family::Normal => {
                let y = x - centre;
                (y, y * y)
            }
        }
    }

    /// The part k(x) of the log-density shared by all components.
    #[inline(always)]
    pub fn shared_term(self, x: f64) -> f64 {
        match self {
            Family::InvGauss => -1.5 * x.ln(),
            Family::Normal => 0.0,
        }
    }

    /// Natural parameters of a component with weight `alpha`.
    pub fn natural(self, alpha: f64, mu: f64, scale: f64, centre: f64) -> Natural {
        match self {
            Family::InvGauss => {
                let lambda = scale;
                Natural {
                    a: alpha.ln() + 0.5 * (lambda / (2.0 * PI)).ln() + lambda / mu,
                    b: -lambda / (2.0 * mu * mu),
                    c: -lambda / 2.0,
                }
            }
            Family::Normal => {
                let m = mu - centre;
                let prec = 1.0 / (scale * scale);
                Natural {
                    a: alpha.ln() - 0.5 * (2.0 * PI).ln() - scale.ln() - 0.5 * m * m * prec,
                    b: m * prec,
                    c: -0.5 * prec,
                }
            }
        }
    }

    /// Exact M-step of one component from its weighted sums over n observations:
    /// `(alpha, mu, scale)`, or why the component cannot continue.
    pub fn m_step(self, sw: f64, su: f64, sv: f64, n: usize, centre: f64) -> Result<(f64, f64, f64), MStepFailure> {
        if !(sw > MIN_COMPONENT_WEIGHT) {
            return Err(MStepFailure::Empty);
        }
        let alpha = sw / n as f64;
        match self {
            Family::InvGauss => {
                let mu = su / sw;
                // The shape update uses the new mu.
                let spread = sv - sw / mu;
                let lambda = sw / spread;
                if mu > 0.0 && mu.is_finite() && spread > COLLAPSE_REL * sv && lambda.is_finite() {
                    Ok((alpha, mu, lambda))
                } else {
                    Err(MStepFailure::Collapsed)
                }
            }
            Family::Normal => {
                let m = su / sw;
                let var = sv / sw - m * m;
                if var > COLLAPSE_REL * (sv / sw) && var.is_finite() && m.is_finite() {
                    Ok((alpha, m + centre, var.sqrt()))
                } else {
                    Err(MStepFailure::Collapsed)
                }
            }
        }
    }

    /// Why a component of this family collapsed in an M-step.
    pub fn collapse_text(self) -> &'static str {
        match self {
            Family::InvGauss => "a component collapsed (its shape became infinite or invalid)",
            Family::Normal => "a component collapsed onto a single value (its sd became zero)",
        }
    }

    /// Log-density of one component, in its textbook form (reference for
    /// tests and for predictions on new data).
    pub fn log_density(self, x: f64, mu: f64, scale: f64) -> f64 {
        match self {
            Family::InvGauss => {
                if x <= 0.0 {
                    return f64::NEG_INFINITY;
                }
                let lambda = scale;
                0.5 * (lambda / (2.0 * PI * x * x * x)).ln() - lambda * (x - mu) * (x - mu) / (2.0 * mu * mu * x)
            }
            Family::Normal => {
                let z = (x - mu) / scale;
                -0.5 * (2.0 * PI).ln() - scale.ln() - 0.5 * z * z
            }
        }
    }

    /// Maximum-likelihood `(mu, scale)` of a few observations, used for
    /// random starts; `None` when they do not determine valid parameters.
    pub fn ml_estimate(self, xs: &[f64]) -> Option<(f64, f64)> {
        let n = xs.len() as f64;
        let mu = xs.iter().sum::<f64>() / n;
        let scale = match self {
            Family::InvGauss => n / xs.iter().map(|x| 1.0 / x - 1.0 / mu).sum::<f64>(),
            Family::Normal => (xs.iter().map(|x| (x - mu) * (x - mu)).sum::<f64>() / n).sqrt(),
        };
        let valid = mu.is_finite() && scale.is_finite() && scale > 0.0 && (self == Family::Normal || mu > 0.0);
        valid.then_some((mu, scale))
    }

    /// Observations drawn per component for a random start: p + 1 with p = 2.
    pub const START_SUBSET: usize = 3;

    /// Free parameters of an M-component mixture (for df and the minimum n).
    pub fn parameters(components: usize) -> usize {
        3 * components - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_form_equals_textbook_density() {
        let cases = [
            (Family::InvGauss, 0.7, 1.3, 2.5, 0.0, [0.05, 0.9, 3.0, 40.0]),
            (Family::Normal, 0.3, -1.0, 0.4, 2.0, [-3.0, -1.0, 0.0, 5.5]),
        ];
        for (fam, alpha, mu, scale, centre, xs) in cases {
            let nat = fam.natural(alpha, mu, scale, centre);
            for x in xs {
                let (u, v) = fam.features(x, centre);
                let got = nat.a + nat.b * u + nat.c * v + fam.shared_term(x);
                let want = alpha.ln() + fam.log_density(x, mu, scale);
                assert!((got - want).abs() < 1e-12 * (1.0 + want.abs()), "{fam:?} x={x}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn ml_estimates_match_closed_forms() {
        let (mu, lambda) = Family::InvGauss.ml_estimate(&[1.0, 2.0, 4.0]).unwrap();
        assert!((mu - 7.0 / 3.0).abs() < 1e-15);
        let want = 3.0 / (1.0 + 0.5 + 0.25 - 3.0 * 3.0 / 7.0);
        assert!((lambda - want).abs() < 1e-12);
        let (mu, sd) = Family::Normal.ml_estimate(&[1.0, 2.0, 6.0]).unwrap();
        assert!((mu - 3.0).abs() < 1e-15 && (sd - (14.0f64 / 3.0).sqrt()).abs() < 1e-15);
        assert!(Family::InvGauss.ml_estimate(&[2.0, 2.0, 2.0]).is_none());
        assert!(Family::Normal.ml_estimate(&[2.0, 2.0, 2.0]).is_none());
    }
}
