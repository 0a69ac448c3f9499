/*
 * Index of the blocks that break sliding windows (pinned, locked or
 * unevictable allocated blocks), kept as the address-ordered array of their
 * maximal runs: runs of address-adjacent breaker blocks. The gaps between
 * runs are then exactly the maximal runs of free and evictable blocks, with
 * their byte totals known without visiting them, so the window search
 * (window.h) skips a breaker run in O(1) and every gap smaller than the
 * request wholesale.
 *
 * The owner adds a block when it starts breaking windows and removes it when
 * it stops, while the block is still allocated (before freeing it: removal
 * reads the block's neighbours). Blocks inside runs must stay allocated; the
 * blocks around runs (free or evictable) may split and merge freely. The
 * index is conservative for the search: the search still checks every block
 * it walks, so a breaker missing from the index only costs time, whereas a
 * non-breaker inside a run would be skipped (the owner's invariant).
 * Add and remove are a binary search plus a memmove of the run array.
 */
#ifndef COOP_REMAT_BREAKER_INDEX_H
#define COOP_REMAT_BREAKER_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"

typedef struct breaker_run {
    uintptr_t start, end;      /* [start, end): first->addr .. last->addr + last->size */
    arena_block *first, *last; /* allocated breaker blocks, address order */
} breaker_run;

typedef struct breaker_index {
    breaker_run *runs; /* sorted by start, disjoint, never adjacent (merged) */
    size_t len, cap;
    size_t blocks; /* breaker blocks in the runs */
} breaker_index;

/* 0, or -1 when host memory runs out (index unchanged). b must be allocated
 * and not in the index. */
int breaker_index_add(breaker_index *x, arena_block *b);
/* 0, or -1 when host memory runs out splitting a run (index unchanged). b
 * must be in the index and still allocated. */
int breaker_index_remove(breaker_index *x, arena_block *b);
void breaker_index_free(breaker_index *x);

#endif
