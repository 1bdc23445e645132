#' Fit mixture models to many datasets at once
#'
#' Fits a mixture of `num.components` inverse Gaussian, Normal, gamma,
#' lognormal, Poisson or exponential distributions by the EM algorithm to every dataset, from `random.inits`
#' random starts each, and keeps the start with the highest log-likelihood;
#' given several numbers of components, fits each and keeps, per dataset,
#' the one with the best `criterion`.
#' All (dataset, start) pairs run in parallel: on a CUDA GPU (the whole EM of
#' each start in one kernel; `bulkem_backends()` lists the devices, and
#' several are used together) or on every CPU core.
#'
#' **Random starts.** Two kinds of start, each good where the other is
#' weak. *k-means++* starts (Arthur and Vassilvitskii, 2007) seed the means
#' over the data: the first is a random observation, each next one is drawn
#' with probability proportional to its squared distance from the nearest
#' mean so far (on the log scale for the inverse Gaussian; from a random
#' sample of 256 observations, with replacement, for larger datasets); every
#' component starts with the scale of the whole data and weight 1/M, and EM
#' narrows them. A small, distant component (3 of 82 galaxies) is seeded by
#' most such starts. *Subset* starts are the 2015 package's: each component
#' from the maximum-likelihood estimate of 3 distinct random observations,
#' equal weights (a component whose draw gives invalid values, e.g. tied
#' observations, is redrawn, up to 100 times); they find overlapping
#' components of different spreads (a narrow one inside a wide one) that
#' k-means++ starts often miss. `init.method = "mixed"` (the default)
#' alternates them (starts 1, 3, 5, ... by k-means++, 2, 4, ... by subsets);
#' `"kmeans++"` and `"subsets"` use one kind only. Every (dataset, start)
#' pair has its own random stream keyed by `seed`, so results do not depend
#' on the number of threads or the backend, and the fit of each number of
#' components is the one `num.components` = that number alone gives.
#'
#' **Choosing the number of components.** With several values,
#' `num.components = 1:5`, every number is fitted to every dataset (all
#' starts, one pass over the backend), and each dataset keeps the fit with
#' the smallest `criterion`: `"BIC"` \eqn{-2\log L + p \log n}{-2 logL + p
#' log n}, `"AIC"` \eqn{-2 \log L + 2p}{-2 logL + 2p}, or `"ICL"` (BIC plus
#' twice the classification entropy, \eqn{-2\sum_i \log \max_j
#' z_{ij}}{-2 sum_i log max_j z_ij}, as in mclust), with \eqn{p = 3M - 1}
#' free parameters (\eqn{2M - 1} for the one-parameter Poisson and
#' exponential families). All three are "smaller is better", as [stats::BIC()]
#' (mclust reports BIC with the opposite sign). Values within 1e-9
#' (relative) of the best are ties, won by the fewer components. The whole
#' table (datasets x numbers of components) is kept: see [criteria()].
#'
#' **Iterations.** The E-step works in log space (log-sum-exp); the M-step is
#' exact (for the inverse Gaussian the shape update uses the new mean). EM
#' stops when the log-likelihood changes by less than `epsilon`
#' (`status = "converged"`) or after `max.iters` iterations
#' (`status = "max_iters"`). A start whose components become empty or
#' degenerate fails; a dataset whose starts all fail, or that is too small or
#' constant to fit, gets `status = "failed"` and a `message` saying why,
#' without affecting the other datasets.
#'
#' **Errors and limits.** Errors are conditions of class `bulkem_error` and
#' a subclass naming their kind (see [bulkem_error]); these are raised
#' before any work starts, as `bulkem_error_input` unless said otherwise:
#' * Data must be finite (and positive for the inverse Gaussian), and within
#'   the range the EM's sufficient statistics can hold in double precision:
#'   inverse Gaussian values between \eqn{2^{-511}} and \eqn{2^{511}}
#'   (about 1.5e-154 and 6.7e153: the E-step squares the component means,
#'   which are weighted means of the data); for the Normal family a finite
#'   sum, a sum of squared deviations from the mean of at most half the
#'   largest double, and (unless all values are equal) a mean squared
#'   deviation of at least about 2.2e-298. Data outside are an input error
#'   that says which value overflows or underflows; rescale them (both
#'   families are closed under scaling: `mu` and `lambda` or `sigma` scale
#'   with the data).
#' * `num.components` = M needs at least one dataset of \eqn{\max(3, 3M -
#'   1)}{max(3, 3M - 1)} observations, for the largest M given (smaller
#'   datasets get status `"failed"` for that M); `random.inits` is at most
#'   \eqn{2^{24}}.
#' * An argument bulkem does not have is an error; `k` (mixtools' name) is
#'   an error that points to `num.components`.
#'
#' **Warnings.** Once per call, a warning of class
#' `bulkem_warning_convergence` counts the datasets whose kept fit stopped
#' at `max.iters` before converging, and those whose kept fit converged to
#' a log-likelihood that no other of several starts reached (within 1e-5
#' relative, at least 0.01): a sign that more starts could find a better
#' optimum.
#' * The memory of the fit (every start's log-likelihood, the parameters of
#'   every dataset, the posteriors and traces when kept, working copies of
#'   the data, and the R copies of the results) is estimated from these sizes
#'   and compared with the memory available (the system's, the container's
#'   or job's allotment, or the environment variable `BULKEM_MEMORY_LIMIT`
#'   in bytes); a fit that needs more is a `bulkem_error_memory` naming the
#'   argument that drives it, e.g. `random.inits = 16777216` for 40,000
#'   datasets.
#'
#' Long calls can be interrupted (Esc / Ctrl-C), which raises R's own
#' `interrupt` condition within a fraction of a second, also inside one
#' large dataset (the CPU looks for it before every EM iteration of every
#' start, the GPU between launches). They report progress through
#' \pkg{progressr} when it is installed (wrap the call in
#' `progressr::with_progress()`), also from future workers (per chunk).
#' With `parallel = "future"` an interrupt stops the waiting, not the
#' chunks already running on workers.
#'
#' @param datasets A list of numeric vectors (one per dataset; e.g.
#'   `split(df$y, df$group)`), a single numeric vector, or a numeric matrix
#'   (one dataset per column). Integer values are accepted. For a data frame
#'   with a grouping column use the formula method, `bulkem(y ~ group, data
#'   = df)`.
#'
#'   A dataset may also be a [survival::Surv()] object (alone, or as an
#'   element of the list): right-censored (`Surv(time, event)`, e.g. a
#'   reaction time cut off at a time-out), left-censored, or
#'   interval-censored (`Surv(left, right, type = "interval2")`, `NA` for
#'   an open end). A censored observation counts by the probability of its
#'   interval, \eqn{P(l < X \le u)}{P(l < X <= u)}, in the log-likelihood;
#'   EM treats its value as missing (the E-step uses the component's
#'   distribution on the interval, the M-step is unchanged), so the
#'   log-likelihood never decreases. Binned data (a histogram) are
#'   interval-censored data with the counts as `weights`: one observation
#'   `Surv(lower, upper, type = "interval2")` per bin. Censored data fit
#'   every family, on the CPU and the GPU (a censored count in
#'   \eqn{(l, u]}{(l, u]} is one of the whole numbers there: right-censored
#'   at \eqn{c}{c} means more than \eqn{c}{c}); each fit keeps the number of censored observations as
#'   `censored`. With `keep.posterior = TRUE` a censored observation's
#'   posterior is each component's share of its interval's probability,
#'   and ICL counts it so; [as.mixEM()] and the bootstrap functions refuse
#'   censored data.
#' @param num.components Number of mixture components M (at least 1, and at
#'   most what the largest dataset can fit: see Details), or several to
#'   choose from by `criterion`, e.g. `1:5`.
#' @param criterion How a number of components is chosen when
#'   `num.components` has several: `"BIC"` (default), `"ICL"` or `"AIC"`;
#'   see Details.
#' @param init.method How random starts are drawn: `"mixed"` (default),
#'   `"kmeans++"` or `"subsets"` (the 2015 package's); see Details.
#' @param family Component distribution, one of (each with its parameters,
#'   named as R names them):
#'   * `"invgauss"` (default): inverse Gaussian with mean `mu` and shape
#'     `lambda` (the 2015 package's names); data must be positive.
#'   * `"normal"`: mean `mu`, standard deviation `sigma`, as in [dnorm()].
#'   * `"gamma"`: `shape` and `rate`, as in [dgamma()] (mean `shape /
#'     rate`); data must be positive. The M-step solves the shape's digamma
#'     equation by safeguarded Newton, to full precision.
#'   * `"lognormal"`: `meanlog` and `sdlog`, as in [dlnorm()]; data must be
#'     positive. This is exactly the Normal fit on `log(x)` (same starts,
#'     same parameters), with the log-likelihood of `x` (that of `log(x)`
#'     minus `sum(log(x))`).
#'   * `"poisson"`: rate `lambda`, as in [dpois()]; data must be counts
#'     (whole numbers, at least 0).
#'   * `"exponential"`: `rate`, as in [dexp()]; data must be at least 0.
#'
#'   Here `lambda` means the inverse Gaussian shape or the Poisson rate,
#'   depending on the family. Components are ordered by their first
#'   parameter (`mu`, `shape`, `meanlog`, `lambda` or `rate`).
#' @param max.iters Maximum number of EM iterations per start.
#' @param random.inits Number of random starts per dataset (at most
#'   \eqn{2^{24}}). The default, 20, finds the optimum of `MASS::galaxies`
#'   with 4 Normal components; see `vignette("bulkem")` for its cost.
#' @param use.gpu `NA` (default): a CUDA GPU when one is usable and the job
#'   is large enough to gain from it (at least 2e7 observation-iterations,
#'   e.g. 100 datasets x 2,000 observations x 1 start x 100 iterations;
#'   smaller jobs finish sooner on the CPU), otherwise the CPU, with a
#'   one-time message when no GPU is usable; `TRUE`: a GPU or an error saying
#'   why not; `FALSE`: the CPU. The GPU kernels fit up to 8 components.
#' @param epsilon Convergence threshold on the change of the log-likelihood
#'   between iterations. `0` runs exactly `max.iters` iterations.
#' @param verbose If `TRUE` (or option `bulkem.verbose` is `TRUE`), report
#'   the backend, the time taken and a count of statuses.
#' @param inits Explicit starting values instead of random starts:
#'   `alpha` and the family's parameters, e.g. `list(alpha = , mu = , lambda
#'   = )` (inverse Gaussian), `list(alpha = , mu = , sigma = )` (Normal),
#'   `list(alpha = , shape = , rate = )` (gamma), `list(alpha = , meanlog =
#'   , sdlog = )` (lognormal), `list(alpha = , lambda = )` (Poisson) or
#'   `list(alpha = , rate = )` (exponential), each of length
#'   `num.components`, used for every dataset; or a list of such
#'   lists, one per dataset.
#' @param seed A whole number keying the random starts. `NULL` draws one from
#'   R's random number generator, so [set.seed()] makes a call reproducible.
#' @param keep.posterior If `TRUE`, keep each dataset's matrix of posterior
#'   component probabilities (n x M) as `posterior`, and the log-likelihood
#'   after each iteration of the kept start as `loglik_trace` (for
#'   `plot(fit, which = "loglik")`).
#' @param parallel `"none"`: run in this R session (on every core or the
#'   GPUs of this machine). `"future"`: split the datasets into chunks and
#'   run them on the workers of the current [future::plan()] (other R
#'   processes here, other machines, a scheduler's jobs), one future per
#'   chunk ([future::future()]); each worker runs the core on its own
#'   backend (`use.gpu` is resolved there, so a worker uses its own GPUs) with
#'   its share of its machine's cores. The result is identical to
#'   `parallel = "none"` with the same `seed` (on the same backend). Needs
#'   the \pkg{future} package, and bulkem installed
#'   where the workers can load it; see `vignette("bulkem")`.
#' @param resume `NULL`, or [bulkem_partial()] after a call with
#'   `parallel = "future"` that lost workers (a cluster job cancelled or
#'   out of time or memory): the same call with `resume = bulkem_partial()`
#'   fits only the datasets of the lost chunks and returns the whole result,
#'   identical to an uninterrupted call (on the same backend). It must have
#'   the same datasets and settings; `seed = NULL` takes the partial's.
#'   See `vignette("cluster")`.
#' @param precision `"double"` (default): float64 throughout. `"mixed"`:
#'   each E-step computes the observations' weights in float32 (the
#'   exponentials, their sum and its reciprocal, and their sums over groups
#'   of 16 observations), from float64 log-densities, and adds the groups'
#'   sums, runs the M-step and reports the log-likelihood in float64 (a
#'   final float64 E-step). On a GPU the E-step is the work, and float32 is
#'   faster there (1.9x for a whole fit on an H200, see `BENCHMARKS.md`); on the CPU it is the
#'   same arithmetic, for reference, and not faster. The weights then carry
#'   float32 rounding (about 1e-7 relative), which puts noise of about
#'   `4e-8 * sqrt(n)` into each iteration's log-likelihood; once the change
#'   between iterations falls below `1e-6 * sqrt(n)`, a start whose
#'   `epsilon` is smaller (but not 0) goes on in float64, so it stops by the
#'   float64 rule. The kept log-likelihood then matches `"double"` to about
#'   1e-7 relative or better (tested on every family); a converged fit's
#'   parameters to about 1e-4 relative, and where the likelihood is flat
#'   (overlapping components) less closely, as between any two starts that
#'   stop short of the optimum. Safe for choosing starts, K and for
#'   log-likelihoods; use `"double"` for parameters reported to more than 4
#'   digits of a fit stopped at `max.iters`, or `epsilon = 0` fits whose
#'   parameters you compare closely. Datasets of more than 6,000
#'   observations are fitted in float64 either way (the GPU spreads their
#'   E-step over many blocks, which does not use it). Fits with `weights`
#'   are float64 too.
#' @param weights `NULL` (default: every observation counts once), or
#'   observation weights: a list of non-negative numeric vectors parallel to
#'   `datasets`, each as long as its dataset (one vector for a single
#'   dataset). An observation of weight w counts w times in the
#'   log-likelihood, \eqn{\sum_i w_i \log f(x_i)}{sum_i w_i log f(x_i)}, and
#'   in the E- and M-steps, so integer weights give the fit of the data with
#'   each observation repeated that many times (frequency weights; e.g. the
#'   counts of a table of distinct values), and observations of weight 0 are
#'   left out. The mixing proportions are shares of the total weight, and
#'   `nobs()`, `logLik()`'s `nobs`, BIC and ICL use the sum of the weights
#'   as the number of observations (each fit keeps it as `nobs`). Random
#'   starts draw from the observations regardless of their weights.
#'   [as.mixEM()] refuses weighted fits (mixtools has no weights). In the
#'   formula method, a numeric vector of one weight per row of `data`.
#' @param equal `NULL` (default), or the name of the family's second
#'   parameter (`"sigma"` for the Normal, `"lambda"` for the inverse
#'   Gaussian, `"rate"` for the gamma, `"sdlog"` for the lognormal): one
#'   value of it shared by every component, as mclust's equal-variance
#'   ("E") models. Works with several `num.components`.
#' @param fixed `NULL` (default), or parameters held at given values: a
#'   named list with elements among `alpha` and the family's parameters,
#'   each `NULL` or a vector of one value per component, `NA` where the
#'   parameter is free (e.g. `list(mu = c(1, NA))`: the first component's
#'   mean is 1). Held weights must leave the free ones a positive share.
#'   With `fixed`, give one `num.components`; the components keep the order
#'   of `fixed` instead of the order by the first parameter.
#'
#'   With `equal` or `fixed`, each M-step is an ECM step (Meng and Rubin
#'   1993): conditional maximisations that keep the log-likelihood from
#'   decreasing. `logLik()`'s `df` (and BIC, ICL, AIC) counts only the free
#'   parameters (each fit keeps it as `df`). Constrained fits run on the
#'   CPU and the GPU; [bootstrap_lrt()] and [bootstrap_se()] refuse them.
#' @param chunk.size Datasets per chunk. With `parallel = "future"` each
#'   chunk is one future, sent only its own datasets; the default makes about
#'   4 chunks per worker, fewer when a chunk would do less than 2e8
#'   observation-iterations (a future costs tens of milliseconds), more when
#'   a chunk would hold over 128 MiB of data.
#'   With `parallel = "none"`, datasets per call of the core (progress is
#'   reported between calls); the default is one call, or about 50 with
#'   \pkg{progressr} reporting.
#'
#' @return An object of class `bulkem_fits`: a list with one element per
#'   dataset (named as `datasets`), each of class `"bulkem_fit"` (not
#'   mixtools' `"mixEM"`, whose fields mean other things: convert with
#'   [as.mixEM()]) with the fields
#'   \describe{
#'   \item{`alpha`, `mu`, `lambda` (or the family's parameters: see
#'     `family`)}{fitted weights and component parameters, e.g. means and
#'     shapes for the inverse Gaussian, `shape` and `rate` for the gamma
#'     family, `lambda` alone for the Poisson; components ordered by
#'     increasing first parameter; `NA` when the fit failed. Their length is
#'     the dataset's (chosen) number of components.}
#'   \item{`init_alpha`, `init_mu`, `init_lambda` (`init_` and the family's
#'     parameter names)}{the starting values of the kept start, in the same
#'     component order.}
#'   \item{`loglik`}{log-likelihood of the fitted parameters.}
#'   \item{`num_iterations`}{EM iterations run by the kept start.}
#'   \item{`fit_success`}{`TRUE` when the parameters are a valid fit
#'     (`status` `"converged"` or `"max_iters"`).}
#'   \item{`status`}{`"converged"`, `"max_iters"` or `"failed"`.}
#'   \item{`message`}{why the fit failed, or `NA`.}
#'   \item{`n`, `family`, `ft`}{number of observations, the family, and
#'     `"bulkem"`.}
#'   \item{`nobs`}{only with `weights`: the sum of the dataset's weights,
#'     which `nobs()`, `logLik()`, BIC and ICL count as the number of
#'     observations.}
#'   \item{`start_logliks`}{final log-likelihood of every start (`NA` for
#'     failed starts); `best_start` is the index of the kept one.}
#'   \item{`start_diagnostics`}{a named vector: `starts`, `at_best` (starts
#'     whose log-likelihood is within 1e-6 relative of the best), `failed`
#'     (degenerate starts: a component collapsed or emptied, or the
#'     likelihood became non-finite) and `spread` (best minus worst
#'     log-likelihood of the successful starts). `summary()` of the fits
#'     counts the datasets whose best was found by one start only.}
#'   \item{`bootstrap`}{only after [bootstrap_se()]: the bootstrap standard
#'     errors and percentile intervals of the parameters.}
#'   \item{`loglik_trace`, `posterior`}{only with `keep.posterior = TRUE`:
#'     the log-likelihood after each iteration of the kept start, and the
#'     n x M matrix of posterior probabilities.}
#'   }
#'   The list has attributes `backend`, `threads`, `seconds`, `seed`,
#'   `precision`, `family`, `num.components` (the candidates), `criterion` and `criteria`
#'   (the table, read it with [criteria()]);
#'   with `parallel = "future"` also `workers` and `chunks`; `backend` then
#'   lists the backends the workers used and `threads` is the most threads
#'   a worker used.
#' @seealso [criteria()], [as.data.frame.bulkem_fits()],
#'   [predict.bulkem_fit()], [plot.bulkem_fit()], [as.mixEM()],
#'   [rinvgaussmix()], [rgammamix()], [rlnormmix()], [rpoismix()] and
#'   [rexpmix()] to simulate data.
#' @references Dempster, A. P., Laird, N. M. and Rubin, D. B. (1977).
#'   Maximum likelihood from incomplete data via the EM algorithm. *Journal
#'   of the Royal Statistical Society, Series B* 39(1), 1--38.
#'
#'   Howson, the `bulkem` R package (2015): the GPU EM for many inverse
#'   Gaussian mixtures that this package succeeds (same result fields).
#'
#'   Arthur, D. and Vassilvitskii, S. (2007) k-means++: the
#'   advantages of careful seeding. *Proceedings of the 18th ACM-SIAM
#'   Symposium on Discrete Algorithms*, 1027-1035.
#'
#'   Biernacki, C., Celeux, G. and Govaert, G. (2000) Assessing a mixture
#'   model for clustering with the integrated completed likelihood. *IEEE
#'   Transactions on Pattern Analysis and Machine Intelligence* 22, 719-725.
#' @examples
#' set.seed(1)
#' datasets <- replicate(20, rinvgaussmix(500, alpha = c(0.3, 0.7),
#'   mu = c(1, 3), lambda = c(30, 0.2)), simplify = FALSE)
#' fits <- bulkem(datasets, use.gpu = FALSE)
#' fits
#' head(as.data.frame(fits))
#' fits[[1]]
#'
#' # Choose the number of components of each dataset by BIC
#' sel <- bulkem(datasets, num.components = 1:4, use.gpu = FALSE)
#' table(lengths(lapply(sel, `[[`, "alpha")))
#' criteria(sel)
#'
#' # A Normal mixture of one dataset; a data frame by group; a matrix
#' fit <- bulkem(faithful$waiting, family = "normal", use.gpu = FALSE)[[1]]
#' coef(fit)
#' df <- data.frame(y = unlist(datasets[1:3]), g = rep(c("a", "b", "c"), each = 500))
#' bulkem(y ~ g, data = df, use.gpu = FALSE)
#' bulkem(sapply(datasets[1:3], identity), use.gpu = FALSE)
#'
#' # A gamma mixture (shape and rate, as in dgamma())
#' y <- rgammamix(1000, alpha = c(0.4, 0.6), shape = c(2, 20), rate = c(2, 4))
#' gfit <- bulkem(y, family = "gamma", use.gpu = FALSE)[[1]]
#' gfit[c("alpha", "shape", "rate")]
#'
#' # On 2 background R sessions (they load bulkem from this session's library)
#' \donttest{
#' if (requireNamespace("future", quietly = TRUE)) {
#'   future::plan(future::multisession, workers = 2)
#'   fits2 <- bulkem(datasets, use.gpu = FALSE, parallel = "future")
#'   future::plan(future::sequential)
#' }
#' }
#' @param ... For the generic and the formula method: the arguments of the
#'   default method.
#' @export
bulkem <- function(datasets, ...) {
  # mixtools users type `k`; it would partially match keep.posterior.
  given <- names(match.call(expand.dots = FALSE)$...)
  if (any(c("k", "K") %in% given)) {
    bulkem_abort(c(
      "bulkem() has no argument {.arg {intersect(c('k', 'K'), given)[1]}}: the number of components is {.arg num.components}.",
      i = "Use e.g. {.code bulkem(datasets, num.components = 3)}, or {.code num.components = 1:5} to choose it by BIC."
    ))
  }
  UseMethod("bulkem")
}

