//! Separation in the pooled data: a direction b of the coefficients along
//! which the binomial (or poisson) log-likelihood keeps increasing, so that
//! it has no maximum and those coefficients are bounded by their priors
//! alone.
//!
//! With a_i = s_i d_i (d_i row i of the pooled design [x z], s_i = +1 when
//! every trial of row i succeeded, -1 when none did), the data are
//! (quasi-completely) separated when some b has a_i'b >= 0 for those rows,
//! d_i'b = 0 for rows with both outcomes, and a_i'b > 0 for at least one
//! row (Albert and Anderson 1984). Poisson: rows with y = 0 have s_i = -1
//! and the others both outcomes (a count of 0 pushes eta to -inf).
//! As Konis (2007), this is the linear programme
//!
//! ```text
//! max c'b  s.t.  a_i'b >= 0 (one-sided rows), d_i'b = 0 (mixed rows),
//!                -1 <= b_j <= 1,          c = sum of the one-sided a_i
//! ```
//!
//! whose optimum is positive exactly under separation. It is solved here in
//! its dual form, which has only (columns) constraints, by the revised
//! simplex method: each iteration prices every row once (in parallel), so
//! the cost is a few passes over the data per design column.

use rayon::prelude::*;

use super::model::{Family, HbData};
use crate::error::Result;
use crate::exec::Monitor;

/// Designs wider than this are not checked (the basis is inverted densely
/// at each iteration).
pub const MAX_COLUMNS: usize = 200;

/// How a row constrains b.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Every trial a success: d_i'b >= 0.
    Plus,
    /// No success (or a zero count): d_i'b <= 0.
    Minus,
    /// Both outcomes: d_i'b = 0.
    Both,
    /// No trials: no constraint.
    Free,
}

fn side(family: Family, y: f64, trials: f64) -> Side {
    match family {
        Family::Binomial if trials == 0.0 => Side::Free,
        Family::Binomial if y == 0.0 => Side::Minus,
        Family::Binomial if y == trials => Side::Plus,
        Family::Poisson | Family::NegBinomial if y == 0.0 => Side::Minus,
        _ => Side::Both,
    }
}

/// A variable of the dual programme: u_j, v_j (cost 1, columns e_j and
/// -e_j), or the multiplier of constraint sigma * d_i'b >= 0 (cost 0,
/// column -sigma d_i).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Var {
    U(usize),
    V(usize),
    Row(usize, f64),
}

/// The pooled design restricted to some columns, each scaled to a
/// largest magnitude of 1.
struct Design<'a> {
    data: &'a HbData,
    /// Columns of [x z] in use.
    cols: Vec<usize>,
    scale: Vec<f64>,
}

impl Design<'_> {
    fn d(&self) -> usize {
        self.cols.len()
    }
    #[inline]
    fn get(&self, i: usize, j: usize) -> f64 {
        let (k, p) = (self.data.k, self.data.p);
        let c = self.cols[j];
        let v = if c < k { self.data.x[i * k + c] } else { self.data.z[i * p + c - k] };
        v * self.scale[j]
    }
    fn dot(&self, i: usize, b: &[f64]) -> f64 {
        (0..self.d()).map(|j| self.get(i, j) * b[j]).sum()
    }
    fn l1(&self, i: usize) -> f64 {
        (0..self.d()).map(|j| self.get(i, j).abs()).sum()
    }
    fn column(&self, v: Var) -> Vec<f64> {
        let d = self.d();
        match v {
            Var::U(j) => (0..d).map(|r| (r == j) as u8 as f64).collect(),
            Var::V(j) => (0..d).map(|r| -((r == j) as u8 as f64)).collect(),
            Var::Row(i, s) => (0..d).map(|r| -s * self.get(i, r)).collect(),
        }
    }
}

/// Bland's order of the variables.
fn index(v: Var, d: usize) -> usize {
    match v {
        Var::U(j) => j,
        Var::V(j) => d + j,
        Var::Row(i, s) => 2 * d + 2 * i + (s < 0.0) as usize,
    }
}

fn cost(v: Var) -> f64 {
    match v {
        Var::Row(..) => 0.0,
        _ => 1.0,
    }
}

