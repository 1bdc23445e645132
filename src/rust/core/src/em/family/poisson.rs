//! Poisson components (counts): rate `lambda`. u = x, v = 0 (unused),
//! k(x) = -lgamma(x + 1); a = -lambda, b = log lambda.

use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Poisson as PoissonDist};

use super::incgamma::inc_gamma;
use super::special::lgamma;
use super::{positive, FamilyDef, FamilyInfo, MStepFailure, Natural};

/// Counts above this are not all representable (2^53).
const MAX_COUNT: f64 = 9_007_199_254_740_992.0;
/// A k-means++ component seeded at a zero count starts at this rate.
const ZERO_SEED_RATE: f64 = 0.5;

pub(super) struct Poisson;

static INFO: FamilyInfo = FamilyInfo {
    name: "poisson",
    label: "Poisson",
    first: "lambda",
    second: None,
    collapse: "a component collapsed onto zero counts (its rate became zero)",
    discrete: true,
};

impl FamilyDef for Poisson {
    fn info(&self) -> &'static FamilyInfo {
        &INFO
    }

    // sp_inc_gamma's series and continued fraction.
    fn tails_iterate(&self) -> bool {
        true
    }

    fn observation_problem(&self, x: f64) -> Option<&'static str> {
        if x < 0.0 || x.fract() != 0.0 {
            Some("Poisson data must be counts (whole numbers >= 0)")
        } else if x > MAX_COUNT {
            Some("Poisson counts must be at most 2^53 (9.0e15)")
        } else {
            None
        }
    }

    fn features(&self, x: f64, _centre: f64) -> (f64, f64) {
        (x, 0.0)
    }

    fn shared_term(&self, x: f64) -> f64 {
        -lgamma(x + 1.0)
    }

    fn natural(&self, lambda: f64, _second: f64, _centre: f64) -> Natural {
        Natural { a: -lambda, b: lambda.ln(), c: 0.0 }
    }

    fn m_step(&self, sw: f64, su: f64, _sv: f64, _centre: f64, _previous: (f64, f64)) -> std::result::Result<(f64, f64), MStepFailure> {
        let lambda = su / sw;
        if lambda > 0.0 && lambda.is_finite() {
            Ok((lambda, f64::NAN))
        } else {
            Err(MStepFailure::Collapsed)
        }
    }

    /// Counts: X > c is X >= k = floor(c) + 1, with P(X >= k) = P(k,
    /// lambda) and E[x; X >= k] = lambda P(X >= k - 1), both from the
    /// incomplete gamma functions at a = k - 1 (incgamma).
    fn upper_tail(&self, c: f64, lambda: f64, _second: f64, _centre: f64) -> Option<[f64; 3]> {
        let k = c.floor() + 1.0;
        Some(if k <= 0.0 {
            [1.0, lambda, 0.0]
        } else if k == 1.0 {
            [-(-lambda).exp_m1(), lambda, 0.0]
        } else {
            let t = inc_gamma(k - 1.0, lambda, false);
            [t.lower_next, lambda * t.lower, 0.0]
        })
    }

    /// X <= c is X <= m = floor(c): P(X <= m) = Q(m + 1, lambda) and
    /// E[x; X <= m] = lambda P(X <= m - 1) = lambda Q(m, lambda).
    fn lower_tail(&self, c: f64, lambda: f64, _second: f64, _centre: f64) -> Option<[f64; 3]> {
        let m = c.floor();
        Some(if m < 0.0 {
            [0.0; 3]
        } else if m == 0.0 {
            [(-lambda).exp(), 0.0, 0.0]
        } else {
            let t = inc_gamma(m, lambda, false);
            [t.upper_next, lambda * t.upper, 0.0]
        })
    }

    fn log_density(&self, x: f64, lambda: f64, _second: f64) -> f64 {
        if x < 0.0 || x.fract() != 0.0 {
            return f64::NEG_INFINITY;
        }
        // x log(lambda) with 0 log(lambda) = 0.
        let xlog = if x == 0.0 { 0.0 } else { x * lambda.ln() };
        xlog - lambda - lgamma(x + 1.0)
    }

    fn ml_estimate(&self, xs: &[f64]) -> Option<(f64, f64)> {
        let lambda = xs.iter().sum::<f64>() / xs.len() as f64;
        (lambda > 0.0 && lambda.is_finite()).then_some((lambda, f64::NAN))
    }

    /// The square root stabilises the Poisson variance.
    fn seed_coordinate(&self, x: f64) -> f64 {
        x.sqrt()
    }

    fn seeded(&self, seed: f64, _whole: (f64, f64)) -> (f64, f64) {
        (if seed > 0.0 { seed } else { ZERO_SEED_RATE }, f64::NAN)
    }

    fn check_component(&self, lambda: f64, _second: f64) -> std::result::Result<(), String> {
        positive("lambda", lambda)
    }

    fn sample(&self, lambda: f64, _second: f64, rng: &mut ChaCha8Rng) -> Option<f64> {
        PoissonDist::new(lambda).ok().map(|d| d.sample(rng))
    }

    fn cuda(&self) -> &'static [&'static str] {
        &[super::special::CUDA, super::incgamma::CUDA, CUDA]
    }
}

const CUDA: &str = r#"
// Poisson (src/em/family/poisson.rs): u = x, v = 0, k = -lgamma(x + 1).
__device__ __forceinline__ void fam_features(double x, double centre, double& u, double& v) { u = x; v = 0.0; }
__device__ __forceinline__ double fam_shared_term(double x) { return -sp_lgamma(x + 1.0); }
__device__ __forceinline__ void fam_natural(double lambda, double second, double centre, double& a, double& b, double& c) {
    a = -lambda; b = log(lambda); c = 0.0;
}
__device__ __forceinline__ int fam_m_step(double sw, double su, double sv, double centre, double& first, double& second) {
    const double lambda = su / sw;
    if (!(lambda > 0.0 && isfinite(lambda))) return ST_COLLAPSED;
    first = lambda; second = __longlong_as_double(0x7ff8000000000000LL);
    return ST_RUNNING;
}
// Censored counts (upper_tail, lower_tail above).
#define FAM_UPPER_TAIL
__device__ void fam_upper_tail(double c, double lambda, double second, double centre, double* t, int lanes) {
    const double k = floor(c) + 1.0;
    t[1] = lambda; t[2] = 0.0;
    if (k <= 0.0) { t[0] = 1.0; return; }
    if (k == 1.0) { t[0] = -expm1(-lambda); return; }
    double g[6];
    sp_inc_gamma(k - 1.0, lambda, false, g, lanes);
    t[0] = g[2]; t[1] = lambda * g[0];
}
__device__ void fam_lower_tail(double c, double lambda, double second, double centre, double* t, int lanes) {
    const double m = floor(c);
    t[0] = t[1] = t[2] = 0.0;
    if (m < 0.0) return;
    if (m == 0.0) { t[0] = exp(-lambda); return; }
    double g[6];
    sp_inc_gamma(m, lambda, false, g, lanes);
    t[0] = g[3]; t[1] = lambda * g[1];
}
"#;
