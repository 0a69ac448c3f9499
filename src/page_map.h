/*
 * Page map: one bit per physical page of a VMM reservation, set while the
 * page is mapped. Ranges are scanned a 64-bit word at a time, so checking
 * the pages under a 256 MiB block with 2 MiB pages reads two words.
 */
#ifndef COOP_PAGE_MAP_H
#define COOP_PAGE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coop.h"
#include "meta.h"

typedef struct page_map {
    uint64_t *bits;
    size_t num_pages;
    size_t num_mapped; /* set bits */
} page_map;

coop_status page_map_init(page_map *pm, size_t num_pages, meta_heap *heap);
void page_map_fini(page_map *pm, meta_heap *heap);

static inline bool page_map_test(const page_map *pm, size_t page)
{
    return (pm->bits[page >> 6] >> (page & 63)) & 1u;
}

/* Number of set (mapped) bits in [first, end). */
size_t page_map_count(const page_map *pm, size_t first, size_t end);
/* Finds the first run of pages in [from, end) whose bit equals mapped; on
 * success sets [*run_first, *run_end) and returns true. */
bool page_map_next_run(const page_map *pm, size_t from, size_t end, bool mapped, size_t *run_first,
                       size_t *run_end);
/* Sets or clears the bits of [first, end). */
void page_map_set(page_map *pm, size_t first, size_t end, bool mapped);
/* Recounts the set bits of the whole map (checker). */
size_t page_map_popcount(const page_map *pm);

#endif
