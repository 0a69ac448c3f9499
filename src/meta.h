/*
 * Host-side metadata heap: the allocator's own bookkeeping.
 *
 * Block records, by far the most frequent metadata, come from a per-arena
 * slab (meta_slab): fixed-size records carved from chunks and recycled
 * through an intrusive LIFO free list. The pool lock already serializes
 * every call, so the slab needs no thread cache, no atomics and no TLS; a
 * recycled record is usually still in cache. Everything else (segment
 * records, page bitmaps, the address map's table, free-index sets, stream
 * uses) is rare or large and comes from the C library's malloc.
 *
 * Why not jemalloc (the first version used a private jemalloc arena with an
 * explicit tcache): libjemalloc.so.2 uses initial-exec TLS (about 2.6 KB),
 * which does not fit glibc's static TLS surplus for dlopen'ed libraries, so
 * libcoop.so could not be loaded into a running Python (ctypes, PyTorch's
 * pluggable allocator) without GLIBC_TUNABLES. The slab also measured at
 * least as fast (docs/measured-host.md, "Allocator metadata").
 *
 * Failure injection (tests): meta_fail_nth(n) fails the nth next metadata
 * allocation: a malloc, or a slab chunk when the slab must grow.
 */
#ifndef COOP_META_H
#define COOP_META_H

#include <stddef.h>
#include <stdint.h>

#include "coop.h"

typedef struct meta_heap {
    int64_t live; /* allocations not yet freed (leak accounting) */
} meta_heap;

coop_status meta_heap_init(meta_heap *heap);
/* Allocations still live are counted as leaked (and stay allocated). */
void meta_heap_fini(meta_heap *heap);

/* NULL when host memory runs out (or an injected failure fires). */
void *meta_alloc(meta_heap *heap, size_t size);
void *meta_zalloc(meta_heap *heap, size_t size);
/* As meta_zalloc, for large metadata read at random on the hot paths (the
 * address map's table): from META_HUGE_MIN bytes on, huge-page aligned and
 * advised for transparent huge pages, and touched (zeroed) at once. Freed
 * with meta_free. */
void *meta_zalloc_hot(meta_heap *heap, size_t size);
/* size is what was asked for (kept for symmetry and checks). ptr may be NULL. */
void meta_free(meta_heap *heap, void *ptr, size_t size);

/* Transparent huge pages for hot large metadata (meta.c, advise_huge): the
 * huge page size assumed (x86-64, and AArch64 with 4 KiB base pages; with
 * other sizes the advice covers fewer or no pages and is harmless), and
 * the smallest meta_zalloc_hot allocation made huge-page aligned (below it,
 * rounding up to whole huge pages would waste more than it could save). */
#define META_HUGE_PAGE ((size_t)2 << 20)
#define META_HUGE_MIN (2 * META_HUGE_PAGE)

/* A slab of fixed-size records (size a multiple of 64: records are
 * cache-line aligned). Chunks come from the heap, so growing can fail.
 * Chunks hold per_chunk records until the slab holds META_HUGE_PAGE bytes
 * of records, then one aligned huge page each. */
typedef struct meta_slab {
    meta_heap *heap;
    size_t record_size;
    size_t per_chunk; /* records per chunk (below a huge page of records) */
    void *free_list;  /* first word of a free record links the next */
    struct slab_chunk *chunks;
    size_t live;     /* records handed out and not returned */
    size_t num_free; /* records on free_list */
} meta_slab;

void meta_slab_init(meta_slab *slab, meta_heap *heap, size_t record_size, size_t per_chunk);
/* Frees every chunk (records still live are gone too). */
void meta_slab_fini(meta_slab *slab);
/* Grows by a chunk; false (no host memory) leaves the slab unchanged. */
bool meta_slab_grow(meta_slab *slab);
/* Makes sure n records can be taken without growing (callers that must not
 * fail halfway reserve first, then take). false: no host memory. */
static inline bool meta_slab_reserve(meta_slab *slab, size_t n)
{
    while (slab->num_free < n)
        if (!meta_slab_grow(slab))
            return false;
    return true;
}
/* A record, or NULL when none is free and the slab cannot grow. */
static inline void *meta_slab_take(meta_slab *slab)
{
    if (!slab->free_list && !meta_slab_grow(slab))
        return NULL;
    void *r = slab->free_list;
    slab->free_list = *(void **)r;
    slab->num_free--;
    slab->live++;
    return r;
}
static inline void meta_slab_give(meta_slab *slab, void *record)
{
    *(void **)record = slab->free_list;
    slab->free_list = record;
    slab->num_free++;
    slab->live--;
}

/* Total allocations left live when heaps were finalized (tests: must be 0). */
int64_t meta_leaked_allocations(void);
/* Fails the Nth next metadata allocation of every heap (tests; 0 disarms). */
void meta_fail_nth(uint64_t nth);
/* Allocations left before the armed failure (0: fired or never armed). */
uint64_t meta_fail_remaining(void);

#endif
