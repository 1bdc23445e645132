//! The memory a bulkem fit holds at its peak, estimated once from the job's
//! sizes (datasets, observations, components, starts, what is kept) and
//! checked with [`crate::memory::ensure`] before anything large is
//! allocated, so that `num.components = 1e9` or `random.inits = 2^24` is an
//! error that names the argument, not an aborted process.

use crate::error::Result;
use crate::exec::Backend;
use crate::memory;

use super::config::{CheckedEmConfig, Starts};

/// Bytes a [`super::fit_many`] call needs at its peak, by what drives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryEstimate {
    /// Parameters and starting values: per dataset, and per start in flight
    /// (grows with `num.components`).
    pub parameters: u128,
    /// Per-start results: every start's log-likelihood, and on the GPU every
    /// (dataset, start) pair's results (grows with `random.inits`).
    pub starts: u128,
    /// Posterior matrices and log-likelihood traces (`keep.posterior`).
    pub posterior: u128,
    /// Working copies of the data: E-step features, GPU uploads.
    pub data: u128,
}

impl MemoryEstimate {
    pub fn total(&self) -> u128 {
        self.parameters.saturating_add(self.starts).saturating_add(self.posterior).saturating_add(self.data)
    }
}

/// Copies of each output alive at once: the core's, the R glue's flat
/// vectors, and the per-dataset fits R assembles from them.
const OUTPUT_COPIES: u128 = 3;
/// Bytes of bookkeeping per fit and per start (vector headers, status, message).
const PER_FIT_OVERHEAD: u128 = 400;
const PER_PAIR_OVERHEAD: u128 = 96;

fn mul(factors: &[u128]) -> u128 {
    factors.iter().fold(1u128, |acc, &f| acc.saturating_mul(f))
}

/// The estimate for fitting `data` with `config` on `backend` with
/// `threads` CPU threads (0: every core).
pub fn memory_needed(data: &[&[f64]], config: &CheckedEmConfig, backend: Backend, threads: usize) -> MemoryEstimate {
    let d = data.len() as u128;
    let n: u128 = data.iter().map(|x| x.len() as u128).sum();
    let largest = data.iter().map(|x| x.len()).max().unwrap_or(0) as u128;
    let m = config.components as u128;
    let s = config.starts_per_dataset() as u128;
    let iters = config.max_iters as u128;
    let threads = if threads == 0 { crate::exec::available_threads() } else { threads } as u128;
    let f64s = |count: u128| mul(&[count, 8]);

    // Outputs, per dataset: fitted and starting values (6M), every start's
    // log-likelihood, the kept trace and posterior.
    let mut est = MemoryEstimate {
        parameters: mul(&[OUTPUT_COPIES, d, f64s(6 * m).saturating_add(PER_FIT_OVERHEAD)]),
        starts: mul(&[OUTPUT_COPIES, d, f64s(s)]),
        posterior: 0,
        data: 0,
    };
    if config.keep_posterior {
        est.posterior = mul(&[OUTPUT_COPIES, f64s(mul(&[n, m]))]);
    }
    if config.keep_trace {
        est.posterior = est.posterior.saturating_add(mul(&[OUTPUT_COPIES, d, f64s(iters)]));
    }
    // Given starting values are held once per dataset (or once for all).
    if let Starts::Given(given) = &config.starts {
        est.parameters = est.parameters.saturating_add(mul(&[given.len() as u128, f64s(3 * m)]));
    }
    let in_flight = d.min(threads);
    match backend {
        Backend::Cpu => {
            // Per thread, one start's parameters, sums, naturals and E-step
            // scratch (about 13 M values), its trace when kept, and the few
            // starts a dataset keeps as candidates for the best.
            let per_start = f64s(13 * m).saturating_add(PER_PAIR_OVERHEAD);
            est.parameters = est.parameters.saturating_add(mul(&[2, threads, per_start]));
            if config.keep_trace {
                est.posterior = est.posterior.saturating_add(mul(&[2, threads, f64s(iters)]));
            }
            // The features (u, v) of the datasets in flight, and their
            // weights' copies.
            let per_obs = if config.weights.is_some() { 24 } else { 16 };
            est.data = mul(&[in_flight, largest, per_obs]);
        }
        Backend::Cuda => {
            // Every (dataset, start) pair's starting values, results and
            // bookkeeping live on the host until the datasets are assembled.
            let pairs = mul(&[d, s]);
            est.parameters = est.parameters.saturating_add(mul(&[pairs, f64s(6 * m)]));
            est.starts = est.starts.saturating_add(mul(&[pairs, PER_PAIR_OVERHEAD]));
            if config.keep_trace {
                est.posterior = est.posterior.saturating_add(mul(&[pairs, f64s(iters)]));
            }
            // Two launches' uploads in flight, and the features of the
            // datasets whose posterior is computed on the host.
            // With weights, their uploads too; censored data also keep a
            // copy of their exact values, or of their weights.
            let upload = if config.weights.is_some() { 16 } else { 8 };
            let extras = if config.censoring.is_some() { mul(&[n, 8]) } else { 0 };
            est.data = mul(&[2, n, upload]).saturating_add(mul(&[in_flight, largest, 16])).saturating_add(extras);
        }
    }
    est
}

