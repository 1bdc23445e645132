//! Correctly rounded sums and means: accumulate every input exactly into a
//! [`Superacc`] (in parallel chunks, merged exactly), then round once.
//!
//! - sum: the exact sum rounded to nearest-even in the working precision.
//! - mean: the exact sum divided by n, rounded once: the correctly rounded
//!   mean, not a rounded sum divided by n.
//! - Single precision: the exact sum (mean) of the inputs rounded to
//!   binary32, rounded directly to binary32 (no double rounding via f64).
//! - Only the final rounding can overflow: a finite exact result beyond the
//!   format's range is +-Inf; infinite and NaN inputs give what IEEE
//!   arithmetic gives for the exact sum ([`Special`]). An exact zero is +0.
//!
//! Integer addition is associative, so the bits never depend on the
//! thread count or the chunking; any other exact method (e.g. on a GPU)
//! must produce the same bits, since the correctly rounded value is unique.

use rayon::prelude::*;

use super::fixed::Fixed;
use super::real::Real;
use super::superacc::{Special, Superacc};

/// Inputs below this are accumulated on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;
/// Inputs per parallel task (each task adds into its worker's accumulator).
const CHUNK: usize = 1 << 15;

/// Add map(x_i) for every i into `acc`.
pub fn accumulate(acc: &mut Superacc, x: &[f64], map: impl Fn(f64) -> f64 + Sync) {
    if x.len() < PARALLEL_MIN {
        acc.add_mapped(x, map);
        return;
    }
    let part = x
        .par_chunks(CHUNK)
        .fold(Superacc::new, |mut a, c| {
            a.add_mapped_bulk(c, &map);
            a
        })
        .reduce_with(|mut a, b| {
            a.merge(&b);
            a
        });
    if let Some(part) = part {
        acc.merge(&part);
    }
}

/// The accumulated value rounded to `T`, divided by `n` first if given.
pub fn finish<T: Real>(acc: &Superacc, n: Option<usize>) -> T {
    match acc.special() {
        Special::Nan => T::NAN,
        Special::PosInf => T::from_f64(f64::INFINITY),
        Special::NegInf => T::from_f64(f64::NEG_INFINITY),
        Special::Finite => {
            let value = Fixed::from_superacc(acc);
            let bits = match n {
                None => value.round(T::FORMAT),
                Some(n) => value.div_round(n as u64, T::FORMAT),
            };
            T::from_bits_u64(bits)
        }
    }
}

/// Correctly rounded sum (`n = None`) or mean (`Some(x.len())`) of the
/// inputs rounded to `T`. `acc` must be empty and is left empty.
pub fn reduce<T: Real>(x: &[f64], n: Option<usize>, acc: &mut Superacc) -> T {
    accumulate(acc, x, |v| T::from_f64(v).to_f64());
    let out = finish::<T>(acc, n);
    acc.clear();
    out
}
