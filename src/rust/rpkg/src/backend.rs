//! What the core can run on here.

use bulkem_core::exec::{available_threads, max_threads};
use bulkem_core::gpu;
use extendr_api::prelude::*;
use extendr_api::Result;

use crate::session::{backend_for, input_error, r_error};

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

/// The backend ("cpu" or "cuda") for a job of `area` ("em": sizes =
/// c(observation-iterations, components); "hmm" (categorical) or
/// "hmm:<emission>": c(states, observations, forward passes, CPU threads
/// (0 for all), sequences, longest sequence, forward-backward passes)) and
/// `request` ("cpu", "cuda", "auto"): the core's one choice, for R code
/// that splits a job into chunks and must choose once for all.
/// @noRd
#[extendr]
fn backend_choice_(area: &str, request: &str, sizes: &[f64]) -> Result<&'static str> {
    let size = |i: usize| sizes.get(i).copied().unwrap_or(0.0).max(0.0) as usize;
    let hmm = |obs_bytes: usize| {
        if sizes.len() != 7 {
            return Err(Error::Other(format!("internal: an HMM job's sizes are 7 numbers, not {}", sizes.len())));
        }
        let shape = bulkem_core::hmm::CallShape { states: size(0), sequences: size(4).max(1), total: size(1), longest: size(5), forward: size(2), e_steps: size(6), threads: size(3), obs_bytes };
        Ok(bulkem_core::hmm::job(&shape))
    };
    let job = match area {
        "em" => bulkem_core::em::job_for(sizes.first().copied().unwrap_or(0.0).max(0.0), size(1)),
        "hmm" => hmm(4)?,
        other => match other.strip_prefix("hmm:").and_then(bulkem_core::hmm::EmissionKind::from_name) {
            // The other emissions' observations are doubles.
            Some(_) => hmm(8)?,
            None => return Err(input_error(format!("unknown area '{other}'"))),
        },
    };
    Ok(backend_for(request, &job)?.name())
}

/// Error (memory) unless this process may allocate `bytes` more: for R
/// code about to allocate, e.g. rinvgaussmix()'s n draws. `what` names the
/// job as the user gave it.
/// @noRd
#[extendr]
fn memory_ensure_(what: &str, bytes: f64) -> Result<()> {
    // Saturates: NaN and negative sizes need nothing, huge ones all there is.
    let bytes = if bytes >= 0.0 { bytes.min(u128::MAX as f64) as u128 } else { 0 };
    bulkem_core::memory::ensure(|| what.to_string(), bytes).map_err(r_error)
}

/// Keep compiled GPU kernels in directory `dir` ("" for none); R sets it
/// before GPU work (R/backend.R, kernel_cache_dir()).
/// @noRd
#[extendr]
fn kernel_cache_(dir: &str) {
    gpu::cache::set_dir((!dir.is_empty()).then(|| dir.into()));
}

/// list(entries, bytes) of the kernel cache in `dir`, after removing every
/// entry when `clear`.
/// @noRd
#[extendr]
fn kernel_cache_usage_(dir: &str, clear: bool) -> List {
    let dir = std::path::Path::new(dir);
    if clear {
        gpu::cache::clear(dir);
    }
    let (entries, bytes) = gpu::cache::usage(dir);
    list!(entries = entries as i32, bytes = bytes as f64)
}

extendr_module! {
    mod backend;
    fn kernel_cache_;
    fn kernel_cache_usage_;
    fn memory_ensure_;
    fn backends_;
    fn backend_choice_;
}
