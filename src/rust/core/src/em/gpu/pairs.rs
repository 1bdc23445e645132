//! The (dataset, start) pairs of one device, their starting values, the
//! datasets a launch uploads, and what launches return.

use std::borrow::Cow;
use std::ops::Range;

use rayon::prelude::*;

use super::super::config::CheckedEmConfig;
use super::super::family::Family;
use super::super::fit::MixParams;
use super::super::data::weight_total;
use super::super::starts::initial_values;

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
    let drawn: Vec<std::result::Result<MixParams, String>> = range
        .into_par_iter()
        .map(|p| initial_values(config, data[pairs.dataset[p]], first + pairs.dataset[p], pairs.start[p]))
        .collect();
    let mut init = Vec::with_capacity(drawn.len() * nstat);
    let mut why = Vec::with_capacity(drawn.len());
    for d in drawn {
        match d {
            Ok(p) => {
                init.extend(p.alpha.iter().chain(&p.mu).chain(&p.scale));
                why.push(None);
            }
            Err(e) => {
                init.extend(std::iter::repeat_n(f64::NAN, nstat));
                why.push(Some(e));
            }
        }
    }
    (init, why)
}


/// The datasets used by a range of pairs, concatenated, with their layout.
/// A single dataset is borrowed, not copied (10^7 observations: no host copy).
pub(super) struct Uploaded<'a> {
    pub(super) x: Cow<'a, [f64]>,
    /// The observation weights, laid out as `x` (empty when unweighted).
    pub(super) w: Cow<'a, [f64]>,
    /// Per dataset, the sum of its weights (its length when unweighted).
    pub(super) totals: Vec<f64>,
    pub(super) offsets: Vec<i64>,
    pub(super) lengths: Vec<i32>,
    pub(super) centres: Vec<f64>,
    /// Index into the lists above of each pair's dataset.
    pub(super) pair_dataset: Vec<i32>,
    pub(super) max_n: usize,
}

/// The datasets of `datasets` (pairs in dataset order, so each dataset's
/// pairs are consecutive) laid end to end for one upload. The copy and the
/// centres run on every core: for the resident upload this is the whole
/// input (640 MB in the model-selection benchmark).
/// `weights_of(d)`: the weights of `data[d]`, if weighted.
pub(super) fn gather<'a>(family: Family, data: &[&'a [f64]], weights_of: &(dyn Fn(usize) -> Option<&'a [f64]> + Sync), datasets: &[usize]) -> Uploaded<'a> {
    let single = datasets.iter().all(|&d| d == datasets[0]);
    let mut up = Uploaded::empty(0);
    let mut distinct = Vec::new();
    let mut total = 0usize;
    for &d in datasets {
        if distinct.last() != Some(&d) {
            let n = data[d].len();
            up.offsets.push(total as i64);
            up.lengths.push(n as i32);
            up.max_n = up.max_n.max(n);
            total += n;
            distinct.push(d);
        }
        up.pair_dataset.push(up.lengths.len() as i32 - 1);
    }
    up.centres = distinct.par_iter().map(|&d| family.centre(data[d])).collect();
    up.totals = distinct.par_iter().map(|&d| weights_of(d).map_or(data[d].len() as f64, weight_total)).collect();
    let weighted = distinct.iter().any(|&d| weights_of(d).is_some());
    if datasets.is_empty() {
    } else if single {
        up.x = Cow::Borrowed(data[datasets[0]]);
        if let Some(w) = weights_of(datasets[0]) {
            up.w = Cow::Borrowed(w);
        }
    } else {
        up.x = Cow::Owned(concatenate(&distinct, total, &|d| data[d]));
        if weighted {
            up.w = Cow::Owned(concatenate(&distinct, total, &|d| weights_of(d).unwrap_or(&[])));
        }
    }
    up
}

/// `part(d)` of every dataset of `distinct`, end to end (`total` values),
/// copied on every core.
fn concatenate<'a>(distinct: &[usize], total: usize, part: &(dyn Fn(usize) -> &'a [f64] + Sync)) -> Vec<f64> {
    let mut x = vec![0.0; total];
    let mut parts = Vec::with_capacity(distinct.len());
    let mut rest = &mut x[..];
    for &d in distinct {
        let src = part(d);
        let (piece, tail) = rest.split_at_mut(src.len());
        parts.push((piece, src));
        rest = tail;
    }
    parts.into_par_iter().for_each(|(piece, src)| piece.copy_from_slice(src));
    x
}

impl Uploaded<'_> {
    /// No data (a launch whose datasets are resident), `max_n` the largest.
    pub(super) fn empty(max_n: usize) -> Self {
        Uploaded { x: Cow::Borrowed(&[]), w: Cow::Borrowed(&[]), totals: vec![], offsets: vec![], lengths: vec![], centres: vec![], pair_dataset: vec![], max_n }
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

