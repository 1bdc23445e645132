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

# Short runs (reproducibility, methods) rightly warn that the chains have
# not mixed; those tests are about something else.
unmixed_ok <- function(expr) suppressWarnings(expr, classes = "bulkem_warning_rhat")

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
  fit <- unmixed_ok(hbglm(y ~ price, d, group = "store", global = ~ promo, iter = 300, warmup = 100,
                          chains = 3, thin = 2, seed = 5, use.gpu = FALSE))
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
  expect_named(s, c("mean", "sd", "10%", "90%", "rhat", "ess_bulk", "ess_tail"))
  expect_equal(s$mean[3], mean(fit$draws[, , "sigma"]))
  # The quantiles are stats::quantile()'s, bit for bit (the core's, in parallel).
  ref <- t(apply(matrix(fit$draws[, , rownames(s)], ncol = 3), 2, stats::quantile, probs = c(0.1, 0.9), names = FALSE))
  expect_identical(unname(as.matrix(s[c("10%", "90%")])), ref)
  one <- summary(fit, pars = "sigma", probs = 0.5)
  expect_identical(one[["50%"]], stats::quantile(fit$draws[, , "sigma"], 0.5, names = FALSE))
  expect_output(print(fit), "Hierarchical gaussian GLM")
  expect_output(print(fit), "min bulk ESS [0-9]+, min tail ESS [0-9]+")
  expect_output(print(s), "Posterior summary")
  expect_output(print(s), "ess_bulk ess_tail")
  expect_output(print(hbglm_prior()), "half-cauchy\\(0, 2.5\\)")
  expect_error(summary(fit, pars = "delta"), "Unknown")
  pdf(NULL)
  on.exit(dev.off())
  expect_invisible(plot(fit))
  expect_invisible(plot(fit, pars = "beta[s02,price]"))
})

test_that("R-hat, bulk and tail ESS agree with the posterior package", {
  skip_if_not_installed("posterior")
  d <- small_gaussian()
  # An odd number of kept draws: the split chains drop the middle draw.
  fit <- hbglm(y ~ price, d, group = "store", iter = 601, warmup = 100, chains = 4, seed = 2,
               use.gpu = FALSE)
  draws <- posterior::as_draws_array(fit)
  expect_s3_class(draws, "draws_array")
  expect_equal(posterior::variables(draws), dimnames(fit$draws)[[3]])
  ref <- posterior::summarise_draws(draws, "mean", "rhat", "ess_bulk", "ess_tail")
  s <- summary(fit)
  expect_equal(s$mean, as.numeric(ref$mean), tolerance = 1e-12)
  expect_equal(s$rhat, as.numeric(ref$rhat), tolerance = 1e-7)
  expect_equal(s$ess_bulk, as.numeric(ref$ess_bulk), tolerance = 1e-7)
  expect_equal(s$ess_tail, as.numeric(ref$ess_tail), tolerance = 1e-7)
  # Tail and bulk ESS are different quantities (not one copied to the other).
  expect_gt(max(abs(s$ess_tail / s$ess_bulk - 1)), 0.05)
  expect_equal(s["sigma", "ess_tail"], posterior::ess_tail(fit$draws[, , "sigma"]), tolerance = 1e-7)
  # Skewed draws (exp of a parameter's), through the same code path.
  expect_equal(bulkem:::hbglm_diagnostics(exp(fit$draws[, , "mu[price]", drop = FALSE]))$ess_tail,
               posterior::ess_tail(exp(fit$draws[, , "mu[price]"])), tolerance = 1e-7)
  # A scale held fixed has constant draws: NA, as in posterior.
  held <- unmixed_ok(hbglm(y ~ price, d, group = "store", iter = 200, warmup = 100, chains = 2, seed = 2,
                           prior = hbglm_prior(tau_fixed = 0.5), use.gpu = FALSE))
  st <- summary(held, pars = "tau")
  expect_true(all(is.na(st$ess_tail)) && all(is.na(st$ess_bulk)))
  expect_true(all(is.na(posterior::summarise_draws(posterior::as_draws_array(held), "ess_tail")$ess_tail[
    posterior::variables(posterior::as_draws_array(held)) %in% rownames(st)])))
  # Chains held apart: R-hat flags it.
  bad <- fit
  bad$draws[, 1, ] <- bad$draws[, 1, ] + 10
  expect_true(all(summary(bad, pars = "mu")$rhat > 1.5))
})

