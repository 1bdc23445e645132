//! The one reduction tree that `pairwise` and `div2` share.
//!
//! Definition (it fixes every rounding, so a result depends on n only):
//! pad x with zeros to P = 2^ceil(log2 n) values (P = 1 for n = 1); these
//! are level 0; node j of level l+1 is combine(node 2j, node 2j+1) of
//! level l; the value is the single node of level log2 P.
//!
//! - pairwise: combine(a, b) = a + b, so the value is the sum.
//! - div2: combine(a, b) = a*0.5 + b*0.5, so the value is sum / P and every
//!   node lies between its children. Halving the operands first gives the
//!   same bits as (a + b)/2, hence div2 = pairwise / P exactly, except
//!   where a + b would overflow (the halves cannot) or the halves are
//!   subnormal (halving then rounds).
//!
//! Every aligned block of 2^k inputs is a subtree. A GPU therefore
//! reproduces these bits when each thread block reduces an aligned
//! power-of-two block by adjacent pairs (a non-full last block padded with
//! zeros to the same size; a lone block of a short input to the next power
//! of two of n) and the block results are reduced again by adjacent pairs.
//! The CPU below splits the tree at its top levels across threads and
//! walks the rest sequentially; neither choice changes the tree.

use super::fixed::ratio_pow2;
use super::real::Real;

/// How two children become their parent.
pub trait Combine<T: Real> {
    fn combine(a: T, b: T) -> T;
}

/// combine(a, b) = a + b.
pub struct Plus;
/// combine(a, b) = a/2 + b/2.
pub struct Halve;

impl<T: Real> Combine<T> for Plus {
    #[inline(always)]
    fn combine(a: T, b: T) -> T {
        a + b
    }
}

impl<T: Real> Combine<T> for Halve {
    #[inline(always)]
    fn combine(a: T, b: T) -> T {
        a * T::HALF + b * T::HALF
    }
}

/// Inputs reduced per step of the sequential walk (written out so that
/// the compiler vectorises its first levels).
const BLOCK: usize = 32;
/// Subtrees of at most this many (padded) inputs run on one thread.
const SEQUENTIAL: usize = 1 << 15;

/// The value of the tree over `x` (zero for an empty x).
pub fn value<T: Real, C: Combine<T>>(x: &[f64]) -> T {
    if x.is_empty() {
        return T::ZERO;
    }
    let p = x.len().next_power_of_two();
    if p < BLOCK {
        small::<T, C>(x, 0, p)
    } else {
        subtree::<T, C>(x, 0, p)
    }
}

/// The sum by the pairwise tree.
pub fn pairwise<T: Real>(x: &[f64]) -> T {
    value::<T, Plus>(x)
}

/// The div2 tree's value sum/P and the padded size P (0 for an empty x).
pub fn div2<T: Real>(x: &[f64]) -> (T, usize) {
    let p = if x.is_empty() { 0 } else { x.len().next_power_of_two() };
    (value::<T, Halve>(x), p)
}

/// div2's correction C = P / n (in [1, 2)), correctly rounded to `T`:
/// the mean is (sum / P) * C.
pub fn correction<T: Real>(p: usize, n: usize) -> T {
    T::from_bits_u64(ratio_pow2(p.trailing_zeros(), n as u64, T::FORMAT))
}

/// The value of the aligned subtree of `size` padded inputs (a power of two,
/// at least `x.len()` and at least 32) whose leading inputs are `x`: a
/// piece of a longer input, for reductions fed in chunks.
pub fn piece<T: Real, C: Combine<T>>(x: &[f64], size: usize) -> T {
    debug_assert!(size.is_power_of_two() && size >= BLOCK && size >= x.len());
    subtree::<T, C>(x, 0, size)
}

/// Subtree over padded positions lo .. lo + size (size a power of two >= BLOCK).
fn subtree<T: Real, C: Combine<T>>(x: &[f64], lo: usize, size: usize) -> T {
    let n = x.len();
    if lo >= n {
        // All padding: combine(0, 0) = 0 for both trees.
        return T::ZERO;
    }
    if size <= SEQUENTIAL {
        return sequential::<T, C>(&x[lo..n.min(lo + size)], size);
    }
    let half = size / 2;
    let (a, b) = rayon::join(|| subtree::<T, C>(x, lo, half), || subtree::<T, C>(x, lo + half, half));
    C::combine(a, b)
}

