//! Few long sequences, parallel in time (kernels/hmm_scan.cu): the scan of
//! [`crate::hmm::scan`] on the device, for categorical emissions and up to
//! 32 states. A call takes it when its sequences are too few to fill the
//! device one warp each and long enough to cut into chunks ([`chosen`]);
//! a sequence the scan cannot certify comes back NaN and the host computes
//! it sequentially, as for the other kernels.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use crate::error::Result;
use crate::exec::Exec;
use crate::gpu::{self, Device, Kernel};

use super::super::backward::Counts;
use super::super::cpu;
use super::super::emission::Emission;
use super::super::layout::PosteriorOut;
use super::super::model::HmmModel;
use super::super::scan::{self, Chunks};
use super::super::sequences::Sequences;
use super::super::tables::{self, Tables};
use super::memory::{upload, upload_log_tables, upload_tables_with, DeviceLogTables, DeviceSeqs, DeviceTables};
use super::rows::DeviceDensity;
use super::passes::prefault_out;
use super::{device, err, settle_logliks, settle_posteriors, MEMORY_SHARE};

/// Most states the scan kernels handle (a warp's lanes).
pub const SCAN_MAX_STATES: usize = 32;
/// Threads per block of the product kernels.
const PRODUCT_THREADS: u32 = 128;

/// Whether a call over `seqs` with `model` runs parallel in time: at most
/// 32 states, dense transitions (the scan's exactness), fewer sequences
/// than multiprocessors (one warp each would leave the device idle), a
/// sequence of at least [`scan::MIN_STEPS`], and the per-step output
/// (`bytes_per_step`) within the device's memory share.
pub(super) fn chosen<E: Emission>(dev: &Device, model: &HmmModel<E>, seqs: &Sequences<E::Obs>, bytes_per_step: usize) -> Result<bool> {
    let longest = seqs.lengths().max().unwrap_or(0);
    if model.n_states > SCAN_MAX_STATES || seqs.len() > dev.multiprocessors as usize || longest < scan::MIN_STEPS || !scan::usable(&model.trans) {
        return Ok(false);
    }
    let need = seqs.total().saturating_mul(bytes_per_step + 4);
    Ok(need <= dev.memory_share(MEMORY_SHARE, need)?)
}

/// Whether a fit over `seqs` (N states, V emission counts per state) runs
/// its E-steps by the scan: [`chosen`]'s shape tests, before any model
/// exists (each E-step then checks its model's transitions), with
/// `bytes_per_step` of device memory per observation besides the slots.
pub(super) fn fits<O: Copy>(dev: &Device, n: usize, v: usize, seqs: &Sequences<O>, bytes_per_step: usize) -> Result<bool> {
    let longest = seqs.lengths().max().unwrap_or(0);
    if n > SCAN_MAX_STATES || seqs.len() > dev.multiprocessors as usize || longest < scan::MIN_STEPS {
        return Ok(false);
    }
    let need = (seqs.total() as f64 * (bytes_per_step + 4) as f64 + slot_bytes(seqs, n, v)).min(usize::MAX as f64) as usize;
    Ok(need <= dev.memory_share(MEMORY_SHARE, need)?)
}

/// Device bytes per observation of a density's scanned E-step: the
/// observation, its linear row and shift and row minimum, its posterior
/// row.
pub(super) fn density_bytes_per_step(n: usize) -> usize {
    16 * n + 24
}

/// Bytes of a Baum-Welch E-step's count slots (one per chunk).
pub(super) fn slot_bytes<O: Copy>(seqs: &Sequences<O>, n: usize, v: usize) -> f64 {
    let chunks: usize = seqs.lengths().map(|t| Chunks::for_device(t, n).count()).sum();
    chunks as f64 * Counts::size(n, v) as f64 * 8.0
}

/// The chunks of a call on the device: per chunk its steps [cb, ce)
/// (absolute positions) and sequence, per sequence its first chunk.
struct Plan {
    cb: CudaSlice<i64>,
    ce: CudaSlice<i64>,
    chunk_seq: CudaSlice<i32>,
    co: CudaSlice<i32>,
    chunks: usize,
    longest_chunk: usize,
    /// Each chunk's sequence, and the call's symbols.
    seq_of: Vec<usize>,
    symbols: usize,
}

