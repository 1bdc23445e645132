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

# R-hat, bulk and (with `tail`; NA otherwise) tail ESS of every parameter
# (the core's implementation of Vehtari et al. 2021, as in the posterior
# package).
hbglm_diagnostics <- function(draws, tail = TRUE) {
  d <- dim(draws)
  out <- gibbs_diagnostics_(as.double(draws), d[1], d[2], tail, cpu_threads())
  data.frame(rhat = out$rhat, ess_bulk = out$ess_bulk, ess_tail = out$ess_tail,
             row.names = dimnames(draws)[[3]])
}

# The diagnostics of a fit's parameters `pars` (all when NULL): those its
# target's last check computed from the same draws (on the device when it
# ran on the GPU), else computed now.
fit_diagnostics <- function(fit, pars = NULL, tail = TRUE) {
  kept <- fit$diagnostics
  if (!is.null(kept) && identical(rownames(kept), dimnames(fit$draws)[[3]])) {
    return(if (is.null(pars)) kept else kept[pars, , drop = FALSE])
  }
  hbglm_diagnostics(if (is.null(pars)) fit$draws else fit$draws[, , pars, drop = FALSE], tail)
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
#'   (rank-normalised split R-hat, the larger of its bulk and tail versions),
#'   `ess_bulk` (bulk effective sample size: the ESS of the rank-normalised
#'   split chains, for the reliability of means and medians) and `ess_tail`
#'   (tail effective sample size: the smaller of the ESS of the 5% and 95%
#'   quantiles, for the reliability of the tails and intervals), as defined
#'   by Vehtari et al. (2021) and computed by the `posterior` package
#'   (`posterior::rhat()`, `posterior::ess_bulk()`, `posterior::ess_tail()`).
#'   `NA` for a parameter whose draws are constant (one held fixed).
#'   `print()` of a fit shows the largest R-hat and the smallest bulk and
#'   tail ESS over all parameters.
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
  # stats::quantile()'s values (type 7), computed in parallel by the core.
  q <- matrix(gibbs_quantiles_(flat, nrow(flat), probs, cpu_threads()), ncol = length(probs))
  colnames(q) <- paste0(format(100 * probs, trim = TRUE, drop0trailing = TRUE), "%")
  diag <- fit_diagnostics(object, pars)
  out <- data.frame(mean = colMeans(flat), sd = apply(flat, 2, stats::sd), q,
                    rhat = diag$rhat, ess_bulk = diag$ess_bulk, ess_tail = diag$ess_tail,
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
  for (f in x$model$factors) {
    cat("  grouping factor ", f$name, ": ", length(f$levels), " levels (", paste(f$coef_names, collapse = ", "), ")",
        if (isTRUE(f$correlated)) ", correlated", "\n", sep = "")
  }
  cat("  ", length(x$groups), " groups, ", x$nobs, " observations, ", d[2], " chains x ", d[1],
      " kept draws (", x$warmup, " warmup", if (x$thin > 1) paste0(", thin ", x$thin), ")\n", sep = "")
  cat("  backend: ", x$backend, ", ", format(signif(x$seconds, 3)), " s\n", sep = "")
  if (!is.null(x$target)) {
    cat("  target (bulk and tail ESS >= ", format(x$target$ess), ", R-hat <= ", format(x$target$rhat), "): ",
        if (x$target$met) "met" else "not met", " after ", x$target$iter, " sweeps per chain (",
        x$target$checks, if (x$target$checks == 1) " check" else " checks", "; max.iter ", x$target$max.iter, ")\n", sep = "")
  }
  blocks <- unique(sub("\\[.*$", "", dimnames(x$draws)[[3]]))
  s <- summary(x, pars = c(intersect(c("mu", "tau", "cor", "gamma", "sigma", "shape", "cut"), blocks), grep("^(sd|cor)_", blocks, value = TRUE)))
  cat("\nHyperparameters and global coefficients:\n")
  print(format(plain_df(s), digits = digits), quote = FALSE)
  all <- fit_diagnostics(x)
  # R-hat and ESS are NA for a parameter held fixed (or constant).
  extreme <- function(v, f) if (all(is.na(v))) NA else f(v, na.rm = TRUE)
  cat("\nAll ", nrow(all), " parameters: max R-hat ", sprintf("%.3f", extreme(all$rhat, max)),
      ", min bulk ESS ", format(round(extreme(all$ess_bulk, min))),
      ", min tail ESS ", format(round(extreme(all$ess_tail, min))), "\n", sep = "")
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
    pars <- intersect(c("mu", "tau", "gamma", "sigma", "shape"), blocks)
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

#' Variance components of a hierarchical GLM
#'
#' The group coefficients' standard deviations and correlations (and the
#' residual sd of the gaussian family), as posterior means, in the layout
#' of `as.data.frame(lme4::VarCorr(fit))`: one row per standard deviation
#' (`var2` `NA`) and per correlation. A fit with independent coefficients
#' (`||`, or `group =`) has no correlation rows.
#'
#' @param x A `bulkem_hbglm` fit.
#' @param sigma,... Not used (lme4's generic has them).
#' @return A data frame with columns `grp`, `var1`, `var2`, `vcov` (the
#'   posterior mean of the variance or covariance) and `sdcor` (of the
#'   standard deviation or correlation), plus `sd` of `sdcor`'s draws.
#' @examples
#' if (requireNamespace("lme4", quietly = TRUE)) {
#'   set.seed(4)
#'   d <- data.frame(g = rep(1:10, each = 20), x = rnorm(200))
#'   d$y <- rnorm(10)[d$g] + (1 + rnorm(10, 0, 0.5))[d$g] * d$x + rnorm(200)
#'   fit <- hbglm(y ~ x + (1 + x | g), d, iter = 1000, warmup = 500,
#'                chains = 2, use.gpu = FALSE, seed = 1)
#'   lme4::VarCorr(fit)
#' }
#' @exportS3Method nlme::VarCorr
VarCorr.bulkem_hbglm <- function(x, sigma = 1, ...) {
  dr <- matrix(x$draws, ncol = dim(x$draws)[3], dimnames = list(NULL, dimnames(x$draws)[[3]]))
  grp <- if (inherits(x$model$group_spec, "formula")) paste(deparse(x$model$group_spec[[2]]), collapse = "") else if (is.character(x$model$group_spec)) x$model$group_spec else "group"
  # One grouping factor's rows: its sds, then its correlations.
  block <- function(grp, coefs, sd_names, cor_names) {
    sd <- dr[, sd_names, drop = FALSE]
    rows <- data.frame(grp = grp, var1 = coefs, var2 = NA_character_, vcov = colMeans(sd^2),
                       sdcor = colMeans(sd), sd = apply(sd, 2, stats::sd), stringsAsFactors = FALSE)
    if (length(cor_names) == 0) return(rows)
    pairs <- utils::combn(length(coefs), 2)
    cor <- dr[, cor_names, drop = FALSE]
    cov <- cor * sd[, pairs[1, ], drop = FALSE] * sd[, pairs[2, ], drop = FALSE]
    rbind(rows, data.frame(grp = grp, var1 = coefs[pairs[1, ]], var2 = coefs[pairs[2, ]], vcov = colMeans(cov),
                           sdcor = colMeans(cor), sd = apply(cor, 2, stats::sd), stringsAsFactors = FALSE))
  }
  coefs <- x$coef_names
  rows <- block(grp, coefs, paste0("tau[", coefs, "]"), hbglm_cor_names("cor", coefs, isTRUE(x$correlated)))
  for (f in x$model$factors) {
    rows <- rbind(rows, block(f$name, f$coef_names, paste0("sd_", f$name, "[", f$coef_names, "]"),
                              hbglm_cor_names(paste0("cor_", f$name), f$coef_names, isTRUE(f$correlated))))
  }
  if (x$family == "gaussian") {
    rows <- rbind(rows, data.frame(grp = "Residual", var1 = NA_character_, var2 = NA_character_, vcov = mean(dr[, "sigma"]^2),
                                   sdcor = mean(dr[, "sigma"]), sd = stats::sd(dr[, "sigma"]), stringsAsFactors = FALSE))
  }
  rownames(rows) <- NULL
  rows
}

#' @rdname summary.bulkem_hbglm
#' @return `as.array()`: the draws array, iterations x chains x parameters.
#' @export
as.array.bulkem_hbglm <- function(x, ...) x$draws

#' Convert draws to coda and posterior objects
#'
#' \pkg{posterior}: `as_draws_array()`, `as_draws_matrix()`, `as_draws_df()`,
#' `as_draws_list()`, `as_draws_rvars()` and `as_draws()` (a `draws_array`)
#' give the kept draws with their chains, so that every function of
#' posterior (`summarise_draws()`, `rhat()`, `ess_bulk()`, `ess_tail()`,
#' `subset_draws()`, ...) works on them. Variables are named as in the
#' fit's `draws` (`beta[group,coef]`, `mu[coef]`, `tau[coef]`,
#' `gamma[coef]`, `sigma`); `as_draws_rvars()` gathers them into one
#' `rvar` per block, `beta` a groups x coefficients array with those
#' dimnames (posterior then names a block of one element, such as a single
#' `gamma[promo]`, by the block alone: `gamma`).
#'
#' \pkg{coda}: `as.mcmc.list()` gives one `mcmc` object per chain, with the
#' iteration numbers of the kept sweeps (`start = warmup + thin`, `thin`).
#' `as.mcmc()` follows coda's own rule for an `mcmc.list`
#' (`coda::as.mcmc()` of a list of one chain is that chain, of several an
#' error): a fit of one chain gives its `mcmc` object; a fit of several
#' chains is an error of class `bulkem_error_input` pointing to
#' `as.mcmc.list()`, since an `mcmc` object holds one chain and stacking
#' chains end to end would make the chains' boundaries look like
#' autocorrelated draws (wrong effective sample sizes).
#'
#' The methods are registered when the package providing the generic is
#' installed.
#'
#' @param x A `bulkem_hbglm` fit.
#' @param ... Unused.
#' @return An `mcmc.list`, an `mcmc` object, or a posterior `draws` object
#'   of the class named.
#' @name hbglm-conversions
#' @references Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and
#'   Buerkner, P.-C. (2021). Rank-normalization, folding, and localization:
#'   an improved R-hat for assessing convergence of MCMC. *Bayesian
#'   Analysis* 16(2), 667--718.
#' @examplesIf requireNamespace("posterior", quietly = TRUE) && requireNamespace("coda", quietly = TRUE)
#' set.seed(4)
#' d <- data.frame(g = rep(1:4, each = 25), x = rnorm(100))
#' d$y <- rnorm(100, c(-1, 0, 0.5, 1)[d$g] + d$x)
#' fit <- hbglm(y ~ x, d, group = "g", iter = 1000, warmup = 500, chains = 2,
#'              use.gpu = FALSE)
#' posterior::summarise_draws(posterior::as_draws_df(fit))
#' posterior::as_draws_rvars(fit)$beta
#' coda::effectiveSize(coda::as.mcmc.list(fit))
#' # One chain: as.mcmc() gives it; several: use as.mcmc.list().
#' one <- hbglm(y ~ x, d, group = "g", iter = 2000, warmup = 1000, chains = 1,
#'              use.gpu = FALSE)
#' dim(coda::as.mcmc(one))
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
#' @exportS3Method coda::as.mcmc
as.mcmc.bulkem_hbglm <- function(x, ...) {
  chains <- dim(x$draws)[2]
  if (chains != 1) {
    bulkem_abort(c(
      "{.fn as.mcmc} gives one chain, but the fit has {chains} chains.",
      i = "Use {.code coda::as.mcmc.list(fit)} for all chains (as {.pkg coda} does for an {.cls mcmc.list}),",
      i = "or {.code posterior::as_draws_matrix(fit)} for the draws of all chains pooled."
    ))
  }
  as.mcmc.list.bulkem_hbglm(x)[[1]]
}

#' @rdname hbglm-conversions
#' @exportS3Method posterior::as_draws_array
as_draws_array.bulkem_hbglm <- function(x, ...) {
  d <- x$draws
  dimnames(d) <- list(iteration = NULL, chain = NULL, variable = dimnames(d)[[3]])
  posterior::as_draws_array(d)
}

#' @rdname hbglm-conversions
#' @exportS3Method posterior::as_draws
as_draws.bulkem_hbglm <- function(x, ...) as_draws_array.bulkem_hbglm(x)

#' @rdname hbglm-conversions
#' @exportS3Method posterior::as_draws_matrix
as_draws_matrix.bulkem_hbglm <- function(x, ...) posterior::as_draws_matrix(as_draws_array.bulkem_hbglm(x))

#' @rdname hbglm-conversions
#' @exportS3Method posterior::as_draws_df
as_draws_df.bulkem_hbglm <- function(x, ...) posterior::as_draws_df(as_draws_array.bulkem_hbglm(x))

#' @rdname hbglm-conversions
#' @exportS3Method posterior::as_draws_list
as_draws_list.bulkem_hbglm <- function(x, ...) posterior::as_draws_list(as_draws_array.bulkem_hbglm(x))

#' @rdname hbglm-conversions
#' @exportS3Method posterior::as_draws_rvars
as_draws_rvars.bulkem_hbglm <- function(x, ...) posterior::as_draws_rvars(as_draws_array.bulkem_hbglm(x))

# ---- Predictions, residuals, posterior predictive draws, log-likelihood ----

# Observations per block of the draws x observations matrices that the
# summaries of predict() and residuals() work through, so that their memory
# stays bounded (about 2^22 values, 32 MB) whatever the size of the data.
HBGLM_BLOCK_VALUES <- 2^22

hbglm_check_fit <- function(object, call) {
  if (is.null(object$model)) {
    bulkem_abort(c("The fit holds no data to predict from.",
                   i = "It was made by an older version of bulkem: fit it again with {.fn hbglm}."), call = call)
  }
}

# The draws of a fit as matrices (draws x ...), draws ordered as posterior's
# draws_matrix (iterations within chains): one draws x groups matrix of
# beta per coefficient, gamma (draws x globals) and sigma. `which`: the
# draws to keep (indices into all of them), NULL for all.
hbglm_draw_parts <- function(object, which = NULL, new = character(), new_levels = list()) {
  vars <- dimnames(object$draws)[[3]]
  take <- function(names) {
    m <- matrix(object$draws[, , match(names, vars), drop = FALSE], ncol = length(names))
    if (is.null(which)) m else m[which, , drop = FALSE]
  }
  beta <- lapply(object$coef_names, function(cf) take(paste0("beta[", object$groups, ",", cf, "]")))
  if (length(new) > 0) {
    drawn <- hbglm_new_group_coefs(object, take, length(new))
    beta <- lapply(seq_along(beta), function(k) cbind(beta[[k]], drawn[[k]]))
  }
  # The other grouping factors' effects (draws x levels per term), new
  # levels' drawn from N(0, Sigma_f) at each draw.
  factors <- lapply(seq_along(object$model$factors), function(i) {
    f <- object$model$factors[[i]]
    r <- lapply(f$coef_names, function(cf) take(paste0("r_", f$name, "[", f$levels, ",", cf, "]")))
    m <- if (i <= length(new_levels)) length(new_levels[[i]]) else 0
    if (m > 0) {
      cor_names <- hbglm_cor_names(paste0("cor_", f$name), f$coef_names, isTRUE(f$correlated))
      drawn <- hbglm_population_draws(0, take(paste0("sd_", f$name, "[", f$coef_names, "]")), if (length(cor_names)) take(cor_names), m)
      r <- lapply(seq_along(r), function(k) cbind(r[[k]], drawn[[k]]))
    }
    r
  })
  list(
    beta = beta,
    factors = factors,
    gamma = if (length(object$global_names) > 0) take(paste0("gamma[", object$global_names, "]")),
    sigma = if (object$family == "gaussian") as.vector(take("sigma")),
    shape = if (object$family == "negbinomial") as.vector(take("shape")),
    # Ordinal: the cut-points (draws x (C - 1)) and the intercept's
    # population mean, which hbglm_eta() takes out of the linear predictor.
    cuts = if (object$family == "ordinal") take(paste0("cut[", seq_len(length(object$categories) - 1), "]")),
    shift = if (object$family == "ordinal") as.vector(take("mu[(Intercept)]")),
    n = if (is.null(which)) prod(dim(object$draws)[1:2]) else length(which)
  )
}

# Coefficients of `m` groups the fit has not seen, one set per posterior
# draw from the population distribution at that draw: N(mu, Sigma) with
# Sigma from the draw's tau and correlations (independent coefficients:
# N(mu_k, tau_k^2)), by R's random numbers. A list of draws x m matrices,
# one per coefficient.
hbglm_new_group_coefs <- function(object, take, m) {
  coefs <- object$coef_names
  cor_names <- hbglm_cor_names("cor", coefs, isTRUE(object$correlated))
  hbglm_population_draws(take(paste0("mu[", coefs, "]")), take(paste0("tau[", coefs, "]")),
                         if (length(cor_names)) take(cor_names), m)
}

# m draws per posterior draw of N(mean, Sigma), Sigma from the draw's sds
# (draws x K) and correlations (draws x K (K - 1) / 2, pairs as
# hbglm_cor_names; NULL: independent); `mean` draws x K, or 0. A list of
# draws x m matrices, one per coefficient.
hbglm_population_draws <- function(mean, sd, cor, m) {
  S <- nrow(sd)
  K <- ncol(sd)
  mean <- if (identical(mean, 0)) matrix(0, S, K) else mean
  z <- array(stats::rnorm(S * K * m), c(S, K, m))
  out <- lapply(seq_len(K), function(k) matrix(0, S, m))
  if (!is.null(cor) && K > 1) {
    pairs <- utils::combn(K, 2)
    R <- diag(K)
    for (s in seq_len(S)) {
      R[t(pairs)] <- cor[s, ]
      R[t(pairs[2:1, , drop = FALSE])] <- cor[s, ]
      L <- t(chol(R * outer(sd[s, ], sd[s, ])))
      b <- mean[s, ] + L %*% matrix(z[s, , ], K)
      for (k in seq_len(K)) out[[k]][s, ] <- b[k, ]
    }
  } else {
    for (k in seq_len(K)) out[[k]] <- mean[, k] + sd[, k] * matrix(z[, k, ], S)
  }
  out
}

# The chain of every draw, in the order of hbglm_draw_parts() and log_lik().
hbglm_chain_ids <- function(object) {
  d <- dim(object$draws)
  rep(seq_len(d[2]), each = d[1])
}

# Linear predictors (draws x observations idx): group coefficients of each
# row's group, the other grouping factors' effects, global coefficients,
# offset.
hbglm_eta <- function(parts, rows, idx) {
  S <- parts$n
  eta <- matrix(0, S, length(idx))
  g <- rows$group[idx]
  for (k in seq_along(parts$beta)) {
    eta <- eta + parts$beta[[k]][, g, drop = FALSE] * rep(rows$x[idx, k], each = S)
  }
  for (i in seq_along(parts$factors)) {
    fr <- rows$factors[[i]]
    lev <- fr$level[idx]
    for (k in seq_along(parts$factors[[i]])) {
      eta <- eta + parts$factors[[i]][[k]][, lev, drop = FALSE] * rep(fr$w[idx, k], each = S)
    }
  }
  if (!is.null(parts$gamma)) eta <- eta + parts$gamma %*% t(rows$z[idx, , drop = FALSE])
  if (!is.null(rows$offset)) eta <- eta + rep(rows$offset[idx], each = S)
  if (!is.null(parts$shift)) eta <- eta - parts$shift
  eta
}

# h(eta) at posterior draws `which` (NULL: all) for every observation, a
# draws x observations matrix, its memory checked first.
hbglm_draws_matrix <- function(object, newdata, group, new.groups, which, h, fn, call) {
  rows <- hbglm_rows(object, newdata, group, FALSE, call, new_groups = new.groups == "population")
  parts <- hbglm_draw_parts(object, which, new = rows$new, new_levels = rows$new_levels)
  n <- length(rows$group)
  hbglm_ensure_memory(fn, parts$n, n, call)
  out <- h(hbglm_eta(parts, rows, seq_len(n)), parts)
  dimnames(out) <- list(NULL, rows$names)
  out
}

# The mean response of draws x observations linear predictors, as
# function(eta, parts): the inverse link, and for the ordinal family the
# expected category sum_c c P(y = c).
hbglm_inverse_link <- function(family) {
  switch(family,
         gaussian = hbglm_identity, binomial = function(eta, parts) stats::plogis(eta),
         poisson = , negbinomial = function(eta, parts) exp(eta),
         ordinal = function(eta, parts) hbglm_ordinal_moment(eta, parts$cuts, 1))
}

hbglm_identity <- function(eta, parts) eta

# The ordinal family's category probabilities at draws x observations
# linear predictors (without the intercept's population mean), the
# draws' cut-points a draws x (C - 1) matrix: a list of C matrices, P(y =
# c) = F(cut_c - eta) - F(cut_{c-1} - eta).
hbglm_ordinal_probs <- function(eta, cuts) {
  below <- c(list(0 * eta), lapply(seq_len(ncol(cuts)), function(c) stats::plogis(cuts[, c] - eta)), list(0 * eta + 1))
  lapply(seq_len(ncol(cuts) + 1), function(c) below[[c + 1]] - below[[c]])
}

# E[y^power] over the categories 1..C.
hbglm_ordinal_moment <- function(eta, cuts, power) {
  p <- hbglm_ordinal_probs(eta, cuts)
  Reduce(`+`, lapply(seq_along(p), function(c) c^power * p[[c]]))
}

# f(eta block, idx) for blocks of observations, results (one row per
# observation) bound together.
hbglm_by_rows <- function(parts, rows, f) {
  n <- length(rows$group)
  size <- max(1, floor(HBGLM_BLOCK_VALUES / parts$n))
  blocks <- split(seq_len(n), ceiling(seq_len(n) / size))
  do.call(rbind, lapply(blocks, function(idx) f(hbglm_eta(parts, rows, idx), idx)))
}

# A draws x observations matrix is the one large allocation of these
# methods: refused as a memory error when it cannot fit.
hbglm_ensure_memory <- function(fn, draws, obs, call) {
  what <- sprintf("%s(): %s draws x %s observations", fn, format(draws, big.mark = ","), format(obs, big.mark = ","))
  call_core(memory_ensure_(what, 3 * 8 * as.double(draws) * as.double(obs)), call, fn)
}

# The observations to predict for: the fit's own (newdata NULL) or
# newdata's, as list(x, z, offset, group, y, trials, names), y and trials
# only with `response`. Rebuilds the design as predict.lm() does: the fit's
# terms, factor levels and contrasts, offset() terms and the `offset`
# argument evaluated in newdata.
hbglm_rows <- function(object, newdata, group, response, call, need = NULL, new_groups = FALSE) {
  hbglm_check_fit(object, call)
  m <- object$model
  if (is.null(newdata)) {
    if (!is.null(group)) {
      bulkem_abort("{.arg group} is for {.arg newdata} only: the fit knows the groups of its own rows.", call = call)
    }
    return(list(x = m$x, z = m$z, offset = m$offset, group = m$group, y = m$y, trials = m$trials,
                factors = m$factor_rows, names = rownames(m$x)))
  }
  if (!is.data.frame(newdata)) {
    bulkem_abort(c("{.arg newdata} must be a data frame.", x = "You supplied {describe_value(newdata)}."), call = call)
  }
  if (nrow(newdata) == 0) bulkem_abort("{.arg newdata} must have at least one row.", call = call)
  build <- function(d, arg, keep_response) {
    tt <- if (keep_response) d$terms else stats::delete.response(d$terms)
    mf <- tryCatch(stats::model.frame(tt, newdata, xlev = d$xlevels, na.action = stats::na.pass),
                   error = function(e) bulkem_abort(c(
                     "The variables of the fit's {.arg {arg}} can't be evaluated in {.arg newdata}.",
                     x = conditionMessage(e), i = need), call = call))
    bad <- which(!stats::complete.cases(mf))
    if (length(bad) > 0) {
      bulkem_abort(c("{.arg newdata} must not have missing values in the variables of the model.",
                     x = "The fit's {.arg {arg}} has missing values in row{?s} {utils::head(bad, 5)}{if (length(bad) > 5) ', ...'}."),
                   call = call)
    }
    mm <- tryCatch(stats::model.matrix(tt, mf, contrasts.arg = d$contrasts),
                   error = function(e) bulkem_abort(c(
                     "{.arg newdata} can't be turned into the fit's design matrix.",
                     x = conditionMessage(e),
                     i = "Does a variable of {.arg newdata} have another type than in the fit's data?"), call = call))
    list(mf = mf, mm = mm)
  }
  des <- m$design
  oa <- m$offset_arg
  needed <- unique(c(des$formula$vars, if (response) des$formula$response_vars, des$global$vars, oa$vars,
                     unlist(lapply(m$factors, function(f) f$design$vars))))
  missing_vars <- setdiff(needed, names(newdata))
  if (length(missing_vars) > 0) {
    bulkem_abort(c("{.arg newdata} must hold the variables the fit took from its data.",
                   x = "{cli::qty(length(missing_vars))}Variable{?s} {.val {missing_vars}} {cli::qty(length(missing_vars))}{?is/are} missing.",
                   i = need), call = call)
  }
  f <- build(des$formula, "formula", response)
  x <- f$mm
  off <- stats::model.offset(f$mf)
  z <- matrix(0, nrow(newdata), 0)
  if (!is.null(des$global)) {
    gl <- build(des$global, "global", FALSE)
    z <- gl$mm[, colnames(gl$mm) != "(Intercept)", drop = FALSE]
    goff <- stats::model.offset(gl$mf)
    if (!is.null(goff)) off <- if (is.null(off)) goff else off + goff
  }
  if (!identical(colnames(x), object$coef_names) || !identical(colnames(z), object$global_names)) {
    bulkem_abort(c("{.arg newdata} gives other design columns than the fit's.",
                   x = "Columns {.val {c(colnames(x), colnames(z))}}; the fit has {.val {c(object$coef_names, object$global_names)}}.",
                   i = "A variable of {.arg newdata} has another type than in the fit's data (such as a number given as text or as a factor)."),
                 call = call)
  }
  if (!is.null(oa$expr)) {
    v <- tryCatch(eval(oa$expr, newdata, oa$env),
                  error = function(e) bulkem_abort(c("The fit's {.arg offset} can't be evaluated in {.arg newdata}.",
                                                     x = conditionMessage(e)), call = call))
    if (!is.numeric(v) || !is.null(dim(v)) || length(v) != nrow(newdata)) {
      bulkem_abort(c("The fit's {.arg offset} ({.code {deparse(oa$expr)}}) must give one number per row of {.arg newdata} ({nrow(newdata)}).",
                     x = "It gives {describe_value(v)}."), call = call)
    }
    off <- if (is.null(off)) as.double(v) else off + v
  }
  g <- if (!is.null(group)) group else {
    spec <- m$group_spec
    if (is.null(spec)) {
      bulkem_abort(c("{.arg newdata} can't say which group each row is in: the fit's {.arg group} was a vector.",
                     i = "Give {.arg group}, one group per row of {.arg newdata}."), call = call)
    }
    if (is.character(spec)) {
      if (!spec %in% names(newdata)) {
        bulkem_abort(c("{.arg newdata} must hold the fit's group column {.val {spec}}.",
                       i = "Or give {.arg group}, one group per row of {.arg newdata}."), call = call)
      }
      newdata[[spec]]
    } else if (is.call(spec[[2]]) && identical(spec[[2]][[1]], as.name(":"))) {
      # A nested grouping factor (a formula's `(1 | a/b)`).
      as.character(hbglm_grouping(spec[[2]], newdata, environment(spec), call))
    } else {
      tryCatch(eval(spec[[2]], newdata, environment(spec)),
               error = function(e) bulkem_abort(c("The fit's {.arg group} can't be evaluated in {.arg newdata}.",
                                                  x = conditionMessage(e)), call = call))
    }
  }
  if (!is.atomic(g) || length(g) != nrow(newdata)) {
    bulkem_abort(c("The groups must give one group per row of {.arg newdata} ({nrow(newdata)}).",
                   x = "They are {describe_value(g)}."), call = call)
  }
  for (part in list(list(x, "A predictor"), list(z, "A global predictor"), list(off, "The offset"), list(g, "The group"))) {
    bad <- if (is.matrix(part[[1]])) which(rowSums(is.na(part[[1]])) > 0) else which(is.na(part[[1]]))
    if (length(bad) > 0) {
      bulkem_abort(c("{.arg newdata} must not have missing values in the variables of the model.",
                     x = "{part[[2]]} is missing in row{?s} {utils::head(bad, 5)}{if (length(bad) > 5) ', ...'}."),
                   call = call)
    }
  }
  hbglm_check_values(x, "A predictor in {.arg newdata}", call)
  hbglm_check_values(z, "A global predictor in {.arg newdata}", call)
  if (!is.null(off)) hbglm_check_values(matrix(off, dimnames = list(NULL, "offset")), "The offset in {.arg newdata}", call)
  idx <- match(as.character(g), object$groups)
  new <- unique(as.character(g)[is.na(idx)])
  if (length(new) > 0 && new_groups) {
    # New groups follow the fit's: their coefficients are drawn
    # (hbglm_draw_parts) as columns after the fit's groups.
    idx[is.na(idx)] <- length(object$groups) + match(as.character(g)[is.na(idx)], new)
  } else if (length(new) > 0) {
    bulkem_abort(c(
      "{.arg newdata} must hold only groups of the fit.",
      x = "{cli::qty(length(new))}Group{?s} {.val {utils::head(new, 5)}}{if (length(new) > 5) ', ...'} {cli::qty(length(new))}{?is/are} not in the fit.",
      i = paste("The draws hold the coefficients of the fit's own groups only; a new group's coefficients",
                "are not estimated. {.code new.groups = \"population\"} draws them from the population distribution.")
    ), call = call)
  }
  other <- hbglm_factor_newdata(object, newdata, new_groups, call)
  out <- list(x = x, z = z, offset = if (!is.null(off)) as.double(off), group = idx, names = rownames(newdata),
              new = if (new_groups) new else character(), factors = other$rows, new_levels = other$new)
  if (response) {
    y <- stats::model.response(f$mf)
    r <- hbglm_response(y, object$family, call, categories = object$categories)
    bad <- which(!is.finite(r$y))
    if (length(bad) > 0) {
      bulkem_abort(c("{.arg newdata} must not have missing values in the variables of the model.",
                     x = "The response is missing in row{?s} {utils::head(bad, 5)}."), call = call)
    }
    out$y <- r$y
    out$trials <- r$trials
  } else if (object$family == "binomial" && !is.null(m$trials)) {
    # Trials come with a cbind() response: newdata must hold it.
    out$trials <- hbglm_rows(object, newdata, group, TRUE, call, need)$trials
  }
  out
}

#' Predictions, fitted values and residuals of a hierarchical GLM
#'
#' Posterior summaries of the linear predictor or of the mean response of
#' each observation, computed draw by draw from the group's coefficients,
#' the global coefficients and the offset:
#' \eqn{\eta_i = x_i'\beta_{g[i]} + z_i'\gamma + \mathrm{offset}_i}, and the
#' mean response \eqn{h(\eta_i)} with \eqn{h} the inverse link (identity,
#' logistic, exponential).
#'
#' `predict()` gives the posterior mean of \eqn{\eta_i} (`type = "link"`) or
#' of \eqn{h(\eta_i)} (`type = "response"`: the mean for the gaussian
#' family, the probability of success for the binomial, the mean count for
#' the poisson and negative binomial), and with `interval = "credible"` the equal-tailed credible
#' interval of probability `level` (quantiles of the draws). For intervals
#' of new observations (posterior predictive), use [simulate()]. `newdata`
#' must hold the variables of the fit's `formula`, `global` and offsets, and
#' its groups (the `group` column, or `group =`); factor levels and
#' contrasts are those of the fit. A group the fit has not seen is an
#' error (the fit has no draws of its coefficients) unless `new.groups =
#' "population"`.
#'
#' `fitted()` is `predict(type = "response")` for the fit's own rows.
#' `residuals()` are the observed response minus the fitted value
#' (`"response"`; for a binomial `cbind(successes, failures)` response, the
#' observed proportion minus the fitted probability, as in [glm()]), or
#' those divided by the square root of the posterior mean of the
#' observation's variance given the parameters (`"pearson"`: \eqn{\sigma^2},
#' \eqn{p(1-p)/\mathrm{trials}}, \eqn{\lambda}).
#'
#' The summaries work through the observations in blocks, so that their
#' memory stays bounded; `summary = FALSE` returns the whole draws x
#' observations matrix.
#'
#' @param object A `bulkem_hbglm` fit from [hbglm()].
#' @param newdata `NULL` (the fit's own rows) or a data frame of rows to
#'   predict for.
#' @param type `predict()`: `"link"` (linear predictor) or `"response"`
#'   (mean response). `residuals()`: `"response"` or `"pearson"`.
#' @param interval `"none"` or `"credible"` (equal-tailed credible interval).
#' @param level Probability of the credible interval.
#' @param summary `TRUE`: posterior means (and intervals). `FALSE`: the
#'   draws, a draws x observations matrix (draws in the order of
#'   `posterior::as_draws_matrix()`: iterations within chains).
#' @param group `NULL`, or the groups of `newdata`'s rows (needed when the
#'   fit's `group` was a vector rather than a column name or formula).
#' @param new.groups What to do with groups of `newdata` the fit has not
#'   seen: `"error"` (the default), or `"population"`: at each posterior
#'   draw, a new group's coefficients are drawn from the population
#'   distribution at that draw, \eqn{N(\mu, \Sigma)} (independent
#'   coefficients: \eqn{N(\mu_k, \tau_k^2)}), with R's random numbers
#'   (`set.seed()` reproduces them), as brms's `allow_new_levels = TRUE`.
#' @param ... Not used: an argument these methods do not have is an error.
#' @return `predict()`: with `interval = "none"` a named vector, one value
#'   per row; with `"credible"` a matrix with columns `fit`, `lwr` and
#'   `upr`, as [predict.lm()]; with `summary = FALSE` a draws x observations
#'   matrix. `fitted()`: a named vector. `residuals()`: a named vector.
#' @seealso [simulate.bulkem_hbglm()] for posterior predictive draws,
#'   [log_lik()] for the pointwise log-likelihood.
#' @examples
#' set.seed(5)
#' d <- data.frame(g = rep(c("a", "b", "c"), each = 20), x = rnorm(60))
#' d$y <- rbinom(60, 1, plogis(c(-0.5, 0, 0.5)[factor(d$g)] + d$x))
#' fit <- hbglm(y ~ x, d, group = "g", family = "binomial", iter = 1000,
#'              warmup = 500, chains = 2, use.gpu = FALSE)
#' head(fitted(fit))
#' new <- data.frame(g = c("a", "c"), x = c(0, 1))
#' predict(fit, new, type = "response", interval = "credible")
#' head(residuals(fit, type = "pearson"))
#' @export
predict.bulkem_hbglm <- function(object, newdata = NULL, type = c("link", "response"),
                                 interval = c("none", "credible"), level = 0.95, summary = TRUE,
                                 group = NULL, new.groups = c("error", "population"), ...) {
  call <- environment()
  check_no_dots(list(...), "predict", "bulkem::predict.bulkem_hbglm", call)
  type <- match_arg(type, c("link", "response"), "type", call)
  interval <- match_arg(interval, c("none", "credible"), "interval", call)
  ok <- is.numeric(level) && length(level) == 1 && !is.na(level) && level > 0 && level < 1
  if (!ok) {
    bulkem_abort(c("{.arg level} must be a probability between 0 and 1 (exclusive).",
                   x = "You supplied {describe_value(level)}."), call = call)
  }
  check_flag(summary, "summary", call = call)
  new.groups <- match_arg(new.groups, c("error", "population"), "new.groups", call)
  h <- if (type == "link") hbglm_identity else hbglm_inverse_link(object$family)
  if (!summary) return(hbglm_draws_matrix(object, newdata, group, new.groups, NULL, h, "predict", call))
  rows <- hbglm_rows(object, newdata, group, FALSE, call, new_groups = new.groups == "population")
  parts <- hbglm_draw_parts(object, new = rows$new, new_levels = rows$new_levels)
  probs <- c((1 - level) / 2, (1 + level) / 2)
  res <- hbglm_by_rows(parts, rows, function(eta, idx) {
    v <- h(eta, parts)
    if (interval == "none") return(matrix(colMeans(v), ncol = 1))
    cbind(colMeans(v), t(apply(v, 2, stats::quantile, probs = probs, names = FALSE)))
  })
  if (interval == "none") return(stats::setNames(res[, 1], rows$names))
  dimnames(res) <- list(rows$names, c("fit", "lwr", "upr"))
  res
}

#' @rdname predict.bulkem_hbglm
#' @export
fitted.bulkem_hbglm <- function(object, ...) {
  call <- environment()
  check_no_dots(list(...), "fitted", "bulkem::predict.bulkem_hbglm", call)
  hbglm_check_fit(object, call)
  predict.bulkem_hbglm(object, type = "response")
}

#' @rdname predict.bulkem_hbglm
#' @export
residuals.bulkem_hbglm <- function(object, type = c("response", "pearson"), ...) {
  call <- environment()
  check_no_dots(list(...), "residuals", "bulkem::predict.bulkem_hbglm", call)
  type <- match_arg(type, c("response", "pearson"), "type", call)
  rows <- hbglm_rows(object, NULL, NULL, TRUE, call)
  parts <- hbglm_draw_parts(object)
  h <- hbglm_inverse_link(object$family)
  trials <- if (is.null(rows$trials)) rep(1, length(rows$y)) else rows$trials
  res <- hbglm_by_rows(parts, rows, function(eta, idx) {
    mu <- h(eta, parts)
    v <- switch(object$family,
                ordinal = colMeans(hbglm_ordinal_moment(eta, parts$cuts, 2) - mu^2),
                gaussian = rep(mean(parts$sigma^2), length(idx)),
                binomial = colMeans(mu * (1 - mu)) / trials[idx],
                poisson = colMeans(mu),
                negbinomial = colMeans(mu + mu^2 / parts$shape))
    cbind(colMeans(mu), v)
  })
  observed <- if (object$family == "binomial") rows$y / trials else rows$y
  r <- observed - res[, 1]
  if (type == "pearson") r <- r / sqrt(res[, 2])
  stats::setNames(r, rows$names)
}

#' Posterior predictive draws of a hierarchical GLM
#'
#' Draws new responses from the posterior predictive distribution, as
#' `posterior_predict()` does for \pkg{rstanarm} and \pkg{brms} fits: for
#' each chosen posterior draw of the parameters, one response per
#' observation from the family (gaussian with that draw's `sigma`, binomial
#' with the observation's trials, poisson, negative binomial with that
#' draw's `shape`).
#'
#' @param object A `bulkem_hbglm` fit from [hbglm()].
#' @param nsim `NULL` (every kept draw once, in order) or the number of
#'   posterior draws to use, chosen at random without replacement (at most
#'   the number of kept draws).
#' @param seed `NULL` or a seed for [set.seed()], as in [stats::simulate()];
#'   R's random number state is restored afterwards.
#' @param newdata,group `NULL` (the fit's own rows) or new rows, as in
#'   [predict.bulkem_hbglm()]; a binomial fit with a `cbind(successes,
#'   failures)` response needs the response's variables in `newdata` for
#'   the trials.
#' @param new.groups As in [predict.bulkem_hbglm()]: `"population"` draws
#'   the coefficients of groups the fit has not seen from the population
#'   distribution at each posterior draw.
#' @param ... Not used: an argument this method does not have is an error.
#' @return A draws x observations matrix of simulated responses (numbers
#'   of successes for the binomial family), with attributes `seed` (the
#'   random number state used, as [stats::simulate()]) and `draws` (the
#'   indices of the posterior draws used, iterations within chains).
#'   Unlike [stats::simulate()], which returns a data frame of one column
#'   per simulation, the result is a matrix of one row per draw, as
#'   \pkg{posterior} and \pkg{bayesplot} expect.
#' @examples
#' set.seed(6)
#' d <- data.frame(g = rep(1:4, each = 15), x = rnorm(60))
#' d$y <- rpois(60, exp(0.5 + 0.3 * d$x))
#' fit <- hbglm(y ~ x, d, group = "g", family = "poisson", iter = 1000,
#'              warmup = 500, chains = 2, use.gpu = FALSE)
#' yrep <- simulate(fit, nsim = 200, seed = 1)
#' dim(yrep)
#' # Posterior predictive check: observed and replicated mean counts.
#' c(observed = mean(d$y), replicated = mean(yrep))
#' @export
simulate.bulkem_hbglm <- function(object, nsim = NULL, seed = NULL, newdata = NULL, group = NULL,
                                  new.groups = c("error", "population"), ...) {
  call <- environment()
  check_no_dots(list(...), "simulate", "bulkem::simulate.bulkem_hbglm", call)
  total <- prod(dim(object$draws)[1:2])
  if (!is.null(nsim)) {
    nsim <- check_count(nsim, "nsim", call = call)
    if (nsim > total) {
      bulkem_abort(c("{.arg nsim} must be at most the number of kept draws ({total}).",
                     x = "You supplied {.code nsim = {nsim}}.",
                     i = "Use {.code nsim = NULL} for every draw once."), call = call)
    }
  }
  new.groups <- match_arg(new.groups, c("error", "population"), "new.groups", call)
  rows <- hbglm_rows(object, newdata, group, FALSE, call,
                     need = "A binomial fit with a {.code cbind(successes, failures)} response needs them for the trials.",
                     new_groups = new.groups == "population")
  # As stats::simulate(): a given seed is used and R's state restored.
  if (!exists(".Random.seed", envir = globalenv(), inherits = FALSE)) stats::runif(1)
  if (is.null(seed)) {
    rng_state <- get(".Random.seed", envir = globalenv())
  } else {
    old <- get(".Random.seed", envir = globalenv())
    on.exit(assign(".Random.seed", old, envir = globalenv()))
    set.seed(seed)
    rng_state <- structure(seed, kind = as.list(RNGkind()))
  }
  which <- if (is.null(nsim)) seq_len(total) else sort(sample.int(total, nsim))
  n <- length(rows$group)
  hbglm_ensure_memory("simulate", length(which), n, call)
  parts <- hbglm_draw_parts(object, which, new = rows$new, new_levels = rows$new_levels)
  eta <- hbglm_eta(parts, rows, seq_len(n))
  S <- length(which)
  out <- switch(object$family,
    gaussian = stats::rnorm(S * n, eta, parts$sigma),
    binomial = stats::rbinom(S * n, rep(if (is.null(rows$trials)) 1 else rows$trials, each = S), stats::plogis(eta)),
    poisson = stats::rpois(S * n, exp(eta)),
    negbinomial = stats::rnbinom(S * n, size = parts$shape, mu = exp(eta)),
    # The category below the first cut-point above a uniform draw.
    ordinal = {
      u <- stats::runif(S * n)
      1 + Reduce(`+`, lapply(seq_len(ncol(parts$cuts)), function(c) u > stats::plogis(parts$cuts[, c] - eta)))
    }
  )
  out <- matrix(as.double(out), S, n, dimnames = list(NULL, rows$names))
  attr(out, "seed") <- rng_state
  attr(out, "draws") <- which
  out
}

#' Pointwise log-likelihood of a hierarchical GLM
#'
#' The log-likelihood of every observation at every posterior draw, the
#' input of \pkg{loo}'s approximate leave-one-out cross-validation
#' (`loo::loo()`) and of WAIC (`loo::waic()`). Densities are complete
#' (normal with the draw's `sigma`; binomial with its binomial coefficient;
#' poisson with \eqn{-\log y!}; negative binomial by [dnbinom()]), so
#' `loo::loo()`'s `elpd_loo` is on the
#' scale of the data's log density.
#'
#' `log_lik()` is a generic of bulkem; when \pkg{rstantools} is installed
#' it calls that package's generic `log_lik()` (the one \pkg{brms} and
#' \pkg{rstanarm} use, where bulkem's method is registered too), so that it
#' works on their fits whichever package was attached last.
#'
#' `loo::loo(fit)` does it in one call: it computes the matrix, the relative
#' efficiencies of its draws with `loo::relative_eff()` and the chains of
#' the draws, and calls `loo::loo()` on the matrix.
#'
#' @param object,x A `bulkem_hbglm` fit from [hbglm()].
#' @param newdata,group `NULL` (the fit's own rows) or new rows with their
#'   responses, as in [predict.bulkem_hbglm()].
#' @param r_eff `NULL` (computed from the draws and their chains) or the
#'   relative efficiencies, as `loo::loo()` takes them.
#' @param cores Cores for `loo::loo()`.
#' @param ... For `log_lik()`: not used (an error). For `loo()`: passed to
#'   `loo::loo()`.
#' @return `log_lik()`: a draws x observations matrix (draws ordered as
#'   `posterior::as_draws_matrix()`: iterations within chains; the chain of
#'   each draw is `rep(seq_len(fit$chains), each = dim(fit$draws)[1])`).
#'   `loo()`: a `psis_loo` object of \pkg{loo}.
#' @references Vehtari, A., Gelman, A. and Gabry, J. (2017). Practical
#'   Bayesian model evaluation using leave-one-out cross-validation and
#'   WAIC. *Statistics and Computing* 27(5), 1413--1432.
#' @examples
#' set.seed(7)
#' d <- data.frame(g = rep(1:4, each = 40), x = rnorm(160))
#' d$y <- rnorm(160, 1 + d$x)
#' fit <- hbglm(y ~ x, d, group = "g", iter = 1000, warmup = 500, chains = 2,
#'              use.gpu = FALSE)
#' ll <- log_lik(fit)
#' dim(ll)
#' @examplesIf requireNamespace("loo", quietly = TRUE)
#' chain <- rep(seq_len(fit$chains), each = dim(fit$draws)[1])
#' loo::loo(ll, r_eff = loo::relative_eff(exp(ll), chain_id = chain))
#' loo::loo(fit)
#' @export
log_lik <- function(object, ...) {
  if (has_rstantools()) return(rstantools::log_lik(object, ...))
  UseMethod("log_lik")
}

#' @rdname log_lik
#' @export
#' @rawNamespace S3method(rstantools::log_lik, bulkem_hbglm)
log_lik.bulkem_hbglm <- function(object, newdata = NULL, group = NULL, ...) {
  call <- environment()
  check_no_dots(list(...), "log_lik", "bulkem::log_lik", call)
  rows <- hbglm_rows(object, newdata, group, TRUE, call)
  parts <- hbglm_draw_parts(object)
  S <- parts$n
  n <- length(rows$group)
  hbglm_ensure_memory("log_lik", S, n, call)
  eta <- hbglm_eta(parts, rows, seq_len(n))
  y <- rep(rows$y, each = S)
  out <- switch(object$family,
    gaussian = stats::dnorm(y, eta, parts$sigma, log = TRUE),
    binomial = {
      trials <- if (is.null(rows$trials)) rep(1, n) else rows$trials
      # log p and log(1 - p) without cancellation for large |eta|.
      rep(lchoose(trials, rows$y), each = S) + y * stats::plogis(eta, log.p = TRUE) +
        rep(trials - rows$y, each = S) * stats::plogis(-eta, log.p = TRUE)
    },
    poisson = y * eta - exp(eta) - rep(lgamma(rows$y + 1), each = S),
    negbinomial = stats::dnbinom(y, size = parts$shape, mu = exp(eta), log = TRUE),
    ordinal = {
      p <- hbglm_ordinal_probs(eta, parts$cuts)
      cat <- matrix(y, S)
      out <- matrix(0, S, n)
      for (c in seq_along(p)) out[cat == c] <- log(p[[c]][cat == c])
      out
    }
  )
  matrix(out, S, n, dimnames = list(NULL, rows$names))
}

#' @rdname log_lik
#' @exportS3Method loo::loo
loo.bulkem_hbglm <- function(x, ..., r_eff = NULL, cores = getOption("mc.cores", 1)) {
  ll <- log_lik.bulkem_hbglm(x)
  if (is.null(r_eff)) {
    # Relative efficiency of exp(log_lik): unchanged by a constant factor per
    # observation, which keeps exp() from underflowing.
    lik <- exp(ll - rep(apply(ll, 2, max), each = nrow(ll)))
    r_eff <- loo::relative_eff(lik, chain_id = hbglm_chain_ids(x), cores = cores)
  }
  loo::loo(ll, r_eff = r_eff, cores = cores, ...)
}
