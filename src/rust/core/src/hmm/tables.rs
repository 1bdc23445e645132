//! The model in the layouts the recursions read: one contiguous row per
//! time step, logs precomputed once per call for Viterbi.

use super::model::HmmModel;

/// Linear-space tables for the forward-backward recursions.
pub struct Tables {
    pub n: usize,
    pub v: usize,
    pub start: Vec<f64>,
    /// Row-major N x N, `trans[i * N + j]` = P(j | i).
    pub trans: Vec<f64>,
    /// By symbol, `emis[k * N + i]` = P(k | i).
    pub emis: Vec<f64>,
}

impl Tables {
    pub fn new(m: &HmmModel) -> Self {
        Tables { n: m.n_states, v: m.n_symbols, start: m.start.clone(), trans: m.trans.clone(), emis: m.emis_by_symbol() }
    }

    /// Emission probabilities of symbol `k` for every state.
    #[inline]
    pub fn emis_of(&self, k: u32) -> &[f64] {
        let k = k as usize;
        &self.emis[k * self.n..(k + 1) * self.n]
    }
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
    pub fn new(m: &HmmModel) -> Self {
        let n = m.n_states;
        let mut trans_t = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                trans_t[j * n + i] = m.trans[i * n + j].ln();
            }
        }
        LogTables {
            n,
            start: m.start.iter().map(|p| p.ln()).collect(),
            trans_t,
            emis: m.emis_by_symbol().iter().map(|p| p.ln()).collect(),
        }
    }

    #[inline]
    pub fn emis_of(&self, k: u32) -> &[f64] {
        let k = k as usize;
        &self.emis[k * self.n..(k + 1) * self.n]
    }
}
