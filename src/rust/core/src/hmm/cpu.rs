//! The CPU backend: sequences run in parallel (rayon) in fixed chunks.
//! Each sequence is computed sequentially, and Baum-Welch counts are summed
//! chunk by chunk in chunk order, so results never depend on the thread count.

use std::ops::Range;

use rayon::prelude::*;

use crate::error::Result;
use crate::exec::Exec;

use super::backward::{add_counts, backward, Counts};
use super::forward::{forward_all, loglik as loglik_one};
use super::sequences::Sequences;
use super::tables::{LogTables, Tables};
use super::viterbi::viterbi as viterbi_one;

/// Symbols per chunk at least (amortises scratch allocation and progress).
const MIN_CHUNK_SYMBOLS: usize = 4096;
/// At most this many chunks, so the threads stay busy without too many
/// partial count accumulators.
const MAX_CHUNKS: usize = 256;
/// Memory for the per-chunk count accumulators of one Baum-Welch pass.
const COUNT_BUDGET_BYTES: usize = 256 << 20;

/// Split the sequences into consecutive chunks of about equal symbol counts.
/// Depends only on the data and the model size, never on the thread count.
pub(crate) fn chunks(seqs: &Sequences, counts_size: usize) -> Vec<Range<usize>> {
    let max_chunks = MAX_CHUNKS.min((COUNT_BUDGET_BYTES / (8 * counts_size.max(1))).max(1));
    let target = MIN_CHUNK_SYMBOLS.max(seqs.total().div_ceil(max_chunks));
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
fn split_by_chunks<'a, T>(mut out: &'a mut [T], seqs: &Sequences, chunks: &[Range<usize>], width: usize) -> Vec<&'a mut [T]> {
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
fn per_sequence<T: Send, S: Default>(
    seqs: &Sequences,
    exec: &Exec,
    out: &mut [T],
    width: usize,
    one: impl Fn(&mut S, usize, &mut [T]) -> f64 + Sync,
) -> Result<Vec<f64>> {
    let chunks = chunks(seqs, 0);
    let parts = split_by_chunks(out, seqs, &chunks, width);
    let per_chunk: Vec<Vec<f64>> = exec.install(|| {
        chunks
            .par_iter()
            .zip(parts)
            .map(|(c, part)| {
                if exec.monitor.is_cancelled() {
                    return Vec::new();
                }
                let mut scratch = S::default();
                let base = seqs.offsets[c.start];
                let values = c
                    .clone()
                    .map(|s| one(&mut scratch, s, &mut part[(seqs.offsets[s] - base) * width..(seqs.offsets[s + 1] - base) * width]))
                    .collect();
                exec.monitor.add_done(c.len());
                values
            })
            .collect()
    })?;
    exec.monitor.check()?;
    Ok(per_chunk.concat())
}

pub fn loglik(tab: &Tables, seqs: &Sequences, exec: &Exec) -> Result<Vec<f64>> {
    per_sequence(seqs, exec, &mut [0u8; 0], 0, |buf: &mut Vec<f64>, s, _| loglik_one(tab, seqs.get(s), buf))
}

/// Viterbi paths (flat, laid out like the symbols) and their log-probabilities.
pub fn viterbi(tab: &LogTables, seqs: &Sequences, exec: &Exec) -> Result<(Vec<u32>, Vec<f64>)> {
    let mut paths = vec![0u32; seqs.total()];
    let logp = per_sequence(seqs, exec, &mut paths, 1, |(back, buf): &mut (Vec<u32>, Vec<f64>), s, path| {
        viterbi_one(tab, seqs.get(s), path, back, buf)
    })?;
    Ok((paths, logp))
}

/// Posterior state probabilities, `total symbols x N` time-major, and the
/// log-likelihood of each sequence. An impossible sequence gets NaN rows.
pub fn posterior(tab: &Tables, seqs: &Sequences, exec: &Exec) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = tab.n;
    let mut post = vec![0.0; seqs.total() * n];
    let ll = per_sequence(seqs, exec, &mut post, n, |(alpha, scale, buf): &mut (Vec<f64>, Vec<f64>, Vec<f64>), s, rows| {
        let seq = seqs.get(s);
        let ll = forward_all(tab, seq, alpha, scale);
        if ll == f64::NEG_INFINITY {
            rows.fill(f64::NAN);
        } else {
            backward(tab, seq, alpha, scale, buf, None, |t, g| rows[t * n..(t + 1) * n].copy_from_slice(g));
        }
        ll
    })?;
    Ok((post, ll))
}

/// One E-step over all sequences: expected counts and the total
/// log-likelihood; also the first impossible sequence (0-based), if any.
pub fn e_step(tab: &Tables, seqs: &Sequences, chunks: &[Range<usize>], exec: &Exec) -> Result<(Counts, f64, Option<usize>)> {
    let (n, v) = (tab.n, tab.v);
    let per_chunk: Vec<(Counts, f64, Option<usize>)> = exec.install(|| {
        chunks
            .par_iter()
            .map(|c| {
                let mut counts = Counts::zeros(n, v);
                let (mut ll, mut impossible) = (0.0, None);
                if exec.monitor.is_cancelled() {
                    return (counts, ll, impossible);
                }
                let (mut alpha, mut scale, mut buf) = (Vec::new(), Vec::new(), Vec::new());
                for s in c.clone() {
                    let seq = seqs.get(s);
                    let l = forward_all(tab, seq, &mut alpha, &mut scale);
                    if l == f64::NEG_INFINITY {
                        impossible.get_or_insert(s);
                        ll = f64::NEG_INFINITY;
                        continue;
                    }
                    ll += l;
                    add_counts(tab, seq, &alpha, &scale, &mut buf, &mut counts);
                }
                (counts, ll, impossible)
            })
            .collect()
    })?;
    exec.monitor.check()?;
    let mut total = Counts::zeros(n, v);
    let (mut ll, mut impossible) = (0.0, None);
    for (c, l, imp) in &per_chunk {
        total.add(c);
        ll += l;
        if impossible.is_none() {
            impossible = *imp;
        }
    }
    Ok((total, ll, impossible))
}
