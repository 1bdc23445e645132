//! Bootstrap replicates of many datasets, fitted as more datasets: the
//! likelihood-ratio test for the number of components (parametric, as
//! mclust's `mclustBootstrapLRT`) and standard errors (nonparametric or
//! parametric, as mclust's `MclustBootstrap` and mixtools' `boot.se`).
//!
//! Replicate b of dataset d is drawn from its own keyed stream (seed, d, b),
//! so results never depend on the chunking, the thread count or the
//! backend. Every replicate fit starts at the original fit's parameters, as
//! mclust's do: one EM run per replicate and model, and components that
//! stay where the original fit put them.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::memory;
use crate::rng::KeyedStream;

use super::censored::Censoring;
use super::config::EmConfig;
use super::fit::{MixFit, MixParams};
use super::replicate_censoring::{plans, CensorPlan, Intervals};
use super::simulate;

/// Observations generated and fitted at once: a bound on the replicates'
/// memory (8 bytes each, plus the fit's own) that still gives a GPU plan
/// thousands of datasets.
const CHUNK_OBSERVATIONS: usize = 1 << 25;

/// Tags that give each use of the seed its own streams (the data of the
/// tests for each K, and the resamples for standard errors).
const TAG_LRT: u64 = 0x4c52_5400;
const TAG_SE: u64 = 0x5345_0000;

/// How standard-error replicates are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resample {
    /// The observations drawn with replacement.
    Nonparametric,
    /// Draws from the fitted mixture.
    Parametric,
}

impl Resample {
    pub fn parse(name: &str) -> Option<Resample> {
        match name {
            "nonparametric" => Some(Resample::Nonparametric),
            "parametric" => Some(Resample::Parametric),
            _ => None,
        }
    }
}

/// The stream of replicate `b` of the dataset with global index `dataset`.
fn replicate_stream(seed: u64, tag: u64, dataset: usize, b: usize) -> KeyedStream {
    KeyedStream::new(seed ^ tag.wrapping_mul(0xD6E8_FEB8_6659_FD93), dataset as u64, b as u64)
}

/// The replicates' fits take the family, iterations, tolerance, precision
/// and seed of a template configuration (its starts, components and
/// dataset offset are replaced); weighted data have no replicates of the
/// same meaning.
fn refuse_weights(template: &EmConfig) -> Result<()> {
    if template.weights.is_some() {
        return Err(Error::arg("weights", "cannot be bootstrapped: replicates are drawn as unweighted data"));
    }
    Ok(())
}

/// Fit the models with `components` to `count` replicates made by
/// `draw(r)` (of `size(r)` observations, and their censoring), each started at `start(r, m)`,
/// in chunks of at most `chunk_observations`; `take(r0, fits)` receives
/// each chunk's fits, per model, for replicates `r0..`. Drawing the next
/// chunk while a GPU fits the current one was measured no faster (33.6 s
/// both ways on the case, BENCHMARKS.md): the draws take the cores
/// and memory bandwidth that the fit's validation and copies need.
#[allow(clippy::too_many_arguments)]
fn fit_replicates(
    chunk_observations: usize,
    count: usize,
    size: impl Fn(usize) -> usize + Sync,
    draw: impl Fn(usize) -> (Vec<f64>, Censoring) + Sync,
    components: &[usize],
    start: impl Fn(usize, usize) -> MixParams + Sync,
    template: &EmConfig,
    exec: &Exec,
    mut take: impl FnMut(usize, Vec<Vec<MixFit>>) -> Result<()>,
) -> Result<()> {
    let mut chunks = Vec::new();
    let mut r0 = 0;
    while r0 < count {
        let mut r1 = r0;
        let mut observations = 0usize;
        while r1 < count && (r1 == r0 || observations + size(r1) <= chunk_observations) {
            observations += size(r1);
            r1 += 1;
        }
        chunks.push((r0..r1, observations));
        r0 = r1;
    }
    let largest = chunks.iter().map(|c| c.1).max().unwrap_or(0);
    memory::ensure(
        || format!("bootstrap replicates of {largest} observations"),
        memory::bytes::<f64>(&[largest]),
    )?;
    let draw_chunk = |range: &std::ops::Range<usize>| -> (Vec<Vec<f64>>, Vec<Censoring>) {
        let t0 = std::time::Instant::now();
        let data = range.clone().into_par_iter().map(&draw).unzip();
        crate::gpu::timing::record("replicate draws", t0);
        data
    };
    let fit_chunk = |range: &std::ops::Range<usize>, (data, censoring): (Vec<Vec<f64>>, Vec<Censoring>)| -> Result<Vec<Vec<MixFit>>> {
        let refs: Vec<&[f64]> = data.iter().map(|x| &x[..]).collect();
        let censored = censoring.iter().any(|c| !c.index.is_empty());
        let censoring = std::sync::Arc::new(censoring);
        components
            .iter()
            .enumerate()
            .map(|(m, &k)| {
                let config = EmConfig {
                    weights: None,
                    keep_posterior: false,
                    keep_trace: false,
                    censoring: censored.then(|| censoring.clone()),
                    ..template.with_components(k)
                }
                .inits(range.clone().map(|r| start(r, m)).collect())
                .dataset_offset(range.start)
                .check()?;
                super::fit_many(&refs, &config, exec)
            })
            .collect()
    };
    for (range, _) in &chunks {
        exec.monitor.check()?;
        let data = exec.install(|| draw_chunk(range))?;
        let fits = fit_chunk(range, data);
        take(range.start, fits?)?;
    }
    Ok(())
}

