//! `bulkem-bench hmm`: the forward log-likelihood, Viterbi and one
//! Baum-Welch iteration (E-step + M-step) over M random sequences of a
//! random model, median of 5 runs after a warm-up, as
//! ../shared/peers/torch_hmm.py does; and a 5-iteration Baum-Welch fit
//! (6 E-steps: the start's and one per iteration). GPU times are wall
//! clock and include copying the sequences to the device and the results
//! back; a second GPU line times the passes on sequences already on the
//! device, as the peer's are (`DeviceTimes` says what is inside).

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use bulkem_core::exec::{available_threads, Backend, Exec, Monitor};
use bulkem_core::hmm::gpu::ResidentPass;
use bulkem_core::hmm::{self, Emission, Gaussian, HmmFitConfig, HmmModel, Sequences};
use bulkem_core::rng::KeyedStream;

/// One problem size: N states, M sequences of length T, V symbols.
pub struct Case {
    pub states: usize,
    pub seqs: usize,
    pub length: usize,
    pub symbols: usize,
    /// Gaussian emissions (`--emission gaussian`) instead of categorical.
    pub gaussian: bool,
}

pub fn run(case: &Case, backends: &[Backend], threads: usize, json: &mut std::fs::File) -> Result<(), String> {
    force_kernels()?;
    if case.gaussian {
        return bench_gaussian(case.states, case.seqs, case.length, backends, threads, json);
    }
    bench_hmm(case.states, case.seqs, case.length, case.symbols, backends, threads, json)
}

/// `BULKEM_BENCH_TILING=wide|narrow`: the batched passes' tiling wherever
/// it fits (unset: chosen by the shape), `BULKEM_BENCH_BATCHED=1|0` and
/// `BULKEM_BENCH_SPLIT=1|0`, which kernels run (see below), to compare them
/// in one call.
fn force_kernels() -> Result<(), String> {
    use bulkem_core::hmm::gpu::{force_tiling, Tiling};
    match std::env::var("BULKEM_BENCH_TILING").as_deref() {
        Err(_) => {}
        Ok("wide") => force_tiling(Some(Tiling::Wide)),
        Ok("narrow") => force_tiling(Some(Tiling::Narrow)),
        Ok(other) => return Err(format!("BULKEM_BENCH_TILING={other}: wide or narrow")),
    }
    // BULKEM_BENCH_BATCHED=1|0: the batched kernels wherever they can run,
    // or only where they must.
    match std::env::var("BULKEM_BENCH_BATCHED").as_deref() {
        Err(_) => {}
        Ok("1") => bulkem_core::hmm::gpu::force_batched(Some(true)),
        Ok("0") => bulkem_core::hmm::gpu::force_batched(Some(false)),
        Ok(other) => return Err(format!("BULKEM_BENCH_BATCHED={other}: 1 or 0")),
    }
    // BULKEM_BENCH_SPLIT=1|0: the forward pass split over clusters
    // (hmm_forward_split) wherever it can run, or never.
    match std::env::var("BULKEM_BENCH_SPLIT").as_deref() {
        Err(_) => {}
        Ok("1") => bulkem_core::hmm::gpu::force_split(Some(true)),
        Ok("0") => bulkem_core::hmm::gpu::force_split(Some(false)),
        Ok(other) => return Err(format!("BULKEM_BENCH_SPLIT={other}: 1 or 0")),
    }
    Ok(())
}

/// The cases: the CPU target (1 thread), then the two GPU cases,
/// categorical and Gaussian.
pub fn suite(backends: &[Backend], threads: usize, json: &mut std::fs::File) -> Result<(), String> {
    force_kernels()?;
    bench_hmm(10, 50, 100, 10, &[Backend::Cpu], 1, json)?;
    bench_hmm(512, 512, 16, 512, backends, threads, json)?;
    bench_hmm(32, 10_000, 1000, 16, backends, threads, json)?;
    bench_gaussian(512, 512, 16, backends, threads, json)?;
    bench_gaussian(32, 10_000, 1000, backends, threads, json)?;
    // Issue 24's shapes: many states, many short sequences, one long one.
    bench_hmm(1024, 64, 256, 64, backends, threads, json)?;
    bench_gaussian(1024, 64, 256, backends, threads, json)?;
    bench_hmm(4, 100_000, 200, 8, backends, threads, json)?;
    bench_gaussian(4, 100_000, 200, backends, threads, json)?;
    bench_hmm(8, 1, 262_144, 16, backends, threads, json)?;
    bench_gaussian(8, 1, 262_144, backends, threads, json)
}