test_that("as.mcmc.list() gives one coda chain per chain", {
  skip_if_not_installed("coda")
  d <- small_gaussian()
  fit <- unmixed_ok(hbglm(y ~ price, d, group = "store", iter = 200, warmup = 100, chains = 2, seed = 3,
                          use.gpu = FALSE))
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
  fb <- unmixed_ok(hbglm(yb ~ x, d, group = "g", family = "binomial", iter = 600, warmup = 200, chains = 2,
                         seed = 1, use.gpu = FALSE))
  fp <- unmixed_ok(hbglm(yp ~ x, d, group = "g", family = "poisson", iter = 600, warmup = 200, chains = 2,
                         seed = 1, use.gpu = FALSE))
  for (fit in list(fb, fp)) {
    s <- summary(fit, pars = "mu")
    expect_true(all(abs(s$mean - c(-0.5, 1)) < 4 * s$sd + 0.1))
    expect_false("sigma" %in% dimnames(fit$draws)[[3]])
  }
  # A logical response and a two-level factor are 0/1.
  d$yl <- d$yb == 1
  fl <- unmixed_ok(hbglm(yl ~ x, d, group = "g", family = "binomial", iter = 50, warmup = 10, chains = 1,
                         seed = 1, use.gpu = FALSE))
  expect_equal(fl$draws, unmixed_ok(hbglm(yb ~ x, d, group = "g", family = "binomial", iter = 50, warmup = 10,
                                          chains = 1, seed = 1, use.gpu = FALSE))$draws)
})

