/* The recorded allocator's reserved curve, rebuilt backwards; see recorded.h. */
#include "replay/recorded.h"
#include "status.h"

/* Reserved bytes stay below 2^63, as replay's live bytes (engine.c), so that
 * sums never wrap and every figure is a JSON integer. */
#define RECORDED_LIMIT ((uint64_t)1 << 63)

coop_status replay_recorded_compute(const trace *t, replay_recorded *out, uint64_t *reserved_curve)
{
    *out = (replay_recorded){0};
    if (!t->num_final_segments && !t->has_segment_events)
        return COOP_OK; /* not a snapshot: nothing was recorded */
    const char *name = t->name ? t->name : "trace";
    out->available = true;
    uint64_t reserved = 0;
    for (size_t k = 0; k < t->num_final_segments; k++) {
        if (t->final_segments[k].size >= RECORDED_LIMIT - reserved)
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: the final segments add up to 2^63 bytes or more", name);
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
                return coop_set_error(COOP_ERR_INVALID,
                                      "%s: segment event %zu releases more than the final "
                                      "segments and later events account for",
                                      name, i);
            if (e->size >= RECORDED_LIMIT - mapped_later)
                return coop_set_error(COOP_ERR_INVALID,
                                      "%s: the segment events from event %zu on map 2^63 bytes "
                                      "or more in all",
                                      name, i);
            value -= e->size;
            mapped_later += e->size;
            out->num_segment_events++;
            break;
        case TRACE_SEGMENT_FREE:
        case TRACE_SEGMENT_UNMAP:
            if (e->size >= RECORDED_LIMIT - value)
                return coop_set_error(COOP_ERR_INVALID,
                                      "%s: segment event %zu brings the reserved bytes before "
                                      "it to 2^63 or more",
                                      name, i);
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
