//! Which backend answers an HMM call sooner: the job `use.gpu = NA` sees
//! (for [`crate::exec::choose_backend`]), the call's estimated seconds on
//! the CPU as its work and on a GPU as the work from which the GPU answers
//! sooner. Both model what each backend runs for the call's shape (its
//! sequences' count and longest length, not only its observations), fitted
//! to measured times: BENCHMARKS.md, "HMM backend choice by the call's
//! shape" (`bulkem-bench hmm-choice`).
//!
//! A process's first GPU call also compiles its kernels (0.2-6 s), once per
//! machine with the kernel cache (`gpu::cache`); the models leave that out.

use super::cpu;
use super::gpu;
use super::scan;
use super::sequences::Sequences;
use crate::exec::Job;

/// An HMM call as the backend choice sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallShape {
    /// N.
    pub states: usize,
    /// Sequences in the call.
    pub sequences: usize,
    /// Observations in all of them.
    pub total: usize,
    /// The longest sequence's length.
    pub longest: usize,
    /// Forward passes (a log-likelihood's, a Viterbi pass's).
    pub forward: usize,
    /// Forward-backward passes (a posterior's; a fit's E-steps, one per
    /// iteration and start).
    pub e_steps: usize,
    /// The CPU's threads (0: every available thread).
    pub threads: usize,
    /// Bytes per observation: 4 for a categorical symbol, 8 for a density's
    /// value (which also costs its N densities per observation).
    pub obs_bytes: usize,
}

impl CallShape {
    /// One forward pass over `seqs` with `states` states on `threads` CPU
    /// threads.
    pub fn of<O: Copy>(states: usize, seqs: &Sequences<O>, threads: usize) -> Self {
        let longest = seqs.lengths().max().unwrap_or(0);
        CallShape { states, sequences: seqs.len(), total: seqs.total(), longest, forward: 1, e_steps: 0, threads, obs_bytes: std::mem::size_of::<O>() }
    }
    /// `sequences` sequences of `length` categorical symbols each, one
    /// forward pass on every thread.
    pub fn even(states: usize, sequences: usize, length: usize) -> Self {
        CallShape { states, sequences, total: sequences.saturating_mul(length), longest: length, forward: 1, e_steps: 0, threads: 0, obs_bytes: 4 }
    }
    /// `forward` forward passes and `e_steps` forward-backward passes.
    pub fn passes(self, forward: usize, e_steps: usize) -> Self {
        CallShape { forward, e_steps, ..self }
    }
    pub fn threads(self, threads: usize) -> Self {
        CallShape { threads, ..self }
    }
    pub fn obs_bytes(self, obs_bytes: usize) -> Self {
        CallShape { obs_bytes, ..self }
    }
    fn density(&self) -> bool {
        self.obs_bytes > 4
    }
    fn threads_used(&self) -> usize {
        if self.threads == 0 { crate::exec::available_threads() } else { self.threads }.max(1)
    }
}

/// The job of an HMM call: its CPU and GPU seconds ([`cpu_seconds`],
/// [`gpu_seconds`]) and whether the GPU kernels take its states at all.
pub fn job(shape: &CallShape) -> Job {
    let states = shape.states;
    let unsupported = (states > gpu::MAX_GPU_STATES).then(|| format!("the GPU kernels handle up to {} states, not {states}", gpu::MAX_GPU_STATES));
    Job { work: cpu_seconds(shape), gpu_min_work: gpu_seconds(shape), gpu_unsupported: unsupported }
}

/// One thread's nanoseconds per observation of a forward pass when it runs
/// alone: 30 + 4 N + 0.23 N^2 (measured at N = 2 to 128), 0.5 N^2 once the
/// transitions outgrow the core's cache (measured at 512 and 1,024 states,
/// not at 300), plus a density's N log-densities.
fn cpu_forward_ns(n: f64, density: bool) -> f64 {
    let products = if n > 400.0 { 0.5 * n * n } else { 0.23 * n * n };
    30.0 + 4.0 * n + products + if density { CPU_DENSITY_NS * n } else { 0.0 }
}

