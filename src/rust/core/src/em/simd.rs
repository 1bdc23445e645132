//! SIMD E-step for the CPU backend, chosen at run time.
//!
//! `cpu::e_step` calls these kernels where the CPU has AVX2 + FMA (x86 only)
//! and M <= MAX_COMPONENTS; everywhere else it runs the scalar E-step. The
//! kernels are plain Rust over fixed-size arrays, compiled inside
//! `#[target_feature]` functions where LLVM vectorises their lane loops into
//! AVX2 or AVX-512 instructions.
//!
//! Observation i of a dataset goes to lane i % N (N = TWO_LANES for M = 2,
//! SMALL_LANES otherwise): every lane keeps its
//! own running sums, and the lanes are added in a fixed order at the end. So
//! the lane layout, not the vector width, fixes the order of every addition:
//! the AVX2 and AVX-512 builds give the same bits, and both are deterministic.
//! They differ from the scalar E-step at the level of rounding only: exp is
//! the polynomial below instead of libm's (results under the smallest normal
//! number are flushed to 0), sums are split over lanes, and for M = 2 w*u
//! and w*v are added with a fused multiply-add.
// On targets without a SIMD kernel only the tests use this module.
#![cfg_attr(not(any(target_arch = "x86_64", target_arch = "x86")), allow(dead_code))]

use super::cpu::{log_block_len, Sums, Wanted};
use super::data::Prepared;
use super::family::Natural;

/// Lanes<N> of running sums (observations taken per step) of the M = 2 steps:
/// one AVX-512 vector (16 measured 15% slower: more of their values
/// than registers).
const TWO_LANES: usize = 8;

/// Lanes<N> of the steps for other M: 8 measured 2.2x slower at M = 8 (LLVM
/// vectorises those loops across components instead).
const SMALL_LANES: usize = 16;

/// Largest M the SIMD kernels handle (their per-component values live in fixed arrays).
pub(super) const MAX_COMPONENTS: usize = 8;

/// One value per lane, aligned so that full-width vector loads and stores
/// never straddle a cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Lanes<const N: usize>([f64; N]);

impl<const N: usize> Lanes<N> {
    const fn splat(x: f64) -> Self {
        Lanes([x; N])
    }
}

