//! The scaled backward recursion, with the same scales as the forward pass,
//! giving posterior state probabilities and Baum-Welch expected counts.
//!
//! ```text
//! beta_hat_T = 1
//! beta_hat_t(i) = sum_j A_ij B_j(o_{t+1}) beta_hat_{t+1}(j) / c_{t+1}
//! gamma_t(i) = alpha_hat_t(i) beta_hat_t(i)                 (sums to 1)
//! xi_t(i,j) = alpha_hat_t(i) A_ij B_j(o_{t+1}) beta_hat_{t+1}(j) / c_{t+1}
//! ```
//!
//! beta_hat_t(i) is set to 0 where alpha_hat_t(i) = 0: such a state
//! contributes to no posterior or count (every path through it has
//! probability 0), but its beta can grow without bound (a state the data
//! would favour but cannot reach: 2^2000 after 2000 steps), and 0 x inf
//! would turn posteriors and counts into NaN.

use crate::error::Result;
use crate::memory;

use super::emission::{Emission, Rows};
use super::tables::Tables;

/// Expected counts of one or many sequences under the current model.
/// `trans_raw[i * N + j]` is sum_t alpha_hat_t(i) B_j(o_{t+1}) beta_hat_{t+1}(j) / c_{t+1}:
/// the factor A_ij, the same for every term, is applied once in the M-step.
/// `trans` holds transition counts with that factor applied (the log-space
/// passes' counts; empty until one adds to it).
#[derive(Debug, Clone, PartialEq)]
pub struct Counts {
    pub start: Vec<f64>,
    pub trans_raw: Vec<f64>,
    pub trans: Vec<f64>,
    /// The emission's sufficient statistics, `emis[k * N + i]` = sum over
    /// time of P(state i at t) phi_k(o_t) (categorical: expected number of
    /// times state i emitted symbol k).
    pub emis: Vec<f64>,
}

impl Counts {
    /// Zero counts of N states and `v` emission statistics per state.
    pub fn zeros(n: usize, v: usize) -> Result<Self> {
        Ok(Counts {
            start: vec![0.0; n],
            trans_raw: memory::try_vec(n * n, 0.0, "the transition counts")?,
            trans: Vec::new(),
            emis: memory::try_vec(v * n, 0.0, "the emission counts")?,
        })
    }

    pub fn add(&mut self, other: &Counts) {
        if !other.trans.is_empty() {
            self.exact_transitions();
        }
        let pairs = [(&mut self.start, &other.start), (&mut self.trans_raw, &other.trans_raw), (&mut self.trans, &other.trans), (&mut self.emis, &other.emis)];
        for (a, b) in pairs {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        }
    }

    /// `trans`, allocated (zeros) on first use.
    pub fn exact_transitions(&mut self) -> &mut [f64] {
        if self.trans.is_empty() {
            self.trans = vec![0.0; self.trans_raw.len()];
        }
        &mut self.trans
    }

    /// Expected transitions i -> j of a model with transitions `a`.
    pub fn transitions(&self, a: &[f64], i: usize, j: usize) -> f64 {
        let n = self.start.len();
        let k = i * n + j;
        // A zero transition has no count, whatever its raw sum (which can be
        // huge: 0 x inf would be NaN).
        let raw = if a[k] > 0.0 { a[k] * self.trans_raw[k] } else { 0.0 };
        raw + self.trans.get(k).copied().unwrap_or(0.0)
    }

    /// Doubles held in the device layout (start, trans_raw, emis).
    pub fn size(n: usize, v: usize) -> usize {
        n + n * n + n * v
    }
}

/// The backward step to t after the forward pass: `row` holds alpha_hat_t
/// and becomes the posterior of t; `beta` holds beta_hat_{t+1} and becomes
/// beta_hat_t; `next` is (o_{t+1}, c_{t+1}), or None at the last step;
/// `tmp` and `buf` are scratch (N values). With `counts`, the raw transition
/// counts of (t, t+1) and the emission statistics (and, at t = 0, start
/// counts) of t are added.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn back<E: Emission>(
    tab: &Tables<E>,
    t: usize,
    o: E::Obs,
    next: Option<(E::Obs, f64)>,
    row: &mut [f64],
    beta: &mut [f64],
    tmp: &mut Vec<f64>,
    buf: &mut [f64],
    counts: Option<&mut Counts>,
) {
    let n = tab.n;
    let mut counts = counts;
    match next {
        None => {
            // beta = 1: the posterior is alpha.
            beta.fill(1.0);
        }
        Some((o_next, c)) => {
            let e = tab.rows.row(o_next, buf).values;
            let r = 1.0 / c;
            tmp.resize(n, 0.0);
            for j in 0..n {
                tmp[j] = e[j] * beta[j] * r;
            }
            if let Some(counts) = counts.as_deref_mut() {
                for (i, &a) in row.iter().enumerate() {
                    if a != 0.0 {
                        for (x, &w) in counts.trans_raw[i * n..(i + 1) * n].iter_mut().zip(tmp.iter()) {
                            *x += a * w;
                        }
                    }
                }
            }
            for i in 0..n {
                let a = row[i];
                let b = if a == 0.0 { 0.0 } else { tab.trans[i * n..(i + 1) * n].iter().zip(tmp.iter()).map(|(p, w)| p * w).sum() };
                beta[i] = b;
                row[i] = a * b;
            }
        }
    }
    if let Some(counts) = counts {
        tab.emission.add_stats(o, row, &mut counts.emis);
        if t == 0 {
            counts.start.iter_mut().zip(row.iter()).for_each(|(x, y)| *x += y);
        }
    }
}
