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
#' `NaN`).
#'
#' On a CUDA GPU (`use.gpu = TRUE`) each vector is copied to the device and
#' reduced in one kernel launch; `"exact"`, `"pairwise"` and `"div2"` give
#' the same bits as on the CPU. `"kahan"` and `"naive"` add in the GPU's
#' order (per-thread running sums merged in a fixed order), so their
#' results differ from the CPU's within the same error bounds; `"naive"` is
#' then much more accurate than the CPU's single running sum. The GPU reads
#' a vector at its memory bandwidth (about 3 TB/s on an H100), but copying it
#' there from R takes far longer than the CPU needs to reduce it, which is
#' why `use.gpu = NA` computes on the CPU.
#'
#' @param x A numeric vector, or a list of numeric vectors (one result each).
#' @param method Summation method, see Details.
#' @param precision `"double"` (default) or `"single"`.
#' @param use.gpu `NA` or `FALSE`: the CPU (faster for vectors in R's
#'   memory). `TRUE`: a CUDA GPU, or an error saying why none is usable.
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
  # NA means the CPU: the copy to a GPU costs more than the whole reduction.
  backend <- if (isTRUE(use.gpu)) resolve_backend(TRUE, call) else "cpu"
  prepared <- reduce_input(x, na.rm, call)
  fn <- if (kind == "sum") "bulk_sum" else "bulk_mean"
  out <- call_core(reduce_(prepared$x, method, precision, kind, backend, cpu_threads()), call, fn)
  reduce_output(out, prepared)
}