/// A random Gaussian HMM (rows uniform then normalised, uniform start;
/// means uniform on (-4, 4), sds on (0.5, 2), as
/// inst/bench/torch_hmm_gaussian.py) and M sequences of length T drawn
/// from it.
fn gaussian_problem(n: usize, m: usize, t: usize) -> (HmmModel<Gaussian>, Sequences<f64>) {
    let mut rng = KeyedStream::new(2, 0, 0);
    let trans: Vec<f64> = (0..n)
        .flat_map(|_| {
            let x: Vec<f64> = (0..n).map(|_| rng.uniform() + 1e-3).collect();
            let s: f64 = x.iter().sum();
            x.into_iter().map(move |p| p / s)
        })
        .collect();
    let g = Gaussian::new((0..n).map(|_| 8.0 * rng.uniform() - 4.0).collect(), (0..n).map(|_| 0.5 + 1.5 * rng.uniform()).collect()).expect("valid parameters");
    let model = HmmModel::with_emission(vec![1.0 / n as f64; n], trans, g).expect("rows normalised to sum 1");
    let (seqs, _) = hmm::simulate(&model, &vec![t; m], 3);
    (model, seqs)
}

/// The passes of a Gaussian HMM, end to end (observations from host
/// memory, results back), as [`bench_hmm`]'s first lines.
fn bench_gaussian(n: usize, m: usize, t: usize, backends: &[Backend], threads: usize, json: &mut std::fs::File) -> Result<(), String> {
    let (model, seqs) = gaussian_problem(n, m, t);
    for &backend in backends {
        bench_passes("gaussian", &model, &seqs, m, t, backend, threads, json)?;
        if backend == Backend::Cuda {
            let mut d = DeviceTimes { forward: 0.0, viterbi: 0.0, baum_welch: 0.0 };
            hmm::gpu::with_resident_density(&model, &seqs, &seqs.symbols, |pass, f| d.time(pass, f)).map_err(|e| e.to_string())?;
            d.report(&format!("hmm gaussian N={n} M={m} T={t} cuda, observations on the device"), &format!("\"emission\":\"gaussian\",\"states\":{n},\"seqs\":{m},\"length\":{t}"), json)?;
        }
    }
    Ok(())
}

