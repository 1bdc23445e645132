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

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use crate::error::{Error, Result};
use crate::exec::{Exec, Monitor};
use crate::gpu::{self, Device};

use super::config::CheckedEmConfig;
use super::cpu;
use super::data::{unfittable_reason, Prepared};
use super::family::{Family, EMPTY_COMPONENT};
use super::fit::{FitStatus, MixFit, MixParams, StartFit};
use super::starts::initial_values;

/// Largest M with a GPU kernel; larger mixtures run on the CPU backend.
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

/// One (dataset, start) to run.
struct Pair {
    dataset: usize,
    start: usize,
    init: MixParams,
}

/// What a kernel returns for one pair.
struct PairResult {
    params: Vec<f64>,
    loglik: f64,
    iterations: usize,
    status: i32,
    trace: Vec<f64>,
}

/// Fit every dataset on the usable CUDA devices.
pub fn fit_many(data: &[&[f64]], config: &CheckedEmConfig, exec: &Exec) -> Result<Vec<MixFit>> {
    if config.components > MAX_GPU_COMPONENTS {
        return cpu::fit_many(data, config, exec);
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
    let mut starts: Vec<Vec<Option<StartFit>>> = vec![vec![None; n_starts]; data.len()];
    let (mut small, mut large) = (Vec::new(), Vec::new());
    for (i, x) in data.iter().enumerate() {
        if let Some(why) = unfittable_reason(x, m) {
            starts[i].iter_mut().for_each(|s| *s = Some(StartFit::failed(m, MixParams::nan(m), 0, why.clone())));
            continue;
        }
        for s in 0..n_starts {
            match initial_values(config, x, first + i, s) {
                Ok(init) => {
                    let pair = Pair { dataset: i, start: s, init };
                    if x.len() <= small_max { small.push(pair) } else { large.push(pair) }
                }
                Err(why) => starts[i][s] = Some(StartFit::failed(m, MixParams::nan(m), 0, why)),
            }
        }
    }
    for (pairs, kernel) in [(&small, Kernel::Warp), (&large, Kernel::Grid)] {
        for chunk in plan_launches(dev, data, pairs, config, kernel)? {
            monitor.check()?;
            let results = match kernel {
                Kernel::Warp => run_warp(dev, data, &pairs[chunk.clone()], config)?,
                Kernel::Grid => run_grid(dev, data, &pairs[chunk.clone()], config, monitor)?,
            };
            for (pair, r) in pairs[chunk].iter().zip(results) {
                starts[pair.dataset][pair.start] = Some(start_fit(config.family, m, pair.init.clone(), r));
            }
        }
    }
    let fits = data
        .iter()
        .zip(starts)
        .map(|(x, s)| {
            let mut fit = MixFit::best_of(s.into_iter().map(|s| s.expect("every start was run")).collect(), x.len());
            if config.keep_posterior && fit.success() {
                fit.posterior = Some(cpu::posterior(config.family, &Prepared::new(config.family, x), &fit.params));
            }
            monitor.add_done(1);
            fit
        })
        .collect();
    Ok(fits)
}

fn start_fit(family: Family, m: usize, init: MixParams, r: PairResult) -> StartFit {
    let params = MixParams { alpha: r.params[..m].to_vec(), mu: r.params[m..2 * m].to_vec(), scale: r.params[2 * m..].to_vec() };
    let status = match r.status {
        ST_CONVERGED => FitStatus::Converged,
        ST_MAX_ITERS => FitStatus::MaxIters,
        code => {
            let iter = r.iterations;
            let why = match code {
                ST_BAD_START => "the starting values give a non-finite log-likelihood".to_string(),
                ST_EMPTY => format!("{EMPTY_COMPONENT} at iteration {iter}"),
                ST_COLLAPSED => format!("{} at iteration {iter}", family.collapse_text()),
                _ => format!("the log-likelihood became non-finite at iteration {iter}"),
            };
            return StartFit::failed(m, init, iter, why);
        }
    };
    StartFit { params, init, loglik: r.loglik, iterations: r.iterations, status, message: None, trace: r.trace }
}

#[derive(Clone, Copy, PartialEq)]
enum Kernel {
    Warp,
    Grid,
}

/// Consecutive ranges of pairs, each small enough for one launch.
fn plan_launches(dev: &Device, data: &[&[f64]], pairs: &[Pair], config: &CheckedEmConfig, kernel: Kernel) -> Result<Vec<Range<usize>>> {
    if pairs.is_empty() {
        return Ok(vec![]);
    }
    let budget = dev.free_memory()? as f64 * MEMORY_SHARE;
    let per_pair = (8 * (3 * config.components + 8 + config.max_iters)) as f64;
    let mut ranges = Vec::new();
    let (mut start, mut bytes, mut work) = (0usize, 0f64, 0f64);
    for (i, p) in pairs.iter().enumerate() {
        let n = data[p.dataset].len() as f64;
        let add_work = n * config.max_iters as f64;
        // A pair brings its dataset along when it is the first of it in a launch.
        let bytes_of = |start: usize| per_pair + if i == start || pairs[i - 1].dataset != p.dataset { 8.0 * n } else { 0.0 };
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
    Ok(ranges)
}

/// The datasets used by `pairs`, concatenated, with their layout. A single
/// dataset is borrowed, not copied (10^7 observations: no host copy).
struct Uploaded<'a> {
    x: Cow<'a, [f64]>,
    offsets: Vec<i64>,
    lengths: Vec<i32>,
    centres: Vec<f64>,
    /// Index into the lists above of each pair's dataset.
    pair_dataset: Vec<i32>,
    max_n: usize,
}

fn gather<'a>(family: Family, data: &[&'a [f64]], pairs: &[Pair]) -> Uploaded<'a> {
    let single = pairs.iter().all(|p| p.dataset == pairs[0].dataset);
    let mut up = Uploaded { x: Cow::Borrowed(&[]), offsets: vec![], lengths: vec![], centres: vec![], pair_dataset: vec![], max_n: 0 };
    let mut last = usize::MAX;
    for p in pairs {
        if p.dataset != last {
            let x = data[p.dataset];
            up.offsets.push(up.x.len() as i64);
            up.lengths.push(x.len() as i32);
            up.centres.push(family.centre(x));
            if single {
                up.x = Cow::Borrowed(x);
            } else {
                up.x.to_mut().extend_from_slice(x);
            }
            up.max_n = up.max_n.max(x.len());
            last = p.dataset;
        }
        up.pair_dataset.push(up.lengths.len() as i32 - 1);
    }
    up
}

