# hbglm() with several grouping factors, crossed ((1 | g) + (1 | h)) and
# nested ((1 | a/b)): variance components against lme4::lmer at large
# data, the nested factor the same as its interaction written out,
# predictions through every factor, new levels, and what is refused.

crossed_data <- function(G = 40, H = 25, reps = 2, seed = 21) {
  set.seed(seed)
  d <- expand.grid(g = sprintf("g%02d", seq_len(G)), h = sprintf("w%02d", seq_len(H)), r = seq_len(reps))
  d$x <- rnorm(nrow(d))
  a <- rnorm(G, 0, 0.8)
  b <- rnorm(G, 0, 0.3)
  u <- rnorm(H, 0, 0.6)
  gi <- as.integer(d$g)
  d$y <- 1 + a[gi] + (0.5 + b[gi]) * d$x + u[as.integer(d$h)] + rnorm(nrow(d), 0, 0.5)
  d$k <- rbinom(nrow(d), 1, plogis(-0.3 + a[gi] + 0.5 * d$x + u[as.integer(d$h)]))
  d
}

test_that("crossed factors agree with lme4::lmer at large data", {
  skip_if_not_installed("lme4")
  d <- crossed_data()
  fit <- hbglm(y ~ x + (1 + x || g) + (1 | h), d, iter = 1500, warmup = 500, chains = 2, seed = 4, use.gpu = FALSE)
  ref <- lme4::lmer(y ~ x + (1 + x || g) + (1 | h), d)
  vc <- as.data.frame(lme4::VarCorr(ref))
  ours <- lme4::VarCorr(fit)
  sd_of <- function(tab, grp, var) tab$sdcor[tab$grp == grp & (is.na(var) & is.na(tab$var1) | tab$var1 %in% var)]
  expect_equal(sd_of(ours, "h", "(Intercept)"), sd_of(vc, "h", "(Intercept)"), tolerance = 0.15)
  expect_equal(sd_of(ours, "Residual", NA), sd_of(vc, "Residual", NA), tolerance = 0.05)
  expect_equal(sd_of(ours, "g", "(Intercept)"), sd_of(vc, "g", "(Intercept)"), tolerance = 0.15)
  s <- summary(fit, pars = "mu")
  expect_equal(unname(s$mean), unname(lme4::fixef(ref)), tolerance = 0.1)
  # The week effects: posterior means against lmer's conditional modes
  # (centred: the intercept is shared between mu and them).
  r <- colMeans(matrix(fit$draws[, , paste0("r_h[", levels(d$h), ",(Intercept)]")], ncol = nlevels(d$h)))
  modes <- lme4::ranef(ref)$h[levels(d$h), "(Intercept)"]
  expect_gt(cor(r, modes), 0.99)
  expect_equal(r - mean(r), modes - mean(modes), tolerance = 0.1)
  expect_true("factor" %in% fit$parallel$block)
  expect_output(print(fit), "grouping factor h: 25 levels")
  expect_true(all(c("sd_h[(Intercept)]", "r_h[w01,(Intercept)]") %in% dimnames(fit$draws)[[3]]))
})

test_that("a nested factor (1 | a/b) is its interaction written out, draw for draw", {
  skip_if_not_installed("lme4")
  set.seed(8)
  d <- data.frame(school = rep(sprintf("s%d", 1:6), each = 24), class = rep(rep(c("A", "B", "C"), each = 8), 6))
  d$x <- rnorm(nrow(d))
  d$y <- rnorm(6)[as.integer(factor(d$school))] + rnorm(18, 0, 0.5)[as.integer(interaction(d$class, d$school))] + d$x + rnorm(nrow(d))
  d$cs <- interaction(d$class, d$school, sep = ":", lex.order = TRUE, drop = TRUE)
  run <- function(f) suppressWarnings(hbglm(f, d, iter = 200, warmup = 100, chains = 2, seed = 3, use.gpu = FALSE),
                                      classes = "bulkem_warning_rhat")
  nested <- run(y ~ x + (1 | school/class))
  spelled <- run(y ~ x + (1 | cs) + (1 | school))
  expect_identical(unname(nested$draws), unname(spelled$draws))
  # The 18 classes are the groups; the schools the other factor.
  expect_length(nested$groups, 18)
  expect_true("sd_school[(Intercept)]" %in% dimnames(nested$draws)[[3]])
  expect_equal(predict(nested, newdata = d[1:10, ]), predict(nested)[1:10])
  expect_identical(lme4::VarCorr(nested)$grp, c("class:school", "school", "Residual"))
})

