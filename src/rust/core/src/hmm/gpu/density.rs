//! Density emissions (Gaussian, Poisson, ...) on the device: hmm.cu's
//! passes over a table with one emission row per position (`rows`), the
//! shifts added back to the log-likelihoods, the sequences the kernels
//! cannot certify computed on the CPU (as for categorical emissions), and
//! Baum-Welch (`DensityEngine`) with the E-step and the M-step of start and
//! transitions on the device, the emission's M-step on the host (the
//! CPU's, one code for both backends).

use std::ops::Range;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::gpu::Kernel;

use super::super::backward::Counts;
use super::super::baum_welch::{fit_with, m_step, Engine, HmmFit};
use super::super::config::CheckedHmmFitConfig;
use super::super::cpu;
use super::super::emission::{Emission, EmissionFit};
use super::super::model::HmmModel;
use super::super::paths::Paths;
use super::super::sequences::Sequences;
use super::super::tables::{Tables, DENSE_MIN};
use super::batched::{row_batches, Batched};
use super::launch::{launch_forward, launch_viterbi};
use super::memory::viterbi_buffers;
use super::passes::{forward_all, posterior_bytes, viterbi_all, CountSlots, Passes};
use super::plan::{batches, loglik_batched, viterbi_batched, viterbi_bytes_per_symbol};
use super::WARP_MAX_STATES;
use super::plan::check_size;
use super::rows::{rows_computed, upload_offsets, ChainSummary, DensityTables, DeviceDensity};
use super::shares::{e_step_shares, fit_shares, shares, work, ShareEngine, ShareSeqs, Spread};
use super::{device, err};

/// The offsets of `seqs` (no symbols: on the device, position p is symbol
/// p, reading row p of the density's table; [`DeviceDensity::positions`]).
fn positions<O: Copy>(seqs: &Sequences<O>) -> Result<Sequences> {
    if seqs.total() >= u32::MAX as usize - 4 {
        return Err(Error::BackendUnavailable(format!("{} observations are too many for one GPU call; use the CPU", seqs.total())));
    }
    Ok(Sequences { symbols: Vec::new(), offsets: seqs.offsets.clone() })
}

/// The kernels' log-likelihood with the shift added (NaN stays NaN,
/// -inf stays -inf); `uncertain`: NaN.
fn shifted(ll: f64, shift: f64, uncertain: bool) -> f64 {
    if uncertain { f64::NAN } else if ll.is_finite() { ll + shift } else { ll }
}

/// The observations of the sequences `range` of `seqs` (`values`: all of
/// them, flat).
fn values_of<'v, O: Copy>(values: &'v [f64], seqs: &Sequences<O>, range: &Range<usize>) -> &'v [f64] {
    &values[seqs.offsets[range.start]..seqs.offsets[range.end]]
}

/// log P(sequence) of every sequence; `values`: the observations, flat.
pub(crate) fn loglik<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec) -> Result<Vec<f64>> {
    check_size(model.n_states, seqs.len())?;
    let t0 = std::time::Instant::now();
    if super::scan::chosen(device()?, model, seqs, 8 * model.n_states)? {
        return super::scan::density_loglik(model, seqs, values, exec);
    }
    let mut out = super::loglik_into(seqs, model.n_states, exec, |sh, out| loglik_on(sh, model, values, seqs, exec, out))?;
    super::settle_logliks(model, seqs, &mut out, exec)?;
    crate::gpu::timing::record("whole GPU call", t0);
    Ok(out)
}

