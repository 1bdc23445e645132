//! Memory a job needs, against what this process may use. Each area writes
//! its estimate from the job's sizes (with [`bytes`]) and calls [`ensure`]
//! before allocating; large buffers are then allocated fallibly
//! ([`try_vec`]), so that no size a user can type aborts the process.

use crate::error::{Error, Result};

/// Bytes held by `counts` multiplied together, of elements of type `T`;
/// saturates instead of overflowing (a size a user typed can be absurd).
pub fn bytes<T>(counts: &[usize]) -> u128 {
    counts.iter().fold(std::mem::size_of::<T>() as u128, |acc, &c| acc.saturating_mul(c as u128))
}

/// Bytes this process may still allocate: the smallest of the system's
/// available memory, the cgroup (container or Slurm job) allotment left,
/// and `BULKEM_MEMORY_LIMIT` (bytes) when set. `None` when none is known.
pub fn available() -> Option<u64> {
    [mem_available(), cgroup_available(), env_limit()].into_iter().flatten().min()
}

/// `Err(OutOfMemory)` when `needed` bytes exceed [`available`]; `what`
/// names the job and the sizes behind the estimate, as the user gave them.
pub fn ensure(what: impl FnOnce() -> String, needed: u128) -> Result<()> {
    // Beyond what any address space holds, whatever the machine says.
    let limit = available().map(u128::from).unwrap_or(u128::from(u64::MAX) / 2);
    if needed > limit {
        Err(Error::OutOfMemory { what: what(), needed, available: available() })
    } else {
        Ok(())
    }
}

/// `vec![value; n]`, or `Err(OutOfMemory)` instead of an abort.
pub fn try_vec<T: Clone>(n: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut v = try_with_capacity(n, what)?;
    v.resize(n, value);
    Ok(v)
}

/// As [`try_vec`], the values written by the calling pool's threads. A
/// fresh buffer's pages are mapped as they are first written, which one
/// thread does at about 1.4 GB/s: 3.4 s of each target check of a
/// 10^5-group hbglm, whose draws are 4.8 GB and more (BENCHMARKS.md).
pub fn try_vec_par<T: Copy + Send + Sync>(n: usize, value: T, what: &str) -> Result<Vec<T>> {
    use rayon::prelude::*;
    let mut v: Vec<T> = try_with_capacity(n, what)?;
    advise_huge_pages(v.as_mut_ptr().cast(), n * std::mem::size_of::<T>());
    v.spare_capacity_mut()[..n].par_chunks_mut(1 << 16).for_each(|c| {
        for x in c {
            x.write(value);
        }
    });
    // SAFETY: the first n values were written above.
    unsafe { v.set_len(n) };
    Ok(v)
}

/// A copy of `src` written by the calling pool's threads (a fresh
/// buffer's pages are mapped as they are first written: see
/// [`try_vec_par`]), or `Err(OutOfMemory)` instead of an abort.
pub fn try_copy_par<T: Copy + Send + Sync>(src: &[T], what: &str) -> Result<Vec<T>> {
    use rayon::prelude::*;
    let n = src.len();
    let mut v: Vec<T> = try_with_capacity(n, what)?;
    advise_huge_pages(v.as_mut_ptr().cast(), std::mem::size_of_val(src));
    // 16K values a task: a 2 MB table on 16 threads.
    v.spare_capacity_mut()[..n].par_chunks_mut(1 << 14).zip(src.par_chunks(1 << 14)).for_each(|(o, i)| {
        for (o, &x) in o.iter_mut().zip(i) {
            o.write(x);
        }
    });
    // SAFETY: the first n values were written above.
    unsafe { v.set_len(n) };
    Ok(v)
}

/// Ask the system to map the untouched buffer at `ptr` (`len` bytes)
/// with 2 MiB pages where it allows them (transparent huge pages in
/// "madvise" mode): a fresh 80 MB buffer written by 16 threads took 4.5-5
/// ms in 4 KiB pages and 3.2 ms in huge ones on the GPU machines' hosts
/// (BENCHMARKS.md). Only the aligned interior is advised, and the advice
/// is a hint: a refusal changes nothing, so its result is ignored.
pub(crate) fn advise_huge_pages(ptr: *mut u8, len: usize) {
    const HUGE: usize = 2 << 20;
    if len < 2 * HUGE {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: std::ffi::c_int) -> std::ffi::c_int;
        }
        const MADV_HUGEPAGE: std::ffi::c_int = 14;
        let (start, end) = ((ptr as usize).next_multiple_of(HUGE), (ptr as usize + len) / HUGE * HUGE);
        if end > start {
            // SAFETY: [start, end) lies inside the caller's allocation;
            // MADV_HUGEPAGE changes how pages are mapped, not their
            // contents (untouched pages read as zeros either way).
            unsafe { madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = ptr;
}

/// `Vec::with_capacity(n)`, or `Err(OutOfMemory)` instead of an abort.
pub fn try_with_capacity<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        what: what.to_string(),
        needed: bytes::<T>(&[n]),
        available: available(),
    })?;
    Ok(v)
}

