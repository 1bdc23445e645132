//! Gaussian and Poisson emissions on the CUDA backend against the CPU
//! reference, in the three GPU size regimes (a warp per sequence for
//! N <= 32, a block per sequence, the batched kernels for large N):
//! log-likelihoods to 1e-10 relative, identical Viterbi paths, posteriors
//! to 1e-10, Baum-Welch parameters to 1e-8. Also well separated states
//! (densities that underflow against each other), sparse transitions (the
//! kernels' certificate sends sequences to the CPU) and impossible counts.
//! Skipped (with a note) where no device is usable.

mod common;
use common::{check_kept_models, check_posterior_layout, cuda, gpu_or_skip, nudged, posterior_laid_out};

use bulkem_core::exec::Exec;
use bulkem_core::hmm::emission::{Rows, Space};
use bulkem_core::hmm::{self, Emission, Gaussian, HmmFitConfig, HmmModel, Poisson, Sequences, NO_STATE};
use bulkem_core::rng::KeyedStream;
use bulkem_core::tolerances::{GPU_CPU_LOGLIK_REL, GPU_CPU_PARAM_REL};

fn rel(a: f64, b: f64) -> f64 {
    if a == b { 0.0 } else { (a - b).abs() / b.abs().max(1e-300) }
}

fn chain(n: usize, key: u64, zeros: bool) -> (Vec<f64>, Vec<f64>) {
    let mut rng = KeyedStream::new(15, key, 0);
    let mut row = |len: usize, zeros: bool| -> Vec<f64> {
        let mut x: Vec<f64> = (0..len).map(|_| rng.uniform() + 0.05).collect();
        if zeros && len > 1 {
            let k = rng.below(len as u64) as usize;
            x[k] = 0.0;
        }
        let s: f64 = x.iter().sum();
        x.into_iter().map(|p| p / s).collect()
    };
    let start = row(n, false);
    let trans = (0..n).flat_map(|_| row(n, zeros)).collect();
    (start, trans)
}

fn gaussian(n: usize, key: u64, spread: f64, zeros: bool) -> HmmModel<Gaussian> {
    let (start, trans) = chain(n, key, zeros);
    let mut rng = KeyedStream::new(16, key, 0);
    let g = Gaussian::new((0..n).map(|_| spread * (rng.uniform() - 0.5)).collect(), (0..n).map(|_| 0.4 + 1.5 * rng.uniform()).collect()).unwrap();
    HmmModel::with_emission(start, trans, g).unwrap()
}

fn poisson(n: usize, key: u64, zeros: bool) -> HmmModel<Poisson> {
    let (start, trans) = chain(n, key, zeros);
    let mut rng = KeyedStream::new(17, key, 0);
    let p = Poisson::new((0..n).map(|_| 0.3 + 20.0 * rng.uniform()).collect()).unwrap();
    HmmModel::with_emission(start, trans, p).unwrap()
}

fn lengths(count: usize, max: usize, key: u64) -> Vec<usize> {
    let mut rng = KeyedStream::new(6, key, 0);
    (0..count).map(|_| 1 + rng.below(max as u64) as usize).collect()
}

