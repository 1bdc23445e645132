# The gamma, lognormal, Poisson and exponential families (issue 18): each
# against base R's densities, an optim() MLE, mixtools (gamma), and the
# Normal fit on log(x) (lognormal); predict(), the d*/r*mix helpers, data
# checks and model selection.

# Two-component data and the base-R density of each family's component.
family_cases <- list(
  gamma = list(
    sim = function(n) rgammamix(n, c(0.4, 0.6), shape = c(2, 20), rate = c(2, 4)),
    dens = function(x, a, b) stats::dgamma(x, shape = a, rate = b),
    truth = list(alpha = c(0.4, 0.6), shape = c(2, 20), rate = c(2, 4))
  ),
  lognormal = list(
    sim = function(n) rlnormmix(n, c(0.3, 0.7), meanlog = c(0, 2), sdlog = c(0.3, 0.5)),
    dens = function(x, a, b) stats::dlnorm(x, meanlog = a, sdlog = b),
    truth = list(alpha = c(0.3, 0.7), meanlog = c(0, 2), sdlog = c(0.3, 0.5))
  ),
  poisson = list(
    sim = function(n) rpoismix(n, c(0.3, 0.7), lambda = c(2, 12)),
    dens = function(x, a, b) stats::dpois(x, lambda = a),
    truth = list(alpha = c(0.3, 0.7), lambda = c(2, 12))
  ),
  exponential = list(
    sim = function(n) rexpmix(n, c(0.5, 0.5), rate = c(1, 10)),
    dens = function(x, a, b) stats::dexp(x, rate = a),
    truth = list(alpha = c(0.5, 0.5), rate = c(1, 10))
  )
)

# The parameter names of a family, from the core's table.
family_params <- function(family) {
  tab <- bulkem:::em_families_()
  i <- match(family, tab$name)
  c(tab$first[i], if (!is.na(tab$second[i])) tab$second[i])
}

# sum_i log sum_j alpha_j f_j(x_i) with base R densities.
base_loglik <- function(case, params, x) {
  p <- names(params)[-1]
  second <- if (length(p) == 2) params[[p[2]]] else rep(NA_real_, length(params$alpha))
  dens <- sapply(seq_along(params$alpha), function(j) {
    params$alpha[j] * case$dens(x, params[[p[1]]][j], second[j])
  })
  sum(log(rowSums(dens)))
}

fit_params_of <- function(fit, family) fit[c("alpha", family_params(family))]

test_that("each family's reported log-likelihood is the base-R one at its parameters", {
  for (family in names(family_cases)) {
    case <- family_cases[[family]]
    set.seed(11)
    x <- case$sim(800)
    fit <- bulkem(x, family = family, use.gpu = FALSE, seed = 1, epsilon = 1e-10, max.iters = 2000)[[1]]
    expect_true(fit$fit_success, info = family)
    expect_identical(fit$family, family)
    # The fields are alpha and the family's own parameter names.
    expect_true(all(c("alpha", family_params(family), paste0("init_", family_params(family))) %in% names(fit)),
                info = family)
    expect_false(any(c("mu", "scale", "init_NA") %in% names(fit)), info = family)
    ll <- base_loglik(case, fit_params_of(fit, family), x)
    expect_lt(abs(fit$loglik - ll) / abs(ll), 1e-10, label = family)
  }
})

# The negative mixture log-likelihood on unconstrained scales: logit of the
# first weight, log of every positive parameter (meanlog unscaled).
optim_mle <- function(case, family, x, start) {
  p <- family_params(family)
  K <- length(start$alpha)
  free <- function(v, name) if (name == "meanlog") v else log(v)
  back <- function(v, name) if (name == "meanlog") v else exp(v)
  theta0 <- c(stats::qlogis(start$alpha[1]), unlist(lapply(p, function(nm) free(start[[nm]], nm))))
  unpack <- function(theta) {
    a1 <- stats::plogis(theta[1])
    out <- list(alpha = c(a1, 1 - a1))
    for (i in seq_along(p)) out[[p[i]]] <- back(theta[1 + (i - 1) * K + seq_len(K)], p[i])
    out
  }
  nll <- function(theta) {
    v <- -base_loglik(case, unpack(theta), x)
    if (is.finite(v)) v else 1e100
  }
  o <- stats::optim(theta0, nll, method = "BFGS", control = list(maxit = 5000, reltol = 1e-14))
  o <- stats::optim(o$par, nll, method = "Nelder-Mead", control = list(maxit = 20000, reltol = 1e-14))
  o <- stats::optim(o$par, nll, method = "BFGS", control = list(maxit = 5000, reltol = 1e-15))
  -o$value
}

