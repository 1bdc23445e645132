//! Neal's (2003) univariate slice sampler: stepping out, then shrinkage.
//!
//! Given x0 with log density f(x0), draw the slice level
//! y = f(x0) - Exp(1), place an interval of width w at random around x0,
//! step it out (at most m steps in all, split at random between the two
//! sides) until both ends are below the slice, then sample uniformly from the
//! interval, shrinking it towards x0 on each rejection. Points outside
//! [lower, upper] or with log density -inf / NaN are outside the slice.

use super::random::Rng;
use crate::tolerances::{SLICE_MAX_SHRINKS, SLICE_MAX_STEPS};

/// Settings of one slice update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SliceSettings {
    /// Initial interval width (> 0).
    pub w: f64,
    /// Maximum number of stepping-out steps; `None` for unlimited (capped
    /// at [`SLICE_MAX_STEPS`] so an improper density cannot hang a sweep).
    pub m: Option<usize>,
    pub lower: f64,
    pub upper: f64,
}

impl SliceSettings {
    pub fn new(w: f64) -> Self {
        SliceSettings { w, m: None, lower: f64::NEG_INFINITY, upper: f64::INFINITY }
    }
}

/// The outcome of one slice update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SliceStep {
    pub x: f64,
    /// Log density at `x`.
    pub logf: f64,
    /// Log-density evaluations spent.
    pub evals: usize,
    /// True when shrinkage gave up (numerically empty slice); `x` is then x0.
    pub stuck: bool,
}

#[inline]
fn inside(logf: f64, y: f64) -> bool {
    // NaN compares false: treated as outside the slice.
    logf > y
}

/// One slice update from `x0` (with log density `f0`, finite) under
/// `logf`. The caller guarantees `lower <= x0 <= upper`.
pub fn slice_step(x0: f64, f0: f64, mut logf: impl FnMut(f64) -> f64, s: &SliceSettings, rng: &mut Rng) -> SliceStep {
    let y = f0 - rng.exp1();
    let mut evals = 0usize;
    let mut f = |x: f64, evals: &mut usize| -> f64 {
        if x < s.lower || x > s.upper {
            return f64::NEG_INFINITY;
        }
        *evals += 1;
        logf(x)
    };
    let mut left = x0 - s.w * rng.uniform();
    let mut right = left + s.w;
    let m = s.m.unwrap_or(SLICE_MAX_STEPS).min(SLICE_MAX_STEPS).max(1);
    let mut j = (m as f64 * rng.uniform()).floor() as usize;
    let mut k = (m - 1).saturating_sub(j);
    j = j.min(m - 1);
    while j > 0 && left > s.lower && inside(f(left, &mut evals), y) {
        left -= s.w;
        j -= 1;
    }
    while k > 0 && right < s.upper && inside(f(right, &mut evals), y) {
        right += s.w;
        k -= 1;
    }
    left = left.max(s.lower);
    right = right.min(s.upper);
    for _ in 0..SLICE_MAX_SHRINKS {
        let x1 = left + (right - left) * rng.uniform();
        let f1 = f(x1, &mut evals);
        if inside(f1, y) {
            return SliceStep { x: x1, logf: f1, evals, stuck: false };
        }
        if x1 < x0 {
            left = x1;
        } else {
            right = x1;
        }
        if right - left <= f64::EPSILON * x0.abs().max(f64::MIN_POSITIVE) {
            break;
        }
    }
    SliceStep { x: x0, logf: f0, evals, stuck: true }
}
