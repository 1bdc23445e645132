//! hmm_*(): R values -> HmmModel / Sequences, results -> flat R vectors
//! (split and reshaped in R), but posteriors straight into one R matrix per
//! sequence (their size made R's reshaping the slowest part of a call). A
//! model's matrices cross as R holds them (column-major) and are laid out
//! row by row here, in the call's pool, unless the core kept the model from
//! an earlier call with the same values: a pass then runs on it at once,
//! the values compared beside it (`hmm::on_kept_model`). An emission crosses
//! as list(family = <name>, <parameters>...) ([`FromR`]); each entry point
//! dispatches once on the family ([`by_family!`]) to code generic over the
//! core's `Emission`. Every entry point checks the call's memory (the
//! core's estimate, with the copies the glue and R make of the result)
//! before converting anything.

use std::sync::Arc;

use bulkem_core::em::FitStatus;
use bulkem_core::exec::{Backend, Exec};
use bulkem_core::hmm::{self, CallShape, Categorical, Emission, EmissionKind, Gaussian, HmmFit, HmmFitConfig, HmmJob, HmmModel, Pass, Poisson, Sequences};
use extendr_api::prelude::*;
use extendr_api::Result;

use crate::session::{backend_for, input_error, r_error, run_in_session};

/// An emission as R passes it, and its observations.
trait FromR: Emission {
    /// The emission of `n_states` states from R's list (a density's number
    /// of states is its parameters'; HmmModel::with_emission checks it
    /// against `start`), a matrix laid out by `threads` threads.
    fn from_r(list: &List, n_states: usize, threads: i32) -> Result<Self>;
    /// The emission as R's list.
    fn to_r(&self) -> List;
    /// What `from_r` makes the emission from: R's double vectors in the
    /// list, and its shape as numbers (a model's key: `hmm::keep_model`).
    fn parameters(list: &List) -> Result<(Vec<Robj>, Vec<f64>)>;
    /// The fit's shape from R's emission list (the family and, for a
    /// categorical emission, V).
    fn shape_from_r(list: &List) -> Result<Self::Shape>;
    /// R's flat observations (checked by R; invalid values are still refused
    /// here or by the core), converted by `threads` threads where that
    /// pays.
    fn obs_from_r(obs: &Robj, threads: usize) -> Result<Vec<Self::Obs>>;
    fn obs_to_r(obs: &[Self::Obs]) -> Robj;
}

fn doubles(list: &List, name: &str) -> Result<Vec<f64>> {
    let v = list.dollar(name)?;
    Ok(v.as_real_slice().ok_or_else(|| Error::Other(format!("internal: emission${name} must be a double vector")))?.to_vec())
}

fn count_of(list: &List, name: &str) -> Result<usize> {
    let v = list.dollar(name)?;
    let x = v.as_real().or_else(|| v.as_integer().map(f64::from)).ok_or_else(|| Error::Other(format!("internal: emission${name} must be a number")))?;
    Ok(count(x))
}

/// `work` in the call's pool of `threads` threads (0: all): the layout and
/// checks of a model's tables, which take milliseconds on one thread at
/// 512 states. R's objects are read before, on R's thread.
fn in_pool<T: Send>(threads: i32, work: impl FnOnce() -> T + Send) -> T {
    Exec::cpu().threads(threads.max(0) as usize).within(work)
}

/// R's `rows` x `cols` matrix (column-major, as R holds it) row by row, as
/// the core takes it; as it is when not rows x cols long (the core then
/// refuses its length). Runs in the calling thread's pool.
fn rows_of(a: &[f64], rows: usize, cols: usize) -> bulkem_core::Result<Vec<f64>> {
    hmm::row_major(a, rows, cols).unwrap_or_else(|| Ok(a.to_vec()))
}

