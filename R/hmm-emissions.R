#' Emission distributions of hidden Markov models
#'
#' What each hidden state of a [hmm()] emits: symbols from a finite set
#' (`categorical_emission()`, the model of `hmm(start, trans, emis)`),
#' real numbers from a normal distribution (`gaussian_emission()`), or
#' counts from a Poisson distribution (`poisson_emission()`). Each
#' constructor checks its parameters and returns an object to pass as
#' `emission` to [hmm()]; the family alone (`"gaussian"`, ...) or such an
#' object selects the family of [hmm_fit()].
#'
#' The observations each family takes, in `seqs` of [hmm_loglik()],
#' [hmm_viterbi()], [hmm_posterior()], [hmm_fit()] and `newdata` of
#' [predict()][predict.bulkem_hmm_fit]:
#'
#' * categorical: symbol codes `1..V` (whole numbers), or character vectors
#'   or factors of the symbol labels (`colnames(probs)`).
#' * gaussian: finite numbers (`NA`, `NaN` and `Inf` are errors).
#' * poisson: counts, whole numbers from 0 to 2^53 (integer or double
#'   vectors; negative, fractional, missing or infinite values are errors).
#'
#' Errors of class `bulkem_error_input` name the sequence, the position and
#' the value that does not fit, before anything is computed.
#'
#' @param mean Means of the states: a numeric vector, one finite value per
#'   state.
#' @param sd Standard deviations of the states: one finite value > 0 per
#'   state (as many as `mean`).
#' @param rate Rates (mean counts) of the states: one finite value >= 0 per
#'   state (a state with rate 0 emits only zeros).
#' @param probs N x V matrix of emission probabilities: `probs[i, k]` is the
#'   probability of emitting symbol k in state i; every row sums to 1.
#' @param x An emission object.
#' @param digits Significant digits to print.
#' @param ... Unused.
#' @return An object of class `bulkem_emission` and
#'   `bulkem_<family>_emission`: a list with `family` (`"categorical"`,
#'   `"gaussian"` or `"poisson"`) and the parameters (`probs`; `mean` and
#'   `sd`; `rate`), one value (or row) per state, named by state when the
#'   arguments were named (`names(mean)`, `names(rate)`, `rownames(probs)`).
#'   Parameters that are not valid (missing, infinite, `sd <= 0`,
#'   `rate < 0`, rows of `probs` that do not sum to 1, `mean` and `sd` of
#'   different lengths) are errors of class `bulkem_error_input` naming the
#'   argument and the element. `print()` returns `x` invisibly.
#' @seealso [hmm()], [hmm_fit()].
#' @examples
#' gaussian_emission(mean = c(calm = 0, busy = 5), sd = c(1, 2))
#' poisson_emission(rate = c(0.5, 8))
#' categorical_emission(rbind(c(0.9, 0.1), c(0.2, 0.8)))
#'
#' # A two-state Gaussian HMM
#' model <- hmm(c(0.5, 0.5), matrix(c(0.95, 0.05, 0.1, 0.9), 2, byrow = TRUE),
#'   emission = gaussian_emission(c(0, 5), c(1, 2)))
#' hmm_loglik(model, list(c(0.3, -1.2, 4.8, 6.1)), use.gpu = FALSE)
#' @name hmm_emissions
NULL

#' @rdname hmm_emissions
#' @export
gaussian_emission <- function(mean, sd) {
  call <- environment()
  check_state_values(mean, "mean", "finite numbers", function(x) is.finite(x), call)
  check_state_values(sd, "sd", "finite numbers > 0", function(x) is.finite(x) & x > 0, call)
  if (length(sd) != length(mean)) {
    bulkem_abort(c(
      "{.arg sd} must have one value per state, as many as {.arg mean} ({length(mean)}).",
      x = "It has {length(sd)}."
    ), call = call)
  }
  states <- names(mean) %||% names(sd)
  new_emission("gaussian", list(mean = as.double(mean), sd = as.double(sd)), states)
}