fn flat_inits(pairs: &[Pair]) -> Vec<f64> {
    pairs.iter().flat_map(|p| p.init.alpha.iter().chain(&p.init.mu).chain(&p.init.scale).copied()).collect()
}

fn em_function(dev: &Device, config: &CheckedEmConfig, name: &str) -> Result<CudaFunction> {
    let family = match config.family {
        Family::InvGauss => 0,
        Family::Normal => 1,
    };
    dev.function("em", &[("EM_M", config.components as i64), ("EM_FAMILY", family)], name)
}

fn run_warp(dev: &Device, data: &[&[f64]], pairs: &[Pair], config: &CheckedEmConfig) -> Result<Vec<PairResult>> {
    let nstat = 3 * config.components;
    let up = gather(config.family, data, pairs);
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
    let warps = block_pairs.iter().copied().max().unwrap_or(1) as u32;
    let smem = (16 * up.max_n + 8 * 32) as u32;
    let f = em_function(dev, config, "em_warp")?;
    f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
        .map_err(|e| dev.err("raising the shared-memory limit", e))?;

    let s = &dev.stream;
    let e = |what: &str| { let what = what.to_string(); move |err| dev.err(&what, err) };
    let d_x = s.clone_htod(&up.x[..]).map_err(e("copying data"))?;
    let d_off = s.clone_htod(&up.offsets).map_err(e("copying data"))?;
    let d_len = s.clone_htod(&up.lengths).map_err(e("copying data"))?;
    let d_cen = s.clone_htod(&up.centres).map_err(e("copying data"))?;
    let d_bd = s.clone_htod(&block_dataset).map_err(e("copying data"))?;
    let d_bp0 = s.clone_htod(&block_pair0).map_err(e("copying data"))?;
    let d_bp = s.clone_htod(&block_pairs).map_err(e("copying data"))?;
    let d_init = s.clone_htod(&flat_inits(pairs)).map_err(e("copying starts"))?;
    let mut d_params = s.alloc_zeros::<f64>(pairs.len() * nstat).map_err(e("allocating results"))?;
    let mut d_ll = s.alloc_zeros::<f64>(pairs.len()).map_err(e("allocating results"))?;
    let mut d_iters = s.alloc_zeros::<i32>(pairs.len()).map_err(e("allocating results"))?;
    let mut d_status = s.alloc_zeros::<i32>(pairs.len()).map_err(e("allocating results"))?;
    let mut d_trace = s.alloc_zeros::<f64>(pairs.len() * config.max_iters).map_err(e("allocating the trace"))?;
    let (max_iters, epsilon) = (config.max_iters as i32, config.epsilon);
    let cfg = LaunchConfig { grid_dim: (block_dataset.len() as u32, 1, 1), block_dim: (32 * warps, 1, 1), shared_mem_bytes: smem };
    let mut launch = s.launch_builder(&f);
    launch
        .arg(&d_x).arg(&d_off).arg(&d_len).arg(&d_cen).arg(&d_bd).arg(&d_bp0).arg(&d_bp).arg(&d_init)
        .arg(&mut d_params).arg(&mut d_ll).arg(&mut d_iters).arg(&mut d_status).arg(&mut d_trace)
        .arg(&max_iters).arg(&epsilon);
    // SAFETY: the arguments match em_warp's parameter list in kernels/em.cu
    // in order and type; every buffer holds the elements the kernel indexes
    // (blocks, pairs x 3M params, pairs x max_iters trace, the datasets'
    // observations at their offsets), and shared memory holds max_n pairs
    // of doubles plus one double per warp.
    unsafe { launch.launch(cfg) }.map_err(e("launching em_warp"))?;
    let params = s.clone_dtoh(&d_params).map_err(e("reading results"))?;
    let ll = s.clone_dtoh(&d_ll).map_err(e("reading results"))?;
    let iters = s.clone_dtoh(&d_iters).map_err(e("reading results"))?;
    let status = s.clone_dtoh(&d_status).map_err(e("reading results"))?;
    let trace = s.clone_dtoh(&d_trace).map_err(e("reading the trace"))?;
    Ok((0..pairs.len())
        .map(|p| {
            let it = iters[p].max(0) as usize;
            PairResult {
                params: params[p * nstat..(p + 1) * nstat].to_vec(),
                loglik: ll[p],
                iterations: it,
                status: status[p],
                trace: trace[p * config.max_iters..p * config.max_iters + it.min(config.max_iters)].to_vec(),
            }
        })
        .collect())
}

