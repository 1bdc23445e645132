//! An HMM: validated start and transition probabilities and an emission
//! distribution ([`super::emission`]).

use crate::error::{Error, Result};
use crate::tolerances::HMM_ROW_SUM_TOL;

use super::emission::{Categorical, Emission};

/// An HMM with N states. `trans` is row-major: `trans[i * N + j]` =
/// P(state j at t+1 | state i at t). Exact zeros are allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct HmmModel<E = Categorical> {
    pub n_states: usize,
    pub start: Vec<f64>,
    pub trans: Vec<f64>,
    pub emission: E,
}

impl HmmModel<Categorical> {
    /// A categorical HMM with V = `n_symbols` symbols: `emis[i * V + k]` =
    /// P(symbol k | state i). Validated: dimensions agree, entries finite
    /// and >= 0, every probability vector sums to 1 within [`HMM_ROW_SUM_TOL`].
    pub fn new(start: Vec<f64>, trans: Vec<f64>, emis: Vec<f64>, n_symbols: usize) -> Result<Self> {
        let n = check_chain(&start, &trans)?;
        let emission = Categorical::new(n, n_symbols, emis)?;
        Ok(HmmModel { n_states: n, start, trans, emission })
    }
}

impl<E: Emission> HmmModel<E> {
    /// An HMM with any emission of N states; start and trans validated as
    /// by [`HmmModel::new`].
    pub fn with_emission(start: Vec<f64>, trans: Vec<f64>, emission: E) -> Result<Self> {
        let n = check_chain(&start, &trans)?;
        if emission.n_states() != n {
            return Err(Error::arg("emission", format!("has {} states but `start` has {n}", emission.n_states())));
        }
        Ok(HmmModel { n_states: n, start, trans, emission })
    }

    /// Number of free parameters: (N - 1) + N (N - 1) + the emission's.
    pub fn free_parameters(&self) -> usize {
        let n = self.n_states;
        (n - 1) + n * (n - 1) + self.emission.free_parameters()
    }
}

/// Validate start and trans; returns N.
fn check_chain(start: &[f64], trans: &[f64]) -> Result<usize> {
    let n = start.len();
    if n == 0 {
        return Err(Error::arg("start", "must have at least one state"));
    }
    if trans.len() != n * n {
        return Err(Error::arg("trans", format!("must be a {n} x {n} matrix (one row and column per state of `start`), not {} values", trans.len())));
    }
    check_stochastic("start", start, n)?;
    check_stochastic("trans", trans, n)?;
    Ok(n)
}

/// Rows of `width` values: finite, non-negative, summing to 1.
pub(crate) fn check_stochastic(arg: &'static str, values: &[f64], width: usize) -> Result<()> {
    use rayon::prelude::*;
    let bad = |row: &[f64]| row.iter().any(|p| !(p.is_finite() && *p >= 0.0)) || (row.iter().sum::<f64>() - 1.0).abs() > HMM_ROW_SUM_TOL;
    // The first bad row, found by the calling pool's threads in a large
    // table (a 512 x 512 one took 0.7 ms on one thread of the development
    // VM, as long as the GPU's forward pass over it).
    let first = if values.len() < PAR_MIN_VALUES {
        values.chunks(width.max(1)).position(bad)
    } else {
        values.par_chunks(width.max(1)).position_first(bad)
    };
    let Some(r) = first else { return Ok(()) };
    let row = &values[r * width..((r + 1) * width).min(values.len())];
    let whose = if arg == "start" { String::new() } else { format!("row {} ", r + 1) };
    if let Some(c) = row.iter().position(|p| !(p.is_finite() && *p >= 0.0)) {
        return Err(Error::arg(arg, format!("{whose}has an invalid probability {} at position {}; probabilities must be finite and >= 0", row[c], c + 1)));
    }
    let sum: f64 = row.iter().sum();
    Err(Error::arg(arg, format!("{whose}must sum to 1, not {sum}")))
}

/// Values below which a table is checked on one thread.
const PAR_MIN_VALUES: usize = 1 << 14;

#[cfg(test)]
mod tests {
    use super::*;

    fn arg_of(r: Result<HmmModel>) -> &'static str {
        match r {
            Err(Error::InvalidArgument { arg, .. }) => arg,
            other => panic!("expected an argument error, got {other:?}"),
        }
    }

    #[test]
    fn a_large_table_names_its_first_bad_row() {
        // 300 rows of 300 (checked on many threads): rows 17 and 250 bad,
        // row 17 reported, as one thread finds it.
        let n = 300;
        let mut t = vec![1.0 / n as f64; n * n];
        t[16 * n + 3] = 0.5;
        t[249 * n] = f64::NAN;
        match check_stochastic("trans", &t, n) {
            Err(Error::InvalidArgument { arg, problem }) => assert!(arg == "trans" && problem.starts_with("row 17 must sum to 1"), "{problem}"),
            other => panic!("expected an argument error, got {other:?}"),
        }
        t[16 * n + 3] = 1.0 / n as f64;
        match check_stochastic("trans", &t, n) {
            Err(Error::InvalidArgument { problem, .. }) => assert!(problem.starts_with("row 250 has an invalid probability NaN at position 1"), "{problem}"),
            other => panic!("expected an argument error, got {other:?}"),
        }
        t[249 * n] = 1.0 / n as f64;
        assert!(check_stochastic("trans", &t, n).is_ok());
    }

    #[test]
    fn invalid_models_name_their_argument() {
        let ok = || (vec![0.5, 0.5], vec![1.0, 0.0, 0.3, 0.7], vec![0.2, 0.8, 1.0, 0.0]);
        let (s, t, e) = ok();
        assert!(HmmModel::new(s, t, e, 2).is_ok());
        let (_, t, e) = ok();
        assert_eq!(arg_of(HmmModel::new(vec![0.6, 0.5], t, e, 2)), "start");
        let (s, _, e) = ok();
        assert_eq!(arg_of(HmmModel::new(s, vec![1.0, 0.0, 0.3], e, 2)), "trans");
        let (s, _, e) = ok();
        assert_eq!(arg_of(HmmModel::new(s, vec![1.0, 0.0, f64::NAN, 0.7], e, 2)), "trans");
        let (s, t, _) = ok();
        assert_eq!(arg_of(HmmModel::new(s, t, vec![1.2, -0.2, 1.0, 0.0], 2)), "emis");
        let (s, t, e) = ok();
        assert_eq!(arg_of(HmmModel::new(s, t, e, 3)), "emis");
        assert_eq!(arg_of(HmmModel::new(vec![], vec![], vec![], 1)), "start");
    }
}
