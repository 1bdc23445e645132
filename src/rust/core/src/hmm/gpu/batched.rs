//! The forward, backward and Viterbi passes for large N
//! (kernels/hmm_batched.cu): the sequences of a batch advance one time step
//! together, each step one matrix product (max-plus for Viterbi) over the
//! whole grid, and a pass is one cooperative launch
//! (a grid-wide barrier between steps). Used when the transitions do not
//! fit in shared memory, where a block per sequence would re-read all of A
//! from L2 at every step of every sequence. From 897 to 1,024 states, the
//! forward and backward passes over batches of at most 64 sequences split
//! each step's sums over the blocks of a cluster instead
//! (hmm_forward_split and hmm_backward_split, sm_90: [`Split`]).

use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use cudarc::driver::{CudaSlice, LaunchArgs, LaunchConfig, PushKernelArg};

use crate::error::{Error, Result};
use crate::gpu::{bytes_of, Device, Kernel};

use super::super::sequences::Sequences;
use super::err;
use super::memory::{DeviceLogTables, DeviceSeqs, DeviceTables};

/// Rows (sequences) of hmm_batched.cu's tiles (HMB_BM), threads of a
/// block (HMB_THREADS), and columns of a row's partial sums (HMB_CHUNK).
const ROWS: usize = 32;
const THREADS: u32 = 512;
const CHUNK: usize = 16;
/// Shared memory of a block that is not the dynamic part: the kernels'
/// static arrays (HmbShared, the backward's t_of: about 1.3 KB), with room.
const STATIC_SMEM: usize = 4096;

/// How the batched forward and backward passes tile a step
/// (hmm_batched.cu's HMB_BN and HMB_RESIDENT). Both add every sum in the
/// same order, so the choice changes the speed, never the results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiling {
    /// Tiles of 32 x 64; both operands read from L2 at every step.
    Wide,
    /// Tiles of 32 x 16; each block keeps one column tile, whose slice of
    /// the transitions (N x 16) it holds in shared memory for the whole
    /// pass, so a step reads only the state vectors. Four times the tiles
    /// of `Wide`: a few sequences with many states fill the device.
    Narrow,
}

impl Tiling {
    /// Columns of a tile (HMB_BN).
    fn cols(self) -> usize {
        match self {
            Tiling::Wide => 64,
            Tiling::Narrow => 16,
        }
    }

    /// Stages of a group's copy pipeline (HMB_STAGES) for N states where a
    /// block may have `limit` bytes of dynamic shared memory: narrow tiles
    /// stream only the state vectors, whose copies are bound by their
    /// latency, so they take a fourth stage where it fits (N <= 1,136 on an
    /// H200).
    fn stages(self, n: usize, limit: usize) -> usize {
        match self {
            Tiling::Wide => 3,
            Tiling::Narrow if Self::narrow_smem(n, 4) <= limit => 4,
            Tiling::Narrow => 3,
        }
    }

    fn defines(self, n: usize, limit: usize) -> Vec<(&'static str, i64)> {
        match self {
            Tiling::Wide => vec![],
            Tiling::Narrow => vec![("HMB_BN", 16), ("HMB_RESIDENT", 1), ("HMB_STAGES", self.stages(n, limit) as i64)],
        }
    }

    /// Dynamic shared memory of a block for N states: HMB_GROUPS stage
    /// buffers of HMB_STAGES x (32 x 20 [+ 16 x 68]) doubles, and with
    /// `Narrow` the slice (N rounded up to 16 rows of 16).
    fn smem(self, n: usize, limit: usize) -> usize {
        match self {
            Tiling::Wide => 4 * 3 * (32 * 20 + 16 * 68) * 8,
            Tiling::Narrow => Self::narrow_smem(n, self.stages(n, limit)),
        }
    }

    fn narrow_smem(n: usize, stages: usize) -> usize {
        (4 * stages * 32 * 20 + n.next_multiple_of(16) * 16) * 8
    }

    /// Tiles of one step over `rows` sequences of N states.
    fn tiles(self, n: usize, rows: usize) -> usize {
        rows.div_ceil(ROWS) * n.div_ceil(self.cols())
    }
}

/// A tiling that the batched passes use wherever it fits, in place of the
/// one the shape chooses (0: none, 1: Wide, 2: Narrow): for tests and
/// benchmarks that compare the two.
static FORCED_TILING: AtomicU8 = AtomicU8::new(0);

