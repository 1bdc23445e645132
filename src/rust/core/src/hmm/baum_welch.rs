//! Baum-Welch (EM) over all sequences jointly: expected counts summed over
//! every sequence, then closed-form re-estimation of start, transition and
//! emission probabilities. Each iteration cannot lower the log-likelihood
//! (with pseudocount > 0: the log-posterior under the Dirichlet prior).

use crate::em::FitStatus;
use crate::error::Result;
use crate::exec::Exec;
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
    let mut rng = KeyedStream::new(seed, 0, start as u64);
    let mut simplex = |len: usize| {
        // Uniform on (0, 1) from the top 53 bits; never 0, so -ln is finite.
        let mut x: Vec<f64> = (0..len).map(|_| -(((rng.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)).ln()).collect();
        let s: f64 = x.iter().sum();
        x.iter_mut().for_each(|p| *p /= s);
        x
    };
    let start_p = simplex(n);
    let trans = (0..n).flat_map(|_| simplex(n)).collect();
    let emis = (0..n).flat_map(|_| simplex(v)).collect();
    HmmModel { n_states: n, n_symbols: v, start: start_p, trans, emis }
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
        let a = &model.trans[i * n..(i + 1) * n];
        let raw = &counts.trans_raw[i * n..(i + 1) * n];
        normalise(&mut next.trans[i * n..(i + 1) * n], a.iter().zip(raw).map(|(p, r)| p * r), pc);
        normalise(&mut next.emis[i * v..(i + 1) * v], (0..v).map(|k| counts.emis[k * n + i]), pc);
    }
    next
}

/// One E-step over all sequences on some backend: expected counts, total
/// log-likelihood, first impossible sequence (0-based).
pub(crate) type EStep<'a> = dyn FnMut(&HmmModel) -> Result<(Counts, f64, Option<usize>)> + 'a;

/// Run Baum-Welch from `init`.
fn run_start(init: HmmModel, config: &CheckedHmmFitConfig, exec: &Exec, e_step: &mut EStep) -> Result<HmmFit> {
    let mut model = init.clone();
    let (mut counts, mut ll, impossible) = e_step(&model)?;
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
        return Ok(failed(model, trace, 0, format!("sequence {} is impossible under the starting model (probability 0)", s + 1)));
    }
    for iter in 1..=config.max_iters {
        exec.monitor.check()?;
        let next = m_step(&model, &counts, config.pseudocount);
        let (next_counts, next_ll, impossible) = e_step(&next)?;
        if let Some(s) = impossible {
            // Cannot happen in exact arithmetic: EM never lowers the likelihood.
            return Ok(failed(model, trace, iter, format!("sequence {} became impossible at iteration {iter}", s + 1)));
        }
        trace.push(next_ll);
        let change = (next_ll - ll).abs();
        model = next;
        counts = next_counts;
        ll = next_ll;
        if change < config.epsilon {
            return Ok(HmmFit { model, init, loglik: ll, trace, iterations: iter, status: FitStatus::Converged, message: None, start_logliks: vec![], best_start: 0 });
        }
    }
    Ok(HmmFit { model, init, loglik: ll, trace, iterations: config.max_iters, status: FitStatus::MaxIters, message: None, start_logliks: vec![], best_start: 0 })
}

/// Fit on the CPU (see [`fit_with`]).
pub fn fit(seqs: &Sequences, config: &CheckedHmmFitConfig, exec: &Exec) -> Result<HmmFit> {
    let chunks = cpu::chunks(seqs, Counts::size(config.n_states, config.n_symbols));
    fit_with(config, exec, &mut |m: &HmmModel| cpu::e_step(&Tables::new(m), seqs, &chunks, exec))
}

/// Fit from every start (given or random) with the E-step of a backend and
/// keep the best; starts within [`HMM_START_TIE_REL`] of the best are ties,
/// won by the lowest index.
pub(crate) fn fit_with(config: &CheckedHmmFitConfig, exec: &Exec, e_step: &mut EStep) -> Result<HmmFit> {
    let mut fits = Vec::with_capacity(config.starts());
    for s in 0..config.starts() {
        let init = match &config.init {
            Some(m) => m.clone(),
            None => random_model(config.n_states, config.n_symbols, config.seed, s),
        };
        fits.push(run_start(init, config, exec, e_step)?);
        exec.monitor.add_done(1);
    }
    let start_logliks: Vec<f64> = fits.iter().map(|f| f.loglik).collect();
    let top = start_logliks.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let best = start_logliks
        .iter()
        .position(|&l| top.is_finite() && l.is_finite() && (top - l) <= HMM_START_TIE_REL * top.abs().max(1.0))
        .unwrap_or(0);
    let mut out = fits.swap_remove(best);
    out.start_logliks = start_logliks;
    out.best_start = best;
    Ok(out)
}
