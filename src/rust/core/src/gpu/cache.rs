//! Compiled kernels kept on disk between processes. NVRTC takes 0.2-6 s
//! per kernel file (on the dev machine: gibbs.cu 6.1 s, em.cu 0.5-1.3 s
//! per family and number of components, hmm_batched.cu 1.7 s), which every
//! new R session paid again on its first GPU call. An entry is the PTX of
//! one (source, architecture, definitions, NVRTC version, crate version),
//! named by a 128-bit FNV-1a hash of them, with the whole hash on its last
//! line, checked on reading: an entry that is cut short, altered or from
//! another key is compiled again and rewritten. The directory is kept
//! under [`LIMIT`] bytes, the least recently used entries removed first.
//! There is no directory unless one is set ([`set_dir`], which the R
//! package does with its `tools::R_user_dir()` cache) or named by the
//! `BULKEM_KERNEL_CACHE` environment variable; without one every process
//! compiles its kernels itself, as before.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Bytes the cache directory may hold (an entry is 0.1-1 MB of PTX).
pub const LIMIT: u64 = 64 << 20;

/// The directory set by [`set_dir`]: None = not set (the environment
/// variable decides), Some(None) = no cache.
static DIR: Mutex<Option<Option<PathBuf>>> = Mutex::new(None);

/// Keep compiled kernels in `dir` (created when the first is written), or
/// in none with `None`. Overrides `BULKEM_KERNEL_CACHE`.
pub fn set_dir(dir: Option<PathBuf>) {
    *DIR.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir);
}

/// The directory compiled kernels are kept in, if any.
pub fn dir() -> Option<PathBuf> {
    match &*DIR.lock().unwrap_or_else(|e| e.into_inner()) {
        Some(set) => set.clone(),
        None => std::env::var_os("BULKEM_KERNEL_CACHE").filter(|v| !v.is_empty()).map(PathBuf::from),
    }
}

/// 128-bit FNV-1a of `parts`, each followed by a 0 byte (so that ("ab",
/// "c") and ("a", "bc") differ).
fn fnv128(parts: &[&[u8]]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;
    let mut h = OFFSET;
    for part in parts {
        for &b in part.iter().chain(&[0u8]) {
            h ^= b as u128;
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// The name of the entry for `source` compiled for `arch` with `defines`
/// by NVRTC `version`.
pub fn key(source: &str, arch: &str, defines: &[(&str, i64)], version: (i32, i32)) -> String {
    let defines = format!("{defines:?}");
    let version = format!("nvrtc {}.{} bulkem {}", version.0, version.1, env!("CARGO_PKG_VERSION"));
    format!("{:032x}", fnv128(&[source.as_bytes(), arch.as_bytes(), defines.as_bytes(), version.as_bytes()]))
}

/// The line that ends an entry of `key`.
fn trailer(key: &str) -> String {
    format!("\n// bulkem kernel cache {key}\n")
}

/// The PTX of entry `key` in `dir`, if it is there and whole; marks it used.
pub fn read(dir: &Path, key: &str) -> Option<String> {
    let path = dir.join(format!("{key}.ptx"));
    let text = fs::read_to_string(&path).ok()?;
    let ptx = text.strip_suffix(&trailer(key))?;
    // Least recently used first out: reading counts as a use.
    if let Ok(f) = fs::File::options().append(true).open(&path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
    Some(ptx.to_string())
}

/// Keep `ptx` as entry `key` in `dir`, then trim the directory to
/// [`LIMIT`]. Written to a file of its own and renamed, so that a reader
/// (another process) never sees half an entry. Failures are ignored: the
/// cache only saves time.
pub fn write(dir: &Path, key: &str, ptx: &str) {
    if fs::create_dir_all(dir).is_err() {
        return;
    }
    // Unique per write: threads of one process may store one key at once.
    static WRITES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!("{key}.{}.{n}.tmp", std::process::id()));
    let written = fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(ptx.as_bytes())?;
        f.write_all(trailer(key).as_bytes())
    });
    if written.is_err() || fs::rename(&tmp, dir.join(format!("{key}.ptx"))).is_err() {
        let _ = fs::remove_file(&tmp);
        return;
    }
    trim(dir, LIMIT);
}

/// Remove the least recently used entries of `dir` until it holds at most
/// `limit` bytes.
pub fn trim(dir: &Path, limit: u64) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "ptx"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= limit {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

/// The entries of `dir` and the bytes they hold.
pub fn usage(dir: &Path) -> (usize, u64) {
    let Ok(entries) = fs::read_dir(dir) else { return (0, 0) };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "ptx"))
        .filter_map(|e| e.metadata().ok())
        .fold((0, 0), |(n, bytes), m| (n + 1, bytes + m.len()))
}

