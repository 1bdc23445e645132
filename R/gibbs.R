#' Hierarchical Bayesian GLMs by Gibbs sampling with slice sampling
#'
#' Samples the posterior of a hierarchical generalised linear model in which
#' some coefficients vary by group and others are shared:
#' \deqn{y_{gj} \sim \mathrm{family}(x_{gj}'\beta_g + z_{gj}'\gamma), \quad
#'   \beta_g \sim N(\mu, \mathrm{diag}(\tau^2)).}
#' Every coordinate is drawn with Neal's (2003) univariate slice sampler
#' (stepping out, then shrinkage) inside a Gibbs sweep:
#' 1. all \eqn{\beta_g} at once, in parallel over groups (coordinate-wise
#'    slice updates; the linear predictor is cached and updated
#'    incrementally, so an update of \eqn{\beta_g} touches only group
#'    \eqn{g}'s rows);
#' 2. \eqn{\gamma} (slice; its log posterior sums over all observations, in
#'    parallel);
#' 3. \eqn{\mu} (conjugate normal draw);
#' 4. \eqn{\tau} (slice, on the log scale);
#' 5. \eqn{\mu} and \eqn{\tau} again in the non-centred
#'    parameterisation (\eqn{\alpha_g = (\beta_g - \mu) / \tau} held
#'    fixed; each log posterior sums over all observations; for every
#'    family but the ordinal, \eqn{\mu} by a Metropolis-Hastings step with
#'    a Newton proposal (the linear predictor is linear in it, so the
#'    log-likelihood is concave), accepted almost always when the data pin
#'    it, and \eqn{\tau} likewise from 32,768 observations on (below, by a
#'    slice update on the log scale, whose exact draw mixes better on few
#'    observations); for the ordinal family both by slice updates):
#'    interweaving (Yu and Meng, 2011), so that the chain mixes also when
#'    \eqn{\tau} is small against what the data say of each group, where
#'    steps 3-4 alone barely move (the independent sds of other grouping
#'    factors get the same non-centred update, on the CPU and on the GPU);
#' 6. for the gaussian family, the residual sd \eqn{\sigma} (slice, on the
#'    log scale).
#'
#' During warmup each coordinate's slice width adapts to about twice its
#' mean absolute move; the widths are then frozen. Chains are independent,
#' with counter-based random streams keyed by (seed, chain, sweep, block),
#' so the draws do not depend on the number of threads.
#'
#' The result records how each block was parallelised (`$parallel`), in the
#' terms of the three regimes of GPU Gibbs sampling: *block-parallel*,
#' *log-posterior-parallel*, or *both* (see `vignette("gibbs")`).
#'
#' @param formula A two-sided formula, in one of two forms.
#'
#'   **As lme4 writes it** (read with \pkg{lme4}'s `findbars()` and
#'   `nobars()`): `y ~ x1 + x2 + (1 + x1 | g)`. The terms inside the bar
#'   vary by the grouping factor `g` (a column of `data`), each with its
#'   population mean among the population-level terms; the other
#'   population-level terms (`x2`) are shared by all groups (`global`).
#'   `(1 | g)` gives a varying intercept. With `|` a group's coefficients
#'   are correlated: \eqn{\beta_g \sim N(\mu, \Sigma)} with an
#'   inverse-Wishart prior on \eqn{\Sigma}, drawn with \eqn{\mu}
#'   conjugately each sweep, or with `hbglm_prior(cov = "lkj")` brms's LKJ
#'   prior on the correlations and the prior of \eqn{\tau} on the sds
#'   (see [hbglm_prior()]), and the draws hold the
#'   standard deviations `tau[coef]` and correlations `cor[coef,coef]` (as
#'   `lme4::VarCorr()` reports them); correlated fits run on the CPU and the GPU (there at most 8 correlated coefficients per group). With
#'   `||` (such as `(1 + x1 || g)`) they are independent, each with its
#'   scale \eqn{\tau_k}.
#'
#'   **Several grouping factors**, crossed (`(1 + x | store) + (1 | week)`)
#'   or nested (`(1 | school/class)`, which lme4 expands to `(1 | school) +
#'   (1 | class:school)`): the factor whose bars hold the most terms (then
#'   the most levels) is the groups above; each other factor's terms add
#'   effects with mean zero: with `||` (or one term) independent sds,
#'   \eqn{u_{fl} \sim N(0, \mathrm{diag}(sd_f^2))}, the sds with the
#'   prior of \eqn{\tau}; with `|` and several terms (such as `(1 + x |
#'   week)`) correlated, \eqn{u_{fl} \sim N(0, \Sigma_f)} with
#'   \eqn{\Sigma_f} under the same kind of prior as the groups'
#'   \eqn{\Sigma} (see [hbglm_prior()]). They are drawn as
#'   `r_<factor>[level,term]`, `sd_<factor>[term]` and (correlated)
#'   `cor_<factor>[term,term]`. Its levels are updated
#'   in parallel as the groups are, and each sweep
#'   also draws exactly the constant that a shared intercept (or slope) and
#'   the factor's effects can trade without changing the fit (on the CPU
#'   and the GPU; there at most 8 correlated terms per factor). A term of
#'   the groups without a population mean, a shared intercept, and blocks
#'   of correlated and independent terms of one factor are errors.
#'   `group` and `global` are then not given.
#'
#'   **With `group`:** the response and the coefficients that vary by group
#'   (with an intercept unless removed with `- 1`); `global` holds the
#'   shared ones. `hbglm(y ~ x1, d, group = "g", global = ~ x2)` is the
#'   same model, with the same draws, as `hbglm(y ~ x1 + x2 + (1 + x1 || g), d)`.
#'
#'   Terms are expanded by [model.matrix()] (factors, interactions,
#'   `poly()`, ...); `offset()` terms add a known term to the linear
#'   predictor, as in [glm()]. A term hbglm cannot honour is an error, never
#'   dropped.
#' @param data A data frame holding the variables.
#' @param group The grouping (when `formula` has no random-effect bar): the
#'   name of a column of `data`, a one-sided formula such as `~ store`, or a
#'   vector with one value per row.
#' @param family `"gaussian"` (identity link, residual sd `sigma`),
#'   `"binomial"` (logit link; the response 0/1, logical, a two-level factor,
#'   or `cbind(successes, failures)` for several trials per row, as in
#'   [glm()]), `"poisson"` (log link, counts) or `"negbinomial"` (log link,
#'   overdispersed counts: mean \eqn{m}, variance \eqn{m + m^2/\phi}, the
#'   shape \eqn{\phi} sampled as `shape`; MASS's `theta`, brms's
#'   `shape`), or `"ordinal"` (ordered categories, cumulative logit as
#'   brms's `cumulative("logit")`: \eqn{P(y \le c) =
#'   \mathrm{logit}^{-1}(\mathrm{cut}_c - \eta)}; the response an ordered
#'   factor, a factor in its levels' order, or category numbers 1, 2, ...).
#'   For the ordinal family the formula keeps its intercept, varying by
#'   group: the cut-points are sampled from it (the first fixed at 0, the
#'   others between their neighbours, under the `gamma_sd` normal prior)
#'   and reported as brms reports them, `cut[c]`, measured from the
#'   intercept's population mean (so `cut[1]` is minus
#'   `mu[(Intercept)]`); `predict(type = "link")` and `posterior_linpred()`
#'   give \eqn{\eta} without that mean, and the mean response is the
#'   expected category \eqn{\sum_c c P(y = c)}. Ordinal fits run on the
#'   CPU and the GPU. The family objects
#'   [gaussian()], [binomial()] and [poisson()] with their canonical links
#'   are accepted too.
#' @param global `NULL`, or a one-sided formula of coefficients shared by all
#'   groups (its intercept, if any, is dropped: the groups have theirs). It
#'   may hold `offset()` terms too.
#' @param iter Sweeps per chain, warmup included.
#' @param warmup Sweeps per chain discarded (slice widths adapt during them).
#' @param chains Number of independent chains.
#' @param thin Keep every `thin`-th sweep after warmup.
#' @param prior Priors, from [hbglm_prior()].
#' @param slice A list with the initial slice width `w` (default 1), the
#'   stepping-out limit `m` (default `Inf`) and optionally `adapt` (default
#'   `TRUE`: adapt the widths during warmup).
#' @param use.gpu `NA`: a CUDA GPU when one is usable and the job is large
#'   (rows x sweeps x chains of at least 5e8), else the CPU. `TRUE`: the GPU,
#'   or an error explaining why not. `FALSE`: the CPU. The GPU draws its own
#'   random numbers: its draws agree with the CPU backend's in
#'   distribution, not bit for bit.
#' @param seed `NULL` (drawn from R's RNG, so [set.seed()] reproduces a
#'   call) or a whole number.
#' @param parallel `"none"`: all chains in this R session. `"future"`: one
#'   chain per future on the workers of the current [future::plan()] (other
#'   R processes or machines; each resolves `use.gpu` for itself and gets
#'   all the data). Chains are keyed by their index, so the draws are
#'   identical to `parallel = "none"` with the same `seed` on the same
#'   backend. Needs \pkg{future}.
#' @param resume `NULL`, or [bulkem_partial()] after the same call with
#'   `parallel = "future"` lost workers (a cluster job cancelled, out of time
#'   or memory): only the lost chains run, and the draws are identical to an
#'   uninterrupted call's. With `seed = NULL` the partial's seed is used.
#' @param offset `NULL`, or a known term added to every linear predictor
#'   (one finite value per row, such as `log(exposure)`), evaluated in
#'   `data` as [glm()]'s `offset` is; added to any `offset()` terms of the
#'   formulas.
#' @param target `NULL` (run `iter` sweeps), or a list with `ess` (default
#'   400) and `rhat` (default 1.01): sample until every parameter's bulk and
#'   tail ESS is at least `ess` and its rank-normalised split R-hat at most
#'   `rhat` (Vehtari et al. 2021, as [summary()] reports them). The first
#'   check comes after `iter` sweeps, later ones each time the kept draws
#'   have grown by a quarter, at most `max.iter` sweeps per chain. The draws
#'   are those of a run without a target of as many sweeps (`$iter`), and
#'   `$target` records whether it was met. On the GPU the checks run on the
#'   device, next to the draws: only three numbers per parameter come back
#'   to the host, and they equal the host's to rounding. When it is not met, the fit is
#'   returned with a warning (class `bulkem_warning_target`) naming the
#'   parameters farthest from it. Not with `parallel = "future"`: the
#'   checks need every chain.
#' @param max.iter With `target`: the most sweeps per chain, warmup
#'   included (default `10 * iter`); the host memory for that many draws is
#'   checked up front. On the GPU the draws' buffer starts with the first
#'   check's draws and grows by at least half as the checks ask for more
#'   (at most `max.iter`'s): a run that meets its target early never holds
#'   `max.iter`'s draws on the device.
#' @param ... Not used: an argument hbglm does not have (such as `weights`)
#'   is an error rather than ignored.
#' @section Checks and warnings:
#' The data are checked before sampling: missing or non-finite values,
#' values so large that the likelihood overflows (magnitudes above 1e100),
#' a response the family cannot take, and a singular design (columns of
#' `formula` and `global` that are linear combinations of the others, such
#' as `x2 = 2 * x`) are errors of class `bulkem_error_input` naming the rows
#' or columns. A job whose draws would not fit in memory is an error of
#' class `bulkem_error_memory` before anything is allocated.
#'
#' The scales \eqn{\tau_k} and \eqn{\sigma} are sampled above a floor of
#' 1e-10 times their scale in the data (the response's sd, over the column's
#' root mean square for \eqn{\tau_k}), so no draw underflows. A fit is
#' returned with a warning (class `bulkem_warning` and one of
#' `bulkem_warning_stuck`, `bulkem_warning_floor`, `bulkem_warning_rhat`,
#' `bulkem_warning_separation`), naming the parameters, when slice updates
#' were stuck (the draws kept a value because its log density was
#' numerically flat or non-finite), when a scale's draws reach its floor
#' (a noise-free response, identical groups), when a parameter's R-hat is
#' above 1.05, and when the pooled data are separated (binomial: a
#' combination of the predictors splits successes from failures; poisson:
#' zero counts) so that some coefficients are bounded only by their priors.
#' The warnings are kept in `$warnings` and shown by [print()].
#' @return An object of class `bulkem_hbglm`, a list with
#'   \describe{
#'   \item{draws}{array of kept draws, iterations x chains x parameters;
#'     parameters named `beta[group,coef]`, `mu[coef]`, `tau[coef]`,
#'     `gamma[coef]`, `sigma` (gaussian) or `shape` (negative binomial),
#'     `cor[coef,coef]` (correlated), `cut[c]` (ordinal), and for each
#'     other grouping factor
#'     `r_<factor>[level,term]`, `sd_<factor>[term]` and (correlated)
#'     `cor_<factor>[term,term]`.}
#'   \item{family, formula, global, call}{the model.}
#'   \item{groups, coef_names, global_names, group_sizes, nobs}{the data's
#'     shape.}
#'   \item{iter, warmup, chains, thin, prior, slice, seed}{the settings
#'     (`iter`: the sweeps per chain run).}
#'   \item{target}{with `target`: `ess`, `rhat`, `max.iter`, whether the
#'     target was `met`, the number of `checks` and the sweeps per chain run
#'     (`iter`).}
#'   \item{diagnostics}{with `target`: the last check's R-hat, bulk and tail
#'     ESS of every parameter (a data frame, a row per parameter), which are
#'     those of `draws`; `summary()` and `print()` use them instead of
#'     computing them again (300,009 parameters of 4 x 1,125 draws take about
#'     3 minutes of one core: BENCHMARKS.md).}
#'   \item{backend, seconds}{where it ran and how long the sampling took.}
#'   \item{parallel}{data frame: `block`, `regime`, `detail`.}
#'   \item{evaluations}{list: log-density evaluations per slice update of
#'     beta, gamma and the scales, the number of stuck updates, and
#'     `stuck_by`, the stuck updates of each parameter.}
#'   \item{scale_floor}{the floors of the sampled scales (`tau[coef]`,
#'     `sigma`).}
#'   \item{warnings}{the warnings the fit raised (character).}
#'   \item{model}{the data as the model saw them, in the rows' order: `y`
#'     (successes for a `cbind()` response), `trials`, `offset`, the design
#'     matrices `x` and `z`, `group` (index into `groups`), and what rebuilds
#'     the design from new data.}
#'   }
#'   Methods: [print()], [summary()] (mean, sd, quantiles, R-hat, bulk and
#'   tail ESS), [plot()] (trace plots), [coef()], `as.array()`;
#'   [predict()][predict.bulkem_hbglm], [fitted()], [residuals()],
#'   [simulate()] (posterior predictive draws) and [log_lik()] (pointwise
#'   log-likelihood, for \pkg{loo}); conversions to \pkg{coda}
#'   (`as.mcmc.list()`, `as.mcmc()`) and \pkg{posterior} (`as_draws_array()`,
#'   `as_draws_df()`, `as_draws()`, ...) when those are installed
#'   (see [hbglm-conversions]).
#' @references Neal, R. M. (2003). Slice sampling. *Annals of Statistics*
#'   31(3), 705--767.
#'
#'   Mahani, A. S. and Sharabiani, M. T. A. (2015). SIMD parallel MCMC
#'   sampling with applications for big-data Bayesian analytics.
#'   *Computational Statistics & Data Analysis* 88, 75--99.
#' @seealso [slice_sample()] for the univariate building block.
#' @examples
#' set.seed(1)
#' d <- data.frame(g = rep(1:8, each = 20), x = rnorm(160))
#' b <- rnorm(8, 1, 0.5)
#' d$y <- rnorm(160, 0.5 + b[d$g] * d$x, 1)
#' fit <- hbglm(y ~ x, d, group = "g", iter = 2000, warmup = 1000, chains = 2,
#'              use.gpu = FALSE)
#' fit
#' summary(fit, pars = c("mu", "tau"))
#' # Sample until every parameter has bulk and tail ESS >= 400 and R-hat <= 1.01:
#' fit3 <- hbglm(y ~ x, d, group = "g", iter = 600, warmup = 300, chains = 2,
#'               target = list(ess = 400, rhat = 1.01), use.gpu = FALSE)
#' fit3$target
#' # The same model written as lme4 does (needs lme4):
#' if (requireNamespace("lme4", quietly = TRUE)) {
#'   fit2 <- hbglm(y ~ x + (1 + x || g), d, iter = 2000, warmup = 1000,
#'                 chains = 2, use.gpu = FALSE, seed = fit$seed)
#'   all.equal(as.array(fit), as.array(fit2))
#' }
#' @export
hbglm <- function(formula, data, group, family = c("gaussian", "binomial", "poisson", "negbinomial", "ordinal"),
                  global = NULL, iter = 2000, warmup = 1000, chains = 4, thin = 1,
                  prior = hbglm_prior(), slice = list(w = 1, m = Inf), use.gpu = NA,
                  seed = NULL, parallel = c("none", "future"), offset = NULL, target = NULL,
                  max.iter = NULL, resume = NULL, ...) {
  call <- environment()
  hbglm_check_dots(match.call(expand.dots = FALSE)$..., call)
  family <- hbglm_family(family, call)
  parallel <- match_arg(parallel, c("none", "future"), "parallel", call)
  iter <- check_count(iter, "iter", min = 2, call = call)
  warmup <- check_count(warmup, "warmup", min = 0, call = call)
  if (warmup >= iter) {
    bulkem_abort(c(
      "{.arg warmup} must be less than {.arg iter}.",
      x = "You supplied {.code warmup = {warmup}} and {.code iter = {iter}}."
    ), call = call)
  }
  chains <- check_count(chains, "chains", call = call)
  thin <- check_count(thin, "thin", call = call)
  if (thin > iter - warmup) {
    bulkem_abort(c(
      "{.arg thin} must be at most {.code iter - warmup} ({iter - warmup}).",
      x = "You supplied {.code thin = {thin}}."
    ), call = call)
  }
  if (!inherits(prior, "bulkem_hbglm_prior")) {
    bulkem_abort(c(
      "{.arg prior} must be made by {.fn hbglm_prior}.",
      x = "You supplied {describe_value(prior)}."
    ), call = call)
  }
  target <- check_target(target, max.iter, iter, warmup, thin, parallel, call)
  slice <- check_slice(slice, call)
  check_flag(use.gpu, "use.gpu", allow_na = TRUE, call = call)
  seed <- check_seed(resume_seed(seed, resume), call = call)
  if (missing(data)) bulkem_abort("{.arg data} must be given: a data frame holding the variables.", call = call)
  if (!is.data.frame(data)) {
    bulkem_abort(c("{.arg data} must be a data frame.",
                   x = "You supplied {describe_value(data)}."), call = call)
  }
  # `offset` is evaluated in `data`, as glm() does.
  offset_expr <- substitute(offset)
  offset <- if (is.null(offset_expr)) NULL else {
    tryCatch(eval(offset_expr, data, parent.frame()),
             error = function(e) bulkem_abort(c("{.arg offset} can't be evaluated in {.arg data}.",
                                                x = conditionMessage(e)), call = call))
  }

  user_formula <- formula
  correlated <- FALSE
  factors <- list()
  if (has_bars(formula)) {
    if (!missing(group) || !is.null(global)) {
      bulkem_abort(c("Give the grouping either in {.arg formula} (such as {.code (1 + x || g)}) or as {.arg group} and {.arg global}, not both.",
                     x = "{.arg formula} has random-effect terms and {.arg {if (!missing(group)) 'group' else 'global'}} is given too."),
                   call = call)
    }
    parts <- hbglm_bars(formula, data, call)
    formula <- parts$formula
    group <- parts$group
    global <- parts$global
    correlated <- parts$correlated
    factors <- parts$factors
  }
  model <- hbglm_data(formula, data, group, family, global, offset, call)
  factors <- hbglm_factors(factors, data, call)
  if (length(model$groups) == 1 && prior$tau_kind != "fixed") {
    bulkem_abort(c(
      "{.arg group} must have at least two groups.",
      x = "All rows are in group {.val {model$groups}}: the spread of the groups' coefficients ({.field tau}) can't be estimated from one group.",
      i = "Use {.fn glm} for one group, or hold {.field tau} fixed with {.code hbglm_prior(tau_fixed = )}."
    ), call = call)
  }
  # The covariance prior is used only for correlated coefficients; priors
  # made before the negative binomial had no shape prior (its default).
  core_prior <- utils::modifyList(list(shape_kind = "gamma", shape_a = 0.01, shape_b = 0.01,
                                       cov = "inverse-wishart", lkj_eta = 1, tau_df = 3, sigma_df = 3), unclass(prior))
  # Each correlated factor (the groups, then the others) takes the
  # inverse-Wishart prior with cov_df = K + 3 for its K terms unless given.
  cov_df_for <- function(k, correlated, whose) {
    if (!correlated) return(NaN)
    df <- if (is.na(prior$cov_df)) k + 3 else prior$cov_df
    if (identical(prior$cov, "lkj")) return(df)  # not used
    if (!(df > k - 1)) {
      bulkem_abort(c("{.arg prior}'s {.field cov_df} must be above K - 1 = {k - 1} for the {k} correlated terms of {whose}.",
                     x = "It is {df}."), call = call)
    }
    df
  }
  core_prior$cov_df <- cov_df_for(ncol(model$x), correlated, "the groups")
  correlated_factors <- vapply(factors, function(f) isTRUE(f$correlated), logical(1))
  if (prior$tau_kind == "fixed" && (correlated || any(correlated_factors))) {
    bulkem_abort(c("{.arg prior}'s {.field tau_fixed} holds the sds of independent terms; correlated terms have their covariance drawn instead.",
                   x = "{.arg formula} has correlated terms of {if (correlated) 'the groups' else paste0('grouping factor ', factors[correlated_factors][[1]]$name)}.",
                   i = "Write them with {.code ||} (independent), or drop {.field tau_fixed} (the covariance's prior is {.field cov}, with {.field cov_df} and {.field cov_scale} or {.field lkj_eta})."),
                 call = call)
  }
  settings <- list(
    y = model$y, x = as.double(t(model$x)), z = as.double(t(model$z)),
    offset = if (is.null(model$offset)) double() else model$offset,
    trials = if (is.null(model$trials)) double() else model$trials, sizes = model$sizes,
    categories = length(model$categories),
    factors = lapply(factors, function(f) list(level = f$level[model$ord], levels = length(f$levels), k = ncol(f$w),
                                               w = as.double(t(f$w[model$ord, , drop = FALSE])),
                                               cov_df = cov_df_for(ncol(f$w), f$correlated, paste0("grouping factor ", f$name)))),
    k = ncol(model$x), p = ncol(model$z), family = family, prior = core_prior,
    iter = if (is.null(target)) iter else target$max.iter, warmup = warmup, thin = thin, slice = slice, seed = seed,
    target = if (is.null(target)) double() else c(target$ess, target$rhat, iter)
  )
  # The data are among the settings: they are the fingerprint.
  r <- resumable("hbglm", "chains", c(settings, list(chains = chains)), NULL)
  if (!is.null(resume)) resume <- check_resume(resume, r, call)
  settings <- c(settings, exec_settings(parallel, use.gpu, call))
  # Future workers take one chain each (every chain needs all the data);
  # chain streams are keyed by the global chain index, so the draws are
  # those of one call (a resumed call keeps the chunks of the call it
  # completes).
  chunks <- if (!is.null(resume)) resume$chunks else if (parallel == "future") chunk_indices(chains, 1) else list(seq_len(chains))
  started <- proc.time()[["elapsed"]]
  parts <- map_chunks(
    chunks, hbglm_chunk, slice = function(idx) NULL, args = settings, parallel = parallel,
    progress = if (parallel == "future") make_progress(chains), what = "chains",
    on_error = function(msg, where) core_error(msg, call, "hbglm", if (parallel == "future") where),
    on_lost = function(results, lost) lose_chunks(r, chunks, results, lost, call),
    done = resume$results,
    call = call
  )
  raw <- bind_chain_parts(parts, chunks)
  if (parallel == "future") raw$seconds <- proc.time()[["elapsed"]] - started

  pars <- c(hbglm_par_names(model$groups, colnames(model$x), colnames(model$z), family, correlated),
            if (family == "ordinal") paste0("cut[", seq_len(length(model$categories) - 1), "]"),
            unlist(lapply(factors, hbglm_factor_par_names)))
  draws <- array(raw$draws, dim = c(raw$kept, raw$chains, raw$n_params),
                 dimnames = list(iteration = NULL, chain = NULL, variable = pars))
  raw$draws <- NULL
  # A target's last check: the diagnostics of these draws.
  diagnostics <- if (!is.null(raw$diagnostics)) {
    data.frame(rhat = raw$diagnostics$rhat, ess_bulk = raw$diagnostics$ess_bulk,
               ess_tail = raw$diagnostics$ess_tail, row.names = pars)
  }
  updates <- raw$sweeps * c(beta = length(model$groups) * ncol(model$x), gamma = ncol(model$z))
  fit <- list(
    draws = draws, diagnostics = diagnostics, family = family, formula = user_formula, global = if (identical(user_formula, formula)) global,
    correlated = correlated, categories = model$categories,
    call = match.call(), groups = model$groups, coef_names = colnames(model$x),
    global_names = colnames(model$z), group_sizes = stats::setNames(model$sizes, model$groups),
    nobs = length(model$y), iter = if (is.null(raw$target)) iter else raw$target$sweeps,
    warmup = warmup, chains = chains, thin = thin,
    prior = prior, slice = slice, seed = seed, backend = raw$backend, seconds = raw$seconds,
    parallel = data.frame(block = raw$plan$block, regime = raw$plan$regime,
                          detail = raw$plan$detail, stringsAsFactors = FALSE),
    evaluations = list(
      per_beta_update = raw$beta_evals / updates[["beta"]],
      per_gamma_update = if (updates[["gamma"]] > 0) raw$gamma_evals / updates[["gamma"]] else NA_real_,
      scale_total = raw$scale_evals, stuck = raw$stuck,
      stuck_by = stats::setNames(raw$stuck_by, pars)
    ),
    scale_floor = c(stats::setNames(raw$tau_floor, paste0("tau[", colnames(model$x), "]")),
                    if (family == "gaussian") c(sigma = raw$sigma_floor),
                    if (family == "negbinomial") c(shape = raw$sigma_floor),
                    stats::setNames(raw$factor_floor, unlist(lapply(factors, function(f) paste0("sd_", f$name, "[", f$coef_names, "]")))))
  )
  # The group as given (a column name or a formula) finds the groups of new
  # data; a vector of groups cannot.
  group_spec <- if (inherits(group, "formula") || (is.character(group) && length(group) == 1 && nrow(data) != 1)) group
  fit$model <- c(model$rows, list(design = model$design, group_spec = group_spec,
                                  factors = lapply(factors, function(f) f[c("name", "expr", "env", "correlated", "levels", "coef_names", "design")]),
                                  factor_rows = lapply(factors, function(f) list(level = f$level, w = f$w)),
                                  offset_arg = list(expr = offset_expr, env = parent.frame(),
                                                    vars = intersect(all.vars(offset_expr), names(data)))))
  fit$warnings <- hbglm_problems(fit, raw$separation, colnames(model$x), colnames(model$z))
  if (!is.null(raw$target)) {
    fit$target <- c(target, raw$target[c("met", "checks")], list(iter = raw$target$sweeps))
    if (!raw$target$met) fit$warnings <- c(fit$warnings, list(target = target_problem(target, raw$target, pars)))
  }
  fit <- structure(fit, class = "bulkem_hbglm")
  for (w in fit$warnings) {
    cli::cli_warn(c("{w$head}", x = "{w$detail}", i = "{w$hint}"),
                  class = c(paste0("bulkem_warning_", w$kind), "bulkem_warning"))
  }
  fit$warnings <- vapply(fit$warnings, function(w) paste(w$head, w$detail), character(1))
  fit
}

