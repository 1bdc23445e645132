# Argument checks shared by the exported functions. Each one fails with a
# cli error that names the user's argument and the calling function.

check_count <- function(x, arg, min = 1, call = parent.frame()) {
  ok <- is.numeric(x) && length(x) == 1 && !is.na(x) && is.finite(x) &&
    x == round(x) && x >= min && x <= .Machine$integer.max
  if (!ok) {
    bulkem_abort(c(
      "{.arg {arg}} must be a whole number of at least {min}.",
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  as.integer(x)
}

check_number <- function(x, arg, min = -Inf, call = parent.frame()) {
  ok <- is.numeric(x) && length(x) == 1 && !is.na(x) && is.finite(x) && x >= min
  if (!ok) {
    bulkem_abort(c(
      "{.arg {arg}} must be a finite number of at least {min}.",
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  as.double(x)
}

check_flag <- function(x, arg, allow_na = FALSE, call = parent.frame()) {
  ok <- is.logical(x) && length(x) == 1 && (allow_na || !is.na(x))
  if (!ok) {
    what <- if (allow_na) "{.code TRUE}, {.code FALSE} or {.code NA}" else "{.code TRUE} or {.code FALSE}"
    bulkem_abort(c(
      paste0("{.arg {arg}} must be ", what, "."),
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  x
}

check_seed <- function(seed, call = parent.frame()) {
  if (is.null(seed)) {
    # Drawn from R's RNG, so set.seed() reproduces the call.
    return(as.double(sample.int(.Machine$integer.max, 1L)))
  }
  ok <- is.numeric(seed) && length(seed) == 1 && !is.na(seed) && is.finite(seed) &&
    seed == round(seed) && seed >= 0 && seed < 2^53
  if (!ok) {
    bulkem_abort(c(
      "{.arg seed} must be {.code NULL} or a whole number between 0 and 2^53.",
      x = "You supplied {describe_value(seed)}."
    ), call = call)
  }
  as.double(seed)
}

describe_value <- function(x) {
  if (is.null(x)) return("NULL")
  if (is.function(x)) return("a function")
  if (length(x) == 0) return(paste0("an empty ", class(x)[1], " vector"))
  if (length(x) > 1) return(paste0("a ", class(x)[1], " vector of length ", length(x)))
  if (is.atomic(x)) return(paste0("`", format(x), "`"))
  paste0("an object of class ", class(x)[1])
}

# Arguments a function does not have (caught by its `...`: S3 methods,
# hbglm()) are an error, never silently ignored. `topic`: its help page.
check_no_dots <- function(dots, fn, topic, call = parent.frame()) {
  if (length(dots) == 0) return(invisible())
  nms <- names(dots)
  if (is.null(nms)) nms <- rep("", length(dots))
  named <- nms[nzchar(nms)]
  if (length(named) > 0) {
    bulkem_abort(c("{.fn {fn}} has no argument{?s} {.arg {named}}.",
                   i = "See {.help {topic}} for its arguments."), call = call)
  }
  bulkem_abort(c("{.fn {fn}} takes no further unnamed arguments.",
                 x = "{length(dots)} unnamed argument{?s} {?was/were} given."), call = call)
}
