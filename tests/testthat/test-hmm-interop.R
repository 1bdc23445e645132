# Issue 17, HMM parts: a fit works wherever a model does, predict() decodes
# sequences, hmm_fit() spreads its random starts over futures and reports
# progress.

weather <- function() {
  hmm(c(Healthy = 0.6, Fever = 0.4),
      matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
      matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE,
             dimnames = list(NULL, c("normal", "cold", "dizzy"))))
}

# A small fit with several starts and labelled states and symbols.
small_fit <- function(random.inits = 3, ...) {
  seqs <- hmm_simulate(weather(), 40, 5:44, seed = 6)
  list(seqs = seqs, fit = hmm_fit(seqs, 2, 3, random.inits = random.inits, max.iters = 30,
                                  seed = 11, use.gpu = FALSE, ...))
}

# A fit without the timing (the only field that differs between runs).
fit_only <- function(fit) {
  fit$seconds <- NULL
  fit
}

test_that("every hmm_*() takes a fit as well as its model, with identical results", {
  x <- small_fit()
  fit <- x$fit
  seqs <- x$seqs[1:7]
  names(seqs) <- letters[1:7]
  expect_s3_class(fit, "bulkem_hmm_fit")
  # The fitted model differs from the one the data came from, so a
  # function that ignored the fit would fail.
  expect_false(isTRUE(all.equal(hmm_loglik(fit, seqs, use.gpu = FALSE),
                                hmm_loglik(weather(), seqs, use.gpu = FALSE))))
  expect_identical(hmm_loglik(fit, seqs, use.gpu = FALSE), hmm_loglik(fit$model, seqs, use.gpu = FALSE))
  expect_identical(hmm_viterbi(fit, seqs, use.gpu = FALSE), hmm_viterbi(fit$model, seqs, use.gpu = FALSE))
  expect_identical(hmm_posterior(fit, seqs, use.gpu = FALSE),
                   hmm_posterior(fit$model, seqs, use.gpu = FALSE))
  expect_identical(hmm_simulate(fit, 3, c(4, 1, 9), seed = 2),
                   hmm_simulate(fit$model, 3, c(4, 1, 9), seed = 2))
  # Continuing from a fit starts from its model.
  more <- hmm_fit(x$seqs, init = fit, max.iters = 2, epsilon = 0, seed = 1, use.gpu = FALSE)
  expect_identical(more$init, fit$model)
  expect_identical(fit_only(more),
                   fit_only(hmm_fit(x$seqs, init = fit$model, max.iters = 2, epsilon = 0, seed = 1,
                                    use.gpu = FALSE)))
  # Also with the other arguments of the passes.
  expect_identical(hmm_loglik(fit, seqs, use.gpu = FALSE, chunk.size = 2),
                   hmm_loglik(fit$model, seqs, use.gpu = FALSE))
})

test_that("a failed fit is refused, its model only when asked for explicitly", {
  # Symbol 2 is impossible under the starting model: the fit fails.
  stuck <- hmm(c(1, 0), diag(2), diag(2))
  seqs <- list(c(1, 2, 1), c(1, 1))
  failed <- hmm_fit(seqs, init = stuck, use.gpu = FALSE)
  expect_identical(failed$status, "failed")
  err <- expect_error(hmm_loglik(failed, seqs, use.gpu = FALSE), class = "bulkem_error_input")
  expect_match(conditionMessage(err), "failed")
  expect_match(conditionMessage(err), "model$model", fixed = TRUE)
  expect_error(predict(failed, seqs, use.gpu = FALSE), class = "bulkem_error_input")
  expect_error(hmm_fit(seqs, init = failed, use.gpu = FALSE), class = "bulkem_error_input")
  expect_identical(unname(hmm_loglik(failed$model, seqs, use.gpu = FALSE)), c(-Inf, 0))
})

test_that("a model argument that is neither a model nor a fit is a classed error", {
  for (bad in list(list(start = 1), 1:3, NULL)) {
    err <- expect_error(hmm_loglik(bad, list(1), use.gpu = FALSE), class = "bulkem_error_input")
    expect_match(conditionMessage(err), "hmm_fit()", fixed = TRUE)
    # The message no longer tells the user to do what they did.
    expect_no_match(conditionMessage(err), "fit$model", fixed = TRUE)
  }
  expect_error(hmm_viterbi(list(), list(1)), class = "bulkem_error_input")
  expect_error(hmm_posterior("x", list(1)), class = "bulkem_error_input")
  expect_error(hmm_simulate(data.frame(), 1, 1), class = "bulkem_error_input")
  expect_error(hmm_fit(list(1), init = list(start = 1)), class = "bulkem_error_input")
  # A fit whose model was replaced by something else.
  fit <- small_fit(1)$fit
  fit$model <- unclass(fit$model)
  expect_error(hmm_loglik(fit, list(1), use.gpu = FALSE), class = "bulkem_error_input")
})

