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
  expect_error(bulk_mean(c(1, NA, 3)), "Position 2 is NA", class = "bulkem_error_input")
  expect_error(bulk_sum(c(1, 2, NaN)), "Position 3 is NaN", class = "bulkem_error_input")
  expect_identical(bulk_sum(c(1, NaN, 3), na.rm = TRUE), 4)
  expect_error(bulk_mean(list(1, c(2, NA))), "Position 2 of element 2 is NA")
  expect_identical(bulk_mean(c(1, NA, 3), na.rm = TRUE), 2)
  expect_identical(bulk_sum(c(1, Inf)), Inf)
  expect_true(is.nan(bulk_sum(c(Inf, -Inf))))
})

test_that("missing values are found after the core's pass, by every method and precision", {
  # R looks for NA only in the elements whose result is NaN.
  long <- rep(0.25, 2e6)
  long[1234567] <- NA
  for (method in c("exact", "div2", "pairwise", "kahan", "naive")) {
    for (precision in c("double", "single")) {
      expect_error(bulk_sum(long, method = method, precision = precision), "Position 1234567 is NA",
                   class = "bulkem_error_input")
      expect_equal(bulk_mean(long, method = method, precision = precision, na.rm = TRUE), 0.25, tolerance = 1e-6)
    }
  }
  # Inf meeting -Inf gives NaN without a missing value: a result, not an error.
  x <- list(a = c(1, 2), b = c(Inf, -Inf), c = c(3, NaN, 5))
  expect_error(bulk_sum(x), "Position 2 of element 3 is NaN", class = "bulkem_error_input")
  out <- bulk_sum(x, na.rm = TRUE)
  expect_identical(names(out), c("a", "b", "c"))
  expect_identical(out[c("a", "c")], c(a = 3, c = 8))
  expect_true(is.nan(out[["b"]]))
  # An element left empty by na.rm is named as the user numbers it.
  expect_error(bulk_mean(list(1, 2, c(NA, NaN)), na.rm = TRUE), "element 3 is empty", class = "bulkem_error_input")
  expect_error(log_mean_exp(c(0, NA)), "Position 2 is NA", class = "bulkem_error_input")
  expect_equal(log_mean_exp(c(0, NA, 0), na.rm = TRUE), 0)
})

test_that("bad input gives clear errors", {
  expect_error(bulk_mean("a"), "numeric vector", class = "bulkem_error_input")
  expect_error(bulk_sum(list(1, NULL)), "Element 2 is NULL", class = "bulkem_error_input")
  expect_error(bulk_sum(matrix(1:4, 2)), "numeric vector", class = "bulkem_error_input")
  expect_error(log_mean_exp("a"), "numeric vector", class = "bulkem_error_input")
  expect_error(log_mean_exp(numeric(0)), "empty", class = "bulkem_error_input")
  expect_error(log_mean_exp(c(1, NA)), "Position 2 is NA", class = "bulkem_error_input")
  expect_error(bulk_mean(list(1, numeric(0))), "element 2 is empty", class = "bulkem_error_input")
  expect_error(bulk_mean(list(1, "a")), "Element 2 is")
  expect_error(bulk_mean(list()), "empty")
  expect_error(bulk_mean(numeric(0)), "empty")
  expect_error(bulk_mean(1, method = "fast"), "`method` must be one of")
  expect_error(bulk_mean(1, precision = "half"), "`precision` must be one of")
  expect_error(bulk_mean(1, na.rm = NA), "`na.rm`")
})

test_that("overflow: correctly infinite sums pass, partial-sum overflows warn with the exact value", {
  # The exact sum of finite values overflows: Inf is the correctly rounded answer.
  for (m in c("exact", "naive", "pairwise", "kahan", "div2")) {
    expect_identical(expect_no_warning(bulk_sum(c(1e308, 1e308), m)), Inf)
  }
  expect_identical(bulk_mean(c(1e308, 1e308)), 1e308)
  # A partial sum overflows although the exact sum is finite.
  x <- c(1e308, 1e308, -1e308)
  expect_identical(bulk_sum(x), 1e308)
  w <- expect_warning(out <- bulk_sum(list(a = 1, b = x), "naive"), class = "bulkem_warning")
  expect_identical(out[["b"]], Inf)
  expect_match(conditionMessage(w), "naive sum of element 2 is Inf.*exact sum is 1e\\+308")
  expect_warning(bulk_mean(c(1.5e308, 1.5e308, -1.5e308)), NA)
  expect_warning(bulk_mean(c(1.5e308, 1.5e308, -1.5e308), "pairwise"), "partial sum overflowed",
                 class = "bulkem_warning")
  # Single precision: the same, at the binary32 limit.
  expect_identical(bulk_sum(c(3e38, 3e38), precision = "single"), Inf)
  expect_warning(bulk_sum(c(3e38, 3e38, -3e38), "naive", "single"), "exact sum is 3",
                 class = "bulkem_warning")
})

test_that("single precision warns about values it turns into infinities", {
  edge <- 2^128 * (1 - 2^-25)
  below <- edge * (1 - 2^-53)
  expect_no_warning(out <- bulk_sum(c(1, -below), "exact", "single"))
  expect_identical(out, -2^128 * (1 - 2^-24))
  w <- expect_warning(out <- bulk_mean(c(1, 2, edge), precision = "single"), class = "bulkem_warning")
  expect_identical(out, Inf)
  expect_match(conditionMessage(w), "position 3, beyond the range of single precision")
  expect_warning(bulk_sum(list(1, c(1, -1e300)), precision = "single"), "position 2 of element 2",
                 class = "bulkem_warning")
  expect_warning(expect_identical(bulk_sum(c(1, Inf), precision = "single"), Inf), NA)
  expect_warning(expect_identical(bulk_sum(1e300), 1e300), NA)
})

