textbook <- function() {
  hmm(c(Healthy = 0.6, Fever = 0.4),
      matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
      matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE,
             dimnames = list(NULL, c("normal", "cold", "dizzy"))))
}

# A random model with asymmetric matrices (catches any transposition slip).
random_hmm <- function(N, V, zeros = FALSE) {
  rows <- function(r, c) {
    m <- matrix(stats::runif(r * c), r, c)
    if (zeros && c > 1) {
      m[cbind(seq_len(r), sample.int(c, r, replace = TRUE))] <- 0
    }
    m / rowSums(m)
  }
  hmm(as.vector(rows(1, N)), rows(N, N), rows(N, V))
}

# Brute force over all N^T state paths: the oracle.
brute_hmm <- function(model, obs) {
  N <- length(model$start)
  TT <- length(obs)
  paths <- as.matrix(expand.grid(rep(list(seq_len(N)), TT)))
  p <- apply(paths, 1, function(s) {
    pr <- model$start[s[1]] * model$emis[s[1], obs[1]]
    for (t in seq_len(TT)[-1]) pr <- pr * model$trans[s[t - 1], s[t]] * model$emis[s[t], obs[t]]
    pr
  })
  post <- sapply(seq_len(N), function(i) {
    vapply(seq_len(TT), function(t) sum(p[paths[, t] == i]) / sum(p), numeric(1))
  })
  list(loglik = log(sum(p)), best = log(max(p)), path = unname(paths[which.max(p), ]),
       posterior = matrix(post, TT, N))
}

test_that("the textbook example is reproduced", {
  m <- textbook()
  expect_equal(unname(hmm_loglik(m, list(c(1, 2, 3)), use.gpu = FALSE)), -3.316488653735, tolerance = 1e-12)
  v <- hmm_viterbi(m, list(c(1, 2, 3)), use.gpu = FALSE)
  expect_identical(v$path[[1]], c(1L, 1L, 2L))
  expect_equal(exp(v$log_prob), 0.01512, tolerance = 1e-12)
})

test_that("log-likelihood, Viterbi and posteriors match brute force", {
  set.seed(11)
  for (N in 1:3) for (V in c(1, 3)) {
    m <- random_hmm(N, V, zeros = N == 3)
    seqs <- lapply(c(1, 3, 5, 6), function(TT) sample.int(V, TT, replace = TRUE))
    ll <- hmm_loglik(m, seqs, use.gpu = FALSE)
    v <- hmm_viterbi(m, seqs, use.gpu = FALSE)
    post <- hmm_posterior(m, seqs, use.gpu = FALSE)
    for (i in seq_along(seqs)) {
      b <- brute_hmm(m, seqs[[i]])
      expect_equal(ll[[i]], b$loglik, tolerance = 1e-10)
      expect_equal(v$log_prob[[i]], b$best, tolerance = 1e-10)
      if (is.finite(b$best)) expect_identical(v$path[[i]], as.integer(b$path))
      expect_equal(unname(post[[i]]), b$posterior, tolerance = 1e-10)
    }
    expect_equal(attr(post, "loglik"), ll)
  }
})

test_that("sequences can be codes, factors or character labels, and keep their names", {
  m <- textbook()
  codes <- list(a = c(1L, 2L, 3L), b = c(3, 3, 1))
  labels <- list(a = c("normal", "cold", "dizzy"),
                 b = factor(c("dizzy", "dizzy", "normal"), levels = c("dizzy", "normal")))
  expect_identical(hmm_loglik(m, labels, use.gpu = FALSE), hmm_loglik(m, codes, use.gpu = FALSE))
  expect_named(hmm_loglik(m, codes, use.gpu = FALSE), c("a", "b"))
  # A single vector is one sequence.
  expect_length(hmm_loglik(m, c(1, 2, 3), use.gpu = FALSE), 1)
  post <- hmm_posterior(m, codes, use.gpu = FALSE)
  expect_identical(colnames(post$a), c("Healthy", "Fever"))
  expect_identical(dim(post$b), c(3L, 2L))
  expect_equal(rowSums(post$b), rep(1, 3))
})

