/*
 * Internals shared by the simulator's files: the runtime (sim_runtime.c),
 * the policies' scores (sim_policy.c) and the arena memory model
 * (sim_arena.c). Not for use outside src/remat/sim_*.c.
 */
#ifndef COOP_REMAT_SIM_INTERNAL_H
#define COOP_REMAT_SIM_INTERNAL_H

#include "remat/sim_runtime.h"

#define SIM_NONE UINT32_MAX

/* ---- the operator graph around a storage ---- */

/* Iterates storage s's neighbours as DTR defines them: the storages of the
 * inputs of the ops that made s's created tensors, and of those tensors'
 * created consumers; each once, s itself not (sim_program.neighbours). */
typedef struct sim_neighbours {
    const sim_neighbour *next, *end;
    uint32_t created; /* tensors created in the run so far */
} sim_neighbours;

static inline sim_neighbours sim_neighbours_of(const sim_runtime *rt, uint32_t s)
{
    const sim_program *p = rt->prog;
    return (sim_neighbours){p->neighbours + p->neighbour_first[s],
                            p->neighbours + p->neighbour_first[s + 1], rt->num_created_tensors};
}

/* The next neighbour's storage id in *n; false at the end. */
static inline bool sim_neighbours_next(sim_neighbours *it, uint32_t *n)
{
    if (it->next == it->end || it->next->since >= it->created)
        return false; /* by since: the rest is not created yet */
    *n = it->next++->storage;
    return true;
}

/* The storages one step from storage x in a region walk (simrd's Region):
 * forward, those of the created children of x's created tensors; backward,
 * those of the inputs of the ops that produced them. A storage may come
 * more than once; callers mark what they have seen. */
typedef struct sim_region_step {
    const sim_program *prog;
    const uint32_t *tensors; /* x's tensors (storage_tensors), num_tensors created */
    uint32_t num_tensors, next_tensor;
    const uint32_t *ids; /* the current tensor's children or its op's inputs */
    uint32_t num_ids, next_id;
    uint32_t created; /* tensors created in the run so far (forward: children beyond are not) */
    bool forward;
} sim_region_step;

static inline sim_region_step sim_region_step_of(const sim_runtime *rt, uint32_t x, bool forward)
{
    const sim_program *p = rt->prog;
    return (sim_region_step){.prog = p,
                             .tensors = p->storage_tensors + p->storages[x].first_tensor,
                             .num_tensors = rt->storages[x].num_created,
                             .created = rt->num_created_tensors,
                             .forward = forward};
}

/* The next storage id in *s; false at the end. */
static inline bool sim_region_step_next(sim_region_step *it, uint32_t *s)
{
    const sim_program *p = it->prog;
    for (;;) {
        if (it->next_id < it->num_ids) {
            uint32_t u = it->ids[it->next_id++];
            if (it->forward && u >= it->created) {
                it->next_id = it->num_ids; /* children in creation order: the rest neither */
                continue;
            }
            *s = p->tensors[u].storage;
            return true;
        }
        if (it->next_tensor == it->num_tensors)
            return false;
        const sim_tensor *t = &p->tensors[it->tensors[it->next_tensor++]];
        if (it->forward) {
            it->ids = p->children + t->first_child;
            it->num_ids = t->num_children;
        } else {
            const sim_op *op = &p->ops[t->op];
            it->ids = p->inputs + op->first_input;
            it->num_ids = op->num_inputs;
        }
        it->next_id = 0;
    }
}

/* ---- runtime (sim_runtime.c) ---- */

/* Marks s evicted (not material, its tensors undefined, out of the pool,
 * in a union-find class with its evicted neighbours); frees nothing. */
int sim_mark_evicted(sim_runtime *rt, uint32_t s);
/* Evicts s: sim_mark_evicted plus releasing its memory. */
int sim_evict(sim_runtime *rt, uint32_t s);
/* One step of a search's eviction loop, in both memory models: evicts the
 * policy's choice (sim_choose) and counts it; SIM_OOM when nothing is
 * evictable, SIM_ERROR when the eviction failed. */
