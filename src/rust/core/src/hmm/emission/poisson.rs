//! Poisson emissions: state j emits counts with rate `rate_j` (0 allowed:
//! that state emits only zeros).
//!
//! log p_j(x) = x log rate_j - rate_j - log x!; the last term is the same for
//! every state, so the linear rows leave it out of the values and put it in
//! the shift. Statistics per state: sum gamma and sum gamma x; the M-step's
//! rate is their ratio (no floor is needed: the likelihood is bounded).

use crate::em::family::special::lgamma;
use crate::error::{Error, Result};
use crate::rng::KeyedStream;

use super::super::sequences::Sequences;
use super::{draw, moments, scale_logs, Emission, EmissionFit, MStep, Row, Rows, Space};

/// The largest count: every integer up to it is a double.
pub const MAX_COUNT: f64 = 9_007_199_254_740_992.0;

/// log x! (exactly 0 for 0 and 1, so a certain emission has probability 1).
fn log_factorial(x: f64) -> f64 {
    if x < 2.0 { 0.0 } else { lgamma(x + 1.0) }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Poisson {
    pub rate: Vec<f64>,
}

impl Poisson {
    /// Validate: one finite rate >= 0 per state.
    pub fn new(rate: Vec<f64>) -> Result<Self> {
        if rate.is_empty() {
            return Err(Error::arg("rate", "must have one value per state"));
        }
        if let Some(j) = rate.iter().position(|r| !(r.is_finite() && *r >= 0.0)) {
            return Err(Error::arg("rate", format!("must be finite and >= 0; state {} has {}", j + 1, rate[j])));
        }
        Ok(Poisson { rate })
    }
}

/// Per state: the rate and its log.
pub struct PoissonRows {
    space: Space,
    rate: Vec<f64>,
    log_rate: Vec<f64>,
}

impl Rows for PoissonRows {
    type Obs = f64;

    #[inline]
    fn row<'a>(&'a self, x: f64, buf: &'a mut [f64]) -> Row<'a> {
        for ((l, &r), &lr) in buf.iter_mut().zip(&self.rate).zip(&self.log_rate) {
            // x log 0 is 0 at x = 0 (not NaN): a zero rate emits zeros.
            *l = if x == 0.0 { -r } else { x * lr - r };
        }
        let log_factorial = log_factorial(x);
        match self.space {
            Space::Log => {
                buf.iter_mut().for_each(|l| *l -= log_factorial);
                Row { values: buf, shift: 0.0, min: 0.0 }
            }
            Space::Linear => scale_logs(buf, -log_factorial),
        }
    }

    fn normalised(&self) -> bool {
        true
    }

    fn smallest(&self) -> f64 {
        0.0
    }
}

impl Emission for Poisson {
    type Obs = f64;
    type Shape = ();
    type Rows = PoissonRows;
    const NAME: &'static str = "poisson";

    fn n_states(&self) -> usize {
        self.rate.len()
    }

    fn shape(&self) {}

    fn n_stats_of(_: &()) -> usize {
        2
    }

    fn free_parameters(&self) -> usize {
        self.rate.len()
    }

    fn check_obs(_: &(), x: f64) -> Option<String> {
        (!Self::obs_ok(&(), x)).then(|| format!("value {x}"))
    }

    fn obs_ok(_: &(), x: f64) -> bool {
        x >= 0.0 && x <= MAX_COUNT && x == x.floor()
    }

    fn obs_rule(_: &()) -> String {
        "observations must be counts (whole numbers >= 0)".into()
    }

    fn rows(&self, space: Space) -> Result<PoissonRows> {
        Ok(PoissonRows { space, rate: self.rate.clone(), log_rate: self.rate.iter().map(|r| r.ln()).collect() })
    }

    #[inline]
    fn add_stats(&self, x: f64, gamma: &[f64], stats: &mut [f64]) {
        let n = self.rate.len();
        let (s0, s1) = stats.split_at_mut(n);
        for j in 0..n {
            s0[j] += gamma[j];
            s1[j] += gamma[j] * x;
        }
    }

    fn m_step(&self, stats: &[f64], _: &EmissionFit) -> MStep<Self> {
        let n = self.rate.len();
        let mut next = self.clone();
        for j in 0..n {
            let w = stats[j];
            if w > 0.0 && w.is_finite() {
                next.rate[j] = stats[n + j] / w;
            }
        }
        MStep { emission: next, floored: vec![false; n] }
    }

    fn sample(&self, state: usize, rng: &mut KeyedStream) -> f64 {
        use rand_distr::{Distribution, Poisson as PoissonDist};
        let r = self.rate[state];
        if r == 0.0 {
            return 0.0;
        }
        PoissonDist::new(r).map(|d| d.sample(rng.rng())).unwrap_or(r.round())
    }

    fn cuda() -> String {
        format!("{}{}{CUDA}", crate::em::family::special::cuda_constants(), crate::em::family::special::CUDA)
    }

    /// rate, log rate.
    fn device_params(&self) -> Vec<f64> {
        self.rate.iter().copied().chain(self.rate.iter().map(|r| r.ln())).collect()
    }

    /// Rates drawn from the observations, plus a tenth of the mean count (so
    /// that a drawn zero still gives a positive rate).
    fn random(n: usize, _: &(), data: &Sequences<f64>, rng: &mut KeyedStream) -> Result<Self> {
        let (mean, _) = moments(data);
        let lift = 0.1 * mean.max(1e-3);
        Ok(Poisson { rate: (0..n).map(|_| draw(data, rng) + lift).collect() })
    }
}

/// The device block (kernels/hmm_emission.cu): ep = rate, log rate;
/// log x! as [`log_factorial`].
const CUDA: &str = r#"
#define HMM_STATS 2
__device__ __forceinline__ double hmm_emis_log(const double* ep, int N, int j, double x) {
    return x == 0.0 ? -ep[j] : x * ep[N + j] - ep[j];
}
__device__ __forceinline__ double hmm_emis_shared(double x) { return x < 2.0 ? 0.0 : -sp_lgamma(x + 1.0); }
__device__ __forceinline__ double hmm_emis_feature(int k, double x, int i, const double* ep) { return k == 0 ? 1.0 : x; }
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_rows_are_the_poisson_log_probabilities() {
        let p = Poisson::new(vec![0.0, 0.5, 12.0]).unwrap();
        let rows = p.rows(Space::Log).unwrap();
        let mut buf = [0.0; 3];
        for x in [0.0, 1.0, 7.0, 40.0] {
            let row = rows.row(x, &mut buf);
            for (j, &r) in p.rate.iter().enumerate() {
                let mut want = -r - log_factorial(x);
                if x > 0.0 {
                    want += x * r.ln();
                }
                assert!((row.values[j] - want).abs() < 1e-12 * want.abs().max(1.0) || (want == f64::NEG_INFINITY && row.values[j] == want), "{x} {j}");
            }
        }
    }
}
