//! The model in the layouts the recursions read: one contiguous row per
//! time step, logs precomputed once per call for Viterbi, and (built only
//! when a sequence needs them) the tables of the log-space passes.

use std::sync::OnceLock;

use crate::error::Result;
use crate::memory;

use super::model::HmmModel;
use super::robust::{LogSpace, SAFE_MIN};

/// Linear-space tables for the forward-backward recursions.
pub struct Tables {
    pub n: usize,
    pub v: usize,
    pub start: Vec<f64>,
    /// Row-major N x N, `trans[i * N + j]` = P(j | i).
    pub trans: Vec<f64>,
    /// By symbol, `emis[k * N + i]` = P(k | i).
    pub emis: Vec<f64>,
    /// The certificate of the scaled recursions: while every positive
    /// unscaled forward value stays at or above `theta`, no product of the
    /// next step underflows (each is at least [`SAFE_MIN`]), so the scaled
    /// pass is exact to rounding. A sequence whose pass produces a positive
    /// value below `theta` is computed again in log space
    /// ([`super::robust`]); `theta > 1` (a model whose positive
    /// probabilities multiply to less than `SAFE_MIN`) sends every sequence
    /// there. The GPU kernels apply the same test.
    pub theta: f64,
    log_space: OnceLock<Result<LogSpace>>,
}

impl Tables {
    pub fn new(m: &HmmModel) -> Result<Self> {
        let (n, v) = (m.n_states, m.n_symbols);
        let mut trans = memory::try_with_capacity(n * n, "the transition matrix")?;
        trans.extend_from_slice(&m.trans);
        let mut start = memory::try_with_capacity(n, "the start probabilities")?;
        start.extend_from_slice(&m.start);
        Ok(Tables { n, v, start, trans, emis: m.emis_by_symbol()?, theta: theta(m), log_space: OnceLock::new() })
    }

    /// Emission probabilities of symbol `k` for every state.
    #[inline]
    pub fn emis_of(&self, k: u32) -> &[f64] {
        let k = k as usize;
        &self.emis[k * self.n..(k + 1) * self.n]
    }

    /// Whether every sequence must take the log-space passes (`theta > 1`).
    pub fn extreme(&self) -> bool {
        self.theta > 1.0
    }

    /// The log-space tables, built on first use (once per call).
    pub(crate) fn log_space(&self) -> Result<&LogSpace> {
        self.log_space.get_or_init(|| LogSpace::new(self)).as_ref().map_err(|e| e.clone())
    }
}

/// `theta` of a model: SAFE_MIN / (smallest positive start or transition
/// probability x smallest positive emission probability). Exact zeros are
/// legal and never count.
pub fn theta(m: &HmmModel) -> f64 {
    theta_of(smallest(m))
}

/// `theta` from [`smallest`]'s pair (as kernels/hmm.cu, hmm_theta, computes it).
pub(crate) fn theta_of((a, e): (f64, f64)) -> f64 {
    let phi = a * e;
    if phi > 0.0 && phi.is_finite() { SAFE_MIN / phi } else { f64::INFINITY }
}

/// The smallest positive start-or-transition and emission probabilities
/// (+inf where none), from which `theta` is computed.
pub(crate) fn smallest(m: &HmmModel) -> (f64, f64) {
    // A select, not f64::min (which orders NaNs): one vectorised pass.
    let min_pos = |x: &[f64]| x.iter().fold(f64::INFINITY, |m, &p| if p > 0.0 && p < m { p } else { m });
    (min_pos(&m.start).min(min_pos(&m.trans)), min_pos(&m.emis))
}

/// Log-space tables for Viterbi; log(0) = -inf is legal and never meets +inf,
/// so no NaN can arise.
pub struct LogTables {
    pub n: usize,
    pub start: Vec<f64>,
    /// Transposed, `trans_t[j * N + i]` = log P(j | i): the max over
    /// predecessors i of state j reads one contiguous row.
    pub trans_t: Vec<f64>,
    /// By symbol, `emis[k * N + i]` = log P(k | i).
    pub emis: Vec<f64>,
}

impl LogTables {
    pub fn new(m: &HmmModel) -> Result<Self> {
        let n = m.n_states;
        let mut trans_t = memory::try_vec(n * n, 0.0, "the log transition matrix")?;
        for i in 0..n {
            for j in 0..n {
                trans_t[j * n + i] = m.trans[i * n + j].ln();
            }
        }
        let mut emis = m.emis_by_symbol()?;
        emis.iter_mut().for_each(|p| *p = p.ln());
        Ok(LogTables { n, start: m.start.iter().map(|p| p.ln()).collect(), trans_t, emis })
    }

    #[inline]
    pub fn emis_of(&self, k: u32) -> &[f64] {
        let k = k as usize;
        &self.emis[k * self.n..(k + 1) * self.n]
    }
}
