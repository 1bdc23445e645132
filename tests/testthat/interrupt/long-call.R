# A long call that test-interrupt.R interrupts with SIGINT:
# Rscript long-call.R WHICH DIR LIBS. Writes DIR/pid, then DIR/started just
# before the call, then DIR/result.rds (how the call ended, and when).
args <- commandArgs(trailingOnly = TRUE)
which <- args[1]
dir <- args[2]
.libPaths(c(strsplit(args[3], .Platform$path.sep, fixed = TRUE)[[1]], .libPaths()))
suppressPackageStartupMessages(library(bulkem))
writeLines(as.character(Sys.getpid()), file.path(dir, "pid"))
set.seed(1)

random_hmm <- function(N, V) {
  norm <- function(m) m / rowSums(m)
  hmm(rep(1 / N, N), norm(matrix(runif(N * N), N)), norm(matrix(runif(N * V), N)))
}
long_sequence <- function(T, V) list(sample.int(V, T, replace = TRUE))

call <- switch(which,
  bulkem = {
    d <- replicate(40, rinvgaussmix(20000, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
    quote(bulkem(d, random.inits = 50, max.iters = 1000, epsilon = 0, use.gpu = FALSE))
  },
  hmm_loglik = {
    m <- random_hmm(300, 8); s <- long_sequence(3e6, 8)
    quote(hmm_loglik(m, s, use.gpu = FALSE))
  },
  hmm_viterbi = {
    m <- random_hmm(300, 8); s <- long_sequence(3e6, 8)
    quote(hmm_viterbi(m, s, use.gpu = FALSE))
  },
  hmm_fit = {
    s <- long_sequence(1e6, 8)
    quote(hmm_fit(s, n.states = 100, n.symbols = 8, max.iters = 1000, epsilon = 0, use.gpu = FALSE))
  },
  hbglm = {
    g <- rep(1:200, each = 500); x <- rnorm(length(g))
    d <- data.frame(y = 1 + x + rnorm(200)[g] + rnorm(length(g)), x = x, g = g)
    quote(hbglm(y ~ x, d, "g", iter = 1e5, warmup = 1000, chains = 2, use.gpu = FALSE))
  },
  mc_integrate = quote(mc_integrate(function(x) exp(-x^2), 0, 1, n = 1e13)),
  stop("unknown call ", which)
)

file.create(file.path(dir, "started"))
outcome <- tryCatch({
  eval(call)
  list(how = "finished")
}, interrupt = function(c) list(how = "interrupt", class = class(c)),
   error = function(e) list(how = "error", class = class(e), message = conditionMessage(e)))
outcome$at <- as.numeric(Sys.time())
# The session is still usable: a small call of the same kind runs.
outcome$usable <- tryCatch({
  stopifnot(is.finite(bulk_mean(runif(100))))
  fit <- bulkem(list(rinvgaussmix(200, c(0.4, 0.6), c(1, 3), c(10, 5))), use.gpu = FALSE)
  fit[[1]]$status != "failed"
}, error = function(e) FALSE)
saveRDS(outcome, file.path(dir, "result.rds"))
