//! Univariate Gaussian emissions: state j emits N(mean_j, sd_j^2).
//!
//! Statistics per state, centred on the state's current mean m_j (so the
//! variance is not a difference of large sums): sum gamma, sum gamma (x -
//! m_j), sum gamma (x - m_j)^2. The M-step's variance is held at a floor
//! ([`EmissionFit::var_floor`], by default 1e-6 of the data's variance):
//! without it a state that collapses onto one observation has an unbounded
//! likelihood; the states held there are reported ([`MStep::floored`]).

use crate::error::{Error, Result};
use crate::rng::KeyedStream;

use super::super::sequences::Sequences;
use super::{draw, moments, scale_logs, Emission, EmissionFit, MStep, Row, Rows, Space};

const HALF_LOG_TWO_PI: f64 = 0.918_938_533_204_672_8;

/// The default variance floor, relative to the data's variance.
pub const VAR_FLOOR_REL: f64 = 1e-6;

#[derive(Debug, Clone, PartialEq)]
pub struct Gaussian {
    pub mean: Vec<f64>,
    pub sd: Vec<f64>,
}

impl Gaussian {
    /// Validate: one finite mean and one finite positive sd per state.
    pub fn new(mean: Vec<f64>, sd: Vec<f64>) -> Result<Self> {
        if mean.is_empty() {
            return Err(Error::arg("mean", "must have one value per state"));
        }
        if sd.len() != mean.len() {
            return Err(Error::arg("sd", format!("must have one value per state ({}), not {}", mean.len(), sd.len())));
        }
        if let Some(j) = mean.iter().position(|m| !m.is_finite()) {
            return Err(Error::arg("mean", format!("must be finite; state {} has {}", j + 1, mean[j])));
        }
        if let Some(j) = sd.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(Error::arg("sd", format!("must be finite and > 0; state {} has {}", j + 1, sd[j])));
        }
        Ok(Gaussian { mean, sd })
    }
}

/// Per state: the mean, 1 / (2 sd^2) and -log sd.
pub struct GaussianRows {
    space: Space,
    mean: Vec<f64>,
    half_precision: Vec<f64>,
    log_norm: Vec<f64>,
}

impl Rows for GaussianRows {
    type Obs = f64;

    #[inline]
    fn row<'a>(&'a self, x: f64, buf: &'a mut [f64]) -> Row<'a> {
        for (((l, &m), &h), &c) in buf.iter_mut().zip(&self.mean).zip(&self.half_precision).zip(&self.log_norm) {
            let d = x - m;
            *l = c - d * d * h;
        }
        match self.space {
            Space::Log => {
                buf.iter_mut().for_each(|l| *l -= HALF_LOG_TWO_PI);
                Row { values: buf, shift: 0.0, min: 0.0 }
            }
            Space::Linear => scale_logs(buf, -HALF_LOG_TWO_PI),
        }
    }

    fn normalised(&self) -> bool {
        true
    }

    fn smallest(&self) -> f64 {
        0.0
    }
}

impl Emission for Gaussian {
    type Obs = f64;
    type Shape = ();
    type Rows = GaussianRows;
    const NAME: &'static str = "gaussian";

    fn n_states(&self) -> usize {
        self.mean.len()
    }

    fn shape(&self) {}

    fn n_stats_of(_: &()) -> usize {
        3
    }

    fn free_parameters(&self) -> usize {
        2 * self.mean.len()
    }

    fn check_obs(_: &(), x: f64) -> Option<String> {
        (!x.is_finite()).then(|| format!("value {x}"))
    }

    fn obs_ok(_: &(), x: f64) -> bool {
        x.is_finite()
    }

    fn obs_rule(_: &()) -> String {
        "observations must be finite numbers".into()
    }

    fn rows(&self, space: Space) -> Result<GaussianRows> {
        Ok(GaussianRows {
            space,
            mean: self.mean.clone(),
            half_precision: self.sd.iter().map(|s| 0.5 / (s * s)).collect(),
            log_norm: self.sd.iter().map(|s| -s.ln()).collect(),
        })
    }

    #[inline]
    fn add_stats(&self, x: f64, gamma: &[f64], stats: &mut [f64]) {
        let n = self.mean.len();
        let (s0, rest) = stats.split_at_mut(n);
        let (s1, s2) = rest.split_at_mut(n);
        for j in 0..n {
            let (g, d) = (gamma[j], x - self.mean[j]);
            s0[j] += g;
            s1[j] += g * d;
            s2[j] += g * d * d;
        }
    }

    fn m_step(&self, stats: &[f64], fit: &EmissionFit) -> MStep<Self> {
        let n = self.mean.len();
        let mut next = self.clone();
        let mut floored = vec![false; n];
        for j in 0..n {
            let (w, s1, s2) = (stats[j], stats[n + j], stats[2 * n + j]);
            if !(w > 0.0 && w.is_finite()) {
                continue;
            }
            let shift = s1 / w;
            let var = (s2 / w - shift * shift).max(0.0);
            next.mean[j] = self.mean[j] + shift;
            if var <= fit.var_floor {
                floored[j] = true;
                next.sd[j] = fit.var_floor.sqrt();
            } else {
                next.sd[j] = var.sqrt();
            }
        }
        MStep { emission: next, floored }
    }

    fn resolve(fit: &mut EmissionFit, data: &Sequences<f64>) {
        if fit.var_floor.is_nan() {
            let (mean, var) = moments(data);
            fit.var_floor = VAR_FLOOR_REL * if var > 0.0 { var } else { mean.abs().max(1.0).powi(2) };
        }
    }

    fn sample(&self, state: usize, rng: &mut KeyedStream) -> f64 {
        // Box-Muller from two uniforms; 1 - u is in (0, 1], so the log is finite.
        let (u1, u2) = (1.0 - rng.uniform(), rng.uniform());
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        self.mean[state] + self.sd[state] * z
    }

    fn cuda() -> String {
        CUDA.to_string()
    }

    /// mean, 1 / (2 sd^2), -log sd (as [`GaussianRows`]).
    fn device_params(&self) -> Vec<f64> {
        let r = self.rows(Space::Log).expect("no allocation that can fail");
        [r.mean, r.half_precision, r.log_norm].concat()
    }

    /// Means drawn from the observations, every sd the data's.
    fn random(n: usize, _: &(), data: &Sequences<f64>, rng: &mut KeyedStream) -> Result<Self> {
        let (_, var) = moments(data);
        let sd = if var > 0.0 { var.sqrt() } else { 1.0 };
        Ok(Gaussian { mean: (0..n).map(|_| draw(data, rng)).collect(), sd: vec![sd; n] })
    }
}

/// The device block (kernels/hmm_emission.cu): ep = mean, 1 / (2 sd^2),
/// -log sd; statistics centred on the state's mean, as [`Gaussian::add_stats`].
const CUDA: &str = r#"
#define HMM_STATS 3
__device__ __forceinline__ double hmm_emis_log(const double* ep, int N, int j, double x) {
    const double d = x - ep[j];
    return ep[2 * N + j] - d * d * ep[N + j];
}
__device__ __forceinline__ double hmm_emis_shared(double x) { return -0.91893853320467274178; }
__device__ __forceinline__ double hmm_emis_feature(int k, double x, int i, const double* ep) {
    const double d = x - ep[i];
    return k == 0 ? 1.0 : (k == 1 ? d : d * d);
}
"#;
