//! Independent chains, each a sequence of sweeps: warmup (adapting slice
//! widths) then kept draws, every `thin`-th sweep.

use rayon::prelude::*;

use super::covariance;
use super::diagnostics::diagnose_watched;
use super::sweep::{State, SweepStats, Sweeper};
use super::target;
use super::{HbData, HbglmConfig, HbglmFit, Layout};
use crate::error::Result;
use crate::exec::Exec;
use crate::memory;

/// Write the state as draw `i` into `out` (one slice of `kept` per
/// parameter, in draw order: beta (group-major), mu, tau, gamma, sigma
/// (gaussian only), the correlations (correlated only), the cut-points
/// (ordinal), each other grouping factor's effects, sds and correlations).
fn write_draw(out: &mut [&mut [f64]], i: usize, s: &State, layout: &Layout) {
    let sigma = if layout.sigma { Some(s.sigma) } else { None };
    let cor: Vec<f64> = if layout.correlated { covariance::correlations(&s.cov, layout.k).collect() } else { Vec::new() };
    // Ordinal: brms's cut-points, theta_c - mu_1.
    let cuts: Vec<f64> = s.cuts.iter().map(|t| t - s.mu[0]).collect();
    let factor_cor: Vec<Vec<f64>> = s.factor_cov.iter().zip(&s.sd).map(|(cov, sd)| covariance::correlations(cov, if cov.is_empty() { 0 } else { sd.len() }).collect()).collect();
    let factors = s.u.iter().zip(&s.sd).zip(&factor_cor).flat_map(|((u, sd), cor)| u.iter().chain(sd).chain(cor));
    let values = s.beta.iter().chain(&s.mu).chain(&s.tau).chain(&s.gamma).chain(sigma.iter()).chain(&cor).chain(&cuts).chain(factors);
    for (slot, &v) in out.iter_mut().zip(values) {
        slot[i] = v;
    }
}

/// Run sweeps `from..to` of one chain from `state`, writing its kept draws
/// into `out` (its slices of the draws array).
fn run_sweeps(sweeper: &Sweeper, config: &HbglmConfig, layout: &Layout, state: &mut State, sweeps: std::ops::Range<usize>, exec: &Exec, out: &mut [&mut [f64]]) -> Result<SweepStats> {
    let mut stats = SweepStats::default();
    for t in sweeps {
        exec.monitor.check()?;
        let warm = t < config.warmup;
        stats.add(&sweeper.sweep_watched(state, t, warm && config.adapt, &exec.monitor)?);
        if !warm && (t - config.warmup + 1) % config.thin == 0 {
            write_draw(out, (t - config.warmup + 1) / config.thin - 1, state, layout);
        }
        // Shed the rounding of many incremental updates of eta.
        if (t + 1) % 100 == 0 {
            sweeper.recompute_eta(state);
        }
        exec.monitor.add_done(1);
    }
    Ok(stats)
}

/// All chains on the CPU, in parallel (and each sweep parallel inside),
/// block by block when sampling to a target (the chains' states carry over).
/// The draws array is allocated once, fallibly, for the most draws; each
/// chain writes its own (strided) part of it.
pub fn sample_cpu(data: &HbData, config: &HbglmConfig, exec: &Exec) -> Result<HbglmFit> {
    let layout = Layout::of(data, config);
    let cap = config.kept();
    let (chains, np) = (config.chains, layout.n_params());
    let draws = exec.install(|| memory::try_vec_par(cap.saturating_mul(chains).saturating_mul(np), 0.0, "the draws of hbglm()"))??;
    let sweepers: Vec<Sweeper> = (0..chains)
        .map(|c| Sweeper { data, family: config.family, prior: &config.prior, slice: config.slice_settings(), seed: config.seed, chain: config.first_chain + c, balance: true, newton_tau_rows: config.newton_tau_rows })
        .collect();
    let states: Vec<State> = exec.install(|| sweepers.par_iter().map(|sw| sw.init(config.w)).collect())?;
    let mut run = (draws, states, vec![SweepStats::default(); chains]);
    let sweep = |(draws, states, stats): &mut (Vec<f64>, Vec<State>, Vec<SweepStats>), from: usize, to: usize| -> Result<()> {
        // R array order: iteration fastest, then chain, then parameter, so
        // slice number c + chains * p holds chain c's draws of parameter p.
        let mut per_chain: Vec<Vec<&mut [f64]>> = (0..chains).map(|_| Vec::with_capacity(np)).collect();
        for (i, slice) in draws.chunks_mut(cap.max(1)).enumerate() {
            per_chain[i % chains].push(slice);
        }
        let results = exec.install(|| {
            per_chain
                .par_iter_mut()
                .zip(states.par_iter_mut())
                .zip(&sweepers)
                .map(|((out, state), sw)| run_sweeps(sw, config, &layout, state, from..to, exec, out))
                .collect::<Vec<_>>()
        })?;
        for (total, res) in stats.iter_mut().zip(results) {
            total.add(&res?);
        }
        Ok(())
    };
    let (sweeps, last) = target::run_blocks(
        config.target,
        config.iter,
        config.warmup,
        config.thin,
        &mut run,
        sweep,
        |(draws, _, _), kept| {
            let start = |p: usize, c: usize| cap * (c + chains * p);
            exec.install(|| diagnose_watched(np, chains, kept * chains, true, |p, c| &draws[start(p, c)..start(p, c) + kept], &exec.monitor))?
        },
    )?;
    let (mut draws, states, stats) = run;
    let kept = (sweeps - config.warmup) / config.thin;
    target::compact(&mut draws, cap, kept);
    let mut total = SweepStats::default();
    for s in &stats {
        total.add(s);
    }
    let stuck = layout.per_param(states.iter().flat_map(|s| s.stuck.iter().copied().enumerate()));
    Ok(HbglmFit {
        draws,
        kept,
        chains,
        layout,
        stats: total,
        stuck,
        sweeps: sweeps * chains,
        plan: super::cpu_plan(data, config.family),
        backend: exec.backend,
        bounds: data.scale_bounds(config.family),
        separation: Vec::new(),
        target: last.as_ref().map(|(o, _)| o.clone()),
        diagnostics: last.map(|(_, d)| d),
    })
}
