//! Reductions on the CPU backend against exact big-integer references.
//!
//! Every binary64 value is an integer multiple of 2^-1074, so a sum is the
//! exact integer sum of the scaled inputs and a mean that integer over n;
//! the references round those rationals to nearest-even with num-bigint,
//! independently of the core's own rounding code.

use num_bigint::{BigInt, BigUint, Sign};
use num_traits::{Signed, ToPrimitive, Zero};

use bulkem_core::error::Error;
use bulkem_core::exec::{Backend, Exec};
use bulkem_core::reduce::{self, Method, Precision};

// ---------------------------------------------------------------------------
// Exact references
// ---------------------------------------------------------------------------

/// v * 2^1074, exactly.
/// R's NA_real_: a NaN whose low word is 1954.
const R_NA: f64 = f64::from_bits(0x7ff0_0000_0000_07a2);

fn scaled(v: f64) -> BigInt {
    assert!(v.is_finite());
    let bits = v.to_bits();
    let e = (bits >> 52) & 0x7ff;
    let f = bits & ((1 << 52) - 1);
    let m = if e == 0 { f } else { f | 1 << 52 };
    let mag = BigInt::from(m) << (e.max(1) - 1);
    if v < 0.0 {
        -mag
    } else {
        mag
    }
}

/// The inputs as the working precision sees them.
fn rounded(x: &[f64], precision: Precision) -> Vec<f64> {
    match precision {
        Precision::Double => x.to_vec(),
        Precision::Single => x.iter().map(|&v| v as f32 as f64).collect(),
    }
}

/// Exact sum of the (rounded) inputs, times 2^1074.
fn exact_scaled_sum(x: &[f64], precision: Precision) -> BigInt {
    rounded(x, precision).iter().map(|&v| scaled(v)).sum()
}

/// (precision bits, exponent of the smallest subnormal's ulp, largest exponent).
fn format(precision: Precision) -> (i64, i64, i64) {
    match precision {
        Precision::Double => (53, -1074, 1023),
        Precision::Single => (24, -149, 127),
    }
}

/// num / (den * 2^1074) rounded to nearest, ties to even, in `precision`.
fn round_rational(num: &BigInt, den: u64, precision: Precision) -> f64 {
    let (p, min_ulp, max_exp) = format(precision);
    if num.is_zero() {
        return 0.0;
    }
    let a: BigUint = num.magnitude().clone();
    let b: BigUint = BigUint::from(den) << 1074u32;
    // a >= b * 2^k, with shifts of whichever side keeps integers.
    let at_least = |k: i64| if k >= 0 { a >= (&b << k as u64) } else { (&a << (-k) as u64) >= b };
    let mut e = a.bits() as i64 - b.bits() as i64;
    while !at_least(e) {
        e -= 1;
    }
    while at_least(e + 1) {
        e += 1;
    }
    // Now 2^e <= a/b < 2^(e+1); keep p bits, or stop at the subnormal spacing.
    let k = (e - (p - 1)).max(min_ulp);
    let (num_k, den_k) = if k >= 0 { (a.clone(), &b << k as u64) } else { (&a << (-k) as u64, b.clone()) };
    let mut q = &num_k / &den_k;
    let r2: BigUint = (&num_k % &den_k) << 1u32;
    let odd = q.bit(0);
    if r2 > den_k || (r2 == den_k && odd) {
        q += 1u32;
    }
    let q = q.to_u64().expect("at most p + 1 bits");
    let magnitude = if 64 - q.leading_zeros() as i64 - 1 + k > max_exp {
        f64::INFINITY
    } else {
        // q * 2^k in two exact steps (2^k alone may not be representable).
        let (k1, k2) = if k < -1000 { (k + 600, -600) } else { (k, 0) };
        q as f64 * 2f64.powi(k1 as i32) * 2f64.powi(k2)
    };
    if num.sign() == Sign::Minus {
        -magnitude
    } else {
        magnitude
    }
}

