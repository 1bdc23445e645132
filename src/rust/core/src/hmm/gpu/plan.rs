//! Sizing of the device work: whether a job fits the kernels
//! (`check_size`), which kernel family runs N states (warp per sequence,
//! block per sequence or batched), the shared memory a block may use,
//! grid and block sizes, and how sequences split into batches that fit the
//! free device memory.

use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::{Error, Result};
use crate::gpu::{Device, Kernel};

use super::super::backward::Counts;
use super::super::sequences::Sequences;
use super::{err, BLOCKS_PER_SM, DEFAULT_SMEM, FORWARD_MMA_SEQS, GROUP_MAX_STATES, GROUP_SEQS, MAX_GPU_STATES, VIT_GROUP_SEQS, MAX_THREADS, MEMORY_SHARE, WARPS, WARP_BLOCKS_PER_SM, WARP_MAX_STATES, THREAD_BLOCK, THREAD_MAX_STATES, XI_ROWS, XI_SMEM, XI_THREADS, XI_TILE};

pub(super) fn check_size(n_states: usize, count: usize) -> Result<()> {
    if n_states > MAX_GPU_STATES {
        return Err(Error::BackendUnavailable(format!(
            "the GPU kernels handle up to {MAX_GPU_STATES} states, not {n_states}; use the CPU backend"
        )));
    }
    if count >= i32::MAX as usize {
        return Err(Error::BackendUnavailable("too many sequences for one GPU call".into()));
    }
    Ok(())
}

/// Consecutive batches of sequences whose per-symbol storage
/// (`bytes_per_symbol`) fits the memory share of the device.
pub(super) fn batches(dev: &Device, seqs: &Sequences, bytes_per_symbol: usize) -> Result<Vec<Range<usize>>> {
    let budget = dev.memory_share(MEMORY_SHARE, seqs.total().saturating_mul(bytes_per_symbol))?;
    let max_symbols = (budget / bytes_per_symbol.max(1)).max(1);
    let mut out = Vec::new();
    let mut begin = 0;
    for s in 0..seqs.len() {
        let len = seqs.offsets[s + 1] - seqs.offsets[s];
        if len > max_symbols {
            return Err(Error::BackendUnavailable(format!(
                "sequence {} ({len} symbols) needs {:.1} GB of GPU memory, more than is free; use the CPU backend",
                s + 1,
                len as f64 * bytes_per_symbol as f64 / 1e9
            )));
        }
        if seqs.offsets[s + 1] - seqs.offsets[begin] > max_symbols {
            out.push(begin..s);
            begin = s;
        }
    }
    out.push(begin..seqs.len());
    Ok(out)
}

/// Shared memory usable by one block (bytes), with room for the kernels'
/// static shared memory.
pub(super) fn smem_limit(dev: &Device) -> usize {
    dev.max_shared_per_block.saturating_sub(1024).max(DEFAULT_SMEM)
}

/// Shared-memory plan of hmm_backward: (bytes, trans_t in smem, accumulator in smem).
pub(super) fn backward_smem(dev: &Device, n: usize, v: usize, with_counts: bool) -> (usize, bool, bool) {
    let limit = smem_limit(dev);
    let mut bytes = 3 * n * 8;
    let trans_smem = bytes + n * n * 8 <= limit;
    if trans_smem {
        bytes += n * n * 8;
    }
    let acc_smem = with_counts && bytes + Counts::size(n, v) * 8 <= limit;
    if acc_smem {
        bytes += Counts::size(n, v) * 8;
    }
    (bytes, trans_smem, acc_smem)
}

/// Whether the batched kernels run every N past the warp kernels (1), or
/// only where the transitions do not fit in shared memory (2), in place of
/// the choice by the shape (0): for benchmarks that compare the two.
static FORCED_BATCHED: AtomicU8 = AtomicU8::new(0);

/// Make the forward-backward and Viterbi passes take the batched kernels
/// wherever they can (Some(true)), only where they must (Some(false)), or
/// as the shape chooses (None).
#[doc(hidden)]
pub fn force_batched(on: Option<bool>) {
    FORCED_BATCHED.store(match on { None => 0, Some(true) => 1, Some(false) => 2 }, Ordering::Relaxed);
}

/// The batched kernels where they `must` run or `by_shape` says so, unless
/// a benchmark forced the choice ([`force_batched`]).
fn batched_unless_forced(must: bool, by_shape: impl FnOnce() -> bool) -> bool {
    match FORCED_BATCHED.load(Ordering::Relaxed) {
        1 => true,
        2 => must,
        _ => must || by_shape(),
    }
}

