//! The CUDA backend of the reductions (kernels/reduce.cu): one launch per
//! vector, reading it once, with no host round trip inside.
//!
//! | method     | on the GPU                                                  |
//! |------------|-------------------------------------------------------------|
//! | `Pairwise` | the tree of [`super::tree`]: the same bits as the CPU        |
//! | `Div2`     | the same, halving at every node: the same bits as the CPU    |
//! | `Exact`    | exact accumulation, one rounding: the same bits as the CPU   |
//! | `Kahan`    | Neumaier per thread, merged in a fixed order: a different    |
//! |            | order from the CPU's fixed chunks, same error bound          |
//! | `Naive`    | plain sums per thread, merged in a fixed order: a different  |
//! |            | order from the CPU's single accumulator (a smaller error)    |
//!
//! `Kahan` and `Naive` give the same bits for the same launch shape (a
//! function of the device and n), not across devices.
//!
//! Trees: warps reduce aligned tiles of 2^t elements, blocks aligned groups
//! of 2^b tiles, and the last block to finish reduces the block values
//! padded to a power of two. Every one of these is a subtree of the
//! definition, so the result does not depend on t or b.
//!
//! Exact: per-thread error-free expansions feed per-block exact
//! accumulators in shared memory, merged into one in device memory; the
//! host rounds it with the CPU's code ([`super::exact::finish`]). If a
//! finite input overflows an expansion, the vector is reduced again with
//! every input binned directly (slower, but exact for any input).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use crate::error::Result;
use crate::exec::Exec;
use crate::gpu::{Device, Kernel};

use super::method::{Method, Precision};
use super::real::Real;
use super::superacc::{Superacc, BINS};
use super::{exact, tree, Kind};

/// Elements per warp step of the tree kernels (STEP in reduce.cu).
const STEP_LOG2: u32 = 8;
/// Most leaves the last block reduces (MAX_LEAVES in reduce.cu).
const MAX_LEAVES_LOG2: u32 = 12;
const FLAG_NAN: u32 = 1;
const FLAG_POS_INF: u32 = 2;
const FLAG_NEG_INF: u32 = 4;
const FLAG_OVERFLOW: u32 = 8;

/// Launch shapes (defaults measured on an H100; see BENCHMARKS.md).
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Threads per block of the plain and exact kernels.
    pub threads: u32,
    /// Resident blocks per multiprocessor of the plain kernels' grid.
    pub plain_blocks_per_sm: u32,
    /// Resident blocks per multiprocessor of the exact kernel's grid
    /// (capped by what its 32 KB of shared memory allows).
    pub exact_blocks_per_sm: u32,
    /// log2 of the warps per block of the tree kernels (at most 3).
    pub tree_block_levels: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { threads: 256, plain_blocks_per_sm: 8, exact_blocks_per_sm: 6, tree_block_levels: 3 }
    }
}

/// Buffers and kernels to reduce vectors that live on one device.
pub struct Workspace {
    dev: Arc<Device>,
    pub tuning: Tuning,
    counter: CudaSlice<u32>,
    out: CudaSlice<f64>,
    leaves: CudaSlice<f64>,
    partials: CudaSlice<f64>,
    global_bins: CudaSlice<u64>,
    global_flags: CudaSlice<u32>,
    /// The bins (2 words each) and then the flags.
    out_bins: CudaSlice<u64>,
}

/// A reduction queued on the device; [`Workspace::finish`] waits for it.
pub struct Pending {
    method: Method,
    precision: Precision,
    kind: Kind,
    n: usize,
}

