# hbglm() with lme4 formulas: the same model, with the same draws, as the
# group = / global = shorthand, and a classed error naming what the model
# cannot honour (blocks of correlated and independent terms, correlated
# terms of a second grouping factor, a varying term
# without a population mean, a shared intercept).

formula_data <- function(seed = 3) {
  set.seed(seed)
  d <- data.frame(g = rep(sprintf("g%d", 1:6), each = 15), x = rnorm(90), z = rnorm(90),
                  f = factor(sample(c("a", "b", "c"), 90, TRUE)), e = runif(90, 1, 3),
                  h = rep(1:3, 30))
  b <- rnorm(6, 0.5, 0.4)[as.integer(factor(d$g))]
  d$y <- 1 + b * d$x + 0.3 * d$z + rnorm(90, 0, 0.5)
  d$k <- rpois(90, d$e * exp(0.2 + 0.3 * d$x))
  d
}

short <- function(expr) suppressWarnings(expr, classes = "bulkem_warning_rhat")

test_that("an lme4 formula samples the model of group = and global =, draw for draw", {
  skip_if_not_installed("lme4")
  d <- formula_data()
  run <- function(...) short(hbglm(..., iter = 60, warmup = 30, chains = 2, seed = 9, use.gpu = FALSE))
  same <- function(a, b) {
    expect_identical(dimnames(a$draws), dimnames(b$draws))
    expect_identical(a$draws, b$draws)
  }
  same(run(y ~ x + (1 + x || g), d), run(y ~ x, d, group = "g"))
  same(run(y ~ x + z + (1 | g), d), run(y ~ 1, d, group = "g", global = ~ x + z))
  # A factor keeps its contrasts among the shared terms.
  same(run(y ~ x + f + (1 + x || g), d), run(y ~ x, d, group = ~ g, global = ~ f))
  # (x || g) is (1 | g) + (0 + x | g): the same as two bars.
  same(run(y ~ x + (1 | g) + (0 + x | g), d), run(y ~ x, d, group = "g"))
  # offset() among the population-level terms, for counts.
  same(run(k ~ x + offset(log(e)) + (1 | g), d, family = "poisson"),
       run(k ~ 1, d, group = "g", global = ~ x + offset(log(e)), family = "poisson"))
  fit <- run(y ~ x + (1 + x || g), d)
  expect_identical(fit$formula, y ~ x + (1 + x || g))
  expect_output(print(fit), "(1 + x || g)", fixed = TRUE)
  # predict() finds new data's groups through the formula's grouping factor.
  expect_equal(predict(fit, newdata = d[1:5, ]), predict(run(y ~ x, d, group = "g"), newdata = d[1:5, ]))
})

test_that("what the model cannot honour in an lme4 formula is a classed error saying what to write", {
  skip_if_not_installed("lme4")
  d <- formula_data()
  expect_snapshot(error = TRUE, {
    hbglm(y ~ x + z + (1 + x | g) + (0 + z | g), d)
    hbglm(y ~ x + z + (1 + x + z | g) + (1 + x | h) + (0 + z | h), d)
    hbglm(y ~ 1 + (1 + x || g), d)
    hbglm(y ~ x + (0 + x | g), d)
    hbglm(y ~ x + (1 | factor(h)), d)
    hbglm(y ~ x + (1 | g), d, global = ~ z)
  })
  for (f in list(y ~ x + z + (1 + x | g) + (0 + z | g), y ~ x + z + (1 + x + z | g) + (1 + x | h) + (0 + z | h),
                 y ~ 1 + (1 + x || g), y ~ x + (0 + x | g), y ~ x + (1 | factor(h)))) {
    expect_error(hbglm(f, d, use.gpu = FALSE), class = "bulkem_error_input", info = deparse(f))
  }
  expect_error(hbglm(y ~ x + (1 + x | g), d, prior = hbglm_prior(cov_df = 0.5), use.gpu = FALSE),
               "cov_df", class = "bulkem_error_input")
})

