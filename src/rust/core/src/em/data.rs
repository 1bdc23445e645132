//! Checking datasets and preparing them for the E-step.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::memory;

use super::family::Family;

/// A dataset in the form the E-step reads: the features (u, v) of every
/// observation, each in an array of its own (so that the SIMD E-step loads
/// a vector of either with one instruction, where pairs took a dozen
/// shuffles each time LLVM reloaded them), plus the shared log-density term
/// summed once.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub n: usize,
    pub centre: f64,
    /// Sum over observations of k(x) (weighted), the log-density part no
    /// component changes.
    pub shared: f64,
    pub u: Vec<f64>,
    pub v: Vec<f64>,
    /// Observation weights (None: all 1).
    pub weights: Option<Vec<f64>>,
    /// The sum of the weights (n when unweighted): the M-step's divisor of
    /// the mixing proportions.
    pub total: f64,
    /// The censored observations (their stand-ins weigh 0 in `weights`).
    pub censored: Option<super::censored::CensoredObs>,
}

impl Prepared {
    /// Panics if the features cannot be allocated; the fit uses [`Prepared::try_new`].
    pub fn new(family: Family, x: &[f64]) -> Self {
        match Self::try_new(family, x) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    /// The features of `x` (16 bytes per observation), allocated fallibly.
    pub fn try_new(family: Family, x: &[f64]) -> Result<Self> {
        let centre = family.centre(x);
        let mut u: Vec<f64> = memory::try_with_capacity(x.len(), "the features of a dataset")?;
        let mut v: Vec<f64> = memory::try_with_capacity(x.len(), "the features of a dataset")?;
        if x.len() <= 4 * SCAN_CHUNK {
            for &xi in x {
                let (ui, vi) = family.features(xi, centre);
                u.push(ui);
                v.push(vi);
            }
        } else {
            // One long dataset on every core (many datasets are prepared in
            // parallel already), into the capacity reserved above.
            x.par_iter().map(|&xi| family.features(xi, centre)).unzip_into_vecs(&mut u, &mut v);
        }
        let shared = ordered_sum(x, |xi| family.shared_term(xi));
        Ok(Prepared { n: x.len(), centre, shared, u, v, weights: None, total: x.len() as f64, censored: None })
    }

    /// Each observation's features (u, v), in order.
    pub fn features(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.u.iter().copied().zip(self.v.iter().copied())
    }

    /// [`Prepared::try_new`] with observation weights, if any (checked by
    /// [`check_weights`]).
    pub fn try_weighted(family: Family, x: &[f64], weights: Option<&[f64]>) -> Result<Self> {
        let mut prep = Self::try_new(family, x)?;
        if let Some(w) = weights {
            let mut own = memory::try_with_capacity(w.len(), "the weights of a dataset")?;
            own.extend_from_slice(w);
            prep.shared = ordered_sum_by(x.len(), |i| if w[i] == 0.0 { 0.0 } else { w[i] * family.shared_term(x[i]) });
            prep.total = weight_total(w);
            prep.weights = Some(own);
        }
        Ok(prep)
    }

    /// [`Prepared::try_weighted`] for a dataset with censored observations
    /// `c`: the exact E-step leaves their stand-ins out, and the total
    /// weight (the M-step's divisor) counts them. Unweighted, the exact
    /// observations are prepared alone (the unweighted E-step is the
    /// faster); weighted, or when every observation is censored, the
    /// stand-ins stay with weight 0.
    pub fn try_censored(family: Family, x: &[f64], weights: Option<&[f64]>, c: &super::censored::Censoring) -> Result<Self> {
        if weights.is_none() && c.index.len() < x.len() {
            let mut exact = memory::try_with_capacity(x.len() - c.index.len(), "the exact observations of a dataset")?;
            super::censored::extend_exact(&mut exact, x, &c.index);
            let mut prep = Self::try_new(family, &exact)?;
            prep.total = x.len() as f64;
            prep.censored = Some(super::censored::CensoredObs::new(c, None));
            return Ok(prep);
        }
        let mut w = memory::try_with_capacity(x.len(), "the weights of a dataset")?;
        match weights {
            Some(given) => w.extend_from_slice(given),
            None => w.resize(x.len(), 1.0),
        }
        let total = weight_total(&w);
        let censored = super::censored::CensoredObs::new(c, Some(&w));
        for &i in &c.index {
            w[i] = 0.0;
        }
        let mut prep = Self::try_weighted(family, x, Some(&w))?;
        prep.total = total;
        prep.censored = Some(censored);
        Ok(prep)
    }
}

/// The sum of a dataset's weights ([`ordered_sum`]). On one thread, 10^7
/// weights took 12 ms of a weighted GPU fit whose unweighted form takes
/// 15 ms in all (BENCHMARKS.md, issue 25).
pub fn weight_total(w: &[f64]) -> f64 {
    ordered_sum(w, |v| v)
}

/// What [`check_weights`] learns of a dataset's weights in its one pass,
/// for the fit to use instead of passes of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightFacts {
    /// [`weight_total`] of the weights (the same bits).
    pub total: f64,
    /// Every weight > 0 (no observation is left out).
    pub all_positive: bool,
}

