#' Inverse Gaussian mixtures: density and random generation
#'
#' `dinvgaussmix()` evaluates the density of a mixture of inverse Gaussian
#' distributions; `rinvgaussmix()` draws from it (Michael, Schucany and Haas'
#' transformation method, using R's random number generator).
#'
#' Both work for any finite positive `mu` and `lambda` (e.g. `mu` from
#' `1e-200` to `1e200`), in forms that neither overflow nor cancel: the
#' density in logs, with the quadratic term \eqn{\lambda (x - \mu)^2 / (2
#' \mu^2 x)} evaluated as a product of its factors, or in logs when a factor
#' would overflow or underflow; the draws from the smaller root of the
#' method's quadratic computed as the reciprocal of the larger one, scaled
#' by \eqn{\sqrt{\mu / \lambda}}{sqrt(mu / lambda)} rather than \eqn{\mu /
#' \lambda}, so that very concentrated components (`mu / lambda` below the
#' smallest double) give draws at `mu`, and very dispersed ones (`mu /
#' lambda` beyond the largest) the limiting \eqn{\lambda / Z^2}{lambda / Z^2}.
#' A draw beyond the largest double is `Inf` (for `mu` near it).
#'
#' The density is 0 (log-density `-Inf`) at `x <= 0` and at `x = Inf`;
#' `NA` and `NaN` in `x` stay `NA` and `NaN`.
#'
#' @param x Numeric vector of quantiles.
#' @param n Number of observations, a whole number (0 gives `numeric(0)`).
#' @param alpha Mixing weights: non-negative, summing to 1 (within 1e-8).
#' @param mu Component means: finite and positive, as many as `alpha`.
#' @param lambda Component shapes: finite and positive, as many as `alpha`.
#' @param log If `TRUE`, return the log-density.
#' @return `dinvgaussmix()`: the density at each `x`. `rinvgaussmix()`: a
#'   numeric vector of `n` draws, with the component of each draw as
#'   attribute `"component"` (an integer vector). Invalid arguments are
#'   errors of class `bulkem_error_input`; `n` whose draws cannot be
#'   allocated is an error of class `bulkem_error_memory`.
#' @references Seshadri, V. (1993). *The Inverse Gaussian Distribution: A
#'   Case Study in Exponential Families*. Oxford: Clarendon Press.
#'
#'   Michael, J. R., Schucany, W. R. and Haas, R. W. (1976). Generating
#'   random variates using transformations with multiple roots. *The
#'   American Statistician* 30(2), 88--90.
#' @examples
#' set.seed(1)
#' x <- rinvgaussmix(1000, alpha = c(0.3, 0.7), mu = c(1, 3), lambda = c(30, 0.2))
#' hist(x, breaks = 100, freq = FALSE, xlim = c(0, 8))
#' curve(dinvgaussmix(x, c(0.3, 0.7), c(1, 3), c(30, 0.2)), add = TRUE, n = 500)
#' # Extreme parameters
#' rinvgaussmix(3, 1, 1e200, 1)       # about 1 / rnorm(3)^2
#' rinvgaussmix(3, 1, 1e-200, 1e200)  # 1e-200, up to rounding
#' dinvgaussmix(c(0, 1, Inf), 1, 1e200, 1)
#' @export
dinvgaussmix <- function(x, alpha, mu, lambda, log = FALSE) {
  call <- environment()
  if (!(is.numeric(x) && is.null(dim(x))) && !(is.logical(x) && all(is.na(x)))) {
    bulkem_abort(c("{.arg x} must be a numeric vector.", x = "You supplied {describe_value(x)}."), call = call)
  }
  check_flag(log, "log", call = call)
  alpha <- check_mixture(alpha, mu, lambda, call)
  x <- as.double(x)
  # The core's density, as the fits use it; NA stays NA (the core gives NaN).
  out <- mix_log_density_(x, "invgauss", as.double(alpha), as.double(mu), as.double(lambda))
  out[is.na(x) & !is.nan(x)] <- NA
  if (log) out else exp(out)
}

