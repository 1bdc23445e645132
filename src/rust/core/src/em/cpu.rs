//! The EM algorithm on the CPU: the reference backend.
//!
//! One (dataset, start) pair is the unit of work; pairs run in parallel
//! through rayon and each runs its whole EM sequentially, so the result is
//! identical for any number of threads.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::memory;
use crate::tolerances::{MIXED_NOISE, START_TIE_REL};

use super::config::{CheckedEmConfig, Precision};
use super::data::{unfittable_weighted, Prepared};
use super::family::{Family, Natural};
use super::fit::{best_start, failure, FitStatus, MixFit, MixParams, StartFit};
use super::simd::{self, Simd};
use super::starts::initial_values;

/// Weighted sums of one component: sum w, sum w*u, sum w*v.
pub type Sums = [f64; 3];

/// Largest M whose E-step keeps its per-observation values on the stack.
const STACK_COMPONENTS: usize = 8;

/// One E-step: fills `sums` with each component's weighted sums and returns
/// the log-likelihood (without the shared term). Log-sum-exp per observation;
/// the log of the sum is taken once per block of observations, on the
/// product of the per-observation sums (each lies in [1, M]), which is exact
/// to rounding and saves one log per observation.
///
/// Uses the SIMD kernels where the CPU has them (AVX2 + FMA, M <= 8) and
/// `e_step_scalar` elsewhere; both are deterministic, and agree to rounding.
pub fn e_step(prep: &Prepared, nat: &[Natural], sums: &mut [Sums]) -> f64 {
    e_step_for(prep, nat, sums, Wanted::LogLik)
}

/// What an E-step's caller reads besides the sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// The log-likelihood.
    LogLik,
    /// Only whether the log-likelihood is finite: the value returned is
    /// finite exactly when it is, and nothing else. Asked for each
    /// iteration of a fit with a fixed number of iterations but the last.
    /// The weighted E-step then skips its ln per observation, and the mixed
    /// one with M = 2 takes one component's sums by complement
    /// (`e_step_mixed`); the others return the log-likelihood anyway, since
    /// theirs costs one ln a block.
    Sums,
}

/// `e_step`, returning what `wanted` says.
pub fn e_step_for(prep: &Prepared, nat: &[Natural], sums: &mut [Sums], wanted: Wanted) -> f64 {
    if let Some(w) = &prep.weights {
        return match Simd::detect() {
            Some(simd) if (1..=simd::MAX_COMPONENTS).contains(&nat.len()) => simd.e_step_weighted(prep, w, nat, sums, wanted),
            _ => e_step_weighted(prep, w, nat, sums, wanted),
        };
    }
    match Simd::detect() {
        Some(simd) if (1..=simd::MAX_COMPONENTS).contains(&nat.len()) => simd.e_step(prep, nat, sums),
        _ => e_step_scalar(prep, nat, sums),
    }
}

/// The portable E-step, one observation at a time (see `e_step`).
pub fn e_step_scalar(prep: &Prepared, nat: &[Natural], sums: &mut [Sums]) -> f64 {
    match nat.len() {
        1 => e_step_sized::<1>(prep, nat, sums),
        2 => e_step_two(prep, nat, sums),
        3 => e_step_sized::<3>(prep, nat, sums),
        4 => e_step_sized::<4>(prep, nat, sums),
        _ => e_step_sized::<0>(prep, nat, sums),
    }
}

/// One observation's component terms: `lp[j]` = exp(l_j - top), where l_j
/// = log(alpha_j f_j(x)) and top = max_j l_j; returns (top, sum_j lp[j]).
#[inline(always)]
fn exps_at(nat: &[Natural], u: f64, v: f64, lp: &mut [f64]) -> (f64, f64) {
    let mut top = f64::NEG_INFINITY;
    for (l, c) in lp.iter_mut().zip(nat) {
        *l = c.a + c.b * u + c.c * v;
        top = top.max(*l);
    }
    let mut s = 0.0;
    for l in lp.iter_mut() {
        *l = (*l - top).exp();
        s += *l;
    }
    (top, s)
}

