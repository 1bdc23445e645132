//! The log-space forward-backward passes, for the sequences the scaled
//! recursions cannot certify (see [`super::tables::Tables::theta`]):
//! probabilities that multiply below the double range (1e-310 emissions,
//! 1e-300 transitions), or a state whose filtered probability decays below
//! it and is needed again later (two "coins" with a diagonal transition
//! matrix: after 400 tosses of one coin the other's weight is 1e-382, and
//! the scaled pass, losing it, took log-likelihood -1885 for -1006).
//!
//! Vectors are normalised logs (log-sum-exp 0). The products with the
//! transition matrix are exact over any range and cost about one scaled
//! step: the states are grouped in bands of width 2^500 below the largest
//! weight, each band is one linear product with weights in (2^-500, 1], and
//! the bands' sums are added in log space. Transitions below 2^-500 are
//! kept apart (in log space), so every product of a band is at least
//! 2^-1000, a normal double. States beyond `MAX_BANDS` bands, and the
//! transition counts, are summed term by term in log space.

use crate::error::Result;
use crate::memory;

use super::backward::Counts;
use super::emission::{Emission, Rows, Space};
use super::tables::Tables;

/// Smallest product the scaled recursions certify (2^-960): far above the
/// subnormal range, so no term of a certified step loses a digit.
pub(crate) const SAFE_MIN: f64 = f64::from_bits((1023 - 960) << 52);
/// Transition probabilities below this (2^-500) are summed in log space.
const TINY: f64 = f64::from_bits((1023 - 500) << 52);
/// Width of a band in natural log units (500 ln 2).
const BAND: f64 = 500.0 * std::f64::consts::LN_2;
/// Bands summed as linear products; deeper states go term by term.
const MAX_BANDS: usize = 16;

/// The tables of the log-space passes (built once per call, when a
/// sequence first needs them).
pub(crate) struct LogSpace<E: Emission> {
    n: usize,
    lstart: Vec<f64>,
    /// The emission's log rows.
    lrows: E::Rows,
    /// The transitions with those below TINY set to 0 (`None`: there are
    /// none, and the linear tables' matrix is used).
    big: Option<Vec<f64>>,
    /// Transitions below TINY as (row, column, log): by column for the
    /// forward pass, by row for the backward pass (CSR).
    tiny_col_off: Vec<usize>,
    tiny_col: Vec<(u32, f64)>,
    tiny_row_off: Vec<usize>,
    tiny_row: Vec<(u32, f64)>,
}

impl<E: Emission> LogSpace<E> {
    pub(crate) fn new(tab: &Tables<E>) -> Result<Self> {
        let n = tab.n;
        let lrows = tab.emission.rows(Space::Log)?;
        let is_tiny = |p: f64| p > 0.0 && p < TINY;
        let (mut tiny_col_off, mut tiny_row_off) = (vec![0usize; n + 1], vec![0usize; n + 1]);
        let mut count = 0;
        for i in 0..n {
            for j in 0..n {
                if is_tiny(tab.trans[i * n + j]) {
                    tiny_col_off[j + 1] += 1;
                    tiny_row_off[i + 1] += 1;
                    count += 1;
                }
            }
        }
        let big = if count == 0 {
            None
        } else {
            let mut big = memory::try_with_capacity(n * n, "the transition matrix (log-space copy)")?;
            big.extend(tab.trans.iter().map(|&p| if is_tiny(p) { 0.0 } else { p }));
            Some(big)
        };
        for k in 0..n {
            tiny_col_off[k + 1] += tiny_col_off[k];
            tiny_row_off[k + 1] += tiny_row_off[k];
        }
        let mut tiny_col = memory::try_vec(count, (0u32, 0.0), "the smallest transitions")?;
        let mut tiny_row = memory::try_vec(count, (0u32, 0.0), "the smallest transitions")?;
        let (mut next_col, mut next_row) = (tiny_col_off.clone(), tiny_row_off.clone());
        for i in 0..n {
            for j in 0..n {
                let p = tab.trans[i * n + j];
                if is_tiny(p) {
                    tiny_col[next_col[j]] = (i as u32, p.ln());
                    next_col[j] += 1;
                    tiny_row[next_row[i]] = (j as u32, p.ln());
                    next_row[i] += 1;
                }
            }
        }
        Ok(LogSpace { n, lstart: tab.start.iter().map(|p| p.ln()).collect(), lrows, big, tiny_col_off, tiny_col, tiny_row_off, tiny_row })
    }

