# Spreading work over chunks, in this session or on future workers
# (parallel = "future": the future framework, one future per chunk). Generic,
# so every area uses the same machinery: bulkem() splits datasets, the HMM
# functions can split sequences, hbglm() can put chains on workers.
#
# The rules that make it safe:
# * Each chunk is sent only its own slice of the data (`slice(idx)`, cut on
#   the caller), never the whole input: `fun` must be a function of the
#   package namespace (or one whose environment holds nothing large), since a
#   closure made inside the caller would carry the caller's frame with it.
# * Randomness is keyed by global indices (the seed is drawn once on the
#   caller and `idx` says where the chunk starts), so the result does not
#   depend on the chunking or on the workers.
# * A chunk's R error comes back as a value (so the caller knows which chunk
#   failed) and is raised on the caller naming the chunk's items.
#
# An area uses it like bulkem() does (R/bulkem.R, em_chunk()):
#
#   ex <- exec_settings(parallel, use.gpu, call)   # backend here, or for workers
#   size <- if (!is.null(chunk.size)) chunk.size else if (parallel == "future")
#     future_chunk_size(n, bytes = <data bytes>, work = <work>, min_work = <least per future>)
#     else n
#   parts <- map_chunks(chunk_indices(n, size), hmm_loglik_chunk,
#     slice = function(idx) seqs[idx], args = c(list(model = model), ex),
#     parallel = parallel, progress = make_progress(n), what = "sequences",
#     on_error = function(msg, where) core_error(msg, call, "hmm_loglik", if (parallel == "future") where))
#   unlist(parts)            # or bind_chunks(parts) for lists of fields
#
#   hmm_loglik_chunk <- function(part, idx, s) {   # top level of R/hmm.R
#     ex <- chunk_exec(s)                           # backend and threads where it runs
#     hmm_loglik_(s$model, part, ex$threads, ex$backend)
#   }
#
# For chains (hbglm), one chain per chunk: chunk_indices(chains, 1), `slice`
# returning NULL and the data in `args` (every chain needs all of it), the
# chain's random stream keyed by its global index `idx`.

#' Split 1..n into contiguous chunks
#'
#' @param n Number of items.
#' @param size Items per chunk (the last one may be shorter).
#' @return A list of integer vectors.
#' @noRd
chunk_indices <- function(n, size) {
  size <- max(1L, as.integer(size))
  # One chunk without split()'s factor: 20 ms of a call over 10^5 sequences.
  if (n <= size) return(if (n > 0) list(seq_len(n)) else list())
  unname(split(seq_len(n), ceiling(seq_len(n) / size)))
}

# Largest chunk sent to a worker, in bytes of data: well below future's
# default limit on the globals of one future (500 MiB, option
# future.globals.maxSize), and small enough that a worker holds little.
MAX_CHUNK_BYTES <- 128 * 2^20

#' Items per chunk for parallel = "future"
#'
#' About `per_worker` chunks per worker, so that a faster worker (a GPU node
#' next to CPU nodes) takes more of them and progress moves; fewer when a
#' chunk would do less than `min_work` (a future costs tens of milliseconds
#' to send, start and collect: measured 70-115 ms per future on 2 busy
#' cores); more when the data would make a chunk larger than
#' `MAX_CHUNK_BYTES`.
#'
#' @param n Number of items.
#' @param bytes Size of all the items' data, in bytes.
#' @param work,min_work The job's work and the least worth a chunk, in the
#'   caller's unit (bulkem: observation-iterations).
#' @param workers Number of future workers.
#' @noRd
future_chunk_size <- function(n, bytes, work = Inf, min_work = 0,
                              workers = future::nbrOfWorkers(), per_worker = 4) {
  workers <- if (is.finite(workers)) max(1, workers) else n
  chunks <- min(per_worker * workers, max(1, floor(work / min_work)))
  chunks <- max(chunks, ceiling(bytes / MAX_CHUNK_BYTES))
  as.integer(ceiling(n / min(n, chunks)))
}

