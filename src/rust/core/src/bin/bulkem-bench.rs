//! bulkem-bench: throughput of the core routines, with no R involved.
//!
//! ```text
//! bulkem-bench em [--family invgauss|gamma] [--datasets D] [--n N] [--starts S] [--iters I] [--epsilon E]
//!                 [--precision double|mixed] [--weighted yes] [--equal yes] [--timeout C] [--components M]
//!                 [--backend cpu|cuda|both] [--cpu-datasets K] [--threads T]
//!                 [--json FILE]   (mixed: also fits in float64, untimed, and compares the fits;
//!                 weights 1, 2, 3, 1, ...; equal: one shared second parameter; timeout: values
//!                 above C right-censored at C; M components fitted, 2 by default)
//! bulkem-bench em-suite [--json FILE]      the cases of the GPU issue, both backends
//! bulkem-bench select [--datasets D] [--n N] [--starts S] [--iters I] [--epsilon E1,E2]
//!                     [--components 1,2,3,4,5] [--criterion BIC|ICL|AIC] [--backend cpu|cuda|both]
//!                     [--cpu-datasets K] [--threads T] [--host-starts yes|no] [--json FILE]
//! bulkem-bench select-suite [flags as select]   issue 16: 40,000 x 2,000, K = 1..5, 20 starts,
//!                     100 iterations, epsilon 1e-6 then 0, BIC, CUDA then the CPU on 400
//!                     datasets, then the host's start drawing alone
//! bulkem-bench reduce [--log2 20,24,28] [--reps R] [--backend cpu|cuda|both] [--threads T] [--sweep yes]
//! bulkem-bench reduce-table                the paper's single-precision accuracy table
//! bulkem-bench gibbs [--case all|hblogit|regimes] [--groups G] [--n N] [--k K]
//!                    [--warmup W] [--draws S] [--chains C] [--threads T]
//!                    [--big-groups B] [--sweeps N] [--correlated yes|lkj] [--target-ess E] [--crossed L] [--crossed-terms T] [--crossed-sd S] [--ordinal C]
//!                    [--backend cpu|cuda|both] [--json FILE]
//! bulkem-bench hmm [--states N] [--seqs M] [--length T] [--symbols V] [--emission categorical|gaussian]
//!                  [--backend cpu|cuda|both] [--threads T] [--json FILE]
//! bulkem-bench hmm-suite [--backend ...] [--threads T]   the cases of the HMM issue
//! bulkem-bench hmm-choice [--backend ...] [--threads T]  CPU and GPU times beside the backend choice's models
//! bulkem-bench bootstrap [--family invgauss|normal] [--datasets D] [--n N] [--replicates B]
//!                        [--components 1,2,3] [--starts S] [--iters I] [--epsilon E]
//!                        [--backend cpu|cuda|both] [--threads T] [--json FILE]
//! ```
//! `gibbs`: hierarchical logistic regression as in
//! shared/peers/numpyro_hblogit.py (G groups x n obs x K coefficients,
//! mu ~ N(0, 5^2), tau ~ half-normal(2)): wall time, sweeps/s, minimum bulk
//! ESS over the group coefficients, ESS/s; then the three parallel regimes
//! as time per sweep (one chain): B single-coefficient groups x 5 obs
//! (default 4,000,000), one global coefficient over 6,390 obs, G x n, and
//! G groups with heavy-tailed sizes (same total) with load balancing on/off.
//! On CUDA the kernels are compiled by an untimed warm-up run first (its
//! time is printed), and time per sweep is the difference between runs of
//! 2N and N sweeps, so uploads and start-up are excluded.
//! `hmm`: see bench/hmm.rs. `select`: see bench/select.rs (defaults as
//! select-suite but epsilon 1e-6 only, CUDA only, no host-start timing).
//! Prints one row per (case, backend) and appends one JSON line per row to
//! FILE (default bench-results.jsonl). With `--backend both` the CPU runs on
//! the first K datasets (default: all) and the ratio compares throughputs.

use std::io::Write;
use std::time::Instant;

use bulkem_core::em::censored::Censoring;
use bulkem_core::em::{fit_many, simulate, Constraints, EmConfig, Family, MixFit, MixParams, Precision};
use bulkem_core::exec::{available_threads, Backend, Exec};
use bulkem_core::gpu;
use rayon::prelude::*;

#[path = "bench/reduce.rs"]
mod reduce_bench;
#[path = "bench/hmm.rs"]
mod hmm_bench;
#[path = "bench/select.rs"]
mod select_bench;
#[path = "bench/bootstrap.rs"]
mod bootstrap_bench;

#[derive(Clone)]
struct Case {
    name: String,
    family: Family,
    datasets: usize,
    n: usize,
    starts: usize,
    iters: usize,
    epsilon: f64,
    cpu_datasets: usize,
    precision: Precision,
    /// Fit with observation weights (1, 2, 3, 1, ...: integer weights).
    weighted: bool,
    /// One second parameter shared by the components (a constrained fit).
    equal: bool,
    /// Observations above this value right-censored there.
    timeout: Option<f64>,
    /// Components fitted (the data are the two-component demo mixture).
    components: usize,
}

struct Row {
    backend: &'static str,
    seconds: f64,
    obs_iters: f64,
    mean_iters: f64,
    failed: usize,
    threads: usize,
}

