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
  expect_error(rinvgaussmix(5, c(0.5, 0.5), 1, 1), "one length", class = "bulkem_error_input")
  expect_error(rinvgaussmix(5, 1, -1, 1), "positive", class = "bulkem_error_input")
})

test_that("extreme parameters give the right draws: not NA, not 0", {
  # Before: NA for mu = 1e200, zeros for mu / lambda = 1e-400, logical(0) for n = 0.
  set.seed(1)
  x <- rinvgaussmix(2000, 1, 1e200, 1)
  expect_type(x, "double")
  expect_true(all(is.finite(x) & x > 0))
  # mu -> Inf: the Levy limit lambda / Z^2, statmod's draws from the same stream.
  set.seed(2)
  x <- rinvgaussmix(50, 1, 1e200, 3)
  set.seed(2)
  invisible(sample.int(1, 50, replace = TRUE, prob = 1))
  ref <- statmod::rinvgauss(50, 1e200, shape = 3)
  expect_equal(as.numeric(x), ref, tolerance = 1e-5)  # statmod approximates this tail to ~1e-6
  # mu / lambda = 1e-400: every draw is mu.
  y <- rinvgaussmix(100, 1, 1e-200, 1e200)
  expect_equal(as.numeric(y), rep(1e-200, 100), tolerance = 1e-12)
  z <- rinvgaussmix(0, 1, 1, 1)
  expect_identical(as.vector(z), numeric(0))
  expect_identical(attr(z, "component"), integer(0))
  # Moderate parameters: statmod's draws, from the same random stream.
  for (p in list(c(2, 3), c(1e-3, 1e5), c(50, 1e-3), c(1e150, 1e150), c(1e-150, 1e-150))) {
    set.seed(3)
    a <- rinvgaussmix(200, 1, p[1], p[2])
    set.seed(3)
    invisible(sample.int(1, 200, replace = TRUE, prob = 1))
    b <- statmod::rinvgauss(200, p[1], shape = p[2])
    expect_equal(as.numeric(a), b, tolerance = 1e-5, label = paste(p, collapse = ", "))
  }
})

test_that("rinvgaussmix draws from extreme components with the right distribution", {
  # A scale family: mu = lambda = 1e200 is 1e200 times IG(1, 1).
  set.seed(4)
  x <- rinvgaussmix(20000, 1, 1e200, 1e200) / 1e200
  expect_gt(suppressWarnings(ks.test(x, function(q) statmod::pinvgauss(q, 1, shape = 1)))$p.value, 1e-3)
  set.seed(5)
  x <- rinvgaussmix(20000, c(0.5, 0.5), c(1e-200, 1e200), c(1e-200, 1e200))
  comp <- attr(x, "component")
  expect_equal(mean(x[comp == 1]) / 1e-200, 1, tolerance = 0.05)
  expect_equal(mean(x[comp == 2]) / 1e200, 1, tolerance = 0.05)
})

test_that("dinvgaussmix is stable at extreme parameters and at 0 and Inf", {
  skip_if_not_installed("statmod")
  # Before: NaN at Inf.
  expect_identical(dinvgaussmix(Inf, c(0.5, 0.5), c(1, 2), c(1, 1)), 0)
  expect_identical(dinvgaussmix(c(0, Inf), 1, 1, 1, log = TRUE), c(-Inf, -Inf))
  expect_identical(dinvgaussmix(c(NA, NaN), 1, 1, 1), c(NA, NaN))
  expect_identical(dinvgaussmix(numeric(0), 1, 1, 1), numeric(0))
  x <- c(1e-3, 0.1, 0.5, 1, 2, 10, 100)
  # Where statmod is accurate: the same log-densities.
  for (p in list(c(1, 1), c(3, 0.2), c(1e-3, 1e3), c(1e5, 1e-2))) {
    expect_equal(dinvgaussmix(x, 1, p[1], p[2], log = TRUE),
                 statmod::dinvgauss(x, p[1], shape = p[2], log = TRUE), tolerance = 1e-12)
  }
  # Extreme scale: IG(mu c, lambda c) at x c is IG(mu, lambda) at x, over c.
  for (c in c(1e-200, 1e200)) {
    expect_equal(dinvgaussmix(x * c, 1, 2 * c, 3 * c, log = TRUE),
                 statmod::dinvgauss(x, 2, shape = 3, log = TRUE) - log(c), tolerance = 1e-12)
  }
  # mu -> Inf: the Levy density; statmod gives NaN here.
  lx <- c(1e-300, 1e-5, 1, 1e100, 1e300)
  levy <- 0.5 * log(3 / (2 * pi)) - 1.5 * log(lx) - 3 / (2 * lx)
  expect_equal(dinvgaussmix(lx, 1, 1e200, 3, log = TRUE), levy, tolerance = 1e-12)
  # lambda / mu huge: all mass at mu. At mu itself the density is
  # sqrt(lambda / (2 pi mu^3)); a relative step away it is 0.
  mu <- 1e-200; lam <- 1e200
  expect_equal(dinvgaussmix(mu, 1, mu, lam, log = TRUE), 0.5 * (log(lam) - log(2 * pi) - 3 * log(mu)))
  expect_identical(dinvgaussmix(c(mu * 1.001, mu / 1.001, 1, 1e300), 1, mu, lam), c(0, 0, 0, 0))
  # Mixtures: log-sum-exp of the weighted components, finite far in the tails.
  ld <- dinvgaussmix(c(1e-200, 1e200), c(0.5, 0.5), c(1e-200, 1e200), c(1e-200, 1e200), log = TRUE)
  expect_equal(ld, log(0.5) + statmod::dinvgauss(1, 1, shape = 1, log = TRUE) - log(c(1e-200, 1e200)))
})

