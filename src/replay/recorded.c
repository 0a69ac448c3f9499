/* The recorded allocator's reserved curve, rebuilt backwards; see recorded.h. */
#include "replay/recorded.h"
#include "status.h"

coop_status replay_recorded_compute(const trace *t, replay_recorded *out, uint64_t *reserved_curve)
{
    *out = (replay_recorded){0};
    if (!t->num_final_segments && !t->has_segment_events)
        return COOP_OK; /* not a snapshot: nothing was recorded */
    out->available = true;
    uint64_t reserved = 0;
    for (size_t k = 0; k < t->num_final_segments; k++)
        reserved += t->final_segments[k].size;
    out->final_reserved = reserved;
    out->peak_reserved = reserved;
    /* Backwards: `reserved` is the value after event i; undo event i. Signed
     * arithmetic catches traces whose segment events do not add up. */
    int64_t value = (int64_t)reserved;
    uint64_t mapped_later = 0;
    for (size_t i = t->num_events; i-- > 0;) {
        const trace_event *e = &t->events[i];
        if (reserved_curve)
            reserved_curve[i] = (uint64_t)value;
        if ((uint64_t)value > out->peak_reserved)
            out->peak_reserved = (uint64_t)value;
        switch (e->kind) {
        case TRACE_SEGMENT_ALLOC:
        case TRACE_SEGMENT_MAP:
            value -= (int64_t)e->size;
            mapped_later += e->size;
            out->num_segment_events++;
            break;
        case TRACE_SEGMENT_FREE:
        case TRACE_SEGMENT_UNMAP:
            value += (int64_t)e->size;
            out->num_segment_events++;
            break;
        default:
            break;
        }
        if (value < 0)
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: segment event %zu releases more than the final segments "
                                  "and later events account for",
                                  t->name ? t->name : "trace", i);
    }
    out->initial_reserved = (uint64_t)value;
    if ((uint64_t)value > out->peak_reserved)
        out->peak_reserved = (uint64_t)value;
    out->map_bytes = out->initial_reserved + mapped_later;
    return COOP_OK;
}
