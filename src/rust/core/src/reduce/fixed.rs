//! The exact value of a [`Superacc`] as one fixed-point integer, and its
//! correct rounding (round to nearest, ties to even) to binary64 or
//! binary32: either the value itself (exact sum) or the value divided by a
//! count n (exact mean: one rounding of the exact quotient).

use super::real::Format;
use super::superacc::Superacc;

/// 32-bit digits used while the bins are folded together: the value is
/// below 2^(2045 + 127) < 2^(32 * DIGITS), with the sign in the carry out.
const DIGITS: usize = 70;
/// 64-bit limbs of a magnitude: the value's DIGITS / 2 plus room for the
/// left shift of [`Fixed::div_round`].
const LIMBS: usize = 40;

/// (-1)^neg * mag * 2^base, mag little-endian with `len` limbs in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    neg: bool,
    mag: [u64; LIMBS],
    len: usize,
    base: i64,
}

impl Fixed {
    /// The exact value of the finite part of `acc`.
    pub fn from_superacc(acc: &Superacc) -> Self {
        // bins[e] has weight 2^(w - 1074), w = max(e, 1) - 1: split it into
        // four 32-bit digits (the top one signed), shift each by w % 32 and
        // add it into two i64 digit slots. No slot receives more than a few
        // hundred terms below 2^32, so none can overflow.
        let mut slots = [0i64; DIGITS];
        let used = acc.used();
        for (e, &b) in acc.bins()[used.clone()].iter().enumerate().map(|(i, b)| (i + used.start, b)) {
            if b == 0 {
                continue;
            }
            let w = e.max(1) - 1;
            let (q, r) = (w / 32, (w % 32) as u32);
            let parts = [b as u32 as i64, (b >> 32) as u32 as i64, (b >> 64) as u32 as i64, (b >> 96) as i64];
            for (k, p) in parts.into_iter().enumerate() {
                let t = p << r;
                slots[q + k] += t & 0xffff_ffff;
                slots[q + k + 1] += t >> 32;
            }
        }
        // Carry into canonical 32-bit digits; the carry out is 0 or -1 (sign).
        let mut digits = [0u32; DIGITS];
        let mut carry = 0i64;
        for (d, s) in digits.iter_mut().zip(slots) {
            let t = s + carry;
            *d = t as u32;
            carry = t >> 32;
        }
        let neg = carry < 0;
        if neg {
            // Magnitude = 2^(32 DIGITS) - digits (two's complement negation).
            let mut borrow_in = 1u64;
            for d in digits.iter_mut() {
                let t = (!*d) as u64 + borrow_in;
                *d = t as u32;
                borrow_in = t >> 32;
            }
        }
        let mut mag = [0u64; LIMBS];
        for (m, pair) in mag.iter_mut().zip(digits.chunks_exact(2)) {
            *m = pair[0] as u64 | (pair[1] as u64) << 32;
        }
        Fixed::normalised(neg, mag, -1074)
    }

    /// 2^k.
    pub fn pow2(k: i64) -> Self {
        let mut mag = [0u64; LIMBS];
        mag[0] = 1;
        Fixed { neg: false, mag, len: 1, base: k }
    }

    /// Drop zero limbs at both ends (trailing ones move into `base`), so
    /// that rounding and division touch only the significant part.
    fn normalised(neg: bool, mut mag: [u64; LIMBS], mut base: i64) -> Self {
        let Some(top) = mag.iter().rposition(|&m| m != 0) else {
            return Fixed { neg: false, mag, len: 0, base: 0 };
        };
        let low = mag.iter().position(|&m| m != 0).unwrap_or(0);
        mag.copy_within(low..=top, 0);
        mag[top - low + 1..].fill(0);
        base += 64 * low as i64;
        Fixed { neg, mag, len: top - low + 1, base }
    }

    pub fn is_zero(&self) -> bool {
        self.len == 0
    }

    /// Bits of the value correctly rounded to `fmt` (an exact zero is +0).
    pub fn round(&self, fmt: Format) -> u64 {
        round_bits(self.neg, &self.mag[..self.len], self.base, fmt)
    }

