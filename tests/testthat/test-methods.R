# bulkem's warnings (more starts, max.iters) are not what these tests test.
quiet <- function(expr) suppressWarnings(expr, classes = "bulkem_warning")

set.seed(20)
x <- rinvgaussmix(600, c(0.4, 0.6), c(1, 4), c(20, 2))
fits <- quiet(bulkem(list(first = x, second = rev(x), third = c(1, 2)), random.inits = 4, seed = 8,
                     keep.posterior = TRUE, use.gpu = FALSE))
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
  dig <- function(x, mu, lambda) sqrt(lambda / (2 * pi * x^3)) * exp(-lambda * (x - mu)^2 / (2 * mu^2 * x))
  expect_equal(post[, 1], fit$alpha[1] * dig(new, fit$mu[1], fit$lambda[1]) / dens)
  expect_equal(dens, fit$alpha[1] * dig(new, fit$mu[1], fit$lambda[1]) + fit$alpha[2] * dig(new, fit$mu[2], fit$lambda[2]))
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
  expect_equal(names(df), c("dataset", "n", "num_components", "status", "fit_success", "loglik",
                            "num_iterations", "best_start", "alpha1", "alpha2", "mu1", "mu2",
                            "lambda1", "lambda2", "message"))
  expect_identical(df$num_components, c(2L, 2L, 2L))
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
  expect_error(plot(quiet(bulkem(x, use.gpu = FALSE))[[1]], which = "loglik"), "no log-likelihood trace")
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

# Fits of different K in one bulkem_fits, as bulkem(num.components = 2:3)
# returns them (datasets 1-2 with K = 2, 3-4 with K = 3, 5 failed at K = 3).
set.seed(21)
mixed_data <- list(
  a = rinvgaussmix(400, c(0.5, 0.5), c(1, 4), c(20, 10)),
  b = rinvgaussmix(300, c(0.3, 0.7), c(1, 3), c(30, 5)),
  c = rinvgaussmix(500, c(0.3, 0.3, 0.4), c(0.5, 2, 6), c(20, 40, 60)),
  d = rinvgaussmix(450, c(0.3, 0.3, 0.4), c(0.5, 2, 6), c(20, 40, 60)),
  e = c(1, 2, 3, 4, 5)
)
f2 <- quiet(bulkem(mixed_data, num.components = 2, random.inits = 4, seed = 2, use.gpu = FALSE))
f3 <- quiet(bulkem(mixed_data, num.components = 3, random.inits = 4, seed = 2, use.gpu = FALSE))
mixed_crit <- cbind("2" = BIC(f2), "3" = BIC(f3))
mixed <- structure(c(unclass(f2)[1:2], unclass(f3)[3:5]), class = "bulkem_fits",
                   backend = "cpu", threads = 1L, seconds = 0.5, seed = 2, family = "invgauss",
                   num.components = 2:3, criterion = "BIC", criteria = mixed_crit)

test_that("the mixed fixture has the shape bulkem gives", {
  expect_equal(unname(lengths(lapply(mixed, `[[`, "alpha"))), c(2, 2, 3, 3, 3))
  expect_false(mixed$e$fit_success)
})

test_that("as.data.frame pads the parameters of fits with fewer components", {
  df <- as.data.frame(mixed)
  expect_equal(names(df), c("dataset", "n", "num_components", "status", "fit_success", "loglik",
                            "num_iterations", "best_start", paste0("alpha", 1:3), paste0("mu", 1:3),
                            paste0("lambda", 1:3), "message"))
  expect_identical(df$num_components, c(2L, 2L, 3L, 3L, 3L))
  expect_equal(df$dataset, names(mixed_data))
  expect_equal(unlist(df[1, c("alpha1", "alpha2", "mu1", "mu2", "lambda1", "lambda2")]),
               c(mixed$a$alpha, mixed$a$mu, mixed$a$lambda), ignore_attr = TRUE)
  expect_true(all(is.na(df[1:2, c("alpha3", "mu3", "lambda3")])))
  expect_equal(df$mu3[3], mixed$c$mu[3])
  expect_true(all(is.na(df[5, c(paste0("alpha", 1:3), paste0("mu", 1:3))])))
  expect_identical(df$status[5], "failed")
})

test_that("coef gives a datasets x parameters matrix", {
  cf <- coef(mixed)
  expect_equal(dim(cf), c(5L, 9L))
  expect_equal(rownames(cf), names(mixed_data))
  expect_equal(colnames(cf), c(paste0("alpha", 1:3), paste0("mu", 1:3), paste0("lambda", 1:3)))
  expect_equal(cf["c", ], coef(mixed$c))
  expect_equal(cf["b", c("alpha1", "alpha2", "mu1", "mu2", "lambda1", "lambda2")], coef(mixed$b))
  expect_true(all(is.na(cf["b", c("alpha3", "mu3", "lambda3")])))
  expect_true(all(is.na(cf["e", ])))
  expect_equal(dim(coef(fits)), c(3L, 6L))
})

