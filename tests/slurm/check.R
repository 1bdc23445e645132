# bulkem on a real Slurm through future.batchtools and the package's
# template (run by tests/slurm/run.sh, which starts the Slurm). Every call
# with at least 4 jobs equals parallel = "none"; a job of one CPU runs one
# thread; a job cancelled mid-run gives the classed error, and the resumed
# call submits only the missing chunks and equals an uninterrupted call.
# Prints the per-job overhead (submit to result of an empty future).
suppressPackageStartupMessages({
  library(bulkem)
  library(future)
})
checks <- 0L
check <- function(ok, what) {
  if (!isTRUE(ok)) stop("Slurm check failed: ", what, call. = FALSE)
  checks <<- checks + 1L
  cat("ok:", what, "\n")
}
quiet <- function(expr) suppressWarnings(expr)
slurm_plan <- function(ncpus = 1L, workers = 4L) {
  plan(future.batchtools::batchtools_slurm,
       template = system.file("templates", "slurm.tmpl", package = "bulkem"),
       resources = list(ncpus = ncpus, memory = 500, walltime = 600,
                        rscript = file.path(R.home("bin"), "Rscript")),
       workers = workers)
}
# Job ids Slurm has given so far (finished jobs stay listed for MinJobAge).
job_ids <- function() {
  out <- suppressWarnings(system2("scontrol", c("show", "jobs", "-o"), stdout = TRUE, stderr = FALSE))
  as.integer(sub("^JobId=([0-9]+) .*", "\\1", grep("^JobId=", out, value = TRUE)))
}
options(bulkem.threads = 1)
setwd(tempdir())  # the batchtools registries (.future/)
slurm_plan()

# Per-job overhead: an empty future, submit to value.
t0 <- Sys.time()
invisible(value(future(NULL)))
overhead <- as.numeric(Sys.time() - t0, units = "secs")
cat(sprintf("overhead of one Slurm job (submit to result of an empty future): %.2f s\n", overhead))
# Shipping data: a future whose global is 64 MB of doubles (a chunk of
# 4,000 datasets x 2,000 observations), written to the registry and read by
# the job.
x <- runif(8e6)
t0 <- Sys.time()
invisible(value(future(length(x))))
ship <- as.numeric(Sys.time() - t0, units = "secs")
cat(sprintf("a job sent 64 MB: %.2f s (%.2f s beyond the empty job: %.0f MB/s)\n", ship, ship - overhead,
            64 / max(ship - overhead, 1e-3)))
rm(x)

# bulkem(), 8 jobs.
set.seed(1)
d <- lapply(1:40, function(i) c(rnorm(150), rnorm(150, 4)))
ref <- quiet(bulkem(d, family = "normal", random.inits = 3, seed = 7, use.gpu = FALSE))
t0 <- Sys.time()
fut <- quiet(bulkem(d, family = "normal", random.inits = 3, seed = 7, use.gpu = FALSE,
                    parallel = "future", chunk.size = 5))
cat(sprintf("bulkem, 40 datasets in 8 jobs: %.1f s\n", as.numeric(Sys.time() - t0, units = "secs")))
check(identical(coef(fut), coef(ref)) && identical(logLik(fut), logLik(ref)), "bulkem() in 8 Slurm jobs equals parallel = \"none\"")

# An HMM pass, 5 jobs.
model <- hmm(c(0.6, 0.4), matrix(c(0.7, 0.3, 0.4, 0.6), 2, byrow = TRUE),
             matrix(c(0.5, 0.4, 0.1, 0.1, 0.3, 0.6), 2, byrow = TRUE))
seqs <- hmm_simulate(model, 25, 20:44, seed = 3)
check(identical(hmm_posterior(model, seqs, use.gpu = FALSE, parallel = "future", chunk.size = 5),
                hmm_posterior(model, seqs, use.gpu = FALSE)),
      "hmm_posterior() in 5 Slurm jobs equals parallel = \"none\"")

# hbglm(), 4 chains: 4 jobs.
set.seed(5)
df <- data.frame(g = rep(1:6, each = 15), x = rnorm(90))
df$y <- 1 + 0.5 * df$x + rep(rnorm(6, sd = 0.5), each = 15) + rnorm(90, sd = 0.3)
args <- list(y ~ x, data = df, group = df$g, iter = 60, warmup = 30, chains = 4, seed = 11, use.gpu = FALSE)
check(identical(quiet(do.call(hbglm, c(args, parallel = "future")))$draws, quiet(do.call(hbglm, args))$draws),
      "hbglm() with 4 chains in 4 Slurm jobs equals parallel = \"none\"")

# A job of one CPU.
options(bulkem.threads = NULL)
seen <- value(future(list(cpus = Sys.getenv("SLURM_CPUS_PER_TASK"), row = bulkem::bulkem_backends()[1, ]),
                     packages = "bulkem"))
check(seen$cpus == "1" && seen$row$threads == 1L && grepl("^1 of [0-9]+ cores: Slurm allotment", seen$row$detail),
      sprintf("a 1-CPU job runs 1 thread (%s)", seen$row$detail))
options(bulkem.threads = 1)

# A job cancelled mid-run, then resumed. Chunks of about 2 s of work; a
# background R process cancels chunk 2's job once it runs.
slurm_plan(workers = 2L)
big <- lapply(1:8, function(i) c(rnorm(4e4), rnorm(4e4, 4)))
run_big <- function(...) quiet(bulkem(big, family = "normal", random.inits = 4, max.iters = 200, epsilon = 0,
                                      seed = 3, use.gpu = FALSE, ...))
canceller <- callr::r_bg(function(conf) {
  Sys.setenv(SLURM_CONF = conf)
  for (i in 1:600) {
    jobs <- trimws(suppressWarnings(system2("squeue", c("-h", "-t", "R", "-o", "%i:%j"), stdout = TRUE)))
    hit <- grep(":bulkem-chunk-2$", jobs, value = TRUE)
    if (length(hit) > 0) {
      system2("scancel", sub(":.*", "", hit[1]))
      return(sub(":.*", "", hit[1]))
    }
    Sys.sleep(0.1)
  }
  NA
}, args = list(conf = Sys.getenv("SLURM_CONF")))
err <- tryCatch(run_big(parallel = "future", chunk.size = 2), bulkem_error_worker = function(e) e)
canceller$wait()
cancelled <- canceller$get_result()
check(inherits(err, "bulkem_error_worker") && grepl("chunk 2 of 4 \\(datasets 3-4\\)", conditionMessage(err)),
      sprintf("cancelling job %s (chunk 2) gives a bulkem_error_worker naming its datasets", cancelled))
# Slurm's reason is in the job's log, which batchtools quotes when it has
# it by then.
cat("the error quotes Slurm's reason:", grepl("CANCELLED", conditionMessage(err)), "\n")
part <- bulkem_partial()
missing <- sum(vapply(part$results, is.null, logical(1)))
before <- job_ids()
resumed <- run_big(parallel = "future", resume = part)
submitted <- length(setdiff(job_ids(), before))
plan(sequential)
check(submitted == missing, sprintf("the resumed call submitted %d job(s), one per missing chunk (%d)", submitted, missing))
ref <- run_big()
check(identical(coef(resumed), coef(ref)) && identical(logLik(resumed), logLik(ref)),
      "the resumed call equals an uninterrupted one")
cat(sprintf("all %d Slurm checks passed\n", checks))
