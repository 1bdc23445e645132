# parallel = "future": real separate R processes on this machine. Workers
# load the bulkem under test from the caller's library paths (R CMD check
# installs it in a temporary library on .libPaths()).

skip_if_no_future <- function() {
  skip_on_cran()
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  skip_if_not_installed("parallelly")
}

# A PSOCK cluster stopped by on.exit() in the calling test. Not autoStop:
# its finalizer stops the cluster again at some later garbage collection,
# and by then R may have given a closed node's connection number to a
# worker of the next test, whose connection it would close. Each node is
# stopped on its own, so a dead node does not leave the others running.
local_cluster <- function(n, libs = .libPaths(), envir = parent.frame()) {
  cl <- parallelly::makeClusterPSOCK(n, rscript_libs = libs, autoStop = FALSE)
  do.call(on.exit, list(bquote(stop_nodes(.(cl))), add = TRUE), envir = envir)
  cl
}

stop_nodes <- function(cl) {
  for (i in seq_along(cl)) try(parallel::stopCluster(cl[i]), silent = TRUE)
}

# 40 datasets, two that cannot be fitted (too few observations, constant).
future_data <- function() {
  set.seed(7)
  d <- sim_ig(40, 200)
  d[[7]] <- c(1, 2)
  d[[31]] <- rep(3, 50)
  names(d) <- paste0("d", seq_along(d))
  d
}

test_that("chunks are contiguous, cover every item once, and are sized from workers and data", {
  expect_identical(chunk_indices(10, 4), list(1:4, 5:8, 9:10))
  expect_identical(chunk_indices(3, 10), list(1:3))
  # One chunk (taken without split()) and none, as split() gives them.
  expect_identical(chunk_indices(5, 5), list(1:5))
  expect_identical(chunk_indices(0, 5), unname(split(integer(), integer())))
  expect_identical(unlist(chunk_indices(1001, 7)), seq_len(1001))
  # About 4 chunks per worker ...
  expect_equal(future_chunk_size(2000, 8 * 2000 * 2000, workers = 2), 250)
  expect_equal(future_chunk_size(5, 100, workers = 8), 1)
  expect_equal(future_chunk_size(100, 800, workers = Inf), 1)
  # ... fewer when chunks would do too little work ...
  expect_equal(future_chunk_size(2000, 8 * 2000 * 2000, work = 1e9, min_work = 2e8, workers = 2), 400)
  expect_equal(future_chunk_size(40, 8 * 40 * 200, work = 1e6, min_work = 2e8, workers = 2), 40)
  # ... more when a chunk would exceed 128 MiB of data.
  expect_equal(future_chunk_size(1e6, 8 * 1e6 * 2000, work = 1e13, min_work = 2e8, workers = 8),
               ceiling(1e6 / 120))
})

test_that("map_chunks sends each chunk its slice and names the chunk that failed", {
  chunks <- chunk_indices(10, 4)
  seen <- map_chunks(chunks, function(part, idx, args) list(part = part, idx = idx, k = args$k),
                     slice = function(idx) letters[idx], args = list(k = 3), on_error = stop)
  expect_identical(lapply(seen, `[[`, "part"), list(letters[1:4], letters[5:8], letters[9:10]))
  expect_identical(lapply(seen, `[[`, "idx"), chunks)
  ran <- integer(0)
  expect_error(
    map_chunks(chunks, function(part, idx, args) {
      ran <<- c(ran, idx)
      if (7 %in% idx) stop("boom") else idx
    }, slice = identity, what = "sequences",
    on_error = function(msg, where) stop(paste0(msg, " in ", where), call. = FALSE)),
    "boom in chunk 2 of 3 \\(sequences 5-8\\)"
  )
  # In this session the first failing chunk stops the work.
  expect_identical(ran, 1:8)
})

test_that("what goes to every worker does not carry the caller's data", {
  # Chunk functions are sent by name, the worker function and the progress
  # callback refer to no namespace (a worker loads bulkem itself first) ...
  expect_identical(fun_name(em_chunk), "em_chunk")
  expect_identical(environment(on_worker), baseenv())
  # ... and the progress callback holds only its progressor.
  skip_if_not_installed("progressr")
  made_in_a_big_frame <- function() {
    big <- runif(1e6)
    make_progress(10)
  }
  expect_lt(length(serialize(made_in_a_big_frame(), NULL)), 1e5)
})

