/* Address map: open-addressing hash of block starts; see addr_map.h. */
#include "addr_map.h"
#include "status.h"

/* Block addresses are 512-aligned: drop those bits, mix (Fibonacci), keep the top bits. */
static inline size_t home_slot(const addr_map *m, uintptr_t key)
{
    return (size_t)((((uint64_t)key >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >> m->shift);
}

static coop_status alloc_table(addr_map *m, unsigned log2_slots)
{
    size_t n = (size_t)1 << log2_slots;
    addr_map_slot *slots = meta_zalloc(m->heap, n * sizeof *slots);
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
    size_t i = home_slot(m, key);
    while (m->slots[i].key)
        i = (i + 1) & m->mask;
    m->slots[i].key = key;
    m->slots[i].value = value;
}

coop_status addr_map_reserve(addr_map *m, size_t extra)
{
    if (2 * (m->count + extra) <= m->mask + 1)
        return COOP_OK;
    unsigned log2_slots = 64u - m->shift;
    while (((size_t)1 << log2_slots) < 2 * (m->count + extra))
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

void addr_map_insert(addr_map *m, uintptr_t key, void *value)
{
    place(m, key, value);
    m->count++;
}

void addr_map_remove(addr_map *m, uintptr_t key)
{
    size_t i = home_slot(m, key);
    while (m->slots[i].key != key) {
        if (!m->slots[i].key)
            return;
        i = (i + 1) & m->mask;
    }
    /* Backward shift: move later entries of the probe run into the hole when
     * their home slot does not lie cyclically in (hole, j]. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->slots[j].key)
            break;
        size_t home = home_slot(m, m->slots[j].key);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays)
            continue;
        m->slots[hole] = m->slots[j];
        hole = j;
    }
    m->slots[hole].key = 0;
    m->slots[hole].value = NULL;
    m->count--;
}

void *addr_map_find(const addr_map *m, uintptr_t key)
{
    size_t i = home_slot(m, key);
    while (m->slots[i].key) {
        if (m->slots[i].key == key)
            return m->slots[i].value;
        i = (i + 1) & m->mask;
    }
    return NULL;
}
