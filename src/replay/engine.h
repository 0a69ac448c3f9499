/*
 * Replay engine: runs one trace through one policy at one capacity.
 *
 * Semantics:
 *  - blocks live before recording began need nothing special: readers put
 *    their TRACE_ALLOC events first in events[] (trace.h), so replaying the
 *    events from the start allocates them first;
 *  - TRACE_ALLOC -> malloc(size, stream); TRACE_FREE (free_completed) -> free;
 *  - TRACE_FREE_REQUESTED places nothing: the owner has let go, but the block
 *    may still be in use by another stream's kernels until free_completed, so
 *    neither PyTorch nor a stream-safe coop may reuse it before then; the bytes
 *    stay live until TRACE_FREE;
 *  - segment and OOM events describe the recorded allocator and are ignored
 *    here (recorded.h reads them).
 */
#ifndef COOP_REPLAY_ENGINE_H
#define COOP_REPLAY_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "replay/policy.h"
#include "trace/event.h"

/* What is known about a trace before any policy runs it. */
typedef struct replay_prepared {
    const trace *trace;
    uint64_t peak_live;     /* peak of live requested bytes */
    uint64_t num_ops;       /* malloc + free calls a full replay makes */
    uint64_t unknown_frees; /* TRACE_FREE of an id that is not live: skipped */
} replay_prepared;

/* Validates the trace's id structure and computes the peak of live bytes.
 * COOP_ERR_INVALID (with the event index; the caller names the trace) for an
 * alloc of an id already live, an id out of range, or live bytes reaching
 * 2^63. */
coop_status replay_prepare(const trace *t, replay_prepared *out);
void replay_prepared_free(replay_prepared *p);

/* One block's life in the address map: [start_event, end_event). */
typedef struct replay_placement {
    uint64_t addr, size;
    uint64_t start_event, end_event; /* end = num_events when never freed */
} replay_placement;

/* The memory-over-time series of one run (collected on request). A run that
 * ran out of memory fills them only before its oom_event; the rest stay 0. */
typedef struct replay_series {
    uint64_t *live;     /* per event index: live bytes after the event */
    uint64_t *reserved; /* per event index: the policy's reserved bytes */
    replay_placement *placements;
    uint64_t num_placements, cap_placements;
} replay_series;

typedef struct replay_run_options {
    /* Time every malloc / free call (median in ns_per_op). A timed run does
     * nothing but the calls between them: no statistics are read, no
     * fragmentation sampled and no series kept, so that reading one policy's
     * figures (which touches its metadata) cannot slow or speed the next
     * timed call; the other figures of a timed run are not filled. */
    bool measure_time;
    /* Timed runs: replay the trace this many times (each with a fresh
     * policy) and take the median over all calls (0 counts as 1). */
    unsigned timed_passes;
    replay_series *series; /* non-NULL: record the series (arrays sized num_events) */
    void (*progress)(void *ctx, uint64_t done, uint64_t total); /* optional */
    void *progress_ctx;
} replay_run_options;

typedef struct replay_run {
    bool oom;           /* the policy ran out of memory ... */
    uint64_t oom_event; /* ... at this event index */
    uint64_t peak_reserved, peak_active, final_reserved, map_bytes;
    double frag_mean, frag_max; /* over allocation times; valid when has_frag */
    bool has_frag;
    double ns_per_op;   /* median over all timed calls; valid when num_timed > 0 */
    uint64_t num_timed; /* calls timed (0 unless measure_time; 0 for a trace without calls) */
} replay_run;

/* Runs the whole trace (or up to the first OOM). An OOM is a result, not an
 * error: the return is COOP_OK with out->oom set. Other statuses mean the
 * policy itself failed. */
coop_status replay_run_trace(const replay_prepared *p, const replay_policy_ops *ops,
                             uint64_t capacity, uint64_t page, const replay_run_options *opt,
                             replay_run *out);

/* The smallest capacity in [lo, hi] at which the trace runs without OOM,
 * to the policy's capacity step (policy.h; bisection over its multiples,
 * every probe a fresh replay through the policy's own retry path). The
 * answer always runs, and the step's multiple below it fails (unless the
 * answer is lo or hi); but feasibility need not be
 * monotone (releases on OOM and capacity-sized ranges change later
 * placements), so a smaller capacity may run too (tests/replay_policy_test.c:
 * expandable_feasibility_is_not_monotone). hi must pass (COOP_ERR_NOMEM
 * otherwise). The run at the capacity found is returned in *at_min (its map_bytes are the bytes
 * mapped at the minimum capacity). */
coop_status replay_min_capacity(const replay_prepared *p, const replay_policy_ops *ops,
                                uint64_t page, uint64_t lo, uint64_t hi, uint64_t *min_capacity,
                                replay_run *at_min);

void replay_series_free(replay_series *s);

#endif