/// The kernels' log-likelihoods of share `sh` of the sequences `all`
/// (`values`: theirs, flat) into `out` (NaN: uncertain).
fn loglik_on<E: Emission>(sh: &ShareSeqs<E::Obs>, model: &HmmModel<E>, values: &[f64], all: &Sequences<E::Obs>, exec: &Exec, out: &mut [f64]) -> Result<()> {
    let (dev, seqs) = (sh.dev, &*sh.seqs);
    // The transitions first: they cross the bus while the observations
    // are prepared. No table of rows where the forward kernel computes
    // them. The rows of the observations already on the device are
    // computed while the rest cross the bus.
    let computed = rows_computed(model.n_states);
    let (mut dt, chain) = DensityTables::new(dev, model, seqs.len(), seqs.total(), !computed)?;
    let t0 = std::time::Instant::now();
    let pos = positions(seqs)?;
    let density = DeviceDensity::with_rows(dev, &model.emission, values_of(values, all, &sh.range), sh.obs, all, model.n_states, &mut dt)?;
    let d_seqs = if computed { density.offsets(dev, &pos)? } else { density.positions(dev, &pos)? };
    crate::gpu::timing::record("upload and rows", t0);
    let t0 = std::time::Instant::now();
    density.certify(dev, model.n_states, &mut dt, chain, &d_seqs.off, seqs.len(), false)?;
    crate::gpu::timing::record("shifts", t0);
    forward_all(dev, model.n_states, density.stats, &dt.tables, &d_seqs, &pos, exec, out, computed.then_some(&density))?;
    let (shift, uncertain) = dt.shifts(dev)?;
    for (s, l) in out.iter_mut().enumerate() {
        *l = shifted(*l, shift[s], uncertain[s]);
    }
    Ok(())
}

/// Viterbi paths and log-probabilities (log rows: nothing to certify).
pub(crate) fn viterbi<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec) -> Result<(Vec<u32>, Vec<f64>)> {
    let (paths, logp) = viterbi_as(model, seqs, values, false, exec)?;
    Ok((paths.into_vec(), logp))
}

/// [`viterbi`] with the paths as they crossed the bus (see [`Paths`]).
pub(crate) fn viterbi_paths<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec) -> Result<(Paths, Vec<f64>)> {
    viterbi_as(model, seqs, values, true, exec)
}

/// The Viterbi paths, narrow where N allows when `narrow`
/// (`super::paths_into`).
fn viterbi_as<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], narrow: bool, exec: &Exec) -> Result<(Paths, Vec<f64>)> {
    check_size(model.n_states, seqs.len())?;
    if super::scan::chosen(device()?, model, seqs, 8 * model.n_states + 4)? {
        let (paths, logp) = super::scan::density_viterbi(model, seqs, values, exec)?;
        return Ok((Paths::Full(paths), logp));
    }
    super::paths_into(seqs, model.n_states, narrow, exec, |sh, paths, logp| {
        let t0 = std::time::Instant::now();
        let pos = positions(&sh.seqs)?;
        let density = DeviceDensity::new(sh.dev, &model.emission, values_of(values, seqs, &sh.range), sh.obs, seqs)?;
        let d_seqs = density.positions(sh.dev, &pos)?;
        crate::gpu::timing::record("upload", t0);
        let tabs = density.log_tables(sh.dev, model, sh.seqs.total())?;
        viterbi_all(sh.dev, model.n_states, &tabs, &d_seqs, &pos, Some(&density), exec, paths, logp)
    })
}

/// Posteriors (time-major, NaN rows for impossible sequences) and
/// log-likelihoods; with `cols`, laid out into the caller's matrices
/// instead (`super::posterior_as`).
pub(crate) fn posterior<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec, cols: Option<super::Columns<'_, '_>>) -> Result<(Vec<f64>, Vec<f64>)> {
    check_size(model.n_states, seqs.len())?;
    let n = model.n_states;
    super::posterior_as(
        seqs,
        n,
        cols,
        || Ok(None),
        |out| {
            if super::scan::chosen(device()?, model, seqs, 16 * model.n_states)? {
                return super::scan::density_posterior(model, seqs, values, exec, out);
            }
            super::posterior_shares(model, seqs, exec, out, |sh, out, loglik| {
                let (dev, part) = (sh.dev, &*sh.seqs);
                let pos = positions(part)?;
                let density = DeviceDensity::new(dev, &model.emission, values_of(values, seqs, &sh.range), sh.obs, seqs)?;
                // The rows first: the passes plan their batches in the memory left.
                let off = upload_offsets(dev, part)?;
                let dt = density.tables(dev, model, &off, part.len(), part.total(), false)?;
                let mut passes = Passes::with_density(dev, n, density.stats, &pos, false, posterior_bytes(n, &out), &density)?;
                passes.posterior_all(&dt.tables, exec, out, loglik)?;
                let (shift, uncertain) = dt.shifts(dev)?;
                for (s, l) in loglik.iter_mut().enumerate() {
                    *l = shifted(*l, shift[s], uncertain[s]);
                }
                Ok(())
            })
        },
    )
}