fn plan<O: Copy>(dev: &Device, seqs: &Sequences<O>, n: usize, len: Option<usize>) -> Result<Plan> {
    let (mut cb, mut ce, mut cs, mut co) = (Vec::new(), Vec::new(), Vec::new(), vec![0i32]);
    let mut longest_chunk = 1;
    for s in 0..seqs.len() {
        let t = seqs.offsets[s + 1] - seqs.offsets[s];
        // A chunk's Viterbi back-pointers (steps x N bytes) stay within
        // 32 KB of shared memory, whatever the length asked for.
        let ch = match len {
            Some(l) => Chunks::with_len(t, l.min((32_768 / n.max(1)).max(1))),
            None => Chunks::for_device(t, n),
        };
        longest_chunk = longest_chunk.max(ch.len);
        for c in 0..ch.count() {
            let r = ch.range(c);
            cb.push((seqs.offsets[s] + r.start) as i64);
            ce.push((seqs.offsets[s] + r.end) as i64);
            cs.push(s as i32);
        }
        co.push(cb.len() as i32);
    }
    let seq_of = cs.iter().map(|&s| s as usize).collect();
    Ok(Plan { chunks: cb.len(), longest_chunk, seq_of, symbols: seqs.total(), cb: dev.upload_new(&cb)?, ce: dev.upload_new(&ce)?, chunk_seq: dev.upload_new(&cs)?, co: dev.upload_new(&co)? })
}

/// Everything a pass needs on the device.
struct Call<'a> {
    dev: &'a Device,
    n: usize,
    m: usize,
    seqs: DeviceSeqs,
    plan: Plan,
}

impl<'a> Call<'a> {
    fn new(model: &HmmModel, seqs: &Sequences, len: Option<usize>) -> Result<Self> {
        let dev = device()?;
        let t0 = std::time::Instant::now();
        let d_seqs = upload(dev, seqs, &seqs.symbols, model.emission.n_symbols)?;
        let plan = plan(dev, seqs, model.n_states, len)?;
        gpu::timing::record("upload", t0);
        Ok(Call { dev, n: model.n_states, m: seqs.len(), seqs: d_seqs, plan })
    }

