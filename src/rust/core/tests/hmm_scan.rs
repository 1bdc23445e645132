//! The parallel-in-time scan (hmm::scan) on the CPU against brute force on
//! short sequences and against the sequential recursions on long ones, with
//! chunks of every length; its uncertain and impossible cases.

mod common;
use common::path_logp;

use bulkem_core::exec::Exec;
use bulkem_core::hmm::scan::{self, Chunks};
use bulkem_core::hmm::{self, Gaussian, HmmModel, LogTables, Sequences, Tables, NO_STATE};
use bulkem_core::rng::KeyedStream;

fn uniform(rng: &mut KeyedStream) -> f64 {
    ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

fn simplex(rng: &mut KeyedStream, len: usize) -> Vec<f64> {
    let x: Vec<f64> = (0..len).map(|_| uniform(rng) + 0.01).collect();
    let s: f64 = x.iter().sum();
    x.iter().map(|p| p / s).collect()
}

/// A dense random model (the scan's linear passes need transitions of at
/// least 2^-300); emissions may have zeros.
fn random_model(n: usize, v: usize, key: u64) -> HmmModel {
    let mut rng = KeyedStream::new(5, key, 0);
    let start = simplex(&mut rng, n);
    let trans = (0..n).flat_map(|_| simplex(&mut rng, n)).collect();
    let mut emis: Vec<f64> = (0..n).flat_map(|_| simplex(&mut rng, v)).collect();
    if v > 2 {
        // A symbol state 0 never emits.
        emis[v - 1] = 0.0;
        let s: f64 = emis[..v].iter().sum();
        emis[..v].iter_mut().for_each(|p| *p /= s);
    }
    HmmModel::new(start, trans, emis, v).unwrap()
}

fn random_seq(v: usize, t: usize, key: u64) -> Vec<u32> {
    let mut rng = KeyedStream::new(8, key, 1);
    (0..t).map(|_| rng.below(v as u64) as u32).collect()
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    a == b || (a - b).abs() <= tol * b.abs().max(1.0)
}

/// Brute force: log P(seq), posteriors, best log-probability and path.
fn brute(m: &HmmModel, seq: &[u32]) -> (f64, Vec<f64>, f64, Vec<u32>) {
    let (n, t_len) = (m.n_states, seq.len());
    let mut all = Vec::new();
    for code in 0..n.pow(t_len as u32) {
        let path: Vec<u32> = (0..t_len).map(|t| ((code / n.pow(t as u32)) % n) as u32).collect();
        all.push((path_logp(m, seq, &path).exp(), path));
    }
    let total: f64 = all.iter().map(|(p, _)| p).sum();
    let mut gamma = vec![0.0; t_len * n];
    let (mut best, mut best_path) = (-1.0, vec![]);
    for (p, path) in &all {
        for t in 0..t_len {
            gamma[t * n + path[t] as usize] += p / total;
        }
        if *p > best {
            best = *p;
            best_path = path.clone();
        }
    }
    (total.ln(), gamma, best.ln(), best_path)
}

/// Scan results of one sequence with chunks `ch`.
fn scanned(m: &HmmModel, seq: &[u32], ch: &Chunks, exec: &Exec) -> (f64, Vec<f64>, f64, f64, Vec<u32>) {
    let (tab, ltab) = (Tables::new(m).unwrap(), LogTables::new(m).unwrap());
    let ll = scan::loglik(&tab, seq, ch, exec).unwrap().expect("certain");
    let mut rows = vec![0.0; seq.len() * m.n_states];
    let ll2 = scan::posterior(&tab, seq, ch, &mut rows, exec).unwrap().expect("certain");
    let mut path = vec![0u32; seq.len()];
    let lp = scan::viterbi(&ltab, seq, ch, &mut path, exec).unwrap();
    (ll, rows, ll2, lp, path)
}

#[test]
fn short_sequences_equal_brute_force_with_any_chunks() {
    let exec = Exec::cpu();
    let (mut key, mut impossible) = (0, 0);
    for n in 1..=3usize {
        for t_len in 1..=7usize {
            for len in [1usize, 2, 3, 32] {
                key += 1;
                let m = random_model(n, 4, key);
                let seq = random_seq(4, t_len, key);
                let (ll, gamma, best, best_path) = brute(&m, &seq);
                let ch = Chunks::with_len(t_len, len);
                let (sll, rows, sll2, lp, path) = scanned(&m, &seq, &ch, &exec);
                assert!(close(sll, ll, 1e-12) && close(sll2, ll, 1e-12), "n {n} T {t_len} len {len}: {sll} {sll2} vs {ll}");
                if ll == f64::NEG_INFINITY {
                    impossible += 1;
                    assert!(rows.iter().all(|p| p.is_nan()) && path.iter().all(|&s| s == NO_STATE) && lp == ll);
                    continue;
                }
                for (a, b) in rows.iter().zip(&gamma) {
                    assert!((a - b).abs() < 1e-12, "n {n} T {t_len} len {len}: posterior {a} vs {b}");
                }
                assert!(close(lp, best, 1e-12), "n {n} T {t_len} len {len}: best {lp} vs {best}");
                assert!(close(path_logp(&m, &seq, &path), best, 1e-12), "n {n} T {t_len} len {len}: path {path:?} vs {best_path:?}");
            }
        }
    }
    assert!(impossible > 0 && impossible < key / 2, "{impossible} impossible of {key}");
}

#[test]
fn long_sequences_equal_the_sequential_recursions() {
    let exec = Exec::cpu();
    for (n, t_len, key) in [(2usize, 5_000usize, 1u64), (8, 20_000, 2), (5, 4_097, 3), (16, 3_000, 4)] {
        let m = random_model(n, 6, key);
        let seqs = Sequences::from_vecs(&[random_seq(6, t_len, key)]);
        let seq = seqs.get(0);
        let ll = hmm::loglik(&m, &seqs, &exec).unwrap()[0];
        let post = hmm::posterior(&m, &seqs, &exec).unwrap();
        let vit = hmm::viterbi(&m, &seqs, &exec).unwrap();
        for ch in [Chunks::of(t_len, n), Chunks::with_len(t_len, 7), Chunks::with_len(t_len, t_len)] {
            let (sll, rows, sll2, lp, path) = scanned(&m, seq, &ch, &exec);
            assert!(close(sll, ll, 1e-10) && close(sll2, ll, 1e-10), "n {n} T {t_len} {ch:?}: {sll} {sll2} vs {ll}");
            let worst = rows.iter().zip(&post.probs).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(worst < 1e-10, "n {n} T {t_len} {ch:?}: posteriors differ by {worst}");
            assert!(close(lp, vit.log_prob[0], 1e-10), "n {n} T {t_len} {ch:?}: {lp} vs {}", vit.log_prob[0]);
            assert!(close(path_logp(&m, seq, &path), lp, 1e-10), "n {n} T {t_len} {ch:?}: the path's own log-probability");
        }
    }
}

#[test]
fn impossible_and_uncertain_sequences() {
    let exec = Exec::cpu();
    let m = random_model(3, 4, 11);
    // Symbol 3 is impossible from state 0 only: make it impossible from all.
    let mut probs = m.emission.probs.clone();
    for i in 0..3 {
        probs[i * 4 + 3] = 0.0;
        let s: f64 = probs[i * 4..i * 4 + 4].iter().sum();
        probs[i * 4..i * 4 + 4].iter_mut().for_each(|p| *p /= s);
    }
    let m0 = HmmModel::new(m.start.clone(), m.trans.clone(), probs, 4).unwrap();
    let mut seq = random_seq(3, 500, 2);
    seq[321] = 3;
    let ch = Chunks::with_len(seq.len(), 10);
    let (tab, ltab) = (Tables::new(&m0).unwrap(), LogTables::new(&m0).unwrap());
    assert_eq!(scan::loglik(&tab, &seq, &ch, &exec).unwrap(), Some(f64::NEG_INFINITY));
    let mut rows = vec![0.0; seq.len() * 3];
    assert_eq!(scan::posterior(&tab, &seq, &ch, &mut rows, &exec).unwrap(), Some(f64::NEG_INFINITY));
    assert!(rows.iter().all(|p| p.is_nan()));
    let mut path = vec![0u32; seq.len()];
    assert_eq!(scan::viterbi(&ltab, &seq, &ch, &mut path, &exec).unwrap(), f64::NEG_INFINITY);
    assert!(path.iter().all(|&s| s == NO_STATE));
    // Emissions of 1e-200 at every step: a step's largest value falls below
    // the scan's floor, so it declines (the sequential passes then run).
    let tiny = HmmModel::new(vec![0.5, 0.5], vec![0.5; 4], vec![1e-200, 1.0 - 1e-200, 1e-200, 1.0 - 1e-200], 2).unwrap();
    let seq = vec![0u32; 100];
    let tab = Tables::new(&tiny).unwrap();
    assert_eq!(scan::loglik(&tab, &seq, &Chunks::with_len(100, 10), &exec).unwrap(), None);
    assert!(!scan::usable(&[1.0, 0.0, 0.5, 0.5]));
}

#[test]
fn gaussian_emissions_equal_the_sequential_recursions() {
    let exec = Exec::cpu();
    let n = 4;
    let mut rng = KeyedStream::new(3, 3, 3);
    let start = simplex(&mut rng, n);
    let trans: Vec<f64> = (0..n).flat_map(|_| simplex(&mut rng, n)).collect();
    let g = Gaussian::new(vec![-3.0, 0.0, 2.0, 8.0], vec![1.0, 0.5, 2.0, 0.1]).unwrap();
    let m = HmmModel::with_emission(start, trans, g).unwrap();
    let (seqs, _) = hmm::simulate(&m, &[6_000], 17);
    let seq = seqs.get(0);
    let ll = hmm::loglik(&m, &seqs, &exec).unwrap()[0];
    let post = hmm::posterior(&m, &seqs, &exec).unwrap();
    let vit = hmm::viterbi(&m, &seqs, &exec).unwrap();
    let ch = Chunks::with_len(seq.len(), 50);
    let tab = Tables::new(&m).unwrap();
    assert!(close(scan::loglik(&tab, seq, &ch, &exec).unwrap().unwrap(), ll, 1e-10));
    let mut rows = vec![0.0; seq.len() * n];
    assert!(close(scan::posterior(&tab, seq, &ch, &mut rows, &exec).unwrap().unwrap(), ll, 1e-10));
    let worst = rows.iter().zip(&post.probs).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-10, "posteriors differ by {worst}");
    let mut path = vec![0u32; seq.len()];
    let lp = scan::viterbi(&LogTables::new(&m).unwrap(), seq, &ch, &mut path, &exec).unwrap();
    assert!(close(lp, vit.log_prob[0], 1e-10), "{lp} vs {}", vit.log_prob[0]);
}

