//! The large-dataset path: em_grid, many blocks per (dataset, start), one
//! launch per iteration queued without host synchronisation.

use std::ops::Range;
use std::time::Instant;

use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::error::Result;
use crate::exec::Monitor;
use crate::gpu::Device;

use super::super::config::CheckedEmConfig;
use super::pairs::{gather, split_trace, starting_values, DatasetExtras, Outputs, Pairs};
use super::warp::{upload_censored, upload_values, upload_weights, DeviceWeights};
use crate::gpu::Kernel;

use super::{em_function, held_values, CHECK_EVERY, LARGE_THREADS, LAUNCH_WORK, NULL, ST_MAX_ITERS, ST_RUNNING};

#[allow(clippy::too_many_arguments)]
pub(super) fn run_grid(dev: &Device, data: &[&[f64]], extras: &DatasetExtras, pairs: &Pairs, range: Range<usize>, first: usize, config: &CheckedEmConfig, monitor: &Monitor, upload_secs: &mut f64) -> Result<Outputs> {
    let nstat = 3 * config.components;
    let state_len = nstat + 4;
    let partial_len = nstat + 2;
    let up = gather(config.family, data, extras, &pairs.dataset[range.clone()]);
    let n_pairs = range.len();
    let s = &dev.stream;
    let e = |what: &str| { let what = what.to_string(); move |err| dev.err(&what, err) };
    // Through pinned memory: 80 MB for 10^7 observations, at the bus's rate;
    // the weights first, as they decide the kernel (float32 when exact).
    let t0 = Instant::now();
    let d_x = upload_values(dev, s, &up, true)?;
    let d_w = upload_weights(dev, s, &up, true)?;
    s.synchronize().map_err(e("copying data"))?;
    *upload_secs += t0.elapsed().as_secs_f64();
    let grid_fn = em_function(dev, config, DeviceWeights::kind(d_w.as_ref()), Kernel::EmGrid)?;
    // Whole waves of resident blocks (their number per SM depends on the
    // family's registers), about two of them over all the pairs.
    let resident = grid_fn.occupancy_max_active_blocks_per_multiprocessor(LARGE_THREADS, 0, None).map_err(|err| dev.err("reading em_grid's occupancy", err))?;
    let per_pair_blocks = up.max_n.div_ceil(LARGE_THREADS as usize * 4);
    let wanted = (2 * resident.max(1) as usize * dev.multiprocessors as usize).div_ceil(n_pairs).max(1);
    let blocks_x = per_pair_blocks.min(wanted).max(1);

    let (init, no_start) = starting_values(data, pairs, range.clone(), first, config);
    let mut state = vec![0.0f64; n_pairs * state_len];
    for (p, init) in init.chunks(nstat).enumerate() {
        state[p * state_len..p * state_len + nstat].copy_from_slice(init);
    }
    let d_tot = s.clone_htod(&up.totals).map_err(e("copying data"))?;
    let d_off = s.clone_htod(&up.offsets).map_err(e("copying data"))?;
    let d_len = s.clone_htod(&up.lengths).map_err(e("copying data"))?;
    let d_cen = s.clone_htod(&up.centres).map_err(e("copying data"))?;
    let d_pd = s.clone_htod(&up.pair_dataset).map_err(e("copying data"))?;
    let d_cens = upload_censored(s, &up).map_err(e("copying data"))?;
    let d_held = held_values(config).map(|h| s.clone_htod(&h)).transpose().map_err(e("copying constraints"))?;
    let pair_global: Vec<i32> = (0..n_pairs as i32).collect();
    let d_pg = s.clone_htod(&pair_global).map_err(e("copying data"))?;
    let mut d_state = s.clone_htod(&state).map_err(e("copying starts"))?;
    let mut d_partial = s.alloc_zeros::<f64>(n_pairs * blocks_x * partial_len).map_err(e("allocating sums"))?;
    let mut d_arrivals = s.alloc_zeros::<u32>(n_pairs).map_err(e("allocating counters"))?;
    let mut d_trace = s.alloc_zeros::<f64>(n_pairs * config.max_iters).map_err(e("allocating the trace"))?;
    let (max_iters, epsilon) = (config.max_iters as i32, config.epsilon);
    let cfg = LaunchConfig { grid_dim: (blocks_x as u32, n_pairs as u32, 1), block_dim: (LARGE_THREADS, 1, 1), shared_mem_bytes: 0 };
    // Look at the pairs' status (and the user's interrupt) every
    // CHECK_EVERY iterations, or sooner when an iteration is long: at most
    // about LAUNCH_WORK observation-iterations (a quarter second) apart.
    let per_iter: f64 = up.pair_dataset.iter().map(|&d| up.lengths[d as usize] as f64).sum();
    let check_every = ((LAUNCH_WORK / per_iter.max(1.0)) as usize).clamp(1, CHECK_EVERY);
    for iter in 0..=config.max_iters {
        let first = (iter == 0) as i32;
        let mut launch = s.launch_builder(&grid_fn);
        launch.arg(&d_x);
        DeviceWeights::push(d_w.as_ref(), &mut launch);
        launch.arg(&d_tot).arg(&d_off).arg(&d_len).arg(&d_cen).arg(&d_pd).arg(&mut d_state).arg(&mut d_partial).arg(&mut d_arrivals).arg(&first);
        launch.arg(&mut d_trace).arg(&d_pg).arg(&max_iters).arg(&epsilon);
        match &d_held {
            Some(h) => launch.arg(h),
            None => launch.arg(&NULL),
        };
        match &d_cens {
            Some((c, starts)) => launch.arg(c).arg(starts),
            None => launch.arg(&NULL).arg(&NULL),
        };
        // As the CPU's em::cpu::run_iterations: with a fixed number of
        // iterations and no trace, only the last log-likelihood is read.
        let ll_wanted = (config.epsilon > 0.0 || config.keep_trace || iter == config.max_iters) as i32;
        launch.arg(&ll_wanted);
        // SAFETY: arguments match em_grid in kernels/em.cu, ll_wanted last (the weights a
        // null pointer when unweighted: only EM_WEIGHTED kernels read them,
        // and so for the held values and censored intervals); partial holds
        // pairs x blocks_x x (3M + 2) doubles, state pairs x (3M + 4),
        // arrivals one zeroed counter per pair (the last block resets it),
        // the trace pairs x max_iters doubles and pair_global maps pairs to
        // its rows.
        unsafe { launch.launch(cfg) }.map_err(e("launching em_grid"))?;
        if iter % check_every == check_every - 1 {
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

