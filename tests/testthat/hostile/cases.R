# Hostile inputs, each run in its own R process by test-hostile.R. A case
# passes when the process survives and the call either raises the error
# class it names or returns a value that its check accepts.
#
#   err(id, code, class)        a condition of (one of) `class`
#   val(id, code, check, warn)  a value for which check(x) is TRUE; with
#                               `warn`, a warning matching it as well
#   either(id, code, check, class, warn)  a classed error, or a checked
#                               value (with `warn`: and a matching warning)
#
# `code` is kept unevaluated and evaluated in the case's own process, after
# the fixtures below. Sizes are those a user can type; the processes run
# with BULKEM_MEMORY_LIMIT (bytes) so that refusals do not depend on this
# machine's memory.

hostile_cases <- list()
add_case <- function(id, code, expect, class = NULL, check = NULL, warn = NULL) {
  hostile_cases[[id]] <<- list(id = id, code = code, expect = expect, class = class,
                                check = check, warn = warn)
}
err <- function(id, code, class = "bulkem_error_input") {
  add_case(id, substitute(code), "error", class = class)
}
val <- function(id, code, check = finite_num, warn = NULL) {
  add_case(id, substitute(code), "value", check = check, warn = warn)
}
either <- function(id, code, check = finite_num, class = "bulkem_error_input", warn = NULL) {
  add_case(id, substitute(code), "either", class = class, check = check, warn = warn)
}

MEM <- "bulkem_error_memory"
MEM_OR_INPUT <- c("bulkem_error_memory", "bulkem_error_input")
DEVICE <- "bulkem_error_device"

# ---- checks ---------------------------------------------------------------
finite_num <- function(x) is.numeric(x) && length(x) > 0 && all(is.finite(x))
is_zero <- function(x) is.numeric(x) && all(x == 0)
no_nan <- function(x) !any(is.nan(unlist(x)))
fits_ok <- function(fits) {
  inherits(fits, "bulkem_fits") && all(vapply(fits, function(f) {
    f$status %in% c("converged", "max_iters", "failed") &&
      (f$status == "failed" || (all(is.finite(c(f$alpha, f$mu, f$loglik))) &&
                                  all(f$alpha >= 0) && abs(sum(f$alpha) - 1) < 1e-8))
  }, logical(1)))
}
hbglm_ok <- function(fit) {
  inherits(fit, "bulkem_hbglm") && all(is.finite(as.array(fit)))
}
prints <- function(x) {
  out <- utils::capture.output(print(x))
  length(out) > 0
}
plots <- function(expr) {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  force(expr)
  TRUE
}

# ---- fixtures (cheap; made in every case's process) -----------------------
fixtures <- function() {
  set.seed(1)
  e <- new.env()
  e$ig <- replicate(3, rinvgaussmix(200, c(0.4, 0.6), c(1, 3), c(10, 5)), simplify = FALSE)
  e$m <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
             matrix(c(0.7, 0.2, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE))
  e$s <- hmm_simulate(e$m, 3, 20, seed = 1)
  e$tiny <- hmm(c(1e-20, 1 - 1e-20), diag(2), rbind(c(1e-310, 1 - 1e-310), c(0, 1)))
  e$gm <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE),
              emission = gaussian_emission(c(0, 3), c(1, 0.5)))
  e$pm <- hmm(c(0.5, 0.5), matrix(c(0.9, 0.1, 0.2, 0.8), 2, byrow = TRUE), emission = poisson_emission(c(1, 6)))
  e$gs <- hmm_simulate(e$gm, 3, 20, seed = 1)
  e$ps <- hmm_simulate(e$pm, 3, 20, seed = 1)
  e$gd <- local({
    g <- rep(1:8, each = 20)
    x <- stats::rnorm(160)
    data.frame(y = 1 + 0.5 * x + stats::rnorm(8)[g] + stats::rnorm(160, sd = 0.5), x = x,
               g = factor(g), t = stats::rexp(160) + 0.5, cnt = stats::rpois(160, 3),
               yb = stats::rbinom(160, 1, 0.4))
  })
  e$fast <- list(iter = 200, warmup = 100, chains = 2, seed = 3, use.gpu = FALSE)
  e$hb <- function(...) do.call(hbglm, c(list(...), e$fast))
  e$f <- function(x) exp(-x^2)
  e
}

