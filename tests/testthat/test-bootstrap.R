# Bootstrap LRT and standard errors: the observed statistic and p-values
# against mclust's mclustBootstrapLRT, standard errors against
# MclustBootstrap and the textbook sigma / sqrt(n), reproducibility from
# the seed, the sequential choice of K, and the arguments refused.

test_that("the LRT statistic and p-value agree with mclustBootstrapLRT", {
  skip_if_not_installed("mclust")
  set.seed(3)
  # One-component datasets, where bulkem's and mclust's two-component fits
  # reach the same optimum (on some data a random start finds a spurious,
  # higher one around a few close points, which mclust's start does not).
  xs <- replicate(3, rnorm(150), simplify = FALSE)
  for (x in xs) {
    m <- mclust::mclustBootstrapLRT(x, modelName = "V", maxG = 1, nboot = 199, verbose = FALSE,
                                    control = mclust::emControl(tol = c(1e-10, 1e-10)))
    l <- bootstrap_lrt(list(x), 1:2, B = 199, family = "normal", use.gpu = FALSE,
                       max.iters = 2000, epsilon = 1e-10, seed = 1)
    expect_equal(l$tests$statistic, m$obs, tolerance = 1e-5)
    # Two bootstrap estimates of p near 0.2-0.3: their difference has an
    # sd of about 0.045; 0.16 is 3.5 sd.
    expect_lt(abs(l$tests$p.value - m$p.value), 0.16)
    expect_gt(l$tests$replicates, 180)
  }
})

test_that("with equal = \"sigma\" the LRT agrees with mclustBootstrapLRT(modelName = \"E\")", {
  skip_if_not_installed("mclust")
  set.seed(5)
  x <- c(rnorm(90), rnorm(60, 1.5))
  m <- mclust::mclustBootstrapLRT(x, modelName = "E", maxG = 1, nboot = 199, verbose = FALSE,
                                  control = mclust::emControl(tol = c(1e-10, 1e-10)))
  l <- bootstrap_lrt(list(x), 1:2, B = 199, family = "normal", equal = "sigma", use.gpu = FALSE,
                     max.iters = 5000, epsilon = 1e-10, seed = 1)
  f2 <- l$fits[["2"]][[1]]
  expect_equal(f2$sigma[1], f2$sigma[2])
  expect_equal(l$tests$statistic, m$obs, tolerance = 1e-5)
  expect_lt(abs(l$tests$p.value - m$p.value), 0.16)
  expect_gt(l$tests$replicates, 180)
  # Standard errors of a fit with a shared scale: one value for both sigmas.
  se <- bootstrap_se(l$fits[["2"]], list(x), B = 50, use.gpu = FALSE, seed = 2)
  expect_equal(se[[1]]$bootstrap$se$sigma[1], se[[1]]$bootstrap$se$sigma[2])
  expect_error(bootstrap_lrt(list(x), 1:2, family = "normal", fixed = list(mu = c(0, NA)), use.gpu = FALSE),
               "fixed", class = "bulkem_error_input")
})

test_that("separated components are found, one component is kept, and the seed reproduces", {
  set.seed(4)
  one <- replicate(3, rnorm(200, 10, 2), simplify = FALSE)
  two <- replicate(3, c(rnorm(100, 0), rnorm(100, 6)), simplify = FALSE)
  datasets <- c(one, two)
  # Three-component fits of two-component data have a spurious third
  # component, and many replicates' fits collapse (counted, with a warning).
  run <- function(...) {
    suppressWarnings(bootstrap_lrt(datasets, 1:3, B = 39, family = "normal", use.gpu = FALSE, seed = 7,
                                   max.iters = 500, ...))
  }
  l <- run(keep.replicates = TRUE)
  expect_s3_class(l, "bulkem_lrt")
  expect_named(l$fits, c("1", "2", "3"))
  t <- as.data.frame(l)
  expect_equal(nrow(t), 12)
  first <- t[t$null == 1, ]
  expect_true(all(first$p.value[4:6] == 1 / (first$replicates[4:6] + 1)))
  expect_equal(lrt_components(l)[4:6], c(2L, 2L, 2L))
  expect_true(all(lrt_components(l, level = 0.01)[1:3] == 1L))
  expect_named(l$replicates, c("1 vs 2", "2 vs 3"))
  expect_equal(dim(l$replicates[["1 vs 2"]]), c(6L, 39L))
  # p-values are the counts of replicate statistics at least the observed.
  s <- l$replicates[["2 vs 3"]]
  obs <- t$statistic[t$null == 2]
  expect_equal(t$p.value[t$null == 2], (1 + rowSums(s >= obs, na.rm = TRUE)) / (rowSums(!is.na(s)) + 1))
  expect_true(all(first$failed <= 4))
  expect_identical(run()$tests, l$tests)
  expect_output(print(l), "sequential tests")
  expect_silent(plot(l))
})