impl FromR for Categorical {
    /// `emis`: R's N x V matrix of probabilities.
    fn from_r(list: &List, n_states: usize, threads: i32) -> Result<Self> {
        let v = count_of(list, "V")?;
        let emis = list.dollar("emis")?;
        let emis = emis.as_real_slice().ok_or_else(|| internal("emission$emis must be a double matrix"))?;
        in_pool(threads, || Categorical::new(n_states, v, rows_of(emis, n_states, v)?)).map_err(r_error)
    }
    fn to_r(&self) -> List {
        list!(family = Self::NAME, emis = self.probs.clone(), V = self.n_symbols as i32)
    }
    fn parameters(list: &List) -> Result<(Vec<Robj>, Vec<f64>)> {
        Ok((vec![list.dollar("emis")?], vec![count_of(list, "V")? as f64]))
    }
    fn shape_from_r(list: &List) -> Result<usize> {
        count_of(list, "V")
    }
    fn obs_from_r(obs: &Robj, threads: usize) -> Result<Vec<u32>> {
        let codes = obs.as_integer_slice().ok_or_else(|| Error::Other("internal: symbols must be an integer vector".into()))?;
        hmm::zero_based(codes, &Exec::cpu().threads(threads)).ok_or_else(|| input_error("sequences have an invalid symbol; symbols are whole numbers from 1"))
    }
    fn obs_to_r(obs: &[u32]) -> Robj {
        Integers::from_values(obs.iter().map(|&k| Rint::from(k as i32 + 1))).into()
    }
}

/// R's flat observations as the core's vector, copied by the call's
/// `threads` threads (was one), which also take the page faults of its
/// fresh memory.
fn numbers_from_r(obs: &Robj, threads: usize) -> Result<Vec<f64>> {
    let x = obs.as_real_slice().ok_or_else(|| Error::Other("internal: observations must be a double vector".into()))?;
    let mut out = vec![0.0; x.len()];
    hmm::flatten_values(&[hmm::Codes::Doubles(x)], |_| true, &mut out, &Exec::cpu().threads(threads));
    Ok(out)
}

impl FromR for Gaussian {
    fn from_r(list: &List, _: usize, _: i32) -> Result<Self> {
        Gaussian::new(doubles(list, "mean")?, doubles(list, "sd")?).map_err(r_error)
    }
    fn to_r(&self) -> List {
        list!(family = Self::NAME, mean = self.mean.clone(), sd = self.sd.clone())
    }
    fn parameters(list: &List) -> Result<(Vec<Robj>, Vec<f64>)> {
        Ok((vec![list.dollar("mean")?, list.dollar("sd")?], Vec::new()))
    }
    fn shape_from_r(_: &List) -> Result<()> {
        Ok(())
    }
    fn obs_from_r(obs: &Robj, threads: usize) -> Result<Vec<f64>> {
        numbers_from_r(obs, threads)
    }
    fn obs_to_r(obs: &[f64]) -> Robj {
        obs.to_vec().into()
    }
}

impl FromR for Poisson {
    fn from_r(list: &List, _: usize, _: i32) -> Result<Self> {
        Poisson::new(doubles(list, "rate")?).map_err(r_error)
    }
    fn to_r(&self) -> List {
        list!(family = Self::NAME, rate = self.rate.clone())
    }
    fn parameters(list: &List) -> Result<(Vec<Robj>, Vec<f64>)> {
        Ok((vec![list.dollar("rate")?], Vec::new()))
    }
    fn shape_from_r(_: &List) -> Result<()> {
        Ok(())
    }
    fn obs_from_r(obs: &Robj, threads: usize) -> Result<Vec<f64>> {
        numbers_from_r(obs, threads)
    }
    fn obs_to_r(obs: &[f64]) -> Robj {
        obs.to_vec().into()
    }
}

/// The emission family R's list names.
fn kind_of(emission: &List) -> Result<EmissionKind> {
    let family = emission.dollar("family")?;
    let name = family.as_str().ok_or_else(|| Error::Other("internal: emission$family must be a string".into()))?;
    EmissionKind::from_name(name).ok_or_else(|| input_error(format!("unknown emission family '{name}'")))
}

/// `$f::<E>(args)` for the emission family of `$emission` (an R list).
macro_rules! by_family {
    ($emission:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match kind_of($emission)? {
            EmissionKind::Categorical => $f::<Categorical>($($arg),*),
            EmissionKind::Gaussian => $f::<Gaussian>($($arg),*),
            EmissionKind::Poisson => $f::<Poisson>($($arg),*),
        }
    };
}

