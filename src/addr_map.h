/*
 * Address map: block start address -> block record, so free(ptr) finds its
 * block in O(1) expected. Open addressing with linear probing: keys sit in
 * the table next to their values, so a lookup costs one cache miss for the
 * slot (plus the block itself) instead of walking a chain of records. The
 * load factor stays at most 1/2; deletion shifts later entries back, so
 * there are no tombstones.
 */
#ifndef COOP_ADDR_MAP_H
#define COOP_ADDR_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "coop.h"
#include "meta.h"

typedef struct addr_map_slot {
    uintptr_t key; /* 0: empty (no block starts at address 0) */
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
coop_status addr_map_reserve(addr_map *m, size_t extra);
/* key (non-zero) must not be present already; room must be reserved. */
void addr_map_insert(addr_map *m, uintptr_t key, void *value);
/* Removes key if present. */
void addr_map_remove(addr_map *m, uintptr_t key);
void *addr_map_find(const addr_map *m, uintptr_t key);

#endif