#' @rdname bulkem
#' @export
bulkem.default <- function(datasets, num.components = 2, family = "invgauss",
                           max.iters = 100, random.inits = 20, use.gpu = NA, epsilon = 1e-6,
                           verbose = FALSE, inits = NULL, seed = NULL, keep.posterior = FALSE,
                           parallel = c("none", "future"), chunk.size = NULL,
                           criterion = c("BIC", "ICL", "AIC"), init.method = c("mixed", "kmeans++", "subsets"),
                           resume = NULL, precision = c("double", "mixed"), weights = NULL,
                           equal = NULL, fixed = NULL, ...) {
  call <- environment()
  check_no_dots(list(...), "bulkem", "bulkem::bulkem", call)
  family <- match_arg(family, em_family_names(), "family", call)
  parallel <- match_arg(parallel, c("none", "future"), "parallel", call)
  criterion <- match_arg(criterion, c("BIC", "ICL", "AIC"), "criterion", call)
  init.method <- match_arg(init.method, c("mixed", "kmeans++", "subsets"), "init.method", call)
  precision <- match_arg(precision, c("double", "mixed"), "precision", call)
  censoring <- NULL
  if (has_surv(datasets)) {
    sv <- surv_datasets(datasets, call, counts = em_family(family)$discrete)
    datasets <- sv$datasets
    censoring <- sv$censoring
  }
  datasets <- check_datasets(datasets, call, values = FALSE)
  weights <- check_obs_weights(weights, datasets, call)
  Ks <- check_components(num.components, call)
  check_components_fit(datasets, max(Ks), family, call)
  max.iters <- check_count(max.iters, "max.iters", call = call)
  random.inits <- check_count(random.inits, "random.inits", call = call)
  epsilon <- check_number(epsilon, "epsilon", min = 0, call = call)
  verbose <- check_flag(verbose, "verbose", call = call) || isTRUE(getOption("bulkem.verbose"))
  keep.posterior <- check_flag(keep.posterior, "keep.posterior", call = call)
  if (!is.null(inits) && length(Ks) > 1) {
    bulkem_abort(c(
      "{.arg inits} are starting values for one number of components, not for {.arg num.components} = {deparse(Ks)}.",
      i = "Give one value of {.arg num.components}, or leave {.arg inits} out to use random starts."
    ), call = call)
  }
  inits <- check_inits(inits, Ks[1], family, length(datasets), call)
  equal <- check_equal(equal, family, call)
  fixed <- check_fixed(fixed, Ks, family, call)
  seed <- check_seed(resume_seed(seed, resume), call)
  if (!is.null(chunk.size)) chunk.size <- check_count(chunk.size, "chunk.size", call = call)
  check_flag(use.gpu, "use.gpu", allow_na = TRUE, call = call)
  D <- length(datasets)
  settings <- list(family = family, Ks = Ks, criterion = criterion, max.iters = max.iters,
                   random.inits = random.inits, init.method = init.method,
                   epsilon = epsilon, seed = seed, keep.posterior = keep.posterior,
                   given_inits = !is.null(inits), precision = precision, weighted = !is.null(weights),
                   equal = equal, fixed = fixed)
  censored <- !is.null(censoring)
  r <- resumable("bulkem", "datasets", settings, list(data = numbers_fingerprint(datasets), inits = inits,
                                                      weights = if (!is.null(weights)) numbers_fingerprint(weights),
                                                      censoring = if (censored) numbers_fingerprint(lapply(censoring, unlist))))
  if (!is.null(resume)) resume <- check_resume(resume, r, call)
  settings <- c(settings, exec_settings(parallel, use.gpu, call))
  if (parallel == "none") {
    # The whole job picks the backend; a worker picks by its chunk.
    settings$backend <- backend_choice_("em", settings$backend, c(em_work(datasets, settings), max(Ks)))
    backend <- settings$backend
    threads <- settings$threads
  } else {
    workers <- future::nbrOfWorkers()
  }
  progress <- make_progress(D)
  size <- if (!is.null(chunk.size)) {
    chunk.size
  } else if (parallel == "future") {
    future_chunk_size(D, bytes = 8 * sum(as.double(lengths(datasets))),
                      work = em_work(datasets, settings), min_work = MIN_CHUNK_WORK, workers = workers)
  } else if (is.null(progress)) {
    D
  } else {
    progress_chunk_size(D, backend, threads)
  }
  # A resumed call keeps the chunks of the call it completes.
  chunks <- if (is.null(resume)) chunk_indices(D, size) else resume$chunks

  started <- proc.time()[["elapsed"]]
  parts <- map_chunks(
    chunks, em_chunk,
    slice = function(idx) list(datasets = datasets[idx], inits = inits_rows(inits, idx), weights = weights[idx],
                               censoring = censoring[idx]),
    args = settings, parallel = parallel, progress = progress, what = "datasets",
    # In this session the core's message names the dataset; the chunking is
    # ours, not the user's, so only a worker's chunk is worth naming.
    on_error = function(msg, where) {
      core_error(msg, call, "bulkem", if (parallel == "future") where)
    },
    on_lost = function(results, lost) lose_chunks(r, chunks, results, lost, call),
    done = resume$results,
    call = call
  )
  raw <- bind_chunks(parts)
  seconds <- proc.time()[["elapsed"]] - started
  fits <- assemble_fits(raw, names(datasets), family, keep.posterior, weighted = !is.null(weights),
                        constraints = constraints_of(equal, fixed, family),
                        censored = if (censored) lengths(lapply(censoring, `[[`, "index")))
  backend <- paste(unique(raw$backend), collapse = ", ")
  threads <- max(raw$threads)
  table <- matrix(raw$criteria, nrow = D, ncol = length(Ks), byrow = TRUE,
                  dimnames = list(names(datasets), as.character(Ks)))
  table[is.nan(table)] <- NA_real_
  fits <- structure(fits, class = "bulkem_fits", backend = backend, threads = threads,
                    seconds = seconds, seed = seed, family = family, num.components = Ks,
                    criterion = criterion, criteria = table, precision = precision)
  if (parallel == "future") {
    attr(fits, "workers") <- workers
    attr(fits, "chunks") <- length(chunks)
  }
  if (verbose) {
    status <- table(factor(raw$status, c("converged", "max_iters", "failed")))
    chosen <- table(factor(raw$components, Ks))
    cli::cli_inform(c(
      i = paste0(
        "bulkem: {length(fits)} dataset{?s} x {length(Ks)} number{?s} of components x {random.inits} start{?s} on {backend} ({threads} thread{?s}",
        if (parallel == "future") " per worker, {workers} future worker{?s}, {length(chunks)} chunks",
        ") in {format(seconds, digits = 3)} s."
      ),
      " " = "{status[['converged']]} converged, {status[['max_iters']]} hit max.iters, {status[['failed']]} failed.",
      " " = if (length(Ks) > 1) paste0("Chosen by ", criterion, ": ", paste0("M = ", names(chosen), ": ", chosen, collapse = ", "), ".")
    ))
  }
  warn_convergence(raw, max.iters, if (settings$given_inits) 1L else random.inits)
  fits
}

