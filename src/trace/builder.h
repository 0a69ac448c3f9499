/*
 * Collecting a trace while a reader parses: growing arrays for events, the
 * allocations live before the trace began and the recorded allocator's final
 * segments. trace_builder_finish puts the live-at-start allocations first and
 * renumbers ids densely in order of first appearance, so every reader yields
 * the same canonical form (and a text round trip reproduces a trace exactly).
 */
#ifndef COOP_TRACE_BUILDER_H
#define COOP_TRACE_BUILDER_H

#include "coop.h"
#include "trace/event.h"

typedef struct trace_builder {
    const char *path; /* borrowed, for messages and the trace's name */
    trace_event *events;
    size_t num_events, cap_events;
    trace_event *live; /* TRACE_ALLOC events of ids live before the trace */
    size_t num_live, cap_live;
    trace_segment *segments;
    size_t num_segments, cap_segments;
    uint32_t num_ids;
    int has_segment_events;
    /* Readers that know positions set where_kind once and where before each
     * push: segment events then keep theirs (trace.segment_where). */
    enum { TRACE_WHERE_NONE, TRACE_WHERE_LINE, TRACE_WHERE_BYTE } where_kind;
    uint64_t where;
    uint64_t *segment_where;
    size_t num_segment_where, cap_segment_where;
} trace_builder;

void trace_builder_init(trace_builder *b, const char *path);

/* A fresh id (ids are at most UINT32_MAX - 1 in number). */
coop_status trace_builder_new_id(trace_builder *b, uint32_t *id);

/* Appends one event; segment kinds set has_segment_events. */
coop_status trace_builder_push(trace_builder *b, const trace_event *event);

/* Records an allocation live before the trace began (kind TRACE_ALLOC). */
coop_status trace_builder_push_live(trace_builder *b, const trace_event *alloc);

/* Records one of the recorded allocator's final segments. */
coop_status trace_builder_push_segment(trace_builder *b, const trace_segment *segment);

/* Orders the live-at-start allocations by recorded address (then id). */
void trace_builder_sort_live_by_addr(trace_builder *b);

/* Moves everything into *out (zeroed first) and empties the builder: the
 * live-at-start ALLOC events become events[0 .. num_live_at_start), in
 * live_at_start order, and ids are renumbered 0.. in order of first
 * appearance. Events of other kinds than alloc/free carry id 0; free events
 * (R and F) get their alloc's size, addr and stream, and cost 0. Every free
 * must follow its id's alloc (readers check this). */
coop_status trace_builder_finish(trace_builder *b, trace *out);

/* Frees whatever the builder holds (after an error). */
void trace_builder_discard(trace_builder *b);

#endif
