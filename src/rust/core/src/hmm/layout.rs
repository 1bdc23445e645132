//! Results laid out as a caller keeps them: one column-major matrix per
//! sequence (R's `matrix`, T x N), from the passes' time-major rows of N
//! values, and one 1-based state vector per sequence from the flat Viterbi
//! paths. Done once, in parallel, straight into the caller's memory: R
//! copied the flat posteriors four times on one thread (converting,
//! replacing NaN, extracting, transposing), about 1.5 s of a 2.8 s
//! `hmm_posterior()` call for 2 x 10^6 observations x 32 states, and split
//! the paths of 10^5 sequences x 200 in 0.19 s, 14x the GPU's Viterbi
//! (BENCHMARKS.md).

use rayon::prelude::*;

use super::Paths;

/// Bytes of a sequence's rows read by one task: its block of rows stays in
/// the core's L2 cache while each column is written.
const BLOCK_BYTES: usize = 1 << 17;

/// A sequence's output, written by several tasks at disjoint positions.
#[derive(Clone, Copy)]
struct Out(*mut f64, usize);
// SAFETY: tasks write disjoint positions of the buffer (see below), which
// outlives them.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// Sequence s's rows of `rows` (time-major, `n` values per observation; the
/// sequences at `offsets`, one more than there are sequences) into
/// `out[s]` as a T_s x n column-major matrix, NaN replaced by `missing`.
/// Runs in the calling thread's pool.
pub fn columns_by_sequence(rows: &[f64], offsets: &[usize], n: usize, out: &mut [&mut [f64]], missing: f64) {
    assert_eq!(offsets.len(), out.len() + 1, "one output per sequence");
    assert_eq!(rows.len(), offsets.last().copied().unwrap_or(0) * n, "n values per observation");
    let block = (BLOCK_BYTES / (8 * n.max(1))).max(16);
    // Tasks: (sequence, first row, end row).
    let tasks: Vec<(usize, usize, usize)> = (0..out.len())
        .flat_map(|s| {
            let t = offsets[s + 1] - offsets[s];
            (0..t).step_by(block).map(move |r| (s, r, (r + block).min(t)))
        })
        .collect();
    let outs: Vec<Out> = out
        .iter_mut()
        .enumerate()
        .map(|(s, o)| {
            assert_eq!(o.len(), (offsets[s + 1] - offsets[s]) * n, "output {s} holds its sequence's values");
            Out(o.as_mut_ptr(), o.len())
        })
        .collect();
    tasks.par_iter().for_each(|&(s, r0, r1)| {
        let t = offsets[s + 1] - offsets[s];
        let src = &rows[(offsets[s] + r0) * n..(offsets[s] + r1) * n];
        let Out(ptr, len) = outs[s];
        for j in 0..n {
            debug_assert!(j * t + r1 <= len);
            // SAFETY: column j's rows r0..r1 of sequence s, inside its
            // buffer (asserted above), are written by this task only.
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr.add(j * t + r0), r1 - r0) };
            for (i, d) in dst.iter_mut().enumerate() {
                let v = src[i * n + j];
                *d = if v.is_nan() { missing } else { v };
            }
        }
    });
}

/// Where a posterior pass writes its probabilities.
pub(crate) enum PosteriorOut<'a, 'b> {
    /// Time-major rows, N values per observation (NaN rows for an
    /// impossible sequence).
    Rows(&'a mut [f64]),
    /// One T_s x N column-major buffer per sequence (R's matrices), NaN as
    /// the value given ([`columns_by_sequence`]).
    Columns(&'a mut [&'b mut [f64]], f64),
}

impl<'b> PosteriorOut<'_, 'b> {
    /// The parts of consecutive groups of `counts` sequences (each group's
    /// `values` values in all), for the shares of a call.
    pub(crate) fn parts(&mut self, counts: &[usize], values: &[usize]) -> Vec<PosteriorOut<'_, 'b>> {
        match self {
            PosteriorOut::Rows(rows) => cut(rows, values.iter().copied()).into_iter().map(PosteriorOut::Rows).collect(),
            PosteriorOut::Columns(outs, missing) => {
                let missing = *missing;
                cut(outs, counts.iter().copied()).into_iter().map(|o| PosteriorOut::Columns(o, missing)).collect()
            }
        }
    }

    /// Sequence s's rows (time-major, its T_s x N values; the sequences at
    /// `offsets`) in their place.
    pub(crate) fn put(&mut self, s: usize, offsets: &[usize], n: usize, rows: &[f64]) {
        match self {
            PosteriorOut::Rows(all) => all[offsets[s] * n..offsets[s + 1] * n].copy_from_slice(rows),
            PosteriorOut::Columns(outs, missing) => columns_by_sequence(rows, &[0, offsets[s + 1] - offsets[s]], n, &mut [&mut *outs[s]], *missing),
        }
    }
}

