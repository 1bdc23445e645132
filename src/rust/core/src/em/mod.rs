//! Mixture EM for many datasets x many random starts.
//!
//! ```text
//! E-step   w_ij = alpha_j f_j(x_i) / sum_k alpha_k f_k(x_i)         (log-sum-exp)
//! M-step   alpha_j = sum_i w_ij / n,   mu_j = sum_i w_ij x_i / sum_i w_ij
//!          IG:     lambda_j = sum w / (sum w/x - sum w / mu_j)      (new mu_j)
//!          Normal: sigma_j^2 = sum w (x - mu_j)^2 / sum w
//! ```
//! Iterations stop when the log-likelihood changes by less than epsilon, or
//! after max_iters M-steps.

pub mod bootstrap;
mod budget;
pub mod censored;
pub mod replicate_censoring;
mod config;
mod constraints;
pub mod cpu;
mod data;
mod density;
pub(crate) mod family;
mod fit;
pub mod gpu;
pub(crate) mod simd;
pub mod simulate;
mod select;
mod starts;

pub use budget::{check_memory, memory_needed, MemoryEstimate};
pub use constraints::Constraints;
pub use config::{CheckedEmConfig, EmConfig, Precision, StartMethod, Starts};
pub use select::{select_many, Criterion, Selection};
pub use density::{component_log_densities, mixture_log_density, posterior_at};
pub use data::{check_range, check_weights, WeightFacts, min_observations, unfittable_reason, unfittable_weighted, validate, validate_all, weight_total, Prepared};
pub use family::{Family, FamilyInfo, MStepFailure, Natural, IG_MAX, IG_MIN, NORMAL_MAX_SUM_SQUARES, NORMAL_MIN_MEAN_SQUARE};
pub use fit::{best_start, FitStatus, MixFit, MixParams, StartFit};
pub use starts::{initial_values, kmeanspp_start, random_start};

use crate::error::{Error, Result};
use crate::exec::{Backend, Exec, Job};

/// Work (observation-iterations, at most) below which the CPU backend
/// answers faster than a GPU: measured on an H100 against 16 CPU threads,
/// one 2,000-observation dataset x 1 start took 0.4 ms on the CPU and
/// 0.9 ms on the GPU, 1,000 such datasets 29 ms and 10 ms (BENCHMARKS.md);
/// a GPU also pays its kernel compilation on its first use in a process.
pub const GPU_MIN_WORK: f64 = 2e7;

/// The job as the one backend choice (`exec::choose_backend`) sees it.
pub fn job(data: &[&[f64]], config: &CheckedEmConfig) -> Job {
    let observations: f64 = data.iter().map(|x| x.len() as f64).sum();
    job_for(observations * config.starts_per_dataset() as f64 * config.max_iters as f64, config.components)
}

/// [`job`] of `work` observation-iterations (at most) with `components`
/// components: the GPU kernels fit up to `gpu::MAX_GPU_COMPONENTS`.
pub fn job_for(work: f64, components: usize) -> Job {
    Job {
        work,
        gpu_min_work: GPU_MIN_WORK,
        gpu_unsupported: (components > gpu::MAX_GPU_COMPONENTS).then(|| {
            format!("the GPU kernels fit up to {} components, not {components}; use the CPU backend", gpu::MAX_GPU_COMPONENTS)
        }),
    }
}

/// Fit a mixture to every dataset. The memory the fit needs is estimated
/// ([`memory_needed`]) and checked first, and all data are validated
/// (values, then the range the sufficient statistics can hold:
/// [`check_range`]) before any work; a dataset that is valid but cannot be
/// fitted gets status Failed without affecting the others.
pub fn fit_many(data: &[&[f64]], config: &CheckedEmConfig, exec: &Exec) -> Result<Vec<MixFit>> {
    let mut fits = fit_models(data, std::slice::from_ref(config), exec)?;
    Ok(fits.pop().unwrap_or_default())
}

/// [`fit_many`] for several configurations at once (candidate numbers of
/// components with the same other settings): one pass over the backend,
/// whose work and launches cover every configuration. Returns the fits per
/// configuration.
pub(crate) fn fit_models(data: &[&[f64]], configs: &[CheckedEmConfig], exec: &Exec) -> Result<Vec<Vec<MixFit>>> {
    let Some(config) = configs.first() else {
        return Err(Error::arg("num.components", "must hold at least one number of components"));
    };
    let t0 = std::time::Instant::now();
    check_memory(data, configs, exec.backend, exec.threads)?;
    exec.install(|| validate_all(config.family, data, config.dataset_offset + 1))??;
    let facts = config.weights.as_ref().map(|w| data::check_weights(data, w, config.dataset_offset + 1)).transpose()?;
    if let Some(c) = &config.censoring {
        exec.install(|| censored::check(data, c, config.family, config.dataset_offset + 1))??;
    }
    crate::gpu::timing::record("validation", t0);
    if let Starts::Given(inits) = &config.starts {
        if configs.len() != 1 {
            return Err(Error::arg("inits", "are starting values for one number of components; give one value of num.components"));
        }
        if inits.len() != 1 && inits.len() != data.len() {
            return Err(Error::arg(
                "inits",
                format!("must hold one set of starting values or one per dataset ({}), not {}", data.len(), inits.len()),
            ));
        }
    }
    let mut fits = match exec.backend {
        Backend::Cpu => cpu::fit_models(data, configs, exec)?,
        Backend::Cuda => gpu::fit_models(data, configs, exec, facts.as_deref())?,
    };
    if !config.keep_trace {
        fits.iter_mut().flatten().for_each(|f| f.trace = Vec::new());
    }
    Ok(fits)
}
