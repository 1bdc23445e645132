//! Grouping factors besides the first, crossed with it or nested in it:
//! the `(1 | week)` of `y ~ x + (1 + x | store) + (1 | week)`.
//!
//! ```text
//! eta_i = x_i' beta_g(i) + z_i' gamma + sum_f w_fi' u_f,l(i)
//! u_fl ~ N(0, diag(sd_f^2)),  l = 1..L_f     (`(1 + x || h)`)
//! u_fl ~ N(0, Sigma_f)                       (`(1 + x | h)`: correlated)
//! ```
//! Sigma_f ~ inverse-Wishart is drawn whole, conjugately, as the groups'
//! Sigma is (`Prior::factor_cov`); sd_fj = sqrt(Sigma_f,jj).
//! The first factor's groups carry the population means (mu) and own
//! contiguous rows (the data are sorted by them); another factor's effects
//! are deviations with mean zero, and its levels own rows scattered through
//! the data. Each level is updated as a group is (coordinate-wise slice
//! updates with the linear predictor cached), its rows gathered first; the
//! levels are conditionally independent given the rest, so they run in
//! parallel, and eta is moved afterwards, row by row.
//!
//! A term of the factor whose column is also a column of the groups' (the
//! shared intercept of `(1 | g) + (1 | h)`) or of the global coefficients
//! leaves the likelihood unchanged when every level's effect falls by c
//! and that coefficient rises by c: the data cannot tell them apart, only
//! the priors can, and coordinate-wise updates crawl along that direction
//! (R-hat 1.12 after 1,000 sweeps on 40 x 25 crossed levels). Each sweep
//! therefore also draws c exactly from its conditional, a Gaussian (a
//! translation move, Liu and Sabatti 2000).

use rayon::prelude::*;

use super::covariance;
use super::model::{HbData, MAX_ABS_VALUE, SCALE_MAX};
use super::random::Block;
use super::slice::SliceSettings;
use super::sweep::{par_sum, BlockRows, CoefPrior, State, SweepStats, Sweeper, MIN_GROUPS_PER_TASK, SPLIT_GROUP_ROWS};
use crate::error::{Error, Result};
use crate::exec::Monitor;

/// One more grouping factor: its levels and the columns (terms) whose
/// coefficients vary by level.
#[derive(Debug, Clone)]
pub struct Factor {
    pub levels: usize,
    /// Terms that vary by level.
    pub k: usize,
    /// The level of each row (rows in the data's order).
    pub level: Vec<u32>,
    /// n x k, row-major, rows in the data's order.
    pub w: Vec<f64>,
    /// L + 1 offsets into `by_level`: level l owns rows
    /// by_level[start[l]..start[l + 1]].
    pub start: Vec<usize>,
    /// Row indices sorted by level (in data order within a level).
    pub by_level: Vec<usize>,
    /// The columns gathered by level, each level's block column-major (as
    /// `HbData::xcol`): coefficient j of level l reads a contiguous run.
    pub wcol: Vec<f64>,
    /// Per term: the coefficient with the same column, if any.
    pub partner: Vec<Option<Partner>>,
    /// The terms are correlated: u_l ~ N(0, Sigma) with a full Sigma.
    pub correlated: bool,
}

/// A coefficient whose column equals one of a factor's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partner {
    /// Column k of the groups' coefficients (beta_gk and mu_k move).
    Groups(usize),
    /// Global coefficient j.
    Global(usize),
}

