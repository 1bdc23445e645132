//! The CUDA C sources, embedded in the binary. Each kernel file is compiled
//! with the shared helpers of `common.cuh` and the tables of `tables.cuh`
//! prepended.

const COMMON: &str = include_str!("../../kernels/common.cuh");
/// The table-driven exp and ln(1 + t), after the helpers in every file.
const TABLES: &str = include_str!("../../kernels/tables.cuh");

/// Every kernel file: (name, source).
pub const KERNELS: &[(&str, &str)] = &[
    ("em", include_str!("../../kernels/em.cu")),
    ("reduce", include_str!("../../kernels/reduce.cu")),
    ("gibbs", include_str!("../../kernels/gibbs.cu")),
    ("hmm", include_str!("../../kernels/hmm.cu")),
    ("hmm_batched", include_str!("../../kernels/hmm_batched.cu")),
    ("hmm_emission", include_str!("../../kernels/hmm_emission.cu")),
    ("hmm_scan", include_str!("../../kernels/hmm_scan.cu")),
    ("transfer", include_str!("../../kernels/transfer.cu")),
    ("diagnostics", include_str!("../../kernels/diagnostics.cu")),
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
    use crate::em::simd::{LN2_HI, SHIFTER};
    use crate::tolerances::{COLLAPSE_REL, MIN_COMPONENT_WEIGHT, MIXED_NOISE, SLICE_MAX_SHRINKS};
    let log2_e = std::f64::consts::LOG2_E;
    let constants = format!(
        "#define MIN_COMPONENT_WEIGHT {MIN_COMPONENT_WEIGHT:e}\n#define COLLAPSE_REL {COLLAPSE_REL:e}\n#define MIXED_NOISE {MIXED_NOISE:e}\n#define SLICE_MAX_SHRINKS {SLICE_MAX_SHRINKS}\n\
         #define EXP_SHIFTER {SHIFTER:e}\n#define EXP_LOG2_E {log2_e:e}\n#define EXP_LN2_HI {LN2_HI:e}\n"
    );
    let builtin = KERNELS.iter().find(|(n, _)| *n == name)?.1;
    let dir = std::env::var_os("BULKEM_KERNEL_DIR").map(std::path::PathBuf::from);
    let read = |file: String, fallback: &str| match &dir {
        Some(d) => std::fs::read_to_string(d.join(file)).unwrap_or_else(|_| fallback.to_string()),
        None => fallback.to_string(),
    };
    let (common, tables, src) = (read("common.cuh".into(), COMMON), read("tables.cuh".into(), TABLES), read(format!("{name}.cu"), builtin));
    Some(format!("{constants}{common}\n{tables}\n{prelude}\n{src}"))
}

/// Every kernel entry point, with the file that defines it: launchers name
/// kernels by this, and `kernels_compile` checks each is in its file's PTX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    EmWarp,
    EmGrid,
    TreePairwise,
    TreeDiv2,
    TreeSmallPairwise,
    TreeSmallDiv2,
    PlainNaive,
    PlainKahan,
    ExactSum,
    ExactBins,
    HbBetaTiles,
    HbBetaBlock,
    HbGlobal,
    HbLevelsWarp,
    HbLevelsBlock,
    HbFactorGlobal,
    HbScalarStart,
    HbScalarEval,
    HbScalarDecide,
    HbScalarFinish,
    HbScalarApply,
    HbScalarGroups,
    HbNewtonEval,
    HbNewtonDecide,
    HbDrawsOrder,
    McmcDiagnostics,
    HmmForward,
    HmmForwardWarp,
    HmmForwardMma,
    HmmForwardGroup,
    HmmBackward,
    HmmBackwardWarp,
    HmmViterbi,
    HmmViterbiWarp,
    HmmViterbiGroup,
    HmmForwardThread,
    HmmBackwardThread,
    HmmViterbiThread,
    HmmViterbiBatched,
    HmmVitPad,
    HmmReduce,
    HmmForwardBatched,
    HmmForwardSplit,
    HmmBackwardBatched,
    HmmBackwardSplit,
    HmmCountEmissions,
    HmmXiGemm,
    HmmMStep,
    HmmTableMins,
    HmmEmissionRows,
    HmmEmissionRowsThread,
    HmmEmissionRowsThreadWide,
    HmmSequenceShifts,
    HmmDensityKeys,
    HmmCountStats,
    HmmPositions,
    HmmScanProducts,
    HmmScanBounds,
    HmmScanPosterior,
    HmmScanVitProducts,
    HmmScanVitBounds,
    HmmScanVitPaths,
    WidenU32,
    NarrowU32,
    LayoutF64,
    ColumnsBySequenceF64,
    CompactF64,
}

