//! Hidden Markov models over many sequences: forward log-likelihood,
//! Viterbi decoding, posterior state probabilities, Baum-Welch training and
//! simulation, batched over any number of variable-length sequences.
//!
//! Model: N states, start `pi`, transitions `A` (N x N) and an emission
//! distribution ([`emission`]: categorical, Gaussian or Poisson), one
//! interface that every recursion reads. Sequences are stored flat
//! ([`Sequences`]). The forward-backward recursions are scaled
//! (probabilities renormalised at every step, log-likelihood = sum of log
//! scales, in double), Viterbi runs in log space; exact zeros are legal and
//! an impossible sequence has log-likelihood -inf. A sequence the scaled
//! recursions cannot certify (products that leave the double range, see
//! [`tables::Certificate`]) is computed in log space instead, so tiny and
//! subnormal probabilities give exact answers, never a false -inf. Memory
//! per sequence is O(N) for the log-likelihood, the output for posteriors,
//! and for Viterbi and Baum-Welch O(T N), or O(sqrt(T) N) in checkpointed
//! segments when that does not fit. Every call estimates its memory first
//! ([`HmmJob`]) and polls its monitor within long sequences. The GPU backend
//! runs every emission: categorical ones through their tables by symbol,
//! densities through rows computed on the device (`gpu`'s `rows`).
//!
//! Few long sequences (one chromosome, one recording) run parallel in time
//! ([`scan`]: chunks of time steps computed at once, then joined): on the
//! GPU when they are too few to fill it, on the CPU when it has more threads
//! than sequences and at least 6N of them. Forward, posteriors, Viterbi and
//! Baum-Welch's E-step take it.
//!
//! A caller that passes the same model call after call (R, whose matrices
//! must be laid out and checked every time) keeps it ([`keep_model`],
//! found again by its values with [`find_kept_model`], or run on at once
//! while its values are compared beside the pass with [`on_kept_model`]):
//! the passes then make its CPU tables and device tables once.
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
mod choice;
mod config;
pub mod cpu;
pub mod emission;
mod forward;
mod kept;
pub mod layout;
pub mod gpu;
mod model;
mod passes;
mod paths;
mod robust;
pub mod scan;
mod sequences;
mod simulate;
mod size;
pub mod tables;
mod viterbi;

use std::any::Any;

pub use backward::Counts;
pub use baum_welch::{m_step, random_model, try_random_model, HmmFit};
pub use choice::{cpu_seconds, gpu_seconds, job, CallShape};
pub use config::{CheckedHmmFitConfig, HmmFitConfig};
pub use emission::{Categorical, Emission, EmissionFit, EmissionKind, Gaussian, Poisson};
pub use kept::{find_kept_model, forget_kept_models, keep_model, on_kept_model};
pub use model::HmmModel;
pub use paths::Paths;
pub use sequences::{flatten_codes, flatten_values, zero_based, Codes, Sequences};
pub use simulate::{simulate, simulate_with};
pub use size::{HmmJob, Pass};
pub use tables::{row_major, LogTables, Tables};
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

/// Check every observation against the emission: the error names the
/// sequence, the position and what observations must be.
pub fn validate<E: Emission>(shape: &E::Shape, seqs: &Sequences<E::Obs>) -> Result<()> {
    seqs.validate_with(|o| E::obs_ok(shape, o), |o| E::check_obs(shape, o), || E::obs_rule(shape))
}

