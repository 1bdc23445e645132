# Constrained, censored and weighted fits against plain ones on the CPU
# (issue 25: each within 1.5x of the plain fit of the same data).
# Usage: Rscript inst/bench/constrained_censored_cpu.R
suppressPackageStartupMessages({
  library(bulkem)
  library(survival)
})
set.seed(1)
run <- function(data, ...) {
  system.time(suppressWarnings(bulkem(data, 2, random.inits = 10, max.iters = 100, epsilon = 0,
                                      use.gpu = FALSE, seed = 1, ...)))[["elapsed"]]
}
nd <- replicate(200, c(rnorm(1200), rnorm(800, 3, 1.2)), simplify = FALSE)
cat("Normal, 200 x 2,000, 10 starts x 100 iterations\n")
for (i in 1:3) {
  print(c(free = run(nd, family = "normal"), equal = run(nd, family = "normal", equal = "sigma"),
          fixed = run(nd, family = "normal", fixed = list(mu = c(0, NA)))))
}
ig <- replicate(200, as.numeric(rinvgaussmix(2000, c(0.3, 0.7), c(1, 3), c(30, 5))), simplify = FALSE)
timeout <- 5
cens <- lapply(ig, function(x) Surv(pmin(x, timeout), as.numeric(x <= timeout)))
ones <- lapply(ig, function(x) rep(1, length(x)))
cat(sprintf("inverse Gaussian, 200 x 2,000, %.1f %% right-censored at %g\n", 100 * mean(unlist(ig) > timeout), timeout))
for (i in 1:3) print(c(exact = run(ig), censored = run(cens), weighted = run(ig, weights = ones)))
