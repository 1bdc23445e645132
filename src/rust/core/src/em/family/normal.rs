//! Normal components: mean `mu`, standard deviation `sigma`.
//! u = x - centre, v = u^2 (centring keeps v accurate), k(x) = 0. The
//! lognormal family is this one on log x, so the Gaussian maths (Rust and
//! CUDA) is shared from here.

use std::f64::consts::PI;

use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal as NormalDist};

use super::{positive, FamilyDef, FamilyInfo, MStepFailure, Natural};
use crate::em::data::{first_where, num, ordered_sum, sum_squares};
use crate::error::{Error, Result};
use crate::tolerances::COLLAPSE_REL;

/// Normal data: the largest sum of squared deviations from the centre the
/// E-step's sums may reach (half the largest double: weighted partial sums
/// in any order stay finite), and the smallest mean squared deviation, below
/// which a variance that passes the collapse rule could be subnormal.
pub const NORMAL_MAX_SUM_SQUARES: f64 = f64::MAX / 2.0;
pub const NORMAL_MIN_MEAN_SQUARE: f64 = f64::MIN_POSITIVE / COLLAPSE_REL;

pub(super) struct Normal;

static INFO: FamilyInfo = FamilyInfo {
    name: "normal",
    label: "Normal",
    first: "mu",
    second: Some("sigma"),
    collapse: "a component collapsed onto a single value (its sd became zero)",
    discrete: false,
};

pub(super) fn mean(x: &[f64]) -> f64 {
    ordered_sum(x, |v| v) / x.len() as f64
}

pub(super) fn gauss_natural(m: f64, s: f64, centre: f64) -> Natural {
    let m = m - centre;
    let prec = 1.0 / (s * s);
    Natural { a: -0.5 * (2.0 * PI).ln() - s.ln() - 0.5 * m * m * prec, b: m * prec, c: -0.5 * prec }
}

pub(super) fn gauss_m_step(sw: f64, su: f64, sv: f64, centre: f64) -> std::result::Result<(f64, f64), MStepFailure> {
    let m = su / sw;
    let var = sv / sw - m * m;
    if var > COLLAPSE_REL * (sv / sw) && var.is_finite() && m.is_finite() {
        Ok((m + centre, var.sqrt()))
    } else {
        Err(MStepFailure::Collapsed)
    }
}

/// The standard deviation shared by components with sums `sums` (of w,
/// w u, w u^2, u = y - centre) and means `means`: the pooled variance
/// sum_j sum_i w (y - m_j)^2 / sum w, with the collapse rule of
/// [`gauss_m_step`].
pub(super) fn gauss_pooled_sd(sums: &[[f64; 3]], means: &[f64], centre: f64) -> std::result::Result<f64, MStepFailure> {
    let (mut sw, mut sv, mut ss) = (0.0, 0.0, 0.0);
    for (s, &m) in sums.iter().zip(means) {
        let d = m - centre;
        sw += s[0];
        sv += s[2];
        ss += s[2] - 2.0 * d * s[1] + d * d * s[0];
    }
    let var = ss / sw;
    if var > COLLAPSE_REL * (sv / sw) && var.is_finite() {
        Ok(var.sqrt())
    } else {
        Err(MStepFailure::Collapsed)
    }
}

/// The upper tail at y of N(m, s) in the features u = y - centre, v = u^2:
/// with z = (y - m) / s and d = m - centre, P = Q(z), E[u; .] = d P +
/// s phi(z), E[v; .] = d^2 P + 2 d s phi(z) + s^2 (z phi(z) + P).
pub(super) fn gauss_upper_tail(y: f64, m: f64, s: f64, centre: f64) -> [f64; 3] {
    let d = m - centre;
    let z = (y - m) / s;
    let (p, phi, zphi) = if z == f64::NEG_INFINITY { (1.0, 0.0, 0.0) } else { (super::special::norm_upper(z), super::special::norm_pdf(z), z * super::special::norm_pdf(z)) };
    [p, d * p + s * phi, d * d * p + 2.0 * d * s * phi + s * s * (zphi + p)]
}

/// The lower tail at y of N(m, s): P = Phi(z), E[u; .] = d P - s phi(z),
/// E[v; .] = d^2 P - 2 d s phi(z) + s^2 (P - z phi(z)).
pub(super) fn gauss_lower_tail(y: f64, m: f64, s: f64, centre: f64) -> [f64; 3] {
    let d = m - centre;
    let z = (y - m) / s;
    let (p, phi, zphi) = if z == f64::NEG_INFINITY { (0.0, 0.0, 0.0) } else { (super::special::norm_upper(-z), super::special::norm_pdf(z), z * super::special::norm_pdf(z)) };
    [p, d * p - s * phi, d * d * p - 2.0 * d * s * phi + s * s * (p - zphi)]
}

