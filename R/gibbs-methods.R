# Methods of bulkem_hbglm: print, summary, plot (trace), coef, as.array,
# and conversions to coda and posterior.

# Parameter names matching `pars`: exact names, or block names ("beta",
# "mu", "tau", "gamma", "sigma") selecting all of a block.
select_pars <- function(object, pars, call = parent.frame()) {
  all <- dimnames(object$draws)[[3]]
  if (is.null(pars)) return(all)
  if (!is.character(pars)) {
    bulkem_abort(c("{.arg pars} must be a character vector of parameter or block names.",
                     x = "You supplied {describe_value(pars)}."), call = call)
  }
  block <- sub("\\[.*$", "", all)
  keep <- all %in% pars | block %in% pars
  unknown <- setdiff(pars, c(all, block))
  if (length(unknown) > 0) {
    bulkem_abort(c("{.arg pars} must name parameters of the model.",
                     x = "Unknown: {.val {unknown}}.",
                     i = "Blocks are {.val {unique(block)}}."), call = call)
  }
  all[keep]
}

# R-hat and bulk ESS of every parameter (the core's implementation of
# Vehtari et al. 2021, as in the posterior package).
hbglm_diagnostics <- function(draws) {
  d <- dim(draws)
  out <- gibbs_diagnostics_(as.double(draws), d[1], d[2], cpu_threads())
  data.frame(rhat = out$rhat, ess_bulk = out$ess_bulk, row.names = dimnames(draws)[[3]])
}

#' Summaries of a hierarchical GLM's posterior
#'
#' @param object,x A `bulkem_hbglm` fit from [hbglm()].
#' @param pars `NULL` (all parameters), or names of parameters (such as
#'   `"mu[x]"`) or of blocks (`"beta"`, `"mu"`, `"tau"`, `"gamma"`,
#'   `"sigma"`).
#' @param probs Quantiles to report.
#' @param digits Significant digits to print.
#' @param ... Unused.
#' @return `summary()`: a data frame of class `summary.bulkem_hbglm`, one
#'   row per parameter, with `mean`, `sd`, the quantiles, `rhat`
#'   (rank-normalised split R-hat, the larger of its bulk and tail versions)
#'   and `ess_bulk` (bulk effective sample size), as defined by Vehtari et
#'   al. (2021) and computed by the `posterior` package.
#' @references Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and
#'   Buerkner, P.-C. (2021). Rank-normalization, folding, and localization:
#'   an improved R-hat for assessing convergence of MCMC. *Bayesian
#'   Analysis* 16(2), 667--718.
#' @examples
#' set.seed(2)
#' d <- data.frame(g = rep(letters[1:5], each = 30), x = rnorm(150))
#' d$y <- rbinom(150, 1, plogis(0.3 + d$x))
#' fit <- hbglm(y ~ x, d, group = "g", family = "binomial", iter = 2000,
#'              warmup = 1000, chains = 2, use.gpu = FALSE)
#' summary(fit, pars = c("mu", "tau"))
#' @export
summary.bulkem_hbglm <- function(object, pars = NULL, probs = c(0.025, 0.5, 0.975), ...) {
  call <- environment()
  pars <- select_pars(object, pars, call)
  ok <- is.numeric(probs) && length(probs) > 0 && !anyNA(probs) && all(probs >= 0 & probs <= 1)
  if (!ok) {
    bulkem_abort(c("{.arg probs} must be probabilities between 0 and 1.",
                     x = "You supplied {describe_value(probs)}."), call = call)
  }
  draws <- object$draws[, , pars, drop = FALSE]
  flat <- matrix(draws, ncol = length(pars))
  q <- t(apply(flat, 2, stats::quantile, probs = probs, names = FALSE))
  if (length(probs) == 1) q <- t(q)
  colnames(q) <- paste0(format(100 * probs, trim = TRUE, drop0trailing = TRUE), "%")
  diag <- hbglm_diagnostics(draws)
  out <- data.frame(mean = colMeans(flat), sd = apply(flat, 2, stats::sd), q,
                    rhat = diag$rhat, ess_bulk = diag$ess_bulk,
                    row.names = pars, check.names = FALSE)
  attr(out, "fit") <- list(family = object$family, chains = object$chains,
                           kept = dim(object$draws)[1], groups = length(object$groups))
  class(out) <- c("summary.bulkem_hbglm", "data.frame")
  out
}

#' @rdname summary.bulkem_hbglm
#' @export
print.summary.bulkem_hbglm <- function(x, digits = 3, ...) {
  info <- attr(x, "fit")
  # Subsetting (`s[rows, ]`) keeps the class but drops the fit's description.
  if (!is.null(info)) {
    cat("Posterior summary: ", info$family, " hierarchical GLM, ", info$chains, " chains x ",
        info$kept, " draws\n", sep = "")
  }
  print(format(plain_df(x), digits = digits), quote = FALSE)
  bad <- sum(x$rhat > 1.01, na.rm = TRUE)
  if (bad > 0) {
    cat("\n", bad, " parameter(s) with R-hat above 1.01: the chains have not mixed; run longer.\n", sep = "")
  }
  invisible(x)
}

