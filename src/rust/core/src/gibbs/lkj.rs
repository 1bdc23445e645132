//! The LKJ prior of correlated coefficients (brms's default): Sigma = D
//! Omega D with Omega ~ LKJ(eta) (Lewandowski, Kurowicka and Joe 2009) and
//! each sd in D under the prior of tau. Not conjugate: Sigma is updated by
//! slice sampling its unconstrained coordinates, given the coefficients'
//! scatter matrix S = sum_g (beta_g - mu)(beta_g - mu)' of G vectors:
//!
//! ```text
//! theta = (u_1..u_K, y_1..y_M),  sd_k = e^(u_k),  z_m = tanh(y_m)
//! ```
//!
//! where the z_m are the canonical partial correlations, in the row order
//! of the Cholesky factor L of Omega ((1,0), (2,0), (2,1), (3,0), ...):
//! row i of L is z_(i,0), z_(i,1) sqrt(1 - z_(i,0)^2), ..., and its
//! diagonal the product of the sqrt(1 - z_(i,j)^2). Under LKJ(eta) the z
//! are independent, z_(i,j) ~ 2 Beta(b_j, b_j) - 1 with b_j = eta + (K - 2
//! - j) / 2, so with the Jacobians of tanh and exp:
//!
//! ```text
//! log p(theta | S) = sum_k [log prior(sd_k) + u_k] + sum_m b_(j(m)) log(1 - z_m^2)
//!                    - G (sum_k u_k + sum_i log L_ii) - tr(Omega^-1 D^-1 S D^-1) / 2
//! ```
//!
//! Each coordinate takes one slice update per sweep, the sds first. The
//! GPU's `hb_lkj` (kernels/gibbs.cu) does the same in the same order.

use super::covariance::{cholesky, lower_inverse};
use super::prior::ScalePrior;
use super::random::Rng;
use super::slice::{slice_step, SliceSettings};

/// Bound of the y coordinates: tanh(15) is 1 - 1.9e-13, a correlation no
/// data can tell from 1.
pub const Y_MAX: f64 = 15.0;
/// Slice width of the y coordinates (correlations' posterior sds on the
/// tanh scale are at most about 1; stepping out and shrinkage adapt it).
pub const Y_WIDTH: f64 = 1.0;

/// The LKJ prior of a covariance: LKJ(eta) correlations, sds under `sd`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lkj {
    pub eta: f64,
    pub sd: ScalePrior,
}

/// log(1 - tanh(y)^2) = -2 log cosh(y), without cancellation.
#[inline]
fn log_sech2(y: f64) -> f64 {
    let a = y.abs();
    -2.0 * (a + (-2.0 * a).exp().ln_1p() - std::f64::consts::LN_2)
}

/// The Cholesky factor L (K x K, row-major) of Omega from the y
/// coordinates `y`; returns the sum of log L_ii.
fn factor_of(y: &[f64], k: usize, l: &mut [f64]) -> f64 {
    let (mut m, mut log_diag) = (0, 0.0);
    l.fill(0.0);
    for i in 0..k {
        // c = sqrt(1 - sum of the row's squares so far), as a product.
        let mut c = 1.0;
        for j in 0..i {
            l[i * k + j] = y[m].tanh() * c;
            c /= y[m].cosh();
            log_diag += 0.5 * log_sech2(y[m]);
            m += 1;
        }
        l[i * k + i] = c;
    }
    log_diag
}