# `...` of hbglm() catches arguments it does not have (glm's `weights`,
# a misspelt name), so that none is silently ignored.
hbglm_check_dots <- function(dots, call) {
  if (length(dots) == 0) return(invisible())
  nms <- names(dots)
  if (is.null(nms)) nms <- rep("", length(dots))
  if ("weights" %in% nms) {
    bulkem_abort(c(
      "{.fn hbglm} has no {.arg weights} argument: it can't weight observations.",
      i = "For binomial data with several trials per row, give the response as {.code cbind(successes, failures)}."
    ), call = call)
  }
  check_no_dots(dots, "hbglm", "bulkem::hbglm", call)
}

# family: a name, or a family object / function with its canonical link.
hbglm_family <- function(family, call) {
  if (is.function(family)) {
    family <- tryCatch(family(), error = function(e) NULL)
  }
  if (inherits(family, "family")) {
    canonical <- c(gaussian = "identity", binomial = "logit", poisson = "log")
    if (!family$family %in% names(canonical)) {
      bulkem_abort(c("{.arg family} must be gaussian, binomial, poisson or negbinomial.",
                     x = "You supplied the {.val {family$family}} family.",
                     i = if (grepl("^Negative Binomial", family$family)) "For a negative binomial with its shape sampled, give {.code family = \"negbinomial\"}; hold the shape with {.code hbglm_prior(shape_fixed = )}."),
                   call = call)
    }
    if (!identical(family$link, canonical[[family$family]])) {
      bulkem_abort(c("{.fn hbglm} fits the {family$family} family with its canonical link only ({.val {canonical[[family$family]]}}).",
                     x = "You supplied the {.val {family$link}} link."), call = call)
    }
    return(family$family)
  }
  match_arg(family, c("gaussian", "binomial", "poisson", "negbinomial", "ordinal"), "family", call)
}

