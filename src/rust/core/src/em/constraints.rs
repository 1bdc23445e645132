//! Constraints on a mixture's parameters: one second parameter shared by
//! every component (mclust's "E" models: equal variances for the Normal,
//! an equal shape for the inverse Gaussian), and parameters held at given
//! values (known means, fixed weights).
//!
//! The M-step becomes an ECM step (Meng and Rubin 1993): the weights, then
//! each component's first parameter given its second, then the second
//! parameters given the firsts, each an exact conditional maximisation of
//! the expected complete-data log-likelihood from the E-step's sums, so the
//! log-likelihood never decreases. The conditional maximisations are the
//! family's ([`super::family::Family::first_given_second`],
//! [`super::family::Family::second_given_first`]).

use crate::error::{Error, Result};

use super::family::{Family, MStepFailure};
use super::fit::MixParams;
use crate::tolerances::MIN_COMPONENT_WEIGHT;

/// Constraints of one fit. A held vector is empty (every value free) or has
/// one entry per component (`None`: free).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Constraints {
    /// One second parameter shared by every component.
    pub equal_second: bool,
    pub alpha: Vec<Option<f64>>,
    pub first: Vec<Option<f64>>,
    pub second: Vec<Option<f64>>,
}

fn held(v: &[Option<f64>], j: usize) -> Option<f64> {
    v.get(j).copied().flatten()
}

impl Constraints {
    /// Whether any value is held (the components then keep the order the
    /// caller gave them, instead of the order by the first parameter).
    pub fn holds_values(&self) -> bool {
        [&self.alpha, &self.first, &self.second].iter().any(|v| v.iter().any(Option::is_some))
    }

    /// Why these constraints cannot apply to `components` components of
    /// `family`; the error names the R argument.
    pub fn check(&self, family: Family, components: usize) -> Result<()> {
        let info = family.info();
        if self.equal_second && info.second.is_none() {
            return Err(Error::arg("equal", format!("does not apply to the {} family, which has one parameter per component", info.label)));
        }
        let names = [("alpha", &self.alpha), (info.first, &self.first), (info.second.unwrap_or("second"), &self.second)];
        for (name, v) in names {
            if !v.is_empty() && v.len() != components {
                return Err(Error::arg("fixed", format!("{name} must have one value (or NA) per component ({components}), not {}", v.len())));
            }
        }
        if info.second.is_none() && self.second.iter().any(Option::is_some) {
            return Err(Error::arg("fixed", format!("the {} family has no second parameter", info.label)));
        }
        if self.equal_second && self.second.iter().any(Option::is_some) {
            return Err(Error::arg("fixed", "cannot hold a second parameter that `equal` shares: give the shared value for every component, without `equal`"));
        }
        for j in 0..components {
            let first = held(&self.first, j);
            let second = held(&self.second, j);
            if let Some(v) = first {
                family.check_component(v, second.unwrap_or(if info.second.is_some() { 1.0 } else { f64::NAN })).map_err(|why| Error::arg("fixed", format!("{} of component {}: {why}", info.first, j + 1)))?;
            }
            if let Some(v) = second {
                if !(v.is_finite() && v > 0.0) {
                    return Err(Error::arg("fixed", format!("{} of component {} must be positive and finite, not {v}", info.second.unwrap_or("second"), j + 1)));
                }
            }
        }
        let fixed: Vec<f64> = self.alpha.iter().flatten().copied().collect();
        if fixed.iter().any(|a| !(a.is_finite() && *a > 0.0 && *a < 1.0 + 1e-12)) {
            return Err(Error::arg("fixed", "alpha must be between 0 and 1 (exclusive of 0)"));
        }
        let sum: f64 = fixed.iter().sum();
        let all = fixed.len() == components;
        if (all && (sum - 1.0).abs() > 1e-9) || (!all && sum >= 1.0 - 1e-12) {
            return Err(Error::arg(
                "fixed",
                format!("alpha must leave the free weights a positive share: the held weights sum to {sum}{}", if all { ", not 1" } else { "" }),
            ));
        }
        Ok(())
    }

