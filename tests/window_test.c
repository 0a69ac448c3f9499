/*
 * Window search on hand-built arenas: a pool with one 64 KiB segment whose
 * blocks are allocated in address order, given owners with known costs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include <cmocka.h>

#include "pool_internal.h"
#include "remat/window.h"
#include "test_seed.h"

#define UNIT 4096u /* every test block is 4 KiB */

typedef struct owner {
    double cost; /* WINDOW_BLOCKED for pinned */
} owner;

static double owner_cost(void *o, const arena_block *b, void *ctx)
{
    (void)b;
    (*(int *)ctx)++;
    return ((owner *)o)->cost;
}

typedef struct fixture {
    coop_pool *pool;
    void *ptr[16];
    owner owners[16];
    int n;
} fixture;

/* Allocates one block per cost (in address order), units[i] UNITs each
 * (NULL: one); cost < -1.5 makes the block free afterwards. */
static void build_sized(fixture *f, const double *costs, const int *units, int n)
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = false;
    c.page_size = 4096;
    c.capacity = 16 * UNIT;
    c.segment_size = 16 * UNIT;
    assert_int_equal(coop_pool_create(&c, &f->pool), COOP_OK);
    f->n = n;
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        size_t u = units ? (size_t)units[i] : 1;
        f->ptr[i] = coop_malloc(f->pool, u * UNIT, 0, COOP_ALLOC_LOW, NULL);
        assert_non_null(f->ptr[i]);
        if (i)
            assert_int_equal((uintptr_t)f->ptr[i], (uintptr_t)f->ptr[0] + used * UNIT);
        used += u;
    }
    /* the rest of the segment: one block that breaks windows (no owner) */
    assert_non_null(coop_malloc(f->pool, (16 - used) * UNIT, 0, COOP_ALLOC_LOW, NULL));
    for (int i = 0; i < n; i++) {
        if (costs[i] < -1.5) {
            assert_int_equal(coop_free(f->pool, f->ptr[i]), COOP_OK);
            continue;
        }
        f->owners[i].cost = costs[i];
        pool_lock(f->pool);
        arena_lookup(pool_arena(f->pool), (uintptr_t)f->ptr[i])->owner = &f->owners[i];
        pool_unlock(f->pool);
    }
}

static void build(fixture *f, const double *costs, int n)
{
    build_sized(f, costs, NULL, n);
}

/* One search over the fixture's arena, with a lower bound (NULL: none). */
static int search_bounded(fixture *f, uint64_t size, window_objective obj, window_bound_fn bound,
                          window *w, int *evals)
{
    window_scratch scratch = {0};
    *evals = 0;
    pool_lock(f->pool);
    int r = window_search(pool_arena(f->pool), size, 0, obj, owner_cost, bound, evals, &scratch, w);
    pool_unlock(f->pool);
    window_scratch_free(&scratch);
    return r;
}

static int search(fixture *f, uint64_t size, window_objective obj, window *w, int *evals)
{
    return search_bounded(f, size, obj, NULL, w, evals);
}

#define FREE (-2.0)
#define PINNED WINDOW_BLOCKED

static void cheapest_window_is_chosen(void **state)
{
    (void)state;
    fixture f = {0};
    const double costs[] = {5, 1, 1, 5, 0.5, 9};
    build(&f, costs, 6);
    window w;
    int evals;
    assert_int_equal(search(&f, 2 * UNIT, WINDOW_SUM, &w, &evals), 0);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[1]); /* blocks 1 and 2: cost 2 */
    assert_int_equal(w.size, 2 * UNIT);
    assert_true(w.cost == 2.0);
    assert_int_equal(evals, 6); /* one pass: each block's cost evaluated once */
    coop_pool_destroy(f.pool);
}

