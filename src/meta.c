/* Metadata heap: C library malloc plus per-arena record slabs; see meta.h. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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
    size_t bytes = sizeof(struct slab_chunk) + slab->per_chunk * slab->record_size;
    struct slab_chunk *c = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!c)
        return false;
    slab->heap->live++;
    c->next = slab->chunks;
    slab->chunks = c;
    /* Thread the records so the lowest address is taken first. */
    for (size_t i = slab->per_chunk; i-- > 0;) {
        void *r = c->records + i * slab->record_size;
        *(void **)r = slab->free_list;
        slab->free_list = r;
    }
    slab->num_free += slab->per_chunk;
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
