//! The EM algorithm on CUDA devices (kernels/em.cu): the same starts, the
//! same arithmetic and the same stopping rule as the CPU backend, which is
//! the reference.
//!
//! Datasets of up to SMALL_MAX_N observations run in `em_warp`: one warp
//! per (dataset, start), the whole EM in one launch. Larger datasets run in
//! `em_grid`, one launch of many blocks per iteration, queued without host
//! synchronisation. Work is split into launches of bounded size (device
//! memory, and time, so an interrupt is seen within a fraction of a second)
//! and spread over every usable device.

mod grid;
mod pairs;
mod plan;
mod warp;

use std::time::Instant;

use cudarc::driver::CudaFunction;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::exec::{Exec, Monitor};
use crate::memory;
use crate::gpu::{self, timing, Device, Kernel};

use super::config::{CheckedEmConfig, Precision};
use super::censored;
use super::data::{unfittable_given, WeightFacts};
use super::family::Family;
use super::fit::{best_start, failure, FitStatus, MixFit, MixParams, StartFit};
use super::starts::initial_values;

use pairs::{DatasetExtras, KernelWeights, Outputs, Pairs, Slot};
use plan::plan_launches;
use warp::{collect_warp, launch_warp, prepare_warp, upload_resident, DeviceData, WarpInFlight};

/// Largest M with a GPU kernel (use.gpu = NA runs larger M on the CPU).
pub const MAX_GPU_COMPONENTS: usize = 8;
/// Datasets up to this size use the shared-memory kernel
/// ([`shared_bytes_per_observation`]). Larger ones run the grid kernels,
/// in float64 whatever the precision: `precision = "mixed"` applies to the
/// shared-memory path only (em::cpu::run_start mirrors this).
pub const SMALL_MAX_N: usize = 6000;

/// Shared memory of em_warp per observation: its float64 features, and
/// their float32 copy with `precision = "mixed"` or the weight when weighted.
/// (Weights are float64 there, whichever way they were copied.)
fn shared_bytes_per_observation(config: &CheckedEmConfig, weighted: bool) -> usize {
    match (weighted, kernel_precision(config, weighted)) {
        (false, Precision::Double) => 16,
        _ => 24,
    }
}

/// The precision the kernels run: float64 with weights or censored data
/// (as the CPU's em::cpu::run_start, which has no weighted or censored
/// mixed E-step).
fn kernel_precision(config: &CheckedEmConfig, weighted: bool) -> Precision {
    if weighted || config.censoring.is_some() { Precision::Double } else { config.precision }
}

/// The held values the constrained kernels read (EM_CONSTRAINED): alpha,
/// first and second parameters, M each, NaN where free, then 1 when the
/// second parameter is shared; None for an unconstrained fit.
fn held_values(config: &CheckedEmConfig) -> Option<Vec<f64>> {
    let c = config.constraints.as_ref()?;
    let m = config.components;
    let mut held = Vec::with_capacity(3 * m + 1);
    for v in [&c.alpha, &c.first, &c.second] {
        held.extend((0..m).map(|j| v.get(j).copied().flatten().unwrap_or(f64::NAN)));
    }
    held.push(if c.equal_second { 1.0 } else { 0.0 });
    Some(held)
}

/// The argument of a pointer a kernel variant does not read (null).
const NULL: u64 = 0;
const WARPS_PER_BLOCK: usize = 8;
/// A censored dataset whose (interval, component) tails number at most
/// this, in a family whose tails iterate, has them computed by its block's
/// last warp for the others (kernels/em.cu, pool_tails; EM_POOL there).
const POOL_TAILS: usize = 8;
/// Shared memory per block set aside for em_warp's static arrays; the
/// dataset (dynamic) gets the rest. At most 4.6 KB: the exp and ln tables
/// (0.5 + 1 KB), the parameters' and the pooled tails' rows (1.5 KB each
/// for M = 8) and a few words.
const STATIC_SHARED: usize = 8192;
/// Upper bound of observation-iterations per launch (about 0.25 s at the
/// target rate), so interrupts are seen promptly and no launch runs long.
const LAUNCH_WORK: f64 = 4e10;
const LARGE_THREADS: u32 = 256;
/// Large path: iterations queued between two looks at the pairs' status.
const CHECK_EVERY: usize = 16;
/// Fraction of free device memory one launch may use.
const MEMORY_SHARE: f64 = 0.5;
/// Fraction of free device memory the datasets may take to stay on the
/// device for every launch (else each launch uploads its own).
const RESIDENT_SHARE: f64 = 0.25;
/// Blocks of em_warp per multiprocessor that fill the device.
const BLOCKS_PER_SM: usize = 4;

