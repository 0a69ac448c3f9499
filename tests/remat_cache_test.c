/*
 * What makes the remat API's searches cheaper must not change them: the
 * c_eq cache (src/remat/remat_cost.c: each tensor keeps the class roots of
 * its evicted neighbours), coop's breaker index (remat_search_index.c: the
 * runs of blocks that break windows, skipped by the search) and the argmin
 * policies' evictable set (the same file: the tensors a round scores). Random
 * programs (creations with inputs, releases, accesses that recompute, pins,
 * views, in-place ops, plain coop_malloc allocations beside the tensors) on
 * a small pool under pressure, for coop, coop-comp, coop-eq, dtr and dte:
 *
 * - after every operation, every record's c_eq and c_comp read with the
 *   cache (a hit wherever the last check left a valid one) equal the walk
 *   without it, and so does "no class cut" (c_comp answered by c_eq); its
 *   c_live (coop's cost, uncached) lies between its own cost and
 *   c_comp;
 * - once brought up to date (as a search does), the breaker index holds
 *   exactly the blocks of resident tensors that break windows, and the
 *   evictable set exactly the resident tensors that may be evicted;
 * - the same program run by a second context with none of them (cache
 *   off, no index, the argmin over the resident list) makes the same
 *   decisions: every call returns the same status,
 *   the same tensors are resident at the same pool offsets, with the same
 *   eviction and recomputation counts.
 *
 * Each policy twice: on one segment of the whole capacity, and on segments
 * of a quarter of it (no VMM), where the breaker index's runs end at
 * segment boundaries and tensors larger than a segment make the window
 * policies evict whole segments.
 *
 * COOP_TEST_SEED sets the seed (printed); the pool is the host backend's
 * (never touched).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"
#include "remat/remat_internal.h"
#include "test_seed.h"

#define UNIT 4096u
#define POOL_UNITS 48u
#define MAX_HANDLES 4096
#define MAX_PLAIN 8 /* plain allocations held at once */
#define OPS 1500

/* The pool of a run: one segment of the whole capacity (the fixed arena of
 * coop sim's model), or (no VMM) segments of a quarter of it, which a
 * window cannot span, tensors of up to 16 units among them (a third more
 * than a segment: the window policies then evict whole segments). */
typedef struct shape {
    unsigned segment_units, max_units, ops;
} shape;
static const shape one_segment = {POOL_UNITS, 6, OPS};
static const shape segments = {POOL_UNITS / 4, 16, OPS * 2 / 3};

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out, (void)user;
    return COOP_OK;
}

/* One context and the test's handles on it (the same indexes in both). */
typedef struct side {
    coop_pool *pool;
    coop_remat *r;
    coop_tensor *h[MAX_HANDLES];
    void *plain[MAX_PLAIN];
} side;

typedef struct world {
    side s[2]; /* [0] cache on, [1] cache off */
    bool live[MAX_HANDLES];
    uint32_t pins[MAX_HANDLES]; /* the test's own pins per handle */
    size_t n;
    uint64_t rng;
    uint64_t hits, checks, breakers, evictable;
    uint64_t label_hits; /* checks whose c_comp read a component label kept from before */
    /* checks where c_live counted more than the tensor's own cost, and
     * less than c_comp (the bounds were not both trivially met) */
    uint64_t live_above_own, live_below_comp;
    uint64_t live_bound_exact; /* checks where c_live's window bound was exact */
    const shape *shape;
    uint64_t over_segment; /* tensors made larger than a segment */
} world;

static uint64_t next(world *w)
{
    return test_xorshift64(&w->rng);
}

static void open_side(side *s, const shape *sh, coop_remat_policy policy, bool fast)
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = false;
    c.page_size = 4096;
    c.capacity = POOL_UNITS * UNIT;
    c.segment_size = sh->segment_units * UNIT;
    assert_int_equal(coop_pool_create(&c, &s->pool), COOP_OK);
    coop_remat_config cfg = {.policy = policy, .cheap_threshold = -1, .recompute = recompute};
    assert_int_equal(coop_remat_create(s->pool, &cfg, &s->r), COOP_OK);
    s->r->eq_cache_off = !fast;
    if (!fast)
        remat_search_index_close(s->r); /* and no breaker index or evictable set */
}