/// What IEEE arithmetic gives for the exact sum of values of which some are
/// not finite (None when all are finite).
fn non_finite_sum(x: &[f64]) -> Option<f64> {
    let (nan, pos, neg) = x.iter().fold((false, false, false), |(a, b, c), &v| {
        (a || v.is_nan(), b || v == f64::INFINITY, c || v == f64::NEG_INFINITY)
    });
    match (nan || (pos && neg), pos, neg) {
        (true, _, _) => Some(f64::NAN),
        (false, true, _) => Some(f64::INFINITY),
        (false, _, true) => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

fn reference_sum(x: &[f64], precision: Precision) -> f64 {
    non_finite_sum(&rounded(x, precision)).unwrap_or_else(|| round_rational(&exact_scaled_sum(x, precision), 1, precision))
}

fn reference_mean(x: &[f64], precision: Precision) -> f64 {
    non_finite_sum(&rounded(x, precision))
        .unwrap_or_else(|| round_rational(&exact_scaled_sum(x, precision), x.len() as u64, precision))
}

/// |computed - exact| where the exact value is num / (den * 2^1074), as f64.
fn abs_error(computed: f64, num: &BigInt, den: u64) -> f64 {
    if !computed.is_finite() {
        return f64::INFINITY;
    }
    let diff = scaled(computed) * BigInt::from(den) - num;
    round_rational(&diff, den, Precision::Double).abs()
}

/// The error each method is allowed on x, from the textbook bounds (plus 1% slack).
fn allowed_error(method: Method, precision: Precision, x: &[f64], mean: bool) -> f64 {
    let x = rounded(x, precision);
    let n = x.len() as f64;
    let u = precision.unit_roundoff();
    let abs_sum: f64 = x.iter().map(|v| v.abs()).sum();
    let exact = round_rational(&exact_scaled_sum(&x, Precision::Double), 1, Precision::Double).abs();
    let depth = (x.len() as f64).log2().ceil();
    let sum_bound = match method {
        Method::Naive => (n - 1.0) * u * abs_sum,
        Method::Pairwise | Method::Div2 => depth * u * abs_sum,
        Method::Kahan => 2.0 * u * exact + 4.0 * n * u * u * abs_sum,
        Method::Exact => u * exact,
    };
    let bound = if mean {
        // The division (or div2's correction and product) adds up to 3 roundings of the mean.
        sum_bound / n + 3.0 * u * exact / n
    } else {
        sum_bound
    };
    bound * 1.01 + f64::from_bits(1)
}

// ---------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------

/// A small xorshift stream (cheap, so that large inputs are quick to make).
struct Stream(u64);

impl Stream {
    fn new(seed: u64) -> Self {
        Stream(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform on [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// +-u * 10^k with k uniform in lo..hi: mixed signs and magnitudes.
    fn mixed(&mut self, lo: i32, hi: i32) -> f64 {
        let sign = if self.next() & 1 == 0 { 1.0 } else { -1.0 };
        let k = lo + self.below((hi - lo) as usize) as i32;
        sign * (0.5 + self.unit()) * 10f64.powi(k)
    }
    fn shuffle(&mut self, x: &mut [f64]) {
        for i in (1..x.len()).rev() {
            x.swap(i, self.below(i + 1));
        }
    }
}

fn uniform(n: usize, seed: u64) -> Vec<f64> {
    let mut s = Stream::new(seed);
    (0..n).map(|_| s.unit()).collect()
}

/// Random inputs of several kinds, each designed to make some rounding hard.
fn random_cases(seed: u64, n: usize) -> Vec<(String, Vec<f64>)> {
    let mut s = Stream::new(seed);
    let mut cases = Vec::new();
    cases.push(("1e-300..1e300".into(), (0..n).map(|_| s.mixed(-300, 300)).collect()));
    cases.push(("binary32 range".into(), (0..n).map(|_| s.mixed(-44, 38)).collect()));
    cases.push(("1e-20..1e20".into(), (0..n).map(|_| s.mixed(-20, 20)).collect()));
    // Cancellation to exactly zero.
    let half: Vec<f64> = (0..n.div_ceil(2)).map(|_| s.mixed(-30, 30)).collect();
    let mut zero: Vec<f64> = half.iter().flat_map(|&v| [v, -v]).collect();
    s.shuffle(&mut zero);
    cases.push(("cancels to 0".into(), zero.clone()));
    // Cancellation to a tiny (here subnormal) value, and to a tiny normal one.
    for tiny in [f64::from_bits(12345), 3.5e-300] {
        let mut x = zero.clone();
        x.push(tiny);
        s.shuffle(&mut x);
        cases.push((format!("cancels to {tiny:e}"), x));
    }
    // Large values cancelling around small ones: the result is far below the inputs.
    let mut x: Vec<f64> = half.iter().flat_map(|&v| [v * 1e200, -v * 1e200, v * 1e-5]).collect();
    s.shuffle(&mut x);
    cases.push(("big cancels around small".into(), x));
    // Near-ties: 1 plus multiples of half an ulp.
    let mut x = vec![1.0];
    x.extend((0..n).map(|i| if i % 2 == 0 { 2f64.powi(-53) } else { -(2f64.powi(-54)) }));
    cases.push(("near ties".into(), x));
    // Subnormals only.
    cases.push(("subnormals".into(), (0..n).map(|_| f64::from_bits(s.next() >> 13) * if s.next() & 1 == 0 { 1.0 } else { -1.0 }).collect()));
    cases
}

fn bits_eq(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

// ---------------------------------------------------------------------------
// Exact
// ---------------------------------------------------------------------------

#[test]
fn exact_is_correctly_rounded_on_random_inputs() {
    let exec = Exec::cpu();
    for (seed, n) in [(1, 1), (2, 2), (3, 3), (4, 10), (5, 101), (6, 2000), (7, 70_000)] {
        for (name, x) in random_cases(seed, n) {
            for precision in Precision::ALL {
                let sum = reduce::sum(&x, Method::Exact, precision, &exec).unwrap();
                let want = reference_sum(&x, precision);
                assert!(bits_eq(sum, want), "{name}, n = {}, {precision:?}: sum {sum:e}, reference {want:e}", x.len());
                let mean = reduce::mean(&x, Method::Exact, precision, &exec).unwrap();
                let want = reference_mean(&x, precision);
                assert!(bits_eq(mean, want), "{name}, n = {}, {precision:?}: mean {mean:e}, reference {want:e}", x.len());
            }
        }
    }
}

#[test]
fn exact_zero_is_positive_and_extremes_round_correctly() {
    let exec = Exec::cpu();
    let sum = |x: &[f64], p| reduce::sum(x, Method::Exact, p, &exec).unwrap();
    assert_eq!(sum(&[1.5, -1.5], Precision::Double).to_bits(), 0);
    assert_eq!(sum(&[-0.0], Precision::Double).to_bits(), 0);
    assert_eq!(sum(&[f64::MAX, f64::MAX, -f64::MAX], Precision::Double), f64::MAX);
    assert_eq!(sum(&[f64::MAX, f64::MAX], Precision::Double), f64::INFINITY);
    assert_eq!(reduce::mean(&[f64::MAX; 3], Method::Exact, Precision::Double, &exec).unwrap(), f64::MAX);
    // Single: 3e38 + 3e38 overflows binary32; its mean does not.
    assert_eq!(sum(&[3e38, 3e38], Precision::Single), f64::INFINITY);
    assert_eq!(reduce::mean(&[3e38, 3e38], Method::Exact, Precision::Single, &exec).unwrap(), 3e38f32 as f64);
    // Single rounds the exact value once: 1 + 2^-24 + 2^-40 is above the tie.
    let x = [1.0, 2f64.powi(-24), 2f64.powi(-40)];
    assert_eq!(sum(&x, Precision::Single), 1.0 + f32::EPSILON as f64);
}

// ---------------------------------------------------------------------------
// Every method against the exact reference
// ---------------------------------------------------------------------------

/// Check sum and mean of every method in both precisions against the
/// reference: bitwise for Exact, within the method's error bound otherwise.
fn check_all_methods(name: &str, x: &[f64]) {
    let exec = Exec::cpu();
    for precision in Precision::ALL {
        let num = exact_scaled_sum(x, precision);
        for method in Method::ALL {
            let sum = reduce::sum(x, method, precision, &exec).unwrap();
            let mean = reduce::mean(x, method, precision, &exec).unwrap();
            if method == Method::Exact {
                assert!(bits_eq(sum, reference_sum(x, precision)), "{name} {precision:?}: exact sum {sum:e}");
                assert!(bits_eq(mean, reference_mean(x, precision)), "{name} {precision:?}: exact mean {mean:e}");
            }
            let (es, em) = (abs_error(sum, &num, 1), abs_error(mean, &num, x.len() as u64));
            let (bs, bm) = (allowed_error(method, precision, x, false), allowed_error(method, precision, x, true));
            assert!(es <= bs, "{name} {precision:?} {method:?}: sum {sum:e} off by {es:e} > {bs:e}");
            assert!(em <= bm, "{name} {precision:?} {method:?}: mean {mean:e} off by {em:e} > {bm:e}");
        }
    }
}

#[test]
fn the_papers_example() {
    // Pechprasarn & Khiripet's four values.
    let x = [0.005, 0.005, 1e-8, 1e-8];
    check_all_methods("paper", &x);
    // div2 in single precision, spelled out: ((a/2 + b/2)/2 + (c/2 + d/2)/2), C = 1.
    let f: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let h = |a: f32, b: f32| a * 0.5 + b * 0.5;
    let want = h(h(f[0], f[1]), h(f[2], f[3]));
    let got = reduce::mean(&x, Method::Div2, Precision::Single, &Exec::cpu()).unwrap();
    assert_eq!(got, want as f64);
}

#[test]
fn one_large_value_and_many_tiny_ones() {
    // Each tiny value is a quarter of an ulp of 1: naive summation absorbs
    // every one of them, the exact sum keeps them all.
    let tiny = 2f64.powi(-54);
    let k = 1 << 16;
    let mut x = vec![1.0];
    x.extend(std::iter::repeat_n(tiny, k));
    check_all_methods("1 + tiny", &x);
    let exec = Exec::cpu();
    let sum = |m| reduce::sum(&x, m, Precision::Double, &exec).unwrap();
    assert_eq!(sum(Method::Naive), 1.0);
    assert_eq!(sum(Method::Exact), 1.0 + k as f64 * tiny);
    assert_eq!(sum(Method::Kahan), 1.0 + k as f64 * tiny);
    // The tree loses at most the first few levels' worth.
    assert!((sum(Method::Pairwise) - (1.0 + k as f64 * tiny)).abs() <= 4.0 * tiny);
    assert_eq!(sum(Method::Pairwise), sum(Method::Div2));
    // Tiny values first: the naive sum is exact while it is small.
    x.rotate_left(1);
    assert_eq!(reduce::sum(&x, Method::Naive, Precision::Double, &exec).unwrap(), 1.0 + k as f64 * tiny);
}

#[test]
fn small_and_power_of_two_sizes() {
    let mut s = Stream::new(99);
    for n in [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 1023, 1024, 1025, 4096, 4099] {
        // Values of every size with both signs, and one large term.
        let mut x: Vec<f64> = (0..n).map(|_| s.mixed(-8, 8)).collect();
        x[n / 2] = 1e12;
        check_all_methods(&format!("n = {n}"), &x);
        let ones = vec![1.0 / 3.0; n];
        check_all_methods(&format!("n = {n} of 1/3"), &ones);
    }
}

#[test]
fn one_value_is_returned_unchanged() {
    let exec = Exec::cpu();
    for v in [0.1, -3.75e-200, 1e300, f64::from_bits(7)] {
        for method in Method::ALL {
            assert_eq!(reduce::sum(&[v], method, Precision::Double, &exec).unwrap(), v, "{method:?}");
            assert_eq!(reduce::mean(&[v], method, Precision::Double, &exec).unwrap(), v, "{method:?}");
            assert_eq!(reduce::mean(&[v], method, Precision::Single, &exec).unwrap(), v as f32 as f64, "{method:?}");
        }
    }
}

#[test]
fn div2_follows_its_definition_for_three_values() {
    // P = 4: ((a/2 + b/2)/2 + (c/2 + 0/2)/2) * fl(4/3).
    let x = [0.7, 0.1, 1e-9];
    let h = |a: f64, b: f64| a * 0.5 + b * 0.5;
    let avg = h(h(x[0], x[1]), h(x[2], 0.0));
    let exec = Exec::cpu();
    assert_eq!(reduce::mean(&x, Method::Div2, Precision::Double, &exec).unwrap(), avg * (4.0 / 3.0));
    assert_eq!(reduce::sum(&x, Method::Div2, Precision::Double, &exec).unwrap(), avg * 4.0);
    let f: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let hf = |a: f32, b: f32| a * 0.5 + b * 0.5;
    let avg = hf(hf(f[0], f[1]), hf(f[2], 0.0));
    assert_eq!(reduce::mean(&x, Method::Div2, Precision::Single, &exec).unwrap(), (avg * (4.0f32 / 3.0)) as f64);
}

// ---------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------

#[test]
fn thread_count_does_not_change_the_bits() {
    // Long enough for every method's parallel path.
    let mut s = Stream::new(5);
    let x: Vec<f64> = (0..300_001).map(|_| s.mixed(-5, 5)).collect();
    for precision in Precision::ALL {
        for method in Method::ALL {
            let run = |threads: usize| {
                let exec = Exec::cpu().threads(threads);
                (reduce::sum(&x, method, precision, &exec).unwrap(), reduce::mean(&x, method, precision, &exec).unwrap())
            };
            let one = run(1);
            for threads in [2, 3] {
                let other = run(threads);
                assert!(bits_eq(one.0, other.0) && bits_eq(one.1, other.1), "{method:?} {precision:?}: {one:?} vs {other:?} on {threads} threads");
            }
        }
    }
}

#[test]
fn batched_results_equal_single_calls() {
    let mut s = Stream::new(8);
    let data: Vec<Vec<f64>> = [0usize, 1, 2, 3, 100, 1025, 70_000, 5]
        .iter()
        .map(|&n| (0..n).map(|_| s.mixed(-10, 10)).collect())
        .collect();
    let refs: Vec<&[f64]> = data.iter().map(|v| &v[..]).collect();
    let exec = Exec::cpu().threads(3);
    for precision in Precision::ALL {
        for method in Method::ALL {
            let sums = reduce::sums(&refs, method, precision, &exec).unwrap();
            for (x, got) in refs.iter().zip(&sums) {
                assert!(bits_eq(*got, reduce::sum(x, method, precision, &Exec::cpu()).unwrap()), "{method:?} {precision:?}");
            }
            let means = reduce::means(&refs[1..], method, precision, &exec).unwrap();
            for (x, got) in refs[1..].iter().zip(&means) {
                assert!(bits_eq(*got, reduce::mean(x, method, precision, &Exec::cpu()).unwrap()), "{method:?} {precision:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Single precision: absorption, as in the paper's table
// ---------------------------------------------------------------------------

#[test]
fn single_precision_naive_drifts_where_the_others_do_not() {
    let x = uniform(10_000_000, 3);
    let exec = Exec::cpu();
    let reference = reduce::mean(&x, Method::Exact, Precision::Double, &exec).unwrap();
    let rel = |m| {
        let got = reduce::mean(&x, m, Precision::Single, &exec).unwrap();
        ((got - reference) / reference).abs()
    };
    // Measured: naive 1.4e-5, pairwise and div2 1.2e-7, kahan and exact 4.5e-9.
    let naive = rel(Method::Naive);
    assert!(naive > 1e-5, "naive single drifted by only {naive:e}");
    for method in [Method::Div2, Method::Kahan, Method::Exact, Method::Pairwise] {
        let err = rel(method);
        assert!(err < 1e-6 && err < naive / 50.0, "{method:?} single is off by {err:e} (naive {naive:e})");
    }
}

/// The paper's table at its full sizes (up to 134,215,680 values; slow in a
/// debug build, so run in release:
/// `cargo test --release -p bulkem-core --test reduce_cpu -- --ignored papers_table`).
#[test]
#[ignore]
fn papers_table_in_single_precision() {
    let exec = Exec::cpu();
    for normal in [false, true] {
        for n in [1_048_576, 16_777_216, 67_108_864, 134_215_680] {
            let mut s = Stream::new(n as u64 + normal as u64);
            // normal(6, 1) by Box-Muller, uniform(0, 1) otherwise.
            let x: Vec<f64> = (0..n)
                .map(|_| if normal { 6.0 + (-2.0 * (1.0 - s.unit()).ln()).sqrt() * (std::f64::consts::TAU * s.unit()).cos() } else { s.unit() })
                .collect();
            let reference = reduce::mean(&x, Method::Exact, Precision::Double, &exec).unwrap();
            let rel = |m| ((reduce::mean(&x, m, Precision::Single, &exec).unwrap() - reference) / reference).abs();
            for method in [Method::Div2, Method::Kahan, Method::Exact, Method::Pairwise] {
                assert!(rel(method) < 1e-6, "{method:?} normal = {normal} n = {n}: {:e}", rel(method));
            }
            // A float running sum loses more of every term as it grows, and
            // past 2^24 it cannot even count by ones.
            let drift = if n >= 67_108_864 { 0.1 } else if n >= 16_777_216 { 1e-5 } else { 1e-7 };
            assert!(rel(Method::Naive) > drift, "naive normal = {normal} n = {n}: {:e}", rel(Method::Naive));
        }
    }
}

// ---------------------------------------------------------------------------
// Non-finite and empty inputs
// ---------------------------------------------------------------------------

#[test]
fn non_finite_values_propagate() {
    let exec = Exec::cpu();
    let inf = f64::INFINITY;
    for precision in Precision::ALL {
        for method in Method::ALL {
            let both = |x: &[f64]| {
                (reduce::sum(x, method, precision, &exec).unwrap(), reduce::mean(x, method, precision, &exec).unwrap())
            };
            let tag = format!("{method:?} {precision:?}");
            assert_eq!(both(&[1.0, inf, 2.0]), (inf, inf), "{tag}");
            assert_eq!(both(&[-inf, 1.0]), (-inf, -inf), "{tag}");
            let (s, m) = both(&[inf, 1.0, -inf]);
            assert!(s.is_nan() && m.is_nan(), "{tag}");
            let (s, m) = both(&[1.0, f64::NAN, 2.0]);
            assert!(s.is_nan() && m.is_nan(), "{tag}");
            // R finds a missing value only in the elements whose result is
            // NaN (R/reduce.R): R's NA and NaN, in the parallel paths too.
            for missing in [f64::NAN, R_NA] {
                let mut long = vec![0.25; 1_000_003];
                long[654_321] = missing;
                let (s, m) = both(&long);
                assert!(s.is_nan() && m.is_nan(), "{tag}, 10^6 values with {missing:?}");
            }
        }
        // Beyond binary32's range the rounded input is already infinite.
        assert_eq!(reduce::sum(&[1e39, 1.0], Method::Exact, Precision::Single, &exec).unwrap(), inf);
    }
    // Overflowing finite sums: plain methods overflow, the exact and div2 means do not.
    let big = [f64::MAX, f64::MAX];
    for method in [Method::Naive, Method::Kahan, Method::Pairwise] {
        assert_eq!(reduce::mean(&big, method, Precision::Double, &exec).unwrap(), inf, "{method:?}");
    }
    for method in [Method::Div2, Method::Exact] {
        assert_eq!(reduce::mean(&big, method, Precision::Double, &exec).unwrap(), f64::MAX, "{method:?}");
        assert_eq!(reduce::sum(&big, method, Precision::Double, &exec).unwrap(), inf, "{method:?}");
    }
}

#[test]
fn empty_inputs() {
    let exec = Exec::cpu();
    for method in Method::ALL {
        for precision in Precision::ALL {
            assert_eq!(reduce::sum(&[], method, precision, &exec).unwrap().to_bits(), 0);
            match reduce::mean(&[], method, precision, &exec) {
                Err(Error::InvalidArgument { arg: "x", problem }) => assert!(problem.contains("empty"), "{problem}"),
                other => panic!("expected an error, got {other:?}"),
            }
        }
    }
    let data: Vec<&[f64]> = vec![&[1.0], &[], &[2.0]];
    assert_eq!(reduce::sums(&data, Method::Exact, Precision::Double, &exec).unwrap(), vec![1.0, 0.0, 2.0]);
    match reduce::means(&data, Method::Exact, Precision::Double, &exec) {
        Err(Error::InvalidArgument { arg: "x", problem }) => assert!(problem.contains("element 2 is empty"), "{problem}"),
        other => panic!("expected an error, got {other:?}"),
    }
    assert!(reduce::log_mean_exp(&[], &exec).is_err());
}

#[test]
fn cuda_backend_without_a_device_says_why() {
    if bulkem_core::gpu::probe().usable() {
        return; // tests/reduce_gpu.rs covers the device
    }
    let exec = Exec { backend: Backend::Cuda, ..Exec::cpu() };
    assert!(matches!(reduce::sum(&[1.0], Method::Exact, Precision::Double, &exec), Err(Error::BackendUnavailable(_))));
}

// ---------------------------------------------------------------------------
// log_mean_exp
// ---------------------------------------------------------------------------

#[test]
fn log_mean_exp_is_stable() {
    let exec = Exec::cpu();
    let lme = |x: &[f64]| reduce::log_mean_exp(x, &exec).unwrap();
    assert_eq!(lme(&[-1e5, -1e5, -1e5]), -1e5);
    let got = lme(&[-1e5, -1e5 + 3f64.ln()]);
    assert!((got - (-1e5 + 2f64.ln())).abs() <= 1e5 * f64::EPSILON, "{got}");
    assert!((lme(&[0.0, 3f64.ln()]) - 2f64.ln()).abs() < 1e-15);
    assert_eq!(lme(&[f64::NEG_INFINITY, f64::NEG_INFINITY]), f64::NEG_INFINITY);
    assert!((lme(&[f64::NEG_INFINITY, 0.0]) - 0.5f64.ln()).abs() < 1e-15);
    assert_eq!(lme(&[1.0, f64::INFINITY]), f64::INFINITY);
    assert!(lme(&[1.0, f64::NAN]).is_nan());
    assert_eq!(lme(&[800.0, 800.0]), 800.0); // exp(800) alone overflows
    // Moderate inputs: the direct formula, long enough to run in parallel.
    let x: Vec<f64> = uniform(100_000, 4).iter().map(|u| 10.0 * u - 5.0).collect();
    let direct = (x.iter().map(|v| v.exp()).sum::<f64>() / x.len() as f64).ln();
    assert!((lme(&x) - direct).abs() < 1e-12);
    let many = reduce::log_mean_exps(&[&x[..10], &x[..]], &Exec::cpu().threads(3)).unwrap();
    assert_eq!(many[1], lme(&x));
}

// ---------------------------------------------------------------------------
// Throughput (not a test: run by hand)
// ---------------------------------------------------------------------------

/// Elements per second of every method on 2^24 doubles, one and two threads:
/// `cargo test --release -p bulkem-core --test reduce_cpu -- --ignored --nocapture`
#[test]
#[ignore]
fn throughput() {
    let n = 1usize << 24;
    let x = uniform(n, 1);
    for threads in [1, 2] {
        let exec = Exec::cpu().threads(threads);
        for precision in Precision::ALL {
            let mut times = Vec::new();
            for method in Method::ALL {
                let mut best = f64::INFINITY;
                for _ in 0..9 {
                    let t0 = std::time::Instant::now();
                    std::hint::black_box(reduce::mean(&x, method, precision, &exec).unwrap());
                    best = best.min(t0.elapsed().as_secs_f64());
                }
                times.push(best);
                println!(
                    "threads {threads} {:6} {:8}: {:7.2} ms {:6.3} Gelem/s {:6.2} GB/s",
                    precision.name(),
                    method.name(),
                    best * 1e3,
                    n as f64 / best / 1e9,
                    8.0 * n as f64 / best / 1e9
                );
            }
            println!("threads {threads} {:6} exact / naive time = {:.2}", precision.name(), times[4] / times[0]);
        }
    }
    // Many short vectors (the batched path): 20,000 x 1,000 doubles.
    let x = uniform(20_000 * 1000, 2);
    let data: Vec<&[f64]> = x.chunks(1000).collect();
    let exec = Exec::cpu().threads(2);
    for method in Method::ALL {
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t0 = std::time::Instant::now();
            std::hint::black_box(reduce::means(&data, method, Precision::Double, &exec).unwrap());
            best = best.min(t0.elapsed().as_secs_f64());
        }
        println!("batched 20000 x 1000 double {:8}: {:7.2} ms {:6.3} Gelem/s", method.name(), best * 1e3, x.len() as f64 / best / 1e9);
    }
}