test_that("correlated coefficients (1 + x | g) agree with bayesm::rhierLinearModel", {
  skip_if_not_installed("lme4")
  skip_if_not_installed("bayesm")
  skip_if_not_installed("posterior")
  # The same model in both: sigma held (bayesm: huge prior degrees of
  # freedom around it), Sigma ~ inverse-Wishart, mu nearly flat. bayesm's
  # prior of its mean, N(0, Sigma / A), contributes |Sigma|^(-1/2) as A ->
  # 0, one more degree of freedom than hbglm's N(0, mu_sd^2): hbglm takes
  # df nu + 1 (and the same scale matrix V).
  set.seed(11)
  G <- 15
  d <- sim_random_slopes(G, n = 12, cov = c(1, 0.35, 0.35, 0.25), noise = 0.5)
  nu <- 5; V <- nu * diag(2)
  fit <- hbglm(y ~ x + (1 + x | g), d, iter = 6000, warmup = 1000, chains = 4, seed = 2, use.gpu = FALSE,
               prior = hbglm_prior(mu_sd = 1000, sigma_fixed = 0.5, cov_df = nu + 1, cov_scale = sqrt(nu / (nu + 1))))
  expect_true(fit$correlated)
  expect_true("cor[(Intercept),x]" %in% dimnames(fit$draws)$variable)
  regdata <- lapply(seq_len(G), function(i) list(y = d$y[d$g == i], X = cbind(1, d$x[d$g == i])))
  big <- 1e6
  utils::capture.output(out <- bayesm::rhierLinearModel(
    Data = list(regdata = regdata),
    Prior = list(Deltabar = matrix(0, 1, 2), A = matrix(1e-6), nu.e = big, ssq = rep(0.25, G), nu = nu, V = V),
    Mcmc = list(R = 20000, keep = 1, nprint = 0)
  ))
  keep <- 2001:20000
  s <- summary(fit, pars = "beta")
  bm <- as.vector(t(apply(out$betadraw[, , keep], c(1, 2), mean)))
  bsd <- as.vector(t(apply(out$betadraw[, , keep], c(1, 2), sd)))
  bess <- as.vector(t(apply(out$betadraw[, , keep], c(1, 2), posterior::ess_basic)))
  expect_true(all(abs(s$mean - bm) < 5 * sqrt(s$sd^2 / s$ess_bulk + bsd^2 / bess)))
  # Sigma's entries: hbglm's from tau and cor draw by draw.
  dr <- matrix(fit$draws, ncol = dim(fit$draws)[3], dimnames = list(NULL, dimnames(fit$draws)$variable))
  ours <- cbind(dr[, "tau[(Intercept)]"]^2, dr[, "cor[(Intercept),x]"] * dr[, "tau[(Intercept)]"] * dr[, "tau[x]"],
                dr[, "tau[x]"]^2)
  theirs <- out$Vbetadraw[keep, c(1, 2, 4)]
  for (j in 1:3) {
    se <- sqrt(var(ours[, j]) / posterior::ess_basic(ours[, j]) + var(theirs[, j]) / posterior::ess_basic(theirs[, j]))
    expect_lt(abs(mean(ours[, j]) - mean(theirs[, j])), 5 * se)
  }
})

test_that("VarCorr() of a correlated fit gives lme4's layout, near lmer's estimates at large data", {
  skip_if_not_installed("lme4")
  set.seed(21)
  # sds 1 and 0.5, correlation 0.6
  d <- sim_random_slopes(G = 80, n = 40, cov = c(1, 0.3, 0.3, 0.25), noise = 0.7)
  fit <- hbglm(y ~ x + (1 + x | g), d, iter = 1500, warmup = 500, chains = 2, seed = 3, use.gpu = FALSE)
  vc <- lme4::VarCorr(fit)
  expect_identical(names(vc), c("grp", "var1", "var2", "vcov", "sdcor", "sd"))
  expect_identical(vc$grp, c("g", "g", "g", "Residual"))
  expect_identical(vc$var1, c("(Intercept)", "x", "(Intercept)", NA))
  expect_equal(vc$sdcor[3], mean(fit$draws[, , "cor[(Intercept),x]"]))
  ref <- as.data.frame(lme4::VarCorr(lme4::lmer(y ~ x + (1 + x | g), d)))
  # Different priors, the same data: within a tenth of the estimates
  # (sds) and 0.1 (the correlation).
  expect_lt(max(abs(vc$sdcor[c(1, 2, 4)] / ref$sdcor[c(1, 2, 4)] - 1)), 0.1)
  expect_lt(abs(vc$sdcor[3] - ref$sdcor[3]), 0.1)
  # Independent coefficients: no correlation rows.
  ind <- short(hbglm(y ~ x + (1 + x || g), d, iter = 300, warmup = 150, chains = 1, seed = 3, use.gpu = FALSE))
  expect_identical(nrow(lme4::VarCorr(ind)), 3L)
})