    /// A density emission's call: its observations on the device, and the
    /// positions as symbols (position p reads row p of its rows).
    fn density<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], len: Option<usize>) -> Result<(Self, DeviceDensity)> {
        let dev = device()?;
        let t0 = std::time::Instant::now();
        let density = DeviceDensity::new(dev, &model.emission, values, &seqs.symbols, seqs)?;
        let pos = Sequences { symbols: Vec::new(), offsets: seqs.offsets.clone() };
        let d_seqs = density.positions(dev, &pos)?;
        let plan = plan(dev, seqs, model.n_states, len)?;
        gpu::timing::record("upload", t0);
        Ok((Call { dev, n: model.n_states, m: seqs.len(), seqs: d_seqs, plan }, density))
    }

    fn defines(&self) -> [(&'static str, i64); 1] {
        [("SCAN_N", self.n as i64)]
    }

    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        self.dev.stream.alloc_zeros::<T>(len.max(1)).map_err(err(self.dev, "allocating the scan's buffers"))
    }

    /// One thread per chunk row.
    fn product_cfg(&self) -> LaunchConfig {
        let rows = (self.plan.chunks * self.n) as u32;
        LaunchConfig { grid_dim: (rows.div_ceil(PRODUCT_THREADS).max(1), 1, 1), block_dim: (PRODUCT_THREADS, 1, 1), shared_mem_bytes: 0 }
    }

    /// One warp per block, `blocks` blocks.
    fn warps(blocks: usize, smem: usize) -> LaunchConfig {
        LaunchConfig { grid_dim: (blocks.max(1) as u32, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: smem as u32 }
    }

    /// The sum-product passes: products, boundaries (backward ones with
    /// `backward`), log-likelihoods. Returns (fwd, bwd, loglik).
    #[allow(clippy::type_complexity)]
    fn bounds(&self, tabs: &DeviceTables, backward: bool) -> Result<(CudaSlice<f64>, Option<CudaSlice<f64>>, CudaSlice<f64>)> {
        let (dev, n, p) = (self.dev, self.n, &self.plan);
        let s = &dev.stream;
        let mut r = self.zeros::<f64>(p.chunks * n * n)?;
        let mut l = self.zeros::<f64>(p.chunks * n)?;
        let mut bad = self.zeros::<i32>(self.m)?;
        let c = p.chunks as i32;
        let f = dev.function(Kernel::HmmScanProducts, &self.defines())?;
        let mut launch = s.launch_builder(&f);
        launch.arg(&tabs.trans).arg(&tabs.emis).arg(&self.seqs.sym).arg(&p.cb).arg(&p.ce).arg(&p.chunk_seq).arg(&c).arg(&mut r).arg(&mut l).arg(&mut bad);
        // SAFETY: the arguments match hmm_scan_products in order and type;
        // trans holds N*N doubles, emis V*N, the symbols are < V and cb, ce
        // index them; R, L hold N*N and N doubles per chunk, bad one int per
        // sequence (chunk_seq < M).
        unsafe { launch.launch(self.product_cfg()) }.map_err(err(dev, "launching hmm_scan_products"))?;
        let mut fwd = self.zeros::<f64>((p.chunks + self.m) * n)?;
        let mut bwd = if backward { Some(self.zeros::<f64>(p.chunks * n)?) } else { None };
        let mut ll = self.zeros::<f64>(self.m)?;
        let m = self.m as i32;
        let null: u64 = 0;
        let f = dev.function(Kernel::HmmScanBounds, &self.defines())?;
        let mut launch = s.launch_builder(&f);
        launch.arg(&tabs.start).arg(&tabs.emis).arg(&self.seqs.sym).arg(&self.seqs.off).arg(&p.co).arg(&m).arg(&r).arg(&l).arg(&bad).arg(&mut fwd);
        match bwd.as_mut() {
            Some(b) => launch.arg(b),
            None => launch.arg(&null),
        };
        launch.arg(&mut ll);
        // SAFETY: the arguments match hmm_scan_bounds; co has M + 1 entries
        // indexing the chunks; fwd holds (chunks + M) x N doubles, bwd (or
        // null) chunks x N, loglik M.
        unsafe { launch.launch(Self::warps(self.m, 0)) }.map_err(err(dev, "launching hmm_scan_bounds"))?;
        Ok((fwd, bwd, ll))
    }

    /// Products, boundaries and hmm_scan_posterior: (posteriors on the
    /// device, log-likelihoods, each chunk's count slot with `counts`: V
    /// emission counts per state by symbol, or with `density` its
    /// statistics).
    #[allow(clippy::type_complexity)]
    fn forward_backward(&self, tabs: &DeviceTables, counts: Option<usize>, density: Option<&DeviceDensity>) -> Result<(CudaSlice<f64>, CudaSlice<f64>, Option<CudaSlice<f64>>)> {
        let (dev, n, p) = (self.dev, self.n, &self.plan);
        let (fwd, bwd, mut ll) = self.bounds(tabs, true)?;
        let bwd = bwd.ok_or_else(|| crate::error::Error::Internal("the scan's backward boundaries are missing".into()))?;
        let s = &dev.stream;
        let total = self.plan.symbols;
        // SAFETY: uninitialised on purpose; hmm_scan_posterior writes every
        // row of every sequence it does not leave NaN (uncertain), and those
        // the host overwrites.
        let mut probs = unsafe { s.alloc::<f64>((total * n).max(1)) }.map_err(err(dev, "allocating the posterior probabilities"))?;
        let v = counts.unwrap_or(0);
        let mut slots = match counts {
            Some(v) => Some(self.zeros::<f64>(p.chunks * Counts::size(n, v))?),
            None => None,
        };
        let (v_i, null): (i32, u64) = (v as i32, 0);
        // A density's statistics need its block; its rows alone do not.
        let counting = density.filter(|_| counts.is_some());
        let f = match counting {
            Some(d) => d.function_defining(dev, Kernel::HmmScanPosterior, &self.defines())?,
            None => dev.function(Kernel::HmmScanPosterior, &self.defines())?,
        };
        let ep = counting.map(|d| d.ep.borrow());
        let mut launch = s.launch_builder(&f);
        launch.arg(&tabs.trans).arg(&tabs.emis).arg(&self.seqs.sym).arg(&self.seqs.off).arg(&p.cb).arg(&p.ce).arg(&p.chunk_seq).arg(&p.co).arg(&fwd).arg(&bwd).arg(&mut ll).arg(&mut probs).arg(&v_i);
        match slots.as_mut() {
            Some(c) => launch.arg(c),
            None => launch.arg(&null),
        };
        match (counting, ep.as_deref()) {
            (Some(d), Some(ep)) => launch.arg(&d.obs).arg(ep),
            _ => launch.arg(&null).arg(&null),
        };
        // SAFETY: the arguments match hmm_scan_posterior; probs holds N
        // doubles per symbol of the call, fwd and bwd as hmm_scan_bounds
        // wrote them; counts (or null) one zeroed slot of N + N*N + V*N
        // doubles per chunk; with a density's statistics, the kernel is
        // compiled with its block (V = its statistics), obs holds a value
        // per position of the call and ep its parameters for N states.
        unsafe { launch.launch(Self::warps(p.chunks, 0)) }.map_err(err(dev, "launching hmm_scan_posterior"))?;
        Ok((probs, ll, slots))
    }

    /// The scanned forward-backward pass's posteriors (on the device) and
    /// log-likelihoods, while the host's other threads touch `out`'s fresh
    /// pages (the copy back wrote 16.8 MB into them at 11.5 GB/s, page by
    /// page, for one sequence of 262,144 steps at N = 8 on an H200).
    fn posteriors(&self, tabs: &DeviceTables, out: &mut PosteriorOut<'_, '_>) -> Result<(CudaSlice<f64>, Vec<f64>)> {
        rayon::in_place_scope(|sc| {
            let fresh = &mut *out;
            sc.spawn(move |_| prefault_out(fresh));
            let (probs, ll, _) = self.forward_backward(tabs, None, None)?;
            Ok((probs, self.download(&ll, self.m)?))
        })
    }

    /// The posteriors `probs` (time-major, every sequence's from its
    /// offset) into `out`: as rows, or laid out on the device into one
    /// matrix per sequence that crosses the bus into the caller's
    /// (`Device::columns_by_sequence`), as the sequential passes do.
    fn download_posteriors(&self, probs: &CudaSlice<f64>, out: &mut PosteriorOut<'_, '_>) -> Result<()> {
        let t0 = std::time::Instant::now();
        match out {
            PosteriorOut::Rows([]) => {}
            PosteriorOut::Rows(rows) => self.dev.download(&probs.slice(..rows.len()), rows)?,
            PosteriorOut::Columns(outs, missing) => {
                // SAFETY: columns_by_sequence writes every value read.
                let mut cols = unsafe { self.dev.stream.alloc::<f64>(probs.len()) }.map_err(err(self.dev, "allocating results"))?;
                self.dev.columns_by_sequence(probs, &self.seqs.off, 0, self.m, self.n, *missing, &mut cols)?;
                self.dev.download_parts(&cols.slice(..), outs)?;
            }
        }
        gpu::timing::record("download", t0);
        Ok(())
    }

    fn download<T: Copy + Send + Sync + Default>(&self, src: &CudaSlice<T>, len: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); len];
        if len > 0 {
            self.dev.download(&src.slice(..len), &mut out)?;
        }
        Ok(out)
    }
}