/// The values R's model is keyed by (`hmm::keep_model`): start, the
/// transitions as R holds them, the emission's shape and its parameters
/// (R's vectors `params`).
fn model_key<'a>(start: &'a [f64], trans: &'a [f64], shape: &'a [f64], params: &'a [Robj]) -> Result<Vec<&'a [f64]>> {
    let mut tables = vec![start, trans, shape];
    for p in params {
        tables.push(p.as_real_slice().ok_or_else(|| internal("an emission parameter must be a double vector"))?);
    }
    Ok(tables)
}

/// The model from R's start vector, transition matrix (N x N, as R holds
/// it) and emission list, its matrices laid out by `threads` threads; or
/// the one an earlier call made from the same values (`hmm::keep_model`:
/// R passes the same model call after call, and its layout, checks and
/// copy to the device cost more than a pass at 512 states).
fn model<E: FromR>(start: &[f64], trans: &[f64], emission: &List, threads: i32) -> Result<Arc<HmmModel<E>>> {
    let (params, shape) = E::parameters(emission)?;
    let tables = model_key(start, trans, &shape, &params)?;
    if let Some(m) = in_pool(threads, || hmm::find_kept_model::<E>(&tables)) {
        return Ok(m);
    }
    made_model(start, trans, emission, &tables, threads)
}

/// The model made from R's values (laid out and checked by `threads`
/// threads) and kept under their key `tables` ([`model_key`]).
fn made_model<E: FromR>(start: &[f64], trans: &[f64], emission: &List, tables: &[&[f64]], threads: i32) -> Result<Arc<HmmModel<E>>> {
    let e = E::from_r(emission, start.len(), threads)?;
    let m = in_pool(threads, || HmmModel::with_emission(start.to_vec(), rows_of(trans, start.len(), start.len())?, e)).map_err(r_error)?;
    Ok(in_pool(threads, || hmm::keep_model(tables, m)))
}

/// `pass` of R's model on `backend`, run as [`run_in_session`] runs a
/// call: on the model an earlier call kept for the same values, in one
/// hand-off to the call's pool, the values compared beside the pass
/// (`hmm::on_kept_model`); else on the model made from R's and kept
/// ([`made_model`]: no other kept model can match, as one whose values all
/// match also matches `on_kept_model`'s sample), in a second.
fn on_model<E: FromR, T: Send>(start: &[f64], trans: &[f64], emission: &List, threads: i32, backend: Backend, mut pass: impl FnMut(&HmmModel<E>, &Exec) -> T + Send) -> Result<T> {
    let (params, shape) = E::parameters(emission)?;
    let tables = model_key(start, trans, &shape, &params)?;
    let threads_used = threads.max(0) as usize;
    if let Some(out) = run_in_session(backend, threads_used, |exec| hmm::on_kept_model(&tables, exec, |m| pass(m, exec))) {
        return Ok(out);
    }
    let m = made_model::<E>(start, trans, emission, &tables, threads)?;
    Ok(run_in_session(backend, threads_used, |exec| pass(&m, exec)))
}

/// Flat observations and the sequence lengths -> Sequences.
fn sequences<E: FromR>(obs: &Robj, lengths: &[i32], threads: i32) -> Result<Sequences<E::Obs>> {
    let lengths: Vec<usize> = lengths.iter().map(|&l| l.max(0) as usize).collect();
    Sequences::from_lengths(E::obs_from_r(obs, threads.max(0) as usize)?, &lengths).map_err(|_| Error::Other("internal: sequence lengths do not add up to the number of observations".into()))
}

/// The backend of an HMM call of `forward` forward and `e_steps`
/// forward-backward passes over `seqs` with `n_states` states on `threads`
/// CPU threads: the core's one choice from `request`.
fn backend_of<O: Copy>(request: &str, n_states: usize, seqs: &Sequences<O>, (forward, e_steps): (usize, usize), threads: i32) -> Result<Backend> {
    backend_for(request, &hmm::job(&CallShape::of(n_states, seqs, threads.max(0) as usize).passes(forward, e_steps)))
}

/// Copies of each pass's result beyond the core's own: the glue's R vector,
/// and R's (chunks bound, NaN replaced, split into sequences or matrices).
fn result_copies(pass: Pass) -> usize {
    match pass {
        Pass::Loglik => 2,
        // Posteriors are written once, into R's matrices (`posterior`).
        Pass::Posterior => 1,
        Pass::Viterbi | Pass::Simulate => 3,
        Pass::Fit => 2,
    }
}

