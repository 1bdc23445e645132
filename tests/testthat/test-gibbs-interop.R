# hbglm fits with the packages users already use: posterior's draws
# formats, coda, loo; and predict(), fitted(), residuals(), simulate(),
# log_lik() checked against hand computations from the draws.

# Short runs rightly warn that the chains have not mixed; these tests are
# about something else.
unmixed_ok <- function(expr) suppressWarnings(expr, classes = "bulkem_warning_rhat")

interop_data <- function(G = 5, n = 14, seed = 1) {
  set.seed(seed)
  d <- data.frame(store = rep(sprintf("s%02d", seq_len(G)), each = n), price = rnorm(G * n),
                  promo = rbinom(G * n, 1, 0.3), o = runif(G * n, -0.5, 0.5),
                  kind = factor(sample(c("a", "b", "c"), G * n, replace = TRUE)))
  g <- as.integer(factor(d$store))
  eta <- rnorm(G, 1, 0.5)[g] + rnorm(G, -0.5, 0.3)[g] * d$price
  d$y <- eta + 0.4 * d$promo + d$o + rnorm(G * n, 0, 0.5)
  d$m <- rpois(G * n, 4) + 1
  d$s <- rbinom(G * n, d$m, plogis(eta - 1))
  d$t <- runif(G * n, 1, 5)
  d$cnt <- rpois(G * n, d$t * exp(eta - 1))
  d
}

# Linear predictors (draws x rows) from the draws array, by name, one row
# at a time: the reference for predict() and friends.
hand_eta <- function(fit, d, x, z = NULL, offset = 0) {
  dr <- fit$draws
  S <- prod(dim(dr)[1:2])
  flat <- function(name) as.vector(dr[, , name])
  groups <- as.character(d$store)
  out <- matrix(0, S, nrow(d))
  for (i in seq_len(nrow(d))) {
    e <- rep(if (length(offset) == 1) offset else offset[i], S)
    for (k in colnames(x)) e <- e + flat(paste0("beta[", groups[i], ",", k, "]")) * x[i, k]
    for (k in colnames(z)) e <- e + flat(paste0("gamma[", k, "]")) * z[i, k]
    out[, i] <- e
  }
  out
}

gaussian_fit <- function(d, chains = 3, ...) {
  unmixed_ok(hbglm(y ~ price + offset(o), d, group = "store", global = ~ promo, iter = 400, warmup = 100,
                   chains = chains, seed = 4, use.gpu = FALSE, ...))
}

test_that("every posterior draws format gives the draws array's variables and summaries", {
  skip_if_not_installed("posterior")
  d <- interop_data()
  fit <- gaussian_fit(d)
  vars <- dimnames(fit$draws)[[3]]
  a <- posterior::as_draws_array(fit)
  measures <- c("mean", "sd", "rhat", "ess_bulk", "ess_tail")
  ref <- posterior::summarise_draws(a, measures)
  expect_equal(ref$variable, vars)
  expect_identical(posterior::as_draws(fit), a)
  for (conv in c("as_draws_df", "as_draws_matrix", "as_draws_list")) {
    x <- getExportedValue("posterior", conv)(fit)
    expect_s3_class(x, sub("as_", "", conv))
    expect_equal(posterior::variables(x), vars, info = conv)
    expect_equal(posterior::nchains(x), 3, info = conv)
    expect_equal(posterior::niterations(x), 300, info = conv)
    s <- posterior::summarise_draws(x, measures)
    expect_equal(as.data.frame(s), as.data.frame(ref), tolerance = 1e-12, info = conv)
  }
  # Chain and iteration of each draw, as the array has them.
  df <- posterior::as_draws_df(fit)
  expect_equal(df[["sigma"]][df$.chain == 2 & df$.iteration == 7], fit$draws[7, 2, "sigma"], ignore_attr = TRUE)

  r <- posterior::as_draws_rvars(fit)
  expect_s3_class(r, "draws_rvars")
  expect_named(r, c("beta", "mu", "tau", "gamma", "sigma"))
  expect_equal(dim(r$beta), c(5, 2))
  expect_equal(dimnames(r$beta), list(sprintf("s%02d", 1:5), c("(Intercept)", "price")))
  expect_equal(as.vector(posterior::draws_of(r$beta)[, "s03", "price"]), as.vector(fit$draws[, , "beta[s03,price]"]))
  expect_equal(posterior::nchains(r), 3)
  sr <- posterior::summarise_draws(r, measures)
  # posterior names a block of one element (gamma[promo]) by the block.
  sr$variable[sr$variable == "gamma"] <- "gamma[promo]"
  sr <- sr[match(vars, sr$variable), ]
  expect_equal(sr$variable, vars)
  expect_equal(as.data.frame(sr)[measures], as.data.frame(ref)[measures], tolerance = 1e-12, ignore_attr = TRUE)
})

