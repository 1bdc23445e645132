//! Every kernel compiles with NVRTC for sm_80 and sm_90, for every
//! specialisation the host can request. Needs libnvrtc (no GPU); skipped
//! with a note when NVRTC is absent, and required when BULKEM_REQUIRE_NVRTC
//! is set (CI sets it).

use bulkem_core::em::gpu::MAX_GPU_COMPONENTS;
use bulkem_core::gpu::{compile, kernel_source, nvrtc_available, KERNELS};

#[test]
fn every_kernel_compiles_for_sm80_and_sm90() {
    if !nvrtc_available() {
        assert!(std::env::var_os("BULKEM_REQUIRE_NVRTC").is_none(), "BULKEM_REQUIRE_NVRTC is set but libnvrtc was not found");
        eprintln!("skipped: libnvrtc not found");
        return;
    }
    assert_eq!(KERNELS.len(), 2, "a new kernel file needs its specialisations listed here");
    let src = kernel_source("em").expect("em kernel source");
    for arch in ["sm_80", "sm_90"] {
        for family in 0..2 {
            for m in 1..=MAX_GPU_COMPONENTS as i64 {
                let ptx = compile(&src, arch, &[("EM_M", m), ("EM_FAMILY", family)]);
                let ptx = ptx.unwrap_or_else(|e| panic!("em.cu, {arch}, M = {m}, family {family}: {e}"));
                let text = ptx.to_src();
                for entry in ["em_warp", "em_partial", "em_update"] {
                    assert!(text.contains(&format!(".entry {entry}")), "{entry} missing for {arch} M = {m}");
                }
            }
        }
    }
    // hmm.cu has no specialisations.
    let src = kernel_source("hmm").expect("hmm kernel source");
    for arch in ["sm_80", "sm_90"] {
        let ptx = compile(&src, arch, &[]).unwrap_or_else(|e| panic!("hmm.cu, {arch}: {e}"));
        let text = ptx.to_src();
        for entry in ["hmm_forward", "hmm_viterbi", "hmm_backward", "hmm_xi_gemm", "hmm_reduce", "hmm_forward_tiled", "hmm_viterbi_tiled", "hmm_backward_tiled"] {
            assert!(text.contains(&format!(".entry {entry}")), "{entry} missing for {arch}");
        }
    }
}
