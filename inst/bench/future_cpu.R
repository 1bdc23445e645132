# CPU benchmark of bulkem(parallel = "future") on local multisession
# workers against parallel = "none" (issue 7: 2,000 datasets x 2,000
# observations x 10 starts, 2-component inverse Gaussian, 100 iterations with
# epsilon = 0, so every configuration does the same work).
#
#   Rscript inst/bench/future_cpu.R [datasets] [n] [starts] [iters]
#
# Configurations (threads are the core's CPU threads per process):
#   none, all cores      parallel = "none" in this session
#   none, 1 thread       options(bulkem.threads = 1)
#   future 1 x 1 thread  1 worker, options(bulkem.worker.threads = 1)
#   future 1 x default   1 worker, default threads (its machine's cores)
#   future 2 x default   2 workers, default threads (cores / 2 each), on a
#                        PSOCK cluster and on multisession workers
# Worker start-up (plan() and a first call that loads bulkem on each worker)
# is timed separately; the figures are the best of `reps` calls. Every result
# is checked identical to the sequential one.
library(bulkem)
args <- as.integer(commandArgs(trailingOnly = TRUE))
opt <- function(i, default) if (length(args) >= i && !is.na(args[i])) args[i] else default
D <- opt(1, 2000L); n <- opt(2, 2000L); S <- opt(3, 10L); iters <- opt(4, 100L)
reps <- 2L

set.seed(2015)
data <- replicate(D, rinvgaussmix(n, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
work <- as.double(D) * n * S * iters
cores <- bulkem_backends()$threads[1]
fit <- function(...) {
  bulkem(data, random.inits = S, max.iters = iters, epsilon = 0, seed = 1, use.gpu = FALSE, ...)
}
strip <- function(f) { f <- unclass(f); attributes(f) <- list(names = names(f)); f }
best <- function(expr_fun) {
  times <- vapply(seq_len(reps), function(i) system.time(res <<- expr_fun())[["elapsed"]], 0)
  list(time = min(times), result = res)
}
res <- NULL
rows <- list()
add <- function(name, workers, threads, b, startup = NA_real_) {
  rows[[length(rows) + 1]] <<- data.frame(
    config = name, workers = workers, threads_each = threads, seconds = b$time,
    core_seconds = attr(b$result, "seconds"), startup_s = startup,
    obs_iter_per_s = work / b$time, stringsAsFactors = FALSE
  )
}

invisible(bulkem(data[1:4], random.inits = 2, use.gpu = FALSE))  # warm-up
b <- best(function() fit())
reference <- strip(b$result)
add("none, all cores", 0, cores, b)
old <- options(bulkem.threads = 1)
add("none, 1 thread", 0, 1, best(function() fit()))
options(old)

# plan(multisession, workers = 1) would run in this session (future treats
# one worker as sequential), so the 1-worker cases use a PSOCK cluster of
# one localhost worker: the same kind of worker that multisession starts.
run_future <- function(name, workers, worker_threads = NULL, type = "multisession") {
  old <- options(bulkem.worker.threads = worker_threads)
  on.exit(options(old))
  cl <- NULL
  startup <- system.time({
    if (type == "multisession") {
      future::plan(future::multisession, workers = workers)
    } else {
      cl <- parallelly::makeClusterPSOCK(workers, rscript_libs = .libPaths())
      future::plan(future::cluster, workers = cl)
    }
    invisible(bulkem(data[seq_len(2 * workers)], random.inits = 2, use.gpu = FALSE,
                     parallel = "future", chunk.size = 1))
  })[["elapsed"]]
  b <- best(function() fit(parallel = "future"))
  stopifnot(identical(strip(b$result), reference))
  add(paste0(name, " (", type, ", ", attr(b$result, "chunks"), " chunks)"), workers,
      attr(b$result, "threads"), b, startup)
  future::plan(future::sequential)
  if (!is.null(cl)) parallel::stopCluster(cl)
}
run_future("future 1 x 1 thread", 1, 1L, type = "cluster")
run_future("future 1 x default", 1, type = "cluster")
run_future("future 2 x default", 2, type = "cluster")
run_future("future 2 x default", 2)

tab <- do.call(rbind, rows)
cat(sprintf("machine: %s, %d cores; R %s; future %s, future.apply %s; %s\n",
            Sys.info()[["nodename"]], parallel::detectCores(), getRversion(),
            utils::packageVersion("future"), utils::packageVersion("future.apply"),
            format(Sys.time(), "%Y-%m-%d %H:%M")))
cat(sprintf("case: %d datasets x %d obs x %d starts x %d iterations (%.2g obs-iter); best of %d calls\n",
            D, n, S, iters, work, reps))
print(transform(tab, seconds = round(seconds, 2), core_seconds = round(core_seconds, 2),
                startup_s = round(startup_s, 2), obs_iter_per_s = signif(obs_iter_per_s, 3)),
      row.names = FALSE)
t <- stats::setNames(tab$seconds, sub(" \\(.*", "", tab$config))
two <- tab$seconds[grepl("^future 2 .*multisession", tab$config)]
cat(sprintf("speed-up, 2 workers (1 thread each) vs 1 worker (1 thread): %.2fx (multisession), %.2fx (PSOCK cluster)\n",
            t[["future 1 x 1 thread"]] / two, t[["future 1 x 1 thread"]] / t[["future 2 x default"]]))
cat(sprintf("overhead, 2 multisession workers vs parallel = \"none\" on all cores: %+.2f s (%+.1f%%)\n",
            two - t[["none, all cores"]], 100 * (two / t[["none, all cores"]] - 1)))
cat(sprintf("overhead, 1 worker (1 thread) vs parallel = \"none\" on 1 thread: %+.2f s (%+.1f%%)\n",
            t[["future 1 x 1 thread"]] - t[["none, 1 thread"]],
            100 * (t[["future 1 x 1 thread"]] / t[["none, 1 thread"]] - 1)))
cat("results identical to parallel = \"none\" in every configuration\n")