test_that("invalid arguments are classed input errors", {
  expect_error(rinvgaussmix(-1, 1, 1, 1), "`n` must be a whole number", class = "bulkem_error_input")
  expect_error(rinvgaussmix(2.5, 1, 1, 1), "`n`", class = "bulkem_error_input")
  expect_error(rinvgaussmix(NA, 1, 1, 1), "`n`", class = "bulkem_error_input")
  expect_error(rinvgaussmix(c(1, 2), 1, 1, 1), "`n`", class = "bulkem_error_input")
  expect_error(rinvgaussmix(5, 1, NA, 1), "`mu` must be a non-empty numeric", class = "bulkem_error_input")
  expect_error(dinvgaussmix(1, NA, 1, 1), "`alpha`", class = "bulkem_error_input")
  expect_error(dinvgaussmix(1, 1, 1, "a"), "`lambda`", class = "bulkem_error_input")
  expect_error(dinvgaussmix(1, numeric(0), numeric(0), numeric(0)), "non-empty", class = "bulkem_error_input")
  expect_error(rinvgaussmix(5, c(0.5, 0.5), c(1, 2), 1), "one length", class = "bulkem_error_input")
  expect_error(rinvgaussmix(5, c(0.5, 0.6), c(1, 2), c(1, 1)), "must sum to 1", class = "bulkem_error_input")
  expect_error(dinvgaussmix(1, c(2, -1), c(1, 2), c(1, 1)), "non-negative", class = "bulkem_error_input")
  expect_error(dinvgaussmix(1, 1, Inf, 1), "`mu` must be positive and finite", class = "bulkem_error_input")
  expect_error(dinvgaussmix(1, 1, 1, 0), "`lambda` must be positive", class = "bulkem_error_input")
  expect_error(dinvgaussmix("a", 1, 1, 1), "`x` must be a numeric vector", class = "bulkem_error_input")
  expect_error(dinvgaussmix(1, 1, 1, 1, log = NA), "`log`", class = "bulkem_error_input")
  # Weights summing to 1 up to rounding are fine; a zero weight is allowed.
  expect_length(rinvgaussmix(3, c(0.1, 0.2, 0.7), c(1, 2, 3), c(1, 1, 1)), 3)
  expect_true(all(attr(rinvgaussmix(50, c(0, 1), c(1, 2), c(1, 1)), "component") == 2))
})

test_that("n beyond memory is refused before R allocates it", {
  err <- expect_error(rinvgaussmix(1e16, 1, 1, 1), class = "bulkem_error_memory")
  expect_match(conditionMessage(err), "`n = 1e\\+16` needs")
  old <- Sys.getenv("BULKEM_MEMORY_LIMIT", NA)
  on.exit(if (is.na(old)) Sys.unsetenv("BULKEM_MEMORY_LIMIT") else Sys.setenv(BULKEM_MEMORY_LIMIT = old))
  Sys.setenv(BULKEM_MEMORY_LIMIT = 5e7)
  expect_error(rinvgaussmix(1e7, 1, 1, 1), "`n = 10,000,000` needs", class = "bulkem_error_memory")
})
