//! The (dataset, start) pairs of one device, their starting values, the
//! datasets a launch uploads, and what launches return.

use std::borrow::Cow;
use std::ops::Range;

use rayon::prelude::*;

use super::super::censored::CensoredObs;
use super::super::config::CheckedEmConfig;
use super::super::family::Family;
use super::super::data::{weight_facts, WeightFacts};
use super::super::starts::initial_values;
use crate::error::Result;
use crate::memory;

/// The (model, dataset, start) triples ("pairs": a model is one candidate
/// number of components) to run on one kernel path, model by model, each
/// in dataset order.
/// Their starting values are drawn launch by launch (see [`starting_values`]),
/// on the host while the device runs the previous launch.
#[derive(Default)]
pub(super) struct Pairs {
    /// Index of the pair's configuration (its number of components).
    pub(super) model: Vec<usize>,
    pub(super) dataset: Vec<usize>,
    pub(super) start: Vec<usize>,
    /// Given starting values (3M per pair), instead of drawing them.
    pub(super) given: Option<Vec<f64>>,
}

impl Pairs {
    pub(super) fn len(&self) -> usize {
        self.dataset.len()
    }
    /// Room for `n` pairs, or `Err(OutOfMemory)`.
    pub(super) fn reserve(&mut self, n: usize) -> crate::error::Result<()> {
        let fail = |_| crate::error::Error::OutOfMemory {
            what: "the (dataset, start) pairs of a GPU fit (random.inits)".into(),
            needed: crate::memory::bytes::<usize>(&[n, 2]),
            available: crate::memory::available(),
        };
        self.model.try_reserve(n).map_err(fail)?;
        self.dataset.try_reserve(n).map_err(fail)?;
        self.start.try_reserve(n).map_err(fail)
    }
    pub(super) fn push(&mut self, model: usize, dataset: usize, start: usize) {
        self.model.push(model);
        self.dataset.push(dataset);
        self.start.push(start);
    }
    /// Append every start (0..starts) of each dataset of `datasets` under
    /// `model`, written in parallel: a fresh buffer's pages are mapped as
    /// they are first written (4 million pairs, 96 MB, took most of the
    /// 40,000-dataset EM's 60 ms of planning on one thread).
    pub(super) fn extend(&mut self, model: usize, datasets: &[usize], starts: usize) -> crate::error::Result<()> {
        let n = datasets.len().saturating_mul(starts);
        self.reserve(n)?;
        let fill = |v: &mut Vec<usize>, value: &(dyn Fn(usize) -> usize + Sync)| {
            const GRAIN: usize = 1 << 14;
            let old = v.len();
            v.spare_capacity_mut()[..n].par_chunks_mut(GRAIN).enumerate().for_each(|(c, chunk)| {
                for (j, x) in chunk.iter_mut().enumerate() {
                    x.write(value(c * GRAIN + j));
                }
            });
            // SAFETY: the n values after the old length were written above
            // (reserve made room for them).
            unsafe { v.set_len(old + n) };
        };
        fill(&mut self.model, &|_| model);
        fill(&mut self.dataset, &|i| datasets[i / starts]);
        fill(&mut self.start, &|i| i % starts);
        Ok(())
    }
}

/// Where a dataset's starts of one model went: unfittable, or its first
/// pair among that model's pairs on a path.
#[derive(Clone)]
pub(super) enum Slot {
    Unfittable(String),
    Small(usize),
    Large(usize),
}

/// What a launch used and returned, one entry per pair of a [`Pairs`].
#[derive(Default)]
pub(super) struct Outputs {
    pub(super) init: Vec<f64>,
    /// Why no starting values could be drawn (the pair then ran from NaN
    /// and its result is ignored).
    pub(super) no_start: Vec<Option<String>>,
    pub(super) params: Vec<f64>,
    pub(super) loglik: Vec<f64>,
    pub(super) iterations: Vec<i32>,
    pub(super) status: Vec<i32>,
    /// Per pair, when recorded.
    pub(super) trace: Vec<Vec<f64>>,
}

impl Outputs {
    /// Empty, with room for `pairs` pairs of `nstat` parameters each (or
    /// `Err(OutOfMemory)`, not an abort).
    pub(super) fn with_capacity(pairs: usize, nstat: usize) -> Result<Outputs> {
        let what = "the GPU fits' results";
        Ok(Outputs {
            init: memory::try_with_capacity(pairs * nstat, what)?,
            no_start: memory::try_with_capacity(pairs, what)?,
            params: memory::try_with_capacity(pairs * nstat, what)?,
            loglik: memory::try_with_capacity(pairs, what)?,
            iterations: memory::try_with_capacity(pairs, what)?,
            status: memory::try_with_capacity(pairs, what)?,
            trace: Vec::new(),
        })
    }

