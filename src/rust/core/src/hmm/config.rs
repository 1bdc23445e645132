//! Validated settings of a Baum-Welch fit (params builder + `check`).

use crate::error::{Error, Result};
use crate::tolerances::MAX_RANDOM_INITS;

use super::emission::{Categorical, Emission, EmissionFit};
use super::model::HmmModel;

/// Settings of [`super::fit`]. Build with [`HmmFitConfig::new`], adjust with
/// the setters, then call [`HmmFitConfig::check`].
#[derive(Debug, Clone, PartialEq)]
pub struct HmmFitConfig<E: Emission = Categorical> {
    pub n_states: usize,
    /// What the emission fixes besides N (a categorical emission's number
    /// of symbols).
    pub shape: E::Shape,
    /// Starting model; `None` draws `random_inits` random ones.
    pub init: Option<HmmModel<E>>,
    pub max_iters: usize,
    pub epsilon: f64,
    pub random_inits: usize,
    /// Added to every expected count before normalising (a Dirichlet prior
    /// with parameters 1 + pseudocount; MAP instead of ML when > 0).
    pub pseudocount: f64,
    /// Smallest variance of a Gaussian state (`None`: 1e-6 of the data's
    /// variance); ignored by other emissions.
    pub var_floor: Option<f64>,
    pub seed: u64,
    /// Global index of the first random start: start `s` of this call is
    /// keyed by (seed, first_start + s), so a caller can split the starts of
    /// one fit over several calls (e.g. R's future workers) and get the
    /// starts of one call. `start_logliks` and `best_start` stay relative
    /// to this call. Ignored with `init`.
    pub first_start: usize,
}

/// An [`HmmFitConfig`] that passed [`HmmFitConfig::check`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedHmmFitConfig<E: Emission = Categorical>(pub(crate) HmmFitConfig<E>);

impl<E: Emission> std::ops::Deref for CheckedHmmFitConfig<E> {
    type Target = HmmFitConfig<E>;
    fn deref(&self) -> &HmmFitConfig<E> {
        &self.0
    }
}

impl HmmFitConfig<Categorical> {
    /// A categorical fit of `n_states` states and `n_symbols` symbols.
    pub fn new(n_states: usize, n_symbols: usize) -> Self {
        Self::for_emission(n_states, n_symbols)
    }
}

impl<E: Emission> HmmFitConfig<E> {
    /// A fit of `n_states` states of the emission `E` with this shape.
    pub fn for_emission(n_states: usize, shape: E::Shape) -> Self {
        HmmFitConfig { n_states, shape, init: None, max_iters: 100, epsilon: 1e-6, random_inits: 1, pseudocount: 0.0, var_floor: None, seed: 0, first_start: 0 }
    }
    pub fn init(mut self, model: HmmModel<E>) -> Self {
        self.init = Some(model);
        self
    }
    pub fn max_iters(mut self, n: usize) -> Self {
        self.max_iters = n;
        self
    }
    pub fn epsilon(mut self, eps: f64) -> Self {
        self.epsilon = eps;
        self
    }
    pub fn random_inits(mut self, n: usize) -> Self {
        self.random_inits = n;
        self
    }
    pub fn pseudocount(mut self, pc: f64) -> Self {
        self.pseudocount = pc;
        self
    }
    pub fn var_floor(mut self, floor: Option<f64>) -> Self {
        self.var_floor = floor;
        self
    }
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    pub fn first_start(mut self, k: usize) -> Self {
        self.first_start = k;
        self
    }

    /// Number of starts run.
    pub fn starts(&self) -> usize {
        if self.init.is_some() { 1 } else { self.random_inits }
    }

    /// Validate every setting; the error names the offending argument.
    pub fn check(self) -> Result<CheckedHmmFitConfig<E>> {
        if self.n_states == 0 {
            return Err(Error::arg("n.states", "must be at least 1"));
        }
        if let Some(why) = E::check_shape(&self.shape) {
            return Err(why);
        }
        if let Some(f) = self.var_floor {
            if !(f > 0.0 && f.is_finite()) {
                return Err(Error::arg("var.floor", format!("must be a finite number > 0, not {f}")));
            }
        }
        if self.max_iters == 0 {
            return Err(Error::arg("max.iters", "must be at least 1"));
        }
        if !(self.epsilon >= 0.0 && self.epsilon.is_finite()) {
            return Err(Error::arg("epsilon", format!("must be a finite number >= 0, not {}", self.epsilon)));
        }
        if !(self.pseudocount >= 0.0 && self.pseudocount.is_finite()) {
            return Err(Error::arg("pseudocount", format!("must be a finite number >= 0, not {}", self.pseudocount)));
        }
        if self.random_inits == 0 || self.random_inits > MAX_RANDOM_INITS {
            return Err(Error::arg("random.inits", format!("must be between 1 and {MAX_RANDOM_INITS}, not {}", self.random_inits)));
        }
        // The starts of all calls together are one fit's starts.
        if self.init.is_none() && self.first_start > MAX_RANDOM_INITS - self.random_inits {
            return Err(Error::arg(
                "random.inits",
                format!("starts {} to {} exceed the {MAX_RANDOM_INITS} starts of one fit", self.first_start + 1, self.first_start + self.random_inits),
            ));
        }
        if let Some(m) = &self.init {
            if m.n_states != self.n_states || m.emission.shape() != self.shape {
                let (have, want) = (E::describe_shape(&m.emission.shape()), E::describe_shape(&self.shape));
                return Err(Error::arg("init", format!("has {} states and {have} but the fit has {} states and {want}", m.n_states, self.n_states)));
            }
        }
        Ok(CheckedHmmFitConfig(self))
    }

    /// The emission's M-step settings (defaults not yet resolved).
    pub(crate) fn emission_fit(&self) -> EmissionFit {
        EmissionFit { pseudocount: self.pseudocount, var_floor: self.var_floor.unwrap_or(f64::NAN) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(config: HmmFitConfig, arg: &str) {
        match config.check() {
            Err(Error::InvalidArgument { arg: a, .. }) => assert_eq!(a, arg),
            other => panic!("expected an error about {arg}, got {other:?}"),
        }
    }

    #[test]
    fn each_invalid_setting_is_named() {
        let ok = HmmFitConfig::new(2, 3);
        assert!(ok.clone().check().is_ok());
        bad(HmmFitConfig::new(0, 3), "n.states");
        bad(HmmFitConfig::new(2, 0), "n.symbols");
        bad(ok.clone().max_iters(0), "max.iters");
        bad(ok.clone().epsilon(f64::NAN), "epsilon");
        bad(ok.clone().pseudocount(-1.0), "pseudocount");
        bad(ok.clone().random_inits(0), "random.inits");
        bad(ok.clone().random_inits(2).first_start(MAX_RANDOM_INITS - 1), "random.inits");
        assert!(ok.clone().random_inits(2).first_start(MAX_RANDOM_INITS - 2).check().is_ok());
        let m = HmmModel::new(vec![1.0], vec![1.0], vec![0.5, 0.5], 2).unwrap();
        bad(ok.clone().init(m), "init");
    }
}
