# Gaussian and Poisson emissions through the R API: brute force, recovery,
# input checks, variance floors, futures and the methods of both classes.

two_state_trans <- matrix(c(0.9, 0.1, 0.25, 0.75), 2, byrow = TRUE)

gauss_model <- function() {
  hmm(c(0.3, 0.7), two_state_trans, emission = gaussian_emission(c(calm = -1, busy = 2.5), c(0.8, 1.5)))
}

pois_model <- function() {
  hmm(c(0.6, 0.4), two_state_trans, emission = poisson_emission(c(0.7, 6)))
}

# The density of observation x in every state.
emission_density <- function(model, x) {
  e <- model$emission
  switch(e$family,
    gaussian = stats::dnorm(x, e$mean, e$sd),
    poisson = stats::dpois(x, e$rate)
  )
}

# Brute force over all N^T state paths: log P, the best path and its log
# probability, and the posteriors.
brute_force <- function(model, obs) {
  N <- length(model$start)
  TT <- length(obs)
  paths <- as.matrix(expand.grid(rep(list(seq_len(N)), TT)))
  dens <- vapply(obs, function(x) emission_density(model, x), numeric(N))
  dens <- matrix(dens, N)
  p <- apply(paths, 1, function(s) {
    pr <- model$start[s[1]] * dens[s[1], 1]
    for (t in seq_len(TT)[-1]) pr <- pr * model$trans[s[t - 1], s[t]] * dens[s[t], t]
    pr
  })
  post <- sapply(seq_len(N), function(i) {
    vapply(seq_len(TT), function(t) sum(p[paths[, t] == i]) / sum(p), numeric(1))
  })
  list(loglik = log(sum(p)), best = log(max(p)), path = unname(paths[which.max(p), ]),
       posterior = matrix(post, TT, N))
}

# A fit without its timing (the only field that differs between runs).
fit_only <- function(fit) {
  fit$seconds <- NULL
  fit
}

test_that("Gaussian and Poisson passes match brute force over all paths", {
  set.seed(21)
  cases <- list(
    list(model = gauss_model(), seqs = list(0.3, c(-1.2, 2.8), c(0, 1, 2, 3), c(2.4, -0.7, 5.1, -3, 1.1))),
    list(model = pois_model(), seqs = list(0L, c(3, 0), c(1, 7, 0, 2), c(0, 0, 12, 5, 1)))
  )
  for (case in cases) {
    m <- case$model
    ll <- hmm_loglik(m, case$seqs, use.gpu = FALSE)
    v <- hmm_viterbi(m, case$seqs, use.gpu = FALSE)
    post <- hmm_posterior(m, case$seqs, use.gpu = FALSE)
    for (i in seq_along(case$seqs)) {
      b <- brute_force(m, case$seqs[[i]])
      expect_equal(ll[[i]], b$loglik, tolerance = 1e-10)
      expect_equal(v$log_prob[[i]], b$best, tolerance = 1e-10)
      expect_identical(v$path[[i]], as.integer(b$path))
      expect_equal(unname(post[[i]]), b$posterior, tolerance = 1e-10)
    }
    expect_equal(attr(post, "loglik"), ll)
    expect_identical(colnames(post[[1]]), names(m$start))
  }
  # Random models and sequences, T up to 5.
  for (rep in 1:6) {
    trans <- matrix(stats::runif(4), 2)
    trans <- trans / rowSums(trans)
    start <- stats::runif(2)
    start <- start / sum(start)
    g <- hmm(start, trans, emission = gaussian_emission(stats::rnorm(2, sd = 2), stats::runif(2, 0.3, 2)))
    p <- hmm(start, trans, emission = poisson_emission(stats::runif(2, 0, 8)))
    gs <- lapply(1:5, function(TT) stats::rnorm(TT, sd = 2))
    ps <- lapply(1:5, function(TT) stats::rpois(TT, 3))
    for (x in list(list(g, gs), list(p, ps))) {
      ll <- hmm_loglik(x[[1]], x[[2]], use.gpu = FALSE)
      v <- hmm_viterbi(x[[1]], x[[2]], use.gpu = FALSE)
      post <- hmm_posterior(x[[1]], x[[2]], use.gpu = FALSE)
      for (i in seq_along(x[[2]])) {
        b <- brute_force(x[[1]], x[[2]][[i]])
        expect_equal(ll[[i]], b$loglik, tolerance = 1e-10)
        expect_equal(v$log_prob[[i]], b$best, tolerance = 1e-10)
        expect_identical(v$path[[i]], as.integer(b$path))
        expect_equal(unname(post[[i]]), b$posterior, tolerance = 1e-10)
      }
    }
  }
})

