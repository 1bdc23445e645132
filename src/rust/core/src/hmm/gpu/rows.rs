//! Density emissions on the device (kernels/hmm_emission.cu): the
//! observations and parameters, the rows the recursions of hmm.cu read
//! (position p of the flat sequences is "symbol" p, so the categorical
//! kernels run unchanged on a table with one row per position), each
//! sequence's sum of shifts (added to its log-likelihood), and the kernels'
//! certificate of normalised rows (as the CPU's,
//! [`Certificate`](super::super::tables::Certificate)).

use std::cell::RefCell;
use std::ops::Range;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};

use crate::error::{Error, Result};
use crate::gpu::{Device, Kernel};

use super::super::emission::Emission;
use super::super::kept::{kept_form, KeptForm};
use super::super::model::HmmModel;
use super::super::tables::{min_positive, min_positive_and_dense, DENSE_MIN};
use super::super::sequences::Sequences;
use super::memory::{DeviceLogTables, DeviceSeqs, DeviceTables, SYM_PAD};
use super::plan::thread_path;
use super::{err, WARP_MAX_STATES};

/// Whether the forward kernel at `n` states computes a density's rows
/// from its observations (the thread kernel: kernels/hmm.cu,
/// hmm_forward_thread_n, says why not the others), so that a forward pass
/// needs no table of rows ([`DensityTables::new`]).
pub(super) fn rows_computed(n: usize) -> bool {
    thread_path(n)
}

/// A density emission's observations, parameters and kernels.
pub(crate) struct DeviceDensity {
    /// Cache key and source of the emission's device block.
    name: &'static str,
    prelude: String,
    pub(super) stats: usize,
    pub(super) obs: CudaSlice<f64>,
    /// Replaced after every M-step while the passes hold the density.
    pub(super) ep: RefCell<CudaSlice<f64>>,
}

/// A density's linear tables: the device tables (emis: one row per
/// position) and, per sequence on the device, the sums from which
/// [`DensityTables::shifts`] gives each sequence's shift and whether the
/// kernels' result cannot be certified (its first step, see
/// [`DeviceDensity::refresh`]: computed on the CPU).
pub(super) struct DensityTables {
    /// `emis` holds no rows when the forward kernels compute them
    /// ([`DensityTables::new`]).
    pub(super) tables: DeviceTables,
    rows: bool,
    /// Per position: the shift and the row minimum.
    shift_d: CudaSlice<f64>,
    rowmin_d: CudaSlice<f64>,
    /// Per sequence: the shifts' sum, the smallest row minimum, the first
    /// step's scale (count each, end to end: one copy back).
    sums: CudaSlice<f64>,
    count: usize,
    /// Whether a sequence whose first scale is below DENSE_MIN is
    /// uncertain (dense transitions, outside a fit's E-step).
    first_uncertain: bool,
}

/// Threads per block of hmm_emission_rows (a warp per position).
const ROW_THREADS: u32 = 256;
/// Threads per block of hmm_emission_rows_thread(_wide) (a thread per
/// position, N <= 32): their shared tile of rows, POSITION_THREADS x (N | 1)
/// doubles, stays under 48 KB.
const POSITION_THREADS: u32 = 128;

/// What the certificate needs of the start and transition probabilities
/// (see [`Certificate`](super::super::tables::Certificate)): the smallest
/// positive one, and whether every transition is at least DENSE_MIN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ChainSummary {
    pub(super) min_positive: f64,
    pub(super) dense: bool,
}

impl ChainSummary {
    pub(super) fn of<E: Emission>(model: &HmmModel<E>) -> Self {
        let (min_trans, dense) = min_positive_and_dense(&model.trans);
        ChainSummary { min_positive: min_positive(&model.start).min(min_trans), dense }
    }
}

/// A model's start and transitions on a device (and the transposed
/// transitions), with their summary: made once for a kept model
/// ([`kept_form`]), whose calls then copy them on the device.
pub(super) struct DeviceChain {
    start: CudaSlice<f64>,
    trans: CudaSlice<f64>,
    trans_t: CudaSlice<f64>,
    summary: ChainSummary,
}