# The warnings a fit raises: stuck slice updates, scales at their floor,
# R-hat above 1.05, separation. Each: list(kind, head, detail, hint).
hbglm_problems <- function(fit, separation, coefs, globals) {
  out <- list()
  listing <- function(names, values, fmt) {
    shown <- utils::head(seq_along(names), 8)
    text <- paste0(names[shown], " (", sprintf(fmt, values[shown]), ")", collapse = ", ")
    if (length(names) > 8) text <- paste0(text, ", and ", length(names) - 8, " more")
    text
  }
  stuck <- fit$evaluations$stuck_by
  stuck <- stuck[stuck > 0]
  if (length(stuck) > 0) {
    stuck <- sort(stuck, decreasing = TRUE)
    out$stuck <- list(
      kind = "stuck",
      head = sprintf("%s slice update%s stuck: the parameter kept its value because its log density was numerically flat or not finite.",
                     format(sum(stuck), big.mark = ","), if (sum(stuck) == 1) " was" else "s were"),
      detail = paste0("Stuck updates (count): ", listing(names(stuck), stuck, "%.0f"), "."),
      hint = "Those draws are unreliable: check the scale of the data (rescale very large or small values) and the model."
    )
  }
  draws <- fit$draws
  floors <- fit$scale_floor
  at_floor <- vapply(names(floors), function(p) sum(draws[, , p] <= 10 * floors[[p]]), numeric(1))
  hit <- at_floor[at_floor > 0]
  if (length(hit) > 0) {
    total <- prod(dim(draws)[1:2])
    out$floor <- list(
      kind = "floor",
      head = "A scale reached the floor of its sampled range: its posterior piles up at zero.",
      detail = paste0("Draws within 10x of the floor, of ", total, ": ",
                      listing(names(hit), hit, "%.0f"), "; floors ",
                      paste0(names(hit), " = ", signif(floors[names(hit)], 3), collapse = ", "), "."),
      hint = if (identical(names(hit), "shape"))
        paste("The counts are far more dispersed than a negative binomial with a shape of 1e-8 allows;",
              "the shape is sampled above that, so these draws are truncated there.") else
        paste("The response is fitted exactly (no noise) or the groups' coefficients are identical;",
              "scales are sampled above 1e-10 times their scale in the data, so these draws are truncated there.")
    )
  }
  diag <- fit_diagnostics(fit, tail = FALSE)
  rhat <- stats::setNames(diag$rhat, rownames(diag))
  bad <- rhat[!is.na(rhat) & rhat > 1.05]
  if (length(bad) > 0) {
    bad <- sort(bad, decreasing = TRUE)
    out$rhat <- list(
      kind = "rhat",
      head = sprintf("The chains have not mixed: R-hat is above 1.05 for %d parameter%s.",
                     length(bad), if (length(bad) == 1) "" else "s"),
      detail = paste0("R-hat: ", listing(names(bad), bad, "%.3f"), "."),
      hint = "Run longer (larger `iter` and `warmup`) or check the model; see summary() for all parameters."
    )
  }
  if (length(separation) > 0) {
    cols <- c(coefs, globals)[separation]
    pars <- ifelse(separation <= length(coefs), paste0("mu[", cols, "]"), paste0("gamma[", cols, "]"))
    what <- if (fit$family == "binomial") "perfectly separated: a combination of these columns splits the successes from the failures" else
      "such that zero counts drive the linear predictor to -Inf along these columns"
    out$separation <- list(
      kind = "separation",
      head = paste0("The pooled data are ", what, ", so the likelihood has no maximum."),
      detail = paste0("Columns: ", paste(cols, collapse = ", "), "; their coefficients (",
                      paste(pars, collapse = ", "),
                      if (any(separation <= length(coefs))) " and the groups' beta" else "",
                      ") are bounded only by the priors."),
      hint = "Their draws reflect the priors, not the data; consider removing or merging these predictors."
    )
  }
  unname(out)
}