impl<const N: usize> std::ops::Deref for Lanes<N> {
    type Target = [f64; N];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<const N: usize> std::ops::DerefMut for Lanes<N> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

// ---------------------------------------------------------------------------
// exp for arguments <= 0
// ---------------------------------------------------------------------------

// The GPU's E-step uses a table-driven exp instead (kernels/tables.cuh,
// `exp_neg_abs`: fewer float64 instructions, which bound it there); both are
// within 2.5e-16 relative, so the backends agree to rounding, not to the bit.

/// Below this, exp(x) is under the smallest normal f64 and is returned as 0
/// (-1022 ln 2 = ln f64::MIN_POSITIVE).
pub(crate) const EXP_MIN_ARG: f64 = -708.396_418_532_264_1;
/// 1.5 * 2^52: adding it rounds to an integer, which lands in the low mantissa bits.
pub(crate) const SHIFTER: f64 = 6_755_399_441_055_744.0;
pub(crate) const LN2_HI: f64 = std::f64::consts::LN_2;
/// ln 2 - LN2_HI.
pub(crate) const LN2_LO: f64 = 2.319_046_813_846_299_6e-17;
/// exp(r) ~ 1 + r + r^2 q(r) on |r| <= ln2/2, q(r) = sum Q[k] r^k: a
/// Chebyshev fit (mpmath `chebyfit` of (exp(r) - 1 - r)/r^2, degree 9), whose
/// relative error, with these rounded coefficients, is below 1.7e-17.
pub(crate) const EXP_Q: [f64; 10] = [
    0.500_000_000_000_000_1,
    0.166_666_666_666_666_69,
    0.041_666_666_666_623_824,
    0.008_333_333_333_330_039,
    0.001_388_888_891_736_708_1,
    0.000_198_412_698_631_715_57,
    2.480_152_105_786_820_4e-5,
    2.755_726_827_690_569_6e-6,
    2.762_020_159_103_154_7e-7,
    2.510_047_250_569_499_6e-8,
];

/// exp(x) for x <= 0: relative error below 2.5e-16 (the tests measure it)
/// where the result is a normal number, 0 below EXP_MIN_ARG (and for -inf),
/// NaN for NaN. Branch-free, so that a loop over it vectorises. Uses
/// `mul_add`: call it only where FMA is enabled, or that is a libm call.
#[inline(always)]
pub(crate) fn exp_nonpos(x: f64) -> f64 {
    // x = n ln2 + r with n an integer and |r| <= ln2/2 (Cody-Waite; each FMA
    // rounds once, so r is accurate to an ulp of r).
    let k = x.mul_add(std::f64::consts::LOG2_E, SHIFTER);
    let n = k - SHIFTER;
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let mut q = EXP_Q[9];
    for &c in EXP_Q[..9].iter().rev() {
        q = q.mul_add(r, c);
    }
    // 1 + r(1 + r q): the last two steps keep the rounding error near 1 ulp.
    let p = q.mul_add(r, 1.0).mul_add(r, 1.0);
    // 2^n from the low bits of k: n + 1023 is the biased exponent, in
    // [1, 1023] whenever x >= EXP_MIN_ARG (other lanes are replaced below).
    let y = p * f64::from_bits(k.to_bits().wrapping_add(1023) << 52);
    // A select between two computed values, so no branch. NaN fails the
    // comparison and keeps y = NaN.
    if x < EXP_MIN_ARG {
        0.0
    } else {
        y
    }
}

// ---------------------------------------------------------------------------
// ln for the weighted E-step
// ---------------------------------------------------------------------------

/// sqrt(2) - 1 (where ln_1p_unit switches to ln 2 + ln1p((t - 1) / 2)).
const ROOT2_M1: f64 = 0.414_213_562_373_095_05;
/// ln1p(u) = 2 s (1 + z P(z)), s = u / (2 + u), z = s^2: P's coefficients
/// are fdlibm's minimax Lg1..Lg7 (e_log.c) halved, good to 2^-58.45 for
/// |s| <= 0.1716. (Taylor's 1/3, 1/5, ... needed ten terms.)
const HALF_LG: [f64; 7] = [
    6.666666666666735130e-01 * 0.5,
    3.999999999940941908e-01 * 0.5,
    2.857142874366239149e-01 * 0.5,
    2.222219843214978396e-01 * 0.5,
    1.818357216161805012e-01 * 0.5,
    1.531383769920937332e-01 * 0.5,
    1.479819860511658591e-01 * 0.5,
];

/// ln(1 + t) for t in [0, 1], within about 2 ulp (relative): |s| <= 0.1716
/// after the switch.
/// Branch-free (selects), so it vectorises; uses `mul_add`: fast only
/// inside a function compiled with FMA. Shared with `gibbs::rows`.
#[inline(always)]
pub(crate) fn ln_1p_unit(t: f64) -> f64 {
    let hi = t > ROOT2_M1;
    let u = if hi { (t - 1.0) * 0.5 } else { t };
    let s = u / (2.0 + u);
    // s^2 would be subnormal (or underflow) for |s| < 1e-154, and each such
    // product takes a microcode assist (over a hundred cycles): weighted
    // fits of separated components have many such lanes. Below 1e-30, z
    // only has to be small enough that 1 + z P(z) rounds to 1, which 1e-60
    // is, so the result's bits are unchanged.
    let s_abs = s.abs().max(1e-30);
    let z = s_abs * s_abs;
    let mut p = HALF_LG[6];
    for &c in HALF_LG[..6].iter().rev() {
        p = p.mul_add(z, c);
    }
    p = p.mul_add(z, 1.0);
    (2.0 * s).mul_add(p, if hi { std::f64::consts::LN_2 } else { 0.0 })
}

/// {1 / (1 + j/64), ln(1 + j/64)} for j = 0..=64 as bits, correctly
/// rounded (`ln_1p_table`; the GPU's kernels are written with the same
/// values, `gpu_log1p_table`).
pub(crate) const LOG1P_TABLE_BITS: [[u64; 2]; 65] = [
    [0x3ff0000000000000, 0x0000000000000000],
    [0x3fef81f81f81f820, 0x3f8fc0a8b0fc03e4],
    [0x3fef07c1f07c1f08, 0x3f9f829b0e783300],
    [0x3fee9131abf0b767, 0x3fa77458f632dcfc],
    [0x3fee1e1e1e1e1e1e, 0x3faf0a30c01162a6],
    [0x3fedae6076b981db, 0x3fb341d7961bd1d1],
    [0x3fed41d41d41d41d, 0x3fb6f0d28ae56b4c],
    [0x3fecd85689039b0b, 0x3fba926d3a4ad563],
    [0x3fec71c71c71c71c, 0x3fbe27076e2af2e6],
    [0x3fec0e070381c0e0, 0x3fc0d77e7cd08e59],
    [0x3febacf914c1bad0, 0x3fc29552f81ff523],
    [0x3feb4e81b4e81b4f, 0x3fc44d2b6ccb7d1e],
    [0x3feaf286bca1af28, 0x3fc5ff3070a793d4],
    [0x3fea98ef606a63be, 0x3fc7ab890210d909],
    [0x3fea41a41a41a41a, 0x3fc9525a9cf456b4],
    [0x3fe9ec8e951033d9, 0x3fcaf3c94e80bff3],
    [0x3fe999999999999a, 0x3fcc8ff7c79a9a22],
    [0x3fe948b0fcd6e9e0, 0x3fce27076e2af2e6],
    [0x3fe8f9c18f9c18fa, 0x3fcfb9186d5e3e2b],
    [0x3fe8acb90f6bf3aa, 0x3fd0a324e27390e3],
    [0x3fe8618618618618, 0x3fd1675cababa60e],
    [0x3fe8181818181818, 0x3fd22941fbcf7966],
    [0x3fe7d05f417d05f4, 0x3fd2e8e2bae11d31],
    [0x3fe78a4c8178a4c8, 0x3fd3a64c556945ea],
    [0x3fe745d1745d1746, 0x3fd4618bc21c5ec2],
    [0x3fe702e05c0b8170, 0x3fd51aad872df82d],
    [0x3fe6c16c16c16c17, 0x3fd5d1bdbf5809ca],
    [0x3fe6816816816817, 0x3fd686c81e9b14af],
    [0x3fe642c8590b2164, 0x3fd739d7f6bbd007],
    [0x3fe6058160581606, 0x3fd7eaf83b82afc3],
    [0x3fe5c9882b931057, 0x3fd89a3386c1425b],
    [0x3fe58ed2308158ed, 0x3fd947941c2116fb],
    [0x3fe5555555555555, 0x3fd9f323ecbf984c],
    [0x3fe51d07eae2f815, 0x3fda9cec9a9a084a],
    [0x3fe4e5e0a72f0539, 0x3fdb44f77bcc8f63],
    [0x3fe4afd6a052bf5b, 0x3fdbeb4d9da71b7c],
    [0x3fe47ae147ae147b, 0x3fdc8ff7c79a9a22],
    [0x3fe446f86562d9fb, 0x3fdd32fe7e00ebd5],
    [0x3fe4141414141414, 0x3fddd46a04c1c4a1],
    [0x3fe3e22cbce4a902, 0x3fde744261d68788],
    [0x3fe3b13b13b13b14, 0x3fdf128f5faf06ed],
    [0x3fe3813813813814, 0x3fdfaf588f78f31f],
    [0x3fe3521cfb2b78c1, 0x3fe02552a5a5d0ff],
    [0x3fe323e34a2b10bf, 0x3fe0723e5c1cdf40],
    [0x3fe2f684bda12f68, 0x3fe0be72e4252a83],
    [0x3fe2c9fb4d812ca0, 0x3fe109f39e2d4c97],
    [0x3fe29e4129e4129e, 0x3fe154c3d2f4d5ea],
    [0x3fe27350b8812735, 0x3fe19ee6b467c96f],
    [0x3fe2492492492492, 0x3fe1e85f5e7040d0],
    [0x3fe21fb78121fb78, 0x3fe23130d7bebf43],
    [0x3fe1f7047dc11f70, 0x3fe2795e1289b11b],
    [0x3fe1cf06ada2811d, 0x3fe2c0e9ed448e8c],
    [0x3fe1a7b9611a7b96, 0x3fe307d7334f10be],
    [0x3fe1811811811812, 0x3fe34e289d9ce1d3],
    [0x3fe15b1e5f75270d, 0x3fe393e0d3562a1a],
    [0x3fe135c81135c811, 0x3fe3d9026a7156fb],
    [0x3fe1111111111111, 0x3fe41d8fe84672ae],
    [0x3fe0ecf56be69c90, 0x3fe4618bc21c5ec2],
    [0x3fe0c9714fbcda3b, 0x3fe4a4f85db03ebb],
    [0x3fe0a6810a6810a7, 0x3fe4e7d811b75bb1],
    [0x3fe0842108421084, 0x3fe52a2d265bc5ab],
    [0x3fe0624dd2f1a9fc, 0x3fe56bf9d5b3f399],
    [0x3fe0410410410410, 0x3fe5ad404c359f2d],
    [0x3fe0204081020408, 0x3fe5ee02a9241675],
    [0x3fe0000000000000, 0x3fe62e42fefa39ef],
];

/// LOG1P_TABLE_BITS as f64, padded to 128 entries (NaN) so that the index
/// `k & 127` needs no bounds check.
const LOG1P_TABLE: [[f64; 2]; 128] = {
    let mut out = [[f64::NAN; 2]; 128];
    let mut j = 0;
    while j < 65 {
        out[j] = [f64::from_bits(LOG1P_TABLE_BITS[j][0]), f64::from_bits(LOG1P_TABLE_BITS[j][1])];
        j += 1;
    }
    out
};

/// ln(1 + t) for t in [0, 1] by a table, as the GPU's `log1p_unit`
/// (kernels/tables.cuh): j = round(64 t), ln(1 + t) = ln(1 + j/64) +
/// ln(1 + r) with r = (t - j/64) / (1 + j/64), |r| <= 1/128, the latter by
/// its series to r^7. No division; absolute error at most 1.1e-16, relative
/// 2.3e-16 for small t (j = 0 is exact: r = t). NaN for NaN (the padding).
#[inline(always)]
pub(crate) fn ln_1p_table(t: f64) -> f64 {
    let k = t.mul_add(64.0, SHIFTER);
    let j = k - SHIFTER;
    let [inv, ln] = LOG1P_TABLE[(k.to_bits() & 127) as usize];
    // t - j/64 is exact.
    let r = (-j).mul_add(0.015625, t) * inv;
    let mut q = r.mul_add(1.0 / 7.0, -1.0 / 6.0);
    for c in [0.2, -0.25, 1.0 / 3.0, -0.5, 1.0] {
        q = q.mul_add(r, c);
    }
    r.mul_add(q, ln)
}

/// ln(s) for s in [1, 2^1022): s = 2^k (1 + t), t in [0, 1), from the bits
/// (no branch), then k ln 2 + ln(1 + t). The weighted E-step's per
/// observation sums lie in [1, M]. NaN stays NaN.
#[inline(always)]
fn ln_at_least_one(s: f64) -> f64 {
    let bits = s.to_bits();
    let k = ((bits >> 52) as i64 - 1023) as f64;
    let t = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000) - 1.0;
    let y = k.mul_add(std::f64::consts::LN_2, ln_1p_unit(t));
    // A select: NaN's bits would read as a finite number.
    if s.is_nan() {
        s
    } else {
        y
    }
}