#' @rdname hmm_emissions
#' @export
poisson_emission <- function(rate) {
  call <- environment()
  check_state_values(rate, "rate", "finite numbers >= 0", function(x) is.finite(x) & x >= 0, call)
  new_emission("poisson", list(rate = as.double(rate)), names(rate))
}

#' @rdname hmm_emissions
#' @export
categorical_emission <- function(probs) {
  call <- environment()
  if (!is.numeric(probs) || !is.matrix(probs) || nrow(probs) == 0) {
    bulkem_abort(c(
      "{.arg probs} must be a numeric matrix with one row per state.",
      x = "You supplied {describe_value(probs)}."
    ), call = call)
  }
  check_prob_matrix(probs, "probs", nrow(probs), NA, call)
  new_emission("categorical", list(probs = probs), rownames(probs))
}

#' @rdname hmm_emissions
#' @export
print.bulkem_emission <- function(x, digits = 4, ...) {
  fam <- emission_family(x$family)
  n <- fam$n_states(x)
  cat(sprintf("%s emission, %d state%s\n", fam$title, n, if (n == 1) "" else "s"))
  fam$print(x, digits)
  invisible(x)
}

# ---- the families ----------------------------------------------------------
#
# Everything the R side knows about an emission family is in its block
# below; hmm.R and hmm-methods.R only call these functions (through
# emission_family()). A new family is one block here, its constructor above,
# and the core's family (which the glue dispatches to by `family`).
#
# Each block has:
#   title              the family's name in printed output
#   area               backend_choice_()'s area for its jobs
#   obs_bytes          bytes per observation sent to a future worker
#   noun               what one observation is called ("symbol")
#   n_states(e)        number of states
#   states(e)          state labels (NULL when none)
#   relabel(e, states) the emission with these state labels
#   shape(e)           the glue's emission list for memory estimates and
#                      fits (only family and, for categorical, V)
#   to_core(e)         the glue's emission list (matrices as R holds them)
#   from_core(x, states, symbols)  an emission from the glue's list
#   check_obs(e, seqs, arg, call)  sequences checked and flattened:
#                      list(obs, lengths, names), obs as the glue takes it
#   sim_obs(obs)       the glue's simulated observations as R returns them
#   df(e)              free parameters of the emission
#   describe(e)        e.g. "3 symbols", for headers
#   print(e, digits)   prints the parameters
#   summary(e, digits) prints the summary's line about the emission
#   fit_setup(seqs, init, n.symbols, call)  for hmm_fit(): the checked
#                      sequences `s`, the glue's `shape` and the `symbols`
#                      for from_core(); `init` is the starting emission or
#                      NULL, `n.symbols` NULL when not given
#   var_floor          TRUE when hmm_fit()'s `var.floor` applies

