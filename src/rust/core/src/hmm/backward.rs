//! The scaled backward recursion, with the same scales as the forward pass,
//! giving posterior state probabilities and Baum-Welch expected counts.
//!
//! ```text
//! beta_hat_T = 1
//! beta_hat_t(i) = sum_j A_ij B_j(o_{t+1}) beta_hat_{t+1}(j) / c_{t+1}
//! gamma_t(i) = alpha_hat_t(i) beta_hat_t(i)                 (sums to 1)
//! xi_t(i,j) = alpha_hat_t(i) A_ij B_j(o_{t+1}) beta_hat_{t+1}(j) / c_{t+1}
//! ```

use super::tables::Tables;

/// Expected counts of one or many sequences under the current model.
/// `trans_raw[i * N + j]` is sum_t alpha_hat_t(i) B_j(o_{t+1}) beta_hat_{t+1}(j) / c_{t+1}:
/// the factor A_ij, the same for every term, is applied once in the M-step.
#[derive(Debug, Clone, PartialEq)]
pub struct Counts {
    pub start: Vec<f64>,
    pub trans_raw: Vec<f64>,
    /// By symbol: `emis[k * N + i]` = expected number of times state i emitted k.
    pub emis: Vec<f64>,
}

impl Counts {
    pub fn zeros(n: usize, v: usize) -> Self {
        Counts { start: vec![0.0; n], trans_raw: vec![0.0; n * n], emis: vec![0.0; v * n] }
    }

    pub fn add(&mut self, other: &Counts) {
        let pairs = [(&mut self.start, &other.start), (&mut self.trans_raw, &other.trans_raw), (&mut self.emis, &other.emis)];
        for (a, b) in pairs {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        }
    }

    /// Doubles held, for sizing per-chunk accumulators.
    pub fn size(n: usize, v: usize) -> usize {
        n + n * n + n * v
    }
}

/// Run the backward pass over a sequence whose forward pass filled `alpha`
/// and `scale` (log-likelihood finite). `gamma(t, g)` receives each
/// posterior row, from t = T-1 down to 0; with `xi` the transition counts
/// are accumulated too. `buf` is scratch (3N values).
pub fn backward(
    tab: &Tables,
    seq: &[u32],
    alpha: &[f64],
    scale: &[f64],
    buf: &mut Vec<f64>,
    mut xi: Option<&mut [f64]>,
    mut gamma: impl FnMut(usize, &[f64]),
) {
    let n = tab.n;
    let t_len = seq.len();
    buf.resize(3 * n, 0.0);
    let (beta, rest) = buf.split_at_mut(n);
    let (tmp, g) = rest.split_at_mut(n);
    beta.fill(1.0);
    g.copy_from_slice(&alpha[(t_len - 1) * n..t_len * n]);
    gamma(t_len - 1, g);
    for t in (0..t_len - 1).rev() {
        let e = tab.emis_of(seq[t + 1]);
        let r = 1.0 / scale[t + 1];
        for j in 0..n {
            tmp[j] = e[j] * beta[j] * r;
        }
        let a_t = &alpha[t * n..(t + 1) * n];
        if let Some(xi) = xi.as_deref_mut() {
            for (i, &a) in a_t.iter().enumerate() {
                if a != 0.0 {
                    for (x, &w) in xi[i * n..(i + 1) * n].iter_mut().zip(tmp.iter()) {
                        *x += a * w;
                    }
                }
            }
        }
        for i in 0..n {
            let row = &tab.trans[i * n..(i + 1) * n];
            beta[i] = row.iter().zip(tmp.iter()).map(|(p, w)| p * w).sum();
            g[i] = a_t[i] * beta[i];
        }
        gamma(t, g);
    }
}

/// Add one sequence's expected counts to `counts` (forward pass done).
pub fn add_counts(tab: &Tables, seq: &[u32], alpha: &[f64], scale: &[f64], buf: &mut Vec<f64>, counts: &mut Counts) {
    let n = tab.n;
    let Counts { start, trans_raw, emis } = counts;
    backward(tab, seq, alpha, scale, buf, Some(trans_raw), |t, g| {
        let k = seq[t] as usize;
        emis[k * n..(k + 1) * n].iter_mut().zip(g).for_each(|(x, y)| *x += y);
        if t == 0 {
            start.iter_mut().zip(g).for_each(|(x, y)| *x += y);
        }
    });
}
