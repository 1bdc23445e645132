#' Methods for hidden Markov models and their fits
#'
#' `print` shows the parameters of a [hmm()] model (start and transition
#' probabilities, and the emission: symbol probabilities, Gaussian means
#' and standard deviations, or Poisson rates), or the fitted model and how
#' the fit went for a [hmm_fit()] result. `summary` adds the stationary
#' distribution and expected time spent in each state per visit and a line
#' per state about its emission (a model), or AIC and BIC (a fit). `logLik`
#' returns the total log-likelihood with `df` = the number of free
#' parameters, (N - 1) + N (N - 1) plus the emission's: N (V - 1)
#' categorical, 2N Gaussian (mean and sd), N Poisson (rate); and `nobs` =
#' the number of observations (symbols), so [AIC()] and [BIC()] work. `plot`
#' draws the log-likelihood trace of a fit. All of them work for every
#' emission family.
#'
#' @param x,object A `bulkem_hmm` model or a `bulkem_hmm_fit`.
#' @param digits Significant digits to print.
#' @param ... Unused.
#' @return `print` returns `x` invisibly; `summary` an object of class
#'   `summary.bulkem_hmm` or `summary.bulkem_hmm_fit`; `logLik` a `logLik`
#'   object.
#' @name bulkem_hmm
#' @examples
#' model <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
#'   matrix(c(0.8, 0.2, 0.3, 0.7), 2, byrow = TRUE))
#' summary(model)
#' seqs <- hmm_simulate(model, n = 50, length = 40, seed = 1)
#' fit <- hmm_fit(seqs, 2, 2, random.inits = 2, seed = 1, use.gpu = FALSE)
#' summary(fit)
#' BIC(fit)
#' plot(fit)
#'
#' # A Poisson model and its fit
#' p <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
#'   emission = poisson_emission(c(1, 6)))
#' p
#' counts <- hmm_simulate(p, n = 30, length = 40, seed = 1)
#' pfit <- hmm_fit(counts, 2, emission = "poisson", seed = 1, use.gpu = FALSE)
#' summary(pfit)
#' logLik(pfit)
NULL

#' @rdname bulkem_hmm
#' @export
print.bulkem_hmm <- function(x, digits = 4, ...) {
  em <- model_emission(x, "x")
  fam <- emission_family(em$family)
  cat(sprintf("Hidden Markov model: %d state%s, %s\n", length(x$start),
              if (length(x$start) == 1) "" else "s", fam$describe(em)))
  cat("\nStart probabilities:\n")
  print(x$start, digits = digits)
  cat("\nTransition probabilities (from rows to columns):\n")
  print(x$trans, digits = digits)
  fam$print(em, digits)
  invisible(x)
}

#' @rdname bulkem_hmm
#' @export
summary.bulkem_hmm <- function(object, ...) {
  stay <- diag(object$trans)
  em <- model_emission(object, "object")
  structure(list(
    states = length(object$start), family = em$family,
    symbols = if (em$family == "categorical") ncol(em$probs) else NA_integer_,
    parameters = hmm_df(object),
    stationary = stationary(object$trans),
    expected_duration = stats::setNames(1 / (1 - stay), names(object$start)),
    model = object
  ), class = "summary.bulkem_hmm")
}

#' @export
print.summary.bulkem_hmm <- function(x, digits = 4, ...) {
  em <- model_emission(x$model, "x")
  fam <- emission_family(em$family)
  cat(sprintf("Hidden Markov model: %d state%s, %s, %d free parameters\n",
              x$states, if (x$states == 1) "" else "s", fam$describe(em), x$parameters))
  cat("\nStationary distribution:\n")
  print(x$stationary, digits = digits)
  cat("\nExpected steps per visit to each state:\n")
  print(x$expected_duration, digits = digits)
  fam$summary(em, digits)
  invisible(x)
}

#' @rdname bulkem_hmm
#' @export
print.bulkem_hmm_fit <- function(x, digits = 4, ...) {
  em <- model_emission(x$model, "x")
  fam <- emission_family(em$family)
  cat(sprintf("bulkem HMM fit: %d states, %s, %s sequences (%s %ss)\n",
              length(x$model$start), fam$describe(em), format(x$n_sequences, big.mark = ",", scientific = FALSE),
              format(x$n_obs, big.mark = ",", scientific = FALSE), fam$noun))
  if (x$status == "failed") {
    cat("Status: failed -", x$message, "\n")
    return(invisible(x))
  }
  cat(sprintf("log-likelihood %s after %d iteration%s (%s); start %d of %d\n",
              format(x$loglik, digits = digits + 4), x$iterations,
              if (x$iterations == 1) "" else "s", x$status, x$best_start, length(x$start_logliks)))
  print_floored(x$floored)
  cat("\n")
  print(x$model, digits = digits)
  invisible(x)
}

