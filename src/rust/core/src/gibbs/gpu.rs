//! The Gibbs sampler on a CUDA device (kernels/gibbs.cu).
//!
//! Each sweep queues, without host synchronisation, the group updates
//! (packed tiles of 8 lanes for groups of up to `TILE8_MAX_ROWS` rows, a warp
//! per group up to `SPLIT_GROUP_ROWS` or a smaller block when warps would be
//! too few to fill the device, a block per larger group), the other
//! grouping factors' (each followed by its sds non-centred, `scalar`, as
//! the CPU's interweaving), gamma's (`scalar`: summed over the rows by the grid),
//! then one block per chain for mu, tau and sigma, which also writes the
//! kept draws into a device buffer, and last mu and tau again in the
//! non-centred parameterisation (the CPU's interweaving), the shape and the
//! cut-points (`scalar` again); the draws come back once, at the end.
//! The state stays on the device throughout. Starting values are the CPU
//! backend's; the random numbers are the device's own (Philox), so draws
//! agree with the CPU backend in distribution, not bit for bit.

use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg};

use super::sweep::{Sweeper, SPLIT_GROUP_ROWS};
use super::{BlockPlan, CovPrior, Family, HbData, HbglmConfig, HbglmFit, Layout, ScalePrior, SweepStats};
use crate::error::{Error, Result};
use crate::exec::{Backend, Exec};
use crate::gpu::{self, Device, Kernel};
use crate::tolerances::{SLICE_ADAPT_FACTOR, SLICE_ADAPT_WINDOW, SLICE_MAX_STEPS};

pub mod diagnostics;
mod draws;
mod scalar;
pub use scalar::GRID_SCALAR_ROWS;

/// Launch choices of [`sample_gpu`]; the defaults are what [`super::sample`]
/// uses, and tests and benchmarks vary them.
#[derive(Clone, Copy, Debug)]
pub struct GpuOptions {
    /// Small groups packed 4 to a warp (else a warp each).
    pub balance: bool,
    /// From this many rows on, gamma, the shape and the cut-points have
    /// their slice candidates summed by the whole grid.
    pub grid_rows: usize,
    /// mu, tau and the factors' sds also updated non-centred, as the CPU does (off: for
    /// measuring what it costs and buys).
    pub interweave: bool,
    /// Threads per (chain, group) for the groups of more than
    /// `TILE8_MAX_ROWS` and fewer than `SPLIT_GROUP_ROWS` rows: 32, a warp
    /// each (`hb_beta_tiles`); 64, 128 or 256, a block each (`hb_beta_block`);
    /// 0 chooses by [`medium_threads`].
    pub group_threads: u32,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions { balance: true, grid_rows: GRID_SCALAR_ROWS, interweave: true, group_threads: 0 }
    }
}

/// Groups of up to this many rows share a warp, 8 lanes each.
pub const TILE8_MAX_ROWS: usize = 64;
/// Most correlated coefficients per group on the GPU (HB_KMAX of
/// kernels/gibbs.cu: the kernels keep a group's K x K matrices in registers
/// and local memory).
pub const CORRELATED_MAX_K: usize = 8;
/// Threads per block (kernels/gibbs.cu assumes 256 at most).
const THREADS: u32 = 256;
/// Sweeps queued at once (then the host waits for them), at most.
const CHECK_EVERY: usize = 64;
/// Device time queued at once, about: the batch is set from the measured
/// time of the last batch's sweeps, and at most doubles from one batch to
/// the next (a sweep's cost changes while the slice widths adapt, and a
/// few big groups leave most of the device idle, so the rows alone do
/// not tell).
const CHECK_SECONDS: f64 = 0.1;

/// Sweeps to queue next, after `sweeps` sweeps took `seconds`.
fn next_batch(seconds: f64, sweeps: usize) -> usize {
    let per_sweep = seconds / sweeps.max(1) as f64;
    let fit = if per_sweep > 0.0 { (CHECK_SECONDS / per_sweep) as usize } else { CHECK_EVERY };
    fit.min(2 * sweeps).clamp(1, CHECK_EVERY)
}

