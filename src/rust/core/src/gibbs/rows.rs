//! The binomial, Poisson, negative binomial and ordinal rows'
//! log-likelihoods (sum y eta - n log(1 + e^eta), sum y eta - e^eta, ...),
//! with a branch-free softplus and exp that
//! vectorise: the slice updates spend most of a
//! sweep here, and libm's exp and log1p took most of about 40 ns a row
//! (BENCHMARKS.md, "a vectorised softplus"). Chosen at run time where the
//! CPU has AVX2 and FMA (x86-64); elsewhere, and for the gaussian family,
//! `Family::loglik` row by row. The rows are summed one after another in
//! both, so a group's sum does not depend on the path's lane width.

use super::model::softplus;
use crate::em::simd::{exp_nonpos, ln_1p_unit};

/// Rows per block: softplus is computed for a block at once (vectorised),
/// then added in row order.
const BLOCK: usize = 32;

/// log(1 + e^x) = max(x, 0) + ln(1 + e^-|x|), branch-free (NaN stays NaN
/// through the second term).
/// Uses `mul_add`: only inside a function compiled with FMA.
#[inline(always)]
pub(crate) fn softplus_fma(x: f64) -> f64 {
    x.max(0.0) + ln_1p_unit(exp_nonpos(-x.abs()))
}

/// e^x for any x: e^-|x| or its reciprocal (2 ulp), +inf above about
/// 708.4 (libm: 709.8), NaN for NaN. Uses `mul_add`, as softplus_fma.
#[inline(always)]
pub(crate) fn exp_fma(x: f64) -> f64 {
    let a = crate::em::simd::exp_nonpos(-x.abs());
    if x > 0.0 {
        1.0 / a
    } else {
        a
    }
}

/// sum over rows of y eta - n softplus(eta), eta = eta0 + xc delta (n = 1
/// without `trials`).
pub(crate) fn binomial(y: &[f64], trials: Option<&[f64]>, eta: &[f64], xc: &[f64], delta: f64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if fma_available() {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return unsafe { binomial_fma(y, trials, eta, xc, delta) };
        }
    }
    binomial_with(y, trials, eta, xc, delta, softplus)
}

/// sum over rows of y eta - e^eta, eta = eta0 + xc delta.
pub(crate) fn poisson(y: &[f64], eta: &[f64], xc: &[f64], delta: f64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if fma_available() {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return unsafe { poisson_fma(y, eta, xc, delta) };
        }
    }
    binomial_with(y, None, eta, xc, delta, f64::exp)
}

/// sum over rows of y e - (y + phi) softplus(e), e = eta0 + xc delta -
/// ln phi: the negative binomial's y eta - (y + phi) ln(phi + e^eta) less
/// terms free of eta.
pub(crate) fn negbin(y: &[f64], phi: f64, eta: &[f64], xc: &[f64], delta: f64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if fma_available() {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return unsafe { negbin_fma(y, phi, eta, xc, delta) };
        }
    }
    negbin_with(y, phi, eta, xc, delta, softplus)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn negbin_fma(y: &[f64], phi: f64, eta: &[f64], xc: &[f64], delta: f64) -> f64 {
    negbin_with(y, phi, eta, xc, delta, softplus_fma)
}

#[inline(always)]
fn negbin_with(y: &[f64], phi: f64, eta: &[f64], xc: &[f64], delta: f64, sp: impl Fn(f64) -> f64) -> f64 {
    let ln_phi = phi.ln();
    let (mut sum, mut e, mut s) = (0.0, [0.0; BLOCK], [0.0; BLOCK]);
    for start in (0..y.len()).step_by(BLOCK) {
        let m = BLOCK.min(y.len() - start);
        for r in 0..m {
            e[r] = eta[start + r] + xc[start + r] * delta - ln_phi;
        }
        for r in 0..BLOCK {
            s[r] = sp(e[r]);
        }
        for r in 0..m {
            sum += y[start + r] * e[r] - (y[start + r] + phi) * s[r];
        }
    }
    sum
}

