//! Parameters and results of mixture fits.

use crate::tolerances::START_TIE_REL;

use super::family::Family;

/// Parameters of an M-component mixture. `scale` is lambda (inverse
/// Gaussian shape) or sigma (Normal standard deviation).
#[derive(Debug, Clone, PartialEq)]
pub struct MixParams {
    pub alpha: Vec<f64>,
    pub mu: Vec<f64>,
    pub scale: Vec<f64>,
}

impl MixParams {
    pub fn components(&self) -> usize {
        self.alpha.len()
    }

    /// Why these are not usable starting values, if they are not.
    pub fn check_start(&self, family: Family, components: usize) -> Result<(), String> {
        let info = family.info();
        let names = match info.second {
            Some(second) => format!("alpha, {} and {second}", info.first),
            None => format!("alpha and {}", info.first),
        };
        // One-parameter families carry no second parameter (NaN or anything).
        if self.alpha.len() != components || self.mu.len() != components || (info.second.is_some() && self.scale.len() != components) {
            return Err(format!("{names} must each have {components} values (num.components)"));
        }
        if self.alpha.iter().any(|a| !(a.is_finite() && *a > 0.0)) {
            return Err("alpha must be positive and finite".into());
        }
        let sum: f64 = self.alpha.iter().sum();
        if (sum - 1.0).abs() > 1e-6 {
            return Err(format!("alpha must sum to 1, not {sum}"));
        }
        for j in 0..components {
            family.check_component(self.mu[j], self.scale.get(j).copied().unwrap_or(f64::NAN))?;
        }
        Ok(())
    }

    /// Reorder components by increasing `mu` (ties keep their order); the
    /// same permutation is returned so that companions can follow.
    pub fn sort_by_mu(&mut self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.mu.len()).collect();
        order.sort_by(|&i, &j| self.mu[i].total_cmp(&self.mu[j]));
        self.permute(&order);
        order
    }

    pub fn permute(&mut self, order: &[usize]) {
        let pick = |v: &Vec<f64>| order.iter().map(|&i| v[i]).collect::<Vec<_>>();
        self.alpha = pick(&self.alpha);
        self.mu = pick(&self.mu);
        self.scale = pick(&self.scale);
    }

    pub(crate) fn nan(components: usize) -> Self {
        MixParams { alpha: vec![f64::NAN; components], mu: vec![f64::NAN; components], scale: vec![f64::NAN; components] }
    }
}

/// How a fit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitStatus {
    /// The log-likelihood changed by less than epsilon.
    Converged,
    /// max_iters EM iterations ran without converging; the parameters are valid.
    MaxIters,
    /// No valid fit: see the message.
    Failed,
}

impl FitStatus {
    pub fn name(self) -> &'static str {
        match self {
            FitStatus::Converged => "converged",
            FitStatus::MaxIters => "max_iters",
            FitStatus::Failed => "failed",
        }
    }
}

/// Result of one EM run from one start.
#[derive(Debug, Clone, PartialEq)]
pub struct StartFit {
    pub params: MixParams,
    pub init: MixParams,
    pub loglik: f64,
    pub iterations: usize,
    pub status: FitStatus,
    pub message: Option<String>,
    /// Log-likelihood after each EM iteration.
    pub trace: Vec<f64>,
}

/// Why a start failed, in the words every backend uses.
pub(crate) mod failure {
    use super::super::family::{Family, MStepFailure, EMPTY_COMPONENT};

    pub fn bad_start() -> String {
        "the starting values give a non-finite log-likelihood".into()
    }
    pub fn empty(iter: usize) -> String {
        format!("{EMPTY_COMPONENT} at iteration {iter}")
    }
    pub fn collapsed(family: Family, iter: usize) -> String {
        format!("{} at iteration {iter}", family.collapse_text())
    }
    pub fn m_step(why: MStepFailure, family: Family, iter: usize) -> String {
        match why {
            MStepFailure::Empty => empty(iter),
            MStepFailure::Collapsed => collapsed(family, iter),
        }
    }
    pub fn non_finite(iter: usize) -> String {
        format!("the log-likelihood became non-finite at iteration {iter}")
    }
}

