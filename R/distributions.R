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
  if (length(alpha) == 1) {
    out <- ldinvgauss(x, mu, lambda)
  } else {
    logd <- vapply(seq_along(alpha), function(j) log(alpha[j]) + ldinvgauss(x, mu[j], lambda[j]),
                   numeric(length(x)))
    out <- row_logsumexp(matrix(logd, nrow = length(x)))
    # Keep NaN (not NA) where x was NaN, as dnorm() does.
    out[is.nan(x)] <- NaN
  }
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

# alpha, mu and lambda of one mixture: numeric, no NA, one length, alpha
# non-negative summing to 1 (returned normalised exactly), mu and lambda
# finite and positive.
check_mixture <- function(alpha, mu, lambda, call = parent.frame()) {
  args <- list(alpha = alpha, mu = mu, lambda = lambda)
  for (arg in names(args)) {
    v <- args[[arg]]
    if (!is.numeric(v) || length(v) == 0 || anyNA(v)) {
      bulkem_abort(c(
        "{.arg {arg}} must be a non-empty numeric vector without missing values.",
        x = "You supplied {describe_value(v)}."
      ), call = call)
    }
  }
  if (length(mu) != length(alpha) || length(lambda) != length(alpha)) {
    bulkem_abort(c(
      "{.arg alpha}, {.arg mu} and {.arg lambda} must have one length (one value per component).",
      x = "They have lengths {length(alpha)}, {length(mu)} and {length(lambda)}."
    ), call = call)
  }
  if (any(!is.finite(alpha) | alpha < 0)) {
    bulkem_abort(c("{.arg alpha} must be non-negative and finite.",
                   x = "Component {which(!is.finite(alpha) | alpha < 0)[1]} has weight {alpha[!is.finite(alpha) | alpha < 0][1]}."),
                 call = call)
  }
  total <- sum(alpha)
  if (abs(total - 1) > 1e-8) {
    bulkem_abort(c("{.arg alpha} must sum to 1.", x = "It sums to {format(total, digits = 15)}."), call = call)
  }
  for (arg in c("mu", "lambda")) {
    v <- args[[arg]]
    bad <- !is.finite(v) | v <= 0
    if (any(bad)) {
      bulkem_abort(c(
        "{.arg {arg}} must be positive and finite.",
        x = "Component {which(bad)[1]} has {arg} = {v[bad][1]}."
      ), call = call)
    }
  }
  alpha / total
}

# Log-density of the inverse Gaussian for scalar mu and lambda: -Inf
# outside (0, Inf), NA/NaN kept. log f = (log lambda - log 2 pi) / 2 -
# 1.5 log x - q with q = lambda (x - mu)^2 / (2 mu^2 x), computed as
# lambda / (2x) * ((x - mu) / mu)^2 (no x^3 or mu^2 to overflow), and in
# logs where that product overflows or underflows.
ldinvgauss <- function(x, mu, lambda) {
  out <- rep(-Inf, length(x))
  na <- is.na(x)
  out[na] <- x[na]
  ok <- !na & x > 0 & x < Inf
  xp <- x[ok]
  d <- xp - mu
  q <- lambda / (2 * xp) * (d / mu)^2
  redo <- !is.finite(q) | (q == 0 & d != 0)
  if (any(redo)) {
    q[redo] <- exp(log(lambda) - log(2) + 2 * log(abs(d[redo])) - 2 * log(mu) - log(xp[redo]))
  }
  out[ok] <- 0.5 * (log(lambda) - log(2 * pi)) - 1.5 * log(xp) - q
  out
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

row_logsumexp <- function(m) {
  top <- apply(m, 1, max)
  top[!is.finite(top)] <- 0
  top + log(rowSums(exp(m - top)))
}
