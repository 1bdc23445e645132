//! The HMM routines on a CUDA device (kernels/hmm.cu, kernels/hmm_batched.cu),
//! checked against the CPU reference by tests/hmm_gpu.rs.
//!
//! Every pass over all sequences is one launch per batch. Small and
//! medium N: `hmm_forward`, `hmm_viterbi`, `hmm_backward` (a warp or a
//! block per sequence) loop over all time steps inside the kernel. Large N
//! (the transitions do not fit in shared memory; `batched`): all sequences
//! of a batch advance one step together, each step one matrix product on
//! the FP64 tensor cores (Viterbi: one max-plus product, keeping every
//! step's log vector and recomputing the back-pointers on the walk back),
//! with a grid barrier between steps in one cooperative launch. Sequences are uploaded once per call (once per fit,
//! for all iterations). Per-symbol storage (scaled alphas, back-pointers,
//! posteriors) is bounded: sequences go in batches that fit a share of the
//! free device memory, so long sequences never overflow it; a single
//! sequence too long for the device is an error (the CPU backend has no
//! such limit).
//!
//! Baum-Welch keeps the model, the counts and the scratch memory on the
//! device for a whole fit (`DeviceEngine`): counts go to one accumulator
//! per block (or warp), summed in a fixed order by `hmm_reduce`; past the
//! warp kernels' 32 states the transition counts are one matrix product
//! over all time steps of a batch (`hmm_xi_gemm`), and for the batched
//! kernels the start and emission counts are summed from the posteriors by
//! symbol (`hmm_count_emissions`); the M-step is
//! `hmm_m_step`. An iteration copies only the per-sequence
//! log-likelihoods to the host.
//!
//! The forward kernels apply the CPU's certificate (`Tables::theta`): a
//! sequence the scaled recursions cannot certify comes back with
//! log-likelihood NaN, and the host computes it on the CPU in log space
//! (its log-likelihood, posteriors or counts; a fit then runs that
//! iteration's M-step on the host). The forward pass and Baum-Welch find
//! the model's smallest probabilities on the device (`hmm_table_mins`):
//! for a model whose positive probabilities multiply below the double
//! range (`theta > 1`) every sequence comes back uncertain. Posteriors,
//! and log-likelihoods parallel in time, check `theta` on the host first
//! and run such a model on the CPU entirely.
//!
//! Files: `plan` sizes the work (kernel family, shared memory, grids,
//! batches), `memory` holds what is uploaded (sequences, tables, buffers),
//! `launch` the single-kernel launches, `batched` the large-N passes,
//! `passes` the forward-backward passes of a call and the device sides of
//! the routines, `engine` the Baum-Welch engine of a fit, `rows` and
//! `density` a density emission's rows and routines, `shares` the
//! sequences spread over several devices, `scan` few long sequences
//! parallel in time (kernels/hmm_scan.cu: a call whose sequences are fewer
//! than the multiprocessors, one of them at least 4,096 steps, with up to
//! 32 states and dense transitions; every pass and Baum-Welch's E-step,
//! for categorical and density emissions), and `resident`
//! the passes on device-resident data that `bulkem-bench hmm` times.

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::gpu::{self, Device};

mod batched;
mod density;
mod engine;
mod launch;
mod memory;
mod passes;
mod plan;
mod resident;
mod rows;
mod scan;
mod shares;

#[doc(hidden)]
pub use batched::{force_split, force_tiling, split_launches, Tiling};
#[doc(hidden)]
pub use plan::force_batched;
#[doc(hidden)]
pub use resident::{with_resident_passes, ResidentPass};
pub use density::with_resident_density;
pub use scan::{e_step as scan_e_step, loglik as scan_loglik, posterior as scan_posterior, viterbi as scan_viterbi, ChunkLen, SCAN_MAX_STATES};
pub(crate) use density::{baum_welch_step as density_baum_welch_step, fit as density_fit, loglik as density_loglik, posterior as density_posterior, viterbi as density_viterbi, viterbi_paths as density_viterbi_paths};

use engine::DeviceEngine;
use plan::check_size;
pub(crate) use plan::group_path;
use shares::{e_step_shares, fit_shares, on_shares, share_lens, shares, work, PassKind, ShareSeqs, Spread};

use super::backward::Counts;
use super::baum_welch::{fit_with, m_step, Engine, HmmFit};
use super::config::CheckedHmmFitConfig;
use super::cpu;
use super::emission::{Emission, EmissionFit};
use super::model::HmmModel;
use super::kept::{kept_form, HOST};
use super::layout::{self, cut, PosteriorOut};
use super::paths::Paths;
use passes::PathsOut;
use super::sequences::Sequences;
use super::tables::{self, Tables};

