//! hbglm(): R vectors -> core data and settings; draws and the
//! parallelisation record -> R. Also the diagnostics of a draws array.

use bulkem_core::exec::{choose_backend, Backend, BackendRequest};
use bulkem_core::gibbs::diagnostics::diagnose_array;
use bulkem_core::gibbs::summary::quantiles;
use bulkem_core::gibbs::covariance::InverseWishart;
use bulkem_core::gibbs::{default_factor_cov, sample, CovPrior, Family, HbData, HbglmConfig, Prior, ScalePrior, Target};
use extendr_api::prelude::*;
use extendr_api::Result;

use crate::session::{input_error, r_error, run_in_session};

fn scale_prior(kind: &str, value: f64, df: f64) -> Result<ScalePrior> {
    match kind {
        "half-cauchy" => Ok(ScalePrior::HalfCauchy(value)),
        "half-t" => Ok(ScalePrior::HalfT(value, df)),
        "half-normal" => Ok(ScalePrior::HalfNormal(value)),
        // Mean `value` (rstanarm's exponential(rate = 1 / value)).
        "exponential" => Ok(ScalePrior::Gamma(1.0, 1.0 / value)),
        "fixed" => Ok(ScalePrior::Fixed(value)),
        other => Err(Error::Other(format!("internal: unknown scale prior '{other}'"))),
    }
}

/// Sample a hierarchical GLM. `x` (n x k) and `z` (n x p) are row-major,
/// rows sorted by group; `sizes` are the groups' row counts. `offset`
/// (one per row) and `trials` (binomial trials per row) are empty when
/// absent. `factors` lists the other grouping factors, each
/// `list(level, levels, k, w)`: every row's level (1-based), the number of
/// levels, the terms varying by level and their values (n x k, row-major).
/// `categories` is the ordinal family's number of categories (0 otherwise). `m` is Inf for unlimited stepping out. `target` is empty, or
/// (ess, rhat, sweeps before the first check): sample to that target, at
/// most `iter` sweeps.
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hbglm_fit_(
    y: &[f64],
    x: &[f64],
    z: &[f64],
    offset: &[f64],
    trials: &[f64],
    sizes: &[i32],
    factors: List,
    categories: i32,
    k: i32,
    p: i32,
    family: &str,
    prior: List,
    iter: i32,
    warmup: i32,
    chains: i32,
    thin: i32,
    w: f64,
    m: f64,
    adapt: bool,
    seed: f64,
    first_chain: i32,
    target: &[f64],
    threads: i32,
    backend: &str,
) -> Result<List> {
    let family = Family::parse(family).ok_or_else(|| input_error(format!("unknown family '{family}'")))?;
    let num = |name: &str| -> Result<f64> {
        prior.dollar(name)?.as_real().ok_or_else(|| Error::Other(format!("internal: prior${name} must be a number")))
    };
    let text = |name: &str| -> Result<String> {
        prior.dollar(name)?.as_str().map(str::to_owned).ok_or_else(|| Error::Other(format!("internal: prior${name} must be a string")))
    };
    let mut prior = Prior {
        mu_mean: num("mu_mean")?,
        mu_sd: num("mu_sd")?,
        tau: scale_prior(&text("tau_kind")?, num("tau_value")?, num("tau_df")?)?,
        gamma_sd: num("gamma_sd")?,
        sigma: scale_prior(&text("sigma_kind")?, num("sigma_value")?, num("sigma_df")?)?,
        shape: match text("shape_kind")?.as_str() {
            "gamma" => ScalePrior::Gamma(num("shape_a")?, num("shape_b")?),
            _ => ScalePrior::Fixed(num("shape_a")?),
        },
        cov: None,
        factor_cov: Vec::new(),
    };
    // The prior of correlated terms with inverse-Wishart degrees of freedom
    // `df` (NA: the terms are independent).
    let lkj = text("cov")? == "lkj";
    let cov_prior = |df: f64| -> Result<Option<CovPrior>> {
        Ok(match df {
            df if df.is_nan() => None,
            _ if lkj => Some(CovPrior::Lkj { eta: num("lkj_eta")? }),
            df => Some(CovPrior::InverseWishart(InverseWishart { df, scale: num("cov_scale")? })),
        })
    };
    prior.cov = cov_prior(num("cov_df")?)?;
    let sizes: Vec<usize> = sizes.iter().map(|&s| s.max(0) as usize).collect();
    let data = HbData::new(y.to_vec(), x.to_vec(), z.to_vec(), &sizes, k.max(0) as usize, p.max(0) as usize)
        .and_then(|d| d.with_offset(offset.to_vec()))
        .and_then(|d| d.with_trials(trials.to_vec()))
        .map_err(r_error)?;
    let mut data = data.with_categories(categories.max(0) as usize);
    for (_, f) in factors.iter() {
        let f = List::try_from(f).map_err(|_| Error::Other("internal: each factor must be a list".into()))?;
        let int = |name: &str| -> Result<i32> { f.dollar(name)?.as_integer().ok_or_else(|| Error::Other(format!("internal: factor${name} must be an integer"))) };
        let level: Vec<usize> = f
            .dollar("level")?
            .as_integer_slice()
            .ok_or_else(|| Error::Other("internal: factor$level must be integers".into()))?
            .iter()
            .map(|&l| (l.max(1) - 1) as usize)
            .collect();
        let w = f.dollar("w")?.as_real_vector().ok_or_else(|| Error::Other("internal: factor$w must be doubles".into()))?;
        let (levels, terms) = (int("levels")?.max(0) as usize, int("k")?.max(0) as usize);
        // Correlated terms: cov_df is NA otherwise.
        let cov_df = f.dollar("cov_df")?.as_real().ok_or_else(|| Error::Other("internal: factor$cov_df must be a number".into()))?;
        data = match cov_prior(cov_df)? {
            None => {
                prior.factor_cov.push(default_factor_cov(terms));
                data.with_factor(&level, levels, w, terms)
            }
            Some(cov) => {
                prior.factor_cov.push(cov);
                data.with_correlated_factor(&level, levels, w, terms)
            }
        }
        .map_err(r_error)?;
    }
    let config = HbglmConfig {
        family,
        prior,
        iter: iter.max(0) as usize,
        warmup: warmup.max(0) as usize,
        chains: chains.max(0) as usize,
        thin: thin.max(0) as usize,
        w,
        m: if m.is_finite() { Some(m.max(0.0) as usize) } else { None },
        adapt,
        seed: seed as u64,
        first_chain: first_chain.max(0) as usize,
        target: match target {
            [] => None,
            &[ess, rhat, first] => Some(Target { ess, rhat, first: first.max(0.0) as usize }),
            _ => return Err(Error::Other("internal: target must be (ess, rhat, first check)".into())),
        },
        ..HbglmConfig::new(family)
    };
    let request = BackendRequest::parse(backend).ok_or_else(|| input_error(format!("unknown backend '{backend}'")))?;
    let backend = choose_backend(request, &bulkem_core::gibbs::job(&data, &config)).map_err(r_error)?;
    let t0 = std::time::Instant::now();
    let fit = run_in_session(backend, threads.max(0) as usize, |exec| sample(&data, &config, exec)).map_err(r_error)?;
    let seconds = t0.elapsed().as_secs_f64();
    let plan = &fit.plan;
    let target: Robj = fit.target.as_ref().map_or_else(|| ().into(), |o| {
        list!(
            met = o.met,
            sweeps = o.sweeps as f64,
            checks = o.checks as i32,
            worst = o.worst.iter().map(|w| w.param as i32 + 1).collect::<Vec<_>>(),
            rhat = o.worst.iter().map(|w| w.rhat).collect::<Vec<_>>(),
            ess_bulk = o.worst.iter().map(|w| w.ess_bulk).collect::<Vec<_>>(),
            ess_tail = o.worst.iter().map(|w| w.ess_tail).collect::<Vec<_>>()
        )
        .into()
    });
    let diagnostics: Robj = fit.diagnostics.map_or_else(|| ().into(), |d| list!(rhat = d.rhat, ess_bulk = d.ess_bulk, ess_tail = d.ess_tail).into());
    Ok(list!(
        target = target,
        diagnostics = diagnostics,
        draws = fit.draws,
        kept = fit.kept as i32,
        chains = fit.chains as i32,
        n_params = fit.layout.n_params() as i32,
        backend = fit.backend.name(),
        seconds = seconds,
        sweeps = fit.sweeps as f64,
        beta_evals = fit.stats.beta_evals as f64,
        gamma_evals = fit.stats.gamma_evals as f64,
        scale_evals = fit.stats.scale_evals as f64,
        stuck = fit.stats.stuck as f64,
        stuck_by = fit.stuck.iter().map(|&n| n as f64).collect::<Vec<_>>(),
        tau_floor = fit.bounds.tau_floor.clone(),
        factor_floor = fit.bounds.factor_floor.concat(),
        sigma_floor = fit.bounds.sigma_floor,
        separation = fit.separation.iter().map(|&j| j as i32 + 1).collect::<Vec<_>>(),
        plan = list!(
            block = plan.iter().map(|b| b.block).collect::<Vec<_>>(),
            regime = plan.iter().map(|b| b.regime).collect::<Vec<_>>(),
            detail = plan.iter().map(|b| b.detail.clone()).collect::<Vec<_>>()
        )
    ))
}

