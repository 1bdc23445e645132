//! Simulation from an HMM, one keyed random stream per sequence, so the
//! result does not depend on the thread count.

use rayon::prelude::*;

use crate::error::Result;
use crate::exec::Exec;
use crate::memory;
use crate::rng::KeyedStream;

use super::emission::categorical::categorical;
use super::emission::Emission;
use super::model::HmmModel;
use super::passes::zeroed;
use super::size::{HmmJob, Pass};
use super::sequences::Sequences;

/// Symbols per unit of parallel work, and between monitor polls.
const PIECE: usize = 1 << 16;

/// Simulate one sequence per entry of `lengths` (sequence i keyed by
/// (seed, i)); returns the symbols and the hidden states (flat, 0-based).
/// The memory is checked first ([`HmmJob`]; a caller that copies the
/// result checks it with its copies before), the buffers are allocated
/// fallibly, and the monitor is polled.
pub fn simulate_with<E: Emission>(model: &HmmModel<E>, lengths: &[usize], seed: u64, exec: &Exec) -> Result<(Sequences<E::Obs>, Vec<u32>)> {
    HmmJob::new(Pass::Simulate, model.n_states, model.emission.n_stats(), lengths.iter().copied(), exec.threads).ensure()?;
    let total = lengths.iter().try_fold(0usize, |a, &l| a.checked_add(l)).ok_or_else(|| crate::error::Error::OutOfMemory {
        what: "the simulated sequences".into(),
        needed: u128::MAX,
        available: memory::available(),
    })?;
    let mut symbols = zeroed::<E::Obs>(total, "the simulated observations")?;
    let mut states = zeroed::<u32>(total, "the simulated states")?;
    // Each sequence's part of both outputs, in sequence order.
    let mut parts = Vec::with_capacity(lengths.len());
    let (mut sym_rest, mut st_rest) = (&mut symbols[..], &mut states[..]);
    for (i, &len) in lengths.iter().enumerate() {
        let (a, b) = std::mem::take(&mut sym_rest).split_at_mut(len);
        let (c, d) = std::mem::take(&mut st_rest).split_at_mut(len);
        parts.push((i, a, c));
        sym_rest = b;
        st_rest = d;
    }
    let n = model.n_states;
    exec.install(|| {
        parts.into_par_iter().try_for_each(|(i, obs, hidden)| {
            let mut rng = KeyedStream::new(seed, i as u64, 0);
            let mut state = 0usize;
            for (t, (o, h)) in obs.iter_mut().zip(hidden.iter_mut()).enumerate() {
                if t % PIECE == PIECE - 1 {
                    exec.monitor.check()?;
                }
                state = if t == 0 {
                    categorical(&model.start, rng.uniform())
                } else {
                    categorical(&model.trans[state * n..(state + 1) * n], rng.uniform())
                };
                *h = state as u32;
                *o = model.emission.sample(state, &mut rng);
            }
            exec.monitor.check()
        })
    })??;
    let seqs = Sequences::from_lengths(symbols, lengths)?;
    Ok((seqs, states))
}

/// [`simulate_with`] on every CPU core, for callers without an [`Exec`]
/// (tests, benchmarks). Panics when the memory is not there.
pub fn simulate<E: Emission>(model: &HmmModel<E>, lengths: &[usize], seed: u64) -> (Sequences<E::Obs>, Vec<u32>) {
    match simulate_with(model, lengths, seed, &Exec::cpu()) {
        Ok(out) => out,
        Err(e) => panic!("hmm::simulate: {e}"),
    }
}
