//! A target run's checks on the device (kernels/diagnostics.cu): the
//! rank-normalised split R-hat, bulk and tail ESS of every parameter, as
//! [`crate::gibbs::diagnostics`] computes them on the host, from the draws
//! where they are. Only three numbers per parameter come back, where the
//! host's checks read every kept draw (7.5 GB at 10^5 groups) and sorted
//! them on 16 threads.

use cudarc::driver::{CudaFunction, CudaSlice, CudaView, LaunchConfig, PushKernelArg};

use crate::error::{Error, Result};
use crate::gibbs::diagnostics::Diagnostics;
use crate::gpu::{Device, Kernel};

/// Threads per block (the kernel's DG_THREADS).
const THREADS: u32 = 256;

/// Where the kernel's working arrays go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Shared memory where they fit, else global memory.
    Auto,
    /// Global memory always (tests use it to run that path on small cases).
    Global,
}

/// mcmc_diagnostics, ready for draws of one shape.
pub struct DeviceDiagnostics {
    f: CudaFunction,
    chains: usize,
    now: usize,
    /// Pooled draws padded to a power of two (the bitonic sort's length).
    padded: usize,
    /// Doubles of one block's working arrays.
    work: usize,
    /// Global working memory (None: shared memory), `work` doubles a block.
    scratch: Option<CudaSlice<f64>>,
    blocks: usize,
    shared_bytes: u32,
}

impl DeviceDiagnostics {
    /// For parameters of `chains` chains of `now` draws each.
    pub fn new(dev: &Device, chains: usize, now: usize, work: Work) -> Result<Self> {
        let f = dev.function(Kernel::McmcDiagnostics, &[])?;
        let pooled = chains * now;
        if pooled > i32::MAX as usize / 4 {
            return Err(Error::BackendUnavailable(format!("diagnostics on the device take at most 2^29 draws per parameter ({pooled} here)")));
        }
        let padded = pooled.next_power_of_two().max(2);
        let half = now / 2;
        // key, z, rho, cm, cv, mid, then place as ints (diagnostics.cu).
        let doubles = padded + (2 * chains * half).max(1) + half.max(2) + 5 * chains + padded.div_ceil(2);
        let fixed = f.shared_size_bytes().map_err(|e| dev.err("reading a kernel's shared memory", e))? as usize;
        let room = dev.max_shared_per_block.saturating_sub(fixed);
        // Two blocks per multiprocessor at least hide each other's barriers.
        let fits = work == Work::Auto && doubles * 8 <= room;
        let blocks = dev.multiprocessors as usize * if fits { (room / (doubles * 8).max(1)).clamp(1, 8) } else { 2 };
        let scratch = if fits {
            None
        } else {
            let need = blocks * doubles;
            let free = dev.free_memory()?;
            if need as u128 * 8 > free as u128 / 2 {
                return Err(Error::OutOfMemory { what: format!("diagnostics on the device: working memory for {pooled} draws per parameter"), needed: need as u128 * 8, available: Some(free as u64) });
            }
            Some(dev.stream.alloc_zeros::<f64>(need).map_err(|e| dev.err("allocating the diagnostics' working memory", e))?)
        };
        let shared_bytes = if fits { (doubles * 8) as u32 } else { 0 };
        Ok(DeviceDiagnostics { f, chains, now, padded, work: doubles, scratch, blocks, shared_bytes })
    }

    /// The diagnostics of `count` parameters whose draws lie in `draws`
    /// (parameter, then chain, then draw fastest), appended to `out`.
    pub fn run(&self, dev: &Device, draws: &CudaView<f64>, count: usize, out: &mut Diagnostics) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        assert!(draws.len() >= count * self.chains * self.now, "diagnostics: fewer draws than parameters");
        let e = |what| move |err| dev.err(what, err);
        // SAFETY: mcmc_diagnostics writes all 3 x count values.
        let mut d_out = unsafe { dev.stream.alloc::<f64>(3 * count) }.map_err(e("allocating the diagnostics"))?;
        let (now_i, chains_i, count_i, padded_i, stride_i) = (self.now as i32, self.chains as i32, count as i64, self.padded as i32, self.work as i64);
        let null = 0u64;
        let cfg = LaunchConfig { grid_dim: (self.blocks.min(count) as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: self.shared_bytes };
        let mut launch = dev.stream.launch_builder(&self.f);
        launch.arg(draws).arg(&now_i).arg(&chains_i).arg(&count_i).arg(&padded_i);
        match &self.scratch {
            Some(s) => launch.arg(s),
            None => launch.arg(&null),
        };
        launch.arg(&stride_i).arg(&mut d_out);
        // SAFETY: mcmc_diagnostics(draws, n, chains, count, P, scratch,
        // stride, out): draws holds count x chains x n values; P is a power
        // of two >= chains x n; scratch (when not null) holds `stride`
        // doubles for each of the grid's blocks, else each block has
        // `stride` doubles of dynamic shared memory; out holds 3 x count.
        unsafe { launch.launch(cfg) }.map_err(e("launching mcmc_diagnostics"))?;
        let mut host = vec![0.0; 3 * count];
        dev.download(&d_out.slice(..), &mut host)?;
        out.rhat.extend_from_slice(&host[..count]);
        out.ess_bulk.extend_from_slice(&host[count..2 * count]);
        out.ess_tail.extend_from_slice(&host[2 * count..]);
        Ok(())
    }
}

/// The diagnostics of a kept x chains x parameters array in host memory
/// (iteration fastest, as [`crate::gibbs::diagnostics::diagnose_array`]
/// takes it), computed on the first device: for tests and benchmarks.
pub fn diagnose_array_on_device(draws: &[f64], kept: usize, chains: usize, work: Work) -> Result<Diagnostics> {
    let dev = &crate::gpu::devices()?[0];
    let per = kept * chains;
    let mut out = Diagnostics::default();
    if per == 0 {
        return Ok(out);
    }
    let diag = DeviceDiagnostics::new(dev, chains, kept, work)?;
    let d = dev.upload_new(draws)?;
    diag.run(dev, &d.slice(..), draws.len() / per, &mut out)?;
    Ok(out)
}
