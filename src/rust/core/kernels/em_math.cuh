// Arithmetic helpers of the EM kernels, prepended by the core before the
// family block and kernels/em.cu (src/em/gpu/mod.rs, em_prelude).

// exp(x) for x <= 0, the CPU's `em::simd::exp_nonpos` (constants emitted by
// the core): relative error below 2.5e-16 where the result is normal, 0
// below EXP_MIN_ARG. Branch-free with its coefficients in constant memory,
// so the M exps of an observation interleave and take no register moves.
__constant__ double EXP_Q[10] = {EXP_Q_LIST};
__device__ __forceinline__ double exp_nonpos(double x) {
    const double k = fma(x, EXP_LOG2_E, EXP_SHIFTER);
    const double n = k - EXP_SHIFTER;
    double r = fma(-n, EXP_LN2_HI, x);
    r = fma(-n, EXP_LN2_LO, r);
    double q = EXP_Q[9];
#pragma unroll
    for (int i = 8; i >= 0; --i) q = fma(q, r, EXP_Q[i]);
    const double p = fma(fma(q, r, 1.0), r, 1.0);
    // 2^n from the low bits of k: n + 1023 is the biased exponent.
    const unsigned long long bits = ((unsigned long long)__double_as_longlong(k) + 1023ULL) << 52;
    const double y = p * __longlong_as_double((long long)bits);
    return x < EXP_MIN_ARG ? 0.0 : y;
}

// 1/s for s in the normal range: the hardware approximation refined by two
// Newton steps, within an ulp of the IEEE quotient, without the division's
// special cases. (The EM E-step's sums of exp terms, one of which is 1,
// and the inverse Gaussian's 1/x.)
__device__ __forceinline__ double rcp_sum(double s) {
    double r;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(s));
    double e = fma(-s, r, 1.0);
    r = fma(r, e, r);
    e = fma(-s, r, 1.0);
    return fma(r, e, r);
}

// ln(1 + t) for t in [0, 1], the CPU's `em::simd::ln_1p_unit`: absolute
// error below 2e-16, by 2 atanh(u / (2 + u)) after moving t above
// sqrt(2) - 1 to (t - 1) / 2 (and adding ln 2). Branch-free. The weighted
// E-step's ln of each observation's sum 1 + e, e in [0, 1], for M = 2.
__device__ __forceinline__ double log1p_unit(double t) {
    const bool hi = t > 0.41421356237309505;
    const double u = hi ? (t - 1.0) * 0.5 : t;
    const double s = u * rcp_sum(2.0 + u);  // the CPU divides: within an ulp
    const double z = s * s;
    double p = 1.0 / 21.0;
    p = fma(p, z, 1.0 / 19.0); p = fma(p, z, 1.0 / 17.0); p = fma(p, z, 1.0 / 15.0);
    p = fma(p, z, 1.0 / 13.0); p = fma(p, z, 1.0 / 11.0); p = fma(p, z, 1.0 / 9.0);
    p = fma(p, z, 1.0 / 7.0); p = fma(p, z, 1.0 / 5.0); p = fma(p, z, 1.0 / 3.0);
    p = fma(p, z, 1.0);
    return fma(2.0 * s, p, hi ? 0.6931471805599453 : 0.0);
}

// The standard normal's density, upper tail and log CDF (censored data),
// as src/em/family/special.rs: norm_pdf, norm_upper, log_norm_cdf.
__device__ __forceinline__ double norm_pdf(double z) { return exp(-0.5 * z * z) * 0.3989422804014327; }
__device__ __forceinline__ double norm_upper(double z) { return 0.5 * erfc(z / 1.4142135623730951); }
__device__ double log_norm_cdf(double z) {
    if (z > -30.0) return log(norm_upper(-z));
    const double t = 1.0 / (z * z);
    return -0.5 * z * z - log(-z) - 0.5 * log(TWO_PI) + log(1.0 - t + 3.0 * t * t - 15.0 * t * t * t);
}
