# Censored and binned data: survival::Surv datasets -> stand-in values
# (inside each interval, for validation, the centre and the random starts)
# and the intervals the core's E-step uses (core/src/em/censored.rs).

# Whether `datasets` holds a Surv object (one, or as list elements).
has_surv <- function(datasets) {
  inherits(datasets, "Surv") || (is.list(datasets) && !is.data.frame(datasets) && any(vapply(datasets, inherits, logical(1), "Surv")))
}

# list(datasets = stand-in vectors, censoring = per dataset list(index
# (0-based), lower, upper), or NULL when nothing is censored). `counts`:
# the family's values are whole numbers, and so are the stand-ins.
surv_datasets <- function(datasets, call, counts = FALSE) {
  if (inherits(datasets, "Surv")) datasets <- list(datasets)
  parts <- lapply(seq_along(datasets), function(d) {
    x <- datasets[[d]]
    if (inherits(x, "Surv")) surv_intervals(x, d, call, counts) else list(x = x, lower = NULL, upper = NULL, index = integer(0))
  })
  out <- lapply(parts, `[[`, "x")
  names(out) <- names(datasets)
  censoring <- lapply(parts, function(p) list(index = as.integer(p$index - 1L), lower = as.double(p$lower), upper = as.double(p$upper)))
  list(datasets = out, censoring = if (any(lengths(lapply(censoring, `[[`, "index")) > 0)) censoring)
}

# One Surv object: its exact values, and the censored observations'
# intervals (lower, upper] with a stand-in value inside each (for counts,
# the count inside nearest the midpoint; an interval without one is left
# to the core, which names it).
surv_intervals <- function(s, d, call, counts = FALSE) {
  type <- attr(s, "type")
  m <- unclass(s)
  if (type == "right") {
    lower <- m[, "time"]; upper <- ifelse(m[, "status"] == 1, m[, "time"], Inf)
  } else if (type == "left") {
    upper <- m[, "time"]; lower <- ifelse(m[, "status"] == 1, m[, "time"], -Inf)
  } else if (type %in% c("interval", "interval2")) {
    st <- m[, "status"]
    lower <- ifelse(st == 2, -Inf, m[, "time1"])
    upper <- ifelse(st == 0, Inf, ifelse(st == 3, m[, "time2"], m[, "time1"]))
  } else {
    bulkem_abort(c(
      "Dataset {d} is a {.cls Surv} object of type {.val {type}}, which {.fn bulkem} cannot fit.",
      i = "Use right-censored ({.code Surv(time, event)}), left-censored or interval-censored ({.code Surv(left, right, type = \"interval2\")}) data."
    ), call = call)
  }
  if (anyNA(lower) || anyNA(upper)) {
    bulkem_abort(c("{.arg datasets} must not contain missing values.",
                   x = "Dataset {d} (a {.cls Surv} object) has one at position {which(is.na(lower) | is.na(upper))[1]}."), call = call)
  }
  exact <- lower == upper
  # A stand-in inside the interval: the midpoint of a finite one, else its
  # finite end.
  x <- ifelse(exact, lower, ifelse(is.finite(lower) & is.finite(upper), (lower + upper) / 2,
                                   ifelse(is.finite(lower), lower, upper)))
  if (any(!is.finite(x))) {
    bulkem_abort(c("Dataset {d} has an observation censored on both sides ({.code (-Inf, Inf)}), which carries no information.",
                   i = "Drop it first."), call = call)
  }
  if (counts) {
    inside <- pmin(pmax(round(x), floor(lower) + 1, 0), floor(upper))
    x <- ifelse(exact | !is.finite(inside), x, inside)
  }
  idx <- which(!exact)
  list(x = as.double(x), lower = lower[idx], upper = upper[idx], index = idx)
}