    /// Bits of value / n correctly rounded to `fmt` (n >= 1).
    pub fn div_round(&self, n: u64, fmt: Format) -> u64 {
        if self.is_zero() || n <= 1 {
            return self.round(fmt);
        }
        // Shift left by g bits so that the quotient has at least p + 3
        // bits, then append a sticky bit for a nonzero remainder: the
        // rounding position is then at least 3 bits above it, so the bit
        // stands in for the whole discarded tail.
        let g = fmt.precision as usize + 2 + 64;
        let mut num = [0u64; LIMBS];
        let len = shl_into(&self.mag[..self.len], g, &mut num);
        let mut rem = 0u64;
        for limb in num[..len].iter_mut().rev() {
            let cur = (rem as u128) << 64 | *limb as u128;
            *limb = (cur / n as u128) as u64;
            rem = (cur % n as u128) as u64;
        }
        let mut quot = [0u64; LIMBS];
        let qlen = shl_into(&num[..len], 1, &mut quot);
        quot[0] |= (rem != 0) as u64;
        round_bits(self.neg, &quot[..qlen], self.base - g as i64 - 1, fmt)
    }
}

/// dst = src << shift; returns the limbs of dst in use (src.len() + limbs
/// shifted + 1, which the caller's buffer must hold).
fn shl_into(src: &[u64], shift: usize, dst: &mut [u64; LIMBS]) -> usize {
    let (limbs, bits) = (shift / 64, (shift % 64) as u32);
    let len = src.len() + limbs + 1;
    dst[..len].fill(0);
    for (i, &s) in src.iter().enumerate() {
        dst[i + limbs] |= s << bits;
        if bits > 0 {
            dst[i + limbs + 1] |= s >> (64 - bits);
        }
    }
    len
}

fn bit_len(mag: &[u64]) -> i64 {
    match mag.iter().rposition(|&m| m != 0) {
        Some(i) => 64 * i as i64 + (64 - mag[i].leading_zeros()) as i64,
        None => 0,
    }
}

/// Bit i of mag (0 beyond its end).
fn bit(mag: &[u64], i: usize) -> bool {
    mag.get(i / 64).is_some_and(|&m| (m >> (i % 64)) & 1 == 1)
}

/// Whether any bit below position i is set.
fn any_below(mag: &[u64], i: usize) -> bool {
    let (limbs, bits) = (i / 64, i % 64);
    mag.iter().take(limbs).any(|&m| m != 0) || (bits > 0 && mag.get(limbs).is_some_and(|&m| m & ((1u64 << bits) - 1) != 0))
}

/// Bits lo .. lo + len of mag (len <= 63).
fn extract(mag: &[u64], lo: usize, len: u32) -> u64 {
    let (i, s) = (lo / 64, (lo % 64) as u32);
    let low = mag.get(i).map_or(0, |&m| m >> s);
    let high = if s > 0 { mag.get(i + 1).map_or(0, |&m| m << (64 - s)) } else { 0 };
    (low | high) & ((1u64 << len) - 1)
}

/// (-1)^neg * mag * 2^base rounded to nearest-even in `fmt`, as the
/// format's bit pattern (in the low `fmt.width` bits).
fn round_bits(neg: bool, mag: &[u64], base: i64, fmt: Format) -> u64 {
    let p = fmt.precision as i64;
    let sign = (neg as u64) << (fmt.width - 1);
    let h = bit_len(mag) - 1;
    if h < 0 {
        return 0;
    }
    // Exponent of the last significand bit kept: p bits below the leading
    // one, but never below the subnormal spacing.
    let mut ulp = (h + base - (p - 1)).max(fmt.min_ulp_exp);
    let t = ulp - base;
    let mut q = if t <= 0 {
        // Fewer than p significant bits: exact, no rounding.
        extract(mag, 0, fmt.precision) << (-t)
    } else {
        let t = t as usize;
        let q = extract(mag, t, fmt.precision);
        let half = bit(mag, t - 1);
        let sticky = any_below(mag, t - 1);
        q + (half && (sticky || q & 1 == 1)) as u64
    };
    if q == 1u64 << p {
        q >>= 1;
        ulp += 1;
    }
    let hidden = 1u64 << (p - 1);
    if q < hidden {
        // Subnormal (ulp is the minimum) or zero.
        return sign | q;
    }
    let biased = ulp + (p - 1) + fmt.bias;
    if biased >= fmt.exp_field_max as i64 {
        return sign | fmt.exp_field_max << (p - 1);
    }
    sign | (biased as u64) << (p - 1) | (q - hidden)
}

/// Bits of 2^k / n correctly rounded to `fmt`.
pub fn ratio_pow2(k: u32, n: u64, fmt: Format) -> u64 {
    Fixed::pow2(k as i64).div_round(n, fmt)
}