/// The engine of one share (the call's sequences when there is one) with
/// `probe`'s family, handed to `serve`.
fn build_engine<E: Emission>(sh: &ShareSeqs<E::Obs>, probe: &E, values: &[f64], all: &Sequences<E::Obs>, exec: &Exec, serve: &mut dyn FnMut(&mut dyn ShareEngine<E>) -> Result<()>) -> Result<()> {
    let (dev, n) = (sh.dev, probe.n_states());
    let pos = positions(&sh.seqs)?;
    let density = DeviceDensity::new(dev, probe, values_of(values, all, &sh.range), sh.obs, all)?;
    let passes = Passes::with_density(dev, n, density.stats, &pos, true, n * 8, &density)?;
    let mut engine = DensityEngine::new(passes, &density, &sh.seqs, sh.obs, exec)?;
    serve(&mut engine)
}

/// One E-step + M-step (for benchmarks and `hmm::baum_welch_step`): the
/// next model (emission settings `fit`, resolved) and the log-likelihood
/// of `model`. Over several devices the E-step's counts are summed and the
/// M-step runs on the host.
pub(crate) fn baum_welch_step<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], fit: &EmissionFit, exec: &Exec) -> Result<(HmmModel<E>, f64)> {
    let n = model.n_states;
    check_size(n, seqs.len())?;
    let stats = model.emission.n_stats();
    if super::scan::chosen(device()?, model, seqs, super::scan::density_bytes_per_step(n) + (super::scan::slot_bytes(seqs, n, stats) / seqs.total().max(1) as f64).ceil() as usize)? {
        let (counts, ll, _) = super::scan::density_e_step(model, seqs, values, exec)?;
        let t0 = std::time::Instant::now();
        let next = m_step(model, &counts, fit).0;
        crate::gpu::timing::record("m-step and model", t0);
        return Ok((next, ll));
    }
    let shares = shares(seqs, exec, Spread::Fit { counts: Counts::size(n, stats), work: work(seqs, n) })?;
    if let [one] = &shares[..] {
        let t0 = std::time::Instant::now();
        let dev = one.dev;
        let pos = positions(seqs)?;
        let density = DeviceDensity::new(dev, &model.emission, values, &seqs.symbols, seqs)?;
        let passes = Passes::with_density(dev, n, density.stats, &pos, true, n * 8, &density)?;
        let mut engine = DensityEngine::new(passes, &density, seqs, &seqs.symbols, exec)?;
        crate::gpu::timing::record("upload", t0);
        let t0 = std::time::Instant::now();
        let (ll, _) = engine.load(model)?;
        crate::gpu::timing::record("e-step", t0);
        let t0 = std::time::Instant::now();
        engine.m_step(fit)?;
        let next = engine.model(false)?;
        crate::gpu::timing::record("m-step and model", t0);
        let t0 = std::time::Instant::now();
        drop(engine);
        drop(density);
        crate::gpu::timing::record("device memory released", t0);
        return Ok((next, ll));
    }
    let (counts, ll) = e_step_shares(&shares, seqs, model, exec, |sh, serve| build_engine(sh, &model.emission, values, seqs, exec, serve))?;
    Ok((m_step(model, &counts, fit).0, ll))
}

/// Baum-Welch with a density emission: the observations, the passes'
/// memory and the start and transition probabilities stay on the device
/// for the whole fit. An E-step computes the emission's rows for the
/// current parameters and runs the passes (counts: start, transitions and
/// the emission's statistics); the M-step of start and transitions runs
/// there (`hmm_m_step` with no emission part), and only the emission's
/// statistics (S N values) come to the host, where its M-step runs (the
/// CPU's). When the E-step counted some sequences on the host (those the
/// kernels could not certify), the whole M-step runs on the host.
struct DensityEngine<'a, E: Emission> {
    passes: Passes<'a>,
    density: &'a DeviceDensity,
    /// The sequences' offsets (and observations when they are the call's).
    seqs: &'a Sequences<E::Obs>,
    /// Their observations.
    obs: &'a [E::Obs],
    counts: CountSlots,
    exec: &'a Exec,
    /// The current model and the one before the last M-step; see `Chain`
    /// for where their start and transitions are.
    model: Option<(HmmModel<E>, Chain)>,
    previous: Option<(HmmModel<E>, Chain)>,
    /// Counts of the last E-step computed on the host, if any.
    host_counts: Option<Counts>,
    /// The device tables, recomputed in place by each E-step; the current
    /// start and transitions are theirs.
    tables: Option<DensityTables>,
    /// The previous start and transitions after a device M-step (its
    /// output, swapped with the tables'), and its keys: the smallest
    /// positive start-or-transition (and an unused emission slot), the
    /// smallest transition.
    spare: [CudaSlice<f64>; 3],
    keys: CudaSlice<u64>,
    low_trans: CudaSlice<u64>,
    seg: usize,
}