/// Largest N with GPU kernels (back-pointers are 16-bit; three N-vectors
/// must fit in shared memory).
pub const MAX_GPU_STATES: usize = 2048;
/// Fraction of free device memory one call may use for per-symbol storage.
const MEMORY_SHARE: f64 = 0.5;
/// Fraction of free device memory for the per-block count accumulators.
const PARTIAL_SHARE: f64 = 0.1;
/// Blocks per multiprocessor (the blocks stride over the sequences).
const BLOCKS_PER_SM: u32 = 16;
const MAX_THREADS: usize = 512;
/// Dynamic shared memory a launch may use without raising the limit.
const DEFAULT_SMEM: usize = 48 * 1024;
/// Output tile, threads and dynamic shared memory (XI_STAGES XiStage) of
/// hmm_xi_gemm (kernels/hmm_batched.cu), and rows per split at least.
const XI_TILE: usize = 64;
const XI_THREADS: u32 = 128;
const XI_SMEM: usize = 4 * 2 * 16 * (64 + 4) * 8;
const XI_ROWS: usize = 256;
/// Sequences per block of the *_warp kernels (HMM_WARPS in kernels/hmm.cu),
/// one warp each, used for N <= WARP_MAX_STATES.
const WARPS: usize = 4;
const WARP_MAX_STATES: usize = 32;
/// Sequences per warp of hmm_forward_mma (HMM_MMA_SEQS: the rows of its
/// FP64 mma products).
const FORWARD_MMA_SEQS: usize = 16;
/// Sequences per block of hmm_forward_group (HMM_GROUP_SEQS), and the
/// largest N it runs: 16 HMM_GK states, HMM_GK warps each holding 16
/// columns of the transitions in registers (128 registers a lane at 128).
const GROUP_SEQS: usize = 16;
const GROUP_MAX_STATES: usize = 128;
/// Sequences per block of hmm_viterbi_group (HMM_VG_SEQS), over the same
/// states.
const VIT_GROUP_SEQS: usize = 8;
/// Largest N of the thread-per-sequence forward, backward and Viterbi kernels
/// (hmm_*_thread: a sequence's state vector in one thread's registers) and
/// of the thread-per-position density rows of HMM_ROW_THREAD_MAX states
/// (hmm_emission_rows_thread), and their threads per block.
const THREAD_MAX_STATES: usize = 8;
const THREAD_BLOCK: u32 = 128;
/// Blocks per multiprocessor of the warp kernels (they stride over the
/// sequences; each warp of the counting kernel owns an accumulator).
const WARP_BLOCKS_PER_SM: u32 = 8;

/// A driver error of `dev` while doing `what`, as the crate's error.
fn err<'a>(dev: &'a Device, what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error + 'a {
    move |e| dev.err(what, e)
}

/// The device the HMM routines run on (the first).
fn device() -> Result<&'static Device> {
    Ok(&gpu::devices()?[0])
}

/// log P(sequence) of every sequence: one launch (per batch of rows for
/// large N), O(N) memory per sequence.
pub fn loglik(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<Vec<f64>> {
    check_size(model.n_states, seqs.len())?;
    let t0 = std::time::Instant::now();
    if scan::chosen(device()?, model, seqs, 0)? {
        // Few states: the host's scan of the tables costs nothing here.
        if tables::theta(model) > 1.0 {
            return cpu::loglik(&*super::host_tables(model)?, seqs, exec);
        }
        return scan::loglik(model, seqs, None, exec);
    }
    let mut out = loglik_into(seqs, model.n_states, exec, |sh, out| passes::loglik_device(sh, model, exec, out))?;
    settle_logliks(model, seqs, &mut out, exec)?;
    gpu::timing::record("whole GPU call", t0);
    Ok(out)
}

/// Recompute on the CPU (in log space where needed) the log-likelihoods
/// the kernels left NaN (uncertain).
pub(super) fn settle_logliks<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, out: &mut [f64], exec: &Exec) -> Result<()> {
    let uncertain: Vec<usize> = (0..out.len()).filter(|&s| out[s].is_nan()).collect();
    if !uncertain.is_empty() {
        let tab = super::host_tables(model)?;
        for (s, l) in uncertain.iter().zip(cpu::loglik_of(&tab, seqs, &uncertain, exec)?) {
            out[*s] = l;
        }
    }
    Ok(())
}

