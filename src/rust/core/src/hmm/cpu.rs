//! The CPU backend: sequences run in parallel (rayon) in fixed chunks.
//! Each sequence is computed sequentially, and Baum-Welch counts are summed
//! chunk by chunk in chunk order, so results never depend on the thread count.
//! A sequence the scaled recursions cannot certify is computed in log space
//! ([`super::robust`]); either way the result is exact to rounding.

use std::ops::Range;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::exec::{Exec, Monitor};
use crate::memory;

use super::backward::Counts;
use super::emission::Emission;
use super::passes::{self, FastScratch, FbScratch, Fast, Outcome};
use super::robust::{self, Robust};
use super::sequences::Sequences;
use super::size::{self, COUNT_BUDGET_BYTES};
use super::tables::{LogTables, Tables};
use super::viterbi::{self, Pointer};

/// Symbols per chunk at least up to 8 states (amortises scratch allocation
/// and progress); see [`min_chunk_symbols`].
pub(crate) const MIN_CHUNK_SYMBOLS: usize = 4096;
/// At most this many chunks, so the threads stay busy without too many
/// partial count accumulators.
pub(crate) const MAX_CHUNKS: usize = 256;

/// Symbols per chunk at least with N states: [`MIN_CHUNK_SYMBOLS`] up to 8
/// states, fewer beyond as a symbol's work grows (N^2), so that a call of
/// few symbols but many states still spreads over the threads (512 states
/// x 8,192 symbols ran on 2 threads of 16: BENCHMARKS.md, "HMM backend
/// choice by the call's shape").
pub(crate) fn min_chunk_symbols(n: usize) -> usize {
    (MIN_CHUNK_SYMBOLS * 64 / (n * n).max(64)).max(1)
}

/// Split the sequences into consecutive chunks of about equal symbol counts.
/// Depends only on the data and the model size (N states, `counts_size`
/// values of a chunk's counts), never on the thread count.
pub(crate) fn chunks<O: Copy>(seqs: &Sequences<O>, n: usize, counts_size: usize) -> Vec<Range<usize>> {
    let max_chunks = MAX_CHUNKS.min((COUNT_BUDGET_BYTES / (8 * counts_size.max(1))).max(1));
    let target = min_chunk_symbols(n).max(seqs.total().div_ceil(max_chunks));
    let mut out = Vec::new();
    let mut begin = 0;
    for s in 0..seqs.len() {
        if seqs.offsets[s + 1] - seqs.offsets[begin] >= target {
            out.push(begin..s + 1);
            begin = s + 1;
        }
    }
    if begin < seqs.len() {
        out.push(begin..seqs.len());
    }
    out
}

/// Split `out` (laid out like the symbols, `width` values per symbol) into
/// one mutable part per chunk.
fn split_by_chunks<'a, T, O: Copy>(mut out: &'a mut [T], seqs: &Sequences<O>, chunks: &[Range<usize>], width: usize) -> Vec<&'a mut [T]> {
    let mut parts = Vec::with_capacity(chunks.len());
    for c in chunks {
        let len = (seqs.offsets[c.end] - seqs.offsets[c.start]) * width;
        let (head, tail) = std::mem::take(&mut out).split_at_mut(len);
        parts.push(head);
        out = tail;
    }
    parts
}

/// Run `one(scratch, s, rows)` for every sequence `s`, in parallel chunks,
/// where `rows` is the sequence's part of `out` (`width` values per symbol)
/// and `scratch` is reused within a chunk; returns `one`'s values in order.
fn per_sequence<T: Send, S: Default, O: Copy + Sync>(
    n: usize,
    seqs: &Sequences<O>,
    exec: &Exec,
    out: &mut [T],
    width: usize,
    one: impl Fn(&mut S, usize, &mut [T]) -> Result<f64> + Sync,
) -> Result<Vec<f64>> {
    let chunks = chunks(seqs, n, 0);
    let parts = split_by_chunks(out, seqs, &chunks, width);
    let per_chunk: Vec<Result<Vec<f64>>> = exec.install(|| {
        chunks
            .par_iter()
            .zip(parts)
            .map(|(c, part)| {
                exec.monitor.check()?;
                let mut scratch = S::default();
                let base = seqs.offsets[c.start];
                let values = c
                    .clone()
                    .map(|s| one(&mut scratch, s, &mut part[(seqs.offsets[s] - base) * width..(seqs.offsets[s + 1] - base) * width]))
                    .collect::<Result<Vec<f64>>>()?;
                exec.monitor.add_done(c.len());
                Ok(values)
            })
            .collect()
    })?;
    exec.monitor.check()?;
    let mut out = Vec::with_capacity(seqs.len());
    for part in per_chunk {
        out.extend(part?);
    }
    Ok(out)
}

