//! Categorical emissions: state i emits symbol k (0-based) with
//! probability `probs[i * V + k]`. The linear rows are the table by symbol,
//! so a time step reads one contiguous row and computes nothing.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::memory;
use crate::rng::KeyedStream;

use super::super::model::check_stochastic;
use super::super::sequences::Sequences;
use super::{Emission, EmissionFit, MStep, Row, Rows, Space};

/// N x V emission probabilities, row-major; exact zeros allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct Categorical {
    pub n_states: usize,
    pub n_symbols: usize,
    pub probs: Vec<f64>,
}

impl Categorical {
    /// Validate: N x V values, every row a probability vector.
    pub fn new(n_states: usize, n_symbols: usize, probs: Vec<f64>) -> Result<Self> {
        if n_symbols == 0 {
            return Err(Error::arg("emis", "must have at least one symbol (column)"));
        }
        if probs.len() != n_states * n_symbols {
            return Err(Error::arg("emis", format!("must have {n_states} rows (one per state) of {n_symbols} symbols, not {} values", probs.len())));
        }
        check_stochastic("emis", &probs, n_symbols)?;
        Ok(Categorical { n_states, n_symbols, probs })
    }

    /// The table by symbol: `out[k * N + i]` = P(symbol k | state i), so one
    /// time step reads one contiguous row.
    pub fn by_symbol(&self) -> Result<Vec<f64>> {
        crate::hmm::tables::transpose_map(&self.probs, self.n_states, self.n_symbols, |p| p)
    }

    /// [`Categorical::by_symbol`] of the logs.
    pub fn log_by_symbol(&self) -> Result<Vec<f64>> {
        crate::hmm::tables::transpose_map(&self.probs, self.n_states, self.n_symbols, f64::ln)
    }

    /// The smallest positive probability (+inf where none).
    pub fn smallest(&self) -> f64 {
        crate::hmm::tables::min_positive(&self.probs)
    }
}

/// The table by symbol, as probabilities or logs.
pub struct CategoricalRows {
    n: usize,
    table: Arc<Vec<f64>>,
    min: f64,
}

impl CategoricalRows {
    /// The table by symbol, `[k * N + i]` (probabilities or logs).
    pub fn table(&self) -> &[f64] {
        &self.table
    }
}

impl Rows for CategoricalRows {
    type Obs = u32;

    #[inline]
    fn row<'a>(&'a self, o: u32, _: &'a mut [f64]) -> Row<'a> {
        let k = o as usize;
        Row { values: &self.table[k * self.n..(k + 1) * self.n], shift: 0.0, min: self.min }
    }

    fn normalised(&self) -> bool {
        false
    }

    fn smallest(&self) -> f64 {
        self.min
    }
}

impl Emission for Categorical {
    type Obs = u32;
    type Shape = usize;
    type Rows = CategoricalRows;
    const NAME: &'static str = "categorical";

    fn n_states(&self) -> usize {
        self.n_states
    }

    fn shape(&self) -> usize {
        self.n_symbols
    }

    fn describe_shape(v: &usize) -> String {
        format!("{v} symbols")
    }

    fn check_shape(v: &usize) -> Option<Error> {
        (*v == 0).then(|| Error::arg("n.symbols", "must be at least 1"))
    }

    fn n_stats_of(v: &usize) -> usize {
        *v
    }

    fn free_parameters(&self) -> usize {
        self.n_states * (self.n_symbols - 1)
    }

    fn check_obs(v: &usize, o: u32) -> Option<String> {
        ((o as usize) >= *v).then(|| format!("symbol {}", o as u64 + 1))
    }

    fn obs_ok(v: &usize, o: u32) -> bool {
        (o as usize) < *v
    }

    fn obs_rule(v: &usize) -> String {
        format!("symbols must be between 1 and {v}")
    }

    fn rows(&self, space: Space) -> Result<CategoricalRows> {
        let table = if space == Space::Log { self.log_by_symbol()? } else { self.by_symbol()? };
        Ok(CategoricalRows { n: self.n_states, table: Arc::new(table), min: self.smallest() })
    }

    #[inline]
    fn add_stats(&self, o: u32, gamma: &[f64], stats: &mut [f64]) {
        let (n, k) = (self.n_states, o as usize);
        stats[k * n..(k + 1) * n].iter_mut().zip(gamma).for_each(|(x, g)| *x += g);
    }

    fn m_step(&self, stats: &[f64], fit: &EmissionFit) -> MStep<Self> {
        let (n, v) = (self.n_states, self.n_symbols);
        let mut next = self.clone();
        for i in 0..n {
            normalise(&mut next.probs[i * v..(i + 1) * v], (0..v).map(|k| stats[k * n + i]), fit.pseudocount);
        }
        MStep { emission: next, floored: vec![false; n] }
    }

    fn sample(&self, state: usize, rng: &mut KeyedStream) -> u32 {
        let v = self.n_symbols;
        categorical(&self.probs[state * v..(state + 1) * v], rng.uniform()) as u32
    }

    fn random(n: usize, v: &usize, _: &Sequences<u32>, rng: &mut KeyedStream) -> Result<Self> {
        let v = *v;
        let mut probs = memory::try_vec(n * v, 0.0, "a random starting model")?;
        for i in 0..n {
            simplex(&mut probs[i * v..(i + 1) * v], rng);
        }
        Ok(Categorical { n_states: n, n_symbols: v, probs })
    }
}

/// Normalise `counts + pc` into `out`; a row with no mass keeps `out`'s old
/// values (that row does not affect the likelihood, so EM stays monotone).
pub(crate) fn normalise(out: &mut [f64], counts: impl Iterator<Item = f64>, pc: f64) {
    let row: Vec<f64> = counts.map(|c| c + pc).collect();
    let s: f64 = row.iter().sum();
    if s > 0.0 && s.is_finite() {
        out.iter_mut().zip(&row).for_each(|(o, c)| *o = c / s);
    }
}

/// A probability vector drawn uniformly from its simplex (Dirichlet(1):
/// normalised Exp(1) draws).
pub(crate) fn simplex(x: &mut [f64], rng: &mut KeyedStream) {
    // Uniform on (0, 1) from the top 53 bits; never 0, so -ln is finite.
    x.iter_mut().for_each(|p| *p = -(((rng.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)).ln());
    let s: f64 = x.iter().sum();
    x.iter_mut().for_each(|p| *p /= s);
}

/// Index drawn from the probability vector `p` by inversion; rounding past
/// the last cumulative sum falls back to the last positive entry.
pub(crate) fn categorical(p: &[f64], u: f64) -> usize {
    let mut cum = 0.0;
    for (k, &q) in p.iter().enumerate() {
        cum += q;
        if u < cum && q > 0.0 {
            return k;
        }
    }
    p.iter().rposition(|&q| q > 0.0).unwrap_or(0)
}