emission_families <- list(
  categorical = list(
    title = "Categorical",
    area = "hmm",
    obs_bytes = 4,
    noun = "symbol",
    n_states = function(e) nrow(e$probs),
    states = function(e) rownames(e$probs),
    relabel = function(e, states) {
      e$probs <- matrix(as.double(e$probs), length(states),
                        dimnames = list(state = states, symbol = colnames(e$probs) %||%
                                          as.character(seq_len(ncol(e$probs)))))
      e
    },
    shape = function(e) list(family = "categorical", V = ncol(e$probs)),
    to_core = function(e) list(family = "categorical", emis = double_matrix(e$probs), V = ncol(e$probs)),
    from_core = function(x, states, symbols) {
      V <- as.integer(x$V)
      new_emission("categorical", list(probs = matrix(x$emis, length(states), V, byrow = TRUE,
                                                      dimnames = list(NULL, symbols))), states)
    },
    check_obs = function(e, seqs, arg, call) {
      check_seqs(seqs, colnames(e$probs), ncol(e$probs), arg = arg, call = call)
    },
    sim_obs = function(obs) obs,
    df = function(e) nrow(e$probs) * (ncol(e$probs) - 1),
    describe = function(e) sprintf("%d symbol%s", ncol(e$probs), if (ncol(e$probs) == 1) "" else "s"),
    print = function(e, digits) {
      cat("\nEmission probabilities:\n")
      print(e$probs, digits = digits)
    },
    summary = function(e, digits) {
      cat("\nMost likely symbol in each state:\n")
      p <- e$probs
      print(stats::setNames(colnames(p)[max.col(p, ties.method = "first")], rownames(p)), quote = FALSE)
    },
    fit_setup = function(seqs, init, n.symbols, call) {
      symbols <- if (!is.null(init)) colnames(init$probs) else seq_symbols(seqs)
      s <- check_seqs(seqs, symbols, call = call)
      if (is.null(n.symbols)) {
        n.symbols <- if (!is.null(init)) ncol(init$probs) else if (!is.null(symbols)) length(symbols) else max(s$obs)
      }
      V <- check_count(n.symbols, "n.symbols", call = call)
      check_symbol_range(s$obs, s$lengths, V, "seqs", call)
      symbols <- symbols %||% as.character(seq_len(V))
      if (length(symbols) < V) symbols <- make.unique(c(symbols, as.character(seq(length(symbols) + 1, V))))
      list(s = s, shape = list(family = "categorical", V = V), symbols = symbols)
    },
    var_floor = FALSE
  ),

  gaussian = list(
    title = "Gaussian",
    area = "hmm:gaussian",
    obs_bytes = 8,
    noun = "observation",
    n_states = function(e) length(e$mean),
    states = function(e) names(e$mean),
    relabel = function(e, states) {
      e$mean <- stats::setNames(as.double(e$mean), states)
      e$sd <- stats::setNames(as.double(e$sd), states)
      e
    },
    shape = function(e) list(family = "gaussian"),
    to_core = function(e) list(family = "gaussian", mean = as.double(e$mean), sd = as.double(e$sd)),
    from_core = function(x, states, symbols) new_emission("gaussian", list(mean = x$mean, sd = x$sd), states),
    check_obs = function(e, seqs, arg, call) {
      check_numeric_seqs(seqs, arg, "gaussian", "finite number", function(x) is.finite(x), call, by_range = TRUE)
    },
    sim_obs = function(obs) as.double(obs),
    df = function(e) 2L * length(e$mean),
    describe = function(e) "Gaussian emissions",
    print = function(e, digits) {
      cat("\nGaussian emissions (mean and standard deviation in each state):\n")
      print(gaussian_table(e), digits = digits)
    },
    summary = function(e, digits) {
      cat("\nMean and standard deviation of the observations in each state:\n")
      print(gaussian_table(e), digits = digits)
    },
    fit_setup = function(seqs, init, n.symbols, call) {
      no_symbols(n.symbols, "gaussian", call)
      list(s = check_numeric_seqs(seqs, "seqs", "gaussian", "finite number", function(x) is.finite(x), call, by_range = TRUE),
           shape = list(family = "gaussian"), symbols = NULL)
    },
    var_floor = TRUE
  ),

  poisson = list(
    title = "Poisson",
    area = "hmm:poisson",
    obs_bytes = 8,
    noun = "count",
    n_states = function(e) length(e$rate),
    states = function(e) names(e$rate),
    relabel = function(e, states) {
      e$rate <- stats::setNames(as.double(e$rate), states)
      e
    },
    shape = function(e) list(family = "poisson"),
    to_core = function(e) list(family = "poisson", rate = as.double(e$rate)),
    from_core = function(x, states, symbols) new_emission("poisson", list(rate = x$rate), states),
    check_obs = function(e, seqs, arg, call) {
      check_numeric_seqs(seqs, arg, "poisson", "count (a whole number >= 0)", is_count, call)
    },
    # Integer vectors when every count fits in one, else doubles (counts up
    # to 2^53 are exact doubles).
    sim_obs = function(obs) if (all(obs <= .Machine$integer.max)) as.integer(obs) else as.double(obs),
    df = function(e) length(e$rate),
    describe = function(e) "Poisson emissions",
    print = function(e, digits) {
      cat("\nPoisson emissions (rate: mean count in each state):\n")
      print(e$rate, digits = digits)
    },
    summary = function(e, digits) {
      cat("\nRate (mean count) in each state:\n")
      print(e$rate, digits = digits)
    },
    fit_setup = function(seqs, init, n.symbols, call) {
      no_symbols(n.symbols, "poisson", call)
      list(s = check_numeric_seqs(seqs, "seqs", "poisson", "count (a whole number >= 0)", is_count, call),
           shape = list(family = "poisson"), symbols = NULL)
    },
    var_floor = FALSE
  )
)

