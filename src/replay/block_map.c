/* Address -> record hash map; see block_map.h. */
#include <stdlib.h>

#include "replay/block_map.h"

static size_t slot_of(uintptr_t key, size_t mask)
{
    /* blocks are 512-byte aligned: fold the high bits down before masking */
    uint64_t x = (uint64_t)key * 0x9e3779b97f4a7c15ull;
    return (size_t)(x >> 20) & mask;
}

static bool grow(block_map *map)
{
    size_t cap = map->slots ? (map->mask + 1) * 2 : 64;
    block_map_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    if (map->slots) {
        for (size_t i = 0; i <= map->mask; i++) {
            if (!map->slots[i].key)
                continue;
            size_t j = slot_of(map->slots[i].key, cap - 1);
            while (slots[j].key)
                j = (j + 1) & (cap - 1);
            slots[j] = map->slots[i];
        }
        free(map->slots);
    }
    map->slots = slots;
    map->mask = cap - 1;
    return true;
}

bool block_map_put(block_map *map, uintptr_t key, void *value)
{
    if ((!map->slots || (map->count + 1) * 2 > map->mask + 1) && !grow(map))
        return false;
    size_t i = slot_of(key, map->mask);
    while (map->slots[i].key && map->slots[i].key != key)
        i = (i + 1) & map->mask;
    if (!map->slots[i].key)
        map->count++;
    map->slots[i].key = key;
    map->slots[i].value = value;
    return true;
}

void *block_map_get(const block_map *map, uintptr_t key)
{
    if (!map->slots || !key)
        return NULL;
    for (size_t i = slot_of(key, map->mask); map->slots[i].key; i = (i + 1) & map->mask)
        if (map->slots[i].key == key)
            return map->slots[i].value;
    return NULL;
}

void *block_map_take(block_map *map, uintptr_t key)
{
    if (!map->slots || !key)
        return NULL;
    size_t i = slot_of(key, map->mask);
    while (map->slots[i].key && map->slots[i].key != key)
        i = (i + 1) & map->mask;
    if (!map->slots[i].key)
        return NULL;
    void *value = map->slots[i].value;
    /* backward shift: pull later entries of the probe run into the hole */
    size_t hole = i;
    for (size_t j = (i + 1) & map->mask; map->slots[j].key; j = (j + 1) & map->mask) {
        size_t home = slot_of(map->slots[j].key, map->mask);
        /* j may move to hole when home is not cyclically in (hole, j] */
        bool stays = (hole <= j) ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            map->slots[hole] = map->slots[j];
            hole = j;
        }
    }
    map->slots[hole].key = 0;
    map->slots[hole].value = NULL;
    map->count--;
    return value;
}

void block_map_free(block_map *map)
{
    free(map->slots);
    *map = (block_map){0};
}
