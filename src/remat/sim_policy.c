/* Eviction scores of the simulator's policies, and simrd's argmin (sim_internal.h). */
#include <math.h>
#include <stdlib.h>

#include "growable.h"
#include "pool_internal.h"
#include "remat/sim_internal.h"
#include "remat/sim_live.h"

uint32_t sim_next_mark(sim_runtime *rt)
{
    if (++rt->mark_epoch == 0) {
        for (uint32_t i = 0; i < rt->prog->num_storages; i++)
            rt->storages[i].mark = 0;
        rt->mark_epoch = 1;
    }
    return rt->mark_epoch;
}

static int push(sim_runtime *rt, uint32_t s)
{
    if (rt->stack_len == rt->stack_cap &&
        GROW_ARRAY(rt->stack, rt->stack_cap, (size_t)rt->stack_len + 1, SIM_ARRAY_FIRST))
        return -1;
    rt->stack[rt->stack_len++] = s;
    return 0;
}

/* Compute (ns) of the evicted storages reachable from s through evicted
 * storages, in one direction (children if forward, else parents): simrd's
 * Region, whose interior is e*. With live_only, the walk still goes through
 * every evicted storage but counts only those the program holds a handle to
 * (sim_live_compute). */
static int64_t region_compute(sim_runtime *rt, uint32_t s, bool forward, bool live_only)
{
    uint32_t mark = sim_next_mark(rt);
    int64_t compute = 0;
    rt->stack_len = 0;
    if (push(rt, s))
        return 0;
    while (rt->stack_len) {
        sim_region_step step = sim_region_step_of(rt, rt->stack[--rt->stack_len], forward);
        uint32_t us;
        while (sim_region_step_next(&step, &us)) {
            rt_storage *r = &rt->storages[us];
            if (r->material || us == s || r->mark == mark)
                continue;
            r->mark = mark;
            if (!live_only || r->ref_ext)
                compute += (int64_t)r->compute;
            if (push(rt, us))
                return compute;
        }
    }
    return compute;
}

/* Remembers the class roots on the traversal stack as s's cache; a slot too
 * small is replaced by a new one at the end of the roots array (the old one
 * is not reused: slots only grow, doubling). */
static void eq_remember(sim_runtime *rt, rt_storage *r)
{
    uint32_t k = rt->stack_len;
    r->eq_valid = false;
    if (k > UINT16_MAX)
        return;
    if (k > r->eq_cap) {
        uint32_t cap = r->eq_cap ? r->eq_cap : 4;
        while (cap < k)
            cap *= 2;
        if (cap > UINT16_MAX)
            cap = UINT16_MAX;
        if (rt->eq_roots_len + cap > UINT32_MAX ||
            GROW_ARRAY(rt->eq_roots, rt->eq_roots_cap, rt->eq_roots_len + cap, SIM_ARRAY_FIRST))
            return; /* out of host memory: not cached */
        r->eq_first = (uint32_t)rt->eq_roots_len;
        r->eq_cap = (uint16_t)cap;
        rt->eq_roots_len += cap;
    }
    for (uint32_t j = 0; j < k; j++)
        rt->eq_roots[r->eq_first + j] = rt->stack[j];
    r->eq_num_roots = (uint16_t)k;
    r->eq_valid = true;
}

/* c_eq of s by the walk over its neighbours, their distinct class roots left
 * on rt->stack (what eq_remember keeps); *complete false where the stack
 * could not grow (a class not counted). The neighbours visited are added to
 * *visited. */