/// The parametric bootstrap of the likelihood-ratio statistic
/// 2 (l(alt) - l(null)) for dataset d (global index `ids[d]`, which keys its
/// replicates' streams) of `sizes[d]` observations whose
/// fits are `null[d]` and `alt[d]` (more components): `replicates` datasets
/// drawn from `null[d]` (and censored by `censoring[d]` when given:
/// [`CensorPlan`]), each fitted with both models from those
/// parameters. Returns the statistics, dataset-major (datasets x
/// replicates); NaN where a replicate fit failed.
#[allow(clippy::too_many_arguments)]
pub fn lrt_replicates(
    ids: &[usize],
    sizes: &[usize],
    censoring: Option<&[Option<CensorPlan>]>,
    null: &[MixParams],
    alt: &[MixParams],
    template: &EmConfig,
    replicates: usize,
    exec: &Exec,
) -> Result<Vec<f64>> {
    lrt_in_chunks(CHUNK_OBSERVATIONS, ids, sizes, censoring, null, alt, template, replicates, exec)
}

#[allow(clippy::too_many_arguments)]
fn lrt_in_chunks(
    chunk_observations: usize,
    ids: &[usize],
    sizes: &[usize],
    censoring: Option<&[Option<CensorPlan>]>,
    null: &[MixParams],
    alt: &[MixParams],
    template: &EmConfig,
    replicates: usize,
    exec: &Exec,
) -> Result<Vec<f64>> {
    refuse_weights(template)?;
    if null.len() != sizes.len() || alt.len() != sizes.len() || ids.len() != sizes.len() {
        return Err(Error::Internal("one null and one alternative fit per dataset are needed".into()));
    }
    if censoring.is_some_and(|c| c.len() != sizes.len() || c.iter().zip(sizes).any(|(p, &n)| p.as_ref().is_some_and(|p| p.len() != n))) {
        return Err(Error::Internal("one censoring plan of the dataset's size per dataset is needed".into()));
    }
    let (Some(k0), Some(k1)) = (null.first().map(MixParams::components), alt.first().map(MixParams::components)) else {
        return Ok(Vec::new());
    };
    if null.iter().any(|p| p.components() != k0) || alt.iter().any(|p| p.components() != k1) || k1 <= k0 {
        return Err(Error::Internal("the null fits need one number of components, the alternatives one more".into()));
    }
    let count = sizes.len().saturating_mul(replicates);
    let mut stats = memory::try_vec(count, f64::NAN, "the bootstrap statistics")?;
    let family = template.family;
    let tag = TAG_LRT + k0 as u64;
    let draw = |r: usize| {
        let (d, b) = (r / replicates, r % replicates);
        let mut stream = replicate_stream(template.seed, tag, ids[d], b);
        let mut x = simulate::mixture_from(family, &null[d], sizes[d], stream.rng());
        let c = match censoring.and_then(|c| c[d].as_ref()) {
            Some(plan) => plan.censor(&mut x, &mut stream),
            None => Censoring::default(),
        };
        (x, c)
    };
    let start = |r: usize, m: usize| if m == 0 { null[r / replicates].clone() } else { alt[r / replicates].clone() };
    fit_replicates(chunk_observations, count, |r| sizes[r / replicates], draw, &[k0, k1], start, template, exec, |r0, fits| {
        for (i, (f0, f1)) in fits[0].iter().zip(&fits[1]).enumerate() {
            if f0.success() && f1.success() {
                stats[r0 + i] = 2.0 * (f1.loglik - f0.loglik);
            }
        }
        Ok(())
    })?;
    Ok(stats)
}

