#' Compute backends available to bulkem
#'
#' Reports which backends can run on this machine and, for those that
#' cannot, why not. `use.gpu = NA` in the compute functions uses a CUDA GPU
#' when one is usable and the job is large enough to gain from it (smaller
#' jobs finish sooner on the CPU), and the CPU otherwise.
#'
#' The CPU backend uses the cores this session was given: option
#' `bulkem.threads` when set, else what `parallelly::availableCores()` finds
#' (a Slurm, PBS, SGE or LSF job's allotment, a cgroups CPU limit, CPU
#' affinity, option `mc.cores`, R CMD check's limit), else every core; the
#' `detail` column says which, as "1 of 128 cores: Slurm allotment". The
#' GPU backend sees only the devices in `CUDA_VISIBLE_DEVICES` (which Slurm
#' sets for `--gres=gpu:N`) and uses all of them.
#'
#' @return A data frame with one row for the CPU and one per CUDA device (a
#'   single `cuda` row when none was found), with columns `backend`,
#'   `device` (GPU ordinal), `name`, `usable`, `threads` (CPU worker
#'   threads), `memory_gb`, `compute_capability` and `detail` (what was
#'   found, or why the backend is not usable).
#' @examples
#' bulkem_backends()
#' @export
bulkem_backends <- function() {
  info <- backends_()
  threads <- cpu_threads(info)
  cpu <- data.frame(
    backend = "cpu", device = NA_integer_, name = "CPU", usable = TRUE, threads = threads,
    memory_gb = NA_real_, compute_capability = NA_character_,
    detail = paste0(sprintf("%d of %d cores: %s", threads, info$cpu_threads, threads_source(info)),
                    if (length(thread_limits())) paste0("; limited by ", paste(names(thread_limits()), collapse = ", "))),
    stringsAsFactors = FALSE
  )
  dev <- info$devices
  gpus <- if (length(dev$ordinal) == 0) {
    data.frame(
      backend = "cuda", device = NA_integer_, name = NA_character_, usable = FALSE,
      threads = NA_integer_, memory_gb = NA_real_, compute_capability = NA_character_,
      detail = info$cuda_reason, stringsAsFactors = FALSE
    )
  } else {
    data.frame(
      backend = "cuda", device = dev$ordinal, name = dev$name, usable = dev$usable,
      threads = NA_integer_, memory_gb = round(dev$memory_gb, 1),
      compute_capability = dev$compute_capability,
      detail = ifelse(dev$usable, "usable", dev$reason), stringsAsFactors = FALSE
    )
  }
  rbind(cpu, gpus)
}

# Worker threads for the CPU backend: option bulkem.threads, else the
# cores this session was given (cpu_allotment(): a Slurm job's
# --cpus-per-task, a cgroups quota, ...). At most 8 per core (the core's own
# limit): more only costs start-up time. Under R CMD check (and wherever
# OMP_THREAD_LIMIT is set) at most what the environment allows:
# thread_limits().
cpu_threads <- function(info = backends_()) {
  opt <- getOption("bulkem.threads")
  threads <- if (is.null(opt)) {
    cpu_allotment(info)$cores
  } else {
    threads <- check_count(opt, "options(bulkem.threads)", call = NULL)
    if (threads > info$max_threads) {
      bulkem_abort(c(
        "{.code options(bulkem.threads)} must be at most {info$max_threads} on this machine.",
        x = "It is {threads}.",
        i = "Unset it ({.code options(bulkem.threads = NULL)}) to use the cores this session was given."
      ), call = NULL)
    }
    threads
  }
  as.integer(min(threads, thread_limits()))
}

# Where cpu_threads() took its number from, in words.
threads_source <- function(info = backends_()) {
  if (!is.null(getOption("bulkem.threads"))) "option bulkem.threads" else cpu_allotment(info)$source
}

# The cores this R session was given and who gave them:
# parallelly::availableCores() reads the schedulers' allotments (Slurm,
# PBS, SGE, LSF), cgroups quotas, CPU affinity, option mc.cores and R CMD
# check's limit, and the smallest wins. `worker`: on a future worker, where
# future sets mc.cores = 1 against nested R-level parallelism; that is not
# an allotment (the core's threads are counted by worker_threads()).
# Without parallelly (a suggested package): every core.
#
# parallelly::availableCores() takes about 2.5 ms, most of a small call's
# time (a 10-value bulk_sum() took 3.3 ms), so its answer is kept while
# what it reads from R is unchanged: the environment variables and its
# options (cgroups and CPU affinity are fixed for a process in practice).
cpu_allotment <- function(info = backends_(), worker = FALSE) {
  opts <- options()
  key <- list(worker, info$cpu_threads, Sys.getenv(), opts[grepl("^(mc[.]cores$|parallelly[.]|future[.])", names(opts))])
  if (identical(the$allotment$key, key)) return(the$allotment$value)
  value <- allotment_now(info, worker)
  the$allotment <- list(key = key, value = value)
  value
}

