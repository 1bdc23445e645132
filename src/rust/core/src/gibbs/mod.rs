//! Hierarchical Bayesian GLMs by Gibbs sampling, the coordinates drawn with
//! Neal's univariate slice sampler (the non-centred mu_k and tau_k by a
//! Newton step).
//!
//! ```text
//! y_gj ~ family(x_gj' beta_g + z_gj' gamma),  beta_g ~ N(mu, diag(tau^2))
//! sweep: beta_g for all g (parallel, coordinate-wise slice updates with the
//!        linear predictor cached), gamma (slice, log posterior summed in
//!        parallel), mu (conjugate normal), tau and sigma (slice, log scale),
//!        then mu and tau again non-centred (interweaving; mu by a Newton
//!        step, newton.rs, where the family's log-likelihood is concave)
//! ```
//! Chains are independent, with random streams keyed by (seed, chain,
//! sweep, block), so draws do not depend on the thread count.
//!
//! The three parallel regimes of GPU Gibbs sampling (Mahani and Sharabiani):
//! *block-parallel* (many conditionally independent parameters, each with a
//! cheap log posterior), *log-posterior-parallel* (one parameter whose log
//! posterior sums over many observations), and *both*. [`HbglmFit::plan`]
//! records which one each block used.

mod adapt;
mod chains;
pub mod covariance;
pub mod gpu;
pub mod lkj;
pub mod diagnostics;
pub mod summary;
mod factor;
mod model;
pub mod newton;
mod ordinal;
mod prior;
mod random;
mod rows;
pub mod separation;
pub mod slice;
pub mod sweep;
pub mod target;

pub use factor::{Factor, Partner};
pub use model::{Aux, Family, HbData, ScaleBounds, MAX_ABS_VALUE, SCALE_FLOOR_REL, SCALE_MAX, SCALE_MIN, SHAPE_MAX, SHAPE_MIN};
pub use prior::{default_factor_cov, CovPrior, Prior, ScalePrior};
pub use random::{stream, Block, Rng};
pub use slice::{slice_step, SliceSettings, SliceStep};
pub use sweep::{State, SweepStats, Sweeper};
pub use target::{Outcome, Shortfall, Target};

use crate::error::{Error, Result};
use crate::exec::{Backend, Exec};
use crate::memory;

/// Settings of a sampling run.
#[derive(Debug, Clone, PartialEq)]
pub struct HbglmConfig {
    pub family: Family,
    pub prior: Prior,
    /// Sweeps per chain, warmup included; with a target, the most.
    pub iter: usize,
    pub warmup: usize,
    pub chains: usize,
    pub thin: usize,
    /// Initial slice width of every coordinate.
    pub w: f64,
    /// Stepping-out limit; `None`: unlimited.
    pub m: Option<usize>,
    /// Adapt the widths during warmup.
    pub adapt: bool,
    pub seed: u64,
    /// Global index of the first chain: chain c here draws from the streams
    /// of chain first_chain + c, so chains split over several calls (future
    /// workers) give the draws of one call.
    pub first_chain: usize,
    /// Sample until the draws meet this target (checked between blocks of
    /// sweeps), at most `iter` sweeps.
    pub target: Option<Target>,
    /// From this many rows the non-centred tau_k take a Newton step, below
    /// it a slice update ([`NEWTON_TAU_ROWS`]; tests set 0 to take the step
    /// on small data).
    pub newton_tau_rows: usize,
}

/// Rows from which the interweaving's non-centred tau_k take a Newton step
/// (newton.rs) instead of a slice update, for every family but the
/// ordinal. With many rows their conditional is nearly normal and the step
/// nearly an exact draw, at two passes over the rows where a slice takes
/// five or more (the GPU, 500 groups x 500 rows: sweeps 2.04 -> 1.08 s).
/// With few it is skewed, and the slice's exact draw mixes better (20
/// groups x 100 binary rows, group sds 0.1: minimum bulk ESS of mu and tau
/// 1,117 by the slice, 914 by the step; BENCHMARKS.md).
pub const NEWTON_TAU_ROWS: usize = 1 << 15;