static void pinned_block_breaks_the_window(void **state)
{
    (void)state;
    fixture f = {0};
    /* blocks 0 and 2 would be cheapest, but the pinned block 1 separates them */
    const double costs[] = {1, PINNED, 1, 10, 8};
    build(&f, costs, 5);
    window w;
    int evals;
    assert_int_equal(search(&f, 2 * UNIT, WINDOW_SUM, &w, &evals), 0);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[2]);
    assert_true(w.cost == 11.0);
    /* a request no unbroken run covers */
    const double blocked[] = {1, PINNED, 1, PINNED, 1};
    fixture g = {0};
    build(&g, blocked, 5);
    assert_int_equal(search(&g, 2 * UNIT, WINDOW_SUM, &w, &evals), -1);
    coop_pool_destroy(f.pool);
    coop_pool_destroy(g.pool);
}

static void free_blocks_cost_nothing_and_the_window_covers(void **state)
{
    (void)state;
    fixture f = {0};
    /* [3][free][3][1][1]: 3 + free covers 2 units for 3, as do [1][1] for 2 */
    const double costs[] = {3, FREE, 3, 1, 1};
    build(&f, costs, 5);
    window w;
    int evals;
    assert_int_equal(search(&f, 2 * UNIT, WINDOW_SUM, &w, &evals), 0);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[3]);
    assert_true(w.cost == 2.0);
    /* 3 units: [3][free][3] costs 6, [free][3][1] costs 4, [3][1][1] costs 5 */
    assert_int_equal(search(&f, 3 * UNIT, WINDOW_SUM, &w, &evals), 0);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[1]);
    assert_true(w.size >= 3 * UNIT);
    assert_true(w.cost == 4.0);
    /* a request smaller than a block still takes whole blocks */
    assert_int_equal(search(&f, 512, WINDOW_SUM, &w, &evals), 0);
    assert_true(w.cost == 0.0); /* the free block itself */
    coop_pool_destroy(f.pool);
}

/* [1 (1 unit)][1 (1 unit)][2.5 (3 units)], request 2 units: the sum
 * prefers the two small blocks (2 < 2.5), cost per byte the large one
 * (2.5 / 3 < 2 / 2). */
static void per_byte_prefers_what_frees_more_per_cost(void **state)
{
    (void)state;
    fixture f = {0};
    const double costs[] = {1, 1, 2.5};
    const int units[] = {1, 1, 3};
    build_sized(&f, costs, units, 3);
    window w;
    int evals;
    assert_int_equal(search(&f, 2 * UNIT, WINDOW_SUM, &w, &evals), 0);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[0]);
    assert_true(w.cost == 2.0);
    assert_int_equal(search(&f, 2 * UNIT, WINDOW_PER_BYTE, &w, &evals), 0);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[2]);
    assert_int_equal(w.size, 3 * UNIT);
    coop_pool_destroy(f.pool);
}

/* A lower bound (here: half the cost) prunes exact evaluations without
 * changing the answer. */
static int bound_calls;
static double half_cost(void *o, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    (void)ctx;
    (void)exact;
    bound_calls++;
    double c = ((owner *)o)->cost;
    return c < 0 ? c : c / 2;
}

static void bounds_prune_without_changing_the_window(void **state)
{
    (void)state;
    fixture f = {0};
    const double costs[] = {1, 1, 50, 60, 70, 80, 90, 100};
    build(&f, costs, 8);
    for (int obj = WINDOW_SUM; obj <= WINDOW_PER_BYTE; obj++) {
        window w, wb;
        int evals, evals_b = 0;
        assert_int_equal(search(&f, 2 * UNIT, (window_objective)obj, &w, &evals), 0);
        bound_calls = 0;
        assert_int_equal(
            search_bounded(&f, 2 * UNIT, (window_objective)obj, half_cost, &wb, &evals_b), 0);
        assert_int_equal(wb.addr, w.addr);
        assert_true(wb.cost == w.cost);
        assert_int_equal(bound_calls, 8);
        assert_int_equal(evals, 8);
        assert_true(evals_b < evals); /* later windows' bounds (>= 55) lose to 2 */
        assert_int_equal(evals_b, 2);
    }
    coop_pool_destroy(f.pool);
}

/* A bound that knows some costs exactly (a cache): those blocks are never
 * evaluated, the others only where their window can still win. */
