//! The most probable state path, in log space:
//!
//! ```text
//! delta_1(j) = log pi_j + log B_j(o_1)
//! delta_t(j) = max_i [delta_{t-1}(i) + log A_ij] + log B_j(o_t)
//! ```
//! Ties go to the lowest state index, both in the final argmax and in every
//! back-pointer, so the path is deterministic. An impossible sequence has
//! log-probability -inf and no path.

use super::tables::LogTables;

/// State index marking "no path" (impossible sequence).
pub const NO_STATE: u32 = u32::MAX;

/// Decode one sequence into `path` (length T, 0-based states); returns the
/// log-probability of the path. `back` holds T x N back-pointers and `buf`
/// 2N values (scratch, reused between sequences).
pub fn viterbi(tab: &LogTables, seq: &[u32], path: &mut [u32], back: &mut Vec<u32>, buf: &mut Vec<f64>) -> f64 {
    let n = tab.n;
    let t_len = seq.len();
    back.resize(t_len * n, 0);
    buf.resize(2 * n, 0.0);
    let (mut cur, mut nxt) = buf.split_at_mut(n);
    for ((d, &s), &e) in cur.iter_mut().zip(&tab.start).zip(tab.emis_of(seq[0])) {
        *d = s + e;
    }
    for t in 1..t_len {
        let e = tab.emis_of(seq[t]);
        let bp = &mut back[t * n..(t + 1) * n];
        for j in 0..n {
            let col = &tab.trans_t[j * n..(j + 1) * n];
            let (mut best, mut arg) = (f64::NEG_INFINITY, 0u32);
            for (i, (&d, &a)) in cur.iter().zip(col).enumerate() {
                let v = d + a;
                // Strict: an equal later value never replaces the lower index.
                if v > best {
                    best = v;
                    arg = i as u32;
                }
            }
            nxt[j] = best + e[j];
            bp[j] = arg;
        }
        std::mem::swap(&mut cur, &mut nxt);
    }
    let (mut best, mut arg) = (f64::NEG_INFINITY, 0u32);
    for (j, &d) in cur.iter().enumerate() {
        if d > best {
            best = d;
            arg = j as u32;
        }
    }
    if best == f64::NEG_INFINITY {
        path.fill(NO_STATE);
        return best;
    }
    path[t_len - 1] = arg;
    for t in (1..t_len).rev() {
        arg = back[t * n + arg as usize];
        path[t - 1] = arg;
    }
    best
}
