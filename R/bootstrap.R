#' Bootstrap likelihood-ratio tests for the number of components
#'
#' Tests, for every dataset, K components against K + 1 by the parametric
#' bootstrap (McLachlan 1987), as mclust's `mclustBootstrapLRT()` does for
#' one dataset. The observed statistic is \eqn{T = 2 (l_{K+1} - l_K)} from
#' [bulkem()] fits with K and K + 1 components. `B` replicate datasets of
#' the same size are drawn from each dataset's K-component fit and fitted
#' with K and K + 1 components, each starting at the observed fits'
#' parameters (as mclust does). The p-value is
#' \eqn{(1 + \#\{T_b \ge T\}) / (B' + 1)}, with \eqn{B'} the replicates whose
#' two fits succeeded.
#'
#' All replicates of all datasets are fitted as one batched job on the
#' backend (in chunks that bound the memory), not one dataset at a time:
#' a replicate is one more dataset. Replicates are drawn in the core from
#' streams keyed by `seed`, the dataset's position and the replicate, so a
#' result does not depend on the backend or the number of threads.
#'
#' A replicate's fit with K + 1 components starts at the observed K + 1
#' fit and may stop at a local optimum below the K-component fit, giving a
#' negative statistic, as in mclust; such replicates count as not
#' exceeding \eqn{T}. Weighted data are refused: their replicates would
#' not mean what the weights mean. With `equal` (e.g. `equal = "sigma"`,
#' mclust's "E" models: `mclustBootstrapLRT(modelName = "E")`) both the
#' observed and the replicates' fits share the scale; `fixed` is refused.
#'
#' **Censored data** ([survival::Surv()] datasets, as [bulkem()] takes
#' them) are tested with replicates censored as the data were, by the
#' conditional bootstrap for censored data (Davison and Hinkley 1997,
#' Section 3.5): a replicate observation whose datum was censored at c is
#' censored at c; one whose datum y was exact is censored at a time drawn
#' from the Kaplan-Meier estimate of the censoring distribution beyond y
#' (none, when no censoring time lies beyond). With one time-out for every
#' observation every replicate is censored there. Each dataset's censoring
#' must be one-sided: all right-censored (time-outs, the end of a study)
#' or all left-censored (detection limits); interval-censored and binned
#' data are refused, since they carry no censoring times to draw.
#'
#' @param datasets As in [bulkem()]: a list of numeric vectors, a numeric
#'   vector or a matrix (one dataset per column), or censored data as
#'   [survival::Surv()] objects (see Details).
#' @param num.components Consecutive numbers of components, at least two:
#'   each but the last is tested against the next (`1:2` tests 1 against 2,
#'   `1:3` also 2 against 3, as `mclustBootstrapLRT(maxG = 2)`).
#' @param B Bootstrap replicates per dataset and test.
#' @param family The component family, as in [bulkem()].
#' @param ... Other arguments of [bulkem()] for the observed fits
#'   (`max.iters`, `random.inits`, `epsilon`, `init.method`, `precision`,
#'   `equal`; `criterion` is ignored). `max.iters`, `epsilon`, `precision`
#'   and `equal` also govern the replicates' fits.
#' @param keep.replicates Keep every replicate's statistic (for plots and
#'   your own summaries): a datasets x `B` matrix per test.
#' @param level Significance level of the sequential choice of K shown by
#'   `print()` and returned by [lrt_components()].
#' @param seed,use.gpu As in [bulkem()]; `seed` keys the observed fits'
#'   random starts and the replicates.
#' @return An object of class `bulkem_lrt`, a list with
#'   \describe{
#'   \item{`tests`}{a data frame with one row per dataset and test:
#'     `dataset` (name or number), `null` and `alternative` (K and K + 1),
#'     `statistic` (\eqn{T}; `NA` where either observed fit failed),
#'     `p.value`, `replicates` (replicates whose fits succeeded) and
#'     `failed` (replicates whose fits failed).}
#'   \item{`fits`}{the [bulkem()] fits for each number of components, a
#'     list named by K.}
#'   \item{`replicates`}{with `keep.replicates = TRUE`: per test (named
#'     `"1 vs 2"`, ...) a datasets x `B` matrix of replicate statistics,
#'     `NA` where a replicate's fit failed.}
#'   }
#'   with attributes `B`, `family`, `seed`, `backend`, `seconds` and
#'   `level`. `as.data.frame()` gives `tests`, `plot()` histograms of the
#'   p-values.
#' @references McLachlan, G. J. (1987) On bootstrapping the likelihood
#'   ratio test statistic for the number of components in a normal
#'   mixture. *Applied Statistics* 36, 318-324.
#'
#'   Davison, A. C. and Hinkley, D. V. (1997) *Bootstrap Methods and their
#'   Application*. Cambridge University Press, Section 3.5.
#' @seealso [bootstrap_se()], [bulkem()] (choosing K by BIC), and
#'   `mclust::mclustBootstrapLRT()` for one dataset.
#' @examples
#' set.seed(1)
#' datasets <- c(
#'   replicate(3, rnorm(200), simplify = FALSE),
#'   replicate(3, c(rnorm(100), rnorm(100, 4)), simplify = FALSE)
#' )
#' lrt <- bootstrap_lrt(datasets, 1:2, B = 99, family = "normal", use.gpu = FALSE)
#' lrt
#' lrt$tests$p.value
#' lrt_components(lrt)
#' @export
bootstrap_lrt <- function(datasets, num.components = 1:2, B = 999, family = "invgauss", ...,
                          keep.replicates = FALSE, level = 0.05, seed = NULL, use.gpu = NA) {
  call <- environment()
  dots <- list(...)
  refuse_bootstrap_args(dots, c("weights", "inits", "resume", "fixed"), "bootstrap_lrt", call)
  family <- match_arg(family, em_family_names(), "family", call)
  observed <- datasets
  sv <- bootstrap_surv(datasets, family, "bootstrap_lrt", one.sided = TRUE, call)
  datasets <- check_datasets(sv$datasets, call)
  Ks <- check_components(num.components, call)
  if (length(Ks) < 2 || any(diff(Ks) != 1)) {
    bulkem_abort(c(
      "{.arg num.components} must be at least two consecutive numbers of components, such as {.code 1:3}.",
      x = "You supplied {describe_value(num.components)}."
    ), call = call)
  }
  B <- check_count(B, "B", call = call)
  keep.replicates <- check_flag(keep.replicates, "keep.replicates", call = call)
  level <- check_level(level, "level", call)
  seed <- check_seed(seed, call)
  settings <- replicate_settings(dots, call)
  backend <- resolve_backend(use.gpu, call)
  started <- proc.time()[["elapsed"]]
  fits <- lapply(Ks, function(K) {
    bulkem(observed, num.components = K, family = family, seed = seed, use.gpu = use.gpu, ...)
  })
  names(fits) <- Ks
  D <- length(datasets)
  sizes <- as.double(lengths(datasets))
  ids <- dataset_ids(datasets)
  tests <- vector("list", length(Ks) - 1)
  kept <- list()
  used <- character(0)
  for (i in seq_along(tests)) {
    ll0 <- fits_loglik(fits[[i]])
    ll1 <- fits_loglik(fits[[i + 1]])
    ok <- which(!is.na(ll0) & !is.na(ll1))
    stats <- matrix(NA_real_, D, B)
    if (length(ok)) {
      raw <- call_core(em_bootstrap_lrt_(
        ok, sizes[ok], datasets[ok], sv$censoring[ok], family, core_params(fits[[i]][ok], family), core_params(fits[[i + 1]][ok], family),
        Ks[i], Ks[i + 1], B, settings$max.iters, settings$epsilon, settings$precision, seed,
        !is.null(dots$equal), cpu_threads(), backend
      ), call, "bootstrap_lrt")
      stats[ok, ] <- matrix(raw$statistics, ncol = B, byrow = TRUE)
      used <- c(used, raw$backend)
    }
    stats[is.nan(stats)] <- NA_real_
    observed <- 2 * (ll1 - ll0)
    fitted <- rowSums(!is.na(stats))
    p <- (1 + rowSums(stats >= observed, na.rm = TRUE)) / (fitted + 1)
    p[is.na(observed)] <- NA_real_
    tests[[i]] <- data.frame(dataset = ids, null = Ks[i], alternative = Ks[i + 1], statistic = observed,
                             p.value = p, replicates = fitted,
                             failed = ifelse(is.na(observed), NA_integer_, B - fitted),
                             stringsAsFactors = FALSE)
    if (keep.replicates) {
      dimnames(stats) <- list(names(datasets), NULL)
      kept[[test_label(Ks[i])]] <- stats
    }
  }
  tests <- do.call(rbind, tests)
  rownames(tests) <- NULL
  warn_failed_replicates(tests$failed, tests$dataset, B, "bootstrap_lrt")
  structure(list(tests = tests, fits = fits, replicates = if (keep.replicates) kept),
            class = "bulkem_lrt", B = B, family = family, seed = seed, level = level,
            backend = paste(unique(used), collapse = ", "),
            seconds = proc.time()[["elapsed"]] - started)
}

