//! The hierarchical GLM and its data.
//!
//! ```text
//! y_gj ~ family(eta_gj),  eta_gj = x_gj' beta_g + z_gj' gamma
//! (negative binomial: mean e^eta, shape phi, variance m + m^2 / phi;
//!  ordinal: P(y <= c) = logistic(theta_c - eta), theta_1 = 0 < theta_2 < ...)
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
    /// Log link, y a count with mean m = e^eta and variance m + m^2 / phi;
    /// the shape phi is sampled (as MASS's theta, brms's shape).
    NegBinomial,
    /// Ordered categories y in 1..C, cumulative logit: P(y <= c) =
    /// logistic(theta_c - eta) with cut-points theta_1 = 0 < theta_2 <
    /// ... < theta_{C-1} (the first is fixed: eta has the groups'
    /// intercept, which would otherwise trade with all of them).
    Ordinal,
}

/// What a family's parameters besides the coefficients give each row's
/// log-likelihood: `value` (1 / sigma^2 for the gaussian, the negative
/// binomial's shape, 1 otherwise) and the ordinal family's cut-points
/// theta_1 = 0, ..., theta_{C-1} (empty otherwise).
#[derive(Debug, Clone, Copy)]
pub struct Aux<'a> {
    pub value: f64,
    pub cuts: &'a [f64],
}

impl Aux<'_> {
    /// No auxiliary parameter.
    pub const NONE: Aux<'static> = Aux { value: 1.0, cuts: &[] };
}

impl Family {
    pub fn parse(name: &str) -> Option<Family> {
        match name {
            "gaussian" => Some(Family::Gaussian),
            "binomial" => Some(Family::Binomial),
            "poisson" => Some(Family::Poisson),
            "negbinomial" => Some(Family::NegBinomial),
            "ordinal" => Some(Family::Ordinal),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Family::Gaussian => "gaussian",
            Family::Binomial => "binomial",
            Family::Poisson => "poisson",
            Family::NegBinomial => "negbinomial",
            Family::Ordinal => "ordinal",
        }
    }

    /// Whether the family has an auxiliary parameter besides the
    /// coefficients (sampled as the chain's `sigma`): the gaussian's
    /// residual sd, the negative binomial's shape.
    pub fn has_aux(self) -> bool {
        matches!(self, Family::Gaussian | Family::NegBinomial)
    }

    /// Log-likelihood of one observation given its linear predictor, up to
    /// terms free of eta. `aux` is what the family's auxiliary parameter
    /// gives the rows (`Sweeper::aux`). Gaussian: -(y - eta)^2 / 2 scaled
    /// by `aux` = 1 / sigma^2; the log sigma terms belong to the sigma
    /// update. Binomial: one trial (y 0 or 1). Negative binomial: `aux` =
    /// phi; y eta - (y + phi) log(phi + e^eta), written with softplus.
    /// Ordinal: log P(y = c), `ordinal_loglik`.
    #[inline(always)]
    pub fn loglik(self, y: f64, eta: f64, aux: Aux) -> f64 {
        let aux_value = aux.value;
        match self {
            Family::Ordinal => ordinal_loglik(y, eta, aux.cuts),
            Family::Gaussian => {
                let r = y - eta;
                -0.5 * r * r * aux_value
            }
            // y eta - log(1 + e^eta), without overflow.
            Family::Binomial => y * eta - softplus(eta),
            Family::Poisson => y * eta - eta.exp(),
            Family::NegBinomial => {
                let e = eta - aux_value.ln();
                y * e - (y + aux_value) * softplus(e)
            }
        }
    }

    /// As [`Family::loglik`], with `trials` binomial trials (y successes);
    /// the other families ignore `trials`.
    #[inline(always)]
    pub fn loglik_trials(self, y: f64, trials: f64, eta: f64, aux: Aux) -> f64 {
        match self {
            Family::Binomial => y * eta - trials * softplus(eta),
            _ => self.loglik(y, eta, aux),
        }
    }

    /// Whether the log-likelihood is concave in eta with the derivatives of
    /// [`Family::loglik_curve`] (every family but the ordinal).
    pub fn has_curve(self) -> bool {
        self != Family::Ordinal
    }

