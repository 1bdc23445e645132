# Censored and binned data (survival::Surv datasets): fits equal direct
# maximisation of the censored log-likelihood (optim from the fit, with
# statmod's and stats' CDFs), histograms fit as interval-censored counts,
# uncensored Surv data fit as plain vectors, and what cannot be fitted is
# refused.

tight <- list(epsilon = 1e-11, max.iters = 5000, use.gpu = FALSE, seed = 1)

test_that("right-censored inverse Gaussian and Normal fits are the censored maximum likelihood", {
  skip_if_not_installed("survival")
  set.seed(1)
  x <- as.numeric(rinvgaussmix(1000, c(0.4, 0.6), c(1, 3), c(10, 8)))
  cut <- 4
  f <- do.call(bulkem, c(list(survival::Surv(pmin(x, cut), as.numeric(x <= cut)), 2), tight))[[1]]
  expect_identical(f$censored, sum(x > cut))
  expect_equal(f$n, 1000)
  ll <- function(v) {
    a <- plogis(v[1]); mu <- exp(v[2:3]); la <- exp(v[4:5])
    dens <- a * statmod::dinvgauss(x[x <= cut], mu[1], la[1]) + (1 - a) * statmod::dinvgauss(x[x <= cut], mu[2], la[2])
    surv <- a * statmod::pinvgauss(cut, mu[1], la[1], lower.tail = FALSE) +
      (1 - a) * statmod::pinvgauss(cut, mu[2], la[2], lower.tail = FALSE)
    sum(log(dens)) + sum(x > cut) * log(surv)
  }
  start <- c(qlogis(f$alpha[1]), log(f$mu), log(f$lambda))
  expect_equal(f$loglik, ll(start), tolerance = 1e-10)
  expect_lt(optim_gain(ll, start), 1e-6)

  # Normal, right- and left-censored and interval-censored at once.
  y <- c(rnorm(300, 0, 1), rnorm(300, 4, 1.5))
  lo <- ifelse(y > 5, 5, ifelse(y < -1, -Inf, ifelse(y > 1 & y < 2, 1, y)))
  hi <- ifelse(y > 5, Inf, ifelse(y < -1, -1, ifelse(y > 1 & y < 2, 2, y)))
  s <- survival::Surv(ifelse(is.finite(lo), lo, NA), ifelse(is.finite(hi), hi, NA), type = "interval2")
  g <- do.call(bulkem, c(list(s, 2, family = "normal"), tight))[[1]]
  expect_identical(g$censored, sum(lo != hi))
  lln <- function(v) {
    a <- plogis(v[1]); m <- v[2:3]; sd <- exp(v[4:5])
    cdf <- function(q) a * pnorm(q, m[1], sd[1]) + (1 - a) * pnorm(q, m[2], sd[2])
    ex <- lo == hi
    sum(log(a * dnorm(y[ex], m[1], sd[1]) + (1 - a) * dnorm(y[ex], m[2], sd[2]))) +
      sum(log(cdf(hi[!ex]) - cdf(lo[!ex])))
  }
  start <- c(qlogis(g$alpha[1]), g$mu, log(g$sigma))
  expect_equal(g$loglik, lln(start), tolerance = 1e-10)
  expect_lt(optim_gain(lln, start), 1e-6)
  expect_output(print(g), "censored")
})

test_that("censored gamma and Poisson fits are the censored maximum likelihood", {
  skip_if_not_installed("survival")
  set.seed(2)
  # Gamma: right-censored at a time-out and interval-censored in bins.
  x <- c(rgamma(400, 2, 2), rgamma(600, 9, 1.5))
  cut <- 8
  lo <- ifelse(x > cut, cut, ifelse(x < 1, floor(x * 4) / 4, x))
  hi <- ifelse(x > cut, Inf, ifelse(x < 1, floor(x * 4) / 4 + 0.25, x))
  s <- survival::Surv(lo, ifelse(is.finite(hi), hi, NA), type = "interval2")
  f <- do.call(bulkem, c(list(s, 2, family = "gamma"), tight))[[1]]
  expect_identical(f$censored, sum(lo != hi))
  llg <- function(v) {
    a <- plogis(v[1]); sh <- exp(v[2:3]); r <- exp(v[4:5])
    cdf <- function(q) a * pgamma(q, sh[1], r[1]) + (1 - a) * pgamma(q, sh[2], r[2])
    ex <- lo == hi
    sum(log(a * dgamma(x[ex], sh[1], r[1]) + (1 - a) * dgamma(x[ex], sh[2], r[2]))) +
      sum(log(cdf(hi[!ex]) - cdf(lo[!ex])))
  }
  start <- c(qlogis(f$alpha[1]), log(f$shape), log(f$rate))
  expect_equal(f$loglik, llg(start), tolerance = 1e-10)
  expect_lt(optim_gain(llg, start), 1e-6)

  # Poisson counts: right-censored (more than 12) and binned (0-2, 3-5).
  k <- c(rpois(300, 1.5), rpois(500, 9))
  lo <- ifelse(k > 12, 12, ifelse(k <= 2, -1, ifelse(k <= 5, 2, k)))
  hi <- ifelse(k > 12, Inf, ifelse(k <= 2, 2, ifelse(k <= 5, 5, k)))
  sp <- survival::Surv(lo, ifelse(is.finite(hi), hi, NA), type = "interval2")
  p <- do.call(bulkem, c(list(sp, 2, family = "poisson"), tight))[[1]]
  expect_identical(p$censored, sum(lo != hi))
  llp <- function(v) {
    a <- plogis(v[1]); la <- exp(v[2:3])
    cdf <- function(q) a * ppois(q, la[1]) + (1 - a) * ppois(q, la[2])
    ex <- lo == hi
    sum(log(a * dpois(k[ex], la[1]) + (1 - a) * dpois(k[ex], la[2]))) + sum(log(cdf(hi[!ex]) - cdf(lo[!ex])))
  }
  start <- c(qlogis(p$alpha[1]), log(p$lambda))
  expect_equal(p$loglik, llp(start), tolerance = 1e-10)
  expect_lt(optim_gain(llp, start), 1e-6)
})

