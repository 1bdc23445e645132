//! One long sequence, parallel in time: the forward, forward-backward and
//! Viterbi recursions of a sequence split into chunks of time steps that
//! are computed at once (the chunked form of the associative scan of
//! Sarkka and Garcia-Fernandez 2021). The GPU kernels
//! (kernels/hmm_scan.cu) follow this file step by step; this is their
//! reference and the CPU's own path when it has threads enough ([`worthwhile`]).
//!
//! A step is a matrix: M_t = A diag(b(o_t)), so alpha_t = alpha_{t-1} M_t
//! and beta_{t-1} = M_t beta_t. Steps 1..T-1 go into chunks of `len`
//! steps; each chunk's product R_c = M_first ... M_last is computed
//! independently, row by row ([`products`], sum-product; Viterbi's in
//! max-plus), then a pass over the chunks (sequential, C = T / len
//! matrix-vector products) gives the vectors at the chunks' boundaries, in
//! log space ([`Bounds`]), and finally every chunk runs the ordinary
//! recursions from its boundary (posteriors; Viterbi's path). The work is
//! about N times the sequential recursion's (a row of N per state), spread
//! over chunks.
//!
//! Exactness. Products and vectors are kept in range by exact powers of two
//! and combined at the boundaries in log space; what can be lost is a value
//! that underflows. Every linear step checks that its largest value stays at
//! least 2^-500 ([`FLOOR`]) of the range it is kept in, so a value lost is
//! below 2^-522 of the step's largest; with every transition at least
//! 2^-300 ([`usable`]) no later step can raise a lost value's share by more
//! than 2^300, so results are exact to rounding. A step that fails the check
//! makes the pass uncertain (None), and the caller runs the sequential
//! recursions, which certify themselves or go to log space. The first step
//! (start x emission) is taken in logs, term by term; normalised rows (a
//! density's) must give it a scale of at least 2^-300, the sequential
//! passes' own test, or the pass is uncertain. Viterbi only adds and
//! compares, so it has no such check.

use rayon::prelude::*;

use crate::error::Result;
use crate::exec::Exec;
use crate::memory;

use super::backward::Counts;
use super::cpu;
use super::emission::{Emission, Rows};
use super::model::HmmModel;
use super::sequences::Sequences;
use super::tables::{LogTables, Tables, DENSE_MIN};
use super::viterbi::NO_STATE;

/// The smallest largest value a linear step may leave (see the module doc).
pub(crate) const FLOOR: f64 = f64::from_bits((1023 - 500) << 52);
/// A kept vector is rescaled (by a power of two) once its largest value's
/// exponent leaves [-RANGE, RANGE].
const RANGE: i32 = 256;

/// Whether the scan's linear passes are exact for transitions `trans`
/// (every transition at least 2^-300; see the module doc).
pub fn usable(trans: &[f64]) -> bool {
    trans.iter().all(|&p| p >= DENSE_MIN)
}

/// Whether the CPU runs `count` sequences of N states (the longest
/// `longest` steps) by the scan: fewer sequences than threads, long ones,
/// and enough threads to outrun the scan's N-fold work. Measured on 16
/// threads at N = 8 (one sequence of 262,144 steps, BENCHMARKS.md) the scan
/// was 1.1-2.1x slower than the sequential recursions, so it waits for 6N
/// threads.
pub(crate) fn worthwhile(n: usize, count: usize, longest: usize, threads: usize) -> bool {
    count < threads && longest >= MIN_STEPS && threads >= 6 * n.max(1)
}

/// Sequences shorter than this run sequentially.
pub(crate) const MIN_STEPS: usize = 4096;

/// Whether the CPU runs this call by the scan ([`worthwhile`] and
/// [`usable`]).
pub(crate) fn cpu_chosen<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> bool {
    worthwhile(model.n_states, seqs.len(), seqs.lengths().max().unwrap_or(0), exec.threads) && usable(&model.trans)
}

