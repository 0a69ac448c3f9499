/*
 * Host allocation fault sweeps (tests/host_alloc_*_test.c): every malloc /
 * calloc / realloc / strdup / aligned_alloc call an operation makes is failed
 * in turn (host_alloc_fault.h: the n-th call after arming returns NULL,
 * n = 1, 2, ... until the operation runs without reaching it). Each failing
 * run must return COOP_ERR_HOST_NOMEM with a message, never crash, pass the
 * operation's own check of the state it left (outputs zeroed, a pool still
 * valid), and once its owner has cleaned up, leave as many live blocks as
 * before: a leak check that works without ASan. A run the fault did not
 * stop must give the unfaulted run's answer (the operation's cleanup checks).
 *
 * Not reached: allocations inside shared libraries (zlib's inflate state,
 * libc's stdio buffers); see host_alloc_fault.h. jansson's blocks are
 * counted (json_set_alloc_funcs) but not failed: it reports a failure in its
 * lexer as a syntax error, which no reader could tell from bad input.
 */
#ifndef COOP_TESTS_HOST_ALLOC_SWEEP_H
#define COOP_TESTS_HOST_ALLOC_SWEEP_H

#include "coop.h"

#define CORPUS COOP_TEST_SRCDIR "/tests/fuzz/corpus/"

/* One operation under test: run() does it (faults armed), returning its
 * status; cleanup() releases what a successful run() produced (faults
 * disarmed); check_failed() (optional) checks the state a refused run
 * left. */
typedef struct operation {
    const char *name;
    coop_status (*run)(void *ctx);
    void (*cleanup)(void *ctx);
    void (*check_failed)(void *ctx);
    void *ctx;
} operation;

/* Sweeps op (failing a cmocka test on any broken rule); returns the number
 * of allocation calls it makes (= runs that were failed). */
long host_alloc_sweep(const operation *op);

/* The allocation call the running sweep fails, for messages. */
long host_alloc_sweep_call(void);

/* One line of the test's output: what was swept, and how many calls. */
void host_alloc_report(const char *what, long calls);

#endif
