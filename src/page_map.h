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

/* True when every page of [first, end) is mapped (first < end). */
static inline bool page_map_all_set(const page_map *pm, size_t first, size_t end)
{
    size_t w = first >> 6, last = (end - 1) >> 6;
    uint64_t lo_mask = ~UINT64_C(0) << (first & 63);
    uint64_t hi_mask = ~UINT64_C(0) >> (63 - ((end - 1) & 63));
    if (w == last)
        return (~pm->bits[w] & lo_mask & hi_mask) == 0;
    if (~pm->bits[w] & lo_mask)
        return false;
    for (size_t i = w + 1; i < last; i++)
        if (~pm->bits[i])
            return false;
    return (~pm->bits[last] & hi_mask) == 0;
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
