test_that("bulkem_backends reports the CPU and every CUDA device, or why none", {
  b <- bulkem_backends()
  expect_s3_class(b, "data.frame")
  expect_equal(b$backend[1], "cpu")
  expect_true(all(b$backend[-1] == "cuda"))
  expect_true(b$usable[1])
  expect_gte(b$threads[1], 1)
  expect_named(b, c("backend", "device", "name", "usable", "threads", "memory_gb",
                    "compute_capability", "detail"))
  expect_true(all(nzchar(b$detail)))
  if (!any(b$usable[-1])) expect_match(b$detail[2], "CUDA|libcuda|device|NVRTC")
})

test_that("one core function picks every area's backend from use.gpu and the job size", {
  gpu <- any(bulkem_backends()$usable[-1])
  choose <- bulkem:::backend_choice_
  # Below the threshold the CPU always wins; above it CUDA only when usable.
  expect_equal(choose("em", "auto", c(1e6, 2)), "cpu")
  expect_equal(choose("em", "auto", c(1e10, 2)), if (gpu) "cuda" else "cpu")
  expect_equal(choose("em", "auto", c(1e10, 9)), "cpu")
  # An HMM call's shape: c(states, observations, forward passes, threads,
  # sequences, longest, forward-backward passes). Short sequences stay on
  # the CPU; 512 states over 512 sequences of 16 go to a usable GPU, as
  # does a fit's 100 iterations over 1,000 sequences of 100 at 4 states.
  expect_equal(choose("hmm", "auto", c(10, 500, 1, 0, 5, 100, 0)), "cpu")
  expect_equal(choose("hmm", "auto", c(4, 100, 1, 16, 1, 100, 0)), "cpu")
  expect_equal(choose("hmm:gaussian", "auto", c(4, 100, 0, 16, 1, 100, 100)), "cpu")
  expect_equal(choose("hmm", "auto", c(512, 8192, 1, 16, 512, 16, 0)), if (gpu) "cuda" else "cpu")
  expect_equal(choose("hmm", "auto", c(4, 1e5, 0, 16, 1000, 100, 100)), if (gpu) "cuda" else "cpu")
  expect_error(choose("hmm:nosuch", "auto", c(4, 100, 1, 16, 1, 100, 0)), "unknown area")
  expect_error(choose("hmm", "auto", c(10, 5000, 1)), "7 numbers")
  expect_equal(choose("em", "cpu", c(1e10, 2)), "cpu")
  if (!gpu) {
    expect_error(choose("em", "cuda", c(1e10, 2)), "bulkem_error_device")
    expect_error(bulk_mean(1:3, use.gpu = TRUE), class = "bulkem_error_device")
  }
  expect_error(choose("em", "cuda", c(1e10, 9)), "bulkem_error_device")
  # Reductions stay on the CPU with use.gpu = NA (the copy costs more).
  expect_equal(bulk_mean(1:4), 2.5)
})

test_that("progress is reported through progressr for every dataset", {
  skip_if_not_installed("progressr")
  old <- options(progressr.enable = TRUE, bulkem.threads = 1)
  on.exit(options(old))
  d <- sim_ig(30, 50)
  steps <- 0
  fits <- withCallingHandlers(
    bulkem(d, seed = 1, use.gpu = FALSE),
    progression = function(p) if (identical(p$type, "update")) steps <<- steps + p$amount
  )
  expect_equal(steps, 30)
  # Chunked for progress, the answer is the one of a single call.
  options(progressr.enable = FALSE)
  expect_identical(fits_only(fits), fits_only(bulkem(d, seed = 1, use.gpu = FALSE)))
})

test_that("an interrupt stops a long call within a second, leaving R usable", {
  # setTimeLimit() raises its error through R_CheckUserInterrupt, exactly
  # where a user's Ctrl-C is seen.
  set.seed(22)
  d <- sim_ig(100, 20000)
  started <- proc.time()[["elapsed"]]
  err <- tryCatch({
    setTimeLimit(elapsed = 0.5, transient = TRUE)
    bulkem(d, random.inits = 50, max.iters = 1000, epsilon = 0, use.gpu = FALSE)
    NULL
  }, error = function(e) e)
  setTimeLimit()
  took <- proc.time()[["elapsed"]] - started
  expect_s3_class(err, "error")
  expect_match(conditionMessage(err), "interrupted|time limit")
  expect_lt(took, 3)
  # The session still works.
  expect_s3_class(bulkem(d[1:2], use.gpu = FALSE), "bulkem_fits")
})

test_that("bulkem_kernel_cache() reports and clears the kept kernels, and can keep none", {
  dir <- file.path(tempfile("kernels"), "cache")
  old <- options(bulkem.kernel.cache = dir)
  on.exit(options(old), add = TRUE)
  # Not there yet: nothing kept (and nothing made by asking).
  expect_identical(bulkem_kernel_cache(), list(dir = dir, entries = 0L, bytes = 0))
  expect_false(dir.exists(dir))
  dir.create(dir, recursive = TRUE)
  writeLines(strrep("x", 99), file.path(dir, "0123456789abcdef0123456789abcdef.ptx"))
  writeLines("not ours", file.path(dir, "notes.txt"))
  kept <- bulkem_kernel_cache()
  expect_identical(kept$entries, 1L)
  expect_equal(kept$bytes, 100)
  expect_invisible(bulkem_kernel_cache(clear = TRUE))
  expect_identical(bulkem_kernel_cache()$entries, 0L)
  expect_true(file.exists(file.path(dir, "notes.txt")))

  options(bulkem.kernel.cache = FALSE)
  expect_identical(bulkem_kernel_cache(), list(dir = NA_character_, entries = 0L, bytes = 0))
  options(bulkem.kernel.cache = NULL)
  withr_env <- Sys.getenv("BULKEM_KERNEL_CACHE", unset = NA)
  Sys.unsetenv("BULKEM_KERNEL_CACHE")
  on.exit(if (!is.na(withr_env)) Sys.setenv(BULKEM_KERNEL_CACHE = withr_env), add = TRUE)
  expect_identical(bulkem_kernel_cache()$dir, file.path(tools::R_user_dir("bulkem", "cache"), "kernels"))
  Sys.setenv(BULKEM_KERNEL_CACHE = dir)
  expect_identical(bulkem_kernel_cache()$dir, dir)

  for (bad in list(3, c("a", "b"), NA_character_, "")) {
    options(bulkem.kernel.cache = bad)
    expect_error(bulkem_kernel_cache(), "must be a directory", class = "bulkem_error_input")
  }
  expect_error(bulkem_kernel_cache(clear = NA), "clear", class = "bulkem_error_input")
})
