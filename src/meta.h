/*
 * Host-side metadata heap: block records, segment records, page bitmaps and
 * hash tables live in one private jemalloc arena (mallctl "arenas.create"),
 * apart from the application's heap, so allocator bookkeeping neither
 * fragments nor is fragmented by the caller's objects.
 *
 * Each pool owns a meta_heap with an explicit jemalloc thread cache
 * ("tcache.create") instead of MALLOCX_TCACHE_NONE. A pool only allocates
 * metadata under its lock, so the cache is never used by two threads at
 * once. The arena already keeps a few spare block records, so only about
 * one malloc+free pair in ten reaches jemalloc (callgrind), but those calls
 * go to the arena's locked bins without a cache: measured with coop bench
 * (interleaved runs, same machine), the cache saves 7-10 ns per pair
 * (1k live blocks: 128-130 vs 136-139 ns; 10k: 217-219 vs 227-230 ns).
 * README.md, "Allocator metadata", says the same for users.
 */
#ifndef COOP_META_H
#define COOP_META_H

#include <stddef.h>
#include <stdint.h>

#include "coop.h"

typedef struct meta_heap {
    int flags;       /* mallocx flags: the private arena and this heap's cache */
    unsigned tcache; /* explicit tcache id, or UINT32_MAX when none */
    int64_t live;    /* allocations not yet freed (leak accounting) */
} meta_heap;

/* Creates the shared private arena on first use and a cache for this heap.
 * COOP_ERR_HOST_NOMEM if jemalloc refuses. */
coop_status meta_heap_init(meta_heap *heap);
/* Destroys the cache; allocations still live are counted as leaked. */
void meta_heap_fini(meta_heap *heap);

/* NULL when host memory runs out. */
void *meta_alloc(meta_heap *heap, size_t size);
void *meta_zalloc(meta_heap *heap, size_t size);
/* size must be what was asked for (sized deallocation). ptr may be NULL. */
void meta_free(meta_heap *heap, void *ptr, size_t size);

/* Total allocations left live when heaps were finalized (tests: must be 0). */
int64_t meta_leaked_allocations(void);
/* Fails the Nth next metadata allocation of every heap (tests; 0 disarms). */
void meta_fail_nth(uint64_t nth);
/* Allocations left before the armed failure (0: fired or never armed). */
uint64_t meta_fail_remaining(void);

#endif
