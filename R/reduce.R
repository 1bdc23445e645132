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
#' `NaN`). A sum of finite values whose magnitude exceeds the largest
#' double (or single) is `Inf` or `-Inf` by every method, correctly: the
#' exact sum rounds beyond the format. The other methods can also overflow
#' in a partial sum whose exact total is finite (e.g. `c(1e308, 1e308,
#' -1e308)` by `"naive"`); such a result comes with a warning of class
#' `bulkem_warning` giving the exact value. Means by `"exact"` and `"div2"`
#' of finite values are always finite.
#'
#' Missing values (`NA`, `NaN`) are an error of class `bulkem_error_input`
#' unless `na.rm = TRUE`. With `precision = "single"`, finite values beyond
#' single precision's range (about 3.4e38 in magnitude) round to `Inf` or
#' `-Inf`, as in any binary32 arithmetic, and the result is then infinite
#' (or `NaN`); a warning of class `bulkem_warning` names the first such
#' value.
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
  core <- function(xs) call_core(log_mean_exp_(xs, cpu_threads()), call, "log_mean_exp")
  out <- settle_missing(core(prepared$x), prepared, na.rm, core, call)
  reduce_output(out, prepared)
}

reduce_call <- function(x, method, precision, use.gpu, na.rm, kind, call) {
  method <- match_arg(method, c("exact", "div2", "pairwise", "kahan", "naive"), "method", call)
  precision <- match_arg(precision, c("double", "single"), "precision", call)
  check_flag(use.gpu, "use.gpu", allow_na = TRUE, call = call)
  # NA: the core keeps reductions on the CPU (the copy to a GPU costs more
  # than the whole reduction); TRUE: the GPU or an error.
  backend <- resolve_backend(use.gpu, call, quiet = TRUE)
  prepared <- reduce_input(x, na.rm, call)
  fn <- if (kind == "sum") "bulk_sum" else "bulk_mean"
  core <- function(xs) call_core(reduce_(xs, method, precision, kind, backend, cpu_threads()), call, fn)
  out <- settle_missing(core(prepared$x), prepared, na.rm, core, call)
  if (precision == "single") warn_single_range(out, prepared, call)
  if (method != "exact") warn_partial_overflow(out, prepared, method, precision, kind, fn, call)
  reduce_output(out, prepared)
}

# Finite values that round to an infinite binary32: the smallest magnitude
# that does is the midpoint between the largest float and 2^128. Such a
# value makes the element's result infinite or NaN, so only those elements
# are searched.
warn_single_range <- function(out, prepared, call) {
  edge <- 2^128 * (1 - 2^-25)
  beyond <- rep(NA_integer_, length(out))
  suspect <- which(!is.finite(out))
  beyond[suspect] <- vapply(prepared$x[suspect], function(v) {
    i <- which(is.finite(v) & abs(v) >= edge)
    if (length(i)) i[1] else NA_integer_
  }, integer(1))
  if (all(is.na(beyond))) return(invisible())
  k <- which(!is.na(beyond))[1]
  v <- prepared$x[[k]][beyond[k]]
  where <- if (prepared$single) "" else paste0(" of element ", k)
  cli::cli_warn(c(
    "{.arg x} has {format(v, digits = 6)} at position {beyond[k]}{where}, beyond the range of single precision (about 3.4e38).",
    i = "Rounded to single precision it is {if (v > 0) 'Inf' else '-Inf'}, and the result is not finite. Use {.code precision = \"double\"} or rescale the values."
  ), class = "bulkem_warning", call = call)
}

# A non-finite result from finite values: correct when the exact result
# overflows too, else a partial sum of `method` overflowed, and the
# result is wrong. The exact reduction of those elements decides.
warn_partial_overflow <- function(out, prepared, method, precision, kind, fn, call) {
  suspect <- which(!is.finite(out))
  suspect <- suspect[vapply(prepared$x[suspect], function(v) all(is.finite(v)), logical(1))]
  if (length(suspect) == 0) return(invisible())
  exact <- call_core(reduce_(prepared$x[suspect], "exact", precision, kind, "cpu", cpu_threads()), call, fn)
  wrong <- is.finite(exact)
  if (!any(wrong)) return(invisible())
  k <- suspect[wrong][1]
  where <- if (prepared$single) "" else paste0(" of element ", k)
  cli::cli_warn(c(
    "The {method} {kind}{where} is {out[k]}, but every value is finite and the exact {kind} is {format(exact[wrong][1], digits = 17)}.",
    i = "A partial sum overflowed; {.code method = \"exact\"} gives the correctly rounded {kind}.",
    if (sum(wrong) > 1) c(i = "{sum(wrong) - 1} more element{?s} overflowed the same way.")
  ), class = "bulkem_warning", call = call)
}

# A list of double vectors (missing values are settled after the core's
# pass: settle_missing()).
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
  xs <- lapply(xs, as.double)
  list(x = xs, single = single, names = names(x))
}

