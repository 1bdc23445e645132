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

test_that("simplify = TRUE gives one array of the per-sequence results, in one chunk or several", {
  set.seed(5)
  m <- random_hmm(3, 4, zeros = TRUE)
  names(m$start) <- c("s1", "s2", "s3")
  seqs <- stats::setNames(lapply(1:7, function(i) sample.int(4, 6, replace = TRUE)), paste0("q", 1:7))
  post <- hmm_posterior(m, seqs, use.gpu = FALSE)
  v <- hmm_viterbi(m, seqs, use.gpu = FALSE)
  for (size in list(NULL, 2, 7)) {
    a <- hmm_posterior(m, seqs, use.gpu = FALSE, simplify = TRUE, chunk.size = size)
    expect_identical(dim(a), c(6L, 3L, 7L))
    expect_identical(dimnames(a), list(NULL, c("s1", "s2", "s3"), paste0("q", 1:7)))
    for (i in seq_along(seqs)) expect_identical(a[, , i], post[[i]])
    expect_identical(attr(a, "loglik"), attr(post, "loglik"))
    vs <- hmm_viterbi(m, seqs, use.gpu = FALSE, simplify = TRUE, chunk.size = size)
    expect_identical(dim(vs$path), c(6L, 7L))
    expect_identical(colnames(vs$path), paste0("q", 1:7))
    for (i in seq_along(seqs)) expect_identical(vs$path[, i], v$path[[i]])
    expect_identical(vs$log_prob, v$log_prob)
  }
  # Unnamed sequences and states: no dimnames but the states'.
  u <- hmm_posterior(textbook(), list(1:3, c(3, 3, 1)), use.gpu = FALSE, simplify = TRUE)
  expect_identical(dimnames(u), list(NULL, c("Healthy", "Fever"), NULL))
  expect_null(names(attr(u, "loglik")))
  expect_null(dimnames(hmm_viterbi(textbook(), list(1:3, 1:3), use.gpu = FALSE, simplify = TRUE)$path))
  # An impossible sequence is NA in its slice only.
  imp <- hmm(c(1, 0), diag(2), diag(2))
  ai <- hmm_posterior(imp, list(c(1, 1), c(1, 2)), use.gpu = FALSE, simplify = TRUE)
  expect_true(all(is.na(ai[, , 2])) && !any(is.nan(ai)) && !anyNA(ai[, , 1]))
  expect_identical(hmm_viterbi(imp, list(c(1, 1), c(1, 2)), use.gpu = FALSE, simplify = TRUE)$path,
                   matrix(c(1L, 1L, NA, NA), 2))
  # Sequences of several lengths, and a non-flag, are errors.
  expect_error(hmm_posterior(m, list(1:3, 1:2), use.gpu = FALSE, simplify = TRUE),
               "sequence 2 has 2", class = "bulkem_error_input")
  expect_error(hmm_viterbi(m, list(1:3, 1:2), use.gpu = FALSE, simplify = TRUE),
               "one length", class = "bulkem_error_input")
  expect_error(hmm_viterbi(m, list(1:3), use.gpu = FALSE, simplify = NA), class = "bulkem_error_input")
  expect_error(hmm_posterior(m, list(1:3), use.gpu = FALSE, simplify = "yes"), class = "bulkem_error_input")
})