impl HbglmConfig {
    pub fn new(family: Family) -> Self {
        HbglmConfig { family, prior: Prior::default(), iter: 2000, warmup: 1000, chains: 4, thin: 1, w: 1.0, m: None, adapt: true, seed: 1, first_chain: 0, target: None, newton_tau_rows: NEWTON_TAU_ROWS }
    }

    pub fn check(&self) -> Result<()> {
        if self.iter == 0 {
            return Err(Error::arg("iter", "must be at least 1"));
        }
        if self.warmup >= self.iter {
            return Err(Error::arg("warmup", format!("must be less than `iter` ({}), not {}", self.iter, self.warmup)));
        }
        if self.chains == 0 {
            return Err(Error::arg("chains", "must be at least 1"));
        }
        if self.thin == 0 || self.thin > self.iter - self.warmup {
            return Err(Error::arg("thin", format!("must be between 1 and iter - warmup ({}), not {}", self.iter - self.warmup, self.thin)));
        }
        if !(self.w.is_finite() && self.w > 0.0) {
            return Err(Error::arg("slice$w", format!("must be a positive finite number, not {}", self.w)));
        }
        if self.m == Some(0) {
            return Err(Error::arg("slice$m", "must be at least 1"));
        }
        if let Some(t) = self.target {
            t.check(self.iter, self.warmup, self.thin)?;
        }
        self.prior.check()
    }

    /// `check` and what depends on the data's shape.
    pub fn check_for(&self, data: &HbData) -> Result<()> {
        self.check()?;
        self.prior.check_for(data.k, data.factors.iter().enumerate().filter(|(_, f)| f.correlated).map(|(f, fac)| (f, fac.k)))
    }

    /// Draws kept per chain (with a target, at most).
    pub fn kept(&self) -> usize {
        (self.iter - self.warmup) / self.thin
    }

    fn slice_settings(&self) -> SliceSettings {
        SliceSettings { m: self.m, ..SliceSettings::new(self.w) }
    }
}

/// Where each parameter sits in a draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub groups: usize,
    pub k: usize,
    pub p: usize,
    /// The family's auxiliary parameter is sampled: the residual sd
    /// (gaussian), the shape (negative binomial).
    pub sigma: bool,
    /// The group coefficients are correlated: their K (K - 1) / 2
    /// correlations follow sigma (tau_k are then the sqrt of Sigma's
    /// diagonal).
    pub correlated: bool,
    /// The other grouping factors' parameters, after everything else
    /// (factor by factor: L_f x k_f effects, level-major, k_f sds, then
    /// k_f (k_f - 1) / 2 correlations when its terms are correlated);
    /// they are sweep coordinates too, in the same order, after the free
    /// cut-points.
    pub factors: usize,
    /// Ordinal family: the C - 1 cut-points reported (theta_c - mu_1, after
    /// the correlations); the last C - 2 are sweep coordinates after
    /// sigma's (theta_1 is fixed). 0 otherwise.
    pub cuts: usize,
}