/// One thread's nanoseconds per observation of a forward-backward pass: two
/// passes, and the expected transitions' N^2 products (measured 1.8-4.9x
/// the forward pass, more with more states).
fn cpu_e_step_ns(n: f64, density: bool) -> f64 {
    2.0 * cpu_forward_ns(n, density) + 0.75 * n * n
}

/// One thread's nanoseconds for a density's log-density of one state.
const CPU_DENSITY_NS: f64 = 6.0;

/// How much slower each thread runs with `busy` threads busy: up to 2x at
/// 16 (the H200 host's 16 threads, against one alone).
fn cpu_contention(busy: usize) -> f64 {
    1.0 + (busy.max(1) - 1).min(15) as f64 / 15.0
}

/// The scan's work over the sequential recursions', per state: measured on
/// 16 threads at N = 8 it was 1.1-2.1x slower than one thread's sequential
/// pass, about 3N times its work.
const CPU_SCAN_WORK: f64 = 3.0;

/// The CPU's seconds for passes of `ns` nanoseconds per observation: the
/// sequences in chunks (`cpu::chunks`) over the threads, in rounds of as
/// many chunks as threads, no sooner than the longest sequence alone; or,
/// where the CPU takes the scan ([`scan::worthwhile`]: few long sequences
/// on many threads), its N-fold work over every thread.
fn cpu_pass_seconds(s: &CallShape, ns: f64) -> f64 {
    let (n, threads) = (s.states as f64, s.threads_used());
    let (total, step) = (s.total as f64, ns * 1e-9);
    if scan::worthwhile(s.states, s.sequences, s.longest, threads) {
        return total * step * CPU_SCAN_WORK * n / threads as f64;
    }
    let chunks = cpu_chunks(s);
    let (busy, rounds) = (threads.min(chunks), chunks.div_ceil(threads) as f64);
    (rounds * total * step * cpu_contention(busy) / chunks as f64).max(s.longest as f64 * step)
}

/// About how many chunks `cpu::chunks` makes of the call's sequences.
fn cpu_chunks(s: &CallShape) -> usize {
    s.sequences.min(s.total.div_ceil(cpu::min_chunk_symbols(s.states))).clamp(1, cpu::MAX_CHUNKS)
}

/// The CPU's seconds for the call.
pub fn cpu_seconds(s: &CallShape) -> f64 {
    let (n, density) = (s.states as f64, s.density());
    let woken = s.threads_used().min(cpu_chunks(s)) as f64;
    CPU_CALL + CPU_THREAD * woken + s.forward as f64 * cpu_pass_seconds(s, cpu_forward_ns(n, density)) + s.e_steps as f64 * cpu_pass_seconds(s, cpu_e_step_ns(n, density))
}

/// A CPU call's own seconds (its pool's hand-offs, the model's tables),
/// and each thread's it wakes.
const CPU_CALL: f64 = 50e-6;
const CPU_THREAD: f64 = 25e-6;

/// Multiprocessors the GPU model assumes (an H100's and an H200's 132):
/// fewer sequences than this run by the scan where they are long enough
/// (`gpu::scan::chosen`).
const GPU_MULTIPROCESSORS: usize = 132;

/// The GPU's seconds for the call, from host memory: per call 0.15 ms
/// (0.3 ms for a density, whose rows take a second stream), the model's
/// tables at 25 GB/s and the observations' test and copy (categorical
/// symbols cross as bytes: 0.05 ns each; a density's values 0.35 ns); then
/// its passes ([`gpu_pass_seconds`]).
pub fn gpu_seconds(s: &CallShape) -> f64 {
    let n = s.states as f64;
    let tables = 8.0 * n * (n + n.max(16.0)) / 25e9;
    let (fixed, copy) = if s.density() { (2.0 * GPU_CALL, 0.35e-9) } else { (GPU_CALL, 0.05e-9) };
    let call = fixed + tables + s.total as f64 * copy;
    call + s.forward as f64 * gpu_pass_seconds(s, false) + s.e_steps as f64 * gpu_pass_seconds(s, true)
}

