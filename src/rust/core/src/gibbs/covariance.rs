//! The covariance of the group coefficients when they are correlated
//! (lme4's `(1 + x | g)`): Sigma ~ inverse-Wishart(df, scale^2 df I)
//! (bayesm's `rhierLinearModel` default for df = K + 3, scale 1), with
//! the conjugate updates of Sigma and of the population mean mu given the
//! groups' coefficients, and the conditional normal prior of one
//! coefficient of a group given the others (the slice updates of beta).
//!
//! Matrices are K x K, row-major, K small (the coefficients of one group).

use super::random::Rng;

/// The inverse-Wishart prior of Sigma: df > K - 1, scale matrix
/// scale^2 df I.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InverseWishart {
    pub df: f64,
    pub scale: f64,
}

/// Lower Cholesky factor L of a symmetric positive definite `a` (a = L L');
/// None when `a` is not positive definite in floating point.
pub fn cholesky(a: &[f64], k: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; k * k];
    for i in 0..k {
        for j in 0..=i {
            let s = a[i * k + j] - (0..j).map(|m| l[i * k + m] * l[j * k + m]).sum::<f64>();
            if i == j {
                if !(s > 0.0) {
                    return None;
                }
                l[i * k + i] = s.sqrt();
            } else {
                l[i * k + j] = s / l[j * k + j];
            }
        }
    }
    Some(l)
}

/// The inverse of a lower-triangular `l`.
pub fn lower_inverse(l: &[f64], k: usize) -> Vec<f64> {
    let mut inv = vec![0.0; k * k];
    for c in 0..k {
        for i in c..k {
            let rhs = if i == c { 1.0 } else { 0.0 };
            let s = rhs - (c..i).map(|m| l[i * k + m] * inv[m * k + c]).sum::<f64>();
            inv[i * k + c] = s / l[i * k + i];
        }
    }
    inv
}

/// a' for k x k `a`.
fn transpose(a: &[f64], k: usize) -> Vec<f64> {
    (0..k * k).map(|i| a[(i % k) * k + i / k]).collect()
}

/// a b' for k x k `a`, `b`.
fn times_transpose(a: &[f64], b: &[f64], k: usize) -> Vec<f64> {
    times(a, &transpose(b, k), k)
}

/// a b for k x k `a`, `b`.
fn times(a: &[f64], b: &[f64], k: usize) -> Vec<f64> {
    let mut out = vec![0.0; k * k];
    for i in 0..k {
        for j in 0..k {
            out[i * k + j] = (0..k).map(|m| a[i * k + m] * b[m * k + j]).sum();
        }
    }
    out
}

/// A draw of Sigma ~ inverse-Wishart(df, s) and its inverse, by Bartlett's
/// decomposition: with s = A A' and B lower triangular (B_ii^2 ~
/// chi^2(df - i), B_ij ~ N(0, 1) below), Sigma^-1 = D D' with D = A'^-1 B
/// is Wishart(df, s^-1), and Sigma = C C' with C = A B'^-1. None when `s`
/// is not positive definite.
pub fn draw_inverse_wishart(df: f64, s: &[f64], k: usize, rng: &mut Rng) -> Option<(Vec<f64>, Vec<f64>)> {
    let a = cholesky(s, k)?;
    let mut b = vec![0.0; k * k];
    for i in 0..k {
        b[i * k + i] = (2.0 * rng.gamma(0.5 * (df - i as f64))).sqrt();
        for j in 0..i {
            b[i * k + j] = rng.normal();
        }
    }
    let a_inv = lower_inverse(&a, k);
    let b_inv = lower_inverse(&b, k);
    // C = A (B^-1)'; D = (A^-1)' B.
    let c = times_transpose(&a, &b_inv, k);
    let d = times(&transpose(&a_inv, k), &b, k);
    Some((times_transpose(&c, &c, k), times_transpose(&d, &d, k)))
}

/// A draw of Sigma | data ~ inverse-Wishart(df + count, df scale^2 I + C)
/// (the conjugate update of `iw` given `count` vectors whose cross
/// products sum to C, `cross(i, j)`), and its inverse; None when the
/// scale matrix is not positive definite or a result is not finite.
pub fn draw_posterior(iw: InverseWishart, count: usize, k: usize, cross: impl Fn(usize, usize) -> f64, rng: &mut Rng) -> Option<(Vec<f64>, Vec<f64>)> {
    let mut s = scatter(k, cross);
    for i in 0..k {
        s[i * k + i] += iw.df * iw.scale * iw.scale;
    }
    draw_inverse_wishart(iw.df + count as f64, &s, k, rng).filter(|(cov, prec)| cov.iter().chain(prec).all(|v| v.is_finite()))
}

/// The symmetric k x k matrix of `cross(i, j)`, each computed once (j <= i).
pub fn scatter(k: usize, cross: impl Fn(usize, usize) -> f64) -> Vec<f64> {
    let mut s = vec![0.0; k * k];
    for i in 0..k {
        for j in 0..=i {
            let v = cross(i, j);
            s[i * k + j] = v;
            s[j * k + i] = v;
        }
    }
    s
}

