//! Many observation sequences stored flat: one vector of observations plus
//! offsets, so millions of short sequences cost two allocations, not
//! millions. Observations are symbols (`u32`, 0-based) for categorical
//! emissions and numbers (`f64`) for densities.

use crate::error::{Error, Result};
use crate::exec::Exec;

/// Sequence `s` is `symbols[offsets[s]..offsets[s + 1]]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sequences<O = u32> {
    /// The observations of all sequences, one after the other.
    pub symbols: Vec<O>,
    pub offsets: Vec<usize>,
}

impl<O: Copy> Sequences<O> {
    /// From flat observations and the length of each sequence.
    pub fn from_lengths(symbols: Vec<O>, lengths: &[usize]) -> Result<Self> {
        let mut offsets = Vec::with_capacity(lengths.len() + 1);
        offsets.push(0);
        let mut end = 0usize;
        for &len in lengths {
            end += len;
            offsets.push(end);
        }
        if end != symbols.len() {
            return Err(Error::arg("seqs", format!("lengths add up to {end} but there are {} observations", symbols.len())));
        }
        Ok(Sequences { symbols, offsets })
    }

    /// From one vector per sequence (convenient in tests).
    pub fn from_vecs<S: AsRef<[O]>>(seqs: &[S]) -> Self {
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

    pub fn get(&self, s: usize) -> &[O] {
        &self.symbols[self.offsets[s]..self.offsets[s + 1]]
    }

    pub fn lengths(&self) -> impl Iterator<Item = usize> + '_ {
        self.offsets.windows(2).map(|w| w[1] - w[0])
    }

    /// The offsets of sequences `range`, rebased, without their
    /// observations (a GPU share reads those from the call's, borrowed:
    /// [`Sequences::observations`]).
    pub fn offsets_part(&self, range: std::ops::Range<usize>) -> Self {
        let a = self.offsets[range.start];
        Sequences { symbols: Vec::new(), offsets: self.offsets[range.start..=range.end].iter().map(|&o| o - a).collect() }
    }

    /// The observations of sequences `range`, borrowed.
    pub fn observations(&self, range: &std::ops::Range<usize>) -> &[O] {
        &self.symbols[self.offsets[range.start]..self.offsets[range.end]]
    }

    /// Sequences `which` of `offsets` (offsets only, as
    /// [`Sequences::offsets_part`] gives them) whose observations are
    /// `symbols`, as sequences of their own (a copy of those alone).
    pub fn picked(offsets: &Sequences<O>, symbols: &[O], which: &[usize]) -> Self {
        let mut out = Sequences { symbols: Vec::new(), offsets: vec![0] };
        for &s in which {
            out.symbols.extend_from_slice(&symbols[offsets.offsets[s]..offsets.offsets[s + 1]]);
            out.offsets.push(out.symbols.len());
        }
        out
    }