/// Forward, Viterbi, one Baum-Welch iteration and a 5-iteration fit of
/// `model` over `seqs` on `backend`: printed and written to `json`.
#[allow(clippy::too_many_arguments)]
fn bench_passes<E: Emission>(label: &str, model: &HmmModel<E>, seqs: &Sequences<E::Obs>, m: usize, t: usize, backend: Backend, threads: usize, json: &mut std::fs::File) -> Result<(), String> {
    let n = model.n_states;
    let exec = Exec { backend, ..Exec::cpu().threads(threads) };
    let s = |e: bulkem_core::Error| e.to_string();
    bulkem_core::gpu::timing::take();
    let fwd = median_time(|| as_r(&exec, || hmm::loglik(model, seqs, &exec).map(|_| ()).map_err(s)))?;
    let fwd_phases = last_phases();
    // And with the model made as the glue makes it from R's matrices
    // (column-major: laid out row by row, then checked), kept between calls
    // as the glue keeps it (the pass run on it while its values are
    // compared), and made anew every call (a model's first call).
    let from_r = ColumnMajor::of(model);
    let forward_from_r = || from_r.run(model, &exec, |m, exec| hmm::loglik(m, seqs, exec).map(|_| ()).map_err(s)).map_err(s)?;
    let fwd_r = median_time(forward_from_r)?;
    let model_phases = last_phases_from(MODEL_FROM_R);
    let fwd_r_new = median_time(|| {
        hmm::forget_kept_models();
        forward_from_r()
    })?;
    let new_model_phases = last_phases_from(MODEL_FROM_R);
    hmm::forget_kept_models();
    let vit = median_time(|| as_r(&exec, || hmm::viterbi(model, seqs, &exec).map(|_| ()).map_err(s)))?;
    let vit_phases = last_phases();
    // What R's calls do: the paths widened into fresh vectors (the glue's
    // hmm::viterbi_into), the posteriors laid out into fresh matrices
    // (hmm::posterior_into), NA for impossible sequences.
    let vit_fill = |outs: &mut [&mut [i32]]| hmm::viterbi_into(model, seqs, &exec, outs, i32::MIN).map(|_| ()).map_err(s);
    let vit_bus = into_r_time(&exec, &seqs.offsets, 1, RResult::PerSequence, vit_fill)?;
    let vit_one = into_r_time(&exec, &seqs.offsets, 1, RResult::OneArray, vit_fill)?;
    let post = median_time(|| as_r(&exec, || hmm::posterior(model, seqs, &exec).map(|_| ()).map_err(s)))?;
    let post_phases = last_phases();
    let post_fill = |outs: &mut [&mut [f64]]| hmm::posterior_into(model, seqs, &exec, outs, f64::NAN).map(|_| ()).map_err(s);
    let post_r = into_r_time(&exec, &seqs.offsets, n, RResult::PerSequence, post_fill)?;
    let post_one = into_r_time(&exec, &seqs.offsets, n, RResult::OneArray, post_fill)?;
    let bw = median_time(|| as_r(&exec, || hmm::baum_welch_step(model, seqs, &Default::default(), &exec).map(|_| ()).map_err(s)))?;
    let bw_phases = last_phases();
    let config = HmmFitConfig::<E>::for_emission(n, model.emission.shape()).init(model.clone()).max_iters(5).epsilon(0.0).check().map_err(s)?;
    let fit5 = median_time(|| as_r(&exec, || hmm::fit(seqs, &config, &exec).map(|_| ()).map_err(s)))?;
    let fit_phases = last_phases();
    let threads_used = if threads == 0 { available_threads() } else { threads };
    println!(
        "hmm {label} N={n} M={m} T={t} {} ({} thread{}): forward {:.3} ms (model from R's matrices, kept {:.3} ms, new each call {:.3} ms), viterbi {:.3} ms (into R's vectors {:.3} ms, one R matrix {:.3} ms), posterior {:.3} ms (into R's matrices {:.3} ms, one R array {:.3} ms), baum-welch iter {:.3} ms, fit 5 iters {:.3} ms",
        backend.name(), threads_used, if threads_used == 1 { "" } else { "s" }, fwd * 1e3, fwd_r * 1e3, fwd_r_new * 1e3, vit * 1e3, vit_bus * 1e3, vit_one * 1e3, post * 1e3, post_r * 1e3, post_one * 1e3, bw * 1e3, fit5 * 1e3
    );
    if backend == Backend::Cuda {
        // What every call pays to hand its work to the call's thread pool
        // and take the result back, with no work.
        let within = median_time(|| exec.within(|| Ok::<(), String>(())))?;
        let polled = median_time(|| as_r(&exec, || Ok::<(), String>(())))?;
        let threaded = median_time(|| bulkem_core::exec::run_polled(&exec.monitor, POLL, || exec.within(|| Ok::<(), String>(())), |_| true))?;
        println!(
            "    phases of the last run (ms): forward {fwd_phases}; forward with the model from R's matrices, kept {model_phases}, new {new_model_phases}; viterbi {vit_phases}; posterior {post_phases}; baum-welch iter {bw_phases}; fit {fit_phases}; round trips of an empty call: in the pool {:.3}, as R calls {:.3}, through a thread of its own {:.3}",
            within * 1e3, polled * 1e3, threaded * 1e3
        );
        println!("    {}", exec.within(driver_costs)?);
    }
    writeln!(
        json,
        "{{\"area\":\"hmm\",\"emission\":\"{label}\",\"backend\":\"{}\",\"states\":{n},\"seqs\":{m},\"length\":{t},\"threads\":{threads_used},\"forward_ms\":{:.4},\"forward_r_model_ms\":{:.4},\"forward_r_new_model_ms\":{:.4},\"viterbi_ms\":{:.4},\"viterbi_paths_ms\":{:.4},\"posterior_ms\":{:.4},\"posterior_r_ms\":{:.4},\"posterior_array_ms\":{:.4},\"viterbi_matrix_ms\":{:.4},\"baum_welch_iter_ms\":{:.4},\"fit5_ms\":{:.4}}}",
        backend.name(), fwd * 1e3, fwd_r * 1e3, fwd_r_new * 1e3, vit * 1e3, vit_bus * 1e3, post * 1e3, post_r * 1e3, post_one * 1e3, vit_one * 1e3, bw * 1e3, fit5 * 1e3
    )
    .map_err(|e| e.to_string())
}