/// The CPU's log-likelihoods by the scan, each sequence in turn (its
/// chunks in parallel); an uncertain one sequentially.
pub(crate) fn cpu_loglik<E: Emission>(tab: &Tables<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(seqs.len());
    for s in 0..seqs.len() {
        let seq = seqs.get(s);
        out.push(match loglik(tab, seq, &Chunks::of(seq.len(), tab.n), exec)? {
            Some(l) => l,
            None => cpu::loglik_of(tab, seqs, &[s], exec)?[0],
        });
    }
    Ok(out)
}

/// The CPU's posteriors by the scan, as [`cpu_loglik`].
pub(crate) fn cpu_posterior<E: Emission>(tab: &Tables<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = tab.n;
    let mut probs = super::passes::zeroed(seqs.total() * n, "the posterior probabilities")?;
    let mut ll = Vec::with_capacity(seqs.len());
    for s in 0..seqs.len() {
        let seq = seqs.get(s);
        let rows = &mut probs[seqs.offsets[s] * n..seqs.offsets[s + 1] * n];
        ll.push(match posterior(tab, seq, &Chunks::of(seq.len(), n), rows, exec)? {
            Some(l) => l,
            None => cpu::posterior_of(tab, seq, rows, &exec.monitor)?,
        });
    }
    Ok((probs, ll))
}

