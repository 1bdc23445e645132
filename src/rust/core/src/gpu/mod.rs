//! CUDA devices: detection that never panics, one context, stream and
//! kernel cache per device. Kernels are CUDA C sources under `kernels/`,
//! compiled at run time by NVRTC for the device's compute capability, and
//! kept on disk between processes when a directory is set (`cache`).

pub mod cache;
mod kernels;
mod staging;
mod transfer;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use crate::error::{Error, Result};

pub use kernels::{kernel_source, kernel_source_with, Kernel, KERNELS};
pub use transfer::{bytes_of, width_for};
pub(crate) use transfer::parts_as_f32;

/// What was found of one CUDA device.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub total_memory: usize,
    pub usable: bool,
    /// Why the device cannot be used (empty when usable).
    pub reason: String,
}

/// The CUDA situation of this process.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub devices: Vec<DeviceInfo>,
    /// Why no device can be used (empty when at least one can).
    pub reason: String,
}

impl Probe {
    pub fn usable(&self) -> bool {
        self.devices.iter().any(|d| d.usable)
    }
}

/// A usable device with its stream and compiled kernels.
pub struct Device {
    pub info: DeviceInfo,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// A second stream, for kernels that run while `stream` copies (a
    /// density's rows computed from the observations already on the
    /// device while the rest cross the bus), ordered against `stream` by
    /// events where it is used.
    pub aside: Arc<CudaStream>,
    pub multiprocessors: u32,
    pub max_shared_per_block: usize,
    arch: &'static str,
    modules: Mutex<HashMap<String, Arc<CudaModule>>>,
    /// Functions found in the modules, their shared-memory limit raised:
    /// finding one takes three driver calls, and a call at 512 states
    /// looks up eight.
    functions: Mutex<HashMap<String, CudaFunction>>,
    /// Pinned host memory for copies (`transfer`), made on first use.
    staging: Mutex<Option<staging::Staging>>,
    /// Free memory (bytes) at the last reading, for [`Device::memory_share`].
    last_free: std::sync::atomic::AtomicUsize,
}

/// A need within this fraction of a share at the last reading of free
/// memory is taken to fit without reading it again ([`Device::memory_share`]).
const STALE_MARGIN: f64 = 0.25;

/// Oldest compute capability the kernels target (double-precision atomics,
/// 48+ KB shared memory).
const MIN_COMPUTE_CAPABILITY: (i32, i32) = (6, 0);

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda; no CUDA call is made.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen libnvrtc.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Whether NVRTC can be loaded (needed to compile kernels).
pub fn nvrtc_available() -> bool {
    nvrtc_present()
}

/// Run a cudarc call that may panic (it panics when a symbol is missing from
/// an old driver), turning the panic into an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> std::result::Result<T, cudarc::driver::DriverError>) -> std::result::Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: the CUDA driver library is incompatible")),
    }
}

struct Registry {
    probe: Probe,
    devices: Vec<Arc<Device>>,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(open_all)
}

fn open_all() -> Registry {
    let none = |reason: &str| Registry { probe: Probe { devices: vec![], reason: reason.to_string() }, devices: vec![] };
    if !driver_present() {
        return none("no CUDA driver (libcuda) was found");
    }
    let count = match guarded("counting CUDA devices", CudaContext::device_count) {
        Ok(n) => n.max(0) as usize,
        Err(e) => return none(&e),
    };
    if count == 0 {
        return none("the CUDA driver reports no device");
    }
    let have_nvrtc = nvrtc_present();
    let mut infos = Vec::new();
    let mut devices = Vec::new();
    for ordinal in 0..count {
        match open_device(ordinal, have_nvrtc) {
            Ok(dev) => {
                infos.push(dev.info.clone());
                devices.push(Arc::new(dev));
            }
            Err(info) => infos.push(info),
        }
    }
    let reason = if devices.is_empty() {
        infos.iter().map(|d| format!("device {}: {}", d.ordinal, d.reason)).collect::<Vec<_>>().join("; ")
    } else {
        String::new()
    };
    Registry { probe: Probe { devices: infos, reason }, devices }
}