test_that("predictions go through every grouping factor; new levels are drawn or refused", {
  skip_if_not_installed("lme4")
  d <- crossed_data(G = 8, H = 5, reps = 3)
  fit <- suppressWarnings(hbglm(k ~ x + (1 | g) + (1 | h), d, family = "binomial", iter = 300, warmup = 150,
                                chains = 2, seed = 2, use.gpu = FALSE), classes = "bulkem_warning_rhat")
  # The eta of one row by hand from one draw.
  dr <- fit$draws[7, 2, ]
  i <- 11
  eta <- dr[[paste0("beta[", d$g[i], ",(Intercept)]")]] + dr[["gamma[x]"]] * d$x[i] +
    dr[[paste0("r_h[", d$h[i], ",(Intercept)]")]]
  lin <- predict(fit, summary = FALSE)
  expect_equal(lin[dim(fit$draws)[1] + 7, i], eta, ignore_attr = TRUE)
  expect_equal(predict(fit, newdata = d[5:9, ]), predict(fit)[5:9])
  ll <- log_lik(fit)
  expect_equal(dim(ll), c(prod(dim(fit$draws)[1:2]), nrow(d)))
  new <- data.frame(g = "g01", h = "w99", x = 0.5)
  expect_error(predict(fit, newdata = new), "w99", class = "bulkem_error_input")
  set.seed(1)
  p <- predict(fit, newdata = new, new.groups = "population", summary = FALSE)
  expect_equal(dim(p), c(prod(dim(fit$draws)[1:2]), 1L))
  # A new week's effect has the spread of sd_h: wider than a known week's.
  known <- predict(fit, newdata = data.frame(g = "g01", h = "w01", x = 0.5), summary = FALSE)
  expect_gt(stats::sd(p), stats::sd(known))
  expect_error(predict(fit, newdata = d[1:3, c("g", "x")]), "h", class = "bulkem_error_input")
  expect_equal(dim(simulate(fit, nsim = 5, seed = 1)), c(5L, nrow(d)))
})

