// Table-driven exp(-|d|) and ln(1 + t) on [0, 1], prepended to every
// kernel file after common.cuh (src/gpu/kernels.rs): the EM E-step's exps
// and weighted ln, and the Gibbs kernels' softplus. Each table sits in
// shared memory, filled by load_exp_table() / load_log1p_table() at the
// start of a kernel that uses it; a kernel that does not leaves it out
// (NVRTC drops unused shared arrays).

// exp(-|d|), the E-step's exps (of l - max l <= 0), by a table: x = -|d| =
// (64 n + j) ln2/64 + r with |r| <= ln2/128, exp(x) = 2^n T[j] (1 + p(r)),
// T[j] = 2^(j/64) correctly rounded, p a degree-5 fit of exp(r) - 1. Nine
// float64 instructions where the CPU's `em::simd::exp_nonpos` (a degree-11
// polynomial after reducing by ln 2, which the GPU no longer matches to
// the bit) takes 16: the float64 E-step is bound by the float64 pipe.
// Relative error below 2.0e-16 where the result is normal (1.98e-16, the
// largest over 4e7 points), plus the reduction's: r is x - (64 n + j) L
// with L the float64 nearest ln2/64 (one FMA, not two; |L - ln2/64| <
// 3.7e-19), which adds below 3.4e-17 |d| (3e-16 at |d| = 9, where e^-|d|
// is 1.2e-4; 1.2e-15 at 36, where 1 + e^-|d| no longer changes). 0 for x <=
// -708.39599609375 (an integer test of the high word; exp(x) < 2.227e-308
// there) and -inf; NaN for NaN.
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
    const double r = fma(-n, 0.010830424696249145, x);
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

