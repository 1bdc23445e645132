//! The scaled forward recursion (Rabiner): alpha_hat_t sums to 1, the
//! scale c_t = P(o_t | o_1..o_{t-1}), and log P(O) = sum_t log c_t, summed
//! in double. A zero scale means the sequence is impossible: -inf.
//!
//! ```text
//! alpha_1(j) = pi_j B_j(o_1)
//! alpha_t(j) = [sum_i alpha_hat_{t-1}(i) A_ij] B_j(o_t)
//! c_t = sum_j alpha_t(j),   alpha_hat_t = alpha_t / c_t
//! ```
//!
//! Each step also reports the smallest positive unscaled value, which the
//! tables' certificate reads (see [`super::tables::Certificate`]): a
//! sequence it cannot certify is computed in log space instead.
//!
//! The emission enters through its linear rows only: e = B(o_t) divided by
//! a factor the caller adds back (in log) to the log-likelihood.

use super::emission::Emission;
use super::tables::Tables;

/// One step: `next = (prev A) .* e`; returns the sum of `next` (unscaled)
/// and its smallest positive entry (+inf where none).
#[inline]
pub(crate) fn step<E: Emission>(tab: &Tables<E>, prev: &[f64], e: &[f64], next: &mut [f64]) -> (f64, f64) {
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
    let (mut sum, mut min) = (0.0, f64::INFINITY);
    for (x, &p) in next.iter_mut().zip(e) {
        *x *= p;
        sum += *x;
        min = if *x > 0.0 && *x < min { *x } else { min };
    }
    (sum, min)
}

/// `alpha_1` unscaled from the emission row `e`; returns its sum and
/// smallest positive entry, as [`step`].
#[inline]
pub(crate) fn first<E: Emission>(tab: &Tables<E>, e: &[f64], out: &mut [f64]) -> (f64, f64) {
    let (mut sum, mut min) = (0.0, f64::INFINITY);
    for ((x, &p), &e) in out.iter_mut().zip(&tab.start).zip(e) {
        *x = p * e;
        sum += *x;
        min = if *x > 0.0 && *x < min { *x } else { min };
    }
    (sum, min)
}

#[inline]
pub(crate) fn rescale(x: &mut [f64], sum: f64) {
    let r = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= r);
}