impl DeviceChain {
    /// The chain of `model` on its way to the device, its summary made
    /// meanwhile.
    fn new<E: Emission>(dev: &Device, model: &HmmModel<E>) -> Result<Self> {
        let n = model.n_states;
        let e = err(dev, "allocating the transitions");
        // SAFETY: written by upload_chain_into before any kernel reads them.
        let chain = |k: usize| unsafe { dev.stream.alloc::<f64>(k) }.map_err(&e);
        let (mut start, mut trans, mut trans_t) = (chain(n)?, chain(n * n)?, chain(n * n)?);
        // The summary's pass over the transitions while they cross the bus.
        let (uploaded, summary) = rayon::join(|| upload_chain_into(dev, model, &mut start, &mut trans, &mut trans_t), || ChainSummary::of(model));
        uploaded?;
        Ok(DeviceChain { start, trans, trans_t, summary })
    }
}

/// Copy the start and transition probabilities of `model` (and the
/// transpose) to the device.
fn upload_chain_into<E: Emission>(dev: &Device, model: &HmmModel<E>, start: &mut CudaSlice<f64>, trans: &mut CudaSlice<f64>, trans_t: &mut CudaSlice<f64>) -> Result<()> {
    let n = model.n_states;
    dev.upload(&model.start, &mut start.slice_mut(..))?;
    dev.upload(&model.trans, &mut trans.slice_mut(..))?;
    dev.layout_into(trans, n, n, true, false, &mut trans_t.slice_mut(..))
}

/// A model's log start and transitions on a device, for Viterbi: made
/// once for a kept model, as [`DeviceChain`].
pub(super) struct DeviceLogChain {
    start: CudaSlice<f64>,
    trans: CudaSlice<f64>,
}

/// `n` values of a kept model's form on the device, copied there for a
/// call that owns its tables (2 x 2 MB at 512 states: microseconds, where
/// the copy from the host took a tenth of a forward pass).
fn owned(dev: &Device, kept: &CudaSlice<f64>, n: usize) -> Result<CudaSlice<f64>> {
    let e = err(dev, "copying a kept model's tables");
    // SAFETY: written by the copy below before any kernel reads it.
    let mut out = unsafe { dev.stream.alloc::<f64>(n) }.map_err(&e)?;
    dev.stream.memcpy_dtod(kept, &mut out).map_err(&e)?;
    Ok(out)
}

impl DensityTables {
    /// The tables of `model` over `count` sequences of `total` positions,
    /// their start and transitions on the way to the device (or copied
    /// there from a kept model's, [`DeviceChain`]) and their summary: the
    /// rows and shifts follow ([`DeviceDensity::refresh`]). A call makes
    /// these first, so that the transitions (2 MB at N = 512, the largest
    /// copy of a forward pass) cross the bus while the host prepares the
    /// observations. Without `rows` (a forward pass whose kernel computes
    /// each row where it uses it: [`rows_computed`]) the table of rows is
    /// left out.
    pub(super) fn new<E: Emission>(dev: &Device, model: &HmmModel<E>, count: usize, total: usize, rows: bool) -> Result<(Self, ChainSummary)> {
        let n = model.n_states;
        let s = &dev.stream;
        let e = err(dev, "allocating the emission rows");
        let emis = if rows { alloc_rows(dev, n, total)? } else { s.alloc_zeros::<f64>(1).map_err(&e)? };
        let zeros = |k: usize| s.alloc_zeros::<f64>(k).map_err(&e);
        let t0 = std::time::Instant::now();
        let (start, trans, trans_t, summary) = match kept_form(model, dev.info.ordinal, || DeviceChain::new(dev, model))? {
            KeptForm::Made(c) => (c.start, c.trans, c.trans_t, c.summary),
            kept => (owned(dev, &kept.start, n)?, owned(dev, &kept.trans, n * n)?, owned(dev, &kept.trans_t, n * n)?, kept.summary),
        };
        crate::gpu::timing::record("chain upload and summary", t0);
        // SAFETY: mins is written by hmm_density_keys before any kernel
        // reads it.
        let mins = unsafe { s.alloc::<u64>(2) }.map_err(&e)?;
        let dt = DensityTables {
            tables: DeviceTables { start, trans, trans_t, emis, mins },
            rows,
            shift_d: zeros(total)?,
            rowmin_d: zeros(total)?,
            sums: zeros(3 * count)?,
            count,
            first_uncertain: false,
        };
        Ok((dt, summary))
    }

