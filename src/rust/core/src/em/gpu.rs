//! The EM algorithm on CUDA devices (kernels/em.cu): the same starts, the
//! same arithmetic and the same stopping rule as the CPU backend, which is
//! the reference.
//!
//! Datasets of up to `small_max_n` observations run in `em_warp`: one warp
//! per (dataset, start), the whole EM in one launch. Larger datasets run in
//! `em_partial` + `em_update`, two launches per iteration queued without
//! host synchronisation. Work is split into launches of bounded size (device
//! memory, and time, so an interrupt is seen within a fraction of a second)
//! and spread over every usable device.

use std::borrow::Cow;
use std::ops::Range;
use std::time::Instant;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::exec::{Exec, Monitor};
use crate::gpu::{self, timing, Device};

use super::config::CheckedEmConfig;
use super::cpu;
use super::data::{unfittable_reason, Prepared};
use super::family::Family;
use super::fit::{best_start, failure, FitStatus, MixFit, MixParams, StartFit};
use super::starts::initial_values;

/// Largest M with a GPU kernel (use.gpu = NA runs larger M on the CPU).
pub const MAX_GPU_COMPONENTS: usize = 8;
/// Datasets up to this size use the shared-memory kernel (16 bytes each).
const SMALL_MAX_N: usize = 6000;
const WARPS_PER_BLOCK: usize = 8;
/// Upper bound of observation-iterations per launch (about 0.25 s at the
/// target rate), so interrupts are seen promptly and no launch runs long.
const LAUNCH_WORK: f64 = 4e10;
const LARGE_THREADS: u32 = 256;
/// Large path: iterations queued between two looks at the pairs' status.
const CHECK_EVERY: usize = 16;
/// Fraction of free device memory one launch may use.
const MEMORY_SHARE: f64 = 0.5;

// Status codes written by the kernels (kernels/em.cu).
const ST_RUNNING: i32 = 0;
const ST_CONVERGED: i32 = 1;
const ST_MAX_ITERS: i32 = 2;
const ST_BAD_START: i32 = 10;
const ST_EMPTY: i32 = 11;
const ST_COLLAPSED: i32 = 12;

/// The (dataset, start) pairs to run on one kernel path, in dataset order.
/// Their starting values are drawn launch by launch (see [`starting_values`]),
/// on the host while the device runs the previous launch.
#[derive(Default)]
struct Pairs {
    dataset: Vec<usize>,
    start: Vec<usize>,
    /// Given starting values (3M per pair), instead of drawing them.
    given: Option<Vec<f64>>,
}

impl Pairs {
    fn len(&self) -> usize {
        self.dataset.len()
    }
    fn push(&mut self, dataset: usize, start: usize) {
        self.dataset.push(dataset);
        self.start.push(start);
    }
}

/// Where a dataset's starts went: unfittable, or its first pair on a path.
#[derive(Clone)]
enum Slot {
    Unfittable(String),
    Small(usize),
    Large(usize),
}

/// What a launch used and returned, one entry per pair of a [`Pairs`].
#[derive(Default)]
struct Outputs {
    init: Vec<f64>,
    /// Why no starting values could be drawn (the pair then ran from NaN
    /// and its result is ignored).
    no_start: Vec<Option<String>>,
    params: Vec<f64>,
    loglik: Vec<f64>,
    iterations: Vec<i32>,
    status: Vec<i32>,
    /// Per pair, when recorded.
    trace: Vec<Vec<f64>>,
}

impl Outputs {
    fn append(&mut self, other: Outputs) {
        self.init.extend(other.init);
        self.no_start.extend(other.no_start);
        self.params.extend(other.params);
        self.loglik.extend(other.loglik);
        self.iterations.extend(other.iterations);
        self.status.extend(other.status);
        self.trace.extend(other.trace);
    }
}

