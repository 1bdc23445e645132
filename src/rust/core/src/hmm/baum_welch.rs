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
use super::emission::categorical::{normalise, simplex};
use super::emission::{Categorical, Emission, EmissionFit};
use super::model::HmmModel;
use super::sequences::Sequences;
use super::tables::Tables;

/// Result of a fit: the best start's model and its history.
#[derive(Debug, Clone, PartialEq)]
pub struct HmmFit<E: Emission = Categorical> {
    pub model: HmmModel<E>,
    /// The starting model of the kept start.
    pub init: HmmModel<E>,
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
    /// The states whose emission parameters the last M-step held at a
    /// floor (a Gaussian variance at `var_floor`).
    pub floored: Vec<bool>,
}

/// A random starting categorical model: every probability vector drawn
/// uniformly from its simplex (Dirichlet(1): normalised Exp(1) draws),
/// keyed by (seed, start).
pub fn random_model(n: usize, v: usize, seed: u64, start: usize) -> HmmModel {
    match try_random_model::<Categorical>(n, &v, &Sequences::default(), seed, start) {
        Ok(m) => m,
        Err(e) => panic!("hmm::random_model: {e}"),
    }
}

/// A random starting model of any emission: start and transition rows
/// uniform on their simplices, then the emission's own random start
/// ([`Emission::random`]), all from the stream keyed by (seed, start).
pub fn try_random_model<E: Emission>(n: usize, shape: &E::Shape, data: &Sequences<E::Obs>, seed: u64, start: usize) -> Result<HmmModel<E>> {
    let mut rng = KeyedStream::new(seed, 0, start as u64);
    let mut p = memory::try_vec(n, 0.0, "a random starting model")?;
    let mut trans = memory::try_vec(n * n, 0.0, "a random starting model")?;
    simplex(&mut p, &mut rng);
    for i in 0..n {
        simplex(&mut trans[i * n..(i + 1) * n], &mut rng);
    }
    let emission = E::random(n, shape, data, &mut rng)?;
    Ok(HmmModel { n_states: n, start: p, trans, emission })
}

/// The M-step: the model maximising the expected complete-data
/// log-likelihood (with the pseudocount's Dirichlet prior on start and
/// transitions), and the states the emission held at a floor.
pub fn m_step<E: Emission>(model: &HmmModel<E>, counts: &Counts, fit: &EmissionFit) -> (HmmModel<E>, Vec<bool>) {
    let n = model.n_states;
    let pc = fit.pseudocount;
    let mut start = model.start.clone();
    let mut trans = model.trans.clone();
    normalise(&mut start, counts.start.iter().copied(), pc);
    // Row by row (Counts::transitions, without a call per entry).
    let mut row = Vec::with_capacity(n);
    for i in 0..n {
        let (a, raw) = (&model.trans[i * n..(i + 1) * n], &counts.trans_raw[i * n..(i + 1) * n]);
        let exact = counts.trans.get(i * n..(i + 1) * n);
        row.clear();
        // A zero transition has no count, whatever its raw sum (0 x inf).
        row.extend((0..n).map(|j| if a[j] > 0.0 { a[j] * raw[j] } else { 0.0 } + exact.map_or(0.0, |e| e[j])));
        normalise(&mut trans[i * n..(i + 1) * n], row.iter().copied(), pc);
    }
    let e = model.emission.m_step(&counts.emis, fit);
    (HmmModel { n_states: n, start, trans, emission: e.emission }, e.floored)
}

/// One backend's Baum-Welch state: the current model and its expected
/// counts over all sequences (the GPU keeps both on the device, so an
/// iteration moves only log-likelihoods to the host).
pub(crate) trait Engine<E: Emission = Categorical> {
    /// Make `model` current and compute its counts: (log-likelihood, first
    /// impossible sequence, 0-based).
    fn load(&mut self, model: &HmmModel<E>) -> Result<(f64, Option<usize>)>;
    /// Replace the current model by its M-step (its counts become stale);
    /// returns the states whose emission parameters were held at a floor.
    fn m_step(&mut self, fit: &EmissionFit) -> Result<Vec<bool>>;
    /// Compute the current model's counts, as `load`.
    fn e_step(&mut self) -> Result<(f64, Option<usize>)>;
    /// The current model, or with `previous` the one before the last M-step.
    fn model(&self, previous: bool) -> Result<HmmModel<E>>;
}

/// An engine whose E-step returns the counts to the host (the CPU's); the
/// M-step runs here.
pub(crate) struct HostEngine<E: Emission, F> {
    e_step: F,
    model: Option<HmmModel<E>>,
    previous: Option<HmmModel<E>>,
    counts: Option<Counts>,
}

impl<E: Emission, F: FnMut(&HmmModel<E>) -> Result<(Counts, f64, Option<usize>)>> HostEngine<E, F> {
    pub(crate) fn new(e_step: F) -> Self {
        HostEngine { e_step, model: None, previous: None, counts: None }
    }
}

impl<E: Emission, F: FnMut(&HmmModel<E>) -> Result<(Counts, f64, Option<usize>)>> Engine<E> for HostEngine<E, F> {
    fn load(&mut self, model: &HmmModel<E>) -> Result<(f64, Option<usize>)> {
        self.model = Some(model.clone());
        self.previous = None;
        self.e_step()
    }