static int64_t eq_walk(sim_runtime *rt, uint32_t s, bool *complete, uint64_t *visited)
{
    int64_t compute = (int64_t)rt->storages[s].compute;
    rt->stack_len = 0; /* class roots seen: each class counts once */
    *complete = true;
    sim_neighbours it = sim_neighbours_of(rt, s);
    uint32_t n;
    while (sim_neighbours_next(&it, &n)) {
        ++*visited;
        const rt_storage *r = &rt->storages[n];
        if (r->material || n == s || r->ecn == SIM_NONE)
            continue;
        /* uf_find without the call where the class is at most one link
         * deep (as union by size and path compression keep most): the
         * same root, and nothing to compress */
        uint32_t up = rt->uf.parent[r->ecn];
        uint32_t root = rt->uf.parent[up] == up ? up : uf_find(&rt->uf, r->ecn);
        bool seen = false;
        for (uint32_t j = 0; j < rt->stack_len && !seen; j++)
            seen = rt->stack[j] == root;
        if (seen)
            continue;
        if (push(rt, root))
            *complete = false; /* out of host memory: this class is not counted */
        else
            compute += rt->uf.value[root];
    }
    return compute;
}

int64_t sim_eq_compute(sim_runtime *rt, uint32_t s)
{
    int64_t compute;
    if (sim_eq_cached(rt, s, &compute))
        return compute;
    rt->stats.eq_walks++;
    bool complete;
    compute = eq_walk(rt, s, &complete, &rt->stats.eq_neighbours);
    if (rt->cfg.eq_cache && complete)
        eq_remember(rt, &rt->storages[s]);
    return compute;
}

bool sim_classes_uncut(const sim_runtime *rt, uint32_t s)
{
    const rt_storage *r = &rt->storages[s];
    uint32_t n = r->eq_valid ? r->eq_num_roots : rt->stack_len;
    if (n == 0) /* no class to be cut (and the root arrays may not exist yet) */
        return true;
    const uint32_t *roots = r->eq_valid ? rt->eq_roots + r->eq_first : rt->stack;
    for (uint32_t j = 0; j < n; j++)
        if (uf_is_cut(&rt->uf, roots[j]))
            return false;
    return true;
}

/* Makes room for `walks` new stamps (rt_storage.comp_stamp) without
 * wrapping: when too few are left, every label is forgotten and the stamps
 * start over. Called before an evaluation, never inside one: forgetting the
 * labels of components it has already counted would let it count one twice
 * under a second label. */
static void restart_comp_stamps(sim_runtime *rt)
{
    for (uint32_t i = 0; i < rt->prog->num_storages; i++)
        rt->storages[i].comp_stamp = 0;
    rt->comp_stamp = 0;
}

static inline void reserve_comp_stamps(sim_runtime *rt, uint32_t walks)
{
    if (rt->comp_stamp > UINT32_MAX - walks)
        restart_comp_stamps(rt);
}

/* The summed compute of the component of evicted storages that contains
 * evicted storage n: its label's while valid, else walked and labelled
 * (every storage of it stamped with a new stamp and n as label). */
static int64_t component_of(sim_runtime *rt, uint32_t n)
{
    rt_storage *first = &rt->storages[n];
    if (sim_comp_label_valid(rt, first))
        return rt->storages[first->comp_label].comp_sum;
    rt->stats.eq_walks++;
    uint32_t stamp = ++rt->comp_stamp; /* new: reserve_comp_stamps */
    int64_t sum = 0;
    bool complete = true;
    first->comp_stamp = stamp;
    first->comp_label = n;
    rt->stack_len = 0;
    if (push(rt, n)) {
        sum = (int64_t)first->compute;
        complete = false;
    }
    while (rt->stack_len && complete) {
        uint32_t x = rt->stack[--rt->stack_len];
        sum += (int64_t)rt->storages[x].compute;
        sim_neighbours it = sim_neighbours_of(rt, x);
        uint32_t m;
        while (sim_neighbours_next(&it, &m)) {
            rt_storage *r = &rt->storages[m];
            rt->stats.eq_neighbours++;
            if (r->material || r->ecn == SIM_NONE || r->comp_stamp == stamp)
                continue;
            r->comp_stamp = stamp;
            r->comp_label = n;
            if (push(rt, m)) {
                complete = false;
                break;
            }
        }
    }
    first->comp_sum = sum;
    if (!complete) /* out of host memory: a lower bound, for this evaluation only */
        first->comp_stamp = 0;
    return sum;
}