fn open_device(ordinal: usize, have_nvrtc: bool) -> std::result::Result<Device, DeviceInfo> {
    let mut info = DeviceInfo {
        ordinal,
        name: String::from("unknown"),
        compute_capability: (0, 0),
        total_memory: 0,
        usable: false,
        reason: String::new(),
    };
    let ctx = match guarded("opening the device", || CudaContext::new(ordinal)) {
        Ok(ctx) => ctx,
        Err(e) => {
            info.reason = e;
            return Err(info);
        }
    };
    // cudarc's event tracking gives every buffer two events (made at its
    // allocation, destroyed at its free) and, once a context has a stream
    // of its own, records or waits on one for every buffer a launch or copy
    // takes: dozens of driver calls per HMM call, each a round trip to the
    // driver, for an ordering the single stream already gives.
    // SAFETY: every buffer is used on its device's one stream (`stream`),
    // except in EM's launches on two streams, which order them explicitly
    // (em::gpu::run_all: the second stream waits for the first before its
    // first launch, and the first for the second before any buffer the
    // launches read can be freed), and a density's rows computed on
    // `aside` (hmm::gpu::rows: each piece's kernel waits for its copy, and
    // `stream` for those kernels before anything else).
    unsafe { ctx.disable_event_tracking() };
    let query = || -> std::result::Result<(String, (i32, i32), usize, i32, i32), String> {
        Ok((
            guarded("reading its name", || ctx.name())?,
            guarded("reading its compute capability", || ctx.compute_capability())?,
            guarded("reading its memory", || ctx.total_mem())?,
            guarded("reading its multiprocessors", || ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT))?,
            guarded("reading its shared memory", || {
                ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            })?,
        ))
    };
    let (name, cc, mem, sms, smem) = match query() {
        Ok(v) => v,
        Err(e) => {
            info.reason = e;
            return Err(info);
        }
    };
    info.name = name;
    info.compute_capability = cc;
    info.total_memory = mem;
    if cc < MIN_COMPUTE_CAPABILITY {
        info.reason = format!("compute capability {}.{} is below the required {}.{}", cc.0, cc.1, MIN_COMPUTE_CAPABILITY.0, MIN_COMPUTE_CAPABILITY.1);
        return Err(info);
    }
    if !have_nvrtc {
        info.reason = "the NVRTC library (libnvrtc), needed to compile the kernels, was not found".into();
        return Err(info);
    }
    let (stream, aside) = match guarded("creating its streams", || Ok((ctx.new_stream()?, ctx.new_stream()?))) {
        Ok(s) => s,
        Err(e) => {
            info.reason = e;
            return Err(info);
        }
    };
    // Not fatal: without it, freed memory goes back to the driver at each
    // synchronisation and is mapped again by the next call.
    let _ = keep_freed_memory(&ctx, mem);
    info.usable = true;
    Ok(Device {
        info,
        ctx,
        stream,
        aside,
        multiprocessors: sms.max(1) as u32,
        max_shared_per_block: smem.max(0) as usize,
        arch: arch_name(cc),
        modules: Mutex::new(HashMap::new()),
        functions: Mutex::new(HashMap::new()),
        staging: Mutex::new(None),
        last_free: std::sync::atomic::AtomicUsize::new(0),
    })
}

/// Let the device's stream-ordered memory pool keep up to a quarter of
/// the device's memory once freed, instead of unmapping it at every
/// synchronisation: a call's scratch (Viterbi back-pointers, scaled
/// alphas: gigabytes for 10^7 observations) is then mapped once per
/// process, not once per call (several ms each time). `free_memory`
/// counts what the pool keeps unused as free.
fn keep_freed_memory(ctx: &CudaContext, total: usize) -> std::result::Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::sys;
    ctx.bind_to_thread()?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut keep = (total / 4) as u64;
    // SAFETY: the context is current; `pool` and `keep` are valid for the
    // calls (a pool handle out, a u64 attribute in).
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()).result()?;
        sys::cuMemPoolSetAttribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, (&mut keep as *mut u64).cast()).result()
    }
}

/// Bytes the device's default memory pool holds but does not use.
fn pool_unused(ctx: &CudaContext) -> std::result::Result<usize, cudarc::driver::DriverError> {
    use cudarc::driver::sys;
    ctx.bind_to_thread()?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let (mut reserved, mut used) = (0u64, 0u64);
    // SAFETY: as in keep_freed_memory; both attributes are u64.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()).result()?;
        sys::cuMemPoolGetAttribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, (&mut reserved as *mut u64).cast()).result()?;
        sys::cuMemPoolGetAttribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT, (&mut used as *mut u64).cast()).result()?;
    }
    Ok(reserved.saturating_sub(used) as usize)
}

/// NVRTC's name for a compute capability, e.g. "sm_90".
pub fn arch_name(cc: (i32, i32)) -> &'static str {
    match cc {
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 9) => "sm_89",
        (9, 0) => "sm_90",
        (10, 0) => "sm_100",
        (12, 0) => "sm_120",
        // Leaked once per unusual device of the process: NVRTC wants &'static str.
        (major, minor) => Box::leak(format!("sm_{major}{minor}").into_boxed_str()),
    }
}

/// What CUDA offers this process; computed once.
pub fn probe() -> Probe {
    registry().probe.clone()
}