/// Room for M per-observation values: on the stack for M <= STACK_COMPONENTS.
struct Scratch {
    stack: [f64; STACK_COMPONENTS],
    heap: Vec<f64>,
}

impl Scratch {
    fn new() -> Self {
        Scratch { stack: [0.0; STACK_COMPONENTS], heap: Vec::new() }
    }
    fn values(&mut self, m: usize) -> &mut [f64] {
        if m <= STACK_COMPONENTS {
            &mut self.stack[..m]
        } else {
            self.heap.resize(m, 0.0);
            &mut self.heap[..]
        }
    }
}

/// `FIXED` > 0 fixes M at compile time so the component loops unroll;
/// `FIXED` = 0 reads M from `nat`.
#[inline(always)]
fn e_step_sized<const FIXED: usize>(prep: &Prepared, nat: &[Natural], sums: &mut [Sums]) -> f64 {
    let m = if FIXED > 0 { FIXED } else { nat.len() };
    let nat = &nat[..m];
    let sums = &mut sums[..m];
    sums.fill([0.0; 3]);
    let mut scratch = Scratch::new();
    let lp = scratch.values(m);
    let block = log_block_len(m);
    let (mut max_sum, mut log_sum, mut prod, mut in_block) = (0.0f64, 0.0f64, 1.0f64, 0usize);
    for (u, v) in prep.features() {
        let (top, s) = exps_at(nat, u, v, lp);
        let r = 1.0 / s;
        for (acc, l) in sums.iter_mut().zip(lp.iter()) {
            let w = l * r;
            acc[0] += w;
            acc[1] += w * u;
            acc[2] += w * v;
        }
        max_sum += top;
        prod *= s;
        in_block += 1;
        if in_block == block {
            log_sum += prod.ln();
            prod = 1.0;
            in_block = 0;
        }
    }
    max_sum + log_sum + prod.ln()
}

/// The E-step with observation weights: each observation's share of the
/// sums and of the log-likelihood times its weight, so an integer weight
/// counts as that many copies. One log per observation (a weighted sum of
/// logs is no log of a product); weight-0 observations are skipped. The
/// portable reference of the SIMD `Simd::e_step_weighted`.
pub fn e_step_weighted(prep: &Prepared, w: &[f64], nat: &[Natural], sums: &mut [Sums], wanted: Wanted) -> f64 {
    let m = nat.len();
    let sums = &mut sums[..m];
    sums.fill([0.0; 3]);
    let mut scratch = Scratch::new();
    let lp = scratch.values(m);
    let mut ll = 0.0;
    for ((u, v), &wi) in prep.features().zip(w) {
        if wi == 0.0 {
            continue;
        }
        let (top, s) = exps_at(nat, u, v, lp);
        let r = wi / s;
        for (acc, l) in sums.iter_mut().zip(lp.iter()) {
            let wj = l * r;
            acc[0] += wj;
            acc[1] += wj * u;
            acc[2] += wj * v;
        }
        ll += wi * if wanted == Wanted::LogLik { top + s.ln() } else { top + s };
    }
    ll
}

/// M = 2, the common case: one exp per observation instead of two.
fn e_step_two(prep: &Prepared, nat: &[Natural], sums: &mut [Sums]) -> f64 {
    let (c0, c1) = (nat[0], nat[1]);
    let mut acc = [[0.0f64; 3]; 2];
    let block = log_block_len(2);
    let (mut max_sum, mut log_sum, mut prod, mut in_block) = (0.0f64, 0.0f64, 1.0f64, 0usize);
    for (u, v) in prep.features() {
        let l0 = c0.a + c0.b * u + c0.c * v;
        let l1 = c1.a + c1.b * u + c1.c * v;
        let d = l1 - l0;
        // e = ratio of the smaller to the larger weighted density.
        let e = (-d.abs()).exp();
        let s = 1.0 + e;
        let w_top = 1.0 / s;
        let w_low = e * w_top;
        let (w0, w1) = if d > 0.0 { (w_low, w_top) } else { (w_top, w_low) };
        acc[0][0] += w0;
        acc[0][1] += w0 * u;
        acc[0][2] += w0 * v;
        acc[1][0] += w1;
        acc[1][1] += w1 * u;
        acc[1][2] += w1 * v;
        max_sum += l0.max(l1);
        prod *= s;
        in_block += 1;
        if in_block == block {
            log_sum += prod.ln();
            prod = 1.0;
            in_block = 0;
        }
    }
    sums[..2].copy_from_slice(&acc);
    max_sum + log_sum + prod.ln()
}

