//! The forward-backward passes over all sequences of a call (`Passes`:
//! the sequences uploaded once, their batches and the scratch memory every
//! pass reuses), the E-step's count accumulators, and the device sides of
//! the log-likelihood, Viterbi and posterior routines (NaN log-likelihood:
//! a sequence the kernels could not certify).

use std::ops::Range;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::gpu::{Device, Kernel};

use super::super::backward::Counts;
use super::super::kept::kept_form;
use super::super::layout::PosteriorOut;
use super::super::model::HmmModel;
use super::super::sequences::Sequences;
use super::batched::{row_batches, Batched};
use super::launch::{launch_forward, launch_viterbi, launch_xi_gemm};
use super::memory::{upload, upload_log_tables, upload_tables, upload_tables_with, viterbi_buffers, DeviceLogTables, DeviceSeqs, DeviceTables};
use super::rows::DeviceDensity;
use super::shares::ShareSeqs;
use super::plan::{backward_smem, batched_path, batches, grid, loglik_batched, thread_backward, thread_backward_grid, thread_backward_smem, threads_for, viterbi_batched, viterbi_bytes_per_symbol, warp_grid, warp_path, xi_splits};
use super::{err, PARTIAL_SHARE, WARPS};

/// Baum-Welch count accumulators on the device (`slots` of N + N*N + V*N
/// doubles, summed in slot order into `total`).
pub(super) struct CountSlots {
    partial: CudaSlice<f64>,
    slots: u32,
    pub(super) total: CudaSlice<f64>,
}

/// The device state of the forward-backward passes of one call: the
/// sequences (uploaded once, for every start and iteration of a fit),
/// their batches, and scratch memory every E-step reuses.
pub(super) struct Passes<'a> {
    pub(super) dev: &'a Device,
    pub(super) n: usize,
    pub(super) v: usize,
    /// The sequences' offsets (and symbols when they are the call's own).
    pub(super) seqs: &'a Sequences,
    /// Their symbols (empty for a density: positions, filled on the device).
    pub(super) symbols: &'a [u32],
    d_seqs: DeviceSeqs,
    batches: Vec<Range<usize>>,
    /// N <= 8: a thread per sequence, one accumulator per block.
    thread: bool,
    /// Else N <= 32: a warp per sequence, one accumulator per warp.
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
    /// A density emission (its observations, parameters and kernels), or
    /// None for a categorical one; `v` is then its number of statistics.
    density: Option<&'a DeviceDensity>,
}

impl<'a> Passes<'a> {
    /// The passes over sequences `seqs` (offsets) with `symbols`;
    /// `counts`: the passes compute Baum-Welch counts; `extra_per_symbol`:
    /// bytes the caller stores per symbol besides alphas and scales.
    pub(super) fn new(dev: &'a Device, n: usize, v: usize, seqs: &'a Sequences, symbols: &'a [u32], counts: bool, extra_per_symbol: usize) -> Result<Self> {
        let d_seqs = upload(dev, seqs, symbols, v)?;
        Self::with(dev, n, v, seqs, symbols, d_seqs, counts, extra_per_symbol, None)
    }

    /// [`Passes::new`] for a density emission: `seqs` are the positions
    /// (symbol p at position p), `v` its number of statistics.
    pub(super) fn with_density(dev: &'a Device, n: usize, v: usize, seqs: &'a Sequences, counts: bool, extra_per_symbol: usize, density: &'a DeviceDensity) -> Result<Self> {
        let d_seqs = density.positions(dev, seqs)?;
        Self::with(dev, n, v, seqs, &[], d_seqs, counts, extra_per_symbol, Some(density))
    }

