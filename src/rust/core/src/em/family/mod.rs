//! The component families. Each is one definition, a [`FamilyDef`] in its
//! own file with its CUDA block beside it; [`Family`] names them, and
//! `Family::def` below is the only table that lists them.
//!
//! Every family's weighted component log-density is linear in two features
//! of the observation, log(alpha f(x)) = a + b*u + c*v + k(x), so one E-step
//! (CPU and GPU) serves all of them, and the M-step needs only the sums of
//! w, w*u and w*v. The features are chosen so that these sums stay accurate
//! (centred or scaled by a dataset-wide `centre`).

mod exponential;
mod gamma;
mod incgamma;
mod invgauss;
mod lognormal;
mod normal;
mod poisson;
pub(crate) mod special;

use rand_chacha::ChaCha8Rng;

use crate::error::Result;
use crate::tolerances::MIN_COMPONENT_WEIGHT;

pub use invgauss::{IG_MAX, IG_MIN};
pub use normal::{NORMAL_MAX_SUM_SQUARES, NORMAL_MIN_MEAN_SQUARE};

/// Component distribution of a mixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Inverse Gaussian: mean `mu`, shape `lambda`.
    InvGauss,
    /// Normal: mean `mu`, standard deviation `sigma`.
    Normal,
    /// Gamma: `shape`, `rate`.
    Gamma,
    /// Lognormal: `meanlog`, `sdlog` (the Normal on log x).
    LogNormal,
    /// Poisson counts: rate `lambda`.
    Poisson,
    /// Exponential: `rate`.
    Exponential,
}

/// What R and messages call a family and its parameters.
#[derive(Debug)]
pub struct FamilyInfo {
    /// `family =` in R.
    pub name: &'static str,
    /// For messages and labels: "inverse Gaussian".
    pub label: &'static str,
    /// R names of the component parameters: the first (`MixParams::mu`)
    /// and, for two-parameter families, the second (`MixParams::scale`).
    pub first: &'static str,
    pub second: Option<&'static str>,
    /// Why an M-step failed when a component collapsed.
    pub collapse: &'static str,
    /// Counts: the density is a probability mass.
    pub discrete: bool,
}

/// Natural parameters of one weighted component: log(alpha * f(x)) = a + b*u + c*v + k(x).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Natural {
    pub a: f64,
    pub b: f64,
    pub c: f64,
}

/// Why an M-step could not give valid parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MStepFailure {
    /// The component's total weight vanished.
    Empty,
    /// The component sits on (nearly) a single value.
    Collapsed,
}

/// Why an M-step failed when a component's total weight vanished.
pub const EMPTY_COMPONENT: &str = "a component lost all its observations";