#[cfg(test)]
mod tests {
    use super::super::real::{BINARY32, BINARY64};
    use super::*;

    fn exact_sum(x: &[f64]) -> Fixed {
        let mut acc = Superacc::new();
        acc.add_slice::<f64>(x);
        Fixed::from_superacc(&acc)
    }

    fn sum64(x: &[f64]) -> f64 {
        f64::from_bits(exact_sum(x).round(BINARY64))
    }

    #[test]
    fn rounds_to_nearest_even() {
        let u = 2f64.powi(-53);
        assert_eq!(sum64(&[1.0, u]), 1.0); // tie, down to even
        assert_eq!(sum64(&[1.0 + 2.0 * u, u]), 1.0 + 4.0 * u); // tie, up to even
        assert_eq!(sum64(&[1.0, u, 2f64.powi(-200)]), 1.0 + 2.0 * u); // above the tie
        assert_eq!(sum64(&[-1.0, -u, -(2f64.powi(-200))]), -1.0 - 2.0 * u);
        assert_eq!(sum64(&[1e300, 1.0, -1e300]), 1.0);
        assert_eq!(sum64(&[0.1, 0.2, -0.3]), 2f64.powi(-55)); // 0.1 + 0.2 - 0.3 of the binary64 values, exactly
        assert_eq!(sum64(&[3.0, -3.0]).to_bits(), 0); // +0
        assert_eq!(sum64(&[-0.0, -0.0]).to_bits(), 0);
    }

    #[test]
    fn subnormal_and_overflowing_results() {
        let tiny = f64::from_bits(1);
        assert_eq!(sum64(&[tiny, tiny, tiny]), f64::from_bits(3));
        assert_eq!(sum64(&[f64::MIN_POSITIVE, -tiny]), f64::from_bits(f64::MIN_POSITIVE.to_bits() - 1));
        assert_eq!(sum64(&[f64::MAX, f64::MAX, -f64::MAX]), f64::MAX);
        assert_eq!(sum64(&[f64::MAX, f64::MAX]), f64::INFINITY);
        assert_eq!(sum64(&[-f64::MAX, -f64::MAX]), f64::NEG_INFINITY);
        // MAX + half an ulp is a tie between MAX (odd) and 2^1024: overflow.
        let half_ulp = 2f64.powi(970);
        assert_eq!(sum64(&[f64::MAX, half_ulp]), f64::INFINITY);
        assert_eq!(sum64(&[f64::MAX, half_ulp, -tiny]), f64::MAX);
    }

    #[test]
    fn means_are_rounded_once() {
        let mean = |x: &[f64]| f64::from_bits(exact_sum(x).div_round(x.len() as u64, BINARY64));
        assert_eq!(mean(&[1.0, 2.0, 4.0]), 7.0 / 3.0);
        assert_eq!(mean(&[f64::MAX, f64::MAX]), f64::MAX);
        assert_eq!(mean(&[0.1; 10]), 0.1);
        assert_eq!(mean(&[f64::from_bits(1), 0.0, 0.0]), 0.0);
        assert_eq!(mean(&[-f64::from_bits(1), 0.0]).to_bits(), (-0.0f64).to_bits()); // -2^-1075 rounds to -0
        assert_eq!(mean(&[f64::from_bits(3), 0.0]), f64::from_bits(2)); // 1.5 ulp: tie to even
    }

    #[test]
    fn binary32_rounding_is_direct() {
        let f = |x: &[f64]| f32::from_bits(exact_sum(x).round(BINARY32) as u32);
        // 1 + 2^-24 + 2^-60: through binary64 the 2^-60 would be lost and
        // the tie would go to even (1); rounded directly it goes up.
        assert_eq!(f(&[1.0, 2f64.powi(-24), 2f64.powi(-60)]), 1.0 + f32::EPSILON);
        assert_eq!(f(&[1.0, 2f64.powi(-24)]), 1.0);
        assert_eq!(f(&[f32::MAX as f64, f32::MAX as f64]), f32::INFINITY);
        assert_eq!(f(&[f32::from_bits(1) as f64 * 3.0]), f32::from_bits(3));
        assert_eq!(f32::from_bits(ratio_pow2(2, 3, BINARY32) as u32), 4.0f32 / 3.0);
        assert_eq!(f64::from_bits(ratio_pow2(30, 1_000_000_007, BINARY64)), 2f64.powi(30) / 1_000_000_007.0);
    }
}
