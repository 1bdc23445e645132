d <- list(c(1, 2, 3, 4, 5, 6))

test_that("bad datasets are rejected before any work, naming dataset and value", {
  expect_error(bulkem("a"), "must be a list of numeric vectors")
  expect_error(bulkem(list()), "at least one dataset")
  expect_error(bulkem(data.frame(x = 1:3)), "must be a list of numeric vectors")
  expect_error(bulkem(list(1:5, "x")), "Dataset 2 is")
  expect_error(bulkem(list(1:5, c(1, NA, 3))), "Dataset 2 has NA at position 2")
  expect_error(bulkem(list(1:5, c(1, 2, NaN)), use.gpu = FALSE), "Dataset 2 has NA at position 3")
  expect_error(bulkem(list(1:5, c(1, Inf)), use.gpu = FALSE),
               "dataset 2 has an invalid value at position 2 \\(inf\\)")
  expect_error(bulkem(list(1:5, 1:5, c(3, 0, -1)), use.gpu = FALSE),
               "dataset 3 has an invalid value at position 2 \\(0\\).*strictly positive")
  # Non-positive values are fine for the Normal family.
  expect_s3_class(bulkem(list(c(-1, 0, 2, 5, 7, 1)), 1, family = "normal", use.gpu = FALSE),
                  "bulkem_fits")
})

test_that("bad settings name their argument", {
  expect_error(bulkem(d, num.components = 0), "`num.components` must be a whole number")
  expect_error(bulkem(d, num.components = 1.5), "`num.components`")
  expect_error(bulkem(d, max.iters = -1), "`max.iters`")
  expect_error(bulkem(d, max.iters = NA), "`max.iters`")
  expect_error(bulkem(d, random.inits = 0), "`random.inits`")
  expect_error(bulkem(d, random.inits = c(1, 2)), "`random.inits`")
  expect_error(bulkem(d, epsilon = -1), "`epsilon` must be a finite number")
  expect_error(bulkem(d, epsilon = "a"), "`epsilon`")
  expect_error(bulkem(d, family = "gamma"), "`family` must be one of")
  expect_error(bulkem(d, use.gpu = "yes"), "`use.gpu` must be")
  expect_error(bulkem(d, verbose = NA), "`verbose` must be")
  expect_error(bulkem(d, keep.posterior = 1), "`keep.posterior` must be")
  expect_error(bulkem(d, seed = -3), "`seed` must be")
  expect_error(bulkem(d, seed = 1.5), "`seed` must be")
  expect_error(bulkem(d, parallel = "futures"), "`parallel` must be one of")
  expect_error(bulkem(d, chunk.size = 0), "`chunk.size` must be a whole number")
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
  expect_error(bulkem(d, use.gpu = TRUE), "no CUDA GPU is usable")
})

test_that("error messages are stable", {
  local_reproducible_output(width = 80)
  expect_snapshot(error = TRUE, {
    bulkem(list(1:5, c(2, -1)), use.gpu = FALSE)
    bulkem(d, num.components = "two")
    bulkem(list(1, "a"))
  })
})
