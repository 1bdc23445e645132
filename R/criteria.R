# The criterion table of a model selection over K: accessor, print, plot.

#' The model-selection criteria of bulkem fits
#'
#' When [bulkem()] is given several candidate numbers of components
#' (`num.components = 1:5`), it fits every K to every dataset and keeps,
#' per dataset, the fit with the smallest criterion. `criteria()` returns the
#' whole table: one row per dataset, one column per candidate K.
#'
#' Values follow the convention of [stats::BIC()], so smaller is better,
#' with `df` = \eqn{(1 + p) K - 1} parameters (p parameters per component:
#' 2, or 1 for the Poisson and exponential families) and `n` observations:
#' * `BIC = -2 logLik + df log(n)`
#' * `AIC = -2 logLik + 2 df`
#' * `ICL = BIC - 2 sum_i log(max_j p_ij)`, where `p_ij` is the posterior
#'   probability of component `j` for observation `i`: BIC penalised by
#'   the uncertainty of assigning each observation to one component (as in
#'   mclust, with the sign of [stats::BIC()]).
#'
#' A cell is `NA` where the fit of that K failed (e.g. a dataset too small
#' for K components). The chosen K of a dataset is the number of components
#' of its fit (`length(fits[[d]]$alpha)`); a dataset whose fit failed has
#' chosen K `NA`.
#'
#' Fits that carry no table (e.g. made by hand, or by a bulkem without model
#' selection) get one computed from the fits themselves: one column per
#' number of components present, `NA` where a dataset has another K. ICL
#' then needs the posteriors (`keep.posterior = TRUE`).
#'
#' @param x For `criteria()`, a `bulkem_fits` object from [bulkem()]; for
#'   the methods, a `bulkem_criteria` table.
#' @param n Number of datasets (rows) to print.
#' @param digits Significant digits to print.
#' @param max.lines With at most this many datasets, `plot()` draws one
#'   line per dataset (criterion against K, the chosen K marked by a filled
#'   point); with more, an overview of two panels: a barplot of the number
#'   of datasets that chose each K, and boxplots, per K, of each dataset's
#'   criterion minus its best (smallest) criterion, on a log axis (zeros,
#'   i.e. the chosen K, are counted in the panel's subtitle, not drawn), with
#'   dotted lines at differences of 2, 6 and 10 (positive, strong and very
#'   strong evidence on Kass and Raftery's scale for BIC).
#' @param main Plot title (`NULL`: a default).
#' @param ... Further graphical parameters passed to the plotting functions
#'   (`plot()`), or unused.
#' @return `criteria()`: a numeric matrix of class
#'   `c("bulkem_criteria", "matrix", "array")` (datasets x candidate K;
#'   row names the dataset names, column names the K), with attributes
#'   `criterion` (`"BIC"`, `"ICL"` or `"AIC"`) and `chosen` (the chosen K of
#'   each dataset, an integer vector). `unclass()` gives the plain matrix
#'   with these attributes. `print()` and `plot()` return `x` invisibly.
#' @seealso [bulkem()], [summary.bulkem_fits()].
#' @examples
#' set.seed(6)
#' d <- replicate(4, c(rnorm(80, 0), rnorm(120, 4)), simplify = FALSE)
#' fits <- bulkem(d, num.components = 1:3, family = "normal", random.inits = 5,
#'   use.gpu = FALSE)
#' crit <- criteria(fits)
#' crit
#' plot(crit)
#' @export
criteria <- function(x, ...) UseMethod("criteria")

#' @rdname criteria
#' @export
criteria.default <- function(x, ...) {
  bulkem_abort(c(
    "{.arg x} must be a {.cls bulkem_fits} object from {.fn bulkem}.",
    x = "You supplied {describe_value(x)}."
  ))
}

