//! Viterbi paths as a pass hands them over: 0-based states laid out like
//! the symbols, [`NO_STATE`] throughout an impossible sequence. From the
//! GPU they stay in the 1 or 2 bytes a state that crossed the bus when N
//! allows, so that a caller widens them once into its own memory (R's
//! integer vectors) instead of the core first writing 4 bytes a state into
//! fresh pages: 80 MB for 2 x 10^7 states, most of a Viterbi call from
//! host memory at 4 states (BENCHMARKS.md).

use super::NO_STATE;

/// The states of a Viterbi pass (see the module).
#[derive(Debug, Clone, PartialEq)]
pub enum Paths {
    /// `width` (1 or 2) little-endian bytes a state; all ones is
    /// [`NO_STATE`] (`gpu::width_for(N, true)` leaves that value free).
    Narrow { bytes: Vec<u8>, width: usize },
    Full(Vec<u32>),
}

impl Paths {
    /// States held.
    pub fn len(&self) -> usize {
        match self {
            Paths::Narrow { bytes, width } => bytes.len() / width,
            Paths::Full(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// State `i`.
    pub fn get(&self, i: usize) -> u32 {
        match self {
            Paths::Full(v) => v[i],
            Paths::Narrow { bytes, width: 1 } => from_byte(bytes[i]),
            Paths::Narrow { bytes, .. } => from_short(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
        }
    }

    /// Every state, 4 bytes each.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            Paths::Full(v) => v.clone(),
            _ => (0..self.len()).map(|i| self.get(i)).collect(),
        }
    }

    /// [`Paths::to_vec`], without a copy of 4-byte states.
    pub fn into_vec(self) -> Vec<u32> {
        match self {
            Paths::Full(v) => v,
            narrow => narrow.to_vec(),
        }
    }

    /// States `from .. from + out.len()` into `out` as 1-based states,
    /// [`NO_STATE`] as `missing` (R's integer vectors take them so).
    pub fn write_one_based(&self, from: usize, out: &mut [i32], missing: i32) {
        let put = |x: u32| if x == NO_STATE { missing } else { x as i32 + 1 };
        match self {
            Paths::Full(v) => out.iter_mut().zip(&v[from..]).for_each(|(d, &x)| *d = put(x)),
            Paths::Narrow { bytes, width: 1 } => out.iter_mut().zip(&bytes[from..]).for_each(|(d, &x)| *d = put(from_byte(x))),
            Paths::Narrow { bytes, .. } => {
                let src = bytes[2 * from..].chunks_exact(2);
                out.iter_mut().zip(src).for_each(|(d, x)| *d = put(from_short(u16::from_le_bytes([x[0], x[1]]))));
            }
        }
    }
}

fn from_byte(x: u8) -> u32 {
    if x == u8::MAX { NO_STATE } else { x as u32 }
}

fn from_short(x: u16) -> u32 {
    if x == u16::MAX { NO_STATE } else { x as u32 }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The states in each width: `width` bytes each, all ones for NO_STATE.
    pub(crate) fn narrowed(states: &[u32], width: usize) -> Paths {
        let bytes = states.iter().flat_map(|&x| (x as u16).to_le_bytes().into_iter().take(width)).collect();
        Paths::Narrow { bytes, width }
    }

    #[test]
    fn every_width_reads_back_the_states() {
        let states: Vec<u32> = (0..1000u32).map(|k| if k % 7 == 3 { NO_STATE } else { k % 254 }).collect();
        for paths in [Paths::Full(states.clone()), narrowed(&states, 1), narrowed(&states, 2)] {
            assert_eq!(paths.len(), states.len());
            assert_eq!(paths.to_vec(), states);
            let mut out = vec![0; 990];
            paths.write_one_based(10, &mut out, i32::MIN);
            for (r, &v) in out.iter().enumerate() {
                let x = states[10 + r];
                assert_eq!(v, if x == NO_STATE { i32::MIN } else { x as i32 + 1 }, "{paths:?} at {r}");
            }
        }
        // 2 bytes hold states past 255.
        let wide: Vec<u32> = vec![0, 300, 65_534, NO_STATE];
        assert_eq!(narrowed(&wide, 2).to_vec(), wide);
    }
}
