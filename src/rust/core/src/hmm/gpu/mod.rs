//! The HMM routines on a CUDA device (kernels/hmm.cu, kernels/hmm_batched.cu),
//! checked against the CPU reference by tests/hmm_gpu.rs.
//!
//! Every pass over all sequences is one launch per batch. Small and
//! medium N: `hmm_forward`, `hmm_viterbi`, `hmm_backward` (a warp or a
//! block per sequence) loop over all time steps inside the kernel. Large N
//! (the transitions do not fit in shared memory; `batched`): all sequences
//! of a batch advance one step together, each step one matrix product on
//! the FP64 tensor cores, with a grid barrier between steps in one
//! cooperative launch. Sequences are uploaded once per call (once per fit,
//! for all iterations). Per-symbol storage (scaled alphas, back-pointers,
//! posteriors) is bounded: sequences go in batches that fit a share of the
//! free device memory, so long sequences never overflow it; a single
//! sequence too long for the device is an error (the CPU backend has no
//! such limit).
//!
//! Baum-Welch keeps the model, the counts and the scratch memory on the
//! device for a whole fit (`DeviceEngine`): counts go to one accumulator
//! per block (or warp), summed in a fixed order by `hmm_reduce`; for large
//! N the transition counts are one matrix product over all time steps of a
//! batch (`hmm_xi_gemm`) and the start and emission counts are summed from
//! the posteriors by symbol (`hmm_count_emissions`); the M-step is
//! `hmm_m_step`. An iteration copies only the per-sequence
//! log-likelihoods to the host.
//!
//! The forward kernels apply the CPU's certificate (`Tables::theta`): a
//! sequence the scaled recursions cannot certify comes back with
//! log-likelihood NaN, and the host computes it on the CPU in log space
//! (its log-likelihood, posteriors or counts; a fit then runs that
//! iteration's M-step on the host). A model whose positive probabilities
//! multiply below the double range (`theta > 1`) runs on the CPU entirely.
//! Interrupts are seen between launches (batches).

use std::ops::Range;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::gpu::{self, Device, Kernel};

mod batched;
use batched::{row_batches, Batched};

use super::backward::Counts;
use super::baum_welch::{fit_with, m_step as host_m_step, Engine, HmmFit};
use super::config::CheckedHmmFitConfig;
use super::cpu;
use super::model::HmmModel;
use super::sequences::Sequences;
use super::tables::{self, LogTables, Tables};

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