test_that("a histogram fits as interval-censored counts", {
  skip_if_not_installed("survival")
  set.seed(2)
  x <- as.numeric(rinvgaussmix(4000, c(0.3, 0.7), c(1, 3), c(30, 5)))
  breaks <- c(seq(0, 10, by = 0.25), Inf)
  counts <- as.numeric(table(cut(x, breaks)))
  used <- counts > 0
  lower <- breaks[-length(breaks)][used]
  upper <- breaks[-1][used]
  h <- do.call(bulkem, c(list(survival::Surv(lower, ifelse(is.finite(upper), upper, NA), type = "interval2"), 2,
                                weights = counts[used]), tight))[[1]]
  expect_equal(nobs(h), 4000)
  ll <- function(v) {
    a <- plogis(v[1]); mu <- exp(v[2:3]); la <- exp(v[4:5])
    cdf <- function(q) a * statmod::pinvgauss(q, mu[1], la[1]) + (1 - a) * statmod::pinvgauss(q, mu[2], la[2])
    sum(counts[used] * log(cdf(upper) - cdf(lower)))
  }
  start <- c(qlogis(h$alpha[1]), log(h$mu), log(h$lambda))
  expect_equal(h$loglik, ll(start), tolerance = 1e-8)
  expect_lt(optim_gain(ll, start), 1e-6)
  raw <- bulkem(x, 2, use.gpu = FALSE, seed = 1)[[1]]
  expect_equal(h$mu, raw$mu, tolerance = 0.05)
})

test_that("Surv data without censoring fit as plain values, mixed with vectors", {
  skip_if_not_installed("survival")
  set.seed(3)
  x <- as.numeric(rinvgaussmix(400, c(0.5, 0.5), c(1, 3), c(20, 20)))
  a <- bulkem(list(survival::Surv(x, rep(1, 400)), x), 2, use.gpu = FALSE, seed = 1)
  b <- bulkem(list(x, x), 2, use.gpu = FALSE, seed = 1)
  expect_identical(fits_only(a), fits_only(b))
  expect_null(a[[1]]$censored)
})

test_that("keep.posterior and ICL take a censored observation's interval", {
  skip_if_not_installed("survival")
  set.seed(4)
  x <- as.numeric(rinvgaussmix(400, c(0.4, 0.6), c(1, 3), c(20, 8)))
  s <- survival::Surv(pmin(x, 3.5), as.numeric(x <= 3.5))
  f <- bulkem(s, 2, keep.posterior = TRUE, max.iters = 2000, use.gpu = FALSE, seed = 1)[[1]]
  z <- f$posterior
  expect_equal(dim(z), c(400L, 2L))
  expect_equal(rowSums(z), rep(1, 400), tolerance = 1e-12)
  # A censored row: alpha_j P_j(X > 3.5), normalised; an exact row: densities.
  up <- f$alpha * vapply(1:2, function(j) statmod::pinvgauss(3.5, f$mu[j], f$lambda[j], lower.tail = FALSE), 0)
  cens <- which(x > 3.5)
  expect_true(length(cens) > 0)
  expect_equal(unname(z[cens[1], ]), up / sum(up), tolerance = 1e-8)
  ex <- which(x <= 3.5)[1]
  dens <- f$alpha * statmod::dinvgauss(x[ex], f$mu, f$lambda)
  expect_equal(unname(z[ex, ]), dens / sum(dens), tolerance = 1e-8)
  # ICL = BIC - 2 sum_i log max_j z_ij.
  icl <- bulkem(s, 1:2, criterion = "ICL", max.iters = 2000, use.gpu = FALSE, seed = 1)
  bic <- bulkem(s, 1:2, criterion = "BIC", max.iters = 2000, use.gpu = FALSE, seed = 1)
  expect_equal(attr(icl, "criteria")[1, 2], attr(bic, "criteria")[1, 2] - 2 * sum(log(apply(z, 1, max))), tolerance = 1e-8)
})

test_that("censored data that cannot be fitted are refused", {
  skip_if_not_installed("survival")
  s <- survival::Surv(c(1, 2, 3, 4, 5, 6), c(1, 1, 0, 1, 1, 0))
  # A count censored in (2.2, 2.8], which holds none.
  expect_error(bulkem(survival::Surv(c(1, 2, 2.2, 4), c(1, 2, 2.8, 4), type = "interval2"), 1, family = "poisson",
                      use.gpu = FALSE), "hold a count", class = "bulkem_error_input")
  expect_error(bootstrap_lrt(survival::Surv(c(1, 2, 3, 4), c(1, 2.5, 3.5, 4), type = "interval2"), 1:2, B = 9,
                             family = "normal", use.gpu = FALSE), "one-sided", class = "bulkem_error_input")
  expect_error(bulkem(survival::Surv(c(0, 0), c(1, 2), c(1, 1)), 1, use.gpu = FALSE), "counting",
               class = "bulkem_error_input")
  f <- bulkem(survival::Surv(c(rnorm(50, 5), 9), c(rep(1, 50), 0)), 1, family = "normal", use.gpu = FALSE)
  expect_error(as.mixEM(f[[1]], 1:51), "censored", class = "bulkem_error")
})
