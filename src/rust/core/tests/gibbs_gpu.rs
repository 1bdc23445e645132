//! The Gibbs sampler on a CUDA device against the CPU backend: same model,
//! posterior means agree within Monte Carlo error (the devices draw
//! different random numbers). Skipped without a usable device.

use bulkem_core::exec::{Backend, Exec, Monitor};
use bulkem_core::gibbs::diagnostics::{diagnose_array, ess_bulk};
use bulkem_core::gibbs::gpu::{sample_gpu, GpuOptions, TILE8_MAX_ROWS};
use bulkem_core::gibbs::sweep::SPLIT_GROUP_ROWS;
use bulkem_core::gibbs::{sample, stream, Block, Family, HbData, HbglmConfig, HbglmFit, Prior, ScalePrior, Target, NEWTON_TAU_ROWS};
use bulkem_core::gpu;

fn device() -> bool {
    if gpu::probe().usable() {
        true
    } else {
        eprintln!("skipped: no usable CUDA device ({})", gpu::probe().reason);
        false
    }
}

/// Groups of every launch class: tiles of 8 lanes, warps, and one block.
fn data(family: Family) -> HbData {
    data_with(family, |_, _| 0.0)
}

/// `data(family)` with `extra(row, x_row)` added to each row's linear
/// predictor.
fn data_with(family: Family, extra: impl Fn(usize, &[f64]) -> f64) -> HbData {
    let mut sizes: Vec<usize> = (0..40).map(|g| 3 + g % TILE8_MAX_ROWS).collect();
    sizes.extend([200, 700, SPLIT_GROUP_ROWS + 100]);
    let (k, p) = (2, 1);
    let n: usize = sizes.iter().sum();
    let mut rng = stream(17, 0, 0, Block::Init, 1);
    let mut x = Vec::with_capacity(n * k);
    let mut z = Vec::with_capacity(n);
    let mut y = Vec::with_capacity(n);
    for (g, &s) in sizes.iter().enumerate() {
        let b = [0.3 + 0.4 * ((g % 5) as f64 - 2.0) / 2.0, 0.8 - 0.1 * (g % 3) as f64];
        for _ in 0..s {
            let xi = rng.normal();
            let zi = rng.uniform();
            let eta = b[0] + b[1] * xi - 0.5 * zi + extra(y.len(), &[1.0, xi]);
            x.extend([1.0, xi]);
            z.push(zi);
            y.push(match family {
                Family::Gaussian => eta + 0.7 * rng.normal(),
                Family::Binomial => (rng.uniform() < 1.0 / (1.0 + (-eta).exp())) as u8 as f64,
                Family::Poisson => poisson_draw(eta.exp(), &mut rng),
                // Shape 2: a gamma-mixed Poisson.
                Family::NegBinomial => {
                    let lambda = rng.gamma(2.0) * eta.exp() / 2.0;
                    poisson_draw(lambda, &mut rng)
                }
                // A logistic latent variable cut at 0, 1.2 and 2.5: four
                // categories.
                Family::Ordinal => {
                    let u = rng.uniform();
                    let latent = eta + (u / (1.0 - u)).ln();
                    1.0 + [0.0, 1.2, 2.5].iter().filter(|&&c| latent > c).count() as f64
                }
            });
        }
    }
    let d = HbData::new(y, x, z, &sizes, k, p).unwrap();
    if family == Family::Ordinal { d.with_categories(4) } else { d }
}

/// Inversion of the Poisson distribution function (small means).
fn poisson_draw(lambda: f64, rng: &mut bulkem_core::gibbs::Rng) -> f64 {
    let u = rng.uniform();
    let (mut k, mut pk, mut cdf) = (0.0, (-lambda).exp(), (-lambda).exp());
    while u > cdf && k < 1000.0 {
        k += 1.0;
        pk *= lambda / k;
        cdf += pk;
    }
    k
}

