//! One sequence's forward and forward-backward passes, for both kinds of
//! recursion: the scaled one (fast, [`Fast`]) and the log-space one
//! ([`super::robust::Robust`]), which takes over a sequence the scaled pass
//! cannot certify. Long sequences are split in segments: the forward pass
//! keeps one checkpoint vector per segment, and the backward pass computes
//! each segment's forward vectors again from its checkpoint, so memory is
//! (segment + T / segment) x N instead of T x N. Every pass polls the
//! monitor every few milliseconds of work, so an interrupt stops even one
//! long sequence promptly.

use crate::error::Result;
use crate::exec::Monitor;
use crate::memory;

use super::backward::{self, Counts};
use super::emission::{Emission, Rows};
use super::forward;
use super::robust::{self, Robust, SAFE_MIN};
use super::tables::{Certificate, Tables, DENSE_MIN};

/// What a forward step found.
pub(crate) enum Fwd {
    /// The step's scale, as the kind keeps it (linear or log), and the log
    /// of the factor the emission row was divided by.
    Scale(f64, f64),
    /// The sequence has probability 0.
    Impossible,
    /// The scaled pass cannot certify this sequence (log space needed).
    Uncertain,
}

/// How a pass over one sequence ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Outcome {
    /// log P(sequence); -inf when impossible.
    LogLik(f64),
    /// The scaled pass cannot certify the sequence: run the log-space one.
    Uncertain,
}

/// A recursion: scaled or log-space vectors, with their own scales.
pub(crate) trait Kind {
    type Obs: Copy;
    type Scratch: Default;
    fn first(&self, o: Self::Obs, out: &mut [f64], s: &mut Self::Scratch) -> Fwd;
    fn step(&self, prev: &[f64], o: Self::Obs, out: &mut [f64], s: &mut Self::Scratch) -> Fwd;
    /// log of a scale returned by `first` or `step`.
    fn log(scale: f64) -> f64;
    /// The backward step to t (see [`backward::back`], [`Robust::back`]):
    /// `row` holds the forward vector of t and becomes its posterior;
    /// `next` is (o_{t+1}, scale_{t+1}).
    #[allow(clippy::too_many_arguments)]
    fn back(&self, t: usize, o: Self::Obs, next: Option<(Self::Obs, f64)>, row: &mut [f64], beta: &mut [f64], s: &mut Self::Scratch, counts: Option<&mut Counts>);
}

/// The scaled recursions.
pub(crate) struct Fast<'a, E: Emission>(pub(crate) &'a Tables<E>);

/// Scratch of the scaled recursions: a product row and an emission row.
#[derive(Default)]
pub(crate) struct FastScratch {
    tmp: Vec<f64>,
    row: Vec<f64>,
}

impl<E: Emission> Kind for Fast<'_, E> {
    type Obs = E::Obs;
    type Scratch = FastScratch;

    #[inline]
    fn first(&self, o: E::Obs, out: &mut [f64], s: &mut FastScratch) -> Fwd {
        let tab = self.0;
        s.row.resize(tab.n, 0.0);
        let row = tab.rows.row(o, &mut s.row);
        let (c, min) = forward::first(tab, row.values, out);
        let certified = match tab.certificate {
            Certificate::Theta(theta) => min >= theta,
            Certificate::Dense => c >= DENSE_MIN,
            Certificate::Steps { .. } => tab.min_start * row.min >= SAFE_MIN,
        };
        finish_scaled(out, c, row.shift, certified)
    }

    #[inline]
    fn step(&self, prev: &[f64], o: E::Obs, out: &mut [f64], s: &mut FastScratch) -> Fwd {
        let tab = self.0;
        s.row.resize(tab.n, 0.0);
        let row = tab.rows.row(o, &mut s.row);
        let (c, min) = forward::step(tab, prev, row.values, out);
        let certified = match tab.certificate {
            Certificate::Theta(theta) => min >= theta,
            Certificate::Dense => true,
            Certificate::Steps { min_trans } => forward_min(prev) * min_trans * row.min >= SAFE_MIN,
        };
        finish_scaled(out, c, row.shift, certified)
    }

    fn log(scale: f64) -> f64 {
        scale.ln()
    }

    #[inline]
    fn back(&self, t: usize, o: E::Obs, next: Option<(E::Obs, f64)>, row: &mut [f64], beta: &mut [f64], s: &mut FastScratch, counts: Option<&mut Counts>) {
        s.row.resize(self.0.n, 0.0);
        backward::back(self.0, t, o, next, row, beta, &mut s.tmp, &mut s.row, counts);
    }
}

/// The smallest positive value of a forward vector.
#[inline]
fn forward_min(x: &[f64]) -> f64 {
    super::tables::min_positive(x)
}