/// Scratch of one chunk's sequences.
#[derive(Default)]
struct SeqScratch {
    buf: Vec<f64>,
    fast: FastScratch,
    rs: robust::Scratch,
    fb: FbScratch,
}

fn certain(outcome: Outcome) -> Result<f64> {
    match outcome {
        Outcome::LogLik(l) => Ok(l),
        Outcome::Uncertain => Err(Error::Internal("the log-space pass reported an uncertain step".into())),
    }
}

/// log P(seq): the scaled pass, or the log-space one where it cannot certify.
fn loglik_one<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], sc: &mut SeqScratch, monitor: &Monitor) -> Result<f64> {
    if !tab.extreme() {
        if let Outcome::LogLik(l) = passes::forward_only(&Fast(tab), tab.n, seq, &mut sc.buf, &mut sc.fast, monitor)? {
            return Ok(l);
        }
    }
    let r = Robust { tab, ls: tab.log_space()? };
    certain(passes::forward_only(&r, tab.n, seq, &mut sc.buf, &mut sc.rs, monitor)?)
}

/// Forward-backward over one sequence (see [`passes::forward_backward`]),
/// in log space where the scaled pass cannot certify it.
fn forward_backward_one<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], seg: usize, mut rows: Option<&mut [f64]>, sc: &mut SeqScratch, mut counts: Option<&mut Counts>, monitor: &Monitor) -> Result<f64> {
    if !tab.extreme() {
        let fast = Fast(tab);
        if let Outcome::LogLik(l) = passes::forward_backward(&fast, tab.n, seq, seg, rows.as_deref_mut(), &mut sc.fb, &mut sc.fast, counts.as_deref_mut(), monitor)? {
            return Ok(l);
        }
    }
    let r = Robust { tab, ls: tab.log_space()? };
    certain(passes::forward_backward(&r, tab.n, seq, seg, rows, &mut sc.fb, &mut sc.rs, counts, monitor)?)
}

