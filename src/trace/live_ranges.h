/*
 * The byte ranges of the blocks a reader holds live at one point of a
 * trace, which never overlap: an ordered set by first byte (a treap), so
 * that whether a new block overlaps any of them costs O(log n) expected
 * whatever the addresses, and a trace of millions of events never scans
 * its live blocks.
 */
#ifndef COOP_TRACE_LIVE_RANGES_H
#define COOP_TRACE_LIVE_RANGES_H

#include <stddef.h>
#include <stdint.h>

typedef struct live_range {
    uint64_t addr, last;        /* its bytes: [addr, last] */
    uint64_t stream;            /* the block's key with addr, for the reader's id_map */
    uint32_t id;                /* the reader's id of the block */
    uint32_t prio, left, right; /* the treap's; 0 is no node */
} live_range;

typedef struct live_ranges {
    live_range *nodes; /* nodes[0] unused: 0 is no node */
    size_t cap;
    uint32_t root, num_nodes, free_list; /* free nodes chained through left */
    uint64_t seed;                       /* priorities, drawn when nodes are first made */
} live_ranges;

/* A range of s sharing a byte with [addr, last], or NULL. */
const live_range *live_ranges_overlap(const live_ranges *s, uint64_t addr, uint64_t last);

/* Adds [addr, last], which must overlap none of s's; 0, or -1 if memory ran
 * out (s unchanged). */
int live_ranges_insert(live_ranges *s, uint64_t addr, uint64_t last, uint64_t stream, uint32_t id);

/* Removes the range that starts at addr if its id is id (else nothing). */
void live_ranges_remove(live_ranges *s, uint64_t addr, uint32_t id);

void live_ranges_free(live_ranges *s);

#endif