# ---- bulkem() -------------------------------------------------------------
err("bulkem-K-1e9", bulkem(list(c(1, 2, 3, 4)), num.components = 1e9), MEM_OR_INPUT)
err("bulkem-random.inits-2^24", bulkem(c(1, 2), random.inits = 2^24), MEM_OR_INPUT)
err("bulkem-random.inits-2^31", bulkem(c(1, 2), random.inits = 2^31))
err("bulkem-empty-list", bulkem(list()))
err("bulkem-character", bulkem("a"))
err("bulkem-NULL", bulkem(NULL))
err("bulkem-list-NULL", bulkem(list(NULL)))
either("bulkem-empty-dataset", bulkem(list(numeric(0)), use.gpu = FALSE), fits_ok)
err("bulkem-NA", bulkem(list(c(1, NA, 3, 4))))
err("bulkem-NaN", bulkem(list(c(1, NaN, 3, 4))))
err("bulkem-Inf", bulkem(list(c(1, Inf, 3, 4))))
err("bulkem-negative-ig", bulkem(list(c(-1, 2, 3, 4))))
err("bulkem-zero-ig", bulkem(list(c(0, 2, 3, 4))))
err("bulkem-range-1e300", bulkem(c(1e-300, 1e300, 1, 2, 3, 4)))
err("bulkem-range-normal", bulkem(c(-1e300, 1e300, 1, 2, 3, 4), family = "normal"))
err("bulkem-1e308-ig", bulkem(c(1e308, 1.5e308, 1.7e308, 1e307)))
err("bulkem-1e308-normal", bulkem(c(1e308, 1.5e308, 1.7e308, 1e307), family = "normal"))
either("bulkem-tiny-values", bulkem(c(1e-310, 2e-310, 3e-310, 5e-310, 8e-310), seed = 1, use.gpu = FALSE), fits_ok)
err("bulkem-K-0", bulkem(ig, num.components = 0))
err("bulkem-K-negative", bulkem(ig, num.components = -1))
err("bulkem-K-NA", bulkem(ig, num.components = NA))
err("bulkem-K-fraction", bulkem(ig, num.components = 2.5))
err("bulkem-K-string", bulkem(ig, num.components = "2"))
err("bulkem-k-partial", bulkem(ig, k = 2))
either("bulkem-K-above-n", bulkem(c(1, 2, 3), num.components = 5, use.gpu = FALSE), fits_ok)
err("bulkem-max.iters-0", bulkem(ig, max.iters = 0))
err("bulkem-max.iters-Inf", bulkem(ig, max.iters = Inf))
err("bulkem-max.iters-huge", bulkem(ig, max.iters = 1e12))
err("bulkem-epsilon-negative", bulkem(ig, epsilon = -1))
err("bulkem-epsilon-NA", bulkem(ig, epsilon = NA_real_))
err("bulkem-family", bulkem(ig, family = "weibull"))
err("bulkem-poisson-fraction", bulkem(list(c(1, 2.5, 3, 4, 5)), family = "poisson"))
err("bulkem-gamma-zero", bulkem(list(c(0, 1, 2, 3, 4)), family = "gamma"))
err("bulkem-use.gpu-string", bulkem(ig, use.gpu = "yes"))
either("bulkem-use.gpu-TRUE", bulkem(ig, use.gpu = TRUE, seed = 1), fits_ok, DEVICE)
err("bulkem-seed-negative", bulkem(ig, seed = -1))
err("bulkem-seed-string", bulkem(ig, seed = "a"))
err("bulkem-seed-Inf", bulkem(ig, seed = Inf))
err("bulkem-inits-partial", bulkem(ig, inits = list(alpha = 1)))
err("bulkem-inits-lengths", bulkem(ig, inits = list(alpha = c(0.5, 0.5), mu = 1, lambda = c(1, 2))))
err("bulkem-inits-negative-mu", bulkem(ig, inits = list(alpha = c(0.5, 0.5), mu = c(-1, 2), lambda = c(1, 2))))
err("bulkem-keep.posterior-NA", bulkem(ig, keep.posterior = NA))
err("bulkem-verbose-string", bulkem(ig, verbose = "yes"))
err("bulkem-parallel", bulkem(ig, parallel = "cluster"))
err("bulkem-chunk.size-0", bulkem(ig, chunk.size = 0))
err("bulkem-data.frame", bulkem(data.frame(a = 1:3)))
err("bulkem-list-of-strings", bulkem(list(c(1, 2), "a")))
val("bulkem-integer", bulkem(list(1:50), seed = 1, use.gpu = FALSE), fits_ok)
either("bulkem-constant", bulkem(list(rep(2, 50)), seed = 1, use.gpu = FALSE), fits_ok)
either("bulkem-one-observation", bulkem(list(2), seed = 1, use.gpu = FALSE), fits_ok)
either("bulkem-two-observations", bulkem(list(c(1, 5)), seed = 1, use.gpu = FALSE), fits_ok)
val("bulkem-normal-negative", bulkem(list(stats::rnorm(100)), family = "normal", seed = 1, use.gpu = FALSE), fits_ok)
err("bulkem-threads-1e5", { options(bulkem.threads = 1e5); bulkem(ig) })
err("bulkem-threads-0", { options(bulkem.threads = 0); bulkem(ig) })
err("bulkem-threads-string", { options(bulkem.threads = "4"); bulkem(ig) })
val("bulkem-threads-churn", {
  for (k in 1:12) { options(bulkem.threads = k); bulkem(ig[1], seed = 1, use.gpu = FALSE) }
  # One pool is kept, not one per count: few threads are left running.
  length(list.files("/proc/self/task"))
}, function(x) !file.exists("/proc/self/task") || x < 40)

