#' Inverse Gaussian mixtures: density and random generation
#'
#' `dinvgaussmix()` evaluates the density of a mixture of inverse Gaussian
#' distributions; `rinvgaussmix()` draws from it (Michael, Schucany and Haas'
#' transformation method, using R's random number generator).
#'
#' @param x Vector of quantiles.
#' @param n Number of observations.
#' @param alpha Mixing weights (non-negative, normalised to sum to 1).
#' @param mu Component means (positive).
#' @param lambda Component shapes (positive).
#' @param log If `TRUE`, return the log-density.
#' @return `dinvgaussmix()`: the density at each `x` (0 for `x <= 0`).
#'   `rinvgaussmix()`: a numeric vector of `n` draws, with the component of
#'   each draw as attribute `"component"`.
#' @examples
#' set.seed(1)
#' x <- rinvgaussmix(1000, alpha = c(0.3, 0.7), mu = c(1, 3), lambda = c(30, 0.2))
#' hist(x, breaks = 100, freq = FALSE, xlim = c(0, 8))
#' curve(dinvgaussmix(x, c(0.3, 0.7), c(1, 3), c(30, 0.2)), add = TRUE, n = 500)
#' @export
dinvgaussmix <- function(x, alpha, mu, lambda, log = FALSE) {
  check_mixture(alpha, mu, lambda)
  alpha <- alpha / sum(alpha)
  logd <- vapply(seq_along(alpha), function(j) log(alpha[j]) + ldinvgauss(x, mu[j], lambda[j]),
                 numeric(length(x)))
  logd <- matrix(logd, nrow = length(x))
  out <- row_logsumexp(logd)
  if (log) out else exp(out)
}

#' @rdname dinvgaussmix
#' @export
rinvgaussmix <- function(n, alpha, mu, lambda) {
  n <- check_count(n, "n", min = 0)
  check_mixture(alpha, mu, lambda)
  comp <- sample.int(length(alpha), n, replace = TRUE, prob = alpha)
  x <- rinvgauss_msh(mu[comp], lambda[comp])
  attr(x, "component") <- comp
  x
}

check_mixture <- function(alpha, mu, lambda, call = parent.frame()) {
  ok <- is.numeric(alpha) && is.numeric(mu) && is.numeric(lambda) &&
    length(alpha) >= 1 && length(alpha) == length(mu) && length(mu) == length(lambda) &&
    all(is.finite(c(alpha, mu, lambda))) && all(alpha >= 0) && sum(alpha) > 0 &&
    all(mu > 0) && all(lambda > 0)
  if (!ok) {
    bulkem_abort(c(
      "{.arg alpha}, {.arg mu} and {.arg lambda} must be finite numeric vectors of one length.",
      i = "{.arg alpha} must be non-negative (not all 0); {.arg mu} and {.arg lambda} positive."
    ), call = call)
  }
}

# Log-density of the inverse Gaussian (-Inf outside the support).
ldinvgauss <- function(x, mu, lambda) {
  out <- rep(-Inf, length(x))
  pos <- !is.na(x) & x > 0
  xp <- x[pos]
  out[pos] <- 0.5 * log(lambda / (2 * pi * xp^3)) - lambda * (xp - mu)^2 / (2 * mu^2 * xp)
  out[is.na(x)] <- NA_real_
  out
}

# Michael, Schucany & Haas (1976), vectorised over mu and lambda. The
# smaller root of their quadratic is computed as mu^2 / (larger root), which
# does not cancel when mu * y / lambda is large.
rinvgauss_msh <- function(mu, lambda) {
  y <- stats::rnorm(length(mu))^2
  larger <- mu + mu^2 * y / (2 * lambda) + mu / (2 * lambda) * sqrt(4 * mu * lambda * y + mu^2 * y^2)
  x <- mu^2 / larger
  z <- stats::runif(length(mu))
  ifelse(z <= mu / (mu + x), x, larger)
}

row_logsumexp <- function(m) {
  top <- apply(m, 1, max)
  top[!is.finite(top)] <- 0
  top + log(rowSums(exp(m - top)))
}