/// Make the batched passes use `tiling` wherever it fits (None: choose by
/// the shape). Results do not change; tests check that they do not.
#[doc(hidden)]
pub fn force_tiling(tiling: Option<Tiling>) {
    FORCED_TILING.store(
        match tiling {
            None => 0,
            Some(Tiling::Wide) => 1,
            Some(Tiling::Narrow) => 2,
        },
        Ordering::Relaxed,
    );
}

fn forced_tiling() -> Option<Tiling> {
    match FORCED_TILING.load(Ordering::Relaxed) {
        1 => Some(Tiling::Wide),
        2 => Some(Tiling::Narrow),
        _ => None,
    }
}

/// hmm_forward_split and hmm_backward_split (hmm_batched.cu's HMS_*): rows
/// a launch, states of a block's slice of the transitions (a cluster of
/// ceil(N / 128) blocks splits a step's sums over k), column units of 8 a
/// cluster at most, and threads of a block.
const SPLIT_ROWS: usize = 64;
const SPLIT_KR: usize = 128;
const SPLIT_MAX_UNITS: usize = 9;
const SPLIT_THREADS: u32 = 256;

/// States from which the passes over batches of at most 64 sequences run
/// hmm_forward_split and hmm_backward_split (clusters of 8 blocks), where
/// the forward pass was measured faster on an H200: at N = 1,024, 64
/// sequences of 256 took 1.89 ms on the device against the narrow tiles'
/// 2.40-2.42 (one of 64: 0.45 against 0.60), at N = 900, 20 of 200 1.25
/// against 1.73; at N = 768 (clusters of 6) it was slower, 2.16 against
/// 2.02 (BENCHMARKS.md).
const SPLIT_FROM: usize = 897;

/// The split kernels' dynamic shared memory (HMS_SMEM) for clusters of
/// `ks` blocks: the slice of the state vectors, the ninth unit's
/// transitions and quarters, the fragments and row sums received, each
/// thread's emission entries and (backward) alphas, the rows' first
/// symbols.
fn split_smem(ks: usize) -> usize {
    let threads = SPLIT_THREADS as usize;
    8 * (SPLIT_ROWS * (SPLIT_KR + 4) + SPLIT_KR * 12 + 4 * SPLIT_ROWS * 8 + ks * SPLIT_ROWS * 16 + ks * SPLIT_ROWS + 8 * threads + SPLIT_ROWS)
}

/// 0: choose by the shape; 1: never; 2: wherever it can run (from 513
/// states: clusters of 5 to 8 blocks).
static FORCED_SPLIT: AtomicU8 = AtomicU8::new(0);

/// Make the batched forward and backward passes run the split kernels wherever
/// it can (Some(true)) or never (Some(false); None: by the shape), for
/// benchmarks and tests that compare it with the batched kernels.
#[doc(hidden)]
pub fn force_split(on: Option<bool>) {
    FORCED_SPLIT.store(
        match on {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        },
        Ordering::Relaxed,
    );
}

/// Launches of hmm_forward_split and hmm_backward_split in this process,
/// for tests that check a shape took them.
static SPLIT_LAUNCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[doc(hidden)]
pub fn split_launches() -> usize {
    SPLIT_LAUNCHES.load(Ordering::Relaxed)
}

/// The split kernels' launch: clusters of `ks` blocks, `grid` blocks.
#[derive(Clone, Copy, Debug)]
struct Split {
    ks: usize,
    grid: u32,
}

