//! The HMM routines on a CUDA device (kernels/hmm.cu), checked against the
//! CPU reference by tests/hmm_gpu.rs.
//!
//! Every pass over all sequences is one launch per batch: `hmm_forward`,
//! `hmm_viterbi`, `hmm_backward` (posteriors and/or Baum-Welch expected
//! counts) loop over all time steps inside the kernel, one block per
//! sequence at a time. Sequences are uploaded once per call (once per fit,
//! for all iterations). Per-symbol storage (scaled alphas, back-pointers,
//! posteriors) is bounded: sequences go in batches that fit a share of the
//! free device memory, so long sequences never overflow it; a single
//! sequence too long for the device is an error (the CPU backend has no
//! such limit). Baum-Welch counts go to one accumulator per block, summed
//! in block order by `hmm_reduce` (deterministic); when N is large the
//! transition counts are one matrix product over all time steps of a batch
//! (`hmm_xi_gemm`) instead of per-step updates. The M-step runs on the host
//! with the CPU's code.

use std::ops::Range;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::gpu::{self, Device};

use super::backward::Counts;
use super::baum_welch::{fit_with, HmmFit};
use super::config::CheckedHmmFitConfig;
use super::model::HmmModel;
use super::sequences::Sequences;
use super::tables::{LogTables, Tables};

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
/// Output tile of hmm_xi_gemm (kernels/hmm.cu), and rows per split at least.
const XI_TILE: usize = 64;
const XI_ROWS: usize = 256;
/// Sequences per block of the *_tiled kernels (HMM_TILE in kernels/hmm.cu),
/// used when the transitions do not fit in shared memory.
const TILE: usize = 8;
const TILED_MAX_THREADS: usize = 256;

/// Sequences per block of the *_warp kernels (HMM_WARPS in kernels/hmm.cu),
/// one warp each, used for N <= WARP_MAX_STATES.
const WARPS: usize = 4;
const WARP_MAX_STATES: usize = 32;
/// Blocks per multiprocessor of the warp kernels (they stride over the
/// sequences; each warp of the counting kernel owns an accumulator).
const WARP_BLOCKS_PER_SM: u32 = 8;

/// Whether the warp-per-sequence kernels run a job of N states and V
/// symbols (with counts, each warp keeps V x 32 emission counts in shared
/// memory).
fn warp_path(dev: &Device, n: usize, v: usize, counts: bool) -> bool {
    n <= WARP_MAX_STATES && (!counts || (WARPS * 32 + WARPS * v * 32) * 8 <= smem_limit(dev))
}

/// Blocks of a warp-kernel launch over `count` sequences.
fn warp_grid(dev: &Device, count: usize) -> u32 {
    (count.div_ceil(WARPS) as u32).clamp(1, dev.multiprocessors * WARP_BLOCKS_PER_SM)
}

/// Threads per block of the tiled kernels (fewer: each thread keeps TILE
/// partial sums in registers).
fn tiled_threads(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, TILED_MAX_THREADS) as u32
}

fn err<'a>(dev: &'a Device, what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error + 'a {
    move |e| dev.err(what, e)
}

fn device() -> Result<&'static Device> {
    Ok(&gpu::devices()?[0])
}

/// Threads per block for N states: one per state up to MAX_THREADS, in warps.
fn threads_for(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, MAX_THREADS) as u32
}

/// Kernel `name`, its dynamic shared memory limit raised to `smem` if needed.
fn function(dev: &Device, name: &str, smem: usize) -> Result<CudaFunction> {
    let f = dev.function("hmm", &[], name)?;
    if smem > DEFAULT_SMEM {
        f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
            .map_err(err(dev, "raising the shared-memory limit"))?;
    }
    Ok(f)
}

/// Shared memory usable by one block (bytes), with room for the kernels'
/// static shared memory.
fn smem_limit(dev: &Device) -> usize {
    dev.max_shared_per_block.saturating_sub(1024).max(DEFAULT_SMEM)
}

fn check_size(model: &HmmModel, seqs: &Sequences) -> Result<()> {
    if model.n_states > MAX_GPU_STATES {
        return Err(Error::BackendUnavailable(format!(
            "the GPU kernels handle up to {MAX_GPU_STATES} states, not {}; use the CPU backend",
            model.n_states
        )));
    }
    if seqs.len() >= i32::MAX as usize {
        return Err(Error::BackendUnavailable("too many sequences for one GPU call".into()));
    }
    Ok(())
}

/// The sequences on the device.
struct DeviceSeqs {
    sym: CudaSlice<u32>,
    off: CudaSlice<i64>,
}

