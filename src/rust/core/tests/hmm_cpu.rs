//! The HMM routines on the CPU against brute force over all N^T state paths,
//! a published textbook example, an independent log-space forward pass, and
//! the properties of Baum-Welch (monotone, recovers a known model).

mod common;
use common::{check_kept_models, nudged};

use bulkem_core::em::FitStatus;
use bulkem_core::exec::Exec;
use bulkem_core::hmm::{self, HmmFitConfig, HmmModel, Sequences, NO_STATE};
use bulkem_core::rng::KeyedStream;

fn uniform(rng: &mut KeyedStream) -> f64 {
    ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// A random probability vector; with `zeros`, some entries are exactly 0
/// (never all).
fn simplex(rng: &mut KeyedStream, len: usize, zeros: bool) -> Vec<f64> {
    let mut x: Vec<f64> = (0..len).map(|_| uniform(rng)).collect();
    if zeros && len > 1 {
        for p in x.iter_mut() {
            if uniform(rng) < 0.3 {
                *p = 0.0;
            }
        }
        if x.iter().all(|&p| p == 0.0) {
            x[rng.below(len as u64) as usize] = 1.0;
        }
    }
    let s: f64 = x.iter().sum();
    x.iter().map(|p| p / s).collect()
}

fn random_model(n: usize, v: usize, key: u64, zeros: bool) -> HmmModel {
    let mut rng = KeyedStream::new(99, key, 0);
    let start = simplex(&mut rng, n, zeros);
    let trans = (0..n).flat_map(|_| simplex(&mut rng, n, zeros)).collect();
    let emis = (0..n).flat_map(|_| simplex(&mut rng, v, zeros)).collect();
    HmmModel::new(start, trans, emis, v).unwrap()
}

fn random_seq(v: usize, t: usize, key: u64) -> Vec<u32> {
    let mut rng = KeyedStream::new(7, key, 1);
    (0..t).map(|_| rng.below(v as u64) as u32).collect()
}

/// Everything brute force gives for one sequence.
struct Brute {
    total: f64,
    best: f64,
    best_path: Vec<u32>,
    /// Probability of the runner-up path (to skip exact ties).
    second: f64,
    gamma: Vec<f64>,
    /// Expected transition counts xi(i, j) and emission counts.
    xi: Vec<f64>,
    emis: Vec<f64>,
}

fn brute(m: &HmmModel, seq: &[u32]) -> Brute {
    let (n, v, t_len) = (m.n_states, m.emission.n_symbols, seq.len());
    let mut b = Brute { total: 0.0, best: -1.0, best_path: vec![], second: -1.0, gamma: vec![0.0; t_len * n], xi: vec![0.0; n * n], emis: vec![0.0; n * v] };
    let paths = n.pow(t_len as u32);
    let mut joint = Vec::with_capacity(paths);
    for code in 0..paths {
        let path: Vec<usize> = (0..t_len).map(|t| (code / n.pow((t_len - 1 - t) as u32)) % n).collect();
        let mut p = m.start[path[0]] * m.emission.probs[path[0] * v + seq[0] as usize];
        for t in 1..t_len {
            p *= m.trans[path[t - 1] * n + path[t]] * m.emission.probs[path[t] * v + seq[t] as usize];
        }
        joint.push((p, path));
    }
    for (p, path) in &joint {
        b.total += p;
        if *p > b.best {
            b.second = b.best;
            b.best = *p;
            b.best_path = path.iter().map(|&s| s as u32).collect();
        } else if *p > b.second {
            b.second = *p;
        }
    }
    for (p, path) in &joint {
        let w = p / b.total;
        for t in 0..t_len {
            b.gamma[t * n + path[t]] += w;
            b.emis[path[t] * v + seq[t] as usize] += w;
            if t > 0 {
                b.xi[path[t - 1] * n + path[t]] += w;
            }
        }
    }
    b
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    a == b || (a - b).abs() <= tol * b.abs().max(1.0)
}

#[test]
fn textbook_example() {
    // Start (0.6, 0.4), trans ((0.7, 0.3), (0.4, 0.6)), emis ((0.5, 0.4, 0.1),
    // (0.1, 0.3, 0.6)), observations 1, 2, 3 (the Wikipedia Viterbi example).
    let m = HmmModel::new(vec![0.6, 0.4], vec![0.7, 0.3, 0.4, 0.6], vec![0.5, 0.4, 0.1, 0.1, 0.3, 0.6], 3).unwrap();
    let seqs = Sequences::from_vecs(&[vec![0u32, 1, 2]]);
    let ll = hmm::loglik(&m, &seqs, &Exec::cpu()).unwrap();
    assert!((ll[0] - (-3.316488653735)).abs() < 1e-12, "{}", ll[0]);
    let v = hmm::viterbi(&m, &seqs, &Exec::cpu()).unwrap();
    assert_eq!(v.states, vec![0, 0, 1]);
    assert!((v.log_prob[0].exp() - 0.01512).abs() < 1e-15, "{}", v.log_prob[0].exp());
}

#[test]
fn brute_force_over_all_paths() {
    let exec = Exec::cpu();
    let mut checked_paths = 0;
    let mut key = 0;
    for n in 1..=3usize {
        for v in 1..=3usize {
            for t_len in 1..=8usize {
                for rep in 0..3 {
                    key += 1;
                    let zeros = rep == 2;
                    let m = random_model(n, v, key, zeros);
                    // Several sequences of this length in one call, plus one
                    // of every other length, to exercise the flat layout.
                    let seqs_v: Vec<Vec<u32>> = (0..4).map(|s| random_seq(v, if s == 3 { 1 + (t_len % 5) } else { t_len }, key * 10 + s)).collect();
                    let seqs = Sequences::from_vecs(&seqs_v);
                    let ll = hmm::loglik(&m, &seqs, &exec).unwrap();
                    let vit = hmm::viterbi(&m, &seqs, &exec).unwrap();
                    let post = hmm::posterior(&m, &seqs, &exec).unwrap();
                    for (s, seq) in seqs_v.iter().enumerate() {
                        let b = brute(&m, seq);
                        let what = format!("N={n} V={v} T={} key={key} seq {s}", seq.len());
                        assert!(!ll[s].is_nan() && !vit.log_prob[s].is_nan(), "{what}");
                        assert!(close(ll[s], b.total.ln(), 1e-10), "{what}: loglik {} vs {}", ll[s], b.total.ln());
                        assert_eq!(ll[s], post.loglik[s], "{what}");
                        assert!(close(vit.log_prob[s], b.best.ln(), 1e-10), "{what}: viterbi {} vs {}", vit.log_prob[s], b.best.ln());
                        let path = &vit.states[seqs.offsets[s]..seqs.offsets[s + 1]];
                        if b.total == 0.0 {
                            assert!(path.iter().all(|&x| x == NO_STATE), "{what}");
                            assert!(post.probs[seqs.offsets[s] * n..seqs.offsets[s + 1] * n].iter().all(|p| p.is_nan()));
                            continue;
                        }
                        // A unique best path must be found exactly.
                        if b.second < b.best * (1.0 - 1e-9) {
                            assert_eq!(path, &b.best_path[..], "{what}");
                            checked_paths += 1;
                        }
                        let g = &post.probs[seqs.offsets[s] * n..seqs.offsets[s + 1] * n];
                        for (x, y) in g.iter().zip(&b.gamma) {
                            assert!((x - y).abs() < 1e-10, "{what}: posterior {x} vs {y}");
                        }
                    }
                }
            }
        }
    }
    assert!(checked_paths > 300, "only {checked_paths} unique paths compared");
}

#[test]
fn one_baum_welch_step_matches_brute_force_counts() {
    let exec = Exec::cpu();
    for (key, (n, v)) in [(2usize, 3usize), (3, 2), (3, 3), (1, 2)].into_iter().enumerate() {
        let m = random_model(n, v, 500 + key as u64, key == 2);
        let seqs_v: Vec<Vec<u32>> = (0..5).map(|s| random_seq(v, 2 + s, 600 + 10 * key as u64 + s as u64)).collect();
        let seqs = Sequences::from_vecs(&seqs_v);
        for pc in [0.0, 0.5] {
            let config = HmmFitConfig::new(n, v).init(m.clone()).max_iters(1).epsilon(0.0).pseudocount(pc).check().unwrap();
            let fit = hmm::fit(&seqs, &config, &exec).unwrap();
            // Expected counts by brute force, summed over sequences.
            let (mut st, mut xi, mut em) = (vec![0.0; n], vec![0.0; n * n], vec![0.0; n * v]);
            for seq in &seqs_v {
                let b = brute(&m, seq);
                st.iter_mut().zip(&b.gamma).for_each(|(a, g)| *a += g);
                xi.iter_mut().zip(&b.xi).for_each(|(a, b)| *a += b);
                em.iter_mut().zip(&b.emis).for_each(|(a, b)| *a += b);
            }
            let norm = |x: &[f64], width: usize, old: &[f64]| -> Vec<f64> {
                x.chunks(width)
                    .zip(old.chunks(width))
                    .flat_map(|(r, o)| {
                        let s: f64 = r.iter().map(|c| c + pc).sum();
                        if s > 0.0 { r.iter().map(|c| (c + pc) / s).collect::<Vec<_>>() } else { o.to_vec() }
                    })
                    .collect()
            };
            let want = [norm(&st, n, &m.start), norm(&xi, n, &m.trans), norm(&em, v, &m.emission.probs)];
            let got = [&fit.model.start, &fit.model.trans, &fit.model.emission.probs];
            for (w, g) in want.iter().zip(got) {
                for (a, b) in w.iter().zip(g.iter()) {
                    assert!((a - b).abs() < 1e-10, "N={n} V={v} pc={pc}: {w:?} vs {g:?}");
                }
            }
            // The trace starts at the starting model's log-likelihood.
            let ll0: f64 = seqs_v.iter().map(|s| brute(&m, s).total.ln()).sum();
            assert!(close(fit.trace[0], ll0, 1e-10));
            assert_eq!(fit.trace.len(), 2);
            assert_eq!(fit.iterations, 1);
        }
    }
}

fn known_model() -> HmmModel {
    HmmModel::new(
        vec![0.8, 0.2],
        vec![0.9, 0.1, 0.2, 0.8],
        vec![0.7, 0.2, 0.1, 0.05, 0.15, 0.8],
        3,
    )
    .unwrap()
}

/// Relabel the states of `fit` to best match `truth` (N = 2).
fn align(fit: &HmmModel, truth: &HmmModel) -> HmmModel {
    let diff = |m: &HmmModel| m.emission.probs.iter().zip(&truth.emission.probs).map(|(a, b)| (a - b).abs()).sum::<f64>();
    if fit.n_states != 2 {
        return fit.clone();
    }
    let v = fit.emission.n_symbols;
    let swapped = HmmModel {
        start: vec![fit.start[1], fit.start[0]],
        trans: vec![fit.trans[3], fit.trans[2], fit.trans[1], fit.trans[0]],
        emission: hmm::Categorical { probs: [&fit.emission.probs[v..], &fit.emission.probs[..v]].concat(), ..fit.emission.clone() },
        ..fit.clone()
    };
    if diff(&swapped) < diff(fit) { swapped } else { fit.clone() }
}

#[test]
fn baum_welch_is_monotone_and_recovers_a_known_model() {
    let truth = known_model();
    // Many short sequences: enough starts to re-estimate the start probabilities.
    let (seqs, _) = hmm::simulate(&truth, &vec![60; 3000], 11);
    let config = HmmFitConfig::new(2, 3).random_inits(3).max_iters(500).epsilon(1e-9).seed(5).check().unwrap();
    let fit = hmm::fit(&seqs, &config, &Exec::cpu()).unwrap();
    assert_eq!(fit.status, FitStatus::Converged, "{:?}", fit.message);
    for w in fit.trace.windows(2) {
        assert!(w[1] >= w[0] - 1e-9 * w[0].abs(), "log-likelihood decreased: {} -> {}", w[0], w[1]);
    }
    assert_eq!(fit.trace.len(), fit.iterations + 1);
    assert_eq!(*fit.trace.last().unwrap(), fit.loglik);
    assert_eq!(fit.start_logliks.len(), 3);
    let m = align(&fit.model, &truth);
    let worst = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    assert!(worst(&m.start, &truth.start) < 0.04, "start {:?}", m.start);
    assert!(worst(&m.trans, &truth.trans) < 0.02, "trans {:?}", m.trans);
    assert!(worst(&m.emission.probs, &truth.emission.probs) < 0.02, "emis {:?}", m.emission.probs);
    // The fit is at least as likely as the truth on these data.
    let ll_truth: f64 = hmm::loglik(&truth, &seqs, &Exec::cpu()).unwrap().iter().sum();
    assert!(fit.loglik >= ll_truth - 1e-6);
}

#[test]
fn baum_welch_monotone_from_random_starts_with_zeros_in_data() {
    // A 3-state model on data from a different model, from random starts.
    let truth = random_model(3, 4, 77, true);
    let (seqs, _) = hmm::simulate(&truth, &[5, 200, 1, 37, 1000], 3);
    for start in 0..4 {
        let config = HmmFitConfig::new(3, 4).random_inits(1).max_iters(200).epsilon(0.0).seed(start).check().unwrap();
        let fit = hmm::fit(&seqs, &config, &Exec::cpu()).unwrap();
        assert_eq!(fit.status, FitStatus::MaxIters);
        for w in fit.trace.windows(2) {
            assert!(w[1] >= w[0] - 1e-10 * w[0].abs(), "decreased: {} -> {}", w[0], w[1]);
        }
        for p in fit.model.start.iter().chain(&fit.model.trans).chain(&fit.model.emission.probs) {
            assert!(p.is_finite() && *p >= 0.0);
        }
    }
}

#[test]
fn fits_do_not_depend_on_the_thread_count() {
    let truth = known_model();
    let (seqs, _) = hmm::simulate(&truth, &(0..5000).map(|i| 1 + i % 40).collect::<Vec<_>>(), 2);
    let config = HmmFitConfig::new(2, 3).random_inits(2).max_iters(20).seed(1).check().unwrap();
    let one = hmm::fit(&seqs, &config, &Exec::cpu().threads(1)).unwrap();
    let two = hmm::fit(&seqs, &config, &Exec::cpu().threads(2)).unwrap();
    assert_eq!(one, two);
    let p1 = hmm::posterior(&truth, &seqs, &Exec::cpu().threads(1)).unwrap();
    let p3 = hmm::posterior(&truth, &seqs, &Exec::cpu().threads(3)).unwrap();
    assert_eq!(p1, p3);
}

#[test]
fn starts_split_over_calls_are_the_starts_of_one_call() {
    // R's parallel = "future" fits starts 3..5 of a fit in one call and 1..2
    // in another: each start must be the same as in the call of all five.
    let truth = known_model();
    let (seqs, _) = hmm::simulate(&truth, &vec![25; 60], 4);
    let base = HmmFitConfig::new(2, 3).max_iters(15).epsilon(0.0).seed(9);
    let all = hmm::fit(&seqs, &base.clone().random_inits(5).check().unwrap(), &Exec::cpu()).unwrap();
    let head = hmm::fit(&seqs, &base.clone().random_inits(2).check().unwrap(), &Exec::cpu()).unwrap();
    let tail = hmm::fit(&seqs, &base.clone().random_inits(3).first_start(2).check().unwrap(), &Exec::cpu()).unwrap();
    assert_eq!([head.start_logliks.clone(), tail.start_logliks.clone()].concat(), all.start_logliks);
    // Different starts differ (the offset is used at all).
    assert_ne!(head.start_logliks[0], tail.start_logliks[0]);
    // Each start alone, by its global index, is that start's fit.
    for s in 0..5 {
        let one = hmm::fit(&seqs, &base.clone().random_inits(1).first_start(s).check().unwrap(), &Exec::cpu()).unwrap();
        assert_eq!(one.start_logliks, vec![all.start_logliks[s]]);
        if s == all.best_start {
            assert_eq!((one.model.clone(), one.init.clone(), one.trace.clone()), (all.model.clone(), all.init.clone(), all.trace.clone()));
        }
    }
}

#[test]
fn impossible_sequences_give_minus_infinity_not_nan() {
    // State 0 emits only symbol 0 and never leaves; symbol 1 after it is impossible.
    let m = HmmModel::new(vec![1.0, 0.0], vec![1.0, 0.0, 0.0, 1.0], vec![1.0, 0.0, 0.0, 1.0], 2).unwrap();
    let seqs = Sequences::from_vecs(&[vec![0u32, 0, 1], vec![0, 0], vec![1]]);
    let exec = Exec::cpu();
    let ll = hmm::loglik(&m, &seqs, &exec).unwrap();
    assert_eq!(ll, vec![f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY]);
    let v = hmm::viterbi(&m, &seqs, &exec).unwrap();
    assert_eq!(v.log_prob, vec![f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY]);
    assert_eq!(v.states, vec![NO_STATE, NO_STATE, NO_STATE, 0, 0, NO_STATE]);
    let mut paths: Vec<Vec<i32>> = vec![vec![9; 3], vec![9; 2], vec![9; 1]];
    let mut outs: Vec<&mut [i32]> = paths.iter_mut().map(|x| &mut x[..]).collect();
    assert_eq!(hmm::viterbi_into(&m, &seqs, &exec, &mut outs, -1).unwrap(), v.log_prob);
    assert_eq!(paths, vec![vec![-1; 3], vec![1, 1], vec![-1]]);
    let p = hmm::posterior(&m, &seqs, &exec).unwrap();
    assert_eq!(&p.probs[6..10], &[1.0, 0.0, 1.0, 0.0]);
    // As R receives them: a column-major T x N matrix per sequence, the
    // impossible ones all `missing`.
    let mut mats: Vec<Vec<f64>> = [3, 2, 1].iter().map(|t| vec![0.5; t * 2]).collect();
    let mut outs: Vec<&mut [f64]> = mats.iter_mut().map(|x| &mut x[..]).collect();
    assert_eq!(hmm::posterior_into(&m, &seqs, &exec, &mut outs, -7.0).unwrap(), p.loglik);
    assert_eq!(mats, vec![vec![-7.0; 6], vec![1.0, 1.0, 0.0, 0.0], vec![-7.0; 2]]);
    // Baum-Welch from a model that cannot produce a sequence fails, saying which.
    let config = HmmFitConfig::new(2, 2).init(m).check().unwrap();
    let fit = hmm::fit(&seqs, &config, &exec).unwrap();
    assert_eq!(fit.status, FitStatus::Failed);
    assert!(fit.message.unwrap().contains("sequence 1 "));
}

#[test]
fn edge_cases_t1_n1_v1() {
    let exec = Exec::cpu();
    // N = 1, V = 1: every sequence has probability 1.
    let m = HmmModel::new(vec![1.0], vec![1.0], vec![1.0], 1).unwrap();
    let seqs = Sequences::from_vecs(&[vec![0u32], vec![0; 10]]);
    assert_eq!(hmm::loglik(&m, &seqs, &exec).unwrap(), vec![0.0, 0.0]);
    assert_eq!(hmm::viterbi(&m, &seqs, &exec).unwrap().states, vec![0; 11]);
    assert!(hmm::posterior(&m, &seqs, &exec).unwrap().probs.iter().all(|&p| p == 1.0));
    let fit = hmm::fit(&seqs, &HmmFitConfig::new(1, 1).check().unwrap(), &exec).unwrap();
    assert_eq!(fit.status, FitStatus::Converged);
    assert_eq!(fit.loglik, 0.0);
    // N = 1, V = 3: Baum-Welch gives the symbol frequencies in one step.
    let seqs = Sequences::from_vecs(&[vec![0u32, 1, 1, 2], vec![1, 1]]);
    let fit = hmm::fit(&seqs, &HmmFitConfig::new(1, 3).seed(3).check().unwrap(), &exec).unwrap();
    let want = [1.0 / 6.0, 4.0 / 6.0, 1.0 / 6.0];
    assert!(fit.model.emission.probs.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-14), "{:?}", fit.model.emission.probs);
    // T = 1: the posterior is start * emission, normalised.
    let m = known_model();
    let seqs = Sequences::from_vecs(&[vec![2u32]]);
    let p = hmm::posterior(&m, &seqs, &exec).unwrap();
    let (a, b) = (0.8 * 0.1, 0.2 * 0.8);
    assert!((p.probs[0] - a / (a + b)).abs() < 1e-15 && (p.probs[1] - b / (a + b)).abs() < 1e-15);
    assert!((hmm::loglik(&m, &seqs, &exec).unwrap()[0] - (a + b).ln()).abs() < 1e-15);
    assert_eq!(hmm::viterbi(&m, &seqs, &exec).unwrap().states, vec![1]);
}