#' @rdname criteria
#' @export
criteria.bulkem_fits <- function(x, ...) {
  criterion <- fits_criterion(x)
  m <- attr(x, "criteria")
  if (is.null(m)) m <- criteria_from_fits(x, criterion)
  if (!is.matrix(m) || nrow(m) != length(x)) {
    bulkem_abort(c(
      "The criterion table of {.arg x} does not match its fits.",
      x = "It has {if (is.matrix(m)) nrow(m) else 'no'} row{?s} for {length(x)} fit{?s}.",
      i = "Subset fits with {.code fits[i]}, which keeps the table in step."
    ))
  }
  m <- unclass(m)
  attributes(m) <- attributes(m)[c("dim", "dimnames")]
  structure(m, criterion = criterion, chosen = chosen_components(x),
            class = c("bulkem_criteria", "matrix", "array"))
}

#' @rdname criteria
#' @export
print.bulkem_criteria <- function(x, n = 6, digits = 6, ...) {
  chosen <- attr(x, "chosen")
  K <- as.integer(colnames(x))
  cat(sprintf("%s (smaller is better) of %d dataset%s for K = %s\n", attr(x, "criterion"),
              nrow(x), if (nrow(x) == 1) "" else "s", format_K(K)))
  counts <- table(factor(chosen, levels = K))
  cat("datasets per chosen K:\n")
  tab <- matrix(as.integer(counts), nrow = 1, dimnames = list("", paste0("K=", K)))
  if (anyNA(chosen)) tab <- cbind(tab, "failed" = sum(is.na(chosen)))
  print(tab, quote = FALSE)
  if (nrow(x) > 0) {
    shown <- seq_len(min(n, nrow(x)))
    vals <- unclass(x)[shown, , drop = FALSE]
    txt <- matrix(ifelse(is.na(vals), "NA", format(signif(vals, digits), digits = digits)),
                  nrow = length(shown), dimnames = list(rownames(x)[shown] %||% as.character(shown),
                                                        colnames(x)))
    # A star marks each dataset's chosen K.
    pick <- cbind(shown, match(chosen[shown], K))
    pick <- pick[!is.na(pick[, 2]), , drop = FALSE]
    txt[] <- paste0(txt, " ")
    txt[pick] <- sub(" $", "*", txt[pick])
    cat("\n")
    print(txt, quote = FALSE, right = TRUE)
    cat("* chosen K")
    if (nrow(x) > n) cat(sprintf("; ... and %d more datasets", nrow(x) - n))
    cat("\n")
  }
  invisible(x)
}

