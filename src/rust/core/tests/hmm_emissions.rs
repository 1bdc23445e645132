//! Gaussian and Poisson emissions on the CPU: against brute force over all
//! N^T state paths (in log space: densities exceed 1 and underflow), and
//! against hmmlearn's GaussianHMM and PoissonHMM (reference values made by
//! tools/hmmlearn_reference.py, committed in tests/data).

use bulkem_core::exec::Exec;
use bulkem_core::hmm::{self, Emission, EmissionFit, Gaussian, HmmFitConfig, HmmModel, Poisson, Sequences};
use bulkem_core::rng::KeyedStream;

mod json;

fn log_sum_exp(x: &[f64]) -> f64 {
    let top = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY { top } else { top + x.iter().map(|&y| (y - top).exp()).sum::<f64>().ln() }
}

fn ln_gaussian(x: f64, m: f64, s: f64) -> f64 {
    -0.5 * ((x - m) / s).powi(2) - s.ln() - 0.5 * (2.0 * std::f64::consts::PI).ln()
}

fn ln_poisson(x: f64, r: f64) -> f64 {
    let ln_fact: f64 = (1..=x as u64).map(|k| (k as f64).ln()).sum();
    if x == 0.0 { -r } else { x * r.ln() - r - ln_fact }
}

/// An emission whose log densities the brute force can evaluate.
trait Density: Emission<Obs = f64> {
    fn ln_density(&self, state: usize, x: f64) -> f64;
    /// The M-step from posterior weights by state of every observation.
    fn from_weights(&self, xs: &[f64], w: &[Vec<f64>]) -> Self;
}

impl Density for Gaussian {
    fn ln_density(&self, j: usize, x: f64) -> f64 {
        ln_gaussian(x, self.mean[j], self.sd[j])
    }
    fn from_weights(&self, xs: &[f64], w: &[Vec<f64>]) -> Self {
        let n = self.mean.len();
        let mut out = self.clone();
        for j in 0..n {
            let s0: f64 = w.iter().map(|r| r[j]).sum();
            let m = w.iter().zip(xs).map(|(r, x)| r[j] * x).sum::<f64>() / s0;
            let v = w.iter().zip(xs).map(|(r, x)| r[j] * (x - m) * (x - m)).sum::<f64>() / s0;
            out.mean[j] = m;
            out.sd[j] = v.sqrt();
        }
        out
    }
}

impl Density for Poisson {
    fn ln_density(&self, j: usize, x: f64) -> f64 {
        ln_poisson(x, self.rate[j])
    }
    fn from_weights(&self, xs: &[f64], w: &[Vec<f64>]) -> Self {
        let mut out = self.clone();
        for j in 0..self.rate.len() {
            let s0: f64 = w.iter().map(|r| r[j]).sum();
            out.rate[j] = w.iter().zip(xs).map(|(r, x)| r[j] * x).sum::<f64>() / s0;
        }
        out
    }
}

/// Everything brute force gives for one sequence, in logs.
struct Brute {
    loglik: f64,
    best: f64,
    second: f64,
    best_path: Vec<u32>,
    /// Posterior state probabilities, T x N.
    gamma: Vec<f64>,
    /// Expected transitions i -> j.
    xi: Vec<f64>,
}

fn brute<E: Density>(m: &HmmModel<E>, seq: &[f64]) -> Brute {
    let (n, t_len) = (m.n_states, seq.len());
    let paths = n.pow(t_len as u32);
    let mut logs = Vec::with_capacity(paths);
    let path_of = |code: usize| -> Vec<usize> { (0..t_len).map(|t| (code / n.pow((t_len - 1 - t) as u32)) % n).collect() };
    let (mut best, mut second, mut best_code) = (f64::NEG_INFINITY, f64::NEG_INFINITY, 0);
    for code in 0..paths {
        let path = path_of(code);
        let mut l = m.start[path[0]].ln() + m.emission.ln_density(path[0], seq[0]);
        for t in 1..t_len {
            l += m.trans[path[t - 1] * n + path[t]].ln() + m.emission.ln_density(path[t], seq[t]);
        }
        if l > best {
            second = best;
            best = l;
            best_code = code;
        } else if l > second {
            second = l;
        }
        logs.push(l);
    }
    let loglik = log_sum_exp(&logs);
    let (mut gamma, mut xi) = (vec![0.0; t_len * n], vec![0.0; n * n]);
    for (code, l) in logs.iter().enumerate() {
        let w = (l - loglik).exp();
        let path = path_of(code);
        for t in 0..t_len {
            gamma[t * n + path[t]] += w;
            if t > 0 {
                xi[path[t - 1] * n + path[t]] += w;
            }
        }
    }
    Brute { loglik, best, second, best_path: path_of(best_code).iter().map(|&s| s as u32).collect(), gamma, xi }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    a == b || (a - b).abs() <= tol * b.abs().max(1.0)
}

