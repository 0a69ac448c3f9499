/*
 * Host allocation fault injection and live-block counting for tests linked
 * with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,
 * --wrap=strdup,--wrap=aligned_alloc (tests/harden.mk; meta.c uses
 * aligned_alloc for large tables). The linker sends every call to those
 * functions from the statically linked objects (the test, libcoop,
 * libcooptools) to the __wrap_ versions in host_alloc_fault.c. Calls made
 * inside shared libraries (zlib's gzopen buffers, libc's own) are NOT
 * wrapped: --wrap rewrites only the references the static link resolves.
 * jansson's blocks are counted through json_set_alloc_funcs (host_fault_install)
 * but not failed (see there).
 *
 * Counting: live = blocks handed out minus blocks freed, through the
 * wrappers (a realloc that moves a block counts once). Comparing it before
 * and after an operation and its owner's cleanup is a leak check that needs
 * no sanitizer.
 *
 * Faults: host_fault_arm(n) makes the n-th allocation call from then on
 * (malloc, calloc, realloc, strdup, aligned_alloc; 1-based) return NULL, once; a failed
 * realloc leaves the old block alive, as C says. host_fault_disarm() stops
 * and reports whether the fault was hit.
 */
#ifndef COOP_TESTS_HOST_ALLOC_FAULT_H
#define COOP_TESTS_HOST_ALLOC_FAULT_H

#include <stdbool.h>
#include <stddef.h>

/* Routes jansson's allocations through the live count (not the faults).
 * Call once before any JSON value exists. */
void host_fault_install(void);

/* Blocks currently live through the wrappers. */
long host_fault_live(void);

/* Usable bytes (malloc_usable_size) of the blocks live through the wrappers,
 * and the most they reached since host_fault_peak_reset (which starts the
 * peak at the bytes live now). Blocks a shared library allocates and frees
 * itself are not seen. For tests that bound a reader's memory per event. */
long long host_fault_bytes(void);
void host_fault_peak_reset(void);
long long host_fault_peak_bytes(void);

/* Blocks handed out through the wrappers so far (a realloc that moves or
 * makes a block counts one): a reader's allocation calls per event. */
long host_fault_allocations(void);

/* Fails the n-th allocation call from now on (n >= 1). */
void host_fault_arm(long n);

/* Stops injecting; true if the armed call was reached (and failed). */
bool host_fault_disarm(void);

#endif
