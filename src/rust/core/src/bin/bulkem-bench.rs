//! bulkem-bench: throughput of the core routines, with no R involved.
//!
//! ```text
//! bulkem-bench em [--datasets D] [--n N] [--starts S] [--iters I] [--threads T] [--json FILE]
//! ```
//! Prints one table row per case and appends one JSON line per case to FILE
//! (default bench-results.jsonl).

use std::io::Write;
use std::time::Instant;

use bulkem_core::em::{fit_many, simulate, EmConfig, Family};
use bulkem_core::exec::{available_threads, Exec};

struct Args {
    area: String,
    datasets: usize,
    n: usize,
    starts: usize,
    iters: usize,
    threads: usize,
    json: String,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let area = it.next().ok_or("usage: bulkem-bench em [--datasets D] [--n N] [--starts S] [--iters I] [--threads T] [--json FILE]")?;
    let mut args = Args { area, datasets: 200, n: 2000, starts: 10, iters: 100, threads: 0, json: "bench-results.jsonl".into() };
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = || value.parse::<usize>().map_err(|_| format!("{flag}: not a whole number: {value}"));
        match flag.as_str() {
            "--datasets" => args.datasets = num()?,
            "--n" => args.n = num()?,
            "--starts" => args.starts = num()?,
            "--iters" => args.iters = num()?,
            "--threads" => args.threads = num()?,
            "--json" => args.json = value.clone(),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn bench_em(a: &Args) -> Result<String, String> {
    let data: Vec<Vec<f64>> =
        (0..a.datasets).map(|d| simulate::mixture(Family::InvGauss, &simulate::demo_params(), a.n, d as u64)).collect();
    let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
    let config = EmConfig::new(Family::InvGauss, 2)
        .random_inits(a.starts)
        .max_iters(a.iters)
        .epsilon(0.0)
        .seed(1)
        .check()
        .map_err(|e| e.to_string())?;
    let exec = Exec::cpu().threads(a.threads);
    // Warm-up on a slice of the data (thread pool start, page faults).
    fit_many(&refs[..refs.len().min(4)], &config, &exec).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let fits = fit_many(&refs, &config, &exec).map_err(|e| e.to_string())?;
    let secs = t0.elapsed().as_secs_f64();
    let iters: usize = fits.len() * a.starts * a.iters; // epsilon = 0: every start runs all iterations
    let failed = fits.iter().filter(|f| !f.success()).count();
    let obs_iters = (iters * a.n) as f64;
    let threads = if a.threads == 0 { available_threads() } else { a.threads };
    println!("{:<6} {:>8} {:>6} {:>6} {:>6} {:>4} {:>9} {:>10} {:>12} {:>12}", "area", "datasets", "n", "starts", "iters", "thr", "backend", "time_s", "Gobs_it/s", "ns/obs_it/thr");
    println!(
        "{:<6} {:>8} {:>6} {:>6} {:>6} {:>4} {:>9} {:>10.3} {:>12.4} {:>12.2}",
        "em", a.datasets, a.n, a.starts, a.iters, threads, "cpu", secs, obs_iters / secs / 1e9, secs * threads as f64 / obs_iters * 1e9
    );
    if failed > 0 {
        println!("note: {failed} datasets failed");
    }
    Ok(format!(
        "{{\"area\":\"em\",\"backend\":\"cpu\",\"datasets\":{},\"n\":{},\"starts\":{},\"iters\":{},\"threads\":{},\"seconds\":{:.6},\"obs_iters_per_s\":{:.1},\"failed\":{}}}",
        a.datasets, a.n, a.starts, a.iters, threads, secs, obs_iters / secs, failed
    ))
}

fn main() {
    let result = parse_args().and_then(|a| {
        let line = match a.area.as_str() {
            "em" => bench_em(&a)?,
            other => return Err(format!("unknown area {other}; known: em")),
        };
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&a.json).map_err(|e| e.to_string())?;
        writeln!(f, "{line}").map_err(|e| e.to_string())
    });
    if let Err(e) = result {
        eprintln!("bulkem-bench: {e}");
        std::process::exit(2);
    }
}
