//! `bulkem-bench select` / `select-suite`: choosing the number of
//! components (issue 16). D datasets x N observations simulated from the
//! demo inverse-Gaussian mixture (as `em`), every K of `--components` fitted
//! with S random starts (the default start method), the fit with the best
//! criterion kept per dataset. The time is that of `em::select_many` as R
//! calls it: data in host memory in, `Selection` out (memory check,
//! validation, start drawing, transfers, kernels, result assembly, criteria),
//! after an untimed warm-up call on 2 datasets that compiles every K's
//! kernels. Printed: time, datasets/s, the chosen K's distribution, the
//! status of the chosen fits and, on CUDA, the phases the core records
//! (`gpu::timing`). `--host-starts yes` also times drawing every start of
//! the selection on the host alone (all cores), per K: on the GPU this work
//! overlaps the kernels, and this says whether it can keep up.

use std::io::Write;
use std::time::Instant;

use bulkem_core::em::{initial_values, select_many, Criterion, EmConfig, Family, FitStatus, Selection};
use bulkem_core::exec::{available_threads, Backend, Exec};
use bulkem_core::gpu;
use rayon::prelude::*;

pub struct Options {
    pub datasets: usize,
    pub n: usize,
    pub starts: usize,
    pub iters: usize,
    pub epsilons: Vec<f64>,
    pub components: Vec<usize>,
    pub criterion: String,
    pub backends: Vec<Backend>,
    pub cpu_datasets: usize,
    pub threads: usize,
    pub host_starts: bool,
    pub json: String,
}

impl Options {
    /// The case: 40,000 x 2,000, K = 1..5, 20 starts, 100
    /// iterations, epsilon 1e-6 then 0 (fixed iterations, as the peer),
    /// BIC; the CPU on the first 400 datasets.
    pub fn suite() -> Options {
        Options {
            datasets: 40_000,
            n: 2000,
            starts: 20,
            iters: 100,
            epsilons: vec![1e-6, 0.0],
            components: vec![1, 2, 3, 4, 5],
            criterion: "BIC".into(),
            backends: vec![Backend::Cuda, Backend::Cpu],
            cpu_datasets: 400,
            threads: 0,
            host_starts: true,
            json: "bench-results.jsonl".into(),
        }
    }

