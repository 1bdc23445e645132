//! How bootstrap replicates of censored data are censored.
//!
//! **Drawn replicates** (`bootstrap_lrt`, parametric `bootstrap_se`) come
//! from a fitted mixture and are then censored as the data were, by the
//! conditional bootstrap for censored data (Davison and Hinkley 1997,
//! Section 3.5): an observation censored at c keeps c as its censoring
//! time; an exact observation y draws one from the reverse Kaplan-Meier
//! estimate of the censoring distribution, conditioned on the times that
//! could not have censored y; a value past its censoring time is censored
//! there. With one time-out c for every observation (type I) each
//! replicate observation is censored at c. This needs the censoring
//! mechanism to be one-sided: every censored observation of the dataset
//! right-censored (a time-out, the end of a study) or every one
//! left-censored (a detection limit). Interval-censored and binned data
//! have no censoring times to draw, and are refused.
//!
//! Times are handled on a key axis where censoring is always from above:
//! key = t for right censoring (censored: T > C; exact y: C >= y), key =
//! -t for left censoring (censored: T <= C; exact y: C < y, so key(C) >
//! key(y) strictly).
//!
//! **Resampled replicates** (nonparametric `bootstrap_se`) draw
//! observations with replacement together with their intervals (Efron
//! 1981): no model of the censoring is needed, and every kind is taken.

use crate::error::{Error, Result};
use crate::rng::KeyedStream;

use super::censored::Censoring;

/// Which side the observations of a dataset are censored on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Known only to exceed a time: (c, inf].
    Right,
    /// Known only to be at or below a limit: (-inf, c].
    Left,
}

impl Side {
    fn key(self, t: f64) -> f64 {
        match self {
            Side::Right => t,
            Side::Left => -t,
        }
    }
}

/// Where observation i's censoring time comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Slot {
    /// Censored in the data: its own censoring time (on the time axis).
    At(f64),
    /// Exact in the data: a draw from `times[k..]` and the tail.
    From(usize),
}

/// The censoring mechanism of one dataset, to censor draws as its data
/// were (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct CensorPlan {
    side: Side,
    /// The distinct censoring times as keys, increasing.
    keys: Vec<f64>,
    /// cum[k]: the reverse Kaplan-Meier mass of keys[..k]; cum[keys.len()]
    /// + `tail` = 1.
    cum: Vec<f64>,
    /// The mass beyond the last censoring time: never censored.
    tail: f64,
    slots: Vec<Slot>,
    /// Counts are censored at whole numbers (stand-ins as R's surv_datasets
    /// makes them).
    discrete: bool,
}

impl CensorPlan {
    /// The plan of dataset `x` (stand-in values at censored positions) with
    /// censoring `c`; None when nothing is censored. `which` (1-based)
    /// names the dataset in an error.
    pub fn new(x: &[f64], c: &Censoring, discrete: bool, which: usize) -> Result<Option<CensorPlan>> {
        if c.index.is_empty() {
            return Ok(None);
        }
        let side = if c.upper.iter().all(|u| *u == f64::INFINITY) {
            Side::Right
        } else if c.lower.iter().all(|l| *l == f64::NEG_INFINITY) {
            Side::Left
        } else {
            let k = c.lower.iter().zip(&c.upper).position(|(l, u)| l.is_finite() && u.is_finite()).unwrap_or(0);
            return Err(Error::arg(
                "datasets",
                format!(
                    "dataset {which} has observation {} censored in ({}, {}]: parametric bootstrap replicates can be censored as the data were only when every censored observation of a dataset is right-censored or every one left-censored (there are no censoring times to draw for interval-censored or binned data); type = \"nonparametric\" in bootstrap_se() takes any censoring",
                    c.index[k] + 1,
                    c.lower[k],
                    c.upper[k]
                ),
            ));
        };
        let time = |k: usize| if side == Side::Right { c.lower[k] } else { c.upper[k] };
        // Every observation's key and whether it is a censoring time.
        let mut slots = vec![Slot::From(0); x.len()];
        let mut all: Vec<(f64, bool)> = Vec::with_capacity(x.len());
        let mut next = c.index.iter().enumerate().peekable();
        for (i, &v) in x.iter().enumerate() {
            if let Some((k, _)) = next.next_if(|(_, &j)| j == i) {
                slots[i] = Slot::At(time(k));
                all.push((side.key(time(k)), true));
            } else {
                all.push((side.key(v), false));
            }
        }
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Reverse Kaplan-Meier: the censorings are the events; at risk at a
        // key are the observations at or past it.
        let (mut keys, mut cum, mut survive) = (Vec::new(), vec![0.0], 1.0);
        let n = all.len();
        let mut i = 0;
        while i < n {
            let key = all[i].0;
            let mut j = i;
            let mut events = 0usize;
            while j < n && all[j].0 == key {
                events += all[j].1 as usize;
                j += 1;
            }
            if events > 0 {
                let mass = survive * events as f64 / (n - i) as f64;
                keys.push(key);
                cum.push(cum.last().unwrap() + mass);
                survive -= mass;
            }
            i = j;
        }
        let tail = survive.max(0.0);
        for (i, s) in slots.iter_mut().enumerate() {
            if let Slot::From(k) = s {
                let y = side.key(x[i]);
                // Right: C >= y; left: key(C) > key(y).
                *k = match side {
                    Side::Right => keys.partition_point(|&c| c < y),
                    Side::Left => keys.partition_point(|&c| c <= y),
                };
            }
        }
        Ok(Some(CensorPlan { side, keys, cum, tail, slots, discrete }))
    }

