//! Sequences spread over every usable device: contiguous shares of about
//! equal observations (`gpu::split_even`), one thread per device running
//! its shares in order. A share borrows its observations from the call's
//! and writes its results into its parts of the call's results, so the
//! host copies nothing per share. By default a call is spread when it has
//! enough work and, for a fit, a small count vector (see [`Spread`]:
//! measured); `Exec::gpu_parts` sets the number of shares. A sequence's
//! log-likelihood, path and posteriors do not depend on the share it is in,
//! so they are those of one device exactly. A fit's E-step runs on every
//! share and the counts are summed on the host in share order, so its
//! results agree with one device's to rounding.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::mpsc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::gpu::{self, Device};

use super::super::backward::Counts;
use super::super::baum_welch::{fit_with, Engine, HmmFit, HostEngine};
use super::super::config::CheckedHmmFitConfig;
use super::super::emission::Emission;
use super::super::model::HmmModel;
use super::super::sequences::Sequences;
use super::batched::{forward_tiles, viterbi_tiles};
use super::plan::{loglik_batched, viterbi_batched};

/// One share of a call's sequences and the device it runs on.
pub(super) struct Share {
    pub(super) dev: &'static Device,
    /// Its sequences' indices in the call.
    pub(super) range: Range<usize>,
}

/// What a share's thread works on, without a copy of its observations
/// (10^7 symbols copied on the host cost more than the pass on the device).
pub(super) struct ShareSeqs<'s, O: Clone> {
    pub(super) dev: &'static Device,
    /// Its sequences: the call's own when it has them all, else their
    /// offsets alone (rebased; no observations, those are `obs`).
    pub(super) seqs: Cow<'s, Sequences<O>>,
    /// Its observations, borrowed from the call's.
    pub(super) obs: &'s [O],
    /// Its sequences' indices in the call.
    pub(super) range: Range<usize>,
}

impl Share {
    /// The share of `all` this is (made on the share's thread).
    pub(super) fn of<'s, O: Copy>(&self, all: &'s Sequences<O>) -> ShareSeqs<'s, O> {
        let seqs = if self.range == (0..all.len()) { Cow::Borrowed(all) } else { Cow::Owned(all.offsets_part(self.range.clone())) };
        ShareSeqs { dev: self.dev, seqs, obs: all.observations(&self.range), range: self.range.clone() }
    }
}

/// Largest count vector (N + N*N + S*N doubles) of a fit that is spread
/// over several devices by default: each iteration copies it from every
/// device and runs the M-step on the host. Measured on two H100s
/// (BENCHMARKS.md, issue 21): 5 iterations at N = 32 took 44.6 ms on two
/// against 59.5 ms on one; at N = 512 (2 MB of counts) 90 ms against 32.
pub(super) const SPREAD_FIT_COUNTS: usize = 1 << 14;

/// Least work (observations x states) a call spreads over several devices
/// by default: below it a device's share of the passes costs less than
/// starting the other device's thread and uploading its tables.
pub(super) const SPREAD_WORK: usize = 1 << 24;

/// What a call does, for deciding whether to spread it over every usable
/// device; `work` is its observations times its states.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Spread {
    /// A fit (or one Baum-Welch step) whose count vector has `counts`
    /// doubles: spread when at most [`SPREAD_FIT_COUNTS`].
    Fit { counts: usize, work: usize },
    /// A single pass (forward, Viterbi, posterior); `shorter`: whether its
    /// kernels take less time on fewer sequences (see [`Spread::pass`]).
    Pass { work: usize, shorter: bool },
}

/// Which single pass a call runs, for [`Spread::pass`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum PassKind {
    Forward,
    Viterbi,
    /// Posteriors: N doubles per observation come back, so a share also
    /// halves the copy to the host whatever its kernels take.
    Posterior,
}

impl Spread {
    /// A single pass of N states over `seqs` on devices like `dev`. The
    /// kernels of a warp or block per sequence take less time on fewer
    /// sequences; the batched kernels (every step one product over the
    /// grid of tiles) only when a step's tiles outnumber the
    /// multiprocessors: below that every step takes as long on fewer rows
    /// (measured on two H200s: N = 1,024, 64 sequences, forward and Viterbi
    /// 6-10% slower over both; BENCHMARKS.md, issue 21).
    pub(super) fn pass<O: Copy>(dev: &Device, seqs: &Sequences<O>, n: usize, kind: PassKind) -> Self {
        let sms = dev.multiprocessors as usize;
        let shorter = match kind {
            PassKind::Posterior => true,
            PassKind::Forward => !loglik_batched(dev, n, seqs.len()) || forward_tiles(n, seqs.len()) > sms,
            PassKind::Viterbi => !viterbi_batched(dev, n, seqs.len()) || viterbi_tiles(n, seqs.len()) > sms,
        };
        Spread::Pass { work: work(seqs, n), shorter }
    }

    fn gains(self) -> bool {
        match self {
            Spread::Fit { counts, work } => counts <= SPREAD_FIT_COUNTS && work >= SPREAD_WORK,
            Spread::Pass { work, shorter } => shorter && work >= SPREAD_WORK,
        }
    }
}

/// The work of a call over `seqs` with `n` states, for [`Spread`].
pub(super) fn work<O: Copy>(seqs: &Sequences<O>, n: usize) -> usize {
    seqs.total().saturating_mul(n)
}