// Status codes written by the kernels (emitted into kernels/em.cu by em_prelude).
const ST_RUNNING: i32 = 0;
const ST_CONVERGED: i32 = 1;
const ST_MAX_ITERS: i32 = 2;
const ST_BAD_START: i32 = 10;
const ST_EMPTY: i32 = 11;
const ST_COLLAPSED: i32 = 12;
const ST_NONFINITE: i32 = 13;

/// Starts per dataset up to which every start's trace is recorded in the
/// main launch; with more, only the kept start is run again to record it
/// (1/S more work instead of S traces of memory and transfer).
const INLINE_TRACE_STARTS: usize = 4;

/// Fit every dataset with every configuration (one per candidate number
/// of components, all with the same starts) on the usable CUDA devices:
/// one launch plan over all of them. Returns the fits per configuration.
/// `facts`: what em::data::check_weights found of the weights, if the fit
/// has them and they were checked (else they are read again).
pub fn fit_models(data: &[&[f64]], configs: &[CheckedEmConfig], exec: &Exec, facts: Option<&[WeightFacts]>) -> Result<Vec<Vec<MixFit>>> {
    if let Some(config) = configs.iter().find(|c| c.components > MAX_GPU_COMPONENTS) {
        return Err(Error::BackendUnavailable(format!(
            "the GPU kernels fit up to {MAX_GPU_COMPONENTS} components, not {}; use the CPU backend",
            config.components
        )));
    }
    let devices = gpu::devices()?;
    let ranges = gpu::split_even(data.iter().map(|x| x.len() + 1), devices.len());
    let results: Vec<Result<Vec<Vec<MixFit>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .iter()
            .zip(devices)
            .enumerate()
            .map(|(k, (range, dev))| {
                let part = &data[range.clone()];
                let facts = facts.map(|f| &f[range.clone()]);
                let first = configs[0].dataset_offset + range.start;
                let monitor = &exec.monitor;
                // Host work (starts, copies, results) runs on the call's
                // threads, each device with its share of them.
                let parts = ranges.len();
                scope.spawn(move || exec.install_part(k, parts, || fit_on_device(dev, part, first, configs, facts, monitor)).and_then(|r| r))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::BackendUnavailable("a GPU worker thread panicked".into()))))
            .collect()
    });
    let mut fits: Vec<Vec<MixFit>> = configs.iter().map(|_| Vec::with_capacity(data.len())).collect();
    for r in results {
        for (all, part) in fits.iter_mut().zip(r?) {
            all.extend(part);
        }
    }
    exec.monitor.check()?;
    Ok(fits)
}

