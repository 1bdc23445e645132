//! bulkem-bench: throughput of the core routines, with no R involved.
//!
//! ```text
//! bulkem-bench em [--datasets D] [--n N] [--starts S] [--iters I] [--epsilon E]
//!                 [--backend cpu|cuda|both] [--cpu-datasets K] [--threads T] [--json FILE]
//! bulkem-bench em-suite [--json FILE]      the cases of the GPU issue, both backends
//! bulkem-bench reduce [--log2 20,24,28] [--reps R] [--backend cpu|cuda|both] [--threads T] [--sweep yes]
//! bulkem-bench reduce-table                the paper's single-precision accuracy table
//! bulkem-bench hmm [--states N] [--seqs M] [--length T] [--symbols V]
//!                  [--backend cpu|cuda|both] [--threads T] [--json FILE]
//! bulkem-bench hmm-suite [--backend ...] [--threads T]   the cases of the HMM issue
//! ```
//! `hmm`: see bench/hmm.rs.
//! Prints one row per (case, backend) and appends one JSON line per row to
//! FILE (default bench-results.jsonl). With `--backend both` the CPU runs on
//! the first K datasets (default: all) and the ratio compares throughputs.

use std::io::Write;
use std::time::Instant;

use bulkem_core::em::{fit_many, simulate, EmConfig, Family};
use bulkem_core::exec::{available_threads, Backend, Exec};
use bulkem_core::gpu;
use rayon::prelude::*;

#[path = "bench/reduce.rs"]
mod reduce_bench;
#[path = "bench/hmm.rs"]
mod hmm_bench;

#[derive(Clone)]
struct Case {
    name: String,
    datasets: usize,
    n: usize,
    starts: usize,
    iters: usize,
    epsilon: f64,
    cpu_datasets: usize,
}

struct Row {
    backend: &'static str,
    seconds: f64,
    obs_iters: f64,
    mean_iters: f64,
    failed: usize,
    threads: usize,
}

fn simulate_all(datasets: usize, n: usize) -> Vec<Vec<f64>> {
    (0..datasets).into_par_iter().map(|d| simulate::mixture(Family::InvGauss, &simulate::demo_params(), n, d as u64)).collect()
}

fn run(case: &Case, data: &[Vec<f64>], backend: Backend, threads: usize) -> Result<Row, String> {
    let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
    let config = EmConfig::new(Family::InvGauss, 2)
        .random_inits(case.starts)
        .max_iters(case.iters)
        .epsilon(case.epsilon)
        .seed(1)
        .check()
        .map_err(|e| e.to_string())?;
    let exec = Exec { backend, ..Exec::cpu().threads(threads) };
    // Warm-up: thread pool, CUDA context, kernel compilation.
    fit_many(&refs[..refs.len().min(2)], &config, &exec).map_err(|e| e.to_string())?;
    gpu::timing::take();
    let t0 = Instant::now();
    let fits = fit_many(&refs, &config, &exec).map_err(|e| e.to_string())?;
    let seconds = t0.elapsed().as_secs_f64();
    let phases = gpu::timing::take();
    if backend == Backend::Cuda {
        let parts: Vec<String> = phases.iter().map(|(p, s)| format!("{p} {:.3}", s)).collect();
        println!("    phases (s): {}", parts.join(", "));
    }
    // Work actually done: every start's iterations (all max_iters when epsilon = 0).
    let iters_done: f64 = if case.epsilon == 0.0 {
        (fits.len() * case.starts * case.iters) as f64
    } else {
        fits.iter().map(|f| f.iterations as f64).sum::<f64>() * case.starts as f64
    };
    Ok(Row {
        backend: backend.name(),
        seconds,
        obs_iters: iters_done * case.n as f64,
        mean_iters: fits.iter().map(|f| f.iterations as f64).sum::<f64>() / fits.len() as f64,
        failed: fits.iter().filter(|f| !f.success()).count(),
        threads: if threads == 0 { available_threads() } else { threads },
    })
}

