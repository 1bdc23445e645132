// Arithmetic helpers of the EM kernels, prepended by the core before the
// family block and kernels/em.cu (src/em/gpu/mod.rs, em_prelude). The
// table-driven exp(-|d|) and ln(1 + t) are in tables.cuh, before this.

// 1/s for s in the normal range: the hardware approximation refined by two
// Newton steps, within an ulp of the IEEE quotient, without the division's
// special cases. (The inverse Gaussian's 1/x.)
__device__ __forceinline__ double rcp_sum(double s) {
    double r;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(s));
    double e = fma(-s, r, 1.0);
    r = fma(r, e, r);
    e = fma(-s, r, 1.0);
    return fma(r, e, r);
}

// The same for the E-step's sums of exp terms (in [1, EM_M], one of them
// is 1) with one cubic Newton step, 3 FMAs instead of 4: the
// approximation's error e becomes about e^3, so still within an ulp.
__device__ __forceinline__ double rcp_terms(double s) {
    double r;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(s));
    const double e = fma(-s, r, 1.0);
    return fma(r, fma(e, e, e), r);
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
