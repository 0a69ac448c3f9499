/* Address map: open-addressing hash of block starts; see addr_map.h. */
#include "addr_map.h"
#include "status.h"

static coop_status alloc_table(addr_map *m, unsigned log2_slots)
{
    size_t n = (size_t)1 << log2_slots;
    /* huge pages from 4 MiB on: see meta_zalloc_hot */
    addr_map_slot *slots = meta_zalloc_hot(m->heap, n * sizeof *slots);
    if (!slots)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory for an address map of %zu slots",
                              n);
    m->slots = slots;
    m->mask = n - 1;
    m->shift = 64u - log2_slots;
    return COOP_OK;
}

coop_status addr_map_init(addr_map *m, meta_heap *heap)
{
    m->heap = heap;
    m->count = 0;
    return alloc_table(m, 7);
}

void addr_map_fini(addr_map *m)
{
    meta_free(m->heap, m->slots, (m->mask + 1) * sizeof *m->slots);
    m->slots = NULL;
}

static void place(addr_map *m, uintptr_t key, void *value)
{
    size_t i = addr_map_home(m, key);
    while (m->slots[i].key)
        i = (i + 1) & m->mask;
    m->slots[i].key = key;
    m->slots[i].value = value;
}

/* Rebuilds the table larger: six slots per entry, so that it runs a while
 * below ADDR_MAP_MAX_LOAD before the next rebuild. */
coop_status addr_map_grow(addr_map *m, size_t extra)
{
    unsigned log2_slots = 64u - m->shift;
    while (((size_t)1 << log2_slots) < 6 * (m->count + extra))
        log2_slots++;
    addr_map old = *m;
    coop_status st = alloc_table(m, log2_slots);
    if (st != COOP_OK)
        return st;
    for (size_t i = 0; i <= old.mask; i++)
        if (old.slots[i].key)
            place(m, old.slots[i].key, old.slots[i].value);
    meta_free(m->heap, old.slots, (old.mask + 1) * sizeof *old.slots);
    return COOP_OK;
}