fn simplex(rng: &mut KeyedStream, len: usize, zeros: bool) -> Vec<f64> {
    let mut x: Vec<f64> = (0..len).map(|_| rng.uniform() + 1e-3).collect();
    if zeros && len > 1 {
        let k = rng.below(len as u64) as usize;
        x[k] = 0.0;
    }
    let s: f64 = x.iter().sum();
    x.iter().map(|p| p / s).collect()
}

fn chain(rng: &mut KeyedStream, n: usize, zeros: bool) -> (Vec<f64>, Vec<f64>) {
    (simplex(rng, n, zeros), (0..n).flat_map(|_| simplex(rng, n, zeros)).collect())
}

fn gaussian_model(n: usize, key: u64, zeros: bool, spread: f64) -> HmmModel<Gaussian> {
    let mut rng = KeyedStream::new(5, key, 0);
    let (start, trans) = chain(&mut rng, n, zeros);
    let g = Gaussian::new((0..n).map(|_| spread * (rng.uniform() - 0.5)).collect(), (0..n).map(|_| 0.3 + 2.0 * rng.uniform()).collect()).unwrap();
    HmmModel::with_emission(start, trans, g).unwrap()
}

fn poisson_model(n: usize, key: u64, zeros: bool) -> HmmModel<Poisson> {
    let mut rng = KeyedStream::new(6, key, 0);
    let (start, trans) = chain(&mut rng, n, zeros);
    let mut rate: Vec<f64> = (0..n).map(|_| 0.2 + 15.0 * rng.uniform()).collect();
    if zeros {
        rate[0] = 0.0;
    }
    HmmModel::with_emission(start, trans, Poisson::new(rate).unwrap()).unwrap()
}

/// Every pass of `m` on `seqs` against brute force.
fn check_against_brute<E: Density>(m: &HmmModel<E>, seqs: &[Vec<f64>], what: &str) -> usize {
    let exec = Exec::cpu().threads(2);
    let s = Sequences::from_vecs(seqs);
    let ll = hmm::loglik(m, &s, &exec).unwrap();
    let post = hmm::posterior(m, &s, &exec).unwrap();
    let vit = hmm::viterbi(m, &s, &exec).unwrap();
    let n = m.n_states;
    let mut paths = 0;
    for (q, seq) in seqs.iter().enumerate() {
        let b = brute(m, seq);
        assert!(close(ll[q], b.loglik, 1e-10), "{what} seq {q}: loglik {} vs {}", ll[q], b.loglik);
        assert!(close(post.loglik[q], b.loglik, 1e-10), "{what} seq {q}: posterior loglik");
        if b.loglik == f64::NEG_INFINITY {
            continue;
        }
        let off = s.offsets[q];
        for (k, (x, y)) in post.probs[off * n..(off + seq.len()) * n].iter().zip(&b.gamma).enumerate() {
            assert!((x - y).abs() < 1e-10, "{what} seq {q}: posterior {k}: {x} vs {y}");
        }
        assert!(close(vit.log_prob[q], b.best, 1e-10), "{what} seq {q}: viterbi {} vs {}", vit.log_prob[q], b.best);
        if b.best - b.second > 1e-9 {
            assert_eq!(&vit.states[off..off + seq.len()], &b.best_path[..], "{what} seq {q}");
            paths += 1;
        }
    }
    paths
}

#[test]
fn gaussian_passes_match_brute_force_over_all_paths() {
    let mut paths = 0;
    let mut key = 0;
    for n in 1..=3usize {
        for t_len in 1..=7usize {
            for rep in 0..3u64 {
                key += 1;
                // Spread 60 puts densities of other states below 1e-300.
                let spread = [4.0, 12.0, 60.0][rep as usize];
                let m = gaussian_model(n, key, rep == 1, spread);
                let (seqs, _) = hmm::simulate(&m, &[t_len, t_len.div_ceil(2)], key);
                let v: Vec<Vec<f64>> = (0..seqs.len()).map(|s| seqs.get(s).to_vec()).collect();
                paths += check_against_brute(&m, &v, &format!("gaussian N={n} T={t_len} rep {rep}"));
            }
        }
    }
    assert!(paths > 80, "only {paths} Viterbi paths compared");
}

