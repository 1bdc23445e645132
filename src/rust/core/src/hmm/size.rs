//! The memory an HMM call needs, from its sizes: written once, here. Every
//! entry point (loglik, viterbi, posterior, fit, simulate) checks it with
//! [`memory::ensure`] before allocating anything that grows with the
//! user's sizes, and a caller that copies the result (the R glue and R
//! itself) checks it first with those copies counted ([`HmmJob::copies`]).
//! The plans of the long-sequence passes (checkpointed segments) are
//! chosen here too, so that the estimate describes what runs.

use crate::error::Result;
use crate::memory;

use super::backward::Counts;
use super::cpu::{min_chunk_symbols, MAX_CHUNKS};
use super::robust;
use super::sequences::Sequences;

/// What a call computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    Loglik,
    Viterbi,
    Posterior,
    /// Baum-Welch training.
    Fit,
    Simulate,
}

/// The sizes behind an HMM call's memory estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct HmmJob {
    pub pass: Pass,
    pub n_states: usize,
    pub n_symbols: usize,
    pub sequences: usize,
    /// Symbols over all sequences.
    pub symbols: usize,
    /// The longest sequence.
    pub longest: usize,
    /// The summed lengths of the `threads` longest sequences: what the
    /// per-thread scratch memory holds at once.
    pub concurrent: usize,
    pub threads: usize,
    /// Baum-Welch starts.
    pub starts: usize,
    /// Copies of the result (and of the model, for a fit) that the caller
    /// makes on top of the core's own.
    pub copies: usize,
}

/// Bytes of a forward vector, a back-pointer row, ...
const F64: usize = 8;

impl HmmJob {
    /// A job over sequences with these lengths, with `threads` CPU threads
    /// (0: every core).
    pub fn new(pass: Pass, n_states: usize, n_symbols: usize, lengths: impl Iterator<Item = usize>, threads: usize) -> Self {
        let threads = if threads == 0 { crate::exec::available_threads() } else { threads }.max(1);
        // The `threads` longest lengths, without sorting them all.
        let mut top: Vec<usize> = Vec::with_capacity(threads.min(1024) + 1);
        let (mut sequences, mut symbols) = (0usize, 0usize);
        for len in lengths {
            sequences += 1;
            symbols = symbols.saturating_add(len);
            if top.len() < threads {
                top.push(len);
                top.sort_unstable_by(|a, b| b.cmp(a));
            } else if let Some(last) = top.last_mut() {
                if len > *last {
                    *last = len;
                    top.sort_unstable_by(|a, b| b.cmp(a));
                }
            }
        }
        let longest = top.first().copied().unwrap_or(0);
        let concurrent = top.iter().fold(0usize, |a, &b| a.saturating_add(b));
        HmmJob { pass, n_states, n_symbols, sequences, symbols, longest, concurrent, threads, starts: 1, copies: 0 }
    }

    /// A job of `n` sequences all of length `len`, computed without visiting
    /// each (n can be 2^31: the check must answer at once).
    pub fn uniform(pass: Pass, n_states: usize, n_symbols: usize, n: usize, len: usize, threads: usize) -> Self {
        let threads = if threads == 0 { crate::exec::available_threads() } else { threads }.max(1);
        let longest = if n == 0 { 0 } else { len };
        HmmJob {
            pass,
            n_states,
            n_symbols,
            sequences: n,
            symbols: n.saturating_mul(len),
            longest,
            concurrent: threads.min(n).saturating_mul(len),
            threads,
            starts: 1,
            copies: 0,
        }
    }

    /// A job over `seqs`.
    pub fn of<O: Copy>(pass: Pass, n_states: usize, n_symbols: usize, seqs: &Sequences<O>, threads: usize) -> Self {
        Self::new(pass, n_states, n_symbols, seqs.lengths(), threads)
    }

    pub fn starts(mut self, starts: usize) -> Self {
        self.starts = starts;
        self
    }

    pub fn copies(mut self, copies: usize) -> Self {
        self.copies = copies;
        self
    }