/// A random HMM (rows uniform then normalised, uniform start, as the peer)
/// and M random sequences of length T.
fn hmm_problem(n: usize, v: usize, m: usize, t: usize) -> (HmmModel, Sequences) {
    let mut rng = KeyedStream::new(0, 0, 0);
    let mut u = || ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let mut rows = |r: usize, c: usize| -> Vec<f64> {
        (0..r)
            .flat_map(|_| {
                let x: Vec<f64> = (0..c).map(|_| u()).collect();
                let s: f64 = x.iter().sum();
                x.into_iter().map(move |p| p / s)
            })
            .collect()
    };
    let (trans, emis) = (rows(n, n), rows(n, v));
    let model = HmmModel::new(vec![1.0 / n as f64; n], trans, emis, v).expect("rows normalised to sum 1");
    let mut rng = KeyedStream::new(1, 0, 0);
    let symbols = (0..m * t).map(|_| rng.below(v as u64) as u32).collect();
    let seqs = Sequences::from_lengths(symbols, &vec![t; m]).unwrap_or_default();
    (model, seqs)
}

/// What the host steps that every GPU call repeats cost on this machine,
/// run in the call's pool as a call's are (microseconds, median of 101
/// after a warm-up): reading the free memory, a memory share for a small
/// need, a small packed upload (three arrays, 12 KiB) with its allocation,
/// the parts of such an upload (an allocation, a copy from pinned memory,
/// an event's record), a small zeroed allocation, and a stream
/// synchronisation with nothing queued.
fn driver_costs() -> Result<String, String> {
    let dev = &bulkem_core::gpu::devices().map_err(|e| e.to_string())?[0];
    let s = |e: bulkem_core::Error| e.to_string();
    let d = |e: cudarc::driver::DriverError| e.to_string();
    let a = vec![1u8; 4096];
    let mut pinned = unsafe { dev.ctx.alloc_pinned::<u8>(3 * 4096) }.map_err(d)?;
    pinned.as_mut_slice().map_err(d)?.fill(1);
    let mut target = dev.stream.alloc_zeros::<u8>(3 * 4096).map_err(d)?;
    let event = dev.ctx.new_event(None).map_err(d)?;
    let costs = [
        ("free memory", micros(|| dev.free_memory().map(|_| ()).map_err(s))?),
        ("small share", micros(|| dev.memory_share(0.5, 1).map(|_| ()).map_err(s))?),
        ("packed upload", micros(|| dev.upload_packed([&a[..], &a[..], &a[..]]).map(|_| ()).map_err(s))?),
        // SAFETY: the buffer is dropped unread.
        ("allocation", micros(|| unsafe { dev.stream.alloc::<u8>(3 * 4096) }.map(|_| ()).map_err(d))?),
        ("zeroed allocation", micros(|| dev.stream.alloc_zeros::<f64>(512).map(|_| ()).map_err(d))?),
        ("pinned copy", micros(|| dev.stream.memcpy_htod(&pinned, &mut target).map_err(d))?),
        ("event record", micros(|| event.record(&dev.stream).map_err(d))?),
        ("synchronisation", micros(|| dev.stream.synchronize().map_err(d))?),
    ];
    Ok(format!("host steps (us): {}", costs.iter().map(|(k, t)| format!("{k} {t:.1}")).collect::<Vec<_>>().join(", ")))
}

/// Median microseconds of 101 runs of `f` after one.
fn micros(mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    f()?;
    let mut times = Vec::with_capacity(101);
    for _ in 0..101 {
        let t0 = Instant::now();
        f()?;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[50])
}

/// How often R's main thread polls for an interrupt (the glue's POLL).
const POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// `work` run as the R glue runs a call: in the call's pool, the calling
/// thread waiting for it (`Exec::run_polled`).
fn as_r<T: Send>(exec: &Exec, work: impl FnOnce() -> T + Send) -> T {
    exec.run_polled(POLL, work, |_| true)
}

/// The phases `gpu::timing` recorded in the last run of a
/// [`median_time`] (ms), and the slate cleared: every run records the same
/// phases, each starting with "validation".
fn last_phases() -> String {
    last_phases_from("validation")
}

/// The phase that starts a run of the forward pass with the model made as
/// from R's matrices.
const MODEL_FROM_R: &str = "model from R's matrices";