test_that("a model changed between calls gives its own results and is checked again", {
  # The core keeps the last models it was given (laid out, checked, on the
  # device) and finds them by their values: a matrix changed in place must
  # not be taken for the one kept.
  m <- hmm(c(0.5, 0.3, 0.2), matrix(c(.8, .1, .1, .2, .7, .1, .3, .3, .4), 3, byrow = TRUE),
           matrix(c(.5, .5, .2, .8, .9, .1), 3, byrow = TRUE))
  s <- list(c(1, 2, 2, 1, 1), c(2, 2), 1)
  again <- function(m) hmm(m$start, unname(m$trans), unname(m$emis))
  first <- hmm_loglik(m, s, use.gpu = FALSE)
  expect_identical(hmm_loglik(m, s, use.gpu = FALSE), first)
  m$trans[1, ] <- c(0.1, 0.1, 0.8)
  changed <- hmm_loglik(m, s, use.gpu = FALSE)
  expect_identical(changed, hmm_loglik(again(m), s, use.gpu = FALSE))
  expect_false(isTRUE(all.equal(changed, first)))
  m$emis[2, ] <- c(0.6, 0.4)
  expect_identical(hmm_posterior(m, s, use.gpu = FALSE), hmm_posterior(again(m), s, use.gpu = FALSE))
  expect_identical(hmm_viterbi(m, s, use.gpu = FALSE), hmm_viterbi(again(m), s, use.gpu = FALSE))
  m$trans[2, 2] <- 0.9
  expect_error(hmm_loglik(m, s, use.gpu = FALSE), "row 2 must sum to 1", class = "bulkem_error_input")
  g <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE), emission = gaussian_emission(c(0, 3), c(1, 1)))
  x <- list(c(0.1, 2.5, 3.2), c(-1, 0))
  before <- hmm_loglik(g, x, use.gpu = FALSE)
  g$emission$mean[2] <- 2
  expect_identical(hmm_loglik(g, x, use.gpu = FALSE),
                   hmm_loglik(hmm(g$start, unname(g$trans), emission = gaussian_emission(c(0, 2), c(1, 1))), x, use.gpu = FALSE))
  expect_false(isTRUE(all.equal(hmm_loglik(g, x, use.gpu = FALSE), before)))
})

test_that("a kept model changed in place where its sample does not look gives its own results", {
  # A pass starts on the kept model that matches a sample of the values
  # (64 a table) while all are compared: two transitions of row 4, at
  # positions the sample skips, moved each call.
  forward <- function(m, x) {
    a <- m$start * m$emis[, x[1]]
    ll <- log(sum(a))
    a <- a / sum(a)
    for (o in x[-1]) {
      a <- drop(a %*% m$trans) * m$emis[, o]
      ll <- ll + log(sum(a))
      a <- a / sum(a)
    }
    ll
  }
  set.seed(11)
  n <- 40
  A <- matrix(runif(n * n), n)
  B <- matrix(runif(n * 5), n)
  m <- hmm(rep(1 / n, n), A / rowSums(A), B / rowSums(B))
  s <- replicate(4, sample.int(5, 30, TRUE), simplify = FALSE)
  ref <- function(m) vapply(s, function(x) forward(m, x), 0)
  expect_equal(hmm_loglik(m, s, use.gpu = FALSE), ref(m), tolerance = 1e-12)
  for (k in 1:3) {
    d <- m$trans[4, 8] / 2
    m$trans[4, 8] <- m$trans[4, 8] - d
    m$trans[4, 9] <- m$trans[4, 9] + d
    for (again in 1:2) expect_equal(hmm_loglik(m, s, use.gpu = FALSE), ref(m), tolerance = 1e-12)
    expect_equal(attr(hmm_posterior(m, s, use.gpu = FALSE), "loglik"), ref(m), tolerance = 1e-12)
  }
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
    hmm_simulate(textbook(), -1, 5)
  })
})

# Brute force in log space (exact for any probabilities, subnormal ones
# included): log P, the best path's log-probability, posteriors.
log_brute <- function(model, obs) {
  N <- length(model$start)
  TT <- length(obs)
  paths <- as.matrix(expand.grid(rep(list(seq_len(N)), TT)))
  lp <- apply(paths, 1, function(s) {
    l <- log(model$start[s[1]]) + log(model$emis[s[1], obs[1]])
    for (t in seq_len(TT)[-1]) l <- l + log(model$trans[s[t - 1], s[t]]) + log(model$emis[s[t], obs[t]])
    l
  })
  top <- max(lp)
  ll <- if (top == -Inf) -Inf else top + log(sum(exp(lp - top)))
  post <- sapply(seq_len(N), function(i) {
    vapply(seq_len(TT), function(t) sum(exp(lp[paths[, t] == i] - ll)), numeric(1))
  })
  list(loglik = ll, best = top, posterior = matrix(post, TT, N))
}