fn fit_on_device(dev: &Device, data: &[&[f64]], first: usize, configs: &[CheckedEmConfig], facts: Option<&[WeightFacts]>, monitor: &Monitor) -> Result<Vec<Vec<MixFit>>> {
    let n_starts = configs[0].starts_per_dataset();
    let t0 = Instant::now();
    let extras = DatasetExtras::new(data, first, &configs[0], facts);
    timing::record("weights and censoring", t0);
    let small_max = SMALL_MAX_N.min(dev.max_shared_per_block.saturating_sub(STATIC_SHARED) / shared_bytes_per_observation(&configs[0], extras.weighted));
    let t0 = Instant::now();
    let (mut small, mut large) = (Pairs::default(), Pairs::default());
    // slots[model][dataset]: where that dataset's starts of that model went.
    let mut slots: Vec<Vec<Slot>> = Vec::with_capacity(configs.len());
    for (k, config) in configs.iter().enumerate() {
        let m = config.components;
        let unfittable: Vec<Option<String>> = data.par_iter().enumerate().map(|(d, x)| unfittable_given(config.family, x, config.weights_of(first + d), extras.all_positive(d), m)).collect();
        // Every pair is held on the host (estimated by em::memory_needed),
        // reserved fallibly by `extend`.
        let (mut to_small, mut to_large) = (Vec::new(), Vec::new());
        slots.push(
            (0..data.len())
                .map(|i| match &unfittable[i] {
                    Some(why) => Slot::Unfittable(why.clone()),
                    None if data[i].len() <= small_max => {
                        to_small.push(i);
                        Slot::Small((to_small.len() - 1) * n_starts)
                    }
                    None => {
                        to_large.push(i);
                        Slot::Large((to_large.len() - 1) * n_starts)
                    }
                })
                .collect(),
        );
        small.extend(k, &to_small, n_starts)?;
        large.extend(k, &to_large, n_starts)?;
    }
    if let super::config::Starts::Given(_) = &configs[0].starts {
        // Explicit starting values (one model): one set for all datasets, or
        // one each, with the constraints applied as on the CPU.
        for pairs in [&mut small, &mut large] {
            let flat = pairs.dataset.iter().flat_map(|&d| {
                let p = initial_values(&configs[0], data[d], first + d, 0).unwrap_or_else(|_| MixParams::nan(configs[0].components));
                p.alpha.iter().chain(&p.mu).chain(&p.scale).copied().collect::<Vec<_>>()
            });
            pairs.given = Some(flat.collect());
        }
    }
    timing::record("planning", t0);
    let t0 = Instant::now();
    let keep_trace = configs[0].keep_trace;
    let inline_trace = keep_trace && n_starts <= INLINE_TRACE_STARTS;
    // Upload the datasets once for every launch (and every number of
    // components) when they fit: a launch then sends only its starts.
    let bytes: f64 = data.iter().map(|x| 8.0 * x.len() as f64).sum();
    let resident = if small.len() > 0 && bytes <= RESIDENT_SHARE * dev.free_memory()? as f64 {
        let resident = upload_resident(dev, configs[0].family, data, &extras)?;
        dev.stream.synchronize().map_err(|e| dev.err("copying data", e))?;
        Some(resident)
    } else {
        None
    };
    // The copies of the data, timed apart from the kernels (the launches'
    // own copies of their starts and results stay with the kernels).
    let mut upload_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let small_out = run_all(dev, data, &extras, &small, first, configs, Path::Warp, inline_trace, resident.as_ref(), monitor, &mut upload_secs)?;
    let large_out = run_all(dev, data, &extras, &large, first, configs, Path::Grid, keep_trace, None, monitor, &mut upload_secs)?;
    let grid_uploads = upload_secs - (t1 - t0).as_secs_f64();
    timing::record_secs("upload", upload_secs);
    timing::record_secs("kernels", (t1.elapsed().as_secs_f64() - grid_uploads).max(0.0));
    let t0 = Instant::now();

    let mut all = Vec::with_capacity(configs.len());
    for (k, config) in configs.iter().enumerate() {
        let m = config.components;
        let nstat = 3 * m;
        let start_of = |out: &Outputs, p: usize| -> StartFit {
            let init = params_at(&out.init, p, m);
            if let Some(why) = &out.no_start[p] {
                return StartFit::failed(m, MixParams::nan(m), 0, why.clone());
            }
            let trace = out.trace.get(p).cloned().unwrap_or_default();
            start_fit(config.family, m, init, &out.params[p * nstat..(p + 1) * nstat], out.loglik[p], out.iterations[p], out.status[p], trace)
        };
        let mut fits: Vec<MixFit> = data
            .par_iter()
            .zip(slots[k].par_iter())
            .enumerate()
            .map(|(d, (x, slot))| {
                let (out, p0) = match slot {
                    Slot::Unfittable(why) => {
                        let failed = StartFit::failed(m, MixParams::nan(m), 0, why.clone());
                        return Ok(MixFit::from_chosen(failed, 0, memory::try_vec(n_starts, f64::NAN, "start log-likelihoods")?, x.len(), false));
                    }
                    Slot::Small(p) => (&small_out[k], *p),
                    Slot::Large(p) => (&large_out[k], *p),
                };
                let (ll, ok): (Vec<f64>, Vec<bool>) = (p0..p0 + n_starts).map(|p| outcome(out, p)).unzip();
                let chosen = best_start(&ll, &ok).unwrap_or(0);
                // Held values keep the components in the caller's order (as em::cpu).
                let keep_order = config.constraints.as_ref().is_some_and(|c| c.holds_values());
                let mut fit = MixFit::from_chosen(start_of(out, p0 + chosen), chosen, ll, x.len(), keep_order);
                fit.weight_total = config.weights_of(first + d).map(|_| extras.total(d));
                if config.keep_posterior && fit.success() && !monitor.is_cancelled() {
                    fit.posterior = Some(censored::posterior_of(config.family, x, config.censoring_of(first + d), &fit.params)?);
                }
                if k + 1 == configs.len() {
                    monitor.add_done(1);
                }
                Ok(fit)
            })
            .collect::<Result<Vec<MixFit>>>()?;
        monitor.check()?;

        if keep_trace && !inline_trace {
            let t0 = Instant::now();
            // Run each kept start of the shared-memory path again, recording its trace.
            let mut kept = Pairs { given: Some(Vec::new()), ..Pairs::default() };
            let mut owner = Vec::new();
            for (d, fit) in fits.iter().enumerate() {
                if let (true, Slot::Small(p0)) = (fit.success(), &slots[k][d]) {
                    let p = p0 + fit.best_start;
                    kept.push(0, d, fit.best_start);
                    kept.given.as_mut().expect("given").extend_from_slice(&small_out[k].init[p * nstat..(p + 1) * nstat]);
                    owner.push(d);
                }
            }
            let rerun = run_all(dev, data, &extras, &kept, first, std::slice::from_ref(config), Path::Warp, true, resident.as_ref(), monitor, &mut 0.0)?;
            let traces = rerun.into_iter().next().unwrap_or_default().trace;
            for (t, d) in traces.into_iter().zip(owner) {
                fits[d].trace = t;
            }
            timing::record("trace of kept starts", t0);
        }
        all.push(fits);
    }
    timing::record("results", t0);
    Ok(all)
}

