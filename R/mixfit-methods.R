# S3 methods for one fit (bulkem_fit) and for the list of fits (bulkem_fits).

# The names of a fit's parameter fields: alpha, then the family's own
# (mu, lambda; mu, sigma; shape, rate; meanlog, sdlog; lambda; rate).
param_fields <- function(fit) c("alpha", fit_family(fit)$params)

fit_params <- function(fit) {
  fields <- param_fields(fit)
  p <- as.data.frame(lapply(stats::setNames(fields, fields), function(f) fit[[f]]))
  rownames(p) <- paste0("comp", seq_len(nrow(p)))
  p
}

family_label <- function(fit) fit_family(fit)$label

#' Methods for a single bulkem fit
#'
#' Print, summarise and extract results from one element of [bulkem()]'s
#' result. `logLik()` has `df` = \eqn{(1 + p) M - 1} (p parameters per
#' component: 2, or 1 for the Poisson and exponential families) and `nobs
#' = n` (for a fit with `weights`, the sum of the weights; `n` stays the
#' number of observations and `nobs` is kept in the fit), so [AIC()] and
#' [BIC()] work.
#'
#' @param x,object A `bulkem_fit`.
#' @param digits Significant digits to print.
#' @param ... Unused.
#' @return `print()` returns `x` invisibly; `summary()` an object of class
#'   `summary.bulkem_fit`; `logLik()` a `logLik` object; `coef()` a named
#'   vector `alpha1, ..., mu1, ..., lambda1, ...`, with the family's
#'   parameter names (`sigma1, ...` for the Normal family, `shape1, ...,
#'   rate1, ...` for the gamma family, and so on: see [bulkem()]).
#' @examples
#' set.seed(2)
#' x <- rinvgaussmix(800, c(0.4, 0.6), c(1, 4), c(20, 2))
#' fit <- bulkem(x, random.inits = 5, use.gpu = FALSE)[[1]]
#' fit
#' summary(fit)
#' coef(fit)
#' AIC(logLik(fit))
#' @name bulkem_fit
NULL

#' @rdname bulkem_fit
#' @export
print.bulkem_fit <- function(x, digits = 4, ...) {
  cat(sprintf("bulkem fit: %d-component %s mixture, n = %s%s\n",
              length(x$alpha), family_label(x), format(x$n), weights_note(x)))
  if (!x$fit_success) {
    cat("Status: failed -", x$message, "\n")
    return(invisible(x))
  }
  print(fit_params(x), digits = digits)
  if (!is.null(x$constraints)) cat(sprintf("constraints: %s\n", constraints_note(x)))
  cat(sprintf("log-likelihood %s after %d iteration%s (%s); start %d of %d\n",
              format(x$loglik, digits = digits + 3), x$num_iterations,
              if (x$num_iterations == 1) "" else "s", x$status,
              x$best_start, length(x$start_logliks)))
  invisible(x)
}

#' @rdname bulkem_fit
#' @export
summary.bulkem_fit <- function(object, ...) {
  ll <- logLik(object)
  structure(list(
    family = object$family, components = length(object$alpha), n = object$n, nobs = object$nobs,
    censored = object$censored,
    status = object$status, message = object$message,
    parameters = fit_params(object), loglik = object$loglik,
    AIC = if (object$fit_success) stats::AIC(ll) else NA_real_,
    BIC = if (object$fit_success) stats::BIC(ll) else NA_real_,
    iterations = object$num_iterations,
    starts = length(object$start_logliks),
    starts_failed = sum(is.na(object$start_logliks)),
    start_logliks = object$start_logliks,
    start_diagnostics = object$start_diagnostics,
    bootstrap = bootstrap_table(object),
    constraints = constraints_note(object), df = fit_df(object)
  ), class = "summary.bulkem_fit")
}

#' @rdname bulkem_fit
#' @export
print.summary.bulkem_fit <- function(x, digits = 4, ...) {
  label <- em_family(x$family %||% "invgauss")$label
  cat(sprintf("%d-component %s mixture fitted by EM (bulkem)\n", x$components, label))
  cat(sprintf("n = %s%s; status: %s", format(x$n), weights_note(x), x$status))
  if (!is.na(x$message)) cat(" -", x$message)
  cat("\n\n")
  print(x$parameters, digits = digits)
  cat(sprintf("\nlog-likelihood: %s   AIC: %s   BIC: %s\n",
              format(x$loglik, digits = digits + 3), format(x$AIC, digits = digits + 3),
              format(x$BIC, digits = digits + 3)))
  cat(sprintf("iterations: %d; starts: %d (%d failed)\n", x$iterations, x$starts, x$starts_failed))
  sd <- x$start_diagnostics
  if (x$starts > 1 && !is.null(sd) && !is.na(sd[["spread"]])) {
    cat(sprintf("starts at the best log-likelihood (within 1e-6 relative): %d of %d; spread of the starts' log-likelihoods: %s\n",
                sd[["at_best"]], sd[["starts"]], format(sd[["spread"]], digits = digits)))
  }
  if (!is.null(x$constraints)) {
    cat(sprintf("constraints: %s (df = %d)\n", x$constraints, x$df))
  }
  if (!is.null(x$bootstrap)) {
    b <- attr(x$bootstrap, "settings")
    cat(sprintf("\nBootstrap (%s, B = %d, %d fitted): standard errors and %s%% percentile intervals\n",
                b$type, b$B, b$replicates, format(100 * b$level)))
    print(x$bootstrap, digits = digits)
  }
  invisible(x)
}

