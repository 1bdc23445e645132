//! Priors of the hyperparameters and global coefficients.
//!
//! ```text
//! mu_k    ~ N(mu_mean, mu_sd^2)             (conjugate: drawn exactly)
//! tau_k   ~ half-Cauchy(0, tau_scale), half-t(df, 0, tau_scale) or half-normal(0, tau_scale)
//! gamma_j ~ N(0, gamma_sd^2)
//! sigma   ~ half-Cauchy(0, sigma_scale)     (gaussian family only)
//! phi     ~ gamma(0.01, 0.01)               (negative binomial shape; brms's default)
//! ```
//! `tau_fixed` / `sigma_fixed` hold a scale at a known value instead (the
//! conjugate model with known variances, whose posterior is closed-form).
//! With `cov` the group coefficients are correlated: their covariance
//! Sigma ~ inverse-Wishart (covariance.rs), or Sigma = D Omega D with
//! Omega ~ LKJ(eta) and the sds in D under the prior of tau (lkj.rs),
//! replaces the tau_k; a grouping factor with correlated terms
//! (`factor.rs`) has such a prior of its own, `factor_cov[f]`
//! (inverse-Wishart(K_f + 3, (K_f + 3) I) when not given).

use super::covariance::InverseWishart;
use crate::error::{Error, Result};

/// Prior of a positive scale parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalePrior {
    HalfCauchy(f64),
    /// Half-Student-t with scale and degrees of freedom (brms's default
    /// for sds: half-t(3, 0, 2.5)); 1 df is the half-Cauchy.
    HalfT(f64, f64),
    HalfNormal(f64),
    /// Gamma with shape and rate (density proportional to s^(a-1) e^(-b s)).
    Gamma(f64, f64),
    /// Not sampled: held at this value.
    Fixed(f64),
}

impl ScalePrior {
    /// Log density at `s > 0`, up to a constant.
    #[inline]
    pub fn log_density(self, s: f64) -> f64 {
        match self {
            ScalePrior::HalfCauchy(a) => -((s / a) * (s / a)).ln_1p(),
            ScalePrior::HalfT(a, df) => -0.5 * (df + 1.0) * ((s / a) * (s / a) / df).ln_1p(),
            ScalePrior::HalfNormal(a) => -0.5 * (s / a) * (s / a),
            ScalePrior::Gamma(a, b) => (a - 1.0) * s.ln() - b * s,
            ScalePrior::Fixed(_) => 0.0,
        }
    }
    /// [`ScalePrior::log_density`] at `s > 0` with its first and second
    /// derivatives in s (the non-centred tau_k's Newton step, sweep.rs).
    pub fn log_density_curve(self, s: f64) -> (f64, f64, f64) {
        let f = self.log_density(s);
        // Half-t: -(df + 1)/2 ln(c + s^2) with c = df a^2 (half-Cauchy: df = 1).
        let half_t = |c: f64, df: f64| (f, -(df + 1.0) * s / (c + s * s), -(df + 1.0) * (c - s * s) / ((c + s * s) * (c + s * s)));
        match self {
            ScalePrior::HalfCauchy(a) => half_t(a * a, 1.0),
            ScalePrior::HalfT(a, df) => half_t(df * a * a, df),
            ScalePrior::HalfNormal(a) => (f, -s / (a * a), -1.0 / (a * a)),
            ScalePrior::Gamma(a, b) => (f, (a - 1.0) / s - b, -(a - 1.0) / (s * s)),
            ScalePrior::Fixed(_) => (0.0, 0.0, 0.0),
        }
    }
    pub fn fixed(self) -> Option<f64> {
        match self {
            ScalePrior::Fixed(v) => Some(v),
            _ => None,
        }
    }
    fn check(self, arg: &'static str) -> Result<()> {
        match self {
            ScalePrior::HalfCauchy(v) | ScalePrior::HalfNormal(v) | ScalePrior::Fixed(v) => check_scale(v, arg),
            ScalePrior::Gamma(a, b) | ScalePrior::HalfT(a, b) => check_scale(a, arg).and_then(|_| check_scale(b, arg)),
        }
    }
}

