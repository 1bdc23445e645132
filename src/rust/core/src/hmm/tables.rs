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
    match min_positive_and_dense(trans) {
        (_, true) => Certificate::Dense,
        (min_trans, false) => Certificate::Steps { min_trans },
    }
}

/// The smallest positive value (+inf where none). A select, not f64::min
/// (which orders NaNs): one vectorised pass per chunk, chunks in parallel
/// (a model at N = 512 has half a million probabilities).
pub(crate) fn min_positive(x: &[f64]) -> f64 {
    min_positive_and_dense(x).0
}

/// [`min_positive`] of `x`, and whether every value is at least
/// [`DENSE_MIN`] (NaN is not), in one pass: eight running minima of the
/// values with the others as +inf (and of 0 or +inf for the test), so the
/// loop has no branch and vectorises. One running minimum with a branch
/// took 0.41 ms for 512^2 values on one thread of the dev VM, this 0.11.
pub(crate) fn min_positive_and_dense(x: &[f64]) -> (f64, bool) {
    use rayon::prelude::*;
    let pass = |c: &[f64]| {
        let (mut low, mut thin) = ([f64::INFINITY; 8], [f64::INFINITY; 8]);
        let mut eights = c.chunks_exact(8);
        for e in &mut eights {
            for k in 0..8 {
                let p = if e[k] > 0.0 { e[k] } else { f64::INFINITY };
                low[k] = if p < low[k] { p } else { low[k] };
                thin[k] = if e[k] >= DENSE_MIN { thin[k] } else { 0.0 };
            }
        }
        let rest = eights.remainder();
        let low = rest.iter().chain(&low).fold(f64::INFINITY, |m, &p| if p > 0.0 && p < m { p } else { m });
        (low, thin.iter().all(|&t| t > 0.0) && rest.iter().all(|&p| p >= DENSE_MIN))
    };
    if x.len() < PAR_MIN {
        return pass(x);
    }
    x.par_chunks(PAR_MIN).map(pass).reduce(|| (f64::INFINITY, true), |a, b| (a.0.min(b.0), a.1 && b.1))
}

/// Values below which a table is prepared on one thread.
const PAR_MIN: usize = 1 << 14;

/// A `rows` x `cols` matrix held column by column (as R holds it) as the
/// core holds it, row by row: the transpose made here, in parallel tiles,
/// where R's `t()` cost a copy on one thread and the garbage it leaves (1.6
/// ms a 512 x 512 matrix on the development VM, twice per HMM call). None
/// when `a` is not rows x cols long.
pub fn row_major(a: &[f64], rows: usize, cols: usize) -> Option<Result<Vec<f64>>> {
    (rows.checked_mul(cols) == Some(a.len())).then(|| transpose_map(a, cols, rows, |x| x))
}

/// The `rows` x `cols` row-major matrix `a` transposed (`out[c * rows + r]
/// = f(a[r * cols + c])`): in 32 x 32 tiles (row by row, the writes of a
/// large matrix would each touch another cache line), blocks of output rows
/// in parallel, each written once straight into fresh memory (a zero fill
/// first, on one thread, cost 0.3-1.0 ms of a 512 x 512 table's 2 MB on
/// an H200's host: its pages mapped one by one).
pub(crate) fn transpose_map(a: &[f64], rows: usize, cols: usize, f: impl Fn(f64) -> f64 + Sync) -> Result<Vec<f64>> {
    use rayon::prelude::*;
    use std::mem::MaybeUninit;
    const B: usize = 32;
    let n = rows * cols;
    assert!(a.len() >= n, "a {rows} x {cols} table holds its values");
    let mut t: Vec<f64> = memory::try_with_capacity(n, "a transposed table")?;
    let block = |(cb, out): (usize, &mut [MaybeUninit<f64>])| {
        let c0 = cb * B;
        for r0 in (0..rows).step_by(B) {
            for c in c0..(c0 + B).min(cols) {
                for r in r0..(r0 + B).min(rows) {
                    out[(c - c0) * rows + r].write(f(a[r * cols + c]));
                }
            }
        }
    };
    let spare = &mut t.spare_capacity_mut()[..n];
    if n < PAR_MIN {
        spare.chunks_mut(B * rows.max(1)).enumerate().for_each(block);
    } else {
        memory::advise_huge_pages(spare.as_mut_ptr().cast(), n * 8);
        spare.par_chunks_mut(B * rows.max(1)).enumerate().for_each(block);
    }
    // SAFETY: chunk cb holds output rows (columns of `a`) cb B .. cb B + B,
    // and the block writes each of them for every r: all n values are
    // written above.
    unsafe { t.set_len(n) };
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
    let (trans, emis) = rayon::join(|| min_positive(&m.trans), || m.emission.smallest());
    (min_positive(&m.start).min(trans), emis)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_reads_r_matrices_column_by_column() {
        // R's matrix(1:6, 2): rows (1, 3, 5) and (2, 4, 6); and tables on
        // many threads (past PAR_MIN) against the plain index formula.
        let a: Vec<f64> = (1..=6).map(f64::from).collect();
        assert_eq!(row_major(&a, 2, 3).unwrap().unwrap(), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
        assert!(row_major(&a, 2, 2).is_none() && row_major(&a, 4, 2).is_none());
        for (rows, cols) in [(300usize, 70usize), (1, 40_000), (40_000, 1), (129, 129)] {
            let a: Vec<f64> = (0..rows * cols).map(|k| k as f64).collect();
            let t = row_major(&a, rows, cols).unwrap().unwrap();
            assert!((0..rows).all(|r| (0..cols).all(|c| t[r * cols + c] == a[c * rows + r])), "{rows} x {cols}");
        }
        assert!(row_major(&[], 0, 5).unwrap().unwrap().is_empty());
    }

    #[test]
    fn min_positive_is_the_smallest_positive_value_at_every_length() {
        let naive = |x: &[f64]| x.iter().fold(f64::INFINITY, |m, &p| if p > 0.0 && p < m { p } else { m });
        let mut state = 7u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            match state >> 60 {
                0 => 0.0,
                1 => f64::NAN,
                2 => -1.0,
                3 => 5e-324,
                _ => (state >> 11) as f64 / (1u64 << 53) as f64,
            }
        };
        for len in (0..40).chain([PAR_MIN - 1, PAR_MIN + 9, 3 * PAR_MIN + 5]) {
            let x: Vec<f64> = (0..len).map(|_| next()).collect();
            assert_eq!(min_positive(&x).to_bits(), naive(&x).to_bits(), "length {len}");
        }
        assert_eq!(min_positive(&[0.0, f64::NAN, -2.0]), f64::INFINITY);
        for len in [1usize, 7, 8, 9, 17, PAR_MIN + 3] {
            for at in [0, len / 2, len - 1] {
                for odd in [DENSE_MIN / 2.0, 0.0, f64::NAN] {
                    let mut x = vec![0.5; len];
                    assert!(min_positive_and_dense(&x).1);
                    x[at] = odd;
                    assert!(!min_positive_and_dense(&x).1, "length {len}, {odd} at {at}");
                }
            }
        }
    }
}