static double exact_when_dear(void *o, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    (void)ctx;
    double c = ((owner *)o)->cost;
    if (c >= 50 || c < 0) {
        *exact = c >= 0;
        return c;
    }
    return c / 2;
}

static void exact_bounds_are_not_evaluated(void **state)
{
    (void)state;
    fixture f = {0};
    const double costs[] = {80, 1, 1, 50, 60, 3, 70, 90};
    build(&f, costs, 8);
    for (int obj = WINDOW_SUM; obj <= WINDOW_PER_BYTE; obj++) {
        window w, wb;
        int evals, evals_b = 0;
        assert_int_equal(search(&f, 2 * UNIT, (window_objective)obj, &w, &evals), 0);
        assert_int_equal(
            search_bounded(&f, 2 * UNIT, (window_objective)obj, exact_when_dear, &wb, &evals_b), 0);
        assert_int_equal(wb.addr, w.addr);
        assert_int_equal(wb.size, w.size);
        assert_true(wb.cost == w.cost);
        assert_int_equal(wb.cost, 2); /* the two 1s */
        /* only the two 1s are evaluated: the dear blocks' bounds are exact,
         * and the 3's windows (bounds 61.5 and 71.5) cannot reach 2 */
        assert_int_equal(evals_b, 2);
        assert_int_equal(wb.evals, 2);
    }
    coop_pool_destroy(f.pool);
}

/* A bound that knows nothing (0 for every evictable block), so every
 * window is costed exactly, one after the other, through the running sum. */
static double no_bound(void *o, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    (void)ctx;
    (void)exact;
    double c = ((owner *)o)->cost;
    return c < 0 ? c : 0;
}

/* The choosing pass keeps [head, tail)'s cost as a running sum, adding
 * blocks on the right and subtracting them on the left. After a cost of
 * 1e16 (whose rounding step is 2) came and went, a plain sum had lost the 5
 * added beside it: the next windows read 3 - 5 + 1 = -1 and 1 + 0.5 - 5 =
 * -3.5, both clamped to 0, and the tie went to the earlier window (cost 4)
 * instead of the cheapest (1.5). */
static void the_running_sum_survives_a_huge_cost(void **state)
{
    (void)state;
    fixture f = {0};
    const double costs[] = {1e16, 5, 3, 1, 0.5};
    build(&f, costs, 5);
    window w;
    int evals;
    assert_int_equal(search_bounded(&f, 2 * UNIT, WINDOW_SUM, no_bound, &w, &evals), 0);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[3]);
    assert_true(w.cost == 1.5);
    coop_pool_destroy(f.pool);
}

/* The pass's running sum of lower bounds drifts the same way, and there a
 * drift prunes: after 1e16 and 3 (1e16 + 3 rounds to 1e16 + 4), a plain sum
 * read S (2 units, cost 1.9) as 3 and B (4 units, cost 4) as 5.1. Per byte,
 * B then looked cheaper (1.275 against 1.5): costed first, its exact 1.0
 * per byte pruned S, whose bound 1.5 was above it, although S costs 0.95
 * per byte. */
static void the_bound_sum_survives_a_huge_cost(void **state)
{
    (void)state;
    fixture f = {0};
    const double costs[] = {1e16, 3, 1.9, 4.0};
    const int units[] = {1, 1, 2, 4};
    build_sized(&f, costs, units, 4);
    window w;
    int evals;
    assert_int_equal(search(&f, 2 * UNIT, WINDOW_PER_BYTE, &w, &evals), 0);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[2]);
    assert_int_equal(w.size, 2 * UNIT);
    assert_true(w.cost == 1.9);
    coop_pool_destroy(f.pool);
}

/* A cost computed as a walk of one step per unit (a c_live walk through
 * evicted tensors of cost 1), stopping once past limit: the steps taken
 * are counted in *ctx. */
static double walked_cost(void *o, const arena_block *b, void *ctx, double limit, bool *complete)
{
    (void)b;
    double c = ((owner *)o)->cost, sum = 0;
    if (c < 0)
        return c;
    while (sum < c) {
        (*(int *)ctx)++;
        sum = sum + 1 > c ? c : sum + 1;
        if (sum > limit) {
            *complete = sum == c;
            return sum;
        }
    }
    return sum;
}