fn upload(dev: &Device, seqs: &Sequences) -> Result<DeviceSeqs> {
    let s = &dev.stream;
    let off: Vec<i64> = seqs.offsets.iter().map(|&o| o as i64).collect();
    // An empty symbol vector cannot happen (sequences are validated non-empty).
    Ok(DeviceSeqs {
        sym: s.clone_htod(&seqs.symbols[..]).map_err(err(dev, "copying sequences"))?,
        off: s.clone_htod(&off[..]).map_err(err(dev, "copying sequences"))?,
    })
}

/// Consecutive batches of sequences whose per-symbol storage
/// (`bytes_per_symbol`) fits the memory share of the device.
fn batches(dev: &Device, seqs: &Sequences, bytes_per_symbol: usize) -> Result<Vec<Range<usize>>> {
    let budget = (dev.free_memory()? as f64 * MEMORY_SHARE) as usize;
    let max_symbols = (budget / bytes_per_symbol.max(1)).max(1);
    let mut out = Vec::new();
    let mut begin = 0;
    for s in 0..seqs.len() {
        let len = seqs.offsets[s + 1] - seqs.offsets[s];
        if len > max_symbols {
            return Err(Error::BackendUnavailable(format!(
                "sequence {} ({len} symbols) needs {:.1} GB of GPU memory, more than is free; use the CPU backend",
                s + 1,
                len as f64 * bytes_per_symbol as f64 / 1e9
            )));
        }
        if seqs.offsets[s + 1] - seqs.offsets[begin] > max_symbols {
            out.push(begin..s);
            begin = s;
        }
    }
    out.push(begin..seqs.len());
    Ok(out)
}

fn grid(dev: &Device, count: usize) -> u32 {
    (count as u32).clamp(1, dev.multiprocessors * BLOCKS_PER_SM)
}

/// The linear tables on the device: start, trans, trans_t, emis by symbol.
struct DeviceTables {
    start: CudaSlice<f64>,
    trans: CudaSlice<f64>,
    trans_t: CudaSlice<f64>,
    emis: CudaSlice<f64>,
}

fn upload_tables(dev: &Device, model: &HmmModel) -> Result<DeviceTables> {
    let tab = Tables::new(model);
    let n = tab.n;
    let mut trans_t = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            trans_t[j * n + i] = tab.trans[i * n + j];
        }
    }
    let s = &dev.stream;
    let e = err(dev, "copying the model");
    Ok(DeviceTables {
        start: s.clone_htod(&tab.start[..]).map_err(&e)?,
        trans: s.clone_htod(&tab.trans[..]).map_err(&e)?,
        trans_t: s.clone_htod(&trans_t[..]).map_err(&e)?,
        emis: s.clone_htod(&tab.emis[..]).map_err(&e)?,
    })
}

