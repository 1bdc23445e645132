# R's share of bulk_sum(): the whole call against the core's reduce_()
# alone, for one vector of 10^7 values and one of 10, each method, median
# of 20 calls after a warm-up (ms). Usage: Rscript inst/bench/reduce_from_r.R
library(bulkem)
set.seed(1)
ns <- asNamespace("bulkem")
threads <- ns$cpu_threads()
med_ms <- function(f) {
  f()
  stats::median(vapply(1:20, function(i) system.time(f())[["elapsed"]], 0)) * 1000
}
for (n in c(1e7, 10)) {
  x <- runif(n)
  for (method in c("pairwise", "div2", "kahan", "exact")) {
    whole <- med_ms(function() bulk_sum(x, method = method))
    core <- med_ms(function() ns$reduce_(list(x), method, "double", "sum", "cpu", threads))
    cat(sprintf("n = %g, %s: bulk_sum %.1f ms, core %.1f ms\n", n, method, whole, core))
  }
}
