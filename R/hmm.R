#' A hidden Markov model
#'
#' Builds and validates a hidden Markov model with N hidden states: the
#' probabilities of the first state (`start`), of moving from one state to
#' the next (`trans`) and what each state emits. The emission is either an
#' N x V matrix `emis` of symbol probabilities (a categorical, or discrete,
#' HMM with V observable symbols), or an `emission` made by
#' [gaussian_emission()] (real-valued observations, a normal distribution
#' per state), [poisson_emission()] (counts, a Poisson distribution per
#' state) or [categorical_emission()] (the same as `emis`). Exact zeros are
#' allowed, and so are probabilities of any size down to the smallest
#' double (subnormal ones included): the computations stay exact where
#' products of them leave the double range (see [hmm_loglik()]). The model
#' is used by [hmm_loglik()], [hmm_viterbi()], [hmm_posterior()] and
#' [hmm_simulate()], and returned (fitted) by [hmm_fit()].
#'
#' Those functions keep the last four models they were given (laid out,
#' checked and, on a GPU, copied to the device; models of up to 2^23
#' parameters, 64 MiB) and find them again by their values, compared bit
#' for bit while the pass already runs on the model they resemble (its
#' result is dropped if they differ): repeated calls with one model skip
#' that work, most of a call at 512 states (BENCHMARKS.md). A model changed
#' in any way, in place included, is a new model and is checked again.
#'
#' State labels come from `names(start)`, `rownames(trans)`,
#' `colnames(trans)` or the emission's (`rownames(emis)`, `names(mean)`,
#' `names(sd)`, `names(rate)`; the first that is set); they default to
#' `"1"`, `"2"`, ... Symbol labels (categorical) come from `colnames(emis)`;
#' sequences may then be given as character vectors or factors of the
#' symbol labels. See [hmm_emissions] for the observations each emission
#' takes.
#'
#' @param start Probabilities of the first state: a numeric vector of length
#'   N summing to 1.
#' @param trans N x N transition matrix: `trans[i, j]` is the probability of
#'   moving from state i to state j; every row sums to 1.
#' @param emis N x V emission matrix: `emis[i, k]` is the probability of
#'   emitting symbol k in state i; every row sums to 1. Give `emis` or
#'   `emission`, not both (an emission object given as `emis`, e.g.
#'   `hmm(start, trans, gaussian_emission(mean, sd))`, is taken as
#'   `emission`).
#' @param emission An emission made by [gaussian_emission()],
#'   [poisson_emission()] or [categorical_emission()], with N states.
#' @return An object of class `bulkem_hmm`: a list with `start` (named
#'   vector), `trans` (matrix with dimnames `from`/`to`) and either `emis`
#'   (categorical: matrix with dimnames `state`/`symbol`; also for
#'   `emission = categorical_emission(emis)`, so both give the same model)
#'   or `emission` (Gaussian and Poisson: the emission object, its
#'   parameters named by state). Errors of class `bulkem_error_input` name
#'   the argument and the entry that is not a probability (missing,
#'   infinite, negative) or the row that does not sum to 1 (within 1e-8),
#'   and an emission whose number of states differs from `start`'s.
#' @seealso [hmm_fit()] to estimate a model from sequences; [hmm_emissions].
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
#'
#' # Gaussian and Poisson emissions
#' trans <- matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE)
#' hmm(c(0.5, 0.5), trans, emission = gaussian_emission(c(low = 0, high = 3), c(1, 1)))
#' hmm(c(0.5, 0.5), trans, emission = poisson_emission(c(1, 10)))
#' @export
hmm <- function(start, trans, emis, emission) {
  call <- environment()
  if (!missing(emis) && inherits(emis, "bulkem_emission")) {
    if (!missing(emission)) {
      bulkem_abort(c(
        "{.arg emis} and {.arg emission} can't both be given.",
        i = "Pass the emission once, as {.arg emission}."
      ), call = call)
    }
    emission <- emis
    emis <- NULL
  } else if (missing(emis)) {
    emis <- NULL
  }
  if (missing(emission)) emission <- NULL
  if (is.null(emis) == is.null(emission)) {
    bulkem_abort(c(
      if (is.null(emis)) "One of {.arg emis} or {.arg emission} must be given." else
        "{.arg emis} and {.arg emission} can't both be given.",
      i = "{.arg emis}: a matrix of emission probabilities (categorical); {.arg emission}: an emission made by {.fn gaussian_emission}, {.fn poisson_emission} or {.fn categorical_emission}."
    ), call = call)
  }
  check_prob_vector(start, "start", call)
  N <- length(start)
  check_prob_matrix(trans, "trans", N, N, call)
  if (!is.null(emis)) {
    check_prob_matrix(emis, "emis", N, NA, call)
    emission <- new_emission("categorical", list(probs = emis), rownames(emis))
    emission_states <- rownames(emis)
  } else {
    if (!inherits(emission, "bulkem_emission")) {
      bulkem_abort(c(
        "{.arg emission} must be an emission made by {.fn gaussian_emission}, {.fn poisson_emission} or {.fn categorical_emission}.",
        x = "You supplied {describe_value(emission)}."
      ), call = call)
    }
    emission <- model_emission(list(emission = emission), "emission", call)
    fam <- emission_family(emission$family)
    if (fam$n_states(emission) != N) {
      bulkem_abort(c(
        "{.arg emission} must have one state per element of {.arg start} ({N}).",
        x = "It has {fam$n_states(emission)} state{?s}."
      ), call = call)
    }
    # Labels the user gave (not the default 1..N of the constructors).
    emission_states <- fam$states(emission)
    if (identical(unname(emission_states), as.character(seq_len(N)))) emission_states <- NULL
  }
  states <- names(start) %||% rownames(trans) %||% colnames(trans) %||% emission_states %||%
    as.character(seq_len(N))
  new_hmm(as.double(start), unname(trans), emission, states)
}