/* A random live handle, or -1. */
static int pick(world *w)
{
    if (!w->n)
        return -1;
    for (int tries = 0; tries < 16; tries++) {
        size_t i = next(w) % w->n;
        if (w->live[i])
            return (int)i;
    }
    for (size_t i = 0; i < w->n; i++)
        if (w->live[i])
            return (int)i;
    return -1;
}

/* c_comp by definition, ignoring the component labels: t's cost plus each
 * distinct component of evicted tensors next to t, walked here (the
 * library's traversal stamps, advanced as the library does, mark what this
 * walk has seen). */
static int64_t component_walked(coop_remat *r, coop_tensor *t)
{
    uint32_t seen = ++r->mark_epoch;
    int64_t c = (int64_t)t->cost;
    size_t len = 0, cap = 64;
    coop_tensor **stack = malloc(cap * sizeof *stack);
    assert_non_null(stack);
    for (size_t i = 0; i < remat_num_neighbours(t); i++) {
        coop_tensor *n = remat_neighbour(t, i);
        if (n == t || !remat_is_evicted(n) || n->mark == seen)
            continue;
        n->mark = seen;
        stack[len++] = n;
        while (len) {
            coop_tensor *x = stack[--len];
            c += (int64_t)x->cost;
            for (size_t k = 0; k < remat_num_neighbours(x); k++) {
                coop_tensor *m = remat_neighbour(x, k);
                if (!remat_is_evicted(m) || m->mark == seen)
                    continue;
                m->mark = seen;
                if (len == cap) {
                    cap *= 2;
                    stack = realloc(stack, cap * sizeof *stack);
                    assert_non_null(stack);
                }
                stack[len++] = m;
            }
        }
    }
    free(stack);
    return c;
}

/* Whether an evicted neighbour of t has a component label still current
 * (c_comp will read it instead of walking). */
static bool component_label_current(const coop_tensor *t)
{
    for (size_t i = 0; i < remat_num_neighbours(t); i++) {
        const coop_tensor *n = remat_neighbour(t, i);
        if (n != t && remat_is_evicted(n) && remat_comp_label_valid(n))
            return true;
    }
    return false;
}

/* Every record's costs: with the caches (c_eq's hits where valid, c_comp's
 * component labels where current) and by walks that use neither. */
static void check_costs(world *w)
{
    coop_remat *r = w->s[0].r;
    for (coop_tensor *t = r->all; t; t = t->next_all) {
        if (t->base != t)
            continue;
        bool had = t->eq_valid;
        int64_t cached = remat_eq_compute(r, t);
        bool hit = had && t->eq_valid;
        bool uncut_cached = remat_classes_uncut(r, t);
        bool labelled = !uncut_cached && component_label_current(t);
        int64_t comp_cached = remat_component_compute(r, t);
        r->eq_cache_off = true;
        int64_t walked = remat_eq_compute(r, t);
        bool uncut_walked = remat_classes_uncut(r, t);
        /* c_comp is c_eq where no class is cut (and then exact: the
         * library's costs do not change once evicted) */
        int64_t comp_walked = uncut_walked ? walked : component_walked(r, t);
        r->eq_cache_off = false;
        /* c_live's regions are parts of the evicted components c_comp
         * counts whole */
        int64_t live = remat_live_compute(r, t);
        if (live < (int64_t)t->cost || live > comp_walked)
            fail_msg("c_live %lld outside [cost %lld, c_comp %lld] (after %llu checks)",
                     (long long)live, (long long)t->cost, (long long)comp_walked,
                     (unsigned long long)w->checks);
        /* the window's bound of it: below it, and it where exact */
        bool exact = false;
        int64_t bound = remat_live_bound(r, t, &exact);
        if (bound < (int64_t)t->cost || bound > live || (exact && bound != live))
            fail_msg("c_live bound %lld (exact %d) vs c_live %lld, cost %lld", (long long)bound,
                     exact, (long long)live, (long long)t->cost);
        w->live_bound_exact += exact;
        w->live_above_own += live > (int64_t)t->cost;
        w->live_below_comp += live < comp_walked;
        if (cached != walked || uncut_cached != uncut_walked || comp_cached != comp_walked)
            fail_msg("c_eq %lld cached vs %lld walked, uncut %d vs %d, c_comp %lld vs %lld "
                     "(hit %d, after %llu checks)",
                     (long long)cached, (long long)walked, uncut_cached, uncut_walked,
                     (long long)comp_cached, (long long)comp_walked, hit,
                     (unsigned long long)w->checks);
        w->hits += hit;
        w->label_hits += labelled;
        w->checks++;
    }
}