/// Starting values of the pairs `range` (3M each, NaN where none could be
/// drawn) and why not, drawn in parallel from the keyed streams.
fn starting_values(data: &[&[f64]], pairs: &Pairs, range: Range<usize>, first: usize, config: &CheckedEmConfig) -> (Vec<f64>, Vec<Option<String>>) {
    let nstat = 3 * config.components;
    if let Some(given) = &pairs.given {
        return (given[range.start * nstat..range.end * nstat].to_vec(), vec![None; range.len()]);
    }
    let drawn: Vec<std::result::Result<MixParams, String>> = range
        .into_par_iter()
        .map(|p| initial_values(config, data[pairs.dataset[p]], first + pairs.dataset[p], pairs.start[p]))
        .collect();
    let mut init = Vec::with_capacity(drawn.len() * nstat);
    let mut why = Vec::with_capacity(drawn.len());
    for d in drawn {
        match d {
            Ok(p) => {
                init.extend(p.alpha.iter().chain(&p.mu).chain(&p.scale));
                why.push(None);
            }
            Err(e) => {
                init.extend(std::iter::repeat_n(f64::NAN, nstat));
                why.push(Some(e));
            }
        }
    }
    (init, why)
}

/// Starts per dataset up to which every start's trace is recorded in the
/// main launch; with more, only the kept start is run again to record it
/// (1/S more work instead of S traces of memory and transfer).
const INLINE_TRACE_STARTS: usize = 4;

/// Fit every dataset on the usable CUDA devices.
pub fn fit_many(data: &[&[f64]], config: &CheckedEmConfig, exec: &Exec) -> Result<Vec<MixFit>> {
    if config.components > MAX_GPU_COMPONENTS {
        return Err(Error::BackendUnavailable(format!(
            "the GPU kernels fit up to {MAX_GPU_COMPONENTS} components, not {}; use the CPU backend",
            config.components
        )));
    }
    let devices = gpu::devices()?;
    let ranges = split_work(data, devices.len());
    let results: Vec<Result<Vec<MixFit>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .iter()
            .zip(devices)
            .map(|(range, dev)| {
                let part = &data[range.clone()];
                let first = config.dataset_offset + range.start;
                let monitor = &exec.monitor;
                scope.spawn(move || fit_on_device(dev, part, first, config, monitor))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::BackendUnavailable("a GPU worker thread panicked".into()))))
            .collect()
    });
    let mut fits = Vec::with_capacity(data.len());
    for r in results {
        fits.extend(r?);
    }
    exec.monitor.check()?;
    Ok(fits)
}

/// Contiguous ranges of datasets, one per device, of about equal size.
fn split_work(data: &[&[f64]], devices: usize) -> Vec<Range<usize>> {
    let total: usize = data.iter().map(|x| x.len() + 1).sum();
    let mut ranges = Vec::with_capacity(devices);
    let (mut start, mut acc) = (0, 0usize);
    for (i, x) in data.iter().enumerate() {
        acc += x.len() + 1;
        let k = ranges.len() + 1;
        if k < devices && acc * devices >= total * k {
            ranges.push(start..i + 1);
            start = i + 1;
        }
    }
    ranges.push(start..data.len());
    ranges
}