fn agree(cpu: &HbglmFit, gpu: &HbglmFit, what: &str) {
    assert_eq!(cpu.layout, gpu.layout);
    for q in 0..cpu.layout.n_params() {
        let (a, b) = (cpu.chains_of(q), gpu.chains_of(q));
        let sd = |ch: &[&[f64]], m: f64| {
            let all: Vec<f64> = ch.iter().flat_map(|c| c.iter().copied()).collect();
            (all.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (all.len() as f64 - 1.0)).sqrt()
        };
        let (ma, mb) = (cpu.mean(q), gpu.mean(q));
        let (sa, sb) = (sd(&a, ma), sd(&b, mb));
        // A parameter held fixed (tau_fixed): every draw the same value.
        let constant = |ch: &[&[f64]]| ch.iter().flat_map(|c| c.iter()).all(|&v| v == ch[0][0]);
        if constant(&a) || constant(&b) {
            assert!(constant(&a) && constant(&b) && a[0][0] == b[0][0], "{what}: fixed parameter {q}");
            continue;
        }
        let (ea, eb) = (ess_bulk(&a), ess_bulk(&b));
        let se = (sa * sa / ea + sb * sb / eb).sqrt();
        assert!((ma - mb).abs() < 5.0 * se, "{what}: parameter {q}: cpu {ma} vs gpu {mb} (se {se}, ESS {ea:.0} / {eb:.0})");
        // The sd of a sample sd s is sqrt((m4 - s^4) / (4 s^2 ESS)) (delta
        // method; sd / sqrt(2 ESS) for a normal posterior): skewed,
        // heavy-tailed posteriors (a group with few successes) need m4.
        let m4 = |ch: &[&[f64]], m: f64| {
            let all: Vec<f64> = ch.iter().flat_map(|c| c.iter().copied()).collect();
            all.iter().map(|v| (v - m).powi(4)).sum::<f64>() / all.len() as f64
        };
        let var_sd = |s: f64, m4: f64, ess: f64| (m4 - s.powi(4)).max(0.5 * s.powi(4)) / (4.0 * s * s * ess);
        // The sd's own effective size: that of the squared deviations,
        // which follow the group-level scale (slower to mix than the
        // coefficient itself, so its bulk ESS would overstate it).
        let ess_sq = |ch: &[&[f64]], m: f64| {
            let sq: Vec<Vec<f64>> = ch.iter().map(|c| c.iter().map(|v| (v - m).powi(2)).collect()).collect();
            ess_bulk(&sq.iter().map(|c| &c[..]).collect::<Vec<_>>())
        };
        let (qa, qb) = (ess_sq(&a, ma).min(ea), ess_sq(&b, mb).min(eb));
        let se_sd = (var_sd(sa, m4(&a, ma), qa) + var_sd(sb, m4(&b, mb), qb)).sqrt();
        assert!((sa - sb).abs() < 5.0 * se_sd, "{what}: parameter {q}: sd cpu {sa} vs gpu {sb} (se {se_sd}, ESS of the squares {qa:.0} / {qb:.0})");
    }
}

fn run(family: Family, prior: Prior) {
    run_on(data(family), family, prior);
}

fn run_on(data: HbData, family: Family, prior: Prior) {
    // tau_k's non-centred Newton step on both devices (forced on these
    // rows), and the slice below.
    let config = HbglmConfig { prior, iter: 1500, warmup: 500, chains: 4, seed: 3, newton_tau_rows: 0, ..HbglmConfig::new(family) };
    let cpu = sample(&data, &config, &Exec::cpu()).unwrap();
    let exec = Exec { backend: Backend::Cuda, ..Exec::cpu() };
    let gpu_fit = sample(&data, &config, &exec).unwrap();
    assert_eq!(gpu_fit.backend, Backend::Cuda);
    assert_eq!(gpu_fit.stats.stuck, 0);
    agree(&cpu, &gpu_fit, family.name());
    // Without packing (every group a 64-thread block, as medium groups get
    // when their warps would be too few), with gamma, the shape and the
    // cut-points summed by the grid (as on many rows), and tau_k's
    // non-centred slice update, the same posterior.
    let slice = HbglmConfig { newton_tau_rows: NEWTON_TAU_ROWS, ..config.clone() };
    let unbalanced = sample_gpu(&data, &slice, &exec, GpuOptions { balance: false, grid_rows: 0, group_threads: 64, ..GpuOptions::default() }).unwrap();
    assert_eq!(unbalanced.stats.stuck, 0);
    agree(&cpu, &unbalanced, "unbalanced, scalars over the grid");
}