/* Where ptr lies on side s: its segment's rank in address order and the
 * offset in it (as one number), which compare the sides (each pool has a
 * backend of its own, at other addresses); and its segment's size. */
static uint64_t position_of(const side *s, const void *ptr, uint64_t *segment_size)
{
    uint64_t rank = 0;
    *segment_size = 0; /* set on every path: fail_msg returns as far as analysers know */
    for (const arena_segment *seg = arena_first_segment(pool_arena(s->pool)); seg;
         seg = seg->next, rank++)
        if ((uintptr_t)ptr >= seg->base && (uintptr_t)ptr - seg->base < seg->reserved) {
            *segment_size = seg->reserved;
            return rank << 32 | ((uintptr_t)ptr - seg->base);
        }
    fail_msg("%p lies in no segment of its pool", ptr);
    return 0;
}

/* Brought up to date, side 0's breaker index (coop policies) holds exactly
 * the blocks of the resident tensors that are not evictable: every block of
 * every run is one, and the runs hold as many blocks as there are. */
static void check_breakers(world *w)
{
    coop_remat *r = w->s[0].r;
    if (!r->breakers)
        return;
    pool_lock(w->s[0].pool);
    remat_search_index_sync_locked(r);
    size_t in_runs = 0;
    for (size_t i = 0; i < r->breakers->len; i++) {
        const breaker_run *run = &r->breakers->runs[i];
        for (const arena_block *b = run->first;; b = b->next) {
            assert_int_equal(b->state, COOP_BLOCK_ALLOCATED);
            const coop_tensor *t = b->owner;
            assert_non_null(t);
            assert_true(t->breaking && !remat_evictable(t));
            in_runs++;
            if (b == run->last)
                break;
        }
    }
    size_t breaking = 0;
    for (const coop_tensor *t = r->all; t; t = t->next_all)
        breaking += t->base == t && t->ptr && !remat_evictable(t);
    pool_unlock(w->s[0].pool);
    assert_int_equal(in_runs, breaking);
    assert_int_equal(r->breakers->blocks, breaking);
    w->breakers += breaking;
}

/* Brought up to date, side 0's evictable set (argmin policies) holds
 * exactly the resident tensors that may be evicted, each at its place; and
 * the resident list runs from the latest made resident to the earliest
 * (the order the argmin's ties follow, resident_seq). */
static void check_evictable_set(world *w)
{
    coop_remat *r = w->s[0].r;
    for (const coop_tensor *t = r->resident; t && t->next_resident; t = t->next_resident)
        assert_true(t->resident_seq > t->next_resident->resident_seq);
    if (!r->cands_on)
        return;
    pool_lock(w->s[0].pool);
    remat_search_index_sync_locked(r);
    pool_unlock(w->s[0].pool);
    size_t evictable = 0;
    for (const coop_tensor *t = r->all; t; t = t->next_all) {
        bool in = t->base == t && t->ptr && remat_evictable(t);
        evictable += in;
        if (!in) {
            assert_int_equal(t->cand_pos, REMAT_NONE);
            continue;
        }
        assert_true(t->cand_pos < r->num_cands);
        assert_ptr_equal(r->cands[t->cand_pos], t);
    }
    assert_int_equal(r->num_cands, evictable);
    w->evictable += evictable;
}

/* Both sides hold the same tensors at the same offsets, with the same counts. */
static void check_same_decisions(world *w)
{
    for (size_t i = 0; i < w->n; i++) {
        if (!w->live[i])
            continue;
        void *a = coop_tensor_data(w->s[0].h[i]), *b = coop_tensor_data(w->s[1].h[i]);
        assert_int_equal(a != NULL, b != NULL);
        if (!a)
            continue;
        uint64_t size_a, size_b;
        assert_int_equal(position_of(&w->s[0], a, &size_a), position_of(&w->s[1], b, &size_b));
        assert_int_equal(size_a, size_b);
    }
    coop_remat_stats x, y;
    coop_remat_get_stats(w->s[0].r, &x);
    coop_remat_get_stats(w->s[1].r, &y);
    assert_int_equal(x.evictions, y.evictions);
    assert_int_equal(x.recomputes, y.recomputes);
    assert_int_equal(x.clock, y.clock);
}

/* Pins handles idx[0 .. k) on side s (recomputing); on a failure unpins
 * those pinned. The status. */
