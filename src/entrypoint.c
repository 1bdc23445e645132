// Entry point of the shared library: registers the Rust routines, and lets
// the Rust glue ask R for pending interrupts without any R error or longjmp
// crossing Rust frames.

#include <Rinternals.h>
#include <R_ext/Rdynload.h>

void R_init_bulkem_extendr(void *dll);
void register_extendr_panic_hook(void);

// Declared in R's headers (Rinterface.h, GraphicsDevice.h) but not in the
// documented API; stable since R 2.x and used by rlang: the flag a Ctrl-C
// sets, and the function that signals R's own `interrupt` condition and,
// unhandled, returns to the top level.
extern int R_interrupts_pending;
extern void Rf_onintr(void);

// Why the last poll said stop: 1 a user interrupt (left pending for R),
// 2 an R error raised while polling (setTimeLimit(), an event handler).
static int stop_reason = 0;

static void process_events(void *unused) {
    (void) unused;
    R_CheckUserInterrupt();
}

// Non-zero when the computation should stop. A Ctrl-C is not consumed
// here: it stays pending, and R raises it as an interrupt condition once
// the call has returned (see bulkem_raise_interrupt). Other events run
// inside R_ToplevelExec, so no R error or longjmp crosses Rust frames.
int bulkem_interrupt_pending(void) {
    if (R_interrupts_pending) {
        stop_reason = 1;
        return 1;
    }
    if (R_ToplevelExec(process_events, NULL) == FALSE) {
        stop_reason = 2;
        return 1;
    }
    return 0;
}

// .External(bulkem_raise_interrupt): after the core stopped on a poll, raise
// what stopped it in R: the user's Ctrl-C as R's own interrupt condition
// (tryCatch(interrupt = ) fires, try() does not catch it), else an error.
static SEXP bulkem_raise_interrupt(SEXP args) {
    (void) args;
    int reason = stop_reason;
    stop_reason = 0;
    if (reason == 1 || R_interrupts_pending) {
        Rf_onintr();
    }
    Rf_error("%s", "the computation was stopped by R: a time limit (setTimeLimit()) was reached or an event handler failed");
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
