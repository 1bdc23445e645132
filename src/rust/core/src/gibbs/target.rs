//! Sampling to a target: every parameter's bulk and tail ESS at least
//! `ess` and its rank-normalised split R-hat at most `rhat`, checked
//! between blocks of sweeps, up to the run's `iter` sweeps.
//!
//! The first check comes after `first` sweeps; each later one once the kept
//! draws have grown by a quarter, so the checks' cost (sorting every
//! parameter's draws) stays a fixed fraction of the sampling's. Random
//! streams are keyed by the sweep, so a run that stops after S sweeps has
//! exactly the draws of a run of S sweeps without a target.

use super::diagnostics::Diagnostics;
use crate::error::{Error, Result};

/// Fewest kept draws per chain a check looks at: the ESS needs four.
const MIN_KEPT: usize = 4;
/// Parameters named in a run's outcome, the farthest from the target first.
const WORST_NAMED: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    /// Least bulk and tail ESS of every parameter.
    pub ess: f64,
    /// Largest R-hat of every parameter.
    pub rhat: f64,
    /// Sweeps per chain (warmup included) before the first check.
    pub first: usize,
}

/// How far one parameter is from the target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shortfall {
    /// The parameter's index in draw order.
    pub param: usize,
    pub rhat: f64,
    pub ess_bulk: f64,
    pub ess_tail: f64,
}

/// The last check of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub met: bool,
    /// Sweeps per chain run, warmup included.
    pub sweeps: usize,
    /// Checks made.
    pub checks: usize,
    /// The parameters farthest from the target (at most five; empty when
    /// it was met).
    pub worst: Vec<Shortfall>,
}

impl Target {
    pub fn check(&self, iter: usize, warmup: usize, thin: usize) -> Result<()> {
        if !(self.ess.is_finite() && self.ess > 0.0) {
            return Err(Error::arg("target$ess", format!("must be a positive number, not {}", self.ess)));
        }
        if !(self.rhat.is_finite() && self.rhat > 1.0) {
            return Err(Error::arg("target$rhat", format!("must be a number above 1, not {}", self.rhat)));
        }
        let least = warmup + MIN_KEPT * thin;
        if self.first < least || self.first > iter {
            return Err(Error::arg(
                "iter",
                format!("must leave at least {MIN_KEPT} kept draws per chain before the first check ({least} sweeps) and be at most max.iter ({iter}), not {}", self.first),
            ));
        }
        Ok(())
    }

    /// Sweeps per chain done at the next check after `done`, at most `iter`.
    pub fn next_check(&self, done: usize, iter: usize, warmup: usize, thin: usize) -> usize {
        if done < self.first {
            return self.first.min(iter);
        }
        let kept = (done - warmup) / thin;
        (warmup + (kept + kept.div_ceil(4)).max(kept + 1) * thin).min(iter)
    }

    /// How far the parameter with these diagnostics is from the target: at
    /// most 1 when it meets it; None when the diagnostics are undefined (a
    /// parameter held constant, such as a fixed scale).
    fn distance(&self, rhat: f64, ess_bulk: f64, ess_tail: f64) -> Option<f64> {
        if rhat.is_nan() || ess_bulk.is_nan() {
            return None;
        }
        let ess = if ess_tail.is_nan() { ess_bulk } else { ess_bulk.min(ess_tail) };
        Some(((rhat - 1.0) / (self.rhat - 1.0)).max(self.ess / ess))
    }

    /// The outcome of a check of these diagnostics after `sweeps` sweeps.
    pub fn assess(&self, diag: &Diagnostics, sweeps: usize, checks: usize) -> Outcome {
        let mut short: Vec<(f64, Shortfall)> = (0..diag.rhat.len())
            .filter_map(|p| {
                let (r, b, t) = (diag.rhat[p], diag.ess_bulk[p], diag.ess_tail[p]);
                self.distance(r, b, t).filter(|&d| d > 1.0).map(|d| (d, Shortfall { param: p, rhat: r, ess_bulk: b, ess_tail: t }))
            })
            .collect();
        short.sort_by(|a, b| b.0.total_cmp(&a.0));
        Outcome { met: short.is_empty(), sweeps, checks, worst: short.into_iter().take(WORST_NAMED).map(|(_, s)| s).collect() }
    }
}