#' Choose the number of components by sequential bootstrap tests
#'
#' For each dataset, the smallest K whose test against K + 1 is not
#' rejected at `level` (K = 1 vs 2 first, as mclust's sequential use of
#' `mclustBootstrapLRT()`); the largest tested K + 1 when every test
#' rejects; `NA` where a needed test has no p-value.
#'
#' @param x A `bulkem_lrt` from [bootstrap_lrt()].
#' @param level The significance level (default: the one given to
#'   [bootstrap_lrt()]).
#' @return An integer vector, one K per dataset, named like the datasets.
#' @export
lrt_components <- function(x, level = attr(x, "level")) {
  if (!inherits(x, "bulkem_lrt")) {
    bulkem_abort(c("{.arg x} must be the result of {.fn bootstrap_lrt}.", x = "You supplied {describe_value(x)}."))
  }
  level <- check_level(level, "level", environment())
  t <- x$tests
  ids <- unique(t$dataset)
  chosen <- vapply(split(t, factor(t$dataset, levels = ids)), function(rows) {
    rows <- rows[order(rows$null), ]
    for (r in seq_len(nrow(rows))) {
      if (is.na(rows$p.value[r])) return(NA_integer_)
      if (rows$p.value[r] >= level) return(as.integer(rows$null[r]))
    }
    as.integer(rows$alternative[nrow(rows)])
  }, integer(1))
  names(chosen) <- if (is.character(ids)) ids else NULL
  chosen
}

