# Observation weights: integer weights fit as repeated observations, the
# weighted log-likelihood is the weighted sum of log-densities (against
# stats and statmod densities), the criteria count the total weight, and
# bad weights are input errors that say what is wrong.

test_that("integer weights give the fit of the repeated data", {
  set.seed(11)
  x <- c(rnorm(150, 0, 1), rnorm(100, 4, 1.5))
  w <- sample(0:3, length(x), replace = TRUE)
  start <- list(alpha = c(0.5, 0.5), mu = c(-1, 5), sigma = c(1, 1))
  for (eps in c(0, 1e-10)) {
    a <- bulkem(list(x), 2, family = "normal", weights = list(w), inits = start, max.iters = 200, epsilon = eps)[[1]]
    b <- bulkem(list(rep(x, w)), 2, family = "normal", inits = start, max.iters = 200, epsilon = eps)[[1]]
    expect_lt(rel_diff(a$loglik, b$loglik), 1e-10)
    tol <- if (eps == 0) 1e-8 else 1e-5
    expect_lt(rel_diff(c(a$alpha, a$mu, a$sigma), c(b$alpha, b$mu, b$sigma)), tol)
    expect_equal(a$n, length(x))
    expect_identical(a$nobs, sum(w) + 0)
    expect_identical(nobs(a), nobs(b))
    expect_equal(BIC(a), BIC(b), tolerance = 1e-10)
  }
})

test_that("the weighted log-likelihood is the weighted sum of log-densities", {
  set.seed(2)
  x <- as.numeric(rinvgaussmix(400, c(0.4, 0.6), c(1, 3), c(20, 5)))
  w <- runif(400, 0.2, 2)
  f <- bulkem(x, 2, weights = w, random.inits = 5, seed = 1, epsilon = 1e-9, max.iters = 2000)[[1]]
  dens <- f$alpha[1] * statmod::dinvgauss(x, f$mu[1], f$lambda[1]) +
    f$alpha[2] * statmod::dinvgauss(x, f$mu[2], f$lambda[2])
  expect_lt(rel_diff(f$loglik, sum(w * log(dens))), 1e-10)
  expect_equal(sum(f$alpha), 1, tolerance = 1e-12)
  ll <- logLik(f)
  expect_identical(attr(ll, "nobs"), sum(w))
  expect_equal(BIC(f), -2 * f$loglik + 5 * log(sum(w)), tolerance = 1e-12)
  expect_output(print(f), "weighted: total weight")
  expect_output(print(summary(f)), "weighted: total weight")
})

test_that("weights pass through many datasets, chunks, choosing K and the formula method", {
  # Few starts (some datasets warn that one start found their best).
  quiet <- function(expr) suppressWarnings(expr, classes = "bulkem_warning_convergence")
  set.seed(3)
  d <- sim_ig(6, 300)
  w <- lapply(d, function(x) rep(c(1, 2), length.out = length(x)))
  all <- quiet(bulkem(d, 1:3, weights = w, random.inits = 4, seed = 5))
  chunked <- quiet(bulkem(d, 1:3, weights = w, random.inits = 4, seed = 5, chunk.size = 2))
  expect_identical(fits_only(all), fits_only(chunked))
  expect_identical(unname(nobs(all)), vapply(w, sum, numeric(1)))
  # The criteria table is the weighted BIC of each candidate.
  one <- quiet(bulkem(d[1], 2, weights = w[1], random.inits = 4, seed = 5))
  expect_equal(unname(unclass(criteria(all))[1, "2"]), BIC(one[[1]]), tolerance = 1e-10)
  df <- data.frame(y = unlist(d), g = rep(seq_along(d), lengths(d)), w = unlist(w))
  by_formula <- quiet(bulkem(y ~ g, data = df, weights = df$w, num.components = 1:3, random.inits = 4, seed = 5))
  expect_identical(unname(vapply(by_formula, `[[`, numeric(1), "loglik")), unname(vapply(all, `[[`, numeric(1), "loglik")))
})

test_that("bad weights are input errors that say what is wrong", {
  x <- c(1.2, 0.8, 2.5, 3.1, 0.9, 1.7)
  expect_error(bulkem(x, 1, weights = c(1, 1)), "as long as its dataset", class = "bulkem_error_input")
  expect_error(bulkem(x, 1, weights = c(1, 1, -1, 1, 1, 1)), "weight 3 of dataset 1 is -1", class = "bulkem_error_input")
  expect_error(bulkem(x, 1, weights = c(1, NA, 1, 1, 1, 1)), "weight 2 of dataset 1 is missing.*finite and non-negative",
               class = "bulkem_error_input")
  expect_error(bulkem(x, 1, weights = c(1, 1, 1, Inf, 1, 1)), "weight 4 of dataset 1 is Inf", class = "bulkem_error_input")
  expect_error(bulkem(x, 1, weights = rep(0, 6)), "every weight of dataset 1 is 0", class = "bulkem_error_input")
  expect_error(bulkem(list(x, x), 1, weights = list(rep(1, 6))), "one per dataset \\(2\\)", class = "bulkem_error_input")
  expect_error(bulkem(list(x), 1, weights = "a"), "numeric", class = "bulkem_error_input")
  df <- data.frame(y = x, g = 1)
  expect_error(bulkem(y ~ g, data = df, weights = 1:3), "one weight per row", class = "bulkem_error_input")
  # Too few observations of weight > 0 for the model: that dataset fails.
  f <- bulkem(x, 2, family = "normal", weights = c(1, 1, 1, 0, 0, 0))[[1]]
  expect_false(f$fit_success)
  expect_match(f$message, "of weight > 0")
})

test_that("a weighted fit is not converted to mixtools' mixEM", {
  x <- c(rnorm(50), rnorm(50, 5))
  f <- bulkem(x, 2, family = "normal", weights = rep(2, 100), random.inits = 3, seed = 1)[[1]]
  expect_error(as.mixEM(f, x), "mixtools has no observation weights")
})
