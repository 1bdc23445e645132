# Constraints (equal, fixed): the Normal equal-variance fit against
# mclust's "E" model, constrained fits against direct maximisation of the
# constrained log-likelihood (optim from the fit), the degrees of freedom,
# held values and their component order, and the arguments refused.

tight <- list(epsilon = 1e-12, max.iters = 5000, use.gpu = FALSE)

test_that("the equal-variance Normal fit is mclust's E model", {
  skip_if_not_installed("mclust")
  suppressPackageStartupMessages(library(mclust))
  same <- 0
  for (x in list(faithful$waiting, as.numeric(MASS::galaxies) / 1000)) {
    for (G in 2:3) {
      f <- do.call(bulkem, c(list(x, G, family = "normal", equal = "sigma", seed = 1), tight))[[1]]
      m <- Mclust(x, G = G, modelNames = "E", verbose = FALSE, control = emControl(tol = c(1e-12, 1e-12)))
      # Never below mclust's optimum (its hierarchical start can stop at a
      # worse one: faithful with G = 3 puts two components at 80).
      expect_gt(f$loglik, m$loglik - 1e-6)
      expect_equal(attr(logLik(f), "df"), 2 * G)
      if (abs(f$loglik - m$loglik) < 1e-3) {
        same <- same + 1
        expect_lt(abs(f$loglik - m$loglik), 1e-6)
        expect_equal(f$sigma, rep(sqrt(m$parameters$variance$sigmasq), G), tolerance = 1e-5)
        expect_equal(f$mu, unname(m$parameters$mean), tolerance = 1e-5)
        expect_equal(BIC(f), -m$bic, tolerance = 1e-8)
      }
    }
  }
  expect_gte(same, 3)
})

test_that("an equal inverse Gaussian shape is the constrained maximum", {
  set.seed(3)
  x <- as.numeric(rinvgaussmix(800, c(0.4, 0.6), mu = c(1, 3), lambda = c(8, 8)))
  f <- do.call(bulkem, c(list(x, 2, equal = "lambda", seed = 2), tight))[[1]]
  expect_identical(f$lambda[1], f$lambda[2])
  ll <- function(v) {
    a <- plogis(v[1])
    sum(log(a * statmod::dinvgauss(x, exp(v[2]), exp(v[4])) + (1 - a) * statmod::dinvgauss(x, exp(v[3]), exp(v[4]))))
  }
  start <- c(qlogis(f$alpha[1]), log(f$mu), log(f$lambda[1]))
  expect_equal(ll(start), f$loglik, tolerance = 1e-10)
  expect_lt(optim_gain(ll, start), 1e-6)
  free <- do.call(bulkem, c(list(x, 2, seed = 2), tight))[[1]]
  expect_lte(f$loglik, free$loglik)
  expect_equal(attr(logLik(f), "df"), 4)
})