#' @rdname bootstrap_lrt
#' @param x A `bulkem_lrt`.
#' @param n Datasets' rows of the tests to print.
#' @export
print.bulkem_lrt <- function(x, n = 6, ...) {
  t <- x$tests
  D <- length(unique(t$dataset))
  cat(sprintf("Parametric bootstrap likelihood-ratio tests: %d dataset%s, %s family, B = %d\n",
              D, if (D == 1) "" else "s", em_family(attr(x, "family"))$label, attr(x, "B")))
  level <- attr(x, "level")
  by_test <- split(t, factor(paste(t$null, "vs", t$alternative), levels = unique(paste(t$null, "vs", t$alternative))))
  summary_rows <- do.call(rbind, lapply(names(by_test), function(name) {
    r <- by_test[[name]]
    data.frame(test = name, datasets = sum(!is.na(r$p.value)),
               rejected = sum(r$p.value < level, na.rm = TRUE),
               median.p = stats::median(r$p.value, na.rm = TRUE),
               failed.replicates = sum(r$failed, na.rm = TRUE))
  }))
  names(summary_rows)[3] <- sprintf("p < %s", format(level))
  print(summary_rows, row.names = FALSE, digits = 4)
  chosen <- table(lrt_components(x), useNA = "ifany")
  cat(sprintf("K by sequential tests at %s: %s\n", format(level),
              paste0(names(chosen), " (", chosen, ")", collapse = ", ")))
  if (!is.null(attr(x, "backend"))) {
    cat(sprintf("backend: %s, %s s\n", attr(x, "backend"), format(attr(x, "seconds"), digits = 3)))
  }
  if (D > 1 || nrow(t) > n) {
    print(utils::head(t, n), row.names = FALSE, digits = 4)
    if (nrow(t) > n) cat(sprintf("... and %d more rows (as.data.frame() for all)\n", nrow(t) - n))
  } else {
    print(t, row.names = FALSE, digits = 4)
  }
  invisible(x)
}

#' @rdname bootstrap_lrt
#' @param row.names,optional Unused (for the generic).
#' @export
as.data.frame.bulkem_lrt <- function(x, row.names = NULL, optional = FALSE, ...) x$tests

