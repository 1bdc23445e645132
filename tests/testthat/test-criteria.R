# criteria() and its print/plot methods, on fits of several K spliced the
# way bulkem(num.components = Ks) returns them: per dataset the fit with the
# smallest criterion, and the datasets x K table. The table is computed here
# from the per-K fits, independently of the package's methods.
# bulkem's warnings (more starts, max.iters) are not what these tests test.
quiet <- function(expr) suppressWarnings(expr, classes = "bulkem_warning")

select_fits <- function(datasets, Ks, criterion = "BIC", ...) {
  per_K <- lapply(Ks, function(K) {
    quiet(bulkem(datasets, num.components = K, keep.posterior = criterion == "ICL", ...))
  })
  value <- function(f, K) {
    if (!f$fit_success) return(NA_real_)
    df <- 3 * K - 1
    switch(criterion,
      BIC = -2 * f$loglik + df * log(f$n),
      AIC = -2 * f$loglik + 2 * df,
      ICL = -2 * f$loglik + df * log(f$n) - 2 * sum(log(apply(f$posterior, 1, max)))
    )
  }
  crit <- vapply(seq_along(Ks), function(j) vapply(per_K[[j]], value, numeric(1), K = Ks[j]),
                 numeric(length(datasets)))
  crit <- matrix(crit, nrow = length(datasets), dimnames = list(names(datasets), as.character(Ks)))
  best <- apply(crit, 1, function(r) if (all(is.na(r))) 1L else which.min(r))
  fits <- lapply(seq_along(datasets), function(d) unclass(per_K[[best[d]]])[[d]])
  names(fits) <- names(datasets)
  a <- attributes(per_K[[1]])
  structure(fits, class = "bulkem_fits", backend = a$backend, threads = a$threads,
            seconds = a$seconds, seed = a$seed, family = a$family,
            num.components = as.integer(Ks), criterion = criterion, criteria = crit)
}

sim_normal <- function(K, n = 150) {
  mu <- c(0, 6, 12)[seq_len(K)]
  stats::rnorm(n, rep(mu, length.out = n), 1)
}

set.seed(31)
data5 <- list(one = sim_normal(1), two = sim_normal(2), three = sim_normal(3),
              three_b = sim_normal(3), tiny = c(1.5, 2, 3.25, 4))
fits5 <- select_fits(data5, 1:4, family = "normal", random.inits = 10, seed = 3, use.gpu = FALSE)

test_that("criteria() returns the table with the criterion and the chosen K", {
  crit <- criteria(fits5)
  expect_s3_class(crit, "bulkem_criteria")
  expect_true(is.matrix(crit))
  expect_equal(unclass(crit)[, ], attr(fits5, "criteria"), ignore_attr = TRUE)
  expect_equal(dimnames(crit), list(names(data5), c("1", "2", "3", "4")))
  expect_identical(attr(crit, "criterion"), "BIC")
  chosen <- attr(crit, "chosen")
  expect_equal(unname(chosen), unname(lengths(lapply(fits5, `[[`, "alpha"))))
  expect_named(chosen, names(data5))
  # The tiny dataset can only fit K = 1 (3K - 1 parameters need 3K - 1 values).
  expect_equal(unname(is.na(unclass(crit)["tiny", ])), c(FALSE, TRUE, TRUE, TRUE))
  # Each dataset's chosen fit is the one whose BIC is in the table.
  expect_equal(unclass(crit)[cbind(seq_along(data5), chosen)], unname(BIC(fits5)))
  expect_equal(unname(chosen[c("one", "two", "three")]), 1:3)
})

test_that("criteria() computes a table for fits that carry none", {
  plain <- fits5
  attr(plain, "criteria") <- NULL
  attr(plain, "criterion") <- NULL
  crit <- criteria(plain)
  K <- sort(unique(attr(criteria(fits5), "chosen")))
  expect_equal(colnames(crit), as.character(K))
  expect_identical(attr(crit, "criterion"), "BIC")
  for (d in seq_along(plain)) {
    f <- plain[[d]]
    j <- match(length(f$alpha), K)
    expect_equal(unclass(crit)[d, j], -2 * f$loglik + (3 * length(f$alpha) - 1) * log(f$n))
    expect_true(all(is.na(unclass(crit)[d, -j])))
  }
  attr(plain, "criterion") <- "AIC"
  expect_equal(unclass(criteria(plain))["two", "2"], -2 * plain$two$loglik + 2 * 5)
  attr(plain, "criterion") <- "ICL"
  expect_error(criteria(plain), "posteriors", class = "bulkem_error_input")
})

test_that("ICL adds the classification entropy to BIC", {
  fits <- select_fits(data5[1:3], 1:3, criterion = "ICL", family = "normal", random.inits = 5,
                      seed = 4, use.gpu = FALSE)
  plain <- fits
  attr(plain, "criteria") <- NULL
  crit <- criteria(plain)
  f <- plain$two
  K <- length(f$alpha)
  expect_equal(unclass(crit)["two", as.character(K)],
               -2 * f$loglik + (3 * K - 1) * log(f$n) - 2 * sum(log(apply(f$posterior, 1, max))))
  expect_gt(unclass(crit)["two", as.character(K)], BIC(plain)[["two"]])
})