/* The same walk in full, as window_search_indexed's cost. */
static double owner_cost_walked(void *o, const arena_block *b, void *ctx)
{
    bool complete = true;
    return walked_cost(o, b, ctx, INFINITY, &complete);
}

/* One step of the walk: at most the cost, the cost itself for 0 or 1. */
static double one_step(void *o, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    (void)ctx;
    double c = ((owner *)o)->cost;
    if (c < 0)
        return c;
    *exact = c <= 1;
    return c < 1 ? c : 1;
}

/* A far looser bound: a 64th of a step (exact for cost 0), so that
 * window_search_lazy's first rounds reach little and cut most walks. */
static double eighth_step(void *o, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    (void)ctx;
    double c = ((owner *)o)->cost;
    if (c < 0)
        return c;
    *exact = c == 0;
    return c < 0.015625 ? c : 0.015625;
}

/* window_search_lazy: the same window as evaluating every block in full,
 * but the dear block's walk stops soon after its window is out of reach
 * (the one-step bounds cannot tell the blocks apart, so the plain search
 * walks all of it). */
static void lazy_search_cuts_a_dear_walk(void **state)
{
    (void)state;
    fixture f = {0};
    const double costs[] = {3, 1000, 2, 5, FREE, 4};
    build(&f, costs, 6);
    for (int obj = WINDOW_SUM; obj <= WINDOW_PER_BYTE; obj++) {
        window_scratch scratch = {0};
        window plain, lazy;
        int steps_plain = 0, steps_lazy = 0;
        pool_lock(f.pool);
        const arena *a = pool_arena(f.pool);
        for (uint64_t size = UNIT; size <= 2 * UNIT; size += UNIT) {
            steps_plain = steps_lazy = 0;
            assert_int_equal(window_search_indexed(a, size, 0, (window_objective)obj,
                                                   owner_cost_walked, one_step, &steps_plain, NULL,
                                                   &scratch, &plain),
                             0);
            assert_int_equal(window_search_lazy(a, size, 0, (window_objective)obj, walked_cost,
                                                one_step, &steps_lazy, NULL, &scratch, &lazy),
                             0);
            assert_int_equal(lazy.addr, plain.addr);
            assert_int_equal(lazy.size, plain.size);
            assert_true(lazy.cost == plain.cost);
            /* one unit: the free block; two: it and the block after it
             * (0 + 4, against 5 + 0, 2 + 5, 1000 + 2 and 3 + 1000) */
            assert_int_equal(lazy.addr, (uintptr_t)f.ptr[4]);
            assert_true(lazy.cost == (size == UNIT ? 0 : 4));
            if (size == UNIT)
                continue; /* only zero bounds can reach 0: nothing dear walked */
            assert_true(steps_plain >= 1000); /* the dear block walked in full */
            assert_true(steps_lazy < 100);
        }
        pool_unlock(f.pool);
        window_scratch_free(&scratch);
    }
    coop_pool_destroy(f.pool);
}

/* A cost that, past limit, stops at once and reports the whole cost as
 * the value reached (allowed: above limit, at most the cost), the way a
 * c_live walk that meets one dear evicted tensor jumps far past it. */
static double jump_cost(void *o, const arena_block *b, void *ctx, double limit, bool *complete)
{
    (void)b;
    (void)ctx;
    double c = ((owner *)o)->cost;
    if (c > limit)
        *complete = false;
    return c;
}

/* 0 for costs up to 1, else a twentieth (never exact). */
static double flat_bound(void *o, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    (void)ctx;
    (void)exact;
    double c = ((owner *)o)->cost;
    return c < 0 ? c : c <= 1 ? 0 : 0.05;
}

/* The lazy pass's sum of the holes' bounds drifts like the running sums
 * above: the seed (0.9 + 0.9) sets the limit 1.8; 5 and then the dear
 * 2^53 + ... are cut (their bounds raised to the costs), 0.5 too in the next
 * window; once 5 and the dear one have left, a plain sum read the holes as
 * 2 (5 + B rounds up twice) instead of 0.5, so [0.5, 1.25] (1.75, the
 * cheapest) looked past the limit and was skipped for the seed. */
