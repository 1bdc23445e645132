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
pub fn kernel_source(name: &str) -> Option<String> {
    use crate::tolerances::{COLLAPSE_REL, MIN_COMPONENT_WEIGHT, SLICE_MAX_SHRINKS};
    let constants = format!(
        "#define MIN_COMPONENT_WEIGHT {MIN_COMPONENT_WEIGHT:e}\n#define COLLAPSE_REL {COLLAPSE_REL:e}\n#define SLICE_MAX_SHRINKS {SLICE_MAX_SHRINKS}\n"
    );
    KERNELS.iter().find(|(n, _)| *n == name).map(|(_, src)| format!("{constants}{COMMON}\n{src}"))
}