# A probability row from sizes whose products leave the double range.
extreme_row <- function(len) {
  x <- sample(c(0, 1e-310, 1e-200, 1e-150, 1e-20, 0.25), len, replace = TRUE)
  k <- sample.int(len, 1)
  x[k] <- 0
  if (sum(x) >= 1) x <- x / 2
  x[k] <- 1 - sum(x)
  x
}

test_that("tiny and subnormal probabilities give exact answers (issue 15)", {
  # The issue's case: only state 1 emits symbol 1, with probability 1e-310.
  tiny <- hmm(c(1e-20, 1 - 1e-20), diag(2), rbind(c(1e-310, 1 - 1e-310), c(0, 1)))
  want <- log(1e-20) + log(1e-310)
  expect_equal(unname(hmm_loglik(tiny, list(1), use.gpu = FALSE)), want, tolerance = 1e-14)
  post <- hmm_posterior(tiny, list(1, c(2, 2, 1)), use.gpu = FALSE)
  expect_identical(unname(post[[1]]), matrix(c(1, 0), 1))
  expect_identical(unname(post[[2]]), matrix(c(1, 1, 1, 0, 0, 0), 3))
  expect_equal(unname(attr(post, "loglik")), c(want, want), tolerance = 1e-14)
  v <- hmm_viterbi(tiny, list(1), use.gpu = FALSE)
  expect_equal(v$log_prob[[1]], want, tolerance = 1e-14)
  # Random models mixing exact zeros, 1e-310, 1e-200 and ordinary sizes.
  set.seed(15)
  tiny_answers <- 0
  for (rep in 1:25) {
    N <- sample(1:3, 1)
    V <- sample(1:3, 1)
    rows <- function(len) matrix(replicate(N, extreme_row(len)), N, len, byrow = TRUE)
    m <- hmm(extreme_row(N), rows(N), rows(V))
    seqs <- lapply(1:3, function(i) sample.int(V, sample(1:5, 1), replace = TRUE))
    ll <- hmm_loglik(m, seqs, use.gpu = FALSE)
    v <- hmm_viterbi(m, seqs, use.gpu = FALSE)
    post <- hmm_posterior(m, seqs, use.gpu = FALSE)
    for (i in seq_along(seqs)) {
      b <- log_brute(m, seqs[[i]])
      expect_equal(ll[[i]], b$loglik, tolerance = 1e-12)
      expect_equal(v$log_prob[[i]], b$best, tolerance = 1e-12)
      if (is.finite(b$loglik)) {
        expect_equal(unname(post[[i]]), b$posterior, tolerance = 1e-10)
        tiny_answers <- tiny_answers + (b$loglik < -700)
      } else {
        expect_true(all(is.na(post[[i]])))
      }
    }
  }
  expect_gt(tiny_answers, 3)
})