fn fit_on_device(dev: &Device, data: &[&[f64]], first: usize, config: &CheckedEmConfig, monitor: &Monitor) -> Result<Vec<MixFit>> {
    let m = config.components;
    let n_starts = config.starts_per_dataset();
    let small_max = SMALL_MAX_N.min(dev.max_shared_per_block.saturating_sub(1024) / 16);
    let t0 = Instant::now();
    let unfittable: Vec<Option<String>> = data.par_iter().map(|x| unfittable_reason(x, m)).collect();
    let (mut small, mut large) = (Pairs::default(), Pairs::default());
    let slots: Vec<Slot> = (0..data.len())
        .map(|i| {
            if let Some(why) = &unfittable[i] {
                return Slot::Unfittable(why.clone());
            }
            let (slot, pairs) = if data[i].len() <= small_max {
                (Slot::Small(small.len()), &mut small)
            } else {
                (Slot::Large(large.len()), &mut large)
            };
            (0..n_starts).for_each(|s| pairs.push(i, s));
            slot
        })
        .collect();
    if let super::config::Starts::Given(given) = &config.starts {
        // Explicit starting values: one set for all datasets, or one each.
        for pairs in [&mut small, &mut large] {
            let flat = pairs.dataset.iter().flat_map(|&d| {
                let p = &given[if given.len() == 1 { 0 } else { first - config.dataset_offset + d }];
                p.alpha.iter().chain(&p.mu).chain(&p.scale).copied().collect::<Vec<_>>()
            });
            pairs.given = Some(flat.collect());
        }
    }
    timing::record("planning", t0);
    let t0 = Instant::now();
    let inline_trace = config.keep_trace && n_starts <= INLINE_TRACE_STARTS;
    let small_out = run_all(dev, data, &small, first, config, Kernel::Warp, inline_trace, monitor)?;
    let large_out = run_all(dev, data, &large, first, config, Kernel::Grid, config.keep_trace, monitor)?;
    timing::record("kernels", t0);
    let t0 = Instant::now();

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
        .zip(slots.par_iter())
        .map(|(x, slot)| {
            let (out, p0) = match slot {
                Slot::Unfittable(why) => {
                    let failed = StartFit::failed(m, MixParams::nan(m), 0, why.clone());
                    return MixFit::from_chosen(failed, 0, vec![f64::NAN; n_starts], x.len());
                }
                Slot::Small(p) => (&small_out, *p),
                Slot::Large(p) => (&large_out, *p),
            };
            let (ll, ok): (Vec<f64>, Vec<bool>) = (p0..p0 + n_starts).map(|p| outcome(out, p)).unzip();
            let chosen = best_start(&ll, &ok).unwrap_or(0);
            let mut fit = MixFit::from_chosen(start_of(out, p0 + chosen), chosen, ll, x.len());
            if config.keep_posterior && fit.success() {
                fit.posterior = Some(cpu::posterior(config.family, &Prepared::new(config.family, x), &fit.params));
            }
            monitor.add_done(1);
            fit
        })
        .collect();
    timing::record("results", t0);

    if config.keep_trace && !inline_trace {
        let t0 = Instant::now();
        // Run each kept start of the shared-memory path again, recording its trace.
        let mut kept = Pairs { given: Some(Vec::new()), ..Pairs::default() };
        let mut owner = Vec::new();
        for (d, fit) in fits.iter().enumerate() {
            if let (true, Slot::Small(p0)) = (fit.success(), &slots[d]) {
                let p = p0 + fit.best_start;
                kept.push(d, fit.best_start);
                kept.given.as_mut().expect("given").extend_from_slice(&small_out.init[p * nstat..(p + 1) * nstat]);
                owner.push(d);
            }
        }
        let rerun = run_all(dev, data, &kept, first, config, Kernel::Warp, true, monitor)?;
        for (k, d) in owner.into_iter().enumerate() {
            fits[d].trace = rerun.trace[k].clone();
        }
        timing::record("trace of kept starts", t0);
    }
    Ok(fits)
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

/// Run every pair of `pairs` on one kernel path, launch by launch. On the
/// shared-memory path the host prepares launch k + 1 while the device runs
/// launch k, and handles k's results while it runs k + 1.
fn run_all(dev: &Device, data: &[&[f64]], pairs: &Pairs, first: usize, config: &CheckedEmConfig, kernel: Kernel, trace: bool, monitor: &Monitor) -> Result<Outputs> {
    let mut all = Outputs::default();
    let chunks = plan_launches(dev, data, pairs, config, kernel, trace)?;
    if kernel == Kernel::Grid {
        for chunk in chunks {
            monitor.check()?;
            all.append(run_grid(dev, data, pairs, chunk, first, config, monitor)?);
        }
        return Ok(all);
    }
    let mut in_flight: Option<WarpInFlight> = None;
    for chunk in chunks {
        let job = prepare_warp(data, pairs, chunk, first, config);
        let done = in_flight.take().map(|f| collect_warp(dev, f, config)).transpose()?;
        monitor.check()?;
        in_flight = Some(launch_warp(dev, job, config, trace)?);
        if let Some(out) = done {
            all.append(out);
        }
    }
    if let Some(f) = in_flight {
        all.append(collect_warp(dev, f, config)?);
    }
    Ok(all)
}

#[derive(Clone, Copy, PartialEq)]
enum Kernel {
    Warp,
    Grid,
}

/// Consecutive ranges of pairs, each small enough for one launch.
fn plan_launches(dev: &Device, data: &[&[f64]], pairs: &Pairs, config: &CheckedEmConfig, kernel: Kernel, trace: bool) -> Result<Vec<Range<usize>>> {
    if pairs.len() == 0 {
        return Ok(vec![]);
    }
    let budget = dev.free_memory()? as f64 * MEMORY_SHARE;
    Ok(plan_ranges(data, pairs, config, kernel, trace, budget))
}

/// [`plan_launches`] for a memory budget in bytes: a launch holds its
/// pairs' datasets, starts, results and traces within `budget` (a single
/// pair always makes a launch), at most LAUNCH_WORK observation-iterations on
/// the shared-memory path and 65,535 pairs (the grid's y limit) on the other.
fn plan_ranges(data: &[&[f64]], pairs: &Pairs, config: &CheckedEmConfig, kernel: Kernel, trace: bool, budget: f64) -> Vec<Range<usize>> {
    let trace_len = if trace { config.max_iters } else { 0 };
    let per_pair = (8 * (3 * config.components + 8 + trace_len)) as f64;
    let mut ranges = Vec::new();
    let (mut start, mut bytes, mut work) = (0usize, 0f64, 0f64);
    for i in 0..pairs.len() {
        let n = data[pairs.dataset[i]].len() as f64;
        let add_work = n * config.max_iters as f64;
        // A pair brings its dataset along when it is the first of it in a launch.
        let bytes_of = |start: usize| per_pair + if i == start || pairs.dataset[i - 1] != pairs.dataset[i] { 8.0 * n } else { 0.0 };
        let full = i > start
            && (bytes + bytes_of(start) > budget
                || (kernel == Kernel::Warp && work + add_work > LAUNCH_WORK)
                || (kernel == Kernel::Grid && i - start >= 65_535));
        if full {
            ranges.push(start..i);
            start = i;
            bytes = 0.0;
            work = 0.0;
        }
        bytes += bytes_of(start);
        work += add_work;
    }
    ranges.push(start..pairs.len());
    ranges
}

/// The datasets used by a range of pairs, concatenated, with their layout.
/// A single dataset is borrowed, not copied (10^7 observations: no host copy).
struct Uploaded<'a> {
    x: Cow<'a, [f64]>,
    offsets: Vec<i64>,
    lengths: Vec<i32>,
    centres: Vec<f64>,
    /// Index into the lists above of each pair's dataset.
    pair_dataset: Vec<i32>,
    max_n: usize,
}