/// Remove every entry of `dir` (the files this cache wrote, nothing else).
/// Returns how many were removed.
pub fn clear(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "ptx" || x == "tmp"))
        .filter(|e| fs::remove_file(e.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bulkem-cache-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn keys_differ_in_every_part() {
        let base = key("src", "sm_90", &[("EM_M", 2)], (13, 0));
        assert_eq!(base, key("src", "sm_90", &[("EM_M", 2)], (13, 0)));
        assert_eq!(base.len(), 32);
        for other in [
            key("src ", "sm_90", &[("EM_M", 2)], (13, 0)),
            key("src", "sm_80", &[("EM_M", 2)], (13, 0)),
            key("src", "sm_90", &[("EM_M", 3)], (13, 0)),
            key("src", "sm_90", &[], (13, 0)),
            key("src", "sm_90", &[("EM_M", 2)], (13, 1)),
        ] {
            assert_ne!(base, other);
        }
        assert_ne!(fnv128(&[b"ab", b"c"]), fnv128(&[b"a", b"bc"]));
    }

    #[test]
    fn an_entry_reads_back_and_a_damaged_one_does_not() {
        let d = scratch("roundtrip");
        let k = key("kernel", "sm_90", &[], (13, 0));
        assert_eq!(read(&d, &k), None);
        write(&d, &k, ".version 9.0\n.entry f()\n");
        assert_eq!(read(&d, &k).as_deref(), Some(".version 9.0\n.entry f()\n"));
        // Cut short (a crash mid-write elsewhere, a full disk): not whole.
        let path = d.join(format!("{k}.ptx"));
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, &text[..text.len() - 5]).unwrap();
        assert_eq!(read(&d, &k), None);
        // Another key's entry under this name: refused.
        let other = key("other", "sm_90", &[], (13, 0));
        write(&d, &other, "ptx");
        fs::rename(d.join(format!("{other}.ptx")), &path).unwrap();
        assert_eq!(read(&d, &k), None);
        assert_eq!(usage(&d).0, 1);
        assert_eq!(clear(&d), 1);
        assert_eq!(usage(&d), (0, 0));
        assert_eq!(fs::read_dir(&d).unwrap().count(), 0);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn trimming_removes_the_least_recently_used_first() {
        let d = scratch("trim");
        let keys: Vec<String> = (0..4).map(|i| key(&format!("k{i}"), "sm_90", &[], (13, 0))).collect();
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        for (i, k) in keys.iter().enumerate() {
            write(&d, k, &"x".repeat(1000));
            let f = fs::File::options().append(true).open(d.join(format!("{k}.ptx"))).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(10 * i as u64)).unwrap();
        }
        // Reading the oldest makes it the newest.
        assert!(read(&d, &keys[0]).is_some());
        let size = fs::metadata(d.join(format!("{}.ptx", keys[0]))).unwrap().len();
        trim(&d, 2 * size);
        let left: Vec<bool> = keys.iter().map(|k| d.join(format!("{k}.ptx")).exists()).collect();
        assert_eq!(left, vec![true, false, false, true]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn the_set_directory_overrides_the_environment() {
        set_dir(Some(PathBuf::from("/nowhere/kernels")));
        assert_eq!(dir(), Some(PathBuf::from("/nowhere/kernels")));
        set_dir(None);
        assert_eq!(dir(), None);
    }
}
