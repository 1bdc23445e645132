# bootstrap_lrt() against mclust's mclustBootstrapLRT() on this machine's
# CPU: one univariate Normal dataset of 2,000 observations, K = 1 vs 2,
# B = 999, both timed in this R session (issue 25's CPU target: at least
# 10x faster per dataset). Timed twice: at each package's default
# tolerance (mclust stops when the log-likelihood changes by less than
# 1e-5 relative, about 0.035 here; bulkem by less than 1e-6 absolute, a
# rule 35,000 times stricter), and at mclust's rule (bulkem's epsilon set
# to 1e-5 x |log-likelihood|). Usage: Rscript inst/bench/bootstrap_cpu.R [datasets]
suppressPackageStartupMessages({
  library(bulkem)
  library(mclust)
})
args <- commandArgs(trailingOnly = TRUE)
D <- if (length(args)) as.integer(args[1]) else 20L
set.seed(1)
make <- function() c(rnorm(1200, 0, 1), rnorm(800, 3, 1.2))
x <- make()
B <- 999
t_mclust <- system.time(m <- mclustBootstrapLRT(x, modelName = "V", maxG = 1, nboot = B, verbose = FALSE))[["elapsed"]]
t_one <- system.time(l <- bootstrap_lrt(list(x), 1:2, B = B, family = "normal", use.gpu = FALSE, seed = 1))[["elapsed"]]
datasets <- replicate(D, make(), simplify = FALSE)
t_many <- system.time(lm <- suppressWarnings(bootstrap_lrt(datasets, 1:2, B = B, family = "normal", use.gpu = FALSE, seed = 1)))[["elapsed"]]
eps <- 1e-5 * abs(l$fits[["2"]][[1]]$loglik)
t_matched <- system.time(lmatched <- suppressWarnings(bootstrap_lrt(datasets, 1:2, B = B, family = "normal", use.gpu = FALSE,
                                                                    seed = 1, epsilon = eps)))[["elapsed"]]
cat(sprintf("mclustBootstrapLRT, 1 dataset: %.2f s (statistic %.4f, p %.4f)\n", t_mclust, m$obs, m$p.value))
cat(sprintf("bootstrap_lrt, 1 dataset: %.2f s (statistic %.4f, p %.4f, %d replicates fitted); %.1fx mclust\n",
            t_one, l$tests$statistic, l$tests$p.value, l$tests$replicates, t_mclust / t_one))
cat(sprintf("bootstrap_lrt, %d datasets: %.2f s, %.3f s per dataset; %.1fx mclust per dataset\n",
            D, t_many, t_many / D, t_mclust / (t_many / D)))
cat(sprintf("bootstrap_lrt at mclust's tolerance (epsilon %.3g), %d datasets: %.2f s, %.3f s per dataset; %.1fx mclust per dataset\n",
            eps, D, t_matched, t_matched / D, t_mclust / (t_matched / D)))
cat(sprintf("p-values, default against matched tolerance: largest difference %.3f\n",
            max(abs(lm$tests$p.value - lmatched$tests$p.value))))
