#' A discrete-emission hidden Markov model
#'
#' Builds and validates a hidden Markov model with N hidden states and V
#' observable symbols: the probabilities of the first state (`start`), of
#' moving from one state to the next (`trans`) and of emitting each symbol in
#' each state (`emis`). Exact zeros are allowed, and so are probabilities
#' of any size down to the smallest double (subnormal ones included): the
#' computations stay exact where products of them leave the double range
#' (see [hmm_loglik()]). The model is used by
#' [hmm_loglik()], [hmm_viterbi()], [hmm_posterior()] and [hmm_simulate()],
#' and returned (fitted) by [hmm_fit()].
#'
#' State labels come from `names(start)`, `rownames(trans)`,
#' `colnames(trans)` or `rownames(emis)` (the first that is set), symbol
#' labels from `colnames(emis)`; they default to `"1"`, `"2"`, ... Sequences
#' may be given as character vectors or factors of the symbol labels.
#'
#' @param start Probabilities of the first state: a numeric vector of length
#'   N summing to 1.
#' @param trans N x N transition matrix: `trans[i, j]` is the probability of
#'   moving from state i to state j; every row sums to 1.
#' @param emis N x V emission matrix: `emis[i, k]` is the probability of
#'   emitting symbol k in state i; every row sums to 1.
#' @return An object of class `bulkem_hmm`: a list with `start` (named
#'   vector), `trans` and `emis` (matrices with dimnames `from`/`to` and
#'   `state`/`symbol`). Errors of class `bulkem_error_input` name the
#'   argument and the entry that is not a probability (missing, infinite,
#'   negative) or the row that does not sum to 1 (within 1e-8).
#' @seealso [hmm_fit()] to estimate a model from sequences.
#' @examples
#' # The two-state weather model of the Wikipedia Viterbi example
#' model <- hmm(
#'   start = c(Healthy = 0.6, Fever = 0.4),
#'   trans = matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
#'   emis = matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE,
#'     dimnames = list(NULL, c("normal", "cold", "dizzy")))
#' )
#' model
#' summary(model)
#' @export
hmm <- function(start, trans, emis) {
  call <- environment()
  check_prob_vector(start, "start", call)
  N <- length(start)
  check_prob_matrix(trans, "trans", N, N, call)
  check_prob_matrix(emis, "emis", N, NA, call)
  states <- names(start) %||% rownames(trans) %||% colnames(trans) %||% rownames(emis) %||%
    as.character(seq_len(N))
  symbols <- colnames(emis) %||% as.character(seq_len(ncol(emis)))
  new_hmm(as.double(start), unname(trans), unname(emis), states, symbols)
}

new_hmm <- function(start, trans, emis, states, symbols) {
  storage.mode(trans) <- "double"
  storage.mode(emis) <- "double"
  structure(list(
    start = stats::setNames(start, states),
    trans = matrix(trans, length(states), dimnames = list(from = states, to = states)),
    emis = matrix(emis, length(states), dimnames = list(state = states, symbol = symbols))
  ), class = "bulkem_hmm")
}

#' Simulate sequences from a hidden Markov model
#'
#' @param model A [hmm()] model, or a fit from [hmm_fit()] (its fitted
#'   model, `fit$model`, is used).
#' @param n Number of sequences (0 gives an empty list).
#' @param length Length of each sequence: one number for all, or one per
#'   sequence; whole numbers of at least 1.
#' @param seed A whole number keying the random streams (one per sequence,
#'   so the result does not depend on the number of threads). `NULL` draws
#'   one from R's random number generator, so [set.seed()] makes a call
#'   reproducible.
#' @return A list of `n` integer vectors of symbol codes `1..V` (the labels
#'   are `colnames(model$emis)`), with attribute `states`: the list of hidden
#'   state paths (integer codes `1..N`).
#'
#'   Before anything is allocated, the memory the result needs (`n` x
#'   `length` symbols and states, and R's copies of them) is compared with
#'   what this session may use; a call that would not fit is refused with an
#'   error of class `bulkem_error_memory` saying how much it needs (instead
#'   of ending the R session). The simulation can be interrupted.
#' @examples
#' model <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
#'   matrix(c(0.8, 0.2, 0.3, 0.7), 2, byrow = TRUE))
#' seqs <- hmm_simulate(model, n = 3, length = c(5, 10, 20), seed = 1)
#' seqs[[1]]
#' attr(seqs, "states")[[1]]
#' @export
hmm_simulate <- function(model, n, length, seed = NULL) {
  call <- environment()
  model <- hmm_model(model, "model", call)
  n <- check_count(n, "n", min = 0, call = call)
  if (n == 0) return(structure(list(), states = list()))
  if (!is.numeric(length) || !(base::length(length) %in% c(1L, n)) || anyNA(length) ||
      any(!is.finite(length)) || any(length != round(length)) || any(length < 1) ||
      any(length > .Machine$integer.max)) {
    bulkem_abort(c(
      "{.arg length} must be one whole number of at least 1, or one per sequence ({n}).",
      x = "You supplied {describe_value(length)}."
    ), call = call)
  }
  seed <- check_seed(seed, call)
  # Refused here, before R builds the lengths (n of them) or anything else.
  hmm_memory("simulate", model, n, length, 0L, 3L, call, "hmm_simulate")
  lens <- rep_len(as.integer(length), n)
  raw <- call_core(
    hmm_simulate_(model$start, as.double(t(model$trans)), as.double(t(model$emis)),
                  ncol(model$emis), lens, seed),
    call, "hmm_simulate"
  )
  structure(split_flat(raw$symbols, lens), states = split_flat(raw$states, lens))
}

