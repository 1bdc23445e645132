# S3 methods for one fit (bulkem_fit) and for the list of fits (bulkem_fits).

scale_name <- function(fit) if (identical(fit$family, "normal")) "sigma" else "lambda"

fit_params <- function(fit) {
  p <- data.frame(alpha = fit$alpha, mu = fit$mu, scale = fit[[scale_name(fit)]])
  names(p)[3] <- scale_name(fit)
  rownames(p) <- paste0("comp", seq_len(nrow(p)))
  p
}

family_label <- function(fit) {
  if (identical(fit$family, "normal")) "Normal" else "inverse Gaussian"
}

#' Methods for a single bulkem fit
#'
#' Print, summarise and extract results from one element of [bulkem()]'s
#' result. `logLik()` has `df = 3M - 1` and `nobs = n`, so [AIC()] and
#' [BIC()] work.
#'
#' @param x,object A `bulkem_fit`.
#' @param digits Significant digits to print.
#' @param ... Unused.
#' @return `print()` returns `x` invisibly; `summary()` an object of class
#'   `summary.bulkem_fit`; `logLik()` a `logLik` object; `coef()` a named
#'   vector `alpha1, ..., mu1, ..., lambda1, ...` (or `sigma1, ...`).
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
  cat(sprintf("bulkem fit: %d-component %s mixture, n = %s\n",
              length(x$alpha), family_label(x), format(x$n)))
  if (!x$fit_success) {
    cat("Status: failed -", x$message, "\n")
    return(invisible(x))
  }
  print(fit_params(x), digits = digits)
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
    family = object$family, components = length(object$alpha), n = object$n,
    status = object$status, message = object$message,
    parameters = fit_params(object), loglik = object$loglik,
    AIC = if (object$fit_success) stats::AIC(ll) else NA_real_,
    BIC = if (object$fit_success) stats::BIC(ll) else NA_real_,
    iterations = object$num_iterations,
    starts = length(object$start_logliks),
    starts_failed = sum(is.na(object$start_logliks)),
    start_logliks = object$start_logliks
  ), class = "summary.bulkem_fit")
}

#' @rdname bulkem_fit
#' @export
print.summary.bulkem_fit <- function(x, digits = 4, ...) {
  label <- if (identical(x$family, "normal")) "Normal" else "inverse Gaussian"
  cat(sprintf("%d-component %s mixture fitted by EM (bulkem)\n", x$components, label))
  cat(sprintf("n = %s; status: %s", format(x$n), x$status))
  if (!is.na(x$message)) cat(" -", x$message)
  cat("\n\n")
  print(x$parameters, digits = digits)
  cat(sprintf("\nlog-likelihood: %s   AIC: %s   BIC: %s\n",
              format(x$loglik, digits = digits + 3), format(x$AIC, digits = digits + 3),
              format(x$BIC, digits = digits + 3)))
  cat(sprintf("iterations: %d; starts: %d (%d failed)\n", x$iterations, x$starts, x$starts_failed))
  if (x$starts > 1 && any(!is.na(x$start_logliks))) {
    best <- max(x$start_logliks, na.rm = TRUE)
    near <- sum(abs(x$start_logliks - best) < 1e-3 * max(1, abs(best)), na.rm = TRUE)
    cat(sprintf("starts within 0.1%% of the best log-likelihood: %d\n", near))
  }
  invisible(x)
}

#' @rdname bulkem_fit
#' @export
logLik.bulkem_fit <- function(object, ...) {
  structure(object$loglik, df = 3L * length(object$alpha) - 1L, nobs = object$n,
            class = "logLik")
}

#' @rdname bulkem_fit
#' @export
nobs.bulkem_fit <- function(object, ...) object$n

#' @rdname bulkem_fit
#' @export
coef.bulkem_fit <- function(object, ...) {
  M <- length(object$alpha)
  s <- scale_name(object)
  stats::setNames(c(object$alpha, object$mu, object[[s]]),
                  paste0(rep(c("alpha", "mu", s), each = M), seq_len(M)))
}

