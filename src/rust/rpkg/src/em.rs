//! bulkem(): R values -> EmConfig, fits -> flat R vectors (reshaped in R).

use bulkem_core::em::censored::Censoring;
use bulkem_core::em::{component_log_densities, mixture_log_density, posterior_at, select_many, Constraints, Criterion, EmConfig, Family, MixFit, MixParams, Precision, StartMethod};
use extendr_api::prelude::*;
use extendr_api::Result;

use crate::session::{backend_for, input_error, r_error, real_slices, run_in_session};

fn real_slice<'a>(x: &'a Robj, what: &str) -> Result<&'a [f64]> {
    x.as_real_slice().ok_or_else(|| Error::Other(format!("internal: {what} must be a double vector")))
}

/// Starting values from R: NULL, or list(alpha, mu, scale) of K x M matrices.
pub(crate) fn inits_from_r(inits: &Robj, components: usize) -> Result<Option<Vec<MixParams>>> {
    if inits.is_null() {
        return Ok(None);
    }
    let list = inits.as_list().ok_or_else(|| Error::Other("internal: inits must be a list".into()))?;
    let get = |name: &str| -> Result<Vec<f64>> {
        let v = list.dollar(name)?;
        Ok(real_slice(&v, name)?.to_vec())
    };
    let (alpha, mu, scale) = (get("alpha")?, get("mu")?, get("scale")?);
    let k = alpha.len() / components.max(1);
    // Column-major K x M: element (set, component) at component * K + set.
    let row = |v: &[f64], set: usize| (0..components).map(|j| v[j * k + set]).collect::<Vec<_>>();
    Ok(Some((0..k).map(|s| MixParams { alpha: row(&alpha, s), mu: row(&mu, s), scale: row(&scale, s) }).collect()))
}

/// Constraints from R: `equal`, and NULL or list(alpha, first, second) of
/// NULL or double vectors with NA where free (checked in R, and by the core).
fn constraints_from_r(equal: bool, fixed: &Robj) -> Result<Constraints> {
    let mut c = Constraints { equal_second: equal, ..Default::default() };
    if let Some(list) = fixed.as_list() {
        let held = |name: &str| -> Result<Vec<Option<f64>>> {
            let v = list.dollar(name)?;
            if v.is_null() {
                return Ok(Vec::new());
            }
            Ok(real_slice(&v, name)?.iter().map(|&x| (!x.is_nan()).then_some(x)).collect())
        };
        c.alpha = held("alpha")?;
        c.first = held("first")?;
        c.second = held("second")?;
    }
    Ok(c)
}

/// Censoring from R: per dataset list(index (0-based integers), lower,
/// upper), empty where nothing is censored (built by surv_datasets()).
pub(crate) fn censoring_from_r(censoring: &Robj) -> Result<Vec<Censoring>> {
    let list = censoring.as_list().ok_or_else(|| Error::Other("internal: censoring must be a list".into()))?;
    list.values()
        .map(|d| {
            let d = d.as_list().ok_or_else(|| Error::Other("internal: each censoring must be a list".into()))?;
            let index = d.dollar("index")?;
            let index = index.as_integer_slice().ok_or_else(|| Error::Other("internal: censoring index must be integers".into()))?;
            Ok(Censoring {
                index: index.iter().map(|&i| i.max(0) as usize).collect(),
                lower: real_slice(&d.dollar("lower")?, "lower")?.to_vec(),
                upper: real_slice(&d.dollar("upper")?, "upper")?.to_vec(),
            })
        })
        .collect()
}

/// Flatten one field of every fit, dataset-major (R: matrix(byrow = TRUE)).
fn flat(fits: &[MixFit], field: impl Fn(&MixFit) -> &[f64]) -> Vec<f64> {
    fits.iter().flat_map(|f| field(f).iter().copied()).collect()
}