test_that("a state whose probability decays below the double range is kept", {
  # Two coins that never switch: after 400 tosses of the first, the second
  # has weight 9^-400 = 1e-382; 800 tosses favouring it follow. The scaled
  # recursion used to lose it (log-likelihood -1885 instead of -1006).
  coins <- hmm(c(0.5, 0.5), diag(2), rbind(c(0.9, 0.1), c(0.1, 0.9)))
  s <- list(c(rep(1, 400), rep(2, 800)))
  want <- log(0.5) + 400 * log(0.1) + 800 * log(0.9)
  expect_equal(unname(hmm_loglik(coins, s, use.gpu = FALSE)), want, tolerance = 1e-12)
  expect_equal(unname(hmm_posterior(coins, s, use.gpu = FALSE)[[1]][, 2]), rep(1, 1200), tolerance = 1e-12)
  expect_identical(hmm_viterbi(coins, s, use.gpu = FALSE)$path[[1]], rep(2L, 1200))
  fit <- hmm_fit(s, init = coins, max.iters = 3, epsilon = 0, use.gpu = FALSE)
  expect_equal(fit$loglik_trace[1], want, tolerance = 1e-12)
  expect_true(all(is.finite(fit$loglik_trace)) && all(diff(fit$loglik_trace) >= -1e-9))
  # A state that cannot be reached but alone explains the data: no NaN.
  m <- hmm(c(1, 0), diag(2), rbind(c(0.5, 0.5), c(0, 1)))
  post <- hmm_posterior(m, list(c(1, rep(2, 2000))), use.gpu = FALSE)[[1]]
  expect_false(anyNA(post))
  expect_true(all(post[, 1] == 1))
})

# Run `code` with this session's memory limited to `bytes` (as the core
# sees it: BULKEM_MEMORY_LIMIT).
with_memory_limit <- function(bytes, code) {
  old <- Sys.getenv("BULKEM_MEMORY_LIMIT", NA)
  Sys.setenv(BULKEM_MEMORY_LIMIT = format(bytes, scientific = FALSE))
  on.exit(if (is.na(old)) Sys.unsetenv("BULKEM_MEMORY_LIMIT") else Sys.setenv(BULKEM_MEMORY_LIMIT = old))
  force(code)
}

test_that("calls that need more memory than there is are refused before allocating (issue 15)", {
  m <- textbook()
  with_memory_limit(2e9, {
    took <- system.time({
      expect_error(hmm_fit(list(c(1, 2, 3)), n.states = 1e5, n.symbols = 3),
                   "100000 x 100000 transition matrix of `n.states`", class = "bulkem_error_memory")
      expect_error(hmm_fit(list(c(1, 2, 3)), n.states = 2, n.symbols = 1e9),
                   "emission matrix of `n.symbols`", class = "bulkem_error_memory")
      expect_error(hmm_simulate(m, n = 1, length = 2^31 - 1), "simulated symbols", class = "bulkem_error_memory")
      expect_error(hmm_simulate(m, n = 1e5, length = 1e5), "10000000000 simulated symbols",
                   class = "bulkem_error_memory")
      big <- hmm(rep(1 / 1000, 1000), matrix(1 / 1000, 1000, 1000), matrix(1 / 2, 1000, 2))
      long <- list(rep(1:2, 1.5e6))
      expect_error(hmm_posterior(big, long, use.gpu = FALSE), "posterior probabilities \\(3000000 symbols",
                   class = "bulkem_error_memory")
      expect_error(hmm_posterior(big, long, use.gpu = FALSE, parallel = "future"),
                   class = "bulkem_error_memory")
    })[["elapsed"]]
    expect_lt(took, 10)
  })
  # The message says what is needed and what is there.
  err <- with_memory_limit(1e9, tryCatch(hmm_fit(list(1), n.states = 2e4, n.symbols = 2), error = identity))
  expect_s3_class(err, "bulkem_error_memory")
  expect_match(conditionMessage(err), "needs [0-9.]+ GB but only 1.0 GB is available")
})

test_that("long sequences run in checkpointed segments when memory is short, with the same results", {
  set.seed(3)
  m <- random_hmm(64, 5)
  s <- hmm_simulate(m, 2, c(140000, 50), seed = 1)
  # Back-pointers: 140,000 x 64 x 2 bytes = 18 MB; with 30 MB, more than
  # half: decoded in segments.
  full <- hmm_viterbi(m, s, use.gpu = FALSE)
  seg <- with_memory_limit(30e6, hmm_viterbi(m, s, use.gpu = FALSE))
  expect_identical(seg, full)
  # Baum-Welch: forward vectors of 60,000 x 40 x 8 bytes = 19 MB.
  m <- random_hmm(40, 4)
  s <- hmm_simulate(m, 1, 60000, seed = 2)
  full <- hmm_fit(s, init = m, max.iters = 2, epsilon = 0, use.gpu = FALSE)
  seg <- with_memory_limit(30e6, hmm_fit(s, init = m, max.iters = 2, epsilon = 0, use.gpu = FALSE))
  expect_identical(seg$model, full$model)
  expect_identical(seg$loglik_trace, full$loglik_trace)
})

