//! Helpers shared by the GPU integration tests (`mod common;` in each).

use bulkem_core::exec::{Backend, Exec};
use bulkem_core::gpu;

/// Whether a CUDA device is usable; prints why not (the test then returns early).
pub fn gpu_or_skip() -> bool {
    let probe = gpu::probe();
    if !probe.usable() {
        eprintln!("skipped: no usable CUDA device ({})", probe.reason);
    }
    probe.usable()
}

/// The CUDA backend with the CPU defaults otherwise.
pub fn cuda() -> Exec {
    Exec { backend: Backend::Cuda, ..Exec::cpu() }
}

/// Where a fit with `precision = "mixed"` differs from the float64 fit of
/// the same dataset by more than the documented tolerances: the kept
/// log-likelihood to 1e-7 relative (the bound), each parameter to
/// 1e-4 relative (float32 weights move the fixed point by about 1e-7
/// relative; a flat likelihood magnifies that in the parameters, not in the
/// log-likelihood; checked when `params`), and the same status. None when
/// they agree.
#[allow(dead_code)]
pub fn mixed_disagreement(double: &bulkem_core::em::MixFit, mixed: &bulkem_core::em::MixFit, params: bool) -> Option<String> {
    let rel = |a: f64, b: f64| if a == b { 0.0 } else { (a - b).abs() / b.abs().max(1e-300) };
    if double.success() != mixed.success() {
        return Some(format!("status {:?} (double) vs {:?} (mixed): {:?}", double.status, mixed.status, mixed.message));
    }
    if !double.success() {
        return None;
    }
    let runs = format!(
        "start {}/{}, {} / {} iterations, {:?} / {:?}",
        mixed.best_start, double.best_start, mixed.iterations, double.iterations, mixed.status, double.status
    );
    if rel(mixed.loglik, double.loglik) > 1e-7 {
        return Some(format!("loglik {} (mixed) vs {} (double); {runs}", mixed.loglik, double.loglik));
    }
    if !params {
        return None;
    }
    let (a, b) = (&mixed.params, &double.params);
    for (name, x, y) in [("alpha", &a.alpha, &b.alpha), ("first", &a.mu, &b.mu), ("second", &a.scale, &b.scale)] {
        for (p, q) in x.iter().zip(y.iter()) {
            if !(p.is_nan() && q.is_nan()) && rel(*p, *q) > 1e-4 {
                return Some(format!("{name} {x:?} (mixed) vs {y:?} (double); loglik {} vs {}; {runs}", mixed.loglik, double.loglik));
            }
        }
    }
    None
}
