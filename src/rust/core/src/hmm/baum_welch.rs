//! Baum-Welch (EM) over all sequences jointly: expected counts summed over
//! every sequence, then closed-form re-estimation of start, transition and
//! emission probabilities. Each iteration cannot lower the log-likelihood
//! (with pseudocount > 0: the log-posterior under the Dirichlet prior).

use crate::em::FitStatus;
use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::memory;
use crate::rng::KeyedStream;
use crate::tolerances::HMM_START_TIE_REL;

use super::backward::Counts;
use super::config::CheckedHmmFitConfig;
use super::cpu;
use super::model::HmmModel;
use super::sequences::Sequences;
use super::tables::Tables;

/// Result of a fit: the best start's model and its history.
#[derive(Debug, Clone, PartialEq)]
pub struct HmmFit {
    pub model: HmmModel,
    /// The starting model of the kept start.
    pub init: HmmModel,
    /// Log-likelihood of `model` over all sequences.
    pub loglik: f64,
    /// Log-likelihood of the starting model, then after each iteration.
    pub trace: Vec<f64>,
    pub iterations: usize,
    pub status: FitStatus,
    /// Why the fit failed, if it did.
    pub message: Option<String>,
    /// Final log-likelihood of every start (-inf for failed starts).
    pub start_logliks: Vec<f64>,
    /// 0-based index of the kept start.
    pub best_start: usize,
}

/// A random starting model: every probability vector drawn uniformly from
/// its simplex (Dirichlet(1): normalised Exp(1) draws), keyed by (seed, start).
pub fn random_model(n: usize, v: usize, seed: u64, start: usize) -> HmmModel {
    let mut m = HmmModel { n_states: n, n_symbols: v, start: vec![0.0; n], trans: vec![0.0; n * n], emis: vec![0.0; n * v] };
    fill_random(&mut m, seed, start);
    m
}

/// [`random_model`], its matrices allocated fallibly.
fn try_random_model(n: usize, v: usize, seed: u64, start: usize) -> Result<HmmModel> {
    let mut m = HmmModel {
        n_states: n,
        n_symbols: v,
        start: memory::try_vec(n, 0.0, "a random starting model")?,
        trans: memory::try_vec(n * n, 0.0, "a random starting model")?,
        emis: memory::try_vec(n * v, 0.0, "a random starting model")?,
    };
    fill_random(&mut m, seed, start);
    Ok(m)
}

