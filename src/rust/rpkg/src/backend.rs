//! What the core can run on here.

use bulkem_core::exec::available_threads;
use extendr_api::prelude::*;

/// Backends of this build: list(cpu_threads, cuda_usable, cuda_reason).
/// @noRd
#[extendr]
fn backends_() -> List {
    list!(
        cpu_threads = available_threads() as i32,
        cuda_usable = false,
        cuda_reason = "this version of bulkem has no CUDA backend yet"
    )
}

extendr_module! {
    mod backend;
    fn backends_;
}
