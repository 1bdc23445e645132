//! Inverse Gaussian components: mean `mu`, shape `lambda`.
//! u = x, v = 1/x, k(x) = -1.5 log x.

use std::f64::consts::PI;

use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, InverseGaussian};

use super::special;
use super::{positive, FamilyDef, FamilyInfo, MStepFailure, Natural};
use crate::em::data::{first_where, num};
use crate::error::{Error, Result};
use crate::tolerances::COLLAPSE_REL;

/// Range of inverse Gaussian data (and means) the EM can represent: the
/// E-step computes 2 mu^2 for means mu within the data's range, which must
/// stay a finite normal double (see `check_range`).
pub const IG_MIN: f64 = 1.4916681462400413e-154; // 2^-511
pub const IG_MAX: f64 = 6.703903964971299e153; // 2^511

/// Whether `v` lies outside [IG_MIN, IG_MAX] (NaN included): the range by
/// the bits, monotone in positive doubles, with negatives and NaN wrapping
/// above the span; a test that vectorises.
fn outside_range(v: f64) -> bool {
    const LO: u64 = IG_MIN.to_bits();
    const SPAN: u64 = IG_MAX.to_bits() - IG_MIN.to_bits();
    v.to_bits().wrapping_sub(LO) > SPAN
}

pub(super) struct InvGauss;

static INFO: FamilyInfo = FamilyInfo {
    name: "invgauss",
    label: "inverse Gaussian",
    first: "mu",
    second: Some("lambda"),
    collapse: "a component collapsed (its shape became infinite or invalid)",
    discrete: false,
};

