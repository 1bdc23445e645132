# hbglm(target =): sample until every parameter's bulk and tail ESS and
# R-hat meet a target, checked between blocks of sweeps.

target_data <- function() {
  set.seed(11)
  d <- data.frame(g = rep(1:10, each = 25), x = rnorm(250))
  b <- rnorm(10, 1, 0.5)
  d$y <- rbinom(250, 1, plogis(-0.3 + b[d$g] * d$x))
  d
}

test_that("a target run stops once met, with the draws of a fixed run that long", {
  d <- target_data()
  fit <- hbglm(y ~ x, d, group = "g", family = "binomial", iter = 400, warmup = 200, chains = 3,
               seed = 5, target = list(ess = 300, rhat = 1.02), use.gpu = FALSE)
  expect_true(fit$target$met)
  expect_identical(fit$target[c("ess", "rhat", "max.iter")], list(ess = 300, rhat = 1.02, max.iter = 4000))
  expect_gt(fit$target$iter, 400)
  expect_lt(fit$target$iter, 4000)
  expect_identical(fit$iter, fit$target$iter)
  expect_equal(dim(fit$draws), c(fit$iter - 200, 3, dim(fit$draws)[3]))
  # posterior's own diagnostics of the returned draws meet the target.
  diag <- posterior::summarise_draws(posterior::as_draws_array(fit), "rhat", "ess_bulk", "ess_tail")
  expect_true(all(diag$rhat <= 1.02 & diag$ess_bulk >= 300 & diag$ess_tail >= 300))
  fixed <- hbglm(y ~ x, d, group = "g", family = "binomial", iter = fit$iter, warmup = 200, chains = 3,
                 seed = 5, use.gpu = FALSE)
  expect_identical(fixed$draws, fit$draws)
  expect_null(fixed$target)
  # The fit keeps the last check's diagnostics (those of its draws), and
  # its summaries use them rather than computing them again.
  expect_identical(fit$diagnostics, bulkem:::hbglm_diagnostics(fit$draws))
  expect_null(fixed$diagnostics)
  marked <- fit
  marked$diagnostics$rhat[1] <- 7
  expect_identical(summary(marked)$rhat[1], 7)
  expect_identical(summary(marked, pars = rownames(fit$diagnostics)[2:3])$rhat, fit$diagnostics$rhat[2:3])
  expect_output(print(fit), "target \\(bulk and tail ESS >= 300, R-hat <= 1.02\\): met after")
})

test_that("a target out of reach stops at max.iter with a warning naming the parameters", {
  d <- target_data()
  expect_warning(
    fit <- hbglm(y ~ x, d, group = "g", family = "binomial", iter = 300, warmup = 200, chains = 2,
                 seed = 5, target = list(ess = 1e5), max.iter = 450, use.gpu = FALSE),
    class = "bulkem_warning_target"
  )
  expect_false(fit$target$met)
  expect_identical(c(fit$target$iter, fit$target$rhat), c(450, 1.01))
  expect_identical(dim(fit$draws)[1], 250L)
  expect_true(any(grepl("did not reach the target", fit$warnings)))
  # The parameters named are those with the smallest ESS.
  ess <- summary(fit)
  worst <- rownames(ess)[order(pmin(ess$ess_bulk, ess$ess_tail))[1]]
  expect_match(fit$warnings[grepl("target", fit$warnings)], worst, fixed = TRUE)
})

test_that("target settings it cannot honour are errors", {
  d <- target_data()
  expect_snapshot(error = TRUE, {
    hbglm(y ~ x, d, group = "g", family = "binomial", max.iter = 500, use.gpu = FALSE)
    hbglm(y ~ x, d, group = "g", family = "binomial", target = list(ess = 0), use.gpu = FALSE)
    hbglm(y ~ x, d, group = "g", family = "binomial", target = list(rhat = 0.99), use.gpu = FALSE)
    hbglm(y ~ x, d, group = "g", family = "binomial", target = list(n_eff = 100), use.gpu = FALSE)
    hbglm(y ~ x, d, group = "g", family = "binomial", target = 400, use.gpu = FALSE)
    hbglm(y ~ x, d, group = "g", family = "binomial", iter = 1000, warmup = 998,
          target = list(ess = 10), use.gpu = FALSE)
    hbglm(y ~ x, d, group = "g", family = "binomial", iter = 1000, warmup = 500,
          target = list(ess = 10), max.iter = 999, use.gpu = FALSE)
    hbglm(y ~ x, d, group = "g", family = "binomial", target = list(ess = 10),
          parallel = "future", use.gpu = FALSE)
  })
})
