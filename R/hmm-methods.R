#' Methods for hidden Markov models and their fits
#'
#' `print` shows the probabilities of a [hmm()] model, or the fitted model
#' and how the fit went for a [hmm_fit()] result. `summary` adds the
#' stationary distribution and expected time spent in each state per visit
#' (a model), or AIC and BIC (a fit). `logLik` returns the total
#' log-likelihood with `df` = the number of free parameters
#' ((N - 1) + N (N - 1) + N (V - 1)) and `nobs` = the number of symbols, so
#' [AIC()] and [BIC()] work. `plot` draws the log-likelihood trace of a fit.
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
NULL

#' @rdname bulkem_hmm
#' @export
print.bulkem_hmm <- function(x, digits = 4, ...) {
  cat(sprintf("Hidden Markov model: %d state%s, %d symbol%s\n", length(x$start),
              if (length(x$start) == 1) "" else "s", ncol(x$emis), if (ncol(x$emis) == 1) "" else "s"))
  cat("\nStart probabilities:\n")
  print(x$start, digits = digits)
  cat("\nTransition probabilities (from rows to columns):\n")
  print(x$trans, digits = digits)
  cat("\nEmission probabilities:\n")
  print(x$emis, digits = digits)
  invisible(x)
}

#' @rdname bulkem_hmm
#' @export
summary.bulkem_hmm <- function(object, ...) {
  stay <- diag(object$trans)
  structure(list(
    states = length(object$start), symbols = ncol(object$emis),
    parameters = hmm_df(object),
    stationary = stationary(object$trans),
    expected_duration = stats::setNames(1 / (1 - stay), names(object$start)),
    model = object
  ), class = "summary.bulkem_hmm")
}

#' @export
print.summary.bulkem_hmm <- function(x, digits = 4, ...) {
  cat(sprintf("Hidden Markov model: %d states, %d symbols, %d free parameters\n",
              x$states, x$symbols, x$parameters))
  cat("\nStationary distribution:\n")
  print(x$stationary, digits = digits)
  cat("\nExpected steps per visit to each state:\n")
  print(x$expected_duration, digits = digits)
  cat("\nMost likely symbol in each state:\n")
  e <- x$model$emis
  print(stats::setNames(colnames(e)[max.col(e, ties.method = "first")], rownames(e)), quote = FALSE)
  invisible(x)
}

#' @rdname bulkem_hmm
#' @export
print.bulkem_hmm_fit <- function(x, digits = 4, ...) {
  cat(sprintf("bulkem HMM fit: %d states, %d symbols, %s sequences (%s symbols)\n",
              length(x$model$start), ncol(x$model$emis), format(x$n_sequences, big.mark = ",", scientific = FALSE),
              format(x$n_obs, big.mark = ",", scientific = FALSE)))
  if (x$status == "failed") {
    cat("Status: failed -", x$message, "\n")
    return(invisible(x))
  }
  cat(sprintf("log-likelihood %s after %d iteration%s (%s); start %d of %d\n\n",
              format(x$loglik, digits = digits + 4), x$iterations,
              if (x$iterations == 1) "" else "s", x$status, x$best_start, length(x$start_logliks)))
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
    model = summary(object$model)
  ), class = "summary.bulkem_hmm_fit")
}

#' @export
print.summary.bulkem_hmm_fit <- function(x, digits = 4, ...) {
  cat(sprintf("bulkem HMM fit (%s) on %s sequences, %s symbols\n", x$status,
              format(x$n_sequences, big.mark = ",", scientific = FALSE), format(x$n_obs, big.mark = ",", scientific = FALSE)))
  if (x$status == "failed") {
    cat("Failed:", x$message, "\n")
    return(invisible(x))
  }
  cat(sprintf("log-likelihood %s, AIC %s, BIC %s; %d iterations\n",
              format(x$loglik, digits = digits + 4), format(x$AIC, digits = digits + 4),
              format(x$BIC, digits = digits + 4), x$iterations))
  cat(sprintf("Start %d of %d kept; final log-likelihood of each start: %s\n", x$best_start,
              length(x$start_logliks), paste(format(x$start_logliks, digits = digits + 4), collapse = ", ")))
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

hmm_df <- function(model) {
  N <- length(model$start)
  V <- ncol(model$emis)
  as.integer((N - 1) + N * (N - 1) + N * (V - 1))
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