    /// Copy the start and transition probabilities of `model` (and the
    /// transpose) into the tables.
    pub(super) fn upload_chain<E: Emission>(&mut self, dev: &Device, model: &HmmModel<E>) -> Result<()> {
        let t = &mut self.tables;
        upload_chain_into(dev, model, &mut t.start, &mut t.trans, &mut t.trans_t)
    }

    /// Per sequence, the sum of its shifts (added to its log-likelihood)
    /// and whether the kernels' result is uncertain; read from the device
    /// after the pass that used the tables.
    pub(super) fn shifts(&self, dev: &Device) -> Result<(Vec<f64>, Vec<bool>)> {
        let count = self.count;
        let sums = dev.stream.clone_dtoh(&self.sums).map_err(err(dev, "reading the shifts"))?;
        let first = &sums[2 * count..3 * count];
        let uncertain = first.iter().map(|&c| self.first_uncertain && !(c >= DENSE_MIN)).collect();
        Ok((sums[..count].to_vec(), uncertain))
    }
}

impl DeviceDensity {
    /// Upload the observations (`values`, flat; `tested`, the same memory
    /// as the emission's observations) and the parameters of `e`. Each
    /// observation is tested by [`Emission::obs_ok`] on its way (a GPU
    /// call's values are checked here, not before: `hmm::check`); when one
    /// fails, nothing more is copied and the error is validation's of the
    /// call's sequences `all`.
    pub(super) fn new<E: Emission>(dev: &Device, e: &E, values: &[f64], tested: &[E::Obs], all: &Sequences<E::Obs>) -> Result<Self> {
        Self::uploaded(dev, e, values, tested, all, None)
    }

    /// [`DeviceDensity::new`], with the rows (where `dt` keeps them), shifts
    /// and row minima of `dt` (N states) computed as the observations
    /// arrive: each piece's on the device's second stream once its copy is
    /// done, so that the rows of the first pieces are computed while the
    /// later ones cross the bus (at N = 32, 1.5 ms of rows beside the 1.8
    /// ms upload of 80 MB on an H200). [`DeviceDensity::certify`] then does
    /// the rest of [`DeviceDensity::refresh`].
    pub(super) fn with_rows<E: Emission>(dev: &Device, e: &E, values: &[f64], tested: &[E::Obs], all: &Sequences<E::Obs>, n: usize, dt: &mut DensityTables) -> Result<Self> {
        Self::uploaded(dev, e, values, tested, all, Some((n, dt)))
    }