fn gather<'a>(family: Family, data: &[&'a [f64]], datasets: &[usize]) -> Uploaded<'a> {
    let single = datasets.iter().all(|&d| d == datasets[0]);
    let mut up = Uploaded { x: Cow::Borrowed(&[]), offsets: vec![], lengths: vec![], centres: vec![], pair_dataset: vec![], max_n: 0 };
    let mut last = usize::MAX;
    for &d in datasets {
        if d != last {
            let x = data[d];
            up.offsets.push(up.x.len() as i64);
            up.lengths.push(x.len() as i32);
            up.centres.push(family.centre(x));
            if single {
                up.x = Cow::Borrowed(x);
            } else {
                up.x.to_mut().extend_from_slice(x);
            }
            up.max_n = up.max_n.max(x.len());
            last = d;
        }
        up.pair_dataset.push(up.lengths.len() as i32 - 1);
    }
    up
}

fn em_function(dev: &Device, config: &CheckedEmConfig, name: &str) -> Result<CudaFunction> {
    let family = match config.family {
        Family::InvGauss => 0,
        Family::Normal => 1,
    };
    dev.function("em", &[("EM_M", config.components as i64), ("EM_FAMILY", family)], name)
}

/// Per-pair traces out of a pairs x max_iters buffer, each as long as its
/// pair's iterations.
fn split_trace(trace: &[f64], iterations: &[i32], max_iters: usize) -> Vec<Vec<f64>> {
    iterations
        .iter()
        .enumerate()
        .map(|(p, &it)| trace[p * max_iters..p * max_iters + (it.max(0) as usize).min(max_iters)].to_vec())
        .collect()
}

