//! Launch wrappers of single kernels of kernels/hmm.cu and
//! kernels/hmm_batched.cu: the kernel with its shared-memory limit raised
//! (`function`), the forward, Viterbi and transition-count (`hmm_xi_gemm`)
//! launches. The backward, reduction and M-step launches are with the state
//! they use (`passes`, `engine`); the large-N passes are in `batched`.

use std::ops::Range;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use crate::error::Result;
use crate::gpu::{Device, Kernel};

use super::super::backward::Counts;
use super::memory::{Back, DeviceLogTables, DeviceSeqs, DeviceTables, ViterbiBuffers};
use super::rows::DeviceDensity;
use super::plan::{forward_block_smem, forward_mma, forward_mma_grid, grid, group_config, group_path, group_slices, viterbi_group, viterbi_group_config, smem_limit, thread_config, thread_path, threads_for, viterbi_block_smem, warp_grid, xi_splits};
use super::{err, WARPS, WARP_MAX_STATES, XI_SMEM, XI_THREADS, XI_TILE};

/// Launch hmm_forward (or hmm_forward_thread for N <= 8, hmm_forward_warp
/// or, with many sequences, hmm_forward_mma for N <= 32, hmm_forward_group
/// up to 128 states when no alphas are kept; large N goes to the batched
/// kernels instead) over
/// sequences `range`; with `store`, alphas and
/// scales of the batch are kept in (alpha, scale). With `density` (N <=
/// 8, [`super::rows::rows_computed`]), the kernel computes each position's
/// row from its observation (`tables.emis` unused, `seqs.sym` unread).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_forward(
    dev: &Device,
    n: usize,
    tables: &DeviceTables,
    seqs: &DeviceSeqs,
    range: &Range<usize>,
    store: Option<(&mut CudaSlice<f64>, &mut CudaSlice<f64>)>,
    loglik: &mut CudaSlice<f64>,
    density: Option<&DeviceDensity>,
) -> Result<()> {
    if store.is_none() && group_path(n) {
        return launch_forward_group(dev, n, tables, seqs, range, loglik);
    }
    let trans_smem = forward_block_smem(n, true) <= smem_limit(dev);
    let (warp, thread) = (n <= WARP_MAX_STATES, thread_path(n));
    let (name, cfg) = if thread {
        (Kernel::HmmForwardThread, thread_config(dev, n, range.len()))
    } else if warp && forward_mma(dev, range.len(), tables.emis.len()) {
        let cfg = LaunchConfig { grid_dim: (forward_mma_grid(dev, range.len()), 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: 0 };
        (Kernel::HmmForwardMma, cfg)
    } else if warp {
        let smem = WARPS * 32 * 8;
        let cfg = LaunchConfig { grid_dim: (warp_grid(dev, range.len()), 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: smem as u32 };
        (Kernel::HmmForwardWarp, cfg)
    } else {
        let smem = forward_block_smem(n, trans_smem);
        let cfg = LaunchConfig { grid_dim: (grid(dev, range.len()), 1, 1), block_dim: (threads_for(n), 1, 1), shared_mem_bytes: smem as u32 };
        (Kernel::HmmForward, cfg)
    };
    let f = match density {
        Some(d) if thread => d.function_defining(dev, name, &[("HMM_TN", n as i64)])?,
        Some(_) => return Err(crate::error::Error::Internal(format!("a density's rows computed in the forward kernel at {n} states"))),
        None if thread => dev.function(name, &[("HMM_TN", n as i64)])?,
        None => dev.function(name, &[])?,
    };
    let (n_i, s0, s1, flag) = (n as i32, range.start as i32, range.end as i32, trans_smem as i32);
    let null: u64 = 0;
    let s = &dev.stream;
    let mut launch = s.launch_builder(&f);
    launch.arg(&n_i).arg(&tables.start).arg(&tables.trans).arg(&tables.emis).arg(&seqs.sym).arg(&seqs.off).arg(&s0).arg(&s1);
    match store {
        Some((alpha, scale)) => launch.arg(alpha).arg(scale),
        None => launch.arg(&null).arg(&null),
    };
    launch.arg(loglik);
    if !warp {
        launch.arg(&flag);
    }
    launch.arg(&tables.mins);
    let ep = density.map(|d| d.ep.borrow());
    if thread {
        match (density, ep.as_deref()) {
            (Some(d), Some(ep)) => launch.arg(&d.obs).arg(ep),
            _ => launch.arg(&null).arg(&null),
        };
    }
    // SAFETY: the arguments match the parameters of hmm_forward (or of
    // hmm_forward_warp, hmm_forward_mma and hmm_forward_thread, which have no trans_smem
    // flag; the latter compiled for this N, taking a density's obs and ep,
    // its observations and parameters, compiled with its block, or null)
    // in order and type;
    // mins holds two keys;
    // the tables hold N, N*N and V*N doubles, the symbols are < V
    // (validated), off has one entry per sequence + 1 and s0 < s1 index it;
    // alpha and scale (or null) hold N and 1 doubles per symbol of the
    // batch, loglik one per sequence of the batch; shared memory is sized
    // for cur, nxt and the reduction slots and trans when trans_smem, or for
    // one 32-double slice per warp (hmm_forward_mma uses none), or the N*N
    // transitions.
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_forward"))?;
    Ok(())
}

/// Launch hmm_forward_group over sequences `range` for N states
/// ([`group_path`]): log-likelihoods only.
fn launch_forward_group(dev: &Device, n: usize, tables: &DeviceTables, seqs: &DeviceSeqs, range: &Range<usize>, loglik: &mut CudaSlice<f64>) -> Result<()> {
    let f = dev.function(Kernel::HmmForwardGroup, &[("HMM_GK", group_slices(n) as i64)])?;
    let (n_i, s0, s1) = (n as i32, range.start as i32, range.end as i32);
    let mut launch = dev.stream.launch_builder(&f);
    launch.arg(&n_i).arg(&tables.start).arg(&tables.trans).arg(&tables.emis).arg(&seqs.sym).arg(&seqs.off).arg(&s0).arg(&s1).arg(loglik).arg(&tables.mins);
    // SAFETY: the arguments match hmm_forward_group's parameters in order
    // and type; it is compiled for N's slices (HMM_GK >= N / 16, a warp
    // each); the tables hold N, N*N and V*N doubles (a density's: a row per
    // position, its positions as symbols), the symbols are < V, off indexes
    // s0..s1, loglik holds one value per sequence of the range; mins holds
    // two keys; its shared memory is static.
    unsafe { launch.launch(group_config(dev, n, range.len())) }.map_err(err(dev, "launching hmm_forward_group"))?;
    Ok(())
}

/// Launch the Viterbi kernel for N over the batch `range` (one launch):
/// warp per sequence (N <= 32), block per sequence (transitions in shared
/// memory), or batched (max-plus products over the grid; `buf` holds its
/// log vectors).
pub(super) fn launch_viterbi(dev: &Device, n: usize, tabs: &DeviceLogTables, seqs: &DeviceSeqs, range: &Range<usize>, buf: &mut ViterbiBuffers, density: Option<&DeviceDensity>) -> Result<()> {
    if let Back::Logs(vals, rows) = &mut buf.back {
        return super::batched::viterbi(dev, n, tabs, seqs, rows, vals, &mut buf.path, &mut buf.logp);
    }
    let warp = n <= WARP_MAX_STATES;
    let thread = thread_path(n);
    let group = !warp && viterbi_group(dev, n, range.len());
    let (name, cfg) = if thread {
        (Kernel::HmmViterbiThread, thread_config(dev, n, range.len()))
    } else if group {
        (Kernel::HmmViterbiGroup, viterbi_group_config(dev, n, range.len()))
    } else if warp {
        let smem = WARPS * 32 * 8;
        (Kernel::HmmViterbiWarp, LaunchConfig { grid_dim: (warp_grid(dev, range.len()), 1, 1), block_dim: (32 * WARPS as u32, 1, 1), shared_mem_bytes: smem as u32 })
    } else {
        let smem = viterbi_block_smem(n);
        (Kernel::HmmViterbi, LaunchConfig { grid_dim: (grid(dev, range.len()), 1, 1), block_dim: (threads_for(n), 1, 1), shared_mem_bytes: smem as u32 })
    };
    // A density's warp kernel computes its log rows (tabs.emis unused).
    let f = match density {
        Some(d) if thread => d.function_defining(dev, name, &[("HMM_TN", n as i64)])?,
        Some(d) if warp => d.function(dev, name)?,
        None if thread => dev.function(name, &[("HMM_TN", n as i64)])?,
        _ => dev.function(name, &[])?,
    };
    let (n_i, s0, s1, trans_smem) = (n as i32, range.start as i32, range.end as i32, 1i32);
    let null: u64 = 0;
    let ep = density.map(|d| d.ep.borrow());
    let mut launch = dev.stream.launch_builder(&f);
    launch.arg(&n_i).arg(&tabs.start).arg(&tabs.trans).arg(&tabs.emis).arg(&seqs.sym).arg(&seqs.off).arg(&s0).arg(&s1);
    match &mut buf.back {
        Back::Byte(b) => launch.arg(b),
        Back::Short(b) => launch.arg(b),
        Back::Logs(..) => unreachable!("the batched kernel returned above"),
    };
    launch.arg(&mut buf.path).arg(&mut buf.logp);
    if warp {
        match (density, ep.as_deref()) {
            (Some(d), Some(ep)) => launch.arg(&d.obs).arg(ep),
            _ => launch.arg(&null).arg(&null),
        };
    } else if !group {
        launch.arg(&trans_smem);
    }
    // SAFETY: the arguments match the parameters of the chosen kernel in
    // order and type (bytes for hmm_viterbi_warp's back-pointers, 16-bit
    // for hmm_viterbi and hmm_viterbi_group; hmm_viterbi alone takes the
    // trans_smem flag: always set, since larger N is batched); back holds
    // N back-pointers and path one state per symbol of the batch, logp one
    // value per sequence of the batch; the log tables hold N, N*N and V*N doubles, the symbols are
    // < V, off indexes the batch; shared memory holds what the kernel's
    // comment lists (cur, nxt and the log transitions, or one 32-double
    // slice per warp for the warp kernel, the log transitions and two
    // vectors of N x 8 for the group kernel, the N*N log transitions for the
    // thread kernel, compiled for this N, whose parameters are the warp
    // kernel's); the warp and thread kernels' obs and ep are a density's
    // (observations padded by SYM_PAD values, its parameters), compiled
    // with its block, or null.
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching the Viterbi kernel"))?;
    Ok(())
}

/// Transition counts of a batch as one matrix product (large N), split
/// over at most `slots` accumulators.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_xi_gemm(dev: &Device, n: usize, v: usize, alpha: &CudaSlice<f64>, tmp: &CudaSlice<f64>, partial: &mut CudaSlice<f64>, slots: u32, rows: usize) -> Result<()> {
    let tiles = n.div_ceil(XI_TILE) as u32;
    let splits = xi_splits(dev, n, rows)?.min(slots);
    let f = dev.function(Kernel::HmmXiGemm, &[])?;
    let cfg = LaunchConfig { grid_dim: (tiles, tiles, splits), block_dim: (XI_THREADS, 1, 1), shared_mem_bytes: XI_SMEM as u32 };
    let (n_i, rows_i, size_i) = (n as i32, rows as i64, Counts::size(n, v) as i64);
    let mut launch = dev.stream.launch_builder(&f);
    launch.arg(&n_i).arg(&rows_i).arg(alpha).arg(tmp).arg(partial).arg(&size_i);
    // SAFETY: the arguments match hmm_xi_gemm's parameters; alpha and tmp
    // hold at least `rows` rows of N doubles; partial holds `slots` >=
    // splits accumulators of size_i doubles, of which split z adds into the
    // N*N transition entries of accumulator z.
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_xi_gemm"))?;
    Ok(())
}

/// hmm_table_mins: the smallest positive start-or-transition and emission
/// probabilities of `start` (N), `trans` (N x N) and `emis` (N x V, any
/// order) as keys into `mins` (zeroed).
pub(super) fn launch_table_mins(dev: &Device, n: usize, start: &CudaSlice<f64>, trans: &CudaSlice<f64>, emis: &CudaSlice<f64>, mins: &mut CudaSlice<u64>) -> Result<()> {
    let f = dev.function(Kernel::HmmTableMins, &[])?;
    let (n_i, n_emis) = (n as i32, emis.len() as i64);
    let blocks = (n + n * n).max(emis.len()).div_ceil(256 * 4).clamp(1, 8 * dev.multiprocessors as usize);
    let cfg = LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut launch = dev.stream.launch_builder(&f);
    launch.arg(&n_i).arg(&n_emis).arg(start).arg(trans).arg(emis).arg(mins);
    // SAFETY: hmm_table_mins(N, n_emis, start, trans, emis, mins): start
    // holds N doubles, trans N * N, emis n_emis, mins two keys (zeroed);
    // blocks of 256 threads (whole warps).
    unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_table_mins"))?;
    Ok(())
}