test_that("draws are reproducible, whatever the thread count and row order", {
  d <- small_gaussian()
  run <- function(data = d, ...) {
    unmixed_ok(hbglm(y ~ price, data, group = ~ store, iter = 60, warmup = 20, chains = 2, use.gpu = FALSE, ...))$draws
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

# Grouped data for the checks against glm(): every group's coefficients
# estimated by glm() separately (no pooling), and by hbglm() with weak
# priors (tau held large, so the groups do not shrink towards each other).
per_group_glm <- function(formula, d, family) {
  fit <- stats::glm(formula, family = family, data = d)
  cf <- summary(fit)$coefficients
  list(est = cf[, 1], se = cf[, 2])
}

test_that("offset() terms and the offset argument enter the linear predictor, as in glm()", {
  set.seed(21)
  G <- 4; n <- 250
  d <- data.frame(g = factor(rep(letters[1:G], each = n)), x = rnorm(G * n), t = runif(G * n, 1, 20))
  b0 <- c(-1.2, -0.9, -1.1, -0.8)
  d$y <- rpois(G * n, d$t * exp(b0[d$g] + 0.5 * d$x))
  weak <- hbglm_prior(mu_sd = 100, tau_fixed = 100)
  fit <- hbglm(y ~ x + offset(log(t)), d, group = "g", family = "poisson", prior = weak,
               iter = 1200, warmup = 400, chains = 2, seed = 1, use.gpu = FALSE)
  ref <- per_group_glm(y ~ 0 + g + g:x + offset(log(t)), d, poisson)
  est <- as.vector(t(coef(fit)))
  want <- as.vector(rbind(ref$est[1:G], ref$est[G + 1:G]))
  se <- as.vector(rbind(ref$se[1:G], ref$se[G + 1:G]))
  expect_true(all(abs(est - want) < 0.3 * se), info = paste(round((est - want) / se, 2), collapse = " "))
  # Dropping the offset would move every intercept by log(mean t) ~ 2.3.
  expect_true(all(abs(coef(fit)[, 1] - b0) < 0.3))
  # The argument, an offset in `global`, and the term give the same draws.
  by_arg <- hbglm(y ~ x, d, group = "g", family = "poisson", prior = weak, offset = log(t),
                  iter = 1200, warmup = 400, chains = 2, seed = 1, use.gpu = FALSE)
  expect_identical(by_arg$draws, fit$draws)
  lt <- log(d$t)
  by_vector <- hbglm(y ~ x, d, group = "g", family = "poisson", prior = weak, offset = lt,
                     iter = 1200, warmup = 400, chains = 2, seed = 1, use.gpu = FALSE)
  expect_identical(by_vector$draws, fit$draws)
  d$z <- rnorm(G * n)
  in_global <- unmixed_ok(hbglm(y ~ x, d, group = "g", family = "poisson", prior = weak,
                                global = ~ z + offset(log(t)), iter = 60, warmup = 20, chains = 1, seed = 1,
                                use.gpu = FALSE))
  in_formula <- unmixed_ok(hbglm(y ~ x + offset(log(t)), d, group = "g", family = "poisson", prior = weak,
                                 global = ~ z, iter = 60, warmup = 20, chains = 1, seed = 1, use.gpu = FALSE))
  expect_identical(in_global$draws, in_formula$draws)
})

test_that("a gaussian offset shifts the response, a binomial one the logit", {
  set.seed(22)
  G <- 5; n <- 40
  d <- data.frame(g = rep(seq_len(G), each = n), x = rnorm(G * n), o = rnorm(G * n, 3))
  d$y <- 1 + 0.5 * d$x + d$o + rnorm(G * n, 0, 0.3)
  d$y0 <- d$y - d$o
  a <- unmixed_ok(hbglm(y ~ x + offset(o), d, group = "g", iter = 800, warmup = 300, chains = 2, seed = 3,
                        use.gpu = FALSE))
  b <- unmixed_ok(hbglm(y0 ~ x, d, group = "g", iter = 800, warmup = 300, chains = 2, seed = 3, use.gpu = FALSE))
  sa <- summary(a, pars = c("mu", "sigma"))
  sb <- summary(b, pars = c("mu", "sigma"))
  expect_true(all(abs(sa$mean - sb$mean) < 5 * sa$sd / sqrt(pmin(sa$ess_bulk, sb$ess_bulk))))
  d$yb <- rbinom(G * n, 1, plogis(-2 + d$x + 0.6 * d$o))
  off <- unmixed_ok(hbglm(yb ~ x, d, group = "g", family = "binomial", offset = 0.6 * o, iter = 800, warmup = 300,
                          chains = 2, seed = 3, use.gpu = FALSE, prior = hbglm_prior(tau_scale = 0.5)))
  s <- summary(off, pars = "mu")
  expect_true(all(abs(s$mean - c(-2, 1)) < 4 * s$sd + 0.1))
})

test_that("cbind(successes, failures) is a binomial response with trials, as in glm()", {
  set.seed(23)
  G <- 4; n <- 150
  d <- data.frame(g = factor(rep(letters[1:G], each = n)), x = rnorm(G * n))
  d$m <- rpois(G * n, 6) + 1
  d$s <- rbinom(G * n, d$m, plogis(rep(c(-0.6, 0, 0.4, -0.2), each = n) + 0.7 * d$x))
  weak <- hbglm_prior(mu_sd = 100, tau_fixed = 100)
  fit <- hbglm(cbind(s, m - s) ~ x, d, group = "g", family = "binomial", prior = weak,
               iter = 1200, warmup = 400, chains = 2, seed = 2, use.gpu = FALSE)
  ref <- per_group_glm(cbind(s, m - s) ~ 0 + g + g:x, d, binomial)
  est <- as.vector(t(coef(fit)))
  want <- as.vector(rbind(ref$est[1:G], ref$est[G + 1:G]))
  se <- as.vector(rbind(ref$se[1:G], ref$se[G + 1:G]))
  expect_true(all(abs(est - want) < 0.3 * se), info = paste(round((est - want) / se, 2), collapse = " "))
  # One 0/1 row per trial is the same likelihood: the same posterior.
  long <- d[rep(seq_len(nrow(d)), d$m), c("g", "x")]
  long$y <- unlist(lapply(seq_len(nrow(d)), function(i) rep(c(1, 0), c(d$s[i], d$m[i] - d$s[i]))))
  fl <- hbglm(y ~ x, long, group = "g", family = "binomial", prior = weak,
              iter = 1200, warmup = 400, chains = 2, seed = 2, use.gpu = FALSE)
  a <- summary(fit, pars = "beta")
  b <- summary(fl, pars = "beta")
  expect_true(all(abs(a$mean - b$mean) < 5 * a$sd * sqrt(1 / a$ess_bulk + 1 / b$ess_bulk)))
  # Bad counts are errors naming the row.
  d$s[7] <- -1
  expect_error(hbglm(cbind(s, m - s) ~ x, d, group = "g", family = "binomial"),
               class = "bulkem_error_input", regexp = "Row 7")
  expect_error(hbglm(cbind(m, m) ~ x, d, group = "g", family = "poisson"),
               class = "bulkem_error_input", regexp = "single vector")
})

test_that("a noise-free or constant response gives finite draws, with a warning naming the floored scales", {
  set.seed(24)
  d <- data.frame(g = rep(1:8, each = 20), x = rnorm(160))
  d$y <- 1 + 2 * d$x
  expect_warning(
    fit <- hbglm(y ~ x, d, group = "g", iter = 400, warmup = 200, chains = 2, seed = 1, use.gpu = FALSE),
    class = "bulkem_warning_floor", regexp = "sigma"
  )
  expect_true(all(is.finite(fit$draws)))
  expect_true(all(fit$draws[, , "sigma"] >= fit$scale_floor[["sigma"]]))
  expect_equal(unname(colMeans(matrix(fit$draws[, , c("mu[(Intercept)]", "mu[x]")], ncol = 2))), c(1, 2),
               tolerance = 1e-6)
  expect_match(fit$warnings, "floor", all = FALSE)
  expect_output(print(fit), "Warnings of the fit")
  d$y <- 5
  for (seed in 1:10) {
    fit <- suppressWarnings(hbglm(y ~ x, d, group = "g", iter = 200, warmup = 100, chains = 2, seed = seed,
                                  use.gpu = FALSE))
    expect_true(all(is.finite(fit$draws)), info = paste("seed", seed))
  }
  expect_output(print(fit), "Hierarchical gaussian GLM")
})

test_that("stuck updates, poor mixing and separation are warnings naming the parameters", {
  set.seed(25)
  d <- data.frame(g = rep(1:6, each = 15), x = rnorm(90))
  # exp(eta) overflows at the start (eta ~ 800): the beta updates stay stuck.
  d$y <- rpois(90, 2)
  d$o <- 800
  w <- tryCatch(
    hbglm(y ~ x + offset(o), d, group = "g", family = "poisson", iter = 60, warmup = 20, chains = 2,
          seed = 1, use.gpu = FALSE),
    bulkem_warning_stuck = function(w) w
  )
  expect_s3_class(w, "bulkem_warning")
  expect_match(conditionMessage(w), "beta\\[1,\\(Intercept\\)\\]")
  # Too short to mix.
  d$y <- rnorm(90, d$x)
  expect_warning(hbglm(y ~ x, d, group = "g", iter = 12, warmup = 2, chains = 4, seed = 2, use.gpu = FALSE),
                 class = "bulkem_warning_rhat", regexp = "R-hat")
  # y = 1 exactly when x > 0: separation by x, named.
  d$yb <- as.integer(d$x > 0)
  w <- tryCatch(
    unmixed_ok(hbglm(yb ~ x, d, group = "g", family = "binomial", iter = 60, warmup = 20, chains = 2,
                     seed = 1, use.gpu = FALSE)),
    bulkem_warning_separation = function(w) w
  )
  expect_s3_class(w, "bulkem_warning")
  expect_match(conditionMessage(w), "mu\\[x\\]")
  expect_no_match(conditionMessage(w), "Intercept")
  # Overlapping outcomes: no separation warning.
  d$yb <- rbinom(90, 1, plogis(d$x))
  expect_no_warning(unmixed_ok(hbglm(yb ~ x, d, group = "g", family = "binomial", iter = 60, warmup = 20,
                                     chains = 2, seed = 1, use.gpu = FALSE)), class = "bulkem_warning_separation")
})

test_that("terms and inputs hbglm() cannot honour are classed errors naming them", {
  set.seed(26)
  d <- data.frame(g = rep(1:4, each = 10), x = rnorm(40), t = runif(40, 1, 2))
  d$y <- rnorm(40, d$x)
  d$x2 <- 2 * d$x
  d$w <- 3
  d$ybig <- d$y * 1e160
  d$xinf <- d$x
  d$xinf[4] <- Inf
  d$xbig <- d$x * 1e200
  d$ch <- letters[1:40 %% 3 + 1]
  d$cnt <- rpois(40, 3)
  expect_snapshot(error = TRUE, {
    hbglm(y ~ x + (1 | g), d, group = "g")
    hbglm(y ~ x + x2, d, group = "g")
    hbglm(y ~ x, d, group = "g", global = ~ x2 + w)
    hbglm(y ~ x, d, group = "g", weights = t)
    hbglm(y ~ x, d, group = "g", foo = 1)
    hbglm(ybig ~ x, d, group = "g")
    hbglm(y ~ xinf, d, group = "g")
    hbglm(y ~ xbig, d, group = "g")
    hbglm(y ~ x, d, group = "g", offset = 1:3)
    hbglm(y ~ x, d, group = rep(1, 40))
    hbglm(ch ~ x, d, group = "g")
    hbglm(cnt ~ x, d, group = "g", family = binomial)
    hbglm(cnt ~ x, d, group = "g", family = poisson(link = "identity"))
    hbglm(cnt ~ x, d, group = "g", family = quasipoisson)
    hbglm(y ~ x, group = "g")
    hbglm_prior(mu_sd = 1e300)
    hbglm_prior(mu_mean = -1e200)
  })
  cases <- list(
    quote(hbglm(y ~ x + (1 | g), d, group = "g")),
    quote(hbglm(y ~ x + x2, d, group = "g")),
    quote(hbglm(ybig ~ x, d, group = "g")),
    quote(hbglm(y ~ x, d, group = "g", offset = c(NA, rep(0, 39)))),
    quote(hbglm(y ~ x, d[0, ], group = "g")),
    quote(hbglm(y ~ x, d, group = "g", thin = 2000)),
    quote(hbglm(y ~ x, d, group = "g", chains = 0)),
    quote(hbglm(cnt ~ x, d, group = "g", family = "poisson", prior = hbglm_prior(tau_fixed = 1e-300)))
  )
  for (cl in cases) expect_error(eval(cl), class = "bulkem_error_input", info = deparse(cl))
  # The family objects of glm() with their canonical links are accepted.
  fit <- unmixed_ok(hbglm(cnt ~ x, d, group = "g", family = poisson(), iter = 20, warmup = 10, chains = 1,
                          use.gpu = FALSE))
  expect_equal(fit$family, "poisson")
})

test_that("draws that cannot fit in memory are a memory error naming iter and the size", {
  d <- small_gaussian(G = 3, n = 4)
  err <- tryCatch(hbglm(y ~ price, d, group = "store", iter = 2e9, use.gpu = FALSE), error = function(e) e)
  expect_s3_class(err, "bulkem_error_memory")
  expect_match(conditionMessage(err), "iter = 2000000000")
  expect_match(conditionMessage(err), "needs [0-9.]+ GB")
  # The session goes on.
  expect_s3_class(unmixed_ok(hbglm(y ~ price, d, group = "store", iter = 20, warmup = 10, chains = 1,
                                   use.gpu = FALSE)), "bulkem_hbglm")
})

test_that("an interrupt stops a long hbglm() within a second, leaving R usable", {
  # setTimeLimit() raises its error through R_CheckUserInterrupt, where a
  # user's Ctrl-C is seen (as in test-session.R).
  set.seed(27)
  n <- 2e5
  d <- data.frame(g = rep(1:20, each = n / 20), x = rnorm(n))
  d$y <- rbinom(n, 1, plogis(d$x))
  started <- proc.time()[["elapsed"]]
  err <- tryCatch({
    setTimeLimit(elapsed = 1, transient = TRUE)
    hbglm(y ~ x, d, group = "g", family = "binomial", iter = 1e6, warmup = 10, chains = 2, use.gpu = FALSE)
    NULL
  }, error = function(e) e)
  setTimeLimit()
  took <- proc.time()[["elapsed"]] - started
  expect_s3_class(err, "error")
  expect_match(conditionMessage(err), "interrupted|time limit")
  expect_lt(took, 2.5)
  expect_s3_class(unmixed_ok(hbglm(y ~ x, d[seq(1, n, by = 500), ], group = "g", family = "binomial", iter = 20, warmup = 10,
                                   chains = 1, use.gpu = FALSE)), "bulkem_hbglm")
})
