//! Simulated mixture data for tests and benchmarks (R users simulate with
//! rinvgaussmix() in R instead, so that set.seed() applies).

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use super::family::Family;
use super::fit::MixParams;

/// `n` draws from the mixture `p` of `family`, from the stream `seed`.
pub fn mixture(family: Family, p: &MixParams, n: usize, seed: u64) -> Vec<f64> {
    mixture_from(family, p, n, &mut ChaCha8Rng::seed_from_u64(seed))
}

/// `n` draws from the mixture `p` of `family`, from `rng`: a component by
/// one uniform, then a value of it.
pub fn mixture_from(family: Family, p: &MixParams, n: usize, rng: &mut ChaCha8Rng) -> Vec<f64> {
    let cumulative: Vec<f64> = p.alpha.iter().scan(0.0, |acc, a| { *acc += a; Some(*acc) }).collect();
    (0..n)
        .map(|_| {
            let r: f64 = rng.random::<f64>() * cumulative[cumulative.len() - 1];
            let j = cumulative.iter().position(|&c| r < c).unwrap_or(cumulative.len() - 1);
            family.sample(p.mu[j], p.scale[j], rng)
            // Invalid parameters are the caller's bug; NaN makes validation say so.
            .unwrap_or(f64::NAN)
        })
        .collect()
}

/// The two-component inverse-Gaussian mixture of the 2015 bulkem demo and
/// the peer benchmark: alpha = (0.3, 0.7), mu = (1, 3), lambda = (30, 0.2).
pub fn demo_params() -> MixParams {
    MixParams { alpha: vec![0.3, 0.7], mu: vec![1.0, 3.0], scale: vec![30.0, 0.2] }
}
