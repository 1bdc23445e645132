//! Convergence diagnostics of Vehtari, Gelman, Simpson, Carpenter and
//! Buerkner (2021): rank-normalised split R-hat and bulk effective sample
//! size, computed as the `posterior` R package computes them.
//!
//! Draws of one parameter are given as `chains` slices of equal length.
//! Each parameter's draws are sorted once ([`Sorted`]): the pooled order
//! gives the split chains' ranks, the median and quantiles, and, merged
//! outward from the median, the folded draws' order.

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

/// Chains of length `n` one after another in `x`.
fn rhat_basic(x: &[f64], n: usize) -> f64 {
    let chains: Vec<&[f64]> = x.chunks_exact(n).collect();
    let nf = n as f64;
    let means: Vec<f64> = chains.iter().map(|c| mean(c)).collect();
    let within = mean(&chains.iter().map(|c| var(c)).collect::<Vec<_>>());
    let between = nf * var(&means);
    ((between / within + nf - 1.0) / nf).sqrt()
}

/// Geyer's initial monotone sequence estimator over several chains, with
/// autocovariances computed lag by lag only as far as the sequence needs.
pub fn ess(chains: &[Vec<f64>]) -> f64 {
    let n = chains[0].len();
    let flat: Vec<f64> = chains.iter().flat_map(|c| c.iter().copied()).collect();
    ess_flat(&flat, n)
}

/// [`ess`] of the chains of length `n` one after another in `x`.
fn ess_flat(x: &[f64], n: usize) -> f64 {
    if n < 3 {
        return f64::NAN;
    }
    let m = x.len() / n;
    let mut centred = x.to_vec();
    let mut means = Vec::with_capacity(m);
    for c in centred.chunks_exact_mut(n) {
        let mu = mean(c);
        means.push(mu);
        c.iter_mut().for_each(|v| *v -= mu);
    }
    // Mean over chains of the biased autocovariance at `lag`.
    let acov = |lag: usize| -> f64 {
        if lag >= n {
            return 0.0;
        }
        centred.chunks_exact(n).map(|c| c[..n - lag].iter().zip(&c[lag..]).map(|(a, b)| a * b).sum::<f64>() / n as f64).sum::<f64>() / m as f64
    };
    let nf = n as f64;
    let mean_var = acov(0) * nf / (nf - 1.0);
    let mut var_plus = mean_var * (nf - 1.0) / nf;
    if m > 1 {
        var_plus += var(&means);
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

/// qnorm((rank - 3/8) / (S + 1/4)) for the ranks 1..=S of S values
/// without ties: every parameter with S draws shares them.
pub struct Scores {
    s: usize,
    z: Vec<f64>,
}

impl Scores {
    /// The scores of `chains` chains of `n` draws, split.
    pub fn for_split(chains: usize, n: usize) -> Self {
        let s = if n < 2 { 0 } else { chains * 2 * (n / 2) };
        let sf = s as f64;
        Scores { s, z: (0..s).map(|i| qnorm((i as f64 + 1.0 - 0.375) / (sf + 0.25))).collect() }
    }

    /// No table: every score computed.
    fn none() -> Self {
        Scores { s: usize::MAX, z: Vec::new() }
    }
}

/// The place of a draw left out of the split chains.
const DROPPED: u32 = u32::MAX;

/// One parameter's draws (`chains` of length n), sorted once: the pooled
/// order gives the ranks of the split chains, their median and quantiles,
/// and, merged outward from the median, the order of the folded draws.
struct Sorted<'a> {
    chains: &'a [&'a [f64]],
    n: usize,
    /// Draws in increasing order (total_cmp), each with its place among
    /// the split chains (DROPPED for the middle draw of an odd length).
    order: Vec<(f64, u32)>,
}