#' @rdname bootstrap_lrt
#' @param main Plot title (one per test; default names the test).
#' @export
plot.bulkem_lrt <- function(x, main = NULL, ...) {
  t <- x$tests
  labels <- unique(paste(t$null, "vs", t$alternative))
  old <- graphics::par(mfrow = c(1, length(labels)))
  on.exit(graphics::par(old))
  for (i in seq_along(labels)) {
    p <- t$p.value[paste(t$null, "vs", t$alternative) == labels[i]]
    graphics::hist(p[!is.na(p)], breaks = seq(0, 1, by = 0.05), xlab = "bootstrap p-value",
                   main = if (is.null(main)) paste("K =", labels[i]) else rep_len(main, length(labels))[i], ...)
  }
  invisible(x)
}

#' Bootstrap standard errors of many mixture fits
#'
#' Standard errors and percentile intervals of every parameter of every
#' dataset's fit, from `B` bootstrap replicates of each dataset: the
#' observations drawn with replacement (`"nonparametric"`) or draws from
#' the fitted mixture (`"parametric"`). Each replicate is fitted from the
#' dataset's fitted parameters (as `MclustBootstrap()` does) and its
#' components are matched to the fit's (the permutation closest in the
#' weights and both parameters, for up to 7 components), so that a
#' component keeps its identity when two swap places. As in
#' [bootstrap_lrt()], all replicates of all datasets are fitted as one
#' batched job.
#'
#' Censored data ([survival::Surv()] datasets) are resampled with their
#' intervals (Efron 1981), which takes any censoring; parametric
#' replicates are censored as the data were, as in [bootstrap_lrt()]
#' (one-sided censoring only).
#'
#' @param fits The result of [bulkem()] on `datasets` (unweighted, without
#'   held values; any number of components per dataset). Fits with `equal`
#'   are bootstrapped with the scale shared in every replicate.
#' @param datasets The datasets `fits` were fitted to (censored data as
#'   the same [survival::Surv()] objects).
#' @param B Bootstrap replicates per dataset.
#' @param type `"nonparametric"` (default) or `"parametric"`.
#' @param level Coverage of the percentile intervals.
#' @param keep.replicates Keep every replicate's matched parameters.
#' @param max.iters,epsilon EM settings of the replicates' fits.
#' @param seed,use.gpu As in [bulkem()].
#' @return `fits`, each successful fit with a field `bootstrap`: a list of
#'   `type`, `B`, `level`, `replicates` (the replicates whose fit
#'   succeeded), `se`, `lower` and `upper` (data frames shaped as the
#'   parameters: one row per component, one column per parameter) and,
#'   with `keep.replicates = TRUE`, `draws` (per parameter a `B` x K
#'   matrix, `NA` where a replicate's fit failed). `summary()` of a fit
#'   shows them. The list gains an attribute `bootstrap` (type, `B`,
#'   level, seed, backend, seconds).
#' @seealso [bootstrap_lrt()]; `mclust::MclustBootstrap()`,
#'   `mixtools::boot.se()` for one dataset.
#' @examples
#' set.seed(2)
#' datasets <- replicate(4, c(rnorm(150), rnorm(150, 5, 2)), simplify = FALSE)
#' fits <- bulkem(datasets, family = "normal", use.gpu = FALSE)
#' fits <- bootstrap_se(fits, datasets, B = 99, use.gpu = FALSE)
#' fits[[1]]$bootstrap$se
#' summary(fits[[1]])
#' @export
bootstrap_se <- function(fits, datasets, B = 999, type = c("nonparametric", "parametric"), level = 0.95,
                         keep.replicates = FALSE, max.iters = 100, epsilon = 1e-6, seed = NULL, use.gpu = NA) {
  call <- environment()
  if (!inherits(fits, "bulkem_fits")) {
    bulkem_abort(c("{.arg fits} must be the result of {.fn bulkem}.", x = "You supplied {describe_value(fits)}."),
                 call = call)
  }
  type <- match_arg(type, c("nonparametric", "parametric"), "type", call)
  family <- attr(fits, "family") %||% fits[[1]]$family
  sv <- bootstrap_surv(datasets, family, "bootstrap_se", one.sided = type == "parametric", call)
  datasets <- check_datasets(sv$datasets, call)
  if (length(datasets) != length(fits)) {
    bulkem_abort(c("{.arg datasets} must be the datasets {.arg fits} were fitted to.",
                   x = "There are {length(fits)} fits and {length(datasets)} datasets."), call = call)
  }
  n <- vapply(fits, function(f) as.double(f$n), numeric(1))
  wrong <- which(n != lengths(datasets))
  if (length(wrong)) {
    bulkem_abort(c("{.arg datasets} must be the datasets {.arg fits} were fitted to.",
                   x = "Fit {wrong[1]} has n = {n[wrong[1]]} but dataset {wrong[1]} has {lengths(datasets)[wrong[1]]} observations."),
                 call = call)
  }
  if (any(vapply(fits, function(f) !is.null(f$nobs), logical(1)))) {
    bulkem_abort(c("{.fn bootstrap_se} takes unweighted fits.",
                   x = "{.arg fits} were fitted with {.arg weights}; bootstrap replicates are unweighted data."),
                 call = call)
  }
  if (any(vapply(fits, function(f) !is.null(f$constraints$fixed), logical(1)))) {
    bulkem_abort(c("{.fn bootstrap_se} does not take fits with held values.",
                   x = "{.arg fits} were fitted with {.arg fixed}; a held value has no sampling variation to estimate."),
                 call = call)
  }
  equal <- vapply(fits, function(f) !is.null(f$constraints$equal), logical(1))
  B <- check_count(B, "B", min = 2, call = call)
  level <- check_level(level, "level", call)
  keep.replicates <- check_flag(keep.replicates, "keep.replicates", call = call)
  max.iters <- check_count(max.iters, "max.iters", call = call)
  epsilon <- check_number(epsilon, "epsilon", min = 0, call = call)
  seed <- check_seed(seed, call)
  backend <- resolve_backend(use.gpu, call)
  precision <- attr(fits, "precision") %||% "double"
  started <- proc.time()[["elapsed"]]
  K <- lengths(lapply(fits, `[[`, "alpha"))
  ok <- vapply(fits, function(f) isTRUE(f$fit_success), logical(1))
  used <- character(0)
  # One core call per (K, shared second parameter or not).
  for (k in sort(unique(K[ok]))) for (eq in unique(equal[ok & K == k])) {
    idx <- which(ok & K == k & equal == eq)
    raw <- call_core(em_bootstrap_se_(
      idx, datasets[idx], sv$censoring[idx], family, core_params(fits[idx], family), k, type, level, B, keep.replicates,
      max.iters, epsilon, precision, seed, eq, cpu_threads(), backend
    ), call, "bootstrap_se")
    used <- c(used, raw$backend)
    for (j in seq_along(idx)) {
      fits[[idx[j]]]$bootstrap <- se_fields(raw, j, k, B, family, type, level, keep.replicates)
    }
  }
  failed <- vapply(fits, function(f) if (is.null(f$bootstrap)) NA_integer_ else B - f$bootstrap$replicates, integer(1))
  warn_failed_replicates(failed, names(fits) %||% seq_along(fits), B, "bootstrap_se")
  attr(fits, "bootstrap") <- list(type = type, B = B, level = level, seed = seed,
                                  backend = paste(unique(used), collapse = ", "),
                                  seconds = proc.time()[["elapsed"]] - started)
  fits
}