/// Launch hmm_forward over sequences `range`; with `store`, alphas and
/// scales of the batch are kept in (alpha, scale).
fn launch_forward(
    dev: &Device,
    n: usize,
    tables: &DeviceTables,
    seqs: &DeviceSeqs,
    range: &Range<usize>,
    store: Option<(&mut CudaSlice<f64>, &mut CudaSlice<f64>)>,
    loglik: &mut CudaSlice<f64>,
) -> Result<()> {
    let base = (2 * n + 32) * 8;
    let trans_smem = base + n * n * 8 <= smem_limit(dev);
    let tiled_smem = (2 * TILE * n + 32 * TILE) * 8;
    let warp = n <= WARP_MAX_STATES;
    let tiled = !warp && !trans_smem && tiled_smem <= smem_limit(dev);
    let (name, smem, cfg) = if warp {
        let smem = WARPS * 32 * 8;
        let cfg = LaunchConfig { grid_dim: (warp_grid(dev, range.len()), 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: smem as u32 };
        ("hmm_forward_warp", smem, cfg)
    } else if tiled {
        let cfg = LaunchConfig { grid_dim: (grid(dev, range.len().div_ceil(TILE)), 1, 1), block_dim: (tiled_threads(n), 1, 1), shared_mem_bytes: tiled_smem as u32 };
        ("hmm_forward_tiled", tiled_smem, cfg)
    } else {
        let smem = base + if trans_smem { n * n * 8 } else { 0 };
        let cfg = LaunchConfig { grid_dim: (grid(dev, range.len()), 1, 1), block_dim: (threads_for(n), 1, 1), shared_mem_bytes: smem as u32 };
        ("hmm_forward", smem, cfg)
    };
    let f = function(dev, name, smem)?;
    let (n_i, s0, s1, flag) = (n as i32, range.start as i32, range.end as i32, trans_smem as i32);
    let null: u64 = 0;
    let s = &dev.stream;
    let mut launch = s.launch_builder(&f);
    launch.arg(&n_i).arg(&tables.start).arg(&tables.trans).arg(&tables.emis).arg(&seqs.sym).arg(&seqs.off).arg(&s0).arg(&s1);
    match store {
        Some((alpha, scale)) => launch.arg(alpha).arg(scale),
        None => launch.arg(&null).arg(&null),
    };
    launch.arg(loglik);
    if !tiled && !warp {
        launch.arg(&flag);
    }
    // SAFETY: the arguments match the parameters of hmm_forward (or of
    // hmm_forward_tiled or hmm_forward_warp, which have no trans_smem flag)
    // in order and type;
    // the tables hold N, N*N and V*N doubles, the symbols are < V
    // (validated), off has one entry per sequence + 1 and s0 < s1 index it;
    // alpha and scale (or null) hold N and 1 doubles per symbol of the
    // batch, loglik one per sequence of the batch; shared memory is sized
    // for cur, nxt and the reduction slots (times TILE when tiled) and
    // trans when trans_smem, or for one 32-double slice per warp.
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_forward"))?;
    Ok(())
}

/// log P(sequence) of every sequence: one launch, O(N) memory per block.
pub fn loglik(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<Vec<f64>> {
    check_size(model, seqs)?;
    let dev = device()?;
    let tables = upload_tables(dev, model)?;
    let d_seqs = upload(dev, seqs)?;
    let s = &dev.stream;
    let mut ll = s.alloc_zeros::<f64>(seqs.len()).map_err(err(dev, "allocating results"))?;
    launch_forward(dev, model.n_states, &tables, &d_seqs, &(0..seqs.len()), None, &mut ll)?;
    let out = s.clone_dtoh(&ll).map_err(err(dev, "reading results"))?;
    exec.monitor.add_done(seqs.len());
    exec.monitor.check()?;
    Ok(out)
}

/// Log tables on the device for Viterbi: start, row-major transitions
/// (thread j reads ltrans[i * N + j], contiguous), emissions by symbol.
struct DeviceLogTables {
    start: CudaSlice<f64>,
    trans: CudaSlice<f64>,
    emis: CudaSlice<f64>,
}

fn upload_log_tables(dev: &Device, model: &HmmModel) -> Result<DeviceLogTables> {
    let n = model.n_states;
    let log = LogTables::new(model);
    let mut ltrans = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            ltrans[i * n + j] = log.trans_t[j * n + i];
        }
    }
    let s = &dev.stream;
    let e = err(dev, "copying the model");
    Ok(DeviceLogTables { start: s.clone_htod(&log.start[..]).map_err(&e)?, trans: s.clone_htod(&ltrans[..]).map_err(&e)?, emis: s.clone_htod(&log.emis[..]).map_err(&e)? })
}

/// Back-pointers of a Viterbi batch: bytes for the warp kernel (N <= 32),
/// 16-bit otherwise.
enum Back {
    Byte(CudaSlice<u8>),
    Short(CudaSlice<u16>),
}

/// Device buffers of one Viterbi batch.
struct ViterbiBuffers {
    back: Back,
    path: CudaSlice<u32>,
    logp: CudaSlice<f64>,
}

fn viterbi_buffers(dev: &Device, n: usize, symbols: usize, count: usize) -> Result<ViterbiBuffers> {
    let s = &dev.stream;
    // SAFETY (all three): uninitialised on purpose; the kernels write every
    // path entry and log-probability, and read only back-pointers they wrote
    // (every state of every step t >= 1).
    let back = if n <= WARP_MAX_STATES {
        Back::Byte(unsafe { s.alloc::<u8>(symbols * n) }.map_err(err(dev, "allocating back-pointers"))?)
    } else {
        Back::Short(unsafe { s.alloc::<u16>(symbols * n) }.map_err(err(dev, "allocating back-pointers"))?)
    };
    Ok(ViterbiBuffers {
        back,
        path: unsafe { s.alloc::<u32>(symbols) }.map_err(err(dev, "allocating results"))?,
        logp: unsafe { s.alloc::<f64>(count) }.map_err(err(dev, "allocating results"))?,
    })
}

