#' bulkem: fit many statistical models at once
#'
#' bulkem fits mixtures of inverse Gaussian or Normal distributions by EM to
#' many datasets at once, with many random starts each, on CUDA GPUs when
#' they are usable and in parallel on every CPU core otherwise (the numerics
#' are a Rust core; GPU kernels are compiled at run time with NVRTC).
#'
#' Start with [bulkem()]; [bulkem_backends()] tells what can run here.
#'
#' Options:
#' * `bulkem.threads`: CPU threads to use. The default is the cores this
#'   session was given, as `parallelly::availableCores()` finds them: a
#'   scheduler's allotment (Slurm's `--cpus-per-task`, PBS, SGE, LSF), a
#'   cgroups CPU limit, CPU affinity, option `mc.cores`, R CMD check's limit;
#'   every core where none applies. [bulkem_backends()] says which. Set on a
#'   future worker, the threads that worker uses.
#' * `bulkem.worker.threads`: CPU threads of every future worker with
#'   `parallel = "future"` (default: each worker's cores divided by the
#'   number of workers on its machine, as far as the plan says).
#' * `bulkem.verbose`: `TRUE` makes every call report its backend and time.
#'
#' @keywords internal
#' @docType package
#' @name bulkem-package
#' @aliases bulkem-package
#' @importFrom stats AIC BIC coef fitted logLik nobs predict residuals simulate
#' @useDynLib bulkem, .registration = TRUE
NULL