impl Split {
    fn defines(self) -> [(&'static str, i64); 1] {
        [("HMS_KS", self.ks as i64)]
    }

    fn config(self) -> LaunchConfig {
        LaunchConfig { grid_dim: (self.grid, 1, 1), block_dim: (SPLIT_THREADS, 1, 1), shared_mem_bytes: split_smem(self.ks) as u32 }
    }

    /// The launch for N states and batches of at most `rows` rows, where
    /// hmm_forward_split runs (sm_90's clusters, N up to 1,024, `rows` up
    /// to 64; from SPLIT_FROM unless forced): ceil(N / 8) column units of
    /// 8 shared by as many clusters as are resident at once, at most 8
    /// units each (9 where fewer fit: 15 clusters of 8 on an H200 at N =
    /// 1,024).
    fn plan(dev: &Device, n: usize, rows: usize) -> Result<Option<Self>> {
        let wanted = match FORCED_SPLIT.load(Ordering::Relaxed) {
            1 => false,
            2 => true,
            _ => n >= SPLIT_FROM,
        };
        let ks = n.div_ceil(SPLIT_KR);
        if !wanted || dev.info.compute_capability.0 < 9 || rows > SPLIT_ROWS || !(5..=8).contains(&ks) || split_smem(ks) > dev.max_shared_per_block {
            return Ok(None);
        }
        // Kept per device and cluster size (a driver call each time would
        // cost a small call more than its plan).
        static MOST: Mutex<Vec<((usize, usize), usize)>> = Mutex::new(Vec::new());
        let units = n.div_ceil(8);
        let key = (dev.info.ordinal, ks);
        let known = MOST.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(k, _)| *k == key).map(|&(_, m)| m);
        let most = match known {
            Some(m) => m,
            None => {
                let probe = Split { ks, grid: (ks * units.div_ceil(8)) as u32 };
                let mut m = usize::MAX;
                for kernel in [Kernel::HmmForwardSplit, Kernel::HmmBackwardSplit] {
                    let f = dev.function(kernel, &probe.defines())?;
                    m = m.min(f.occupancy_max_active_clusters(probe.config(), &dev.stream).map_err(err(dev, "preparing the split passes"))? as usize);
                }
                MOST.lock().unwrap_or_else(|e| e.into_inner()).push((key, m));
                m
            }
        };
        let clusters = units.div_ceil(8).min(most);
        Ok((clusters > 0 && units <= clusters * SPLIT_MAX_UNITS).then_some(Split { ks, grid: (clusters * ks) as u32 }))
    }
}

/// Row stride of the kernels' state-vector buffers (HMB_LD: N rounded up
/// to even, for 16-byte copies).
fn row_stride(n: usize) -> usize {
    n.next_multiple_of(2)
}

/// A batch's sequences sorted by decreasing length (ties by index), as
/// the kernels' HmbBatch arrays: the rows still running at a step are a
/// prefix.
pub(super) struct Rows {
    /// First symbol of the batch.
    base: i64,
    /// Rows (the batch's sequences).
    count: usize,
    /// The kernels' four row arrays in one copy (four small copies cost
    /// four times the driver calls; `row_arrays`): first symbol
    /// (batch-relative, i64), length (i64) and index - range.start (i32) of
    /// each row, then running[t], the rows whose length exceeds t (i32), for
    /// t in 0..=longest. Kept for `at`; freed in stream order after every
    /// launch that reads it.
    _arrays: CudaSlice<u8>,
    /// Where each array starts in `_arrays`, as device addresses.
    at: [u64; 4],
}

impl Rows {
    /// The rows of batch `range` of `seqs`, on the device.
    pub(super) fn new(dev: &Device, seqs: &Sequences, range: &Range<usize>) -> Result<Self> {
        let (rel, len, seq, running) = row_arrays(seqs, range);
        let (arrays, at) = dev.upload_packed([bytes_of(&rel), bytes_of(&len), bytes_of(&seq), bytes_of(&running)])?;
        Ok(Rows { base: seqs.offsets[range.start] as i64, count: range.len(), _arrays: arrays, at })
    }

    /// [`Rows::new`] and the batch's positions grouped by symbol
    /// (`symbols`: those of all `seqs`; V of them) in the same copy (a
    /// small upload takes 5-10 us on the GPU host).
    fn with_symbols(dev: &Device, seqs: &Sequences, range: &Range<usize>, symbols: &[u32], v: usize) -> Result<(Self, BySymbol)> {
        let (rel, len, seq, running) = row_arrays(seqs, range);
        let (off, pos, pos_seq) = by_symbol(seqs, symbols, range, v);
        let (arrays, at) = dev.upload_packed([bytes_of(&rel), bytes_of(&len), bytes_of(&seq), bytes_of(&running), bytes_of(&off), bytes_of(&pos), bytes_of(&pos_seq)])?;
        let rows = Rows { base: seqs.offsets[range.start] as i64, count: range.len(), _arrays: arrays, at: [at[0], at[1], at[2], at[3]] };
        Ok((rows, BySymbol { at: [at[4], at[5], at[6]] }))
    }

    /// Push the row arrays (rel, len, seq, running), as the kernels take them.
    fn push<'a>(&'a self, launch: &mut LaunchArgs<'a>) {
        launch.arg(&self.at[0]).arg(&self.at[1]).arg(&self.at[2]).arg(&self.at[3]);
    }
}