    fn big<'a>(&'a self, tab: &'a Tables<E>) -> &'a [f64] {
        self.big.as_deref().unwrap_or(&tab.trans)
    }
}

/// Scratch of the log-space passes (reused between sequences).
#[derive(Default)]
pub(crate) struct Scratch {
    band: Vec<u64>,
    levels: Vec<u64>,
    sums: Vec<f64>,
    weights: Vec<f64>,
    deep: Vec<usize>,
    v: Vec<f64>,
    /// An emission row.
    row: Vec<f64>,
}

impl Scratch {
    /// Doubles held for N states (for the memory estimate).
    pub(crate) fn doubles(n: usize) -> usize {
        (2 * MAX_BANDS + 5) * n
    }
}

/// log(exp(a) + exp(b)).
#[inline]
fn log_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY { hi } else { hi + (lo - hi).exp().ln_1p() }
}

/// log sum exp(x), -inf for an empty or all -inf `x`.
pub(crate) fn log_sum_exp(x: &[f64]) -> f64 {
    let top = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY {
        return top;
    }
    top + x.iter().map(|&y| (y - top).exp()).sum::<f64>().ln()
}

/// Subtract log_sum_exp(x) from x; returns it (-inf: x left as is).
fn normalise(x: &mut [f64]) -> f64 {
    let l = log_sum_exp(x);
    if l > f64::NEG_INFINITY {
        x.iter_mut().for_each(|y| *y -= l);
    }
    l
}

/// Band of every entry of `u` below its largest `top` (u64::MAX for -inf)
/// into `s.band`, the distinct bands ascending into `s.levels`.
fn bands(u: &[f64], top: f64, s: &mut Scratch) {
    s.band.clear();
    s.band.extend(u.iter().map(|&x| if x == f64::NEG_INFINITY { u64::MAX } else { ((top - x) / BAND) as u64 }));
    s.levels.clear();
    if s.band.iter().all(|&b| b == 0 || b == u64::MAX) {
        s.levels.push(0);
        return;
    }
    s.levels.extend(s.band.iter().copied().filter(|&b| b != u64::MAX));
    s.levels.sort_unstable();
    s.levels.dedup();
}

/// Add the log terms `ln S[k][j] + top - level_k * BAND` of the kept bands
/// for output `j`.
#[inline]
fn combine(s: &Scratch, kept: usize, n: usize, j: usize, top: f64) -> f64 {
    let mut out = f64::NEG_INFINITY;
    for k in 0..kept {
        let x = s.sums[k * n + j];
        if x > 0.0 {
            let term = x.ln() + top - s.levels[k] as f64 * BAND;
            out = if out == f64::NEG_INFINITY { term } else { log_add(out, term) };
        }
    }
    out
}

/// out_j = log sum_i exp(u_i) A_ij (the forward product).
fn product_forward<E: Emission>(ls: &LogSpace<E>, tab: &Tables<E>, u: &[f64], out: &mut [f64], s: &mut Scratch) {
    let n = ls.n;
    let top = u.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY {
        out.fill(f64::NEG_INFINITY);
        return;
    }
    bands(u, top, s);
    let kept = s.levels.len().min(MAX_BANDS);
    s.sums.clear();
    s.sums.resize(kept * n, 0.0);
    s.deep.clear();
    let a = ls.big(tab);
    for (i, &x) in u.iter().enumerate() {
        let b = s.band[i];
        if b == u64::MAX {
            continue;
        }
        let k = s.levels.partition_point(|&l| l < b);
        if k >= kept {
            s.deep.push(i);
            continue;
        }
        let w = (x - top + b as f64 * BAND).exp();
        let row = &a[i * n..(i + 1) * n];
        for (acc, &p) in s.sums[k * n..(k + 1) * n].iter_mut().zip(row) {
            *acc += w * p;
        }
    }
    for (j, o) in out.iter_mut().enumerate() {
        let mut y = combine(s, kept, n, j, top);
        for &(i, l) in &ls.tiny_col[ls.tiny_col_off[j]..ls.tiny_col_off[j + 1]] {
            y = log_add(y, u[i as usize] + l);
        }
        for &i in &s.deep {
            let p = tab.trans[i * n + j];
            if p >= TINY {
                y = log_add(y, u[i] + p.ln());
            }
        }
        *o = y;
    }
}