fn compare_passes<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, what: &str) {
    let (cpu, gpu) = (Exec::cpu(), cuda());
    let a = hmm::loglik(model, seqs, &cpu).unwrap();
    let b = hmm::loglik(model, seqs, &gpu).unwrap();
    for (s, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: loglik of sequence {s}: gpu {y} cpu {x}");
    }
    let va = hmm::viterbi(model, seqs, &cpu).unwrap();
    let vb = hmm::viterbi(model, seqs, &gpu).unwrap();
    // The paths as they crossed the bus (which R's glue widens) are the same.
    let (paths, logp) = hmm::viterbi_paths(model, seqs, &gpu).unwrap();
    assert_eq!((paths.to_vec(), logp), (vb.states.clone(), vb.log_prob.clone()), "{what}: Viterbi paths as sent");
    for (s, (x, y)) in va.log_prob.iter().zip(&vb.log_prob).enumerate() {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: Viterbi log-prob gpu {y} cpu {x}");
        // Paths agree, or both are best to rounding: counts make exact ties
        // (two states swapped over equal counts), which rounding breaks.
        let r = seqs.offsets[s]..seqs.offsets[s + 1];
        if va.states[r.clone()] != vb.states[r.clone()] {
            let score = path_log_prob(model, seqs.get(s), &vb.states[r]);
            assert!(rel(score, *x) <= GPU_CPU_LOGLIK_REL, "{what}: sequence {s}: the GPU's Viterbi path scores {score}, the best {x}");
        }
    }
    let pa = hmm::posterior(model, seqs, &cpu).unwrap();
    let pb = hmm::posterior(model, seqs, &gpu).unwrap();
    for (x, y) in pa.loglik.iter().zip(&pb.loglik) {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: posterior loglik gpu {y} cpu {x}");
    }
    for (x, y) in pa.probs.iter().zip(&pb.probs) {
        assert!((x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-10, "{what}: posterior gpu {y} cpu {x}");
    }
    // Into the caller's matrices (laid out on the device, NaN as the value
    // given): bit for bit the posteriors above laid out on the host.
    check_posterior_layout(model, seqs, &gpu, &pb, what);
}

/// log P(path, sequence).
fn path_log_prob<E: Emission>(model: &HmmModel<E>, seq: &[E::Obs], path: &[u32]) -> f64 {
    assert!(!path.contains(&NO_STATE));
    let n = model.n_states;
    let rows = model.emission.rows(Space::Log).unwrap();
    let mut buf = vec![0.0; n];
    let mut l = 0.0;
    for (t, (&o, &j)) in seq.iter().zip(path).enumerate() {
        let j = j as usize;
        l += if t == 0 { model.start[j].ln() } else { model.trans[path[t - 1] as usize * n + j].ln() };
        l += rows.row(o, &mut buf).values[j];
    }
    l
}

fn compare_fits<E: Emission<Obs = f64>>(init: &HmmModel<E>, seqs: &Sequences<f64>, params: impl Fn(&E) -> Vec<f64>, what: &str) {
    compare_fits_with(init, seqs, params, 0.0, what)
}

/// As [`compare_fits`], with a pseudocount on start and transitions.
fn compare_fits_with<E: Emission<Obs = f64>>(init: &HmmModel<E>, seqs: &Sequences<f64>, params: impl Fn(&E) -> Vec<f64>, pseudocount: f64, what: &str) {
    let config = HmmFitConfig::<E>::for_emission(init.n_states, init.emission.shape()).init(init.clone()).max_iters(8).epsilon(0.0).pseudocount(pseudocount).check().unwrap();
    let a = hmm::fit(seqs, &config, &Exec::cpu()).unwrap();
    let b = hmm::fit(seqs, &config, &cuda()).unwrap();
    assert_eq!((a.status, a.iterations), (b.status, b.iterations), "{what}");
    for (x, y) in a.trace.iter().zip(&b.trace) {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: trace gpu {y} cpu {x}");
    }
    let flat = |m: &HmmModel<E>| [m.start.clone(), m.trans.clone(), params(&m.emission)].concat();
    for (x, y) in flat(&a.model).iter().zip(&flat(&b.model)) {
        assert!((x - y).abs() <= GPU_CPU_PARAM_REL * x.abs().max(1e-3), "{what}: parameter gpu {y} cpu {x}");
    }
    assert_eq!(a.floored, b.floored, "{what}");
}

fn gaussian_params(g: &Gaussian) -> Vec<f64> {
    g.mean.iter().chain(&g.sd).copied().collect()
}

fn poisson_params(p: &Poisson) -> Vec<f64> {
    p.rate.clone()
}

/// N in each regime: warp (3, 32), block (33, 64), batched (200, 256).
const STATES: [usize; 6] = [3, 32, 33, 64, 200, 256];

#[test]
fn gaussian_passes_and_fits_match_the_cpu() {
    if !gpu_or_skip() {
        return;
    }
    for (key, &n) in STATES.iter().enumerate() {
        let key = key as u64;
        let model = gaussian(n, key, 8.0, false);
        let (seqs, _) = hmm::simulate(&model, &lengths(if n > 100 { 60 } else { 300 }, 80, key), key);
        compare_passes(&model, &seqs, &format!("gaussian N={n}"));
        compare_fits(&gaussian(n, key + 50, 8.0, false), &seqs, gaussian_params, &format!("gaussian fit N={n}"));
        // Start and transitions re-estimated on the device with a prior
        // (and zeros that it fills: sparse, then dense transitions).
        compare_fits_with(&gaussian(n, key + 60, 8.0, true), &seqs, gaussian_params, 0.5, &format!("gaussian fit N={n}, pseudocount"));
    }
    // N = 128 over more sequences than one wave of blocks: the passes on
    // the batched kernels, the fit's E-step on a block per sequence.
    let model = gaussian(128, 70, 8.0, false);
    let (seqs, _) = hmm::simulate(&model, &lengths(300, 40, 70), 70);
    compare_passes(&model, &seqs, "gaussian N=128 M=300");
    compare_fits(&gaussian(128, 71, 8.0, false), &seqs, gaussian_params, "gaussian fit N=128 M=300");
    // N = 1,000 over 40 sequences: the forward passes split over clusters
    // (hmm_forward_split on sm_90; the posteriors' stores its alphas), the
    // density's rows from a table.
    let model = gaussian(1000, 72, 8.0, true);
    let (seqs, _) = hmm::simulate(&model, &lengths(40, 30, 72), 72);
    let (a, b) = (hmm::loglik(&model, &seqs, &Exec::cpu()).unwrap(), hmm::loglik(&model, &seqs, &cuda()).unwrap());
    for (s, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "gaussian N=1000 M=40: loglik of sequence {s}: gpu {y} cpu {x}");
    }
    let (pa, pb) = (hmm::posterior(&model, &seqs, &Exec::cpu()).unwrap(), hmm::posterior(&model, &seqs, &cuda()).unwrap());
    for (x, y) in pa.probs.iter().zip(&pb.probs) {
        assert!((x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-10, "gaussian N=1000 M=40: posterior gpu {y} cpu {x}");
    }
}

#[test]
fn kept_density_models_keep_their_device_tables_and_their_results() {
    if !gpu_or_skip() {
        return;
    }
    // A warp per sequence, a block per sequence, the batched kernels.
    for n in [8, 40, 512] {
        let model = gaussian(n, 90 + n as u64, 6.0, false);
        let (seqs, _) = hmm::simulate(&model, &lengths(24, 40, n as u64), 7);
        check_kept_models(&model, &nudged(&model, 0.5), &seqs, &cuda(), &format!("Gaussian, N = {n}"), gaussian_params);
    }
    let model = poisson(40, 3, true);
    let (seqs, _) = hmm::simulate(&model, &lengths(24, 40, 3), 8);
    check_kept_models(&model, &nudged(&model, 0.5), &seqs, &cuda(), "Poisson, N = 40", poisson_params);
}

#[test]
fn poisson_passes_and_fits_match_the_cpu() {
    if !gpu_or_skip() {
        return;
    }
    for (key, &n) in STATES.iter().enumerate() {
        let key = key as u64 + 10;
        let model = poisson(n, key, false);
        let (mut seqs, _) = hmm::simulate(&model, &lengths(if n > 100 { 60 } else { 300 }, 80, key), key);
        // A count no state expects.
        seqs.symbols[7] = 400.0;
        compare_passes(&model, &seqs, &format!("poisson N={n}"));
        compare_fits(&poisson(n, key + 50, false), &seqs, poisson_params, &format!("poisson fit N={n}"));
    }
}

#[test]
fn separated_states_and_sparse_transitions_agree() {
    if !gpu_or_skip() {
        return;
    }
    // A thread, a warp (both compute the rows in the forward pass), a
    // block per sequence, the batched kernels.
    for (key, &n) in [2usize, 5, 20, 40, 200].iter().enumerate() {
        let key = key as u64 + 20;
        // Means 60 apart: every density of the other states underflows
        // against the best one (dense transitions: certified anyway).
        let model = gaussian(n, key, 60.0 * n as f64, false);
        let (seqs, _) = hmm::simulate(&model, &lengths(100, 60, key), key);
        compare_passes(&model, &seqs, &format!("separated N={n}"));
        compare_fits(&model, &seqs, gaussian_params, &format!("separated fit N={n}"));
        // A zero in every transition row: the sparse certificate.
        let sparse = gaussian(n, key, 60.0 * n as f64, true);
        let (seqs, _) = hmm::simulate(&sparse, &lengths(100, 60, key + 1), key);
        compare_passes(&sparse, &seqs, &format!("sparse N={n}"));
        compare_fits(&sparse, &seqs, gaussian_params, &format!("sparse fit N={n}"));
    }
}

/// Few long sequences run parallel in time (the scan reads the density's
/// rows by position): each emission, well separated states (densities that
/// underflow against each other), and a count no state expects.
#[test]
fn long_sequences_run_parallel_in_time() {
    if !gpu_or_skip() {
        return;
    }
    for (key, &(n, spread)) in [(4usize, 8.0), (3, 180.0), (32, 8.0)].iter().enumerate() {
        let model = gaussian(n, 70 + key as u64, spread, false);
        let (seqs, _) = hmm::simulate(&model, &[60_000, 5_000, 1], key as u64);
        compare_passes(&model, &seqs, &format!("gaussian, one long sequence, N={n}, spread {spread}"));
        // Baum-Welch's E-steps by the scan, the emission's statistics
        // summed per chunk on the device.
        compare_fits(&gaussian(n, 90 + key as u64, spread, false), &seqs, gaussian_params, &format!("gaussian fit, one long sequence, N={n}, spread {spread}"));
    }
    // The only possible first state's density underflows against the
    // other's: the first step is uncertain, and the CPU computes it.
    let far = HmmModel::with_emission(vec![1.0, 0.0], vec![0.5; 4], Gaussian::new(vec![0.0, 100.0], vec![1.0, 1.0]).unwrap()).unwrap();
    let (mut seqs, _) = hmm::simulate(&far, &[6_000, 5_000], 9);
    seqs.symbols[0] = 100.0;
    compare_passes(&far, &seqs, "gaussian, first step underflows");
    compare_fits(&far, &seqs, gaussian_params, "gaussian fit, first step underflows");
    let model = poisson(5, 80, false);
    let (mut seqs, _) = hmm::simulate(&model, &[40_000], 3);
    seqs.symbols[20_000] = 400.0;
    compare_passes(&model, &seqs, "poisson, one long sequence");
    compare_fits(&poisson(5, 85, false), &seqs, poisson_params, "poisson fit, one long sequence");
}

#[test]
fn impossible_counts_agree() {
    if !gpu_or_skip() {
        return;
    }
    let m = HmmModel::with_emission(vec![1.0, 0.0], vec![1.0, 0.0, 0.0, 1.0], Poisson::new(vec![0.0, 3.0]).unwrap()).unwrap();
    let seqs = Sequences::from_vecs(&[vec![0.0, 0.0], vec![0.0, 2.0], vec![1.0]]);
    compare_passes(&m, &seqs, "impossible");
    assert_eq!(hmm::loglik(&m, &seqs, &cuda()).unwrap(), vec![0.0, f64::NEG_INFINITY, f64::NEG_INFINITY]);
}

/// An invalid observation (NaN, an infinity, a negative or fractional
/// count) sent to the GPU is tested on its way there, not before: every
/// pass refuses it with the CPU's error, wherever it lies (the first
/// staging chunk, a later one, the last value), in each GPU path (a
/// thread, a warp or a block per sequence, the scan of one long sequence,
/// sequences split into shares).
/// A forward pass whose rows are computed piece by piece while the
/// observations cross the bus (several staging pieces: 2, 4, 8 and 16 MB)
/// gives the CPU's log-likelihoods, for the thread-per-position rows (9-32
/// states) and the warp-per-position ones (more).
#[test]
fn rows_made_during_the_upload_give_the_cpus_logliks() {
    if !gpu_or_skip() {
        return;
    }
    // 10,000 sequences: at N = 9 and 32 the forward pass runs 16 of them a
    // warp (hmm_forward_mma) on a device of up to 178 multiprocessors.
    for (key, n) in [(0u64, 9usize), (1, 32), (2, 40)] {
        let model = gaussian(n, key + 200, 8.0, false);
        let (seqs, _) = hmm::simulate(&model, &lengths(10_000, 600, key), key);
        assert!(seqs.total() > 2_500_000, "past four staging pieces");
        let (a, b) = (hmm::loglik(&model, &seqs, &Exec::cpu()).unwrap(), hmm::loglik(&model, &seqs, &cuda()).unwrap());
        for (s, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "gaussian N={n}: loglik of sequence {s}: gpu {y} cpu {x}");
        }
    }
    let model = poisson(12, 210, false);
    let (seqs, _) = hmm::simulate(&model, &lengths(6000, 1000, 3), 3);
    let (a, b) = (hmm::loglik(&model, &seqs, &Exec::cpu()).unwrap(), hmm::loglik(&model, &seqs, &cuda()).unwrap());
    for (s, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "poisson N=12: loglik of sequence {s}: gpu {y} cpu {x}");
    }
}

