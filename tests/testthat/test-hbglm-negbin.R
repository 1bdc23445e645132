# hbglm(family = "negbinomial"): overdispersed counts, the shape sampled.

negbin_data <- function(G = 4, n = 500, theta = 2, seed = 3) {
  set.seed(seed)
  d <- data.frame(g = rep(seq_len(G), each = n), x = rnorm(G * n), e = runif(G * n, 0.5, 2))
  d$y <- rnbinom(G * n, size = theta, mu = d$e * exp(0.5 + 0.3 * d$x))
  d
}

test_that("with the groups held together it agrees with MASS::glm.nb at large n", {
  skip_if_not_installed("MASS")
  d <- negbin_data()
  ref <- MASS::glm.nb(y ~ x + offset(log(e)), data = d)
  fit <- hbglm(y ~ x + offset(log(e)), d, group = "g", family = "negbinomial", iter = 1500, warmup = 500,
               chains = 2, seed = 4, prior = hbglm_prior(tau_fixed = 1e-4), use.gpu = FALSE)
  expect_identical(dimnames(fit$draws)[[3]][dim(fit$draws)[3]], "shape")
  expect_identical(fit$parallel$block[nrow(fit$parallel)], "shape")
  s <- summary(fit)
  se <- s$sd / sqrt(s$ess_bulk)
  for (k in 1:2) {
    row <- c("mu[(Intercept)]", "mu[x]")[k]
    # Posterior mean against the MLE: within Monte Carlo error plus a
    # fraction of the posterior sd (their difference is O(1/n)).
    expect_lt(abs(s[row, "mean"] - coef(ref)[[k]]), 4 * se[rownames(s) == row] + 0.1 * s[row, "sd"])
  }
  log_shape <- log(as.vector(fit$draws[, , "shape"]))
  expect_lt(abs(mean(log_shape) - log(ref$theta)), 4 * sd(log_shape) / sqrt(s["shape", "ess_bulk"]) + 0.1 * sd(log_shape))
  # The posterior sd of theta is near glm.nb's standard error.
  expect_equal(s["shape", "sd"], ref$SE.theta, tolerance = 0.25)
})

test_that("log_lik, simulate, predict and residuals follow the negative binomial", {
  d <- negbin_data(G = 6, n = 40, theta = 1.5)
  fit <- hbglm(y ~ x, d, group = "g", family = "negbinomial", iter = 600, warmup = 300, chains = 2,
               seed = 2, use.gpu = FALSE)
  ll <- log_lik(fit)
  draws <- posterior::as_draws_matrix(fit)
  s <- 17
  i <- 55
  g <- d$g[i]
  eta <- draws[s, sprintf("beta[%d,(Intercept)]", g)] + draws[s, sprintf("beta[%d,x]", g)] * d$x[i]
  expect_equal(unname(ll[s, i]), dnbinom(d$y[i], size = draws[s, "shape"], mu = exp(eta), log = TRUE), tolerance = 1e-12)
  sims <- simulate(fit, nsim = 400, seed = 1)
  expect_true(all(sims >= 0 & sims == round(sims)))
  # Overdispersed: the replicated counts vary more than a Poisson's.
  expect_gt(mean(apply(sims, 2, var) / pmax(colMeans(sims), 1e-9)), 1.5)
  p <- predict(fit, type = "response")
  b1 <- unclass(draws)[, sprintf("beta[%d,(Intercept)]", d$g)]
  b2 <- unclass(draws)[, sprintf("beta[%d,x]", d$g)]
  eta_all <- b1 + b2 * rep(d$x, each = nrow(b1))
  expect_equal(unname(p), unname(colMeans(exp(eta_all))), tolerance = 1e-10)
  r <- residuals(fit, type = "pearson")
  expect_true(all(is.finite(r)))
  expect_output(print(fit), "shape")
  # The shape held fixed: every draw that value.
  held <- hbglm(y ~ x, d, group = "g", family = "negbinomial", iter = 300, warmup = 150, chains = 2,
                seed = 2, prior = hbglm_prior(shape_fixed = 1.5), use.gpu = FALSE)
  expect_true(all(held$draws[, , "shape"] == 1.5))
})

test_that("responses and family objects it cannot take are errors", {
  d <- negbin_data(G = 3, n = 10)
  d$bad <- d$y + 0.5
  expect_snapshot(error = TRUE, {
    hbglm(bad ~ x, d, group = "g", family = "negbinomial", use.gpu = FALSE)
    hbglm(cbind(y, y) ~ x, d, group = "g", family = "negbinomial", use.gpu = FALSE)
    hbglm(y ~ x, d, group = "g", family = MASS::negative.binomial(2), use.gpu = FALSE)
    hbglm_prior(shape = c(1, -1))
  })
})