/// The CPU's Baum-Welch E-step by the scan: counts summed over the
/// sequences in order, the total log-likelihood and the first impossible
/// sequence, as [`cpu::e_step`] returns them.
pub(crate) fn cpu_e_step<E: Emission>(tab: &Tables<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<(Counts, f64, Option<usize>)> {
    let mut total = zero_counts(tab)?;
    let (mut ll, mut impossible) = (0.0, None);
    for s in 0..seqs.len() {
        let seq = seqs.get(s);
        let (c, l) = match counts(tab, seq, &Chunks::of(seq.len(), tab.n), exec)? {
            Some(x) => x,
            None => {
                let (c, l) = cpu::counts_of(tab, seqs, &[s], cpu::fit_segment(tab.n, seqs, exec), exec)?;
                (c, l[0])
            }
        };
        if l == f64::NEG_INFINITY {
            impossible.get_or_insert(s);
        }
        total.add(&c);
        ll += l;
    }
    Ok((total, ll, impossible))
}

/// The CPU's Viterbi paths by the scan, each sequence in turn.
pub(crate) fn cpu_viterbi<E: Emission>(tab: &LogTables<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<(Vec<u32>, Vec<f64>)> {
    let mut paths = super::passes::zeroed(seqs.total(), "the Viterbi paths")?;
    let mut logp = Vec::with_capacity(seqs.len());
    for s in 0..seqs.len() {
        let seq = seqs.get(s);
        let path = &mut paths[seqs.offsets[s]..seqs.offsets[s + 1]];
        logp.push(viterbi(tab, seq, &Chunks::of(seq.len(), tab.n), path, exec)?);
    }
    Ok((paths, logp))
}

/// How steps 1..T-1 of a sequence of T split into chunks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chunks {
    pub steps: usize,
    pub len: usize,
}

impl Chunks {
    /// About sqrt(T) steps per chunk (the chunk pass and each chunk then
    /// take about as many steps), at least 32, and at most 32,768 / N so
    /// that a chunk's Viterbi back-pointers fit a GPU warp's share of
    /// shared memory.
    pub fn of(t: usize, n: usize) -> Self {
        let root = (t.saturating_sub(1) as f64).sqrt().ceil() as usize;
        Self::with_len(t, root.clamp(32, (32_768 / n.max(1)).max(32)))
    }

    /// The GPU's chunks: about 2 sqrt(T) steps (its chunk pass waits on
    /// memory at every chunk, so fewer, longer chunks), within the same
    /// bounds as [`Chunks::of`].
    pub fn for_device(t: usize, n: usize) -> Self {
        let root = 2 * (t.saturating_sub(1) as f64).sqrt().ceil() as usize;
        Self::with_len(t, root.clamp(32, (32_768 / n.max(1)).max(32)))
    }

    /// Chunks of `len` steps (at least 1) of a sequence of T.
    pub fn with_len(t: usize, len: usize) -> Self {
        Chunks { steps: t.saturating_sub(1), len: len.max(1) }
    }

    /// Number of chunks (at least one, possibly empty).
    pub fn count(&self) -> usize {
        self.steps.div_ceil(self.len).max(1)
    }

    /// Time steps of chunk c.
    pub fn range(&self, c: usize) -> std::ops::Range<usize> {
        let b = 1 + c * self.len;
        b.min(1 + self.steps)..(b + self.len).min(1 + self.steps)
    }
}

/// The exponent e with 2^e <= x < 2^(e+1), for a positive normal x.
#[inline]
fn exponent(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// 2^e for |e| < 1023.
#[inline]
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The largest value of `x` (0 for none positive).
#[inline]
fn largest(x: &[f64]) -> f64 {
    x.iter().fold(0.0, |m: f64, &v| if v > m { v } else { m })
}

/// What one linear step left.
enum Step {
    Kept,
    /// Every value is exactly 0 (the emission's row is 0 where it matters).
    Zero,
    Uncertain,
}

/// Rescale `x` by a power of two when its largest value `m` leaves the
/// kept range; adds the exponent taken out to `exp`.
#[inline]
fn keep_in_range(x: &mut [f64], m: f64, exp: &mut i64) {
    let e = exponent(m);
    if !(-RANGE..=RANGE).contains(&e) {
        let f = pow2(-e);
        x.iter_mut().for_each(|v| *v *= f);
        *exp += e as i64;
    }
}

/// Judge a step whose result's largest value is `m`, whose emission row
/// was `e`: an exact zero when no positive product was lost.
#[inline]
fn judge(m: f64, e: &[f64]) -> Step {
    if m >= FLOOR {
        Step::Kept
    } else if m == 0.0 && e.iter().all(|&p| p == 0.0) {
        Step::Zero
    } else {
        Step::Uncertain
    }
}

/// Chunk products of one sequence: `rows[c]` is R_c (N x N, row-major,
/// each row's largest value in [1, 2)) and `logs[c]` its rows' log scales
/// (-inf for a row that is zero); None when a step was uncertain.
pub(crate) struct Products {
    pub(crate) rows: Vec<f64>,
    pub(crate) logs: Vec<f64>,
}

/// The sum-product chunk products of `seq` (see [`Products`]).
pub(crate) fn products<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], ch: &Chunks, exec: &Exec) -> Result<Option<Products>> {
    let n = tab.n;
    let c_count = ch.count();
    let mut rows = memory::try_vec(c_count * n * n, 0.0, "the scan's chunk products")?;
    let mut logs = memory::try_vec(c_count * n, 0.0, "the scan's chunk products")?;
    let ok: Vec<Result<bool>> = exec.install(|| {
        rows.par_chunks_mut(n * n)
            .zip(logs.par_chunks_mut(n))
            .enumerate()
            .map(|(c, (r, l))| {
                exec.monitor.check()?;
                Ok(chunk_product(tab, seq, ch.range(c), r, l))
            })
            .collect()
    })?;
    for k in ok {
        if !k? {
            return Ok(None);
        }
    }
    Ok(Some(Products { rows, logs }))
}