# ---- bulkem methods -------------------------------------------------------
val("fits-print", prints(bulkem(ig, seed = 1, use.gpu = FALSE)), isTRUE)
val("fit-summary", prints(summary(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]])), isTRUE)
val("fit-logLik", as.numeric(logLik(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]])))
val("fit-AIC", AIC(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]]))
val("fit-coef", coef(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]]))
val("fits-data.frame", as.data.frame(bulkem(ig, seed = 1, use.gpu = FALSE)), function(x) is.data.frame(x) && nrow(x) == 3)
val("fits-subset", bulkem(ig, seed = 1, use.gpu = FALSE)[2:3], function(x) inherits(x, "bulkem_fits") && length(x) == 2)
either("fits-subset-empty", prints(bulkem(ig, seed = 1, use.gpu = FALSE)[0]), isTRUE)
err("fits-subset-out-of-range", bulkem(ig, seed = 1, use.gpu = FALSE)[5:6])
val("fit-predict-posterior", predict(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]], c(0.5, 1, 2)))
val("fit-predict-density-edges", predict(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]], c(0, -1, Inf, 1e300), type = "density"),
    function(x) is.numeric(x) && all(x == 0))
err("fit-predict-NA", predict(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]], c(1, NA)))
err("fit-predict-string", predict(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]], "a"))
err("fit-predict-type", predict(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]], 1, type = "foo"))
val("fit-plot", plots(plot(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]], ig[[1]])), isTRUE)
err("fit-plot-data-string", plots(plot(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]], "a")))
err("fit-plot-which", plots(plot(bulkem(ig, seed = 1, use.gpu = FALSE)[[1]], ig[[1]], which = "foo")))

# ---- distributions --------------------------------------------------------
val("rinvgaussmix-mu-1e200", rinvgaussmix(3, 1, 1e200, 1), function(x) is.double(x) && length(x) == 3 && all(is.finite(x) & x > 0))
val("rinvgaussmix-mu-1e-200", rinvgaussmix(3, 1, 1e-200, 1e200), function(x) is.double(x) && all(x > 0 & is.finite(x)))
val("rinvgaussmix-lambda-tiny", rinvgaussmix(5, 1, 1, 1e-200), function(x) is.double(x) && all(x >= 0 & is.finite(x)))
val("rinvgaussmix-n-0", rinvgaussmix(0, 1, 1, 1), function(x) is.double(x) && length(x) == 0)
err("rinvgaussmix-n-negative", rinvgaussmix(-1, 1, 1, 1))
err("rinvgaussmix-n-NA", rinvgaussmix(NA, 1, 1, 1))
err("rinvgaussmix-n-huge", rinvgaussmix(1e15, 1, 1, 1), MEM_OR_INPUT)
err("rinvgaussmix-lambda-NA", rinvgaussmix(3, c(0.5, 0.5), c(1, 2), c(1, NA)))
err("rinvgaussmix-alpha-negative", rinvgaussmix(3, c(-0.5, 1.5), c(1, 2), c(1, 1)))
err("rinvgaussmix-lengths", rinvgaussmix(3, c(0.5, 0.5), c(1, 2), 1))
val("dinvgaussmix-Inf", dinvgaussmix(Inf, 1, 1, 1), is_zero)
val("dinvgaussmix-zero", dinvgaussmix(0, 1, 1, 1), is_zero)
val("dinvgaussmix-negative", dinvgaussmix(-1, 1, 1, 1), is_zero)
val("dinvgaussmix-huge-x", dinvgaussmix(1e300, 1, 1, 1), function(x) is.numeric(x) && x >= 0 && is.finite(x))
val("dinvgaussmix-huge-mu", dinvgaussmix(1, 1, 1e300, 1), function(x) is.numeric(x) && x > 0 && is.finite(x))
val("dinvgaussmix-log-tiny", dinvgaussmix(1e-300, 1, 1, 1, log = TRUE), function(x) !is.nan(x) && x < 0)
val("dinvgaussmix-NA", dinvgaussmix(c(1, NA), 1, 1, 1), function(x) is.finite(x[1]) && is.na(x[2]))
err("dinvgaussmix-string", dinvgaussmix("a", 1, 1, 1))
err("dinvgaussmix-mu-negative", dinvgaussmix(1, 1, -1, 1))
err("dinvgaussmix-lambda-zero", dinvgaussmix(1, 1, 1, 0))
err("dinvgaussmix-alpha-NA", dinvgaussmix(1, NA, 1, 1))