/// The conditional log density of the coordinates `theta` (see the module
/// doc) given `count` vectors with scatter matrix `scatter` (K x K).
pub fn log_density(lkj: Lkj, theta: &[f64], k: usize, count: usize, scatter: &[f64]) -> f64 {
    let (u, y) = theta.split_at(k);
    let mut l = vec![0.0; k * k];
    let log_diag = factor_of(y, k, &mut l);
    let mut lp = 0.0;
    for &uk in u {
        lp += lkj.sd.log_density(uk.exp()) + uk;
    }
    let mut m = 0;
    for i in 0..k {
        for j in 0..i {
            lp += (lkj.eta + 0.5 * (k as f64 - 2.0 - j as f64)) * log_sech2(y[m]);
            m += 1;
        }
    }
    // tr(Omega^-1 A), A = D^-1 S D^-1: with W = L^-1, sum over i of (W A W')_ii.
    let w = lower_inverse(&l, k);
    let inv_sd: Vec<f64> = u.iter().map(|&uk| (-uk).exp()).collect();
    let mut trace = 0.0;
    for i in 0..k {
        for a in 0..=i {
            // (W A)_ia, then times W_ia (W is lower triangular).
            let mut wa = 0.0;
            for b in 0..=i {
                wa += w[i * k + b] * scatter[b * k + a] * inv_sd[b] * inv_sd[a];
            }
            trace += wa * w[i * k + a];
        }
    }
    lp - count as f64 * (u.iter().sum::<f64>() + log_diag) - 0.5 * trace
}

/// The coordinates of a covariance `cov` (K x K, positive definite); None
/// when its correlation matrix has no Cholesky factor in floating point.
pub fn theta_of(cov: &[f64], k: usize) -> Option<Vec<f64>> {
    let sd: Vec<f64> = (0..k).map(|i| cov[i * k + i].sqrt()).collect();
    let omega: Vec<f64> = (0..k * k).map(|x| cov[x] / (sd[x / k] * sd[x % k])).collect();
    let l = cholesky(&omega, k)?;
    let mut theta: Vec<f64> = sd.iter().map(|s| s.ln()).collect();
    for i in 0..k {
        let mut c = 1.0;
        for j in 0..i {
            let z = (l[i * k + j] / c).clamp(-1.0, 1.0);
            theta.push(z.atanh().clamp(-Y_MAX, Y_MAX));
            c *= (1.0 - z * z).max(0.0).sqrt();
        }
    }
    theta.iter().all(|v| v.is_finite()).then_some(theta)
}

/// The covariance of coordinates `theta` and its inverse.
pub fn cov_of(theta: &[f64], k: usize) -> (Vec<f64>, Vec<f64>) {
    let (u, y) = theta.split_at(k);
    let mut l = vec![0.0; k * k];
    factor_of(y, k, &mut l);
    let sd: Vec<f64> = u.iter().map(|v| v.exp()).collect();
    let mut cov = vec![0.0; k * k];
    let mut prec = vec![0.0; k * k];
    // Omega^-1 = W' W with W = L^-1.
    let w = lower_inverse(&l, k);
    for a in 0..k {
        for b in 0..k {
            let omega: f64 = (0..=a.min(b)).map(|t| l[a * k + t] * l[b * k + t]).sum();
            let omega_inv: f64 = (a.max(b)..k).map(|t| w[t * k + a] * w[t * k + b]).sum();
            cov[a * k + b] = sd[a] * sd[b] * omega;
            prec[a * k + b] = omega_inv / (sd[a] * sd[b]);
        }
    }
    (cov, prec)
}

/// What one sweep's update did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LkjStep {
    /// The new coordinates.
    pub theta: Vec<f64>,
    /// Log-density evaluations.
    pub evals: u64,
    /// Stuck updates, by sd (a correlation's counts against its row's sd).
    pub stuck: Vec<u64>,
    /// |change| of each u_k, for the width adaptation.
    pub moved: Vec<f64>,
}

