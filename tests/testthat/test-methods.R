set.seed(20)
x <- rinvgaussmix(600, c(0.4, 0.6), c(1, 4), c(20, 2))
fits <- bulkem(list(first = x, second = rev(x), third = c(1, 2)), random.inits = 4, seed = 8,
               keep.posterior = TRUE, use.gpu = FALSE)
fit <- fits$first

test_that("logLik supports AIC, BIC and nobs", {
  ll <- logLik(fit)
  expect_s3_class(ll, "logLik")
  expect_equal(attr(ll, "df"), 5L)
  expect_equal(nobs(fit), 600)
  expect_equal(AIC(ll), -2 * fit$loglik + 2 * 5)
  expect_equal(BIC(ll), -2 * fit$loglik + log(600) * 5)
})

test_that("coef names every parameter", {
  expect_named(coef(fit), c("alpha1", "alpha2", "mu1", "mu2", "lambda1", "lambda2"))
  expect_equal(unname(coef(fit)[3:4]), fit$mu)
})

test_that("predict gives posteriors, classes and the mixture density", {
  new <- c(0.5, 1, 3, 8)
  post <- predict(fit, new)
  expect_equal(dim(post), c(4L, 2L))
  expect_equal(rowSums(post), rep(1, 4))
  expect_equal(predict(fit, new, type = "class"), max.col(post, ties.method = "first"))
  dens <- predict(fit, new, type = "density")
  expect_equal(dens, dinvgaussmix(new, fit$alpha, fit$mu, fit$lambda))
  # A posterior is the weighted component density over the mixture density.
  expect_equal(post[, 1], fit$alpha[1] * exp(bulkem:::ldinvgauss(new, fit$mu[1], fit$lambda[1])) / dens)
  expect_equal(predict(fit), fit$posterior)
  expect_error(predict(fit, type = "density"), "newdata")
  expect_error(predict(fits$third, 1), "failed fit")
  expect_error(predict(fit, "a"), "numeric")
})

test_that("print and summary show the fit", {
  expect_output(print(fit), "2-component inverse Gaussian mixture, n = 600")
  expect_output(print(fits$third), "failed")
  s <- summary(fit)
  expect_s3_class(s, "summary.bulkem_fit")
  expect_output(print(s), "AIC")
  expect_output(print(fits), "3 datasets")
  expect_output(print(fits), "2 converged, 0 max_iters, 1 failed")
  expect_identical(print(fit), fit) |> expect_output()
})

test_that("as.data.frame gives one row per dataset", {
  df <- as.data.frame(fits)
  expect_equal(nrow(df), 3)
  expect_equal(df$dataset, c("first", "second", "third"))
  expect_equal(names(df), c("dataset", "n", "status", "fit_success", "loglik", "num_iterations",
                            "best_start", "alpha1", "alpha2", "mu1", "mu2", "lambda1", "lambda2",
                            "message"))
  expect_equal(df$mu1[1], fit$mu[1])
  expect_true(is.na(df$mu1[3]))
})

test_that("[ refuses selections of fits that don't exist", {
  expect_error(fits[5:6], "selects fits that don't exist", class = "bulkem_error_input")
  expect_error(fits["fourth"], "no dataset named", class = "bulkem_error_input")
  expect_error(fits[c(TRUE, NA, FALSE)], "don't exist", class = "bulkem_error_input")
  expect_error(fits[c(-1, 2)], "Can't subset", class = "bulkem_error_input")
  expect_length(fits[0], 0)
  expect_named(fits[c("third", "first")], c("third", "first"))
  expect_length(fits[-1], 2)
  expect_identical(fits[], fits)
})

test_that("[ keeps the class and attributes", {
  sub <- fits[2:3]
  expect_s3_class(sub, "bulkem_fits")
  expect_named(sub, c("second", "third"))
  expect_equal(attr(sub, "backend"), "cpu")
})

test_that("plot draws the density and the log-likelihood trace", {
  path <- tempfile(fileext = ".png")
  grDevices::png(path)
  on.exit(unlink(path))
  expect_identical(plot(fit, x), fit)
  expect_identical(plot(fit, which = "loglik"), fit)
  grDevices::dev.off()
  expect_gt(file.size(path), 0)
  expect_error(plot(fit), "data")
  expect_error(plot(bulkem(x, use.gpu = FALSE)[[1]], which = "loglik"), "no log-likelihood trace")
})

test_that("predict handles 0, Inf and values far in the tails, and refuses NA", {
  new <- c(0, Inf, -1, 1e-300, 1e300, 2)
  dens <- predict(fit, new, type = "density")
  expect_identical(dens[1:5], c(0, 0, 0, 0, 0))
  expect_gt(dens[6], 0)
  post <- predict(fit, new)
  expect_true(all(is.na(post[1:3, ])))
  # Far in the tails the density underflows but the log-densities do not:
  # the posterior is still defined.
  expect_equal(rowSums(post[4:6, ]), rep(1, 3))
  expect_equal(predict(fit, new, type = "class")[6], max.col(post[6, , drop = FALSE]))
  expect_error(predict(fit, "a"), "numeric", class = "bulkem_error_input")
  expect_error(predict(fit, c(1, NA)), "Position 2 is NA", class = "bulkem_error_input")
  expect_error(predict(fit, c(NaN, 1), type = "density"), "Position 1 is NaN", class = "bulkem_error_input")
  expect_error(predict(fits$third, 1), "failed fit", class = "bulkem_error_input")
})

test_that("plot needs finite data and drops missing values", {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_identical(plot(fit, c(x, NA)), fit)
  expect_error(plot(fit, c(x, Inf)), "Position 601 is Inf", class = "bulkem_error_input")
  expect_error(plot(fit, c(NA_real_, NA_real_)), "no finite value", class = "bulkem_error_input")
  expect_error(plot(fits$third, x), "failed fit", class = "bulkem_error_input")
})
