//! Random starting values, drawn from the keyed stream of each
//! (dataset, start) pair so that every backend starts from the same values.
//! Two methods: k-means++ seeding (the default) and the 2015 package's
//! subsets of 3 observations.

use crate::rng::KeyedStream;

use super::config::{CheckedEmConfig, StartMethod, Starts};
use crate::tolerances::{MAX_START_REDRAWS, SEED_SAMPLE};

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
    let mut p = drawn_values(config, x, dataset, start)?;
    if let Some(c) = &config.constraints {
        c.apply_to_start(&mut p);
    }
    Ok(p)
}

/// [`initial_values`] before the constraints.
fn drawn_values(config: &CheckedEmConfig, x: &[f64], dataset: usize, start: usize) -> Result<MixParams, String> {
    match &config.starts {
        Starts::Random { method, .. } => {
            let rng = &mut KeyedStream::new(config.seed, dataset as u64, start as u64);
            let spread = match method {
                StartMethod::Mixed => start % 2 == 0,
                StartMethod::KMeansPlusPlus => true,
                StartMethod::Subsets => false,
            };
            if spread {
                kmeanspp_start(config.family, x, config.components, rng)
            } else {
                random_start(config.family, x, config.components, rng)
            }
        }
        Starts::Given(inits) => Ok(inits[if inits.len() == 1 { 0 } else { dataset - config.dataset_offset }].clone()),
    }
}

/// k-means++ seeding (Arthur & Vassilvitskii 2007) on the observations, or
/// on a sample of SEED_SAMPLE of them drawn with replacement when there are
/// more: the first seed uniformly, each next one with probability
/// proportional to its squared distance from the nearest seed (on the log
/// scale for the inverse Gaussian, whose components differ by factors).
/// Each component starts at its seed with the scale of the whole sample
/// (ML estimate) and weight 1/M: wide components at spread-out means, which
/// EM then narrows. Seeds spread over the data, so a few distant
/// observations (a small component) are seeded by most starts. (Starting
/// from the seeds' k-means cells instead finds the optimum far less often
/// when components overlap with different spreads: measured on
/// MASS::galaxies and the inverse Gaussian demo mixture, see the vignette.)
pub fn kmeanspp_start(family: Family, x: &[f64], components: usize, rng: &mut KeyedStream) -> Result<MixParams, String> {
    let sample: Vec<f64> = if x.len() <= SEED_SAMPLE {
        x.to_vec()
    } else {
        (0..SEED_SAMPLE).map(|_| x[rng.below(x.len() as u64) as usize]).collect()
    };
    let t: Vec<f64> = sample.iter().map(|&v| family.seed_coordinate(v)).collect();
    let m = sample.len();
    let whole = family
        .ml_estimate(&sample)
        .ok_or_else(|| "no valid k-means++ start: the observations give no valid scale (all tied?)".to_string())?;
    let mut d2 = vec![f64::INFINITY; m];
    let (mut first, mut second) = (Vec::with_capacity(components), Vec::with_capacity(components));
    for j in 0..components {
        let c = if j == 0 {
            rng.below(m as u64) as usize
        } else {
            let total: f64 = d2.iter().sum();
            if !(total > 0.0 && total.is_finite()) {
                return Err(format!("the data hold fewer distinct values than the {components} components"));
            }
            let mut u = rng.uniform() * total;
            // The last observation with positive distance, should rounding
            // leave u above the running sum.
            let mut pick = (0..m).rev().find(|&i| d2[i] > 0.0).unwrap_or(0);
            for (i, &d) in d2.iter().enumerate() {
                if d > 0.0 && u < d {
                    pick = i;
                    break;
                }
                u -= d;
            }
            pick
        };
        let (p1, p2) = family.seeded(sample[c], whole);
        first.push(p1);
        second.push(p2);
        let tc = t[c];
        d2.iter_mut().zip(&t).for_each(|(d, &ti)| *d = d.min((ti - tc) * (ti - tc)));
    }
    let p = MixParams { alpha: vec![1.0 / components as f64; components], mu: first, scale: second };
    p.check_start(family, components).map_err(|why| format!("no valid k-means++ start ({why})"))?;
    Ok(p)
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
    fn kmeanspp_seeds_a_small_distant_group() {
        // 60 observations near 0 and 3 near 100: with k-means++ seeding the
        // distant group is seeded with probability close to 1.
        let mut x: Vec<f64> = (0..60).map(|i| (i as f64 * 0.61).sin()).collect();
        x.extend([99.5, 100.0, 100.8]);
        let mut found = 0;
        for s in 0..50 {
            let p = kmeanspp_start(Family::Normal, &x, 2, &mut KeyedStream::new(3, 0, s)).unwrap();
            assert!(p.check_start(Family::Normal, 2).is_ok());
            assert!((p.alpha.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            if p.mu.iter().any(|m| *m > 99.0) {
                found += 1;
            }
        }
        assert!(found >= 48, "{found} of 50 starts seeded the distant group");
        // Inverse Gaussian: positive data, valid shapes, sampled when large.
        let y: Vec<f64> = (1..2000).map(|i| 0.5 + (i % 37) as f64 * if i % 5 == 0 { 3.0 } else { 0.1 }).collect();
        let a = kmeanspp_start(Family::InvGauss, &y, 3, &mut KeyedStream::new(1, 2, 3)).unwrap();
        let b = kmeanspp_start(Family::InvGauss, &y, 3, &mut KeyedStream::new(1, 2, 3)).unwrap();
        assert_eq!(a, b);
        assert!(a.check_start(Family::InvGauss, 3).is_ok());
        // Fewer distinct values than components: an error, not NaN.
        assert!(kmeanspp_start(Family::Normal, &[1.0, 1.0, 2.0, 2.0], 3, &mut KeyedStream::new(1, 0, 0)).is_err());
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
