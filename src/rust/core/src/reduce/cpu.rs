//! The CPU backend: vectors are reduced in parallel on the call's thread
//! pool, and a long vector is itself split across the pool by its method
//! (except `Naive`, which is one sequential accumulator by definition).

use rayon::prelude::*;

use crate::error::Result;
use crate::exec::Exec;

use super::method::{Method, Precision};
use super::real::Real;
use super::superacc::Superacc;
use super::{exact, kahan, logexp, naive, tree, Kind};

/// One reduction per vector, in order. Empty vectors must have been
/// rejected for means.
pub fn reduce_many(data: &[&[f64]], method: Method, precision: Precision, kind: Kind, exec: &Exec) -> Result<Vec<f64>> {
    let monitor = &exec.monitor;
    let out = exec.install(|| {
        data.par_iter()
            // One exact accumulator per worker task, made on first use.
            .map_init(
                || None,
                |acc, x| {
                    if monitor.is_cancelled() {
                        return f64::NAN;
                    }
                    let v = reduce_one(x, method, precision, kind, acc);
                    monitor.add_done(1);
                    v
                },
            )
            .collect()
    })?;
    monitor.check()?;
    Ok(out)
}

/// The reduction of one vector (the vector may be split across the pool).
pub fn reduce_single(x: &[f64], method: Method, precision: Precision, kind: Kind, exec: &Exec) -> Result<f64> {
    let v = exec.install(|| reduce_one(x, method, precision, kind, &mut None))?;
    exec.monitor.add_done(1);
    Ok(v)
}

/// log_mean_exp of every vector (all non-empty), in order.
pub fn log_mean_exp_many(data: &[&[f64]], exec: &Exec) -> Result<Vec<f64>> {
    let monitor = &exec.monitor;
    let out = exec.install(|| {
        data.par_iter()
            .map_init(Superacc::new, |acc, x| {
                if monitor.is_cancelled() {
                    return f64::NAN;
                }
                let v = logexp::log_mean_exp(x, acc);
                monitor.add_done(1);
                v
            })
            .collect()
    })?;
    monitor.check()?;
    Ok(out)
}

fn reduce_one(x: &[f64], method: Method, precision: Precision, kind: Kind, acc: &mut Option<Box<Superacc>>) -> f64 {
    match precision {
        Precision::Double => reduce_in::<f64>(x, method, kind, acc),
        Precision::Single => reduce_in::<f32>(x, method, kind, acc).to_f64(),
    }
}

/// The reduction in working precision `T`. Means of the plain methods are
/// fl(sum / n) with n rounded to `T`; div2's sum is its tree value times
/// P (a power of two: exact unless it overflows), its mean the tree value
/// times the correction C.
fn reduce_in<T: Real>(x: &[f64], method: Method, kind: Kind, acc: &mut Option<Box<Superacc>>) -> T {
    let n = x.len();
    let plain = |s: T| match kind {
        Kind::Sum => s,
        Kind::Mean => s / T::from_count(n),
    };
    match method {
        Method::Naive => plain(naive::sum::<T>(x)),
        Method::Kahan => plain(kahan::sum::<T>(x)),
        Method::Pairwise => plain(tree::pairwise::<T>(x)),
        Method::Div2 => {
            let (avg, p) = tree::div2::<T>(x);
            match kind {
                Kind::Sum => avg * T::from_count(p),
                Kind::Mean => avg * tree::correction::<T>(p, n),
            }
        }
        Method::Exact => {
            let acc = acc.get_or_insert_with(Superacc::new);
            let divisor = match kind {
                Kind::Sum => None,
                Kind::Mean => Some(n),
            };
            exact::reduce::<T>(x, divisor, acc)
        }
    }
}