impl Factor {
    /// A factor from each row's level (0-based, below `levels`) and its
    /// columns (n x k, row-major). Every level must own a row.
    pub fn new(level: &[usize], levels: usize, w: Vec<f64>, k: usize) -> Result<Factor> {
        let n = level.len();
        if k == 0 {
            return Err(Error::arg("formula", "a grouping factor must have at least one varying term"));
        }
        if w.len() != n * k {
            return Err(Error::arg("formula", format!("a grouping factor's terms must have {n} x {k} values, not {}", w.len())));
        }
        if levels > u32::MAX as usize {
            return Err(Error::arg("formula", format!("a grouping factor may have at most {} levels", u32::MAX)));
        }
        if let Some(i) = level.iter().position(|&l| l >= levels) {
            return Err(Error::arg("formula", format!("row {} has level {} of a grouping factor with {levels} levels", i + 1, level[i] + 1)));
        }
        if let Some(i) = w.iter().position(|v| !v.is_finite() || v.abs() > MAX_ABS_VALUE) {
            return Err(Error::arg("formula", format!("a grouping factor's term has value {} (element {}): values must be finite and at most {MAX_ABS_VALUE:e} in magnitude", w[i], i + 1)));
        }
        let mut start = vec![0usize; levels + 1];
        for &l in level {
            start[l + 1] += 1;
        }
        if let Some(l) = (0..levels).find(|&l| start[l + 1] == 0) {
            return Err(Error::arg("formula", format!("level {} of a grouping factor has no observations", l + 1)));
        }
        for l in 0..levels {
            start[l + 1] += start[l];
        }
        let mut fill = start.clone();
        let mut by_level = vec![0usize; n];
        for (i, &l) in level.iter().enumerate() {
            by_level[fill[l]] = i;
            fill[l] += 1;
        }
        let mut wcol = vec![0.0; n * k];
        for l in 0..levels {
            let (r0, nl) = (start[l], start[l + 1] - start[l]);
            for (r, &i) in by_level[r0..r0 + nl].iter().enumerate() {
                for j in 0..k {
                    wcol[k * r0 + j * nl + r] = w[i * k + j];
                }
            }
        }
        Ok(Factor { levels, k, level: level.iter().map(|&l| l as u32).collect(), w, start, by_level, wcol, partner: vec![None; k], correlated: false })
    }

    /// Parameters drawn: L x k effects, level-major, the k sds, then (when
    /// correlated) the k (k - 1) / 2 correlations.
    pub fn n_params(&self) -> usize {
        self.levels * self.k + self.k + self.n_cor()
    }

    /// Correlations drawn: pairs (0,1), (0,2), ..., (1,2), ... when
    /// correlated.
    pub fn n_cor(&self) -> usize {
        if self.correlated { self.k * (self.k - 1) / 2 } else { 0 }
    }

    /// sum_j w_ij u_l(i)j: this factor's term of row i's linear predictor.
    #[inline]
    pub fn eta_of(&self, i: usize, u: &[f64]) -> f64 {
        let (k, l) = (self.k, self.level[i] as usize);
        self.w[i * k..(i + 1) * k].iter().zip(&u[l * k..(l + 1) * k]).map(|(a, b)| a * b).sum()
    }
}