impl Kernel {
    pub const ALL: [Kernel; 67] = [
        Kernel::EmWarp,
        Kernel::EmGrid,
        Kernel::TreePairwise,
        Kernel::TreeDiv2,
        Kernel::TreeSmallPairwise,
        Kernel::TreeSmallDiv2,
        Kernel::PlainNaive,
        Kernel::PlainKahan,
        Kernel::ExactSum,
        Kernel::ExactBins,
        Kernel::HbBetaTiles,
        Kernel::HbBetaBlock,
        Kernel::HbGlobal,
        Kernel::HbLevelsWarp,
        Kernel::HbLevelsBlock,
        Kernel::HbFactorGlobal,
        Kernel::HbScalarStart,
        Kernel::HbScalarEval,
        Kernel::HbScalarDecide,
        Kernel::HbScalarFinish,
        Kernel::HbScalarApply,
        Kernel::HbScalarGroups,
        Kernel::HbNewtonEval,
        Kernel::HbNewtonDecide,
        Kernel::HbDrawsOrder,
        Kernel::McmcDiagnostics,
        Kernel::HmmForward,
        Kernel::HmmForwardWarp,
        Kernel::HmmForwardMma,
        Kernel::HmmForwardGroup,
        Kernel::HmmBackward,
        Kernel::HmmBackwardWarp,
        Kernel::HmmViterbi,
        Kernel::HmmViterbiWarp,
        Kernel::HmmViterbiGroup,
        Kernel::HmmForwardThread,
        Kernel::HmmBackwardThread,
        Kernel::HmmViterbiThread,
        Kernel::HmmViterbiBatched,
        Kernel::HmmVitPad,
        Kernel::HmmReduce,
        Kernel::HmmForwardBatched,
        Kernel::HmmForwardSplit,
        Kernel::HmmBackwardBatched,
        Kernel::HmmBackwardSplit,
        Kernel::HmmCountEmissions,
        Kernel::HmmXiGemm,
        Kernel::HmmMStep,
        Kernel::HmmTableMins,
        Kernel::HmmEmissionRows,
        Kernel::HmmEmissionRowsThread,
        Kernel::HmmEmissionRowsThreadWide,
        Kernel::HmmSequenceShifts,
        Kernel::HmmDensityKeys,
        Kernel::HmmCountStats,
        Kernel::HmmPositions,
        Kernel::HmmScanProducts,
        Kernel::HmmScanBounds,
        Kernel::HmmScanPosterior,
        Kernel::HmmScanVitProducts,
        Kernel::HmmScanVitBounds,
        Kernel::HmmScanVitPaths,
        Kernel::WidenU32,
        Kernel::NarrowU32,
        Kernel::LayoutF64,
        Kernel::ColumnsBySequenceF64,
        Kernel::CompactF64,
    ];

