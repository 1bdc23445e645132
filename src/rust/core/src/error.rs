//! One error type for the core. Messages name the argument or dataset and
//! say what to do; the R glue forwards them verbatim, tagged with their
//! [`ErrorKind`] so that R raises a classed condition.

use thiserror::Error;

/// Result alias used throughout the core.
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// A configuration value is out of range.
    #[error("`{arg}` {problem}")]
    InvalidArgument { arg: &'static str, problem: String },

    /// An observation cannot be used (indices are 1-based, as the R user sees them).
    #[error("dataset {dataset} has an invalid value at position {position} ({}): {problem}", show_number(*.value))]
    InvalidData { dataset: usize, position: usize, value: f64, problem: String },

    /// An HMM observation sequence cannot be used (1-based index, as in R).
    #[error("sequence {sequence} {problem}")]
    InvalidSequence { sequence: usize, problem: String },

    /// A job needs more memory than this machine (or job allotment) has:
    /// refused before any large allocation, or a fallible allocation failed.
    #[error("{what} needs {} but {}", crate::memory::format_bytes(*.needed), crate::memory::describe_available(*.available))]
    OutOfMemory { what: String, needed: u128, available: Option<u64> },

    /// The caller asked to stop (user interrupt in R).
    #[error("the computation was interrupted by the user")]
    Interrupted,

    /// The requested backend cannot run here, or the device failed.
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),

    /// A broken invariant of bulkem itself (a bug to report).
    #[error("internal error (please report): {0}")]
    Internal(String),
}

/// What kind of failure an [`Error`] is: the R glue raises each kind as a
/// condition of class `bulkem_error_<kind>` (the interrupt as R's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The user's arguments or data cannot be used.
    Input,
    /// Not enough memory for the job.
    Memory,
    /// The GPU (or the CPU thread pool) cannot run the job.
    Device,
    /// The user interrupted the call.
    Interrupt,
    /// A bug in bulkem.
    Internal,
}

impl ErrorKind {
    /// The suffix of the R condition class: `bulkem_error_<name>`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Input => "input",
            ErrorKind::Memory => "memory",
            ErrorKind::Device => "device",
            ErrorKind::Interrupt => "interrupt",
            ErrorKind::Internal => "internal",
        }
    }
}

/// A number as a message shows it to an R user: plain in the usual range,
/// else in scientific notation (1e300, not 301 digits); Inf, -Inf, NaN.
pub fn show_number(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        (if x > 0.0 { "Inf" } else { "-Inf" }).into()
    } else if x == 0.0 || (1e-4..1e15).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

impl Error {
    pub(crate) fn arg(arg: &'static str, problem: impl Into<String>) -> Self {
        Error::InvalidArgument { arg, problem: problem.into() }
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument { .. } | Error::InvalidData { .. } | Error::InvalidSequence { .. } => ErrorKind::Input,
            Error::OutOfMemory { .. } => ErrorKind::Memory,
            Error::Interrupted => ErrorKind::Interrupt,
            Error::BackendUnavailable(_) => ErrorKind::Device,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_show_numbers_compactly() {
        let e = Error::InvalidData { dataset: 2, position: 5, value: 1e300, problem: "too large".into() };
        assert_eq!(e.to_string(), "dataset 2 has an invalid value at position 5 (1e300): too large");
        assert_eq!(show_number(-3.0), "-3");
        assert_eq!(show_number(2.5e-7), "2.5e-7");
        assert_eq!(show_number(f64::NEG_INFINITY), "-Inf");
    }
}
