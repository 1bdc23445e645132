# CPU benchmark of bulkem() against a vectorised plain-R EM of the same
# algorithm, on the same data, in one run (issue: 200 datasets x 2,000
# observations x 10 starts, 2-component inverse Gaussian, 100 iterations with
# epsilon = 0).
#
#   Rscript inst/bench/cpu_em.R [datasets] [n] [starts] [iters] [r_datasets]
#
# The plain-R EM is timed on the first r_datasets datasets (default 4: it is
# about 100 times slower) and compared by throughput in observation-iterations
# per second.
library(bulkem)
args <- as.integer(commandArgs(trailingOnly = TRUE))
opt <- function(i, default) if (length(args) >= i && !is.na(args[i])) args[i] else default
D <- opt(1, 200L); n <- opt(2, 2000L); S <- opt(3, 10L); iters <- opt(4, 100L); D_r <- opt(5, 4L)

# Vectorised over observations and components; the same E- and M-steps.
plain_r_em <- function(x, alpha, mu, lambda, iters) {
  inv <- 1 / x
  for (it in seq_len(iters)) {
    lw <- cbind(log(alpha[1]) + 0.5 * log(lambda[1] / (2 * pi)) - lambda[1] * (x - mu[1])^2 / (2 * mu[1]^2 * x),
                log(alpha[2]) + 0.5 * log(lambda[2] / (2 * pi)) - lambda[2] * (x - mu[2])^2 / (2 * mu[2]^2 * x))
    top <- pmax(lw[, 1], lw[, 2])
    w <- exp(lw - top)
    w <- w / rowSums(w)
    sw <- colSums(w)
    alpha <- sw / length(x)
    mu <- colSums(w * x) / sw
    lambda <- sw / (colSums(w * inv) - sw / mu)
  }
  list(alpha = alpha, mu = mu, lambda = lambda)
}

set.seed(2015)
data <- replicate(D, rinvgaussmix(n, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
threads <- bulkem_backends()$threads[1]

invisible(bulkem(data[1:2], random.inits = 2, use.gpu = FALSE))  # warm-up
t_bulkem <- system.time(
  fits <- bulkem(data, random.inits = S, max.iters = iters, epsilon = 0, seed = 1, use.gpu = FALSE)
)[["elapsed"]]
work <- as.double(D) * S * iters * n

# The plain-R EM from the same starts as bulkem's best start, so it does the same work.
t_r <- system.time(for (d in seq_len(D_r)) for (s in seq_len(S)) {
  f <- fits[[d]]
  plain_r_em(data[[d]], f$init_alpha, f$init_mu, f$init_lambda, iters)
})[["elapsed"]]
work_r <- as.double(D_r) * S * iters * n

rate_b <- work / t_bulkem
rate_r <- work_r / t_r
cat(sprintf("machine: %s, %d cores; R %s; %s\n", Sys.info()[["nodename"]], parallel::detectCores(),
            getRversion(), format(Sys.time(), "%Y-%m-%d %H:%M")))
cat(sprintf("bulkem CPU: %d datasets x %d obs x %d starts x %d iters in %.2f s on %d threads: %.3g obs-iter/s (%.1f ns per obs-iter per thread)\n",
            D, n, S, iters, t_bulkem, threads, rate_b, 1e9 * threads / rate_b))
cat(sprintf("plain R:    %d datasets x %d obs x %d starts x %d iters in %.2f s on 1 core: %.3g obs-iter/s\n",
            D_r, n, S, iters, t_r, rate_r))
cat(sprintf("speed-up: %.0fx overall, %.0fx per core\n", rate_b / rate_r, rate_b / threads / rate_r))