test_that("a Poisson state with rate 0 emits only zeros", {
  m <- hmm(c(0.5, 0.5), two_state_trans, emission = poisson_emission(c(0, 3)))
  b <- brute_force(m, c(0, 2, 0))
  expect_equal(unname(hmm_loglik(m, list(c(0, 2, 0)), use.gpu = FALSE)), b$loglik, tolerance = 1e-12)
  post <- hmm_posterior(m, list(c(0, 2, 0)), use.gpu = FALSE)[[1]]
  expect_identical(unname(post[2, ]), c(0, 1))
})

test_that("models carry their emission, state labels and family", {
  g <- gauss_model()
  expect_s3_class(g, "bulkem_hmm")
  expect_s3_class(g$emission, c("bulkem_gaussian_emission", "bulkem_emission"), exact = TRUE)
  expect_null(g[["emis"]])
  expect_identical(names(g$start), c("calm", "busy"))
  expect_identical(dimnames(g$trans), list(from = c("calm", "busy"), to = c("calm", "busy")))
  expect_identical(g$emission$mean, c(calm = -1, busy = 2.5))
  expect_identical(g$emission$sd, c(calm = 0.8, busy = 1.5))
  # Labels of start win over the emission's; sd's names count too.
  g2 <- hmm(c(a = 0.5, b = 0.5), two_state_trans, emission = gaussian_emission(c(x = 0, y = 1), c(1, 1)))
  expect_identical(names(g2$emission$mean), c("a", "b"))
  g3 <- hmm(c(0.5, 0.5), two_state_trans, emission = gaussian_emission(c(0, 1), c(lo = 1, hi = 1)))
  expect_identical(names(g3$start), c("lo", "hi"))
  p <- hmm(c(0.5, 0.5), two_state_trans, emission = poisson_emission(c(few = 1, many = 9)))
  expect_identical(names(p$start), c("few", "many"))
  expect_s3_class(p$emission, "bulkem_poisson_emission")
  # An emission object given as the third argument is the emission.
  expect_identical(hmm(c(0.3, 0.7), two_state_trans, gaussian_emission(c(calm = -1, busy = 2.5), c(0.8, 1.5))), g)
  # A categorical emission gives the model of `emis`.
  emis <- rbind(c(0.2, 0.8), c(0.6, 0.4))
  expect_identical(hmm(c(0.5, 0.5), two_state_trans, emission = categorical_emission(emis)),
                   hmm(c(0.5, 0.5), two_state_trans, emis))
  ce <- categorical_emission(emis)
  expect_s3_class(ce, "bulkem_categorical_emission")
  expect_identical(dim(ce$probs), c(2L, 2L))
})

test_that("simulated sequences are numbers and counts, reproducibly", {
  g <- gauss_model()
  a <- hmm_simulate(g, 4, c(1, 5, 50, 200), seed = 3)
  expect_identical(a, hmm_simulate(g, 4, c(1, 5, 50, 200), seed = 3))
  expect_true(all(vapply(a, is.double, NA)))
  expect_identical(lengths(a), c(1L, 5L, 50L, 200L))
  states <- unlist(attr(a, "states"))
  x <- unlist(a)
  expect_true(all(states %in% 1:2))
  # Each state's observations have about its mean.
  expect_equal(mean(x[states == 2]), 2.5, tolerance = 0.2)
  p <- pois_model()
  b <- hmm_simulate(p, 3, 100, seed = 4)
  expect_true(all(vapply(b, is.integer, NA)))
  expect_true(all(unlist(b) >= 0))
  # Counts beyond an integer come back as doubles (whole numbers).
  huge <- hmm(1, matrix(1), emission = poisson_emission(1e12))
  h <- hmm_simulate(huge, 1, 3, seed = 1)[[1]]
  expect_true(is.double(h) && all(h == round(h)) && all(abs(h - 1e12) < 1e7))
})

