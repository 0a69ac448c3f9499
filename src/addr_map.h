/*
 * Address map: block start address -> block record, so free(ptr) finds its
 * block in O(1) expected. Open addressing with linear probing: keys sit in
 * the table next to their values, so a lookup costs one cache miss for the
 * slot (plus the block itself) instead of walking a chain of records, and
 * compares keys without touching records. Deletion shifts the following
 * entries of the probe run back (no tombstones, so a steady malloc/free mix
 * never forces a rebuild); entries stay at most a quarter of the slots
 * (ADDR_MAP_MAX_LOAD) and the table grows to six times its entries when they
 * would not. The load is low on purpose: every probe past the home slot and
 * every entry a removal shifts back is a loop trip whose count the branch
 * predictor cannot know. coop bench (ns per malloc+free pair at 1k / 10k /
 * 100k live blocks, same run) took 132.7-134.6 / 150.4-156.3 / 328-349 at a
 * load of at most 1/2 (1k live blocks ran at 0.49: 0.93 extra probes and
 * 1.43 shifted entries per operation), 114.4-115.9 / 144.5-146.9 / 327-343
 * at 1/4, and 108.9-109.4 / 148.7-149.3 / 331-365 at 1/8; 1/4 costs 16 bytes
 * x 4 to 8 slots per live block (8 MiB at 100k).
 */
#ifndef COOP_ADDR_MAP_H
#define COOP_ADDR_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "coop.h"
#include "meta.h"

typedef struct addr_map_slot {
    uintptr_t key; /* 0: empty (block addresses are 512-aligned, non-zero) */
    void *value;
} addr_map_slot;

typedef struct addr_map {
    addr_map_slot *slots;
    size_t mask;    /* slots - 1, a power of two minus one */
    unsigned shift; /* 64 - log2(slots) */
    size_t count;
    meta_heap *heap;
} addr_map;

coop_status addr_map_init(addr_map *m, meta_heap *heap);
void addr_map_fini(addr_map *m);

/* Grows the table ahead of inserts so that insert itself cannot fail:
 * call with the number of entries about to be added. */
coop_status addr_map_grow(addr_map *m, size_t extra);
/* entries <= slots / ADDR_MAP_MAX_LOAD */
#define ADDR_MAP_MAX_LOAD 4
static inline bool addr_map_has_room(const addr_map *m, size_t extra)
{
    return ADDR_MAP_MAX_LOAD * (m->count + extra) <= m->mask + 1;
}
static inline coop_status addr_map_reserve(addr_map *m, size_t extra)
{
    if (addr_map_has_room(m, extra))
        return COOP_OK;
    return addr_map_grow(m, extra);
}
/* Block addresses are 512-aligned: drop those bits, mix (Fibonacci), keep the top bits. */
static inline size_t addr_map_home(const addr_map *m, uintptr_t key)
{
    return (size_t)((((uint64_t)key >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >> m->shift);
}

/* The lookups are inline: free() and malloc() each do one, and a call
 * across translation units would cost as much as the probe. */

/* key (non-zero) must not be present already; room must be reserved. */
static inline void addr_map_insert(addr_map *m, uintptr_t key, void *value)
{
    size_t i = addr_map_home(m, key);
    while (m->slots[i].key)
        i = (i + 1) & m->mask;
    m->slots[i].key = key;
    m->slots[i].value = value;
    m->count++;
}

/* The slot holding key, or SIZE_MAX. */
static inline size_t addr_map_find_slot(const addr_map *m, uintptr_t key)
{
    size_t i = addr_map_home(m, key);
    while (m->slots[i].key != key) {
        if (!m->slots[i].key)
            return SIZE_MAX;
        i = (i + 1) & m->mask;
    }
    return i;
}

/* Empties slot i (occupied): later entries of the run whose home is not
 * cyclically in (hole, their slot] move back into the hole. */
static inline void addr_map_remove_slot(addr_map *m, size_t i)
{
    for (size_t j = i;;) {
        j = (j + 1) & m->mask;
        if (!m->slots[j].key)
            break;
        size_t k = addr_map_home(m, m->slots[j].key);
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        m->slots[i] = m->slots[j];
        i = j;
    }
    m->slots[i].key = 0;
    m->slots[i].value = NULL;
    m->count--;
}

/* Removes key if present. */
static inline void addr_map_remove(addr_map *m, uintptr_t key)
{
    size_t i = addr_map_find_slot(m, key);
    if (i != SIZE_MAX)
        addr_map_remove_slot(m, i);
}

static inline void *addr_map_find(const addr_map *m, uintptr_t key)
{
    size_t i = addr_map_find_slot(m, key);
    return i == SIZE_MAX ? NULL : m->slots[i].value;
}

#endif