#[test]
fn ties_go_to_the_lowest_state() {
    // Two identical states: every path ties; Viterbi must pick all zeros.
    let m = HmmModel::new(vec![0.5, 0.5], vec![0.5; 4], vec![0.3, 0.7, 0.3, 0.7], 2).unwrap();
    let seqs = Sequences::from_vecs(&[vec![0u32, 1, 1, 0, 1]]);
    let v = hmm::viterbi(&m, &seqs, &Exec::cpu()).unwrap();
    assert_eq!(v.states, vec![0; 5]);
}

/// log P(O) by the log-space forward recursion (log-sum-exp), independent
/// of the scaled implementation.
fn log_space_loglik(m: &HmmModel, seq: &[u32]) -> f64 {
    let (n, v) = (m.n_states, m.emission.n_symbols);
    let lse = |x: &[f64]| {
        let top = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if top == f64::NEG_INFINITY { top } else { top + x.iter().map(|y| (y - top).exp()).sum::<f64>().ln() }
    };
    let mut a: Vec<f64> = (0..n).map(|i| m.start[i].ln() + m.emission.probs[i * v + seq[0] as usize].ln()).collect();
    for &o in &seq[1..] {
        a = (0..n)
            .map(|j| {
                let terms: Vec<f64> = (0..n).map(|i| a[i] + m.trans[i * n + j].ln()).collect();
                lse(&terms) + m.emission.probs[j * v + o as usize].ln()
            })
            .collect();
    }
    lse(&a)
}

