//! hmm_*(): R values -> HmmModel / Sequences, results -> flat R vectors
//! (split and reshaped in R). Matrices cross the boundary row-major: R
//! passes t(m) and rebuilds with matrix(byrow = TRUE).

use bulkem_core::em::FitStatus;
use bulkem_core::exec::Backend;
use bulkem_core::hmm::{self, HmmFit, HmmFitConfig, HmmModel, Sequences, NO_STATE};
use extendr_api::prelude::*;
use extendr_api::Result;

use crate::session::{input_error, parse_backend, r_error, run_in_session};

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

fn backend_of(name: &str) -> Result<Backend> {
    Ok(parse_backend(name)?.unwrap_or(Backend::Cpu))
}

/// log P(sequence) per sequence.
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_loglik_(start: &[f64], trans: &[f64], emis: &[f64], n_symbols: i32, symbols: &[i32], lengths: &[i32], threads: i32, backend: &str) -> Result<Vec<f64>> {
    let m = model(start, trans, emis, n_symbols)?;
    let seqs = sequences(symbols, lengths)?;
    run_in_session(backend_of(backend)?, threads.max(0) as usize, |exec| hmm::loglik(&m, &seqs, exec)).map_err(r_error)
}

/// Viterbi: list(path = flat 1-based states, NA for impossible sequences; log_prob).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_viterbi_(start: &[f64], trans: &[f64], emis: &[f64], n_symbols: i32, symbols: &[i32], lengths: &[i32], threads: i32, backend: &str) -> Result<List> {
    let m = model(start, trans, emis, n_symbols)?;
    let seqs = sequences(symbols, lengths)?;
    let v = run_in_session(backend_of(backend)?, threads.max(0) as usize, |exec| hmm::viterbi(&m, &seqs, exec)).map_err(r_error)?;
    let path: Vec<Option<i32>> = v.states.iter().map(|&s| if s == NO_STATE { None } else { Some(s as i32 + 1) }).collect();
    Ok(list!(path = Integers::from_values(path.into_iter().map(|x| x.map(Rint::from).unwrap_or(Rint::na()))), log_prob = v.log_prob))
}

/// Posteriors: list(probs = flat, time-major (T x N per sequence), loglik).
/// @noRd
#[extendr]
#[allow(clippy::too_many_arguments)]
fn hmm_posterior_(start: &[f64], trans: &[f64], emis: &[f64], n_symbols: i32, symbols: &[i32], lengths: &[i32], threads: i32, backend: &str) -> Result<List> {
    let m = model(start, trans, emis, n_symbols)?;
    let seqs = sequences(symbols, lengths)?;
    let p = run_in_session(backend_of(backend)?, threads.max(0) as usize, |exec| hmm::posterior(&m, &seqs, exec)).map_err(r_error)?;
    Ok(list!(probs = p.probs, loglik = p.loglik))
}

fn model_list(m: &HmmModel) -> List {
    list!(start = m.start.clone(), trans = m.trans.clone(), emis = m.emis.clone())
}

/// Baum-Welch over all sequences. `init` is NULL or list(start, trans, emis)
/// (row-major).
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
    threads: i32,
    backend: &str,
) -> Result<List> {
    let seqs = sequences(symbols, lengths)?;
    let mut config = HmmFitConfig::new(n_states.max(0) as usize, n_symbols.max(0) as usize)
        .max_iters(max_iters.max(0) as usize)
        .epsilon(epsilon)
        .random_inits(random_inits.max(0) as usize)
        .pseudocount(pseudocount)
        .seed(seed as u64);
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
    let fit: HmmFit = run_in_session(backend_of(backend)?, threads.max(0) as usize, |exec| hmm::fit(&seqs, &config, exec)).map_err(r_error)?;
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
    let m = model(start, trans, emis, n_symbols)?;
    let lengths: Vec<usize> = lengths.iter().map(|&l| l.max(0) as usize).collect();
    let (seqs, states) = hmm::simulate(&m, &lengths, seed as u64);
    Ok(list!(
        symbols = seqs.symbols.iter().map(|&k| k as i32 + 1).collect::<Vec<_>>(),
        states = states.iter().map(|&s| s as i32 + 1).collect::<Vec<_>>()
    ))
}

/// Backend for an HMM job with use.gpu = NA: "cuda" or "cpu".
/// @noRd
#[extendr]
fn hmm_auto_backend_(states: i32, symbols: f64, passes: f64) -> &'static str {
    hmm::auto_backend(states.max(0) as usize, symbols.max(0.0) as usize, passes.max(0.0) as usize).name()
}

extendr_module! {
    mod hmm;
    fn hmm_auto_backend_;
    fn hmm_loglik_;
    fn hmm_viterbi_;
    fn hmm_posterior_;
    fn hmm_fit_;
    fn hmm_simulate_;
}
