//! A reduction fed in pieces (e.g. Monte Carlo values computed chunk by
//! chunk) that gives the same bits as the whole vector at once.
//!
//! Each method's definition already splits the input on boundaries that
//! pieces of a fixed power-of-two length (at least [`MIN_PIECE`]) respect:
//! the trees' aligned subtrees, Kahan's fixed chunks, the exact
//! accumulator's any split, the naive sum's running total. So every piece
//! but the last must have the stream's piece length; the last may be
//! shorter.

use crate::error::{Error, Result};

use super::kahan::{self, Neumaier};
use super::method::{Method, Precision};
use super::real::Real;
use super::superacc::Superacc;
use super::tree::{self, Combine, Halve, Plus};
use super::{exact, naive, Kind};

/// Smallest piece length (Kahan's chunk).
pub const MIN_PIECE: usize = kahan::CHUNK;

/// A reduction in progress.
pub struct Stream {
    method: Method,
    precision: Precision,
    piece: usize,
    n: usize,
    /// A piece shorter than `piece` was pushed: no more may follow.
    closed: bool,
    state: State,
}

enum State {
    Naive64(f64),
    Naive32(f32),
    Kahan64(Neumaier<f64>),
    Kahan32(Neumaier<f32>),
    Tree64(Levels<f64>),
    Tree32(Levels<f32>),
    Exact(Box<Superacc>),
}

/// Finished subtrees waiting for their right sibling, one per level (the
/// binary counter of [`tree`]'s sequential walk, over pieces).
struct Levels<T> {
    stack: Vec<T>,
    count: usize,
    /// The value of a lone short first piece (its tree has its own size).
    lone: Option<T>,
}

impl<T: Real> Levels<T> {
    fn new() -> Self {
        Levels { stack: Vec::new(), count: 0, lone: None }
    }

    fn push<C: Combine<T>>(&mut self, mut v: T) {
        let mut level = 0;
        while (self.count >> level) & 1 == 1 {
            v = C::combine(self.stack[level], v);
            level += 1;
        }
        if level == self.stack.len() {
            self.stack.push(v);
        } else {
            self.stack[level] = v;
        }
        self.count += 1;
    }

    /// The tree value over the pieces padded with zero pieces to a power of two.
    fn value<C: Combine<T>>(&mut self) -> T {
        if let Some(v) = self.lone {
            return v;
        }
        while !self.count.is_power_of_two() {
            self.push::<C>(T::ZERO);
        }
        self.stack[self.count.trailing_zeros() as usize]
    }
}

impl Stream {
    /// A stream whose pieces have `piece` values (a power of two, at least
    /// [`MIN_PIECE`]).
    pub fn new(method: Method, precision: Precision, piece: usize) -> Result<Self> {
        if !piece.is_power_of_two() || piece < MIN_PIECE {
            return Err(Error::arg("chunk.size", format!("must be a power of two of at least {MIN_PIECE}; it is {piece}")));
        }
        let single = precision == Precision::Single;
        let state = match method {
            Method::Naive if single => State::Naive32(0.0),
            Method::Naive => State::Naive64(0.0),
            Method::Kahan if single => State::Kahan32(Neumaier::new()),
            Method::Kahan => State::Kahan64(Neumaier::new()),
            Method::Pairwise | Method::Div2 if single => State::Tree32(Levels::new()),
            Method::Pairwise | Method::Div2 => State::Tree64(Levels::new()),
            Method::Exact => State::Exact(Superacc::new()),
        };
        Ok(Stream { method, precision, piece, n: 0, closed: false, state })
    }

    /// Values so far.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Add the next piece (the stream's piece length, or shorter if last).
    pub fn push(&mut self, x: &[f64]) -> Result<()> {
        if x.is_empty() {
            return Ok(());
        }
        if self.closed || x.len() > self.piece {
            return Err(Error::arg(
                "x",
                format!("pieces must have {} values, except the last, which may have fewer", self.piece),
            ));
        }
        let first = self.n == 0;
        let short = x.len() < self.piece;
        let halve = self.method == Method::Div2;
        match &mut self.state {
            State::Naive64(s) => *s = naive::add(*s, x),
            State::Naive32(s) => *s = naive::add(*s, x),
            State::Kahan64(acc) => kahan::add_chunks(acc, x),
            State::Kahan32(acc) => kahan::add_chunks(acc, x),
            State::Tree64(levels) => push_tree(levels, x, self.piece, first && short, halve),
            State::Tree32(levels) => push_tree(levels, x, self.piece, first && short, halve),
            State::Exact(acc) => {
                if self.precision == Precision::Single {
                    exact::accumulate(acc, x, |v| v as f32 as f64);
                } else {
                    exact::accumulate(acc, x, |v| v);
                }
            }
        }
        self.n += x.len();
        self.closed = short;
        Ok(())
    }