#[test]
fn long_sequences_are_stable() {
    let exec = Exec::cpu();
    let m = random_model(3, 4, 4242, false);
    let (seqs, _) = hmm::simulate(&m, &[100_000], 9);
    let ll = hmm::loglik(&m, &seqs, &exec).unwrap()[0];
    let reference = log_space_loglik(&m, seqs.get(0));
    assert!(ll.is_finite() && ll < -1e4);
    assert!(close(ll, reference, 1e-10), "{ll} vs {reference}");
    let v = hmm::viterbi(&m, &seqs, &exec).unwrap();
    assert!(v.log_prob[0].is_finite() && v.log_prob[0] <= ll);
    assert!(v.states.iter().all(|&s| s < 3));
    let p = hmm::posterior(&m, &seqs, &exec).unwrap();
    for row in p.probs.chunks(3) {
        let s: f64 = row.iter().sum();
        assert!((s - 1.0).abs() < 1e-12 && row.iter().all(|x| (0.0..=1.0 + 1e-12).contains(x)));
    }
    let config = HmmFitConfig::new(3, 4).max_iters(5).epsilon(0.0).seed(1).check().unwrap();
    let fit = hmm::fit(&seqs, &config, &exec).unwrap();
    assert!(fit.trace.iter().all(|l| l.is_finite()));
    for w in fit.trace.windows(2) {
        assert!(w[1] >= w[0] - 1e-9 * w[0].abs());
    }
}

