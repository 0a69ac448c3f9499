/* Union-find with path compression (iterative: classes can be long chains). */
#include <stdlib.h>

#include "remat/union_find.h"

int uf_reserve(union_find *uf, uint32_t n)
{
    if (n <= uf->cap - uf->count)
        return 0;
    if (n >= UINT32_MAX - uf->count) /* node numbers stay below UINT32_MAX */
        return -1;
    uint32_t need = uf->count + n, cap = uf->cap ? uf->cap : 1024;
    while (cap < need)
        cap = cap > UINT32_MAX / 2 ? UINT32_MAX - 1 : cap * 2;
    /* each array is kept at its new size even if a later one fails: only
     * cap, set last, says how much of all four is there */
    uint32_t *parent = realloc(uf->parent, cap * sizeof *parent);
    if (!parent)
        return -1;
    uf->parent = parent;
    int64_t *value_arr = realloc(uf->value, cap * sizeof *value_arr);
    if (!value_arr)
        return -1;
    uf->value = value_arr;
    uint32_t *members = realloc(uf->members, cap * sizeof *members);
    if (!members)
        return -1;
    uf->members = members;
    bool *cut = realloc(uf->cut, cap * sizeof *cut);
    if (!cut)
        return -1;
    uf->cut = cut;
    uf->cap = cap;
    return 0;
}

uint32_t uf_make(union_find *uf, int64_t value)
{
    if (uf_reserve(uf, 1))
        return UINT32_MAX;
    uint32_t x = uf->count++;
    uf->parent[x] = x;
    uf->value[x] = value;
    uf->members[x] = 1;
    uf->cut[x] = false;
    return x;
}

uint32_t uf_find(union_find *uf, uint32_t x)
{
    uint32_t root = x;
    while (uf->parent[root] != root)
        root = uf->parent[root];
    while (uf->parent[x] != root) {
        uint32_t next = uf->parent[x];
        uf->parent[x] = root;
        x = next;
    }
    return root;
}

uint32_t uf_merge(union_find *uf, uint32_t a, uint32_t b)
{
    uint32_t ra = uf_find(uf, a), rb = uf_find(uf, b);
    if (ra == rb)
        return rb;
    if (uf->members[ra] > uf->members[rb]) { /* union by size */
        uint32_t t = ra;
        ra = rb;
        rb = t;
    }
    uf->parent[ra] = rb;
    uf->value[rb] = uf_value_add(uf->value[rb], uf->value[ra]);
    uf->members[rb] += uf->members[ra];
    uf->cut[rb] = uf->cut[rb] || uf->cut[ra];
    return rb;
}

int uf_compact(union_find *uf, uint32_t *const *nodes, size_t n, uint32_t spare)
{
    union_find fresh = {0};
    /* at least one slot, so that it is never NULL when allocated */
    uint32_t *renumber = malloc((uf->count ? uf->count : 1) * sizeof *renumber);
    /* (a reserve of at least one node allocates all four arrays: the last
     * test says so to static analysers) */
    if (!renumber || n >= UINT32_MAX - 1 - (uint64_t)spare ||
        uf_reserve(&fresh, (uint32_t)n + spare + 1) || !fresh.parent) {
        free(renumber);
        uf_free(&fresh);
        return -1;
    }
    for (uint32_t i = 0; i < uf->count; i++)
        renumber[i] = UINT32_MAX;
    for (size_t i = 0; i < n; i++) {
        uint32_t root = uf_find(uf, *nodes[i]);
        if (renumber[root] == UINT32_MAX) {
            uint32_t x = fresh.count++;
            fresh.parent[x] = x;
            fresh.value[x] = uf->value[root];
            fresh.members[x] = uf->members[root];
            fresh.cut[x] = uf->cut[root];
            renumber[root] = x;
        }
        *nodes[i] = renumber[root];
    }
    free(renumber);
    uf_free(uf);
    *uf = fresh;
    return 0;
}

void uf_clear(union_find *uf)
{
    uf->count = 0;
}

void uf_free(union_find *uf)
{
    free(uf->parent);
    free(uf->value);
    free(uf->members);
    free(uf->cut);
    *uf = (union_find){0};
}
