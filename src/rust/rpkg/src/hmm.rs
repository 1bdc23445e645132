//! hmm_*(): R values -> HmmModel / Sequences, results -> flat R vectors
//! (split and reshaped in R). Matrices cross the boundary row-major: R
//! passes t(m) and rebuilds with matrix(byrow = TRUE). Every entry point
//! checks the call's memory (the core's estimate, with the copies the glue
//! and R make of the result) before converting anything.

use bulkem_core::em::FitStatus;
use bulkem_core::exec::Backend;
use bulkem_core::hmm::{self, HmmFit, HmmFitConfig, HmmJob, HmmModel, Pass, Sequences, NO_STATE};
use extendr_api::prelude::*;
use extendr_api::Result;

use crate::session::{backend_for, input_error, r_error, run_in_session};

fn model(start: &[f64], trans: &[f64], emis: &[f64], n_symbols: i32) -> Result<HmmModel> {
    HmmModel::new(start.to_vec(), trans.to_vec(), emis.to_vec(), n_symbols.max(0) as usize).map_err(r_error)
}

/// Flat 1-based symbols and the sequence lengths -> 0-based Sequences.
/// The R side has checked them; NA or values < 1 are still refused here.
fn sequences(symbols: &[i32], lengths: &[i32]) -> Result<Sequences> {
    let lengths: Vec<usize> = lengths.iter().map(|&l| l.max(0) as usize).collect();
    if lengths.iter().sum::<usize>() != symbols.len() {
        return Err(Error::Other("internal: sequence lengths do not add up to the number of symbols".into()));
    }
    let mut flat = Vec::with_capacity(symbols.len());
    let mut begin = 0;
    for (s, &len) in lengths.iter().enumerate() {
        for (p, &k) in symbols[begin..begin + len].iter().enumerate() {
            if k < 1 {
                return Err(input_error(format!("sequence {} has an invalid symbol at position {}; symbols are whole numbers from 1", s + 1, p + 1)));
            }
            flat.push((k - 1) as u32);
        }
        begin += len;
    }
    Sequences::from_lengths(flat, &lengths).map_err(r_error)
}

/// The backend of an HMM call of `passes` passes over `seqs` with
/// `n_states` states: the core's one choice from `request`.
fn backend_of(request: &str, n_states: usize, seqs: &Sequences, passes: usize) -> Result<Backend> {
    backend_for(request, &hmm::job(n_states, seqs.total(), passes))
}

/// Copies of each pass's result beyond the core's own: the glue's R vector,
/// and R's (chunks bound, NaN replaced, split into sequences or matrices).
fn result_copies(pass: Pass) -> usize {
    match pass {
        Pass::Loglik => 2,
        Pass::Viterbi | Pass::Posterior | Pass::Simulate => 3,
        Pass::Fit => 2,
    }
}

/// The memory check of a call over sequences of `lengths`.
fn ensure(pass: Pass, n_states: usize, n_symbols: usize, lengths: impl Iterator<Item = usize>, threads: i32, starts: usize) -> Result<()> {
    HmmJob::new(pass, n_states, n_symbols, lengths, threads.max(0) as usize).starts(starts).copies(result_copies(pass)).ensure().map_err(r_error)
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

/// The memory check of an HMM call before R builds anything for it:
/// `n_seqs` sequences of `lengths` (one value: recycled), `copies` of the
/// result on top of the core's own. NULL, or a memory error.
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_memory_(pass: &str, n_states: f64, n_symbols: f64, n_seqs: f64, lengths: &[f64], threads: i32, starts: f64, copies: i32) -> Result<()> {
    let pass = pass_named(pass)?;
    let n_seqs = count(n_seqs);
    let job = match lengths {
        [one] => HmmJob::uniform(pass, count(n_states), count(n_symbols), n_seqs, count(*one), threads.max(0) as usize),
        many => HmmJob::new(pass, count(n_states), count(n_symbols), many.iter().map(|&l| count(l)), threads.max(0) as usize),
    };
    job.starts(count(starts).max(1))
        .copies(copies.max(0) as usize)
        .ensure()
        .map_err(r_error)
}

/// log P(sequence) per sequence.
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_loglik_(start: &[f64], trans: &[f64], emis: &[f64], n_symbols: i32, symbols: &[i32], lengths: &[i32], threads: i32, backend: &str) -> Result<Vec<f64>> {
    ensure(Pass::Loglik, start.len(), n_symbols.max(0) as usize, lengths_of(lengths), threads, 1)?;
    let m = model(start, trans, emis, n_symbols)?;
    let seqs = sequences(symbols, lengths)?;
    run_in_session(backend_of(backend, m.n_states, &seqs, 1)?, threads.max(0) as usize, |exec| hmm::loglik(&m, &seqs, exec)).map_err(r_error)
}

/// Viterbi: list(path = flat 1-based states, NA for impossible sequences; log_prob).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_viterbi_(start: &[f64], trans: &[f64], emis: &[f64], n_symbols: i32, symbols: &[i32], lengths: &[i32], threads: i32, backend: &str) -> Result<List> {
    ensure(Pass::Viterbi, start.len(), n_symbols.max(0) as usize, lengths_of(lengths), threads, 1)?;
    let m = model(start, trans, emis, n_symbols)?;
    let seqs = sequences(symbols, lengths)?;
    let v = run_in_session(backend_of(backend, m.n_states, &seqs, 1)?, threads.max(0) as usize, |exec| hmm::viterbi(&m, &seqs, exec)).map_err(r_error)?;
    let path = Integers::from_values(v.states.iter().map(|&s| if s == NO_STATE { Rint::na() } else { Rint::from(s as i32 + 1) }));
    Ok(list!(path = path, log_prob = v.log_prob))
}

