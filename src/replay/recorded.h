/*
 * `recorded`: what PyTorch's own allocator really reserved during a recorded
 * snapshot. The snapshot's final `segments` give the reserved bytes at the
 * end; walking the segment events backwards recovers every earlier value
 * (a segment_alloc means those bytes were not reserved before it, a
 * segment_free that they were), so segments created before recording began
 * are counted.
 */
#ifndef COOP_REPLAY_RECORDED_H
#define COOP_REPLAY_RECORDED_H

#include <stdbool.h>
#include <stdint.h>

#include "coop.h"
#include "trace/event.h"

typedef struct replay_recorded {
    bool available;            /* the trace carries the recorded allocator's segments */
    uint64_t initial_reserved; /* before the first event */
    uint64_t final_reserved;   /* sum of the final segments */
    uint64_t peak_reserved;
    uint64_t map_bytes; /* initial segments + every segment_alloc / segment_map */
    uint64_t num_segment_events;
} replay_recorded;

/* Fills *out; when reserved_curve is non-NULL it receives, per event index,
 * the reserved bytes after that event (t->num_events entries). A trace whose
 * segment events would make the reserved bytes negative (or 2^63 or more) is
 * inconsistent: COOP_ERR_INVALID naming the event, with its line or byte
 * where the trace kept one (trace.segment_where); the caller names the
 * trace. */
coop_status replay_recorded_compute(const trace *t, replay_recorded *out, uint64_t *reserved_curve);

#endif