# A fit's estimates beside their bootstrap standard errors and intervals
# (from bootstrap_se()), one row per parameter and component; NULL without.
bootstrap_table <- function(fit) {
  b <- fit$bootstrap
  if (is.null(b)) return(NULL)
  fields <- names(b$se)
  K <- nrow(b$se)
  long <- function(df) unlist(lapply(fields, function(f) df[[f]]), use.names = FALSE)
  lo <- sprintf("%s%%", format(100 * (1 - b$level) / 2))
  hi <- sprintf("%s%%", format(100 * (1 + b$level) / 2))
  out <- data.frame(estimate = long(fit_params(fit)), se = long(b$se), lower = long(b$lower), upper = long(b$upper))
  names(out)[3:4] <- c(lo, hi)
  rownames(out) <- paste0(rep(fields, each = K), "[", seq_len(K), "]")
  structure(out, settings = b[c("type", "B", "level", "replicates")])
}

#' @rdname bulkem_fit
#' @export
logLik.bulkem_fit <- function(object, ...) {
  structure(object$loglik, df = fit_df(object), nobs = fit_nobs(object),
            class = "logLik")
}

# Free parameters of a fit: counted by the core for a constrained fit,
# else the family's (1 + p) K - 1.
fit_df <- function(fit) fit$df %||% family_df(fit_family(fit), length(fit$alpha))

# "equal sigma; fixed mu = (1, NA)" for a constrained fit, else NULL.
constraints_note <- function(fit) {
  c <- fit$constraints
  if (is.null(c)) return(NULL)
  parts <- c(if (!is.null(c$equal)) paste("equal", c$equal),
             if (length(c$fixed)) paste0("fixed ", names(c$fixed), " = (", vapply(c$fixed, function(v) paste(format(v), collapse = ", "), ""), ")"))
  paste(parts, collapse = "; ")
}

# The number of observations the criteria count: the sum of the weights of
# a weighted fit, else n.
fit_nobs <- function(fit) as.double(fit$nobs %||% fit$n)

# ", total weight w" for a weighted fit (print and summary), else "".
weights_note <- function(x) {
  paste0(if (!is.null(x$censored) && x$censored > 0) sprintf(" (%s censored)", format(x$censored)) else "",
         if (is.null(x$nobs)) "" else sprintf(" (weighted: total weight %s)", format(x$nobs)))
}

#' @rdname bulkem_fit
#' @export
nobs.bulkem_fit <- function(object, ...) fit_nobs(object)

#' @rdname bulkem_fit
#' @export
coef.bulkem_fit <- function(object, ...) {
  M <- length(object$alpha)
  fields <- param_fields(object)
  stats::setNames(unlist(lapply(fields, function(f) as.double(object[[f]]))),
                  paste0(rep(fields, each = M), seq_len(M)))
}

#' Predictions from a bulkem fit
#'
#' Posterior component probabilities, the most probable component, or the
#' mixture density at new observations.
#'
#' @param object A `bulkem_fit`.
#' @param newdata Numeric vector of observations, without `NA` or `NaN`
#'   (an error); values outside the support (e.g. `x <= 0` or `Inf` for the
#'   inverse Gaussian, a value that is not a whole number for the Poisson
#'   family) have density 0 and no posterior (`NA`). For the Poisson family
#'   the "density" is the probability of each count. If omitted,
#'   the posterior kept by `bulkem(keep.posterior = TRUE)` is used.
#' @param type `"posterior"` (n x M matrix of component probabilities),
#'   `"class"` (integer index of the most probable component) or `"density"`
#'   (the fitted mixture density).
#' @param ... Unused.
#' @return A matrix (posterior) or a vector (class, density). The posterior
#'   and the density are computed by the same code that fits the model.
#' @examples
#' set.seed(3)
#' x <- rinvgaussmix(500, c(0.5, 0.5), c(1, 5), c(10, 10))
#' fit <- bulkem(x, random.inits = 5, use.gpu = FALSE)[[1]]
#' predict(fit, c(0.8, 5), type = "posterior")
#' predict(fit, c(0.8, 5), type = "class")
#' predict(fit, c(0.8, 5), type = "density")
#' @export
predict.bulkem_fit <- function(object, newdata, type = c("posterior", "class", "density"), ...) {
  type <- match_arg(type, c("posterior", "class", "density"), "type", environment())
  if (!object$fit_success) {
    bulkem_abort(c("Can't predict from a failed fit.", x = "{object$message}"))
  }
  if (missing(newdata)) {
    if (is.null(object$posterior) || type == "density") {
      bulkem_abort(c(
        "{.arg newdata} must be supplied.",
        i = "bulkem fits keep no data; only {.code keep.posterior = TRUE} keeps the training posterior."
      ))
    }
    post <- object$posterior
  } else {
    if (!is.numeric(newdata)) {
      bulkem_abort("{.arg newdata} must be a numeric vector, not {describe_value(newdata)}.")
    }
    if (anyNA(newdata)) {
      pos <- which(is.na(newdata))[1]
      bulkem_abort(c(
        "{.arg newdata} must not contain missing values.",
        x = "Position {pos} is {if (is.nan(newdata[pos])) 'NaN' else 'NA'}."
      ))
    }
    if (type == "density") return(exp(fit_log_density(object, newdata)))
    post <- fit_posterior(object, newdata)
  }
  if (type == "class") return(max.col(post, ties.method = "first"))
  post
}

