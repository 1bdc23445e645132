//! Writes the PTX of the EM kernels (for reading registers, local memory
//! and instruction mix without a GPU): cargo run --example dump_ptx -- OUT_DIR
fn main() {
    let out = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let src = bulkem_core::gpu::kernel_source("em").expect("em source");
    for (m, fam) in [(2, 0), (3, 0), (2, 1)] {
        match bulkem_core::gpu::compile(&src, "sm_90", &[("EM_M", m), ("EM_FAMILY", fam)]) {
            Ok(ptx) => std::fs::write(format!("{out}/em_m{m}_f{fam}.ptx"), ptx.to_src()).expect("write"),
            Err(e) => eprintln!("{e}"),
        }
    }
}