#[test]
fn the_routines_take_the_scan_when_threads_outnumber_sequences() {
    // 32 threads, one sequence of 5,000 steps, 4 states: the scan's N-fold
    // work is outrun (hmm::scan::worthwhile), so the routines give its bits.
    let exec = Exec::cpu().threads(32);
    let m = random_model(4, 5, 21);
    let seqs = Sequences::from_vecs(&[random_seq(5, 5_000, 21)]);
    let seq = seqs.get(0);
    let ch = Chunks::of(seq.len(), 4);
    let (sll, rows, _, lp, path) = scanned(&m, seq, &ch, &exec);
    assert_eq!(hmm::loglik(&m, &seqs, &exec).unwrap()[0].to_bits(), sll.to_bits());
    assert_eq!(hmm::posterior(&m, &seqs, &exec).unwrap().probs, rows);
    let v = hmm::viterbi(&m, &seqs, &exec).unwrap();
    assert_eq!((v.states, v.log_prob[0].to_bits()), (path, lp.to_bits()));
    // Two threads: the sequential recursions (same values to rounding).
    let two = hmm::loglik(&m, &seqs, &Exec::cpu().threads(2)).unwrap()[0];
    assert!(close(two, sll, 1e-12));
}

/// Largest relative difference between two models' parameters.
fn model_gap(a: &HmmModel, b: &HmmModel) -> f64 {
    let pairs = a.start.iter().zip(&b.start).chain(a.trans.iter().zip(&b.trans)).chain(a.emission.probs.iter().zip(&b.emission.probs));
    pairs.map(|(x, y)| (x - y).abs() / y.abs().max(1e-300)).fold(0.0, f64::max)
}