/// One pass's seconds on the GPU, a forward pass or (`e_step`) a
/// forward-backward one: 20 us plus the larger of the observations'
/// throughput ([`gpu_obs_ns`]) and the longest sequence's steps one after
/// another ([`gpu_step_ns`], which bound it when too few sequences fill the
/// device); or, for few long sequences at up to 32 states, the scan.
fn gpu_pass_seconds(s: &CallShape, e_step: bool) -> f64 {
    let (n, total) = (s.states as f64, s.total as f64);
    let scanned = s.states <= gpu::SCAN_MAX_STATES && s.sequences <= GPU_MULTIPROCESSORS && s.longest >= scan::MIN_STEPS;
    let seconds = if scanned {
        let forward = GPU_SCAN_START + (total * gpu_scan_ns(n)).max(s.longest as f64 * gpu_scan_step_ns(n)) * 1e-9;
        // Measured: the forward-backward scan took 1.2x the forward one's
        // products, 0.5 ms more and 4 ns an observation more.
        if e_step { 1.2 * forward + 0.5e-3 + 4e-9 * total } else { forward }
    } else {
        // A forward-backward pass: 2.1-2.6 forward passes' time at many
        // sequences. Where few sequences leave the steps' latency bare: up
        // to 8 states a thread per sequence runs the backward steps and adds
        // their counts; 2 up to 32 (a warp per sequence), 2.5 beyond.
        let (through, latency) = match (e_step, n) {
            (false, _) => (1.0, 1.0),
            // A thread per sequence, a block of them per multiprocessor: a
            // step takes 0.3 + 0.15 N us alone (measured 0.64 us at N = 2,
            // 0.87 at 4, 1.6 at 8), up to 3x that as the block fills (1.9 at
            // N = 4, M = 100; 3.6 and 4.5 at N = 8, M = 200 and 2,000).
            (true, n) if n <= 8.0 => (2.5, (300.0 + 150.0 * n) / gpu_step_ns(n) * (1.0 + s.sequences as f64 / 150.0).min(3.0)),
            (true, n) if n <= 32.0 => (2.5, 2.0),
            // A block per sequence up to 128 states: 1.8-2.0 forward steps
            // (measured 3.5 us a step at N = 48, 3.7 at 64, 5.5 at 128).
            (true, n) if n <= 128.0 => (2.5, 1.9),
            (true, _) => (2.5, 2.5),
        };
        // From 33 to 128 states a forward pass runs hmm_forward_group, at
        // its own rates; the forward-backward pass keeps the kernels above.
        let (obs_ns, step_ns) = if !e_step && gpu::group_path(s.states) {
            (gpu_group_obs_ns(n) + density_ns(n, s.density()), gpu_group_step_ns(n))
        } else {
            (gpu_obs_ns(n, s.density()), gpu_step_ns(n))
        };
        let per_sequence = s.sequences as f64 * GPU_SEQUENCE_NS;
        (through * (total * obs_ns + per_sequence)).max(latency * s.longest as f64 * step_ns) * 1e-9
    };
    20e-6 + seconds
}

/// A GPU call's own seconds (measured 0.13-0.2 ms for the smallest calls
/// on an H200).
const GPU_CALL: f64 = 0.15e-3;

/// A pass's nanoseconds per sequence (its offsets, its result; measured
/// 10,000 sequences of 10 at 2 states).
const GPU_SEQUENCE_NS: f64 = 30.0;

/// Nanoseconds per observation of a pass that fills the device: 0.1 up to
/// 8 states (a thread per sequence), 0.25 up to 32; beyond, the batched
/// kernels' N^2 products, slower per state at 64 to 256 states; plus a
/// density's rows.
fn gpu_obs_ns(n: f64, density: bool) -> f64 {
    let products = if n <= 8.0 { 0.1 } else if n <= 32.0 { 0.25 } else { (0.08 * n).max(1.9e-4 * n * n) };
    products + density_ns(n, density)
}

/// A density's rows: nanoseconds per observation.
fn density_ns(n: f64, density: bool) -> f64 {
    if density { 0.01 * n } else { 0.0 }
}

