# R's share of a bulkem() call on one large dataset: the whole call's time
# less the core's (em_fit_, timed by wrapping it), unweighted and weighted,
# on the CPU backend (R's share does not depend on the backend), median of
# 7 calls after one warm-up. Usage: Rscript inst/bench/em_from_r.R [n]
library(bulkem)
args <- commandArgs(trailingOnly = TRUE)
n <- if (length(args)) as.numeric(args[1]) else 1e7
set.seed(1)
x <- statmod::rinvgauss(n, mean = rep(c(1, 3), length.out = n), shape = 2)
w <- rep(c(1, 2, 3), length.out = n)
ns <- asNamespace("bulkem")
core_fit <- get("em_fit_", ns)
core_seconds <- 0
timed <- function(...) {
  t0 <- proc.time()[["elapsed"]]
  on.exit(core_seconds <<- core_seconds + proc.time()[["elapsed"]] - t0)
  core_fit(...)
}
unlockBinding("em_fit_", ns)
assign("em_fit_", timed, ns)
# Three iterations that converge at once (epsilon = 1e300): no warning to
# format, as in a fit that converged.
one_call <- function(weights) {
  core_seconds <<- 0
  t0 <- proc.time()[["elapsed"]]
  bulkem(list(x), weights = weights, num.components = 2, random.inits = 1, max.iters = 3,
         epsilon = 1e300, use.gpu = FALSE, seed = 1)
  whole <- proc.time()[["elapsed"]] - t0
  c(whole = whole, core = core_seconds, r = whole - core_seconds)
}
for (weighted in c(FALSE, TRUE)) {
  wt <- if (weighted) list(w)
  one_call(wt)
  runs <- t(replicate(7, one_call(wt)))
  med <- apply(runs, 2, stats::median)
  cat(sprintf("n = %g, %s: whole call %.1f ms, core %.1f ms, R's share %.1f ms (range %.1f-%.1f)\n",
              n, if (weighted) "weighted" else "unweighted", 1000 * med[["whole"]], 1000 * med[["core"]],
              1000 * med[["r"]], 1000 * min(runs[, "r"]), 1000 * max(runs[, "r"])))
}
