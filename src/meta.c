/* Metadata heap: C library malloc plus per-arena record slabs; see meta.h. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "meta.h"
#include "status.h"

static _Atomic int64_t leaked;
static _Atomic uint64_t fail_countdown; /* tests: 0 = never fail */

coop_status meta_heap_init(meta_heap *heap)
{
    heap->live = 0;
    return COOP_OK;
}

void meta_heap_fini(meta_heap *heap)
{
    if (heap->live)
        atomic_fetch_add(&leaked, heap->live);
    heap->live = 0;
}

/* Tests arm a countdown; the hot path pays one relaxed load. */
static bool injected_failure(void)
{
    uint64_t n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (n == 0)
        return false;
    while (n && !atomic_compare_exchange_weak(&fail_countdown, &n, n - 1))
        ;
    return n == 1;
}

/* Marks the 2 MiB-aligned pages inside [p, p + size) for transparent huge
 * pages (before anything touches them). The address map's table and the
 * block records are read at random, one or two lines per lookup; at 100k
 * live blocks they span about 16 MB, 4,000 small pages, more than the
 * second-level TLB holds, so nearly every such read also walked the page
 * table. A dependent load over 16 MiB took 85 instead of 113 ns with huge
 * pages here (coop bench --latency's method); coop bench at 100k live
 * blocks, alternating runs: 384 -> 352 ns per pair (docs/measured-host.md,
 * "Speed").
 * Advice only: where THP is off or the call fails, the pages stay small and
 * nothing else changes. */
static void advise_huge(void *p, size_t size)
{
#ifdef MADV_HUGEPAGE
    uintptr_t lo = ((uintptr_t)p + META_HUGE_PAGE - 1) & ~(uintptr_t)(META_HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)p + size) & ~(uintptr_t)(META_HUGE_PAGE - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p, (void)size;
#endif
}

void *meta_alloc(meta_heap *heap, size_t size)
{
    if (injected_failure())
        return NULL;
    void *p = malloc(size ? size : 1);
    if (p)
        heap->live++;
    return p;
}

void *meta_zalloc(meta_heap *heap, size_t size)
{
    if (injected_failure())
        return NULL;
    void *p = calloc(1, size ? size : 1);
    if (p)
        heap->live++;
    return p;
}

void *meta_zalloc_hot(meta_heap *heap, size_t size)
{
    if (size < META_HUGE_MIN)
        return meta_zalloc(heap, size);
    if (injected_failure())
        return NULL;
    /* Aligned, so that all of it can be huge pages, and zeroed after the
     * advice so that the first touch already faults huge pages in. (This
     * touches every page at once, where calloc would leave them to first
     * use: fine for a table whose entries land at random anyway.) */
    size_t bytes = (size + META_HUGE_PAGE - 1) & ~(META_HUGE_PAGE - 1);
    void *p = aligned_alloc(META_HUGE_PAGE, bytes);
    if (!p)
        return NULL;
    heap->live++;
    advise_huge(p, bytes);
    return memset(p, 0, size);
}

void meta_free(meta_heap *heap, void *ptr, size_t size)
{
    (void)size;
    if (!ptr)
        return;
    free(ptr);
    heap->live--;
}

/* ---- Slabs ---- */

/* A chunk: this header on its own cache line, then per_chunk records. */
struct slab_chunk {
    struct slab_chunk *next;
    _Alignas(64) unsigned char records[];
};

void meta_slab_init(meta_slab *slab, meta_heap *heap, size_t record_size, size_t per_chunk)
{
    *slab = (meta_slab){.heap = heap, .record_size = record_size, .per_chunk = per_chunk};
}

void meta_slab_fini(meta_slab *slab)
{
    while (slab->chunks) {
        struct slab_chunk *c = slab->chunks;
        slab->chunks = c->next;
        free(c);
        slab->heap->live--;
    }
    slab->free_list = NULL;
    slab->live = slab->num_free = 0;
}

bool meta_slab_grow(meta_slab *slab)
{
    if (injected_failure())
        return false;
    /* Once the slab holds a huge page's worth of records, it grows by
     * chunks of one aligned huge page (advise_huge): small pools keep small
     * chunks, and the records of a large one (7.7 MB at 100k live blocks)
     * sit on a few TLB entries instead of about 1,900. */
    size_t per = slab->per_chunk, align = 64;
    if ((slab->live + slab->num_free) * slab->record_size >= META_HUGE_PAGE &&
        slab->record_size <= META_HUGE_PAGE / 2) {
        per = (META_HUGE_PAGE - sizeof(struct slab_chunk)) / slab->record_size;
        align = META_HUGE_PAGE;
    }
    size_t bytes = sizeof(struct slab_chunk) + per * slab->record_size;
    struct slab_chunk *c = aligned_alloc(align, (bytes + align - 1) & ~(align - 1));
    if (!c)
        return false;
    if (align == META_HUGE_PAGE)
        advise_huge(c, META_HUGE_PAGE);
    slab->heap->live++;
    c->next = slab->chunks;
    slab->chunks = c;
    /* Thread the records so the lowest address is taken first. */
    for (size_t i = per; i-- > 0;) {
        void *r = c->records + i * slab->record_size;
        *(void **)r = slab->free_list;
        slab->free_list = r;
    }
    slab->num_free += per;
    return true;
}

int64_t meta_leaked_allocations(void)
{
    return atomic_load(&leaked);
}

void meta_fail_nth(uint64_t nth)
{
    atomic_store(&fail_countdown, nth);
}

uint64_t meta_fail_remaining(void)
{
    return atomic_load(&fail_countdown);
}