# Fit j's share of the core's flat results (K components, dataset-major),
# as data frames shaped as the fit's parameters.
se_fields <- function(raw, j, K, B, family, type, level, keep) {
  fam <- em_family(family)
  rows <- (j - 1) * K + seq_len(K)
  frame <- function(what) {
    cols <- list(raw[[paste0(what, "_alpha")]][rows], raw[[paste0(what, "_mu")]][rows])
    if (!is.na(fam$second)) cols[[3]] <- raw[[paste0(what, "_scale")]][rows]
    names(cols) <- c("alpha", fam$params)
    df <- as.data.frame(lapply(cols, function(v) { v[is.nan(v)] <- NA_real_; v }))
    rownames(df) <- paste0("comp", seq_len(K))
    df
  }
  out <- list(type = type, B = B, level = level, replicates = raw$ok[j],
              se = frame("se"), lower = frame("lower"), upper = frame("upper"))
  if (keep) {
    at <- (j - 1) * B * K + seq_len(B * K)
    draw <- function(v) { m <- matrix(v[at], nrow = B, ncol = K, byrow = TRUE); m[is.nan(m)] <- NA_real_; m }
    out$draws <- list(alpha = draw(raw$replicates_alpha))
    out$draws[[fam$first]] <- draw(raw$replicates_mu)
    if (!is.na(fam$second)) out$draws[[fam$second]] <- draw(raw$replicates_scale)
  }
  out
}

