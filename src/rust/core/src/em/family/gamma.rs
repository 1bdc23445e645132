//! Gamma components: `shape`, `rate`. With g = exp(centre) the data's
//! geometric mean, u = x / g, v = log x - centre and k(x) = -log x:
//! log f = shape log rate - lgamma(shape) + shape (v + centre) - rate g u + k.
//! The M-step's shape solves log a - digamma(a) = log(mean u) - mean v,
//! whose two terms are both near 0 for tight data, so the difference keeps
//! its digits.

use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma as GammaDist};

use super::incgamma::inc_gamma;
use super::special::{lgamma, log_minus_digamma, solve_digamma, solve_gamma_shape};
use super::{mean_log, positive, FamilyDef, FamilyInfo, MStepFailure, Natural};
use crate::em::data::num;
use crate::error::{Error, Result};
use crate::tolerances::COLLAPSE_REL;

pub(super) struct Gamma;

static INFO: FamilyInfo = FamilyInfo {
    name: "gamma",
    label: "gamma",
    first: "shape",
    second: Some("rate"),
    collapse: "a component collapsed onto a single value (its shape became infinite)",
    discrete: false,
};

impl FamilyDef for Gamma {
    fn info(&self) -> &'static FamilyInfo {
        &INFO
    }

    // sp_inc_gamma's series and continued fraction.
    fn tails_iterate(&self) -> bool {
        true
    }

    fn observation_problem(&self, x: f64) -> Option<&'static str> {
        (x <= 0.0).then_some("gamma data must be strictly positive")
    }

    fn first_invalid(&self, x: &[f64]) -> Option<usize> {
        crate::em::data::position_blocked(x, |v| !crate::em::data::positive_finite(v))
    }

    /// sum(w x / g) must be finite: x / g is at most n for data of n values.
    fn check_range(&self, x: &[f64], dataset: usize) -> Result<()> {
        let g = mean_log(x).exp();
        let total = crate::em::data::ordered_sum(x, |v| v / g);
        if total.is_finite() && g.is_finite() && g > 0.0 {
            return Ok(());
        }
        Err(Error::arg(
            "datasets",
            format!(
                "must have a geometric mean that double precision holds for the gamma EM: dataset {dataset} \
                 (values up to {}) does not. Rescale the data (the rates scale with it).",
                num(x.iter().fold(0.0f64, |m, v| m.max(*v)))
            ),
        ))
    }

    fn centre(&self, x: &[f64]) -> f64 {
        mean_log(x)
    }

    fn features(&self, x: f64, centre: f64) -> (f64, f64) {
        (x / centre.exp(), x.ln() - centre)
    }

    fn shared_term(&self, x: f64) -> f64 {
        -x.ln()
    }

    fn natural(&self, shape: f64, rate: f64, centre: f64) -> Natural {
        Natural { a: shape * rate.ln() - lgamma(shape) + shape * centre, b: -rate * centre.exp(), c: shape }
    }

    /// The shape's Newton solve starts from the previous shape: one or two
    /// steps once EM settles.
    fn m_step(&self, sw: f64, su: f64, sv: f64, centre: f64, previous: (f64, f64)) -> std::result::Result<(f64, f64), MStepFailure> {
        let mean_u = su / sw;
        let s = mean_u.ln() - sv / sw;
        // s ~ cv^2 / 2: below COLLAPSE_REL the component sits on one value.
        if !(s > COLLAPSE_REL && s.is_finite()) {
            return Err(MStepFailure::Collapsed);
        }
        let shape = solve_gamma_shape(s, previous.0);
        let rate = shape / (mean_u * centre.exp());
        if shape.is_finite() && shape > 0.0 && rate.is_finite() && rate > 0.0 {
            Ok((shape, rate))
        } else {
            Err(MStepFailure::Collapsed)
        }
    }

    /// The shape with digamma(shape) = log(rate) + the weighted mean of
    /// log x (v + centre).
    fn first_given_second(&self, sw: f64, _su: f64, sv: f64, centre: f64, rate: f64, previous: f64) -> std::result::Result<f64, MStepFailure> {
        let shape = solve_digamma(rate.ln() + sv / sw + centre, previous);
        if shape.is_finite() && shape > 0.0 { Ok(shape) } else { Err(MStepFailure::Collapsed) }
    }

    /// rate = sum_j shape_j sw_j / sum_j sum_i w x (x = g u, g = exp(centre)).
    fn second_given_first(&self, sums: &[[f64; 3]], shapes: &[f64], centre: f64) -> std::result::Result<f64, MStepFailure> {
        let top: f64 = sums.iter().zip(shapes).map(|(s, a)| a * s[0]).sum();
        let mass: f64 = sums.iter().map(|s| s[1]).sum::<f64>() * centre.exp();
        let rate = top / mass;
        if rate.is_finite() && rate > 0.0 { Ok(rate) } else { Err(MStepFailure::Collapsed) }
    }

    /// With y = rate c and Y = rate X ~ Gamma(shape, 1) (incgamma):
    /// P(X > c) = Q(shape, y), E[x; X > c] = shape Q(shape + 1, y) / rate
    /// and E[log x; X > c] = Q log c + E[log(Y / y); Y > y]; c <= 0 gives
    /// the whole distribution, with E[log x] = digamma(shape) - log rate.
    fn upper_tail(&self, c: f64, shape: f64, rate: f64, centre: f64) -> Option<[f64; 3]> {
        let scale = rate * centre.exp();
        if !(c > 0.0) {
            let digamma = shape.ln() - log_minus_digamma(shape);
            return Some([1.0, shape / scale, digamma - rate.ln() - centre]);
        }
        let t = inc_gamma(shape, rate * c, true);
        Some([t.upper, shape * t.upper_next / scale, t.upper * (c.ln() - centre) + t.log_upper])
    }

    /// P(X <= c) = P(shape, y), E[x; X <= c] = shape P(shape + 1, y) / rate
    /// and E[log x; X <= c] = P log c - E[log(y / Y); Y <= y].
    fn lower_tail(&self, c: f64, shape: f64, rate: f64, centre: f64) -> Option<[f64; 3]> {
        if !(c > 0.0) {
            return Some([0.0; 3]);
        }
        let t = inc_gamma(shape, rate * c, true);
        Some([t.lower, shape * t.lower_next / (rate * centre.exp()), t.lower * (c.ln() - centre) - t.log_lower])
    }

    fn log_density(&self, x: f64, shape: f64, rate: f64) -> f64 {
        if x <= 0.0 {
            return f64::NEG_INFINITY;
        }
        shape * rate.ln() - lgamma(shape) + (shape - 1.0) * x.ln() - rate * x
    }

    fn ml_estimate(&self, xs: &[f64]) -> Option<(f64, f64)> {
        let centre = mean_log(xs);
        let (mut su, mut sv) = (0.0, 0.0);
        for &x in xs {
            let (u, v) = self.features(x, centre);
            su += u;
            sv += v;
        }
        self.m_step(xs.len() as f64, su, sv, centre, (f64::NAN, f64::NAN)).ok()
    }

    fn seed_coordinate(&self, x: f64) -> f64 {
        x.ln()
    }

    /// Mean at the seed with the whole sample's shape.
    fn seeded(&self, seed: f64, whole: (f64, f64)) -> (f64, f64) {
        (whole.0, whole.0 / seed)
    }

    fn check_component(&self, shape: f64, rate: f64) -> std::result::Result<(), String> {
        positive("shape", shape)?;
        positive("rate", rate)
    }

    fn sample(&self, shape: f64, rate: f64, rng: &mut ChaCha8Rng) -> Option<f64> {
        GammaDist::new(shape, 1.0 / rate).ok().map(|d| d.sample(rng))
    }

    fn cuda(&self) -> &'static [&'static str] {
        &[super::special::CUDA, super::incgamma::CUDA, CUDA]
    }
}