#' Plot a bulkem fit
#'
#' `which = "density"` draws the fitted mixture density (and each weighted
#' component) over a histogram of the data, with a legend naming the
#' components and their parameters; `which = "loglik"` draws the
#' log-likelihood after each EM iteration of the kept start (kept by
#' `bulkem(..., keep.posterior = TRUE)`).
#'
#' **x range.** Unless `xlim` is given, the x axis spans the 0.5% to 99.5%
#' quantiles of the data, widened by 4% of that span on each side (on the
#' log scale with `log = "x"`), and not below 0 for the inverse Gaussian:
#' a long right tail (a few observations far out) no longer squeezes the
#' bulk of the data into a corner. The histogram counts only the data
#' inside the range, but its heights are fractions of *all* the data, so
#' that it is on the scale of the fitted density (which integrates to 1 over
#' the whole line).
#'
#' **Counts.** For the Poisson family the plot shows, at each whole number
#' in the range, the observed proportion (grey bars), each weighted
#' component's probability (dashed) and the mixture's (needles); `log` must
#' then be `""`.
#'
#' **Log axis.** With `log = "x"` (positive data only), the histogram has
#' bins of equal width in `log10(x)` and the y axis is the density of
#' `log10(x)`: the fitted curves are \eqn{f(x) \cdot x \log 10}{f(x) * x *
#' log(10)}, so that areas under the curves and bars are still
#' probabilities, and right-skewed components look like humps.
#'
#' @param x A `bulkem_fit`.
#' @param data The numeric vector the model was fitted to (bulkem fits do
#'   not keep their data); needed for `which = "density"`. Missing values are
#'   dropped; infinite values are an error.
#' @param which `"density"` or `"loglik"`.
#' @param breaks Histogram breaks, passed to [graphics::hist()] (a rule
#'   name, a number of bins, or a vector of breaks on the scale of the data;
#'   with `log = "x"` the rule works on `log10(x)`). `NULL` (default): the
#'   larger of the Freedman-Diaconis and Rice (\eqn{2 n^{1/3}}{2 n^(1/3)})
#'   numbers of bins, as the Freedman-Diaconis rule alone gives few bins to
#'   well separated components (their spread inflates the interquartile
#'   range).
#' @param log `""` for a linear x axis or `"x"` for a logarithmic one.
#' @param xlim Range of x shown; `NULL` for the quantile-based default.
#' @param legend If `TRUE`, a legend in the top right corner names each
#'   component (its weight and parameters) and the mixture.
#' @param main,xlab,ylab Plot title and axis labels (`NULL`: defaults, `"x"`
#'   and `"density"` or `"density of log10(x)"`).
#' @param ... Further graphical parameters for [graphics::plot()].
#' @return `x`, invisibly.
#' @examples
#' set.seed(4)
#' x <- rinvgaussmix(1000, c(0.3, 0.7), c(1, 3), c(30, 0.2))
#' fit <- bulkem(x, random.inits = 5, keep.posterior = TRUE, use.gpu = FALSE)[[1]]
#' plot(fit, x)
#' plot(fit, x, log = "x")
#' plot(fit, which = "loglik")
#' @export
plot.bulkem_fit <- function(x, data = NULL, which = c("density", "loglik"), breaks = NULL,
                            log = "", xlim = NULL, legend = TRUE, main = NULL, xlab = NULL,
                            ylab = NULL, ...) {
  call <- environment()
  which <- match_arg(which, c("density", "loglik"), "which", call)
  if (which == "loglik") {
    if (length(x$loglik_trace) == 0) {
      bulkem_abort(c(
        "This fit kept no log-likelihood trace.",
        i = "Fit with {.code bulkem(..., keep.posterior = TRUE)} to keep it."
      ))
    }
    graphics::plot(seq_along(x$loglik_trace), x$loglik_trace, type = "b", pch = 20,
                   xlab = if (is.null(xlab)) "iteration" else xlab,
                   ylab = if (is.null(ylab)) "log-likelihood" else ylab,
                   main = if (is.null(main)) "EM log-likelihood" else main, ...)
    return(invisible(x))
  }
  log <- match_arg(log, c("", "x"), "log", call)
  legend <- check_flag(legend, "legend", call = call)
  if (!is.numeric(data)) {
    bulkem_abort(c(
      "{.arg data} must be the numeric vector the model was fitted to.",
      i = "bulkem fits keep no data; use {.code plot(fit, x)}, or {.code which = \"loglik\"}."
    ))
  }
  if (!x$fit_success) bulkem_abort(c("Can't plot the density of a failed fit.", x = "{x$message}"))
  if (any(is.infinite(data)) || !any(is.finite(data))) {
    bulkem_abort(c(
      "{.arg data} must hold finite values (missing values are dropped).",
      x = if (any(is.infinite(data))) "Position {which(is.infinite(data))[1]} is {data[is.infinite(data)][1]}." else "It has no finite value."
    ))
  }
  data <- as.double(data[!is.na(data)])
  logx <- log == "x"
  fam <- fit_family(x)
  if (fam$discrete) {
    if (logx) bulkem_abort("{.code log = \"x\"} is for continuous families; the {fam$label} family has counts.")
    return(plot_counts(x, data, xlim, legend, main, xlab, ylab, call, ...))
  }
  if (logx && any(data <= 0)) {
    bulkem_abort(c(
      "{.code log = \"x\"} needs positive data.",
      x = "{.arg data} has {sum(data <= 0)} value{?s} <= 0, e.g. {data[data <= 0][1]}."
    ))
  }
  xlim <- density_xlim(data, xlim, logx, positive = !identical(fam$name, "normal"), call)
  hist <- density_histogram(data, xlim, logx, breaks, call)
  heights <- hist$heights
  edges <- hist$edges
  grid <- if (logx) 10^seq(log10(xlim[1]), log10(xlim[2]), length.out = 1000) else
    seq(xlim[1], xlim[2], length.out = 1000)
  curves <- density_curves(x, grid, logx)
  comp <- curves$components
  dens <- curves$mixture
  top <- max(c(heights, dens[is.finite(dens)]))
  K <- length(x$alpha)
  cols <- seq_len(K) + 1
  graphics::plot(NA, xlim = xlim, ylim = c(0, top * if (legend) 1 + 0.06 * (K + 1) else 1), log = if (logx) "x" else "",
                 main = if (is.null(main)) sprintf("%d-component %s mixture", K, family_label(x)) else main,
                 xlab = if (is.null(xlab)) "x" else xlab,
                 ylab = if (is.null(ylab)) (if (logx) "density of log10(x)" else "density") else ylab, ...)
  graphics::rect(edges[-length(edges)], 0, edges[-1], heights, border = "grey60", col = "grey92")
  for (j in seq_len(K)) graphics::lines(grid, comp[, j], lty = 2, col = cols[j])
  graphics::lines(grid, dens, lwd = 2)
  if (legend) {
    labels <- component_labels(x)
    graphics::legend("topright", legend = c(labels, "mixture"), col = c(cols, 1), lty = c(rep(2, K), 1),
                     lwd = c(rep(1, K), 2), bty = "n", cex = 0.8)
  }
  invisible(x)
}