/// The row arrays of batch `range` of `seqs` as [`Rows`] keeps them (its
/// rows sorted by decreasing length, ties by index): each row's first
/// symbol (batch-relative), length and index - range.start, and running[t]
/// for t in 0..=longest.
fn row_arrays(seqs: &Sequences, range: &Range<usize>) -> (Vec<i64>, Vec<i64>, Vec<i32>, Vec<i32>) {
    let len = |q: usize| seqs.offsets[q + 1] - seqs.offsets[q];
    let mut order: Vec<usize> = range.clone().collect();
    order.sort_by_key(|&q| (std::cmp::Reverse(len(q)), q));
    let base = seqs.offsets[range.start];
    let rel: Vec<i64> = order.iter().map(|&q| (seqs.offsets[q] - base) as i64).collect();
    let lens: Vec<i64> = order.iter().map(|&q| len(q) as i64).collect();
    let seq: Vec<i32> = order.iter().map(|&q| (q - range.start) as i32).collect();
    let longest = lens.first().copied().unwrap_or(0) as usize;
    let mut running = vec![0i32; longest + 1];
    let mut r = order.len();
    for (t, slot) in running.iter_mut().enumerate() {
        while r > 0 && lens[r - 1] as usize <= t {
            r -= 1;
        }
        *slot = r as i32;
    }
    (rel, lens, seq, running)
}

/// One batch of the forward-backward passes: its rows and, for counting,
/// its positions grouped by symbol.
struct Batch {
    range: Range<usize>,
    rows: Rows,
    by_symbol: Option<BySymbol>,
}

/// Positions of a batch grouped by symbol (CSR), batch-relative, with the
/// sequence (- s0) of each.
struct BySymbol {
    /// Where off (i64), pos (i64) and seq (i32) start, as device
    /// addresses in the buffer of the batch's rows (`Rows::with_symbols`).
    at: [u64; 3],
}

/// Tiles of one step of the batched forward (and backward) pass over
/// `rows` sequences of N states, counted as wide tiles (what the rule that
/// spreads a pass over devices was measured with).
pub(super) fn forward_tiles(n: usize, rows: usize) -> usize {
    Tiling::Wide.tiles(n, rows)
}

/// Tiles of one step of hmm_viterbi_batched over `rows` sequences.
pub(super) fn viterbi_tiles(n: usize, rows: usize) -> usize {
    rows.div_ceil(VIT_ROWS) * vit_stride(n) / VIT_COLS
}

/// The plan and scratch memory of the batched passes over some batches.
pub(super) struct Batched {
    n: usize,
    v: usize,
    batches: Vec<Batch>,
    /// Zeroed scratch memory, kept for `scratch`: one allocation.
    _scratch: CudaSlice<u8>,
    /// The addresses of the two state-vector buffers (buf0, buf1), the
    /// partial sums (psum), the log-likelihood accumulators (llacc) and
    /// hmb_grid_sync's arrival count (bar), shared by the plan's launches
    /// (one grid), in `_scratch`.
    scratch: Scratch,
    /// The kernels' defines and dynamic shared memory for the tiling.
    defines: Vec<(&'static str, i64)>,
    smem: usize,
    /// Blocks of a launch: every tile of a step at once if they fit, and
    /// never more than can be resident (the barrier needs all of them);
    /// with `Narrow`, a multiple of the column tiles.
    grid: u32,
    /// Where the forward and backward passes run the split kernels.
    split: Option<Split>,
}

/// Device addresses of the batched passes' scratch arrays (see
/// [`Batched`]).
struct Scratch {
    buf0: u64,
    buf1: u64,
    psum: u64,
    llacc: u64,
    bar: u64,
    /// hmm_forward_split's arrival count (its grid is not the others').
    split_bar: u64,
}

/// Dynamic shared memory a block of the batched passes may have.
fn dynamic_smem_limit(dev: &Device) -> usize {
    dev.max_shared_per_block.saturating_sub(STATIC_SMEM)
}

/// A tiling's grid for N states and at most `rows` rows a batch, and the
/// doubles the busiest block reads from L2 at a step (None: it does not
/// fit the device).
fn plan_tiling(dev: &Device, tiling: Tiling, n: usize, rows: usize) -> Result<Option<(u32, usize)>> {
    let e = err(dev, "preparing the batched passes");
    let limit = dynamic_smem_limit(dev);
    let smem = tiling.smem(n, limit);
    if tiling == Tiling::Narrow && smem > limit {
        return Ok(None);
    }
    // Kept per device, tiling and N: four driver calls each time cost
    // more than a small call's plan.
    type Known = Vec<((usize, Tiling, usize), u32)>;
    static PER_SM: Mutex<Known> = Mutex::new(Vec::new());
    let key = (dev.info.ordinal, tiling, n);
    let known = PER_SM.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(k, _)| *k == key).map(|&(_, p)| p);
    let per_sm = match known {
        Some(p) => p,
        None => {
            let mut per_sm = u32::MAX;
            for kernel in [Kernel::HmmForwardBatched, Kernel::HmmBackwardBatched] {
                let f = dev.function(kernel, &tiling.defines(n, limit))?;
                per_sm = per_sm.min(f.occupancy_max_active_blocks_per_multiprocessor(THREADS, smem, None).map_err(&e)?);
            }
            PER_SM.lock().unwrap_or_else(|e| e.into_inner()).push((key, per_sm));
            per_sm
        }
    };
    let capacity = (dev.multiprocessors * per_sm) as usize;
    let (row_tiles, col_tiles) = (rows.div_ceil(ROWS), n.div_ceil(tiling.cols()));
    Ok(match tiling {
        Tiling::Wide => {
            let grid = tiling.tiles(n, rows).clamp(1, capacity.max(1));
            Some((grid as u32, tiling.tiles(n, rows).div_ceil(grid) * (ROWS * n + n * tiling.cols())))
        }
        // Each block keeps one column tile: the grid is whole rows of them.
        Tiling::Narrow if capacity >= col_tiles => {
            let row_groups = row_tiles.min(capacity / col_tiles).max(1);
            Some(((col_tiles * row_groups) as u32, row_tiles.div_ceil(row_groups) * ROWS * n))
        }
        Tiling::Narrow => None,
    })
}

