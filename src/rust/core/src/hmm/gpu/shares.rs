//! Sequences spread over every usable device: contiguous shares of about
//! equal observations (`gpu::split_even`), one thread per device running
//! its shares in order, results put back in sequence order. By default only
//! fits with small count vectors are spread (see [`Spread`]: measured);
//! `Exec::gpu_parts` sets the number of shares. A sequence's
//! log-likelihood, path and posteriors do not depend on the share it is in,
//! so they are those of one device exactly. A fit's E-step runs on every
//! share and the counts are summed on the host in share order, so its
//! results agree with one device's to rounding.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::mpsc;

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::gpu::{self, Device};

use super::super::backward::Counts;
use super::super::baum_welch::{fit_with, Engine, HmmFit, HostEngine};
use super::super::config::CheckedHmmFitConfig;
use super::super::emission::Emission;
use super::super::model::HmmModel;
use super::super::sequences::Sequences;

/// One share of a call's sequences and the device it runs on.
pub(super) struct Share {
    pub(super) dev: &'static Device,
    /// Its sequences' indices in the call.
    pub(super) range: Range<usize>,
}

impl Share {
    /// Its sequences: the call's own when it has them all, else a copy
    /// (made on the share's thread).
    pub(super) fn seqs<'s, O: Copy>(&self, all: &'s Sequences<O>) -> Cow<'s, Sequences<O>> {
        if self.range == (0..all.len()) { Cow::Borrowed(all) } else { Cow::Owned(all.part(self.range.clone())) }
    }
}

/// Largest count vector (N + N*N + S*N doubles) of a fit that is spread
/// over several devices by default: each iteration copies it from every
/// device and runs the M-step on the host. Measured on two H100s
/// (BENCHMARKS.md, issue 21): 5 iterations at N = 32 took 44.6 ms on two
/// against 59.5 ms on one; at N = 512 (2 MB of counts) 90 ms against 32.
pub(super) const SPREAD_FIT_COUNTS: usize = 1 << 14;

/// When a call spreads its sequences over every usable device by default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Spread {
    /// A fit whose count vector has this many doubles: spread when at most
    /// [`SPREAD_FIT_COUNTS`].
    Fit(usize),
    /// A single pass: never by default. From host memory its time goes to
    /// the host (checks, copies), which a split only adds to: on two H100s
    /// the forward pass at N = 32, M = 10,000, T = 1,000 took 19.3 ms on two
    /// against 13.7 ms on one (BENCHMARKS.md, issue 21).
    Pass,
}

/// The shares of `seqs`: one per usable device where `spread` gains from
/// it (else one), or `exec.gpu_parts` given to the devices in turn.
pub(super) fn shares<O: Copy>(seqs: &Sequences<O>, exec: &Exec, spread: Spread) -> Result<Vec<Share>> {
    let devices = gpu::devices()?;
    let gains = matches!(spread, Spread::Fit(counts) if counts <= SPREAD_FIT_COUNTS);
    let parts = match exec.gpu_parts {
        0 if gains => devices.len(),
        0 => 1,
        k => k,
    };
    let ranges = gpu::split_even(seqs.offsets.windows(2).map(|w| w[1] - w[0] + 1), parts.max(1));
    Ok(ranges.into_iter().enumerate().map(|(k, range)| Share { dev: &devices[k % devices.len()], range }).collect())
}

/// `f` on every share of `seqs` (the device, the share's sequences and
/// their indices in the call), each device's shares in order on a thread
/// of its own; the results in share order.
pub(super) fn on_shares<O, T, F>(shares: &[Share], seqs: &Sequences<O>, exec: &Exec, f: F) -> Result<Vec<T>>
where
    O: Copy + Send + Sync,
    T: Send,
    F: Fn(&'static Device, &Sequences<O>, &Range<usize>) -> Result<T> + Sync,
{
    if let [one] = shares {
        return Ok(vec![f(one.dev, seqs, &one.range)?]);
    }
    let by_device = by_device(shares);
    // Each device's thread with its share of the call's CPU threads.
    let run = |g: usize, s: &Share| exec.install_part(g, by_device.len(), || f(s.dev, &s.seqs(seqs), &s.range)).and_then(|r| r);
    let mut out: Vec<Option<Result<T>>> = shares.iter().map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = by_device
            .iter()
            .enumerate()
            .map(|(g, ks)| {
                let run = &run;
                scope.spawn(move || ks.iter().map(|&k| (k, run(g, &shares[k]))).collect::<Vec<_>>())
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(done) => done.into_iter().for_each(|(k, r)| out[k] = Some(r)),
                Err(_) => return Err(Error::BackendUnavailable("a GPU worker thread panicked".into())),
            }
        }
        Ok(())
    })?;
    out.into_iter().map(|r| r.unwrap_or_else(|| Err(Error::Internal("a share of the sequences was not run".into())))).collect()
}