# ---- helpers ---------------------------------------------------------------

# The block of a family name.
emission_family <- function(family) {
  fam <- if (is.character(family) && length(family) == 1) emission_families[[family]]
  if (is.null(fam)) {
    bulkem_abort(c(
      "Unknown emission family.",
      x = "{describe_value(family)} is not one of {.val {names(emission_families)}}."
    ), "internal")
  }
  fam
}

# An emission object, its parameters labelled by `states` (or 1..N).
new_emission <- function(family, params, states = NULL) {
  fam <- emission_family(family)
  e <- structure(c(list(family = family), params),
                 class = c(paste0("bulkem_", family, "_emission"), "bulkem_emission"))
  fam$relabel(e, states %||% as.character(seq_len(fam$n_states(e))))
}

# The emission of a bulkem_hmm model: `$emission`, or (categorical models)
# built from `$emis`.
# `[[` throughout: `model$emis` is NULL in a model with `emission` (see
# new_hmm()), but a hand-built list might lack it and partially match.
model_emission <- function(model, arg = "model", call = parent.frame()) {
  if (!is.null(model[["emission"]])) {
    e <- model[["emission"]]
    if (!inherits(e, "bulkem_emission") || !is.character(e$family) || length(e$family) != 1 ||
        !(e$family %in% names(emission_families))) {
      bulkem_abort(c(
        "{.arg {arg}} has an emission that is not one made by {.fn gaussian_emission}, {.fn poisson_emission} or {.fn categorical_emission}.",
        x = "Its {.field emission} is {describe_value(e)}."
      ), call = call)
    }
    return(e)
  }
  emis <- model[["emis"]]
  if (!is.numeric(emis) || !is.matrix(emis)) {
    bulkem_abort(c(
      "{.arg {arg}} has neither an emission matrix {.field emis} nor an {.field emission}.",
      x = "Its {.field emis} is {describe_value(emis)}."
    ), call = call)
  }
  structure(list(family = "categorical", probs = emis),
            class = c("bulkem_categorical_emission", "bulkem_emission"))
}

# The family of `emission` as hmm_fit() takes it: NULL (categorical), a
# family name, or an emission object.
emission_family_name <- function(emission, arg, call) {
  if (is.null(emission)) return("categorical")
  if (inherits(emission, "bulkem_emission")) return(emission$family)
  if (is.character(emission) && length(emission) == 1 && !is.na(emission) &&
      emission %in% names(emission_families)) {
    return(emission)
  }
  bulkem_abort(c(
    "{.arg {arg}} must be an emission family ({.or {.val {names(emission_families)}}}) or an emission object.",
    x = "You supplied {describe_value(emission)}.",
    i = "Emission objects are made by {.fn gaussian_emission}, {.fn poisson_emission} and {.fn categorical_emission}."
  ), call = call)
}

# Per-state parameters: a non-empty numeric vector whose values pass `ok`.
check_state_values <- function(x, arg, what, ok, call) {
  if (!is.numeric(x) || !is.null(dim(x)) || length(x) == 0) {
    bulkem_abort(c(
      "{.arg {arg}} must be a numeric vector, one value per state.",
      x = "You supplied {describe_value(x)}."
    ), call = call)
  }
  bad <- which(!ok(as.double(x)))
  if (length(bad) > 0) {
    bulkem_abort(c(
      "{.arg {arg}} must contain only {what}.",
      x = "Element {bad[1]} is {x[bad[1]]}."
    ), call = call)
  }
  invisible(x)
}

