/* Address map: chained hash of block starts; see addr_map.h. */
#include "addr_map.h"
#include "status.h"

/* Block addresses are 512-aligned: drop those bits, then mix (Fibonacci). */
static inline size_t bucket_of(const addr_map *m, uintptr_t key)
{
    uint64_t h = ((uint64_t)key >> 9) * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h >> 32) & m->mask;
}

coop_status addr_map_init(addr_map *m, meta_heap *heap)
{
    m->heap = heap;
    m->count = 0;
    m->mask = 63;
    m->buckets = meta_zalloc(heap, (m->mask + 1) * sizeof *m->buckets);
    if (!m->buckets)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory for the address map");
    return COOP_OK;
}

void addr_map_fini(addr_map *m)
{
    meta_free(m->heap, m->buckets, (m->mask + 1) * sizeof *m->buckets);
    m->buckets = NULL;
}

coop_status addr_map_reserve(addr_map *m, size_t extra)
{
    size_t want = m->count + extra;
    if (want <= m->mask + 1)
        return COOP_OK;
    size_t n = m->mask + 1;
    while (n < want)
        n *= 2;
    addr_map_entry **buckets = meta_zalloc(m->heap, n * sizeof *buckets);
    if (!buckets)
        return coop_set_error(COOP_ERR_HOST_NOMEM,
                              "no host memory to grow the address map to %zu buckets", n);
    addr_map old = *m;
    m->buckets = buckets;
    m->mask = n - 1;
    for (size_t i = 0; i <= old.mask; i++) {
        addr_map_entry *e = old.buckets[i];
        while (e) {
            addr_map_entry *next = e->next;
            size_t b = bucket_of(m, e->key);
            e->next = m->buckets[b];
            m->buckets[b] = e;
            e = next;
        }
    }
    meta_free(m->heap, old.buckets, (old.mask + 1) * sizeof *old.buckets);
    return COOP_OK;
}

void addr_map_insert(addr_map *m, addr_map_entry *e, uintptr_t key)
{
    size_t b = bucket_of(m, key);
    e->key = key;
    e->next = m->buckets[b];
    m->buckets[b] = e;
    m->count++;
}

void addr_map_remove(addr_map *m, addr_map_entry *e)
{
    addr_map_entry **link = &m->buckets[bucket_of(m, e->key)];
    while (*link != e)
        link = &(*link)->next;
    *link = e->next;
    e->next = NULL;
    m->count--;
}

addr_map_entry *addr_map_find(const addr_map *m, uintptr_t key)
{
    addr_map_entry *e = m->buckets[bucket_of(m, key)];
    while (e && e->key != key)
        e = e->next;
    return e;
}