#' @rdname bulkem_hmm
#' @export
summary.bulkem_hmm_fit <- function(object, ...) {
  ok <- object$status != "failed"
  ll <- logLik(object)
  structure(list(
    status = object$status, message = object$message, loglik = object$loglik,
    AIC = if (ok) stats::AIC(ll) else NA_real_, BIC = if (ok) stats::BIC(ll) else NA_real_,
    iterations = object$iterations, n_sequences = object$n_sequences, n_obs = object$n_obs,
    start_logliks = object$start_logliks, best_start = object$best_start,
    floored = object$floored, noun = emission_family(model_emission(object$model, "object")$family)$noun,
    model = summary(object$model)
  ), class = "summary.bulkem_hmm_fit")
}

#' @export
print.summary.bulkem_hmm_fit <- function(x, digits = 4, ...) {
  cat(sprintf("bulkem HMM fit (%s) on %s sequences, %s %ss\n", x$status,
              format(x$n_sequences, big.mark = ",", scientific = FALSE), format(x$n_obs, big.mark = ",", scientific = FALSE),
              x$noun %||% "symbol"))
  if (x$status == "failed") {
    cat("Failed:", x$message, "\n")
    return(invisible(x))
  }
  cat(sprintf("log-likelihood %s, AIC %s, BIC %s; %d iterations\n",
              format(x$loglik, digits = digits + 4), format(x$AIC, digits = digits + 4),
              format(x$BIC, digits = digits + 4), x$iterations))
  cat(sprintf("Start %d of %d kept; final log-likelihood of each start: %s\n", x$best_start,
              length(x$start_logliks), paste(format(x$start_logliks, digits = digits + 4), collapse = ", ")))
  print_floored(x$floored)
  cat("\n")
  print(x$model, digits = digits)
  invisible(x)
}

#' @rdname bulkem_hmm
#' @export
logLik.bulkem_hmm_fit <- function(object, ...) {
  structure(object$loglik, df = hmm_df(object$model), nobs = object$n_obs, class = "logLik")
}

#' @rdname bulkem_hmm
#' @export
nobs.bulkem_hmm_fit <- function(object, ...) object$n_obs

#' @rdname bulkem_hmm
#' @export
plot.bulkem_hmm_fit <- function(x, ...) {
  it <- seq_along(x$loglik_trace) - 1L
  graphics::plot(it, x$loglik_trace, type = "b", pch = 20, xlab = "Baum-Welch iteration",
                 ylab = "log-likelihood", main = "Log-likelihood trace", ...)
  invisible(x)
}

# The line of a fit's print and summary about states held at the variance
# floor (nothing when none is).
print_floored <- function(floored) {
  if (any(floored)) {
    cat(sprintf("Variance held at the floor in state%s %s (see ?hmm_fit)\n",
                if (sum(floored) == 1) "" else "s", paste(names(floored)[floored], collapse = ", ")))
  }
}

hmm_df <- function(model) {
  N <- length(model$start)
  em <- model_emission(model)
  as.integer((N - 1) + N * (N - 1) + emission_family(em$family)$df(em))
}

# The stationary distribution of a transition matrix (left eigenvector for
# eigenvalue 1); NA when it is not unique to rounding.
stationary <- function(trans) {
  e <- eigen(t(trans))
  one <- which(abs(e$values - 1) < 1e-8)
  out <- if (length(one) == 1) {
    v <- Re(e$vectors[, one])
    v / sum(v)
  } else {
    rep(NA_real_, nrow(trans))
  }
  stats::setNames(out, rownames(trans))
}