/// Where a model's start and transition probabilities are.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Chain {
    /// In the host model, not yet on the device.
    Host,
    /// In the host model and in the device tables.
    Both,
    /// On the device only (after a device M-step), with its summary (read
    /// for the current model only): current in the tables, previous in
    /// `spare`; the host model's vectors are stale.
    Device(ChainSummary),
}

impl<E: Emission> DensityEngine<'_, E> {
    /// The current (or previous) model whole, its start and transitions
    /// read from the device where only there.
    fn whole(&self, previous: bool) -> Result<HmmModel<E>> {
        let slot = if previous { self.previous.as_ref().or(self.model.as_ref()) } else { self.model.as_ref() };
        let Some((m, chain)) = slot else {
            return Err(Error::Internal("Baum-Welch engine without a model".into()));
        };
        let mut m = m.clone();
        if let Chain::Device(_) = chain {
            let dev = self.passes.dev;
            let (start, trans) = match (&self.tables, previous && self.previous.is_some()) {
                (_, true) => (&self.spare[0], &self.spare[1]),
                (Some(dt), false) => (&dt.tables.start, &dt.tables.trans),
                (None, false) => return Err(Error::Internal("Baum-Welch engine without device tables".into())),
            };
            let e = err(dev, "reading the model");
            m.start = dev.stream.clone_dtoh(start).map_err(&e)?;
            m.trans = dev.stream.clone_dtoh(trans).map_err(&e)?;
        }
        Ok(m)
    }

    /// The device's counts of the last E-step, on the host.
    fn device_counts(&self) -> Result<Counts> {
        let (n, dev) = (self.passes.n, self.passes.dev);
        let total = dev.stream.clone_dtoh(&self.counts.total).map_err(err(dev, "reading the counts"))?;
        Ok(Counts { start: total[..n].to_vec(), trans_raw: total[n..n + n * n].to_vec(), trans: Vec::new(), emis: total[n + n * n..].to_vec() })
    }

    /// Start and transitions re-estimated on the device from the last
    /// E-step's counts, into `spare`, then swapped with the tables' (so
    /// `spare` holds the previous ones); returns their summary.
    fn device_chain_step(&mut self, pseudocount: f64) -> Result<ChainSummary> {
        let (dev, n) = (self.passes.dev, self.passes.n);
        let Some(dt) = self.tables.as_mut() else {
            return Err(Error::Internal("Baum-Welch M-step without device tables".into()));
        };
        let s = &dev.stream;
        s.memset_zeros(&mut self.keys).map_err(err(dev, "clearing the smallest probabilities"))?;
        s.memset_zeros(&mut self.low_trans).map_err(err(dev, "clearing the smallest probabilities"))?;
        let f = dev.function(Kernel::HmmMStep, &[])?;
        let cfg = LaunchConfig { grid_dim: (n as u32 + 1, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let (n_i, v_i, null) = (n as i32, 0i32, 0u64);
        let t = &dt.tables;
        let [start2, trans2, trans_t2] = &mut self.spare;
        let mut launch = s.launch_builder(&f);
        launch.arg(&n_i).arg(&v_i).arg(&pseudocount).arg(&self.counts.total).arg(&t.start).arg(&t.trans).arg(&null);
        launch.arg(start2).arg(trans2).arg(trans_t2).arg(&null).arg(&mut self.keys).arg(&mut self.low_trans);
        // SAFETY: the arguments match hmm_m_step's parameters in order and
        // type; with V = 0 it reads counts.total's first N + N*N doubles
        // (start and transition counts of the last E-step) and the tables'
        // start and transitions, writes N, N*N and N*N doubles into the
        // spare buffers (as large) and the keys (two, and one, zeroed
        // above), and never touches the emission pointers (null); the block
        // has 256 threads (whole warps).
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_m_step"))?;
        let t = &mut dt.tables;
        std::mem::swap(&mut t.start, &mut self.spare[0]);
        std::mem::swap(&mut t.trans, &mut self.spare[1]);
        std::mem::swap(&mut t.trans_t, &mut self.spare[2]);
        let e = err(dev, "reading the smallest probabilities");
        let keys = s.clone_dtoh(&self.keys).map_err(&e)?;
        let low = s.clone_dtoh(&self.low_trans).map_err(&e)?;
        let value = |k: u64| if k == 0 { f64::INFINITY } else { f64::from_bits(!k) };
        Ok(ChainSummary { min_positive: value(keys[0]), dense: value(low[0]) >= DENSE_MIN })
    }
}

impl<E: Emission> Engine<E> for DensityEngine<'_, E> {
    fn load(&mut self, model: &HmmModel<E>) -> Result<(f64, Option<usize>)> {
        self.model = Some((model.clone(), Chain::Host));
        self.previous = None;
        self.e_step()
    }

    fn m_step(&mut self, fit: &EmissionFit) -> Result<Vec<bool>> {
        let Some((model, chain)) = self.model.take() else {
            return Err(Error::Internal("Baum-Welch M-step before an E-step".into()));
        };
        if let Some(mut counts) = self.host_counts.take() {
            // Some counts are on the host: the whole M-step runs there.
            self.model = Some((model, chain));
            let whole = self.whole(false)?;
            counts.add(&self.device_counts()?);
            let (next, floored) = m_step(&whole, &counts, fit);
            self.model = Some((next, Chain::Host));
            self.previous = Some((whole, Chain::Host));
            return Ok(floored);
        }
        let (n, v, dev) = (self.passes.n, self.density.stats, self.passes.dev);
        let summary = self.device_chain_step(fit.pseudocount)?;
        let at = n + n * n;
        let stats = dev.stream.clone_dtoh(&self.counts.total.slice(at..at + n * v)).map_err(err(dev, "reading the counts"))?;
        let e = model.emission.m_step(&stats, fit);
        // Start and transitions are on the device only from here on: the
        // new ones in the tables, the previous ones in `spare` (whatever
        // `chain` was), so the host's vectors move on as stale
        // placeholders (N^2 values, not copied every iteration).
        let HmmModel { start, trans, emission, .. } = model;
        self.previous = Some((HmmModel { n_states: n, start: Vec::new(), trans: Vec::new(), emission }, Chain::Device(summary)));
        self.model = Some((HmmModel { n_states: n, start, trans, emission: e.emission }, Chain::Device(summary)));
        Ok(e.floored)
    }

    fn e_step(&mut self) -> Result<(f64, Option<usize>)> {
        let exec = self.exec;
        exec.monitor.check()?;
        let Some((model, chain)) = self.model.as_mut() else {
            return Err(Error::Internal("Baum-Welch E-step without a model".into()));
        };
        let dev = self.passes.dev;
        self.density.set_params(dev, &model.emission)?;
        let (count, total) = (self.seqs.len(), self.seqs.total());
        let dt = match (self.tables.take(), *chain) {
            (Some(mut dt), Chain::Device(summary)) => {
                self.density.refresh(dev, model.n_states, &mut dt, summary, self.passes.offsets(), count, total, true)?;
                dt
            }
            (Some(mut dt), _) => {
                dt.upload_chain(dev, model)?;
                self.density.refresh(dev, model.n_states, &mut dt, ChainSummary::of(model), self.passes.offsets(), count, total, true)?;
                dt
            }
            (None, _) => self.density.tables(dev, model, self.passes.offsets(), count, total, true)?,
        };
        if *chain == Chain::Host {
            *chain = Chain::Both;
        }
        let mut ll_all = self.passes.e_step(&dt.tables, &mut self.counts, &exec.monitor)?;
        // A fit's E-step leaves no sequence uncertain (refresh, counting).
        let (shift, _) = dt.shifts(dev)?;
        for (s, l) in ll_all.iter_mut().enumerate() {
            *l = shifted(*l, shift[s], false);
        }
        self.tables = Some(dt);
        self.host_counts = None;
        let uncertain: Vec<usize> = (0..ll_all.len()).filter(|&s| ll_all[s].is_nan()).collect();
        if !uncertain.is_empty() {
            // Those sequences on the host, in log space where needed.
            let tab = Tables::new(&self.whole(false)?)?;
            let picked = Sequences::picked(self.seqs, self.obs, &uncertain);
            let (host, lls) = cpu::counts_of(&tab, &picked, &(0..uncertain.len()).collect::<Vec<_>>(), self.seg, exec)?;
            for (s, l) in uncertain.iter().zip(lls) {
                ll_all[*s] = l;
            }
            self.host_counts = Some(host);
        }
        let impossible = ll_all.iter().position(|&l| l == f64::NEG_INFINITY);
        // Summed in sequence order on the host, as the CPU does.
        Ok((ll_all.iter().sum(), impossible))
    }

    fn model(&self, previous: bool) -> Result<HmmModel<E>> {
        self.whole(previous)
    }
}

