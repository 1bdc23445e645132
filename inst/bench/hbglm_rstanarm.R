# hbglm against rstanarm's stan_glmer on a correlated random-slope logistic
# model (issue 26): binomial y ~ x + (1 + x | g), 50 groups x 40 rows,
# 4 chains x `iter` iterations (half warmup), both in this R process on
# `threads` cores. Reports each sampler's time, its minimum bulk and tail
# ESS over all parameters, their ratio per second, and the fixed effects'
# posterior means with Monte Carlo standard errors.
#
#   Rscript inst/bench/hbglm_rstanarm.R [iter] [threads] [seed]

suppressPackageStartupMessages({
  lib <- if (dir.exists(".lib")) ".lib" else NULL
  library(bulkem, lib.loc = lib)
  library(rstanarm)
  library(posterior)
})
args <- commandArgs(trailingOnly = TRUE)
iter <- if (length(args) >= 1) as.integer(args[1]) else 2000L
threads <- if (length(args) >= 2) as.integer(args[2]) else 2L
seed <- if (length(args) >= 3) as.integer(args[3]) else 1L
options(bulkem.threads = threads)

set.seed(seed)
G <- 50; n <- 40
Sigma <- matrix(c(0.8^2, 0.3 * 0.8 * 0.5, 0.3 * 0.8 * 0.5, 0.5^2), 2)
b <- matrix(rnorm(2 * G), G) %*% chol(Sigma) + matrix(c(-0.5, 1), G, 2, byrow = TRUE)
d <- data.frame(g = factor(rep(seq_len(G), each = n)), x = rnorm(G * n))
d$y <- rbinom(G * n, 1, plogis(b[d$g, 1] + b[d$g, 2] * d$x))

min_ess <- function(draws) {
  s <- posterior::summarise_draws(draws, "ess_bulk", "ess_tail")
  c(bulk = min(s$ess_bulk, na.rm = TRUE), tail = min(s$ess_tail, na.rm = TRUE), n = nrow(s))
}
fixed <- function(draws, names) {
  s <- posterior::summarise_draws(posterior::subset_draws(draws, variable = names), "mean", "mcse_mean")
  stats::setNames(paste0(sprintf("%.3f", s$mean), " (", sprintf("%.3f", s$mcse_mean), ")"), names)
}

t0 <- proc.time()[["elapsed"]]
hb <- hbglm(y ~ x + (1 + x | g), d, family = "binomial", iter = iter, warmup = iter %/% 2, chains = 4,
            seed = seed, use.gpu = FALSE)
t_hb <- proc.time()[["elapsed"]] - t0
hb_draws <- posterior::as_draws_array(hb)

t0 <- proc.time()[["elapsed"]]
st <- suppressWarnings(stan_glmer(y ~ x + (1 + x | g), data = d, family = binomial(), chains = 4,
                                  iter = iter, cores = threads, seed = seed, refresh = 0))
t_st <- proc.time()[["elapsed"]] - t0
st_draws <- posterior::as_draws_array(as.array(st))

e_hb <- min_ess(hb_draws)
e_st <- min_ess(st_draws)
cat(sprintf("data: %d groups x %d rows; %d iterations x 4 chains (half warmup); %d threads\n", G, n, iter, threads))
cat(sprintf("hbglm:      %6.2f s, %4d parameters, min bulk ESS %6.0f, min tail ESS %6.0f, min bulk ESS/s %8.1f\n",
            t_hb, e_hb[["n"]], e_hb[["bulk"]], e_hb[["tail"]], e_hb[["bulk"]] / t_hb))
cat(sprintf("stan_glmer: %6.2f s, %4d parameters, min bulk ESS %6.0f, min tail ESS %6.0f, min bulk ESS/s %8.1f\n",
            t_st, e_st[["n"]], e_st[["bulk"]], e_st[["tail"]], e_st[["bulk"]] / t_st))
cat(sprintf("hbglm / stan_glmer, min bulk ESS per second: %.1fx\n", (e_hb[["bulk"]] / t_hb) / (e_st[["bulk"]] / t_st)))
cat("fixed effects, posterior mean (MCSE):\n")
print(rbind(hbglm = fixed(hb_draws, c("mu[(Intercept)]", "mu[x]")),
            stan_glmer = fixed(st_draws, c("(Intercept)", "x"))))
cat("group-level sds and correlation:\n")
vc <- VarCorr(hb)
print(vc)
print(VarCorr(st))