impl<'a> Sorted<'a> {
    fn new(chains: &'a [&'a [f64]]) -> Self {
        let n = chains[0].len();
        let (half, second) = (n / 2, n.div_ceil(2));
        let mut order: Vec<(f64, u32)> = Vec::with_capacity(n * chains.len());
        for (c, v) in chains.iter().enumerate() {
            let first = (2 * c * half) as u32;
            let later = ((2 * c + 1) * half) as u32;
            order.extend(v[..half].iter().enumerate().map(|(i, &x)| (x, first + i as u32)));
            order.extend(v[half..second].iter().map(|&x| (x, DROPPED)));
            order.extend(v[second..].iter().enumerate().map(|(i, &x)| (x, later + i as u32)));
        }
        // Equal keys under total_cmp have equal bits: their order does not matter.
        order.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        Sorted { chains, n, order }
    }

    fn median(&self) -> f64 {
        let m = self.order.len();
        if m % 2 == 1 { self.order[m / 2].0 } else { 0.5 * (self.order[m / 2 - 1].0 + self.order[m / 2].0) }
    }

    /// Type 7 quantile of the pooled draws.
    fn quantile(&self, p: f64) -> f64 {
        let all = &self.order;
        let h = (all.len() - 1) as f64 * p;
        let lo = h.floor() as usize;
        let hi = (lo + 1).min(all.len() - 1);
        all[lo].0 + (h - lo as f64) * (all[hi].0 - all[lo].0)
    }

    /// The split chains (two halves of every chain, the middle draw of an
    /// odd length dropped) one after another, each value replaced by
    /// qnorm((rank - 3/8) / (S + 1/4)), ranks pooled over the split chains
    /// and ties averaged; `sorted` gives (value, place) in increasing
    /// value order. The result and its chain length.
    fn z_split(&self, sorted: impl Iterator<Item = (f64, u32)>, scores: &Scores) -> (Vec<f64>, usize) {
        let half = self.n / 2;
        let len = 2 * self.chains.len() * half;
        let kept: Vec<(f64, u32)> = sorted.filter(|&(_, q)| q != DROPPED).collect();
        debug_assert_eq!(kept.len(), len);
        let mut out = vec![0.0; len];
        let s = len as f64;
        let table = if scores.s == len { Some(&scores.z) } else { None };
        let mut i = 0;
        while i < kept.len() {
            let mut j = i;
            while j + 1 < kept.len() && kept[j + 1].0 == kept[i].0 {
                j += 1;
            }
            let z = match table {
                Some(t) if i == j => t[i],
                _ => qnorm(((i + j) as f64 / 2.0 + 1.0 - 0.375) / (s + 0.25)),
            };
            for &(_, q) in &kept[i..=j] {
                out[q as usize] = z;
            }
            i = j + 1;
        }
        (out, half)
    }

    /// The bulk's split z-scores.
    fn bulk(&self, scores: &Scores) -> (Vec<f64>, usize) {
        self.z_split(self.order.iter().copied(), scores)
    }

    /// The folded draws |x - median|' split z-scores: the pooled order
    /// merged outward from the median is the folded draws' order.
    fn folded(&self, scores: &Scores) -> (Vec<f64>, usize) {
        let median = self.median();
        let ord = &self.order;
        let fold = |k: usize| (ord[k].0 - median).abs();
        // Draws at or below the median (ord[..above]) are taken downward,
        // the rest upward, the smaller folded value first.
        let above = ord.partition_point(|&(v, _)| v <= median);
        let (mut lo, mut hi) = (above, above);
        let merged = std::iter::from_fn(move || {
            let take_low = match (lo > 0, hi < ord.len()) {
                (false, false) => return None,
                (true, false) => true,
                (false, true) => false,
                (true, true) => fold(lo - 1) <= fold(hi),
            };
            let k = if take_low {
                lo -= 1;
                lo
            } else {
                hi += 1;
                hi - 1
            };
            Some((fold(k), ord[k].1))
        });
        self.z_split(merged, scores)
    }
}

/// Rank-normalised split R-hat, bulk and (with `tail`) tail ESS of one
/// parameter, as [`rhat`], [`ess_bulk`] and [`ess_tail`] compute them
/// (the same values), from one sort of its draws.
pub fn diagnostics_of(chains: &[&[f64]], tail: bool, scores: &Scores) -> (f64, f64, f64) {
    let n = chains.first().map_or(0, |c| c.len());
    if degenerate(chains) || n < 2 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let sorted = Sorted::new(chains);
    let (bulk, half) = sorted.bulk(scores);
    let (folded, _) = sorted.folded(scores);
    let rhat = rhat_basic(&bulk, half).max(rhat_basic(&folded, half));
    if n < 4 {
        return (rhat, f64::NAN, f64::NAN);
    }
    let ess_bulk = ess_flat(&bulk, half);
    let ess_tail = if tail { tail_ess(&sorted) } else { f64::NAN };
    (rhat, ess_bulk, ess_tail)
}

