//! Validated settings of a many-dataset EM fit (params builder + `check`).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::tolerances::MAX_RANDOM_INITS;

use super::censored::Censoring;
use super::constraints::Constraints;
use super::family::Family;
use super::fit::MixParams;

/// How a random start is drawn (see `super::starts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMethod {
    /// Even-numbered starts (the first, third, ...) by k-means++, the others
    /// by subsets: each finds optima the other misses (spread-out small
    /// components; overlapping components of different spreads).
    Mixed,
    /// k-means++ seeding on (a sample of) the observations: starting means
    /// spread over the data, so small, distant components are found.
    KMeansPlusPlus,
    /// The 2015 package's starts: each component from the ML estimate of 3
    /// random observations, equal weights.
    Subsets,
}

impl StartMethod {
    pub fn parse(name: &str) -> Option<StartMethod> {
        match name {
            "mixed" => Some(StartMethod::Mixed),
            "kmeans++" => Some(StartMethod::KMeansPlusPlus),
            "subsets" => Some(StartMethod::Subsets),
            _ => None,
        }
    }
}

/// The arithmetic of the E-step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// float64 throughout.
    Double,
    /// float32 responsibilities (exp, their sum, its reciprocal) and float32
    /// sums over groups of observations added in float64; log-densities,
    /// their maximum, the M-step and the reported log-likelihood (a final
    /// float64 E-step) in float64. See `super::cpu::e_step_mixed`.
    Mixed,
}

impl Precision {
    pub fn parse(name: &str) -> Option<Precision> {
        match name {
            "double" => Some(Precision::Double),
            "mixed" => Some(Precision::Mixed),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::Double => "double",
            Precision::Mixed => "mixed",
        }
    }
}

/// How each dataset's EM is started.
#[derive(Debug, Clone, PartialEq)]
pub enum Starts {
    /// `count` random starts per dataset, drawn from the keyed streams.
    Random { count: usize, method: StartMethod },
    /// Explicit starting values: one for all datasets, or one per dataset.
    Given(Vec<MixParams>),
}

/// Settings of [`super::fit_many`]. Build with [`EmConfig::new`], adjust with
/// the setters, then call [`EmConfig::check`].
#[derive(Debug, Clone, PartialEq)]
pub struct EmConfig {
    pub family: Family,
    pub components: usize,
    pub max_iters: usize,
    pub epsilon: f64,
    pub starts: Starts,
    pub seed: u64,
    /// Index of the first dataset in the caller's whole collection: random
    /// streams are keyed by the global index, so a chunked call gives the
    /// same answer as one call.
    pub dataset_offset: usize,
    pub keep_posterior: bool,
    /// Keep the log-likelihood after each iteration of the kept start.
    pub keep_trace: bool,
    pub precision: Precision,
    /// Observation weights, one vector per dataset of the call (dataset
    /// `dataset_offset + i` has `weights[i]`); None: every weight 1. A
    /// weight multiplies the observation's log-density, so integer weights
    /// fit as the data with each observation repeated. Checked against the
    /// data by `super::data::check_weights`.
    pub weights: Option<Arc<Vec<Vec<f64>>>>,
    /// Constraints on the parameters (a shared second parameter, held
    /// values); None: every parameter free. Checked by [`EmConfig::check`].
    pub constraints: Option<Arc<Constraints>>,
    /// Censored observations, one entry per dataset of the call (as
    /// `weights`); None: every observation exact. Checked against the data
    /// by `super::censored::check`.
    pub censoring: Option<Arc<Vec<Censoring>>>,
}

/// An [`EmConfig`] that passed [`EmConfig::check`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedEmConfig(pub(crate) EmConfig);

impl CheckedEmConfig {
    /// The same checked settings with observation weights: `check` does not
    /// read them (the fit checks them against the data), so a caller may
    /// attach them later, e.g. once copied on the call's threads.
    pub fn with_weights(&self, weights: Vec<Vec<f64>>) -> Self {
        CheckedEmConfig(self.0.clone().weights(weights))
    }
}

impl std::ops::Deref for CheckedEmConfig {
    type Target = EmConfig;
    fn deref(&self) -> &EmConfig {
        &self.0
    }
}