/// A copy of `values`, allocated fallibly; a long one written on every
/// thread of the current pool: on one thread the pages of a fresh 80 MB
/// vector and the copy take tens of ms, more than a GPU fit of the values.
pub fn try_copy<T: Copy + Send + Sync>(values: &[T], what: &str) -> Result<Vec<T>> {
    use rayon::prelude::*;
    let mut v: Vec<T> = try_with_capacity(values.len(), what)?;
    if values.len() < 1 << 18 {
        v.extend_from_slice(values);
    } else {
        advise_huge_pages(v.as_mut_ptr().cast(), std::mem::size_of_val(values));
        v.par_extend(values.par_iter().copied());
    }
    Ok(v)
}

/// [`try_copy`] of every part, the parts side by side on the pool's threads
/// (a call's many short weight vectors as well as one long one).
pub fn try_copy_all<T: Copy + Send + Sync>(parts: &[&[T]], what: &str) -> Result<Vec<Vec<T>>> {
    use rayon::prelude::*;
    parts.par_iter().map(|p| try_copy(p, what)).collect()
}

/// "12.0 GB", "512 MB", ...
pub fn format_bytes(b: u128) -> String {
    let gb = b as f64 / 1e9;
    if gb >= 1e6 {
        format!("{:.1e} GB", gb)
    } else if gb >= 1.0 {
        format!("{gb:.1} GB")
    } else {
        format!("{:.0} MB", (b as f64 / 1e6).max(1.0))
    }
}

pub(crate) fn describe_available(available: Option<u64>) -> String {
    match available {
        Some(a) => format!("only {} is available", format_bytes(a as u128)),
        None => "that is more than this machine can address".into(),
    }
}

fn env_limit() -> Option<u64> {
    std::env::var("BULKEM_MEMORY_LIMIT").ok()?.trim().parse::<f64>().ok().filter(|x| *x >= 0.0).map(|x| x as u64)
}

/// MemAvailable of /proc/meminfo (Linux).
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// The memory left under this process's cgroup limit (v2, then v1).
fn cgroup_available() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
    let (limit, used) = match (read("/sys/fs/cgroup/memory.max"), read("/sys/fs/cgroup/memory.current")) {
        (Some(l), Some(u)) => (l, u),
        _ => (read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?, read("/sys/fs/cgroup/memory/memory.usage_in_bytes")?),
    };
    // v1 reports "no limit" as a huge number.
    (limit < u64::MAX / 4).then(|| limit.saturating_sub(used))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_copies_are_the_source() {
        // Lengths around a task's 16K values, on a pool of several threads.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        for n in [0usize, 1, (1 << 14) - 1, 1 << 14, 5 * (1 << 14) + 7] {
            let src: Vec<f64> = (0..n).map(|i| (i as f64 * 0.3).sin()).collect();
            let copy = pool.install(|| try_copy_par(&src, "a test copy")).unwrap();
            assert_eq!(copy.len(), n);
            assert!(copy.iter().zip(&src).all(|(a, b)| a.to_bits() == b.to_bits()), "n {n}");
        }
    }

    #[test]
    fn absurd_sizes_are_refused_not_allocated() {
        let need = bytes::<f64>(&[1 << 40, 1 << 40]);
        let err = ensure(|| "a test job".into(), need).unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::Memory);
        assert!(err.to_string().starts_with("a test job needs"), "{err}");
        assert!(try_vec(usize::MAX / 16, 0f64, "x").is_err());
        assert!(try_vec_par(usize::MAX / 16, 0f64, "x").is_err());
    }

    #[test]
    fn parallel_vectors_hold_the_value() {
        for n in [0, 1, 65_536, 200_001] {
            let v = try_vec_par(n, 2.5f64, "x").unwrap();
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 2.5));
        }
    }

    #[test]
    fn sizes_saturate_and_format() {
        assert_eq!(bytes::<u8>(&[usize::MAX, usize::MAX, 4]), u128::MAX);
        assert_eq!(bytes::<f64>(&[3, 5]), 120);
        assert_eq!(format_bytes(12_000_000_000), "12.0 GB");
        assert_eq!(format_bytes(512_000_000), "512 MB");
        assert!(ensure(|| "small".into(), 1024).is_ok());
    }
}