test_that("impossible sequences give -Inf and NA, never NaN", {
  m <- hmm(c(1, 0), diag(2), diag(2))
  seqs <- list(c(1, 1), c(1, 2), 2)
  expect_identical(unname(hmm_loglik(m, seqs, use.gpu = FALSE)), c(0, -Inf, -Inf))
  v <- hmm_viterbi(m, seqs, use.gpu = FALSE)
  expect_identical(v$path, list(c(1L, 1L), c(NA_integer_, NA_integer_), NA_integer_))
  post <- hmm_posterior(m, seqs, use.gpu = FALSE)
  expect_true(all(is.na(post[[2]])) && !any(is.nan(post[[2]])))
  fit <- hmm_fit(seqs, init = m, use.gpu = FALSE)
  expect_identical(fit$status, "failed")
  expect_match(fit$message, "sequence 2 is impossible")
})

test_that("hmm_simulate is reproducible and returns the hidden states", {
  m <- textbook()
  a <- hmm_simulate(m, 5, c(1, 2, 3, 4, 100), seed = 3)
  expect_identical(a, hmm_simulate(m, 5, c(1, 2, 3, 4, 100), seed = 3))
  expect_false(identical(a, hmm_simulate(m, 5, c(1, 2, 3, 4, 100), seed = 4)))
  expect_identical(lengths(a), c(1L, 2L, 3L, 4L, 100L))
  expect_identical(lengths(attr(a, "states")), lengths(a))
  expect_true(all(unlist(a) %in% 1:3) && all(unlist(attr(a, "states")) %in% 1:2))
  set.seed(9)
  b <- hmm_simulate(m, 3, 10)
  set.seed(9)
  expect_identical(b, hmm_simulate(m, 3, 10))
})

test_that("hmm_fit is monotone, recovers a known model and re-estimates start", {
  truth <- hmm(c(0.85, 0.15), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
               matrix(c(0.7, 0.2, 0.1, 0.05, 0.15, 0.8), 2, byrow = TRUE))
  seqs <- hmm_simulate(truth, 2000, 40, seed = 5)
  fit <- hmm_fit(seqs, 2, 3, random.inits = 3, max.iters = 300, epsilon = 1e-8, seed = 1,
                 use.gpu = FALSE)
  expect_s3_class(fit, "bulkem_hmm_fit")
  expect_s3_class(fit$model, "bulkem_hmm")
  expect_identical(fit$status, "converged")
  expect_true(all(diff(fit$loglik_trace) >= -1e-9 * abs(fit$loglik)))
  expect_length(fit$loglik_trace, fit$iterations + 1)
  expect_equal(fit$loglik, sum(hmm_loglik(fit$model, seqs, use.gpu = FALSE)), tolerance = 1e-10)
  # Relabel the fitted states to match the truth.
  o <- if (fit$model$emis[1, 1] > fit$model$emis[2, 1]) 1:2 else 2:1
  expect_equal(unname(fit$model$start[o]), unname(truth$start), tolerance = 0.05)
  expect_equal(unname(fit$model$trans[o, o]), unname(truth$trans), tolerance = 0.03)
  expect_equal(unname(fit$model$emis[o, ]), unname(truth$emis), tolerance = 0.03)
  ll <- logLik(fit)
  expect_identical(attr(ll, "df"), 7L)
  expect_identical(attr(ll, "nobs"), 80000)
  expect_equal(BIC(fit), -2 * fit$loglik + 7 * log(80000))
})

test_that("hmm_fit from a given model, with pseudocounts and labels", {
  m <- textbook()
  seqs <- hmm_simulate(m, 50, 30, seed = 2)
  labelled <- lapply(seqs, function(x) colnames(m$emis)[x])
  fit <- hmm_fit(labelled, init = m, max.iters = 5, epsilon = 0, pseudocount = 1, use.gpu = FALSE)
  expect_identical(fit$iterations, 5L)
  expect_identical(fit$status, "max_iters")
  expect_identical(dimnames(fit$model$emis), dimnames(m$emis))
  expect_true(all(fit$model$trans > 0) && all(fit$model$emis > 0))
  expect_identical(fit$init, m)
  same <- hmm_fit(seqs, init = m, max.iters = 5, epsilon = 0, pseudocount = 1, use.gpu = FALSE)
  expect_equal(unname(same$model$emis), unname(fit$model$emis))
  # Random starts are keyed by the seed.
  a <- hmm_fit(seqs, 2, 3, random.inits = 2, max.iters = 3, seed = 8, use.gpu = FALSE)
  b <- hmm_fit(seqs, 2, 3, random.inits = 2, max.iters = 3, seed = 8, use.gpu = FALSE)
  expect_identical(a$model, b$model)
  expect_length(a$start_logliks, 2)
})