    /// Observations in the dataset (and in each replicate).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the dataset is empty.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Observation i's censoring time in a replicate (+-inf: never
    /// censored).
    fn time(&self, i: usize, stream: &mut KeyedStream) -> f64 {
        let k = match self.slots[i] {
            Slot::At(t) => return t,
            Slot::From(k) => k,
        };
        let m = self.keys.len();
        let total = self.cum[m] + self.tail;
        let from = self.cum[k];
        let never = match self.side {
            Side::Right => f64::INFINITY,
            Side::Left => f64::NEG_INFINITY,
        };
        let mass = total - from;
        if mass.is_nan() || mass <= 0.0 {
            return never;
        }
        let v = from + stream.uniform() * mass;
        let j = k + self.cum[k + 1..].partition_point(|&c| c <= v);
        if j >= m {
            never
        } else {
            self.side.key(self.keys[j])
        }
    }

    /// Censor `values` (a replicate of the dataset, one value per
    /// observation) in place: a censored value is replaced by a stand-in
    /// inside its interval. Returns the replicate's censoring.
    pub fn censor(&self, values: &mut [f64], stream: &mut KeyedStream) -> Censoring {
        debug_assert_eq!(values.len(), self.slots.len());
        let mut out = Censoring::default();
        for (i, v) in values.iter_mut().enumerate() {
            let c = self.time(i, stream);
            let censored = match self.side {
                Side::Right => *v > c,
                Side::Left => *v <= c,
            };
            if !censored {
                continue;
            }
            out.index.push(i);
            match self.side {
                Side::Right => {
                    out.lower.push(c);
                    out.upper.push(f64::INFINITY);
                    *v = if self.discrete { c.floor() + 1.0 } else { c };
                }
                Side::Left => {
                    out.lower.push(f64::NEG_INFINITY);
                    out.upper.push(c);
                    *v = if self.discrete { c.floor().max(0.0) } else { c };
                }
            }
        }
        out
    }
}

/// The censoring plans of datasets `data` (`censoring` parallel to them;
/// `ids`: their 0-based numbers in the call, for errors).
pub fn plans(data: &[&[f64]], censoring: &[Censoring], discrete: bool, ids: &[usize]) -> Result<Vec<Option<CensorPlan>>> {
    data.iter().zip(censoring).zip(ids).map(|((x, c), &id)| CensorPlan::new(x, c, discrete, id + 1)).collect()
}

/// A dataset's intervals by observation, for resampling with them.
#[derive(Debug, Clone, PartialEq)]
pub struct Intervals {
    /// Position in the censoring of each observation; u32::MAX: exact.
    at: Vec<u32>,
    lower: Vec<f64>,
    upper: Vec<f64>,
}

