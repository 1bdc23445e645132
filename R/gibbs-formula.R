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
# (NULL when none), correlated, factors = the other grouping factors) from
# a formula with bars. The grouping factor whose bars hold the most
# columns (then the most levels) is the groups: its coefficients have
# population means (mu) and may be correlated. Each other factor's terms
# are deviations with mean zero, correlated or not (a list of list(name,
# expr, correlated, terms = ~ its terms)).
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
  all_bars <- lme4::findbars(formula)
  keys <- vapply(all_bars, function(b) paste(deparse(b[[3]]), collapse = ""), character(1))
  one_sided <- function(rhs) stats::as.formula(call("~", rhs), env = env)
  shown_of <- function(bars) paste0("(", vapply(bars, function(b) paste(deparse(b), collapse = ""), character(1)), ")")
  # Each bar's terms; a bar with several coefficients (after `||` is split,
  # which findbars does) asks for their correlation.
  bar_terms <- function(b) {
    tt <- stats::terms(one_sided(b[[2]]), data = data)
    list(labels = attr(tt, "term.labels"), intercept = attr(tt, "intercept") == 1,
         columns = ncol(tryCatch(stats::model.matrix(tt, stats::model.frame(tt, data, na.action = stats::na.pass)),
                                 error = function(e) bulkem_abort(c("{.code {shown_of(list(b))}} can't be evaluated in {.arg data}.",
                                                                    x = conditionMessage(e)), call = call))))
  }
  # One grouping factor's bars: one full covariance or independent terms.
  check_blocks <- function(bars, correlated) {
    if (any(correlated) && length(bars) > 1) {
      shown <- shown_of(bars)
      bulkem_abort(c(
        "{.fn hbglm} samples either one full covariance of a grouping factor's terms or independent ones, not blocks of both.",
        x = "{.arg formula} has {.code {shown}}: {.code {shown[correlated]}} correlated, besides other terms of the same grouping factor.",
        i = "Put every varying term of that factor in one bar, such as {.code (1 + x + z | {deparse(bars[[1]][[3]])})}, or write them all with {.code ||}."
      ), call = call)
    }
  }
  groups <- unique(keys)
  # (hbglm_grouping also checks each grouping expression.)
  levels_of <- vapply(groups, function(key) nlevels(hbglm_grouping(all_bars[[match(key, keys)]][[3]], data, env, call)), numeric(1))
  parts_of <- lapply(groups, function(key) lapply(all_bars[keys == key], bar_terms))
  columns <- vapply(parts_of, function(ps) sum(vapply(ps, `[[`, numeric(1), "columns")), numeric(1))
  primary <- order(-columns, -levels_of)[1]
  others <- lapply(setdiff(seq_along(groups), primary), function(i) {
    bars <- all_bars[keys == groups[i]]
    ps <- parts_of[[i]]
    check_blocks(bars, vapply(ps, function(p) p$columns > 1, logical(1)))
    labels <- unique(unlist(lapply(ps, `[[`, "labels")))
    intercept <- any(vapply(ps, `[[`, logical(1), "intercept"))
    list(name = groups[i], expr = bars[[1]][[3]], correlated = any(vapply(ps, function(p) p$columns > 1, logical(1))),
         terms = stats::reformulate(if (length(labels)) labels else "1", intercept = intercept, env = env))
  })
  bars <- all_bars[keys == groups[primary]]
  parts <- parts_of[[primary]]
  shown <- shown_of(bars)
  gexpr <- bars[[1]][[3]]
  correlated <- vapply(parts, function(p) p$columns > 1, logical(1))
  check_blocks(bars, correlated)
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
  list(formula = f, group = stats::as.formula(call("~", gexpr), env = env), correlated = any(correlated), factors = others,
       # (its intercept is dropped by hbglm_data, keeping the contrasts of
       # factors as `global =` has them)
       global = if (length(shared)) stats::reformulate(shared, env = env))
}

# The levels of a grouping factor `expr` (a column, or `a:b` for the
# levels of a within b, as `(1 | b/a)` expands to) in `data`, as a factor;
# `drop`: without unused levels (always for `a:b`).
hbglm_grouping <- function(expr, data, env, call, drop = TRUE) {
  shown <- paste(deparse(expr), collapse = "")
  names_of <- function(e) {
    if (is.name(e)) list(e) else if (is.call(e) && identical(e[[1]], as.name(":"))) c(names_of(e[[2]]), names_of(e[[3]])) else list(NULL)
  }
  vars <- names_of(expr)
  if (any(vapply(vars, is.null, logical(1)))) {
    bulkem_abort(c("The grouping factor of a random-effect term must be a column of {.arg data} (or {.code a:b} of columns).",
                   x = "{.arg formula} groups by {.code {shown}}.",
                   i = "Make it a column first (such as {.code data$ab <- interaction(data$a, data$b)})."), call = call)
  }
  values <- lapply(vars, function(v) {
    x <- tryCatch(eval(v, data, env), error = function(e) bulkem_abort(c("The grouping factor {.code {shown}} can't be evaluated in {.arg data}.",
                                                                          x = conditionMessage(e)), call = call))
    if (!is.atomic(x) || length(x) != nrow(data)) {
      bulkem_abort(c("The grouping factor {.code {shown}} must give one level per row of {.arg data} ({nrow(data)}).",
                     x = "{.code {deparse(v)}} is {describe_value(x)}."), call = call)
    }
    x
  })
  if (length(values) == 1) {
    g <- as.factor(values[[1]])
    return(if (drop) droplevels(g) else g)
  }
  g <- interaction(lapply(values, as.factor), drop = TRUE, sep = ":", lex.order = TRUE)
  g[Reduce(`|`, lapply(values, is.na))] <- NA
  droplevels(g)
}