/// A draw of mu | beta, Sigma: mu ~ N(m0, s0^2 I) a priori and beta_g ~
/// N(mu, Sigma) for G groups with coefficient sums `sum`: precision
/// Q = I / s0^2 + G Sigma^-1, mean Q^-1 (m0 / s0^2 + Sigma^-1 sum); the
/// draw is mean + L'^-1 z with Q = L L'. None when Q is not positive
/// definite.
pub fn draw_mean(m0: f64, s0: f64, prec: &[f64], sum: &[f64], groups: usize, k: usize, rng: &mut Rng) -> Option<Vec<f64>> {
    let mut q = vec![0.0; k * k];
    let mut rhs = vec![0.0; k];
    for i in 0..k {
        for j in 0..k {
            q[i * k + j] = groups as f64 * prec[i * k + j] + if i == j { 1.0 / (s0 * s0) } else { 0.0 };
            rhs[i] += prec[i * k + j] * sum[j];
        }
        rhs[i] += m0 / (s0 * s0);
    }
    let l = cholesky(&q, k)?;
    // Solve L w = rhs, then L' (mean + noise) = w + z.
    let mut w = vec![0.0; k];
    for i in 0..k {
        w[i] = (rhs[i] - (0..i).map(|m| l[i * k + m] * w[m]).sum::<f64>()) / l[i * k + i];
    }
    for wi in w.iter_mut() {
        *wi += rng.normal();
    }
    let mut out = vec![0.0; k];
    for i in (0..k).rev() {
        out[i] = (w[i] - (i + 1..k).map(|m| l[m * k + i] * out[m]).sum::<f64>()) / l[i * k + i];
    }
    Some(out)
}

/// The prior of coefficient j of a group given its others, from
/// beta ~ N(mu, Sigma) with precision `prec`: N(centre, 1 / prec_jj),
/// centre = mu_j - sum_{l != j} prec_jl (beta_l - mu_l) / prec_jj.
/// Returns (centre, prec_jj).
pub fn conditional_prior(beta: &[f64], mu: &[f64], prec: &[f64], j: usize) -> (f64, f64) {
    let k = mu.len();
    let pjj = prec[j * k + j];
    let pull: f64 = (0..k).filter(|&l| l != j).map(|l| prec[j * k + l] * (beta[l] - mu[l])).sum();
    (mu[j] - pull / pjj, pjj)
}

/// The correlations of `cov` above the diagonal, row by row: (0,1), (0,2),
/// ..., (1,2), ...
pub fn correlations(cov: &[f64], k: usize) -> impl Iterator<Item = f64> + '_ {
    (0..k).flat_map(move |i| (i + 1..k).map(move |j| cov[i * k + j] / (cov[i * k + i] * cov[j * k + j]).sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gibbs::random::{stream, Block};

    #[test]
    fn gamma_draws_have_their_moments() {
        for shape in [0.3, 1.0, 2.5, 40.0] {
            let mut rng = stream(5, 0, 0, Block::Tau, 1);
            let n = 200_000;
            let x: Vec<f64> = (0..n).map(|_| rng.gamma(shape)).collect();
            let mean = x.iter().sum::<f64>() / n as f64;
            let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
            assert!((mean - shape).abs() < 5.0 * (shape / n as f64).sqrt(), "shape {shape}: mean {mean}");
            assert!((var - shape).abs() < 0.05 * shape, "shape {shape}: variance {var}");
        }
    }

    #[test]
    fn inverse_wishart_draws_have_its_mean_and_are_inverted() {
        // E[Sigma] = S / (df - K - 1).
        let (k, df) = (3, 9.0);
        let s = [2.0, 0.5, -0.3, 0.5, 1.0, 0.2, -0.3, 0.2, 1.5];
        let mut rng = stream(8, 0, 0, Block::Tau, 1);
        let n = 100_000;
        let mut mean = [0.0; 9];
        for _ in 0..n {
            let (cov, prec) = draw_inverse_wishart(df, &s, k, &mut rng).unwrap();
            let id = times(&cov, &prec, k);
            for i in 0..k {
                for j in 0..k {
                    assert!((id[i * k + j] - if i == j { 1.0 } else { 0.0 }).abs() < 1e-9);
                }
            }
            for (m, c) in mean.iter_mut().zip(&cov) {
                *m += c / n as f64;
            }
        }
        for i in 0..9 {
            let want = s[i] / (df - k as f64 - 1.0);
            assert!((mean[i] - want).abs() < 0.03 * (s[0] / (df - 4.0)), "entry {i}: {} vs {want}", mean[i]);
        }
    }

    #[test]
    fn conditional_prior_is_the_bivariate_normal_regression() {
        // Sigma = [[4, 1.2], [1.2, 1]]: beta_0 | beta_1 has mean mu_0 +
        // 1.2 (beta_1 - mu_1) and variance 4 - 1.44.
        let cov = [4.0, 1.2, 1.2, 1.0];
        let det = 4.0 - 1.44;
        let prec = [1.0 / det, -1.2 / det, -1.2 / det, 4.0 / det];
        let (c, p) = conditional_prior(&[0.0, 2.0], &[1.0, 0.5], &prec, 0);
        assert!((c - (1.0 + 1.2 * 1.5)).abs() < 1e-12 && (1.0 / p - (4.0 - 1.44)).abs() < 1e-12);
        assert!((correlations(&cov, 2).next().unwrap() - 0.6).abs() < 1e-15);
    }
}