test_that("as.mcmc() gives the chain of a one-chain fit and refuses several, as coda does", {
  skip_if_not_installed("coda")
  skip_if_not_installed("posterior")
  d <- interop_data()
  one <- unmixed_ok(hbglm(y ~ price, d, group = "store", iter = 1500, warmup = 500, chains = 1, seed = 2,
                          use.gpu = FALSE))
  m <- coda::as.mcmc(one)
  expect_true(coda::is.mcmc(m))
  expect_equal(coda::mcpar(m), c(501, 1500, 1))
  expect_equal(unname(as.matrix(m)), unname(one$draws[, 1, ]))
  expect_equal(colnames(m), dimnames(one$draws)[[3]])
  expect_identical(m, coda::as.mcmc.list(one)[[1]])
  # coda's spectral ESS and posterior's autocorrelation ESS estimate the
  # same quantity: within a factor 5/3 of each other for every parameter.
  ratio <- coda::effectiveSize(m) / apply(one$draws, 3, posterior::ess_basic, split = FALSE)
  expect_true(all(ratio > 0.6 & ratio < 5 / 3), info = paste(round(ratio, 2), collapse = " "))

  fit <- unmixed_ok(hbglm(y ~ price, d, group = "store", iter = 1500, warmup = 500, chains = 3, thin = 2,
                          seed = 2, use.gpu = FALSE))
  err <- expect_error(coda::as.mcmc(fit), class = "bulkem_error_input")
  expect_match(conditionMessage(err), "3 chains")
  expect_match(conditionMessage(err), "as.mcmc.list", fixed = TRUE)
  ml <- coda::as.mcmc.list(fit)
  expect_equal(coda::nchain(ml), 3)
  expect_equal(coda::mcpar(ml[[3]]), c(502, 1500, 2))
  ratio <- coda::effectiveSize(ml) / apply(fit$draws, 3, posterior::ess_basic)
  expect_true(all(ratio > 0.6 & ratio < 5 / 3), info = paste(round(ratio, 2), collapse = " "))
  # posterior reads coda's object as the same draws.
  expect_equal(unname(unclass(posterior::as_draws_array(ml))), unname(unclass(posterior::as_draws_array(fit))))
})

