//! The shared-memory path: em_warp, one warp per (dataset, start), the
//! whole EM in one launch.

use std::ops::Range;

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, LaunchArgs, LaunchConfig, PushKernelArg};

use crate::error::{Error, Result};
use crate::gpu::{Device, Kernel};

use super::super::config::CheckedEmConfig;
use super::super::family::Family;
use super::pairs::{concatenate, gather, split_trace, starting_values, DatasetExtras, KernelWeights, Outputs, Pairs, Uploaded};
use super::{em_function, held_values, NULL, WARPS_PER_BLOCK};

/// Most pairs (starts of one dataset) in one block: its warps take them in
/// turn, so more pairs per block stage the dataset fewer times and let
/// warps whose start converged early take another.
const MAX_BLOCK_PAIRS: usize = 32;

/// Datasets on the device: the observations, the weights (None when
/// unweighted) and each dataset's total weight, and the layout. Every
/// dataset of a device's shared-memory path, uploaded once for all launches
/// (and all numbers of components) when it fits ([`upload_resident`]), or
/// a launch's own copy of its datasets.
pub(super) struct DeviceData {
    x: CudaSlice<f64>,
    w: Option<DeviceWeights>,
    totals: CudaSlice<f64>,
    offsets: CudaSlice<i64>,
    lengths: CudaSlice<i32>,
    centres: CudaSlice<f64>,
    /// The censored intervals and where each dataset's start (None unless
    /// the fit has censored data).
    cens: Option<(CudaSlice<f64>, CudaSlice<i64>)>,
}

/// Observation weights on the device, as the kernels read them
/// ([`KernelWeights`]).
pub(super) enum DeviceWeights {
    Double(CudaSlice<f64>),
    Float(CudaSlice<f32>),
}

impl DeviceWeights {
    /// How kernels read `w`.
    pub(super) fn kind(w: Option<&DeviceWeights>) -> KernelWeights {
        match w {
            None => KernelWeights::None,
            Some(DeviceWeights::Float(_)) => KernelWeights::Float,
            Some(DeviceWeights::Double(_)) => KernelWeights::Double,
        }
    }

    /// Push `w` as a kernel's `weights` argument (a null pointer when
    /// unweighted: only EM_WEIGHTED kernels read it).
    pub(super) fn push<'a>(w: Option<&'a DeviceWeights>, launch: &mut LaunchArgs<'a>) {
        match w {
            Some(DeviceWeights::Double(w)) => launch.arg(w),
            Some(DeviceWeights::Float(w)) => launch.arg(w),
            None => launch.arg(&NULL),
        };
    }
}

/// The weights of `up` on the device (None when unweighted): as float32s
/// when every one is a float32 exactly (found while converting them,
/// without a pass of its own), else as float64s; through `s` or, when
/// `staged`, the device's pinned staging buffer (its own stream).
pub(super) fn upload_weights(dev: &Device, s: &Arc<CudaStream>, up: &Uploaded, staged: bool) -> Result<Option<DeviceWeights>> {
    if up.w.is_empty() {
        return Ok(None);
    }
    let float = if staged {
        dev.upload_parts_f32_new(&up.w)?
    } else {
        crate::gpu::parts_as_f32(&up.w).map(|w| s.clone_htod(&w)).transpose().map_err(|err| dev.err("copying data", err))?
    };
    Ok(Some(match float {
        Some(w) => DeviceWeights::Float(w),
        None => DeviceWeights::Double(upload_parts(dev, s, &up.w, staged)?),
    }))
}

/// Upload every dataset of `data` once.
pub(super) fn upload_resident<'a>(dev: &Device, family: Family, data: &[&'a [f64]], extras: &'a DatasetExtras<'a>) -> Result<DeviceData> {
    let all: Vec<usize> = (0..data.len()).collect();
    let up = gather(family, data, extras, &all);
    upload(dev, &dev.stream, &up, true)
}

/// `parts` end to end on the device, through `s`, or through the device's
/// pinned staging buffer when `staged` (the device's own stream).
fn upload_parts(dev: &Device, s: &Arc<CudaStream>, parts: &[&[f64]], staged: bool) -> Result<CudaSlice<f64>> {
    match parts {
        _ if staged => dev.upload_parts_new(parts),
        [one] => s.clone_htod(*one).map_err(|err| dev.err("copying data", err)),
        _ => s.clone_htod(&concatenate(parts)).map_err(|err| dev.err("copying data", err)),
    }
}

