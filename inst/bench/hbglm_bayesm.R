# hbglm against bayesm on the CPU (issue 20): a hierarchical logistic
# regression, 20 groups x 100 observations, 3 coefficients varying by
# group, 4 chains each, in one R process. bayesm's rhierMnlRwMixture
# fits it as a multinomial logit with 2 alternatives (the first the base,
# with zero covariates) and one normal component; one chain per call.
#
# Reports wall time, minimum bulk ESS over the group coefficients and over
# the population parameters (hbglm: mu, tau; bayesm: the component's mean
# and standard deviations), and minimum bulk ESS per second.
#
# Usage: Rscript inst/bench/hbglm_bayesm.R [iter] [threads] [tau]
#   tau: the group-level standard deviation of every coefficient (default
#   0.8, 0.5, 0.6); a small one is where a centred sampler mixes slowly
#   (library(bulkem) from .lib when present, as `make install` leaves it)
# The shared set-up (libraries, iter and threads from the command line)
# and helpers, next to this script.
source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)[1])), "hbglm_compare.R"))
set.seed(20)
G <- 20; n <- 100; K <- 3
mu <- c(-0.5, 1, -1)
tau <- if (length(args) >= 3) rep(as.numeric(args[3]), 3) else c(0.8, 0.5, 0.6)
df <- do.call(rbind, lapply(seq_len(G), function(g) {
  b <- mu + tau * rnorm(K)
  x1 <- rnorm(n); x2 <- rnorm(n)
  y <- rbinom(n, 1, plogis(b[1] + b[2] * x1 + b[3] * x2))
  data.frame(g = g, x1 = x1, x2 = x2, y = y)
}))

chains <- 4L
warmup <- iter %/% 2

# hbglm: 4 chains in one call.
t0 <- proc.time()[["elapsed"]]
fit <- hbglm(y ~ x1 + x2, data = df, group = "g", family = "binomial",
             iter = iter, warmup = warmup, chains = chains, seed = 1, use.gpu = FALSE)
t_hb <- proc.time()[["elapsed"]] - t0
hb <- hbglm_ess(fit)

# bayesm: 4 chains, one call each; the same number of kept draws.
lgtdata <- lapply(split(df, df$g), function(s) {
  X <- matrix(0, 2 * nrow(s), K)
  X[seq(2, 2 * nrow(s), 2), ] <- cbind(1, s$x1, s$x2)
  list(y = s$y + 1L, X = X)
})
t0 <- proc.time()[["elapsed"]]
runs <- lapply(seq_len(chains), function(ch) {
  set.seed(100 + ch)
  out <- rhierMnlRwMixture(Data = list(p = 2, lgtdata = lgtdata), Prior = list(ncomp = 1),
                           Mcmc = list(R = iter, keep = 1, nprint = 0))
  keep <- (warmup + 1):iter
  beta <- out$betadraw[, , keep, drop = FALSE]          # G x K x draws
  comp <- out$nmix$compdraw[keep]
  mean_k <- t(vapply(comp, function(c) c[[1]]$mu, numeric(K)))
  sd_k <- t(vapply(comp, function(c) {
    # rooti: the inverse Cholesky root, Sigma^-1 = rooti rooti'.
    sqrt(diag(solve(tcrossprod(c[[1]]$rooti))))
  }, numeric(K)))
  list(beta = beta, mu = mean_k, tau = sd_k)
})
t_bm <- proc.time()[["elapsed"]] - t0
report(iter, chains, t_hb, hb, t_bm, bayesm_ess(runs, G, K))
