// Arithmetic helpers of the EM kernels, prepended by the core before the
// family block and kernels/em.cu (src/em/gpu/mod.rs, em_prelude).

// exp(-|d|), the E-step's exps (of l - max l <= 0), by a table: x = -|d| =
// (64 n + j) ln2/64 + r with |r| <= ln2/128, exp(x) = 2^n T[j] (1 + p(r)),
// T[j] = 2^(j/64) correctly rounded, p a degree-5 fit of exp(r) - 1. Ten
// float64 instructions where the CPU's `em::simd::exp_nonpos` (a degree-11
// polynomial after reducing by ln 2, which the GPU no longer matches to
// the bit) takes 16: the float64 E-step is bound by the float64 pipe.
// Relative error below 2.0e-16 where the result is normal (1.98e-16, the
// largest over 4e7 points). 0 for x <= -708.39599609375 (an integer test
// of the high word; exp(x) < 2.227e-308 there) and -inf; NaN for NaN.
// The table sits in shared memory, filled by load_exp_table() at each
// kernel's start (constant memory would serialise a warp's different j),
// as the bits of T[j] less j << 46: adding k's low bits (64 n + j) times
// 2^14 to the high word then scales T[j] by 2^n.
#define EXP_TABLE_N 64
__device__ const unsigned long long EXP_TABLE_BITS[EXP_TABLE_N] = {
    0x3ff0000000000000ULL, 0x3fefec9a3e778061ULL, 0x3fefd9b0d3158574ULL, 0x3fefc74518759bc8ULL,
    0x3fefb5586cf9890fULL, 0x3fefa3ec32d3d1a2ULL, 0x3fef9301d0125b51ULL, 0x3fef829aaea92de0ULL,
    0x3fef72b83c7d517bULL, 0x3fef635beb6fcb75ULL, 0x3fef54873168b9aaULL, 0x3fef463b88628cd6ULL,
    0x3fef387a6e756238ULL, 0x3fef2b4565e27cddULL, 0x3fef1e9df51fdee1ULL, 0x3fef1285a6e4030bULL,
    0x3fef06fe0a31b715ULL, 0x3feefc08b26416ffULL, 0x3feef1a7373aa9cbULL, 0x3feee7db34e59ff7ULL,
    0x3feedea64c123422ULL, 0x3feed60a21f72e2aULL, 0x3feece086061892dULL, 0x3feec6a2b5c13cd0ULL,
    0x3feebfdad5362a27ULL, 0x3feeb9b2769d2ca7ULL, 0x3feeb42b569d4f82ULL, 0x3feeaf4736b527daULL,
    0x3feeab07dd485429ULL, 0x3feea76f15ad2148ULL, 0x3feea47eb03a5585ULL, 0x3feea23882552225ULL,
    0x3feea09e667f3bcdULL, 0x3fee9fb23c651a2fULL, 0x3fee9f75e8ec5f74ULL, 0x3fee9feb564267c9ULL,
    0x3feea11473eb0187ULL, 0x3feea2f336cf4e62ULL, 0x3feea589994cce13ULL, 0x3feea8d99b4492edULL,
    0x3feeace5422aa0dbULL, 0x3feeb1ae99157736ULL, 0x3feeb737b0cdc5e5ULL, 0x3feebd829fde4e50ULL,
    0x3feec49182a3f090ULL, 0x3feecc667b5de565ULL, 0x3feed503b23e255dULL, 0x3feede6b5579fdbfULL,
    0x3feee89f995ad3adULL, 0x3feef3a2b84f15fbULL, 0x3feeff76f2fb5e47ULL, 0x3fef0c1e904bc1d2ULL,
    0x3fef199bdd85529cULL, 0x3fef27f12e57d14bULL, 0x3fef3720dcef9069ULL, 0x3fef472d4a07897cULL,
    0x3fef5818dcfba487ULL, 0x3fef69e603db3285ULL, 0x3fef7c97337b9b5fULL, 0x3fef902ee78b3ff6ULL,
    0x3fefa4afa2a490daULL, 0x3fefba1bee615a27ULL, 0x3fefd0765b6e4540ULL, 0x3fefe7c1819e90d8ULL};
__shared__ double exp_table[EXP_TABLE_N];
__device__ __forceinline__ void load_exp_table() {
    for (int j = threadIdx.x; j < EXP_TABLE_N; j += blockDim.x) exp_table[j] = __longlong_as_double(EXP_TABLE_BITS[j]);
}
__device__ __forceinline__ double exp_neg_abs(double d) {
    const double x = -fabs(d);
    const double k = fma(x, 92.33248261689366, EXP_SHIFTER);  // 64 / ln 2: k's low bits hold 64 n + j
    const double n = k - EXP_SHIFTER;
    double r = fma(-n, 0.010830424696249145, x);  // ln2/64 in two parts; this step is exact
    r = fma(-n, 3.623510646634843e-19, r);
    double q = 0.008333339151693497;
    q = fma(q, r, 0.04166670739519196);
    q = fma(q, r, 0.16666666666664534);
    q = fma(q, r, 0.49999999999985073);
    const double p = fma(r * r, q, r);  // exp(r) - 1
    const unsigned m = (unsigned)__double2loint(k);
    const double t = exp_table[m & (EXP_TABLE_N - 1)];
    const double s = __hiloint2double((int)((unsigned)__double2hiint(t) + (m << 14)), __double2loint(t));
    const double y = fma(s, p, s);
    // |d| >= 708.39599609375, inf included (not NaN: its high word is above inf's).
    const unsigned hd = (unsigned)__double2hiint(d) & 0x7fffffffu;
    return hd - 0x4086232bu <= 0x7ff00000u - 0x4086232bu ? 0.0 : y;
}

// 1/s for s in the normal range: the hardware approximation refined by two
// Newton steps, within an ulp of the IEEE quotient, without the division's
// special cases. (The inverse Gaussian's 1/x, and log1p_unit.)
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
