/*
 * c_live over the remat API's tensor graph (remat_internal.h): the window
 * cost of COOP_REMAT_COOP (the default), `coop sim`'s coop (docs/remat.md,
 * section 2c). c_comp counts every evicted tensor connected to a candidate
 * through evicted tensors, including released ones that neither its own
 * recomputation nor any recomputation the owner can still ask for needs;
 * c_live counts what evicting it makes the program recompute:
 *
 *   - its own cost;
 *   - backward, its evicted ancestors reached through evicted tensors
 *     (producer inputs): recomputing it needs them;
 *   - forward, its evicted descendants reached through evicted tensors
 *     (children) whose storage is still held (handles > 0: the owner has not
 *     released every tensor on it): recomputing them needs it. Released
 *     descendants are walked through, not counted: they are recomputed
 *     only on the way to a held one, whose recomputation counts them then.
 *
 * The graph is a DAG (an in-place op's old value is a separate record that
 * its consumers are redirected to), so the two regions are disjoint, and
 * both lie in t's evicted neighbourhood: c <= c_live <= c_comp.
 *
 * The simulator's walks (sim_policy.c's region_compute) are the same
 * definition over its compiled program, where a view is a tensor of its
 * own with its own op (a view here is its base); they are written per graph
 * for the reason remat_cost.c gives. Uncached: two walks at every
 * evaluation (the simulator's c_live cache, sim_live.c, watches the storages
 * each walk read; none exists here yet). The window pass is spared most of
 * them by a lower bound from the tensor's neighbours alone
 * (remat_live_bound: the first step of both walks), exact for a tensor
 * with no evicted neighbour.
 */
#include <math.h>

#include "remat/remat_internal.h"

/* The summed cost of the evicted tensors reachable from t through evicted
 * tensors in one direction (forward: children, else producer inputs),
 * counting in the forward direction only those still held. t itself is
 * never counted. The walk stops, *cut set, as soon as (base + the sum) x
 * weight exceeds limit (never when limit is infinite). Out of host memory
 * it stops too: a lower bound. */
static int64_t region_compute(coop_remat *r, coop_tensor *t, bool forward, int64_t base,
                              double weight, double limit, bool *cut)
{
    uint32_t mark = remat_next_mark(r);
    int64_t c = 0;
    size_t len = 0;
    t->mark = mark;
    if (remat_stack_push(r, &len, t))
        return 0;
    while (len) {
        coop_tensor *x = r->stack[--len];
        size_t n = forward ? x->num_children : x->num_inputs;
        coop_tensor **next = forward ? x->children : x->inputs;
        for (size_t i = 0; i < n; i++) {
            coop_tensor *m = next[i];
            if (m->mark == mark || !remat_is_evicted(m))
                continue;
            m->mark = mark;
            if (!forward || m->handles) {
                c = uf_value_add(c, (int64_t)m->cost);
                /* the caller's value is (double)(base + c) x weight: stop
                 * once that is past limit, whatever follows adds to it */
                if ((double)uf_value_add(base, c) * weight > limit) {
                    *cut = true;
                    return c;
                }
            }
            if (remat_stack_push(r, &len, m))
                return c;
        }
    }
    return c;
}

int64_t remat_live_compute_upto(coop_remat *r, coop_tensor *t, double weight, double limit,
                                bool *complete)
{
    bool cut = false;
    int64_t c = (int64_t)t->cost;
    if (!((double)c * weight > limit))
        c = uf_value_add(c, region_compute(r, t, false, c, weight, limit, &cut));
    else
        cut = true;
    if (!cut)
        c = uf_value_add(c, region_compute(r, t, true, c, weight, limit, &cut));
    *complete = !cut;
    return c;
}

int64_t remat_live_compute(coop_remat *r, coop_tensor *t)
{
    bool complete;
    return remat_live_compute_upto(r, t, 0, INFINITY, &complete);
}

int64_t remat_live_bound(coop_remat *r, coop_tensor *t, bool *exact)
{
    /* the first step of both walks: each evicted input is an ancestor
     * reached through evicted tensors, each held evicted child a counted
     * descendant; repeats counted once (marks) */
    uint32_t mark = remat_next_mark(r);
    int64_t c = (int64_t)t->cost;
    bool alone = true;
    for (size_t i = 0; i < remat_num_neighbours(t); i++) {
        coop_tensor *n = remat_neighbour(t, i);
        if (n == t || !remat_is_evicted(n))
            continue;
        alone = false;
        if (n->mark == mark || (i >= t->num_inputs && !n->handles))
            continue;
        n->mark = mark;
        c = uf_value_add(c, (int64_t)n->cost);
    }
    *exact = alone;
    return c;
}
