//! Uniform, exponential, normal and gamma variates from a keyed stream, spelled out
//! so that draws never change with a crate version.
//!
//! Streams are keyed by (seed, chain, sweep, block): the block is a group's
//! coefficients, or one of the global blocks. Keying by sweep too keeps no
//! per-group generator state between sweeps (4 million groups would need
//! gigabytes of it), and the draws stay independent of thread count.

use crate::rng::KeyedStream;

/// Global blocks, numbered after the groups' blocks 0..G.
#[derive(Debug, Clone, Copy)]
pub enum Block {
    Group(usize),
    Gamma,
    Mu,
    Tau,
    Sigma,
    Init,
    /// The non-centred updates of mu and tau (`Sweeper::interweave`).
    Interweave,
    /// Level l of grouping factor f besides the groups (`factor.rs`).
    Level(usize, usize),
    /// The sds of grouping factor f.
    FactorScale(usize),
    /// The shifts of grouping factor f's effects against their partners.
    FactorShift(usize),
    /// The non-centred updates of grouping factor f's sds.
    FactorInterweave(usize),
}

impl Block {
    fn index(self, groups: usize) -> u64 {
        let g = groups as u64;
        match self {
            Block::Group(i) => i as u64,
            Block::Gamma => g,
            Block::Mu => g + 1,
            Block::Tau => g + 2,
            Block::Sigma => g + 3,
            Block::Init => g + 4,
            Block::Interweave => g + 5,
            // Streams of their own (`Block::salt`), numbered from 0.
            Block::Level(_, l) => l as u64,
            Block::FactorScale(_) | Block::FactorShift(_) | Block::FactorInterweave(_) => 0,
        }
    }

    /// Folded into the seed: the blocks of another grouping factor (whose
    /// levels would otherwise share the numbers of the groups' blocks)
    /// draw from other keys. 0 for the groups' and the global blocks.
    fn salt(self) -> u64 {
        match self {
            Block::Level(f, _) => (3 * f as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03),
            Block::FactorScale(f) => (3 * f as u64 + 2).wrapping_mul(0xD1B5_4A32_D192_ED03),
            Block::FactorShift(f) => (3 * f as u64 + 3).wrapping_mul(0xD1B5_4A32_D192_ED03),
            // (Past every other factor's salts: 3 per factor above.)
            Block::FactorInterweave(f) => (f as u64 + 1).wrapping_mul(0x9FB2_1C65_1E98_DF25),
            _ => 0,
        }
    }
}

/// The stream of one (seed, chain, sweep, block).
pub fn stream(seed: u64, chain: usize, sweep: usize, block: Block, groups: usize) -> Rng {
    // Fold the sweep into the key (splitmix-style), so that (chain, block)
    // addresses the ChaCha stream and position.
    let mut s = seed ^ block.salt() ^ (sweep as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    s = s.wrapping_add((sweep as u64) << 1 | 1);
    Rng(KeyedStream::new(s, chain as u64, block.index(groups)))
}

/// A source of variates.
pub struct Rng(KeyedStream);

impl Rng {
    /// Uniform on (0, 1): never exactly 0 or 1.
    pub fn uniform(&mut self) -> f64 {
        ((self.0.next_u64() >> 11) as f64 + 0.5) * (1.0 / 9_007_199_254_740_992.0)
    }
    /// Standard exponential.
    pub fn exp1(&mut self) -> f64 {
        -self.uniform().ln()
    }
    /// Standard normal (Box-Muller; the second variate is discarded so that
    /// a draw's position in the stream never depends on earlier calls).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
    /// Gamma(shape, 1), shape > 0 (Marsaglia and Tsang 2000; below 1 by
    /// Gamma(shape + 1) U^(1/shape)).
    pub fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            let boost = self.uniform().powf(1.0 / shape);
            return self.gamma(shape + 1.0) * boost;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let z = self.normal();
            let v = (1.0 + c * z).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.uniform();
            if u.ln() < 0.5 * z * z + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }
}