impl Batched {
    /// Plan the batches `ranges` of `seqs` for N states and V symbols;
    /// `count_symbols`: the sequences' symbols, whose positions are indexed
    /// by symbol for hmm_count_emissions (None: no counts by symbol).
    pub(super) fn new(dev: &Device, n: usize, v: usize, seqs: &Sequences, ranges: &[Range<usize>], count_symbols: Option<&[u32]>) -> Result<Self> {
        let t0 = std::time::Instant::now();
        let mut batches = Vec::with_capacity(ranges.len());
        for range in ranges {
            let (rows, by_symbol) = match count_symbols {
                Some(symbols) => Rows::with_symbols(dev, seqs, range, symbols, v).map(|(r, b)| (r, Some(b)))?,
                None => (Rows::new(dev, seqs, range)?, None),
            };
            batches.push(Batch { range: range.clone(), rows, by_symbol });
        }
        crate::gpu::timing::record("plan uploads", t0);
        let t0 = std::time::Instant::now();
        let rows = ranges.iter().map(|r| r.len()).max().unwrap_or(1).max(1);
        // The tiling whose busiest block reads the least at a step (the
        // steps are bound by those reads and their latency), unless one is
        // forced; Wide always fits.
        let wide = plan_tiling(dev, Tiling::Wide, n, rows)?.ok_or_else(|| Error::BackendUnavailable("internal: no grid for the batched passes".into()))?;
        let narrow = plan_tiling(dev, Tiling::Narrow, n, rows)?;
        let (tiling, grid) = match (forced_tiling(), narrow) {
            (Some(Tiling::Wide), _) | (_, None) => (Tiling::Wide, wide.0),
            (Some(Tiling::Narrow), Some((g, _))) => (Tiling::Narrow, g),
            (None, Some((g, reads))) if reads < wide.1 => (Tiling::Narrow, g),
            (None, Some(_)) => (Tiling::Wide, wide.0),
        };
        crate::gpu::timing::record("plan functions", t0);
        let split = Split::plan(dev, n, rows)?;
        let (scratch, [buf0, buf1, psum, llacc, bar, split_bar]) =
            dev.alloc_zeros_packed([8 * rows * row_stride(n), 8 * rows * row_stride(n), 8 * 2 * n.div_ceil(CHUNK) * rows, 8 * rows, 8, 8])?;
        Ok(Batched {
            n,
            v,
            batches,
            _scratch: scratch,
            scratch: Scratch { buf0, buf1, psum, llacc, bar, split_bar },
            defines: tiling.defines(n, dynamic_smem_limit(dev)),
            smem: tiling.smem(n, dynamic_smem_limit(dev)),
            grid,
            split,
        })
    }

