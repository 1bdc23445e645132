//! The scalars whose log-likelihood sums over every row: the global
//! coefficients gamma, the negative binomial's shape, the ordinal
//! cut-points, and the interweaving's non-centred mu_k and tau_k (as
//! sweep.rs's) and grouping factors' sds (as factor.rs's). Each is one
//! slice update, queued as hb_scalar_start, a few rounds of hb_scalar_eval (the grid sums every row's term at a batch of
//! candidates) and hb_scalar_decide, then hb_scalar_finish (and, where eta
//! or beta move, hb_scalar_apply and hb_scalar_groups); kernels/gibbs.cu
//! says how the batches keep the slice sampler's chain. On few rows no
//! rounds are queued and hb_scalar_finish does it all with one block per
//! chain. The non-centred mu_k, whose log density is concave for every
//! family but the ordinal, takes a Newton step instead (newton.rs): two
//! rounds of hb_newton_eval and hb_newton_decide, at any number of rows;
//! tau_k likewise on `HbglmConfig::newton_tau_rows` rows or more.

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};

use super::{ptr, GpuOptions, HbArgs, HbFactor, HbGlobal, THREADS};
use crate::error::Result;
use crate::gibbs::factor::NC_SD_WIDTH;
use crate::gibbs::{Family, HbData, HbglmConfig, Layout, ScalePrior};
use crate::gpu::{Device, Kernel};

/// From this many rows the candidates are evaluated by the grid.
pub const GRID_SCALAR_ROWS: usize = 1 << 15;
/// Candidates per batch (HB_CANDIDATES of kernels/gibbs.cu).
const CANDIDATES: usize = 16;
/// Doubles of one chain's slice state (HB_SCALAR_STATE_DOUBLES).
const STATE_DOUBLES: usize = 96;
/// Candidates in each batch queued per update: x0 and two stepping-out
/// points a side, then (stepping or shrinking) 4, 8 and 16. A slice update
/// with adapted widths takes about 5 evaluations and every candidate costs
/// every row's term, so batches start small; what is left after them,
/// hb_scalar_finish does a candidate at a time.
const BATCHES: [i32; 4] = [5, 4, 8, CANDIDATES as i32];
/// Row blocks per chain of hb_scalar_eval, at most.
const MAX_ROW_BLOCKS: usize = 512;

/// What an HbScalar updates (kernels/gibbs.cu's HB_S_*).
const GAMMA: i32 = 0;
const SHAPE: i32 = 1;
const CUT: i32 = 2;
/// The non-centred mu_k, tau_k and factor sds (the kernels' `what >= HB_S_NC_MU`).
const NC_MU: i32 = 3;
const NC_TAU: i32 = 4;
const NC_SD: i32 = 5;

/// Mirrors `struct HbScalar` of kernels/gibbs.cu.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct HbScalar {
    what: i32,
    j: i32,
    coord: i32,
    stream: i32,
    draw_at: i32,
    state: u64,
    partials: u64,
    nb: i32,
    fw: u64,
    fu: u64,
    fsd: u64,
    flevel: u64,
    ffloor: f64,
    width: f64,
    fl: i32,
    fk: i32,
    newton: i32,
}

// SAFETY: a plain #[repr(C)] struct of integers and floats matching `struct HbScalar`
// field for field (same order, natural alignment).
unsafe impl DeviceRepr for HbScalar {}

/// Every chain's row-summed scalars, in sweep order, with their kernels
/// and buffers.
pub(super) struct Scalars {
    /// gamma: queued after the factors, before hb_global.
    before: Vec<HbScalar>,
    /// The non-centred mu and tau (after the centred ones, as on the CPU),
    /// the shape and the free cut-points: after hb_global.
    after: Vec<HbScalar>,
    /// Each grouping factor's non-centred sds: after its own updates.
    factor_sds: Vec<Vec<HbScalar>>,
    /// Blocks of THREADS over each factor's levels (hb_scalar_groups).
    level_blocks: Vec<u32>,
    rounds: usize,
    /// The non-centred mu_k by a Newton step (the family has its curve).
    newton: bool,
    /// And tau_k (on `HbglmConfig::newton_tau_rows` rows or more).
    newton_tau: bool,
    chains: u32,
    nb: u32,
    /// Blocks of THREADS over the groups (hb_scalar_groups).
    group_blocks: u32,
    kernels: [CudaFunction; 8],
    _state: CudaSlice<f64>,
    _partials: CudaSlice<f64>,
    /// Each factor's row levels (for its sds' slopes).
    _levels: Vec<CudaSlice<i32>>,
}