static coop_status pin_inputs(side *s, const int *idx, size_t k, coop_tensor **in)
{
    for (size_t j = 0; j < k; j++) {
        coop_status st = coop_tensor_pin(s->r, s->h[idx[j]], NULL);
        if (st) {
            while (j--)
                coop_tensor_unpin(s->r, s->h[idx[j]]);
            return st;
        }
        in[j] = s->h[idx[j]];
    }
    return COOP_OK;
}

static void unpin_inputs(side *s, const int *idx, size_t k)
{
    for (size_t j = 0; j < k; j++)
        assert_int_equal(coop_tensor_unpin(s->r, s->h[idx[j]]), COOP_OK);
}

/* One random operation, the same on both sides. */
static void step(world *w)
{
    unsigned what = (unsigned)(next(w) % 100);
    int idx[3];
    size_t k = next(w) % 4;
    for (size_t j = 0; j < k; j++)
        if ((idx[j] = pick(w)) < 0)
            k = j;
    size_t units = 1 + next(w) % w->shape->max_units;
    uint64_t cost = 1 + next(w) % 1000;
    int target = pick(w);
    /* a fifth not evictable until released (breakers while held) */
    unsigned flags = next(w) % 5 ? COOP_TENSOR_EVICTABLE : 0;
    coop_status st[2];
    if (what < 50 || target < 0) { /* an op with k inputs */
        if (w->n == MAX_HANDLES)
            return;
        for (int s = 0; s < 2; s++) {
            side *sd = &w->s[s];
            coop_tensor *in[3];
            st[s] = pin_inputs(sd, idx, k, in);
            if (!st[s]) {
                st[s] =
                    coop_tensor_create(sd->r, units * UNIT, cost, "op", in, k, flags, &sd->h[w->n]);
                unpin_inputs(sd, idx, k);
            }
        }
        assert_int_equal(st[0], st[1]);
        if (!st[0])
            w->live[w->n++] = true;
        w->over_segment += !st[0] && units > w->shape->segment_units;
    } else if (what < 70) { /* release */
        for (int s = 0; s < 2; s++) {
            for (uint32_t p = 0; p < w->pins[target]; p++)
                coop_tensor_unpin(w->s[s].r, w->s[s].h[target]);
            st[s] = coop_tensor_release(w->s[s].r, w->s[s].h[target]);
        }
        assert_int_equal(st[0], COOP_OK);
        assert_int_equal(st[1], COOP_OK);
        w->live[target] = false;
        w->pins[target] = 0;
    } else if (what < 85) { /* access: recomputes an evicted tensor */
        for (int s = 0; s < 2; s++)
            st[s] = coop_tensor_access(w->s[s].r, w->s[s].h[target], NULL);
        assert_int_equal(st[0], st[1]);
    } else if (what < 90) { /* pin, or unpin a pinned one */
        if (w->pins[target]) {
            for (int s = 0; s < 2; s++)
                assert_int_equal(coop_tensor_unpin(w->s[s].r, w->s[s].h[target]), COOP_OK);
            w->pins[target]--;
        } else {
            for (int s = 0; s < 2; s++)
                st[s] = coop_tensor_pin(w->s[s].r, w->s[s].h[target], NULL);
            assert_int_equal(st[0], st[1]);
            w->pins[target] += !st[0];
        }
    } else if (what < 93) { /* a plain allocation or free beside the tensors */
        size_t slot = next(w) % MAX_PLAIN;
        for (int s = 0; s < 2; s++) {
            side *sd = &w->s[s];
            if (sd->plain[slot]) {
                assert_int_equal(coop_free(sd->pool, sd->plain[slot]), COOP_OK);
                sd->plain[slot] = NULL;
            } else {
                sd->plain[slot] = coop_malloc(sd->pool, units * UNIT / 2, 0, COOP_ALLOC_LOW, NULL);
            }
        }
        assert_int_equal(w->s[0].plain[slot] != NULL, w->s[1].plain[slot] != NULL);
    } else if (what < 96) { /* a view of the target */
        if (w->n == MAX_HANDLES)
            return;
        for (int s = 0; s < 2; s++)
            assert_int_equal(coop_tensor_alias(w->s[s].r, w->s[s].h[target], &w->s[s].h[w->n]),
                             COOP_OK);
        w->live[w->n++] = true;
    } else { /* an in-place op on the target, reading k inputs */
        for (int s = 0; s < 2; s++) {
            side *sd = &w->s[s];
            coop_tensor *in[3];
            st[s] = pin_inputs(sd, idx, k, in);
            if (!st[s]) {
                st[s] = coop_tensor_mutate(sd->r, sd->h[target], cost, "inplace", in, k, NULL);
                unpin_inputs(sd, idx, k);
            }
        }
        assert_int_equal(st[0], st[1]);
    }
}