fn print_header() {
    println!(
        "{:<26} {:>7} {:>9} {:>6} {:>5} {:>6} {:>10} {:>11} {:>9} {:>7}",
        "case", "backend", "datasets", "n", "start", "iters", "time_s", "Gobs-it/s", "gpu/cpu", "failed"
    );
}

fn bench(case: &Case, backends: &[Backend], threads: usize, json: &mut std::fs::File) -> Result<(), String> {
    let data = simulate_all(case.datasets, case.n);
    let mut cpu_rate = None;
    for &backend in backends {
        let part = if backend == Backend::Cpu { &data[..case.cpu_datasets.min(data.len())] } else { &data[..] };
        let row = run(case, part, backend, threads)?;
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
            "{{\"area\":\"em\",\"case\":\"{}\",\"backend\":\"{}\",\"datasets\":{},\"n\":{},\"starts\":{},\"max_iters\":{},\"epsilon\":{},\"mean_iters\":{:.2},\"threads\":{},\"seconds\":{:.6},\"obs_iters_per_s\":{:.1},\"failed\":{}}}",
            case.name, row.backend, part.len(), case.n, case.starts, case.iters, case.epsilon, row.mean_iters, row.threads, row.seconds, rate, row.failed
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn suite() -> Vec<Case> {
    let c = |name: &str, datasets, n, starts, iters, epsilon, cpu_datasets| Case { name: name.into(), datasets, n, starts, iters, epsilon, cpu_datasets };
    vec![
        c("40k x100 starts x100 it", 40_000, 2000, 100, 100, 0.0, 200),
        c("40k x100 starts eps1e-6", 40_000, 2000, 100, 100, 1e-6, 200),
        c("1000 x1 start eps1e-6", 1000, 2000, 1, 100, 1e-6, 1000),
        c("1 x 1e7 obs x100 it", 1, 10_000_000, 1, 100, 0.0, 1),
        c("1 x 2000 obs x1 start", 1, 2000, 1, 100, 1e-6, 1),
    ]
}

fn main() {
    let result = (|| -> Result<(), String> {
        let mut it = std::env::args().skip(1);
        let area = it.next().ok_or("usage: bulkem-bench em|em-suite|reduce|reduce-table|hmm|hmm-suite [flags]; see the source header")?;
        let mut reduce_opts = reduce_bench::Options { log2_sizes: vec![20, 22, 24, 26, 28, 30], reps: 20, backend: "both".into(), threads: 0, sweep: false };
        let mut hmm_case = hmm_bench::Case { states: 10, seqs: 50, length: 100, symbols: 10 };
        let mut case = Case { name: "custom".into(), datasets: 200, n: 2000, starts: 10, iters: 100, epsilon: 0.0, cpu_datasets: usize::MAX };
        let (mut backend, mut threads, mut json) = ("cpu".to_string(), 0usize, "bench-results.jsonl".to_string());
        while let Some(flag) = it.next() {
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            let num = || value.parse::<usize>().map_err(|_| format!("{flag}: not a whole number: {value}"));
            match flag.as_str() {
                "--datasets" => case.datasets = num()?,
                "--n" => case.n = num()?,
                "--starts" => case.starts = num()?,
                "--iters" => case.iters = num()?,
                "--cpu-datasets" => case.cpu_datasets = num()?,
                "--epsilon" => case.epsilon = value.parse().map_err(|_| format!("--epsilon: not a number: {value}"))?,
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
            "hmm" | "hmm-suite" => {
                let backends = match backend.as_str() {
                    "cpu" => vec![Backend::Cpu],
                    "cuda" => vec![Backend::Cuda],
                    "both" => vec![Backend::Cpu, Backend::Cuda],
                    other => return Err(format!("unknown backend {other}")),
                };
                if area == "hmm" {
                    hmm_bench::run(&hmm_case, &backends, threads, &mut file)
                } else {
                    hmm_bench::suite(&backends, threads, &mut file)
                }
            }
            other => Err(format!("unknown area {other}; known: em, em-suite, reduce, reduce-table, hmm, hmm-suite")),
        }
    })();
    if let Err(e) = result {
        eprintln!("bulkem-bench: {e}");
        std::process::exit(2);
    }
}