/// Chunk length override (tests): None for [`Chunks::for_device`].
pub type ChunkLen = Option<usize>;

/// log P(sequence) of every sequence, parallel in time.
pub fn loglik(model: &HmmModel, seqs: &Sequences, len: ChunkLen, exec: &Exec) -> Result<Vec<f64>> {
    let call = Call::new(model, seqs, len)?;
    let t0 = std::time::Instant::now();
    let tabs = upload_tables_with(call.dev, model, tables::smallest(model))?;
    let (_, _, ll) = call.bounds(&tabs, false)?;
    let mut out = call.download(&ll, call.m)?;
    gpu::timing::record("scan", t0);
    settle_logliks(model, seqs, &mut out, exec)?;
    Ok(out)
}

/// Posterior state probabilities and log-likelihoods, parallel in time.
pub fn posterior(model: &HmmModel, seqs: &Sequences, len: ChunkLen, exec: &Exec) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut rows = crate::hmm::passes::zeroed::<f64>(seqs.total() * model.n_states, "the posterior probabilities")?;
    let lls = posterior_into(model, seqs, len, exec, PosteriorOut::Rows(&mut rows))?;
    Ok((rows, lls))
}

/// [`posterior`] into `out` (rows, or the caller's matrices); the
/// log-likelihoods.
pub(super) fn posterior_into(model: &HmmModel, seqs: &Sequences, len: ChunkLen, exec: &Exec, mut out: PosteriorOut<'_, '_>) -> Result<Vec<f64>> {
    let call = Call::new(model, seqs, len)?;
    let t0 = std::time::Instant::now();
    let tabs = upload_tables_with(call.dev, model, tables::smallest(model))?;
    let (probs, mut lls) = call.posteriors(&tabs, &mut out)?;
    gpu::timing::record("scan", t0);
    call.download_posteriors(&probs, &mut out)?;
    settle_posteriors(model, seqs, &mut out, &mut lls, exec)?;
    Ok(lls)
}

