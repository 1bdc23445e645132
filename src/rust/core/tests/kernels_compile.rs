//! Every kernel compiles with NVRTC for sm_80 and sm_90, for every
//! specialisation the host can request. Needs libnvrtc (no GPU); skipped
//! with a note when NVRTC is absent, and required when BULKEM_REQUIRE_NVRTC
//! is set (CI sets it).

use bulkem_core::em::gpu::{em_prelude, MAX_GPU_COMPONENTS};
use bulkem_core::em::Family;
use bulkem_core::hmm::{Emission, Gaussian, Poisson};
use bulkem_core::gpu::{compile, kernel_source, kernel_source_with, nvrtc_available, Kernel, KERNELS};

const ARCHS: [&str; 2] = ["sm_80", "sm_90"];

fn nvrtc_or_skip() -> bool {
    if !nvrtc_available() {
        assert!(std::env::var_os("BULKEM_REQUIRE_NVRTC").is_none(), "BULKEM_REQUIRE_NVRTC is set but libnvrtc was not found");
        eprintln!("skipped: libnvrtc not found");
        return false;
    }
    true
}

/// The entry points `gpu::Kernel` places in `file`.
fn entries(file: &str) -> Vec<&'static str> {
    Kernel::ALL.iter().map(|k| k.location()).filter(|(f, _)| *f == file).map(|(_, e)| e).collect()
}

/// Compile `file` with each set of definitions and check its entry points.
fn check(file: &str, variants: &[Vec<(&str, i64)>]) {
    let src = kernel_source(file).unwrap_or_else(|| panic!("no kernel file {file}"));
    for arch in ARCHS {
        for defines in variants {
            let ptx = compile(&src, arch, defines).unwrap_or_else(|e| panic!("{file}.cu, {arch}, {defines:?}: {e}"));
            let text = ptx.to_src();
            for entry in entries(file) {
                assert!(text.contains(&format!(".entry {entry}")), "{entry} missing from {file}.cu for {arch}, {defines:?}");
            }
        }
    }
}

/// Every `extern "C" __global__` function of every file is a `Kernel`,
/// and every `Kernel` names a file that has it.
#[test]
fn every_entry_point_is_a_typed_kernel() {
    let mut defined = Vec::new();
    for (file, src) in KERNELS {
        for part in src.split("extern \"C\" __global__").skip(1) {
            // Without any __launch_bounds__(...), the name is the last word before '('.
            let part = match part.find("__launch_bounds__(") {
                Some(i) => &part[i + part[i..].find(')').expect("launch bounds close") + 1..],
                None => part,
            };
            let head = &part[..part.find('(').expect("a kernel's parameter list")];
            let name = head.split_whitespace().last().expect("a kernel name");
            defined.push((*file, name.to_string()));
        }
    }
    for (file, name) in &defined {
        assert!(Kernel::ALL.iter().any(|k| k.location() == (*file, name.as_str())), "{file}.cu's {name} has no gpu::Kernel");
    }
    for k in Kernel::ALL {
        let (file, name) = k.location();
        assert!(defined.iter().any(|(f, n)| *f == file && n == name), "{k:?} is not in {file}.cu");
    }
}

#[test]
fn every_kernel_file_is_checked() {
    let checked = ["em", "reduce", "gibbs", "hmm", "hmm_batched", "hmm_emission", "hmm_scan", "transfer", "diagnostics"];
    for (name, _) in KERNELS {
        assert!(checked.contains(name), "kernel file {name}.cu needs a compile test here");
    }
}