/// out_i = log sum_j A_ij exp(v_j) (the backward product).
fn product_backward<E: Emission>(ls: &LogSpace<E>, tab: &Tables<E>, v: &[f64], out: &mut [f64], s: &mut Scratch) {
    let n = ls.n;
    let top = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY {
        out.fill(f64::NEG_INFINITY);
        return;
    }
    bands(v, top, s);
    let kept = s.levels.len().min(MAX_BANDS);
    // One masked weight vector per kept band.
    s.weights.clear();
    s.weights.resize(kept * n, 0.0);
    s.deep.clear();
    for (j, &x) in v.iter().enumerate() {
        let b = s.band[j];
        if b == u64::MAX {
            continue;
        }
        let k = s.levels.partition_point(|&l| l < b);
        if k >= kept {
            s.deep.push(j);
        } else {
            s.weights[k * n + j] = (x - top + b as f64 * BAND).exp();
        }
    }
    s.sums.clear();
    s.sums.resize(kept * n, 0.0);
    let a = ls.big(tab);
    for i in 0..n {
        let row = &a[i * n..(i + 1) * n];
        for k in 0..kept {
            let w = &s.weights[k * n..(k + 1) * n];
            s.sums[k * n + i] = row.iter().zip(w).map(|(p, w)| p * w).sum();
        }
    }
    for (i, o) in out.iter_mut().enumerate() {
        let mut y = combine(s, kept, n, i, top);
        for &(j, l) in &ls.tiny_row[ls.tiny_row_off[i]..ls.tiny_row_off[i + 1]] {
            y = log_add(y, v[j as usize] + l);
        }
        for &j in &s.deep {
            let p = tab.trans[i * n + j];
            if p >= TINY {
                y = log_add(y, v[j] + p.ln());
            }
        }
        *o = y;
    }
}

/// The log-space passes of one call (see [`super::passes::Kind`]).
pub(crate) struct Robust<'a, E: Emission> {
    pub(crate) tab: &'a Tables<E>,
    pub(crate) ls: &'a LogSpace<E>,
}

