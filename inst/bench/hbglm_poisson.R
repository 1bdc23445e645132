# hbglm on a hierarchical Poisson regression (20 groups x 100 counts, 3
# coefficients varying by group), 4 chains of 2,000 sweeps on the CPU: wall
# time and the minimum bulk ESS over all parameters. No peer: bayesm has
# no hierarchical Poisson sampler. Usage: Rscript inst/bench/hbglm_poisson.R
library(bulkem, lib.loc = ".lib")
set.seed(1)
G <- 20; n <- 100
g <- rep(seq_len(G), each = n)
x1 <- rnorm(G * n); x2 <- rnorm(G * n)
b <- cbind(rnorm(G, 0.5, 0.3), rnorm(G, 0.3, 0.2), rnorm(G, -0.2, 0.2))
y <- rpois(G * n, exp(b[g, 1] + b[g, 2] * x1 + b[g, 3] * x2))
df <- data.frame(y, x1, x2, g)
t0 <- proc.time()[["elapsed"]]
fit <- hbglm(y ~ x1 + x2, data = df, group = "g", family = "poisson", iter = 2000, warmup = 1000, chains = 4, seed = 1, use.gpu = FALSE)
cat(sprintf("poisson hbglm 20 x 100, 4 chains x 2000: %.2f s\n", proc.time()[["elapsed"]] - t0))
d <- posterior::as_draws_array(fit)
ess <- vapply(posterior::variables(d), function(v) posterior::ess_bulk(posterior::extract_variable_matrix(d, v)), 0)
cat(sprintf("min bulk ESS %.0f\n", min(ess)))
