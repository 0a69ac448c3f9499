/*
 * Address map: block start address -> block record, so free(ptr) finds its
 * block in O(1) expected. Open addressing with linear probing: keys sit in
 * the table next to their values, so a lookup costs one cache miss for the
 * slot (plus the block itself) instead of walking a chain of records.
 * Deletion leaves a tombstone (O(1)); entries plus tombstones stay at most
 * half the slots, and the table is rebuilt (amortized O(1)) when they would
 * not.
 */
#ifndef COOP_ADDR_MAP_H
#define COOP_ADDR_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "coop.h"
#include "meta.h"

typedef struct addr_map_slot {
    uintptr_t key; /* 0: empty, 1: deleted (block addresses are 512-aligned, non-zero) */
    void *value;
} addr_map_slot;

typedef struct addr_map {
    addr_map_slot *slots;
    size_t mask;    /* slots - 1, a power of two minus one */
    unsigned shift; /* 64 - log2(slots) */
    size_t count;
    size_t tombstones;
    meta_heap *heap;
} addr_map;

coop_status addr_map_init(addr_map *m, meta_heap *heap);
void addr_map_fini(addr_map *m);

/* Grows the table ahead of inserts so that insert itself cannot fail:
 * call with the number of entries about to be added. */
coop_status addr_map_grow(addr_map *m, size_t extra);
static inline coop_status addr_map_reserve(addr_map *m, size_t extra)
{
    if (2 * (m->count + m->tombstones + extra) <= m->mask + 1)
        return COOP_OK;
    return addr_map_grow(m, extra);
}
/* Block addresses are 512-aligned: drop those bits, mix (Fibonacci), keep the top bits. */
static inline size_t addr_map_home(const addr_map *m, uintptr_t key)
{
    return (size_t)((((uint64_t)key >> 9) * UINT64_C(0x9E3779B97F4A7C15)) >> m->shift);
}

#define ADDR_MAP_TOMBSTONE ((uintptr_t)1)

/* The lookups are inline: free() and malloc() each do one, and a call
 * across translation units would cost as much as the probe. */

/* key (non-zero) must not be present already; room must be reserved. */
static inline void addr_map_insert(addr_map *m, uintptr_t key, void *value)
{
    size_t i = addr_map_home(m, key);
    while (m->slots[i].key > ADDR_MAP_TOMBSTONE)
        i = (i + 1) & m->mask;
    if (m->slots[i].key == ADDR_MAP_TOMBSTONE)
        m->tombstones--;
    m->slots[i].key = key;
    m->slots[i].value = value;
    m->count++;
}

/* Removes key if present. */
static inline void addr_map_remove(addr_map *m, uintptr_t key)
{
    size_t i = addr_map_home(m, key);
    while (m->slots[i].key != key) {
        if (!m->slots[i].key)
            return;
        i = (i + 1) & m->mask;
    }
    m->slots[i].key = ADDR_MAP_TOMBSTONE;
    m->slots[i].value = NULL;
    m->tombstones++;
    m->count--;
}

static inline void *addr_map_find(const addr_map *m, uintptr_t key)
{
    size_t i = addr_map_home(m, key);
    while (m->slots[i].key) {
        if (m->slots[i].key == key)
            return m->slots[i].value;
        i = (i + 1) & m->mask;
    }
    return NULL;
}

#endif