/// `v` in consecutive parts of `lens` items (the rest, if any, left out).
pub fn cut<T>(mut v: &mut [T], lens: impl IntoIterator<Item = usize>) -> Vec<&mut [T]> {
    let lens = lens.into_iter();
    let mut parts = Vec::with_capacity(lens.size_hint().0);
    for len in lens {
        let (head, rest) = std::mem::take(&mut v).split_at_mut(len);
        parts.push(head);
        v = rest;
    }
    parts
}

/// One buffer of every sequence's values end to end (`width` per
/// observation; the sequences at `offsets`: R's array of them) cut into
/// each sequence's part, as [`columns_by_sequence`] and the passes'
/// `_into` functions take them.
pub fn per_sequence<'a, T>(all: &'a mut [T], offsets: &[usize], width: usize) -> Vec<&'a mut [T]> {
    cut(all, offsets.windows(2).map(|w| (w[1] - w[0]) * width))
}

/// Sequence s's part of the flat Viterbi `paths` (0-based states, the
/// sequences at `offsets`) into `out[s]` as 1-based states, [`NO_STATE`]
/// as `missing`. Runs in the calling thread's pool.
///
/// [`NO_STATE`]: super::NO_STATE
pub fn paths_by_sequence(paths: &Paths, offsets: &[usize], out: &mut [&mut [i32]], missing: i32) {
    assert_eq!(offsets.len(), out.len() + 1, "one output per sequence");
    assert_eq!(paths.len(), offsets.last().copied().unwrap_or(0), "one state per observation");
    // Sequences in groups of about BLOCK_BYTES of states, so that many
    // short sequences are not a task each.
    let per_task = BLOCK_BYTES / 4;
    let mut groups: Vec<(usize, &mut [&mut [i32]])> = Vec::new();
    let (mut rest, mut s0) = (out, 0);
    while !rest.is_empty() {
        let mut s1 = s0 + 1;
        while s1 < offsets.len() - 1 && offsets[s1] - offsets[s0] < per_task {
            s1 += 1;
        }
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(s1 - s0);
        groups.push((s0, head));
        (rest, s0) = (tail, s1);
    }
    groups.into_par_iter().for_each(|(s0, outs)| {
        for (i, o) in outs.iter_mut().enumerate() {
            let (a, b) = (offsets[s0 + i], offsets[s0 + i + 1]);
            assert_eq!(o.len(), b - a, "output {} holds its sequence's states", s0 + i);
            paths.write_one_based(a, o, missing);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_buffer_cuts_into_each_sequences_part() {
        let mut all: Vec<u32> = (0..14).collect();
        // Sequences of 2, 0 and 5 observations, 2 values each.
        let parts = per_sequence(&mut all, &[0, 2, 2, 7], 2);
        assert_eq!(parts.iter().map(|p| p.to_vec()).collect::<Vec<_>>(), vec![vec![0, 1, 2, 3], vec![], (4..14).collect()]);
        assert_eq!(cut(&mut [1, 2, 3][..], [1, 1]).len(), 2);
    }

    #[test]
    fn each_path_becomes_its_one_based_vector() {
        // Sequences of 3, 0, 1 and 70,000 states (past one group), the
        // second-last impossible.
        let offsets = [0usize, 3, 3, 4, 70_004];
        let paths: Vec<u32> = (0..offsets[4]).map(|k| if k == 3 { crate::hmm::NO_STATE } else { (k % 5) as u32 }).collect();
        for paths in [Paths::Full(paths.clone()), crate::hmm::paths::tests::narrowed(&paths, 1), crate::hmm::paths::tests::narrowed(&paths, 2)] {
            let mut bufs: Vec<Vec<i32>> = offsets.windows(2).map(|w| vec![-1; w[1] - w[0]]).collect();
            let mut outs: Vec<&mut [i32]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
            paths_by_sequence(&paths, &offsets, &mut outs, i32::MIN);
            for (s, b) in bufs.iter().enumerate() {
                for (r, &v) in b.iter().enumerate() {
                    let k = offsets[s] + r;
                    let want = if k == 3 { i32::MIN } else { (k % 5) as i32 + 1 };
                    assert_eq!(v, want, "sequence {s}, position {r}");
                }
            }
        }
    }

    #[test]
    fn each_sequence_becomes_its_column_major_matrix() {
        // Sequences of 3, 1 and 40,000 rows (several blocks), 3 states.
        let offsets = [0usize, 3, 4, 40_004];
        let n = 3;
        let rows: Vec<f64> = (0..offsets[3] * n).map(|k| if k == 4 { f64::NAN } else { k as f64 }).collect();
        let mut bufs: Vec<Vec<f64>> = offsets.windows(2).map(|w| vec![-1.0; (w[1] - w[0]) * n]).collect();
        let mut outs: Vec<&mut [f64]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        columns_by_sequence(&rows, &offsets, n, &mut outs, -7.0);
        for (s, b) in bufs.iter().enumerate() {
            let t = offsets[s + 1] - offsets[s];
            for r in 0..t {
                for j in 0..n {
                    let k = (offsets[s] + r) * n + j;
                    let want = if k == 4 { -7.0 } else { k as f64 };
                    assert_eq!(b[j * t + r], want, "sequence {s}, row {r}, column {j}");
                }
            }
        }
    }
}