static void run_on(const shape *sh, coop_remat_policy policy, const char *name)
{
    world *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->shape = sh;
    /* each policy its own run: the program's seed plus the policy's number
     * (plus 16 on segments) */
    uint64_t add = (uint64_t)policy + (sh == &segments ? 16 : 0);
    uint64_t seed = test_seed("remat_cache_test", 0x9e3779b97f4a7c15ull) + add;
    printf("remat_cache_test %s%s: the seed + %d\n", name, sh == &segments ? " (segments)" : "",
           (int)add);
    w->rng = seed ? seed : 1;
    open_side(&w->s[0], sh, policy, true);
    open_side(&w->s[1], sh, policy, false);
    for (unsigned op = 0; op < sh->ops; op++) {
        step(w);
        check_same_decisions(w);
        check_costs(w);
        check_breakers(w);
        check_evictable_set(w);
    }
    coop_remat_stats x;
    coop_remat_get_stats(w->s[0].r, &x);
    printf("  %llu checks, %llu cache hits, %llu component labels read, %llu evictions, "
           "%llu recomputations, %llu breakers, %llu in the evictable set (summed over the "
           "checks), c_live above own %llu and below c_comp %llu\n",
           (unsigned long long)w->checks, (unsigned long long)w->hits,
           (unsigned long long)w->label_hits, (unsigned long long)x.evictions,
           (unsigned long long)x.recomputes, (unsigned long long)w->breakers,
           (unsigned long long)w->evictable, (unsigned long long)w->live_above_own,
           (unsigned long long)w->live_below_comp);
    /* the program exercised what the cache must survive */
    assert_true(x.evictions > 100);
    assert_true(x.recomputes > 20);
    assert_true(w->hits > w->checks / 4);
    assert_true(w->label_hits > 100); /* labels outlived operations and were checked */
    assert_true(w->live_above_own > 100 && w->live_below_comp > 100);
    assert_true(w->live_bound_exact > 100);
    bool argmin = !remat_policy_windowed(policy);
    assert_true(argmin ? w->evictable > sh->ops : w->breakers > sh->ops);
    coop_stats ps;
    coop_get_stats(w->s[0].pool, &ps);
    printf("  %lld segments at most, %llu tensors larger than a segment placed\n",
           (long long)ps.segment.peak, (unsigned long long)w->over_segment);
    if (sh == &segments) /* several segments, and tensors no window could hold */
        assert_true(ps.segment.peak >= 4 && w->over_segment >= 3);
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < MAX_PLAIN; i++)
            coop_free(w->s[s].pool, w->s[s].plain[i]);
        coop_remat_destroy(w->s[s].r);
        coop_pool_destroy(w->s[s].pool);
    }
    free(w);
}

typedef struct run_case {
    coop_remat_policy policy;
    const char *name;
    const shape *shape;
} run_case;

static void run_case_test(void **state)
{
    const run_case *c = *state;
    run_on(c->shape, c->policy, c->name);
}

int main(void)
{
    static const run_case cases[] = {
        {COOP_REMAT_COOP, "coop", &one_segment},
        {COOP_REMAT_COOP_EQ, "coop-eq", &one_segment},
        {COOP_REMAT_COOP_COMP, "coop-comp", &one_segment},
        {COOP_REMAT_DTR, "dtr", &one_segment},
        {COOP_REMAT_DTE, "dte", &one_segment},
        {COOP_REMAT_COOP, "coop", &segments},
        {COOP_REMAT_COOP_EQ, "coop-eq", &segments},
        {COOP_REMAT_COOP_COMP, "coop-comp", &segments},
        {COOP_REMAT_DTR, "dtr", &segments},
        {COOP_REMAT_DTE, "dte", &segments},
    };
    struct CMUnitTest tests[sizeof cases / sizeof cases[0]];
    static char names[sizeof cases / sizeof cases[0]][32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(names[i], sizeof names[i], "%s_%s", cases[i].name,
                 cases[i].shape == &segments ? "segments" : "one_segment");
        tests[i] = (struct CMUnitTest){names[i], run_case_test, NULL, NULL, (void *)&cases[i]};
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