sim_result sim_evict_choice(sim_runtime *rt);
uint64_t sim_now_ns(void);
int sim_record_search(sim_stats *st, uint64_t ns);

/* ---- policies (sim_policy.c) ---- */

/* The policy's score of evictable storage s (lower: evict first). */
double sim_score(sim_runtime *rt, uint32_t s);
/* simrd Heuristic.choose over the pool; SIM_NONE if the pool is empty. */
uint32_t sim_choose(sim_runtime *rt);
/* c_eq: s's compute plus its evicted neighbours' distinct classes (ns).
 * With cfg.eq_cache, from s's cached class roots when still valid (O(roots)
 * instead of a walk over its neighbours); the same value either way. */
int64_t sim_eq_compute(sim_runtime *rt, uint32_t s);
/* c_eq from s's cache alone: false (and nothing computed) without a valid
 * one, or when a cached root has joined another class since (the set of
 * classes changed). Inline: coop's window pass asks it for every block. */
static inline bool sim_eq_cached(const sim_runtime *rt, uint32_t s, int64_t *out)
{
    const rt_storage *r = &rt->storages[s];
    if (!r->eq_valid)
        return false;
    int64_t compute = (int64_t)r->compute;
    /* indexed, not offset: with no roots cached yet eq_roots may be NULL
     * (UBSan and the sim fuzzer flagged the offset) */
    for (uint32_t j = 0; j < r->eq_num_roots; j++) {
        uint32_t root = rt->eq_roots[r->eq_first + j];
        if (!uf_is_root(&rt->uf, root))
            return false;
        compute += rt->uf.value[root];
    }
    *out = compute;
    return true;
}

/* A fresh traversal stamp for rt_storage.mark (every storage's mark reset
 * when the counter wraps), shared by the walks here and in sim_live.c. */
uint32_t sim_next_mark(sim_runtime *rt);

/* c_comp: s's compute plus the compute of the evicted storages connected
 * to s through evicted storages (neighbours as for c_eq, both directions).
 * What c_eq approximates with union-find classes, exactly: classes never
 * split, so once a class has absorbed a region its value stays attached to
 * storages that a rematerialization has since cut off from it; c_comp <=
 * c_eq. The walk is needed only where one of s's neighbours' classes had a
 * member rematerialized (uf_is_cut); otherwise c_comp is c_eq (cached).
 * Each component walked is labelled, and the label answers until
 * sim_comp_forget is called for one of its members. */
int64_t sim_component_compute(sim_runtime *rt, uint32_t s);

/* Whether s's component label is current: s was stamped by the walk whose
 * stamp its label still carries. Every walk takes a new stamp, so members a
 * later walk did not reach (a split component) stay stale even when their
 * label heads a new component. */
static inline bool sim_comp_label_valid(const sim_runtime *rt, const rt_storage *r)
{
    return r->comp_stamp && r->comp_stamp == rt->storages[r->comp_label].comp_stamp;
}

/* Call when op's tensors are created: they add edges between their
 * storages and the inputs' storages, and the op's cost to their storages'
 * compute. Where an output's storage is evicted (a view of an evicted
 * storage), its component changes (compute) and may merge with evicted
 * inputs' components: all their labels go. An output storage not evicted
 * is in no component, and edges to it join none: nothing changes (its
 * eviction will merge). */
void sim_comp_forget_new_tensors(sim_runtime *rt, const sim_op *op);

/* Forgets the label of evicted storage s's component (every member then
 * stale): call when the component changes, i.e. s is rematerialized (the
 * component may split), a neighbour of s is evicted (components merge),
 * s's compute changes, or s gains an evicted neighbour. A stale s is left
 * alone: its label may head another component by now. */
static inline void sim_comp_forget(sim_runtime *rt, uint32_t s)
{
    rt_storage *r = &rt->storages[s];
    if (sim_comp_label_valid(rt, r))
        rt->storages[r->comp_label].comp_stamp = 0;
}

