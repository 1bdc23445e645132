//! Baum-Welch on the device (`DeviceEngine`, the `Engine` of a fit): the
//! model, the counts and the passes' scratch memory stay there for a whole
//! fit; the M-step runs there (`hmm_m_step`) unless the E-step left counts
//! on the host.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::error::Result;
use crate::exec::Exec;
use crate::gpu::{Device, Kernel};

use super::super::backward::Counts;
use super::super::baum_welch::{m_step as host_m_step, Engine};
use super::super::emission::{Categorical, EmissionFit};
use super::super::cpu;
use super::super::model::HmmModel;
use super::super::sequences::Sequences;
use super::super::tables::Tables;
use super::err;
use super::memory::{download_model, upload_tables, DeviceTables};
use super::passes::{CountSlots, Passes};
use super::shares::ShareEngine;

/// Baum-Welch on the device: the sequences, the model and the counts stay
/// there, and an iteration (E-step, reduction, M-step by hmm_m_step) moves
/// only per-sequence log-likelihoods to the host.
pub(super) struct DeviceEngine<'a> {
    passes: Passes<'a>,
    /// The current model and the previous one (or the M-step's
    /// destination), swapped by the M-step; None until first written.
    tables: [Option<DeviceTables>; 2],
    cur: usize,
    counts: CountSlots,
    exec: &'a Exec,
    /// The current model on the host, when known (after `load`, a host
    /// M-step or a download; the device M-step leaves it on the device).
    host_model: Option<HmmModel>,
    /// Counts of the last E-step computed on the host (the sequences the
    /// kernels could not certify), and whether the device holds the rest.
    host_counts: Option<(Counts, bool)>,
    /// Segment length of the host's E-step passes.
    seg: usize,
}

impl<'a> DeviceEngine<'a> {
    /// The engine of sequences `seqs` (offsets) with `symbols`.
    pub(super) fn new(dev: &'a Device, n: usize, v: usize, seqs: &'a Sequences, symbols: &'a [u32], exec: &'a Exec) -> Result<Self> {
        let passes = Passes::new(dev, n, v, seqs, symbols, true, 0)?;
        let counts = passes.count_slots()?;
        let seg = cpu::fit_segment(n, seqs, exec);
        Ok(DeviceEngine { passes, tables: [None, None], cur: 0, counts, exec, host_model: None, host_counts: None, seg })
    }

    /// The current model's tables (or the previous model's).
    fn tables(&self, previous: bool) -> Result<&DeviceTables> {
        let k = if previous { 1 - self.cur } else { self.cur };
        self.tables[k].as_ref().ok_or_else(|| crate::error::Error::Internal("an HMM engine used before its model was loaded".into()))
    }

    /// The device's share of the last E-step's counts, on the host.
    fn device_counts(&self) -> Result<Counts> {
        let (n, v) = (self.passes.n, self.passes.v);
        let total = self.passes.dev.stream.clone_dtoh(&self.counts.total).map_err(err(self.passes.dev, "reading the counts"))?;
        Ok(Counts { start: total[..n].to_vec(), trans_raw: total[n..n + n * n].to_vec(), trans: Vec::new(), emis: total[n + n * n..n + n * n + n * v].to_vec() })
    }
}

impl ShareEngine<Categorical> for DeviceEngine<'_> {
    fn counts(&self) -> Result<Counts> {
        match &self.host_counts {
            Some((host, with_device)) => {
                let mut c = host.clone();
                if *with_device {
                    c.add(&self.device_counts()?);
                }
                Ok(c)
            }
            None => self.device_counts(),
        }
    }
}

