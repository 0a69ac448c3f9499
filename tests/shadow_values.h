/*
 * Shadow memory for the remat value tests (remat_values_test, and
 * remat_threads_test, which guards it with a lock): the pool's device memory
 * is never touched, so a map from each GRANULE-byte granule's address to a
 * value stands for its contents (open addressing over SHADOW_SLOTS slots),
 * and op_value gives what an op writes from its inputs' values.
 */
#ifndef COOP_TESTS_SHADOW_VALUES_H
#define COOP_TESTS_SHADOW_VALUES_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRANULE 512u
#define SHADOW_SLOTS (1u << 16) /* granules of a test pool's address range, with room */

typedef struct shadow_slot {
    uintptr_t granule; /* 0: empty */
    uint64_t value;
} shadow_slot;

/* addr's slot in map[SHADOW_SLOTS], or the empty one it would take; NULL
 * when the map is full without it. */
static shadow_slot *shadow_find(shadow_slot *map, uintptr_t addr)
{
    uintptr_t g = addr / GRANULE;
    size_t i = (size_t)(g * UINT64_C(0x9E3779B97F4A7C15) >> 48) & (SHADOW_SLOTS - 1);
    for (size_t probes = 0; probes < SHADOW_SLOTS; probes++, i = (i + 1) & (SHADOW_SLOTS - 1))
        if (map[i].granule == g || map[i].granule == 0)
            return &map[i];
    return NULL;
}

/* Every granule of [ptr, ptr + size) holds value; false: the map is full. */
static bool shadow_store(shadow_slot *map, const void *ptr, size_t size, uint64_t value)
{
    for (uintptr_t a = (uintptr_t)ptr; a < (uintptr_t)ptr + size; a += GRANULE) {
        shadow_slot *s = shadow_find(map, a);
        if (!s)
            return false;
        s->granule = a / GRANULE;
        s->value = value;
    }
    return true;
}

/* *value: the value at ptr (its first granule), 0 if never written; false:
 * the map is full. */
static bool shadow_load(shadow_slot *map, const void *ptr, uint64_t *value)
{
    shadow_slot *s = shadow_find(map, (uintptr_t)ptr);
    if (!s)
        return false;
    *value = s->granule ? s->value : 0;
    return true;
}

/* An op's value: its id and its inputs' values, in order. */
static uint64_t op_value(uint64_t id, const uint64_t *in, size_t n)
{
    uint64_t h = id * UINT64_C(0x9E3779B97F4A7C15) + n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ in[i]) * UINT64_C(0xBF58476D1CE4E5B9) + (h >> 29);
    return h ? h : 1;
}
#endif