/// `Err(OutOfMemory)` naming the argument that drives the estimate when the
/// fit of every configuration (candidate number of components; all their
/// fits are held at once) needs more memory than this process may use.
pub fn check_memory(data: &[&[f64]], configs: &[CheckedEmConfig], backend: Backend, threads: usize) -> Result<()> {
    let est = configs.iter().map(|c| memory_needed(data, c, backend, threads)).fold(MemoryEstimate::default(), |a, b| MemoryEstimate {
        parameters: a.parameters.saturating_add(b.parameters),
        starts: a.starts.saturating_add(b.starts),
        posterior: a.posterior.saturating_add(b.posterior),
        data: a.data.max(b.data),
    });
    let largest = configs.iter().max_by_key(|c| c.components).expect("at least one configuration");
    memory::ensure(|| describe(data, largest, &est), est.total())
}

/// "`num.components = 1000000000` (with random.inits = 1, on 1 dataset of 4
/// observations)": the argument behind most of the estimate first.
fn describe(data: &[&[f64]], config: &CheckedEmConfig, est: &MemoryEstimate) -> String {
    let d = data.len();
    let n: u128 = data.iter().map(|x| x.len() as u128).sum();
    let on = format!(
        "on {d} dataset{} of {n} observation{} in all",
        if d == 1 { "" } else { "s" },
        if n == 1 { "" } else { "s" }
    );
    let m = format!("num.components = {}", config.components);
    let s = match config.starts {
        Starts::Random { count, .. } => format!("random.inits = {count}"),
        Starts::Given(_) => "given inits".to_string(),
    };
    let kept = if config.keep_posterior || config.keep_trace { ", keep.posterior = TRUE" } else { "" };
    let parts = [est.parameters, est.starts, est.posterior, est.data];
    let top = (0..parts.len()).max_by_key(|&i| parts[i]).unwrap_or(0);
    match top {
        0 => format!("`{m}` (with {s}{kept}, {on})"),
        1 => format!("`{s}` (with {m}{kept}, {on})"),
        2 => format!("`keep.posterior = TRUE` (with {m}, {s}, {on})"),
        _ => format!("`datasets` ({n} observations in {d} dataset{}, with {m}, {s}{kept})", if d == 1 { "" } else { "s" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::em::{EmConfig, Family};

    #[test]
    fn each_size_drives_its_part_and_names_its_argument() {
        let x = [1.0, 2.0, 3.0, 4.0];
        let data: Vec<&[f64]> = vec![&x];
        let small = EmConfig::new(Family::InvGauss, 2).check().unwrap();
        let base = memory_needed(&data, &small, Backend::Cpu, 2).total();
        assert!(base < 1 << 20, "{base}");

        let many_m = EmConfig::new(Family::InvGauss, 1_000_000_000).check().unwrap();
        let est = memory_needed(&data, &many_m, Backend::Cpu, 2);
        assert!(est.parameters >= 3 * 6 * 8 * 1_000_000_000, "{est:?}");
        assert!(describe(&data, &many_m, &est).starts_with("`num.components = 1000000000`"));

        let many_s = EmConfig::new(Family::InvGauss, 2).random_inits(1 << 24).check().unwrap();
        let est = memory_needed(&vec![&x[..]; 1000], &many_s, Backend::Cpu, 2);
        assert!(est.starts >= 3 * 8 * 1000 * (1 << 24), "{est:?}");
        assert!(describe(&vec![&x[..]; 1000], &many_s, &est).starts_with("`random.inits = 16777216`"));
        // The GPU keeps every pair's results on the host.
        let gpu = memory_needed(&vec![&x[..]; 1000], &many_s, Backend::Cuda, 2);
        assert!(gpu.total() > est.total());

        let post = EmConfig::new(Family::InvGauss, 500).keep_posterior(true).check().unwrap();
        let big: Vec<f64> = vec![1.0; 100_000];
        let est = memory_needed(&[&big[..]], &post, Backend::Cpu, 2);
        assert_eq!(est.posterior, 3 * 8 * 100_000 * 500);
        assert!(describe(&[&big[..]], &post, &est).starts_with("`keep.posterior = TRUE`"));
    }

    #[test]
    fn absurd_sizes_saturate_and_are_refused() {
        let x = [1.0, 2.0, 3.0];
        let config = EmConfig::new(Family::Normal, usize::MAX / 2).random_inits(1 << 24).check().unwrap();
        let est = memory_needed(&[&x[..]], &config, Backend::Cuda, 0);
        assert!(est.total() > u64::MAX as u128);
        let err = check_memory(&[&x[..]], &[config], Backend::Cuda, 0).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Memory);
    }
}
