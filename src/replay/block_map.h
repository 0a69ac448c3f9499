/*
 * A hash map from block address to the policy's block record: how the torch
 * emulation finds the block a free() names. Open addressing with linear
 * probing and backward-shift deletion (no tombstones), power-of-two table
 * kept at most half full.
 */
#ifndef COOP_REPLAY_BLOCK_MAP_H
#define COOP_REPLAY_BLOCK_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct block_map_slot {
    uintptr_t key; /* 0 = empty: address 0 is never a block */
    void *value;
} block_map_slot;

typedef struct block_map {
    block_map_slot *slots;
    size_t mask; /* capacity - 1 */
    size_t count;
} block_map;

/* false when host memory runs out (the map is left as it was). */
bool block_map_put(block_map *map, uintptr_t key, void *value);
void *block_map_get(const block_map *map, uintptr_t key);
/* Removes key and returns its value, or NULL when absent. */
void *block_map_take(block_map *map, uintptr_t key);
void block_map_free(block_map *map);

#endif
