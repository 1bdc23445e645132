//! The CUDA reductions against the CPU reference: `exact`, `pairwise` and
//! `div2` give the same bits (sums and means, both precisions, any launch
//! shape); `naive` and `kahan` stay within their error bounds. Skipped
//! (with a note) where no device is usable.

mod common;
use common::{cuda, gpu_or_skip};

use bulkem_core::exec::Exec;
use bulkem_core::gpu;
use bulkem_core::reduce::gpu::{Tuning, Workspace};
use bulkem_core::reduce::{self, Kind, Method, Precision};


/// Values of mixed signs and magnitudes 2^lo .. 2^hi (xorshift; cheap for big n).
fn mixed(n: usize, seed: u64, lo: i32, hi: i32) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            let e = lo + (s % (hi - lo + 1) as u64) as i32;
            (u - 0.4) * 2f64.powi(e)
        })
        .collect()
}

fn same_bits(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

const SIZES: [usize; 16] = [1, 2, 3, 5, 64, 255, 256, 257, 511, 1000, 4097, 65_536, 65_539, 1_000_003, 3 << 20, (1 << 22) + 1];

fn both(x: &[f64], method: Method, precision: Precision, kind: Kind) -> (f64, f64) {
    let f = match kind {
        Kind::Sum => reduce::sum,
        Kind::Mean => reduce::mean,
    };
    (f(x, method, precision, &Exec::cpu()).unwrap(), f(x, method, precision, &cuda()).unwrap())
}

#[test]
fn exact_pairwise_and_div2_match_the_cpu_bit_for_bit() {
    if !gpu_or_skip() {
        return;
    }
    for (i, &n) in SIZES.iter().enumerate() {
        for (lo, hi) in [(-3, 3), (-40, 40)] {
            let x = mixed(n, 11 + i as u64, lo, hi);
            for method in [Method::Exact, Method::Pairwise, Method::Div2] {
                for precision in Precision::ALL {
                    for kind in [Kind::Sum, Kind::Mean] {
                        let (cpu, gpu) = both(&x, method, precision, kind);
                        assert!(same_bits(cpu, gpu), "{method:?} {precision:?} {kind:?} n = {n} range 2^{lo}..2^{hi}: cpu {cpu:e} gpu {gpu:e}");
                    }
                }
            }
        }
    }
}

#[test]
fn naive_and_kahan_stay_within_their_bounds() {
    if !gpu_or_skip() {
        return;
    }
    for (i, &n) in SIZES.iter().enumerate() {
        let x = mixed(n, 101 + i as u64, -20, 20);
        for precision in Precision::ALL {
            let u = precision.unit_roundoff();
            let xr: Vec<f64> = x.iter().map(|&v| if precision == Precision::Single { v as f32 as f64 } else { v }).collect();
            let abs_sum: f64 = xr.iter().map(|v| v.abs()).sum();
            let exact = reduce::sum(&x, Method::Exact, Precision::Double, &Exec::cpu()).unwrap();
            let exact_rounded = reduce::sum(&x, Method::Exact, precision, &Exec::cpu()).unwrap();
            for method in [Method::Naive, Method::Kahan] {
                let gpu = reduce::sum(&x, method, precision, &cuda()).unwrap();
                // Bounds for the sum of the rounded inputs (whose exact sum is
                // within u|S| of exact_rounded's).
                let bound = match method {
                    Method::Naive => (n as f64 - 1.0) * u * abs_sum,
                    _ => 2.0 * u * exact.abs() + 4.0 * n as f64 * u * u * abs_sum,
                } + u * exact_rounded.abs();
                assert!((gpu - exact_rounded).abs() <= bound * 1.01 + f64::from_bits(1), "{method:?} {precision:?} n = {n}: {gpu:e} vs {exact_rounded:e}, bound {bound:e}");
            }
        }
    }
}

#[test]
fn exact_is_exact_when_expansions_overflow_or_span_every_exponent() {
    if !gpu_or_skip() {
        return;
    }
    let m = f64::MAX;
    let mut cases: Vec<Vec<f64>> = vec![
        vec![m, m, -m, -m, 1.0],
        [m; 1000].iter().chain([-m; 999].iter()).copied().collect(),
        // The paper's absorption example.
        vec![0.005, 0.005, 1e-8, 1e-8],
        // Wide dynamic range: every thread's expansion sheds remainders.
        mixed(200_000, 7, -1000, 1000),
        mixed(1 << 20, 8, -1074, 1023),
    ];
    cases.push((0..300_000).map(|i| if i % 2 == 0 { 1e300 } else { -1e300 + 1e-300 * i as f64 }).collect());
    for (c, x) in cases.iter().enumerate() {
        for precision in Precision::ALL {
            for kind in [Kind::Sum, Kind::Mean] {
                let (cpu, gpu) = both(x, Method::Exact, precision, kind);
                assert!(same_bits(cpu, gpu), "case {c} {precision:?} {kind:?}: cpu {cpu:e} gpu {gpu:e}");
            }
        }
    }
}

#[test]
fn non_finite_inputs_propagate_as_on_the_cpu() {
    if !gpu_or_skip() {
        return;
    }
    let inf = f64::INFINITY;
    for x in [vec![1.0, inf, 2.0], vec![-inf, 1.0], vec![inf, -inf], vec![1.0, f64::NAN], vec![3.0; 70_000]] {
        for method in [Method::Exact, Method::Pairwise, Method::Div2] {
            let (cpu, gpu) = both(&x, method, Precision::Double, Kind::Sum);
            assert!(same_bits(cpu, gpu), "{method:?} {x:?}: {cpu} vs {gpu}");
        }
    }
    // R finds a missing value only in the elements whose result is NaN
    // (R/reduce.R): every method, precision and kind gives NaN for R's NA
    // and for NaN, short and long (every launch path).
    let r_na = f64::from_bits(0x7ff0_0000_0000_07a2);
    for n in [3, 300, 70_000, 1_000_003] {
        for missing in [f64::NAN, r_na] {
            let mut x = mixed(n, 5, -3, 3);
            x[n / 2] = missing;
            for method in Method::ALL {
                for precision in Precision::ALL {
                    for kind in [Kind::Sum, Kind::Mean] {
                        let (cpu, gpu) = both(&x, method, precision, kind);
                        assert!(cpu.is_nan() && gpu.is_nan(), "{method:?} {precision:?} {kind:?} n = {n}: cpu {cpu} gpu {gpu}");
                    }
                }
            }
        }
    }
}

#[test]
fn launch_shape_does_not_change_the_bits() {
    if !gpu_or_skip() {
        return;
    }
    let dev = gpu::devices().unwrap()[0].clone();
    let x = mixed((1 << 21) + 12_345, 99, -30, 30);
    let d_x = dev.stream.clone_htod(&x[..]).unwrap();
    let mut ws = Workspace::new(&dev).unwrap();
    let mut first: Vec<f64> = Vec::new();
    let shapes = [
        Tuning::default(),
        Tuning { threads: 128, plain_blocks_per_sm: 2, exact_blocks_per_sm: 1, tree_block_levels: 0 },
        Tuning { threads: 512, plain_blocks_per_sm: 4, exact_blocks_per_sm: 3, tree_block_levels: 2 },
    ];
    for (k, tuning) in shapes.iter().enumerate() {
        ws.tuning = *tuning;
        let got: Vec<f64> = [Method::Exact, Method::Pairwise, Method::Div2]
            .iter()
            .flat_map(|&m| Precision::ALL.map(|p| ws.reduce(&d_x, m, p, Kind::Mean).unwrap()))
            .collect();
        if k == 0 {
            first = got;
        } else {
            assert!(first.iter().zip(&got).all(|(a, b)| same_bits(*a, *b)), "shape {tuning:?}: {got:?} vs {first:?}");
        }
    }
}