/// The observations of `up` on the device (as [`upload_parts`]), without
/// the values the kernels leave out ([`Uploaded::skip`]), which are
/// dropped there.
pub(super) fn upload_values(dev: &Device, s: &Arc<CudaStream>, up: &Uploaded, staged: bool) -> Result<CudaSlice<f64>> {
    let full = upload_parts(dev, s, &up.x, staged)?;
    if up.skip_start.is_empty() {
        return Ok(full);
    }
    dev.compact_f64(if staged { &dev.stream } else { s }, &full, &up.full_offsets, &up.skip, &up.skip_start)
}

/// `up` on the device through `stream`; the observations through the
/// device's pinned staging buffer when `staged` (the device's own stream).
fn upload(dev: &Device, s: &Arc<CudaStream>, up: &Uploaded, staged: bool) -> Result<DeviceData> {
    let e = |err| dev.err("copying data", err);
    Ok(DeviceData {
        x: upload_values(dev, s, up, staged)?,
        w: upload_weights(dev, s, up, staged)?,
        totals: s.clone_htod(&up.totals).map_err(e)?,
        offsets: s.clone_htod(&up.offsets).map_err(e)?,
        lengths: s.clone_htod(&up.lengths).map_err(e)?,
        centres: s.clone_htod(&up.centres).map_err(e)?,
        cens: upload_censored(s, up).map_err(e)?,
    })
}

/// The censored intervals of `up` (one placeholder value when there are
/// none: no buffer is empty), or None when the fit has no censored data.
pub(super) fn upload_censored(s: &Arc<CudaStream>, up: &Uploaded) -> std::result::Result<Option<(CudaSlice<f64>, CudaSlice<i64>)>, cudarc::driver::DriverError> {
    if up.cens_start.is_empty() {
        return Ok(None);
    }
    let cens = if up.cens.is_empty() { s.clone_htod(&[0.0f64])? } else { s.clone_htod(&up.cens)? };
    Ok(Some((cens, s.clone_htod(&up.cens_start)?)))
}

/// A launch of em_warp prepared on the host (no device work yet). Its
/// datasets are uploaded with it, or already resident (`up` then empty and
/// blocks name datasets by their index in the device's data).
pub(super) struct WarpJob<'a> {
    up: Uploaded<'a>,
    max_n: usize,
    block_dataset: Vec<i32>,
    block_pair0: Vec<i32>,
    block_pairs: Vec<i32>,
    init: Vec<f64>,
    no_start: Vec<Option<String>>,
    n_pairs: usize,
}

/// `target_blocks`: blocks that fill the device; a block then holds between
/// WARPS_PER_BLOCK and MAX_BLOCK_PAIRS consecutive pairs of one dataset,
/// one fewer where its last warp computes the tails and takes no pair
/// (few blocks per dataset: its 7 working warps would take 8 pairs in
/// two rounds, which made small censored calls 1.5x their uncensored
/// time, BENCHMARKS.md).
#[allow(clippy::too_many_arguments)]
pub(super) fn prepare_warp<'a>(data: &[&'a [f64]], extras: &'a DatasetExtras<'a>, pairs: &Pairs, range: Range<usize>, first: usize, config: &'a CheckedEmConfig, resident: bool, target_blocks: usize) -> WarpJob<'a> {
    let (init, no_start) = starting_values(data, pairs, range.clone(), first, config);
    let datasets = &pairs.dataset[range.clone()];
    let (up, pair_dataset, max_n) = if resident {
        let max_n = datasets.iter().map(|&d| data[d].len()).max().unwrap_or(0);
        (Uploaded::empty(max_n), datasets.iter().map(|&d| d as i32).collect::<Vec<_>>(), max_n)
    } else {
        let up = gather(config.family, data, extras, datasets);
        let (pd, max_n) = (up.pair_dataset.clone(), up.max_n);
        (up, pd, max_n)
    };
    let per_block = range.len().div_ceil(target_blocks.max(1)).clamp(WARPS_PER_BLOCK, MAX_BLOCK_PAIRS) as i32;
    let working = (WARPS_PER_BLOCK - 1) as i32;
    let (mut block_dataset, mut block_pair0, mut block_pairs) = (vec![], vec![], vec![]);
    for (i, &d) in pair_dataset.iter().enumerate() {
        let tail_warp = per_block == WARPS_PER_BLOCK as i32 && extras.tail_warp(config.family, config.components, datasets[i]);
        let open = block_dataset.last() == Some(&d) && *block_pairs.last().unwrap_or(&0) < if tail_warp { working } else { per_block };
        if open {
            *block_pairs.last_mut().expect("open block") += 1;
        } else {
            block_dataset.push(d);
            block_pair0.push(i as i32);
            block_pairs.push(1);
        }
    }
    WarpJob { up, max_n, block_dataset, block_pair0, block_pairs, init, no_start, n_pairs: range.len() }
}

