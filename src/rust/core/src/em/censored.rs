//! Censored and binned observations: an observation known only to lie in
//! an interval (lower, upper] (right-censored: upper = inf; left-censored:
//! lower = -inf or 0; a histogram's bin, with its count as the weight).
//!
//! EM treats the value as missing (Dempster, Laird and Rubin 1977): its
//! E-step share for component j is the posterior w_j proportional to
//! alpha_j P_j(lower < X <= upper), and its sums are w_j times the
//! conditional means of the features (u, v) on the interval, from the
//! family's upper tails ([`super::family::Family::upper_tail`]). The
//! M-step is then the family's usual one: the expected complete-data
//! log-likelihood has the same form, so the log-likelihood of the observed
//! (censored) data never decreases.
//!
//! Each censored observation keeps a stand-in value in the data (inside
//! its interval) for validation, the dataset's centre and the random
//! starts; its weight there is 0, so the exact E-step leaves it out.

use crate::error::{Error, Result};
use rayon::prelude::*;

use super::cpu;
use super::data::{num, Prepared};
use super::family::Family;
use super::fit::MixParams;

/// The censored observations of one dataset: observation `index[i]`
/// (0-based, increasing) lies in (lower[i], upper[i]].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Censoring {
    pub index: Vec<usize>,
    pub lower: Vec<f64>,
    pub upper: Vec<f64>,
}

/// A dataset's censored observations as the E-step uses them: each
/// distinct interval once, with the total weight of its observations
/// (their E-step shares are the same, so this is exact, and a time-out
/// that censors many observations at one time costs one interval).
#[derive(Debug, Clone, PartialEq)]
pub struct CensoredObs {
    pub lower: Vec<f64>,
    pub upper: Vec<f64>,
    /// The summed weights (each observation 1 unless the fit is weighted).
    pub weight: Vec<f64>,
}

impl CensoredObs {
    /// The censored observations of `c` with their weights from `weights`,
    /// grouped by interval (in a fixed order: by the bounds' bits).
    pub fn new(c: &Censoring, weights: Option<&[f64]>) -> Self {
        let mut groups = std::collections::BTreeMap::new();
        for (k, &i) in c.index.iter().enumerate() {
            let key = (c.lower[k].to_bits() ^ (1 << 63), c.upper[k].to_bits() ^ (1 << 63));
            *groups.entry(key).or_insert(0.0) += weights.map_or(1.0, |w| w[i]);
        }
        let bound = |bits: u64| f64::from_bits(bits ^ (1 << 63));
        CensoredObs {
            lower: groups.keys().map(|k| bound(k.0)).collect(),
            upper: groups.keys().map(|k| bound(k.1)).collect(),
            weight: groups.values().copied().collect(),
        }
    }
}

/// Appends to `out` the values of `x` but those at positions `skip` (a
/// dataset's censored ones: increasing, within x): the runs between them,
/// copied whole.
pub(crate) fn extend_exact(out: &mut Vec<f64>, x: &[f64], skip: &[usize]) {
    let mut from = 0;
    for &i in skip {
        out.extend_from_slice(&x[from..i]);
        from = i + 1;
    }
    out.extend_from_slice(&x[from..]);
}

/// Why censoring does not fit `family`, if it does not.
pub fn check_family(family: Family) -> Result<()> {
    if family.censorable() {
        Ok(())
    } else {
        Err(Error::arg(
            "datasets",
            format!(
                "holds censored observations, which the {} family cannot fit yet (it has no tail probabilities)",
                family.info().label
            ),
        ))
    }
}

