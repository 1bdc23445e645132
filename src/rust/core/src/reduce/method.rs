//! The summation methods and working precisions a reduction can use.

/// How the values are added up. Every method except `Naive` gives the same
/// bits for any thread count; `Exact` also for any chunking or backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// One accumulator, left to right, on one thread. Error grows like
    /// n u sum|x|; kept to show absorption.
    Naive,
    /// Kahan-Babuska compensated summation in Neumaier's form, over fixed
    /// chunks whose partial (sum, compensation) pairs are combined in order.
    Kahan,
    /// The canonical pairwise tree (see [`super::tree`]); error grows like
    /// log2(n) u sum|x|.
    Pairwise,
    /// The same tree with every addition followed by a division by two
    /// (Pechprasarn & Khiripet): computes the mean directly.
    Div2,
    /// The correctly rounded sum or mean, from an exact accumulator.
    Exact,
}

impl Method {
    pub const ALL: [Method; 5] = [Method::Naive, Method::Kahan, Method::Pairwise, Method::Div2, Method::Exact];

    /// The name the R interface uses.
    pub fn name(self) -> &'static str {
        match self {
            Method::Naive => "naive",
            Method::Kahan => "kahan",
            Method::Pairwise => "pairwise",
            Method::Div2 => "div2",
            Method::Exact => "exact",
        }
    }

    pub fn parse(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The floating-point format the arithmetic runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// IEEE binary64 throughout (the default).
    Double,
    /// Every input rounded to the nearest binary32 (values beyond its range
    /// become +-Inf), all arithmetic in binary32: reproduces the absorption
    /// that single-precision GPU reductions suffer. Results are returned as
    /// f64, widened exactly.
    Single,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::Double, Precision::Single];

    /// The name the R interface uses.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Double => "double",
            Precision::Single => "single",
        }
    }

    pub fn parse(name: &str) -> Option<Precision> {
        Precision::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Unit roundoff u = 2^-p of the working format.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Precision::Double => f64::EPSILON / 2.0,
            Precision::Single => f32::EPSILON as f64 / 2.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Method::ALL {
            assert_eq!(Method::parse(m.name()), Some(m));
        }
        for p in Precision::ALL {
            assert_eq!(Precision::parse(p.name()), Some(p));
        }
        assert_eq!(Method::parse("mean"), None);
        assert_eq!(Precision::parse("float"), None);
    }
}
