//! Choosing the number of components: every candidate M fitted to every
//! dataset in one pass over the backend ([`super::fit_models`]), then, per
//! dataset, the fit with the best information criterion.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::memory;
use crate::tolerances::START_TIE_REL;

use super::config::CheckedEmConfig;
use super::censored;
use super::cpu;
use super::data::Prepared;
use super::fit::MixFit;

/// An information criterion; smaller is better (as R's `AIC()` and `BIC()`).
/// With df free parameters (3M - 1, or 2M - 1 for one-parameter families)
/// and n observations:
/// AIC = -2 logL + 2 df, BIC = -2 logL + df log n, and ICL = BIC -
/// 2 sum_i log max_j z_ij (Biernacki, Celeux & Govaert 2000, with the
/// classification of mclust: z the posterior at the fitted parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Criterion {
    Bic,
    Icl,
    Aic,
}

impl Criterion {
    pub fn parse(name: &str) -> Option<Criterion> {
        match name {
            "BIC" => Some(Criterion::Bic),
            "ICL" => Some(Criterion::Icl),
            "AIC" => Some(Criterion::Aic),
            _ => None,
        }
    }

    /// The criterion of a fit with `df` free parameters
    /// (`Family::parameters`) and log-likelihood `loglik` on `n`
    /// observations, whose posterior gives `classification` = sum_i log
    /// max_j z_ij (used by ICL only).
    /// `n` is the sum of the weights for weighted data.
    pub fn value(self, loglik: f64, df: usize, n: f64, classification: f64) -> f64 {
        let df = df as f64;
        match self {
            Criterion::Aic => -2.0 * loglik + 2.0 * df,
            Criterion::Bic => -2.0 * loglik + df * n.ln(),
            Criterion::Icl => -2.0 * loglik + df * n.ln() - 2.0 * classification,
        }
    }
}

/// The fits chosen by [`select_many`] and the table they were chosen from.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Per dataset, the fit of the chosen number of components.
    pub fits: Vec<MixFit>,
    /// Per dataset, index into the candidates of the chosen one.
    pub chosen: Vec<usize>,
    /// Criterion of every (dataset, candidate), dataset-major (datasets x
    /// candidates); NaN where that fit failed.
    pub criteria: Vec<f64>,
}