    /// [`Family::loglik_trials`] with its first and second derivatives in
    /// eta (the second never positive). Not for the ordinal family.
    #[inline(always)]
    pub fn loglik_curve(self, y: f64, trials: f64, eta: f64, aux: Aux) -> (f64, f64, f64) {
        // softplus(e) and the logistic's p (1 - p) from one exp.
        let logistic = |e: f64| {
            let t = (-e.abs()).exp();
            let p = if e > 0.0 { 1.0 / (1.0 + t) } else { t / (1.0 + t) };
            (e.max(0.0) + t.ln_1p(), p, t / ((1.0 + t) * (1.0 + t)))
        };
        match self {
            Family::Gaussian => {
                let r = y - eta;
                (-0.5 * r * r * aux.value, r * aux.value, -aux.value)
            }
            Family::Binomial => {
                let (sp, p, pq) = logistic(eta);
                (y * eta - trials * sp, y - trials * p, -trials * pq)
            }
            Family::Poisson => {
                let m = eta.exp();
                (y * eta - m, y - m, -m)
            }
            Family::NegBinomial => {
                let (phi, e) = (aux.value, eta - aux.value.ln());
                let (sp, p, pq) = logistic(e);
                (y * e - (y + phi) * sp, y - (y + phi) * p, -(y + phi) * pq)
            }
            Family::Ordinal => (self.loglik(y, eta, aux), f64::NAN, f64::NAN),
        }
    }

    /// Whether `y` is a valid response (with `trials` binomial trials when
    /// given), and why not.
    pub fn check_response(self, y: f64, trials: Option<f64>) -> Option<String> {
        if !y.is_finite() {
            return Some("must be finite".into());
        }
        if y.abs() > MAX_ABS_VALUE {
            return Some(format!("overflows the likelihood (|values| must be at most {MAX_ABS_VALUE:e}; rescale it)"));
        }
        match (self, trials) {
            (Family::Binomial, None) if y != 0.0 && y != 1.0 => Some("must be 0 or 1 for the binomial family".into()),
            (Family::Binomial, Some(n)) if !(y >= 0.0 && y <= n && y == y.round()) => {
                Some(format!("must be a whole number of successes between 0 and the trials ({n}) for the binomial family"))
            }
            (Family::Poisson | Family::NegBinomial, _) if y < 0.0 || y != y.round() => {
                Some(format!("must be a non-negative whole number for the {} family", self.name()))
            }
            (Family::Ordinal, _) if y < 1.0 || y != y.round() => Some("must be a category number (1, 2, ...) for the ordinal family".into()),
            _ => None,
        }
    }
}

/// Largest magnitude of a response, predictor, offset or trial count: the
/// sampler squares and sums these (and x times a coefficient), so larger
/// values overflow the likelihood; such data are refused up front.
pub const MAX_ABS_VALUE: f64 = 1e100;

