//! Accurate parallel reductions: sums and means of one or many vectors, and
//! log(mean(exp(x))), for Monte Carlo integration.
//!
//! | method     | result                                    | thread-count independent |
//! |------------|-------------------------------------------|--------------------------|
//! | `Naive`    | one accumulator, left to right            | yes (always one thread)  |
//! | `Kahan`    | Neumaier-compensated, fixed chunks        | yes                      |
//! | `Pairwise` | canonical pairwise tree ([`tree`])        | yes                      |
//! | `Div2`     | the same tree halving at every node       | yes                      |
//! | `Exact`    | correctly rounded sum / mean ([`exact`])  | yes, and chunking/backend|
//!
//! Results: `Exact` is correctly rounded (the mean too: one rounding of the
//! exact quotient). `Div2` computes the mean directly: the tree value is
//! sum / P with P = 2^ceil(log2 n), times the correction C = P / n
//! (correctly rounded); its sum is the tree value times P. The other
//! methods' means are fl(sum / n). In single precision the inputs are
//! rounded to binary32 first and every operation is binary32 (`Exact`: the
//! exact sum of the rounded inputs, rounded once to binary32); results come
//! back as f64, widened exactly.
//!
//! Non-finite values propagate as IEEE summation would: a NaN input gives
//! NaN; +Inf and -Inf together give NaN; otherwise an infinite input gives
//! that infinity. Overflow of finite values depends on the method, as in
//! plain arithmetic: `Naive`, `Kahan` and `Pairwise` give +-Inf when a
//! partial sum overflows (which one depends on the order they define);
//! `Div2`'s tree cannot overflow (its sum can, when multiplied by P);
//! `Exact` overflows only when the exact result rounds beyond the format.
//! An overflowed partial sum then acts as an infinity: [MAX, MAX, -Inf]
//! is NaN by `Naive` but -Inf by `Exact`. NaN payloads and the sign of a
//! zero result are not specified (`Exact` gives +0). The R layer relies on
//! NaN in, NaN out: it looks for NA only in the elements whose result is
//! NaN (tests/reduce_cpu.rs and reduce_gpu.rs check every method).
//!
//! Empty vectors: every sum is 0; a mean of nothing is undefined and is an
//! error naming the (1-based) element, raised before any work starts.

mod cpu;
pub mod exact;
pub mod fixed;
pub mod gpu;
pub mod kahan;
pub mod logexp;
mod method;
pub mod naive;
pub mod real;
pub mod stream;
pub mod superacc;
pub mod tree;

pub use method::{Method, Precision};
pub use stream::Stream;
pub use superacc::Superacc;

use crate::error::{Error, Result};
use crate::exec::{Backend, Exec, Job};

/// Whether a reduction returns the sum or the mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sum,
    Mean,
}


/// The job as the one backend choice (`exec::choose_backend`) sees it. From
/// host memory the upload costs more than the CPU's own pass (2^28 doubles:
/// 250-313 ms end to end on an H100, BENCHMARKS.md), so `use.gpu = NA`
/// never picks the GPU for a reduction; `use.gpu = TRUE` still can.
pub fn job(values: usize) -> Job {
    Job { work: values as f64, gpu_min_work: f64::INFINITY, gpu_unsupported: None }
}
/// The sum of `x` (0 for an empty `x`).
pub fn sum(x: &[f64], method: Method, precision: Precision, exec: &Exec) -> Result<f64> {
    reduce(x, method, precision, Kind::Sum, exec)
}

/// The mean of `x`; an empty `x` is an error.
pub fn mean(x: &[f64], method: Method, precision: Precision, exec: &Exec) -> Result<f64> {
    if x.is_empty() {
        return Err(Error::arg("x", "is empty: the mean of no values is undefined; pass at least one value"));
    }
    reduce(x, method, precision, Kind::Mean, exec)
}

/// The sum of every vector, computed together.
pub fn sums(data: &[&[f64]], method: Method, precision: Precision, exec: &Exec) -> Result<Vec<f64>> {
    reduce_many(data, method, precision, Kind::Sum, exec)
}

/// The mean of every vector, computed together; an empty vector is an error.
pub fn means(data: &[&[f64]], method: Method, precision: Precision, exec: &Exec) -> Result<Vec<f64>> {
    check_non_empty(data, "the mean of no values is undefined")?;
    reduce_many(data, method, precision, Kind::Mean, exec)
}

/// log(mean(exp(x))), stable for any finite inputs (see [`logexp`]); an
/// empty `x` is an error.
pub fn log_mean_exp(x: &[f64], exec: &Exec) -> Result<f64> {
    if x.is_empty() {
        return Err(Error::arg("x", "is empty: log_mean_exp of no values is undefined; pass at least one value"));
    }
    let mut out = log_mean_exps(&[x], exec)?;
    out.pop().ok_or_else(|| Error::arg("x", "gave no result"))
}

/// [`log_mean_exp`] of every vector, computed together.
pub fn log_mean_exps(data: &[&[f64]], exec: &Exec) -> Result<Vec<f64>> {
    check_non_empty(data, "log_mean_exp of no values is undefined")?;
    match exec.backend {
        Backend::Cpu => cpu::log_mean_exp_many(data, exec),
        Backend::Cuda => Err(Error::BackendUnavailable(
            "log_mean_exp runs on the CPU only (it is bound by exp, not by memory); use the CPU backend".into(),
        )),
    }
}

fn reduce(x: &[f64], method: Method, precision: Precision, kind: Kind, exec: &Exec) -> Result<f64> {
    match exec.backend {
        Backend::Cpu => cpu::reduce_single(x, method, precision, kind, exec),
        Backend::Cuda => Ok(gpu::reduce_many(&[x], method, precision, kind, exec)?[0]),
    }
}

fn reduce_many(data: &[&[f64]], method: Method, precision: Precision, kind: Kind, exec: &Exec) -> Result<Vec<f64>> {
    match exec.backend {
        Backend::Cpu => cpu::reduce_many(data, method, precision, kind, exec),
        Backend::Cuda => gpu::reduce_many(data, method, precision, kind, exec),
    }
}

fn check_non_empty(data: &[&[f64]], why: &str) -> Result<()> {
    match data.iter().position(|x| x.is_empty()) {
        None => Ok(()),
        Some(i) => Err(Error::arg(
            "x",
            format!("element {} is empty: {why}; drop empty elements or give them at least one value", i + 1),
        )),
    }
}