test_that("Baum-Welch recovers a known Gaussian and a known Poisson model", {
  truth <- hmm(c(0.7, 0.3), matrix(c(0.92, 0.08, 0.15, 0.85), 2, byrow = TRUE),
               emission = gaussian_emission(c(0, 4), c(1, 0.6)))
  seqs <- hmm_simulate(truth, 300, 60, seed = 5)
  fit <- hmm_fit(seqs, 2, emission = "gaussian", random.inits = 4, max.iters = 500, epsilon = 1e-8,
                 seed = 2, use.gpu = FALSE)
  expect_s3_class(fit, "bulkem_hmm_fit")
  expect_s3_class(fit$model$emission, "bulkem_gaussian_emission")
  expect_identical(fit$status, "converged")
  expect_false(any(fit$floored))
  expect_identical(names(fit$floored), c("1", "2"))
  expect_true(all(diff(fit$loglik_trace) >= -1e-9 * abs(fit$loglik)))
  expect_equal(fit$loglik, sum(hmm_loglik(fit, seqs, use.gpu = FALSE)), tolerance = 1e-10)
  o <- order(fit$model$emission$mean)
  expect_equal(unname(fit$model$emission$mean[o]), c(0, 4), tolerance = 0.03)
  expect_equal(unname(fit$model$emission$sd[o]), c(1, 0.6), tolerance = 0.03)
  expect_equal(unname(fit$model$trans[o, o]), unname(truth$trans), tolerance = 0.03)
  expect_equal(unname(fit$model$start[o]), unname(truth$start), tolerance = 0.1)
  expect_identical(attr(logLik(fit), "df"), 7L)
  expect_identical(nobs(fit), 18000)

  truth <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
               emission = poisson_emission(c(1, 7)))
  seqs <- hmm_simulate(truth, 300, 60, seed = 6)
  fit <- hmm_fit(seqs, 2, emission = poisson_emission(c(1, 1)), random.inits = 3, max.iters = 500,
                 epsilon = 1e-8, seed = 3, use.gpu = FALSE)
  expect_identical(fit$status, "converged")
  expect_s3_class(fit$model$emission, "bulkem_poisson_emission")
  o <- order(fit$model$emission$rate)
  expect_equal(unname(fit$model$emission$rate[o]), c(1, 7), tolerance = 0.03)
  expect_equal(unname(fit$model$trans[o, o]), unname(truth$trans), tolerance = 0.03)
  expect_identical(attr(logLik(fit), "df"), 5L)
  expect_false(any(fit$floored))
  # Continuing from a fit, or from a given model, keeps the family.
  more <- hmm_fit(seqs, init = fit, max.iters = 2, epsilon = 0, use.gpu = FALSE)
  expect_identical(more$init, fit$model)
  expect_s3_class(more$model$emission, "bulkem_poisson_emission")
  expect_identical(hmm_fit(seqs, init = fit, emission = "poisson", max.iters = 2, epsilon = 0,
                           use.gpu = FALSE)$model, more$model)
})

