//! Convergence diagnostics of Vehtari, Gelman, Simpson, Carpenter and
//! Buerkner (2021): rank-normalised split R-hat and bulk effective sample
//! size, computed as the `posterior` R package computes them.
//!
//! Draws of one parameter are given as `chains` slices of equal length.

/// Inverse of the standard normal distribution function (Acklam's rational
/// approximation, relative error below 1.2e-9: ample for rank
/// normalisation, whose inputs are ranks).
pub fn qnorm(p: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) {
        return if p == 0.0 { f64::NEG_INFINITY } else if p == 1.0 { f64::INFINITY } else { f64::NAN };
    }
    const A: [f64; 6] = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.383577518672690e2, -3.066479806614716e1, 2.506628277459239];
    const B: [f64; 5] = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
    const C: [f64; 6] = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
    const D: [f64; 4] = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
    const LOW: f64 = 0.02425;
    let x = if p < LOW {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5]) / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5]) / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    x
}

/// Split every chain in two halves (the middle draw of an odd length is
/// dropped).
fn split(chains: &[&[f64]]) -> Vec<Vec<f64>> {
    let n = chains.first().map_or(0, |c| c.len());
    if n < 2 {
        return chains.iter().map(|c| c.to_vec()).collect();
    }
    let half = n / 2;
    let second = n.div_ceil(2);
    chains.iter().flat_map(|c| [c[..half].to_vec(), c[second..].to_vec()]).collect()
}

/// Replace every value by qnorm((rank - 3/8) / (S + 1/4)), ranks pooled
/// over all chains, ties averaged.
fn z_scale(chains: &mut [Vec<f64>]) {
    let mut all: Vec<(f64, usize, usize)> = Vec::new();
    for (c, v) in chains.iter().enumerate() {
        all.extend(v.iter().enumerate().map(|(i, &x)| (x, c, i)));
    }
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let s = all.len() as f64;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        let z = qnorm((rank - 0.375) / (s + 0.25));
        for &(_, c, k) in &all[i..=j] {
            chains[c][k] = z;
        }
        i = j + 1;
    }
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

fn var(x: &[f64]) -> f64 {
    let m = mean(x);
    x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (x.len() as f64 - 1.0)
}

/// NA (NaN here) when any draw is non-finite or all are (nearly) equal.
fn degenerate(chains: &[&[f64]]) -> bool {
    let mut it = chains.iter().flat_map(|c| c.iter().copied());
    let first = match it.next() {
        Some(v) => v,
        None => return true,
    };
    let mut all_equal = true;
    for v in chains.iter().flat_map(|c| c.iter().copied()) {
        if !v.is_finite() {
            return true;
        }
        if (v - first).abs() > f64::EPSILON * first.abs().max(1.0) {
            all_equal = false;
        }
    }
    all_equal
}

fn rhat_basic(chains: &[Vec<f64>]) -> f64 {
    let n = chains[0].len() as f64;
    let means: Vec<f64> = chains.iter().map(|c| mean(c)).collect();
    let within = mean(&chains.iter().map(|c| var(c)).collect::<Vec<_>>());
    let between = n * var(&means);
    ((between / within + n - 1.0) / n).sqrt()
}

/// Rank-normalised split R-hat: the larger of the bulk and tail (folded)
/// versions. NaN when undefined.
pub fn rhat(chains: &[&[f64]]) -> f64 {
    if degenerate(chains) || chains[0].len() < 2 {
        return f64::NAN;
    }
    let mut bulk = split(chains);
    z_scale(&mut bulk);
    let mut all: Vec<f64> = chains.iter().flat_map(|c| c.iter().copied()).collect();
    all.sort_by(f64::total_cmp);
    let m = all.len();
    let median = if m % 2 == 1 { all[m / 2] } else { 0.5 * (all[m / 2 - 1] + all[m / 2]) };
    let folded: Vec<Vec<f64>> = chains.iter().map(|c| c.iter().map(|v| (v - median).abs()).collect()).collect();
    let folded_refs: Vec<&[f64]> = folded.iter().map(|c| &c[..]).collect();
    let mut tail = split(&folded_refs);
    z_scale(&mut tail);
    rhat_basic(&bulk).max(rhat_basic(&tail))
}

/// Bulk effective sample size: ESS of the rank-normalised split chains.
pub fn ess_bulk(chains: &[&[f64]]) -> f64 {
    if degenerate(chains) || chains[0].len() < 4 {
        return f64::NAN;
    }
    let mut s = split(chains);
    z_scale(&mut s);
    ess(&s)
}