/// Prior scales and means must lie where their squares and inverse squares
/// are finite with room to spare: an sd of 1e-300 or 1e300 is no prior a
/// sampler in double precision can honour.
pub const PRIOR_MIN: f64 = 1e-100;
pub const PRIOR_MAX: f64 = 1e100;

fn check_scale(v: f64, arg: &'static str) -> Result<()> {
    if !(v.is_finite() && (PRIOR_MIN..=PRIOR_MAX).contains(&v)) {
        return Err(Error::arg(arg, format!("must be a positive number between {PRIOR_MIN:e} and {PRIOR_MAX:e}, not {v}")));
    }
    Ok(())
}

/// The prior of the covariance of correlated coefficients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CovPrior {
    /// Conjugate: Sigma is drawn exactly in each sweep (bayesm, MCMCglmm).
    InverseWishart(InverseWishart),
    /// LKJ(eta) correlations, the sds under the prior of tau (brms):
    /// slice updates of Sigma's coordinates (lkj.rs).
    Lkj { eta: f64 },
}

/// All priors of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Prior {
    pub mu_mean: f64,
    pub mu_sd: f64,
    pub tau: ScalePrior,
    pub gamma_sd: f64,
    pub sigma: ScalePrior,
    /// The negative binomial's shape phi.
    pub shape: ScalePrior,
    /// Correlated group coefficients: the prior of their covariance
    /// (`tau` is then unused); None: independent, with scales tau_k.
    pub cov: Option<CovPrior>,
    /// The covariance prior of each other grouping factor f with
    /// correlated terms, by f (an entry for an independent factor is not
    /// used); a factor past the end takes [`default_factor_cov`].
    pub factor_cov: Vec<CovPrior>,
}

/// bayesm's default for K correlated coefficients: inverse-Wishart(K + 3,
/// (K + 3) I).
pub fn default_factor_cov(k: usize) -> CovPrior {
    CovPrior::InverseWishart(InverseWishart { df: k as f64 + 3.0, scale: 1.0 })
}

impl Default for Prior {
    /// The documented defaults: N(0, 10^2), half-Cauchy(0, 2.5), the shape
    /// gamma(0.01, 0.01).
    fn default() -> Self {
        Prior {
            mu_mean: 0.0,
            mu_sd: 10.0,
            tau: ScalePrior::HalfCauchy(2.5),
            gamma_sd: 10.0,
            sigma: ScalePrior::HalfCauchy(2.5),
            shape: ScalePrior::Gamma(0.01, 0.01),
            cov: None,
            factor_cov: Vec::new(),
        }
    }
}

impl Prior {
    pub fn check(&self) -> Result<()> {
        if !(self.mu_mean.is_finite() && self.mu_mean.abs() <= PRIOR_MAX) {
            return Err(Error::arg("prior$mu_mean", format!("must be a finite number of magnitude at most {PRIOR_MAX:e}, not {}", self.mu_mean)));
        }
        for (v, arg) in [(self.mu_sd, "prior$mu_sd"), (self.gamma_sd, "prior$gamma_sd")] {
            check_scale(v, arg)?;
        }
        self.tau.check("prior$tau")?;
        for cov in self.cov.iter().chain(&self.factor_cov) {
            match *cov {
                CovPrior::InverseWishart(iw) => check_scale(iw.scale, "prior$cov_scale")?,
                CovPrior::Lkj { eta } => check_scale(eta, "prior$lkj_eta")?,
            }
        }
        self.shape.check("prior$shape")?;
        self.sigma.check("prior$sigma")
    }

    /// The prior of factor f's covariance (its K_f terms correlated).
    pub fn factor_cov(&self, f: usize, k: usize) -> CovPrior {
        self.factor_cov.get(f).copied().unwrap_or_else(|| default_factor_cov(k))
    }