#' Priors of a hierarchical GLM
#'
#' The priors of [hbglm()]:
#' \deqn{\mu_k \sim N(\mathrm{mu\_mean}, \mathrm{mu\_sd}^2), \quad
#'   \tau_k \sim \text{half-Cauchy}(0, \mathrm{tau\_scale}),}
#' \deqn{\gamma_j \sim N(0, \mathrm{gamma\_sd}^2), \quad
#'   \sigma \sim \text{half-Cauchy}(0, \mathrm{sigma\_scale}), \quad
#'   \phi \sim \text{gamma}(0.01, 0.01).}
#' The defaults (\eqn{N(0, 10^2)}, half-Cauchy(0, 2.5)) are weakly
#' informative on the scale of standardised predictors. `tau_family =
#' "half-normal"` gives \eqn{\tau_k \sim} half-normal(0, `tau_scale`),
#' `"half-t"` the half-Student-t with `tau_df` degrees of freedom (brms's
#' default for sds is `student_t(3, 0, 2.5)`: `tau_family = "half-t"`, the
#' default `tau_df = 3` and `tau_scale = 2.5`), `"exponential"` the
#' exponential with mean `tau_scale` (rstanarm's `exponential(rate = 1 /
#' tau_scale)`, its prior of a single group-level sd); `sigma_family` and
#' `sigma_df` do the same for \eqn{\sigma}.
#' `tau_fixed` and `sigma_fixed` hold a scale at a known value instead of
#' sampling it (the conjugate model with known variances).
#'
#' Every sd and scale must lie between 1e-100 and 1e100, and `mu_mean` be at
#' most 1e100 in magnitude: beyond, their squares and inverse squares leave
#' the range of double precision.
#'
#' @param mu_mean,mu_sd Mean and sd of the normal prior of each \eqn{\mu_k}.
#' @param tau_scale Scale of the prior of each \eqn{\tau_k} (and of the sds of
#'   grouping factors besides the groups).
#' @param tau_family,sigma_family `"half-cauchy"`, `"half-normal"`,
#'   `"half-t"` or `"exponential"`.
#' @param tau_df,sigma_df Degrees of freedom of a `"half-t"` prior
#'   (positive; 1 is the half-Cauchy).
#' @param gamma_sd Sd of the normal prior (mean 0) of each global
#'   coefficient.
#' @param sigma_scale Scale of the prior of the residual sd (gaussian
#'   family).
#' @param tau_fixed,sigma_fixed `NULL`, or a positive number at which the
#'   scale is held.
#' @param shape The shape and rate of the gamma prior of the negative
#'   binomial's shape \eqn{\phi} (variance \eqn{m + m^2/\phi} at mean
#'   \eqn{m}); the default gamma(0.01, 0.01) is brms's.
#' @param shape_fixed `NULL`, or a positive number at which the negative
#'   binomial's shape is held (as `MASS::negative.binomial(theta)`).
#' @param cov The prior of the covariance \eqn{\Sigma} of correlated
#'   group coefficients (lme4's `(1 + x | g)`), which takes the place of
#'   the \eqn{\tau_k}; each other grouping factor with correlated terms
#'   (`(1 + x | week)`) takes the same kind of prior for its own
#'   covariance, with its own K.
#'   * `"inverse-wishart"` (the default; bayesm's and MCMCglmm's):
#'     \eqn{\Sigma \sim} inverse-Wishart(`cov_df`, `cov_df * cov_scale^2 *
#'     I`). It is the default because it is conjugate: \eqn{\Sigma} is drawn
#'     exactly in each sweep, at no cost beyond the sums of squares, and
#'     mixes as fast as the coefficients do. But it ties the sds to the
#'     correlations and puts each sd on the order of `cov_scale`: with few
#'     levels (tens) and sds much smaller than it, the posterior sds are
#'     pulled up and the correlations towards 0 (25 levels with sds 0.55 /
#'     0.47 and correlation 0.65 gave 0.68 / 0.62 and 0.34 at `cov_scale =
#'     1`, 0.52 / 0.44 and 0.64 at 0.1): set `cov_scale` to the sds you
#'     expect, or use LKJ.
#'   * `"lkj"` (brms's and rstanarm's choice): \eqn{\Sigma = D \Omega D}
#'     with the correlation matrix \eqn{\Omega \sim} LKJ(`lkj_eta`)
#'     (Lewandowski, Kurowicka and Joe 2009; `lkj_eta = 1` is uniform over
#'     correlation matrices, larger values favour weaker correlations) and
#'     each sd in \eqn{D} under the prior of \eqn{\tau_k} (`tau_family`,
#'     `tau_scale`), independently of the correlations. Not conjugate: each
#'     sweep slice-samples the sds and the canonical partial correlations
#'     on unconstrained scales, given the coefficients' sums of squares and
#'     products (a few dozen K x K evaluations per sweep, whatever the
#'     number of groups).
#' @param cov_df,cov_scale The inverse-Wishart's degrees of freedom (K + 3
#'   for K coefficients when `NULL`: bayesm's `rhierLinearModel` default)
#'   and scale.
#' @param lkj_eta The LKJ prior's shape (positive; 1 is uniform).
#' @return An object of class `bulkem_hbglm_prior`.
#' @references Lewandowski, D., Kurowicka, D. and Joe, H. (2009).
#'   Generating random correlation matrices based on vines and extended
#'   onion method. *Journal of Multivariate Analysis* 100(9), 1989--2001.
#'   \doi{10.1016/j.jmva.2009.04.008}
#' @examples
#' hbglm_prior()
#' hbglm_prior(mu_sd = 5, tau_family = "half-normal", tau_scale = 2)
#' # brms's defaults for a correlated model: LKJ(1), sds half-t(3, 0, 2.5).
#' hbglm_prior(cov = "lkj", tau_family = "half-t")
#' @export
hbglm_prior <- function(mu_mean = 0, mu_sd = 10, tau_scale = 2.5,
                        tau_family = c("half-cauchy", "half-normal", "half-t", "exponential"), gamma_sd = 10,
                        sigma_scale = 2.5, tau_fixed = NULL, sigma_fixed = NULL,
                        cov_df = NULL, cov_scale = 1, shape = c(0.01, 0.01), shape_fixed = NULL,
                        sigma_family = c("half-cauchy", "half-normal", "half-t", "exponential"),
                        cov = c("inverse-wishart", "lkj"), lkj_eta = 1, tau_df = 3, sigma_df = 3) {
  call <- environment()
  cov <- match_arg(cov, c("inverse-wishart", "lkj"), "cov", call)
  lkj_eta <- check_prior_scale(lkj_eta, "lkj_eta", call)
  mu_mean <- check_number(mu_mean, "mu_mean", call = call)
  if (abs(mu_mean) > PRIOR_MAX) {
    bulkem_abort(c("{.arg mu_mean} must be at most 1e100 in magnitude.",
                   x = "You supplied {describe_value(mu_mean)}."), call = call)
  }
  mu_sd <- check_prior_scale(mu_sd, "mu_sd", call)
  tau_scale <- check_prior_scale(tau_scale, "tau_scale", call)
  tau_family <- match_arg(tau_family, c("half-cauchy", "half-normal", "half-t", "exponential"), "tau_family", call)
  sigma_family <- match_arg(sigma_family, c("half-cauchy", "half-normal", "half-t", "exponential"), "sigma_family", call)
  tau_df <- check_prior_scale(tau_df, "tau_df", call)
  sigma_df <- check_prior_scale(sigma_df, "sigma_df", call)
  gamma_sd <- check_prior_scale(gamma_sd, "gamma_sd", call)
  sigma_scale <- check_prior_scale(sigma_scale, "sigma_scale", call)
  if (!is.null(tau_fixed)) tau_fixed <- check_prior_scale(tau_fixed, "tau_fixed", call)
  if (!is.null(sigma_fixed)) sigma_fixed <- check_prior_scale(sigma_fixed, "sigma_fixed", call)
  if (!is.null(cov_df)) {
    cov_df <- check_number(cov_df, "cov_df", call = call)
    if (!(cov_df > 0 && cov_df <= PRIOR_MAX)) {
      bulkem_abort(c("{.arg cov_df} must be a positive number (above K - 1 for K correlated coefficients).",
                     x = "You supplied {describe_value(cov_df)}."), call = call)
    }
  }
  cov_scale <- check_prior_scale(cov_scale, "cov_scale", call)
  if (!(is.numeric(shape) && length(shape) == 2 && all(is.finite(shape)) && all(shape >= PRIOR_MIN & shape <= PRIOR_MAX))) {
    bulkem_abort(c("{.arg shape} must be two positive numbers: the gamma prior's shape and rate.",
                   x = "You supplied {describe_value(shape)}."), call = call)
  }
  if (!is.null(shape_fixed)) shape_fixed <- check_prior_scale(shape_fixed, "shape_fixed", call)
  structure(list(
    mu_mean = mu_mean, mu_sd = mu_sd,
    tau_kind = if (is.null(tau_fixed)) tau_family else "fixed",
    tau_value = if (is.null(tau_fixed)) tau_scale else tau_fixed,
    gamma_sd = gamma_sd,
    sigma_kind = if (is.null(sigma_fixed)) sigma_family else "fixed",
    sigma_value = if (is.null(sigma_fixed)) sigma_scale else sigma_fixed,
    cov = cov, lkj_eta = lkj_eta, tau_df = tau_df, sigma_df = sigma_df,
    cov_df = if (is.null(cov_df)) NA_real_ else cov_df, cov_scale = cov_scale,
    shape_kind = if (is.null(shape_fixed)) "gamma" else "fixed",
    shape_a = if (is.null(shape_fixed)) as.double(shape[1]) else shape_fixed,
    shape_b = if (is.null(shape_fixed)) as.double(shape[2]) else NA_real_
  ), class = "bulkem_hbglm_prior")
}