/// One slice update of each coordinate of `theta0`, the sds first (u_k
/// within [ln floors_k, ln ceiling], widths `widths`; at most `m` steps
/// out), then the correlations (within +-Y_MAX, width Y_WIDTH).
#[allow(clippy::too_many_arguments)]
pub fn update(lkj: Lkj, theta0: &[f64], k: usize, count: usize, scatter: &[f64], widths: &[f64], floors: &[f64], ceiling: f64, m: Option<usize>, rng: &mut Rng) -> LkjStep {
    let mut theta = theta0.to_vec();
    let mut out = LkjStep { theta: Vec::new(), evals: 0, stuck: vec![0; k], moved: vec![0.0; k] };
    let mut row_of = Vec::with_capacity(theta.len());
    row_of.extend(0..k);
    for i in 0..k {
        row_of.extend(std::iter::repeat_n(i, i));
    }
    for c in 0..theta.len() {
        let x0 = theta[c];
        let mut at = |x: f64| {
            theta[c] = x;
            log_density(lkj, &theta, k, count, scatter)
        };
        let f0 = at(x0);
        let settings = if c < k {
            SliceSettings { w: widths[c], m, lower: floors[c].ln(), upper: ceiling.ln() }
        } else {
            SliceSettings { w: Y_WIDTH, m, lower: -Y_MAX, upper: Y_MAX }
        };
        let step = slice_step(x0, f0, &mut at, &settings, rng);
        theta[c] = step.x;
        out.evals += step.evals as u64 + 1;
        out.stuck[row_of[c]] += step.stuck as u64;
        if c < k {
            out.moved[c] = (step.x - x0).abs();
        }
    }
    out.theta = theta;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gibbs::random::{stream, Block};

    fn lkj(eta: f64) -> Lkj {
        Lkj { eta, sd: ScalePrior::HalfNormal(1.0) }
    }

    #[test]
    fn coordinates_and_covariance_round_trip() {
        let cov = [4.0, 1.2, -0.6, 1.2, 1.0, 0.3, -0.6, 0.3, 2.25];
        let theta = theta_of(&cov, 3).unwrap();
        let (back, prec) = cov_of(&theta, 3);
        for i in 0..9 {
            assert!((back[i] - cov[i]).abs() < 1e-12, "entry {i}: {} vs {}", back[i], cov[i]);
        }
        for i in 0..3 {
            for j in 0..3 {
                let id: f64 = (0..3).map(|t| back[i * 3 + t] * prec[t * 3 + j]).sum();
                assert!((id - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn density_is_the_normal_likelihood_plus_the_priors() {
        // Against the direct formula: sum over vectors of log N(x | 0,
        // Sigma) up to a constant, the LKJ density det(Omega)^(eta - 1), the
        // sds' half-normal priors, and the Jacobians of (sd, Omega) <- theta.
        let (k, eta) = (3, 1.7);
        let cov_a = [4.0, 1.2, -0.6, 1.2, 1.0, 0.3, -0.6, 0.3, 2.25];
        let cov_b = [1.0, -0.4, 0.2, -0.4, 2.0, 0.9, 0.2, 0.9, 1.5];
        let scatter = [7.0, 1.0, 0.5, 1.0, 3.0, -0.2, 0.5, -0.2, 5.0];
        let count = 6;
        let direct = |cov: &[f64]| {
            let theta = theta_of(cov, k).unwrap();
            let l = cholesky(cov, k).unwrap();
            let logdet: f64 = (0..k).map(|i| 2.0 * l[i * k + i].ln()).sum();
            let (_, prec) = cov_of(&theta, k);
            let tr: f64 = (0..k * k).map(|x| prec[x] * scatter[x]).sum();
            let sd: Vec<f64> = (0..k).map(|i| cov[i * k + i].sqrt()).collect();
            let omega_logdet = logdet - 2.0 * sd.iter().map(|s| s.ln()).sum::<f64>();
            // Jacobian of Omega <- z (LKJ 2009): prod (1 - z^2)^((K - 1 - j') / 2)
            // with j' the 0-based column, and of z <- y: prod (1 - z^2).
            let y = &theta[k..];
            let cols = [0usize, 0, 1];
            let jac: f64 = y.iter().zip(cols).map(|(&y, j)| (0.5 * (k as f64 - 2.0 - j as f64) + 1.0) * log_sech2(y)).sum();
            let priors: f64 = sd.iter().map(|&s| -0.5 * s * s + s.ln()).sum();
            -0.5 * count as f64 * logdet - 0.5 * tr + (eta - 1.0) * omega_logdet + jac + priors
        };
        let ours = |cov: &[f64]| log_density(lkj(eta), &theta_of(cov, k).unwrap(), k, count, &scatter);
        // Equal up to one constant.
        let (da, db) = (ours(&cov_a) - direct(&cov_a), ours(&cov_b) - direct(&cov_b));
        assert!((da - db).abs() < 1e-10, "{da} vs {db}");
    }

    /// Many sweeps of the update with no data: draws from the prior.
    fn prior_draws(k: usize, eta: f64, n: usize) -> Vec<Vec<f64>> {
        let mut rng = stream(3, 0, 0, Block::Tau, 1);
        let mut theta = vec![0.0; k + k * (k - 1) / 2];
        let scatter = vec![0.0; k * k];
        (0..n)
            .map(|_| {
                let step = update(lkj(eta), &theta, k, 0, &scatter, &vec![1.0; k], &vec![1e-8; k], 1e8, None, &mut rng);
                theta = step.theta;
                cov_of(&theta, k).0
            })
            .collect()
    }

    #[test]
    fn without_data_the_draws_follow_the_prior() {
        // The correlations' marginal under LKJ(eta) is 2 Beta(a, a) - 1
        // with a = eta - 1 + K / 2 (variance 1 / (2a + 1)); each sd is
        // half-normal(1) (E sd^2 = 1).
        for (k, eta) in [(2, 1.0), (2, 3.0), (3, 1.0), (4, 2.0)] {
            let draws = prior_draws(k, eta, 40_000);
            let a = eta - 1.0 + k as f64 / 2.0;
            let want = 1.0 / (2.0 * a + 1.0);
            // Every pair: the last ones depend on the partial correlations
            // of later columns.
            for (p, q) in (0..k).flat_map(|p| (p + 1..k).map(move |q| (p, q))) {
                let r: Vec<f64> = draws.iter().map(|c| c[p * k + q] / (c[p * k + p] * c[q * k + q]).sqrt()).collect();
                let mean = r.iter().sum::<f64>() / r.len() as f64;
                let var = r.iter().map(|x| x * x).sum::<f64>() / r.len() as f64;
                assert!(mean.abs() < 0.03, "K {k}, eta {eta}, ({p}, {q}): mean correlation {mean}");
                assert!((var - want).abs() < 0.06 * want, "K {k}, eta {eta}, ({p}, {q}): E r^2 {var} vs {want}");
            }
            let s2 = draws.iter().map(|c| c[0]).sum::<f64>() / draws.len() as f64;
            assert!((s2 - 1.0).abs() < 0.06, "K {k}, eta {eta}: E sd^2 {s2}");
        }
    }

    #[test]
    fn with_data_the_draws_match_the_posterior_by_quadrature() {
        // K = 2: the posterior of (u1, u2, y) on a grid against the slice
        // sampler's means of sd_1 and the correlation.
        let (k, eta, count) = (2, 1.5, 8);
        let scatter = [6.0, 3.0, 3.0, 10.0];
        let target = lkj(eta);
        let (mut z, mut m_sd, mut m_r) = (0.0, 0.0, 0.0);
        let n = 90;
        let grid = |i: usize, lo: f64, hi: f64| lo + (hi - lo) * (i as f64 + 0.5) / n as f64;
        for a in 0..n {
            for b in 0..n {
                for c in 0..n {
                    let theta = [grid(a, -3.0, 3.0), grid(b, -3.0, 3.0), grid(c, -4.0, 4.0)];
                    let p = log_density(target, &theta, k, count, &scatter).exp();
                    z += p;
                    m_sd += p * theta[0].exp();
                    m_r += p * theta[2].tanh();
                }
            }
        }
        let (m_sd, m_r) = (m_sd / z, m_r / z);
        let mut rng = stream(9, 0, 0, Block::Tau, 1);
        let mut theta = vec![0.0; 3];
        let (mut s_sd, mut s_r) = (0.0, 0.0);
        let draws = 60_000;
        for _ in 0..draws {
            theta = update(target, &theta, k, count, &scatter, &[1.0, 1.0], &[1e-8, 1e-8], 1e8, None, &mut rng).theta;
            s_sd += theta[0].exp();
            s_r += theta[2].tanh();
        }
        let (s_sd, s_r) = (s_sd / draws as f64, s_r / draws as f64);
        assert!((s_sd - m_sd).abs() < 0.01, "mean sd_1: sampler {s_sd}, quadrature {m_sd}");
        assert!((s_r - m_r).abs() < 0.01, "mean correlation: sampler {s_r}, quadrature {m_r}");
    }
}