test_that("invalid emissions, models and observations are classed errors", {
  input <- "bulkem_error_input"
  # Parameters
  expect_error(gaussian_emission(c(0, 1), c(1, 0)), "sd", class = input)
  expect_error(gaussian_emission(c(0, 1), c(1, -2)), "Element 2", class = input)
  expect_error(gaussian_emission(c(0, NA), c(1, 1)), "mean", class = input)
  expect_error(gaussian_emission(c(0, Inf), c(1, 1)), "mean", class = input)
  expect_error(gaussian_emission(c(0, 1), c(1, 1, 1)), "one value per state", class = input)
  expect_error(gaussian_emission("a", 1), "numeric vector", class = input)
  expect_error(gaussian_emission(numeric(0), numeric(0)), class = input)
  expect_error(poisson_emission(c(1, -0.5)), "rate", class = input)
  expect_error(poisson_emission(c(1, NaN)), "rate", class = input)
  expect_error(poisson_emission(matrix(1, 2, 2)), "rate", class = input)
  expect_error(categorical_emission(c(0.5, 0.5)), "probs", class = input)
  expect_error(categorical_emission(rbind(c(0.5, 0.6))), "sum to 1", class = input)
  # Models
  expect_error(hmm(c(0.5, 0.5), two_state_trans, emission = gaussian_emission(c(0, 1, 2), c(1, 1, 1))),
               "one state per element of `start`", class = input)
  expect_error(hmm(c(0.5, 0.5), two_state_trans, emission = poisson_emission(1)), class = input)
  expect_error(hmm(c(0.5, 0.5), two_state_trans, diag(2), emission = poisson_emission(c(1, 2))),
               "both", class = input)
  expect_error(hmm(c(0.5, 0.5), two_state_trans), "emis", class = input)
  expect_error(hmm(c(0.5, 0.5), two_state_trans, emission = list(family = "gaussian")), class = input)
  # Observations, naming the sequence and the position
  g <- gauss_model()
  p <- pois_model()
  expect_error(hmm_loglik(g, list(c(1, 2), c(0, NaN)), use.gpu = FALSE), "Sequence 2 has NaN at position 2",
               class = input)
  expect_error(hmm_viterbi(g, list(c(1, Inf)), use.gpu = FALSE), "Sequence 1 has Inf at position 2", class = input)
  expect_error(hmm_posterior(g, list(-Inf), use.gpu = FALSE), "finite", class = input)
  expect_error(hmm_loglik(g, list(c(1, NA)), use.gpu = FALSE), "missing", class = input)
  expect_error(hmm_loglik(g, list(c("a", "b")), use.gpu = FALSE), "numeric vector", class = input)
  expect_error(hmm_loglik(g, list(numeric(0)), use.gpu = FALSE), "at least one observation", class = input)
  expect_error(hmm_loglik(p, list(c(1, -1)), use.gpu = FALSE), "Sequence 1 has -1 at position 2", class = input)
  expect_error(hmm_loglik(p, list(3, c(1, 2.5)), use.gpu = FALSE), "Sequence 2 has 2.5 at position 2",
               class = input)
  expect_error(hmm_loglik(p, list(c(1, NA)), use.gpu = FALSE), "missing", class = input)
  expect_error(hmm_viterbi(p, list(Inf), use.gpu = FALSE), "count", class = input)
  expect_error(hmm_posterior(p, list(factor(c("a", "b"))), use.gpu = FALSE), class = input)
  expect_error(predict(p, list(c(0, -2)), use.gpu = FALSE), "`newdata`", class = input)
  expect_error(hmm_fit(list(c(1, NaN)), 2, emission = "gaussian", use.gpu = FALSE), "NaN", class = input)
  expect_error(hmm_fit(list(c(1, 0.5)), 2, emission = "poisson", use.gpu = FALSE), "0.5", class = input)
  # Fit settings that do not apply to the family
  s <- hmm_simulate(g, 3, 10, seed = 1)
  expect_error(hmm_fit(list(c(1, 2, 1)), 2, 2, var.floor = 0.1, use.gpu = FALSE), "var.floor", class = input)
  expect_error(hmm_fit(s, 2, 3, emission = "gaussian", use.gpu = FALSE), "n.symbols", class = input)
  expect_error(hmm_fit(s, 2, emission = "poisson", var.floor = 1, use.gpu = FALSE), "var.floor", class = input)
  expect_error(hmm_fit(s, 2, emission = "gaussian", var.floor = 0, use.gpu = FALSE), "var.floor", class = input)
  expect_error(hmm_fit(s, 2, emission = "gaussian", var.floor = c(1, 2), use.gpu = FALSE), "var.floor",
               class = input)
  expect_error(hmm_fit(s, 2, emission = "weibull", use.gpu = FALSE), "emission", class = input)
  expect_error(hmm_fit(s, init = g, emission = "poisson", use.gpu = FALSE), "family of `init`", class = input)
  expect_error(hmm_fit(s, 3, init = g, use.gpu = FALSE), "n.states", class = input)
})