/// A pair's (log-likelihood, succeeded).
fn outcome(out: &Outputs, p: usize) -> (f64, bool) {
    match (out.status[p], &out.no_start[p]) {
        (ST_CONVERGED | ST_MAX_ITERS, None) => (out.loglik[p], true),
        _ => (f64::NAN, false),
    }
}

fn params_at(flat: &[f64], p: usize, m: usize) -> MixParams {
    let v = &flat[p * 3 * m..(p + 1) * 3 * m];
    MixParams { alpha: v[..m].to_vec(), mu: v[m..2 * m].to_vec(), scale: v[2 * m..].to_vec() }
}

#[allow(clippy::too_many_arguments)]
fn start_fit(family: Family, m: usize, init: MixParams, params: &[f64], loglik: f64, iterations: i32, status: i32, trace: Vec<f64>) -> StartFit {
    let iter = iterations.max(0) as usize;
    let status = match status {
        ST_CONVERGED => FitStatus::Converged,
        ST_MAX_ITERS => FitStatus::MaxIters,
        code => {
            let why = match code {
                ST_BAD_START => failure::bad_start(),
                ST_EMPTY => failure::empty(iter),
                ST_COLLAPSED => failure::collapsed(family, iter),
                _ => failure::non_finite(iter),
            };
            return StartFit::failed(m, init, iter, why);
        }
    };
    let params = MixParams { alpha: params[..m].to_vec(), mu: params[m..2 * m].to_vec(), scale: params[2 * m..].to_vec() };
    StartFit { params, init, loglik, iterations: iter, status, message: None, trace }
}