test_that("R CMD check's core limit and OMP_THREAD_LIMIT bound the threads", {
  old <- Sys.getenv(c("_R_CHECK_LIMIT_CORES_", "OMP_THREAD_LIMIT"), unset = NA)
  on.exit(for (v in names(old)) if (is.na(old[[v]])) Sys.unsetenv(v) else do.call(Sys.setenv, as.list(old[v])))
  opt <- options(bulkem.threads = NULL)
  on.exit(options(opt), add = TRUE)
  Sys.unsetenv(c("_R_CHECK_LIMIT_CORES_", "OMP_THREAD_LIMIT"))
  cores <- backends_()$cpu_threads
  expect_equal(cpu_threads(), cores)
  Sys.setenv(`_R_CHECK_LIMIT_CORES_` = "TRUE")
  expect_equal(cpu_threads(), min(2L, cores))
  expect_match(bulkem_backends()$detail[1], "limited by _R_CHECK_LIMIT_CORES_")
  options(bulkem.threads = 8)
  expect_equal(cpu_threads(), 2L)
  Sys.setenv(`_R_CHECK_LIMIT_CORES_` = "false", OMP_THREAD_LIMIT = "1")
  expect_equal(cpu_threads(), 1L)
  expect_equal(worker_threads(NULL, c(elsewhere = 1L)), 1L)
  Sys.unsetenv("OMP_THREAD_LIMIT")
  expect_equal(cpu_threads(), 8L)
})

# `expr` with options(bulkem.threads = n).
withr_threads <- function(n, expr) {
  old <- options(bulkem.threads = n)
  on.exit(options(old))
  expr
}

test_that("the threads are what the session was given: a Slurm job's CPUs, mc.cores", {
  skip_if_not_installed("parallelly")
  skip_if(backends_()$cpu_threads < 2, "one core: every allotment is all of it")
  vars <- c("SLURM_CPUS_PER_TASK", "_R_CHECK_LIMIT_CORES_", "OMP_THREAD_LIMIT")
  old <- Sys.getenv(vars, unset = NA)
  on.exit(for (v in names(old)) if (is.na(old[[v]])) Sys.unsetenv(v) else do.call(Sys.setenv, as.list(old[v])))
  opt <- options(bulkem.threads = NULL, mc.cores = NULL)
  on.exit(options(opt), add = TRUE)
  Sys.unsetenv(vars)
  cores <- backends_()$cpu_threads
  expect_match(bulkem_backends()$detail[1], sprintf("^%d of %d cores: every core", cores, cores))
  # sbatch --cpus-per-task=1 sets SLURM_CPUS_PER_TASK.
  Sys.setenv(SLURM_CPUS_PER_TASK = "1")
  expect_equal(cpu_threads(), 1L)
  expect_equal(bulkem_backends()$threads[1], 1L)
  expect_match(bulkem_backends()$detail[1], sprintf("^1 of %d cores: Slurm allotment", cores))
  # A future worker in that job: its share of the job's CPUs.
  expect_equal(worker_threads(NULL, c(elsewhere = 1L)), 1L)
  x <- c(rnorm(100), rnorm(100, 5))
  fit <- function() coef(bulkem(x, family = "normal", num.components = 2, random.inits = 2, seed = 1, use.gpu = FALSE))
  expect_identical(fit(), withr_threads(2L, fit()))
  Sys.unsetenv("SLURM_CPUS_PER_TASK")
  options(mc.cores = 1)
  expect_equal(cpu_threads(), 1L)
  expect_match(bulkem_backends()$detail[1], "option mc.cores")
  # future sets mc.cores = 1 on its workers: not an allotment there.
  expect_equal(worker_threads(NULL, c(elsewhere = 1L)), cores)
  options(bulkem.threads = 2)
  expect_equal(cpu_threads(), 2L)
  expect_match(bulkem_backends()$detail[1], "2 of [0-9]+ cores: option bulkem.threads")
})