/// One pass over weights: their [`WeightFacts`], whether every one is
/// finite and >= 0, and whether some one is > 0. The tests ride along the
/// sum's chain of additions (10^7 weights took 19 ms on one thread of
/// this VM, against 14 + 12 ms for the sum and one test apart), and are
/// comparisons of doubles, which a fold vectorises (0.25 ns a value in
/// cache, against 0.45-0.59 for the same tests on the bits).
pub(crate) fn weight_facts(w: &[f64]) -> (WeightFacts, bool, bool) {
    // As ordered_sum: in order from -0.0 (as `sum`), chunk by chunk when long.
    let part = |c: &[f64]| {
        let (mut s, mut invalid, mut not_above, mut above) = (-0.0, false, false, false);
        for &v in c {
            s += v;
            invalid |= !((v >= 0.0) & (v <= f64::MAX));
            let positive = v > 0.0;
            not_above |= !positive;
            above |= positive;
        }
        (s, invalid, not_above, above)
    };
    let (total, invalid, not_above, above) = if w.len() <= 4 * SCAN_CHUNK {
        part(w)
    } else {
        let parts: Vec<_> = w.par_chunks(SCAN_CHUNK).map(part).collect();
        let any = |f: fn(&(f64, bool, bool, bool)) -> bool| parts.iter().any(f);
        (parts.iter().map(|p| p.0).sum(), any(|p| p.1), any(|p| p.2), any(|p| p.3))
    };
    (WeightFacts { total, all_positive: !not_above }, !invalid, above)
}

/// The sum of f(v) over `x` in a fixed order: in order, or for a long
/// vector the sums of its SCAN_CHUNK-long chunks (on every core) added in
/// order, the same on any number of threads. The dataset-wide sums of the
/// checks and centres (a mean, a mean log) use it: on one thread the logs
/// of 10^7 values take tens of ms, more than a whole GPU fit of them.
pub(crate) fn ordered_sum(x: &[f64], f: impl Fn(f64) -> f64 + Sync) -> f64 {
    ordered_sum_by(x.len(), |i| f(x[i]))
}

/// [`ordered_sum`] of term(i) for i in 0..n.
pub(crate) fn ordered_sum_by(n: usize, term: impl Fn(usize) -> f64 + Sync) -> f64 {
    let part = |r: std::ops::Range<usize>| r.map(&term).sum::<f64>();
    if n <= 4 * SCAN_CHUNK {
        return part(0..n);
    }
    let parts: Vec<f64> = (0..n.div_ceil(SCAN_CHUNK)).into_par_iter().map(|k| part(k * SCAN_CHUNK..n.min((k + 1) * SCAN_CHUNK))).collect();
    parts.iter().sum()
}

