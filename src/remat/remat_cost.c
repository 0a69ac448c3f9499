/*
 * The remat API's recompute costs over its tensor graph (remat_internal.h):
 * c_eq through union-find classes (DTR-eq; the DTR policy and the
 * COOP_REMAT_COOP_EQ window) and c_comp, the exact evicted component
 * (COOP_REMAT_COOP_COMP's window, as `coop sim`'s coop-comp ablation).
 *
 * The simulator computes the same two values over its own compiled program
 * (sim_policy.c); the walks are written once per graph because the graphs
 * differ (flat neighbour lists of storage ids filtered by creation time
 * there, inputs and children pointers here) and the simulator's walk is a
 * measured hot path that a callback per neighbour would slow. What the two
 * share is the cost built on them (coop_cost.h) and the cut classes
 * (union_find.h).
 */
#include <stdlib.h>

#include "remat/remat_internal.h"

/* Makes room for `walks` new stamps (coop_tensor.comp_stamp) without
 * wrapping: when too few are left, every label is forgotten and the stamps
 * start over. Called before an evaluation, never inside one: forgetting the
 * labels of components it has already counted would let it count one twice
 * under a second label. */
static void restart_comp_stamps(coop_remat *r)
{
    for (coop_tensor *t = r->all; t; t = t->next_all)
        t->comp_stamp = 0;
    r->comp_stamp = 0;
}

static inline void reserve_comp_stamps(coop_remat *r, size_t walks)
{
    if (walks >= UINT32_MAX || r->comp_stamp > UINT32_MAX - (uint32_t)walks)
        restart_comp_stamps(r);
}

uint32_t remat_next_mark(coop_remat *r)
{
    if (++r->mark_epoch == 0) {
        for (coop_tensor *t = r->all; t; t = t->next_all)
            t->mark = 0;
        r->mark_epoch = 1;
    }
    return r->mark_epoch;
}

/* The walk: t's cost plus its evicted neighbours' distinct classes, their
 * roots left in r->roots (roots_complete unless host memory ran out). */
static int64_t eq_walk(coop_remat *r, const coop_tensor *t)
{
    int64_t c = (int64_t)t->cost;
    r->num_roots = 0;
    r->roots_complete = true;
    for (size_t i = 0; i < remat_num_neighbours(t); i++) {
        coop_tensor *n = remat_neighbour(t, i);
        if (n == t || !remat_is_evicted(n))
            continue;
        uint32_t root = uf_find(&r->uf, n->uf);
        bool seen = false;
        for (size_t j = 0; j < r->num_roots && !seen; j++)
            seen = r->roots[j] == root;
        if (seen)
            continue;
        if (r->num_roots == r->cap_roots) {
            size_t cap = r->cap_roots ? r->cap_roots * 2 : 16;
            uint32_t *roots = realloc(r->roots, cap * sizeof *roots);
            if (!roots) {
                r->roots_complete = false; /* out of host memory: the rest is not counted */
                break;
            }
            r->roots = roots;
            r->cap_roots = cap;
        }
        r->roots[r->num_roots++] = root;
        c = uf_value_add(c, r->uf.value[root]);
    }
    return c;
}

/* Remembers the roots of the walk just made (r->roots) as t's cache. A slot
 * too small is replaced by a new one at the end of r->eq_roots (the old one
 * is not reused: slots only grow, doubling); out of host memory, or beyond
 * the slot's counters, t is simply not cached. */
static void eq_remember(coop_remat *r, coop_tensor *t)
{
    t->eq_valid = false;
    size_t k = r->num_roots;
    if (!r->roots_complete || k > UINT16_MAX)
        return;
    if (k > t->eq_cap) {
        size_t cap = t->eq_cap ? t->eq_cap : 4;
        while (cap < k)
            cap *= 2;
        if (cap > UINT16_MAX)
            cap = UINT16_MAX;
        size_t len = r->eq_roots_len + cap;
        if (len > UINT32_MAX)
            return;
        if (len > r->eq_roots_cap) {
            size_t grown = r->eq_roots_cap ? r->eq_roots_cap * 2 : 1024;
            while (grown < len)
                grown *= 2;
            uint32_t *roots = realloc(r->eq_roots, grown * sizeof *roots);
            if (!roots)
                return;
            r->eq_roots = roots;
            r->eq_roots_cap = grown;
        }
        t->eq_first = (uint32_t)r->eq_roots_len;
        t->eq_cap = (uint16_t)cap;
        r->eq_roots_len = len;
    }
    for (size_t j = 0; j < k; j++)
        r->eq_roots[t->eq_first + j] = r->roots[j];
    t->eq_num_roots = (uint16_t)k;
    t->eq_valid = true;
}