/// Bootstrap summary of one dataset's fit: per parameter (alpha, the first
/// and the second of each component, as in [`MixParams`]) the standard
/// deviation over the replicates and the percentile interval.
#[derive(Debug, Clone, PartialEq)]
pub struct SeSummary {
    pub se: MixParams,
    pub lower: MixParams,
    pub upper: MixParams,
    /// Replicates whose fit succeeded (the summaries use these).
    pub ok: usize,
    /// Every replicate's parameters, components matched to the fit's
    /// (NaN where the fit failed), when asked for.
    pub replicates: Option<Vec<MixParams>>,
}

/// Bootstrap standard errors and `level` percentile intervals of the fits
/// `fits[d]` of `data[d]` (global index `ids[d]`; censored as
/// `censoring[d]` says, when given): `replicates` resamples (`kind`) of each dataset,
/// each fitted from the fit's parameters, components matched to the fit's
/// ([`match_components`]). Resampled replicates take the intervals of the
/// observations they draw; parametric ones are censored by the datasets'
/// [`CensorPlan`]s.
#[allow(clippy::too_many_arguments)]
pub fn se_replicates(
    ids: &[usize],
    data: &[&[f64]],
    censoring: Option<&[Censoring]>,
    fits: &[MixParams],
    kind: Resample,
    level: f64,
    template: &EmConfig,
    replicates: usize,
    keep: bool,
    exec: &Exec,
) -> Result<Vec<SeSummary>> {
    refuse_weights(template)?;
    if fits.len() != data.len() || ids.len() != data.len() {
        return Err(Error::Internal("one fit and one index per dataset are needed".into()));
    }
    if !(level > 0.0 && level < 1.0) {
        return Err(Error::arg("level", format!("must be between 0 and 1, not {level}")));
    }
    let Some(k) = fits.first().map(MixParams::components) else {
        return Ok(Vec::new());
    };
    if fits.iter().any(|p| p.components() != k) {
        return Err(Error::Internal("the fits need one number of components".into()));
    }
    let family = template.family;
    if censoring.is_some_and(|c| c.len() != data.len()) {
        return Err(Error::Internal("one censoring per dataset is needed".into()));
    }
    let censoring = censoring.filter(|c| c.iter().any(|c| !c.index.is_empty()));
    let intervals: Vec<Intervals> = match (kind, censoring) {
        (Resample::Nonparametric, Some(c)) => data.iter().zip(c).map(|(x, c)| Intervals::new(x.len(), c)).collect(),
        _ => Vec::new(),
    };
    let censor_plans = match (kind, censoring) {
        (Resample::Parametric, Some(c)) => plans(data, c, family.info().discrete, ids)?,
        _ => Vec::new(),
    };
    let draw = |r: usize| {
        let (d, b) = (r / replicates, r % replicates);
        let mut stream = replicate_stream(template.seed, TAG_SE, ids[d], b);
        let x = data[d];
        match kind {
            Resample::Nonparametric => match intervals.get(d) {
                // Uncensored: the values only, no index list per replicate.
                None => ((0..x.len()).map(|_| x[stream.below(x.len() as u64) as usize]).collect(), Censoring::default()),
                Some(iv) => {
                    let picked: Vec<usize> = (0..x.len()).map(|_| stream.below(x.len() as u64) as usize).collect();
                    (picked.iter().map(|&i| x[i]).collect(), iv.of(&picked))
                }
            },
            Resample::Parametric => {
                let mut v = simulate::mixture_from(family, &fits[d], x.len(), stream.rng());
                let c = match censor_plans.get(d).and_then(Option::as_ref) {
                    Some(plan) => plan.censor(&mut v, &mut stream),
                    None => Censoring::default(),
                };
                (v, c)
            }
        }
    };
    let start = |r: usize, _m: usize| fits[r / replicates].clone();
    let mut pending: Vec<MixParams> = Vec::with_capacity(replicates);
    let mut out = Vec::with_capacity(data.len());
    let count = data.len().saturating_mul(replicates);
    fit_replicates(CHUNK_OBSERVATIONS, count, |r| data[r / replicates].len(), draw, &[k], start, template, exec, |_, mut fits_of| {
        for fit in fits_of.swap_remove(0) {
            let d = out.len();
            pending.push(if fit.success() { match_components(&fits[d], &fit.params) } else { nan_params(k) });
            if pending.len() == replicates {
                out.push(summarise(&pending, level, keep));
                pending.clear();
            }
        }
        Ok(())
    })?;
    Ok(out)
}

