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
//! Each step also reports whether a positive unscaled value fell below the
//! tables' `theta`: then the next step could underflow, and the sequence is
//! computed in log space instead (see [`super::tables::Tables::theta`]).

use super::tables::Tables;

/// One step: `next = (prev A) .* e`; returns the sum of `next` (unscaled)
/// and whether a positive entry of `next` is below `theta`.
#[inline]
pub(crate) fn step(tab: &Tables, prev: &[f64], e: &[f64], next: &mut [f64]) -> (f64, bool) {
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
    let (mut sum, mut small) = (0.0, false);
    for (x, &p) in next.iter_mut().zip(e) {
        *x *= p;
        sum += *x;
        small |= (*x > 0.0) & (*x < tab.theta);
    }
    (sum, small)
}

/// `alpha_1` unscaled; returns its sum and the `theta` verdict, as [`step`].
#[inline]
pub(crate) fn first(tab: &Tables, o: u32, out: &mut [f64]) -> (f64, bool) {
    let (mut sum, mut small) = (0.0, false);
    for ((x, &p), &e) in out.iter_mut().zip(&tab.start).zip(tab.emis_of(o)) {
        *x = p * e;
        sum += *x;
        small |= (*x > 0.0) & (*x < tab.theta);
    }
    (sum, small)
}

#[inline]
pub(crate) fn rescale(x: &mut [f64], sum: f64) {
    let r = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= r);
}