    fn config(&self) -> LaunchConfig {
        LaunchConfig { grid_dim: (self.grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: self.smem as u32 }
    }

    /// Forward pass over batch `b`: log-likelihoods (by sequence - s0) and,
    /// with `store`, the scaled alphas and scales of the batch.
    pub(super) fn forward(
        &mut self,
        dev: &Device,
        tables: &DeviceTables,
        seqs: &DeviceSeqs,
        b: usize,
        store: Option<(&mut CudaSlice<f64>, &mut CudaSlice<f64>)>,
        loglik: &mut CudaSlice<f64>,
    ) -> Result<()> {
        if let Some(split) = self.split {
            return self.forward_split(dev, tables, seqs, b, split, store, loglik);
        }
        let f = dev.function(Kernel::HmmForwardBatched, &self.defines)?;
        let batch = &self.batches[b];
        let (n_i, rows) = (self.n as i32, batch.range.len() as i32);
        let null: u64 = 0;
        let cfg = self.config();
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&tables.start).arg(&tables.trans).arg(&tables.emis).arg(&seqs.sym).arg(&batch.rows.base).arg(&rows);
        batch.rows.push(&mut launch);
        let sc = &self.scratch;
        launch.arg(&sc.buf0).arg(&sc.buf1).arg(&sc.psum).arg(&sc.llacc).arg(&sc.bar);
        match store {
            Some((alpha, scale)) => launch.arg(alpha).arg(scale),
            None => launch.arg(&null).arg(&null),
        };
        launch.arg(loglik).arg(&tables.mins);
        // SAFETY: the arguments match hmm_forward_batched's parameters in
        // order and type; rel, len and seq hold `rows` entries, running
        // longest + 1, as HmbBatch describes; buf0/buf1 hold rows x
        // row_stride(N) doubles, zeroed at allocation (the pad column is
        // never written), psum 2 x ceil(N / CHUNK) x rows,
        // llacc rows, bar an arrival count that every launch of this plan
        // (one grid) leaves at a multiple of the grid; alpha and scale (or null) hold N and 1 doubles per symbol
        // of the batch, loglik one per sequence. The launch is cooperative
        // with no more blocks than can be resident, as the kernel's grid
        // barrier requires (with Narrow, a multiple of the column tiles, and
        // the slice in the dynamic shared memory); mins holds two keys.
        unsafe { launch.launch_cooperative(cfg) }.map_err(err(dev, "launching hmm_forward_batched"))?;
        Ok(())
    }

