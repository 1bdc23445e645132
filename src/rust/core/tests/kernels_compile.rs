//! Every kernel compiles with NVRTC for sm_80 and sm_90, for every
//! specialisation the host can request. Needs libnvrtc (no GPU); skipped
//! with a note when NVRTC is absent, and required when BULKEM_REQUIRE_NVRTC
//! is set (CI sets it).

use bulkem_core::em::gpu::{em_prelude, MAX_GPU_COMPONENTS};
use bulkem_core::em::Family;
use bulkem_core::gpu::{compile, kernel_source, kernel_source_with, nvrtc_available, KERNELS};

const ARCHS: [&str; 2] = ["sm_80", "sm_90"];

fn nvrtc_or_skip() -> bool {
    if !nvrtc_available() {
        assert!(std::env::var_os("BULKEM_REQUIRE_NVRTC").is_none(), "BULKEM_REQUIRE_NVRTC is set but libnvrtc was not found");
        eprintln!("skipped: libnvrtc not found");
        return false;
    }
    true
}

/// Compile `file` with each set of definitions and check the entry points.
fn check(file: &str, variants: &[Vec<(&str, i64)>], entries: &[&str]) {
    let src = kernel_source(file).unwrap_or_else(|| panic!("no kernel file {file}"));
    for arch in ARCHS {
        for defines in variants {
            let ptx = compile(&src, arch, defines).unwrap_or_else(|e| panic!("{file}.cu, {arch}, {defines:?}: {e}"));
            let text = ptx.to_src();
            for entry in entries {
                assert!(text.contains(&format!(".entry {entry}")), "{entry} missing from {file}.cu for {arch}, {defines:?}");
            }
        }
    }
}

#[test]
fn every_kernel_file_is_checked() {
    let checked = ["em", "reduce", "gibbs", "hmm", "hmm_batched"];
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
                let ptx = compile(&src, arch, &[("EM_M", m)]).unwrap_or_else(|e| panic!("em.cu, {family:?}, {arch}, M = {m}: {e}"));
                let text = ptx.to_src();
                for entry in ["em_warp", "em_partial", "em_update"] {
                    assert!(text.contains(&format!(".entry {entry}")), "{entry} missing for {family:?}, {arch}, M = {m}");
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
    let entries = ["tree_pairwise", "tree_div2", "tree_small_pairwise", "tree_small_div2", "plain_naive", "plain_kahan", "exact_sum", "exact_bins"];
    check("reduce", &variants, &entries);
}

#[test]
fn gibbs_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    let variants: Vec<Vec<(&str, i64)>> = (0..3).map(|family| vec![("HB_FAMILY", family)]).collect();
    check("gibbs", &variants, &["hb_beta_tiles", "hb_beta_block", "hb_global"]);
}

#[test]
fn hmm_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    let entries = [
        "hmm_forward", "hmm_viterbi", "hmm_backward", "hmm_reduce",
        "hmm_viterbi_tiled",
        "hmm_forward_warp", "hmm_viterbi_warp", "hmm_backward_warp",
    ];
    check("hmm", &[vec![]], &entries);
}

#[test]
fn hmm_batched_kernels_compile() {
    if !nvrtc_or_skip() {
        return;
    }
    check("hmm_batched", &[vec![]], &["hmm_forward_batched", "hmm_backward_batched", "hmm_count_emissions", "hmm_m_step", "hmm_xi_gemm"]);
}
