//! The CUDA backend against the CPU reference: same seed and data give the
//! same starts, statuses and iterations, parameters to 1e-8 relative and
//! log-likelihoods to 1e-10. Skipped (with a note) where no device is usable.

mod common;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use common::{cuda, gpu_or_skip};

use bulkem_core::em::{fit_many, select_many, simulate, Criterion, EmConfig, Family, FitStatus, MixFit, MixParams, Precision};
use bulkem_core::exec::Exec;
use bulkem_core::tolerances::{GPU_CPU_LOGLIK_REL, GPU_CPU_PARAM_REL};


/// Tests hold this shared, but the one that times a call, which holds it
/// alone.
static GPU: RwLock<()> = RwLock::new(());

fn gpu_shared() -> Option<RwLockReadGuard<'static, ()>> {
    gpu_or_skip().then(|| GPU.read().unwrap_or_else(|e| e.into_inner()))
}

fn gpu_alone() -> Option<RwLockWriteGuard<'static, ()>> {
    gpu_or_skip().then(|| GPU.write().unwrap_or_else(|e| e.into_inner()))
}

fn rel(a: f64, b: f64) -> f64 {
    if a == b { 0.0 } else { (a - b).abs() / b.abs().max(1e-300) }
}

fn datasets(family: Family, m: usize, sizes: &[usize], seed: u64) -> Vec<Vec<f64>> {
    let p = common::spread_params(family, m);
    sizes.iter().enumerate().map(|(i, &n)| simulate::mixture(family, &p, n, seed + i as u64)).collect()
}

/// How two fits of one dataset relate.
enum Agreement {
    Same,
    /// Both converged from the same start, at most 3 iterations apart, with
    /// the same trajectory: the changes of the log-likelihood fell within
    /// rounding of epsilon (on a flat likelihood, for several iterations), so
    /// the stopping rule, not the arithmetic, differed.
    StoppedAtEpsilon,
}