#[test]
fn poisson_passes_match_brute_force_over_all_paths() {
    let mut paths = 0;
    let mut key = 0;
    for n in 1..=3usize {
        for t_len in 1..=7usize {
            for rep in 0..3u64 {
                key += 1;
                let m = poisson_model(n, key, rep == 1);
                let (seqs, _) = hmm::simulate(&m, &[t_len, t_len.div_ceil(2)], key);
                let mut v: Vec<Vec<f64>> = (0..seqs.len()).map(|s| seqs.get(s).to_vec()).collect();
                if rep == 2 {
                    // A count no state expects (1e-40 and smaller).
                    v[0][t_len / 2] = 80.0;
                }
                paths += check_against_brute(&m, &v, &format!("poisson N={n} T={t_len} rep {rep}"));
            }
        }
    }
    assert!(paths > 60, "only {paths} Viterbi paths compared");
}

#[test]
fn a_poisson_zero_rate_makes_counts_impossible_not_nan() {
    let m = HmmModel::with_emission(vec![1.0, 0.0], vec![1.0, 0.0, 0.0, 1.0], Poisson::new(vec![0.0, 3.0]).unwrap()).unwrap();
    let s = Sequences::from_vecs(&[vec![0.0, 0.0], vec![0.0, 2.0]]);
    let ll = hmm::loglik(&m, &s, &Exec::cpu()).unwrap();
    assert_eq!(ll[0], 0.0);
    assert_eq!(ll[1], f64::NEG_INFINITY);
    let p = hmm::posterior(&m, &s, &Exec::cpu()).unwrap();
    assert!(p.probs[4..].iter().all(|x| x.is_nan()), "{:?} {:?}", p.probs, p.loglik);
    let v = hmm::viterbi(&m, &s, &Exec::cpu()).unwrap();
    assert_eq!(v.log_prob[1], f64::NEG_INFINITY);
    assert_eq!(v.states[2..], [hmm::NO_STATE, hmm::NO_STATE]);
}

/// One Baum-Welch step against the M-step of brute-force posteriors.
fn check_step<E: Density>(m: &HmmModel<E>, seqs: &[Vec<f64>], what: &str) {
    let s = Sequences::from_vecs(seqs);
    let fit = EmissionFit { pseudocount: 0.0, var_floor: 1e-300 };
    let (next, ll) = hmm::baum_welch_step(m, &s, &fit, &Exec::cpu()).unwrap();
    let n = m.n_states;
    let (mut st, mut xi, mut w, mut xs) = (vec![0.0; n], vec![0.0; n * n], Vec::new(), Vec::new());
    let mut want_ll = 0.0;
    for seq in seqs {
        let b = brute(m, seq);
        want_ll += b.loglik;
        st.iter_mut().zip(&b.gamma).for_each(|(a, g)| *a += g);
        xi.iter_mut().zip(&b.xi).for_each(|(a, x)| *a += x);
        for (t, &x) in seq.iter().enumerate() {
            w.push(b.gamma[t * n..(t + 1) * n].to_vec());
            xs.push(x);
        }
    }
    assert!(close(ll, want_ll, 1e-10), "{what}: loglik");
    let total: f64 = st.iter().sum();
    for i in 0..n {
        assert!((next.start[i] - st[i] / total).abs() < 1e-10, "{what}: start");
        let row: f64 = xi[i * n..(i + 1) * n].iter().sum();
        for j in 0..n {
            if row > 0.0 {
                assert!((next.trans[i * n + j] - xi[i * n + j] / row).abs() < 1e-10, "{what}: trans {i} {j}");
            }
        }
    }
    let want = m.emission.from_weights(&xs, &w);
    assert_eq!(format!("{:.9?}", next.emission), format!("{want:.9?}"), "{what}: emission");
}