test_that("use.gpu = TRUE reduces on a GPU, or says why it cannot", {
  x <- list(c(1, rep(2^-54, 1000)), runif(5000))
  if (isTRUE(bulkem:::backends_()$cuda_usable)) {
    for (m in c("exact", "div2", "pairwise")) {
      expect_identical(bulk_sum(x, m, use.gpu = TRUE), bulk_sum(x, m, use.gpu = FALSE))
    }
  } else {
    expect_error(bulk_mean(x, use.gpu = TRUE), "no CUDA GPU is usable", class = "bulkem_error_device")
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

test_that("mc_integrate refuses boxes whose volume double precision cannot hold", {
  # Before: value Inf with std.error NaN.
  expect_error(mc_integrate(function(x) x, -1e308, 1e308, 100), "volume is infinite.*overflows",
               class = "bulkem_error_input")
  expect_error(mc_integrate(function(p) p[, 1], rep(0, 4), rep(1e100, 4), 100), "volume is infinite",
               class = "bulkem_error_input")
  expect_error(mc_integrate(function(p) p[, 1], rep(0, 4), rep(1e-100, 4), 100), "volume underflows",
               class = "bulkem_error_input")
  expect_error(mc_integrate(sin, -Inf, 0, 100), "finite", class = "bulkem_error_input")
  expect_error(mc_integrate(sin, NA, 0, 100), "finite", class = "bulkem_error_input")
  expect_error(mc_integrate(sin, "0", 1, 100), "finite numeric", class = "bulkem_error_input")
  # Wide but representable: fine, and exact for a constant.
  r <- mc_integrate(function(x) rep(1, length(x)), -1e307, 1e307, 100)
  expect_equal(r$value, 2e307)
  expect_equal(r$std.error, 0)
})

test_that("mc_integrate checks n, and every value of f", {
  for (n in list(0, 1, -5, NA, 2.5, 2^53 + 2, "10", c(10, 20), Inf)) {
    expect_error(mc_integrate(sin, 0, 1, n), "`n` must be a whole number between 2 and 2\\^53",
                 class = "bulkem_error_input")
  }
  expect_error(mc_integrate(function(x) "a", 0, 1, 10), "one number per point", class = "bulkem_error_input")
  expect_error(mc_integrate(function(x) x[-1], 0, 1, 10), "one number per point", class = "bulkem_error_input")
  expect_error(mc_integrate(function(x) as.list(x), 0, 1, 10), "one number per point", class = "bulkem_error_input")
  expect_error(mc_integrate(function(x) sqrt(x - 2), 0, 1, 10), "Point 1 gave NaN", class = "bulkem_error_input") |>
    expect_warning()
  expect_error(mc_integrate(function(x) ifelse(x > 0.5, Inf, -Inf), 0, 1, 100), "both.*Inf",
               class = "bulkem_error_input")
  # Infinite values of one sign: an infinite integral with an infinite standard error.
  r <- mc_integrate(function(x) ifelse(x > 0.9, -Inf, x), 0, 1, 1000)
  expect_identical(c(r$value, r$std.error), c(-Inf, Inf))
  # Finite values whose estimate overflows.
  expect_error(mc_integrate(function(x) rep(1e308, length(x)), 0, 10, 100), "overflows double precision",
               class = "bulkem_error_input")
  # A partial sum of the naive method overflows; the exact mean does not.
  big <- function(x) ifelse(x < 0.5, 1.5e308, -1.5e308)
  expect_error(mc_integrate(big, 0, 1, 100, method = "naive"), "partial sum overflowed", class = "bulkem_error_input")
  expect_true(is.finite(mc_integrate(big, 0, 1, 100)$value))
  # Logical values count as 0 and 1.
  set.seed(3)
  expect_lt(abs(mc_integrate(function(x) x < 0.25, 0, 1, 1e4)$value - 0.25), 0.02)
})

test_that("mc_integrate's standard error neither overflows nor loses huge values", {
  set.seed(5)
  # f of order 1e200: the squares of the deviations would overflow unscaled.
  r <- mc_integrate(function(x) 1e200 * x, 0, 1, 2e4)
  set.seed(5)
  u <- runif(2e4)
  expect_equal(r$std.error, sd(u) / sqrt(2e4) * 1e200, tolerance = 1e-10)
  expect_equal(r$value, 1e200 * mean(u), tolerance = 1e-12)
  # Tiny values: no underflow to a zero standard error either.
  set.seed(5)
  r <- mc_integrate(function(x) 1e-200 * x, 0, 1, 2e4)
  expect_equal(r$std.error, sd(u) / sqrt(2e4) * 1e-200, tolerance = 1e-10)
})

test_that("mc_integrate evaluates many dimensions in bounded blocks", {
  calls <- 0
  rows <- integer(0)
  f <- function(p) {
    rows <<- c(rows, nrow(p))
    rowSums(p)
  }
  d <- 2^20
  set.seed(6)
  r <- mc_integrate(f, rep(0, d), rep(1, d), n = 70, chunk.size = 65536)
  # 2^24 coordinates a block: 16 points of 2^20 dimensions.
  expect_equal(rows, c(rep(16L, 4), 6L))
  expect_equal(r$value, d / 2, tolerance = 0.01)
  # In few dimensions a chunk is one call, as before.
  rows <- integer(0)
  mc_integrate(f, c(0, 0), c(1, 1), n = 1000)
  expect_equal(rows, 1000L)
})