test_that("the workers of a machine share its cores", {
  cores <- bulkem_backends()$threads[1]
  here <- Sys.info()[["nodename"]]
  old <- options(bulkem.threads = NULL)
  on.exit(options(old))
  expect_equal(worker_threads(NULL, stats::setNames(2L, here)), max(1L, cores %/% 2L))
  expect_equal(worker_threads(NULL, c(elsewhere = 4L)), cores)
  expect_equal(worker_threads(3L, stats::setNames(2L, here)), 3L)
  options(bulkem.threads = 1)
  expect_equal(worker_threads(NULL, c(elsewhere = 1L)), 1L)
})

test_that("multisession workers give the sequential result, failed fits included", {
  skip_if_no_future()
  d <- future_data()
  seq_fits <- bulkem(d, random.inits = 3, seed = 11, use.gpu = FALSE, keep.posterior = TRUE)

  old_plan <- future::plan(future::multisession, workers = 2)
  on.exit(future::plan(old_plan), add = TRUE)
  expect_equal(future::nbrOfWorkers(), 2)
  expect_equal(worker_hosts(), stats::setNames(2L, Sys.info()[["nodename"]]))

  fut <- bulkem(d, random.inits = 3, seed = 11, use.gpu = FALSE, keep.posterior = TRUE,
                parallel = "future", chunk.size = 5)
  expect_identical(fits_only(fut), fits_only(seq_fits))
  expect_equal(attr(fut, "workers"), 2)
  expect_equal(attr(fut, "chunks"), 8)
  # Without chunk.size, so little work makes one chunk.
  one <- bulkem(d, random.inits = 3, seed = 11, use.gpu = FALSE, parallel = "future")
  expect_equal(attr(one, "chunks"), 1)
  expect_identical(fits_only(one), fits_only(bulkem(d, random.inits = 3, seed = 11, use.gpu = FALSE)))
  expect_equal(attr(fut, "backend"), "cpu")
  expect_equal(attr(fut, "threads"), max(1L, bulkem_backends()$threads[1] %/% 2L))
  # The datasets that cannot be fitted are reported where they were.
  expect_identical(unname(which(!vapply(fut, `[[`, TRUE, "fit_success"))), c(7L, 31L))
  expect_match(fut[[7]]$message, "at least 5")

  # Any chunking, the seed drawn by R once on the caller.
  set.seed(3)
  a <- bulkem(d, random.inits = 2, use.gpu = FALSE, parallel = "future", chunk.size = 7)
  set.seed(3)
  b <- bulkem(d, random.inits = 2, use.gpu = FALSE)
  expect_identical(fits_only(a), fits_only(b))
  expect_equal(attr(a, "chunks"), 6)

  # Starting values given per dataset go with their datasets.
  inits <- lapply(seq_along(d), function(i) list(alpha = c(0.5, 0.5), mu = c(1, 2 + i / 40), lambda = c(1, 1)))
  expect_identical(
    fits_only(bulkem(d, inits = inits, use.gpu = FALSE, parallel = "future", chunk.size = 9)),
    fits_only(bulkem(d, inits = inits, use.gpu = FALSE))
  )
})

test_that("an error in one chunk names the chunk's datasets; progress comes from workers", {
  skip_if_no_future()
  d <- future_data()
  d[[23]][5] <- -1
  old_plan <- future::plan(future::multisession, workers = 2)
  on.exit(future::plan(old_plan), add = TRUE)
  err <- expect_error(
    bulkem(d, seed = 1, use.gpu = FALSE, parallel = "future", chunk.size = 5),
    "dataset 23 has an invalid value at position 5"
  )
  expect_match(conditionMessage(err), "chunk 5 of 8 \\(datasets 21-25\\) on a future worker")

  skip_if_not_installed("progressr")
  old <- options(progressr.enable = TRUE)
  on.exit(options(old), add = TRUE)
  steps <- 0
  withCallingHandlers(
    bulkem(d[-23], seed = 1, use.gpu = FALSE, parallel = "future", chunk.size = 6),
    progression = function(p) if (identical(p$type, "update")) steps <<- steps + p$amount
  )
  expect_equal(steps, 39)
})

