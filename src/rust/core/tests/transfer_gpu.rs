//! Copies through the pinned staging buffer (src/gpu/transfer.rs): small
//! integers sent as 1, 2 or 4 bytes and plain values come back bit for bit,
//! over lengths of one piece, several, more than the ring holds, and not a
//! whole number of them; values tested on their way stop the copy.
//! Skipped (with a note) where no device is usable.

#[allow(dead_code)] // only gpu_or_skip of the shared helpers
mod common;
use common::gpu_or_skip;

use bulkem_core::gpu;

/// n pseudo-random values below `bound`, every tenth u32::MAX when `holes`.
fn values(n: usize, bound: u64, holes: bool) -> Vec<u32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if holes && i % 10 == 3 { u32::MAX } else { (s % bound) as u32 }
        })
        .collect()
}

#[test]
fn small_integers_round_trip_at_every_width() {
    if !gpu_or_skip() {
        return;
    }
    let dev = &gpu::devices().expect("a device")[0];
    let s = &dev.stream;
    // Widths 1, 2, 4 on the way up (bounds 256, 65,536, 2^32) and down
    // (255 and 65,535 keep a sentinel); lengths across the pieces (2 MiB
    // doubling to 16 MiB) and past the 48 MiB ring.
    for (bound, n) in [(256u64, 1usize), (16, 9_000_001), (256, 4 << 20), (65_536, 3_000_017), (1 << 32, 2_500_001), (256, 70_000_003), (65_536, 30_000_001)] {
        let v = values(n, bound, false);
        let mut d = s.alloc_zeros::<u32>(n + 3).expect("device memory");
        dev.upload_small(&v, bound, &mut d.slice_mut(0..n)).expect("upload");
        let back = s.clone_dtoh(&d).expect("copy back");
        assert_eq!(&back[..n], &v[..], "upload, bound {bound}, n {n}");
        assert_eq!(&back[n..], &[0, 0, 0], "upload wrote past its values, bound {bound}");
        let down_bound = bound.min(u32::MAX as u64) - 1;
        let w = values(n, down_bound, true);
        let d = s.clone_htod(&w).expect("copy");
        let mut out = vec![7u32; n];
        dev.download_small(&d.slice(..), down_bound, &mut out).expect("download");
        assert_eq!(out, w, "download, bound {down_bound}, n {n}");
    }
}

#[test]
fn plain_values_round_trip() {
    if !gpu_or_skip() {
        return;
    }
    let dev = &gpu::devices().expect("a device")[0];
    let s = &dev.stream;
    for n in [1usize, 1000, (1 << 19) + 5, 3 << 20, (12 << 20) + 3] {
        let v: Vec<f64> = (0..n).map(|i| (i as f64).sin() * 1e300f64.powf((i % 3) as f64 / 3.0)).collect();
        let mut d = s.alloc_zeros::<f64>(n).expect("device memory");
        dev.upload(&v, &mut d.slice_mut(..)).expect("upload");
        let back = s.clone_dtoh(&d).expect("copy back");
        assert!(back.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()), "upload, n {n}");
        let mut down = vec![0.5f64; n];
        dev.download(&d.slice(..), &mut down).expect("download");
        assert!(down.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()), "download, n {n}");
    }
}

/// `upload_tested`: every value tested as its piece is filled; all valid,
/// the values arrive bit for bit; one invalid, in the first piece, a later
/// one or the last value, the copy says so.
#[test]
fn tested_uploads_arrive_whole_or_stop() {
    if !gpu_or_skip() {
        return;
    }
    let dev = &gpu::devices().expect("a device")[0];
    let s = &dev.stream;
    for n in [1usize, 5000, (1 << 18) + 1, (12 << 20) + 3] {
        let v: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).cos()).collect();
        let mut d = s.alloc_zeros::<f64>(n).expect("device memory");
        assert!(dev.upload_tested(&v, &v, f64::is_finite, &mut d.slice_mut(..)).expect("upload"), "n {n}");
        let back = s.clone_dtoh(&d).expect("copy back");
        assert!(back.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()), "tested upload, n {n}");
        for at in [0, n / 2, n - 1] {
            let mut w = v.clone();
            w[at] = f64::NAN;
            assert!(!dev.upload_tested(&w, &w, f64::is_finite, &mut d.slice_mut(..)).expect("upload"), "n {n}, NaN at {at}");
        }
    }
}

#[test]
fn layouts_transpose_and_take_logs() {
    if !gpu_or_skip() {
        return;
    }
    let dev = &gpu::devices().expect("a device")[0];
    for (rows, cols) in [(1usize, 1usize), (3, 70), (512, 512), (33, 1000)] {
        let a: Vec<f64> = (0..rows * cols).map(|i| 0.25 + (i % 97) as f64 / 7.0).collect();
        for (transpose, take_log) in [(true, false), (false, true), (true, true)] {
            let d = dev.upload_layout(&a, rows, cols, transpose, take_log).expect("layout");
            let got = dev.stream.clone_dtoh(&d).expect("copy back");
            for r in 0..rows {
                for c in 0..cols {
                    let x = a[r * cols + c];
                    let want = if take_log { x.ln() } else { x };
                    let at = if transpose { c * rows + r } else { r * cols + c };
                    assert!((got[at] - want).abs() <= 1e-15 * want.abs().max(1.0), "{rows} x {cols}, transpose {transpose}, log {take_log}: ({r}, {c})");
                }
            }
        }
    }
}

