# HMM passes timed as an R user calls them (sequences in a list of R
# vectors, results back as R objects): forward, Viterbi and posteriors of
# a random categorical HMM. Prints the median of `reps` wall times per pass.
# Usage: Rscript inst/bench/hmm_from_r.R N M T V [use.gpu: FALSE | TRUE | NA] [reps]
library(bulkem)
args <- commandArgs(trailingOnly = TRUE)
num <- function(i, default) if (length(args) >= i) as.numeric(args[i]) else default
N <- num(1, 32); M <- num(2, 2000); Tn <- num(3, 1000); V <- num(4, 16)
use.gpu <- if (length(args) >= 5) as.logical(args[5]) else FALSE
reps <- num(6, 3)
set.seed(1)
A <- matrix(runif(N * N), N); A <- A / rowSums(A)
B <- matrix(runif(N * V), N); B <- B / rowSums(B)
model <- hmm(rep(1 / N, N), A, B)
seqs <- replicate(M, sample.int(V, Tn, replace = TRUE), simplify = FALSE)
wall <- function(f) {
  f()
  stats::median(vapply(seq_len(reps), function(i) system.time(f())[["elapsed"]], 0))
}
cat(sprintf("bulkem %s, N = %d, M = %d, T = %d, V = %d, use.gpu = %s, threads %s: ",
            utils::packageVersion("bulkem"), N, M, Tn, V, use.gpu, getOption("bulkem.threads", "all")))
cat(sprintf("forward %.3f s, Viterbi %.3f s, posterior %.3f s\n",
            wall(function() hmm_loglik(model, seqs, use.gpu = use.gpu)),
            wall(function() hmm_viterbi(model, seqs, use.gpu = use.gpu)),
            wall(function() hmm_posterior(model, seqs, use.gpu = use.gpu))))