impl EmConfig {
    pub fn new(family: Family, components: usize) -> Self {
        EmConfig {
            family,
            components,
            max_iters: 100,
            epsilon: 1e-6,
            starts: Starts::Random { count: 1, method: StartMethod::Mixed },
            seed: 0,
            dataset_offset: 0,
            keep_posterior: false,
            keep_trace: false,
            precision: Precision::Double,
            weights: None,
            constraints: None,
            censoring: None,
        }
    }
    pub fn max_iters(mut self, n: usize) -> Self {
        self.max_iters = n;
        self
    }
    pub fn epsilon(mut self, eps: f64) -> Self {
        self.epsilon = eps;
        self
    }
    /// `count` random starts per dataset, drawn with the current method.
    pub fn random_inits(mut self, count: usize) -> Self {
        self.starts = Starts::Random { count, method: self.start_method() };
        self
    }
    /// How random starts are drawn (default mixed).
    pub fn start_method(&self) -> StartMethod {
        match self.starts {
            Starts::Random { method, .. } => method,
            Starts::Given(_) => StartMethod::Mixed,
        }
    }
    pub fn starts_by(mut self, method: StartMethod) -> Self {
        if let Starts::Random { count, .. } = self.starts {
            self.starts = Starts::Random { count, method };
        }
        self
    }
    /// The same settings for `components` components (model selection).
    pub fn with_components(&self, components: usize) -> Self {
        EmConfig { components, ..self.clone() }
    }
    pub fn inits(mut self, inits: Vec<MixParams>) -> Self {
        self.starts = Starts::Given(inits);
        self
    }
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    pub fn dataset_offset(mut self, offset: usize) -> Self {
        self.dataset_offset = offset;
        self
    }
    pub fn keep_posterior(mut self, keep: bool) -> Self {
        self.keep_posterior = keep;
        self
    }
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }
    pub fn keep_trace(mut self, keep: bool) -> Self {
        self.keep_trace = keep;
        self
    }
    /// Observation weights, one vector per dataset of the call.
    pub fn weights(mut self, weights: Vec<Vec<f64>>) -> Self {
        self.weights = Some(Arc::new(weights));
        self
    }
    /// Constraints on the parameters (see [`Constraints`]).
    pub fn constraints(mut self, constraints: Constraints) -> Self {
        self.constraints = Some(Arc::new(constraints));
        self
    }
    /// Censored observations, one entry per dataset of the call.
    pub fn censoring(mut self, censoring: Vec<Censoring>) -> Self {
        self.censoring = Some(Arc::new(censoring));
        self
    }
    /// The censored observations of dataset `dataset` (its global index), if any.
    pub fn censoring_of(&self, dataset: usize) -> Option<&Censoring> {
        self.censoring.as_ref().and_then(|c| c.get(dataset.checked_sub(self.dataset_offset)?)).filter(|c| !c.index.is_empty())
    }
    /// Free parameters of a fit with these settings (the degrees of
    /// freedom of its log-likelihood).
    pub fn free_parameters(&self) -> usize {
        match &self.constraints {
            Some(c) => c.free_parameters(self.family, self.components),
            None => self.family.parameters(self.components),
        }
    }
    /// The weights of dataset `dataset` (its global index), if weighted.
    pub fn weights_of(&self, dataset: usize) -> Option<&[f64]> {
        self.weights.as_ref().and_then(|w| w.get(dataset.checked_sub(self.dataset_offset)?)).map(|w| &w[..])
    }

    /// Number of starts run per dataset.
    pub fn starts_per_dataset(&self) -> usize {
        match &self.starts {
            Starts::Random { count, .. } => *count,
            Starts::Given(_) => 1,
        }
    }

    /// Validate every setting; the error names the offending argument.
    pub fn check(self) -> Result<CheckedEmConfig> {
        if self.components == 0 {
            return Err(Error::arg("num.components", "must be at least 1"));
        }
        if self.max_iters == 0 {
            return Err(Error::arg("max.iters", "must be at least 1"));
        }
        if !(self.epsilon >= 0.0 && self.epsilon.is_finite()) {
            return Err(Error::arg("epsilon", format!("must be a finite number >= 0, not {}", self.epsilon)));
        }
        if let Some(c) = &self.constraints {
            c.check(self.family, self.components)?;
        }
        if self.censoring.as_ref().is_some_and(|c| c.iter().any(|d| !d.index.is_empty())) {
            super::censored::check_family(self.family)?;
        }
        match &self.starts {
            Starts::Random { count, .. } => {
                if *count == 0 || *count > MAX_RANDOM_INITS {
                    return Err(Error::arg(
                        "random.inits",
                        format!("must be between 1 and {MAX_RANDOM_INITS}, not {count}"),
                    ));
                }
            }
            Starts::Given(inits) => {
                if inits.is_empty() {
                    return Err(Error::arg("inits", "must hold at least one set of starting values"));
                }
                for (i, p) in inits.iter().enumerate() {
                    p.check_start(self.family, self.components)
                        .map_err(|why| Error::arg("inits", format!("set {}: {why}", i + 1)))?;
                }
            }
        }
        Ok(CheckedEmConfig(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(config: EmConfig, arg: &str) {
        match config.check() {
            Err(Error::InvalidArgument { arg: a, .. }) => assert_eq!(a, arg),
            other => panic!("expected an error about {arg}, got {other:?}"),
        }
    }

    #[test]
    fn each_invalid_setting_is_named() {
        let ok = EmConfig::new(Family::InvGauss, 2);
        assert!(ok.clone().check().is_ok());
        bad(EmConfig::new(Family::InvGauss, 0), "num.components");
        bad(ok.clone().max_iters(0), "max.iters");
        bad(ok.clone().epsilon(-1.0), "epsilon");
        bad(ok.clone().epsilon(f64::NAN), "epsilon");
        bad(ok.clone().random_inits(0), "random.inits");
        bad(ok.clone().inits(vec![]), "inits");
        let p = MixParams { alpha: vec![0.5, 0.5], mu: vec![1.0, -2.0], scale: vec![1.0, 1.0] };
        bad(ok.clone().inits(vec![p.clone()]), "inits");
        assert!(EmConfig::new(Family::Normal, 2).inits(vec![p]).check().is_ok());
    }
}