#[inline]
fn finish_scaled(out: &mut [f64], c: f64, shift: f64, certified: bool) -> Fwd {
    if !certified {
        Fwd::Uncertain
    } else if c == 0.0 {
        // Certified: no positive term underflowed, so the zero is exact.
        Fwd::Impossible
    } else {
        forward::rescale(out, c);
        Fwd::Scale(c, shift)
    }
}

impl<E: Emission> Kind for Robust<'_, E> {
    type Obs = E::Obs;
    type Scratch = robust::Scratch;

    fn first(&self, o: E::Obs, out: &mut [f64], s: &mut robust::Scratch) -> Fwd {
        log_scale(Robust::first(self, o, out, s))
    }

    fn step(&self, prev: &[f64], o: E::Obs, out: &mut [f64], s: &mut robust::Scratch) -> Fwd {
        log_scale(Robust::step(self, prev, o, out, s))
    }

    fn log(scale: f64) -> f64 {
        scale
    }

    fn back(&self, t: usize, o: E::Obs, next: Option<(E::Obs, f64)>, row: &mut [f64], beta: &mut [f64], s: &mut robust::Scratch, counts: Option<&mut Counts>) {
        Robust::back(self, t, o, next.map(|(o, _)| o), row, beta, s, counts);
    }
}

fn log_scale(l: f64) -> Fwd {
    if l == f64::NEG_INFINITY { Fwd::Impossible } else { Fwd::Scale(l, 0.0) }
}

/// Time steps between monitor polls for N states: about 4 million
/// multiply-adds (a few milliseconds), at most 65,536 steps.
pub(crate) fn poll_every(n: usize) -> usize {
    ((1usize << 22) / n.saturating_mul(n).max(1)).clamp(1, 1 << 16)
}

/// Polls the monitor every [`poll_every`] steps: a countdown, as a
/// division per step would cost as much as a step of a small model.
pub(crate) struct Poll<'a> {
    monitor: &'a Monitor,
    every: usize,
    left: usize,
}

impl<'a> Poll<'a> {
    pub(crate) fn new(monitor: &'a Monitor, n: usize) -> Self {
        let every = poll_every(n);
        Poll { monitor, every, left: every }
    }

    /// Count one step; `Err(Interrupted)` once the monitor is cancelled.
    #[inline]
    pub(crate) fn step(&mut self) -> Result<()> {
        self.left -= 1;
        if self.left == 0 {
            self.left = self.every;
            self.monitor.check()?;
        }
        Ok(())
    }
}

pub(crate) use super::emission::Zero;

/// `n` zeros, allocated fallibly and without writing them: the system
/// hands out zero pages as they are first touched, so a large buffer costs
/// no time up front (an uninterruptible memset of gigabytes) and only what
/// the pass then uses.
pub(crate) fn zeroed<T: Zero>(n: usize, what: &str) -> Result<Vec<T>> {
    let fail = || crate::error::Error::OutOfMemory { what: what.to_string(), needed: memory::bytes::<T>(&[n]), available: memory::available() };
    if n == 0 || std::mem::size_of::<T>() == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<T>(n).map_err(|_| fail())?;
    // SAFETY: the layout has a non-zero size; a null pointer is a failed
    // allocation (reported, not aborted); otherwise the block holds `n`
    // zeroed T, a valid value for every Zero type, allocated by the global
    // allocator with T's layout, as Vec::from_raw_parts requires.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut T;
        if ptr.is_null() {
            return Err(fail());
        }
        memory::advise_huge_pages(ptr.cast(), layout.size());
        Ok(Vec::from_raw_parts(ptr, n, n))
    }
}

/// Make `v` (scratch) hold at least `len` values: a new zeroed buffer when
/// it is too short (see [`zeroed`]; its old contents are not kept).
pub(crate) fn grow<T: Zero>(v: &mut Vec<T>, len: usize, what: &str) -> Result<()> {
    if len > v.len() {
        *v = Vec::new();
        *v = zeroed(len, what)?;
    }
    Ok(())
}

/// The forward pass alone with O(N) memory (`buf`: 2N values).
pub(crate) fn forward_only<K: Kind>(k: &K, n: usize, seq: &[K::Obs], buf: &mut Vec<f64>, s: &mut K::Scratch, monitor: &Monitor) -> Result<Outcome> {
    grow(buf, 2 * n, "the forward pass")?;
    let (mut cur, mut nxt) = buf[..2 * n].split_at_mut(n);
    let mut poll = Poll::new(monitor, n);
    let mut ll = match k.first(seq[0], cur, s) {
        Fwd::Scale(c, shift) => K::log(c) + shift,
        Fwd::Impossible => return Ok(Outcome::LogLik(f64::NEG_INFINITY)),
        Fwd::Uncertain => return Ok(Outcome::Uncertain),
    };
    for &o in &seq[1..] {
        poll.step()?;
        match k.step(cur, o, nxt, s) {
            Fwd::Scale(c, shift) => ll += K::log(c) + shift,
            Fwd::Impossible => return Ok(Outcome::LogLik(f64::NEG_INFINITY)),
            Fwd::Uncertain => return Ok(Outcome::Uncertain),
        }
        std::mem::swap(&mut cur, &mut nxt);
    }
    Ok(Outcome::LogLik(ll))
}