/// log P(y = c) under the cumulative logit: with a = theta_{c-1} - eta and
/// b = theta_c - eta (a = -inf for c = 1, b = +inf for c = C), log(F(b) -
/// F(a)) = b + ln(1 - e^(a - b)) - softplus(a) - softplus(b), each end
/// written without cancellation. `cuts` are theta_1..theta_{C-1}.
#[inline]
pub fn ordinal_loglik(y: f64, eta: f64, cuts: &[f64]) -> f64 {
    let c = y as usize;
    let last = cuts.len() + 1;
    if c == 1 {
        -softplus(eta - cuts[0])
    } else if c == last {
        -softplus(cuts[last - 2] - eta)
    } else {
        // a - b from the cut-points themselves: (theta - eta) rounds, and
        // close cut-points would lose their difference to it.
        let (a, b) = (cuts[c - 2] - eta, cuts[c - 1] - eta);
        b + (-(cuts[c - 2] - cuts[c - 1]).exp_m1()).ln() - softplus(a) - softplus(b)
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
pub fn rows_loglik(family: Family, y: &[f64], eta: &[f64], xc: &[f64], delta: f64, aux: Aux) -> f64 {
    match family {
        Family::Binomial => return super::rows::binomial(y, None, eta, xc, delta),
        Family::Poisson => return super::rows::poisson(y, eta, xc, delta),
        Family::NegBinomial => return super::rows::negbin(y, aux.value, eta, xc, delta),
        Family::Ordinal => return super::rows::ordinal(y, eta, Some(xc), delta, aux.cuts),
        Family::Gaussian => {}
    }
    y.iter().zip(eta).zip(xc).map(|((&y, &e), &x)| family.loglik(y, e + x * delta, aux)).sum()
}

/// As [`rows_loglik`], binomial with `trials` per row.
#[inline]
pub fn rows_loglik_trials(family: Family, y: &[f64], trials: &[f64], eta: &[f64], xc: &[f64], delta: f64, aux: Aux) -> f64 {
    match family {
        Family::Binomial => super::rows::binomial(y, Some(trials), eta, xc, delta),
        _ => rows_loglik(family, y, eta, xc, delta, aux),
    }
}

/// The negative binomial's log-likelihood of the shape `phi` at one row
/// (terms free of phi dropped): lgamma(y + phi) - lgamma(phi) - y ln phi
/// - (y + phi) softplus(eta - ln phi), ln phi given as `ln_phi`.
#[inline]
pub fn negbin_shape_loglik(y: f64, eta: f64, phi: f64, ln_phi: f64) -> f64 {
    use crate::em::family::special::lgamma;
    lgamma(y + phi) - lgamma(phi) - y * ln_phi - (y + phi) * softplus(eta - ln_phi)
}

/// The negative binomial's shape is sampled within [SHAPE_MIN, SHAPE_MAX]:
/// above, the distribution is the Poisson to far below rounding for any
/// mean a double holds, and lgamma(y + phi) - lgamma(phi) loses digits.
pub const SHAPE_MIN: f64 = 1e-8;
pub const SHAPE_MAX: f64 = 1e10;

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
    /// A known term added to every linear predictor (glm's offset); empty
    /// for none. It enters the cached linear predictor only.
    pub offset: Vec<f64>,
    /// Binomial trials per row (y is then the number of successes); empty
    /// for one trial per row.
    pub trials: Vec<f64>,
    /// G + 1 row offsets; group g owns rows offsets[g]..offsets[g + 1].
    pub offsets: Vec<usize>,
    /// Grouping factors besides the groups, crossed or nested (their
    /// effects have mean zero; `factor.rs`).
    pub factors: Vec<super::factor::Factor>,
    /// Ordinal family: the number of categories C (0 otherwise).
    pub categories: usize,
    pub k: usize,
    pub p: usize,
}

/// Positive scales (tau, sigma) are sampled on the log scale within
/// [floor, SCALE_MAX]: below the floor, 1 / scale^2 and the slice levels
/// lose all precision (a noise-free response drove sigma to 1e-154 and
/// gave NaN draws). Each floor is SCALE_FLOOR_REL times the scale of its
/// parameter in the data (no smaller than SCALE_MIN), a truncation of the
/// prior where no real posterior has mass; a fit whose draws reach it says
/// so (the R side warns).
pub const SCALE_FLOOR_REL: f64 = 1e-10;
pub const SCALE_MIN: f64 = 1e-100;
pub const SCALE_MAX: f64 = 1e100;

/// The sampled range of every positive scale.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleBounds {
    /// Floor of each tau_k.
    pub tau_floor: Vec<f64>,
    /// Floor of each sd of each other grouping factor.
    pub factor_floor: Vec<Vec<f64>>,
    /// Floor of sigma (gaussian family), of the shape (negative binomial:
    /// SHAPE_MIN); 0 otherwise.
    pub sigma_floor: f64,
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
        if let Some(i) = x.iter().chain(z.iter()).position(|v| v.abs() > MAX_ABS_VALUE) {
            let (which, v) = if i < x.len() { ("formula", x[i]) } else { ("global", z[i - x.len()]) };
            return Err(Error::arg(
                which,
                format!("gives a predictor value ({v:e}, element {}) that overflows the likelihood: |values| must be at most {MAX_ABS_VALUE:e}; rescale it", i + 1),
            ));
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
        Ok(HbData { y, x, xcol, z, offset: Vec::new(), trials: Vec::new(), offsets, factors: Vec::new(), categories: 0, k, p })
    }

    /// Add an offset (one finite value per row, rows in the same order).
    pub fn with_offset(mut self, offset: Vec<f64>) -> Result<Self> {
        if offset.is_empty() {
            return Ok(self);
        }
        if offset.len() != self.n() {
            return Err(Error::arg("offset", format!("must have one value per row ({}), not {}", self.n(), offset.len())));
        }
        if let Some(i) = offset.iter().position(|v| !v.is_finite() || v.abs() > MAX_ABS_VALUE) {
            return Err(Error::arg("offset", format!("must be finite and at most {MAX_ABS_VALUE:e} in magnitude: element {} is {}", i + 1, offset[i])));
        }
        self.offset = offset;
        Ok(self)
    }

    /// Binomial trials per row (whole numbers >= 0): y is then the number
    /// of successes of each row.
    pub fn with_trials(mut self, trials: Vec<f64>) -> Result<Self> {
        if trials.is_empty() {
            return Ok(self);
        }
        if trials.len() != self.n() {
            return Err(Error::arg("trials", format!("must have one value per row ({}), not {}", self.n(), trials.len())));
        }
        if let Some(i) = trials.iter().position(|&t| !(t.is_finite() && t >= 0.0 && t == t.round() && t <= MAX_ABS_VALUE)) {
            return Err(Error::arg("trials", format!("must be whole numbers of at least 0: element {} is {}", i + 1, trials[i])));
        }
        self.trials = trials;
        Ok(self)
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
    /// The offset of row i (0 without one).
    #[inline]
    pub fn offset_of(&self, i: usize) -> f64 {
        if self.offset.is_empty() {
            0.0
        } else {
            self.offset[i]
        }
    }

    /// The ordinal family's number of categories (at least 2; the
    /// responses are 1..=C).
    pub fn with_categories(mut self, categories: usize) -> Self {
        self.categories = categories;
        self
    }

    /// Validate the responses for `family`: the first bad one, 1-based.
    pub fn check_family(&self, family: Family) -> Result<()> {
        if family == Family::Ordinal {
            if self.categories < 2 {
                return Err(Error::arg("formula", format!("the ordinal family needs at least 2 categories, not {}", self.categories)));
            }
            if let Some(i) = self.y.iter().position(|&y| y > self.categories as f64) {
                return Err(Error::arg("formula", format!("gives category {} (row {}) above the {} categories", self.y[i], i + 1, self.categories)));
            }
            // The cut-points are measured from the groups' intercept.
            if !(0..self.n()).all(|i| self.x[i * self.k] == 1.0) {
                return Err(Error::arg("formula", "the ordinal family needs an intercept that varies by group (the first coefficient), from which its cut-points are measured"));
            }
        }
        if !self.trials.is_empty() && family != Family::Binomial {
            return Err(Error::arg("trials", format!("apply to the binomial family only, not to {}", family.name())));
        }
        for (i, &y) in self.y.iter().enumerate() {
            let trials = (!self.trials.is_empty()).then(|| self.trials[i]);
            if let Some(problem) = family.check_response(y, trials) {
                return Err(Error::arg("formula", format!("gives a response that {problem}: row {} is {y}", i + 1)));
            }
        }
        Ok(())
    }

    /// The sampled range of the scales, from the data's own scale: sigma's
    /// floor from the response's sd (gaussian), tau_k's from the scale of
    /// coefficient k, the linear predictor's scale (the response's sd for
    /// the gaussian family, 1 on the logit and log scales) over the root
    /// mean square of column k.
    pub fn scale_bounds(&self, family: Family) -> ScaleBounds {
        let n = self.n().max(1) as f64;
        let response_scale = {
            let mean = self.y.iter().sum::<f64>() / n;
            let sd = (self.y.iter().map(|y| (y - mean) * (y - mean)).sum::<f64>() / n).sqrt();
            let rms = (self.y.iter().map(|y| y * y).sum::<f64>() / n).sqrt();
            [sd, rms].into_iter().find(|s| s.is_finite() && *s > 0.0).unwrap_or(1.0)
        };
        let eta_scale = if family == Family::Gaussian { response_scale } else { 1.0 };
        let floor = |scale: f64| (SCALE_FLOOR_REL * scale).clamp(SCALE_MIN, SCALE_MAX * 1e-20);
        let column_floor = |values: &[f64], k: usize, j: usize| {
            let rms = (values.iter().skip(j).step_by(k).map(|v| v * v).sum::<f64>() / n).sqrt();
            let coef_scale = if rms.is_finite() && rms > 0.0 { eta_scale / rms } else { eta_scale };
            floor(coef_scale)
        };
        let tau_floor = (0..self.k).map(|j| column_floor(&self.x, self.k, j)).collect();
        let factor_floor = self.factors.iter().map(|f| (0..f.k).map(|j| column_floor(&f.w, f.k, j)).collect()).collect();
        let sigma_floor = match family {
            Family::Gaussian => floor(response_scale),
            Family::NegBinomial => SHAPE_MIN,
            _ => 0.0,
        };
        ScaleBounds { tau_floor, factor_floor, sigma_floor }
    }
}