/// Launch the Viterbi kernel for N over the batch `range` (one launch):
/// warp per sequence (N <= 32), tiled (transitions not in shared memory) or
/// block per sequence.
fn launch_viterbi(dev: &Device, n: usize, tabs: &DeviceLogTables, seqs: &DeviceSeqs, range: &Range<usize>, buf: &mut ViterbiBuffers) -> Result<()> {
    let base = 2 * n * 8;
    let trans_smem = base + n * n * 8 <= smem_limit(dev);
    let warp = n <= WARP_MAX_STATES;
    let tiled = !warp && !trans_smem && TILE * base <= smem_limit(dev);
    let (name, smem, cfg) = if warp {
        let smem = WARPS * 32 * 8;
        ("hmm_viterbi_warp", smem, LaunchConfig { grid_dim: (warp_grid(dev, range.len()), 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: smem as u32 })
    } else if tiled {
        let smem = TILE * base;
        ("hmm_viterbi_tiled", smem, LaunchConfig { grid_dim: (grid(dev, range.len().div_ceil(TILE)), 1, 1), block_dim: (tiled_threads(n), 1, 1), shared_mem_bytes: smem as u32 })
    } else {
        let smem = base + if trans_smem { n * n * 8 } else { 0 };
        ("hmm_viterbi", smem, LaunchConfig { grid_dim: (grid(dev, range.len()), 1, 1), block_dim: (threads_for(n), 1, 1), shared_mem_bytes: smem as u32 })
    };
    let f = function(dev, name, smem)?;
    let (n_i, s0, s1, flag) = (n as i32, range.start as i32, range.end as i32, trans_smem as i32);
    let mut launch = dev.stream.launch_builder(&f);
    launch.arg(&n_i).arg(&tabs.start).arg(&tabs.trans).arg(&tabs.emis).arg(&seqs.sym).arg(&seqs.off).arg(&s0).arg(&s1);
    match &mut buf.back {
        Back::Byte(b) => launch.arg(b),
        Back::Short(b) => launch.arg(b),
    };
    launch.arg(&mut buf.path).arg(&mut buf.logp);
    if !warp && !tiled {
        launch.arg(&flag);
    }
    // SAFETY: the arguments match the parameters of the chosen kernel in
    // order and type (bytes for hmm_viterbi_warp's back-pointers, 16-bit
    // otherwise; only hmm_viterbi takes the trans_smem flag); back holds N
    // back-pointers and path one state per symbol of the batch, logp one
    // value per sequence of the batch; the log tables hold N, N*N and V*N
    // doubles, the symbols are < V, off indexes the batch; shared memory
    // holds what the kernel's comment lists (cur and nxt, times TILE when
    // tiled, one 32-double slice per warp for the warp kernel, the log
    // transitions when trans_smem).
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching the Viterbi kernel"))?;
    Ok(())
}

/// Viterbi paths (flat, 0-based, NO_STATE for impossible sequences) and
/// log-probabilities; one launch per batch.
pub fn viterbi(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<(Vec<u32>, Vec<f64>)> {
    check_size(model, seqs)?;
    let dev = device()?;
    let n = model.n_states;
    let tabs = upload_log_tables(dev, model)?;
    let d_seqs = upload(dev, seqs)?;
    let s = &dev.stream;
    let per_symbol = if n <= WARP_MAX_STATES { n + 4 } else { 2 * n + 4 };
    let (mut paths, mut logp) = (vec![0u32; seqs.total()], vec![0.0; seqs.len()]);
    for range in batches(dev, seqs, per_symbol)? {
        exec.monitor.check()?;
        let (sym0, sym1) = (seqs.offsets[range.start], seqs.offsets[range.end]);
        let mut buf = viterbi_buffers(dev, n, sym1 - sym0, range.len())?;
        launch_viterbi(dev, n, &tabs, &d_seqs, &range, &mut buf)?;
        let got = s.clone_dtoh(&buf.path).map_err(err(dev, "reading results"))?;
        paths[sym0..sym1].copy_from_slice(&got);
        let got = s.clone_dtoh(&buf.logp).map_err(err(dev, "reading results"))?;
        logp[range.clone()].copy_from_slice(&got);
        exec.monitor.add_done(range.len());
    }
    Ok((paths, logp))
}

/// Shared-memory plan of hmm_backward: (bytes, trans_t in smem, accumulator in smem).
fn backward_smem(dev: &Device, n: usize, v: usize, with_counts: bool) -> (usize, bool, bool) {
    let limit = smem_limit(dev);
    let mut bytes = 3 * n * 8;
    let trans_smem = bytes + n * n * 8 <= limit;
    if trans_smem {
        bytes += n * n * 8;
    }
    let acc_smem = with_counts && bytes + Counts::size(n, v) * 8 <= limit;
    if acc_smem {
        bytes += Counts::size(n, v) * 8;
    }
    (bytes, trans_smem, acc_smem)
}

/// The device state of one call of the forward-backward passes.
struct Passes<'a> {
    dev: &'a Device,
    n: usize,
    v: usize,
    seqs: &'a Sequences,
    d_seqs: DeviceSeqs,
    batches: Vec<Range<usize>>,
    /// Transition counts by hmm_xi_gemm (the accumulators do not fit in
    /// shared memory, so per-step updates would go to global memory).
    xi_gemm: bool,
    /// The warp-per-sequence backward kernel (small N): one accumulator
    /// per warp.
    warp: bool,
}

impl<'a> Passes<'a> {
    /// `counts`: the passes compute Baum-Welch counts; `extra_per_symbol`:
    /// bytes the caller stores per symbol besides alphas and scales.
    fn new(model_n: usize, model_v: usize, seqs: &'a Sequences, counts: bool, extra_per_symbol: usize) -> Result<Self> {
        let dev = device()?;
        let d_seqs = upload(dev, seqs)?;
        let warp = warp_path(dev, model_n, model_v, counts);
        let xi_gemm = counts && !warp && !backward_smem(dev, model_n, model_v, true).2;
        let per_symbol = (model_n + 1) * 8 + extra_per_symbol + if xi_gemm { model_n * 8 } else { 0 };
        let batches = batches(dev, seqs, per_symbol)?;
        Ok(Passes { dev, n: model_n, v: model_v, seqs, d_seqs, batches, xi_gemm, warp })
    }

    /// Count accumulators one E-step needs (blocks, or warps of the warp
    /// kernel, of the largest batch).
    fn slots(&self, max_batch: usize) -> u32 {
        if self.warp {
            warp_grid(self.dev, max_batch) * WARPS as u32
        } else {
            grid(self.dev, max_batch)
        }
    }

    /// Forward then backward over one batch. Returns the batch's per-sequence
    /// log-likelihoods; writes posteriors to `gamma` and/or adds counts to
    /// `partial` (with `blocks` accumulators).
    fn run_batch(&self, tables: &DeviceTables, range: &Range<usize>, gamma: Option<&mut CudaSlice<f64>>, partial: Option<(&mut CudaSlice<f64>, u32)>) -> Result<Vec<f64>> {
        let (dev, n) = (self.dev, self.n);
        let s = &dev.stream;
        let symbols = self.seqs.offsets[range.end] - self.seqs.offsets[range.start];
        let mut alpha = if self.xi_gemm {
            // hmm_xi_gemm reads every row, also those an impossible sequence
            // never reached: they must be zeros, not garbage.
            s.alloc_zeros::<f64>(symbols * n)
        } else {
            // SAFETY: the backward kernels read only the rows the forward pass
            // wrote (those of sequences with a finite log-likelihood).
            unsafe { s.alloc::<f64>(symbols * n) }
        }
        .map_err(err(dev, "allocating the forward pass"))?;
        // SAFETY: as for alpha, only written entries are read.
        let mut scale = unsafe { s.alloc::<f64>(symbols) }.map_err(err(dev, "allocating the forward pass"))?;
        let mut ll = s.alloc_zeros::<f64>(range.len()).map_err(err(dev, "allocating results"))?;
        launch_forward(dev, n, tables, &self.d_seqs, range, Some((&mut alpha, &mut scale)), &mut ll)?;
        if self.warp {
            self.backward_warp(tables, range, &alpha, &scale, &ll, gamma, partial)?;
            return s.clone_dtoh(&ll).map_err(err(dev, "reading results"));
        }
        let (smem, trans_smem, acc_smem) = backward_smem(dev, n, self.v, partial.is_some());
        // The tiled kernel leaves transition counts to hmm_xi_gemm.
        let tiled_smem = 3 * TILE * n * 8;
        let tiled = !trans_smem && tiled_smem <= smem_limit(dev) && (partial.is_none() || self.xi_gemm);
        let smem = if tiled { tiled_smem } else { smem };
        let f = function(dev, if tiled { "hmm_backward_tiled" } else { "hmm_backward" }, smem)?;
        let slots = partial.as_ref().map(|(_, g)| *g);
        let work = if tiled { range.len().div_ceil(TILE) } else { range.len() };
        let blocks = match slots {
            Some(g) => g.min(grid(dev, work)),
            None => grid(dev, work),
        };
        let mut tmp = match (&partial, self.xi_gemm) {
            (Some(_), true) => Some(s.alloc_zeros::<f64>(symbols * n).map_err(err(dev, "allocating the backward pass"))?),
            _ => None,
        };
        let threads = if tiled { tiled_threads(n) } else { threads_for(n) };
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem as u32 };
        let (n_i, v_i, s0, s1) = (n as i32, self.v as i32, range.start as i32, range.end as i32);
        let (t_flag, a_flag) = (trans_smem as i32, acc_smem as i32);
        let null: u64 = 0;
        let mut launch = s.launch_builder(&f);
        launch.arg(&n_i).arg(&v_i).arg(&tables.trans_t).arg(&tables.emis).arg(&self.d_seqs.sym).arg(&self.d_seqs.off).arg(&s0).arg(&s1);
        launch.arg(&alpha).arg(&scale).arg(&ll);
        match gamma {
            Some(g) => launch.arg(g),
            None => launch.arg(&null),
        };
        let mut partial = partial.map(|(p, _)| p);
        match partial.as_deref_mut() {
            Some(p) => launch.arg(p),
            None => launch.arg(&null),
        };
        match tmp.as_mut() {
            Some(t) => launch.arg(t),
            None => launch.arg(&null),
        };
        if !tiled {
            launch.arg(&t_flag).arg(&a_flag);
        }
        // SAFETY: the arguments match the parameters of hmm_backward (or of
        // hmm_backward_tiled, without the flags: its shared memory is 3 TILE
        // N doubles, its accumulators in global memory) in order and type; alpha, scale and ll were filled by hmm_forward for this
        // batch; gamma (or null) holds N doubles per symbol of the batch;
        // partial (or null) holds at least `blocks` accumulators of
        // N + N*N + V*N doubles, and the grid has no more blocks than that;
        // shared memory holds beta, beta2, tmp, trans_t when trans_smem and
        // the accumulator when acc_smem; tmp (or null) holds N doubles per
        // symbol of the batch.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_backward"))?;
        if let (Some(p), Some(t), Some(slots)) = (partial, tmp.as_ref(), slots) {
            self.launch_xi_gemm(&alpha, t, p, slots, symbols)?;
        }
        s.clone_dtoh(&ll).map_err(err(dev, "reading results"))
    }

    /// hmm_backward_warp over one batch (N <= 32).
    #[allow(clippy::too_many_arguments)]
    fn backward_warp(
        &self,
        tables: &DeviceTables,
        range: &Range<usize>,
        alpha: &CudaSlice<f64>,
        scale: &CudaSlice<f64>,
        ll: &CudaSlice<f64>,
        gamma: Option<&mut CudaSlice<f64>>,
        partial: Option<(&mut CudaSlice<f64>, u32)>,
    ) -> Result<()> {
        let dev = self.dev;
        let smem = (WARPS * 32 + if partial.is_some() { WARPS * self.v * 32 } else { 0 }) * 8;
        let f = function(dev, "hmm_backward_warp", smem)?;
        let mut blocks = warp_grid(dev, range.len());
        if let Some((_, slots)) = &partial {
            blocks = blocks.min(slots / WARPS as u32).max(1);
        }
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: smem as u32 };
        let (n_i, v_i, s0, s1) = (self.n as i32, self.v as i32, range.start as i32, range.end as i32);
        let null: u64 = 0;
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&v_i).arg(&tables.trans).arg(&tables.emis).arg(&self.d_seqs.sym).arg(&self.d_seqs.off).arg(&s0).arg(&s1);
        launch.arg(alpha).arg(scale).arg(ll);
        match gamma {
            Some(g) => launch.arg(g),
            None => launch.arg(&null),
        };
        match partial {
            Some((p, _)) => launch.arg(p),
            None => launch.arg(&null),
        };
        // SAFETY: the arguments match hmm_backward_warp's parameters in
        // order and type; alpha, scale and ll were filled by the forward
        // pass of this batch; gamma (or null) holds N doubles per symbol of
        // the batch; partial (or null) holds at least blocks x WARPS
        // accumulators of N + N*N + V*N doubles (one per warp); shared
        // memory holds a 32-double slice per warp and, when counting, V x 32
        // emission counts per warp.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_backward_warp"))?;
        Ok(())
    }

    /// Transition counts of a batch as one matrix product (large N).
    fn launch_xi_gemm(&self, alpha: &CudaSlice<f64>, tmp: &CudaSlice<f64>, partial: &mut CudaSlice<f64>, slots: u32, rows: usize) -> Result<()> {
        let (dev, n) = (self.dev, self.n);
        let tiles = n.div_ceil(XI_TILE) as u32;
        // Enough blocks to fill the device, at least XI_ROWS rows each.
        let want = (dev.multiprocessors * 4).div_ceil(tiles * tiles).max(1);
        let splits = want.min(slots).min(rows.div_ceil(XI_ROWS).max(1) as u32).max(1);
        let f = function(dev, "hmm_xi_gemm", 0)?;
        let cfg = LaunchConfig { grid_dim: (tiles, tiles, splits), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let (n_i, rows_i, size_i) = (n as i32, rows as i64, Counts::size(n, self.v) as i64);
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&rows_i).arg(alpha).arg(tmp).arg(partial).arg(&size_i);
        // SAFETY: the arguments match hmm_xi_gemm's parameters; alpha and
        // tmp hold `rows` rows of N doubles; partial holds `slots` >= splits
        // accumulators of size_i doubles, of which split z writes the N*N
        // transition entries of accumulator z.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_xi_gemm"))?;
        Ok(())
    }
}