#[test]
fn one_baum_welch_step_matches_brute_force_statistics() {
    for (key, n) in [1usize, 2, 3].into_iter().enumerate() {
        let key = key as u64 + 100;
        let g = gaussian_model(n, key, false, 6.0);
        let (gs, _) = hmm::simulate(&g, &[5, 3, 6], key);
        check_step(&g, &(0..3).map(|s| gs.get(s).to_vec()).collect::<Vec<_>>(), &format!("gaussian N={n}"));
        let p = poisson_model(n, key, false);
        let (ps, _) = hmm::simulate(&p, &[4, 6, 2], key);
        check_step(&p, &(0..3).map(|s| ps.get(s).to_vec()).collect::<Vec<_>>(), &format!("poisson N={n}"));
    }
}

#[test]
fn invalid_observations_name_the_sequence_and_position() {
    let g = gaussian_model(2, 1, false, 4.0);
    let s = Sequences::from_vecs(&[vec![0.5, 1.0], vec![2.0, f64::NAN, 1.0]]);
    let e = hmm::loglik(&g, &s, &Exec::cpu()).unwrap_err().to_string();
    assert_eq!(e, "sequence 2 has value NaN at position 2; observations must be finite numbers");
    let p = poisson_model(2, 1, false);
    let s = Sequences::from_vecs(&[vec![0.0, 1.5]]);
    let e = hmm::loglik(&p, &s, &Exec::cpu()).unwrap_err().to_string();
    assert_eq!(e, "sequence 1 has value 1.5 at position 2; observations must be counts (whole numbers >= 0)");
    let s = Sequences::from_vecs(&[vec![-1.0]]);
    assert!(hmm::viterbi(&p, &s, &Exec::cpu()).is_err());
}

#[test]
fn the_variance_floor_stops_a_collapsing_state_and_says_so() {
    // Two states, one observation far from the rest: the likelihood grows
    // without bound as one state's sd shrinks onto it.
    let mut x: Vec<f64> = (0..40).map(|i| (i as f64 * 0.37).sin()).collect();
    x[20] = 30.0;
    let s = Sequences::from_vecs(&[x]);
    let init = HmmModel::with_emission(vec![0.5, 0.5], vec![0.9, 0.1, 0.5, 0.5], Gaussian::new(vec![0.0, 30.0], vec![1.0, 1.0]).unwrap()).unwrap();
    let config = HmmFitConfig::<Gaussian>::for_emission(2, ()).init(init).max_iters(200).var_floor(Some(1e-4)).check().unwrap();
    let fit = hmm::fit(&s, &config, &Exec::cpu()).unwrap();
    assert_eq!(fit.floored, vec![false, true]);
    assert!((fit.model.emission.sd[1] - 1e-2).abs() < 1e-15);
    assert!(fit.loglik.is_finite());
    for w in fit.trace.windows(2) {
        assert!(w[1] >= w[0] - 1e-9 * w[0].abs(), "not monotone: {w:?}");
    }
}

#[test]
fn random_starts_fit_and_are_reproducible() {
    let truth = HmmModel::with_emission(vec![0.5, 0.5], vec![0.95, 0.05, 0.1, 0.9], Gaussian::new(vec![-2.0, 3.0], vec![1.0, 0.5]).unwrap()).unwrap();
    let (s, _) = hmm::simulate(&truth, &[400, 300, 200], 4);
    let config = HmmFitConfig::<Gaussian>::for_emission(2, ()).random_inits(4).seed(9).check().unwrap();
    let a = hmm::fit(&s, &config, &Exec::cpu().threads(1)).unwrap();
    let b = hmm::fit(&s, &config, &Exec::cpu().threads(2)).unwrap();
    assert_eq!(a, b);
    let mut means = a.model.emission.mean.clone();
    means.sort_by(f64::total_cmp);
    assert!((means[0] + 2.0).abs() < 0.2 && (means[1] - 3.0).abs() < 0.2, "{means:?}");
    let truth = HmmModel::with_emission(vec![0.5, 0.5], vec![0.9, 0.1, 0.2, 0.8], Poisson::new(vec![1.0, 12.0]).unwrap()).unwrap();
    let (s, _) = hmm::simulate(&truth, &[500, 500], 4);
    let config = HmmFitConfig::<Poisson>::for_emission(2, ()).random_inits(3).seed(1).check().unwrap();
    let f = hmm::fit(&s, &config, &Exec::cpu()).unwrap();
    let mut rates = f.model.emission.rate.clone();
    rates.sort_by(f64::total_cmp);
    assert!((rates[0] - 1.0).abs() < 0.2 && (rates[1] - 12.0).abs() < 0.6, "{rates:?}");
}

