test_that("dinvgaussmix matches statmod and integrates to 1", {
  alpha <- c(0.3, 0.7); mu <- c(1, 3); lambda <- c(30, 0.2)
  x <- c(0.1, 0.5, 1, 2, 10)
  if (requireNamespace("statmod", quietly = TRUE)) {
    ref <- 0.3 * statmod::dinvgauss(x, 1, shape = 30) + 0.7 * statmod::dinvgauss(x, 3, shape = 0.2)
    expect_equal(dinvgaussmix(x, alpha, mu, lambda), ref, tolerance = 1e-12)
  }
  total <- integrate(dinvgaussmix, 0, Inf, alpha = c(0.5, 0.5), mu = c(1, 2),
                     lambda = c(3, 4))$value
  expect_equal(total, 1, tolerance = 1e-6)
  expect_equal(dinvgaussmix(c(-1, 0), 1, 1, 1), c(0, 0))
  expect_equal(dinvgaussmix(2, 1, 1, 1, log = TRUE), log(dinvgaussmix(2, 1, 1, 1)))
})

test_that("rinvgaussmix has the right moments and labels", {
  set.seed(21)
  x <- rinvgaussmix(200000, c(0.25, 0.75), c(1, 3), c(2, 5))
  comp <- attr(x, "component")
  expect_equal(mean(comp == 1), 0.25, tolerance = 0.01)
  x1 <- x[comp == 1]
  # mean mu, variance mu^3 / lambda
  expect_equal(mean(x1), 1, tolerance = 0.01)
  expect_equal(var(x1), 1 / 2, tolerance = 0.03)
  expect_equal(mean(x), 0.25 * 1 + 0.75 * 3, tolerance = 0.01)
  expect_true(all(x > 0))
  expect_length(rinvgaussmix(0, 1, 1, 1), 0)
  expect_error(rinvgaussmix(5, c(0.5, 0.5), 1, 1), "one length")
  expect_error(rinvgaussmix(5, 1, -1, 1), "positive")
})