test_that("a PSOCK cluster of 2 localhost workers gives the sequential result", {
  skip_if_no_future()
  d <- future_data()
  cl <- local_cluster(2)
  old_plan <- future::plan(future::cluster, workers = cl)
  on.exit(future::plan(old_plan), add = TRUE)
  # The nodes report where they run, so they share this machine's cores.
  expect_equal(worker_hosts(), stats::setNames(2L, Sys.info()[["nodename"]]))
  fut <- bulkem(d, num.components = 3, family = "normal", random.inits = 4, seed = 5,
                use.gpu = FALSE, parallel = "future", chunk.size = 11)
  expect_identical(fits_only(fut), fits_only(bulkem(d, num.components = 3, family = "normal",
                                                    random.inits = 4, seed = 5, use.gpu = FALSE)))
  expect_equal(attr(fut, "threads"), max(1L, bulkem_backends()$threads[1] %/% 2L))
})

test_that("workers load bulkem from the library this session loaded it from", {
  skip_if_no_future()
  skip_on_os("windows")
  # A worker whose library paths lack bulkem's library (but keep future's),
  # as after library(bulkem, lib.loc = ".lib"): started with an empty
  # environment, without the library variables R CMD check and the Makefile
  # set.
  others <- setdiff(normalizePath(.libPaths(), mustWork = FALSE), bulkem_library())
  cl <- parallelly::makeClusterPSOCK(
    1, rscript = c("env", "-i", paste0("PATH=", Sys.getenv("PATH")), paste0("HOME=", Sys.getenv("HOME")),
                   file.path(R.home("bin"), "Rscript")),
    rscript_libs = c(tempdir(), others), autoStop = FALSE
  )
  on.exit(stop_nodes(cl), add = TRUE)
  if (parallel::clusterEvalQ(cl, requireNamespace("bulkem", quietly = TRUE))[[1]]) {
    skip("bulkem is in a library every R session sees")
  }
  old_plan <- future::plan(future::cluster, workers = cl)
  on.exit(future::plan(old_plan), add = TRUE)
  d <- future_data()
  expect_equal(
    lapply(bulkem(d, use.gpu = FALSE, parallel = "future", seed = 1), coef),
    lapply(bulkem(d, use.gpu = FALSE, seed = 1), coef)
  )
})

test_that("a worker that cannot load bulkem gives an error saying so", {
  skip_on_cran()
  skip_if_not_installed("callr")
  # What a worker runs, in an R session that sees only R's own library,
  # where bulkem's library does not exist (another machine).
  out <- callr::r(
    function(on_worker, lib) on_worker(list(k = 3L), "em_chunk", list(), NULL, lib = lib),
    args = list(on_worker = on_worker, lib = file.path(tempdir(), "nowhere")),
    libpath = .Library, env = c(callr::rcmd_safe_env(), R_LIBS = "", R_LIBS_USER = "", R_LIBS_SITE = "")
  )
  if (is.null(out$error)) skip("bulkem is installed in R's own library")
  expect_equal(out$k, 3L)
  expect_match(out$error, "^\\[bulkem_error_worker\\] This worker could not load bulkem")
  expect_match(out$error, "Workers must be able to load bulkem")
  expect_identical(environment(on_worker), baseenv())
})

test_that("a worker process that dies is reported with its chunk", {
  skip_if_no_future()
  cl <- local_cluster(2)
  old_plan <- future::plan(future::cluster, workers = cl)
  on.exit(future::plan(old_plan), add = TRUE)
  # The worker running item 23 ends its own process.
  die <- function(part, idx, args) {
    if (23 %in% idx) tools::pskill(Sys.getpid())
    sum(part)
  }
  expect_error(
    map_chunks(chunk_indices(40, 5), die, slice = identity, parallel = "future", what = "datasets",
               on_error = stop),
    "A future worker failed while running chunk 5 of 8 \\(datasets 21-25\\).*may have died"
  )
})