test_that("the inverse Gaussian LRT runs over many datasets", {
  set.seed(5)
  datasets <- sim_ig(8, 300)
  l <- bootstrap_lrt(datasets, 1:2, B = 19, use.gpu = FALSE, seed = 2)
  expect_true(all(l$tests$p.value == 1 / 20))
  # p = 1 / (B + 1) = 0.05 is not below 0.05.
  expect_true(all(lrt_components(l) == 1L))
  expect_true(all(lrt_components(l, level = 0.1) == 2L))
})

test_that("bootstrap standard errors agree with MclustBootstrap and sigma / sqrt(n)", {
  skip_if_not_installed("mclust")
  # Mclust() calls mclustBIC() from the search path.
  suppressPackageStartupMessages(library(mclust))
  set.seed(6)
  x <- c(rnorm(200, 0, 1), rnorm(200, 5, 1.5))
  fits <- bulkem(list(x), family = "normal", use.gpu = FALSE, seed = 1, epsilon = 1e-10, max.iters = 1000)
  se <- bootstrap_se(fits, list(x), B = 400, seed = 3, use.gpu = FALSE, epsilon = 1e-10, max.iters = 1000)
  b <- se[[1]]$bootstrap
  mb <- mclust::MclustBootstrap(mclust::Mclust(x, G = 2, modelNames = "V", verbose = FALSE),
                                nboot = 400, verbose = FALSE)
  ms <- summary(mb, what = "se")
  # An sd from 400 replicates has about 3.5 % error; two of them 5 %.
  expect_equal(b$se$mu, as.vector(ms$mean), tolerance = 0.2)
  expect_equal(b$se$alpha, as.vector(ms$pro), tolerance = 0.2)
  # mclust reports variances: se(sigma^2) ~ 2 sigma se(sigma).
  expect_equal(2 * se[[1]]$sigma * b$se$sigma, as.vector(ms$variance), tolerance = 0.25)
  expect_true(all(b$lower$mu < se[[1]]$mu & se[[1]]$mu < b$upper$mu))
  expect_equal(b$replicates, 400L)

  one <- rnorm(500, 3, 2)
  f1 <- bulkem(list(one), 1, family = "normal", use.gpu = FALSE)
  for (type in c("nonparametric", "parametric")) {
    s1 <- bootstrap_se(f1, list(one), B = 400, type = type, use.gpu = FALSE, seed = 4)[[1]]$bootstrap
    expect_equal(s1$se$mu, f1[[1]]$sigma / sqrt(500), tolerance = 0.15)
    expect_equal(s1$se$sigma, f1[[1]]$sigma / sqrt(1000), tolerance = 0.2)
    expect_identical(s1$type, type)
  }
})