impl FamilyDef for InvGauss {
    fn info(&self) -> &'static FamilyInfo {
        &INFO
    }

    fn observation_problem(&self, x: f64) -> Option<&'static str> {
        (x <= 0.0).then_some("inverse Gaussian data must be strictly positive")
    }

    fn first_invalid(&self, x: &[f64]) -> Option<usize> {
        crate::em::data::position_blocked(x, |v| !crate::em::data::positive_finite(v))
    }

    /// The E-step evaluates b = -lambda / (2 mu^2) for every component, and
    /// mu is a weighted mean of the data, so 2 x^2 must be a finite normal
    /// number for every x: x in [IG_MIN, IG_MAX] = [2^-511, 2^511]. Within
    /// that range the statistics sum(w x) and sum(w / x) are below n 2^511
    /// (finite for any n), lambda lies between min(x) and 1e10 max(x) (the
    /// collapse rule bounds lambda / mu by 1 / COLLAPSE_REL), and b, c =
    /// -lambda / 2 and a are finite.
    fn check_range(&self, x: &[f64], dataset: usize) -> Result<()> {
        let Some(i) = first_where(x, outside_range) else { return Ok(()) };
        let (v, which) = (x[i], if x[i] > IG_MAX { "overflows" } else { "underflows" });
        Err(Error::arg(
            "datasets",
            format!(
                "must lie between {} and {} for the inverse Gaussian EM, which squares the component means: \
                 dataset {dataset} has {} at position {}, whose square {which} double precision. \
                 Rescale the data (mu and lambda scale with it).",
                num(IG_MIN),
                num(IG_MAX),
                num(v),
                i + 1
            ),
        ))
    }

    /// The range lies within the positive finite values, so its test
    /// alone passes exactly when both checks do.
    fn valid_in_one_pass(&self, x: &[f64]) -> bool {
        crate::em::data::position_blocked(x, outside_range).is_none()
    }

    fn features(&self, x: f64, _centre: f64) -> (f64, f64) {
        (x, 1.0 / x)
    }

    fn shared_term(&self, x: f64) -> f64 {
        -1.5 * x.ln()
    }

    fn natural(&self, mu: f64, lambda: f64, _centre: f64) -> Natural {
        Natural { a: 0.5 * (lambda / (2.0 * PI)).ln() + lambda / mu, b: -lambda / (2.0 * mu * mu), c: -lambda / 2.0 }
    }

    fn m_step(&self, sw: f64, su: f64, sv: f64, _centre: f64, _previous: (f64, f64)) -> std::result::Result<(f64, f64), MStepFailure> {
        let mu = su / sw;
        // The shape update uses the new mu.
        let spread = sv - sw / mu;
        let lambda = sw / spread;
        if mu > 0.0 && mu.is_finite() && spread > COLLAPSE_REL * sv && lambda.is_finite() {
            Ok((mu, lambda))
        } else {
            Err(MStepFailure::Collapsed)
        }
    }

    /// lambda = sum w / sum_j sum_i w (x - mu_j)^2 / (mu_j^2 x), the inner
    /// sum being su / mu^2 - 2 sw / mu + sv; the collapse rule of m_step.
    fn second_given_first(&self, sums: &[[f64; 3]], mus: &[f64], _centre: f64) -> std::result::Result<f64, MStepFailure> {
        let (mut sw, mut sv, mut spread) = (0.0, 0.0, 0.0);
        for (s, &mu) in sums.iter().zip(mus) {
            sw += s[0];
            sv += s[2];
            spread += s[1] / (mu * mu) - 2.0 * s[0] / mu + s[2];
        }
        let lambda = sw / spread;
        if spread > COLLAPSE_REL * sv && lambda.is_finite() {
            Ok(lambda)
        } else {
            Err(MStepFailure::Collapsed)
        }
    }

    /// With z1 = sqrt(lambda/c) (c/mu - 1), z2 = -sqrt(lambda/c) (c/mu + 1)
    /// and E2 = exp(2 lambda/mu) Phi(z2) (in logs: each factor may
    /// overflow or underflow): P(X > c) = Q(z1) - E2, E[X; X > c] =
    /// mu (Q(z1) + E2), E[1/X; X > c] = (1/mu + 1/lambda) Q(z1) -
    /// (1/lambda - 1/mu) E2 - 2 phi(z1) / sqrt(lambda c) (the derivatives
    /// of these are -f, -x f and -f/x; the last found by matching terms).
    fn upper_tail(&self, c: f64, mu: f64, lambda: f64, _centre: f64) -> Option<[f64; 3]> {
        if !(c > 0.0) {
            return Some([1.0, mu, 1.0 / mu + 1.0 / lambda]);
        }
        let root = (lambda / c).sqrt();
        let z1 = root * (c / mu - 1.0);
        let z2 = -root * (c / mu + 1.0);
        let e2 = (2.0 * lambda / mu + special::log_norm_cdf(z2)).exp();
        let q1 = special::norm_upper(z1);
        let phi1 = special::norm_pdf(z1);
        let p = (q1 - e2).max(0.0);
        let m1 = mu * (q1 + e2);
        let inv = (1.0 / mu + 1.0 / lambda) * q1 - (1.0 / lambda - 1.0 / mu) * e2 - 2.0 * phi1 / (lambda * c).sqrt();
        Some([p, m1, inv.max(0.0)])
    }

    /// P(X <= c) = Phi(z1) + E2, E[X; X <= c] = mu (Phi(z1) - E2) and
    /// E[1/X; X <= c] = (Phi(z1) - E2) / mu + (Phi(z1) + E2) / lambda +
    /// 2 phi(z1) / sqrt(lambda c) (the whole less the upper tail's; every
    /// term non-negative).
    fn lower_tail(&self, c: f64, mu: f64, lambda: f64, _centre: f64) -> Option<[f64; 3]> {
        if !(c > 0.0) {
            return Some([0.0; 3]);
        }
        let root = (lambda / c).sqrt();
        let z1 = root * (c / mu - 1.0);
        let z2 = -root * (c / mu + 1.0);
        let e2 = (2.0 * lambda / mu + special::log_norm_cdf(z2)).exp();
        let p1 = special::norm_upper(-z1);
        let phi1 = special::norm_pdf(z1);
        let diff = (p1 - e2).max(0.0);
        Some([p1 + e2, mu * diff, diff / mu + (p1 + e2) / lambda + 2.0 * phi1 / (lambda * c).sqrt()])
    }

    fn log_density(&self, x: f64, mu: f64, lambda: f64) -> f64 {
        if x <= 0.0 {
            return f64::NEG_INFINITY;
        }
        // lambda (x - mu)^2 / (2 mu^2 x) = lambda r^2 / (2x) with r = x/mu - 1,
        // in logs and with the square split: neither x^3, mu^2 nor (x - mu)^2
        // leaves double precision for x or mu far out (1e-300, 1e300; mu =
        // 1e200 gives the Levy limit).
        let r = x / mu - 1.0;
        let mut q = lambda * (r * (r / (2.0 * x)));
        if !q.is_finite() && r.is_finite() {
            // A product that overflowed part-way, in logs (inf only if q does).
            q = (lambda.ln() + 2.0 * r.abs().ln() - (2.0 * x).ln()).exp();
        }
        0.5 * (lambda.ln() - (2.0 * PI).ln() - 3.0 * x.ln()) - q
    }

    fn ml_estimate(&self, xs: &[f64]) -> Option<(f64, f64)> {
        let n = xs.len() as f64;
        let mu = xs.iter().sum::<f64>() / n;
        let lambda = n / xs.iter().map(|x| 1.0 / x - 1.0 / mu).sum::<f64>();
        (mu > 0.0 && mu.is_finite() && lambda > 0.0 && lambda.is_finite()).then_some((mu, lambda))
    }

    /// Inverse Gaussian components differ by factors.
    fn seed_coordinate(&self, x: f64) -> f64 {
        x.ln()
    }

    fn seeded(&self, seed: f64, whole: (f64, f64)) -> (f64, f64) {
        (seed, whole.1)
    }

    fn check_component(&self, mu: f64, lambda: f64) -> std::result::Result<(), String> {
        positive("mu", mu)?;
        if !(IG_MIN..=IG_MAX).contains(&mu) {
            return Err(format!("mu must lie between {} and {} (the E-step squares it)", num(IG_MIN), num(IG_MAX)));
        }
        positive("lambda", lambda)
    }

    fn sample(&self, mu: f64, lambda: f64, rng: &mut ChaCha8Rng) -> Option<f64> {
        InverseGaussian::new(mu, lambda).ok().map(|d| d.sample(rng))
    }

    fn cuda(&self) -> &'static [&'static str] {
        &[CUDA]
    }
}

