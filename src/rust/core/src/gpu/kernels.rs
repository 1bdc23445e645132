//! The CUDA C sources, embedded in the binary. Each kernel file is compiled
//! with the shared helpers of `common.cuh` prepended.

const COMMON: &str = include_str!("../../kernels/common.cuh");

/// Every kernel file: (name, source).
pub const KERNELS: &[(&str, &str)] = &[
    ("em", include_str!("../../kernels/em.cu")),
    ("reduce", include_str!("../../kernels/reduce.cu")),
    ("gibbs", include_str!("../../kernels/gibbs.cu")),
    ("hmm", include_str!("../../kernels/hmm.cu")),
    ("hmm_batched", include_str!("../../kernels/hmm_batched.cu")),
];

/// Full source of kernel file `name`: the core's tolerances as macros, the
/// shared helpers, then the file (one source of truth for the constants).
/// For kernel development, `BULKEM_KERNEL_DIR` names a directory whose
/// `<name>.cu` and `common.cuh`, where present, replace the built-in copies
/// (so variants can be compared in one run without rebuilding).
pub fn kernel_source(name: &str) -> Option<String> {
    kernel_source_with(name, "")
}

/// [`kernel_source`] with `prelude` between the shared helpers and the file.
pub fn kernel_source_with(name: &str, prelude: &str) -> Option<String> {
    use crate::em::simd::{EXP_MIN_ARG, EXP_Q, LN2_HI, LN2_LO, SHIFTER};
    use crate::tolerances::{COLLAPSE_REL, MIN_COMPONENT_WEIGHT, SLICE_MAX_SHRINKS};
    let exp_q = EXP_Q.iter().map(|c| format!("{c:e}")).collect::<Vec<_>>().join(", ");
    let log2_e = std::f64::consts::LOG2_E;
    let constants = format!(
        "#define MIN_COMPONENT_WEIGHT {MIN_COMPONENT_WEIGHT:e}\n#define COLLAPSE_REL {COLLAPSE_REL:e}\n#define SLICE_MAX_SHRINKS {SLICE_MAX_SHRINKS}\n\
         #define EXP_MIN_ARG {EXP_MIN_ARG:e}\n#define EXP_SHIFTER {SHIFTER:e}\n#define EXP_LOG2_E {log2_e:e}\n\
         #define EXP_LN2_HI {LN2_HI:e}\n#define EXP_LN2_LO {LN2_LO:e}\n#define EXP_Q_LIST {exp_q}\n"
    );
    let builtin = KERNELS.iter().find(|(n, _)| *n == name)?.1;
    let dir = std::env::var_os("BULKEM_KERNEL_DIR").map(std::path::PathBuf::from);
    let read = |file: String, fallback: &str| match &dir {
        Some(d) => std::fs::read_to_string(d.join(file)).unwrap_or_else(|_| fallback.to_string()),
        None => fallback.to_string(),
    };
    let (common, src) = (read("common.cuh".into(), COMMON), read(format!("{name}.cu"), builtin));
    Some(format!("{constants}{common}\n{prelude}\n{src}"))
}