#' @rdname bulkem
#' @param formula For the formula method: `y ~ group` (or `y ~ g1 + g2`,
#'   one dataset per combination of the grouping variables; `y ~ 1`, one
#'   dataset), with `y` a numeric variable and the groups plain variables of
#'   `data` (factors, characters or numbers), not expressions.
#' @param data A data frame holding the variables of `formula`.
#' @export
bulkem.formula <- function(formula, data, weights = NULL, ...) {
  call <- environment()
  if (length(formula) != 3) {
    bulkem_abort("{.arg formula} must have a response: {.code y ~ group}.", call = call)
  }
  if (missing(data)) data <- environment(formula)
  terms <- stats::terms(formula, data = if (is.data.frame(data)) data)
  vars <- as.list(attr(terms, "variables"))[-1]
  groups <- vars[-1]
  not_plain <- !vapply(groups, is.name, logical(1))
  if (any(not_plain)) {
    bulkem_abort(c(
      "The right-hand side of {.arg formula} must name grouping variables, not expressions.",
      x = "{.code {deparse(groups[[which(not_plain)[1]]])}} is an expression.",
      i = "Compute it as a column of {.arg data} first."
    ), call = call)
  }
  frame <- stats::model.frame(formula, data, na.action = stats::na.pass)
  y <- stats::model.response(frame)
  if (!is.numeric(y) || !is.null(dim(y))) {
    bulkem_abort(c("The response of {.arg formula} must be a numeric variable.",
                   x = "It is {describe_value(y)}."), call = call)
  }
  bad <- which(is.na(y) | (if (ncol(frame) > 1) !stats::complete.cases(frame[-1]) else FALSE))
  if (length(bad)) {
    bulkem_abort(c(
      "The variables of {.arg formula} must not contain missing values.",
      x = "Row {bad[1]} of {.arg data} has one.",
      i = "Drop such rows first, e.g. {.code data = na.omit(data)}."
    ), call = call)
  }
  if (!is.null(weights) && (!is.numeric(weights) || !is.null(dim(weights)) || length(weights) != length(y))) {
    bulkem_abort(c(
      "In the formula method, {.arg weights} must be a numeric vector with one weight per row of {.arg data} ({length(y)}).",
      x = "You supplied {describe_value(weights)}."
    ), call = call)
  }
  by_group <- function(v) {
    if (ncol(frame) == 1) list(as.vector(v)) else split(as.vector(v), interaction(frame[-1], drop = TRUE, lex.order = TRUE, sep = ":"))
  }
  datasets <- by_group(y)
  if (!is.null(weights)) weights <- by_group(weights)
  bulkem.default(datasets, weights = weights, ...)
}