/// `kernel`, its dynamic shared memory limit raised to `smem` if needed.
fn function(dev: &Device, kernel: Kernel, smem: usize) -> Result<CudaFunction> {
    let f = dev.function(kernel, &[])?;
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

/// Symbols (0) after the last sequence: the warp kernels prefetch the
/// symbol up to three steps ahead without checking where the sequence ends
/// (HMM_SYM_PAD in kernels/hmm.cu).
const SYM_PAD: usize = 3;

fn upload(dev: &Device, seqs: &Sequences) -> Result<DeviceSeqs> {
    let s = &dev.stream;
    let off: Vec<i64> = seqs.offsets.iter().map(|&o| o as i64).collect();
    // Zeroed on the device and filled from the caller's symbols: a padded
    // copy on the host cost more than the forward pass (about 35 ms for
    // 10^7 symbols on the H100 machine).
    let n = seqs.symbols.len();
    let mut sym = s.alloc_zeros::<u32>(n + SYM_PAD).map_err(err(dev, "copying sequences"))?;
    s.memcpy_htod(&seqs.symbols[..], &mut sym.slice_mut(0..n)).map_err(err(dev, "copying sequences"))?;
    Ok(DeviceSeqs {
        sym,
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

/// The linear tables on the device: start, trans, trans_t, emis by symbol;
/// and the smallest positive start-or-transition and emission
/// probabilities, bit-inverted (kernels/hmm.cu, hmm_theta), from which the
/// forward kernels compute their certificate.
struct DeviceTables {
    start: CudaSlice<f64>,
    trans: CudaSlice<f64>,
    trans_t: CudaSlice<f64>,
    emis: CudaSlice<f64>,
    mins: CudaSlice<u64>,
}

/// A smallest probability as `mins` keeps it: bits inverted, 0 for none.
fn min_key(p: f64) -> u64 {
    if p > 0.0 && p.is_finite() { !p.to_bits() } else { 0 }
}

/// The transpose of the row-major n x n matrix `a`.
fn transposed(a: &[f64], n: usize) -> Vec<f64> {
    let mut t = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            t[j * n + i] = a[i * n + j];
        }
    }
    t
}

fn upload_tables(dev: &Device, model: &HmmModel) -> Result<DeviceTables> {
    upload_tables_with(dev, model, tables::smallest(model))
}

/// [`upload_tables`] with the model's smallest probabilities known.
fn upload_tables_with(dev: &Device, model: &HmmModel, (a, e_min): (f64, f64)) -> Result<DeviceTables> {
    let trans_t = transposed(&model.trans, model.n_states);
    let emis = model.emis_by_symbol()?;
    let s = &dev.stream;
    let e = err(dev, "copying the model");
    Ok(DeviceTables {
        start: s.clone_htod(&model.start[..]).map_err(&e)?,
        trans: s.clone_htod(&model.trans[..]).map_err(&e)?,
        trans_t: s.clone_htod(&trans_t[..]).map_err(&e)?,
        emis: s.clone_htod(&emis[..]).map_err(&e)?,
        mins: s.clone_htod(&[min_key(a), min_key(e_min)][..]).map_err(&e)?,
    })
}

/// Launch hmm_forward (or hmm_forward_warp; large N goes to the batched
/// kernels instead) over sequences `range`; with `store`, alphas and
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
    let warp = n <= WARP_MAX_STATES;
    let (name, smem, cfg) = if warp {
        let smem = WARPS * 32 * 8;
        let cfg = LaunchConfig { grid_dim: (warp_grid(dev, range.len()), 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: smem as u32 };
        (Kernel::HmmForwardWarp, smem, cfg)
    } else {
        let smem = base + if trans_smem { n * n * 8 } else { 0 };
        let cfg = LaunchConfig { grid_dim: (grid(dev, range.len()), 1, 1), block_dim: (threads_for(n), 1, 1), shared_mem_bytes: smem as u32 };
        (Kernel::HmmForward, smem, cfg)
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
    if !warp {
        launch.arg(&flag);
    }
    launch.arg(&tables.mins);
    // SAFETY: the arguments match the parameters of hmm_forward (or of
    // hmm_forward_warp, which has no trans_smem flag) in order and type;
    // mins holds two keys;
    // the tables hold N, N*N and V*N doubles, the symbols are < V
    // (validated), off has one entry per sequence + 1 and s0 < s1 index it;
    // alpha and scale (or null) hold N and 1 doubles per symbol of the
    // batch, loglik one per sequence of the batch; shared memory is sized
    // for cur, nxt and the reduction slots and trans when trans_smem, or for
    // one 32-double slice per warp.
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_forward"))?;
    Ok(())
}

/// log P(sequence) of every sequence: one launch (per batch of rows for
/// large N), O(N) memory per sequence.
pub fn loglik(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<Vec<f64>> {
    check_size(model, seqs)?;
    let small = tables::smallest(model);
    if tables::theta_of(small) > 1.0 {
        return cpu::loglik(&Tables::new(model)?, seqs, exec);
    }
    let mut out = loglik_device(model, small, seqs, exec)?;
    let uncertain: Vec<usize> = (0..out.len()).filter(|&s| out[s].is_nan()).collect();
    if !uncertain.is_empty() {
        let tab = Tables::new(model)?;
        for (s, l) in uncertain.iter().zip(cpu::loglik_of(&tab, seqs, &uncertain, exec)?) {
            out[*s] = l;
        }
    }
    Ok(out)
}

/// The kernels' log-likelihoods (NaN: uncertain).
fn loglik_device(model: &HmmModel, small: (f64, f64), seqs: &Sequences, exec: &Exec) -> Result<Vec<f64>> {
    let dev = device()?;
    let tables = upload_tables_with(dev, model, small)?;
    let d_seqs = upload(dev, seqs)?;
    let s = &dev.stream;
    let n = model.n_states;
    if batched_path(dev, n) {
        let ranges = row_batches(dev, seqs.len(), n)?;
        let mut bt = Batched::new(dev, n, model.n_symbols, seqs, &ranges, false)?;
        let mut out = vec![0.0; seqs.len()];
        for (b, range) in ranges.iter().enumerate() {
            exec.monitor.check()?;
            let mut ll = s.alloc_zeros::<f64>(range.len()).map_err(err(dev, "allocating results"))?;
            bt.forward(dev, &tables, &d_seqs, b, None, &mut ll)?;
            out[range.clone()].copy_from_slice(&s.clone_dtoh(&ll).map_err(err(dev, "reading results"))?);
            exec.monitor.add_done(range.len());
        }
        return Ok(out);
    }
    let mut ll = s.alloc_zeros::<f64>(seqs.len()).map_err(err(dev, "allocating results"))?;
    launch_forward(dev, n, &tables, &d_seqs, &(0..seqs.len()), None, &mut ll)?;
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
    let log = LogTables::new(model)?;
    let ltrans = transposed(&log.trans_t, model.n_states);
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
        (Kernel::HmmViterbiWarp, smem, LaunchConfig { grid_dim: (warp_grid(dev, range.len()), 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: smem as u32 })
    } else if tiled {
        let smem = TILE * base;
        (Kernel::HmmViterbiTiled, smem, LaunchConfig { grid_dim: (grid(dev, range.len().div_ceil(TILE)), 1, 1), block_dim: (tiled_threads(n), 1, 1), shared_mem_bytes: smem as u32 })
    } else {
        let smem = base + if trans_smem { n * n * 8 } else { 0 };
        (Kernel::HmmViterbi, smem, LaunchConfig { grid_dim: (grid(dev, range.len()), 1, 1), block_dim: (threads_for(n), 1, 1), shared_mem_bytes: smem as u32 })
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

/// Whether N states go to the batched kernels (the transitions do not fit
/// in shared memory next to the backward pass's vectors).
fn batched_path(dev: &Device, n: usize) -> bool {
    n > WARP_MAX_STATES && !backward_smem(dev, n, 0, false).1
}

/// Splits of the rows of hmm_xi_gemm: as many as fill one wave of resident
/// blocks (a partial second wave would nearly double the time), at least
/// XI_ROWS rows each.
fn xi_splits(dev: &Device, n: usize, rows: usize) -> Result<u32> {
    let tiles = n.div_ceil(XI_TILE) as u32;
    let f = function(dev, Kernel::HmmXiGemm, XI_SMEM)?;
    let per_sm = f.occupancy_max_active_blocks_per_multiprocessor(XI_THREADS, XI_SMEM, None).map_err(err(dev, "sizing hmm_xi_gemm"))?;
    let wave = dev.multiprocessors * per_sm.max(1);
    Ok((wave / (tiles * tiles)).min(rows.div_ceil(XI_ROWS) as u32).max(1))
}

/// Baum-Welch count accumulators on the device (`slots` of N + N*N + V*N
/// doubles, summed in slot order into `total`).
struct CountSlots {
    partial: CudaSlice<f64>,
    slots: u32,
    total: CudaSlice<f64>,
}

/// The device state of the forward-backward passes of one call: the
/// sequences (uploaded once, for every start and iteration of a fit),
/// their batches, and scratch memory every E-step reuses.
struct Passes<'a> {
    dev: &'a Device,
    n: usize,
    v: usize,
    seqs: &'a Sequences,
    d_seqs: DeviceSeqs,
    batches: Vec<Range<usize>>,
    /// N <= 32: a warp per sequence, one accumulator per warp.
    warp: bool,
    /// Large N: the batched kernels (start and emission counts from the
    /// posteriors, transition counts by hmm_xi_gemm).
    batched: Option<Batched>,
    /// Scaled alphas, scales and log-likelihoods of the largest batch.
    alpha: CudaSlice<f64>,
    scale: CudaSlice<f64>,
    ll: CudaSlice<f64>,
    /// Posteriors when the batched kernels count.
    gamma: Option<CudaSlice<f64>>,
    /// The rows hmm_xi_gemm multiplies with the alphas, when it computes
    /// the transition counts (large N, or accumulators too large for shared
    /// memory, where per-step updates would go to global memory).
    tmp: Option<CudaSlice<f64>>,
}

impl<'a> Passes<'a> {
    /// `counts`: the passes compute Baum-Welch counts; `extra_per_symbol`:
    /// bytes the caller stores per symbol besides alphas and scales.
    fn new(n: usize, v: usize, seqs: &'a Sequences, counts: bool, extra_per_symbol: usize) -> Result<Self> {
        let dev = device()?;
        let d_seqs = upload(dev, seqs)?;
        let warp = warp_path(dev, n, v, counts);
        let large = !warp && batched_path(dev, n);
        let xi_gemm = counts && !warp && (large || !backward_smem(dev, n, v, true).2);
        let mut per_symbol = (n + 1) * 8 + extra_per_symbol + if xi_gemm { n * 8 } else { 0 };
        if large {
            // Two state vectors per sequence (at most per symbol), posteriors.
            per_symbol += 2 * n * 8 + 16 + if counts { n * 8 } else { 0 };
        }
        let batches = batches(dev, seqs, per_symbol)?;
        let symbols = batches.iter().map(|r| seqs.offsets[r.end] - seqs.offsets[r.start]).max().unwrap_or(1).max(1);
        let rows = batches.iter().map(|r| r.len()).max().unwrap_or(1).max(1);
        let batched = if large { Some(Batched::new(dev, n, v, seqs, &batches, counts)?) } else { None };
        let s = &dev.stream;
        let e = err(dev, "allocating the forward-backward passes");
        // Zeroed once: hmm_xi_gemm reads every alpha row, also rows an
        // impossible sequence never reached, which must hold finite values.
        let alpha = s.alloc_zeros::<f64>(symbols * n).map_err(&e)?;
        let scale = s.alloc_zeros::<f64>(symbols).map_err(&e)?;
        let ll = s.alloc_zeros::<f64>(rows).map_err(&e)?;
        let gamma = if large && counts { Some(s.alloc_zeros::<f64>(symbols * n).map_err(&e)?) } else { None };
        let tmp = if xi_gemm { Some(s.alloc_zeros::<f64>(symbols * n).map_err(&e)?) } else { None };
        Ok(Passes { dev, n, v, seqs, d_seqs, batches, warp, batched, alpha, scale, ll, gamma, tmp })
    }

    /// Count accumulators for this plan's E-steps.
    fn count_slots(&self) -> Result<CountSlots> {
        let (dev, n, v) = (self.dev, self.n, self.v);
        let size = Counts::size(n, v);
        let max_batch = self.batches.iter().map(|r| r.len()).max().unwrap_or(1);
        let max_symbols = self.batches.iter().map(|r| self.seqs.offsets[r.end] - self.seqs.offsets[r.start]).max().unwrap_or(1);
        let by_memory = ((dev.free_memory()? as f64 * PARTIAL_SHARE) as usize / (size * 8)).max(1).min(u32::MAX as usize) as u32;
        let slots = if self.batched.is_some() {
            // Slot 0 collects start and emission counts; hmm_xi_gemm's splits.
            xi_splits(dev, n, max_symbols)?
        } else if self.warp {
            // Whole blocks of warps.
            let slots = (warp_grid(dev, max_batch) * WARPS as u32).min(by_memory);
            (slots / WARPS as u32).max(1) * WARPS as u32
        } else if !backward_smem(dev, n, v, true).2 {
            // Accumulators in global memory: few, so zeroing and reducing them
            // stays cheap against the passes.
            grid(dev, max_batch).min(by_memory).min(2 * dev.multiprocessors)
        } else {
            grid(dev, max_batch).min(by_memory)
        }
        .max(1);
        let s = &dev.stream;
        let e = err(dev, "allocating the counts");
        Ok(CountSlots { partial: s.alloc_zeros::<f64>(slots as usize * size).map_err(&e)?, slots, total: s.alloc_zeros::<f64>(size).map_err(&e)? })
    }

    /// Forward then backward over batch `b`. Returns the batch's
    /// per-sequence log-likelihoods; writes posteriors to `gamma` and/or
    /// adds counts to `counts`.
    fn run_batch(&mut self, tables: &DeviceTables, b: usize, gamma: Option<&mut CudaSlice<f64>>, counts: Option<&mut CountSlots>) -> Result<Vec<f64>> {
        let (dev, n) = (self.dev, self.n);
        let s = &dev.stream;
        let range = self.batches[b].clone();
        let symbols = self.seqs.offsets[range.end] - self.seqs.offsets[range.start];
        if let Some(bt) = self.batched.as_mut() {
            bt.forward(dev, tables, &self.d_seqs, b, Some((&mut self.alpha, &mut self.scale)), &mut self.ll)?;
            let g = match gamma {
                Some(g) => g,
                None => self.gamma.as_mut().ok_or_else(|| Error::Internal("batched E-step without posteriors".into()))?,
            };
            bt.backward(dev, tables, &self.d_seqs, b, &self.alpha, &self.scale, &self.ll, g, self.tmp.as_mut())?;
            if let (Some(c), Some(t)) = (counts, self.tmp.as_ref()) {
                launch_xi_gemm(dev, n, self.v, &self.alpha, t, &mut c.partial, c.slots, symbols)?;
                bt.count_emissions(dev, &self.d_seqs, b, &self.ll, g, &mut c.partial)?;
            }
            return s.clone_dtoh(&self.ll.slice(0..range.len())).map_err(err(dev, "reading results"));
        }
        launch_forward(dev, n, tables, &self.d_seqs, &range, Some((&mut self.alpha, &mut self.scale)), &mut self.ll)?;
        if self.warp {
            self.backward_warp(tables, &range, gamma, counts.map(|c| (&mut c.partial, c.slots)))?;
            return s.clone_dtoh(&self.ll.slice(0..range.len())).map_err(err(dev, "reading results"));
        }
        let (smem, trans_smem, acc_smem) = backward_smem(dev, n, self.v, counts.is_some());
        let f = function(dev, Kernel::HmmBackward, smem)?;
        let blocks = match &counts {
            Some(c) => c.slots.min(grid(dev, range.len())),
            None => grid(dev, range.len()),
        };
        let tmp = match (&counts, self.tmp.as_mut()) {
            (Some(_), Some(t)) => {
                // Rows hmm_backward leaves alone (last steps, impossible
                // sequences) must be zero; the scratch held another batch.
                s.memset_zeros(t).map_err(err(dev, "clearing the backward pass"))?;
                Some(t)
            }
            _ => None,
        };
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads_for(n), 1, 1), shared_mem_bytes: smem as u32 };
        let (n_i, v_i, s0, s1) = (n as i32, self.v as i32, range.start as i32, range.end as i32);
        let (t_flag, a_flag) = (trans_smem as i32, acc_smem as i32);
        let null: u64 = 0;
        let mut launch = s.launch_builder(&f);
        launch.arg(&n_i).arg(&v_i).arg(&tables.trans_t).arg(&tables.emis).arg(&self.d_seqs.sym).arg(&self.d_seqs.off).arg(&s0).arg(&s1);
        launch.arg(&self.alpha).arg(&self.scale).arg(&self.ll);
        match gamma {
            Some(g) => launch.arg(g),
            None => launch.arg(&null),
        };
        let mut counts = counts;
        match counts.as_deref_mut() {
            Some(c) => launch.arg(&mut c.partial),
            None => launch.arg(&null),
        };
        let tmp_ref = tmp.map(|t| &*t);
        match tmp_ref {
            Some(t) => launch.arg(t),
            None => launch.arg(&null),
        };
        launch.arg(&t_flag).arg(&a_flag);
        // SAFETY: the arguments match the parameters of hmm_backward in
        // order and type; alpha, scale and ll were filled by hmm_forward for
        // this batch; gamma (or null) holds N doubles per symbol of the
        // batch; partial (or null) holds at least `blocks` accumulators of
        // N + N*N + V*N doubles, and the grid has no more blocks than that;
        // shared memory holds beta, beta2, tmp, trans_t when trans_smem and
        // the accumulator when acc_smem; tmp (or null) holds N doubles per
        // symbol of the batch.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_backward"))?;
        if let (Some(c), Some(t)) = (counts, tmp_ref) {
            launch_xi_gemm(dev, n, self.v, &self.alpha, t, &mut c.partial, c.slots, symbols)?;
        }
        s.clone_dtoh(&self.ll.slice(0..range.len())).map_err(err(dev, "reading results"))
    }

    /// hmm_backward_warp over one batch (N <= 32), after its forward pass.
    fn backward_warp(&self, tables: &DeviceTables, range: &Range<usize>, gamma: Option<&mut CudaSlice<f64>>, partial: Option<(&mut CudaSlice<f64>, u32)>) -> Result<()> {
        let dev = self.dev;
        let smem = (WARPS * 32 + if partial.is_some() { WARPS * self.v * 32 } else { 0 }) * 8;
        let f = function(dev, Kernel::HmmBackwardWarp, smem)?;
        let mut blocks = warp_grid(dev, range.len());
        if let Some((_, slots)) = &partial {
            blocks = blocks.min(slots / WARPS as u32).max(1);
        }
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: smem as u32 };
        let (n_i, v_i, s0, s1) = (self.n as i32, self.v as i32, range.start as i32, range.end as i32);
        let null: u64 = 0;
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&v_i).arg(&tables.trans).arg(&tables.emis).arg(&self.d_seqs.sym).arg(&self.d_seqs.off).arg(&s0).arg(&s1);
        launch.arg(&self.alpha).arg(&self.scale).arg(&self.ll);
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

    /// One E-step over all sequences: the counts (in `counts.total`), the
    /// total log-likelihood (summed on the host in sequence order) and the
    /// first impossible sequence.
    fn e_step(&mut self, tables: &DeviceTables, counts: &mut CountSlots, monitor: &crate::exec::Monitor) -> Result<Vec<f64>> {
        let dev = self.dev;
        let s = &dev.stream;
        s.memset_zeros(&mut counts.partial).map_err(err(dev, "clearing the counts"))?;
        let mut ll_all = Vec::with_capacity(self.seqs.len());
        for b in 0..self.batches.len() {
            monitor.check()?;
            ll_all.extend(self.run_batch(tables, b, None, Some(counts))?);
        }
        let size = Counts::size(self.n, self.v);
        let f = function(dev, Kernel::HmmReduce, 0)?;
        // 32 counts per block, a warp per accumulator stride (up to 32).
        let cfg = LaunchConfig { grid_dim: (size.div_ceil(32) as u32, 1, 1), block_dim: (32 * counts.slots.clamp(1, 32), 1, 1), shared_mem_bytes: 0 };
        let (b_i, size_i) = (counts.slots as i32, size as i64);
        let mut launch = s.launch_builder(&f);
        launch.arg(&counts.partial).arg(&b_i).arg(&size_i).arg(&mut counts.total);
        // SAFETY: partial holds `slots` accumulators of `size` doubles and
        // total holds `size`; the arguments match hmm_reduce's parameters.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_reduce"))?;
        Ok(ll_all)
    }
}

/// Transition counts of a batch as one matrix product (large N), split
/// over at most `slots` accumulators.
#[allow(clippy::too_many_arguments)]
fn launch_xi_gemm(dev: &Device, n: usize, v: usize, alpha: &CudaSlice<f64>, tmp: &CudaSlice<f64>, partial: &mut CudaSlice<f64>, slots: u32, rows: usize) -> Result<()> {
    let tiles = n.div_ceil(XI_TILE) as u32;
    let splits = xi_splits(dev, n, rows)?.min(slots);
    let f = function(dev, Kernel::HmmXiGemm, XI_SMEM)?;
    let cfg = LaunchConfig { grid_dim: (tiles, tiles, splits), block_dim: (XI_THREADS, 1, 1), shared_mem_bytes: XI_SMEM as u32 };
    let (n_i, rows_i, size_i) = (n as i32, rows as i64, Counts::size(n, v) as i64);
    let mut launch = dev.stream.launch_builder(&f);
    launch.arg(&n_i).arg(&rows_i).arg(alpha).arg(tmp).arg(partial).arg(&size_i);
    // SAFETY: the arguments match hmm_xi_gemm's parameters; alpha and tmp
    // hold at least `rows` rows of N doubles; partial holds `slots` >=
    // splits accumulators of size_i doubles, of which split z adds into the
    // N*N transition entries of accumulator z.
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_xi_gemm"))?;
    Ok(())
}

/// Posterior state probabilities (time-major, NaN rows for impossible
/// sequences) and per-sequence log-likelihoods.
pub fn posterior(model: &HmmModel, seqs: &Sequences, exec: &Exec) -> Result<(Vec<f64>, Vec<f64>)> {
    check_size(model, seqs)?;
    let small = tables::smallest(model);
    if tables::theta_of(small) > 1.0 {
        return cpu::posterior(&Tables::new(model)?, seqs, exec);
    }
    let n = model.n_states;
    let (mut probs, mut loglik) = posterior_device(model, small, seqs, exec)?;
    let mut tab = None;
    for s in 0..seqs.len() {
        if loglik[s].is_nan() {
            exec.monitor.check()?;
            if tab.is_none() {
                tab = Some(Tables::new(model)?);
            }
            let Some(tab) = tab.as_ref() else { continue };
            let rows = &mut probs[seqs.offsets[s] * n..seqs.offsets[s + 1] * n];
            loglik[s] = cpu::posterior_of(tab, seqs.get(s), rows, &exec.monitor)?;
        }
    }
    Ok((probs, loglik))
}

/// The kernels' posteriors and log-likelihoods (NaN: uncertain).
fn posterior_device(model: &HmmModel, small: (f64, f64), seqs: &Sequences, exec: &Exec) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = model.n_states;
    let mut passes = Passes::new(n, model.n_symbols, seqs, false, n * 8)?;
    let dev = passes.dev;
    let tables = upload_tables_with(dev, model, small)?;
    let (mut probs, mut loglik) = (super::passes::zeroed(seqs.total() * n, "the posterior probabilities")?, vec![0.0; seqs.len()]);
    for b in 0..passes.batches.len() {
        exec.monitor.check()?;
        let range = passes.batches[b].clone();
        let (sym0, sym1) = (seqs.offsets[range.start], seqs.offsets[range.end]);
        let mut gamma = dev.stream.alloc_zeros::<f64>((sym1 - sym0) * n).map_err(err(dev, "allocating results"))?;
        let ll = passes.run_batch(&tables, b, Some(&mut gamma), None)?;
        let got = dev.stream.clone_dtoh(&gamma).map_err(err(dev, "reading results"))?;
        probs[sym0 * n..sym1 * n].copy_from_slice(&got);
        loglik[range.clone()].copy_from_slice(&ll);
        exec.monitor.add_done(range.len());
    }
    Ok((probs, loglik))
}

/// Baum-Welch on the device: the sequences, the model and the counts stay
/// there, and an iteration (E-step, reduction, M-step by hmm_m_step) moves
/// only per-sequence log-likelihoods to the host.
struct DeviceEngine<'a> {
    passes: Passes<'a>,
    /// The current model and the previous one (or scratch), swapped by the M-step.
    tables: [DeviceTables; 2],
    cur: usize,
    counts: CountSlots,
    exec: &'a Exec,
    /// The current model on the host, when known (after `load`, a host
    /// M-step or a download; the device M-step leaves it on the device).
    host_model: Option<HmmModel>,
    /// Counts of the last E-step computed on the host (the sequences the
    /// kernels could not certify), and whether the device holds the rest.
    host_counts: Option<(Counts, bool)>,
    /// Segment length of the host's E-step passes.
    seg: usize,
}