// ---------------------------------------------------------------------------
// E-step kernels
// ---------------------------------------------------------------------------
//
// Each step takes N (a lane count) observations through a few loops over the lanes
// (log-densities, exps, then weights and sums). Every loop is elementwise,
// with no reduction inside, so LLVM vectorises it at the target's width;
// keeping the exps in a loop of their own lets the CPU overlap their long
// dependency chains (this measured faster than one fused loop).

/// Running log-likelihood per lane: sum of maxima, sum of logs of full
/// products, and the current product of per-observation sums (each in
/// [1, M]), as in the scalar E-step.
struct LogLik<const N: usize> {
    max_sum: Lanes<N>,
    log_sum: Lanes<N>,
    prod: Lanes<N>,
    /// Factors a product may hold before its log is taken.
    limit: usize,
    factors: usize,
}

impl<const N: usize> LogLik<N> {
    #[inline(always)]
    fn new(m: usize) -> Self {
        LogLik { max_sum: Lanes::splat(0.0), log_sum: Lanes::splat(0.0), prod: Lanes::splat(1.0), limit: log_block_len(m), factors: 0 }
    }

    /// Makes room in every lane's product for one more factor.
    #[inline(always)]
    fn reserve(&mut self) {
        if self.factors == self.limit {
            for (log_sum, prod) in self.log_sum.iter_mut().zip(self.prod.iter_mut()) {
                *log_sum += prod.ln();
                *prod = 1.0;
            }
            self.factors = 0;
        }
        self.factors += 1;
    }

    /// Lanes<N> combined in a fixed order.
    fn total(&self) -> f64 {
        let max_sum = sum_lanes(&self.max_sum);
        let log_sum = (0..N).fold(0.0, |t, l| t + (self.log_sum[l] + self.prod[l].ln()));
        max_sum + log_sum
    }
}

/// Lanes<N> added in a fixed order.
fn sum_lanes<const N: usize>(x: &Lanes<N>) -> f64 {
    x.iter().fold(0.0, |t, x| t + x)
}

/// One feature (u or v) of N observations.
type Feature<const N: usize> = [f64; N];

/// The last `tail.len() < N` values of a feature, padded with 0
/// (padding lanes are computed, then masked).
fn pad<const N: usize>(tail: &[f64]) -> Feature<N> {
    let mut out = [0.0; N];
    out[..tail.len()].copy_from_slice(tail);
    out
}

/// A full chunk of N values as a feature.
#[inline(always)]
fn full<const N: usize>(chunk: &[f64]) -> &Feature<N> {
    chunk.try_into().expect("chunks_exact gives full chunks")
}

/// Running sums of M = 2 components: w, w*u, w*v of component 0, then of 1.
type TwoSums<const N: usize> = [Lanes<N>; 6];

/// What the M = 2 steps compute first for N observations:
/// d = l1 - l0, top = max(l0, l1), and e = exp(-|d|) (the ratio of the
/// smaller to the larger weighted density).
struct TwoTerms<const N: usize> {
    d: Lanes<N>,
    top: Lanes<N>,
    e: Lanes<N>,
}

#[inline(always)]
fn two_terms<const N: usize>(c: [Natural; 2], u: &Feature<N>, v: &Feature<N>) -> TwoTerms<N> {
    let [mut d, mut top, mut e] = [Lanes::splat(0.0); 3];
    for i in 0..N {
        // Same expressions as the scalar code (Rust never fuses them into FMAs).
        let l0 = c[0].a + c[0].b * u[i] + c[0].c * v[i];
        let l1 = c[1].a + c[1].b * u[i] + c[1].c * v[i];
        d[i] = l1 - l0;
        top[i] = if l1 > l0 { l1 } else { l0 };
    }
    for i in 0..N {
        e[i] = exp_nonpos(-d[i].abs());
    }
    TwoTerms { d, top, e }
}

