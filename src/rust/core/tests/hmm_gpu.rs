//! The CUDA backend of the HMM routines against the CPU reference: log-
//! likelihoods to 1e-10 relative, identical Viterbi paths, posteriors to
//! 1e-10, Baum-Welch parameters to 1e-8. Skipped (with a note) where no
//! device is usable.

mod common;
use common::{check_kept_models, check_posterior_layout, cuda, gpu_or_skip, nudged, path_logp};

use bulkem_core::em::FitStatus;
use bulkem_core::exec::{choose_backend, Backend, BackendRequest, Exec};
use bulkem_core::hmm::{self, HmmFitConfig, HmmModel, Sequences};
use bulkem_core::rng::KeyedStream;
use bulkem_core::tolerances::{GPU_CPU_LOGLIK_REL, GPU_CPU_PARAM_REL};

fn rel(a: f64, b: f64) -> f64 {
    if a == b { 0.0 } else { (a - b).abs() / b.abs().max(1e-300) }
}

/// A random model; with `zeros`, some transitions and emissions are 0.
fn random_model(n: usize, v: usize, key: u64, zeros: bool) -> HmmModel {
    let mut rng = KeyedStream::new(5, key, 0);
    let mut u = || ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let mut rows = |r: usize, c: usize, zeros: bool| -> Vec<f64> {
        (0..r)
            .flat_map(|_| {
                let mut x: Vec<f64> = (0..c).map(|_| u()).collect();
                if zeros && c > 1 {
                    x[(u() * c as f64) as usize % c] = 0.0;
                }
                let s: f64 = x.iter().sum();
                x.into_iter().map(move |p| p / s).collect::<Vec<_>>()
            })
            .collect()
    };
    let start = rows(1, n, false);
    let trans = rows(n, n, zeros);
    let emis = rows(n, v, zeros);
    HmmModel::new(start, trans, emis, v).unwrap()
}

fn lengths(count: usize, max: usize, key: u64) -> Vec<usize> {
    let mut rng = KeyedStream::new(6, key, 0);
    (0..count).map(|_| 1 + rng.below(max as u64) as usize).collect()
}