#' Log-likelihood of each sequence under a hidden Markov model
#'
#' Computes log P(sequence | model) for every sequence with the scaled
#' forward recursion (the log-likelihood accumulated in double precision, so
#' sequences of any length are safe). A sequence that the model cannot
#' produce has log-likelihood `-Inf`.
#'
#' **Tiny probabilities.** The scaled recursion is exact as long as no
#' product of probabilities in a step leaves the double range. Every step
#' checks a bound that guarantees this; a sequence whose bound fails (a
#' model with probabilities such as 1e-310, or a state whose probability
#' decays below 1e-300 and is needed again later, as with two states that
#' never switch) is computed again in log space, with the same result to
#' rounding on the CPU and the GPU. `-Inf` therefore always means
#' probability 0, never an underflow.
#'
#' **Memory and interrupts.** Every `hmm_*()` call estimates the memory it
#' needs (its results, R's copies of them, and its working memory) before
#' allocating anything, and refuses a call that would not fit with an error
#' of class `bulkem_error_memory` naming the largest part and its size. An
#' interrupt (Ctrl-C) stops a call within a fraction of a second, also
#' within one long sequence, as R's own `interrupt` condition.
#'
#' @param model A [hmm()] model, or a fit from [hmm_fit()] (its fitted
#'   model, `fit$model`, is used; a fit whose `status` is `"failed"` is an
#'   error of class `bulkem_error_input`, since it has no fitted model).
#' @param seqs The observation sequences: a list of integer vectors of
#'   symbol codes `1..V`, or of character vectors or factors whose values
#'   are symbol labels (`colnames(model$emis)`); any lengths >= 1. A single
#'   vector is one sequence.
#' @param use.gpu `NA` (default): a CUDA GPU when one is usable and the job
#'   is large enough, otherwise the CPU (with a one-time message when no GPU
#'   is usable); `TRUE`: a GPU or an error saying why not; `FALSE`: the CPU.
#'   "Large enough" means at least 1e10 symbol x N^2 x pass units (e.g.
#'   10,000 sequences of 1,000 symbols with N = 32 for a Baum-Welch fit);
#'   the GPU kernels handle up to 2048 states.
#' @param parallel `"none"`: all sequences in this R session. `"future"`:
#'   the sequences are split into chunks of consecutive sequences and run on
#'   the workers of the current [future::plan()] through
#'   [future.apply::future_lapply()], each chunk sent only its own sequences
#'   and each worker choosing its own backend (`use.gpu` is resolved there).
#'   Every sequence is computed on its own, so the result is identical to
#'   `"none"` (on the same backend). Needs \pkg{future} and
#'   \pkg{future.apply}.
#' @param chunk.size Sequences per chunk (`NULL`: about 4 chunks per future
#'   worker, fewer for small jobs; one chunk with `parallel = "none"`).
#' @return A numeric vector, one log-likelihood per sequence (named as
#'   `seqs`).
#' @references Rabiner, L. R. (1989). A tutorial on hidden Markov models and
#'   selected applications in speech recognition. *Proceedings of the IEEE*,
#'   77(2), 257-286. \doi{10.1109/5.18626}
#' @examples
#' model <- hmm(c(0.6, 0.4), matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
#'   matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE))
#' hmm_loglik(model, list(c(1, 2, 3), c(3, 3, 3, 1)), use.gpu = FALSE)
#' @export
hmm_loglik <- function(model, seqs, use.gpu = NA, parallel = c("none", "future"), chunk.size = NULL) {
  call <- environment()
  model <- hmm_model(model, "model", call)
  s <- check_seqs(seqs, colnames(model$emis), ncol(model$emis), call = call)
  raw <- hmm_run("loglik", model, s, use.gpu, parallel, chunk.size, 1, call)
  stats::setNames(raw$loglik, s$names)
}

#' Most probable hidden state path of each sequence (Viterbi)
#'
#' Finds, for every sequence, the state path with the highest joint
#' probability with the sequence, by the Viterbi algorithm in log space.
#' Ties are broken towards the lowest state index, so the result is
#' deterministic.
#'
#' Back-pointers take 2 bytes per state and time step. When those of the
#' sequences decoded at once do not fit in half of the available memory
#' (e.g. 3,000 states over 3 million symbols: 18 GB), each long sequence is
#' decoded in about sqrt(T) segments, keeping one column of scores per
#' segment and recomputing a segment's back-pointers when its path is
#' traced: the same path, for twice the arithmetic, in O(sqrt(T) N) memory.
#'
#' @inheritParams hmm_loglik
#' @return A list with
#'   \describe{
#'   \item{`path`}{a list of integer vectors of state codes `1..N` (labels:
#'     `names(model$start)`), one per sequence; all `NA` for a sequence the
#'     model cannot produce.}
#'   \item{`log_prob`}{the log of the joint probability of each path and its
#'     sequence (`-Inf` for an impossible sequence).}
#'   }
#' @references Rabiner, L. R. (1989). A tutorial on hidden Markov models and
#'   selected applications in speech recognition. *Proceedings of the IEEE*,
#'   77(2), 257-286. \doi{10.1109/5.18626}
#' @examples
#' model <- hmm(c(0.6, 0.4), matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
#'   matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE))
#' v <- hmm_viterbi(model, list(c(1, 2, 3)), use.gpu = FALSE)
#' v$path[[1]]
#' exp(v$log_prob)
#' @export
hmm_viterbi <- function(model, seqs, use.gpu = NA, parallel = c("none", "future"), chunk.size = NULL) {
  call <- environment()
  model <- hmm_model(model, "model", call)
  s <- check_seqs(seqs, colnames(model$emis), ncol(model$emis), call = call)
  viterbi_result(hmm_run("viterbi", model, s, use.gpu, parallel, chunk.size, 1, call), s)
}