#' Run `fun` over chunks, here or on future workers
#'
#' @param chunks A list of integer index vectors (from `chunk_indices()`).
#' @param fun `function(part, idx, args)`, run once per chunk (on a worker
#'   with `parallel = "future"`); a namespace function, see above.
#' @param slice `function(idx)`, run on the caller: what chunk `idx` needs
#'   (e.g. `datasets[idx]`); only this is sent to the worker.
#' @param args Settings shared by every chunk (sent to every worker: keep
#'   them small).
#' @param parallel `"none"` or `"future"`.
#' @param progress `NULL` or a callback from `make_progress()`, called with
#'   `length(idx)` after each chunk, on the worker (progressr relays it).
#' @param what Plural noun for the items in error messages ("datasets").
#' @param on_error `function(msg, where)` raising the caller's error for a
#'   chunk's R error `msg`; `where` names the chunk (a string).
#' @param on_lost `NULL` or `function(results, lost)` called when future
#'   workers were lost (a job cancelled or out of time, a dead process):
#'   `results` holds every finished chunk's result (`NULL` for the others),
#'   `lost` the future errors by chunk number. It should raise an error; by
#'   default the first loss is reported and nothing is kept.
#' @param done `NULL`, or results of an earlier call with the same chunks
#'   (`NULL` where a chunk is still to run): only the others run.
#' @return The list of `fun`'s results, one per chunk, in order.
#' @noRd
map_chunks <- function(chunks, fun, slice, args = list(), parallel = "none", progress = NULL,
                       what = "items", on_error, on_lost = NULL, done = NULL, call = parent.frame()) {
  results <- if (is.null(done)) vector("list", length(chunks)) else done
  todo <- which(vapply(results, is.null, logical(1)))
  make_job <- function(k) list(k = k, idx = chunks[[k]], part = slice(chunks[[k]]))
  if (parallel == "none") {
    # Stop at the first failing chunk (an interrupt, or invalid data).
    for (k in todo) {
      results[[k]] <- run_chunk(make_job(k), fun, args, progress)
      if (!is.null(results[[k]]$error)) break
    }
  } else {
    check_future_installed(call)
    ran <- run_futures(todo, make_job, fun, args, progress)
    results[todo] <- ran$results[todo]
    if (length(ran$lost) > 0) {
      lost <- ran$lost[order(as.integer(names(ran$lost)))]
      if (!is.null(on_lost)) on_lost(results, lost)
      worker_lost(lost[[1]], chunks, what, call, k = as.integer(names(lost)[1]))
    }
  }
  for (r in results) {
    if (!is.null(r) && !is.null(r$error)) {
      on_error(r$error, chunk_where(chunks, r$k, what, parallel))
    }
  }
  lapply(results, `[[`, "value")
}

# Chunks `todo` as one future each (`make_job(k)`: what chunk k is sent).
# A future whose worker is lost (a scheduler's job cancelled or out of
# time, a dead process) does not stop the others: every other chunk's
# result is collected. Returns the results (a list by chunk number, NULL
# for lost ones) and the losses (future errors named by chunk number).
run_futures <- function(todo, make_job, fun, args, progress) {
  lib <- bulkem_library()
  fun <- fun_name(fun)
  n <- max(c(0L, todo))
  futures <- results <- vector("list", n)
  lost <- list()
  lose <- function(k) function(e) {
    lost[[as.character(k)]] <<- e
    NULL
  }
  for (k in todo) {
    # future() waits for a free worker; a worker lost while starting the
    # future is that chunk's loss.
    futures[k] <- list(tryCatch(
      # Everything in one list: future leaves the functions inside it
      # (the progress callback and its progressor) as they are.
      future::future(quote(on_worker(x$job, x$fun, x$args, x$progress, x$lib)), substitute = FALSE,
                     globals = list(on_worker = on_worker,
                                    x = list(job = make_job(k), fun = fun, args = args, progress = progress, lib = lib)),
                     packages = character(), seed = FALSE, label = sprintf("bulkem-chunk-%d", k)),
      FutureError = lose(k)
    ))
  }
  for (k in todo) {
    if (!is.null(futures[[k]])) results[k] <- list(tryCatch(future::value(futures[[k]]), FutureError = lose(k)))
  }
  list(results = results, lost = lost)
}