/// A launch of em_warp prepared on the host (no device work yet).
struct WarpJob<'a> {
    up: Uploaded<'a>,
    block_dataset: Vec<i32>,
    block_pair0: Vec<i32>,
    block_pairs: Vec<i32>,
    init: Vec<f64>,
    no_start: Vec<Option<String>>,
    n_pairs: usize,
}

fn prepare_warp<'a>(data: &[&'a [f64]], pairs: &Pairs, range: Range<usize>, first: usize, config: &CheckedEmConfig) -> WarpJob<'a> {
    let (init, no_start) = starting_values(data, pairs, range.clone(), first, config);
    let up = gather(config.family, data, &pairs.dataset[range.clone()]);
    // Blocks: up to WARPS_PER_BLOCK consecutive pairs of one dataset.
    let (mut block_dataset, mut block_pair0, mut block_pairs) = (vec![], vec![], vec![]);
    for (i, &d) in up.pair_dataset.iter().enumerate() {
        let open = block_dataset.last() == Some(&d) && *block_pairs.last().unwrap_or(&0) < WARPS_PER_BLOCK as i32;
        if open {
            *block_pairs.last_mut().expect("open block") += 1;
        } else {
            block_dataset.push(d);
            block_pair0.push(i as i32);
            block_pairs.push(1);
        }
    }
    WarpJob { up, block_dataset, block_pair0, block_pairs, init, no_start, n_pairs: range.len() }
}

/// Device buffers of a launched em_warp, read back by [`collect_warp`]; its
/// inputs are kept until then, so nothing is freed under a running kernel.
struct WarpInFlight {
    init: Vec<f64>,
    no_start: Vec<Option<String>>,
    _inputs: (CudaSlice<f64>, CudaSlice<i64>, [CudaSlice<i32>; 4], CudaSlice<f64>, CudaSlice<f64>),
    params: CudaSlice<f64>,
    loglik: CudaSlice<f64>,
    iterations: CudaSlice<i32>,
    status: CudaSlice<i32>,
    trace: Option<CudaSlice<f64>>,
}

fn launch_warp(dev: &Device, job: WarpJob, config: &CheckedEmConfig, record_trace: bool) -> Result<WarpInFlight> {
    let nstat = 3 * config.components;
    let n_pairs = job.n_pairs;
    let smem = (16 * job.up.max_n) as u32;
    let f = em_function(dev, config, "em_warp")?;
    f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
        .map_err(|e| dev.err("raising the shared-memory limit", e))?;
    let s = &dev.stream;
    let e = |what: &str| { let what = what.to_string(); move |err| dev.err(&what, err) };
    let d_x = s.clone_htod(&job.up.x[..]).map_err(e("copying data"))?;
    let d_off = s.clone_htod(&job.up.offsets).map_err(e("copying data"))?;
    let d_len = s.clone_htod(&job.up.lengths).map_err(e("copying data"))?;
    let d_cen = s.clone_htod(&job.up.centres).map_err(e("copying data"))?;
    let d_bd = s.clone_htod(&job.block_dataset).map_err(e("copying data"))?;
    let d_bp0 = s.clone_htod(&job.block_pair0).map_err(e("copying data"))?;
    let d_bp = s.clone_htod(&job.block_pairs).map_err(e("copying data"))?;
    let d_init = s.clone_htod(&job.init).map_err(e("copying starts"))?;
    let mut out = WarpInFlight {
        init: job.init,
        no_start: job.no_start,
        _inputs: (d_x, d_off, [d_len, d_bd, d_bp0, d_bp], d_cen, d_init),
        params: s.alloc_zeros::<f64>(n_pairs * nstat).map_err(e("allocating results"))?,
        loglik: s.alloc_zeros::<f64>(n_pairs).map_err(e("allocating results"))?,
        iterations: s.alloc_zeros::<i32>(n_pairs).map_err(e("allocating results"))?,
        status: s.alloc_zeros::<i32>(n_pairs).map_err(e("allocating results"))?,
        trace: None,
    };
    if record_trace {
        out.trace = Some(s.alloc_zeros::<f64>(n_pairs * config.max_iters).map_err(e("allocating the trace"))?);
    }
    let (max_iters, epsilon) = (config.max_iters as i32, config.epsilon);
    let cfg = LaunchConfig { grid_dim: (job.block_dataset.len() as u32, 1, 1), block_dim: (32 * WARPS_PER_BLOCK as u32, 1, 1), shared_mem_bytes: smem };
    let null_trace: u64 = 0;
    let inputs = &out._inputs;
    let mut launch = s.launch_builder(&f);
    launch
        .arg(&inputs.0).arg(&inputs.1).arg(&inputs.2[0]).arg(&inputs.3).arg(&inputs.2[1]).arg(&inputs.2[2]).arg(&inputs.2[3]).arg(&inputs.4)
        .arg(&mut out.params).arg(&mut out.loglik).arg(&mut out.iterations).arg(&mut out.status);
    match out.trace.as_mut() {
        Some(t) => launch.arg(t),
        None => launch.arg(&null_trace),
    };
    launch.arg(&max_iters).arg(&epsilon);
    // SAFETY: the arguments match em_warp's parameter list in kernels/em.cu
    // in order and type (a null pointer for the trace when none is kept);
    // every buffer holds the elements the kernel indexes (blocks, pairs x 3M
    // params, pairs x max_iters trace, the datasets' observations at their
    // offsets), and shared memory holds max_n pairs of doubles. The inputs
    // live in `out` until the results are read.
    unsafe { launch.launch(cfg) }.map_err(e("launching em_warp"))?;
    Ok(out)
}

