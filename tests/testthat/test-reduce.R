test_that("every method sums and averages a plain vector", {
  x <- c(0.1, 0.2, 0.3, 0.4, 0.5)
  for (m in c("exact", "div2", "pairwise", "kahan", "naive")) {
    expect_equal(bulk_sum(x, m), 1.5, tolerance = 1e-15)
    expect_equal(bulk_mean(x, m), 0.3, tolerance = 1e-15)
  }
  expect_identical(bulk_mean(7), 7)
  expect_identical(bulk_sum(numeric(0)), 0)
})

test_that("exact keeps the small terms that naive summation absorbs", {
  x <- c(1, rep(2^-54, 2^16))
  expect_identical(bulk_sum(x, "naive"), 1)
  expect_identical(bulk_sum(x, "exact") - 1, 2^-38)
  expect_identical(bulk_sum(x, "kahan") - 1, 2^-38)
  # Correctly rounded mean of 1 and 2^16 tiny values.
  expect_identical(bulk_mean(x, "exact"), (1 + 2^-38) / (2^16 + 1))
})

test_that("the paper's example in single precision", {
  y <- c(0.005, 0.005, 1e-8, 1e-8)
  truth <- sum(y) / 4
  expect_lt(abs(bulk_mean(y, "div2", "single") - truth) / truth, 1e-6)
  expect_lt(abs(bulk_mean(y, "exact", "single") - truth) / truth, 1e-6)
})

test_that("single-precision naive drifts where div2, kahan and exact do not", {
  set.seed(31)
  u <- runif(2^23)
  ref <- mean(u)
  drift <- function(m) abs(bulk_mean(u, m, "single") - ref) / ref
  expect_gt(drift("naive"), 1e-5)
  for (m in c("div2", "kahan", "exact")) expect_lt(drift(m), 1e-6)
})

test_that("a list gives one named result per element, as single calls do", {
  set.seed(32)
  l <- list(a = runif(1000), b = rnorm(777, 6), c = 1:5)
  out <- bulk_mean(l)
  expect_named(out, c("a", "b", "c"))
  expect_identical(unname(out), unname(vapply(l, bulk_mean, numeric(1))))
  expect_identical(bulk_sum(l, "pairwise")[["c"]], 15)
})

test_that("results do not depend on the number of threads", {
  set.seed(33)
  x <- rnorm(300001) * 10^runif(300001, -5, 5)
  old <- options(bulkem.threads = 1)
  on.exit(options(old))
  one <- vapply(c("exact", "div2", "pairwise", "kahan"), function(m) bulk_sum(x, m), numeric(1))
  options(bulkem.threads = 2)
  two <- vapply(c("exact", "div2", "pairwise", "kahan"), function(m) bulk_sum(x, m), numeric(1))
  expect_identical(one, two)
})

test_that("NA is an error unless na.rm; Inf propagates as in sum()", {
  expect_error(bulk_mean(c(1, NA, 3)), "Position 2 is NA")
  expect_error(bulk_mean(list(1, c(2, NA))), "Position 2 of element 2 is NA")
  expect_identical(bulk_mean(c(1, NA, 3), na.rm = TRUE), 2)
  expect_identical(bulk_sum(c(1, Inf)), Inf)
  expect_true(is.nan(bulk_sum(c(Inf, -Inf))))
})

test_that("bad input gives clear errors", {
  expect_error(bulk_mean("a"), "numeric vector")
  expect_error(bulk_mean(list(1, "a")), "Element 2 is")
  expect_error(bulk_mean(list()), "empty")
  expect_error(bulk_mean(numeric(0)), "empty")
  expect_error(bulk_mean(1, method = "fast"), "`method` must be one of")
  expect_error(bulk_mean(1, precision = "half"), "`precision` must be one of")
  expect_error(bulk_mean(1, na.rm = NA), "`na.rm`")
})

test_that("use.gpu = TRUE reduces on a GPU, or says why it cannot", {
  x <- list(c(1, rep(2^-54, 1000)), runif(5000))
  if (isTRUE(bulkem:::backends_()$cuda_usable)) {
    for (m in c("exact", "div2", "pairwise")) {
      expect_identical(bulk_sum(x, m, use.gpu = TRUE), bulk_sum(x, m, use.gpu = FALSE))
    }
  } else {
    expect_error(bulk_mean(x, use.gpu = TRUE), "no CUDA GPU is usable")
  }
})

test_that("log_mean_exp is stable far from 0", {
  lw <- c(-1e5, -1e5 - 1, -1e5 - 2)
  expect_equal(log_mean_exp(lw), -1e5 + log(mean(exp(c(0, -1, -2)))), tolerance = 1e-15)
  expect_identical(log_mean_exp(c(-Inf, -Inf)), -Inf)
  expect_equal(log_mean_exp(list(a = c(0, 0), b = log(c(1, 3)))), c(a = 0, b = log(2)))
})

test_that("mc_integrate estimates known integrals within their standard errors", {
  set.seed(42)
  r <- mc_integrate(function(x) exp(-x^2), 0, 2, n = 2e5)
  truth <- sqrt(pi) * (pnorm(2 * sqrt(2)) - 0.5)
  expect_s3_class(r, "bulkem_mc")
  expect_lt(abs(r$value - truth), 4 * r$std.error)
  expect_gt(r$std.error, 0)
  ball <- mc_integrate(function(p) as.numeric(rowSums(p^2) <= 1), c(-1, -1, -1), c(1, 1, 1), n = 2e5)
  expect_equal(ball$volume, 8)
  expect_lt(abs(ball$value - 4 * pi / 3), 4 * ball$std.error)
  expect_output(print(ball), "Monte Carlo integral")
})

test_that("mc_integrate's chunked mean has the bits of bulk_mean over all points", {
  f <- function(x) 1e8 * (x > 0.5) + x^3
  for (m in c("exact", "div2", "pairwise", "kahan", "naive")) {
    set.seed(7)
    r <- mc_integrate(f, 0, 1, n = 3 * 65536 + 11, method = m, chunk.size = 65536)
    set.seed(7)
    x <- runif(3 * 65536 + 11)
    expect_identical(r$value, bulk_mean(f(x), method = m), label = m)
  }
})

test_that("mc_integrate checks its arguments and the integrand", {
  expect_error(mc_integrate(1, 0, 1, 10), "must be a function")
  expect_error(mc_integrate(sin, 1, 0, 10), "below")
  expect_error(mc_integrate(sin, c(0, 0), 1, 10), "same length")
  expect_error(mc_integrate(sin, 0, 1, 1.5), "whole number")
  expect_error(mc_integrate(sin, 0, 1, 100, chunk.size = 1000), "power of two")
  expect_error(mc_integrate(function(x) 1, 0, 1, 100), "one number per point")
  expect_error(mc_integrate(function(x) ifelse(x > 0.5, NA, x), 0, 1, 100), "missing value")
  expect_identical(mc_integrate(function(x) ifelse(x > 0.99, Inf, x), 0, 1, 1000)$value, Inf)
})