/// Observations per float32 group of `e_step_mixed`: its sums of weights
/// and of the per-observation totals (each <= M <= 8, so <= 2^48 over a
/// group) stay well inside float32, and each group adds to the float64 sums
/// once. The GPU kernel (kernels/em.cu, MIXED_GROUP) uses the same length.
pub const MIXED_GROUP: usize = 16;

/// The E-step of `precision = "mixed"`, the reference of the GPU's: as
/// [`e_step`], but each observation's weights are computed in float32 from
/// its float64 log-densities relative to their maximum (exp, sum and
/// reciprocal in float32, where most of the work is), and summed in float32
/// over groups of MIXED_GROUP observations whose sums are added in float64.
/// The log-densities, their maximum and the M-step stay float64 (they
/// cancel large terms), so the weights carry float32 rounding (about 1e-7
/// relative) and the log-likelihood about sqrt(n) * 1e-7.
///
/// With M = 2 and [`Wanted::Sums`], as on the GPU, the component of the
/// larger weight in the previous sums (which `sums` holds on entry) takes
/// the dataset's totals less the other's: the weights then add up to n
/// exactly, as float64's do, where float32's would not.
pub fn e_step_mixed(prep: &Prepared, nat: &[Natural], sums: &mut [Sums], wanted: Wanted) -> f64 {
    let m = nat.len();
    let sums = &mut sums[..m];
    let complement = (wanted == Wanted::Sums && m == 2).then(|| usize::from(sums[1][0] >= sums[0][0]));
    sums.fill([0.0; 3]);
    let mut lp = vec![0.0f64; m];
    let mut e = vec![0.0f32; m];
    let mut group = vec![[0.0f32; 3]; m];
    let block = log_block_len(m);
    let (mut max_sum, mut log_sum, mut prod) = (0.0f64, 0.0f64, 1.0f64);
    let (mut prod32, mut in_group, mut in_block) = (1.0f32, 0usize, 0usize);
    let flush = |group: &mut [[f32; 3]], sums: &mut [Sums], prod32: &mut f32, prod: &mut f64| {
        for (acc, g) in sums.iter_mut().zip(group.iter_mut()) {
            for k in 0..3 {
                acc[k] += g[k] as f64;
            }
            *g = [0.0; 3];
        }
        *prod *= *prod32 as f64;
        *prod32 = 1.0;
    };
    for (u, v) in prep.features() {
        let (uf, vf) = (u as f32, v as f32);
        let mut top = f64::NEG_INFINITY;
        for (l, c) in lp.iter_mut().zip(nat) {
            *l = c.a + c.b * u + c.c * v;
            top = top.max(*l);
        }
        let mut s = 0.0f32;
        for (ej, l) in e.iter_mut().zip(&lp) {
            *ej = ((l - top) as f32).exp();
            s += *ej;
        }
        let r = 1.0 / s;
        for (g, ej) in group.iter_mut().zip(&e) {
            let w = ej * r;
            g[0] += w;
            g[1] = w.mul_add(uf, g[1]);
            g[2] = w.mul_add(vf, g[2]);
        }
        max_sum += top;
        prod32 *= s;
        in_group += 1;
        in_block += 1;
        if in_group == MIXED_GROUP || in_block == block {
            flush(&mut group, sums, &mut prod32, &mut prod);
            in_group = 0;
        }
        if in_block == block {
            log_sum += prod.ln();
            prod = 1.0;
            in_block = 0;
        }
    }
    flush(&mut group, sums, &mut prod32, &mut prod);
    if let Some(c) = complement {
        let totals = prep.features().fold([prep.n as f64, 0.0, 0.0], |t, (u, v)| [t[0], t[1] + u, t[2] + v]);
        let own = sums[1 - c];
        sums[c] = [totals[0] - own[0], totals[1] - own[1], totals[2] - own[2]];
    }
    max_sum + log_sum + prod.ln()
}