/// Wait for the work queued on the device so far, looking at the
/// interrupt flag meanwhile: a cancelled call returns at once (the queued
/// sweeps still run to their end on the device, and its buffers are freed
/// in stream order after them), so a Ctrl-C is not held up by a long
/// batch or a long kernel.
fn wait_watched(dev: &Device, exec: &Exec) -> Result<()> {
    let done = dev.stream.record_event(None).map_err(|err| dev.err("running the sampler", err))?;
    let started = std::time::Instant::now();
    loop {
        if done.try_is_complete().map_err(|err| dev.err("running the sampler", err))? {
            return Ok(());
        }
        exec.monitor.check()?;
        // Spin briefly (small batches end within microseconds), then sleep.
        if started.elapsed() < std::time::Duration::from_millis(2) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Mirrors `struct HbArgs` of kernels/gibbs.cu (device pointers as u64).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct HbArgs {
    y: u64,
    x: u64,
    offsets: u64,
    g: i32,
    k: i32,
    n: i32,
    ncoord: i32,
    beta: u64,
    mu: u64,
    tau: u64,
    sigma: u64,
    eta: u64,
    widths: u64,
    moved: u64,
    sweep: i32,
    adapting: i32,
    adapt_now: i32,
    m: i32,
    adapt_factor: f64,
    adapt_window: f64,
    seed: u64,
    counters: u64,
    /// Global index of chain 0 (HbglmConfig::first_chain), for the streams.
    chain0: i32,
    /// Binomial trials per row; 0 (NULL): one trial per row.
    trials: u64,
    /// chains x ncoord stuck counts.
    stuck_by: u64,
    prec: u64,
    /// Ordinal: chains x ncuts cut-points; 0 (NULL) otherwise.
    cuts: u64,
    ncuts: i32,
    /// Ordinal: chains x ncuts, log(1 - e^(theta_{c-1} - theta_c)) for each
    /// middle category c at c - 2 (HbAux::gaps).
    gaps: u64,
    /// n: each row's group.
    row_group: u64,
    /// The last nc_coords of ncoord: the non-centred updates' widths.
    nc_coords: i32,
}

/// Mirrors `struct HbGlobal` of kernels/gibbs.cu.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct HbGlobal {
    z: u64,
    p: i32,
    gamma: u64,
    mu: u64,
    tau: u64,
    sigma: u64,
    mu_mean: f64,
    mu_sd: f64,
    gamma_sd: f64,
    tau_kind: i32,
    sigma_kind: i32,
    tau_scale: f64,
    sigma_scale: f64,
    sigma_rate: f64,
    tau_rate: f64,
    draws: u64,
    kept: i32,
    params: i32,
    draw_index: i32,
    sigma_floor: f64,
    scale_max: f64,
    aux_max: f64,
    cov: u64,
    prec: u64,
    cov_df: f64,
    cov_s0: f64,
    tau_floor: u64,
    lkj_eta: f64,
}

/// Mirrors `struct HbFactor` of kernels/gibbs.cu: one grouping factor
/// besides the groups.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct HbFactor {
    start: u64,
    rows: u64,
    w: u64,
    u: u64,
    sd: u64,
    floor: u64,
    partner: u64,
    cov: u64,
    prec: u64,
    cov_df: f64,
    cov_s0: f64,
    l: i32,
    kf: i32,
    coord: i32,
    rng_base: i32,
    draw_at: i32,
    lkj_eta: f64,
}

/// A covariance prior as the kernels take it: (df, s0 = df scale^2) of an
/// inverse-Wishart, or LKJ's eta (> 0 selects it); zeros for none.
fn cov_args(prior: Option<CovPrior>) -> (f64, f64, f64) {
    match prior {
        Some(CovPrior::InverseWishart(iw)) => (iw.df, iw.df * iw.scale * iw.scale, 0.0),
        Some(CovPrior::Lkj { eta }) => (0.0, 0.0, eta),
        None => (0.0, 0.0, 0.0),
    }
}

// SAFETY: plain #[repr(C)] structs of integers and floats whose layout
// matches the CUDA structs field for field (same order, natural alignment).
unsafe impl DeviceRepr for HbArgs {}
unsafe impl DeviceRepr for HbGlobal {}
unsafe impl DeviceRepr for HbFactor {}

/// A factor's buffers on the device (kept alive while `HbFactor` points at
/// them) and whether its levels are big enough for a block each.
struct FactorOnDevice {
    args: HbFactor,
    by_block: bool,
    _buffers: (CudaSlice<i32>, CudaSlice<i32>, CudaSlice<f64>, CudaSlice<f64>, CudaSlice<f64>, CudaSlice<f64>, CudaSlice<i32>),
    /// Correlated terms: Sigma_f and its inverse, chains x KF x KF.
    _cov: Option<(CudaSlice<f64>, CudaSlice<f64>)>,
}

/// Levels of at least this many rows get a block of THREADS each, the
/// others a warp.
const LEVEL_BLOCK_ROWS: usize = 2048;

