//! Keyed, counter-based random streams.
//!
//! Every stream is addressed by (seed, dataset, start): ChaCha8 keyed by the
//! seed, stream number = dataset index, word position = start << 40. Results
//! therefore never depend on thread count, chunking, backend or machine.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// The random stream of one (dataset, start) pair.
pub struct KeyedStream(ChaCha8Rng);

impl KeyedStream {
    pub fn new(seed: u64, dataset: u64, start: u64) -> Self {
        let mut key = [0u8; 32];
        // Spread the 64-bit seed over the key with splitmix64 so nearby seeds
        // give unrelated keys.
        let mut s = seed;
        for chunk in key.chunks_mut(8) {
            chunk.copy_from_slice(&splitmix64(&mut s).to_le_bytes());
        }
        let mut rng = ChaCha8Rng::from_seed(key);
        rng.set_stream(dataset);
        rng.set_word_pos((start as u128) << 40);
        KeyedStream(rng)
    }

    /// The generator itself, for `rand_distr`'s distributions.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.0
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform double in [0, 1), 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `0..n` (n > 0), unbiased (Lemire's method); the
    /// algorithm is spelled out so it never changes with a crate version.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_keyed_and_repeatable() {
        let a: Vec<u64> = (0..4).map(|_| KeyedStream::new(7, 3, 2).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let b = KeyedStream::new(7, 3, 3).next_u64();
        let c = KeyedStream::new(7, 4, 2).next_u64();
        let d = KeyedStream::new(8, 3, 2).next_u64();
        assert!(a[0] != b && a[0] != c && a[0] != d && b != c);
    }

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut s = KeyedStream::new(1, 0, 0);
        let mut counts = [0usize; 5];
        for _ in 0..50_000 {
            counts[s.below(5) as usize] += 1;
        }
        for c in counts {
            // 10,000 expected, sd ~ 89.
            assert!((c as f64 - 10_000.0).abs() < 500.0, "{counts:?}");
        }
    }
}
