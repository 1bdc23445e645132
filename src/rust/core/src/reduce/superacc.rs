//! The exact accumulator behind `Method::Exact`.
//!
//! Format (simple on purpose, so that a GPU can reproduce and merge it):
//!
//! - `bins[e]`, e = 0 ..= 2046, is a signed 128-bit integer holding the sum
//!   of the signed integer significands of the finite inputs whose biased
//!   exponent field is e: for x with bits (s, e, f), the significand is
//!   m = f + 2^52 (normal, e >= 1) or m = f (subnormal, e = 0), and x =
//!   (-1)^s m 2^(max(e, 1) - 1075).
//! - The accumulated value is therefore exactly
//!   `sum_e bins[e] * 2^(max(e, 1) - 1075)`.
//! - Infinities and NaNs are only flagged (`pos_inf`, `neg_inf`, `nan`).
//!
//! Every bin gains less than 2^53 per input, so 2^74 inputs cannot
//! overflow it. Merging two accumulators is bin-wise integer addition, which
//! is exact, associative and commutative: any split of the input over
//! threads, chunks or devices gives the same accumulator, hence the same
//! rounded result. Nothing is rounded until [`super::fixed`] turns the bins
//! into one fixed-point integer.
//!
//! Each input costs one integer add into the bin its exponent selects;
//! real data touch a few dozen bins, which stay in the L1 cache. The
//! accumulator also keeps the range of bins in use, so that a short vector
//! clears, merges and rounds only those (not part of the format).

use super::real::Real;

/// Bins: one per finite biased exponent of binary64.
pub const BINS: usize = 2047;

#[derive(Clone)]
pub struct Superacc {
    bins: [i128; BINS],
    pos_inf: bool,
    neg_inf: bool,
    nan: bool,
    /// Every bin outside lo..hi is zero (a hint, not part of the value):
    /// short vectors then clear, merge and round only the bins they used.
    lo: usize,
    hi: usize,
}

impl PartialEq for Superacc {
    /// Equal values and flags (the range hint is ignored).
    fn eq(&self, other: &Self) -> bool {
        self.bins == other.bins && (self.pos_inf, self.neg_inf, self.nan) == (other.pos_inf, other.neg_inf, other.nan)
    }
}

impl Eq for Superacc {}

impl std::fmt::Debug for Superacc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used: Vec<(usize, i128)> = self.bins.iter().enumerate().filter(|(_, b)| **b != 0).map(|(e, b)| (e, *b)).collect();
        f.debug_struct("Superacc")
            .field("bins", &used)
            .field("pos_inf", &self.pos_inf)
            .field("neg_inf", &self.neg_inf)
            .field("nan", &self.nan)
            .finish()
    }
}

/// What the inputs add up to, before rounding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// All inputs finite: the value is in the bins.
    Finite,
    PosInf,
    NegInf,
    /// A NaN input, or infinities of both signs.
    Nan,
}

const FRACTION: u64 = (1 << 52) - 1;

impl Superacc {
    /// An empty accumulator, on the heap (it is 32 KiB).
    pub fn new() -> Box<Self> {
        Box::new(Superacc { bins: [0; BINS], pos_inf: false, neg_inf: false, nan: false, lo: BINS, hi: 0 })
    }

    pub fn clear(&mut self) {
        if self.lo < self.hi {
            self.bins[self.lo..self.hi].fill(0);
        }
        (self.lo, self.hi) = (BINS, 0);
        self.pos_inf = false;
        self.neg_inf = false;
        self.nan = false;
    }

    /// The bins, indexed by biased exponent (module docs).
    pub fn bins(&self) -> &[i128; BINS] {
        &self.bins
    }

    /// The bins that may be nonzero.
    pub fn used(&self) -> std::ops::Range<usize> {
        self.lo..self.hi.max(self.lo)
    }

    /// The accumulator whose bins are `words` (bin e = words[2e] as the low
    /// and words[2e + 1] as the high 64 bits of its two's-complement value,
    /// the GPU's layout) with the given special-value flags.
    pub fn from_words(words: &[u64], nan: bool, pos_inf: bool, neg_inf: bool) -> Box<Self> {
        let mut acc = Superacc::new();
        for (e, w) in words.chunks_exact(2).take(BINS).enumerate() {
            let v = ((w[1] as u128) << 64 | w[0] as u128) as i128;
            if v != 0 {
                acc.bins[e] = v;
                acc.lo = acc.lo.min(e);
                acc.hi = acc.hi.max(e + 1);
            }
        }
        (acc.nan, acc.pos_inf, acc.neg_inf) = (nan, pos_inf, neg_inf);
        acc
    }

    /// Add one value exactly.
    pub fn add(&mut self, v: f64) {
        self.add_mapped(&[v], |v| v);
    }

    /// Add map(x_i) for every i, exactly.
    #[inline]
    pub fn add_mapped(&mut self, x: &[f64], map: impl Fn(f64) -> f64) {
        self.add_all::<true>(x, map);
    }

    /// [`Self::add_mapped`] without keeping the used range (it becomes all
    /// bins): a few instructions less per input, for long inputs whose
    /// accumulators are merged and rounded once.
    #[inline]
    pub fn add_mapped_bulk(&mut self, x: &[f64], map: impl Fn(f64) -> f64) {
        self.add_all::<false>(x, map);
    }