    pub(super) fn append(&mut self, other: Outputs) {
        self.init.extend(other.init);
        self.no_start.extend(other.no_start);
        self.params.extend(other.params);
        self.loglik.extend(other.loglik);
        self.iterations.extend(other.iterations);
        self.status.extend(other.status);
        self.trace.extend(other.trace);
    }
}

/// Starting values of the pairs `range` (3M each, NaN where none could be
/// drawn) and why not, drawn in parallel from the keyed streams.
pub(super) fn starting_values(data: &[&[f64]], pairs: &Pairs, range: Range<usize>, first: usize, config: &CheckedEmConfig) -> (Vec<f64>, Vec<Option<String>>) {
    let nstat = 3 * config.components;
    if let Some(given) = &pairs.given {
        return (given[range.start * nstat..range.end * nstat].to_vec(), vec![None; range.len()]);
    }
    // Each pair's values written in place by the threads: collected and
    // then copied and dropped on one thread, a launch's 200,000 pairs took
    // 65-80 ms on 16 cores, more than a mixed-precision launch's kernel.
    let (mut init, mut why) = (vec![f64::NAN; range.len() * nstat], vec![None; range.len()]);
    init.par_chunks_mut(nstat).zip(why.par_iter_mut()).zip(range.into_par_iter()).with_min_len(64).for_each(|((slot, why), p)| {
        match initial_values(config, data[pairs.dataset[p]], first + pairs.dataset[p], pairs.start[p]) {
            Ok(v) => {
                for (o, x) in slot.iter_mut().zip(v.alpha.iter().chain(&v.mu).chain(&v.scale)) {
                    *o = *x;
                }
            }
            Err(e) => *why = Some(e),
        }
    });
    (init, why)
}

/// What the kernels read of each dataset of a device besides its values:
/// its weights, the sum of its weights (the M-step's divisor) and its
/// censored intervals. A dataset with censored observations is fitted as
/// on the CPU (em::data::Prepared::try_censored): unweighted, its exact
/// observations alone are used (its values are uploaded as they are and
/// the censored ones left out on the device: [`Uploaded::skip`]);
/// weighted, or when every observation is censored, its censored
/// observations' stand-ins weigh 0. Its total counts every observation,
/// and the kernels add the intervals' share to the E-step.
pub(super) struct DatasetExtras<'a> {
    /// The positions of the dataset's values that the kernels leave out
    /// (its censored ones, increasing).
    skips: Vec<Option<&'a [usize]>>,
    weights: Vec<Option<Cow<'a, [f64]>>>,
    totals: Vec<f64>,
    /// Whether every weight given for the dataset is > 0 (true unweighted).
    positive: Vec<bool>,
    censored: Vec<Option<CensoredObs>>,
    /// Whether the fit has censored data (its kernels read the intervals).
    pub(super) censored_fit: bool,
    /// Whether the kernels read weights: then every dataset has them.
    pub(super) weighted: bool,
}

/// Whether and how the kernels read observation weights (kernels/em.cu,
/// EM_WEIGHTED and EM_WEIGHTS_FLOAT): as float32 when every weight of a
/// launch's data is one exactly (counts, say: half the bytes to copy and
/// read), decided as they are copied (`warp::upload_weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KernelWeights {
    None,
    Float,
    Double,
}

/// One dataset's entries of [`DatasetExtras`].
type Extra<'a> = (Option<&'a [usize]>, Option<Cow<'a, [f64]>>, WeightFacts, Option<CensoredObs>);

