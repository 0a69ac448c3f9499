/* Growing a trace during parsing; canonical id numbering at the end. */
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "status.h"
#include "trace/builder.h"

void trace_builder_init(trace_builder *b, const char *path)
{
    *b = (trace_builder){0};
    b->path = path;
}

/* The first capacity (items) of the builder's arrays: each doubles when full. */
#define BUILDER_ARRAY_FIRST 1024

/* Why an array of cap items of item_size bytes could not grow by one: its
 * doubled size would not fit in a size_t, or the host is out of memory. */
static coop_status grow_failed(const trace_builder *b, size_t cap, size_t item_size)
{
    size_t unused;
    const char *what = grow_array_capacity(cap, cap + 1, BUILDER_ARRAY_FIRST, item_size, &unused)
                           ? "out of memory"
                           : "trace too large";
    /* where the reader was: a long trace's user learns how far it got */
    unsigned long long at = (unsigned long long)b->where;
    if (b->where_kind == TRACE_WHERE_LINE)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s:%llu: %s (%zu events read)", b->path, at,
                              what, b->num_events);
    if (b->where_kind == TRACE_WHERE_BYTE)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: byte %llu: %s (%zu events read)", b->path,
                              at, what, b->num_events);
    return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: %s (%zu events read)", b->path, what,
                          b->num_events);
}

coop_status trace_builder_new_id(trace_builder *b, uint32_t *id)
{
    if (b->num_ids >= UINT32_MAX - 1)
        return coop_set_error(COOP_ERR_INVALID, "%s: more than %u allocations", b->path,
                              UINT32_MAX - 1);
    *id = b->num_ids++;
    return COOP_OK;
}

static int is_allocation_event(trace_event_kind kind)
{
    return kind == TRACE_ALLOC || kind == TRACE_FREE_REQUESTED || kind == TRACE_FREE;
}

coop_status trace_builder_push(trace_builder *b, const trace_event *event)
{
    bool segment = event->kind >= TRACE_SEGMENT_ALLOC && event->kind <= TRACE_SEGMENT_UNMAP;
    bool keep_where = segment && b->where_kind != TRACE_WHERE_NONE;
    if (keep_where && GROW_ARRAY(b->segment_where, b->cap_segment_where, b->num_segment_where + 1,
                                 BUILDER_ARRAY_FIRST))
        return grow_failed(b, b->cap_segment_where, sizeof *b->segment_where);
    if (GROW_ARRAY(b->events, b->cap_events, b->num_events + 1, BUILDER_ARRAY_FIRST))
        return grow_failed(b, b->cap_events, sizeof *b->events);
    trace_event *e = &b->events[b->num_events++];
    *e = *event;
    if (!is_allocation_event(e->kind))
        e->id = 0;
    if (segment)
        b->has_segment_events = 1;
    if (keep_where)
        b->segment_where[b->num_segment_where++] = b->where;
    return COOP_OK;
}

coop_status trace_builder_push_live(trace_builder *b, const trace_event *alloc)
{
    if (GROW_ARRAY(b->live, b->cap_live, b->num_live + 1, BUILDER_ARRAY_FIRST))
        return grow_failed(b, b->cap_live, sizeof *b->live);
    b->live[b->num_live] = *alloc;
    b->live[b->num_live].kind = TRACE_ALLOC;
    b->num_live++;
    return COOP_OK;
}

coop_status trace_builder_push_segment(trace_builder *b, const trace_segment *segment)
{
    if (GROW_ARRAY(b->segments, b->cap_segments, b->num_segments + 1, BUILDER_ARRAY_FIRST))
        return grow_failed(b, b->cap_segments, sizeof *b->segments);
    b->segments[b->num_segments++] = *segment;
    return COOP_OK;
}

