//! extendr glue of the bulkem R package: converts R values to core types and
//! back, and keeps R responsive (interrupts, progress) while the core runs.
//! No numerics here; argument checks that need R live in the R functions.

use extendr_api::prelude::*;

mod bootstrap;
mod em;
mod gibbs;
mod hmm;
mod backend;
mod reduce;
mod session;

extendr_module! {
    mod bulkem;
    use em;
    use bootstrap;
    use hmm;
    use backend;
    use reduce;
    use gibbs;
}