impl<'a> DatasetExtras<'a> {
    /// The extras of `data`, whose first dataset has global index `first`;
    /// `facts`: what em::data::check_weights found of their given weights
    /// (found again if None).
    pub(super) fn new(data: &[&'a [f64]], first: usize, config: &'a CheckedEmConfig, facts: Option<&[WeightFacts]>) -> Self {
        // An unweighted dataset whose every observation is censored is
        // fitted with weights (its stand-ins weigh 0), so then the whole
        // call's kernels read weights, 1 where none were given.
        let all_censored = |d: usize, x: &[f64]| config.censoring_of(first + d).is_some_and(|c| c.index.len() == x.len());
        let weighted = config.weights.is_some() || data.par_iter().enumerate().any(|(d, x)| all_censored(d, x));
        let per_dataset: Vec<Extra<'a>> = data
            .par_iter()
            .enumerate()
            .map(|(d, x)| {
                let ones = WeightFacts { total: x.len() as f64, all_positive: true };
                let (given, known): (Option<Cow<'a, [f64]>>, WeightFacts) = match config.weights_of(first + d) {
                    Some(w) => (Some(Cow::Borrowed(w)), facts.map_or_else(|| weight_facts(w).0, |f| f[d])),
                    None if weighted => (Some(Cow::Owned(vec![1.0; x.len()])), ones),
                    None => (None, ones),
                };
                let Some(c) = config.censoring_of(first + d) else {
                    return (None, given, known, None);
                };
                match given {
                    // As Prepared::try_censored: the exact observations alone.
                    None => (Some(&c.index[..]), None, known, Some(CensoredObs::new(c, None))),
                    Some(given) => {
                        let mut w = given.into_owned();
                        let obs = CensoredObs::new(c, Some(&w));
                        c.index.iter().for_each(|&i| w[i] = 0.0);
                        (None, Some(Cow::Owned(w)), known, Some(obs))
                    }
                }
            })
            .collect();
        let n = data.len();
        let mut extras = DatasetExtras {
            skips: Vec::with_capacity(n),
            weights: Vec::with_capacity(n),
            totals: Vec::with_capacity(n),
            positive: Vec::with_capacity(n),
            censored: Vec::with_capacity(n),
            censored_fit: config.censoring.is_some(),
            weighted,
        };
        for (v, w, facts, c) in per_dataset {
            extras.skips.push(v);
            extras.weights.push(w);
            extras.totals.push(facts.total);
            extras.positive.push(facts.all_positive);
            extras.censored.push(c);
        }
        extras
    }

    fn weights_of(&self, d: usize) -> Option<&[f64]> {
        self.weights[d].as_deref()
    }

    /// The positions of dataset d's values that the kernels leave out.
    fn skip_of(&self, d: usize) -> &[usize] {
        self.skips[d].unwrap_or(&[])
    }

    /// Whether dataset d's block in em_warp has a tail warp, which takes
    /// no pair (kernels/em.cu's pool: intervals whose tails iterate, at
    /// most POOL_TAILS of them with the components').
    pub(super) fn tail_warp(&self, family: Family, components: usize, d: usize) -> bool {
        family.tails_iterate() && self.censored[d].as_ref().is_some_and(|c| !c.lower.is_empty() && c.lower.len() * components <= super::POOL_TAILS)
    }

    /// Whether every weight given for dataset d is > 0 (true unweighted).
    pub(super) fn all_positive(&self, d: usize) -> bool {
        self.positive[d]
    }

    /// Dataset d's total weight (`em::data::weight_total` of its weights, or its
    /// length when unweighted).
    pub(super) fn total(&self, d: usize) -> f64 {
        self.totals[d]
    }
}

/// The datasets used by a range of pairs, by reference, with their layout
/// end to end: the staged upload reads them in place (no host copy).
pub(super) struct Uploaded<'a> {
    /// The datasets' values, to be laid end to end on the device.
    pub(super) x: Vec<&'a [f64]>,
    /// Their observation weights, part for part (empty when unweighted).
    pub(super) w: Vec<&'a [f64]>,
    /// Per dataset, the sum of its weights (its length when unweighted).
    pub(super) totals: Vec<f64>,
    pub(super) offsets: Vec<i64>,
    pub(super) lengths: Vec<i32>,
    pub(super) centres: Vec<f64>,
    /// Index into the lists above of each pair's dataset.
    pub(super) pair_dataset: Vec<i32>,
    /// Censored intervals (lower, upper, weight), dataset after dataset;
    /// dataset k's are cens_start[k] .. cens_start[k + 1]. Empty unless the
    /// fit has censored data.
    pub(super) cens: Vec<f64>,
    pub(super) cens_start: Vec<i64>,
    /// Positions of each dataset's values that the kernels leave out (its
    /// censored ones: [`DatasetExtras`]), dataset after dataset; dataset k's
    /// are skip[skip_start[k] .. skip_start[k + 1]]. Empty when no dataset
    /// leaves values out; otherwise `x` is uploaded whole at `full_offsets`
    /// and compacted on the device to `offsets`.
    pub(super) skip: Vec<i32>,
    pub(super) skip_start: Vec<i64>,
    pub(super) full_offsets: Vec<i64>,
    pub(super) max_n: usize,
}