/// Compare two fits of the same dataset; returns a description of the first
/// disagreement.
fn compare(family: Family, cpu: &MixFit, gpu: &MixFit) -> Result<Agreement, String> {
    if let Some(last) = gpu.trace.last() {
        if rel(*last, gpu.loglik) > 1e-12 {
            return Err(format!("the kept trace ends at {last}, not at the log-likelihood {}", gpu.loglik));
        }
    }
    let one_apart = (1..=3).contains(&cpu.iterations.abs_diff(gpu.iterations));
    if cpu.status == FitStatus::Converged && gpu.status == FitStatus::Converged && cpu.best_start == gpu.best_start && one_apart {
        let common = cpu.trace.len().min(gpu.trace.len());
        return match (0..common).find(|&i| rel(gpu.trace[i], cpu.trace[i]) > GPU_CPU_LOGLIK_REL) {
            None => Ok(Agreement::StoppedAtEpsilon),
            Some(i) => Err(format!("traces part at iteration {}", i + 1)),
        };
    }
    if cpu.status != gpu.status || cpu.iterations != gpu.iterations || cpu.best_start != gpu.best_start {
        return Err(format!(
            "status/iterations/best start differ: cpu {:?}/{}/{} gpu {:?}/{}/{} ({:?} vs {:?})",
            cpu.status, cpu.iterations, cpu.best_start, gpu.status, gpu.iterations, gpu.best_start, cpu.message, gpu.message
        ));
    }
    // The starts as sets of components: a fit's components are sorted by
    // their first parameter and its start follows the same permutation, so
    // components that end tied (equal to rounding) may list the start in
    // either order.
    let bits = |p: &MixParams| {
        let mut c: Vec<[u64; 3]> = (0..p.alpha.len()).map(|j| [p.mu[j].to_bits(), p.alpha[j].to_bits(), p.scale[j].to_bits()]).collect();
        c.sort_unstable();
        c
    };
    if bits(&cpu.init) != bits(&gpu.init) {
        return Err(format!(
            "different starting values: cpu {:?} gpu {:?} (status {:?}, {:?} / {:?})",
            cpu.init, gpu.init, cpu.status, cpu.message, gpu.message
        ));
    }
    if cpu.status == FitStatus::Failed {
        return if cpu.message == gpu.message { Ok(Agreement::Same) } else { Err(format!("messages {:?} vs {:?}", cpu.message, gpu.message)) };
    }
    // Two components with the same parameters (a Poisson fit of tied data
    // can end so) split their weight arbitrarily: the likelihood does not
    // depend on the split, so only their total weight is identified, and
    // that is what is compared.
    let (cpu_params, gpu_params) = (merge_twins(&cpu.params), merge_twins(&gpu.params));
    let (cpu_params, gpu_params) = (&cpu_params, &gpu_params);
    if cpu_params.alpha.len() != gpu_params.alpha.len() {
        return Err(format!("components with equal parameters differ: cpu {:?} gpu {:?}", cpu.params, gpu.params));
    }
    // Every parameter to GPU_CPU_PARAM_REL relative, for components holding
    // at least one observation's worth of weight. A component with
    // n * alpha < 1 (a spurious optimum) has parameters set by a fraction of
    // one observation, ill-conditioned on any hardware: its weight is
    // compared absolutely.
    for j in 0..cpu_params.alpha.len() {
        let (a, b) = (cpu_params.alpha[j], gpu_params.alpha[j]);
        if a * cpu.nobs() < 1.0 {
            if (a - b).abs() > GPU_CPU_PARAM_REL {
                return Err(format!("alpha[{j}] {b} vs cpu {a}"));
            }
            continue;
        }
        // A Normal mean is compared relative to its size or, near zero, to
        // its component's sd (a mean of 1e-5 +- 3e-13 in data of sd 1 agrees).
        let (mu_c, mu_g, sc) = (cpu_params.mu[j], gpu_params.mu[j], cpu_params.scale[j]);
        let mu_scale = match family {
            Family::Normal | Family::LogNormal => mu_c.abs().max(sc),
            _ => mu_c.abs(),
        };
        let mu_diff = (mu_g - mu_c).abs() / mu_scale;
        let scale_diff = if sc.is_nan() && gpu_params.scale[j].is_nan() { 0.0 } else { rel(gpu_params.scale[j], sc) };
        for (what, d) in [("alpha", rel(b, a)), ("mu", mu_diff), ("scale", scale_diff)] {
            if d > GPU_CPU_PARAM_REL {
                return Err(format!("{what}[{j}]: cpu {:?} gpu {:?}: {d:e}", cpu_params, gpu_params));
            }
        }
    }
    if rel(gpu.loglik, cpu.loglik) > GPU_CPU_LOGLIK_REL {
        return Err(format!("loglik {} vs cpu {}", gpu.loglik, cpu.loglik));
    }
    for (s, (a, b)) in cpu.start_logliks.iter().zip(&gpu.start_logliks).enumerate() {
        if a.is_nan() != b.is_nan() || (a.is_finite() && rel(*b, *a) > GPU_CPU_LOGLIK_REL) {
            return Err(format!("start {s} loglik {b} vs cpu {a}"));
        }
    }
    if cpu.trace.len() != gpu.trace.len() {
        return Err("trace lengths differ".into());
    }
    if let Some(i) = (0..cpu.trace.len()).find(|&i| rel(gpu.trace[i], cpu.trace[i]) > GPU_CPU_LOGLIK_REL) {
        return Err(format!("traces part at iteration {}", i + 1));
    }
    Ok(Agreement::Same)
}

/// `p` (components sorted by their first parameter) with each run of
/// components whose parameters agree to 1e-9 merged into one, its weights
/// summed.
fn merge_twins(p: &MixParams) -> MixParams {
    let mut out = MixParams { alpha: vec![], mu: vec![], scale: vec![] };
    for j in 0..p.alpha.len() {
        let same = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || rel(a, b) <= 1e-9;
        match (out.mu.last(), out.scale.last()) {
            (Some(&m), Some(&sc)) if same(p.mu[j], m) && same(p.scale[j], sc) => *out.alpha.last_mut().expect("a component") += p.alpha[j],
            _ => {
                out.alpha.push(p.alpha[j]);
                out.mu.push(p.mu[j]);
                out.scale.push(p.scale[j]);
            }
        }
    }
    out
}

/// Every disagreement of one configuration (printed; empty when none).
fn check_all(label: &str, data: &[Vec<f64>], config: EmConfig) -> Vec<String> {
    check_fits(label, data, config.keep_trace(true))
}