#[test]
fn gpu_binomial_agrees_with_cpu() {
    if device() {
        run(Family::Binomial, Prior { mu_sd: 5.0, tau: ScalePrior::HalfNormal(2.0), ..Prior::default() });
    }
}

#[test]
fn gpu_gaussian_agrees_with_cpu() {
    if device() {
        run(Family::Gaussian, Prior::default());
    }
}

/// The ordinal family: the cut-points' slice updates over every row (by
/// one block per chain, and by the grid in `run_on`'s second run), the
/// cumulative logit in every kernel (groups, a crossed factor's levels, the
/// global coefficient).
#[test]
fn gpu_ordinal_agrees_with_cpu() {
    if device() {
        run(Family::Ordinal, Prior { mu_sd: 5.0, tau: ScalePrior::HalfNormal(2.0), ..Prior::default() });
        run_on(crossed(Family::Ordinal, 30, 1), Family::Ordinal, Prior { mu_sd: 5.0, tau: ScalePrior::HalfNormal(2.0), ..Prior::default() });
    }
}

#[test]
fn gpu_poisson_agrees_with_cpu() {
    if device() {
        run(Family::Poisson, Prior { tau: ScalePrior::Fixed(0.4), ..Prior::default() });
    }
}

#[test]
fn gpu_negbinomial_agrees_with_cpu() {
    if device() {
        run(Family::NegBinomial, Prior { tau: ScalePrior::Fixed(0.4), ..Prior::default() });
    }
}

/// Correlated coefficients (lme4's `(1 + x | g)`): mu and Sigma drawn
/// conjugately on the device; the posterior (correlations included) agrees
/// with the CPU's.
#[test]
fn gpu_correlated_agrees_with_cpu() {
    use bulkem_core::gibbs::{covariance::InverseWishart, CovPrior};
    if device() {
        let prior = Prior { cov: Some(CovPrior::InverseWishart(InverseWishart { df: 5.0, scale: 1.0 })), ..Prior::default() };
        run(Family::Gaussian, prior.clone());
        run(Family::Binomial, Prior { mu_sd: 5.0, ..prior });
    }
}

/// Correlated coefficients under brms's priors (LKJ, half-t sds): Sigma's
/// coordinates slice-sampled on the device as on the CPU (`hb_lkj_draw`,
/// lkj.rs).
#[test]
fn gpu_correlated_lkj_agrees_with_cpu() {
    use bulkem_core::gibbs::CovPrior;
    if device() {
        let prior = Prior { cov: Some(CovPrior::Lkj { eta: 2.0 }), tau: ScalePrior::HalfT(1.0, 3.0), ..Prior::default() };
        run(Family::Gaussian, prior.clone());
        run(Family::Binomial, Prior { mu_sd: 5.0, ..prior.clone() });
        // A crossed factor's correlated terms under LKJ (hb_factor_global).
        let factor = Prior { cov: None, factor_cov: vec![CovPrior::Lkj { eta: 2.0 }], ..prior };
        run_on(crossed_correlated(Family::Gaussian, 30), Family::Gaussian, factor);
    }
}

/// The comparison itself, between two CPU runs with different seeds: it
/// must pass where the GPU is right (run by hand: `--ignored`).
#[test]
#[ignore]
fn cpu_runs_with_different_seeds_agree() {
    let iw = Some(bulkem_core::gibbs::CovPrior::InverseWishart(bulkem_core::gibbs::covariance::InverseWishart { df: 5.0, scale: 1.0 }));
    for (family, prior) in [
        (Family::Gaussian, Prior { cov: iw, ..Prior::default() }),
        (Family::Binomial, Prior { mu_sd: 5.0, cov: iw, ..Prior::default() }),
        (Family::Poisson, Prior { tau: ScalePrior::Fixed(0.4), ..Prior::default() }),
        (Family::NegBinomial, Prior { tau: ScalePrior::Fixed(0.4), ..Prior::default() }),
        (Family::Binomial, Prior { mu_sd: 5.0, tau: ScalePrior::HalfNormal(2.0), ..Prior::default() }),
    ] {
        for data in [data(family), data_with_offset_and_trials(family)] {
            let config = HbglmConfig { prior: prior.clone(), iter: 1500, warmup: 500, chains: 4, seed: 3, ..HbglmConfig::new(family) };
            let a = sample(&data, &config, &Exec::cpu()).unwrap();
            let b = sample(&data, &HbglmConfig { seed: 4, ..config }, &Exec::cpu()).unwrap();
            agree(&a, &b, "cpu vs cpu");
        }
    }
}

