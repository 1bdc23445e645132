//! One Gibbs sweep of a chain: beta (every group at once), gamma, mu, tau,
//! sigma.
//!
//! The linear predictor eta is cached and updated incrementally: changing
//! one coefficient by d changes eta_i by x_ik d, so a slice evaluation for
//! beta_gk costs one pass over group g's rows and none over the others.

use rayon::prelude::*;

use super::adapt::Widths;
use super::covariance;
use super::lkj::{self, Lkj};
use super::newton::{newton_step, Curve};
use super::model::{negbin_shape_loglik, rows_loglik, rows_loglik_trials, Aux, Family, HbData, SCALE_MAX, SHAPE_MAX};
use super::prior::{CovPrior, Prior, ScalePrior};
use super::random::{stream, Block, Rng};
use super::slice::{slice_step, SliceSettings};
use crate::error::Result;
use crate::exec::Monitor;

/// Rows per task of a sum over all observations. Fixed, so the order of
/// additions (and the result) does not depend on the thread count.
const SUM_CHUNK: usize = 4096;
/// Groups per rayon task at least: tiny groups cost less than a task.
pub(super) const MIN_GROUPS_PER_TASK: usize = 64;
/// A group with at least this many rows sums its log-likelihood in parallel
/// chunks too (with load balancing on), so one huge group cannot keep a
/// single thread busy while the others idle. Depends on the data only, so
/// draws stay independent of the thread count.
pub const SPLIT_GROUP_ROWS: usize = 2 * SUM_CHUNK;

/// The parameters of one chain and its cached linear predictor.
#[derive(Debug, Clone)]
pub struct State {
    /// G x K, group-major.
    pub beta: Vec<f64>,
    pub gamma: Vec<f64>,
    pub mu: Vec<f64>,
    pub tau: Vec<f64>,
    /// Correlated coefficients: their covariance Sigma and its inverse
    /// (K x K; tau_k = sqrt(Sigma_kk)); empty otherwise.
    pub cov: Vec<f64>,
    pub prec: Vec<f64>,
    /// The family's auxiliary parameter: residual sd (gaussian), shape
    /// (negative binomial); 1 otherwise.
    pub sigma: f64,
    pub eta: Vec<f64>,
    pub widths: Widths,
    /// Widths of the non-centred updates of mu_k (first K) and log tau_k
    /// (`Sweeper::interweave`), adapted as `widths`.
    pub nc_widths: Widths,
    /// Scratch of those updates, kept between sweeps: per row, the move of
    /// eta per unit of the parameter (n); per group, alpha_g (G).
    pub(super) nc_slope: Vec<f64>,
    nc_alpha: Vec<f64>,
    /// The other grouping factors' effects (L_f x k_f, level-major) and
    /// sds, one vector per factor (`factor.rs`).
    pub u: Vec<Vec<f64>>,
    pub sd: Vec<Vec<f64>>,
    /// A factor with correlated terms: Sigma_f and its inverse (k_f x
    /// k_f); empty otherwise.
    pub factor_cov: Vec<Vec<f64>>,
    pub factor_prec: Vec<Vec<f64>>,
    /// Ordinal family: the cut-points theta_1 = 0, theta_2, ...,
    /// theta_{C-1} (`ordinal.rs`); empty otherwise.
    pub cuts: Vec<f64>,
    /// Floors of each tau_k and of sigma (see `model::SCALE_FLOOR_REL`),
    /// and of the factors' sds.
    pub tau_floor: Vec<f64>,
    pub factor_floor: Vec<Vec<f64>>,
    pub sigma_floor: f64,
    /// Stuck slice updates per coordinate, indexed as `widths` (beta
    /// group-major, gamma, tau, sigma, the free cut-points, then each
    /// factor's effects and sds).
    pub stuck: Vec<u64>,
}

/// Slice evaluations and stuck updates of one sweep, per block.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SweepStats {
    pub beta_evals: u64,
    pub gamma_evals: u64,
    pub scale_evals: u64,
    pub stuck: u64,
}

impl SweepStats {
    pub fn add(&mut self, o: &SweepStats) {
        self.beta_evals += o.beta_evals;
        self.gamma_evals += o.gamma_evals;
        self.scale_evals += o.scale_evals;
        self.stuck += o.stuck;
    }
}

/// The rows of one block of coefficients (a group, a level): responses,
/// trials (binomial, when given), the coefficients' columns (each
/// contiguous: column j at j * n..) and whether to sum its log-likelihood
/// in parallel chunks (a big block).
pub(super) struct BlockRows<'r> {
    pub y: &'r [f64],
    pub trials: Option<&'r [f64]>,
    pub xcol: &'r [f64],
    pub split: bool,
}

/// A coefficient's normal prior given the others of its block.
#[derive(Debug, Clone, Copy)]
pub(super) enum CoefPrior {
    /// Mean and sd.
    Normal(f64, f64),
    /// Mean and precision (a correlated coefficient given the others).
    Precision(f64, f64),
}

impl CoefPrior {
    #[inline]
    fn log(self, b: f64) -> f64 {
        match self {
            CoefPrior::Normal(mean, sd) => -0.5 * ((b - mean) / sd).powi(2),
            CoefPrior::Precision(centre, q) => -0.5 * q * (b - centre) * (b - centre),
        }
    }
}