/// Inverse of a small dense matrix (row-major) by Gauss-Jordan elimination
/// with partial pivoting; `None` when numerically singular.
fn invert(mut a: Vec<f64>, n: usize) -> Option<Vec<f64>> {
    let mut inv: Vec<f64> = (0..n * n).map(|i| (i / n == i % n) as u8 as f64).collect();
    for col in 0..n {
        let piv = (col..n).max_by(|&r, &s| a[r * n + col].abs().total_cmp(&a[s * n + col].abs()))?;
        let pv = a[piv * n + col];
        if pv.abs() < 1e-12 {
            return None;
        }
        if piv != col {
            for j in 0..n {
                a.swap(piv * n + j, col * n + j);
                inv.swap(piv * n + j, col * n + j);
            }
        }
        for j in 0..n {
            a[col * n + j] /= pv;
            inv[col * n + j] /= pv;
        }
        for r in 0..n {
            if r != col {
                let f = a[r * n + col];
                if f != 0.0 {
                    for j in 0..n {
                        a[r * n + j] -= f * a[col * n + j];
                        inv[r * n + j] -= f * inv[col * n + j];
                    }
                }
            }
        }
    }
    Some(inv)
}

/// The columns of the pooled design [x z] (x's first) along which the
/// data are separated, or an empty vector when they are not (or the check
/// does not apply: gaussian family, more than [`MAX_COLUMNS`] columns, a
/// numerically inconclusive programme). The set is irreducible: each
/// column is needed (a direction found first may lean on columns it does
/// not need, such as the intercept when x alone separates; those are
/// dropped one by one while the rest still separate). Checks `monitor`
/// between iterations.
pub fn separated_columns(data: &HbData, family: Family, monitor: &Monitor) -> Result<Vec<usize>> {
    let d = data.k + data.p;
    let n = data.n();
    if matches!(family, Family::Gaussian | Family::Ordinal) || d > MAX_COLUMNS || n == 0 {
        return Ok(Vec::new());
    }
    let trials = |i: usize| if data.trials.is_empty() { 1.0 } else { data.trials[i] };
    let sides: Vec<Side> = (0..n).map(|i| side(family, data.y[i], trials(i))).collect();
    let mut scale = vec![0.0; d];
    for i in 0..n {
        for (j, s) in scale.iter_mut().enumerate() {
            let v = if j < data.k { data.x[i * data.k + j] } else { data.z[i * data.p + j - data.k] };
            *s = f64::max(*s, v.abs());
        }
    }
    for s in scale.iter_mut() {
        *s = if *s > 0.0 { 1.0 / *s } else { 0.0 };
    }
    let design = |cols: &[usize]| Design { data, cols: cols.to_vec(), scale: cols.iter().map(|&c| scale[c]).collect() };
    let Some(dir) = separating_direction(&design(&(0..d).collect::<Vec<_>>()), &sides, monitor)? else {
        return Ok(Vec::new());
    };
    let mut cols: Vec<usize> = (0..d).filter(|&j| dir[j].abs() > 1e-6).collect();
    let mut j = 0;
    while j < cols.len() && cols.len() > 1 {
        let without: Vec<usize> = cols.iter().copied().filter(|&c| c != cols[j]).collect();
        match separating_direction(&design(&without), &sides, monitor)? {
            Some(dir) => cols = without.iter().zip(&dir).filter(|(_, b)| b.abs() > 1e-6).map(|(&c, _)| c).collect(),
            None => j += 1,
        }
    }
    Ok(cols)
}

