# hbglm() and slice_sample(): exact answers within Monte Carlo error (the
# standard error from the draws' effective sample size), agreement with
# bayesm and posterior, methods, reproducibility and input errors.

# Mean and variance of a chain against the truth, within z standard errors.
expect_moments <- function(x, mean, var, m4, z = 5) {
  n_eff <- posterior::ess_basic(x)
  expect_gt(n_eff, 0.1 * length(x))
  expect_lt(abs(mean(x) - mean), z * sqrt(var / n_eff))
  expect_lt(abs(var(x) - var), z * sqrt((m4 - var^2) / n_eff))
}

small_gaussian <- function(G = 6, n = 12, seed = 1) {
  set.seed(seed)
  d <- data.frame(store = rep(sprintf("s%02d", seq_len(G)), each = n), price = rnorm(G * n),
                  promo = rbinom(G * n, 1, 0.3))
  b0 <- rnorm(G, 1, 0.5)
  b1 <- rnorm(G, -0.5, 0.3)
  g <- as.integer(factor(d$store))
  d$y <- b0[g] + b1[g] * d$price + 0.4 * d$promo + rnorm(G * n, 0, 0.5)
  d
}

test_that("slice_sample() reproduces moments of normal, gamma and truncated densities", {
  skip_if_not_installed("posterior")
  set.seed(11)
  x <- slice_sample(function(x) dnorm(x, 2, 3, log = TRUE), 0, 4000)
  expect_length(x, 4000)
  expect_gt(attr(x, "evaluations"), 4000)
  expect_moments(x, 2, 9, 3 * 81)
  # Gamma(3, rate 2): mean 1.5, variance 0.75, 4th central moment 45/16.
  x <- slice_sample(function(x) dgamma(x, 3, 2, log = TRUE), 1, 4000, w = 2, lower = 0)
  expect_true(all(x > 0))
  expect_moments(x, 1.5, 0.75, 45 / 16)
  # N(0, 1) truncated to [-0.5, 1.5] through -Inf outside, with m = 3.
  f <- function(x) if (x < -0.5 || x > 1.5) -Inf else -x^2 / 2
  x <- slice_sample(f, 0, 4000, w = 0.7, m = 3)
  expect_true(all(x >= -0.5 & x <= 1.5))
  dens <- function(x) dnorm(x) / (pnorm(1.5) - pnorm(-0.5))
  mom <- function(k, c = 0) integrate(function(x) (x - c)^k * dens(x), -0.5, 1.5)$value
  m1 <- mom(1)
  expect_moments(x, m1, mom(2, m1), mom(4, m1))
})

test_that("slice_sample() rejects bad input, naming the argument", {
  expect_snapshot(error = TRUE, {
    slice_sample("dnorm", 0, 10)
    slice_sample(dnorm, 0, 0)
    slice_sample(dnorm, 0, 10, w = -1)
    slice_sample(dnorm, 0, 10, m = 0.5)
    slice_sample(dnorm, 2, 10, lower = 0, upper = 1)
    slice_sample(function(x) if (x > 0) 0 else -Inf, -1, 10)
    slice_sample(function(x) c(1, 2), 0, 10)
  })
})

