//! The scaled forward recursion (Rabiner): alpha_hat_t sums to 1, the
//! scale c_t = P(o_t | o_1..o_{t-1}), and log P(O) = sum_t log c_t, summed
//! in double. A zero scale means the sequence is impossible: -inf.
//!
//! ```text
//! alpha_1(j) = pi_j B_j(o_1)
//! alpha_t(j) = [sum_i alpha_hat_{t-1}(i) A_ij] B_j(o_t)
//! c_t = sum_j alpha_t(j),   alpha_hat_t = alpha_t / c_t
//! ```

use super::tables::Tables;

/// One step: `next = (prev A) .* e`; returns the sum of `next` (unscaled).
#[inline]
pub(crate) fn step(tab: &Tables, prev: &[f64], e: &[f64], next: &mut [f64]) -> f64 {
    let n = tab.n;
    next.fill(0.0);
    for (i, &a) in prev.iter().enumerate() {
        if a != 0.0 {
            let row = &tab.trans[i * n..(i + 1) * n];
            for (x, &p) in next.iter_mut().zip(row) {
                *x += a * p;
            }
        }
    }
    let mut sum = 0.0;
    for (x, &p) in next.iter_mut().zip(e) {
        *x *= p;
        sum += *x;
    }
    sum
}

/// `alpha_1` unscaled; returns its sum.
#[inline]
pub(crate) fn first(tab: &Tables, o: u32, out: &mut [f64]) -> f64 {
    let mut sum = 0.0;
    for ((x, &p), &e) in out.iter_mut().zip(&tab.start).zip(tab.emis_of(o)) {
        *x = p * e;
        sum += *x;
    }
    sum
}

#[inline]
fn rescale(x: &mut [f64], sum: f64) {
    let r = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= r);
}

/// log P(seq) with O(N) memory: `buf` holds 2N values.
pub fn loglik(tab: &Tables, seq: &[u32], buf: &mut Vec<f64>) -> f64 {
    let n = tab.n;
    buf.resize(2 * n, 0.0);
    let (mut cur, mut nxt) = buf.split_at_mut(n);
    let c = first(tab, seq[0], cur);
    if c == 0.0 {
        return f64::NEG_INFINITY;
    }
    rescale(cur, c);
    let mut ll = c.ln();
    for &o in &seq[1..] {
        let c = step(tab, cur, tab.emis_of(o), nxt);
        if c == 0.0 {
            return f64::NEG_INFINITY;
        }
        rescale(nxt, c);
        ll += c.ln();
        std::mem::swap(&mut cur, &mut nxt);
    }
    ll
}

/// The forward pass keeping every scaled alpha (`alpha`: T x N, time-major)
/// and scale (`scale`: T), as the backward pass needs them. Returns log P(seq),
/// or -inf (the buffers then hold garbage after the impossible step).
pub fn forward_all(tab: &Tables, seq: &[u32], alpha: &mut Vec<f64>, scale: &mut Vec<f64>) -> f64 {
    let (n, t_len) = (tab.n, seq.len());
    alpha.resize(t_len * n, 0.0);
    scale.resize(t_len, 0.0);
    let c = first(tab, seq[0], &mut alpha[..n]);
    if c == 0.0 {
        return f64::NEG_INFINITY;
    }
    rescale(&mut alpha[..n], c);
    scale[0] = c;
    let mut ll = c.ln();
    for t in 1..t_len {
        let (done, rest) = alpha.split_at_mut(t * n);
        let c = step(tab, &done[(t - 1) * n..], tab.emis_of(seq[t]), &mut rest[..n]);
        if c == 0.0 {
            return f64::NEG_INFINITY;
        }
        rescale(&mut rest[..n], c);
        scale[t] = c;
        ll += c.ln();
    }
    ll
}
