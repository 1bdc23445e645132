# The mixture families, read from the core's family table (em_families_()):
# R names every family and parameter from there, never by hand.

em_family_table <- local({
  table <- NULL
  function() {
    if (is.null(table)) table <<- em_families_()
    table
  }
})

# The names of the families bulkem() fits, in the core's order.
em_family_names <- function() em_family_table()$name

# One row of the table: name, label, first, second (NA for a one-parameter
# family), discrete, and params (the parameter names, without NA).
em_family <- function(name) {
  tab <- em_family_table()
  i <- match(name, tab$name)
  if (is.na(i)) bulkem_abort("Unknown family {.val {name}}.", "internal", call = NULL)
  row <- lapply(tab, `[[`, i)
  row$params <- c(row$first, if (!is.na(row$second)) row$second)
  row
}

# The family of a fit (fits made before families had names are inverse
# Gaussian, as the 2015 package's).
fit_family <- function(fit) em_family(fit$family %||% "invgauss")

# Free parameters of a K-component mixture: K - 1 weights and the
# components' own parameters.
family_df <- function(family, K) (1L + length(family$params)) * K - 1L

# The weights and parameters of one fit (or given vectors) as the core's
# (alpha, first, second); second is NA for a one-parameter family.
core_mixture <- function(family, alpha, params) {
  list(alpha = as.double(alpha), first = as.double(params[[family$first]]),
       second = if (is.na(family$second)) NA_real_ else as.double(params[[family$second]]))
}

# log(alpha_j f_j(x)), an n x M matrix, from the core.
fit_component_log_density <- function(fit, x) {
  fam <- fit_family(fit)
  m <- core_mixture(fam, fit$alpha, fit)
  ld <- mix_component_log_density_(as.double(x), fam$name, m$alpha, m$first, m$second)
  matrix(ld, nrow = length(x))
}

# log of the mixture density at x, from the core.
fit_log_density <- function(fit, x) {
  fam <- fit_family(fit)
  m <- core_mixture(fam, fit$alpha, fit)
  mix_log_density_(as.double(x), fam$name, m$alpha, m$first, m$second)
}

# Posterior component probabilities at x (n x M, NA outside the support),
# from the core.
fit_posterior <- function(fit, x) {
  fam <- fit_family(fit)
  m <- core_mixture(fam, fit$alpha, fit)
  p <- mix_posterior_(as.double(x), fam$name, m$alpha, m$first, m$second)
  p[is.nan(p)] <- NA_real_
  matrix(p, nrow = length(x), dimnames = list(NULL, paste0("comp", seq_along(fit$alpha))))
}