test_that("hbglm() returns named draws, diagnostics and the parallelisation record", {
  d <- small_gaussian()
  fit <- hbglm(y ~ price, d, group = "store", global = ~ promo, iter = 300, warmup = 100,
               chains = 3, thin = 2, seed = 5, use.gpu = FALSE)
  expect_s3_class(fit, "bulkem_hbglm")
  expect_equal(dim(fit$draws), c(100, 3, 6 * 2 + 2 + 2 + 1 + 1))
  pars <- dimnames(fit$draws)[[3]]
  expect_equal(pars[1:2], c("beta[s01,(Intercept)]", "beta[s01,price]"))
  expect_equal(tail(pars, 6), c("mu[(Intercept)]", "mu[price]", "tau[(Intercept)]", "tau[price]",
                                "gamma[promo]", "sigma"))
  expect_true(all(fit$draws[, , "sigma"] > 0) && all(fit$draws[, , "tau[price]"] > 0))
  expect_equal(fit$parallel$regime[fit$parallel$block == "beta"], "block-parallel")
  expect_equal(fit$parallel$regime[fit$parallel$block == "gamma"], "log-posterior-parallel")
  expect_equal(fit$evaluations$stuck, 0)
  expect_gt(fit$evaluations$per_beta_update, 2)
  expect_equal(unname(fit$group_sizes), rep(12L, 6))
  expect_equal(dim(coef(fit)), c(6, 2))
  expect_identical(as.array(fit), fit$draws)

  s <- summary(fit, pars = c("mu", "sigma"), probs = c(0.1, 0.9))
  expect_s3_class(s, "summary.bulkem_hbglm")
  expect_equal(rownames(s), c("mu[(Intercept)]", "mu[price]", "sigma"))
  expect_named(s, c("mean", "sd", "10%", "90%", "rhat", "ess_bulk"))
  expect_equal(s$mean[3], mean(fit$draws[, , "sigma"]))
  expect_output(print(fit), "Hierarchical gaussian GLM")
  expect_output(print(s), "Posterior summary")
  expect_output(print(hbglm_prior()), "half-cauchy\\(0, 2.5\\)")
  expect_error(summary(fit, pars = "delta"), "Unknown")
  pdf(NULL)
  on.exit(dev.off())
  expect_invisible(plot(fit))
  expect_invisible(plot(fit, pars = "beta[s02,price]"))
})

test_that("R-hat and bulk ESS agree with the posterior package", {
  skip_if_not_installed("posterior")
  d <- small_gaussian()
  fit <- hbglm(y ~ price, d, group = "store", iter = 600, warmup = 100, chains = 4, seed = 2,
               use.gpu = FALSE)
  draws <- posterior::as_draws_array(fit)
  expect_s3_class(draws, "draws_array")
  expect_equal(posterior::variables(draws), dimnames(fit$draws)[[3]])
  ref <- posterior::summarise_draws(draws, "mean", "rhat", "ess_bulk")
  s <- summary(fit)
  expect_equal(s$mean, as.numeric(ref$mean), tolerance = 1e-12)
  expect_equal(s$rhat, as.numeric(ref$rhat), tolerance = 1e-7)
  expect_equal(s$ess_bulk, as.numeric(ref$ess_bulk), tolerance = 1e-7)
  # Chains held apart: R-hat flags it.
  bad <- fit
  bad$draws[, 1, ] <- bad$draws[, 1, ] + 10
  expect_true(all(summary(bad, pars = "mu")$rhat > 1.5))
})

test_that("as.mcmc.list() gives one coda chain per chain", {
  skip_if_not_installed("coda")
  d <- small_gaussian()
  fit <- hbglm(y ~ price, d, group = "store", iter = 200, warmup = 100, chains = 2, seed = 3,
               use.gpu = FALSE)
  ml <- coda::as.mcmc.list(fit)
  expect_s3_class(ml, "mcmc.list")
  expect_equal(coda::nchain(ml), 2)
  expect_equal(coda::niter(ml), 100)
  expect_equal(unname(as.matrix(ml[[2]])[, "sigma"]), unname(fit$draws[, 2, "sigma"]))
})