/// Observations per block whose product of sums (each <= M) cannot overflow.
pub(super) fn log_block_len(m: usize) -> usize {
    if m <= 1 {
        usize::MAX
    } else {
        ((900.0 / (m as f64).log2()) as usize).clamp(1, 512)
    }
}

fn naturals(family: Family, p: &MixParams, centre: f64, out: &mut Vec<Natural>) {
    out.clear();
    out.extend((0..p.components()).map(|j| family.natural(p.alpha[j], p.mu[j], p.scale[j], centre)));
}

/// Run EM from `init` until the log-likelihood changes by less than epsilon
/// or max_iters M-steps have run. The reported log-likelihood is that of the
/// returned parameters (with `precision = "mixed"`, from a final float64
/// E-step; the iterations and the trace use the mixed E-step's). The trace
/// is recorded only when the configuration keeps it. `cancelled` is polled
/// before every E-step.
pub fn run_start(family: Family, prep: &Prepared, init: MixParams, config: &CheckedEmConfig, cancelled: &dyn Fn() -> bool) -> StartFit {
    // Weighted and censored fits run float64 (as the GPU's kernels).
    let mixed = config.precision == Precision::Mixed && prep.n <= super::gpu::SMALL_MAX_N && prep.weights.is_none() && prep.censored.is_none();
    let (mut fit, ended_mixed) = run_iterations(family, prep, init, config, mixed, cancelled);
    if ended_mixed && fit.status != FitStatus::Failed {
        let mut nat = Vec::new();
        naturals(family, &fit.params, prep.centre, &mut nat);
        let mut sums = vec![[0.0; 3]; nat.len()];
        fit.loglik = e_step(prep, &nat, &mut sums) + prep.shared;
        if !fit.loglik.is_finite() {
            return StartFit::failed(nat.len(), fit.init, fit.iterations, failure::non_finite(fit.iterations));
        }
        if let Some(last) = fit.trace.last_mut() {
            *last = fit.loglik;
        }
    }
    fit
}

