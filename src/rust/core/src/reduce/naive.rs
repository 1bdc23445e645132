//! Naive summation: one accumulator, left to right, on one thread.
//!
//! Kept as the baseline that shows absorption: once the running sum is
//! large, every small term loses its low bits (or all of them).

use super::real::Real;

/// s = 0; s = s + x_i for i = 1..n, in the working precision.
pub fn sum<T: Real>(x: &[f64]) -> T {
    add(T::ZERO, x)
}

/// The running sum s continued over x.
pub fn add<T: Real>(s: T, x: &[f64]) -> T {
    x.iter().fold(s, |s, &v| s + T::from_f64(v))
}
