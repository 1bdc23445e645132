//! Random starting values, drawn from the keyed stream of each
//! (dataset, start) pair so that every backend starts from the same values.

use crate::rng::KeyedStream;

use super::config::{CheckedEmConfig, Starts};
use crate::tolerances::MAX_START_REDRAWS;

use super::family::Family;
use super::fit::MixParams;

/// One random start: for each component, the ML estimate from a random
/// subset of p + 1 = 3 distinct observations, weights 1/M. A component whose
/// subset gives invalid values is redrawn, at most MAX_START_REDRAWS times.
/// The dataset must hold at least 3 observations.
pub fn random_start(family: Family, x: &[f64], components: usize, rng: &mut KeyedStream) -> Result<MixParams, String> {
    let mut mu = Vec::with_capacity(components);
    let mut scale = Vec::with_capacity(components);
    for j in 0..components {
        let (m, s) = (0..MAX_START_REDRAWS)
            .find_map(|_| family.ml_estimate(&draw_subset(x, rng)))
            .ok_or_else(|| {
                format!(
                    "no valid random start for component {} in {MAX_START_REDRAWS} draws (too many tied values?)",
                    j + 1
                )
            })?;
        mu.push(m);
        scale.push(s);
    }
    Ok(MixParams { alpha: vec![1.0 / components as f64; components], mu, scale })
}

/// Starting values of start `start` of the dataset with global index
/// `dataset` (the same on every backend).
pub fn initial_values(config: &CheckedEmConfig, x: &[f64], dataset: usize, start: usize) -> Result<MixParams, String> {
    match &config.starts {
        Starts::Random { .. } => random_start(
            config.family,
            x,
            config.components,
            &mut KeyedStream::new(config.seed, dataset as u64, start as u64),
        ),
        Starts::Given(inits) => Ok(inits[if inits.len() == 1 { 0 } else { dataset - config.dataset_offset }].clone()),
    }
}

/// Three observations at distinct random positions.
fn draw_subset(x: &[f64], rng: &mut KeyedStream) -> [f64; Family::START_SUBSET] {
    let n = x.len() as u64;
    let i = rng.below(n);
    let j = loop {
        let j = rng.below(n);
        if j != i {
            break j;
        }
    };
    let k = loop {
        let k = rng.below(n);
        if k != i && k != j {
            break k;
        }
    };
    [x[i as usize], x[j as usize], x[k as usize]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_are_valid_repeatable_and_keyed() {
        let x: Vec<f64> = (1..=50).map(|i| i as f64 * 0.37).collect();
        let a = random_start(Family::InvGauss, &x, 3, &mut KeyedStream::new(5, 0, 0)).unwrap();
        let b = random_start(Family::InvGauss, &x, 3, &mut KeyedStream::new(5, 0, 0)).unwrap();
        let c = random_start(Family::InvGauss, &x, 3, &mut KeyedStream::new(5, 0, 1)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.check_start(Family::InvGauss, 3).is_ok());
    }

    #[test]
    fn tied_subsets_are_redrawn() {
        // Mostly ties: many subsets are constant and must be redrawn, not kept.
        let mut x = vec![1.0; 40];
        x[0] = 2.0;
        x[1] = 3.0;
        x[2] = 5.0;
        let p = random_start(Family::Normal, &x, 2, &mut KeyedStream::new(1, 0, 0)).unwrap();
        assert!(p.scale.iter().all(|s| *s > 0.0));
        let all_tied = vec![1.0; 10];
        assert!(random_start(Family::Normal, &all_tied, 1, &mut KeyedStream::new(1, 0, 0)).is_err());
    }
}