#[test]
fn gpu_draws_are_reproducible() {
    if !device() {
        return;
    }
    let data = data(Family::Binomial);
    let config = HbglmConfig { iter: 100, warmup: 50, chains: 2, seed: 8, ..HbglmConfig::new(Family::Binomial) };
    let exec = Exec { backend: Backend::Cuda, ..Exec::cpu() };
    let a = sample(&data, &config, &exec).unwrap();
    let b = sample(&data, &config, &exec).unwrap();
    assert_eq!(a.draws, b.draws);
}

/// The data of `data(family)` with an offset and, for the binomial family,
/// 1 to 6 trials per row (successes redrawn for them).
fn data_with_offset_and_trials(family: Family) -> HbData {
    let base = data(family);
    let n = base.n();
    let offset: Vec<f64> = (0..n).map(|i| 0.3 * ((i % 5) as f64 - 2.0)).collect();
    let mut y = base.y.clone();
    let mut trials = vec![];
    if family == Family::Binomial {
        let mut rng = stream(23, 0, 0, Block::Init, 1);
        trials = (0..n).map(|i| (1 + i % 6) as f64).collect();
        for i in 0..n {
            let eta = 0.3 + 0.8 * base.x[2 * i + 1] - 0.5 * base.z[i] + offset[i];
            let p = 1.0 / (1.0 + (-eta).exp());
            y[i] = (0..trials[i] as usize).filter(|_| rng.uniform() < p).count() as f64;
        }
    }
    let sizes: Vec<usize> = (0..base.groups()).map(|g| base.rows(g).len()).collect();
    HbData::new(y, base.x.clone(), base.z.clone(), &sizes, base.k, base.p).unwrap().with_offset(offset).unwrap().with_trials(trials).unwrap()
}

#[test]
fn gpu_offset_and_trials_agree_with_cpu() {
    if device() {
        let prior = Prior { mu_sd: 5.0, tau: ScalePrior::HalfNormal(2.0), ..Prior::default() };
        run_on(data_with_offset_and_trials(Family::Binomial), Family::Binomial, prior);
        run_on(data_with_offset_and_trials(Family::Poisson), Family::Poisson, Prior { tau: ScalePrior::Fixed(0.4), ..Prior::default() });
        run_on(data_with_offset_and_trials(Family::NegBinomial), Family::NegBinomial, Prior { tau: ScalePrior::Fixed(0.4), ..Prior::default() });
    }
}

#[test]
fn gpu_noise_free_response_gives_finite_draws_at_the_floors() {
    if !device() {
        return;
    }
    // y = 1 + 2 x exactly, 8 groups x 20 rows: sigma and tau pile up at
    // their floors, never below, and no draw is NaN.
    let sizes = [20usize; 8];
    let mut rng = stream(3, 0, 0, Block::Init, 1);
    let xs: Vec<f64> = (0..160).map(|_| rng.normal()).collect();
    let x: Vec<f64> = xs.iter().flat_map(|&v| [1.0, v]).collect();
    let y: Vec<f64> = xs.iter().map(|v| 1.0 + 2.0 * v).collect();
    let data = HbData::new(y, x, vec![], &sizes, 2, 0).unwrap();
    let bounds = data.scale_bounds(Family::Gaussian);
    let exec = Exec { backend: Backend::Cuda, ..Exec::cpu() };
    for seed in 0..4 {
        let config = HbglmConfig { iter: 400, warmup: 200, chains: 2, seed, ..HbglmConfig::new(Family::Gaussian) };
        let fit = sample(&data, &config, &exec).unwrap();
        assert!(fit.draws.iter().all(|v| v.is_finite()), "seed {seed}");
        let sigma = fit.chain(fit.layout.sigma().unwrap(), 1);
        assert!(sigma.iter().all(|&s| s >= bounds.sigma_floor && s < 10.0 * bounds.sigma_floor), "seed {seed}: {:?}", &sigma[..3]);
        assert!((fit.mean(fit.layout.mu(1)) - 2.0).abs() < 1e-6);
        assert_eq!(fit.stuck.iter().sum::<u64>(), fit.stats.stuck);
    }
}

