//! Independent chains, each a sequence of sweeps: warmup (adapting slice
//! widths) then kept draws, every `thin`-th sweep.

use rayon::prelude::*;

use super::covariance;
use super::sweep::{State, SweepStats, Sweeper};
use super::{HbData, HbglmConfig, HbglmFit, Layout};
use crate::error::Result;
use crate::exec::Exec;
use crate::memory;

/// Write the state as draw `i` into `out` (one slice of `kept` per
/// parameter, in draw order: beta (group-major), mu, tau, gamma, sigma
/// (gaussian only), the correlations (correlated only)).
fn write_draw(out: &mut [&mut [f64]], i: usize, s: &State, layout: &Layout) {
    let sigma = if layout.sigma { Some(s.sigma) } else { None };
    let cor: Vec<f64> = if layout.correlated { covariance::correlations(&s.cov, layout.k).collect() } else { Vec::new() };
    let values = s.beta.iter().chain(&s.mu).chain(&s.tau).chain(&s.gamma).chain(sigma.iter()).chain(&cor);
    for (slot, &v) in out.iter_mut().zip(values) {
        slot[i] = v;
    }
}

/// Run one chain, writing its kept draws into `out` (its slices of the
/// draws array); returns its evaluation counts and stuck updates per
/// coordinate.
fn run_chain(data: &HbData, config: &HbglmConfig, chain: usize, exec: &Exec, out: &mut [&mut [f64]]) -> Result<(SweepStats, Vec<u64>)> {
    let sweeper = Sweeper { data, family: config.family, prior: &config.prior, slice: config.slice_settings(), seed: config.seed, chain, balance: true };
    let layout = Layout::of(data, config);
    let mut state = sweeper.init(config.w);
    let mut stats = SweepStats::default();
    for t in 0..config.iter {
        exec.monitor.check()?;
        let warm = t < config.warmup;
        stats.add(&sweeper.sweep_watched(&mut state, t, warm && config.adapt, &exec.monitor)?);
        if !warm && (t - config.warmup + 1) % config.thin == 0 {
            write_draw(out, (t - config.warmup + 1) / config.thin - 1, &state, &layout);
        }
        // Shed the rounding of many incremental updates of eta.
        if (t + 1) % 100 == 0 {
            sweeper.recompute_eta(&mut state);
        }
        exec.monitor.add_done(1);
    }
    Ok((stats, state.stuck))
}

/// All chains on the CPU, in parallel (and each sweep parallel inside).
/// The draws array is allocated once, fallibly; each chain writes its own
/// (strided) part of it.
pub fn sample_cpu(data: &HbData, config: &HbglmConfig, exec: &Exec) -> Result<HbglmFit> {
    let layout = Layout::of(data, config);
    let kept = config.kept();
    let (chains, np) = (config.chains, layout.n_params());
    let mut draws = memory::try_vec(kept.saturating_mul(chains).saturating_mul(np), 0.0, "the draws of hbglm()")?;
    // R array order: iteration fastest, then chain, then parameter, so
    // slice number c + chains * p holds chain c's draws of parameter p.
    let mut per_chain: Vec<Vec<&mut [f64]>> = (0..chains).map(|_| Vec::with_capacity(np)).collect();
    for (i, slice) in draws.chunks_mut(kept.max(1)).enumerate() {
        per_chain[i % chains].push(slice);
    }
    let results = exec.install(|| {
        per_chain
            .par_iter_mut()
            .enumerate()
            .map(|(c, out)| run_chain(data, config, config.first_chain + c, exec, out))
            .collect::<Vec<_>>()
    })?;
    drop(per_chain);
    let mut stats = SweepStats::default();
    let mut stuck_by_coord = Vec::new();
    for res in results {
        let (s, by_coord) = res?;
        stats.add(&s);
        stuck_by_coord.extend(by_coord.into_iter().enumerate());
    }
    let stuck = layout.per_param(stuck_by_coord);
    Ok(HbglmFit {
        draws,
        kept,
        chains,
        layout,
        stats,
        stuck,
        sweeps: config.iter * chains,
        plan: super::cpu_plan(data, config.family),
        backend: exec.backend,
        bounds: data.scale_bounds(config.family),
        separation: Vec::new(),
    })
}
