//! What the core can run on here.

use bulkem_core::exec::{available_threads, max_threads};
use bulkem_core::gpu;
use extendr_api::prelude::*;

/// Backends of this process: list(cpu_threads, max_threads, cuda_usable, cuda_reason,
/// devices = list(ordinal, name, compute_capability, memory_gb, usable, reason)).
/// @noRd
#[extendr]
fn backends_() -> List {
    let probe = gpu::probe();
    let d = &probe.devices;
    let devices = list!(
        ordinal = d.iter().map(|x| x.ordinal as i32).collect::<Vec<_>>(),
        name = d.iter().map(|x| x.name.clone()).collect::<Vec<_>>(),
        compute_capability = d.iter().map(|x| format!("{}.{}", x.compute_capability.0, x.compute_capability.1)).collect::<Vec<_>>(),
        memory_gb = d.iter().map(|x| x.total_memory as f64 / 1e9).collect::<Vec<_>>(),
        usable = d.iter().map(|x| x.usable).collect::<Vec<_>>(),
        reason = d.iter().map(|x| x.reason.clone()).collect::<Vec<_>>()
    );
    list!(
        cpu_threads = available_threads() as i32,
        max_threads = max_threads() as i32,
        cuda_usable = probe.usable(),
        cuda_reason = probe.reason,
        devices = devices
    )
}

extendr_module! {
    mod backend;
    fn backends_;
}
