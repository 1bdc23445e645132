# What the hbglm-against-bayesm benchmarks share (sourced by
# hbglm_bayesm.R and hbglm_poisson.R): the minimum bulk ESS of bayesm's
# chains and the report of both samplers. Sourcing it loads bulkem (from
# .lib when present, as `make install` leaves it), bayesm and posterior,
# and reads `iter` and `threads` from the command line.

suppressPackageStartupMessages({
  lib <- if (dir.exists(".lib")) ".lib" else NULL
  library(bulkem, lib.loc = lib)
  library(bayesm)
  library(posterior)
})
args <- commandArgs(trailingOnly = TRUE)
iter <- if (length(args) >= 1) as.integer(args[1]) else 2000L
threads <- if (length(args) >= 2) as.integer(args[2]) else 2L
options(bulkem.threads = threads)

# bayesm's runs (one list per chain: beta G x K x draws, mu and tau
# draws x K) as minimum bulk ESS over the group coefficients and over the
# population parameters.
bayesm_ess <- function(runs, G, K) {
  ess_of <- function(get) posterior::ess_bulk(do.call(cbind, lapply(runs, get)))
  list(beta = unlist(lapply(seq_len(G), function(g) vapply(seq_len(K), function(k) ess_of(function(r) r$beta[g, k, ]), 0))),
       pop = c(vapply(seq_len(K), function(k) ess_of(function(r) r$mu[, k]), 0),
               vapply(seq_len(K), function(k) ess_of(function(r) r$tau[, k]), 0)))
}

# The hbglm fit's bulk ESS per variable, and which are population
# parameters (mu, tau).
hbglm_ess <- function(fit) {
  d <- posterior::as_draws_array(fit)
  vars <- posterior::variables(d)
  ess <- vapply(vars, function(v) posterior::ess_bulk(posterior::extract_variable_matrix(d, v)), 0)
  list(ess = ess, pop = grepl("^(mu|tau)\\[", vars), draws = d, vars = vars)
}

# Both samplers' lines and the ratio of their minimum ESS per second.
report <- function(iter, chains, t_hb, hb, t_bm, bm) {
  row <- function(name, secs, beta, pop) {
    cat(sprintf("%-7s %4d iter x %d chains: %6.2f s; min bulk ESS: groups %6.0f, population %6.0f; min ESS/s %7.1f\n",
                name, iter, chains, secs, min(beta), min(pop), min(c(beta, pop)) / secs))
  }
  row("hbglm", t_hb, hb$ess[!hb$pop], hb$ess[hb$pop])
  row("bayesm", t_bm, bm$beta, bm$pop)
  cat(sprintf("hbglm / bayesm, min ESS per second: %.2f\n",
              (min(hb$ess) / t_hb) / (min(c(bm$beta, bm$pop)) / t_bm)))
}
