//! Discrete-emission hidden Markov models over many sequences: forward
//! log-likelihood, Viterbi decoding, posterior state probabilities and
//! Baum-Welch training, batched over any number of variable-length sequences.
//!
//! Model: N states, V symbols, start `pi`, transitions `A` (N x N), emissions
//! `B` (N x V). Sequences are stored flat ([`Sequences`]), symbols 0-based.
//! The forward-backward recursions are scaled (probabilities renormalised
//! at every step, log-likelihood = sum of log scales, in double), Viterbi
//! runs in log space; exact zeros are legal and an impossible sequence has
//! log-likelihood -inf. Memory per sequence is O(N) for the log-likelihood
//! and O(T N) for posteriors, Viterbi and Baum-Welch.
//!
//! ```
//! use bulkem_core::exec::Exec;
//! use bulkem_core::hmm::{self, HmmModel, Sequences};
//!
//! let model = HmmModel::new(vec![0.6, 0.4], vec![0.7, 0.3, 0.4, 0.6],
//!     vec![0.5, 0.4, 0.1, 0.1, 0.3, 0.6], 3).unwrap();
//! let seqs = Sequences::from_vecs(&[vec![0u32, 1, 2]]);
//! let ll = hmm::loglik(&model, &seqs, &Exec::cpu()).unwrap();
//! assert!((ll[0] - (-3.316488653735)).abs() < 1e-12);
//! let v = hmm::viterbi(&model, &seqs, &Exec::cpu()).unwrap();
//! assert_eq!(v.states, vec![0, 0, 1]);
//! ```

mod backward;
mod baum_welch;
mod config;
pub mod cpu;
mod forward;
mod model;
mod sequences;
mod simulate;
mod tables;
mod viterbi;

pub use backward::Counts;
pub use baum_welch::{m_step, random_model, HmmFit};
pub use config::{CheckedHmmFitConfig, HmmFitConfig};
pub use model::HmmModel;
pub use sequences::Sequences;
pub use simulate::simulate;
pub use tables::{LogTables, Tables};
pub use viterbi::NO_STATE;

use crate::error::{Error, Result};
use crate::exec::{Backend, Exec};

/// Viterbi decoding of many sequences.
#[derive(Debug, Clone, PartialEq)]
pub struct Viterbi {
    /// Most probable states, laid out like the symbols (0-based;
    /// [`NO_STATE`] throughout an impossible sequence).
    pub states: Vec<u32>,
    /// Log-probability of each sequence's path (joint with the sequence).
    pub log_prob: Vec<f64>,
}

/// Posterior state probabilities of many sequences.
#[derive(Debug, Clone, PartialEq)]
pub struct Posterior {
    /// P(state i at t | sequence): `probs[(offset_s + t) * N + i]`; NaN rows
    /// for an impossible sequence.
    pub probs: Vec<f64>,
    /// Log-likelihood of each sequence.
    pub loglik: Vec<f64>,
}

/// The backend `use.gpu = NA` runs an HMM job on. The HMM routines have
/// only the CPU backend in this version.
pub fn auto_backend(_model_states: usize, _symbols_total: usize) -> Backend {
    Backend::Cpu
}

fn check(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<()> {
    if exec.backend == Backend::Cuda {
        return Err(Error::BackendUnavailable("the hidden Markov model routines have no CUDA backend in this version; use the CPU".into()));
    }
    seqs.validate(model.n_symbols)
}

/// log P(sequence) for every sequence.
pub fn loglik(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<Vec<f64>> {
    check(model, seqs, exec)?;
    cpu::loglik(&Tables::new(model), seqs, exec)
}

/// The most probable state path of every sequence.
pub fn viterbi(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<Viterbi> {
    check(model, seqs, exec)?;
    let (states, log_prob) = cpu::viterbi(&LogTables::new(model), seqs, exec)?;
    Ok(Viterbi { states, log_prob })
}

/// Posterior state probabilities (forward-backward) of every sequence.
pub fn posterior(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<Posterior> {
    check(model, seqs, exec)?;
    let (probs, loglik) = cpu::posterior(&Tables::new(model), seqs, exec)?;
    Ok(Posterior { probs, loglik })
}

/// One Baum-Welch iteration from `model`: the E-step over all sequences and
/// the M-step. Returns the new model and the log-likelihood of `model`.
pub fn baum_welch_step(model: &HmmModel, seqs: &Sequences, pseudocount: f64, exec: &Exec) -> Result<(HmmModel, f64)> {
    check(model, seqs, exec)?;
    let chunks = cpu::chunks(seqs, Counts::size(model.n_states, model.n_symbols));
    let (counts, ll, _) = cpu::e_step(&Tables::new(model), seqs, &chunks, exec)?;
    Ok((m_step(model, &counts, pseudocount), ll))
}

/// Baum-Welch over all sequences jointly, from every start; keeps the best.
pub fn fit(seqs: &Sequences, config: &CheckedHmmFitConfig, exec: &Exec) -> Result<HmmFit> {
    if exec.backend == Backend::Cuda {
        return Err(Error::BackendUnavailable("the hidden Markov model routines have no CUDA backend in this version; use the CPU".into()));
    }
    seqs.validate(config.n_symbols)?;
    baum_welch::fit(seqs, config, exec)
}