#[test]
fn gpu_target_run_has_the_draws_of_a_run_that_long() {
    if !device() {
        return;
    }
    let data = data(Family::Gaussian);
    let base = HbglmConfig { iter: 3000, warmup: 100, chains: 2, seed: 8, ..HbglmConfig::new(Family::Gaussian) };
    let target = Target { ess: 50.0, rhat: 1.1, first: 110 };
    let exec = Exec { backend: Backend::Cuda, ..Exec::cpu() };
    let fit = sample(&data, &HbglmConfig { target: Some(target), ..base.clone() }, &exec).unwrap();
    let outcome = fit.target.clone().unwrap();
    assert!(outcome.met && outcome.sweeps < base.iter, "{outcome:?}");
    assert_eq!(fit.kept, outcome.sweeps - 100);
    let fixed = sample(&data, &HbglmConfig { iter: outcome.sweeps, ..base.clone() }, &exec).unwrap();
    assert_eq!(fit.draws, fixed.draws);
    let d = diagnose_array(&fit.draws, fit.kept, 2, true, &Monitor::new()).unwrap();
    assert!(target.assess(&d, outcome.sweeps, 1).met);
    // Out of reach: runs to iter and names the parameters short of it.
    let far = sample(&data, &HbglmConfig { iter: 300, target: Some(Target { ess: 1e6, ..target }), ..base }, &exec).unwrap();
    let o = far.target.unwrap();
    assert!(!o.met && o.sweeps == 300 && far.kept == 200 && o.worst.len() == 5, "{o:?}");
}

/// Data with a grouping factor crossed with the groups: row i at level (7
/// i) mod `levels`, its terms the groups' own columns (intercept and slope,
/// `terms` of them; so the exact shift against mu runs too), with effects
/// of sd about 0.5 in the data; `crossed_correlated`: the terms correlated.
fn crossed(family: Family, levels: usize, terms: usize) -> HbData {
    crossed_with(family, levels, terms, false)
}

fn crossed_correlated(family: Family, levels: usize) -> HbData {
    crossed_with(family, levels, 2, true)
}

fn crossed_with(family: Family, levels: usize, terms: usize, correlated: bool) -> HbData {
    let effect = |l: usize, j: usize| 0.5 * (((l * 5 + j * 3) % 7) as f64 - 3.0) / 2.0;
    let d = data_with(family, |i, x| (0..terms).map(|j| x[j] * effect((7 * i) % levels, j)).sum());
    let n = d.n();
    let level: Vec<usize> = (0..n).map(|i| (7 * i) % levels).collect();
    let w: Vec<f64> = (0..n * terms).map(|q| d.x[(q / terms) * d.k + q % terms]).collect();
    if correlated { d.with_correlated_factor(&level, levels, w, terms) } else { d.with_factor(&level, levels, w, terms) }.unwrap()
}

/// A factor with no spread in the data: its sds near zero, where the
/// centred updates alone crawl and the non-centred ones keep them mixing.
fn no_spread(levels: usize) -> HbData {
    let d = data(Family::Gaussian);
    let n = d.n();
    let w: Vec<f64> = (0..n * 2).map(|q| d.x[(q / 2) * d.k + q % 2]).collect();
    d.with_factor(&(0..n).map(|i| (7 * i) % levels).collect::<Vec<_>>(), levels, w, 2).unwrap()
}

#[test]
fn gpu_crossed_factor_agrees_with_cpu() {
    if device() {
        // 30 levels of about 340 rows: a warp per (chain, level).
        run_on(crossed(Family::Gaussian, 30, 2), Family::Gaussian, Prior::default());
        // The sds' non-centred updates (the GPU's as the CPU's).
        run_on(no_spread(30), Family::Gaussian, Prior::default());
        // 3 levels of about 3,400 rows: a block per (chain, level).
        run_on(crossed(Family::Binomial, 3, 1), Family::Binomial, Prior { mu_sd: 5.0, tau: ScalePrior::HalfNormal(2.0), ..Prior::default() });
        // Correlated terms (Sigma_f drawn exactly, the levels' conditional
        // priors and the shift through Sigma_f^-1), on both paths.
        run_on(crossed_correlated(Family::Gaussian, 30), Family::Gaussian, Prior::default());
        run_on(crossed_correlated(Family::Binomial, 3), Family::Binomial, Prior { mu_sd: 5.0, tau: ScalePrior::HalfNormal(2.0), ..Prior::default() });
    }
}