impl<E: Emission> ShareEngine<E> for DensityEngine<'_, E> {
    fn counts(&self) -> Result<Counts> {
        let mut c = self.device_counts()?;
        if let Some(host) = &self.host_counts {
            c.add(host);
        }
        Ok(c)
    }
}

impl<'a, E: Emission> DensityEngine<'a, E> {
    fn new(passes: Passes<'a>, density: &'a DeviceDensity, seqs: &'a Sequences<E::Obs>, obs: &'a [E::Obs], exec: &'a Exec) -> Result<Self> {
        let (dev, n) = (passes.dev, passes.n);
        let counts = passes.count_slots()?;
        let s = &dev.stream;
        let e = err(dev, "allocating the model");
        let spare = [s.alloc_zeros::<f64>(n).map_err(&e)?, s.alloc_zeros::<f64>(n * n).map_err(&e)?, s.alloc_zeros::<f64>(n * n).map_err(&e)?];
        let (keys, low_trans) = (s.alloc_zeros::<u64>(2).map_err(&e)?, s.alloc_zeros::<u64>(1).map_err(&e)?);
        let seg = cpu::fit_segment(n, seqs, exec);
        Ok(DensityEngine { passes, density, seqs, obs, counts, exec, model: None, previous: None, host_counts: None, tables: None, spare, keys, low_trans, seg })
    }
}