#' @export
print.bulkem_hbglm_prior <- function(x, ...) {
  scale <- function(kind, value, df) {
    switch(kind, fixed = paste0("fixed at ", format(value)),
           exponential = paste0("exponential(mean ", format(value), ")"),
           `half-t` = paste0("half-t(", format(df), ", 0, ", format(value), ")"),
           paste0(kind, "(0, ", format(value), ")"))
  }
  cat("Priors of a hierarchical GLM\n")
  cat("  mu_k    ~ N(", format(x$mu_mean), ", ", format(x$mu_sd), "^2)\n", sep = "")
  cat("  tau_k   ~ ", scale(x$tau_kind, x$tau_value, x$tau_df %||% 3), "\n", sep = "")
  cat("  gamma_j ~ N(0, ", format(x$gamma_sd), "^2)\n", sep = "")
  cat("  sigma   ~ ", scale(x$sigma_kind, x$sigma_value, x$sigma_df %||% 3), " (gaussian family)\n", sep = "")
  shape <- x$shape_kind %||% "gamma"
  cat("  shape   ~ ", if (shape == "fixed") paste0("fixed at ", format(x$shape_a)) else
    paste0("gamma(", format(x$shape_a %||% 0.01), ", ", format(x$shape_b %||% 0.01), ")"), " (negbinomial family)\n", sep = "")
  if (identical(x$cov, "lkj")) {
    cat("  Sigma   = D Omega D, Omega ~ LKJ(", format(x$lkj_eta), "), the sds in D as tau_k",
        " (correlated coefficients, in place of tau_k)\n", sep = "")
  } else {
    cat("  Sigma   ~ inverse-Wishart(", if (is.na(x$cov_df)) "K + 3" else format(x$cov_df), ", df * ",
        format(x$cov_scale), "^2 I) (correlated coefficients, in place of tau_k)\n", sep = "")
  }
  invisible(x)
}

