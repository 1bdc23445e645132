//! The passes on device-resident data, for `bulkem-bench hmm` (which times
//! them as peers time their kernels): the model and the sequences are
//! uploaded once and each pass is handed to the caller to run as often as
//! it likes. Not part of the library's API.

use crate::error::Result;
use crate::exec::Exec;

use super::super::baum_welch::Engine;
use super::super::model::HmmModel;
use super::super::sequences::Sequences;
use super::batched::{row_batches, Batched};
use super::engine::DeviceEngine;
use super::launch::{launch_forward, launch_viterbi};
use super::memory::{upload, upload_log_tables, upload_tables, viterbi_buffers};
use super::plan::{batches, check_size, loglik_batched, viterbi_batched, viterbi_bytes_per_symbol};
use super::{device, err};

/// A pass [`with_resident_passes`] hands to its caller.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResidentPass {
    /// The log-likelihood kernel(s) only, results left on the device; ends
    /// with a stream synchronisation.
    Forward,
    /// The Viterbi kernel(s), paths left on the device; ends with a stream
    /// synchronisation.
    Viterbi,
    /// One Baum-Welch iteration as a fit runs it: the M-step on the device,
    /// then the E-step (forward storing alphas, backward with counts,
    /// reduction) with the per-sequence log-likelihoods copied out.
    BaumWelch,
}

/// For benchmarks: uploads `model` and `seqs` once, then calls `run` with
/// each pass over them, in the order of [`ResidentPass`], as a closure that
/// `run` may call any number of times (each call runs the pass once, on
/// the data and scratch memory already on the device). Sizes and batches
/// are planned as `loglik`, `viterbi` and `fit` plan them.
#[doc(hidden)]
pub fn with_resident_passes(model: &HmmModel, seqs: &Sequences, mut run: impl FnMut(ResidentPass, &mut dyn FnMut() -> Result<()>) -> Result<()>) -> Result<()> {
    check_size(model.n_states, seqs.len())?;
    seqs.validate(model.emission.n_symbols)?;
    let dev = device()?;
    let s = &dev.stream;
    let n = model.n_states;
    let sync = || s.synchronize().map_err(err(dev, "waiting for the device"));
    let tables = upload_tables(dev, model)?;
    let d_seqs = upload(dev, seqs, &seqs.symbols, model.emission.n_symbols)?;
    let all = 0..seqs.len();
    if loglik_batched(dev, n, seqs.len()) {
        let ranges = row_batches(dev, seqs.len(), n)?;
        let mut bt = Batched::new(dev, n, model.emission.n_symbols, seqs, &ranges, None)?;
        let mut lls = Vec::with_capacity(ranges.len());
        for range in &ranges {
            lls.push(s.alloc_zeros::<f64>(range.len()).map_err(err(dev, "allocating results"))?);
        }
        sync()?;
        run(ResidentPass::Forward, &mut || {
            for (b, ll) in lls.iter_mut().enumerate() {
                bt.forward(dev, &tables, &d_seqs, b, None, ll)?;
            }
            sync()
        })?;
    } else {
        let mut ll = s.alloc_zeros::<f64>(seqs.len()).map_err(err(dev, "allocating results"))?;
        sync()?;
        run(ResidentPass::Forward, &mut || {
            launch_forward(dev, n, &tables, &d_seqs, &all, None, &mut ll, None)?;
            sync()
        })?;
    }
    let tabs = upload_log_tables(dev, model)?;
    let batched = viterbi_batched(dev, n, seqs.len());
    let ranges = batches(dev, seqs, viterbi_bytes_per_symbol(n, batched))?;
    let mut bufs = Vec::new();
    if ranges.len() == 1 {
        bufs.push(viterbi_buffers(dev, n, batched, seqs, &ranges[0])?);
    }
    run(ResidentPass::Viterbi, &mut || {
        for range in &ranges {
            if ranges.len() == 1 {
                launch_viterbi(dev, n, &tabs, &d_seqs, range, &mut bufs[0], None)?;
            } else {
                let mut buf = viterbi_buffers(dev, n, batched, seqs, range)?;
                launch_viterbi(dev, n, &tabs, &d_seqs, range, &mut buf, None)?;
            }
        }
        sync()
    })?;
    drop(bufs);
    let exec = Exec { backend: crate::exec::Backend::Cuda, ..Exec::cpu() };
    let mut engine = DeviceEngine::new(dev, n, model.emission.n_symbols, seqs, &seqs.symbols, &exec)?;
    engine.load(model)?;
    run(ResidentPass::BaumWelch, &mut || {
        engine.m_step(&Default::default())?;
        engine.e_step()?;
        Ok(())
    })
}
