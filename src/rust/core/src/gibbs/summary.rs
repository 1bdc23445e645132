//! Posterior summaries of many parameters' draws: quantiles as R's
//! `stats::quantile()` computes them (type 7), each parameter's draws
//! sorted once, parameters in parallel. R's own `apply(draws, 2,
//! quantile)` took 3.7 s for 10^4 parameters of 9,000 draws on two cores
//! (BENCHMARKS.md), and grows with the parameters.

use crate::error::Result;
use crate::exec::Monitor;

/// Quantiles `probs` (in [0, 1]) of each run of `per` values in `draws`,
/// laid out parameters fastest (R's parameters x probs matrix), with R's
/// operations: index = 1 + (per - 1) p, lo and hi its floor and ceiling,
/// then x_lo, or (1 - h) x_lo + h x_hi with h = index - lo where index >
/// lo and x_hi differs from x_lo. NaN for a parameter with a NaN draw.
/// Blocks of parameters with a look at `monitor` between them.
pub fn quantiles(draws: &[f64], per: usize, probs: &[f64], monitor: &Monitor) -> Result<Vec<f64>> {
    use rayon::prelude::*;
    let params = if per == 0 { 0 } else { draws.len() / per };
    let mut out = vec![f64::NAN; params * probs.len()];
    // About a million draws per block.
    let block = (1_000_000 / per.max(1)).max(1);
    for start in (0..params).step_by(block) {
        monitor.check()?;
        let end = (start + block).min(params);
        let rows: Vec<Vec<f64>> = draws[start * per..end * per].par_chunks(per).map(|x| of_one(x, probs)).collect();
        for (p, row) in (start..end).zip(rows) {
            for (j, q) in row.into_iter().enumerate() {
                out[j * params + p] = q;
            }
        }
    }
    Ok(out)
}

fn of_one(x: &[f64], probs: &[f64]) -> Vec<f64> {
    if x.iter().any(|v| v.is_nan()) {
        return vec![f64::NAN; probs.len()];
    }
    let mut s = x.to_vec();
    s.sort_unstable_by(f64::total_cmp);
    let n = s.len();
    probs
        .iter()
        .map(|&p| {
            let index = 1.0 + (n - 1) as f64 * p;
            let (lo, hi) = (index.floor(), index.ceil());
            let (at_lo, at_hi) = (s[lo as usize - 1], s[hi as usize - 1]);
            if index > lo && at_hi != at_lo {
                let h = index - lo;
                (1.0 - h) * at_lo + h * at_hi
            } else {
                at_lo
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_7_quantiles_parameters_fastest() {
        // Two parameters of five draws: 1..5 (shuffled) and 10 x that.
        let draws = [3.0, 1.0, 5.0, 2.0, 4.0, 30.0, 10.0, 50.0, 20.0, 40.0];
        let q = quantiles(&draws, 5, &[0.0, 0.1, 0.5, 1.0], &Monitor::default()).unwrap();
        // index 1.4 for p = 0.1: 0.6 x 1 + 0.4 x 2.
        assert_eq!(q, vec![1.0, 10.0, 0.6 * 1.0 + 0.4 * 2.0, 0.6 * 10.0 + 0.4 * 20.0, 3.0, 30.0, 5.0, 50.0]);
        let nan = quantiles(&[1.0, f64::NAN], 2, &[0.5], &Monitor::default()).unwrap();
        assert!(nan[0].is_nan());
        assert!(quantiles(&[], 0, &[0.5], &Monitor::default()).unwrap().is_empty());
    }
}