/// [`last_phases`] of runs that each start with phase `first`.
fn last_phases_from(first: &str) -> String {
    let all = bulkem_core::gpu::timing::take();
    let last = all.iter().rposition(|(p, _)| *p == first).unwrap_or(0);
    all[last..].iter().map(|(p, t)| format!("{p} {:.3}", t * 1e3)).collect::<Vec<_>>().join(", ")
}

/// Median seconds of 5 runs after one warm-up run.
fn median_time<E>(mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    median_of(|| {
        let t0 = Instant::now();
        f()?;
        Ok(t0.elapsed().as_secs_f64())
    })
}

/// A model's matrices as R holds them (column by column): the transitions,
/// and a categorical emission's probabilities; and the values the glue
/// keys a kept model by (start, transitions, the emission's shape and
/// parameters).
struct ColumnMajor {
    trans: Vec<f64>,
    emis: Option<Vec<f64>>,
    key: Vec<Vec<f64>>,
}

impl ColumnMajor {
    fn of<E: Emission>(model: &HmmModel<E>) -> Self {
        let n = model.n_states;
        let cols = |a: &[f64], rows: usize, cols: usize| (0..rows * cols).map(|k| a[(k % rows) * cols + k / rows]).collect::<Vec<f64>>();
        let emission = &model.emission as &dyn std::any::Any;
        let cat = emission.downcast_ref::<hmm::Categorical>();
        let emis = cat.map(|c| cols(&c.probs, n, c.n_symbols));
        let trans = cols(&model.trans, n, n);
        let params = match (cat.zip(emis.as_ref()), emission.downcast_ref::<Gaussian>()) {
            (Some((c, cm)), _) => vec![vec![c.n_symbols as f64], cm.clone()],
            (None, Some(g)) => vec![Vec::new(), g.mean.clone(), g.sd.clone()],
            _ => panic!("the bench keys categorical and Gaussian emissions only"),
        };
        let key = [vec![model.start.clone(), trans.clone()], params].concat();
        ColumnMajor { trans, emis, key }
    }

    /// `pass` as the R glue runs it on the model from these: in one
    /// hand-off to the call's pool on the kept model
    /// (`hmm::on_kept_model`), else on the model made as [`Self::made`]
    /// makes it, in a second; each with a fresh monitor, as R's calls.
    fn run<E: Emission, T: Send>(&self, model: &HmmModel<E>, exec: &Exec, pass: impl Fn(&HmmModel<E>, &Exec) -> T + Sync) -> bulkem_core::Result<T> {
        bulkem_core::gpu::timing::record(MODEL_FROM_R, Instant::now());
        let key: Vec<&[f64]> = self.key.iter().map(|k| &k[..]).collect();
        let fresh = || Exec { monitor: Arc::new(Monitor::new()), ..exec.clone() };
        let call = fresh();
        let t0 = Instant::now();
        if let Some(out) = as_r(&call, || hmm::on_kept_model(&key, &call, |m| pass(m, &call))) {
            bulkem_core::gpu::timing::record("pass on the kept model", t0);
            return Ok(out);
        }
        bulkem_core::gpu::timing::record("no kept model", t0);
        let t0 = Instant::now();
        let m = self.made(model, exec)?;
        bulkem_core::gpu::timing::record("model made", t0);
        let call = fresh();
        let t0 = Instant::now();
        let out = as_r(&call, || pass(&m, &call));
        bulkem_core::gpu::timing::record("pass on the model made", t0);
        Ok(out)
    }

    /// The model as the R glue makes it from these when none is kept for
    /// them: laid out (`hmm::row_major`), checked and kept, in the call's
    /// pool; `model` gives the rest.
    fn made<E: Emission>(&self, model: &HmmModel<E>, exec: &Exec) -> bulkem_core::Result<Arc<HmmModel<E>>> {
        let key: Vec<&[f64]> = self.key.iter().map(|k| &k[..]).collect();
        Exec::cpu().threads(exec.threads).within(|| {
            let m = self.model_here(model)?;
            let t0 = Instant::now();
            let kept = hmm::keep_model(&key, m);
            bulkem_core::gpu::timing::record("model kept", t0);
            Ok(kept)
        })
    }