impl Layout {
    pub fn of(data: &HbData, config: &HbglmConfig) -> Self {
        Layout {
            groups: data.groups(),
            k: data.k,
            p: data.p,
            sigma: config.family.has_aux(),
            correlated: config.prior.cov.is_some(),
            factors: data.factors.iter().map(Factor::n_params).sum(),
            cuts: if config.family == Family::Ordinal { data.categories.saturating_sub(1) } else { 0 },
        }
    }
    /// Correlations drawn: K (K - 1) / 2 when correlated.
    pub fn n_cor(&self) -> usize {
        if self.correlated { self.k * (self.k - 1) / 2 } else { 0 }
    }
    pub fn n_params(&self) -> usize {
        self.groups * self.k + 2 * self.k + self.p + self.sigma as usize + self.n_cor() + self.cuts + self.factors
    }
    pub fn beta(&self, g: usize, k: usize) -> usize {
        g * self.k + k
    }
    pub fn mu(&self, k: usize) -> usize {
        self.groups * self.k + k
    }
    pub fn tau(&self, k: usize) -> usize {
        self.groups * self.k + self.k + k
    }
    pub fn gamma(&self, j: usize) -> usize {
        self.groups * self.k + 2 * self.k + j
    }
    pub fn sigma(&self) -> Option<usize> {
        self.sigma.then(|| self.n_params() - self.factors - self.cuts - self.n_cor() - 1)
    }
    /// Correlation number `c` (pairs (0,1), (0,2), ..., (1,2), ...).
    pub fn cor(&self, c: usize) -> usize {
        self.n_params() - self.factors - self.cuts - self.n_cor() + c
    }
    /// Reported cut-point `c` (0-based: theta_{c+1} - mu_1).
    pub fn cut(&self, c: usize) -> usize {
        self.n_params() - self.factors - self.cuts + c
    }
    /// Sampled cut-points (theta_1 is fixed).
    fn free_cuts(&self) -> usize {
        self.cuts.saturating_sub(1)
    }
    /// Slice-updated coordinates (as the sweep's widths): beta, gamma, tau,
    /// sigma, the free cut-points, the other factors' parameters; mu is
    /// drawn exactly.
    pub fn n_coords(&self) -> usize {
        self.groups * self.k + self.p + self.k + 1 + self.free_cuts() + self.factors
    }
    /// The parameter (draw index) of sweep coordinate `c`; `None` for
    /// sigma without the gaussian family.
    pub fn param_of_coord(&self, c: usize) -> Option<usize> {
        let gk = self.groups * self.k;
        if c < gk {
            Some(c)
        } else if c < gk + self.p {
            Some(self.gamma(c - gk))
        } else if c < gk + self.p + self.k {
            Some(self.tau(c - gk - self.p))
        } else if c == gk + self.p + self.k {
            self.sigma()
        } else {
            let first = gk + self.p + self.k + 1;
            if c - first < self.free_cuts() {
                return Some(self.cut(1 + c - first));
            }
            let first = first + self.free_cuts();
            (c - first < self.factors).then(|| self.n_params() - self.factors + (c - first))
        }
    }
    /// Per-parameter totals of counts given per sweep coordinate (`coord`
    /// may cycle: the GPU keeps one row of counters per chain).
    pub fn per_param(&self, by_coord: impl IntoIterator<Item = (usize, u64)>) -> Vec<u64> {
        let mut out = vec![0u64; self.n_params()];
        for (c, n) in by_coord {
            if let Some(q) = self.param_of_coord(c) {
                out[q] += n;
            }
        }
        out
    }
}

/// How one block of a sweep was parallelised.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockPlan {
    pub block: &'static str,
    /// "block-parallel", "log-posterior-parallel", "both" or "serial".
    pub regime: &'static str,
    pub detail: String,
}

/// The result of a sampling run.
#[derive(Debug, Clone)]
pub struct HbglmFit {
    /// kept x chains x parameters, iteration fastest (R's array order).
    pub draws: Vec<f64>,
    pub kept: usize,
    pub chains: usize,
    pub layout: Layout,
    /// Slice evaluations and stuck updates, summed over chains and sweeps.
    pub stats: SweepStats,
    /// Stuck slice updates of each parameter (draw order), summed over
    /// chains and sweeps (mu, drawn exactly, never sticks).
    pub stuck: Vec<u64>,
    /// The sampled range of the scales: a draw near a floor says the data
    /// pushed the scale to where the sampler truncates it.
    pub bounds: ScaleBounds,
    /// Columns of the pooled design [x z] (x first) that the data separate
    /// (binomial) or that zero counts drive to -inf (poisson): their
    /// likelihood has no maximum, so their draws follow the priors.
    /// Empty when no separation was found.
    pub separation: Vec<usize>,
    /// Sweeps run, summed over chains.
    pub sweeps: usize,
    /// With a target: the last check's diagnostics, which are those of
    /// `draws` (summaries need not compute them again).
    pub diagnostics: Option<diagnostics::Diagnostics>,
    pub plan: Vec<BlockPlan>,
    pub backend: Backend,
    /// With a target: whether it was met, after how many sweeps, and the
    /// parameters farthest from it.
    pub target: Option<Outcome>,
}

