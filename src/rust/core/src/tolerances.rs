//! Every numerical tolerance and bound of the core, in one place.

/// A random start is redrawn at most this many times per component when the
/// drawn observations give invalid parameters (e.g. all equal).
pub const MAX_START_REDRAWS: usize = 100;

/// k-means++ starts seed from at most this many observations (a sample,
/// with replacement, of larger datasets): enough to see a component of a
/// few percent, and cheap next to the EM itself.
pub const SEED_SAMPLE: usize = 256;

/// A component whose total responsibility falls below this is declared empty.
pub const MIN_COMPONENT_WEIGHT: f64 = 1e-300;

/// A component has collapsed onto (nearly) a single value when its spread
/// falls below this fraction of its second moment: there the spread is
/// rounding noise, and backends would disagree on it. Inverse Gaussian:
/// sum w/x - sum w/mu <= COLLAPSE_REL * sum w/x; Normal: variance <=
/// COLLAPSE_REL * E_w[(x - centre)^2].
pub const COLLAPSE_REL: f64 = 1e-10;

/// Number of (dataset, start) random streams available per dataset.
pub const MAX_RANDOM_INITS: usize = 1 << 24;

/// GPU against CPU, same data and starts: relative agreement of parameters
/// (converged or after the same iterations) and of log-likelihoods.
pub const GPU_CPU_PARAM_REL: f64 = 1e-8;
pub const GPU_CPU_LOGLIK_REL: f64 = 1e-10;

/// precision = "mixed": the float32 weights put noise of about
/// 4e-8 * sqrt(n) into each iteration's log-likelihood; below
/// MIXED_NOISE * sqrt(n) (a margin of about 20) a change of the
/// log-likelihood is no longer trusted, and a start whose epsilon is smaller
/// goes on with float64 E-steps (em::cpu::run_iterations, em_warp).
pub const MIXED_NOISE: f64 = 1e-6;

/// Starts whose log-likelihoods are within this relative distance of the
/// best are ties, resolved by the lowest start index.
pub const START_TIE_REL: f64 = 1e-9;

/// Slice sampler: most stepping-out steps when `m` is unlimited, and most
/// shrinkage proposals before an update gives up and keeps its point.
pub const SLICE_MAX_STEPS: usize = 1_000;
pub const SLICE_MAX_SHRINKS: usize = 200;

/// Slice-width adaptation during warmup: a window's widths become
/// `SLICE_ADAPT_FACTOR` x the mean absolute move, once per this many sweeps.
pub const SLICE_ADAPT_WINDOW: usize = 10;
pub const SLICE_ADAPT_FACTOR: f64 = 2.0;

/// HMM probability vectors (start, rows of trans and emis) must sum to 1
/// within this.
pub const HMM_ROW_SUM_TOL: f64 = 1e-8;

/// Baum-Welch random starts that end within this relative distance of the
/// best log-likelihood are ties, resolved by the lowest start index.
pub const HMM_START_TIE_REL: f64 = 1e-9;
