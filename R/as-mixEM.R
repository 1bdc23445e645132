# Conversion of a bulkem fit to mixtools' mixEM conventions.

#' Convert a bulkem fit to a mixtools `mixEM` object
#'
#' bulkem keeps the field names of the 2015 package (`alpha` for the
#' weights, `lambda` for the inverse Gaussian shape), which differ from
#' \pkg{mixtools}' (there `lambda` means the weights), so a `bulkem_fit` is
#' not a `mixEM` object. `as.mixEM()` makes one that mixtools' own functions
#' accept (`summary()`, `plot()`, [mixtools::boot.se()], ...), for a fit of
#' the Normal family, as [mixtools::normalmixEM()] would have returned it.
#'
#' bulkem fits keep no data, and a `mixEM` object holds its data (`x`), so
#' the data the model was fitted to are a required argument. They must have
#' `fit$n` values, and the log-likelihood of the fit at them must be the
#' fit's (to a relative 1e-6): other data are an error rather than an object
#' that silently describes data it was not fitted to.
#'
#' The fields correspond as follows (for the inverse Gaussian family, the
#' bulkem fields that hold what mixtools would call so):
#'
#' | mixtools (`normalmixEM`) | bulkem, Normal family | bulkem, inverse Gaussian family |
#' |---|---|---|
#' | `x` | the `data` argument | (not kept) |
#' | `lambda` (weights) | `alpha` | `alpha` |
#' | `mu` | `mu` | `mu` (means) |
#' | `sigma` | `sigma` | none: bulkem's `lambda` is the IG shape |
#' | `loglik` | `loglik` | `loglik` |
#' | `posterior` (n x K, columns `comp.1`, ...) | computed at `data` | `predict(fit, data)` |
#' | `all.loglik` | `loglik_trace` if kept (`keep.posterior = TRUE`), else `loglik` | `loglik_trace` |
#' | `restarts` | `0` | none |
#' | `ft` | `"normalmixEM"` | none: mixtools has no inverse Gaussian mixture |
#'
#' The inverse Gaussian family has no mixtools counterpart, so converting
#' such a fit is an error of class `bulkem_error_input` that states the
#' mapping above; so is converting a failed fit. Fits of the other families
#' (gamma, lognormal, Poisson, exponential) are errors too: mixtools'
#' `mixEM` methods are for Normal mixtures.
#'
#' @param x A `bulkem_fit` (an element of [bulkem()]'s result), or a
#'   `bulkem_fits` holding exactly one dataset.
#' @param data The numeric vector the model was fitted to.
#' @param ... Unused.
#' @return An object of class `"mixEM"` with fields `x`, `lambda`, `mu`,
#'   `sigma`, `loglik`, `posterior`, `all.loglik`, `restarts` and `ft`.
#' @seealso [bulkem()], [predict.bulkem_fit()].
#' @examples
#' x <- faithful$waiting
#' fit <- bulkem(x, family = "normal", random.inits = 10, seed = 1, use.gpu = FALSE)[[1]]
#' m <- as.mixEM(fit, x)
#' m$lambda   # the weights, fit$alpha
#' if (requireNamespace("mixtools", quietly = TRUE)) {
#'   summary(m)
#'   plot(m, whichplots = 2)
#' }
#' @export
as.mixEM <- function(x, data, ...) UseMethod("as.mixEM")

#' @rdname as.mixEM
#' @export
as.mixEM.default <- function(x, data, ...) {
  bulkem_abort(c(
    "{.arg x} must be a {.cls bulkem_fit}, an element of {.fn bulkem}'s result.",
    x = "You supplied {describe_value(x)}."
  ))
}

#' @rdname as.mixEM
#' @export
as.mixEM.bulkem_fits <- function(x, data, ...) {
  if (length(x) != 1) {
    bulkem_abort(c(
      "{.arg x} must hold one fit; it holds {length(x)}.",
      i = "Convert one fit with {.code as.mixEM(fits[[i]], data[[i]])}, or all with {.code Map(as.mixEM, fits, data)}."
    ))
  }
  if (is.list(data) && length(data) == 1) data <- data[[1]]
  as.mixEM(x[[1]], data, ...)
}