/// Baum-Welch with a density emission on the device (see [`DensityEngine`];
/// over several devices, [`fit_shares`]); the stopping rule and the choice
/// of start are the CPU's.
pub(crate) fn fit<E: Emission>(seqs: &Sequences<E::Obs>, values: &[f64], config: &CheckedHmmFitConfig<E>, exec: &Exec) -> Result<HmmFit<E>> {
    let n = config.n_states;
    check_size(n, seqs.len())?;
    // Any emission of this family: its parameters are replaced before each
    // E-step.
    let probe = match &config.init {
        Some(m) => m.emission.clone(),
        None => super::super::baum_welch::try_random_model::<E>(n, &config.shape, seqs, config.seed, config.first_start)?.emission,
    };
    if super::scan::fits(device()?, n, probe.n_stats(), seqs, super::scan::density_bytes_per_step(n))? {
        // Few long sequences: each E-step parallel in time (or on the CPU
        // for a model the scan cannot take), the M-step on the host.
        let (chunks, seg) = (cpu::chunks(seqs, n, Counts::size(n, probe.n_stats())), cpu::fit_segment(n, seqs, exec));
        return fit_with(config, seqs, exec, &mut super::super::baum_welch::HostEngine::new(|m: &HmmModel<E>| {
            if super::super::scan::usable(&m.trans) {
                super::scan::density_e_step(m, seqs, values, exec)
            } else {
                cpu::e_step(&Tables::new(m)?, seqs, &chunks, seg, exec)
            }
        }));
    }
    let shares = shares(seqs, exec, Spread::Fit { counts: Counts::size(n, probe.n_stats()), work: work(seqs, n) })?;
    let build = |sh: &ShareSeqs<E::Obs>, serve: &mut dyn FnMut(&mut dyn ShareEngine<E>) -> Result<()>| build_engine(sh, &probe, values, seqs, exec, serve);
    if let [one] = &shares[..] {
        let mut out = None;
        build(&one.of(seqs), &mut |engine| {
            out = Some(fit_with(config, seqs, exec, engine));
            Ok(())
        })?;
        return out.unwrap_or_else(|| Err(Error::Internal("no Baum-Welch engine was built".into())));
    }
    fit_shares(&shares, seqs, config, exec, build)
}

