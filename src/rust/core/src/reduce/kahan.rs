//! Compensated summation (Kahan-Babuska, in Neumaier's form).
//!
//! Neumaier's variant keeps the rounding error of every addition in a
//! second accumulator whichever operand is larger, so unlike Kahan's
//! original it also survives a term larger than the running sum.
//!
//! The input is cut into fixed chunks of [`CHUNK`] elements, summed in
//! parallel, and the chunk results are combined left to right with the same
//! compensation: the answer depends on n only, never on the thread count.
//! For n <= CHUNK this is the plain sequential algorithm.

use rayon::prelude::*;

use super::real::Real;

/// Elements per independently summed chunk (part of the result's definition).
pub const CHUNK: usize = 1 << 16;

/// A running compensated sum: the value is `s + c`.
#[derive(Debug, Clone, Copy)]
pub struct Neumaier<T> {
    s: T,
    c: T,
}

impl<T: Real> Neumaier<T> {
    pub fn new() -> Self {
        Neumaier { s: T::ZERO, c: T::ZERO }
    }

    #[inline(always)]
    pub fn add(&mut self, v: T) {
        let t = self.s + v;
        // The rounding error of s + v, computed exactly from the larger operand.
        let err = if self.s.abs() >= v.abs() { (self.s - t) + v } else { (v - t) + self.s };
        self.c = self.c + err;
        self.s = t;
    }

    /// Absorb another running sum that follows this one.
    pub fn merge(&mut self, other: Self) {
        self.add(other.s);
        self.c = self.c + other.c;
    }

    /// s + c; once s is Inf or NaN the compensation is meaningless (it
    /// holds Inf - Inf), so s is returned as plain summation would give it.
    pub fn value(self) -> T {
        if self.s.is_finite() {
            self.s + self.c
        } else {
            self.s
        }
    }
}

impl<T: Real> Default for Neumaier<T> {
    fn default() -> Self {
        Self::new()
    }
}

fn chunk_sum<T: Real>(x: &[f64]) -> Neumaier<T> {
    let mut acc = Neumaier::new();
    for &v in x {
        acc.add(T::from_f64(v));
    }
    acc
}

/// The compensated sum of `x` in the working precision.
pub fn sum<T: Real>(x: &[f64]) -> T {
    if x.len() <= CHUNK {
        return chunk_sum::<T>(x).value();
    }
    let mut acc = Neumaier::new();
    add_chunks(&mut acc, x);
    acc.value()
}

/// Merge the chunk sums of `x` into `acc` in order (the running state of
/// [`sum`] over a longer input, of which `x` starts on a chunk boundary).
pub fn add_chunks<T: Real>(acc: &mut Neumaier<T>, x: &[f64]) {
    let parts: Vec<Neumaier<T>> = x.par_chunks(CHUNK).map(chunk_sum::<T>).collect();
    for p in parts {
        acc.merge(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_what_naive_summation_absorbs() {
        // 1 + 2^-53 + 2^-53 rounds to 1 term by term; Neumaier keeps 2^-52.
        let x = [1.0, 2f64.powi(-53), 2f64.powi(-53)];
        assert_eq!(sum::<f64>(&x), 1.0 + 2f64.powi(-52));
        // A term larger than the running sum (where Kahan's original fails).
        let y = [1.0, 1e100, 1.0, -1e100];
        assert_eq!(sum::<f64>(&y), 2.0);
    }

    #[test]
    fn non_finite_values_propagate_like_plain_summation() {
        assert_eq!(sum::<f64>(&[1.0, f64::INFINITY, 2.0]), f64::INFINITY);
        assert!(sum::<f64>(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        assert!(sum::<f64>(&[1.0, f64::NAN]).is_nan());
        // Overflow of the running sum gives Inf, as plain summation does.
        assert_eq!(sum::<f64>(&[f64::MAX, f64::MAX, -f64::MAX]), f64::INFINITY);
    }
}