impl Sweeper<'_> {
    /// First sweep coordinate (as the state's widths) of factor f's
    /// effects; its sds follow them.
    pub(super) fn factor_coord(&self, f: usize) -> usize {
        let d = self.data;
        d.groups() * d.k + d.p + d.k + 1 + d.free_cuts() + d.factors[..f].iter().map(Factor::n_params).sum::<usize>()
    }

    /// Every factor in turn: its effects, its sds, the exact shift against
    /// partner columns, then the sds' non-centred updates.
    pub(super) fn update_factors(&self, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats, monitor: &Monitor) -> Result<()> {
        for f in 0..self.data.factors.len() {
            self.update_levels(f, state, sweep, adapting, stats, monitor);
            monitor.check()?;
            self.update_factor_sd(f, state, sweep, adapting, stats);
            self.shift_factor(f, state, sweep);
            self.interweave_factor(f, state, sweep, stats, monitor)?;
        }
        Ok(())
    }

    /// Block-parallel over levels: each gathers its rows' responses and
    /// linear predictors and updates its effects as a group's coefficients
    /// are updated; then every row's eta moves by its level's change.
    fn update_levels(&self, f: usize, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats, monitor: &Monitor) {
        let d = self.data;
        let fac = &d.factors[f];
        let k = fac.k;
        let cuts = state.cuts.clone();
        let aux = self.aux(state.sigma, &cuts);
        let c0 = self.factor_coord(f);
        let before = state.u[f].clone();
        let sd = &state.sd[f];
        let prec = &state.factor_prec[f];
        let zero = vec![0.0; k];
        let prior = |j: usize, u: &[f64]| {
            if fac.correlated {
                let (centre, q) = covariance::conditional_prior(u, &zero, prec, j);
                CoefPrior::Precision(centre, q)
            } else {
                CoefPrior::Normal(0.0, sd[j])
            }
        };
        let eta = &state.eta;
        let (w_all, moved_all) = state.widths.parts_mut();
        let coords = c0..c0 + fac.levels * k;
        let (evals, stuck) = state.u[f]
            .par_chunks_mut(k)
            .zip(w_all[coords.clone()].par_chunks(k))
            .zip(moved_all[coords.clone()].par_chunks_mut(k))
            .zip(state.stuck[coords].par_chunks_mut(k))
            .enumerate()
            .with_min_len(MIN_GROUPS_PER_TASK)
            .map(|(l, (((u, w), moved), stuck_by))| {
                if monitor.is_cancelled() {
                    return (0, 0);
                }
                let rows = &fac.by_level[fac.start[l]..fac.start[l + 1]];
                let y: Vec<f64> = rows.iter().map(|&i| d.y[i]).collect();
                let trials: Option<Vec<f64>> = (!d.trials.is_empty()).then(|| rows.iter().map(|&i| d.trials[i]).collect());
                let mut e: Vec<f64> = rows.iter().map(|&i| eta[i]).collect();
                let block = BlockRows { y: &y, trials: trials.as_deref(), xcol: &fac.wcol[k * fac.start[l]..k * fac.start[l + 1]], split: self.balance && rows.len() >= SPLIT_GROUP_ROWS };
                let mut rng = self.rng(sweep, Block::Level(f, l));
                self.slice_block(&block, &mut e, u, prior, w, moved, stuck_by, adapting, aux, &mut rng, monitor)
            })
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        stats.beta_evals += evals;
        stats.stuck += stuck;
        let (u, eta) = (&state.u[f], &mut state.eta);
        eta.par_iter_mut().enumerate().with_min_len(4096).for_each(|(i, e)| {
            let l = fac.level[i] as usize;
            let wr = &fac.w[i * k..(i + 1) * k];
            *e += (0..k).map(|j| wr[j] * (u[l * k + j] - before[l * k + j])).sum::<f64>();
        });
    }

    /// sd_fj on the log scale, as tau_k with mean zero: log p(s) = log
    /// prior(e^s) + s - L s - SS / (2 e^{2s}). Held fixed with the tau
    /// prior's `Fixed`.
    fn update_factor_sd(&self, f: usize, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats) {
        let fac = &self.data.factors[f];
        if fac.correlated {
            return self.update_factor_cov(f, state, sweep, adapting, stats);
        }
        let prior = self.prior.tau;
        if prior.fixed().is_some() {
            return;
        }
        let (k, levels) = (fac.k, fac.levels);
        let base = self.factor_coord(f) + levels * k;
        let mut rng = self.rng(sweep, Block::FactorScale(f));
        for j in 0..k {
            let u = &state.u[f];
            let ss = par_sum(levels, |r| r.map(|l| u[l * k + j] * u[l * k + j]).sum::<f64>());
            let logf = |s: f64| prior.log_density(s.exp()) + (1.0 - levels as f64) * s - 0.5 * ss * (-2.0 * s).exp();
            let s0 = state.sd[f][j].ln();
            let floor = state.factor_floor[f][j];
            let settings = SliceSettings { w: state.widths.w[base + j], lower: floor.ln(), upper: SCALE_MAX.ln(), ..self.slice };
            let step = super::slice::slice_step(s0, logf(s0), logf, &settings, &mut rng);
            stats.scale_evals += step.evals as u64 + 1;
            stats.stuck += step.stuck as u64;
            state.stuck[base + j] += step.stuck as u64;
            state.sd[f][j] = step.x.exp();
            if adapting {
                state.widths.parts_mut().1[base + j] += (step.x - s0).abs();
            }
        }
    }
}