/// R of the steps `steps` into `r` (N x N) and its row log scales into
/// `l`; false when a step was uncertain.
fn chunk_product<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], steps: std::ops::Range<usize>, r: &mut [f64], l: &mut [f64]) -> bool {
    let n = tab.n;
    let (mut nxt, mut buf) = (vec![0.0; n], vec![0.0; n]);
    let (mut exp, mut zero) = (vec![0i64; n], vec![false; n]);
    r.fill(0.0);
    (0..n).for_each(|i| r[i * n + i] = 1.0);
    // Step by step, every row at once: each emission row is made once.
    // Its shift is common to every row of R.
    let mut shift = 0.0;
    for t in steps {
        let row = tab.rows.row(seq[t], &mut buf);
        shift += row.shift;
        for (i, cur) in r.chunks_mut(n).enumerate() {
            if zero[i] {
                continue;
            }
            nxt.fill(0.0);
            for (k, &a) in cur.iter().enumerate() {
                if a != 0.0 {
                    for (x, &p) in nxt.iter_mut().zip(&tab.trans[k * n..(k + 1) * n]) {
                        *x += a * p;
                    }
                }
            }
            nxt.iter_mut().zip(row.values).for_each(|(x, &e)| *x *= e);
            let m = largest(&nxt);
            match judge(m, row.values) {
                Step::Kept => keep_in_range(&mut nxt, m, &mut exp[i]),
                Step::Zero => {
                    zero[i] = true;
                    continue;
                }
                Step::Uncertain => return false,
            }
            cur.copy_from_slice(&nxt);
        }
    }
    for (i, out) in r.chunks_mut(n).enumerate() {
        if zero[i] {
            out.fill(0.0);
            l[i] = f64::NEG_INFINITY;
            continue;
        }
        // Largest value into [1, 2), exactly.
        let e = exponent(largest(out));
        let f = pow2(-e);
        out.iter_mut().for_each(|v| *v *= f);
        l[i] = (exp[i] + e as i64) as f64 * std::f64::consts::LN_2 + shift;
    }
    true
}

/// log(sum_i exp(u_i) R[i, j]) for every j into `out`, with `u` the rows'
/// log weights: the boundary step forward.
fn through(u: &[f64], r: &[f64], n: usize, out: &mut [f64]) {
    let top = u.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
    if top == f64::NEG_INFINITY {
        out.fill(f64::NEG_INFINITY);
        return;
    }
    out.fill(0.0);
    for (i, &ui) in u.iter().enumerate() {
        let w = (ui - top).exp();
        if w != 0.0 {
            for (o, &p) in out.iter_mut().zip(&r[i * n..(i + 1) * n]) {
                *o += w * p;
            }
        }
    }
    out.iter_mut().for_each(|o| *o = o.ln() + top);
}

/// log(sum_j R[i, j] exp(w_j)) + l_i for every i into `out`: the boundary
/// step backward.
fn back_through(w: &[f64], r: &[f64], l: &[f64], n: usize, out: &mut [f64]) {
    let top = w.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
    for i in 0..n {
        if top == f64::NEG_INFINITY || l[i] == f64::NEG_INFINITY {
            out[i] = f64::NEG_INFINITY;
            continue;
        }
        let s: f64 = r[i * n..(i + 1) * n].iter().zip(w).map(|(&p, &x)| p * (x - top).exp()).sum();
        out[i] = s.ln() + top + l[i];
    }
}

/// log of the start vector: log pi_j + log b_j(o_0), each log taken
/// apart (their product can underflow); None when uncertain: normalised
/// rows (a density's, whose small values may have underflowed against the
/// row's largest) whose first scale, sum_j pi_j b_j, is below DENSE_MIN, the
/// sequential passes' own first-step test.
fn first_log<E: Emission>(tab: &Tables<E>, o: E::Obs) -> Option<Vec<f64>> {
    let mut buf = vec![0.0; tab.n];
    let row = tab.rows.row(o, &mut buf);
    let scale: f64 = tab.start.iter().zip(row.values).map(|(&p, &e)| p * e).sum();
    if tab.rows.normalised() && !(scale >= DENSE_MIN) {
        return None;
    }
    Some(tab.start.iter().zip(row.values).map(|(&p, &e)| p.ln() + e.ln() + row.shift).collect())
}

fn log_sum(x: &[f64]) -> f64 {
    let top = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    if top == f64::NEG_INFINITY {
        return top;
    }
    x.iter().map(|&v| (v - top).exp()).sum::<f64>().ln() + top
}

