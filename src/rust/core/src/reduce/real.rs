//! The working precision of a reduction: f64 or f32, behind one trait so
//! that every method is written once.

use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Sub};

/// An IEEE binary format, as the exact rounding needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    /// Significand bits including the hidden one (53, 24).
    pub precision: u32,
    /// Exponent of the least significant bit of a subnormal (-1074, -149).
    pub min_ulp_exp: i64,
    /// Exponent bias (1023, 127).
    pub bias: i64,
    /// Exponent field of Inf and NaN (2047, 255).
    pub exp_field_max: u64,
    /// Total width in bits (64, 32).
    pub width: u32,
}

pub const BINARY64: Format = Format { precision: 53, min_ulp_exp: -1074, bias: 1023, exp_field_max: 2047, width: 64 };
pub const BINARY32: Format = Format { precision: 24, min_ulp_exp: -149, bias: 127, exp_field_max: 255, width: 32 };

pub trait Real:
    Copy + Send + Sync + Debug + PartialOrd + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self>
{
    const ZERO: Self;
    const HALF: Self;
    const NAN: Self;
    const FORMAT: Format;
    /// Round an input to this format (nearest, ties to even).
    fn from_f64(v: f64) -> Self;
    /// Widen exactly.
    fn to_f64(self) -> f64;
    /// A count, rounded to nearest.
    fn from_count(n: usize) -> Self;
    /// The value whose bit pattern is the low `FORMAT.width` bits of `bits`.
    fn from_bits_u64(bits: u64) -> Self;
    fn abs(self) -> Self;
    fn is_finite(self) -> bool;
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const HALF: Self = 0.5;
    const NAN: Self = f64::NAN;
    const FORMAT: Format = BINARY64;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    fn from_count(n: usize) -> Self {
        n as f64
    }
    fn from_bits_u64(bits: u64) -> Self {
        f64::from_bits(bits)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        f64::abs(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const HALF: Self = 0.5;
    const NAN: Self = f32::NAN;
    const FORMAT: Format = BINARY32;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_count(n: usize) -> Self {
        n as f32
    }
    fn from_bits_u64(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        f32::abs(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
}