int64_t remat_eq_compute(coop_remat *r, coop_tensor *t)
{
    int64_t c;
    if (!r->eq_cache_off && remat_eq_cached(r, t, &c))
        return c;
    c = eq_walk(r, t);
    if (!r->eq_cache_off)
        eq_remember(r, t);
    return c;
}

void remat_eq_forget_around(coop_tensor *t)
{
    t->eq_valid = false;
    for (size_t i = 0; i < remat_num_neighbours(t); i++)
        remat_neighbour(t, i)->eq_valid = false;
}

/* Whether the classes t's c_eq counted are each exactly one connected set
 * of evicted tensors, none connected to another: true while no member of
 * any has been rematerialized. Tensors evicted next to each other are
 * merged at eviction, and an evicted tensor gains no new evicted neighbour
 * (a new tensor's inputs are resident; an in-place op's old value is
 * evicted with the edges it inherits and merged then), so only a
 * rematerialization separates a class. */
bool remat_classes_uncut(const coop_remat *r, const coop_tensor *t)
{
    if (t->eq_valid && !r->eq_cache_off) {
        /* indexed, not offset: with no roots cached yet eq_roots may be
         * NULL (UBSan flagged the offset) */
        for (uint32_t j = 0; j < t->eq_num_roots; j++)
            if (uf_is_cut(&r->uf, r->eq_roots[t->eq_first + j]))
                return false;
        return true;
    }
    if (!r->roots_complete)
        return false;
    for (size_t j = 0; j < r->num_roots; j++)
        if (uf_is_cut(&r->uf, r->roots[j]))
            return false;
    return true;
}

int remat_stack_push(coop_remat *r, size_t *len, coop_tensor *t)
{
    if (*len == r->cap_stack) {
        size_t cap = r->cap_stack ? r->cap_stack * 2 : 64;
        coop_tensor **s = realloc(r->stack, cap * sizeof *s);
        if (!s)
            return -1;
        r->stack = s;
        r->cap_stack = cap;
    }
    r->stack[(*len)++] = t;
    return 0;
}

/* The summed cost of the component of evicted tensors containing evicted
 * tensor n: its label's while valid, else walked and labelled (every member
 * stamped with a new stamp and n as label). Out of host memory the walk
 * stops early: the sum is a lower bound, for this evaluation only. */
static int64_t component_of(coop_remat *r, coop_tensor *n)
{
    if (remat_comp_label_valid(n))
        return n->comp_label->comp_sum;
    r->comp_walks++;
    uint32_t stamp = ++r->comp_stamp; /* new: reserve_comp_stamps */
    n->comp_stamp = stamp;
    n->comp_label = n;
    int64_t sum = 0;
    bool complete = true;
    size_t len = 0;
    if (remat_stack_push(r, &len, n)) {
        n->comp_sum = (int64_t)n->cost;
        n->comp_stamp = 0;
        return n->comp_sum;
    }
    while (len) {
        coop_tensor *x = r->stack[--len];
        sum = uf_value_add(sum, (int64_t)x->cost);
        for (size_t i = 0; i < remat_num_neighbours(x); i++) {
            coop_tensor *m = remat_neighbour(x, i);
            if (!remat_is_evicted(m) || m->comp_stamp == stamp)
                continue;
            m->comp_stamp = stamp;
            m->comp_label = n;
            if (remat_stack_push(r, &len, m)) {
                /* labelled: count it, leave its neighbours */
                sum = uf_value_add(sum, (int64_t)m->cost);
                complete = false;
            }
        }
    }
    n->comp_sum = sum;
    if (!complete)
        n->comp_stamp = 0;
    return sum;
}

int64_t remat_component_compute(coop_remat *r, coop_tensor *t)
{
    int64_t eq = remat_eq_compute(r, t);
    if (remat_classes_uncut(r, t))
        return eq;
    /* t's cost plus its evicted neighbours' distinct components (labels
     * marked as counted) */
    reserve_comp_stamps(r, remat_num_neighbours(t));
    uint32_t mark = remat_next_mark(r);
    int64_t c = (int64_t)t->cost;
    for (size_t i = 0; i < remat_num_neighbours(t); i++) {
        coop_tensor *n = remat_neighbour(t, i);
        if (n == t || !remat_is_evicted(n))
            continue;
        int64_t sum = component_of(r, n);
        coop_tensor *label = n->comp_label;
        if (label->mark == mark)
            continue;
        label->mark = mark;
        c = uf_value_add(c, sum);
    }
    return c;
}
