/* Disjoint free ranges in a max_treap by start address; see free_ranges.h. */
#include <stdlib.h>

#include "replay/free_ranges.h"
#include "replay/max_treap.h"

struct free_range {
    max_treap_node link; /* first member; weight = end - start */
    uint64_t start, end; /* [start, end) */
};

static inline free_range *range_of(max_treap_node *l)
{
    return (free_range *)l;
}

/* Ranges starting before the pivot address. */
static bool starts_before(const max_treap_node *n, const void *pivot)
{
    return ((const free_range *)n)->start < *(const uint64_t *)pivot;
}

static void split(max_treap_node *t, uint64_t key, max_treap_node **lo, max_treap_node **hi)
{
    max_treap_split(t, starts_before, &key, lo, hi);
}

static void set_bounds(free_range *r, uint64_t start, uint64_t end)
{
    r->start = start;
    r->end = end;
    max_treap_set_weight(&r->link, end - start);
}

static free_range *node(free_ranges *set, uint64_t start, uint64_t end)
{
    free_range *n = malloc(sizeof *n);
    if (!n) {
        set->failed = true;
        return NULL;
    }
    max_treap_node_init(&n->link, end - start, max_treap_mix(start));
    n->start = start;
    n->end = end;
    return n;
}

static void destroy(max_treap_node *t)
{
    while (t) {
        destroy(t->left);
        max_treap_node *right = t->right;
        free(t); /* the link is the range's first member */
        t = right;
    }
}

/* Total length of the ranges in t (used when whole subtrees are dropped). */
static uint64_t length_of(const max_treap_node *t)
{
    uint64_t sum = 0;
    for (; t; t = t->right)
        sum += t->weight + length_of(t->left);
    return sum;
}

void free_ranges_remove(free_ranges *set, uint64_t addr, uint64_t size)
{
    if (!size)
        return;
    uint64_t end = addr + size;
    max_treap_node *lo, *mid, *hi;
    split(set->root, addr, &lo, &mid);
    split(mid, end, &mid, &hi);
    /* the range before addr may reach into [addr, end) */
    free_range *before = range_of(max_treap_pop_last(&lo));
    if (before) {
        if (before->end > addr) {
            uint64_t tail_end = before->end;
            set->total -= (tail_end < end ? tail_end : end) - addr;
            set_bounds(before, before->start, addr);
            if (tail_end > end) { /* [addr, end) was inside it: keep its tail */
                free_range *tail = node(set, end, tail_end);
                if (tail)
                    hi = max_treap_merge(&tail->link, hi);
                else
                    set->total -= tail_end - end;
            }
        }
        if (before->end > before->start)
            lo = max_treap_merge(lo, &before->link);
        else
            free(before);
    }
    /* ranges starting inside [addr, end): all go, but the last may stick out */
    free_range *last = range_of(max_treap_pop_last(&mid));
    if (last) {
        if (last->end > end) {
            set->total -= end - last->start;
            set_bounds(last, end, last->end);
            hi = max_treap_merge(&last->link, hi);
        } else {
            set->total -= last->end - last->start;
            free(last);
        }
    }
    set->total -= length_of(mid);
    destroy(mid);
    set->root = max_treap_merge(lo, hi);
}

void free_ranges_add(free_ranges *set, uint64_t addr, uint64_t size)
{
    if (!size)
        return;
    free_ranges_remove(set, addr, size); /* no overlaps: counted once */
    uint64_t start = addr, end = addr + size;
    max_treap_node *lo, *hi;
    split(set->root, start, &lo, &hi);
    free_range *before = range_of(max_treap_pop_last(&lo));
    if (before && before->end == start) {
        start = before->start;
        free(before);
    } else if (before) {
        lo = max_treap_merge(lo, &before->link);
    }
    free_range *after = range_of(max_treap_pop_first(&hi));
    if (after && after->start == end) {
        end = after->end;
        free(after);
    } else if (after) {
        hi = max_treap_merge(&after->link, hi);
    }
    free_range *n = node(set, start, end);
    if (n)
        set->total += size;
    else
        set->total -= (addr - start) + (end - addr - size); /* the merged neighbours are gone */
    set->root = max_treap_merge(max_treap_merge(lo, n ? &n->link : NULL), hi);
}

uint64_t free_ranges_largest(const free_ranges *set)
{
    return max_treap_max(set->root);
}

void free_ranges_clear(free_ranges *set)
{
    destroy(set->root);
    *set = (free_ranges){0};
}