/// sum over rows of log P(y = c) under the cumulative logit
/// (`model::ordinal_loglik`), eta = eta0 + xc delta (eta0 alone without
/// `xc`). With a = theta_{c-1} - eta and b = theta_c - eta, log(F(b) -
/// F(a)) = ln(1 - e^(a - b)) - softplus(-b) - softplus(a): a - b depends on
/// the category only, so its term is computed once per call, and the end
/// categories take a = -inf or b = +inf (their softplus terms are 0).
pub(crate) fn ordinal(y: &[f64], eta: &[f64], xc: Option<&[f64]>, delta: f64, cuts: &[f64]) -> f64 {
    let last = cuts.len() + 1;
    let lower: Vec<f64> = (1..=last).map(|c| if c == 1 { f64::NEG_INFINITY } else { cuts[c - 2] }).collect();
    let upper: Vec<f64> = (1..=last).map(|c| if c == last { f64::INFINITY } else { cuts[c - 1] }).collect();
    let gap: Vec<f64> = (1..=last).map(|c| if c == 1 || c == last { 0.0 } else { (-(cuts[c - 2] - cuts[c - 1]).exp_m1()).ln() }).collect();
    let tables = OrdinalTables { lower: &lower, upper: &upper, gap: &gap };
    #[cfg(target_arch = "x86_64")]
    {
        if fma_available() {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return unsafe { ordinal_fma(y, eta, xc, delta, &tables) };
        }
    }
    ordinal_with(y, eta, xc, delta, &tables, softplus)
}

/// Per category (index c - 1): theta_{c-1}, theta_c and ln(1 - e^(theta_{c-1}
/// - theta_c)).
struct OrdinalTables<'t> {
    lower: &'t [f64],
    upper: &'t [f64],
    gap: &'t [f64],
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn ordinal_fma(y: &[f64], eta: &[f64], xc: Option<&[f64]>, delta: f64, tables: &OrdinalTables) -> f64 {
    ordinal_with(y, eta, xc, delta, tables, softplus_fma)
}