fn compare_passes(model: &HmmModel, seqs: &Sequences, what: &str) {
    let (cpu, gpu) = (Exec::cpu(), cuda());
    let a = hmm::loglik(model, seqs, &cpu).unwrap();
    let b = hmm::loglik(model, seqs, &gpu).unwrap();
    for (s, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: loglik of sequence {s}: gpu {y} cpu {x}");
    }
    let va = hmm::viterbi(model, seqs, &cpu).unwrap();
    let vb = hmm::viterbi(model, seqs, &gpu).unwrap();
    assert!(va.states == vb.states, "{what}: Viterbi paths differ");
    // The paths as they crossed the bus (1 or 2 bytes a state where N
    // allows), which R's glue widens: the same states and log-probabilities.
    let (paths, logp) = hmm::viterbi_paths(model, seqs, &gpu).unwrap();
    assert_eq!((paths.to_vec(), logp), (vb.states.clone(), vb.log_prob.clone()), "{what}: Viterbi paths as sent");
    // As R's glue takes them: one 1-based vector per sequence.
    let mut vecs: Vec<Vec<i32>> = seqs.offsets.windows(2).map(|w| vec![0; w[1] - w[0]]).collect();
    let mut outs: Vec<&mut [i32]> = vecs.iter_mut().map(|x| &mut x[..]).collect();
    assert_eq!(hmm::viterbi_into(model, seqs, &gpu, &mut outs, -1).unwrap(), vb.log_prob, "{what}: Viterbi log-probabilities with the layout");
    let want: Vec<i32> = vb.states.iter().map(|&k| if k == hmm::NO_STATE { -1 } else { k as i32 + 1 }).collect();
    assert!(vecs.concat() == want, "{what}: Viterbi paths laid out");
    for (x, y) in va.log_prob.iter().zip(&vb.log_prob) {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: Viterbi log-prob gpu {y} cpu {x}");
    }
    let pa = hmm::posterior(model, seqs, &cpu).unwrap();
    let pb = hmm::posterior(model, seqs, &gpu).unwrap();
    for (x, y) in pa.probs.iter().zip(&pb.probs) {
        assert!((x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-10, "{what}: posterior gpu {y} cpu {x}");
    }
    // As R's glue takes them: the same values, one matrix per sequence.
    check_posterior_layout(model, seqs, &gpu, &pb, what);
}

#[test]
fn passes_match_the_cpu() {
    if !gpu_or_skip() {
        return;
    }
    // N <= 8 (a thread per sequence for every pass), N <= 32 (a
    // warp per sequence), N above a warp (a block per sequence, tables in
    // shared memory), N = 200 (transitions in global memory: the batched
    // kernels), and N = 128 with 40 sequences (a block per sequence), with
    // 300 (more than one wave of blocks: the batched forward-backward
    // kernels) and with 450 (more than three: batched Viterbi too).
    let cases = [(1usize, 3usize, false, 300usize), (2, 4, true, 300), (5, 7, true, 300), (8, 5, false, 300), (9, 4, true, 300), (32, 16, false, 300), (33, 16, false, 300), (64, 8, true, 300), (200, 20, false, 300), (128, 10, true, 40), (128, 10, false, 300), (128, 6, true, 450)];
    for (key, &(n, v, zeros, count)) in cases.iter().enumerate() {
        let model = random_model(n, v, key as u64, zeros);
        let (seqs, _) = hmm::simulate(&model, &lengths(count, 120, key as u64), key as u64);
        compare_passes(&model, &seqs, &format!("N={n} V={v} M={count}"));
    }
}

#[test]
fn impossible_sequences_agree() {
    if !gpu_or_skip() {
        return;
    }
    let m = HmmModel::new(vec![1.0, 0.0], vec![1.0, 0.0, 0.0, 1.0], vec![1.0, 0.0, 0.0, 1.0], 2).unwrap();
    let seqs = Sequences::from_vecs(&[vec![0u32, 0, 1], vec![0, 0], vec![1]]);
    compare_passes(&m, &seqs, "impossible");
    assert_eq!(hmm::loglik(&m, &seqs, &cuda()).unwrap(), vec![f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY]);
}

#[test]
fn impossible_sequences_agree_with_many_states() {
    if !gpu_or_skip() {
        return;
    }
    // N = 200 runs the batched kernels, N = 24 the warp kernels (a group of
    // eight sequences, half of them past the last): every state emits
    // symbol 1 only and stays put, so any sequence containing symbol 2 is
    // impossible.
    for n in [200usize, 24] {
        let mut start = vec![0.0; n];
        start[0] = 1.0;
        let trans: Vec<f64> = (0..n * n).map(|k| if k / n == k % n { 1.0 } else { 0.0 }).collect();
        let emis: Vec<f64> = (0..n).flat_map(|_| [1.0, 0.0]).collect();
        let m = HmmModel::new(start, trans, emis, 2).unwrap();
        let seqs = Sequences::from_vecs(&[vec![0u32, 0, 1], vec![0; 40], vec![1], vec![0, 1, 0, 0, 0]]);
        compare_passes(&m, &seqs, &format!("impossible, N={n}"));
        let ll = hmm::loglik(&m, &seqs, &cuda()).unwrap();
        assert_eq!(ll, vec![f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY, f64::NEG_INFINITY], "N={n}");
    }
}

#[test]
fn long_sequences_agree() {
    if !gpu_or_skip() {
        return;
    }
    let model = random_model(8, 6, 40, false);
    // 200 sequences (more than the multiprocessors) keep the sequential
    // kernels; the three long ones alone run parallel in time.
    let mut lens = vec![100_000, 10_000, 3];
    lens.extend(lengths(197, 50, 41));
    let (seqs, _) = hmm::simulate(&model, &lens, 4);
    compare_passes(&model, &seqs, "long");
    let (seqs, _) = hmm::simulate(&model, &[100_000, 10_000, 3], 4);
    compare_scan(&model, &seqs, None, "long, parallel in time");
}

/// The scan's passes (chunks of `len` steps, None: its own) against the
/// CPU's sequential ones: log-likelihoods to 1e-10 relative, posteriors to
/// 1e-10, Viterbi log-probabilities to 1e-10 relative and each path's own
/// log-probability equal to the reported one (a path may differ from the
/// CPU's only between paths whose log-probabilities agree to rounding).
fn compare_scan(model: &HmmModel, seqs: &Sequences, len: hmm::gpu::ChunkLen, what: &str) {
    let (cpu, gpu) = (Exec::cpu(), cuda());
    let a = hmm::loglik(model, seqs, &cpu).unwrap();
    let b = hmm::gpu::scan_loglik(model, seqs, len, &gpu).unwrap();
    for (s, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: loglik of sequence {s}: scan {y} cpu {x}");
    }
    let pa = hmm::posterior(model, seqs, &cpu).unwrap();
    let (probs, ll) = hmm::gpu::scan_posterior(model, seqs, len, &gpu).unwrap();
    for (x, y) in a.iter().zip(&ll) {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: posterior loglik scan {y} cpu {x}");
    }
    for (x, y) in pa.probs.iter().zip(&probs) {
        assert!((x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-10, "{what}: posterior scan {y} cpu {x}");
    }
    let va = hmm::viterbi(model, seqs, &cpu).unwrap();
    let (paths, logp) = hmm::gpu::scan_viterbi(model, seqs, len, &gpu).unwrap();
    for s in 0..seqs.len() {
        let (x, y) = (va.log_prob[s], logp[s]);
        assert!(rel(y, x) <= GPU_CPU_LOGLIK_REL, "{what}: Viterbi log-prob of sequence {s}: scan {y} cpu {x}");
        let path = &paths[seqs.offsets[s]..seqs.offsets[s + 1]];
        if x == f64::NEG_INFINITY {
            assert!(path.iter().all(|&p| p == hmm::NO_STATE), "{what}: sequence {s} is impossible");
        } else {
            let own = path_logp(model, seqs.get(s), path);
            assert!(rel(own, x) <= GPU_CPU_LOGLIK_REL, "{what}: sequence {s}'s path has log-prob {own}, the best is {x}");
        }
    }
    // Baum-Welch: the scan's counts give the CPU's M-step.
    let fit = Default::default();
    let (next, ll) = hmm::baum_welch_step(model, seqs, &fit, &cpu).unwrap();
    let (counts, sll, _) = hmm::gpu::scan_e_step(model, seqs, len, &gpu).unwrap();
    assert!(rel(sll, ll) <= GPU_CPU_LOGLIK_REL, "{what}: E-step loglik scan {sll} cpu {ll}");
    compare_models(&next, &hmm::m_step(model, &counts, &fit).0, &format!("{what}: M-step"));
}

#[test]
fn scan_matches_the_cpu_with_any_chunks() {
    if !gpu_or_skip() {
        return;
    }
    for (key, &(n, v)) in [(1usize, 3usize), (2, 4), (3, 5), (8, 6), (32, 16)].iter().enumerate() {
        let model = random_model(n, v, 60 + key as u64, false);
        let (seqs, _) = hmm::simulate(&model, &[1, 2, 3, 17, 400, 2_500], key as u64);
        for len in [Some(1), Some(2), Some(3), Some(64), None] {
            compare_scan(&model, &seqs, len, &format!("scan N={n} V={v} chunks {len:?}"));
        }
    }
}

#[test]
fn scan_handles_impossible_and_uncertain_sequences() {
    if !gpu_or_skip() {
        return;
    }
    // Symbol 2 is never emitted: sequences holding it are impossible.
    let m = HmmModel::new(vec![0.3, 0.7], vec![0.6, 0.4, 0.2, 0.8], vec![0.5, 0.5, 0.0, 0.1, 0.9, 0.0], 3).unwrap();
    let mut bad = vec![0u32; 5_000];
    bad[3_210] = 2;
    let seqs = Sequences::from_vecs(&[bad, vec![1u32; 4_999], vec![2u32]]);
    compare_scan(&m, &seqs, Some(16), "impossible");
    // Emissions of 1e-200: every step leaves the scan's floor, so each
    // sequence comes back uncertain and the CPU computes it.
    let tiny = HmmModel::new(vec![0.5, 0.5], vec![0.5; 4], vec![1e-200, 1.0 - 1e-200, 1e-200, 1.0 - 1e-200], 2).unwrap();
    let seqs = Sequences::from_vecs(&[vec![0u32; 5_000], vec![1u32, 0, 1]]);
    compare_scan(&tiny, &seqs, Some(16), "uncertain");
}

#[test]
fn scan_takes_the_first_step_in_logs() {
    if !gpu_or_skip() {
        return;
    }
    // pi_0 e_0(o_0) = 1e-400 underflows as a product; its logs do not.
    let m = HmmModel::new(vec![1e-200, 1.0 - 1e-200], vec![0.5; 4], vec![1e-200, 1.0 - 1e-200, 0.0, 1.0], 2).unwrap();
    let (mut seqs, _) = hmm::simulate(&m, &[5_000, 4_500], 50);
    seqs.symbols[0] = 0;
    compare_scan(&m, &seqs, None, "first step below the double range");
}

#[test]
fn one_long_sequence_runs_parallel_in_time() {
    if !gpu_or_skip() {
        return;
    }
    let model = random_model(8, 16, 77, false);
    let (seqs, _) = hmm::simulate(&model, &[262_144], 5);
    compare_scan(&model, &seqs, None, "one long sequence");
    // The routines take the scan by themselves: the same bits.
    let gpu = cuda();
    assert_eq!(hmm::loglik(&model, &seqs, &gpu).unwrap(), hmm::gpu::scan_loglik(&model, &seqs, None, &gpu).unwrap());
    assert_eq!(hmm::viterbi(&model, &seqs, &gpu).unwrap().states, hmm::gpu::scan_viterbi(&model, &seqs, None, &gpu).unwrap().0);
    // A fit runs its E-steps by the scan: the CPU's trace and model.
    let config = HmmFitConfig::new(8, 16).init(random_model(8, 16, 78, false)).max_iters(3).epsilon(0.0).check().unwrap();
    let a = hmm::fit(&seqs, &config, &Exec::cpu()).unwrap();
    let b = hmm::fit(&seqs, &config, &gpu).unwrap();
    assert_eq!((a.status, a.iterations), (b.status, b.iterations));
    compare_models(&a.model, &b.model, "one long sequence, fit");
    for (x, y) in a.trace.iter().zip(&b.trace) {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "trace gpu {y} cpu {x}");
    }
}

fn compare_models(a: &HmmModel, b: &HmmModel, what: &str) {
    let all = |m: &HmmModel| [m.start.clone(), m.trans.clone(), m.emission.probs.clone()].concat();
    for (x, y) in all(a).iter().zip(&all(b)) {
        assert!((x - y).abs() <= GPU_CPU_PARAM_REL * x.abs().max(1e-6), "{what}: gpu {y} cpu {x}");
    }
}

#[test]
fn baum_welch_matches_the_cpu() {
    if !gpu_or_skip() {
        return;
    }
    // Thread kernels (N <= 8), warp kernels (N <= 32), block kernels with
    // shared accumulators (V too large for the thread and warp kernels'
    // emission counts), and N = 40.
    for (key, &(n, v)) in [(2usize, 3usize), (6, 5), (32, 16), (8, 300), (40, 6)].iter().enumerate() {
        let truth = random_model(n, v, 100 + key as u64, false);
        let (seqs, _) = hmm::simulate(&truth, &lengths(2000, 200, 7 + key as u64), 9);
        // Fixed iterations from a given start.
        let config = HmmFitConfig::new(n, v).init(random_model(n, v, 200 + key as u64, false)).max_iters(10).epsilon(0.0).check().unwrap();
        let a = hmm::fit(&seqs, &config, &Exec::cpu()).unwrap();
        let b = hmm::fit(&seqs, &config, &cuda()).unwrap();
        assert_eq!((a.status, a.iterations), (b.status, b.iterations));
        compare_models(&a.model, &b.model, &format!("N={n} V={v}"));
        for (x, y) in a.trace.iter().zip(&b.trace) {
            assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "trace gpu {y} cpu {x}");
        }
        // Random starts. Both backends stop at the same iteration unless a
        // change falls within rounding of epsilon; one iteration apart is
        // tolerated (the status may then differ at the max_iters boundary).
        let config = HmmFitConfig::new(n, v).random_inits(2).max_iters(300).epsilon(1e-2).seed(3).check().unwrap();
        let a = hmm::fit(&seqs, &config, &Exec::cpu()).unwrap();
        let b = hmm::fit(&seqs, &config, &cuda()).unwrap();
        assert_ne!(a.status, FitStatus::Failed);
        assert_eq!(a.best_start, b.best_start);
        assert!(a.iterations.abs_diff(b.iterations) <= 1, "N={n}: {} vs {} iterations", a.iterations, b.iterations);
        assert!(rel(b.loglik, a.loglik) <= 1e-8, "N={n}: loglik gpu {} cpu {}", b.loglik, a.loglik);
        if a.iterations == b.iterations {
            assert_eq!(a.status, b.status);
            compare_models(&a.model, &b.model, &format!("N={n} V={v}, random starts"));
        }
    }
}