/// The mixture each family's cases simulate: the 2015 demo for the inverse
/// Gaussian; for the gamma family the same weights and means (1 and 3),
/// shapes 4 and 1.5.
fn demo_mixture(family: Family) -> Result<MixParams, String> {
    match family {
        Family::InvGauss => Ok(simulate::demo_params()),
        Family::Gamma => Ok(MixParams { alpha: vec![0.3, 0.7], mu: vec![4.0, 1.5], scale: vec![4.0, 0.5] }),
        other => Err(format!("no benchmark mixture for the {} family", other.name())),
    }
}

fn simulate_all(family: Family, datasets: usize, n: usize) -> Result<Vec<Vec<f64>>, String> {
    let p = demo_mixture(family)?;
    Ok((0..datasets).into_par_iter().map(|d| simulate::mixture(family, &p, n, d as u64)).collect())
}

/// The observations of `x` above `c`, right-censored at `c` (their values
/// stay as stand-ins).
fn right_censored(x: &[f64], c: f64) -> Censoring {
    let index: Vec<usize> = (0..x.len()).filter(|&i| x[i] > c).collect();
    Censoring { lower: vec![c; index.len()], upper: vec![f64::INFINITY; index.len()], index }
}

fn run(case: &Case, data: &[Vec<f64>], backend: Backend, threads: usize) -> Result<(Row, Vec<MixFit>), String> {
    let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
    let config_for = |data: &[Vec<f64>]| {
        let config = EmConfig::new(case.family, case.components).random_inits(case.starts).max_iters(case.iters).epsilon(case.epsilon).precision(case.precision).seed(1);
        let config = if case.weighted { config.weights(data.iter().map(|x| (0..x.len()).map(|i| (1 + i % 3) as f64).collect()).collect()) } else { config };
        let config = if case.equal { config.constraints(Constraints { equal_second: true, ..Default::default() }) } else { config };
        let config = match case.timeout {
            Some(c) => config.censoring(data.iter().map(|x| right_censored(x, c)).collect()),
            None => config,
        };
        config.check().map_err(|e| e.to_string())
    };
    let config = config_for(data)?;
    let exec = Exec { backend, ..Exec::cpu().threads(threads) };
    // Warm-up: thread pool, CUDA context, kernel compilation.
    let warm = &data[..data.len().min(2)];
    fit_many(&refs[..warm.len()], &config_for(warm)?, &exec).map_err(|e| e.to_string())?;
    gpu::timing::take();
    let t0 = Instant::now();
    let fits = fit_many(&refs, &config, &exec).map_err(|e| e.to_string())?;
    let seconds = t0.elapsed().as_secs_f64();
    let phases = gpu::timing::take();
    if backend == Backend::Cuda {
        let parts: Vec<String> = phases.iter().map(|(p, s)| format!("{p} {:.4}", s)).collect();
        println!("    phases (s): {}", parts.join(", "));
    }
    // Work actually done: every start's iterations (all max_iters when epsilon = 0).
    let iters_done: f64 = if case.epsilon == 0.0 {
        (fits.len() * case.starts * case.iters) as f64
    } else {
        fits.iter().map(|f| f.iterations as f64).sum::<f64>() * case.starts as f64
    };
    let row = Row {
        backend: backend.name(),
        seconds,
        obs_iters: iters_done * case.n as f64,
        mean_iters: fits.iter().map(|f| f.iterations as f64).sum::<f64>() / fits.len() as f64,
        failed: fits.iter().filter(|f| !f.success()).count(),
        threads: if threads == 0 { available_threads() } else { threads },
    };
    Ok((row, fits))
}

/// How the mixed-precision fits relate to float64 fits of the same data on
/// the same backend (run untimed): the largest relative difference of the
/// kept log-likelihood, datasets beyond 1e-7, and those that kept another
/// start.
fn compare_precision(case: &Case, data: &[Vec<f64>], backend: Backend, threads: usize, mixed: &[MixFit]) -> Result<(), String> {
    let double_case = Case { precision: Precision::Double, ..case.clone() };
    let (_, double) = run(&double_case, data, backend, threads)?;
    let (mut worst, mut beyond, mut other_start) = (0.0f64, 0usize, 0usize);
    for (a, b) in double.iter().zip(mixed) {
        if a.success() != b.success() {
            beyond += 1;
            continue;
        }
        if a.success() {
            let rel = (a.loglik - b.loglik).abs() / a.loglik.abs();
            worst = worst.max(rel);
            beyond += (rel > 1e-7) as usize;
            other_start += (a.best_start != b.best_start) as usize;
        }
    }
    println!(
        "    mixed vs double ({}): largest relative loglik difference {worst:.2e}; {beyond} of {} datasets beyond 1e-7 (or another status); {other_start} kept another start",
        backend.name(),
        mixed.len()
    );
    Ok(())
}

fn print_header() {
    println!(
        "{:<26} {:>7} {:>9} {:>6} {:>5} {:>6} {:>10} {:>11} {:>9} {:>7}",
        "case", "backend", "datasets", "n", "start", "iters", "time_s", "Gobs-it/s", "gpu/cpu", "failed"
    );
}