/// Every family's block with kernels/em.cu, for every M on sm_90 and one M
/// on sm_80 (the family blocks do not depend on the architecture).
#[test]
fn em_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    for family in Family::ALL {
        let src = kernel_source_with("em", &em_prelude(family)).expect("em source");
        for (arch, ms) in [("sm_90", 1..=MAX_GPU_COMPONENTS as i64), ("sm_80", 3..=3)] {
            for m in ms {
                // Float64, precision = "mixed" (EM_MIXED), and observation
                // weights (EM_WEIGHTED, read as float64 or, with
                // EM_WEIGHTS_FLOAT, float32; its E-step is one loop for
                // every M, so a few M on sm_90 cover it).
                let mut variants = vec![vec![("EM_M", m)], vec![("EM_M", m), ("EM_MIXED", 1)]];
                if arch == "sm_90" && [1, 2, 3, MAX_GPU_COMPONENTS as i64].contains(&m) {
                    variants.push(vec![("EM_M", m), ("EM_WEIGHTED", 1)]);
                    variants.push(vec![("EM_M", m), ("EM_WEIGHTED", 1), ("EM_WEIGHTS_FLOAT", 1)]);
                    // Constraints (the ECM step), and censored data
                    // (intervals after the exact E-step), alone and with both.
                    variants.push(vec![("EM_M", m), ("EM_CONSTRAINED", 1)]);
                    if family.censorable() {
                        variants.push(vec![("EM_M", m), ("EM_CENSORED", 1)]);
                        variants.push(vec![("EM_M", m), ("EM_WEIGHTED", 1), ("EM_CENSORED", 1), ("EM_CONSTRAINED", 1)]);
                        variants.push(vec![("EM_M", m), ("EM_WEIGHTED", 1), ("EM_WEIGHTS_FLOAT", 1), ("EM_CENSORED", 1)]);
                    }
                }
                for defines in variants {
                    let ptx = compile(&src, arch, &defines).unwrap_or_else(|e| panic!("em.cu, {family:?}, {arch}, {defines:?}: {e}"));
                    let text = ptx.to_src();
                    for entry in entries("em") {
                        assert!(text.contains(&format!(".entry {entry}")), "{entry} missing for {family:?}, {arch}, {defines:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    let variants = vec![vec![("REDUCE_SINGLE", 0)], vec![("REDUCE_SINGLE", 1)]];
    check("reduce", &variants);
}

#[test]
fn gibbs_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    // Every family: gaussian, binomial, poisson, negative binomial, ordinal.
    let variants: Vec<Vec<(&str, i64)>> = (0..5).map(|family| vec![("HB_FAMILY", family)]).collect();
    check("gibbs", &variants);
}

#[test]
fn hmm_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    // The thread-per-sequence kernels are compiled for each N up to 8, the
    // group forward pass for each count of 16-state slices from 33 states.
    let variants: Vec<Vec<(&str, i64)>> = std::iter::once(vec![]).chain((1..=8).map(|n| vec![("HMM_TN", n)])).chain((3..=8).map(|k| vec![("HMM_GK", k)])).collect();
    check("hmm", &variants);
}

/// hmm.cu's kernels, hmm_scan.cu's (Baum-Welch's statistics) and
/// hmm_emission.cu with every density emission's block (categorical: the
/// files alone, above).
#[test]
fn hmm_emission_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    fn with<E: Emission>() {
        let prelude = E::cuda();
        assert!(!prelude.is_empty(), "{} has no device block", E::NAME);
        for (file, defines) in [("hmm", vec![("HMM_DENSITY", 1)]), ("hmm", vec![("HMM_DENSITY", 1), ("HMM_TN", 3)]), ("hmm_scan", vec![("HMM_DENSITY", 1), ("SCAN_N", 5)]), ("hmm_emission", vec![])] {
            let src = kernel_source_with(file, &prelude).expect("kernel source");
            for arch in ARCHS {
                let ptx = compile(&src, arch, &defines).unwrap_or_else(|e| panic!("{file}.cu, {}, {arch}: {e}", E::NAME));
                let text = ptx.to_src();
                for entry in entries(file) {
                    assert!(text.contains(&format!(".entry {entry}")), "{entry} missing for {}, {arch}", E::NAME);
                }
            }
        }
    }
    with::<Gaussian>();
    with::<Poisson>();
}

#[test]
fn hmm_batched_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    // Both tilings (batched.rs's Tiling), and hmm_forward_split's clusters
    // of 5 to 8 blocks.
    check("hmm_batched", &[vec![], vec![("HMB_BN", 16), ("HMB_RESIDENT", 1), ("HMB_STAGES", 3)], vec![("HMB_BN", 16), ("HMB_RESIDENT", 1), ("HMB_STAGES", 4)]]);
    check("hmm_batched", &(5..=7).map(|ks| vec![("HMS_KS", ks)]).collect::<Vec<_>>());
}

/// The scan kernels for the smallest, a middle and the largest N.
#[test]
fn hmm_scan_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    check("hmm_scan", &[vec![("SCAN_N", 1)], vec![("SCAN_N", 8)], vec![("SCAN_N", 32)]]);
}

#[test]
fn transfer_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    check("transfer", &[vec![]]);
}

#[test]
fn diagnostics_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    check("diagnostics", &[vec![]]);
}

/// A kernel compiled through the cache on disk comes back from it as the
/// same PTX, and a damaged entry is compiled again and rewritten.
#[test]
fn compiled_kernels_come_back_from_the_disk_cache() {
    if !nvrtc_or_skip() {
        return;
    }
    use bulkem_core::gpu::{cache, compile_cached};
    let dir = std::env::temp_dir().join(format!("bulkem-kernel-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    cache::set_dir(Some(dir.clone()));
    let src = kernel_source("transfer").expect("transfer source");
    let fresh = compile(&src, "sm_90", &[]).expect("compiles").to_src();
    assert_eq!(compile_cached(&src, "sm_90", &[]).expect("compiles").to_src(), fresh);
    assert_eq!(cache::usage(&dir).0, 1);
    let entry = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let t0 = std::time::Instant::now();
    assert_eq!(compile_cached(&src, "sm_90", &[]).expect("from the cache").to_src(), fresh);
    eprintln!("from the cache in {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
    // Another architecture is another entry.
    compile_cached(&src, "sm_80", &[]).expect("compiles");
    assert_eq!(cache::usage(&dir).0, 2);
    // Damaged: compiled again, and the entry made whole.
    std::fs::write(&entry, &fresh[..fresh.len() / 2]).unwrap();
    assert_eq!(compile_cached(&src, "sm_90", &[]).expect("compiles").to_src(), fresh);
    assert!(std::fs::read_to_string(&entry).unwrap().starts_with(&fresh));
    assert_eq!(cache::clear(&dir), 2);
    cache::set_dir(None);
    let _ = std::fs::remove_dir_all(&dir);
}