/// The memory check of a call over sequences of `lengths`.
fn ensure(pass: Pass, n_states: usize, n_stats: usize, lengths: impl Iterator<Item = usize>, threads: i32, starts: usize) -> Result<()> {
    HmmJob::new(pass, n_states, n_stats, lengths, threads.max(0) as usize).starts(starts).copies(result_copies(pass)).ensure().map_err(r_error)
}

fn lengths_of(lengths: &[i32]) -> impl Iterator<Item = usize> + '_ {
    lengths.iter().map(|&l| l.max(0) as usize)
}

fn pass_named(name: &str) -> Result<Pass> {
    Ok(match name {
        "loglik" => Pass::Loglik,
        "viterbi" => Pass::Viterbi,
        "posterior" => Pass::Posterior,
        "fit" => Pass::Fit,
        "simulate" => Pass::Simulate,
        other => return Err(Error::Other(format!("internal: unknown HMM pass '{other}'"))),
    })
}

/// A size R passes as a double (may exceed an integer), as a count.
fn count(x: f64) -> usize {
    if x.is_finite() && x > 0.0 { x.min(usize::MAX as f64) as usize } else { 0 }
}

/// The statistics per state of an emission list (for memory estimates).
fn n_stats(emission: &List) -> Result<usize> {
    let kind = kind_of(emission)?;
    let v = if kind == EmissionKind::Categorical { count_of(emission, "V")? } else { 0 };
    Ok(kind.n_stats(v))
}

/// The memory check of an HMM call before R builds anything for it:
/// `n_seqs` sequences of `lengths` (one value: recycled), `copies` of the
/// result on top of the core's own; `emission` is R's emission list (only
/// its family and V are read). NULL, or a memory error.
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_memory_(pass: &str, n_states: f64, emission: List, n_seqs: f64, lengths: &[f64], threads: i32, starts: f64, copies: i32) -> Result<()> {
    let pass = pass_named(pass)?;
    let (n_seqs, s) = (count(n_seqs), n_stats(&emission)?);
    let job = match lengths {
        [one] => HmmJob::uniform(pass, count(n_states), s, n_seqs, count(*one), threads.max(0) as usize),
        many => HmmJob::new(pass, count(n_states), s, many.iter().map(|&l| count(l)), threads.max(0) as usize),
    };
    job.starts(count(starts).max(1))
        .copies(copies.max(0) as usize)
        .ensure()
        .map_err(r_error)
}

/// The sequences of a pass, after its memory check, and its backend.
fn prepare<E: FromR>(pass: Pass, start: &[f64], emission: &List, obs: &Robj, lengths: &[i32], threads: i32, backend: &str) -> Result<(Sequences<E::Obs>, Backend)> {
    ensure(pass, start.len(), n_stats(emission)?, lengths_of(lengths), threads, 1)?;
    let seqs = sequences::<E>(obs, lengths, threads)?;
    let passes = if pass == Pass::Posterior { (0, 1) } else { (1, 0) };
    let backend = backend_of(backend, start.len(), &seqs, passes, threads)?;
    Ok((seqs, backend))
}

fn loglik<E: FromR>(start: &[f64], trans: &[f64], emission: &List, obs: &Robj, lengths: &[i32], threads: i32, backend: &str) -> Result<Vec<f64>> {
    let (seqs, backend) = prepare::<E>(Pass::Loglik, start, emission, obs, lengths, threads, backend)?;
    on_model::<E, _>(start, trans, emission, threads, backend, |m, exec| hmm::loglik(m, &seqs, exec))?.map_err(r_error)
}