test_that("known variances: posterior means and sds match the closed form", {
  skip_if_not_installed("posterior")
  # y_gj ~ N(beta_g, s^2), beta_g ~ N(mu, t^2), mu ~ N(m0, s0^2): ybar_g | mu
  # ~ N(mu, t^2 + s^2/n_g), so mu | y is normal, and beta_g | mu, y too.
  set.seed(7)
  sizes <- c(3, 8, 5, 12, 2)
  d <- data.frame(g = rep(seq_along(sizes), sizes))
  d$y <- rnorm(5, 1, 0.8)[d$g] + rnorm(nrow(d), 0, 1.2)
  s2 <- 1.2^2; t2 <- 0.8^2; m0 <- 0.5; s02 <- 4
  fit <- hbglm(y ~ 1, d, group = "g", iter = 3000, warmup = 500, chains = 4, seed = 8,
               prior = hbglm_prior(mu_mean = m0, mu_sd = 2, tau_fixed = 0.8, sigma_fixed = 1.2),
               use.gpu = FALSE)
  ybar <- tapply(d$y, d$g, mean)
  v <- t2 + s2 / sizes
  prec_mu <- 1 / s02 + sum(1 / v)
  mean_mu <- (m0 / s02 + sum(ybar / v)) / prec_mu
  p_g <- 1 / t2 + sizes / s2
  shrink <- (1 / t2) / p_g
  mean_beta <- (mean_mu / t2 + sizes * ybar / s2) / p_g
  sd_beta <- sqrt(1 / p_g + shrink^2 / prec_mu)
  exact <- data.frame(mean = c(mean_beta, mean_mu), sd = c(sd_beta, sqrt(1 / prec_mu)))
  s <- summary(fit, pars = c("beta", "mu"))
  expect_true(all(s$rhat < 1.01))
  expect_true(all(abs(s$mean - exact$mean) < 5 * exact$sd / sqrt(s$ess_bulk)))
  expect_true(all(abs(s$sd - exact$sd) < 5 * exact$sd / sqrt(2 * s$ess_bulk)))
})

test_that("posterior means agree with bayesm::rhierLinearModel on a shared example", {
  skip_if_not_installed("bayesm")
  skip_if_not_installed("posterior")
  # The same model in both: variances held (bayesm: huge prior degrees of
  # freedom around the same values), mu ~ N(0, 10^2) (bayesm: A = 0.01).
  set.seed(42)
  G <- 10; n <- 15
  d <- data.frame(g = rep(seq_len(G), each = n), x = rnorm(G * n))
  d$y <- rnorm(G, 1, 0.5)[d$g] + rnorm(G, -0.5, 0.5)[d$g] * d$x + rnorm(G * n, 0, 0.5)
  fit <- hbglm(y ~ x, d, group = "g", iter = 2500, warmup = 500, chains = 4, seed = 1,
               prior = hbglm_prior(tau_fixed = 0.5, sigma_fixed = 0.5), use.gpu = FALSE)
  regdata <- lapply(seq_len(G), function(i) list(y = d$y[d$g == i], X = cbind(1, d$x[d$g == i])))
  big <- 1e6
  # bayesm prints its settings; keep the test output clean.
  utils::capture.output(out <- bayesm::rhierLinearModel(
    Data = list(regdata = regdata),
    Prior = list(Deltabar = matrix(0, 1, 2), A = matrix(0.01), nu.e = big, ssq = rep(0.25, G),
                 nu = big, V = big * 0.25 * diag(2)),
    Mcmc = list(R = 10000, keep = 1, nprint = 0)
  ))
  keep <- out$betadraw[, , 1001:10000]
  bm <- as.vector(t(apply(keep, c(1, 2), mean)))
  bsd <- as.vector(t(apply(keep, c(1, 2), sd)))
  bess <- as.vector(t(apply(keep, c(1, 2), posterior::ess_basic)))
  s <- summary(fit, pars = "beta")
  se <- sqrt(s$sd^2 / s$ess_bulk + bsd^2 / bess)
  expect_true(all(abs(s$mean - bm) < 5 * se))
})

