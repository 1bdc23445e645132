//! log(mean(exp(x))) without overflow or underflow, for Monte Carlo
//! evidence estimates whose log-weights are around -1e5.
//!
//! With m = max x: log mean exp(x) = m + log(mean(exp(x - m))). Every
//! exp(x_i - m) is in [0, 1] and the largest is 1, so the mean lies in
//! [1/n, 1] and its log is finite; the mean is the correctly rounded mean
//! of the computed exp(x_i - m) (exact method), so the result depends on
//! neither thread count nor chunking.
//!
//! Non-finite inputs: any NaN gives NaN; m = +Inf gives +Inf; all -Inf
//! (the mean of zeros) gives -Inf.

use rayon::prelude::*;

use super::exact;
use super::superacc::Superacc;

/// Inputs below this are scanned on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;

/// log(mean(exp(x))) for a non-empty x; `acc` must be empty and is left empty.
pub fn log_mean_exp(x: &[f64], acc: &mut Superacc) -> f64 {
    let scan = |c: &[f64]| c.iter().fold((f64::NEG_INFINITY, false), |(m, nan), &v| (m.max(v), nan || v.is_nan()));
    let (m, nan) = if x.len() < PARALLEL_MIN {
        scan(x)
    } else {
        x.par_chunks(PARALLEL_MIN).map(scan).reduce(|| (f64::NEG_INFINITY, false), |a, b| (a.0.max(b.0), a.1 || b.1))
    };
    if nan {
        return f64::NAN;
    }
    if m.is_infinite() {
        return m;
    }
    exact::accumulate(acc, x, |v| (v - m).exp());
    let mean: f64 = exact::finish(acc, Some(x.len()));
    acc.clear();
    m + mean.ln()
}