    /// Free parameters of `components` components (the degrees of freedom
    /// of the log-likelihood).
    pub fn free_parameters(&self, family: Family, components: usize) -> usize {
        let count = |v: &[Option<f64>]| v.iter().filter(|x| x.is_some()).count();
        let free_alpha = components.saturating_sub(count(&self.alpha)).saturating_sub(1);
        let free_first = components - count(&self.first);
        let free_second = match family.info().second {
            None => 0,
            Some(_) if self.equal_second => 1,
            Some(_) => components - count(&self.second),
        };
        free_alpha + free_first + free_second
    }

    /// Starting values that satisfy the constraints: held values set, free
    /// weights scaled to the share the held ones leave, a shared second
    /// parameter at the geometric mean of the start's.
    pub fn apply_to_start(&self, p: &mut MixParams) {
        let m = p.components();
        let held_sum: f64 = (0..m).filter_map(|j| held(&self.alpha, j)).sum();
        let free_sum: f64 = (0..m).filter(|&j| held(&self.alpha, j).is_none()).map(|j| p.alpha[j]).sum();
        for j in 0..m {
            p.alpha[j] = match held(&self.alpha, j) {
                Some(a) => a,
                None => p.alpha[j] / free_sum * (1.0 - held_sum),
            };
            if let Some(v) = held(&self.first, j) {
                p.mu[j] = v;
            }
            if let Some(v) = held(&self.second, j) {
                p.scale[j] = v;
            }
        }
        if self.equal_second && m > 0 {
            let shared = (p.scale.iter().map(|s| s.ln()).sum::<f64>() / m as f64).exp();
            p.scale.iter_mut().for_each(|s| *s = shared);
        }
    }

    /// The ECM step from the E-step's sums (`sums[j]` = sum of w, w u, w v
    /// of component j); `p` holds the current parameters and receives the
    /// new ones.
    pub fn m_step(&self, family: Family, sums: &[[f64; 3]], centre: f64, p: &mut MixParams) -> std::result::Result<(), MStepFailure> {
        let m = p.components();
        if sums.iter().any(|s| !(s[0] > MIN_COMPONENT_WEIGHT)) {
            return Err(MStepFailure::Empty);
        }
        // Weights: the held ones, the free ones sharing the rest in
        // proportion to their components' sums.
        let held_sum: f64 = (0..m).filter_map(|j| held(&self.alpha, j)).sum();
        let free_sw: f64 = (0..m).filter(|&j| held(&self.alpha, j).is_none()).map(|j| sums[j][0]).sum();
        for j in 0..m {
            p.alpha[j] = held(&self.alpha, j).unwrap_or_else(|| sums[j][0] / free_sw * (1.0 - held_sum));
        }
        let two_parameters = family.info().second.is_some();
        // First parameters given the current seconds; a component with
        // nothing held and no shared second takes its unconstrained update.
        for j in 0..m {
            let [sw, su, sv] = sums[j];
            if held(&self.first, j).is_some() {
                continue;
            }
            let free = !self.equal_second && held(&self.second, j).is_none();
            if free || !two_parameters {
                let (_, first, second) = family.m_step(sw, su, sv, sw, centre, (p.mu[j], p.scale[j]))?;
                p.mu[j] = first;
                if two_parameters {
                    p.scale[j] = second;
                }
            } else {
                p.mu[j] = family.first_given_second(sw, su, sv, centre, p.scale[j], p.mu[j])?;
            }
        }
        if !two_parameters {
            return Ok(());
        }
        // Second parameters given the new firsts: one shared by all, or a
        // component's own where its first is held.
        if self.equal_second {
            let shared = family.second_given_first(sums, &p.mu, centre)?;
            p.scale.iter_mut().for_each(|s| *s = shared);
        } else {
            for j in 0..m {
                if held(&self.first, j).is_some() && held(&self.second, j).is_none() {
                    p.scale[j] = family.second_given_first(&sums[j..=j], &p.mu[j..=j], centre)?;
                }
            }
        }
        Ok(())
    }
}
