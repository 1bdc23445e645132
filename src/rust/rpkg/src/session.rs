//! Running core work from R's main thread: the workers compute while the
//! main thread polls R for a user interrupt and cancels the work if one came.

use std::os::raw::c_int;
use std::time::Duration;

use bulkem_core::exec::{choose_backend, Backend, BackendRequest, Exec, Job};
use bulkem_core::ErrorKind;
use extendr_api::prelude::*;
use extendr_api::Result;

extern "C" {
    /// Defined in entrypoint.c: non-zero when the user interrupted R.
    fn bulkem_interrupt_pending() -> c_int;
}

/// How often the main thread checks for an interrupt.
const POLL: Duration = Duration::from_millis(50);

/// The double vectors of an R list, borrowed (the R side has coerced them).
pub fn real_slices(values: &[Robj]) -> Result<Vec<&[f64]>> {
    values
        .iter()
        .map(|v| v.as_real_slice().ok_or_else(|| Error::Other("internal: every element must be a double vector".into())))
        .collect()
}

/// Core error -> R error message, tagged `[bulkem_error_<kind>] ` so that
/// the R side (core_error() in R/backend.R) raises a condition of that class.
/// A NaN observation is a missing value to an R user: named as R's NA where
/// it has NA's payload (the low word 1954), else as NaN.
pub fn r_error(e: bulkem_core::Error) -> Error {
    match e {
        bulkem_core::Error::InvalidData { dataset, position, value, .. } if value.is_nan() => {
            let what = if value.to_bits() & 0xffff_ffff == 1954 { "NA" } else { "NaN" };
            tagged(ErrorKind::Input, &format!("Dataset {dataset} has {what} at position {position}."))
        }
        e => tagged(e.kind(), &e.to_string()),
    }
}

/// An input error found by the glue itself.
pub fn input_error(message: impl AsRef<str>) -> Error {
    tagged(ErrorKind::Input, message.as_ref())
}

fn tagged(kind: ErrorKind, message: &str) -> Error {
    Error::Other(format!("[bulkem_error_{}] {message}", kind.name()))
}

/// The backend for `request` ("cpu", "cuda" or "auto", from R's use.gpu)
/// and `job`: the core's one choice for every area.
pub fn backend_for(request: &str, job: &Job) -> Result<Backend> {
    let request = BackendRequest::parse(request).ok_or_else(|| input_error(format!("unknown backend '{request}'")))?;
    choose_backend(request, job).map_err(r_error)
}

/// Run `work` with an [`Exec`] for `backend` and `threads`, cancelling it
/// when the user interrupts R.
pub fn run_in_session<T: Send>(backend: Backend, threads: usize, work: impl FnOnce(&Exec) -> T + Send) -> T {
    // A fresh monitor: this call's progress and cancellation.
    let exec = Exec { backend, ..Exec::cpu().threads(threads) };
    // The call runs in its pool: every parallel loop in it on the call's
    // threads (a Slurm job's allotment, say), none on rayon's global pool.
    exec.run_polled(POLL, || work(&exec), |_| {
        // SAFETY: called on R's main thread, which is blocked in this call;
        // the C helper processes R's events inside R_ToplevelExec and
        // R_tryCatchError, so no R error or longjmp can cross these Rust
        // frames. The workers block the signals R handles
        // (exec::block_async_signals), so R's handlers run on this thread.
        unsafe { bulkem_interrupt_pending() == 0 }
    })
}