# "comp 1: alpha=0.3, shape=2, rate=1", ... for a legend.
component_labels <- function(fit) {
  fmt <- function(v) vapply(v, function(u) format(signif(u, 3)), character(1))
  fields <- param_fields(fit)
  parts <- vapply(fields, function(f) paste0(f, "=", fmt(fit[[f]])), character(length(fit$alpha)))
  parts <- matrix(parts, nrow = length(fit$alpha))
  sprintf("comp %d: %s", seq_along(fit$alpha), apply(parts, 1, paste, collapse = ", "))
}

# The curves of a density plot at `grid`: each weighted component and the
# mixture (from the core), as densities of x, or of log10(x) for a log axis
# (f(x) x log 10).
density_curves <- function(fit, grid, logx) {
  lw <- fit_component_log_density(fit, grid)
  lm <- fit_log_density(fit, grid)
  if (logx) {
    lw <- lw + base::log(grid) + base::log(base::log(10))
    lm <- lm + base::log(grid) + base::log(base::log(10))
  }
  list(components = exp(lw), mixture = exp(lm))
}

# The density plot of a discrete (count) family: observed proportions at
# each whole number in the range, each weighted component's probability,
# and the mixture's as needles.
plot_counts <- function(fit, data, xlim, legend, main, xlab, ylab, call, ...) {
  lim <- density_xlim(data, xlim, FALSE, positive = TRUE, call)
  xs <- seq(ceiling(lim[1]), floor(lim[2]))
  if (length(xs) > 5000) xs <- unique(round(seq(xs[1], xs[length(xs)], length.out = 5000)))
  if (length(xs) == 0 || !any(data >= min(xs) & data <= max(xs))) {
    bulkem_abort("No data fall in the range shown ({.arg xlim} = {format(lim)}).", call = call)
  }
  observed <- as.numeric(table(factor(data, levels = xs))) / length(data)
  comp <- exp(fit_component_log_density(fit, xs))
  mix <- exp(fit_log_density(fit, xs))
  K <- length(fit$alpha)
  cols <- seq_len(K) + 1
  top <- max(c(observed, mix[is.finite(mix)]))
  graphics::plot(NA, xlim = range(xs) + c(-0.5, 0.5),
                 ylim = c(0, top * if (legend) 1 + 0.06 * (K + 1) else 1),
                 main = if (is.null(main)) sprintf("%d-component %s mixture", K, fit_family(fit)$label) else main,
                 xlab = if (is.null(xlab)) "x" else xlab,
                 ylab = if (is.null(ylab)) "probability" else ylab, ...)
  graphics::rect(xs - 0.5, 0, xs + 0.5, observed, border = "grey60", col = "grey92")
  for (j in seq_len(K)) graphics::lines(xs, comp[, j], lty = 2, col = cols[j])
  graphics::segments(xs, 0, xs, mix, lwd = 2)
  graphics::points(xs, mix, pch = 20)
  if (legend) {
    graphics::legend("topright", legend = c(component_labels(fit), "mixture"), col = c(cols, 1),
                     lty = c(rep(2, K), 1), lwd = c(rep(1, K), 2), bty = "n", cex = 0.8)
  }
  invisible(fit)
}

# The bars of a density plot: data inside the range (or the breaks), binned
# on the log10 scale for a log axis, with heights that are fractions of
# all the data per unit of x (of log10(x)), i.e. on the density's scale.
density_histogram <- function(data, xlim, logx, breaks, call = parent.frame()) {
  to <- if (logx) log10 else identity
  if (is.numeric(breaks) && length(breaks) > 1) {
    breaks <- to(sort(breaks))
    shown <- data[to(data) >= min(breaks) & to(data) <= max(breaks)]
  } else {
    shown <- data[data >= xlim[1] & data <= xlim[2]]
  }
  if (length(shown) == 0) {
    bulkem_abort("No data fall in the range shown ({.arg xlim} = {format(xlim)}).", call = call)
  }
  if (is.null(breaks)) {
    fd <- length(graphics::hist(to(shown), breaks = "FD", plot = FALSE)$breaks) - 1
    breaks <- max(fd, ceiling(2 * length(shown)^(1 / 3)))
  }
  h <- graphics::hist(to(shown), breaks = breaks, plot = FALSE)
  list(edges = if (logx) 10^h$breaks else h$breaks,
       heights = h$counts / (length(data) * diff(h$breaks)))
}