/// The datasets of `datasets` (pairs in dataset order, so each dataset's
/// pairs are consecutive), their layout end to end for one upload, and
/// their centres (computed on every core).
/// `extras`: the weights, totals and censored intervals of `data`.
pub(super) fn gather<'a>(family: Family, data: &[&'a [f64]], extras: &'a DatasetExtras<'a>, datasets: &[usize]) -> Uploaded<'a> {
    let weights_of = |d: usize| extras.weights_of(d);
    let mut up = Uploaded::empty(0);
    let mut distinct = Vec::new();
    let mut total = 0usize;
    for &d in datasets {
        if distinct.last() != Some(&d) {
            let n = data[d].len() - extras.skip_of(d).len();
            up.offsets.push(total as i64);
            up.lengths.push(n as i32);
            up.max_n = up.max_n.max(n);
            total += n;
            distinct.push(d);
        }
        up.pair_dataset.push(up.lengths.len() as i32 - 1);
    }
    // The exact values' centre: a dataset with values left out gathers them
    // into a short-lived vector (one dataset's worth; the allocator hands
    // each thread the same memory again, so no page faults).
    up.centres = distinct
        .par_iter()
        .map(|&d| match extras.skips[d] {
            Some(skip) => {
                let mut exact = Vec::with_capacity(data[d].len() - skip.len());
                super::super::censored::extend_exact(&mut exact, data[d], skip);
                family.centre(&exact)
            }
            None => family.centre(data[d]),
        })
        .collect();
    if distinct.iter().any(|&d| extras.skips[d].is_some()) {
        up.skip_start.push(0);
        up.full_offsets.push(0);
        for &d in &distinct {
            up.skip.extend(extras.skip_of(d).iter().map(|&i| i as i32));
            up.skip_start.push(up.skip.len() as i64);
            up.full_offsets.push(up.full_offsets.last().copied().unwrap_or(0) + data[d].len() as i64);
        }
    }
    up.totals = distinct.iter().map(|&d| extras.totals[d]).collect();
    if extras.censored_fit {
        up.cens_start.push(0);
        for &d in &distinct {
            if let Some(c) = &extras.censored[d] {
                for i in 0..c.lower.len() {
                    up.cens.extend([c.lower[i], c.upper[i], c.weight[i]]);
                }
            }
            up.cens_start.push((up.cens.len() / 3) as i64);
        }
    }
    up.x = distinct.iter().map(|&d| data[d]).collect();
    if distinct.iter().any(|&d| weights_of(d).is_some()) {
        up.w = distinct.iter().map(|&d| weights_of(d).unwrap_or(&[])).collect();
    }
    up
}

/// `parts` end to end in one host buffer, copied on every core (for a
/// launch's own copy through `clone_htod`; the staged uploads read the
/// parts in place).
pub(super) fn concatenate(parts: &[&[f64]]) -> Vec<f64> {
    let mut x = vec![0.0; parts.iter().map(|p| p.len()).sum()];
    let mut pieces = Vec::with_capacity(parts.len());
    let mut rest = &mut x[..];
    for src in parts {
        let (piece, tail) = rest.split_at_mut(src.len());
        pieces.push((piece, *src));
        rest = tail;
    }
    pieces.into_par_iter().for_each(|(piece, src)| piece.copy_from_slice(src));
    x
}

impl Uploaded<'_> {
    /// No data (a launch whose datasets are resident), `max_n` the largest.
    pub(super) fn empty(max_n: usize) -> Self {
        Uploaded { x: vec![], w: vec![], totals: vec![], offsets: vec![], lengths: vec![], centres: vec![], pair_dataset: vec![], cens: vec![], cens_start: vec![], skip: vec![], skip_start: vec![], full_offsets: vec![], max_n }
    }
}

/// Per-pair traces out of a pairs x max_iters buffer, each as long as its
/// pair's iterations.
pub(super) fn split_trace(trace: &[f64], iterations: &[i32], max_iters: usize) -> Vec<Vec<f64>> {
    iterations
        .iter()
        .enumerate()
        .map(|(p, &it)| trace[p * max_iters..p * max_iters + (it.max(0) as usize).min(max_iters)].to_vec())
        .collect()
}


#[cfg(test)]
mod tests {
    use super::{starting_values, DatasetExtras, Pairs};
    use crate::em::censored::Censoring;
    use crate::em::{initial_values, EmConfig, Family};

