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