viterbi_result <- function(raw, s) {
  list(path = stats::setNames(split_flat(raw$path, s$lengths), s$names),
       log_prob = stats::setNames(raw$log_prob, s$names))
}

#' Posterior state probabilities of each sequence (forward-backward)
#'
#' For every sequence and time step t, the probability of each hidden state
#' given the whole sequence, P(state at t = i | sequence), by the scaled
#' forward-backward recursions. The result itself holds T x N numbers per
#' sequence (3 million symbols with 1,000 states: 24 GB, and R copies it),
#' so a call whose result does not fit is refused with an error of class
#' `bulkem_error_memory` before any of it is allocated; the computation
#' needs no memory beyond the result.
#'
#' @inheritParams hmm_loglik
#' @return A list of matrices, one per sequence, each with one row per time
#'   step and one column per state (rows sum to 1); all `NA` for a sequence
#'   the model cannot produce. Attribute `loglik` holds the log-likelihood of
#'   each sequence.
#' @references Rabiner, L. R. (1989). A tutorial on hidden Markov models and
#'   selected applications in speech recognition. *Proceedings of the IEEE*,
#'   77(2), 257-286. \doi{10.1109/5.18626}
#' @examples
#' model <- hmm(c(0.6, 0.4), matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
#'   matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE))
#' hmm_posterior(model, list(c(1, 2, 3)), use.gpu = FALSE)[[1]]
#' @export
hmm_posterior <- function(model, seqs, use.gpu = NA, parallel = c("none", "future"), chunk.size = NULL) {
  call <- environment()
  model <- hmm_model(model, "model", call)
  s <- check_seqs(seqs, colnames(model$emis), ncol(model$emis), call = call)
  posterior_result(hmm_run("posterior", model, s, use.gpu, parallel, chunk.size, 2, call), s, model)
}

posterior_result <- function(raw, s, model) {
  N <- length(model$start)
  probs <- raw$probs
  probs[is.nan(probs)] <- NA_real_
  ends <- cumsum(s$lengths)
  starts <- ends - s$lengths
  states <- names(model$start)
  out <- lapply(seq_along(s$lengths), function(i) {
    matrix(probs[(starts[i] * N + 1):(ends[i] * N)], ncol = N, byrow = TRUE,
           dimnames = list(NULL, states))
  })
  structure(stats::setNames(out, s$names), loglik = stats::setNames(raw$loglik, s$names))
}