/// N observations of the M = 2 E-step. With TAIL, only the first
/// `count` lanes hold observations.
#[inline(always)]
fn two_step<const N: usize, const TAIL: bool>(c: [Natural; 2], u: &Feature<N>, v: &Feature<N>, count: usize, acc: &mut TwoSums<N>, ll: &mut LogLik<N>) {
    ll.reserve();
    let TwoTerms { d, top, e } = two_terms(c, u, v);
    for i in 0..N {
        let mut s = 1.0 + e[i];
        let w_top = 1.0 / s;
        let w_low = e[i] * w_top;
        let (mut w0, mut w1) = if d[i] > 0.0 { (w_low, w_top) } else { (w_top, w_low) };
        let mut t = top[i];
        if TAIL && i >= count {
            (w0, w1, t, s) = (0.0, 0.0, 0.0, 1.0);
        }
        acc[0][i] += w0;
        acc[1][i] = w0.mul_add(u[i], acc[1][i]);
        acc[2][i] = w0.mul_add(v[i], acc[2][i]);
        acc[3][i] += w1;
        acc[4][i] = w1.mul_add(u[i], acc[4][i]);
        acc[5][i] = w1.mul_add(v[i], acc[5][i]);
        ll.max_sum[i] += t;
        ll.prod[i] *= s;
    }
}

/// The M = 2 E-step, one exp per observation as in `cpu::e_step_two`.
/// Returns the log-likelihood without the shared term. Call only with FMA
/// enabled (through `Simd`).
#[inline(always)]
fn e_step_two<const N: usize>(u: &[f64], v: &[f64], nat: &[Natural], sums: &mut [Sums]) -> f64 {
    let c = [nat[0], nat[1]];
    let mut acc = [Lanes::splat(0.0); 6];
    let mut ll = LogLik::new(2);
    let (us, vs) = (u.chunks_exact(N), v.chunks_exact(N));
    let (u_tail, v_tail) = (us.remainder(), vs.remainder());
    for (uc, vc) in us.zip(vs) {
        two_step::<N, false>(c, full(uc), full(vc), N, &mut acc, &mut ll);
    }
    if !u_tail.is_empty() {
        two_step::<N, true>(c, &pad(u_tail), &pad(v_tail), u_tail.len(), &mut acc, &mut ll);
    }
    for (k, a) in acc.iter().enumerate() {
        sums[k / 3][k % 3] = sum_lanes(a);
    }
    ll.total()
}

/// Running sums w, w*u, w*v of up to MAX_COMPONENTS components.
type SmallSums<const N: usize> = [[Lanes<N>; 3]; MAX_COMPONENTS];

/// The M log-densities l_j of N observations into `lp`, then replaced
/// by exp(l_j - top); returns per lane top = max_j l_j and the sum of the
/// exps.
#[inline(always)]
fn lane_exps<const N: usize>(nat: &[Natural], u: &Feature<N>, v: &Feature<N>, lp: &mut [Lanes<N>]) -> (Lanes<N>, Lanes<N>) {
    let mut top = Lanes::splat(f64::NEG_INFINITY);
    let mut s = Lanes::splat(0.0);
    for (l, c) in lp.iter_mut().zip(nat) {
        for i in 0..N {
            l[i] = c.a + c.b * u[i] + c.c * v[i];
            // As f64::max in the scalar code: a NaN l leaves top alone (it
            // still makes s, and so the log-likelihood, NaN).
            top[i] = if l[i] > top[i] { l[i] } else { top[i] };
        }
    }
    for l in lp.iter_mut() {
        for i in 0..N {
            l[i] = exp_nonpos(l[i] - top[i]);
            s[i] += l[i];
        }
    }
    (top, s)
}

/// N observations of the E-step for 1 <= M <= MAX_COMPONENTS. With
/// TAIL, only the first `count` lanes hold observations.
#[inline(always)]
fn small_step<const N: usize, const TAIL: bool>(nat: &[Natural], u: &Feature<N>, v: &Feature<N>, count: usize, acc: &mut SmallSums<N>, ll: &mut LogLik<N>) {
    ll.reserve();
    let mut r = Lanes::splat(0.0);
    let mut lp = [Lanes::splat(0.0); MAX_COMPONENTS];
    let lp = &mut lp[..nat.len()];
    let (mut top, mut s) = lane_exps(nat, u, v, lp);
    for i in 0..N {
        r[i] = 1.0 / s[i];
        if TAIL && i >= count {
            (r[i], top[i], s[i]) = (0.0, 0.0, 1.0);
        }
        ll.max_sum[i] += top[i];
        ll.prod[i] *= s[i];
    }
    add_sums(lp, &r, u, v, acc);
}

/// Each component's sums: w = exp term x r (the reciprocal of the lane's
/// sum, times its weight when weighted), w, w*u and w*v. Plain multiply and
/// add here: with mul_add, LLVM vectorises this loop across the three sums
/// (scatter stores) and M = 8 runs 3x slower.
#[inline(always)]
fn add_sums<const N: usize>(lp: &[Lanes<N>], r: &Lanes<N>, u: &Feature<N>, v: &Feature<N>, acc: &mut SmallSums<N>) {
    for (l, a) in lp.iter().zip(acc.iter_mut()) {
        for i in 0..N {
            let w = l[i] * r[i];
            a[0][i] += w;
            a[1][i] += w * u[i];
            a[2][i] += w * v[i];
        }
    }
}

/// The E-step for 1 <= M <= MAX_COMPONENTS, as in `cpu::e_step_sized`.
/// Call only with FMA enabled (through `Simd`).
#[inline(always)]
fn e_step_small<const N: usize>(u: &[f64], v: &[f64], nat: &[Natural], sums: &mut [Sums]) -> f64 {
    let m = nat.len();
    assert!((1..=MAX_COMPONENTS).contains(&m));
    let mut acc = [[Lanes::splat(0.0); 3]; MAX_COMPONENTS];
    let mut ll = LogLik::new(m);
    let (us, vs) = (u.chunks_exact(N), v.chunks_exact(N));
    let (u_tail, v_tail) = (us.remainder(), vs.remainder());
    for (uc, vc) in us.zip(vs) {
        small_step::<N, false>(nat, full(uc), full(vc), N, &mut acc, &mut ll);
    }
    if !u_tail.is_empty() {
        small_step::<N, true>(nat, &pad(u_tail), &pad(v_tail), u_tail.len(), &mut acc, &mut ll);
    }
    for (out, a) in sums[..m].iter_mut().zip(&acc) {
        *out = [sum_lanes(&a[0]), sum_lanes(&a[1]), sum_lanes(&a[2])];
    }
    ll.total()
}