/// The censoring of every dataset against the data: one entry per dataset,
/// indices in range and increasing, and each interval non-empty and
/// reaching into the family's support. `first` is the 1-based index of
/// `data[0]`.
pub fn check(data: &[&[f64]], censoring: &[Censoring], family: Family, first: usize) -> Result<()> {
    if censoring.len() != data.len() {
        return Err(Error::Internal(format!("censoring for {} datasets, not {}", censoring.len(), data.len())));
    }
    let discrete = family.info().discrete;
    let positive = family.observation_problem(0.0).is_some() || family.observation_problem(-1.0).is_some();
    // Where the family's values lie: above 0, or (counts) a whole number
    // >= 0 in (lo, hi].
    let reaches = |lo: f64, hi: f64| {
        if discrete {
            hi.floor() >= (lo.floor() + 1.0).max(0.0)
        } else {
            !positive || hi > 0.0
        }
    };
    // Datasets in parallel; the first in order with a problem is reported.
    let checked = data.par_iter().zip(censoring).enumerate().map(|(d, (x, c))| -> Result<()> {
        if c.index.is_empty() {
            return Ok(());
        }
        check_family(family)?;
        let which = first + d;
        if c.lower.len() != c.index.len() || c.upper.len() != c.index.len() {
            return Err(Error::Internal(format!("dataset {which}: censoring vectors of unequal lengths")));
        }
        if c.index.windows(2).any(|w| w[0] >= w[1]) || c.index.last().is_some_and(|&i| i >= x.len()) {
            return Err(Error::Internal(format!("dataset {which}: censored indices out of order or range")));
        }
        let bad = c.lower.iter().zip(&c.upper).position(|(&lo, &hi)| !(lo < hi) || !reaches(lo, hi) || lo == f64::INFINITY);
        if let Some(i) = bad {
            return Err(Error::arg(
                "datasets",
                format!(
                    "censored observation {} of dataset {which} lies in ({}, {}]: an interval must have lower < upper{}",
                    c.index[i] + 1,
                    num(c.lower[i]),
                    num(c.upper[i]),
                    if discrete {
                        " and hold a count (a whole number >= 0)"
                    } else if positive {
                        " and upper > 0 (the family's values are positive)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        Ok(())
    });
    checked.find_first(|r| r.is_err()).unwrap_or(Ok(()))
}

/// P(lower < X <= upper) and the features' partial means on the interval,
/// for one component, as the difference of two tails each at most 1/2, so
/// that an interval far in either tail keeps its digits: upper tails when
/// the interval lies above the median, lower tails when below, and the
/// whole less both outer tails when it holds the median.
pub(crate) fn interval(family: Family, lower: f64, upper: f64, first: f64, second: f64, centre: f64) -> [f64; 3] {
    let above = |c: f64| family.upper_tail(c, first, second, centre);
    let below = |c: f64| family.lower_tail(c, first, second, centre);
    let minus = |a: [f64; 3], b: [f64; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    let (Some(up_lower), Some(low_upper)) = (above(lower), below(upper)) else {
        return [0.0; 3];
    };
    // A right-censored value's part is its upper tail (a left-censored
    // one's its lower tail), whatever its size: there is no difference to
    // lose digits in, and the tail is computed once, not twice.
    let parts = if up_lower[0] <= 0.5 || upper == f64::INFINITY {
        above(upper).map(|b| minus(up_lower, b))
    } else if low_upper[0] <= 0.5 || lower == f64::NEG_INFINITY {
        below(lower).map(|a| minus(low_upper, a))
    } else {
        match (above(f64::NEG_INFINITY), below(lower), above(upper)) {
            (Some(whole), Some(a), Some(b)) => Some(minus(minus(whole, a), b)),
            _ => None,
        }
    };
    parts.unwrap_or([0.0; 3])
}

/// Each component's interval parts (mass and partial means) and log of
/// alpha times the mass, for the interval (lower, upper]; returns the
/// largest log (-inf when no component gives the interval any mass).
fn interval_logs(family: Family, lower: f64, upper: f64, p: &MixParams, centre: f64, parts: &mut [[f64; 3]], logs: &mut [f64]) -> f64 {
    for j in 0..p.components() {
        parts[j] = interval(family, lower, upper, p.mu[j], p.scale[j], centre);
        logs[j] = p.alpha[j].ln() + parts[j][0].ln();
    }
    logs.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Adds the censored observations' share of an E-step at parameters `p`
/// to `sums` (per component: w, w u, w v) and returns their
/// log-likelihood (weighted sum of log alpha-weighted interval masses).
pub fn e_step(family: Family, obs: &CensoredObs, p: &MixParams, centre: f64, sums: &mut [[f64; 3]]) -> f64 {
    let m = p.components();
    let mut parts = vec![[0.0; 3]; m];
    let mut logs = vec![0.0; m];
    let mut ll = 0.0;
    for i in 0..obs.lower.len() {
        let wt = obs.weight[i];
        if wt == 0.0 {
            continue;
        }
        let top = interval_logs(family, obs.lower[i], obs.upper[i], p, centre, &mut parts, &mut logs);
        if top == f64::NEG_INFINITY {
            return f64::NEG_INFINITY;
        }
        let total: f64 = logs.iter().map(|l| (l - top).exp()).sum();
        ll += wt * (top + total.ln());
        for j in 0..m {
            let w = wt * (logs[j] - top).exp() / total;
            if w > 0.0 {
                sums[j][0] += w;
                sums[j][1] += w * parts[j][1] / parts[j][0];
                sums[j][2] += w * parts[j][2] / parts[j][0];
            }
        }
    }
    ll
}

/// Posterior probabilities (n x M, column-major) of every observation of
/// `x` at `p`: the exact ones from their densities, the censored ones
/// (`c`) from their intervals' masses.
pub fn posterior(family: Family, x: &[f64], c: &Censoring, p: &MixParams) -> Result<Vec<f64>> {
    let prep = Prepared::try_new(family, x)?;
    let mut out = cpu::posterior(family, &prep, p)?;
    let (n, m) = (x.len(), p.components());
    let (mut parts, mut logs) = (vec![[0.0; 3]; m], vec![0.0; m]);
    for (k, &i) in c.index.iter().enumerate() {
        let top = interval_logs(family, c.lower[k], c.upper[k], p, prep.centre, &mut parts, &mut logs);
        let total: f64 = logs.iter().map(|l| (l - top).exp()).sum();
        for j in 0..m {
            out[j * n + i] = (logs[j] - top).exp() / total;
        }
    }
    Ok(out)
}

/// The entropy term of ICL (sum_i w_i log max_j z_ij, as
/// `cpu::classification_loglik`) for a dataset with censored
/// observations `c` (weights `weights`, if any).
pub fn classification_loglik(family: Family, x: &[f64], weights: Option<&[f64]>, c: &Censoring, p: &MixParams) -> Result<f64> {
    let prep = Prepared::try_censored(family, x, weights, c)?;
    let exact = cpu::classification_loglik(family, &prep, p);
    let Some(obs) = &prep.censored else { return Ok(exact) };
    let m = p.components();
    let (mut parts, mut logs) = (vec![[0.0; 3]; m], vec![0.0; m]);
    let mut censored = 0.0;
    for i in 0..obs.lower.len() {
        if obs.weight[i] == 0.0 {
            continue;
        }
        let top = interval_logs(family, obs.lower[i], obs.upper[i], p, prep.centre, &mut parts, &mut logs);
        censored -= obs.weight[i] * logs.iter().map(|l| (l - top).exp()).sum::<f64>().ln();
    }
    Ok(exact + censored)
}

/// The posterior of one dataset (keep.posterior): with its censoring, if any.
pub fn posterior_of(family: Family, x: &[f64], c: Option<&Censoring>, p: &MixParams) -> Result<Vec<f64>> {
    match c {
        Some(c) => posterior(family, x, c, p),
        None => cpu::posterior(family, &Prepared::try_new(family, x)?, p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partial means on (a, b] by Simpson's rule on the density.
    fn numeric(family: Family, a: f64, b: f64, first: f64, second: f64, centre: f64) -> [f64; 3] {
        let n = 200_000;
        let h = (b - a) / n as f64;
        let mut out = [0.0; 3];
        for k in 0..=n {
            let x = a + k as f64 * h;
            let f = family.log_density(x, first, second).exp();
            let (u, v) = family.features(x, centre);
            let w = if k == 0 || k == n { 1.0 } else if k % 2 == 1 { 4.0 } else { 2.0 };
            out[0] += w * f;
            out[1] += w * f * u;
            out[2] += w * f * v;
        }
        out.map(|s| s * h / 3.0)
    }

    #[test]
    fn exact_values_leave_out_every_censored_index() {
        let x: Vec<f64> = (0..9).map(f64::from).collect();
        for index in [vec![], vec![0], vec![8], vec![0, 1, 2], vec![3, 4, 7, 8], (0..9).collect()] {
            let mut got = vec![-1.0];
            extend_exact(&mut got, &x, &index);
            let want: Vec<f64> = std::iter::once(-1.0).chain(x.iter().copied().filter(|&v| !index.contains(&(v as usize)))).collect();
            assert_eq!(got, want, "censored {index:?}");
        }
    }

    #[test]
    fn interval_moments_match_integration() {
        let cases = [
            (Family::Normal, -1.0, 2.5, 0.5, 1.3, 0.2),
            (Family::Normal, 1.8, 9.0, 0.5, 1.3, 0.0),
            (Family::InvGauss, 0.2, 1.7, 1.0, 3.0, 0.0),
            (Family::InvGauss, 2.0, 40.0, 1.5, 0.8, 0.0),
            (Family::InvGauss, 1e-6, 0.5, 3.0, 30.0, 0.0),
            (Family::LogNormal, 0.5, 4.0, 0.3, 0.7, 0.1),
            (Family::Exponential, 0.0, 3.0, 0.8, f64::NAN, 0.0),
            // Far in the lower tail, where 1 - P(X > c) keeps no digits, and
            // around the median.
            (Family::InvGauss, 0.1, 0.25, 0.7564827987121433, 31.150256116137687, 0.0),
            (Family::InvGauss, 0.9, 1.1, 1.0, 3.0, 0.0),
            (Family::Normal, -9.0, -8.0, 0.5, 1.0, 0.2),
            (Family::LogNormal, 0.01, 0.05, 1.0, 0.4, 0.1),
            (Family::Exponential, 1e-4, 2e-3, 0.8, f64::NAN, 0.0),
            (Family::Gamma, 0.5, 4.0, 2.5, 1.5, 0.3),
            (Family::Gamma, 3.0, 30.0, 2.5, 1.5, 0.3),
            (Family::Gamma, 0.01, 0.05, 2.5, 1.5, 0.3),
            (Family::Gamma, 1e-4, 0.02, 0.4, 2.0, -1.0),
            (Family::Gamma, 1.2, 1.3, 60.0, 50.0, 0.1),
        ];
        for (family, a, b, first, second, centre) in cases {
            let got = interval(family, a, b, first, second, centre);
            let want = numeric(family, a, b, first, second, centre);
            for k in 0..3 {
                assert!((got[k] - want[k]).abs() <= 1e-7 * want[k].abs(), "{family:?} ({a}, {b}] part {k}: {} vs {}", got[k], want[k]);
            }
        }
    }

    /// The tails add to the whole; a right-censored value's part is its
    /// upper tail (one evaluation, whatever its size; it was the whole less
    /// the lower tail, at twice the cost, above 1/2) and a left-censored
    /// one's its lower tail.
    #[test]
    fn lower_and_upper_tails_add_to_the_whole() {
        let cases = [
            (Family::Normal, 0.5, 1.3, 0.2),
            (Family::LogNormal, 0.3, 0.7, 0.1),
            (Family::InvGauss, 1.5, 4.0, 0.0),
            (Family::Exponential, 0.8, f64::NAN, 0.0),
            (Family::Gamma, 2.5, 1.5, 0.3),
            (Family::Gamma, 0.3, 0.2, -0.5),
            (Family::Poisson, 2.7, f64::NAN, 0.0),
        ];
        for (family, first, second, centre) in cases {
            let whole = family.upper_tail(f64::NEG_INFINITY, first, second, centre).unwrap();
            assert_eq!(family.lower_tail(f64::INFINITY, first, second, centre).unwrap(), whole);
            for c in [0.05, 0.4, 1.0, 1.7, 3.0, 8.0] {
                let (lo, up) = (family.lower_tail(c, first, second, centre).unwrap(), family.upper_tail(c, first, second, centre).unwrap());
                assert_eq!(interval(family, c, f64::INFINITY, first, second, centre), up, "{family:?} ({c}, inf]");
                assert_eq!(interval(family, f64::NEG_INFINITY, c, first, second, centre), lo, "{family:?} (-inf, {c}]");
                for k in 0..3 {
                    assert!((lo[k] + up[k] - whole[k]).abs() <= 1e-12 * whole[k].abs().max(1.0), "{family:?} at {c}, part {k}: {} + {} vs {}", lo[k], up[k], whole[k]);
                }
            }
        }
    }

    #[test]
    fn whole_line_tails_are_the_moments() {
        let ig = Family::InvGauss.upper_tail(0.0, 2.0, 5.0, 0.0).unwrap();
        assert_eq!(ig, [1.0, 2.0, 0.5 + 0.2]);
        let n = Family::Normal.upper_tail(f64::NEG_INFINITY, 1.0, 2.0, 0.5).unwrap();
        assert!((n[0] - 1.0).abs() < 1e-15 && (n[1] - 0.5).abs() < 1e-15 && (n[2] - (4.0 + 0.25)).abs() < 1e-12);
        assert_eq!(Family::InvGauss.upper_tail(f64::INFINITY, 2.0, 5.0, 0.0).unwrap(), [0.0; 3]);
        assert!(Family::ALL.iter().all(|f| f.censorable()));
    }

    /// Poisson intervals against sums of the probabilities.
    #[test]
    fn count_intervals_match_sums() {
        let lambda = 6.5;
        let pmf = |k: u32| Family::Poisson.log_density(k as f64, lambda, f64::NAN).exp();
        for (lo, hi) in [(f64::NEG_INFINITY, 0.0), (-0.5, 2.0), (2.0, 5.0), (2.5, 3.7), (9.0, f64::INFINITY), (30.0, f64::INFINITY), (f64::NEG_INFINITY, 1.5)] {
            let (mut p, mut m) = (0.0, 0.0);
            for k in 0..200u32 {
                if (k as f64) > lo && (k as f64) <= hi {
                    p += pmf(k);
                    m += k as f64 * pmf(k);
                }
            }
            let got = interval(Family::Poisson, lo, hi, lambda, f64::NAN, 0.0);
            assert!((got[0] - p).abs() <= 1e-13 * p && (got[1] - m).abs() <= 1e-13 * m.max(1e-300), "({lo}, {hi}]: {got:?} vs {p}, {m}");
        }
    }
}
