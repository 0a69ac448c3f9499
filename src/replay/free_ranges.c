/* Disjoint free ranges in a treap by start address; see free_ranges.h. */
#include <stdlib.h>

#include "replay/free_ranges.h"

struct free_range {
    uint64_t start, end; /* [start, end) */
    uint64_t priority;
    uint64_t subtree_max; /* the longest range in this subtree */
    free_range *left, *right;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

static uint64_t max_of(const free_range *n)
{
    return n ? n->subtree_max : 0;
}

static void update(free_range *n)
{
    uint64_t m = n->end - n->start;
    if (max_of(n->left) > m)
        m = max_of(n->left);
    if (max_of(n->right) > m)
        m = max_of(n->right);
    n->subtree_max = m;
}

/* Ranges starting before key go to *lo, the rest to *hi. */
static void split(free_range *t, uint64_t key, free_range **lo, free_range **hi)
{
    if (!t) {
        *lo = *hi = NULL;
        return;
    }
    if (t->start < key) {
        split(t->right, key, &t->right, hi);
        *lo = t;
    } else {
        split(t->left, key, lo, &t->left);
        *hi = t;
    }
    update(t);
}

static free_range *merge(free_range *a, free_range *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->priority > b->priority) {
        a->right = merge(a->right, b);
        update(a);
        return a;
    }
    b->left = merge(a, b->left);
    update(b);
    return b;
}

/* Detaches and returns the last (highest) range of t; *t loses it. */
static free_range *pop_last(free_range **t)
{
    if (!*t)
        return NULL;
    if (!(*t)->right) {
        free_range *last = *t;
        *t = last->left;
        last->left = NULL;
        return last;
    }
    free_range *last = pop_last(&(*t)->right);
    update(*t);
    return last;
}

static free_range *pop_first(free_range **t)
{
    if (!*t)
        return NULL;
    if (!(*t)->left) {
        free_range *first = *t;
        *t = first->right;
        first->right = NULL;
        return first;
    }
    free_range *first = pop_first(&(*t)->left);
    update(*t);
    return first;
}

static free_range *node(free_ranges *set, uint64_t start, uint64_t end)
{
    free_range *n = malloc(sizeof *n);
    if (!n) {
        set->failed = true;
        return NULL;
    }
    *n = (free_range){.start = start, .end = end, .priority = mix(start)};
    update(n);
    return n;
}

static void destroy(free_range *t)
{
    while (t) {
        destroy(t->left);
        free_range *right = t->right;
        free(t);
        t = right;
    }
}

/* Total length of the ranges in t (used when whole subtrees are dropped). */
static uint64_t length_of(const free_range *t)
{
    uint64_t sum = 0;
    for (; t; t = t->right)
        sum += t->end - t->start + length_of(t->left);
    return sum;
}

void free_ranges_remove(free_ranges *set, uint64_t addr, uint64_t size)
{
    if (!size)
        return;
    uint64_t end = addr + size;
    free_range *lo, *mid, *hi;
    split(set->root, addr, &lo, &mid);
    split(mid, end, &mid, &hi);
    /* the range before addr may reach into [addr, end) */
    free_range *before = pop_last(&lo);
    if (before) {
        if (before->end > addr) {
            uint64_t tail_end = before->end;
            set->total -= (tail_end < end ? tail_end : end) - addr;
            before->end = addr;
            if (tail_end > end) { /* [addr, end) was inside it: keep its tail */
                free_range *tail = node(set, end, tail_end);
                if (tail)
                    hi = merge(tail, hi);
                else
                    set->total -= tail_end - end;
            }
        }
        if (before->end > before->start) {
            update(before);
            lo = merge(lo, before);
        } else {
            free(before);
        }
    }
    /* ranges starting inside [addr, end): all go, but the last may stick out */
    free_range *last = pop_last(&mid);
    if (last) {
        if (last->end > end) {
            set->total -= end - last->start;
            last->start = end;
            update(last);
            hi = merge(last, hi);
        } else {
            set->total -= last->end - last->start;
            free(last);
        }
    }
    set->total -= length_of(mid);
    destroy(mid);
    set->root = merge(lo, hi);
}

void free_ranges_add(free_ranges *set, uint64_t addr, uint64_t size)
{
    if (!size)
        return;
    free_ranges_remove(set, addr, size); /* no overlaps: counted once */
    uint64_t start = addr, end = addr + size;
    free_range *lo, *hi;
    split(set->root, start, &lo, &hi);
    free_range *before = pop_last(&lo);
    if (before && before->end == start) {
        start = before->start;
        free(before);
    } else if (before) {
        lo = merge(lo, before);
    }
    free_range *after = pop_first(&hi);
    if (after && after->start == end) {
        end = after->end;
        free(after);
    } else if (after) {
        hi = merge(after, hi);
    }
    free_range *n = node(set, start, end);
    if (n)
        set->total += size;
    else
        set->total -= (addr - start) + (end - addr - size); /* the merged neighbours are gone */
    set->root = merge(merge(lo, n), hi);
}

uint64_t free_ranges_largest(const free_ranges *set)
{
    return max_of(set->root);
}

void free_ranges_clear(free_ranges *set)
{
    destroy(set->root);
    *set = (free_ranges){0};
}