pub fn loglik<E: Emission>(tab: &Tables<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<Vec<f64>> {
    per_sequence(tab.n, seqs, exec, &mut [0u8; 0], 0, |sc: &mut SeqScratch, s, _| loglik_one(tab, seqs.get(s), sc, &exec.monitor))
}

/// Viterbi paths (flat, laid out like the symbols) and their log-probabilities.
pub fn viterbi<E: Emission>(tab: &LogTables<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<(Vec<u32>, Vec<f64>)> {
    let job = size::HmmJob::of(size::Pass::Viterbi, tab.n, 0, seqs, exec.threads);
    let seg = size::viterbi_segment(tab.n, job.longest, job.concurrent);
    let mut paths = passes::zeroed(seqs.total(), "the Viterbi paths")?;
    fn run<E: Emission, P: Pointer + Send>(tab: &LogTables<E>, seqs: &Sequences<E::Obs>, exec: &Exec, seg: usize, paths: &mut [u32]) -> Result<Vec<f64>> {
        per_sequence(tab.n, seqs, exec, paths, 1, |s: &mut viterbi::Scratch<P>, q, path| viterbi::viterbi(tab, seqs.get(q), path, seg, s, &exec.monitor))
    }
    let logp = if size::pointer_bytes(tab.n) == 2 { run::<E, u16>(tab, seqs, exec, seg, &mut paths)? } else { run::<E, u32>(tab, seqs, exec, seg, &mut paths)? };
    Ok((paths, logp))
}

/// Posterior state probabilities, `total symbols x N` time-major, and the
/// log-likelihood of each sequence. An impossible sequence gets NaN rows.
/// The forward pass writes its vectors into the output, which the backward
/// pass turns into posteriors: no memory beyond the output.
pub fn posterior<E: Emission>(tab: &Tables<E>, seqs: &Sequences<E::Obs>, exec: &Exec) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = tab.n;
    let len = seqs.total().checked_mul(n).ok_or_else(|| Error::OutOfMemory { what: "the posterior probabilities".into(), needed: memory::bytes::<f64>(&[seqs.total(), n]), available: memory::available() })?;
    let mut post = passes::zeroed(len, "the posterior probabilities")?;
    let ll = per_sequence(tab.n, seqs, exec, &mut post, n, |sc: &mut SeqScratch, s, rows| {
        let seq = seqs.get(s);
        let ll = forward_backward_one(tab, seq, seq.len(), Some(&mut *rows), sc, None, &exec.monitor)?;
        if ll == f64::NEG_INFINITY {
            rows.fill(f64::NAN);
        }
        Ok(ll)
    })?;
    Ok((post, ll))
}

/// One E-step over all sequences: expected counts and the total
/// log-likelihood; also the first impossible sequence (0-based), if any.
/// Sequences too long for their forward vectors to fit in memory run in
/// checkpointed segments (`seg` steps).
pub fn e_step<E: Emission>(tab: &Tables<E>, seqs: &Sequences<E::Obs>, chunks: &[Range<usize>], seg: usize, exec: &Exec) -> Result<(Counts, f64, Option<usize>)> {
    let (n, v) = (tab.n, tab.emission.n_stats());
    let per_chunk: Vec<Result<(Counts, f64, Option<usize>)>> = exec.install(|| {
        chunks
            .par_iter()
            .map(|c| {
                exec.monitor.check()?;
                let mut counts = Counts::zeros(n, v)?;
                let (mut ll, mut impossible) = (0.0, None);
                let mut sc = SeqScratch::default();
                for s in c.clone() {
                    let l = forward_backward_one(tab, seqs.get(s), seg, None, &mut sc, Some(&mut counts), &exec.monitor)?;
                    if l == f64::NEG_INFINITY {
                        impossible.get_or_insert(s);
                        ll = f64::NEG_INFINITY;
                        continue;
                    }
                    ll += l;
                }
                Ok((counts, ll, impossible))
            })
            .collect()
    })?;
    exec.monitor.check()?;
    let mut total = Counts::zeros(n, v)?;
    let (mut ll, mut impossible) = (0.0, None);
    for part in per_chunk {
        let (c, l, imp) = part?;
        total.add(&c);
        ll += l;
        if impossible.is_none() {
            impossible = imp;
        }
    }
    Ok((total, ll, impossible))
}

/// The segment length of the Baum-Welch passes over `seqs` (see
/// [`size::fit_segment`]).
pub(crate) fn fit_segment<O: Copy>(n: usize, seqs: &Sequences<O>, exec: &Exec) -> usize {
    let job = size::HmmJob::of(size::Pass::Fit, n, 0, seqs, exec.threads);
    size::fit_segment(n, job.longest, job.concurrent)
}

/// Consecutive chunks of `which` (indices of sequences) of about equal
/// symbol counts, as [`chunks`] makes of all sequences.
fn chunks_of<O: Copy>(seqs: &Sequences<O>, which: &[usize], n: usize) -> Vec<Range<usize>> {
    let target = min_chunk_symbols(n).max(which.iter().map(|&s| seqs.offsets[s + 1] - seqs.offsets[s]).sum::<usize>().div_ceil(MAX_CHUNKS));
    let (mut out, mut begin, mut acc) = (Vec::new(), 0, 0);
    for (k, &s) in which.iter().enumerate() {
        acc += seqs.offsets[s + 1] - seqs.offsets[s];
        if acc >= target {
            out.push(begin..k + 1);
            begin = k + 1;
            acc = 0;
        }
    }
    if begin < which.len() {
        out.push(begin..which.len());
    }
    out
}

/// Expected counts and log-likelihoods of the given sequences (0-based
/// indices): the GPU backend's sequences that its scaled kernels could not
/// certify. In parallel chunks, summed in chunk order.
pub(crate) fn counts_of<E: Emission>(tab: &Tables<E>, seqs: &Sequences<E::Obs>, which: &[usize], seg: usize, exec: &Exec) -> Result<(Counts, Vec<f64>)> {
    let (n, v) = (tab.n, tab.emission.n_stats());
    let per_chunk: Vec<Result<(Counts, Vec<f64>)>> = exec.install(|| {
        chunks_of(seqs, which, n)
            .par_iter()
            .map(|c| {
                exec.monitor.check()?;
                let mut counts = Counts::zeros(n, v)?;
                let mut sc = SeqScratch::default();
                let lls = which[c.clone()]
                    .iter()
                    .map(|&s| forward_backward_one(tab, seqs.get(s), seg, None, &mut sc, Some(&mut counts), &exec.monitor))
                    .collect::<Result<Vec<f64>>>()?;
                Ok((counts, lls))
            })
            .collect()
    })?;
    let (mut total, mut lls) = (Counts::zeros(n, v)?, Vec::with_capacity(which.len()));
    for part in per_chunk {
        let (c, l) = part?;
        total.add(&c);
        lls.extend(l);
    }
    Ok((total, lls))
}

/// Log-likelihoods of the given sequences (see [`counts_of`]).
pub(crate) fn loglik_of<E: Emission>(tab: &Tables<E>, seqs: &Sequences<E::Obs>, which: &[usize], exec: &Exec) -> Result<Vec<f64>> {
    let per_chunk: Vec<Result<Vec<f64>>> = exec.install(|| {
        chunks_of(seqs, which, tab.n)
            .par_iter()
            .map(|c| {
                exec.monitor.check()?;
                let mut sc = SeqScratch::default();
                which[c.clone()].iter().map(|&s| loglik_one(tab, seqs.get(s), &mut sc, &exec.monitor)).collect()
            })
            .collect()
    })?;
    let mut out = Vec::with_capacity(which.len());
    for part in per_chunk {
        out.extend(part?);
    }
    Ok(out)
}

/// Posteriors (into `rows`, T x N) and log-likelihood of sequence `s`.
pub(crate) fn posterior_of<E: Emission>(tab: &Tables<E>, seq: &[E::Obs], rows: &mut [f64], monitor: &Monitor) -> Result<f64> {
    let mut sc = SeqScratch::default();
    let ll = forward_backward_one(tab, seq, seq.len(), Some(&mut *rows), &mut sc, None, monitor)?;
    if ll == f64::NEG_INFINITY {
        rows.fill(f64::NAN);
    }
    Ok(ll)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hmm::model::HmmModel;

    fn model() -> HmmModel {
        HmmModel::new(vec![0.6, 0.3, 0.1], vec![0.8, 0.15, 0.05, 0.1, 0.7, 0.2, 0.3, 0.3, 0.4], vec![0.5, 0.4, 0.1, 0.1, 0.3, 0.6, 0.2, 0.2, 0.6], 3).unwrap()
    }

    fn seqs() -> Sequences {
        let mut x = 7u64;
        let v: Vec<Vec<u32>> = [1usize, 2, 7, 50, 333]
            .iter()
            .map(|&t| {
                (0..t)
                    .map(|_| {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        ((x >> 33) % 3) as u32
                    })
                    .collect()
            })
            .collect();
        Sequences::from_vecs(&v)
    }

    #[test]
    fn segmented_passes_give_the_same_results() {
        let (m, seqs) = (model(), seqs());
        let tab = Tables::new(&m).unwrap();
        let exec = Exec::cpu().threads(2);
        let chunks = chunks(&seqs, 3, Counts::size(3, 3));
        let (full, ll, _) = e_step(&tab, &seqs, &chunks, usize::MAX, &exec).unwrap();
        for seg in [1, 2, 5, 18] {
            let (c, l, _) = e_step(&tab, &seqs, &chunks, seg, &exec).unwrap();
            assert_eq!(l, ll);
            assert_eq!(c, full, "seg {seg}");
        }
        let lt = LogTables::new(&m).unwrap();
        let mut s = viterbi::Scratch::<u16>::default();
        let monitor = Monitor::new();
        for q in 0..seqs.len() {
            let seq = seqs.get(q);
            let mut want = vec![0; seq.len()];
            let best = viterbi::viterbi(&lt, seq, &mut want, usize::MAX, &mut s, &monitor).unwrap();
            for seg in [1, 2, 3, 17, 100] {
                let mut got = vec![0; seq.len()];
                assert_eq!(viterbi::viterbi(&lt, seq, &mut got, seg, &mut s, &monitor).unwrap(), best);
                assert_eq!(got, want, "seg {seg}");
            }
        }
    }

    #[test]
    fn the_log_space_passes_agree_with_the_scaled_ones() {
        let (m, seqs) = (model(), seqs());
        let tab = Tables::new(&m).unwrap();
        let r = Robust { tab: &tab, ls: tab.log_space().unwrap() };
        let monitor = Monitor::new();
        let (mut fb, mut rs, mut tmp) = (FbScratch::default(), robust::Scratch::default(), FastScratch::default());
        for q in 0..seqs.len() {
            let seq = seqs.get(q);
            let n = 3;
            let (mut a, mut b) = (vec![0.0; seq.len() * n], vec![0.0; seq.len() * n]);
            let (mut ca, mut cb) = (Counts::zeros(3, 3).unwrap(), Counts::zeros(3, 3).unwrap());
            let la = passes::forward_backward(&Fast(&tab), n, seq, seq.len(), Some(&mut a), &mut fb, &mut tmp, None, &monitor).unwrap();
            let lb = passes::forward_backward(&r, n, seq, seq.len(), Some(&mut b), &mut fb, &mut rs, None, &monitor).unwrap();
            let (Outcome::LogLik(la), Outcome::LogLik(lb)) = (la, lb) else { panic!("uncertain") };
            assert!((la - lb).abs() < 1e-12 * la.abs().max(1.0), "{la} vs {lb}");
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() < 1e-12, "posterior {x} vs {y}");
            }
            passes::forward_backward(&Fast(&tab), n, seq, 4, None, &mut fb, &mut tmp, Some(&mut ca), &monitor).unwrap();
            passes::forward_backward(&r, n, seq, 3, None, &mut fb, &mut rs, Some(&mut cb), &monitor).unwrap();
            for i in 0..3 {
                for j in 0..3 {
                    let (x, y) = (ca.transitions(&m.trans, i, j), cb.transitions(&m.trans, i, j));
                    assert!((x - y).abs() < 1e-10 * x.abs().max(1.0), "xi {x} vs {y}");
                }
            }
            for (x, y) in ca.emis.iter().zip(&cb.emis).chain(ca.start.iter().zip(&cb.start)) {
                assert!((x - y).abs() < 1e-10 * x.abs().max(1.0), "counts {x} vs {y}");
            }
        }
    }

    #[test]
    fn a_cancelled_monitor_stops_one_long_sequence() {
        let m = model();
        let tab = Tables::new(&m).unwrap();
        let seq: Vec<u32> = (0..2_000_000u32).map(|t| t % 3).collect();
        let monitor = Monitor::new();
        monitor.cancel();
        let mut sc = SeqScratch::default();
        assert_eq!(loglik_one(&tab, &seq, &mut sc, &monitor), Err(Error::Interrupted));
        let lt = LogTables::new(&m).unwrap();
        let mut path = vec![0; seq.len()];
        assert_eq!(viterbi::viterbi(&lt, &seq, &mut path, usize::MAX, &mut viterbi::Scratch::<u16>::default(), &monitor), Err(Error::Interrupted));
    }
}
