//! Special functions the families need, in Rust and (the same algorithms,
//! the same constants, emitted by `cuda_constants`) in CUDA: log-gamma, and
//! for the gamma shape's M-step g(a) = log a - digamma(a) with its
//! derivative and the safeguarded Newton solve of g(a) = s.

/// Arguments from which the asymptotic series are used (smaller ones are
/// shifted up by the recurrences).
pub(super) const LGAMMA_SHIFT: f64 = 15.0;
const DIGAMMA_SHIFT: f64 = 10.0;

/// Stirling series of log-gamma: sum_k B_2k / (2k (2k - 1) y^(2k - 1)).
pub(super) const LGAMMA_SERIES: [f64; 7] =
    [1.0 / 12.0, -1.0 / 360.0, 1.0 / 1260.0, -1.0 / 1680.0, 1.0 / 1188.0, -691.0 / 360360.0, 1.0 / 156.0];
/// log a - digamma(a) = 1/(2a) + sum_k B_2k / (2k a^2k).
const LOG_DIGAMMA_SERIES: [f64; 8] =
    [1.0 / 12.0, -1.0 / 120.0, 1.0 / 252.0, -1.0 / 240.0, 1.0 / 132.0, -691.0 / 32760.0, 1.0 / 12.0, -3617.0 / 8160.0];
/// trigamma(a) = 1/a + 1/(2a^2) + sum_k B_2k / a^(2k+1).
const TRIGAMMA_SERIES: [f64; 8] =
    [1.0 / 6.0, -1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0, 5.0 / 66.0, -691.0 / 2730.0, 7.0 / 6.0, -3617.0 / 510.0];
/// 0.5 log(2 pi).
pub(super) const HALF_LOG_TWO_PI: f64 = 0.918_938_533_204_672_8;
/// Newton steps at most, and the relative step that ends them.
const SHAPE_MAX_STEPS: usize = 100;
const SHAPE_REL_STEP: f64 = 4.0 * f64::EPSILON;

/// sum_k c[k] t^k by Horner.
pub(super) fn poly(c: &[f64], t: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, &ck| acc.mul_add(t, ck))
}

/// log Gamma(x) for x > 0, to about 1e-14 absolute.
pub fn lgamma(x: f64) -> f64 {
    let (mut y, mut prod) = (x, 1.0);
    while y < LGAMMA_SHIFT {
        prod *= y;
        y += 1.0;
    }
    let t = 1.0 / (y * y);
    (y - 0.5) * y.ln() - y + HALF_LOG_TWO_PI + poly(&LGAMMA_SERIES, t) / y - prod.ln()
}

/// g(a) = log a - digamma(a) for a > 0 (positive, decreasing), without
/// the cancellation of the difference for large a.
pub fn log_minus_digamma(a: f64) -> f64 {
    let (mut y, mut recur) = (a, 0.0);
    while y < DIGAMMA_SHIFT {
        recur += 1.0 / y;
        y += 1.0;
    }
    // g(a) = log(a / y) + g(y) + sum 1/(a + i), with y = a + k.
    let t = 1.0 / (y * y);
    (a / y).ln() + 0.5 / y + t * poly(&LOG_DIGAMMA_SERIES, t) + recur
}

/// g'(a) = 1/a - trigamma(a) (negative).
pub fn log_minus_digamma_deriv(a: f64) -> f64 {
    if a >= DIGAMMA_SHIFT {
        // -(1/(2a^2) + sum_k B_2k / a^(2k+1)), without 1/a - (1/a + ...).
        let t = 1.0 / (a * a);
        return -(0.5 * t + t / a * poly(&TRIGAMMA_SERIES, t));
    }
    let (mut y, mut recur) = (a, 0.0);
    while y < DIGAMMA_SHIFT {
        recur += 1.0 / (y * y);
        y += 1.0;
    }
    let t = 1.0 / (y * y);
    let trigamma = 1.0 / y + 0.5 * t + t / y * poly(&TRIGAMMA_SERIES, t) + recur;
    1.0 / a - trigamma
}

/// The a > 0 with log a - digamma(a) = s, for s > 0: Newton from `start`
/// (when positive and finite; else from Minka's approximation), kept inside
/// the bracket the signs give (g is convex and decreasing), to a relative
/// step of 4 ulps.
pub fn solve_gamma_shape(s: f64, start: f64) -> f64 {
    let a = if start.is_finite() && start > 0.0 {
        start
    } else {
        (3.0 - s + ((s - 3.0) * (s - 3.0) + 24.0 * s).sqrt()) / (12.0 * s)
    };
    bracketed_newton(a, |a| (log_minus_digamma(a) - s, log_minus_digamma_deriv(a)))
}