const CUDA: &str = r#"
// Gamma (src/em/family/gamma.rs): u = x / exp(centre), v = log x - centre, k = -log x.
__device__ __forceinline__ void fam_features(double x, double centre, double& u, double& v) {
    u = x / exp(centre);
    v = log(x) - centre;
}
__device__ __forceinline__ double fam_shared_term(double x) { return -log(x); }
__device__ __forceinline__ void fam_natural(double shape, double rate, double centre, double& a, double& b, double& c) {
    a = shape * log(rate) - sp_lgamma(shape) + shape * centre;
    b = -rate * exp(centre);
    c = shape;
}
__device__ __forceinline__ int fam_m_step(double sw, double su, double sv, double centre, double& first, double& second) {
    const double mean_u = su / sw;
    const double s = log(mean_u) - sv / sw;
    if (!(s > COLLAPSE_REL && isfinite(s))) return ST_COLLAPSED;
    const double shape = sp_solve_gamma_shape(s, first);
    const double rate = shape / (mean_u * exp(centre));
    if (!(isfinite(shape) && shape > 0.0 && isfinite(rate) && rate > 0.0)) return ST_COLLAPSED;
    first = shape; second = rate;
    return ST_RUNNING;
}
// Constraints: the shape given the rate, and the rate shared by the
// components in `mask` (first_given_second, second_given_first above).
#define FAM_FIRST_GIVEN_SECOND
__device__ int fam_first_given_second(double sw, double su, double sv, double centre, double rate, double& shape) {
    const double a = sp_solve_digamma(log(rate) + sv / sw + centre, shape);
    if (!(isfinite(a) && a > 0.0)) return ST_COLLAPSED;
    shape = a;
    return ST_RUNNING;
}
// Censored data (upper_tail, lower_tail above).
#define FAM_UPPER_TAIL
__device__ void fam_upper_tail(double c, double shape, double rate, double centre, double* t, int lanes) {
    const double scale = rate * exp(centre);
    if (!(c > 0.0)) {
        t[0] = 1.0; t[1] = shape / scale; t[2] = log(shape) - sp_log_minus_digamma(shape) - log(rate) - centre;
        return;
    }
    double g[6];
    sp_inc_gamma(shape, rate * c, true, g, lanes);
    t[0] = g[1]; t[1] = shape * g[3] / scale; t[2] = g[1] * (log(c) - centre) + g[5];
}
__device__ void fam_lower_tail(double c, double shape, double rate, double centre, double* t, int lanes) {
    if (!(c > 0.0)) { t[0] = t[1] = t[2] = 0.0; return; }
    double g[6];
    sp_inc_gamma(shape, rate * c, true, g, lanes);
    t[0] = g[0]; t[1] = shape * g[2] / (rate * exp(centre)); t[2] = g[0] * (log(c) - centre) - g[4];
}
#define FAM_SECOND_GIVEN_FIRST
__device__ int fam_second_given_first(const double* S, const double* shapes, unsigned mask, double centre, double& second) {
    double top = 0.0, mass = 0.0;
    for (int j = 0; j < EM_M; ++j) {
        if (!((mask >> j) & 1u)) continue;
        top += shapes[j] * S[3 * j];
        mass += S[3 * j + 1];
    }
    const double rate = top / (mass * exp(centre));
    if (!(isfinite(rate) && rate > 0.0)) return ST_COLLAPSED;
    second = rate;
    return ST_RUNNING;
}
"#;