test_that("edge cases: one state, one symbol, length-one sequences", {
  one <- hmm(1, matrix(1), matrix(1))
  expect_identical(unname(hmm_loglik(one, list(1, rep(1, 5)), use.gpu = FALSE)), c(0, 0))
  fit <- hmm_fit(list(c(1, 2, 2), 2), 1, 2, use.gpu = FALSE)
  expect_equal(unname(fit$model$emis[1, ]), c(0.25, 0.75))
  expect_identical(fit$status, "converged")
})

test_that("printing models and fits", {
  m <- textbook()
  expect_snapshot(print(m))
  expect_snapshot(summary(m))
  fit <- hmm_fit(hmm_simulate(m, 20, 10, seed = 1), init = m, max.iters = 3, epsilon = 0,
                 use.gpu = FALSE)
  expect_output(print(fit), "bulkem HMM fit: 2 states, 3 symbols, 20 sequences \\(200 symbols\\)")
  expect_output(print(summary(fit)), "AIC")
  expect_silent(plot(fit))
})

test_that("bad models are rejected, naming the argument", {
  expect_snapshot(error = TRUE, {
    hmm(c(0.5, 0.6), diag(2), diag(2))
    hmm(c(0.5, 0.5), matrix(c(0.5, 0.6, 0, 1), 2), diag(2))
    hmm(c(0.5, 0.5), diag(3), diag(2))
    hmm(c(0.5, 0.5), diag(2), matrix(c(1, NA, 0, 1), 2))
    hmm(c(1.5, -0.5), diag(2), diag(2))
    hmm("a", diag(2), diag(2))
    hmm(c(0.5, 0.5), 1:4, diag(2))
    hmm_loglik(list(start = 1), 1)
  })
})

test_that("bad sequences are rejected, naming the sequence and position", {
  m <- textbook()
  expect_snapshot(error = TRUE, {
    hmm_loglik(m, list(c(1, 2), c(1, NA)), use.gpu = FALSE)
    hmm_viterbi(m, list(1, 2, c(1, 4)), use.gpu = FALSE)
    hmm_posterior(m, list(c(1, 0)), use.gpu = FALSE)
    hmm_loglik(m, list(c(1, 2.5)), use.gpu = FALSE)
    hmm_loglik(m, list(c("normal", "hot")), use.gpu = FALSE)
    hmm_loglik(m, list(1, integer()), use.gpu = FALSE)
    hmm_loglik(m, list(), use.gpu = FALSE)
    hmm_loglik(m, list(1, list(2)), use.gpu = FALSE)
    hmm_loglik(m, data.frame(x = 1), use.gpu = FALSE)
  })
})

test_that("bad hmm_fit settings name their argument", {
  s <- list(c(1, 2, 3), c(2, 2))
  expect_snapshot(error = TRUE, {
    hmm_fit(s, 0, 3, use.gpu = FALSE)
    hmm_fit(s, 2, 2, use.gpu = FALSE)
    hmm_fit(s, use.gpu = FALSE)
    hmm_fit(s, 2, 3, max.iters = 0, use.gpu = FALSE)
    hmm_fit(s, 2, 3, epsilon = -1, use.gpu = FALSE)
    hmm_fit(s, 2, 3, random.inits = 1.5, use.gpu = FALSE)
    hmm_fit(s, 2, 3, pseudocount = NA, use.gpu = FALSE)
    hmm_fit(s, 2, 3, seed = -1, use.gpu = FALSE)
    hmm_fit(s, 3, 3, init = textbook(), use.gpu = FALSE)
    hmm_fit(s, init = list(1), use.gpu = FALSE)
    hmm_simulate(textbook(), 2, c(1, 2, 3))
    hmm_simulate(textbook(), 0, 5)
  })
})

test_that("use.gpu = TRUE without a GPU is a clear error", {
  skip_if(isTRUE(bulkem_backends()$usable[2]), "a GPU is usable here")
  expect_error(hmm_loglik(textbook(), list(1), use.gpu = TRUE), "no CUDA GPU is usable")
})