    /// (kernel file, entry point).
    pub fn location(self) -> (&'static str, &'static str) {
        use Kernel::*;
        match self {
            EmWarp => ("em", "em_warp"),
            EmGrid => ("em", "em_grid"),
            TreePairwise => ("reduce", "tree_pairwise"),
            TreeDiv2 => ("reduce", "tree_div2"),
            TreeSmallPairwise => ("reduce", "tree_small_pairwise"),
            TreeSmallDiv2 => ("reduce", "tree_small_div2"),
            PlainNaive => ("reduce", "plain_naive"),
            PlainKahan => ("reduce", "plain_kahan"),
            ExactSum => ("reduce", "exact_sum"),
            ExactBins => ("reduce", "exact_bins"),
            HbBetaTiles => ("gibbs", "hb_beta_tiles"),
            HbBetaBlock => ("gibbs", "hb_beta_block"),
            HbGlobal => ("gibbs", "hb_global"),
            HbLevelsWarp => ("gibbs", "hb_levels_warp"),
            HbLevelsBlock => ("gibbs", "hb_levels_block"),
            HbFactorGlobal => ("gibbs", "hb_factor_global"),
            HbScalarStart => ("gibbs", "hb_scalar_start"),
            HbScalarEval => ("gibbs", "hb_scalar_eval"),
            HbScalarDecide => ("gibbs", "hb_scalar_decide"),
            HbScalarFinish => ("gibbs", "hb_scalar_finish"),
            HbScalarApply => ("gibbs", "hb_scalar_apply"),
            HbScalarGroups => ("gibbs", "hb_scalar_groups"),
            HbNewtonEval => ("gibbs", "hb_newton_eval"),
            HbNewtonDecide => ("gibbs", "hb_newton_decide"),
            HbDrawsOrder => ("gibbs", "hb_draws_order"),
            McmcDiagnostics => ("diagnostics", "mcmc_diagnostics"),
            HmmForward => ("hmm", "hmm_forward"),
            HmmForwardWarp => ("hmm", "hmm_forward_warp"),
            HmmForwardMma => ("hmm", "hmm_forward_mma"),
            HmmForwardGroup => ("hmm", "hmm_forward_group"),
            HmmBackward => ("hmm", "hmm_backward"),
            HmmBackwardWarp => ("hmm", "hmm_backward_warp"),
            HmmViterbi => ("hmm", "hmm_viterbi"),
            HmmViterbiWarp => ("hmm", "hmm_viterbi_warp"),
            HmmViterbiGroup => ("hmm", "hmm_viterbi_group"),
            HmmForwardThread => ("hmm", "hmm_forward_thread"),
            HmmBackwardThread => ("hmm", "hmm_backward_thread"),
            HmmViterbiThread => ("hmm", "hmm_viterbi_thread"),
            HmmViterbiBatched => ("hmm_batched", "hmm_viterbi_batched"),
            HmmVitPad => ("hmm_batched", "hmm_vit_pad"),
            HmmReduce => ("hmm", "hmm_reduce"),
            HmmForwardBatched => ("hmm_batched", "hmm_forward_batched"),
            HmmForwardSplit => ("hmm_batched", "hmm_forward_split"),
            HmmBackwardBatched => ("hmm_batched", "hmm_backward_batched"),
            HmmBackwardSplit => ("hmm_batched", "hmm_backward_split"),
            HmmCountEmissions => ("hmm_batched", "hmm_count_emissions"),
            HmmXiGemm => ("hmm_batched", "hmm_xi_gemm"),
            HmmMStep => ("hmm_batched", "hmm_m_step"),
            HmmTableMins => ("hmm_batched", "hmm_table_mins"),
            HmmEmissionRows => ("hmm_emission", "hmm_emission_rows"),
            HmmEmissionRowsThread => ("hmm_emission", "hmm_emission_rows_thread"),
            HmmEmissionRowsThreadWide => ("hmm_emission", "hmm_emission_rows_thread_wide"),
            HmmSequenceShifts => ("hmm_emission", "hmm_sequence_shifts"),
            HmmDensityKeys => ("hmm_emission", "hmm_density_keys"),
            HmmCountStats => ("hmm_emission", "hmm_count_stats"),
            HmmPositions => ("hmm_emission", "hmm_positions"),
            HmmScanProducts => ("hmm_scan", "hmm_scan_products"),
            HmmScanBounds => ("hmm_scan", "hmm_scan_bounds"),
            HmmScanPosterior => ("hmm_scan", "hmm_scan_posterior"),
            HmmScanVitProducts => ("hmm_scan", "hmm_scan_vit_products"),
            HmmScanVitBounds => ("hmm_scan", "hmm_scan_vit_bounds"),
            HmmScanVitPaths => ("hmm_scan", "hmm_scan_vit_paths"),
            WidenU32 => ("transfer", "widen_u32"),
            NarrowU32 => ("transfer", "narrow_u32"),
            LayoutF64 => ("transfer", "layout_f64"),
            ColumnsBySequenceF64 => ("transfer", "columns_by_sequence_f64"),
            CompactF64 => ("transfer", "compact_f64"),
        }
    }
}