impl Sweeper<'_> {
    /// Correlated terms: Sigma_f | u given the scatter sum_l u_l u_l' (as
    /// the groups' `update_cov`, with mean zero; [`Sweeper::draw_cov`]);
    /// sd_fj = sqrt(Sigma_f,jj).
    fn update_factor_cov(&self, f: usize, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats) {
        let fac = &self.data.factors[f];
        let (k, levels) = (fac.k, fac.levels);
        let mut rng = self.rng(sweep, Block::FactorScale(f));
        let u = &state.u[f];
        let scatter = covariance::scatter(k, |i, j| par_sum(levels, |r| r.map(|l| u[l * k + i] * u[l * k + j]).sum::<f64>()));
        let (now, floors) = (state.factor_cov[f].clone(), state.factor_floor[f].clone());
        let base = self.factor_coord(f) + levels * k;
        if let Some((cov, prec)) = self.draw_cov(self.prior.factor_cov(f, k), &now, k, levels, &scatter, base, &floors, state, adapting, &mut rng, stats) {
            for j in 0..k {
                state.sd[f][j] = cov[j * k + j].sqrt();
            }
            (state.factor_cov[f], state.factor_prec[f]) = (cov, prec);
        }
    }
}

impl Sweeper<'_> {
    /// For each term with a partner: u_lj -= c for every level, the
    /// partner += c (mu_k with beta_gk), c drawn from its conditional. With
    /// u_l ~ N(0, Sigma), Q = Sigma^-1 (diag(1 / sd^2) when independent),
    /// and the partner a ~ N(m, s^2): N(mean, 1 / P) with P = L Q_jj + 1 /
    /// s^2 and mean = ((Q U)_j - (a - m) / s^2) / P, U = sum_l u_l. The
    /// linear predictor does not change.
    fn shift_factor(&self, f: usize, state: &mut State, sweep: usize) {
        let fac = &self.data.factors[f];
        let (k, kg, levels) = (fac.k, self.data.k, fac.levels);
        let mut rng = self.rng(sweep, Block::FactorShift(f));
        for j in 0..k {
            let Some(partner) = fac.partner[j] else { continue };
            let (a, m, s) = match partner {
                Partner::Groups(q) => (state.mu[q], self.prior.mu_mean, self.prior.mu_sd),
                Partner::Global(q) => (state.gamma[q], 0.0, self.prior.gamma_sd),
            };
            let u = &state.u[f];
            let sum = |i: usize| par_sum(levels, |r| r.map(|l| u[l * k + i]).sum::<f64>());
            // Row j of Q times U (only the terms Q_ji that are not zero).
            let (qjj, qu) = if fac.correlated {
                let q = &state.factor_prec[f][j * k..(j + 1) * k];
                (q[j], (0..k).map(|i| q[i] * sum(i)).sum::<f64>())
            } else {
                let sd = state.sd[f][j];
                (1.0 / (sd * sd), sum(j) / (sd * sd))
            };
            let prec = levels as f64 * qjj + 1.0 / (s * s);
            let mean = (qu - (a - m) / (s * s)) / prec;
            let c = mean + rng.normal() / prec.sqrt();
            if !c.is_finite() {
                continue;
            }
            state.u[f].par_iter_mut().skip(j).step_by(k).for_each(|v| *v -= c);
            match partner {
                Partner::Groups(q) => {
                    state.mu[q] += c;
                    state.beta.par_iter_mut().skip(q).step_by(kg).for_each(|v| *v += c);
                }
                Partner::Global(q) => state.gamma[q] += c,
            }
        }
    }
}

/// Width (log scale) of the non-centred updates of a factor's sds: fixed,
/// so the kernel is valid without adaptation; stepping out finds the
/// posterior's scale from it.
pub(crate) const NC_SD_WIDTH: f64 = 1.0;

