/*
 * Measuring one trace under a list of policies: the main run at the given
 * capacity (peaks, fragmentation, the timeline), the timed runs at the same
 * capacity (ns per op: REPLAY_TIMED_PASSES replays that read no figures
 * between calls, the median over all their calls), then the minimum
 * capacity by bisection and the bytes mapped there. `recorded` rows come
 * from the trace's own segments (recorded.h).
 */
#ifndef COOP_REPLAY_MEASURE_H
#define COOP_REPLAY_MEASURE_H

#include <stdbool.h>
#include <stdio.h>

#include "replay/policy.h"
#include "replay/report.h"
#include "trace/event.h"

/* Timed replays per (trace, policy). Timing used to ride on the main run,
 * which reads the policy's figures after every event (for coop a walk to
 * the largest free block), so the harness's own reads sat between the
 * calls it timed; timed runs now do nothing but the calls. Three passes
 * triple the samples the median is taken over. On bert, outside the
 * replay (the same calls timed in a loop, six runs each): coop 40-42 ns
 * with those reads and 39-40 without, jemalloc 39-40 either way; inside
 * `coop replay` bert stays at coop 39-43 against jemalloc 38-40 (twelve
 * runs). */
#define REPLAY_TIMED_PASSES 3

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
 * itself (found before any policy runs), host memory exhaustion and a
 * failed write to the timeline (ferror(opt->timeline) set; the message has
 * errno's reason) end the measurement with their status. */
coop_status replay_measure(const trace *t, const replay_choice *choices, size_t count,
                           const replay_measure_options *opt, replay_row *rows, size_t *filled,
                           size_t *failed);

#endif
