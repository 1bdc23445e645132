//! bulk_mean(), bulk_sum(), log_mean_exp(): R lists of doubles -> core reductions.

use bulkem_core::exec::Backend;
use bulkem_core::reduce::{self, Method, Precision};
use extendr_api::prelude::*;
use extendr_api::Result;

use crate::session::{r_error, real_slices, run_in_session};

/// Sum or mean ("sum" / "mean") of every element of `x` with `method` in
/// `precision`, on the CPU.
/// @noRd
#[extendr]
fn reduce_(x: List, method: &str, precision: &str, kind: &str, threads: i32) -> Result<Vec<f64>> {
    let method = Method::parse(method).ok_or_else(|| Error::Other(format!("unknown method '{method}'")))?;
    let precision = Precision::parse(precision).ok_or_else(|| Error::Other(format!("unknown precision '{precision}'")))?;
    let values: Vec<Robj> = x.values().collect();
    let data = real_slices(&values)?;
    let out = run_in_session(Backend::Cpu, threads.max(0) as usize, |exec| match kind {
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

extendr_module! {
    mod reduce;
    fn reduce_;
    fn log_mean_exp_;
}