# Per-component log(alpha_j f_j(x)), an n x M matrix.
weighted_log_densities <- function(fit, x) {
  s <- fit[[scale_name(fit)]]
  cols <- lapply(seq_along(fit$alpha), function(j) {
    ld <- if (identical(fit$family, "normal")) {
      stats::dnorm(x, fit$mu[j], s[j], log = TRUE)
    } else {
      ldinvgauss(x, fit$mu[j], s[j])
    }
    log(fit$alpha[j]) + ld
  })
  matrix(unlist(cols), nrow = length(x))
}

#' Predictions from a bulkem fit
#'
#' Posterior component probabilities, the most probable component, or the
#' mixture density at new observations.
#'
#' @param object A `bulkem_fit`.
#' @param newdata Numeric vector of observations, without `NA` or `NaN`
#'   (an error); values outside the support (e.g. `x <= 0` or `Inf` for the
#'   inverse Gaussian) have density 0 and no posterior (`NA`). If omitted,
#'   the posterior kept by `bulkem(keep.posterior = TRUE)` is used.
#' @param type `"posterior"` (n x M matrix of component probabilities),
#'   `"class"` (integer index of the most probable component) or `"density"`
#'   (the fitted mixture density).
#' @param ... Unused.
#' @return A matrix (posterior) or a vector (class, density).
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
    lw <- weighted_log_densities(object, as.double(newdata))
    total <- row_logsumexp(lw)
    if (type == "density") return(exp(total))
    post <- exp(lw - total)
    post[!is.finite(total), ] <- NA_real_
    colnames(post) <- paste0("comp", seq_len(ncol(post)))
  }
  if (type == "class") return(max.col(post, ties.method = "first"))
  post
}

#' Plot a bulkem fit
#'
#' `which = "density"` draws the fitted mixture density (and each weighted
#' component) over a histogram of the data; `which = "loglik"` draws the
#' log-likelihood after each EM iteration of the kept start (kept by
#' `bulkem(..., keep.posterior = TRUE)`).
#'
#' @param x A `bulkem_fit`.
#' @param data The numeric vector the model was fitted to (bulkem fits do
#'   not keep their data); needed for `which = "density"`. Missing values are
#'   dropped; infinite values are an error.
#' @param which `"density"` or `"loglik"`.
#' @param breaks Histogram breaks, passed to [graphics::hist()].
#' @param main,xlab Plot title and x-axis label.
#' @param ... Further graphical parameters for the histogram or trace.
#' @return `x`, invisibly.
#' @examples
#' set.seed(4)
#' x <- rinvgaussmix(1000, c(0.3, 0.7), c(1, 3), c(30, 0.2))
#' fit <- bulkem(x, random.inits = 5, keep.posterior = TRUE, use.gpu = FALSE)[[1]]
#' plot(fit, x)
#' plot(fit, which = "loglik")
#' @export
plot.bulkem_fit <- function(x, data = NULL, which = c("density", "loglik"), breaks = "FD",
                            main = NULL, xlab = NULL, ...) {
  which <- match_arg(which, c("density", "loglik"), "which", environment())
  if (which == "loglik") {
    if (length(x$loglik_trace) == 0) {
      bulkem_abort(c(
        "This fit kept no log-likelihood trace.",
        i = "Fit with {.code bulkem(..., keep.posterior = TRUE)} to keep it."
      ))
    }
    graphics::plot(seq_along(x$loglik_trace), x$loglik_trace, type = "b", pch = 20,
                   xlab = "iteration", ylab = "log-likelihood",
                   main = if (is.null(main)) "EM log-likelihood" else main, ...)
    return(invisible(x))
  }
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
  data <- data[!is.na(data)]
  h <- graphics::hist(data, breaks = breaks, plot = FALSE)
  # Evaluate the density finely over the part of the data that is shown.
  shown <- if (is.null(list(...)$xlim)) range(data) else list(...)$xlim
  grid <- seq(max(shown[1], min(data)), min(shown[2], max(data)), length.out = 1000)
  lw <- weighted_log_densities(x, grid)
  dens <- exp(row_logsumexp(lw))
  ylim <- c(0, max(c(h$density, dens[is.finite(dens)])))
  graphics::plot(h, freq = FALSE, ylim = ylim, border = "grey60", col = "grey92",
                 main = if (is.null(main)) sprintf("%d-component %s mixture", length(x$alpha), family_label(x)) else main,
                 xlab = if (is.null(xlab)) "x" else xlab, ...)
  for (j in seq_len(ncol(lw))) graphics::lines(grid, exp(lw[, j]), lty = 2, col = j + 1)
  graphics::lines(grid, dens, lwd = 2)
  invisible(x)
}