/// Validate the sequences against the model and check the call's memory.
/// A density's observations bound for a GPU are tested on their way there
/// instead (`gpu::rows::DeviceDensity::new`), which reads them once for
/// the copy and the test.
fn check<E: Emission>(pass: Pass, model: &HmmModel<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<()> {
    let t0 = std::time::Instant::now();
    if tested_on_device::<E>(exec) {
        seqs.validate_layout()?;
    } else {
        exec.install(|| validate::<E>(&model.emission.shape(), seqs))??;
    }
    crate::gpu::timing::record("validation", t0);
    HmmJob::of(pass, model.n_states, model.emission.n_stats(), seqs, exec.threads).ensure()
}

/// Whether a call's observations are tested on their way to the device
/// rather than before ([`check`]): a density's, on a GPU that is there
/// (without one the call fails, and an invalid observation is the error
/// to give first).
fn tested_on_device<E: Emission>(exec: &Exec) -> bool {
    matches!(exec.backend, Backend::Cuda) && !E::cuda().is_empty() && crate::gpu::devices().is_ok()
}

/// How the GPU runs an emission: a categorical one through its tables by
/// symbol (the model and sequences behind the generic ones), a density
/// through its rows (the observations as numbers).
enum OnDevice<'a> {
    Categorical(&'a HmmModel, &'a Sequences),
    Density(&'a [f64]),
}

fn on_device<'a, E: Emission>(model: &'a HmmModel<E>, seqs: &'a Sequences<E::Obs>) -> Result<OnDevice<'a>> {
    match ((model as &dyn Any).downcast_ref::<HmmModel>(), (seqs as &dyn Any).downcast_ref::<Sequences>()) {
        (Some(m), Some(s)) => Ok(OnDevice::Categorical(m, s)),
        _ => Ok(OnDevice::Density(density_values::<E>(seqs)?)),
    }
}

/// A density emission's observations as numbers (its device block reads
/// them so).
fn density_values<E: Emission>(seqs: &Sequences<E::Obs>) -> Result<&[f64]> {
    match (&seqs.symbols as &dyn Any).downcast_ref::<Vec<f64>>() {
        Some(v) if !E::cuda().is_empty() => Ok(v),
        _ => Err(Error::BackendUnavailable(format!("the {} emission has no GPU kernels", E::NAME))),
    }
}

/// The CPU's tables of `model`, made once for a kept model
/// ([`keep_model`]).
fn host_tables<E: Emission>(model: &HmmModel<E>) -> Result<kept::KeptForm<Tables<E>>> {
    kept::kept_form(model, kept::HOST, || Tables::new(model))
}

/// The CPU's log tables of `model`, made once for a kept model.
fn host_log_tables<E: Emission>(model: &HmmModel<E>) -> Result<kept::KeptForm<LogTables<E>>> {
    kept::kept_form(model, kept::HOST, || LogTables::new(model))
}

/// A categorical result as the generic type it is.
fn generic<T: 'static, U: 'static>(x: T) -> Result<U> {
    (Box::new(x) as Box<dyn Any>).downcast::<U>().map(|b| *b).map_err(|_| Error::Internal("a GPU result of the wrong type".into()))
}

/// log P(sequence) for every sequence.
pub fn loglik<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<Vec<f64>> {
    check(Pass::Loglik, model, seqs, exec)?;
    match exec.backend {
        Backend::Cpu if scan::cpu_chosen(model, seqs, exec) => scan::cpu_loglik(&*host_tables(model)?, seqs, exec),
        Backend::Cpu => cpu::loglik(&*host_tables(model)?, seqs, exec),
        Backend::Cuda => match on_device(model, seqs)? {
            OnDevice::Categorical(m, s) => gpu::loglik(m, s, exec),
            OnDevice::Density(values) => gpu::density_loglik(model, seqs, values, exec),
        },
    }
}

/// The most probable state path of every sequence.
pub fn viterbi<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<Viterbi> {
    check(Pass::Viterbi, model, seqs, exec)?;
    let (states, log_prob) = match exec.backend {
        Backend::Cpu if scan::cpu_chosen(model, seqs, exec) => scan::cpu_viterbi(&*host_log_tables(model)?, seqs, exec)?,
        Backend::Cpu => cpu::viterbi(&*host_log_tables(model)?, seqs, exec)?,
        Backend::Cuda => match on_device(model, seqs)? {
            OnDevice::Categorical(m, s) => gpu::viterbi(m, s, exec)?,
            OnDevice::Density(values) => gpu::density_viterbi(model, seqs, values, exec)?,
        },
    };
    Ok(Viterbi { states, log_prob })
}

/// [`viterbi`] with the paths as the backend hands them over ([`Paths`]):
/// from the GPU, 1 or 2 bytes a state where N allows, for a caller that
/// widens them into its own memory (the R glue, into R's vectors).
pub fn viterbi_paths<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<(Paths, Vec<f64>)> {
    if !matches!(exec.backend, Backend::Cuda) {
        let v = viterbi(model, seqs, exec)?;
        return Ok((Paths::Full(v.states), v.log_prob));
    }
    check(Pass::Viterbi, model, seqs, exec)?;
    match on_device(model, seqs)? {
        OnDevice::Categorical(m, s) => gpu::viterbi_paths(m, s, exec),
        OnDevice::Density(values) => gpu::density_viterbi_paths(model, seqs, values, exec),
    }
}

/// [`viterbi_paths`], laid out as a caller keeps them
/// ([`layout::paths_by_sequence`]: 1-based states, `missing` throughout an
/// impossible sequence) into `outs`, one buffer per sequence (R's integer
/// vectors). Returns the paths' log-probabilities. Runs in the calling
/// thread's pool.
pub fn viterbi_into<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, exec: &Exec, outs: &mut [&mut [i32]], missing: i32) -> Result<Vec<f64>> {
    let (paths, log_prob) = viterbi_paths(model, seqs, exec)?;
    layout::paths_by_sequence(&paths, &seqs.offsets, outs, missing);
    Ok(log_prob)
}