/// The smaller ESS of the indicators I(x <= q05) and I(x <= q95), each of
/// the split chains; NaN where every draw falls on one side of a cut.
fn tail_ess(sorted: &Sorted) -> f64 {
    let ord = &sorted.order;
    let below = |cut: f64| -> f64 {
        // The draws at or below the cut lead the pooled order.
        let count = ord.partition_point(|&(v, _)| v <= cut);
        if count == 0 || count == ord.len() {
            return f64::NAN;
        }
        let half = sorted.n / 2;
        let mut ind = vec![0.0; 2 * sorted.chains.len() * half];
        for &(_, q) in ord[..count].iter().filter(|&&(_, q)| q != DROPPED) {
            ind[q as usize] = 1.0;
        }
        ess_flat(&ind, half)
    };
    below(sorted.quantile(0.05)).min(below(sorted.quantile(0.95)))
}

/// Rank-normalised split R-hat: the larger of the bulk and tail (folded)
/// versions. NaN when undefined.
pub fn rhat(chains: &[&[f64]]) -> f64 {
    diagnostics_of(chains, false, &Scores::none()).0
}

/// Bulk effective sample size: ESS of the rank-normalised split chains.
pub fn ess_bulk(chains: &[&[f64]]) -> f64 {
    diagnostics_of(chains, false, &Scores::none()).1
}

/// Tail effective sample size (posterior's `ess_tail`): the smaller ESS of
/// the indicators I(x <= q05) and I(x <= q95), q the pooled quantiles
/// (type 7), each the ESS of the split chains. NaN when undefined.
pub fn ess_tail(chains: &[&[f64]]) -> f64 {
    diagnostics_of(chains, true, &Scores::none()).2
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
    let n = if params.is_empty() { 0 } else { draws_of(params.start, 0).len() };
    let scores = Scores::for_split(chains, n);
    let per: Vec<(f64, f64, f64)> = params
        .into_par_iter()
        .map(|p| {
            let refs: Vec<&[f64]> = (0..chains).map(|c| draws_of(p, c)).collect();
            diagnostics_of(&refs, tail, &scores)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The definitions, one diagnostic at a time, each sorting the draws
    /// it needs (the code before [`Sorted`]).
    mod reference {
        // The shared pieces (mean, var, degenerate, the ESS of given
        // chains) are the module's own.
        use super::super::{degenerate, ess, mean, qnorm, var};

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

    }

    /// A draw stream of `kind`: uniform, heavily tied, autocorrelated,
    /// sparse indicators, signed zeros among ties, constant.
    fn draws(kind: usize, len: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        let mut x = 0.0;
        (0..len)
            .map(|k| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let u = (s >> 11) as f64 / (1u64 << 53) as f64;
                match kind {
                    0 => u,
                    1 => (u * 5.0).floor(),
                    2 => {
                        x = 0.95 * x + u - 0.5;
                        x
                    }
                    3 => ((k % 7) == 0) as u8 as f64,
                    4 => if u < 0.5 { -0.0 } else { (u * 3.0).floor() - 1.0 },
                    _ => 3.0,
                }
            })
            .collect()
    }

    #[test]
    fn one_sort_gives_the_definitions_bits() {
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        for (chains, kept) in [(4, 1125), (4, 7), (1, 10), (3, 2), (2, 3), (4, 4), (2, 5), (8, 101), (4, 1), (1, 1)] {
            for kind in 0..6 {
                let x = draws(kind, chains * kept, (100 * chains + kept) as u64);
                let refs: Vec<&[f64]> = x.chunks_exact(kept).collect();
                let want = (reference::rhat(&refs), reference::ess_bulk(&refs), reference::ess_tail(&refs));
                for got in [diagnostics_of(&refs, true, &Scores::for_split(chains, kept)), (rhat(&refs), ess_bulk(&refs), ess_tail(&refs))] {
                    assert!(same(want.0, got.0) && same(want.1, got.1) && same(want.2, got.2), "{chains} x {kept}, kind {kind}: {want:?} vs {got:?}");
                }
            }
        }
    }
}