/// The log forward vectors at the chunk boundaries: `alpha[c]` at the step
/// before chunk c (`alpha[0]`: step 0) and, last, at step T-1.
fn forward_bounds<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], p: &Products, c_count: usize) -> Result<Option<Vec<f64>>> {
    let n = tab.n;
    let mut alpha = memory::try_vec((c_count + 1) * n, 0.0, "the scan's boundary vectors")?;
    let Some(first) = first_log(tab, seq[0]) else { return Ok(None) };
    alpha[..n].copy_from_slice(&first);
    let mut u = vec![0.0; n];
    for c in 0..c_count {
        let (before, after) = alpha[c * n..(c + 2) * n].split_at_mut(n);
        for ((x, &a), &l) in u.iter_mut().zip(before.iter()).zip(&p.logs[c * n..(c + 1) * n]) {
            *x = a + l;
        }
        through(&u, &p.rows[c * n * n..(c + 1) * n * n], n, after);
    }
    Ok(Some(alpha))
}

/// log P(seq) by the scan; None when uncertain.
pub fn loglik<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], ch: &Chunks, exec: &Exec) -> Result<Option<f64>> {
    let Some(p) = products(tab, seq, ch, exec)? else { return Ok(None) };
    let Some(alpha) = forward_bounds(tab, seq, &p, ch.count())? else { return Ok(None) };
    Ok(Some(log_sum(&alpha[ch.count() * tab.n..])))
}

/// Posterior state probabilities of `seq` into `rows` (T x N) and its
/// log-likelihood; None when uncertain (`rows` then holds no result).
/// NaN rows for an impossible sequence, as the sequential pass.
pub fn posterior<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], ch: &Chunks, rows: &mut [f64], exec: &Exec) -> Result<Option<f64>> {
    Ok(forward_backward(tab, seq, ch, Some(rows), false, exec)?.map(|(ll, _)| ll))
}

/// Baum-Welch expected counts of `seq` (transitions as exact counts,
/// [`Counts::exact_transitions`]) and its log-likelihood, by the scan;
/// None when uncertain. An impossible sequence has no counts.
pub fn counts<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], ch: &Chunks, exec: &Exec) -> Result<Option<(Counts, f64)>> {
    match forward_backward(tab, seq, ch, None, true, exec)? {
        Some((ll, Some(c))) => Ok(Some((c, ll))),
        Some((ll, None)) => Ok(Some((zero_counts(tab)?, ll))),
        None => Ok(None),
    }
}

fn zero_counts<E: Emission>(tab: &Tables<E>) -> Result<Counts> {
    let mut c = Counts::zeros(tab.n, tab.emission.n_stats())?;
    c.trans = memory::try_vec(tab.n * tab.n, 0.0, "the transition counts")?;
    Ok(c)
}

