//! A device's pinned staging buffer, used as a ring: each piece of an
//! upload goes after the last one still crossing the bus, so an upload
//! waits only when the ring is full, never for the copy of an unrelated
//! earlier upload. (With two fixed halves, a model's emissions waited for
//! its transitions' copy before they could be written, and every small
//! upload after them for one of the two: about 0.1 ms of a 1 ms HMM call
//! at 512 states.)

use std::collections::VecDeque;

use cudarc::driver::{CudaEvent, PinnedHostSlice};

use super::Device;
use crate::error::Result;

/// Bytes of the largest piece an upload or download copies at once. Each
/// piece costs a fill by every host thread (a fork and a join) and a
/// copy's launch: with 4 MB pieces and a ring of two, 160 MB crossed at
/// 19-23 GB/s on an H200's PCIe 5 link, whose pinned copies run at 55
/// GB/s; with 16 MB pieces and a ring of three, at 44-50 GB/s
/// (BENCHMARKS.md, "The staging ring sized by measurement").
pub(super) const CHUNK: usize = 16 << 20;
/// Bytes of an upload's first piece: its fill is not overlapped by a copy,
/// so an upload's pieces start at this size and double up to [`CHUNK`].
/// Every piece starts at a multiple of it.
pub(super) const FIRST_CHUNK: usize = 2 << 20;
/// Bytes of the ring: three chunks, so that one is filled while the other
/// two cross the bus.
pub(super) const RING: usize = 3 * CHUNK;
/// Pieces in flight that follow each other and together span at most this
/// many bytes share one entry (the later copy's event: the stream runs
/// copies in order), so that many small uploads leave few events to wait for.
const MERGE: usize = 256 << 10;
/// Every piece starts at a multiple of this many bytes (after a piece of
/// odd length, a float32 piece would otherwise start unaligned).
const ALIGN: usize = 64;

/// Where the next pieces of a ring of `cap` bytes go. `flight` holds the
/// pieces whose copies may still run, oldest first, each with a tag (the
/// event recorded after its copy); they occupy the ring from the oldest's
/// start up to `head`, wrapping around.
pub(super) struct Ring<T> {
    cap: usize,
    head: usize,
    flight: VecDeque<(usize, usize, T)>,
}

impl<T> Ring<T> {
    pub(super) fn new(cap: usize) -> Self {
        Ring { cap, head: 0, flight: VecDeque::new() }
    }

    /// The start (a multiple of [`ALIGN`]) of `len` (at most the ring's
    /// size) free bytes, or None while the oldest piece in flight must be
    /// retired first.
    pub(super) fn place(&self, len: usize) -> Option<usize> {
        let len = len.next_multiple_of(ALIGN);
        debug_assert!(len <= self.cap, "a piece larger than the ring");
        let Some(&(tail, _, _)) = self.flight.front() else { return Some(0) };
        if self.head > tail {
            // In flight: [tail, head); free: [head, cap) and [0, tail).
            if len <= self.cap - self.head {
                Some(self.head)
            } else if len <= tail {
                Some(0)
            } else {
                None
            }
        } else if self.head < tail && len <= tail - self.head {
            // In flight: [tail, cap) and [0, head); free: [head, tail).
            Some(self.head)
        } else {
            None
        }
    }

    /// Mark `len` bytes at `at` (from [`Ring::place`]) in flight until
    /// `tag` is retired. A piece that directly follows a small newest piece
    /// joins it and takes its tag; the tag it replaces is returned.
    pub(super) fn push(&mut self, at: usize, len: usize, tag: T) -> Option<T> {
        let len = len.next_multiple_of(ALIGN);
        self.head = at + len;
        if let Some(back) = self.flight.back_mut() {
            if back.1 == at && at + len - back.0 <= MERGE {
                back.1 = at + len;
                return Some(std::mem::replace(&mut back.2, tag));
            }
        }
        self.flight.push_back((at, at + len, tag));
        None
    }

    /// The oldest piece's tag, its bytes free again.
    pub(super) fn retire(&mut self) -> Option<T> {
        let (_, _, tag) = self.flight.pop_front()?;
        if self.flight.is_empty() {
            self.head = 0;
        }
        Some(tag)
    }
}

/// A device's pinned staging buffer, its pieces in flight (each with the
/// event recorded after its copy) and spare events.
pub(super) struct Staging {
    pub(super) buf: PinnedHostSlice<u8>,
    ring: Ring<CudaEvent>,
    spare: Vec<CudaEvent>,
}

impl Staging {
    pub(super) fn new(dev: &Device) -> Result<Self> {
        // SAFETY: the buffer is written (by the host or a copy) before it is read.
        let buf = unsafe { dev.ctx.alloc_pinned_with_flags::<u8>(RING, 0) }.map_err(|e| dev.err("allocating pinned host memory", e))?;
        Ok(Staging { buf, ring: Ring::new(RING), spare: Vec::new() })
    }

