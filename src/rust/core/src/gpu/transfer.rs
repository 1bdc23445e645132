//! Copies between host memory and a device at the bus's speed: through a
//! pinned staging buffer per device (`staging`; a copy from pageable
//! memory goes through the driver's own bounce buffer at a fraction of the
//! bus's rate, and fresh host memory costs a page fault per 4 KiB on first
//! touch), in chunks that the host fills or reads in parallel while the
//! previous chunk crosses the bus, and with small integers (symbols below
//! V, states below N) sent as 1 or 2 bytes each and widened or narrowed on
//! the device (kernels/transfer.cu).

use cudarc::driver::{result, CudaEvent, CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use std::mem::MaybeUninit;
use std::ops::Range;

use rayon::prelude::*;

use super::staging::{Staging, CHUNK, FIRST_CHUNK, RING};
use super::{Device, Kernel};
use crate::error::Result;

/// Values a host thread encodes or decodes at a time.
const GRAIN: usize = 1 << 16;
/// Bytes a host thread copies at a time: a staging chunk is 32 of them, so
/// every core of a 16-core host takes part in its fill.
const COPY_GRAIN: usize = 128 << 10;
/// Pieces a download is cut in at least, and the multiple of bytes each
/// piece is (every value type's size divides it).
const DOWN_PIECES: usize = 4;
const DOWN_GRAIN: usize = 64 << 10;
/// Bytes of the largest copy of an upload whose pieces are followed by
/// work on another stream ([`Device::upload_tested_then`]): the work that
/// follows the last copy runs after the whole upload, so it is kept short
/// (the rows of 4 MB of observations at 32 states, 0.08 ms on an H200,
/// where the last 16 MB chunk of 80 MB held 14 MB). Copies queued back to
/// back in 4 MB pieces crossed at 53 GB/s, as one copy (55; BENCHMARKS.md,
/// "The staging ring sized by measurement").
const QUEUED_COPY: usize = 4 << 20;

/// Bytes per value for integers below `bound`: 1, 2 or 4. With `sentinel`,
/// the narrow width's all-ones value is kept for u32::MAX.
pub fn width_for(bound: u64, sentinel: bool) -> usize {
    let room = |bits: u32| if sentinel { bound < 1u64 << bits } else { bound <= 1u64 << bits };
    if room(8) {
        1
    } else if room(16) {
        2
    } else {
        4
    }
}

/// The bytes of plain values (u32, f64, ...).
pub fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: T is a plain value type (no padding, any bytes valid to read);
    // the slice covers exactly the values' memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

impl Device {
    /// Run `f` with this device's staging buffer (made on first use, kept
    /// for the process). The buffer is taken out of its slot for the copy,
    /// not used under the lock: the copies fill and read it in parallel, and
    /// a rayon thread that waits for its loop may run another call's whole
    /// job meanwhile, whose copy would then wait for a lock that this very
    /// thread holds (a deadlock open to concurrent calls in one process). A copy
    /// that finds the slot empty makes a buffer of its own; of two put back,
    /// one is kept.
    fn with_staging<R>(&self, f: impl FnOnce(&mut Staging) -> Result<R>) -> Result<R> {
        let slot = || self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let taken = slot().take();
        let mut st = match taken {
            Some(st) => st,
            None => Staging::new(self)?,
        };
        let out = f(&mut st);
        let mut kept = slot();
        if kept.is_none() {
            *kept = Some(st);
        } else {
            drop(kept);
            // Its last copies may still read it: wait for them before the
            // pinned memory is freed.
            st.drain(self)?;
        }
        out
    }

    /// Copy `bytes` bytes to device address `dst`, chunk by chunk: `fill(at,
    /// out)` writes bytes [at, at + out.len()) of the source into a piece
    /// of the staging ring that no copy in flight reads.
    fn stage_up(&self, bytes: usize, dst: u64, fill: impl Fn(usize, &mut [u8]) + Sync) -> Result<()> {
        let fill = |at, out: &mut [u8]| {
            fill(at, out);
            true
        };
        self.stage_up_while(bytes, dst, fill, None).map(|_| ())
    }

    /// [`Device::stage_up`] while `fill` returns true: a chunk it returns
    /// false for is not copied, nor any after it. Returns whether every
    /// chunk was. With `queued`, a chunk crosses in copies of at most
    /// [`QUEUED_COPY`] bytes, and `queued(bytes)` runs after each is
    /// queued, with the bytes it covers.
    fn stage_up_while(&self, bytes: usize, dst: u64, fill: impl Fn(usize, &mut [u8]) -> bool + Sync, mut queued: Option<&mut dyn FnMut(Range<usize>) -> Result<()>>) -> Result<bool> {
        let e = |e| self.err("copying to the device", e);
        self.with_staging(|st| {
            self.ctx.bind_to_thread().map_err(e)?;
            for (at, len) in up_pieces(bytes) {
                let p = st.place(self, len)?;
                let piece = &mut st.buf.as_mut_slice().map_err(e)?[p..p + len];
                if !fill(at, piece) {
                    return Ok(false);
                }
                let copy = if queued.is_some() { QUEUED_COPY } else { len };
                for (k, part) in piece.chunks(copy).enumerate() {
                    let from = at + k * copy;
                    // SAFETY: dst + [at, at + len) lies in the caller's
                    // device buffer (freed, if at all, in stream order
                    // after the copy); the piece is pinned, kept for the
                    // process, and not written again until the event
                    // pushed next has passed.
                    unsafe { result::memcpy_htod_async(dst + from as u64, part, self.stream.cu_stream()) }.map_err(e)?;
                    if let Some(q) = queued.as_mut() {
                        q(from..from + part.len())?;
                    }
                }
                st.push(self, p, len)?;
            }
            // No wait here: the caller's values are in the staging buffer,
            // and the next user of a piece waits for its event first.
            Ok(true)
        })
    }

    /// Copy `bytes` bytes from device address `src` (after the work queued
    /// on the stream), piece by piece through the staging ring: `take(at,
    /// bytes)` gets bytes [at, at + bytes.len()) while the pieces after it
    /// cross the bus. A download is cut in at least [`DOWN_PIECES`] pieces
    /// (of whole [`DOWN_GRAIN`]s, at most a chunk each), so that the host
    /// copies each out while the next arrive: a model of 4 MB went in one
    /// piece, and its copy out followed the whole transfer.
    fn stage_down(&self, src: u64, bytes: usize, mut take: impl FnMut(usize, &[u8])) -> Result<()> {
        let e = |e| self.err("copying from the device", e);
        if bytes == 0 {
            return Ok(());
        }
        let piece = bytes.div_ceil(DOWN_PIECES).next_multiple_of(DOWN_GRAIN).min(CHUNK).min(bytes);
        let pieces = bytes.div_ceil(piece);
        let len = |k: usize| piece.min(bytes - k * piece);
        // Pieces in the ring at once (each in its slot), all of them where
        // they fit.
        let slots = pieces.min(RING / piece);
        self.with_staging(|st| {
            self.ctx.bind_to_thread().map_err(e)?;
            // Every slot is read here before this returns (nothing stays
            // in flight).
            let p = st.place(self, slots * piece)?;
            let mut done = Vec::with_capacity(slots);
            for _ in 0..slots {
                done.push(st.event(self)?);
            }
            let out = (|| {
                let buf = &mut st.buf.as_mut_slice().map_err(e)?[p..p + slots * piece];
                let enqueue = |k: usize, buf: &mut [u8], done: &CudaEvent| -> Result<()> {
                    let h = (k % slots) * piece;
                    // SAFETY: src + [k piece, + len) lies in the caller's
                    // device buffer; the slot is pinned and not read until
                    // `done` (recorded after this copy) has passed.
                    unsafe { result::memcpy_dtoh_async(&mut buf[h..h + len(k)], src + (k * piece) as u64, self.stream.cu_stream()) }.map_err(e)?;
                    done.record(&self.stream).map_err(e)
                };
                for (k, ev) in done.iter().enumerate() {
                    enqueue(k, buf, ev)?;
                }
                for k in 0..pieces {
                    let h = (k % slots) * piece;
                    done[k % slots].synchronize().map_err(e)?;
                    take(k * piece, &buf[h..h + len(k)]);
                    if k + slots < pieces {
                        enqueue(k + slots, buf, &done[k % slots])?;
                    }
                }
                Ok(())
            })();
            // On an error a copy may still write the slots: wait for it
            // before they are reused.
            for ev in done {
                if out.is_err() {
                    ev.synchronize().map_err(e)?;
                }
                st.give(ev);
            }
            out
        })
    }

    /// Download plain values from `src` into `out` (as long).
    pub fn download<T: Copy + Send + Sync>(&self, src: &CudaView<T>, out: &mut [T]) -> Result<()> {
        let size = std::mem::size_of::<T>();
        let (ptr, _sync) = src.device_ptr(&self.stream);
        self.stage_down(ptr, std::mem::size_of_val(out), |at, bytes| {
            let o = &mut out[at / size..(at + bytes.len()) / size];
            // SAFETY: T is a plain value type; `o` covers exactly bytes.len() bytes.
            let o = unsafe { std::slice::from_raw_parts_mut(o.as_mut_ptr().cast::<u8>(), bytes.len()) };
            par_copy(o, bytes);
        })
    }

    /// `src` into `outs` laid end to end (as long as they are together),
    /// each piece copied out while the next crosses the bus: the
    /// posteriors straight into R's matrices.
    pub fn download_parts<T: Copy + Send + Sync>(&self, src: &CudaView<T>, outs: &mut [&mut [T]]) -> Result<()> {
        let size = std::mem::size_of::<T>();
        let total: usize = outs.iter().map(|o| o.len()).sum();
        assert!(src.len() >= total, "a download's source holds its values");
        let starts = std::iter::once(0).chain(outs.iter().scan(0, |at, o| { *at += o.len() * size; Some(*at) })).collect::<Vec<_>>();
        let mut bytes: Vec<&mut [MaybeUninit<u8>]> = outs
            .iter_mut()
            .map(|o| {
                // SAFETY: T is a plain value type; the view covers exactly
                // o's bytes and borrows them uniquely; any byte written is
                // a byte of some T written whole (every T is written).
                unsafe { std::slice::from_raw_parts_mut(o.as_mut_ptr().cast::<MaybeUninit<u8>>(), o.len() * size) }
            })
            .collect();
        let (ptr, _sync) = src.device_ptr(&self.stream);
        self.stage_down(ptr, total * size, |at, b| take_into_parts(&mut bytes, &starts, at, b))
    }

    /// `src` in `lens.len()` new host vectors of `lens` values, laid end
    /// to end there, in one transfer: a model's three arrays after one
    /// wait, each piece copied out while the next crosses the bus. The
    /// vectors are not cleared first (calloc clears reused heap memory on
    /// one thread: about 0.2 ms of a 4 MB model's download).
    pub fn download_new_parts<T: Copy + Send + Sync, const K: usize>(&self, src: &CudaView<T>, lens: [usize; K]) -> Result<[Vec<T>; K]> {
        let total: usize = lens.iter().sum();
        assert!(src.len() >= total, "a download's source holds its values");
        let mut outs: [Vec<T>; K] = std::array::from_fn(|_| Vec::new());
        for (o, &n) in outs.iter_mut().zip(&lens) {
            *o = crate::memory::try_with_capacity(n, "a copy from the device")?;
        }
        let size = std::mem::size_of::<T>();
        let starts = std::iter::once(0).chain(lens.iter().scan(0, |at, &n| { *at += n * size; Some(*at) })).collect::<Vec<_>>();
        {
            let mut spare: Vec<&mut [MaybeUninit<u8>]> = outs
                .iter_mut()
                .zip(&lens)
                .map(|(o, &n)| {
                    // SAFETY: the first n values of the spare capacity (at
                    // least n), as bytes, borrowed uniquely.
                    unsafe { std::slice::from_raw_parts_mut(o.spare_capacity_mut().as_mut_ptr().cast::<MaybeUninit<u8>>(), n * size) }
                })
                .collect();
            let (ptr, _sync) = src.device_ptr(&self.stream);
            self.stage_down(ptr, total * size, |at, bytes| take_into_parts(&mut spare, &starts, at, bytes))?;
        }
        for (o, &n) in outs.iter_mut().zip(&lens) {
            // SAFETY: stage_down handed over every byte of [0, total * size)
            // once, and take_into_parts wrote each into its vector: the
            // first n values of each are initialised.
            unsafe { o.set_len(n) };
        }
        Ok(outs)
    }

    /// Upload plain values into `dst` (at least as long).
    pub fn upload<T: Copy + Sync>(&self, values: &[T], dst: &mut CudaViewMut<T>) -> Result<()> {
        let src = bytes_of(values);
        let (ptr, _sync) = dst.device_ptr_mut(&self.stream);
        self.stage_up(src.len(), ptr, |at, out| {
            let len = out.len();
            par_copy(out, &src[at..at + len]);
        })
    }

    /// [`Device::upload`] with each value tested by `ok` as its chunk is
    /// filled, so the values are read once for the copy and the test: a
    /// density's observations, checked on their way to the device instead
    /// of in a pass of their own before it (1.5-2.2 ms per 160 MB on the
    /// GPU host). `tested` is `values` as the type `ok` takes (the same
    /// memory). Returns false, with the copy stopped at that chunk, when
    /// a value fails.
    pub fn upload_tested<T: Copy + Sync, U: Copy + Sync>(&self, values: &[T], tested: &[U], ok: impl Fn(U) -> bool + Sync, dst: &mut CudaViewMut<T>) -> Result<bool> {
        self.upload_tested_as(values, tested, ok, dst, None)
    }

    /// [`Device::upload_tested`], with `queued(range)` run after the copy of
    /// each piece, values `range`, is queued on the stream: work on another
    /// stream that waits for it can use those values while the later
    /// pieces cross the bus.
    pub fn upload_tested_then<T: Copy + Sync, U: Copy + Sync>(&self, values: &[T], tested: &[U], ok: impl Fn(U) -> bool + Sync, dst: &mut CudaViewMut<T>, queued: &mut dyn FnMut(Range<usize>) -> Result<()>) -> Result<bool> {
        self.upload_tested_as(values, tested, ok, dst, Some(queued))
    }

    fn upload_tested_as<T: Copy + Sync, U: Copy + Sync>(&self, values: &[T], tested: &[U], ok: impl Fn(U) -> bool + Sync, dst: &mut CudaViewMut<T>, queued: Option<&mut dyn FnMut(Range<usize>) -> Result<()>>) -> Result<bool> {
        let size = std::mem::size_of::<T>();
        assert!(size == std::mem::size_of::<U>() && values.len() == tested.len() && values.as_ptr() as usize == tested.as_ptr() as usize, "the tested values are the copied ones");
        assert!(FIRST_CHUNK % size == 0 && COPY_GRAIN % size == 0, "staging pieces hold whole values");
        let (ptr, _sync) = dst.device_ptr_mut(&self.stream);
        let mut queued_values = queued.map(|q| move |bytes: Range<usize>| q(bytes.start / size..bytes.end / size));
        self.stage_up_while(std::mem::size_of_val(values), ptr, |at, out| {
            let tested = &tested[at / size..(at + out.len()) / size];
            let piece = |(o, t): (&mut [u8], &[U])| {
                o.copy_from_slice(bytes_of(t));
                // A whole piece without stopping early: no branch per value.
                t.iter().fold(true, |all, &x| all & ok(x))
            };
            if out.len() <= COPY_GRAIN {
                return piece((out, tested));
            }
            out.par_chunks_mut(COPY_GRAIN).zip(tested.par_chunks(COPY_GRAIN / size)).all(piece)
        }, queued_values.as_mut().map(|q| q as &mut dyn FnMut(Range<usize>) -> Result<()>))
    }

    /// Plain values in a new device buffer.
    pub fn upload_new<T: cudarc::driver::DeviceRepr + Copy + Sync>(&self, values: &[T]) -> Result<CudaSlice<T>> {
        // SAFETY: the upload writes every value.
        let mut d = unsafe { self.stream.alloc::<T>(values.len()) }.map_err(|e| self.err("allocating a copy", e))?;
        self.upload(values, &mut d.slice_mut(..))?;
        Ok(d)
    }

    /// `parts` end to end in a new device buffer. Each staging chunk is
    /// filled straight from the parts it covers: no host copy of the whole
    /// (which cost a page fault per 4 KiB of fresh memory, the copy and the
    /// unmapping: 640 MB in the 40,000-dataset EM).
    pub fn upload_parts_new<T: cudarc::driver::DeviceRepr + Copy + Sync>(&self, parts: &[&[T]]) -> Result<CudaSlice<T>> {
        if let [one] = parts {
            return self.upload_new(one);
        }
        let size = std::mem::size_of::<T>();
        let starts = starts_of(parts, size);
        let total = starts[parts.len()];
        // SAFETY: the upload writes every value.
        let mut d = unsafe { self.stream.alloc::<T>(total / size) }.map_err(|e| self.err("allocating a copy", e))?;
        if total > 0 {
            let (ptr, _sync) = d.device_ptr_mut(&self.stream);
            self.stage_up(total, ptr, |at, out| fill_from_parts(parts, &starts, at, out))?;
        }
        Ok(d)
    }

    /// Small arrays of bytes (`bytes_of`) in one new device buffer, each
    /// from a multiple of 16 bytes, in one copy; and the device address of
    /// each. The addresses are valid while the buffer is kept, for launches
    /// on this device's stream (the buffer is freed in stream order).
    pub fn upload_packed<const K: usize>(&self, parts: [&[u8]; K]) -> Result<(CudaSlice<u8>, [u64; K])> {
        let pad = [0u8; PACK_ALIGN];
        let starts = packed_starts(parts.iter().map(|p| p.len()));
        let mut pieces: Vec<&[u8]> = Vec::with_capacity(2 * K);
        for (k, p) in parts.iter().enumerate() {
            pieces.push(p);
            pieces.push(&pad[..starts[k + 1] - starts[k] - p.len()]);
        }
        let buf = self.upload_parts_new(&pieces)?;
        let base = buf.device_ptr(&self.stream).0;
        Ok((buf, std::array::from_fn(|k| base + starts[k] as u64)))
    }

    /// Zeroed device arrays of `bytes` bytes each in one allocation (one
    /// allocation and one clear instead of one each), laid out as
    /// [`Device::upload_packed`] lays its parts; and the address of each.
    pub fn alloc_zeros_packed<const K: usize>(&self, bytes: [usize; K]) -> Result<(CudaSlice<u8>, [u64; K])> {
        let starts = packed_starts(bytes.into_iter());
        let buf = self.stream.alloc_zeros::<u8>(starts[K]).map_err(|e| self.err("allocating scratch memory", e))?;
        let base = buf.device_ptr(&self.stream).0;
        Ok((buf, std::array::from_fn(|k| base + starts[k] as u64)))
    }

    /// `parts` end to end in a new device buffer as float32s, converted as
    /// the staging chunks are filled (half the bytes of
    /// [`Device::upload_parts_new`]), or None, found on the way, when some
    /// value is not a float32 exactly.
    pub fn upload_parts_f32_new(&self, parts: &[&[f64]]) -> Result<Option<CudaSlice<f32>>> {
        let starts = starts_of(parts, 1);
        let total = starts[parts.len()];
        // SAFETY: the upload writes every value (or the buffer is dropped).
        let mut d = unsafe { self.stream.alloc::<f32>(total.max(1)) }.map_err(|e| self.err("allocating a copy", e))?;
        let exact = {
            let (ptr, _sync) = d.device_ptr_mut(&self.stream);
            self.stage_up_while(4 * total, ptr, |at, out| {
                // SAFETY: any bytes are a valid f32; the pieces start at
                // multiples of 64 bytes in a page-aligned buffer, and every
                // piece is a multiple of 4 bytes long (checked below).
                let (head, values, tail) = unsafe { out.align_to_mut::<f32>() };
                assert!(head.is_empty() && tail.is_empty(), "staging chunks hold whole float32s");
                fill_f32_from_parts(parts, &starts, at / 4, values)
            }, None)?
        };
        Ok(exact.then_some(d))
    }

    /// `a` (rows x cols, row-major, in host memory) on the device,
    /// transposed and/or as logs (`Device::layout`).
    pub fn upload_layout(&self, a: &[f64], rows: usize, cols: usize, transpose: bool, take_log: bool) -> Result<CudaSlice<f64>> {
        let raw = self.upload_new(a)?;
        if !transpose && !take_log {
            return Ok(raw);
        }
        self.layout(&raw, rows, cols, transpose, take_log)
    }

    /// `a` (rows x cols, row-major, on the device) transposed (cols x
    /// rows) when `transpose`, as logs when `take_log`, in a new buffer.
    pub fn layout(&self, a: &CudaSlice<f64>, rows: usize, cols: usize, transpose: bool, take_log: bool) -> Result<CudaSlice<f64>> {
        // SAFETY: layout_f64 writes every value.
        let mut out = unsafe { self.stream.alloc::<f64>(rows * cols) }.map_err(|e| self.err("allocating a table", e))?;
        self.layout_into(a, rows, cols, transpose, take_log, &mut out.slice_mut(..))?;
        Ok(out)
    }

    /// [`Device::layout`] into `out` (rows x cols values).
    pub fn layout_into(&self, a: &CudaSlice<f64>, rows: usize, cols: usize, transpose: bool, take_log: bool, out: &mut CudaViewMut<f64>) -> Result<()> {
        assert!(a.len() >= rows * cols && out.len() >= rows * cols, "a layout's table fits its buffers");
        if rows * cols == 0 {
            return Ok(());
        }
        let f = self.function(Kernel::LayoutF64, &[])?;
        let (r_i, c_i, t_i, l_i) = (rows as i32, cols as i32, transpose as i32, take_log as i32);
        let cfg = LaunchConfig { grid_dim: (cols.div_ceil(32) as u32, rows.div_ceil(32) as u32, 1), block_dim: (32, 8, 1), shared_mem_bytes: 0 };
        let mut launch = self.stream.launch_builder(&f);
        launch.arg(a).arg(&r_i).arg(&c_i).arg(&t_i).arg(&l_i).arg(out);
        // SAFETY: layout_f64(a, rows, cols, transpose, take_log, out): a and
        // out hold rows x cols doubles (checked above); the grid covers them
        // in 32 x 32 tiles with blocks of (32, 8) threads.
        unsafe { launch.launch(cfg) }.map_err(|e| self.err("launching layout_f64", e))?;
        Ok(())
    }

    /// `rows` (time-major, `n` values per observation) as one column-major
    /// T_s x n matrix per sequence, at the same place in `out`, NaN as
    /// `missing`: sequences first .. first + count, at `off` (observation
    /// offsets on the device), the rows from row off[first]
    /// (kernels/transfer.cu, columns_by_sequence_f64).
    #[allow(clippy::too_many_arguments)]
    pub fn columns_by_sequence(&self, rows: &CudaSlice<f64>, off: &CudaSlice<i64>, first: usize, count: usize, n: usize, missing: f64, out: &mut CudaSlice<f64>) -> Result<()> {
        if count == 0 || n == 0 {
            return Ok(());
        }
        assert!(first + count < off.len() && rows.len() <= out.len(), "a layout's sequences and rows fit their buffers");
        let f = self.function(Kernel::ColumnsBySequenceF64, &[])?;
        let (first_i, count_i, n_i, bits) = (first as i32, count as i32, n as i32, missing.to_bits());
        // Few sequences: their tiles split over blocks too (grid y), eight
        // blocks per multiprocessor in all.
        let split = (8 * self.multiprocessors as usize).div_ceil(count).clamp(1, 65_535) as u32;
        let cfg = LaunchConfig { grid_dim: (count.min(1 << 20) as u32, split, 1), block_dim: (32, 8, 1), shared_mem_bytes: 0 };
        let mut launch = self.stream.launch_builder(&f);
        launch.arg(rows).arg(off).arg(&first_i).arg(&count_i).arg(&n_i).arg(&bits).arg(out);
        // SAFETY: columns_by_sequence_f64(rows, off, first, count, n,
        // missing, out): off holds offsets first ..= first + count (checked
        // above); rows and out hold the (off[first + count] - off[first]) x
        // n values of those sequences (the caller's batch); blocks of (32, 8)
        // threads, grid-striding over the sequences (x) and their tiles (y).
        unsafe { launch.launch(cfg) }.map_err(|e| self.err("launching columns_by_sequence_f64", e))?;
        Ok(())
    }

    /// `full` (parts end to end, part d at full_off[d] .. full_off[d + 1])
    /// less the positions skip[skip_start[d] .. skip_start[d + 1]] of each
    /// part (increasing, relative to the part), end to end in a new buffer,
    /// on stream `s` (kernels/transfer.cu, compact_f64).
    pub fn compact_f64(&self, s: &std::sync::Arc<cudarc::driver::CudaStream>, full: &CudaSlice<f64>, full_off: &[i64], skip: &[i32], skip_start: &[i64]) -> Result<CudaSlice<f64>> {
        let parts = full_off.len().saturating_sub(1);
        assert_eq!(skip_start.len(), parts + 1, "a skip list per part");
        let e = |err| self.err("copying data", err);
        let total = full_off.last().copied().unwrap_or(0) - skip.len() as i64;
        // SAFETY: compact_f64 writes every value (each kept value once).
        let mut out = unsafe { s.alloc::<f64>(total.max(1) as usize) }.map_err(|err| self.err("allocating the exact observations", err))?;
        if parts == 0 || total <= 0 {
            return Ok(out);
        }
        let d_full_off = s.clone_htod(full_off).map_err(e)?;
        let d_skip = if skip.is_empty() { s.clone_htod(&[0i32]) } else { s.clone_htod(skip) }.map_err(e)?;
        let d_start = s.clone_htod(skip_start).map_err(e)?;
        let f = self.function(Kernel::CompactF64, &[])?;
        let mut launch = s.launch_builder(&f);
        launch.arg(full).arg(&d_full_off).arg(&d_skip).arg(&d_start).arg(&mut out);
        let cfg = LaunchConfig { grid_dim: (parts as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: compact_f64(full, full_off, skip, skip_start, out): full
        // holds full_off[parts] values, skip holds skip_start[parts] positions
        // (each within its part, increasing), out holds full_off[parts] -
        // skip_start[parts] values; one block per part.
        unsafe { launch.launch(cfg) }.map_err(|err| self.err("launching compact_f64", err))?;
        Ok(out)
    }

    /// Upload `values` (each below `bound`) into `dst[..values.len()]`,
    /// sent as the fewest bytes each that hold `bound - 1`.
    pub fn upload_small(&self, values: &[u32], bound: u64, dst: &mut CudaViewMut<u32>) -> Result<()> {
        let w = width_for(bound, false);
        if w == 4 || values.is_empty() {
            return self.upload(values, dst);
        }
        let n = values.len();
        // SAFETY: every byte is written by the copy before the kernel reads it.
        let mut tmp = unsafe { self.stream.alloc::<u8>(n * w) }.map_err(|e| self.err("allocating a copy", e))?;
        {
            let (ptr, _sync) = tmp.device_ptr_mut(&self.stream);
            self.stage_up(n * w, ptr, |at, out| {
                let v = &values[at / w..(at + out.len()) / w];
                if v.len() <= GRAIN {
                    encode(v, w, out);
                } else {
                    out.par_chunks_mut(GRAIN * w).zip(v.par_chunks(GRAIN)).for_each(|(o, v)| encode(v, w, o));
                }
            })?;
        }
        self.widen(&tmp, w, n, dst)
    }

    /// Download `src` (each value below `bound`, or u32::MAX) into `out`
    /// (as long), sent as the fewest bytes each that hold them.
    pub fn download_small(&self, src: &CudaView<u32>, bound: u64, out: &mut [u32]) -> Result<()> {
        let (w, n) = (width_for(bound, true), out.len());
        if n == 0 {
            return Ok(());
        }
        let put = |at: usize, bytes: &[u8]| {
            let o = &mut out[at / w..(at + bytes.len()) / w];
            if o.len() <= GRAIN {
                decode(bytes, w, o);
            } else {
                o.par_chunks_mut(GRAIN).zip(bytes.par_chunks(GRAIN * w)).for_each(|(o, b)| decode(b, w, o));
            }
        };
        if w == 4 {
            let (ptr, _sync) = src.device_ptr(&self.stream);
            return self.stage_down(ptr, n * 4, put);
        }
        let tmp = self.narrowed(src, w, n)?;
        let (ptr, _sync) = tmp.device_ptr(&self.stream);
        self.stage_down(ptr, n * w, put)
    }

    /// Download `src` (each value below `bound`, or u32::MAX) into `out`
    /// as they crossed the bus: `w` = [`width_for`]`(bound, true)` (1 or 2)
    /// little-endian bytes each, all ones for u32::MAX; `out` holds
    /// `w src.len()` bytes.
    pub fn download_narrow(&self, src: &CudaView<u32>, w: usize, out: &mut [u8]) -> Result<()> {
        let n = out.len() / w;
        if n == 0 {
            return Ok(());
        }
        let tmp = self.narrowed(src, w, n)?;
        let (ptr, _sync) = tmp.device_ptr(&self.stream);
        self.stage_down(ptr, n * w, |at, bytes| par_copy(&mut out[at..at + bytes.len()], bytes))
    }

    /// The first `n` values of `src` narrowed to `w` bytes each, in a new
    /// device buffer.
    fn narrowed(&self, src: &CudaView<u32>, w: usize, n: usize) -> Result<CudaSlice<u8>> {
        // SAFETY: the kernel writes every byte before the copy reads it.
        let mut tmp = unsafe { self.stream.alloc::<u8>(n * w) }.map_err(|e| self.err("allocating a copy", e))?;
        self.narrow(src, w, n, &mut tmp)?;
        Ok(tmp)
    }

    /// widen_u32 from `src` (n values of w bytes) into `dst`.
    fn widen(&self, src: &CudaSlice<u8>, w: usize, n: usize, dst: &mut CudaViewMut<u32>) -> Result<()> {
        let f = self.function(Kernel::WidenU32, &[])?;
        let (w_i, n_i, s_i) = (w as i32, n as i64, 0i32);
        let mut launch = self.stream.launch_builder(&f);
        launch.arg(src).arg(&w_i).arg(&n_i).arg(&s_i).arg(dst);
        // SAFETY: widen_u32(src, width, n, sentinel, dst): src holds n
        // values of w bytes, dst at least n u32s.
        unsafe { launch.launch(self.grid_for(n)) }.map_err(|e| self.err("launching widen_u32", e))?;
        Ok(())
    }

    /// narrow_u32 from `src` (n u32s) into `dst` (n values of w bytes),
    /// u32::MAX kept as all ones.
    fn narrow(&self, src: &CudaView<u32>, w: usize, n: usize, dst: &mut CudaSlice<u8>) -> Result<()> {
        let f = self.function(Kernel::NarrowU32, &[])?;
        let (w_i, n_i, s_i) = (w as i32, n as i64, 1i32);
        let mut launch = self.stream.launch_builder(&f);
        launch.arg(src).arg(&w_i).arg(&n_i).arg(&s_i).arg(dst);
        // SAFETY: narrow_u32(src, width, n, sentinel, dst): src holds n
        // u32s, dst n values of w bytes.
        unsafe { launch.launch(self.grid_for(n)) }.map_err(|e| self.err("launching narrow_u32", e))?;
        Ok(())
    }

    /// A grid-stride launch over n items.
    fn grid_for(&self, n: usize) -> LaunchConfig {
        LaunchConfig { grid_dim: (n.div_ceil(256).clamp(1, self.multiprocessors as usize * 32) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }
}

/// Alignment of each array packed into one device buffer (16-byte loads).
const PACK_ALIGN: usize = 16;

/// Where arrays of the given byte lengths begin packed end to end, each
/// from a multiple of PACK_ALIGN and at least PACK_ALIGN long (distinct
/// addresses, even when empty), then the total.
fn packed_starts(lens: impl Iterator<Item = usize>) -> Vec<usize> {
    std::iter::once(0).chain(lens.scan(0, |at, len| { *at += len.next_multiple_of(PACK_ALIGN).max(PACK_ALIGN); Some(*at) })).collect()
}

/// Where each of `parts` begins laid end to end, in units of `unit` per
/// value (bytes, or values for 1), then the total.
fn starts_of<T>(parts: &[&[T]], unit: usize) -> Vec<usize> {
    std::iter::once(0).chain(parts.iter().scan(0, |at, p| { *at += p.len() * unit; Some(*at) })).collect()
}

/// Bytes [at, at + out.len()) of `parts` laid end to end (part i from
/// byte starts[i]) into `out`, in pieces of at most COPY_GRAIN copied in
/// parallel (as fill_f32_from_parts).
fn fill_from_parts<T: Copy + Sync>(parts: &[&[T]], starts: &[usize], at: usize, out: &mut [u8]) {
    let end = at + out.len();
    let mut pieces = Vec::new();
    let mut rest = out;
    let mut i = starts.partition_point(|&s| s <= at) - 1;
    while !rest.is_empty() {
        let src = bytes_of(parts[i]);
        let from = at.max(starts[i]) - starts[i];
        let len = (end.min(starts[i + 1]) - starts[i]) - from;
        let (piece, tail) = rest.split_at_mut(len);
        pieces.extend(piece.chunks_mut(COPY_GRAIN).zip(src[from..from + len].chunks(COPY_GRAIN)));
        rest = tail;
        i += 1;
    }
    each_piece(pieces, end - at, |(o, i)| o.copy_from_slice(i));
}

/// `bytes` (bytes [at, at + bytes.len()) of `outs` laid end to end, out i
/// from byte starts[i]) into `outs`, in pieces of at most COPY_GRAIN
/// copied in parallel (the inverse of fill_from_parts). `outs` may be
/// uninitialised: every byte of `bytes` is written once.
fn take_into_parts(outs: &mut [&mut [MaybeUninit<u8>]], starts: &[usize], at: usize, bytes: &[u8]) {
    let end = at + bytes.len();
    let mut pieces = Vec::new();
    let mut rest = bytes;
    // The first out that ends past `at` (a piece may cover few of many).
    let first = starts[1..].partition_point(|&s| s <= at);
    for (i, out) in outs.iter_mut().enumerate().skip(first) {
        if starts[i] >= end {
            break;
        }
        let from = at.max(starts[i]) - starts[i];
        let len = end.min(starts[i + 1]) - starts[i] - from;
        let (piece, tail) = rest.split_at(len);
        pieces.extend(out[from..from + len].chunks_mut(COPY_GRAIN).zip(piece.chunks(COPY_GRAIN)));
        rest = tail;
    }
    each_piece(pieces, bytes.len(), |(o, i)| {
        // SAFETY: `o` and `i` have the same length (split alike) and do not
        // overlap (one is host memory of the caller, the other the staging
        // buffer); writing bytes into MaybeUninit<u8> is always valid.
        unsafe { std::ptr::copy_nonoverlapping(i.as_ptr(), o.as_mut_ptr().cast::<u8>(), i.len()) }
    });
}

/// `parts` end to end as float32s in host memory, or None when some value
/// is not a float32 exactly (for a copy that does not go through the
/// staging buffer).
pub(crate) fn parts_as_f32(parts: &[&[f64]]) -> Option<Vec<f32>> {
    let starts = starts_of(parts, 1);
    let mut out = vec![0.0f32; starts[parts.len()]];
    fill_f32_from_parts(parts, &starts, 0, &mut out).then_some(out)
}

/// Values [at, at + out.len()) of `parts` laid end to end (part i from
/// value starts[i]) into `out` as float32s, the pieces converted in
/// parallel; whether each is a float32 exactly (its float32 the same
/// number: NaNs are not).
fn fill_f32_from_parts(parts: &[&[f64]], starts: &[usize], at: usize, out: &mut [f32]) -> bool {
    let end = at + out.len();
    let mut pieces = Vec::new();
    let mut rest = out;
    let mut i = starts.partition_point(|&s| s <= at) - 1;
    while !rest.is_empty() {
        let from = at.max(starts[i]) - starts[i];
        let len = (end.min(starts[i + 1]) - starts[i]) - from;
        let (piece, tail) = rest.split_at_mut(len);
        pieces.extend(piece.chunks_mut(GRAIN).zip(parts[i][from..from + len].chunks(GRAIN)));
        rest = tail;
        i += 1;
    }
    let exact = |(o, v): (&mut [f32], &[f64])| {
        let mut inexact = false;
        for (o, &x) in o.iter_mut().zip(v) {
            *o = x as f32;
            inexact |= *o as f64 != x;
        }
        !inexact
    };
    if end - at <= GRAIN {
        return pieces.into_iter().all(exact);
    }
    pieces.into_par_iter().all(exact)
}

/// The pieces (start, length) of an upload of `bytes` bytes: from
/// [`FIRST_CHUNK`] bytes, each twice the last, up to [`CHUNK`]; each
/// starts at a multiple of FIRST_CHUNK.
fn up_pieces(bytes: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut next = (0, FIRST_CHUNK);
    std::iter::from_fn(move || {
        let (at, len) = next;
        (at < bytes).then(|| {
            next = (at + len, (2 * len).min(CHUNK));
            (at, len.min(bytes - at))
        })
    })
}

/// `dst` = `src` (as long), in parallel.
fn par_copy(dst: &mut [u8], src: &[u8]) {
    if dst.len() <= COPY_GRAIN {
        dst.copy_from_slice(src);
        return;
    }
    dst.par_chunks_mut(COPY_GRAIN).zip(src.par_chunks(COPY_GRAIN)).for_each(|(o, i)| o.copy_from_slice(i));
}

/// `f` over `pieces` (of `bytes` in all): in parallel when they exceed
/// one COPY_GRAIN, else on this thread. Handing a few small pieces to
/// rayon costs more than copying them: a 12 KiB upload of three arrays
/// took 16-27 us in a pool on the GPU host, where waking a thread is a
/// round trip through its sandbox, against 1-2 us for its copy.
fn each_piece<P: Send>(pieces: Vec<P>, bytes: usize, f: impl Fn(P) + Sync + Send) {
    if bytes <= COPY_GRAIN {
        pieces.into_iter().for_each(f);
    } else {
        pieces.into_par_iter().for_each(f);
    }
}

/// `v` as little-endian integers of `w` bytes (1 or 2) into `out`.
fn encode(v: &[u32], w: usize, out: &mut [u8]) {
    if w == 1 {
        for (o, &x) in out.iter_mut().zip(v) {
            *o = x as u8;
        }
    } else {
        for (o, &x) in out.chunks_exact_mut(2).zip(v) {
            o.copy_from_slice(&(x as u16).to_le_bytes());
        }
    }
}

/// The inverse of narrow_u32: integers of `w` bytes (1 or 2: all ones
/// is u32::MAX; 4: as they are).
fn decode(b: &[u8], w: usize, out: &mut [u32]) {
    if w == 4 {
        for (o, x) in out.iter_mut().zip(b.chunks_exact(4)) {
            *o = u32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        }
    } else if w == 1 {
        for (o, &x) in out.iter_mut().zip(b) {
            *o = if x == u8::MAX { u32::MAX } else { x as u32 };
        }
    } else {
        for (o, x) in out.iter_mut().zip(b.chunks_exact(2)) {
            let x = u16::from_le_bytes([x[0], x[1]]);
            *o = if x == u16::MAX { u32::MAX } else { x as u32 };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::{bytes_of, decode, encode, fill_f32_from_parts, fill_from_parts, packed_starts, starts_of, take_into_parts, width_for, PACK_ALIGN};

    #[test]
    fn widths_hold_every_value_and_the_sentinel() {
        assert_eq!(width_for(256, false), 1);
        assert_eq!(width_for(257, false), 2);
        assert_eq!(width_for(65_536, false), 2);
        assert_eq!(width_for(65_537, false), 4);
        // 0xFF stands for u32::MAX: states 0..=254 fit a byte.
        assert_eq!(width_for(255, true), 1);
        assert_eq!(width_for(256, true), 2);
        assert_eq!(width_for(65_535, true), 2);
        assert_eq!(width_for(65_536, true), 4);
    }

    #[test]
    fn narrow_values_round_trip() {
        for (w, v) in [(1, vec![0u32, 7, 254]), (2, vec![0, 255, 65_534, 300])] {
            let mut b = vec![0u8; v.len() * w];
            encode(&v, w, &mut b);
            let mut back = vec![0u32; v.len()];
            decode(&b, w, &mut back);
            assert_eq!(back, v);
        }
        let mut back = [0u32; 2];
        decode(&[0xFF, 3], 1, &mut back);
        assert_eq!(back, [u32::MAX, 3]);
        decode(&[0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 0, 0], 4, &mut back);
        assert_eq!(back, [u32::MAX, 0x0201]);
    }

    /// Parts of the given lengths holding step, 2 step, 3 step, ... end to end.
    fn counted_parts(lens: &[usize], step: f64) -> Vec<Vec<f64>> {
        let mut next = 0.0;
        lens.iter().map(|&n| (0..n).map(|_| { next += step; next }).collect()).collect()
    }

    #[test]
    fn float32_chunks_are_the_parts_converted_end_to_end() {
        // As below, in values: every chunk of float32 bytes, from anywhere,
        // is the concatenation's values as float32s.
        let parts = counted_parts(&[0, 3, 1, 0, 17, 5, 64, 2, 0, 9, 70_000], 0.5);
        let refs: Vec<&[f64]> = parts.iter().map(|p| &p[..]).collect();
        let whole: Vec<f32> = parts.concat().iter().map(|&v| v as f32).collect();
        let starts = starts_of(&refs, 1);
        for chunk in [1, 7, 100, 65_537, whole.len()] {
            for first in [0, 1, 5, 200] {
                let mut at = first;
                while at < whole.len() {
                    let len = chunk.min(whole.len() - at);
                    let mut out = vec![0.0f32; len];
                    assert!(fill_f32_from_parts(&refs, &starts, at, &mut out));
                    assert_eq!(bytes_of(&out), bytes_of(&whole[at..at + len]), "chunk {chunk} at {at}");
                    at += len;
                }
            }
        }
        // A value that is no float32 is reported, in the piece that holds it
        // and not elsewhere; so is a NaN. Float32's extremes and subnormals
        // are exact.
        for bad in [0.1, f64::NAN, 1.0 + f64::EPSILON, 1e-50, 1e39] {
            let mut part = vec![1.0, f32::MAX as f64, f32::MIN_POSITIVE as f64 / 8.0, 0.0, -0.0, 3.5];
            part.push(bad);
            let refs: Vec<&[f64]> = vec![&part];
            let starts = [0, part.len()];
            let mut out = vec![0.0f32; part.len()];
            assert!(!fill_f32_from_parts(&refs, &starts, 0, &mut out), "{bad:e}");
            assert!(fill_f32_from_parts(&refs, &starts, 0, &mut out[..6]), "{bad:e}");
        }
    }

    #[test]
    fn chunks_filled_from_parts_are_the_parts_end_to_end() {
        // Parts of many lengths (empty ones among them), read in chunks of
        // every size from one byte to more than the whole, starting
        // anywhere: each chunk is the concatenation's bytes.
        let parts = counted_parts(&[0, 3, 1, 0, 0, 17, 5, 64, 2, 0, 9], 1.5);
        let refs: Vec<&[f64]> = parts.iter().map(|p| &p[..]).collect();
        let whole: Vec<f64> = parts.concat();
        let bytes = bytes_of(&whole);
        let starts = starts_of(&refs, 8);
        assert_eq!(starts[refs.len()], bytes.len());
        for chunk in [1, 7, 8, 24, 100, bytes.len()] {
            for first in [0, 1, 5, 8, 200] {
                let mut at = first;
                while at < bytes.len() {
                    let len = chunk.min(bytes.len() - at);
                    let mut out = vec![0u8; len];
                    fill_from_parts(&refs, &starts, at, &mut out);
                    assert_eq!(out, &bytes[at..at + len], "chunk {chunk} at {at}");
                    at += len;
                }
            }
        }
    }

    #[test]
    fn pieces_taken_into_parts_rebuild_the_whole() {
        // The inverse of the above: the whole's bytes handed over in pieces
        // of every size, starting anywhere, land in parts of many lengths
        // (empty ones and ones longer than a thread's copy among them),
        // each piece only where it belongs.
        let whole: Vec<f64> = counted_parts(&[3 * super::COPY_GRAIN / 8 + 5], 0.75).concat();
        let bytes = bytes_of(&whole);
        let lens = [0usize, 3, 1, 0, 17, 5, super::COPY_GRAIN / 8 + 1, 0, 64, 2];
        let last = whole.len() - lens.iter().sum::<usize>();
        let lens: Vec<usize> = lens.iter().copied().chain([last, 0]).collect();
        for piece in [1, 7, 8, 24, 4096, super::COPY_GRAIN + 3, bytes.len()] {
            let mut parts: Vec<Vec<MaybeUninit<u8>>> = lens.iter().map(|&n| vec![MaybeUninit::new(0xAB); 8 * n]).collect();
            let starts: Vec<usize> = std::iter::once(0).chain(parts.iter().scan(0, |at, p| { *at += p.len(); Some(*at) })).collect();
            let mut outs: Vec<&mut [MaybeUninit<u8>]> = parts.iter_mut().map(|p| &mut p[..]).collect();
            let mut at = 0;
            while at < bytes.len() {
                let len = piece.min(bytes.len() - at);
                take_into_parts(&mut outs, &starts, at, &bytes[at..at + len]);
                at += len;
            }
            // SAFETY: every byte was initialised (0xAB, then the piece's).
            let back: Vec<u8> = parts.concat().into_iter().map(|b| unsafe { b.assume_init() }).collect();
            assert_eq!(back, bytes, "pieces of {piece} bytes");
        }
    }

    /// Parts longer than a thread's copy (COPY_GRAIN) are split among
    /// threads: the chunk is still the concatenation's bytes.
    #[test]
    fn long_parts_are_copied_in_grains() {
        let long = super::COPY_GRAIN / 8;
        let parts = counted_parts(&[3 * long + 5, 2, long, 0, long - 1], 0.25);
        let refs: Vec<&[f64]> = parts.iter().map(|p| &p[..]).collect();
        let whole: Vec<f64> = parts.concat();
        let bytes = bytes_of(&whole);
        let starts = starts_of(&refs, 8);
        for (at, len) in [(0, bytes.len()), (13, bytes.len() - 13), (8 * long - 3, 2 * super::COPY_GRAIN + 7)] {
            let mut out = vec![0u8; len];
            fill_from_parts(&refs, &starts, at, &mut out);
            assert_eq!(out, &bytes[at..at + len], "{len} bytes at {at}");
        }
    }

    #[test]
    fn packed_arrays_are_aligned_apart_and_in_order() {
        let lens = [0, 1, 16, 17, 3, 0, 64];
        let starts = packed_starts(lens.iter().copied());
        assert_eq!(starts, vec![0, 16, 32, 48, 80, 96, 112, 176]);
        for (k, &len) in lens.iter().enumerate() {
            assert_eq!(starts[k] % PACK_ALIGN, 0);
            assert!(starts[k] + len <= starts[k + 1] && starts[k] < starts[k + 1]);
        }
    }
}