fn run_grid(dev: &Device, data: &[&[f64]], pairs: &[Pair], config: &CheckedEmConfig, monitor: &Monitor) -> Result<Vec<PairResult>> {
    let nstat = 3 * config.components;
    let state_len = nstat + 4;
    let partial_len = nstat + 2;
    let up = gather(config.family, data, pairs);
    let n_pairs = pairs.len();
    let per_pair_blocks = up.max_n.div_ceil(LARGE_THREADS as usize * 4);
    let wanted = (8 * dev.multiprocessors as usize).div_ceil(n_pairs).max(1);
    let blocks_x = per_pair_blocks.min(wanted).max(1);
    let partial_fn = em_function(dev, config, "em_partial")?;
    let update_fn = em_function(dev, config, "em_update")?;

    let mut state = vec![0.0f64; n_pairs * state_len];
    for (p, init) in flat_inits(pairs).chunks(nstat).enumerate() {
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
    let update_cfg = LaunchConfig { grid_dim: (n_pairs as u32, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
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
    Ok(state
        .chunks(state_len)
        .enumerate()
        .map(|(p, st)| {
            let it = st[nstat + 2].max(0.0) as usize;
            let status = match st[nstat + 3] as i32 {
                ST_RUNNING => ST_MAX_ITERS,
                other => other,
            };
            PairResult {
                params: st[..nstat].to_vec(),
                loglik: st[nstat],
                iterations: it,
                status,
                trace: trace[p * config.max_iters..p * config.max_iters + it.min(config.max_iters)].to_vec(),
            }
        })
        .collect())
}