    fn model_here<E: Emission>(&self, model: &HmmModel<E>) -> bulkem_core::Result<HmmModel<E>> {
        let n = model.n_states;
        let rows = |a: &[f64], r: usize, c: usize| hmm::row_major(a, r, c).expect("a matrix of its size");
        // A categorical emission from its column-major probabilities; the
        // others' few parameters as they are.
        let emission = match (&self.emis, (&model.emission as &dyn std::any::Any).downcast_ref::<hmm::Categorical>()) {
            (Some(cm), Some(cat)) => {
                let t0 = Instant::now();
                let probs = rows(cm, n, cat.n_symbols)?;
                bulkem_core::gpu::timing::record("emission layout", t0);
                let t0 = Instant::now();
                let made: Box<dyn std::any::Any> = Box::new(hmm::Categorical::new(n, cat.n_symbols, probs)?);
                bulkem_core::gpu::timing::record("emission checks", t0);
                *made.downcast::<E>().expect("the emission is categorical")
            }
            _ => model.emission.clone(),
        };
        let t0 = Instant::now();
        let trans = rows(&self.trans, n, n)?;
        bulkem_core::gpu::timing::record("transitions layout", t0);
        let t0 = Instant::now();
        let m = HmmModel::with_emission(model.start.clone(), trans, emission);
        bulkem_core::gpu::timing::record("model checks", t0);
        m
    }
}

/// How an R call returns a pass's values: one vector per sequence (the
/// default), or one array of them all (`simplify = TRUE`, sequences of
/// one length).
#[derive(Clone, Copy)]
enum RResult {
    PerSequence,
    OneArray,
}

/// Median seconds of what an R call does with a result of `width` values
/// per observation: its vectors (`shape`) allocated on the calling thread
/// as R's allocVector leaves them (malloc'd, unmapped pages: zeroed vectors
/// cost a memset here that R does not do, 11-13 of 15-18 ms at N = 512 on
/// an H200's host), then `fill` in the pool, as the glue does. The vectors
/// are freed outside the timing, as R frees them later.
fn into_r_time<T: Copy + Send>(exec: &Exec, offsets: &[usize], width: usize, shape: RResult, fill: impl Fn(&mut [&mut [T]]) -> Result<(), String> + Sync) -> Result<f64, String> {
    median_of(|| {
        let t0 = Instant::now();
        let total = offsets.last().copied().unwrap_or(0) * width;
        let mut bufs: Vec<RVector<T>> = match shape {
            RResult::PerSequence => offsets.windows(2).map(|w| RVector::new((w[1] - w[0]) * width)).collect(),
            RResult::OneArray => vec![RVector::new(total)],
        };
        let mut outs: Vec<&mut [T]> = match shape {
            RResult::PerSequence => bufs.iter_mut().map(RVector::values).collect(),
            // The glue cuts the array into each sequence's matrix.
            RResult::OneArray => hmm::layout::per_sequence(bufs[0].values(), offsets, width),
        };
        as_r(exec, || fill(&mut outs))?;
        let elapsed = t0.elapsed().as_secs_f64();
        drop(outs);
        drop(bufs);
        Ok(elapsed)
    })
}

/// A vector's memory as R allocates it: uninitialised, from malloc.
struct RVector<T> {
    ptr: *mut T,
    len: usize,
}

impl<T: Copy> RVector<T> {
    fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::array::<T>(len.max(1)).expect("a vector R could allocate");
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { std::alloc::alloc(layout) }.cast::<T>();
        assert!(!ptr.is_null(), "out of memory");
        RVector { ptr, len }
    }

    /// The values, every one written by the fill before any is read (as
    /// the glue does with R's vectors).
    fn values(&mut self) -> &mut [T] {
        // SAFETY: ptr holds len values of T, owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T> Drop for RVector<T> {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::array::<T>(self.len.max(1)).expect("allocated with it");
        // SAFETY: allocated in new() with this layout.
        unsafe { std::alloc::dealloc(self.ptr.cast(), layout) };
    }
}

/// Median of 5 of the times `f` returns (seconds), after a warm-up.
fn median_of<E>(mut f: impl FnMut() -> Result<f64, E>) -> Result<f64, E> {
    f()?;
    let mut times = (0..5).map(|_| f()).collect::<Result<Vec<f64>, E>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[2])
}

/// Device times of the passes with the sequences already on the device, for
/// comparison with peers that time kernels on resident data (seconds,
/// median of 5 runs after a warm-up, each ending with a stream
/// synchronisation). Forward: the log-likelihood kernel only. Viterbi: the
/// kernel, paths left on the device. Baum-Welch: one iteration as a fit
/// runs it: the M-step on the device, then the E-step (forward storing
/// alphas, backward with counts, reduction) with the per-sequence
/// log-likelihoods copied out.
struct DeviceTimes {
    forward: f64,
    viterbi: f64,
    baum_welch: f64,
}

