//! Densities and posteriors of a fitted mixture at any x (R's predict(),
//! plots and d*mix helpers), from the families' textbook log-densities.

use super::family::Family;
use super::fit::MixParams;

/// log(alpha_j f_j(x_i)), an n x M matrix stored column by column; -Inf
/// where x_i is outside the family's support (and at +-Inf), NaN at NaN.
pub fn component_log_densities(family: Family, x: &[f64], p: &MixParams) -> Vec<f64> {
    let m = p.components();
    let second = |j: usize| p.scale.get(j).copied().unwrap_or(f64::NAN);
    let one = move |j: usize, xi: f64| match xi {
        _ if xi.is_nan() => f64::NAN,
        _ if xi.is_infinite() => f64::NEG_INFINITY,
        _ => p.alpha[j].ln() + family.log_density(xi, p.mu[j], second(j)),
    };
    (0..m).flat_map(|j| x.iter().map(move |&xi| one(j, xi))).collect()
}

/// log sum_j exp(l_j), stable; -Inf when every term is -Inf.
fn log_sum_exp(l: impl Iterator<Item = f64> + Clone) -> f64 {
    if l.clone().any(f64::is_nan) {
        return f64::NAN;
    }
    let top = l.clone().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY || !top.is_finite() {
        return top;
    }
    top + l.map(|v| (v - top).exp()).sum::<f64>().ln()
}

/// log of the mixture density (probability for counts) at each x.
pub fn mixture_log_density(family: Family, x: &[f64], p: &MixParams) -> Vec<f64> {
    let (n, l) = (x.len(), component_log_densities(family, x, p));
    let m = p.components();
    (0..n).map(|i| log_sum_exp((0..m).map(|j| l[j * n + i]))).collect()
}

/// Posterior probabilities of the components at each x, n x M column by
/// column; NaN rows where the mixture density is 0 (x outside the support).
pub fn posterior_at(family: Family, x: &[f64], p: &MixParams) -> Vec<f64> {
    let (n, mut l) = (x.len(), component_log_densities(family, x, p));
    let m = p.components();
    for i in 0..n {
        let total = log_sum_exp((0..m).map(|j| l[j * n + i]));
        for j in 0..m {
            l[j * n + i] = if total.is_finite() { (l[j * n + i] - total).exp() } else { f64::NAN };
        }
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posterior_rows_sum_to_one_and_density_integrates() {
        let p = MixParams { alpha: vec![0.4, 0.6], mu: vec![2.0, 9.0], scale: vec![3.0, 1.5] };
        let x: Vec<f64> = (1..4000).map(|i| i as f64 * 0.01).collect();
        let post = posterior_at(Family::Gamma, &x, &p);
        for i in 0..x.len() {
            assert!((post[i] + post[x.len() + i] - 1.0).abs() < 1e-12);
        }
        let mass: f64 = mixture_log_density(Family::Gamma, &x, &p).iter().map(|l| l.exp() * 0.01).sum();
        assert!((mass - 1.0).abs() < 1e-3, "{mass}");
        let counts: Vec<f64> = (0..200).map(|k| k as f64).collect();
        let q = MixParams { alpha: vec![0.3, 0.7], mu: vec![1.5, 20.0], scale: vec![f64::NAN; 2] };
        let total: f64 = mixture_log_density(Family::Poisson, &counts, &q).iter().map(|l| l.exp()).sum();
        assert!((total - 1.0).abs() < 1e-12, "{total}");
        assert!(posterior_at(Family::Gamma, &[-1.0], &p)[0].is_nan());
    }
}