#' Univariate slice sampling
#'
#' Draws a Markov chain from a univariate density known up to a constant,
#' with Neal's (2003) slice sampler: from the current point \eqn{x_0}, draw
#' a level \eqn{y = \log f(x_0) - E} (\eqn{E} standard exponential), place
#' an interval of width `w` at random around \eqn{x_0}, step it out (at most
#' `m` steps, split at random between the two ends) until both ends lie
#' below the level, then draw uniformly from the interval, shrinking it
#' towards \eqn{x_0} after each rejection. It needs no tuning beyond a rough
#' width and is exact for any `w`; this is the building block that
#' [hbglm()] applies to every coordinate.
#'
#' Points outside `[lower, upper]`, and points where `log_density` is `-Inf`
#' or `NaN`, are outside the support.
#'
#' @param log_density An R function of one number returning the log density
#'   (up to a constant).
#' @param x0 Starting point, with a finite log density.
#' @param n Number of draws.
#' @param w Initial interval width (positive).
#' @param m Maximum number of stepping-out steps (`Inf`: unlimited).
#' @param lower,upper Bounds of the support.
#' @return A numeric vector of `n` draws (a Markov chain; `x0` excluded),
#'   with attribute `evaluations`, the number of calls of `log_density`.
#' @references Neal, R. M. (2003). Slice sampling. *Annals of Statistics*
#'   31(3), 705--767.
#' @examples
#' set.seed(1)
#' x <- slice_sample(function(x) dgamma(x, 3, 2, log = TRUE), 1, 2000, lower = 0)
#' c(mean(x), var(x))  # 1.5, 0.75
#' @export
slice_sample <- function(log_density, x0, n, w = 1, m = Inf, lower = -Inf, upper = Inf) {
  call <- environment()
  if (!is.function(log_density)) {
    bulkem_abort(c(
      "{.arg log_density} must be a function.",
      x = "You supplied {describe_value(log_density)}."
    ), call = call)
  }
  n <- check_count(n, "n", call = call)
  w <- check_positive(w, "w", call)
  m_ok <- is.numeric(m) && length(m) == 1 && !is.na(m) && m >= 1 && (is.infinite(m) || m == round(m))
  if (!m_ok) {
    bulkem_abort(c("{.arg m} must be a whole number of at least 1, or {.code Inf}.",
                     x = "You supplied {describe_value(m)}."), call = call)
  }
  bounds_ok <- is.numeric(lower) && is.numeric(upper) && length(lower) == 1 && length(upper) == 1 &&
    !is.na(lower) && !is.na(upper) && lower < upper
  if (!bounds_ok) {
    bulkem_abort(c("{.arg lower} must be less than {.arg upper}.",
                     x = "You supplied {describe_value(lower)} and {describe_value(upper)}."), call = call)
  }
  x0 <- check_number(x0, "x0", call = call)
  if (x0 < lower || x0 > upper) {
    bulkem_abort("{.arg x0} must lie in [{.arg lower}, {.arg upper}] = [{lower}, {upper}].", call = call)
  }
  evals <- 0
  logf <- function(x) {
    if (x < lower || x > upper) return(-Inf)
    evals <<- evals + 1
    v <- log_density(x)
    if (!is.numeric(v) || length(v) != 1) {
      bulkem_abort(c("{.arg log_density} must return a single number.",
                       x = "At x = {x} it returned {describe_value(v)}."), call = call)
    }
    if (is.na(v)) -Inf else as.double(v)
  }
  f0 <- logf(x0)
  if (!is.finite(f0)) {
    bulkem_abort(c("{.arg x0} must have a finite log density.",
                     x = "{.code log_density({x0})} is {f0}."), call = call)
  }
  m_steps <- if (is.infinite(m)) SLICE_MAX_STEPS else m
  # The draws are the only large allocation: refused as a memory error.
  out <- tryCatch(numeric(n), error = function(e) {
    bulkem_abort(c("{.fn slice_sample} needs more memory than is available.",
                   x = "{n} draws need {format(8 * n / 1e9, digits = 3)} GB: {conditionMessage(e)}"),
                 kind = "memory", call = call)
  })
  x <- x0
  for (i in seq_len(n)) {
    y <- f0 - stats::rexp(1)
    left <- x - w * stats::runif(1)
    right <- left + w
    j <- floor(m_steps * stats::runif(1))
    k <- m_steps - 1 - j
    while (j > 0 && left > lower && logf(left) > y) {
      left <- left - w
      j <- j - 1
    }
    while (k > 0 && right < upper && logf(right) > y) {
      right <- right + w
      k <- k - 1
    }
    left <- max(left, lower)
    right <- min(right, upper)
    repeat {
      x1 <- left + (right - left) * stats::runif(1)
      f1 <- logf(x1)
      if (f1 > y) break
      if (x1 < x) left <- x1 else right <- x1
      if (right - left <= .Machine$double.eps * max(abs(x), 1e-300)) {
        x1 <- x
        f1 <- f0
        break
      }
    }
    x <- x1
    f0 <- f1
    out[i] <- x
  }
  attr(out, "evaluations") <- evals
  out
}

# As the core's SLICE_MAX_STEPS: stepping out when m = Inf stops after this
# many steps, so an improper density cannot hang the sampler.
SLICE_MAX_STEPS <- 1000

check_positive <- function(x, arg, call) {
  ok <- is.numeric(x) && length(x) == 1 && !is.na(x) && is.finite(x) && x > 0
  if (!ok) {
    bulkem_abort(c("{.arg {arg}} must be a positive finite number.",
                     x = "You supplied {describe_value(x)}."), call = call)
  }
  as.double(x)
}

# As the core's PRIOR_MIN and PRIOR_MAX.
PRIOR_MIN <- 1e-100
PRIOR_MAX <- 1e100

check_prior_scale <- function(x, arg, call) {
  x <- check_positive(x, arg, call)
  if (x < PRIOR_MIN || x > PRIOR_MAX) {
    bulkem_abort(c("{.arg {arg}} must be between 1e-100 and 1e100.",
                   x = "You supplied {describe_value(x)}."), call = call)
  }
  x
}

check_slice <- function(slice, call) {
  if (!is.list(slice) || (length(slice) > 0 && is.null(names(slice))) ||
      !all(names(slice) %in% c("w", "m", "adapt"))) {
    bulkem_abort(c(
      "{.arg slice} must be a list with elements {.field w}, {.field m} and optionally {.field adapt}.",
      x = "You supplied {describe_value(slice)}."
    ), call = call)
  }
  w <- check_positive(if (is.null(slice$w)) 1 else slice$w, "slice$w", call)
  m <- if (is.null(slice$m)) Inf else slice$m
  m_ok <- is.numeric(m) && length(m) == 1 && !is.na(m) && m >= 1 && (is.infinite(m) || m == round(m))
  if (!m_ok) {
    bulkem_abort(c("{.arg slice$m} must be a whole number of at least 1, or {.code Inf}.",
                     x = "You supplied {describe_value(m)}."), call = call)
  }
  adapt <- check_flag(if (is.null(slice$adapt)) TRUE else slice$adapt, "slice$adapt", call = call)
  list(w = w, m = as.double(m), adapt = adapt)
}

# As the core's MAX_ABS_VALUE: larger responses, predictors and offsets
# overflow the likelihood (squares, sums of products).
HBGLM_MAX_ABS <- 1e100

# Model matrices sorted by group, with every bad input reported in R terms
# (rows and columns of the user's data).
hbglm_data <- function(formula, data, group, family, global, offset, call) {
  if (!inherits(formula, "formula") || length(formula) != 3) {
    what <- if (inherits(formula, "formula")) "a one-sided formula" else describe_value(formula)
    bulkem_abort(c("{.arg formula} must be a two-sided formula such as {.code y ~ x}.",
                     x = "You supplied {what}."), call = call)
  }
  if (nrow(data) == 0) bulkem_abort("{.arg data} must have at least one row.", call = call)
  if (!is.null(global) && (!inherits(global, "formula") || length(global) != 2)) {
    bulkem_abort(c("{.arg global} must be {.code NULL} or a one-sided formula such as {.code ~ price}.",
                     x = "You supplied {describe_value(global)}."), call = call)
  }
  g <- hbglm_group(group, data, call)
  frame <- function(f, arg) {
    hbglm_check_terms(f, data, arg, call)
    tryCatch(stats::model.frame(f, data, na.action = stats::na.pass),
             error = function(e) bulkem_abort(c("{.arg {arg}} can't be evaluated in {.arg data}.",
                                                x = conditionMessage(e)), call = call))
  }
  matrix_of <- function(f, mf, arg) {
    tryCatch(stats::model.matrix(f, mf),
             error = function(e) bulkem_abort(c("{.arg {arg}} can't be turned into a design matrix.",
                                                x = conditionMessage(e)), call = call))
  }
  mf <- frame(formula, "formula")
  if (nrow(mf) != nrow(data)) {
    bulkem_abort(c("The variables of {.arg formula} must have one value per row of {.arg data} ({nrow(data)}).",
                   x = "They have {nrow(mf)}."), call = call)
  }
  y <- stats::model.response(mf)
  x <- matrix_of(formula, mf, "formula")
  off <- stats::model.offset(mf)
  z <- if (is.null(global)) {
    matrix(0, nrow(data), 0)
  } else {
    gf <- frame(global, "global")
    goff <- stats::model.offset(gf)
    if (!is.null(goff)) off <- if (is.null(off)) goff else off + goff
    zz <- matrix_of(global, gf, "global")
    zz[, colnames(zz) != "(Intercept)", drop = FALSE]
  }
  if (!is.null(offset)) {
    if (!is.numeric(offset) || !is.null(dim(offset)) || length(offset) != nrow(data)) {
      bulkem_abort(c("{.arg offset} must be a numeric vector with one value per row of {.arg data} ({nrow(data)}).",
                     x = "It is {describe_value(offset)}."), call = call)
    }
    off <- if (is.null(off)) as.double(offset) else off + offset
  }
  if (ncol(x) == 0) {
    bulkem_abort("{.arg formula} must give at least one coefficient that varies by group.", call = call)
  }
  both <- intersect(colnames(x), colnames(z))
  if (length(both) > 0) {
    bulkem_abort(c("A coefficient can't both vary by group and be global.",
                     x = "{.val {both}} appear{?s/} in {.arg formula} and in {.arg global}."), call = call)
  }
  for (part in list(list(y, "The response"), list(x, "A predictor in `formula`"), list(z, "A predictor in `global`"),
                    list(off, "The offset"), list(g, "The group"))) {
    bad <- if (is.matrix(part[[1]])) which(rowSums(is.na(part[[1]])) > 0) else which(is.na(part[[1]]))
    if (length(bad) > 0) {
      bulkem_abort(c("{.arg data} must not have missing values in the variables of the model.",
                       x = "{part[[2]]} is missing in row{?s} {utils::head(bad, 5)}{if (length(bad) > 5) ', ...'}."),
                     call = call)
    }
  }
  for (part in list(list(x, "formula"), list(z, "global"))) {
    hbglm_check_values(part[[1]], paste0("A predictor in {.arg ", part[[2]], "}"), call)
  }
  if (!is.null(off)) hbglm_check_values(matrix(off, dimnames = list(NULL, "offset")), "The offset", call)
  hbglm_check_rank(cbind(x, z), call)
  response <- hbglm_response(y, family, call)
  if (family == "ordinal" && colnames(x)[1] != "(Intercept)") {
    bulkem_abort(c("The ordinal family needs an intercept that varies by group: its cut-points are measured from it.",
                   x = "{.arg formula} has no intercept.",
                   i = "Keep the intercept, such as {.code y ~ x + (1 | g)}; the cut-points take the place of its population mean."),
                 call = call)
  }
  if (!is.factor(g)) g <- factor(g)
  empty <- levels(g)[tabulate(g, nlevels(g)) == 0]
  if (length(empty) > 0) {
    bulkem_abort(c("Every group must have at least one observation.",
                     x = "{.arg group} has no observations for level{?s} {.val {utils::head(empty, 5)}}.",
                     i = "Drop unused levels with {.fn droplevels}."), call = call)
  }
  ord <- order(as.integer(g))
  # The rows in the user's order and what rebuilds a design from new data,
  # for the fit's predict(), fitted(), residuals(), simulate(), log_lik().
  rows <- list(y = response$y, trials = response$trials, offset = if (!is.null(off)) as.double(off),
               x = x, z = z, group = as.integer(g))
  # `vars`: the variables taken from `data`, which new data must hold too
  # (rather than finding them elsewhere, as model.frame() would).
  from_data <- function(e) intersect(all.vars(e), names(data))
  design <- list(
    formula = list(terms = attr(mf, "terms"), xlevels = stats::.getXlevels(attr(mf, "terms"), mf),
                   contrasts = attr(x, "contrasts"), vars = from_data(stats::delete.response(attr(mf, "terms"))),
                   response_vars = from_data(formula[[2]])),
    global = if (!is.null(global)) list(terms = attr(gf, "terms"), xlevels = stats::.getXlevels(attr(gf, "terms"), gf),
                                        contrasts = attr(zz, "contrasts"), vars = from_data(attr(gf, "terms")))
  )
  list(y = response$y[ord], trials = response$trials[ord], categories = response$categories, offset = if (!is.null(off)) as.double(off)[ord],
       x = x[ord, , drop = FALSE], z = z[ord, , drop = FALSE],
       sizes = tabulate(g, nlevels(g)), groups = levels(g), rows = rows, design = design, ord = ord)
}