fn nan_params(k: usize) -> MixParams {
    MixParams { alpha: vec![f64::NAN; k], mu: vec![f64::NAN; k], scale: vec![f64::NAN; k] }
}

/// The standard deviation (n - 1) and the type-7 quantiles (R's default)
/// of each parameter over the successful replicates (those without NaN in
/// alpha).
fn summarise(draws: &[MixParams], level: f64, keep: bool) -> SeSummary {
    let k = draws[0].components();
    let ok: Vec<&MixParams> = draws.iter().filter(|p| !p.alpha[0].is_nan()).collect();
    let mut se = nan_params(k);
    let mut lower = nan_params(k);
    let mut upper = nan_params(k);
    let pick: [fn(&MixParams) -> &Vec<f64>; 3] = [|p| &p.alpha, |p| &p.mu, |p| &p.scale];
    let put: [fn(&mut MixParams) -> &mut Vec<f64>; 3] = [|p| &mut p.alpha, |p| &mut p.mu, |p| &mut p.scale];
    for (get, set) in pick.iter().zip(put) {
        for j in 0..k {
            let mut v: Vec<f64> = ok.iter().map(|p| get(p)[j]).filter(|x| !x.is_nan()).collect();
            if v.len() < 2 {
                continue;
            }
            let n = v.len() as f64;
            let mean = v.iter().sum::<f64>() / n;
            set(&mut se)[j] = (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)).sqrt();
            v.sort_by(f64::total_cmp);
            set(&mut lower)[j] = quantile7(&v, (1.0 - level) / 2.0);
            set(&mut upper)[j] = quantile7(&v, (1.0 + level) / 2.0);
        }
    }
    SeSummary { se, lower, upper, ok: ok.len(), replicates: keep.then(|| draws.to_vec()) }
}