test_that("a second factor's correlated terms agree with lme4::lmer at large data", {
  skip_if_not_installed("lme4")
  set.seed(5)
  G <- 40
  H <- 25
  d <- expand.grid(g = sprintf("g%02d", seq_len(G)), h = sprintf("w%02d", seq_len(H)), r = 1:2)
  d$x <- rnorm(nrow(d))
  a <- rnorm(G, 0, 0.7)
  b <- rnorm(G, 0, 0.3)
  # The weeks' intercepts and slopes: sds 0.6 and 0.4, correlation 0.7.
  z1 <- rnorm(H)
  z2 <- 0.7 * z1 + sqrt(1 - 0.7^2) * rnorm(H)
  u <- 0.6 * z1
  v <- 0.4 * z2
  gi <- as.integer(d$g)
  hi <- as.integer(d$h)
  d$y <- 1 + a[gi] + u[hi] + (0.5 + b[gi] + v[hi]) * d$x + rnorm(nrow(d), 0, 0.5)
  # The inverse-Wishart's default scale (1) pulls the sds of 25 weeks'
  # effects towards 1 and their correlation towards 0, visibly against
  # lmer's (a posterior mean of 0.34 for 0.7); a small scale does not.
  fit <- hbglm(y ~ x + (1 + x | g) + (1 + x | h), d, iter = 1500, warmup = 500, chains = 2, seed = 6, use.gpu = FALSE,
               prior = hbglm_prior(cov_scale = 0.1))
  ref <- lme4::lmer(y ~ x + (1 + x | g) + (1 + x | h), d)
  vc <- as.data.frame(lme4::VarCorr(ref))
  ours <- lme4::VarCorr(fit)
  row_of <- function(tab, grp, v1, v2) tab$sdcor[tab$grp == grp & tab$var1 %in% v1 & (is.na(v2) & is.na(tab$var2) | tab$var2 %in% v2)]
  expect_equal(row_of(ours, "h", "(Intercept)", NA), row_of(vc, "h", "(Intercept)", NA), tolerance = 0.15)
  expect_equal(row_of(ours, "h", "x", NA), row_of(vc, "h", "x", NA), tolerance = 0.15)
  # The correlation of 25 weeks' effects is estimated loosely: within 0.2.
  expect_lt(abs(row_of(ours, "h", "(Intercept)", "x") - row_of(vc, "h", "(Intercept)", "x")), 0.2)
  expect_equal(row_of(ours, "g", "(Intercept)", NA), row_of(vc, "g", "(Intercept)", NA), tolerance = 0.15)
  expect_equal(unname(summary(fit, pars = "mu")$mean), unname(lme4::fixef(ref)), tolerance = 0.1)
  # The weeks' slopes against lmer's conditional modes.
  r <- colMeans(matrix(fit$draws[, , paste0("r_h[", levels(d$h), ",x]")], ncol = H))
  expect_gt(cor(r, lme4::ranef(ref)$h[levels(d$h), "x"]), 0.95)
  expect_true("cor_h[(Intercept),x]" %in% dimnames(fit$draws)[[3]])
  expect_identical(ours$grp, c("g", "g", "g", "h", "h", "h", "Residual"))
  expect_output(print(fit), "grouping factor h: 25 levels ((Intercept), x), correlated", fixed = TRUE)
  expect_output(print(fit), "cor_h")
  # A new week's intercept and slope are drawn from N(0, Sigma_h) at each
  # draw: over the draws they correlate as Sigma_h's draws imply
  # (independent draws would give about 0).
  new <- data.frame(g = "g01", h = c("new1", "new1"), x = c(0, 1))
  set.seed(2)
  p <- predict(fit, newdata = new, new.groups = "population", summary = FALSE)
  dr <- function(v) as.vector(fit$draws[, , v])
  sd0 <- dr("sd_h[(Intercept)]")
  sd1 <- dr("sd_h[x]")
  implied <- mean(dr("cor_h[(Intercept),x]") * sd0 * sd1) / sqrt(mean(sd0^2) * mean(sd1^2))
  expect_gt(implied, 0.3)
  expect_lt(abs(cor(p[, 1], p[, 2] - p[, 1]) - implied), 0.1)
})

test_that("what several grouping factors cannot honour is an error", {
  skip_if_not_installed("lme4")
  d <- crossed_data(G = 6, H = 4, reps = 2)
  d$z <- rnorm(nrow(d))
  expect_error(hbglm(y ~ x + z + (1 + x + z | g) + (1 + x | h) + (0 + z | h), d, use.gpu = FALSE),
               "blocks of both", class = "bulkem_error_input")
  # The inverse-Wishart of h's 3 correlated terms needs cov_df above 2.
  expect_error(hbglm(y ~ x + z + (1 + x + z || g) + (1 + x + z | h), d, prior = hbglm_prior(cov_df = 1.5), use.gpu = FALSE),
               "grouping factor h", class = "bulkem_error_input")
  # A held tau cannot hold correlated terms' sds (their covariance is drawn).
  for (f in list(y ~ x + (1 + x | g), y ~ x + (1 + x || g) + (1 + x | h))) {
    expect_error(hbglm(f, d, prior = hbglm_prior(tau_fixed = 0.5), use.gpu = FALSE), "tau_fixed",
                 class = "bulkem_error_input", info = deparse(f))
  }
  d$h[3] <- NA
  expect_error(hbglm(y ~ x + (1 | g) + (1 | h), d, use.gpu = FALSE), "row 3", class = "bulkem_error_input")
})