/// States from which many sequences go to the batched kernels even where
/// a block per sequence could run them (`batched_path`).
const BATCHED_FROM: usize = 96;

/// Whether a forward-backward pass of N states over `count` sequences runs
/// the batched kernels: where the transitions do not fit in shared memory
/// next to the backward pass's vectors, and from BATCHED_FROM states where
/// the sequences outnumber one wave of the block-per-sequence kernels.
/// Those run a wave after another at one step's latency per step (N = 128,
/// 1,000 sequences of 100: 8 waves, 2.28 ms forward on an H200, against
/// 0.76 batched; at 96-160 states and 2 waves 1.3-1.7x slower; one wave
/// faster: BENCHMARKS.md).
pub(super) fn batched_path(dev: &Device, n: usize, count: usize) -> bool {
    if n <= WARP_MAX_STATES {
        return false;
    }
    let must = !backward_smem(dev, n, 0, false).1;
    batched_unless_forced(must, || n >= BATCHED_FROM && count > block_wave(dev, n))
}

/// Shared memory of an hmm_forward block for N states (its vectors and
/// reduction slots, and the transitions when `trans`).
pub(super) fn forward_block_smem(n: usize, trans: bool) -> usize {
    (2 * n + 32) * 8 + if trans { n * n * 8 } else { 0 }
}

/// Blocks of hmm_forward (a block per sequence, the transitions in shared
/// memory) resident at once on `dev` for N states.
fn block_wave(dev: &Device, n: usize) -> usize {
    resident_blocks(dev, forward_block_smem(n, true), threads_for(n))
}

/// Blocks of `smem` bytes of shared memory and `threads` threads resident
/// at once on `dev`: their shared memory (and the 1 KB the driver reserves
/// a block) within a multiprocessor's, their threads within 2,048.
fn resident_blocks(dev: &Device, smem: usize, threads: u32) -> usize {
    let by_smem = (dev.max_shared_per_block + 1024) / (smem + 1024);
    let by_threads = 2048 / threads as usize;
    dev.multiprocessors as usize * by_smem.min(by_threads).clamp(1, BLOCKS_PER_SM as usize)
}

/// Whether the warp-per-sequence kernels run a job of N states and V
/// symbols (with counts, each warp keeps V x 32 emission counts in shared
/// memory).
pub(super) fn warp_path(dev: &Device, n: usize, v: usize, counts: bool) -> bool {
    n <= WARP_MAX_STATES && (!counts || (WARPS * 32 + WARPS * v * 32) * 8 <= smem_limit(dev))
}

/// Whether N states run the thread-per-sequence forward and Viterbi
/// kernels: with a handful of states a warp per sequence leaves most lanes
/// idle and reduces over the warp at every step.
pub(super) fn thread_path(n: usize) -> bool {
    n <= THREAD_MAX_STATES
}

/// Shared memory of hmm_backward_thread for N states and V symbols (or
/// statistics): the transitions, and when it counts, each thread's column
/// of N + N*N + V*N counts.
pub(super) fn thread_backward_smem(n: usize, v: usize, counts: bool) -> usize {
    (n * n + if counts { THREAD_BLOCK as usize * (n + n * n + v * n) } else { 0 }) * 8
}

/// Whether the backward pass (posteriors, counts) runs a thread per
/// sequence (hmm_backward_thread): N states the thread kernels take and,
/// when it counts, every thread's counts in shared memory. A warp per
/// sequence left 28 of 32 lanes idle at 4 states: its counting backward
/// pass took 7.6-8.8 ms of an E-step over 100,000 sequences of 200 (ncu,
/// H200), against 1.9-2.5 for the thread forward pass storing its alphas.
pub(super) fn thread_backward(dev: &Device, n: usize, v: usize, counts: bool) -> bool {
    thread_path(n) && thread_backward_smem(n, v, counts) <= smem_limit(dev)
}

/// Blocks of an hmm_backward_thread launch over `count` sequences (with
/// counts, each block adds into an accumulator of its own).
pub(super) fn thread_backward_grid(dev: &Device, count: usize) -> u32 {
    (count.div_ceil(THREAD_BLOCK as usize) as u32).clamp(1, dev.multiprocessors * BLOCKS_PER_SM)
}

/// Launch shape of a thread-per-sequence kernel over `count` sequences for
/// N states (the transitions in shared memory).
pub(super) fn thread_config(dev: &Device, n: usize, count: usize) -> cudarc::driver::LaunchConfig {
    let blocks = (count.div_ceil(THREAD_BLOCK as usize) as u32).clamp(1, dev.multiprocessors * BLOCKS_PER_SM);
    cudarc::driver::LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREAD_BLOCK, 1, 1), shared_mem_bytes: (n * n * 8) as u32 }
}