    #[inline(always)]
    fn add_all<const TRACK: bool>(&mut self, x: &[f64], map: impl Fn(f64) -> f64) {
        // The used range lives in registers for the loop.
        let (mut lo, mut hi) = if TRACK { (self.lo, self.hi) } else { (0, BINS) };
        for &v in x {
            let v = map(v);
            let bits = v.to_bits();
            let e = ((bits >> 52) & 0x7ff) as usize;
            if e == 0x7ff {
                self.add_special(v);
                continue;
            }
            let m = (bits & FRACTION) | (((e != 0) as u64) << 52);
            // sign is 0 or -1: (m ^ sign) - sign is m or -m, without a branch.
            let sign = (bits as i64) >> 63;
            let signed = ((m as i64) ^ sign) - sign;
            // Cannot overflow before 2^74 inputs (module docs).
            self.bins[e] = self.bins[e].wrapping_add(signed as i128);
            if TRACK {
                lo = lo.min(e);
                hi = hi.max(e + 1);
            }
        }
        (self.lo, self.hi) = (lo, hi);
    }

    #[cold]
    fn add_special(&mut self, v: f64) {
        if v.is_nan() {
            self.nan = true;
        } else if v > 0.0 {
            self.pos_inf = true;
        } else {
            self.neg_inf = true;
        }
    }

    /// Add every input, rounded first to the working precision `T` (exact
    /// for f64; the binary32 rounding for f32, whose values are all binary64
    /// values, so the bins hold them exactly too).
    pub fn add_slice<T: Real>(&mut self, x: &[f64]) {
        self.add_mapped(x, |v| T::from_f64(v).to_f64());
    }

    /// Absorb another accumulator (exact).
    pub fn merge(&mut self, other: &Superacc) {
        let used = other.used();
        for (a, b) in self.bins[used.clone()].iter_mut().zip(&other.bins[used.clone()]) {
            *a = a.wrapping_add(*b);
        }
        if !used.is_empty() {
            self.lo = self.lo.min(used.start);
            self.hi = self.hi.max(used.end);
        }
        self.pos_inf |= other.pos_inf;
        self.neg_inf |= other.neg_inf;
        self.nan |= other.nan;
    }

    /// Whether the result is finite, and which non-finite value it is if not,
    /// with IEEE semantics for an exact sum: Inf + finite = Inf,
    /// Inf + (-Inf) = NaN, NaN + anything = NaN.
    pub fn special(&self) -> Special {
        match (self.nan, self.pos_inf, self.neg_inf) {
            (true, _, _) | (false, true, true) => Special::Nan,
            (false, true, false) => Special::PosInf,
            (false, false, true) => Special::NegInf,
            (false, false, false) => Special::Finite,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_hold_signed_significands() {
        let mut acc = Superacc::new();
        acc.add(1.0); // e = 1023, m = 2^52
        acc.add(-1.5); // e = 1023, m = 1.5 * 2^52
        acc.add(f64::from_bits(3)); // subnormal 3 * 2^-1074, bin 0
        acc.add(-0.0);
        assert_eq!(acc.bins[1023], -(1i128 << 51));
        assert_eq!(acc.bins[0], 3);
        assert_eq!(acc.bins.iter().filter(|b| **b != 0).count(), 2);
        assert_eq!(acc.used(), 0..1024);
        acc.clear();
        assert_eq!(*acc, *Superacc::new());
        assert!(acc.used().is_empty());
        assert_eq!(acc.special(), Special::Finite);
    }

    #[test]
    fn any_split_merges_to_the_same_accumulator() {
        let x: Vec<f64> = (0..5000).map(|i| ((i * 7919) % 1000) as f64 * 1.37e-3 * if i % 3 == 0 { -1e9 } else { 1e-9 }).collect();
        let mut whole = Superacc::new();
        whole.add_slice::<f64>(&x);
        for cuts in [vec![0, 5000], vec![0, 1, 2500, 4999, 5000], vec![0, 17, 1000, 1001, 3333, 5000]] {
            let mut merged = Superacc::new();
            // Merge the pieces in reverse order: order does not matter either.
            for w in cuts.windows(2).rev() {
                let mut part = Superacc::new();
                part.add_slice::<f64>(&x[w[0]..w[1]]);
                merged.merge(&part);
            }
            assert_eq!(merged, whole);
        }
    }

    #[test]
    fn words_round_trip_the_bins() {
        let mut acc = Superacc::new();
        acc.add_slice::<f64>(&[1.0, -3.5, 2f64.powi(-1074), -1e300, 7.25e-300]);
        let words: Vec<u64> = acc.bins.iter().flat_map(|&b| [b as u64, ((b as u128) >> 64) as u64]).collect();
        assert_eq!(*Superacc::from_words(&words, false, false, false), *acc);
        assert_eq!(Superacc::from_words(&words, true, false, false).special(), Special::Nan);
    }

    #[test]
    fn specials_follow_ieee() {
        let flags = |x: &[f64]| {
            let mut acc = Superacc::new();
            acc.add_slice::<f64>(x);
            acc.special()
        };
        assert_eq!(flags(&[1.0, f64::INFINITY]), Special::PosInf);
        assert_eq!(flags(&[f64::NEG_INFINITY, f64::NEG_INFINITY]), Special::NegInf);
        assert_eq!(flags(&[f64::INFINITY, f64::NEG_INFINITY]), Special::Nan);
        assert_eq!(flags(&[f64::NAN, 2.0]), Special::Nan);
        assert_eq!(flags(&[-f64::NAN]), Special::Nan);
    }
}
