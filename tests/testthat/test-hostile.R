# Every exported function against hostile inputs (tests/testthat/hostile/),
# each case in its own R process: a crash, an abort or a hang shows up as a
# process that did not finish, instead of taking the test run with it.

run_hostile_case <- function(id, cases_file, libs, dir, timeout = 120) {
  out <- file.path(dir, paste0(gsub("[^A-Za-z0-9._-]", "_", id), ".rds"))
  script <- test_path("hostile", "run-case.R")
  rscript <- file.path(R.home("bin"), "Rscript")
  # A memory limit the estimates refuse against, whatever this machine has,
  # and an address-space limit so that an unguarded allocation fails (and
  # shows as a dead process) instead of exhausting the machine.
  cmd <- sprintf("ulimit -v 8000000 2>/dev/null; BULKEM_MEMORY_LIMIT=2e9 exec %s --vanilla %s %s %s %s %s",
                 shQuote(rscript), shQuote(script), shQuote(cases_file), shQuote(id), shQuote(out),
                 shQuote(libs))
  log <- suppressWarnings(system2("sh", c("-c", shQuote(cmd)), stdout = TRUE, stderr = TRUE,
                                  timeout = timeout))
  rc <- attr(log, "status")
  if (is.null(rc)) rc <- 0L
  result <- if (file.exists(out)) readRDS(out) else NULL
  list(id = id, rc = rc, result = result, log = utils::tail(log, 5))
}

judge_hostile_case <- function(case, run) {
  r <- run$result
  if (run$rc != 0 || is.null(r)) {
    return(sprintf("process did not survive (exit %s): %s", run$rc, paste(run$log, collapse = " | ")))
  }
  warned <- is.null(case$warn) || any(grepl(case$warn, r$warnings))
  if (r$kind == "error") {
    if (case$expect == "value") return(paste("error instead of a value:", r$message))
    if (!any(case$class %in% r$class)) {
      return(sprintf("error of class %s, wanted %s: %s", paste(r$class, collapse = "/"),
                     paste(case$class, collapse = " or "), r$message))
    }
    return(NULL)
  }
  if (case$expect == "error") return(paste("a value instead of an error:", paste(r$value, collapse = " ")))
  if (!r$ok) return(paste("the value failed its check:", paste(r$value, collapse = " ")))
  if (!warned) return(paste("no warning matching", case$warn))
  NULL
}

test_that("no hostile input kills R, hangs, or returns an unchecked answer", {
  skip_on_cran()
  skip_on_os("windows")
  cases_file <- normalizePath(test_path("hostile", "cases.R"))
  env <- new.env()
  sys.source(cases_file, envir = env)
  cases <- env$hostile_cases
  expect_gte(length(cases), 150)

  dir <- tempfile("hostile")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  libs <- paste(.libPaths(), collapse = .Platform$path.sep)
  cores <- max(1L, min(4L, parallel::detectCores(), na.rm = TRUE))
  runs <- parallel::mclapply(names(cases), run_hostile_case, cases_file = cases_file,
                             libs = libs, dir = dir, mc.cores = cores, mc.preschedule = FALSE)
  names(runs) <- names(cases)
  problems <- Filter(Negate(is.null), Map(judge_hostile_case, cases, runs))
  report <- paste0(names(problems), ": ", unlist(problems), collapse = "\n")
  expect(length(problems) == 0,
         sprintf("%d of %d hostile cases failed:\n%s", length(problems), length(cases), report))
})