/// Blocks of a warp-kernel launch over `count` sequences.
pub(super) fn warp_grid(dev: &Device, count: usize) -> u32 {
    (count.div_ceil(WARPS) as u32).clamp(1, dev.multiprocessors * WARP_BLOCKS_PER_SM)
}

/// Whether a forward pass over `count` sequences at N <= WARP_MAX_STATES
/// runs hmm_forward_mma (FORWARD_MMA_SEQS sequences a warp on the FP64
/// tensor cores) instead of hmm_forward_warp (a warp a sequence): with
/// enough sequences to fill the device. Its steps take longer, so below
/// that the warp per sequence is faster: on an H200 (132 multiprocessors,
/// N = 32, T = 1,000) the crossing was at about 3,800 sequences with a
/// categorical emission and 7,000 with a density's rows (`emis_len`
/// doubles, read from memory at every step; kernels/hmm.cu).
pub(super) fn forward_mma(dev: &Device, count: usize, emis_len: usize) -> bool {
    let per_multiprocessor = if emis_len * 8 > STREAMED_TABLE { 56 } else { 32 };
    count >= per_multiprocessor * dev.multiprocessors as usize
}

/// Bytes of an emission table beyond which its rows come from memory, not
/// the caches (a density's table: a row per position).
const STREAMED_TABLE: usize = 8 << 20;

/// Whether N states run the kernels of a block per group of sequences: a
/// forward pass that keeps no alphas hmm_forward_group (16 sequences a
/// block, a step of them one product on the tensor cores with the
/// transitions in the warps' registers), and Viterbi over many sequences
/// hmm_viterbi_group (8 a block, the log transitions in shared memory;
/// [`viterbi_group`]). From 33 to GROUP_MAX_STATES states. On an H200 with
/// sequences of 100, the forward pass on the device took at N = 128 0.20
/// ms for 20, 300 or 1,000 sequences (a block per sequence 0.30 and 0.43,
/// batched 0.77 at 1,000) and 0.57 for 5,000 (batched 1.99); at N = 48
/// 0.09-0.15 ms from 20 to 5,000 (0.16-0.90 before; BENCHMARKS.md).
pub(crate) fn group_path(n: usize) -> bool {
    n > WARP_MAX_STATES && n <= GROUP_MAX_STATES
}

/// Whether a forward pass that keeps no alphas (log-likelihoods) over
/// `count` sequences runs the batched kernels: where [`batched_path`] says
/// so, except at the states hmm_forward_group runs.
pub(super) fn loglik_batched(dev: &Device, n: usize, count: usize) -> bool {
    !group_path(n) && batched_path(dev, n, count)
}

/// The 16-state slices of hmm_forward_group for N states (HMM_GK: its warps).
pub(super) fn group_slices(n: usize) -> usize {
    n.div_ceil(16)
}

/// Launch shape of hmm_forward_group over `count` sequences for N states.
pub(super) fn group_config(dev: &Device, n: usize, count: usize) -> cudarc::driver::LaunchConfig {
    let blocks = grid(dev, count.div_ceil(GROUP_SEQS));
    cudarc::driver::LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (32 * group_slices(n) as u32, 1, 1), shared_mem_bytes: 0 }
}

/// Waves of hmm_viterbi blocks (a block per sequence) beyond which
/// Viterbi runs hmm_viterbi_group (`viterbi_group`).
const VIT_GROUP_WAVES: usize = 2;

/// Whether Viterbi over `count` sequences of N states runs
/// hmm_viterbi_group: at the states of [`group_path`], where the sequences
/// make more than VIT_GROUP_WAVES waves of hmm_viterbi blocks. A step of a
/// group takes about twice a block's (each thread keeps four sequences'
/// maxima), so fewer sequences run faster a block each. Measured on an
/// H200, sequences of 100, on the device (BENCHMARKS.md), a block per
/// sequence against a group: N = 128, 20 sequences 0.29 against 0.61 ms,
/// 300 (2.3 waves) 0.85 against 0.62, 1,000 1.58 against 0.62; N = 96, 300
/// (0.8 waves) 0.31 against 0.47, 1,000 (2.5) 0.82 against 0.46; N = 48,
/// 1,000 (0.7) 0.22 either way, 5,000 (3.4) 0.93 against 0.58.
pub(super) fn viterbi_group(dev: &Device, n: usize, count: usize) -> bool {
    group_path(n) && count > VIT_GROUP_WAVES * resident_blocks(dev, viterbi_block_smem(n), threads_for(n))
}

