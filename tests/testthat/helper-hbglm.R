# Data of a correlated random-slope model y ~ x + (1 + x | g): G groups of n
# rows, group coefficients c(1, -0.5) + N(0, cov), residual sd `noise`.
# Draws from the current RNG stream (the caller sets the seed).
sim_random_slopes <- function(G, n, cov, noise) {
  d <- data.frame(g = rep(seq_len(G), each = n), x = rnorm(G * n))
  L <- t(chol(matrix(cov, 2)))
  b <- t(c(1, -0.5) + L %*% matrix(rnorm(2 * G), 2))
  d$y <- b[d$g, 1] + b[d$g, 2] * d$x + rnorm(G * n, 0, noise)
  d
}