/// One family's maths. `first` and `second` are the component parameters
/// in `FamilyInfo`'s order (`second` is NaN for one-parameter families).
pub(crate) trait FamilyDef: Sync {
    fn info(&self) -> &'static FamilyInfo;
    /// Why `x` cannot be an observation (beyond being finite), if it cannot.
    fn observation_problem(&self, x: f64) -> Option<&'static str>;
    /// The position of the first value of `x` that is no observation (not
    /// finite, or `observation_problem`), one call per slice so that the
    /// test runs in a loop of its own; families whose test is a range of
    /// bits override it with one that vectorises (`data::position_blocked`).
    fn first_invalid(&self, x: &[f64]) -> Option<usize> {
        crate::em::data::position_blocked(x, |v| !v.is_finite() || self.observation_problem(v).is_some())
    }
    /// Data the sufficient statistics cannot represent (an input error).
    fn check_range(&self, _x: &[f64], _dataset: usize) -> Result<()> {
        Ok(())
    }
    /// True when one pass over `x` shows that `first_invalid` finds nothing
    /// and `check_range` passes (for a family whose range is a range of
    /// values); false sends `data::validate` to those two, which name the
    /// problem. Valid data, the usual case, then cost one read, not two.
    fn valid_in_one_pass(&self, _x: &[f64]) -> bool {
        false
    }
    /// Dataset-wide constant the features are taken relative to.
    fn centre(&self, _x: &[f64]) -> f64 {
        0.0
    }
    fn features(&self, x: f64, centre: f64) -> (f64, f64);
    /// The part k(x) of the log-density that no component changes.
    fn shared_term(&self, _x: f64) -> f64 {
        0.0
    }
    /// Natural parameters, without log(alpha).
    fn natural(&self, first: f64, second: f64, centre: f64) -> Natural;
    /// The component's parameters from its sums (sw > 0); `previous` are
    /// its current parameters (NaN when there are none), where an iterative
    /// M-step may start.
    fn m_step(&self, sw: f64, su: f64, sv: f64, centre: f64, previous: (f64, f64)) -> std::result::Result<(f64, f64), MStepFailure>;
    /// The first parameter that maximises a component's expected
    /// log-likelihood (sums sw, su, sv) with its second held at `second`
    /// (constraints); by default the unconstrained update's, right for the
    /// families whose first update does not depend on the second.
    fn first_given_second(&self, sw: f64, su: f64, sv: f64, centre: f64, second: f64, previous_first: f64) -> std::result::Result<f64, MStepFailure> {
        self.m_step(sw, su, sv, centre, (previous_first, second)).map(|p| p.0)
    }
    /// The one second parameter that maximises the expected log-likelihood
    /// of the components with sums `sums` and first parameters `firsts`:
    /// one component's with its first held, or the second that all share.
    /// NaN for one-parameter families.
    fn second_given_first(&self, _sums: &[[f64; 3]], _firsts: &[f64], _centre: f64) -> std::result::Result<f64, MStepFailure> {
        Ok(f64::NAN)
    }
    /// The upper tail at `c` of a component (censored data): P(X > c),
    /// E[u; X > c] and E[v; X > c] with (u, v) the features, computed
    /// without cancellation in the upper tail; c = -inf (or below the
    /// support) gives (1, E u, E v). None where the family has no closed
    /// form (censored data are then refused).
    fn upper_tail(&self, _c: f64, _first: f64, _second: f64, _centre: f64) -> Option<[f64; 3]> {
        None
    }
    /// The lower tail at `c`: P(X <= c), E[u; X <= c] and E[v; X <= c],
    /// without cancellation in the lower tail (where 1 - P(X > c) keeps no
    /// digits); 0 below the support. Families with `upper_tail` have it.
    fn lower_tail(&self, _c: f64, _first: f64, _second: f64, _centre: f64) -> Option<[f64; 3]> {
        None
    }
    /// Whether the tails iterate (a series or continued fraction, as the
    /// incomplete gamma function's): on the GPU the last warp of a block
    /// then computes the tails of a dataset with few intervals for the
    /// others (kernels/em.cu, pool_tails), so that block takes one pair
    /// fewer (em::gpu::warp::prepare_warp).
    fn tails_iterate(&self) -> bool {
        false
    }
    /// Log-density (log-probability for counts) in its textbook form:
    /// the reference for tests and for predictions on new data.
    fn log_density(&self, x: f64, first: f64, second: f64) -> f64;
    /// Maximum-likelihood parameters of a few observations (random starts);
    /// `None` when they do not determine valid parameters.
    fn ml_estimate(&self, xs: &[f64]) -> Option<(f64, f64)>;
    /// The scale on which k-means++ measures distances between observations.
    fn seed_coordinate(&self, x: f64) -> f64 {
        x
    }
    /// A k-means++ component: its mean at the observation `seed`, its other
    /// parameter from the whole sample's ML estimate `whole`.
    fn seeded(&self, seed: f64, whole: (f64, f64)) -> (f64, f64);
    /// Why these are not valid component parameters, if they are not.
    fn check_component(&self, first: f64, second: f64) -> std::result::Result<(), String>;
    /// One draw (simulation for tests and benchmarks).
    fn sample(&self, first: f64, second: f64, rng: &mut ChaCha8Rng) -> Option<f64>;
    /// The family's CUDA block: fam_features, fam_shared_term, fam_natural
    /// and fam_m_step, the device versions of the functions above.
    fn cuda(&self) -> &'static [&'static str];
}