    #[allow(clippy::too_many_arguments)]
    fn with(dev: &'a Device, n: usize, v: usize, seqs: &'a Sequences, symbols: &'a [u32], d_seqs: DeviceSeqs, counts: bool, extra_per_symbol: usize, density: Option<&'a DeviceDensity>) -> Result<Self> {
        let thread = thread_backward(dev, n, v, counts);
        let warp = !thread && warp_path(dev, n, v, counts);
        // A density's E-step stays with a block per sequence wherever one
        // can run it: its statistics from the batched passes' posteriors
        // made a Baum-Welch iteration 1.75x slower at N = 128 over 1,000
        // sequences (BENCHMARKS.md), where its forward pass is 2.9x faster.
        let many = if counts && density.is_some() { 0 } else { seqs.len() };
        let large = !thread && !warp && batched_path(dev, n, many);
        // Transition counts by hmm_xi_gemm beyond the warp kernels: a block
        // per sequence adding N x N products into shared memory every step
        // took 4.0 ms of a 64-state E-step over 1,000 sequences of 100
        // (BENCHMARKS.md, "HMM backend choice by the call's shape").
        let xi_gemm = counts && !thread && !warp;
        let mut per_symbol = (n + 1) * 8 + extra_per_symbol + if xi_gemm { n * 8 } else { 0 };
        if large {
            // Two state vectors per sequence (at most per symbol), posteriors.
            per_symbol += 2 * n * 8 + 16 + if counts { n * 8 } else { 0 };
        }
        let batches = batches(dev, seqs, per_symbol)?;
        let largest = batches.iter().map(|r| seqs.offsets[r.end] - seqs.offsets[r.start]).max().unwrap_or(1).max(1);
        let rows = batches.iter().map(|r| r.len()).max().unwrap_or(1).max(1);
        // A density's counts come from its statistics, not by symbol.
        let count_symbols = if counts && density.is_none() { Some(symbols) } else { None };
        let batched = if large { Some(Batched::new(dev, n, v, seqs, &batches, count_symbols)?) } else { None };
        let s = &dev.stream;
        let e = err(dev, "allocating the forward-backward passes");
        // Zeroed once: hmm_xi_gemm reads every alpha row, also rows an
        // impossible sequence never reached, which must hold finite values.
        let alpha = s.alloc_zeros::<f64>(largest * n).map_err(&e)?;
        let scale = s.alloc_zeros::<f64>(largest).map_err(&e)?;
        let ll = s.alloc_zeros::<f64>(rows).map_err(&e)?;
        let gamma = if large && counts { Some(s.alloc_zeros::<f64>(largest * n).map_err(&e)?) } else { None };
        let tmp = if xi_gemm { Some(s.alloc_zeros::<f64>(largest * n).map_err(&e)?) } else { None };
        Ok(Passes { dev, n, v, seqs, symbols, d_seqs, batches, thread, warp, batched, alpha, scale, ll, gamma, tmp, density })
    }