impl HbglmFit {
    /// The draws of parameter `p` of chain `c`.
    pub fn chain(&self, p: usize, c: usize) -> &[f64] {
        let start = self.kept * (c + self.chains * p);
        &self.draws[start..start + self.kept]
    }
    /// Every chain's draws of parameter `p`.
    pub fn chains_of(&self, p: usize) -> Vec<&[f64]> {
        (0..self.chains).map(|c| self.chain(p, c)).collect()
    }
    /// Posterior mean of parameter `p` over all chains.
    pub fn mean(&self, p: usize) -> f64 {
        let all = &self.draws[self.kept * self.chains * p..self.kept * self.chains * (p + 1)];
        all.iter().sum::<f64>() / all.len() as f64
    }
}

/// The CPU backend's plan for `data`.
pub fn cpu_plan(data: &HbData, family: Family) -> Vec<BlockPlan> {
    let big = (0..data.groups()).filter(|&g| data.rows(g).len() >= sweep::SPLIT_GROUP_ROWS).count();
    let beta = if big == 0 {
        BlockPlan {
            block: "beta",
            regime: "block-parallel",
            detail: format!("{} groups across CPU threads; each group's log posterior ({} rows on average) summed serially", data.groups(), data.n() / data.groups().max(1)),
        }
    } else {
        BlockPlan {
            block: "beta",
            regime: "both",
            detail: format!(
                "{} groups across CPU threads; the log posteriors of the {} groups of at least {} rows also summed in parallel chunks",
                data.groups(),
                big,
                sweep::SPLIT_GROUP_ROWS
            ),
        }
    };
    let mut plan = vec![
        beta,
        BlockPlan { block: "mu", regime: "serial", detail: "conjugate normal draw per coefficient (sums over groups in parallel)".into() },
        BlockPlan { block: "tau", regime: "serial", detail: "slice on log tau per coefficient (sums over groups in parallel)".into() },
    ];
    if data.p > 0 {
        plan.insert(1, BlockPlan { block: "gamma", regime: "log-posterior-parallel", detail: format!("log posterior summed over {} rows in parallel chunks", data.n()) });
    }
    for (f, fac) in data.factors.iter().enumerate() {
        plan.push(BlockPlan {
            block: "factor",
            regime: "block-parallel",
            detail: format!("grouping factor {}: {} levels across CPU threads, each level's rows gathered; then slice on each log sd", f + 2, fac.levels),
        });
    }
    match family {
        Family::Gaussian => plan.push(BlockPlan { block: "sigma", regime: "log-posterior-parallel", detail: "residual sum of squares in parallel chunks, then a slice on log sigma".into() }),
        Family::NegBinomial => plan.push(BlockPlan { block: "shape", regime: "log-posterior-parallel", detail: "slice on log shape, its log posterior summed over every row in parallel chunks".into() }),
        Family::Ordinal => plan.push(BlockPlan { block: "cuts", regime: "log-posterior-parallel", detail: "slice on each cut-point between its neighbours, its log posterior summed over every row in parallel chunks".into() }),
        _ => {}
    }
    plan
}

/// Work (rows x sweeps x chains) from which `use.gpu = NA` picks a usable
/// GPU. Provisional: chosen before any GPU measurement of this sampler;
/// to be set from BENCHMARKS.md once the GPU/CPU crossover is measured.
pub const GPU_MIN_WORK: f64 = 5e8;