/// Observation weights against the data: one vector per dataset, each as
/// long as its dataset, every weight finite and >= 0, and some weight > 0
/// in every dataset. `first` is the 1-based index of `data[0]`. Returns
/// each dataset's [`WeightFacts`], from the same one pass.
pub fn check_weights(data: &[&[f64]], weights: &[Vec<f64>], first: usize) -> Result<Vec<WeightFacts>> {
    if weights.len() != data.len() {
        return Err(Error::arg("weights", format!("must hold one weight vector per dataset ({}), not {}", data.len(), weights.len())));
    }
    let check = |d: usize, x: &[f64], w: &[f64]| -> Result<WeightFacts> {
        let which = first + d;
        if w.len() != x.len() {
            return Err(Error::arg("weights", format!("dataset {which} has {} observations but {} weights", x.len(), w.len())));
        }
        let (facts, valid, some_positive) = weight_facts(w);
        if !valid {
            let i = first_where(w, |v| !nonnegative_finite(v)).unwrap_or(0);
            let value = if w[i].is_nan() { "missing (NA or NaN)".to_string() } else { num(w[i]) };
            return Err(Error::arg("weights", format!("weight {} of dataset {which} is {value}; weights must be finite and non-negative", i + 1)));
        }
        if !x.is_empty() && !some_positive {
            return Err(Error::arg("weights", format!("every weight of dataset {which} is 0")));
        }
        Ok(facts)
    };
    // Many datasets in parallel; the error names the first bad one.
    let checked: Vec<Result<WeightFacts>> = data.par_iter().zip(weights.par_iter()).enumerate().map(|(d, (x, w))| check(d, x, w)).collect();
    checked.into_iter().collect()
}

/// Datasets longer than this are scanned in parallel chunks of this size.
const SCAN_CHUNK: usize = 1 << 16;

/// Position of the first element of `x` for which `bad` holds, scanning
/// long vectors in parallel.
pub(crate) fn first_where(x: &[f64], bad: impl Fn(f64) -> bool + Sync) -> Option<usize> {
    first_found(x, |c| position_blocked(c, &bad))
}

/// Position of the first element of `x` that `find` (the first hit in a
/// slice) reports, scanning long vectors in parallel chunks.
pub(crate) fn first_found(x: &[f64], find: impl Fn(&[f64]) -> Option<usize> + Sync) -> Option<usize> {
    if x.len() <= 4 * SCAN_CHUNK {
        return find(x);
    }
    x.par_chunks(SCAN_CHUNK).enumerate().filter_map(|(k, c)| find(c).map(|i| k * SCAN_CHUNK + i)).find_first(|_| true)
}

/// Whether `test` holds for every chunk of `x` (long vectors in parallel
/// chunks, as [`first_found`]).
fn all_chunks(x: &[f64], test: impl Fn(&[f64]) -> bool + Sync + Send) -> bool {
    if x.len() <= 4 * SCAN_CHUNK {
        return test(x);
    }
    x.par_chunks(SCAN_CHUNK).all(test)
}

/// `x.iter().position(bad)` that tests blocks of values without an exit
/// per value and searches only a block with a hit. With `bad` on the
/// values' bits (integer compares, as `positive_finite`) the block test
/// vectorises: 10^7 values took 12-14 ms on one thread of this VM, against
/// 40 ms for `position` with a comparison of doubles.
pub(crate) fn position_blocked(x: &[f64], bad: impl Fn(f64) -> bool) -> Option<usize> {
    const BLOCK: usize = 256;
    for (k, block) in x.chunks(BLOCK).enumerate() {
        if block.iter().fold(0u64, |any, &v| any | bad(v) as u64) != 0 {
            return block.iter().position(|&v| bad(v)).map(|i| k * BLOCK + i);
        }
    }
    None
}

/// Whether `v` is positive and finite (not NaN), by its bits: those
/// doubles are the u64s 1 ..= 0x7fef_ffff_ffff_ffff.
pub(crate) fn positive_finite(v: f64) -> bool {
    v.to_bits().wrapping_sub(1) < 0x7fef_ffff_ffff_ffff
}