/// hb_scale_prior's (kind, a, b).
fn scale_code(p: ScalePrior) -> (i32, f64, f64) {
    match p {
        ScalePrior::HalfCauchy(a) => (0, a, 0.0),
        ScalePrior::HalfNormal(a) => (1, a, 0.0),
        ScalePrior::Fixed(v) => (2, v, 0.0),
        ScalePrior::Gamma(a, b) => (3, a, b),
        ScalePrior::HalfT(a, df) => (4, a, df),
    }
}

fn family_code(f: Family) -> i64 {
    match f {
        Family::Gaussian => 0,
        Family::Binomial => 1,
        Family::Poisson => 2,
        Family::NegBinomial => 3,
        Family::Ordinal => 4,
    }
}

/// Rows each thread of a medium group keeps at least, when
/// [`medium_threads`] widens its group's threads.
const MIN_ROWS_PER_THREAD: usize = 4;

/// Threads per (chain, medium group): a warp, unless the warps would leave
/// the device under-filled (fewer threads than it keeps resident, three
/// blocks a multiprocessor, hb_beta_*'s launch bounds); then twice as many,
/// up to a block, while every thread keeps `MIN_ROWS_PER_THREAD` rows of
/// the smallest group. A group's slice updates are a chain of dependent
/// sums, so with few groups only more threads a group shorten it (500
/// groups x 4 chains of 500 rows: 2,000 warps on 132 multiprocessors; 64
/// threads a group took the group updates from 251 to 192 us a sweep).
pub fn medium_threads(items: usize, min_rows: usize, multiprocessors: u32) -> u32 {
    let resident = multiprocessors as usize * 3 * THREADS as usize;
    let mut t = 32u32;
    while t < THREADS && items * (t as usize) < resident && min_rows >= 2 * t as usize * MIN_ROWS_PER_THREAD {
        t *= 2;
    }
    t
}

/// Groups by launch class: (tiles of 8, warps, blocks).
pub fn classify(data: &HbData, balance: bool) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let (mut small, mut medium, mut large) = (vec![], vec![], vec![]);
    for g in 0..data.groups() {
        let rows = data.rows(g).len();
        if !balance {
            medium.push(g as i32);
        } else if rows <= TILE8_MAX_ROWS {
            small.push(g as i32);
        } else if rows < SPLIT_GROUP_ROWS {
            medium.push(g as i32);
        } else {
            large.push(g as i32);
        }
    }
    (small, medium, large)
}

/// How the GPU backend parallelises each block for `data`.
pub fn gpu_plan(data: &HbData, family: Family, balance: bool, group_threads: u32) -> Vec<BlockPlan> {
    let (s, m, l) = classify(data, balance);
    let medium = if group_threads == 32 { "in a warp each".to_string() } else { format!("in a {group_threads}-thread block each") };
    let mut plan = vec![
        BlockPlan {
            block: "beta",
            regime: "both",
            detail: format!(
                "one tile per (chain, group), its lanes summing the group's log posterior: {} groups in 8-lane tiles (4 per warp), {} {medium}, {} in a {}-thread block each",
                s.len(), m.len(), l.len(), THREADS
            ),
        },
        BlockPlan { block: "mu", regime: "log-posterior-parallel", detail: "conjugate draw; sums over groups by a block per chain".into() },
        BlockPlan { block: "tau", regime: "log-posterior-parallel", detail: "slice on log tau; sums over groups by a block per chain".into() },
    ];
    if data.p > 0 {
        plan.insert(1, BlockPlan { block: "gamma", regime: "log-posterior-parallel", detail: format!("a block per chain sums the log posterior over {} rows", data.n()) });
    }
    for (f, fac) in data.factors.iter().enumerate() {
        plan.push(BlockPlan {
            block: "factor",
            regime: "both",
            detail: format!(
                "grouping factor {}: {} levels, a warp (levels of {LEVEL_BLOCK_ROWS}+ rows: a block) per (chain, level), its lanes gathering the level's rows; then a block per chain for the sds",
                f + 2,
                fac.levels
            ),
        });
    }
    match family {
        Family::Gaussian => plan.push(BlockPlan { block: "sigma", regime: "log-posterior-parallel", detail: "residual sum of squares by a block per chain, then a slice on log sigma".into() }),
        Family::NegBinomial => plan.push(BlockPlan { block: "shape", regime: "log-posterior-parallel", detail: "slice on log shape; its log posterior summed over every row by a block per chain".into() }),
        Family::Ordinal => plan.push(BlockPlan { block: "cuts", regime: "log-posterior-parallel", detail: "a slice per free cut-point between its neighbours; its log posterior summed over every row by a block per chain".into() }),
        _ => {}
    }
    plan
}