test_that("predict() and fitted() of a gaussian fit are the draws' linear predictors", {
  d <- interop_data()
  fit <- gaussian_fit(d)
  eta <- hand_eta(fit, d, cbind("(Intercept)" = 1, price = d$price), cbind(promo = d$promo), d$o)
  expect_equal(unname(predict(fit)), colMeans(eta), tolerance = 1e-12)
  expect_equal(names(predict(fit)), rownames(d))
  expect_identical(fitted(fit), predict(fit, type = "response"))
  expect_equal(fitted(fit), predict(fit))
  # From coef(): a linear predictor's posterior mean is that of the means.
  cf <- coef(fit)[d$store, ]
  gamma <- mean(fit$draws[, , "gamma[promo]"])
  expect_equal(unname(predict(fit)), unname(cf[, 1] + cf[, 2] * d$price + gamma * d$promo + d$o), tolerance = 1e-10)
  # Intervals: quantiles of the draws.
  ci <- predict(fit, interval = "credible", level = 0.9)
  expect_equal(colnames(ci), c("fit", "lwr", "upr"))
  expect_equal(unname(ci[, "lwr"]), unname(apply(eta, 2, quantile, 0.05)), tolerance = 1e-12)
  expect_equal(unname(ci[, "upr"]), unname(apply(eta, 2, quantile, 0.95)), tolerance = 1e-12)
  all_draws <- predict(fit, summary = FALSE)
  expect_equal(dim(all_draws), c(900, nrow(d)))
  expect_equal(unname(all_draws), eta, tolerance = 1e-12)
  # newdata: the same rows give the same values; a shuffled subset, theirs.
  expect_equal(predict(fit, newdata = d), predict(fit), tolerance = 1e-12)
  rows <- c(40, 3, 17)
  expect_equal(predict(fit, newdata = d[rows, ], interval = "credible"),
               predict(fit, interval = "credible")[as.character(rows), ], tolerance = 1e-12)
  # Residuals: response minus fitted; Pearson over the posterior mean sd.
  expect_equal(residuals(fit), d$y - fitted(fit), ignore_attr = TRUE)
  expect_equal(unname(residuals(fit, type = "pearson")),
               unname((d$y - fitted(fit)) / sqrt(mean(fit$draws[, , "sigma"]^2))))
})

test_that("predict() rebuilds factors, offsets and groups of new data as the fit had them", {
  d <- interop_data()
  fit <- unmixed_ok(hbglm(cnt ~ price + kind, d, group = "store", family = "poisson", offset = log(t),
                          iter = 300, warmup = 100, chains = 2, seed = 5, use.gpu = FALSE))
  x <- model.matrix(~ price + kind, d)
  eta <- hand_eta(fit, d, x, offset = log(d$t))
  expect_equal(unname(predict(fit)), colMeans(eta), tolerance = 1e-12)
  expect_equal(unname(predict(fit, type = "response")), colMeans(exp(eta)), tolerance = 1e-12)
  # One row, a factor with one level present: the fit's levels and contrasts.
  new <- d[d$kind == "c", ][1, ]
  new$kind <- factor("c")
  expect_equal(unname(predict(fit, new)), unname(predict(fit)[rownames(new)]), tolerance = 1e-12)
  # The offset argument is evaluated in newdata.
  new$t <- new$t * 2
  expect_equal(unname(predict(fit, new)), unname(predict(fit)[rownames(new)]) + log(2), tolerance = 1e-12)

  # Groups given as a vector: newdata needs `group =`.
  fv <- unmixed_ok(hbglm(y ~ price, d, group = d$store, iter = 200, warmup = 100, chains = 1, seed = 1,
                         use.gpu = FALSE))
  expect_error(predict(fv, d[1:2, ]), class = "bulkem_error_input", regexp = "group")
  expect_equal(predict(fv, d[1:2, ], group = d$store[1:2]), predict(fv)[1:2], tolerance = 1e-12)
  # Group as a formula.
  ff <- unmixed_ok(hbglm(y ~ price, d, group = ~ store, iter = 200, warmup = 100, chains = 1, seed = 1,
                         use.gpu = FALSE))
  expect_equal(predict(ff, d[5:6, ]), predict(ff)[5:6], tolerance = 1e-12)
})

