# Resuming a call whose future workers were lost: the finished chunks are
# kept in a partial result that the same call, given `resume =`, completes.

#' The finished part of a call that lost future workers
#'
#' When a future worker is lost during a call with `parallel = "future"`
#' ([bulkem()], [hmm_loglik()], [hmm_viterbi()], [hmm_posterior()],
#' [hmm_fit()], [hbglm()]): a cluster job cancelled, out of wall time or
#' memory, a node lost, the call stops with an error of class
#' `bulkem_error_worker` that names the lost chunks' datasets, sequences,
#' starts or chains, and keeps the chunks that finished. Run the same call
#' again with `resume = bulkem_partial()` to compute only what is missing:
#' the result is identical to that of a call that was never interrupted (on
#' the same backend). The partial result is also the error's `partial`
#' field; `saveRDS()` it to resume in another session.
#'
#' A partial result resumes only the call it came from: the same function,
#' data and settings (the seed included; with `seed = NULL` the resumed
#' call takes the partial's); anything else is an error. The resumed call
#' keeps the partial's chunks (so `chunk.size` is ignored) and may run on
#' another plan, even with `parallel = "none"`.
#'
#' @return The partial result of the last such call in this session (class
#'   `bulkem_partial`), or `NULL` if there was none.
#' @seealso `vignette("cluster")`
#' @examples
#' bulkem_partial()
#' \dontrun{
#' fits <- tryCatch(bulkem(datasets, seed = 1, parallel = "future"),
#'                  bulkem_error_worker = function(e) NULL)
#' if (is.null(fits)) fits <- bulkem(datasets, seed = 1, parallel = "future",
#'                                   resume = bulkem_partial())
#' }
#' @export
bulkem_partial <- function() the$partial

#' @export
print.bulkem_partial <- function(x, ...) {
  finished <- !vapply(x$results, is.null, logical(1))
  total <- length(unique(unlist(x$chunks)))
  done <- length(unique(unlist(x$chunks[finished])))
  cat(sprintf("A partial %s() result: %d of %d chunks finished (%d of %d %s); %d %s still to run.\n",
              x$fn, sum(finished), length(finished), done, total, x$what, total - done, x$what))
  cat("Complete it with the same call and `resume = bulkem_partial()`.\n")
  invisible(x)
}

# What identifies a resumable call: its function, what its chunks hold,
# every setting that changes a result (the seed included), and a
# fingerprint of its data. The fingerprint (a pass over all the data) is
# computed only when it is needed: to check `resume`, or to keep a
# partial result. Its argument stays a promise inside the closure.
resumable <- function(fn, what, settings, fingerprint) {
  list(fn = fn, what = what, settings = settings, fingerprint = function() fingerprint)
}

# A cheap fingerprint of numbers: their count and sum or mean (and the
# lengths of the pieces they come in).
numbers_fingerprint <- function(x) {
  if (is.list(x)) list(lengths = lengths(x), sums = vapply(x, function(v) sum(as.double(v)), 0))
  else list(length = length(x), mean = mean(x))  # no copy of an integer vector
}

# The seed of a call given `resume`: the partial's when the call gave none.
resume_seed <- function(seed, resume) {
  if (is.null(seed) && inherits(resume, "bulkem_partial")) resume$settings$seed else seed
}

# `resume` checked against the call `r` (from resumable()).
check_resume <- function(resume, r, call) {
  if (!inherits(resume, "bulkem_partial")) {
    bulkem_abort(c(
      "{.arg resume} must be a partial result from {.fn bulkem_partial}.",
      x = "You supplied {describe_value(resume)}."
    ), call = call)
  }
  if (!identical(resume$fn, r$fn)) {
    bulkem_abort(c(
      "{.arg resume} is the partial result of {.fn {resume$fn}}, not of {.fn {r$fn}}.",
      i = "Resume with the call that stopped."
    ), call = call)
  }
  if (!identical(resume$fingerprint, r$fingerprint())) {
    bulkem_abort(c(
      "{.arg resume} is from a call on other data.",
      i = "Resume with the same data (and starting values) as the call that stopped."
    ), call = call)
  }
  keys <- union(names(r$settings), names(resume$settings))
  differ <- keys[!vapply(keys, function(k) identical(r$settings[[k]], resume$settings[[k]]), logical(1))]
  if (length(differ) > 0) {
    bulkem_abort(c(
      "{.arg resume} is from a call with other settings: {.arg {differ}}.",
      i = "Resume with the same arguments as the call that stopped."
    ), call = call)
  }
  resume
}

# Keep the finished chunks of the call `r` whose workers were `lost`, and
# stop with the error that says how to complete it.
lose_chunks <- function(r, chunks, results, lost, call) {
  # A chunk whose R code failed (invalid data) is not kept: it fails again.
  results <- lapply(results, function(x) if (is.null(x) || !is.null(x$error)) NULL else x)
  r$fingerprint <- r$fingerprint()
  partial <- structure(c(r, list(chunks = chunks, results = results)), class = "bulkem_partial")
  the$partial <- partial
  ks <- sort(as.integer(names(lost)))
  where <- chunk_where(chunks, ks[1], r$what, "none")
  more <- if (length(ks) > 1) sprintf(" and %d more chunk%s", length(ks) - 1, if (length(ks) > 2) "s" else "") else ""
  kept <- sum(!vapply(results, is.null, logical(1)))
  msg <- conditionMessage(lost[[as.character(ks[1])]])
  bulkem_abort(c(
    "A future worker failed while running {where}{more}; {kept} finished chunk{?s} {?is/are} kept.",
    x = "{msg}",
    i = "Run the same call with {.code resume = bulkem_partial()} to compute only the missing {r$what}; the result equals an uninterrupted run."
  ), "worker", partial = partial, call = call)
}