/// Run `sweeps(run, from, to)` block by block up to `iter` sweeps per
/// chain; with a target, check `diagnose(run, kept so far)` between blocks
/// and stop once it is met. `run` is the sampler's state, which both see.
/// Returns the sweeps per chain run, and the last check's outcome and
/// diagnostics (those of every kept draw: the run's).
pub fn run_blocks<R>(
    target: Option<Target>,
    iter: usize,
    warmup: usize,
    thin: usize,
    run: &mut R,
    mut sweeps: impl FnMut(&mut R, usize, usize) -> Result<()>,
    mut diagnose: impl FnMut(&R, usize) -> Result<Diagnostics>,
) -> Result<(usize, Option<(Outcome, Diagnostics)>)> {
    let Some(target) = target else {
        sweeps(run, 0, iter)?;
        return Ok((iter, None));
    };
    let (mut done, mut checks) = (0, 0);
    loop {
        let next = target.next_check(done, iter, warmup, thin);
        sweeps(run, done, next)?;
        done = next;
        checks += 1;
        let diag = diagnose(run, (done - warmup) / thin)?;
        let outcome = target.assess(&diag, done, checks);
        if outcome.met || done == iter {
            return Ok((done, Some((outcome, diag))));
        }
    }
}

/// Shorten a draws array laid out as slices of `cap` draws (one per chain
/// and parameter) to slices of `kept`, in place.
pub fn compact(draws: &mut Vec<f64>, cap: usize, kept: usize) {
    if kept == cap || cap == 0 {
        return;
    }
    let slices = draws.len() / cap;
    for s in 0..slices {
        draws.copy_within(s * cap..s * cap + kept, s * kept);
    }
    draws.truncate(slices * kept);
    draws.shrink_to_fit();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_grow_by_a_quarter_and_stop_at_iter() {
        let t = Target { ess: 400.0, rhat: 1.01, first: 300 };
        assert_eq!(t.next_check(0, 10_000, 100, 2), 300);
        // 100 kept after 300 sweeps with thin 2: next at 125 kept.
        assert_eq!(t.next_check(300, 10_000, 100, 2), 350);
        assert_eq!(t.next_check(9_990, 10_000, 100, 2), 10_000);
        // At least one more draw.
        let t = Target { first: 5, ..t };
        assert_eq!(t.next_check(5, 100, 0, 1), 7);
        assert_eq!(t.next_check(6, 100, 5, 1), 7);
    }

    #[test]
    fn outcome_names_the_worst_and_skips_constants() {
        let t = Target { ess: 400.0, rhat: 1.01, first: 10 };
        let d = Diagnostics {
            rhat: vec![1.0, 1.05, f64::NAN, 1.001, 1.0],
            ess_bulk: vec![1000.0, 900.0, f64::NAN, 350.0, 500.0],
            ess_tail: vec![1000.0, 900.0, f64::NAN, 800.0, 100.0],
        };
        let o = t.assess(&d, 10, 1);
        assert!(!o.met);
        assert_eq!(o.worst.iter().map(|s| s.param).collect::<Vec<_>>(), vec![1, 4, 3]);
        let ok = Diagnostics { rhat: vec![1.0, f64::NAN], ess_bulk: vec![400.0, f64::NAN], ess_tail: vec![401.0, f64::NAN] };
        assert!(t.assess(&ok, 10, 1).met);
    }

    #[test]
    fn compact_keeps_each_slices_prefix() {
        let mut d: Vec<f64> = (0..12).map(|v| v as f64).collect();
        compact(&mut d, 4, 2);
        assert_eq!(d, vec![0.0, 1.0, 4.0, 5.0, 8.0, 9.0]);
    }

    #[test]
    fn blocks_run_until_met() {
        let t = Target { ess: 1.0, rhat: 1.5, first: 8 };
        let mut ran = Vec::new();
        let mut calls = 0;
        let (done, o) = run_blocks(Some(t), 100, 4, 1, &mut ran, |ran, a, b| {
            ran.push((a, b));
            Ok(())
        }, |_, _kept| {
            calls += 1;
            let e = if calls < 3 { 0.5 } else { 2.0 };
            Ok(Diagnostics { rhat: vec![1.0], ess_bulk: vec![e], ess_tail: vec![2.0] })
        })
        .unwrap();
        assert_eq!(ran, vec![(0, 8), (8, 9), (9, 11)]);
        let (o, d) = o.unwrap();
        assert_eq!((done, o.checks), (11, 3));
        assert_eq!(d.ess_bulk, vec![2.0], "the last check's diagnostics");
        let (done, o) = run_blocks(None, 50, 4, 1, &mut (), |_, a, b| {
            assert_eq!((a, b), (0, 50));
            Ok(())
        }, |_, _| unreachable!())
        .unwrap();
        assert_eq!(done, 50);
        assert!(o.is_none());
    }
}