const CUDA: &str = r#"
// Inverse Gaussian (src/em/family/invgauss.rs): u = x, v = 1/x, k = -1.5 log x.
__device__ __forceinline__ void fam_features(double x, double centre, double& u, double& v) {
    u = x;
    // The fast reciprocal needs x well inside the normal range; it always is
    // for data, but extreme values take the IEEE division.
    v = (x > 1e-300 && x < 1e300) ? rcp_sum(x) : 1.0 / x;
}
__device__ __forceinline__ double fam_shared_term(double x) { return -1.5 * log(x); }
__device__ __forceinline__ void fam_natural(double mu, double s, double centre, double& a, double& b, double& c) {
    a = 0.5 * log(s / TWO_PI) + s / mu;
    b = -s / (2.0 * mu * mu);
    c = -s / 2.0;
}
__device__ __forceinline__ int fam_m_step(double sw, double su, double sv, double centre, double& first, double& second) {
    const double mu = su / sw;
    const double spread = sv - sw / mu;  // uses the new mu
    const double lambda = sw / spread;
    if (!(mu > 0.0 && isfinite(mu) && spread > COLLAPSE_REL * sv && isfinite(lambda))) return ST_COLLAPSED;
    first = mu; second = lambda;
    return ST_RUNNING;
}
// The shape shared by the components in `mask` (constraints).
#define FAM_SECOND_GIVEN_FIRST
__device__ int fam_second_given_first(const double* S, const double* mus, unsigned mask, double centre, double& second) {
    double sw = 0.0, sv = 0.0, spread = 0.0;
    for (int j = 0; j < EM_M; ++j) {
        if (!((mask >> j) & 1u)) continue;
        const double mu = mus[j];
        sw += S[3 * j];
        sv += S[3 * j + 2];
        spread += S[3 * j + 1] / (mu * mu) - 2.0 * S[3 * j] / mu + S[3 * j + 2];
    }
    const double lambda = sw / spread;
    if (!(spread > COLLAPSE_REL * sv && isfinite(lambda))) return ST_COLLAPSED;
    second = lambda;
    return ST_RUNNING;
}
// The upper tail at c (censored data; see upper_tail above).
#define FAM_UPPER_TAIL
__device__ void fam_upper_tail(double c, double mu, double lambda, double centre, double* t, int lanes) {
    if (!(c > 0.0)) { t[0] = 1.0; t[1] = mu; t[2] = 1.0 / mu + 1.0 / lambda; return; }
    const double root = sqrt(lambda / c);
    const double z1 = root * (c / mu - 1.0);
    const double z2 = -root * (c / mu + 1.0);
    const double e2 = exp(2.0 * lambda / mu + log_norm_cdf(z2));
    const double q1 = norm_upper(z1);
    const double phi1 = norm_pdf(z1);
    t[0] = fmax(q1 - e2, 0.0);
    t[1] = mu * (q1 + e2);
    t[2] = fmax((1.0 / mu + 1.0 / lambda) * q1 - (1.0 / lambda - 1.0 / mu) * e2 - 2.0 * phi1 / sqrt(lambda * c), 0.0);
}
__device__ void fam_lower_tail(double c, double mu, double lambda, double centre, double* t, int lanes) {
    if (!(c > 0.0)) { t[0] = t[1] = t[2] = 0.0; return; }
    const double root = sqrt(lambda / c);
    const double z1 = root * (c / mu - 1.0);
    const double z2 = -root * (c / mu + 1.0);
    const double e2 = exp(2.0 * lambda / mu + log_norm_cdf(z2));
    const double p1 = norm_upper(-z1);
    const double phi1 = norm_pdf(z1);
    const double diff = fmax(p1 - e2, 0.0);
    t[0] = p1 + e2;
    t[1] = mu * diff;
    t[2] = diff / mu + (p1 + e2) / lambda + 2.0 * phi1 / sqrt(lambda * c);
}
"#;
