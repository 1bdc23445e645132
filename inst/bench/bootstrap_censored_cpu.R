# bootstrap_lrt() on censored data against the same data uncensored (CPU):
# 100 datasets of 2,000 inverse Gaussian reaction times (the 2015 demo's
# mixture), right-censored at a time-out of 5, K = 1 vs 2, B = 99.
# Usage: Rscript inst/bench/bootstrap_censored_cpu.R
library(bulkem)
set.seed(1)
D <- 100; n <- 2000
raw <- replicate(D, c(statmod::rinvgauss(n * 0.3, 1, 30), statmod::rinvgauss(n * 0.7, 3, 0.2)), simplify = FALSE)
cens <- lapply(raw, function(x) survival::Surv(pmin(x, 5), as.numeric(x <= 5)))
cat("censored share", mean(sapply(cens, function(s) mean(s[, 2] == 0))), "\n")
for (what in c("plain", "censored")) {
  d <- if (what == "plain") raw else cens
  t <- system.time(l <- suppressWarnings(bootstrap_lrt(d, 1:2, B = 99, use.gpu = FALSE, seed = 1, max.iters = 100)))
  cat(what, "elapsed", t[["elapsed"]], "s; rejected", sum(l$tests$p.value < 0.05), "of", D, "\n")
}