allotment_now <- function(info, worker) {
  all <- as.integer(info$cpu_threads)
  every <- list(cores = all, source = "every core")
  if (!requireNamespace("parallelly", quietly = TRUE)) return(every)
  counts <- tryCatch(parallelly::availableCores(which = "all"), error = function(e) NULL)
  counts <- counts[!is.na(counts)]
  if (worker) counts <- counts[names(counts) != "mc.cores"]
  if (!length(counts)) return(every)
  k <- which.min(counts)
  cores <- as.integer(max(1, min(all, floor(counts[[k]]))))
  if (cores >= all) return(every)
  list(cores = cores, source = allotment_label(names(counts)[k]))
}

allotment_label <- function(method) {
  switch(method,
    Slurm = , PBS = , SGE = , LSF = , PJM = paste(method, "allotment"),
    cgroups.cpuset = , cgroups.cpuquota = , cgroups2.cpu.max = "cgroups CPU limit",
    nproc = "CPU affinity (nproc)",
    mc.cores = "option mc.cores",
    `_R_CHECK_LIMIT_CORES_` = "R CMD check's limit",
    BiocParallel = , Bioconductor = "BiocParallel's limit",
    method
  )
}

# Limits on threads set by the environment: R CMD check's
# _R_CHECK_LIMIT_CORES_ (CRAN allows 2 cores) and OpenMP's OMP_THREAD_LIMIT.
thread_limits <- function() {
  limits <- integer()
  check <- Sys.getenv("_R_CHECK_LIMIT_CORES_", "")
  if (nzchar(check) && !(tolower(check) %in% c("false", "0", "no"))) {
    limits[["_R_CHECK_LIMIT_CORES_"]] <- 2L
  }
  omp <- suppressWarnings(as.integer(Sys.getenv("OMP_THREAD_LIMIT", "")))
  if (!is.na(omp) && omp >= 1) limits[["OMP_THREAD_LIMIT"]] <- omp
  limits
}

the <- new.env(parent = emptyenv())

# Turn use.gpu into "cpu", "cuda" or "auto" (NA with a usable GPU: the core
# picks by job size), with a one-time message when NA falls back to the CPU.
resolve_backend <- function(use.gpu, call = parent.frame(), quiet = FALSE) {
  check_flag(use.gpu, "use.gpu", allow_na = TRUE, call = call)
  info <- backends_()
  if (isFALSE(use.gpu)) return("cpu")
  if (isTRUE(info$cuda_usable)) {
    kernel_cache_(kernel_cache_dir(call))
    return(if (isTRUE(use.gpu)) "cuda" else "auto")
  }
  if (isTRUE(use.gpu)) {
    bulkem_abort(c(
      "{.code use.gpu = TRUE} but no CUDA GPU is usable.",
      x = info$cuda_reason,
      i = "Use {.code use.gpu = NA} to fall back to the CPU, or see {.fn bulkem_backends}."
    ), "device", call = call)
  }
  if (!quiet && is.null(the$cpu_message_shown)) {
    threads <- cpu_threads(info)
    the$cpu_message_shown <- TRUE
    cli::cli_inform(c(
      i = "bulkem is using the CPU backend ({threads} threads): {info$cuda_reason}.",
      " " = "This message is shown once per session; {.code use.gpu = FALSE} silences it."
    ))
  }
  "cpu"
}

# Run a core entry point, turning its errors into classed conditions of
# `call`. `fn` names the user-facing function.
call_core <- function(expr, call, fn) {
  tryCatch(expr, error = function(e) {
    # Already ours (an argument check while evaluating `expr`): as it is.
    if (inherits(e, "bulkem_error")) stop(e)
    core_error(conditionMessage(e), call, fn)
  })
}

# The protocol at the boundary: the glue tags each core error message
# "[bulkem_error_<kind>] " (src/rust/rpkg/src/session.rs), with kind one of
# input, memory, device, interrupt, internal. Here it becomes a cli error of
# classes c("bulkem_error_<kind>", "bulkem_error") with the message
# verbatim; an interrupt becomes R's own `interrupt` condition, as a
# Ctrl-C in an R loop does. `where` (optional) says which chunk raised it.
core_error <- function(msg, call, fn, where = NULL) {
  kind <- core_error_kind(msg)
  msg <- sub("^\\[bulkem_error_[a-z]+\\] ", "", msg)
  if (kind == "interrupt") raise_interrupt()
  at <- if (!is.null(where)) c(i = "Raised by {where}.")
  headline <- switch(kind,
    input = if (grepl("^Dataset [0-9]+ has (NA|NaN) at position", msg)) "{.arg datasets} must not contain missing values."
            else if (startsWith(msg, "dataset ")) "{.arg datasets} must contain only valid observations."
            else if (startsWith(msg, "`weights` ")) "{.arg weights} must be finite and non-negative, and not all 0."
            else "Invalid input to {.fn {fn}}.",
    memory = "{.fn {fn}} needs more memory than is available.",
    device = "{.fn {fn}} could not run on its backend.",
    "{.fn {fn}} failed."
  )
  bulkem_abort(c(headline, x = "{msg}", at), kind, call = call)
}

