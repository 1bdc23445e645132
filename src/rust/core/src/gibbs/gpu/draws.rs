//! The kept draws on the device: chains x cap x params, chain c's draw i at
//! (c cap + i) params. Without a target `cap` is every kept draw. With one,
//! how long the run lasts is not known: the buffer starts with the first
//! check's draws and grows as the checks ask for more (by half at least, to
//! at most max.iter's), rather than reserving max.iter's from the start.

use cudarc::driver::{CudaFunction, CudaSlice, CudaView, LaunchConfig, PushKernelArg};

use super::diagnostics::{DeviceDiagnostics, Work};
use super::ptr;
use crate::gibbs::diagnostics::Diagnostics;
use crate::error::{Error, Result};
use crate::gpu::Device;

pub(super) struct Draws {
    buf: CudaSlice<f64>,
    /// Draws per chain the buffer holds.
    pub cap: usize,
    chains: usize,
    params: usize,
    /// Draws per chain of the longest run (max.iter's).
    most: usize,
    /// hb_draws_order, which lays draws out in the host's order.
    order: CudaFunction,
}

/// Bytes of draws laid out in the host's order at a time (a device buffer
/// of this size at most).
const ORDER_BYTES: usize = 64 << 20;

impl Draws {
    /// A buffer of `first` draws per chain (at most `most`), refused by its
    /// size rather than by a CUDA error.
    pub fn new(dev: &Device, chains: usize, params: usize, first: usize, most: usize, order: CudaFunction) -> Result<Draws> {
        let cap = first.clamp(1, most.max(1));
        let buf = Self::alloc(dev, chains, params, cap, || format!("hbglm() on the GPU: a draws buffer of {cap} kept draws x {chains} chains x {params} parameters"))?;
        Ok(Draws { buf, cap, chains, params, most, order })
    }

    fn alloc(dev: &Device, chains: usize, params: usize, cap: usize, what: impl Fn() -> String) -> Result<CudaSlice<f64>> {
        let len = (chains * cap * params).max(1);
        let free = dev.free_memory()?;
        if len as u128 * 8 > free as u128 {
            return Err(Error::OutOfMemory { what: what(), needed: len as u128 * 8, available: Some(free as u64) });
        }
        dev.stream.alloc_zeros::<f64>(len).map_err(|e| dev.err("allocating the draws", e))
    }

    pub fn ptr(&self, dev: &Device) -> u64 {
        ptr(&self.buf, dev)
    }

    /// Room for `needed` draws per chain, the first `written` of each
    /// chain kept; true when the buffer moved (its pointer and `cap` are
    /// then new).
    pub fn ensure(&mut self, dev: &Device, needed: usize, written: usize) -> Result<bool> {
        if needed <= self.cap {
            return Ok(false);
        }
        let (chains, params, most) = (self.chains, self.params, self.most);
        let cap = (self.cap + self.cap / 2).min(most).max(needed);
        let mut buf = Self::alloc(dev, chains, params, cap, || {
            format!("hbglm() on the GPU: growing the draws buffer to {cap} kept draws x {chains} chains x {params} parameters (the target not met after {written} kept draws; max.iter allows {most})")
        })?;
        let e = |err| dev.err("copying the draws", err);
        for c in 0..chains {
            let from = self.buf.slice(c * self.cap * params..(c * self.cap + written) * params);
            let mut to = buf.slice_mut(c * cap * params..(c * cap + written) * params);
            dev.stream.memcpy_dtod(&from, &mut to).map_err(e)?;
        }
        // The old buffer is freed once the copies are done.
        dev.stream.synchronize().map_err(e)?;
        self.buf = buf;
        self.cap = cap;
        Ok(true)
    }

    /// The first `now` draws of every chain in the host's (R's) order:
    /// draw fastest, then chain, then parameter. Laid out so on the device,
    /// a block of parameters at a time, and copied straight into place.
    pub fn read_ordered(&self, dev: &Device, now: usize) -> Result<Vec<f64>> {
        let per = self.chains * now;
        let mut host = crate::memory::try_vec_par(per * self.params, 0.0, "the draws of hbglm()")?;
        self.each_ordered(dev, now, |q0, ordered| dev.download(ordered, &mut host[q0 * per..q0 * per + ordered.len()]))?;
        Ok(host)
    }

    /// A target's check on the device: the diagnostics of every parameter
    /// from its first `now` draws per chain, with a look at `monitor`
    /// between blocks of parameters.
    pub fn diagnose(&self, dev: &Device, now: usize, monitor: &crate::exec::Monitor) -> Result<Diagnostics> {
        let diag = DeviceDiagnostics::new(dev, self.chains, now, Work::Auto)?;
        let mut out = Diagnostics::default();
        self.each_ordered(dev, now, |_, ordered| {
            monitor.check()?;
            diag.run(dev, ordered, ordered.len() / (self.chains * now), &mut out)
        })?;
        Ok(out)
    }

    /// `visit(q0, draws)` for blocks of parameters q0.., their first `now`
    /// draws per chain laid out in the host's order in a device buffer.
    fn each_ordered(&self, dev: &Device, now: usize, mut visit: impl FnMut(usize, &CudaView<f64>) -> Result<()>) -> Result<()> {
        let (chains, params) = (self.chains, self.params);
        let per = chains * now;
        if per == 0 || params == 0 {
            return Ok(());
        }
        let block = (ORDER_BYTES / 8 / per).clamp(1, params);
        let e = |what| move |err| dev.err(what, err);
        // SAFETY: hb_draws_order writes every value the visits read.
        let mut tmp = unsafe { dev.stream.alloc::<f64>(block * per) }.map_err(e("allocating the draws' copy"))?;
        let (params_i, cap_i, now_i, chains_i) = (params as i64, self.cap as i64, now as i32, chains as i32);
        for q0 in (0..params).step_by(block) {
            let count = block.min(params - q0) * per;
            let (q0_i, count_i) = (q0 as i64, count as i64);
            let cfg = LaunchConfig { grid_dim: (count.div_ceil(256).min(1 << 16) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            let mut launch = dev.stream.launch_builder(&self.order);
            launch.arg(&self.buf).arg(&params_i).arg(&cap_i).arg(&now_i).arg(&chains_i).arg(&q0_i).arg(&count_i).arg(&mut tmp);
            // SAFETY: hb_draws_order(draws, params, cap, now, chains, q0,
            // count, out): draws holds chains x cap x params values, now <=
            // cap, parameters q0.. q0 + count / per exist, and out holds
            // count >= the values it writes (block x per).
            unsafe { launch.launch(cfg) }.map_err(e("launching hb_draws_order"))?;
            visit(q0, &tmp.slice(..count))?;
        }
        Ok(())
    }
}