impl<'a> DeviceEngine<'a> {
    fn new(n: usize, v: usize, seqs: &'a Sequences, exec: &'a Exec) -> Result<Self> {
        let passes = Passes::new(n, v, seqs, true, 0)?;
        let counts = passes.count_slots()?;
        let blank = HmmModel { n_states: n, n_symbols: v, start: vec![0.0; n], trans: vec![0.0; n * n], emis: vec![0.0; n * v] };
        let tables = [upload_tables(passes.dev, &blank)?, upload_tables(passes.dev, &blank)?];
        let seg = cpu::fit_segment(n, seqs, exec);
        Ok(DeviceEngine { passes, tables, cur: 0, counts, exec, host_model: None, host_counts: None, seg })
    }

    /// The device's share of the last E-step's counts, on the host.
    fn device_counts(&self) -> Result<Counts> {
        let (n, v) = (self.passes.n, self.passes.v);
        let total = self.passes.dev.stream.clone_dtoh(&self.counts.total).map_err(err(self.passes.dev, "reading the counts"))?;
        Ok(Counts { start: total[..n].to_vec(), trans_raw: total[n..n + n * n].to_vec(), trans: Vec::new(), emis: total[n + n * n..n + n * n + n * v].to_vec() })
    }
}

impl Engine for DeviceEngine<'_> {
    fn load(&mut self, model: &HmmModel) -> Result<(f64, Option<usize>)> {
        self.tables[self.cur] = upload_tables(self.passes.dev, model)?;
        self.host_model = Some(model.clone());
        self.e_step()
    }

    fn m_step(&mut self, pseudocount: f64) -> Result<()> {
        if let Some((host, with_device)) = self.host_counts.take() {
            // Some counts are on the host: the M-step runs there.
            let mut counts = host;
            if with_device {
                counts.add(&self.device_counts()?);
            }
            let model = match self.host_model.take() {
                Some(m) => m,
                None => self.model(false)?,
            };
            let next = host_m_step(&model, &counts, pseudocount);
            self.tables[1 - self.cur] = upload_tables(self.passes.dev, &next)?;
            self.cur = 1 - self.cur;
            self.host_model = Some(next);
            return Ok(());
        }
        let dev = self.passes.dev;
        let (n, v) = (self.passes.n, self.passes.v);
        let (first, second) = self.tables.split_at_mut(1);
        let (from, to) = if self.cur == 0 { (&first[0], &mut second[0]) } else { (&second[0], &mut first[0]) };
        let f = function(dev, Kernel::HmmMStep, 0)?;
        let cfg = LaunchConfig { grid_dim: (n as u32 + 1, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let (n_i, v_i) = (n as i32, v as i32);
        dev.stream.memset_zeros(&mut to.mins).map_err(err(dev, "clearing the smallest probabilities"))?;
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&v_i).arg(&pseudocount).arg(&self.counts.total).arg(&from.start).arg(&from.trans).arg(&from.emis);
        launch.arg(&mut to.start).arg(&mut to.trans).arg(&mut to.trans_t).arg(&mut to.emis).arg(&mut to.mins);
        // SAFETY: the arguments match hmm_m_step's parameters in order and
        // type; counts.total holds N + N*N + V*N doubles from the last
        // E-step; both tables hold N, N*N, N*N and V*N doubles and two
        // keys (zeroed above); the block has 256 threads (whole warps).
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_m_step"))?;
        self.cur = 1 - self.cur;
        // Known on the device only; downloaded if the host needs it.
        self.host_model = None;
        Ok(())
    }

    fn e_step(&mut self) -> Result<(f64, Option<usize>)> {
        let exec = self.exec;
        exec.monitor.check()?;
        let mut ll_all = self.passes.e_step(&self.tables[self.cur], &mut self.counts, &exec.monitor)?;
        let uncertain: Vec<usize> = (0..ll_all.len()).filter(|&s| ll_all[s].is_nan()).collect();
        self.host_counts = None;
        if !uncertain.is_empty() {
            // Those sequences on the host, in log space, with the model.
            let model = match self.host_model.take() {
                Some(m) => m,
                None => self.model(false)?,
            };
            let tab = Tables::new(&model)?;
            let (host, lls) = cpu::counts_of(&tab, self.passes.seqs, &uncertain, self.seg, exec)?;
            for (s, l) in uncertain.iter().zip(lls) {
                ll_all[*s] = l;
            }
            self.host_counts = Some((host, true));
            self.host_model = Some(model);
        }
        let impossible = ll_all.iter().position(|&l| l == f64::NEG_INFINITY);
        Ok((ll_all.iter().sum(), impossible))
    }

    fn model(&self, previous: bool) -> Result<HmmModel> {
        let t = &self.tables[if previous { 1 - self.cur } else { self.cur }];
        download_model(self.passes.dev, t, self.passes.n, self.passes.v)
    }
}