/// Everything a sweep needs besides the state.
#[derive(Debug, Clone)]
pub struct Sweeper<'a> {
    pub data: &'a HbData,
    pub family: Family,
    pub prior: &'a Prior,
    /// Stepping-out limit and bounds; widths come from the state.
    pub slice: SliceSettings,
    pub seed: u64,
    pub chain: usize,
    /// Load balancing of the group block: small rayon tasks that idle
    /// threads steal (true), or one fixed, equal-count range of groups per
    /// thread (false; kept to measure what balancing buys with unequal
    /// group sizes).
    pub balance: bool,
    /// `HbglmConfig::newton_tau_rows`.
    pub newton_tau_rows: usize,
}

/// Sum of `f(range)` over fixed chunks of 0..n, in a fixed order.
pub(super) fn par_sum(n: usize, f: impl Fn(std::ops::Range<usize>) -> f64 + Sync) -> f64 {
    if n <= SUM_CHUNK {
        return f(0..n);
    }
    let parts: Vec<f64> = (0..n.div_ceil(SUM_CHUNK)).into_par_iter().map(|c| f(c * SUM_CHUNK..((c + 1) * SUM_CHUNK).min(n))).collect();
    parts.iter().sum()
}

impl Sweeper<'_> {
    pub(super) fn rng(&self, sweep: usize, block: Block) -> Rng {
        stream(self.seed, self.chain, sweep, block, self.data.groups())
    }

    /// What the family's auxiliary parameters give the rows'
    /// log-likelihoods (`Family::loglik`): 1 / sigma^2 (gaussian), the
    /// shape (negative binomial), the cut-points (ordinal).
    pub(super) fn aux<'c>(&self, sigma: f64, cuts: &'c [f64]) -> Aux<'c> {
        let value = match self.family {
            Family::Gaussian => 1.0 / (sigma * sigma),
            Family::NegBinomial => sigma,
            _ => 1.0,
        };
        Aux { value, cuts }
    }

    /// The auxiliary parameter's prior and ceiling (its floor is the data's
    /// `ScaleBounds::sigma_floor`).
    fn aux_prior(&self) -> (ScalePrior, f64) {
        match self.family {
            Family::NegBinomial => (self.prior.shape, SHAPE_MAX),
            _ => (self.prior.sigma, SCALE_MAX),
        }
    }

    /// Starting values: mu, gamma ~ U(-1, 1); tau, sigma = exp(U(-1, 1))
    /// (within their sampled range) unless fixed; beta_g = mu + tau *
    /// U(-1, 1).
    pub fn init(&self, w0: f64) -> State {
        let d = self.data;
        let (g, k, p) = (d.groups(), d.k, d.p);
        let bounds = d.scale_bounds(self.family);
        let mut rng = self.rng(usize::MAX, Block::Init);
        let mu: Vec<f64> = (0..k).map(|_| 2.0 * rng.uniform() - 1.0).collect();
        let tau: Vec<f64> = (0..k)
            .map(|j| self.prior.tau.fixed().unwrap_or_else(|| (2.0 * rng.uniform() - 1.0).exp().clamp(bounds.tau_floor[j], SCALE_MAX)))
            .collect();
        let gamma: Vec<f64> = (0..p).map(|_| 2.0 * rng.uniform() - 1.0).collect();
        let sigma = if self.family.has_aux() {
            let (prior, ceiling) = self.aux_prior();
            prior.fixed().unwrap_or_else(|| (2.0 * rng.uniform() - 1.0).exp().clamp(bounds.sigma_floor, ceiling))
        } else {
            1.0
        };
        let mut beta = vec![0.0; g * k];
        beta.par_chunks_mut(k).enumerate().with_min_len(MIN_GROUPS_PER_TASK).for_each(|(gi, b)| {
            let mut rng = self.rng(usize::MAX, Block::Group(gi));
            for (j, v) in b.iter_mut().enumerate() {
                *v = mu[j] + tau[j] * (2.0 * rng.uniform() - 1.0);
            }
        });
        // The other factors' sds as tau, effects sd * U(-1, 1), from the
        // same stream after the others (so fits without factors start as
        // before).
        let sd: Vec<Vec<f64>> = d
            .factors
            .iter()
            .zip(&bounds.factor_floor)
            .map(|(f, floor)| (0..f.k).map(|j| self.prior.tau.fixed().unwrap_or_else(|| (2.0 * rng.uniform() - 1.0).exp().clamp(floor[j], SCALE_MAX))).collect())
            .collect();
        let u: Vec<Vec<f64>> = d.factors.iter().zip(&sd).map(|(f, s)| (0..f.levels * f.k).map(|i| s[i % f.k] * (2.0 * rng.uniform() - 1.0)).collect()).collect();
        // Correlated factors' Sigma_f start diagonal, at those sds.
        let diagonal = |sd: &[f64], power: i32| {
            let k = sd.len();
            (0..k * k).map(|i| if i % (k + 1) == 0 { sd[i / k].powi(power) } else { 0.0 }).collect::<Vec<f64>>()
        };
        let (factor_cov, factor_prec) = d.factors.iter().zip(&sd).map(|(f, s)| if f.correlated { (diagonal(s, 2), diagonal(s, -2)) } else { (Vec::new(), Vec::new()) }).unzip();
        let cuts = self.init_cuts(&mut rng);
        let ncoord = g * k + p + k + 1 + d.free_cuts() + d.factors.iter().map(|f| f.n_params()).sum::<usize>();
        // Correlated: Sigma starts diagonal, at the scales drawn above.
        let (cov, prec) = match self.prior.cov {
            Some(_) => {
                let mut cov = vec![0.0; k * k];
                let mut prec = vec![0.0; k * k];
                for j in 0..k {
                    cov[j * k + j] = tau[j] * tau[j];
                    prec[j * k + j] = 1.0 / (tau[j] * tau[j]);
                }
                (cov, prec)
            }
            None => (Vec::new(), Vec::new()),
        };
        let mut state = State {
            beta,
            gamma,
            mu,
            tau,
            cov,
            prec,
            sigma,
            eta: vec![0.0; d.n()],
            widths: Widths::new(ncoord, w0),
            nc_widths: Widths::new(2 * k, w0),
            nc_slope: vec![0.0; d.n()],
            nc_alpha: vec![0.0; g],
            u,
            sd,
            factor_cov,
            factor_prec,
            cuts,
            tau_floor: bounds.tau_floor,
            factor_floor: bounds.factor_floor,
            sigma_floor: bounds.sigma_floor,
            stuck: vec![0; ncoord],
        };
        self.recompute_eta(&mut state);
        state
    }

    /// eta from scratch, offset included (start, and to shed accumulated
    /// rounding).
    pub fn recompute_eta(&self, state: &mut State) {
        let d = self.data;
        let (k, p) = (d.k, d.p);
        let (beta, gamma, u) = (&state.beta, &state.gamma, &state.u);
        let offsets = &d.offsets;
        state.eta.par_chunks_mut(SUM_CHUNK).enumerate().for_each(|(c, eta)| {
            let start = c * SUM_CHUNK;
            // The group of the first row of this chunk, then walk forward.
            let mut g = offsets.partition_point(|&o| o <= start) - 1;
            for (i, e) in eta.iter_mut().enumerate() {
                let row = start + i;
                while offsets[g + 1] <= row {
                    g += 1;
                }
                let xr = &d.x[row * k..(row + 1) * k];
                let zr = &d.z[row * p..(row + 1) * p];
                *e = xr.iter().zip(&beta[g * k..(g + 1) * k]).map(|(a, b)| a * b).sum::<f64>()
                    + zr.iter().zip(gamma).map(|(a, b)| a * b).sum::<f64>()
                    + d.offset_of(row)
                    + d.factors.iter().zip(u).map(|(f, u)| f.eta_of(row, u)).sum::<f64>();
            }
        });
    }

    /// One full sweep (number `sweep` of this chain). With `adapting`, the
    /// moves feed the warmup width adaptation.
    pub fn sweep(&self, state: &mut State, sweep: usize, adapting: bool) -> SweepStats {
        // Never cancelled, so never an error.
        self.sweep_watched(state, sweep, adapting, &Monitor::new()).unwrap_or_default()
    }

    /// One full sweep that stops early (with `Err(Interrupted)`, leaving
    /// the state part-updated) once `monitor` is cancelled: it is looked at
    /// between blocks, before each group and inside every log-density
    /// evaluation over many rows, so that even one sweep over millions of
    /// rows stops within a fraction of a second.
    pub fn sweep_watched(&self, state: &mut State, sweep: usize, adapting: bool, monitor: &Monitor) -> Result<SweepStats> {
        let mut stats = SweepStats::default();
        self.update_beta(state, sweep, adapting, &mut stats, monitor);
        monitor.check()?;
        self.update_factors(state, sweep, adapting, &mut stats, monitor)?;
        self.update_gamma(state, sweep, adapting, &mut stats, monitor)?;
        self.update_mu(state, sweep);
        self.update_tau(state, sweep, adapting, &mut stats);
        self.interweave(state, sweep, adapting, &mut stats, monitor)?;
        self.update_sigma(state, sweep, adapting, &mut stats);
        self.update_cuts(state, sweep, adapting, &mut stats);
        if adapting {
            state.widths.end_sweep();
            state.nc_widths.end_sweep();
        }
        Ok(stats)
    }

    /// Block-parallel: groups are conditionally independent given (mu, tau,
    /// gamma, sigma); each worker updates whole groups, coordinate by
    /// coordinate, summing its group's log-likelihood serially.
    fn update_beta(&self, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats, monitor: &Monitor) {
        let d = self.data;
        let (g_count, k) = (d.groups(), d.k);
        let cuts = state.cuts.clone();
        let aux = self.aux(state.sigma, &cuts);
        let (mu, tau) = (&state.mu, &state.tau);
        // Correlated: each coefficient's prior given the group's others.
        let prec = (!state.prec.is_empty()).then_some(&state.prec[..]);
        // Split eta into each group's rows.
        let mut parts: Vec<&mut [f64]> = Vec::with_capacity(g_count);
        let mut rest: &mut [f64] = &mut state.eta;
        for g in 0..g_count {
            let (head, tail) = rest.split_at_mut(d.offsets[g + 1] - d.offsets[g]);
            parts.push(head);
            rest = tail;
        }
        let (w_all, moved_all) = state.widths.parts_mut();
        let (w_beta, moved_beta) = (&mut w_all[..g_count * k], &mut moved_all[..g_count * k]);
        let stuck_beta = &mut state.stuck[..g_count * k];
        let (evals, stuck) = parts
            .into_par_iter()
            .zip(state.beta.par_chunks_mut(k))
            .zip(w_beta.par_chunks_mut(k))
            .zip(moved_beta.par_chunks_mut(k))
            .zip(stuck_beta.par_chunks_mut(k))
            .enumerate()
            .with_min_len(if self.balance { MIN_GROUPS_PER_TASK } else { g_count.div_ceil(rayon::current_num_threads()).max(1) })
            .map(|(g, ((((eta, beta), w), moved), stuck_by))| {
                if monitor.is_cancelled() {
                    return (0, 0);
                }
                let rows = d.rows(g);
                let block = BlockRows {
                    y: &d.y[rows.clone()],
                    trials: (!d.trials.is_empty()).then(|| &d.trials[rows.clone()]),
                    xcol: &d.xcol[rows.start * k..rows.end * k],
                    split: self.balance && rows.len() >= SPLIT_GROUP_ROWS,
                };
                let mut rng = self.rng(sweep, Block::Group(g));
                let prior = |j: usize, beta: &[f64]| match prec {
                    Some(q) => {
                        let (centre, q) = covariance::conditional_prior(beta, mu, q, j);
                        CoefPrior::Precision(centre, q)
                    }
                    None => CoefPrior::Normal(mu[j], tau[j]),
                };
                self.slice_block(&block, eta, beta, prior, w, moved, stuck_by, adapting, aux, &mut rng, monitor)
            })
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        stats.beta_evals += evals;
        stats.stuck += stuck;
    }

    /// Coordinate-wise slice updates of one block's coefficients (a group's
    /// beta_g, a level's effects): `eta` (the block's rows) moves with each
    /// change; `prior(j, coefs)` is coefficient j's prior given the
    /// block's others. Returns (evaluations, stuck updates).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn slice_block(
        &self,
        rows: &BlockRows,
        eta: &mut [f64],
        coefs: &mut [f64],
        prior: impl Fn(usize, &[f64]) -> CoefPrior,
        w: &[f64],
        moved: &mut [f64],
        stuck_by: &mut [u64],
        adapting: bool,
        aux: Aux,
        rng: &mut Rng,
        monitor: &Monitor,
    ) -> (u64, u64) {
        let (family, n) = (self.family, rows.y.len());
        // A big block looks at the monitor in every evaluation: a cancelled
        // one returns NaN (outside every slice), so its updates end at once
        // and the sweep is abandoned.
        let watch = n >= SUM_CHUNK;
        let loglik = |eta: &[f64], j: usize, delta: f64| -> f64 {
            if watch && monitor.is_cancelled() {
                return f64::NAN;
            }
            let xc = &rows.xcol[j * n..(j + 1) * n];
            let part = |r: std::ops::Range<usize>| match rows.trials {
                Some(t) => rows_loglik_trials(family, &rows.y[r.clone()], &t[r.clone()], &eta[r.clone()], &xc[r], delta, aux),
                None => rows_loglik(family, &rows.y[r.clone()], &eta[r.clone()], &xc[r], delta, aux),
            };
            if rows.split {
                par_sum(n, part)
            } else {
                part(0..n)
            }
        };
        let (mut evals, mut stuck) = (1u64, 0u64);
        // The block's log-likelihood at the current point, carried from one
        // coordinate to the next.
        let mut lik = loglik(eta, 0, 0.0);
        for j in 0..coefs.len() {
            let b0 = coefs[j];
            let given = prior(j, coefs);
            let settings = SliceSettings { w: w[j], ..self.slice };
            let step = slice_step(b0, lik + given.log(b0), |b| loglik(eta, j, b - b0) + given.log(b), &settings, rng);
            evals += step.evals as u64;
            stuck += step.stuck as u64;
            stuck_by[j] += step.stuck as u64;
            let delta = step.x - b0;
            if delta != 0.0 {
                for (e, xv) in eta.iter_mut().zip(&rows.xcol[j * n..(j + 1) * n]) {
                    *e += xv * delta;
                }
                coefs[j] = step.x;
                lik = step.logf - given.log(step.x);
            }
            if adapting {
                moved[j] += delta.abs();
            }
        }
        (evals, stuck)
    }

    /// Log-posterior-parallel: each gamma_j's log density sums over every
    /// observation, in parallel chunks.
    fn update_gamma(&self, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats, monitor: &Monitor) -> Result<()> {
        let d = self.data;
        let p = d.p;
        if p == 0 {
            return Ok(());
        }
        let cuts = state.cuts.clone();
        let aux = self.aux(state.sigma, &cuts);
        let base = d.groups() * d.k;
        let mut rng = self.rng(sweep, Block::Gamma);
        let sd = self.prior.gamma_sd;
        for j in 0..p {
            let c0 = state.gamma[j];
            let eta = &state.eta;
            let logf = |c: f64| {
                // Cancelled: outside every slice, so the update ends at once.
                if monitor.is_cancelled() {
                    return f64::NAN;
                }
                let delta = c - c0;
                let lik = if d.trials.is_empty() {
                    par_sum(d.n(), |r| r.map(|i| self.family.loglik(d.y[i], eta[i] + d.z[i * p + j] * delta, aux)).sum::<f64>())
                } else {
                    par_sum(d.n(), |r| r.map(|i| self.family.loglik_trials(d.y[i], d.trials[i], eta[i] + d.z[i * p + j] * delta, aux)).sum::<f64>())
                };
                lik - 0.5 * (c / sd).powi(2)
            };
            let settings = SliceSettings { w: state.widths.w[base + j], ..self.slice };
            let step = slice_step(c0, logf(c0), logf, &settings, &mut rng);
            monitor.check()?;
            stats.gamma_evals += step.evals as u64 + 1;
            stats.stuck += step.stuck as u64;
            state.stuck[base + j] += step.stuck as u64;
            let delta = step.x - c0;
            if delta != 0.0 {
                state.eta.par_iter_mut().enumerate().with_min_len(SUM_CHUNK).for_each(|(i, e)| *e += d.z[i * p + j] * delta);
                state.gamma[j] = step.x;
            }
            if adapting {
                state.widths.parts_mut().1[base + j] += delta.abs();
            }
        }
        Ok(())
    }

    /// Conjugate: mu_k | beta, tau ~ N with precision 1/s0^2 + G/tau_k^2;
    /// correlated, mu | beta, Sigma is multivariate normal
    /// (covariance::draw_mean).
    fn update_mu(&self, state: &mut State, sweep: usize) {
        let (g, k) = (self.data.groups(), self.data.k);
        let mut rng = self.rng(sweep, Block::Mu);
        let (m0, s0) = (self.prior.mu_mean, self.prior.mu_sd);
        if self.prior.cov.is_some() {
            let sums: Vec<f64> = (0..k).map(|j| column_sum(&state.beta, k, j, |b| b)).collect();
            // Q is positive definite unless Sigma^-1 overflowed: then mu keeps its value.
            if let Some(mu) = covariance::draw_mean(m0, s0, &state.prec, &sums, g, k, &mut rng) {
                state.mu = mu;
            }
            return;
        }
        for j in 0..k {
            let sum = column_sum(&state.beta, k, j, |b| b);
            let t2 = state.tau[j] * state.tau[j];
            let prec = 1.0 / (s0 * s0) + g as f64 / t2;
            let mean = (m0 / (s0 * s0) + sum / t2) / prec;
            state.mu[j] = mean + rng.normal() / prec.sqrt();
        }
    }

    /// tau_k on the log scale: log p(u) = log prior(e^u) + u - G u - SS/(2 e^{2u}),
    /// u within [log floor_k, log SCALE_MAX].
    fn update_tau(&self, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats) {
        if let Some(cov) = self.prior.cov {
            return self.update_cov(state, sweep, cov, adapting, stats);
        }
        if self.prior.tau.fixed().is_some() {
            return;
        }
        let (g, k) = (self.data.groups() as f64, self.data.k);
        let base = self.data.groups() * k + self.data.p;
        let mut rng = self.rng(sweep, Block::Tau);
        for j in 0..k {
            let mu = state.mu[j];
            let ss = column_sum(&state.beta, k, j, |b| (b - mu) * (b - mu));
            let prior = self.prior.tau;
            let logf = |u: f64| prior.log_density(u.exp()) + (1.0 - g) * u - 0.5 * ss * (-2.0 * u).exp();
            let u0 = state.tau[j].ln();
            let settings = SliceSettings { w: state.widths.w[base + j], lower: state.tau_floor[j].ln(), upper: SCALE_MAX.ln(), ..self.slice };
            let step = slice_step(u0, logf(u0), logf, &settings, &mut rng);
            stats.scale_evals += step.evals as u64 + 1;
            stats.stuck += step.stuck as u64;
            state.stuck[base + j] += step.stuck as u64;
            state.tau[j] = step.x.exp();
            if adapting {
                state.widths.parts_mut().1[base + j] += (step.x - u0).abs();
            }
        }
    }

    /// Sigma | beta, mu given the scatter sum_g (beta_g - mu)(beta_g - mu)'
    /// ([`Sweeper::draw_cov`]); tau_k = sqrt(Sigma_kk).
    fn update_cov(&self, state: &mut State, sweep: usize, prior: CovPrior, adapting: bool, stats: &mut SweepStats) {
        let (g, k) = (self.data.groups(), self.data.k);
        let mut rng = self.rng(sweep, Block::Tau);
        let (mu, beta) = (&state.mu, &state.beta);
        let cross = |i: usize, j: usize| par_sum(g, |r| r.map(|gi| (beta[gi * k + i] - mu[i]) * (beta[gi * k + j] - mu[j])).sum::<f64>());
        let scatter = covariance::scatter(k, cross);
        let (now, floors) = (state.cov.clone(), state.tau_floor.clone());
        if let Some((cov, prec)) = self.draw_cov(prior, &now, k, g, &scatter, g * k + self.data.p, &floors, state, adapting, &mut rng, stats) {
            for j in 0..k {
                state.tau[j] = cov[j * k + j].sqrt();
            }
            (state.cov, state.prec) = (cov, prec);
        }
    }

    /// A draw of the covariance Sigma (now `now`) of `k` correlated terms
    /// given `count` vectors with scatter matrix `scatter`, and its inverse:
    /// exact under an inverse-Wishart prior (Sigma ~ IW(df + count, df
    /// scale^2 I + scatter)); under LKJ one slice update of each of its
    /// coordinates (lkj.rs), whose sds take the widths, floors (`floors`)
    /// and stuck counts of sweep coordinates base..base + k. None when
    /// Sigma keeps its value because the draw failed in floating point
    /// (values near overflow): each sd then counts a stuck update.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn draw_cov(&self, prior: CovPrior, now: &[f64], k: usize, count: usize, scatter: &[f64], base: usize, floors: &[f64], state: &mut State, adapting: bool, rng: &mut Rng, stats: &mut SweepStats) -> Option<(Vec<f64>, Vec<f64>)> {
        let drawn = match prior {
            CovPrior::InverseWishart(iw) => covariance::draw_posterior(iw, count, k, |i, j| scatter[i * k + j], rng),
            CovPrior::Lkj { eta } => lkj::theta_of(now, k).map(|theta0| {
                let lkj = Lkj { eta, sd: self.prior.tau };
                let step = lkj::update(lkj, &theta0, k, count, scatter, &state.widths.w[base..base + k], floors, SCALE_MAX, self.slice.m, rng);
                stats.scale_evals += step.evals;
                for j in 0..k {
                    stats.stuck += step.stuck[j];
                    state.stuck[base + j] += step.stuck[j];
                    if adapting {
                        state.widths.parts_mut().1[base + j] += step.moved[j];
                    }
                }
                lkj::cov_of(&step.theta, k)
            }),
        };
        if drawn.is_none() {
            for j in 0..k {
                state.stuck[base + j] += 1;
            }
            stats.stuck += k as u64;
        }
        drawn
    }

    /// The auxiliary parameter on the log scale, u within [log floor, log
    /// ceiling]. Gaussian sigma, from the residual sum of squares (summed in
    /// parallel): log p(u) = log prior(e^u) + u - n u - RSS/(2 e^{2u}).
    /// Negative binomial shape phi = e^u: log prior(phi) + u + sum over rows
    /// of `negbin_shape_loglik` (in parallel chunks).
    fn update_sigma(&self, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats) {
        let (prior, ceiling) = self.aux_prior();
        if !self.family.has_aux() || prior.fixed().is_some() {
            return;
        }
        let d = self.data;
        let eta = &state.eta;
        let n = d.n() as f64;
        let rss = if self.family == Family::Gaussian { par_sum(d.n(), |r| r.map(|i| (d.y[i] - eta[i]).powi(2)).sum::<f64>()) } else { 0.0 };
        let logf = |u: f64| -> f64 {
            let s = u.exp();
            let lik = match self.family {
                Family::Gaussian => -n * u - 0.5 * rss * (-2.0 * u).exp(),
                _ => par_sum(d.n(), |r| r.map(|i| negbin_shape_loglik(d.y[i], eta[i], s, u)).sum::<f64>()),
            };
            prior.log_density(s) + u + lik
        };
        let idx = d.groups() * d.k + d.p + d.k;
        let mut rng = self.rng(sweep, Block::Sigma);
        let u0 = state.sigma.ln();
        let settings = SliceSettings { w: state.widths.w[idx], lower: state.sigma_floor.ln(), upper: ceiling.ln(), ..self.slice };
        let step = slice_step(u0, logf(u0), logf, &settings, &mut rng);
        stats.scale_evals += step.evals as u64 + 1;
        stats.stuck += step.stuck as u64;
        state.stuck[idx] += step.stuck as u64;
        state.sigma = step.x.exp();
        if adapting {
            state.widths.parts_mut().1[idx] += (step.x - u0).abs();
        }
    }
}