test_that("error messages of the new families", {
  g <- gauss_model()
  expect_snapshot(error = TRUE, {
    gaussian_emission(c(0, 1), c(1, 0))
    gaussian_emission(c(0, 1), 1)
    poisson_emission(c(2, -1))
    hmm(c(0.5, 0.5), two_state_trans, emission = poisson_emission(1:3))
    hmm_loglik(g, list(c(1, 2), c(0, NaN)), use.gpu = FALSE)
    hmm_loglik(pois_model(), list(c(0, 1, 2.5)), use.gpu = FALSE)
    hmm_fit(list(1:3), 2, 3, emission = "gaussian", use.gpu = FALSE)
    hmm_fit(list(1:3), 2, 3, var.floor = 1, use.gpu = FALSE)
  })
})

test_that("a state collapsing onto one observation is held at the variance floor, with a warning", {
  set.seed(4)
  x <- c(stats::rnorm(39), 100)
  init <- hmm(c(0.5, 0.5), matrix(0.5, 2, 2), emission = gaussian_emission(c(0, 100), c(1, 1)))
  w <- NULL
  fit <- withCallingHandlers(
    hmm_fit(list(x), init = init, var.floor = 1e-4, max.iters = 50, use.gpu = FALSE),
    warning = function(cnd) {
      w <<- cnd
      invokeRestart("muffleWarning")
    }
  )
  expect_s3_class(w, "bulkem_warning_variance_floor")
  expect_s3_class(w, "bulkem_warning")
  msg <- conditionMessage(w)
  expect_match(msg, "\"2\"")
  expect_match(msg, "1e-04", fixed = TRUE)
  expect_match(msg, "unbounded")
  expect_match(msg, "var.floor")
  expect_identical(fit$floored, c(`1` = FALSE, `2` = TRUE))
  expect_equal(unname(fit$model$emission$sd[2]), 0.01, tolerance = 1e-12)
  expect_equal(unname(fit$model$emission$mean[2]), 100, tolerance = 1e-8)
  expect_output(print(fit), "Variance held at the floor in state 2")
  expect_output(print(summary(fit)), "Variance held at the floor")
  # The default floor (1e-6 x the variance of all observations) is named too.
  expect_warning(d <- hmm_fit(list(x), init = init, max.iters = 50, use.gpu = FALSE),
                 "default", class = "bulkem_warning_variance_floor")
  expect_true(d$floored[[2]])
  n <- length(x)
  expect_equal(unname(d$model$emission$sd[2])^2, 1e-6 * stats::var(x) * (n - 1) / n, tolerance = 1e-8)
  # No warning when no state is floored.
  expect_no_warning(ok <- hmm_fit(hmm_simulate(gauss_model(), 20, 30, seed = 1), 2, emission = "gaussian", seed = 1,
                use.gpu = FALSE))
  expect_false(any(ok$floored))
})

test_that("parallel = 'future' gives identical Gaussian and Poisson results", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  g <- gauss_model()
  seqs <- hmm_simulate(g, 23, 5:27, seed = 3)
  ll <- hmm_loglik(g, seqs, use.gpu = FALSE)
  vit <- hmm_viterbi(g, seqs, use.gpu = FALSE)
  post <- hmm_posterior(g, seqs, use.gpu = FALSE)
  fit <- hmm_fit(seqs, 2, emission = "gaussian", random.inits = 4, max.iters = 30, seed = 9, use.gpu = FALSE)
  p <- pois_model()
  counts <- hmm_simulate(p, 11, 20, seed = 2)
  pfit <- hmm_fit(counts, 2, emission = "poisson", random.inits = 3, max.iters = 30, seed = 9, use.gpu = FALSE)
  oplan <- future::plan(future::sequential)
  on.exit(future::plan(oplan), add = TRUE)
  expect_identical(hmm_loglik(g, seqs, use.gpu = FALSE, parallel = "future", chunk.size = 5), ll)
  expect_identical(hmm_viterbi(g, seqs, use.gpu = FALSE, parallel = "future", chunk.size = 4), vit)
  expect_identical(hmm_posterior(g, seqs, use.gpu = FALSE, parallel = "future"), post)
  expect_identical(predict(g, seqs, type = "posterior", use.gpu = FALSE, parallel = "future", chunk.size = 7),
                   post)
  par <- hmm_fit(seqs, 2, emission = "gaussian", random.inits = 4, max.iters = 30, seed = 9, use.gpu = FALSE,
                 parallel = "future", chunk.size = 1)
  expect_identical(fit_only(par), fit_only(fit))
  expect_identical(fit_only(hmm_fit(counts, 2, emission = "poisson", random.inits = 3, max.iters = 30, seed = 9,
                                    use.gpu = FALSE, parallel = "future", chunk.size = 2)),
                   fit_only(pfit))
  expect_identical(hmm_loglik(p, counts, use.gpu = FALSE, parallel = "future", chunk.size = 3),
                   hmm_loglik(p, counts, use.gpu = FALSE))
  # One array of equal-length sequences, bound from the workers' chunks.
  eq <- hmm_simulate(g, 9, 12, seed = 4)
  arr <- hmm_posterior(g, eq, use.gpu = FALSE, simplify = TRUE)
  expect_identical(hmm_posterior(g, eq, use.gpu = FALSE, simplify = TRUE, parallel = "future", chunk.size = 4), arr)
  expect_identical(arr[, , 9], hmm_posterior(g, eq, use.gpu = FALSE)[[9]])
  expect_identical(hmm_viterbi(g, eq, use.gpu = FALSE, simplify = TRUE, parallel = "future", chunk.size = 2),
                   hmm_viterbi(g, eq, use.gpu = FALSE, simplify = TRUE))
})