#[test]
fn simulation_is_reproducible_and_follows_the_model() {
    let m = known_model();
    let lengths = vec![200; 500];
    let (a, sa) = hmm::simulate(&m, &lengths, 4);
    let (b, sb) = hmm::simulate(&m, &lengths, 4);
    let (c, _) = hmm::simulate(&m, &lengths, 5);
    assert_eq!((&a, &sa), (&b, &sb));
    assert_ne!(a, c);
    assert_eq!(a.len(), 500);
    assert_eq!(a.total(), 100_000);
    // First states follow start = (0.8, 0.2): 400 expected in state 0, sd ~ 9.
    let first0 = (0..500).filter(|&s| sa[a.offsets[s]] == 0).count();
    assert!((first0 as f64 - 400.0).abs() < 45.0, "{first0}");
    // Symbol 2 given state 1: 0.8.
    let (mut in1, mut sym2) = (0usize, 0usize);
    for (o, s) in a.symbols.iter().zip(&sa) {
        if *s == 1 {
            in1 += 1;
            sym2 += (*o == 2) as usize;
        }
    }
    assert!((sym2 as f64 / in1 as f64 - 0.8).abs() < 0.01);
}

#[test]
fn invalid_sequences_are_reported_with_their_index() {
    let m = known_model();
    let exec = Exec::cpu();
    let err = hmm::loglik(&m, &Sequences::from_vecs(&[vec![0u32, 1], vec![0, 3]]), &exec).unwrap_err();
    assert_eq!(err.to_string(), "sequence 2 has symbol 4 at position 2; symbols must be between 1 and 3");
    let err = hmm::viterbi(&m, &Sequences::from_vecs(&[vec![0u32], vec![]]), &exec).unwrap_err();
    assert!(err.to_string().starts_with("sequence 2 is empty"));
    let empty: [Vec<u32>; 0] = [];
    assert!(hmm::posterior(&m, &Sequences::from_vecs(&empty), &exec).is_err());
}

