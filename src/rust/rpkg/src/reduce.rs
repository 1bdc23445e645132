//! bulk_mean(), bulk_sum(), log_mean_exp(): R lists of doubles -> core reductions.

use bulkem_core::exec::Backend;
use bulkem_core::reduce::{self, Kind, Method, Precision, Stream};
use extendr_api::prelude::*;
use extendr_api::Result;

use crate::session::{backend_for, input_error, r_error, real_slices, run_in_session};

/// Sum or mean ("sum" / "mean") of every element of `x` with `method` in
/// `precision`, on `backend` ("cpu", "cuda" or "auto").
/// @noRd
#[extendr]
fn reduce_(x: List, method: &str, precision: &str, kind: &str, backend: &str, threads: i32) -> Result<Vec<f64>> {
    let method = Method::parse(method).ok_or_else(|| input_error(format!("unknown method '{method}'")))?;
    let precision = Precision::parse(precision).ok_or_else(|| input_error(format!("unknown precision '{precision}'")))?;
    let values: Vec<Robj> = x.values().collect();
    let data = real_slices(&values)?;
    let backend = backend_for(backend, &reduce::job(data.iter().map(|x| x.len()).sum()))?;
    let out = run_in_session(backend, threads.max(0) as usize, |exec| match kind {
        "sum" => reduce::sums(&data, method, precision, exec),
        _ => reduce::means(&data, method, precision, exec),
    });
    out.map_err(r_error)
}

/// log(mean(exp(x))) of every element of `x`, on the CPU.
/// @noRd
#[extendr]
fn log_mean_exp_(x: List, threads: i32) -> Result<Vec<f64>> {
    let values: Vec<Robj> = x.values().collect();
    let data = real_slices(&values)?;
    run_in_session(Backend::Cpu, threads.max(0) as usize, |exec| reduce::log_mean_exps(&data, exec)).map_err(r_error)
}

/// A reduction fed chunk by chunk (mc_integrate): pieces of `piece` values.
/// @noRd
#[extendr]
fn stream_new_(method: &str, precision: &str, piece: f64) -> Result<ExternalPtr<Stream>> {
    let method = Method::parse(method).ok_or_else(|| input_error(format!("unknown method '{method}'")))?;
    let precision = Precision::parse(precision).ok_or_else(|| input_error(format!("unknown precision '{precision}'")))?;
    Ok(ExternalPtr::new(Stream::new(method, precision, piece as usize).map_err(r_error)?))
}

/// Add the next piece to a stream.
/// @noRd
#[extendr]
fn stream_push_(mut stream: ExternalPtr<Stream>, x: &[f64]) -> Result<()> {
    stream.push(x).map_err(r_error)
}

/// The stream's sum or mean so far.
/// @noRd
#[extendr]
fn stream_value_(mut stream: ExternalPtr<Stream>, kind: &str) -> Result<f64> {
    let kind = if kind == "sum" { Kind::Sum } else { Kind::Mean };
    stream.value(kind).map_err(r_error)
}

extendr_module! {
    mod reduce;
    fn reduce_;
    fn log_mean_exp_;
    fn stream_new_;
    fn stream_push_;
    fn stream_value_;
}