impl Family {
    pub const ALL: [Family; 6] =
        [Family::InvGauss, Family::Normal, Family::Gamma, Family::LogNormal, Family::Poisson, Family::Exponential];

    /// The table of families.
    pub(crate) fn def(self) -> &'static dyn FamilyDef {
        match self {
            Family::InvGauss => &invgauss::InvGauss,
            Family::Normal => &normal::Normal,
            Family::Gamma => &gamma::Gamma,
            Family::LogNormal => &lognormal::LogNormal,
            Family::Poisson => &poisson::Poisson,
            Family::Exponential => &exponential::Exponential,
        }
    }

    pub fn info(self) -> &'static FamilyInfo {
        self.def().info()
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn parse(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Component parameters besides the weight: 2, or 1 for Poisson and exponential.
    pub fn component_parameters(self) -> usize {
        1 + self.info().second.is_some() as usize
    }

    /// Free parameters of an M-component mixture (for df and the minimum n).
    pub fn parameters(self, components: usize) -> usize {
        (1 + self.component_parameters()) * components - 1
    }

    /// Observations drawn per component for a random start (p + 1 with p = 2).
    pub const START_SUBSET: usize = 3;

    /// Why `x` cannot be an observation of this family, if it cannot.
    pub fn observation_problem(self, x: f64) -> Option<&'static str> {
        if !x.is_finite() {
            return Some("values must be finite (no NA, NaN or Inf)");
        }
        self.def().observation_problem(x)
    }

    /// The position of the first value of `x` that is no observation of
    /// this family ([`Family::observation_problem`]).
    pub fn first_invalid(self, x: &[f64]) -> Option<usize> {
        self.def().first_invalid(x)
    }

    pub fn check_range(self, x: &[f64], dataset: usize) -> Result<()> {
        self.def().check_range(x, dataset)
    }

    pub(crate) fn valid_in_one_pass(self, x: &[f64]) -> bool {
        self.def().valid_in_one_pass(x)
    }

    /// Centre the features are taken relative to.
    pub fn centre(self, x: &[f64]) -> f64 {
        self.def().centre(x)
    }

    /// The features (u, v) of one observation.
    pub fn features(self, x: f64, centre: f64) -> (f64, f64) {
        self.def().features(x, centre)
    }

    /// The part k(x) of the log-density shared by all components.
    pub fn shared_term(self, x: f64) -> f64 {
        self.def().shared_term(x)
    }

    /// Natural parameters of a component with weight `alpha`.
    pub fn natural(self, alpha: f64, first: f64, second: f64, centre: f64) -> Natural {
        let n = self.def().natural(first, second, centre);
        Natural { a: alpha.ln() + n.a, ..n }
    }

    /// Exact M-step of one component from its weighted sums over
    /// observations of total weight `total` (n when unweighted):
    /// `(alpha, first, second)`, or why it cannot continue.
    /// `previous`: the component's current (first, second), or NaN.
    pub fn m_step(self, sw: f64, su: f64, sv: f64, total: f64, centre: f64, previous: (f64, f64)) -> std::result::Result<(f64, f64, f64), MStepFailure> {
        if !(sw > MIN_COMPONENT_WEIGHT) {
            return Err(MStepFailure::Empty);
        }
        let (first, second) = self.def().m_step(sw, su, sv, centre, previous)?;
        Ok((sw / total, first, second))
    }

    /// See [`FamilyDef::upper_tail`] (censored data).
    pub fn upper_tail(self, c: f64, first: f64, second: f64, centre: f64) -> Option<[f64; 3]> {
        if c == f64::INFINITY {
            return Some([0.0; 3]);
        }
        self.def().upper_tail(c, first, second, centre)
    }

    /// See [`FamilyDef::lower_tail`] (censored data); c = inf gives the
    /// whole distribution.
    pub fn lower_tail(self, c: f64, first: f64, second: f64, centre: f64) -> Option<[f64; 3]> {
        match c {
            f64::INFINITY => self.def().upper_tail(f64::NEG_INFINITY, first, second, centre),
            f64::NEG_INFINITY => Some([0.0; 3]),
            _ => self.def().lower_tail(c, first, second, centre),
        }
    }

    /// Whether censored observations can be fitted (the family has
    /// [`FamilyDef::upper_tail`]).
    pub fn censorable(self) -> bool {
        self.def().upper_tail(f64::NEG_INFINITY, 1.0, 1.0, 0.0).is_some()
    }

    /// See [`FamilyDef::tails_iterate`].
    pub(crate) fn tails_iterate(self) -> bool {
        self.def().tails_iterate()
    }

    /// See [`FamilyDef::first_given_second`] (constraints).
    pub fn first_given_second(self, sw: f64, su: f64, sv: f64, centre: f64, second: f64, previous_first: f64) -> std::result::Result<f64, MStepFailure> {
        self.def().first_given_second(sw, su, sv, centre, second, previous_first)
    }

    /// See [`FamilyDef::second_given_first`] (constraints).
    pub fn second_given_first(self, sums: &[[f64; 3]], firsts: &[f64], centre: f64) -> std::result::Result<f64, MStepFailure> {
        self.def().second_given_first(sums, firsts, centre)
    }

    /// Why a component of this family collapsed in an M-step.
    pub fn collapse_text(self) -> &'static str {
        self.info().collapse
    }

    /// Log-density of one component (textbook form).
    pub fn log_density(self, x: f64, first: f64, second: f64) -> f64 {
        self.def().log_density(x, first, second)
    }

    /// Maximum-likelihood `(first, second)` of a few observations.
    pub fn ml_estimate(self, xs: &[f64]) -> Option<(f64, f64)> {
        self.def().ml_estimate(xs)
    }

    pub fn seed_coordinate(self, x: f64) -> f64 {
        self.def().seed_coordinate(x)
    }

    pub fn seeded(self, seed: f64, whole: (f64, f64)) -> (f64, f64) {
        self.def().seeded(seed, whole)
    }

    pub fn check_component(self, first: f64, second: f64) -> std::result::Result<(), String> {
        self.def().check_component(first, second)
    }

    pub fn sample(self, first: f64, second: f64, rng: &mut ChaCha8Rng) -> Option<f64> {
        self.def().sample(first, second, rng)
    }

    /// The CUDA block of this family, prepended to kernels/em.cu (after
    /// the special functions' constants, which some blocks use).
    pub fn cuda_source(self) -> String {
        special::cuda_constants() + &incgamma::cuda_constants() + &self.def().cuda().concat()
    }
}