test_that("new groups' coefficients are drawn from the population distribution when asked", {
  skip_if_not_installed("lme4")
  d <- formula_data()
  fit <- short(hbglm(y ~ x + (1 + x | g), d, iter = 600, warmup = 200, chains = 2, seed = 4, use.gpu = FALSE))
  new <- data.frame(g = c("new1", "new1", "g1", "new2"), x = c(0, 1, 0.5, 0))
  expect_error(predict(fit, new), "new.groups", class = "bulkem_error_input")
  set.seed(1)
  p <- predict(fit, new, new.groups = "population", summary = FALSE)
  # A group of the fit keeps its own draws.
  expect_equal(p[, 3], predict(fit, new[3, ], summary = FALSE)[, 1])
  # A new group at x = 0 is mu[(Intercept)] + N(0, tau^2) at each draw, its
  # slope mu[x] + N(0, tau_x^2), correlated as the draw's cor says; two
  # new groups are independent.
  draw <- function(name) as.vector(fit$draws[, , name])
  z0 <- (p[, 1] - draw("mu[(Intercept)]")) / draw("tau[(Intercept)]")
  z1 <- (p[, 2] - p[, 1] - draw("mu[x]")) / draw("tau[x]")
  S <- length(z0)
  for (z in list(z0, z1)) {
    expect_lt(abs(mean(z)), 4 / sqrt(S))
    expect_lt(abs(var(z) - 1), 5 * sqrt(2 / S))
  }
  expect_lt(abs(mean(z0 * z1) - mean(draw("cor[(Intercept),x]"))), 5 / sqrt(S))
  expect_lt(abs(cor(z0, (p[, 4] - draw("mu[(Intercept)]")) / draw("tau[(Intercept)]"))), 5 / sqrt(S))
  # R's random numbers: set.seed() reproduces them; simulate() takes them too.
  set.seed(1)
  expect_identical(predict(fit, new, new.groups = "population", summary = FALSE), p)
  y <- simulate(fit, nsim = 50, seed = 2, newdata = new, new.groups = "population")
  expect_identical(dim(y), c(50L, 4L))
})

test_that("the LKJ prior (cov = \"lkj\"): checked, printed, and near lmer where the inverse-Wishart pulls", {
  skip_if_not_installed("lme4")
  expect_error(hbglm_prior(cov = "wishart"), class = "bulkem_error_input")
  expect_error(hbglm_prior(cov = "lkj", lkj_eta = 0), "lkj_eta", class = "bulkem_error_input")
  expect_output(print(hbglm_prior(cov = "lkj", lkj_eta = 2)), "Omega ~ LKJ(2)", fixed = TRUE)
  expect_output(print(hbglm_prior()), "inverse-Wishart", fixed = TRUE)
  # brms's sd prior: half-t(3, 0, 2.5).
  expect_output(print(hbglm_prior(tau_family = "half-t")), "tau_k   ~ half-t(3, 0, 2.5)", fixed = TRUE)
  expect_output(print(hbglm_prior(sigma_family = "half-t", sigma_df = 5, sigma_scale = 1)), "sigma   ~ half-t(5, 0, 1)", fixed = TRUE)
  expect_error(hbglm_prior(tau_family = "half-t", tau_df = 0), "tau_df", class = "bulkem_error_input")
  # 60 groups with sds 0.5 and 0.3 (correlation 0.6): well below the
  # inverse-Wishart's cov_scale = 1, which pulls them up and the
  # correlation towards 0; LKJ's sds have their own prior.
  set.seed(2)
  d <- sim_random_slopes(G = 60, n = 40, cov = c(0.25, 0.09, 0.09, 0.09), noise = 0.5)
  lkj <- hbglm(y ~ x + (1 + x | g), d, prior = hbglm_prior(cov = "lkj", tau_family = "half-t"), iter = 1500,
               warmup = 500, chains = 2, seed = 1, use.gpu = FALSE)
  iw <- hbglm(y ~ x + (1 + x | g), d, iter = 1500, warmup = 500, chains = 2, seed = 1, use.gpu = FALSE)
  expect_true(lkj$correlated)
  vl <- lme4::VarCorr(lkj)
  vi <- lme4::VarCorr(iw)
  ref <- as.data.frame(lme4::VarCorr(lme4::lmer(y ~ x + (1 + x | g), d)))
  expect_lt(max(abs(vl$sdcor[1:2] / ref$sdcor[1:2] - 1)), 0.1)
  expect_lt(abs(vl$sdcor[3] - ref$sdcor[3]), 0.1)
  expect_lt(abs(vl$sdcor[3] - ref$sdcor[3]), abs(vi$sdcor[3] - ref$sdcor[3]))
  expect_lt(max(summary(lkj, pars = c("tau", "cor"))$rhat), 1.02)
  # A second factor's correlated terms take the same kind of prior.
  d$h <- rep(seq_len(15), length.out = nrow(d))
  two <- short(hbglm(y ~ x + (1 + x | g) + (1 + x | h), d, prior = hbglm_prior(cov = "lkj"), iter = 200, warmup = 100,
                     chains = 1, seed = 1, use.gpu = FALSE))
  expect_true("cor_h[(Intercept),x]" %in% dimnames(two$draws)$variable)
  expect_error(hbglm(y ~ x + (1 + x | g), d, prior = hbglm_prior(cov = "lkj", tau_fixed = 1), use.gpu = FALSE),
               "tau_fixed", class = "bulkem_error_input")
})