# ---- reductions and mc_integrate ------------------------------------------
val("bulk_mean-integer", bulk_mean(1:10), function(x) x == 5.5)
val("bulk_mean-overflow-free", bulk_mean(c(1e308, 1e308)), function(x) x == 1e308)
val("bulk_sum-overflow", bulk_sum(c(1e308, 1e308)), function(x) identical(x, Inf))
val("bulk_mean-Inf-minus-Inf", bulk_mean(c(Inf, -Inf)), is.nan)
either("bulk_mean-empty", bulk_mean(numeric(0)), is.nan)
err("bulk_mean-NA", bulk_mean(c(1, NA)))
val("bulk_mean-na.rm", bulk_mean(c(1, NA, 3), na.rm = TRUE), function(x) x == 2)
err("bulk_mean-string", bulk_mean("a"))
err("bulk_mean-empty-list", bulk_mean(list()))
err("bulk_mean-method", bulk_mean(1:3, method = "foo"))
err("bulk_mean-precision", bulk_mean(1:3, precision = "half"))
err("bulk_mean-na.rm-NA", bulk_mean(1:3, na.rm = NA))
either("bulk_mean-logical", bulk_mean(c(TRUE, FALSE)), function(x) x == 0.5)
either("bulk_mean-use.gpu-TRUE", bulk_mean(1:3, use.gpu = TRUE), function(x) x == 2, DEVICE)
val("bulk_mean-single-huge", bulk_mean(c(1e300, 1), precision = "single"), function(x) is.numeric(x) && !is.nan(x))
val("log_mean_exp-large", log_mean_exp(c(1000, 1000)), function(x) abs(x - 1000) < 1e-12)
val("log_mean_exp-all-zero-weight", log_mean_exp(c(-Inf, -Inf)), function(x) identical(x, -Inf))
either("log_mean_exp-empty", log_mean_exp(numeric(0)), function(x) identical(x, -Inf))
err("log_mean_exp-string", log_mean_exp("a"))
either("log_mean_exp-NaN", log_mean_exp(c(NaN, 1)), is.nan)
err("mc-infinite-volume", mc_integrate(f, -1e308, 1e308, 100))
err("mc-infinite-bound", mc_integrate(f, 0, Inf, 100))
err("mc-reversed", mc_integrate(f, 1, 0, 100))
err("mc-n-0", mc_integrate(f, 0, 1, 0))
err("mc-n-negative", mc_integrate(f, 0, 1, -5))
err("mc-n-NA", mc_integrate(f, 0, 1, NA))
err("mc-lower-NA", mc_integrate(f, NA, 1, 10))
err("mc-f-string", mc_integrate("f", 0, 1, 10))
err("mc-f-character-result", mc_integrate(function(x) rep("a", length(x)), 0, 1, 100))
err("mc-f-wrong-length", mc_integrate(function(x) x[1], 0, 1, 100))
err("mc-f-NA", mc_integrate(function(x) rep(NA_real_, length(x)), 0, 1, 100))
err("mc-f-error", mc_integrate(function(x) stop("boom"), 0, 1, 10), "error")
err("mc-dims", mc_integrate(function(x) rowSums(x), c(0, 0), 1, 10))
err("mc-chunk.size-0", mc_integrate(f, 0, 1, 100, chunk.size = 0))
val("mc-ok", mc_integrate(f, 0, 2, 1e4)$value, function(x) abs(x - 0.882) < 0.05)