/* c_comp of s by its definition, by a walk that neither reads nor writes
 * component labels (cfg.check_components compares it with the labels').
 * From an evicted s, the compute of s's component (s marked first, so a
 * walk back to it does not count it twice; a material s is never walked
 * to). */
static int64_t component_walked(sim_runtime *rt, uint32_t s)
{
    uint32_t seen = sim_next_mark(rt);
    int64_t compute = (int64_t)rt->storages[s].compute;
    rt->storages[s].mark = seen;
    rt->stack_len = 0;
    for (uint32_t from = s;; from = rt->stack[--rt->stack_len]) {
        sim_neighbours around = sim_neighbours_of(rt, from);
        uint32_t n;
        while (sim_neighbours_next(&around, &n)) {
            rt_storage *r = &rt->storages[n];
            if (r->material || r->ecn == SIM_NONE || r->mark == seen)
                continue;
            r->mark = seen;
            compute += (int64_t)r->compute;
            if (push(rt, n))
                return -1; /* out of host memory: counted as a mismatch */
        }
        if (!rt->stack_len)
            return compute;
    }
}

int64_t sim_component_compute(sim_runtime *rt, uint32_t s)
{
    int64_t eq = sim_eq_compute(rt, s);
    if (sim_classes_uncut(rt, s))
        return eq;
    /* s's compute plus its evicted neighbours' distinct components (labels
     * marked as counted) */
    const sim_program *p = rt->prog;
    reserve_comp_stamps(rt, p->neighbour_first[s + 1] - p->neighbour_first[s]);
    uint32_t mark = sim_next_mark(rt);
    int64_t compute = (int64_t)rt->storages[s].compute;
    sim_neighbours it = sim_neighbours_of(rt, s);
    uint32_t n;
    while (sim_neighbours_next(&it, &n)) {
        const rt_storage *r = &rt->storages[n];
        if (r->material || r->ecn == SIM_NONE)
            continue;
        int64_t sum = component_of(rt, n);
        rt_storage *label = &rt->storages[rt->storages[n].comp_label];
        if (label->mark == mark)
            continue;
        label->mark = mark;
        compute += sum;
    }
    if (rt->cfg.check_components) {
        rt->stats.comp_checks++;
        rt->stats.comp_mismatches += compute != component_walked(rt, s);
    }
    return compute;
}

int64_t sim_live_walked(sim_runtime *rt, uint32_t s)
{
    /* dtr-full's e* counts the forward region whole; c_live its held part */
    return (int64_t)rt->storages[s].compute + region_compute(rt, s, false, false) +
           region_compute(rt, s, true, rt->policy != SIM_POLICY_DTR_FULL);
}

int64_t sim_live_compute(sim_runtime *rt, uint32_t s)
{
#ifndef COOP_SIM_LIVE_CHECK
    if (rt->live)
        return sim_live_cached(rt, s);
#endif
    int64_t walked = sim_live_walked(rt, s);
#ifdef COOP_SIM_LIVE_CHECK
    /* debug builds (-DCOOP_SIM_LIVE_CHECK): the cache against the walk at
     * every evaluation */
    if (rt->live && sim_live_cached(rt, s) != walked)
        abort();
#endif
    return walked;
}

void sim_check_caches(sim_runtime *rt)
{
    for (uint32_t s = 0; s < rt->prog->num_storages; s++) {
        rt_storage *r = &rt->storages[s];
        int64_t cached;
        uint64_t visited = 0;
        bool complete;
        if (sim_eq_cached(rt, s, &cached)) {
            rt->stats.cache_checks++;
            rt->stats.cache_mismatches += eq_walk(rt, s, &complete, &visited) != cached;
        }
        /* a label answers for the evicted storages it covers (a material
         * storage's label is stale, whatever its stamps say) */
        if (!r->material && r->ecn != SIM_NONE && sim_comp_label_valid(rt, r)) {
            rt->stats.cache_checks++;
            rt->stats.cache_mismatches +=
                component_walked(rt, s) != rt->storages[r->comp_label].comp_sum;
        }
    }
    if (rt->live)
        sim_live_check(rt);
}

