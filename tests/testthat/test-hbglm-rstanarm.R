# Posterior means agree with rstanarm's stan_glmer within 4 Monte Carlo
# standard errors, on models whose priors both can state the same way
# (coefficients N(0, 10^2), each group-level sd exponential(1), which is
# rstanarm's decov() for one term). The reference means and MCSEs are made
# by tools/rstanarm_reference.R (rstanarm is not needed here) and
# committed with the data. Correlated coefficients are not compared: the
# inverse-Wishart prior of hbglm and rstanarm's decov() differ.

test_that("binomial and poisson fits agree with rstanarm's stan_glmer within 4 MCSE", {
  skip_if_not_installed("lme4")
  skip_if_not_installed("posterior")
  d <- utils::read.csv(test_path("fixtures", "rstanarm-data.csv"))
  ref <- utils::read.csv(test_path("fixtures", "rstanarm-reference.csv"))
  prior <- hbglm_prior(mu_sd = 10, gamma_sd = 10, tau_family = "exponential", tau_scale = 1)
  fits <- list(
    binomial = hbglm(y ~ x + (1 + x || g), d, family = "binomial", prior = prior, iter = 3000, warmup = 1000,
                     chains = 4, seed = 5, use.gpu = FALSE),
    poisson = hbglm(k ~ x + offset(log(e)) + (1 | g), d, family = "poisson", prior = prior, iter = 3000,
                    warmup = 1000, chains = 4, seed = 5, use.gpu = FALSE)
  )
  for (i in seq_len(nrow(ref))) {
    fit <- fits[[ref$model[i]]]
    name <- ref$parameter[i]
    # A population-level term that does not vary by group is global.
    if (!name %in% dimnames(fit$draws)[[3]]) name <- sub("^mu", "gamma", name)
    draws <- fit$draws[, , name]
    ours <- mean(draws)
    mcse <- posterior::mcse_mean(draws)
    z <- (ours - ref$mean[i]) / sqrt(mcse^2 + ref$mcse[i]^2)
    expect_lt(abs(z), 4, label = sprintf("%s %s: hbglm %.4f vs rstanarm %.4f, z", ref$model[i], name, ours, ref$mean[i]))
  }
})