# What a future runs. Workers load bulkem from the library this session
# loaded it from (`library(bulkem, lib.loc = ".lib")` puts it on no
# search path the workers inherit), so nothing sent to them may refer to
# the bulkem namespace before this runs: it lives in the base environment,
# gets the chunk's function by name, and the progress callback is made
# the same way (progress_callback()).
on_worker <- local(function(job, fun, args, progress, lib) {
  ns <- tryCatch(loadNamespace("bulkem", lib.loc = c(lib, .libPaths())), error = function(e) e)
  if (inherits(ns, "error")) {
    return(list(k = job$k, error = paste0(
      "[bulkem_error_worker] This worker could not load bulkem (", conditionMessage(ns), "). ",
      "Workers must be able to load bulkem: install it where they look (here: ",
      paste(c(lib, .libPaths()), collapse = ", "), ")."
    )))
  }
  ns$run_chunk(job, if (is.character(fun)) get(fun, envir = ns) else fun, args, progress)
}, envir = baseenv())

# A chunk function of this namespace goes to workers by name; any other
# (tests) as itself.
fun_name <- function(fun) {
  ns <- asNamespace("bulkem")
  for (name in ls(ns, all.names = TRUE)) {
    if (identical(get(name, envir = ns), fun)) return(name)
  }
  fun
}

# The library bulkem was loaded from.
bulkem_library <- function() normalizePath(dirname(getNamespaceInfo("bulkem", "path")), mustWork = FALSE)

# Runs where the chunk runs: `fun` on the chunk, its error kept as a value.
run_chunk <- function(job, fun, args, progress) {
  out <- tryCatch(
    list(k = job$k, value = fun(job$part, job$idx, args)),
    error = function(e) list(k = job$k, error = tagged_message(e))
  )
  if (!is.null(progress) && is.null(out$error)) progress(length(job$idx))
  out
}

# A chunk's error as a message that keeps its kind: core errors carry the
# "[bulkem_error_<kind>] " tag already; an R-side bulkem error (raised on a
# worker by an argument check) gets its class as the tag, so core_error()
# raises it with the same class on the caller.
tagged_message <- function(e) {
  msg <- conditionMessage(e)
  if (inherits(e, "bulkem_error") && !grepl("^\\[bulkem_error_[a-z]+\\] ", msg)) {
    msg <- paste0("[", class(e)[1], "] ", msg)
  }
  msg
}

# "chunk 2 of 8 (datasets 251-500)"
chunk_where <- function(chunks, k, what, parallel) {
  idx <- chunks[[k]]
  range <- if (length(idx) == 1) idx else paste0(min(idx), "-", max(idx))
  where <- sprintf("chunk %d of %d (%s %s)", k, length(chunks), what, range)
  if (parallel == "future") paste(where, "on a future worker") else where
}

# A worker that died, or could not run its future (e.g. bulkem is not
# installed there). future names the failed future by its label when it
# knows it.
worker_lost <- function(e, chunks, what, call, k = NULL) {
  msg <- conditionMessage(e)
  if (is.null(k)) {
    label <- regmatches(msg, regexec("bulkem-chunk-([0-9]+)", msg))[[1]]
    if (length(label) == 2) k <- as.integer(label[2])
  }
  where <- if (!is.null(k) && k <= length(chunks)) {
    chunk_where(chunks, k, what, "none")
  } else {
    sprintf("one of %d chunks (%s 1-%d)", length(chunks), what, max(unlist(chunks)))
  }
  hint <- if (grepl("package called", msg, fixed = TRUE)) {
    "Workers must be able to load bulkem: install it in a library on their {.fn .libPaths}."
  } else {
    "A worker process may have died (e.g. out of memory): a smaller chunk size needs less memory per worker."
  }
  bulkem_abort(c(
    "A future worker failed while running {where}; no results were kept.",
    x = "{msg}",
    i = hint
  ), "worker", call = call)
}

check_future_installed <- function(call) {
  if (!requireNamespace("future", quietly = TRUE)) {
    bulkem_abort(c(
      "{.code parallel = \"future\"} needs the {.pkg future} package.",
      i = "Install it (e.g. {.code install.packages(\"future\")}), or use {.code parallel = \"none\"}."
    ), call = call)
  }
}

