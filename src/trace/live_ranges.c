/* An ordered set of disjoint byte ranges: a treap over node indices. */
#include <stdlib.h>

#include "growable.h"
#include "trace/hash_seed.h"
#include "trace/live_ranges.h"

/* The initial capacity (nodes) of live_ranges.nodes, doubled when full. */
#define LIVE_RANGES_FIRST 256

/* Ranges disjoint and ordered by first byte end in the same order, so the
 * one range that may overlap [addr, last] is the last starting at or before
 * last. */
const live_range *live_ranges_overlap(const live_ranges *s, uint64_t addr, uint64_t last)
{
    const live_range *best = NULL;
    for (uint32_t n = s->root; n;) {
        const live_range *r = &s->nodes[n];
        if (r->addr <= last) {
            best = r;
            n = r->right;
        } else {
            n = r->left;
        }
    }
    return best && best->last >= addr ? best : NULL;
}

/* Splits tree t into *lo (first bytes below addr) and *hi (the rest). */
static void split(live_range *nodes, uint32_t t, uint64_t addr, uint32_t *lo, uint32_t *hi)
{
    if (!t) {
        *lo = *hi = 0;
    } else if (nodes[t].addr < addr) {
        *lo = t;
        split(nodes, nodes[t].right, addr, &nodes[t].right, hi);
    } else {
        *hi = t;
        split(nodes, nodes[t].left, addr, lo, &nodes[t].left);
    }
}

/* Joins lo and hi, every range of lo before every range of hi. */
static uint32_t merge(live_range *nodes, uint32_t lo, uint32_t hi)
{
    if (!lo || !hi)
        return lo ? lo : hi;
    if (nodes[lo].prio > nodes[hi].prio) {
        nodes[lo].right = merge(nodes, nodes[lo].right, hi);
        return lo;
    }
    nodes[hi].left = merge(nodes, lo, nodes[hi].left);
    return hi;
}

int live_ranges_insert(live_ranges *s, uint64_t addr, uint64_t last, uint64_t stream, uint32_t id)
{
    uint32_t n = s->free_list;
    if (n) {
        s->free_list = s->nodes[n].left;
    } else {
        if (s->num_nodes == UINT32_MAX - 1 ||
            GROW_ARRAY(s->nodes, s->cap, (size_t)s->num_nodes + 2, LIVE_RANGES_FIRST))
            return -1;
        if (!s->num_nodes)
            s->seed = trace_hash_seed(s);
        n = ++s->num_nodes;
    }
    /* Priorities no file can predict keep the tree O(log n) deep whatever
     * order the addresses come in. */
    s->nodes[n] =
        (live_range){.addr = addr,
                     .last = last,
                     .stream = stream,
                     .id = id,
                     .prio = (uint32_t)trace_hash_mix(s->seed + n * 0x9e3779b97f4a7c15ull)};
    /* n goes where the search for addr meets the first node it outranks;
     * that node's subtree, split around addr, becomes n's children. */
    uint32_t *link = &s->root;
    while (*link && s->nodes[*link].prio > s->nodes[n].prio)
        link = s->nodes[*link].addr < addr ? &s->nodes[*link].right : &s->nodes[*link].left;
    split(s->nodes, *link, addr, &s->nodes[n].left, &s->nodes[n].right);
    *link = n;
    return 0;
}

void live_ranges_remove(live_ranges *s, uint64_t addr, uint32_t id)
{
    /* ranges are disjoint, so at most one starts at addr: walk down to it */
    uint32_t *link = &s->root;
    while (*link && s->nodes[*link].addr != addr)
        link = s->nodes[*link].addr < addr ? &s->nodes[*link].right : &s->nodes[*link].left;
    uint32_t n = *link;
    if (!n || s->nodes[n].id != id)
        return;
    *link = merge(s->nodes, s->nodes[n].left, s->nodes[n].right);
    s->nodes[n].left = s->free_list;
    s->free_list = n;
}

void live_ranges_free(live_ranges *s)
{
    free(s->nodes);
    *s = (live_ranges){0};
}
