//! Many observation sequences stored flat: one symbol vector plus offsets,
//! so millions of short sequences cost two allocations, not millions.

use crate::error::{Error, Result};

/// Symbols are 0-based (`0..V`); sequence `s` is
/// `symbols[offsets[s]..offsets[s + 1]]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sequences {
    pub symbols: Vec<u32>,
    pub offsets: Vec<usize>,
}

impl Sequences {
    /// From flat symbols and the length of each sequence.
    pub fn from_lengths(symbols: Vec<u32>, lengths: &[usize]) -> Result<Self> {
        let mut offsets = Vec::with_capacity(lengths.len() + 1);
        offsets.push(0);
        let mut end = 0usize;
        for &len in lengths {
            end += len;
            offsets.push(end);
        }
        if end != symbols.len() {
            return Err(Error::arg("seqs", format!("lengths add up to {end} but there are {} symbols", symbols.len())));
        }
        Ok(Sequences { symbols, offsets })
    }

    /// From one vector per sequence (convenient in tests).
    pub fn from_vecs<S: AsRef<[u32]>>(seqs: &[S]) -> Self {
        let mut out = Sequences { symbols: Vec::new(), offsets: vec![0] };
        for s in seqs {
            out.symbols.extend_from_slice(s.as_ref());
            out.offsets.push(out.symbols.len());
        }
        out
    }

    /// Number of sequences.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, s: usize) -> &[u32] {
        &self.symbols[self.offsets[s]..self.offsets[s + 1]]
    }

    pub fn lengths(&self) -> impl Iterator<Item = usize> + '_ {
        self.offsets.windows(2).map(|w| w[1] - w[0])
    }

    /// Total number of symbols.
    pub fn total(&self) -> usize {
        self.symbols.len()
    }

    /// At least one sequence, each non-empty, every symbol below `n_symbols`;
    /// the error gives the 1-based sequence, position and symbol.
    pub fn validate(&self, n_symbols: usize) -> Result<()> {
        if self.is_empty() {
            return Err(Error::arg("seqs", "must contain at least one sequence"));
        }
        if self.offsets[0] != 0 || self.offsets.windows(2).any(|w| w[1] < w[0]) || *self.offsets.last().unwrap_or(&0) != self.symbols.len() {
            return Err(Error::arg("seqs", "has inconsistent offsets (internal error)"));
        }
        for s in 0..self.len() {
            let seq = self.get(s);
            if seq.is_empty() {
                return Err(Error::InvalidSequence { sequence: s + 1, problem: "is empty; every sequence needs at least one symbol".into() });
            }
            if let Some(p) = seq.iter().position(|&k| k as usize >= n_symbols) {
                return Err(Error::InvalidSequence {
                    sequence: s + 1,
                    problem: format!("has symbol {} at position {}; symbols must be between 1 and {n_symbols}", seq[p] as u64 + 1, p + 1),
                });
            }
        }
        Ok(())
    }
}
