test_that("bulkem recovers known inverse Gaussian mixtures from random starts", {
  set.seed(10)
  truth <- list(alpha = c(0.3, 0.7), mu = c(1, 3), lambda = c(30, 0.2))
  d <- sim_ig(30, 3000)
  fits <- bulkem(d, random.inits = 10, max.iters = 1000, epsilon = 1e-8, use.gpu = FALSE)
  df <- as.data.frame(fits)
  expect_true(all(df$status == "converged"))
  expect_lt(abs(median(df$alpha1) - 0.3), 0.02)
  expect_lt(abs(median(df$mu1) - 1), 0.02)
  expect_lt(abs(median(df$mu2) - 3), 0.2)
  expect_lt(abs(median(df$lambda1) / 30 - 1), 0.1)
  expect_lt(abs(median(df$lambda2) / 0.2 - 1), 0.1)
  # The kept start is the best one.
  for (f in fits) expect_equal(f$loglik, max(f$start_logliks, na.rm = TRUE))
})

test_that("bulkem recovers a three-component Normal mixture", {
  set.seed(11)
  x <- c(rnorm(600, -4, 1), rnorm(900, 0, 0.5), rnorm(500, 5, 2))
  fit <- bulkem(x, 3, family = "normal", random.inits = 20, max.iters = 2000,
                epsilon = 1e-9, use.gpu = FALSE)[[1]]
  expect_equal(fit$status, "converged")
  expect_equal(fit$mu, c(-4, 0, 5), tolerance = 0.1)
  expect_equal(fit$sigma, c(1, 0.5, 2), tolerance = 0.1)
  expect_equal(fit$alpha, c(0.3, 0.45, 0.25), tolerance = 0.05)
  expect_true(all(diff(fit$mu) > 0))
})

test_that("results agree with a plain-R EM from the same inits", {
  set.seed(12)
  x <- rinvgaussmix(400, c(0.4, 0.6), c(1, 4), c(10, 3))
  init <- list(alpha = c(0.5, 0.5), mu = c(0.8, 3), lambda = c(5, 5))
  fit <- bulkem(x, inits = init, max.iters = 50, epsilon = 0, use.gpu = FALSE)[[1]]
  ref <- plain_em(x, "invgauss", init$alpha, init$mu, init$lambda, 50)
  expect_equal(fit$num_iterations, 50L)
  expect_equal(fit$status, "max_iters")
  expect_lt(rel_diff(fit$alpha, ref$alpha), 1e-6)
  expect_lt(rel_diff(fit$mu, ref$mu), 1e-6)
  expect_lt(rel_diff(fit$lambda, ref$scale), 1e-6)
  expect_lt(rel_diff(fit$loglik, ref$loglik), 1e-9)
  expect_equal(fit$init_mu, init$mu)

  y <- c(rnorm(300, 0, 1), rnorm(200, 3, 0.7))
  init <- list(alpha = c(0.3, 0.3, 0.4), mu = c(-1, 1, 4), sigma = c(1, 1, 1))
  fit <- bulkem(y, 3, family = "normal", inits = init, max.iters = 40, epsilon = 0,
                use.gpu = FALSE)[[1]]
  ref <- plain_em(y, "normal", init$alpha, init$mu, init$sigma, 40)
  expect_lt(rel_diff(fit$alpha, ref$alpha), 1e-6)
  expect_lt(rel_diff(fit$mu, ref$mu), 1e-6)
  expect_lt(rel_diff(fit$sigma, ref$scale), 1e-6)
  expect_lt(rel_diff(fit$loglik, ref$loglik), 1e-9)
})

test_that("Normal fits agree with mixtools::normalmixEM from the same start", {
  skip_if_not_installed("mixtools")
  x <- faithful$waiting
  start <- list(alpha = c(0.5, 0.5), mu = c(50, 80), sigma = c(5, 5))
  fit <- bulkem(x, family = "normal", inits = start, max.iters = 5000, epsilon = 1e-12,
                use.gpu = FALSE)[[1]]
  utils::capture.output(
    ref <- mixtools::normalmixEM(x, lambda = start$alpha, mu = start$mu, sigma = start$sigma,
                                 epsilon = 1e-12, maxit = 5000)
  )
  expect_equal(fit$status, "converged")
  expect_lt(rel_diff(fit$alpha, ref$lambda), 1e-6)
  expect_lt(rel_diff(fit$mu, ref$mu), 1e-6)
  expect_lt(rel_diff(fit$sigma, ref$sigma), 1e-6)
  expect_lt(rel_diff(fit$loglik, ref$loglik), 1e-9)
})