test_that("binomial and poisson fits recover their simulating parameters", {
  set.seed(9)
  G <- 20; n <- 60
  d <- data.frame(g = rep(seq_len(G), each = n), x = rnorm(G * n))
  b <- cbind(rnorm(G, -0.5, 0.3), rnorm(G, 1, 0.3))
  eta <- b[d$g, 1] + b[d$g, 2] * d$x
  d$yb <- rbinom(G * n, 1, plogis(eta))
  d$yp <- rpois(G * n, exp(eta))
  fb <- hbglm(yb ~ x, d, group = "g", family = "binomial", iter = 600, warmup = 200, chains = 2,
              seed = 1, use.gpu = FALSE)
  fp <- hbglm(yp ~ x, d, group = "g", family = "poisson", iter = 600, warmup = 200, chains = 2,
              seed = 1, use.gpu = FALSE)
  for (fit in list(fb, fp)) {
    s <- summary(fit, pars = "mu")
    expect_true(all(abs(s$mean - c(-0.5, 1)) < 4 * s$sd + 0.1))
    expect_false("sigma" %in% dimnames(fit$draws)[[3]])
  }
  # A logical response and a two-level factor are 0/1.
  d$yl <- d$yb == 1
  fl <- hbglm(yl ~ x, d, group = "g", family = "binomial", iter = 50, warmup = 10, chains = 1,
              seed = 1, use.gpu = FALSE)
  expect_equal(fl$draws, hbglm(yb ~ x, d, group = "g", family = "binomial", iter = 50, warmup = 10,
                               chains = 1, seed = 1, use.gpu = FALSE)$draws)
})

test_that("draws are reproducible, whatever the thread count and row order", {
  d <- small_gaussian()
  run <- function(data = d, ...) {
    hbglm(y ~ price, data, group = ~ store, iter = 60, warmup = 20, chains = 2, use.gpu = FALSE, ...)$draws
  }
  a <- run(seed = 4)
  expect_identical(a, run(seed = 4))
  withr_threads <- function(k, expr) {
    old <- options(bulkem.threads = k)
    on.exit(options(old))
    expr
  }
  expect_identical(a, withr_threads(1, run(seed = 4)))
  # Groups in another order (rows within a group kept): same draws.
  expect_identical(a, run(d[order(-as.integer(factor(d$store)), seq_len(nrow(d))), ], seed = 4))
  set.seed(10); b <- run()
  set.seed(10); expect_identical(b, run())
  expect_false(identical(a, run(seed = 5)))
})

test_that("bad input to hbglm() is a clear error naming the argument", {
  d <- small_gaussian(G = 3, n = 4)
  expect_snapshot(error = TRUE, {
    hbglm(y ~ price, d, group = "store", family = "gamma")
    hbglm(y ~ price, d, group = "shop")
    hbglm(y ~ price, d, group = 1:3)
    hbglm(y ~ price, d, group = "store", iter = 10, warmup = 10)
    hbglm(y ~ price, d, group = "store", chains = 0)
    hbglm(y ~ price, d, group = "store", prior = list(mu_sd = 1))
    hbglm(y ~ price, d, group = "store", slice = list(w = 0))
    hbglm(y ~ price, d, group = "store", slice = list(m = 0.5))
    hbglm(y ~ price, d, group = "store", global = ~ price)
    hbglm(~ price, d, group = "store")
    hbglm_prior(tau_scale = -1)
    hbglm_prior(tau_family = "cauchy")
  })
  if (!bulkem_backends()$usable[2]) {
    expect_error(hbglm(y ~ price, d, group = "store", use.gpu = TRUE), "no CUDA GPU is usable")
  }
  na_y <- d
  na_y$y[5] <- NA
  expect_snapshot(hbglm(y ~ price, na_y, group = "store"), error = TRUE)
  na_g <- d
  na_g$store[2] <- NA
  expect_error(hbglm(y ~ price, na_g, group = "store"), "The group is missing in row 2")
  empty <- d
  empty$store <- factor(empty$store, levels = c("s01", "s02", "s03", "s04"))
  expect_snapshot(hbglm(y ~ price, empty, group = "store"), error = TRUE)
  d$yb <- c(0, 1, 2, rep(0, 9))
  expect_snapshot(hbglm(yb ~ price, d, group = "store", family = "binomial"), error = TRUE)
  d$yp <- c(0, 1, -1, rep(0, 9))
  expect_error(hbglm(yp ~ price, d, group = "store", family = "poisson"), "Row 3 is `-1`")
  d$yp[3] <- 1.5
  expect_snapshot(hbglm(yp ~ price, d, group = "store", family = "poisson"), error = TRUE)
})