/// [`check_all`] with the configuration's own keep_trace.
fn check_fits(label: &str, data: &[Vec<f64>], config: EmConfig) -> Vec<String> {
    let config = config.check().unwrap();
    let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
    let cpu = fit_many(&refs, &config, &Exec::cpu()).unwrap();
    let gpu = fit_many(&refs, &config, &cuda()).unwrap();
    assert_eq!(cpu.len(), gpu.len());
    let mut bad = Vec::new();
    let mut at_epsilon = 0;
    for (d, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
        match compare(config.family, c, g) {
            Ok(Agreement::Same) => {}
            Ok(Agreement::StoppedAtEpsilon) => at_epsilon += 1,
            Err(e) => bad.push(format!("dataset {d} (n = {}): {e}", data[d].len())),
        }
    }
    let ok = cpu.iter().filter(|f| f.success()).count();
    println!("{label}: {} datasets, {ok} fitted, {} disagreements, {at_epsilon} stopped a few iterations apart at epsilon", cpu.len(), bad.len());
    let mut problems: Vec<String> = bad.into_iter().map(|b| format!("{label}: {b}")).collect();
    // Stopping apart needs a change of the log-likelihood within rounding of
    // epsilon (rounding of a sum of 10^4 terms is ~1e-11 absolute), and the
    // trajectories were checked equal up to the stop. It is common only where
    // EM crawls (changes shrinking by under 1% an iteration: 4 overlapping
    // Poisson components, 7 of 60 datasets on an H100): at most 1 in 5.
    if at_epsilon * 5 > cpu.len().max(10) {
        problems.push(format!("{label}: {at_epsilon} datasets stopped apart at epsilon"));
    }
    for p in &problems {
        println!("DISAGREEMENT {p}");
    }
    problems
}

