#' Errors, warnings and interrupts raised by bulkem
#'
#' Every error bulkem raises is a condition of class `bulkem_error` and of
#' one more specific class, so that code can react to the kind of failure
#' with `tryCatch()`:
#'
#' * `bulkem_error_input`: an argument or a value in the data cannot be used
#'   (the message names the argument, dataset, sequence or position).
#' * `bulkem_error_memory`: the job needs more memory than is available. It
#'   is raised before any large allocation, from an estimate made from the
#'   job's sizes against the memory the system (or the container or
#'   scheduler job) still has; the message says how much the job needs. Set
#'   the environment variable `BULKEM_MEMORY_LIMIT` (bytes) to lower the
#'   limit, e.g. to leave room for other processes.
#' * `bulkem_error_device`: the requested backend cannot run the job (no
#'   usable CUDA GPU with `use.gpu = TRUE`, a job the GPU backend does not
#'   support, a device failure).
#' * `bulkem_error_worker`: a `future` worker failed (`parallel = "future"`);
#'   the message names the chunk of work it held.
#' * `bulkem_error_internal`: a bug in bulkem; please report it.
#'
#' Two kinds of error are passed on as R raised them, not as `bulkem_error`:
#' an error of the user's own function (the integrand of [mc_integrate()],
#' the log-density of [slice_sample()]), and an R error raised while a call
#' waits for the core, such as the limit of [setTimeLimit()].
#'
#' A user interrupt (Ctrl-C, Esc in RStudio) during a long computation stops
#' it within a second on the CPU (inside a single long sequence or sweep
#' too; on a GPU it is seen between kernel launches, and not while the
#' kernels of a process's first GPU call compile), and arrives as R's own
#' `interrupt`
#' condition, as it does in R's own loops: `tryCatch(..., interrupt = )`
#' catches it, and `try()` does not, so `for (i in 1:4) try(bulkem(...))`
#' stops at the first Ctrl-C. Results of an interrupted call are not kept.
#'
#' Results that may be unreliable carry a warning of class `bulkem_warning`
#' and a more specific class, saying which dataset, chain, state or
#' parameter: `bulkem_warning_convergence` ([bulkem()]: fits that stopped at
#' `max.iters`), `bulkem_warning_stuck`, `bulkem_warning_floor`,
#' `bulkem_warning_rhat` and `bulkem_warning_separation` ([hbglm()]), and
#' `bulkem_warning_variance_floor` ([hmm_fit()]: Gaussian states whose
#' variance was held at `var.floor`).
#'
#' @examples
#' r <- tryCatch(bulkem(list(c(1, NA, 3))), bulkem_error_input = function(e) "bad input")
#' r
#' tryCatch(
#'   bulk_mean("a"),
#'   bulkem_error = function(e) cat("bulkem refused:", class(e)[1], "\n")
#' )
#' @name bulkem-conditions
#' @aliases bulkem_error bulkem_error_input bulkem_error_memory bulkem_error_device
#'   bulkem_error_worker bulkem_error_internal
NULL
