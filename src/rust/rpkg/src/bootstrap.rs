//! bootstrap_lrt() and bootstrap_se(): R values -> the core's bootstrap
//! replicates, results -> flat R vectors (reshaped in R).

use bulkem_core::em::bootstrap::{lrt_replicates, se_replicates, Resample, SeSummary};
use bulkem_core::em::replicate_censoring::plans;
use bulkem_core::em::{job_for, Constraints, EmConfig, Family, MixParams, Precision};
use extendr_api::prelude::*;
use extendr_api::Result;

use crate::em::{censoring_from_r, inits_from_r};
use crate::session::{backend_for, input_error, r_error, real_slices, run_in_session};

/// The replicates' fit settings (family, iterations, tolerance, precision,
/// seed, and `equal`: one second parameter shared by the components).
fn template(family: &str, max_iters: i32, epsilon: f64, precision: &str, seed: f64, equal: bool) -> Result<EmConfig> {
    let family = Family::parse(family).ok_or_else(|| input_error(format!("unknown family '{family}'")))?;
    let precision = Precision::parse(precision).ok_or_else(|| input_error(format!("unknown precision '{precision}'")))?;
    let config = EmConfig::new(family, 1)
        .max_iters(max_iters.max(1) as usize)
        .epsilon(epsilon)
        .precision(precision)
        .seed(seed as u64);
    Ok(if equal { config.constraints(Constraints { equal_second: true, ..Default::default() }) } else { config })
}

/// One fit per dataset: list(alpha, mu, scale) of D x K matrices.
fn fits_from_r(fits: &Robj, components: i32) -> Result<Vec<MixParams>> {
    Ok(inits_from_r(fits, components.max(1) as usize)?.unwrap_or_default())
}

/// The parametric bootstrap LRT statistics of K0 vs K1 components for
/// datasets `ids` (1-based, keying their replicates' streams) of `sizes` observations fitted by `null` and `alt`: datasets x
/// replicates, dataset-major; NaN where a replicate's fit failed.
/// Censored data come with their stand-in values (`datasets`) and
/// `censoring` (NULL for none), whose mechanism the replicates reproduce.
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn em_bootstrap_lrt_(
    ids: &[i32],
    sizes: &[f64],
    datasets: List,
    censoring: Robj,
    family: &str,
    null: Robj,
    alt: Robj,
    k0: i32,
    k1: i32,
    replicates: i32,
    max_iters: i32,
    epsilon: f64,
    precision: &str,
    seed: f64,
    equal: bool,
    threads: i32,
    backend: &str,
) -> Result<List> {
    let template = template(family, max_iters, epsilon, precision, seed, equal)?;
    // R's 1-based dataset numbers in the whole call.
    let ids: Vec<usize> = ids.iter().map(|&i| (i.max(1) - 1) as usize).collect();
    let sizes: Vec<usize> = sizes.iter().map(|&n| n as usize).collect();
    let (null, alt) = (fits_from_r(&null, k0)?, fits_from_r(&alt, k1)?);
    let replicates = replicates.max(1) as usize;
    let observations: f64 = sizes.iter().map(|&n| n as f64).sum();
    let job = job_for(observations * replicates as f64 * template.max_iters as f64 * 2.0, k1.max(1) as usize);
    let backend = backend_for(backend, &job)?;
    let censor_plans = if censoring.is_null() {
        None
    } else {
        let values: Vec<Robj> = datasets.values().collect();
        let data = real_slices(&values)?;
        Some(plans(&data, &censoring_from_r(&censoring)?, template.family.info().discrete, &ids).map_err(r_error)?)
    };
    let stats = run_in_session(backend, threads.max(0) as usize, |exec| {
        lrt_replicates(&ids, &sizes, censor_plans.as_deref(), &null, &alt, &template, replicates, exec)
    })
    .map_err(r_error)?;
    Ok(list!(backend = backend.name(), statistics = stats))
}

/// Bootstrap standard errors and percentile intervals of the fits of
/// `datasets` (K components each): per field, D x K dataset-major; `ok`
/// counts each dataset's fitted replicates; with `keep`, every replicate's
/// parameters (D x B x K, dataset-major then replicate). `censoring`: as
/// for bulkem's fits (NULL for none).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn em_bootstrap_se_(
    ids: &[i32],
    datasets: List,
    censoring: Robj,
    family: &str,
    fits: Robj,
    components: i32,
    kind: &str,
    level: f64,
    replicates: i32,
    keep: bool,
    max_iters: i32,
    epsilon: f64,
    precision: &str,
    seed: f64,
    equal: bool,
    threads: i32,
    backend: &str,
) -> Result<List> {
    let template = template(family, max_iters, epsilon, precision, seed, equal)?;
    // R's 1-based dataset numbers in the whole call.
    let ids: Vec<usize> = ids.iter().map(|&i| (i.max(1) - 1) as usize).collect();
    let kind = Resample::parse(kind).ok_or_else(|| input_error(format!("unknown bootstrap type '{kind}'")))?;
    let values: Vec<Robj> = datasets.values().collect();
    let data = real_slices(&values)?;
    let fits = fits_from_r(&fits, components)?;
    let censoring = if censoring.is_null() { None } else { Some(censoring_from_r(&censoring)?) };
    let replicates = replicates.max(1) as usize;
    let observations: f64 = data.iter().map(|x| x.len() as f64).sum();
    let job = job_for(observations * replicates as f64 * template.max_iters as f64, components.max(1) as usize);
    let backend = backend_for(backend, &job)?;
    let out = run_in_session(backend, threads.max(0) as usize, |exec| {
        se_replicates(&ids, &data, censoring.as_deref(), &fits, kind, level, &template, replicates, keep, exec)
    })
    .map_err(r_error)?;
    let field = |get: fn(&SeSummary) -> &MixParams, part: fn(&MixParams) -> &Vec<f64>| -> Vec<f64> {
        out.iter().flat_map(|s| part(get(s)).iter().copied()).collect()
    };
    let kept = |part: fn(&MixParams) -> &Vec<f64>| -> Vec<f64> {
        out.iter().flat_map(|s| s.replicates.iter().flatten().flat_map(|p| part(p).iter().copied())).collect()
    };
    Ok(list!(
        backend = backend.name(),
        se_alpha = field(|s| &s.se, |p| &p.alpha),
        se_mu = field(|s| &s.se, |p| &p.mu),
        se_scale = field(|s| &s.se, |p| &p.scale),
        lower_alpha = field(|s| &s.lower, |p| &p.alpha),
        lower_mu = field(|s| &s.lower, |p| &p.mu),
        lower_scale = field(|s| &s.lower, |p| &p.scale),
        upper_alpha = field(|s| &s.upper, |p| &p.alpha),
        upper_mu = field(|s| &s.upper, |p| &p.mu),
        upper_scale = field(|s| &s.upper, |p| &p.scale),
        ok = out.iter().map(|s| s.ok as i32).collect::<Vec<_>>(),
        replicates_alpha = kept(|p| &p.alpha),
        replicates_mu = kept(|p| &p.mu),
        replicates_scale = kept(|p| &p.scale)
    ))
}

extendr_module! {
    mod bootstrap;
    fn em_bootstrap_lrt_;
    fn em_bootstrap_se_;
}