test_that("each family's maximum is at least an optim() MLE's on 3 simulated datasets", {
  for (family in names(family_cases)) {
    case <- family_cases[[family]]
    for (rep in 1:3) {
      set.seed(100 + rep)
      x <- case$sim(400)
      fit <- bulkem(x, family = family, use.gpu = FALSE, seed = rep, epsilon = 1e-12, max.iters = 5000)[[1]]
      best <- optim_mle(case, family, x, case$truth)
      expect_gte(fit$loglik, best - 1e-6, label = paste(family, "dataset", rep))
    }
  }
})

test_that("the gamma fit agrees with mixtools::gammamixEM at convergence", {
  skip_if_not_installed("mixtools")
  skip_if_not(exists("gammamixEM", asNamespace("mixtools")), "mixtools has no gammamixEM")
  set.seed(21)
  x <- rgammamix(600, c(0.4, 0.6), shape = c(2, 20), rate = c(2, 4))
  fit <- bulkem(x, family = "gamma", use.gpu = FALSE, seed = 2, epsilon = 1e-12, max.iters = 5000)[[1]]
  out <- capture.output(ref <- mixtools::gammamixEM(
    x, lambda = fit$alpha, alpha = fit$shape, beta = 1 / fit$rate, k = 2, mom.start = FALSE,
    epsilon = 1e-12, maxit = 10000
  ))
  ord <- order(ref$gamma.pars["alpha", ])
  expect_lt(abs(fit$loglik - ref$loglik) / abs(ref$loglik), 1e-6)
  expect_equal(fit$alpha, unname(ref$lambda[ord]), tolerance = 1e-3)
  expect_equal(fit$shape, unname(ref$gamma.pars["alpha", ord]), tolerance = 1e-3)
  expect_equal(fit$rate, unname(1 / ref$gamma.pars["beta", ord]), tolerance = 1e-3)
  # mixtools' own log-likelihood agrees with base R's at bulkem's parameters.
  expect_gte(fit$loglik, ref$loglik - 1e-6 * abs(ref$loglik))
})

test_that("the lognormal fit is exactly the Normal fit on log(x)", {
  set.seed(31)
  x <- rlnormmix(500, c(0.3, 0.7), meanlog = c(0, 2), sdlog = c(0.3, 0.5))
  ln <- bulkem(x, family = "lognormal", use.gpu = FALSE, seed = 5)[[1]]
  nm <- bulkem(log(x), family = "normal", use.gpu = FALSE, seed = 5)[[1]]
  expect_equal(ln$meanlog, nm$mu, tolerance = 1e-12)
  expect_equal(ln$sdlog, nm$sigma, tolerance = 1e-12)
  expect_equal(ln$alpha, nm$alpha, tolerance = 1e-12)
  expect_identical(ln$num_iterations, nm$num_iterations)
  expect_lt(abs(ln$loglik - (nm$loglik - sum(log(x)))) / abs(ln$loglik), 1e-10)
  # The same from explicit starts.
  ln2 <- bulkem(x, family = "lognormal", use.gpu = FALSE,
                inits = list(alpha = c(0.5, 0.5), meanlog = c(-0.5, 1.5), sdlog = c(1, 1)))[[1]]
  nm2 <- bulkem(log(x), family = "normal", use.gpu = FALSE,
                inits = list(alpha = c(0.5, 0.5), mu = c(-0.5, 1.5), sigma = c(1, 1)))[[1]]
  expect_equal(ln2$meanlog, nm2$mu, tolerance = 1e-12)
  expect_equal(ln2$sdlog, nm2$sigma, tolerance = 1e-12)
  expect_lt(abs(ln2$loglik - (nm2$loglik - sum(log(x)))) / abs(ln2$loglik), 1e-10)
})

