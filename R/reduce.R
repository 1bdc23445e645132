#' Accurate sums and means of many vectors
#'
#' `bulk_mean()` and `bulk_sum()` reduce a numeric vector, or every element of
#' a list of numeric vectors at once, with a choice of summation method.
#' They exist for Monte Carlo integration, where a sample mean of millions of
#' terms loses small terms to absorption when added naively.
#'
#' Methods:
#' * `"exact"` (default): the correctly rounded sum, and the correctly
#'   rounded mean, whatever the number of threads (an exact fixed-point
#'   accumulator).
#' * `"div2"`: the parallel tree of Pechprasarn and Khiripet in which every
#'   addition is followed by a division by two, so partial results stay
#'   between their operands; vectors whose length is not a power of two are
#'   zero-padded and the result multiplied by \eqn{C = 2^{\lceil \log_2 n
#'   \rceil} / n}.
#' * `"pairwise"`: a tree of additions.
#' * `"kahan"`: compensated summation (Neumaier's variant).
#' * `"naive"`: one running sum, kept to show the failure.
#'
#' With `precision = "single"`, inputs are rounded to single precision and
#' all arithmetic is single precision, which reproduces the absorption the
#' div2 method was designed against.
#'
#' Infinite values propagate as in [sum()] (`Inf` and `-Inf` together give
#' `NaN`). This version computes on the CPU; `use.gpu = TRUE` is an error.
#'
#' @param x A numeric vector, or a list of numeric vectors (one result each).
#' @param method Summation method, see Details.
#' @param precision `"double"` (default) or `"single"`.
#' @param use.gpu `NA` or `FALSE`: the CPU. `TRUE`: an error (the GPU
#'   reductions are not available yet).
#' @param na.rm If `TRUE`, missing values are dropped; otherwise they are an
#'   error.
#' @return A numeric vector with one value per element of `x` (named as `x`),
#'   or a single number when `x` is a vector.
#' @references Pechprasarn, S. and Khiripet, N. Parallel reduction with
#'   divisions by two for sample means in Monte Carlo integration.
#' @examples
#' # Absorption: one large value and many tiny ones.
#' x <- c(1, rep(2^-54, 2^16))
#' bulk_sum(x, method = "naive") - 1   # every tiny value lost
#' bulk_sum(x) - 1                     # exact: 2^-38
#' # The paper's example in single precision
#' y <- c(0.005, 0.005, 1e-8, 1e-8)
#' sapply(c("naive", "div2", "exact"), function(m) bulk_mean(y, m, "single"))
#' # Many means at once
#' bulk_mean(list(a = runif(1e5), b = rnorm(1e5, 6)))
#' @export
bulk_mean <- function(x, method = c("exact", "div2", "pairwise", "kahan", "naive"),
                      precision = c("double", "single"), use.gpu = NA, na.rm = FALSE) {
  reduce_call(x, method, precision, use.gpu, na.rm, "mean", environment())
}

#' @rdname bulk_mean
#' @export
bulk_sum <- function(x, method = c("exact", "div2", "pairwise", "kahan", "naive"),
                     precision = c("double", "single"), use.gpu = NA, na.rm = FALSE) {
  reduce_call(x, method, precision, use.gpu, na.rm, "sum", environment())
}

#' Stable log of a mean of exponentials
#'
#' `log(mean(exp(x)))` without overflow or underflow, for Monte Carlo
#' estimates of marginal likelihoods from log-weights: the maximum is taken
#' out before exponentiating, and the mean of the rest is exact.
#'
#' @inheritParams bulk_mean
#' @return One value per element of `x` (a single number for a vector);
#'   `-Inf` when every value is `-Inf`.
#' @examples
#' lw <- c(-100000, -100001, -100002)
#' log(mean(exp(lw)))   # -Inf: exp underflows
#' log_mean_exp(lw)
#' @export
log_mean_exp <- function(x, na.rm = FALSE) {
  call <- environment()
  prepared <- reduce_input(x, na.rm, call)
  out <- call_core(log_mean_exp_(prepared$x, cpu_threads()), call, "log_mean_exp")
  reduce_output(out, prepared)
}

reduce_call <- function(x, method, precision, use.gpu, na.rm, kind, call) {
  method <- match_arg(method, c("exact", "div2", "pairwise", "kahan", "naive"), "method", call)
  precision <- match_arg(precision, c("double", "single"), "precision", call)
  check_flag(use.gpu, "use.gpu", allow_na = TRUE, call = call)
  if (isTRUE(use.gpu)) {
    cli::cli_abort(c(
      "{.code use.gpu = TRUE} but the GPU reductions are not available in this version.",
      i = "Use {.code use.gpu = NA} or {.code FALSE} for the CPU."
    ), call = call)
  }
  prepared <- reduce_input(x, na.rm, call)
  fn <- if (kind == "sum") "bulk_sum" else "bulk_mean"
  out <- call_core(reduce_(prepared$x, method, precision, kind, cpu_threads()), call, fn)
  reduce_output(out, prepared)
}

# A list of double vectors, with NA dropped (na.rm) or reported.
reduce_input <- function(x, na.rm, call) {
  check_flag(na.rm, "na.rm", call = call)
  single <- is.numeric(x) && is.null(dim(x))
  xs <- if (single) list(x) else x
  if (!is.list(xs) || is.data.frame(xs)) {
    cli::cli_abort(c(
      "{.arg x} must be a numeric vector or a list of numeric vectors.",
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  numeric <- vapply(xs, function(v) is.numeric(v) && is.null(dim(v)), logical(1))
  if (length(xs) == 0 || !all(numeric)) {
    bad <- which(!numeric)[1]
    cli::cli_abort(c(
      "{.arg x} must be a numeric vector or a non-empty list of numeric vectors.",
      x = if (length(xs) == 0) "The list is empty." else "Element {bad} is {describe_value(xs[[bad]])}."
    ), call = call)
  }
  has_na <- vapply(xs, anyNA, logical(1))
  if (any(has_na)) {
    if (na.rm) {
      xs[has_na] <- lapply(xs[has_na], function(v) v[!is.na(v)])
    } else {
      bad <- which(has_na)[1]
      where <- if (single) "" else paste0(" of element ", bad)
      cli::cli_abort(c(
        "{.arg x} must not contain missing values unless {.code na.rm = TRUE}.",
        x = "Position {which(is.na(xs[[bad]]))[1]}{where} is NA."
      ), call = call)
    }
  }
  xs <- lapply(xs, as.double)
  list(x = xs, single = single, names = names(x))
}

reduce_output <- function(out, prepared) {
  if (prepared$single) return(out)
  names(out) <- prepared$names
  out
}