#' Fit a hidden Markov model to many sequences (Baum-Welch)
#'
#' Estimates the start, transition and emission probabilities of an
#' `n.states`-state hidden Markov model from all sequences jointly by the
#' Baum-Welch (EM) algorithm: every iteration sums the expected counts of
#' every sequence (scaled forward-backward) and re-estimates all
#' probabilities. The log-likelihood never decreases from one iteration to
#' the next (beyond rounding). Iterations stop when it changes by less than
#' `epsilon` (`status = "converged"`) or after `max.iters` iterations
#' (`status = "max_iters"`).
#'
#' **Starts.** With `init = NULL`, `random.inits` random models are tried
#' (every probability vector drawn uniformly from its simplex, keyed by
#' `seed` and the start index) and the one reaching the highest
#' log-likelihood is kept (ties to the first). Baum-Welch finds a local
#' maximum only, so several starts are advisable. States of a fitted model
#' are identified only up to relabelling.
#'
#' **Memory.** The model takes 8 N^2 bytes per copy (N = 100,000 states:
#' 80 GB), and Baum-Welch keeps several; the call is refused, before
#' anything is allocated, with an error of class `bulkem_error_memory` when
#' it would not fit. Long sequences whose forward vectors (8 N bytes per
#' symbol) do not fit run in checkpointed segments (O(sqrt(T) N) memory,
#' one more forward pass).
#'
#' **Parallel starts and progress.** Each Baum-Welch iteration needs the
#' expected counts of every sequence before it can re-estimate the model, so
#' one fit is not split over R processes (that would cost a round trip to
#' every worker per iteration); within this session the core already runs
#' the sequences of each iteration on every core, or on the GPU. What is
#' independent is the random starts: with `parallel = "future"` the starts
#' are split into chunks of consecutive starts, and each chunk becomes a
#' future on the current [future::plan()] that runs whole Baum-Welch fits of
#' its starts over all the sequences (every future is sent all of them: 4
#' bytes per symbol, within future's limit `future.globals.maxSize`). The
#' core keys each random start by `seed` and its index among all the starts,
#' and the start kept is chosen from all of them by the same rule, so the
#' result is identical to `parallel = "none"` with the same `seed` (on the
#' same backend). It therefore pays with several `random.inits` and several
#' workers (machines, or GPUs); one start (or `init`) is one future. Progress
#' is reported per start through \pkg{progressr} when it is installed (wrap
#' the call in `progressr::with_progress()`), also from future workers
#' (per chunk); a fit with one start has one step.
#'
#' **Pseudocounts.** `pseudocount > 0` adds that count to every expected
#' count before normalising: a maximum a posteriori estimate under Dirichlet
#' priors with parameters `1 + pseudocount`, which keeps every probability
#' positive. The quantity that then never decreases is the log-posterior, not
#' the log-likelihood reported.
#'
#' @inheritParams hmm_loglik
#' @param n.states Number of hidden states N (taken from `init` when it is
#'   given and `n.states` is missing).
#' @param n.symbols Number of symbols V. When missing: the columns of
#'   `init$emis`, else the number of levels of factor sequences, else the
#'   largest symbol code.
#' @param init A [hmm()] model to start from, instead of random starts, or a
#'   [hmm_fit()] result (to continue from its fitted model).
#' @param max.iters Maximum number of Baum-Welch iterations per start (at
#'   least 1).
#' @param epsilon Convergence threshold on the change of the total
#'   log-likelihood between iterations. `0` runs exactly `max.iters`.
#' @param random.inits Number of random starting models (ignored with
#'   `init`); at most 2^24. Only the best start's model is kept, so memory
#'   does not grow with the number of starts.
#' @param pseudocount A number >= 0 added to every expected count.
#' @param seed A whole number keying the random starts. `NULL` draws one from
#'   R's random number generator, so [set.seed()] makes a call reproducible.
#' @param parallel `"none"`: all starts in this R session. `"future"`: the
#'   random starts are split into chunks, each run (over all sequences) by a
#'   future on the workers of the current [future::plan()] through
#'   [future.apply::future_lapply()], each worker choosing its own backend
#'   (`use.gpu` is resolved there). The result is identical to `"none"`;
#'   see Details. Needs \pkg{future} and \pkg{future.apply}, and bulkem
#'   installed where the workers can load it.
#' @param chunk.size Random starts per chunk. With `parallel = "future"`
#'   each chunk is one future; the default makes about 4 chunks per worker,
#'   fewer when a chunk would do less than 2e8 symbol x N^2 x pass units (a
#'   future costs tens of milliseconds). With `parallel = "none"`, starts
#'   per call of the core (progress is reported between calls); the default
#'   is one call, or about 50 with \pkg{progressr} reporting. The chunking
#'   never changes the result.
#' @return An object of class `bulkem_hmm_fit`: a list with
#'   \describe{
#'   \item{`model`}{the fitted model, class `bulkem_hmm`.}
#'   \item{`loglik`}{the total log-likelihood of `model` over all sequences.}
#'   \item{`loglik_trace`}{the log-likelihood of the starting model, then
#'     after each iteration.}
#'   \item{`iterations`, `status`, `message`}{iterations run; `"converged"`,
#'     `"max_iters"` or `"failed"`; why the fit failed, or `NA`.}
#'   \item{`init`}{the starting model of the kept start.}
#'   \item{`start_logliks`, `best_start`}{final log-likelihood of every start
#'     (`-Inf` when it failed) and the index of the kept one.}
#'   \item{`n_sequences`, `n_obs`}{number of sequences and of symbols.}
#'   \item{`seed`, `backend`, `seconds`}{the seed used, where it ran (the
#'     backends of all chunks, comma-separated) and how long it took.}
#'   }
#'   A fit can be used wherever a model can: `hmm_loglik(fit, seqs)`,
#'   `hmm_viterbi(fit, seqs)`, `hmm_posterior(fit, seqs)`,
#'   `hmm_simulate(fit, ...)`, `hmm_fit(seqs, init = fit)`, and
#'   [predict()][predict.bulkem_hmm_fit] (`predict(fit, seqs)`) use
#'   `fit$model`.
#' @references Rabiner, L. R. (1989). A tutorial on hidden Markov models and
#'   selected applications in speech recognition. *Proceedings of the IEEE*,
#'   77(2), 257-286. \doi{10.1109/5.18626}
#' @seealso [hmm()], [hmm_viterbi()], [hmm_posterior()],
#'   [predict.bulkem_hmm_fit()]; `vignette("hmm")`.
#' @examples
#' truth <- hmm(c(0.8, 0.2), matrix(c(0.95, 0.05, 0.1, 0.9), 2, byrow = TRUE),
#'   matrix(c(0.6, 0.3, 0.1, 0.1, 0.2, 0.7), 2, byrow = TRUE))
#' seqs <- hmm_simulate(truth, n = 200, length = 50, seed = 1)
#' fit <- hmm_fit(seqs, n.states = 2, n.symbols = 3, random.inits = 3,
#'   seed = 42, use.gpu = FALSE)
#' fit
#' fit$model$emis
#' # A fit is a model for every hmm_*() function, and predicts states
#' hmm_loglik(fit, seqs[1:2], use.gpu = FALSE)
#' predict(fit, seqs[1:2], use.gpu = FALSE)[[1]]
#' # The random starts as futures, one per start (plan(multisession) or a
#' # cluster plan puts them on other R processes): the same fit
#' if (requireNamespace("future.apply", quietly = TRUE)) {
#'   oplan <- future::plan(future::sequential)
#'   fit2 <- hmm_fit(seqs, n.states = 2, n.symbols = 3, random.inits = 3,
#'     seed = 42, use.gpu = FALSE, parallel = "future", chunk.size = 1)
#'   future::plan(oplan)
#'   identical(fit2$model, fit$model)
#' }
#' @export
hmm_fit <- function(seqs, n.states, n.symbols, init = NULL, max.iters = 100, epsilon = 1e-6,
                    random.inits = 1, pseudocount = 0, seed = NULL, use.gpu = NA,
                    parallel = c("none", "future"), chunk.size = NULL) {
  call <- environment()
  parallel <- match_arg(parallel, c("none", "future"), "parallel", call)
  if (!is.null(init)) init <- hmm_model(init, "init", call)
  if (missing(n.states)) {
    if (is.null(init)) bulkem_abort("{.arg n.states} must be given (or {.arg init}).", call = call)
    n.states <- length(init$start)
  }
  N <- check_count(n.states, "n.states", call = call)
  symbols <- if (!is.null(init)) colnames(init$emis) else seq_symbols(seqs)
  s <- check_seqs(seqs, symbols, call = call)
  if (missing(n.symbols)) {
    n.symbols <- if (!is.null(init)) ncol(init$emis) else if (!is.null(symbols)) length(symbols) else max(s$symbols)
  }
  V <- check_count(n.symbols, "n.symbols", call = call)
  if (!is.null(init) && (length(init$start) != N || ncol(init$emis) != V)) {
    bulkem_abort(c(
      "{.arg init} must have {.arg n.states} states and {.arg n.symbols} symbols.",
      x = "{.arg init} has {length(init$start)} state{?s} and {ncol(init$emis)} symbol{?s}; {.arg n.states} = {N}, {.arg n.symbols} = {V}."
    ), call = call)
  }
  check_symbol_range(s$symbols, s$lengths, V, "seqs", call)
  max.iters <- check_count(max.iters, "max.iters", call = call)
  epsilon <- check_number(epsilon, "epsilon", min = 0, call = call)
  random.inits <- check_count(random.inits, "random.inits", call = call)
  # Checked here, not only by the core: the core sees one chunk of starts.
  if (random.inits > HMM_MAX_STARTS) {
    bulkem_abort(c(
      "{.arg random.inits} must be between 1 and {format(HMM_MAX_STARTS, scientific = FALSE)}.",
      x = "You supplied {format(random.inits, scientific = FALSE)}."
    ), call = call)
  }
  pseudocount <- check_number(pseudocount, "pseudocount", min = 0, call = call)
  seed <- check_seed(seed, call)
  if (!is.null(chunk.size)) chunk.size <- check_count(chunk.size, "chunk.size", call = call)
  check_flag(use.gpu, "use.gpu", allow_na = TRUE, call = call)
  # Before anything of size N x N or N x V: the core's estimate, with the
  # copies of the model R makes of the result.
  starts <- if (is.null(init)) random.inits else 1L
  hmm_memory("fit", list(N = N, V = V), length(s$lengths), s$lengths, starts, 2L, call, "hmm_fit")
  symbols_total <- sum(as.double(s$lengths))
  init_rows <- if (is.null(init)) NULL else
    list(start = init$start, trans = as.double(t(init$trans)), emis = as.double(t(init$emis)))
  settings <- list(N = N, V = V, init = init_rows, max.iters = max.iters, epsilon = epsilon,
                   pseudocount = pseudocount, seed = seed)
  settings <- c(settings, exec_settings(parallel, use.gpu, call))
  if (parallel == "none") {
    # The whole fit picks the backend (as one call would); a worker picks by
    # its starts.
    settings$backend <- backend_choice_("hmm", settings$backend, c(N, symbols_total, 2 * max.iters * starts))
  }
  progress <- make_progress(starts)
  size <- if (!is.null(chunk.size)) {
    chunk.size
  } else if (parallel == "future") {
    # Every future is sent all the sequences, so only the work sizes chunks.
    future_chunk_size(starts, bytes = 0, work = symbols_total * N * N * 2 * max.iters * starts,
                      min_work = MIN_CHUNK_WORK)
  } else if (is.null(progress)) {
    starts
  } else {
    # About 50 progress steps; a start is a whole Baum-Welch fit, so a call
    # per start or more costs little.
    as.integer(ceiling(starts / 50))
  }
  chunks <- chunk_indices(starts, size)
  data <- list(symbols = s$symbols, lengths = s$lengths)

  started <- proc.time()[["elapsed"]]
  run <- function(chunks) {
    map_chunks(
      chunks, hmm_fit_chunk,
      # Baum-Welch needs every sequence at every iteration: each chunk of
      # starts gets all of them.
      slice = function(idx) data,
      args = settings, parallel = parallel, progress = progress, what = "starts",
      on_error = function(msg, where) core_error(msg, call, "hmm_fit", if (parallel == "future") where),
      call = call
    )
  }
  raw <- merge_fit_chunks(run(chunks), function(start) {
    # Progress is complete: a re-fit of one start (rare, see
    # merge_fit_chunks()) does not report.
    progress <<- NULL
    run(list(start))[[1]]
  })
  seconds <- proc.time()[["elapsed"]] - started
  states <- if (!is.null(init)) names(init$start) else as.character(seq_len(N))
  symbols <- symbols %||% as.character(seq_len(V))
  if (length(symbols) < V) symbols <- make.unique(c(symbols, as.character(seq(length(symbols) + 1, V))))
  as_model <- function(m) {
    new_hmm(m$start, matrix(m$trans, N, N, byrow = TRUE), matrix(m$emis, N, V, byrow = TRUE),
            states, symbols)
  }
  structure(list(
    model = as_model(raw$model),
    loglik = raw$loglik,
    loglik_trace = raw$trace,
    iterations = raw$iterations,
    status = raw$status,
    message = if (nzchar(raw$message)) raw$message else NA_character_,
    init = as_model(raw$init),
    start_logliks = raw$start_logliks,
    best_start = raw$best_start,
    n_sequences = length(s$lengths),
    n_obs = sum(as.double(s$lengths)),
    pseudocount = pseudocount,
    seed = seed,
    backend = paste(unique(raw$backend), collapse = ", "),
    seconds = seconds
  ), class = "bulkem_hmm_fit")
}