/// A model and its sequences from the hmmlearn reference file.
fn reference_model<E: Emission<Obs = f64>>(case: &json::Value, emission: E) -> (HmmModel<E>, Sequences<f64>, Vec<Vec<f64>>) {
    let m = HmmModel::with_emission(case["start"].numbers(), case["trans"].numbers(), emission).unwrap();
    let lengths: Vec<usize> = case["lengths"].numbers().iter().map(|&l| l as usize).collect();
    let s = Sequences::from_lengths(case["obs"].numbers(), &lengths).unwrap();
    let v = (0..s.len()).map(|q| s.get(q).to_vec()).collect();
    (m, s, v)
}

fn check_reference<E: Emission<Obs = f64>>(case: &json::Value, emission: E, fitted: impl Fn(&json::Value) -> E, params: impl Fn(&E) -> Vec<f64>) {
    let name = case["name"].string();
    let (m, s, _) = reference_model(case, emission);
    let exec = Exec::cpu();
    let ll = hmm::loglik(&m, &s, &exec).unwrap();
    for (a, b) in ll.iter().zip(case["loglik"].numbers()) {
        assert!(close(*a, b, 1e-8), "{name}: loglik {a} vs {b}");
    }
    let v = hmm::viterbi(&m, &s, &exec).unwrap();
    for (a, b) in v.log_prob.iter().zip(case["viterbi_log_prob"].numbers()) {
        assert!(close(*a, b, 1e-8), "{name}: viterbi {a} vs {b}");
    }
    let want: Vec<u32> = case["viterbi_path"].numbers().iter().map(|&k| k as u32).collect();
    assert_eq!(v.states, want, "{name}: viterbi path");
    let p = hmm::posterior(&m, &s, &exec).unwrap();
    for (a, b) in p.probs.iter().zip(case["posterior"].numbers()) {
        assert!((a - b).abs() < 1e-8, "{name}: posterior {a} vs {b}");
    }
    // Ten Baum-Welch iterations from the same start, plain ML.
    let fit = &case["fit"];
    let config = HmmFitConfig::<E>::for_emission(m.n_states, m.emission.shape()).init(m.clone()).max_iters(10).epsilon(0.0).var_floor(Some(1e-300)).check().unwrap();
    let f = hmm::fit(&s, &config, &exec).unwrap();
    assert_eq!(f.iterations, 10);
    for (a, b) in f.trace.iter().zip(fit["history"].numbers()) {
        assert!(close(*a, b, 1e-8), "{name}: trace {a} vs {b}");
    }
    assert!(close(f.loglik, fit["loglik"].number(), 1e-8), "{name}: fitted loglik {} vs {}", f.loglik, fit["loglik"].number());
    let want = fitted(&fit["params"]);
    for (label, got, want) in [("start", f.model.start.clone(), fit["start"].numbers()), ("trans", f.model.trans.clone(), fit["trans"].numbers()), ("emission", params(&f.model.emission), params(&want))] {
        for (a, b) in got.iter().zip(&want) {
            assert!(close(*a, *b, 1e-8), "{name}: fitted {label} {got:?} vs {want:?}");
        }
    }
}

#[test]
fn gaussian_and_poisson_hmms_agree_with_hmmlearn() {
    let data = json::parse(include_str!("data/hmmlearn_emissions.json"));
    let (mut gaussian, mut poisson) = (0, 0);
    for case in data["cases"].array() {
        let p = &case["params"];
        match case["emission"].string() {
            "gaussian" => {
                let g = |p: &json::Value| Gaussian::new(p["mean"].numbers(), p["sd"].numbers()).unwrap();
                check_reference(case, g(p), g, |e: &Gaussian| e.mean.iter().chain(&e.sd).copied().collect());
                gaussian += 1;
            }
            "poisson" => {
                let r = |p: &json::Value| Poisson::new(p["rate"].numbers()).unwrap();
                check_reference(case, r(p), r, |e: &Poisson| e.rate.clone());
                poisson += 1;
            }
            other => panic!("unknown emission {other}"),
        }
    }
    assert!(gaussian >= 5 && poisson >= 5, "{gaussian} Gaussian and {poisson} Poisson cases");
}
