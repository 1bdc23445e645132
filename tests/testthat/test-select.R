# Choosing the number of components, the default starts, and the shapes
# data arrive in (issue 16).

sim_normal3 <- function(D, n) {
  lapply(seq_len(D), function(d) {
    z <- sample.int(3, n, replace = TRUE, prob = c(0.3, 0.4, 0.3))
    stats::rnorm(n, mean = c(0, 5, 10)[z], sd = c(1, 1.2, 0.8)[z])
  })
}

test_that("BIC chooses 3 components for at least 90% of 60 three-component datasets", {
  set.seed(16)
  d <- sim_normal3(60, 400)
  fits <- suppressWarnings(bulkem(d, num.components = 1:5, family = "normal", seed = 1, use.gpu = FALSE))
  k <- vapply(fits, function(f) length(f$alpha), integer(1))
  expect_gte(mean(k == 3), 0.9)
  # The same for the inverse Gaussian (the 2015 package's family).
  set.seed(17)
  ig <- replicate(60, rinvgaussmix(600, c(0.3, 0.4, 0.3), c(1, 4, 12), c(40, 60, 300)), simplify = FALSE)
  fits_ig <- suppressWarnings(bulkem(ig, num.components = 1:5, seed = 2, use.gpu = FALSE))
  k_ig <- vapply(fits_ig, function(f) length(f$alpha), integer(1))
  expect_gte(mean(k_ig == 3), 0.9)
})

test_that("the criterion table matches R's BIC/AIC and each K's own fit", {
  set.seed(3)
  d <- sim_normal3(8, 300)
  Ks <- 1:4
  for (criterion in c("BIC", "AIC", "ICL")) {
    sel <- suppressWarnings(bulkem(d, num.components = Ks, family = "normal", criterion = criterion,
                                   seed = 5, use.gpu = FALSE))
    tab <- criteria(sel)
    expect_equal(dim(tab), c(8L, 4L))
    expect_equal(colnames(tab), as.character(Ks))
    for (K in Ks) {
      alone <- suppressWarnings(bulkem(d, num.components = K, family = "normal", seed = 5, use.gpu = FALSE))
      for (i in seq_along(d)) {
        f <- alone[[i]]
        want <- switch(criterion,
          BIC = stats::BIC(logLik(f)), AIC = stats::AIC(logLik(f)),
          ICL = {
            z <- predict(f, d[[i]], type = "posterior")
            stats::BIC(logLik(f)) - 2 * sum(log(apply(z, 1, max)))
          })
        expect_equal(unname(tab[i, as.character(K)]), want, tolerance = 1e-8)
      }
      # The chosen fit is that K's own fit, unchanged.
      chosen <- which(vapply(sel, function(f) length(f$alpha), integer(1)) == K)
      for (i in chosen) expect_equal(sel[[i]]$mu, alone[[i]]$mu)
    }
    best <- apply(tab, 1, which.min)
    expect_equal(unname(vapply(sel, function(f) length(f$alpha), integer(1))), Ks[best])
  }
  expect_identical(attr(sel, "num.components"), Ks)
  expect_identical(attr(sel, "criterion"), "ICL")
  # as.data.frame works with mixed K.
  df <- as.data.frame(sel)
  expect_true("num_components" %in% names(df))
  expect_equal(df$num_components, unname(vapply(sel, function(f) length(f$alpha), integer(1))))
  # num.components is sorted and made distinct.
  again <- suppressWarnings(bulkem(d[1:2], num.components = c(3, 1, 3), family = "normal", seed = 5, use.gpu = FALSE))
  expect_identical(attr(again, "num.components"), c(1L, 3L))
})