/// Rank-normalised split R-hat, bulk and tail ESS of every parameter of a
/// kept x chains x parameters array (R order).
/// @noRd
#[extendr]
fn gibbs_diagnostics_(draws: &[f64], kept: i32, chains: i32, tail: bool, threads: i32) -> Result<List> {
    let (kept, chains) = (kept.max(0) as usize, chains.max(0) as usize);
    let per = kept * chains;
    if per == 0 || draws.len() % per != 0 {
        return Err(Error::Other("internal: draws do not match kept x chains".into()));
    }
    let d = run_in_session(Backend::Cpu, threads.max(0) as usize, |exec| exec.install(|| diagnose_array(draws, kept, chains, tail, &exec.monitor)).and_then(|x| x))
        .map_err(r_error)?;
    Ok(list!(rhat = d.rhat, ess_bulk = d.ess_bulk, ess_tail = d.ess_tail))
}

/// Quantiles `probs` of each parameter of a kept x chains x parameters
/// array (R order, `per` = kept x chains draws a parameter), as
/// stats::quantile(type = 7): a parameters x probs matrix's values.
/// @noRd
#[extendr]
fn gibbs_quantiles_(draws: &[f64], per: i32, probs: &[f64], threads: i32) -> Result<Vec<f64>> {
    let per = per.max(0) as usize;
    if per == 0 || draws.len() % per != 0 {
        return Err(Error::Other("internal: draws do not match the draws per parameter".into()));
    }
    run_in_session(Backend::Cpu, threads.max(0) as usize, |exec| exec.install(|| quantiles(draws, per, probs, &exec.monitor)).and_then(|x| x)).map_err(r_error)
}

extendr_module! {
    mod gibbs;
    fn hbglm_fit_;
    fn gibbs_diagnostics_;
    fn gibbs_quantiles_;
}