/// Viterbi paths as R returns them: one integer vector of 1-based states
/// per sequence (NA throughout an impossible one), or with `simplify` one
/// T x M integer matrix of them (sequences of one length T; `dimnames`
/// unless NULL), allocated here on R's thread and filled by the call's
/// threads (`hmm::viterbi_into`).
#[allow(clippy::too_many_arguments)]
fn viterbi<E: FromR>(start: &[f64], trans: &[f64], emission: &List, obs: &Robj, lengths: &[i32], threads: i32, backend: &str, simplify: bool, dimnames: &Robj) -> Result<List> {
    let (seqs, backend) = prepare::<E>(Pass::Viterbi, start, emission, obs, lengths, threads, backend)?;
    let run = |outs: &mut [&mut [i32]]| on_model::<E, _>(start, trans, emission, threads, backend, |m, exec| hmm::viterbi_into(m, &seqs, exec, outs, <i32 as CanBeNA>::na()))?.map_err(r_error);
    if simplify {
        let mut path = Robj::alloc_vector(extendr_api::rtype_to_sxp(Rtype::Integers), seqs.total());
        let all = path.as_integer_slice_mut().ok_or_else(|| internal("the Viterbi paths are not an integer vector"))?;
        let log_prob = run(&mut hmm::layout::per_sequence(all, &seqs.offsets, 1))?;
        let dim = [equal_length(&seqs.offsets)? as i32, seqs.len() as i32];
        path.set_attrib("dim", dim.to_vec())?;
        if !dimnames.is_null() {
            path.set_attrib("dimnames", dimnames.clone())?;
        }
        return Ok(list!(path = path, log_prob = log_prob));
    }
    let mut paths: Vec<Robj> = seqs.offsets.windows(2).map(|w| Robj::alloc_vector(extendr_api::rtype_to_sxp(Rtype::Integers), w[1] - w[0])).collect();
    let mut outs: Vec<&mut [i32]> = paths.iter_mut().map(|x| x.as_integer_slice_mut().ok_or_else(|| internal("a Viterbi path is not an integer vector"))).collect::<Result<_>>()?;
    let log_prob = run(&mut outs)?;
    drop(outs);
    Ok(list!(path = List::from_values(paths), log_prob = log_prob))
}

/// Posteriors as R returns them: one T x N matrix per sequence (with
/// `dimnames`, unless NULL), or with `simplify` one T x N x M array of
/// them (sequences of one length T; `dimnames` of its three dimensions
/// unless NULL, and the log-likelihoods as its attribute `loglik`, named
/// as its third dimension: R would copy the array to set them),
/// allocated here on R's thread and filled by the call's threads
/// (`hmm::posterior_into`).
#[allow(clippy::too_many_arguments)]
fn posterior<E: FromR>(start: &[f64], trans: &[f64], emission: &List, obs: &Robj, lengths: &[i32], threads: i32, backend: &str, dimnames: &Robj, simplify: bool) -> Result<List> {
    let (seqs, backend) = prepare::<E>(Pass::Posterior, start, emission, obs, lengths, threads, backend)?;
    let n = start.len();
    let run = |outs: &mut [&mut [f64]]| on_model::<E, _>(start, trans, emission, threads, backend, |m, exec| hmm::posterior_into(m, &seqs, exec, outs, <f64 as CanBeNA>::na()))?.map_err(r_error);
    if simplify {
        let mut probs = Robj::alloc_vector(extendr_api::rtype_to_sxp(Rtype::Doubles), seqs.total() * n);
        let all = probs.as_real_slice_mut().ok_or_else(|| internal("the posterior array is not a double vector"))?;
        let loglik = run(&mut hmm::layout::per_sequence(all, &seqs.offsets, n))?;
        let dim = [equal_length(&seqs.offsets)? as i32, n as i32, seqs.len() as i32];
        probs.set_attrib("dim", dim.to_vec())?;
        let mut ll = Robj::from(loglik.clone());
        if !dimnames.is_null() {
            probs.set_attrib("dimnames", dimnames.clone())?;
            let names = List::try_from(dimnames.clone())?.elt(2)?;
            if !names.is_null() {
                ll.set_attrib("names", names)?;
            }
        }
        probs.set_attrib("loglik", ll)?;
        return Ok(list!(probs = probs, loglik = loglik));
    }
    let mut matrices: Vec<Robj> = seqs.offsets.windows(2).map(|w| Robj::alloc_matrix(extendr_api::rtype_to_sxp(Rtype::Doubles), (w[1] - w[0]) as i32, n as i32)).collect();
    let mut outs: Vec<&mut [f64]> = matrices.iter_mut().map(|x| x.as_real_slice_mut().ok_or_else(|| internal("a posterior matrix is not a double vector"))).collect::<Result<_>>()?;
    let loglik = run(&mut outs)?;
    drop(outs);
    if !dimnames.is_null() {
        for x in &mut matrices {
            x.set_attrib("dimnames", dimnames.clone())?;
        }
    }
    Ok(list!(probs = List::from_values(matrices), loglik = loglik))
}