# The x range of a density plot: the user's, checked, or the 0.5% to 99.5%
# quantiles widened by 4% each side (of the log range for a log axis).
density_xlim <- function(data, xlim, logx, positive, call) {
  if (!is.null(xlim)) {
    ok <- is.numeric(xlim) && length(xlim) == 2 && all(is.finite(xlim)) && xlim[1] < xlim[2] &&
      (!logx || xlim[1] > 0)
    if (!ok) {
      bulkem_abort(c(
        paste0("{.arg xlim} must be two increasing finite numbers", if (logx) " above 0" else "", "."),
        x = "You supplied {describe_value(xlim)}."
      ), call = call)
    }
    return(as.double(xlim))
  }
  v <- if (logx) log10(data) else data
  q <- unname(stats::quantile(v, c(0.005, 0.995)))
  # Constant data: a window around the value.
  pad <- if (diff(q) > 0) 0.04 * diff(q) else if (logx) 0.5 else max(abs(q[1]) * 0.5, 1)
  lim <- q + c(-1, 1) * pad
  if (logx) return(10^lim)
  if (positive) lim[1] <- max(lim[1], 0)
  lim
}

#' Methods for many bulkem fits
#'
#' A `bulkem_fits` list (one fit per dataset, see [bulkem()]) is an object
#' of its own: `print()` summarises it, `as.data.frame()` gives one row per
#' dataset, `coef()` a datasets x parameters matrix, `logLik()`, `AIC()`,
#' `BIC()` and `nobs()` one value per dataset, and `[` subsets it while
#' keeping the class, the attributes and the rows of the criterion table
#' ([criteria()]) in step.
#'
#' Datasets may have fits of different numbers of components K (when
#' `num.components` lists several candidates): parameter columns then run
#' up to the largest K, `NA` where a dataset's fit has fewer components.
#'
#' @param x,object A `bulkem_fits` object from [bulkem()].
#' @param row.names,optional Unused; for compatibility with the generic.
#' @param i Index of the datasets to keep: positions (positive or
#'   negative), names or a logical vector. Selecting a dataset that does not
#'   exist (out of range, an unknown name, `NA`) is an error of class
#'   `bulkem_error_input`.
#' @param n Number of datasets to list when printing.
#' @param k Penalty per parameter of `AIC()` (2 by default).
#' @param ... Unused (`AIC()` and `BIC()` take one `bulkem_fits`: they
#'   already give one value per dataset).
#' @return
#' * `as.data.frame()`: a data frame with columns `dataset`, `n`,
#'   `num_components` (the K of each dataset's fit), `status`,
#'   `fit_success`, `loglik`, `num_iterations`, `best_start`, then
#'   `alpha1..Kmax`, `mu1..Kmax`, `lambda1..Kmax` (the family's parameter names:
#'   `sigma1..Kmax` for the Normal, `shape1..Kmax`, `rate1..Kmax` for the
#'   gamma family, ...) and
#'   `message`, where `Kmax` is the largest K of the fits.
#' * `coef()`: a numeric matrix, one row per dataset (row names the
#'   dataset names), columns `alpha1..Kmax`, `mu1..Kmax`,
#'   `lambda1..Kmax` (or the family's parameter names); `NA` for a failed fit and beyond a
#'   dataset's K.
#' * `logLik()`: a `logLik` object (class `c("bulkem_logLik", "logLik")`,
#'   which prints as a table) holding one log-likelihood per dataset, with
#'   attributes `df` (\eqn{(1 + p) K - 1}, p parameters per component) and `nobs` (`n`), vectors too, so that
#'   [stats::AIC()] and [stats::BIC()] of it are vectors.
#' * `AIC()`, `BIC()`, `nobs()`: a vector with one value per dataset, named
#'   as the datasets (`NA` for a failed fit's AIC and BIC).
#' * `[`: a `bulkem_fits`.
#' @examples
#' set.seed(5)
#' d <- replicate(5, rinvgaussmix(300, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
#' fits <- bulkem(d, use.gpu = FALSE)
#' fits
#' as.data.frame(fits)
#' coef(fits)
#' BIC(fits)
#' fits[2:3]
#' @name bulkem_fits
NULL

#' @rdname bulkem_fits
#' @export
print.bulkem_fits <- function(x, n = 5, ...) {
  status <- vapply(x, function(f) f$status, character(1))
  counts <- table(factor(status, c("converged", "max_iters", "failed")))
  first <- if (length(x)) x[[1]] else NULL
  cat(sprintf("bulkem fits: %d dataset%s", length(x), if (length(x) == 1) "" else "s"))
  candidates <- candidate_components(x)
  if (!is.null(first)) {
    if (length(candidates) > 1 && !is.null(attr(x, "criterion"))) {
      cat(sprintf(", %s mixtures with K chosen from %s by %s", family_label(first),
                  format_K(candidates), attr(x, "criterion")))
    } else if (length(candidates) > 1) {
      cat(sprintf(", %s mixtures with K = %s", family_label(first), format_K(candidates)))
    } else {
      cat(sprintf(", %d-component %s mixtures", length(first$alpha), family_label(first)))
    }
  }
  cat("\n")
  cat(sprintf("status: %d converged, %d max_iters, %d failed\n",
              counts[["converged"]], counts[["max_iters"]], counts[["failed"]]))
  if (length(candidates) > 1 && length(x) > 0) {
    chosen <- table(factor(chosen_components(x), levels = candidates))
    chosen <- chosen[chosen > 0]
    cat(sprintf("chosen K: %s\n",
                if (length(chosen)) paste0(names(chosen), " (", chosen, ")", collapse = ", ") else "none"))
  }
  if (!is.null(attr(x, "backend"))) {
    where <- if (is.null(attr(x, "workers"))) "" else sprintf(" per worker, %s future workers", attr(x, "workers"))
    cat(sprintf("backend: %s (%d threads%s), %s s\n", attr(x, "backend"), attr(x, "threads"), where,
                format(attr(x, "seconds"), digits = 3)))
  }
  if (identical(attr(x, "precision"), "mixed")) {
    cat("precision: mixed (float32 weights in the E-step; log-likelihoods in float64)\n")
  }
  if (length(x) == 1) {
    print(x[[1]])
  } else if (length(x) > 0) {
    df <- as.data.frame(x)
    shown <- utils::head(df[, setdiff(names(df), "message"), drop = FALSE], n)
    print(shown, digits = 4, row.names = FALSE)
    if (length(x) > n) cat(sprintf("... and %d more (as.data.frame() for all)\n", length(x) - n))
  }
  invisible(x)
}