/// A model from its device tables.
fn download_model(dev: &Device, t: &DeviceTables, n: usize, v: usize) -> Result<HmmModel> {
    let s = &dev.stream;
    let e = err(dev, "reading the model");
    let start = s.clone_dtoh(&t.start).map_err(&e)?;
    let trans = s.clone_dtoh(&t.trans).map_err(&e)?;
    let by_symbol = s.clone_dtoh(&t.emis).map_err(&e)?;
    let mut emis = vec![0.0; n * v];
    for k in 0..v {
        for i in 0..n {
            emis[i * v + k] = by_symbol[k * n + i];
        }
    }
    Ok(HmmModel { n_states: n, n_symbols: v, start, trans, emis })
}

/// Baum-Welch on the device (the sequences uploaded once for every start
/// and iteration); the stopping rule is the CPU's.
pub fn fit(seqs: &Sequences, config: &CheckedHmmFitConfig, exec: &Exec) -> Result<HmmFit> {
    let probe = HmmModel { n_states: config.n_states, n_symbols: config.n_symbols, start: vec![], trans: vec![], emis: vec![] };
    check_size(&probe, seqs)?;
    let mut engine = DeviceEngine::new(config.n_states, config.n_symbols, seqs, exec)?;
    fit_with(config, exec, &mut engine)
}

