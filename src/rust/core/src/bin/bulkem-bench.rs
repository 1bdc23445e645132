//! bulkem-bench: throughput of the core routines, with no R involved.
//!
//! ```text
//! bulkem-bench em [--datasets D] [--n N] [--starts S] [--iters I] [--epsilon E]
//!                 [--backend cpu|cuda|both] [--cpu-datasets K] [--threads T] [--json FILE]
//! bulkem-bench em-suite [--json FILE]      the cases of the GPU issue, both backends
//! bulkem-bench hmm [--states N] [--seqs M] [--length T] [--symbols V]
//!                  [--backend cpu|cuda|both] [--threads T] [--json FILE]
//! bulkem-bench hmm-suite [--backend ...] [--threads T]   the cases of the HMM issue
//! ```
//! `hmm` times the forward log-likelihood, Viterbi and one Baum-Welch
//! iteration (E-step + M-step) over M random sequences of a random model,
//! median of 5 runs after a warm-up, as ../shared/peers/torch_hmm.py does;
//! and a 5-iteration Baum-Welch fit (6 E-steps: the start's and one per
//! iteration).
//! Prints one row per (case, backend) and appends one JSON line per row to
//! FILE (default bench-results.jsonl). With `--backend both` the CPU runs on
//! the first K datasets (default: all) and the ratio compares throughputs.

use std::io::Write;
use std::time::Instant;

use bulkem_core::em::{fit_many, simulate, EmConfig, Family};
use bulkem_core::exec::{available_threads, Backend, Exec};
use bulkem_core::gpu;
use bulkem_core::hmm::{self, HmmFitConfig, HmmModel, Sequences};
use bulkem_core::rng::KeyedStream;
use rayon::prelude::*;

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

/// A random HMM (rows uniform then normalised, uniform start, as the peer)
/// and M random sequences of length T.
fn hmm_problem(n: usize, v: usize, m: usize, t: usize) -> (HmmModel, Sequences) {
    let mut rng = KeyedStream::new(0, 0, 0);
    let mut u = || ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let mut rows = |r: usize, c: usize| -> Vec<f64> {
        (0..r)
            .flat_map(|_| {
                let x: Vec<f64> = (0..c).map(|_| u()).collect();
                let s: f64 = x.iter().sum();
                x.into_iter().map(move |p| p / s)
            })
            .collect()
    };
    let (trans, emis) = (rows(n, n), rows(n, v));
    let model = HmmModel { n_states: n, n_symbols: v, start: vec![1.0 / n as f64; n], trans, emis };
    let mut rng = KeyedStream::new(1, 0, 0);
    let symbols = (0..m * t).map(|_| rng.below(v as u64) as u32).collect();
    let seqs = Sequences::from_lengths(symbols, &vec![t; m]).unwrap_or_default();
    (model, seqs)
}

/// Median seconds of 5 runs after one warm-up run.
fn median_time(mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    f()?;
    let mut times = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        f()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[2])
}

fn bench_hmm(n: usize, m: usize, t: usize, v: usize, backends: &[Backend], threads: usize, json: &mut std::fs::File) -> Result<(), String> {
    let (model, seqs) = hmm_problem(n, v, m, t);
    for &backend in backends {
        let exec = Exec { backend, ..Exec::cpu().threads(threads) };
        let s = |e: bulkem_core::Error| e.to_string();
        let fwd = median_time(|| hmm::loglik(&model, &seqs, &exec).map(|_| ()).map_err(s))?;
        let vit = median_time(|| hmm::viterbi(&model, &seqs, &exec).map(|_| ()).map_err(s))?;
        let bw = median_time(|| hmm::baum_welch_step(&model, &seqs, 0.0, &exec).map(|_| ()).map_err(s))?;
        let config = HmmFitConfig::new(n, v).init(model.clone()).max_iters(5).epsilon(0.0).check().map_err(s)?;
        let fit5 = median_time(|| hmm::fit(&seqs, &config, &exec).map(|_| ()).map_err(s))?;
        let threads_used = if threads == 0 { available_threads() } else { threads };
        println!(
            "hmm N={n} M={m} T={t} V={v} {} ({} thread{}): forward {:.3} ms, viterbi {:.3} ms, baum-welch iter {:.3} ms, fit 5 iters {:.3} ms",
            backend.name(), threads_used, if threads_used == 1 { "" } else { "s" }, fwd * 1e3, vit * 1e3, bw * 1e3, fit5 * 1e3
        );
        writeln!(
            json,
            "{{\"area\":\"hmm\",\"backend\":\"{}\",\"states\":{n},\"seqs\":{m},\"length\":{t},\"symbols\":{v},\"threads\":{threads_used},\"forward_ms\":{:.4},\"viterbi_ms\":{:.4},\"baum_welch_iter_ms\":{:.4},\"fit5_ms\":{:.4}}}",
            backend.name(), fwd * 1e3, vit * 1e3, bw * 1e3, fit5 * 1e3
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() {
    let result = (|| -> Result<(), String> {
        let mut it = std::env::args().skip(1);
        let area = it.next().ok_or("usage: bulkem-bench em|em-suite|hmm|hmm-suite [flags]; see the source header")?;
        let (mut n_states, mut n_seqs, mut length, mut n_symbols) = (10usize, 50usize, 100usize, 10usize);
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
                "--states" => n_states = num()?,
                "--seqs" => n_seqs = num()?,
                "--length" => length = num()?,
                "--symbols" => n_symbols = num()?,
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&json).map_err(|e| e.to_string())?;
        let probe = gpu::probe();
        println!("cpu threads: {}; cuda: {}", available_threads(),
            if probe.usable() { probe.devices.iter().map(|d| format!("{} (cc {}.{}, {:.0} GiB)", d.name, d.compute_capability.0, d.compute_capability.1, d.total_memory as f64 / 1073741824.0)).collect::<Vec<_>>().join(", ") } else { probe.reason.clone() });
        let backends = match backend.as_str() {
            "cpu" => vec![Backend::Cpu],
            "cuda" => vec![Backend::Cuda],
            "both" => vec![Backend::Cpu, Backend::Cuda],
            other => return Err(format!("unknown backend {other}")),
        };
        if area.starts_with("em") {
            print_header();
        }
        match area.as_str() {
            "em" => bench(&case, &backends, threads, &mut file),
            "hmm" => bench_hmm(n_states, n_seqs, length, n_symbols, &backends, threads, &mut file),
            "hmm-suite" => {
                // The issue's cases: the CPU target (1 thread), then the two GPU cases.
                bench_hmm(10, 50, 100, 10, &[Backend::Cpu], 1, &mut file)?;
                bench_hmm(512, 512, 16, 512, &backends, threads, &mut file)?;
                bench_hmm(32, 10_000, 1000, 16, &backends, threads, &mut file)
            }
            "em-suite" => {
                for case in suite() {
                    bench(&case, &[Backend::Cpu, Backend::Cuda], threads, &mut file)?;
                }
                Ok(())
            }
            other => Err(format!("unknown area {other}; known: em, em-suite, hmm, hmm-suite")),
        }
    })();
    if let Err(e) = result {
        eprintln!("bulkem-bench: {e}");
        std::process::exit(2);
    }
}
