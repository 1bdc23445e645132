# A user's Ctrl-C (SIGINT) during a long call arrives as R's own `interrupt`
# condition within a second, and the session stays usable.

interrupt_long_call <- function(which, wait_before = 1) {
  dir <- tempfile("interrupt")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  script <- test_path("interrupt", "long-call.R")
  rscript <- file.path(R.home("bin"), "Rscript")
  libs <- paste(.libPaths(), collapse = .Platform$path.sep)
  system2(rscript, c("--vanilla", shQuote(script), which, shQuote(dir), shQuote(libs)),
          stdout = file.path(dir, "log"), stderr = file.path(dir, "log"), wait = FALSE)
  wait_for <- function(file, seconds) {
    deadline <- Sys.time() + seconds
    while (!file.exists(file) && Sys.time() < deadline) Sys.sleep(0.05)
    file.exists(file)
  }
  if (!wait_for(file.path(dir, "started"), 120)) {
    stop("the long call did not start: ", paste(readLines(file.path(dir, "log")), collapse = "\n"))
  }
  Sys.sleep(wait_before)
  pid <- as.integer(readLines(file.path(dir, "pid")))
  sent <- as.numeric(Sys.time())
  tools::pskill(pid, tools::SIGINT)
  if (!wait_for(file.path(dir, "result.rds"), 60)) {
    tools::pskill(pid, tools::SIGKILL)
    stop("no result after the interrupt: ", paste(readLines(file.path(dir, "log")), collapse = "\n"))
  }
  Sys.sleep(0.1) # let saveRDS finish
  out <- readRDS(file.path(dir, "result.rds"))
  out$delay <- out$at - sent
  out
}

for (which in c("bulkem", "hmm_loglik", "hmm_viterbi", "hmm_fit", "hbglm", "mc_integrate")) {
  test_that(paste("Ctrl-C stops", which, "within a second as an interrupt condition"), {
    skip_on_cran()
    skip_on_os("windows")
    out <- interrupt_long_call(which)
    expect_identical(out$how, "interrupt", info = paste(out$message, collapse = " "))
    expect_true("interrupt" %in% out$class)
    expect_lt(out$delay, 1)
    expect_true(out$usable)
  })
}