/// Nanoseconds of one step of one sequence when the device has room: a
/// warp's step up to 32 states, a grid's (with its barrier) beyond.
fn gpu_step_ns(n: f64) -> f64 {
    if n <= 32.0 { 450.0 } else { 1000.0 + 16.0 * n }
}

/// A forward pass's nanoseconds per observation from 33 to 128 states
/// (`gpu::group_path`), where 16 sequences a block run a step as one
/// tensor-core product: N = 128, 5,000 sequences of 100 took 0.57 ms on
/// the device (1.1 ns; BENCHMARKS.md, "HMM: a block per group of
/// sequences ...").
fn gpu_group_obs_ns(n: f64) -> f64 {
    0.009 * n
}

/// The same pass's nanoseconds per step of the longest sequence when the
/// device has room (measured 1.0 us at 48 and 64 states, 1.5 at 96, 1.8 at
/// 128: one to four sequences of 2,000 to 5,000).
fn gpu_group_step_ns(n: f64) -> f64 {
    400.0 + 11.0 * n
}

/// The scan's fixed seconds per pass (its chunks' products joined in
/// rounds).
const GPU_SCAN_START: f64 = 0.1e-3;

/// Nanoseconds per observation of the scan over sequences that fill the
/// device with chunks: its chunks' products of N x N matrices (measured
/// 1.5-2.1 ns at 8 states, 3.7 at 16).
fn gpu_scan_ns(n: f64) -> f64 {
    2.1 * (n / 8.0).max(1.0).powf(1.5)
}