# Datasets x (alpha1..Kmax, mu1..Kmax, scale1..Kmax), NA beyond a fit's K.
fits_param_matrix <- function(x) {
  if (length(x) == 0) return(matrix(numeric(0), 0, 0))
  Kmax <- max(lengths(lapply(x, `[[`, "alpha")))
  fields <- param_fields(x[[1]])
  pad <- function(v) c(as.double(v), rep(NA_real_, Kmax - length(v)))
  rows <- lapply(x, function(f) unlist(lapply(fields, function(p) pad(f[[p]]))))
  matrix(unlist(rows, use.names = FALSE), nrow = length(x), byrow = TRUE,
         dimnames = list(names(x), paste0(rep(fields, each = Kmax), seq_len(Kmax))))
}

#' @rdname bulkem_fits
#' @export
as.data.frame.bulkem_fits <- function(x, row.names = NULL, optional = FALSE, ...) {
  if (length(x) == 0) return(data.frame())
  pick <- function(field, type) unname(vapply(x, function(f) f[[field]], type))
  params <- fits_param_matrix(x)
  rownames(params) <- NULL
  dataset <- if (is.null(names(x))) seq_along(x) else names(x)
  df <- data.frame(
    dataset = dataset, n = pick("n", numeric(1)),
    num_components = unname(lengths(lapply(x, `[[`, "alpha"))),
    status = pick("status", character(1)),
    fit_success = pick("fit_success", logical(1)), loglik = pick("loglik", numeric(1)),
    num_iterations = pick("num_iterations", integer(1)), best_start = pick("best_start", integer(1)),
    params,
    message = pick("message", character(1)),
    stringsAsFactors = FALSE
  )
  rownames(df) <- NULL
  df
}

#' @rdname bulkem_fits
#' @export
coef.bulkem_fits <- function(object, ...) fits_param_matrix(object)

#' @rdname bulkem_fits
#' @export
logLik.bulkem_fits <- function(object, ...) {
  structure(vapply(object, function(f) as.double(f$loglik), numeric(1)),
            df = unname(vapply(object, function(f) as.double(fit_df(f)), numeric(1))),
            nobs = unname(vapply(object, fit_nobs, numeric(1))),
            class = c("bulkem_logLik", "logLik"))
}

#' @rdname bulkem_fits
#' @export
print.bulkem_logLik <- function(x, n = 5, ...) {
  D <- length(x)
  cat(sprintf("'log Lik.' of %d dataset%s (a vector with vectors df, nobs):\n", D, if (D == 1) "" else "s"))
  if (D > 0) {
    shown <- seq_len(min(n, D))
    tab <- data.frame(logLik = as.numeric(x)[shown], df = attr(x, "df")[shown],
                      nobs = attr(x, "nobs")[shown],
                      row.names = names(x)[shown] %||% as.character(shown))
    print(tab)
    if (D > n) cat(sprintf("... and %d more\n", D - n))
  }
  invisible(x)
}

#' @rdname bulkem_fits
#' @export
nobs.bulkem_fits <- function(object, ...) {
  vapply(object, fit_nobs, numeric(1))
}

#' @rdname bulkem_fits
#' @export
AIC.bulkem_fits <- function(object, ..., k = 2) {
  one_fits_only(..., fn = "AIC")
  k <- check_number(k, "k", min = 0)
  stats::setNames(stats::AIC(logLik(object), k = k), names(object))
}

#' @rdname bulkem_fits
#' @export
BIC.bulkem_fits <- function(object, ...) {
  one_fits_only(..., fn = "BIC")
  stats::setNames(stats::BIC(logLik(object)), names(object))
}

one_fits_only <- function(..., fn, call = parent.frame()) {
  if (...length() > 0) {
    bulkem_abort(c(
      "{.fn {fn}} of a {.cls bulkem_fits} takes one object: it gives one value per dataset.",
      i = "To compare fits of several K, fit them in one call: {.code bulkem(datasets, num.components = 1:5)}, then {.code criteria(fits)}."
    ), call = call)
  }
}

#' @rdname bulkem_fits
#' @export
`[.bulkem_fits` <- function(x, i) {
  if (missing(i)) return(x)
  call <- environment()
  # Indices resolved as for a list, but one that selects no fit (out of
  # range, an unknown name, NA) is an error rather than a NULL "fit".
  pos <- tryCatch(
    stats::setNames(seq_along(x), names(x))[i],
    error = function(e) bulkem_abort(c("Can't subset the fits with {.arg i}.", x = conditionMessage(e)),
                                     call = call)
  )
  if (anyNA(pos)) {
    bad <- if (is.character(i)) i[is.na(pos)][1] else which(is.na(pos))[1]
    bulkem_abort(c(
      "Can't subset {length(x)} fit{?s} with {.arg i}: it selects fits that don't exist.",
      x = if (is.character(i)) "There is no dataset named {.val {bad}}." else
        "Element {bad} of the selection is {if (is.logical(i) || is.na(i[bad])) 'NA or out of range' else i[bad]}."
    ), call = call)
  }
  out <- unclass(x)[unname(pos)]
  attributes(out) <- c(attributes(out), attributes(x)[setdiff(names(attributes(x)), c("names", "dim", "dimnames"))])
  # The criterion table has one row per dataset: keep it in step.
  crit <- attr(x, "criteria")
  if (!is.null(crit)) attr(out, "criteria") <- crit[unname(pos), , drop = FALSE]
  out
}