# A plan of two PSOCK workers, the second gone before the call (a node
# lost): the chunks sent to it are lost, the others finish on the first.
# Undone (plan and workers) on exit of the caller.
local_half_lost_plan <- function(envir = parent.frame()) {
  cl <- local_cluster(2, envir = envir)
  try(parallel::clusterCall(cl[2], function() tools::pskill(Sys.getpid())), silent = TRUE)
  old_plan <- future::plan(future::cluster, workers = cl)
  do.call(on.exit, list(bquote(future::plan(.(old_plan))), add = TRUE), envir = envir)
}

test_that("a lost worker keeps the finished chunks, and resume = completes the call exactly", {
  skip_if_no_future()
  d <- future_data()
  seq_fits <- bulkem(d, random.inits = 3, seed = 11, use.gpu = FALSE)
  local_half_lost_plan()
  err <- expect_error(
    bulkem(d, random.inits = 3, seed = 11, use.gpu = FALSE, parallel = "future", chunk.size = 5),
    class = "bulkem_error_worker"
  )
  expect_match(conditionMessage(err), "A future worker failed while running chunk [0-9]+ of 8 \\(datasets [0-9]+-[0-9]+\\)")
  expect_match(conditionMessage(err), "resume = bulkem_partial()", fixed = TRUE)
  part <- bulkem_partial()
  expect_s3_class(part, "bulkem_partial")
  expect_identical(err$partial, part)
  finished <- !vapply(part$results, is.null, logical(1))
  expect_lt(sum(finished), 8)
  expect_output(print(part), sprintf("%d of 8 chunks finished", sum(finished)))
  # Completed on a healthy plan: only the missing chunks run, and the
  # result is that of one uninterrupted call.
  future::plan(future::sequential)
  fits <- bulkem(d, random.inits = 3, use.gpu = FALSE, parallel = "future", resume = part)
  expect_identical(coef(fits), coef(seq_fits))
  expect_identical(logLik(fits), logLik(seq_fits))
  expect_identical(attr(fits, "seed"), attr(seq_fits, "seed"))
  # Here too, and only for the same call.
  expect_identical(coef(bulkem(d, random.inits = 3, seed = 11, use.gpu = FALSE, resume = part)), coef(seq_fits))
  expect_error(bulkem(d, random.inits = 3, seed = 12, use.gpu = FALSE, resume = part), "other settings: .*seed")
  expect_error(bulkem(d, random.inits = 4, seed = 11, use.gpu = FALSE, resume = part), "other settings: .*random.inits")
  expect_error(bulkem(d[-1], random.inits = 3, seed = 11, use.gpu = FALSE, resume = part), "other data")
  expect_error(bulkem(d, random.inits = 3, seed = 11, use.gpu = FALSE, resume = list()), "bulkem_partial")
})

test_that("HMM passes, HMM fits and hbglm that lose a worker resume to the uninterrupted result", {
  skip_if_no_future()
  model <- hmm(c(0.6, 0.4), matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
               matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE))
  seqs <- hmm_simulate(model, 24, 5:28, seed = 3)
  post <- hmm_posterior(model, seqs, use.gpu = FALSE)
  fit <- hmm_fit(seqs, 2, 3, random.inits = 4, seed = 2, max.iters = 20, use.gpu = FALSE)
  set.seed(5)
  d <- data.frame(g = rep(1:6, each = 15), x = rnorm(90))
  d$y <- 1 + 0.5 * d$x + rep(rnorm(6, sd = 0.5), each = 15) + rnorm(90, sd = 0.3)
  args <- list(y ~ x, data = d, group = d$g, iter = 60, warmup = 30, chains = 4, seed = 11, use.gpu = FALSE)
  quiet <- function(expr) suppressWarnings(expr, classes = "bulkem_warning_rhat")
  draws <- quiet(do.call(hbglm, args))$draws

  local({
    local_half_lost_plan()
    err <- expect_error(hmm_posterior(model, seqs, use.gpu = FALSE, parallel = "future", chunk.size = 4),
                        class = "bulkem_error_worker")
    expect_match(conditionMessage(err), "of 6 \\(sequences [0-9]+-[0-9]+\\)")
    expect_output(print(bulkem_partial()), "A partial hmm_posterior\\(\\) result")
  })
  part <- bulkem_partial()
  expect_identical(hmm_posterior(model, seqs, use.gpu = FALSE, resume = part), post)
  expect_error(hmm_loglik(model, seqs, use.gpu = FALSE, resume = part), "partial result of .*hmm_posterior")
  expect_error(hmm_posterior(model, seqs[-1], use.gpu = FALSE, resume = part), "other data")

  local({
    local_half_lost_plan()
    expect_error(hmm_fit(seqs, 2, 3, random.inits = 4, seed = 2, max.iters = 20, use.gpu = FALSE,
                         parallel = "future", chunk.size = 1), class = "bulkem_error_worker")
  })
  part <- bulkem_partial()
  expect_identical(part$fn, "hmm_fit")
  resumed <- hmm_fit(seqs, 2, 3, random.inits = 4, max.iters = 20, use.gpu = FALSE, resume = part)
  expect_identical(resumed$model, fit$model)
  expect_identical(resumed$loglik, fit$loglik)
  expect_error(hmm_fit(seqs, 2, 3, random.inits = 4, max.iters = 21, use.gpu = FALSE, resume = part), "other settings")

  local({
    local_half_lost_plan()
    expect_error(quiet(do.call(hbglm, c(args, parallel = "future"))), class = "bulkem_error_worker")
  })
  part <- bulkem_partial()
  expect_identical(part$fn, "hbglm")
  expect_identical(quiet(do.call(hbglm, c(args, resume = list(part))))$draws, draws)
})