impl Scalars {
    /// `stream`: the first random stream no other kernel uses; from
    /// `opts.grid_rows` rows on, the rounds run on the grid; the
    /// non-centred updates' widths are the 2K coordinates after the
    /// layout's (the factor sds' are fixed, as on the CPU); `factors`:
    /// the grouping factors on the device, with their sds' floors.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        dev: &Device,
        defines: &[(&str, i64)],
        data: &HbData,
        config: &HbglmConfig,
        layout: &Layout,
        chains: usize,
        stream: usize,
        opts: GpuOptions,
        factors: &[(HbFactor, &[f64])],
    ) -> Result<Scalars> {
        let (g, k, p, n) = (data.groups(), data.k, data.p, data.n());
        let s = &dev.stream;
        let e = |what: &'static str| move |err| dev.err(what, err);
        let nb = n.div_ceil(THREADS as usize * 8).clamp(1, MAX_ROW_BLOCKS);
        let state = s.alloc_zeros::<f64>(chains * STATE_DOUBLES).map_err(e("allocating"))?;
        let partials = s.alloc_zeros::<f64>(chains * nb * CANDIDATES).map_err(e("allocating"))?;
        let scalar = |what: i32, j: usize, coord: usize, draw_at: Option<usize>, index: usize| HbScalar {
            what,
            j: j as i32,
            coord: coord as i32,
            stream: (stream + index) as i32,
            draw_at: draw_at.map_or(-1, |d| d as i32),
            state: ptr(&state, dev),
            partials: ptr(&partials, dev),
            nb: nb as i32,
            ..HbScalar::default()
        };
        let before: Vec<HbScalar> = (0..p).map(|j| scalar(GAMMA, j, g * k + j, None, j)).collect();
        let mut after = Vec::new();
        let nc = layout.n_coords();
        let mut index = p;
        for j in (0..k).filter(|_| opts.interweave) {
            after.push(scalar(NC_MU, j, nc + j, Some(layout.mu(j)), index));
            index += 1;
            // (Correlated: Sigma is drawn whole, conjugately.)
            if config.prior.tau.fixed().is_none() && config.prior.cov.is_none() {
                after.push(scalar(NC_TAU, j, nc + k + j, Some(layout.tau(j)), index));
                index += 1;
            }
        }
        let aux = g * k + p + k;
        if config.family == Family::NegBinomial && !matches!(config.prior.shape, ScalePrior::Fixed(_)) {
            after.push(scalar(SHAPE, 0, aux, layout.sigma(), index));
        }
        if config.family == Family::Ordinal {
            for j in 1..layout.cuts {
                after.push(scalar(CUT, j, aux + j, Some(layout.cut(j)), index + j));
            }
        }
        // Factor sds, after the shape and the cut-points' streams.
        let mut index = index + layout.cuts.max(1) + 1;
        let (mut factor_sds, mut levels) = (Vec::new(), Vec::new());
        for (fac, (args, floors)) in data.factors.iter().zip(factors) {
            let mut list = Vec::new();
            if opts.interweave && config.prior.tau.fixed().is_none() && !fac.correlated {
                let level: Vec<i32> = fac.level.iter().map(|&l| l as i32).collect();
                let d_level = s.clone_htod(&level).map_err(e("copying data"))?;
                for j in 0..fac.k {
                    let sd_at = args.draw_at as usize + fac.levels * fac.k + j;
                    list.push(HbScalar {
                        coord: -1,
                        fw: args.w,
                        fu: args.u,
                        fsd: args.sd,
                        flevel: ptr(&d_level, dev),
                        ffloor: floors[j],
                        width: NC_SD_WIDTH,
                        fl: args.l,
                        fk: args.kf,
                        ..scalar(NC_SD, j, 0, Some(sd_at), index)
                    });
                    index += 1;
                }
                levels.push(d_level);
            }
            factor_sds.push(list);
        }
        let f = |kernel| dev.function(kernel, defines);
        Ok(Scalars {
            before,
            after,
            factor_sds,
            level_blocks: data.factors.iter().map(|fac| fac.levels.div_ceil(THREADS as usize).max(1) as u32).collect(),
            rounds: if n >= opts.grid_rows { BATCHES.len() } else { 0 },
            newton: config.family.has_curve(),
            newton_tau: config.family.has_curve() && n >= config.newton_tau_rows,
            chains: chains as u32,
            nb: nb as u32,
            group_blocks: g.div_ceil(THREADS as usize).max(1) as u32,
            kernels: [
                f(Kernel::HbScalarStart)?,
                f(Kernel::HbScalarEval)?,
                f(Kernel::HbScalarDecide)?,
                f(Kernel::HbScalarFinish)?,
                f(Kernel::HbScalarApply)?,
                f(Kernel::HbScalarGroups)?,
                f(Kernel::HbNewtonEval)?,
                f(Kernel::HbNewtonDecide)?,
            ],
            _state: state,
            _partials: partials,
            _levels: levels,
        })
    }

    /// Queues the updates that come before hb_global (`before`) or after it.
    pub(super) fn queue(&self, dev: &Device, args: &HbArgs, global: &HbGlobal, before: bool) -> Result<()> {
        self.queue_list(dev, args, global, if before { &self.before } else { &self.after }, self.group_blocks)
    }

    /// Queues grouping factor f's non-centred sds (after its own updates).
    pub(super) fn queue_factor(&self, dev: &Device, args: &HbArgs, global: &HbGlobal, f: usize) -> Result<()> {
        self.queue_list(dev, args, global, &self.factor_sds[f], self.level_blocks[f])
    }

    /// `list`'s updates in turn; hb_scalar_groups over `blocks` x THREADS
    /// groups or levels.
    fn queue_list(&self, dev: &Device, args: &HbArgs, global: &HbGlobal, list: &[HbScalar], blocks: u32) -> Result<()> {
        let s: &CudaStream = &dev.stream;
        let e = |what: &'static str| move |err| dev.err(what, err);
        let [start, eval, decide, finish, apply, groups, newton_eval, newton_decide] = &self.kernels;
        let per_chain = |threads: u32| LaunchConfig { grid_dim: (self.chains, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let over_rows = LaunchConfig { grid_dim: (self.nb, self.chains, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let cap = if self.rounds > 0 { BATCHES[0] } else { 1 };
        for sc in list {
            // SAFETY (every launch below): the arguments match the kernels'
            // (HbArgs, HbGlobal, HbScalar[, int cap <= CANDIDATES]); `args` and `global` point
            // at the sampler's live buffers; `sc.state` holds chains x
            // STATE_DOUBLES and `sc.partials` chains x nb x CANDIDATES
            // doubles, nb the grid's x dimension; one block per chain or
            // (row block, chain); a factor sd's fw, fu, fsd and flevel point
            // at its factor's live buffers (n x fk columns, chains x fl x fk
            // effects, chains x fk sds, n levels below fl), and `blocks`
            // covers its fl levels.
            let newton = (self.newton && sc.what == NC_MU) || (self.newton_tau && sc.what == NC_TAU);
            let sc = &HbScalar { newton: newton as i32, ..*sc };
            let mut launch = s.launch_builder(start);
            launch.arg(args).arg(global).arg(sc).arg(&cap);
            unsafe { launch.launch(per_chain(32)) }.map_err(e("launching hb_scalar_start"))?;
            if newton {
                // At x0, then at the candidate.
                for _ in 0..2 {
                    let mut launch = s.launch_builder(newton_eval);
                    launch.arg(args).arg(global).arg(sc);
                    unsafe { launch.launch(over_rows) }.map_err(e("launching hb_newton_eval"))?;
                    let mut launch = s.launch_builder(newton_decide);
                    launch.arg(args).arg(global).arg(sc);
                    unsafe { launch.launch(per_chain(THREADS)) }.map_err(e("launching hb_newton_decide"))?;
                }
            }
            for r in 0..if newton { 0 } else { self.rounds } {
                let mut launch = s.launch_builder(eval);
                launch.arg(args).arg(global).arg(sc);
                unsafe { launch.launch(over_rows) }.map_err(e("launching hb_scalar_eval"))?;
                // After the last round: batches of one, as hb_scalar_finish.
                let next = BATCHES.get(r + 1).copied().unwrap_or(1);
                let mut launch = s.launch_builder(decide);
                launch.arg(args).arg(global).arg(sc).arg(&next);
                unsafe { launch.launch(per_chain(THREADS)) }.map_err(e("launching hb_scalar_decide"))?;
            }
            let mut launch = s.launch_builder(finish);
            launch.arg(args).arg(global).arg(sc);
            unsafe { launch.launch(per_chain(THREADS)) }.map_err(e("launching hb_scalar_finish"))?;
            if sc.what == GAMMA || sc.what >= NC_MU {
                let mut launch = s.launch_builder(apply);
                launch.arg(args).arg(global).arg(sc);
                unsafe { launch.launch(over_rows) }.map_err(e("launching hb_scalar_apply"))?;
            }
            if sc.what >= NC_MU {
                let over_groups = LaunchConfig { grid_dim: (blocks, self.chains, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
                let mut launch = s.launch_builder(groups);
                launch.arg(args).arg(global).arg(sc);
                unsafe { launch.launch(over_groups) }.map_err(e("launching hb_scalar_groups"))?;
            }
        }
        Ok(())
    }
}