/// Fails with every disagreement collected over the cases.
fn assert_agree(problems: Vec<String>) {
    assert!(problems.is_empty(), "{} disagreements:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn gpu_matches_cpu_fixed_iterations() {
    let Some(_gpu) = gpu_shared() else { return };
    // n from 3 to beyond the shared-memory limit (grid path), with
    // unfittable datasets mixed in.
    let sizes = [3usize, 5, 8, 40, 200, 2000, 2001, 5999, 6001, 20_000];
    let mut problems = Vec::new();
    for family in Family::ALL {
        for m in 1..=4 {
            let mut data = datasets(family, m, &sizes, 10 * m as u64);
            data.push(vec![3.0; 100]); // constant: unfittable (and a count, valid for every family)
            data.push(vec![1.0, 2.0]);
            let config = EmConfig::new(family, m).random_inits(5).seed(3).max_iters(25).epsilon(0.0);
            problems.extend(check_all(&format!("{family:?} M={m} fixed"), &data, config));
        }
    }
    assert_agree(problems);
}

#[test]
fn gpu_weighted_fits_match_cpu() {
    let Some(_gpu) = gpu_shared() else { return };
    // Both kernel paths (shared memory up to 6,000 observations, the grid
    // beyond), integer weights with zeros and fractional weights. No n = 40:
    // with weights down to 0.1 its gamma M = 2 fit collapses a component
    // (shape 1.8e7 after 25 iterations, on the weight of about 4
    // observations), and a collapse in progress moves with rounding by 1e-8
    // on any hardware.
    let sizes = [3usize, 200, 2000, 5999, 8000, 20_000];
    let mut problems = Vec::new();
    for family in Family::ALL {
        for m in 1..=3 {
            let data = datasets(family, m, &sizes, 50 + m as u64);
            let weights: Vec<Vec<f64>> = data
                .iter()
                .enumerate()
                .map(|(d, x)| if d % 2 == 0 { common::integer_weights(x, d as u64).0 } else { (0..x.len()).map(|i| 0.1 + (i % 5) as f64 * 0.7).collect() })
                .collect();
            // Counts alone: every weight a float32 exactly, which the kernels
            // read as float32 (the mixed weights above stay float64).
            let counts: Vec<Vec<f64>> = data.iter().enumerate().map(|(d, x)| common::integer_weights(x, d as u64).0).collect();
            for (iters, eps) in [(25, 0.0), (500, 1e-8)] {
                let config = EmConfig::new(family, m).random_inits(4).seed(5).max_iters(iters).epsilon(eps).weights(weights.clone());
                problems.extend(check_all(&format!("{family:?} M={m} weighted, epsilon {eps}"), &data, config));
                let config = EmConfig::new(family, m).random_inits(4).seed(5).max_iters(iters).epsilon(eps).weights(counts.clone());
                problems.extend(check_all(&format!("{family:?} M={m} counts as weights, epsilon {eps}"), &data, config.clone()));
                if eps == 0.0 {
                    // No trace: the iterations but the last take the sums alone
                    // (and a stand-in for the log-likelihood), on both paths.
                    problems.extend(check_fits(&format!("{family:?} M={m} counts as weights, no trace"), &data, config.keep_trace(false)));
                }
            }
        }
    }
    assert_agree(problems);
}

#[test]
fn gpu_chooses_the_same_number_of_components_and_parameters_as_cpu() {
    let Some(_gpu) = gpu_shared() else { return };
    // One launch plan over M = 1..5, both kernel paths (n up to 8,000),
    // every criterion.
    let sizes: Vec<usize> = (0..40).map(|i| 150 + 200 * i).collect();
    let mut problems = Vec::new();
    for family in Family::ALL {
        let data = datasets(family, 3, &sizes, 40);
        let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
        for criterion in [Criterion::Bic, Criterion::Icl, Criterion::Aic] {
            let config = EmConfig::new(family, 1).random_inits(6).seed(11).max_iters(300).epsilon(1e-8).keep_trace(true).check().unwrap();
            let cpu = select_many(&refs, &config, &[1, 2, 3, 4, 5], criterion, &Exec::cpu()).unwrap();
            let gpu = select_many(&refs, &config, &[1, 2, 3, 4, 5], criterion, &cuda()).unwrap();
            let mut bad = Vec::new();
            for d in 0..data.len() {
                if cpu.chosen[d] != gpu.chosen[d] {
                    bad.push(format!("dataset {d}: cpu chose {} gpu {}", cpu.chosen[d] + 1, gpu.chosen[d] + 1));
                } else if let Err(e) = compare(family, &cpu.fits[d], &gpu.fits[d]) {
                    bad.push(format!("dataset {d}: {e}"));
                }
                for k in 0..5 {
                    let (a, b) = (cpu.criteria[d * 5 + k], gpu.criteria[d * 5 + k]);
                    // ICL adds sum log max posterior, which magnifies 1e-10
                    // differences of overlapping components' parameters.
                    let tol = if criterion == Criterion::Icl { 1e-6 } else { 1e-8 };
                    if a.is_nan() != b.is_nan() || (a.is_finite() && rel(b, a) > tol) {
                        bad.push(format!("dataset {d} M={}: criterion {b} vs cpu {a}", k + 1));
                    }
                }
            }
            let threes = cpu.chosen.iter().filter(|&&k| k == 2).count();
            println!("{family:?} {criterion:?}: M = 3 chosen for {threes} of {}; {} disagreements", data.len(), bad.len());
            problems.extend(bad.into_iter().map(|b| format!("{family:?} {criterion:?}: {b}")));
        }
    }
    assert_agree(problems);
}

#[test]
fn gpu_matches_cpu_converged() {
    let Some(_gpu) = gpu_shared() else { return };
    let sizes: Vec<usize> = (0..60).map(|i| 100 + 173 * i).collect();
    let mut problems = Vec::new();
    for family in Family::ALL {
        for m in 1..=4 {
            let data = datasets(family, m, &sizes, 100 + m as u64);
            let config = EmConfig::new(family, m).random_inits(4).seed(7).max_iters(500).epsilon(1e-8);
            problems.extend(check_all(&format!("{family:?} M={m} converged"), &data, config));
        }
    }
    assert_agree(problems);
}

#[test]
fn gpu_fits_ten_million_observations() {
    let Some(_gpu) = gpu_shared() else { return };
    let data = datasets(Family::InvGauss, 2, &[10_000_000], 5);
    let config = EmConfig::new(Family::InvGauss, 2).random_inits(1).seed(1).max_iters(20).epsilon(0.0);
    assert_agree(check_all("InvGauss M=2 n=1e7", &data, config));
}

#[test]
fn gpu_failures_match_cpu() {
    let Some(_gpu) = gpu_shared() else { return };
    // Starts that collapse: heavily tied data with a few outliers.
    let mut data: Vec<Vec<f64>> = (0..20).map(|i| {
        let mut x = vec![1.0; 200];
        for k in 0..(i % 5 + 3) { x[k] = 1.0 + k as f64; }
        x
    }).collect();
    data.push(vec![]);
    let mut problems = Vec::new();
    for family in Family::ALL {
        let config = EmConfig::new(family, 3).random_inits(6).seed(11).max_iters(200).epsilon(1e-10);
        problems.extend(check_all(&format!("{family:?} degenerate"), &data, config));
    }
    assert_agree(problems);
}

#[test]
fn gpu_inits_and_posterior() {
    let Some(_gpu) = gpu_shared() else { return };
    let data = datasets(Family::Normal, 2, &[500, 800], 9);
    let init = MixParams { alpha: vec![0.5, 0.5], mu: vec![-1.0, 5.0], scale: vec![1.0, 1.0] };
    let config = EmConfig::new(Family::Normal, 2).inits(vec![init]).max_iters(300).epsilon(1e-10).keep_posterior(true);
    assert_agree(check_all("Normal inits", &data, config.clone()));
    let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
    let g = fit_many(&refs, &config.check().unwrap(), &cuda()).unwrap();
    assert_eq!(g[0].posterior.as_ref().map(|p| p.len()), Some(1000));
}

#[test]
fn gpu_stops_within_a_second_of_an_interrupt_inside_one_large_dataset() {
    // Alone: calls in one process share the device threads' pools, and a
    // thread that waits for its own loop may run another call's job
    // meanwhile, which would delay this call's stop by that job's time.
    let Some(_gpu) = gpu_alone() else { return };
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    // One dataset of 10^7 observations (the grid path), 100 starts, 1000
    // iterations without stopping: far more than a second of work.
    let x = &datasets(Family::InvGauss, 2, &[10_000_000], 77)[0];
    let config = EmConfig::new(Family::InvGauss, 2).random_inits(100).max_iters(1000).epsilon(0.0).check().unwrap();
    // Warm up (kernel compilation) on a small job first.
    fit_many(&[&x[..1000]], &config, &cuda()).unwrap();
    let monitor = Arc::new(bulkem_core::exec::Monitor::new());
    let exec = Exec { monitor: monitor.clone(), ..cuda() };
    let lag = std::thread::scope(|scope| {
        let m = monitor.clone();
        let canceller = scope.spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            m.cancel();
            Instant::now()
        });
        let out = fit_many(&[&x[..]], &config, &exec);
        let stopped = Instant::now();
        assert_eq!(out.unwrap_err(), bulkem_core::Error::Interrupted);
        stopped.duration_since(canceller.join().unwrap())
    });
    assert!(lag < Duration::from_secs(1), "stopped {lag:?} after the interrupt");
}

