//! Emission distributions: one interface ([`Emission`]) between the
//! recursions and what a state emits.
//!
//! The recursions never see an observation's value. At every time step they
//! read a row of one value per state ([`Rows`]): scaled probabilities for the
//! forward-backward recursions (a categorical emission's table row; a
//! density's values divided by their largest, whose log is added to the
//! log-likelihood), or log densities for Viterbi and the log-space passes.
//! Baum-Welch splits the same way: the transition counts are shared, and
//! each emission adds its sufficient statistics (S per state, laid out
//! `stats[k * N + j]`) from the posteriors and re-estimates its parameters
//! from them ([`Emission::m_step`]).
//!
//! A new emission is one file here implementing [`Emission`] and [`Rows`],
//! its line in [`EmissionKind`], and its R constructor.

pub(crate) mod categorical;
mod gaussian;
mod poisson;

pub use categorical::Categorical;
pub use gaussian::Gaussian;
pub use poisson::Poisson;

use std::fmt::Debug;

use crate::error::Result;
use crate::rng::KeyedStream;

use super::sequences::Sequences;

/// Types whose all-zero bit pattern is the value 0 (so large buffers of
/// them can be allocated zeroed, without writing them).
pub trait Zero: Copy {}
impl Zero for f64 {}
impl Zero for u32 {}
impl Zero for u16 {}
impl Zero for u8 {}

/// Which values a [`Rows`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// Probabilities, scaled so that the recursions stay in range.
    Linear,
    /// Log probabilities (densities), unscaled.
    Log,
}

/// One time step's emission row.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// One value per state: scaled probabilities (linear) or logs.
    pub values: &'a [f64],
    /// Linear rows: the log of the factor divided out (0 for logs and for
    /// categorical rows); the log-likelihood adds it back.
    pub shift: f64,
    /// Linear rows: the smallest value of a state whose density is positive
    /// (0 when such a value underflowed): the scaled recursions' certificate
    /// reads it (see [`super::tables::Certificate`]).
    pub min: f64,
}

/// An emission in the layout the recursions read (built once per call).
pub trait Rows: Send + Sync {
    type Obs: Copy;
    /// The row of observation `o`, in the space the rows were built for;
    /// `buf` (N values) is scratch the row may live in.
    fn row<'a>(&'a self, o: Self::Obs, buf: &'a mut [f64]) -> Row<'a>;
    /// Linear rows: whether every row's largest value is 1 (a density's
    /// rows), which the certificate of dense transition matrices needs.
    fn normalised(&self) -> bool;
    /// Linear rows of a table (not normalised): the smallest positive value
    /// of any row, which the categorical certificate reads; 0 for densities.
    fn smallest(&self) -> f64;
}

/// Settings of the emission's M-step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmissionFit {
    /// Added to every categorical emission count (see
    /// [`super::HmmFitConfig::pseudocount`]); ignored by densities.
    pub pseudocount: f64,
    /// Smallest variance a Gaussian state may take (NaN: the default, set
    /// from the data by [`Emission::resolve`]).
    pub var_floor: f64,
}

impl Default for EmissionFit {
    /// Maximum likelihood (no pseudocount), the default variance floor.
    fn default() -> Self {
        EmissionFit { pseudocount: 0.0, var_floor: f64::NAN }
    }
}

/// A new emission from its M-step, with the states whose parameters the
/// M-step held at a floor.
#[derive(Debug, Clone, PartialEq)]
pub struct MStep<E> {
    pub emission: E,
    pub floored: Vec<bool>,
}

