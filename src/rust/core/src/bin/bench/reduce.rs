//! `bulkem-bench reduce`: the reductions on vectors of 2^k doubles.
//!
//! CUDA: the vector is uploaded once, then each method is timed with CUDA
//! events around its launch (device time, as torch.mean is timed by the
//! peer) and with the wall clock until the value is on the host (end to
//! end), median of `reps`; GB/s = 8 n bytes / time. The device-to-device
//! copy of the same vector is timed too (the copy bandwidth ceiling). Every
//! GPU `exact`, `pairwise` and `div2` result is checked bit for bit against
//! the CPU. CPU: elements per second per method on `threads` threads, and
//! sequential Kahan (one thread) for the paper's speed-up table.

use std::io::Write;
use std::time::Instant;

use bulkem_core::exec::{Backend, Exec};
use bulkem_core::gpu;
use bulkem_core::reduce::gpu::{Tuning, Workspace};
use bulkem_core::reduce::{self, Kind, Method, Precision};
use cudarc::driver::sys::CUevent_flags;
use rayon::prelude::*;

pub struct Options {
    pub log2_sizes: Vec<u32>,
    pub reps: usize,
    pub backend: String,
    pub threads: usize,
    /// Also time `exact` under several launch shapes.
    pub sweep: bool,
}