#[inline(always)]
fn ordinal_with(y: &[f64], eta: &[f64], xc: Option<&[f64]>, delta: f64, t: &OrdinalTables, sp: impl Fn(f64) -> f64) -> f64 {
    let top = t.gap.len() - 1;
    let (mut sum, mut a, mut nb, mut g) = (0.0, [0.0; BLOCK], [0.0; BLOCK], [0.0; BLOCK]);
    let (mut sa, mut sb) = ([0.0; BLOCK], [0.0; BLOCK]);
    for start in (0..y.len()).step_by(BLOCK) {
        let m = BLOCK.min(y.len() - start);
        for r in 0..m {
            let i = start + r;
            let e = eta[i] + xc.map_or(0.0, |x| x[i]) * delta;
            let c = (y[i] as usize).clamp(1, top + 1) - 1;
            a[r] = t.lower[c] - e;
            nb[r] = e - t.upper[c];
            g[r] = t.gap[c];
        }
        for r in 0..BLOCK {
            sa[r] = sp(a[r]);
            sb[r] = sp(nb[r]);
        }
        for r in 0..m {
            sum += g[r] - sb[r] - sa[r];
        }
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn poisson_fma(y: &[f64], eta: &[f64], xc: &[f64], delta: f64) -> f64 {
    binomial_with(y, None, eta, xc, delta, exp_fma)
}

#[cfg(target_arch = "x86_64")]
fn fma_available() -> bool {
    use std::sync::OnceLock;
    static HAVE: OnceLock<bool> = OnceLock::new();
    *HAVE.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn binomial_fma(y: &[f64], trials: Option<&[f64]>, eta: &[f64], xc: &[f64], delta: f64) -> f64 {
    binomial_with(y, trials, eta, xc, delta, softplus_fma)
}

/// sum over rows of y eta - n f(eta) (n = 1 without `trials`): f is
/// softplus for the binomial, exp for the Poisson.
#[inline(always)]
fn binomial_with(y: &[f64], trials: Option<&[f64]>, eta: &[f64], xc: &[f64], delta: f64, sp: impl Fn(f64) -> f64) -> f64 {
    let (mut sum, mut e, mut s) = (0.0, [0.0; BLOCK], [0.0; BLOCK]);
    for start in (0..y.len()).step_by(BLOCK) {
        let m = BLOCK.min(y.len() - start);
        for r in 0..m {
            e[r] = eta[start + r] + xc[start + r] * delta;
        }
        for r in 0..BLOCK {
            s[r] = sp(e[r]);
        }
        match trials {
            Some(t) => {
                for r in 0..m {
                    sum += y[start + r] * e[r] - t[start + r] * s[r];
                }
            }
            None => {
                for r in 0..m {
                    sum += y[start + r] * e[r] - s[r];
                }
            }
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::super::model::softplus;

    #[test]
    fn fast_softplus_matches_libm() {
        #[cfg(target_arch = "x86_64")]
        {
            if !super::fma_available() {
                return;
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn fast(x: f64) -> f64 {
                super::softplus_fma(x)
            }
            let mut worst: f64 = 0.0;
            for i in -200_000..=200_000 {
                let x = i as f64 * 1e-3 + 1e-7;
                // SAFETY: fma_available was checked above.
                let (got, want) = (unsafe { fast(x) }, softplus(x));
                worst = worst.max((got - want).abs() / want.max(1.0));
            }
            assert!(worst < 4e-16, "worst error {worst:e}");
            for x in [0.0, -0.0, 1e-300, -745.0, -800.0, 40.0, 800.0, f64::INFINITY, f64::NEG_INFINITY] {
                // SAFETY: as above.
                let got = unsafe { fast(x) };
                assert!((got - softplus(x)).abs() <= 4e-16 * softplus(x).max(1.0) || got == softplus(x), "softplus({x}) = {got}, libm {}", softplus(x));
            }
            // SAFETY: as above.
            assert!(unsafe { fast(f64::NAN) }.is_nan());
        }
    }

    #[test]
    fn fast_exp_matches_libm() {
        #[cfg(target_arch = "x86_64")]
        {
            if !super::fma_available() {
                return;
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn fast(x: f64) -> f64 {
                super::exp_fma(x)
            }
            let mut worst: f64 = 0.0;
            for i in -700_000..=700_000 {
                let x = i as f64 * 1e-3 + 1e-7;
                // SAFETY: fma_available was checked above.
                worst = worst.max((unsafe { fast(x) } / x.exp() - 1.0).abs());
            }
            assert!(worst < 6e-16, "worst relative error {worst:e}");
            // SAFETY: as above.
            unsafe {
                assert_eq!(fast(0.0), 1.0);
                assert_eq!(fast(f64::INFINITY), f64::INFINITY);
                assert_eq!(fast(f64::NEG_INFINITY), 0.0);
                assert_eq!(fast(800.0), f64::INFINITY);
                assert!(fast(f64::NAN).is_nan());
            }
        }
    }

    #[test]
    fn rows_agree_with_the_row_by_row_sum() {
        let n = 101;
        let y: Vec<f64> = (0..n).map(|i| (i % 3 == 0) as u8 as f64).collect();
        let t: Vec<f64> = (0..n).map(|i| 1.0 + (i % 4) as f64).collect();
        let eta: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin() * 6.0).collect();
        let xc: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
        for trials in [None, Some(&t[..])] {
            let got = super::binomial(&y, trials, &eta, &xc, 0.3);
            let want: f64 = (0..n).map(|r| y[r] * (eta[r] + xc[r] * 0.3) - trials.map_or(1.0, |t| t[r]) * softplus(eta[r] + xc[r] * 0.3)).sum();
            assert!((got - want).abs() <= 1e-13 * want.abs(), "{got} vs {want}");
        }
        let got = super::poisson(&t, &eta, &xc, 0.3);
        let want: f64 = (0..n).map(|r| t[r] * (eta[r] + xc[r] * 0.3) - (eta[r] + xc[r] * 0.3).exp()).sum();
        assert!((got - want).abs() <= 1e-13 * want.abs(), "poisson: {got} vs {want}");
        // The negative binomial against its log pmf, y eta - (y + phi) ln(phi + e^eta).
        for phi in [0.05, 2.5, 1e6] {
            let got = super::negbin(&t, phi, &eta, &xc, 0.3);
            let want: f64 = (0..n)
                .map(|r| {
                    let e = eta[r] + xc[r] * 0.3;
                    t[r] * (e - phi.ln()) - (t[r] + phi) * (phi + e.exp()).ln() + (t[r] + phi) * phi.ln()
                })
                .sum();
            // want cancels terms of size (y + phi) |ln(phi + e^eta)|.
            let size: f64 = (0..n).map(|r| (t[r] + phi) * (phi + (eta[r] + xc[r] * 0.3).exp()).ln().abs()).sum();
            assert!((got - want).abs() <= 1e-14 * size.max(1.0), "negbin phi {phi}: {got} vs {want}");
        }
        // The ordinal family against its row-by-row cumulative logit: every
        // category, cut-points close together, eta far in the tails.
        let cuts = [0.0, 1e-9, 0.7, 2.5];
        let cat: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
        let wide: Vec<f64> = eta.iter().map(|e| e * 12.0).collect();
        for (eta, xc) in [(&eta, Some(&xc[..])), (&wide, None)] {
            let got = super::ordinal(&cat, eta, xc, 0.3, &cuts);
            let want: f64 = (0..n).map(|r| super::super::model::ordinal_loglik(cat[r], eta[r] + xc.map_or(0.0, |x| x[r]) * 0.3, &cuts)).sum();
            assert!((got - want).abs() <= 1e-12 * want.abs(), "ordinal: {got} vs {want}");
        }
    }
}