/// The scan's forward-backward: posteriors into `rows` (when given; else
/// each chunk uses scratch rows), counts summed in chunk order (with
/// `with_counts`), and the log-likelihood.
fn forward_backward<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], ch: &Chunks, rows: Option<&mut [f64]>, with_counts: bool, exec: &Exec) -> Result<Option<(f64, Option<Counts>)>> {
    let n = tab.n;
    let c_count = ch.count();
    let Some(p) = products(tab, seq, ch, exec)? else { return Ok(None) };
    let Some(alpha) = forward_bounds(tab, seq, &p, c_count)? else { return Ok(None) };
    let ll = log_sum(&alpha[c_count * n..]);
    if ll == f64::NEG_INFINITY {
        if let Some(rows) = rows {
            rows.fill(f64::NAN);
        }
        return Ok(Some((ll, None)));
    }
    // beta[c]: log backward vector at the last step of chunk c (beta[C-1]
    // at T-1 is 0); beta before chunk 0 is not needed (step 0 is chunk 0's).
    let mut beta = vec![0.0; c_count * n];
    for c in (1..c_count).rev() {
        let (before, after) = beta[(c - 1) * n..(c + 1) * n].split_at_mut(n);
        back_through(after, &p.rows[c * n * n..(c + 1) * n * n], &p.logs[c * n..(c + 1) * n], n, before);
    }
    // Rows of chunk c: its steps, and chunk 0 also step 0.
    let rows_of = |c: usize| if c == 0 { ch.range(c).end } else { ch.range(c).len() } * n;
    let mut parts: Vec<Option<&mut [f64]>> = Vec::with_capacity(c_count);
    match rows {
        Some(mut rest) => {
            for c in 0..c_count {
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(rows_of(c));
                parts.push(Some(head));
                rest = tail;
            }
        }
        None => parts.resize_with(c_count, || None),
    }
    // Chunks in batches (each chunk's counts are a whole Counts), each
    // batch's counts added in chunk order: memory bounded, and the sums do
    // not depend on the thread count.
    let batch = (4 * exec.threads).max(1);
    let mut total: Option<Counts> = None;
    let mut parts = parts.into_iter().enumerate().peekable();
    while parts.peek().is_some() {
        let this: Vec<(usize, Option<&mut [f64]>)> = parts.by_ref().take(batch).collect();
        let done: Vec<Result<Option<Option<Counts>>>> = exec.install(|| {
        this
            .into_par_iter()
            .map(|(c, part)| {
                exec.monitor.check()?;
                let r = ch.range(c);
                let first = if c == 0 { 0 } else { r.start };
                let mut scratch: Vec<f64>;
                let out = match part {
                    Some(p) => p,
                    None => {
                        scratch = memory::try_vec(rows_of(c), 0.0, "the scan's forward vectors")?;
                        &mut scratch[..]
                    }
                };
                let mut counts = if with_counts { Some(zero_counts(tab)?) } else { None };
                let ok = chunk_posterior(tab, seq, first, r, &alpha[c * n..(c + 1) * n], &beta[c * n..(c + 1) * n], out, counts.as_mut());
                Ok(ok.then_some(counts))
            })
            .collect()
        })?;
        for part in done {
            let Some(counts) = part? else { return Ok(None) };
            if let Some(c) = counts {
                match total.as_mut() {
                    Some(t) => t.add(&c),
                    None => total = Some(c),
                }
            }
        }
    }
    Ok(Some((ll, total)))
}

/// xi(i, j) = prev_i A_ij q_j / Z, summed to 1, added to `trans`, with
/// q = e(o_t) .* beta_t.
fn add_transitions<E: Emission>(tab: &Tables<E>, prev: &[f64], q: &[f64], trans: &mut [f64]) {
    let n = tab.n;
    let mut z = 0.0;
    for (i, &p) in prev.iter().enumerate() {
        z += p * tab.trans[i * n..(i + 1) * n].iter().zip(q).map(|(&a, &x)| a * x).sum::<f64>();
    }
    if z > 0.0 {
        for (i, &p) in prev.iter().enumerate() {
            let w = p / z;
            for ((x, &a), &y) in trans[i * n..(i + 1) * n].iter_mut().zip(&tab.trans[i * n..(i + 1) * n]).zip(q) {
                *x += w * a * y;
            }
        }
    }
}

/// Normalised exp(x - max x) into `out`.
fn from_log(x: &[f64], out: &mut [f64]) {
    let top = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    out.iter_mut().zip(x).for_each(|(o, &v)| *o = (v - top).exp());
}