/// Shared memory of hmm_viterbi_group for N states: the log transitions
/// (rounded up to an even count) and two vectors of N x VIT_GROUP_SEQS.
pub(super) fn viterbi_group_smem(n: usize) -> usize {
    ((n * n).next_multiple_of(2) + 2 * n * VIT_GROUP_SEQS) * 8
}

/// Launch shape of hmm_viterbi_group over `count` sequences for N states:
/// two halves of a thread per state.
pub(super) fn viterbi_group_config(dev: &Device, n: usize, count: usize) -> cudarc::driver::LaunchConfig {
    let blocks = grid(dev, count.div_ceil(VIT_GROUP_SEQS));
    cudarc::driver::LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (2 * threads_for(n), 1, 1), shared_mem_bytes: viterbi_group_smem(n) as u32 }
}

/// Blocks of a launch of hmm_forward_mma over `count` sequences.
pub(super) fn forward_mma_grid(dev: &Device, count: usize) -> u32 {
    warp_grid(dev, count.div_ceil(FORWARD_MMA_SEQS))
}

pub(super) fn grid(dev: &Device, count: usize) -> u32 {
    (count as u32).clamp(1, dev.multiprocessors * BLOCKS_PER_SM)
}

/// Threads per block for N states: one per state up to MAX_THREADS, in warps.
pub(super) fn threads_for(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, MAX_THREADS) as u32
}

/// Shared memory of an hmm_viterbi block for N states: its two state
/// vectors and the log transitions.
pub(super) fn viterbi_block_smem(n: usize) -> usize {
    (2 * n + n * n) * 8
}

/// States and waves of hmm_viterbi blocks from which Viterbi takes the
/// batched kernel where it need not (`viterbi_batched`).
const VIT_BATCHED_FROM: usize = 128;
const VIT_BATCHED_WAVES: usize = 3;

/// Whether Viterbi over N states and `count` sequences runs the batched
/// max-plus kernel (hmm_viterbi_batched): where the log transitions do not
/// fit in shared memory beside a block's two state vectors (a block per
/// sequence would read all of them from L2 at every step), and from
/// VIT_BATCHED_FROM states past those of hmm_viterbi_group
/// ([`viterbi_group`]) where the sequences make more than
/// VIT_BATCHED_WAVES waves of hmm_viterbi blocks, which run one wave after
/// another. Measured on an H200 with sequences of 100 (BENCHMARKS.md), a
/// block per sequence against batched, on the device: N = 128, 1,000
/// sequences (7.6 waves) 2.23 against 1.60 ms, 500 (3.8) 1.12 against
/// 0.87, 200 (1.5) 0.56 against 0.79; N = 160 about even at 200; N = 96
/// (3 blocks a multiprocessor) a block per sequence faster up to 1,000
/// (0.82 against 1.48). Decided once for a call's share, before its
/// batches are made: their memory depends on it
/// ([`viterbi_bytes_per_symbol`]).
pub(super) fn viterbi_batched(dev: &Device, n: usize, count: usize) -> bool {
    if n <= WARP_MAX_STATES {
        return false;
    }
    let must = viterbi_block_smem(n) > smem_limit(dev);
    batched_unless_forced(must, || !group_path(n) && n >= VIT_BATCHED_FROM && count > VIT_BATCHED_WAVES * resident_blocks(dev, viterbi_block_smem(n), threads_for(n)))
}

/// Device bytes per symbol of a Viterbi batch: the path (4) and the
/// back-pointers (a byte or two per state) or, `batched`
/// ([`viterbi_batched`]), the log vectors.
pub(super) fn viterbi_bytes_per_symbol(n: usize, batched: bool) -> usize {
    if n <= WARP_MAX_STATES {
        n + 4
    } else if batched {
        8 * super::batched::vit_stride(n) + 4
    } else {
        2 * n + 4
    }
}

/// Splits of the rows of hmm_xi_gemm: as many as fill one wave of resident
/// blocks (a partial second wave would nearly double the time), at least
/// XI_ROWS rows each.
pub(super) fn xi_splits(dev: &Device, n: usize, rows: usize) -> Result<u32> {
    let tiles = n.div_ceil(XI_TILE) as u32;
    let f = dev.function(Kernel::HmmXiGemm, &[])?;
    let per_sm = f.occupancy_max_active_blocks_per_multiprocessor(XI_THREADS, XI_SMEM, None).map_err(err(dev, "sizing hmm_xi_gemm"))?;
    let wave = dev.multiprocessors * per_sm.max(1);
    Ok((wave / (tiles * tiles)).min(rows.div_ceil(XI_ROWS) as u32).max(1))
}