test_that("predict() refuses new groups, missing variables and unknown arguments, saying why", {
  d <- interop_data()
  fit <- gaussian_fit(d, chains = 1)
  new <- d[1:2, ]
  new$store <- c("s01", "s99")
  err <- expect_error(predict(fit, new), class = "bulkem_error_input")
  expect_match(conditionMessage(err), "s99")
  expect_match(conditionMessage(err), "not estimated")
  expect_error(predict(fit, d[1:2, c("store", "promo", "o")]), class = "bulkem_error_input", regexp = "price")
  expect_error(predict(fit, d[1:2, c("store", "price", "o")]), class = "bulkem_error_input", regexp = "promo")
  # Taken from `data`: not found elsewhere either.
  price <- 1:2
  expect_error(predict(fit, d[1:2, c("store", "promo", "o")]), class = "bulkem_error_input", regexp = "price")
  na <- d[1:3, ]
  na$price[2] <- NA
  expect_error(predict(fit, na), class = "bulkem_error_input", regexp = "row 2")
  # A column of NA only (logical): still the missing value, not a design of other columns.
  expect_error(predict(fit, transform(d[1, ], price = NA)), class = "bulkem_error_input", regexp = "missing values in row 1")
  expect_error(predict(fit, transform(d[1:2, ], price = c("1", "2"))), class = "bulkem_error_input", regexp = "type")
  expect_error(predict(fit, se.fit = TRUE), class = "bulkem_error_input", regexp = "se.fit")
  expect_error(predict(fit, type = "terms"), class = "bulkem_error_input")
  expect_error(predict(fit, interval = "credible", level = 1), class = "bulkem_error_input")
  expect_error(predict(fit, newdata = as.matrix(d)), class = "bulkem_error_input")
  expect_error(predict(fit, group = "s01"), class = "bulkem_error_input")
  expect_error(fitted(fit, 1), class = "bulkem_error_input")
  # A fit saved by a version that did not keep its data.
  old <- fit
  old$model <- NULL
  expect_error(fitted(old), class = "bulkem_error_input", regexp = "older version")
  expect_error(residuals(fit, type = "deviance"), class = "bulkem_error_input")
  # log_lik() of new data needs the response.
  expect_error(log_lik(fit, d[1:2, c("store", "price", "promo", "o")]), class = "bulkem_error_input", regexp = "y.*missing")
})

test_that("a binomial fit with trials: fitted probabilities, residuals and log-likelihood by hand", {
  d <- interop_data()
  fit <- unmixed_ok(hbglm(cbind(s, m - s) ~ price, d, group = "store", family = "binomial", iter = 400,
                          warmup = 100, chains = 2, seed = 6, use.gpu = FALSE))
  eta <- hand_eta(fit, d, cbind("(Intercept)" = 1, price = d$price))
  p <- plogis(eta)
  expect_equal(unname(fitted(fit)), colMeans(p), tolerance = 1e-12)
  expect_equal(unname(predict(fit)), colMeans(eta), tolerance = 1e-12)
  expect_equal(unname(residuals(fit)), d$s / d$m - colMeans(p), tolerance = 1e-12)
  expect_equal(unname(residuals(fit, type = "pearson")),
               (d$s / d$m - colMeans(p)) / sqrt(colMeans(p * (1 - p)) / d$m), tolerance = 1e-12)
  ll <- log_lik(fit)
  expect_equal(unname(ll), dbinom(rep(d$s, each = nrow(p)), rep(d$m, each = nrow(p)), p, log = TRUE),
               tolerance = 1e-10, ignore_attr = TRUE)
  expect_equal(log_lik(fit, d[c(9, 2), ]), ll[, c(9, 2)], tolerance = 1e-12)
  # Simulated successes lie in 0..trials, their mean near trials x fitted.
  sim <- simulate(fit, seed = 1)
  expect_equal(dim(sim), dim(p))
  expect_true(all(sim >= 0 & sim <= rep(d$m, each = nrow(sim)) & sim == round(sim)))
  se <- sqrt(apply(sim, 2, var) / nrow(sim))
  expect_true(all(abs(colMeans(sim) - d$m * fitted(fit)) < 5 * se + 1e-12))
  # New rows need the response for their trials.
  expect_error(simulate(fit, newdata = d[1:2, c("store", "price")]), class = "bulkem_error_input",
               regexp = "trials")
  expect_equal(dim(simulate(fit, nsim = 5, newdata = d[1:2, ])), c(5, 2))
})