test_that("hostile arguments are classed errors or checked answers", {
  m <- textbook()
  expect_identical(hmm_simulate(m, 0, 5), structure(list(), states = list()))
  expect_error(hmm_simulate(m, -1, 5), class = "bulkem_error_input")
  expect_error(hmm_simulate(m, NA, 5), class = "bulkem_error_input")
  expect_error(hmm_simulate(m, 2, 0), class = "bulkem_error_input")
  expect_error(hmm_simulate(m, 2, 1e10), class = "bulkem_error_input")
  expect_error(hmm(c(0.5, 0.5), matrix(c(NaN, 0, 0, 1), 2), diag(2)), class = "bulkem_error_input")
  expect_error(hmm(c(0.5, 0.5), diag(2), matrix(c(Inf, 0, 0, 1), 2)), class = "bulkem_error_input")
  expect_error(hmm(numeric(0), matrix(0, 0, 0), matrix(0, 0, 2)), class = "bulkem_error_input")
  s <- list(c(1, 2, 3), c(2, 2))
  expect_error(hmm_fit(s, 2, 3, random.inits = 2^25, use.gpu = FALSE), "random.inits", class = "bulkem_error_input")
  expect_error(hmm_fit(s, 2, 3, max.iters = 0, use.gpu = FALSE), class = "bulkem_error_input")
  expect_error(hmm_fit(list(), 2, 3, use.gpu = FALSE), class = "bulkem_error_input")
  expect_error(hmm_fit(list(1.5), 2, 3, use.gpu = FALSE), class = "bulkem_error_input")
  expect_error(hmm_loglik(m, list(Inf), use.gpu = FALSE), class = "bulkem_error_input")
  expect_error(hmm_loglik(m, matrix(1, 2, 2), use.gpu = FALSE), class = "bulkem_error_input")
  # A model edited after hmm() is checked again by the core.
  bad <- m
  bad$trans[1, 1] <- NaN
  expect_error(hmm_loglik(bad, list(1), use.gpu = FALSE), "trans", class = "bulkem_error_input")
  bad <- m
  bad$emis <- bad$emis[, 1:2]
  expect_error(hmm_loglik(bad, list(3), use.gpu = FALSE), class = "bulkem_error_input")
  # Factors with unused levels: the unused symbols get probability 0.
  f <- factor(c("a", "b", "a", "a"), levels = c("a", "b", "c"))
  fit <- hmm_fit(list(f), 1, seed = 1, use.gpu = FALSE)
  expect_identical(colnames(fit$model$emis), c("a", "b", "c"))
  expect_equal(unname(fit$model$emis[1, ]), c(0.75, 0.25, 0))
  expect_true(is.finite(fit$loglik))
})

test_that("use.gpu = TRUE without a GPU is a clear error", {
  skip_if(isTRUE(bulkem_backends()$usable[2]), "a GPU is usable here")
  expect_error(hmm_loglik(textbook(), list(1), use.gpu = TRUE), "no CUDA GPU is usable")
})