/// N observations of the weighted E-step (1 <= M <= MAX_COMPONENTS;
/// `cpu::e_step_weighted`): the sums and the log-likelihood times each
/// observation's weight, one ln per observation (a weighted sum of logs is
/// no log of a product); weight-0 lanes (and the padding) add nothing.
#[inline(always)]
fn weighted_step<const N: usize, const LL: bool>(nat: &[Natural], u: &Feature<N>, v: &Feature<N>, w: &Feature<N>, acc: &mut SmallSums<N>, ll: &mut Lanes<N>) {
    let mut r = Lanes::splat(0.0);
    let mut lp = [Lanes::splat(0.0); MAX_COMPONENTS];
    let lp = &mut lp[..nat.len()];
    let (top, s) = lane_exps(nat, u, v, lp);
    for i in 0..N {
        let zero = w[i] == 0.0;
        r[i] = if zero { 0.0 } else { w[i] * (1.0 / s[i]) };  // as the GPU's
        let term = w[i] * if LL { top[i] + ln_at_least_one(s[i]) } else { top[i] + s[i] };
        ll[i] += if zero { 0.0 } else { term };
    }
    add_sums(lp, &r, u, v, acc);
}

/// `weighted_step` for M = 2: one exp per observation (as `two_step`), and
/// ln(1 + e) with e in [0, 1] by `ln_1p_table` directly (as the GPU; 4%
/// faster here than `ln_1p_unit`'s division).
#[inline(always)]
fn weighted_two_step<const N: usize, const LL: bool>(c: [Natural; 2], u: &Feature<N>, v: &Feature<N>, w: &Feature<N>, acc: &mut TwoSums<N>, ll: &mut Lanes<N>) {
    let TwoTerms { d, top, e } = two_terms(c, u, v);
    for i in 0..N {
        let zero = w[i] == 0.0;
        let s = 1.0 + e[i];
        // As the GPU's e_obs_weighted, w*u and w*v added with fused
        // multiply-adds (two_step's reasons); the weight over s is a
        // division here (w * (1 / s) measured 15% slower) and the fast
        // reciprocal there, within an ulp.
        let w_top = if zero { 0.0 } else { w[i] / s };
        let w_low = e[i] * w_top;
        let (w0, w1) = if d[i] > 0.0 { (w_low, w_top) } else { (w_top, w_low) };
        let term = w[i] * if LL { top[i] + ln_1p_table(e[i]) } else { top[i] + e[i] };
        ll[i] += if zero { 0.0 } else { term };
        acc[0][i] += w0;
        acc[1][i] = w0.mul_add(u[i], acc[1][i]);
        acc[2][i] = w0.mul_add(v[i], acc[2][i]);
        acc[3][i] += w1;
        acc[4][i] = w1.mul_add(u[i], acc[4][i]);
        acc[5][i] = w1.mul_add(v[i], acc[5][i]);
    }
}

/// `weighted_two_step` for M = 2, else `weighted_step` (inlined into the
/// caller's target features: a closure here would not be).
#[inline(always)]
fn weighted_any<const N: usize, const LL: bool>(nat: &[Natural], u: &Feature<N>, v: &Feature<N>, w: &Feature<N>, acc: &mut SmallSums<N>, two: &mut TwoSums<N>, ll: &mut Lanes<N>) {
    if nat.len() == 2 {
        weighted_two_step::<N, LL>([nat[0], nat[1]], u, v, w, two, ll)
    } else {
        weighted_step::<N, LL>(nat, u, v, w, acc, ll)
    }
}

/// The weighted E-step for 1 <= M <= MAX_COMPONENTS. Call only with FMA
/// enabled (through `Simd`). Without `LL` it returns a stand-in that is
/// finite exactly when the log-likelihood is (`cpu::Wanted::Sums`).
#[inline(always)]
fn e_step_weighted<const N: usize, const LL: bool>(u: &[f64], v: &[f64], w: &[f64], nat: &[Natural], sums: &mut [Sums]) -> f64 {
    let m = nat.len();
    assert!((1..=MAX_COMPONENTS).contains(&m) && w.len() == u.len() && v.len() == u.len());
    let mut acc = [[Lanes::splat(0.0); 3]; MAX_COMPONENTS];
    // M = 2 sums in two_step's layout (six lanes of sums, fused adds).
    let mut two = [Lanes::splat(0.0); 6];
    let mut ll = Lanes::splat(0.0);
    let (us, vs, ws) = (u.chunks_exact(N), v.chunks_exact(N), w.chunks_exact(N));
    let (u_tail, v_tail, w_tail) = (us.remainder(), vs.remainder(), ws.remainder());
    for ((uc, vc), wc) in us.zip(vs).zip(ws) {
        weighted_any::<N, LL>(nat, full(uc), full(vc), full(wc), &mut acc, &mut two, &mut ll);
    }
    if !u_tail.is_empty() {
        // Padding lanes weigh 0.
        weighted_any::<N, LL>(nat, &pad(u_tail), &pad(v_tail), &pad(w_tail), &mut acc, &mut two, &mut ll);
    }
    if m == 2 {
        for (k, a) in two.iter().enumerate() {
            acc[k / 3][k % 3] = *a;
        }
    }
    for (out, a) in sums[..m].iter_mut().zip(&acc) {
        *out = [sum_lanes(&a[0]), sum_lanes(&a[1]), sum_lanes(&a[2])];
    }
    sum_lanes(&ll)
}

// ---------------------------------------------------------------------------
// Run-time dispatch
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Avx2,
    Avx512,
}

/// Proof that this CPU runs the SIMD kernels: the field is private, and
/// only `detect` (and `avx2` in tests) make one, after checking the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Simd(Level);