/// The job as the one backend choice (`exec::choose_backend`) sees it:
/// work in rows x sweeps x chains; the GPU sampler indexes rows and group
/// coefficients with 32-bit integers.
pub fn job(data: &HbData, config: &HbglmConfig) -> crate::exec::Job {
    let too_big = data.n() > i32::MAX as usize || data.groups().saturating_mul(data.k) > i32::MAX as usize;
    let unsupported = if too_big {
        Some("the GPU sampler handles at most 2^31 rows and group coefficients".to_string())
    } else if data.factors.iter().any(|f| f.levels.saturating_mul(config.chains) > u32::MAX as usize / 32) {
        Some("the GPU sampler takes fewer than 2^27 / chains levels per grouping factor".to_string())
    } else if (config.prior.cov.is_some() && data.k > gpu::CORRELATED_MAX_K) || data.factors.iter().any(|f| f.correlated && f.k > gpu::CORRELATED_MAX_K) {
        Some(format!("the GPU sampler takes at most {} correlated coefficients per group or level", gpu::CORRELATED_MAX_K))
    } else {
        None
    };
    crate::exec::Job { work: data.n() as f64 * config.iter as f64 * config.chains as f64, gpu_min_work: GPU_MIN_WORK, gpu_unsupported: unsupported }
}

/// Bytes a run needs besides the data: the draws (the core's array, R's
/// copy of it and the array R builds from that; on the GPU also the host
/// copy in the device's order) and each chain's state.
pub fn memory_needed(data: &HbData, config: &HbglmConfig, backend: Backend) -> u128 {
    let layout = Layout::of(data, config);
    let np = layout.n_params();
    let copies: u128 = if backend == Backend::Cuda { 4 } else { 3 };
    let draws = memory::bytes::<f64>(&[config.kept(), config.chains, np]).saturating_mul(copies);
    // eta and the interweaving's scratch (per row and per group), widths
    // and moves (3 per coordinate with the stuck counts, and of the 2K
    // non-centred updates), the draws' slice handles.
    let per_chain = memory::bytes::<f64>(&[config.chains, 2 * data.n() + data.groups() + 3 * (layout.n_coords() + 2 * data.k) + np])
        .saturating_add(memory::bytes::<&[f64]>(&[config.chains, np]));
    draws.saturating_add(per_chain)
}

/// Refuse a run whose draws would not fit in memory, naming its sizes.
pub fn check_memory(data: &HbData, config: &HbglmConfig, backend: Backend) -> Result<()> {
    let np = Layout::of(data, config).n_params();
    memory::ensure(
        || {
            format!(
                "hbglm() with iter = {}, warmup = {}, thin = {} and chains = {} ({} kept draws x {} chains x {} parameters)",
                config.iter,
                config.warmup,
                config.thin,
                config.chains,
                config.kept(),
                config.chains,
                np
            )
        },
        memory_needed(data, config, backend),
    )
}

/// Sample the posterior of a hierarchical GLM: every chain, on `exec`'s
/// backend. Data, settings and the memory the draws need are checked
/// first; for the binomial and poisson families the pooled data are
/// checked for separation (recorded in [`HbglmFit::separation`]).
pub fn sample(data: &HbData, config: &HbglmConfig, exec: &Exec) -> Result<HbglmFit> {
    config.check_for(data)?;
    data.check_family(config.family)?;
    check_memory(data, config, exec.backend)?;
    let separated = exec.install(|| separation::separated_columns(data, config.family, &exec.monitor))??;
    let mut fit = match exec.backend {
        Backend::Cpu => chains::sample_cpu(data, config, exec)?,
        Backend::Cuda => {
            if let Some(why) = job(data, config).gpu_unsupported {
                return Err(Error::BackendUnavailable(why));
            }
            gpu::sample_gpu(data, config, exec, gpu::GpuOptions::default())?
        }
    };
    fit.separation = separated;
    // No draw may be NaN or infinite: the scales are bounded and the
    // likelihood's values checked, so one would be a bug; refuse it rather
    // than return it.
    if let Some(i) = fit.draws.iter().position(|v| !v.is_finite()) {
        let q = i / (fit.kept * fit.chains).max(1);
        return Err(Error::Internal(format!("a draw of parameter {} (in draw order) is {}", q + 1, fit.draws[i])));
    }
    Ok(fit)
}
