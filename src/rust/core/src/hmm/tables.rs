//! The model in the layouts the recursions read: the emission's rows (one
//! per time step), logs precomputed once per call for Viterbi, the
//! certificate of the scaled recursions, and (built only when a sequence
//! needs them) the tables of the log-space passes.

use std::sync::OnceLock;

use crate::error::Result;
use crate::memory;

use super::emission::{Categorical, Emission, Rows, Space};
use super::model::HmmModel;
use super::robust::{LogSpace, SAFE_MIN};

/// Transitions at least this large everywhere (2^-300) make a scaled
/// recursion over normalised rows exact whatever underflows (see
/// [`Certificate::Dense`]).
pub(crate) const DENSE_MIN: f64 = f64::from_bits((1023 - 300) << 52);

/// How the scaled recursions certify a sequence: while the test holds at
/// every step, no product of the pass loses more than rounding, and the
/// pass is exact; a sequence that fails it is computed again in log space
/// ([`super::robust`]). The GPU kernels apply the same tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Certificate {
    /// Categorical rows: every positive unscaled forward value stays at or
    /// above theta = SAFE_MIN / (smallest positive start or transition
    /// probability x smallest positive emission probability), so no product
    /// of the next step is below [`SAFE_MIN`]. theta > 1 (a model whose
    /// positive probabilities multiply below SAFE_MIN) sends every sequence
    /// to log space.
    Theta(f64),
    /// Normalised rows (largest value 1) and every transition at least
    /// [`DENSE_MIN`]: after the first step, every entry of (previous
    /// vector) x A is at least DENSE_MIN, so each step's sum is too, and a
    /// value lost to underflow (below 2^-1022) changes every later value by
    /// a relative 2^-700 at most. Only the first step (start x emission,
    /// where the likeliest state may have start probability 0) is checked:
    /// its sum must be at least DENSE_MIN.
    Dense,
    /// Normalised rows, some transition smaller (or zero): every step checks
    /// that its smallest product, (smallest positive previous value) x
    /// `min_trans` x (smallest value of a positive density in the row), is
    /// at least SAFE_MIN.
    Steps { min_trans: f64 },
}

/// Linear-space tables for the forward-backward recursions.
pub struct Tables<E: Emission = Categorical> {
    pub n: usize,
    pub start: Vec<f64>,
    /// Row-major N x N, `trans[i * N + j]` = P(j | i).
    pub trans: Vec<f64>,
    /// The emission's linear rows.
    pub rows: E::Rows,
    pub certificate: Certificate,
    /// The smallest positive start probability.
    pub min_start: f64,
    pub emission: E,
    log_space: OnceLock<Result<LogSpace<E>>>,
}

impl<E: Emission> Tables<E> {
    pub fn new(m: &HmmModel<E>) -> Result<Self> {
        let n = m.n_states;
        let mut trans = memory::try_with_capacity(n * n, "the transition matrix")?;
        trans.extend_from_slice(&m.trans);
        let mut start = memory::try_with_capacity(n, "the start probabilities")?;
        start.extend_from_slice(&m.start);
        let rows = m.emission.rows(Space::Linear)?;
        let certificate = if rows.normalised() {
            normalised_certificate(&m.trans)
        } else {
            Certificate::Theta(theta_of((min_positive(&m.start).min(min_positive(&m.trans)), rows.smallest())))
        };
        Ok(Tables { n, start, trans, rows, certificate, min_start: min_positive(&m.start), emission: m.emission.clone(), log_space: OnceLock::new() })
    }

    /// Whether every sequence must take the log-space passes.
    pub fn extreme(&self) -> bool {
        matches!(self.certificate, Certificate::Theta(t) if t > 1.0)
    }

    /// The log-space tables, built on first use (once per call).
    pub(crate) fn log_space(&self) -> Result<&LogSpace<E>> {
        self.log_space.get_or_init(|| LogSpace::new(self)).as_ref().map_err(|e| e.clone())
    }
}

