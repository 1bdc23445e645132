# Reference posteriors from rstanarm's stan_glmer for the hbglm agreement
# test (tests/testthat/test-hbglm-rstanarm.R), with the priors of both
# matched: coefficients N(0, 10^2) (rstanarm's intercept prior applies to
# the intercept at centred predictors; with predictors of mean near 0 and
# a prior this wide the difference is far below the Monte Carlo error),
# and each group-level sd ~ exponential(1), which is what rstanarm's
# decov(1, 1, 1, 1) gives one term of a bar (checked by sampling its prior,
# prior_PD = TRUE: mean 1.03, sd 1.01, median 0.70). Writes the data and
# each parameter's posterior mean and MCSE (posterior::mcse_mean) to
# tests/testthat/fixtures/. Run from the repository root:
#   Rscript tools/rstanarm_reference.R
suppressMessages(library(rstanarm))
out <- "tests/testthat/fixtures"
set.seed(2026)
G <- 30; n <- 30
d <- data.frame(g = sprintf("g%02d", rep(seq_len(G), each = n)), x = rnorm(G * n), e = runif(G * n, 0.5, 2))
a <- rnorm(G, -0.3, 0.7); b <- rnorm(G, 0.8, 0.4)
gi <- as.integer(factor(d$g))
d$y <- rbinom(G * n, 1, plogis(a[gi] + b[gi] * d$x))
d$k <- rpois(G * n, d$e * exp(0.4 + a[gi] * 0.5 + 0.3 * d$x))
utils::write.csv(d, file.path(out, "rstanarm-data.csv"), row.names = FALSE)

reference <- function(fit, model, groups) {
  m <- as.matrix(fit)
  chains <- posterior::as_draws_array(as.array(fit))
  one <- function(name, draws) {
    arr <- matrix(draws, ncol = dim(chains)[2])
    data.frame(model = model, parameter = name, mean = mean(draws), mcse = posterior::mcse_mean(arr))
  }
  rows <- list(one("mu[(Intercept)]", m[, "(Intercept)"]), one("mu[x]", m[, "x"]))
  for (term in c("(Intercept)", "x")) {
    sig <- paste0("Sigma[g:", term, ",", term, "]")
    if (sig %in% colnames(m)) rows[[length(rows) + 1]] <- one(paste0("tau[", term, "]"), sqrt(m[, sig]))
  }
  for (g in groups) {
    rows[[length(rows) + 1]] <- one(paste0("beta[", g, ",(Intercept)]"), m[, "(Intercept)"] + m[, paste0("b[(Intercept) g:", g, "]")])
  }
  do.call(rbind, rows)
}
common <- list(prior = normal(0, 10), prior_intercept = normal(0, 10), prior_covariance = decov(1, 1, 1, 1),
               chains = 4, iter = 4000, cores = 2, refresh = 0, seed = 11)
fb <- do.call(stan_glmer, c(list(y ~ x + (1 + x || g), data = d, family = binomial()), common))
fp <- do.call(stan_glmer, c(list(k ~ x + offset(log(e)) + (1 | g), data = d, family = poisson()), common))
ref <- rbind(reference(fb, "binomial", c("g01", "g17")), reference(fp, "poisson", c("g01", "g17")))
ref$rstanarm <- as.character(utils::packageVersion("rstanarm"))
utils::write.csv(ref, file.path(out, "rstanarm-reference.csv"), row.names = FALSE)
print(ref)