    fn uploaded<E: Emission>(dev: &Device, e: &E, values: &[f64], tested: &[E::Obs], all: &Sequences<E::Obs>, fill: Option<(usize, &mut DensityTables)>) -> Result<Self> {
        let s = &dev.stream;
        let er = err(dev, "copying the observations");
        let mut density = DeviceDensity {
            name: E::NAME,
            prelude: E::cuda(),
            stats: e.n_stats(),
            // Padded as the symbols are (the warp kernels read ahead).
            obs: s.alloc_zeros::<f64>(values.len() + SYM_PAD).map_err(&er)?,
            // Before the observations, which the rows' kernels may read as
            // they arrive; through the staging buffer, as every copy of a
            // call: a copy from pageable memory waits for the work queued
            // before it (the transitions' copy, DensityTables::new).
            ep: RefCell::new(dev.upload_new(&e.device_params()[..])?),
        };
        let shape = e.shape();
        let ok = |o| E::obs_ok(&shape, o);
        let uploaded = match fill {
            None => dev.upload_tested(values, tested, ok, &mut density.obs.slice_mut(0..values.len()))?,
            Some((n, dt)) => {
                let f = density.function(dev, rows_kernel(n, dt.rows).0)?;
                let (obs, ep) = (density.obs.device_ptr(s).0, density.ep.borrow().device_ptr(s).0);
                let out = RowsOut::of(dev, dt);
                let aside = &dev.aside;
                let mut piece = |range: Range<usize>| -> Result<()> {
                    let copied = s.record_event(Some(NO_TIMING)).map_err(err(dev, "ordering the rows after their copy"))?;
                    aside.wait(&copied).map_err(err(dev, "ordering the rows after their copy"))?;
                    // SAFETY: obs holds the call's values (their copy
                    // queued before the event `aside` waits for), ep the
                    // emission's parameters, out the tables of all of them
                    // (allocated on `s` before that event).
                    unsafe { launch_rows(dev, aside, &f, n, range, obs, ep, out) }
                };
                let uploaded = dev.upload_tested_then(values, tested, ok, &mut density.obs.slice_mut(0..values.len()), &mut piece);
                // Whatever happened, nothing on `s` (a later kernel, or
                // the freeing of these tables) runs before the rows do.
                let done = aside.record_event(Some(NO_TIMING)).and_then(|ev| s.wait(&ev)).map_err(err(dev, "ordering the rows before the pass"));
                let uploaded = uploaded?;
                done?;
                uploaded
            }
        };
        if !uploaded {
            super::super::validate::<E>(&shape, all)?;
            return Err(Error::Internal("an observation failed its test on the way to the device but not in validation".into()));
        }
        Ok(density)
    }

