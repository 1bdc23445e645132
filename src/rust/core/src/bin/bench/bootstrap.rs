//! `bulkem-bench bootstrap`: the parametric bootstrap LRT of issue 25. D
//! datasets x N observations simulated from a two-component mixture of the
//! family (the demo inverse Gaussian, or Normal N(0, 1) and N(3, 1.2) with
//! weights 0.6 and 0.4), every K of `--components` fitted with S random
//! starts, then B replicates of each dataset for every test K vs K + 1
//! (`em::bootstrap::lrt_replicates`). Timed as R calls it after an untimed
//! warm-up on 2 datasets (kernel compilation): the observed fits, then each
//! test's replicates (draws on the host, memory check, validation,
//! transfers, kernels, results). Prints the seconds, replicate fits per
//! second, the phases the core records, and the rejections at 0.05.

use std::io::Write;
use std::time::Instant;

use bulkem_core::em::bootstrap::lrt_replicates;
use bulkem_core::em::{fit_many, simulate, EmConfig, Family, MixFit, MixParams};
use bulkem_core::exec::{Backend, Exec};
use bulkem_core::gpu;
use rayon::prelude::*;

pub struct Options {
    family: Family,
    datasets: usize,
    n: usize,
    replicates: usize,
    components: Vec<usize>,
    starts: usize,
    iters: usize,
    epsilon: f64,
    backends: Vec<Backend>,
    threads: usize,
    json: String,
}

impl Options {
    /// The GPU case: 1,000 x 2,000, K = 1..3 (1 vs 2, 2 vs 3),
    /// B = 999; 20 starts for the observed fits, 100 iterations, 1e-6.
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            family: Family::InvGauss,
            datasets: 1000,
            n: 2000,
            replicates: 999,
            components: vec![1, 2, 3],
            starts: 20,
            iters: 100,
            epsilon: 1e-6,
            backends: vec![Backend::Cuda],
            threads: 0,
            json: "bench-results.jsonl".into(),
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            let num = || value.parse::<usize>().map_err(|_| format!("{flag}: not a whole number: {value}"));
            match flag.as_str() {
                "--family" => o.family = Family::parse(value).ok_or(format!("--family: unknown family {value}"))?,
                "--datasets" => o.datasets = num()?,
                "--n" => o.n = num()?,
                "--replicates" => o.replicates = num()?,
                "--starts" => o.starts = num()?,
                "--iters" => o.iters = num()?,
                "--epsilon" => o.epsilon = value.parse().map_err(|_| format!("--epsilon: not a number: {value}"))?,
                "--threads" => o.threads = num()?,
                "--json" => o.json = value.clone(),
                "--components" => {
                    o.components = value.split(',').map(|v| v.parse().map_err(|_| format!("--components: {value}"))).collect::<Result<_, _>>()?
                }
                "--backend" => {
                    o.backends = match value.as_str() {
                        "cpu" => vec![Backend::Cpu],
                        "cuda" => vec![Backend::Cuda],
                        "both" => vec![Backend::Cuda, Backend::Cpu],
                        other => return Err(format!("unknown backend {other}")),
                    }
                }
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        if o.components.len() < 2 || o.components.windows(2).any(|w| w[1] != w[0] + 1) {
            return Err("--components: at least two consecutive numbers, e.g. 1,2,3".into());
        }
        Ok(o)
    }
}

fn mixture(family: Family) -> Result<MixParams, String> {
    match family {
        Family::InvGauss => Ok(simulate::demo_params()),
        Family::Normal => Ok(MixParams { alpha: vec![0.6, 0.4], mu: vec![0.0, 3.0], scale: vec![1.0, 1.2] }),
        other => Err(format!("no bootstrap benchmark mixture for the {} family", other.name())),
    }
}