impl Workspace {
    pub fn new(dev: &Arc<Device>) -> Result<Self> {
        let s = &dev.stream;
        let e = |what: &'static str| move |err| dev.err(what, err);
        // Plain partials: (s, c) per block of the largest grid.
        let max_blocks = 64 * dev.multiprocessors as usize;
        Ok(Workspace {
            dev: dev.clone(),
            tuning: Tuning::default(),
            counter: s.alloc_zeros::<u32>(1).map_err(e("allocating reduction buffers"))?,
            out: s.alloc_zeros::<f64>(1).map_err(e("allocating reduction buffers"))?,
            leaves: s.alloc_zeros::<f64>(1 << MAX_LEAVES_LOG2).map_err(e("allocating reduction buffers"))?,
            partials: s.alloc_zeros::<f64>(2 * max_blocks).map_err(e("allocating reduction buffers"))?,
            global_bins: s.alloc_zeros::<u64>(2 * BINS).map_err(e("allocating reduction buffers"))?,
            global_flags: s.alloc_zeros::<u32>(1).map_err(e("allocating reduction buffers"))?,
            out_bins: s.alloc_zeros::<u64>(2 * BINS + 1).map_err(e("allocating reduction buffers"))?,
        })
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    fn function(&self, precision: Precision, kernel: Kernel) -> Result<CudaFunction> {
        self.dev.function(kernel, &[("REDUCE_SINGLE", (precision == Precision::Single) as i64)])
    }

    /// The reduction of `x` (non-empty for means), waited for.
    pub fn reduce(&mut self, x: &CudaSlice<f64>, method: Method, precision: Precision, kind: Kind) -> Result<f64> {
        let pending = self.launch(x, method, precision, kind)?;
        self.finish(x, pending)
    }

    /// Queue the reduction of `x` on the device's stream.
    pub fn launch(&mut self, x: &CudaSlice<f64>, method: Method, precision: Precision, kind: Kind) -> Result<Pending> {
        let n = x.len();
        let pending = Pending { method, precision, kind, n };
        if n == 0 {
            return Ok(pending);
        }
        match method {
            Method::Pairwise | Method::Div2 => self.launch_tree(x, method, precision, kind)?,
            Method::Naive | Method::Kahan => self.launch_plain(x, method, precision, kind)?,
            Method::Exact => self.launch_exact(x, precision, Kernel::ExactSum)?,
        }
        Ok(pending)
    }

    /// Wait for a queued reduction of `x` and return its value.
    pub fn finish(&mut self, x: &CudaSlice<f64>, p: Pending) -> Result<f64> {
        if p.n == 0 {
            return Ok(0.0);
        }
        if p.method != Method::Exact {
            return Ok(self.read(&self.out)?[0]);
        }
        let mut words = self.read(&self.out_bins)?;
        if words[2 * BINS] as u32 & FLAG_OVERFLOW != 0 {
            self.launch_exact(x, p.precision, Kernel::ExactBins)?;
            words = self.read(&self.out_bins)?;
        }
        let flags = words[2 * BINS] as u32;
        let acc = Superacc::from_words(&words, flags & FLAG_NAN != 0, flags & FLAG_POS_INF != 0, flags & FLAG_NEG_INF != 0);
        let divisor = (p.kind == Kind::Mean).then_some(p.n);
        Ok(match p.precision {
            Precision::Double => exact::finish::<f64>(&acc, divisor),
            Precision::Single => exact::finish::<f32>(&acc, divisor).to_f64(),
        })
    }

    /// Copy a result buffer to the host (waits for the stream).
    fn read<T: cudarc::driver::DeviceRepr + Default + Clone>(&self, buf: &CudaSlice<T>) -> Result<Vec<T>> {
        self.dev.stream.clone_dtoh(buf).map_err(|e| self.dev.err("reading the result", e))
    }

    fn launch_tree(&mut self, x: &CudaSlice<f64>, method: Method, precision: Precision, kind: Kind) -> Result<()> {
        let n = x.len();
        let p = n.next_power_of_two();
        let lp = p.trailing_zeros();
        let (padded, correction) = match precision {
            Precision::Double => (p as f64, tree::correction::<f64>(p, n)),
            Precision::Single => (p as f64, tree::correction::<f32>(p, n).to_f64()),
        };
        let kind_arg = kind_code(kind);
        let n_arg = n as i64;
        let halve = method == Method::Div2;
        let s = self.dev.stream.clone();
        let dev = self.dev.clone();
        let e = |what: &'static str| move |err| dev.err(what, err);
        if lp <= STEP_LOG2 {
            let f = self.function(precision, if halve { Kernel::TreeSmallDiv2 } else { Kernel::TreeSmallPairwise })?;
            let lp_arg = lp as i32;
            let mut launch = s.launch_builder(&f);
            launch.arg(x).arg(&n_arg).arg(&lp_arg).arg(&mut self.out).arg(&padded).arg(&correction).arg(&kind_arg);
            let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: arguments match tree_small_* in kernels/reduce.cu; x
            // holds n <= 256 doubles and out one.
            unsafe { launch.launch(cfg) }.map_err(e("launching the tree reduction"))?;
            return Ok(());
        }
        let (tile_log2, block_levels, leaves_log2) = tree_shape(lp, self.tuning.tree_block_levels);
        let blocks = n.div_ceil(1 << (tile_log2 + block_levels));
        let f = self.function(precision, if halve { Kernel::TreeDiv2 } else { Kernel::TreePairwise })?;
        let (t_arg, b_arg, l_arg) = (tile_log2 as i32, block_levels as i32, leaves_log2 as i32);
        let mut launch = s.launch_builder(&f);
        launch
            .arg(x)
            .arg(&n_arg)
            .arg(&t_arg)
            .arg(&b_arg)
            .arg(&l_arg)
            .arg(&mut self.leaves)
            .arg(&mut self.counter)
            .arg(&mut self.out)
            .arg(&padded)
            .arg(&correction)
            .arg(&kind_arg);
        let cfg = LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (32 << block_levels, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: arguments match tree_pairwise/tree_div2 in
        // kernels/reduce.cu; blocks <= 2^leaves_log2 <= the leaves buffer
        // (in floats or doubles), the counter is zero between calls.
        unsafe { launch.launch(cfg) }.map_err(e("launching the tree reduction"))?;
        Ok(())
    }

    /// Blocks of a persistent grid of `per_sm` blocks per multiprocessor,
    /// no more than the work needs.
    fn grid(&self, f: &CudaFunction, per_sm: u32, n: usize) -> Result<u32> {
        let threads = self.tuning.threads;
        let fits = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)
            .map_err(|e| self.dev.err("querying occupancy", e))?
            .max(1);
        let full = per_sm.min(fits) * self.dev.multiprocessors;
        let needed = n.div_ceil(2 * threads as usize).max(1);
        Ok(full.min(needed as u32).min(64 * self.dev.multiprocessors))
    }

    fn launch_plain(&mut self, x: &CudaSlice<f64>, method: Method, precision: Precision, kind: Kind) -> Result<()> {
        let f = self.function(precision, if method == Method::Kahan { Kernel::PlainKahan } else { Kernel::PlainNaive })?;
        let blocks = self.grid(&f, self.tuning.plain_blocks_per_sm, x.len())?;
        let (n_arg, kind_arg) = (x.len() as i64, kind_code(kind));
        let s = self.dev.stream.clone();
        let mut launch = s.launch_builder(&f);
        launch.arg(x).arg(&n_arg).arg(&mut self.partials).arg(&mut self.counter).arg(&mut self.out).arg(&kind_arg);
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (self.tuning.threads, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: arguments match plain_* in kernels/reduce.cu; partials
        // holds two reals per block (blocks <= 64 per multiprocessor).
        unsafe { launch.launch(cfg) }.map_err(|e| self.dev.err("launching the reduction", e))?;
        Ok(())
    }

    fn launch_exact(&mut self, x: &CudaSlice<f64>, precision: Precision, kernel: Kernel) -> Result<()> {
        let f = self.function(precision, kernel)?;
        let blocks = self.grid(&f, self.tuning.exact_blocks_per_sm, x.len())?;
        let n_arg = x.len() as i64;
        let s = self.dev.stream.clone();
        let mut launch = s.launch_builder(&f);
        launch
            .arg(x)
            .arg(&n_arg)
            .arg(&mut self.global_bins)
            .arg(&mut self.global_flags)
            .arg(&mut self.counter)
            .arg(&mut self.out_bins);
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (self.tuning.threads, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: arguments match exact_sum/exact_bins in kernels/reduce.cu;
        // global_bins holds 2 x 2047 words, zero between calls, and out_bins
        // one more for the flags.
        unsafe { launch.launch(cfg) }.map_err(|e| self.dev.err("launching the exact reduction", e))?;
        Ok(())
    }
}

fn kind_code(kind: Kind) -> i32 {
    match kind {
        Kind::Sum => 0,
        Kind::Mean => 1,
    }
}

/// (log2 warp tile, log2 warps per block, log2 leaves) for padded size
/// 2^lp > 256: at most 2^12 leaves, tiles of at least one warp step.
pub fn tree_shape(lp: u32, max_block_levels: u32) -> (u32, u32, u32) {
    let block_levels = max_block_levels.min(3).min(lp - STEP_LOG2);
    let tile_log2 = STEP_LOG2.max(lp.saturating_sub(MAX_LEAVES_LOG2 + block_levels));
    (tile_log2, block_levels, lp - tile_log2 - block_levels)
}

/// One reduction per host vector on the first device: each is copied over
/// and reduced in turn.
pub fn reduce_many(data: &[&[f64]], method: Method, precision: Precision, kind: Kind, exec: &Exec) -> Result<Vec<f64>> {
    let dev = crate::gpu::devices()?[0].clone();
    let mut ws = Workspace::new(&dev)?;
    let mut out = Vec::with_capacity(data.len());
    for x in data {
        exec.monitor.check()?;
        if x.is_empty() {
            out.push(0.0);
            continue;
        }
        let d_x = dev.stream.clone_htod(*x).map_err(|e| dev.err("copying data", e))?;
        out.push(ws.reduce(&d_x, method, precision, kind)?);
        exec.monitor.add_done(1);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_shapes_cover_the_padded_size_with_few_leaves() {
        for lp in STEP_LOG2 + 1..=34 {
            let (t, b, l) = tree_shape(lp, 3);
            assert_eq!(t + b + l, lp);
            assert!(t >= STEP_LOG2 && b <= 3 && l <= MAX_LEAVES_LOG2, "lp = {lp}: {t} {b} {l}");
        }
        assert_eq!(tree_shape(28, 3), (13, 3, 12));
        assert_eq!(tree_shape(9, 3), (8, 1, 0));
    }
}