static int by_addr_then_id(const void *pa, const void *pb)
{
    const trace_event *a = pa, *b = pb;
    if (a->addr != b->addr)
        return a->addr < b->addr ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

void trace_builder_sort_live_by_addr(trace_builder *b)
{
    if (b->num_live > 1)
        qsort(b->live, b->num_live, sizeof *b->live, by_addr_then_id);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

coop_status trace_builder_finish(trace_builder *b, trace *out)
{
    *out = (trace){0};
    size_t total = b->num_live + b->num_events;
    /* The events array becomes the trace's: grown by the live-at-start
     * allocations (slid up behind them) rather than copied, so a long trace
     * is held once (48 bytes an event), not twice, at its peak. */
    if (total < b->num_events ||
        GROW_ARRAY(b->events, b->cap_events, total ? total : 1, BUILDER_ARRAY_FIRST)) {
        coop_status st = grow_failed(b, b->cap_events, sizeof *b->events);
        trace_builder_discard(b);
        return st;
    }
    uint32_t *live_ids = malloc((b->num_live ? b->num_live : 1) * sizeof *live_ids);
    uint32_t *renumber = malloc((b->num_ids ? b->num_ids : 1) * sizeof *renumber);
    char *name = strdup(base_name(b->path));
    if (!live_ids || !renumber || !name) {
        free(live_ids);
        free(renumber);
        free(name);
        trace_builder_discard(b);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", b->path);
    }
    trace_event *events = b->events;
    b->events = NULL;
    if (b->cap_events > total && total) { /* give back the doubling's slack */
        trace_event *fit = realloc(events, total * sizeof *events);
        if (fit)
            events = fit;
    }
    if (b->num_live && b->num_events)
        memmove(events + b->num_live, events, b->num_events * sizeof *events);
    if (b->num_live)
        memcpy(events, b->live, b->num_live * sizeof *events);
    memset(renumber, 0xff, (b->num_ids ? b->num_ids : 1) * sizeof *renumber);
    /* renumber[old id] = new id, in order of first appearance */
    uint32_t next = 0;
    for (size_t i = 0; i < total; i++) {
        trace_event *e = &events[i];
        if (!is_allocation_event(e->kind))
            continue;
        if (renumber[e->id] == UINT32_MAX)
            renumber[e->id] = next++;
        e->id = renumber[e->id];
    }
    /* Frees describe the block of their alloc: same size, address, stream
     * (readers pair them by id; the file may repeat them or not). */
    size_t *alloc_at = malloc((next ? next : 1) * sizeof *alloc_at);
    if (!alloc_at) {
        free(events);
        free(live_ids);
        free(renumber);
        free(name);
        trace_builder_discard(b);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", b->path);
    }
    for (size_t i = 0; i < total; i++) {
        trace_event *e = &events[i];
        if (e->kind == TRACE_ALLOC) {
            alloc_at[e->id] = i;
        } else if (is_allocation_event(e->kind)) {
            const trace_event *a = &events[alloc_at[e->id]];
            e->size = a->size;
            e->addr = a->addr;
            e->stream = a->stream;
            e->cost_ns = 0;
        }
    }
    free(alloc_at);
    for (size_t i = 0; i < b->num_live; i++)
        live_ids[i] = events[i].id;
    free(renumber);

    out->name = name;
    out->events = events;
    out->num_events = total;
    out->num_ids = next;
    out->live_at_start = live_ids;
    out->num_live_at_start = b->num_live;
    out->final_segments = b->segments;
    out->num_final_segments = b->num_segments;
    out->has_segment_events = b->has_segment_events;
    out->segment_where = b->segment_where;
    out->num_segment_where = b->num_segment_where;
    out->segment_where_is_byte = b->where_kind == TRACE_WHERE_BYTE;
    b->segments = NULL;
    b->segment_where = NULL;
    trace_builder_discard(b);
    return COOP_OK;
}

void trace_builder_discard(trace_builder *b)
{
    free(b->events);
    free(b->live);
    free(b->segments);
    free(b->segment_where);
    const char *path = b->path;
    *b = (trace_builder){0};
    b->path = path;
}
