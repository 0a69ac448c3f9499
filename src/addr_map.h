/*
 * Address map: block start address -> block, so free(ptr) finds its block in
 * O(1) expected. A chained hash table with intrusive entries (embedded in the
 * block records); power-of-two buckets, doubled when the load exceeds 1.
 */
#ifndef COOP_ADDR_MAP_H
#define COOP_ADDR_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "coop.h"
#include "meta.h"

typedef struct addr_map_entry {
    uintptr_t key;
    struct addr_map_entry *next;
} addr_map_entry;

typedef struct addr_map {
    addr_map_entry **buckets;
    size_t mask; /* buckets - 1 */
    size_t count;
    meta_heap *heap;
} addr_map;

coop_status addr_map_init(addr_map *m, meta_heap *heap);
void addr_map_fini(addr_map *m);

/* Grows the table ahead of inserts so that insert itself cannot fail:
 * call with the number of entries about to be added. */
coop_status addr_map_reserve(addr_map *m, size_t extra);
/* key must not be present already. */
void addr_map_insert(addr_map *m, addr_map_entry *e, uintptr_t key);
void addr_map_remove(addr_map *m, addr_map_entry *e);
addr_map_entry *addr_map_find(const addr_map *m, uintptr_t key);

#endif
