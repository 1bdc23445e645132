//! bulkem-core: all numerics of the bulkem R package, with no dependency on R.
//!
//! Each area is one module with the same shape: validated parameters, the
//! algorithm, and its backends. The CPU backend (rayon) is the reference.
//!
//! ```
//! use bulkem_core::em::{fit_many, EmConfig, Family};
//! use bulkem_core::exec::Exec;
//!
//! let x: Vec<f64> = (1..=200).map(|i| 1.0 + (i % 17) as f64 * 0.1 + (i % 3) as f64).collect();
//! let config = EmConfig::new(Family::Normal, 2).random_inits(5).seed(42).check().unwrap();
//! let fits = fit_many(&[&x[..]], &config, &Exec::cpu()).unwrap();
//! assert!(fits[0].loglik.is_finite());
//! ```

pub mod error;
pub mod exec;
pub mod rng;
pub mod em;
pub mod reduce;
pub mod gibbs;
pub mod hmm;
pub mod gpu;
pub mod tolerances;
pub mod memory;

pub use error::{Error, ErrorKind, Result};