fn ptr<T>(s: &CudaSlice<T>, dev: &Device) -> u64 {
    let (p, _sync) = s.device_ptr(&dev.stream);
    p as u64
}

/// Sample on the first usable device, laid out as `opts` says.
pub fn sample_gpu(data: &HbData, config: &HbglmConfig, exec: &Exec, opts: GpuOptions) -> Result<HbglmFit> {
    let balance = opts.balance;
    let t_setup = std::time::Instant::now();
    let dev = &gpu::devices()?[0];
    let (g, k, p, n) = (data.groups(), data.k, data.p, data.n());
    if n > i32::MAX as usize || g * k > i32::MAX as usize {
        return Err(Error::BackendUnavailable("the GPU sampler handles at most 2^31 rows and group coefficients".into()));
    }
    let layout = Layout::of(data, config);
    let (chains, kept, np) = (config.chains, config.kept(), layout.n_params());
    // The layout's coordinates, then the non-centred mu_k and tau_k's.
    let ncoord = layout.n_coords() + 2 * k;
    let defines = [("HB_FAMILY", family_code(config.family))];
    let f_tiles = dev.function(Kernel::HbBetaTiles, &defines)?;
    let f_block = dev.function(Kernel::HbBetaBlock, &defines)?;
    let f_global = dev.function(Kernel::HbGlobal, &defines)?;
    let f_levels_warp = dev.function(Kernel::HbLevelsWarp, &defines)?;
    let f_levels_block = dev.function(Kernel::HbLevelsBlock, &defines)?;
    let f_factor_global = dev.function(Kernel::HbFactorGlobal, &defines)?;
    let s = &dev.stream;
    let e = |what: &'static str| move |err| dev.err(what, err);

    // Starting values: the CPU backend's, chain by chain.
    let (mut beta, mut gamma, mut mu, mut tau, mut sigma, mut eta) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut cov, mut prec, mut cuts) = (vec![], vec![], vec![]);
    let nf = data.factors.len();
    let (mut u, mut sd): (Vec<Vec<f64>>, Vec<Vec<f64>>) = (vec![vec![]; nf], vec![vec![]; nf]);
    let (mut fcov, mut fprec): (Vec<Vec<f64>>, Vec<Vec<f64>>) = (vec![vec![]; nf], vec![vec![]; nf]);
    for c in 0..chains {
        let sw = Sweeper { data, family: config.family, prior: &config.prior, slice: config.slice_settings(), seed: config.seed, chain: config.first_chain + c, balance, newton_tau_rows: config.newton_tau_rows };
        let st = sw.init(config.w);
        beta.extend(st.beta);
        gamma.extend(st.gamma);
        mu.extend(st.mu);
        tau.extend(st.tau);
        sigma.push(st.sigma);
        eta.extend(st.eta);
        cov.extend(st.cov);
        prec.extend(st.prec);
        cuts.extend(st.cuts);
        for (f, (uf, sf)) in st.u.into_iter().zip(st.sd).enumerate() {
            u[f].extend(uf);
            sd[f].extend(sf);
        }
        for (f, (cf, pf)) in st.factor_cov.into_iter().zip(st.factor_prec).enumerate() {
            fcov[f].extend(cf);
            fprec[f].extend(pf);
        }
    }
    let correlated = config.prior.cov.is_some();
    if (correlated && k > CORRELATED_MAX_K) || data.factors.iter().any(|f| f.correlated && f.k > CORRELATED_MAX_K) {
        return Err(Error::BackendUnavailable(format!("the GPU sampler takes at most {CORRELATED_MAX_K} correlated coefficients per group or level")));
    }
    let d_cov = if correlated { Some(s.clone_htod(&cov).map_err(e("copying the state"))?) } else { None };
    let d_prec = if correlated { Some(s.clone_htod(&prec).map_err(e("copying the state"))?) } else { None };
    let ncuts = cuts.len() / chains.max(1);
    let d_cuts = if ncuts > 0 { Some(s.clone_htod(&cuts).map_err(e("copying the state"))?) } else { None };
    let gaps: Vec<f64> = cuts.chunks(ncuts.max(1)).flat_map(|t| (0..t.len()).map(|i| if i + 1 < t.len() { (-(t[i] - t[i + 1]).exp_m1()).ln() } else { 0.0 })).collect();
    let d_gaps = if ncuts > 0 { Some(s.clone_htod(&gaps).map_err(e("copying the state"))?) } else { None };
    let offsets: Vec<i64> = data.offsets.iter().map(|&o| o as i64).collect();
    let d_y = s.clone_htod(&data.y).map_err(e("copying data"))?;
    // By column: a coordinate's slice update reads one column of its group's
    // rows, contiguous this way (by row, a warp's reads spanned K times the
    // sectors).
    let x_by_column: Vec<f64> = (0..k).flat_map(|j| data.x.iter().skip(j).step_by(k).copied()).collect();
    let d_x = s.clone_htod(&x_by_column).map_err(e("copying data"))?;
    let d_z = if p > 0 { s.clone_htod(&data.z).map_err(e("copying data"))? } else { s.alloc_zeros::<f64>(1).map_err(e("allocating"))? };
    let d_off = s.clone_htod(&offsets).map_err(e("copying data"))?;
    let row_group: Vec<i32> = (0..g).flat_map(|q| std::iter::repeat_n(q as i32, data.offsets[q + 1] - data.offsets[q])).collect();
    let d_row_group = s.clone_htod(&row_group).map_err(e("copying data"))?;
    let d_beta = s.clone_htod(&beta).map_err(e("copying the state"))?;
    let d_gamma = if p > 0 { s.clone_htod(&gamma).map_err(e("copying the state"))? } else { s.alloc_zeros::<f64>(1).map_err(e("allocating"))? };
    let d_mu = s.clone_htod(&mu).map_err(e("copying the state"))?;
    let d_tau = s.clone_htod(&tau).map_err(e("copying the state"))?;
    let d_sigma = s.clone_htod(&sigma).map_err(e("copying the state"))?;
    let d_eta = s.clone_htod(&eta).map_err(e("copying the state"))?;
    let d_w = s.clone_htod(&vec![config.w; chains * ncoord]).map_err(e("copying the state"))?;
    let d_moved = s.alloc_zeros::<f64>(chains * ncoord).map_err(e("allocating"))?;
    let d_counters = s.alloc_zeros::<u64>(4).map_err(e("allocating"))?;
    let d_stuck = s.alloc_zeros::<u64>(chains * ncoord).map_err(e("allocating"))?;
    let d_trials = if data.trials.is_empty() { None } else { Some(s.clone_htod(&data.trials).map_err(e("copying data"))?) };
    let bounds = data.scale_bounds(config.family);
    let d_tau_floor = s.clone_htod(&bounds.tau_floor).map_err(e("copying data"))?;
    // With a target, room for the first check's draws (`draws` grows it).
    let first = config.target.map_or(kept, |t| t.first.saturating_sub(config.warmup) / config.thin);
    let draws = draws::Draws::new(dev, chains, np, first, kept, dev.function(Kernel::HbDrawsOrder, &defines)?)?;
    let (small, medium, large) = classify(data, balance);
    let d_small = s.clone_htod(&small[..].iter().copied().chain([0]).collect::<Vec<_>>()).map_err(e("copying groups"))?;
    let d_medium = s.clone_htod(&medium[..].iter().copied().chain([0]).collect::<Vec<_>>()).map_err(e("copying groups"))?;
    let d_large = s.clone_htod(&large[..].iter().copied().chain([0]).collect::<Vec<_>>()).map_err(e("copying groups"))?;
    let medium_rows = medium.iter().map(|&g| data.rows(g as usize).len()).min().unwrap_or(0);
    let group_threads = match opts.group_threads {
        0 => medium_threads(medium.len() * chains, medium_rows, dev.multiprocessors),
        t @ (32 | 64 | 128 | 256) => t,
        t => return Err(Error::InvalidArgument { arg: "group_threads", problem: format!("must be 0, 32, 64, 128 or 256, not {t}") }),
    };

    let args = HbArgs {
        y: ptr(&d_y, dev),
        x: ptr(&d_x, dev),
        offsets: ptr(&d_off, dev),
        g: g as i32,
        k: k as i32,
        n: n as i32,
        ncoord: ncoord as i32,
        beta: ptr(&d_beta, dev),
        mu: ptr(&d_mu, dev),
        tau: ptr(&d_tau, dev),
        sigma: ptr(&d_sigma, dev),
        eta: ptr(&d_eta, dev),
        widths: ptr(&d_w, dev),
        moved: ptr(&d_moved, dev),
        m: config.m.unwrap_or(SLICE_MAX_STEPS).clamp(1, SLICE_MAX_STEPS) as i32,
        adapt_factor: SLICE_ADAPT_FACTOR,
        adapt_window: SLICE_ADAPT_WINDOW as f64,
        seed: config.seed,
        counters: ptr(&d_counters, dev),
        chain0: config.first_chain as i32,
        trials: d_trials.as_ref().map_or(0, |t| ptr(t, dev)),
        stuck_by: ptr(&d_stuck, dev),
        prec: d_prec.as_ref().map_or(0, |b| ptr(b, dev)),
        cuts: d_cuts.as_ref().map_or(0, |b| ptr(b, dev)),
        ncuts: ncuts as i32,
        gaps: d_gaps.as_ref().map_or(0, |b| ptr(b, dev)),
        row_group: ptr(&d_row_group, dev),
        nc_coords: 2 * k as i32,
        ..Default::default()
    };
    let (tau_kind, tau_scale, tau_rate) = scale_code(config.prior.tau);
    // The auxiliary parameter: sigma (gaussian) or the shape (negative binomial).
    let (aux_prior, aux_max) = if config.family == Family::NegBinomial { (config.prior.shape, super::model::SHAPE_MAX) } else { (config.prior.sigma, super::SCALE_MAX) };
    let (sigma_kind, sigma_scale, sigma_rate) = scale_code(aux_prior);
    let global = HbGlobal {
        z: ptr(&d_z, dev),
        p: p as i32,
        gamma: ptr(&d_gamma, dev),
        mu: args.mu,
        tau: args.tau,
        sigma: args.sigma,
        mu_mean: config.prior.mu_mean,
        mu_sd: config.prior.mu_sd,
        gamma_sd: config.prior.gamma_sd,
        tau_kind,
        sigma_kind,
        tau_scale,
        sigma_scale,
        sigma_rate,
        tau_rate,
        draws: draws.ptr(dev),
        kept: draws.cap as i32,
        params: np as i32,
        draw_index: -1,
        sigma_floor: bounds.sigma_floor,
        scale_max: super::SCALE_MAX,
        aux_max,
        tau_floor: ptr(&d_tau_floor, dev),
        cov: d_cov.as_ref().map_or(0, |b| ptr(b, dev)),
        prec: d_prec.as_ref().map_or(0, |b| ptr(b, dev)),
        cov_df: cov_args(config.prior.cov).0,
        cov_s0: cov_args(config.prior.cov).1,
        lkj_eta: cov_args(config.prior.cov).2,
    };

    // The other grouping factors: their rows by level, columns, state.
    let mut factors = Vec::with_capacity(data.factors.len());
    let (mut coord, mut rng_base, mut draw_at) = (g * k + p + k + 1 + data.free_cuts(), g + 1, np - layout.factors);
    for (f, fac) in data.factors.iter().enumerate() {
        let to_i32 = |v: &[usize]| v.iter().map(|&i| i as i32).collect::<Vec<i32>>();
        let partner: Vec<i32> = fac
            .partner
            .iter()
            .flat_map(|p| match p {
                None => [0, 0],
                Some(super::Partner::Groups(q)) => [1, *q as i32],
                Some(super::Partner::Global(q)) => [2, *q as i32],
            })
            .collect();
        let bufs = (
            s.clone_htod(&to_i32(&fac.start)).map_err(e("copying data"))?,
            s.clone_htod(&to_i32(&fac.by_level)).map_err(e("copying data"))?,
            s.clone_htod(&fac.w).map_err(e("copying data"))?,
            s.clone_htod(&u[f]).map_err(e("copying the state"))?,
            s.clone_htod(&sd[f]).map_err(e("copying the state"))?,
            s.clone_htod(&bounds.factor_floor[f]).map_err(e("copying data"))?,
            s.clone_htod(&partner).map_err(e("copying data"))?,
        );
        let cov_bufs = if fac.correlated { Some((s.clone_htod(&fcov[f]).map_err(e("copying the state"))?, s.clone_htod(&fprec[f]).map_err(e("copying the state"))?)) } else { None };
        let (cov_df, cov_s0, lkj_eta) = cov_args(Some(config.prior.factor_cov(f, fac.k)));
        let args = HbFactor {
            start: ptr(&bufs.0, dev),
            rows: ptr(&bufs.1, dev),
            w: ptr(&bufs.2, dev),
            u: ptr(&bufs.3, dev),
            sd: ptr(&bufs.4, dev),
            floor: ptr(&bufs.5, dev),
            partner: ptr(&bufs.6, dev),
            cov: cov_bufs.as_ref().map_or(0, |b| ptr(&b.0, dev)),
            prec: cov_bufs.as_ref().map_or(0, |b| ptr(&b.1, dev)),
            cov_df,
            cov_s0,
            l: fac.levels as i32,
            kf: fac.k as i32,
            coord: coord as i32,
            rng_base: rng_base as i32,
            draw_at: draw_at as i32,
            lkj_eta,
        };
        let by_block = (0..fac.levels).any(|l| fac.start[l + 1] - fac.start[l] >= LEVEL_BLOCK_ROWS);
        factors.push(FactorOnDevice { args, by_block, _buffers: bufs, _cov: cov_bufs });
        coord += fac.n_params();
        rng_base += fac.levels + 1;
        draw_at += fac.n_params();
    }
    let on_device: Vec<(HbFactor, &[f64])> = factors.iter().zip(&bounds.factor_floor).map(|(f, floors)| (f.args, &floors[..])).collect();
    let scalars = scalar::Scalars::new(dev, &defines, data, config, &layout, chains, rng_base, opts, &on_device)?;

    let tiles = |count: usize, tile: u32| -> LaunchConfig {
        let threads = (count * chains) as u64 * tile as u64;
        LaunchConfig { grid_dim: (threads.div_ceil(THREADS as u64) as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
    };
    // Start with one sweep per batch, then queue as many as fit in
    // CHECK_SECONDS of device time.
    let mut run = (args, global, 1usize, draws);
    let kept_by = |t: usize| t.saturating_sub(config.warmup) / config.thin;
    let sweep = |(args, global, batch, draws): &mut (HbArgs, HbGlobal, usize, draws::Draws), from: usize, to: usize| -> Result<()> {
        if draws.ensure(dev, kept_by(to), kept_by(from))? {
            global.draws = draws.ptr(dev);
            global.kept = draws.cap as i32;
        }
        let (mut queued, mut since) = (0usize, std::time::Instant::now());
        for t in from..to {
            let adapting = config.adapt && t < config.warmup;
            args.sweep = t as i32;
            args.adapting = adapting as i32;
            args.adapt_now = (adapting && (t + 1) % SLICE_ADAPT_WINDOW == 0) as i32;
            global.draw_index = if t >= config.warmup && (t - config.warmup + 1) % config.thin == 0 { ((t - config.warmup + 1) / config.thin - 1) as i32 } else { -1 };
            let tiled: &[(&Vec<i32>, &CudaSlice<i32>, i32)] = if group_threads == 32 { &[(&small, &d_small, 8), (&medium, &d_medium, 32)] } else { &[(&small, &d_small, 8)] };
            for &(list, d_list, tile) in tiled {
                if list.is_empty() {
                    continue;
                }
                let items = list.len() as i32;
                let chains_i = chains as i32;
                let mut launch = s.launch_builder(&f_tiles);
                launch.arg(&*args).arg(d_list).arg(&items).arg(&chains_i).arg(&tile);
                // SAFETY: the arguments match hb_beta_tiles(HbArgs, const int*,
                // int, int, int); every pointer in `args` addresses a live
                // buffer of the size the kernel indexes (rows, chains x groups x
                // K, chains x rows, chains x ncoord); the group list holds
                // `items` entries; THREADS is a multiple of the tile width.
                unsafe { launch.launch(tiles(list.len(), tile as u32)) }.map_err(e("launching hb_beta_tiles"))?;
            }
            let blocks: &[(&Vec<i32>, &CudaSlice<i32>, u32)] = if group_threads == 32 { &[(&large, &d_large, THREADS)] } else { &[(&medium, &d_medium, group_threads), (&large, &d_large, THREADS)] };
            for &(list, d_list, threads) in blocks {
                if list.is_empty() {
                    continue;
                }
                let items = list.len() as i32;
                let mut launch = s.launch_builder(&f_block);
                launch.arg(&*args).arg(d_list).arg(&items);
                let cfg = LaunchConfig { grid_dim: ((list.len() * chains) as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
                // SAFETY: as above, for hb_beta_block(HbArgs, const int*, int),
                // one block of at most 256 threads per (chain, group).
                unsafe { launch.launch(cfg) }.map_err(e("launching hb_beta_block"))?;
            }
            for (fi, fac) in factors.iter().enumerate() {
                let mut launch = s.launch_builder(if fac.by_block { &f_levels_block } else { &f_levels_warp });
                let chains_i = chains as i32;
                launch.arg(&*args).arg(&fac.args);
                let cfg = if fac.by_block {
                    LaunchConfig { grid_dim: ((fac.args.l as usize * chains) as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
                } else {
                    launch.arg(&chains_i);
                    tiles(fac.args.l as usize, 32)
                };
                // SAFETY: hb_levels_warp(HbArgs, HbFactor, int) or
                // hb_levels_block(HbArgs, HbFactor): `fac.args` points at the
                // factor's live buffers (L + 1 offsets, n rows, n x KF
                // columns, chains x L x KF effects, chains x KF sds), every
                // row index below n; one warp or block per (chain, level).
                unsafe { launch.launch(cfg) }.map_err(e("launching hb_levels"))?;
                let mut launch = s.launch_builder(&f_factor_global);
                launch.arg(&*args).arg(&*global).arg(&fac.args);
                let cfg = LaunchConfig { grid_dim: (chains as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
                // SAFETY: hb_factor_global(HbArgs, HbGlobal, HbFactor): one
                // block per chain; the factor's draws lie within `params`
                // (draw_at + L x KF + KF <= params).
                unsafe { launch.launch(cfg) }.map_err(e("launching hb_factor_global"))?;
                scalars.queue_factor(dev, args, global, fi)?;
            }
            scalars.queue(dev, args, global, true)?;
            let mut launch = s.launch_builder(&f_global);
            launch.arg(&*args).arg(&*global);
            let cfg = LaunchConfig { grid_dim: (chains as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: hb_global(HbArgs, HbGlobal): one block per chain; `global`
            // points at live buffers (chains x P gamma, chains x K mu and tau,
            // chains sigma, chains x kept x params draws with draw_index < kept).
            unsafe { launch.launch(cfg) }.map_err(e("launching hb_global"))?;
            scalars.queue(dev, args, global, false)?;
            queued += 1;
            if queued == *batch || t + 1 == to {
                wait_watched(dev, exec)?;
                exec.monitor.add_done(chains * queued);
                *batch = next_batch(since.elapsed().as_secs_f64(), queued);
                (queued, since) = (0, std::time::Instant::now());
            }
        }
        Ok(())
    };
    // A check computes the diagnostics where the draws are; only three
    // numbers per parameter come back. Where the device has no room for
    // their working memory, the host computes them from a copy (a check
    // must not end a long run that it can finish).
    let diagnose = |run: &(HbArgs, HbGlobal, usize, draws::Draws), now: usize| -> Result<super::diagnostics::Diagnostics> {
        let t = std::time::Instant::now();
        let diag = match run.3.diagnose(dev, now, &exec.monitor) {
            Err(Error::OutOfMemory { .. }) => {
                let ordered = exec.install(|| run.3.read_ordered(dev, now))??;
                exec.install(|| super::diagnostics::diagnose_array(&ordered, now, chains, true, &exec.monitor))?
            }
            other => other,
        };
        gpu::timing::record("check: diagnostics", t);
        diag
    };
    dev.stream.synchronize().map_err(|err| dev.err("uploading", err))?;
    gpu::timing::record("setup and uploads", t_setup);
    let t_sweeps = std::time::Instant::now();
    let (sweeps, last) = super::target::run_blocks(config.target, config.iter, config.warmup, config.thin, &mut run, sweep, diagnose)?;
    gpu::timing::record("sweeps", t_sweeps);
    let done = (sweeps - config.warmup) / config.thin;
    let t_read = std::time::Instant::now();
    // Host buffers allocated fallibly (their size was checked up front).
    let draws = exec.install(|| run.3.read_ordered(dev, done))??;
    gpu::timing::record("draws to the host", t_read);
    let counters = s.clone_dtoh(&d_counters).map_err(e("reading the counters"))?;
    let stuck_by = s.clone_dtoh(&d_stuck).map_err(e("reading the counters"))?;
    let stuck = layout.per_param(stuck_by.iter().enumerate().map(|(i, &n)| (i % ncoord, n)).filter(|&(c, _)| c < layout.n_coords()));
    let stats = SweepStats { beta_evals: counters[0], gamma_evals: counters[1], scale_evals: counters[2], stuck: counters[3] };
    Ok(HbglmFit {
        draws,
        kept: done,
        chains,
        layout,
        stats,
        stuck,
        sweeps: sweeps * chains,
        plan: gpu_plan(data, config.family, balance, group_threads),
        backend: Backend::Cuda,
        bounds,
        separation: Vec::new(),
        target: last.as_ref().map(|(o, _)| o.clone()),
        diagnostics: last.map(|(_, d)| d),
    })
}

#[cfg(test)]
mod tests {
    use super::medium_threads;

    #[test]
    fn medium_groups_get_more_threads_only_when_their_warps_are_too_few() {
        // 132 multiprocessors keep 101,376 threads resident.
        assert_eq!(medium_threads(40_000, 100, 132), 32, "10^4 groups x 4 chains fill the device by warps");
        assert_eq!(medium_threads(2_000, 500, 132), 64, "500 groups x 4 chains: 64,000 threads by warps");
        assert_eq!(medium_threads(200, 5_000, 132), 256, "50 groups x 4 chains: as wide as a block");
        assert_eq!(medium_threads(200, 250, 132), 32, "250 rows would keep fewer than 4 a thread at 64");
        assert_eq!(medium_threads(200, 600, 132), 128, "600 rows: 4.7 a thread at 128, 2.3 at 256");
    }
}