impl<E: Emission> Robust<'_, E> {
    /// Normalised log alphas at t = 0; returns log c_0 (-inf: impossible).
    pub(crate) fn first(&self, o: E::Obs, out: &mut [f64], s: &mut Scratch) -> f64 {
        s.row.resize(self.ls.n, 0.0);
        let le = self.ls.lrows.row(o, &mut s.row).values;
        for ((x, &s), &e) in out.iter_mut().zip(&self.ls.lstart).zip(le) {
            *x = s + e;
        }
        normalise(out)
    }

    /// One forward step from `prev`; returns log c_t.
    pub(crate) fn step(&self, prev: &[f64], o: E::Obs, out: &mut [f64], s: &mut Scratch) -> f64 {
        product_forward(self.ls, self.tab, prev, out, s);
        s.row.resize(self.ls.n, 0.0);
        let le = self.ls.lrows.row(o, &mut s.row).values;
        for (x, &e) in out.iter_mut().zip(le) {
            *x += e;
        }
        normalise(out)
    }

    /// The backward step to t: `beta` holds log beta_{t+1} (normalised by
    /// its largest entry) and becomes log beta_t; `row` holds log alpha_t
    /// and becomes the posterior of t. With `counts`, the expected
    /// transitions of (t, t+1) are added (with the factor A, exact) and the
    /// emission statistics (and, at t = 0, start counts) of t. `next` is
    /// o_{t+1}, or None at the last step.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn back(&self, t: usize, o: E::Obs, next: Option<E::Obs>, row: &mut [f64], beta: &mut [f64], s: &mut Scratch, counts: Option<&mut Counts>) {
        let n = self.ls.n;
        let mut shift = 0.0;
        if let Some(o_next) = next {
            let mut v = std::mem::take(&mut s.v);
            v.clear();
            s.row.resize(n, 0.0);
            let le = self.ls.lrows.row(o_next, &mut s.row).values;
            v.extend(le.iter().zip(beta.iter()).map(|(e, b)| e + b));
            product_backward(self.ls, self.tab, &v, beta, s);
            shift = beta.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if shift > f64::NEG_INFINITY {
                beta.iter_mut().for_each(|b| *b -= shift);
            }
            s.v = v;
        } else {
            beta.fill(0.0);
        }
        // The posterior: alpha_t beta_t, normalised (log G).
        let g = {
            let mut top = f64::NEG_INFINITY;
            for (a, b) in row.iter().zip(beta.iter()) {
                top = top.max(a + b);
            }
            if top == f64::NEG_INFINITY { top } else { top + row.iter().zip(beta.iter()).map(|(a, b)| (a + b - top).exp()).sum::<f64>().ln() }
        };
        let Some(counts) = counts else {
            for (x, b) in row.iter_mut().zip(beta.iter()) {
                *x = (*x + b - g).exp();
            }
            return;
        };
        if next.is_some() {
            // xi_t(i, j) = A_ij exp(la_t(i) + v_j - Z_t), Z_t = G + shift.
            let z = g + shift;
            let v = &s.v;
            let vmax = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let trans = counts.exact_transitions();
            for i in 0..n {
                let base = row[i] - z;
                if base + vmax < -746.0 {
                    continue;
                }
                let a_row = &self.tab.trans[i * n..(i + 1) * n];
                let out = &mut trans[i * n..(i + 1) * n];
                for j in 0..n {
                    let p = a_row[j];
                    if p > 0.0 && v[j] > f64::NEG_INFINITY {
                        let e = base + v[j];
                        out[j] += if p < TINY { (e + p.ln()).exp() } else { p * e.exp() };
                    }
                }
            }
        }
        for (x, b) in row.iter_mut().zip(beta.iter()) {
            *x = (*x + b - g).exp();
        }
        self.tab.emission.add_stats(o, row, &mut counts.emis);
        if t == 0 {
            counts.start.iter_mut().zip(row.iter()).for_each(|(x, y)| *x += y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hmm::model::HmmModel;

    #[test]
    fn constants_are_the_powers_of_two_they_claim() {
        assert_eq!(SAFE_MIN, 2f64.powi(-960));
        assert_eq!(TINY, 2f64.powi(-500));
    }

    #[test]
    fn products_are_exact_over_any_range() {
        // Weights 60 bands apart, transitions down to 1e-320.
        let m = HmmModel::new(
            vec![0.5, 0.25, 0.25],
            vec![0.5, 0.5 - 1e-320, 1e-320, 1e-300, 0.0, 1.0 - 1e-300, 0.0, 0.0, 1.0],
            vec![1.0, 1.0, 1.0],
            1,
        )
        .unwrap();
        let tab = Tables::new(&m).unwrap();
        let ls = LogSpace::new(&tab).unwrap();
        let u = [0.0, -30000.0, -50.0];
        let mut out = [0.0; 3];
        let mut s = Scratch::default();
        product_forward(&ls, &tab, &u, &mut out, &mut s);
        let want = |j: usize| {
            let terms: Vec<f64> = (0..3).map(|i| u[i] + m.trans[i * 3 + j].ln()).collect();
            log_sum_exp(&terms)
        };
        for j in 0..3 {
            assert!((out[j] - want(j)).abs() < 1e-12 * want(j).abs().max(1.0), "{j}: {} vs {}", out[j], want(j));
        }
        let v = [-70000.0, 0.0, -3.0];
        product_backward(&ls, &tab, &v, &mut out, &mut s);
        for i in 0..3 {
            let terms: Vec<f64> = (0..3).map(|j| v[j] + m.trans[i * 3 + j].ln()).collect();
            let w = log_sum_exp(&terms);
            assert!((out[i] - w).abs() < 1e-12 * w.abs().max(1.0), "{i}: {} vs {w}", out[i]);
        }
    }
}
