// Entry point of the shared library: registers the Rust routines, and lets
// the Rust glue ask R for pending interrupts without any R error or longjmp
// crossing Rust frames.

#include <Rinternals.h>

void R_init_bulkem_extendr(void *dll);
void register_extendr_panic_hook(void);

static void check_interrupt(void *unused) {
    (void) unused;
    R_CheckUserInterrupt();
}

// Non-zero when the user interrupted R (or a time limit was reached).
int bulkem_interrupt_pending(void) {
    return R_ToplevelExec(check_interrupt, NULL) == FALSE;
}

void R_init_bulkem(void *dll) {
    register_extendr_panic_hook();
    R_init_bulkem_extendr(dll);
}
