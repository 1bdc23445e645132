d <- list(c(1, 2, 3, 4, 5, 6))

test_that("bad datasets are rejected before any work, naming dataset and value", {
  expect_error(bulkem("a"), "must be a list of numeric vectors", class = "bulkem_error_input")
  expect_error(bulkem(list()), "at least one dataset")
  expect_error(bulkem(data.frame(x = 1:3)), "must be a list of numeric vectors")
  expect_error(bulkem(list(1:5, "x")), "Dataset 2 is")
  expect_error(bulkem(list(1:5, c(1, NA, 3))), "must not contain missing values.*Dataset 2 has NA at position 2",
               class = "bulkem_error_input")
  expect_error(bulkem(list(1:5, c(1, NA, 3)), use.gpu = FALSE, parallel = "future"),
               "Dataset 2 has NA at position 2", class = "bulkem_error_input")
  expect_error(bulkem(list(1:5, c(1, 2, NaN)), use.gpu = FALSE), "Dataset 2 has NaN at position 3", class = "bulkem_error_input")
  expect_error(bulkem(list(1:5, c(1, Inf)), use.gpu = FALSE),
               "dataset 2 has an invalid value at position 2 \\(Inf\\)", class = "bulkem_error_input")
  expect_error(bulkem(list(1:5, 1:5, c(3, 0, -1)), use.gpu = FALSE),
               "dataset 3 has an invalid value at position 2 \\(0\\).*strictly positive",
               class = "bulkem_error_input")
  # Non-positive values are fine for the Normal family.
  expect_s3_class(bulkem(list(c(-1, 0, 2, 5, 7, 1)), 1, family = "normal", use.gpu = FALSE),
                  "bulkem_fits")
})

test_that("bad settings name their argument", {
  expect_error(bulkem(d, num.components = 0), "`num.components` must be whole numbers",
               class = "bulkem_error_input")
  expect_error(bulkem(d, num.components = 1.5), "`num.components`")
  expect_error(bulkem(d, max.iters = -1), "`max.iters`")
  expect_error(bulkem(d, max.iters = NA), "`max.iters`")
  expect_error(bulkem(d, random.inits = 0), "`random.inits`")
  expect_error(bulkem(d, random.inits = c(1, 2)), "`random.inits`")
  expect_error(bulkem(d, epsilon = -1), "`epsilon` must be a finite number")
  expect_error(bulkem(d, epsilon = "a"), "`epsilon`")
  expect_error(bulkem(d, family = "weibull"), "`family` must be one of")
  expect_error(bulkem(d, use.gpu = "yes"), "`use.gpu` must be")
  expect_error(bulkem(d, verbose = NA), "`verbose` must be")
  expect_error(bulkem(d, keep.posterior = 1), "`keep.posterior` must be")
  expect_error(bulkem(d, seed = -3), "`seed` must be")
  expect_error(bulkem(d, seed = 1.5), "`seed` must be")
  expect_error(bulkem(d, parallel = "futures"), "`parallel` must be one of")
  expect_error(bulkem(d, chunk.size = 0), "`chunk.size` must be a whole number")
  # Beyond the core's limit of random streams per dataset.
  expect_error(bulkem(d, random.inits = 2^25, use.gpu = FALSE), "`random.inits` must be between 1 and 16777216",
               class = "bulkem_error_input")
})

test_that("more components than any dataset can fit is an error naming num.components", {
  # Before: a session abort (1e9 components' outputs allocated for a failed fit).
  expect_error(bulkem(list(c(1, 2, 3, 4)), num.components = 1e9),
               "`num.components` is too large.*at least 2,999,999,999 observations.*has 4 observations",
               class = "bulkem_error_input")
  expect_error(bulkem(c(1, 2), random.inits = 2^24), "needs at least 5 observations",
               class = "bulkem_error_input")
  expect_error(bulkem(list(1:3, 1:4), num.components = 2), "largest of the 2 datasets has 4",
               class = "bulkem_error_input")
  expect_error(bulkem(list(numeric(0), 1), num.components = 1), "`datasets` must hold a dataset large enough",
               class = "bulkem_error_input")
  # At the limit: a dataset of 3M - 1 observations is enough to try.
  expect_s3_class(bulkem(c(1, 2, 4, 7, 11), num.components = 2, use.gpu = FALSE), "bulkem_fits")
  # One large enough dataset: the small ones fail on their own.
  f <- bulkem(list(c(1, 2), c(1, 2, 4, 7, 11, 3, 5)), use.gpu = FALSE, seed = 1)
  expect_equal(f[[1]]$status, "failed")
})