test_that("simulate() gives posterior predictive draws, reproducibly", {
  d <- interop_data()
  fit <- gaussian_fit(d)
  set.seed(10)
  first <- runif(1)
  set.seed(10)
  sim <- simulate(fit)
  set.seed(10)
  expect_identical(simulate(fit), sim)
  expect_equal(dim(sim), c(900, nrow(d)))
  expect_equal(colnames(sim), rownames(d))
  expect_equal(attr(sim, "draws"), 1:900)
  # A seed is used and R's random state restored, as stats::simulate().
  set.seed(10)
  a <- simulate(fit, nsim = 50, seed = 3)
  expect_identical(runif(1), first)
  expect_identical(simulate(fit, nsim = 50, seed = 3), a)
  expect_equal(dim(a), c(50, nrow(d)))
  expect_equal(length(unique(attr(a, "draws"))), 50)
  # Draw s, observation i: N(eta[s, i], sigma[s]^2), so the mean is the
  # fitted value and the variance sigma^2 plus the linear predictor's.
  eta <- hand_eta(fit, d, cbind("(Intercept)" = 1, price = d$price), cbind(promo = d$promo), d$o)
  z <- (colMeans(sim) - fitted(fit)) / sqrt(apply(sim, 2, var) / nrow(sim))
  expect_true(all(abs(z) < 5))
  expect_equal(mean(apply(sim, 2, var)), mean(fit$draws[, , "sigma"]^2) + mean(apply(eta, 2, var)), tolerance = 0.1)
  expect_error(simulate(fit, nsim = 901), class = "bulkem_error_input", regexp = "at most")
  expect_error(simulate(fit, nsim = 0), class = "bulkem_error_input")
  # Poisson: counts.
  fp <- unmixed_ok(hbglm(cnt ~ price + offset(log(t)), d, group = "store", family = "poisson", iter = 300,
                         warmup = 100, chains = 2, seed = 5, use.gpu = FALSE))
  sp <- simulate(fp, nsim = 300, seed = 2)
  expect_true(all(sp >= 0 & sp == round(sp)))
  z <- (colMeans(sp) - fitted(fp)) / sqrt(pmax(apply(sp, 2, var), 1e-3) / nrow(sp))
  expect_true(all(abs(z) < 5))
})

test_that("log_lik() is the pointwise log density, and loo::loo() takes it", {
  skip_if_not_installed("loo")
  # Enough rows per group for reliable Pareto-smoothed weights (k < 0.7).
  d <- interop_data(n = 40)
  fit <- gaussian_fit(d)
  ll <- log_lik(fit)
  eta <- hand_eta(fit, d, cbind("(Intercept)" = 1, price = d$price), cbind(promo = d$promo), d$o)
  sigma <- as.vector(fit$draws[, , "sigma"])
  expect_equal(dim(ll), c(900, nrow(d)))
  expect_equal(as.vector(ll), dnorm(rep(d$y, each = 900), eta, sigma, log = TRUE), tolerance = 1e-12)
  expect_equal(log_lik(fit, d), ll, tolerance = 1e-12)
  fp <- unmixed_ok(hbglm(cnt ~ price + offset(log(t)), d, group = "store", family = "poisson", iter = 300,
                         warmup = 100, chains = 2, seed = 5, use.gpu = FALSE))
  etap <- hand_eta(fp, d, cbind("(Intercept)" = 1, price = d$price), offset = log(d$t))
  expect_equal(as.vector(log_lik(fp)), dpois(rep(d$cnt, each = nrow(etap)), exp(etap), log = TRUE), tolerance = 1e-10)

  chain <- rep(seq_len(fit$chains), each = dim(fit$draws)[1])
  r_eff <- loo::relative_eff(exp(ll), chain_id = chain)
  lo <- loo::loo(ll, r_eff = r_eff)
  expect_s3_class(lo, "psis_loo")
  # Brute force from the matrix: lpd_i = log mean_s exp(ll[s, i]), and
  # loo's p_loo is lpd - elpd_loo observation by observation.
  lpd <- apply(ll, 2, function(v) log(mean(exp(v))))
  expect_equal(lo$pointwise[, "elpd_loo"] + lo$pointwise[, "p_loo"], lpd, tolerance = 1e-10, ignore_attr = TRUE)
  # elpd_loo: Pareto-smoothed importance sampling is close to plain
  # importance sampling (log of the harmonic mean of the likelihood).
  is_loo <- apply(ll, 2, function(v) -log(mean(exp(-v))))
  expect_equal(lo$estimates["elpd_loo", "Estimate"], sum(is_loo), tolerance = 0.02)
  expect_equal(lo$estimates["elpd_loo", "Estimate"], sum(lo$pointwise[, "elpd_loo"]))
  # WAIC is a closed form of the matrix.
  w <- suppressWarnings(loo::waic(ll))
  expect_equal(w$estimates["elpd_waic", "Estimate"], sum(lpd) - sum(apply(ll, 2, var)), tolerance = 1e-10)
  # loo(fit): the same, with the chains of the draws.
  expect_equal(loo::loo(fit)$estimates, lo$estimates, tolerance = 1e-8)
  # (A short poisson run: loo rightly warns of some Pareto k above 0.5;
  # the point here is that both routes give the same numbers.)
  suppressWarnings({
    by_fit <- loo::loo(fp)
    by_matrix <- loo::loo(log_lik(fp), r_eff = loo::relative_eff(exp(log_lik(fp)), chain_id = rep(1:2, each = 200)))
  })
  expect_equal(by_fit$estimates, by_matrix$estimates, tolerance = 1e-8)
})

