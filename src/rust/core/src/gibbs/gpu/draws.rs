//! The kept draws on the device: chains x cap x params, chain c's draw i at
//! (c cap + i) params. Without a target `cap` is every kept draw. With one,
//! how long the run lasts is not known: the buffer starts with the first
//! check's draws and grows as the checks ask for more (by half at least, to
//! at most max.iter's), rather than reserving max.iter's from the start.

use cudarc::driver::CudaSlice;

use super::ptr;
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
}

impl Draws {
    /// A buffer of `first` draws per chain (at most `most`), refused by its
    /// size rather than by a CUDA error.
    pub fn new(dev: &Device, chains: usize, params: usize, first: usize, most: usize) -> Result<Draws> {
        let cap = first.clamp(1, most.max(1));
        let buf = Self::alloc(dev, chains, params, cap, || format!("hbglm() on the GPU: a draws buffer of {cap} kept draws x {chains} chains x {params} parameters"))?;
        Ok(Draws { buf, cap, chains, params, most })
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

    /// The first `now` draws of every chain, chain after chain (draw i of
    /// chain c at (c now + i) params).
    pub fn read(&self, dev: &Device, now: usize) -> Result<Vec<f64>> {
        let params = self.params;
        let mut host = crate::memory::try_vec((self.chains * now * params).max(1), 0.0, "the draws of hbglm()")?;
        for c in 0..self.chains {
            let part = self.buf.slice(c * self.cap * params..(c * self.cap + now) * params);
            dev.stream.memcpy_dtoh(&part, &mut host[c * now * params..(c + 1) * now * params]).map_err(|e| dev.err("reading the draws", e))?;
        }
        Ok(host)
    }
}