/// `v > 0.0` (false for NaN), by its bits: +0 wraps to the top, and
/// negatives and NaNs lie above +inf's bits.
pub(crate) fn above_zero(v: f64) -> bool {
    v.to_bits().wrapping_sub(1) < 0x7ff0_0000_0000_0000
}

/// `v >= 0.0 && v.is_finite()` (a weight), by its bits: +0 to the largest
/// double, and -0.
pub(crate) fn nonnegative_finite(v: f64) -> bool {
    let b = v.to_bits();
    b < 0x7ff0_0000_0000_0000 || b == 1 << 63
}

/// Whether `v` is finite (not NaN), by its bits.
pub(crate) fn finite_bits(v: f64) -> bool {
    (v.to_bits() & !(1u64 << 63)) < 0x7ff0_0000_0000_0000
}

/// Reject the first value that is not a valid observation, then data whose
/// range the family's sufficient statistics cannot represent (see
/// [`check_range`]); `dataset` is the 1-based index the caller reports.
pub fn validate(family: Family, x: &[f64], dataset: usize) -> Result<()> {
    if all_chunks(x, |c| family.valid_in_one_pass(c)) {
        return Ok(());
    }
    if let Some(i) = first_found(x, |c| family.first_invalid(c)) {
        return Err(Error::InvalidData {
            dataset,
            position: i + 1,
            value: x[i],
            problem: family.observation_problem(x[i]).unwrap_or_default().to_string(),
        });
    }
    check_range(family, x, dataset)
}

/// Validate every dataset; the error names the first invalid one.
/// `first` is the 1-based index of `data[0]`.
pub fn validate_all(family: Family, data: &[&[f64]], first: usize) -> Result<()> {
    let bad = data.par_iter().enumerate().map(|(d, x)| validate(family, x, first + d)).find_first(|r| r.is_err());
    bad.unwrap_or(Ok(()))
}

/// Data whose sufficient statistics double precision cannot hold: an input
/// error that says so, instead of a fit that overflows (or loses every
/// digit) and reports a wrong answer or a "collapsed" component. Each
/// family says what it needs (`FamilyDef::check_range`).
pub fn check_range(family: Family, x: &[f64], dataset: usize) -> Result<()> {
    if x.is_empty() {
        // Nothing to represent; the fit reports the dataset as too small.
        return Ok(());
    }
    family.check_range(x, dataset)
}

/// sum (x - centre)^2 in a fixed order ([`ordered_sum`]), so that the
/// check does not depend on the thread count.
pub(crate) fn sum_squares(x: &[f64], centre: f64) -> f64 {
    ordered_sum(x, |v| (v - centre) * (v - centre))
}

/// A number as a message shows it: "5", "0.25", "1e300", "6.7e153".
pub(crate) fn num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || !v.is_finite() || (1e-4..1e6).contains(&a) {
        return format!("{}", (v * 1e6).round() / 1e6).replace("inf", "Inf");
    }
    let s = format!("{v:.2e}");
    match s.split_once('e') {
        Some((mant, exp)) => format!("{}e{exp}", mant.trim_end_matches('0').trim_end_matches('.')),
        None => s,
    }
}

/// Smallest dataset an M-component fit accepts: enough observations for a
/// random start (p + 1 = 3) and for the free parameters.
pub fn min_observations(family: Family, components: usize) -> usize {
    Family::START_SUBSET.max(family.parameters(components))
}

/// Why a valid dataset cannot be fitted at all (too small, constant).
pub fn unfittable_reason(family: Family, x: &[f64], components: usize) -> Option<String> {
    let need = min_observations(family, components);
    if x.len() < need {
        return Some(format!(
            "{} observation{} but a {components}-component mixture needs at least {need}",
            x.len(),
            if x.len() == 1 { "" } else { "s" }
        ));
    }
    if first_where(x, |v| v != x[0]).is_none() {
        return Some(format!("all {} observations are equal ({})", x.len(), x[0]));
    }
    None
}

