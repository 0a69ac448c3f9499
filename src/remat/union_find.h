/*
 * Union-find over evicted storages (DTR's equivalence classes, "DTR-eq").
 * Each node carries a value (the summed compute, ns, of the evicted storages
 * merged into its class); only a root's value is meaningful. Nodes are
 * never freed during a run: an evicted storage gets a fresh node, and a
 * rematerialized one subtracts its compute from its class and leaves its
 * node behind (as simrd does: the class is approximate after that).
 */
#ifndef COOP_REMAT_UNION_FIND_H
#define COOP_REMAT_UNION_FIND_H

#include <stdint.h>

typedef struct union_find {
    uint32_t *parent; /* parent[i] == i for roots */
    int64_t *value;
    uint32_t *members; /* nodes in the class (meaningful at roots) */
    uint32_t count, cap;
} union_find;

/* A new singleton class with the given value; returns its node, or
 * UINT32_MAX when host memory runs out. */
uint32_t uf_make(union_find *uf, int64_t value);

/* The root of x's class (with path compression). */
uint32_t uf_find(union_find *uf, uint32_t x);

/* Merges the classes of a and b; the new root's value is the sum. The
 * larger class's root stays the root (ties: b's), so finds stay shallow and
 * a big class keeps its root while small ones join it (callers may cache
 * roots and check them with uf_is_root). Returns the root. */
uint32_t uf_merge(union_find *uf, uint32_t a, uint32_t b);

static inline int uf_is_root(const union_find *uf, uint32_t x)
{
    return uf->parent[x] == x;
}

static inline int64_t uf_value(union_find *uf, uint32_t x)
{
    return uf->value[uf_find(uf, x)];
}

static inline void uf_add(union_find *uf, uint32_t x, int64_t delta)
{
    uf->value[uf_find(uf, x)] += delta;
}

void uf_clear(union_find *uf); /* forgets all nodes, keeps the memory */
void uf_free(union_find *uf);

#endif