test_that("predict() gives the Viterbi paths or the posteriors of new sequences", {
  x <- small_fit()
  fit <- x$fit
  seqs <- stats::setNames(x$seqs[c(2, 9, 30)], c("s2", "s9", "s30"))
  v <- hmm_viterbi(fit, seqs, use.gpu = FALSE)
  states <- predict(fit, seqs, use.gpu = FALSE)
  expect_identical(states, structure(v$path, log_prob = v$log_prob))
  expect_named(states, names(seqs))
  expect_identical(predict(fit, newdata = seqs, type = "states", use.gpu = FALSE), states)
  post <- predict(fit, seqs, type = "posterior", use.gpu = FALSE)
  expect_identical(post, hmm_posterior(fit, seqs, use.gpu = FALSE))
  # The states are the posterior's most probable ones where those are clear.
  clear <- apply(post$s30, 1, max) > 0.99
  expect_true(any(clear))
  expect_identical(states$s30[clear], max.col(post$s30)[clear])
  # Models predict too; labelled sequences and a single vector work.
  m <- weather()
  labels <- list(c("normal", "cold", "dizzy"), factor(c("dizzy", "dizzy")))
  expect_identical(predict(m, labels, use.gpu = FALSE)[[1]], c(1L, 1L, 2L))
  expect_identical(predict(m, c(1, 2, 3), type = "posterior", use.gpu = FALSE),
                   hmm_posterior(m, list(c(1, 2, 3)), use.gpu = FALSE))
  # An impossible sequence: NA path and posteriors, as hmm_viterbi/posterior.
  stuck <- hmm(c(1, 0), diag(2), diag(2))
  expect_identical(predict(stuck, list(c(1, 2)), use.gpu = FALSE)[[1]], c(NA_integer_, NA_integer_))
  expect_true(all(is.na(predict(stuck, list(c(1, 2)), type = "posterior", use.gpu = FALSE)[[1]])))
})

test_that("predict() without newdata, or with arguments it cannot honour, is a classed error", {
  x <- small_fit(1)
  err <- expect_error(predict(x$fit), class = "bulkem_error_input")
  expect_match(conditionMessage(err), "keeps no sequences")
  expect_error(predict(weather()), class = "bulkem_error_input")
  err <- expect_error(predict(x$fit, seqs = x$seqs), class = "bulkem_error_input")
  expect_match(conditionMessage(err), "newdata")
  expect_error(predict(x$fit, x$seqs, se.fit = TRUE), class = "bulkem_error_input")
  expect_error(predict(x$fit, x$seqs, type = "class"), class = "bulkem_error_input")
  # Sequence errors name `newdata`, the argument the user gave.
  err <- expect_error(predict(x$fit, list(c(1, 7)), use.gpu = FALSE), class = "bulkem_error_input")
  expect_match(conditionMessage(err), "`newdata`")
  expect_error(predict(x$fit, x$seqs, use.gpu = "yes"), class = "bulkem_error_input")
  expect_error(predict(x$fit, x$seqs, parallel = "cluster"), class = "bulkem_error_input")
})

test_that("hmm_fit gives the same fit however its starts are chunked", {
  ref <- small_fit(5, chunk.size = 5)$fit
  expect_length(ref$start_logliks, 5)
  for (size in list(1, 2, 3, NULL)) {
    expect_identical(fit_only(small_fit(5, chunk.size = size)$fit), fit_only(ref))
  }
  # The chunks' starts are the starts of one call: start k keyed by k.
  one <- small_fit(1)$fit
  expect_identical(ref$start_logliks[1], one$start_logliks)
  expect_error(small_fit(2, chunk.size = 0), class = "bulkem_error_input")
  expect_error(small_fit(2, parallel = "cluster"), class = "bulkem_error_input")
  expect_error(hmm_fit(list(1:3), 2, 3, use.gpu = "no"), class = "bulkem_error_input")
})

