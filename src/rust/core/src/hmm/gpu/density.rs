//! Density emissions (Gaussian, Poisson, ...) on the device: hmm.cu's
//! passes over a table with one emission row per position (`rows`), the
//! shifts added back to the log-likelihoods, the sequences the kernels
//! cannot certify computed on the CPU (as for categorical emissions), and
//! Baum-Welch (`DensityEngine`) with the E-step on the device and the
//! M-step on the host (the CPU's, one code for both backends).

use cudarc::driver::CudaSlice;

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::gpu::Device;

use super::super::backward::Counts;
use super::super::baum_welch::{fit_with, m_step, Engine, HmmFit};
use super::super::config::CheckedHmmFitConfig;
use super::super::cpu;
use super::super::emission::{Emission, EmissionFit};
use super::super::model::HmmModel;
use super::super::sequences::Sequences;
use super::super::tables::Tables;
use super::batched::{row_batches, Batched};
use super::launch::{launch_forward, launch_viterbi};
use super::memory::viterbi_buffers;
use super::passes::{forward_all, viterbi_all, CountSlots, Passes};
use super::plan::{batched_path, batches};
use super::WARP_MAX_STATES;
use super::plan::check_size;
use super::rows::{DensityTables, DeviceDensity};
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

/// log P(sequence) of every sequence; `values`: the observations, flat.
pub(crate) fn loglik<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec) -> Result<Vec<f64>> {
    check_size(model.n_states, seqs.len())?;
    let dev = device()?;
    let pos = positions(seqs)?;
    let density = DeviceDensity::new(dev, &model.emission, values)?;
    let d_seqs = density.positions(dev, &pos)?;
    let dt = density.tables(dev, model, &d_seqs.off, seqs.len(), seqs.total(), false)?;
    let mut out = forward_all(dev, model.n_states, density.stats, &dt.tables, &d_seqs, &pos, exec)?;
    for (s, l) in out.iter_mut().enumerate() {
        *l = shifted(*l, dt.shift[s], dt.uncertain[s]);
    }
    super::settle_logliks(model, seqs, &mut out, exec)?;
    Ok(out)
}

/// Viterbi paths and log-probabilities (log rows: nothing to certify).
pub(crate) fn viterbi<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec) -> Result<(Vec<u32>, Vec<f64>)> {
    check_size(model.n_states, seqs.len())?;
    let dev = device()?;
    let pos = positions(seqs)?;
    let density = DeviceDensity::new(dev, &model.emission, values)?;
    let d_seqs = density.positions(dev, &pos)?;
    let tabs = density.log_tables(dev, model, seqs.total())?;
    viterbi_all(dev, model.n_states, &tabs, &d_seqs, &pos, Some(&density), exec)
}

/// Posteriors (time-major, NaN rows for impossible sequences) and
/// log-likelihoods.
pub(crate) fn posterior<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, values: &[f64], exec: &Exec) -> Result<(Vec<f64>, Vec<f64>)> {
    check_size(model.n_states, seqs.len())?;
    let dev = device()?;
    let n = model.n_states;
    let pos = positions(seqs)?;
    let density = DeviceDensity::new(dev, &model.emission, values)?;
    // The rows first: the passes plan their batches in the memory left.
    let off = upload_offsets(dev, seqs)?;
    let dt = density.tables(dev, model, &off, seqs.len(), seqs.total(), false)?;
    let mut passes = Passes::with_density(n, density.stats, &pos, false, n * 8, Some(&density))?;
    let (mut probs, mut loglik) = passes.posterior_all(&dt.tables, exec)?;
    for (s, l) in loglik.iter_mut().enumerate() {
        *l = shifted(*l, dt.shift[s], dt.uncertain[s]);
    }
    super::settle_posteriors(model, seqs, &mut probs, &mut loglik, exec)?;
    Ok((probs, loglik))
}

fn upload_offsets<O: Copy>(dev: &Device, seqs: &Sequences<O>) -> Result<CudaSlice<i64>> {
    let off: Vec<i64> = seqs.offsets.iter().map(|&o| o as i64).collect();
    dev.stream.clone_htod(&off[..]).map_err(err(dev, "copying sequences"))
}

/// Baum-Welch with a density emission: the observations and the passes'
/// memory stay on the device for the whole fit; an E-step computes the
/// emission's rows for the current parameters, runs the passes (counts:
/// start, transitions and the emission's statistics) and brings the
/// counts (N + N^2 + S N values) and the log-likelihoods to the host, where
/// the M-step runs.
struct DensityEngine<'a, E: Emission> {
    passes: Passes<'a>,
    density: &'a DeviceDensity,
    seqs: &'a Sequences<E::Obs>,
    counts: CountSlots,
    exec: &'a Exec,
    model: Option<HmmModel<E>>,
    previous: Option<HmmModel<E>>,
    /// The current model's counts (device and host parts together).
    current: Option<Counts>,
    /// The device tables, recomputed in place by each E-step.
    tables: Option<DensityTables>,
    seg: usize,
}

