# Start diagnostics: every fit says how its starts ended, and summary()
# names the datasets whose best log-likelihood only one start found.

test_that("each fit counts its starts at the best, failed starts and the spread", {
  set.seed(5)
  d <- sim_ig(8, 400)
  f <- bulkem(d, 2, random.inits = 12, seed = 3, use.gpu = FALSE)
  for (fit in f) {
    sd <- fit$start_diagnostics
    expect_named(sd, c("starts", "at_best", "failed", "spread"))
    ll <- fit$start_logliks
    expect_identical(sd[["starts"]], 12)
    expect_identical(sd[["failed"]], as.double(sum(is.na(ll))))
    expect_identical(sd[["at_best"]], as.double(sum(ll >= fit$loglik - 1e-6 * abs(fit$loglik), na.rm = TRUE)))
    expect_gte(sd[["at_best"]], 1)
    expect_equal(sd[["spread"]], max(ll, na.rm = TRUE) - min(ll, na.rm = TRUE))
  }
  expect_output(print(summary(f[[1]])), "starts at the best log-likelihood \\(within 1e-6 relative\\): [0-9]+ of 12")
})

test_that("summary() names datasets whose best only one start found", {
  set.seed(6)
  d <- stats::setNames(sim_ig(4, 300), c("a", "b", "c", "d"))
  f <- bulkem(d, 2, random.inits = 6, seed = 2, use.gpu = FALSE)
  s <- summary(f)
  lonely <- names(which(vapply(f, function(x) x$start_diagnostics[["at_best"]] == 1, logical(1))))
  expect_identical(names(s$one_start_best), lonely)
  # A dataset whose other starts all stopped elsewhere is reported by name.
  g <- unclass(f)
  g$c$start_diagnostics[["at_best"]] <- 1
  g <- structure(g, class = "bulkem_fits", criteria = attr(f, "criteria"), criterion = attr(f, "criterion"),
                 num.components = attr(f, "num.components"), family = attr(f, "family"))
  s <- summary(g)
  expect_true("c" %in% names(s$one_start_best))
  expect_output(print(s), "best log-likelihood found by only one start in [0-9]+ dataset")
})

test_that("failed starts are counted as degenerate", {
  # Two distinct values and three components: most starts collapse a
  # component (its sd goes to 0 on a single value); the others end at three
  # equal components.
  x <- rep(c(0, 1), each = 50)
  f <- bulkem(x, 3, family = "normal", random.inits = 10, seed = 1, use.gpu = FALSE)
  sd <- f[[1]]$start_diagnostics
  ll <- f[[1]]$start_logliks
  expect_identical(sd[["failed"]], as.double(sum(is.na(ll))))
  expect_gte(sd[["failed"]], 1)
  expect_identical(sd[["at_best"]] + sd[["failed"]] <= 10, TRUE)
  expect_output(print(summary(f)), paste0("degenerate \\(failed\\) starts: ", sd[["failed"]], " in all"))
})