    fn m_step(&mut self, fit: &EmissionFit) -> Result<Vec<bool>> {
        let (Some(model), Some(counts)) = (self.model.take(), self.counts.take()) else {
            return Err(crate::error::Error::Internal("Baum-Welch M-step before an E-step".into()));
        };
        let (next, floored) = m_step(&model, &counts, fit);
        self.model = Some(next);
        self.previous = Some(model);
        Ok(floored)
    }

    fn e_step(&mut self) -> Result<(f64, Option<usize>)> {
        let Some(model) = &self.model else {
            return Err(crate::error::Error::Internal("Baum-Welch E-step without a model".into()));
        };
        let (counts, ll, impossible) = (self.e_step)(model)?;
        self.counts = Some(counts);
        Ok((ll, impossible))
    }

    fn model(&self, previous: bool) -> Result<HmmModel<E>> {
        let m = if previous { self.previous.as_ref().or(self.model.as_ref()) } else { self.model.as_ref() };
        m.cloned().ok_or_else(|| crate::error::Error::Internal("Baum-Welch engine without a model".into()))
    }
}

/// Run Baum-Welch from `init`.
fn run_start<E: Emission>(init: HmmModel<E>, config: &CheckedHmmFitConfig<E>, fit: &EmissionFit, exec: &Exec, engine: &mut dyn Engine<E>) -> Result<HmmFit<E>> {
    let (mut ll, impossible) = engine.load(&init)?;
    let mut trace = vec![ll];
    let mut floored = vec![false; init.n_states];
    let failed = |model: HmmModel<E>, trace: Vec<f64>, iterations: usize, why: String| HmmFit {
        model,
        init: init.clone(),
        loglik: f64::NEG_INFINITY,
        trace,
        iterations,
        status: FitStatus::Failed,
        message: Some(why),
        start_logliks: vec![],
        best_start: 0,
        floored: vec![false; init.n_states],
    };
    if let Some(s) = impossible {
        return Ok(failed(init.clone(), trace, 0, format!("sequence {} is impossible under the starting model (probability 0)", s + 1)));
    }
    for iter in 1..=config.max_iters {
        exec.monitor.check()?;
        floored = engine.m_step(fit)?;
        let (next_ll, impossible) = engine.e_step()?;
        if let Some(s) = impossible {
            // Cannot happen in exact arithmetic: EM never lowers the likelihood.
            return Ok(failed(engine.model(true)?, trace, iter, format!("sequence {} became impossible at iteration {iter}", s + 1)));
        }
        trace.push(next_ll);
        let change = (next_ll - ll).abs();
        ll = next_ll;
        if change < config.epsilon {
            return Ok(HmmFit { model: engine.model(false)?, init, loglik: ll, trace, iterations: iter, status: FitStatus::Converged, message: None, start_logliks: vec![], best_start: 0, floored });
        }
    }
    Ok(HmmFit { model: engine.model(false)?, init, loglik: ll, trace, iterations: config.max_iters, status: FitStatus::MaxIters, message: None, start_logliks: vec![], best_start: 0, floored })
}

/// Fit on the CPU (see [`fit_with`]).
pub fn fit<E: Emission>(seqs: &Sequences<E::Obs>, config: &CheckedHmmFitConfig<E>, exec: &Exec) -> Result<HmmFit<E>> {
    let chunks = cpu::chunks(seqs, config.n_states, Counts::size(config.n_states, E::n_stats_of(&config.shape)));
    let seg = cpu::fit_segment(config.n_states, seqs, exec);
    fit_with(config, seqs, exec, &mut HostEngine::new(|m: &HmmModel<E>| {
        // Per model: the scan needs dense transitions, which a fit can lose.
        if super::scan::cpu_chosen(m, seqs, exec) {
            super::scan::cpu_e_step(&Tables::new(m)?, seqs, exec)
        } else {
            cpu::e_step(&Tables::new(m)?, seqs, &chunks, seg, exec)
        }
    }))
}

/// Fit from every start (given or random) with a backend's engine and keep
/// the best; starts within [`HMM_START_TIE_REL`] of the best are ties,
/// won by the lowest index. Only the starts that can still win are kept
/// (memory does not grow with the number of starts).
pub(crate) fn fit_with<E: Emission>(config: &CheckedHmmFitConfig<E>, seqs: &Sequences<E::Obs>, exec: &Exec, engine: &mut dyn Engine<E>) -> Result<HmmFit<E>> {
    let mut settings = config.emission_fit();
    E::resolve(&mut settings, seqs);
    let tied = |top: f64, l: f64| top.is_finite() && l.is_finite() && (top - l) <= HMM_START_TIE_REL * top.abs().max(1.0);
    let mut start_logliks = memory::try_with_capacity(config.starts(), "the log-likelihoods of the starts")?;
    // Candidates (start index, fit), in start order: those tied with the
    // best so far, or the first start while none is finite.
    let mut kept: Vec<(usize, HmmFit<E>)> = Vec::new();
    let mut top = f64::NEG_INFINITY;
    for s in 0..config.starts() {
        let init = match &config.init {
            Some(m) => m.clone(),
            // Keyed by the start's global index (see HmmFitConfig::first_start).
            None => try_random_model(config.n_states, &config.shape, seqs, config.seed, config.first_start + s)?,
        };
        let fit = run_start(init, config, &settings, exec, engine)?;
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