#' @rdname dinvgaussmix
#' @export
rinvgaussmix <- function(n, alpha, mu, lambda) {
  call <- environment()
  n <- check_draws(n, call)
  alpha <- check_mixture(alpha, mu, lambda, call)
  check_draws_memory(n, call)
  x <- numeric(n)
  comp <- integer(n)
  # Draw in blocks, so that memory beyond the result stays bounded.
  block <- 2^20
  for (start in if (n > 0) seq(1, n, by = block)) {
    idx <- start:min(n, start + block - 1)
    k <- sample.int(length(alpha), length(idx), replace = TRUE, prob = alpha)
    x[idx] <- rinvgauss_msh(mu[k], lambda[k])
    comp[idx] <- k
  }
  attr(x, "component") <- comp
  x
}

# A whole number of draws, at least 0 (a double: n beyond R's longest
# vector is refused as memory, not as input).
check_draws <- function(n, call) {
  ok <- is.numeric(n) && length(n) == 1 && !is.na(n) && is.finite(n) && n == round(n) && n >= 0
  if (!ok) {
    bulkem_abort(c(
      "{.arg n} must be a whole number of at least 0.",
      x = "You supplied {describe_value(n)}."
    ), call = call)
  }
  as.double(n)
}

# Refuse n draws that this process cannot hold (the result, 12 bytes a
# draw with its component, plus a block's temporaries) before R allocates
# them: an allocation the system overcommits would kill R when filled.
check_draws_memory <- function(n, call) {
  what <- paste0("`n = ", format(n, scientific = n >= 1e15, big.mark = ","), "`")
  call_core(memory_ensure_(what, 12 * n + 2^20 * 80), call, "rinvgaussmix")
}

# alpha, mu and lambda of one inverse Gaussian mixture, checked as every
# family's (check_family_mixture): alpha returned normalised exactly.
check_mixture <- function(alpha, mu, lambda, call = parent.frame()) {
  check_family_mixture(alpha, list(mu = mu, lambda = lambda), em_family("invgauss"), call)
}

# Michael, Schucany & Haas (1976), vectorised over mu and lambda. With
# s = |Z| sqrt(mu / lambda) (formed from square roots, which neither
# overflow nor underflow), the roots of their quadratic are mu X1 and
# mu / X1 with X1 = 1 / X2 and X2 = 1 + s^2/2 + s sqrt(1 + s^2/4). For
# s > 1, X2 = s^2 g with g = t + 1/2 + sqrt(t + 1/4), t = 1 / s^2, and
# the smaller root is lambda / (Z^2 g) (no mu / s^2 to underflow). The
# smaller root is taken with probability 1 / (1 + X1).
rinvgauss_msh <- function(mu, lambda) {
  z <- stats::rnorm(length(mu))
  s <- abs(z) * (sqrt(mu) / sqrt(lambda))
  small <- s <= 1
  x1 <- small_root <- large_root <- numeric(length(mu))
  if (any(small)) {
    sm <- s[small]
    x2 <- 1 + sm^2 / 2 + sm * sqrt(1 + sm^2 / 4)
    x1[small] <- 1 / x2
    small_root[small] <- mu[small] / x2
    large_root[small] <- mu[small] * x2
  }
  if (any(!small)) {
    sb <- s[!small]
    t <- 1 / sb^2
    g <- t + 0.5 + sqrt(t + 0.25)
    x1[!small] <- t / g
    small_root[!small] <- lambda[!small] / z[!small]^2 / g
    large_root[!small] <- mu[!small] * sb * sb * g
  }
  u <- stats::runif(length(mu))
  ifelse(u * (1 + x1) <= 1, small_root, large_root)
}