/// Posterior state probabilities (forward-backward) of every sequence.
pub fn posterior<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<Posterior> {
    check(Pass::Posterior, model, seqs, exec)?;
    let (probs, loglik) = match exec.backend {
        Backend::Cpu if scan::cpu_chosen(model, seqs, exec) => scan::cpu_posterior(&*host_tables(model)?, seqs, exec)?,
        Backend::Cpu => cpu::posterior(&*host_tables(model)?, seqs, exec)?,
        Backend::Cuda => match on_device(model, seqs)? {
            OnDevice::Categorical(m, s) => gpu::posterior(m, s, exec)?,
            OnDevice::Density(values) => gpu::density_posterior(model, seqs, values, exec, None)?,
        },
    };
    Ok(Posterior { probs, loglik })
}

/// [`posterior`], laid out as a caller keeps it ([`layout::columns_by_sequence`],
/// NaN as `missing`) into `outs`, one T_s x N buffer per sequence (R's
/// matrices). Returns the log-likelihoods. Runs in the calling thread's
/// pool.
///
/// On the GPU the kernels' posteriors are laid out on the device and cross
/// the bus straight into `outs`, with no host buffer of all of them in
/// between.
pub fn posterior_into<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, exec: &Exec, outs: &mut [&mut [f64]], missing: f64) -> Result<Vec<f64>> {
    if exec.backend == Backend::Cuda {
        check(Pass::Posterior, model, seqs, exec)?;
        let cols = Some((outs, missing));
        return Ok(match on_device(model, seqs)? {
            OnDevice::Categorical(m, s) => gpu::posterior_to(m, s, exec, cols)?,
            OnDevice::Density(values) => gpu::density_posterior(model, seqs, values, exec, cols)?,
        }
        .1);
    }
    let p = posterior(model, seqs, exec)?;
    layout::columns_by_sequence(&p.probs, &seqs.offsets, model.n_states, outs, missing);
    Ok(p.loglik)
}

/// One Baum-Welch iteration from `model`: the E-step over all sequences and
/// the M-step (emission settings `fit`, defaults resolved from the data).
/// Returns the new model and the log-likelihood of `model`.
pub fn baum_welch_step<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, fit: &EmissionFit, exec: &Exec) -> Result<(HmmModel<E>, f64)> {
    check(Pass::Fit, model, seqs, exec)?;
    let mut fit = *fit;
    let t0 = std::time::Instant::now();
    E::resolve(&mut fit, seqs);
    crate::gpu::timing::record("emission fit resolved", t0);
    match exec.backend {
        Backend::Cpu => {
            let (counts, ll, _) = if scan::cpu_chosen(model, seqs, exec) {
                scan::cpu_e_step(&*host_tables(model)?, seqs, exec)?
            } else {
                let chunks = cpu::chunks(seqs, model.n_states, Counts::size(model.n_states, model.emission.n_stats()));
                let seg = cpu::fit_segment(model.n_states, seqs, exec);
                cpu::e_step(&*host_tables(model)?, seqs, &chunks, seg, exec)?
            };
            Ok((m_step(model, &counts, &fit).0, ll))
        }
        Backend::Cuda => match on_device(model, seqs)? {
            OnDevice::Categorical(m, s) => generic(gpu::baum_welch_step(m, s, fit.pseudocount, exec)?),
            OnDevice::Density(values) => gpu::density_baum_welch_step(model, seqs, values, &fit, exec),
        },
    }
}

/// Baum-Welch over all sequences jointly, from every start; keeps the best.
pub fn fit<E: Emission>(seqs: &Sequences<E::Obs>, config: &CheckedHmmFitConfig<E>, exec: &Exec) -> Result<HmmFit<E>> {
    exec.install(|| validate::<E>(&config.shape, seqs))??;
    HmmJob::of(Pass::Fit, config.n_states, E::n_stats_of(&config.shape), seqs, exec.threads).starts(config.starts()).ensure()?;
    match exec.backend {
        Backend::Cpu => baum_welch::fit(seqs, config, exec),
        Backend::Cuda => {
            if let (Some(c), Some(s)) = ((config as &dyn Any).downcast_ref::<CheckedHmmFitConfig>(), (seqs as &dyn Any).downcast_ref::<Sequences>()) {
                return generic(gpu::fit(s, c, exec)?);
            }
            gpu::density_fit(seqs, density_values::<E>(seqs)?, config, exec)
        }
    }
}