pub(super) fn gauss_log_density(y: f64, m: f64, s: f64) -> f64 {
    let z = (y - m) / s;
    -0.5 * (2.0 * PI).ln() - s.ln() - 0.5 * z * z
}

pub(super) fn gauss_ml(ys: &[f64]) -> Option<(f64, f64)> {
    let m = mean(ys);
    let s = (ys.iter().map(|y| (y - m) * (y - m)).sum::<f64>() / ys.len() as f64).sqrt();
    (m.is_finite() && s.is_finite() && s > 0.0).then_some((m, s))
}

impl FamilyDef for Normal {
    fn info(&self) -> &'static FamilyInfo {
        &INFO
    }

    fn observation_problem(&self, _x: f64) -> Option<&'static str> {
        None
    }

    fn first_invalid(&self, x: &[f64]) -> Option<usize> {
        crate::em::data::position_blocked(x, |v| !crate::em::data::finite_bits(v))
    }

    /// The centre (mean) must be finite, the sum of squared deviations from
    /// it (which bounds every component's sum(w (x - centre)^2) and mean^2)
    /// at most NORMAL_MAX_SUM_SQUARES, and, unless all values are equal (a
    /// dataset that is reported as unfittable), the mean squared deviation
    /// at least NORMAL_MIN_MEAN_SQUARE, so that a variance that passes the
    /// collapse rule is a normal number whose reciprocal is finite.
    fn check_range(&self, x: &[f64], dataset: usize) -> Result<()> {
        let centre = mean(x);
        let max_abs = || x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        if !centre.is_finite() {
            return Err(Error::arg(
                "datasets",
                format!(
                    "must have a finite sum for the Normal EM: the sum of dataset {dataset} overflows double precision \
                     (its values reach {}). Rescale the data (mu and sigma scale with it).",
                    num(max_abs())
                ),
            ));
        }
        let ss = sum_squares(x, centre);
        if ss.is_nan() || ss > NORMAL_MAX_SUM_SQUARES {
            return Err(Error::arg(
                "datasets",
                format!(
                    "must have squared deviations from the mean that double precision can sum: those of dataset \
                     {dataset} overflow (they sum to {}, above {}; its values reach {}). \
                     Rescale the data (mu and sigma scale with it).",
                    num(ss),
                    num(NORMAL_MAX_SUM_SQUARES),
                    num(max_abs())
                ),
            ));
        }
        let mean_square = ss / x.len() as f64;
        if mean_square < NORMAL_MIN_MEAN_SQUARE && first_where(x, |v| v != x[0]).is_some() {
            return Err(Error::arg(
                "datasets",
                format!(
                    "must spread enough for double precision: the values of dataset {dataset} differ so little that \
                     their mean squared deviation from the mean ({}) is below {}, where the Normal EM's variances \
                     underflow. Rescale the data (mu and sigma scale with it).",
                    num(mean_square),
                    num(NORMAL_MIN_MEAN_SQUARE)
                ),
            ));
        }
        Ok(())
    }

    fn centre(&self, x: &[f64]) -> f64 {
        mean(x)
    }

    fn features(&self, x: f64, centre: f64) -> (f64, f64) {
        let y = x - centre;
        (y, y * y)
    }

    fn natural(&self, mu: f64, sigma: f64, centre: f64) -> Natural {
        gauss_natural(mu, sigma, centre)
    }

    fn m_step(&self, sw: f64, su: f64, sv: f64, centre: f64, _previous: (f64, f64)) -> std::result::Result<(f64, f64), MStepFailure> {
        gauss_m_step(sw, su, sv, centre)
    }

    fn second_given_first(&self, sums: &[[f64; 3]], means: &[f64], centre: f64) -> std::result::Result<f64, MStepFailure> {
        gauss_pooled_sd(sums, means, centre)
    }

    fn upper_tail(&self, c: f64, mu: f64, sigma: f64, centre: f64) -> Option<[f64; 3]> {
        Some(gauss_upper_tail(c, mu, sigma, centre))
    }

    fn lower_tail(&self, c: f64, mu: f64, sigma: f64, centre: f64) -> Option<[f64; 3]> {
        Some(gauss_lower_tail(c, mu, sigma, centre))
    }

    fn log_density(&self, x: f64, mu: f64, sigma: f64) -> f64 {
        gauss_log_density(x, mu, sigma)
    }

    fn ml_estimate(&self, xs: &[f64]) -> Option<(f64, f64)> {
        gauss_ml(xs)
    }

    fn seeded(&self, seed: f64, whole: (f64, f64)) -> (f64, f64) {
        (seed, whole.1)
    }

    fn check_component(&self, mu: f64, sigma: f64) -> std::result::Result<(), String> {
        if !mu.is_finite() {
            return Err("mu must be finite".into());
        }
        positive("sigma", sigma)
    }

    fn sample(&self, mu: f64, sigma: f64, rng: &mut ChaCha8Rng) -> Option<f64> {
        NormalDist::new(mu, sigma).ok().map(|d| d.sample(rng))
    }

    fn cuda(&self) -> &'static [&'static str] {
        &[CUDA_GAUSSIAN, CUDA]
    }
}