#' @rdname bulkem
#' @export
bulkem.data.frame <- function(datasets, ...) {
  # bulkem(y ~ g, data = df): `data` partially matches `datasets`, so the
  # data frame arrives here with the formula first in `...`.
  dots <- list(...)
  tags <- if (is.null(names(dots))) rep("", length(dots)) else names(dots)
  at <- which(vapply(dots, inherits, logical(1), "formula") & tags %in% c("", "formula"))
  if (length(at)) {
    return(do.call(bulkem.formula, c(list(dots[[at[1]]], data = datasets), dots[-at[1]])))
  }
  bulkem_abort(c(
    "{.arg datasets} must be a list of numeric vectors, a numeric vector or matrix, not a data frame.",
    i = "For a value column {.var y} and a grouping column {.var group}, use {.code bulkem(y ~ group, data = df)} or {.code bulkem(split(df$y, df$group))}."
  ))
}

# Warn once per call about the datasets whose result may not be the best
# fit: stopped at max.iters, or converged to a best log-likelihood that no
# other start reached (within 1e-5 relative, at least 0.01: distinct optima
# differ more). Starts stopped at max.iters are counted by the first.
warn_convergence <- function(raw, max.iters, starts) {
  D <- length(raw$loglik)
  stopped <- sum(raw$status == "max_iters")
  lonely <- 0
  if (starts > 1) {
    ll <- matrix(raw$start_logliks, nrow = D, byrow = TRUE)
    best <- raw$loglik
    near <- rowSums(ll >= best - pmax(1e-2, 1e-5 * abs(best)), na.rm = TRUE)
    lonely <- sum(raw$status == "converged" & near == 1)
  }
  if (stopped == 0 && lonely == 0) return(invisible())
  of <- function(k) paste0(k, " of ", D, " dataset", if (D == 1) "" else "s")
  cli::cli_warn(c(
    "Some fits may not be the best the data allow.",
    "*" = if (stopped > 0) paste0(of(stopped), " stopped at max.iters = ", max.iters,
                                  " before converging (status \"max_iters\"); raise {.arg max.iters}."),
    "*" = if (lonely > 0) paste0(of(lonely), " reached the best log-likelihood from only one of ", starts,
                                 " starts; more starts ({.arg random.inits}) may find a better optimum.")
  ), class = c("bulkem_warning_convergence", "bulkem_warning"))
}