#' Most likely hidden states, or state probabilities, of new sequences
#'
#' `predict()` for a [hmm_fit()] result or a [hmm()] model decodes
#' sequences: `type = "states"` gives the most likely hidden state path of
#' each sequence (Viterbi, as [hmm_viterbi()]), `type = "posterior"` the
#' probability of each state at each time step given the whole sequence
#' (forward-backward, as [hmm_posterior()]). A fit uses its fitted model,
#' `fit$model`.
#'
#' @param object A `bulkem_hmm_fit` from [hmm_fit()] (not a failed one), or
#'   a `bulkem_hmm` model from [hmm()].
#' @param newdata The sequences to decode, as `seqs` of [hmm_loglik()]: a
#'   list of integer vectors of symbol codes, or of character vectors or
#'   factors of symbol labels (categorical models), of numeric vectors
#'   (Gaussian) or of counts (Poisson); a single vector is one sequence. Required:
#'   fits keep no sequences (see Value). May be given by position,
#'   `predict(fit, seqs)`.
#' @param type `"states"` (default) or `"posterior"`.
#' @param use.gpu,parallel,chunk.size As for [hmm_viterbi()] and
#'   [hmm_posterior()].
#' @param ... Must be empty (an unknown argument is an error rather than
#'   ignored).
#' @return With `type = "states"`, a list with one integer vector of state
#'   codes `1..N` per sequence (named as `newdata`; the state labels are
#'   `names(model$start)`), all `NA` for a sequence the model cannot
#'   produce, with attribute `log_prob`: the log joint probability of each
#'   path and its sequence. That is `hmm_viterbi(model, newdata)$path` with
#'   `$log_prob` as attribute. With `type = "posterior"`, exactly
#'   `hmm_posterior(model, newdata)`: one matrix per sequence (time steps x
#'   states, rows summing to 1), with attribute `loglik`.
#'
#'   [hmm_fit()] does not keep the sequences it was fitted to (they may be
#'   large, and Baum-Welch needs only their expected counts), so `newdata`
#'   is required: without it, `predict()` raises an error of class
#'   `bulkem_error_input`. Pass the training sequences again to decode them.
#' @seealso [hmm_viterbi()], [hmm_posterior()].
#' @examples
#' truth <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
#'   matrix(c(0.8, 0.2, 0.3, 0.7), 2, byrow = TRUE))
#' seqs <- hmm_simulate(truth, n = 30, length = 40, seed = 1)
#' fit <- hmm_fit(seqs, 2, 2, random.inits = 2, seed = 1, use.gpu = FALSE)
#' states <- predict(fit, seqs[1:2], use.gpu = FALSE)
#' states[[1]]
#' attr(states, "log_prob")
#' post <- predict(fit, seqs[1:2], type = "posterior", use.gpu = FALSE)
#' head(post[[1]])
#' # A model made by hmm() predicts too
#' predict(truth, list(c(1, 1, 2, 2, 2)), use.gpu = FALSE)
#' # Gaussian observations decode the same way
#' g <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.1, 0.9), 2, byrow = TRUE),
#'   emission = gaussian_emission(c(0, 5), c(1, 1)))
#' predict(g, list(c(0.2, -0.5, 4.9, 5.3, 0.1)), use.gpu = FALSE)
#' @export
predict.bulkem_hmm_fit <- function(object, newdata, type = c("states", "posterior"), use.gpu = NA,
                                   parallel = c("none", "future"), chunk.size = NULL, ...) {
  call <- environment()
  hmm_predict(object, if (!missing(newdata)) newdata, missing(newdata), type, use.gpu, parallel,
              chunk.size, ..., call = call)
}

#' @rdname predict.bulkem_hmm_fit
#' @export
predict.bulkem_hmm <- function(object, newdata, type = c("states", "posterior"), use.gpu = NA,
                               parallel = c("none", "future"), chunk.size = NULL, ...) {
  call <- environment()
  hmm_predict(object, if (!missing(newdata)) newdata, missing(newdata), type, use.gpu, parallel,
              chunk.size, ..., call = call)
}

hmm_predict <- function(object, newdata, no_data, type, use.gpu, parallel, chunk.size, ..., call) {
  if (...length() > 0) {
    given <- names(list(...))
    given <- if (is.null(given)) rep("", ...length()) else given
    bulkem_abort(c(
      "{.fn predict} for hidden Markov models takes {.arg newdata}, {.arg type}, {.arg use.gpu}, {.arg parallel} and {.arg chunk.size} only.",
      x = if (any(nzchar(given))) "Unknown argument{?s}: {.arg {given[nzchar(given)]}}." else
        "{...length()} unnamed argument{?s} after {.arg newdata}.",
      i = if ("seqs" %in% given) "The sequences are {.arg newdata}: {.code predict(fit, newdata = seqs)} or {.code predict(fit, seqs)}."
    ), call = call)
  }
  type <- match_arg(type, c("states", "posterior"), "type", call)
  model <- hmm_model(object, "object", call)
  if (no_data) {
    what <- if (inherits(object, "bulkem_hmm_fit")) "A {.fn hmm_fit} result keeps no sequences" else
      "A {.fn hmm} model has no sequences"
    bulkem_abort(c(
      "{.arg newdata} must be given: the sequences to decode.",
      x = paste0(what, ", so there is nothing to predict without {.arg newdata}."),
      i = paste0("Pass the sequences", if (inherits(object, "bulkem_hmm_fit")) ", e.g. the ones it was fitted to", ": {.code predict(object, seqs)}.")
    ), call = call)
  }
  # As hmm_posterior() and hmm_viterbi() do, with errors naming `newdata`.
  s <- model_seqs(model, newdata, "newdata", call)
  if (type == "posterior") {
    return(posterior_result(hmm_run("posterior", model, s, use.gpu, parallel, chunk.size, 2, call, "predict"), s, model))
  }
  v <- viterbi_result(hmm_run("viterbi", model, s, use.gpu, parallel, chunk.size, 1, call, "predict"), s)
  structure(v$path, log_prob = v$log_prob)
}
