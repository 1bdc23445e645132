# One hostile case in this process: Rscript run-case.R CASES ID OUT LIBS.
# Writes what happened to OUT (an RDS file); test-hostile.R judges it.
args <- commandArgs(trailingOnly = TRUE)
.libPaths(c(strsplit(args[4], .Platform$path.sep, fixed = TRUE)[[1]], .libPaths()))
suppressPackageStartupMessages(library(bulkem))
source(args[1], local = TRUE)
case <- hostile_cases[[args[2]]]
env <- fixtures()
warnings <- character()
result <- tryCatch(
  withCallingHandlers({
    value <- eval(case$code, env)
    list(kind = "value", ok = is.function(case$check) && isTRUE(case$check(value)),
         value = utils::capture.output(utils::str(value, max.level = 1, list.len = 5)))
  }, warning = function(w) {
    warnings <<- c(warnings, conditionMessage(w))
    invokeRestart("muffleWarning")
  }, message = function(m) invokeRestart("muffleMessage")),
  error = function(e) list(kind = "error", class = class(e), message = conditionMessage(e))
)
result$warnings <- warnings
saveRDS(result, args[3])