/// Posterior state probabilities (time-major, NaN rows for impossible
/// sequences) and per-sequence log-likelihoods.
pub fn posterior(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<(Vec<f64>, Vec<f64>)> {
    check_size(model, seqs)?;
    let n = model.n_states;
    let passes = Passes::new(n, model.n_symbols, seqs, false, n * 8)?;
    let tables = upload_tables(passes.dev, model)?;
    let s = &passes.dev.stream;
    let (mut probs, mut loglik) = (vec![0.0; seqs.total() * n], vec![0.0; seqs.len()]);
    for range in &passes.batches {
        exec.monitor.check()?;
        let (sym0, sym1) = (seqs.offsets[range.start], seqs.offsets[range.end]);
        let mut gamma = s.alloc_zeros::<f64>((sym1 - sym0) * n).map_err(err(passes.dev, "allocating results"))?;
        let ll = passes.run_batch(&tables, range, Some(&mut gamma), None)?;
        let got = s.clone_dtoh(&gamma).map_err(err(passes.dev, "reading results"))?;
        probs[sym0 * n..sym1 * n].copy_from_slice(&got);
        loglik[range.clone()].copy_from_slice(&ll);
        exec.monitor.add_done(range.len());
    }
    Ok((probs, loglik))
}

/// One E-step over all sequences on the device: counts, total
/// log-likelihood (summed on the host in sequence order), first impossible
/// sequence.
fn e_step(passes: &Passes, model: &HmmModel, exec: &Exec) -> Result<(Counts, f64, Option<usize>)> {
    let (dev, n, v) = (passes.dev, passes.n, passes.v);
    let s = &dev.stream;
    let tables = upload_tables(dev, model)?;
    let size = Counts::size(n, v);
    let max_batch = passes.batches.iter().map(|r| r.len()).max().unwrap_or(1);
    let by_memory = ((dev.free_memory()? as f64 * PARTIAL_SHARE) as usize / (size * 8)).max(1);
    let mut blocks = passes.slots(max_batch).min(by_memory.min(u32::MAX as usize) as u32).max(1);
    if passes.warp {
        // Whole blocks of warps.
        blocks = (blocks / WARPS as u32).max(1) * WARPS as u32;
    } else if !backward_smem(dev, n, v, true).2 {
        // Accumulators in global memory: few, so zeroing and reducing them
        // stays cheap against the passes.
        blocks = blocks.min(2 * dev.multiprocessors);
    }
    let mut partial = s.alloc_zeros::<f64>(blocks as usize * size).map_err(err(dev, "allocating the counts"))?;
    let mut ll_all = Vec::with_capacity(passes.seqs.len());
    for range in &passes.batches {
        exec.monitor.check()?;
        ll_all.extend(passes.run_batch(&tables, range, None, Some((&mut partial, blocks)))?);
    }
    let mut total = s.alloc_zeros::<f64>(size).map_err(err(dev, "allocating the counts"))?;
    let f = function(dev, "hmm_reduce", 0)?;
    let cfg = LaunchConfig { grid_dim: ((size.div_ceil(256) as u32).clamp(1, dev.multiprocessors * BLOCKS_PER_SM), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let (b_i, size_i) = (blocks as i32, size as i64);
    let mut launch = s.launch_builder(&f);
    launch.arg(&partial).arg(&b_i).arg(&size_i).arg(&mut total);
    // SAFETY: partial holds `blocks` accumulators of `size` doubles and
    // total holds `size`; the arguments match hmm_reduce's parameters.
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_reduce"))?;
    let flat = s.clone_dtoh(&total).map_err(err(dev, "reading the counts"))?;
    let counts = Counts { start: flat[..n].to_vec(), trans_raw: flat[n..n + n * n].to_vec(), emis: flat[n + n * n..].to_vec() };
    let impossible = ll_all.iter().position(|&l| l == f64::NEG_INFINITY);
    let ll = ll_all.iter().sum();
    Ok((counts, ll, impossible))
}

/// Baum-Welch on the device (the sequences uploaded once for every start
/// and iteration); the M-step and the stopping rule are the CPU's.
pub fn fit(seqs: &Sequences, config: &CheckedHmmFitConfig, exec: &Exec) -> Result<HmmFit> {
    let probe = HmmModel { n_states: config.n_states, n_symbols: config.n_symbols, start: vec![], trans: vec![], emis: vec![] };
    check_size(&probe, seqs)?;
    let passes = Passes::new(config.n_states, config.n_symbols, seqs, true, 0)?;
    fit_with(config, exec, &mut |m: &HmmModel| e_step(&passes, m, exec))
}

/// One E-step + M-step on the device (for benchmarks and tests).
pub fn baum_welch_step(model: &HmmModel, seqs: &Sequences, pseudocount: f64, exec: &Exec) -> Result<(HmmModel, f64)> {
    check_size(model, seqs)?;
    let passes = Passes::new(model.n_states, model.n_symbols, seqs, true, 0)?;
    let (counts, ll, _) = e_step(&passes, model, exec)?;
    Ok((super::baum_welch::m_step(model, &counts, pseudocount), ll))
}

/// Device times of the passes with the sequences already on the device, for
/// comparison with peers that time kernels on resident data (seconds,
/// median of `reps` runs after a warm-up, each ending with a stream
/// synchronisation). Forward: the log-likelihood kernel only. Viterbi: the
/// kernel, paths left on the device. Baum-Welch: one E-step (forward
/// storing alphas, backward with counts, reduction) with its device
/// allocations and its small copies (model in; counts and per-sequence
/// log-likelihoods out), plus the host M-step.
pub struct DeviceTimes {
    pub forward: f64,
    pub viterbi: f64,
    pub baum_welch: f64,
}

pub fn time_device(model: &HmmModel, seqs: &Sequences, reps: usize) -> Result<DeviceTimes> {
    check_size(model, seqs)?;
    seqs.validate(model.n_symbols)?;
    let dev = device()?;
    let s = &dev.stream;
    let n = model.n_states;
    let sync = || s.synchronize().map_err(err(dev, "waiting for the device"));
    let median = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        f()?;
        let mut t = Vec::with_capacity(reps.max(1));
        for _ in 0..reps.max(1) {
            let t0 = std::time::Instant::now();
            f()?;
            t.push(t0.elapsed().as_secs_f64());
        }
        t.sort_by(f64::total_cmp);
        Ok(t[t.len() / 2])
    };
    let tables = upload_tables(dev, model)?;
    let d_seqs = upload(dev, seqs)?;
    let mut ll = s.alloc_zeros::<f64>(seqs.len()).map_err(err(dev, "allocating results"))?;
    let all = 0..seqs.len();
    sync()?;
    let forward = median(&mut || {
        launch_forward(dev, n, &tables, &d_seqs, &all, None, &mut ll)?;
        sync()
    })?;
    let tabs = upload_log_tables(dev, model)?;
    let per_symbol = if n <= WARP_MAX_STATES { n + 4 } else { 2 * n + 4 };
    let ranges = batches(dev, seqs, per_symbol)?;
    let mut bufs = Vec::new();
    if ranges.len() == 1 {
        bufs.push(viterbi_buffers(dev, n, seqs.total(), seqs.len())?);
    }
    let viterbi = median(&mut || {
        for range in &ranges {
            let (sym0, sym1) = (seqs.offsets[range.start], seqs.offsets[range.end]);
            if ranges.len() == 1 {
                launch_viterbi(dev, n, &tabs, &d_seqs, range, &mut bufs[0])?;
            } else {
                let mut buf = viterbi_buffers(dev, n, sym1 - sym0, range.len())?;
                launch_viterbi(dev, n, &tabs, &d_seqs, range, &mut buf)?;
            }
        }
        sync()
    })?;
    drop(bufs);
    let passes = Passes::new(n, model.n_symbols, seqs, true, 0)?;
    let exec = Exec { backend: crate::exec::Backend::Cuda, ..Exec::cpu() };
    let baum_welch = median(&mut || {
        let (counts, _, _) = e_step(&passes, model, &exec)?;
        let _ = super::baum_welch::m_step(model, &counts, 0.0);
        Ok(())
    })?;
    Ok(DeviceTimes { forward, viterbi, baum_welch })
}