# ---- helpers ---------------------------------------------------------------

`%||%` <- function(x, y) if (is.null(x)) y else x

# One pass ("loglik", "viterbi" or "posterior") over the sequences `s`
# (from check_seqs()), in this session or split by sequences over future
# workers (map_chunks(), R/parallel.R). Each sequence is computed on its own,
# so the chunking never changes a result. Returns the core's fields, bound.
hmm_run <- function(pass, model, s, use.gpu, parallel, chunk.size, passes, call, fn = paste0("hmm_", pass)) {
  parallel <- match_arg(parallel, c("none", "future"), "parallel", call)
  if (!is.null(chunk.size)) chunk.size <- check_count(chunk.size, "chunk.size", call = call)
  # Here, not only where the chunks run (future workers resolve use.gpu).
  check_flag(use.gpu, "use.gpu", allow_na = TRUE, call = call)
  n <- length(s$lengths)
  symbols <- sum(as.double(s$lengths))
  N <- length(model$start)
  # The whole call's memory, with R's copies of the result, before anything
  # of its size is built or any chunk runs.
  hmm_memory(pass, model, n, s$lengths, 1L, 3L, call, fn)
  settings <- list(pass = pass, passes = passes, start = model$start, trans = as.double(t(model$trans)),
                   emis = as.double(t(model$emis)), V = ncol(model$emis))
  settings <- c(settings, exec_settings(parallel, use.gpu, call))
  if (parallel == "none") {
    # The whole job picks the backend; a worker picks by its chunk.
    settings$backend <- backend_choice_("hmm", settings$backend, c(N, symbols, passes))
  }
  size <- if (!is.null(chunk.size)) {
    chunk.size
  } else if (parallel == "future") {
    future_chunk_size(n, bytes = 4 * symbols, work = symbols * N * N * passes, min_work = MIN_CHUNK_WORK)
  } else {
    n
  }
  ends <- cumsum(as.double(s$lengths))
  parts <- map_chunks(
    chunk_indices(n, size), hmm_chunk,
    slice = function(idx) {
      from <- ends[idx[1]] - s$lengths[idx[1]] + 1
      list(symbols = s$symbols[from:ends[idx[length(idx)]]], lengths = s$lengths[idx])
    },
    args = settings, parallel = parallel,
    progress = if (parallel == "future") make_progress(n), what = "sequences",
    on_error = function(msg, where) core_error(msg, call, fn, if (parallel == "future") where),
    call = call
  )
  bind_chunks(parts)
}