/// precision = "mixed" on the GPU keeps the float64 fit's log-likelihood
/// (to 1e-7 relative) and, converged, its parameters (common::
/// mixed_disagreement), on both paths (8,000 observations run the grid
/// kernels in float64), and agrees with the CPU's mixed fit as closely.
#[test]
fn gpu_mixed_precision_matches_double() {
    let Some(_gpu) = gpu_shared() else { return };
    let sizes = [150usize, 2000, 5999, 8000];
    let mut bad = Vec::new();
    for family in Family::ALL {
        for m in 1..=4 {
            let data = datasets(family, m, &sizes, 70 + m as u64);
            let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
            for (iters, eps) in [(3000, 1e-9), (1500, 0.0)] {
                let config = EmConfig::new(family, m).random_inits(8).seed(2).max_iters(iters).epsilon(eps);
                let double = fit_many(&refs, &config.clone().check().unwrap(), &Exec::cpu()).unwrap();
                let mixed = config.precision(Precision::Mixed).check().unwrap();
                let (cpu_mixed, gpu_mixed) = (fit_many(&refs, &mixed, &Exec::cpu()).unwrap(), fit_many(&refs, &mixed, &cuda()).unwrap());
                for d in 0..data.len() {
                    for (what, a, b) in [("gpu mixed vs cpu double", &double[d], &gpu_mixed[d]), ("gpu mixed vs cpu mixed", &cpu_mixed[d], &gpu_mixed[d])] {
                        if let Some(why) = common::mixed_disagreement(a, b, eps > 0.0) {
                            bad.push(format!("{family:?} M={m} epsilon {eps} dataset {d} (n = {}), {what}: {why}", data[d].len()));
                        }
                    }
                }
            }
        }
    }
    println!("mixed precision: {} disagreements", bad.len());
    assert!(bad.is_empty(), "{} disagreements:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn gpu_bootstrap_matches_cpu() {
    use bulkem_core::em::bootstrap::{lrt_replicates, se_replicates, Resample};
    let Some(_gpu) = gpu_shared() else { return };
    // Fixed iterations, so that both backends run the same EM steps on the
    // same replicates (drawn on the host from keyed streams).
    for family in [Family::InvGauss, Family::Normal, Family::Poisson] {
        let data = datasets(family, 2, &[300, 2500, 7000], 41);
        let refs: Vec<&[f64]> = data.iter().map(|x| &x[..]).collect();
        let fit = |k| fit_many(&refs, &EmConfig::new(family, k).random_inits(5).seed(2).check().unwrap(), &Exec::cpu()).unwrap();
        let (f1, f2) = (fit(1), fit(2));
        let p1: Vec<MixParams> = f1.iter().map(|f| f.params.clone()).collect();
        let p2: Vec<MixParams> = f2.iter().map(|f| f.params.clone()).collect();
        let template = EmConfig::new(family, 1).max_iters(40).epsilon(0.0).seed(5);
        let sizes: Vec<usize> = data.iter().map(Vec::len).collect();
        let on = |exec: &Exec| lrt_replicates(&[0, 1, 2], &sizes, None, &p1, &p2, &template, 16, exec).unwrap();
        let (c, g) = (on(&Exec::cpu()), on(&cuda()));
        for (i, (a, b)) in c.iter().zip(&g).enumerate() {
            let scale = f1[i / 16].loglik.abs();
            assert!((a - b).abs() <= 4.0 * GPU_CPU_LOGLIK_REL * scale || (a.is_nan() && b.is_nan()), "{family:?} replicate {i}: {a} vs {b}");
        }
        let se = |exec: &Exec| se_replicates(&[0, 1, 2], &refs, None, &p2, Resample::Nonparametric, 0.95, &template, 12, false, exec).unwrap();
        let (c, g) = (se(&Exec::cpu()), se(&cuda()));
        for (d, (a, b)) in c.iter().zip(&g).enumerate() {
            assert_eq!(a.ok, b.ok, "{family:?} dataset {d}");
            for (x, y) in a.se.mu.iter().zip(&b.se.mu).chain(a.se.alpha.iter().zip(&b.se.alpha)) {
                assert!(rel(*x, *y) < 1e-5, "{family:?} dataset {d}: se {x} vs {y}");
            }
        }
    }
}

/// Censored data's replicates (drawn and censored on the host) fitted on
/// the GPU give the CPU's statistics and standard errors.
#[test]
fn gpu_censored_bootstrap_matches_cpu() {
    use bulkem_core::em::bootstrap::{lrt_replicates, se_replicates, Resample};
    use bulkem_core::em::censored::Censoring;
    use bulkem_core::em::replicate_censoring::plans;
    let Some(_gpu) = gpu_shared() else { return };
    for family in [Family::InvGauss, Family::Normal] {
        let raw = datasets(family, 2, &[400, 3000], 43);
        // A time-out at each dataset's 80th percentile.
        let (mut data, mut censoring) = (Vec::new(), Vec::new());
        for x in &raw {
            let mut sorted = x.clone();
            sorted.sort_by(f64::total_cmp);
            let at = sorted[sorted.len() * 4 / 5];
            let mut c = Censoring::default();
            data.push(x.iter().enumerate().map(|(i, &v)| if v > at { c.index.push(i); c.lower.push(at); c.upper.push(f64::INFINITY); at } else { v }).collect::<Vec<f64>>());
            censoring.push(c);
        }
        let refs: Vec<&[f64]> = data.iter().map(|x| &x[..]).collect();
        let fit = |k| fit_many(&refs, &EmConfig::new(family, k).random_inits(5).seed(2).censoring(censoring.clone()).check().unwrap(), &Exec::cpu()).unwrap();
        let (f1, f2) = (fit(1), fit(2));
        let p1: Vec<MixParams> = f1.iter().map(|f| f.params.clone()).collect();
        let p2: Vec<MixParams> = f2.iter().map(|f| f.params.clone()).collect();
        let template = EmConfig::new(family, 1).max_iters(40).epsilon(0.0).seed(5);
        let sizes: Vec<usize> = data.iter().map(Vec::len).collect();
        let pl = plans(&refs, &censoring, false, &[0, 1]).unwrap();
        let on = |exec: &Exec| lrt_replicates(&[0, 1], &sizes, Some(&pl), &p1, &p2, &template, 16, exec).unwrap();
        let (c, g) = (on(&Exec::cpu()), on(&cuda()));
        for (i, (a, b)) in c.iter().zip(&g).enumerate() {
            let scale = f1[i / 16].loglik.abs();
            assert!((a - b).abs() <= 4.0 * GPU_CPU_LOGLIK_REL * scale || (a.is_nan() && b.is_nan()), "{family:?} replicate {i}: {a} vs {b}");
        }
        for kind in [Resample::Nonparametric, Resample::Parametric] {
            let se = |exec: &Exec| se_replicates(&[0, 1], &refs, Some(&censoring), &p2, kind, 0.95, &template, 12, false, exec).unwrap();
            let (c, g) = (se(&Exec::cpu()), se(&cuda()));
            for (d, (a, b)) in c.iter().zip(&g).enumerate() {
                assert_eq!(a.ok, b.ok, "{family:?} {kind:?} dataset {d}");
                for (x, y) in a.se.mu.iter().zip(&b.se.mu).chain(a.se.alpha.iter().zip(&b.se.alpha)) {
                    assert!(rel(*x, *y) < 1e-5, "{family:?} {kind:?} dataset {d}: se {x} vs {y}");
                }
            }
        }
    }
}

#[test]
fn gpu_constrained_fits_match_cpu() {
    use bulkem_core::em::Constraints;
    let Some(_gpu) = gpu_shared() else { return };
    // Both kernel paths; one second parameter shared by every component,
    // and a held weight with a held first parameter (at its true value).
    let sizes = [200usize, 2000, 8000];
    let mut problems = Vec::new();
    for family in Family::ALL {
        for m in 2..=3 {
            let data = datasets(family, m, &sizes, 70 + m as u64);
            let truth = common::spread_params(family, m);
            let mut held = vec![None; m];
            held[m - 1] = Some(truth.mu[m - 1]);
            let mut alpha = vec![None; m];
            alpha[0] = Some(0.3);
            let mut cases = vec![("held", Constraints { alpha, first: held, ..Default::default() })];
            if family.info().second.is_some() {
                cases.push(("equal", Constraints { equal_second: true, ..Default::default() }));
            }
            for (what, c) in cases {
                for (iters, eps) in [(25, 0.0), (500, 1e-8)] {
                    let config = EmConfig::new(family, m).random_inits(4).seed(6).max_iters(iters).epsilon(eps).constraints(c.clone());
                    problems.extend(check_all(&format!("{family:?} M={m} {what}, epsilon {eps}"), &data, config));
                }
            }
        }
    }
    assert_agree(problems);
}

#[test]
fn gpu_censored_fits_match_cpu() {
    let Some(_gpu) = gpu_shared() else { return };
    // Both kernel paths: values above the 80th percentile right-censored
    // there, every 7th value interval-censored in a bin around itself; unweighted,
    // weighted, and with a shared second parameter.
    let sizes = [300usize, 2000, 8000];
    let mut problems = Vec::new();
    for family in Family::ALL {
        let m = 2;
        let raw = datasets(family, m, &sizes, 90);
        let (mut data, mut censoring) = (Vec::new(), Vec::new());
        for x in &raw {
            let mut sorted = x.clone();
            sorted.sort_by(f64::total_cmp);
            // Counts in bins of 3 (each holds three counts).
            let bin = if family.info().discrete { 3.0 } else { 0.25 };
            let (y, cens) = common::censor(x, sorted[sorted.len() * 4 / 5], Some(bin));
            data.push(y);
            censoring.push(cens);
        }
        let weights: Vec<Vec<f64>> = data.iter().map(|x| (0..x.len()).map(|i| 0.5 + (i % 3) as f64).collect()).collect();
        for (iters, eps) in [(25, 0.0), (500, 1e-8)] {
            let base = || EmConfig::new(family, m).random_inits(4).seed(8).max_iters(iters).epsilon(eps).censoring(censoring.clone());
            problems.extend(check_all(&format!("{family:?} censored, epsilon {eps}"), &data, base()));
            if eps == 0.0 {
                // More than 4 starts: no start keeps a trace during the fit,
                // so the iterations but the last take the sums alone, and the
                // kept start is rerun for its trace.
                problems.extend(check_all(&format!("{family:?} censored, 6 starts, epsilon {eps}"), &data, base().random_inits(6)));
            }
            problems.extend(check_all(&format!("{family:?} censored weighted, epsilon {eps}"), &data, base().weights(weights.clone())));
            if family.info().second.is_some() {
                let c = bulkem_core::em::Constraints { equal_second: true, ..Default::default() };
                problems.extend(check_all(&format!("{family:?} censored equal, epsilon {eps}"), &data, base().constraints(c)));
            }
        }
        // Time-outs alone: one interval a dataset, or two (a second, later
        // time-out for the odd observations), whose tails the block's tail
        // warp computes for the other warps (kernels/em.cu, pool_tails).
        for (m, timeouts) in [(2, 1), (3, 1), (2, 2), (3, 2)] {
            let (mut data, mut censoring) = (Vec::new(), Vec::new());
            for x in &datasets(family, m, &sizes, 91) {
                let mut sorted = x.clone();
                sorted.sort_by(f64::total_cmp);
                let (mut y, mut cens) = common::censor(x, sorted[sorted.len() * 4 / 5], None);
                if timeouts == 2 {
                    let later = sorted[sorted.len() * 9 / 10];
                    for (k, &i) in cens.index.iter().enumerate() {
                        if i % 2 == 1 && x[i] > later {
                            cens.lower[k] = later;
                            y[i] = later;
                        }
                    }
                }
                data.push(y);
                censoring.push(cens);
            }
            for (iters, eps, starts) in [(25, 0.0, 6), (500, 1e-8, 4)] {
                let config = EmConfig::new(family, m).random_inits(starts).seed(9).max_iters(iters).epsilon(eps).censoring(censoring.clone());
                problems.extend(check_all(&format!("{family:?} M = {m}, {timeouts} time-out(s), epsilon {eps}"), &data, config));
            }
        }
        // Every observation of some datasets binned (interval-censored), the
        // others partly censored, in one unweighted call: a dataset with no
        // exact observation is fitted with weights (its stand-ins weigh 0),
        // and then so is every dataset of the call, on both paths.
        let bin = if family.info().discrete { 3.0 } else { 0.25 };
        let (mut data, mut censoring) = (Vec::new(), Vec::new());
        for (d, x) in datasets(family, m, &sizes, 92).iter().chain(&datasets(family, m, &sizes, 93)).enumerate() {
            let mut sorted = x.clone();
            sorted.sort_by(f64::total_cmp);
            let (y, mut cens) = common::censor(x, sorted[sorted.len() * 4 / 5], Some(bin));
            if d % 2 == 0 {
                cens = Default::default();
                for (i, &v) in x.iter().enumerate() {
                    let lo = (v / bin).floor() * bin;
                    cens.index.push(i);
                    cens.lower.push(lo);
                    cens.upper.push(lo + bin);
                }
                data.push(x.clone());
            } else {
                data.push(y);
            }
            censoring.push(cens);
        }
        for (iters, eps) in [(25, 0.0), (500, 1e-8)] {
            let config = EmConfig::new(family, m).random_inits(4).seed(10).max_iters(iters).epsilon(eps).censoring(censoring.clone());
            problems.extend(check_all(&format!("{family:?} binned beside censored, epsilon {eps}"), &data, config));
        }
    }
    assert_agree(problems);
}