/// The a > 0 with digamma(a) = t: Newton on h(a) = log a - g(a) - t
/// (increasing; g as in [`log_minus_digamma`]) from `start` (or from
/// exp(t) + 1/2, close for large a), kept inside the bracket the signs
/// give, to a relative step of 4 ulps.
pub fn solve_digamma(t: f64, start: f64) -> f64 {
    let a = if start.is_finite() && start > 0.0 { start } else if t > -2.0 { t.exp() + 0.5 } else { -1.0 / t };
    // -h, so that a positive value means the root lies above.
    bracketed_newton(a, |a| (-(a.ln() - log_minus_digamma(a) - t), -(1.0 / a - log_minus_digamma_deriv(a))))
}

/// The root a > 0 of f from `a`, where `f_df(a)` = (f(a), f'(a)) and f > 0
/// below the root: Newton steps, halving the bracket (or doubling while it
/// is open above) when a step leaves it, to a relative step of 4 ulps or
/// SHAPE_MAX_STEPS steps.
fn bracketed_newton(mut a: f64, f_df: impl Fn(f64) -> (f64, f64)) -> f64 {
    let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
    for _ in 0..SHAPE_MAX_STEPS {
        let (f, df) = f_df(a);
        if f == 0.0 {
            break;
        }
        if f > 0.0 {
            lo = a;
        } else {
            hi = a;
        }
        let mut next = a - f / df;
        if !(next > lo && next < hi) {
            next = if hi.is_finite() { 0.5 * (lo + hi) } else { 2.0 * a };
        }
        let done = (next - a).abs() <= SHAPE_REL_STEP * a;
        a = next;
        if done {
            break;
        }
    }
    a
}

/// The standard normal density.
pub fn norm_pdf(z: f64) -> f64 {
    (-0.5 * z * z).exp() * (0.5 / std::f64::consts::PI).sqrt()
}

/// P(Z > z) for a standard normal Z, without cancellation in either tail.
pub fn norm_upper(z: f64) -> f64 {
    0.5 * libm::erfc(z / std::f64::consts::SQRT_2)
}

/// log P(Z <= z), accurate far into the lower tail (where P underflows:
/// the asymptotic series of the Mills ratio).
pub fn log_norm_cdf(z: f64) -> f64 {
    if z > -30.0 {
        return norm_upper(-z).ln();
    }
    let t = 1.0 / (z * z);
    -0.5 * z * z - (-z).ln() - 0.5 * (2.0 * std::f64::consts::PI).ln() + (1.0 - t + 3.0 * t * t - 15.0 * t * t * t).ln()
}

fn list(c: &[f64]) -> String {
    c.iter().map(|v| format!("{v:e}")).collect::<Vec<_>>().join(", ")
}

/// The constants above as CUDA definitions (prepended to the kernels).
pub fn cuda_constants() -> String {
    format!(
        "#define LGAMMA_SHIFT {LGAMMA_SHIFT:e}\n#define DIGAMMA_SHIFT {DIGAMMA_SHIFT:e}\n#define HALF_LOG_TWO_PI {HALF_LOG_TWO_PI:e}\n\
         #define SHAPE_MAX_STEPS {SHAPE_MAX_STEPS}\n#define SHAPE_REL_STEP {SHAPE_REL_STEP:e}\n\
         __constant__ double LGAMMA_SERIES[{}] = {{{}}};\n__constant__ double LOG_DIGAMMA_SERIES[{}] = {{{}}};\n\
         __constant__ double TRIGAMMA_SERIES[{}] = {{{}}};\n",
        LGAMMA_SERIES.len(),
        list(&LGAMMA_SERIES),
        LOG_DIGAMMA_SERIES.len(),
        list(&LOG_DIGAMMA_SERIES),
        TRIGAMMA_SERIES.len(),
        list(&TRIGAMMA_SERIES)
    )
}