/// Device buffers of a launched em_warp, read back by [`collect_warp`]; its
/// inputs are kept until then, so nothing is freed under a running kernel.
pub(super) struct WarpInFlight {
    stream: Arc<CudaStream>,
    init: Vec<f64>,
    no_start: Vec<Option<String>>,
    _inputs: (Option<DeviceData>, [CudaSlice<i32>; 3], CudaSlice<f64>, Option<CudaSlice<f64>>),
    params: CudaSlice<f64>,
    loglik: CudaSlice<f64>,
    iterations: CudaSlice<i32>,
    status: CudaSlice<i32>,
    trace: Option<CudaSlice<f64>>,
}

/// Launches on `stream`; the datasets, when resident, were uploaded on the
/// device's stream (which `stream` waits for: `run_all`).
pub(super) fn launch_warp(dev: &Device, stream: &Arc<CudaStream>, job: WarpJob, config: &CheckedEmConfig, record_trace: bool, resident: Option<&DeviceData>) -> Result<WarpInFlight> {
    let nstat = 3 * config.components;
    let n_pairs = job.n_pairs;
    let s = stream;
    let e = |what: &str| { let what = what.to_string(); move |err| dev.err(&what, err) };
    let uploaded = match resident {
        Some(_) => None,
        None => Some(upload(dev, s, &job.up, false)?),
    };
    let d_bd = s.clone_htod(&job.block_dataset).map_err(e("copying data"))?;
    let d_bp0 = s.clone_htod(&job.block_pair0).map_err(e("copying data"))?;
    let d_bp = s.clone_htod(&job.block_pairs).map_err(e("copying data"))?;
    let d_init = s.clone_htod(&job.init).map_err(e("copying starts"))?;
    let d_held = held_values(config).map(|h| s.clone_htod(&h)).transpose().map_err(e("copying constraints"))?;
    let mut out = WarpInFlight {
        stream: stream.clone(),
        init: job.init,
        no_start: job.no_start,
        _inputs: (uploaded, [d_bd, d_bp0, d_bp], d_init, d_held),
        params: s.alloc_zeros::<f64>(n_pairs * nstat).map_err(e("allocating results"))?,
        loglik: s.alloc_zeros::<f64>(n_pairs).map_err(e("allocating results"))?,
        iterations: s.alloc_zeros::<i32>(n_pairs).map_err(e("allocating results"))?,
        status: s.alloc_zeros::<i32>(n_pairs).map_err(e("allocating results"))?,
        trace: None,
    };
    if record_trace {
        out.trace = Some(s.alloc_zeros::<f64>(n_pairs * config.max_iters).map_err(e("allocating the trace"))?);
    }
    let (max_iters, epsilon) = (config.max_iters as i32, config.epsilon);
    let inputs = &out._inputs;
    let on_device = match (resident, &inputs.0) {
        (Some(r), _) => r,
        (None, Some(u)) => u,
        (None, None) => return Err(Error::Internal("an em_warp launch without its data".into())),
    };
    let DeviceData { x, w, totals, offsets, lengths, centres, cens } = on_device;
    let weights = DeviceWeights::kind(w.as_ref());
    let smem = (super::shared_bytes_per_observation(config, weights != KernelWeights::None) * job.max_n) as u32;
    let f = em_function(dev, config, weights, Kernel::EmWarp)?;
    let cfg = LaunchConfig { grid_dim: (job.block_dataset.len() as u32, 1, 1), block_dim: (32 * WARPS_PER_BLOCK as u32, 1, 1), shared_mem_bytes: smem };
    let mut launch = s.launch_builder(&f);
    launch.arg(x);
    DeviceWeights::push(w.as_ref(), &mut launch);
    launch
        .arg(totals).arg(offsets).arg(lengths).arg(centres).arg(&inputs.1[0]).arg(&inputs.1[1]).arg(&inputs.1[2]).arg(&inputs.2)
        .arg(&mut out.params).arg(&mut out.loglik).arg(&mut out.iterations).arg(&mut out.status);
    match out.trace.as_mut() {
        Some(t) => launch.arg(t),
        None => launch.arg(&NULL),
    };
    launch.arg(&max_iters).arg(&epsilon);
    match &inputs.3 {
        Some(h) => launch.arg(h),
        None => launch.arg(&NULL),
    };
    match cens {
        Some((c, starts)) => launch.arg(c).arg(starts),
        None => launch.arg(&NULL).arg(&NULL),
    };
    // SAFETY: the arguments match em_warp's parameter list in kernels/em.cu
    // in order and type (a null pointer for the trace when none is kept, and
    // for the weights when unweighted: only EM_WEIGHTED kernels read them;
    // for the held values and the censored intervals when there are none:
    // only EM_CONSTRAINED and EM_CENSORED kernels read them);
    // every buffer holds the elements the kernel indexes (blocks, pairs x 3M
    // params, pairs x max_iters trace, the datasets' observations at their
    // offsets; resident data outlive every launch), and shared memory holds
    // max_n pairs of doubles (and of floats with EM_MIXED). The inputs live in `out` until the results
    // are read.
    unsafe { launch.launch(cfg) }.map_err(e("launching em_warp"))?;
    Ok(out)
}

