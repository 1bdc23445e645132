# CPU benchmark of bulkem(parallel = "future") on local workers against
# parallel = "none" (issue 7: 2,000 datasets x 2,000 observations x 10
# starts, 2-component inverse Gaussian, 100 iterations with epsilon = 0, so
# every configuration does the same work).
#
#   Rscript inst/bench/future_cpu.R [datasets] [n] [starts] [iters] [rounds]
#
# Configurations (threads: the core's CPU threads per process):
#   none, all cores        parallel = "none" in this session
#   none, 1 thread         options(bulkem.threads = 1)
#   future 1 x 1 thread    1 worker, options(bulkem.worker.threads = 1)
#   future 1 x default     1 worker, default threads (its machine's cores)
#   future 2 x default     2 workers, default threads (cores / 2 each)
# The workers are PSOCK localhost workers (what plan(multisession) starts;
# plan(multisession, workers = 1) would run in this session, since future
# treats one worker as sequential), started once and timed separately (with
# a first call that loads bulkem on them). The configurations are run in
# turn, `rounds` times, so that load from other processes hits them alike;
# the table gives the fastest and the median round. At the end, 2 workers of
# plan(multisession) once more. Every result is checked identical to the
# sequential one.
library(bulkem)
args <- as.integer(commandArgs(trailingOnly = TRUE))
opt <- function(i, default) if (length(args) >= i && !is.na(args[i])) args[i] else default
D <- opt(1, 2000L); n <- opt(2, 2000L); S <- opt(3, 10L); iters <- opt(4, 100L); rounds <- opt(5, 3L)

set.seed(2015)
data <- replicate(D, rinvgaussmix(n, c(0.3, 0.7), c(1, 3), c(30, 0.2)), simplify = FALSE)
work <- as.double(D) * n * S * iters
cores <- bulkem_backends()$threads[1]
strip <- function(f) { f <- unclass(f); attributes(f) <- list(names = names(f)); f }
fit <- function(...) {
  bulkem(data, random.inits = S, max.iters = iters, epsilon = 0, seed = 1, use.gpu = FALSE, ...)
}

invisible(bulkem(data[1:4], random.inits = 2, use.gpu = FALSE))  # warm-up
reference <- strip(fit())

startup <- function(workers) {
  cl <- NULL
  t <- system.time({
    cl <- parallelly::makeClusterPSOCK(workers, rscript_libs = .libPaths())
    future::plan(future::cluster, workers = cl)
    invisible(bulkem(data[seq_len(2 * workers)], random.inits = 2, use.gpu = FALSE,
                     parallel = "future", chunk.size = 1))
  })[["elapsed"]]
  list(cl = cl, seconds = t)
}
w1 <- startup(1)
w2 <- startup(2)

configs <- list(
  "none, all cores" = list(parallel = "none"),
  "none, 1 thread" = list(parallel = "none", threads = 1),
  "future 1 x 1 thread" = list(cl = w1$cl, worker_threads = 1),
  "future 1 x default" = list(cl = w1$cl),
  "future 2 x default" = list(cl = w2$cl)
)
# CPU seconds (user + system, children's threads included) of this process
# and of each worker: the machine is shared, so wall times carry other
# processes' load, while CPU seconds show the work and the overhead.
cpu_here <- function() sum(proc.time()[c("user.self", "sys.self")])
cpu_workers <- function(cl) {
  vapply(parallel::clusterEvalQ(cl, sum(proc.time()[c("user.self", "sys.self")])), identity, 0)
}
run <- function(cfg) {
  old <- options(bulkem.threads = cfg$threads, bulkem.worker.threads = cfg$worker_threads)
  on.exit(options(old))
  c0 <- cpu_here()
  if (is.null(cfg$cl)) {
    w <- 0
    t <- system.time(res <- fit())[["elapsed"]]
  } else {
    future::plan(future::cluster, workers = cfg$cl)
    w0 <- cpu_workers(cfg$cl)
    c0 <- cpu_here()
    t <- system.time(res <- fit(parallel = "future"))[["elapsed"]]
    w <- cpu_workers(cfg$cl) - w0
  }
  caller <- cpu_here() - c0
  stopifnot(identical(strip(res), reference))
  list(seconds = t, caller_cpu = caller, worker_cpu = w, threads = attr(res, "threads"),
       chunks = if (is.null(attr(res, "chunks"))) NA else attr(res, "chunks"))
}
times <- matrix(NA_real_, rounds, length(configs), dimnames = list(NULL, names(configs)))
info <- list()
cpu <- list()
for (r in seq_len(rounds)) {
  for (name in names(configs)) {
    out <- run(configs[[name]])
    times[r, name] <- out$seconds
    info[[name]] <- out
    cpu[[name]] <- rbind(cpu[[name]], c(caller = out$caller_cpu, workers = sum(out$worker_cpu),
                                        busiest_worker = max(out$worker_cpu)))
  }
}
future::plan(future::sequential)
parallel::stopCluster(w1$cl)
parallel::stopCluster(w2$cl)