/// Uniform(0, 1) values (xorshift per block of 2^16, in parallel).
fn uniform(n: usize) -> Vec<f64> {
    let mut x = vec![0.0; n];
    x.par_chunks_mut(1 << 16).enumerate().for_each(|(b, chunk)| {
        let mut s = (b as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for v in chunk {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            *v = (s >> 11) as f64 / (1u64 << 53) as f64;
        }
    });
    x
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn cases() -> Vec<(Method, Precision)> {
    Method::ALL.iter().flat_map(|&m| Precision::ALL.map(|p| (m, p))).collect()
}

pub fn run(opts: &Options, json: &mut std::fs::File) -> Result<(), String> {
    println!("{:<10} {:<7} {:>6} {:>8} {:>11} {:>9} {:>11} {:>9} {:>10}", "method", "prec", "log2n", "backend", "device ms", "GB/s", "e2e ms", "GB/s", "check");
    for &k in &opts.log2_sizes {
        let n = 1usize << k;
        let x = uniform(n);
        let cpu = Exec { threads: opts.threads, ..Exec::cpu() };
        // CPU reference values (also the CPU timings when asked for).
        let mut reference = Vec::new();
        for (method, precision) in cases() {
            let reps = if opts.backend == "cuda" { 1 } else { opts.reps.min(5) };
            let mut times = Vec::new();
            let mut value = 0.0;
            for _ in 0..reps {
                let t0 = Instant::now();
                value = reduce::mean(&x, method, precision, &cpu).map_err(|e| e.to_string())?;
                times.push(t0.elapsed().as_secs_f64());
            }
            reference.push(value);
            if opts.backend != "cuda" {
                let t = median(times);
                println!("{:<10} {:<7} {:>6} {:>8} {:>11} {:>9} {:>11.3} {:>9.2} {:>10}", method.name(), precision.name(), k, "cpu", "", "", t * 1e3, 8.0 * n as f64 / t / 1e9, format!("{:.2e}/s", n as f64 / t));
                writeln!(json, "{{\"area\":\"reduce\",\"backend\":\"cpu\",\"threads\":{},\"method\":\"{}\",\"precision\":\"{}\",\"log2n\":{k},\"seconds\":{t:.6e}}}", cpu.threads, method.name(), precision.name()).map_err(|e| e.to_string())?;
            }
        }
        if opts.backend == "both" {
            // The paper's comparison: sequential Kahan (one thread) against parallel div2.
            let one = Exec { threads: 1, ..Exec::cpu() };
            let t0 = Instant::now();
            let _ = reduce::mean(&x, Method::Kahan, Precision::Single, &one).map_err(|e| e.to_string())?;
            let t = t0.elapsed().as_secs_f64();
            println!("{:<10} {:<7} {:>6} {:>8} {:>11} {:>9} {:>11.3} {:>9.2}", "kahan-seq", "single", k, "cpu-1", "", "", t * 1e3, 8.0 * n as f64 / t / 1e9);
            writeln!(json, "{{\"area\":\"reduce\",\"backend\":\"cpu\",\"threads\":1,\"method\":\"kahan\",\"precision\":\"single\",\"log2n\":{k},\"seconds\":{t:.6e}}}").map_err(|e| e.to_string())?;
        }
        if opts.backend == "cpu" {
            continue;
        }
        let dev = gpu::devices().map_err(|e| e.to_string())?[0].clone();
        let s = dev.stream.clone();
        let d_x = s.clone_htod(&x[..]).map_err(|e| e.to_string())?;
        let mut d_copy = s.alloc_zeros::<f64>(n).map_err(|e| e.to_string())?;
        let mut ws = Workspace::new(&dev).map_err(|e| e.to_string())?;
        let event = || dev.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| e.to_string());
        // Copy bandwidth (read + write), the ceiling the peer reports.
        let mut copy_ms = Vec::new();
        for _ in 0..opts.reps + 3 {
            let (a, b) = (event()?, event()?);
            a.record(&s).map_err(|e| e.to_string())?;
            s.memcpy_dtod(&d_x, &mut d_copy).map_err(|e| e.to_string())?;
            b.record(&s).map_err(|e| e.to_string())?;
            copy_ms.push(a.elapsed_ms(&b).map_err(|e| e.to_string())? as f64);
        }
        let copy = median(copy_ms[3..].to_vec());
        println!("{:<10} {:<7} {:>6} {:>8} {:>11.4} {:>9.0}", "d2d-copy", "double", k, "cuda", copy, 16.0 * n as f64 / copy / 1e6);
        for ((method, precision), want) in cases().into_iter().zip(&reference) {
            let (mut dev_ms, mut wall) = (Vec::new(), Vec::new());
            let mut value = 0.0;
            for r in 0..opts.reps + 3 {
                let (a, b) = (event()?, event()?);
                let t0 = Instant::now();
                a.record(&s).map_err(|e| e.to_string())?;
                let pending = ws.launch(&d_x, method, precision, Kind::Mean).map_err(|e| e.to_string())?;
                b.record(&s).map_err(|e| e.to_string())?;
                value = ws.finish(&d_x, pending).map_err(|e| e.to_string())?;
                let w = t0.elapsed().as_secs_f64() * 1e3;
                if r >= 3 {
                    dev_ms.push(a.elapsed_ms(&b).map_err(|e| e.to_string())? as f64);
                    wall.push(w);
                }
            }
            let (d, w) = (median(dev_ms), median(wall));
            let check = match method {
                Method::Exact | Method::Pairwise | Method::Div2 if value.to_bits() == want.to_bits() => "same bits".to_string(),
                Method::Exact | Method::Pairwise | Method::Div2 => format!("DIFFERS {value:e} vs {want:e}"),
                _ => format!("{:.1e} rel", ((value - want) / want).abs()),
            };
            let bytes = 8.0 * n as f64;
            println!("{:<10} {:<7} {:>6} {:>8} {:>11.4} {:>9.0} {:>11.4} {:>9.0} {:>10}", method.name(), precision.name(), k, "cuda", d, bytes / d / 1e6, w, bytes / w / 1e6, check);
            writeln!(json, "{{\"area\":\"reduce\",\"backend\":\"cuda\",\"method\":\"{}\",\"precision\":\"{}\",\"log2n\":{k},\"device_ms\":{d:.5},\"wall_ms\":{w:.5},\"copy_ms\":{copy:.5},\"check\":\"{check}\"}}", method.name(), precision.name()).map_err(|e| e.to_string())?;
        }
        if opts.sweep {
            for threads in [256u32, 512, 1024] {
                for per_sm in [2u32, 3, 4, 6, 8] {
                    ws.tuning = Tuning { threads, exact_blocks_per_sm: per_sm, plain_blocks_per_sm: per_sm, ..Tuning::default() };
                    for method in [Method::Exact, Method::Kahan] {
                        let mut dev_ms = Vec::new();
                        for r in 0..opts.reps + 3 {
                            let (a, b) = (event()?, event()?);
                            a.record(&s).map_err(|e| e.to_string())?;
                            let pending = ws.launch(&d_x, method, Precision::Double, Kind::Mean).map_err(|e| e.to_string())?;
                            b.record(&s).map_err(|e| e.to_string())?;
                            ws.finish(&d_x, pending).map_err(|e| e.to_string())?;
                            if r >= 3 {
                                dev_ms.push(a.elapsed_ms(&b).map_err(|e| e.to_string())? as f64);
                            }
                        }
                        let d = median(dev_ms);
                        println!("sweep {} threads {threads} blocks/SM {per_sm}: {d:.4} ms = {:.0} GB/s", method.name(), 8.0 * n as f64 / d / 1e6);
                    }
                }
            }
            ws.tuning = Tuning::default();
        }
        // From the host: upload included (what bulk_mean(use.gpu = TRUE) costs).
        let t0 = Instant::now();
        let _ = reduce::mean(&x, Method::Exact, Precision::Double, &Exec { backend: Backend::Cuda, ..Exec::cpu() }).map_err(|e| e.to_string())?;
        let t = t0.elapsed().as_secs_f64() * 1e3;
        println!("{:<10} {:<7} {:>6} {:>8} {:>11} {:>9} {:>11.3} {:>9.0}   (host vector, upload included)", "exact", "double", k, "cuda", "", "", t, 8.0 * n as f64 / t / 1e6);
    }
    Ok(())
}

/// The paper's accuracy table in single precision: relative error of each
/// method's mean against the float64 exact mean, for uniform(0, 1) and
/// normal(6, 1) samples of growing size.
pub fn accuracy_table(sizes: &[usize], json: &mut std::fs::File) -> Result<(), String> {
    use rand::SeedableRng;
    use rand_distr::{Distribution, Normal, Uniform};
    let exec = Exec::cpu();
    println!("{:<12} {:>12} {:>11} {:>11} {:>11} {:>11} {:>11}", "sample", "n", "naive", "kahan", "pairwise", "div2", "exact");
    for (name, normal) in [("uniform(0,1)", false), ("normal(6,1)", true)] {
        for &n in sizes {
            let mut x = vec![0.0; n];
            x.par_chunks_mut(1 << 16).enumerate().for_each(|(b, chunk)| {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(b as u64 + if normal { 1 << 40 } else { 0 });
                if normal {
                    let d = Normal::new(6.0, 1.0).expect("valid normal");
                    chunk.iter_mut().for_each(|v| *v = d.sample(&mut rng));
                } else {
                    let d = Uniform::new(0.0, 1.0).expect("valid uniform");
                    chunk.iter_mut().for_each(|v| *v = d.sample(&mut rng));
                }
            });
            let reference = reduce::mean(&x, Method::Exact, Precision::Double, &exec).map_err(|e| e.to_string())?;
            let mut row = format!("{name:<12} {n:>12}");
            for method in [Method::Naive, Method::Kahan, Method::Pairwise, Method::Div2, Method::Exact] {
                let got = reduce::mean(&x, method, Precision::Single, &exec).map_err(|e| e.to_string())?;
                let rel = ((got - reference) / reference).abs();
                row += &format!(" {rel:>11.2e}");
                writeln!(json, "{{\"area\":\"reduce-table\",\"sample\":\"{name}\",\"n\":{n},\"method\":\"{}\",\"rel_error\":{rel:e}}}", method.name()).map_err(|e| e.to_string())?;
            }
            println!("{row}");
        }
    }
    Ok(())
}