/// R's `quantile(type = 7)` of sorted values.
fn quantile7(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Components at most this many are matched over every permutation; more
/// keep the fit's order (by increasing first parameter), which a replicate
/// started at the fit's parameters nearly always shares.
const MATCH_MAX_COMPONENTS: usize = 7;

/// `fit`'s components in the order that best matches `reference`'s: the
/// permutation with the smallest sum, over components, of the squared
/// differences of alpha (on its own scale, 0 to 1), of the first parameter
/// over its spread among the reference's components, and of the log of
/// the second (label switching: a replicate's components may swap places
/// in the order by the first parameter when two are close).
pub fn match_components(reference: &MixParams, fit: &MixParams) -> MixParams {
    let k = reference.components();
    if k < 2 || k > MATCH_MAX_COMPONENTS || fit.components() != k {
        return fit.clone();
    }
    let mean = reference.mu.iter().sum::<f64>() / k as f64;
    let spread = (reference.mu.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / k as f64).sqrt();
    let spread = if spread.is_finite() && spread > 0.0 { spread } else { 1.0 };
    let cost = |j: usize, i: usize| {
        let log_ratio = (fit.scale[i] / reference.scale[j]).ln();
        (fit.alpha[i] - reference.alpha[j]).powi(2)
            + ((fit.mu[i] - reference.mu[j]) / spread).powi(2)
            + if log_ratio.is_finite() { log_ratio * log_ratio } else { 0.0 }
    };
    let mut best = (f64::INFINITY, (0..k).collect::<Vec<_>>());
    let mut order: Vec<usize> = (0..k).collect();
    permutations(&mut order, 0, &mut |p| {
        let c: f64 = p.iter().enumerate().map(|(j, &i)| cost(j, i)).sum();
        if c < best.0 {
            best = (c, p.to_vec());
        }
    });
    let mut out = fit.clone();
    out.permute(&best.1);
    out
}

/// Calls `visit` with every permutation of `order[at..]` (in place).
fn permutations(order: &mut Vec<usize>, at: usize, visit: &mut impl FnMut(&[usize])) {
    if at == order.len() {
        visit(order);
        return;
    }
    for i in at..order.len() {
        order.swap(at, i);
        permutations(order, at + 1, visit);
        order.swap(at, i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_do_not_change_the_statistics() {
        use crate::em::Family;
        let family = Family::InvGauss;
        let null = MixParams { alpha: vec![1.0], mu: vec![2.0], scale: vec![5.0] };
        let alt = MixParams { alpha: vec![0.5, 0.5], mu: vec![1.5, 2.5], scale: vec![5.0, 5.0] };
        let sizes = [120, 80, 200];
        let ids = [4, 9, 2];
        let template = EmConfig::new(family, 1).max_iters(30).seed(6);
        let run = |chunk| {
            lrt_in_chunks(chunk, &ids, &sizes, None, &[null.clone(), null.clone(), null.clone()], &[alt.clone(), alt.clone(), alt.clone()], &template, 7, &Exec::cpu())
                .unwrap()
        };
        let whole = run(CHUNK_OBSERVATIONS);
        assert_eq!(whole.len(), 21);
        // 1 observation: one replicate per chunk; 500: a few, crossing datasets.
        assert_eq!(run(1), whole);
        assert_eq!(run(500), whole);
    }

    #[test]
    fn quantile7_matches_r() {
        // quantile(c(1, 2, 4, 8), c(0.025, 0.5, 0.975)) = 1.075, 3, 7.7
        let v = [1.0, 2.0, 4.0, 8.0];
        assert!((quantile7(&v, 0.025) - 1.075).abs() < 1e-12);
        assert!((quantile7(&v, 0.5) - 3.0).abs() < 1e-12);
        assert!((quantile7(&v, 0.975) - 7.7).abs() < 1e-12);
    }

    #[test]
    fn matching_undoes_a_swap() {
        let reference = MixParams { alpha: vec![0.3, 0.7], mu: vec![1.0, 1.1], scale: vec![0.1, 5.0] };
        // The replicate's first parameters crossed: its order by mu swaps
        // the components; the scales and weights say which is which.
        let swapped = MixParams { alpha: vec![0.68, 0.32], mu: vec![1.04, 1.06], scale: vec![4.8, 0.11] };
        let m = match_components(&reference, &swapped);
        assert_eq!(m.scale, vec![0.11, 4.8]);
        assert_eq!(m.alpha, vec![0.32, 0.68]);
        let same = MixParams { alpha: vec![0.31, 0.69], mu: vec![0.9, 1.2], scale: vec![0.12, 5.1] };
        assert_eq!(match_components(&reference, &same), same);
        // Nearly equal weights must not decide: the means do.
        let reference = MixParams { alpha: vec![0.4957, 0.5043], mu: vec![-0.21, 2.99], scale: vec![1.06, 1.10] };
        let replicate = MixParams { alpha: vec![0.55, 0.45], mu: vec![-0.1, 3.1], scale: vec![1.0, 1.2] };
        assert_eq!(match_components(&reference, &replicate), replicate);
    }

    #[test]
    fn permutations_visit_each_once() {
        let mut seen = Vec::new();
        permutations(&mut vec![0, 1, 2, 3], 0, &mut |p| seen.push(p.to_vec()));
        assert_eq!(seen.len(), 24);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 24);
    }
}