/// [`unfittable_reason`] of the observations whose weight is not 0.
pub fn unfittable_weighted(family: Family, x: &[f64], weights: Option<&[f64]>, components: usize) -> Option<String> {
    let all_positive = weights.is_none_or(|w| first_where(w, |wi| !above_zero(wi)).is_none());
    unfittable_given(family, x, weights, all_positive, components)
}

/// [`unfittable_weighted`] where whether every weight is > 0 is known.
pub(crate) fn unfittable_given(family: Family, x: &[f64], weights: Option<&[f64]>, all_positive: bool, components: usize) -> Option<String> {
    match weights {
        None => unfittable_reason(family, x, components),
        Some(_) if all_positive => unfittable_reason(family, x, components),
        Some(w) => {
            let kept: Vec<f64> = x.iter().zip(w).filter(|(_, &wi)| wi > 0.0).map(|(&xi, _)| xi).collect();
            unfittable_reason(family, &kept, components).map(|why| format!("{why} (of weight > 0)"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Edge values for the tests on bits: zeros, subnormals, the extremes,
    /// infinities, NaNs of both signs and R's NA, and ordinary values.
    fn edge_values() -> Vec<f64> {
        let mut v = vec![0.0, -0.0, f64::MIN_POSITIVE, -f64::MIN_POSITIVE, 5e-324, -5e-324, f64::MAX, f64::MIN, 1.0, -1.0, 0.5, 3.0, 1e300, 1e-300];
        v.extend([f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -f64::NAN, f64::from_bits(0x7ff0_0000_0000_07a2), f64::from_bits(0x7ff0_0000_0000_0001)]);
        v.extend([super::super::IG_MIN, super::super::IG_MAX, super::super::IG_MIN.next_down(), super::super::IG_MAX.next_up()]);
        v
    }

    /// The one pass's total is weight_total's bits, and its tests are
    /// nonnegative_finite and above_zero over every weight, short and
    /// long, with each edge value at the start, middle or end.
    #[test]
    fn weight_facts_are_the_separate_tests() {
        for n in [1, 1000, 4 * SCAN_CHUNK + 3, 9 * SCAN_CHUNK + 17] {
            let mut w: Vec<f64> = (0..n).map(|i| (i % 5) as f64 * 0.3 + 0.1).collect();
            for at in [0, n / 2, n - 1] {
                for &v in edge_values().iter().chain(&[0.7]) {
                    let keep = w[at];
                    w[at] = v;
                    let (facts, valid, some) = weight_facts(&w);
                    assert_eq!(facts.total.to_bits(), weight_total(&w).to_bits(), "n = {n}, {v:e} at {at}");
                    assert_eq!(facts.all_positive, w.iter().all(|&x| above_zero(x)), "n = {n}, {v:e} at {at}");
                    assert_eq!(valid, w.iter().all(|&x| nonnegative_finite(x)), "n = {n}, {v:e} at {at}");
                    assert_eq!(some, w.iter().any(|&x| above_zero(x)), "n = {n}, {v:e} at {at}");
                    w[at] = keep;
                }
            }
        }
        // All zeros: valid, none positive.
        let zeros = vec![0.0; 10];
        let (facts, valid, some) = weight_facts(&zeros);
        assert_eq!((facts.all_positive, valid, some), (false, true, false));
    }

    /// Each family's vectorised test finds the value the plain one does,
    /// at every position of a block and past blocks, short and long.
    #[test]
    fn first_invalid_is_the_plain_test() {
        for &v in &edge_values() {
            assert_eq!(positive_finite(v), v > 0.0 && v.is_finite(), "{v:e}");
            assert_eq!(finite_bits(v), v.is_finite(), "{v:e}");
            assert_eq!(above_zero(v), v > 0.0, "{v:e}");
            assert_eq!(nonnegative_finite(v), v >= 0.0 && v.is_finite(), "{v:e}");
        }
        let plain = |family: Family, x: &[f64]| x.iter().position(|&v| family.observation_problem(v).is_some());
        for family in Family::ALL {
            for &bad in &edge_values() {
                for (n, at) in [(1, 0), (7, 3), (256, 255), (257, 256), (1000, 513), (5 * SCAN_CHUNK, 3 * SCAN_CHUNK + 17)] {
                    let mut x = vec![2.0; n];
                    x[at] = bad;
                    assert_eq!(family.first_invalid(&x), plain(family, &x), "{family:?} {bad:e} at {at} of {n}");
                    assert_eq!(first_found(&x, |c| family.first_invalid(c)), plain(family, &x), "{family:?} {bad:e} at {at} of {n}");
                    // The one-pass test passes only data both checks pass.
                    let both = family.first_invalid(&x).is_none() && check_range(family, &x, 1).is_ok();
                    assert!(both || !all_chunks(&x, |c| family.valid_in_one_pass(c)), "{family:?} {bad:e} at {at} of {n}");
                    if family == Family::InvGauss {
                        assert_eq!(all_chunks(&x, |c| family.valid_in_one_pass(c)), both, "{bad:e} at {at} of {n}");
                    }
                }
            }
        }
        // The inverse Gaussian's range by bits is `contains`.
        let (lo, hi) = (super::super::IG_MIN, super::super::IG_MAX);
        for &v in &edge_values() {
            let x = [1.0, v];
            let by_bits = check_range(Family::InvGauss, &x, 1).is_err();
            assert_eq!(by_bits, !(lo..=hi).contains(&v), "{v:e}");
        }
    }

    /// Short vectors are summed in order, as a plain sum; long ones by
    /// chunks whose sums are added in order, the same bits on any number
    /// of threads (the checks and centres of one dataset must not depend
    /// on the machine).
    #[test]
    fn ordered_sums_do_not_depend_on_the_threads() {
        let short: Vec<f64> = (0..4 * SCAN_CHUNK).map(|i| 1.0 / (1.0 + i as f64)).collect();
        assert_eq!(ordered_sum(&short, |v| v).to_bits(), short.iter().sum::<f64>().to_bits());
        let long: Vec<f64> = (0..4 * SCAN_CHUNK + 12_345).map(|i| (1.0 + (i % 977) as f64).ln() * if i % 3 == 0 { -1e8 } else { 1.0 }).collect();
        let by_chunks = long.chunks(SCAN_CHUNK).map(|c| c.iter().map(|v| v * v).sum::<f64>()).fold(0.0, |a, b| a + b);
        for threads in [1, 2, 5] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            assert_eq!(pool.install(|| ordered_sum(&long, |v| v * v)).to_bits(), by_chunks.to_bits(), "{threads} threads");
        }
        // Cancellation shows the order: the plain sum differs from the chunked one.
        assert_ne!(long.iter().map(|v| v * v).sum::<f64>().to_bits(), by_chunks.to_bits());
    }

    #[test]
    fn first_bad_value_is_reported() {
        let err = validate(Family::InvGauss, &[1.0, 2.0, -3.0, 0.0], 7).unwrap_err();
        assert_eq!(
            err,
            Error::InvalidData { dataset: 7, position: 3, value: -3.0, problem: "inverse Gaussian data must be strictly positive".into() }
        );
        assert!(validate(Family::Normal, &[1.0, -2.0], 1).is_ok());
        assert!(validate(Family::Normal, &[1.0, f64::NAN], 1).is_err());
        assert!(validate(Family::Normal, &[f64::INFINITY], 1).is_err());
    }

    #[test]
    fn too_small_and_constant_datasets_are_unfittable() {
        assert!(unfittable_reason(Family::Normal, &[1.0, 2.0], 1).is_some());
        assert!(unfittable_reason(Family::Normal, &[1.0, 2.0, 3.0], 1).is_none());
        assert!(unfittable_reason(Family::Normal, &[1.0, 2.0, 3.0, 4.0], 2).is_some());
        assert!(unfittable_reason(Family::Normal, &[1.0, 2.0, 3.0, 4.0, 5.0], 2).is_none());
        assert!(unfittable_reason(Family::Normal, &[2.0; 50], 2).unwrap().contains("equal"));
    }
}