# The core's memory estimate of an HMM call (src/rust/core/src/hmm/size.rs),
# checked before R builds anything for it: a classed memory error naming
# the largest part, or nothing. `model` is a bulkem_hmm or list(N, V);
# `lengths` one per sequence, or one for all `n`.
hmm_memory <- function(pass, model, n, lengths, starts, copies, call, fn) {
  N <- if (inherits(model, "bulkem_hmm")) length(model$start) else model$N
  V <- if (inherits(model, "bulkem_hmm")) ncol(model$emis) else model$V
  threads <- cpu_threads()
  call_core(hmm_memory_(pass, as.double(N), as.double(V), as.double(n), as.double(lengths),
                        as.integer(threads), as.double(starts), as.integer(copies)), call, fn)
  invisible(NULL)
}

# One chunk of sequences of an HMM pass, here or on a future worker.
hmm_chunk <- function(part, idx, st) {
  ex <- chunk_exec(st)
  backend <- backend_choice_("hmm", ex$backend, c(length(st$start), sum(as.double(part$lengths)), st$passes))
  pass <- switch(st$pass, loglik = hmm_loglik_, viterbi = hmm_viterbi_, posterior = hmm_posterior_)
  out <- pass(st$start, st$trans, st$emis, st$V, part$symbols, part$lengths, ex$threads, backend)
  if (st$pass == "loglik") list(loglik = out) else out
}