test_that("bootstrap_se keeps replicates, serves mixed K, and summary shows it", {
  set.seed(7)
  datasets <- c(sim_ig(2, 300), list(as.numeric(statmod::rinvgauss(300, 2, 5))))
  fits <- bulkem(datasets, num.components = 1:2, random.inits = 5, use.gpu = FALSE, seed = 1)
  K <- lengths(lapply(fits, `[[`, "alpha"))
  se <- bootstrap_se(fits, datasets, B = 30, keep.replicates = TRUE, use.gpu = FALSE, seed = 2)
  expect_s3_class(se, "bulkem_fits")
  for (d in seq_along(se)) {
    b <- se[[d]]$bootstrap
    expect_equal(dim(b$se), c(K[d], 3L))
    expect_named(b$se, c("alpha", "mu", "lambda"))
    expect_equal(dim(b$draws$lambda), c(30L, K[d]))
    ok <- !is.na(b$draws$mu[, 1])
    expect_equal(b$se$mu, apply(b$draws$mu[ok, , drop = FALSE], 2, sd), tolerance = 1e-12)
    expect_equal(unname(b$lower$mu), unname(apply(b$draws$mu[ok, , drop = FALSE], 2, quantile, 0.025)), tolerance = 1e-12)
  }
  expect_identical(attr(se, "bootstrap")$B, 30L)
  expect_output(print(summary(se[[1]])), "Bootstrap \\(nonparametric, B = 30")
  again <- bootstrap_se(fits, datasets, B = 30, keep.replicates = TRUE, use.gpu = FALSE, seed = 2)
  expect_identical(lapply(again, `[[`, "bootstrap"), lapply(se, `[[`, "bootstrap"))
})

test_that("bootstrap arguments that cannot be honoured are errors", {
  x <- list(rnorm(50), rnorm(50))
  expect_error(bootstrap_lrt(x, 2, family = "normal", use.gpu = FALSE), "consecutive", class = "bulkem_error_input")
  expect_error(bootstrap_lrt(x, c(1, 3), family = "normal", use.gpu = FALSE), "consecutive", class = "bulkem_error_input")
  expect_error(bootstrap_lrt(x, 1:2, B = 0, family = "normal", use.gpu = FALSE), "B", class = "bulkem_error_input")
  expect_error(bootstrap_lrt(x, 1:2, family = "normal", weights = list(rep(1, 50), rep(1, 50)), use.gpu = FALSE),
               "weights", class = "bulkem_error_input")
  expect_error(bootstrap_lrt(x, 1:2, family = "normal", level = 2, use.gpu = FALSE), "level", class = "bulkem_error_input")
  fits <- bulkem(x, 1, family = "normal", use.gpu = FALSE)
  expect_error(bootstrap_se(fits, x[1], B = 10, use.gpu = FALSE), "2 fits and 1 datasets", class = "bulkem_error_input")
  expect_error(bootstrap_se(fits, list(rnorm(50), rnorm(40)), B = 10, use.gpu = FALSE), "n = 50", class = "bulkem_error_input")
  expect_error(bootstrap_se(unclass(fits), x, use.gpu = FALSE), "result of", class = "bulkem_error_input")
  expect_error(bootstrap_se(fits, x, type = "jackknife", use.gpu = FALSE), "type", class = "bulkem_error_input")
  wfits <- bulkem(x, 1, family = "normal", weights = list(rep(2, 50), rep(1, 50)), use.gpu = FALSE)
  expect_error(bootstrap_se(wfits, x, B = 10, use.gpu = FALSE), "unweighted", class = "bulkem_error_input")
})

# The standard errors of mu and sigma of one normal from the censored
# likelihood's observed information at its optimum: right-censored at `cut`
# (`left = FALSE`: values above are known only to exceed it) or
# left-censored at a detection limit.
censored_normal_se <- function(x, cut, left = FALSE) {
  seen <- if (left) x > cut else x <= cut
  nll <- function(p) {
    -(sum(stats::dnorm(x[seen], p[1], exp(p[2]), log = TRUE)) +
        sum(!seen) * stats::pnorm(cut, p[1], exp(p[2]), lower.tail = left, log.p = TRUE))
  }
  o <- stats::optim(c(mean(x), log(stats::sd(x))), nll, method = "BFGS", hessian = TRUE,
                    control = list(reltol = 1e-14))
  v <- solve(o$hessian)
  c(mu = sqrt(v[1, 1]), sigma = sqrt(v[2, 2]) * exp(o$par[2]))
}

