//! The hierarchical GLM and its data.
//!
//! ```text
//! y_gj ~ family(eta_gj),  eta_gj = x_gj' beta_g + z_gj' gamma
//! beta_g ~ N(mu, diag(tau^2)),  g = 1..G
//! ```
//! Observations are stored sorted by group (group g owns rows
//! offsets[g]..offsets[g+1]); x is n x K and z is n x P, row-major, so a
//! group's rows are contiguous and can be updated by one worker.

use crate::error::{Error, Result};

/// Response family and link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Identity link, residual sd sigma.
    Gaussian,
    /// Bernoulli with logit link; y in {0, 1}.
    Binomial,
    /// Log link; y a count.
    Poisson,
}

impl Family {
    pub fn parse(name: &str) -> Option<Family> {
        match name {
            "gaussian" => Some(Family::Gaussian),
            "binomial" => Some(Family::Binomial),
            "poisson" => Some(Family::Poisson),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Family::Gaussian => "gaussian",
            Family::Binomial => "binomial",
            Family::Poisson => "poisson",
        }
    }

    /// Log-likelihood of one observation given its linear predictor, up to
    /// terms free of eta. Gaussian: -(y - eta)^2 / 2 scaled by `inv_var`
    /// (1 / sigma^2); the log sigma terms belong to the sigma update.
    #[inline(always)]
    pub fn loglik(self, y: f64, eta: f64, inv_var: f64) -> f64 {
        match self {
            Family::Gaussian => {
                let r = y - eta;
                -0.5 * r * r * inv_var
            }
            // y eta - log(1 + e^eta), without overflow.
            Family::Binomial => y * eta - softplus(eta),
            Family::Poisson => y * eta - eta.exp(),
        }
    }

    /// Whether `y` is a valid response, and why not.
    pub fn check_response(self, y: f64) -> Option<&'static str> {
        if !y.is_finite() {
            return Some("must be finite");
        }
        match self {
            Family::Gaussian => None,
            Family::Binomial if y != 0.0 && y != 1.0 => Some("must be 0 or 1 for the binomial family"),
            Family::Poisson if y < 0.0 || y != y.round() => Some("must be a non-negative whole number for the poisson family"),
            _ => None,
        }
    }
}

#[inline(always)]
pub fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// sum_i loglik(y_i, eta_i + xc_i * delta) over rows of one group, `xc`
/// being the updated coefficient's column for these rows.
#[inline]
pub fn rows_loglik(family: Family, y: &[f64], eta: &[f64], xc: &[f64], delta: f64, inv_var: f64) -> f64 {
    y.iter().zip(eta).zip(xc).map(|((&y, &e), &x)| family.loglik(y, e + x * delta, inv_var)).sum()
}

/// Data of a hierarchical GLM, grouped and validated.
#[derive(Debug, Clone)]
pub struct HbData {
    pub y: Vec<f64>,
    /// n x K, row-major: coefficients that vary by group.
    pub x: Vec<f64>,
    /// The same values by group, each group's block column-major: element
    /// (row r of group g, coefficient j) at K * offsets[g] + j * n_g +
    /// (r - offsets[g]). A slice update of one coefficient reads a
    /// contiguous column. (The GPU kernels still read the row-major `x`.)
    pub xcol: Vec<f64>,
    /// n x P, row-major: coefficients shared by all groups.
    pub z: Vec<f64>,
    /// G + 1 row offsets; group g owns rows offsets[g]..offsets[g + 1].
    pub offsets: Vec<usize>,
    pub k: usize,
    pub p: usize,
}

impl HbData {
    /// Build from rows sorted by group. `group_sizes` are the numbers of
    /// rows of each group, in order.
    pub fn new(y: Vec<f64>, x: Vec<f64>, z: Vec<f64>, group_sizes: &[usize], k: usize, p: usize) -> Result<Self> {
        let n = y.len();
        if k == 0 {
            return Err(Error::arg("formula", "must give at least one group-level coefficient"));
        }
        if x.len() != n * k {
            return Err(Error::arg("x", format!("must have {} x {} values, not {}", n, k, x.len())));
        }
        if z.len() != n * p {
            return Err(Error::arg("global", format!("must give {} x {} values, not {}", n, p, z.len())));
        }
        if group_sizes.is_empty() {
            return Err(Error::arg("group", "must name at least one group"));
        }
        if let Some(g) = group_sizes.iter().position(|&s| s == 0) {
            return Err(Error::arg("group", format!("group {} has no observations", g + 1)));
        }
        let mut offsets = Vec::with_capacity(group_sizes.len() + 1);
        offsets.push(0);
        for s in group_sizes {
            offsets.push(offsets.last().copied().unwrap_or(0) + s);
        }
        if offsets.last().copied() != Some(n) {
            return Err(Error::arg("group", format!("group sizes add up to {}, not to the {} observations", offsets[offsets.len() - 1], n)));
        }
        if let Some(i) = x.iter().chain(z.iter()).position(|v| !v.is_finite()) {
            let which = if i < x.len() { "formula" } else { "global" };
            return Err(Error::arg(which, format!("gives a non-finite predictor value (element {})", i + 1)));
        }
        let mut xcol = vec![0.0; x.len()];
        for g in 0..group_sizes.len() {
            let (r0, ng) = (offsets[g], group_sizes[g]);
            for i in 0..ng {
                for j in 0..k {
                    xcol[k * r0 + j * ng + i] = x[(r0 + i) * k + j];
                }
            }
        }
        Ok(HbData { y, x, xcol, z, offsets, k, p })
    }

    pub fn n(&self) -> usize {
        self.y.len()
    }
    pub fn groups(&self) -> usize {
        self.offsets.len() - 1
    }
    pub fn rows(&self, g: usize) -> std::ops::Range<usize> {
        self.offsets[g]..self.offsets[g + 1]
    }

    /// Validate the responses for `family`: the first bad one, 1-based.
    pub fn check_family(&self, family: Family) -> Result<()> {
        for (i, &y) in self.y.iter().enumerate() {
            if let Some(problem) = family.check_response(y) {
                return Err(Error::arg("formula", format!("gives a response that {problem}: row {} is {y}", i + 1)));
            }
        }
        Ok(())
    }
}