/// For benchmarks ([`super::with_resident_passes`] for densities): the
/// observations uploaded and the buffers planned once, then `run` gets each
/// pass as a closure, as the categorical timing does. Forward: the rows,
/// shifts and forward kernels, results left on the device. Viterbi: the
/// log rows and the Viterbi kernels, paths left on the device. BaumWelch:
/// one fit iteration (the M-step: start and transitions on the device, the
/// emission's on the host from its statistics; then the E-step: rows,
/// passes with counts, log-likelihoods copied out).
#[doc(hidden)]
pub fn with_resident_density<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], mut run: impl FnMut(super::ResidentPass, &mut dyn FnMut() -> Result<()>) -> Result<()>) -> Result<()> {
    check_size(model.n_states, seqs.len())?;
    let dev = device()?;
    let s = &dev.stream;
    let sync = || s.synchronize().map_err(err(dev, "waiting for the device"));
    let n = model.n_states;
    let (count, total) = (seqs.len(), seqs.total());
    let pos = positions(seqs)?;
    let exec = Exec { backend: crate::exec::Backend::Cuda, ..Exec::cpu() };
    let density = DeviceDensity::new(dev, &model.emission, values, &seqs.symbols, seqs)?;
    {
        let d_seqs = density.positions(dev, &pos)?;
        // As a call's forward pass: no table of rows where the kernel
        // computes them (loglik_on).
        let computed = rows_computed(n);
        let (mut dt, chain) = DensityTables::new(dev, model, count, total, !computed)?;
        density.refresh(dev, n, &mut dt, chain, &d_seqs.off, count, total, false)?;
        let all = 0..count;
        if loglik_batched(dev, n, count) {
            let ranges = row_batches(dev, count, n)?;
            let mut bt = Batched::new(dev, n, density.stats, &pos, &ranges, None)?;
            let mut lls = Vec::with_capacity(ranges.len());
            for range in &ranges {
                lls.push(s.alloc_zeros::<f64>(range.len()).map_err(err(dev, "allocating results"))?);
            }
            sync()?;
            run(super::ResidentPass::Forward, &mut || {
                density.recompute_rows(dev, n, &mut dt, &d_seqs.off, count, total)?;
                for (b, ll) in lls.iter_mut().enumerate() {
                    bt.forward(dev, &dt.tables, &d_seqs, b, None, ll)?;
                }
                sync()
            })?;
        } else {
            let mut ll = s.alloc_zeros::<f64>(count).map_err(err(dev, "allocating results"))?;
            sync()?;
            run(super::ResidentPass::Forward, &mut || {
                density.recompute_rows(dev, n, &mut dt, &d_seqs.off, count, total)?;
                launch_forward(dev, n, &dt.tables, &d_seqs, &all, None, &mut ll, computed.then_some(&density))?;
                sync()
            })?;
        }
        drop(dt);
        let mut tabs = density.log_tables(dev, model, total)?;
        let batched = viterbi_batched(dev, n, count);
        let ranges = batches(dev, &pos, viterbi_bytes_per_symbol(n, batched))?;
        let mut bufs = Vec::with_capacity(ranges.len());
        for range in &ranges {
            bufs.push(viterbi_buffers(dev, n, batched, &pos, range)?);
        }
        sync()?;
        run(super::ResidentPass::Viterbi, &mut || {
            if n > WARP_MAX_STATES {
                density.recompute_log_rows(dev, n, total, &mut tabs.emis)?;
            }
            for (range, buf) in ranges.iter().zip(bufs.iter_mut()) {
                launch_viterbi(dev, n, &tabs, &d_seqs, range, buf, Some(&density))?;
            }
            sync()
        })?;
    }
    let passes = Passes::with_density(dev, n, density.stats, &pos, true, n * 8, &density)?;
    let mut engine = DensityEngine::new(passes, &density, seqs, &seqs.symbols, &exec)?;
    engine.load(model)?;
    let fit = EmissionFit::default();
    run(super::ResidentPass::BaumWelch, &mut || {
        engine.m_step(&fit)?;
        engine.e_step().map(|_| ())
    })
}
