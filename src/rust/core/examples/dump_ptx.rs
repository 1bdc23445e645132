//! Writes the PTX of one kernel file for sm_90 with the given definitions,
//! for reading registers, spills and the instruction mix without a GPU
//! (feed it to `ptxas -v` / `cuobjdump -sass`, from PyPI's nvidia-cuda-nvcc):
//!   cargo run --example dump_ptx -- em em5.ptx EM_M=5 family=gamma
//! (`family=` prepends that mixture family's block, as the EM launcher does;
//! the inverse Gaussian when absent).
//! `BULKEM_KERNEL_DIR` reads the kernel files from a directory (see
//! `gpu::kernel_source`), so edited kernels need no rebuild.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kernel, out, defines @ ..] = &args[..] else {
        eprintln!("usage: dump_ptx KERNEL OUT.ptx [NAME=VALUE ...]");
        std::process::exit(2);
    };
    let family = defines.iter().find_map(|d| d.strip_prefix("family=")).unwrap_or("invgauss");
    let family = bulkem_core::em::Family::parse(family).expect("a family name");
    let defines: Vec<(&str, i64)> = defines
        .iter()
        .filter(|d| !d.starts_with("family="))
        .map(|d| {
            let (k, v) = d.split_once('=').expect("definitions are NAME=VALUE");
            (k, v.parse().expect("definition values are integers"))
        })
        .collect();
    let prelude = if kernel.as_str() == "em" { bulkem_core::em::gpu::em_prelude(family) } else { String::new() };
    let src = bulkem_core::gpu::kernel_source_with(kernel, &prelude).expect("no such kernel file");
    match bulkem_core::gpu::compile(&src, "sm_90", &defines) {
        Ok(ptx) => std::fs::write(out, ptx.to_src()).expect("write the PTX"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