# The other grouping factors of a formula (from hbglm_bars) in `data`:
# each one's levels, every row's level (in the user's order), its terms'
# design matrix and what rebuilds both from new data.
hbglm_factors <- function(factors, data, call) {
  lapply(factors, function(f) {
    env <- environment(f$terms)
    g <- hbglm_grouping(f$expr, data, env, call)
    tt <- stats::terms(f$terms, data = data)
    mf <- tryCatch(stats::model.frame(tt, data, na.action = stats::na.pass),
                   error = function(e) bulkem_abort(c("The terms of {.val {f$name}} can't be evaluated in {.arg data}.",
                                                      x = conditionMessage(e)), call = call))
    w <- stats::model.matrix(tt, mf)
    for (part in list(list(g, "The grouping factor"), list(w, "A term"))) {
      bad <- if (is.matrix(part[[1]])) which(rowSums(is.na(part[[1]])) > 0) else which(is.na(part[[1]]))
      if (length(bad) > 0) {
        bulkem_abort(c("{.arg data} must not have missing values in the variables of the model.",
                       x = "{part[[2]]} of {.val {f$name}} is missing in row{?s} {utils::head(bad, 5)}{if (length(bad) > 5) ', ...'}."),
                     call = call)
      }
    }
    hbglm_check_values(w, paste0("A term of {.val ", f$name, "}"), call)
    list(name = f$name, expr = f$expr, env = env, correlated = isTRUE(f$correlated) && ncol(w) > 1, levels = levels(g), coef_names = colnames(w),
         level = as.integer(g), w = w,
         design = list(terms = tt, xlevels = stats::.getXlevels(tt, mf), contrasts = attr(w, "contrasts"),
                       vars = intersect(c(all.vars(tt), all.vars(f$expr)), names(data))))
  })
}

# Draw names of another grouping factor: its effects r_<name>[level,coef]
# (level-major, as the core writes them), sds sd_<name>[coef] and, when
# correlated, correlations cor_<name>[coef,coef] (pairs (1,2), (1,3), ...,
# (2,3), ...).
hbglm_factor_par_names <- function(f) {
  k <- length(f$coef_names)
  c(paste0("r_", f$name, "[", rep(f$levels, each = k), ",", rep(f$coef_names, length(f$levels)), "]"),
    paste0("sd_", f$name, "[", f$coef_names, "]"),
    hbglm_cor_names(paste0("cor_", f$name), f$coef_names, isTRUE(f$correlated)))
}

# Names of the correlations of `coefs` (pairs (1,2), (1,3), ..., (2,3),
# ..., as the core writes them): <prefix>[a,b]; none unless `correlated`.
hbglm_cor_names <- function(prefix, coefs, correlated) {
  if (!correlated || length(coefs) < 2) return(character())
  pairs <- utils::combn(length(coefs), 2)
  paste0(prefix, "[", coefs[pairs[1, ]], ",", coefs[pairs[2, ]], "]")
}

# The other grouping factors of new data: each one's level index (levels
# the fit has not seen follow its own when `new_groups`, else an error)
# and design matrix. list(rows = list(level, w) per factor, new = the new
# levels per factor).
hbglm_factor_newdata <- function(object, newdata, new_groups, call) {
  out <- lapply(object$model$factors, function(f) {
    g <- tryCatch(hbglm_grouping(f$expr, newdata, f$env, call, drop = FALSE),
                  error = function(e) bulkem_abort(c("The fit's grouping factor {.val {f$name}} can't be evaluated in {.arg newdata}.",
                                                     x = conditionMessage(e)), call = call))
    d <- f$design
    mf <- stats::model.frame(d$terms, newdata, xlev = d$xlevels, na.action = stats::na.pass)
    w <- stats::model.matrix(d$terms, mf, contrasts.arg = d$contrasts)
    bad <- which(is.na(g) | rowSums(is.na(w)) > 0)
    if (length(bad) > 0) {
      bulkem_abort(c("{.arg newdata} must not have missing values in the variables of the model.",
                     x = "The grouping factor {.val {f$name}} or its terms are missing in row{?s} {utils::head(bad, 5)}."), call = call)
    }
    hbglm_check_values(w, paste0("A term of {.val ", f$name, "} in {.arg newdata}"), call)
    g <- as.character(g)
    idx <- match(g, f$levels)
    new <- unique(g[is.na(idx)])
    if (length(new) > 0 && !new_groups) {
      bulkem_abort(c(
        "{.arg newdata} must hold only levels of the fit's grouping factors.",
        x = "{cli::qty(length(new))}Level{?s} {.val {utils::head(new, 5)}} of {.val {f$name}} {cli::qty(length(new))}{?is/are} not in the fit.",
        i = "{.code new.groups = \"population\"} draws their effects from the population distribution."
      ), call = call)
    }
    idx[is.na(idx)] <- length(f$levels) + match(g[is.na(idx)], new)
    list(rows = list(level = idx, w = w), new = new)
  })
  list(rows = lapply(out, `[[`, "rows"), new = lapply(out, `[[`, "new"))
}
