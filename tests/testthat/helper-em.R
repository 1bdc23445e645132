# A plain-R EM for one dataset, written independently of the package from
# the textbook formulas: the oracle for bulkem's numerics.
plain_em <- function(x, family, alpha, mu, scale, iters) {
  ldens <- function(x, mu, s) {
    if (family == "normal") stats::dnorm(x, mu, s, log = TRUE)
    else 0.5 * log(s / (2 * pi * x^3)) - s * (x - mu)^2 / (2 * mu^2 * x)
  }
  loglik <- function() {
    lw <- sapply(seq_along(alpha), function(j) log(alpha[j]) + ldens(x, mu[j], scale[j]))
    top <- apply(lw, 1, max)
    list(w = exp(lw - top - log(rowSums(exp(lw - top)))), ll = sum(top + log(rowSums(exp(lw - top)))))
  }
  for (it in seq_len(iters)) {
    w <- loglik()$w
    sw <- colSums(w)
    alpha <- sw / length(x)
    mu <- colSums(w * x) / sw
    scale <- if (family == "normal") {
      sqrt(colSums(w * outer(x, mu, "-")^2) / sw)
    } else {
      sw / (colSums(w / x) - sw / mu)
    }
  }
  list(alpha = alpha, mu = mu, scale = scale, loglik = loglik()$ll)
}

rel_diff <- function(a, b) max(abs(a - b) / pmax(abs(b), 1e-300))

sim_ig <- function(D, n, alpha = c(0.3, 0.7), mu = c(1, 3), lambda = c(30, 0.2)) {
  replicate(D, as.numeric(rinvgaussmix(n, alpha, mu, lambda)), simplify = FALSE)
}

# The fits of a bulkem_fits, without its timing and backend attributes.
fits_only <- function(f) {
  f <- unclass(f)
  attributes(f) <- list(names = names(f))
  f
}

# How much optim() (BFGS, from `start`) raises `loglik`: a fit that is the
# maximum of a likelihood it claims to maximise leaves nothing to gain.
optim_gain <- function(loglik, start) {
  o <- stats::optim(start, function(v) -loglik(v), method = "BFGS", control = list(reltol = 1e-15, maxit = 5000))
  -o$value - loglik(start)
}
