//! Every numerical tolerance and bound of the core, in one place.

/// A random start is redrawn at most this many times per component when the
/// drawn observations give invalid parameters (e.g. all equal).
pub const MAX_START_REDRAWS: usize = 100;

/// A component whose total responsibility falls below this is declared empty.
pub const MIN_COMPONENT_WEIGHT: f64 = 1e-300;

/// Number of (dataset, start) random streams available per dataset.
pub const MAX_RANDOM_INITS: usize = 1 << 24;