#' @rdname criteria
#' @export
plot.bulkem_criteria <- function(x, max.lines = 10, main = NULL, ...) {
  max.lines <- check_count(max.lines, "max.lines", call = environment())
  m <- unclass(x)
  attributes(m) <- attributes(m)[c("dim", "dimnames")]
  K <- as.integer(colnames(m))
  chosen <- attr(x, "chosen")
  crit <- attr(x, "criterion")
  ylab <- sprintf("%s (smaller is better)", crit)
  if (nrow(m) == 0 || all(is.na(m))) {
    bulkem_abort("There is no criterion value to plot: every fit failed or there are no datasets.")
  }
  if (nrow(m) <= max.lines) {
    # Palette colours 2..8, then the same with dashed lines.
    cols <- (seq_len(nrow(m)) - 1) %% 7 + 2
    ltys <- (seq_len(nrow(m)) - 1) %/% 7 %% 6 + 1
    labels <- rownames(m) %||% paste("dataset", seq_len(nrow(m)))
    graphics::matplot(K, t(m), type = "b", lty = ltys, pch = 1, col = cols, xaxt = "n",
                      xlab = "number of components K", ylab = ylab,
                      main = if (is.null(main)) sprintf("%s by number of components", crit) else main, ...)
    graphics::axis(1, at = K)
    at <- match(chosen, K)
    ok <- !is.na(at)
    graphics::points(K[at[ok]], m[cbind(which(ok), at[ok])], pch = 19, cex = 1.6, col = cols[ok])
    graphics::legend("topright", legend = c(labels, "chosen K"), col = c(cols, "black"),
                     lty = c(ltys, NA), pch = c(rep(1, nrow(m)), 19), bty = "n", cex = 0.8)
    return(invisible(x))
  }
  old <- graphics::par(mfrow = c(1, 2))
  on.exit(graphics::par(old))
  counts <- table(factor(chosen, levels = K))
  graphics::barplot(counts, names.arg = K, xlab = "chosen K", ylab = "datasets",
                    main = if (is.null(main)) sprintf("K chosen by %s", crit) else main,
                    sub = if (anyNA(chosen)) sprintf("%d failed dataset%s not shown", sum(is.na(chosen)),
                                                     if (sum(is.na(chosen)) == 1) "" else "s"),
                    ...)
  diff <- m - apply(m, 1, function(r) if (all(is.na(r))) NA_real_ else min(r, na.rm = TRUE))
  groups <- lapply(seq_along(K), function(j) {
    v <- diff[, j]
    v[!is.na(v) & v > 0]
  })
  names(groups) <- K
  zeros <- sum(diff == 0, na.rm = TRUE)
  if (all(lengths(groups) == 0)) {
    graphics::plot.new()
    graphics::title(main = sprintf("%s difference to the best K", crit))
    graphics::text(0.5, 0.5, "no differences: a single candidate K")
    return(invisible(x))
  }
  graphics::boxplot(groups, log = "y", xlab = "number of components K",
                    ylab = sprintf("%s - best %s of the dataset", crit, crit),
                    main = sprintf("%s difference to the best K", crit),
                    sub = sprintf("log axis; %d zero%s (the chosen K) not drawn", zeros,
                                  if (zeros == 1) "" else "s"), ...)
  graphics::abline(h = c(2, 6, 10), lty = 3, col = "grey50")
  invisible(x)
}

# The criterion the fits were chosen by (BIC when they carry none).
fits_criterion <- function(x) attr(x, "criterion") %||% "BIC"

# The number of components of each dataset's fit; NA for a failed fit.
chosen_components <- function(x) {
  K <- vapply(x, function(f) if (isTRUE(f$fit_success)) length(f$alpha) else NA_integer_, integer(1))
  names(K) <- names(x)
  K
}

# The candidate K: those bulkem was given, and any other the fits have.
candidate_components <- function(x) {
  present <- unique(lengths(lapply(x, `[[`, "alpha")))
  sort(unique(as.integer(c(attr(x, "num.components"), present))))
}

# "1..5" for consecutive K, "2, 4, 6" otherwise.
format_K <- function(K) {
  if (length(K) > 2 && all(diff(K) == 1)) paste0(K[1], "..", K[length(K)]) else paste(K, collapse = ", ")
}

# The criterion of each fit at its own K, for fits without a table.
criteria_from_fits <- function(x, criterion) {
  K <- sort(unique(lengths(lapply(x, `[[`, "alpha"))))
  m <- matrix(NA_real_, length(x), length(K), dimnames = list(names(x), as.character(K)))
  for (d in seq_along(x)) {
    f <- x[[d]]
    if (!isTRUE(f$fit_success)) next
    m[d, match(length(f$alpha), K)] <- fit_criterion(f, criterion)
  }
  m
}

fit_criterion <- function(fit, criterion) {
  df <- fit_df(fit)
  bic <- -2 * fit$loglik + df * log(fit_nobs(fit))
  switch(criterion,
    AIC = -2 * fit$loglik + 2 * df,
    BIC = bic,
    ICL = {
      if (is.null(fit$posterior)) {
        bulkem_abort(c(
          "Can't compute ICL for fits without posteriors.",
          i = "Fit with {.code keep.posterior = TRUE}."
        ), call = NULL)
      }
      bic - 2 * sum(log(apply(fit$posterior, 1, max)))
    },
    bulkem_abort("Unknown criterion {.val {criterion}}.", "internal", call = NULL)
  )
}