    /// [`Batched::forward`] by hmm_forward_split.
    #[allow(clippy::too_many_arguments)]
    fn forward_split(
        &mut self,
        dev: &Device,
        tables: &DeviceTables,
        seqs: &DeviceSeqs,
        b: usize,
        split: Split,
        store: Option<(&mut CudaSlice<f64>, &mut CudaSlice<f64>)>,
        loglik: &mut CudaSlice<f64>,
    ) -> Result<()> {
        let f = dev.function(Kernel::HmmForwardSplit, &split.defines())?;
        let batch = &self.batches[b];
        let (n_i, rows) = (self.n as i32, batch.range.len() as i32);
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&tables.start).arg(&tables.trans).arg(&tables.emis).arg(&seqs.sym).arg(&batch.rows.base).arg(&rows);
        batch.rows.push(&mut launch);
        let sc = &self.scratch;
        let null: u64 = 0;
        launch.arg(&sc.buf0).arg(&sc.buf1).arg(&sc.split_bar);
        match store {
            Some((alpha, scale)) => launch.arg(alpha).arg(scale),
            None => launch.arg(&null).arg(&null),
        };
        launch.arg(loglik).arg(&tables.mins);
        // SAFETY: the arguments match hmm_forward_split's parameters in
        // order and type; rel, len and seq hold `rows` (at most 64) entries,
        // running longest + 1, as HmbBatch describes; buf0/buf1 hold rows x
        // row_stride(N) doubles (the pad column zero); split_bar is an
        // arrival count only this plan's split launches (one grid) use,
        // left at a multiple of the grid; alpha and scale (or null) hold N
        // and 1 doubles per symbol of the batch, loglik one per sequence,
        // mins two keys. The grid is whole clusters of split.ks
        // blocks, no more clusters than can be resident at once
        // (`Split::plan`), as the grid barrier requires; the launch is
        // cooperative.
        unsafe { launch.launch_cooperative(split.config()) }.map_err(err(dev, "launching hmm_forward_split"))?;
        SPLIT_LAUNCHES.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Backward pass over batch `b` after its forward pass stored alpha and
    /// scale: posteriors to `gamma`, and with `tmp` the rows hmm_xi_gemm
    /// multiplies with the alphas.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward(
        &mut self,
        dev: &Device,
        tables: &DeviceTables,
        seqs: &DeviceSeqs,
        b: usize,
        alpha: &CudaSlice<f64>,
        scale: &CudaSlice<f64>,
        loglik: &CudaSlice<f64>,
        gamma: &mut CudaSlice<f64>,
        tmp: Option<&mut CudaSlice<f64>>,
    ) -> Result<()> {
        let (f, cfg, bar) = match self.split {
            Some(split) => (dev.function(Kernel::HmmBackwardSplit, &split.defines())?, split.config(), &self.scratch.split_bar),
            None => (dev.function(Kernel::HmmBackwardBatched, &self.defines)?, self.config(), &self.scratch.bar),
        };
        let batch = &self.batches[b];
        let (n_i, rows) = (self.n as i32, batch.range.len() as i32);
        let null: u64 = 0;
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&tables.trans_t).arg(&tables.emis).arg(&seqs.sym).arg(&batch.rows.base).arg(&rows);
        batch.rows.push(&mut launch);
        let sc = &self.scratch;
        launch.arg(&sc.buf0).arg(&sc.buf1).arg(bar).arg(alpha).arg(scale).arg(loglik).arg(gamma);
        match tmp {
            Some(t) => launch.arg(t),
            None => launch.arg(&null),
        };
        // SAFETY: the arguments match the parameters of
        // hmm_backward_batched and of hmm_backward_split (the same) in
        // order and type; alpha, scale and loglik were filled by a forward
        // pass of this batch; gamma and tmp (or null) hold N doubles per
        // symbol of the batch; buffers, arrival count and launch as for
        // `forward` and `forward_split` (the split plan's batches hold at
        // most 64 rows).
        unsafe { launch.launch_cooperative(cfg) }.map_err(err(dev, "launching the backward pass"))?;
        if self.split.is_some() {
            SPLIT_LAUNCHES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Add batch `b`'s start and emission counts, from its posteriors, to
    /// `counts` (start, transitions, emissions by symbol).
    pub(super) fn count_emissions(&self, dev: &Device, seqs: &DeviceSeqs, b: usize, loglik: &CudaSlice<f64>, gamma: &CudaSlice<f64>, counts: &mut CudaSlice<f64>) -> Result<()> {
        let batch = &self.batches[b];
        let Some(by) = &batch.by_symbol else {
            return Err(Error::BackendUnavailable("internal: the batched plan has no symbol index".into()));
        };
        let f = dev.function(Kernel::HmmCountEmissions, &[])?;
        // HMB_COUNT_THREADS: the kernel stages that many positions at a time.
        let threads = 256u32;
        let cfg = LaunchConfig { grid_dim: (self.v as u32 + 1, self.n.div_ceil(threads as usize) as u32, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let (n_i, v_i, s0, s1) = (self.n as i32, self.v as i32, batch.range.start as i32, batch.range.end as i32);
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&v_i).arg(&by.at[0]).arg(&by.at[1]).arg(&by.at[2]).arg(&seqs.off).arg(&s0).arg(&s1).arg(loglik).arg(gamma).arg(counts);
        // SAFETY: the arguments match hmm_count_emissions's parameters in
        // order and type (by.at: the addresses of off, pos and seq in the
        // batch's kept arrays); off holds V + 1 offsets into pos and seq
        // (one entry per symbol of the batch); gamma holds N doubles per
        // symbol of the batch, loglik one per sequence; counts holds
        // N + N*N + V*N doubles.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_count_emissions"))?;
        Ok(())
    }
}

/// Rows and columns of hmm_viterbi_batched's tiles (HMV_BM, HMV_BN): its
/// log vectors and padded tables are N rounded up to VIT_COLS wide.
const VIT_ROWS: usize = 16;
const VIT_COLS: usize = 32;
/// Threads (HMV_THREADS) and dynamic shared memory (HMV_GROUPS stage
/// buffers of HMV_STAGES x (16 x 16 + 16 x 32) doubles) of its blocks.
const VIT_THREADS: u32 = 512;
const VIT_SMEM: usize = 8 * 3 * (16 * 16 + 16 * 32) * 8;

/// Doubles per symbol of the batched Viterbi's log vectors (P).
pub(super) fn vit_stride(n: usize) -> usize {
    n.next_multiple_of(VIT_COLS)
}

/// Viterbi over the sequences `rows` with log tables `tabs` on the device
/// (hmm_viterbi_batched): `vals` holds vit_stride(N) doubles per symbol of
/// the batch, path one state per symbol, logp one value per sequence.
#[allow(clippy::too_many_arguments)]
pub(super) fn viterbi(dev: &Device, n: usize, tabs: &DeviceLogTables, seqs: &DeviceSeqs, rows: &Rows, vals: &mut CudaSlice<f64>, path: &mut CudaSlice<u32>, logp: &mut CudaSlice<f64>) -> Result<()> {
    let s = &dev.stream;
    let e = err(dev, "preparing the Viterbi kernel");
    let p = vit_stride(n);
    // SAFETY: hmm_vit_pad writes every entry of both.
    let (mut lp, mut lpt) = unsafe { (s.alloc::<f64>(p * p).map_err(&e)?, s.alloc::<f64>(p * p).map_err(&e)?) };
    let (n_i, p_i) = (n as i32, p as i32);
    let pad = dev.function(Kernel::HmmVitPad, &[])?;
    let cfg = LaunchConfig { grid_dim: ((p * p).div_ceil(256).min(4096) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut launch = s.launch_builder(&pad);
    launch.arg(&n_i).arg(&p_i).arg(&tabs.trans).arg(&mut lp).arg(&mut lpt);
    // SAFETY: hmm_vit_pad(N, P, ltrans, lp, lpt): ltrans holds N x N
    // doubles, lp and lpt P x P; the grid strides over P x P.
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_vit_pad"))?;
    let f = dev.function(Kernel::HmmViterbiBatched, &[])?;
    let per_sm = f.occupancy_max_active_blocks_per_multiprocessor(VIT_THREADS, VIT_SMEM, None).map_err(&e)?.max(1);
    let tiles = viterbi_tiles(n, rows.count);
    let cfg = LaunchConfig { grid_dim: ((tiles as u32).clamp(1, dev.multiprocessors * per_sm), 1, 1), block_dim: (VIT_THREADS, 1, 1), shared_mem_bytes: VIT_SMEM as u32 };
    let mut bar = s.alloc_zeros::<u64>(1).map_err(&e)?;
    let count = rows.count as i32;
    let mut launch = s.launch_builder(&f);
    launch.arg(&n_i).arg(&p_i).arg(&tabs.start).arg(&lp).arg(&lpt).arg(&tabs.emis).arg(&seqs.sym).arg(&rows.base).arg(&count);
    rows.push(&mut launch);
    launch.arg(vals).arg(&mut bar).arg(path).arg(logp);
    // SAFETY: the arguments match hmm_viterbi_batched's parameters in
    // order and type; start holds N log probabilities, lp and lpt P x P
    // (hmm_vit_pad), emis V x N (or a row per position); the row arrays are
    // HmbBatch's (Rows); vals holds P doubles per symbol of the batch, path
    // one state per symbol, logp one value per sequence; bar is a zeroed
    // arrival count. The launch is cooperative with no more blocks than can be
    // resident, as the kernel's grid barrier requires.
    unsafe { launch.launch_cooperative(cfg) }.map_err(err(dev, "launching hmm_viterbi_batched"))?;
    Ok(())
}

/// The positions of batch `range` grouped by symbol (`symbols`: those of
/// all `seqs`; V of them) as CSR: offsets by symbol, batch-relative
/// positions, and the sequence (- range.start) of each.
fn by_symbol(seqs: &Sequences, symbols: &[u32], range: &Range<usize>, v: usize) -> (Vec<i64>, Vec<i64>, Vec<i32>) {
    let base = seqs.offsets[range.start];
    let mut off = vec![0i64; v + 1];
    for &k in &symbols[base..seqs.offsets[range.end]] {
        off[k as usize + 1] += 1;
    }
    for k in 0..v {
        off[k + 1] += off[k];
    }
    let total = off[v] as usize;
    let (mut pos, mut seq, mut next) = (vec![0i64; total], vec![0i32; total], off.clone());
    for q in range.clone() {
        for p in seqs.offsets[q]..seqs.offsets[q + 1] {
            let k = symbols[p] as usize;
            let at = next[k] as usize;
            pos[at] = (p - base) as i64;
            seq[at] = (q - range.start) as i32;
            next[k] += 1;
        }
    }
    // An empty batch cannot happen (sequences are non-empty), so pos is too.
    (off, pos, seq)
}

/// Consecutive batches of the sequences 0..count whose row buffers (two
/// state vectors, partial sums, a log-likelihood per sequence) fit the
/// memory share of the device.
pub(super) fn row_batches(dev: &Device, count: usize, n: usize) -> Result<Vec<Range<usize>>> {
    let per_row = (2 * row_stride(n) + 2 * n.div_ceil(CHUNK) + 2) * 8;
    let rows = (dev.memory_share(super::MEMORY_SHARE, count.saturating_mul(per_row))? / per_row).max(1);
    Ok((0..count).step_by(rows).map(|a| a..(a + rows).min(count)).collect())
}