#' Gamma, lognormal, Poisson and exponential mixtures: density and random
#' generation
#'
#' Base R has the densities and generators of the components ([dgamma()],
#' [dlnorm()], [dpois()], [dexp()] and their `r*` functions) but not of
#' their mixtures. `dgammamix()`, `dlnormmix()`, `dpoismix()` and
#' `dexpmix()` evaluate the density (for the Poisson, the probability of
#' each count) of a mixture with weights `alpha`, computed in logs by the
#' same code that [bulkem()] fits with. `rgammamix()`, `rlnormmix()`,
#' `rpoismix()` and `rexpmix()` draw from it: each draw's component with
#' probabilities `alpha`, then the draw with base R's generator, so
#' [set.seed()] makes them reproducible. The parameters are named and mean
#' what they mean in base R and in the fits of [bulkem()] for the family
#' (`"gamma"`, `"lognormal"`, `"poisson"`, `"exponential"`), so
#' `do.call(dgammamix, c(list(x), fit[c("alpha", "shape", "rate")]))` is the
#' fitted density of a gamma fit.
#'
#' The density is 0 (log-density `-Inf`) outside the support: `x <= 0` for
#' the gamma and lognormal, `x < 0` for the exponential, and values that are
#' not whole numbers at least 0 for the Poisson.
#'
#' @param x Numeric vector of quantiles.
#' @param n Number of observations, a whole number (0 gives `numeric(0)`).
#' @param alpha Mixing weights: non-negative, summing to 1 (within 1e-8).
#' @param shape,rate Gamma shapes and rates (as in [dgamma()]), finite and
#'   positive, as many as `alpha`; for `dexpmix()`/`rexpmix()`, `rate` is
#'   the exponential rate (as in [dexp()]).
#' @param meanlog,sdlog Means and standard deviations on the log scale (as
#'   in [dlnorm()]): `meanlog` finite, `sdlog` finite and positive.
#' @param lambda Poisson means (as in [dpois()]), finite and positive.
#' @param log If `TRUE`, return the log-density.
#' @return `d*mix()`: the density at each `x`. `r*mix()`: a numeric vector
#'   of `n` draws, with the component of each draw as attribute
#'   `"component"` (an integer vector). Invalid arguments are errors of
#'   class `bulkem_error_input`.
#' @seealso [dinvgaussmix()] for inverse Gaussian mixtures; [bulkem()] to
#'   fit them.
#' @examples
#' set.seed(1)
#' x <- rgammamix(1000, alpha = c(0.4, 0.6), shape = c(2, 20), rate = c(2, 4))
#' hist(x, breaks = 60, freq = FALSE)
#' curve(dgammamix(x, c(0.4, 0.6), c(2, 20), c(2, 4)), add = TRUE, n = 500)
#'
#' y <- rlnormmix(500, c(0.5, 0.5), meanlog = c(0, 2), sdlog = c(0.3, 0.5))
#' dlnormmix(c(1, 7), c(0.5, 0.5), c(0, 2), c(0.3, 0.5))
#'
#' counts <- rpoismix(500, c(0.3, 0.7), lambda = c(2, 12))
#' sum(dpoismix(0:100, c(0.3, 0.7), c(2, 12)))  # 1
#'
#' rexpmix(5, c(0.5, 0.5), rate = c(1, 10))
#' dexpmix(c(0, 1), c(0.5, 0.5), c(1, 10), log = TRUE)
#' @name familymix
NULL

#' @rdname familymix
#' @export
dgammamix <- function(x, alpha, shape, rate, log = FALSE) {
  dmix_core(x, "gamma", alpha, list(shape = shape, rate = rate), log, environment())
}

#' @rdname familymix
#' @export
rgammamix <- function(n, alpha, shape, rate) {
  rmix_base(n, "gamma", alpha, list(shape = shape, rate = rate), environment(), "rgammamix",
            function(k, p) stats::rgamma(length(k), shape = p$shape[k], rate = p$rate[k]))
}

#' @rdname familymix
#' @export
dlnormmix <- function(x, alpha, meanlog, sdlog, log = FALSE) {
  dmix_core(x, "lognormal", alpha, list(meanlog = meanlog, sdlog = sdlog), log, environment())
}

#' @rdname familymix
#' @export
rlnormmix <- function(n, alpha, meanlog, sdlog) {
  rmix_base(n, "lognormal", alpha, list(meanlog = meanlog, sdlog = sdlog), environment(), "rlnormmix",
            function(k, p) stats::rlnorm(length(k), meanlog = p$meanlog[k], sdlog = p$sdlog[k]))
}

#' @rdname familymix
#' @export
dpoismix <- function(x, alpha, lambda, log = FALSE) {
  dmix_core(x, "poisson", alpha, list(lambda = lambda), log, environment())
}

#' @rdname familymix
#' @export
rpoismix <- function(n, alpha, lambda) {
  rmix_base(n, "poisson", alpha, list(lambda = lambda), environment(), "rpoismix",
            function(k, p) as.double(stats::rpois(length(k), lambda = p$lambda[k])))
}

#' @rdname familymix
#' @export
dexpmix <- function(x, alpha, rate, log = FALSE) {
  dmix_core(x, "exponential", alpha, list(rate = rate), log, environment())
}