impl Sweeper<'_> {
    /// Interweaving (ASIS, Yu and Meng 2011) of each (mu_k, tau_k): after
    /// their centred updates above (given beta), both are updated again in
    /// the non-centred parameterisation, holding alpha_g = (beta_gk -
    /// mu_k) / tau_k fixed, from the data: a shift of mu_k moves every
    /// beta_gk with it, a new tau_k stretches them all. The centred updates
    /// mix slowly when tau_k is small against what the data say of each
    /// group (mu and tau then barely move given beta); these do not. Each
    /// log density sums over every observation, in parallel chunks (as
    /// gamma's). eta is linear in mu_k and in tau_k, so their
    /// log-likelihoods are concave where the family's is (every family but
    /// the ordinal): there mu_k takes a Newton step (newton.rs), two passes
    /// over the rows, and so does tau_k on `newton_tau_rows` rows or more;
    /// otherwise a slice update (tau_k's on the log scale). A point whose
    /// log density is not
    /// finite is left to the centred updates (which report it as stuck);
    /// an update that cannot move here is not reported: the centred one
    /// still moves.
    fn interweave(&self, state: &mut State, sweep: usize, adapting: bool, stats: &mut SweepStats, monitor: &Monitor) -> Result<()> {
        let mut rng = self.rng(sweep, Block::Interweave);
        // The scratch, taken out of the state while the updates borrow it.
        let (mut slope, mut alpha) = (std::mem::take(&mut state.nc_slope), std::mem::take(&mut state.nc_alpha));
        let out = self.interweave_with(state, &mut slope, &mut alpha, adapting, &mut rng, stats, monitor);
        (state.nc_slope, state.nc_alpha) = (slope, alpha);
        out
    }

    /// [`Sweeper::interweave`] with its scratch: `slope` (n) and `alpha` (G).
    #[allow(clippy::too_many_arguments)]
    fn interweave_with(&self, state: &mut State, slope: &mut [f64], alpha: &mut [f64], adapting: bool, rng: &mut Rng, stats: &mut SweepStats, monitor: &Monitor) -> Result<()> {
        let d = self.data;
        let (g_count, k) = (d.groups(), d.k);
        let cuts = state.cuts.clone();
        let aux = self.aux(state.sigma, &cuts);
        let (m0, s0) = (self.prior.mu_mean, self.prior.mu_sd);
        for j in 0..k {
            monitor.check()?;
            // mu_k: eta moves by x_ik per unit; the prior is mu's own.
            fill_slope(d, slope, j, |_| 1.0);
            let mu0 = state.mu[j];
            let step = if self.family.has_curve() {
                // A Newton step (newton.rs): concave in mu, two passes.
                let curve = |m: f64| {
                    let c = self.moved_curve(state, slope, m - mu0, aux, monitor);
                    Curve { f: c.f - 0.5 * ((m - m0) / s0).powi(2), d1: c.d1 - (m - m0) / (s0 * s0), d2: c.d2 - 1.0 / (s0 * s0) }
                };
                let c0 = curve(mu0);
                let (m1, moved) = newton_step(mu0, &c0, curve, rng);
                monitor.check()?;
                stats.scale_evals += 2;
                moved.then_some(m1 - mu0)
            } else {
                let logf = |m: f64| self.moved_loglik(state, slope, m - mu0, aux, monitor) - 0.5 * ((m - m0) / s0).powi(2);
                let settings = SliceSettings { w: state.nc_widths.w[j], ..self.slice };
                self.non_centred_step(mu0, logf(mu0), logf, &settings, rng, stats, monitor)?
            };
            if let Some(delta) = step {
                state.mu[j] += delta;
                (0..g_count).for_each(|g| state.beta[g * k + j] += delta);
                move_eta(&mut state.eta, slope, delta);
                if adapting {
                    state.nc_widths.parts_mut().1[j] += delta.abs();
                }
            }
            // (Correlated: Sigma is drawn whole, conjugately, above.)
            if self.prior.tau.fixed().is_some() || self.prior.cov.is_some() {
                continue;
            }
            // tau_k: eta moves by x_ik alpha_g per unit of tau_k.
            let (mu, t0) = (state.mu[j], state.tau[j]);
            alpha.iter_mut().enumerate().for_each(|(g, a)| *a = (state.beta[g * k + j] - mu) / t0);
            let alpha = &*alpha;
            fill_slope(d, slope, j, |g| alpha[g]);
            let prior = self.prior.tau;
            let (floor, ceiling) = (state.tau_floor[j], SCALE_MAX);
            let moved = if self.family.has_curve() && d.n() >= self.newton_tau_rows {
                // On many rows (NEWTON_TAU_ROWS), a Newton step in tau
                // itself, as mu's: eta is linear in tau_k, so the
                // log-likelihood is concave in it (on the log scale it is
                // not, far below the mode, where a step would have no
                // proposal). Outside [floor, SCALE_MAX] the target is zero:
                // such a candidate is refused.
                let curve = |t: f64| {
                    if !(floor..=ceiling).contains(&t) {
                        return Curve { f: f64::NEG_INFINITY, d1: f64::NAN, d2: f64::NAN };
                    }
                    let c = self.moved_curve(state, slope, t - t0, aux, monitor);
                    let (p, p1, p2) = prior.log_density_curve(t);
                    Curve { f: c.f + p, d1: c.d1 + p1, d2: c.d2 + p2 }
                };
                let c0 = curve(t0);
                let (t1, moved) = newton_step(t0, &c0, curve, rng);
                monitor.check()?;
                stats.scale_evals += 2;
                moved.then(|| (t1, t1.ln() - t0.ln()))
            } else {
                // A slice update on the log scale: log p(u) = log prior(e^u)
                // + u + loglik.
                let logf = |u: f64| self.moved_loglik(state, slope, u.exp() - t0, aux, monitor) + prior.log_density(u.exp()) + u;
                let u0 = t0.ln();
                let settings = SliceSettings { w: state.nc_widths.w[k + j], lower: floor.ln(), upper: ceiling.ln(), ..self.slice };
                self.non_centred_step(u0, logf(u0), logf, &settings, rng, stats, monitor)?.map(|du| ((u0 + du).exp(), du))
            };
            // The new tau_k and its move on the log scale (the widths').
            if let Some((t, du)) = moved {
                state.tau[j] = t;
                (0..g_count).for_each(|g| state.beta[g * k + j] = mu + t * alpha[g]);
                move_eta(&mut state.eta, slope, t - t0);
                if adapting {
                    state.nc_widths.parts_mut().1[k + j] += du.abs();
                }
            }
        }
        Ok(())
    }

    /// One slice update of a non-centred coordinate from `x0`: the change
    /// when it moved (None when it did not, or when the start's log
    /// density is not finite).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn non_centred_step(&self, x0: f64, f0: f64, logf: impl Fn(f64) -> f64, settings: &SliceSettings, rng: &mut Rng, stats: &mut SweepStats, monitor: &Monitor) -> Result<Option<f64>> {
        if !f0.is_finite() {
            return Ok(None);
        }
        let step = slice_step(x0, f0, logf, settings, rng);
        monitor.check()?;
        stats.scale_evals += step.evals as u64 + 1;
        let delta = step.x - x0;
        Ok((delta != 0.0 && !step.stuck && step.x.is_finite()).then_some(delta))
    }

    /// sum_i loglik(y_i, eta_i + slope_i delta), in parallel chunks; NaN
    /// once cancelled (outside every slice).
    pub(super) fn moved_loglik(&self, state: &State, slope: &[f64], delta: f64, aux: Aux, monitor: &Monitor) -> f64 {
        if monitor.is_cancelled() {
            return f64::NAN;
        }
        let (d, eta) = (self.data, &state.eta);
        // Every chunk looks at the monitor: one evaluation may cover
        // millions of rows.
        par_sum(d.n(), |r| {
            if monitor.is_cancelled() {
                f64::NAN
            } else if d.trials.is_empty() {
                rows_loglik(self.family, &d.y[r.clone()], &eta[r.clone()], &slope[r], delta, aux)
            } else {
                rows_loglik_trials(self.family, &d.y[r.clone()], &d.trials[r.clone()], &eta[r.clone()], &slope[r], delta, aux)
            }
        })
    }

    /// The sums over rows of (f, f' s, f'' s^2) of the log-likelihood at
    /// eta_i + s_i delta (s: `slope`), in parallel chunks (the family must
    /// have [`Family::has_curve`]); NaN once cancelled.
    pub(super) fn moved_curve(&self, state: &State, slope: &[f64], delta: f64, aux: Aux, monitor: &Monitor) -> Curve {
        let (d, eta, family) = (self.data, &state.eta, self.family);
        let part = |r: std::ops::Range<usize>| -> [f64; 3] {
            if monitor.is_cancelled() {
                return [f64::NAN; 3];
            }
            let mut acc = [0.0; 3];
            for i in r {
                let n = if d.trials.is_empty() { 1.0 } else { d.trials[i] };
                let s = slope[i];
                let (f, d1, d2) = family.loglik_curve(d.y[i], n, eta[i] + s * delta, aux);
                acc[0] += f;
                acc[1] += d1 * s;
                acc[2] += d2 * s * s;
            }
            acc
        };
        let n = d.n();
        let parts: Vec<[f64; 3]> = (0..n.div_ceil(SUM_CHUNK).max(1)).into_par_iter().map(|c| part(c * SUM_CHUNK..((c + 1) * SUM_CHUNK).min(n))).collect();
        let sum = |k: usize| parts.iter().map(|p| p[k]).sum::<f64>();
        Curve { f: sum(0), d1: sum(1), d2: sum(2) }
    }
}

/// slope_i = x_ik * scale(group of row i), for every row.
fn fill_slope(d: &HbData, slope: &mut [f64], j: usize, scale: impl Fn(usize) -> f64 + Sync) {
    let k = d.k;
    slope.par_chunks_mut(SUM_CHUNK).enumerate().for_each(|(c, part)| {
        let start = c * SUM_CHUNK;
        let mut g = d.offsets.partition_point(|&o| o <= start) - 1;
        for (i, v) in part.iter_mut().enumerate() {
            let row = start + i;
            while d.offsets[g + 1] <= row {
                g += 1;
            }
            *v = d.x[row * k + j] * scale(g);
        }
    });
}

/// eta_i += slope_i delta.
fn move_eta(eta: &mut [f64], slope: &[f64], delta: f64) {
    eta.par_iter_mut().zip(slope).with_min_len(SUM_CHUNK).for_each(|(e, s)| *e += s * delta);
}

/// sum_g f(beta_gj), in a fixed order.
fn column_sum(beta: &[f64], k: usize, j: usize, f: impl Fn(f64) -> f64 + Sync) -> f64 {
    let g = beta.len() / k;
    par_sum(g, |r| r.map(|i| f(beta[i * k + j])).sum::<f64>())
}