    /// Each part of the estimate: what it is, and its bytes.
    pub fn parts(&self) -> Vec<(String, u128)> {
        let (n, v, fit) = (self.n_states, self.n_symbols, self.pass == Pass::Fit);
        let b = |counts: &[usize]| memory::bytes::<u8>(counts);
        let copies = |x: u128| x.saturating_mul(1 + self.copies as u128);
        // Sequences held at once (one per thread).
        let p = self.threads.min(self.sequences).max(1);
        // The model as given and as each pass's tables hold it; a fit also
        // keeps the current, previous and random starting models, the
        // counts, and the kept starts' models (and the caller's copies).
        let model_copies: usize = match self.pass {
            Pass::Simulate => 1,
            Pass::Loglik | Pass::Posterior | Pass::Viterbi => 3,
            Pass::Fit => 9 + 2 * self.copies,
        };
        let (states, symbols) = if fit { ("`n.states`", "`n.symbols`") } else { ("`model`", "`model`") };
        let per_copy = |what: String, one: u128| (format!("{model_copies} copies of {what} ({} each)", memory::format_bytes(one)), one.saturating_mul(model_copies as u128));
        let mut out = vec![
            per_copy(format!("the {n} x {n} transition matrix of {states}"), b(&[F64, n, n])),
            per_copy(format!("the {n} x {v} emission matrix of {symbols}"), b(&[F64, n, v])),
            (format!("the work vectors of {n} states"), b(&[F64, robust::Scratch::doubles(n) + 6 * n, p])),
        ];
        let seqs = format!("{} symbols of `seqs`", self.symbols);
        if self.pass != Pass::Simulate {
            // Flat symbols and offsets, as given and for the core.
            out.push((format!("the {seqs}"), b(&[2, 4, self.symbols]).saturating_add(b(&[2, F64, self.sequences]))));
        }
        match self.pass {
            Pass::Loglik => out.push(("the log-likelihoods".into(), copies(b(&[F64, self.sequences])))),
            Pass::Viterbi => {
                let seg = viterbi_segment(n, self.longest, self.concurrent);
                let steps = if seg >= self.longest { self.concurrent } else { seg.saturating_mul(p) };
                out.push((format!("the Viterbi back-pointers ({steps} steps x {n} states)"), segmented(pointer_bytes(n) * n, F64 * n, self.longest, self.concurrent, seg, p)));
                out.push((format!("the Viterbi paths of the {seqs}"), copies(b(&[4, self.symbols]))));
            }
            Pass::Posterior => {
                out.push((format!("the posterior probabilities ({seqs} x {n} states)"), copies(b(&[F64, self.symbols, n]))));
                out.push(("the scales of the forward pass".into(), b(&[F64, self.concurrent])));
            }
            Pass::Fit => {
                let seg = fit_segment(n, self.longest, self.concurrent);
                let steps = if seg >= self.longest { self.concurrent } else { seg.saturating_mul(p) };
                out.push((format!("the forward vectors of Baum-Welch ({steps} steps x {n} states)"), segmented(F64 * n, F64 * n, self.longest, self.concurrent, seg, p)));
                out.push(("the scales of the forward pass".into(), b(&[F64, self.concurrent])));
                // Count accumulators: one per chunk (cpu.rs, chunks), each
                // possibly with exact transition counts too, and the total.
                let one = b(&[F64, n]).saturating_add(b(&[F64, n, n, 2])).saturating_add(b(&[F64, n, v]));
                let per = memory::bytes::<f64>(&[Counts::size(n, v)]).max(1);
                let by_budget = (COUNT_BUDGET_BYTES as u128 / per).max(1);
                let chunks = (MAX_CHUNKS as u128).min(by_budget).min(self.symbols.div_ceil(min_chunk_symbols(n)).max(1) as u128);
                out.push((format!("the Baum-Welch counts ({n} states, {v} symbols)"), one.saturating_mul(chunks + 1)));
                out.push((format!("the log-likelihoods of {} starts (`random.inits`)", self.starts), b(&[F64, self.starts])));
            }
            Pass::Simulate => {
                out.push((
                    format!("{} simulated symbols and states (`n` x `length`)", self.symbols),
                    copies(b(&[2, 4, self.symbols])).saturating_add(b(&[2, F64, self.sequences])),
                ));
            }
        }
        out
    }

    /// Bytes the call needs.
    pub fn bytes(&self) -> u128 {
        self.parts().iter().fold(0u128, |a, (_, b)| a.saturating_add(*b))
    }

    /// `Err(OutOfMemory)` naming the largest part when the call needs more
    /// than is available.
    pub fn ensure(&self) -> Result<()> {
        let parts = self.parts();
        let total = parts.iter().fold(0u128, |a, (_, b)| a.saturating_add(*b));
        if total <= SMALL_BYTES {
            // Reading what is available costs more than a small call.
            return Ok(());
        }
        memory::ensure(
            || match parts.iter().max_by_key(|(_, b)| *b) {
                Some((what, bytes)) => format!("this call (largest part: {what}, {})", memory::format_bytes(*bytes)),
                None => "this call".into(),
            },
            total,
        )
    }
}

/// Calls needing at most this are not checked against the available
/// memory (the system's figures take longer to read than a small call
/// takes to run; the allocations stay fallible).
const SMALL_BYTES: u128 = 16 << 20;