/// The iterations of [`run_start`], and whether the last E-step was the
/// mixed one. With `mixed`, E-steps are mixed until the log-likelihood
/// changes by less than its float32 noise (MIXED_NOISE * sqrt(n)); if
/// epsilon is below that noise (and not 0, which runs max_iters), the start
/// then goes on in float64 from a float64 E-step at the same parameters, so
/// the stopping rule is float64's.
fn run_iterations(family: Family, prep: &Prepared, init: MixParams, config: &CheckedEmConfig, mixed: bool, cancelled: &dyn Fn() -> bool) -> (StartFit, bool) {
    let noise = MIXED_NOISE * (prep.n as f64).sqrt();
    let polish = config.epsilon > 0.0 && config.epsilon < noise;
    let mut mixed_now = mixed;
    // The exact observations' E-step, then the censored ones' share
    // (`params`: the parameters of `nat`).
    let e_step_now = |mixed_now: bool, nat: &[Natural], params: &MixParams, sums: &mut [Sums], wanted: Wanted| {
        let exact = if mixed_now { e_step_mixed(prep, nat, sums, wanted) } else { e_step_for(prep, nat, sums, wanted) };
        match &prep.censored {
            Some(c) => exact + super::censored::e_step(family, c, params, prep.centre, sums),
            None => exact,
        }
    };
    let m = init.components();
    let mut params = init.clone();
    let mut nat = Vec::with_capacity(m);
    let mut sums = vec![[0.0; 3]; m];
    let mut trace = if config.keep_trace { Vec::with_capacity(config.max_iters.min(1 << 16)) } else { Vec::new() };
    if cancelled() {
        return (StartFit::failed(m, init, 0, INTERRUPTED.into()), false);
    }
    // With fixed iterations and no trace, only the last log-likelihood is
    // read: the others need only be known finite.
    let wanted = |iter: usize| if config.epsilon == 0.0 && !config.keep_trace && iter < config.max_iters { Wanted::Sums } else { Wanted::LogLik };
    // Weighted fits that converge take an iteration's log-likelihood (an ln
    // per observation) only where the stopping rule could be met
    // (`q_gain_exceeds`); `ll_exact` says whether `ll` is one, or the
    // finite stand-in of `Wanted::Sums`.
    let lazy = config.epsilon > 0.0 && !config.keep_trace && !mixed && prep.weights.is_some() && prep.censored.is_none();
    let mut ll_exact = !lazy;
    let (mut prev_nat, mut again) = (Vec::with_capacity(m), vec![[0.0; 3]; if lazy { m } else { 0 }]);
    naturals(family, &params, prep.centre, &mut nat);
    let mut ll = e_step_now(mixed_now, &nat, &params, &mut sums, if lazy { Wanted::Sums } else { wanted(0) }) + prep.shared;
    if !ll.is_finite() {
        return (StartFit::failed(m, init, 0, failure::bad_start()), false);
    }
    for iter in 1..=config.max_iters {
        if cancelled() {
            return (StartFit::failed(m, init, iter - 1, INTERRUPTED.into()), false);
        }
        if let Some(c) = &config.constraints {
            if let Err(why) = c.m_step(family, &sums, prep.centre, &mut params) {
                return (StartFit::failed(m, init, iter, failure::m_step(why, family, iter)), false);
            }
        } else {
            for (j, s) in sums.iter().enumerate() {
                match family.m_step(s[0], s[1], s[2], prep.total, prep.centre, (params.mu[j], params.scale[j])) {
                    Ok((a, mu, sc)) => {
                        params.alpha[j] = a;
                        params.mu[j] = mu;
                        params.scale[j] = sc;
                    }
                    Err(why) => return (StartFit::failed(m, init, iter, failure::m_step(why, family, iter)), false),
                }
            }
        }
        if lazy {
            prev_nat.clear();
            prev_nat.extend_from_slice(&nat);
        }
        naturals(family, &params, prep.centre, &mut nat);
        // (`sums` are still the previous E-step's.)
        let may_stop = !lazy || !q_gain_exceeds(&prev_nat, &nat, &sums, config.epsilon);
        if lazy && may_stop && !ll_exact {
            // The previous parameters' log-likelihood, for the change (its
            // sums are those already taken, bit for bit).
            ll = e_step_for(prep, &prev_nat, &mut again, Wanted::LogLik) + prep.shared;
        }
        let now = if may_stop || iter == config.max_iters { wanted(iter) } else { Wanted::Sums };
        let mut new_ll = e_step_now(mixed_now, &nat, &params, &mut sums, now) + prep.shared;
        let mut change = if may_stop { (new_ll - ll).abs() } else { f64::INFINITY };
        if mixed_now && polish && change < noise {
            // From here on float64: this iteration's E-step again, and no
            // stop on a change measured in mixed precision.
            mixed_now = false;
            new_ll = e_step_now(false, &nat, &params, &mut sums, Wanted::LogLik) + prep.shared;
            change = f64::INFINITY;
        }
        if !new_ll.is_finite() {
            return (StartFit::failed(m, init, iter, failure::non_finite(iter)), false);
        }
        if config.keep_trace {
            trace.push(new_ll);
        }
        ll = new_ll;
        ll_exact = now == Wanted::LogLik;
        if change < config.epsilon {
            let fit = StartFit { params, init, loglik: ll, iterations: iter, status: FitStatus::Converged, message: None, trace };
            return (fit, mixed_now);
        }
    }
    let fit = StartFit { params, init, loglik: ll, iterations: config.max_iters, status: FitStatus::MaxIters, message: None, trace };
    (fit, mixed_now)
}