# Terms hbglm() cannot honour are errors naming them: random-effect bars
# (the grouping is `group`).
hbglm_check_terms <- function(f, data, arg, call) {
  tt <- tryCatch(stats::terms(f, data = data),
                 error = function(e) bulkem_abort(c("{.arg {arg}} can't be read.", x = conditionMessage(e)), call = call))
  labels <- attr(tt, "term.labels")
  is_bar <- vapply(labels, function(t) {
    e <- tryCatch(str2lang(t), error = function(e) NULL)
    is.call(e) && as.character(e[[1]]) %in% c("|", "||")
  }, logical(1))
  if (any(is_bar)) {
    bars <- paste0("(", labels[is_bar], ")")
    bulkem_abort(c(
      "{.arg {arg}} has {cli::qty(length(bars))}{?a term/terms} {.fn hbglm} can't fit: {.code {bars}}.",
      x = "Random-effect terms with {.code |} are not supported.",
      i = "The grouping is {.arg group} (such as {.code group = ~ g}): the coefficients of {.arg formula} vary by group, those of {.arg global} are shared."
    ), call = call)
  }
  invisible()
}

# Every value finite and small enough for the likelihood, naming the row
# and column of the first that is not.
hbglm_check_values <- function(m, what, call) {
  if (!is.numeric(m)) return(invisible())
  bad <- which(!is.finite(m) | abs(m) > HBGLM_MAX_ABS, arr.ind = TRUE)
  if (length(bad) == 0) return(invisible())
  row <- bad[1, 1]
  col <- colnames(m)[bad[1, 2]]
  v <- m[row, bad[1, 2]]
  if (!is.finite(v)) {
    bulkem_abort(c(paste(what, "must be finite."),
                   x = "Column {.val {col}} is {v} in row {row}."), call = call)
  }
  bulkem_abort(c(paste(what, "overflows the likelihood: values must be at most 1e100 in magnitude."),
                 x = "Column {.val {col}} is {format(v, digits = 3)} in row {row}.",
                 i = "Rescale it (change its units)."), call = call)
}

# A singular design (columns that are linear combinations of others, in the
# pooled x and z) is an error naming the columns: pivoted Cholesky of the
# column-scaled cross-product, aliasing as lm()'s tolerance (1e-7 on the
# QR diagonal, squared here).
hbglm_check_rank <- function(m, call) {
  if (ncol(m) == 0) return(invisible())
  scale <- sqrt(colSums(m^2))
  zero <- colnames(m)[scale == 0]
  if (length(zero) > 0) {
    bulkem_abort(c("The design is singular: a column is all zero.",
                   x = "Column{?s} {.val {zero}} {?is/are} zero in every row."), call = call)
  }
  xtx <- crossprod(sweep(m, 2, scale, "/"))
  ch <- suppressWarnings(chol(xtx, pivot = TRUE, tol = 1e-14))
  rank <- attr(ch, "rank")
  if (rank < ncol(m)) {
    piv <- attr(ch, "pivot")
    aliased <- colnames(m)[piv[(rank + 1):ncol(m)]]
    kept <- colnames(m)[piv[seq_len(rank)]]
    n_aliased <- length(aliased)
    bulkem_abort(c(
      "The design is singular: some columns are linear combinations of the others.",
      x = "{cli::qty(n_aliased)}Column{?s} {.val {aliased}} {cli::qty(n_aliased)}{?is a linear combination/are linear combinations} of {.val {kept}}.",
      i = "{cli::qty(n_aliased)}Remove {?it/them} from {.arg formula} or {.arg global}: no coefficient can be estimated for {?it/them}."
    ), call = call)
  }
  invisible()
}

hbglm_group <- function(group, data, call) {
  if (missing(group)) bulkem_abort("{.arg group} must be given: a column name, a one-sided formula or a vector.", call = call)
  g <- if (is.character(group) && length(group) == 1 && nrow(data) != 1) {
    if (!group %in% names(data)) {
      bulkem_abort(c("{.arg group} must name a column of {.arg data}.",
                       x = "There is no column {.val {group}}."), call = call)
    }
    data[[group]]
  } else if (inherits(group, "formula")) {
    nested <- length(group) == 2 && is.call(group[[2]]) && identical(group[[2]][[1]], as.name(":"))
    if (length(group) != 2 || (length(all.vars(group)) != 1 && !nested)) {
      bulkem_abort("{.arg group} must be a one-sided formula of one variable, such as {.code ~ store}.", call = call)
    }
    # `~ a:b`: the levels of a within b (a formula's nested factor).
    if (nested) hbglm_grouping(group[[2]], data, environment(group), call) else eval(group[[2]], data, environment(group))
  } else {
    group
  }
  if (!is.atomic(g) || length(g) != nrow(data)) {
    bulkem_abort(c("{.arg group} must give one group per row of {.arg data} ({nrow(data)}).",
                     x = "It gives {describe_value(g)}."), call = call)
  }
  g
}