// ln(1 + t) for t in [0, 1] (the weighted E-step's ln of each observation's
// sum 1 + e for M = 2) by a table: j = round(64 t), ln(1 + t) =
// ln(1 + j/64) + ln(1 + r) with r = (t - j/64) / (1 + j/64), |r| <= 1/128,
// and ln(1 + r) by its series to r^7 (truncation below 1.8e-18). Eleven
// float64 instructions where an atanh series after a division takes about
// 22. The CPU's weighted E-step does the same (`em::simd::ln_1p_table`,
// whose tests check that its table is this one). Absolute error at most 1.1e-16
// (over 4e7 points against log1pl, on a C copy of these operations);
// relative error within 2.3e-16 for tiny t; 0 at 0; NaN for NaN.
// LOG1P_TABLE[j] = {1 / (1 + j/64), ln(1 + j/64)}, correctly rounded; in
// shared memory (load_log1p_table), one 16-byte read per observation.
__device__ const unsigned long long LOG1P_TABLE_BITS[65][2] = {
    {0x3ff0000000000000ULL, 0x0000000000000000ULL}, {0x3fef81f81f81f820ULL, 0x3f8fc0a8b0fc03e4ULL},
    {0x3fef07c1f07c1f08ULL, 0x3f9f829b0e783300ULL}, {0x3fee9131abf0b767ULL, 0x3fa77458f632dcfcULL},
    {0x3fee1e1e1e1e1e1eULL, 0x3faf0a30c01162a6ULL}, {0x3fedae6076b981dbULL, 0x3fb341d7961bd1d1ULL},
    {0x3fed41d41d41d41dULL, 0x3fb6f0d28ae56b4cULL}, {0x3fecd85689039b0bULL, 0x3fba926d3a4ad563ULL},
    {0x3fec71c71c71c71cULL, 0x3fbe27076e2af2e6ULL}, {0x3fec0e070381c0e0ULL, 0x3fc0d77e7cd08e59ULL},
    {0x3febacf914c1bad0ULL, 0x3fc29552f81ff523ULL}, {0x3feb4e81b4e81b4fULL, 0x3fc44d2b6ccb7d1eULL},
    {0x3feaf286bca1af28ULL, 0x3fc5ff3070a793d4ULL}, {0x3fea98ef606a63beULL, 0x3fc7ab890210d909ULL},
    {0x3fea41a41a41a41aULL, 0x3fc9525a9cf456b4ULL}, {0x3fe9ec8e951033d9ULL, 0x3fcaf3c94e80bff3ULL},
    {0x3fe999999999999aULL, 0x3fcc8ff7c79a9a22ULL}, {0x3fe948b0fcd6e9e0ULL, 0x3fce27076e2af2e6ULL},
    {0x3fe8f9c18f9c18faULL, 0x3fcfb9186d5e3e2bULL}, {0x3fe8acb90f6bf3aaULL, 0x3fd0a324e27390e3ULL},
    {0x3fe8618618618618ULL, 0x3fd1675cababa60eULL}, {0x3fe8181818181818ULL, 0x3fd22941fbcf7966ULL},
    {0x3fe7d05f417d05f4ULL, 0x3fd2e8e2bae11d31ULL}, {0x3fe78a4c8178a4c8ULL, 0x3fd3a64c556945eaULL},
    {0x3fe745d1745d1746ULL, 0x3fd4618bc21c5ec2ULL}, {0x3fe702e05c0b8170ULL, 0x3fd51aad872df82dULL},
    {0x3fe6c16c16c16c17ULL, 0x3fd5d1bdbf5809caULL}, {0x3fe6816816816817ULL, 0x3fd686c81e9b14afULL},
    {0x3fe642c8590b2164ULL, 0x3fd739d7f6bbd007ULL}, {0x3fe6058160581606ULL, 0x3fd7eaf83b82afc3ULL},
    {0x3fe5c9882b931057ULL, 0x3fd89a3386c1425bULL}, {0x3fe58ed2308158edULL, 0x3fd947941c2116fbULL},
    {0x3fe5555555555555ULL, 0x3fd9f323ecbf984cULL}, {0x3fe51d07eae2f815ULL, 0x3fda9cec9a9a084aULL},
    {0x3fe4e5e0a72f0539ULL, 0x3fdb44f77bcc8f63ULL}, {0x3fe4afd6a052bf5bULL, 0x3fdbeb4d9da71b7cULL},
    {0x3fe47ae147ae147bULL, 0x3fdc8ff7c79a9a22ULL}, {0x3fe446f86562d9fbULL, 0x3fdd32fe7e00ebd5ULL},
    {0x3fe4141414141414ULL, 0x3fddd46a04c1c4a1ULL}, {0x3fe3e22cbce4a902ULL, 0x3fde744261d68788ULL},
    {0x3fe3b13b13b13b14ULL, 0x3fdf128f5faf06edULL}, {0x3fe3813813813814ULL, 0x3fdfaf588f78f31fULL},
    {0x3fe3521cfb2b78c1ULL, 0x3fe02552a5a5d0ffULL}, {0x3fe323e34a2b10bfULL, 0x3fe0723e5c1cdf40ULL},
    {0x3fe2f684bda12f68ULL, 0x3fe0be72e4252a83ULL}, {0x3fe2c9fb4d812ca0ULL, 0x3fe109f39e2d4c97ULL},
    {0x3fe29e4129e4129eULL, 0x3fe154c3d2f4d5eaULL}, {0x3fe27350b8812735ULL, 0x3fe19ee6b467c96fULL},
    {0x3fe2492492492492ULL, 0x3fe1e85f5e7040d0ULL}, {0x3fe21fb78121fb78ULL, 0x3fe23130d7bebf43ULL},
    {0x3fe1f7047dc11f70ULL, 0x3fe2795e1289b11bULL}, {0x3fe1cf06ada2811dULL, 0x3fe2c0e9ed448e8cULL},
    {0x3fe1a7b9611a7b96ULL, 0x3fe307d7334f10beULL}, {0x3fe1811811811812ULL, 0x3fe34e289d9ce1d3ULL},
    {0x3fe15b1e5f75270dULL, 0x3fe393e0d3562a1aULL}, {0x3fe135c81135c811ULL, 0x3fe3d9026a7156fbULL},
    {0x3fe1111111111111ULL, 0x3fe41d8fe84672aeULL}, {0x3fe0ecf56be69c90ULL, 0x3fe4618bc21c5ec2ULL},
    {0x3fe0c9714fbcda3bULL, 0x3fe4a4f85db03ebbULL}, {0x3fe0a6810a6810a7ULL, 0x3fe4e7d811b75bb1ULL},
    {0x3fe0842108421084ULL, 0x3fe52a2d265bc5abULL}, {0x3fe0624dd2f1a9fcULL, 0x3fe56bf9d5b3f399ULL},
    {0x3fe0410410410410ULL, 0x3fe5ad404c359f2dULL}, {0x3fe0204081020408ULL, 0x3fe5ee02a9241675ULL},
    {0x3fe0000000000000ULL, 0x3fe62e42fefa39efULL},
};
__shared__ double2 log1p_table[65];
__device__ __forceinline__ void load_log1p_table() {
    for (int j = threadIdx.x; j < 65; j += blockDim.x)
        log1p_table[j] = make_double2(__longlong_as_double(LOG1P_TABLE_BITS[j][0]), __longlong_as_double(LOG1P_TABLE_BITS[j][1]));
}
__device__ __forceinline__ double log1p_unit(double t) {
    const double k = fma(t, 64.0, EXP_SHIFTER);  // 64 t rounded to an integer j, in k's low bits
    const double j = k - EXP_SHIFTER;
    const double2 c = log1p_table[__double2loint(k) & 127];
    const double r = fma(-j, 0.015625, t) * c.x;  // t - j/64 is exact
    double q = fma(r, 1.0 / 7.0, -1.0 / 6.0);
    q = fma(q, r, 0.2); q = fma(q, r, -0.25); q = fma(q, r, 1.0 / 3.0); q = fma(q, r, -0.5); q = fma(q, r, 1.0);
    return fma(r, q, c.y);
}