#' Methods for many bulkem fits
#'
#' `print()` summarises a `bulkem_fits` list; `as.data.frame()` gives one row
#' per dataset; `[` subsets while keeping the class.
#'
#' @param x A `bulkem_fits` object from [bulkem()].
#' @param row.names,optional Unused; for compatibility with the generic.
#' @param i Index of the datasets to keep: positions (positive or
#'   negative), names or a logical vector. Selecting a dataset that does not
#'   exist (out of range, an unknown name, `NA`) is an error of class
#'   `bulkem_error_input`.
#' @param n Number of datasets to list when printing.
#' @param ... Unused.
#' @return `as.data.frame()`: a data frame with columns `dataset`, `n`,
#'   `status`, `fit_success`, `loglik`, `num_iterations`, `best_start`, then
#'   `alpha1..M`, `mu1..M`, `lambda1..M` (or `sigma1..M`) and `message`.
#' @examples
#' set.seed(5)
#' d <- replicate(5, rinvgaussmix(300, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
#' fits <- bulkem(d, use.gpu = FALSE)
#' fits
#' as.data.frame(fits)
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
  if (!is.null(first)) {
    cat(sprintf(", %d-component %s mixtures", length(first$alpha), family_label(first)))
  }
  cat("\n")
  cat(sprintf("status: %d converged, %d max_iters, %d failed\n",
              counts[["converged"]], counts[["max_iters"]], counts[["failed"]]))
  if (!is.null(attr(x, "backend"))) {
    where <- if (is.null(attr(x, "workers"))) "" else sprintf(" per worker, %s future workers", attr(x, "workers"))
    cat(sprintf("backend: %s (%d threads%s), %s s\n", attr(x, "backend"), attr(x, "threads"), where,
                format(attr(x, "seconds"), digits = 3)))
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

#' @rdname bulkem_fits
#' @export
as.data.frame.bulkem_fits <- function(x, row.names = NULL, optional = FALSE, ...) {
  if (length(x) == 0) return(data.frame())
  M <- length(x[[1]]$alpha)
  s <- scale_name(x[[1]])
  pick <- function(field, type) vapply(x, function(f) f[[field]], type)
  params <- function(field) {
    m <- matrix(unlist(lapply(x, function(f) f[[field]]), use.names = FALSE), ncol = M, byrow = TRUE)
    colnames(m) <- paste0(field, seq_len(M))
    m
  }
  dataset <- if (is.null(names(x))) seq_along(x) else names(x)
  df <- data.frame(
    dataset = dataset, n = pick("n", numeric(1)), status = pick("status", character(1)),
    fit_success = pick("fit_success", logical(1)), loglik = pick("loglik", numeric(1)),
    num_iterations = pick("num_iterations", integer(1)), best_start = pick("best_start", integer(1)),
    params("alpha"), params("mu"), params(s),
    message = pick("message", character(1)),
    stringsAsFactors = FALSE
  )
  rownames(df) <- NULL
  df
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
  out
}