/// A direction (in `design`'s scaled columns) that separates the rows, or
/// `None`.
fn separating_direction(design: &Design, sides: &[Side], monitor: &Monitor) -> Result<Option<Vec<f64>>> {
    let d = design.d();
    let n = sides.len();
    if d == 0 {
        return Ok(None);
    }
    let sign = |s: Side| match s {
        Side::Plus => 1.0,
        Side::Minus => -1.0,
        _ => 0.0,
    };
    let mut c = vec![0.0; d];
    for (i, &side) in sides.iter().enumerate() {
        let s = sign(side);
        if s != 0.0 {
            for (j, cj) in c.iter_mut().enumerate() {
                *cj += s * design.get(i, j);
            }
        }
    }
    // A feasible start: u_j or v_j carries c_j.
    let mut basis: Vec<Var> = (0..d).map(|j| if c[j] >= 0.0 { Var::U(j) } else { Var::V(j) }).collect();
    let tol = 1e-9;
    let max_iter = 50 * d + 100;
    let mut degenerate = 0usize;
    let mut optimal_pi = None;
    for _ in 0..max_iter {
        monitor.check()?;
        let mut b = vec![0.0; d * d];
        for (col, &v) in basis.iter().enumerate() {
            for (r, value) in design.column(v).into_iter().enumerate() {
                b[r * d + col] = value;
            }
        }
        let Some(binv) = invert(b, d) else { return Ok(None) };
        let x_b: Vec<f64> = (0..d).map(|r| (0..d).map(|j| binv[r * d + j] * c[j]).sum()).collect();
        let pi: Vec<f64> = (0..d).map(|j| (0..d).map(|r| cost(basis[r]) * binv[r * d + j]).sum()).collect();
        // Pricing. Bland's rule (first improving variable) after a run of
        // degenerate pivots, so the method cannot cycle.
        let bland = degenerate > 2 * d;
        let mut best: Option<(Var, f64)> = None;
        let consider = |v: Var, rc: f64, best: &mut Option<(Var, f64)>| {
            if rc < -tol && best.is_none_or(|(_, r)| !bland && rc < r) {
                *best = Some((v, rc));
            }
        };
        for (j, &p) in pi.iter().enumerate() {
            consider(Var::U(j), 1.0 - p, &mut best);
            consider(Var::V(j), 1.0 + p, &mut best);
        }
        let row_rc = |i: usize| -> Option<(Var, f64)> {
            let t = design.dot(i, &pi);
            let (s, rc) = match sides[i] {
                Side::Plus => (1.0, t),
                Side::Minus => (-1.0, -t),
                Side::Both => (if t < 0.0 { 1.0 } else { -1.0 }, -t.abs()),
                Side::Free => return None,
            };
            (rc < -tol * (1.0 + design.l1(i))).then_some((Var::Row(i, s), rc))
        };
        let row_best = if bland && best.is_none() {
            (0..n).into_par_iter().find_first(|&i| row_rc(i).is_some()).and_then(row_rc)
        } else if !bland {
            (0..n).into_par_iter().filter_map(row_rc).min_by(|a, b| a.1.total_cmp(&b.1))
        } else {
            None
        };
        if let Some((v, rc)) = row_best {
            consider(v, rc, &mut best);
        }
        let Some((entering, _)) = best else {
            optimal_pi = Some(pi);
            break;
        };
        let col = design.column(entering);
        let dir: Vec<f64> = (0..d).map(|r| (0..d).map(|j| binv[r * d + j] * col[j]).sum()).collect();
        let leave = (0..d).filter(|&r| dir[r] > tol).min_by(|&r, &s| {
            (x_b[r].max(0.0) / dir[r]).total_cmp(&(x_b[s].max(0.0) / dir[s])).then(index(basis[r], d).cmp(&index(basis[s], d)))
        });
        let Some(r) = leave else { return Ok(None) };
        degenerate = if x_b[r] <= tol { degenerate + 1 } else { 0 };
        basis[r] = entering;
    }
    let Some(bdir) = optimal_pi else { return Ok(None) };
    // Accept the direction only if it separates the data as they are.
    let (violated, strict) = (0..n)
        .into_par_iter()
        .map(|i| {
            let t = design.dot(i, &bdir);
            let scale = 1.0 + design.l1(i);
            match sides[i] {
                Side::Plus | Side::Minus => {
                    let a = sign(sides[i]) * t;
                    (a < -1e-9 * scale, a > 1e-6 * scale)
                }
                Side::Both => (t.abs() > 1e-9 * scale, false),
                Side::Free => (false, false),
            }
        })
        .reduce(|| (false, false), |a, b| (a.0 || b.0, a.1 || b.1));
    Ok((!violated && strict).then_some(bdir))
}