/// An emission distribution of an HMM with N states.
pub trait Emission: Clone + Debug + PartialEq + Send + Sync + Sized + 'static {
    /// One observation: a symbol (0-based) or a number.
    type Obs: Copy + Debug + PartialEq + Send + Sync + Zero + 'static;
    /// What a fit fixes besides N (the number of symbols of a categorical
    /// emission; nothing for a density).
    type Shape: Clone + Debug + PartialEq + Send + Sync;
    type Rows: Rows<Obs = Self::Obs>;

    /// The name R uses ("categorical", "gaussian", "poisson").
    const NAME: &'static str;

    fn n_states(&self) -> usize;
    fn shape(&self) -> Self::Shape;
    /// The shape in words, for errors ("3 symbols").
    fn describe_shape(shape: &Self::Shape) -> String {
        format!("{shape:?}")
    }
    /// An invalid shape, as an argument error.
    fn check_shape(shape: &Self::Shape) -> Option<crate::error::Error> {
        let _ = shape;
        None
    }
    /// S, the number of sufficient statistics per state, of an emission of
    /// this shape.
    fn n_stats_of(shape: &Self::Shape) -> usize;
    fn n_stats(&self) -> usize {
        Self::n_stats_of(&self.shape())
    }
    fn free_parameters(&self) -> usize;
    /// What is wrong with `o` ("symbol 7"), if it cannot be an observation
    /// of an emission of this shape.
    fn check_obs(shape: &Self::Shape, o: Self::Obs) -> Option<String>;
    /// Whether `o` can be an observation: `check_obs` without the message,
    /// so that a scan over every observation has no branch to take and
    /// vectorises.
    fn obs_ok(shape: &Self::Shape, o: Self::Obs) -> bool {
        Self::check_obs(shape, o).is_none()
    }
    /// What observations must be, for errors.
    fn obs_rule(shape: &Self::Shape) -> String;
    /// The rows the recursions read.
    fn rows(&self, space: Space) -> Result<Self::Rows>;
    /// Add `gamma[j] * phi_k(o)` to `stats[k * N + j]` for every state j and
    /// statistic k.
    fn add_stats(&self, o: Self::Obs, gamma: &[f64], stats: &mut [f64]);
    /// The parameters maximising the expected complete-data log-likelihood
    /// given the statistics; a state with no mass keeps its parameters.
    fn m_step(&self, stats: &[f64], fit: &EmissionFit) -> MStep<Self>;
    /// Fill in the settings left to the data (e.g. the variance floor).
    fn resolve(fit: &mut EmissionFit, data: &Sequences<Self::Obs>) {
        let _ = (fit, data);
    }
    /// An observation drawn in `state`.
    fn sample(&self, state: usize, rng: &mut KeyedStream) -> Self::Obs;
    /// A random starting emission for a fit of `n` states to `data`.
    fn random(n: usize, shape: &Self::Shape, data: &Sequences<Self::Obs>, rng: &mut KeyedStream) -> Result<Self>;
    /// A density's block of device functions (see kernels/hmm_emission.cu);
    /// empty for a categorical emission, whose device rows are its table.
    fn cuda() -> String {
        String::new()
    }
    /// The per-state parameters the device block reads (`ep`).
    fn device_params(&self) -> Vec<f64> {
        Vec::new()
    }
}

/// The emissions, by name (what R's `emission$family` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmissionKind {
    Categorical,
    Gaussian,
    Poisson,
}

impl EmissionKind {
    pub const ALL: [EmissionKind; 3] = [EmissionKind::Categorical, EmissionKind::Gaussian, EmissionKind::Poisson];

    pub fn name(self) -> &'static str {
        match self {
            EmissionKind::Categorical => Categorical::NAME,
            EmissionKind::Gaussian => Gaussian::NAME,
            EmissionKind::Poisson => Poisson::NAME,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// S, the statistics per state (`n_symbols`: a categorical emission's V).
    pub fn n_stats(self, n_symbols: usize) -> usize {
        match self {
            EmissionKind::Categorical => Categorical::n_stats_of(&n_symbols),
            EmissionKind::Gaussian => Gaussian::n_stats_of(&()),
            EmissionKind::Poisson => Poisson::n_stats_of(&()),
        }
    }
}

/// A density's linear row from its log densities in `buf`: divided by the
/// largest (returned as the shift, plus `extra`), with the smallest value
/// of a positive density. An all-zero row (every density 0) stays 0.
pub(crate) fn scale_logs(buf: &mut [f64], extra: f64) -> Row<'_> {
    let top = buf.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY {
        buf.fill(0.0);
        return Row { values: buf, shift: 0.0, min: 0.0 };
    }
    let mut min = f64::INFINITY;
    for l in buf.iter_mut() {
        let finite = *l > f64::NEG_INFINITY;
        *l = (*l - top).exp();
        if finite && *l < min {
            min = *l;
        }
    }
    Row { values: buf, shift: top + extra, min }
}

