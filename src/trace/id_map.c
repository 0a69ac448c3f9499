/* Open-addressing map from (key_a, key_b) to a reader's allocation record. */
#include <stdlib.h>

#include "trace/hash_seed.h"
#include "trace/id_map.h"

/* Addresses share their low bits (alignment) and high bits (one device
 * range), so they must be mixed before masking. The mixer can be inverted:
 * without the map's seed a file could list keys that all hash to one slot,
 * and every probe would walk all of them (quadratic reading). */
static size_t slot_index(const id_map *m, uint64_t a, uint64_t b)
{
    return (size_t)trace_hash_mix(a ^ m->seed ^ (b * 0x9e3779b97f4a7c15ull)) & m->mask;
}

id_map_slot *id_map_find(const id_map *m, uint64_t key_a, uint64_t key_b)
{
    if (!m->slots)
        return NULL;
    for (size_t i = slot_index(m, key_a, key_b);; i = (i + 1) & m->mask) {
        id_map_slot *s = &m->slots[i];
        if (!s->used)
            return NULL;
        if (s->key_a == key_a && s->key_b == key_b)
            return s;
    }
}

static int grow(id_map *m)
{
    size_t cap = m->slots ? (m->mask + 1) * 2 : 64;
    id_map_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    id_map old = *m;
    if (!old.slots)
        m->seed = trace_hash_seed(m);
    m->slots = slots;
    m->mask = cap - 1;
    if (old.slots) {
        for (size_t i = 0; i <= old.mask; i++) {
            if (!old.slots[i].used)
                continue;
            size_t j = slot_index(m, old.slots[i].key_a, old.slots[i].key_b);
            while (slots[j].used)
                j = (j + 1) & m->mask;
            slots[j] = old.slots[i];
        }
        free(old.slots);
    }
    return 0;
}

id_map_slot *id_map_insert(id_map *m, uint64_t key_a, uint64_t key_b)
{
    /* load factor at most 1/2 keeps linear probing short */
    if (!m->slots || (m->count + 1) * 2 > m->mask + 1) {
        if (grow(m) != 0)
            return NULL;
    }
    size_t i = slot_index(m, key_a, key_b);
    while (m->slots[i].used)
        i = (i + 1) & m->mask;
    id_map_slot *s = &m->slots[i];
    *s = (id_map_slot){.key_a = key_a, .key_b = key_b, .used = 1};
    m->count++;
    return s;
}

void id_map_remove(id_map *m, id_map_slot *slot)
{
    size_t hole = (size_t)(slot - m->slots);
    /* Backward shift: move later members of the probe chain into the hole
     * when their home slot does not lie cyclically in (hole, j]. */
    for (size_t j = (hole + 1) & m->mask; m->slots[j].used; j = (j + 1) & m->mask) {
        size_t home = slot_index(m, m->slots[j].key_a, m->slots[j].key_b);
        int home_in_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!home_in_between) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole] = (id_map_slot){0};
    m->count--;
}

void id_map_each(const id_map *m, void (*visit)(const id_map_slot *slot, void *ctx), void *ctx)
{
    if (!m->slots)
        return;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].used)
            visit(&m->slots[i], ctx);
}

void id_map_free(id_map *m)
{
    free(m->slots);
    *m = (id_map){0};
}