/// Everything a log-space brute force over all N^T paths gives (exact for
/// any probabilities, subnormal ones included): log P, the best path's log
/// probability, posteriors, and expected counts.
struct LogBrute {
    loglik: f64,
    best: f64,
    gamma: Vec<f64>,
    xi: Vec<f64>,
    emis: Vec<f64>,
}

fn log_brute(m: &HmmModel, seq: &[u32]) -> LogBrute {
    let (n, v, t_len) = (m.n_states, m.emission.n_symbols, seq.len());
    let paths = n.pow(t_len as u32);
    let mut logp = Vec::with_capacity(paths);
    for code in 0..paths {
        let path: Vec<usize> = (0..t_len).map(|t| (code / n.pow((t_len - 1 - t) as u32)) % n).collect();
        let mut l = m.start[path[0]].ln() + m.emission.probs[path[0] * v + seq[0] as usize].ln();
        for t in 1..t_len {
            l += m.trans[path[t - 1] * n + path[t]].ln() + m.emission.probs[path[t] * v + seq[t] as usize].ln();
        }
        logp.push((l, path));
    }
    let top = logp.iter().map(|(l, _)| *l).fold(f64::NEG_INFINITY, f64::max);
    let loglik = if top == f64::NEG_INFINITY { top } else { top + logp.iter().map(|(l, _)| (l - top).exp()).sum::<f64>().ln() };
    let mut b = LogBrute { loglik, best: top, gamma: vec![0.0; t_len * n], xi: vec![0.0; n * n], emis: vec![0.0; n * v] };
    if loglik > f64::NEG_INFINITY {
        for (l, path) in &logp {
            let w = (l - loglik).exp();
            for t in 0..t_len {
                b.gamma[t * n + path[t]] += w;
                b.emis[path[t] * v + seq[t] as usize] += w;
                if t > 0 {
                    b.xi[path[t - 1] * n + path[t]] += w;
                }
            }
        }
    }
    b
}