/// Memory for the per-count accumulators of one Baum-Welch pass (cpu.rs).
pub(crate) const COUNT_BUDGET_BYTES: usize = 256 << 20;

/// Bytes of a back-pointer for N states.
pub(crate) fn pointer_bytes(n: usize) -> usize {
    if n <= 1 << 16 { 2 } else { 4 }
}

/// Bytes of a segmented pass: rows of `row` bytes per time step of the
/// concurrent sequences (or of one segment each, `p` at once, plus a
/// checkpoint of `ckpt` bytes per segment).
fn segmented(row: usize, ckpt: usize, longest: usize, concurrent: usize, seg: usize, p: usize) -> u128 {
    if seg >= longest {
        return memory::bytes::<u8>(&[row, concurrent]);
    }
    let per_seq = memory::bytes::<u8>(&[row, seg]).saturating_add(memory::bytes::<u8>(&[ckpt, longest.div_ceil(seg)]));
    per_seq.saturating_mul(p as u128)
}

/// Segment length of a pass keeping `row` bytes per time step: whole
/// sequences when the rows of the concurrent ones fit half the available
/// memory, else about sqrt(T) steps (memory ~ 2 sqrt(T) rows).
fn segment(row: usize, longest: usize, concurrent: usize) -> usize {
    let full = memory::bytes::<u8>(&[row, concurrent]);
    if full <= SMALL_BYTES {
        return usize::MAX;
    }
    let avail = memory::available().map(u128::from).unwrap_or(u128::MAX);
    if full <= avail / 2 {
        usize::MAX
    } else {
        ((longest as f64).sqrt().ceil() as usize).max(1)
    }
}

/// Segment length of Viterbi decoding (back-pointers per step).
pub(crate) fn viterbi_segment(n: usize, longest: usize, concurrent: usize) -> usize {
    segment(pointer_bytes(n).saturating_mul(n), longest, concurrent)
}

/// Segment length of the Baum-Welch forward-backward passes.
pub(crate) fn fit_segment(n: usize, longest: usize, concurrent: usize) -> usize {
    segment(F64.saturating_mul(n), longest, concurrent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issues_sizes_are_refused_naming_the_largest_part() {
        let job = HmmJob::new(Pass::Fit, 100_000, 3, [3usize].into_iter(), 2);
        let msg = job.ensure().unwrap_err().to_string();
        assert!(msg.contains("100000 x 100000 transition matrix of `n.states`"), "{msg}");
        let job = HmmJob::new(Pass::Fit, 2, 1_000_000_000, [3usize].into_iter(), 2);
        let msg = job.ensure().unwrap_err().to_string();
        assert!(msg.contains("emission matrix of `n.symbols`"), "{msg}");
        let job = HmmJob::new(Pass::Simulate, 2, 3, std::iter::repeat_n(100_000, 100_000), 2).copies(3);
        assert!(job.bytes() >= 8 * 10_000_000_000 * 4);
        let job = HmmJob::new(Pass::Posterior, 3000, 8, [3_000_000usize].into_iter(), 2).copies(3);
        let msg = job.ensure().unwrap_err().to_string();
        assert!(msg.contains("posterior probabilities (3000000 symbols of `seqs` x 3000 states)"), "{msg}");
    }

    #[test]
    fn uniform_lengths_give_the_job_of_the_listed_lengths() {
        for (n, len, threads) in [(0, 5, 2), (1, 7, 4), (3, 10, 2), (50, 100, 8)] {
            let listed = HmmJob::new(Pass::Posterior, 4, 3, std::iter::repeat_n(len, n), threads);
            let uniform = HmmJob::uniform(Pass::Posterior, 4, 3, n, len, threads);
            assert_eq!(format!("{listed:?}"), format!("{uniform:?}"), "n = {n}, len = {len}");
        }
        // 2^31 sequences are sized at once, not visited.
        let t = std::time::Instant::now();
        let _ = HmmJob::uniform(Pass::Simulate, 2, 3, (1 << 31) - 1, 1, 2).ensure();
        assert!(t.elapsed() < std::time::Duration::from_millis(100));
    }

    #[test]
    fn small_jobs_are_small_and_long_ones_are_segmented() {
        let job = HmmJob::new(Pass::Fit, 3, 4, [100usize; 10].into_iter(), 4);
        assert_eq!(job.concurrent, 400);
        assert!(job.bytes() < 300 << 20, "{}", job.bytes());
        assert!(job.ensure().is_ok());
        assert!(segmented(8, 8, 1_000_000, 1_000_000, 1000, 1) < 8 * 1_000_000);
        assert_eq!(segmented(8, 8, 100, 300, usize::MAX, 3), 2400);
    }
}
