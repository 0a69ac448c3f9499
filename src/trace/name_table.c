/* Name interning: FNV-1a hash (seeded, mixed), linear probing, load factor below 1/2. */
#include <stdlib.h>
#include <string.h>

#include "trace/hash_seed.h"
#include "trace/name_table.h"

/* FNV-1a (64 bits) from a per-table start, then mixed with the seed again:
 * from a fixed start a log could list names that all hash alike (FNV
 * collisions chain into multicollisions), and every lookup would walk all
 * of them (quadratic reading). The mix matters: FNV's low bits depend only
 * on the low bits of its start, so with the seed in the start alone, names
 * chosen to collide in the low bits unseeded still did for every seed
 * whose low bits were zero (1 in 64 tables). */
static uint64_t hash_name(const name_table *t, const char *s)
{
    uint64_t h = 14695981039346656037ull ^ t->seed;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return trace_hash_mix(h ^ t->seed);
}

static int grow_slots(name_table *t)
{
    size_t n = t->num_slots ? t->num_slots * 2 : 1024;
    uint32_t *slots = calloc(n, sizeof *slots);
    if (!slots)
        return -1;
    if (!t->num_slots && !t->seed) /* tests may give a seed of their own */
        t->seed = trace_hash_seed(t);
    for (uint32_t id = 0; id < t->count; id++) {
        size_t i = (size_t)hash_name(t, t->names[id]) & (n - 1);
        while (slots[i])
            i = (i + 1) & (n - 1);
        slots[i] = id + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->num_slots = n;
    return 0;
}

int name_table_find(const name_table *t, const char *name, uint32_t *id)
{
    if (!t->num_slots)
        return -1;
    size_t i = (size_t)hash_name(t, name) & (t->num_slots - 1);
    for (; t->slots[i]; i = (i + 1) & (t->num_slots - 1)) {
        if (!strcmp(t->names[t->slots[i] - 1], name)) {
            *id = t->slots[i] - 1;
            return 0;
        }
    }
    return -1;
}

int name_table_intern(name_table *t, const char *name, uint32_t *id)
{
    if (!name_table_find(t, name, id))
        return 0;
    if (t->count >= NAME_TABLE_MAX)
        return NAME_TABLE_FULL;
    if ((uint64_t)(t->count + 1) * 2 > t->num_slots && grow_slots(t))
        return -1;
    if (t->count == t->names_cap) {
        size_t cap = t->names_cap ? t->names_cap * 2 : 256;
        char **names = realloc(t->names, cap * sizeof *names);
        if (!names)
            return -1;
        t->names = names;
        t->names_cap = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return -1;
    size_t i = (size_t)hash_name(t, name) & (t->num_slots - 1);
    while (t->slots[i])
        i = (i + 1) & (t->num_slots - 1);
    t->slots[i] = t->count + 1;
    t->names[t->count] = copy;
    *id = t->count++;
    return 0;
}

char **name_table_take_names(name_table *t, uint32_t *count)
{
    char **names = t->names;
    *count = t->count;
    t->names = NULL;
    t->count = t->names_cap = 0;
    free(t->slots);
    t->slots = NULL;
    t->num_slots = 0;
    return names;
}

void name_table_free(name_table *t)
{
    for (uint32_t i = 0; i < t->count; i++)
        free(t->names[i]);
    free(t->names);
    free(t->slots);
    *t = (name_table){0};
}