impl Engine for DeviceEngine<'_> {
    fn load(&mut self, model: &HmmModel) -> Result<(f64, Option<usize>)> {
        self.tables[self.cur] = Some(upload_tables(self.passes.dev, model)?);
        // Kept on the host, though the tables give it back exactly: without
        // this copy a single Baum-Welch step at N = 512 took 1.6 ms instead
        // of 2.1 on an H200, but a 5-iteration fit 7.9-8.9 ms instead of
        // 6.0-6.5, its final model's download going to fresh memory (0.7-0.9
        // ms against 0.25-0.35 into the blocks this copy had freed). The
        // tables are copied by all the call's threads (4 MB at N = 512).
        let copy = |v: &[f64]| crate::memory::try_copy_par(v, "a copy of the model");
        self.host_model = Some(HmmModel {
            n_states: model.n_states,
            start: model.start.clone(),
            trans: copy(&model.trans)?,
            emission: Categorical { n_states: model.emission.n_states, n_symbols: model.emission.n_symbols, probs: copy(&model.emission.probs)? },
        });
        self.e_step()
    }

    fn m_step(&mut self, fit: &EmissionFit) -> Result<Vec<bool>> {
        let pseudocount = fit.pseudocount;
        let unfloored = vec![false; self.passes.n];
        if let Some((host, with_device)) = self.host_counts.take() {
            // Some counts are on the host: the M-step runs there.
            let mut counts = host;
            if with_device {
                counts.add(&self.device_counts()?);
            }
            let model = match self.host_model.take() {
                Some(m) => m,
                None => self.model(false)?,
            };
            let (next, _) = host_m_step(&model, &counts, fit);
            self.tables[1 - self.cur] = Some(upload_tables(self.passes.dev, &next)?);
            self.cur = 1 - self.cur;
            self.host_model = Some(next);
            return Ok(unfloored);
        }
        let dev = self.passes.dev;
        let (n, v) = (self.passes.n, self.passes.v);
        if self.tables[1 - self.cur].is_none() {
            self.tables[1 - self.cur] = Some(DeviceTables::alloc(dev, n, v)?);
        }
        let [a, b] = &mut self.tables;
        let (from, to) = if self.cur == 0 { (a.as_ref(), b.as_mut()) } else { (b.as_ref(), a.as_mut()) };
        let (Some(from), Some(to)) = (from, to) else {
            return Err(crate::error::Error::Internal("an HMM engine's M-step before its model was loaded".into()));
        };
        let f = dev.function(Kernel::HmmMStep, &[])?;
        let cfg = LaunchConfig { grid_dim: (n as u32 + 1, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let (n_i, v_i) = (n as i32, v as i32);
        dev.stream.memset_zeros(&mut to.mins).map_err(err(dev, "clearing the smallest probabilities"))?;
        let mut launch = dev.stream.launch_builder(&f);
        launch.arg(&n_i).arg(&v_i).arg(&pseudocount).arg(&self.counts.total).arg(&from.start).arg(&from.trans).arg(&from.emis);
        let null: u64 = 0;
        launch.arg(&mut to.start).arg(&mut to.trans).arg(&mut to.trans_t).arg(&mut to.emis).arg(&mut to.mins).arg(&null);
        // SAFETY: the arguments match hmm_m_step's parameters in order and
        // type; counts.total holds N + N*N + V*N doubles from the last
        // E-step; both tables hold N, N*N, N*N and V*N doubles and two
        // keys (zeroed above); low_trans is null (not wanted); the block
        // has 256 threads (whole warps).
        unsafe { launch.launch(cfg) }.map_err(err(dev, "launching hmm_m_step"))?;
        self.cur = 1 - self.cur;
        // Known on the device only; downloaded if the host needs it.
        self.host_model = None;
        Ok(unfloored)
    }

    fn e_step(&mut self) -> Result<(f64, Option<usize>)> {
        let exec = self.exec;
        exec.monitor.check()?;
        let tables = self.tables[self.cur].as_ref().ok_or_else(|| crate::error::Error::Internal("an HMM engine's E-step before its model was loaded".into()))?;
        let t0 = std::time::Instant::now();
        let mut ll_all = self.passes.e_step(tables, &mut self.counts, &exec.monitor)?;
        crate::gpu::timing::record("engine e-step", t0);
        let uncertain: Vec<usize> = (0..ll_all.len()).filter(|&s| ll_all[s].is_nan()).collect();
        self.host_counts = None;
        if !uncertain.is_empty() {
            // Those sequences on the host, in log space, with the model.
            let model = match self.host_model.take() {
                Some(m) => m,
                None => self.model(false)?,
            };
            let tab = Tables::new(&model)?;
            let picked = Sequences::picked(self.passes.seqs, self.passes.symbols, &uncertain);
            let (host, lls) = cpu::counts_of(&tab, &picked, &(0..uncertain.len()).collect::<Vec<_>>(), self.seg, exec)?;
            for (s, l) in uncertain.iter().zip(lls) {
                ll_all[*s] = l;
            }
            self.host_counts = Some((host, true));
            self.host_model = Some(model);
        }
        let impossible = ll_all.iter().position(|&l| l == f64::NEG_INFINITY);
        Ok((ll_all.iter().sum(), impossible))
    }

    fn model(&self, previous: bool) -> Result<HmmModel> {
        let t0 = std::time::Instant::now();
        let m = download_model(self.passes.dev, self.tables(previous)?, self.passes.n, self.passes.v);
        crate::gpu::timing::record("engine model download", t0);
        m
    }
}