impl DeviceTimes {
    /// Time `pass` (median of 5 runs of `f`).
    fn time(&mut self, pass: ResidentPass, f: &mut dyn FnMut() -> Result<(), bulkem_core::Error>) -> Result<(), bulkem_core::Error> {
        let t = median_time(f)?;
        match pass {
            ResidentPass::Forward => self.forward = t,
            ResidentPass::Viterbi => self.viterbi = t,
            ResidentPass::BaumWelch => self.baum_welch = t,
        }
        Ok(())
    }

    /// Print the times after `label`, and write them to `json` with the
    /// case's `fields`.
    fn report(&self, label: &str, fields: &str, json: &mut std::fs::File) -> Result<(), String> {
        println!("{label}: forward {:.3} ms, viterbi {:.3} ms, baum-welch iter {:.3} ms", self.forward * 1e3, self.viterbi * 1e3, self.baum_welch * 1e3);
        writeln!(
            json,
            "{{\"area\":\"hmm\",\"backend\":\"cuda-resident\",{fields},\"forward_ms\":{:.4},\"viterbi_ms\":{:.4},\"baum_welch_iter_ms\":{:.4}}}",
            self.forward * 1e3,
            self.viterbi * 1e3,
            self.baum_welch * 1e3
        )
        .map_err(|e| e.to_string())
    }
}

/// [`DeviceTimes`] of `model` over `seqs` (hmm::gpu::with_resident_passes
/// uploads them once and hands over each pass).
fn time_device(model: &HmmModel, seqs: &Sequences) -> Result<DeviceTimes, bulkem_core::Error> {
    let mut d = DeviceTimes { forward: 0.0, viterbi: 0.0, baum_welch: 0.0 };
    hmm::gpu::with_resident_passes(model, seqs, |pass, f| d.time(pass, f))?;
    Ok(d)
}

fn bench_hmm(n: usize, m: usize, t: usize, v: usize, backends: &[Backend], threads: usize, json: &mut std::fs::File) -> Result<(), String> {
    let (model, seqs) = hmm_problem(n, v, m, t);
    for &backend in backends {
        bench_passes("categorical", &model, &seqs, m, t, backend, threads, json)?;
        let s = |e: bulkem_core::Error| e.to_string();
        if backend == Backend::Cuda {
            // Like for like with the peer: sequences already on the device.
            let d = time_device(&model, &seqs).map_err(s)?;
            d.report(&format!("hmm N={n} M={m} T={t} V={v} cuda, data on the device"), &format!("\"states\":{n},\"seqs\":{m},\"length\":{t},\"symbols\":{v}"), json)?;
        }
    }
    Ok(())
}


