# hbglm(family = "ordinal"): the cumulative logit with a varying intercept
# against ordinal::clmm at large data, its methods (probabilities,
# log-likelihood, posterior predictive draws) against the draws by hand,
# and what it refuses.

ordinal_data <- function(G = 30, n = 60, seed = 12) {
  set.seed(seed)
  d <- data.frame(g = sprintf("g%02d", rep(seq_len(G), each = n)), x = rnorm(G * n))
  a <- rnorm(G, 0, 0.8)
  eta <- a[as.integer(factor(d$g))] + 0.9 * d$x
  cuts <- c(-1, 0.3, 1.6)
  u <- runif(G * n)
  d$y <- factor(1 + rowSums(outer(u, rep(1, 3)) > stats::plogis(outer(-eta, cuts, `+`))),
                levels = 1:4, labels = c("never", "rarely", "often", "always"), ordered = TRUE)
  d
}

test_that("the ordinal family agrees with ordinal::clmm at large data", {
  skip_if_not_installed("lme4")
  skip_if_not_installed("ordinal")
  d <- ordinal_data()
  fit <- hbglm(y ~ x + (1 | g), d, family = "ordinal", iter = 1500, warmup = 500, chains = 2, seed = 3,
               use.gpu = FALSE)
  ref <- ordinal::clmm(y ~ x + (1 | g), data = d)
  s <- summary(fit)
  mean_of <- function(p) s[p, "mean"]
  # clmm's thresholds are the cut-points; its x coefficient is gamma[x].
  expect_equal(unname(sapply(paste0("cut[", 1:3, "]"), mean_of)), as.vector(ref$Theta), tolerance = 0.05)
  expect_equal(mean_of("gamma[x]"), unname(ref$beta), tolerance = 0.05)
  expect_equal(mean_of("tau[(Intercept)]"), unname(sqrt(ref$ST$g[1, 1]^2)), tolerance = 0.15)
  expect_equal(mean_of("cut[1]"), -mean_of("mu[(Intercept)]"), tolerance = 1e-12)
  expect_identical(fit$categories, c("never", "rarely", "often", "always"))
  expect_true("cuts" %in% fit$parallel$block)
})

test_that("ordinal predictions, log-likelihood and predictive draws follow the draws", {
  skip_if_not_installed("lme4")
  d <- ordinal_data(G = 6, n = 20)
  fit <- suppressWarnings(hbglm(y ~ x + (1 | g), d, family = "ordinal", iter = 300, warmup = 150, chains = 2,
                                seed = 1, use.gpu = FALSE), classes = "bulkem_warning_rhat")
  dr <- fit$draws[5, 1, ]
  i <- 17
  # eta without the intercept's population mean; P(y <= c) = F(cut_c - eta).
  eta <- dr[[paste0("beta[", d$g[i], ",(Intercept)]")]] - dr[["mu[(Intercept)]"]] + dr[["gamma[x]"]] * d$x[i]
  cum <- c(0, stats::plogis(dr[paste0("cut[", 1:3, "]")] - eta), 1)
  p <- diff(cum)
  expect_equal(posterior_linpred(fit)[5, i], eta, ignore_attr = TRUE)
  expect_equal(exp(log_lik(fit)[5, i]), p[as.integer(d$y[i])], ignore_attr = TRUE)
  expect_equal(posterior_epred(fit)[5, i], sum(seq_along(p) * p), ignore_attr = TRUE)
  f <- fitted(fit)
  expect_true(all(f > 1 & f < 4))
  yrep <- simulate(fit, nsim = 50, seed = 2)
  expect_true(all(yrep %in% 1:4))
  expect_equal(predict(fit, newdata = d[1:4, ]), predict(fit)[1:4])
  # New data's response is matched to the fit's categories by label.
  new <- d[1:3, ]
  new$y <- factor(c("often", "never", "always"))
  expect_equal(dim(log_lik(fit, newdata = new)), c(prod(dim(fit$draws)[1:2]), 3L))
  new$y <- factor(c("often", "sometimes", "always"))
  expect_error(log_lik(fit, newdata = new), "sometimes", class = "bulkem_error_input")
  expect_false(is.unsorted(colMeans(matrix(fit$draws[, , paste0("cut[", 1:3, "]")], ncol = 3))))
})

test_that("what the ordinal family cannot honour is an error", {
  skip_if_not_installed("lme4")
  d <- ordinal_data(G = 4, n = 10)
  expect_error(hbglm(y ~ 0 + x + (0 + x | g), d, family = "ordinal", use.gpu = FALSE), "intercept",
               class = "bulkem_error_input")
  d$txt <- as.character(d$y)
  expect_error(hbglm(txt ~ x + (1 | g), d, family = "ordinal", use.gpu = FALSE), "ordered factor",
               class = "bulkem_error_input")
  d$num <- as.integer(d$y) - 0.5
  expect_error(hbglm(num ~ x + (1 | g), d, family = "ordinal", use.gpu = FALSE), "category numbers",
               class = "bulkem_error_input")
})