test_that("held values stay held, keep their order and the rest is the constrained maximum", {
  x <- faithful$waiting
  g <- do.call(bulkem, c(list(x, 2, family = "normal", fixed = list(mu = c(NA, 78), alpha = c(0.4, NA)), seed = 1), tight))[[1]]
  expect_identical(g$mu[2], 78)
  expect_identical(g$alpha, c(0.4, 0.6))
  expect_equal(attr(logLik(g), "df"), 3)
  ll <- function(v) sum(log(0.4 * dnorm(x, v[1], exp(v[2])) + 0.6 * dnorm(x, 78, exp(v[3]))))
  start <- c(g$mu[1], log(g$sigma))
  expect_equal(ll(start), g$loglik, tolerance = 1e-10)
  expect_lt(optim_gain(ll, start), 1e-6)
  # Held values name components by position: a held first component above
  # the second stays first.
  h <- do.call(bulkem, c(list(x, 2, family = "normal", fixed = list(mu = c(80, NA)), seed = 1), tight))[[1]]
  expect_identical(h$mu[1], 80)
  expect_lt(h$mu[2], 80)
  expect_output(print(h), "constraints: fixed mu = \\(80, NA\\)")
  expect_output(print(summary(h)), "df = 4")
  # Gamma with a held rate and counts with a held weight.
  y <- rgammamix(600, c(0.5, 0.5), shape = c(2, 9), rate = c(2, 2))
  k <- do.call(bulkem, c(list(y, 2, family = "gamma", equal = "rate", seed = 1), tight))[[1]]
  expect_identical(k$rate[1], k$rate[2])
  llg <- function(v) {
    a <- plogis(v[1])
    sum(log(a * dgamma(y, exp(v[2]), exp(v[4])) + (1 - a) * dgamma(y, exp(v[3]), exp(v[4]))))
  }
  start <- c(qlogis(k$alpha[1]), log(k$shape), log(k$rate[1]))
  expect_lt(optim_gain(llg, start), 1e-6)
  z <- rpoismix(500, c(0.3, 0.7), c(2, 9))
  p <- do.call(bulkem, c(list(z, 2, family = "poisson", fixed = list(alpha = c(0.3, NA)), seed = 1), tight))[[1]]
  expect_identical(p$alpha, c(0.3, 0.7))
  expect_equal(attr(logLik(p), "df"), 2)
})

test_that("equal works with several numbers of components and the criteria count free parameters", {
  set.seed(4)
  datasets <- replicate(3, c(rnorm(200, 0, 1), rnorm(200, 4, 1)), simplify = FALSE)
  fits <- bulkem(datasets, 1:3, family = "normal", equal = "sigma", use.gpu = FALSE, seed = 1)
  expect_true(all(vapply(fits, function(f) f$sigma[1] == f$sigma[length(f$sigma)], logical(1))))
  tab <- criteria(fits)
  f2 <- bulkem(datasets[1], 2, family = "normal", equal = "sigma", use.gpu = FALSE, seed = 1)[[1]]
  expect_equal(unname(tab[1, "2"]), -2 * f2$loglik + 4 * log(400), tolerance = 1e-8)
})

test_that("constraints that cannot be honoured are errors", {
  x <- faithful$waiting
  expect_error(bulkem(x, 2, family = "normal", equal = "mu", use.gpu = FALSE), "sigma", class = "bulkem_error_input")
  expect_error(bulkem(x, 2, family = "poisson", equal = "lambda", use.gpu = FALSE), "one parameter", class = "bulkem_error_input")
  expect_error(bulkem(x, 1:3, family = "normal", fixed = list(mu = c(1, NA)), use.gpu = FALSE), "one number of components",
               class = "bulkem_error_input")
  expect_error(bulkem(x, 2, family = "normal", fixed = list(mu = 1), use.gpu = FALSE), "one value per component",
               class = "bulkem_error_input")
  expect_error(bulkem(x, 2, family = "normal", fixed = list(lambda = c(1, 2)), use.gpu = FALSE), "named list",
               class = "bulkem_error_input")
  expect_error(bulkem(x, 2, family = "normal", fixed = list(alpha = c(0.6, 0.6)), use.gpu = FALSE), "free weights",
               class = "bulkem_error_input")
  expect_error(bulkem(x, 2, family = "normal", fixed = list(sigma = c(-1, NA)), use.gpu = FALSE), "positive",
               class = "bulkem_error_input")
  expect_error(bulkem(x, 2, family = "normal", equal = "sigma", fixed = list(sigma = c(1, NA)), use.gpu = FALSE),
               "equal", class = "bulkem_error_input")
  expect_error(bootstrap_lrt(list(x), 1:2, family = "normal", fixed = list(mu = c(0, NA)), use.gpu = FALSE), "fixed",
               class = "bulkem_error_input")
  f <- bulkem(x, 2, family = "normal", fixed = list(mu = c(0, NA)), use.gpu = FALSE)
  expect_error(bootstrap_se(f, list(x), B = 5, use.gpu = FALSE), "held values", class = "bulkem_error_input")
})