pub(super) fn collect_warp(dev: &Device, out: WarpInFlight, config: &CheckedEmConfig) -> Result<Outputs> {
    let s = &out.stream;
    let e = |what: &str| { let what = what.to_string(); move |err| dev.err(&what, err) };
    let iterations = s.clone_dtoh(&out.iterations).map_err(e("reading results"))?;
    let trace = match &out.trace {
        Some(t) => split_trace(&s.clone_dtoh(t).map_err(e("reading the trace"))?, &iterations, config.max_iters),
        None => vec![],
    };
    Ok(Outputs {
        init: out.init,
        no_start: out.no_start,
        params: s.clone_dtoh(&out.params).map_err(e("reading results"))?,
        loglik: s.clone_dtoh(&out.loglik).map_err(e("reading results"))?,
        status: s.clone_dtoh(&out.status).map_err(e("reading results"))?,
        iterations,
        trace,
    })
}

#[cfg(test)]
mod tests {
    use super::{prepare_warp, Pairs};
    use crate::em::censored::Censoring;
    use crate::em::gpu::pairs::DatasetExtras;
    use crate::em::{EmConfig, Family};

    /// A block whose last warp computes the tails (few intervals of the
    /// gamma's iterating tails) takes one pair fewer when blocks are
    /// small, so its 7 working warps finish in one round; every other
    /// block keeps its pairs.
    #[test]
    fn blocks_with_a_tail_warp_take_one_pair_fewer() {
        let xs: Vec<Vec<f64>> = (0..4).map(|d| (1..=60).map(|i| 0.3 + ((i * (d + 3)) % 23) as f64 / 4.0).collect()).collect();
        let data: Vec<&[f64]> = xs.iter().map(|x| &x[..]).collect();
        let censor = |count: usize| Censoring { index: (0..count).collect(), lower: xs[0][..count].to_vec(), upper: vec![f64::INFINITY; count] };
        // Pooled (1 and 4 intervals x 2 components <= 8), too many to pool (5), none.
        let censoring = vec![censor(1), censor(4), censor(5), Censoring::default()];
        let layout = |family: Family, target_blocks: usize| {
            let config = EmConfig::new(family, 2).random_inits(10).censoring(censoring.clone()).check().unwrap();
            let extras = DatasetExtras::new(&data, 0, &config, None);
            let mut pairs = Pairs::default();
            pairs.extend(0, &[0, 1, 2, 3], 10).unwrap();
            let job = prepare_warp(&data, &extras, &pairs, 0..pairs.len(), 0, &config, false, target_blocks);
            assert_eq!(job.block_pairs.iter().sum::<i32>() as usize, pairs.len());
            (job.block_dataset, job.block_pairs)
        };
        assert_eq!(layout(Family::Gamma, 1000), (vec![0, 0, 1, 1, 2, 2, 3, 3], vec![7, 3, 7, 3, 8, 2, 8, 2]));
        assert_eq!(layout(Family::Poisson, 1000).1, vec![7, 3, 7, 3, 8, 2, 8, 2]);
        // Closed-form tails: no tail warp.
        assert_eq!(layout(Family::InvGauss, 1000).1, vec![8, 2, 8, 2, 8, 2, 8, 2]);
        // Larger blocks (few targets) are left as they are.
        assert_eq!(layout(Family::Gamma, 2), (vec![0, 1, 2, 3], vec![10; 4]));
    }
}
