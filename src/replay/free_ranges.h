/*
 * A set of disjoint free address ranges, keyed by start address, with the
 * total and the largest range kept current: how the jemalloc policy knows its
 * free space (jemalloc does not expose its free extents). Ranges become free
 * when committed or freed and stop being free when allocated or decommitted;
 * adjacent ranges coalesce. A max_treap: O(log n) expected per operation,
 * the largest range in O(1).
 */
#ifndef COOP_REPLAY_FREE_RANGES_H
#define COOP_REPLAY_FREE_RANGES_H

#include <stdbool.h>
#include <stdint.h>

#include "replay/max_treap.h"

typedef struct free_range free_range;

typedef struct free_ranges {
    max_treap_node *root;
    uint64_t total; /* bytes in all ranges */
    bool failed;    /* host memory ran out once: the figures are unreliable */
} free_ranges;

/* Marks [addr, addr+size) free (parts already free stay free). */
void free_ranges_add(free_ranges *set, uint64_t addr, uint64_t size);
/* Marks [addr, addr+size) not free (parts not free are ignored). */
void free_ranges_remove(free_ranges *set, uint64_t addr, uint64_t size);
uint64_t free_ranges_largest(const free_ranges *set);
void free_ranges_clear(free_ranges *set);

#endif