# The response as the core takes it: list(y, trials), trials NULL unless
# the binomial response is cbind(successes, failures); for the ordinal
# family also `categories` (the labels of 1..C), or y matched to the
# fit's `categories` when given.
hbglm_response <- function(y, family, call, categories = NULL) {
  if (is.null(y)) bulkem_abort("The response of {.arg formula} is missing.", call = call)
  if (family == "ordinal") return(hbglm_ordinal_response(y, call, categories))
  where <- function(bad, v) paste0("Row ", bad, " is ", describe_value(v[bad]), ".")
  if (is.matrix(y)) {
    if (family != "binomial" || ncol(y) != 2) {
      bulkem_abort(c(
        "The response of {.arg formula} must be a single vector{if (family == 'binomial') ' or {.code cbind(successes, failures)}'}.",
        x = "It has {ncol(y)} columns."
      ), call = call)
    }
    if (!is.numeric(y)) {
      bulkem_abort("{.code cbind(successes, failures)} must hold numbers.", call = call)
    }
    bad <- which(rowSums(!is.finite(y) | y < 0 | y != round(y) | abs(y) > HBGLM_MAX_ABS) > 0)
    if (length(bad) > 0) {
      bulkem_abort(c(
        "{.code cbind(successes, failures)} must hold non-negative whole numbers of trials.",
        x = "Row {bad[1]} is ({y[bad[1], 1]}, {y[bad[1], 2]})."
      ), call = call)
    }
    return(list(y = as.double(y[, 1]), trials = as.double(y[, 1] + y[, 2])))
  }
  if (family == "binomial") {
    if (is.logical(y)) y <- as.double(y)
    if (is.factor(y)) {
      if (nlevels(y) != 2) {
        bulkem_abort(c("The response must have two values for {.code family = \"binomial\"}.",
                         x = "The factor has {nlevels(y)} level{?s}."), call = call)
      }
      y <- as.double(as.integer(y) == 2L)
    }
    if (!is.numeric(y) || any(y != 0 & y != 1)) {
      bad <- if (is.numeric(y)) which(y != 0 & y != 1)[1] else 1
      bulkem_abort(c("The response must be 0 or 1 for {.code family = \"binomial\"}.",
                       x = where(bad, y),
                       i = "For counts of successes out of several trials, give {.code cbind(successes, failures)}."), call = call)
    }
  } else if (family %in% c("poisson", "negbinomial")) {
    if (!is.numeric(y)) {
      bulkem_abort(c("The response must be counts (numbers) for {.code family = \"{family}\"}.",
                     x = "It is {describe_value(y)}."), call = call)
    }
    bad <- which(!is.finite(y) | y < 0 | y != round(y) | y > HBGLM_MAX_ABS)
    if (length(bad) > 0) {
      bulkem_abort(c("The response must be a non-negative whole number for {.code family = \"{family}\"}.",
                       x = where(bad[1], y)), call = call)
    }
  } else {
    if (!is.numeric(y)) {
      bulkem_abort(c("The response must be numeric for {.code family = \"gaussian\"}.",
                     x = "It is {describe_value(y)}."), call = call)
    }
    bad <- which(!is.finite(y))
    if (length(bad) > 0) {
      bulkem_abort(c("The response must be finite numbers for {.code family = \"gaussian\"}.",
                     x = where(bad[1], y)), call = call)
    }
    bad <- which(abs(y) > HBGLM_MAX_ABS)
    if (length(bad) > 0) {
      bulkem_abort(c("The response overflows the gaussian likelihood: values must be at most 1e100 in magnitude.",
                     x = "Row {bad[1]} is {format(y[bad[1]], digits = 3)}.",
                     i = "Rescale it (change its units)."), call = call)
    }
  }
  list(y = as.double(y), trials = NULL)
}

hbglm_par_names <- function(groups, coefs, globals, family, correlated = FALSE) {
  beta <- paste0("beta[", rep(groups, each = length(coefs)), ",", rep(coefs, length(groups)), "]")
  c(beta, paste0("mu[", coefs, "]"), paste0("tau[", coefs, "]"),
    if (length(globals)) paste0("gamma[", globals, "]"),
    if (family == "gaussian") "sigma", if (family == "negbinomial") "shape",
    hbglm_cor_names("cor", coefs, correlated))
}

# `target` as the core takes it: NULL, or list(ess, rhat, max.iter).
check_target <- function(target, max.iter, iter, warmup, thin, parallel, call) {
  if (is.null(target)) {
    if (!is.null(max.iter)) {
      bulkem_abort(c("{.arg max.iter} applies only with {.arg target}.",
                     i = "Give {.code target = list(ess = 400, rhat = 1.01)} to sample until the draws meet it, or set {.arg iter}."),
                   call = call)
    }
    return(NULL)
  }
  if (!is.list(target) || length(target) == 0 || is.null(names(target))) {
    bulkem_abort(c("{.arg target} must be a list with {.field ess} and/or {.field rhat}.",
                   x = "You supplied {describe_value(target)}."), call = call)
  }
  unknown <- setdiff(names(target), c("ess", "rhat"))
  if (length(unknown) > 0) {
    bulkem_abort(c("{.arg target} must be a list with {.field ess} and/or {.field rhat}.",
                   x = "Unknown field{?s}: {.field {unknown}}."), call = call)
  }
  out <- utils::modifyList(list(ess = 400, rhat = 1.01), target)
  if (!(is.numeric(out$ess) && length(out$ess) == 1 && is.finite(out$ess) && out$ess > 0)) {
    bulkem_abort(c("{.arg target}'s {.field ess} must be a positive number.",
                   x = "You supplied {describe_value(out$ess)}."), call = call)
  }
  if (!(is.numeric(out$rhat) && length(out$rhat) == 1 && is.finite(out$rhat) && out$rhat > 1)) {
    bulkem_abort(c("{.arg target}'s {.field rhat} must be a number above 1.",
                   x = "You supplied {describe_value(out$rhat)}."), call = call)
  }
  if (parallel == "future") {
    bulkem_abort(c("{.arg target} needs {.code parallel = \"none\"}.",
                   x = "Its checks look at every chain between blocks of sweeps; future workers run their chains apart."),
                 call = call)
  }
  if ((iter - warmup) %/% thin < 4) {
    bulkem_abort(c("With {.arg target}, {.arg iter} must leave at least 4 kept draws per chain before the first check.",
                   x = "{.code iter = {iter}}, {.code warmup = {warmup}}, {.code thin = {thin}} keep {(iter - warmup) %/% thin}."),
                 call = call)
  }
  max.iter <- if (is.null(max.iter)) 10 * iter else check_count(max.iter, "max.iter", call = call)
  if (max.iter < iter) {
    bulkem_abort(c("{.arg max.iter} must be at least {.arg iter} ({iter}).",
                   x = "You supplied {.code max.iter = {max.iter}}."), call = call)
  }
  c(out, list(max.iter = max.iter))
}

# The warning of a run that stopped at max.iter short of its target.
target_problem <- function(target, outcome, pars) {
  worst <- pars[outcome$worst]
  list(
    kind = "target",
    head = sprintf("The draws did not reach the target (bulk and tail ESS >= %s, R-hat <= %s) in max.iter = %s sweeps per chain.",
                   format(target$ess), format(target$rhat), format(target$max.iter)),
    detail = paste0("Farthest from it: ", paste0(worst, " (R-hat ", sprintf("%.3f", outcome$rhat), ", bulk ESS ",
                                                 round(outcome$ess_bulk), ", tail ESS ", round(outcome$ess_tail), ")",
                                                 collapse = ", "), "."),
    hint = "Raise max.iter, or look at these parameters' traces with plot(fit, pars = ...)."
  )
}

# One chunk of chains of hbglm(), here or on a future worker.
hbglm_chunk <- function(part, idx, s) {
  ex <- chunk_exec(s)
  hbglm_fit_(s$y, s$x, s$z, s$offset, s$trials, s$sizes, s$factors, s$categories, s$k, s$p, s$family, s$prior, s$iter, s$warmup,
             length(idx), s$thin, s$slice$w, s$slice$m, s$slice$adapt, s$seed,
             idx[1] - 1L, s$target, ex$threads, ex$backend)
}

# The core's results of chunks of chains, as one result over all chains.
bind_chain_parts <- function(parts, chunks) {
  if (length(parts) == 1) return(parts[[1]])
  first <- parts[[1]]
  chains <- sum(lengths(chunks))
  draws <- array(0, dim = c(first$kept, chains, first$n_params))
  for (k in seq_along(parts)) {
    draws[, chunks[[k]], ] <- array(parts[[k]]$draws, dim = c(first$kept, length(chunks[[k]]), first$n_params))
  }
  total <- function(field) sum(vapply(parts, `[[`, numeric(1), field))
  utils::modifyList(first, list(
    draws = as.vector(draws), chains = chains,
    backend = paste(unique(vapply(parts, `[[`, character(1), "backend")), collapse = ", "),
    seconds = max(vapply(parts, `[[`, numeric(1), "seconds")),
    sweeps = total("sweeps"), beta_evals = total("beta_evals"), gamma_evals = total("gamma_evals"),
    scale_evals = total("scale_evals"), stuck = total("stuck"),
    stuck_by = Reduce(`+`, lapply(parts, `[[`, "stuck_by")),
    # (a target's diagnostics come from one part holding every chain)
    diagnostics = NULL
  ))
}

# An ordinal response: an ordered factor (or a factor, in its levels'
# order) or whole numbers 1, 2, ... (categories 1..max), as categories
# 1..C with their labels; with `categories` (new data for a fit), matched
# to the fit's labels.
hbglm_ordinal_response <- function(y, call, categories = NULL) {
  if (is.matrix(y) || !(is.factor(y) || is.numeric(y))) {
    bulkem_abort(c("The response must be an ordered factor or category numbers 1, 2, ... for {.code family = \"ordinal\"}.",
                   x = "It is {describe_value(y)}."), call = call)
  }
  if (!is.null(categories)) {
    code <- match(as.character(y), categories)
    bad <- which(is.na(code) & !is.na(y))
    if (length(bad) > 0) {
      bulkem_abort(c("The response must be one of the fit's categories.",
                     x = "Row {bad[1]} is {.val {as.character(y[bad[1]])}}; the categories are {.val {categories}}."), call = call)
    }
    return(list(y = as.double(code), trials = NULL, categories = categories))
  }
  if (is.factor(y)) {
    if (nlevels(y) < 2) {
      bulkem_abort(c("The response must have at least two categories for {.code family = \"ordinal\"}.",
                     x = "The factor has {nlevels(y)} level{?s}."), call = call)
    }
    return(list(y = as.double(as.integer(y)), trials = NULL, categories = levels(y)))
  }
  bad <- which(!is.na(y) & (!is.finite(y) | y < 1 | y != round(y) | y > 1e6))
  if (length(bad) > 0) {
    bulkem_abort(c("The response must be an ordered factor or category numbers 1, 2, ... for {.code family = \"ordinal\"}.",
                   x = "Row {bad[1]} is {describe_value(y[bad[1]])}."), call = call)
  }
  C <- max(c(2, y), na.rm = TRUE)
  list(y = as.double(y), trials = NULL, categories = as.character(seq_len(C)))
}
