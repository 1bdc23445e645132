//! Exponential components: `rate`. u = x, v = 0 (unused), k(x) = 0;
//! a = log rate, b = -rate. (The gamma family with shape 1.)

use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

use super::{positive, FamilyDef, FamilyInfo, MStepFailure, Natural};
use crate::em::data::num;
use crate::error::{Error, Result};

pub(super) struct Exponential;

static INFO: FamilyInfo = FamilyInfo {
    name: "exponential",
    label: "exponential",
    first: "rate",
    second: None,
    collapse: "a component collapsed onto zero (its rate became infinite)",
    discrete: false,
};

impl FamilyDef for Exponential {
    fn info(&self) -> &'static FamilyInfo {
        &INFO
    }

    fn observation_problem(&self, x: f64) -> Option<&'static str> {
        (x < 0.0).then_some("exponential data must be non-negative")
    }

    fn check_range(&self, x: &[f64], dataset: usize) -> Result<()> {
        if crate::em::data::ordered_sum(x, |v| v).is_finite() {
            return Ok(());
        }
        Err(Error::arg(
            "datasets",
            format!(
                "must have a finite sum for the exponential EM: the sum of dataset {dataset} overflows double \
                 precision (its values reach {}). Rescale the data (the rates scale with it).",
                num(x.iter().fold(0.0f64, |m, v| m.max(*v)))
            ),
        ))
    }

    fn features(&self, x: f64, _centre: f64) -> (f64, f64) {
        (x, 0.0)
    }

    fn natural(&self, rate: f64, _second: f64, _centre: f64) -> Natural {
        Natural { a: rate.ln(), b: -rate, c: 0.0 }
    }

    fn m_step(&self, sw: f64, su: f64, _sv: f64, _centre: f64, _previous: (f64, f64)) -> std::result::Result<(f64, f64), MStepFailure> {
        let rate = sw / su;
        if rate > 0.0 && rate.is_finite() {
            Ok((rate, f64::NAN))
        } else {
            Err(MStepFailure::Collapsed)
        }
    }

    /// P = exp(-rate c), E[x; X > c] = P (c + 1/rate) (memoryless).
    fn upper_tail(&self, c: f64, rate: f64, _second: f64, _centre: f64) -> Option<[f64; 3]> {
        let c = c.max(0.0);
        let p = (-rate * c).exp();
        Some([p, p * (c + 1.0 / rate), 0.0])
    }

    /// P = -expm1(-t), t = rate c, and E[x; X <= c] = (1 - e^-t (1 + t)) /
    /// rate, by its alternating series sum_k>=2 (-1)^k (k - 1) t^k / k!
    /// for t < 1 (where the closed form cancels).
    fn lower_tail(&self, c: f64, rate: f64, _second: f64, _centre: f64) -> Option<[f64; 3]> {
        let t = rate * c.max(0.0);
        Some([-(-t).exp_m1(), exp_partial_mean(t) / rate, 0.0])
    }

    fn log_density(&self, x: f64, rate: f64, _second: f64) -> f64 {
        if x < 0.0 {
            return f64::NEG_INFINITY;
        }
        rate.ln() - rate * x
    }

    fn ml_estimate(&self, xs: &[f64]) -> Option<(f64, f64)> {
        let rate = xs.len() as f64 / xs.iter().sum::<f64>();
        (rate > 0.0 && rate.is_finite()).then_some((rate, f64::NAN))
    }

    /// Mean at the seed; a zero seed takes the whole sample's rate.
    fn seeded(&self, seed: f64, whole: (f64, f64)) -> (f64, f64) {
        (if seed > 0.0 { 1.0 / seed } else { whole.0 }, f64::NAN)
    }

    fn check_component(&self, rate: f64, _second: f64) -> std::result::Result<(), String> {
        positive("rate", rate)
    }

    fn sample(&self, rate: f64, _second: f64, rng: &mut ChaCha8Rng) -> Option<f64> {
        Exp::new(rate).ok().map(|d| d.sample(rng))
    }

    fn cuda(&self) -> &'static [&'static str] {
        &[CUDA]
    }
}

/// 1 - e^-t (1 + t) (the exponential's lower partial mean times the rate).
fn exp_partial_mean(t: f64) -> f64 {
    if t >= 1.0 {
        return 1.0 - (-t).exp() * (1.0 + t);
    }
    let (mut term, mut sum) = (t, 0.0);
    for k in 2..=EXP_SERIES_TERMS {
        term *= -t / k as f64;
        sum += (k - 1) as f64 * term;
    }
    -sum
}

/// Terms of the series above: t^25 / 25! < 1e-25 for t < 1.
const EXP_SERIES_TERMS: usize = 25;

const CUDA: &str = r#"
// Exponential (src/em/family/exponential.rs): u = x, v = 0, k = 0.
__device__ __forceinline__ void fam_features(double x, double centre, double& u, double& v) { u = x; v = 0.0; }
__device__ __forceinline__ double fam_shared_term(double x) { return 0.0; }
__device__ __forceinline__ void fam_natural(double rate, double second, double centre, double& a, double& b, double& c) {
    a = log(rate); b = -rate; c = 0.0;
}
__device__ __forceinline__ int fam_m_step(double sw, double su, double sv, double centre, double& first, double& second) {
    const double rate = sw / su;
    if (!(rate > 0.0 && isfinite(rate))) return ST_COLLAPSED;
    first = rate; second = __longlong_as_double(0x7ff8000000000000LL);
    return ST_RUNNING;
}
#define FAM_UPPER_TAIL
__device__ void fam_upper_tail(double c, double rate, double second, double centre, double* t, int lanes) {
    const double x = fmax(c, 0.0);
    const double p = exp(-rate * x);
    t[0] = p; t[1] = p * (x + 1.0 / rate); t[2] = 0.0;
}
__device__ void fam_lower_tail(double c, double rate, double second, double centre, double* t, int lanes) {
    const double s = rate * fmax(c, 0.0);
    double g;
    if (s >= 1.0) {
        g = 1.0 - exp(-s) * (1.0 + s);
    } else {
        double term = s, sum = 0.0;
        for (int k = 2; k <= 25; ++k) { term *= -s / k; sum += (k - 1) * term; }
        g = -sum;
    }
    t[0] = -expm1(-s); t[1] = g / rate; t[2] = 0.0;
}
"#;