# A list of double vectors, with NA dropped (na.rm) or reported.
reduce_input <- function(x, na.rm, call) {
  check_flag(na.rm, "na.rm", call = call)
  single <- is.numeric(x) && is.null(dim(x))
  xs <- if (single) list(x) else x
  if (!is.list(xs) || is.data.frame(xs)) {
    bulkem_abort(c(
      "{.arg x} must be a numeric vector or a list of numeric vectors.",
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  numeric <- vapply(xs, function(v) is.numeric(v) && is.null(dim(v)), logical(1))
  if (length(xs) == 0 || !all(numeric)) {
    bad <- which(!numeric)[1]
    bulkem_abort(c(
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
      bulkem_abort(c(
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

#' Monte Carlo integration over a box
#'
#' Estimates \eqn{\int f} over the box `[lower, upper]` as its volume times
#' the mean of `f` at `n` uniform random points. The points are drawn and
#' `f` evaluated in chunks of `chunk.size`, so memory stays bounded for any
#' `n` (1e9 points need about 3 chunk's worth of memory); the mean is
#' accumulated chunk by chunk with `method`, and gives the same bits as
#' [bulk_mean()] of all `n` values at once. The default, `"exact"`, loses
#' nothing to absorption however large `n` is.
#'
#' Points come from R's random number generator ([stats::runif()]), so
#' [set.seed()] makes a call reproducible.
#'
#' @param f A function of the points returning one finite or infinite value
#'   per point: for one dimension it receives a numeric vector, otherwise a
#'   matrix with one row per point and one column per dimension.
#' @param lower,upper Numeric vectors of the same length (the dimension),
#'   with `lower < upper`.
#' @param n Number of points, a whole number of at least 2.
#' @param ... Further arguments to `f`.
#' @param method Summation method of the mean (see [bulk_mean()]).
#' @param chunk.size Points per chunk: a power of two, at least 65536.
#' @return An object of class `bulkem_mc`: a list with `value` (the
#'   estimate), `std.error` (volume times the sample standard deviation of
#'   `f` over \eqn{\sqrt{n}}), `n`, `volume` and `method`.
#' @examples
#' set.seed(1)
#' # The integral of exp(-x^2) over [0, 2] (about 0.882)
#' mc_integrate(function(x) exp(-x^2), 0, 2, n = 1e5)
#' # A 3-dimensional integral: the volume of the unit ball, 4 pi / 3
#' ball <- function(p) as.numeric(rowSums(p^2) <= 1)
#' mc_integrate(ball, c(-1, -1, -1), c(1, 1, 1), n = 2e5)
#' @export
mc_integrate <- function(f, lower, upper, n, ..., method = c("exact", "div2", "pairwise", "kahan", "naive"),
                         chunk.size = 2^20) {
  call <- environment()
  if (!is.function(f)) {
    bulkem_abort(c("{.arg f} must be a function.", x = "You supplied {describe_value(f)}."), call = call)
  }
  check_box(lower, upper, call)
  if (!(is.numeric(n) && length(n) == 1 && !is.na(n) && n == round(n) && n >= 2 && n <= 2^53)) {
    bulkem_abort(c("{.arg n} must be a whole number of at least 2.", x = "You supplied {describe_value(n)}."), call = call)
  }
  method <- match_arg(method, c("exact", "div2", "pairwise", "kahan", "naive"), "method", call)
  ok_chunk <- is.numeric(chunk.size) && length(chunk.size) == 1 && !is.na(chunk.size) &&
    chunk.size >= 65536 && chunk.size <= 2^30 && log2(chunk.size) == round(log2(chunk.size))
  if (!ok_chunk) {
    bulkem_abort(c(
      "{.arg chunk.size} must be a power of two between 65536 and 2^30.",
      x = "You supplied {describe_value(chunk.size)}."
    ), call = call)
  }
  d <- length(lower)
  width <- upper - lower
  volume <- prod(width)
  mean_stream <- stream_new_(method, "double", chunk.size)
  # The standard error from exact sums of f - shift and its square (shift:
  # the first chunk's mean, so that the variance does not cancel).
  dev_stream <- stream_new_("exact", "double", chunk.size)
  sq_stream <- stream_new_("exact", "double", chunk.size)
  shift <- NULL
  progress <- make_progress(ceiling(n / chunk.size))
  done <- 0
  while (done < n) {
    m <- min(chunk.size, n - done)
    u <- matrix(stats::runif(m * d), m, d)
    points <- u * rep(width, each = m) + rep(lower, each = m)
    fx <- f(if (d == 1) points[, 1] else points, ...)
    fx <- check_integrand(fx, m, done, call)
    if (is.null(shift)) shift <- if (all(is.finite(fx))) mean(fx) else 0
    stream_push_(mean_stream, fx)
    dev <- fx - shift
    stream_push_(dev_stream, dev)
    stream_push_(sq_stream, dev * dev)
    done <- done + m
    if (!is.null(progress)) progress(1)
  }
  m1 <- stream_value_(dev_stream, "mean")
  m2 <- stream_value_(sq_stream, "mean")
  variance <- max(m2 - m1^2, 0) * n / (n - 1)
  structure(list(
    value = volume * stream_value_(mean_stream, "mean"),
    std.error = volume * sqrt(variance / n),
    n = n,
    volume = volume,
    method = method
  ), class = "bulkem_mc")
}

#' @export
print.bulkem_mc <- function(x, digits = getOption("digits"), ...) {
  cat("Monte Carlo integral: ", format(x$value, digits = digits), " (standard error ",
      format(x$std.error, digits = 3), ")\n", sep = "")
  cat("  ", format(x$n, big.mark = ",", scientific = FALSE), " points, box volume ",
      format(x$volume, digits = digits), ", mean by ", x$method, "\n", sep = "")
  invisible(x)
}

check_box <- function(lower, upper, call) {
  ok <- is.numeric(lower) && is.numeric(upper) && length(lower) >= 1 && length(lower) == length(upper) &&
    all(is.finite(lower)) && all(is.finite(upper))
  if (!ok) {
    bulkem_abort(c(
      "{.arg lower} and {.arg upper} must be finite numeric vectors of the same length.",
      x = "You supplied {describe_value(lower)} and {describe_value(upper)}."
    ), call = call)
  }
  if (any(lower >= upper)) {
    bad <- which(lower >= upper)[1]
    bulkem_abort(c(
      "{.arg lower} must be below {.arg upper} in every dimension.",
      x = "Dimension {bad}: lower = {lower[bad]}, upper = {upper[bad]}."
    ), call = call)
  }
}

check_integrand <- function(fx, m, done, call) {
  if (!is.numeric(fx) && !is.logical(fx) || length(fx) != m) {
    bulkem_abort(c(
      "{.arg f} must return one number per point.",
      x = "Given {m} point{?s}, it returned {describe_value(fx)}."
    ), call = call)
  }
  if (anyNA(fx)) {
    bulkem_abort(c(
      "{.arg f} returned a missing value.",
      x = "Point {format(done + which(is.na(fx))[1], scientific = FALSE)} gave NA."
    ), call = call)
  }
  as.double(fx)
}