no_symbols <- function(n.symbols, family, call) {
  if (!is.null(n.symbols)) {
    bulkem_abort(c(
      "{.arg n.symbols} applies to categorical emissions only.",
      x = "This fit has {family} emissions; leave {.arg n.symbols} out."
    ), call = call)
  }
}

is_count <- function(x) is.finite(x) & x >= 0 & x == round(x) & x <= 2^53

gaussian_table <- function(e) {
  cbind(mean = e$mean, sd = e$sd)
}

# The sequence list shared by every family: a list (or one vector) of
# non-empty vectors accepted by `ok_type`. `kinds`: what they must be,
# c(plural, singular); `noun`: one observation.
check_seq_list <- function(seqs, arg, kinds, ok_type, noun, call) {
  if (is.atomic(seqs) && is.null(dim(seqs)) && length(seqs) > 0) seqs <- list(seqs)
  if (!is.list(seqs) || is.data.frame(seqs)) {
    bulkem_abort(c(
      "{.arg {arg}} must be a list of sequences ({kinds[1]}).",
      x = "You supplied {describe_value(seqs)}."
    ), call = call)
  }
  if (length(seqs) == 0) {
    bulkem_abort("{.arg {arg}} must contain at least one sequence.", call = call)
  }
  ok <- vapply(seqs, function(x) ok_type(x) && is.null(dim(x)), NA)
  if (!all(ok)) {
    bad <- which(!ok)[1]
    bulkem_abort(c(
      "Every sequence in {.arg {arg}} must be {kinds[2]}.",
      x = "Sequence {bad} is {describe_value(seqs[[bad]])}."
    ), call = call)
  }
  lens <- lengths(seqs)
  if (any(lens == 0)) {
    bulkem_abort(c(
      "Every sequence in {.arg {arg}} must have at least one {noun}.",
      x = "Sequence {which(lens == 0)[1]} is empty."
    ), call = call)
  }
  seqs
}

# Sequences of numbers (Gaussian and Poisson observations): numeric vectors
# whose every value is an observation of the emission `family` (`what`: one
# valid value, for the message). list(obs = doubles, lengths, names).
# The core tests the values as it flattens them (the family's own test);
# when that fails, R's tests find what and where: `ok(x)`, TRUE for each
# good value; `by_range`: values are good when the smallest and largest
# are (is.finite), so 10^7 of them cost two passes without a logical
# vector of their size.
check_numeric_seqs <- function(seqs, arg, family, what, ok, call, by_range = FALSE) {
  # A list of plain numeric vectors of valid observations (the common
  # case) is typed, flattened and checked by the core's threads in one
  # call; anything else takes R's checks, which say what is wrong.
  flat <- if (is.list(seqs) && !is.object(seqs) && length(seqs) > 0) hmm_numeric_obs_(seqs, family, cpu_threads())
  if (!is.null(flat)) return(list(obs = flat, lengths = lengths(seqs, use.names = FALSE), names = names(seqs)))
  seqs <- check_seq_list(seqs, arg, c("numeric vectors", "a numeric vector"),
                         function(x) is.numeric(x) && !is.factor(x), "observation", call)
  flat <- as.double(unlist(seqs, use.names = FALSE))
  lens <- lengths(seqs)
  # Whole-vector tests first; positions only on failure (10^7 observations).
  has_na <- anyNA(flat)
  missing <- if (has_na) is.na(flat) & !is.nan(flat)
  if (any(missing)) {
    where <- locate(which(missing)[1], lens)
    bulkem_abort(c(
      "{.arg {arg}} must not contain missing values.",
      x = "Sequence {where[1]} has {.val {NA}} at position {where[2]}."
    ), call = call)
  }
  good <- if (by_range && !has_na && all(ok(c(min(flat), max(flat))))) TRUE else ok(flat)
  if (!all(good)) {
    bad <- which(!good)
    where <- locate(bad[1], lens)
    bulkem_abort(c(
      "Every observation in {.arg {arg}} must be a {what}.",
      x = "Sequence {where[1]} has {format(flat[bad[1]], digits = 15)} at position {where[2]}."
    ), call = call)
  }
  list(obs = flat, lengths = as.integer(lens), names = names(seqs))
}