fn internal(what: &str) -> Error {
    Error::Other(format!("internal: {what}"))
}

/// The one length of all sequences (0 for none), for a result with a
/// dimension per time step; R checked that there is one.
fn equal_length(offsets: &[usize]) -> Result<usize> {
    let t = offsets.get(1).copied().unwrap_or(0);
    if offsets.windows(2).any(|w| w[1] - w[0] != t) {
        return Err(internal("simplify = TRUE with sequences of several lengths"));
    }
    Ok(t)
}

/// log P(sequence) per sequence. `obs`: integer symbol codes (categorical)
/// or doubles; `emission`: R's emission list.
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_loglik_(start: &[f64], trans: &[f64], emission: List, obs: Robj, lengths: &[i32], threads: i32, backend: &str) -> Result<Vec<f64>> {
    by_family!(&emission, loglik(start, trans, &emission, &obs, lengths, threads, backend))
}

/// Viterbi: list(path = one integer vector of 1-based states per sequence,
/// NA for impossible sequences, or with `simplify` one T x M matrix of them
/// with `dimnames` unless NULL; log_prob).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_viterbi_(start: &[f64], trans: &[f64], emission: List, obs: Robj, lengths: &[i32], threads: i32, backend: &str, simplify: bool, dimnames: Robj) -> Result<List> {
    by_family!(&emission, viterbi(start, trans, &emission, &obs, lengths, threads, backend, simplify, &dimnames))
}

/// Posteriors: list(probs = one T x N matrix per sequence, NA rows for an
/// impossible sequence, with `dimnames` unless NULL, or with `simplify` one
/// T x N x M array of them with `dimnames` unless NULL and attribute
/// `loglik`; loglik).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_posterior_(start: &[f64], trans: &[f64], emission: List, obs: Robj, lengths: &[i32], threads: i32, backend: &str, dimnames: Robj, simplify: bool) -> Result<List> {
    by_family!(&emission, posterior(start, trans, &emission, &obs, lengths, threads, backend, &dimnames, simplify))
}

fn model_list<E: FromR>(m: &HmmModel<E>) -> List {
    list!(start = m.start.clone(), trans = m.trans.clone(), emission = m.emission.to_r())
}

/// The settings of hmm_fit_() besides the data and the emission.
struct FitArgs {
    n_states: usize,
    max_iters: usize,
    epsilon: f64,
    random_inits: usize,
    pseudocount: f64,
    var_floor: Option<f64>,
    seed: u64,
    first_start: usize,
    threads: i32,
}

fn fit<E: FromR>(obs: &Robj, lengths: &[i32], emission: &List, init: &Robj, a: &FitArgs, backend: &str) -> Result<List> {
    let starts = if init.is_null() { a.random_inits } else { 1 };
    ensure(Pass::Fit, a.n_states, n_stats(emission)?, lengths_of(lengths), a.threads, starts)?;
    let seqs = sequences::<E>(obs, lengths, a.threads)?;
    let mut config = HmmFitConfig::<E>::for_emission(a.n_states, E::shape_from_r(emission)?)
        .max_iters(a.max_iters)
        .epsilon(a.epsilon)
        .random_inits(a.random_inits)
        .pseudocount(a.pseudocount)
        .var_floor(a.var_floor)
        .seed(a.seed)
        .first_start(a.first_start);
    if !init.is_null() {
        let list = init.as_list().ok_or_else(|| Error::Other("internal: init must be a list".into()))?;
        let get = |name: &str| doubles(&list, name);
        let e = list.dollar("emission")?.as_list().ok_or_else(|| Error::Other("internal: init$emission must be a list".into()))?;
        let m = E::from_r(&e, a.n_states, a.threads)
            .and_then(|e| {
                let (start, trans) = (get("start")?, get("trans")?);
                in_pool(a.threads, || HmmModel::with_emission(start, rows_of(&trans, a.n_states, a.n_states)?, e)).map_err(r_error)
            })
            .map_err(|e| input_error(e.to_string().replacen('`', "`init$", 1)))?;
        config = config.init(m);
    }
    let config = config.check().map_err(r_error)?;
    let passes = (0, config.max_iters * starts);
    let fit: HmmFit<E> = run_in_session(backend_of(backend, config.n_states, &seqs, passes, a.threads)?, a.threads.max(0) as usize, |exec| hmm::fit(&seqs, &config, exec)).map_err(r_error)?;
    Ok(list!(
        model = model_list(&fit.model),
        init = model_list(&fit.init),
        loglik = fit.loglik,
        trace = fit.trace,
        iterations = fit.iterations as i32,
        status = fit.status.name(),
        converged = fit.status == FitStatus::Converged,
        message = fit.message.unwrap_or_default(),
        start_logliks = fit.start_logliks,
        best_start = fit.best_start as i32 + 1,
        floored = fit.floored
    ))
}