# One chunk of the starts of hmm_fit() (their global indices `idx`), here
# or on a future worker: whole Baum-Welch fits over all sequences. The core
# keys start k by (seed, k), so a chunk's starts are those of one call.
hmm_fit_chunk <- function(part, idx, st) {
  ex <- chunk_exec(st)
  backend <- backend_choice_("hmm", ex$backend,
                             c(st$N, sum(as.double(part$lengths)), 2 * st$max.iters * length(idx)))
  raw <- hmm_fit_(part$symbols, part$lengths, st$N, st$V, st$init, st$max.iters, st$epsilon,
                  length(idx), st$pseudocount, st$seed, idx[1] - 1L, ex$threads, backend)
  raw$best_start <- raw$best_start + idx[1] - 1L
  raw$backend <- backend
  raw
}

# The most random starts of one fit (MAX_RANDOM_INITS in
# src/rust/core/src/tolerances.rs).
HMM_MAX_STARTS <- 2^24

# The core's relative tolerance for tied starts (HMM_START_TIE_REL in
# src/rust/core/src/tolerances.rs): the kept start is the lowest-index one
# within it of the best log-likelihood.
HMM_START_TIE_REL <- 1e-9

# The fit of the start one call of the core over all starts would keep,
# from the results of chunks of consecutive starts: the lowest-index start
# whose final log-likelihood ties with the best of all (start 1 when every
# start failed), with every start's log-likelihood. A chunk returns its own
# pick, which is that start unless a lower start of the chunk ties with the
# chunk's best but not with the best of all (discrete log-likelihoods are
# <= 0, so the start that wins overall ties with its chunk's best); then
# `refit(start)` fits that start alone, which gives the same fit.
merge_fit_chunks <- function(parts, refit) {
  if (length(parts) == 1) return(parts[[1]])
  ll <- unlist(lapply(parts, `[[`, "start_logliks"), use.names = FALSE)
  top <- max(ll)
  best <- if (is.finite(top)) {
    which(is.finite(ll) & (top - ll) <= HMM_START_TIE_REL * max(abs(top), 1))[1]
  } else {
    1L
  }
  picks <- vapply(parts, `[[`, integer(1), "best_start")
  out <- if (best %in% picks) parts[[match(best, picks)]] else refit(best)
  out$start_logliks <- ll
  out$best_start <- best
  # Where the starts ran (future workers choose their own backends).
  out$backend <- unique(unlist(lapply(parts, `[[`, "backend"), use.names = FALSE))
  out
}

# The model of `model`: a bulkem_hmm from hmm(), or the fitted model of a
# bulkem_hmm_fit from hmm_fit(). Every function that takes a model gets it
# here, so a fit works wherever a model does. A failed fit's `model` is not
# an estimate (it is where the fit stopped), so it is refused rather than
# used as one; `fit$model` passes it explicitly.
hmm_model <- function(model, arg, call) {
  if (inherits(model, "bulkem_hmm_fit")) {
    if (identical(model$status, "failed")) {
      bulkem_abort(c(
        "{.arg {arg}} is a {.fn hmm_fit} result that failed, so it has no fitted model.",
        x = "{model$message}",
        i = "{.code {arg}$model} is the model where it stopped; pass it explicitly to use it anyway."
      ), call = call)
    }
    fitted <- model$model
    if (!inherits(fitted, "bulkem_hmm")) {
      bulkem_abort(c(
        "{.arg {arg}} is a {.fn hmm_fit} result without a model.",
        x = "Its {.field model} is {describe_value(fitted)}."
      ), call = call)
    }
    return(fitted)
  }
  if (!inherits(model, "bulkem_hmm")) {
    bulkem_abort(c(
      "{.arg {arg}} must be a hidden Markov model made by {.fn hmm}, or a fit made by {.fn hmm_fit}.",
      x = "You supplied {describe_value(model)}."
    ), call = call)
  }
  model
}