test_that("hbglm chains on future workers give the draws of one call", {
  skip_on_cran()
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  set.seed(5)
  d <- data.frame(g = rep(1:6, each = 15), x = rnorm(90))
  d$y <- 1 + 0.5 * d$x + rep(rnorm(6, sd = 0.5), each = 15) + rnorm(90, sd = 0.3)
  args <- list(y ~ x, data = d, group = d$g, iter = 60, warmup = 30, chains = 3, seed = 11, use.gpu = FALSE)
  # 60 iterations are too few to mix: the R-hat warning is expected here.
  quiet <- function(expr) suppressWarnings(expr, classes = "bulkem_warning_rhat")
  seq_fit <- quiet(do.call(hbglm, args))
  oplan <- future::plan(future::multisession, workers = 2)
  on.exit(future::plan(oplan), add = TRUE)
  par_fit <- quiet(do.call(hbglm, c(args, parallel = "future")))
  expect_identical(par_fit$draws, seq_fit$draws)
  expect_error(do.call(hbglm, modifyList(args, list(parallel = "cluster"))), "`parallel` must be one of")
})

test_that("HMM passes split by sequences over future workers give the sequential result", {
  skip_on_cran()
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  model <- hmm(c(0.6, 0.4), matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
               matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE))
  seqs <- hmm_simulate(model, 23, 5:27, seed = 3)
  seqs[[9]] <- c(1L, 3L)
  ll <- hmm_loglik(model, seqs, use.gpu = FALSE)
  vit <- hmm_viterbi(model, seqs, use.gpu = FALSE)
  post <- hmm_posterior(model, seqs, use.gpu = FALSE)
  # Chunking alone changes nothing.
  expect_identical(hmm_loglik(model, seqs, use.gpu = FALSE, chunk.size = 4), ll)
  oplan <- future::plan(future::multisession, workers = 2)
  on.exit(future::plan(oplan), add = TRUE)
  expect_identical(hmm_loglik(model, seqs, use.gpu = FALSE, parallel = "future", chunk.size = 5), ll)
  expect_identical(hmm_viterbi(model, seqs, use.gpu = FALSE, parallel = "future"), vit)
  expect_identical(hmm_posterior(model, seqs, use.gpu = FALSE, parallel = "future", chunk.size = 7), post)
})

test_that("an error raised on a future worker keeps its class on the caller", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  skip_if(any(bulkem_backends()$usable[-1]), "a GPU is usable here")
  oplan <- future::plan(future::sequential)
  on.exit(future::plan(oplan), add = TRUE)
  err <- expect_error(bulkem(list(c(1, 2, 3, 4, 5)), use.gpu = TRUE, parallel = "future"),
                      class = "bulkem_error_device")
  expect_match(conditionMessage(err), "no CUDA GPU is usable")
  expect_match(conditionMessage(err), "on a future worker")
})