test_that("censored data are bootstrapped censored as they were", {
  skip_if_not_installed("survival")
  set.seed(3)
  n <- 400
  # A time-out at -0.5 sd censors 69% of the data: the information about
  # mu is 0.35 of the uncensored, so standard errors from uncensored
  # replicates would be 0.59 of the right ones.
  x <- rnorm(n)
  right <- survival::Surv(pmin(x, -0.5), as.numeric(x <= -0.5))
  # A detection limit at 0.5 hides 69% from below.
  y <- rnorm(n)
  left <- survival::Surv(pmax(y, 0.5), as.numeric(y > 0.5), type = "left")
  cases <- list(list(s = right, x = x, cut = -0.5, left = FALSE), list(s = left, x = y, cut = 0.5, left = TRUE))
  for (case in cases) {
    f <- bulkem(case$s, 1, family = "normal", max.iters = 2000, epsilon = 1e-10, use.gpu = FALSE, seed = 1)
    want <- censored_normal_se(case$x, case$cut, case$left)
    for (type in c("parametric", "nonparametric")) {
      b <- bootstrap_se(f, case$s, B = 400, type = type, max.iters = 500, use.gpu = FALSE, seed = 2)[[1]]$bootstrap
      expect_equal(b$replicates, 400)
      # 400 replicates estimate a standard error to about 3.5%.
      expect_equal(b$se$mu, unname(want["mu"]), tolerance = 0.15, label = paste(type, "se(mu)"))
      expect_equal(b$se$sigma, unname(want["sigma"]), tolerance = 0.15, label = paste(type, "se(sigma)"))
      expect_gt(b$se$mu, 1.4 * f[[1]]$sigma / sqrt(n))
    }
  }
})

test_that("the LRT takes right-censored data: time-outs over many datasets, and Surv without censoring as plain values", {
  skip_if_not_installed("survival")
  set.seed(6)
  timeout <- function(x, at) survival::Surv(pmin(x, at), as.numeric(x <= at))
  one <- replicate(2, rnorm(200, 5), simplify = FALSE)
  two <- replicate(2, c(rnorm(100, 2), rnorm(100, 7)), simplify = FALSE)
  datasets <- c(lapply(one, timeout, at = 6), lapply(two, timeout, at = 7.5))
  # A two-component fit of one-component data may collapse (counted, with
  # a warning).
  l <- suppressWarnings(bootstrap_lrt(datasets, 1:2, B = 99, family = "normal", use.gpu = FALSE, seed = 1, max.iters = 1000))
  expect_lte(max(l$tests$failed), 3)
  expect_true(all(l$tests$p.value[1:2] > 0.05))
  expect_true(all(l$tests$p.value[3:4] <= 0.02))
  expect_equal(lrt_components(l), c(1L, 1L, 2L, 2L))
  # Uncensored Surv data and a plain vector: the same test, bit for bit.
  x <- rnorm(150)
  lrt <- function(d) suppressWarnings(bootstrap_lrt(d, 1:2, B = 19, family = "normal", use.gpu = FALSE, seed = 2))
  a <- lrt(list(survival::Surv(x, rep(1, 150)), x))
  b <- lrt(list(x, x))
  expect_identical(a$tests, b$tests)
  # The inverse Gaussian family, censored at a time-out, next to an
  # uncensored dataset.
  rt <- c(statmod::rinvgauss(300, 1, 5), statmod::rinvgauss(200, 3, 20))
  l <- bootstrap_lrt(list(timeout(rt, 4), rt), 1:2, B = 19, use.gpu = FALSE, seed = 3, max.iters = 500)
  expect_true(all(l$tests$p.value <= 0.05))
})

test_that("interval-censored data take the nonparametric bootstrap only", {
  skip_if_not_installed("survival")
  set.seed(8)
  x <- rnorm(200)
  lo <- floor(x * 2) / 2
  s <- survival::Surv(lo, lo + 0.5, type = "interval2")
  f <- bulkem(s, 1, family = "normal", use.gpu = FALSE, seed = 1)
  b <- bootstrap_se(f, s, B = 100, use.gpu = FALSE, seed = 2)[[1]]$bootstrap
  expect_equal(b$se$mu, 1 / sqrt(200), tolerance = 0.3)
  expect_error(bootstrap_se(f, s, B = 10, type = "parametric", use.gpu = FALSE), "nonparametric",
               class = "bulkem_error_input")
  expect_error(bootstrap_lrt(s, 1:2, B = 9, family = "normal", use.gpu = FALSE), "one-sided",
               class = "bulkem_error_input")
})