test_that("set.seed and seed reproduce a call; different seeds differ", {
  d <- sim_ig(6, 300)
  set.seed(99)
  a <- bulkem(d, random.inits = 4, use.gpu = FALSE)
  set.seed(99)
  b <- bulkem(d, random.inits = 4, use.gpu = FALSE)
  expect_identical(fits_only(a), fits_only(b))
  expect_identical(attr(a, "seed"), attr(b, "seed"))
  c1 <- bulkem(d, random.inits = 4, seed = 5, use.gpu = FALSE)
  c2 <- bulkem(d, random.inits = 4, seed = 5, use.gpu = FALSE)
  c3 <- bulkem(d, random.inits = 4, seed = 6, use.gpu = FALSE)
  expect_identical(fits_only(c1), fits_only(c2))
  expect_false(identical(c1[[1]]$init_mu, c3[[1]]$init_mu))
})

test_that("results are identical for any number of threads", {
  d <- sim_ig(12, 500)
  old <- options(bulkem.threads = 1)
  on.exit(options(old))
  one <- bulkem(d, random.inits = 3, seed = 1, use.gpu = FALSE)
  options(bulkem.threads = 2)
  two <- bulkem(d, random.inits = 3, seed = 1, use.gpu = FALSE)
  expect_equal(attr(one, "threads"), 1L)
  expect_equal(attr(two, "threads"), 2L)
  expect_identical(fits_only(one), fits_only(two))
})

test_that("unfittable datasets fail with a reason and leave the others alone", {
  set.seed(13)
  good <- rinvgaussmix(500, c(0.3, 0.7), c(1, 3), c(30, 0.2))
  fits <- bulkem(list(a = good, b = c(1, 2), c = rep(2.5, 30), d = good),
                 random.inits = 3, seed = 2, use.gpu = FALSE)
  expect_named(fits, c("a", "b", "c", "d"))
  expect_equal(vapply(fits, `[[`, "", "status")[2:3], c(b = "failed", c = "failed"))
  expect_false(fits$b$fit_success)
  expect_match(fits$b$message, "at least 5")
  expect_match(fits$c$message, "equal")
  expect_true(all(is.na(fits$b$mu)))
  expect_true(is.na(fits$b$loglik))
  expect_true(fits$a$fit_success && fits$d$fit_success)
  alone <- bulkem(list(good), random.inits = 3, seed = 2, use.gpu = FALSE)
  expect_identical(fits$a, alone[[1]])
})

test_that("max.iters is reported as such and fit_success stays TRUE", {
  d <- sim_ig(1, 500)
  f <- bulkem(d, max.iters = 2, epsilon = 0, seed = 3, keep.posterior = TRUE, use.gpu = FALSE)[[1]]
  expect_equal(f$status, "max_iters")
  expect_equal(f$num_iterations, 2L)
  expect_true(f$fit_success)
  expect_length(f$loglik_trace, 2)
  expect_equal(f$loglik_trace[2], f$loglik)
  expect_null(bulkem(d, max.iters = 2, seed = 3, use.gpu = FALSE)[[1]]$loglik_trace)
})

test_that("the result has every documented field", {
  f <- bulkem(sim_ig(2, 200), seed = 1, use.gpu = FALSE)
  expect_s3_class(f, "bulkem_fits")
  # Not "mixEM": mixtools' methods would misread the fields (as.mixEM() converts).
  expect_s3_class(f[[1]], "bulkem_fit", exact = TRUE)
  expect_true(all(c("alpha", "mu", "lambda", "init_alpha", "init_mu", "init_lambda", "loglik",
                    "num_iterations", "fit_success", "status", "n", "family", "ft",
                    "start_logliks") %in% names(f[[1]])))
  g <- bulkem(faithful$waiting, family = "normal", seed = 1, use.gpu = FALSE)[[1]]
  expect_true(all(c("sigma", "init_sigma") %in% names(g)))
  expect_false("lambda" %in% names(g))
  expect_equal(g$family, "normal")
  expect_equal(g$ft, "bulkem")
})

test_that("integer data and a single vector are accepted", {
  x <- as.integer(round(faithful$waiting))
  a <- bulkem(x, family = "normal", seed = 4, use.gpu = FALSE)
  b <- bulkem(list(as.double(x)), family = "normal", seed = 4, use.gpu = FALSE)
  expect_identical(fits_only(a), fits_only(b))
})

test_that("keep.posterior keeps the posterior of the kept start", {
  set.seed(14)
  x <- rinvgaussmix(300, c(0.5, 0.5), c(1, 5), c(10, 10))
  f <- bulkem(x, random.inits = 3, keep.posterior = TRUE, use.gpu = FALSE)[[1]]
  expect_equal(dim(f$posterior), c(300L, 2L))
  expect_equal(rowSums(f$posterior), rep(1, 300), tolerance = 1e-12)
  expect_equal(f$posterior, predict(f, x), tolerance = 1e-10, ignore_attr = TRUE)
  expect_null(bulkem(x, use.gpu = FALSE)[[1]]$posterior)
})