/// The same functions in CUDA (after `cuda_constants`).
pub const CUDA: &str = r#"
__device__ double sp_poly(const double* c, int len, double t) {
    double acc = 0.0;
    for (int k = len - 1; k >= 0; --k) acc = fma(acc, t, c[k]);
    return acc;
}
__device__ double sp_lgamma(double x) {
    double y = x, prod = 1.0;
    while (y < LGAMMA_SHIFT) { prod *= y; y += 1.0; }
    const double t = 1.0 / (y * y);
    return (y - 0.5) * log(y) - y + HALF_LOG_TWO_PI + sp_poly(LGAMMA_SERIES, 7, t) / y - log(prod);
}
__device__ double sp_log_minus_digamma(double a) {
    double y = a, recur = 0.0;
    while (y < DIGAMMA_SHIFT) { recur += 1.0 / y; y += 1.0; }
    const double t = 1.0 / (y * y);
    return log(a / y) + 0.5 / y + t * sp_poly(LOG_DIGAMMA_SERIES, 8, t) + recur;
}
__device__ double sp_log_minus_digamma_deriv(double a) {
    if (a >= DIGAMMA_SHIFT) {
        const double t = 1.0 / (a * a);
        return -(0.5 * t + t / a * sp_poly(TRIGAMMA_SERIES, 8, t));
    }
    double y = a, recur = 0.0;
    while (y < DIGAMMA_SHIFT) { recur += 1.0 / (y * y); y += 1.0; }
    const double t = 1.0 / (y * y);
    const double trigamma = 1.0 / y + 0.5 * t + t / y * sp_poly(TRIGAMMA_SERIES, 8, t) + recur;
    return 1.0 / a - trigamma;
}
// bracketed_newton: f_df(a, f, df) gives f and f', f > 0 below the root.
template <class F>
__device__ double sp_bracketed_newton(double a, F f_df) {
    double lo = 0.0, hi = __longlong_as_double(0x7ff0000000000000LL);
    for (int k = 0; k < SHAPE_MAX_STEPS; ++k) {
        double f, df;
        f_df(a, f, df);
        if (f == 0.0) break;
        if (f > 0.0) lo = a; else hi = a;
        double next = a - f / df;
        if (!(next > lo && next < hi)) next = isfinite(hi) ? 0.5 * (lo + hi) : 2.0 * a;
        const bool done = fabs(next - a) <= SHAPE_REL_STEP * a;
        a = next;
        if (done) break;
    }
    return a;
}
__device__ double sp_solve_gamma_shape(double s, double start) {
    const double a = (isfinite(start) && start > 0.0) ? start : (3.0 - s + sqrt((s - 3.0) * (s - 3.0) + 24.0 * s)) / (12.0 * s);
    return sp_bracketed_newton(a, [s](double a, double& f, double& df) {
        f = sp_log_minus_digamma(a) - s;
        df = sp_log_minus_digamma_deriv(a);
    });
}
__device__ double sp_solve_digamma(double t, double start) {
    const double a = (isfinite(start) && start > 0.0) ? start : (t > -2.0 ? exp(t) + 0.5 : -1.0 / t);
    return sp_bracketed_newton(a, [t](double a, double& f, double& df) {
        f = -(log(a) - sp_log_minus_digamma(a) - t);
        df = -(1.0 / a - sp_log_minus_digamma_deriv(a));
    });
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solve_digamma_inverts_digamma() {
        // digamma(a) = log a - g(a); from several starts, small and large a.
        for &a in &[0.01f64, 0.3, 1.0, 2.5, 40.0, 1e5] {
            let t = a.ln() - log_minus_digamma(a);
            for &start in &[f64::NAN, 1.0, 1e3] {
                let got = solve_digamma(t, start);
                assert!((got / a - 1.0).abs() < 1e-10, "a = {a}, start {start}: {got}");
            }
        }
    }

    #[test]
    fn lgamma_matches_statrs() {
        for x in [1e-300, 1e-8, 0.1, 0.5, 1.0, 1.5, 2.0, 2.5, 7.3, 14.9, 15.0, 100.5, 1e6, 1e15] {
            let want = statrs::function::gamma::ln_gamma(x);
            assert!((lgamma(x) - want).abs() < 1e-13 * want.abs().max(1.0), "x={x}: {} vs {want}", lgamma(x));
        }
    }

    #[test]
    fn log_minus_digamma_matches_statrs_and_is_inverted() {
        for a in [1e-6f64, 0.01, 0.5, 1.0, 3.3, 9.99, 10.0, 42.0, 1e4, 1e9] {
            let want = f64::ln(a) - statrs::function::gamma::digamma(a);
            let got = log_minus_digamma(a);
            // statrs' difference cancels for large a: compare where it keeps
            // its digits (the series is checked at 1e12 below).
            let tol = if a > 100.0 { 1e-6 } else { 1e-12 };
            if a <= 1e4 {
                assert!((got - want).abs() < tol * want.abs(), "a={a}: {got} vs {want}");
            }
            let h = 1e-6 * a;
            let slope = (log_minus_digamma(a + h) - log_minus_digamma(a - h)) / (2.0 * h);
            assert!((log_minus_digamma_deriv(a) - slope).abs() < 1e-5 * slope.abs(), "a={a}");
            let back = solve_gamma_shape(got, f64::NAN);
            assert!((solve_gamma_shape(got, 2.0 * a) - a).abs() < 1e-12 * a, "a={a}: from 2a");
            assert!((back - a).abs() < 1e-12 * a, "a={a}: solved {back}");
        }
        // Large a: g(a) ~ 1/(2a), which the series keeps to full precision.
        assert!((log_minus_digamma(1e12) * 2e12 - 1.0).abs() < 1e-12);
    }
}