impl Simd {
    /// The widest SIMD kernels this CPU supports, if any.
    #[inline]
    pub(super) fn detect() -> Option<Simd> {
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        {
            // std caches the CPUID results: these are a few atomic loads.
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                let level = if is_x86_feature_detected!("avx512f") { Level::Avx512 } else { Level::Avx2 };
                return Some(Simd(level));
            }
        }
        None
    }

    /// The AVX2 build even where AVX-512 is available.
    #[cfg(test)]
    fn avx2() -> Option<Simd> {
        Simd::detect().map(|_| Simd(Level::Avx2))
    }

    /// The weighted E-step (`cpu::e_step_weighted`) of M = nat.len() <=
    /// MAX_COMPONENTS components.
    pub(super) fn e_step_weighted(self, prep: &Prepared, w: &[f64], nat: &[Natural], sums: &mut [Sums], wanted: Wanted) -> f64 {
        assert!((1..=MAX_COMPONENTS).contains(&nat.len()), "the SIMD E-step takes 1 to {MAX_COMPONENTS} components");
        assert!(sums.len() >= nat.len());
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        match (self.0, wanted) {
            // SAFETY: as in `e_step`.
            (Level::Avx512, Wanted::LogLik) => unsafe { x86::e_step_weighted_avx512::<true>(&prep.u, &prep.v, w, nat, sums) },
            (Level::Avx512, Wanted::Sums) => unsafe { x86::e_step_weighted_avx512::<false>(&prep.u, &prep.v, w, nat, sums) },
            // SAFETY: as in `e_step`.
            (Level::Avx2, Wanted::LogLik) => unsafe { x86::e_step_weighted_avx2::<true>(&prep.u, &prep.v, w, nat, sums) },
            (Level::Avx2, Wanted::Sums) => unsafe { x86::e_step_weighted_avx2::<false>(&prep.u, &prep.v, w, nat, sums) },
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
        {
            let _ = (prep, w, sums, wanted);
            unreachable!("Simd::detect never succeeds on this architecture")
        }
    }

    /// One E-step of M = nat.len() <= MAX_COMPONENTS components, as
    /// `cpu::e_step`: fills `sums[..M]` and returns the log-likelihood
    /// without the shared term.
    pub(super) fn e_step(self, prep: &Prepared, nat: &[Natural], sums: &mut [Sums]) -> f64 {
        assert!((1..=MAX_COMPONENTS).contains(&nat.len()), "the SIMD E-step takes 1 to {MAX_COMPONENTS} components");
        assert!(sums.len() >= nat.len());
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        match self.0 {
            // SAFETY: a Simd holding Level::Avx512 is made only after
            // `detect` found avx512f, avx2 and fma on this CPU.
            Level::Avx512 => unsafe { x86::e_step_avx512(&prep.u, &prep.v, nat, sums) },
            // SAFETY: any Simd is made only after `detect` found avx2 and fma.
            Level::Avx2 => unsafe { x86::e_step_avx2(&prep.u, &prep.v, nat, sums) },
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
        {
            let _ = (prep, sums);
            unreachable!("Simd::detect never succeeds on this architecture")
        }
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
mod x86 {
    use super::*;

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn e_step_avx2(u: &[f64], v: &[f64], nat: &[Natural], sums: &mut [Sums]) -> f64 {
        if nat.len() == 2 {
            e_step_two::<TWO_LANES>(u, v, nat, sums)
        } else {
            e_step_small::<SMALL_LANES>(u, v, nat, sums)
        }
    }

    /// The same kernels with 512-bit vectors (same results, fewer instructions).
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn e_step_avx512(u: &[f64], v: &[f64], nat: &[Natural], sums: &mut [Sums]) -> f64 {
        if nat.len() == 2 {
            e_step_two::<TWO_LANES>(u, v, nat, sums)
        } else {
            e_step_small::<SMALL_LANES>(u, v, nat, sums)
        }
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn e_step_weighted_avx2<const LL: bool>(u: &[f64], v: &[f64], w: &[f64], nat: &[Natural], sums: &mut [Sums]) -> f64 {
        if nat.len() == 2 {
            e_step_weighted::<TWO_LANES, LL>(u, v, w, nat, sums)
        } else {
            e_step_weighted::<SMALL_LANES, LL>(u, v, w, nat, sums)
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn e_step_weighted_avx512<const LL: bool>(u: &[f64], v: &[f64], w: &[f64], nat: &[Natural], sums: &mut [Sums]) -> f64 {
        if nat.len() == 2 {
            e_step_weighted::<TWO_LANES, LL>(u, v, w, nat, sums)
        } else {
            e_step_weighted::<SMALL_LANES, LL>(u, v, w, nat, sums)
        }
    }

    /// `exp_nonpos` on a slice, compiled as in the kernels.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[cfg(test)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_slice_avx2(x: &[f64], out: &mut [f64]) {
        for (o, &x) in out.iter_mut().zip(x) {
            *o = exp_nonpos(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::cpu;
    use super::super::family::Family;
    use super::*;

    /// The relative error bound stated on `exp_nonpos`.
    const EXP_REL_ERR: f64 = 2.5e-16;

    /// exp_nonpos on every element, compiled as in the kernels where the CPU
    /// allows; elsewhere the portable build, where mul_add is libm's fma
    /// (slower, same results).
    fn exp_all(x: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; x.len()];
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        if Simd::detect().is_some() {
            // SAFETY: detect found avx2 and fma on this CPU.
            unsafe { x86::exp_slice_avx2(x, &mut out) };
            return out;
        }
        for (o, &x) in out.iter_mut().zip(x) {
            *o = exp_nonpos(x);
        }
        out
    }

    /// Relative error against libm's exp (itself within 1 ulp).
    fn rel_err(x: f64, got: f64) -> f64 {
        let want = x.exp();
        ((got - want) / want).abs()
    }

    #[test]
    fn exp_matches_libm_on_dense_grid() {
        // Every 1e-4 over [-745, 0], and every 1e-7 over [-0.1, 0] where
        // most E-step arguments lie.
        let coarse = (0..=7_450_000).map(|i| -1e-4 * i as f64);
        let fine = (0..=1_000_000).map(|i| -1e-7 * i as f64);
        let x: Vec<f64> = coarse.chain(fine).collect();
        let y = exp_all(&x);
        let (mut worst, mut worst_x) = (0.0f64, 0.0f64);
        for (&x, &y) in x.iter().zip(&y) {
            if x >= EXP_MIN_ARG {
                let e = rel_err(x, y);
                if e > worst {
                    (worst, worst_x) = (e, x);
                }
            } else {
                // Flushed to zero where libm's answer is below the normal range.
                assert_eq!(y, 0.0, "x = {x}");
                assert!(x.exp() < f64::MIN_POSITIVE, "x = {x}");
            }
        }
        println!("exp_nonpos: largest relative error {worst:.3e} (x = {worst_x})");
        assert!(worst <= EXP_REL_ERR, "relative error {worst:e} at x = {worst_x}");
    }

    #[test]
    fn exp_special_values() {
        let tiny = f64::from_bits(1); // the smallest subnormal
        let x = [0.0, -0.0, -tiny, -f64::MIN_POSITIVE, -1e-300, f64::NEG_INFINITY, f64::NAN, -1e300, EXP_MIN_ARG, EXP_MIN_ARG - 1e-9, -745.2];
        let y = exp_all(&x);
        assert_eq!(y[..5], [1.0; 5]);
        assert_eq!(y[5], 0.0);
        assert!(y[6].is_nan());
        assert_eq!(y[7], 0.0);
        assert!(y[8] >= f64::MIN_POSITIVE && rel_err(x[8], y[8]) <= EXP_REL_ERR);
        assert_eq!(y[9..], [0.0; 2]);
        // NaN in one element leaves its neighbours alone (vector lanes).
        let x = [-1.0, f64::NAN, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0];
        let y = exp_all(&x);
        assert!(y[1].is_nan());
        for (&x, &y) in x.iter().zip(&y).filter(|(x, _)| !x.is_nan()) {
            assert!(rel_err(x, y) <= EXP_REL_ERR, "x = {x}");
        }
    }

    /// Small deterministic generator (xorshift64*), enough for test data.
    struct Rng(u64);

    impl Rng {
        fn unif(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Random data and parameters of each family for M = 1..=MAX_COMPONENTS,
    /// with n not a multiple of either lane count, plus widely separated components
    /// (weights that underflow).
    fn cases() -> Vec<(Family, Prepared, Vec<Natural>)> {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut out = Vec::new();
        for family in [Family::InvGauss, Family::Normal] {
            for m in 1..=MAX_COMPONENTS {
                for n in [1usize, 15, 16, 17, 1000, 2003, 20_011] {
                    let x: Vec<f64> = (0..n).map(|_| 0.05 + 10.0 * rng.unif() * rng.unif()).collect();
                    let prep = Prepared::new(family, &x);
                    let nat = (0..m)
                        .map(|_| family.natural(0.05 + rng.unif(), 0.3 + 6.0 * rng.unif(), 0.2 + 5.0 * rng.unif(), prep.centre))
                        .collect();
                    out.push((family, prep, nat));
                }
            }
            let x: Vec<f64> = (0..999).map(|i| 0.01 + 0.05 * i as f64).collect();
            let prep = Prepared::new(family, &x);
            for m in [2, 3] {
                let nat = (0..m).map(|j| family.natural(0.5, 0.2 + 20.0 * j as f64, 0.01 + 500.0 * j as f64, prep.centre)).collect();
                out.push((family, prep.clone(), nat));
            }
        }
        out
    }

    /// Sum over observations of |w_j * f| for each component j and f = 1,
    /// u, v: the size of the terms each weighted sum adds up.
    fn term_sizes(prep: &Prepared, nat: &[Natural]) -> Vec<[f64; 3]> {
        let mut out = vec![[0.0; 3]; nat.len()];
        for (u, v) in prep.features() {
            let l: Vec<f64> = nat.iter().map(|c| c.a + c.b * u + c.c * v).collect();
            let top = l.iter().fold(f64::NEG_INFINITY, |t, &x| t.max(x));
            let s: f64 = l.iter().map(|x| (x - top).exp()).sum();
            for (o, x) in out.iter_mut().zip(&l) {
                let w = (x - top).exp() / s;
                *o = [o[0] + w, o[1] + (w * u).abs(), o[2] + (w * v).abs()];
            }
        }
        out
    }

    #[test]
    fn simd_e_step_matches_scalar() {
        let Some(simd) = Simd::detect() else {
            println!("no SIMD kernels on this CPU: nothing to compare");
            return;
        };
        let (mut worst_sum, mut worst_ll) = (0.0f64, 0.0f64);
        for (family, prep, nat) in cases() {
            let m = nat.len();
            let mut want = vec![[0.0; 3]; m];
            let mut got = vec![[f64::NAN; 3]; m];
            let want_ll = cpu::e_step_scalar(&prep, &nat, &mut want);
            let got_ll = simd.e_step(&prep, &nat, &mut got);
            // Relative to the sum of the magnitudes of the terms: sums of w
            // have no cancellation, but for Normal data u changes sign and a
            // sum of w*u can cancel to far below its terms.
            let size = term_sizes(&prep, &nat);
            for j in 0..m {
                for k in 0..3 {
                    let rel = (got[j][k] - want[j][k]).abs() / size[j][k].max(1e-300);
                    assert!(rel <= 1e-13, "{family:?} M={m} n={} sums[{j}][{k}]: {} vs {} ({rel:e})", prep.n, got[j][k], want[j][k]);
                    worst_sum = worst_sum.max(rel);
                }
            }
            let rel = (got_ll - want_ll).abs() / want_ll.abs();
            assert!(rel <= 1e-13, "{family:?} M={m} n={} loglik: {got_ll} vs {want_ll} ({rel:e})", prep.n);
            worst_ll = worst_ll.max(rel);
        }
        println!("largest relative difference from the scalar E-step: sums {worst_sum:.2e}, loglik {worst_ll:.2e}");
    }

    #[test]
    fn ln_at_least_one_matches_libm() {
        let mut worst = 0.0f64;
        for i in 0..=2_000_000 {
            let s = 1.0 + 7.0 * i as f64 / 2e6;
            // ln s >= 0: the error relative to max(ln s, 1), so absolute
            // below s = e.
            let err = (ln_at_least_one(s) - s.ln()).abs() / s.ln().max(1.0);
            worst = worst.max(err);
        }
        assert!(worst < 4e-16, "largest error {worst:e}");
        assert_eq!(ln_at_least_one(1.0), 0.0);
        assert!(ln_at_least_one(f64::NAN).is_nan());
    }

    #[test]
    fn ln_1p_unit_matches_libm_relatively() {
        let mut worst = 0.0f64;
        let grid = (0..=1_000_000).map(|i| i as f64 / 1e6);
        let tiny = (1..=300).map(|k| 10f64.powf(-(k as f64)));
        for t in grid.chain(tiny) {
            let want = t.ln_1p();
            let err = if want == 0.0 { ln_1p_unit(t).abs() } else { (ln_1p_unit(t) - want).abs() / want };
            worst = worst.max(err);
        }
        println!("ln_1p_unit: largest relative error {worst:e}");
        // About 2 ulp, the same with the 11-term Taylor series this replaced.
        assert!(worst < 6e-16, "largest relative error {worst:e}");
    }

    #[test]
    fn ln_1p_table_matches_libm() {
        let (mut worst_abs, mut worst_rel) = (0.0f64, 0.0f64);
        let grid = (0..=1_000_000).map(|i| i as f64 / 1e6);
        let tiny = (1..=300).map(|k| 10f64.powf(-(k as f64)));
        for t in grid.chain(tiny) {
            let (want, got) = (t.ln_1p(), ln_1p_table(t));
            worst_abs = worst_abs.max((got - want).abs());
            if t < 1.0 / 128.0 && want != 0.0 {
                worst_rel = worst_rel.max((got - want).abs() / want);
            }
        }
        println!("ln_1p_table: largest absolute error {worst_abs:e}, relative below 1/128 {worst_rel:e}");
        // The table's 1.1e-16 plus libm's own rounding of the reference.
        assert!(worst_abs < 2.3e-16 && worst_rel < 4.5e-16, "{worst_abs:e} {worst_rel:e}");
        assert_eq!(ln_1p_table(0.0), 0.0);
        assert!(ln_1p_table(f64::NAN).is_nan());
    }

    #[test]
    fn log1p_table_is_the_kernels_and_correctly_rounded() {
        let src = include_str!("../../kernels/tables.cuh");
        let at = src.find("LOG1P_TABLE_BITS[65][2] = {").expect("the kernels' table");
        let body = &src[at..at + src[at..].find("};").expect("its end")];
        let kernels: Vec<u64> = body.split("0x").skip(1).map(|h| u64::from_str_radix(&h[..16], 16).expect("hex")).collect();
        let ours: Vec<u64> = LOG1P_TABLE_BITS.iter().flatten().copied().collect();
        assert_eq!(kernels, ours);
        for (j, &[inv, ln]) in LOG1P_TABLE[..65].iter().enumerate() {
            let x = j as f64 / 64.0;
            assert!((inv * (1.0 + x) - 1.0).abs() <= f64::EPSILON, "1 / (1 + {j}/64)");
            assert!((ln - x.ln_1p()).abs() <= f64::EPSILON * ln, "ln(1 + {j}/64)");
        }
        assert!(LOG1P_TABLE[65..].iter().all(|e| e[0].is_nan() && e[1].is_nan()));
    }

    #[test]
    fn simd_weighted_e_step_matches_scalar() {
        let Some(simd) = Simd::detect() else { return };
        let mut rng = Rng(7);
        for (family, mut prep, nat) in cases() {
            let m = nat.len();
            // Weights in [0, 3), a tenth of them 0.
            let w: Vec<f64> = (0..prep.n).map(|_| if rng.unif() < 0.1 { 0.0 } else { 3.0 * rng.unif() }).collect();
            prep.weights = Some(w.clone());
            let mut want = vec![[0.0; 3]; m];
            let mut got = vec![[f64::NAN; 3]; m];
            let want_ll = cpu::e_step_weighted(&prep, &w, &nat, &mut want, Wanted::LogLik);
            let got_ll = simd.e_step_weighted(&prep, &w, &nat, &mut got, Wanted::LogLik);
            // Without the log-likelihood: the same sums, bit for bit.
            for scalar in [true, false] {
                let mut sums = vec![[f64::NAN; 3]; m];
                let value = if scalar { cpu::e_step_weighted(&prep, &w, &nat, &mut sums, Wanted::Sums) } else { simd.e_step_weighted(&prep, &w, &nat, &mut sums, Wanted::Sums) };
                let same = if scalar { &want } else { &got };
                assert!(value.is_finite(), "{family:?} M={m}: stand-in {value}");
                assert_eq!(sums[..m].iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>(), same[..m].iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>(), "{family:?} M={m} scalar={scalar}");
            }
            let size = term_sizes(&prep, &nat);
            for j in 0..m {
                for k in 0..3 {
                    // Weights below 3: three times the unweighted terms bound them.
                    let rel = (got[j][k] - want[j][k]).abs() / (3.0 * size[j][k]).max(1e-300);
                    assert!(rel <= 1e-13, "{family:?} M={m} n={} sums[{j}][{k}]: {} vs {} ({rel:e})", prep.n, got[j][k], want[j][k]);
                }
            }
            let rel = (got_ll - want_ll).abs() / want_ll.abs().max(1e-300);
            assert!(rel <= 1e-13 || (got_ll - want_ll).abs() < 1e-12, "{family:?} M={m} n={} loglik: {got_ll} vs {want_ll} ({rel:e})", prep.n);
        }
    }

    #[test]
    fn avx2_and_avx512_builds_agree_bitwise() {
        let (Some(best), Some(avx2)) = (Simd::detect(), Simd::avx2()) else { return };
        for (_, prep, nat) in cases() {
            let m = nat.len();
            let (mut a, mut b) = (vec![[0.0; 3]; m], vec![[0.0; 3]; m]);
            let (la, lb) = (best.e_step(&prep, &nat, &mut a), avx2.e_step(&prep, &nat, &mut b));
            assert_eq!(la.to_bits(), lb.to_bits());
            for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
                assert_eq!(x.to_bits(), y.to_bits());
            }
        }
    }

    #[test]
    fn invalid_parameters_give_nan_loglik() {
        let Some(simd) = Simd::detect() else { return };
        let x: Vec<f64> = (1..=37).map(|i| i as f64 * 0.3).collect();
        let prep = Prepared::new(Family::InvGauss, &x);
        for m in [2, 3] {
            for bad in [f64::NAN, f64::INFINITY] {
                let mut nat = vec![Natural { a: -1.0, b: -0.5, c: -0.5 }; m];
                nat[1].a = bad;
                let mut sums = vec![[0.0; 3]; m];
                let (got, want) = (simd.e_step(&prep, &nat, &mut sums), cpu::e_step_scalar(&prep, &nat, &mut sums));
                assert!(!got.is_finite() && !want.is_finite(), "M={m} a={bad}: {got} vs {want}");
                // The weighted E-steps' stand-in for the log-likelihood
                // (`Wanted::Sums`) is not finite either.
                let w = vec![1.5; x.len()];
                for wanted in [Wanted::LogLik, Wanted::Sums] {
                    let (got, want) = (simd.e_step_weighted(&prep, &w, &nat, &mut sums, wanted), cpu::e_step_weighted(&prep, &w, &nat, &mut sums, wanted));
                    assert!(!got.is_finite() && !want.is_finite(), "weighted {wanted:?} M={m} a={bad}: {got} vs {want}");
                }
            }
        }
    }
}