/* cfg.check_caches (tests): every cached answer the run holds now against
 * a fresh walk, none of them read or written: c_eq's class roots (where
 * still all roots), the component labels of evicted storages, and coop's
 * c_live cache (sim_live_check). Counted in sim_stats.cache_checks and
 * cache_mismatches; the run decides the same. Called between commands and
 * before each search, never inside an evaluation (the walks share
 * rt->stack and the traversal stamps). */
void sim_check_caches(sim_runtime *rt);

/* c_live, coop's window cost (coop-comp's with c_live for c_comp, the same
 * weight, coop_cost.h; the default since docs/remat.md section 2's round
 * 5): s's compute, plus
 * the compute of the evicted storages its recomputation needs (its evicted
 * ancestors, reached through evicted storages: simrd's backward region),
 * plus the compute of the evicted storages the program still holds
 * (ref_ext > 0) whose recomputation would need s (its evicted descendants
 * reached through evicted storages, released ones walked through but not
 * counted). What
 * c_comp counts beyond it is evicted storages that neither recomputation
 * needs: released descendants (recomputed only on the way to a held one,
 * whose own cost counts them when it is evicted) and storages connected to
 * s only through a common ancestor or descendant (docs/remat.md, section
 * 2c, "Why coop loses vgg16 at 0.9"). With cfg.eq_cache, from s's cached
 * value while valid (sim_live.h: the same value); else two walks. */
int64_t sim_live_compute(sim_runtime *rt, uint32_t s);
/* c_live of s by its two walks, never from the cache; under dtr-full, whose
 * e* the cache holds instead (sim_live.h), e*: the forward region counted
 * whole, released storages too. */
int64_t sim_live_walked(sim_runtime *rt, uint32_t s);

/* Whether s's evicted neighbours' classes (the roots of s's valid c_eq
 * cache, or else the ones sim_eq_compute just left on the stack) are all
 * uncut: each is then exactly a connected set of evicted storages, not
 * connected to another (storages evicted next to each other are merged,
 * and no new neighbour of an evicted storage can appear), so c_comp is
 * c_eq. */
bool sim_classes_uncut(const sim_runtime *rt, uint32_t s);

/* Forgets the cached c_eq of s's neighbours and of s (a neighbourhood
 * changed: s was evicted or rematerialized, or a tensor was created). */
void sim_eq_forget_around(sim_runtime *rt, uint32_t s);
/* Bytes of the free blocks adjacent to s's block (arena model; 0 otherwise). */
uint64_t sim_adjacent_free(sim_runtime *rt, uint32_t s);

/* ---- arena model (sim_arena.c) ---- */

/* The arena model's capacity for a budget (bytes): the budget rounded down
 * to the 512-byte block granularity (0: no block fits). Both engines use it
 * as the pool's size and as frag_at_evict's denominator. */
uint64_t sim_arena_capacity(uint64_t budget);
/* The arena model's pool for a budget (bytes): host backend with 512-byte
 * pages, no VMM, one segment of sim_arena_capacity(budget) bytes, or of one
 * page when that is 0 (the caller then refuses every block), 512-byte
 * blocks. Also what `coop sim --engine lib` runs the remat API over
 * (sim_lib.c). */
void sim_arena_pool_config(uint64_t budget, coop_config *c);
int sim_arena_open(sim_runtime *rt);
void sim_arena_close(sim_runtime *rt);
/* Places storage s (size bytes), evicting per the policy when it does not
 * fit. SIM_OK, SIM_OOM or SIM_ERROR. */
sim_result sim_arena_place(sim_runtime *rt, uint32_t s);
/* Hands from's block to storage to (recomputable in-place). */
void sim_arena_transfer(sim_runtime *rt, uint32_t from, uint32_t to);
/* Keeps the breaker index in step after s's residency or evictability
 * changed: a resident storage outside the evictable pool breaks windows.
 * Without host memory the index degrades safely (see sim_arena.c). */
void sim_arena_sync(sim_runtime *rt, uint32_t s);
/* Frees s's block. */
void sim_arena_free(sim_runtime *rt, uint32_t s);

#endif
