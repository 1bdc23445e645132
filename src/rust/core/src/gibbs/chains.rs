//! Independent chains, each a sequence of sweeps: warmup (adapting slice
//! widths) then kept draws, every `thin`-th sweep.

use rayon::prelude::*;

use super::sweep::{SweepStats, Sweeper};
use super::{HbData, HbglmConfig, HbglmFit, Layout};
use crate::error::Result;
use crate::exec::Exec;

/// The parameters of a state in draw order: beta (group-major), mu, tau,
/// gamma, sigma (gaussian only).
fn push_draw(out: &mut Vec<f64>, s: &super::sweep::State, gaussian: bool) {
    out.extend_from_slice(&s.beta);
    out.extend_from_slice(&s.mu);
    out.extend_from_slice(&s.tau);
    out.extend_from_slice(&s.gamma);
    if gaussian {
        out.push(s.sigma);
    }
}

/// Run one chain: kept draws (kept x parameters, row-major) and its
/// evaluation counts.
fn run_chain(data: &HbData, config: &HbglmConfig, chain: usize, exec: &Exec) -> Result<(Vec<f64>, SweepStats)> {
    let sweeper = Sweeper { data, family: config.family, prior: &config.prior, slice: config.slice_settings(), seed: config.seed, chain, balance: true };
    let layout = Layout::of(data, config.family);
    let gaussian = layout.sigma;
    let mut state = sweeper.init(config.w);
    let mut draws = Vec::with_capacity(config.kept() * layout.n_params());
    let mut stats = SweepStats::default();
    for t in 0..config.iter {
        exec.monitor.check()?;
        let warm = t < config.warmup;
        stats.add(&sweeper.sweep(&mut state, t, warm && config.adapt));
        if !warm && (t - config.warmup + 1) % config.thin == 0 {
            push_draw(&mut draws, &state, gaussian);
        }
        // Shed the rounding of many incremental updates of eta.
        if (t + 1) % 100 == 0 {
            sweeper.recompute_eta(&mut state);
        }
        exec.monitor.add_done(1);
    }
    Ok((draws, stats))
}

/// All chains on the CPU, in parallel (and each sweep parallel inside).
pub fn sample_cpu(data: &HbData, config: &HbglmConfig, exec: &Exec) -> Result<HbglmFit> {
    let layout = Layout::of(data, config.family);
    let per_chain = exec.install(|| {
        (0..config.chains).into_par_iter().map(|c| run_chain(data, config, config.first_chain + c, exec)).collect::<Vec<_>>()
    })?;
    let kept = config.kept();
    let (chains, np) = (config.chains, layout.n_params());
    let mut draws = vec![0.0; kept * chains * np];
    let mut stats = SweepStats::default();
    for (c, res) in per_chain.into_iter().enumerate() {
        let (d, s) = res?;
        stats.add(&s);
        // R array order: iteration fastest, then chain, then parameter.
        for i in 0..kept {
            for p in 0..np {
                draws[i + kept * (c + chains * p)] = d[i * np + p];
            }
        }
    }
    Ok(HbglmFit { draws, kept, chains, layout, stats, sweeps: config.iter * chains, plan: super::cpu_plan(data, config.family), backend: exec.backend })
}