# The core's results `out` for `prepared$x` with missing values settled:
# an element holding NA or NaN has a NaN result (the core's contract, as
# IEEE sums give; so has one where Inf meets -Inf), so only the elements
# with a NaN result are searched. R's anyNA() over every value took 11 ms
# for 10^7 values, where the parallel pairwise sum takes 2.3. Without
# na.rm a missing value is an error; with it, `core` reduces the list
# again with those elements' missing values dropped (so that a message
# names the element as the user numbers it).
settle_missing <- function(out, prepared, na.rm, core, call) {
  suspect <- which(is.na(out))
  if (length(suspect) == 0) return(out)
  has_na <- suspect[vapply(prepared$x[suspect], anyNA, logical(1))]
  if (length(has_na) == 0) return(out)
  xs <- prepared$x
  if (!na.rm) {
    bad <- has_na[1]
    pos <- which(is.na(xs[[bad]]))[1]
    where <- if (prepared$single) "" else paste0(" of element ", bad)
    bulkem_abort(c(
      "{.arg x} must not contain missing values unless {.code na.rm = TRUE}.",
      x = "Position {pos}{where} is {if (is.nan(xs[[bad]][pos])) 'NaN' else 'NA'}."
    ), call = call)
  }
  xs[has_na] <- lapply(xs[has_na], function(v) v[!is.na(v)])
  core(xs)
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
#' `n` (1e9 points need about 3 chunk's worth of memory; in more than 16
#' dimensions `f` is called on fewer points at a time, at most 2^24
#' coordinates); the mean is accumulated chunk by chunk with `method`, and
#' gives the same bits as [bulk_mean()] of all `n` values at once. The
#' default, `"exact"`, loses nothing to absorption however large `n` is.
#'
#' Points come from R's random number generator ([stats::runif()]), so
#' [set.seed()] makes a call reproducible.
#'
#' The box must have a volume that is a finite, normal double: bounds whose
#' width or volume overflows (e.g. `-1e308` to `1e308`) or underflows are an
#' error of class `bulkem_error_input`, as are `f` returning anything but
#' one number per point, `NA` or `NaN`, or both `Inf` and `-Inf`. If `f`
#' returns an infinite value, `value` is that infinity and `std.error` is
#' `Inf`. Finite values whose estimate overflows the largest double (or
#' whose mean overflows a partial sum of `method`) are an error too; the
#' standard error is computed from scaled deviations, so it overflows only
#' when it exceeds the largest double (and is then `Inf`).
#'
#' @param f A function of the points returning one finite or infinite value
#'   per point: for one dimension it receives a numeric vector, otherwise a
#'   matrix with one row per point and one column per dimension.
#' @param lower,upper Numeric vectors of the same length (the dimension),
#'   with `lower < upper`.
#' @param n Number of points, a whole number between 2 and 2^53.
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
  volume <- check_box(lower, upper, call)
  if (!(is.numeric(n) && length(n) == 1 && !is.na(n) && n == round(n) && n >= 2 && n <= 2^53)) {
    bulkem_abort(c("{.arg n} must be a whole number between 2 and 2^53.", x = "You supplied {describe_value(n)}."),
                 call = call)
  }
  n <- as.double(n)
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
  # Points per call of f: a whole chunk, or fewer in many dimensions, so
  # that a block of points holds at most 2^24 coordinates.
  block <- min(chunk.size, n, max(1, 2^24 %/% d))
  # A block's points and their temporaries (5 copies), and a chunk's values
  # of f, their deviations and squares.
  call_core(memory_ensure_(
    paste0("`chunk.size = ", chunk.size, "` in ", d, " dimension", if (d > 1) "s"),
    5 * 8 * block * d + 4 * 8 * min(chunk.size, n)
  ), call, "mc_integrate")
  mean_stream <- stream_new_(method, "double", chunk.size)
  # The standard error from exact sums of (f - shift) / scale and its
  # square: shift (the first chunk's mean) keeps the variance from
  # cancelling, the power-of-two scale (from the first chunk's largest
  # deviation) keeps the squares from overflowing, exactly.
  dev_stream <- stream_new_("exact", "double", chunk.size)
  sq_stream <- stream_new_("exact", "double", chunk.size)
  shift <- NULL
  scale <- 1
  first_inf <- c(pos = NA_real_, neg = NA_real_)
  progress <- make_progress(ceiling(n / chunk.size))
  done <- 0
  while (done < n) {
    m <- min(chunk.size, n - done)
    fx <- if (m <= block) {
      integrand_block(f, m, d, width, lower, done, call, ...)
    } else {
      unlist(lapply(seq(0, m - 1, by = block), function(off) {
        integrand_block(f, min(block, m - off), d, width, lower, done + off, call, ...)
      }), use.names = FALSE)
    }
    if (any(is.infinite(fx))) {
      for (sgn in c("pos", "neg")) {
        at <- which(fx == if (sgn == "pos") Inf else -Inf)
        if (length(at) && is.na(first_inf[[sgn]])) first_inf[[sgn]] <- done + at[1]
      }
      if (!anyNA(first_inf)) {
        bulkem_abort(c(
          "{.arg f} returned both {.val {Inf}} and {.val {-Inf}}: the integral is undefined.",
          x = "Point {format(first_inf[['pos']], scientific = FALSE)} gave Inf and point {format(first_inf[['neg']], scientific = FALSE)} gave -Inf."
        ), call = call)
      }
    }
    if (is.null(shift)) {
      finite <- fx[is.finite(fx)]
      shift <- if (length(finite)) mean(finite) else 0
      if (!is.finite(shift)) shift <- 0
      top <- if (length(finite)) max(abs(finite - shift)) else 0
      if (is.finite(top) && top > 0) scale <- 2^ceiling(log2(top))
    }
    stream_push_(mean_stream, fx)
    dev <- (fx - shift) / scale
    stream_push_(dev_stream, dev)
    stream_push_(sq_stream, dev * dev)
    done <- done + m
    if (!is.null(progress)) progress(1)
  }
  mean_f <- stream_value_(mean_stream, "mean")
  value <- volume * mean_f
  if (!all(is.na(first_inf))) {
    std.error <- Inf
  } else {
    if (!is.finite(mean_f)) {
      bulkem_abort(c(
        "The {method} mean of {.arg f} overflowed although every value is finite.",
        i = "A partial sum overflowed; {.code method = \"exact\"} or {.code \"div2\"} gives a finite mean."
      ), call = call)
    }
    if (!is.finite(value)) {
      bulkem_abort(c(
        "The estimate overflows double precision.",
        x = "The box volume ({format(volume)}) times the mean of {.arg f} ({format(mean_f)}) exceeds {format(.Machine$double.xmax)}."
      ), call = call)
    }
    m1 <- stream_value_(dev_stream, "mean")
    m2 <- stream_value_(sq_stream, "mean")
    variance <- max(m2 - m1^2, 0) * n / (n - 1)
    std.error <- volume * (scale * sqrt(variance / n))
  }
  structure(list(
    value = value,
    std.error = std.error,
    n = n,
    volume = volume,
    method = method
  ), class = "bulkem_mc")
}