    /// The inverse-Wishart's degrees of freedom must exceed K - 1 for K
    /// correlated coefficients (a proper prior): the groups' K (`k`), and
    /// `factor_k`, each correlated factor's (f, K_f).
    pub fn check_for(&self, k: usize, factor_k: impl IntoIterator<Item = (usize, usize)>) -> Result<()> {
        self.check()?;
        let proper = |cov: CovPrior, k: usize, whose: String| match cov {
            CovPrior::InverseWishart(iw) if !(iw.df.is_finite() && iw.df > k as f64 - 1.0 && iw.df <= PRIOR_MAX) => {
                Err(Error::arg("prior$cov_df", format!("must be a number above K - 1 = {} for {k} correlated coefficients{whose}, not {}", k as f64 - 1.0, iw.df)))
            }
            _ => Ok(()),
        };
        if let Some(cov) = self.cov {
            proper(cov, k, String::new())?;
        }
        let mut correlated = self.cov.is_some();
        for (f, kf) in factor_k {
            proper(self.factor_cov(f, kf), kf, format!(" (grouping factor {})", f + 2))?;
            correlated = true;
        }
        // A held tau is a known sd of independent terms; correlated terms
        // have a covariance drawn instead, which would ignore it.
        if correlated && self.tau.fixed().is_some() {
            return Err(Error::arg("prior$tau_fixed", "holds the sds of independent terms; correlated terms have their covariance drawn instead"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gibbs::random::{stream, Block};
    use crate::gibbs::slice::{slice_step, SliceSettings};

    #[test]
    fn scale_prior_curves_are_the_log_density_and_its_derivatives() {
        let priors = [ScalePrior::HalfCauchy(0.7), ScalePrior::HalfT(2.0, 3.0), ScalePrior::HalfNormal(0.5), ScalePrior::Gamma(4.0, 1.5), ScalePrior::Gamma(0.6, 2.0)];
        for prior in priors {
            for s in [0.05, 0.3, 0.7, 1.0, 2.5, 9.0] {
                let (f, d1, d2) = prior.log_density_curve(s);
                assert_eq!(f, prior.log_density(s));
                // Central differences: error O(h^2), relative to the scale.
                let h = 1e-4 * s;
                let num1 = (prior.log_density(s + h) - prior.log_density(s - h)) / (2.0 * h);
                let num2 = (prior.log_density(s + h) - 2.0 * f + prior.log_density(s - h)) / (h * h);
                let (dh1, dh2) = (prior.log_density_curve(s + h).1, prior.log_density_curve(s - h).1);
                assert!((d1 - num1).abs() <= 1e-6 * (1.0 + d1.abs()), "{prior:?} at {s}: d1 {d1} vs {num1}");
                assert!((d2 - (dh1 - dh2) / (2.0 * h)).abs() <= 1e-6 * (1.0 + d2.abs()), "{prior:?} at {s}: d2 {d2}");
                assert!((d2 - num2).abs() <= 1e-3 * (1.0 + d2.abs()), "{prior:?} at {s}: d2 {d2} vs {num2}");
            }
        }
    }

    #[test]
    fn half_t_draws_have_its_quantiles() {
        // Slice draws of log s under HalfT(2, 3) (with the log's Jacobian):
        // s / 2 is |t_3|, whose median is qt(0.75, 3) = 0.764892 and whose
        // 95th percentile is qt(0.975, 3) = 3.182446.
        let prior = ScalePrior::HalfT(2.0, 3.0);
        let logf = |u: f64| prior.log_density(u.exp()) + u;
        let mut rng = stream(4, 0, 0, Block::Tau, 1);
        let (mut u, n) = (0.0, 200_000);
        let mut s: Vec<f64> = (0..n)
            .map(|_| {
                u = slice_step(u, logf(u), logf, &SliceSettings::new(1.0), &mut rng).x;
                u.exp() / 2.0
            })
            .collect();
        s.sort_by(f64::total_cmp);
        let (median, p95) = (s[n / 2], s[n * 95 / 100]);
        assert!((median - 0.764892).abs() < 0.02, "median {median}");
        assert!((p95 - 3.182446).abs() < 0.12, "95th percentile {p95}");
        // One degree of freedom is the half-Cauchy.
        let (c, t) = (ScalePrior::HalfCauchy(2.0), ScalePrior::HalfT(2.0, 1.0));
        assert!(((c.log_density(3.0) - c.log_density(0.5)) - (t.log_density(3.0) - t.log_density(0.5))).abs() < 1e-14);
    }
}