#' @rdname as.mixEM
#' @export
as.mixEM.bulkem_fit <- function(x, data, ...) {
  if (!identical(x$family %||% "invgauss", "normal") && !identical(x$family %||% "invgauss", "invgauss")) {
    fam <- fit_family(x)
    bulkem_abort(c(
      "Can't convert a {fam$label} fit to a {.cls mixEM} object: mixtools' {.cls mixEM} methods are for Normal mixtures.",
      i = "Only fits of {.code family = \"normal\"} convert (to mixtools' {.code normalmixEM}); the parameters of this fit are {.field {c('alpha', fam$params)}}."
    ))
  }
  if (!identical(x$family, "normal")) {
    bulkem_abort(c(
      "Can't convert an inverse Gaussian fit to a {.cls mixEM} object: {.pkg mixtools} has no inverse Gaussian mixture.",
      i = "The fields correspond as: bulkem {.field alpha} = mixtools {.field lambda} (the weights); {.field mu} = {.field mu}; bulkem {.field lambda} (the inverse Gaussian shape) has no mixtools counterpart.",
      i = "Only fits of {.code family = \"normal\"} convert (to mixtools' {.code normalmixEM})."
    ))
  }
  if (!is.null(x$censored) && x$censored > 0) {
    bulkem_abort(c("Can't convert a fit of censored data to a {.cls mixEM} object: {.pkg mixtools} has no censored mixtures.",
                   i = "The fit's parameters are in {.code coef(fit)}."))
  }
  if (!isTRUE(x$fit_success)) {
    bulkem_abort(c("Can't convert a failed fit to a {.cls mixEM} object.", x = "{x$message}"))
  }
  if (missing(data)) {
    bulkem_abort(c(
      "{.arg data} must be supplied: the numeric vector the model was fitted to.",
      i = "A {.cls mixEM} object holds its data, and bulkem fits keep none."
    ))
  }
  if (!is.numeric(data) || !is.null(dim(data))) {
    bulkem_abort(c(
      "{.arg data} must be the numeric vector the model was fitted to.",
      x = "You supplied {describe_value(data)}."
    ))
  }
  if (!is.null(x$nobs)) {
    bulkem_abort(c(
      "A weighted fit cannot be a {.cls mixEM}: mixtools has no observation weights.",
      i = "Its log-likelihood and posteriors would not be the weighted fit's."
    ))
  }
  if (length(data) != x$n) {
    bulkem_abort(c(
      "{.arg data} must be the {x$n} observation{?s} the model was fitted to.",
      x = "It has {length(data)} value{?s}."
    ))
  }
  if (!all(is.finite(data))) {
    bulkem_abort(c(
      "{.arg data} must hold only finite values, as the fitted data did.",
      x = "Position {which(!is.finite(data))[1]} is {data[!is.finite(data)][1]}."
    ))
  }
  data <- as.double(data)
  total <- fit_log_density(x, data)
  # The fit's log-likelihood is that of its parameters at its data: a
  # mismatch means these are other data.
  ll <- sum(total)
  if (!(abs(ll - x$loglik) <= 1e-6 * max(1, abs(x$loglik)))) {
    bulkem_abort(c(
      "{.arg data} are not the data the model was fitted to.",
      x = "The fit's log-likelihood is {format(x$loglik, digits = 10)}; at {.arg data} it is {format(ll, digits = 10)}."
    ))
  }
  K <- length(x$alpha)
  posterior <- fit_posterior(x, data)
  dimnames(posterior) <- list(NULL, paste0("comp.", seq_len(K)))
  trace <- x$loglik_trace
  structure(list(
    x = data, lambda = x$alpha, mu = x$mu, sigma = x$sigma, loglik = x$loglik,
    posterior = posterior,
    all.loglik = if (length(trace) > 0) trace else x$loglik,
    restarts = 0, ft = "normalmixEM"
  ), class = "mixEM")
}
