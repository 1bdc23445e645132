//! The CUDA C sources, embedded in the binary. Each kernel file is compiled
//! with the shared helpers of `common.cuh` prepended.

const COMMON: &str = include_str!("../../kernels/common.cuh");

/// Every kernel file: (name, source).
pub const KERNELS: &[(&str, &str)] = &[("em", include_str!("../../kernels/em.cu"))];

/// Full source of kernel file `name`, helpers included.
pub fn kernel_source(name: &str) -> Option<String> {
    KERNELS.iter().find(|(n, _)| *n == name).map(|(_, src)| format!("{COMMON}\n{src}"))
}
