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
