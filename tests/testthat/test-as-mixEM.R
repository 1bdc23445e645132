# bulkem's warnings (more starts, max.iters) are not what these tests test.
quiet <- function(expr) suppressWarnings(expr, classes = "bulkem_warning")

x <- faithful$waiting
nfit <- quiet(bulkem(x, family = "normal", random.inits = 10, seed = 5, keep.posterior = TRUE,
                     use.gpu = FALSE))[[1]]

test_that("as.mixEM maps a Normal fit to mixtools' fields", {
  m <- as.mixEM(nfit, x)
  expect_identical(class(m), "mixEM")
  expect_named(m, c("x", "lambda", "mu", "sigma", "loglik", "posterior", "all.loglik",
                    "restarts", "ft"))
  expect_identical(m$x, as.double(x))
  expect_identical(m$lambda, nfit$alpha)
  expect_identical(m$mu, nfit$mu)
  expect_identical(m$sigma, nfit$sigma)
  expect_identical(m$loglik, nfit$loglik)
  expect_identical(m$all.loglik, nfit$loglik_trace)
  expect_identical(m$restarts, 0)
  expect_identical(m$ft, "normalmixEM")
  expect_equal(dim(m$posterior), c(length(x), 2L))
  expect_identical(colnames(m$posterior), c("comp.1", "comp.2"))
  # The posterior at the data is the one bulkem kept, and predict()'s.
  expect_equal(unname(m$posterior), unname(nfit$posterior), tolerance = 1e-10)
  expect_equal(unname(m$posterior), unname(predict(nfit, x)), tolerance = 1e-12)
  # Without a trace, all.loglik is the final log-likelihood.
  plain <- quiet(bulkem(x, family = "normal", random.inits = 10, seed = 5, use.gpu = FALSE))[[1]]
  expect_identical(as.mixEM(plain, x)$all.loglik, plain$loglik)
  # A one-dataset bulkem_fits converts too.
  fits <- quiet(bulkem(list(w = x), family = "normal", random.inits = 10, seed = 5, use.gpu = FALSE))
  expect_identical(as.mixEM(fits, x)$lambda, fits$w$alpha)
  expect_identical(as.mixEM(fits, list(x))$mu, fits$w$mu)
})

test_that("mixtools' summary, plot and boot.se work on as.mixEM()", {
  skip_if_not_installed("mixtools")
  m <- as.mixEM(nfit, x)
  out <- capture.output(summary(m))
  expect_match(out[1], "normalmixEM")
  rows <- lapply(c("lambda", "mu", "sigma"), function(r) {
    as.numeric(strsplit(trimws(out[startsWith(out, r)]), " +")[[1]][-1])
  })
  expect_equal(rows[[1]], nfit$alpha, tolerance = 1e-5)
  expect_equal(rows[[2]], nfit$mu, tolerance = 1e-5)
  expect_equal(rows[[3]], nfit$sigma, tolerance = 1e-5)
  ll <- as.numeric(sub(".*:", "", out[grep("loglik at estimate", out)]))
  expect_equal(ll, nfit$loglik, tolerance = 1e-6)

  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_gt(length(m$all.loglik), 1)
  expect_no_error(plot(m, whichplots = 1))
  expect_no_error(plot(m, whichplots = 2))

  set.seed(9)
  capture.output(se <- mixtools::boot.se(m, B = 5))
  expect_length(se$lambda.se, 2)
  expect_length(se$mu.se, 2)
  expect_length(se$sigma.se, 2)
  expect_true(all(is.finite(c(se$lambda.se, se$mu.se, se$sigma.se))))
  expect_true(all(c(se$lambda.se, se$mu.se, se$sigma.se) > 0))
})

test_that("as.mixEM refuses inverse Gaussian fits and states the mapping", {
  set.seed(2)
  y <- rinvgaussmix(300, c(0.4, 0.6), c(1, 4), c(20, 2))
  ig <- quiet(bulkem(y, random.inits = 3, use.gpu = FALSE))[[1]]
  err <- expect_error(as.mixEM(ig, y), "no inverse Gaussian mixture", class = "bulkem_error_input")
  msg <- conditionMessage(err)
  expect_match(msg, "alpha.*lambda.*weights")
  expect_match(msg, "shape.*no mixtools counterpart")
})

test_that("as.mixEM needs the fitted data and a successful fit", {
  expect_error(as.mixEM(nfit), "must be supplied", class = "bulkem_error_input")
  expect_error(as.mixEM(nfit, x[-1]), "272 observations", class = "bulkem_error_input")
  expect_error(as.mixEM(nfit, as.character(x)), "numeric vector", class = "bulkem_error_input")
  expect_error(as.mixEM(nfit, c(x[-1], NA)), "finite", class = "bulkem_error_input")
  # Same length, other values: the log-likelihood gives them away.
  expect_error(as.mixEM(nfit, x + 1), "not the data the model was fitted to",
               class = "bulkem_error_input")
  # Order does not matter.
  expect_equal(as.mixEM(nfit, rev(x))$loglik, nfit$loglik)
  failed <- quiet(bulkem(list(x, c(1, 1, 1)), family = "normal", random.inits = 2, use.gpu = FALSE))
  expect_false(failed[[2]]$fit_success)
  expect_error(as.mixEM(failed[[2]], c(1, 1, 1)), "failed fit", class = "bulkem_error_input")
  expect_error(as.mixEM(failed, x), "one fit", class = "bulkem_error_input")
  expect_error(as.mixEM(list(), x), "bulkem_fit", class = "bulkem_error_input")
})