impl Sweeper<'_> {
    /// Each sd again in the non-centred parameterisation (interweaving, as
    /// `Sweeper::interweave` does for tau): alpha_l = u_lj / sd_j held
    /// fixed, so a new sd stretches every level's effect and eta moves by
    /// w_ij alpha_l(i) per unit of sd. The centred update above barely
    /// moves when the data say little of each level against the spread
    /// (an sd near zero: every effect is pulled to zero and holds the sd
    /// there); this one does not. The GPU's is gpu/scalar.rs's NC_SD;
    /// correlated terms have none (Sigma_f is drawn whole, as the groups'
    /// Sigma).
    fn interweave_factor(&self, f: usize, state: &mut State, sweep: usize, stats: &mut SweepStats, monitor: &Monitor) -> Result<()> {
        let prior = self.prior.tau;
        let fac = &self.data.factors[f];
        if prior.fixed().is_some() || fac.correlated {
            return Ok(());
        }
        let k = fac.k;
        let mut rng = self.rng(sweep, Block::FactorInterweave(f));
        let mut slope = std::mem::take(&mut state.nc_slope);
        let cuts = state.cuts.clone();
        let aux = self.aux(state.sigma, &cuts);
        let mut out = Ok(());
        for j in 0..k {
            let s0 = state.sd[f][j];
            let u = &state.u[f];
            slope.par_iter_mut().enumerate().with_min_len(4096).for_each(|(i, v)| *v = fac.w[i * k + j] * u[fac.level[i] as usize * k + j] / s0);
            let logf = |t: f64| self.moved_loglik(state, &slope, t.exp() - s0, aux, monitor) + prior.log_density(t.exp()) + t;
            let t0 = s0.ln();
            let settings = SliceSettings { w: NC_SD_WIDTH, lower: state.factor_floor[f][j].ln(), upper: SCALE_MAX.ln(), ..self.slice };
            match self.non_centred_step(t0, logf(t0), logf, &settings, &mut rng, stats, monitor) {
                Ok(Some(dt)) => {
                    let s = (t0 + dt).exp();
                    let ratio = s / s0;
                    state.u[f].par_iter_mut().skip(j).step_by(k).for_each(|v| *v *= ratio);
                    state.sd[f][j] = s;
                    state.eta.par_iter_mut().zip(&slope).with_min_len(4096).for_each(|(e, sl)| *e += sl * (s - s0));
                }
                Ok(None) => {}
                Err(e) => {
                    out = Err(e);
                    break;
                }
            }
        }
        state.nc_slope = slope;
        out
    }
}

impl HbData {
    /// Add a grouping factor with correlated terms (`(1 + x | h)`): as
    /// [`HbData::with_factor`], with at least two terms.
    pub fn with_correlated_factor(self, level: &[usize], levels: usize, w: Vec<f64>, k: usize) -> Result<Self> {
        if k < 2 {
            return Err(Error::arg("formula", "a grouping factor's terms can be correlated only when it has two or more"));
        }
        let mut out = self.with_factor(level, levels, w, k)?;
        if let Some(f) = out.factors.last_mut() {
            f.correlated = true;
        }
        Ok(out)
    }

    /// Add a grouping factor besides the groups (see [`Factor::new`]).
    pub fn with_factor(mut self, level: &[usize], levels: usize, w: Vec<f64>, k: usize) -> Result<Self> {
        if level.len() != self.n() {
            return Err(Error::arg("formula", format!("a grouping factor must give one level per row ({}), not {}", self.n(), level.len())));
        }
        let mut factor = Factor::new(level, levels, w, k)?;
        let same = |values: &[f64], width: usize, q: usize, j: usize| (0..self.n()).all(|i| values[i * width + q] == factor.w[i * k + j]);
        for j in 0..k {
            factor.partner[j] = (0..self.k).find(|&q| same(&self.x, self.k, q, j)).map(Partner::Groups).or_else(|| (0..self.p).find(|&q| same(&self.z, self.p, q, j)).map(Partner::Global));
        }
        self.factors.push(factor);
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_own_their_rows_and_columns() {
        // Rows 0..5 at levels 1, 0, 1, 2, 0; two terms (1, i).
        let level = [1, 0, 1, 2, 0];
        let w: Vec<f64> = (0..5).flat_map(|i| [1.0, i as f64]).collect();
        let f = Factor::new(&level, 3, w, 2).unwrap();
        assert_eq!(f.start, vec![0, 2, 4, 5]);
        assert_eq!(f.by_level, vec![1, 4, 0, 2, 3]);
        // Level 1 (rows 0 and 2): ones, then i = 0, 2.
        assert_eq!(&f.wcol[2 * 2..2 * 4], &[1.0, 1.0, 0.0, 2.0]);
        assert_eq!(f.eta_of(2, &[0.0, 0.0, 0.5, 0.25, 0.0, 0.0]), 0.5 + 0.5);
        assert!(Factor::new(&[0, 2], 3, vec![1.0, 1.0], 1).is_err(), "level 2 of 3 has no rows");
        assert!(Factor::new(&[0, 3], 3, vec![1.0, 1.0], 1).is_err(), "level out of range");
        assert!(Factor::new(&[0, 1], 2, vec![1.0, f64::NAN], 1).is_err());
    }
}