fn collect_warp(dev: &Device, out: WarpInFlight, config: &CheckedEmConfig) -> Result<Outputs> {
    let s = &dev.stream;
    let e = |what: &str| { let what = what.to_string(); move |err| dev.err(&what, err) };
    let iterations = s.clone_dtoh(&out.iterations).map_err(e("reading results"))?;
    let trace = match &out.trace {
        Some(t) => split_trace(&s.clone_dtoh(t).map_err(e("reading the trace"))?, &iterations, config.max_iters),
        None => vec![],
    };
    Ok(Outputs {
        init: out.init,
        no_start: out.no_start,
        params: s.clone_dtoh(&out.params).map_err(e("reading results"))?,
        loglik: s.clone_dtoh(&out.loglik).map_err(e("reading results"))?,
        status: s.clone_dtoh(&out.status).map_err(e("reading results"))?,
        iterations,
        trace,
    })
}

fn run_grid(dev: &Device, data: &[&[f64]], pairs: &Pairs, range: Range<usize>, first: usize, config: &CheckedEmConfig, monitor: &Monitor) -> Result<Outputs> {
    let nstat = 3 * config.components;
    let state_len = nstat + 4;
    let partial_len = nstat + 2;
    let up = gather(config.family, data, &pairs.dataset[range.clone()]);
    let n_pairs = range.len();
    let per_pair_blocks = up.max_n.div_ceil(LARGE_THREADS as usize * 4);
    let wanted = (8 * dev.multiprocessors as usize).div_ceil(n_pairs).max(1);
    let blocks_x = per_pair_blocks.min(wanted).max(1);
    let partial_fn = em_function(dev, config, "em_partial")?;
    let update_fn = em_function(dev, config, "em_update")?;

    let (init, no_start) = starting_values(data, pairs, range.clone(), first, config);
    let mut state = vec![0.0f64; n_pairs * state_len];
    for (p, init) in init.chunks(nstat).enumerate() {
        state[p * state_len..p * state_len + nstat].copy_from_slice(init);
    }
    let s = &dev.stream;
    let e = |what: &str| { let what = what.to_string(); move |err| dev.err(&what, err) };
    let d_x = s.clone_htod(&up.x[..]).map_err(e("copying data"))?;
    let d_off = s.clone_htod(&up.offsets).map_err(e("copying data"))?;
    let d_len = s.clone_htod(&up.lengths).map_err(e("copying data"))?;
    let d_cen = s.clone_htod(&up.centres).map_err(e("copying data"))?;
    let d_pd = s.clone_htod(&up.pair_dataset).map_err(e("copying data"))?;
    let pair_global: Vec<i32> = (0..n_pairs as i32).collect();
    let d_pg = s.clone_htod(&pair_global).map_err(e("copying data"))?;
    let mut d_state = s.clone_htod(&state).map_err(e("copying starts"))?;
    let mut d_partial = s.alloc_zeros::<f64>(n_pairs * blocks_x * partial_len).map_err(e("allocating sums"))?;
    let mut d_trace = s.alloc_zeros::<f64>(n_pairs * config.max_iters).map_err(e("allocating the trace"))?;
    let (max_iters, epsilon, bpp) = (config.max_iters as i32, config.epsilon, blocks_x as i32);
    let partial_cfg = LaunchConfig { grid_dim: (blocks_x as u32, n_pairs as u32, 1), block_dim: (LARGE_THREADS, 1, 1), shared_mem_bytes: 0 };
    let update_cfg = LaunchConfig { grid_dim: (n_pairs as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    for iter in 0..=config.max_iters {
        let first = (iter == 0) as i32;
        let mut launch = s.launch_builder(&partial_fn);
        launch.arg(&d_x).arg(&d_off).arg(&d_len).arg(&d_cen).arg(&d_pd).arg(&d_state).arg(&mut d_partial).arg(&first);
        // SAFETY: arguments match em_partial in kernels/em.cu; partial holds
        // pairs x blocks_x x (3M + 2) doubles, state pairs x (3M + 4).
        unsafe { launch.launch(partial_cfg) }.map_err(e("launching em_partial"))?;
        let mut launch = s.launch_builder(&update_fn);
        launch.arg(&d_len).arg(&d_cen).arg(&d_pd).arg(&mut d_state).arg(&d_partial).arg(&bpp).arg(&mut d_trace).arg(&d_pg).arg(&max_iters).arg(&epsilon);
        // SAFETY: arguments match em_update in kernels/em.cu; the trace holds
        // pairs x max_iters doubles and pair_global maps pairs to its rows.
        unsafe { launch.launch(update_cfg) }.map_err(e("launching em_update"))?;
        if iter % CHECK_EVERY == CHECK_EVERY - 1 {
            let now = s.clone_dtoh(&d_state).map_err(e("reading progress"))?;
            if now.chunks(state_len).all(|st| st[nstat + 3] as i32 != ST_RUNNING) {
                break;
            }
            monitor.check()?;
        }
    }
    let state = s.clone_dtoh(&d_state).map_err(e("reading results"))?;
    let trace = s.clone_dtoh(&d_trace).map_err(e("reading the trace"))?;
    let mut out = Outputs { init, no_start, ..Outputs::default() };
    for st in state.chunks(state_len) {
        out.params.extend_from_slice(&st[..nstat]);
        out.loglik.push(st[nstat]);
        out.iterations.push(st[nstat + 2].max(0.0) as i32);
        out.status.push(match st[nstat + 3] as i32 {
            ST_RUNNING => ST_MAX_ITERS,
            other => other,
        });
    }
    out.trace = split_trace(&trace, &out.iterations, config.max_iters);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::em::EmConfig;

    #[test]
    fn launches_cover_every_pair_within_the_memory_budget() {
        let data: Vec<Vec<f64>> = (0..50).map(|d| vec![1.0; 100 + 37 * d]).collect();
        let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
        let config = EmConfig::new(Family::InvGauss, 2).random_inits(7).max_iters(30).check().unwrap();
        let mut pairs = Pairs::default();
        (0..50).for_each(|d| (0..7).for_each(|s| pairs.push(d, s)));
        for budget in [1.0, 20_000.0, 100_000.0, 1e12] {
            let ranges = plan_ranges(&refs, &pairs, &config, Kernel::Warp, true, budget);
            assert_eq!(ranges.first().map(|r| r.start), Some(0));
            assert_eq!(ranges.last().map(|r| r.end), Some(pairs.len()));
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start && !w[0].is_empty()));
            for r in &ranges {
                let mut datasets: Vec<usize> = pairs.dataset[r.clone()].to_vec();
                datasets.dedup();
                let bytes: usize = datasets.iter().map(|&d| 8 * data[d].len()).sum::<usize>() + r.len() * 8 * (6 + 8 + 30);
                assert!(bytes as f64 <= budget || r.len() == 1, "budget {budget}: {} bytes in {r:?}", bytes);
            }
            if budget == 1e12 {
                assert_eq!(ranges.len(), 1);
            }
        }
    }
}