static void the_hole_sum_survives_a_huge_cost(void **state)
{
    (void)state;
    fixture f = {0};
    const double costs[] = {5, 1e16 + 2, 0.5, 1.25, 7, 7, 0.9, 0.9};
    build(&f, costs, 8);
    window_scratch scratch = {0};
    window w;
    int evals = 0;
    pool_lock(f.pool);
    assert_int_equal(window_search_indexed(pool_arena(f.pool), 2 * UNIT, 0, WINDOW_SUM, owner_cost,
                                           flat_bound, &evals, NULL, &scratch, &w),
                     0);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[2]); /* the plain search's, as a check */
    assert_int_equal(window_search_lazy(pool_arena(f.pool), 2 * UNIT, 0, WINDOW_SUM, jump_cost,
                                        flat_bound, &evals, NULL, &scratch, &w),
                     0);
    pool_unlock(f.pool);
    window_scratch_free(&scratch);
    assert_int_equal(w.addr, (uintptr_t)f.ptr[2]);
    assert_true(w.cost == 1.75);
    coop_pool_destroy(f.pool);
}

/* A bound above the cost for the block of cost 1 (inconsistent callbacks),
 * half the cost for the others. */
static double bound_above_one(void *o, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    (void)ctx;
    (void)exact;
    double c = ((owner *)o)->cost;
    return c < 0 ? c : c == 1 ? 2 : c / 2;
}

/* Callbacks that contradict each other (a bound above the cost): the lazy
 * search trusts the bound as the plain one does, so both take the same
 * window at the same cost (the block of cost 1 read as 2, under the 3 and
 * 4 beside it). */
static void lazy_search_trusts_a_bound_above_the_cost(void **state)
{
    (void)state;
    fixture f = {0};
    const double costs[] = {3, 1, 4};
    build(&f, costs, 3);
    window_scratch scratch = {0};
    window plain, lazy;
    int evals = 0;
    pool_lock(f.pool);
    const arena *a = pool_arena(f.pool);
    assert_int_equal(window_search_indexed(a, UNIT, 0, WINDOW_SUM, owner_cost, bound_above_one,
                                           &evals, NULL, &scratch, &plain),
                     0);
    assert_int_equal(window_search_lazy(a, UNIT, 0, WINDOW_SUM, jump_cost, bound_above_one, &evals,
                                        NULL, &scratch, &lazy),
                     0);
    pool_unlock(f.pool);
    window_scratch_free(&scratch);
    assert_int_equal(plain.addr, (uintptr_t)f.ptr[1]);
    assert_true(plain.cost == 2);
    assert_int_equal(lazy.addr, plain.addr);
    assert_true(lazy.cost == plain.cost);
    coop_pool_destroy(f.pool);
}

/* Randomized: the search against every run of the arena (brute force).
 * Each trial tiles a 64-unit segment with blocks of 1-3 units, frees some
 * (neighbours coalesce), pins some, leaves some without an owner and gives
 * the rest integer costs (sums exact in a double, so equal windows tie
 * exactly), then asks for a random size. The search compares the minimal
 * covering runs of free and evictable blocks (for each last block, the
 * shortest run ending there that covers): WINDOW_SUM the smallest sum
 * (which is the smallest over every covering run), WINDOW_PER_BYTE the
 * smallest cost / bytes; lowest address on ties. The answer must not
 * change with a lower bound (half the cost, or the cost itself marked
 * exact) nor with the breakers indexed (window_search_indexed; a quarter
 * of them left out of the index, which may only cost time), nor when the
 * cost is a walk that stops early (window_search_lazy, with those bounds,
 * one step of the walk or a 64th of one). */
#define RANDOM_UNITS 64
#define RANDOM_TRIALS 3000

typedef struct random_arena {
    coop_pool *pool;
    owner owners[RANDOM_UNITS];
} random_arena;