/// Fit every candidate number of components (`components`, strictly
/// increasing) to every dataset, all with the settings of `config` and the
/// same random streams (so each candidate's fit is the one a call with that
/// number alone gives), and keep per dataset the fit with the smallest
/// criterion. Values within START_TIE_REL (relative) of the smallest are
/// ties, won by the fewer components. A dataset no candidate can fit keeps
/// the failed fit of the fewest components.
pub fn select_many(data: &[&[f64]], config: &CheckedEmConfig, components: &[usize], criterion: Criterion, exec: &Exec) -> Result<Selection> {
    if components.is_empty() || components.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::arg("num.components", "must be distinct numbers of components in increasing order"));
    }
    let configs = components
        .iter()
        .map(|&m| config.with_components(m).keep_posterior(false).check())
        .collect::<Result<Vec<_>>>()?;
    if config.keep_posterior {
        // Only the chosen fit's posterior is kept: at most n x the largest M.
        let n: usize = data.iter().map(|x| x.len()).sum();
        let largest = components[components.len() - 1];
        memory::ensure(
            || format!("`keep.posterior = TRUE` (with num.components up to {largest}, on {n} observations)"),
            memory::bytes::<f64>(&[n, largest, 3]),
        )?;
    }
    let per_model = super::fit_models(data, &configs, exec)?;
    let c = components.len();
    let family = config.family;
    let scored: Vec<Result<(usize, Vec<f64>)>> = exec.install(|| {
        data.par_iter()
            .enumerate()
            .map(|(d, x)| {
                // ICL needs each fit's posterior at the data.
                let global = config.dataset_offset + d;
                let icl = criterion == Criterion::Icl && !exec.monitor.is_cancelled();
                let censoring = config.censoring_of(global);
                let prep = if icl && censoring.is_none() { Some(Prepared::try_weighted(family, x, config.weights_of(global))?) } else { None };
                let values: Vec<f64> = per_model
                    .iter()
                    .zip(&configs)
                    .map(|(fits, model)| {
                        let fit = &fits[d];
                        if !fit.success() {
                            return Ok(f64::NAN);
                        }
                        let classification = match (&prep, censoring) {
                            (Some(p), _) => cpu::classification_loglik(family, p, &fit.params),
                            (None, Some(c)) if icl => censored::classification_loglik(family, x, config.weights_of(global), c, &fit.params)?,
                            _ => 0.0,
                        };
                        Ok(criterion.value(fit.loglik, model.free_parameters(), fit.nobs(), classification))
                    })
                    .collect::<Result<_>>()?;
                Ok((best_candidate(&values).unwrap_or(0), values))
            })
            .collect()
    })?;
    exec.monitor.check()?;
    let mut chosen = Vec::with_capacity(data.len());
    let mut criteria = memory::try_with_capacity(data.len().saturating_mul(c), "the criterion table")?;
    for r in scored {
        let (k, values) = r?;
        chosen.push(k);
        criteria.extend(values);
    }
    let mut models: Vec<std::vec::IntoIter<MixFit>> = per_model.into_iter().map(|v| v.into_iter()).collect();
    let mut fits = Vec::with_capacity(data.len());
    for &k in &chosen {
        let mut pick = None;
        for (j, model) in models.iter_mut().enumerate() {
            let fit = model.next().ok_or_else(|| Error::Internal("a model returned too few fits".into()))?;
            if j == k {
                pick = Some(fit);
            }
        }
        let mut fit = pick.ok_or_else(|| Error::Internal("no fit for the chosen model".into()))?;
        if !fit.success() && c > 1 {
            let why = fit.message.take().unwrap_or_default();
            fit.message = Some(format!("no candidate number of components could be fitted; with {}: {why}", components[k]));
        }
        fits.push(fit);
    }
    if config.keep_posterior {
        let posteriors: Vec<Result<Option<Vec<f64>>>> = exec.install(|| {
            fits.par_iter()
                .zip(data.par_iter())
                .enumerate()
                .map(|(d, (fit, x))| {
                    if !fit.success() || exec.monitor.is_cancelled() {
                        return Ok(None);
                    }
                    Ok(Some(censored::posterior_of(family, x, config.censoring_of(config.dataset_offset + d), &fit.params)?))
                })
                .collect()
        })?;
        exec.monitor.check()?;
        for (fit, p) in fits.iter_mut().zip(posteriors) {
            fit.posterior = p?;
        }
    }
    Ok(Selection { fits, chosen, criteria })
}

/// Index of the smallest criterion among the finite ones; values within
/// START_TIE_REL of it are ties, won by the lowest index (fewest components).
pub fn best_candidate(values: &[f64]) -> Option<usize> {
    let best = values.iter().copied().filter(|v| v.is_finite()).fold(f64::INFINITY, f64::min);
    if !best.is_finite() {
        return None;
    }
    let tie = START_TIE_REL * best.abs();
    values.iter().position(|&v| v.is_finite() && v <= best + tie)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criteria_follow_their_formulas_and_ties_go_to_fewer_components() {
        // logL = -100, M = 2 (df 5), n = 50.
        assert_eq!(Criterion::Aic.value(-100.0, 5, 50.0, 0.0), 210.0);
        assert!((Criterion::Bic.value(-100.0, 5, 50.0, 0.0) - (200.0 + 5.0 * 50f64.ln())).abs() < 1e-12);
        assert!((Criterion::Icl.value(-100.0, 5, 50.0, -3.0) - (206.0 + 5.0 * 50f64.ln())).abs() < 1e-12);
        assert_eq!(best_candidate(&[3.0, 1.0, 2.0]), Some(1));
        assert_eq!(best_candidate(&[f64::NAN, 5.0, 5.0 * (1.0 + 1e-12)]), Some(1));
        assert_eq!(best_candidate(&[5.0 * (1.0 + 1e-12), 5.0]), Some(0));
        assert_eq!(best_candidate(&[f64::NAN, f64::NAN]), None);
        assert_eq!(Criterion::parse("ICL"), Some(Criterion::Icl));
        assert_eq!(Criterion::parse("bic"), None);
    }
}