#' @rdname familymix
#' @export
rexpmix <- function(n, alpha, rate) {
  rmix_base(n, "exponential", alpha, list(rate = rate), environment(), "rexpmix",
            function(k, p) stats::rexp(length(k), rate = p$rate[k]))
}

# The density of a mixture of `family` from the core; NA and NaN in x stay
# NA and NaN.
dmix_core <- function(x, family, alpha, params, log, call) {
  if (!(is.numeric(x) && is.null(dim(x))) && !(is.logical(x) && all(is.na(x)))) {
    bulkem_abort(c("{.arg x} must be a numeric vector.", x = "You supplied {describe_value(x)}."), call = call)
  }
  check_flag(log, "log", call = call)
  fam <- em_family(family)
  alpha <- check_family_mixture(alpha, params, fam, call)
  x <- as.double(x)
  m <- core_mixture(fam, alpha, params)
  out <- rep(NA_real_, length(x))
  ok <- !is.na(x)
  out[is.nan(x)] <- NaN
  out[ok] <- mix_log_density_(x[ok], fam$name, m$alpha, m$first, m$second)
  if (log) out else exp(out)
}

# n draws of a mixture of `family`: components by sample.int(), values by
# draw(k, params) (base R's generator), in blocks.
rmix_base <- function(n, family, alpha, params, call, fn, draw) {
  n <- check_draws(n, call)
  fam <- em_family(family)
  alpha <- check_family_mixture(alpha, params, fam, call)
  what <- paste0("`n = ", format(n, scientific = n >= 1e15, big.mark = ","), "`")
  call_core(memory_ensure_(what, 12 * n + 2^20 * 80), call, fn)
  x <- numeric(n)
  comp <- integer(n)
  block <- 2^20
  for (start in if (n > 0) seq(1, n, by = block)) {
    idx <- start:min(n, start + block - 1)
    k <- sample.int(length(alpha), length(idx), replace = TRUE, prob = alpha)
    x[idx] <- draw(k, params)
    comp[idx] <- k
  }
  attr(x, "component") <- comp
  x
}

# alpha and the named parameters of one mixture: numeric, no NA, one
# length, alpha non-negative summing to 1 (returned normalised exactly),
# the parameters finite, and positive except a location (meanlog, mu of
# the Normal).
check_family_mixture <- function(alpha, params, family, call) {
  args <- c(list(alpha = alpha), params)
  for (arg in names(args)) {
    v <- args[[arg]]
    if (!is.numeric(v) || length(v) == 0 || anyNA(v)) {
      bulkem_abort(c(
        "{.arg {arg}} must be a non-empty numeric vector without missing values.",
        x = "You supplied {describe_value(v)}."
      ), call = call)
    }
  }
  lens <- lengths(args)
  if (any(lens != length(alpha))) {
    bulkem_abort(c(
      "{.arg {names(args)}} must have one length (one value per component).",
      x = "They have lengths {paste(lens, collapse = ', ')}."
    ), call = call)
  }
  check_weights(alpha, call)
  location <- c("meanlog", if (family$name == "normal") "mu")
  for (arg in names(params)) {
    v <- params[[arg]]
    positive <- !(arg %in% location)
    bad <- !is.finite(v) | (positive & v <= 0)
    if (any(bad)) {
      bulkem_abort(c(
        paste0("{.arg {arg}} must be ", if (positive) "positive and " else "", "finite."),
        x = "Component {which(bad)[1]} has {arg} = {v[bad][1]}."
      ), call = call)
    }
  }
  alpha / sum(alpha)
}

# Mixture weights: non-negative, finite, summing to 1.
check_weights <- function(alpha, call) {
  if (any(!is.finite(alpha) | alpha < 0)) {
    bulkem_abort(c("{.arg alpha} must be non-negative and finite.",
                   x = "Component {which(!is.finite(alpha) | alpha < 0)[1]} has weight {alpha[!is.finite(alpha) | alpha < 0][1]}."),
                 call = call)
  }
  total <- sum(alpha)
  if (abs(total - 1) > 1e-8) {
    bulkem_abort(c("{.arg alpha} must sum to 1.", x = "It sums to {format(total, digits = 15)}."), call = call)
  }
  invisible(alpha)
}