test_that("logLik, AIC, BIC and nobs give one value per dataset", {
  ll <- logLik(mixed)
  expect_s3_class(ll, "logLik")
  loglik <- vapply(mixed, `[[`, numeric(1), "loglik")
  expect_equal(as.numeric(ll), unname(loglik))
  expect_equal(attr(ll, "df"), c(5L, 5L, 8L, 8L, 8L))
  expect_equal(attr(ll, "nobs"), c(400, 300, 500, 450, 5))
  n <- c(400, 300, 500, 450, 5)
  df <- c(5, 5, 8, 8, 8)
  expect_equal(AIC(mixed), stats::setNames(-2 * loglik + 2 * df, names(mixed_data)))
  expect_equal(AIC(mixed, k = 3), stats::setNames(-2 * loglik + 3 * df, names(mixed_data)))
  expect_equal(BIC(mixed), stats::setNames(-2 * loglik + log(n) * df, names(mixed_data)))
  # The logLik object vectorises through stats' own methods.
  expect_equal(stats::BIC(ll), unname(BIC(mixed)))
  expect_true(is.na(BIC(mixed)[["e"]]))
  expect_equal(nobs(mixed), stats::setNames(n, names(mixed_data)))
  expect_equal(BIC(mixed)[["a"]], BIC(logLik(mixed$a)))
  expect_error(AIC(mixed, mixed), "one value per dataset", class = "bulkem_error_input")
  expect_error(BIC(mixed, fits), "one value per dataset", class = "bulkem_error_input")
  expect_output(print(ll), "'log Lik.' of 5 datasets")
  expect_output(print(ll), "b +-[0-9.]+ +5 +300")
})

test_that("summary counts statuses and K, and gives quantiles of each parameter", {
  s <- summary(mixed)
  expect_s3_class(s, "summary.bulkem_fits")
  expect_equal(s$datasets, 5)
  status <- vapply(mixed, `[[`, "", "status")
  expect_equal(as.integer(s$status), c(sum(status == "converged"), sum(status == "max_iters"), 1L))
  expect_equal(names(s$status), c("converged", "max_iters", "failed"))
  expect_equal(as.integer(s$components), c(2L, 2L))
  expect_equal(names(s$components), c("2", "3"))
  expect_equal(s$candidates, 2:3)
  expect_identical(s$criterion, "BIC")
  p3 <- s$parameters[["3"]]
  expect_equal(attr(p3, "datasets"), 2)
  expect_equal(rownames(p3), c(paste0("alpha", 1:3), paste0("mu", 1:3), paste0("lambda", 1:3)))
  expect_equal(colnames(p3), c("min", "25%", "median", "75%", "max"))
  expect_equal(unname(p3["mu2", ]), unname(stats::quantile(c(mixed$c$mu[2], mixed$d$mu[2]),
                                                             c(0, 0.25, 0.5, 0.75, 1))))
  expect_equal(unname(s$parameters[["2"]]["lambda1", "max"]), max(mixed$a$lambda[1], mixed$b$lambda[1]))
  ll <- vapply(mixed[1:4], `[[`, numeric(1), "loglik")
  expect_equal(unname(s$loglik[c("min", "max")]), range(ll))
  expect_equal(unname(s$loglik_per_obs[["median"]]), stats::median(ll / c(400, 300, 500, 450)))
  out <- capture.output(print(s))
  expect_match(out[1], "inverse Gaussian mixtures to 5 datasets")
  expect_true(any(grepl("chosen from 2, 3 by BIC", out, fixed = TRUE)))
  expect_true(any(grepl("parameters over the 2 datasets with K = 3", out, fixed = TRUE)))
  i <- grep("K=2 K=3 failed", out, fixed = TRUE)
  expect_equal(as.integer(strsplit(trimws(out[i + 1]), " +")[[1]][-1]), c(2L, 2L, 1L))
  expect_true(any(grepl("backend: cpu", out, fixed = TRUE)))
  expect_error(summary(mixed, probs = 2), "probs", class = "bulkem_error_input")
  # A single K: no criterion line.
  expect_output(print(summary(fits)), "number of components K:")
})

test_that("print says which K were chosen from", {
  expect_output(print(mixed), "inverse Gaussian mixtures with K chosen from 2, 3 by BIC")
  expect_output(print(mixed), "chosen K: 2 (2), 3 (2)", fixed = TRUE)
  expect_output(print(fits), "2-component inverse Gaussian mixtures")
  # Fits of several K put together without a selection claim no criterion.
  plain <- mixed
  attr(plain, "criterion") <- NULL
  attr(plain, "criteria") <- NULL
  attr(plain, "num.components") <- NULL
  expect_output(print(plain), "inverse Gaussian mixtures with K = 2, 3\n", fixed = TRUE)
  expect_output(print(summary(plain)), "number of components K:")
})