/// A row of probabilities drawn from sizes that leave the double range
/// when multiplied (1e-310 is subnormal), exact zeros, and ordinary ones;
/// the largest entry makes the row sum to 1.
fn extreme_row(rng: &mut KeyedStream, len: usize) -> Vec<f64> {
    const SIZES: [f64; 6] = [0.0, 1e-310, 1e-200, 1e-150, 1e-20, 0.25];
    let mut x: Vec<f64> = (0..len).map(|_| SIZES[rng.below(SIZES.len() as u64) as usize]).collect();
    let k = rng.below(len as u64) as usize;
    x[k] = 0.0;
    let rest: f64 = x.iter().sum();
    if rest >= 1.0 {
        x.iter_mut().for_each(|p| *p *= 0.5);
    }
    x[k] = 1.0 - x.iter().sum::<f64>();
    x
}

#[test]
fn tiny_and_subnormal_probabilities_match_a_log_space_brute_force() {
    let exec = Exec::cpu();
    let mut compared = 0;
    let mut tiny_answers = 0;
    for key in 0..60u64 {
        let mut rng = KeyedStream::new(31, key, 0);
        let (n, v) = (1 + (key % 3) as usize, 1 + ((key / 3) % 3) as usize);
        let start = extreme_row(&mut rng, n);
        let trans: Vec<f64> = (0..n).flat_map(|_| extreme_row(&mut rng, n)).collect();
        let emis: Vec<f64> = (0..n).flat_map(|_| extreme_row(&mut rng, v)).collect();
        let m = HmmModel::new(start, trans, emis, v).unwrap();
        let seqs_v: Vec<Vec<u32>> = (0..4).map(|s| random_seq(v, 1 + ((key + s) % 6) as usize, key * 7 + s)).collect();
        let seqs = Sequences::from_vecs(&seqs_v);
        let ll = hmm::loglik(&m, &seqs, &exec).unwrap();
        let vit = hmm::viterbi(&m, &seqs, &exec).unwrap();
        let post = hmm::posterior(&m, &seqs, &exec).unwrap();
        let mut all = (vec![0.0; n * n], vec![0.0; n * v], true);
        for (s, seq) in seqs_v.iter().enumerate() {
            let b = log_brute(&m, seq);
            let what = format!("key {key} N={n} V={v} seq {seq:?}: {m:?}");
            assert!(close(ll[s], b.loglik, 1e-12), "{what}: loglik {} vs {}", ll[s], b.loglik);
            assert!(close(vit.log_prob[s], b.best, 1e-12), "{what}: viterbi {} vs {}", vit.log_prob[s], b.best);
            assert_eq!(post.loglik[s], ll[s]);
            let g = &post.probs[seqs.offsets[s] * n..seqs.offsets[s + 1] * n];
            if b.loglik == f64::NEG_INFINITY {
                assert!(g.iter().all(|p| p.is_nan()), "{what}");
                all.2 = false;
                continue;
            }
            tiny_answers += (b.loglik < -700.0) as usize;
            for (x, y) in g.iter().zip(&b.gamma) {
                assert!((x - y).abs() < 1e-10, "{what}: posterior {x} vs {y}");
            }
            all.0.iter_mut().zip(&b.xi).for_each(|(a, x)| *a += x);
            all.1.iter_mut().zip(&b.emis).for_each(|(a, x)| *a += x);
            compared += 1;
        }
        if all.2 {
            // One Baum-Welch step: its counts are the brute force's.
            let config = HmmFitConfig::new(n, v).init(m.clone()).max_iters(1).epsilon(0.0).check().unwrap();
            let fit = hmm::fit(&seqs, &config, &exec).unwrap();
            for i in 0..n {
                let row = &all.0[i * n..(i + 1) * n];
                let s: f64 = row.iter().sum();
                if s > 1e-12 {
                    for j in 0..n {
                        assert!((fit.model.trans[i * n + j] - row[j] / s).abs() < 1e-9, "key {key}: trans {i} {j}: {} vs {}", fit.model.trans[i * n + j], row[j] / s);
                    }
                }
                let row: Vec<f64> = (0..v).map(|k| all.1[i * v + k]).collect();
                let s: f64 = row.iter().sum();
                if s > 1e-12 {
                    for k in 0..v {
                        assert!((fit.model.emission.probs[i * v + k] - row[k] / s).abs() < 1e-9, "key {key}: emis {i} {k}");
                    }
                }
            }
            assert!(fit.trace.iter().all(|l| !l.is_nan()));
        }
    }
    assert!(compared > 120 && tiny_answers > 10, "{compared} sequences compared, {tiny_answers} with log-likelihood below -700");
}