# The kind a tagged core message carries ("internal" for an untagged one:
# an R error from the glue is a bug of ours, not the user's).
core_error_kind <- function(msg) {
  m <- regmatches(msg, regexec("^\\[bulkem_error_([a-z]+)\\] ", msg))[[1]]
  if (length(m) == 2) m[2] else "internal"
}

# A cli error of class c("bulkem_error_<kind>", "bulkem_error").
bulkem_abort <- function(message, kind = "input", ..., call = parent.frame(), .envir = parent.frame()) {
  cli::cli_abort(message, class = c(paste0("bulkem_error_", kind), "bulkem_error"), ...,
                 call = call, .envir = .envir)
}

# Raise the user's Ctrl-C, seen by the core's polling, as R's interrupt.
raise_interrupt <- function() {
  .External(bulkem_raise_interrupt)
}

# A progress callback for the core: `function(amount)` advancing a progressr
# progressor, or NULL without progressr. The progressor belongs to the
# caller's frame, so it ends when that call ends. The callback's environment
# holds only the progressor (not the caller's frame and its data), so it can
# be sent to future workers.
make_progress <- function(steps, envir = parent.frame()) {
  if (steps < 2 || !requireNamespace("progressr", quietly = TRUE)) return(NULL)
  progress_callback(progressr::progressor(steps = steps, envir = envir))
}

# The callback lives in a small environment under the base one, so that
# sending it to a future worker does not make the worker load bulkem
# before on_worker() has found its library.
progress_callback <- function(p) {
  env <- new.env(parent = baseenv())
  env$p <- p
  local(function(amount) p(amount = amount), envir = env)
}

# Datasets per progress step: about 50 steps on the CPU (each still keeping
# every thread busy); on a GPU few, large launches (a launch wants tens of
# thousands of (dataset, start) pairs to fill the device).
progress_chunk_size <- function(D, backend, threads) {
  if (backend == "cuda") max(50000L, ceiling(D / 10)) else max(4L * threads, ceiling(D / 50))
}

#' Compiled GPU kernels kept between R sessions
#'
#' The first GPU call of an R session compiles the CUDA kernels it needs
#' with NVRTC: from a fraction of a second to about 6 seconds per kernel
#' file (a mixture family's EM kernel about 1 s per number of components,
#' the hbglm sampler about 6 s). bulkem keeps what it compiled (PTX) on
#' disk, so later sessions load it in milliseconds instead. Each entry is
#' named by a hash of the kernel source, the GPU architecture, the compile
#' definitions, the NVRTC version and the bulkem version, and is checked
#' when read: a damaged or stale entry is compiled again. The cache holds at
#' most 64 MB; the least recently used entries go first. Nothing is written
#' on machines without a usable GPU.
#'
#' Where the kernels are kept, in this order:
#' * `options(bulkem.kernel.cache = FALSE)`: nowhere (every session
#'   compiles its kernels); `options(bulkem.kernel.cache = "path")`: that
#'   directory;
#' * the environment variable `BULKEM_KERNEL_CACHE`, when set;
#' * `tools::R_user_dir("bulkem", "cache")`, in a folder `kernels`.
#'
#' @param clear If `TRUE`, remove every kernel kept there.
#' @return A list with `dir` (`NA` when no cache is kept), `entries` and
#'   `bytes` (after clearing, with `clear = TRUE`), invisibly when
#'   clearing.
#' @examples
#' bulkem_kernel_cache()
#' @export
bulkem_kernel_cache <- function(clear = FALSE) {
  call <- environment()
  clear <- check_flag(clear, "clear", call = call)
  dir <- kernel_cache_dir(call)
  if (!nzchar(dir)) return(list(dir = NA_character_, entries = 0L, bytes = 0))
  usage <- kernel_cache_usage_(dir, clear)
  out <- list(dir = dir, entries = usage$entries, bytes = usage$bytes)
  if (clear) invisible(out) else out
}

# The directory compiled GPU kernels are kept in ("" for none): see
# bulkem_kernel_cache().
kernel_cache_dir <- function(call = parent.frame()) {
  opt <- getOption("bulkem.kernel.cache")
  if (isFALSE(opt)) return("")
  if (!is.null(opt)) {
    if (!is.character(opt) || length(opt) != 1 || is.na(opt) || !nzchar(opt)) {
      bulkem_abort(c("{.code options(bulkem.kernel.cache)} must be a directory (one string) or {.code FALSE}.",
                     x = "It is {describe_value(opt)}."), call = call)
    }
    return(path.expand(opt))
  }
  env <- Sys.getenv("BULKEM_KERNEL_CACHE")
  if (nzchar(env)) return(path.expand(env))
  file.path(tools::R_user_dir("bulkem", "cache"), "kernels")
}