/// The shares' indices grouped by device, in order.
fn by_device(shares: &[Share]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for (k, s) in shares.iter().enumerate() {
        match groups.iter_mut().find(|(d, _)| *d == s.dev.info.ordinal) {
            Some((_, g)) => g.push(k),
            None => groups.push((s.dev.info.ordinal, vec![k])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// A Baum-Welch engine of one share that also gives its last E-step's
/// counts to the host.
pub(super) trait ShareEngine<E: Emission>: Engine<E> {
    /// The counts of the last E-step, on the host.
    fn counts(&self) -> Result<Counts>;
}

/// The E-step's answer of one share: counts, log-likelihood and first
/// impossible sequence (in the call's numbering).
type Answer = Result<(Counts, f64, Option<usize>)>;

/// Baum-Welch over several shares: each share keeps an engine for the
/// whole fit (its sequences uploaded once) on a thread of its own, built by
/// `build`, which hands it to the loop it is given (so the engine may
/// borrow what `build` holds). An E-step sends the model to every share and
/// sums their counts on the host in share order; the M-step runs on the
/// host. Several shares of one device share its stream.
pub(super) fn fit_shares<E, B>(shares: &[Share], seqs: &Sequences<E::Obs>, config: &CheckedHmmFitConfig<E>, exec: &Exec, build: B) -> Result<HmmFit<E>>
where
    E: Emission,
    B: Fn(&Share, &Sequences<E::Obs>, &mut dyn FnMut(&mut dyn ShareEngine<E>) -> Result<()>) -> Result<()> + Sync,
{
    std::thread::scope(|scope| {
        let mut links = Vec::with_capacity(shares.len());
        for (k, share) in shares.iter().enumerate() {
            let (to_worker, models) = mpsc::channel::<HmmModel<E>>();
            let (answers, from_worker) = mpsc::channel::<Answer>();
            let build = &build;
            let parts = shares.len();
            // Each share's thread with its part of the call's CPU threads.
            scope.spawn(move || {
                let first = share.range.start;
                let part = share.seqs(seqs);
                let (part, replies) = (&part, answers.clone());
                let served = exec.install_part(k, parts, move || build(share, part, &mut |engine| {
                    for model in models.iter() {
                        let answer = engine.load(&model).and_then(|(ll, impossible)| Ok((engine.counts()?, ll, impossible.map(|s| s + first))));
                        // The receiver lives until the fit ends.
                        let _ = replies.send(answer);
                    }
                    Ok(())
                }))
                .and_then(|r| r);
                if let Err(e) = served {
                    let _ = answers.send(Err(e));
                }
            });
            links.push((to_worker, from_worker));
        }
        let ended = || Error::BackendUnavailable("a GPU worker thread ended".into());
        let mut engine = HostEngine::new(|model: &HmmModel<E>| -> Result<(Counts, f64, Option<usize>)> {
            for (to, _) in &links {
                // A worker that ended has sent why: its answer below.
                let _ = to.send(model.clone());
            }
            let (mut total, mut ll, mut impossible): (Option<Counts>, f64, Option<usize>) = (None, 0.0, None);
            for (_, from) in &links {
                let (c, l, imp) = from.recv().map_err(|_| ended())??;
                match total.as_mut() {
                    Some(t) => t.add(&c),
                    None => total = Some(c),
                }
                ll += l;
                impossible = impossible.or(imp);
            }
            let total = total.ok_or_else(|| Error::Internal("a fit over no shares".into()))?;
            Ok((total, ll, impossible))
        });
        let out = fit_with(config, seqs, exec, &mut engine);
        // Closing the channels ends the workers.
        drop(engine);
        drop(links);
        out
    })
}