/// The usable devices, or why there are none.
pub fn devices() -> Result<&'static [Arc<Device>]> {
    let reg = registry();
    if reg.devices.is_empty() {
        Err(Error::BackendUnavailable(reg.probe.reason.clone()))
    } else {
        Ok(&reg.devices)
    }
}

/// Contiguous ranges of items (`weights`: each item's work), at most
/// `parts` of them and none empty, each of about an equal share of the
/// total work: how a call's datasets or sequences are spread over devices.
pub fn split_even(weights: impl Iterator<Item = usize> + Clone, parts: usize) -> Vec<Range<usize>> {
    let total: usize = weights.clone().sum();
    let mut ranges = Vec::with_capacity(parts);
    let (mut start, mut acc, mut count) = (0, 0usize, 0);
    for (i, w) in weights.enumerate() {
        acc += w;
        count = i + 1;
        let k = ranges.len() + 1;
        if k < parts && acc * parts >= total * k {
            ranges.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < count || ranges.is_empty() {
        ranges.push(start..count);
    }
    ranges
}

/// Compile one kernel source for `arch` with `-D` definitions.
pub fn compile(source: &str, arch: &'static str, defines: &[(&str, i64)]) -> std::result::Result<Ptx, String> {
    let opts = CompileOptions {
        arch: Some(arch),
        options: defines.iter().map(|(k, v)| format!("-D{k}={v}")).collect(),
        ..Default::default()
    };
    std::panic::catch_unwind(|| compile_ptx_with_opts(source, opts))
        .map_err(|_| "NVRTC could not be loaded".to_string())?
        .map_err(|e| match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                format!("kernel compilation failed:\n{}", log.to_string_lossy())
            }
            other => format!("kernel compilation failed: {other:?}"),
        })
}

/// [`compile`] through the kernel cache on disk (`cache`), when there is
/// one: the same PTX, without NVRTC's seconds when an earlier process
/// compiled it.
pub fn compile_cached(source: &str, arch: &'static str, defines: &[(&str, i64)]) -> std::result::Result<Ptx, String> {
    let Some((dir, key)) = cache::dir().zip(nvrtc_version()).map(|(d, v)| (d, cache::key(source, arch, defines, v))) else {
        return compile(source, arch, defines);
    };
    if let Some(ptx) = cache::read(&dir, &key) {
        return Ok(Ptx::from_src(ptx));
    }
    let ptx = compile(source, arch, defines)?;
    cache::write(&dir, &key, &ptx.to_src());
    Ok(ptx)
}

/// NVRTC's version, if it can be loaded (part of a cache entry's key: its
/// PTX is what that version makes).
fn nvrtc_version() -> Option<(i32, i32)> {
    if !nvrtc_present() {
        return None;
    }
    std::panic::catch_unwind(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: nvrtcVersion writes two ints through valid pointers.
        let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        (r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
    })
    .ok()
    .flatten()
}

impl Device {
    /// `kernel` compiled with `defines`, compiled once per device (per
    /// file and definitions) and cached.
    pub fn function(&self, kernel: Kernel, defines: &[(&str, i64)]) -> Result<CudaFunction> {
        self.function_with(kernel, None, defines)
    }

    /// As [`Device::function`], with `prelude` = (key, source) inserted
    /// before the kernel file (e.g. a mixture family's block); the key
    /// names it in the cache.
    pub fn function_with(&self, kernel: Kernel, prelude: Option<(&str, &str)>, defines: &[(&str, i64)]) -> Result<CudaFunction> {
        let (file, name) = kernel.location();
        let key = format!("{file}{defines:?}{}", prelude.map_or("", |p| p.0));
        let f_key = format!("{key} {name}");
        if let Some(f) = self.functions.lock().unwrap_or_else(|e| e.into_inner()).get(&f_key) {
            return Ok(f.clone());
        }
        let cached = self.modules.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        let module = match cached {
            Some(m) => m,
            None => {
                // Compiled outside the lock, so that calls on other threads
                // compile their variants at the same time; of two compiles of
                // one variant, the first one stored is kept.
                let src = kernel_source_with(file, prelude.map_or("", |p| p.1))
                    .ok_or_else(|| Error::BackendUnavailable(format!("no kernel file {file}")))?;
                let ptx = compile_cached(&src, self.arch, defines).map_err(Error::BackendUnavailable)?;
                let m = self.ctx.load_module(ptx).map_err(|e| self.err("loading kernels", e))?;
                self.modules.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_insert(m).clone()
            }
        };
        let f = module.load_function(name).map_err(|e| self.err(&format!("finding kernel {name}"), e))?;
        self.allow_all_shared(&f)?;
        Ok(self.functions.lock().unwrap_or_else(|e| e.into_inner()).entry(f_key).or_insert(f).clone())
    }