#[test]
fn the_issues_subnormal_case_is_exact() {
    // start (1e-20, 1 - 1e-20), trans I, emis ((1e-310, 1 - 1e-310), (0, 1)),
    // sequence (1): only state 1 emits symbol 1.
    let m = HmmModel::new(vec![1e-20, 1.0 - 1e-20], vec![1.0, 0.0, 0.0, 1.0], vec![1e-310, 1.0 - 1e-310, 0.0, 1.0], 2).unwrap();
    let want = m.start[0].ln() + m.emission.probs[0].ln();
    assert!((want - (-759.853)).abs() < 1e-3);
    let seqs = Sequences::from_vecs(&[vec![0u32], vec![1, 1, 0], vec![1, 1]]);
    let exec = Exec::cpu();
    let ll = hmm::loglik(&m, &seqs, &exec).unwrap();
    assert!(close(ll[0], want, 1e-14) && close(ll[1], want, 1e-14), "{ll:?} vs {want}");
    let p = hmm::posterior(&m, &seqs, &exec).unwrap();
    assert_eq!(&p.probs[..8], &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
    let v = hmm::viterbi(&m, &seqs, &exec).unwrap();
    assert!(close(v.log_prob[0], want, 1e-14));
    assert_eq!(&v.states[..4], &[0, 0, 0, 0]);
}

#[test]
fn a_state_whose_weight_decays_below_the_double_range_is_kept() {
    // Two coins that never switch: after 400 tosses favouring the first,
    // the second's weight is 9^-400 = 1e-382; 800 tosses favouring the
    // second follow. The scaled pass used to lose it (-1885 for -1006).
    let m = HmmModel::new(vec![0.5, 0.5], vec![1.0, 0.0, 0.0, 1.0], vec![0.9, 0.1, 0.1, 0.9], 2).unwrap();
    let seq: Vec<u32> = (0..1200).map(|t| (t >= 400) as u32).collect();
    let want = log_space_loglik(&m, &seq);
    assert!((want - (0.5f64.ln() + 400.0 * 0.1f64.ln() + 800.0 * 0.9f64.ln())).abs() < 1e-9);
    let seqs = Sequences::from_vecs(&[seq]);
    let exec = Exec::cpu();
    assert!(close(hmm::loglik(&m, &seqs, &exec).unwrap()[0], want, 1e-12));
    let p = hmm::posterior(&m, &seqs, &exec).unwrap();
    assert!(p.probs.chunks(2).all(|g| (g[1] - 1.0).abs() < 1e-12), "the second coin throughout");
    let v = hmm::viterbi(&m, &seqs, &exec).unwrap();
    assert!(v.states.iter().all(|&s| s == 1));
    // Baum-Welch from this model stays finite and monotone.
    let config = HmmFitConfig::new(2, 2).init(m).max_iters(5).epsilon(0.0).check().unwrap();
    let fit = hmm::fit(&seqs, &config, &exec).unwrap();
    assert!(close(fit.trace[0], want, 1e-12));
    for w in fit.trace.windows(2) {
        assert!(w[1].is_finite() && w[1] >= w[0] - 1e-9 * w[0].abs(), "{:?}", fit.trace);
    }
}

#[test]
fn an_unreachable_state_gives_no_nan() {
    // State 2 cannot be reached, but alone emits symbol 2 with certainty:
    // its backward value doubles every step (2^2000 overflows).
    let m = HmmModel::new(vec![1.0, 0.0], vec![1.0, 0.0, 0.0, 1.0], vec![0.5, 0.5, 0.0, 1.0], 2).unwrap();
    let seq: Vec<u32> = (0..2001).map(|t| (t > 0) as u32).collect();
    let seqs = Sequences::from_vecs(&[seq]);
    let exec = Exec::cpu();
    let p = hmm::posterior(&m, &seqs, &exec).unwrap();
    assert!(p.probs.chunks(2).all(|g| g == [1.0, 0.0]));
    let config = HmmFitConfig::new(2, 2).init(m).max_iters(2).epsilon(0.0).check().unwrap();
    let fit = hmm::fit(&seqs, &config, &exec).unwrap();
    assert!(fit.model.trans.iter().chain(&fit.model.emission.probs).all(|x| x.is_finite()), "{:?}", fit.model);
    assert_eq!(fit.model.trans, vec![1.0, 0.0, 0.0, 1.0]);
}

#[test]
fn a_monitor_cancelled_from_another_thread_stops_one_long_sequence() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let m = random_model(100, 8, 4343, false);
    let seqs = Sequences::from_vecs(&[random_seq(8, 400_000, 5)]);
    type Pass<'a> = Box<dyn Fn(&Exec) -> bulkem_core::Result<()> + 'a>;
    let config = HmmFitConfig::new(100, 8).max_iters(50).epsilon(0.0).check().unwrap();
    let passes: Vec<(&str, Pass)> = vec![
        ("loglik", Box::new(|e| hmm::loglik(&m, &seqs, e).map(|_| ()))),
        ("viterbi", Box::new(|e| hmm::viterbi(&m, &seqs, e).map(|_| ()))),
        ("posterior", Box::new(|e| hmm::posterior(&m, &seqs, e).map(|_| ()))),
        ("fit", Box::new(|e| hmm::fit(&seqs, &config, e).map(|_| ()))),
    ];
    for (name, pass) in passes {
        let monitor = Arc::new(bulkem_core::exec::Monitor::new());
        let exec = Exec::cpu().threads(2).with_monitor(monitor.clone());
        let cancelled_at = std::thread::scope(|scope| {
            let canceller = scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(150));
                monitor.cancel();
                Instant::now()
            });
            let out = pass(&exec);
            let at = canceller.join().unwrap();
            assert_eq!(out, Err(bulkem_core::Error::Interrupted), "{name} was not interrupted");
            at
        });
        let late = cancelled_at.elapsed();
        assert!(late < Duration::from_millis(500), "{name} stopped {late:?} after the cancel");
    }
}

