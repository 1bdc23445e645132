# lme4-style formulas for hbglm(): `y ~ x1 + x2 + (1 + x1 | g)` read with
# lme4's own tools (findbars, nobars) into the model hbglm samples: the
# bar's terms vary by the grouping factor (formula and group), correlated
# when one bar holds several (`|`) and independent with `||`; the other
# population-level terms are shared (global). What that model cannot
# honour is an error that says what to write instead.

# Whether `f` holds a random-effect bar, `|` or `||`, anywhere.
has_bars <- function(f) {
  walk <- function(e) is.call(e) && (identical(e[[1]], as.name("|")) || identical(e[[1]], as.name("||")) ||
                                       any(vapply(as.list(e)[-1], walk, logical(1))))
  inherits(f, "formula") && walk(f[[length(f)]])
}

# list(formula = y ~ varying terms, group = ~ g, global = ~ shared terms
# (NULL when none)) from a formula with bars.
hbglm_bars <- function(formula, data, call) {
  if (!requireNamespace("lme4", quietly = TRUE)) {
    bulkem_abort(c("A formula with random-effect terms such as {.code (1 | g)} is read with {.pkg lme4}, which is not installed.",
                   i = "Install {.pkg lme4}, or give the grouping as {.arg group} (such as {.code group = ~ g})."),
                 call = call)
  }
  if (length(formula) != 3) {
    bulkem_abort("{.arg formula} must be a two-sided formula such as {.code y ~ x + (1 | g)}.", call = call)
  }
  env <- environment(formula)
  bars <- lme4::findbars(formula)
  groups <- unique(vapply(bars, function(b) paste(deparse(b[[3]]), collapse = ""), character(1)))
  shown <- paste0("(", vapply(bars, function(b) paste(deparse(b), collapse = ""), character(1)), ")")
  if (length(groups) > 1) {
    bulkem_abort(c(
      "{.fn hbglm} samples coefficients that vary by one grouping factor; {.arg formula} has {length(groups)}: {.val {groups}}.",
      x = "Crossed and nested grouping factors (such as {.code (1 | a) + (1 | b)} or {.code (1 | a/b)}) are not supported yet.",
      i = "Keep the terms of one grouping factor."
    ), call = call)
  }
  gexpr <- bars[[1]][[3]]
  if (!is.name(gexpr)) {
    bulkem_abort(c("The grouping factor of a random-effect term must be a column of {.arg data}.",
                   x = "{.arg formula} groups by {.code {groups}}.",
                   i = "Make it a column first (such as {.code data$ab <- interaction(data$a, data$b)})."), call = call)
  }
  # Each bar's terms; a bar with several coefficients (after `||` is split,
  # which findbars does) asks for their correlation.
  one_sided <- function(rhs) stats::as.formula(call("~", rhs), env = env)
  parts <- lapply(bars, function(b) {
    tt <- stats::terms(one_sided(b[[2]]), data = data)
    list(labels = attr(tt, "term.labels"), intercept = attr(tt, "intercept") == 1,
         columns = ncol(tryCatch(stats::model.matrix(tt, stats::model.frame(tt, data, na.action = stats::na.pass)),
                                 error = function(e) bulkem_abort(c("{.code {shown[1]}} can't be evaluated in {.arg data}.",
                                                                    x = conditionMessage(e)), call = call))))
  })
  correlated <- vapply(parts, function(p) p$columns > 1, logical(1))
  if (any(correlated) && length(bars) > 1) {
    bulkem_abort(c(
      "{.fn hbglm} samples either one full covariance of a group's coefficients or independent ones, not blocks of both.",
      x = "{.arg formula} has {.code {shown}}: {.code {shown[correlated]}} correlated, besides other terms of the same group.",
      i = "Put every varying term in one bar, such as {.code (1 + x + z | g)}, or write them all with {.code ||}."
    ), call = call)
  }
  varying <- unique(unlist(lapply(parts, `[[`, "labels")))
  varying_intercept <- any(vapply(parts, `[[`, logical(1), "intercept"))
  fixed <- stats::terms(lme4::nobars(formula), data = data)
  fixed_labels <- attr(fixed, "term.labels")
  fixed_intercept <- attr(fixed, "intercept") == 1
  missing_terms <- c(if (varying_intercept && !fixed_intercept) "1", setdiff(varying, fixed_labels))
  if (length(missing_terms) > 0) {
    bulkem_abort(c(
      "{.fn hbglm} gives every coefficient that varies by group a population mean, so it must be a population-level term too.",
      x = "{.val {missing_terms}} {?is/are} in a random-effect term but not among the population-level terms.",
      i = "Add {cli::qty(length(missing_terms))}{?it/them} outside the bars, such as {.code y ~ x + (1 + x || g)}."
    ), call = call)
  }
  if (fixed_intercept && !varying_intercept) {
    bulkem_abort(c(
      "{.fn hbglm} has no intercept shared by all groups: the intercept varies by group or is absent.",
      x = "{.arg formula} has a population-level intercept but no varying one.",
      i = "Add it to the bar (such as {.code (1 + x || g)}) or remove it with {.code 0 +}."
    ), call = call)
  }
  offsets <- attr(fixed, "offset")
  offset_terms <- if (length(offsets)) vapply(offsets, function(i) paste(deparse(attr(fixed, "variables")[[i + 1]]), collapse = ""), character(1))
  shared <- c(setdiff(fixed_labels, varying), offset_terms)
  lhs <- formula[[2]]
  f <- stats::reformulate(if (length(varying)) varying else "1", response = lhs, intercept = varying_intercept, env = env)
  list(formula = f, group = stats::as.formula(call("~", gexpr), env = env), correlated = any(correlated),
       # (its intercept is dropped by hbglm_data, keeping the contrasts of
       # factors as `global =` has them)
       global = if (length(shared)) stats::reformulate(shared, env = env))
}