# ---- hmm() and friends ----------------------------------------------------
val("hmm-print", prints(m), isTRUE)
val("hmm-summary", prints(summary(m)), isTRUE)
err("hmm-start-sum", hmm(c(0.5, 0.6), diag(2), diag(2)))
err("hmm-start-NA", hmm(c(NA, 1), diag(2), diag(2)))
err("hmm-start-negative", hmm(c(-0.5, 1.5), diag(2), diag(2)))
err("hmm-trans-dims", hmm(c(0.5, 0.5), diag(3), diag(2)))
err("hmm-trans-rows", hmm(c(0.5, 0.5), matrix(0.3, 2, 2), diag(2)))
err("hmm-emis-Inf", hmm(c(0.5, 0.5), diag(2), matrix(c(Inf, 0, 0, 1), 2)))
err("hmm-emis-rows", hmm(c(0.5, 0.5), diag(2), matrix(1:6, 3)))
err("hmm-string", hmm("a", diag(2), diag(2)))
err("hmm-empty", hmm(numeric(0), matrix(0, 0, 0), matrix(0, 0, 2)))
err("hmm_simulate-length-2^31", hmm_simulate(m, n = 1, length = 2^31 - 1), MEM)
err("hmm_simulate-1e5-x-1e5", hmm_simulate(m, n = 1e5, length = 1e5), MEM)
err("hmm_simulate-length-0", hmm_simulate(m, 1, 0))
err("hmm_simulate-n-negative", hmm_simulate(m, -1, 10))
either("hmm_simulate-n-0", hmm_simulate(m, 0, 10), function(x) is.list(x) && length(x) == 0)
err("hmm_simulate-lengths", hmm_simulate(m, 2, c(3, 4, 5)))
err("hmm_simulate-model", hmm_simulate("m", 1, 1))
err("hmm_loglik-empty", hmm_loglik(m, list()))
err("hmm_loglik-empty-seq", hmm_loglik(m, list(integer(0))))
err("hmm_loglik-symbol-high", hmm_loglik(m, list(c(1, 4))))
err("hmm_loglik-symbol-0", hmm_loglik(m, list(c(1, 0))))
err("hmm_loglik-symbol-NA", hmm_loglik(m, list(c(1, NA))))
err("hmm_loglik-symbol-fraction", hmm_loglik(m, list(1.5)))
err("hmm_loglik-labels-unnamed", hmm_loglik(m, list(c("a", "b"))))
err("hmm_loglik-model", hmm_loglik(list(), s))
val("hmm_loglik-ok", hmm_loglik(m, s))
val("hmm_loglik-subnormal", hmm_loglik(tiny, list(1)), function(x) abs(x - (log(1e-20) + log(1e-310))) < 1e-6)
val("hmm_posterior-subnormal", hmm_posterior(tiny, list(1))[[1]], function(p) all(is.finite(p)) && abs(p[1, 1] - 1) < 1e-12)
val("hmm_viterbi-subnormal", hmm_viterbi(tiny, list(1))$log_prob,
    function(x) abs(x - (log(1e-20) + log(1e-310))) < 1e-6)
val("hmm_loglik-impossible", hmm_loglik(hmm(1, matrix(1), matrix(c(1, 0), 1)), list(2)), function(x) identical(x, -Inf))
val("hmm_loglik-long-subnormal-chain", hmm_loglik(hmm(c(0.5, 0.5), matrix(c(1 - 1e-300, 1e-300, 1e-300, 1 - 1e-300), 2),
                                                       rbind(c(1 - 1e-300, 1e-300), c(1e-300, 1 - 1e-300))), list(rep(1:2, 50))))
