# hbglm against bayesm on a hierarchical Poisson regression on the CPU
# (issue 20): 20 groups x 100 counts, 3 coefficients varying by group,
# 4 chains each, in one R process. bayesm has no hierarchical Poisson
# sampler; its nearest is rhierNegbinRw (hierarchical negative binomial,
# random-walk Metropolis for each unit), run here with the dispersion held
# at alpha = 1e8 (Mcmc$alpha fixes it), where the negative binomial is the
# Poisson (variance mu + mu^2 / alpha; log pmf within 1e-6 of dpois for the
# counts here). One chain per call, its default priors.
#
# Reports wall time, minimum bulk ESS over the group coefficients and over
# the population parameters (hbglm: mu, tau; bayesm: Delta and the square
# roots of Vbeta's diagonal), and minimum bulk ESS per second.
#
# Usage: Rscript inst/bench/hbglm_poisson.R [iter] [threads]
#   (library(bulkem) from .lib when present, as `make install` leaves it)
# The shared set-up (libraries, iter and threads from the command line)
# and helpers, next to this script.
source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)[1])), "hbglm_compare.R"))
set.seed(1)
G <- 20; n <- 100; K <- 3
g <- rep(seq_len(G), each = n)
x1 <- rnorm(G * n); x2 <- rnorm(G * n)
b <- cbind(rnorm(G, 0.5, 0.3), rnorm(G, 0.3, 0.2), rnorm(G, -0.2, 0.2))
y <- rpois(G * n, exp(b[g, 1] + b[g, 2] * x1 + b[g, 3] * x2))
df <- data.frame(y, x1, x2, g)
chains <- 4L
warmup <- iter %/% 2

t0 <- proc.time()[["elapsed"]]
fit <- hbglm(y ~ x1 + x2, data = df, group = "g", family = "poisson",
             iter = iter, warmup = warmup, chains = chains, seed = 1, use.gpu = FALSE)
t_hb <- proc.time()[["elapsed"]] - t0
hb <- hbglm_ess(fit)

regdata <- lapply(split(df, df$g), function(s) list(y = s$y, X = cbind(1, s$x1, s$x2)))
t0 <- proc.time()[["elapsed"]]
runs <- lapply(seq_len(chains), function(ch) {
  set.seed(100 + ch)
  invisible(capture.output(out <- rhierNegbinRw(Data = list(regdata = regdata), Mcmc = list(R = iter, keep = 1, nprint = 0, alpha = 1e8))))
  keep <- (warmup + 1):iter
  list(beta = out$Betadraw[, , keep, drop = FALSE],            # G x K x draws
       mu = out$Deltadraw[keep, , drop = FALSE],               # draws x K
       tau = sqrt(out$Vbetadraw[keep, c(1, K + 2, 2 * K + 3), drop = FALSE]))
})
t_bm <- proc.time()[["elapsed"]] - t0
cat(sprintf("posterior means of mu: hbglm %s; bayesm %s\n",
            paste(sprintf("%.3f", colMeans(posterior::as_draws_matrix(hb$draws)[, grep("^mu\\[", hb$vars)])), collapse = " "),
            paste(sprintf("%.3f", colMeans(do.call(rbind, lapply(runs, function(r) r$mu)))), collapse = " ")))
report(iter, chains, t_hb, hb, t_bm, bayesm_ess(runs, G, K))