#[test]
fn one_iteration_with_many_states_matches_the_cpu() {
    if !gpu_or_skip() {
        return;
    }
    // N = V = 512: counts accumulated in global memory.
    let model = random_model(512, 512, 300, false);
    let (seqs, _) = hmm::simulate(&model, &vec![16; 64], 1);
    let (a, la) = hmm::baum_welch_step(&model, &seqs, &Default::default(), &Exec::cpu()).unwrap();
    let (b, lb) = hmm::baum_welch_step(&model, &seqs, &Default::default(), &cuda()).unwrap();
    assert!(rel(lb, la) <= GPU_CPU_LOGLIK_REL);
    compare_models(&a, &b, "N=512");
    compare_passes(&model, &seqs, "N=512");
    // N = 128 over more sequences than one wave of blocks (the batched
    // kernels, whose transitions would fit a block) and over a few (a
    // block per sequence).
    let model = random_model(128, 24, 301, false);
    for count in [400, 30] {
        let (seqs, _) = hmm::simulate(&model, &lengths(count, 60, 302), 2);
        let (a, la) = hmm::baum_welch_step(&model, &seqs, &Default::default(), &Exec::cpu()).unwrap();
        let (b, lb) = hmm::baum_welch_step(&model, &seqs, &Default::default(), &cuda()).unwrap();
        assert!(rel(lb, la) <= GPU_CPU_LOGLIK_REL, "N=128 M={count}: loglik gpu {lb} cpu {la}");
        compare_models(&a, &b, &format!("N=128 M={count}"));
    }
}