/// A factor with no effect in the data: its sds' posterior sits near zero,
/// where the centred updates alone crawl; the non-centred ones (on by
/// default, `GpuOptions::interweave`) keep them mixing.
#[test]
fn gpu_factor_sds_near_zero_mix() {
    if !device() {
        return;
    }
    let data = no_spread(3);
    let config = HbglmConfig { iter: 1500, warmup: 500, chains: 4, seed: 3, ..HbglmConfig::new(Family::Gaussian) };
    let exec = Exec { backend: Backend::Cuda, ..Exec::cpu() };
    // The smallest bulk ESS of the factor's two sds (the last parameters).
    let ess = |interweave: bool| {
        let fit = sample_gpu(&data, &config, &exec, GpuOptions { interweave, ..GpuOptions::default() }).unwrap();
        let np = fit.layout.n_params();
        (np - 2..np).map(|p| ess_bulk(&fit.chains_of(p))).fold(f64::INFINITY, f64::min)
    };
    let (on, off) = (ess(true), ess(false));
    eprintln!("factor sds' min bulk ESS of 4,000 draws: {on:.0} non-centred too, {off:.0} centred only");
    // On an H200: 709 and 280; 276 with the factor's non-centred updates left out.
    assert!(on >= 400.0 && on >= 2.0 * off, "non-centred {on:.0}, centred only {off:.0}");
}

/// The check above is only as good as the CPU's own agreement with itself
/// across seeds on these data (a posterior that mixes slowly fails it).
#[test]
fn crossed_cpu_runs_with_different_seeds_agree() {
    for (family, data) in [
        (Family::Gaussian, crossed(Family::Gaussian, 30, 2)),
        (Family::Binomial, crossed(Family::Binomial, 3, 1)),
        (Family::Gaussian, no_spread(30)),
        (Family::Gaussian, crossed_correlated(Family::Gaussian, 30)),
        (Family::Binomial, crossed_correlated(Family::Binomial, 3)),
    ] {
        let config = HbglmConfig { prior: Prior::default(), iter: 1500, warmup: 500, chains: 4, seed: 3, ..HbglmConfig::new(family) };
        let a = sample(&data, &config, &Exec::cpu()).unwrap();
        let b = sample(&data, &HbglmConfig { seed: 99, ..config.clone() }, &Exec::cpu()).unwrap();
        agree(&a, &b, family.name());
    }
}

/// The grid's batched slice updates of gamma, the shape and the cut-points
/// make the same decisions as the one-block path (the same random numbers,
/// the candidates in the same order; only the sums' order differs), so the
/// two give the same draws.
#[test]
fn gpu_scalars_over_grid_equal_one_block() {
    if !device() {
        return;
    }
    let exec = Exec { backend: Backend::Cuda, ..Exec::cpu() };
    for family in [Family::Gaussian, Family::Binomial, Family::NegBinomial, Family::Ordinal] {
        let data = data(family);
        let config = HbglmConfig { prior: Prior { mu_sd: 5.0, ..Prior::default() }, iter: 300, warmup: 100, chains: 2, seed: 5, ..HbglmConfig::new(family) };
        let block = sample_gpu(&data, &config, &exec, GpuOptions::default()).unwrap();
        let grid = sample_gpu(&data, &config, &exec, GpuOptions { grid_rows: 0, ..GpuOptions::default() }).unwrap();
        assert!(data.n() < GpuOptions::default().grid_rows);
        let worst = block.draws.iter().zip(&grid.draws).map(|(a, b)| (a - b).abs() / (1.0 + a.abs())).fold(0.0, f64::max);
        assert!(worst < 1e-9, "{}: draws differ by {worst:e} (relative)", family.name());
        assert_eq!(block.stats.gamma_evals, grid.stats.gamma_evals, "{}", family.name());
        assert_eq!(block.stats.scale_evals, grid.stats.scale_evals, "{}", family.name());
    }
}