void sim_eq_forget_around(sim_runtime *rt, uint32_t s)
{
    rt->storages[s].eq_valid = false;
    sim_neighbours it = sim_neighbours_of(rt, s);
    uint32_t n;
    while (sim_neighbours_next(&it, &n))
        rt->storages[n].eq_valid = false;
}

uint64_t sim_adjacent_free(sim_runtime *rt, uint32_t s)
{
    if (!rt->mem_pool || !rt->storages[s].ptr)
        return 0;
    arena_block *b = arena_lookup(pool_arena(rt->mem_pool), (uintptr_t)rt->storages[s].ptr);
    if (!b)
        return 0;
    uint64_t bytes = 0;
    if (b->prev && b->prev->state == COOP_BLOCK_FREE)
        bytes += b->prev->size;
    if (b->next && b->next->state == COOP_BLOCK_FREE)
        bytes += b->next->size;
    return bytes;
}

/* compute / (size * staleness) as exactly as simrd's Python ints allow: the
 * product is formed in long double (64-bit mantissa on x86-64). */
static double ratio_score(int64_t compute, uint64_t size, uint64_t staleness)
{
    long double denom = (long double)size * (long double)staleness;
    if (denom <= 0)
        return INFINITY;
    return (double)((long double)compute / denom);
}

/* dtr-full's score of s for a numerator: its own compute plus its e*
 * (simrd's forward and backward regions), per byte and per unit of
 * staleness. */
static double per_byte_stale(const sim_runtime *rt, uint32_t s, int64_t compute)
{
    return ratio_score(compute, rt->prog->storages[s].size,
                       rt->clock - (uint64_t)rt->storages[s].last_access);
}

/* dtr-full's score of s without its regions: a lower bound of full_score
 * (same denominator, a numerator smaller by the regions' compute, which is
 * >= 0 and exact: a log's TIMEs, each once per output, add up to less than
 * 2^61 ns, so no sum wraps; long double division and the rounding to double
 * are both monotone). Two walks cheaper. */
static double own_score(const sim_runtime *rt, uint32_t s)
{
    return per_byte_stale(rt, s, (int64_t)rt->storages[s].compute);
}

/* dtr-full's score of s, e* from the c_live cache where the run keeps one
 * (sim_live.h: under dtr-full it caches e*, the same value as the walks),
 * else walked. Not counted in heuristic_evals (the caller counts). */
static double full_score(sim_runtime *rt, uint32_t s)
{
    return per_byte_stale(rt, s, sim_live_compute(rt, s));
}

double sim_score(sim_runtime *rt, uint32_t s)
{
    rt_storage *r = &rt->storages[s];
    uint64_t size = rt->prog->storages[s].size;
    uint64_t stale = rt->clock - (uint64_t)r->last_access;
    rt->stats.heuristic_evals++;
    switch (rt->policy) {
    case SIM_POLICY_DTR:
    case SIM_POLICY_COOP: /* argmin fallback only; the window sums its own costs */
        return ratio_score(sim_eq_compute(rt, s), size, stale);
    case SIM_POLICY_DTR_FULL:
        return full_score(rt, s);
    case SIM_POLICY_LRU:
        return (double)r->last_access;
    case SIM_POLICY_SIZE:
        return size ? 1.0 / (double)size : INFINITY;
    case SIM_POLICY_DTE: /* MegEngine DTE: the tensor's bytes plus its free neighbours' */
        return ratio_score((int64_t)r->compute, size + sim_adjacent_free(rt, s), stale);
    case SIM_POLICY_DTR_LOCAL:
    default:
        return ratio_score((int64_t)r->compute, size, stale);
    }
}

/* LRU's argmin on the last accesses themselves, ties to the later storage
 * and the stop at an access at clock 0 as sim_choose: its score, the clock
 * as a double, is exact only up to 2^53 ns (a log's TIMEs may add up to
 * 2^61), and above that storages used a few ns apart tied and the later in
 * the pool went, however recently used. */