/// Nanoseconds per step of the longest sequence's scan, which bounds a few
/// sequences' (measured 3.5 ns at 8 states, 142 at 32, one sequence each).
fn gpu_scan_step_ns(n: f64) -> f64 {
    3.5 * (n / 8.0).max(1.0).powi(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Measured on an H200 and its host's 16 threads (`bulkem-bench
    /// hmm-choice --backend both`, 2026-12-01, calls 2 and 3 of
    /// BENCHMARKS.md's "HMM backend choice by the call's shape"): N, M, T,
    /// Gaussian emissions, [CPU, GPU] milliseconds of a forward pass and of
    /// a Baum-Welch iteration, as R calls them. The GPU's Baum-Welch
    /// iterations at 48-96 states are call 5's, with the transition counts
    /// by hmm_xi_gemm (NaN: not timed again). The GPU's forward passes from
    /// 33 to 128 states in these calls ran the kernels hmm_forward_group
    /// replaced (NaN here; the rows of 2026-12-02 time it).
    #[rustfmt::skip]
    const MEASURED: &[(usize, usize, usize, bool, [f64; 2], [f64; 2])] = &[
        (2, 1, 100, false, [0.077, 0.163], [0.060, 0.277]),
        (4, 1, 10000, false, [0.846, 0.317], [1.394, 0.703]),
        (8, 1, 4096, false, [0.514, 0.248], [0.779, 0.535]),
        (8, 1, 32768, false, [2.969, 0.441], [6.213, 1.333]),
        (8, 1, 262144, false, [24.186, 0.958], [51.843, 3.390]),
        (32, 1, 65536, false, [23.956, 9.683], [75.885, 11.582]),
        (8, 16, 16384, false, [3.463, 0.567], [6.970, 1.907]),
        (8, 200, 10000, false, [17.099, 6.185], [39.555, 36.746]),
        (8, 2000, 1000, false, [17.331, 1.408], [37.666, 4.794]),
        (4, 100, 1000, false, [0.984, 0.566], [1.825, 2.023]),
        (8, 200, 1000, false, [2.170, 0.780], [4.666, 3.478]),
        (16, 10, 1000, false, [0.605, 0.520], [1.513, 0.950]),
        (64, 10, 100, false, [0.376, f64::NAN], [1.002, f64::NAN]),
        (4, 1000, 100, false, [0.885, 0.285], [1.593, 0.551]),
        (4, 10000, 100, false, [6.154, 0.618], [11.097, 1.042]),
        (4, 100000, 200, false, [113.446, 5.270], [209.749, 10.728]),
        (16, 1000, 100, false, [1.879, 0.303], [4.577, 0.409]),
        (32, 1000, 100, false, [4.547, 0.305], [12.722, 0.504]),
        (32, 10000, 1000, false, [392.386, 3.343], [1222.660, 8.690]),
        (64, 100, 100, false, [1.567, f64::NAN], [6.013, 0.582]),
        (64, 1000, 100, false, [12.661, f64::NAN], [44.435, 1.675]),
        (128, 10, 100, false, [1.111, f64::NAN], [4.199, 0.932]),
        (128, 100, 200, false, [9.961, f64::NAN], [38.296, 1.721]),
        (256, 10, 100, false, [4.119, 0.763], [12.471, 1.639]),
        (512, 1, 100, false, [12.596, 0.946], [49.101, 2.316]),
        (512, 512, 16, false, [61.285, 0.515], [299.787, 1.643]),
        (1024, 1, 64, false, [35.941, 1.559], [138.281, 2.832]),
        (1024, 64, 256, false, [645.452, 3.588], [3132.942, 8.822]),
        (4, 1000, 100, true, [1.400, 0.388], [2.853, 0.624]),
        (4, 100000, 200, true, [177.575, 7.733], [346.307, 16.493]),
        (32, 1000, 100, true, [6.245, 0.582], [15.965, 0.691]),
        (8, 1, 32768, true, [6.933, 0.575], [15.722, 1.554]),
        (128, 100, 100, true, [6.097, f64::NAN], [22.162, 1.124]),
        // Call 3: other shapes, not used in fitting the models.
        (2, 1, 1000, false, [0.110, 0.362], [0.123, 0.813]),
        (4, 1, 3000, false, [0.262, 1.000], [0.507, 2.777]),
        (8, 4, 2000, false, [0.814, 1.040], [1.869, 3.353]),
        (3, 50, 500, false, [0.517, 0.332], [0.856, 0.755]),
        (6, 500, 100, false, [0.715, 0.206], [1.398, 0.450]),
        (12, 30, 300, false, [0.488, 0.234], [1.181, 0.395]),
        (24, 5, 2000, false, [1.082, 0.873], [2.700, 1.633]),
        (24, 300, 100, false, [0.856, 0.210], [2.013, 0.304]),
        (48, 10, 200, false, [0.377, f64::NAN], [1.003, f64::NAN]),
        (48, 200, 50, false, [0.832, f64::NAN], [2.854, 0.358]),
        (96, 5, 100, false, [0.587, f64::NAN], [1.716, 0.665]),
        (200, 3, 50, false, [1.103, 0.411], [3.365, 0.801]),
        (300, 20, 30, false, [2.211, 0.348], [10.822, 1.080]),
        (700, 2, 20, false, [5.918, 0.553], [22.507, 1.273]),
        (10, 20000, 50, false, [10.173, 0.738], [24.139, 1.669]),
        (5, 3, 20000, false, [2.356, 0.360], [4.534, 0.961]),
        (16, 100, 5000, false, [8.082, 2.200], [20.165, 6.407]),
        (3, 20, 1000, true, [0.738, 0.844], [1.448, 1.718]),
        (16, 200, 200, true, [1.574, 0.329], [3.145, 0.469]),
        (64, 20, 100, true, [0.646, f64::NAN], [1.605, f64::NAN]),
        (2, 10, 100, false, [0.085, 0.106], [0.106, 0.206]),
        (2, 10000, 10, false, [0.739, 0.369], [1.179, 0.636]),
        // Call 3: call 2's shapes again, on another machine of the same kind.
        (2, 1, 100, false, [0.071, 0.186], [0.045, 0.305]),
        (4, 1, 10000, false, [0.798, 0.323], [1.495, 0.768]),
        (8, 1, 4096, false, [0.549, 0.218], [1.151, 0.516]),
        (8, 1, 32768, false, [2.757, 0.406], [5.648, 1.254]),
        (8, 1, 262144, false, [21.878, 0.916], [45.227, 3.337]),
        (32, 1, 65536, false, [22.054, 9.491], [71.621, 11.293]),
        (8, 16, 16384, false, [4.526, 0.579], [6.528, 1.719]),
        (8, 200, 10000, false, [17.227, 6.150], [37.572, 36.104]),
        (8, 2000, 1000, false, [14.918, 1.172], [33.065, 4.618]),
        (4, 100, 1000, false, [1.221, 0.542], [1.857, 1.935]),
        (8, 200, 1000, false, [2.155, 0.800], [4.272, 3.553]),
        (16, 10, 1000, false, [0.576, 0.530], [1.411, 0.960]),
        (64, 10, 100, false, [0.287, f64::NAN], [0.931, f64::NAN]),
        (4, 1000, 100, false, [0.882, 0.250], [1.573, 0.513]),
        (4, 10000, 100, false, [5.839, 0.531], [10.437, 0.956]),
        (4, 100000, 200, false, [107.581, 4.747], [198.205, 9.238]),
        (16, 1000, 100, false, [1.897, 0.287], [4.780, 0.467]),
        (32, 1000, 100, false, [4.344, 0.302], [13.753, 0.502]),
        (32, 10000, 1000, false, [408.136, 3.270], [1233.636, 8.493]),
        (64, 100, 100, false, [1.448, f64::NAN], [5.614, 0.590]),
        (64, 1000, 100, false, [13.155, f64::NAN], [51.018, 1.715]),
        (128, 10, 100, false, [1.085, f64::NAN], [3.857, 1.041]),
        (128, 100, 200, false, [11.520, f64::NAN], [40.531, 1.582]),
        (256, 10, 100, false, [3.941, 0.707], [15.871, 1.549]),
        (512, 1, 100, false, [9.186, 0.934], [46.549, 2.383]),
        (512, 512, 16, false, [68.325, 0.570], [318.670, 1.619]),
        (1024, 1, 64, false, [33.054, 1.472], [131.115, 2.901]),
        (1024, 64, 256, false, [619.962, 3.596], [2908.892, 8.445]),
        (4, 1000, 100, true, [1.592, 0.414], [2.643, 0.664]),
        (4, 100000, 200, true, [334.536, 7.769], [392.317, 14.601]),
        (32, 1000, 100, true, [6.240, 0.312], [16.048, 0.590]),
        (8, 1, 32768, true, [5.503, 0.539], [10.745, 1.512]),
        (128, 100, 100, true, [6.245, f64::NAN], [22.148, 1.351]),
        // 2026-12-02, call 6 of BENCHMARKS.md's "HMM at 1,024 states: the
        // product split along k over a cluster" (after hmm_forward_group):
        // shapes from 33 to 128 states, run twice.
        (48, 10, 200, false, [0.341, 0.330], [0.872, 0.876]),
        (48, 200, 50, false, [0.837, 0.194], [3.401, 0.461]),
        (64, 10, 100, false, [0.424, 0.253], [1.376, 0.700]),
        (64, 100, 100, false, [1.778, 0.257], [5.503, 0.680]),
        (64, 1000, 100, false, [12.332, 0.372], [45.746, 1.821]),
        (96, 5, 100, false, [1.054, 0.383], [1.988, 0.949]),
        (128, 10, 100, false, [1.343, 0.337], [4.719, 0.955]),
        (128, 100, 200, false, [11.115, 0.678], [40.456, 1.704]),
        (48, 1000, 100, false, [8.693, 0.376], [26.565, 1.295]),
        (128, 1000, 100, false, [48.498, 0.678], [181.185, 3.519]),
        (40, 3, 500, false, [0.622, 0.543], [1.674, 1.648]),
        (100, 2, 1000, false, [4.791, 1.723], [14.662, 4.924]),
        (64, 1, 2000, false, [2.142, 1.897], [8.484, 7.163]),
        (33, 20, 300, false, [0.457, 0.380], [1.255, 1.004]),
        (128, 1, 5000, false, [20.070, 8.973], [92.377, 27.195]),
        (96, 4, 3000, false, [11.874, 4.377], [44.294, 13.858]),
        (64, 20, 100, true, [0.634, 0.257], [1.643, 0.735]),
        (128, 100, 100, true, [5.104, 0.429], [19.712, 1.285]),
        (96, 500, 100, true, [15.853, 0.495], [55.201, 3.003]),
        (48, 2, 2000, true, [4.454, 2.129], [10.718, 7.074]),
        (128, 1000, 100, true, [54.329, 0.634], [174.738, 6.504]),
        (33, 1, 3000, false, [1.862, 2.620], [5.659, 8.100]),
        (128, 2, 500, false, [3.306, 1.127], [12.124, 3.215]),
        // The second run.
        (48, 10, 200, false, [0.360, 0.293], [0.862, 0.886]),
        (48, 200, 50, false, [0.813, 0.163], [2.444, 0.448]),
        (64, 10, 100, false, [0.296, 0.213], [0.784, 0.623]),
        (64, 100, 100, false, [1.335, 0.243], [4.724, 0.649]),
        (64, 1000, 100, false, [9.526, 0.352], [37.358, 1.779]),
        (96, 5, 100, false, [0.529, 0.351], [1.667, 0.752]),
        (128, 10, 100, false, [0.974, 0.329], [3.895, 0.870]),
        (128, 100, 200, false, [8.296, 0.578], [32.406, 1.567]),
        (48, 1000, 100, false, [6.643, 0.311], [21.816, 1.082]),
        (128, 1000, 100, false, [42.385, 0.430], [147.191, 3.440]),
        (40, 3, 500, false, [0.512, 0.518], [1.531, 1.624]),
        (100, 2, 1000, false, [4.352, 1.794], [15.136, 4.940]),
        (64, 1, 2000, false, [3.673, 1.955], [12.101, 7.224]),
        (33, 20, 300, false, [0.433, 0.413], [0.868, 1.081]),
        (128, 1, 5000, false, [34.026, 8.910], [103.778, 27.236]),
        (96, 4, 3000, false, [12.091, 4.446], [44.203, 13.842]),
        (64, 20, 100, true, [0.604, 0.273], [1.651, 0.770]),
        (128, 100, 100, true, [5.249, 0.371], [19.606, 1.104]),
        (96, 500, 100, true, [13.801, 0.466], [49.543, 2.914]),
        (48, 2, 2000, true, [3.531, 2.061], [9.675, 7.006]),
        (128, 1000, 100, true, [49.859, 0.613], [170.294, 6.479]),
        (33, 1, 3000, false, [1.758, 2.632], [5.636, 8.076]),
        (128, 2, 500, false, [3.583, 1.072], [12.088, 3.189]),
    ];

    /// Every measured shape: each model within 2.5x of its measured time,
    /// and the choice the faster backend wherever one was at least 1.25x
    /// faster. A shape timed in several runs counts once, at the geometric
    /// mean of its runs (their spread on the host's threads reaches 2x at
    /// calls under a millisecond).
    #[test]
    fn the_models_fit_the_measured_calls_and_choose_the_faster_backend() {
        // (N, M, T, Gaussian, passes) -> the runs' [CPU, GPU] milliseconds.
        type Runs = std::collections::BTreeMap<(usize, usize, usize, bool, (usize, usize)), Vec<[f64; 2]>>;
        let mut runs = Runs::new();
        for &(n, m, t, gaussian, forward, baum_welch) in MEASURED {
            for (passes, times) in [((1, 0), forward), ((0, 1), baum_welch)] {
                if !times[1].is_nan() {
                    runs.entry((n, m, t, gaussian, passes)).or_default().push(times);
                }
            }
        }
        let geomean = |x: &mut dyn Iterator<Item = f64>| {
            let (sum, count) = x.fold((0.0, 0.0), |(s, c), v: f64| (s + v.ln(), c + 1.0));
            (sum / count).exp()
        };
        let (mut wrong, mut slower, mut total_taken, mut total_best) = (Vec::new(), Vec::new(), 0.0, 0.0);
        for (&(n, m, t, gaussian, passes), times) in &runs {
            let (cpu, gpu) = (geomean(&mut times.iter().map(|x| x[0])), geomean(&mut times.iter().map(|x| x[1])));
            let s = CallShape::even(n, m, t).threads(16).obs_bytes(if gaussian { 8 } else { 4 }).passes(passes.0, passes.1);
            let (model_cpu, model_gpu) = (cpu_seconds(&s) * 1e3, gpu_seconds(&s) * 1e3);
            let what = format!("N = {n}, M = {m}, T = {t}, gaussian {gaussian}, passes {passes:?}, {} runs: CPU {cpu:.3} ms (model {model_cpu:.3}), GPU {gpu:.3} (model {model_gpu:.3})", times.len());
            let near = |model: f64, measured: f64| model / measured < 2.5 && measured / model < 2.5;
            if !near(model_cpu, cpu) || !near(model_gpu, gpu) {
                wrong.push(format!("off: {what}"));
            }
            let gpu_chosen = job(&s).work >= job(&s).gpu_min_work;
            if (gpu * 1.25 < cpu && !gpu_chosen) || (cpu * 1.25 < gpu && gpu_chosen) {
                wrong.push(format!("chose the slower: {what}"));
            }
            let (taken, best) = (if gpu_chosen { gpu } else { cpu }, cpu.min(gpu));
            if taken > best {
                slower.push(format!("{:.2}x: {what}", taken / best));
            }
            total_taken += taken;
            total_best += best;
        }
        eprintln!("slower choices ({} of {}):\n{}\nall shapes: {total_taken:.1} ms as chosen, {total_best:.1} ms at best", slower.len(), runs.len(), slower.join("\n"));
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn issue_24s_shapes_take_the_gpu_on_two_threads_and_sixteen() {
        for threads in [2, 16] {
            for (n, m, t) in [(512, 512, 16), (32, 10_000, 1_000), (1024, 64, 256), (4, 100_000, 200), (8, 1, 262_144)] {
                for (forward, e_steps) in [(1, 0), (0, 1), (0, 100)] {
                    let s = CallShape::even(n, m, t).threads(threads).passes(forward, e_steps);
                    assert!(job(&s).work >= job(&s).gpu_min_work, "{s:?}");
                }
            }
        }
    }

    #[test]
    fn a_short_sequence_stays_on_the_cpu_and_the_kernels_states_bound_the_gpu() {
        for threads in [1, 2, 16] {
            assert!(job(&CallShape::even(3, 1, 100).threads(threads)).work < job(&CallShape::even(3, 1, 100).threads(threads)).gpu_min_work);
        }
        let big = CallShape::even(gpu::MAX_GPU_STATES + 1, 1 << 20, 100);
        assert!(job(&big).gpu_unsupported.is_some());
        assert!(job(&CallShape::even(gpu::MAX_GPU_STATES, 1 << 20, 100)).gpu_unsupported.is_none());
    }

    #[test]
    fn the_cpu_estimate_falls_with_threads_only_as_far_as_its_chunks_spread() {
        // 10,000 sequences spread over 64 threads (each slower when all
        // are busy); 4 sequences over 4; one sequence is one thread's
        // unless the scan takes it.
        let many = CallShape::even(32, 10_000, 1_000);
        let (two, sixty_four) = (cpu_seconds(&many.threads(2)), cpu_seconds(&many.threads(64)));
        assert!(two > 10.0 * sixty_four && two < 32.0 * sixty_four, "{two} {sixty_four}");
        let few = CallShape::even(32, 4, 1_000);
        assert_eq!(cpu_seconds(&few.threads(4)), cpu_seconds(&few.threads(64)));
        let one = CallShape::even(32, 1, 100_000);
        assert_eq!(cpu_seconds(&one.threads(1)) - CPU_THREAD, cpu_seconds(&one.threads(64)) - CPU_THREAD);
        // From 6N threads the scan spreads it (its work 3N-fold).
        assert!(cpu_seconds(&one.threads(6 * 32)) < cpu_seconds(&one.threads(1)) / 1.9);
        // The GPU's does not depend on the CPU's threads.
        assert_eq!(gpu_seconds(&many.threads(2)), gpu_seconds(&many.threads(64)));
    }
}