#[test]
fn memory_the_machine_lacks_is_refused_before_allocating() {
    use bulkem_core::ErrorKind;
    let exec = Exec::cpu();
    let seqs = Sequences::from_vecs(&[vec![0u32, 1, 2]]);
    let t0 = std::time::Instant::now();
    let err = hmm::fit(&seqs, &HmmFitConfig::new(100_000, 3).check().unwrap(), &exec).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Memory, "{err}");
    assert!(err.to_string().contains("100000 x 100000 transition matrix of `n.states`"), "{err}");
    let err = hmm::fit(&seqs, &HmmFitConfig::new(2, 1_000_000_000).check().unwrap(), &exec).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Memory, "{err}");
    assert!(err.to_string().contains("emission matrix of `n.symbols`"), "{err}");
    let m = known_model();
    let err = hmm::simulate_with(&m, &vec![100_000; 100_000], 1, &exec).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Memory, "{err}");
    let err = hmm::simulate_with(&m, &[usize::MAX / 2, usize::MAX / 2], 1, &exec).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Memory, "{err}");
    assert!(t0.elapsed().as_secs_f64() < 1.0);
    // The estimates of the issue's other sizes (the machine may have them).
    let post = hmm::HmmJob::new(hmm::Pass::Posterior, 3000, 8, [3_000_000usize].into_iter(), 1);
    assert!(post.bytes() >= 72_000_000_000);
    let vit = hmm::HmmJob::new(hmm::Pass::Viterbi, 3000, 8, [3_000_000usize].into_iter(), 1);
    assert!(vit.bytes() < post.bytes(), "Viterbi back-pointers are 2 bytes and segmented when short of memory");
}

#[test]
fn kept_models_keep_their_tables_and_their_results() {
    for (n, v) in [(3, 4), (40, 7)] {
        let model = random_model(n, v, 70 + n as u64, true);
        let lens: Vec<usize> = (0..20).map(|k| 1 + k % 9).collect();
        let seqs = hmm::simulate(&model, &lens, 5).0;
        check_kept_models(&model, &nudged(&model, 0.5), &seqs, &Exec::cpu(), &format!("N = {n}"), |e| e.probs.clone());
        // The same chain with Gaussian emissions.
        let g = hmm::Gaussian::new((0..n).map(|k| k as f64).collect(), vec![0.8; n]).unwrap();
        let model = HmmModel::with_emission(model.start.clone(), model.trans.clone(), g).unwrap();
        let seqs = hmm::simulate(&model, &lens, 6).0;
        check_kept_models(&model, &nudged(&model, 0.5), &seqs, &Exec::cpu(), &format!("Gaussian, N = {n}"), |g| [g.mean.clone(), g.sd.clone()].concat());
    }
}