#[test]
fn invalid_observations_are_refused_as_on_the_cpu() {
    if !gpu_or_skip() {
        return;
    }
    fn refused<E: Emission<Obs = f64>>(model: &HmmModel<E>, seqs: &Sequences<f64>, bad: f64, what: &str) {
        let total = seqs.total();
        // Staging chunks hold 524,288 doubles.
        for at in [3, 524_288 + 17, total - 1].into_iter().filter(|&at| at < total) {
            let mut s = seqs.clone();
            s.symbols[at] = bad;
            let expected = hmm::loglik(model, &s, &Exec::cpu()).unwrap_err().to_string();
            assert!(expected.contains("position"), "{what}: {expected}");
            for exec in [cuda(), Exec { gpu_parts: 3, ..cuda() }] {
                let why = |r: Result<(), bulkem_core::Error>| r.expect_err(what).to_string();
                assert_eq!(why(hmm::loglik(model, &s, &exec).map(|_| ())), expected, "{what} {bad} at {at}: loglik");
                assert_eq!(why(hmm::viterbi(model, &s, &exec).map(|_| ())), expected, "{what} {bad} at {at}: Viterbi");
                assert_eq!(why(hmm::viterbi_paths(model, &s, &exec).map(|_| ())), expected, "{what} {bad} at {at}: Viterbi paths");
                assert_eq!(why(hmm::posterior(model, &s, &exec).map(|_| ())), expected, "{what} {bad} at {at}: posteriors");
                assert_eq!(why(hmm::baum_welch_step(model, &s, &Default::default(), &exec).map(|_| ())), expected, "{what} {bad} at {at}: Baum-Welch step");
            }
        }
        // Valid again, after copies stopped part way: the CPU's results.
        let (a, b) = (hmm::loglik(model, seqs, &Exec::cpu()).unwrap(), hmm::loglik(model, seqs, &cuda()).unwrap());
        assert!(a.iter().zip(&b).all(|(x, y)| rel(*y, *x) <= GPU_CPU_LOGLIK_REL), "{what}: valid again");
    }
    for (key, (n, count, max)) in [(3usize, 3000usize, 400usize), (20, 2000, 600), (70, 400, 3000), (4, 1, 700_000)].into_iter().enumerate() {
        let key = key as u64 + 90;
        let model = gaussian(n, key, 8.0, false);
        let lens = if count == 1 { vec![max] } else { lengths(count, max, key) };
        let (seqs, _) = hmm::simulate(&model, &lens, key);
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            refused(&model, &seqs, bad, &format!("gaussian N={n} M={count}"));
        }
        let model = poisson(n, key, false);
        let (seqs, _) = hmm::simulate(&model, &lens, key);
        for bad in [-1.0, 2.5, f64::NAN] {
            refused(&model, &seqs, bad, &format!("poisson N={n} M={count}"));
        }
    }
}