static uint64_t window_rng;

static uint64_t below(uint64_t n)
{
    return test_xorshift64(&window_rng) % n;
}

static void random_arena_build(random_arena *r)
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = false;
    c.page_size = 4096;
    c.capacity = RANDOM_UNITS * UNIT;
    c.segment_size = RANDOM_UNITS * UNIT;
    assert_int_equal(coop_pool_create(&c, &r->pool), COOP_OK);
    void *ptr[RANDOM_UNITS];
    int n = 0;
    for (uint64_t used = 0; used < RANDOM_UNITS; n++) {
        uint64_t u = 1 + below(3);
        if (u > RANDOM_UNITS - used)
            u = RANDOM_UNITS - used;
        ptr[n] = coop_malloc(r->pool, u * UNIT, 0, COOP_ALLOC_LOW, NULL);
        assert_non_null(ptr[n]);
        used += u;
    }
    for (int i = 0; i < n; i++) {
        uint64_t kind = below(20);
        if (kind < 6) { /* free */
            assert_int_equal(coop_free(r->pool, ptr[i]), COOP_OK);
            continue;
        }
        if (kind == 6) /* allocated, no owner: breaks runs */
            continue;
        r->owners[i].cost = kind == 7 ? WINDOW_BLOCKED : (double)below(kind < 10 ? 2 : 21);
        pool_lock(r->pool);
        arena_lookup(pool_arena(r->pool), (uintptr_t)ptr[i])->owner = &r->owners[i];
        pool_unlock(r->pool);
    }
}

/* A block's cost as the search sees it: free 0, WINDOW_BLOCKED if it breaks. */
static double block_cost(const arena_block *b)
{
    if (b->state == COOP_BLOCK_FREE)
        return 0;
    if (b->state != COOP_BLOCK_ALLOCATED || !b->owner)
        return WINDOW_BLOCKED;
    return ((owner *)b->owner)->cost;
}

/* The brute force's answer over the minimal covering runs (those that no
 * longer cover without their first block): 0 and the best one's address
 * and key, or -1. *min_sum_any: the smallest sum over every covering run,
 * minimal or not (WINDOW_SUM's minimum must be the same). */
static int brute_force(const arena *a, uint64_t size, window_objective obj, uintptr_t *addr,
                       double *key, double *min_sum_any)
{
    int found = -1;
    for (const arena_block *i = arena_first_segment(a)->first; i; i = i->next) {
        double sum = 0;
        uint64_t bytes = 0;
        for (const arena_block *j = i; j; j = j->next) {
            double c = block_cost(j);
            if (c == WINDOW_BLOCKED)
                break;
            sum += c;
            bytes += j->size;
            if (bytes < size)
                continue;
            if (found < 0 || sum < *min_sum_any)
                *min_sum_any = sum;
            if (bytes - i->size >= size)
                continue; /* not minimal: [i->next .. j] covers too */
            double k = obj == WINDOW_SUM ? sum : sum / (double)bytes;
            if (found < 0 || k < *key) {
                *key = k;
                *addr = i->addr;
            }
            found = 0;
        }
    }
    return found;
}

static int random_bound_calls;
static double random_bound(void *o, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    (void)ctx;
    random_bound_calls++;
    double c = ((owner *)o)->cost;
    if (c == WINDOW_BLOCKED)
        return c;
    if (((uintptr_t)o / sizeof(owner)) % 2) { /* about half: the cost, known */
        *exact = true;
        return c;
    }
    return c / 2;
}