err("hmm_viterbi-empty", hmm_viterbi(m, list()))
err("hmm_posterior-symbol-high", hmm_posterior(m, list(c(1, 5))))
err("hmm_posterior-use.gpu", hmm_posterior(m, s, use.gpu = "no"))
err("hmm_loglik-chunk.size", hmm_loglik(m, s, chunk.size = -1))
err("hmm_fit-states-1e5", hmm_fit(list(c(1, 2, 3)), n.states = 1e5, n.symbols = 3), MEM)
err("hmm_fit-symbols-1e9", hmm_fit(list(c(1, 2, 3)), n.states = 2, n.symbols = 1e9), MEM)
err("hmm_fit-states-0", hmm_fit(list(c(1, 2, 3)), n.states = 0, n.symbols = 3))
err("hmm_fit-symbols-too-few", hmm_fit(list(c(1, 2, 3)), n.states = 2, n.symbols = 2))
either("hmm_fit-max.iters-0", hmm_fit(s, 2, 3, max.iters = 0, seed = 1, use.gpu = FALSE), function(x) inherits(x, "bulkem_hmm_fit"))
err("hmm_fit-epsilon-negative", hmm_fit(s, 2, 3, epsilon = -1))
err("hmm_fit-random.inits-0", hmm_fit(s, 2, 3, random.inits = 0))
err("hmm_fit-random.inits-1e9", hmm_fit(s, 2, 3, random.inits = 1e9), MEM_OR_INPUT)
err("hmm_fit-pseudocount-negative", hmm_fit(s, 2, 3, pseudocount = -1))
err("hmm_fit-init-string", hmm_fit(s, 2, 3, init = "a"))
err("hmm_fit-seed-NA", hmm_fit(s, 2, 3, seed = NA))
val("hmm_fit-unseen-symbols", hmm_fit(list(c(1, 1, 1)), 2, 3, seed = 1, use.gpu = FALSE)$loglik,
    function(x) is.finite(x) && x <= 0)
val("hmm_fit-single-symbol", hmm_fit(list(1), 1, 1, seed = 1, use.gpu = FALSE)$loglik, function(x) isTRUE(all.equal(x, 0)))
val("hmm_fit-methods", {
  fit <- hmm_fit(s, 2, 3, seed = 1, use.gpu = FALSE, max.iters = 5)
  prints(fit) && prints(summary(fit)) && is.finite(logLik(fit)) && nobs(fit) == 60 && plots(plot(fit))
}, isTRUE)
err("hmm_posterior-output-too-large", {
  big <- hmm(rep(1 / 1000, 1000), matrix(1 / 1000, 1000, 1000), matrix(1 / 2, 1000, 2))
  hmm_posterior(big, list(rep(1:2, 1.5e6)), use.gpu = FALSE)
}, MEM)
err("gaussian_emission-sd-0", gaussian_emission(c(0, 1), c(1, 0)))
err("gaussian_emission-sd-NaN", gaussian_emission(c(0, 1), c(1, NaN)))
err("gaussian_emission-mean-Inf", gaussian_emission(c(0, Inf), c(1, 1)))
err("gaussian_emission-lengths", gaussian_emission(c(0, 1), c(1, 1, 1)))
err("gaussian_emission-empty", gaussian_emission(numeric(0), numeric(0)))
err("poisson_emission-negative", poisson_emission(c(1, -1)))
err("poisson_emission-string", poisson_emission("a"))
err("categorical_emission-vector", categorical_emission(c(0.5, 0.5)))
err("hmm-emission-states", hmm(c(0.5, 0.5), diag(2), emission = poisson_emission(c(1, 2, 3))))
err("hmm-emis-and-emission", hmm(c(0.5, 0.5), diag(2), diag(2), emission = poisson_emission(c(1, 2))))
err("hmm-emission-list", hmm(c(0.5, 0.5), diag(2), emission = list(family = "poisson", rate = c(1, 2))))
val("hmm-gaussian-print", prints(gm) && prints(summary(gm)) && prints(gm$emission), isTRUE)
err("hmm_loglik-gaussian-NaN", hmm_loglik(gm, list(c(1, NaN)), use.gpu = FALSE))
err("hmm_loglik-gaussian-Inf", hmm_loglik(gm, list(c(1, Inf)), use.gpu = FALSE))
err("hmm_loglik-gaussian-NA", hmm_loglik(gm, list(c(1, NA)), use.gpu = FALSE))
err("hmm_loglik-gaussian-character", hmm_loglik(gm, list("a"), use.gpu = FALSE))
err("hmm_loglik-poisson-negative", hmm_loglik(pm, list(c(1, -1)), use.gpu = FALSE))
err("hmm_loglik-poisson-fraction", hmm_loglik(pm, list(c(1, 0.5)), use.gpu = FALSE))
err("hmm_loglik-poisson-NA", hmm_loglik(pm, list(c(1, NA)), use.gpu = FALSE))
err("hmm_loglik-poisson-2^60", hmm_loglik(pm, list(2^60), use.gpu = FALSE))
val("hmm_loglik-gaussian-huge", hmm_loglik(gm, list(c(1e300, -1e300)), use.gpu = FALSE),
    function(x) identical(unname(x), -Inf) || (is.numeric(x) && !is.nan(x)))
