# R's share of an HMM call: the checks and flattening of the sequences
# (check_seqs() for symbol codes, check_numeric_seqs() for Gaussian and
# Poisson observations), seconds per call (mean of 5), at two shapes.
# Usage: Rscript inst/bench/hmm_checks_r.R
library(bulkem)
set.seed(1)
for (shape in list(c(100000, 200, 8), c(10000, 1000, 16))) {
  M <- shape[1]; Tn <- shape[2]; V <- shape[3]
  seqs <- replicate(M, sample.int(V, Tn, replace = TRUE), simplify = FALSE)
  num <- lapply(seqs, as.double)
  per_call <- function(f) system.time(for (i in 1:5) f())[["elapsed"]] / 5
  t1 <- per_call(function() bulkem:::check_seqs(seqs, NULL, V, "seqs", NULL))
  t2 <- per_call(function() bulkem:::check_numeric_seqs(num, "seqs", "gaussian", "finite number", is.finite, NULL, by_range = TRUE))
  cat(sprintf("M = %d, T = %d: check_seqs %.3f s, check_numeric_seqs %.3f s per call\n", M, Tn, t1, t2))
}