/// Baum-Welch over all sequences. `emission`: list(family, V) (V for a
/// categorical fit); `init` is NULL or list(start, trans, emission)
/// (row-major); `var_floor` NaN for the default (extendr refuses NA for
/// an f64). `first_start`: 0-based
/// global index of the first random start (R splits the starts of one fit
/// over future workers).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_fit_(
    obs: Robj,
    lengths: &[i32],
    n_states: i32,
    emission: List,
    init: Robj,
    max_iters: i32,
    epsilon: f64,
    random_inits: i32,
    pseudocount: f64,
    var_floor: f64,
    seed: f64,
    first_start: i32,
    threads: i32,
    backend: &str,
) -> Result<List> {
    let args = FitArgs {
        n_states: n_states.max(0) as usize,
        max_iters: max_iters.max(0) as usize,
        epsilon,
        random_inits: random_inits.max(0) as usize,
        pseudocount,
        var_floor: (!var_floor.is_nan()).then_some(var_floor),
        seed: seed as u64,
        first_start: first_start.max(0) as usize,
        threads,
    };
    by_family!(&emission, fit(&obs, lengths, &emission, &init, &args, backend))
}

fn simulate<E: FromR>(start: &[f64], trans: &[f64], emission: &List, lengths: &[i32], seed: f64) -> Result<List> {
    ensure(Pass::Simulate, start.len(), n_stats(emission)?, lengths_of(lengths), 0, 1)?;
    let m = model::<E>(start, trans, emission, 0)?;
    let lengths: Vec<usize> = lengths_of(lengths).collect();
    // Every core (simulation is cheap; its time is the memory it fills).
    let (seqs, states) = run_in_session(Backend::Cpu, 0, |exec| hmm::simulate_with(&m, &lengths, seed as u64, exec)).map_err(r_error)?;
    let obs = E::obs_to_r(&seqs.symbols);
    drop(seqs);
    let states = Integers::from_values(states.iter().map(|&s| Rint::from(s as i32 + 1)));
    Ok(list!(obs = obs, states = states))
}

/// Simulate: list(obs, states), flat; symbols and states 1-based.
/// @noRd
#[extendr]
fn hmm_simulate_(start: &[f64], trans: &[f64], emission: List, lengths: &[i32], seed: f64) -> Result<List> {
    by_family!(&emission, simulate(start, trans, &emission, lengths, seed))
}

/// The categorical sequences `seqs` (a list of integer or double vectors of
/// symbol codes) as one integer vector, checked by the call's threads:
/// every value a whole number from 1 to `n_symbols` (0: no bound). NULL
/// when a sequence is not a plain, non-empty integer or double vector (a
/// factor or any other class, a matrix) or a value fails: R then finds the
/// first problem and says where (check_seqs()), so this path only makes
/// the common, valid case fast (R's unlist() and whole-vector tests took
/// 0.1 s per 10^7 symbols, its per-sequence type tests 0.15 s per 10^5
/// sequences).
/// @noRd
#[extendr]
fn hmm_symbol_codes_(seqs: List, n_symbols: f64, threads: i32) -> Result<Robj> {
    let Some(parts) = plain_parts(&seqs) else { return Ok(Robj::from(())) };
    let total: usize = parts.iter().map(hmm::Codes::len).sum();
    let max_code = if n_symbols.is_nan() || n_symbols < 1.0 { i32::MAX } else { n_symbols.min(i32::MAX as f64) as i32 };
    let mut out = Robj::alloc_vector(extendr_api::rtype_to_sxp(Rtype::Integers), total);
    let slice = out.as_integer_slice_mut().ok_or_else(|| Error::Other("internal: codes are not an integer vector".into()))?;
    let ok = hmm::flatten_codes(&parts, max_code, slice, &Exec::cpu().threads(threads.max(0) as usize));
    Ok(if ok { out } else { Robj::from(()) })
}

