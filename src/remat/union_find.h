/*
 * Union-find over evicted storages (DTR's equivalence classes, "DTR-eq").
 * Each node carries a value (the summed compute, ns, of the evicted storages
 * merged into its class); only a root's value is meaningful. Nodes are
 * never freed one by one: an evicted storage gets a fresh node, and a
 * rematerialized one subtracts its compute from its class and leaves its
 * node behind (uf_leave; as simrd does: the class is approximate after
 * that). The owner renumbers them down to the classes still named from time
 * to time (uf_compact), or they would grow by one per eviction. A class remembers whether a member has left it (cut): until then
 * it is exactly one connected set of evicted storages, after that it may
 * hold several (callers that need the exact evicted component walk the
 * graph only around cut classes).
 */
#ifndef COOP_REMAT_UNION_FIND_H
#define COOP_REMAT_UNION_FIND_H

#include <stdbool.h>
#include <stdint.h>

#include "saturating.h"

typedef struct union_find {
    uint32_t *parent; /* parent[i] == i for roots */
    int64_t *value;
    uint32_t *members; /* nodes in the class (meaningful at roots) */
    bool *cut;         /* a member left the class since it formed (meaningful at roots) */
    uint32_t count, cap;
} union_find;

/* Room for n more nodes, so that the next n uf_make calls cannot fail:
 * 0, or -1 when host memory runs out (nothing changes then). */
int uf_reserve(union_find *uf, uint32_t n);

/* A new singleton class with the given value; returns its node, or
 * UINT32_MAX when host memory runs out. */
uint32_t uf_make(union_find *uf, int64_t value);

/* The root of x's class (with path compression). */
uint32_t uf_find(union_find *uf, uint32_t x);

/* a + b for class values and the costs summed with them (ns, both >= 0),
 * saturating at INT64_MAX: costs of up to COOP_TENSOR_MAX_COST_NS (2^48)
 * over 2^15 tensors or more would pass it, and a wrapped sum would be
 * negative, i.e. cheapest. A negative operand (none should reach here) is
 * read as 0, so the test itself cannot overflow. */
static inline int64_t uf_value_add(int64_t a, int64_t b)
{
    if (a < 0)
        a = 0;
    if (b < 0)
        b = 0;
    return saturating_add_i64(a, b);
}

/* Merges the classes of a and b; the new root's value is the sum
 * (uf_value_add), and it is
 * cut if either was. The
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

/* x's storage left its class (rematerialized): the class loses value
 * (x's compute) and is cut; x's node stays in it. A saturated value stays
 * saturated: what it summed is unknown, and subtracting from INT64_MAX
 * would make the members still evicted read cheaper than they are (dearest
 * is the safe side). */
static inline void uf_leave(union_find *uf, uint32_t x, int64_t value)
{
    uint32_t root = uf_find(uf, x);
    if (uf->value[root] != INT64_MAX)
        uf->value[root] -= value;
    uf->cut[root] = true;
}

/* Whether root's class had a member leave it (root must be a root). */
static inline bool uf_is_cut(const union_find *uf, uint32_t root)
{
    return uf->cut[root];
}

/* Renumbers uf down to the classes still named: *nodes[0 .. n) are the
 * nodes the caller holds (each replaced by its class's new node), every
 * other node is dropped. Each class named keeps its value, cut flag and
 * member count (so later merges choose the same roots) in one new node,
 * which all of its named nodes share: a node matters only through its
 * root. Afterwards there is room for `spare` more nodes (uf_reserve). 0,
 * or -1 when host memory runs out (then nothing changes). */
int uf_compact(union_find *uf, uint32_t *const *nodes, size_t n, uint32_t spare);

void uf_clear(union_find *uf); /* forgets all nodes, keeps the memory */
void uf_free(union_find *uf);

#endif
