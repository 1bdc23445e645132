//! What lives on the device for a call: the sequences, the model's linear
//! and log tables, the Viterbi buffers of a batch; their uploads, and the
//! download of a model from its tables.

use std::ops::Range;

use cudarc::driver::CudaSlice;

use crate::error::Result;
use crate::gpu::Device;

use super::super::emission::Categorical;
use super::super::model::HmmModel;
use super::super::sequences::Sequences;
use super::batched::{vit_stride, Rows};
use super::launch::launch_table_mins;
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

/// The sequences with offsets `seqs` and observations `symbols` (below
/// `v`) on the device, the symbols sent as one or two bytes each where `v`
/// allows (`Device::upload_small`).
pub(super) fn upload(dev: &Device, seqs: &Sequences, symbols: &[u32], v: usize) -> Result<DeviceSeqs> {
    let s = &dev.stream;
    let off: Vec<i64> = seqs.offsets.iter().map(|&o| o as i64).collect();
    // Zeroed on the device and filled from the caller's symbols: a padded
    // copy on the host cost more than the forward pass (about 35 ms for
    // 10^7 symbols on the H100 machine).
    let n = seqs.total();
    if symbols.len() != n {
        return Err(crate::error::Error::Internal("sequences uploaded without their symbols".into()));
    }
    let mut sym = s.alloc_zeros::<u32>(n + SYM_PAD).map_err(err(dev, "copying sequences"))?;
    dev.upload_small(symbols, v as u64, &mut sym.slice_mut(0..n))?;
    let mut d_off = s.alloc_zeros::<i64>(off.len()).map_err(err(dev, "copying sequences"))?;
    dev.upload(&off, &mut d_off.slice_mut(..))?;
    Ok(DeviceSeqs { sym, off: d_off })
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

/// The model's tables on the device, their smallest probabilities found
/// there (`launch_table_mins`): a model at N = 512 has half a million
/// probabilities, which the host would scan before its copy could start.
/// The transposes are made on the device, from the model as the caller
/// holds it.
pub(super) fn upload_tables(dev: &Device, model: &HmmModel) -> Result<DeviceTables> {
    let (n, v) = (model.n_states, model.emission.n_symbols);
    let (start, trans, emis_raw) = (dev.upload_new(&model.start)?, dev.upload_new(&model.trans)?, dev.upload_new(&model.emission.probs)?);
    let mut mins = dev.stream.alloc_zeros::<u64>(2).map_err(err(dev, "copying the model"))?;
    launch_table_mins(dev, n, &start, &trans, &emis_raw, &mut mins)?;
    Ok(DeviceTables { trans_t: dev.layout(&trans, n, n, true, false)?, emis: dev.layout(&emis_raw, n, v, true, false)?, start, trans, mins })
}

/// [`upload_tables`] with the model's smallest probabilities known (the
/// caller needed them on the host).
pub(super) fn upload_tables_with(dev: &Device, model: &HmmModel, (a, e_min): (f64, f64)) -> Result<DeviceTables> {
    let (n, v) = (model.n_states, model.emission.n_symbols);
    let trans = dev.upload_new(&model.trans)?;
    Ok(DeviceTables {
        start: dev.upload_new(&model.start)?,
        trans_t: dev.layout(&trans, n, n, true, false)?,
        trans,
        emis: dev.upload_layout(&model.emission.probs, n, v, true, false)?,
        mins: dev.upload_new(&[min_key(a), min_key(e_min)])?,
    })
}

impl DeviceTables {
    /// Tables for an M-step to write (hmm_m_step writes every value, and
    /// clears the keys first).
    pub(super) fn alloc(dev: &Device, n: usize, v: usize) -> Result<Self> {
        let s = &dev.stream;
        let e = err(dev, "allocating the model");
        // SAFETY: read only after hmm_m_step has written them.
        unsafe {
            Ok(DeviceTables {
                start: s.alloc(n).map_err(&e)?,
                trans: s.alloc(n * n).map_err(&e)?,
                trans_t: s.alloc(n * n).map_err(&e)?,
                emis: s.alloc(n * v).map_err(&e)?,
                mins: s.alloc(2).map_err(&e)?,
            })
        }
    }
}

/// A model from its device tables: its three arrays gathered end to end
/// on the device (the emissions by state, as the host keeps them) and
/// downloaded in one transfer (three, each waited for, took 0.6-0.8 ms
/// for a 4 MB model at N = 512 on an H200, about 4x the bus's time).
pub(super) fn download_model(dev: &Device, t: &DeviceTables, n: usize, v: usize) -> Result<HmmModel> {
    let s = &dev.stream;
    let e = err(dev, "copying the model");
    // SAFETY: every value is written below (two copies and the layout)
    // before the download reads it.
    let mut all = unsafe { s.alloc::<f64>(n + n * n + n * v) }.map_err(&e)?;
    s.memcpy_dtod(&t.start, &mut all.slice_mut(0..n)).map_err(&e)?;
    s.memcpy_dtod(&t.trans, &mut all.slice_mut(n..n + n * n)).map_err(&e)?;
    dev.layout_into(&t.emis, v, n, true, false, &mut all.slice_mut(n + n * n..))?;
    let [start, trans, emis] = dev.download_new_parts(&all.slice(..), [n, n * n, n * v])?;
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
    let (n, v) = (model.n_states, model.emission.n_symbols);
    let start: Vec<f64> = model.start.iter().map(|p| p.ln()).collect();
    Ok(DeviceLogTables {
        start: dev.upload_new(&start)?,
        trans: dev.upload_layout(&model.trans, n, n, false, true)?,
        emis: dev.upload_layout(&model.emission.probs, n, v, true, true)?,
    })
}

/// What a Viterbi batch keeps to walk back: back-pointers, bytes for the
/// warp kernel (N <= 32) and 16-bit for the block kernel; or, for the
/// batched kernel (large N), every step's log vector (vit_stride(N)
/// doubles per symbol) and the batch's sorted rows.
pub(super) enum Back {
    Byte(CudaSlice<u8>),
    Short(CudaSlice<u16>),
    Logs(CudaSlice<f64>, Box<Rows>),
}

/// Device buffers of one Viterbi batch.
pub(super) struct ViterbiBuffers {
    pub(super) back: Back,
    pub(super) path: CudaSlice<u32>,
    pub(super) logp: CudaSlice<f64>,
}

/// The buffers of the Viterbi batch `range` of `seqs` for N states, for
/// the batched kernel where `batched` ([`super::plan::viterbi_batched`]).
pub(super) fn viterbi_buffers(dev: &Device, n: usize, batched: bool, seqs: &Sequences, range: &Range<usize>) -> Result<ViterbiBuffers> {
    let s = &dev.stream;
    let symbols = seqs.offsets[range.end] - seqs.offsets[range.start];
    // SAFETY (all): uninitialised on purpose; the kernels write every path
    // entry and log-probability, and read only back-pointers and log
    // vectors they wrote (every state of every step t >= 1; every entry of
    // every step).
    let back = if n <= WARP_MAX_STATES {
        Back::Byte(unsafe { s.alloc::<u8>(symbols * n) }.map_err(err(dev, "allocating back-pointers"))?)
    } else if batched {
        let vals = unsafe { s.alloc::<f64>(symbols * vit_stride(n)) }.map_err(err(dev, "allocating the Viterbi vectors"))?;
        Back::Logs(vals, Box::new(Rows::new(dev, seqs, range)?))
    } else {
        Back::Short(unsafe { s.alloc::<u16>(symbols * n) }.map_err(err(dev, "allocating back-pointers"))?)
    };
    Ok(ViterbiBuffers {
        back,
        path: unsafe { s.alloc::<u32>(symbols) }.map_err(err(dev, "allocating results"))?,
        logp: unsafe { s.alloc::<f64>(range.len()) }.map_err(err(dev, "allocating results"))?,
    })
}
