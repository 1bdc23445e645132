// Entry point of the shared library: registers the Rust routines, and lets
// the Rust glue ask R for pending interrupts without any R error or longjmp
// crossing Rust frames.

#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

void R_init_bulkem_extendr(void *dll);
void register_extendr_panic_hook(void);

// Declared in R's headers (Rinterface.h, GraphicsDevice.h) but not in the
// documented API; stable since R 2.x and used by rlang: the flag a Ctrl-C
// sets, the switch that makes R only set it, and the function that
// signals R's own `interrupt` condition and, unhandled, returns to the top
// level.
extern int R_interrupts_pending;
extern Rboolean R_interrupts_suspended;
extern void Rf_onintr(void);

// Why the last poll said stop: 1 a user interrupt (left pending for R),
// 2 an R error raised while processing events (a setTimeLimit() limit, an
// event handler), kept in `stop_condition` to be raised again in R.
static int stop_reason = 0;
static SEXP stop_condition = NULL;

static SEXP process_events(void *unused) {
    (void) unused;
    R_ProcessEvents();
    return R_NilValue;
}

static SEXP keep_condition(SEXP condition, void *caught) {
    *(int *) caught = 1;
    if (stop_condition != NULL) R_ReleaseObject(stop_condition);
    stop_condition = condition;
    R_PreserveObject(stop_condition);
    return R_NilValue;
}

static void check_events(void *caught) {
    R_tryCatchError(process_events, NULL, keep_condition, caught);
}

// Non-zero when the computation should stop. A Ctrl-C is not consumed
// here: it stays pending, and R raises it as an interrupt condition once
// the call has returned (see bulkem_raise_interrupt). Events are processed
// with interrupts suspended, so that an interrupt they deliver (Esc or
// Ctrl-C on Windows, a SIGINT arriving now) is only marked pending, and
// inside R_tryCatchError, so that an R error (a time limit) is kept
// silently instead of crossing Rust frames.
int bulkem_interrupt_pending(void) {
    if (R_interrupts_pending) {
        stop_reason = 1;
        return 1;
    }
    int caught = 0;
    Rboolean suspended = R_interrupts_suspended;
    R_interrupts_suspended = TRUE;
    // Inside a top-level context too: no jump that the error handler does
    // not take (a restart, say) can cross the Rust frames that called us,
    // whose worker threads would go on using them.
    if (!R_ToplevelExec(check_events, &caught)) {
        caught = 1;
        // Nothing kept to raise again: a general message instead.
        if (stop_condition != NULL) R_ReleaseObject(stop_condition);
        stop_condition = NULL;
    }
    R_interrupts_suspended = suspended;
    if (R_interrupts_pending) {
        stop_reason = 1;
        return 1;
    }
    if (caught) {
        stop_reason = 2;
        return 1;
    }
    return 0;
}

// .External(bulkem_raise_interrupt): after the core stopped on a poll, raise
// what stopped it in R: the user's Ctrl-C as R's own interrupt condition
// (tryCatch(interrupt = ) fires, try() does not catch it), else the R error
// that processing events raised, as R raised it.
static SEXP bulkem_raise_interrupt(SEXP args) {
    (void) args;
    int reason = stop_reason;
    stop_reason = 0;
    if (reason == 1 || R_interrupts_pending) {
        Rf_onintr();
    }
    if (reason == 2 && stop_condition != NULL) {
        SEXP condition = PROTECT(stop_condition);
        R_ReleaseObject(stop_condition);
        stop_condition = NULL;
        SEXP call = PROTECT(Rf_lang2(Rf_install("stop"), condition));
        Rf_eval(call, R_BaseEnv);
        UNPROTECT(2);
    }
    Rf_error("%s", "the computation was stopped by R while it processed events");
    return R_NilValue;
}

static const R_ExternalMethodDef external_methods[] = {
    {"bulkem_raise_interrupt", (DL_FUNC) &bulkem_raise_interrupt, 0},
    {NULL, NULL, 0}
};

void R_init_bulkem(void *dll) {
    register_extendr_panic_hook();
    R_init_bulkem_extendr(dll);
    // Adds the .External table; extendr's .Call table stays (R only replaces
    // the tables it is given), and dynamic lookup stays off.
    R_registerRoutines((DllInfo *) dll, NULL, NULL, NULL, external_methods);
    R_useDynamicSymbols((DllInfo *) dll, FALSE);
    R_forceSymbols((DllInfo *) dll, FALSE);
}