/// Geyer's initial monotone sequence estimator over several chains, with
/// autocovariances computed lag by lag only as far as the sequence needs.
pub fn ess(chains: &[Vec<f64>]) -> f64 {
    let m = chains.len();
    let n = chains[0].len();
    if n < 3 {
        return f64::NAN;
    }
    let centred: Vec<Vec<f64>> = chains.iter().map(|c| {
        let mu = mean(c);
        c.iter().map(|v| v - mu).collect()
    }).collect();
    // Mean over chains of the biased autocovariance at `lag`.
    let acov = |lag: usize| -> f64 {
        if lag >= n {
            return 0.0;
        }
        centred.iter().map(|c| c[..n - lag].iter().zip(&c[lag..]).map(|(a, b)| a * b).sum::<f64>() / n as f64).sum::<f64>() / m as f64
    };
    let nf = n as f64;
    let mean_var = acov(0) * nf / (nf - 1.0);
    let mut var_plus = mean_var * (nf - 1.0) / nf;
    if m > 1 {
        var_plus += var(&chains.iter().map(|c| mean(c)).collect::<Vec<_>>());
    }
    let rho = |lag: usize| 1.0 - (mean_var - acov(lag)) / var_plus;
    // rho_hat[t] for t = 0, 1, ... (0-based lags).
    let mut rho_hat = vec![0.0; n];
    let mut t = 0usize;
    let mut even = 1.0;
    rho_hat[0] = even;
    let mut odd = rho(1);
    rho_hat[1] = odd;
    while t + 5 < n && (even + odd).is_finite() && even + odd > 0.0 {
        t += 2;
        even = rho(t);
        odd = rho(t + 1);
        if even + odd >= 0.0 {
            rho_hat[t] = even;
            rho_hat[t + 1] = odd;
        }
    }
    let max_t = t;
    if even > 0.0 {
        rho_hat[max_t] = even;
    }
    // Make the sums of pairs monotone.
    let mut t = 0usize;
    while t + 4 <= max_t {
        t += 2;
        if rho_hat[t] + rho_hat[t + 1] > rho_hat[t - 2] + rho_hat[t - 1] {
            rho_hat[t] = (rho_hat[t - 2] + rho_hat[t - 1]) / 2.0;
            rho_hat[t + 1] = rho_hat[t];
        }
    }
    let total = (m * n) as f64;
    // R's rho_hat_t[1:max_t] is the first element alone when max_t = 0.
    let head: f64 = if max_t == 0 { rho_hat[0] } else { rho_hat[..max_t].iter().sum() };
    let tau_hat = -1.0 + 2.0 * head + rho_hat[max_t];
    let tau_hat = tau_hat.max(1.0 / total.log10());
    total / tau_hat
}

/// Tail effective sample size (posterior's `ess_tail`): the smaller ESS of
/// the indicators I(x <= q05) and I(x <= q95), q the pooled quantiles
/// (type 7), each the ESS of the split chains. NaN when undefined.
pub fn ess_tail(chains: &[&[f64]]) -> f64 {
    if degenerate(chains) || chains[0].len() < 4 {
        return f64::NAN;
    }
    let mut all: Vec<f64> = chains.iter().flat_map(|c| c.iter().copied()).collect();
    all.sort_by(f64::total_cmp);
    let quantile = |p: f64| {
        let h = (all.len() - 1) as f64 * p;
        let lo = h.floor() as usize;
        let hi = (lo + 1).min(all.len() - 1);
        all[lo] + (h - lo as f64) * (all[hi] - all[lo])
    };
    let below = |cut: f64| -> f64 {
        let ind: Vec<Vec<f64>> = chains.iter().map(|c| c.iter().map(|&v| (v <= cut) as u8 as f64).collect()).collect();
        let refs: Vec<&[f64]> = ind.iter().map(|c| &c[..]).collect();
        if degenerate(&refs) {
            return f64::NAN;
        }
        ess(&split(&refs))
    };
    below(quantile(0.05)).min(below(quantile(0.95)))
}

/// Convergence diagnostics of every parameter, in parameter order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Diagnostics {
    pub rhat: Vec<f64>,
    pub ess_bulk: Vec<f64>,
    pub ess_tail: Vec<f64>,
}

impl Diagnostics {
    fn extend(&mut self, o: Diagnostics) {
        self.rhat.extend(o.rhat);
        self.ess_bulk.extend(o.ess_bulk);
        self.ess_tail.extend(o.ess_tail);
    }
}

/// R-hat, bulk and (with `tail`; NaN otherwise) tail ESS of parameters
/// `params`, parameter `p`'s chain `c` being `draws_of(p, c)`; parameters
/// in parallel.
pub fn diagnose<'a>(params: std::ops::Range<usize>, chains: usize, tail: bool, draws_of: impl Fn(usize, usize) -> &'a [f64] + Sync) -> Diagnostics {
    use rayon::prelude::*;
    let per: Vec<(f64, f64, f64)> = params
        .into_par_iter()
        .map(|p| {
            let refs: Vec<&[f64]> = (0..chains).map(|c| draws_of(p, c)).collect();
            (rhat(&refs), ess_bulk(&refs), if tail { ess_tail(&refs) } else { f64::NAN })
        })
        .collect();
    let mut out = Diagnostics::default();
    for (r, b, t) in per {
        out.rhat.push(r);
        out.ess_bulk.push(b);
        out.ess_tail.push(t);
    }
    out
}

/// As [`diagnose`], in blocks of parameters with a look at `monitor`
/// between blocks, so that the diagnostics of millions of parameters stop
/// soon after a Ctrl-C.
pub fn diagnose_watched<'a>(
    n_params: usize,
    chains: usize,
    draws_per_param: usize,
    tail: bool,
    draws_of: impl Fn(usize, usize) -> &'a [f64] + Sync,
    monitor: &crate::exec::Monitor,
) -> crate::error::Result<Diagnostics> {
    // About a million draws per block.
    let block = (1_000_000 / draws_per_param.max(1)).max(1);
    let mut out = Diagnostics::default();
    for start in (0..n_params).step_by(block) {
        monitor.check()?;
        out.extend(diagnose(start..(start + block).min(n_params), chains, tail, &draws_of));
    }
    Ok(out)
}

/// The diagnostics of every parameter of a kept x chains x parameters
/// array (iteration fastest), watched as [`diagnose_watched`].
pub fn diagnose_array(draws: &[f64], kept: usize, chains: usize, tail: bool, monitor: &crate::exec::Monitor) -> crate::error::Result<Diagnostics> {
    let per = kept * chains;
    if per == 0 {
        return Ok(Diagnostics::default());
    }
    let start = |p: usize, c: usize| per * p + kept * c;
    diagnose_watched(draws.len() / per, chains, per, tail, |p, c| &draws[start(p, c)..start(p, c) + kept], monitor)
}