# Bind chunks' results field by field (each a list of vectors or lists).
bind_chunks <- function(parts) {
  if (length(parts) == 1) return(parts[[1]])
  fields <- names(parts[[1]])
  stats::setNames(lapply(fields, function(f) do.call(c, lapply(parts, `[[`, f))), fields)
}

# Where the chunks run, for map_chunks()'s `args`. In this session the
# backend ("cpu", "cuda" or "auto": the area picks by job size) and threads
# (`threads`, when the caller has read them) are fixed here; future
# workers get what they need to choose their own (chunk_exec()), since a
# worker may have GPUs or cores this machine lacks.
exec_settings <- function(parallel, use.gpu, call, threads = NULL) {
  if (parallel == "none") {
    return(list(backend = resolve_backend(use.gpu, call), threads = threads %||% cpu_threads()))
  }
  check_future_installed(call)
  list(use.gpu = use.gpu, hosts = worker_hosts(), worker_threads = worker_threads_option(call))
}

# Backend and threads for a chunk, where it runs (settings `s` from
# exec_settings()). On a worker, use.gpu = TRUE without a GPU is an error of
# that chunk; the one-time CPU message is not repeated by every worker.
chunk_exec <- function(s) {
  if (!is.null(s$backend)) return(list(backend = s$backend, threads = s$threads))
  list(backend = resolve_backend(s$use.gpu, call = NULL, quiet = TRUE),
       threads = worker_threads(s$worker_threads, s$hosts))
}

# Option bulkem.worker.threads: CPU threads of every future worker, or NULL.
worker_threads_option <- function(call) {
  opt <- getOption("bulkem.worker.threads")
  if (is.null(opt)) return(NULL)
  threads <- check_count(opt, "options(bulkem.worker.threads)", call = call)
  # The core refuses more than 8 per core; a worker may have more cores than
  # this machine, so only counts no machine would run are refused here.
  if (threads > 4096) {
    bulkem_abort(c(
      "{.code options(bulkem.worker.threads)} must be at most 4096.",
      x = "It is {threads}."
    ), call = call)
  }
  threads
}

# CPU threads for the core on a future worker. Option bulkem.worker.threads
# on the caller fixes it; else option bulkem.threads set on the worker; else
# the cores the worker's job or session was given (a scheduler's
# allotment: cpu_allotment()) shared among the workers on its machine (`hosts`: how
# many workers each machine runs, from worker_hosts()). future itself sets
# mc.cores = 1 on workers to stop nested R-level parallelism; the core's
# threads are accounted for here instead.
worker_threads <- function(fixed, hosts) {
  if (!is.null(fixed)) return(fixed)
  if (!is.null(getOption("bulkem.threads"))) return(cpu_threads())
  share <- hosts[Sys.info()[["nodename"]]]
  if (length(share) != 1 || is.na(share)) share <- 1L
  as.integer(min(max(1L, cpu_allotment(worker = TRUE)$cores %/% share), thread_limits()))
}

# Workers per machine (named by node name) of the current plan, as far as
# it can be known: multisession, multicore and callr workers all run here;
# a cluster's nodes say where they run. Machines not listed (e.g. jobs of an
# HPC scheduler) are assumed to run one worker each.
worker_hosts <- function() {
  here <- Sys.info()[["nodename"]]
  strategy <- future::plan("next")
  n <- future::nbrOfWorkers()
  if (inherits(strategy, c("multisession", "multicore", "uniprocess", "callr"))) {
    return(stats::setNames(as.integer(min(n, .Machine$integer.max)), here))
  }
  if (!inherits(strategy, "cluster")) return(integer(0))
  workers <- formals(strategy)$workers
  hosts <- if (inherits(workers, "cluster")) {
    vapply(workers, function(node) {
      name <- node$session_info$system$nodename
      if (is.character(name) && length(name) == 1) name else as.character(node$host)[1]
    }, character(1))
  } else if (is.character(workers)) {
    workers
  } else {
    # The default, availableWorkers(): this machine unless a scheduler says
    # otherwise.
    rep(here, n)
  }
  hosts[hosts %in% c("localhost", "127.0.0.1", "")] <- here
  c(table(hosts))
}