/// The sequences spread over several shares (a fit over every visible
/// device by default; here also three shares given to the devices in turn) give every
/// sequence's log-likelihood, path and posteriors exactly as one share on
/// one device does, and a fit's counts summed over the shares agree to
/// rounding; for each emission, in each GPU size regime.
#[test]
fn shares_give_the_results_of_one_device() {
    if !gpu_or_skip() {
        return;
    }
    for parts in [0, 3] {
        shares_agree(&Exec { gpu_parts: parts, ..cuda() });
    }
}

fn shares_agree(split: &Exec) {
    let split = split.clone();
    fn same<E: Emission<Obs = f64>>(model: &HmmModel<E>, init: &HmmModel<E>, seqs: &Sequences<f64>, split: &Exec, what: &str, params: impl Fn(&E) -> Vec<f64>) {
        let one = Exec { gpu_parts: 1, ..cuda() };
        assert_eq!(hmm::loglik(model, seqs, &one).unwrap(), hmm::loglik(model, seqs, split).unwrap(), "{what}: loglik");
        let (a, b) = (hmm::viterbi(model, seqs, &one).unwrap(), hmm::viterbi(model, seqs, split).unwrap());
        assert_eq!((a.states, a.log_prob), (b.states, b.log_prob), "{what}: Viterbi");
        let (a, b) = (hmm::posterior(model, seqs, &one).unwrap(), hmm::posterior(model, seqs, split).unwrap());
        assert!(a.probs.iter().zip(&b.probs).all(|(x, y)| x == y || (x.is_nan() && y.is_nan())), "{what}: posteriors");
        assert_eq!(a.loglik, b.loglik, "{what}: posterior loglik");
        assert_eq!(posterior_laid_out(model, seqs, split), posterior_laid_out(model, seqs, &one), "{what}: posteriors into matrices");
        let ((ma, la), (mb, lb)) = (hmm::baum_welch_step(init, seqs, &Default::default(), &one).unwrap(), hmm::baum_welch_step(init, seqs, &Default::default(), split).unwrap());
        assert!(rel(lb, la) <= GPU_CPU_LOGLIK_REL, "{what}: one step split {lb} one {la}");
        let flat = |m: &HmmModel<E>| [m.start.clone(), m.trans.clone(), params(&m.emission)].concat();
        for (x, y) in flat(&ma).iter().zip(&flat(&mb)) {
            assert!((x - y).abs() <= GPU_CPU_PARAM_REL * x.abs().max(1e-3), "{what}: one step's parameter split {y} one {x}");
        }
        let config = HmmFitConfig::<E>::for_emission(init.n_states, init.emission.shape()).init(init.clone()).max_iters(6).epsilon(0.0).check().unwrap();
        let (a, b) = (hmm::fit(seqs, &config, &one).unwrap(), hmm::fit(seqs, &config, split).unwrap());
        for (x, y) in a.trace.iter().zip(&b.trace) {
            assert!(rel(*y, *x) <= GPU_CPU_LOGLIK_REL, "{what}: trace split {y} one {x}");
        }
        let flat = |m: &HmmModel<E>| [m.start.clone(), m.trans.clone(), params(&m.emission)].concat();
        for (x, y) in flat(&a.model).iter().zip(&flat(&b.model)) {
            assert!((x - y).abs() <= GPU_CPU_PARAM_REL * x.abs().max(1e-3), "{what}: parameter split {y} one {x}");
        }
    }
    for (key, &n) in [3usize, 40, 200].iter().enumerate() {
        let key = key as u64 + 70;
        let model = gaussian(n, key, 8.0, false);
        let (seqs, _) = hmm::simulate(&model, &lengths(if n > 100 { 50 } else { 200 }, 70, key), key);
        same(&model, &gaussian(n, key + 1, 8.0, false), &seqs, &split, &format!("gaussian N={n}"), gaussian_params);
        let model = poisson(n, key, false);
        let (seqs, _) = hmm::simulate(&model, &lengths(if n > 100 { 50 } else { 200 }, 70, key), key);
        same(&model, &poisson(n, key + 1, false), &seqs, &split, &format!("poisson N={n}"), poisson_params);
        // Categorical: the tables by symbol.
        let (start, trans) = chain(n, key, false);
        let v = 6;
        let emis: Vec<f64> = chain(v, key + 2, false).1[..n.min(v) * v].iter().cycle().take(n * v).copied().collect();
        let cat = HmmModel::new(start, trans, emis, v).unwrap();
        let (seqs, _) = hmm::simulate(&cat, &lengths(if n > 100 { 50 } else { 200 }, 70, key), key);
        let one = Exec { gpu_parts: 1, ..cuda() };
        assert_eq!(hmm::loglik(&cat, &seqs, &one).unwrap(), hmm::loglik(&cat, &seqs, &split).unwrap(), "categorical N={n}: loglik");
        let (a, b) = (hmm::viterbi(&cat, &seqs, &one).unwrap(), hmm::viterbi(&cat, &seqs, &split).unwrap());
        let (paths, logp) = hmm::viterbi_paths(&cat, &seqs, &split).unwrap();
        assert_eq!((paths.to_vec(), logp), (a.states.clone(), a.log_prob.clone()), "categorical N={n}: Viterbi paths as sent, shared");
        assert_eq!((a.states, a.log_prob), (b.states, b.log_prob), "categorical N={n}: Viterbi");
        let (a, b) = (hmm::posterior(&cat, &seqs, &one).unwrap(), hmm::posterior(&cat, &seqs, &split).unwrap());
        assert_eq!((a.probs, a.loglik), (b.probs, b.loglik), "categorical N={n}: posteriors");
        assert_eq!(posterior_laid_out(&cat, &seqs, &split), posterior_laid_out(&cat, &seqs, &one), "categorical N={n}: posteriors into matrices");
        let ((ma, la), (mb, lb)) = (hmm::baum_welch_step(&cat, &seqs, &Default::default(), &one).unwrap(), hmm::baum_welch_step(&cat, &seqs, &Default::default(), &split).unwrap());
        assert!(rel(lb, la) <= GPU_CPU_LOGLIK_REL, "categorical N={n}: one step split {lb} one {la}");
        for (x, y) in [ma.start, ma.trans, ma.emission.probs].concat().iter().zip(&[mb.start, mb.trans, mb.emission.probs].concat()) {
            assert!((x - y).abs() <= GPU_CPU_PARAM_REL * x.abs().max(1e-3), "categorical N={n}: one step's parameter split {y} one {x}");
        }
        let config = HmmFitConfig::new(n, v).init(cat.clone()).max_iters(6).epsilon(0.0).check().unwrap();
        let (a, b) = (hmm::fit(&seqs, &config, &one).unwrap(), hmm::fit(&seqs, &config, &split).unwrap());
        let flat = |m: &HmmModel| [m.start.clone(), m.trans.clone(), m.emission.probs.clone()].concat();
        for (x, y) in flat(&a.model).iter().zip(&flat(&b.model)) {
            assert!((x - y).abs() <= GPU_CPU_PARAM_REL * x.abs().max(1e-3), "categorical N={n}: parameter split {y} one {x}");
        }
    }
}