test_that("default starts find the galaxies optimum and the IG example's", {
  x <- MASS::galaxies / 1000
  for (s in 1:5) {
    set.seed(s)
    f <- suppressWarnings(bulkem(x, num.components = 4, family = "normal", use.gpu = FALSE))[[1]]
    expect_equal(f$loglik, -197.4538, tolerance = 1e-4 / 197)
    expect_equal(min(f$alpha), 3 / 82, tolerance = 1e-3)
  }
  # The 2015 starts alone need far more starts on this dataset.
  miss <- vapply(1:10, function(s) {
    suppressWarnings(bulkem(x, num.components = 4, family = "normal", random.inits = 5,
                            init.method = "subsets", seed = s, use.gpu = FALSE))[[1]]$loglik < -197.46
  }, logical(1))
  expect_gt(sum(miss), 0)
  # ?bulkem_fits's example: 20 default starts reach -289.57 on dataset 4.
  set.seed(5)
  d <- replicate(5, rinvgaussmix(300, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
  for (s in 1:3) {
    f <- suppressWarnings(bulkem(d, seed = s, use.gpu = FALSE))
    expect_gt(f[[4]]$loglik, -289.6)
  }
})

test_that("init.method chooses the kind of start", {
  set.seed(8)
  x <- rinvgaussmix(400, c(0.3, 0.7), c(1, 3), c(30, 0.2))
  fit <- function(m) suppressWarnings(bulkem(x, random.inits = 4, init.method = m, seed = 1, use.gpu = FALSE))[[1]]
  mixed <- fit("mixed"); kpp <- fit("kmeans++"); sub <- fit("subsets")
  # Start 1 of "mixed" is a k-means++ start, start 2 a subsets start.
  expect_equal(mixed$start_logliks[1], kpp$start_logliks[1])
  expect_equal(mixed$start_logliks[2], sub$start_logliks[2])
  expect_error(bulkem(x, init.method = "random"), "`init.method` must be one of", class = "bulkem_error_input")
})

test_that("convergence warnings count the datasets once per call", {
  set.seed(9)
  d <- replicate(3, rinvgaussmix(300, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
  w <- NULL
  withCallingHandlers(
    bulkem(d, max.iters = 2, seed = 1, use.gpu = FALSE),
    warning = function(cnd) { w <<- c(w, list(cnd)); invokeRestart("muffleWarning") }
  )
  expect_length(w, 1)
  expect_s3_class(w[[1]], "bulkem_warning_convergence")
  expect_match(conditionMessage(w[[1]]), "3 of 3 datasets stopped at max.iters = 2")
  expect_no_warning(bulkem(d[1], num.components = 1, seed = 1, use.gpu = FALSE))
})

test_that("a matrix, a formula and a split data frame give the same fits", {
  set.seed(10)
  d <- replicate(3, rinvgaussmix(200, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
  names(d) <- c("a", "b", "c")
  ref <- suppressWarnings(bulkem(d, seed = 4, use.gpu = FALSE))
  m <- sapply(d, identity)
  from_matrix <- suppressWarnings(bulkem(m, seed = 4, use.gpu = FALSE))
  expect_equal(names(from_matrix), c("a", "b", "c"))
  expect_equal(coef(from_matrix[["b"]]), coef(ref[["b"]]))
  df <- data.frame(y = unlist(d, use.names = FALSE), g = rep(names(d), each = 200))
  from_formula <- suppressWarnings(bulkem(y ~ g, data = df, seed = 4, use.gpu = FALSE))
  expect_equal(names(from_formula), c("a", "b", "c"))
  expect_equal(lapply(from_formula, coef), lapply(ref, coef))
  from_split <- suppressWarnings(bulkem(split(df$y, df$g), seed = 4, use.gpu = FALSE))
  expect_equal(lapply(suppressWarnings(bulkem(df, y ~ g, seed = 4, use.gpu = FALSE)), coef), lapply(ref, coef))
  expect_equal(lapply(from_split, coef), lapply(ref, coef))
  # Two grouping variables: one dataset per combination present.
  df$h <- rep(c("x", "y"), 300)
  two <- suppressWarnings(bulkem(y ~ g + h, data = df, num.components = 1, seed = 4, use.gpu = FALSE))
  expect_equal(length(two), 6)
  one <- suppressWarnings(bulkem(y ~ 1, data = df, num.components = 1, seed = 4, use.gpu = FALSE))
  expect_equal(one[[1]]$n, 600)
  # What cannot be honoured is an error.
  expect_error(bulkem(df), "bulkem\\(y ~ group, data = df\\)", class = "bulkem_error_input")
  expect_error(bulkem(y ~ log(g), data = df), "not expressions", class = "bulkem_error_input")
  expect_error(bulkem(~ g, data = df), "must have a response", class = "bulkem_error_input")
  df$y[5] <- NA
  expect_error(bulkem(y ~ g, data = df), "Row 5", class = "bulkem_error_input")
  expect_error(bulkem(g ~ h, data = df), "must be a numeric variable", class = "bulkem_error_input")
})

test_that("k = points to num.components; inits need one number of components", {
  x <- rinvgaussmix(100, c(0.5, 0.5), c(1, 3), c(10, 10))
  expect_error(bulkem(x, k = 3), "num.components", class = "bulkem_error_input")
  expect_error(bulkem(x, K = 3), "num.components", class = "bulkem_error_input")
  expect_error(bulkem(x, kk = 3), "has no argument `kk`", class = "bulkem_error_input")
  expect_error(bulkem(x, num.components = 1:2, inits = list(alpha = 1, mu = 1, lambda = 1)),
               "one number of components", class = "bulkem_error_input")
  expect_error(bulkem(x, num.components = c(1, NA)), "`num.components`", class = "bulkem_error_input")
  expect_error(bulkem(x, criterion = "bic"), "`criterion` must be one of", class = "bulkem_error_input")
})