/// The shares of `seqs`: one per usable device where `spread` gains from
/// it (else one), or `exec.gpu_parts` given to the devices in turn.
pub(super) fn shares<O: Copy>(seqs: &Sequences<O>, exec: &Exec, spread: Spread) -> Result<Vec<Share>> {
    let devices = gpu::devices()?;
    let parts = match exec.gpu_parts {
        0 if spread.gains() => devices.len(),
        0 => 1,
        k => k,
    };
    let ranges = gpu::split_even(seqs.offsets.windows(2).map(|w| w[1] - w[0] + 1), parts.max(1));
    Ok(ranges.into_iter().enumerate().map(|(k, range)| Share { dev: &devices[k % devices.len()], range }).collect())
}

/// The shares' sequence counts and observation counts times `per`.
pub(super) fn share_lens<'a, O: Copy>(shares: &'a [Share], seqs: &'a Sequences<O>, per: usize) -> (impl Iterator<Item = usize> + 'a, impl Iterator<Item = usize> + 'a) {
    (shares.iter().map(|s| s.range.len()), shares.iter().map(move |s| (seqs.offsets[s.range.end] - seqs.offsets[s.range.start]) * per))
}

/// `f` on every share of `seqs` with its part `w` of `work` (say, the
/// slices of the call's results it writes), each device's shares in order
/// on a thread of its own; the results in share order.
pub(super) fn on_shares<O, W, T, F>(shares: &[Share], seqs: &Sequences<O>, exec: &Exec, work: Vec<W>, f: F) -> Result<Vec<T>>
where
    O: Copy + Send + Sync,
    W: Send,
    T: Send,
    F: Fn(&ShareSeqs<O>, W) -> Result<T> + Sync,
{
    if work.len() != shares.len() {
        return Err(Error::Internal("a share without its part of the work".into()));
    }
    if let [one] = shares {
        let w = work.into_iter().next().ok_or_else(|| Error::Internal("a share without its part of the work".into()))?;
        return Ok(vec![f(&one.of(seqs), w)?]);
    }
    let by_device = by_device(shares);
    let mut work: Vec<Option<W>> = work.into_iter().map(Some).collect();
    let mut out: Vec<Option<Result<T>>> = shares.iter().map(|_| None).collect();
    let t0 = Instant::now();
    let mut spans = Vec::new();
    std::thread::scope(|scope| {
        let (f, devices) = (&f, by_device.len());
        let handles: Vec<_> = by_device
            .iter()
            .enumerate()
            .map(|(g, ks)| {
                let mine: Vec<(usize, W)> = ks.iter().filter_map(|&k| work[k].take().map(|w| (k, w))).collect();
                // Each device's thread with its share of the call's CPU threads.
                scope.spawn(move || {
                    mine.into_iter()
                        .map(|(k, w)| {
                            let r = exec.install_part(g, devices, || {
                                let start = Instant::now();
                                (start, f(&shares[k].of(seqs), w), Instant::now())
                            });
                            (k, r.map(|(start, r, end)| (r, (start, end))))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(done) => done.into_iter().for_each(|(k, r)| {
                    out[k] = Some(r.and_then(|(r, span)| {
                        spans.push(span);
                        r
                    }))
                }),
                Err(_) => return Err(Error::BackendUnavailable("a GPU worker thread panicked".into())),
            }
        }
        Ok(())
    })?;
    record_spans(t0, &spans);
    out.into_iter().map(|r| r.unwrap_or_else(|| Err(Error::Internal("a share of the sequences was not run".into())))).collect()
}

/// The phases of a spread call for `bulkem-bench`: how long its shares
/// waited for their threads (the longest wait), ran (the shortest and the
/// longest), and how long the call then took to gather them.
fn record_spans(t0: Instant, spans: &[(Instant, Instant)]) {
    let secs = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
    let (Some(first_end), Some(last_end)) = (spans.iter().map(|s| s.1).min(), spans.iter().map(|s| s.1).max()) else { return };
    gpu::timing::record_secs("shares started", spans.iter().map(|s| secs(t0, s.0)).fold(0.0, f64::max));
    gpu::timing::record_secs("shortest share", spans.iter().map(|s| secs(s.0, s.1)).fold(f64::INFINITY, f64::min));
    gpu::timing::record_secs("longest share", spans.iter().map(|s| secs(s.0, s.1)).fold(0.0, f64::max));
    gpu::timing::record_secs("shares' ends apart", secs(first_end, last_end));
    gpu::timing::record("shares gathered", last_end);
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
    B: Fn(&ShareSeqs<E::Obs>, &mut dyn FnMut(&mut dyn ShareEngine<E>) -> Result<()>) -> Result<()> + Sync,
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
                let part = share.of(seqs);
                let (part, replies) = (&part, answers.clone());
                let served = exec.install_part(k, parts, move || build(part, &mut |engine| {
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

/// One E-step from `model` over every share (each builds its engine with
/// `build`, as for [`fit_shares`]): the counts summed on the host in share
/// order, and the log-likelihood.
pub(super) fn e_step_shares<E, B>(shares: &[Share], seqs: &Sequences<E::Obs>, model: &HmmModel<E>, exec: &Exec, build: B) -> Result<(Counts, f64)>
where
    E: Emission,
    B: Fn(&ShareSeqs<E::Obs>, &mut dyn FnMut(&mut dyn ShareEngine<E>) -> Result<()>) -> Result<()> + Sync,
{
    let parts = on_shares(shares, seqs, exec, vec![(); shares.len()], |share, ()| {
        let mut got = None;
        build(share, &mut |engine| {
            let (ll, _) = engine.load(model)?;
            got = Some((engine.counts()?, ll));
            Ok(())
        })?;
        got.ok_or_else(|| Error::Internal("no Baum-Welch engine was built".into()))
    })?;
    let mut parts = parts.into_iter();
    let (mut total, mut ll) = parts.next().ok_or_else(|| Error::Internal("an E-step over no shares".into()))?;
    for (c, l) in parts {
        total.add(&c);
        ll += l;
    }
    Ok((total, ll))
}
