/*
 * The final segments a trace reader holds, checked against each other: each
 * is a reservation of the device's memory (cudaMalloc'ed, or an expandable
 * segment's own range of addresses), so two never share a byte, and the
 * recorded reserved figure adds their sizes. The snapshot reader (a
 * snapshot's `segments`) and the text reader (its E lines) refuse the same
 * segments; each words the refusal for its own input.
 */
#ifndef COOP_TRACE_SEGMENT_OVERLAP_H
#define COOP_TRACE_SEGMENT_OVERLAP_H

#include <stddef.h>
#include <stdint.h>

/* A final segment and where the reader saw it. */
typedef struct trace_segment_seen {
    uint64_t addr, size; /* its bytes: [addr, addr + size), addr + size < 2^64 */
    uint64_t order;      /* orders segments of one address as read: text, the E
                          * line's number; snapshot, its index in `segments` */
    uint64_t at;         /* snapshot: its dict's byte offset (text: 0) */
} trace_segment_seen;

/* Sorts segs by address, then order, and returns the first of them that
 * shares a byte with an earlier one, *prev that earlier one (the one before
 * it with bytes); NULL when no two overlap. A segment of no bytes overlaps
 * nothing. O(n log n). */
const trace_segment_seen *trace_segments_overlap(trace_segment_seen *segs, size_t n,
                                                 const trace_segment_seen **prev);

#endif