/// Fit mixtures of every candidate number of components to every dataset
/// and keep each dataset's best by the criterion; see bulkem() for the
/// arguments. Parameters are flattened dataset by dataset, each dataset's
/// as long as its chosen number of components (`components`).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn em_fit_(
    datasets: List,
    family: &str,
    components: &[i32],
    criterion: &str,
    max_iters: i32,
    random_inits: i32,
    start_method: &str,
    epsilon: f64,
    seed: f64,
    inits: Robj,
    keep_posterior: bool,
    dataset_offset: i32,
    precision: &str,
    weights: Robj,
    equal: bool,
    fixed: Robj,
    censoring: Robj,
    threads: i32,
    backend: &str,
) -> Result<List> {
    let family = Family::parse(family).ok_or_else(|| input_error(format!("unknown family '{family}'")))?;
    let precision = Precision::parse(precision).ok_or_else(|| input_error(format!("unknown precision '{precision}'")))?;
    let criterion = Criterion::parse(criterion).ok_or_else(|| input_error(format!("unknown criterion '{criterion}'")))?;
    let method = StartMethod::parse(start_method).ok_or_else(|| input_error(format!("unknown start method '{start_method}'")))?;
    let candidates: Vec<usize> = components.iter().map(|&m| m.max(0) as usize).collect();
    let first = candidates.first().copied().unwrap_or(0);
    let largest = candidates.iter().copied().max().unwrap_or(0);
    let values: Vec<Robj> = datasets.values().collect();
    let data = real_slices(&values)?;
    let mut config = EmConfig::new(family, first)
        .max_iters(max_iters.max(0) as usize)
        .epsilon(epsilon)
        .random_inits(random_inits.max(0) as usize)
        .starts_by(method)
        .seed(seed as u64)
        .dataset_offset(dataset_offset.max(0) as usize)
        .keep_posterior(keep_posterior)
        .keep_trace(keep_posterior)
        .precision(precision);
    if let Some(given) = inits_from_r(&inits, first)? {
        config = config.inits(given);
    }
    // A list of double vectors parallel to the datasets (their shape checked
    // in R, their values by the core), copied for the core in the session.
    let weighted = !weights.is_null();
    let weight_values: Vec<Robj> = if weighted {
        weights.as_list().ok_or_else(|| Error::Other("internal: weights must be a list".into()))?.values().collect()
    } else {
        Vec::new()
    };
    let weight_slices = real_slices(&weight_values)?;
    if !censoring.is_null() {
        config = config.censoring(censoring_from_r(&censoring)?);
    }
    if equal || !fixed.is_null() {
        config = config.constraints(constraints_from_r(equal, &fixed)?);
    }
    let config = config.check().map_err(r_error)?;
    let one = bulkem_core::em::job(&data, &config);
    let job = bulkem_core::em::job_for(one.work * candidates.len() as f64, largest);
    let backend = backend_for(backend, &job)?;
    let sel = run_in_session(backend, threads.max(0) as usize, |exec| {
        // The weights are copied on the call's threads, not on R's alone.
        let copies = bulkem_core::memory::try_copy_all(&weight_slices, "the weights")?;
        let with_weights = weighted.then(|| config.with_weights(copies));
        select_many(&data, with_weights.as_ref().unwrap_or(&config), &candidates, criterion, exec)
    })
    .map_err(r_error)?;
    let fits = &sel.fits;

    let posterior: Robj = if keep_posterior {
        List::from_values(fits.iter().map(|f| match &f.posterior {
            Some(p) => Robj::from(p.clone()),
            None => Robj::from(()),
        }))
        .into()
    } else {
        ().into()
    };
    Ok(list!(
        backend = backend.name(),
        components = fits.iter().map(|f| f.params.components() as i32).collect::<Vec<_>>(),
        criteria = sel.criteria.clone(),
        alpha = flat(fits, |f| &f.params.alpha),
        mu = flat(fits, |f| &f.params.mu),
        scale = flat(fits, |f| &f.params.scale),
        init_alpha = flat(fits, |f| &f.init.alpha),
        init_mu = flat(fits, |f| &f.init.mu),
        init_scale = flat(fits, |f| &f.init.scale),
        loglik = fits.iter().map(|f| f.loglik).collect::<Vec<_>>(),
        iterations = fits.iter().map(|f| f.iterations as i32).collect::<Vec<_>>(),
        status = fits.iter().map(|f| f.status.name()).collect::<Vec<_>>(),
        message = fits.iter().map(|f| f.message.clone().unwrap_or_default()).collect::<Vec<_>>(),
        n = fits.iter().map(|f| f.n as f64).collect::<Vec<_>>(),
        nobs = fits.iter().map(|f| f.nobs()).collect::<Vec<_>>(),
        df = fits.iter().map(|f| config.with_components(f.params.components()).free_parameters() as i32).collect::<Vec<_>>(),
        start_logliks = flat(fits, |f| &f.start_logliks),
        best_start = fits.iter().map(|f| f.best_start as i32 + 1).collect::<Vec<_>>(),
        trace = List::from_values(fits.iter().map(|f| f.trace.clone())),
        posterior = posterior
    ))
}