impl StartFit {
    pub(crate) fn failed(components: usize, init: MixParams, iterations: usize, message: String) -> Self {
        StartFit {
            params: MixParams::nan(components),
            init,
            loglik: f64::NAN,
            iterations,
            status: FitStatus::Failed,
            message: Some(message),
            trace: Vec::new(),
        }
    }
}

/// Index of the start to keep: the highest log-likelihood among the starts
/// that did not fail. Starts within START_TIE_REL (relative) of the best are
/// ties and the lowest index wins: several starts usually reach the same
/// optimum, and their log-likelihoods then differ only by rounding and the
/// stopping rule, which must not decide (thread count, backend).
pub fn best_start(logliks: &[f64], ok: &[bool]) -> Option<usize> {
    let top = logliks.iter().zip(ok).filter(|(_, &ok)| ok).map(|(&l, _)| l).fold(f64::NEG_INFINITY, f64::max);
    let tie = START_TIE_REL * top.abs();
    (0..logliks.len()).find(|&i| ok[i] && logliks[i] >= top - tie)
}

/// The fit of one dataset: its best start, plus every start's log-likelihood.
#[derive(Debug, Clone, PartialEq)]
pub struct MixFit {
    /// Fitted parameters, components ordered by increasing mu (NaN when failed).
    pub params: MixParams,
    /// Starting values of the best start, in the same component order.
    pub init: MixParams,
    pub loglik: f64,
    pub iterations: usize,
    pub status: FitStatus,
    /// Why the fit failed (None unless `status` is Failed).
    pub message: Option<String>,
    pub n: usize,
    /// The sum of the observation weights, for weighted data (None: each
    /// observation weighs 1).
    pub weight_total: Option<f64>,
    /// Final log-likelihood of every start (NaN for failed starts).
    pub start_logliks: Vec<f64>,
    /// 0-based index of the start that was kept.
    pub best_start: usize,
    /// Log-likelihood after each iteration of the kept start (empty unless
    /// the configuration keeps it).
    pub trace: Vec<f64>,
    /// Posterior probabilities, n x M column-major, when asked for.
    pub posterior: Option<Vec<f64>>,
}

impl MixFit {
    pub fn success(&self) -> bool {
        self.status != FitStatus::Failed
    }

    /// The number of observations the criteria see: the sum of the weights
    /// for weighted data, else n.
    pub fn nobs(&self) -> f64 {
        self.weight_total.unwrap_or(self.n as f64)
    }

    /// The fit of a dataset from its chosen start (the best one, or the
    /// first when every start failed) and every start's log-likelihood.
    /// Components are ordered by increasing first parameter unless `keep_order`
    /// (held values name their components by position).
    pub(crate) fn from_chosen(start: StartFit, index: usize, start_logliks: Vec<f64>, n: usize, keep_order: bool) -> MixFit {
        let n_starts = start_logliks.len();
        if start.status == FitStatus::Failed {
            let why = start.message.unwrap_or_default();
            let message = if n_starts == 1 { why } else { format!("all {n_starts} starts failed; the first: {why}") };
            return MixFit {
                params: start.params,
                init: start.init,
                loglik: f64::NAN,
                iterations: start.iterations,
                status: FitStatus::Failed,
                message: Some(message),
                n,
                weight_total: None,
                start_logliks,
                best_start: 0,
                trace: Vec::new(),
                posterior: None,
            };
        }
        let mut params = start.params;
        let mut init = start.init;
        if !keep_order {
            let order = params.sort_by_mu();
            init.permute(&order);
        }
        MixFit {
            params,
            init,
            loglik: start.loglik,
            iterations: start.iterations,
            status: start.status,
            message: None,
            n,
            weight_total: None,
            start_logliks,
            best_start: index,
            trace: start.trace,
            posterior: None,
        }
    }
}