#' @rdname summary.bulkem_hbglm
#' @export
print.bulkem_hbglm <- function(x, digits = 3, ...) {
  d <- dim(x$draws)
  cat("Hierarchical ", x$family, " GLM (bulkem), Gibbs sampling with slice updates\n", sep = "")
  cat("  ", deparse(x$formula), if (!is.null(x$global)) paste0(", global ", deparse(x$global)), "\n", sep = "")
  cat("  ", length(x$groups), " groups, ", x$nobs, " observations, ", d[2], " chains x ", d[1],
      " kept draws (", x$warmup, " warmup", if (x$thin > 1) paste0(", thin ", x$thin), ")\n", sep = "")
  cat("  backend: ", x$backend, ", ", format(signif(x$seconds, 3)), " s\n", sep = "")
  s <- summary(x, pars = intersect(c("mu", "tau", "gamma", "sigma"), sub("\\[.*$", "", dimnames(x$draws)[[3]])))
  cat("\nHyperparameters and global coefficients:\n")
  print(format(plain_df(s), digits = digits), quote = FALSE)
  all <- hbglm_diagnostics(x$draws)
  # R-hat and ESS are NA for a parameter held fixed (or constant).
  extreme <- function(v, f) if (all(is.na(v))) NA else f(v, na.rm = TRUE)
  cat("\nAll ", nrow(all), " parameters: max R-hat ", sprintf("%.3f", extreme(all$rhat, max)),
      ", min bulk ESS ", format(round(extreme(all$ess_bulk, min))), "\n", sep = "")
  if (length(x$warnings) > 0) {
    cat("\nWarnings of the fit:\n", paste0("* ", x$warnings, "\n"), sep = "")
  }
  invisible(x)
}

plain_df <- function(x) {
  attr(x, "fit") <- NULL
  class(x) <- "data.frame"
  x
}

#' Trace plots of a hierarchical GLM's draws
#'
#' One panel per parameter, one line per chain.
#'
#' @param x A `bulkem_hbglm` fit.
#' @param pars Parameters or blocks to plot; by default `mu`, `tau`,
#'   `gamma` and `sigma` (at most 9 panels).
#' @param ... Passed to [graphics::matplot()].
#' @return `x`, invisibly.
#' @examples
#' set.seed(3)
#' d <- data.frame(g = rep(1:6, each = 15), x = rnorm(90))
#' d$y <- rnorm(90, 1 + d$x)
#' fit <- hbglm(y ~ x, d, group = "g", iter = 3000, warmup = 1500, chains = 2,
#'              use.gpu = FALSE)
#' plot(fit)
#' @export
plot.bulkem_hbglm <- function(x, pars = NULL, ...) {
  if (is.null(pars)) {
    blocks <- sub("\\[.*$", "", dimnames(x$draws)[[3]])
    pars <- intersect(c("mu", "tau", "gamma", "sigma"), blocks)
  }
  pars <- utils::head(select_pars(x, pars), 9)
  n <- length(pars)
  cols <- ceiling(sqrt(n))
  old <- graphics::par(mfrow = c(ceiling(n / cols), cols), mar = c(3, 3, 2, 1), mgp = c(2, 0.7, 0))
  on.exit(graphics::par(old))
  for (p in pars) {
    graphics::matplot(x$draws[, , p], type = "l", lty = 1, col = seq_len(x$chains),
                      xlab = "iteration", ylab = "", main = p, ...)
  }
  invisible(x)
}

#' @rdname summary.bulkem_hbglm
#' @return `coef()`: posterior means of the group coefficients, a groups x
#'   coefficients matrix.
#' @export
coef.bulkem_hbglm <- function(object, ...) {
  k <- length(object$coef_names)
  means <- colMeans(matrix(object$draws[, , seq_len(length(object$groups) * k)],
                           ncol = length(object$groups) * k))
  matrix(means, ncol = k, byrow = TRUE, dimnames = list(object$groups, object$coef_names))
}

#' @rdname summary.bulkem_hbglm
#' @return `as.array()`: the draws array, iterations x chains x parameters.
#' @export
as.array.bulkem_hbglm <- function(x, ...) x$draws

#' Convert draws to coda and posterior objects
#'
#' `as.mcmc.list()` (package coda) gives one `mcmc` object per chain;
#' `as_draws_array()` (package posterior) a `draws_array`. Both methods are
#' registered when the package providing the generic is installed.
#'
#' @param x A `bulkem_hbglm` fit.
#' @param ... Unused.
#' @return An `mcmc.list` or a `draws_array`.
#' @name hbglm-conversions
#' @examplesIf requireNamespace("posterior", quietly = TRUE)
#' set.seed(4)
#' d <- data.frame(g = rep(1:4, each = 10), x = rnorm(40))
#' d$y <- rnorm(40, d$x)
#' fit <- hbglm(y ~ x, d, group = "g", iter = 2000, warmup = 1000, chains = 2,
#'              use.gpu = FALSE)
#' posterior::summarise_draws(posterior::as_draws_array(fit))
NULL

#' @rdname hbglm-conversions
#' @exportS3Method coda::as.mcmc.list
as.mcmc.list.bulkem_hbglm <- function(x, ...) {
  d <- dim(x$draws)
  start <- x$warmup + x$thin
  chains <- lapply(seq_len(d[2]), function(c) {
    m <- matrix(x$draws[, c, ], nrow = d[1], dimnames = list(NULL, dimnames(x$draws)[[3]]))
    coda::mcmc(m, start = start, thin = x$thin)
  })
  coda::mcmc.list(chains)
}

#' @rdname hbglm-conversions
#' @exportS3Method posterior::as_draws_array
as_draws_array.bulkem_hbglm <- function(x, ...) {
  d <- x$draws
  dimnames(d) <- list(iteration = NULL, chain = NULL, variable = dimnames(d)[[3]])
  posterior::as_draws_array(d)
}