test_that("M = 1 is the maximum-likelihood fit", {
  set.seed(15)
  x <- rinvgaussmix(1000, 1, 2, 4)
  f <- bulkem(x, 1, use.gpu = FALSE)[[1]]
  expect_equal(f$mu, mean(x), tolerance = 1e-12)
  expect_equal(f$lambda, 1 / mean(1 / x - 1 / mean(x)), tolerance = 1e-10)
  expect_equal(f$alpha, 1)
})

test_that("many starts: every start's log-likelihood is kept, the first of the best is chosen", {
  set.seed(16)
  x <- rinvgaussmix(200, c(0.4, 0.6), c(1, 4), c(10, 3))
  f <- bulkem(x, 3, random.inits = 3000, max.iters = 20, seed = 2, keep.posterior = TRUE, use.gpu = FALSE)[[1]]
  expect_length(f$start_logliks, 3000)
  ll <- f$start_logliks
  top <- max(ll, na.rm = TRUE)
  expect_equal(f$best_start, which(ll >= top - 1e-9 * abs(top))[1])
  expect_identical(f$loglik, ll[f$best_start])
  expect_equal(tail(f$loglik_trace, 1), f$loglik)
  # The same with one thread.
  old <- options(bulkem.threads = 1)
  on.exit(options(old))
  expect_identical(fits_only(bulkem(x, 3, random.inits = 3000, max.iters = 20, seed = 2, keep.posterior = TRUE,
                                    use.gpu = FALSE))[[1]], f)
})

test_that("Ctrl-C stops a fit of one large dataset within a second, as R's interrupt", {
  skip_on_cran()
  skip_on_os("windows")
  skip_if_not_installed("callr")
  # 5e6 observations x 100 starts x 1000 iterations: hours of work, all in
  # one dataset, so the core must look for the interrupt inside its starts.
  p <- callr::r_bg(function() {
    suppressMessages(library(bulkem))
    set.seed(1)
    x <- as.numeric(rinvgaussmix(5e6, c(0.3, 0.7), c(1, 3), c(30, 0.2)))
    cat("ready\n")
    res <- tryCatch(bulkem(x, random.inits = 100, max.iters = 1000, epsilon = 0, use.gpu = FALSE),
                    interrupt = function(e) "interrupt", error = function(e) conditionMessage(e))
    stopped <- Sys.time()
    list(res = res, stopped = stopped, after = bulkem(x[1:300], use.gpu = FALSE)[[1]]$status)
  }, stdout = "|", stderr = "|")
  on.exit(p$kill(), add = TRUE)
  ready <- FALSE
  while (!ready && p$is_alive()) {
    p$poll_io(2000)
    ready <- any(p$read_output_lines() == "ready")
  }
  expect_true(ready)
  Sys.sleep(1.5)
  sent <- Sys.time()
  p$interrupt()
  p$wait(30000)
  r <- p$get_result()
  expect_identical(r$res, "interrupt")
  expect_lt(as.numeric(difftime(r$stopped, sent, units = "secs")), 1)
  expect_true(r$after %in% c("converged", "max_iters"))
})

test_that("precision = 'mixed' keeps the float64 fit's log-likelihood and says so", {
  set.seed(40)
  d <- c(sim_ig(6, 2000), list(rnorm(500, 5) ^ 2 + 1))
  # (Some of these datasets warn that one start alone found the optimum.)
  dbl <- suppressWarnings(bulkem(d, random.inits = 6, max.iters = 2000, epsilon = 1e-9, use.gpu = FALSE, seed = 4))
  mix <- suppressWarnings(bulkem(d, random.inits = 6, max.iters = 2000, epsilon = 1e-9, use.gpu = FALSE,
                                 seed = 4, precision = "mixed"))
  expect_equal(attr(mix, "precision"), "mixed")
  expect_equal(attr(dbl, "precision"), "double")
  for (k in seq_along(d)) {
    expect_equal(mix[[k]]$status, dbl[[k]]$status)
    expect_lt(rel_diff(mix[[k]]$loglik, dbl[[k]]$loglik), 1e-7)
    expect_lt(rel_diff(mix[[k]]$mu, dbl[[k]]$mu), 1e-4)
  }
  # The reported log-likelihood is the float64 one of the returned parameters.
  f <- mix[[1]]
  dens <- f$alpha[1] * statmod::dinvgauss(d[[1]], f$mu[1], f$lambda[1]) +
    f$alpha[2] * statmod::dinvgauss(d[[1]], f$mu[2], f$lambda[2])
  expect_equal(f$loglik, sum(log(dens)), tolerance = 1e-10)
  expect_output(print(mix), "precision: mixed")
  expect_error(bulkem(d, precision = "half", use.gpu = FALSE), class = "bulkem_error_input")
})