/// Run every pair of `pairs` on one kernel path, launch by launch, and
/// return the outputs of each model (configuration). On the shared-memory
/// path the host prepares launch k + 1 (its starting values) while the
/// device runs launch k, and handles k's results while it runs k + 1, also
/// across models.
#[allow(clippy::too_many_arguments)]
fn run_all(dev: &Device, data: &[&[f64]], extras: &DatasetExtras, pairs: &Pairs, first: usize, configs: &[CheckedEmConfig], path: Path, trace: bool, resident: Option<&DeviceData>, monitor: &Monitor, upload_secs: &mut f64) -> Result<Vec<Outputs>> {
    let mut all: Vec<Outputs> = configs.iter().map(|_| Outputs::default()).collect();
    let chunks = plan_launches(dev, data, pairs, configs, path, trace)?;
    if path == Path::Grid {
        for chunk in chunks {
            monitor.check()?;
            let k = pairs.model[chunk.start];
            all[k].append(grid::run_grid(dev, data, extras, pairs, chunk, first, &configs[k], monitor, upload_secs)?);
        }
        return Ok(all);
    }
    // Room for every launch's results at once: growing by launches had
    // copied them again and again.
    let mut counts = vec![0; configs.len()];
    for &k in &pairs.model {
        counts[k] += 1;
    }
    for ((out, config), count) in all.iter_mut().zip(configs).zip(counts) {
        *out = Outputs::with_capacity(count, 3 * config.components)?;
    }
    // Launches alternate between two streams, and each is queued before the
    // previous one is read back: the GPU never waits for the host between
    // launches, and the next launch's blocks fill the SMs that the previous
    // launch's last blocks leave idle.
    let streams = match chunks.len() {
        0 | 1 => vec![dev.stream.clone()],
        _ => vec![dev.stream.clone(), dev.ctx.new_stream().map_err(|e| dev.err("creating a stream", e))?],
    };
    // The device's event tracking is off (gpu::open_device): the second
    // stream waits for the first (the resident data's upload), and, below,
    // the first for the second before anything the launches read is freed.
    if let [first, second] = &streams[..] {
        second.join(first).map_err(|e| dev.err("ordering two streams", e))?;
    }
    let out = run_warp_launches(dev, chunks, data, extras, pairs, first, configs, trace, resident, monitor, &streams, all);
    if let [first, second] = &streams[..] {
        first.join(second).map_err(|e| dev.err("ordering two streams", e))?;
    }
    out
}

/// The launches of [`run_all`]'s shared-memory path, alternating between
/// `streams`, each queued before the previous one is read back.
#[allow(clippy::too_many_arguments)]
fn run_warp_launches(dev: &Device, chunks: Vec<std::ops::Range<usize>>, data: &[&[f64]], extras: &DatasetExtras, pairs: &Pairs, first: usize, configs: &[CheckedEmConfig], trace: bool, resident: Option<&DeviceData>, monitor: &Monitor, streams: &[std::sync::Arc<cudarc::driver::CudaStream>], mut all: Vec<Outputs>) -> Result<Vec<Outputs>> {
    // Each launch's starting values are drawn (on the thread pool) while
    // the launch before it is waited for, read back and filed (on a thread
    // of its own): they had taken turns, and once the kernels were fast
    // the host's share set the pace.
    let prepare = |chunk: std::ops::Range<usize>| {
        let k = pairs.model[chunk.start];
        let t0 = Instant::now();
        let job = prepare_warp(data, extras, pairs, chunk, first, &configs[k], resident.is_some(), BLOCKS_PER_SM * dev.multiprocessors as usize);
        timing::record("launch preparation", t0);
        (k, job)
    };
    let collect = |all: &mut Vec<Outputs>, (j, f): (usize, WarpInFlight)| -> Result<()> {
        let t0 = Instant::now();
        all[j].append(collect_warp(dev, f, &configs[j])?);
        timing::record("wait and read back", t0);
        Ok(())
    };
    let mut chunks = chunks.into_iter();
    let mut next = chunks.next().map(prepare);
    let mut in_flight: Option<(usize, WarpInFlight)> = None;
    let mut c = 0;
    while let Some((k, job)) = next.take() {
        monitor.check()?;
        let t0 = Instant::now();
        let launched = (k, launch_warp(dev, &streams[c % streams.len()], job, &configs[k], trace, resident)?);
        timing::record("launch", t0);
        c += 1;
        let previous = in_flight.replace(launched);
        let all = &mut all;
        std::thread::scope(|scope| {
            let waiter = previous.map(|f| scope.spawn(|| collect(all, f)));
            next = chunks.next().map(prepare);
            waiter.map_or(Ok(()), |w| w.join().unwrap_or_else(|_| Err(Error::Internal("reading back an em_warp launch panicked".into()))))
        })?;
    }
    if let Some(f) = in_flight {
        collect(&mut all, f)?;
    }
    Ok(all)
}

