//! Discrete-emission hidden Markov models over many sequences: forward
//! log-likelihood, Viterbi decoding, posterior state probabilities and
//! Baum-Welch training, batched over any number of variable-length sequences.
//!
//! Model: N states, V symbols, start `pi`, transitions `A` (N x N), emissions
//! `B` (N x V). Sequences are stored flat ([`Sequences`]), symbols 0-based.
//! The forward-backward recursions are scaled (probabilities renormalised
//! at every step, log-likelihood = sum of log scales, in double), Viterbi
//! runs in log space; exact zeros are legal and an impossible sequence has
//! log-likelihood -inf. A sequence the scaled recursions cannot certify
//! (probabilities or filtered state weights that leave the double range,
//! see [`Tables::theta`]) is computed in log space instead, so tiny and
//! subnormal probabilities give exact answers, never a false -inf. Memory
//! per sequence is O(N) for the log-likelihood, the output for posteriors,
//! and for Viterbi and Baum-Welch O(T N), or O(sqrt(T) N) in checkpointed
//! segments when that does not fit. Every call estimates its memory first
//! ([`HmmJob`]) and polls its monitor within long sequences.
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
pub mod gpu;
mod model;
mod passes;
mod robust;
mod sequences;
mod simulate;
mod size;
mod tables;
mod viterbi;

pub use backward::Counts;
pub use baum_welch::{m_step, random_model, HmmFit};
pub use config::{CheckedHmmFitConfig, HmmFitConfig};
pub use model::HmmModel;
pub use sequences::Sequences;
pub use simulate::{simulate, simulate_with};
pub use size::{HmmJob, Pass};
pub use tables::{LogTables, Tables};
pub use viterbi::NO_STATE;

use crate::error::Result;
use crate::exec::{Backend, Exec, Job};

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

/// Work (symbol x N^2 x passes) below which the CPU answers sooner than a
/// GPU, which also pays its kernel compilation on first use in a process.
/// The CPU does about 1e9 such units per second per core (BENCHMARKS.md,
/// N = 10: 5,000 symbols in 0.43 ms); not yet tuned against GPU timings.
pub const GPU_MIN_WORK: f64 = 1e10;

/// The job `use.gpu = NA` sees (for [`crate::exec::choose_backend`]): work
/// of `symbols` symbols x N^2 x `passes` passes over the data.
pub fn job(states: usize, symbols: usize, passes: usize) -> Job {
    Job {
        work: symbols as f64 * (states as f64).powi(2) * passes as f64,
        gpu_min_work: GPU_MIN_WORK,
        gpu_unsupported: (states > gpu::MAX_GPU_STATES).then(|| format!("the GPU kernels handle up to {} states, not {states}", gpu::MAX_GPU_STATES)),
    }
}

/// Validate the sequences against the model and check the call's memory.
fn check(pass: Pass, model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<()> {
    seqs.validate(model.n_symbols)?;
    HmmJob::of(pass, model.n_states, model.n_symbols, seqs, exec.threads).ensure()
}

/// log P(sequence) for every sequence.
pub fn loglik(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<Vec<f64>> {
    check(Pass::Loglik, model, seqs, exec)?;
    match exec.backend {
        Backend::Cpu => cpu::loglik(&Tables::new(model)?, seqs, exec),
        Backend::Cuda => gpu::loglik(model, seqs, exec),
    }
}

/// The most probable state path of every sequence.
pub fn viterbi(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<Viterbi> {
    check(Pass::Viterbi, model, seqs, exec)?;
    let (states, log_prob) = match exec.backend {
        Backend::Cpu => cpu::viterbi(&LogTables::new(model)?, seqs, exec)?,
        Backend::Cuda => gpu::viterbi(model, seqs, exec)?,
    };
    Ok(Viterbi { states, log_prob })
}

/// Posterior state probabilities (forward-backward) of every sequence.
pub fn posterior(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<Posterior> {
    check(Pass::Posterior, model, seqs, exec)?;
    let (probs, loglik) = match exec.backend {
        Backend::Cpu => cpu::posterior(&Tables::new(model)?, seqs, exec)?,
        Backend::Cuda => gpu::posterior(model, seqs, exec)?,
    };
    Ok(Posterior { probs, loglik })
}

/// One Baum-Welch iteration from `model`: the E-step over all sequences and
/// the M-step. Returns the new model and the log-likelihood of `model`.
pub fn baum_welch_step(model: &HmmModel, seqs: &Sequences, pseudocount: f64, exec: &Exec) -> Result<(HmmModel, f64)> {
    check(Pass::Fit, model, seqs, exec)?;
    match exec.backend {
        Backend::Cpu => {
            let chunks = cpu::chunks(seqs, Counts::size(model.n_states, model.n_symbols));
            let seg = cpu::fit_segment(model.n_states, seqs, exec);
            let (counts, ll, _) = cpu::e_step(&Tables::new(model)?, seqs, &chunks, seg, exec)?;
            Ok((m_step(model, &counts, pseudocount), ll))
        }
        Backend::Cuda => gpu::baum_welch_step(model, seqs, pseudocount, exec),
    }
}

/// Baum-Welch over all sequences jointly, from every start; keeps the best.
pub fn fit(seqs: &Sequences, config: &CheckedHmmFitConfig, exec: &Exec) -> Result<HmmFit> {
    seqs.validate(config.n_symbols)?;
    HmmJob::of(Pass::Fit, config.n_states, config.n_symbols, seqs, exec.threads).starts(config.starts()).ensure()?;
    match exec.backend {
        Backend::Cpu => baum_welch::fit(seqs, config, exec),
        Backend::Cuda => gpu::fit(seqs, config, exec),
    }
}