    /// Raise `f`'s dynamic shared-memory limit to all the device allows
    /// beside its static shared memory. Always the same value: launches of
    /// one function from several threads with different sizes never lower
    /// the limit under one another (a per-launch limit did, and a
    /// concurrent launch then failed with CUDA_ERROR_INVALID_VALUE). The
    /// limit does not change occupancy, which follows what a launch asks for.
    fn allow_all_shared(&self, f: &CudaFunction) -> Result<()> {
        let fixed = f.shared_size_bytes().map_err(|e| self.err("reading a kernel's shared memory", e))?;
        let limit = (self.max_shared_per_block as i32 - fixed).max(0);
        f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, limit)
            .map_err(|e| self.err("raising the shared-memory limit", e))
    }

    /// A driver error as a core error naming this device.
    pub fn err(&self, what: &str, e: cudarc::driver::DriverError) -> Error {
        Error::BackendUnavailable(format!("CUDA device {} ({}): {what}: {e}", self.info.ordinal, self.info.name))
    }

    /// Free device memory in bytes, with what the memory pool keeps for reuse.
    pub fn free_memory(&self) -> Result<usize> {
        let free = self.ctx.mem_get_info().map(|(free, _)| free).map_err(|e| self.err("reading free memory", e))?;
        let free = free + pool_unused(&self.ctx).unwrap_or(0);
        self.last_free.store(free, std::sync::atomic::Ordering::Relaxed);
        Ok(free)
    }

    /// `share` of the free device memory, in bytes, for a use that needs
    /// at most `need` bytes. A need within a quarter of that share at the
    /// last reading gets that quarter without a new one: reading free
    /// memory is three driver calls (4-7 us alone, 0.01-0.03 ms inside a
    /// call on the GPU host), which a small call paid several times. Memory taken since the
    /// last reading (by other calls or processes) is what the margin
    /// allows for; should it not suffice, the allocation fails with its
    /// error. A larger need reads the free memory afresh.
    pub fn memory_share(&self, share: f64, need: usize) -> Result<usize> {
        let quarter = (self.last_free.load(std::sync::atomic::Ordering::Relaxed) as f64 * share * STALE_MARGIN) as usize;
        if need <= quarter {
            return Ok(quarter);
        }
        Ok((self.free_memory()? as f64 * share) as usize)
    }
}

/// Wall time of the phases of the last GPU calls, for benchmarks (the
/// library itself never prints).
pub mod timing {
    use std::sync::Mutex;
    use std::time::Instant;

    static PHASES: Mutex<Vec<(&'static str, f64)>> = Mutex::new(Vec::new());

    /// At most this many phases are kept between two `take`s (a session
    /// that never takes them must not grow without bound).
    const KEEP: usize = 4096;

    /// Record that `phase` ran from `since` until now.
    pub fn record(phase: &'static str, since: Instant) {
        record_secs(phase, since.elapsed().as_secs_f64());
    }

    /// Record that `phase` took `secs` seconds.
    pub fn record_secs(phase: &'static str, secs: f64) {
        let mut phases = PHASES.lock().unwrap_or_else(|e| e.into_inner());
        if phases.len() < KEEP {
            phases.push((phase, secs));
        }
    }

    /// The phases recorded since the last call.
    pub fn take() -> Vec<(&'static str, f64)> {
        std::mem::take(&mut *PHASES.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::split_even;

    #[test]
    fn shares_are_contiguous_non_empty_and_about_equal() {
        assert_eq!(split_even([5, 5, 5, 5].into_iter(), 2), vec![0..2, 2..4]);
        assert_eq!(split_even([5, 5, 5, 5].into_iter(), 1), vec![0..4]);
        // More parts than items, and one item heavier than the rest.
        assert_eq!(split_even([1, 1].into_iter(), 5), vec![0..1, 1..2]);
        assert_eq!(split_even([100, 1, 1, 1].into_iter(), 2), vec![0..1, 1..4]);
        assert_eq!(split_even(std::iter::empty(), 3), vec![0..0]);
        let w: Vec<usize> = (0..1000).map(|i| 1 + i % 7).collect();
        let r = split_even(w.iter().copied(), 3);
        assert_eq!((r.len(), r[0].start, r[2].end), (3, 0, 1000));
        assert!(r.windows(2).all(|p| p[0].end == p[1].start));
        let share = |r: &std::ops::Range<usize>| w[r.clone()].iter().sum::<usize>() as f64 / w.iter().sum::<usize>() as f64;
        assert!(r.iter().all(|x| (share(x) - 1.0 / 3.0).abs() < 0.01));
    }
}
