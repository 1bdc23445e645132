//! The most probable state path, in log space:
//!
//! ```text
//! delta_1(j) = log pi_j + log B_j(o_1)
//! delta_t(j) = max_i [delta_{t-1}(i) + log A_ij] + log B_j(o_t)
//! ```
//! Ties go to the lowest state index, both in the final argmax and in every
//! back-pointer, so the path is deterministic. An impossible sequence has
//! log-probability -inf and no path.
//!
//! Back-pointers take 2 bytes per state and step (4 beyond 65,536 states).
//! When T x N of them do not fit in memory, the sequence is decoded in
//! segments: the first pass keeps the delta vector before each segment,
//! and the back-pointers of one segment at a time are computed again from
//! it (twice the arithmetic, the same path).

use crate::error::Result;
use crate::exec::Monitor;

use super::emission::{Emission, Rows};
use super::passes::{grow, Poll, Zero};
use super::tables::LogTables;

/// State index marking "no path" (impossible sequence).
pub const NO_STATE: u32 = u32::MAX;

/// A back-pointer: u16 up to 65,536 states, u32 beyond.
pub(crate) trait Pointer: Zero + Default {
    fn from_state(i: usize) -> Self;
    fn state(self) -> usize;
}

impl Pointer for u16 {
    fn from_state(i: usize) -> Self {
        i as u16
    }
    fn state(self) -> usize {
        self as usize
    }
}

impl Pointer for u32 {
    fn from_state(i: usize) -> Self {
        i as u32
    }
    fn state(self) -> usize {
        self as usize
    }
}

/// Scratch of [`viterbi`] (reused between sequences).
#[derive(Default)]
pub(crate) struct Scratch<P> {
    back: Vec<P>,
    ckpt: Vec<f64>,
    buf: Vec<f64>,
    /// An emission row.
    row: Vec<f64>,
}

/// One step: `nxt` from `cur`, back-pointers into `bp`.
#[inline]
fn step<E: Emission, P: Pointer>(tab: &LogTables<E>, cur: &[f64], e: &[f64], nxt: &mut [f64], bp: &mut [P]) {
    let n = tab.n;
    for j in 0..n {
        let col = &tab.trans_t[j * n..(j + 1) * n];
        let (mut best, mut arg) = (f64::NEG_INFINITY, 0usize);
        for (i, (&d, &a)) in cur.iter().zip(col).enumerate() {
            let v = d + a;
            // Strict: an equal later value never replaces the lower index.
            if v > best {
                best = v;
                arg = i;
            }
        }
        nxt[j] = best + e[j];
        bp[j] = P::from_state(arg);
    }
}

/// Decode one sequence into `path` (length T, 0-based states) in segments
/// of `seg` steps; returns the log-probability of the path.
pub(crate) fn viterbi<E: Emission, P: Pointer>(tab: &LogTables<E>, seq: &[E::Obs], path: &mut [u32], seg: usize, s: &mut Scratch<P>, monitor: &Monitor) -> Result<f64> {
    let n = tab.n;
    let t_len = seq.len();
    let seg = seg.clamp(1, t_len);
    let segments = t_len.div_ceil(seg);
    grow(&mut s.back, seg * n, "the Viterbi back-pointers")?;
    grow(&mut s.ckpt, segments.saturating_sub(1) * n, "the Viterbi checkpoints")?;
    grow(&mut s.buf, 2 * n, "the Viterbi pass")?;
    s.row.resize(n, 0.0);
    let mut poll = Poll::new(monitor, n);
    let (mut cur, mut nxt) = s.buf[..2 * n].split_at_mut(n);
    for ((d, &p), &e) in cur.iter_mut().zip(&tab.start).zip(tab.rows.row(seq[0], &mut s.row).values) {
        *d = p + e;
    }
    // Back-pointers of step t (to t - 1) in back[(t - q seg) N ..] for the
    // segment q of t; the delta before the first step of segment q >= 1 is
    // its checkpoint.
    let (mut r, mut q) = (0usize, 0usize);
    for &o in &seq[1..] {
        poll.step()?;
        r += 1;
        if r == seg {
            r = 0;
            q += 1;
            s.ckpt[(q - 1) * n..q * n].copy_from_slice(cur);
        }
        step(tab, cur, tab.rows.row(o, &mut s.row).values, nxt, &mut s.back[r * n..(r + 1) * n]);
        std::mem::swap(&mut cur, &mut nxt);
    }
    let (mut best, mut arg) = (f64::NEG_INFINITY, 0usize);
    for (j, &d) in cur.iter().enumerate() {
        if d > best {
            best = d;
            arg = j;
        }
    }
    if best == f64::NEG_INFINITY {
        path.fill(NO_STATE);
        return Ok(best);
    }
    path[t_len - 1] = arg as u32;
    for q in (0..segments).rev() {
        let (t0, t1) = (q * seg, ((q + 1) * seg).min(t_len));
        if q + 1 < segments && q > 0 {
            // This segment's back-pointers again, from its checkpoint.
            cur.copy_from_slice(&s.ckpt[(q - 1) * n..q * n]);
            for t in t0..t1 {
                poll.step()?;
                step(tab, cur, tab.rows.row(seq[t], &mut s.row).values, nxt, &mut s.back[(t - t0) * n..(t - t0 + 1) * n]);
                std::mem::swap(&mut cur, &mut nxt);
            }
        } else if q + 1 < segments {
            // The first segment: from the start probabilities.
            for ((d, &p), &e) in cur.iter_mut().zip(&tab.start).zip(tab.rows.row(seq[0], &mut s.row).values) {
                *d = p + e;
            }
            for t in 1..t1 {
                poll.step()?;
                step(tab, cur, tab.rows.row(seq[t], &mut s.row).values, nxt, &mut s.back[t * n..(t + 1) * n]);
                std::mem::swap(&mut cur, &mut nxt);
            }
        }
        for t in (t0.max(1)..t1).rev() {
            arg = s.back[(t - t0) * n + arg].state();
            path[t - 1] = arg as u32;
        }
    }
    Ok(best)
}