/// [`posterior_into`] for a density emission (observations `values`).
pub(crate) fn density_posterior<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec, mut out: PosteriorOut<'_, '_>) -> Result<Vec<f64>> {
    let (call, density) = Call::density(model, seqs, values, None)?;
    let t0 = std::time::Instant::now();
    let dt = density.tables(call.dev, model, &call.seqs.off, call.m, seqs.total(), false)?;
    let (probs, mut lls) = call.posteriors(&dt.tables, &mut out)?;
    gpu::timing::record("scan", t0);
    let (shifts, uncertain) = dt.shifts(call.dev)?;
    shift(&mut lls, &shifts, &uncertain);
    call.download_posteriors(&probs, &mut out)?;
    settle_posteriors(model, seqs, &mut out, &mut lls, exec)?;
    Ok(lls)
}

/// The density rows' shifts added back to finite log-likelihoods (the
/// scan's own NaN, uncertain, stays); a sequence whose first step the rows
/// cannot certify (`uncertain`, as the sequential passes judge it) is NaN.
fn shift(lls: &mut [f64], shifts: &[f64], uncertain: &[bool]) {
    for ((l, &s), &u) in lls.iter_mut().zip(shifts).zip(uncertain) {
        if u {
            *l = f64::NAN;
        } else if l.is_finite() {
            *l += s;
        }
    }
}

/// [`loglik`] for a density emission (observations `values`).
pub(crate) fn density_loglik<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec) -> Result<Vec<f64>> {
    let (call, density) = Call::density(model, seqs, values, None)?;
    let t0 = std::time::Instant::now();
    let dt = density.tables(call.dev, model, &call.seqs.off, call.m, seqs.total(), false)?;
    let (_, _, ll) = call.bounds(&dt.tables, false)?;
    let mut out = call.download(&ll, call.m)?;
    gpu::timing::record("scan", t0);
    let (shifts, uncertain) = dt.shifts(call.dev)?;
    shift(&mut out, &shifts, &uncertain);
    settle_logliks(model, seqs, &mut out, exec)?;
    Ok(out)
}