#[test]
fn baum_welch_counts_give_the_sequential_m_step() {
    let exec = Exec::cpu();
    let fit = Default::default();
    for (n, t_len, key) in [(1usize, 6usize, 1u64), (2, 7, 2), (3, 40, 3), (8, 5_000, 4)] {
        let m = random_model(n, 5, 30 + key);
        let seqs = Sequences::from_vecs(&[random_seq(5, t_len, key)]);
        let (next, ll) = hmm::baum_welch_step(&m, &seqs, &fit, &exec).unwrap();
        let tab = Tables::new(&m).unwrap();
        for ch in [Chunks::with_len(t_len, 1), Chunks::with_len(t_len, 3), Chunks::of(t_len, n)] {
            let (counts, sll) = scan::counts(&tab, seqs.get(0), &ch, &exec).unwrap().expect("certain");
            assert!(close(sll, ll, 1e-10), "n {n} T {t_len} {ch:?}: {sll} vs {ll}");
            let (snext, _) = hmm::m_step(&m, &counts, &fit);
            let gap = model_gap(&snext, &next);
            assert!(gap < 1e-9, "n {n} T {t_len} {ch:?}: M-step differs by {gap}");
        }
    }
    // With 32 threads the routine itself takes the scan: the same model.
    let m = random_model(4, 5, 40);
    let seqs = Sequences::from_vecs(&[random_seq(5, 6_000, 40)]);
    let (a, la) = hmm::baum_welch_step(&m, &seqs, &fit, &exec).unwrap();
    let (b, lb) = hmm::baum_welch_step(&m, &seqs, &fit, &Exec::cpu().threads(32)).unwrap();
    assert!(close(lb, la, 1e-10) && model_gap(&b, &a) < 1e-9);
}