check_prob_vector <- function(x, arg, call) {
  if (!is.numeric(x) || !is.null(dim(x)) || length(x) == 0) {
    bulkem_abort(c(
      "{.arg {arg}} must be a numeric vector of probabilities, one per state.",
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  check_probs(matrix(x, 1), arg, vector = TRUE, call = call)
}

check_prob_matrix <- function(x, arg, rows, cols, call) {
  if (!is.numeric(x) || !is.matrix(x)) {
    bulkem_abort(c(
      "{.arg {arg}} must be a numeric matrix.",
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  if (nrow(x) != rows || (!is.na(cols) && ncol(x) != cols) || ncol(x) == 0) {
    want <- if (is.na(cols)) "{rows} row{?s} (one per state)" else "{rows} x {cols} (one row and column per state)"
    bulkem_abort(c(
      paste0("{.arg {arg}} must be ", want, ", as {.arg start} has {rows} state{?s}."),
      x = "It is {nrow(x)} x {ncol(x)}."
    ), call = call)
  }
  check_probs(x, arg, vector = FALSE, call = call)
}

# Rows of probabilities: finite, >= 0, summing to 1 within 1e-8.
check_probs <- function(x, arg, vector, call) {
  bad <- which(!is.finite(x) | x < 0, arr.ind = TRUE)
  if (length(bad) > 0) {
    r <- bad[1, 1]
    c <- bad[1, 2]
    where <- if (vector) "Element {c}" else "Element [{r}, {c}]"
    bulkem_abort(c(
      "{.arg {arg}} must contain only probabilities (finite and >= 0).",
      x = paste0(where, " is {x[r, c]}.")
    ), call = call)
  }
  sums <- rowSums(x)
  off <- which(abs(sums - 1) > 1e-8)
  if (length(off) > 0) {
    r <- off[1]
    bulkem_abort(c(
      if (vector) "{.arg {arg}} must sum to 1." else "Every row of {.arg {arg}} must sum to 1.",
      x = if (vector) "It sums to {format(sums[r], digits = 10)}." else
        "Row {r} sums to {format(sums[r], digits = 10)}."
    ), call = call)
  }
  invisible(x)
}

# Symbol labels implied by factor or character sequences (NULL for codes).
seq_symbols <- function(seqs) {
  if (!is.list(seqs)) seqs <- list(seqs)
  f <- Filter(is.factor, seqs)
  if (length(f) > 0) return(unique(unlist(lapply(f, levels), use.names = FALSE)))
  ch <- Filter(is.character, seqs)
  if (length(ch) > 0) return(sort(unique(unlist(ch, use.names = FALSE))))
  NULL
}

# (sequence, position) of the flat index `i` given the sequence lengths.
locate <- function(i, lengths) {
  ends <- cumsum(as.double(lengths))
  s <- findInterval(i - 1, ends) + 1L
  c(s, i - (ends[s] - lengths[s]))
}

# Validate sequences and flatten them: list(symbols = integer codes 1..V,
# lengths, names). `symbols` are the model's symbol labels (for factor and
# character sequences); codes above V are found by the core or hmm_fit().
check_seqs <- function(seqs, symbols, n_symbols = NULL, arg = "seqs", call) {
  if (is.atomic(seqs) && is.null(dim(seqs)) && length(seqs) > 0) seqs <- list(seqs)
  if (!is.list(seqs) || is.data.frame(seqs)) {
    bulkem_abort(c(
      "{.arg {arg}} must be a list of sequences (integer vectors, factors or character vectors).",
      x = "You supplied {describe_value(seqs)}."
    ), call = call)
  }
  if (length(seqs) == 0) {
    bulkem_abort("{.arg {arg}} must contain at least one sequence.", call = call)
  }
  ok <- vapply(seqs, function(x) (is.numeric(x) || is.factor(x) || is.character(x)) && is.null(dim(x)), NA)
  if (!all(ok)) {
    bad <- which(!ok)[1]
    bulkem_abort(c(
      "Every sequence in {.arg {arg}} must be an integer vector, a factor or a character vector.",
      x = "Sequence {bad} is {describe_value(seqs[[bad]])}."
    ), call = call)
  }
  lens <- lengths(seqs)
  if (any(lens == 0)) {
    bulkem_abort(c(
      "Every sequence in {.arg {arg}} must have at least one symbol.",
      x = "Sequence {which(lens == 0)[1]} is empty."
    ), call = call)
  }
  labelled <- vapply(seqs, function(x) is.factor(x) || is.character(x), NA)
  given <- seqs
  if (any(labelled)) {
    if (is.null(symbols)) symbols <- character()
    seqs[labelled] <- lapply(seqs[labelled], function(x) match(as.character(x), symbols))
  }
  flat <- unlist(seqs, use.names = FALSE)
  if (anyNA(flat)) {
    bad <- which(is.na(flat))[1]
    where <- locate(bad, lens)
    original <- as.character(given[[where[1]]][where[2]])
    if (labelled[where[1]] && !is.na(original)) {
      bulkem_abort(c(
        "Every symbol in {.arg {arg}} must be one of the model's symbols.",
        x = "Sequence {where[1]} has {.val {original}} at position {where[2]}.",
        i = "The symbols are {.val {symbols}}."
      ), call = call)
    }
    bulkem_abort(c(
      "{.arg {arg}} must not contain missing values.",
      x = "Sequence {where[1]} has {.val {NA}} at position {where[2]}."
    ), call = call)
  }
  bad <- which(flat < 1 | flat != round(flat) | flat > .Machine$integer.max)
  if (length(bad) > 0) {
    where <- locate(bad[1], lens)
    bulkem_abort(c(
      "Every symbol in {.arg {arg}} must be a whole number of at least 1.",
      x = "Sequence {where[1]} has {flat[bad[1]]} at position {where[2]}."
    ), call = call)
  }
  if (!is.null(n_symbols)) check_symbol_range(flat, lens, n_symbols, arg, call)
  list(symbols = as.integer(flat), lengths = as.integer(lens), names = names(seqs))
}

check_symbol_range <- function(flat, lens, n_symbols, arg, call) {
  if (max(flat) > n_symbols) {
    bad <- which(flat > n_symbols)[1]
    where <- locate(bad, lens)
    bulkem_abort(c(
      "Every symbol in {.arg {arg}} must be between 1 and {n_symbols} (the number of symbols).",
      x = "Sequence {where[1]} has symbol {flat[bad]} at position {where[2]}."
    ), call = call)
  }
}

# Split a flat vector into one element per sequence of the given lengths.
split_flat <- function(x, lengths) {
  ends <- cumsum(lengths)
  lapply(seq_along(lengths), function(i) x[(ends[i] - lengths[i] + 1):ends[i]])
}