test_that("draws x observations matrices that cannot fit in memory are a memory error", {
  d <- interop_data()
  fit <- gaussian_fit(d, chains = 1)
  small <- predict(fit)
  old <- Sys.getenv("BULKEM_MEMORY_LIMIT", NA)
  on.exit(if (is.na(old)) Sys.unsetenv("BULKEM_MEMORY_LIMIT") else Sys.setenv(BULKEM_MEMORY_LIMIT = old))
  Sys.setenv(BULKEM_MEMORY_LIMIT = 1e5)
  for (cl in list(quote(log_lik(fit)), quote(simulate(fit)), quote(predict(fit, summary = FALSE)))) {
    err <- expect_error(eval(cl), class = "bulkem_error_memory", info = deparse(cl))
    expect_match(conditionMessage(err), "300 draws x 70 observations")
  }
  # The summaries work in blocks: still available.
  expect_equal(predict(fit), small)
})

test_that("posterior_linpred, posterior_epred and posterior_predict are predict's and simulate's draws", {
  set.seed(6)
  d <- data.frame(g = rep(1:4, each = 15), x = rnorm(60))
  d$y <- rpois(60, exp(0.5 + 0.3 * d$x))
  fit <- unmixed_ok(hbglm(y ~ x, d, group = "g", family = "poisson", iter = 400, warmup = 200, chains = 2,
                          seed = 3, use.gpu = FALSE))
  expect_identical(posterior_linpred(fit), predict(fit, summary = FALSE))
  expect_identical(posterior_linpred(fit, transform = TRUE), predict(fit, type = "response", summary = FALSE))
  expect_identical(posterior_epred(fit), predict(fit, type = "response", summary = FALSE))
  new <- data.frame(g = c(2, 9), x = c(0, 1))
  expect_identical(dim(posterior_epred(fit, new, new.groups = "population")), c(400L, 2L))
  expect_error(posterior_epred(fit, new), class = "bulkem_error_input")
  # A subset of the draws: those rows of the whole matrix.
  set.seed(1)
  sub <- posterior_epred(fit, draws = 50)
  set.seed(1)
  which <- sort(sample.int(400, 50))
  expect_identical(sub, posterior_epred(fit)[which, ])
  expect_identical(posterior_predict(fit, draws = 30, seed = 2), simulate(fit, nsim = 30, seed = 2))
  expect_error(posterior_predict(fit, draws = 401), "at most the number of kept draws")
  expect_error(posterior_epred(fit, draws = 0), class = "bulkem_error_input")
  expect_error(posterior_epred(fit, ndraws = 10), class = "bulkem_error_input")
})