test_that("predict() posteriors sum to 1 and are the core's; densities are the mixture's", {
  for (family in names(family_cases)) {
    case <- family_cases[[family]]
    set.seed(41)
    x <- case$sim(300)
    fit <- bulkem(x, family = family, use.gpu = FALSE, seed = 1)[[1]]
    post <- predict(fit, x)
    expect_equal(dim(post), c(300L, 2L))
    expect_equal(unname(rowSums(post)), rep(1, 300), tolerance = 1e-12, info = family)
    p <- fit_params_of(fit, family)
    second <- if (length(p) == 3) p[[3]] else NA_real_
    core <- matrix(bulkem:::mix_posterior_(as.double(x), family, p$alpha, p[[2]], second), ncol = 2)
    expect_equal(unname(post), core, tolerance = 0, info = family)
    expect_identical(predict(fit, x, type = "class"), max.col(post, ties.method = "first"))
    dens <- predict(fit, x[1:20], type = "density")
    base <- rowSums(sapply(1:2, function(j) p$alpha[j] * case$dens(x[1:20], p[[2]][j], second[j])))
    expect_equal(dens, base, tolerance = 1e-12, info = family)
    # df = (1 + parameters per component) K - 1.
    expect_identical(as.integer(attr(logLik(fit), "df")), as.integer((1 + length(p) - 1) * 2 - 1))
    expect_named(coef(fit), paste0(rep(names(p), each = 2), 1:2))
  }
  # Outside the support: density 0 and no posterior.
  set.seed(42)
  g <- bulkem(rgammamix(300, c(0.4, 0.6), c(2, 20), c(2, 4)), family = "gamma", use.gpu = FALSE)[[1]]
  expect_identical(predict(g, -1, type = "density"), 0)
  expect_true(all(is.na(predict(g, -1))))
})

test_that("the d*mix helpers are the base-R mixtures and integrate (sum) to 1", {
  x <- c(0.1, 0.5, 1, 3, 7)
  expect_equal(dgammamix(x, c(0.4, 0.6), c(2, 20), c(2, 4)),
               0.4 * dgamma(x, 2, 2) + 0.6 * dgamma(x, 20, 4), tolerance = 1e-12)
  expect_equal(dlnormmix(x, c(0.3, 0.7), c(0, 2), c(0.3, 0.5), log = TRUE),
               log(0.3 * dlnorm(x, 0, 0.3) + 0.7 * dlnorm(x, 2, 0.5)), tolerance = 1e-12)
  expect_equal(dexpmix(c(0, x), c(0.5, 0.5), c(1, 10)),
               0.5 * dexp(c(0, x), 1) + 0.5 * dexp(c(0, x), 10), tolerance = 1e-12)
  expect_equal(dpoismix(0:30, c(0.3, 0.7), c(2, 12)),
               0.3 * dpois(0:30, 2) + 0.7 * dpois(0:30, 12), tolerance = 1e-12)
  expect_equal(integrate(dgammamix, 0, Inf, alpha = c(0.4, 0.6), shape = c(2, 20), rate = c(2, 4))$value,
               1, tolerance = 1e-6)
  expect_equal(integrate(dlnormmix, 0, Inf, alpha = c(0.3, 0.7), meanlog = c(0, 2), sdlog = c(0.3, 0.5))$value,
               1, tolerance = 1e-6)
  expect_equal(integrate(dexpmix, 0, Inf, alpha = c(0.5, 0.5), rate = c(1, 10))$value, 1, tolerance = 1e-6)
  expect_equal(sum(dpoismix(0:200, c(0.3, 0.7), c(2, 12))), 1, tolerance = 1e-12)
  # Outside the support and missing values.
  expect_identical(dgammamix(c(-1, 0), 1, 2, 1), c(0, 0))
  expect_identical(dpoismix(c(2.5, -1), 1, 3), c(0, 0))
  expect_identical(dexpmix(c(NA, NaN), 1, 1), c(NA, NaN))
  # Invalid parameters are input errors naming the argument.
  expect_error(dgammamix(1, c(0.5, 0.5), c(1, -1), c(1, 1)), "shape", class = "bulkem_error_input")
  expect_error(rpoismix(5, c(0.5, 0.6), c(1, 2)), "sum to 1", class = "bulkem_error_input")
  expect_error(dlnormmix(1, 1, 0, c(1, 2)), "one length", class = "bulkem_error_input")
})

test_that("the r*mix helpers draw with base R's generators under set.seed()", {
  set.seed(3)
  a <- rgammamix(50, c(0.4, 0.6), c(2, 20), c(2, 4))
  set.seed(3)
  b <- rgammamix(50, c(0.4, 0.6), c(2, 20), c(2, 4))
  expect_identical(a, b)
  k <- attr(a, "component")
  expect_true(all(k %in% 1:2))
  set.seed(3)
  sample.int(2, 50, replace = TRUE, prob = c(0.4, 0.6))
  expect_identical(as.numeric(a), rgamma(50, c(2, 20)[k], c(2, 4)[k]))
  p <- rpoismix(200, c(0.3, 0.7), c(2, 12))
  expect_true(all(p == round(p) & p >= 0))
  expect_true(all(rlnormmix(100, 1, 0, 1) > 0))
  expect_length(rexpmix(0, 1, 1), 0)
})