test_that("every method of models and fits works for Gaussian and Poisson emissions", {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  for (m in list(gauss_model(), pois_model())) {
    seqs <- hmm_simulate(m, 20, 30, seed = 7)
    expect_output(print(m), "Hidden Markov model: 2 states, (Gaussian|Poisson) emissions")
    s <- summary(m)
    expect_s3_class(s, "summary.bulkem_hmm")
    expect_output(print(s), "free parameters")
    expect_equal(sum(s$stationary), 1)
    expect_output(print(m$emission), "emission, 2 states")
    fit <- hmm_fit(seqs, 2, emission = m$emission, random.inits = 2, max.iters = 40, seed = 1, use.gpu = FALSE)
    expect_s3_class(fit$model, "bulkem_hmm")
    expect_identical(class(fit$model$emission), class(m$emission))
    expect_output(print(fit), "bulkem HMM fit: 2 states, (Gaussian|Poisson) emissions, 20 sequences")
    sf <- summary(fit)
    expect_s3_class(sf, "summary.bulkem_hmm_fit")
    expect_output(print(sf), "AIC")
    df <- if (m$emission$family == "gaussian") 7L else 5L
    ll <- logLik(fit)
    expect_identical(attr(ll, "df"), df)
    expect_identical(nobs(fit), 600)
    expect_equal(AIC(fit), -2 * fit$loglik + 2 * df)
    expect_equal(BIC(fit), -2 * fit$loglik + df * log(600))
    expect_silent(plot(fit))
    states <- predict(fit, seqs[1:3], use.gpu = FALSE)
    expect_identical(states, structure(hmm_viterbi(fit, seqs[1:3], use.gpu = FALSE)$path,
                                       log_prob = hmm_viterbi(fit, seqs[1:3], use.gpu = FALSE)$log_prob))
    expect_identical(predict(m, seqs[1], type = "posterior", use.gpu = FALSE),
                     hmm_posterior(m, seqs[1], use.gpu = FALSE))
    expect_identical(hmm_loglik(fit, seqs, use.gpu = FALSE), hmm_loglik(fit$model, seqs, use.gpu = FALSE))
    expect_identical(hmm_simulate(fit, 2, 5, seed = 1), hmm_simulate(fit$model, 2, 5, seed = 1))
    expect_error(predict(fit), class = "bulkem_error_input")
  }
})

test_that("printing Gaussian and Poisson models", {
  expect_snapshot({
    print(gauss_model())
    summary(pois_model())
    poisson_emission(c(a = 1, b = 2))
  })
})

test_that("use.gpu = TRUE without a GPU is a device error for every family", {
  skip_if(isTRUE(bulkem_backends()$usable[2]), "a GPU is usable here")
  expect_error(hmm_loglik(gauss_model(), list(1), use.gpu = TRUE), class = "bulkem_error_device")
  expect_error(hmm_fit(list(c(1, 2, 3)), 2, emission = "poisson", use.gpu = TRUE), class = "bulkem_error_device")
})
