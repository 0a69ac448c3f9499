/* Metadata heap on a private jemalloc arena; see meta.h for why. */
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "meta.h"
#include "status.h"

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static unsigned arena_index;
static bool arena_ok;
static _Atomic int64_t leaked;
static _Atomic uint64_t fail_countdown; /* tests: 0 = never fail */

static void create_arena(void)
{
    size_t len = sizeof arena_index;
    arena_ok = mallctl("arenas.create", &arena_index, &len, NULL, 0) == 0;
}

coop_status meta_heap_init(meta_heap *heap)
{
    pthread_once(&arena_once, create_arena);
    if (!arena_ok)
        return coop_set_error(COOP_ERR_HOST_NOMEM,
                              "jemalloc refused to create the metadata arena (arenas.create)");
    heap->live = 0;
    unsigned tcache;
    size_t len = sizeof tcache;
    if (mallctl("tcache.create", &tcache, &len, NULL, 0) == 0) {
        heap->tcache = tcache;
        heap->flags = MALLOCX_ARENA(arena_index) | MALLOCX_TCACHE(tcache);
    } else {
        heap->tcache = UINT32_MAX;
        heap->flags = MALLOCX_ARENA(arena_index) | MALLOCX_TCACHE_NONE;
    }
    return COOP_OK;
}

void meta_heap_fini(meta_heap *heap)
{
    if (heap->tcache != UINT32_MAX) {
        unsigned tcache = heap->tcache;
        mallctl("tcache.destroy", NULL, NULL, &tcache, sizeof tcache);
        heap->tcache = UINT32_MAX;
    }
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
    void *p = mallocx(size, heap->flags);
    if (p)
        heap->live++;
    return p;
}

void *meta_zalloc(meta_heap *heap, size_t size)
{
    if (injected_failure())
        return NULL;
    void *p = mallocx(size, heap->flags | MALLOCX_ZERO);
    if (p)
        heap->live++;
    return p;
}

void meta_free(meta_heap *heap, void *ptr, size_t size)
{
    if (!ptr)
        return;
    sdallocx(ptr, size, heap->flags);
    heap->live--;
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