val("hmm_loglik-poisson-2^53", hmm_loglik(pm, list(2^53), use.gpu = FALSE), function(x) is.numeric(x) && !is.nan(x))
val("hmm_posterior-gaussian-ok", hmm_posterior(gm, gs, use.gpu = FALSE), no_nan)
val("hmm_viterbi-poisson-ok", hmm_viterbi(pm, ps, use.gpu = FALSE)$log_prob)
err("hmm_simulate-gaussian-1e5-x-1e5", hmm_simulate(gm, n = 1e5, length = 1e5), MEM)
val("hmm_simulate-poisson-huge-rate", hmm_simulate(hmm(1, matrix(1), emission = poisson_emission(1e15)), 2, 3, seed = 1),
    function(x) all(vapply(x, is.double, NA)) && all(unlist(x) > 0))
err("hmm_fit-gaussian-n.symbols", hmm_fit(gs, 2, 3, emission = "gaussian"))
err("hmm_fit-categorical-var.floor", hmm_fit(s, 2, 3, var.floor = 1))
err("hmm_fit-gaussian-var.floor-0", hmm_fit(gs, 2, emission = "gaussian", var.floor = 0))
err("hmm_fit-gaussian-var.floor-NA", hmm_fit(gs, 2, emission = "gaussian", var.floor = NA))
err("hmm_fit-emission-unknown", hmm_fit(gs, 2, emission = "cauchy"))
err("hmm_fit-init-family-mismatch", hmm_fit(gs, init = gm, emission = "poisson"))
err("hmm_fit-gaussian-states-1e5", hmm_fit(gs, n.states = 1e5, emission = "gaussian"), MEM)
val("hmm_fit-gaussian-constant", hmm_fit(list(rep(2, 10)), 2, emission = "gaussian", seed = 1, use.gpu = FALSE)$loglik,
    function(x) is.numeric(x) && !is.nan(x), warn = "floor")
val("hmm_fit-gaussian-collapse", hmm_fit(list(c(stats::rnorm(39), 100)), var.floor = 1e-4, use.gpu = FALSE, max.iters = 50,
                                         init = hmm(c(0.5, 0.5), matrix(0.5, 2, 2),
                                                    emission = gaussian_emission(c(0, 100), c(1, 1))))$floored,
    function(x) identical(unname(x), c(FALSE, TRUE)), warn = "held at the floor")
val("hmm_fit-poisson-zeros", hmm_fit(list(rep(0, 20)), 2, emission = "poisson", seed = 1, use.gpu = FALSE)$loglik,
    function(x) isTRUE(all.equal(x, 0)))
val("hmm_fit-gaussian-methods", {
  fit <- hmm_fit(gs, 2, emission = "gaussian", seed = 1, use.gpu = FALSE, max.iters = 5)
  prints(fit) && prints(summary(fit)) && is.finite(logLik(fit)) && attr(logLik(fit), "df") == 7 &&
    nobs(fit) == 60 && plots(plot(fit)) && is.list(predict(fit, gs, use.gpu = FALSE))
}, isTRUE)
val("hmm_fit-poisson-methods", {
  fit <- hmm_fit(ps, 2, emission = "poisson", seed = 1, use.gpu = FALSE, max.iters = 5)
  prints(fit) && prints(summary(fit)) && is.finite(logLik(fit)) && attr(logLik(fit), "df") == 5 &&
    nobs(fit) == 60 && plots(plot(fit)) && is.list(predict(fit, ps, type = "posterior", use.gpu = FALSE))
}, isTRUE)