/// The posteriors' layout on the device (one column-major matrix per
/// sequence, NaN as the value given) is the host's, bit for bit: one long
/// sequence (its tiles spread over blocks), a few with more than 32 states,
/// many short ones, and a batch that starts past the first sequence.
#[test]
fn columns_by_sequence_is_the_hosts_layout() {
    if !gpu_or_skip() {
        return;
    }
    let dev = &gpu::devices().expect("a device")[0];
    for (lens, n, first) in [(vec![100_003usize], 8usize, 0usize), (vec![5, 40_000, 70, 33], 33, 1), (vec![3; 5_000], 3, 0)] {
        let mut offsets = vec![0usize];
        for l in &lens {
            offsets.push(offsets.last().unwrap() + l);
        }
        let total = *offsets.last().unwrap();
        let rows: Vec<f64> = (0..total * n).map(|i| if i % 1_001 == 7 { f64::NAN } else { (i % 97) as f64 / 7.0 }).collect();
        // The batch of sequences first.., its rows from row offsets[first].
        let from = offsets[first];
        let batch: Vec<usize> = offsets[first..].iter().map(|o| o - from).collect();
        let mut want: Vec<Vec<f64>> = lens[first..].iter().map(|l| vec![0.0; l * n]).collect();
        let mut outs: Vec<&mut [f64]> = want.iter_mut().map(|x| &mut x[..]).collect();
        bulkem_core::hmm::layout::columns_by_sequence(&rows[from * n..], &batch, n, &mut outs, -1.0);
        let d_rows = dev.stream.clone_htod(&rows[from * n..]).expect("rows");
        let off: Vec<i64> = offsets.iter().map(|&o| o as i64).collect();
        let d_off = dev.stream.clone_htod(&off).expect("offsets");
        let mut d_out = dev.stream.alloc_zeros::<f64>(d_rows.len()).expect("output");
        dev.columns_by_sequence(&d_rows, &d_off, first, lens.len() - first, n, -1.0, &mut d_out).expect("layout");
        let got = dev.stream.clone_dtoh(&d_out).expect("copy back");
        let want: Vec<u64> = want.iter().flatten().map(|x| x.to_bits()).collect();
        assert!(got.iter().map(|x| x.to_bits()).eq(want.into_iter()), "{} sequences, N = {n}, from sequence {first}", lens.len());
    }
}

/// Uploads of every size queued one after another without waiting (the
/// staging ring places each after the pieces still crossing the bus),
/// then packed arrays: every value arrives, none is overwritten by a later
/// upload's fill.
#[test]
fn interleaved_uploads_and_packed_arrays_arrive_whole() {
    if !gpu_or_skip() {
        return;
    }
    let dev = &gpu::devices().expect("a device")[0];
    let s = &dev.stream;
    let lens = [3usize, 1 << 18, 17, (1 << 19) + 1, 5, 1 << 20, 1, 600_000, 2, (1 << 20) + 3, 9, 100];
    let sent: Vec<Vec<f64>> = lens.iter().enumerate().map(|(k, &n)| (0..n).map(|i| (k * 1_000_003 + i) as f64 * 0.5).collect()).collect();
    let copies: Vec<_> = sent.iter().map(|v| dev.upload_new(v).expect("upload")).collect();
    for (k, (v, d)) in sent.iter().zip(&copies).enumerate() {
        assert_eq!(&s.clone_dtoh(d).expect("copy back"), v, "upload {k} of {} values", v.len());
    }
    let (a, b, c): (Vec<i64>, Vec<i32>, Vec<u8>) = ((0..1001).map(|i| i * 3 - 7).collect(), vec![], (0..33).collect());
    let (buf, at) = dev.upload_packed([gpu::bytes_of(&a), gpu::bytes_of(&b), gpu::bytes_of(&c)]).expect("packed upload");
    let bytes = s.clone_dtoh(&buf).expect("copy back");
    let base = at[0];
    assert!(at.iter().all(|&p| p % 16 == 0) && at[0] < at[1] && at[1] < at[2]);
    let at = |k: usize| (at[k] - base) as usize;
    assert_eq!(&bytes[at(0)..at(0) + 8 * a.len()], gpu::bytes_of(&a));
    assert_eq!(&bytes[at(2)..at(2) + c.len()], &c[..]);
    let (zeros, at) = dev.alloc_zeros_packed([24, 0, 4096]).expect("scratch");
    assert_eq!(at.len(), 3);
    assert!(s.clone_dtoh(&zeros).expect("copy back").iter().all(|&x| x == 0));
}