/// The Baum-Welch E-step, parallel in time: counts (transitions as exact
/// counts) summed chunk by chunk in order, the total log-likelihood and
/// the first impossible sequence; an uncertain sequence's counts come from
/// the CPU.
pub fn e_step(model: &HmmModel, seqs: &Sequences, len: ChunkLen, exec: &Exec) -> Result<(Counts, f64, Option<usize>)> {
    let call = Call::new(model, seqs, len)?;
    let (n, v) = (call.n, model.emission.n_symbols);
    let t0 = std::time::Instant::now();
    let tabs = upload_tables_with(call.dev, model, tables::smallest(model))?;
    let (_, ll, slots) = call.forward_backward(&tabs, Some(v), None)?;
    let lls = call.download(&ll, call.m)?;
    let slots = call.download(&slots.ok_or_else(|| crate::error::Error::Internal("the scan's counts are missing".into()))?, call.plan.chunks * Counts::size(n, v))?;
    gpu::timing::record("e-step", t0);
    call.settle_counts(model, seqs, &lls, &slots, v, exec)
}

/// [`e_step`] for a density emission (observations `values`): the chunks'
/// slots hold its statistics (kernels/hmm_scan.cu with its block), and a
/// sequence whose rows or scan cannot be certified is counted on the CPU.
pub(crate) fn density_e_step<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec) -> Result<(Counts, f64, Option<usize>)> {
    let (call, density) = Call::density(model, seqs, values, None)?;
    let (n, stats) = (call.n, density.stats);
    let t0 = std::time::Instant::now();
    let dt = density.tables(call.dev, model, &call.seqs.off, call.m, seqs.total(), false)?;
    let (_, ll, slots) = call.forward_backward(&dt.tables, Some(stats), Some(&density))?;
    let mut lls = call.download(&ll, call.m)?;
    let (shifts, uncertain) = dt.shifts(call.dev)?;
    shift(&mut lls, &shifts, &uncertain);
    let slots = call.download(&slots.ok_or_else(|| crate::error::Error::Internal("the scan's counts are missing".into()))?, call.plan.chunks * Counts::size(n, stats))?;
    gpu::timing::record("e-step", t0);
    call.settle_counts(model, seqs, &lls, &slots, stats, exec)
}

impl Call<'_> {
    /// The E-step's result from the scan's log-likelihoods `lls` (NaN:
    /// uncertain) and its chunks' count `slots` (`v` emission statistics
    /// per state): the slots of finite sequences summed in chunk order,
    /// the uncertain sequences counted on the CPU; (counts, total
    /// log-likelihood, first impossible sequence).
    fn settle_counts<E: Emission>(&self, model: &HmmModel<E>, seqs: &Sequences<E::Obs>, lls: &[f64], slots: &[f64], v: usize, exec: &Exec) -> Result<(Counts, f64, Option<usize>)> {
        let n = self.n;
        let mut total = Counts::zeros(n, v)?;
        total.exact_transitions();
        let (mut sum, mut impossible, mut uncertain) = (0.0, None, Vec::new());
        for (s, &l) in lls.iter().enumerate() {
            if l.is_nan() {
                uncertain.push(s);
                continue;
            }
            if l == f64::NEG_INFINITY {
                impossible.get_or_insert(s);
            }
            sum += l;
        }
        for (c, slot) in slots.chunks(Counts::size(n, v)).enumerate() {
            if lls[self.plan.seq_of[c]].is_finite() {
                add_slot(&mut total, slot, n);
            }
        }
        if !uncertain.is_empty() {
            let tab = Tables::new(model)?;
            let (counts, ls) = cpu::counts_of(&tab, seqs, &uncertain, cpu::fit_segment(n, seqs, exec), exec)?;
            total.add(&counts);
            for (&s, l) in uncertain.iter().zip(ls) {
                if l == f64::NEG_INFINITY {
                    impossible = Some(impossible.map_or(s, |i: usize| i.min(s)));
                }
                sum += l;
            }
        }
        Ok((total, sum, impossible))
    }
}

/// A chunk's slot (start, transitions, emissions) added to `total`.
fn add_slot(total: &mut Counts, slot: &[f64], n: usize) {
    let (start, rest) = slot.split_at(n);
    let (trans, emis) = rest.split_at(n * n);
    total.start.iter_mut().zip(start).for_each(|(x, y)| *x += y);
    total.exact_transitions().iter_mut().zip(trans).for_each(|(x, y)| *x += y);
    total.emis.iter_mut().zip(emis).for_each(|(x, y)| *x += y);
}