#[test]
fn a_first_step_below_the_double_range_is_exact_or_declined() {
    let exec = Exec::cpu();
    // pi_0 e_0(o_0) = 1e-400 underflows as a product; its logs do not.
    let m = HmmModel::new(vec![1e-200, 1.0 - 1e-200], vec![0.5; 4], vec![1e-200, 1.0 - 1e-200, 0.0, 1.0], 2).unwrap();
    // Symbol 0 only first (later it would be a step of 1e-200 at most,
    // below the scan's floor).
    let mut seq = vec![1u32; 5_000];
    seq[0] = 0;
    let seqs = Sequences::from_vecs(&[seq]);
    let want = hmm::loglik(&m, &seqs, &exec).unwrap()[0];
    assert!(want.is_finite());
    let got = scan::loglik(&Tables::new(&m).unwrap(), seqs.get(0), &Chunks::of(5_000, 2), &exec).unwrap();
    assert!(close(got.expect("certain"), want, 1e-12), "{got:?} vs {want}");
    // A density whose only possible first state's value underflows against
    // the other's (means 100 apart, start (1, 0), x_0 = 100): the scan
    // declines, and the routines give the sequential result.
    let g = Gaussian::new(vec![0.0, 100.0], vec![1.0, 1.0]).unwrap();
    let m = HmmModel::with_emission(vec![1.0, 0.0], vec![0.5; 4], g).unwrap();
    let (mut seqs, _) = hmm::simulate(&m, &[6_000], 9);
    seqs.symbols[0] = 100.0;
    assert_eq!(scan::loglik(&Tables::new(&m).unwrap(), seqs.get(0), &Chunks::of(6_000, 2), &exec).unwrap(), None);
    let want = hmm::loglik(&m, &seqs, &exec).unwrap()[0];
    assert!(want.is_finite());
    assert_eq!(hmm::loglik(&m, &seqs, &Exec::cpu().threads(32)).unwrap()[0], want);
    let post = hmm::posterior(&m, &seqs, &Exec::cpu().threads(32)).unwrap();
    assert!(post.probs.iter().all(|p| p.is_finite()));
}