impl Intervals {
    pub fn new(n: usize, c: &Censoring) -> Intervals {
        let mut at = vec![u32::MAX; n];
        for (k, &i) in c.index.iter().enumerate() {
            at[i] = k as u32;
        }
        Intervals { at, lower: c.lower.clone(), upper: c.upper.clone() }
    }

    /// The censoring of a resample that took observations `picked`, in
    /// that order.
    pub fn of(&self, picked: &[usize]) -> Censoring {
        let mut out = Censoring::default();
        for (pos, &i) in picked.iter().enumerate() {
            let k = self.at[i];
            if k != u32::MAX {
                out.index.push(pos);
                out.lower.push(self.lower[k as usize]);
                out.upper.push(self.upper[k as usize]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Right-censoring of `x` at the given (position, time) pairs.
    fn right(x: &[f64], censored: &[(usize, f64)]) -> Censoring {
        assert!(censored.iter().all(|c| c.0 < x.len()));
        Censoring {
            index: censored.iter().map(|c| c.0).collect(),
            lower: censored.iter().map(|c| c.1).collect(),
            upper: vec![f64::INFINITY; censored.len()],
        }
    }

    /// The frequencies of observation i's drawn censoring times.
    fn frequencies(plan: &CensorPlan, i: usize, draws: usize) -> std::collections::BTreeMap<String, f64> {
        let mut stream = KeyedStream::new(5, 0, 0);
        let mut f = std::collections::BTreeMap::new();
        for _ in 0..draws {
            *f.entry(format!("{}", plan.time(i, &mut stream))).or_insert(0.0) += 1.0 / draws as f64;
        }
        f
    }

    #[test]
    fn a_single_time_out_censors_every_replicate_observation_there() {
        let x = [0.5, 1.2, 3.0, 0.1, 3.0, 2.2];
        let c = right(&x, &[(2, 3.0), (4, 3.0)]);
        let plan = CensorPlan::new(&x, &c, false, 1).unwrap().unwrap();
        let mut stream = KeyedStream::new(1, 0, 0);
        for i in 0..x.len() {
            for _ in 0..100 {
                assert_eq!(plan.time(i, &mut stream), 3.0, "observation {i}");
            }
        }
        let mut v = vec![2.9, 3.0, 3.1, 7.0, 0.2, 3.0000001];
        let got = plan.censor(&mut v, &mut stream);
        assert_eq!(got.index, vec![2, 3, 5]);
        assert_eq!(got.lower, vec![3.0; 3]);
        assert!(got.upper.iter().all(|u| *u == f64::INFINITY));
        assert_eq!(v, vec![2.9, 3.0, 3.0, 3.0, 0.2, 3.0]);
    }

    /// The reverse Kaplan-Meier by hand: keys 1 (exact), 2 (censored), 3
    /// (exact), 4 (censored), 5 (exact). At 2: 4 at risk, mass 1/4, S =
    /// 3/4; at 4: 2 at risk, mass 3/8, S = 3/8 (the tail). An exact
    /// observation at 3 draws from {4, inf} with weights 3/8 : 3/8; one at
    /// 1 from {2, 4, inf} with 1/4 : 3/8 : 3/8; one at 5 is never censored.
    #[test]
    fn exact_observations_draw_from_the_reverse_kaplan_meier_past_them() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let plan = CensorPlan::new(&x, &right(&x, &[(1, 2.0), (3, 4.0)]), false, 1).unwrap().unwrap();
        assert_eq!(plan.keys, vec![2.0, 4.0]);
        assert!((plan.cum[2] - 0.625).abs() < 1e-15 && (plan.tail - 0.375).abs() < 1e-15);
        let near = |f: &std::collections::BTreeMap<String, f64>, k: &str, p: f64| {
            let got = f.get(k).copied().unwrap_or(0.0);
            assert!((got - p).abs() < 0.01, "{k}: {got} against {p} ({f:?})");
        };
        let f = frequencies(&plan, 2, 200_000);
        near(&f, "4", 0.5);
        near(&f, "inf", 0.5);
        let f = frequencies(&plan, 0, 200_000);
        near(&f, "2", 0.25);
        near(&f, "4", 0.375);
        near(&f, "inf", 0.375);
        assert_eq!(frequencies(&plan, 4, 1000).keys().collect::<Vec<_>>(), vec!["inf"]);
        // A censored observation keeps its time.
        assert_eq!(frequencies(&plan, 1, 1000).keys().collect::<Vec<_>>(), vec!["2"]);
        // An exact value at a censoring time may be censored there (C >= y).
        let x = [1.0, 2.0, 2.0, 5.0];
        let plan = CensorPlan::new(&x, &right(&x, &[(1, 2.0)]), false, 1).unwrap().unwrap();
        assert!(frequencies(&plan, 2, 10_000).contains_key("2"));
    }

    /// Detection limits: the mirror image, with exact values strictly above
    /// their limit and stand-ins at the limit.
    #[test]
    fn left_censoring_is_the_mirror_image() {
        let x = [0.5, 0.5, 2.0, 3.0, 0.2, 1.5];
        let c = Censoring { index: vec![0, 1, 4], lower: vec![f64::NEG_INFINITY; 3], upper: vec![0.5, 0.5, 0.2] };
        let plan = CensorPlan::new(&x, &c, false, 1).unwrap().unwrap();
        // Keys -0.5 (twice) and -0.2: an exact 1.5 (key -1.5) may draw
        // either limit; an exact value of 0.5 could not have had limit 0.5.
        let f = frequencies(&plan, 5, 20_000);
        assert!(f.contains_key("0.5") && f.contains_key("0.2"), "{f:?}");
        let x2 = [0.5, 0.5, 0.2, 0.5];
        let c2 = Censoring { index: vec![0, 1, 2], lower: vec![f64::NEG_INFINITY; 3], upper: vec![0.5, 0.5, 0.2] };
        let plan2 = CensorPlan::new(&x2, &c2, false, 1).unwrap().unwrap();
        assert!(!frequencies(&plan2, 3, 20_000).contains_key("0.5"));
        let mut stream = KeyedStream::new(2, 0, 0);
        let mut v = vec![0.4, 0.6, 0.1, 9.0, 0.2, 2.0];
        let got = plan.censor(&mut v, &mut stream);
        // 0.1 at an exact position is below either limit it may draw.
        assert_eq!(got.index, vec![0, 2, 4]);
        assert_eq!((got.upper[0], got.upper[2]), (0.5, 0.2));
        assert!(got.upper[1] == 0.5 || got.upper[1] == 0.2);
        assert_eq!(v, vec![0.5, 0.6, got.upper[1], 9.0, 0.2, 2.0]);
    }

    #[test]
    fn counts_get_stand_ins_inside_their_interval() {
        let x = [1.0, 4.0, 4.0, 2.0];
        let plan = CensorPlan::new(&x, &right(&x, &[(1, 3.0), (2, 3.0)]), true, 1).unwrap().unwrap();
        let mut v = vec![3.0, 4.0, 7.0, 0.0];
        let got = plan.censor(&mut v, &mut KeyedStream::new(3, 0, 0));
        assert_eq!(got.index, vec![1, 2]);
        assert_eq!(v, vec![3.0, 4.0, 4.0, 0.0]);
    }

    #[test]
    fn interval_censoring_is_refused_with_the_observation() {
        let x = [1.0, 2.5, 4.0];
        let c = Censoring { index: vec![0, 1], lower: vec![0.5, 2.0], upper: vec![f64::INFINITY, 3.0] };
        let e = CensorPlan::new(&x, &c, false, 7).unwrap_err().to_string();
        assert!(e.contains("dataset 7") && e.contains("observation 2") && e.contains("nonparametric"), "{e}");
        assert!(CensorPlan::new(&x, &Censoring::default(), false, 1).unwrap().is_none());
    }

    #[test]
    fn resamples_carry_their_intervals() {
        let c = Censoring { index: vec![1, 3], lower: vec![2.0, 0.5], upper: vec![f64::INFINITY, 1.0] };
        let iv = Intervals::new(4, &c);
        let got = iv.of(&[3, 0, 1, 3, 2]);
        assert_eq!(got.index, vec![0, 2, 3]);
        assert_eq!(got.lower, vec![0.5, 2.0, 0.5]);
        assert_eq!(got.upper, vec![1.0, f64::INFINITY, 1.0]);
    }
}