# list(alpha, mu, scale) of D x K matrices of fitted parameters for the
# core (one K for all `fits`), as check_inits() makes of starting values.
core_params <- function(fits, family) {
  fam <- em_family(family)
  rows <- function(field) do.call(rbind, lapply(fits, function(f) as.double(f[[field]])))
  alpha <- rows("alpha")
  list(alpha = alpha, mu = rows(fam$first), scale = if (is.na(fam$second)) alpha * NaN else rows(fam$second))
}

fits_loglik <- function(fits) vapply(fits, function(f) as.double(f$loglik), numeric(1))

# Names of the datasets, or their numbers.
dataset_ids <- function(datasets) names(datasets) %||% seq_along(datasets)

test_label <- function(K) paste(K, "vs", K + 1)

check_level <- function(x, arg, call) {
  ok <- is.numeric(x) && length(x) == 1 && !is.na(x) && x > 0 && x < 1
  if (!ok) {
    bulkem_abort(c("{.arg {arg}} must be a number between 0 and 1.", x = "You supplied {describe_value(x)}."),
                 call = call)
  }
  as.double(x)
}

# Censored datasets (Surv objects) as stand-in values and their censoring
# (NULL when nothing is censored), as bulkem() reads them. Replicates drawn
# from a fit (`one.sided`) are censored by the data's censoring times
# (core/src/em/replicate_censoring.rs), which needs each dataset's
# censored observations all right-censored or all left-censored.
bootstrap_surv <- function(datasets, family, fn, one.sided, call) {
  if (!has_surv(datasets)) return(list(datasets = datasets, censoring = NULL))
  sv <- surv_datasets(datasets, call, counts = em_family(family)$discrete)
  if (!one.sided) return(sv)
  for (d in seq_along(sv$censoring)) {
    c <- sv$censoring[[d]]
    if (all(is.infinite(c$upper)) || all(is.infinite(c$lower))) next
    both <- which(is.finite(c$lower) & is.finite(c$upper))
    i <- if (length(both)) both[1] else 1L
    hint <- if (fn == "bootstrap_se") ", or use {.code type = \"nonparametric\"}" else ""
    bulkem_abort(c(
      "{.fn {fn}} draws replicates from the fits and censors them as the data were, which needs one-sided censoring.",
      x = "Dataset {d} has observation {c$index[i] + 1} censored in ({c$lower[i]}, {c$upper[i]}]: interval-censored and binned data have no censoring times to draw.",
      i = paste0("Give each dataset only right-censored or only left-censored observations", hint, ".")
    ), call = call)
  }
  sv
}

# Arguments of bulkem() that a bootstrap cannot pass on.
refuse_bootstrap_args <- function(dots, refused, fn, call) {
  bad <- intersect(names(dots), refused)
  bad <- bad[!vapply(dots[bad], is.null, logical(1))]
  if (length(bad)) {
    bulkem_abort(c(
      "{.fn {fn}} does not take {.arg {bad[1]}}.",
      i = switch(bad[1],
        weights = "Bootstrap replicates are unweighted data; fit weighted data with {.fn bulkem}.",
        inits = "The replicates start at the observed fits; those use random starts.",
        fixed = "Held values are the same in every replicate; bootstrap the free fit, or share a scale with {.arg equal}.",
        "Run it again from the start."
      )
    ), call = call)
  }
}

# The replicates' fit settings from the arguments passed on to bulkem(),
# with bulkem()'s defaults.
replicate_settings <- function(dots, call) {
  defaults <- formals(bulkem.default)
  pick <- function(name) if (!is.null(dots[[name]])) dots[[name]] else eval(defaults[[name]])
  list(max.iters = check_count(pick("max.iters"), "max.iters", call = call),
       epsilon = check_number(pick("epsilon"), "epsilon", min = 0, call = call),
       precision = match_arg(pick("precision"), c("double", "mixed"), "precision", call))
}

# One warning for the datasets where more than a tenth of the replicates'
# fits failed (a component collapsed on a replicate): their results rest
# on the replicates that fitted, which may no longer be like the data's.
warn_failed_replicates <- function(failed, ids, B, fn) {
  bad <- which(!is.na(failed) & failed > B / 10)
  if (length(bad) == 0) return(invisible())
  cli::cli_warn(c(
    "{.fn {fn}}: more than a tenth of the replicates' fits failed in {length(bad)} dataset{?s} (first: {ids[bad[1]]}, {failed[bad[1]]} of {B}).",
    i = "Their results use the replicates that fitted; the failures are counted in the result."
  ))
}