/// Viterbi paths (flat, 0-based, NO_STATE for impossible sequences) and
/// log-probabilities; one launch per batch.
pub fn viterbi(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<(Vec<u32>, Vec<f64>)> {
    check_size(model.n_states, seqs.len())?;
    if scan::chosen(device()?, model, seqs, 4)? {
        return scan::viterbi(model, seqs, None, exec);
    }
    let (paths, logp) = paths_into(seqs, model.n_states, false, exec, |sh, paths, logp| passes::viterbi_device(sh, model, exec, paths, logp))?;
    Ok((paths.into_vec(), logp))
}

/// [`viterbi`] with the paths as they crossed the bus (see [`Paths`]).
pub fn viterbi_paths(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<(Paths, Vec<f64>)> {
    check_size(model.n_states, seqs.len())?;
    if scan::chosen(device()?, model, seqs, 4)? {
        let (paths, logp) = scan::viterbi(model, seqs, None, exec)?;
        return Ok((Paths::Full(paths), logp));
    }
    paths_into(seqs, model.n_states, true, exec, |sh, paths, logp| passes::viterbi_device(sh, model, exec, paths, logp))
}

/// The Viterbi paths of `seqs` (N states) and their log-probabilities,
/// each share's written by `pass`: in the bytes a state that
/// [`gpu::width_for`] gives when `narrow` (4 where N needs them), else 4.
fn paths_into<O, F>(seqs: &Sequences<O>, n: usize, narrow: bool, exec: &Exec, pass: F) -> Result<(Paths, Vec<f64>)>
where
    O: Copy + Send + Sync,
    F: Fn(&ShareSeqs<O>, PathsOut<'_>, &mut [f64]) -> Result<()> + Sync,
{
    let width = gpu::width_for(n as u64, true);
    if narrow && width < 4 {
        let (bytes, logp) = rows_per(seqs, n, PassKind::Viterbi, width, "the Viterbi paths", exec, |sh, bytes: &mut [u8], logp| pass(sh, PathsOut::Narrow(bytes, width), logp))?;
        return Ok((Paths::Narrow { bytes, width }, logp));
    }
    let (states, logp) = rows_per(seqs, n, PassKind::Viterbi, 1, "the Viterbi paths", exec, |sh, states: &mut [u32], logp| pass(sh, PathsOut::Full(states), logp))?;
    Ok((Paths::Full(states), logp))
}

/// Posterior state probabilities (time-major, NaN rows for impossible
/// sequences) and per-sequence log-likelihoods.
pub fn posterior(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<(Vec<f64>, Vec<f64>)> {
    posterior_to(model, seqs, exec, None)
}

/// [`posterior`], or with `cols` its probabilities laid out into the
/// caller's matrices (`layout::PosteriorOut::Columns`; the rows returned
/// are then empty).
pub fn posterior_to(model: &HmmModel, seqs: &Sequences, exec: &Exec, cols: Option<Columns<'_, '_>>) -> Result<(Vec<f64>, Vec<f64>)> {
    check_size(model.n_states, seqs.len())?;
    let small = kept_form(model, HOST, || Ok(Smallest(tables::smallest(model))))?.0;
    posterior_as(
        seqs,
        model.n_states,
        cols,
        || {
            if tables::theta_of(small) > 1.0 {
                return cpu::posterior(&*super::host_tables(model)?, seqs, exec).map(Some);
            }
            Ok(None)
        },
        |out| {
            if scan::chosen(device()?, model, seqs, 8 * model.n_states)? {
                return scan::posterior_into(model, seqs, None, exec, out);
            }
            posterior_shares(model, seqs, exec, out, |sh, out, loglik| passes::posterior_device(sh, model, small, exec, out, loglik))
        },
    )
}

/// A model's smallest probabilities (`tables::smallest`), a scan of the
/// whole model on the host: made once for a kept model.
struct Smallest((f64, f64));

/// A caller's matrices, one per sequence, and the value NaN becomes.
pub type Columns<'a, 'b> = (&'a mut [&'b mut [f64]], f64);

/// The posteriors from `elsewhere` (the CPU, as rows) when it gives them,
/// else from `kernels` (the scan or the passes, writing where they are
/// told): as time-major rows, or laid out into `cols` (the rows then
/// empty). With `cols` the kernels write into the caller's matrices
/// themselves, with no host buffer of all the rows in between (its first
/// touch and the layout out of it cost as much as the pass:
/// BENCHMARKS.md).
fn posterior_as<O: Copy>(
    seqs: &Sequences<O>,
    n: usize,
    cols: Option<Columns<'_, '_>>,
    elsewhere: impl FnOnce() -> Result<Option<(Vec<f64>, Vec<f64>)>>,
    kernels: impl FnOnce(PosteriorOut<'_, '_>) -> Result<Vec<f64>>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    if let Some((probs, loglik)) = elsewhere()? {
        return Ok(match cols {
            Some((outs, missing)) => {
                layout::columns_by_sequence(&probs, &seqs.offsets, n, outs, missing);
                (Vec::new(), loglik)
            }
            None => (probs, loglik),
        });
    }
    match cols {
        Some((outs, missing)) => Ok((Vec::new(), kernels(PosteriorOut::Columns(outs, missing))?)),
        None => {
            let t0 = std::time::Instant::now();
            let mut probs = crate::hmm::passes::zeroed::<f64>(seqs.total() * n, "the posterior probabilities")?;
            crate::gpu::timing::record("result memory", t0);
            let loglik = kernels(PosteriorOut::Rows(&mut probs))?;
            Ok((probs, loglik))
        }
    }
}

/// The kernels' posteriors into `out`, each share's written by `pass` into
/// its part of it, the sequences the kernels left uncertain recomputed on
/// the CPU; the log-likelihoods.
fn posterior_shares<E, F>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, exec: &Exec, mut out: PosteriorOut<'_, '_>, pass: F) -> Result<Vec<f64>>
where
    E: Emission,
    F: Fn(&ShareSeqs<E::Obs>, PosteriorOut<'_, '_>, &mut [f64]) -> Result<()> + Sync,
{
    let n = model.n_states;
    let shares = shares(seqs, exec, Spread::pass(device()?, seqs, n, PassKind::Posterior))?;
    let mut loglik = vec![0.0; seqs.len()];
    let (per_seq, values) = share_lens(&shares, seqs, n);
    let (per_seq, values): (Vec<usize>, Vec<usize>) = (per_seq.collect(), values.collect());
    let work = out.parts(&per_seq, &values).into_iter().zip(cut(&mut loglik, per_seq.iter().copied())).collect();
    on_shares(&shares, seqs, exec, work, |sh, (out, loglik)| pass(sh, out, loglik))?;
    settle_posteriors(model, seqs, &mut out, &mut loglik, exec)?;
    Ok(loglik)
}

/// One value per sequence of `seqs` (N states), each share's written by
/// `pass` into its part of them.
fn loglik_into<O, F>(seqs: &Sequences<O>, n: usize, exec: &Exec, pass: F) -> Result<Vec<f64>>
where
    O: Copy + Send + Sync,
    F: Fn(&ShareSeqs<O>, &mut [f64]) -> Result<()> + Sync,
{
    let shares = shares(seqs, exec, Spread::pass(device()?, seqs, n, PassKind::Forward))?;
    let mut out = vec![0.0; seqs.len()];
    let (per_seq, _) = share_lens(&shares, seqs, 1);
    on_shares(&shares, seqs, exec, cut(&mut out, per_seq), |sh, out| pass(sh, out))?;
    Ok(out)
}

/// Values of type T per observation, `per_obs` each (`what` names them,
/// for a memory error), and one log-likelihood per sequence of `seqs` (N
/// states), each share's written by `pass` into its parts of them: the
/// Viterbi paths (`kind` Viterbi).
fn rows_per<O, T, F>(seqs: &Sequences<O>, n: usize, kind: PassKind, per_obs: usize, what: &str, exec: &Exec, pass: F) -> Result<(Vec<T>, Vec<f64>)>
where
    O: Copy + Send + Sync,
    T: crate::hmm::passes::Zero + Send,
    F: Fn(&ShareSeqs<O>, &mut [T], &mut [f64]) -> Result<()> + Sync,
{
    let shares = shares(seqs, exec, Spread::pass(device()?, seqs, n, kind))?;
    let t0 = std::time::Instant::now();
    let (mut rows, mut loglik) = (crate::hmm::passes::zeroed::<T>(seqs.total() * per_obs, what)?, vec![0.0; seqs.len()]);
    crate::gpu::timing::record("result memory", t0);
    let (per_seq, obs) = share_lens(&shares, seqs, per_obs);
    let work = cut(&mut rows, obs).into_iter().zip(cut(&mut loglik, per_seq)).collect();
    on_shares(&shares, seqs, exec, work, |sh, (rows, loglik)| pass(sh, rows, loglik))?;
    Ok((rows, loglik))
}

/// Recompute on the CPU (in log space where needed) the posteriors of the
/// sequences whose log-likelihood the kernels left NaN (uncertain), into
/// their places in `out`.
pub(super) fn settle_posteriors<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, out: &mut PosteriorOut<'_, '_>, loglik: &mut [f64], exec: &Exec) -> Result<()> {
    let n = model.n_states;
    let mut tab = None;
    for s in 0..seqs.len() {
        if loglik[s].is_nan() {
            exec.monitor.check()?;
            if tab.is_none() {
                tab = Some(Tables::new(model)?);
            }
            let Some(tab) = tab.as_ref() else { continue };
            let mut rows = vec![0.0; (seqs.offsets[s + 1] - seqs.offsets[s]) * n];
            loglik[s] = cpu::posterior_of(tab, seqs.get(s), &mut rows, &exec.monitor)?;
            out.put(s, &seqs.offsets, n, &rows);
        }
    }
    Ok(())
}

/// Baum-Welch on the device (the sequences uploaded once for every start
/// and iteration; over several devices, `shares::fit_shares`); the
/// stopping rule is the CPU's.
pub fn fit(seqs: &Sequences, config: &CheckedHmmFitConfig, exec: &Exec) -> Result<HmmFit> {
    check_size(config.n_states, seqs.len())?;
    if scan::fits(device()?, config.n_states, config.shape, seqs, 8 * config.n_states)? {
        // Few long sequences: each E-step parallel in time (or on the CPU
        // for a model the scan cannot certify), the M-step on the host.
        let (chunks, seg) = (cpu::chunks(seqs, config.n_states, Counts::size(config.n_states, config.shape)), cpu::fit_segment(config.n_states, seqs, exec));
        return fit_with(config, seqs, exec, &mut super::baum_welch::HostEngine::new(|m: &HmmModel| {
            if super::scan::usable(&m.trans) {
                scan::e_step(m, seqs, None, exec)
            } else {
                cpu::e_step(&Tables::new(m)?, seqs, &chunks, seg, exec)
            }
        }));
    }
    let spread = Spread::Fit { counts: Counts::size(config.n_states, config.shape), work: work(seqs, config.n_states) };
    let shares = shares(seqs, exec, spread)?;
    if let [one] = &shares[..] {
        let mut engine = DeviceEngine::new(one.dev, config.n_states, config.shape, seqs, &seqs.symbols, exec)?;
        return fit_with(config, seqs, exec, &mut engine);
    }
    fit_shares(&shares, seqs, config, exec, |sh, serve| serve(&mut DeviceEngine::new(sh.dev, config.n_states, config.shape, &sh.seqs, sh.obs, exec)?))
}

/// One E-step + M-step on the device (for benchmarks and tests): the next
/// model and the log-likelihood of `model`.
pub fn baum_welch_step(model: &HmmModel, seqs: &Sequences, pseudocount: f64, exec: &Exec) -> Result<(HmmModel, f64)> {
    let (n, v) = (model.n_states, model.emission.n_symbols);
    check_size(n, seqs.len())?;
    if scan::chosen(device()?, model, seqs, 8 * n + (scan::slot_bytes(seqs, n, v) / seqs.total().max(1) as f64).ceil() as usize)? {
        let (counts, ll, _) = scan::e_step(model, seqs, None, exec)?;
        let t0 = std::time::Instant::now();
        let next = m_step(model, &counts, &EmissionFit { pseudocount, var_floor: f64::NAN }).0;
        gpu::timing::record("m-step and model", t0);
        return Ok((next, ll));
    }
    let shares = shares(seqs, exec, Spread::Fit { counts: Counts::size(n, v), work: work(seqs, n) })?;
    let fit = EmissionFit { pseudocount, var_floor: f64::NAN };
    if let [one] = &shares[..] {
        let t0 = std::time::Instant::now();
        let mut engine = DeviceEngine::new(one.dev, n, v, seqs, &seqs.symbols, exec)?;
        gpu::timing::record("upload", t0);
        let t0 = std::time::Instant::now();
        let (ll, _) = engine.load(model)?;
        gpu::timing::record("e-step", t0);
        let t0 = std::time::Instant::now();
        engine.m_step(&fit)?;
        gpu::timing::record("m-step", t0);
        let t0 = std::time::Instant::now();
        let next = engine.model(false)?;
        gpu::timing::record("model", t0);
        return Ok((next, ll));
    }
    let (counts, ll) = e_step_shares(&shares, seqs, model, exec, |sh, serve| serve(&mut DeviceEngine::new(sh.dev, n, v, &sh.seqs, sh.obs, exec)?))?;
    Ok((m_step(model, &counts, &fit).0, ll))
}
