/* The recorded allocator's reserved curve, rebuilt backwards; see recorded.h. */
#include <stdio.h>

#include "replay/recorded.h"
#include "status.h"

/* Reserved bytes stay below 2^63, as replay's live bytes (engine.c), so that
 * sums never wrap and every figure is a JSON integer. */
#define RECORDED_LIMIT ((uint64_t)1 << 63)

static const char *segment_action(trace_event_kind kind)
{
    switch (kind) {
    case TRACE_SEGMENT_ALLOC:
        return "segment_alloc";
    case TRACE_SEGMENT_FREE:
        return "segment_free";
    case TRACE_SEGMENT_MAP:
        return "segment_map";
    default:
        return "segment_unmap";
    }
}

/* Fails on segment event i: "line L: " or "byte B: " where the reader kept
 * positions, the event (its snapshot action name, size, address, index),
 * then why. */
static coop_status bad_event(const trace *t, size_t i, const char *why)
{
    size_t k = 0; /* segment events before i: its index in segment_where */
    for (size_t j = 0; j < i; j++)
        k += t->events[j].kind >= TRACE_SEGMENT_ALLOC && t->events[j].kind <= TRACE_SEGMENT_UNMAP;
    char where[48] = "";
    if (t->segment_where && k < t->num_segment_where)
        snprintf(where, sizeof where, "%s %llu: ", t->segment_where_is_byte ? "byte" : "line",
                 (unsigned long long)t->segment_where[k]);
    const trace_event *e = &t->events[i];
    return coop_set_error(COOP_ERR_INVALID, "%s%s of %llu bytes at 0x%llx (event %zu): %s", where,
                          segment_action(e->kind), (unsigned long long)e->size,
                          (unsigned long long)e->addr, i, why);
}

coop_status replay_recorded_compute(const trace *t, replay_recorded *out, uint64_t *reserved_curve)
{
    *out = (replay_recorded){0};
    if (!t->num_final_segments && !t->has_segment_events)
        return COOP_OK; /* not a snapshot: nothing was recorded */
    out->available = true;
    uint64_t reserved = 0;
    for (size_t k = 0; k < t->num_final_segments; k++) {
        if (t->final_segments[k].size >= RECORDED_LIMIT - reserved)
            return coop_set_error(COOP_ERR_INVALID,
                                  "the final segments add up to 2^63 bytes or more");
        reserved += t->final_segments[k].size;
    }
    out->final_reserved = reserved;
    out->peak_reserved = reserved;
    /* Backwards: `value` is the reserved bytes after event i; undo event i.
     * Going below 0 or reaching 2^63 means the segment events do not add
     * up. */
    uint64_t value = reserved;
    uint64_t mapped_later = 0;
    for (size_t i = t->num_events; i-- > 0;) {
        const trace_event *e = &t->events[i];
        if (reserved_curve)
            reserved_curve[i] = value;
        if (value > out->peak_reserved)
            out->peak_reserved = value;
        switch (e->kind) {
        case TRACE_SEGMENT_ALLOC:
        case TRACE_SEGMENT_MAP:
            if (e->size > value)
                return bad_event(t, i,
                                 "segment events and final segments disagree: these bytes are "
                                 "neither among the final segments nor released by a later "
                                 "segment event");
            if (e->size >= RECORDED_LIMIT - mapped_later)
                return bad_event(t, i,
                                 "the segment events from here on map 2^63 bytes or more in all");
            value -= e->size;
            mapped_later += e->size;
            out->num_segment_events++;
            break;
        case TRACE_SEGMENT_FREE:
        case TRACE_SEGMENT_UNMAP:
            if (e->size >= RECORDED_LIMIT - value)
                return bad_event(t, i, "the reserved bytes before it would be 2^63 or more");
            value += e->size;
            out->num_segment_events++;
            break;
        default:
            break;
        }
    }
    out->initial_reserved = value;
    if (value > out->peak_reserved)
        out->peak_reserved = value;
    out->map_bytes = out->initial_reserved + mapped_later;
    return COOP_OK;
}