/// Posteriors of the steps `steps` of one chunk (and of `first`, the step
/// before them, when it is 0) into `out` (rows from `first`), from the log
/// forward vector before the chunk and the log backward vector at its end.
#[allow(clippy::too_many_arguments)]
fn chunk_posterior<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], first: usize, steps: std::ops::Range<usize>, alpha0: &[f64], beta_end: &[f64], out: &mut [f64], mut counts: Option<&mut Counts>) -> bool {
    let n = tab.n;
    let mut buf = vec![0.0; n];
    let mut cur = vec![0.0; n];
    from_log(alpha0, &mut cur);
    let s: f64 = cur.iter().sum();
    cur.iter_mut().for_each(|v| *v /= s);
    // The forward vector before the chunk: a later chunk's first
    // transition comes from it.
    let before = cur.clone();
    let row_of = |t: usize| t - first;
    if first + 1 == steps.start {
        out[..n].copy_from_slice(&cur);
    }
    // Forward vectors (normalised to sum 1) into out.
    for t in steps.clone() {
        let row = tab.rows.row(seq[t], &mut buf);
        let nxt = &mut out[row_of(t) * n..(row_of(t) + 1) * n];
        nxt.fill(0.0);
        for (k, &a) in cur.iter().enumerate() {
            if a != 0.0 {
                for (x, &p) in nxt.iter_mut().zip(&tab.trans[k * n..(k + 1) * n]) {
                    *x += a * p;
                }
            }
        }
        nxt.iter_mut().zip(row.values).for_each(|(x, &e)| *x *= e);
        if largest(nxt) < FLOOR {
            return false;
        }
        let s: f64 = nxt.iter().sum();
        nxt.iter_mut().for_each(|v| *v /= s);
        cur.copy_from_slice(nxt);
    }
    // Backward: beta at the chunk's end, then step by step to `first`.
    let mut beta = vec![0.0; n];
    from_log(beta_end, &mut beta);
    let mut tmp = vec![0.0; n];
    let last = if steps.is_empty() { first } else { steps.end - 1 };
    for t in (first..=last).rev() {
        let g = &mut out[row_of(t) * n..(row_of(t) + 1) * n];
        g.iter_mut().zip(&beta).for_each(|(a, &b)| *a *= b);
        let z: f64 = g.iter().sum();
        if z < FLOOR {
            return false;
        }
        g.iter_mut().for_each(|v| *v /= z);
        if let Some(c) = counts.as_deref_mut() {
            tab.emission.add_stats(seq[t], g, &mut c.emis);
            if t == 0 {
                c.start.iter_mut().zip(g.iter()).for_each(|(x, &y)| *x += y);
            }
        }
        // The transition into t: from the forward vector of t - 1 (this
        // chunk's, or the one before the chunk).
        if t > 0 && (t > first || first + 1 != steps.start) {
            let row = tab.rows.row(seq[t], &mut buf);
            tmp.iter_mut().zip(row.values).zip(&beta).for_each(|((x, &e), &b)| *x = e * b);
            if let Some(c) = counts.as_deref_mut() {
                let prev = if t > first { &out[row_of(t - 1) * n..row_of(t) * n] } else { &before[..] };
                add_transitions(tab, prev, &tmp, c.exact_transitions());
            }
        }
        if t > first {
            for (i, b) in beta.iter_mut().enumerate() {
                *b = tab.trans[i * n..(i + 1) * n].iter().zip(&tmp).map(|(&p, &x)| p * x).sum();
            }
            let m = largest(&beta);
            if m < FLOOR {
                return false;
            }
            beta.iter_mut().for_each(|v| *v /= m);
        }
    }
    true
}