/// The certificate of normalised rows (a density's) with transitions
/// `trans`: dense or not.
pub(crate) fn normalised_certificate(trans: &[f64]) -> Certificate {
    if trans.iter().all(|&p| p >= DENSE_MIN) { Certificate::Dense } else { Certificate::Steps { min_trans: min_positive(trans) } }
}

/// The smallest positive value (+inf where none). A select, not f64::min
/// (which orders NaNs): one vectorised pass per chunk, chunks in parallel
/// (a model at N = 512 has half a million probabilities).
pub(crate) fn min_positive(x: &[f64]) -> f64 {
    use rayon::prelude::*;
    let min = |c: &[f64]| c.iter().fold(f64::INFINITY, |m, &p| if p > 0.0 && p < m { p } else { m });
    if x.len() < PAR_MIN {
        return min(x);
    }
    x.par_chunks(PAR_MIN).map(min).reduce(|| f64::INFINITY, f64::min)
}

/// Values below which a table is prepared on one thread.
const PAR_MIN: usize = 1 << 14;

/// The `rows` x `cols` row-major matrix `a` transposed (`out[c * rows + r]
/// = f(a[r * cols + c])`): in 32 x 32 tiles (row by row, the writes of a
/// large matrix would each touch another cache line), blocks of output rows
/// in parallel.
pub(crate) fn transpose_map(a: &[f64], rows: usize, cols: usize, f: impl Fn(f64) -> f64 + Sync) -> Result<Vec<f64>> {
    use rayon::prelude::*;
    const B: usize = 32;
    let mut t = memory::try_vec(rows * cols, 0.0, "a transposed table")?;
    let block = |(cb, out): (usize, &mut [f64])| {
        let c0 = cb * B;
        for r0 in (0..rows).step_by(B) {
            for c in c0..(c0 + B).min(cols) {
                for r in r0..(r0 + B).min(rows) {
                    out[(c - c0) * rows + r] = f(a[r * cols + c]);
                }
            }
        }
    };
    if rows * cols < PAR_MIN {
        t.chunks_mut(B * rows.max(1)).enumerate().for_each(block);
    } else {
        t.par_chunks_mut(B * rows.max(1)).enumerate().for_each(block);
    }
    Ok(t)
}

/// `theta` of a categorical model (see [`Certificate::Theta`]); exact zeros
/// are legal and never count.
pub fn theta(m: &HmmModel) -> f64 {
    theta_of(smallest(m))
}

/// `theta` from [`smallest`]'s pair (as kernels/hmm.cu, hmm_theta, computes it).
pub(crate) fn theta_of((a, e): (f64, f64)) -> f64 {
    let phi = a * e;
    if phi > 0.0 && phi.is_finite() { SAFE_MIN / phi } else { f64::INFINITY }
}

/// The smallest positive start-or-transition and emission probabilities of
/// a categorical model (+inf where none), from which `theta` is computed.
pub(crate) fn smallest(m: &HmmModel) -> (f64, f64) {
    (min_positive(&m.start).min(min_positive(&m.trans)), m.emission.smallest())
}

/// Log-space tables for Viterbi; log(0) = -inf is legal and never meets +inf,
/// so no NaN can arise.
pub struct LogTables<E: Emission = Categorical> {
    pub n: usize,
    pub start: Vec<f64>,
    /// Transposed, `trans_t[j * N + i]` = log P(j | i): the max over
    /// predecessors i of state j reads one contiguous row.
    pub trans_t: Vec<f64>,
    /// The emission's log rows.
    pub rows: E::Rows,
}

impl<E: Emission> LogTables<E> {
    pub fn new(m: &HmmModel<E>) -> Result<Self> {
        let n = m.n_states;
        let trans_t = transpose_map(&m.trans, n, n, f64::ln)?;
        Ok(LogTables { n, start: m.start.iter().map(|p| p.ln()).collect(), trans_t, rows: m.emission.rows(Space::Log)? })
    }
}
