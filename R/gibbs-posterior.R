# posterior_linpred(), posterior_epred() and posterior_predict(): the
# draws x observations matrices of rstanarm and brms, for hbglm fits.

#' Posterior draws of the linear predictor, the mean and new responses
#'
#' The matrices that \pkg{rstanarm} and \pkg{brms} users (and
#' \pkg{bayesplot}) take from a fit, one row per posterior draw (iterations
#' within chains, as `posterior::as_draws_matrix()`) and one column per
#' observation:
#' - `posterior_linpred()`: the linear predictor \eqn{\eta} (with
#'   `transform = TRUE`, the mean \eqn{h(\eta)});
#' - `posterior_epred()`: the expected response \eqn{h(\eta)}: the mean
#'   (gaussian), the probability of success (binomial, per trial), the mean
#'   count (poisson, negative binomial);
#' - `posterior_predict()`: a response drawn from the family at each draw
#'   ([simulate.bulkem_hbglm()]).
#'
#' Each builds the whole draws x observations matrix, which is what they
#' are asked for; its memory is checked before it is allocated (an error of
#' class `bulkem_error_memory`). For summaries over many draws and
#' observations use [predict.bulkem_hbglm()], which works through the
#' observations in blocks of bounded size, or take a subset of the draws
#' with `draws`.
#'
#' These are generics of bulkem. When \pkg{rstantools} is installed they
#' call its generics of the same names (where the methods of \pkg{rstanarm}
#' and \pkg{brms} are registered, and bulkem's too), so that
#' `posterior_predict()` works on every package's fits whichever package
#' was attached last.
#'
#' @param object A `bulkem_hbglm` fit from [hbglm()].
#' @param transform For `posterior_linpred()`: `TRUE` for \eqn{h(\eta)}
#'   instead of \eqn{\eta}.
#' @param newdata,group,new.groups `NULL` (the fit's own rows) or new rows,
#'   as in [predict.bulkem_hbglm()].
#' @param draws `NULL` (every kept draw) or how many posterior draws to use,
#'   chosen at random without replacement by R's random numbers.
#' @param seed For `posterior_predict()`: `NULL` or a seed, as in
#'   [simulate.bulkem_hbglm()].
#' @param ... Not used: an argument these methods do not have is an error.
#' @return A draws x observations matrix.
#' @seealso [predict.bulkem_hbglm()], [simulate.bulkem_hbglm()], [log_lik()].
#' @examples
#' set.seed(6)
#' d <- data.frame(g = rep(1:4, each = 15), x = rnorm(60))
#' d$y <- rpois(60, exp(0.5 + 0.3 * d$x))
#' fit <- hbglm(y ~ x, d, group = "g", family = "poisson", iter = 1000,
#'              warmup = 500, chains = 2, use.gpu = FALSE)
#' dim(posterior_epred(fit))
#' yrep <- posterior_predict(fit, draws = 100, seed = 1)
#' dim(yrep)
#' @name posterior_epred
#' @export
posterior_epred <- function(object, ...) {
  if (has_rstantools()) return(rstantools::posterior_epred(object, ...))
  UseMethod("posterior_epred")
}

#' @rdname posterior_epred
#' @export
posterior_linpred <- function(object, ...) {
  if (has_rstantools()) return(rstantools::posterior_linpred(object, ...))
  UseMethod("posterior_linpred")
}

#' @rdname posterior_epred
#' @export
posterior_predict <- function(object, ...) {
  if (has_rstantools()) return(rstantools::posterior_predict(object, ...))
  UseMethod("posterior_predict")
}

# rstantools' generics, where rstanarm's and brms's methods are registered,
# take over bulkem's when that package is installed.
has_rstantools <- function() requireNamespace("rstantools", quietly = TRUE)

#' @rdname posterior_epred
#' @export
#' @rawNamespace S3method(rstantools::posterior_epred, bulkem_hbglm)
posterior_epred.bulkem_hbglm <- function(object, newdata = NULL, group = NULL, draws = NULL,
                                         new.groups = c("error", "population"), ...) {
  call <- environment()
  check_no_dots(list(...), "posterior_epred", "bulkem::posterior_epred", call)
  hbglm_posterior_matrix(object, newdata, group, draws, new.groups, hbglm_inverse_link(object$family),
                         "posterior_epred", call)
}

#' @rdname posterior_epred
#' @export
#' @rawNamespace S3method(rstantools::posterior_linpred, bulkem_hbglm)
posterior_linpred.bulkem_hbglm <- function(object, transform = FALSE, newdata = NULL, group = NULL,
                                           draws = NULL, new.groups = c("error", "population"), ...) {
  call <- environment()
  check_no_dots(list(...), "posterior_linpred", "bulkem::posterior_epred", call)
  check_flag(transform, "transform", call = call)
  h <- if (transform) hbglm_inverse_link(object$family) else hbglm_identity
  hbglm_posterior_matrix(object, newdata, group, draws, new.groups, h, "posterior_linpred", call)
}

#' @rdname posterior_epred
#' @export
#' @rawNamespace S3method(rstantools::posterior_predict, bulkem_hbglm)
posterior_predict.bulkem_hbglm <- function(object, newdata = NULL, group = NULL, draws = NULL, seed = NULL,
                                           new.groups = c("error", "population"), ...) {
  call <- environment()
  check_no_dots(list(...), "posterior_predict", "bulkem::posterior_epred", call)
  hbglm_check_fit(object, call)
  if (!is.null(draws)) draws <- hbglm_check_draws(object, draws, call)
  simulate.bulkem_hbglm(object, nsim = draws, seed = seed, newdata = newdata, group = group,
                        new.groups = new.groups)
}

hbglm_posterior_matrix <- function(object, newdata, group, draws, new.groups, h, fn, call) {
  hbglm_check_fit(object, call)
  new.groups <- match_arg(new.groups, c("error", "population"), "new.groups", call)
  which <- if (!is.null(draws)) sort(sample.int(prod(dim(object$draws)[1:2]), hbglm_check_draws(object, draws, call)))
  hbglm_draws_matrix(object, newdata, group, new.groups, which, h, fn, call)
}

hbglm_check_draws <- function(object, draws, call) {
  total <- prod(dim(object$draws)[1:2])
  draws <- check_count(draws, "draws", call = call)
  if (draws > total) {
    bulkem_abort(c("{.arg draws} must be at most the number of kept draws ({total}).",
                   x = "You supplied {.code draws = {draws}}."), call = call)
  }
  draws
}