#' Summary of many bulkem fits
#'
#' Summarises a `bulkem_fits` object across its datasets: how many fits
#' converged, hit `max.iters` or failed; how many datasets have each number
#' of components K (and, with model selection, the criterion); for each K,
#' quantiles over the datasets of every parameter (per component; components
#' are ordered by increasing `mu`); the range of the log-likelihood and of
#' the log-likelihood per observation; the backend and time taken.
#'
#' @param object A `bulkem_fits` object from [bulkem()].
#' @param x A `summary.bulkem_fits` object.
#' @param probs Quantiles of each parameter to report.
#' @param digits Significant digits to print.
#' @param ... Unused.
#' @return `summary()`: an object of class `summary.bulkem_fits`, a list
#'   with `datasets`, `family`, `candidates` (the candidate K),
#'   `criterion`, `status` (counts), `components` (datasets per chosen K,
#'   successful fits only), `parameters` (a list with one matrix per K
#'   present, parameters x quantiles, attribute `datasets`), `loglik` and
#'   `loglik_per_obs` (quantiles over the datasets), `iterations` (range),
#'   `backend`, `threads` and `seconds`. `print()` returns `x` invisibly.
#' @examples
#' set.seed(7)
#' d <- replicate(8, rinvgaussmix(300, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
#' summary(bulkem(d, random.inits = 3, use.gpu = FALSE))
#' @export
summary.bulkem_fits <- function(object, probs = c(0, 0.25, 0.5, 0.75, 1), ...) {
  ok <- is.numeric(probs) && length(probs) > 0 && !anyNA(probs) && all(probs >= 0 & probs <= 1)
  if (!ok) {
    bulkem_abort(c("{.arg probs} must be numbers between 0 and 1.", x = "You supplied {describe_value(probs)}."))
  }
  status <- vapply(object, function(f) f$status, character(1))
  success <- vapply(object, function(f) isTRUE(f$fit_success), logical(1))
  candidates <- candidate_components(object)
  chosen <- chosen_components(object)
  params <- fits_param_matrix(object)
  K_present <- sort(unique(chosen[!is.na(chosen)]))
  parameters <- lapply(K_present, function(K) {
    rows <- which(chosen == K)
    fields <- param_fields(object[[1]])
    cols <- paste0(rep(fields, each = K), seq_len(K))
    q <- t(apply(params[rows, cols, drop = FALSE], 2, stats::quantile, probs = probs, names = FALSE))
    dimnames(q) <- list(cols, quantile_names(probs))
    structure(q, datasets = length(rows))
  })
  names(parameters) <- K_present
  ll <- vapply(object, function(f) as.double(f$loglik), numeric(1))
  n <- vapply(object, function(f) as.double(f$n), numeric(1))
  qs <- function(v) {
    v <- v[success]
    if (length(v) == 0) return(stats::setNames(rep(NA_real_, length(probs)), quantile_names(probs)))
    stats::setNames(stats::quantile(v, probs, names = FALSE), quantile_names(probs))
  }
  iters <- vapply(object, function(f) as.double(f$num_iterations), numeric(1))
  at_best <- vapply(object, function(f) as.double(f$start_diagnostics[["at_best"]] %||% NA), numeric(1))
  starts <- vapply(object, function(f) length(f$start_logliks), integer(1))
  lonely <- which(success & starts > 1 & at_best == 1)
  structure(list(
    datasets = length(object),
    family = if (length(object)) object[[1]]$family else attr(object, "family"),
    candidates = candidates,
    criterion = attr(object, "criterion"),
    status = table(factor(status, c("converged", "max_iters", "failed"))),
    components = table(factor(chosen[!is.na(chosen)], levels = union(candidates, K_present)), dnn = NULL),
    parameters = parameters,
    loglik = qs(ll), loglik_per_obs = qs(ll / n),
    iterations = if (any(success)) range(iters[success]) else c(NA_real_, NA_real_),
    one_start_best = if (is.null(names(object))) lonely else stats::setNames(lonely, names(object)[lonely]),
    failed_starts = sum(vapply(object, function(f) as.double(f$start_diagnostics[["failed"]] %||% 0), numeric(1))),
    backend = attr(object, "backend"), threads = attr(object, "threads"),
    seconds = attr(object, "seconds")
  ), class = "summary.bulkem_fits")
}

quantile_names <- function(probs) {
  out <- paste0(format(100 * probs, trim = TRUE), "%")
  out[probs == 0] <- "min"
  out[probs == 0.5] <- "median"
  out[probs == 1] <- "max"
  out
}