/// Whether the M-step's gain in Q, the expected complete-data
/// log-likelihood under the E-step's responsibilities, certainly exceeds
/// epsilon. Q(new | old) - Q(old | old) = sum_j (a'_j - a_j) S0_j +
/// (b'_j - b_j) S1_j + (c'_j - c_j) S2_j, from the old E-step's sums `sums`
/// (the responsibilities' entropy cancels). The log-likelihood rises by at
/// least that much (Dempster, Laird and Rubin 1977: ln L(new) - ln L(old) >=
/// Q(new | old) - Q(old | old), for any new parameters), so the stopping
/// rule cannot be met and the new E-step need not take the log-likelihood.
/// Near the optimum, the rise is at most twice the gain, so only the last
/// few iterations take it. The margin, 1e-11 of the terms' size, covers the
/// rounding of both sides.
fn q_gain_exceeds(old: &[Natural], new: &[Natural], sums: &[Sums], epsilon: f64) -> bool {
    let (mut gain, mut size) = (0.0, 0.0);
    for ((o, n), s) in old.iter().zip(new).zip(sums) {
        gain += (n.a - o.a) * s[0] + (n.b - o.b) * s[1] + (n.c - o.c) * s[2];
        size += (n.a.abs() + o.a.abs()) * s[0].abs() + (n.b.abs() + o.b.abs()) * s[1].abs() + (n.c.abs() + o.c.abs()) * s[2].abs();
    }
    gain.is_finite() && size.is_finite() && gain > epsilon + 1e-11 * size
}

/// Message of a start stopped by a user interrupt (the call then returns
/// `Error::Interrupted`, so it is never shown).
const INTERRUPTED: &str = "interrupted";

/// Posterior probabilities of each component, n x M column-major (the
/// matrix allocated fallibly).
pub fn posterior(family: Family, prep: &Prepared, p: &MixParams) -> Result<Vec<f64>> {
    let m = p.components();
    let mut nat = Vec::new();
    naturals(family, p, prep.centre, &mut nat);
    let mut out = memory::try_vec(prep.n.saturating_mul(m), 0.0, "the posterior (keep.posterior = TRUE)")?;
    let mut lp = vec![0.0; m];
    for (i, (u, v)) in prep.features().enumerate() {
        let (_, s) = exps_at(&nat, u, v, &mut lp);
        for (j, l) in lp.iter().enumerate() {
            out[j * prep.n + i] = l / s;
        }
    }
    Ok(out)
}

/// sum_i log max_j z_ij, the log-likelihood of the classification by the
/// posterior z at `p` (the entropy term of ICL): log max_j z_ij = -log
/// sum_j exp(l_ij - max_k l_ik).
pub fn classification_loglik(family: Family, prep: &Prepared, p: &MixParams) -> f64 {
    let mut nat = Vec::new();
    naturals(family, p, prep.centre, &mut nat);
    let mut lp = vec![0.0; nat.len()];
    prep.features()
        .enumerate()
        .map(|(i, (u, v))| {
            let wi = prep.weights.as_ref().map_or(1.0, |w| w[i]);
            if wi == 0.0 {
                return 0.0;
            }
            let (_, s) = exps_at(&nat, u, v, &mut lp);
            -wi * s.ln()
        })
        .sum()
}

/// The starts of one dataset that may still be the one kept: start 0 (kept
/// when every start fails) and those within twice the tie tolerance of the
/// best log-likelihood seen so far. The tie threshold of [`best_start`]
/// only rises with the best, so a start below it now is never chosen, and
/// a dataset holds a few starts, not all `random.inits` of them.
struct Candidates {
    top: f64,
    kept: Vec<(usize, StartFit)>,
}

impl Candidates {
    fn new() -> Self {
        Candidates { top: f64::NEG_INFINITY, kept: Vec::new() }
    }

    fn threshold(&self) -> f64 {
        self.top - 2.0 * START_TIE_REL * self.top.abs()
    }

    fn add(mut self, index: usize, fit: StartFit) -> Self {
        let ok = fit.status != FitStatus::Failed;
        if ok && fit.loglik > self.top {
            self.top = fit.loglik;
            let t = self.threshold();
            self.kept.retain(|(i, f)| *i == 0 || f.loglik >= t);
        }
        if index == 0 || (ok && fit.loglik >= self.threshold()) {
            self.kept.push((index, fit));
        }
        self
    }