test_that("sequences of codes are read in parallel as R would flatten them, and a bad one is still found", {
  set.seed(9)
  seqs <- list(sample.int(5, 70000, replace = TRUE), as.double(sample.int(5, 9, replace = TRUE)), 3L)
  s <- check_seqs(seqs, NULL, 5, call = environment())
  expect_identical(s$obs, as.integer(unlist(seqs)))
  expect_identical(s$lengths, c(70000L, 9L, 1L))
  for (bad in list(0, 1.5, NA, 6, Inf)) {
    x <- seqs
    x[[1]] <- as.double(x[[1]])
    x[[1]][12345] <- bad
    expect_error(check_seqs(x, NULL, 5, call = environment()), "Sequence 1 has .* at position 12345",
                 class = "bulkem_error_input")
  }
  y <- seqs
  y[[1]][54321] <- NA
  expect_error(check_seqs(y, NULL, 5, call = environment()), "position 54321", class = "bulkem_error_input")
  # Sequences that are not plain code vectors leave the core's path and get
  # R's message, naming the sequence.
  for (odd in list(matrix(1L, 2, 2), integer(0), c(TRUE, FALSE), factor("a"))) {
    z <- c(seqs, list(odd))
    expect_error(check_seqs(z, NULL, 5, call = environment()), "Sequence 4", class = "bulkem_error_input")
  }
  # A factor is read by its labels, not its codes.
  f <- list(factor(c("b", "a"), levels = c("b", "a")), 1L)
  expect_identical(check_seqs(f, c("a", "b"), 2, call = environment())$obs, c(2L, 1L, 1L))
  expect_identical(names(check_seqs(list(p = 1L, q = c(2, 1)), NULL, 2, call = environment())), c("obs", "lengths", "names"))
  expect_identical(check_seqs(list(p = 1L, q = c(2, 1)), NULL, 2, call = environment())$names, c("p", "q"))
})

test_that("numeric sequences are read by the core as R would flatten them, and odd ones get R's message", {
  g <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE), emission = gaussian_emission(c(-1, 1), c(1, 1)))
  seqs <- list(a = c(0.5, -1.25, 2), b = 3L, c = rnorm(70000))
  s <- check_numeric_seqs(seqs, "seqs", "gaussian", "finite number", is.finite, call = environment())
  expect_identical(s$obs, as.double(unlist(seqs, use.names = FALSE)))
  expect_identical(s$lengths, c(3L, 1L, 70000L))
  expect_identical(s$names, c("a", "b", "c"))
  expect_identical(hmm_loglik(g, seqs, use.gpu = FALSE), hmm_loglik(g, lapply(seqs, as.double), use.gpu = FALSE))
  expect_error(hmm_loglik(g, list(1, c(2L, NA)), use.gpu = FALSE), "Sequence 2 has NA at position 2",
               class = "bulkem_error_input")
  # A value the core's test refuses as it flattens (many values: in its
  # threads) is found and named by R's checks.
  long <- seqs
  long$c[65537] <- Inf
  expect_error(hmm_loglik(g, long, use.gpu = FALSE), "Sequence 3 has Inf at position 65537", class = "bulkem_error_input")
  long$c[65537] <- NaN
  expect_error(hmm_loglik(g, long, use.gpu = FALSE), "Sequence 3 has NaN at position 65537", class = "bulkem_error_input")
  p <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE), emission = poisson_emission(c(1, 5)))
  counts <- list(1:5, rep(c(0, 3), 40000))
  expect_equal(length(hmm_loglik(p, counts, use.gpu = FALSE)), 2)
  counts[[2]][70001] <- 2.5
  expect_error(hmm_loglik(p, counts, use.gpu = FALSE), "Sequence 2 has 2.5 at position 70001", class = "bulkem_error_input")
  counts[[2]][70001] <- -1
  expect_error(hmm_loglik(p, counts, use.gpu = FALSE), "Sequence 2 has -1 at position 70001", class = "bulkem_error_input")
  expect_error(hmm_loglik(g, list(1, matrix(1, 2, 2)), use.gpu = FALSE), "Sequence 2", class = "bulkem_error_input")
  expect_error(hmm_loglik(g, list(1, factor("a")), use.gpu = FALSE), "Sequence 2", class = "bulkem_error_input")
  expect_error(hmm_loglik(g, list(1, Sys.Date()), use.gpu = FALSE), "Sequence 2", class = "bulkem_error_input")
})