test_that("invalid data for a family are errors that name the problem", {
  set.seed(51)
  x <- rgammamix(100, c(0.4, 0.6), c(2, 20), c(2, 4))
  expect_error(bulkem(c(x, -1), family = "gamma", use.gpu = FALSE), "positive",
               class = "bulkem_error_input")
  p <- rpoismix(100, c(0.3, 0.7), c(2, 12))
  expect_error(bulkem(c(p, 2.5), family = "poisson", use.gpu = FALSE), "whole numbers",
               class = "bulkem_error_input")
  expect_error(bulkem(x, family = "weibull", use.gpu = FALSE), "gamma", class = "bulkem_error_input")
  # inits take the family's parameter names.
  expect_error(bulkem(p, family = "poisson", use.gpu = FALSE, inits = list(alpha = c(0.5, 0.5), mu = c(1, 9))),
               "lambda", class = "bulkem_error_input")
  fit <- bulkem(p, family = "poisson", use.gpu = FALSE, inits = list(alpha = c(0.5, 0.5), lambda = c(1, 9)))[[1]]
  expect_identical(fit$init_lambda, c(1, 9))
  expect_true(fit$fit_success)
  # Only Normal fits convert to mixtools' mixEM.
  g <- bulkem(x, family = "gamma", use.gpu = FALSE)[[1]]
  expect_error(as.mixEM(g, x), "Normal mixtures", class = "bulkem_error_input")
})

test_that("num.components = 1:3 chooses K for gamma mixtures, with family-aware df", {
  set.seed(61)
  d <- replicate(4, rgammamix(400, c(0.4, 0.6), c(2, 40), c(2, 4)), simplify = FALSE)
  fits <- bulkem(d, family = "gamma", num.components = 1:3, use.gpu = FALSE, seed = 1)
  crit <- criteria(fits)
  expect_identical(colnames(crit), c("1", "2", "3"))
  expect_true(all(attr(crit, "chosen") == 2L))
  f <- fits[[1]]
  expect_equal(unname(crit[1, "2"]), -2 * f$loglik + 5 * log(400), tolerance = 1e-10)
  expect_equal(unname(BIC(fits)[1]), -2 * f$loglik + 5 * log(400), tolerance = 1e-10)
  df <- as.data.frame(fits)
  expect_true(all(c("alpha1", "shape1", "shape2", "rate1", "rate2") %in% names(df)))
  expect_identical(colnames(coef(fits)), paste0(rep(c("alpha", "shape", "rate"), each = 2), 1:2))
  expect_output(print(summary(fits)), "gamma")
  # One-parameter families: df = 2K - 1.
  pf <- bulkem(rpoismix(300, c(0.3, 0.7), c(2, 12)), family = "poisson", num.components = 1:3,
               use.gpu = FALSE, seed = 1)
  K <- length(pf[[1]]$alpha)
  expect_equal(unname(BIC(pf)), -2 * pf[[1]]$loglik + (2 * K - 1) * log(300), tolerance = 1e-10)
  expect_equal(unname(criteria(pf)[1, as.character(K)]), unname(BIC(pf)), tolerance = 1e-10)
})

test_that("plots of the new families draw", {
  pdf(NULL)
  on.exit(grDevices::dev.off())
  set.seed(71)
  x <- rgammamix(300, c(0.4, 0.6), c(2, 20), c(2, 4))
  g <- bulkem(x, family = "gamma", use.gpu = FALSE)
  expect_invisible(plot(g[[1]], x))
  expect_invisible(plot(g[[1]], x, log = "x"))
  expect_invisible(plot(g))
  p <- rpoismix(300, c(0.3, 0.7), c(2, 12))
  pf <- bulkem(p, family = "poisson", use.gpu = FALSE)[[1]]
  expect_invisible(plot(pf, p))
  expect_error(plot(pf, p, log = "x"), "continuous", class = "bulkem_error_input")
  e <- rexpmix(300, c(0.5, 0.5), c(1, 10))
  expect_invisible(plot(bulkem(e, family = "exponential", use.gpu = FALSE)[[1]], e))
})