match_arg <- function(x, choices, arg, call) {
  if (identical(x, choices)) return(choices[1])
  if (!is.character(x) || length(x) != 1 || !(x %in% choices)) {
    bulkem_abort(c(
      "{.arg {arg}} must be one of {.or {.val {choices}}}.",
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  x
}

# A list of double vectors. Values are checked by the core (finite, positive
# for the inverse Gaussian), which reports dataset, position and value.
# `values = FALSE` leaves missing values to the core, whose validation of
# every value (on all threads) names the dataset and position as this does:
# for 10^7 values R's serial anyNA() took 11 ms, most of R's share of a GPU fit.
check_datasets <- function(datasets, call, values = TRUE) {
  if (is.numeric(datasets) && is.matrix(datasets)) {
    # One dataset per column.
    datasets <- stats::setNames(lapply(seq_len(ncol(datasets)), function(j) datasets[, j]), colnames(datasets))
  }
  if (is.numeric(datasets) && is.null(dim(datasets))) datasets <- list(datasets)
  if (!is.list(datasets) || is.data.frame(datasets)) {
    bulkem_abort(c(
      "{.arg datasets} must be a list of numeric vectors, a numeric vector, or a numeric matrix (one dataset per column).",
      x = "You supplied {describe_value(datasets)}."
    ), call = call)
  }
  if (length(datasets) == 0) {
    bulkem_abort("{.arg datasets} must contain at least one dataset.", call = call)
  }
  numeric <- vapply(datasets, function(x) is.numeric(x) && is.null(dim(x)), logical(1))
  if (!all(numeric)) {
    bad <- which(!numeric)[1]
    bulkem_abort(c(
      "Every element of {.arg datasets} must be a numeric vector.",
      x = "Dataset {bad} is {describe_value(datasets[[bad]])}."
    ), call = call)
  }
  # Other values are checked by the core, which reports dataset, position
  # and value (and the glue says NA for R's NA).
  has_na <- if (values) vapply(datasets, anyNA, logical(1)) else FALSE
  if (any(has_na)) {
    bad <- which(has_na)[1]
    bulkem_abort(c(
      "{.arg datasets} must not contain missing values.",
      x = "Dataset {bad} has {.val {NA}} at position {which(is.na(datasets[[bad]]))[1]}."
    ), call = call)
  }
  is_double <- vapply(datasets, is.double, logical(1))
  datasets[!is_double] <- lapply(datasets[!is_double], as.double)
  datasets
}

# NULL, or the observation weights as a list of double vectors parallel to
# `datasets` (one vector serves a single dataset). Their shape is checked
# here; their values (finite, non-negative, not all 0) by the core, on all
# threads: R's vectorised test took 0.29 s for 10^7 weights.
check_obs_weights <- function(weights, datasets, call) {
  if (is.null(weights)) return(NULL)
  if (is.numeric(weights) && is.null(dim(weights))) weights <- list(weights)
  if (!is.list(weights) || is.data.frame(weights) || length(weights) != length(datasets)) {
    bulkem_abort(c(
      "{.arg weights} must be a list of numeric vectors, one per dataset ({length(datasets)}), or one numeric vector for one dataset.",
      x = "You supplied {describe_value(weights)}."
    ), call = call)
  }
  for (d in seq_along(weights)) {
    w <- weights[[d]]
    if (!is.numeric(w) || !is.null(dim(w)) || length(w) != length(datasets[[d]])) {
      bulkem_abort(c(
        "Each element of {.arg weights} must be a numeric vector as long as its dataset.",
        x = "Dataset {d} has {length(datasets[[d]])} observation{?s}; its weights are {describe_value(w)}."
      ), call = call)
    }
  }
  lapply(unname(weights), as.double)
}

# A mixture of M components needs max(3, (1 + p)M - 1) observations (the
# core's em::min_observations(): a random start draws 3, and (1 + p)M - 1
# parameters, p per component).
# A dataset smaller than that gets status "failed"; when no dataset is large
# enough nothing can be fitted, and that is the caller's error (e.g.
# num.components = 1e9), raised before the core sizes any output by M.
check_components_fit <- function(datasets, M, family, call) {
  need <- max(3, family_df(em_family(family), as.double(M)))
  largest <- max(lengths(datasets))
  if (largest < need) {
    bulkem_abort(c(
      if (largest < 3) {
        "{.arg datasets} must hold a dataset large enough to fit: a {M}-component mixture needs at least {format(need, big.mark = ',', scientific = FALSE)} observations."
      } else {
        "{.arg num.components} is too large for the data: a {M}-component mixture needs at least {format(need, big.mark = ',', scientific = FALSE)} observations."
      },
      x = if (length(datasets) == 1) {
        "The dataset has {largest} observation{?s}."
      } else {
        "The largest of the {length(datasets)} datasets has {largest} observation{?s}."
      }
    ), call = call)
  }
}

# The candidate numbers of components, sorted and distinct.
check_components <- function(x, call) {
  ok <- is.numeric(x) && length(x) >= 1 && !anyNA(x) && all(is.finite(x)) &&
    all(x == round(x)) && all(x >= 1) && all(x <= .Machine$integer.max)
  if (!ok) {
    bulkem_abort(c(
      "{.arg num.components} must be whole numbers of at least 1 (one, or several to choose from).",
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  sort(unique(as.integer(x)))
}

# NULL, or list(alpha, mu, scale) of K x M matrices for the core: `mu` is
# the family's first parameter, `scale` its second (NaN for a
# one-parameter family).
check_inits <- function(inits, M, family, n_datasets, call) {
  if (is.null(inits)) return(NULL)
  fam <- em_family(family)
  fields <- c("alpha", fam$params)
  one_set <- function(x) is.list(x) && all(fields %in% names(x))
  sets <- if (one_set(inits)) list(inits) else inits
  if (!is.list(sets) || !all(vapply(sets, one_set, logical(1)))) {
    form <- paste0("list(", paste0(fields, " = ", collapse = ", "), ")")
    bulkem_abort(c(
      "{.arg inits} must be {.code {form}} or a list of those, one per dataset, for the {fam$label} family.",
      x = "You supplied {describe_value(inits)}."
    ), call = call)
  }
  if (!(length(sets) %in% c(1L, n_datasets))) {
    bulkem_abort(c(
      "{.arg inits} must hold one set of starting values or one per dataset ({n_datasets}).",
      x = "It holds {length(sets)}."
    ), call = call)
  }
  field <- function(name) {
    values <- lapply(seq_along(sets), function(k) {
      v <- sets[[k]][[name]]
      if (!is.numeric(v) || length(v) != M || anyNA(v)) {
        bulkem_abort(c(
          "{.code inits${name}} must be a numeric vector of length {.arg num.components} ({M}) without NA.",
          x = "Set {k} has {describe_value(v)}."
        ), call = call)
      }
      as.double(v)
    })
    do.call(rbind, values)
  }
  alpha <- field("alpha")
  list(alpha = alpha, mu = field(fam$first),
       scale = if (is.na(fam$second)) alpha * NaN else field(fam$second))
}

# equal = NULL or the family's second parameter's name -> TRUE/FALSE.
check_equal <- function(equal, family, call) {
  if (is.null(equal)) return(FALSE)
  fam <- em_family(family)
  if (is.na(fam$second)) {
    bulkem_abort(c("{.arg equal} does not apply to the {fam$label} family, which has one parameter per component.",
                   x = "You supplied {describe_value(equal)}."), call = call)
  }
  if (!identical(equal, fam$second)) {
    bulkem_abort(c("{.arg equal} must be {.code NULL} or {.val {fam$second}} (the {fam$label} family's second parameter).",
                   x = "You supplied {describe_value(equal)}."), call = call)
  }
  TRUE
}

# fixed = NULL or list(alpha =, <first> =, <second> =) of one value per
# component (NA: free) -> list(alpha, first, second) for the core, each
# NULL or a double vector (NA free); one number of components only.
check_fixed <- function(fixed, Ks, family, call) {
  if (is.null(fixed)) return(NULL)
  fam <- em_family(family)
  fields <- c("alpha", fam$params)
  if (!is.list(fixed) || is.null(names(fixed)) || any(!nzchar(names(fixed))) || !all(names(fixed) %in% fields)) {
    bulkem_abort(c(
      "{.arg fixed} must be a named list with elements among {.val {fields}} (the {fam$label} family's).",
      x = "You supplied {if (is.list(fixed)) paste0('names ', paste(names(fixed), collapse = ', ')) else describe_value(fixed)}."
    ), call = call)
  }
  if (length(Ks) != 1) {
    bulkem_abort(c("{.arg fixed} holds values of one number of components, not of {.arg num.components} = {deparse(Ks)}.",
                   i = "Give one value of {.arg num.components}."), call = call)
  }
  one <- function(name) {
    v <- fixed[[name]]
    if (is.null(v)) return(NULL)
    if (!(is.numeric(v) || (is.logical(v) && all(is.na(v)))) || length(v) != Ks) {
      bulkem_abort(c("{.code fixed${name}} must have one value per component ({Ks}), {.code NA} where free.",
                     x = "You supplied {describe_value(v)}."), call = call)
    }
    as.double(v)
  }
  list(alpha = one("alpha"), first = one(fam$first), second = if (!is.na(fam$second)) one(fam$second))
}

# What a constrained fit records: the shared parameter and the held values
# (by the user's names), or NULL without constraints.
constraints_of <- function(equal, fixed, family) {
  if (!isTRUE(equal) && is.null(fixed)) return(NULL)
  fam <- em_family(family)
  held <- if (!is.null(fixed)) {
    h <- list(alpha = fixed$alpha, first = fixed$first, second = fixed$second)
    names(h) <- c("alpha", fam$first, if (is.na(fam$second)) "second" else fam$second)
    Filter(Negate(is.null), h)
  }
  list(equal = if (isTRUE(equal)) fam$second, fixed = held)
}

# One chunk of bulkem(), in this session or on a future worker (map_chunks()).
# On a worker, chunk_exec() resolves use.gpu and the threads for the
# worker's own machine. The offset keys the random streams by global dataset
# index, so the chunking never changes the result.
em_chunk <- function(part, idx, s) {
  ex <- chunk_exec(s)
  ex$backend <- backend_choice_("em", ex$backend, c(em_work(part$datasets, s), max(s$Ks)))
  raw <- em_fit_(part$datasets, s$family, s$Ks, s$criterion, s$max.iters, s$random.inits,
                 s$init.method, s$epsilon, s$seed, part$inits, s$keep.posterior, idx[1] - 1L,
                 s$precision, part$weights, s$equal, s$fixed, part$censoring, ex$threads, ex$backend)
  raw$threads <- ex$threads
  raw
}

# Least observation-iterations worth a future: about 0.1-0.4 s on one CPU
# thread, against 70-115 ms measured per future on a busy 2-core machine.
MIN_CHUNK_WORK <- 2e8

# Observation-iterations of a job (every candidate number of components),
# for the choice of backend and chunks.
em_work <- function(datasets, s) {
  sum(as.double(lengths(datasets))) * (if (s$given_inits) 1 else s$random.inits) * s$max.iters *
    length(s$Ks)
}

# Starting values for the datasets `idx`: a single set serves them all.
inits_rows <- function(inits, idx) {
  if (is.null(inits) || nrow(inits$alpha) == 1) return(inits)
  lapply(inits, function(m) m[idx, , drop = FALSE])
}

# Split the core's flat vectors into one bulkem_fit per dataset; dataset d
# has raw$components[d] components (its chosen number).
assemble_fits <- function(raw, names, family, keep.posterior, weighted = FALSE, constraints = NULL, censored = NULL) {
  D <- length(raw$loglik)
  M <- raw$components
  # The core marks "no value" with NaN; R users expect NA. Converted once,
  # on whole vectors, before splitting by dataset.
  na_nan <- function(v) { v[is.nan(v)] <- NA_real_; v }
  owner <- factor(rep.int(seq_len(D), M), levels = seq_len(D))
  by_dataset <- function(v) split(na_nan(v), owner)
  alpha <- by_dataset(raw$alpha)
  mu <- by_dataset(raw$mu)
  scale <- by_dataset(raw$scale)
  init_alpha <- by_dataset(raw$init_alpha)
  init_mu <- by_dataset(raw$init_mu)
  init_scale <- by_dataset(raw$init_scale)
  S <- length(raw$start_logliks) / D
  start_ll <- split(na_nan(raw$start_logliks), rep(seq_len(D), each = S))
  loglik <- na_nan(raw$loglik)
  diagnostics <- start_diagnostics_all(matrix(na_nan(raw$start_logliks), D, S, byrow = TRUE), loglik)
  fam <- em_family(family)
  # alpha and the family's parameters (the core's mu is the first, its
  # scale the second), then the same for the starting values; a family
  # without a second parameter has none. Names and the kept fields are
  # worked out once: 40,000 datasets call params().
  names_all <- c("alpha", fam$first, fam$second, "init_alpha", paste0("init_", c(fam$first, fam$second)))
  kept <- !is.na(names_all) & names_all != "init_NA"
  names_kept <- names_all[kept]
  params <- function(d) {
    p <- list(alpha[[d]], mu[[d]], scale[[d]], init_alpha[[d]], init_mu[[d]], init_scale[[d]])[kept]
    names(p) <- names_kept
    p
  }
  fits <- lapply(seq_len(D), function(d) {
    fit <- c(params(d), list(
      loglik = loglik[d], num_iterations = raw$iterations[d],
      fit_success = raw$status[d] != "failed", status = raw$status[d],
      message = if (nzchar(raw$message[d])) raw$message[d] else NA_character_,
      n = raw$n[d], nobs = if (weighted) raw$nobs[d], family = family, ft = "bulkem",
      df = if (!is.null(constraints)) raw$df[d], constraints = constraints,
      censored = if (!is.null(censored)) censored[[d]],
      start_logliks = start_ll[[d]], best_start = raw$best_start[d],
      start_diagnostics = diagnostics[d, ],
      loglik_trace = if (keep.posterior) raw$trace[[d]]
    ))
    if (keep.posterior) fit$posterior <- posterior_matrix(raw$posterior[[d]], fit$n, M[d])
    class(fit) <- "bulkem_fit"
    fit
  })
  names(fits) <- names
  fits
}

# How each dataset's starts ended: how many, how many reached the best
# log-likelihood (within 1e-6 relative), how many failed (a component
# collapsed or emptied, or the likelihood went non-finite: degenerate), and
# the spread (best minus worst) of the successful starts' log-likelihoods.
# `ll` is datasets x starts, `best` one per dataset; one row per dataset
# (whole-matrix operations: 40,000 datasets are one call).
start_diagnostics_all <- function(ll, best) {
  ok <- !is.na(ll)
  near <- ok & ll >= best - 1e-6 * abs(best)
  at_best <- ifelse(is.na(best), 0, rowSums(near & !is.na(near)))
  hi <- ll; hi[!ok] <- -Inf
  lo <- ll; lo[!ok] <- Inf
  any_ok <- rowSums(ok) > 0
  top <- if (ncol(ll)) do.call(pmax, unname(as.data.frame(hi))) else rep(-Inf, nrow(ll))
  bottom <- if (ncol(ll)) do.call(pmin, unname(as.data.frame(lo))) else rep(Inf, nrow(ll))
  cbind(starts = ncol(ll), at_best = at_best, failed = rowSums(!ok),
        spread = ifelse(any_ok, top - bottom, NA_real_))
}

posterior_matrix <- function(p, n, M) {
  if (is.null(p)) return(NULL)
  matrix(p, nrow = n, ncol = M, dimnames = list(NULL, paste0("comp", seq_len(M))))
}