/// The Gaussian natural parameters and M-step on the (centred) features,
/// shared by the Normal and lognormal blocks.
pub(super) const CUDA_GAUSSIAN: &str = r#"
// Gaussian maths (src/em/family/normal.rs), on u = y - centre, v = u^2.
__device__ __forceinline__ void fam_natural(double mu, double s, double centre, double& a, double& b, double& c) {
    const double m = mu - centre, prec = 1.0 / (s * s);
    a = -0.5 * log(TWO_PI) - log(s) - 0.5 * m * m * prec;
    b = m * prec;
    c = -0.5 * prec;
}
__device__ __forceinline__ int fam_m_step(double sw, double su, double sv, double centre, double& first, double& second) {
    const double m = su / sw;
    const double var = sv / sw - m * m;
    if (!(var > COLLAPSE_REL * (sv / sw) && isfinite(var) && isfinite(m))) return ST_COLLAPSED;
    first = m + centre; second = sqrt(var);
    return ST_RUNNING;
}
// gauss_pooled_sd over the components in `mask` (constraints).
#define FAM_SECOND_GIVEN_FIRST
__device__ int fam_second_given_first(const double* S, const double* means, unsigned mask, double centre, double& second) {
    double sw = 0.0, sv = 0.0, ss = 0.0;
    for (int j = 0; j < EM_M; ++j) {
        if (!((mask >> j) & 1u)) continue;
        const double d = means[j] - centre;
        sw += S[3 * j];
        sv += S[3 * j + 2];
        ss += S[3 * j + 2] - 2.0 * d * S[3 * j + 1] + d * d * S[3 * j];
    }
    const double var = ss / sw;
    if (!(var > COLLAPSE_REL * (sv / sw) && isfinite(var))) return ST_COLLAPSED;
    second = sqrt(var);
    return ST_RUNNING;
}
// gauss_upper_tail: the upper tail at y of N(m, s) in the centred features.
__device__ void gauss_upper_tail(double y, double m, double s, double centre, double* t) {
    const double d = m - centre;
    const double z = (y - m) / s;
    double p = 1.0, phi = 0.0, zphi = 0.0;
    if (z != -__longlong_as_double(0x7ff0000000000000LL)) { p = norm_upper(z); phi = norm_pdf(z); zphi = z * norm_pdf(z); }
    t[0] = p;
    t[1] = d * p + s * phi;
    t[2] = d * d * p + 2.0 * d * s * phi + s * s * (zphi + p);
}
__device__ void gauss_lower_tail(double y, double m, double s, double centre, double* t) {
    const double d = m - centre;
    const double z = (y - m) / s;
    double p = 0.0, phi = 0.0, zphi = 0.0;
    if (z != -__longlong_as_double(0x7ff0000000000000LL)) { p = norm_upper(-z); phi = norm_pdf(z); zphi = z * norm_pdf(z); }
    t[0] = p;
    t[1] = d * p - s * phi;
    t[2] = d * d * p - 2.0 * d * s * phi + s * s * (p - zphi);
}
"#;

const CUDA: &str = r#"
// Normal: y = x.
__device__ __forceinline__ void fam_features(double x, double centre, double& u, double& v) {
    u = x - centre;
    v = u * u;
}
__device__ __forceinline__ double fam_shared_term(double x) { return 0.0; }
#define FAM_UPPER_TAIL
__device__ void fam_upper_tail(double c, double mu, double sigma, double centre, double* t, int lanes) { gauss_upper_tail(c, mu, sigma, centre, t); }
__device__ void fam_lower_tail(double c, double mu, double sigma, double centre, double* t, int lanes) { gauss_lower_tail(c, mu, sigma, centre, t); }
"#;