#[test]
fn batched_viterbi_breaks_ties_as_the_cpu_does() {
    if !gpu_or_skip() {
        return;
    }
    // N = 257 (the batched max-plus kernel; not a multiple of its 32-column
    // tiles): uniform transitions and emissions in the first half of the
    // states make exact ties at every step, which must go to the lowest
    // state as on the CPU; lengths 1 to 90, so rows finish at every step.
    let (n, v) = (257, 5);
    let r = random_model(n, v, 500, true);
    let trans: Vec<f64> = (0..n * n).map(|k| if k / n < n / 2 { 1.0 / n as f64 } else { r.trans[k] }).collect();
    let emis: Vec<f64> = (0..n * v).map(|k| if k / v < n / 2 { 1.0 / v as f64 } else { r.emission.probs[k] }).collect();
    let model = HmmModel::new(vec![1.0 / n as f64; n], trans, emis, v).unwrap();
    let (seqs, _) = hmm::simulate(&model, &lengths(70, 90, 501), 502);
    compare_passes(&model, &seqs, "ties, N=257");
    // Steps where the uniform states' tie decides the predecessor.
    let all_zero = Sequences::from_vecs(&[vec![0u32; 50], vec![1, 2, 3], vec![4]]);
    compare_passes(&model, &all_zero, "ties, N=257, fixed sequences");
}

#[test]
fn batched_results_do_not_depend_on_the_batch() {
    if !gpu_or_skip() {
        return;
    }
    // N = 300 (the batched kernels): the same ten sequences alone and
    // among 1,000, which fill the device with tiles (and run on a
    // different grid). A row's sums do not depend on the other rows of its
    // batch: identical results, as sharing sequences over devices needs.
    let model = random_model(300, 12, 600, false);
    let (seqs, _) = hmm::simulate(&model, &lengths(1000, 30, 601), 602);
    compare_passes(&model, &seqs, "N=300, 1,000 sequences");
    let few = Sequences::from_vecs(&(0..10).map(|s| seqs.get(s).to_vec()).collect::<Vec<_>>());
    compare_passes(&model, &few, "N=300, 10 sequences");
    let all = hmm::loglik(&model, &seqs, &cuda()).unwrap();
    let some = hmm::loglik(&model, &few, &cuda()).unwrap();
    assert_eq!(&all[..10], &some[..], "the same sequences in a larger batch");
    let pa = hmm::posterior(&model, &seqs, &cuda()).unwrap();
    let pb = hmm::posterior(&model, &few, &cuda()).unwrap();
    assert_eq!(&pa.probs[..pb.probs.len()], &pb.probs[..], "posteriors in a larger batch");
}