# ---- hbglm() and slice_sample() -------------------------------------------
err("hbglm-iter-2e9", hbglm(y ~ x, gd, "g", iter = 2e9, use.gpu = FALSE), MEM_OR_INPUT)
val("hbglm-ok", hb(y ~ x, gd, "g"), hbglm_ok)
val("hbglm-offset-poisson", hb(cnt ~ x + offset(log(t)), gd, "g", family = "poisson"), hbglm_ok)
val("hbglm-cbind-binomial", hb(cbind(cnt, 10 - cnt) ~ x, gd, "g", family = "binomial"), hbglm_ok)
err("hbglm-bar-term", hb(y ~ x + (1 | g), gd, "g"))
err("hbglm-unknown-variable", hb(y ~ nope, gd, "g"))
err("hbglm-group-missing", hb(y ~ x, gd, "nope"))
err("hbglm-empty-data", hb(y ~ x, gd[0, ], "g"))
either("hbglm-NA-response", { gd$y[3] <- NA; hb(y ~ x, gd, "g") }, hbglm_ok)
err("hbglm-Inf-covariate", { gd$x[3] <- Inf; hb(y ~ x, gd, "g") })
err("hbglm-poisson-fraction", hb(y ~ x, gd, "g", family = "poisson"))
err("hbglm-poisson-negative", { gd$cnt[1] <- -1; hb(cnt ~ x, gd, "g", family = "poisson") })
err("hbglm-binomial-not-01", hb(cnt ~ x, gd, "g", family = "binomial"))
err("hbglm-singular", { gd$x2 <- 2 * gd$x; hb(y ~ x + x2, gd, "g") })
val("hbglm-noise-free", { gd$y <- 1 + 2 * gd$x; suppressWarnings(hb(y ~ x, gd, "g")) }, hbglm_ok)
val("hbglm-constant-y", { gd$y <- 3; suppressWarnings(hb(y ~ x, gd, "g")) }, hbglm_ok)
# Detected up front (an error), or sampled with a warning naming what stuck.
either("hbglm-overflow", { gd$y <- gd$y * 1e160; hb(y ~ x, gd, "g") }, hbglm_ok, warn = "stuck|overflow")
val("hbglm-separation", { gd$yb <- as.integer(gd$x > 0); hb(yb ~ x, gd, "g", family = "binomial") },
    function(x) inherits(x, "bulkem_hbglm"), warn = "separat")
err("hbglm-chains-0", hbglm(y ~ x, gd, "g", chains = 0))
err("hbglm-iter-1", hbglm(y ~ x, gd, "g", iter = 1))
err("hbglm-warmup-iter", hbglm(y ~ x, gd, "g", iter = 100, warmup = 100))
err("hbglm-thin-0", hbglm(y ~ x, gd, "g", thin = 0))
err("hbglm-thin-large", hbglm(y ~ x, gd, "g", iter = 100, warmup = 50, thin = 1000))
err("hbglm-family", hbglm(y ~ x, gd, "g", family = "gamma"))
err("hbglm-prior-string", hbglm(y ~ x, gd, "g", prior = "a"))
err("hbglm-prior-mu_sd", hbglm_prior(mu_sd = -1))
err("hbglm-prior-tau_family", hbglm_prior(tau_family = "x"))
err("hbglm-slice-w", hbglm(y ~ x, gd, "g", slice = list(w = -1)))
err("hbglm-data-matrix", hbglm(y ~ x, as.matrix(gd[, 1:2]), "g"))
err("hbglm-global-unknown", hbglm(y ~ x, gd, "g", global = ~nope))
err("hbglm-formula-string", hbglm(42, gd, "g"))
val("hbglm-methods", {
  fit <- hb(y ~ x, gd, "g")
  prints(fit) && prints(summary(fit)) && all(is.finite(coef(fit))) && plots(plot(fit)) &&
    inherits(coda::as.mcmc.list(fit), "mcmc.list") && inherits(posterior::as_draws_array(fit), "draws_array")
}, isTRUE)
err("hbglm-summary-pars", summary(hb(y ~ x, gd, "g"), pars = "nope"))
val("slice-ok", slice_sample(function(x) -x^2 / 2, 0, 200))
err("slice-f-string", slice_sample("f", 0, 10))
err("slice-n-0", slice_sample(function(x) -x^2 / 2, 0, 0))
err("slice-f-NaN", slice_sample(function(x) NaN, 0, 10))
err("slice-x0-outside", slice_sample(function(x) -x^2, 5, 10, lower = 0, upper = 1))
err("slice-x0-zero-density", slice_sample(function(x) -Inf, 0, 10))
err("slice-w-0", slice_sample(function(x) -x^2 / 2, 0, 10, w = 0))
err("slice-n-2^31", slice_sample(function(x) -x^2 / 2, 0, 2^31 - 1), MEM_OR_INPUT)

# ---- backends --------------------------------------------------------------
val("backends", bulkem_backends(), function(x) is.data.frame(x) && x$usable[1])
err("threads-absurd-reduction", { options(bulkem.threads = 1e5); bulk_mean(1:3) })
err("threads-absurd-hmm", { options(bulkem.threads = 1e5); hmm_loglik(m, s) })