/// "must be positive and finite" checks shared by several families.
pub(crate) fn positive(name: &str, v: f64) -> std::result::Result<(), String> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(format!("{name} must be positive and finite"))
    }
}

/// Mean of log x (for families on positive data).
pub(crate) fn mean_log(x: &[f64]) -> f64 {
    crate::em::data::ordered_sum(x, f64::ln) / x.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters of each family for the tests: (first, second), data points.
    fn cases() -> Vec<(Family, f64, f64, Vec<f64>)> {
        vec![
            (Family::InvGauss, 1.3, 2.5, vec![0.05, 0.9, 3.0, 40.0]),
            (Family::Normal, -1.0, 0.4, vec![-3.0, -1.0, 0.0, 5.5]),
            (Family::Gamma, 2.5, 0.7, vec![0.01, 0.9, 3.0, 40.0]),
            (Family::LogNormal, 0.3, 1.2, vec![0.01, 0.9, 3.0, 40.0]),
            (Family::Poisson, 3.7, f64::NAN, vec![0.0, 1.0, 4.0, 17.0]),
            (Family::Exponential, 0.6, f64::NAN, vec![0.0, 0.3, 2.0, 30.0]),
        ]
    }

    #[test]
    fn every_family_is_in_the_table_once() {
        for f in Family::ALL {
            assert_eq!(Family::parse(f.name()), Some(f));
            assert!(!f.cuda_source().is_empty());
        }
        assert_eq!(Family::parse("binomial"), None);
    }

    #[test]
    fn natural_form_equals_textbook_density() {
        for (fam, first, second, xs) in cases() {
            let centre = fam.centre(&xs);
            let nat = fam.natural(0.3, first, second, centre);
            for x in xs {
                let (u, v) = fam.features(x, centre);
                let got = nat.a + nat.b * u + nat.c * v + fam.shared_term(x);
                let want = 0.3f64.ln() + fam.log_density(x, first, second);
                assert!((got - want).abs() < 1e-12 * (1.0 + want.abs()), "{fam:?} x={x}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn textbook_densities_match_statrs() {
        use statrs::distribution::{Continuous, Discrete, Exp, Gamma as G, LogNormal as L, Normal as N, Poisson as P};
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12 * (1.0 + b.abs());
        for x in [0.2, 1.0, 3.5, 12.0] {
            assert!(close(Family::Gamma.log_density(x, 2.5, 0.7), G::new(2.5, 0.7).unwrap().ln_pdf(x)));
            assert!(close(Family::LogNormal.log_density(x, 0.3, 1.2), L::new(0.3, 1.2).unwrap().ln_pdf(x)));
            assert!(close(Family::Normal.log_density(x, -1.0, 0.4), N::new(-1.0, 0.4).unwrap().ln_pdf(x)));
            assert!(close(Family::Exponential.log_density(x, 0.6, f64::NAN), Exp::new(0.6).unwrap().ln_pdf(x)));
        }
        for k in [0u64, 1, 4, 17, 250] {
            assert!(close(Family::Poisson.log_density(k as f64, 3.7, f64::NAN), P::new(3.7).unwrap().ln_pmf(k)));
        }
    }

    /// The M-step from unit weights is the ML estimate, and both maximise
    /// the log-likelihood: nudging a parameter lowers it.
    #[test]
    fn m_step_is_the_maximum_likelihood_estimate() {
        let data: [f64; 8] = [0.3, 0.9, 1.4, 2.0, 2.2, 3.7, 5.0, 8.5];
        for fam in Family::ALL {
            let xs: Vec<f64> = if fam.info().discrete { data.iter().map(|v| v.round()).collect() } else { data.to_vec() };
            let centre = fam.centre(&xs);
            let (mut sw, mut su, mut sv) = (0.0, 0.0, 0.0);
            for &x in &xs {
                let (u, v) = fam.features(x, centre);
                sw += 1.0;
                su += u;
                sv += v;
            }
            let (alpha, p1, p2) = fam.m_step(sw, su, sv, xs.len() as f64, centre, (f64::NAN, f64::NAN)).unwrap();
            assert_eq!(alpha, 1.0);
            let (m1, m2) = fam.ml_estimate(&xs).unwrap();
            assert!((m1 - p1).abs() < 1e-12 * p1.abs().max(1.0), "{fam:?}: {m1} vs {p1}");
            assert!(p2.is_nan() && m2.is_nan() || (m2 - p2).abs() < 1e-12 * p2.abs(), "{fam:?}: {m2} vs {p2}");
            let ll = |a: f64, b: f64| xs.iter().map(|&x| fam.log_density(x, a, b)).sum::<f64>();
            let best = ll(p1, p2);
            for f in [0.999, 1.001] {
                assert!(ll(p1 * f, p2) < best, "{fam:?} first x {f}");
                if !p2.is_nan() {
                    assert!(ll(p1, p2 * f) < best, "{fam:?} second x {f}");
                }
            }
        }
    }
}