    /// The sequences with offsets `seqs.offsets` as positions on the
    /// device: symbol p at position p (padding 0), filled there.
    pub(super) fn positions(&self, dev: &Device, seqs: &Sequences) -> Result<DeviceSeqs> {
        let s = &dev.stream;
        let e = err(dev, "copying sequences");
        let total = seqs.total();
        let mut sym = s.alloc_zeros::<u32>(total + SYM_PAD).map_err(&e)?;
        let f = self.function(dev, Kernel::HmmPositions)?;
        let cfg = LaunchConfig { grid_dim: (total.div_ceil(256).clamp(1, dev.multiprocessors as usize * 32) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let total_i = total as i64;
        let mut launch = s.launch_builder(&f);
        launch.arg(&total_i).arg(&mut sym);
        // SAFETY: sym holds total + SYM_PAD entries; the kernel writes the
        // first `total`.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_positions"))?;
        Ok(DeviceSeqs { sym, off: upload_offsets(dev, seqs)? })
    }

    /// The sequences with offsets `seqs.offsets` for kernels that read the
    /// observations, not positions ([`rows_computed`]: no table of rows);
    /// `sym` is one zero, unread.
    pub(super) fn offsets(&self, dev: &Device, seqs: &Sequences) -> Result<DeviceSeqs> {
        let sym = dev.stream.alloc_zeros::<u32>(1).map_err(err(dev, "copying sequences"))?;
        Ok(DeviceSeqs { sym, off: upload_offsets(dev, seqs)? })
    }

    /// Replace the parameters by those of `e` (after an M-step).
    pub(super) fn set_params<E: Emission>(&self, dev: &Device, e: &E) -> Result<()> {
        dev.upload(&e.device_params()[..], &mut self.ep.borrow_mut().slice_mut(..))
    }

    /// `kernel` compiled with this emission's block (and HMM_DENSITY for
    /// hmm.cu's).
    pub(super) fn function(&self, dev: &Device, kernel: Kernel) -> Result<CudaFunction> {
        let defines: &[(&str, i64)] = if kernel.location().0 == "hmm" { &[("HMM_DENSITY", 1)] } else { &[] };
        dev.function_with(kernel, Some((self.name, &self.prelude)), defines)
    }

    /// `kernel` (of hmm.cu or hmm_scan.cu) compiled with this emission
    /// (HMM_DENSITY) and `defines`: the number of states of the kernels
    /// compiled for one N (HMM_TN, SCAN_N).
    pub(super) fn function_defining(&self, dev: &Device, kernel: Kernel, defines: &[(&str, i64)]) -> Result<CudaFunction> {
        let all: Vec<(&str, i64)> = std::iter::once(("HMM_DENSITY", 1)).chain(defines.iter().copied()).collect();
        dev.function_with(kernel, Some((self.name, &self.prelude)), &all)
    }

    /// Fill `rows` (N values per position) with the rows of all `total`
    /// positions: linear (`extra`: every position's shift and row minimum;
    /// `rows` None: those alone) or log (`extra` None).
    fn fill_rows(&self, dev: &Device, n: usize, total: usize, rows: Option<&mut CudaSlice<f64>>, extra: Option<(&mut CudaSlice<f64>, &mut CudaSlice<f64>)>) -> Result<()> {
        let s = &dev.stream;
        let f = self.function(dev, rows_kernel(n, rows.is_some()).0)?;
        let addr = |x: &mut CudaSlice<f64>| x.device_ptr_mut(s).0;
        let (shift, rowmin) = extra.map_or((0, 0), |(a, b)| (addr(a), addr(b)));
        let out = RowsOut { rows: rows.map_or(0, addr), shift, rowmin };
        let (obs, ep) = (self.obs.device_ptr(s).0, self.ep.borrow().device_ptr(s).0);
        // SAFETY: obs holds `total` values, ep the emission's parameters,
        // rows total x N doubles, shift and rowmin `total` each.
        unsafe { launch_rows(dev, s, &f, n, 0..total, obs, ep, out) }
    }

    /// Per sequence, into `dt.sums`: the sum of its shifts, its smallest row
    /// minimum and its first step's scale (from its first row, or its first
    /// observation when `dt` has no rows).
    fn fill_shifts(&self, dev: &Device, n: usize, off: &CudaSlice<i64>, count: usize, dt: &mut DensityTables) -> Result<()> {
        let f = self.function(dev, Kernel::HmmSequenceShifts)?;
        // A block per sequence: a warp for short sequences, more threads
        // for long ones (a warp per 2,048 positions, at most 1,024).
        let per_seq = dt.shift_d.len() / count.max(1);
        let threads = (32 * per_seq.div_ceil(2048)).clamp(32, 1024) as u32;
        let cfg = LaunchConfig { grid_dim: (count.clamp(1, 1 << 20) as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let (n_i, s0, s1) = (n as i32, 0i32, count as i32);
        let (mut a, mut bc) = dt.sums.split_at_mut(count);
        let (mut b, mut c) = bc.split_at_mut(count);
        let null: u64 = 0;
        let ep = self.ep.borrow();
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(off).arg(&s0).arg(&s1).arg(&dt.shift_d).arg(&dt.rowmin_d).arg(&dt.tables.start);
        if dt.rows {
            launch.arg(&dt.tables.emis);
        } else {
            assert!(n <= WARP_MAX_STATES, "a first row computed by one warp");
            launch.arg(&null);
        }
        launch.arg(&mut a).arg(&mut b).arg(&mut c).arg(&self.obs).arg(&*ep);
        // SAFETY: the arguments match hmm_sequence_shifts's parameters;
        // off holds count + 1 offsets into shift, rowmin, obs and the rows
        // (N values per position; or null, N <= 32: the first row computed
        // from obs and ep, the emission's parameters for N states), start N
        // values, the outputs `count` doubles each.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_sequence_shifts"))?;
        Ok(())
    }

    /// The linear tables of `model` (whose emission this is) over the
    /// sequences with offsets `off` (`count` of them, `total` positions);
    /// see [`DeviceDensity::refresh`].
    pub(super) fn tables<E: Emission>(&self, dev: &Device, model: &HmmModel<E>, off: &CudaSlice<i64>, count: usize, total: usize, counting: bool) -> Result<DensityTables> {
        let (mut dt, chain) = DensityTables::new(dev, model, count, total, true)?;
        let t0 = std::time::Instant::now();
        self.refresh(dev, model.n_states, &mut dt, chain, off, count, total, counting)?;
        crate::gpu::timing::record("rows and shifts", t0);
        Ok(dt)
    }

    /// Recompute `dt` (whose start and transitions are current, `chain`
    /// their summary) for the emission's current parameters: the rows, the
    /// shifts and the certificate, all on the device (the host reads the
    /// shifts after the pass: [`DensityTables::shifts`]).
    ///
    /// The kernels apply the CPU's certificate through their theta test
    /// (hmm_theta: 2^-960 / (a e)). Dense transitions: never after the
    /// first step (a e = 2^1000 makes theta 0), and a sequence whose first
    /// scale is below DENSE_MIN is marked uncertain; with `counting`
    /// (a fit's E-step, whose device counts cannot leave one sequence out)
    /// such a sequence makes every sequence take the sparse test instead.
    /// Sparse transitions: a = the smallest positive start or transition
    /// probability, e = the smallest value of a positive density in any
    /// row (0 after an underflow: every sequence goes to the CPU). The keys
    /// are chosen by hmm_density_keys.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn refresh(&self, dev: &Device, n: usize, dt: &mut DensityTables, chain: ChainSummary, off: &CudaSlice<i64>, count: usize, total: usize, counting: bool) -> Result<()> {
        self.fill_linear_rows(dev, n, total, dt)?;
        self.certify(dev, n, dt, chain, off, count, counting)
    }

    /// [`DeviceDensity::refresh`] after the rows, shifts and row minima
    /// (made by [`DeviceDensity::with_rows`]): the shifts' sums and the
    /// certificate.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn certify(&self, dev: &Device, n: usize, dt: &mut DensityTables, chain: ChainSummary, off: &CudaSlice<i64>, count: usize, counting: bool) -> Result<()> {
        self.fill_shifts(dev, n, off, count, dt)?;
        let f = self.function(dev, Kernel::HmmDensityKeys)?;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
        let big = f64::from_bits((1023 + 500) << 52);
        let (count_i, dense_i, counting_i) = (count as i32, chain.dense as i32, counting as i32);
        let (_, rest) = dt.sums.split_at(count);
        let (min_all, first) = rest.split_at(count);
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&count_i).arg(&dense_i).arg(&counting_i).arg(&DENSE_MIN).arg(&big).arg(&chain.min_positive).arg(&min_all).arg(&first).arg(&mut dt.tables.mins);
        // SAFETY: the arguments match hmm_density_keys's parameters in
        // order and type; min_all and first hold `count` doubles each,
        // mins two keys; one block of whole warps.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_density_keys"))?;
        dt.count = count;
        dt.first_uncertain = chain.dense && !counting;
        Ok(())
    }

    /// The rows (where `dt` keeps them) and shifts of `dt` again (the model
    /// and certificate as they are): what a pass over the observations
    /// computes first ([`DeviceDensity::refresh`], and the benchmark's
    /// device-resident timing).
    pub(super) fn recompute_rows(&self, dev: &Device, n: usize, dt: &mut DensityTables, off: &CudaSlice<i64>, count: usize, total: usize) -> Result<()> {
        self.fill_linear_rows(dev, n, total, dt)?;
        self.fill_shifts(dev, n, off, count, dt)
    }

    /// `dt`'s rows (where it keeps them), shifts and row minima.
    fn fill_linear_rows(&self, dev: &Device, n: usize, total: usize, dt: &mut DensityTables) -> Result<()> {
        let rows = if dt.rows { Some(&mut dt.tables.emis) } else { None };
        self.fill_rows(dev, n, total, rows, Some((&mut dt.shift_d, &mut dt.rowmin_d)))
    }

    /// Log rows of all `total` positions into `rows` (for Viterbi).
    pub(super) fn recompute_log_rows(&self, dev: &Device, n: usize, total: usize, rows: &mut CudaSlice<f64>) -> Result<()> {
        self.fill_rows(dev, n, total, Some(rows), None)
    }

    /// The log tables of `model` with rows of log densities at every
    /// position, for any N (the scan's Viterbi reads them).
    pub(super) fn log_rows<E: Emission>(&self, dev: &Device, model: &HmmModel<E>, total: usize) -> Result<DeviceLogTables> {
        let mut rows = alloc_rows(dev, model.n_states, total)?;
        self.fill_rows(dev, model.n_states, total, Some(&mut rows), None)?;
        log_model(dev, model, rows)
    }

    /// The log tables of `model` for Viterbi: rows of log densities, none
    /// for N <= 32 (the warp kernel computes them).
    pub(super) fn log_tables<E: Emission>(&self, dev: &Device, model: &HmmModel<E>, total: usize) -> Result<DeviceLogTables> {
        let n = model.n_states;
        let rows = if n > WARP_MAX_STATES {
            let mut rows = alloc_rows(dev, n, total)?;
            self.fill_rows(dev, n, total, Some(&mut rows), None)?;
            rows
        } else {
            dev.stream.alloc_zeros::<f64>(1).map_err(err(dev, "allocating the emission rows"))?
        };
        log_model(dev, model, rows)
    }

    /// Add the emission statistics and start counts of batch `range` (large
    /// N, from its posteriors `gamma`) to `counts` (N + N*N + S*N).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn count_stats(&self, dev: &Device, n: usize, seqs: &DeviceSeqs, range: &Range<usize>, loglik: &CudaSlice<f64>, gamma: &CudaSlice<f64>, counts: &mut CudaSlice<f64>) -> Result<()> {
        let f = self.function(dev, Kernel::HmmCountStats)?;
        // HMM_STATS_THREADS threads per block.
        let threads = 256u32;
        let cfg = LaunchConfig { grid_dim: (self.stats as u32 + 1, n.div_ceil(threads as usize) as u32, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let (n_i, s0, s1) = (n as i32, range.start as i32, range.end as i32);
        let ep = self.ep.borrow();
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&seqs.off).arg(&s0).arg(&s1).arg(loglik).arg(gamma).arg(&self.obs).arg(&*ep).arg(counts);
        // SAFETY: the arguments match hmm_count_stats's parameters in order
        // and type; gamma holds N doubles per position of the batch, loglik
        // one per sequence, obs one value per position (global), counts
        // N + N*N + S*N doubles.
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_count_stats"))?;
        Ok(())
    }
}

/// The log tables of `model` with the emission rows `emis`: the logs of
/// its start and transition probabilities are taken here, as the CPU takes
/// them, on all threads and sent through the pinned staging buffer (one
/// thread and a plain copy: Gaussian Viterbi at N = 1,024, M = 64, T = 256
/// took 13.8 ms from host on an H200, now 7.9, of which 5.9 on the device).
fn log_model<E: Emission>(dev: &Device, model: &HmmModel<E>, emis: CudaSlice<f64>) -> Result<DeviceLogTables> {
    use rayon::prelude::*;
    let n = model.n_states;
    let make = || {
        let ln = |x: &[f64]| x.par_iter().with_min_len(1 << 14).map(|p| p.ln()).collect::<Vec<f64>>();
        Ok(DeviceLogChain { start: dev.upload_new(&ln(&model.start))?, trans: dev.upload_new(&ln(&model.trans))? })
    };
    Ok(match kept_form(model, dev.info.ordinal, make)? {
        KeptForm::Made(c) => DeviceLogTables { start: c.start, trans: c.trans, emis },
        kept => DeviceLogTables { start: owned(dev, &kept.start, n)?, trans: owned(dev, &kept.trans, n * n)?, emis },
    })
}

/// A table of `total` x N rows, refused (for the CPU) when it does not
/// fit in the free device memory.
fn alloc_rows(dev: &Device, n: usize, total: usize) -> Result<CudaSlice<f64>> {
    let need = (total * n + 2 * total) * 8;
    if need > dev.memory_share(1.0, need)? {
        return Err(Error::BackendUnavailable(format!("the emission rows of {total} observations x {n} states do not fit in the GPU's free memory; use the CPU")));
    }
    // SAFETY: every caller fills the table (fill_rows writes all total x N
    // entries) before a kernel reads it. Not zeroed: at N = 32 and 10^7
    // positions that was a 2.56 GB memset.
    unsafe { dev.stream.alloc::<f64>(total * n) }.map_err(err(dev, "allocating the emission rows"))
}

/// `seqs`' offsets on the device, as the kernels take them (i64).
pub(super) fn upload_offsets<O: Copy>(dev: &Device, seqs: &Sequences<O>) -> Result<CudaSlice<i64>> {
    let off: Vec<i64> = seqs.offsets.iter().map(|&o| o as i64).collect();
    dev.upload_new(&off)
}

/// Events that order two streams, never timed.
const NO_TIMING: cudarc::driver::sys::CUevent_flags = cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;

/// Device addresses a pass over a density's positions writes: the whole
/// table of rows (0: none kept) and the shifts and row minima (0: log
/// rows, which have none), from position 0.
#[derive(Clone, Copy)]
struct RowsOut {
    rows: u64,
    shift: u64,
    rowmin: u64,
}

impl RowsOut {
    fn of(dev: &Device, dt: &mut DensityTables) -> Self {
        let s = &dev.stream;
        let rows = if dt.rows { dt.tables.emis.device_ptr_mut(s).0 } else { 0 };
        RowsOut { rows, shift: dt.shift_d.device_ptr_mut(s).0, rowmin: dt.rowmin_d.device_ptr_mut(s).0 }
    }
}

/// The kernel that computes the rows of N states (into a table or not:
/// `rows`), its threads per block, positions per block and shared bytes.
/// A thread per position up to 32 states (its rows through a shared tile),
/// else a warp (the same values).
fn rows_kernel(n: usize, rows: bool) -> (Kernel, u32, u32, u32) {
    if n <= WARP_MAX_STATES {
        let kernel = if thread_path(n) { Kernel::HmmEmissionRowsThread } else { Kernel::HmmEmissionRowsThreadWide };
        let tile = if rows { POSITION_THREADS as usize * (n | 1) * 8 } else { 0 };
        (kernel, POSITION_THREADS, POSITION_THREADS, tile as u32)
    } else {
        (Kernel::HmmEmissionRows, ROW_THREADS, ROW_THREADS / 32, 0)
    }
}

/// Launch `f`, the [`rows_kernel`] of N states, on `stream` over the
/// positions `range`: observations from device address `obs`, the
/// emission's parameters at `ep`, into `out` (linear rows when it has
/// shifts, else log rows).
///
/// # Safety
/// `obs` holds the values of every position in `range` and `ep` the
/// emission's parameters of N states; `out`'s tables hold every position
/// in `range` (N doubles each for rows); all are ordered on `stream`
/// before this launch.
#[allow(clippy::too_many_arguments)]
unsafe fn launch_rows(dev: &Device, stream: &CudaStream, f: &CudaFunction, n: usize, range: Range<usize>, obs: u64, ep: u64, out: RowsOut) -> Result<()> {
    let (_, threads, per_block, shared) = rows_kernel(n, out.rows != 0);
    let count = range.len();
    if count == 0 {
        return Ok(());
    }
    let blocks = count.div_ceil(per_block as usize);
    let cfg = LaunchConfig { grid_dim: (blocks.min(dev.multiprocessors as usize * 64) as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: shared };
    // Each address from the range's first position (0 stays null).
    let from = |base: u64, width: usize| if base == 0 { 0 } else { base + (range.start * width * 8) as u64 };
    let (obs, rows, shift, rowmin) = (from(obs, 1), from(out.rows, n), from(out.shift, 1), from(out.rowmin, 1));
    let (n_i, count_i, log_i) = (n as i32, count as i64, (out.shift == 0) as i32);
    let mut launch = stream.launch_builder(f);
    launch.arg(&n_i).arg(&count_i).arg(&obs).arg(&ep).arg(&log_i).arg(&rows).arg(&shift).arg(&rowmin);
    // SAFETY: the arguments match hmm_emission_rows's parameters (and
    // hmm_emission_rows_thread(_wide)'s, the same) in order and type, the
    // addresses as the caller promises; the thread kernels' tile is
    // `shared` bytes, block x (N | 1) doubles.
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_emission_rows"))?;
    Ok(())
}