    /// Count accumulators for this plan's E-steps.
    pub(super) fn count_slots(&self) -> Result<CountSlots> {
        let (dev, n, v) = (self.dev, self.n, self.v);
        let size = Counts::size(n, v);
        let max_batch = self.batches.iter().map(|r| r.len()).max().unwrap_or(1);
        let max_symbols = self.batches.iter().map(|r| self.seqs.offsets[r.end] - self.seqs.offsets[r.start]).max().unwrap_or(1);
        // As many accumulators as fit in PARTIAL_SHARE of the free memory.
        let by_memory = |want: u32| -> Result<u32> {
            let budget = dev.memory_share(PARTIAL_SHARE, want as usize * size * 8)?;
            Ok(want.min((budget / (size * 8)).clamp(1, u32::MAX as usize) as u32))
        };
        let slots = if self.batched.is_some() {
            // Slot 0 collects start and emission counts; hmm_xi_gemm's splits.
            xi_splits(dev, n, max_symbols)?
        } else if self.thread {
            by_memory(thread_backward_grid(dev, max_batch))?
        } else if self.warp {
            // Whole blocks of warps.
            let slots = by_memory(warp_grid(dev, max_batch) * WARPS as u32)?;
            (slots / WARPS as u32).max(1) * WARPS as u32
        } else if !backward_smem(dev, n, v, true).2 {
            // Accumulators in global memory: few, so zeroing and reducing them
            // stays cheap against the passes.
            by_memory(grid(dev, max_batch).min(2 * dev.multiprocessors))?
        } else {
            by_memory(grid(dev, max_batch))?
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
                match self.density {
                    Some(d) => d.count_stats(dev, n, &self.d_seqs, &range, &self.ll, g, &mut c.partial)?,
                    None => bt.count_emissions(dev, &self.d_seqs, b, &self.ll, g, &mut c.partial)?,
                }
            }
            return s.clone_dtoh(&self.ll.slice(0..range.len())).map_err(err(dev, "reading results"));
        }
        launch_forward(dev, n, tables, &self.d_seqs, &range, Some((&mut self.alpha, &mut self.scale)), &mut self.ll, None)?;
        if self.thread {
            self.backward_thread(tables, &range, gamma, counts.map(|c| (&mut c.partial, c.slots)))?;
            return s.clone_dtoh(&self.ll.slice(0..range.len())).map_err(err(dev, "reading results"));
        }
        if self.warp {
            self.backward_warp(tables, &range, gamma, counts.map(|c| (&mut c.partial, c.slots)))?;
            return s.clone_dtoh(&self.ll.slice(0..range.len())).map_err(err(dev, "reading results"));
        }
        let (smem, trans_smem, acc_smem) = backward_smem(dev, n, self.v, counts.is_some());
        let f = match self.density {
            Some(d) => d.function(dev, Kernel::HmmBackward)?,
            None => dev.function(Kernel::HmmBackward, &[])?,
        };
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
        let ep = self.density.map(|d| d.ep.borrow());
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
        match (self.density, ep.as_deref()) {
            (Some(d), Some(ep)) => launch.arg(&d.obs).arg(ep),
            _ => launch.arg(&null).arg(&null),
        };
        // SAFETY: the arguments match the parameters of hmm_backward in
        // order and type; alpha, scale and ll were filled by hmm_forward for
        // this batch; gamma (or null) holds N doubles per symbol of the
        // batch; partial (or null) holds at least `blocks` accumulators of
        // N + N*N + V*N doubles, and the grid has no more blocks than that;
        // shared memory holds beta, beta2, tmp, trans_t when trans_smem and
        // the accumulator when acc_smem; tmp (or null) holds N doubles per
        // symbol of the batch; obs and ep (a density's, compiled with its
        // block) hold a value per position and its parameters, else null.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_backward"))?;
        if let (Some(c), Some(t)) = (counts, tmp_ref) {
            launch_xi_gemm(dev, n, self.v, &self.alpha, t, &mut c.partial, c.slots, symbols)?;
        }
        s.clone_dtoh(&self.ll.slice(0..range.len())).map_err(err(dev, "reading results"))
    }

    /// hmm_backward_thread over one batch (N <= 8), after its forward pass.
    fn backward_thread(&self, tables: &DeviceTables, range: &Range<usize>, gamma: Option<&mut CudaSlice<f64>>, partial: Option<(&mut CudaSlice<f64>, u32)>) -> Result<()> {
        let (dev, n) = (self.dev, self.n);
        let defines = [("HMM_TN", n as i64)];
        let f = match self.density {
            Some(d) => d.function_defining(dev, Kernel::HmmBackwardThread, &defines)?,
            None => dev.function(Kernel::HmmBackwardThread, &defines)?,
        };
        let mut blocks = thread_backward_grid(dev, range.len());
        if let Some((_, slots)) = &partial {
            blocks = blocks.min(*slots);
        }
        let smem = thread_backward_smem(n, self.v, partial.is_some());
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (super::THREAD_BLOCK, 1, 1), shared_mem_bytes: smem as u32 };
        // SAFETY: hmm_backward_thread (compiled for N = n by HMM_TN) takes
        // hmm_backward_warp's parameters; partial (or null) holds at least
        // `blocks` accumulators (one per block); shared memory holds the
        // transitions and, when counting, the block's threads' counts.
        unsafe { self.launch_small_backward(&f, "launching hmm_backward_thread", cfg, tables, range, gamma, partial.map(|(p, _)| p)) }
    }

    /// hmm_backward_warp over one batch (N <= 32), after its forward pass.
    fn backward_warp(&self, tables: &DeviceTables, range: &Range<usize>, gamma: Option<&mut CudaSlice<f64>>, partial: Option<(&mut CudaSlice<f64>, u32)>) -> Result<()> {
        let dev = self.dev;
        let smem = (WARPS * 32 + if partial.is_some() { WARPS * self.v * 32 } else { 0 }) * 8;
        let f = match self.density {
            Some(d) => d.function(dev, Kernel::HmmBackwardWarp)?,
            None => dev.function(Kernel::HmmBackwardWarp, &[])?,
        };
        let mut blocks = warp_grid(dev, range.len());
        if let Some((_, slots)) = &partial {
            blocks = blocks.min(slots / WARPS as u32).max(1);
        }
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: smem as u32 };
        // SAFETY: partial (or null) holds at least blocks x WARPS
        // accumulators (one per warp); shared memory holds a 32-double
        // slice per warp and, when counting, V x 32 emission counts per warp.
        unsafe { self.launch_small_backward(&f, "launching hmm_backward_warp", cfg, tables, range, gamma, partial.map(|(p, _)| p)) }
    }

    /// Launch `f`, hmm_backward_warp or hmm_backward_thread (the same
    /// parameters), over one batch after its forward pass.
    ///
    /// # Safety
    /// `cfg` gives the kernel the shared memory it reads and no more
    /// blocks (or warps, for hmm_backward_warp) than `partial` holds
    /// accumulators.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_small_backward(&self, f: &CudaFunction, what: &'static str, cfg: LaunchConfig, tables: &DeviceTables, range: &Range<usize>, gamma: Option<&mut CudaSlice<f64>>, partial: Option<&mut CudaSlice<f64>>) -> Result<()> {
        let (n_i, v_i, s0, s1) = (self.n as i32, self.v as i32, range.start as i32, range.end as i32);
        let null: u64 = 0;
        let ep = self.density.map(|d| d.ep.borrow());
        let mut launch = self.dev.stream.launch_builder(f);
        launch.arg(&n_i).arg(&v_i).arg(&tables.trans).arg(&tables.emis).arg(&self.d_seqs.sym).arg(&self.d_seqs.off).arg(&s0).arg(&s1);
        launch.arg(&self.alpha).arg(&self.scale).arg(&self.ll);
        match gamma {
            Some(g) => launch.arg(g),
            None => launch.arg(&null),
        };
        match partial {
            Some(p) => launch.arg(p),
            None => launch.arg(&null),
        };
        match (self.density, ep.as_deref()) {
            (Some(d), Some(ep)) => launch.arg(&d.obs).arg(ep),
            _ => launch.arg(&null).arg(&null),
        };
        // SAFETY: the arguments match the kernels' parameters in order and
        // type; alpha, scale and ll were filled by the forward pass of this
        // batch; gamma (or null) holds N doubles per symbol of the batch;
        // accumulators hold N + N*N + V*N doubles each; obs and ep (a
        // density's, compiled with its block) as for hmm_backward; the
        // caller vouches for the grid and shared memory.
        unsafe { launch.launch(cfg) }.map_err(err(self.dev, what))?;
        Ok(())
    }

    /// One E-step over all sequences: the counts (in `counts.total`), the
    /// total log-likelihood (summed on the host in sequence order) and the
    /// first impossible sequence.
    pub(super) fn e_step(&mut self, tables: &DeviceTables, counts: &mut CountSlots, monitor: &crate::exec::Monitor) -> Result<Vec<f64>> {
        let dev = self.dev;
        let s = &dev.stream;
        s.memset_zeros(&mut counts.partial).map_err(err(dev, "clearing the counts"))?;
        let mut ll_all = Vec::with_capacity(self.seqs.len());
        for b in 0..self.batches.len() {
            monitor.check()?;
            ll_all.extend(self.run_batch(tables, b, None, Some(counts))?);
        }
        let size = Counts::size(self.n, self.v);
        let f = dev.function(Kernel::HmmReduce, &[])?;
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

/// The kernels' log-likelihoods of share `sh` into `out` (NaN: uncertain).
pub(super) fn loglik_device(sh: &ShareSeqs<u32>, model: &HmmModel, exec: &Exec, out: &mut [f64]) -> Result<()> {
    let t0 = std::time::Instant::now();
    let tables = kept_form(model, sh.dev.info.ordinal, || upload_tables(sh.dev, model))?;
    crate::gpu::timing::record("tables", t0);
    let t0 = std::time::Instant::now();
    let d_seqs = upload(sh.dev, &sh.seqs, sh.obs, model.emission.n_symbols)?;
    crate::gpu::timing::record("upload", t0);
    forward_all(sh.dev, model.n_states, model.emission.n_symbols, &tables, &d_seqs, &sh.seqs, exec, out, None)
}

/// The forward kernels' log-likelihoods of all `seqs` (on the device as
/// `d_seqs`) with `tables`, into `out`; `v` symbols. With `density` (N <=
/// 8), the kernel computes the density's rows (see [`launch_forward`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_all(dev: &Device, n: usize, v: usize, tables: &DeviceTables, d_seqs: &DeviceSeqs, seqs: &Sequences, exec: &Exec, out: &mut [f64], density: Option<&DeviceDensity>) -> Result<()> {
    let s = &dev.stream;
    if loglik_batched(dev, n, seqs.len()) {
        let t0 = std::time::Instant::now();
        let ranges = row_batches(dev, seqs.len(), n)?;
        crate::gpu::timing::record("row batches", t0);
        let t0 = std::time::Instant::now();
        let mut bt = Batched::new(dev, n, v, seqs, &ranges, None)?;
        crate::gpu::timing::record("batched plan", t0);
        for (b, range) in ranges.iter().enumerate() {
            exec.monitor.check()?;
            let t0 = std::time::Instant::now();
            let mut ll = s.alloc_zeros::<f64>(range.len()).map_err(err(dev, "allocating results"))?;
            bt.forward(dev, tables, d_seqs, b, None, &mut ll)?;
            crate::gpu::timing::record("launch", t0);
            let t0 = std::time::Instant::now();
            s.memcpy_dtoh(&ll, &mut out[range.clone()]).map_err(err(dev, "reading results"))?;
            crate::gpu::timing::record("pass and copy back", t0);
            exec.monitor.add_done(range.len());
        }
        return Ok(());
    }
    let mut ll = s.alloc_zeros::<f64>(seqs.len()).map_err(err(dev, "allocating results"))?;
    launch_forward(dev, n, tables, d_seqs, &(0..seqs.len()), None, &mut ll, density)?;
    s.memcpy_dtoh(&ll, out).map_err(err(dev, "reading results"))?;
    exec.monitor.add_done(seqs.len());
    exec.monitor.check()
}

