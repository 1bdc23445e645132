//! Per-coordinate slice widths, adapted during warmup.
//!
//! A slice update is valid for any fixed width; a width near the scale of
//! the conditional posterior needs the fewest evaluations. During warmup
//! each coordinate's width moves, every `SLICE_ADAPT_WINDOW` sweeps, halfway
//! (geometrically) towards `SLICE_ADAPT_FACTOR` x its mean absolute move in
//! that window (for draws of sd s, E|x1 - x0| ~ 1.13 s). After warmup the
//! widths are frozen, so the kept draws come from a fixed, valid kernel.

use crate::tolerances::{SLICE_ADAPT_FACTOR, SLICE_ADAPT_WINDOW};

#[derive(Debug, Clone)]
pub struct Widths {
    pub w: Vec<f64>,
    moved: Vec<f64>,
    sweeps: usize,
}

impl Widths {
    pub fn new(n: usize, w0: f64) -> Self {
        Widths { w: vec![w0; n], moved: vec![0.0; n], sweeps: 0 }
    }

    /// Mutable widths and move accumulators of every coordinate.
    pub fn parts_mut(&mut self) -> (&mut [f64], &mut [f64]) {
        (&mut self.w, &mut self.moved)
    }

    /// Close one warmup sweep; at a window's end, update every width.
    pub fn end_sweep(&mut self) {
        self.sweeps += 1;
        if self.sweeps < SLICE_ADAPT_WINDOW {
            return;
        }
        let scale = 1.0 / self.sweeps as f64;
        for (w, m) in self.w.iter_mut().zip(self.moved.iter_mut()) {
            let target = SLICE_ADAPT_FACTOR * *m * scale;
            if target.is_finite() && target > 0.0 {
                *w = (*w * target).sqrt();
            }
            *m = 0.0;
        }
        self.sweeps = 0;
    }
}