# The values of f at m uniform points of the box (the first is point
# done + 1), checked.
integrand_block <- function(f, m, d, width, lower, done, call, ...) {
  u <- matrix(stats::runif(m * d), m, d)
  points <- u * rep(width, each = m) + rep(lower, each = m)
  fx <- f(if (d == 1) points[, 1] else points, ...)
  check_integrand(fx, m, done, call)
}

#' @export
print.bulkem_mc <- function(x, digits = getOption("digits"), ...) {
  cat("Monte Carlo integral: ", format(x$value, digits = digits), " (standard error ",
      format(x$std.error, digits = 3), ")\n", sep = "")
  cat("  ", format(x$n, big.mark = ",", scientific = FALSE), " points, box volume ",
      format(x$volume, digits = digits), ", mean by ", x$method, "\n", sep = "")
  invisible(x)
}

# The box's volume, a finite normal double, or an error.
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
  width <- as.double(upper) - as.double(lower)
  if (any(!is.finite(width))) {
    bad <- which(!is.finite(width))[1]
    bulkem_abort(c(
      "The box is too wide for double precision: its volume is infinite.",
      x = "Dimension {bad}: upper - lower = {upper[bad]} - ({lower[bad]}) overflows."
    ), call = call)
  }
  # In logs, so that the check itself neither overflows nor underflows.
  log_volume <- sum(log(width))
  volume <- prod(width)
  if (log_volume > log(.Machine$double.xmax) || !is.finite(volume)) {
    bulkem_abort(c(
      "The box is too large for double precision: its volume is infinite.",
      x = "The product of the {length(width)} widths is about 10^{round(log_volume / log(10))}."
    ), call = call)
  }
  if (log_volume < log(.Machine$double.xmin) || volume < .Machine$double.xmin) {
    bulkem_abort(c(
      "The box is too small for double precision: its volume underflows.",
      x = "The product of the {length(width)} widths is about 10^{round(log_volume / log(10))}."
    ), call = call)
  }
  volume
}

check_integrand <- function(fx, m, done, call) {
  if (!is.numeric(fx) && !is.logical(fx) || length(fx) != m) {
    bulkem_abort(c(
      "{.arg f} must return one number per point.",
      x = "Given {m} point{?s}, it returned {describe_value(fx)}."
    ), call = call)
  }
  if (anyNA(fx)) {
    pos <- which(is.na(fx))[1]
    bulkem_abort(c(
      "{.arg f} returned a missing value.",
      x = "Point {format(done + pos, scientific = FALSE)} gave {if (is.nan(fx[pos])) 'NaN' else 'NA'}."
    ), call = call)
  }
  as.double(fx)
}