    /// The sum or mean of everything pushed (a mean of nothing is an error),
    /// as f64 (single precision results widened exactly).
    pub fn value(&mut self, kind: Kind) -> Result<f64> {
        let n = self.n;
        if n == 0 && kind == Kind::Mean {
            return Err(Error::arg("x", "is empty: the mean of no values is undefined"));
        }
        let halve = self.method == Method::Div2;
        Ok(match &mut self.state {
            State::Naive64(s) => plain(*s, n, kind),
            State::Naive32(s) => plain(*s, n, kind).to_f64(),
            State::Kahan64(acc) => plain(acc.value(), n, kind),
            State::Kahan32(acc) => plain(acc.value(), n, kind).to_f64(),
            State::Tree64(levels) => tree_value(levels, n, kind, halve),
            State::Tree32(levels) => tree_value(levels, n, kind, halve).to_f64(),
            State::Exact(acc) => {
                let divisor = (kind == Kind::Mean).then_some(n);
                match self.precision {
                    Precision::Double => exact::finish::<f64>(acc, divisor),
                    Precision::Single => exact::finish::<f32>(acc, divisor).to_f64(),
                }
            }
        })
    }
}

/// fl(s / n) for the plain methods' means (as on the CPU).
fn plain<T: Real>(s: T, n: usize, kind: Kind) -> T {
    match kind {
        Kind::Sum => s,
        Kind::Mean => s / T::from_count(n),
    }
}

fn push_tree<T: Real>(levels: &mut Levels<T>, x: &[f64], piece: usize, lone: bool, halve: bool) {
    match (lone, halve) {
        // A short first piece may be the whole input: its tree is its own.
        (true, false) => levels.lone = Some(tree::pairwise::<T>(x)),
        (true, true) => levels.lone = Some(tree::div2::<T>(x).0),
        (false, false) => levels.push::<Plus>(tree::piece::<T, Plus>(x, piece)),
        (false, true) => levels.push::<Halve>(tree::piece::<T, Halve>(x, piece)),
    }
}

/// The trees' results exactly as [`super::cpu`] computes them.
fn tree_value<T: Real>(levels: &mut Levels<T>, n: usize, kind: Kind, halve: bool) -> T {
    if n == 0 {
        return T::ZERO;
    }
    let p = n.next_power_of_two();
    if !halve {
        return plain(levels.value::<Plus>(), n, kind);
    }
    let avg = levels.value::<Halve>();
    match kind {
        Kind::Sum => avg * T::from_count(p),
        Kind::Mean => avg * tree::correction::<T>(p, n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Exec;

    fn mixed(n: usize) -> Vec<f64> {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.3) * 2f64.powi((s % 60) as i32 - 30)
            })
            .collect()
    }

    #[test]
    fn pieces_give_the_bits_of_the_whole_vector() {
        let x = mixed(5 * MIN_PIECE + 1234);
        let cpu = Exec { threads: 2, ..Exec::cpu() };
        for n in [1, 7, MIN_PIECE - 1, MIN_PIECE, MIN_PIECE + 1, 2 * MIN_PIECE, 3 * MIN_PIECE + 5, x.len()] {
            let x = &x[..n];
            for method in Method::ALL {
                for precision in Precision::ALL {
                    for kind in [Kind::Sum, Kind::Mean] {
                        let whole = match kind {
                            Kind::Sum => super::super::sum(x, method, precision, &cpu).unwrap(),
                            Kind::Mean => super::super::mean(x, method, precision, &cpu).unwrap(),
                        };
                        let mut stream = Stream::new(method, precision, MIN_PIECE).unwrap();
                        for piece in x.chunks(MIN_PIECE) {
                            stream.push(piece).unwrap();
                        }
                        let got = stream.value(kind).unwrap();
                        assert_eq!(got.to_bits(), whole.to_bits(), "{method:?} {precision:?} {kind:?} n = {n}: {got:e} vs {whole:e}");
                    }
                }
            }
        }
    }

    #[test]
    fn pieces_must_be_full_until_the_last() {
        assert!(Stream::new(Method::Exact, Precision::Double, 1000).is_err());
        let mut s = Stream::new(Method::Div2, Precision::Double, MIN_PIECE).unwrap();
        s.push(&[1.0; 10]).unwrap();
        assert!(s.push(&[1.0; 10]).is_err());
        assert!(Stream::new(Method::Exact, Precision::Double, MIN_PIECE).unwrap().value(Kind::Mean).is_err());
    }
}