# A bulkem_hmm from checked parts: a categorical emission is kept as the
# matrix `emis` (the model of hmm(start, trans, emis)), any other as the
# emission object `emission`, labelled by `states`.
new_hmm <- function(start, trans, emission, states) {
  storage.mode(trans) <- "double"
  emission <- emission_family(emission$family)$relabel(emission, states)
  model <- list(
    start = stats::setNames(start, states),
    trans = matrix(trans, length(states), dimnames = list(from = states, to = states))
  )
  if (emission$family == "categorical") {
    model$emis <- emission$probs
  } else {
    model$emission <- emission
    # An explicit NULL: `model$emis` would otherwise partially match
    # `emission` and look like a categorical model's matrix.
    model["emis"] <- list(NULL)
  }
  structure(model, class = "bulkem_hmm")
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
#' @return A list of `n` sequences, with attribute `states`: the list of
#'   hidden state paths (integer codes `1..N`). The sequences are integer
#'   vectors of symbol codes `1..V` for a categorical model (the labels are
#'   `colnames(model$emis)`), double vectors for a Gaussian one, and for a
#'   Poisson one integer vectors of counts, or double vectors (whole
#'   numbers) when some count of the call exceeds the largest integer
#'   (`.Machine$integer.max`, possible only with rates near 2e9 or more).
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
#' # Gaussian observations
#' g <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
#'   emission = gaussian_emission(c(0, 4), c(1, 0.5)))
#' round(hmm_simulate(g, n = 1, length = 8, seed = 1)[[1]], 2)
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
  em <- model_emission(model, "model", call)
  fam <- emission_family(em$family)
  # Refused here, before R builds the lengths (n of them) or anything else.
  hmm_memory("simulate", length(model$start), fam$shape(em), n, length, 0L, 3L, call, "hmm_simulate")
  lens <- rep_len(as.integer(length), n)
  raw <- call_core(
    hmm_simulate_(model$start, double_matrix(model$trans), fam$to_core(em), lens, seed),
    call, "hmm_simulate"
  )
  structure(split_flat(fam$sim_obs(raw$obs), lens), states = split_flat(raw$states, lens))
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
#' @param seqs The observation sequences, any lengths >= 1 (a single vector
#'   is one sequence): for a categorical model a list of integer vectors of
#'   symbol codes `1..V`, or of character vectors or factors whose values
#'   are symbol labels (`colnames(model$emis)`); for a Gaussian model a
#'   list of numeric vectors of finite numbers; for a Poisson model a list
#'   of vectors of counts (whole numbers >= 0). Values that do not fit are
#'   errors of class `bulkem_error_input` naming the sequence and position.
#' @param use.gpu `NA` (default): a CUDA GPU when one is usable and the job
#'   is large enough, otherwise the CPU (with a one-time message when no GPU
#'   is usable); `TRUE`: a GPU or an error saying why not; `FALSE`: the CPU.
#'   "Large enough" means that the GPU is expected to answer sooner than
#'   the CPU threads this call has: models of both, fitted to measured
#'   times, of the number of states, sequences, observations, the longest
#'   sequence, passes and threads (BENCHMARKS.md, "HMM backend choice by
#'   the call's shape"). With 16 threads, one sequence of up to 1,000
#'   observations stays on the CPU below 128 states, and 1,000 sequences
#'   of 100 go to the GPU at any number of states. The GPU kernels handle
#'   up to 2048 states, with every emission family. A fit records the
#'   backend that ran it (`$backend`).
#' @param parallel `"none"`: all sequences in this R session. `"future"`:
#'   the sequences are split into chunks of consecutive sequences and run on
#'   the workers of the current [future::plan()], one future per chunk
#'   ([future::future()]), each chunk sent only its own sequences
#'   and each worker choosing its own backend (`use.gpu` is resolved there).
#'   Every sequence is computed on its own, so the result is identical to
#'   `"none"` (on the same backend). Needs \pkg{future}.
#' @param chunk.size Sequences per chunk (`NULL`: about 4 chunks per future
#'   worker, fewer for small jobs; one chunk with `parallel = "none"`).
#' @param resume `NULL`, or [bulkem_partial()] after the same call with
#'   `parallel = "future"` lost workers (a cluster job cancelled, out of time
#'   or memory): only the lost chunks' sequences are computed, and the
#'   result is identical to an uninterrupted call's.
#' @return A numeric vector, one log-likelihood per sequence (named as
#'   `seqs`).
#' @references Rabiner, L. R. (1989). A tutorial on hidden Markov models and
#'   selected applications in speech recognition. *Proceedings of the IEEE*,
#'   77(2), 257-286. \doi{10.1109/5.18626}
#' @examples
#' model <- hmm(c(0.6, 0.4), matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
#'   matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE))
#' hmm_loglik(model, list(c(1, 2, 3), c(3, 3, 3, 1)), use.gpu = FALSE)
#' # Poisson counts
#' counts <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
#'   emission = poisson_emission(c(1, 6)))
#' hmm_loglik(counts, list(c(0, 2, 1, 7, 5)), use.gpu = FALSE)
#' @export
hmm_loglik <- function(model, seqs, use.gpu = NA, parallel = c("none", "future"), chunk.size = NULL,
                       resume = NULL) {
  call <- environment()
  model <- hmm_model(model, "model", call)
  s <- model_seqs(model, seqs, "seqs", call)
  raw <- hmm_run("loglik", model, s, use.gpu, parallel, chunk.size, 1, call, resume = resume)
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
#' @param simplify `FALSE` (default) for one path per sequence in a list;
#'   `TRUE`, for sequences that all have the same length T, for one T x M
#'   integer matrix with a column per sequence, made in one allocation
#'   (with 100,000 sequences R's allocation of one vector each costs more
#'   than the decoding). Sequences of several lengths are then an error.
#' @return A list with
#'   \describe{
#'   \item{`path`}{a list of integer vectors of state codes `1..N` (labels:
#'     `names(model$start)`), one per sequence; all `NA` for a sequence the
#'     model cannot produce. With `simplify = TRUE`, a T x M integer matrix
#'     of them, a column per sequence (column names: the sequences'
#'     names).}
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
hmm_viterbi <- function(model, seqs, use.gpu = NA, parallel = c("none", "future"), chunk.size = NULL,
                        resume = NULL, simplify = FALSE) {
  call <- environment()
  model <- hmm_model(model, "model", call)
  s <- model_seqs(model, seqs, "seqs", call)
  simplify <- check_simplify(simplify, s, "seqs", call)
  viterbi_result(hmm_run("viterbi", model, s, use.gpu, parallel, chunk.size, 1, call, resume = resume,
                         simplify = simplify), s, simplify)
}

viterbi_result <- function(raw, s, simplify = FALSE) {
  path <- if (!simplify) {
    stats::setNames(raw$path, s$names)
  } else if (is.null(dim(raw$path))) {
    # Chunks, bound end to end by c().
    matrix(raw$path, seq_length(s), length(s$lengths), dimnames = if (!is.null(s$names)) list(NULL, s$names))
  } else {
    raw$path
  }
  list(path = path, log_prob = stats::setNames(raw$log_prob, s$names))
}

# `simplify` checked, and with TRUE the sequences `s` of one length.
check_simplify <- function(simplify, s, arg, call) {
  check_flag(simplify, "simplify", call = call)
  if (simplify && length(s$lengths) > 1 && any(s$lengths != s$lengths[1])) {
    i <- which(s$lengths != s$lengths[1])[1]
    bulkem_abort(c(
      "{.code simplify = TRUE} needs sequences of one length: the result has a dimension per time step.",
      x = "Sequence 1 of {.arg {arg}} has {s$lengths[1]} observation{?s}; sequence {i} has {s$lengths[i]}.",
      i = "Use {.code simplify = FALSE} (the default) for a result per sequence, in a list."
    ), call = call)
  }
  simplify
}

# The one length of the sequences `s` of a simplified result (0 for none).
seq_length <- function(s) if (length(s$lengths)) s$lengths[[1]] else 0L

#' Posterior state probabilities of each sequence (forward-backward)
#'
#' For every sequence and time step t, the probability of each hidden state
#' given the whole sequence, P(state at t = i | sequence), by the scaled
#' forward-backward recursions. The result itself holds T x N numbers per
#' sequence (3 million symbols with 1,000 states: 24 GB, computed once and
#' written once into R's matrices, in parallel), so a call whose result
#' does not fit twice is refused with an error of class
#' `bulkem_error_memory` before any of it is allocated; the computation
#' needs no memory beyond the result.
#'
#' @inheritParams hmm_loglik
#' @param simplify `FALSE` (default) for one matrix per sequence in a list;
#'   `TRUE`, for sequences that all have the same length T, for one T x N x
#'   M array (`[t, i, m]`: sequence m's probability of state i at step t),
#'   made in one allocation (with 100,000 sequences R's allocation of one
#'   matrix each costs several times the forward-backward pass).
#'   Sequences of several lengths are then an error.
#' @return A list of matrices, one per sequence, each with one row per time
#'   step and one column per state (rows sum to 1); all `NA` for a sequence
#'   the model cannot produce. Attribute `loglik` holds the log-likelihood of
#'   each sequence. With `simplify = TRUE`, a T x N x M array whose
#'   `[, , m]` is sequence m's matrix (dimnames: `NULL`, the state labels,
#'   the sequences' names), with the same attribute `loglik`.
#' @references Rabiner, L. R. (1989). A tutorial on hidden Markov models and
#'   selected applications in speech recognition. *Proceedings of the IEEE*,
#'   77(2), 257-286. \doi{10.1109/5.18626}
#' @examples
#' model <- hmm(c(0.6, 0.4), matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
#'   matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE))
#' hmm_posterior(model, list(c(1, 2, 3)), use.gpu = FALSE)[[1]]
#' @export
hmm_posterior <- function(model, seqs, use.gpu = NA, parallel = c("none", "future"), chunk.size = NULL,
                          resume = NULL, simplify = FALSE) {
  call <- environment()
  model <- hmm_model(model, "model", call)
  s <- model_seqs(model, seqs, "seqs", call)
  simplify <- check_simplify(simplify, s, "seqs", call)
  posterior_result(hmm_run("posterior", model, s, use.gpu, parallel, chunk.size, 2, call, resume = resume,
                           simplify = simplify), s, model, simplify)
}

# The glue returns the matrices themselves (filled in parallel, NA for
# an impossible sequence): R only names them. A simplified array comes
# named from the glue (naming it here would copy it), unless chunks were
# bound end to end by c().
posterior_result <- function(raw, s, model, simplify = FALSE) {
  loglik <- stats::setNames(raw$loglik, s$names)
  if (!simplify) return(structure(stats::setNames(raw$probs, s$names), loglik = loglik))
  if (!is.null(dim(raw$probs))) return(raw$probs)
  structure(array(raw$probs, c(seq_length(s), length(model$start), length(s$lengths)),
                  dimnames = posterior_dimnames(names(model$start), s$names)),
            loglik = loglik)
}

# The dimnames of a simplified posterior array, or NULL.
posterior_dimnames <- function(states, seq_names) {
  if (is.null(states) && is.null(seq_names)) NULL else list(NULL, states, seq_names)
}

#' Fit a hidden Markov model to many sequences (Baum-Welch)
#'
#' Estimates the start and transition probabilities and the emission
#' parameters of an `n.states`-state hidden Markov model from all sequences
#' jointly by the Baum-Welch (EM) algorithm: every iteration sums the
#' expected counts (and, for Gaussian and Poisson emissions, the expected
#' sums of the observations) of every sequence (scaled forward-backward)
#' and re-estimates all parameters. The log-likelihood never decreases
#' from one iteration to the next (beyond rounding). Iterations stop when it
#' changes by less than `epsilon` (`status = "converged"`) or after
#' `max.iters` iterations (`status = "max_iters"`).
#'
#' **Emissions.** The emission family comes from `init` when it is given,
#' else from `emission`: categorical (the default; symbols `1..V`),
#' `"gaussian"` (real-valued observations, a mean and a standard deviation
#' per state) or `"poisson"` (counts, a rate per state). See
#' [hmm_emissions] for the observations each takes.
#'
#' **Starts.** With `init = NULL`, `random.inits` random models are tried
#' (start and transition probabilities drawn uniformly from their
#' simplices; categorical emission rows likewise; Gaussian means drawn from
#' the observations with every standard deviation that of all
#' observations; Poisson rates drawn from the observations plus a tenth of
#' their mean; all keyed by `seed` and the start index) and the one
#' reaching the highest log-likelihood is kept (ties to the first). Baum-Welch finds a local
#' maximum only, so several starts are advisable. States of a fitted model
#' are identified only up to relabelling.
#'
#' **Variance floors (Gaussian).** The likelihood of a Gaussian HMM is
#' unbounded: a state that collapses onto one observation (or a few equal
#' ones) has a variance tending to 0 and a density tending to infinity.
#' Baum-Welch would follow it there, so each M-step holds every state's
#' variance at least at `var.floor` (by default 1e-6 times the variance of
#' all observations). A state held at the floor in the last iteration is
#' reported in `floored` and by a warning of class
#' `bulkem_warning_variance_floor` (and `bulkem_warning`): its fitted
#' parameters describe a collapse, not a feature of the data; fewer states,
#' a larger `var.floor` or other starts avoid it.
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
#' count before normalising (start, transitions and, for categorical
#' emissions, the symbol counts; not Gaussian or Poisson parameters): a
#' maximum a posteriori estimate under Dirichlet priors with parameters
#' `1 + pseudocount`, which keeps every probability positive. The quantity
#' that then never decreases is the log-posterior, not the log-likelihood
#' reported.
#'
#' @inheritParams hmm_loglik
#' @param n.states Number of hidden states N (taken from `init` when it is
#'   given and `n.states` is missing).
#' @param n.symbols Number of symbols V (categorical emissions only; an
#'   error for other families). When missing: the columns of `init$emis`,
#'   else the number of levels of factor sequences, else the largest symbol
#'   code.
#' @param init A [hmm()] model to start from, instead of random starts, or a
#'   [hmm_fit()] result (to continue from its fitted model). Its emission
#'   family is the fit's.
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
#'   one future per chunk ([future::future()]), each worker choosing its own backend
#'   (`use.gpu` is resolved there). The result is identical to `"none"`;
#'   see Details. Needs \pkg{future}, and bulkem
#'   installed where the workers can load it.
#' @param chunk.size Random starts per chunk. With `parallel = "future"`
#'   each chunk is one future; the default makes about 4 chunks per worker,
#'   fewer when a chunk would do less than 2e8 symbol x N^2 x pass units (a
#'   future costs tens of milliseconds). With `parallel = "none"`, starts
#'   per call of the core (progress is reported between calls); the default
#'   is one call, or about 50 with \pkg{progressr} reporting. The chunking
#'   never changes the result.
#' @param resume `NULL`, or [bulkem_partial()] after the same call with
#'   `parallel = "future"` lost workers (a cluster job cancelled, out of time
#'   or memory): only the lost chunks' starts run, and the fit is identical
#'   to an uninterrupted call's. With `seed = NULL` the partial's seed is
#'   used.
#' @param emission The emission family when `init` is not given:
#'   `"categorical"` (or `NULL`, the default), `"gaussian"` or `"poisson"`,
#'   or an emission object from [gaussian_emission()], [poisson_emission()]
#'   or [categorical_emission()] (only its family is used; to start from
#'   its parameters, pass `init = hmm(start, trans, emission = ...)`). With
#'   `init`, it must name `init`'s family if given.
#' @param var.floor Gaussian emissions only (an error for other families):
#'   the smallest variance an M-step may give a state, a number > 0. `NULL`
#'   (default): 1e-6 times the variance of all observations. See Details.
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
#'   \item{`n_sequences`, `n_obs`}{number of sequences and of observations
#'     (symbols).}
#'   \item{`floored`}{logical, one per state (named): the states whose
#'     variance the last M-step held at the variance floor (always `FALSE`
#'     for categorical and Poisson emissions); see Details.}
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
#' if (requireNamespace("future", quietly = TRUE)) {
#'   oplan <- future::plan(future::sequential)
#'   fit2 <- hmm_fit(seqs, n.states = 2, n.symbols = 3, random.inits = 3,
#'     seed = 42, use.gpu = FALSE, parallel = "future", chunk.size = 1)
#'   future::plan(oplan)
#'   identical(fit2$model, fit$model)
#' }
#'
#' # Gaussian emissions: simulate, fit, decode
#' g <- hmm(c(0.5, 0.5), matrix(c(0.95, 0.05, 0.1, 0.9), 2, byrow = TRUE),
#'   emission = gaussian_emission(c(0, 3), c(1, 0.5)))
#' x <- hmm_simulate(g, n = 50, length = 60, seed = 1)
#' gfit <- hmm_fit(x, n.states = 2, emission = "gaussian", random.inits = 3,
#'   seed = 1, use.gpu = FALSE)
#' gfit$model$emission
#' head(predict(gfit, x[1], use.gpu = FALSE)[[1]], 20)
#' @export
hmm_fit <- function(seqs, n.states, n.symbols, init = NULL, max.iters = 100, epsilon = 1e-6,
                    random.inits = 1, pseudocount = 0, seed = NULL, use.gpu = NA,
                    parallel = c("none", "future"), chunk.size = NULL, emission = NULL,
                    var.floor = NULL, resume = NULL) {
  call <- environment()
  parallel <- match_arg(parallel, c("none", "future"), "parallel", call)
  if (!is.null(init)) init <- hmm_model(init, "init", call)
  init_em <- if (!is.null(init)) model_emission(init, "init", call)
  family <- emission_family_name(emission, "emission", call)
  if (!is.null(init) && !is.null(emission) && family != init_em$family) {
    bulkem_abort(c(
      "{.arg emission} must be the family of {.arg init} when both are given.",
      x = "{.arg init} has {init_em$family} emissions; {.arg emission} is {family}."
    ), call = call)
  }
  if (!is.null(init)) family <- init_em$family
  fam <- emission_family(family)
  if (missing(n.states)) {
    if (is.null(init)) bulkem_abort("{.arg n.states} must be given (or {.arg init}).", call = call)
    n.states <- length(init$start)
  }
  N <- check_count(n.states, "n.states", call = call)
  if (!is.null(var.floor)) {
    if (!fam$var_floor) {
      bulkem_abort(c(
        "{.arg var.floor} applies to Gaussian emissions only.",
        x = "This fit has {family} emissions; leave {.arg var.floor} out."
      ), call = call)
    }
    if (!is.numeric(var.floor) || length(var.floor) != 1 || !is.finite(var.floor) || var.floor <= 0) {
      bulkem_abort(c(
        "{.arg var.floor} must be a finite number > 0 (or {.code NULL} for the default).",
        x = "You supplied {describe_value(var.floor)}."
      ), call = call)
    }
  }
  setup <- fam$fit_setup(seqs, init_em, if (!missing(n.symbols)) n.symbols, call)
  s <- setup$s
  if (!is.null(init) && (length(init$start) != N || !identical(fam$shape(init_em), setup$shape))) {
    if (family == "categorical") {
      bulkem_abort(c(
        "{.arg init} must have {.arg n.states} states and {.arg n.symbols} symbols.",
        x = "{.arg init} has {length(init$start)} state{?s} and {ncol(init_em$probs)} symbol{?s}; {.arg n.states} = {N}, {.arg n.symbols} = {setup$shape$V}."
      ), call = call)
    }
    bulkem_abort(c(
      "{.arg init} must have {.arg n.states} states.",
      x = "{.arg init} has {length(init$start)} state{?s}; {.arg n.states} = {N}."
    ), call = call)
  }
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
  seed <- check_seed(resume_seed(seed, resume), call)
  if (!is.null(chunk.size)) chunk.size <- check_count(chunk.size, "chunk.size", call = call)
  check_flag(use.gpu, "use.gpu", allow_na = TRUE, call = call)
  # Before anything of size N x N or N x V: the core's estimate, with the
  # copies of the model R makes of the result.
  starts <- if (is.null(init)) random.inits else 1L
  hmm_memory("fit", N, setup$shape, length(s$lengths), s$lengths, starts, 2L, call, "hmm_fit")
  symbols_total <- sum(as.double(s$lengths))
  init_rows <- if (is.null(init)) NULL else
    list(start = init$start, trans = double_matrix(init$trans), emission = fam$to_core(init_em))
  # The default floor is NaN, not NA: extendr refuses NA for a double
  # argument ("Must not be NA"), and the glue reads NaN as "none given".
  settings <- list(N = N, emission = setup$shape, area = fam$area, init = init_rows,
                   max.iters = max.iters, epsilon = epsilon, pseudocount = pseudocount,
                   var.floor = if (is.null(var.floor)) NaN else as.double(var.floor), seed = seed)
  r <- resumable("hmm_fit", "starts", c(settings, list(starts = starts)),
                 list(obs = numbers_fingerprint(s$obs), lengths = s$lengths))
  if (!is.null(resume)) resume <- check_resume(resume, r, call)
  settings <- c(settings, exec_settings(parallel, use.gpu, call))
  if (parallel == "none") {
    # The whole fit picks the backend (as one call would); a worker picks by
    # its starts.
    settings$backend <- call_core(backend_choice_(fam$area, settings$backend, c(N, symbols_total, 0, settings$threads,
                                                                  length(s$lengths), max(0, s$lengths), max.iters * starts)),
                                  call, "hmm_fit")
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
  # A resumed call keeps the chunks of the call it completes.
  chunks <- if (is.null(resume)) chunk_indices(starts, size) else resume$chunks
  data <- list(obs = s$obs, lengths = s$lengths)

  started <- proc.time()[["elapsed"]]
  # The main run keeps its finished chunks when workers are lost; a re-fit
  # of one start (below) does not.
  run <- function(chunks, done = NULL, on_lost = NULL) {
    map_chunks(
      chunks, hmm_fit_chunk,
      # Baum-Welch needs every sequence at every iteration: each chunk of
      # starts gets all of them.
      slice = function(idx) data,
      args = settings, parallel = parallel, progress = progress, what = "starts",
      on_error = function(msg, where) core_error(msg, call, "hmm_fit", if (parallel == "future") where),
      on_lost = on_lost, done = done,
      call = call
    )
  }
  keep <- function(results, lost) lose_chunks(r, chunks, results, lost, call)
  raw <- merge_fit_chunks(run(chunks, resume$results, keep), function(start) {
    # Progress is complete: a re-fit of one start (rare, see
    # merge_fit_chunks()) does not report.
    progress <<- NULL
    run(list(start))[[1]]
  })
  seconds <- proc.time()[["elapsed"]] - started
  states <- if (!is.null(init)) names(init$start) else as.character(seq_len(N))
  as_model <- function(m) {
    new_hmm(m$start, matrix(m$trans, N, N, byrow = TRUE),
            fam$from_core(m$emission, states, setup$symbols), states)
  }
  fit <- structure(list(
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
    seconds = seconds,
    floored = stats::setNames(as.logical(raw$floored), states)
  ), class = "bulkem_hmm_fit")
  if (any(fit$floored)) warn_variance_floor(fit, var.floor, call)
  fit
}

# The warning of a Gaussian fit whose last M-step held some states'
# variances at the floor. The floor is `var.floor`, or (the default, which
# the core computes from the data) the variance it gave those states: the
# M-step sets a floored state's sd to sqrt(floor).
warn_variance_floor <- function(fit, var.floor, call) {
  which_states <- names(fit$floored)[fit$floored]
  floor <- if (!is.null(var.floor)) var.floor else
    fit$model$emission$sd[fit$floored][1]^2
  how <- if (is.null(var.floor)) " (the default: 1e-6 x the variance of all observations)" else ""
  these <- if (length(which_states) == 1) "this state's" else "these states'"
  cli::cli_warn(c(
    paste0("The variance of state{?s} {.val {which_states}} was held at the floor ",
           format(floor, digits = 4), how, " in the last Baum-Welch iteration."),
    i = paste0("The likelihood of a Gaussian HMM is unbounded: a state can collapse onto a few observations, ",
               "its variance tending to 0. The floor stops this, so ", these, " parameters ",
               "describe such a collapse rather than the data."),
    i = "Fit fewer states ({.arg n.states}), set a larger {.arg var.floor}, or try other starts ({.arg random.inits}, {.arg seed}, {.arg init}); {.code fit$floored} marks the states."
  ), class = c("bulkem_warning_variance_floor", "bulkem_warning"), call = call)
}

# ---- helpers ---------------------------------------------------------------

`%||%` <- function(x, y) if (is.null(x)) y else x

# A matrix for the glue, which takes it as R holds it (column by column)
# and lays it out itself: no copy unless it holds integers.
double_matrix <- function(m) {
  if (!is.double(m)) storage.mode(m) <- "double"
  m
}

# One pass ("loglik", "viterbi" or "posterior") over the sequences `s`
# (from check_seqs()), in this session or split by sequences over future
# workers (map_chunks(), R/parallel.R). Each sequence is computed on its own,
# so the chunking never changes a result. Returns the core's fields, bound.
hmm_run <- function(pass, model, s, use.gpu, parallel, chunk.size, passes, call, fn = paste0("hmm_", pass),
                    resume = NULL, simplify = FALSE) {
  parallel <- match_arg(parallel, c("none", "future"), "parallel", call)
  if (!is.null(chunk.size)) chunk.size <- check_count(chunk.size, "chunk.size", call = call)
  # Here, not only where the chunks run (future workers resolve use.gpu).
  check_flag(use.gpu, "use.gpu", allow_na = TRUE, call = call)
  em <- model_emission(model, "model", call)
  fam <- emission_family(em$family)
  n <- length(s$lengths)
  total <- sum(as.double(s$lengths))
  N <- length(model$start)
  # The whole call's memory, with R's copies of the result, before anything
  # of its size is built or any chunk runs: posteriors and paths are written
  # once, into R's matrices and vectors; log-likelihoods are copied here.
  # A simplified result from several chunks is bound by c() and made an
  # array again: three copies.
  chunked <- parallel == "future" || (!is.null(chunk.size) && chunk.size < n)
  # The session's threads, read once (0.2 ms a reading on the development VM).
  threads <- cpu_threads()
  hmm_memory(pass, N, fam$shape(em), n, s$lengths, 1L, if (pass == "loglik" || (simplify && chunked)) 3L else 1L, call, fn,
             threads)
  settings <- list(pass = pass, passes = passes, start = model$start, trans = double_matrix(model$trans),
                   emission = fam$to_core(em), area = fam$area, simplify = simplify,
                   seq_names = if (simplify) s$names)
  r <- resumable(fn, "sequences", settings, list(obs = numbers_fingerprint(s$obs), lengths = s$lengths))
  if (!is.null(resume)) resume <- check_resume(resume, r, call)
  settings <- c(settings, exec_settings(parallel, use.gpu, call, threads))
  if (parallel == "none") {
    # The whole job picks the backend; a worker picks by its chunk.
    settings$backend <- call_core(backend_choice_(fam$area, settings$backend, c(N, total, forward_passes(pass, passes), settings$threads, n,
                                                                    max(0, s$lengths), e_steps(pass))), call, fn)
  }
  size <- if (!is.null(chunk.size)) {
    chunk.size
  } else if (parallel == "future") {
    future_chunk_size(n, bytes = fam$obs_bytes * total, work = total * N * N * passes,
                      min_work = MIN_CHUNK_WORK)
  } else {
    n
  }
  ends <- cumsum(as.double(s$lengths))
  # A resumed call keeps the chunks of the call it completes.
  chunks <- if (is.null(resume)) chunk_indices(n, size) else resume$chunks
  parts <- map_chunks(
    chunks, hmm_chunk,
    slice = function(idx) {
      # One chunk of every sequence: no copy of the observations.
      if (length(idx) == n) return(list(obs = s$obs, lengths = s$lengths))
      from <- ends[idx[1]] - s$lengths[idx[1]] + 1
      list(obs = s$obs[from:ends[idx[length(idx)]]], lengths = s$lengths[idx])
    },
    args = settings, parallel = parallel,
    progress = if (parallel == "future") make_progress(n), what = "sequences",
    on_error = function(msg, where) core_error(msg, call, fn, if (parallel == "future") where),
    on_lost = function(results, lost) lose_chunks(r, chunks, results, lost, call),
    done = resume$results,
    call = call
  )
  bind_chunks(parts)
}

# The core's memory estimate of an HMM call (src/rust/core/src/hmm/size.rs),
# checked before R builds anything for it: a classed memory error naming
# the largest part, or nothing. `N` states; `shape` the glue's emission
# list (its family and, categorical, V: the family's shape()); `lengths`
# one per sequence, or one for all `n`.
hmm_memory <- function(pass, N, shape, n, lengths, starts, copies, call, fn, threads = cpu_threads()) {
  call_core(hmm_memory_(pass, as.double(N), shape, as.double(n), as.double(lengths),
                        as.integer(threads), as.double(starts), as.integer(copies)), call, fn)
  invisible(NULL)
}

# The backend choice's passes of an HMM `pass` of `passes` passes: a
# posterior is one forward-backward pass, the others forward passes.
forward_passes <- function(pass, passes) if (pass == "posterior") 0 else passes
e_steps <- function(pass) if (pass == "posterior") 1 else 0

# One chunk of sequences of an HMM pass, here or on a future worker.
hmm_chunk <- function(part, idx, st) {
  ex <- chunk_exec(st)
  backend <- backend_choice_(st$area, ex$backend, c(length(st$start), sum(as.double(part$lengths)), forward_passes(st$pass, st$passes),
                                                      ex$threads, length(part$lengths), max(0, part$lengths), e_steps(st$pass)))
  out <- switch(st$pass,
    loglik = hmm_loglik_(st$start, st$trans, st$emission, part$obs, part$lengths, ex$threads, backend),
    viterbi = hmm_viterbi_(st$start, st$trans, st$emission, part$obs, part$lengths, ex$threads, backend,
                           isTRUE(st$simplify), if (!is.null(st$seq_names)) list(NULL, st$seq_names[idx])),
    posterior = hmm_posterior_(st$start, st$trans, st$emission, part$obs, part$lengths, ex$threads, backend,
                               if (isTRUE(st$simplify)) {
                                 posterior_dimnames(names(st$start), st$seq_names[idx])
                               } else if (!is.null(names(st$start))) {
                                 list(NULL, names(st$start))
                               }, isTRUE(st$simplify))
  )
  if (st$pass == "loglik") list(loglik = out) else out
}

# One chunk of the starts of hmm_fit() (their global indices `idx`), here
# or on a future worker: whole Baum-Welch fits over all sequences. The core
# keys start k by (seed, k), so a chunk's starts are those of one call.
hmm_fit_chunk <- function(part, idx, st) {
  ex <- chunk_exec(st)
  backend <- backend_choice_(st$area, ex$backend,
                             c(st$N, sum(as.double(part$lengths)), 0, ex$threads,
                               length(part$lengths), max(0, part$lengths), st$max.iters * length(idx)))
  raw <- hmm_fit_(part$obs, part$lengths, st$N, st$emission, st$init, st$max.iters, st$epsilon,
                  length(idx), st$pseudocount, st$var.floor, st$seed, idx[1] - 1L, ex$threads, backend)
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
# pick, which is usually that start; it is not when a lower start of the
# chunk ties with the chunk's best but not with the best of all, or (a
# positive log-likelihood, possible with densities: Gaussian emissions)
# when the tolerance of the best of all is wider than the chunk's. Then
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

# The sequences `seqs` checked and flattened for `model` (a bulkem_hmm) by
# its emission family: list(obs, lengths, names); errors name `arg`.
model_seqs <- function(model, seqs, arg, call) {
  em <- model_emission(model, "model", call)
  emission_family(em$family)$check_obs(em, seqs, arg, call)
}

# Validate categorical sequences and flatten them: list(obs = integer codes
# 1..V, lengths, names). `symbols` are the model's symbol labels (for
# factor and character sequences); codes above V are found by the core or
# hmm_fit().
check_seqs <- function(seqs, symbols, n_symbols = NULL, arg = "seqs", call) {
  # The common case, a list of plain integer or double code vectors, is
  # typed, flattened and checked by the core's threads in one call; any
  # other input or any problem takes the checks below, which say what and
  # where.
  if (is.list(seqs) && !is.object(seqs) && length(seqs) > 0) {
    flat <- hmm_symbol_codes_(seqs, if (is.null(n_symbols)) 0 else as.double(n_symbols), cpu_threads())
    if (!is.null(flat)) return(list(obs = flat, lengths = lengths(seqs), names = names(seqs)))
  }
  seqs <- check_seq_list(
    seqs, arg,
    c("integer vectors, factors or character vectors", "an integer vector, a factor or a character vector"),
    function(x) is.numeric(x) || is.factor(x) || is.character(x), "symbol", call
  )
  lens <- lengths(seqs)
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
  # Cheap whole-vector tests first (10^7 symbols: tens of ms, where the
  # element-wise test below takes 0.4 s); the position only on failure.
  rng <- c(min(flat), max(flat))  # range() would copy `flat` first
  whole <- is.integer(flat) || (rng[2] <= .Machine$integer.max && !any(flat != trunc(flat)))
  if (rng[1] < 1 || !whole) {
    bad <- which(flat < 1 | flat != round(flat) | flat > .Machine$integer.max)
    where <- locate(bad[1], lens)
    bulkem_abort(c(
      "Every symbol in {.arg {arg}} must be a whole number of at least 1.",
      x = "Sequence {where[1]} has {flat[bad[1]]} at position {where[2]}."
    ), call = call)
  }
  if (!is.null(n_symbols)) check_symbol_range(flat, lens, n_symbols, arg, call, top = rng[2])
  list(obs = as.integer(flat), lengths = as.integer(lens), names = names(seqs))
}

check_symbol_range <- function(flat, lens, n_symbols, arg, call, top = max(flat)) {
  if (top > n_symbols) {
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