#' @rdname summary.bulkem_fits
#' @export
print.summary.bulkem_fits <- function(x, digits = 4, ...) {
  label <- em_family(x$family %||% "invgauss")$label
  cat(sprintf("bulkem fits of %s mixtures to %d dataset%s\n", label, x$datasets,
              if (x$datasets == 1) "" else "s"))
  cat(sprintf("status: %d converged, %d max_iters, %d failed\n",
              x$status[["converged"]], x$status[["max_iters"]], x$status[["failed"]]))
  if (length(x$candidates) > 1 && !is.null(x$criterion)) {
    cat(sprintf("\nnumber of components K, chosen from %s by %s:\n", format_K(x$candidates), x$criterion))
  } else {
    cat("\nnumber of components K:\n")
  }
  tab <- matrix(as.integer(x$components), nrow = 1,
                dimnames = list("datasets", paste0("K=", names(x$components))))
  if (x$status[["failed"]] > 0) tab <- cbind(tab, failed = x$status[["failed"]])
  print(tab)
  for (K in names(x$parameters)) {
    p <- x$parameters[[K]]
    cat(sprintf("\nparameters over the %d dataset%s with K = %s:\n", attr(p, "datasets"),
                if (attr(p, "datasets") == 1) "" else "s", K))
    attr(p, "datasets") <- NULL
    print(signif(p, digits))
  }
  if (!all(is.na(x$loglik))) {
    cat("\nlog-likelihood over the datasets:\n")
    print(signif(rbind(total = x$loglik, "per observation" = x$loglik_per_obs), digits))
    cat(sprintf("EM iterations: %s to %s\n", format(x$iterations[1]), format(x$iterations[2])))
  }
  if (length(x$one_start_best)) {
    shown <- utils::head(x$one_start_best, 5)
    who <- if (is.null(names(shown))) as.character(shown) else names(shown)
    cat(sprintf("best log-likelihood found by only one start in %d dataset%s (%s%s): more random.inits may find better optima\n",
                length(x$one_start_best), if (length(x$one_start_best) == 1) "" else "s",
                paste(who, collapse = ", "), if (length(x$one_start_best) > 5) ", ..." else ""))
  }
  if (isTRUE(x$failed_starts > 0)) cat(sprintf("degenerate (failed) starts: %s in all\n", format(x$failed_starts)))
  if (!is.null(x$backend)) {
    cat(sprintf("backend: %s (%s threads), %s s\n", x$backend, format(x$threads),
                format(x$seconds, digits = 3)))
  }
  invisible(x)
}

#' Plot an overview of many bulkem fits
#'
#' `which = "overview"` draws six panels across the datasets: the number of
#' datasets per K, per status, a histogram of the log-likelihood per
#' observation, and boxplots per component of the weights `alpha` and of
#' each parameter of the family (e.g. the means `mu` and shapes `lambda`,
#' or `shape` and `rate`; one panel stays empty for one-parameter families)
#' of the fits with the most common K (on a log axis for positive parameters spanning more than a
#' factor of 100). `which = "criteria"` plots the criterion table (see
#' [plot.bulkem_criteria()]).
#'
#' @param x A `bulkem_fits` object from [bulkem()].
#' @param which `"overview"` or `"criteria"`.
#' @param ... Passed to [plot.bulkem_criteria()] with `which = "criteria"`;
#'   unused otherwise.
#' @return `x`, invisibly.
#' @examples
#' set.seed(8)
#' d <- replicate(12, rinvgaussmix(300, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
#' fits <- bulkem(d, num.components = 1:3, random.inits = 3, use.gpu = FALSE)
#' plot(fits)
#' plot(fits, which = "criteria")
#' @export
plot.bulkem_fits <- function(x, which = c("overview", "criteria"), ...) {
  which <- match_arg(which, c("overview", "criteria"), "which", environment())
  if (which == "criteria") {
    plot(criteria(x), ...)
    return(invisible(x))
  }
  chosen <- chosen_components(x)
  if (all(is.na(chosen))) {
    bulkem_abort("There is nothing to plot: {if (length(x)) 'every fit failed' else 'there are no fits'}.")
  }
  old <- graphics::par(mfrow = c(2, 3))
  on.exit(graphics::par(old))
  candidates <- candidate_components(x)
  counts <- table(factor(chosen, levels = union(candidates, sort(unique(chosen[!is.na(chosen)])))))
  graphics::barplot(counts, xlab = "number of components K", ylab = "datasets",
                    main = if (length(candidates) > 1 && !is.null(attr(x, "criterion"))) {
                      sprintf("K chosen by %s", attr(x, "criterion"))
                    } else "number of components")
  status <- table(factor(vapply(x, function(f) f$status, character(1)), c("converged", "max_iters", "failed")))
  graphics::barplot(status, ylab = "datasets", main = "status",
                    col = c("grey70", "orange", "firebrick"))
  ok <- !is.na(chosen)
  llpo <- vapply(x[ok], function(f) f$loglik / f$n, numeric(1))
  graphics::hist(llpo, breaks = min(30, max(5, ceiling(sqrt(length(llpo))))), col = "grey85",
                 border = "grey50", xlab = "log-likelihood / n", ylab = "datasets",
                 main = "log-likelihood per observation")
  # The parameters of the most common K (ties to the smaller K).
  K <- as.integer(names(which.max(table(chosen))))
  rows <- which(chosen == K)
  params <- fits_param_matrix(unclass(x)[rows])
  for (p in param_fields(x[[rows[1]]])) {
    m <- params[, paste0(p, seq_len(K)), drop = FALSE]
    colnames(m) <- seq_len(K)
    positive <- all(m > 0, na.rm = TRUE)
    spread <- if (positive) max(m, na.rm = TRUE) / min(m, na.rm = TRUE) else 0
    graphics::boxplot(m, log = if (p != "alpha" && positive && spread > 100) "y" else "",
                      xlab = "component", ylab = p, col = seq_len(K) + 1,
                      main = sprintf("%s (K = %d, %d dataset%s)", p, K, length(rows),
                                     if (length(rows) == 1) "" else "s"))
  }
  invisible(x)
}
