/*
 * Hash map from a two-word key (an address and a stream, or a file's id and 0)
 * to the dense id a reader gave that allocation, plus the reader's bookkeeping
 * (state, where it was allocated for error messages). Open addressing with
 * linear probing and backward-shift deletion: no tombstones, so long traces
 * that allocate and free millions of times keep short probe chains. The hash
 * is keyed per map, so keys a file chose cannot all land in one cluster.
 */
#ifndef COOP_TRACE_ID_MAP_H
#define COOP_TRACE_ID_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct id_map_slot {
    uint64_t key_a, key_b;
    uint64_t where; /* reader's position of the allocation (line, entry) */
    uint64_t size;  /* requested bytes */
    uint32_t id;    /* dense id */
    uint8_t state;  /* reader-defined */
    uint8_t used;   /* 0: empty slot */
} id_map_slot;

typedef struct id_map {
    id_map_slot *slots;
    size_t mask; /* capacity - 1, capacity a power of two */
    size_t count;
    uint64_t seed; /* mixed into the hash, drawn when slots are first made */
} id_map;

/* The slot holding key, or NULL. */
id_map_slot *id_map_find(const id_map *m, uint64_t key_a, uint64_t key_b);

/* Inserts key (which must be absent) and returns its zeroed slot with the key
 * filled in, or NULL if memory ran out. The pointer is valid until the next
 * insert or remove. */
id_map_slot *id_map_insert(id_map *m, uint64_t key_a, uint64_t key_b);

/* Removes the slot returned by find or insert. */
void id_map_remove(id_map *m, id_map_slot *slot);

/* Calls visit on every entry (any order). */
void id_map_each(const id_map *m, void (*visit)(const id_map_slot *slot, void *ctx), void *ctx);

void id_map_free(id_map *m);

#endif