/// Mean and variance of every observation, for random starts and default
/// floors: per chunk, its mean and its sum of squared deviations (two
/// passes over the chunk while it is in cache), merged in chunk order by
/// Chan, Golub and LeVeque's update. Main memory is read once (two passes
/// over all of it took 2.7-3.4 ms per 160 MB on the 16-core GPU host, a
/// tenth of a Gaussian Baum-Welch step), and the bits are the same for
/// any number of threads.
pub(crate) fn moments(data: &Sequences<f64>) -> (f64, f64) {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 16;
    let parts: Vec<(f64, f64, f64)> = data
        .symbols
        .par_chunks(CHUNK)
        .map(|c| {
            let n = c.len() as f64;
            let mean = lane_sum(c, |x| x) / n;
            (n, mean, lane_sum(c, |x| (x - mean) * (x - mean)))
        })
        .collect();
    let merged = parts.into_iter().reduce(|(na, ma, sa), (nb, mb, sb)| {
        let (n, d) = (na + nb, mb - ma);
        (n, ma + d * (nb / n), sa + sb + d * d * (na * nb / n))
    });
    match merged {
        Some((n, mean, m2)) => (mean, m2 / n),
        None => (0.0, 0.0),
    }
}

/// The sum of `f` over `xs` (a chunk of [`moments`]) in [`LANES`]
/// accumulators: one chain of dependent additions waits on each one's
/// latency. `f` is a type parameter, inlined into the loop (as a `dyn Fn`,
/// its call per value made the sums four times slower).
fn lane_sum(xs: &[f64], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0.0; LANES];
    let mut whole = xs.chunks_exact(LANES);
    for k in &mut whole {
        for (a, &x) in acc.iter_mut().zip(k) {
            *a += f(x);
        }
    }
    for (a, &x) in acc.iter_mut().zip(whole.remainder()) {
        *a += f(x);
    }
    acc.iter().sum()
}

/// Accumulators of [`lane_sum`].
const LANES: usize = 8;

/// A uniformly drawn observation of `data` (0.0 when there is none).
pub(crate) fn draw(data: &Sequences<f64>, rng: &mut KeyedStream) -> f64 {
    let n = data.symbols.len() as u64;
    if n == 0 { 0.0 } else { data.symbols[rng.below(n) as usize] }
}

#[cfg(test)]
mod tests {
    use super::{moments, Sequences};

    /// The merged chunk moments against a two-pass sum in long double's
    /// stead (i128 of values scaled to integers), over several chunks with
    /// a large offset (where a one-pass sum of squares loses every digit),
    /// the same bits on one thread and on four.
    #[test]
    fn moments_merge_chunks_exactly_enough_and_alike_on_any_threads() {
        let n = 300_001usize;
        let ints: Vec<i64> = (0..n as i64).map(|i| (i * 7919) % 10_007 - 5_000).collect();
        let x: Vec<f64> = ints.iter().map(|&k| 1e9 + k as f64 / 16.0).collect();
        let seqs = Sequences { symbols: x, offsets: vec![0, n] };
        let (mean, var) = moments(&seqs);
        // Exact: mean = 1e9 + S / (16 n), var = (n Q - S^2) / (256 n^2).
        let (s, q): (i128, i128) = ints.iter().fold((0, 0), |(s, q), &k| (s + k as i128, q + (k as i128) * (k as i128)));
        let exact_mean = 1e9 + s as f64 / (16.0 * n as f64);
        let exact_var = (n as i128 * q - s * s) as f64 / (256.0 * (n as f64) * (n as f64));
        assert!((mean - exact_mean).abs() <= 1e-15 * exact_mean, "{mean} {exact_mean}");
        assert!((var - exact_var).abs() <= 1e-9 * exact_var, "{var} {exact_var}");
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap().install(|| moments(&seqs));
        let four = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap().install(|| moments(&seqs));
        assert_eq!((one.0.to_bits(), one.1.to_bits()), (four.0.to_bits(), four.1.to_bits()));
        assert_eq!(moments(&Sequences { symbols: vec![2.5; 70_000], offsets: vec![0, 70_000] }), (2.5, 0.0));
        assert_eq!(moments(&Sequences { symbols: Vec::new(), offsets: vec![0] }), (0.0, 0.0));
    }
}