impl<E: Emission> Engine<E> for DensityEngine<'_, E> {
    fn load(&mut self, model: &HmmModel<E>) -> Result<(f64, Option<usize>)> {
        self.model = Some(model.clone());
        self.previous = None;
        self.e_step()
    }

    fn m_step(&mut self, fit: &EmissionFit) -> Result<Vec<bool>> {
        let (Some(model), Some(counts)) = (self.model.take(), self.current.take()) else {
            return Err(Error::Internal("Baum-Welch M-step before an E-step".into()));
        };
        let (next, floored) = m_step(&model, &counts, fit);
        self.model = Some(next);
        self.previous = Some(model);
        Ok(floored)
    }

    fn e_step(&mut self) -> Result<(f64, Option<usize>)> {
        let exec = self.exec;
        exec.monitor.check()?;
        let Some(model) = self.model.as_ref() else {
            return Err(Error::Internal("Baum-Welch E-step without a model".into()));
        };
        let dev = self.passes.dev;
        self.density.set_params(dev, &model.emission)?;
        let (count, total) = (self.seqs.len(), self.seqs.total());
        let dt = match self.tables.take() {
            Some(mut dt) => {
                self.density.refresh(dev, model, &mut dt, self.passes.offsets(), count, total, true)?;
                dt
            }
            None => self.density.tables(dev, model, self.passes.offsets(), count, total, true)?,
        };
        let mut ll_all = self.passes.e_step(&dt.tables, &mut self.counts, &exec.monitor)?;
        let (n, v) = (model.n_states, self.density.stats);
        let total = dev.stream.clone_dtoh(&self.counts.total).map_err(err(dev, "reading the counts"))?;
        let mut counts = Counts { start: total[..n].to_vec(), trans_raw: total[n..n + n * n].to_vec(), trans: Vec::new(), emis: total[n + n * n..n + n * n + n * v].to_vec() };
        for (s, l) in ll_all.iter_mut().enumerate() {
            *l = shifted(*l, dt.shift[s], false);
        }
        let uncertain: Vec<usize> = (0..ll_all.len()).filter(|&s| ll_all[s].is_nan()).collect();
        if !uncertain.is_empty() {
            // Those sequences on the host, in log space where needed.
            let tab = Tables::new(model)?;
            let (host, lls) = cpu::counts_of(&tab, self.seqs, &uncertain, self.seg, exec)?;
            for (s, l) in uncertain.iter().zip(lls) {
                ll_all[*s] = l;
            }
            counts.add(&host);
        }
        self.current = Some(counts);
        self.tables = Some(dt);
        let impossible = ll_all.iter().position(|&l| l == f64::NEG_INFINITY);
        // Summed in sequence order on the host, as the CPU does.
        Ok((ll_all.iter().sum(), impossible))
    }

    fn model(&self, previous: bool) -> Result<HmmModel<E>> {
        let m = if previous { self.previous.as_ref().or(self.model.as_ref()) } else { self.model.as_ref() };
        m.cloned().ok_or_else(|| Error::Internal("Baum-Welch engine without a model".into()))
    }
}

/// Baum-Welch with a density emission on the device (see [`DensityEngine`]);
/// the stopping rule and the choice of start are the CPU's.
pub(crate) fn fit<E: Emission>(seqs: &Sequences<E::Obs>, values: &[f64], config: &CheckedHmmFitConfig<E>, exec: &Exec) -> Result<HmmFit<E>> {
    let n = config.n_states;
    check_size(n, seqs.len())?;
    let dev = device()?;
    let pos = positions(seqs)?;
    // Any emission of this family: its parameters are replaced before each
    // E-step.
    let probe = match &config.init {
        Some(m) => m.emission.clone(),
        None => super::super::baum_welch::try_random_model::<E>(n, &config.shape, seqs, config.seed, config.first_start)?.emission,
    };
    let density = DeviceDensity::new(dev, &probe, values)?;
    // Room for the rows (N values per position) before the passes plan
    // their batches in the memory left.
    let passes = Passes::with_density(n, density.stats, &pos, true, n * 8, Some(&density))?;
    let counts = passes.count_slots()?;
    let seg = cpu::fit_segment(n, seqs, exec);
    let mut engine = DensityEngine { passes, density: &density, seqs, counts, exec, model: None, previous: None, current: None, tables: None, seg };
    fit_with(config, seqs, exec, &mut engine)
}

/// For benchmarks ([`super::with_resident_passes`] for densities): the
/// observations uploaded and the buffers planned once, then `run` gets each
/// pass as a closure, as the categorical timing does. Forward: the rows,
/// shifts and forward kernels, results left on the device. Viterbi: the
/// log rows and the Viterbi kernels, paths left on the device. BaumWelch:
/// one fit iteration (the host M-step, then the E-step: rows, passes with
/// counts, counts and log-likelihoods copied out).
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
    let density = DeviceDensity::new(dev, &model.emission, values)?;
    {
        let d_seqs = density.positions(dev, &pos)?;
        let mut dt = density.tables(dev, model, &d_seqs.off, count, total, false)?;
        let all = 0..count;
        if batched_path(dev, n) {
            let ranges = row_batches(dev, count, n)?;
            let mut bt = Batched::new(dev, n, density.stats, &pos, &ranges, false)?;
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
                launch_forward(dev, n, &dt.tables, &d_seqs, &all, None, &mut ll)?;
                sync()
            })?;
        }
        drop(dt);
        let mut tabs = density.log_tables(dev, model, total)?;
        let per_symbol = if n <= WARP_MAX_STATES { n + 4 } else { 2 * n + 4 };
        let ranges = batches(dev, &pos, per_symbol)?;
        let mut bufs = Vec::with_capacity(ranges.len());
        for range in &ranges {
            bufs.push(viterbi_buffers(dev, n, pos.offsets[range.end] - pos.offsets[range.start], range.len())?);
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
    let passes = Passes::with_density(n, density.stats, &pos, true, n * 8, Some(&density))?;
    let counts = passes.count_slots()?;
    let seg = cpu::fit_segment(n, seqs, &exec);
    let mut engine = DensityEngine { passes, density: &density, seqs, counts, exec: &exec, model: None, previous: None, current: None, tables: None, seg };
    engine.load(model)?;
    let fit = EmissionFit::default();
    run(super::ResidentPass::BaumWelch, &mut || {
        engine.m_step(&fit)?;
        engine.e_step().map(|_| ())
    })
}
