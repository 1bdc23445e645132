//! Simulation from an HMM, one keyed random stream per sequence, so the
//! result does not depend on the thread count.

use rayon::prelude::*;

use crate::rng::KeyedStream;

use super::model::HmmModel;
use super::sequences::Sequences;

/// Uniform on [0, 1) from the top 53 bits.
fn uniform(rng: &mut KeyedStream) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Index drawn from the probability vector `p` by inversion; rounding past
/// the last cumulative sum falls back to the last positive entry.
fn categorical(p: &[f64], u: f64) -> usize {
    let mut cum = 0.0;
    for (k, &q) in p.iter().enumerate() {
        cum += q;
        if u < cum && q > 0.0 {
            return k;
        }
    }
    p.iter().rposition(|&q| q > 0.0).unwrap_or(0)
}

/// Simulate one sequence per entry of `lengths` (sequence i keyed by
/// (seed, i)); returns the symbols and the hidden states (flat, 0-based).
pub fn simulate(model: &HmmModel, lengths: &[usize], seed: u64) -> (Sequences, Vec<u32>) {
    let (n, v) = (model.n_states, model.n_symbols);
    let parts: Vec<(Vec<u32>, Vec<u32>)> = lengths
        .par_iter()
        .enumerate()
        .map(|(i, &len)| {
            let mut rng = KeyedStream::new(seed, i as u64, 0);
            let (mut obs, mut states) = (Vec::with_capacity(len), Vec::with_capacity(len));
            let mut state = 0usize;
            for t in 0..len {
                state = if t == 0 {
                    categorical(&model.start, uniform(&mut rng))
                } else {
                    categorical(&model.trans[state * n..(state + 1) * n], uniform(&mut rng))
                };
                states.push(state as u32);
                obs.push(categorical(&model.emis[state * v..(state + 1) * v], uniform(&mut rng)) as u32);
            }
            (obs, states)
        })
        .collect();
    let mut symbols = Vec::with_capacity(lengths.iter().sum());
    let mut states = Vec::with_capacity(symbols.capacity());
    for (o, s) in parts {
        symbols.extend(o);
        states.extend(s);
    }
    // Lengths add up by construction.
    let seqs = Sequences::from_lengths(symbols, lengths).unwrap_or_default();
    (seqs, states)
}