/// Viterbi paths and log-probabilities, parallel in time.
pub fn viterbi(model: &HmmModel, seqs: &Sequences, len: ChunkLen, _exec: &Exec) -> Result<(Vec<u32>, Vec<f64>)> {
    let call = Call::new(model, seqs, len)?;
    let t0 = std::time::Instant::now();
    let tabs = upload_log_tables(call.dev, model)?;
    call.viterbi(&tabs, t0)
}

/// [`viterbi`] for a density emission (observations `values`).
pub(crate) fn density_viterbi<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], _exec: &Exec) -> Result<(Vec<u32>, Vec<f64>)> {
    let (call, density) = Call::density(model, seqs, values, None)?;
    let t0 = std::time::Instant::now();
    let tabs = density.log_rows(call.dev, model, seqs.total())?;
    call.viterbi(&tabs, t0)
}

impl Call<'_> {
    /// The max-plus passes with log tables `tabs` (started at `t0`).
    fn viterbi(&self, tabs: &DeviceLogTables, t0: std::time::Instant) -> Result<(Vec<u32>, Vec<f64>)> {
        let call = self;
        let (dev, n, p) = (call.dev, call.n, &call.plan);
        let s = &dev.stream;
        let mut d = call.zeros::<f64>(p.chunks * n * n)?;
        let c = p.chunks as i32;
        let f = dev.function(Kernel::HmmScanVitProducts, &call.defines())?;
        let mut launch = s.launch_builder(&f);
        launch.arg(&tabs.trans).arg(&tabs.emis).arg(&call.seqs.sym).arg(&p.cb).arg(&p.ce).arg(&p.chunk_seq).arg(&c).arg(&mut d);
        // SAFETY: the arguments match hmm_scan_vit_products; D holds N*N
        // doubles per chunk.
        unsafe { launch.launch(call.product_cfg()) }.map_err(err(dev, "launching hmm_scan_vit_products"))?;
        let mut ptr = call.zeros::<u8>(p.chunks * n)?;
        let (mut starts, mut ends) = (call.zeros::<u32>(p.chunks)?, call.zeros::<u32>(p.chunks)?);
        let mut logp = call.zeros::<f64>(call.m)?;
        let total = p.symbols;
        let mut path = call.zeros::<u32>(total)?;
        let m = call.m as i32;
        let f = dev.function(Kernel::HmmScanVitBounds, &call.defines())?;
        let mut launch = s.launch_builder(&f);
        launch.arg(&tabs.start).arg(&tabs.emis).arg(&call.seqs.sym).arg(&call.seqs.off).arg(&p.co).arg(&m).arg(&d).arg(&mut ptr).arg(&mut starts).arg(&mut ends).arg(&mut logp).arg(&mut path);
        // SAFETY: the arguments match hmm_scan_vit_bounds; ptr holds N bytes
        // per chunk, starts and ends one state per chunk, logp one value per
        // sequence, path one state per symbol.
        unsafe { launch.launch(Call::warps(call.m, 0)) }.map_err(err(dev, "launching hmm_scan_vit_bounds"))?;
        let f = dev.function(Kernel::HmmScanVitPaths, &call.defines())?;
        // At most 32 KB (Chunks caps a chunk at 32,768 / N steps).
        let smem = p.longest_chunk * n;
        let mut launch = s.launch_builder(&f);
        launch.arg(&tabs.trans).arg(&tabs.emis).arg(&call.seqs.sym).arg(&p.cb).arg(&p.ce).arg(&p.chunk_seq).arg(&logp).arg(&starts).arg(&ends).arg(&mut path);
        // SAFETY: the arguments match hmm_scan_vit_paths; shared memory holds
        // N back-pointer bytes per step of the longest chunk.
        unsafe { launch.launch(Call::warps(p.chunks, smem)) }.map_err(err(dev, "launching hmm_scan_vit_paths"))?;
        let lp = call.download(&logp, call.m)?;
        gpu::timing::record("scan", t0);
        let t0 = std::time::Instant::now();
        let paths = call.download(&path, total)?;
        gpu::timing::record("download", t0);
        Ok((paths, lp))
    }
}