fn fill_random(m: &mut HmmModel, seed: u64, start: usize) {
    let (n, v) = (m.n_states, m.n_symbols);
    let mut rng = KeyedStream::new(seed, 0, start as u64);
    let mut simplex = |x: &mut [f64]| {
        // Uniform on (0, 1) from the top 53 bits; never 0, so -ln is finite.
        x.iter_mut().for_each(|p| *p = -(((rng.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)).ln());
        let s: f64 = x.iter().sum();
        x.iter_mut().for_each(|p| *p /= s);
    };
    simplex(&mut m.start);
    for i in 0..n {
        simplex(&mut m.trans[i * n..(i + 1) * n]);
    }
    for i in 0..n {
        simplex(&mut m.emis[i * v..(i + 1) * v]);
    }
}

/// Normalise `counts + pc` into `out`; a row with no mass keeps `out`'s old
/// values (that row does not affect the likelihood, so EM stays monotone).
fn normalise(out: &mut [f64], counts: impl Iterator<Item = f64>, pc: f64) {
    let row: Vec<f64> = counts.map(|c| c + pc).collect();
    let s: f64 = row.iter().sum();
    if s > 0.0 && s.is_finite() {
        out.iter_mut().zip(&row).for_each(|(o, c)| *o = c / s);
    }
}

/// The M-step: the model maximising the expected complete-data log-likelihood.
pub fn m_step(model: &HmmModel, counts: &Counts, pc: f64) -> HmmModel {
    let (n, v) = (model.n_states, model.n_symbols);
    let mut next = model.clone();
    normalise(&mut next.start, counts.start.iter().copied(), pc);
    for i in 0..n {
        normalise(&mut next.trans[i * n..(i + 1) * n], (0..n).map(|j| counts.transitions(&model.trans, i, j)), pc);
        normalise(&mut next.emis[i * v..(i + 1) * v], (0..v).map(|k| counts.emis[k * n + i]), pc);
    }
    next
}

/// One backend's Baum-Welch state: the current model and its expected
/// counts over all sequences (the GPU keeps both on the device, so an
/// iteration moves only log-likelihoods to the host).
pub(crate) trait Engine {
    /// Make `model` current and compute its counts: (log-likelihood, first
    /// impossible sequence, 0-based).
    fn load(&mut self, model: &HmmModel) -> Result<(f64, Option<usize>)>;
    /// Replace the current model by its M-step (its counts become stale).
    fn m_step(&mut self, pseudocount: f64) -> Result<()>;
    /// Compute the current model's counts, as `load`.
    fn e_step(&mut self) -> Result<(f64, Option<usize>)>;
    /// The current model, or with `previous` the one before the last M-step.
    fn model(&self, previous: bool) -> Result<HmmModel>;
}

/// An engine whose E-step returns the counts to the host (the CPU's); the
/// M-step runs here.
pub(crate) struct HostEngine<F> {
    e_step: F,
    model: Option<HmmModel>,
    previous: Option<HmmModel>,
    counts: Option<Counts>,
}

impl<F: FnMut(&HmmModel) -> Result<(Counts, f64, Option<usize>)>> HostEngine<F> {
    pub(crate) fn new(e_step: F) -> Self {
        HostEngine { e_step, model: None, previous: None, counts: None }
    }
}

impl<F: FnMut(&HmmModel) -> Result<(Counts, f64, Option<usize>)>> Engine for HostEngine<F> {
    fn load(&mut self, model: &HmmModel) -> Result<(f64, Option<usize>)> {
        self.model = Some(model.clone());
        self.previous = None;
        self.e_step()
    }

    fn m_step(&mut self, pseudocount: f64) -> Result<()> {
        let (Some(model), Some(counts)) = (self.model.take(), self.counts.take()) else {
            return Err(crate::error::Error::Internal("Baum-Welch M-step before an E-step".into()));
        };
        self.model = Some(m_step(&model, &counts, pseudocount));
        self.previous = Some(model);
        Ok(())
    }

    fn e_step(&mut self) -> Result<(f64, Option<usize>)> {
        let Some(model) = &self.model else {
            return Err(crate::error::Error::Internal("Baum-Welch E-step without a model".into()));
        };
        let (counts, ll, impossible) = (self.e_step)(model)?;
        self.counts = Some(counts);
        Ok((ll, impossible))
    }

    fn model(&self, previous: bool) -> Result<HmmModel> {
        let m = if previous { self.previous.as_ref().or(self.model.as_ref()) } else { self.model.as_ref() };
        m.cloned().ok_or_else(|| crate::error::Error::Internal("Baum-Welch engine without a model".into()))
    }
}

/// Run Baum-Welch from `init`.
fn run_start(init: HmmModel, config: &CheckedHmmFitConfig, exec: &Exec, engine: &mut dyn Engine) -> Result<HmmFit> {
    let (mut ll, impossible) = engine.load(&init)?;
    let mut trace = vec![ll];
    let failed = |model: HmmModel, trace: Vec<f64>, iterations: usize, why: String| HmmFit {
        model,
        init: init.clone(),
        loglik: f64::NEG_INFINITY,
        trace,
        iterations,
        status: FitStatus::Failed,
        message: Some(why),
        start_logliks: vec![],
        best_start: 0,
    };
    if let Some(s) = impossible {
        return Ok(failed(init.clone(), trace, 0, format!("sequence {} is impossible under the starting model (probability 0)", s + 1)));
    }
    for iter in 1..=config.max_iters {
        exec.monitor.check()?;
        engine.m_step(config.pseudocount)?;
        let (next_ll, impossible) = engine.e_step()?;
        if let Some(s) = impossible {
            // Cannot happen in exact arithmetic: EM never lowers the likelihood.
            return Ok(failed(engine.model(true)?, trace, iter, format!("sequence {} became impossible at iteration {iter}", s + 1)));
        }
        trace.push(next_ll);
        let change = (next_ll - ll).abs();
        ll = next_ll;
        if change < config.epsilon {
            return Ok(HmmFit { model: engine.model(false)?, init, loglik: ll, trace, iterations: iter, status: FitStatus::Converged, message: None, start_logliks: vec![], best_start: 0 });
        }
    }
    Ok(HmmFit { model: engine.model(false)?, init, loglik: ll, trace, iterations: config.max_iters, status: FitStatus::MaxIters, message: None, start_logliks: vec![], best_start: 0 })
}

/// Fit on the CPU (see [`fit_with`]).
pub fn fit(seqs: &Sequences, config: &CheckedHmmFitConfig, exec: &Exec) -> Result<HmmFit> {
    let chunks = cpu::chunks(seqs, Counts::size(config.n_states, config.n_symbols));
    let seg = cpu::fit_segment(config.n_states, seqs, exec);
    fit_with(config, exec, &mut HostEngine::new(|m: &HmmModel| cpu::e_step(&Tables::new(m)?, seqs, &chunks, seg, exec)))
}

/// Fit from every start (given or random) with a backend's engine and keep
/// the best; starts within [`HMM_START_TIE_REL`] of the best are ties,
/// won by the lowest index. Only the starts that can still win are kept
/// (memory does not grow with the number of starts).
pub(crate) fn fit_with(config: &CheckedHmmFitConfig, exec: &Exec, engine: &mut dyn Engine) -> Result<HmmFit> {
    let tied = |top: f64, l: f64| top.is_finite() && l.is_finite() && (top - l) <= HMM_START_TIE_REL * top.abs().max(1.0);
    let mut start_logliks = memory::try_with_capacity(config.starts(), "the log-likelihoods of the starts")?;
    // Candidates (start index, fit), in start order: those tied with the
    // best so far, or the first start while none is finite.
    let mut kept: Vec<(usize, HmmFit)> = Vec::new();
    let mut top = f64::NEG_INFINITY;
    for s in 0..config.starts() {
        let init = match &config.init {
            Some(m) => m.clone(),
            // Keyed by the start's global index (see HmmFitConfig::first_start).
            None => try_random_model(config.n_states, config.n_symbols, config.seed, config.first_start + s)?,
        };
        let fit = run_start(init, config, exec, engine)?;
        exec.monitor.add_done(1);
        start_logliks.push(fit.loglik);
        if fit.loglik > top {
            top = fit.loglik;
        }
        if kept.is_empty() || tied(top, fit.loglik) {
            kept.push((s, fit));
        }
        kept.retain(|(_, f)| tied(top, f.loglik) || (!top.is_finite() && f.loglik == top));
        if kept.is_empty() {
            return Err(Error::Internal("Baum-Welch kept no start".into()));
        }
    }
    // The lowest-index start tied with the final best (or start 0 when
    // every start failed).
    let pick = kept.iter().position(|(_, f)| tied(top, f.loglik)).unwrap_or(0);
    let (best, mut out) = kept.swap_remove(pick);
    out.start_logliks = start_logliks;
    out.best_start = best;
    Ok(out)
}