    fn merge(self, other: Candidates) -> Self {
        other.kept.into_iter().fold(self, |acc, (i, f)| acc.add(i, f))
    }
}

/// Fit one dataset (global 0-based index `dataset`) from all its starts.
pub(crate) fn fit_dataset(x: &[f64], dataset: usize, config: &CheckedEmConfig, cancelled: &(dyn Fn() -> bool + Sync)) -> Result<MixFit> {
    let (family, m) = (config.family, config.components);
    let n_starts = config.starts_per_dataset();
    let mut logliks = memory::try_vec(n_starts, f64::NAN, "the log-likelihoods of the starts (random.inits)")?;
    let weights = config.weights_of(dataset);
    if let Some(why) = unfittable_weighted(family, x, weights, m) {
        let failed = StartFit::failed(m, MixParams::nan(m), 0, why);
        return Ok(MixFit::from_chosen(failed, 0, logliks, x.len(), false));
    }
    if cancelled() {
        let failed = StartFit::failed(m, MixParams::nan(m), 0, INTERRUPTED.into());
        return Ok(MixFit::from_chosen(failed, 0, logliks, x.len(), false));
    }
    let prep = match config.censoring_of(dataset) {
        Some(c) => Prepared::try_censored(family, x, weights, c)?,
        None => Prepared::try_weighted(family, x, weights)?,
    };
    let candidates = logliks
        .par_iter_mut()
        .enumerate()
        .fold(Candidates::new, |acc, (s, ll)| {
            let start = if cancelled() {
                StartFit::failed(m, MixParams::nan(m), 0, INTERRUPTED.into())
            } else {
                match initial_values(config, x, dataset, s) {
                    Ok(init) => run_start(family, &prep, init, config, cancelled),
                    Err(why) => StartFit::failed(m, MixParams::nan(m), 0, why),
                }
            };
            *ll = start.loglik;
            acc.add(s, start)
        })
        .reduce(Candidates::new, Candidates::merge);
    // A start succeeded exactly when its log-likelihood is finite.
    let ok: Vec<bool> = logliks.iter().map(|l| l.is_finite()).collect();
    let chosen = best_start(&logliks, &ok).unwrap_or(0);
    let start = candidates
        .kept
        .into_iter()
        .find(|(i, _)| *i == chosen)
        .map(|(_, f)| f)
        .ok_or_else(|| Error::Internal(format!("start {} of dataset {} was not kept", chosen + 1, dataset + 1)))?;
    let keep_order = config.constraints.as_ref().is_some_and(|c| c.holds_values());
    let mut fit = MixFit::from_chosen(start, chosen, logliks, x.len(), keep_order);
    fit.weight_total = weights.map(|_| prep.total);
    if config.keep_posterior && fit.success() && !cancelled() {
        fit.posterior = Some(match config.censoring_of(dataset) {
            Some(c) => super::censored::posterior(family, x, c, &fit.params)?,
            None => posterior(family, &prep, &fit.params)?,
        });
    }
    Ok(fit)
}

/// Fit every dataset with every configuration (one per candidate number of
/// components) on the CPU; returns the fits per configuration.
pub fn fit_models(data: &[&[f64]], configs: &[CheckedEmConfig], exec: &Exec) -> Result<Vec<Vec<MixFit>>> {
    let monitor = exec.monitor.clone();
    let cancelled = move || monitor.is_cancelled();
    let per_dataset: Result<Vec<Vec<MixFit>>> = exec.install(|| {
        data.par_iter()
            .enumerate()
            .map(|(d, x)| {
                let fits = configs.iter().map(|c| fit_dataset(x, c.dataset_offset + d, c, &cancelled)).collect();
                exec.monitor.add_done(1);
                fits
            })
            .collect()
    })?;
    exec.monitor.check()?;
    let mut per_model: Vec<Vec<MixFit>> = configs.iter().map(|_| Vec::with_capacity(data.len())).collect();
    for fits in per_dataset? {
        for (model, fit) in per_model.iter_mut().zip(fits) {
            model.push(fit);
        }
    }
    Ok(per_model)
}
