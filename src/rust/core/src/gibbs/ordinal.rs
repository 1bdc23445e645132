//! The ordinal family's cut-points: P(y <= c) = logistic(theta_c - eta),
//! theta_1 = 0 < theta_2 < ... < theta_{C-1}.
//!
//! theta_1 is fixed because eta holds the groups' intercept, which moves
//! every cut-point at once; the draws report brms's cut-points (its
//! `Intercept[c]`), theta_c - mu_1, with the intercept's population mean
//! mu_1 taken out (`Layout::cut`). Each free theta_c is a slice update
//! within (theta_{c-1}, theta_{c+1}) under a N(0, gamma_sd^2) prior, its
//! log-likelihood summed over every row in parallel chunks (only rows in
//! categories c and c + 1 depend on it; a full pass keeps the code one
//! loop and costs as much as a global coefficient's update).

use super::model::{Family, HbData};
use super::random::{Block, Rng};
use super::slice::{slice_step, SliceSettings};
use super::sweep::{par_sum, State, SweepStats, Sweeper};

impl HbData {
    /// Cut-points that are sampled: C - 2 (theta_1 is fixed).
    pub fn free_cuts(&self) -> usize {
        self.categories.saturating_sub(2)
    }
}

impl Sweeper<'_> {
    /// Starting cut-points: 0, then steps of 1 + U(0, 1).
    pub(super) fn init_cuts(&self, rng: &mut Rng) -> Vec<f64> {
        if self.family != Family::Ordinal {
            return Vec::new();
        }
        let mut cuts = vec![0.0; self.data.categories - 1];
        for c in 1..cuts.len() {
            cuts[c] = cuts[c - 1] + 1.0 + rng.uniform();
        }
        cuts
    }

    /// Sweep coordinate of free cut-point theta_{j+2} (after sigma's).
    fn cut_coord(&self, j: usize) -> usize {
        let d = self.data;
        d.groups() * d.k + d.p + d.k + 1 + j
    }

    /// Each free cut-point in turn, as the module comment says.
    pub(super) fn update_cuts(&self, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats) {
        if self.family != Family::Ordinal {
            return;
        }
        let d = self.data;
        let mut rng = self.rng(sweep, Block::Sigma);
        let sd = self.prior.gamma_sd;
        let last = state.cuts.len();
        for c in 1..last {
            let t0 = state.cuts[c];
            let (lower, upper) = (state.cuts[c - 1], if c + 1 < last { state.cuts[c + 1] } else { f64::INFINITY });
            let mut cuts = state.cuts.clone();
            let eta = &state.eta;
            let mut logf = |t: f64| {
                cuts[c] = t;
                let aux = self.aux(state.sigma, &cuts);
                par_sum(d.n(), |r| super::rows::ordinal(&d.y[r.clone()], &eta[r], None, 0.0, aux.cuts)) - 0.5 * (t / sd).powi(2)
            };
            let idx = self.cut_coord(c - 1);
            let settings = SliceSettings { w: state.widths.w[idx], lower, upper, ..self.slice };
            let f0 = logf(t0);
            let step = slice_step(t0, f0, logf, &settings, &mut rng);
            stats.scale_evals += step.evals as u64 + 1;
            stats.stuck += step.stuck as u64;
            state.stuck[idx] += step.stuck as u64;
            state.cuts[c] = step.x;
            if adapting {
                state.widths.parts_mut().1[idx] += (step.x - t0).abs();
            }
        }
    }
}
