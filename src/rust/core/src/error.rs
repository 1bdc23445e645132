//! One error type for the core. Messages name the argument or dataset and
//! say what to do; the R glue forwards them verbatim.

use thiserror::Error;

/// Result alias used throughout the core.
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// A configuration value is out of range.
    #[error("`{arg}` {problem}")]
    InvalidArgument { arg: &'static str, problem: String },

    /// An observation cannot be used (indices are 1-based, as the R user sees them).
    #[error("dataset {dataset} has an invalid value at position {position} ({value}): {problem}")]
    InvalidData { dataset: usize, position: usize, value: f64, problem: String },

    /// An HMM observation sequence cannot be used (1-based index, as in R).
    #[error("sequence {sequence} {problem}")]
    InvalidSequence { sequence: usize, problem: String },

    /// The caller asked to stop (user interrupt in R).
    #[error("the computation was interrupted by the user")]
    Interrupted,

    /// The requested backend cannot run here.
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),

    /// A broken invariant of bulkem itself (a bug to report).
    #[error("internal error (please report): {0}")]
    Internal(String),
}

impl Error {
    pub(crate) fn arg(arg: &'static str, problem: impl Into<String>) -> Self {
        Error::InvalidArgument { arg, problem: problem.into() }
    }
}
