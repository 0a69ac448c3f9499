/* The final segments against each other (segment_overlap.h). */
#include "trace/segment_overlap.h"

#include <stdlib.h>

static int by_addr_then_order(const void *pa, const void *pb)
{
    const trace_segment_seen *a = pa, *b = pb;
    if (a->addr != b->addr)
        return a->addr < b->addr ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

const trace_segment_seen *trace_segments_overlap(trace_segment_seen *segs, size_t n,
                                                 const trace_segment_seen **prev)
{
    *prev = NULL;
    if (n > 1)
        qsort(segs, n, sizeof *segs, by_addr_then_order);
    /* sorted by address, a segment that overlaps a later one overlaps the
     * next one with bytes, so comparing with the last seen suffices */
    for (size_t k = 0; k < n; k++) {
        if (!segs[k].size)
            continue;
        if (*prev && (*prev)->addr + (*prev)->size > segs[k].addr)
            return &segs[k];
        *prev = &segs[k];
    }
    *prev = NULL;
    return NULL;
}