test_that("a fit larger than the memory available is refused before allocating, naming the argument", {
  old <- Sys.getenv("BULKEM_MEMORY_LIMIT", NA)
  on.exit(if (is.na(old)) Sys.unsetenv("BULKEM_MEMORY_LIMIT") else Sys.setenv(BULKEM_MEMORY_LIMIT = old))
  Sys.setenv(BULKEM_MEMORY_LIMIT = 1e8)
  x <- c(1, 2, 4, 7, 11, 3, 5)
  err <- expect_error(bulkem(x, random.inits = 2^24, use.gpu = FALSE), class = "bulkem_error_memory")
  expect_match(conditionMessage(err), "needs more memory.*`random.inits = 16777216`.*needs 403 MB but only 100 MB")
  big <- rep(x, 1e5)
  err <- expect_error(bulkem(big, num.components = 50, keep.posterior = TRUE, use.gpu = FALSE),
                      class = "bulkem_error_memory")
  expect_match(conditionMessage(err), "`keep.posterior = TRUE`")
  # Within the limit the same calls run.
  Sys.unsetenv("BULKEM_MEMORY_LIMIT")
  expect_s3_class(bulkem(x, random.inits = 1000, max.iters = 2, use.gpu = FALSE), "bulkem_fits")
})

test_that("data beyond what the sufficient statistics can hold is an input error that says so", {
  # Before: "converged" with mu = (1.3e149, 2e299).
  err <- expect_error(bulkem(c(1e-300, 1e300, 1, 2, 3, 4), use.gpu = FALSE), class = "bulkem_error_input")
  expect_match(conditionMessage(err), "dataset 1 has 1e-300 at position 1, whose square underflows")
  # Before: "a component collapsed"; now the overflow is named.
  err <- expect_error(bulkem(list(1:6, c(1e308, 1, 2, 3, 4, 5)), use.gpu = FALSE), class = "bulkem_error_input")
  expect_match(conditionMessage(err), "dataset 2 has 1e308 at position 1, whose square overflows")
  err <- expect_error(bulkem(c(1e308, 1, 2, 3, 4, 5), family = "normal", use.gpu = FALSE),
                      class = "bulkem_error_input")
  expect_match(conditionMessage(err), "overflow")
  expect_error(bulkem(c(1e308, 1e308, 1, 2, 3), family = "normal", use.gpu = FALSE), "sum of dataset 1 overflows",
               class = "bulkem_error_input")
  expect_error(bulkem(c(0, 1, 2, 3, 4) * 1e-151, family = "normal", use.gpu = FALSE), "underflow",
               class = "bulkem_error_input")
  # The boundaries: 2^511 and 2^-511 are fitted (2 x^2 is still a normal double).
  set.seed(9)
  x <- rinvgaussmix(300, c(0.5, 0.5), c(1, 4), c(10, 10))
  x <- x / max(x)
  top <- bulkem(x * 2^511, seed = 3, use.gpu = FALSE)[[1]]
  unit <- bulkem(x, seed = 3, use.gpu = FALSE)[[1]]
  expect_true(top$fit_success)
  expect_equal(top$mu / 2^511, unit$mu, tolerance = 1e-8)
  expect_error(bulkem(c(x, 2^511 * (1 + 2^-52)), use.gpu = FALSE), "overflows", class = "bulkem_error_input")
  low <- bulkem(x / max(x) * 2^-500, seed = 3, use.gpu = FALSE)[[1]]
  expect_true(low$fit_success)
  expect_error(bulkem(c(x, 2^-511 * (1 - 2^-53)), use.gpu = FALSE), "underflows", class = "bulkem_error_input")
  # Starting values too: mu is squared as well.
  expect_error(bulkem(x, inits = list(alpha = c(0.5, 0.5), mu = c(1, 1e200), lambda = c(1, 1)), use.gpu = FALSE),
               "mu must lie between", class = "bulkem_error_input")
})

test_that("bad inits are rejected", {
  expect_error(bulkem(d, inits = list(1, 2)), "`inits` must be")
  expect_error(bulkem(d, inits = list(alpha = 1, mu = 1)), "`inits` must be")
  expect_error(bulkem(d, inits = list(alpha = c(0.5, 0.5), mu = 1, lambda = c(1, 1))),
               "inits\\$mu.*length")
  expect_error(bulkem(d, inits = list(alpha = c(0.5, 0.5), mu = c(1, -1), lambda = c(1, 1)),
                      use.gpu = FALSE), "mu must be positive")
  expect_error(bulkem(d, inits = list(alpha = c(0.2, 0.5), mu = c(1, 2), lambda = c(1, 1)),
                      use.gpu = FALSE), "alpha must sum to 1")
  expect_error(bulkem(d, inits = list(alpha = c(0.5, 0.5), mu = c(1, 2), lambda = c(1, 0)),
                      use.gpu = FALSE), "lambda must be positive")
  two <- list(alpha = c(0.5, 0.5), mu = c(1, 2), lambda = c(1, 1))
  expect_error(bulkem(list(1:6, 1:6, 1:6), inits = list(two, two)), "one per dataset \\(3\\)")
})

test_that("use.gpu = TRUE explains why no GPU can be used", {
  skip_if(bulkem_backends()$usable[2])
  expect_error(bulkem(d, use.gpu = TRUE), "no CUDA GPU is usable", class = "bulkem_error_device")
})

test_that("error messages are stable", {
  local_reproducible_output(width = 80)
  expect_snapshot(error = TRUE, {
    bulkem(list(1:5, c(2, -1)), use.gpu = FALSE)
    bulkem(d, num.components = "two")
    bulkem(list(1, "a"))
    bulkem(list(c(1, 2, 3, 4)), num.components = 1e9)
    bulkem(c(1e-300, 1e300, 1, 2, 3, 4), use.gpu = FALSE)
  })
})
