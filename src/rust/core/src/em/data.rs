//! Checking datasets and preparing them for the E-step.

use rayon::prelude::*;

use crate::error::{Error, Result};

use super::family::Family;

/// A dataset in the form the E-step reads: the features (u, v) of every
/// observation, contiguous, plus the shared log-density term summed once.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub n: usize,
    pub centre: f64,
    /// Sum over observations of k(x), the log-density part no component changes.
    pub shared: f64,
    pub uv: Vec<[f64; 2]>,
}

impl Prepared {
    pub fn new(family: Family, x: &[f64]) -> Self {
        let centre = family.centre(x);
        let uv = x
            .iter()
            .map(|&xi| {
                let (u, v) = family.features(xi, centre);
                [u, v]
            })
            .collect();
        let shared = x.iter().map(|&xi| family.shared_term(xi)).sum();
        Prepared { n: x.len(), centre, shared, uv }
    }
}

/// Datasets longer than this are scanned in parallel chunks of this size.
const SCAN_CHUNK: usize = 1 << 16;

/// Position of the first element of `x` for which `bad` holds, scanning
/// long vectors in parallel.
fn first_where(x: &[f64], bad: impl Fn(f64) -> bool + Sync) -> Option<usize> {
    if x.len() <= 4 * SCAN_CHUNK {
        return x.iter().position(|&v| bad(v));
    }
    let chunk = x.par_chunks(SCAN_CHUNK).position_first(|c| c.iter().any(|&v| bad(v)))?;
    let start = chunk * SCAN_CHUNK;
    x[start..].iter().position(|&v| bad(v)).map(|i| start + i)
}

/// Reject the first value that is not a valid observation (dataset is the
/// 1-based index the caller reports).
pub fn validate(family: Family, x: &[f64], dataset: usize) -> Result<()> {
    match first_where(x, |v| family.observation_problem(v).is_some()) {
        None => Ok(()),
        Some(i) => Err(Error::InvalidData {
            dataset,
            position: i + 1,
            value: x[i],
            problem: family.observation_problem(x[i]).unwrap_or_default().to_string(),
        }),
    }
}

/// Validate every dataset; the error names the first invalid one.
/// `first` is the 1-based index of `data[0]`.
pub fn validate_all(family: Family, data: &[&[f64]], first: usize) -> Result<()> {
    let bad = data.par_iter().position_first(|x| first_where(x, |v| family.observation_problem(v).is_some()).is_some());
    match bad {
        None => Ok(()),
        Some(d) => validate(family, data[d], first + d),
    }
}

/// Smallest dataset an M-component fit accepts: enough observations for a
/// random start (p + 1 = 3) and for the 3M - 1 free parameters.
pub fn min_observations(components: usize) -> usize {
    Family::START_SUBSET.max(Family::parameters(components))
}

/// Why a valid dataset cannot be fitted at all (too small, constant).
pub fn unfittable_reason(x: &[f64], components: usize) -> Option<String> {
    let need = min_observations(components);
    if x.len() < need {
        return Some(format!(
            "{} observation{} but a {components}-component mixture needs at least {need}",
            x.len(),
            if x.len() == 1 { "" } else { "s" }
        ));
    }
    if first_where(x, |v| v != x[0]).is_none() {
        return Some(format!("all {} observations are equal ({})", x.len(), x[0]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bad_value_is_reported() {
        let err = validate(Family::InvGauss, &[1.0, 2.0, -3.0, 0.0], 7).unwrap_err();
        assert_eq!(
            err,
            Error::InvalidData { dataset: 7, position: 3, value: -3.0, problem: "inverse Gaussian data must be strictly positive".into() }
        );
        assert!(validate(Family::Normal, &[1.0, -2.0], 1).is_ok());
        assert!(validate(Family::Normal, &[1.0, f64::NAN], 1).is_err());
        assert!(validate(Family::Normal, &[f64::INFINITY], 1).is_err());
    }

    #[test]
    fn too_small_and_constant_datasets_are_unfittable() {
        assert!(unfittable_reason(&[1.0, 2.0], 1).is_some());
        assert!(unfittable_reason(&[1.0, 2.0, 3.0], 1).is_none());
        assert!(unfittable_reason(&[1.0, 2.0, 3.0, 4.0], 2).is_some());
        assert!(unfittable_reason(&[1.0, 2.0, 3.0, 4.0, 5.0], 2).is_none());
        assert!(unfittable_reason(&[2.0; 50], 2).unwrap().contains("equal"));
    }
}