#[test]
fn both_tilings_give_identical_results() {
    if !gpu_or_skip() {
        return;
    }
    // The batched passes' two tilings (32 x 64 tiles streamed; 32 x 16
    // tiles whose transitions stay in shared memory) add every sum in the
    // same order: identical log-likelihoods, posteriors and Baum-Welch
    // counts, and both agree with the CPU. N = 300 and 1,030 (neither a
    // multiple of 16), zeros in the tables (impossible sequences), rows of
    // a second, partial row tile, lengths from 1 so rows finish at every
    // step. Forcing is process-wide; other tests running meanwhile get
    // the same results either way.
    struct Unforce;
    impl Drop for Unforce {
        fn drop(&mut self) {
            hmm::gpu::force_tiling(None);
        }
    }
    let _unforce = Unforce;
    for (n, v, count, longest, key) in [(300, 12, 45, 30, 610u64), (1030, 20, 70, 24, 620)] {
        let model = random_model(n, v, key, true);
        let (seqs, _) = hmm::simulate(&model, &lengths(count, longest, key + 1), key + 2);
        let mut runs = Vec::new();
        for tiling in [hmm::gpu::Tiling::Wide, hmm::gpu::Tiling::Narrow] {
            hmm::gpu::force_tiling(Some(tiling));
            // Bits: NaN posteriors (impossible sequences) must match too.
            let bits = |x: Vec<f64>| x.into_iter().map(f64::to_bits).collect::<Vec<_>>();
            let ll = hmm::loglik(&model, &seqs, &cuda()).unwrap();
            let post = bits(hmm::posterior(&model, &seqs, &cuda()).unwrap().probs);
            let (step, step_ll) = hmm::baum_welch_step(&model, &seqs, &Default::default(), &cuda()).unwrap();
            runs.push((ll, post, step, step_ll));
            compare_passes(&model, &seqs, &format!("N={n}, {tiling:?} tiles"));
        }
        assert!(runs[0].0.iter().any(|l| l.is_finite()), "N={n}: some sequences are possible");
        assert_eq!(runs[0].0, runs[1].0, "N={n}: log-likelihoods by tiling");
        assert_eq!(runs[0].1, runs[1].1, "N={n}: posteriors by tiling");
        assert_eq!((&runs[0].2, runs[0].3), (&runs[1].2, runs[1].3), "N={n}: a Baum-Welch step by tiling");
    }
}

#[test]
fn baum_welch_with_many_states_matches_the_cpu() {
    if !gpu_or_skip() {
        return;
    }
    // N = 200: the batched kernels, counts from posteriors and hmm_xi_gemm,
    // the M-step on the device; mixed lengths, a pseudocount.
    let (n, v) = (200, 30);
    let truth = random_model(n, v, 400, true);
    let (seqs, _) = hmm::simulate(&truth, &lengths(150, 40, 11), 12);
    let config = HmmFitConfig::new(n, v).init(random_model(n, v, 401, false)).max_iters(4).epsilon(0.0).pseudocount(0.5).check().unwrap();
    let a = hmm::fit(&seqs, &config, &Exec::cpu()).unwrap();
    let b = hmm::fit(&seqs, &config, &cuda()).unwrap();
    assert_eq!((a.status, a.iterations), (b.status, b.iterations));
    compare_models(&a.model, &b.model, "N=200 V=30");
    for (x, y) in a.trace.iter().zip(&b.trace) {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "trace gpu {y} cpu {x}");
    }
}

/// N states that never switch (A = I), each with its own random emissions:
/// the weights of all but the best-fitting state decay geometrically, below
/// the kernels' certificate within a few hundred symbols.
fn stuck_model(n: usize, v: usize, key: u64) -> HmmModel {
    let r = random_model(n, v, key, false);
    let trans = (0..n * n).map(|k| if k / n == k % n { 1.0 } else { 0.0 }).collect();
    HmmModel::new(r.start, trans, r.emission.probs, v).unwrap()
}