/// Scratch of [`forward_backward`] (reused between sequences).
#[derive(Default)]
pub(crate) struct FbScratch {
    /// Forward vectors of a segment, when the caller gives none.
    pub(crate) rows: Vec<f64>,
    ckpt: Vec<f64>,
    scale: Vec<f64>,
    beta: Vec<f64>,
}

/// Forward then backward over `seq` in segments of `seg` steps. `rows`:
/// where the forward vectors of a segment go (`None`: the scratch's own);
/// with `seg >= T` and rows of T x N, they end up holding the posteriors.
/// With `counts`, the sequence's expected counts are added. An impossible
/// or uncertain sequence adds nothing (rows are left undefined).
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_backward<K: Kind>(
    k: &K,
    n: usize,
    seq: &[K::Obs],
    seg: usize,
    rows: Option<&mut [f64]>,
    fb: &mut FbScratch,
    s: &mut K::Scratch,
    mut counts: Option<&mut Counts>,
    monitor: &Monitor,
) -> Result<Outcome> {
    let t_len = seq.len();
    // Two rows at least: a step reads the previous one.
    let seg = seg.max(2).min(t_len);
    let segments = t_len.div_ceil(seg);
    let FbScratch { rows: own, ckpt, scale, beta } = fb;
    let rows: &mut [f64] = match rows {
        Some(r) => r,
        None => {
            grow(own, seg * n, "the forward vectors of a sequence")?;
            own
        }
    };
    grow(scale, t_len, "the scales of a sequence")?;
    grow(ckpt, segments.saturating_sub(1) * n, "the checkpoints of a sequence")?;
    grow(beta, n, "the backward pass")?;
    let mut poll = Poll::new(monitor, n);
    // Forward: row t of segment q goes to rows[t - q * seg] (r, q kept by
    // counting); the vector before the first step of segment q >= 1 is its
    // checkpoint.
    let mut ll = 0.0;
    let (mut r, mut q) = (0usize, 0usize);
    for t in 0..t_len {
        poll.step()?;
        let verdict = if t == 0 {
            k.first(seq[0], &mut rows[..n], s)
        } else {
            r += 1;
            if r == seg {
                r = 0;
                q += 1;
            }
            let p = if r == 0 { seg - 1 } else { r - 1 };
            if r == 0 {
                ckpt[(q - 1) * n..q * n].copy_from_slice(&rows[p * n..(p + 1) * n]);
            }
            let (prev, out) = two_rows(rows, p, r, n);
            k.step(prev, seq[t], out, s)
        };
        match verdict {
            Fwd::Scale(c, shift) => {
                scale[t] = c;
                ll += K::log(c) + shift;
            }
            Fwd::Impossible => return Ok(Outcome::LogLik(f64::NEG_INFINITY)),
            Fwd::Uncertain => return Ok(Outcome::Uncertain),
        }
    }
    // Backward, segment by segment from the last.
    for q in (0..segments).rev() {
        let (t0, t1) = (q * seg, ((q + 1) * seg).min(t_len));
        if q + 1 < segments {
            // The segment's forward vectors again, from its checkpoint
            // (identical arithmetic, so identical values).
            for t in t0..t1 {
                poll.step()?;
                let r = t - t0;
                let verdict = if t == 0 {
                    k.first(seq[0], &mut rows[..n], s)
                } else if r == 0 {
                    k.step(&ckpt[(q - 1) * n..q * n], seq[t], &mut rows[..n], s)
                } else {
                    let (prev, out) = two_rows(rows, r - 1, r, n);
                    k.step(prev, seq[t], out, s)
                };
                if !matches!(verdict, Fwd::Scale(..)) {
                    return Err(crate::error::Error::Internal("a recomputed forward step differs from the first pass".into()));
                }
            }
        }
        for t in (t0..t1).rev() {
            poll.step()?;
            let next = (t + 1 < t_len).then(|| (seq[t + 1], scale[t + 1]));
            let r = t - t0;
            k.back(t, seq[t], next, &mut rows[r * n..(r + 1) * n], &mut beta[..n], s, counts.as_deref_mut());
        }
    }
    Ok(Outcome::LogLik(ll))
}

/// Rows `a` (read) and `b` (written), a != b, of a row-major buffer.
fn two_rows(rows: &mut [f64], a: usize, b: usize, n: usize) -> (&[f64], &mut [f64]) {
    if a < b {
        let (lo, hi) = rows.split_at_mut(b * n);
        (&lo[a * n..(a + 1) * n], &mut hi[..n])
    } else {
        let (lo, hi) = rows.split_at_mut(a * n);
        (&hi[..n], &mut lo[b * n..(b + 1) * n])
    }
}