fn bench(case: &Case, backends: &[Backend], threads: usize, json: &mut std::fs::File) -> Result<(), String> {
    let data = simulate_all(case.family, case.datasets, case.n)?;
    let mut cpu_rate = None;
    for &backend in backends {
        let part = if backend == Backend::Cpu { &data[..case.cpu_datasets.min(data.len())] } else { &data[..] };
        let (row, fits) = run(case, part, backend, threads)?;
        if case.precision == Precision::Mixed {
            compare_precision(case, part, backend, threads, &fits)?;
        }
        let rate = row.obs_iters / row.seconds;
        if backend == Backend::Cpu {
            cpu_rate = Some(rate);
        }
        let ratio = match (backend, cpu_rate) {
            (Backend::Cuda, Some(c)) => format!("{:.1}x", rate / c),
            _ => "-".into(),
        };
        println!(
            "{:<26} {:>7} {:>9} {:>6} {:>5} {:>6} {:>10.4} {:>11.3} {:>9} {:>7}",
            case.name, row.backend, part.len(), case.n, case.starts, format!("{:.0}", row.mean_iters), row.seconds, rate / 1e9, ratio, row.failed
        );
        writeln!(
            json,
            "{{\"area\":\"em\",\"case\":\"{}\",\"backend\":\"{}\",\"datasets\":{},\"n\":{},\"starts\":{},\"max_iters\":{},\"epsilon\":{},\"precision\":\"{}\",\"weighted\":{},\"equal\":{},\"timeout\":{},\"components\":{},\"mean_iters\":{:.2},\"threads\":{},\"seconds\":{:.6},\"obs_iters_per_s\":{:.1},\"failed\":{}}}",
            case.name, row.backend, part.len(), case.n, case.starts, case.iters, case.epsilon, case.precision.name(), case.weighted, case.equal, case.timeout.map_or("null".to_string(), |c| c.to_string()), case.components, row.mean_iters, row.threads, row.seconds, rate, row.failed
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn suite() -> Vec<Case> {
    let c = |name: &str, datasets, n, starts, iters, epsilon, cpu_datasets| Case { name: name.into(), family: Family::InvGauss, datasets, n, starts, iters, epsilon, cpu_datasets, precision: Precision::Double, weighted: false, equal: false, timeout: None, components: 2 };
    vec![
        c("40k x100 starts x100 it", 40_000, 2000, 100, 100, 0.0, 200),
        Case { family: Family::Gamma, ..c("40k gamma x100 st x100 it", 40_000, 2000, 100, 100, 0.0, 200) },
        c("40k x100 starts eps1e-6", 40_000, 2000, 100, 100, 1e-6, 200),
        c("1000 x1 start eps1e-6", 1000, 2000, 1, 100, 1e-6, 1000),
        c("1 x 1e7 obs x100 it", 1, 10_000_000, 1, 100, 0.0, 1),
        c("1 x 2000 obs x1 start", 1, 2000, 1, 100, 1e-6, 1),
    ]
}

fn main() {
    let result = (|| -> Result<(), String> {
        let mut it = std::env::args().skip(1);
        let area = it.next().ok_or("usage: bulkem-bench em|em-suite|select|select-suite|bootstrap|reduce|reduce-table|gibbs|hmm|hmm-suite|hmm-choice [flags]; see the source header")?;
        if area == "gibbs" {
            let args: Vec<String> = it.collect();
            let json = args.windows(2).find(|w| w[0] == "--json").map(|w| w[1].clone()).unwrap_or_else(|| "bench-results.jsonl".into());
            let threads = args.windows(2).find(|w| w[0] == "--threads").and_then(|w| w[1].parse().ok()).unwrap_or(0);
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&json).map_err(|e| e.to_string())?;
            return Exec::cpu().threads(threads).install(|| gibbs_bench::main(&args, threads, &mut file)).map_err(|e| e.to_string())?;
        }
        if area == "bootstrap" {
            let args: Vec<String> = it.collect();
            return bootstrap_bench::main(&args);
        }
        if area == "select" || area == "select-suite" {
            let args: Vec<String> = it.collect();
            return select_bench::main(area == "select-suite", &args);
        }
        let mut reduce_opts = reduce_bench::Options { log2_sizes: vec![20, 22, 24, 26, 28, 30], reps: 20, backend: "both".into(), threads: 0, sweep: false };
        let mut hmm_case = hmm_bench::Case { states: 10, seqs: 50, length: 100, symbols: 10, gaussian: false };
        let mut case = Case { name: "custom".into(), family: Family::InvGauss, datasets: 200, n: 2000, starts: 10, iters: 100, epsilon: 0.0, cpu_datasets: usize::MAX, precision: Precision::Double, weighted: false, equal: false, timeout: None, components: 2 };
        let (mut backend, mut threads, mut json) = ("cpu".to_string(), 0usize, "bench-results.jsonl".to_string());
        while let Some(flag) = it.next() {
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            let num = || value.parse::<usize>().map_err(|_| format!("{flag}: not a whole number: {value}"));
            match flag.as_str() {
                "--datasets" => case.datasets = num()?,
                "--family" => case.family = Family::parse(&value).ok_or(format!("--family: unknown family {value}"))?,
                "--n" => case.n = num()?,
                "--starts" => case.starts = num()?,
                "--iters" => case.iters = num()?,
                "--components" => case.components = num()?,
                "--cpu-datasets" => case.cpu_datasets = num()?,
                "--epsilon" => case.epsilon = value.parse().map_err(|_| format!("--epsilon: not a number: {value}"))?,
                "--weighted" => case.weighted = value == "yes",
                "--equal" => case.equal = value == "yes",
                "--timeout" => case.timeout = Some(value.parse().map_err(|_| format!("--timeout: not a number: {value}"))?),
                "--precision" => case.precision = Precision::parse(&value).ok_or(format!("--precision: double or mixed, not {value}"))?,
                "--backend" => backend = value.clone(),
                "--threads" => threads = num()?,
                "--json" => json = value.clone(),
                "--log2" => {
                    reduce_opts.log2_sizes = value.split(',').map(|v| v.parse().map_err(|_| format!("--log2: not a list of whole numbers: {value}"))).collect::<Result<_, _>>()?
                }
                "--reps" => reduce_opts.reps = num()?,
                "--sweep" => reduce_opts.sweep = value == "yes",
                "--states" => hmm_case.states = num()?,
                "--seqs" => hmm_case.seqs = num()?,
                "--length" => hmm_case.length = num()?,
                "--symbols" => hmm_case.symbols = num()?,
                "--emission" => {
                    hmm_case.gaussian = match value.as_str() {
                        "gaussian" => true,
                        "categorical" => false,
                        other => return Err(format!("--emission takes categorical or gaussian, not {other}")),
                    }
                }
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&json).map_err(|e| e.to_string())?;
        let probe = gpu::probe();
        println!("cpu threads: {}; cuda: {}", available_threads(),
            if probe.usable() { probe.devices.iter().map(|d| format!("{} (cc {}.{}, {:.0} GiB)", d.name, d.compute_capability.0, d.compute_capability.1, d.total_memory as f64 / 1073741824.0)).collect::<Vec<_>>().join(", ") } else { probe.reason.clone() });
        match area.as_str() {
            "em" => {
                print_header();
                let backends = match backend.as_str() {
                    "cpu" => vec![Backend::Cpu],
                    "cuda" => vec![Backend::Cuda],
                    "both" => vec![Backend::Cpu, Backend::Cuda],
                    other => return Err(format!("unknown backend {other}")),
                };
                bench(&case, &backends, threads, &mut file)
            }
            "em-suite" => {
                print_header();
                for case in suite() {
                    bench(&case, &[Backend::Cpu, Backend::Cuda], threads, &mut file)?;
                }
                Ok(())
            }
            "reduce" => {
                reduce_opts.backend = backend.clone();
                reduce_opts.threads = threads;
                reduce_bench::run(&reduce_opts, &mut file)
            }
            "reduce-table" => reduce_bench::accuracy_table(&[16_384, 1_048_576, 10_000_000, 16_777_216, 67_108_864, 134_215_680], &mut file),
            "hmm" | "hmm-suite" | "hmm-choice" => {
                let backends = match backend.as_str() {
                    "cpu" => vec![Backend::Cpu],
                    "cuda" => vec![Backend::Cuda],
                    "both" => vec![Backend::Cpu, Backend::Cuda],
                    other => return Err(format!("unknown backend {other}")),
                };
                if area == "hmm" {
                    hmm_bench::run(&hmm_case, &backends, threads, &mut file)
                } else if area == "hmm-choice" {
                    hmm_bench::choice(&backends, threads, &mut file)
                } else {
                    hmm_bench::suite(&backends, threads, &mut file)
                }
            }
            other => Err(format!("unknown area {other}; known: em, em-suite, select, select-suite, reduce, reduce-table, gibbs, hmm, hmm-suite, hmm-choice")),
        }
    })();
    if let Err(e) = result {
        eprintln!("bulkem-bench: {e}");
        std::process::exit(2);
    }
}

mod gibbs_bench {
    use std::io::Write;
    use std::time::Instant;

    use bulkem_core::exec::{available_threads, Backend, Exec};
    use bulkem_core::gibbs::diagnostics::ess_bulk;
    use bulkem_core::gibbs::gpu::{sample_gpu, GpuOptions, GRID_SCALAR_ROWS};
    use bulkem_core::gibbs::{sample, stream, Block, CovPrior, Family, HbData, HbglmConfig, Prior, ScalePrior, SliceSettings, Sweeper, NEWTON_TAU_ROWS};
    use rayon::prelude::*;

    struct Opts {
        case: String,
        groups: usize,
        n: usize,
        k: usize,
        warmup: usize,
        draws: usize,
        chains: usize,
        big_groups: usize,
        sweeps: usize,
        threads: usize,
        backends: Vec<Backend>,
        /// The group coefficients correlated (inverse-Wishart(K + 3, (K + 3) I)).
        correlated: bool,
        /// Correlated terms under LKJ(1) (`--correlated lkj`) instead.
        lkj: bool,
        /// Sample to bulk and tail ESS >= this and R-hat <= 1.01 (first check
        /// after warmup + draws, at most 3 times that: the draws are allocated for the most).
        target_ess: Option<f64>,
        /// A random intercept of L levels crossed with the groups (row i of
        /// the data at level i mod L, effects 0.5 N(0, 1)); 0: none.
        crossed: usize,
        /// Terms of the crossed factor: the first T columns (correlated
        /// with `--correlated yes` when T > 1).
        crossed_terms: usize,
        /// The sd of the crossed factor's intercept effects (its slopes':
        /// 0.6 times it); 0: a factor with no effect in the data.
        crossed_sd: f64,
        /// The hblogit case's response as C ordered categories (a latent
        /// logistic cut at 0, 1, ..., C - 2; the ordinal family); 0: 0/1.
        ordinal: usize,
        /// Global (population-level) covariates, N(0, 1), coefficient 0.5
        /// each: `y ~ z1 + ... + (1 + x | g)`.
        global: usize,
        /// GpuOptions::grid_rows: from this many rows the GPU sums gamma's,
        /// the shape's and the cut-points' candidates over the grid.
        grid_rows: usize,
        /// GpuOptions::interweave (`--interweave no`: mu and tau centred only).
        interweave: bool,
        /// GpuOptions::group_threads (0: chosen).
        group_threads: u32,
    }

    fn parse(args: &[String], threads: usize) -> Result<Opts, String> {
        let mut o = Opts { case: "all".into(), groups: 500, n: 500, k: 5, warmup: 500, draws: 1000, chains: 4, big_groups: 4_000_000, sweeps: 10, threads, backends: vec![Backend::Cpu], correlated: false, lkj: false, target_ess: None, crossed: 0, crossed_terms: 1, crossed_sd: 0.5, ordinal: 0, global: 0, grid_rows: GRID_SCALAR_ROWS, interweave: true, group_threads: 0 };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            let num = || value.parse::<usize>().map_err(|_| format!("{flag}: not a whole number: {value}"));
            match flag.as_str() {
                "--case" => o.case = value.clone(),
                "--groups" => o.groups = num()?,
                "--n" => o.n = num()?,
                "--k" => o.k = num()?,
                "--warmup" => o.warmup = num()?,
                "--draws" => o.draws = num()?,
                "--chains" => o.chains = num()?,
                "--big-groups" => o.big_groups = num()?,
                "--sweeps" => o.sweeps = num()?,
                "--correlated" => (o.correlated, o.lkj) = (value == "yes" || value == "lkj", value == "lkj"),
                "--crossed" => o.crossed = num()?,
                "--crossed-terms" => o.crossed_terms = num()?,
                "--crossed-sd" => o.crossed_sd = value.parse::<f64>().map_err(|_| format!("{flag}: not a number: {value}"))?,
                "--ordinal" => o.ordinal = num()?,
                "--global" => o.global = num()?,
                "--grid-rows" => o.grid_rows = num()?,
                "--interweave" => o.interweave = value == "yes",
                "--group-threads" => o.group_threads = num()? as u32,
                "--target-ess" => o.target_ess = Some(value.parse::<f64>().map_err(|_| format!("{flag}: not a number: {value}"))?),
                "--backend" => {
                    o.backends = match value.as_str() {
                        "cpu" => vec![Backend::Cpu],
                        "cuda" => vec![Backend::Cuda],
                        "both" => vec![Backend::Cpu, Backend::Cuda],
                        other => return Err(format!("unknown backend {other}")),
                    }
                }
                "--threads" | "--json" => {}
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(o)
    }

    /// The peer's data: x = [1, N(0,1) x (K-1)], beta_g = (0.5, 1, ..., 1) +
    /// 0.5 N(0,1), y ~ Bernoulli(logistic(x' beta_g)). `sizes` give the rows
    /// per group.
    fn hblogit_data(sizes: &[usize], k: usize, seed: u64) -> HbData {
        hblogit_crossed_data(sizes, k, seed, 0, 1, 0.5, false, 0, 0)
    }

    /// As `hblogit_data`, with a factor of `levels` levels (none for 0)
    /// crossed with the groups, varying the first `terms` columns (effects
    /// 0.5 N(0, 1) for the intercept, 0.3 N(0, 1) for slopes), correlated
    /// or not; with `categories` >= 2 the response is ordinal instead
    /// (`Opts::ordinal`); with `global` > 0, that many global covariates
    /// (`Opts::global`).
    #[allow(clippy::too_many_arguments)]
    fn hblogit_crossed_data(sizes: &[usize], k: usize, seed: u64, levels: usize, terms: usize, sd: f64, correlated: bool, categories: usize, global: usize) -> HbData {
        let mut urng = stream(seed, 1, 0, Block::Init, 1);
        let effects: Vec<f64> = (0..levels * terms).map(|q| if q % terms == 0 { sd } else { 0.6 * sd } * urng.normal()).collect();
        let first: Vec<usize> = sizes.iter().scan(0, |acc, &s| { let f = *acc; *acc += s; Some(f) }).collect();
        let parts: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = sizes
            .par_iter()
            .enumerate()
            .map(|(g, &n)| {
                let mut rng = stream(seed, 0, 0, Block::Group(g), sizes.len());
                let beta: Vec<f64> = (0..k).map(|j| if j == 0 { 0.5 } else { 1.0 } + 0.5 * rng.normal()).collect();
                let mut x = Vec::with_capacity(n * k);
                let mut z = Vec::with_capacity(n * global);
                let mut y = Vec::with_capacity(n);
                for r in 0..n {
                    let row: Vec<f64> = (0..k).map(|j| if j == 0 { 1.0 } else { rng.normal() }).collect();
                    let zr: Vec<f64> = (0..global).map(|_| rng.normal()).collect();
                    let l = if levels > 0 { (first[g] + r) % levels } else { 0 };
                    let u: f64 = if levels > 0 { (0..terms).map(|j| row[j] * effects[l * terms + j]).sum() } else { 0.0 };
                    let eta: f64 = row.iter().zip(&beta).map(|(a, b)| a * b).sum::<f64>() + u + 0.5 * zr.iter().sum::<f64>();
                    let u = rng.uniform();
                    y.push(if categories >= 2 {
                        let latent = eta + (u / (1.0 - u)).ln();
                        1.0 + (0..categories - 1).filter(|&c| latent > c as f64).count() as f64
                    } else {
                        (u < 1.0 / (1.0 + (-eta).exp())) as u8 as f64
                    });
                    x.extend(row);
                    z.extend(zr);
                }
                (y, x, z)
            })
            .collect();
        let (mut y, mut x, mut z) = (Vec::new(), Vec::new(), Vec::new());
        for (py, px, pz) in parts {
            y.extend(py);
            x.extend(px);
            z.extend(pz);
        }
        let data = HbData::new(y, x, z, sizes, k, global).expect("valid benchmark data").with_categories(categories);
        if levels == 0 {
            return data;
        }
        let n = data.n();
        let level: Vec<usize> = (0..n).map(|i| i % levels).collect();
        let w: Vec<f64> = (0..n).flat_map(|i| data.x[i * k..i * k + terms].to_vec()).collect();
        if correlated && terms > 1 { data.with_correlated_factor(&level, levels, w, terms) } else { data.with_factor(&level, levels, w, terms) }.expect("valid benchmark data")
    }

    fn peer_prior() -> Prior {
        Prior { mu_mean: 0.0, mu_sd: 5.0, tau: ScalePrior::HalfNormal(2.0), ..Prior::default() }
    }

    fn threads_used(t: usize) -> usize {
        if t == 0 { available_threads() } else { t }
    }

    fn hblogit(o: &Opts, json: &mut std::fs::File) -> Result<(), String> {
        if o.crossed_terms == 0 || o.crossed_terms > o.k {
            return Err(format!("--crossed-terms must be 1..K ({}), not {}", o.k, o.crossed_terms));
        }
        if o.ordinal == 1 {
            return Err("--ordinal must be 0 (a 0/1 response) or at least 2 categories".into());
        }
        let data = hblogit_crossed_data(&vec![o.n; o.groups], o.k, 0, o.crossed, o.crossed_terms, o.crossed_sd, o.correlated, o.ordinal, o.global);
        let mut cpu_rate = None;
        for &backend in &o.backends {
            let rate = hblogit_on(o, &data, backend, json)?;
            match backend {
                Backend::Cpu => cpu_rate = Some(rate),
                Backend::Cuda => {
                    if let Some(c) = cpu_rate {
                        println!("  gpu/cpu: {:.1}x min ESS/s", rate / c);
                    }
                }
            }
        }
        Ok(())
    }

    /// The hblogit case's family: binomial, or ordinal with `--ordinal`.
    fn hblogit_family(o: &Opts) -> Family {
        if o.ordinal >= 2 { Family::Ordinal } else { Family::Binomial }
    }

    fn warm_gpu(family: Family) -> Result<f64, String> {
        let t0 = Instant::now();
        let tiny = hblogit_crossed_data(&[5, 80, 9000], 2, 9, 0, 1, 0.5, false, if family == Family::Ordinal { 3 } else { 0 }, 1);
        let config = HbglmConfig { iter: 2, warmup: 1, chains: 1, ..HbglmConfig::new(family) };
        sample_gpu(&tiny, &config, &Exec { backend: Backend::Cuda, ..Exec::cpu() }, GpuOptions::default()).map_err(|e| e.to_string())?;
        Ok(t0.elapsed().as_secs_f64())
    }

    /// One backend's run of the hblogit case; returns min ESS/s.
    fn hblogit_on(o: &Opts, data: &HbData, backend: Backend, json: &mut std::fs::File) -> Result<f64, String> {
        if backend == Backend::Cuda {
            println!("  cuda warm-up (kernel compilation): {:.2} s", warm_gpu(hblogit_family(o))?);
        }
        let cov_for = |k: usize| if o.lkj { CovPrior::Lkj { eta: 1.0 } } else { bulkem_core::gibbs::default_factor_cov(k) };
        let first = o.warmup + o.draws;
        let config = HbglmConfig {
            prior: Prior { cov: o.correlated.then(|| cov_for(o.k)), factor_cov: vec![cov_for(o.crossed_terms)], ..peer_prior() },
            iter: if o.target_ess.is_some() { 3 * first } else { first },
            warmup: o.warmup,
            chains: o.chains,
            seed: 1,
            target: o.target_ess.map(|ess| bulkem_core::gibbs::Target { ess, rhat: 1.01, first }),
            ..HbglmConfig::new(hblogit_family(o))
        };
        let exec = Exec { backend, ..Exec::cpu().threads(o.threads) };
        bulkem_core::gpu::timing::take();
        let t0 = Instant::now();
        // --grid-rows, --interweave or --group-threads other than the
        // defaults: the GPU sampler itself, so that they can be set.
        let fit = if backend == Backend::Cuda && (o.grid_rows != GRID_SCALAR_ROWS || !o.interweave || o.group_threads != 0) {
            sample_gpu(data, &config, &exec, GpuOptions { grid_rows: o.grid_rows, interweave: o.interweave, group_threads: o.group_threads, ..GpuOptions::default() })
        } else {
            sample(data, &config, &exec)
        }
        .map_err(|e| e.to_string())?;
        let seconds = t0.elapsed().as_secs_f64();
        if backend == Backend::Cuda {
            // The target's checks, summed by phase.
            let mut sums: Vec<(&str, f64)> = Vec::new();
            let phases = bulkem_core::gpu::timing::take();
            println!("  phases (s): {}", phases.iter().filter(|(p, _)| !p.starts_with("check")).map(|(p, s)| format!("{p} {s:.3}")).collect::<Vec<_>>().join(", "));
            for (p, s) in phases.into_iter().filter(|(p, _)| p.starts_with("check")) {
                match sums.iter_mut().find(|(q, _)| *q == p) {
                    Some(e) => e.1 += s,
                    None => sums.push((p, s)),
                }
            }
            if !sums.is_empty() {
                println!("  checks (s): {}", sums.iter().map(|(p, s)| format!("{p} {s:.2}")).collect::<Vec<_>>().join(", "));
            }
        }
        let ess: Vec<f64> = (0..o.groups * o.k).into_par_iter().map(|p| ess_bulk(&fit.chains_of(p))).collect();
        let min_ess = ess.iter().cloned().fold(f64::INFINITY, f64::min);
        // Every parameter: mu, tau (the sds), and the correlations too.
        let min_all = (0..fit.layout.n_params()).into_par_iter().map(|p| ess_bulk(&fit.chains_of(p))).filter(|e| !e.is_nan()).reduce(|| f64::INFINITY, f64::min);
        let mut sorted = ess.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        let sweeps = fit.sweeps as f64;
        if let Some(t) = &fit.target {
            let d = bulkem_core::gibbs::diagnostics::diagnose_array(&fit.draws, fit.kept, fit.chains, true, &bulkem_core::exec::Monitor::new()).map_err(|e| e.to_string())?;
            let fold = |v: &[f64], f: fn(f64, f64) -> f64, init: f64| v.iter().copied().filter(|x| !x.is_nan()).fold(init, f);
            println!(
                "  target bulk and tail ESS >= {}, R-hat <= 1.01: met {} after {} sweeps per chain ({} checks), {:.2} s; max R-hat {:.4}, min bulk ESS {:.0}, min tail ESS {:.0}; draws {:.2} GB",
                o.target_ess.unwrap_or(0.0), t.met, t.sweeps, t.checks, seconds,
                fold(&d.rhat, f64::max, 0.0), fold(&d.ess_bulk, f64::min, f64::INFINITY), fold(&d.ess_tail, f64::min, f64::INFINITY),
                (fit.draws.len() * 8) as f64 / 1e9
            );
        }
        let evals = fit.stats.beta_evals as f64 / (sweeps * (o.groups * o.k) as f64);
        if o.global > 0 || o.ordinal > 2 {
            println!(
                "  evaluations per sweep: {:.2} per gamma update, {:.2} of the scales and cut-points",
                fit.stats.gamma_evals as f64 / (sweeps * o.global.max(1) as f64),
                fit.stats.scale_evals as f64 / sweeps
            );
        }
        println!(
            "hblogit {} G={} n={} K={} global={} warmup={} draws={} chains={} correlated={} crossed={}x{} backend={} threads={}: {:.2} s, {:.1} sweeps/s, min bulk ESS {:.0} (median {:.0}), min ESS/s {:.1}, min ESS per sweep {:.3}, {:.2} evals per beta update; all {} parameters: min bulk ESS {:.0}, min ESS/s {:.1}",
            hblogit_family(o).name(), o.groups, o.n, o.k, o.global, o.warmup, o.draws, o.chains, o.correlated, o.crossed, o.crossed_terms, backend.name(), threads_used(o.threads), seconds, sweeps / seconds, min_ess, median, min_ess / seconds, min_ess / sweeps, evals,
            fit.layout.n_params(), min_all, min_all / seconds
        );
        writeln!(
            json,
            "{{\"area\":\"gibbs\",\"case\":\"hblogit\",\"backend\":\"{}\",\"groups\":{},\"n\":{},\"k\":{},\"warmup\":{},\"draws\":{},\"chains\":{},\"threads\":{},\"seconds\":{:.4},\"sweeps_per_s\":{:.3},\"min_ess_bulk\":{:.1},\"median_ess_bulk\":{:.1},\"min_ess_per_s\":{:.3},\"evals_per_beta_update\":{:.3},\"correlated\":{},\"min_ess_bulk_all\":{:.1}}}",
            backend.name(), o.groups, o.n, o.k, o.warmup, o.draws, o.chains, threads_used(o.threads), seconds, sweeps / seconds, min_ess, median, min_ess / seconds, evals, o.correlated, min_all
        )
        .map_err(|e| e.to_string())?;
        Ok(min_ess / seconds)
    }

    /// Seconds per sweep of one chain on `backend`.
    fn per_sweep(backend: Backend, data: &HbData, family: Family, prior: &Prior, sweeps: usize, balance: bool) -> Result<f64, String> {
        match backend {
            Backend::Cpu => Ok(time_per_sweep(data, family, prior, sweeps, balance)),
            Backend::Cuda => {
                // Difference of 2N and N sweeps: start-up and uploads cancel.
                let exec = Exec { backend: Backend::Cuda, ..Exec::cpu() };
                let run = |iter: usize| -> Result<f64, String> {
                    let config = HbglmConfig { prior: prior.clone(), iter, warmup: iter - 1, chains: 1, ..HbglmConfig::new(family) };
                    let t0 = Instant::now();
                    sample_gpu(data, &config, &exec, GpuOptions { balance, ..GpuOptions::default() }).map_err(|e| e.to_string())?;
                    Ok(t0.elapsed().as_secs_f64())
                };
                let n = sweeps.max(20);
                let (a, b) = (run(n)?, run(2 * n)?);
                Ok(((b - a) / n as f64).max(0.0))
            }
        }
    }

    /// Seconds per sweep of one chain after `sweeps / 2` untimed sweeps.
    fn time_per_sweep(data: &HbData, family: Family, prior: &Prior, sweeps: usize, balance: bool) -> f64 {
        let sw = Sweeper { data, family, prior, slice: SliceSettings::new(1.0), seed: 2, chain: 0, balance, newton_tau_rows: NEWTON_TAU_ROWS };
        let mut state = sw.init(1.0);
        let warm = (sweeps / 2).max(1);
        for t in 0..warm {
            sw.sweep(&mut state, t, true);
        }
        let t0 = Instant::now();
        for t in 0..sweeps {
            sw.sweep(&mut state, warm + t, false);
        }
        t0.elapsed().as_secs_f64() / sweeps as f64
    }

    /// Time one regime case on every backend and print/record it.
    #[allow(clippy::too_many_arguments)]
    fn regime_row(o: &Opts, json: &mut std::fs::File, name: &str, regime: &str, data: &HbData, prior: &Prior, sweeps: usize, balance: bool) -> Result<(), String> {
        for &backend in &o.backends {
            let t = per_sweep(backend, data, Family::Binomial, prior, sweeps, balance)?;
            let threads = threads_used(o.threads);
            println!("{:<34} {:<24} {:<5} G={:<9} n={:<10} K={} P={}  {:>10.3} ms/sweep", name, regime, backend.name(), data.groups(), data.n(), data.k, data.p, t * 1e3);
            writeln!(
                json,
                "{{\"area\":\"gibbs\",\"case\":\"{name}\",\"regime\":\"{regime}\",\"backend\":\"{}\",\"groups\":{},\"n\":{},\"k\":{},\"p\":{},\"threads\":{},\"seconds_per_sweep\":{:.6}}}",
                backend.name(), data.groups(), data.n(), data.k, data.p, threads, t
            )
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn regimes(o: &Opts, json: &mut std::fs::File) -> Result<(), String> {
        let prior = peer_prior();
        if o.backends.contains(&Backend::Cuda) {
            println!("  cuda warm-up (kernel compilation): {:.2} s", warm_gpu(Family::Binomial)?);
        }
        // Block-parallel: many single-coefficient groups of 5 observations.
        let many = hblogit_data(&vec![5; o.big_groups], 1, 3);
        regime_row(o, json, "many groups x 5 obs", "block-parallel", &many, &prior, o.sweeps, true)?;
        drop(many);
        // Log-posterior-parallel: one global coefficient over 6,390 rows
        // (one group holding an intercept).
        let base = hblogit_data(&[6390], 2, 4);
        let x: Vec<f64> = base.x.chunks(2).map(|r| r[0]).collect();
        let z: Vec<f64> = base.x.chunks(2).map(|r| r[1]).collect();
        let global = HbData::new(base.y.clone(), x, z, &[6390], 1, 1).map_err(|e| e.to_string())?;
        regime_row(o, json, "one global coefficient, 6390 obs", "log-posterior-parallel", &global, &prior, o.sweeps.max(100), true)?;
        // Both: G x n, and heavy-tailed sizes with the same total.
        let even = hblogit_data(&vec![o.n; o.groups], o.k, 5);
        regime_row(o, json, "equal groups", "both", &even, &prior, o.sweeps, true)?;
        let sizes = heavy_tailed_sizes(o.groups, o.groups * o.n);
        let heavy = hblogit_data(&sizes, o.k, 6);
        for balance in [true, false] {
            let name = if balance { "heavy-tailed groups, balanced" } else { "heavy-tailed groups, unbalanced" };
            regime_row(o, json, name, "both", &heavy, &prior, o.sweeps, balance)?;
        }
        println!("  heavy-tailed sizes: min {}, median {}, max {}", sizes.iter().min().unwrap_or(&0), { let mut s = sizes.clone(); s.sort(); s[s.len() / 2] }, sizes.iter().max().unwrap_or(&0));
        Ok(())
    }

    /// G group sizes from a Pareto(1.1) distribution (at least 5 rows),
    /// scaled to add up to about `total`, largest first so that an
    /// unbalanced split puts the big groups on one thread.
    fn heavy_tailed_sizes(groups: usize, total: usize) -> Vec<usize> {
        let mut rng = stream(7, 0, 0, Block::Init, 1);
        let raw: Vec<f64> = (0..groups).map(|_| rng.uniform().powf(-1.0 / 1.1)).collect();
        let sum: f64 = raw.iter().sum();
        let mut sizes: Vec<usize> = raw.iter().map(|r| ((r / sum * total as f64).round() as usize).max(5)).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        sizes
    }

    pub fn main(args: &[String], threads: usize, json: &mut std::fs::File) -> Result<(), String> {
        let o = parse(args, threads)?;
        println!("cpu threads: {}", threads_used(o.threads));
        match o.case.as_str() {
            "hblogit" => hblogit(&o, json),
            "regimes" => regimes(&o, json),
            "all" => {
                hblogit(&o, json)?;
                regimes(&o, json)
            }
            other => Err(format!("unknown gibbs case {other}; known: all, hblogit, regimes")),
        }
    }
}