#[test]
fn thread_kernels_take_several_sequences_each() {
    if !gpu_or_skip() {
        return;
    }
    // More sequences than the thread kernels' largest grid has threads
    // (132 x 16 blocks of 128 on an H100), so each thread runs several and
    // adds all their counts into its block's accumulator. For the
    // posteriors, a model that makes many of them impossible (state 0,
    // where every sequence starts and stays, never emits symbol 3).
    let (seqs, _) = hmm::simulate(&random_model(3, 4, 34, false), &lengths(300_000, 5, 32), 35);
    let mut stuck = random_model(3, 4, 31, false);
    stuck.start = vec![1.0, 0.0, 0.0];
    stuck.trans[..3].copy_from_slice(&[1.0, 0.0, 0.0]);
    stuck.emission.probs[..4].copy_from_slice(&[0.5, 0.25, 0.25, 0.0]);
    let ll = hmm::loglik(&stuck, &seqs, &Exec::cpu()).unwrap();
    assert!(ll.iter().any(|l| *l == f64::NEG_INFINITY) && ll.iter().any(|l| l.is_finite()), "both kinds of sequence");
    let (pa, pb) = (hmm::posterior(&stuck, &seqs, &Exec::cpu()).unwrap(), hmm::posterior(&stuck, &seqs, &cuda()).unwrap());
    for (x, y) in pa.probs.iter().zip(&pb.probs) {
        assert!((x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-10, "posterior gpu {y} cpu {x}");
    }
    let model = random_model(3, 4, 31, false);
    let ((ma, la), (mb, lb)) = (hmm::baum_welch_step(&model, &seqs, &Default::default(), &Exec::cpu()).unwrap(), hmm::baum_welch_step(&model, &seqs, &Default::default(), &cuda()).unwrap());
    assert!(rel(lb, la) <= GPU_CPU_LOGLIK_REL, "one step: gpu {lb} cpu {la}");
    compare_models(&ma, &mb, "one step over 300,000 sequences");
}

#[test]
fn tiny_probabilities_and_decaying_states_agree() {
    if !gpu_or_skip() {
        return;
    }
    // The model: a 1e-310 emission (beyond the certificate: CPU).
    let tiny = HmmModel::new(vec![1e-20, 1.0 - 1e-20], vec![1.0, 0.0, 0.0, 1.0], vec![1e-310, 1.0 - 1e-310, 0.0, 1.0], 2).unwrap();
    let seqs = Sequences::from_vecs(&[vec![0u32], vec![1, 1, 0], vec![1; 50]]);
    compare_passes(&tiny, &seqs, "subnormal emission");
    let ll = hmm::loglik(&tiny, &seqs, &cuda()).unwrap();
    assert!((ll[0] - (tiny.start[0].ln() + tiny.emission.probs[0].ln())).abs() < 1e-12);
    // States whose weights decay below the certificate, on the thread (N =
    // 2, 8), warp (N = 20: eight sequences a warp in the forward pass, of
    // unequal lengths), block (N = 40, 100) and batched (N = 200) kernels:
    // long sequences come back uncertain and are computed on the host;
    // short ones on the device.
    for (key, &n) in [2usize, 8, 40, 100, 200, 20].iter().enumerate() {
        let m = stuck_model(n, 6, 60 + key as u64);
        let (seqs, _) = hmm::simulate(&random_model(n, 6, 70 + key as u64, false), &[5, 2000, 30, 700, 1, 3000], 3);
        compare_passes(&m, &seqs, &format!("stuck N={n}"));
        let config = HmmFitConfig::new(n, 6).init(m.clone()).max_iters(3).epsilon(0.0).check().unwrap();
        let a = hmm::fit(&seqs, &config, &Exec::cpu()).unwrap();
        let b = hmm::fit(&seqs, &config, &cuda()).unwrap();
        assert_eq!((a.status, a.iterations), (b.status, b.iterations), "stuck N={n}");
        compare_models(&a.model, &b.model, &format!("stuck N={n}, Baum-Welch"));
        for (x, y) in a.trace.iter().zip(&b.trace) {
            assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "stuck N={n}: trace gpu {y} cpu {x}");
        }
        // In three shares: the uncertain sequences are counted on the host
        // from their share's part of the call's symbols.
        let shares = Exec { gpu_parts: 3, ..cuda() };
        let c = hmm::fit(&seqs, &config, &shares).unwrap();
        compare_models(&a.model, &c.model, &format!("stuck N={n}, Baum-Welch in shares"));
        let (cpu_ll, split_ll) = (hmm::loglik(&m, &seqs, &Exec::cpu()).unwrap(), hmm::loglik(&m, &seqs, &shares).unwrap());
        for (x, y) in cpu_ll.iter().zip(&split_ll) {
            assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "stuck N={n}: loglik in shares {y} cpu {x}");
        }
        let ((ma, la), (mb, lb)) = (hmm::baum_welch_step(&m, &seqs, &Default::default(), &Exec::cpu()).unwrap(), hmm::baum_welch_step(&m, &seqs, &Default::default(), &shares).unwrap());
        assert!(rel(lb, la) <= GPU_CPU_LOGLIK_REL, "stuck N={n}: one step in shares {lb} cpu {la}");
        compare_models(&ma, &mb, &format!("stuck N={n}, one step in shares"));
    }
}

#[test]
fn unreachable_states_give_no_nan() {
    if !gpu_or_skip() {
        return;
    }
    // Only state 0 can be reached; every other state alone emits symbol 1
    // with certainty, so its backward value doubles at every step.
    for n in [2usize, 19, 40, 200] {
        let mut start = vec![0.0; n];
        start[0] = 1.0;
        let trans: Vec<f64> = (0..n * n).map(|k| if k / n == k % n { 1.0 } else { 0.0 }).collect();
        let emis: Vec<f64> = (0..n).flat_map(|i| if i == 0 { [0.5, 0.5] } else { [0.0, 1.0] }).collect();
        let m = HmmModel::new(start, trans, emis, 2).unwrap();
        let seq: Vec<u32> = (0..2001).map(|t| (t > 0) as u32).collect();
        let seqs = Sequences::from_vecs(&[seq, vec![0, 1, 1]]);
        compare_passes(&m, &seqs, &format!("unreachable N={n}"));
        let p = hmm::posterior(&m, &seqs, &cuda()).unwrap();
        assert!(p.probs.iter().all(|x| x.is_finite()), "N={n}: NaN posteriors");
        let (next, _) = hmm::baum_welch_step(&m, &seqs, &Default::default(), &cuda()).unwrap();
        assert!(next.trans.iter().chain(&next.emission.probs).all(|x| x.is_finite()), "N={n}: {:?}", &next.trans[..4]);
    }
}