static uint32_t choose_lru(sim_runtime *rt)
{
    int64_t best = INT64_MAX;
    uint32_t best_s = SIM_NONE;
    for (uint32_t i = 0; i < rt->pool_len; i++) {
        uint32_t s = rt->pool[i];
        if (s == SIM_NONE)
            continue;
        rt->stats.heuristic_evals++; /* as sim_score counts it */
        if (rt->storages[s].last_access <= best) {
            best = rt->storages[s].last_access;
            best_s = s;
        }
        if (rt->storages[s].last_access == 0)
            break; /* as sim_choose stops at a score of 0 */
    }
    return best_s;
}

/* dtr-full's argmin, the same choice as sim_choose's scan (and the same
 * heuristic_evals) with the two region walks only where they can matter.
 * A candidate whose own_score, a lower bound of its score, exceeds a score
 * already known (bound) scores more than the minimum: the scan would
 * neither take it (not even on a tie) nor stop at it (its score is not 0),
 * so it is skipped unwalked, and counted as the scan counts it. The bound
 * starts at the full score of the candidate of least own_score (a seed;
 * its walk is extra). Where the run caches e* (sim_live.h), a valid value
 * is the score without a walk, and an invalidated one that only grew since
 * is a tighter lower bound. docs/remat.md, section 3, "dtr-full's argmin":
 * the figures, and why neither changes a choice. */
static uint32_t choose_dtr_full(sim_runtime *rt)
{
    uint32_t seed = SIM_NONE;
    double seed_bound = INFINITY;
    for (uint32_t i = 0; i < rt->pool_len; i++) {
        uint32_t s = rt->pool[i];
        if (s == SIM_NONE)
            continue;
        double b = own_score(rt, s);
        if (seed == SIM_NONE || b < seed_bound) {
            seed = s;
            seed_bound = b;
        }
    }
    if (seed == SIM_NONE)
        return SIM_NONE;
    double seed_score = full_score(rt, seed), bound = seed_score;
    double best = INFINITY;
    uint32_t best_s = SIM_NONE, last = SIM_NONE;
    for (uint32_t i = 0; i < rt->pool_len; i++) {
        uint32_t s = rt->pool[i];
        if (s == SIM_NONE)
            continue;
        last = s;
        rt->stats.heuristic_evals++; /* as sim_score counts it */
        if (own_score(rt, s) > bound)
            continue;
        /* a cached e* gone stale only by changes that add to it (sim_live_known):
         * a tighter lower bound, or where still valid the score itself */
        int64_t known;
        int exact = sim_live_known(rt, s, &known);
        if (exact == 0 && per_byte_stale(rt, s, known) > bound)
            continue;
        double c = s == seed    ? seed_score
                   : exact == 1 ? per_byte_stale(rt, s, known)
                                : full_score(rt, s);
        if (c < bound)
            bound = c;
        if (c <= best) { /* as sim_choose below */
            best = c;
            best_s = s;
        }
        if (c == 0)
            break;
    }
    return best_s != SIM_NONE ? best_s : last;
}

uint32_t sim_choose(sim_runtime *rt)
{
    if (rt->policy == SIM_POLICY_LRU)
        return choose_lru(rt);
    if (rt->policy == SIM_POLICY_DTR_FULL)
        return choose_dtr_full(rt);
    double best = INFINITY;
    uint32_t best_s = SIM_NONE, last = SIM_NONE;
    for (uint32_t i = 0; i < rt->pool_len; i++) {
        uint32_t s = rt->pool[i];
        if (s == SIM_NONE)
            continue;
        last = s;
        double c = sim_score(rt, s);
        if (c <= best) { /* ties go to the later storage, as in simrd */
            best = c;
            best_s = s;
        }
        if (c == 0)
            break;
    }
    return best_s != SIM_NONE ? best_s : last; /* all NaN: any one */
}