/// The families the core fits, with their R names and parameter names
/// (`second` is NA for one-parameter families): R reads its family table
/// from here.
/// @noRd
#[extendr]
fn em_families_() -> List {
    let all = Family::ALL.map(|f| f.info());
    list!(
        name = all.iter().map(|i| i.name).collect::<Vec<_>>(),
        label = all.iter().map(|i| i.label).collect::<Vec<_>>(),
        first = all.iter().map(|i| i.first).collect::<Vec<_>>(),
        second = Strings::from_values(all.iter().map(|i| match i.second {
            Some(s) => Rstr::from(s),
            None => Rstr::na(),
        })),
        discrete = all.iter().map(|i| i.discrete).collect::<Vec<_>>()
    )
}

/// One mixture from R: weights and parameters (second may be empty or NA
/// for one-parameter families).
fn mixture_from_r(family: &str, alpha: &[f64], first: &[f64], second: &[f64]) -> Result<(Family, MixParams)> {
    let family = Family::parse(family).ok_or_else(|| input_error(format!("unknown family '{family}'")))?;
    let m = alpha.len();
    let second = if family.info().second.is_some() { second.to_vec() } else { vec![f64::NAN; m] };
    if first.len() != m || second.len() != m {
        return Err(input_error("the weights and the component parameters must have the same length".to_string()));
    }
    Ok((family, MixParams { alpha: alpha.to_vec(), mu: first.to_vec(), scale: second }))
}

/// log(alpha_j f_j(x)) at each x: an n x M matrix, column by column.
/// @noRd
#[extendr]
fn mix_component_log_density_(x: &[f64], family: &str, alpha: &[f64], first: &[f64], second: &[f64]) -> Result<Vec<f64>> {
    let (family, p) = mixture_from_r(family, alpha, first, second)?;
    Ok(component_log_densities(family, x, &p))
}

/// log of the mixture density at each x.
/// @noRd
#[extendr]
fn mix_log_density_(x: &[f64], family: &str, alpha: &[f64], first: &[f64], second: &[f64]) -> Result<Vec<f64>> {
    let (family, p) = mixture_from_r(family, alpha, first, second)?;
    Ok(mixture_log_density(family, x, &p))
}

/// Posterior probabilities at each x: n x M, column by column (NaN rows
/// outside the support).
/// @noRd
#[extendr]
fn mix_posterior_(x: &[f64], family: &str, alpha: &[f64], first: &[f64], second: &[f64]) -> Result<Vec<f64>> {
    let (family, p) = mixture_from_r(family, alpha, first, second)?;
    Ok(posterior_at(family, x, &p))
}

extendr_module! {
    mod em;
    fn em_fit_;
    fn em_families_;
    fn mix_component_log_density_;
    fn mix_log_density_;
    fn mix_posterior_;
}