/// Subtree of `size` padded inputs whose real part is `x`, on one thread:
/// blocks are reduced left to right and merged like a binary counter, so
/// the stack holds one finished subtree per level.
fn sequential<T: Real, C: Combine<T>>(x: &[f64], size: usize) -> T {
    let mut counter = Counter::<T> { stack: [T::ZERO; usize::BITS as usize], count: 0 };
    let (full, rest) = x.as_chunks::<BLOCK>();
    for b in full {
        counter.push::<C>(block::<T, C>(b));
    }
    if !rest.is_empty() {
        let mut padded = [0.0; BLOCK];
        padded[..rest.len()].copy_from_slice(rest);
        counter.push::<C>(block::<T, C>(&padded));
    }
    // Blocks wholly in the padding are 0, but their parents are not
    // (div2 halves its other child), so they go through the counter too.
    let blocks = size / BLOCK;
    while counter.count < blocks {
        counter.push::<C>(T::ZERO);
    }
    counter.stack[blocks.trailing_zeros() as usize]
}

/// Subtree values waiting for their right sibling, one per level.
struct Counter<T> {
    stack: [T; usize::BITS as usize],
    count: usize,
}

impl<T: Real> Counter<T> {
    #[inline(always)]
    fn push<C: Combine<T>>(&mut self, mut v: T) {
        let mut level = 0;
        while (self.count >> level) & 1 == 1 {
            v = C::combine(self.stack[level], v);
            level += 1;
        }
        self.stack[level] = v;
        self.count += 1;
    }
}

/// The subtree over one aligned block, level by level.
#[inline(always)]
fn block<T: Real, C: Combine<T>>(x: &[f64; BLOCK]) -> T {
    let l1: [T; 16] = std::array::from_fn(|i| C::combine(T::from_f64(x[2 * i]), T::from_f64(x[2 * i + 1])));
    let l2: [T; 8] = std::array::from_fn(|i| C::combine(l1[2 * i], l1[2 * i + 1]));
    let l3: [T; 4] = std::array::from_fn(|i| C::combine(l2[2 * i], l2[2 * i + 1]));
    C::combine(C::combine(l3[0], l3[1]), C::combine(l3[2], l3[3]))
}

/// The tree for short inputs (P < BLOCK), recursively.
fn small<T: Real, C: Combine<T>>(x: &[f64], lo: usize, size: usize) -> T {
    if size == 1 {
        return x.get(lo).map_or(T::ZERO, |&v| T::from_f64(v));
    }
    let half = size / 2;
    C::combine(small::<T, C>(x, lo, half), small::<T, C>(x, lo + half, half))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, written out: pad, then halve the level until one node is left.
    fn by_levels<T: Real, C: Combine<T>>(x: &[f64]) -> T {
        let mut level: Vec<T> = x.iter().map(|&v| T::from_f64(v)).collect();
        level.resize(x.len().next_power_of_two(), T::ZERO);
        while level.len() > 1 {
            level = level.chunks_exact(2).map(|p| C::combine(p[0], p[1])).collect();
        }
        level[0]
    }

    #[test]
    fn walk_matches_the_definition_bit_for_bit() {
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Mixed magnitudes so that the order of additions shows in the bits.
            ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.3) * 2f64.powi((s % 40) as i32 - 20)
        };
        let x: Vec<f64> = (0..(3 * SEQUENTIAL + 77)).map(|_| next()).collect();
        for n in (1..=70).chain([127, 128, 129, 1000, 1024, 1025, 4097, SEQUENTIAL, SEQUENTIAL + 1, x.len()]) {
            let x = &x[..n];
            assert_eq!(pairwise::<f64>(x).to_bits(), by_levels::<f64, Plus>(x).to_bits(), "pairwise n = {n}");
            assert_eq!(div2::<f64>(x).0.to_bits(), by_levels::<f64, Halve>(x).to_bits(), "div2 n = {n}");
            assert_eq!(pairwise::<f32>(x).to_bits(), by_levels::<f32, Plus>(x).to_bits(), "pairwise f32 n = {n}");
            assert_eq!(div2::<f32>(x).0.to_bits(), by_levels::<f32, Halve>(x).to_bits(), "div2 f32 n = {n}");
        }
    }

    #[test]
    fn div2_is_the_pairwise_sum_scaled_away_from_overflow() {
        let x: Vec<f64> = (0..1000).map(|i| (i as f64 * 0.37).sin() * 1e10).collect();
        let (avg, p) = div2::<f64>(&x);
        assert_eq!(p, 1024);
        assert_eq!(avg * p as f64, pairwise::<f64>(&x));
        // Where a + b overflows, the halved operands do not.
        let big = [f64::MAX, f64::MAX, f64::MAX];
        assert_eq!(pairwise::<f64>(&big), f64::INFINITY);
        assert_eq!(div2::<f64>(&big).0, f64::MAX * 0.75);
    }
}