#[test]
fn many_sequences_agree_sixteen_to_a_warp() {
    if !gpu_or_skip() {
        return;
    }
    // 20,000 sequences fill the device, so at N <= 32 the forward pass runs
    // 16 of them a warp on the tensor cores (hmm_forward_mma): odd and even
    // N, unequal lengths, models with and without zero probabilities, and
    // uncertain sequences (states that decay: the two long sequences, which
    // stop their rows of a warp early).
    for (key, &(n, v)) in [(9usize, 5usize), (32, 16)].iter().enumerate() {
        let key = 90 + key as u64;
        let (seqs, _) = hmm::simulate(&random_model(n, v, key, false), &lengths(20_000, 40, key), key);
        for (what, model) in [("dense", random_model(n, v, key + 10, false)), ("zeros", random_model(n, v, key + 20, true))] {
            compare_passes(&model, &seqs, &format!("N={n}, 20,000 sequences, {what}"));
            let ((ma, la), (mb, lb)) = (hmm::baum_welch_step(&model, &seqs, &Default::default(), &Exec::cpu()).unwrap(), hmm::baum_welch_step(&model, &seqs, &Default::default(), &cuda()).unwrap());
            assert!(rel(lb, la) <= GPU_CPU_LOGLIK_REL, "N={n}, {what}: one step: gpu {lb} cpu {la}");
            compare_models(&ma, &mb, &format!("N={n}, 20,000 sequences, {what}, one step"));
        }
    }
    let mut lens = lengths(20_000, 30, 96);
    (lens[5], lens[17_000]) = (3000, 2500);
    let (seqs, _) = hmm::simulate(&random_model(20, 6, 97, false), &lens, 98);
    compare_passes(&stuck_model(20, 6, 95), &seqs, "stuck N=20, 20,000 sequences");
}

/// A model that stays in state 0 and always emits symbol 0, and five
/// sequences of 0s and 1s, whose log-likelihoods are FIXED_STATE_LOGLIKS.
fn fixed_state_model(n: usize) -> (HmmModel, Sequences) {
    let mut start = vec![0.0; n];
    start[0] = 1.0;
    let trans: Vec<f64> = (0..n * n).map(|k| if k / n == k % n { 1.0 } else { 0.0 }).collect();
    let emis: Vec<f64> = (0..n).flat_map(|_| [1.0, 0.0]).collect();
    let seqs = Sequences::from_vecs(&[vec![0u32, 0, 1], vec![0; 40], vec![1], vec![0, 1, 0, 0, 0], vec![0; 7]]);
    (HmmModel::new(start, trans, emis, 2).unwrap(), seqs)
}

const FIXED_STATE_LOGLIKS: [f64; 5] = [f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0];

#[test]
fn groups_of_sixteen_sequences_agree() {
    if !gpu_or_skip() {
        return;
    }
    // From 33 to 128 states the forward pass runs 16 sequences a block on
    // the tensor cores (hmm_forward_group), and Viterbi over more than two
    // waves of a block per sequence 8 a block (hmm_viterbi_group; on an
    // H100 or H200: N = 47 from 3,169 sequences, 100 and 128 from 529 and
    // 265): odd and even N, a last slice of states part-filled (33, 47,
    // 100) or full (64, 128), groups part filled (1, 17, 3,301, 601 and 301
    // sequences), unequal lengths, zero probabilities; exact ties, which
    // go to the lowest state as on the CPU; and in one group, impossible
    // sequences and ones whose states decay below the certificate
    // (computed on the host).
    for (key, &(n, v, count)) in [(33usize, 5usize, 17usize), (47, 9, 3301), (64, 3, 1), (100, 12, 601), (128, 7, 17), (128, 20, 301)].iter().enumerate() {
        let key = 700 + key as u64;
        let (seqs, _) = hmm::simulate(&random_model(n, v, key, false), &lengths(count, 90, key), key);
        for (what, model) in [("dense", random_model(n, v, key + 10, false)), ("zeros", random_model(n, v, key + 20, true))] {
            compare_passes(&model, &seqs, &format!("N={n} M={count} {what}"));
        }
    }
    for (n, count) in [(100usize, 601usize), (128, 301)] {
        let v = 5;
        let r = random_model(n, v, 720, true);
        let trans: Vec<f64> = (0..n * n).map(|k| if k / n < n / 2 { 1.0 / n as f64 } else { r.trans[k] }).collect();
        let emis: Vec<f64> = (0..n * v).map(|k| if k / v < n / 2 { 1.0 / v as f64 } else { r.emission.probs[k] }).collect();
        let model = HmmModel::new(vec![1.0 / n as f64; n], trans, emis, v).unwrap();
        let (seqs, _) = hmm::simulate(&model, &lengths(count, 90, 721), 722);
        compare_passes(&model, &seqs, &format!("ties, N={n}"));
        let all_zero = Sequences::from_vecs(&[vec![0u32; 50], vec![1, 2, 3], vec![4]]);
        compare_passes(&model, &all_zero, &format!("ties, N={n}, fixed sequences"));
    }
    let n = 40;
    let (m, seqs) = fixed_state_model(n);
    compare_passes(&m, &seqs, &format!("impossible, N={n}"));
    assert_eq!(hmm::loglik(&m, &seqs, &cuda()).unwrap(), FIXED_STATE_LOGLIKS, "impossible, N={n}");
    let stuck = stuck_model(n, 6, 710);
    let (seqs, _) = hmm::simulate(&random_model(n, 6, 711, false), &[5, 2000, 30, 700, 1, 3000, 12, 40, 8, 2, 9, 100, 60, 3, 4, 5, 6, 7], 712);
    compare_passes(&stuck, &seqs, &format!("stuck N={n}"));
}