test_that("criteria() refuses other objects and a table out of step", {
  expect_error(criteria(list(1)), "bulkem_fits", class = "bulkem_error_input")
  bad <- fits5
  attr(bad, "criteria") <- attr(fits5, "criteria")[1:2, ]
  expect_error(criteria(bad), "does not match", class = "bulkem_error_input")
})

test_that("[ keeps the criterion table in step with the fits", {
  sub <- fits5[c("three", "one")]
  expect_equal(attr(sub, "criteria"), attr(fits5, "criteria")[c("three", "one"), , drop = FALSE])
  expect_equal(attr(criteria(sub), "chosen"), c(three = 3L, one = 1L))
  expect_equal(nrow(attr(fits5[-1], "criteria")), 4)
  expect_equal(nrow(attr(fits5[0], "criteria")), 0)
  expect_equal(rownames(attr(fits5[c(TRUE, FALSE)], "criteria")), c("one", "three", "tiny"))
  expect_identical(attr(sub, "num.components"), 1:4)
})

test_that("print shows the criterion, the counts per chosen K and marks the chosen K", {
  crit <- criteria(fits5)
  out <- capture.output(print(crit))
  expect_match(out[1], "BIC (smaller is better) of 5 datasets for K = 1..4", fixed = TRUE)
  i <- grep("K=1 K=2 K=3 K=4", out, fixed = TRUE)
  expect_length(i, 1)
  counts <- table(factor(attr(crit, "chosen"), levels = 1:4))
  expect_equal(as.integer(strsplit(trimws(out[i + 1]), " +")[[1]]), as.integer(counts))
  # One star per dataset, in the chosen column.
  tokens <- strsplit(trimws(out[startsWith(out, "two ")]), " +")[[1]][-1]
  starred <- grep("*", tokens, fixed = TRUE)
  expect_equal(starred, unname(attr(crit, "chosen")[["two"]]))
  expect_equal(as.numeric(sub("*", "", tokens, fixed = TRUE)), unname(unclass(crit)["two", ]),
               tolerance = 1e-5)
  expect_equal(sum(lengths(regmatches(out, gregexpr("[0-9]\\*", out)))), 5)
  expect_identical(print(crit), crit) |> expect_output("chosen K")
  expect_output(print(crit, n = 2), "and 3 more datasets")
})

test_that("print of the fits says K was chosen", {
  expect_output(print(fits5), "Normal mixtures with K chosen from 1..4 by BIC")
  chosen <- table(attr(criteria(fits5), "chosen"))
  expect_output(print(fits5), paste0("chosen K: 1 (", chosen[["1"]], ")"), fixed = TRUE)
})

test_that("plot draws one line per dataset for a few, an overview for many", {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  crit <- criteria(fits5)
  expect_identical(plot(crit), crit)
  # The y axis spans the criterion values.
  usr <- graphics::par("usr")
  expect_true(usr[3] <= min(crit, na.rm = TRUE) && usr[4] >= max(crit, na.rm = TRUE))
  expect_identical(plot(crit, max.lines = 2), crit)
  # Two panels: the second (log axis) shows differences to the best K.
  usr <- graphics::par("usr")
  diffs <- unclass(crit) - apply(unclass(crit), 1, min, na.rm = TRUE)
  expect_equal(10^usr[4] >= max(diffs, na.rm = TRUE), TRUE)
  expect_identical(plot(fits5, which = "criteria"), fits5)
  expect_error(plot(crit, max.lines = -1), "max.lines", class = "bulkem_error_input")
})

test_that("plot refuses a table without values", {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  crit <- criteria(fits5)
  crit[] <- NA_real_
  expect_error(plot(crit), "no criterion value", class = "bulkem_error_input")
})

test_that("criteria() reads bulkem's own selection over K", {
  fits <- quiet(bulkem(data5, num.components = 1:4, family = "normal", random.inits = 10,
                       seed = 3, use.gpu = FALSE))
  crit <- criteria(fits)
  m <- unclass(crit)
  chosen <- attr(crit, "chosen")
  expect_equal(dimnames(m), list(names(data5), as.character(1:4)))
  # Each dataset keeps its smallest BIC (columns are K = 1..4), and the
  # table holds the kept fit's BIC.
  expect_equal(unname(chosen), unname(apply(m, 1, which.min)))
  expect_equal(m[cbind(seq_along(data5), chosen)], unname(BIC(fits)))
  expect_equal(attr(criteria(fits[c("three", "tiny")]), "chosen"), chosen[c("three", "tiny")])
  expect_output(print(fits), "K chosen from 1..4 by BIC")
})