    pub fn parse(suite: bool, args: &[String]) -> Result<Options, String> {
        let mut o = Options::suite();
        if !suite {
            o.epsilons = vec![1e-6];
            o.backends = vec![Backend::Cuda];
            o.host_starts = false;
        }
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            let num = || value.parse::<usize>().map_err(|_| format!("{flag}: not a whole number: {value}"));
            match flag.as_str() {
                "--datasets" => o.datasets = num()?,
                "--n" => o.n = num()?,
                "--starts" => o.starts = num()?,
                "--iters" => o.iters = num()?,
                "--cpu-datasets" => o.cpu_datasets = num()?,
                "--threads" => o.threads = num()?,
                "--epsilon" => {
                    o.epsilons = value.split(',').map(|v| v.parse().map_err(|_| format!("--epsilon: not a list of numbers: {value}"))).collect::<Result<_, _>>()?
                }
                "--components" => {
                    o.components = value.split(',').map(|v| v.parse().map_err(|_| format!("--components: not a list of whole numbers: {value}"))).collect::<Result<_, _>>()?
                }
                "--criterion" => o.criterion = value.clone(),
                "--backend" => {
                    o.backends = match value.as_str() {
                        "cpu" => vec![Backend::Cpu],
                        "cuda" => vec![Backend::Cuda],
                        "both" => vec![Backend::Cuda, Backend::Cpu],
                        other => return Err(format!("unknown backend {other}")),
                    }
                }
                "--host-starts" => o.host_starts = value == "yes",
                "--json" => o.json = value.clone(),
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(o)
    }
}

fn config(o: &Options, epsilon: f64) -> Result<bulkem_core::em::CheckedEmConfig, String> {
    EmConfig::new(Family::InvGauss, o.components[0])
        .random_inits(o.starts)
        .max_iters(o.iters)
        .epsilon(epsilon)
        .seed(1)
        .check()
        .map_err(|e| e.to_string())
}

/// Phases summed by name (several devices record one each), in first-seen order.
fn sum_phases(phases: &[(&'static str, f64)]) -> Vec<(&'static str, f64)> {
    let mut out: Vec<(&'static str, f64)> = Vec::new();
    for &(p, s) in phases {
        match out.iter_mut().find(|(q, _)| *q == p) {
            Some(e) => e.1 += s,
            None => out.push((p, s)),
        }
    }
    out
}

struct Measured {
    seconds: f64,
    selection: Selection,
    phases: Vec<(&'static str, f64)>,
    warmup: f64,
}

fn measure(o: &Options, refs: &[&[f64]], epsilon: f64, backend: Backend, criterion: Criterion) -> Result<Measured, String> {
    let config = config(o, epsilon)?;
    let exec = Exec { backend, ..Exec::cpu().threads(o.threads) };
    // Warm-up: thread pool, CUDA context, every K's kernel compilation.
    let t0 = Instant::now();
    select_many(&refs[..refs.len().min(2)], &config, &o.components, criterion, &exec).map_err(|e| e.to_string())?;
    let warmup = t0.elapsed().as_secs_f64();
    gpu::timing::take();
    let t0 = Instant::now();
    let selection = select_many(refs, &config, &o.components, criterion, &exec).map_err(|e| e.to_string())?;
    let seconds = t0.elapsed().as_secs_f64();
    let phases = gpu::timing::take();
    Ok(Measured { seconds, selection, phases, warmup })
}

/// One (backend, epsilon) row: print it and append its JSON line; returns datasets/s.
fn report(o: &Options, json: &mut std::fs::File, backend: Backend, epsilon: f64, d: usize, m: &Measured) -> Result<f64, String> {
    let c = o.components.len();
    let sel = &m.selection;
    let mut chosen = vec![0usize; c];
    sel.chosen.iter().for_each(|&k| chosen[k] += 1);
    let failed = sel.fits.iter().filter(|f| !f.success()).count();
    let converged = sel.fits.iter().filter(|f| f.status == FitStatus::Converged).count();
    let at_max = sel.fits.iter().filter(|f| f.status == FitStatus::MaxIters).count();
    let rate = d as f64 / m.seconds;
    let threads = if o.threads == 0 { available_threads() } else { o.threads };
    // Upper bound of the work: every start of every K to max_iters (exact
    // with epsilon = 0, bar starts that failed early).
    let max_work = (d * o.starts * o.iters * o.n * c) as f64;
    println!(
        "select {} eps={:e} D={} n={} S={} I={} K={:?} {}: {:.3} s, {:.0} datasets/s, {} G obs-iter/s (warm-up {:.2} s)",
        backend.name(), epsilon, d, o.n, o.starts, o.iters, o.components, o.criterion, m.seconds, rate,
        if epsilon == 0.0 { format!("{:.1}", max_work / m.seconds / 1e9) } else { format!("<= {:.1}", max_work / m.seconds / 1e9) },
        m.warmup
    );
    let dist: Vec<String> = o.components.iter().zip(&chosen).map(|(k, n)| format!("K={k}: {n} ({:.2}%)", 100.0 * *n as f64 / d as f64)).collect();
    println!("    chosen: {}", dist.join(", "));
    // Mean iterations of the kept start, per chosen K.
    let iters: Vec<String> = (0..c)
        .filter(|&j| chosen[j] > 0)
        .map(|j| {
            let it: f64 = sel.fits.iter().zip(&sel.chosen).filter(|(_, &k)| k == j).map(|(f, _)| f.iterations as f64).sum();
            format!("K={}: {:.1}", o.components[j], it / chosen[j] as f64)
        })
        .collect();
    println!("    chosen fits: {converged} converged, {at_max} at max_iters, {failed} failed; mean iterations of the kept start: {}", iters.join(", "));
    // Criterion gap between the chosen K and the best other K (how clear the choice is).
    let gaps: Vec<f64> = (0..d)
        .filter_map(|i| {
            let row = &sel.criteria[i * c..(i + 1) * c];
            let best = row[sel.chosen[i]];
            row.iter().enumerate().filter(|&(j, v)| j != sel.chosen[i] && v.is_finite()).map(|(_, v)| v - best).reduce(f64::min)
        })
        .collect();
    if !gaps.is_empty() {
        let mut g = gaps.clone();
        g.sort_by(f64::total_cmp);
        println!("    criterion gap to the next best K: min {:.2}, median {:.2}, max {:.2}", g[0], g[g.len() / 2], g[g.len() - 1]);
    }
    let phases = sum_phases(&m.phases);
    let accounted: f64 = phases.iter().map(|(_, s)| s).sum();
    if !phases.is_empty() {
        let parts: Vec<String> = phases.iter().map(|(p, s)| format!("{p} {s:.3}")).collect();
        println!("    phases (s): {}; rest (memory check, criteria, choosing) {:.3}", parts.join(", "), m.seconds - accounted);
    }
    let phases_json: Vec<String> = phases.iter().map(|(p, s)| format!("\"{p}\":{s:.6}")).collect();
    writeln!(
        json,
        "{{\"area\":\"select\",\"case\":\"{} x {} K={:?} {} starts eps {:e}\",\"backend\":\"{}\",\"datasets\":{},\"n\":{},\"starts\":{},\"max_iters\":{},\"epsilon\":{},\"components\":{:?},\"criterion\":\"{}\",\"threads\":{},\"seconds\":{:.6},\"datasets_per_s\":{:.2},\"chosen\":{:?},\"converged\":{},\"max_iters_reached\":{},\"failed\":{},\"phases\":{{{}}},\"warmup_s\":{:.3}}}",
        d, o.n, o.components, o.starts, epsilon, backend.name(), d, o.n, o.starts, o.iters, epsilon, o.components, o.criterion, threads,
        m.seconds, rate, chosen, converged, at_max, failed, phases_json.join(","), m.warmup
    )
    .map_err(|e| e.to_string())?;
    Ok(rate)
}

/// Draw every start of the selection on the host (all cores), K by K, as
/// the GPU path does launch by launch; the kernels never wait for this
/// only if it takes less than they do.
fn host_starts(o: &Options, refs: &[&[f64]], json: &mut std::fs::File) -> Result<(), String> {
    let base = config(o, 1e-6)?;
    let mut parts = Vec::new();
    let mut total = 0.0;
    for &k in &o.components {
        let cfg = base.with_components(k).check().map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let bad: usize = (0..refs.len() * o.starts)
            .into_par_iter()
            .map(|p| {
                let (d, s) = (p / o.starts, p % o.starts);
                initial_values(&cfg, refs[d], d, s).is_err() as usize
            })
            .sum();
        let s = t0.elapsed().as_secs_f64();
        total += s;
        parts.push(format!("K={k} {s:.3}{}", if bad > 0 { format!(" ({bad} no start)") } else { String::new() }));
        writeln!(
            json,
            "{{\"area\":\"select\",\"case\":\"host start drawing\",\"datasets\":{},\"n\":{},\"starts\":{},\"components\":{k},\"threads\":{},\"seconds\":{s:.6},\"starts_per_s\":{:.1}}}",
            refs.len(), o.n, o.starts, rayon::current_num_threads(), (refs.len() * o.starts) as f64 / s
        )
        .map_err(|e| e.to_string())?;
    }
    println!(
        "host start drawing alone ({} datasets x {} starts, {} threads), s: {}; total {total:.3} ({:.2} us per start per thread)",
        refs.len(), o.starts, rayon::current_num_threads(), parts.join(", "),
        total * rayon::current_num_threads() as f64 / (refs.len() * o.starts * o.components.len()) as f64 * 1e6
    );
    Ok(())
}

pub fn main(suite: bool, args: &[String]) -> Result<(), String> {
    let o = Options::parse(suite, args)?;
    let criterion = Criterion::parse(&o.criterion).ok_or(format!("--criterion: BIC, ICL or AIC, not {}", o.criterion))?;
    let mut json = std::fs::OpenOptions::new().create(true).append(true).open(&o.json).map_err(|e| e.to_string())?;
    let probe = gpu::probe();
    println!(
        "cpu threads: {}; cuda: {}",
        available_threads(),
        if probe.usable() {
            probe.devices.iter().map(|d| format!("{} (cc {}.{}, {:.0} GiB)", d.name, d.compute_capability.0, d.compute_capability.1, d.total_memory as f64 / 1073741824.0)).collect::<Vec<_>>().join(", ")
        } else {
            probe.reason.clone()
        }
    );
    let t0 = Instant::now();
    let data = crate::simulate_all(Family::InvGauss, o.datasets, o.n)?;
    let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
    println!("simulated {} x {} (demo IG mixture) in {:.2} s", o.datasets, o.n, t0.elapsed().as_secs_f64());
    for &epsilon in &o.epsilons {
        let mut cuda_rate = None;
        for &backend in &o.backends {
            let part = if backend == Backend::Cpu { &refs[..o.cpu_datasets.min(refs.len())] } else { &refs[..] };
            let m = measure(&o, part, epsilon, backend, criterion)?;
            let rate = report(&o, &mut json, backend, epsilon, part.len(), &m)?;
            match backend {
                Backend::Cuda => cuda_rate = Some(rate),
                Backend::Cpu => {
                    if let Some(g) = cuda_rate {
                        println!("    gpu/cpu: {:.1}x datasets/s", g / rate);
                    }
                }
            }
        }
    }
    if o.host_starts {
        Exec::cpu().threads(o.threads).install(|| host_starts(&o, &refs, &mut json)).map_err(|e| e.to_string())??;
    }
    Ok(())
}