#[test]
fn clusters_split_the_forward_pass_at_many_states() {
    if !gpu_or_skip() {
        return;
    }
    // From 897 states, up to 64 sequences' forward passes on sm_90 run
    // hmm_forward_split: each step's sums split over the 8 blocks of a
    // cluster, 15 or 16 clusters sharing ceil(N / 8) column units of 8
    // (uneven shares); the posterior and Baum-Welch passes store its
    // alphas and scales. N a multiple of 8 or not (1,024, 1,000, 900), 64
    // sequences (full row tiles), 7 and 1; lengths from 1, so rows finish
    // at every step; zero probabilities (impossible sequences); states
    // decaying below the certificate (settled on the host); a model where
    // every sequence but the fixed ones is impossible.
    let sm90 = bulkem_core::gpu::probe().devices.first().is_some_and(|d| d.compute_capability.0 >= 9);
    let before = hmm::gpu::split_launches();
    let cpu = Exec::cpu();
    let check = |model: &HmmModel, seqs: &Sequences, what: &str| {
        let a = hmm::loglik(model, seqs, &cpu).unwrap();
        let b = hmm::loglik(model, seqs, &cuda()).unwrap();
        for (s, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: loglik of sequence {s}: gpu {y} cpu {x}");
        }
        let launches = hmm::gpu::split_launches();
        let (pa, pb) = (hmm::posterior(model, seqs, &cpu).unwrap(), hmm::posterior(model, seqs, &cuda()).unwrap());
        for (x, y) in pa.probs.iter().zip(&pb.probs) {
            assert!((x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-10, "{what}: posterior gpu {y} cpu {x}");
        }
        if sm90 {
            assert!(hmm::gpu::split_launches() > launches, "{what}: the posterior pass's alphas came from the split forward pass");
        }
        a
    };
    for (key, &(n, v, count, longest)) in [(1024usize, 16usize, 64usize, 40usize), (1000, 9, 7, 60), (900, 5, 1, 30), (1024, 30, 64, 3)].iter().enumerate() {
        let key = 800 + 10 * key as u64;
        let (seqs, _) = hmm::simulate(&random_model(n, v, key, false), &lengths(count, longest, key), key + 1);
        let dense = random_model(n, v, key + 2, false);
        check(&dense, &seqs, &format!("N={n} M={count} dense"));
        let ll = check(&random_model(n, v, key + 3, true), &seqs, &format!("N={n} M={count} zeros"));
        assert!(ll.iter().any(|l| l.is_finite()), "N={n}: some sequences are possible");
        if count > 1 {
            let ((ma, la), (mb, lb)) = (hmm::baum_welch_step(&dense, &seqs, &Default::default(), &cpu).unwrap(), hmm::baum_welch_step(&dense, &seqs, &Default::default(), &cuda()).unwrap());
            assert!(rel(lb, la) <= GPU_CPU_LOGLIK_REL, "N={n} M={count}: one step's loglik gpu {lb} cpu {la}");
            compare_models(&ma, &mb, &format!("N={n} M={count}: one step"));
        }
    }
    let n = 1000;
    let stuck = stuck_model(n, 6, 850);
    let (seqs, _) = hmm::simulate(&random_model(n, 6, 851, false), &[5, 400, 30, 1, 120, 2, 60], 852);
    check(&stuck, &seqs, &format!("stuck N={n}"));
    let (m, seqs) = fixed_state_model(n);
    check(&m, &seqs, "impossible");
    assert_eq!(hmm::loglik(&m, &seqs, &cuda()).unwrap(), FIXED_STATE_LOGLIKS, "impossible, N={n}");
    if sm90 {
        assert!(hmm::gpu::split_launches() > before, "the split forward pass ran");
    }
}

#[test]
fn kept_models_keep_their_device_tables_and_their_results() {
    if !gpu_or_skip() {
        return;
    }
    // A warp kernel's size and the batched kernels' (512 states).
    for (n, v, count) in [(8, 5, 300), (512, 64, 40)] {
        let model = random_model(n, v, 41 + n as u64, false);
        let seqs = hmm::simulate(&model, &lengths(count, 30, 3), 9).0;
        check_kept_models(&model, &nudged(&model, 0.5), &seqs, &cuda(), &format!("N = {n}"), |e| e.probs.clone());
    }
}

#[test]
fn small_jobs_stay_on_the_cpu() {
    let auto = |shape: hmm::CallShape| choose_backend(BackendRequest::Auto, &hmm::job(&shape)).unwrap();
    // One sequence of 1,000 at 10 states; 5 of 100.
    assert_eq!(auto(hmm::CallShape::even(10, 1, 1000)), Backend::Cpu);
    assert_eq!(auto(hmm::CallShape::even(10, 5, 100)), Backend::Cpu);
    // Beyond the kernels' states, however large.
    assert_eq!(auto(hmm::CallShape::even(gpu_max() + 1, 1 << 20, 1000).passes(0, 100)), Backend::Cpu);
    // Issue 24's many-state shape goes to a usable GPU.
    let usable = bulkem_core::gpu::probe().usable();
    assert_eq!(auto(hmm::CallShape::even(512, 512, 16)), if usable { Backend::Cuda } else { Backend::Cpu });
}

fn gpu_max() -> usize {
    hmm::gpu::MAX_GPU_STATES
}