/// One E-step + M-step on the device (for benchmarks and tests): the next
/// model and the log-likelihood of `model`.
pub fn baum_welch_step(model: &HmmModel, seqs: &Sequences, pseudocount: f64, exec: &Exec) -> Result<(HmmModel, f64)> {
    check_size(model, seqs)?;
    let mut engine = DeviceEngine::new(model.n_states, model.n_symbols, seqs, exec)?;
    let (ll, _) = engine.load(model)?;
    engine.m_step(pseudocount)?;
    Ok((engine.model(false)?, ll))
}

/// Device times of the passes with the sequences already on the device, for
/// comparison with peers that time kernels on resident data (seconds,
/// median of `reps` runs after a warm-up, each ending with a stream
/// synchronisation). Forward: the log-likelihood kernel only. Viterbi: the
/// kernel, paths left on the device. Baum-Welch: one iteration as a fit
/// runs it: the M-step on the device, then the E-step (forward storing
/// alphas, backward with counts, reduction) with the per-sequence
/// log-likelihoods copied out.
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
    let all = 0..seqs.len();
    let forward = if batched_path(dev, n) {
        let ranges = row_batches(dev, seqs.len(), n)?;
        let mut bt = Batched::new(dev, n, model.n_symbols, seqs, &ranges, false)?;
        let mut lls = Vec::with_capacity(ranges.len());
        for range in &ranges {
            lls.push(s.alloc_zeros::<f64>(range.len()).map_err(err(dev, "allocating results"))?);
        }
        sync()?;
        median(&mut || {
            for (b, ll) in lls.iter_mut().enumerate() {
                bt.forward(dev, &tables, &d_seqs, b, None, ll)?;
            }
            sync()
        })?
    } else {
        let mut ll = s.alloc_zeros::<f64>(seqs.len()).map_err(err(dev, "allocating results"))?;
        sync()?;
        median(&mut || {
            launch_forward(dev, n, &tables, &d_seqs, &all, None, &mut ll)?;
            sync()
        })?
    };
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
    let exec = Exec { backend: crate::exec::Backend::Cuda, ..Exec::cpu() };
    let mut engine = DeviceEngine::new(n, model.n_symbols, seqs, &exec)?;
    engine.load(model)?;
    let baum_welch = median(&mut || {
        engine.m_step(0.0)?;
        engine.e_step()?;
        Ok(())
    })?;
    Ok(DeviceTimes { forward, viterbi, baum_welch })
}