/// The kernels' Viterbi paths and log-probabilities of share `sh` into
/// `paths` and `logp`; one launch per batch.
pub(super) fn viterbi_device(sh: &ShareSeqs<u32>, model: &HmmModel, exec: &Exec, paths: PathsOut<'_>, logp: &mut [f64]) -> Result<()> {
    let t0 = std::time::Instant::now();
    let tabs = kept_form(model, sh.dev.info.ordinal, || upload_log_tables(sh.dev, model))?;
    let d_seqs = upload(sh.dev, &sh.seqs, sh.obs, model.emission.n_symbols)?;
    crate::gpu::timing::record("upload", t0);
    viterbi_all(sh.dev, model.n_states, &tabs, &d_seqs, &sh.seqs, None, exec, paths, logp)
}

/// Where a share's Viterbi paths go: 4 bytes a state, or the `width` (1
/// or 2) bytes a state that crossed the bus ([`crate::hmm::Paths`]).
pub(super) enum PathsOut<'a> {
    Full(&'a mut [u32]),
    Narrow(&'a mut [u8], usize),
}

/// The Viterbi kernels over all `seqs` with log tables `tabs`, into
/// `paths` (one state per observation; fresh pages, mapped here in
/// parallel) and `logp` (one per sequence).
#[allow(clippy::too_many_arguments)]
pub(super) fn viterbi_all(dev: &Device, n: usize, tabs: &DeviceLogTables, d_seqs: &DeviceSeqs, seqs: &Sequences, density: Option<&DeviceDensity>, exec: &Exec, mut paths: PathsOut<'_>, logp: &mut [f64]) -> Result<()> {
    let s = &dev.stream;
    let batched = viterbi_batched(dev, n, seqs.len());
    for (b, range) in batches(dev, seqs, viterbi_bytes_per_symbol(n, batched))?.into_iter().enumerate() {
        exec.monitor.check()?;
        let (sym0, sym1) = (seqs.offsets[range.start], seqs.offsets[range.end]);
        let mut buf = viterbi_buffers(dev, n, batched, seqs, &range)?;
        launch_viterbi(dev, n, tabs, d_seqs, &range, &mut buf, density)?;
        // While the first batch runs: the paths' pages, touched once by
        // every thread, not one by one as the copy lands.
        match &mut paths {
            PathsOut::Full(p) => {
                if b == 0 {
                    prefault(p);
                }
                dev.download_small(&buf.path.slice(..), n as u64, &mut p[sym0..sym1])?;
            }
            PathsOut::Narrow(p, w) => {
                if b == 0 {
                    prefault(p);
                }
                dev.download_narrow(&buf.path.slice(..), *w, &mut p[sym0 * *w..sym1 * *w])?;
            }
        }
        s.memcpy_dtoh(&buf.logp, &mut logp[range.clone()]).map_err(err(dev, "reading results"))?;
        exec.monitor.add_done(range.len());
    }
    Ok(())
}

/// Write zeros over `v` in parallel: its pages (fresh from the allocator,
/// mapped on first write) are mapped by all threads at once.
pub(super) fn prefault<T: crate::hmm::passes::Zero + Send>(v: &mut [T]) {
    use rayon::prelude::*;
    // SAFETY: all-zero bytes are a valid value of every Zero type, and each
    // chunk is written by one thread.
    v.par_chunks_mut(1 << 16).for_each(|c| unsafe { std::ptr::write_bytes(c.as_mut_ptr(), 0, c.len()) });
}

/// The kernels' posteriors and log-likelihoods of share `sh` into `out`
/// and `loglik` (NaN: uncertain).
pub(super) fn posterior_device(sh: &ShareSeqs<u32>, model: &HmmModel, small: (f64, f64), exec: &Exec, out: PosteriorOut<'_, '_>, loglik: &mut [f64]) -> Result<()> {
    let n = model.n_states;
    let mut passes = Passes::new(sh.dev, n, model.emission.n_symbols, &sh.seqs, sh.obs, false, posterior_bytes(n, &out))?;
    let tables = kept_form(model, sh.dev.info.ordinal, || upload_tables_with(sh.dev, model, small))?;
    passes.posterior_all(&tables, exec, out, loglik)
}

/// Device bytes a posterior pass into `out` keeps per observation besides
/// the passes' own: the posteriors, and for the caller's matrices their
/// per-sequence layout beside them.
pub(super) fn posterior_bytes(n: usize, out: &PosteriorOut<'_, '_>) -> usize {
    match out {
        PosteriorOut::Rows(_) => n * 8,
        PosteriorOut::Columns(..) => 2 * n * 8,
    }
}

/// Write zeros over `out` in parallel (`prefault`).
pub(super) fn prefault_out(out: &mut PosteriorOut<'_, '_>) {
    use rayon::prelude::*;
    match out {
        PosteriorOut::Rows(rows) => prefault(rows),
        PosteriorOut::Columns(outs, _) => outs.par_iter_mut().with_min_len(16).for_each(|o| prefault(o)),
    }
}

impl Passes<'_> {
    /// Posteriors (N per observation, into `out`) and log-likelihoods
    /// (into `loglik`) of all sequences with `tables`. Into the caller's
    /// matrices, each batch is laid out on the device
    /// (`Device::columns_by_sequence`) and crosses the bus into them.
    pub(super) fn posterior_all(&mut self, tables: &DeviceTables, exec: &Exec, mut out: PosteriorOut<'_, '_>, loglik: &mut [f64]) -> Result<()> {
        let (dev, seqs, n) = (self.dev, self.seqs, self.n);
        // Summed over the batches, for the bench's phases.
        let (mut kernels, mut copies) = (0.0, 0.0);
        for b in 0..self.batches.len() {
            exec.monitor.check()?;
            let range = self.batches[b].clone();
            let (sym0, sym1) = (seqs.offsets[range.start], seqs.offsets[range.end]);
            let t0 = std::time::Instant::now();
            let mut gamma = dev.stream.alloc_zeros::<f64>((sym1 - sym0) * n).map_err(err(dev, "allocating results"))?;
            // While the first batch runs: the posteriors' fresh pages,
            // touched by every other thread (the copy back wrote 33.5 MB
            // into them at 8-9 GB/s at N = 512 on an H200, page by page).
            let ll = rayon::in_place_scope(|sc| {
                if b == 0 {
                    let fresh = &mut out;
                    sc.spawn(move |_| prefault_out(fresh));
                }
                self.run_batch(tables, b, Some(&mut gamma), None)
            })?;
            let t1 = match &mut out {
                PosteriorOut::Rows(probs) => {
                    let t1 = std::time::Instant::now();
                    dev.download(&gamma.slice(..), &mut probs[sym0 * n..sym1 * n])?;
                    t1
                }
                PosteriorOut::Columns(outs, missing) => {
                    // SAFETY: columns_by_sequence writes every value.
                    let mut cols = unsafe { dev.stream.alloc::<f64>((sym1 - sym0) * n) }.map_err(err(dev, "allocating results"))?;
                    dev.columns_by_sequence(&gamma, self.offsets(), range.start, range.len(), n, *missing, &mut cols)?;
                    drop(gamma);
                    let t1 = std::time::Instant::now();
                    dev.download_parts(&cols.slice(..), &mut outs[range.clone()])?;
                    t1
                }
            };
            kernels += (t1 - t0).as_secs_f64();
            copies += t1.elapsed().as_secs_f64();
            loglik[range.clone()].copy_from_slice(&ll);
            exec.monitor.add_done(range.len());
        }
        crate::gpu::timing::record_secs("batches' kernels", kernels);
        crate::gpu::timing::record_secs("copies back", copies);
        Ok(())
    }

    /// The sequences' offsets on the device.
    pub(super) fn offsets(&self) -> &CudaSlice<i64> {
        &self.d_seqs.off
    }
}