# plan(multisession), 2 workers, once.
t_ms_start <- system.time({
  future::plan(future::multisession, workers = 2)
  invisible(bulkem(data[1:4], random.inits = 2, use.gpu = FALSE, parallel = "future", chunk.size = 1))
})[["elapsed"]]
t_ms <- system.time(res <- fit(parallel = "future"))[["elapsed"]]
stopifnot(identical(strip(res), reference))
future::plan(future::sequential)

cat(sprintf("machine: %s, %d cores; R %s; future %s, future.apply %s; %s\n",
            Sys.info()[["nodename"]], parallel::detectCores(), getRversion(),
            utils::packageVersion("future"), utils::packageVersion("future.apply"),
            format(Sys.time(), "%Y-%m-%d %H:%M")))
cat(sprintf("case: %d datasets x %d obs x %d starts x %d iterations (%.2g obs-iter), %d rounds\n",
            D, n, S, iters, work, rounds))
workers <- c(0, 0, 1, 1, 2)
tab <- data.frame(
  config = names(configs), workers = workers,
  threads_each = vapply(info, `[[`, 0, "threads"),
  chunks = vapply(info, `[[`, 0, "chunks"),
  fastest_s = round(apply(times, 2, min), 2),
  median_s = round(apply(times, 2, stats::median), 2),
  all_rounds_s = apply(times, 2, function(t) paste(sprintf("%.2f", t), collapse = " ")),
  obs_iter_per_s = signif(work / apply(times, 2, min), 3),
  row.names = NULL, stringsAsFactors = FALSE
)
print(tab, row.names = FALSE)
cat("CPU seconds per call (fewest over the rounds): caller, all workers, busiest worker\n")
cpu_min <- t(vapply(cpu, function(m) apply(m, 2, min), numeric(3)))
print(round(cpu_min, 2))
cat(sprintf("load average at the end: %s\n", paste(readLines("/proc/loadavg"), collapse = "")))
cat(sprintf("worker start-up (PSOCK, incl. loading bulkem): 1 worker %.2f s, 2 workers %.2f s\n",
            w1$seconds, w2$seconds))
cat(sprintf("plan(multisession, workers = 2): start-up %.2f s, call %.2f s\n", t_ms_start, t_ms))
m <- apply(times, 2, min)
cat(sprintf("speed-up, 2 workers (1 thread each) vs 1 worker (1 thread): %.2fx (fastest rounds)\n",
            m[["future 1 x 1 thread"]] / m[["future 2 x default"]]))
cat(sprintf("overhead, 2 workers vs parallel = \"none\" on all cores: %+.2f s (%+.1f%%)\n",
            m[["future 2 x default"]] - m[["none, all cores"]],
            100 * (m[["future 2 x default"]] / m[["none, all cores"]] - 1)))
cat(sprintf("overhead, 1 worker (1 thread) vs parallel = \"none\" on 1 thread: %+.2f s (%+.1f%%)\n",
            m[["future 1 x 1 thread"]] - m[["none, 1 thread"]],
            100 * (m[["future 1 x 1 thread"]] / m[["none, 1 thread"]] - 1)))
cp <- cpu_min[, "caller"] + cpu_min[, "workers"]
cat(sprintf("CPU overhead, 2 workers vs parallel = \"none\" (1 thread): %+.2f CPU s (%+.1f%%); caller %.2f CPU s\n",
            cp[["future 2 x default"]] - cp[["none, 1 thread"]],
            100 * (cp[["future 2 x default"]] / cp[["none, 1 thread"]] - 1), cpu_min["future 2 x default", "caller"]))
cat(sprintf("speed-up on 2 idle cores from CPU seconds (1 x 1 thread: all worker CPU; 2 workers: busiest worker + caller): %.2fx\n",
            cp[["future 1 x 1 thread"]] /
              (cpu_min["future 2 x default", "busiest_worker"] + cpu_min["future 2 x default", "caller"])))
cat("results identical to parallel = \"none\" in every configuration\n")
