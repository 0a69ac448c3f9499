/*
 * Measuring one trace under a list of policies: the main run at the given
 * capacity (peaks, fragmentation, ns per op, the timeline), then the minimum
 * capacity by bisection and the bytes mapped there. `recorded` rows come from
 * the trace's own segments (recorded.h).
 */
#ifndef COOP_REPLAY_MEASURE_H
#define COOP_REPLAY_MEASURE_H

#include <stdbool.h>
#include <stdio.h>

#include "replay/policy.h"
#include "replay/report.h"
#include "trace/event.h"

/* A policy to measure: a placement policy, or NULL for `recorded`. */
typedef struct replay_choice {
    const char *name;
    const replay_policy_ops *ops;
} replay_choice;

typedef struct replay_measure_options {
    uint64_t capacity; /* device capacity of the main run (and bisection ceiling) */
    uint64_t page;     /* physical page size for page-mapping policies */
    FILE *timeline;    /* non-NULL: append this trace's series */
    bool progress;     /* report progress on stderr */
} replay_measure_options;

/* Fills rows[0 .. count-1] (one per choice, in order; a `recorded` choice on
 * a trace without segments is skipped, so *filled may be < count). A policy
 * that fails (its backend refuses the configuration, say) is reported on
 * stderr, counted in *failed (not reset) and skipped; errors in the trace
 * itself (found before any policy runs) and host memory exhaustion end the
 * measurement with their status. */
coop_status replay_measure(const trace *t, const replay_choice *choices, size_t count,
                           const replay_measure_options *opt, replay_row *rows, size_t *filled,
                           size_t *failed);

#endif