/// The observed fits and every test's replicate statistics.
fn run(o: &Options, data: &[Vec<f64>], exec: &Exec) -> Result<(Vec<Vec<MixFit>>, Vec<Vec<f64>>, Vec<f64>), String> {
    let refs: Vec<&[f64]> = data.iter().map(|x| &x[..]).collect();
    let t0 = Instant::now();
    let fits = o
        .components
        .iter()
        .map(|&k| {
            let config = EmConfig::new(o.family, k).random_inits(o.starts).max_iters(o.iters).epsilon(o.epsilon).seed(1).check().map_err(|e| e.to_string())?;
            fit_many(&refs, &config, exec).map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut seconds = vec![t0.elapsed().as_secs_f64()];
    let template = EmConfig::new(o.family, 1).max_iters(o.iters).epsilon(o.epsilon).seed(2);
    let mut stats = Vec::new();
    for pair in fits.windows(2) {
        let t0 = Instant::now();
        let ok: Vec<usize> = (0..data.len()).filter(|&d| pair[0][d].success() && pair[1][d].success()).collect();
        let params = |fits: &[MixFit]| ok.iter().map(|&d| fits[d].params.clone()).collect::<Vec<_>>();
        let sizes: Vec<usize> = ok.iter().map(|&d| data[d].len()).collect();
        stats.push(lrt_replicates(&ok, &sizes, None, &params(&pair[0]), &params(&pair[1]), &template, o.replicates, exec).map_err(|e| e.to_string())?);
        seconds.push(t0.elapsed().as_secs_f64());
    }
    Ok((fits, stats, seconds))
}

pub fn main(args: &[String]) -> Result<(), String> {
    let o = Options::parse(args)?;
    let p = mixture(o.family)?;
    let data: Vec<Vec<f64>> = (0..o.datasets).into_par_iter().map(|d| simulate::mixture(o.family, &p, o.n, d as u64)).collect();
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&o.json).map_err(|e| e.to_string())?;
    for &backend in &o.backends {
        let exec = Exec { backend, ..Exec::cpu().threads(o.threads) };
        run(&Options { datasets: 2, replicates: 2, backends: vec![backend], json: String::new(), components: o.components.clone(), ..o }, &data[..2.min(data.len())], &exec)?;
        gpu::timing::take();
        let (fits, stats, seconds) = run(&o, &data, &exec)?;
        let mut phases: Vec<(&str, f64)> = Vec::new();
        for (name, s) in gpu::timing::take() {
            match phases.iter_mut().find(|(n, _)| *n == name) {
                Some(entry) => entry.1 += s,
                None => phases.push((name, s)),
            }
        }
        let total: f64 = seconds.iter().sum();
        let replicate_fits = (o.datasets * o.replicates * 2 * stats.len()) as f64;
        println!(
            "bootstrap {} {}: {} datasets x {} obs, K {:?}, B = {}: {:.2} s (observed fits {:.2} s, tests {:?} s); {:.0} replicate fits/s",
            o.family.name(), backend.name(), o.datasets, o.n, o.components, o.replicates, total, seconds[0],
            seconds[1..].iter().map(|s| (s * 100.0).round() / 100.0).collect::<Vec<_>>(), replicate_fits / seconds[1..].iter().sum::<f64>()
        );
        println!("    phases (s): {}", phases.iter().map(|(p, s)| format!("{p} {s:.3}")).collect::<Vec<_>>().join(", "));
        for (i, s) in stats.iter().enumerate() {
            let (k0, b) = (o.components[i], o.replicates);
            let mut rejected = 0;
            let mut failed = 0;
            for (j, reps) in s.chunks(b).enumerate() {
                let observed = 2.0 * (fits[i + 1][j].loglik - fits[i][j].loglik);
                let ok = reps.iter().filter(|x| !x.is_nan()).count();
                failed += b - ok;
                let p = (1 + reps.iter().filter(|&&x| x >= observed).count()) as f64 / (ok + 1) as f64;
                rejected += (p < 0.05) as usize;
            }
            println!("    {k0} vs {}: rejected at 0.05 in {rejected} of {} datasets; {failed} replicate fits failed", k0 + 1, s.len() / b.max(1));
        }
        writeln!(
            file,
            "{{\"bench\":\"bootstrap\",\"family\":\"{}\",\"backend\":\"{}\",\"datasets\":{},\"n\":{},\"replicates\":{},\"components\":{:?},\"seconds\":{total},\"observed_seconds\":{},\"replicate_fits_per_s\":{}}}",
            o.family.name(), backend.name(), o.datasets, o.n, o.replicates, o.components, seconds[0], replicate_fits / seconds[1..].iter().sum::<f64>()
        ).map_err(|e| e.to_string())?;
    }
    Ok(())
}