test_that("plot(fits) draws an overview, or the criteria", {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_identical(plot(mixed), mixed)
  expect_identical(plot(fits), fits)
  expect_identical(plot(mixed, which = "criteria"), mixed)
  expect_error(plot(mixed, which = "nope"), "which", class = "bulkem_error_input")
  expect_error(plot(mixed["e"]), "every fit failed", class = "bulkem_error_input")
})

test_that("the density plot's x range comes from quantiles of the data", {
  set.seed(4)
  y <- rinvgaussmix(1000, c(0.3, 0.7), c(1, 3), c(30, 0.2))
  ig <- quiet(bulkem(y, random.inits = 5, seed = 1, use.gpu = FALSE))[[1]]
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  plot(ig, y)
  q <- stats::quantile(y, c(0.005, 0.995), names = FALSE)
  lim <- c(max(0, q[1] - 0.04 * diff(q)), q[2] + 0.04 * diff(q))
  # par("usr") is the range widened by R's usual 4%.
  usr <- graphics::par("usr")[1:2]
  expect_equal(usr, lim + c(-1, 1) * 0.04 * diff(lim))
  expect_lt(usr[2], max(y) / 2)
  plot(ig, y, log = "x")
  expect_true(graphics::par("xlog"))
  lq <- stats::quantile(log10(y), c(0.005, 0.995), names = FALSE)
  llim <- lq + c(-1, 1) * 0.04 * diff(lq)
  expect_equal(graphics::par("usr")[1:2], llim + c(-1, 1) * 0.04 * diff(llim))
  plot(ig, y, xlim = c(0.5, 2))
  expect_equal(graphics::par("usr")[1:2], c(0.5, 2) + c(-1, 1) * 0.06)
  expect_error(plot(ig, y, log = "y"), "log", class = "bulkem_error_input")
  expect_error(plot(ig, y, xlim = c(2, 1)), "xlim", class = "bulkem_error_input")
  expect_error(plot(ig, y, log = "x", xlim = c(0, 1)), "above 0", class = "bulkem_error_input")
  expect_error(plot(ig, y, xlim = c(1e6, 1e7)), "No data", class = "bulkem_error_input")
  nfit <- quiet(bulkem(faithful$waiting, family = "normal", random.inits = 5, seed = 1,
                       use.gpu = FALSE))[[1]]
  expect_identical(plot(nfit, faithful$waiting), nfit)
  expect_error(plot(nfit, faithful$waiting - 60, log = "x"), "positive data",
               class = "bulkem_error_input")
})

test_that("the histogram is on the density's scale, on either axis", {
  set.seed(5)
  y <- rinvgaussmix(2000, c(0.3, 0.7), c(1, 3), c(30, 0.2))
  lim <- bulkem:::density_xlim(y, NULL, FALSE, TRUE, NULL)
  h <- bulkem:::density_histogram(y, lim, FALSE, NULL)
  inside <- mean(y >= lim[1] & y <= lim[2])
  expect_lt(inside, 1)
  # Bar areas add up to the fraction of the data shown, not to 1.
  expect_equal(sum(h$heights * diff(h$edges)), inside)
  hl <- bulkem:::density_histogram(y, bulkem:::density_xlim(y, NULL, TRUE, TRUE, NULL), TRUE, NULL)
  expect_equal(diff(log10(hl$edges)), rep(diff(log10(hl$edges))[1], length(hl$edges) - 1))
  expect_equal(sum(hl$heights * diff(log10(hl$edges))), mean(y >= min(hl$edges) & y <= max(hl$edges)))
  # The log axis's curves are densities of log10(x): they integrate to 1 in
  # log10(x), each component to its weight.
  ig <- quiet(bulkem(y, random.inits = 3, seed = 1, use.gpu = FALSE))[[1]]
  g <- seq(-8, 8, length.out = 40001)
  cl <- bulkem:::density_curves(ig, 10^g, TRUE)
  expect_equal(sum(cl$mixture) * diff(g)[1], 1, tolerance = 1e-4)
  expect_equal(colSums(cl$components) * diff(g)[1], ig$alpha, tolerance = 1e-4)
  expect_equal(rowSums(cl$components), cl$mixture)
  # On a linear axis, the fitted density itself.
  cx <- bulkem:::density_curves(ig, c(0.5, 1, 2), FALSE)
  expect_equal(cx$mixture, dinvgaussmix(c(0.5, 1, 2), ig$alpha, ig$mu, ig$lambda))
})