test_that("the kept start is chosen over all chunks as one call would choose it", {
  part <- function(ll, pick, what) {
    list(start_logliks = ll, best_start = as.integer(pick), model = what, backend = "cpu")
  }
  no_refit <- function(start) stop("no re-fit expected")
  # Start 3 of 4 is best.
  m <- merge_fit_chunks(list(part(c(-10, -9), 2, "a"), part(c(-8, -12), 3, "b")), no_refit)
  expect_identical(m[c("model", "best_start", "start_logliks")],
                   list(model = "b", best_start = 3L, start_logliks = c(-10, -9, -8, -12)))
  # Ties (within 1e-9 relative) go to the lowest start.
  m <- merge_fit_chunks(list(part(c(-100, -120), 1, "a"), part(c(-100 + 5e-8, -200), 3, "b")), no_refit)
  expect_identical(m[c("model", "best_start")], list(model = "a", best_start = 1L))
  # Start 2 ties with the best of all (start 3) but start 1 does not, though
  # start 1 ties with start 2, the best of its chunk, which kept start 1:
  # start 2 is fitted again.
  asked <- NULL
  refit <- function(start) {
    asked <<- start
    part(-100 - 6e-8, start, "refit")
  }
  m <- merge_fit_chunks(list(part(c(-100 - 1.5e-7, -100 - 6e-8), 1, "a"), part(-100, 3, "b")), refit)
  expect_identical(asked, 2L)
  expect_identical(m$model, "refit")
  expect_identical(m$best_start, 2L)
  expect_identical(m$start_logliks, c(-100 - 1.5e-7, -100 - 6e-8, -100))
  # Every start failed: start 1, as the core keeps.
  m <- merge_fit_chunks(list(part(c(-Inf, -Inf), 1, "a"), part(-Inf, 3, "b")), no_refit)
  expect_identical(m[c("model", "best_start")], list(model = "a", best_start = 1L))
})

test_that("hmm_fit with parallel = 'future' equals parallel = 'none' for the same seed", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  ref <- small_fit(4)$fit
  # Futures run here first (no processes needed).
  oplan <- future::plan(future::sequential)
  on.exit(future::plan(oplan), add = TRUE)
  expect_identical(fit_only(small_fit(4, parallel = "future", chunk.size = 3)$fit), fit_only(ref))
  # A given starting model is one future.
  x <- small_fit(1)
  given <- hmm_fit(x$seqs, init = weather(), max.iters = 5, seed = 1, use.gpu = FALSE, parallel = "future")
  expect_identical(fit_only(given),
                   fit_only(hmm_fit(x$seqs, init = weather(), max.iters = 5, seed = 1, use.gpu = FALSE)))

  skip_on_cran()
  future::plan(future::multisession, workers = 2)
  par <- small_fit(4, parallel = "future", chunk.size = 1)$fit
  expect_identical(fit_only(par), fit_only(ref))
  expect_identical(par$backend, "cpu")
  # Default chunking, and set.seed() reproducing the seed the call draws.
  set.seed(3)
  a <- hmm_fit(x$seqs, 2, 3, random.inits = 3, max.iters = 10, use.gpu = FALSE, parallel = "future")
  set.seed(3)
  b <- hmm_fit(x$seqs, 2, 3, random.inits = 3, max.iters = 10, use.gpu = FALSE)
  expect_identical(fit_only(a), fit_only(b))
})

test_that("hmm_fit reports progress per start, here and from futures", {
  skip_if_not_installed("progressr")
  old <- options(progressr.enable = TRUE)
  on.exit(options(old), add = TRUE)
  count_steps <- function(expr) {
    steps <- 0
    value <- withCallingHandlers(
      expr,
      progression = function(p) if (identical(p$type, "update")) steps <<- steps + p$amount
    )
    list(steps = steps, value = value)
  }
  here <- count_steps(small_fit(5)$fit)
  expect_equal(here$steps, 5)
  options(progressr.enable = FALSE)
  expect_identical(fit_only(here$value), fit_only(small_fit(5, chunk.size = 5)$fit))
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  options(progressr.enable = TRUE)
  oplan <- future::plan(future::sequential)
  on.exit(future::plan(oplan), add = TRUE)
  there <- count_steps(small_fit(5, parallel = "future", chunk.size = 2)$fit)
  expect_equal(there$steps, 5)
  expect_identical(fit_only(there$value), fit_only(here$value))
})