/// The Viterbi path of `seq` into `path` and its log-probability, by the
/// max-plus scan: chunk products, the best vector at each boundary with
/// back-pointers between boundaries, then each chunk's path from its
/// boundary states. Ties go to the lowest index, as in the sequential
/// decoder; the scan adds in another order, so a path can differ from
/// the sequential one only where two paths' log-probabilities agree to
/// rounding.
pub fn viterbi<E: Emission>(tab: &LogTables<E>, seq: &[E::Obs], ch: &Chunks, path: &mut [u32], exec: &Exec) -> Result<f64> {
    let n = tab.n;
    let c_count = ch.count();
    let mut prods = memory::try_vec(c_count * n * n, 0.0, "the scan's chunk products")?;
    exec.install(|| {
        prods.par_chunks_mut(n * n).enumerate().try_for_each(|(c, d)| {
            exec.monitor.check()?;
            let mut back = Vec::new();
            for i in 0..n {
                max_plus_row(tab, seq, ch.range(c), i, &mut d[i * n..(i + 1) * n], &mut back, false);
            }
            Ok::<(), crate::error::Error>(())
        })
    })??;
    // Boundary pass with back-pointers between boundaries.
    let mut buf = vec![0.0; n];
    let row0 = tab.rows.row(seq[0], &mut buf);
    let mut d: Vec<f64> = tab.start.iter().zip(row0.values).map(|(&p, &e)| p + e).collect();
    let mut nd = vec![0.0; n];
    let mut ptr = vec![0u32; c_count * n];
    for c in 0..c_count {
        let dc = &prods[c * n * n..(c + 1) * n * n];
        for j in 0..n {
            let (mut best, mut arg) = (f64::NEG_INFINITY, 0usize);
            for i in 0..n {
                let v = d[i] + dc[i * n + j];
                if v > best {
                    best = v;
                    arg = i;
                }
            }
            nd[j] = best;
            ptr[c * n + j] = arg as u32;
        }
        std::mem::swap(&mut d, &mut nd);
    }
    let (mut best, mut last) = (f64::NEG_INFINITY, 0usize);
    for (j, &v) in d.iter().enumerate() {
        if v > best {
            best = v;
            last = j;
        }
    }
    if best == f64::NEG_INFINITY {
        path.fill(NO_STATE);
        return Ok(best);
    }
    // States at the boundaries: ends[c] at chunk c's last step, starts[c]
    // at the step before it.
    let (mut ends, mut starts) = (vec![0usize; c_count], vec![0usize; c_count]);
    for c in (0..c_count).rev() {
        ends[c] = last;
        last = ptr[c * n + last] as usize;
        starts[c] = last;
    }
    path[0] = starts[0] as u32;
    // Each chunk's path, from its start state to its end state.
    let mut parts = Vec::with_capacity(c_count);
    let mut rest = &mut path[1..];
    for c in 0..c_count {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(ch.range(c).len());
        parts.push(head);
        rest = tail;
    }
    exec.install(|| {
        parts.into_par_iter().enumerate().try_for_each(|(c, part)| {
            exec.monitor.check()?;
            let steps = ch.range(c);
            let (mut row, mut back) = (vec![0.0; n], Vec::new());
            max_plus_row(tab, seq, steps.clone(), starts[c], &mut row, &mut back, true);
            let mut s = ends[c];
            for k in (0..steps.len()).rev() {
                part[k] = s as u32;
                s = back[k * n + s] as usize;
            }
            Ok::<(), crate::error::Error>(())
        })
    })??;
    Ok(best)
}

/// Row i of the max-plus product of the steps `steps`: the best log
/// probability of going from state i before them to each state at their
/// end, into `out`; with `keep`, the back-pointers of every step into
/// `back` (steps x N).
fn max_plus_row<E: Emission>(tab: &LogTables<E>, seq: &[E::Obs], steps: std::ops::Range<usize>, i: usize, out: &mut [f64], back: &mut Vec<u32>, keep: bool) {
    let n = tab.n;
    let mut cur = vec![f64::NEG_INFINITY; n];
    cur[i] = 0.0;
    let mut buf = vec![0.0; n];
    if keep {
        back.clear();
        back.resize(steps.len() * n, 0);
    }
    for (k, t) in steps.enumerate() {
        let e = tab.rows.row(seq[t], &mut buf).values;
        for j in 0..n {
            let col = &tab.trans_t[j * n..(j + 1) * n];
            let (mut best, mut arg) = (f64::NEG_INFINITY, 0usize);
            for (q, (&dv, &a)) in cur.iter().zip(col).enumerate() {
                let v = dv + a;
                if v > best {
                    best = v;
                    arg = q;
                }
            }
            out[j] = best + e[j];
            if keep {
                back[k * n + j] = arg as u32;
            }
        }
        cur.copy_from_slice(out);
    }
    out.copy_from_slice(&cur);
}
