//! Draws whose convergence diagnostics exercise every branch of the
//! definitions: ties (also across the dropped middle draws of odd lengths),
//! signed zeros, constants, non-finite draws, one chain, eight chains,
//! tiny lengths, slowly mixing chains (many autocorrelation lags), a tail
//! cut at the largest value, and a length whose working arrays exceed
//! shared memory.

/// One case: `chains` chains of `n` draws for each of several parameters,
/// laid out as the host's diagnostics take them (draw fastest, then chain,
/// then parameter).
pub struct Case {
    pub name: String,
    pub n: usize,
    pub chains: usize,
    pub draws: Vec<f64>,
}

struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (a, b) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()
    }
}

/// Every case; `big` adds one of 4 x 5,000 draws (slow on the emulator).
pub fn cases(big: bool) -> Vec<Case> {
    let mut rng = Rng(88172645463325252);
    let mut out = Vec::new();
    let mut add = |name: &str, n: usize, chains: usize, params: usize, draw: &mut dyn FnMut(usize, usize, usize, &mut Rng) -> f64| {
        let mut draws = Vec::with_capacity(n * chains * params);
        for p in 0..params {
            for c in 0..chains {
                for i in 0..n {
                    draws.push(draw(p, c, i, &mut rng));
                }
            }
        }
        out.push(Case { name: name.to_string(), n, chains, draws });
    };
    add("independent", 500, 4, 5, &mut |_, _, _, r| r.normal());
    let mut prev = 0.0;
    add("autocorrelated 0.95", 300, 4, 3, &mut |_, _, i, r| {
        prev = if i == 0 { r.normal() } else { 0.95 * prev + 0.3 * r.normal() };
        prev
    });
    add("ties, odd length", 101, 4, 4, &mut |_, _, _, r| (r.normal() * 10.0).round() / 10.0);
    add("three values", 50, 3, 4, &mut |_, _, _, r| (r.uniform() * 3.0).floor());
    add("chains apart", 200, 4, 3, &mut |_, c, _, r| r.normal() + c as f64);
    for n in [1usize, 2, 3, 4, 5, 6, 7, 9] {
        add(&format!("{n} draws"), n, 4, 3, &mut |_, _, _, r| r.normal());
    }
    add("constant", 20, 4, 2, &mut |_, _, _, _| 1.5);
    add("a NaN", 20, 4, 2, &mut |p, c, i, r| if p == 1 && c == 2 && i == 3 { f64::NAN } else { r.normal() });
    add("one chain", 100, 1, 3, &mut |_, _, _, r| r.normal());
    add("signed zeros", 40, 4, 3, &mut |_, _, i, r| match i % 3 {
        0 => 0.0,
        1 => -0.0,
        _ => r.normal(),
    });
    add("most at the top", 50, 4, 3, &mut |_, _, _, r| if r.uniform() < 0.97 { 2.0 } else { r.normal() });
    add("eight chains", 63, 8, 3, &mut |_, _, _, r| r.normal());
    if big {
        add("4 x 5,000", 5000, 4, 2, &mut |_, _, _, r| r.normal());
    }
    out
}

/// Where `got` differs from the host's `want` (relative 1e-9, NaN where
/// NaN): None when they agree.
pub fn disagreement(want: &bulkem_core::gibbs::diagnostics::Diagnostics, got: &bulkem_core::gibbs::diagnostics::Diagnostics) -> Option<String> {
    let pairs = [("rhat", &want.rhat, &got.rhat), ("bulk ESS", &want.ess_bulk, &got.ess_bulk), ("tail ESS", &want.ess_tail, &got.ess_tail)];
    for (what, w, g) in pairs {
        if w.len() != g.len() {
            return Some(format!("{what}: {} values, expected {}", g.len(), w.len()));
        }
        for (p, (a, b)) in w.iter().zip(g.iter()).enumerate() {
            let same = if a.is_nan() { b.is_nan() } else { (a - b).abs() <= 1e-9 * a.abs() };
            if !same {
                return Some(format!("{what} of parameter {p}: {b}, host {a}"));
            }
        }
    }
    None
}