/// Posteriors: list(probs = flat, time-major (T x N per sequence), loglik).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_posterior_(start: &[f64], trans: &[f64], emis: &[f64], n_symbols: i32, symbols: &[i32], lengths: &[i32], threads: i32, backend: &str) -> Result<List> {
    ensure(Pass::Posterior, start.len(), n_symbols.max(0) as usize, lengths_of(lengths), threads, 1)?;
    let m = model(start, trans, emis, n_symbols)?;
    let seqs = sequences(symbols, lengths)?;
    let p = run_in_session(backend_of(backend, m.n_states, &seqs, 2)?, threads.max(0) as usize, |exec| hmm::posterior(&m, &seqs, exec)).map_err(r_error)?;
    Ok(list!(probs = p.probs, loglik = p.loglik))
}

fn model_list(m: &HmmModel) -> List {
    list!(start = m.start.clone(), trans = m.trans.clone(), emis = m.emis.clone())
}

/// Baum-Welch over all sequences. `init` is NULL or list(start, trans, emis)
/// (row-major). `first_start`: 0-based global index of the first random
/// start (R splits the starts of one fit over future workers).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_fit_(
    symbols: &[i32],
    lengths: &[i32],
    n_states: i32,
    n_symbols: i32,
    init: Robj,
    max_iters: i32,
    epsilon: f64,
    random_inits: i32,
    pseudocount: f64,
    seed: f64,
    first_start: i32,
    threads: i32,
    backend: &str,
) -> Result<List> {
    let starts = if init.is_null() { random_inits.max(0) as usize } else { 1 };
    ensure(Pass::Fit, n_states.max(0) as usize, n_symbols.max(0) as usize, lengths_of(lengths), threads, starts)?;
    let seqs = sequences(symbols, lengths)?;
    let mut config = HmmFitConfig::new(n_states.max(0) as usize, n_symbols.max(0) as usize)
        .max_iters(max_iters.max(0) as usize)
        .epsilon(epsilon)
        .random_inits(random_inits.max(0) as usize)
        .pseudocount(pseudocount)
        .seed(seed as u64)
        .first_start(first_start.max(0) as usize);
    if !init.is_null() {
        let list = init.as_list().ok_or_else(|| Error::Other("internal: init must be a list".into()))?;
        let get = |name: &str| -> Result<Vec<f64>> {
            let v = list.dollar(name)?;
            Ok(v.as_real_slice().ok_or_else(|| Error::Other(format!("internal: init${name} must be a double vector")))?.to_vec())
        };
        let m = HmmModel::new(get("start")?, get("trans")?, get("emis")?, n_symbols.max(0) as usize).map_err(|e| input_error(e.to_string().replacen('`', "`init$", 1)))?;
        config = config.init(m);
    }
    let config = config.check().map_err(r_error)?;
    let passes = 2 * config.max_iters * starts;
    let fit: HmmFit = run_in_session(backend_of(backend, config.n_states, &seqs, passes)?, threads.max(0) as usize, |exec| hmm::fit(&seqs, &config, exec)).map_err(r_error)?;
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
        best_start = fit.best_start as i32 + 1
    ))
}

/// Simulate: list(symbols, states), flat and 1-based.
/// @noRd
#[extendr]
fn hmm_simulate_(start: &[f64], trans: &[f64], emis: &[f64], n_symbols: i32, lengths: &[i32], seed: f64) -> Result<List> {
    ensure(Pass::Simulate, start.len(), n_symbols.max(0) as usize, lengths_of(lengths), 0, 1)?;
    let m = model(start, trans, emis, n_symbols)?;
    let lengths: Vec<usize> = lengths_of(lengths).collect();
    // Every core (simulation is cheap; its time is the memory it fills).
    let (seqs, states) = run_in_session(Backend::Cpu, 0, |exec| hmm::simulate_with(&m, &lengths, seed as u64, exec)).map_err(r_error)?;
    let symbols = Integers::from_values(seqs.symbols.iter().map(|&k| Rint::from(k as i32 + 1)));
    drop(seqs);
    let states = Integers::from_values(states.iter().map(|&s| Rint::from(s as i32 + 1)));
    Ok(list!(symbols = symbols, states = states))
}

extendr_module! {
    mod hmm;
    fn hmm_memory_;
    fn hmm_loglik_;
    fn hmm_viterbi_;
    fn hmm_posterior_;
    fn hmm_fit_;
    fn hmm_simulate_;
}