    /// The start of `len` free bytes, waiting for the oldest copies in
    /// flight as needed.
    pub(super) fn place(&mut self, dev: &Device, len: usize) -> Result<usize> {
        loop {
            if let Some(at) = self.ring.place(len) {
                return Ok(at);
            }
            if let Some(done) = self.ring.retire() {
                done.synchronize().map_err(|e| dev.err("copying to the device", e))?;
                self.spare.push(done);
            }
        }
    }

    /// Mark `len` bytes at `at` in flight until the work now queued on the
    /// device's stream has run (their copy is queued last).
    pub(super) fn push(&mut self, dev: &Device, at: usize, len: usize) -> Result<()> {
        let done = self.event(dev)?;
        done.record(&dev.stream).map_err(|e| dev.err("copying to the device", e))?;
        if let Some(old) = self.ring.push(at, len, done) {
            self.spare.push(old);
        }
        Ok(())
    }

    /// An event to record (a spare one if any: making one is a driver call).
    pub(super) fn event(&mut self, dev: &Device) -> Result<CudaEvent> {
        match self.spare.pop() {
            Some(ev) => Ok(ev),
            None => dev.ctx.new_event(None).map_err(|e| dev.err("copying to the device", e)),
        }
    }

    /// Keep `ev` (passed) for reuse.
    pub(super) fn give(&mut self, ev: CudaEvent) {
        self.spare.push(ev);
    }

    /// Wait for every copy in flight (before the buffer is freed).
    pub(super) fn drain(&mut self, dev: &Device) -> Result<()> {
        while let Some(done) = self.ring.retire() {
            done.synchronize().map_err(|e| dev.err("copying to the device", e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Ring, ALIGN, MERGE};

    /// The ring as the staging buffer drives it: place (retiring the oldest
    /// until a place is found), then push. Returns the place, the tags
    /// retired on the way and the tag the piece's entry replaced.
    fn take(r: &mut Ring<usize>, len: usize, tag: usize) -> (usize, Vec<usize>, Option<usize>) {
        let mut retired = Vec::new();
        let at = loop {
            if let Some(at) = r.place(len) {
                break at;
            }
            retired.push(r.retire().expect("a full ring has pieces in flight"));
        };
        let replaced = r.push(at, len, tag);
        (at, retired, replaced)
    }

    #[test]
    fn pieces_in_flight_never_overlap_a_new_one() {
        // Random lengths (small and large, up to the whole ring), checked
        // against the pieces in flight kept aside as (start, end, tag).
        let cap = 16 * MERGE;
        let mut r = Ring::new(cap);
        let mut live: Vec<(usize, usize, usize)> = Vec::new();
        let mut state = 3u64;
        for tag in 0..50_000usize {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = match state >> 62 {
                0 => 1 + (state >> 20) as usize % 64,
                1 => 1 + (state >> 20) as usize % (2 * MERGE),
                2 => cap / 2,
                _ => 1 + (state >> 20) as usize % cap,
            };
            let (at, retired, replaced) = take(&mut r, len, tag);
            live.retain(|p| !retired.contains(&p.2));
            assert!(at + len <= cap, "piece {tag} past the end");
            assert_eq!(at % ALIGN, 0, "piece {tag} unaligned");
            assert!(live.iter().all(|p| p.1 <= at || at + len <= p.0), "piece {tag} ({len} bytes at {at}) over a piece in flight");
            // A piece that joined the newest entry is retired with it.
            if let Some(old) = replaced {
                live.iter_mut().filter(|p| p.2 == old).for_each(|p| p.2 = tag);
            }
            live.push((at, at + len, tag));
        }
    }

    #[test]
    fn two_halves_alternate_and_small_pieces_wait_for_nothing() {
        let half = 16 * MERGE;
        let mut r = Ring::new(2 * half);
        // Two large pieces and small ones after them: nothing is retired.
        assert_eq!(take(&mut r, half / 2, 0), (0, vec![], None));
        assert_eq!(take(&mut r, 8, 1), (half / 2, vec![], None));
        // (Each piece starts aligned: the 8 bytes take ALIGN.)
        assert_eq!(take(&mut r, half / 2, 2), (half / 2 + ALIGN, vec![], None));
        for k in 3..10 {
            assert!(take(&mut r, 100, k).1.is_empty());
        }
        // Consecutive small pieces share one entry.
        assert_eq!(r.flight.len(), 4);
        // A chunk that does not fit before the end waits for the pieces it
        // would overlap, oldest first, and no others.
        assert_eq!(take(&mut r, half, 10), (0, vec![0, 1, 2], None));
        assert_eq!(r.flight.len(), 2);
        // Once every piece is retired, the next starts at 0 again.
        while r.retire().is_some() {}
        assert_eq!(r.place(2 * half), Some(0));
    }
}
