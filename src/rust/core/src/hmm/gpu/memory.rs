//! What lives on the device for a call: the sequences, the model's linear
//! and log tables, the Viterbi buffers of a batch; their uploads, and the
//! download of a model from its tables.

use cudarc::driver::CudaSlice;

use crate::error::Result;
use crate::gpu::Device;

use super::super::emission::Categorical;
use super::super::model::HmmModel;
use super::super::sequences::Sequences;
use super::super::tables::{self, LogTables};
use super::{err, WARP_MAX_STATES};

/// The sequences on the device.
pub(super) struct DeviceSeqs {
    pub(super) sym: CudaSlice<u32>,
    pub(super) off: CudaSlice<i64>,
}

/// Symbols (0) after the last sequence: the warp kernels prefetch the
/// symbol up to three steps ahead without checking where the sequence ends
/// (HMM_SYM_PAD in kernels/hmm.cu).
pub(super) const SYM_PAD: usize = 3;

pub(super) fn upload(dev: &Device, seqs: &Sequences) -> Result<DeviceSeqs> {
    let s = &dev.stream;
    let off: Vec<i64> = seqs.offsets.iter().map(|&o| o as i64).collect();
    // Zeroed on the device and filled from the caller's symbols: a padded
    // copy on the host cost more than the forward pass (about 35 ms for
    // 10^7 symbols on the H100 machine).
    let n = seqs.symbols.len();
    let mut sym = s.alloc_zeros::<u32>(n + SYM_PAD).map_err(err(dev, "copying sequences"))?;
    s.memcpy_htod(&seqs.symbols[..], &mut sym.slice_mut(0..n)).map_err(err(dev, "copying sequences"))?;
    Ok(DeviceSeqs {
        sym,
        off: s.clone_htod(&off[..]).map_err(err(dev, "copying sequences"))?,
    })
}

/// The linear tables on the device: start, trans, trans_t, emis by symbol;
/// and the smallest positive start-or-transition and emission
/// probabilities, bit-inverted (kernels/hmm.cu, hmm_theta), from which the
/// forward kernels compute their certificate.
pub(super) struct DeviceTables {
    pub(super) start: CudaSlice<f64>,
    pub(super) trans: CudaSlice<f64>,
    pub(super) trans_t: CudaSlice<f64>,
    pub(super) emis: CudaSlice<f64>,
    pub(super) mins: CudaSlice<u64>,
}

/// A smallest probability as `mins` keeps it: bits inverted, 0 for none.
pub(super) fn min_key(p: f64) -> u64 {
    if p > 0.0 && p.is_finite() { !p.to_bits() } else { 0 }
}

/// The transpose of the row-major n x n matrix `a`.
pub(super) fn transposed(a: &[f64], n: usize) -> Vec<f64> {
    // In 32 x 32 tiles: row by row, the writes of a large matrix would
    // each touch another cache line (4 ms at N = 512 on a CPU core).
    const B: usize = 32;
    let mut t = vec![0.0; n * n];
    for i0 in (0..n).step_by(B) {
        for j0 in (0..n).step_by(B) {
            for i in i0..(i0 + B).min(n) {
                for j in j0..(j0 + B).min(n) {
                    t[j * n + i] = a[i * n + j];
                }
            }
        }
    }
    t
}

pub(super) fn upload_tables(dev: &Device, model: &HmmModel) -> Result<DeviceTables> {
    upload_tables_with(dev, model, tables::smallest(model))
}

/// [`upload_tables`] with the model's smallest probabilities known.
pub(super) fn upload_tables_with(dev: &Device, model: &HmmModel, (a, e_min): (f64, f64)) -> Result<DeviceTables> {
    let trans_t = transposed(&model.trans, model.n_states);
    let emis = model.emission.by_symbol()?;
    let s = &dev.stream;
    let e = err(dev, "copying the model");
    Ok(DeviceTables {
        start: s.clone_htod(&model.start[..]).map_err(&e)?,
        trans: s.clone_htod(&model.trans[..]).map_err(&e)?,
        trans_t: s.clone_htod(&trans_t[..]).map_err(&e)?,
        emis: s.clone_htod(&emis[..]).map_err(&e)?,
        mins: s.clone_htod(&[min_key(a), min_key(e_min)][..]).map_err(&e)?,
    })
}


/// A model from its device tables.
pub(super) fn download_model(dev: &Device, t: &DeviceTables, n: usize, v: usize) -> Result<HmmModel> {
    let s = &dev.stream;
    let e = err(dev, "reading the model");
    let start = s.clone_dtoh(&t.start).map_err(&e)?;
    let trans = s.clone_dtoh(&t.trans).map_err(&e)?;
    let by_symbol = s.clone_dtoh(&t.emis).map_err(&e)?;
    let mut emis = vec![0.0; n * v];
    for k in 0..v {
        for i in 0..n {
            emis[i * v + k] = by_symbol[k * n + i];
        }
    }
    Ok(HmmModel { n_states: n, start, trans, emission: Categorical { n_states: n, n_symbols: v, probs: emis } })
}

/// Log tables on the device for Viterbi: start, row-major transitions
/// (thread j reads ltrans[i * N + j], contiguous), emissions by symbol.
pub(super) struct DeviceLogTables {
    pub(super) start: CudaSlice<f64>,
    pub(super) trans: CudaSlice<f64>,
    pub(super) emis: CudaSlice<f64>,
}

pub(super) fn upload_log_tables(dev: &Device, model: &HmmModel) -> Result<DeviceLogTables> {
    let log = LogTables::new(model)?;
    let ltrans = transposed(&log.trans_t, model.n_states);
    let s = &dev.stream;
    let e = err(dev, "copying the model");
    Ok(DeviceLogTables { start: s.clone_htod(&log.start[..]).map_err(&e)?, trans: s.clone_htod(&ltrans[..]).map_err(&e)?, emis: s.clone_htod(log.rows.table()).map_err(&e)? })
}

/// Back-pointers of a Viterbi batch: bytes for the warp kernel (N <= 32),
/// 16-bit otherwise.
pub(super) enum Back {
    Byte(CudaSlice<u8>),
    Short(CudaSlice<u16>),
}

/// Device buffers of one Viterbi batch.
pub(super) struct ViterbiBuffers {
    pub(super) back: Back,
    pub(super) path: CudaSlice<u32>,
    pub(super) logp: CudaSlice<f64>,
}

pub(super) fn viterbi_buffers(dev: &Device, n: usize, symbols: usize, count: usize) -> Result<ViterbiBuffers> {
    let s = &dev.stream;
    // SAFETY (all three): uninitialised on purpose; the kernels write every
    // path entry and log-probability, and read only back-pointers they wrote
    // (every state of every step t >= 1).
    let back = if n <= WARP_MAX_STATES {
        Back::Byte(unsafe { s.alloc::<u8>(symbols * n) }.map_err(err(dev, "allocating back-pointers"))?)
    } else {
        Back::Short(unsafe { s.alloc::<u16>(symbols * n) }.map_err(err(dev, "allocating back-pointers"))?)
    };
    Ok(ViterbiBuffers {
        back,
        path: unsafe { s.alloc::<u32>(symbols) }.map_err(err(dev, "allocating results"))?,
        logp: unsafe { s.alloc::<f64>(count) }.map_err(err(dev, "allocating results"))?,
    })
}