/// Downloads in pieces (at least four, each copied out while the next
/// cross the bus) into one array and into several new ones laid end to
/// end, of lengths that cut the pieces anywhere, parts empty and parts
/// smaller than a piece included: every value comes back bit for bit, and
/// nothing past the values is written.
#[test]
fn downloads_in_pieces_and_into_parts_come_back_whole() {
    if !gpu_or_skip() {
        return;
    }
    let dev = &gpu::devices().expect("a device")[0];
    let s = &dev.stream;
    for lens in [[1usize, 0, 2], [512, 512 * 512, 512 * 512], [0, (1 << 20) + 7, 3], [5_000_001, 0, 0], [8191, 8193, 3 << 20]] {
        let total: usize = lens.iter().sum();
        let v: Vec<f64> = (0..total).map(|i| (i as f64 * 0.37).cos() * 1e-200f64.powf((i % 5) as f64 / 5.0)).collect();
        let d = s.clone_htod(&v).expect("copy");
        let mut whole = vec![0.25f64; total + 1];
        dev.download(&d.slice(..), &mut whole[..total]).expect("download");
        assert!(whole[..total].iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()), "download of {total}");
        assert_eq!(whole[total], 0.25, "a download wrote past its values");
        let parts = dev.download_new_parts(&d.slice(..), lens).expect("download into parts");
        assert_eq!(parts.each_ref().map(|p| p.len()), lens);
        let back: Vec<f64> = parts.concat();
        assert!(back.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()), "download into parts {lens:?}");
        let mut mine: Vec<Vec<f64>> = lens.iter().map(|&n| vec![0.5; n]).collect();
        let mut outs: Vec<&mut [f64]> = mine.iter_mut().map(|p| &mut p[..]).collect();
        dev.download_parts(&d.slice(..), &mut outs).expect("download into the caller's parts");
        assert!(mine.concat().iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()), "download into the caller's parts {lens:?}");
    }
    // Many small parts (a piece covers thousands), some empty, the source
    // longer than the parts.
    let lens: Vec<usize> = (0..100_000).map(|i| (i * 7919) % 13).collect();
    let total: usize = lens.iter().sum();
    let v: Vec<f64> = (0..total + 9).map(|i| i as f64 + 0.5).collect();
    let d = s.clone_htod(&v).expect("copy");
    let mut mine: Vec<Vec<f64>> = lens.iter().map(|&n| vec![-1.0; n]).collect();
    let mut outs: Vec<&mut [f64]> = mine.iter_mut().map(|p| &mut p[..]).collect();
    dev.download_parts(&d.slice(..), &mut outs).expect("download into many parts");
    assert_eq!(mine.concat(), v[..total], "download into 100,000 parts");
}

/// A float32 upload after uploads of odd byte lengths (symbols sent as
/// one byte each) starts aligned in the staging ring and arrives whole.
#[test]
fn float32_uploads_after_odd_lengths_arrive_whole() {
    if !gpu_or_skip() {
        return;
    }
    let dev = &gpu::devices().expect("a device")[0];
    let s = &dev.stream;
    for odd in [1usize, 3, 8191] {
        let v = values(odd, 16, false);
        let mut d = s.alloc_zeros::<u32>(odd).expect("device memory");
        dev.upload_small(&v, 16, &mut d.slice_mut(..)).expect("upload of one byte each");
        let w: Vec<f64> = (0..1001).map(|i| i as f64 * 0.25).collect();
        let f = dev.upload_parts_f32_new(&[&w[..500], &w[500..]]).expect("float32 upload").expect("every value a float32");
        let back = s.clone_dtoh(&f).expect("copy back");
        assert!(back.iter().zip(&w).all(|(&a, &b)| a as f64 == b), "after {odd} bytes");
        assert_eq!(s.clone_dtoh(&d).expect("copy back"), v);
    }
}

#[test]
fn memory_shares_cover_small_needs_and_read_large_ones_afresh() {
    if !gpu_or_skip() {
        return;
    }
    let dev = &gpu::devices().expect("a device")[0];
    let free = dev.free_memory().expect("free memory");
    assert!(free > 0 && free <= dev.info.total_memory + dev.info.total_memory / 4, "free {free} of {}", dev.info.total_memory);
    // A small need: a quarter of the share at the last reading, at least the need.
    let quarter = dev.memory_share(0.5, 1 << 20).expect("share");
    assert_eq!(quarter, (free as f64 * 0.5 * 0.25) as usize);
    // A need beyond that quarter: the share of a fresh reading, which an
    // allocation held meanwhile lowers.
    let held = dev.stream.alloc_zeros::<u8>(free / 8).expect("an eighth of the free memory");
    let share = dev.memory_share(0.5, quarter + 1).expect("share");
    assert!(share < (free as f64 * 0.5) as usize && share > (free as f64 * 0.5 * 0.8) as usize, "share {share} of free {free} with {} held", held.len());
    // The fresh reading is the new last one.
    let again = dev.memory_share(0.5, 1).expect("share");
    assert!(again.abs_diff((share as f64 * 0.25) as usize) <= 1, "{again} after a share of {share}");
}