/// `bulkem-bench hmm-choice`: for shapes around the backend choice's
/// crossings (one short sequence; few long ones, parallel in time or not;
/// fewer sequences than fill a GPU; many short ones; many states), the
/// forward pass and one Baum-Welch iteration as R calls them on each
/// backend (median of 3 after a warm-up), beside `hmm::job`'s estimates
/// of both and whether `use.gpu = NA` would take the faster.
pub fn choice(backends: &[Backend], threads: usize, json: &mut std::fs::File) -> Result<(), String> {
    let threads = if threads == 0 { available_threads() } else { threads };
    println!("hmm-choice on {threads} CPU threads: shape | forward: cpu, gpu measured (model) ms, choice | baum-welch iteration: the same");
    // BULKEM_CHOICE_SHAPES="N,M,T,g;...": other shapes (g: 1 for Gaussian).
    let given: Option<Vec<(usize, usize, usize, bool)>> = std::env::var("BULKEM_CHOICE_SHAPES").ok().map(|v| {
        v.split(';')
            .filter_map(|s| {
                let f: Vec<usize> = s.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                (f.len() == 4).then(|| (f[0], f[1], f[2], f[3] == 1))
            })
            .collect()
    });
    #[rustfmt::skip]
    let default: &[(usize, usize, usize, bool)] = &[
        (2, 1, 100, false), (4, 1, 10_000, false), (8, 1, 4_096, false), (8, 1, 32_768, false), (8, 1, 262_144, false),
        (32, 1, 65_536, false), (8, 16, 16_384, false), (8, 200, 10_000, false), (8, 2_000, 1_000, false),
        (4, 100, 1_000, false), (8, 200, 1_000, false), (16, 10, 1_000, false), (64, 10, 100, false),
        (4, 1_000, 100, false), (4, 10_000, 100, false), (4, 100_000, 200, false), (16, 1_000, 100, false),
        (32, 1_000, 100, false), (32, 10_000, 1_000, false), (64, 100, 100, false), (64, 1_000, 100, false),
        (128, 10, 100, false), (128, 100, 200, false), (256, 10, 100, false), (512, 1, 100, false),
        (512, 512, 16, false), (1024, 1, 64, false), (1024, 64, 256, false),
        (4, 1_000, 100, true), (4, 100_000, 200, true), (32, 1_000, 100, true), (8, 1, 32_768, true), (128, 100, 100, true),
    ];
    for &(n, m, t, gaussian) in given.as_deref().unwrap_or(default) {
        let (label, shape, fwd, bw) = if gaussian {
            let (model, seqs) = gaussian_problem(n, m, t);
            let times = choice_times(&model, &seqs, backends, threads)?;
            ("gaussian", hmm::CallShape::of(n, &seqs, threads), times.0, times.1)
        } else {
            let (model, seqs) = hmm_problem(n, 16, m, t);
            let times = choice_times(&model, &seqs, backends, threads)?;
            ("categorical", hmm::CallShape::of(n, &seqs, threads), times.0, times.1)
        };
        let row = |(forward, e_steps): (usize, usize), measured: [Option<f64>; 2]| {
            let job = hmm::job(&shape.passes(forward, e_steps));
            let (cpu, gpu) = (job.work * 1e3, job.gpu_min_work * 1e3);
            let chosen = if job.work >= job.gpu_min_work { "gpu" } else { "cpu" };
            let faster = match measured {
                [Some(c), Some(g)] => if g < c { "gpu" } else { "cpu" },
                _ => "?",
            };
            let ms = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.3}"));
            (format!("{} ({cpu:.3}), {} ({gpu:.3}), takes {chosen}{}", ms(measured[0]), ms(measured[1]), if faster == "?" || faster == chosen { String::new() } else { format!(" (the {faster} is faster)") }), chosen, faster)
        };
        let (f, fc, ff) = row((1, 0), fwd);
        let (b, bc, bf) = row((0, 1), bw);
        println!("{label} N={n} M={m} T={t} | {f} | {b}");
        let ms = |x: Option<f64>| x.map_or("null".to_string(), |x| format!("{x:.4}"));
        writeln!(
            json,
            "{{\"area\":\"hmm-choice\",\"emission\":\"{label}\",\"states\":{n},\"seqs\":{m},\"length\":{t},\"threads\":{threads},\"forward_cpu_ms\":{},\"forward_gpu_ms\":{},\"forward_choice\":\"{fc}\",\"forward_faster\":\"{ff}\",\"bw_cpu_ms\":{},\"bw_gpu_ms\":{},\"bw_choice\":\"{bc}\",\"bw_faster\":\"{bf}\"}}",
            ms(fwd[0]), ms(fwd[1]), ms(bw[0]), ms(bw[1])
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The forward pass's and a Baum-Welch iteration's milliseconds on the
/// CPU and on the GPU (None for a backend not in `backends`).
#[allow(clippy::type_complexity)]
fn choice_times<E: Emission>(model: &HmmModel<E>, seqs: &Sequences<E::Obs>, backends: &[Backend], threads: usize) -> Result<([Option<f64>; 2], [Option<f64>; 2]), String> {
    let s = |e: bulkem_core::Error| e.to_string();
    let (mut fwd, mut bw) = ([None; 2], [None; 2]);
    for &backend in backends {
        let exec = Exec { backend, ..Exec::cpu().threads(threads) };
        let i = usize::from(backend == Backend::Cuda);
        let median3 = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
            f()?;
            let mut t: Vec<f64> = (0..3).map(|_| { let t0 = Instant::now(); f().map(|_| t0.elapsed().as_secs_f64() * 1e3) }).collect::<Result<_, _>>()?;
            t.sort_by(f64::total_cmp);
            Ok(t[1])
        };
        fwd[i] = Some(median3(&mut || as_r(&exec, || hmm::loglik(model, seqs, &exec).map(|_| ()).map_err(s)))?);
        bw[i] = Some(median3(&mut || as_r(&exec, || hmm::baum_welch_step(model, seqs, &Default::default(), &exec).map(|_| ()).map_err(s)))?);
    }
    Ok((fwd, bw))
}