/// Which kernel path a pair runs on: shared-memory warps or the grid.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    Warp,
    Grid,
}


/// What the core writes before kernels/em.cu: the status codes, launch
/// sizes and family facts the host also uses, the EM's arithmetic helpers
/// (kernels/em_math.cuh), then the family's CUDA block.
pub fn em_prelude(family: Family) -> String {
    format!(
        "#define ST_RUNNING {ST_RUNNING}\n#define ST_CONVERGED {ST_CONVERGED}\n#define ST_MAX_ITERS {ST_MAX_ITERS}\n\
         #define ST_BAD_START {ST_BAD_START}\n#define ST_EMPTY {ST_EMPTY}\n#define ST_COLLAPSED {ST_COLLAPSED}\n\
         #define ST_NONFINITE {ST_NONFINITE}\n#define EM_WARPS {WARPS_PER_BLOCK}\n#define EM_POOL {POOL_TAILS}\n#define TWO_PI {:e}\n\
         #define FAM_SECOND {}\n{}{}\n{}",
        std::f64::consts::TAU,
        family.info().second.is_some() as i32,
        if family.tails_iterate() { "#define FAM_TAILS_ITERATE\n" } else { "" },
        include_str!("../../../kernels/em_math.cuh"),
        family.cuda_source()
    )
}

/// The kernel variant of a configuration: `precision = "mixed"` compiles
/// em_warp with EM_MIXED (the grid kernels always run float64), weights
/// EM_WEIGHTED (and EM_WEIGHTS_FLOAT when they are read as float32),
/// censored data EM_CENSORED, constraints EM_CONSTRAINED.
fn em_function(dev: &Device, config: &CheckedEmConfig, weights: KernelWeights, kernel: Kernel) -> Result<CudaFunction> {
    let prelude = em_prelude(config.family);
    dev.function_with(kernel, Some((config.family.name(), &prelude)), &em_defines(config, weights, kernel))
}

fn em_defines(config: &CheckedEmConfig, weights: KernelWeights, kernel: Kernel) -> Vec<(&'static str, i64)> {
    let mut defines = vec![("EM_M", config.components as i64)];
    match weights {
        KernelWeights::Float => defines.extend([("EM_WEIGHTED", 1), ("EM_WEIGHTS_FLOAT", 1)]),
        KernelWeights::Double => defines.push(("EM_WEIGHTED", 1)),
        KernelWeights::None if kernel_precision(config, false) == Precision::Mixed && kernel == Kernel::EmWarp => defines.push(("EM_MIXED", 1)),
        KernelWeights::None => {}
    }
    if config.censoring.is_some() {
        defines.push(("EM_CENSORED", 1));
    }
    if config.constraints.is_some() {
        defines.push(("EM_CONSTRAINED", 1));
    }
    defines
}