static void random_arenas_match_brute_force(void **state)
{
    (void)state;
    window_rng = test_seed("window_test", 0x57d1);
    int found_both = 0, none_both = 0;
    uint64_t skipped = 0;
    for (int trial = 0; trial < RANDOM_TRIALS; trial++) {
        random_arena r = {0};
        random_arena_build(&r);
        uint64_t size = (1 + below(RANDOM_UNITS * UNIT / 512 / 3)) * 512;
        for (int obj = WINDOW_SUM; obj <= WINDOW_PER_BYTE; obj++) {
            pool_lock(r.pool);
            const arena *a = pool_arena(r.pool);
            uintptr_t want_addr = 0;
            double want_key = 0, min_sum_any = 0;
            int want =
                brute_force(a, size, (window_objective)obj, &want_addr, &want_key, &min_sum_any);
            if (want == 0 && obj == WINDOW_SUM)
                assert_true(want_key == min_sum_any);
            /* the breakers, each indexed or (a quarter of them) not: a
             * breaker missing from the index may only cost time */
            breaker_index breakers = {0};
            for (arena_block *b = arena_first_segment(a)->first; b; b = b->next)
                if (block_cost(b) == WINDOW_BLOCKED && below(4))
                    assert_int_equal(breaker_index_add(&breakers, b), 0);
            for (int variant = 0; variant < 12; variant++) {
                int bounded = variant & 1, indexed = (variant >> 1) & 1, lazy = variant >> 2;
                window_bound_fn lazy_bound = lazy == 1 ? one_step : eighth_step;
                window_scratch scratch = {0};
                window w;
                int evals = 0;
                int got = lazy
                              ? window_search_lazy(a, size, 0, (window_objective)obj, walked_cost,
                                                   bounded ? random_bound : lazy_bound, &evals,
                                                   indexed ? &breakers : NULL, &scratch, &w)
                              : window_search_indexed(a, size, 0, (window_objective)obj, owner_cost,
                                                      bounded ? random_bound : NULL, &evals,
                                                      indexed ? &breakers : NULL, &scratch, &w);
                window_scratch_free(&scratch);
                if (got != want)
                    fail_msg("trial %d, objective %d, variant %d, size %ju: search %d, brute "
                             "force %d",
                             trial, obj, variant, (uintmax_t)size, got, want);
                if (got != 0)
                    continue;
                /* the window is a covering run of its own blocks, at its cost */
                double sum = 0;
                uint64_t bytes = 0;
                for (const arena_block *b = w.first;; b = b->next) {
                    assert_true(block_cost(b) != WINDOW_BLOCKED);
                    sum += block_cost(b);
                    bytes += b->size;
                    if (b == w.last)
                        break;
                }
                assert_int_equal(w.addr, w.first->addr);
                assert_int_equal(w.size, bytes);
                assert_true(bytes >= size);
                assert_true(w.cost == sum);
                double key = obj == WINDOW_SUM ? sum : sum / (double)bytes;
                if (key != want_key || w.addr != want_addr)
                    fail_msg("trial %d, objective %d, variant %d, size %ju: search %#jx key "
                             "%g, brute force %#jx key %g",
                             trial, obj, variant, (uintmax_t)size, (uintmax_t)w.addr, key,
                             (uintmax_t)want_addr, want_key);
                skipped += w.runs_skipped;
            }
            breaker_index_free(&breakers);
            pool_unlock(r.pool);
            found_both += want == 0;
            none_both += want != 0;
        }
        coop_pool_destroy(r.pool);
    }
    /* both outcomes and the bound path were exercised */
    assert_true(found_both > RANDOM_TRIALS / 2);
    assert_true(none_both > 0);
    assert_true(random_bound_calls > 0);
    assert_true(skipped > 0); /* the index did skip runs */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cheapest_window_is_chosen),
        cmocka_unit_test(pinned_block_breaks_the_window),
        cmocka_unit_test(free_blocks_cost_nothing_and_the_window_covers),
        cmocka_unit_test(per_byte_prefers_what_frees_more_per_cost),
        cmocka_unit_test(bounds_prune_without_changing_the_window),
        cmocka_unit_test(exact_bounds_are_not_evaluated),
        cmocka_unit_test(the_running_sum_survives_a_huge_cost),
        cmocka_unit_test(the_bound_sum_survives_a_huge_cost),
        cmocka_unit_test(lazy_search_cuts_a_dear_walk),
        cmocka_unit_test(the_hole_sum_survives_a_huge_cost),
        cmocka_unit_test(lazy_search_trusts_a_bound_above_the_cost),
        cmocka_unit_test(random_arenas_match_brute_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
