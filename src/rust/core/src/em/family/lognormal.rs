//! Lognormal components: `meanlog`, `sdlog`. Exactly the Normal fit on
//! log x (the same centred features of log x, the same M-step), with the
//! Jacobian k(x) = -log x in the log-likelihood.

use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, LogNormal as LogNormalDist};

use super::normal::{gauss_log_density, gauss_lower_tail, gauss_m_step, gauss_ml, gauss_natural, gauss_pooled_sd, gauss_upper_tail, CUDA_GAUSSIAN};
use super::{positive, FamilyDef, FamilyInfo, MStepFailure, Natural};

pub(super) struct LogNormal;

static INFO: FamilyInfo = FamilyInfo {
    name: "lognormal",
    label: "lognormal",
    first: "meanlog",
    second: Some("sdlog"),
    collapse: "a component collapsed onto a single value (its sdlog became zero)",
    discrete: false,
};

fn logs(xs: &[f64]) -> Vec<f64> {
    xs.iter().map(|x| x.ln()).collect()
}

impl FamilyDef for LogNormal {
    fn info(&self) -> &'static FamilyInfo {
        &INFO
    }

    /// Positive finite x have logs in [-745, 710]: no sum of them or of
    /// their squares can overflow, so no range check is needed.
    fn observation_problem(&self, x: f64) -> Option<&'static str> {
        (x <= 0.0).then_some("lognormal data must be strictly positive")
    }

    fn first_invalid(&self, x: &[f64]) -> Option<usize> {
        crate::em::data::position_blocked(x, |v| !crate::em::data::positive_finite(v))
    }

    fn centre(&self, x: &[f64]) -> f64 {
        super::mean_log(x)
    }

    fn features(&self, x: f64, centre: f64) -> (f64, f64) {
        let y = x.ln() - centre;
        (y, y * y)
    }

    fn shared_term(&self, x: f64) -> f64 {
        -x.ln()
    }

    fn natural(&self, meanlog: f64, sdlog: f64, centre: f64) -> Natural {
        gauss_natural(meanlog, sdlog, centre)
    }

    fn m_step(&self, sw: f64, su: f64, sv: f64, centre: f64, _previous: (f64, f64)) -> std::result::Result<(f64, f64), MStepFailure> {
        gauss_m_step(sw, su, sv, centre)
    }

    fn second_given_first(&self, sums: &[[f64; 3]], meanlogs: &[f64], centre: f64) -> std::result::Result<f64, MStepFailure> {
        gauss_pooled_sd(sums, meanlogs, centre)
    }

    /// The Normal's on log x (log 0 = -inf: the whole distribution).
    fn upper_tail(&self, c: f64, meanlog: f64, sdlog: f64, centre: f64) -> Option<[f64; 3]> {
        let y = if c <= 0.0 { f64::NEG_INFINITY } else { c.ln() };
        Some(gauss_upper_tail(y, meanlog, sdlog, centre))
    }

    fn lower_tail(&self, c: f64, meanlog: f64, sdlog: f64, centre: f64) -> Option<[f64; 3]> {
        let y = if c <= 0.0 { f64::NEG_INFINITY } else { c.ln() };
        Some(gauss_lower_tail(y, meanlog, sdlog, centre))
    }

    fn log_density(&self, x: f64, meanlog: f64, sdlog: f64) -> f64 {
        if x <= 0.0 {
            return f64::NEG_INFINITY;
        }
        gauss_log_density(x.ln(), meanlog, sdlog) - x.ln()
    }

    fn ml_estimate(&self, xs: &[f64]) -> Option<(f64, f64)> {
        gauss_ml(&logs(xs))
    }

    fn seed_coordinate(&self, x: f64) -> f64 {
        x.ln()
    }

    fn seeded(&self, seed: f64, whole: (f64, f64)) -> (f64, f64) {
        (seed.ln(), whole.1)
    }

    fn check_component(&self, meanlog: f64, sdlog: f64) -> std::result::Result<(), String> {
        if !meanlog.is_finite() {
            return Err("meanlog must be finite".into());
        }
        positive("sdlog", sdlog)
    }

    fn sample(&self, meanlog: f64, sdlog: f64, rng: &mut ChaCha8Rng) -> Option<f64> {
        LogNormalDist::new(meanlog, sdlog).ok().map(|d| d.sample(rng))
    }

    fn cuda(&self) -> &'static [&'static str] {
        &[CUDA_GAUSSIAN, CUDA]
    }
}

const CUDA: &str = r#"
// Lognormal (src/em/family/lognormal.rs): the Gaussian on y = log x, k = -log x.
__device__ __forceinline__ void fam_features(double x, double centre, double& u, double& v) {
    u = log(x) - centre;
    v = u * u;
}
__device__ __forceinline__ double fam_shared_term(double x) { return -log(x); }
// The Normal's on log x (log 0 = -inf: the whole distribution).
#define FAM_UPPER_TAIL
__device__ void fam_upper_tail(double c, double meanlog, double sdlog, double centre, double* t, int lanes) {
    gauss_upper_tail(c <= 0.0 ? -__longlong_as_double(0x7ff0000000000000LL) : log(c), meanlog, sdlog, centre, t);
}
__device__ void fam_lower_tail(double c, double meanlog, double sdlog, double centre, double* t, int lanes) {
    gauss_lower_tail(c <= 0.0 ? -__longlong_as_double(0x7ff0000000000000LL) : log(c), meanlog, sdlog, centre, t);
}
"#;