    /// Whether the kernels read weights, and what each dataset then has:
    /// 1 for a dataset without weights in a call that has them (one whose
    /// every observation is censored), its stand-ins 0.
    #[test]
    fn every_dataset_has_weights_when_one_needs_them() {
        let xs = [vec![1.0, 2.0, 3.0, 4.0], vec![0.5, 1.5, 2.5]];
        let data: Vec<&[f64]> = xs.iter().map(|x| &x[..]).collect();
        let kind = |config: EmConfig| {
            let config = config.check().unwrap();
            let facts = config.weights.as_ref().map(|w| crate::em::check_weights(&data, w, 1).unwrap());
            let extras = DatasetExtras::new(&data, 0, &config, facts.as_deref());
            let again = DatasetExtras::new(&data, 0, &config, None);
            assert_eq!((&extras.totals, &extras.positive), (&again.totals, &again.positive));
            let weights: Vec<Option<Vec<f64>>> = (0..data.len()).map(|d| extras.weights_of(d).map(<[f64]>::to_vec)).collect();
            (extras.weighted, weights, extras.totals.clone())
        };
        let base = || EmConfig::new(Family::Normal, 2);
        assert_eq!(kind(base()), (false, vec![None, None], vec![4.0, 3.0]));
        let given = vec![vec![0.0, 2.0, 1.0, 3.0], vec![1.0, 0.25, 1e6]];
        assert_eq!(kind(base().weights(given.clone())), (true, vec![Some(given[0].clone()), Some(given[1].clone())], vec![6.0, 1e6 + 1.25]));
        // One dataset partly censored (its exact values alone), then every
        // observation of the other: weights for both.
        let part = Censoring { index: vec![3], lower: vec![3.5], upper: vec![f64::INFINITY] };
        let all = Censoring { index: vec![0, 1, 2], lower: vec![0.0, 1.0, 2.0], upper: vec![1.0, 2.0, 3.0] };
        let (k, w, totals) = kind(base().censoring(vec![part.clone(), Censoring::default()]));
        assert_eq!((k, w, totals), (false, vec![None, None], vec![4.0, 3.0]));
        let (k, w, totals) = kind(base().censoring(vec![part, all]));
        assert!(k);
        assert_eq!(w, vec![Some(vec![1.0, 1.0, 1.0, 0.0]), Some(vec![0.0; 3])]);
        assert_eq!(totals, vec![4.0, 3.0]);
    }

    #[test]
    fn starting_values_are_each_pairs_initial_values_in_its_slot() {
        let config = EmConfig::new(Family::InvGauss, 2).random_inits(7).seed(4).check().unwrap();
        // The second dataset is constant: no valid start (NaN values and a reason).
        let xs = [(1..=300).map(|i| 0.5 + (i % 17) as f64 / 3.0).collect::<Vec<f64>>(), vec![2.0; 50], (1..=40).map(|i| i as f64 / 7.0).collect()];
        let data: Vec<&[f64]> = xs.iter().map(|x| &x[..]).collect();
        let mut pairs = Pairs::default();
        pairs.extend(0, &[2, 0, 1, 2], 7).unwrap();
        let (first, range) = (5, 3..pairs.len() - 2);
        let (init, why) = starting_values(&data, &pairs, range.clone(), first, &config);
        assert_eq!((init.len(), why.len()), (6 * range.len(), range.len()));
        for (k, p) in range.enumerate() {
            let slot = &init[6 * k..6 * k + 6];
            match initial_values(&config, data[pairs.dataset[p]], first + pairs.dataset[p], pairs.start[p]) {
                Ok(v) => {
                    let want: Vec<u64> = v.alpha.iter().chain(&v.mu).chain(&v.scale).map(|x| x.to_bits()).collect();
                    assert_eq!(slot.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want, "pair {p}");
                    assert!(why[k].is_none());
                }
                Err(e) => {
                    assert!(slot.iter().all(|x| x.is_nan()), "pair {p}");
                    assert_eq!(why[k].as_deref(), Some(&e[..]));
                }
            }
        }
        assert!(why.iter().any(|w| w.is_some()) && why.iter().any(|w| w.is_none()));
    }

    #[test]
    fn extend_lists_every_start_of_each_dataset_as_push_does() {
        let (mut by_push, mut by_extend) = (Pairs::default(), Pairs::default());
        for (model, datasets, starts) in [(0, vec![0usize, 2, 3], 4usize), (1, vec![], 4), (1, vec![1, 5], 1), (2, vec![7; 3], 40_000)] {
            for &d in &datasets {
                (0..starts).for_each(|s| by_push.push(model, d, s));
            }
            by_extend.extend(model, &datasets, starts).unwrap();
        }
        assert_eq!(by_extend.model, by_push.model);
        assert_eq!(by_extend.dataset, by_push.dataset);
        assert_eq!(by_extend.start, by_push.start);
    }
}