    /// Total number of observations (the last offset: also for the
    /// offsets-only sequences of the GPU's density passes).
    pub fn total(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// The checks of [`Sequences::validate_with`] that do not read the
    /// observations: at least one sequence, none empty, consistent offsets.
    pub fn validate_layout(&self) -> Result<()> {
        if self.is_empty() {
            return Err(Error::arg("seqs", "must contain at least one sequence"));
        }
        if self.offsets[0] != 0 || self.offsets.windows(2).any(|w| w[1] < w[0]) || *self.offsets.last().unwrap_or(&0) != self.symbols.len() {
            return Err(Error::arg("seqs", "has inconsistent offsets (internal error)"));
        }
        if let Some(s) = self.offsets.windows(2).position(|w| w[1] == w[0]) {
            return Err(Error::InvalidSequence { sequence: s + 1, problem: "is empty; every sequence needs at least one observation".into() });
        }
        Ok(())
    }

    /// At least one sequence, each non-empty, every observation accepted by
    /// `ok`; `bad` says what is wrong with one ("symbol 7"), and the error
    /// gives the 1-based sequence and position, and `rule`. The
    /// observations are scanned in parallel (in the calling thread's pool),
    /// then sequence by sequence only when one is bad.
    pub fn validate_with(&self, ok: impl Fn(O) -> bool + Sync, bad: impl Fn(O) -> Option<String>, rule: impl Fn() -> String) -> Result<()>
    where
        O: Sync,
    {
        use rayon::prelude::*;
        self.validate_layout()?;
        // `ok` over whole chunks without stopping early: no branch per
        // observation, so the test vectorises.
        if self.symbols.par_chunks(1 << 16).all(|c| c.iter().fold(true, |all, &o| all & ok(o))) {
            return Ok(());
        }
        for s in 0..self.len() {
            if let Some((p, what)) = self.get(s).iter().enumerate().find_map(|(p, &o)| bad(o).map(|w| (p, w))) {
                return Err(Error::InvalidSequence { sequence: s + 1, problem: format!("has {what} at position {}; {}", p + 1, rule()) });
            }
        }
        Ok(())
    }
}

impl Sequences<u32> {
    /// [`Sequences::validate_with`] for symbols below `n_symbols`.
    pub fn validate(&self, n_symbols: usize) -> Result<()> {
        super::validate::<super::Categorical>(&n_symbols, self)
    }
}

/// One sequence's observations as a caller gives them: symbol codes from
/// 1 as integers or as doubles.
#[derive(Debug, Clone, Copy)]
pub enum Codes<'a> {
    Ints(&'a [i32]),
    Doubles(&'a [f64]),
}

impl Codes<'_> {
    pub fn len(&self) -> usize {
        match self {
            Codes::Ints(x) => x.len(),
            Codes::Doubles(x) => x.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Values checked and copied by one task.
const CODES_GRAIN: usize = 1 << 16;

/// `parts` concatenated into `out` (as long as all of them) as one-based
/// integer codes, each checked: an integer or a whole double from 1 to
/// `max_code` (R's NA integer, the smallest i32, is below 1); in `exec`'s
/// pool ([`all_chunks`]). Returns false, with `out` partly written, when
/// any is not: the caller then finds and reports it (this pass only says
/// whether all are valid, which costs one read and one write per value).
pub fn flatten_codes(parts: &[Codes], max_code: i32, out: &mut [i32], exec: &Exec) -> bool {
    let top = max_code as f64;
    all_chunks(parts, out, exec, |p, o| match p {
        Codes::Ints(x) => {
            o.copy_from_slice(x);
            x.iter().all(|&k| k >= 1 && k <= max_code)
        }
        Codes::Doubles(x) => {
            let mut ok = true;
            for (o, &v) in o.iter_mut().zip(x) {
                // NaN fails every comparison.
                ok &= v >= 1.0 && v <= top && v == v.trunc();
                *o = v as i32;
            }
            ok
        }
    })
}

/// `parts` concatenated into `out` (as long as all of them) as doubles,
/// each tested by `ok` (a density emission's [`Emission::obs_ok`]), in
/// `exec`'s pool ([`all_chunks`]): the observations of a density emission,
/// read once for the copy and the test. Returns false, with `out` partly
/// written, when an integer part holds R's NA (the smallest i32) or a value
/// fails `ok`: the caller then finds and reports it.
///
/// [`Emission::obs_ok`]: super::emission::Emission::obs_ok
pub fn flatten_values(parts: &[Codes], ok: impl Fn(f64) -> bool + Sync, out: &mut [f64], exec: &Exec) -> bool {
    all_chunks(parts, out, exec, |p, o| match p {
        Codes::Ints(x) => {
            let mut all = true;
            for (o, &k) in o.iter_mut().zip(x) {
                *o = k as f64;
                all &= (k != i32::MIN) & ok(*o);
            }
            all
        }
        Codes::Doubles(x) => {
            o.copy_from_slice(x);
            // A whole chunk without stopping early: no branch per value.
            x.iter().fold(true, |all, &v| all & ok(v))
        }
    })
}

/// One-based codes as zero-based symbols, in `exec`'s pool
/// ([`all_chunks`]); None if one is below 1.
pub fn zero_based(codes: &[i32], exec: &Exec) -> Option<Vec<u32>> {
    let mut out = vec![0u32; codes.len()];
    let ok = all_chunks(&[Codes::Ints(codes)], &mut out, exec, |c, o| {
        let Codes::Ints(c) = c else { return false };
        let mut ok = true;
        for (o, &k) in o.iter_mut().zip(c) {
            ok &= k >= 1;
            *o = k.wrapping_sub(1) as u32;
        }
        ok
    });
    ok.then_some(out)
}

/// Whether `each` holds for every chunk of at most [`CODES_GRAIN`] values
/// of `parts` with its piece of `out` (as long as all of them), run in
/// `exec`'s pool; on the calling thread when all of them fit one chunk (a
/// call's few symbols: a hand-off to the pool cost more than they do).
fn all_chunks<T: Send>(parts: &[Codes], out: &mut [T], exec: &Exec, each: impl Fn(Codes, &mut [T]) -> bool + Sync) -> bool {
    use rayon::prelude::*;
    let small = out.len() <= CODES_GRAIN;
    let mut outs = split_like(parts, out);
    if small {
        return parts.iter().zip(outs.iter_mut()).all(|(p, o)| each(*p, o));
    }
    exec.within(|| {
        parts.par_iter().zip(outs.par_iter_mut()).all(|(p, o)| match *p {
            Codes::Ints(x) => o.par_chunks_mut(CODES_GRAIN).zip(x.par_chunks(CODES_GRAIN)).all(|(o, x)| each(Codes::Ints(x), o)),
            Codes::Doubles(x) => o.par_chunks_mut(CODES_GRAIN).zip(x.par_chunks(CODES_GRAIN)).all(|(o, x)| each(Codes::Doubles(x), o)),
        })
    })
}

/// `out` cut into consecutive pieces as long as `parts`.
fn split_like<'o, T>(parts: &[Codes], out: &'o mut [T]) -> Vec<&'o mut [T]> {
    assert_eq!(out.len(), parts.iter().map(Codes::len).sum::<usize>(), "one output per value");
    let mut outs = Vec::with_capacity(parts.len());
    let mut rest = out;
    for p in parts {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(p.len());
        outs.push(head);
        rest = tail;
    }
    outs
}

#[cfg(test)]
mod tests {
    use super::Sequences;

    #[test]
    fn a_part_is_its_offsets_and_borrowed_observations() {
        let s = Sequences::from_vecs(&[vec![1u32, 2], vec![3], vec![4, 5, 6]]);
        assert_eq!(s.offsets_part(0..1).offsets, vec![0, 2]);
        assert_eq!(s.offsets_part(2..2).offsets, vec![0]);
        let part = s.offsets_part(1..3);
        assert_eq!((part.offsets.clone(), part.symbols.len()), (vec![0, 1, 4], 0));
        assert_eq!(s.observations(&(1..3)), &[3, 4, 5, 6]);
        assert_eq!(Sequences::picked(&part, s.observations(&(1..3)), &[1]), Sequences::from_vecs(&[vec![4u32, 5, 6]]));
    }
    #[test]
    fn codes_are_flattened_checked_and_made_zero_based() {
        use super::{flatten_codes, zero_based, Codes, Exec};
        let na = i32::MIN;
        let big: Vec<i32> = (0..200_000).map(|i| 1 + i % 7).collect();
        let ints = [1, 2, 3];
        let doubles = [4.0, 5.0];
        let parts = [Codes::Ints(&ints), Codes::Doubles(&doubles), Codes::Ints(&big)];
        let mut out = vec![0; 5 + big.len()];
        let exec = Exec::cpu().threads(2);
        assert!(flatten_codes(&parts, 7, &mut out, &exec));
        assert_eq!(&out[..5], &[1, 2, 3, 4, 5]);
        assert_eq!(&out[5..], &big[..]);
        // A few values on the calling thread, many in the pool: the same.
        let mut small = vec![0; 5];
        assert!(flatten_codes(&parts[..2], 7, &mut small, &exec));
        assert_eq!(small, &out[..5]);
        assert_eq!(zero_based(&out[..5], &exec), Some(vec![0, 1, 2, 3, 4]));
        assert_eq!(zero_based(&[1, 0], &exec), None);
        let zb = zero_based(&out, &exec).unwrap();
        assert!(zb.len() == out.len() && zb.iter().zip(&out).all(|(&z, &k)| z as i32 == k - 1));
        let mut late = out.clone();
        late[150_000] = 0;
        assert_eq!(zero_based(&late, &exec), None);
        // Each kind of bad value, alone in a long part.
        let bad_ints = [0, na, 8];
        for b in bad_ints {
            let mut x = big.clone();
            x[123_456] = b;
            let mut out = vec![0; x.len()];
            assert!(!flatten_codes(&[Codes::Ints(&x)], 7, &mut out, &exec), "{b}");
            let mut few = vec![0; 4];
            assert!(!flatten_codes(&[Codes::Ints(&[1, 2]), Codes::Ints(&[3, b])], 7, &mut few, &exec), "{b}, few");
        }
        for b in [0.0, 1.5, f64::NAN, 8.0, f64::INFINITY, -1.0] {
            let mut x: Vec<f64> = big.iter().map(|&k| k as f64).collect();
            x[77_777] = b;
            let mut out = vec![0; x.len()];
            assert!(!flatten_codes(&[Codes::Doubles(&x)], 7, &mut out, &exec), "{b}");
            let mut few = vec![0; 2];
            assert!(!flatten_codes(&[Codes::Doubles(&[1.0, b])], 7, &mut few, &exec), "{b}, few");
        }
    }

    #[test]
    fn values_are_flattened_as_doubles_tested_and_integer_na_refused() {
        use super::{flatten_values, Codes, Exec};
        use crate::hmm::{Emission, Gaussian, Poisson};
        let any = |_: f64| true;
        let finite: fn(f64) -> bool = |x| Gaussian::obs_ok(&(), x);
        let count: fn(f64) -> bool = |x| Poisson::obs_ok(&(), x);
        let big: Vec<i32> = (0..200_000).map(|i| i % 11 - 5).collect();
        let doubles = [0.5, f64::NAN, -2.25];
        let parts = [Codes::Doubles(&doubles), Codes::Ints(&big), Codes::Ints(&[7])];
        let mut out = vec![0.0; 4 + big.len()];
        let exec = Exec::cpu().threads(2);
        assert!(flatten_values(&parts, any, &mut out, &exec));
        let mut few = vec![0.0; 3];
        assert!(flatten_values(&parts[..1], any, &mut few, &exec) && few[0] == 0.5 && few[1].is_nan());
        assert!(!flatten_values(&[Codes::Ints(&[1, i32::MIN])], any, &mut few[..2], &exec));
        assert_eq!(out[0], 0.5);
        assert!(out[1].is_nan());
        assert_eq!(out[2], -2.25);
        assert!(out[3..3 + big.len()].iter().zip(&big).all(|(&o, &k)| o == k as f64));
        assert_eq!(out[3 + big.len()], 7.0);
        let mut x = big.clone();
        x[150_000] = i32::MIN;
        let mut out = vec![0.0; x.len()];
        assert!(!flatten_values(&[Codes::Ints(&x)], any, &mut out, &exec));
        // The emission's test, on few values (the calling thread) and on
        // many (the pool), in doubles and integers.
        assert!(!flatten_values(&parts[..1], finite, &mut few, &exec));
        let mut out = vec![0.0; 1 + big.len()];
        assert!(flatten_values(&parts[1..], finite, &mut out, &exec));
        assert!(!flatten_values(&parts[1..], count, &mut out, &exec), "negative integers are not counts");
        let counts: Vec<i32> = big.iter().map(|k| k.abs()).collect();
        let mut out = vec![0.0; counts.len()];
        assert!(flatten_values(&[Codes::Ints(&counts)], count, &mut out, &exec));
        let many: Vec<f64> = (0..300_000).map(|i| (i % 13) as f64).collect();
        let mut out = vec![0.0; many.len()];
        assert!(flatten_values(&[Codes::Doubles(&many)], count, &mut out, &exec) && out == many);
        for (bad, ok) in [(f64::INFINITY, finite), (f64::NAN, finite), (-1.0, count), (2.5, count), (f64::NAN, count)] {
            let mut x = many.clone();
            x[234_567] = bad;
            assert!(!flatten_values(&[Codes::Doubles(&x)], ok, &mut out, &exec), "{bad}");
        }
    }

}