/// The observations `seqs` of a density emission (a list of integer or
/// double vectors) as one double vector, copied and checked by the call's
/// threads against the emission `family` (finite numbers, counts). NULL
/// when a sequence is not a plain, non-empty integer or double vector, an
/// integer one holds NA, or a value fails: R then says which
/// (check_numeric_seqs()). R's own whole-vector tests of the flat vector
/// (anyNA(), min(), max(): one thread each) took 0.07 s per 2 x 10^7
/// observations here.
/// @noRd
#[extendr]
fn hmm_numeric_obs_(seqs: List, family: &str, threads: i32) -> Result<Robj> {
    match EmissionKind::from_name(family) {
        Some(EmissionKind::Gaussian) => numeric_obs::<Gaussian>(&seqs, threads),
        Some(EmissionKind::Poisson) => numeric_obs::<Poisson>(&seqs, threads),
        _ => Err(internal("numeric observations of a family without numbers")),
    }
}

/// [`hmm_numeric_obs_`] for the density emission `E`.
fn numeric_obs<E: Emission<Obs = f64, Shape = ()>>(seqs: &List, threads: i32) -> Result<Robj> {
    let Some(parts) = plain_parts(seqs) else { return Ok(Robj::from(())) };
    let total: usize = parts.iter().map(hmm::Codes::len).sum();
    let mut out = Robj::alloc_vector(extendr_api::rtype_to_sxp(Rtype::Doubles), total);
    let slice = out.as_real_slice_mut().ok_or_else(|| Error::Other("internal: observations are not a double vector".into()))?;
    let ok = hmm::flatten_values(&parts, |x| E::obs_ok(&(), x), slice, &Exec::cpu().threads(threads.max(0) as usize));
    Ok(if ok { out } else { Robj::from(()) })
}

/// The values of the elements of `seqs` when every one is a plain (no
/// class, no dim), non-empty integer or double vector; None otherwise.
/// Reads the elements as R's C API gives them: an `Robj` per element
/// (each protected and released, its attributes fetched as more `Robj`s)
/// took 0.07 s of this call's 0.1 s for 10^5 sequences.
fn plain_parts(seqs: &List) -> Option<Vec<hmm::Codes<'_>>> {
    use extendr_ffi::{Rf_getAttrib, R_ClassSymbol, R_DimSymbol, R_NilValue, SEXPTYPE, DATAPTR_RO, TYPEOF, VECTOR_ELT, XLENGTH};
    // SAFETY: on R's thread (an #[extendr] function's body); `seqs` is a
    // list (VECSXP) of `seqs.len()` elements, each kept alive by the list,
    // which the caller holds for the returned slices' lifetime; R vectors
    // of type INTSXP / REALSXP hold XLENGTH ints / doubles at DATAPTR_RO
    // (ALTREP ones are materialised there once, as INTEGER() would).
    unsafe {
        let list = seqs.get();
        (0..seqs.len())
            .map(|i| {
                let x = VECTOR_ELT(list, i as _);
                let len = XLENGTH(x) as usize;
                let plain = len > 0 && Rf_getAttrib(x, R_ClassSymbol) == R_NilValue && Rf_getAttrib(x, R_DimSymbol) == R_NilValue;
                match TYPEOF(x) {
                    SEXPTYPE::INTSXP if plain => Some(hmm::Codes::Ints(std::slice::from_raw_parts(DATAPTR_RO(x) as *const i32, len))),
                    SEXPTYPE::REALSXP if plain => Some(hmm::Codes::Doubles(std::slice::from_raw_parts(DATAPTR_RO(x) as *const f64, len))),
                    _ => None,
                }
            })
            .collect()
    }
}

extendr_module! {
    mod hmm;
    fn hmm_memory_;
    fn hmm_loglik_;
    fn hmm_viterbi_;
    fn hmm_posterior_;
    fn hmm_fit_;
    fn hmm_simulate_;
    fn hmm_symbol_codes_;
    fn hmm_numeric_obs_;
}
