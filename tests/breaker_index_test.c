/*
 * The breaker index (maximal runs of window-breaking blocks) on random
 * arenas: after every random allocation, free, pin and unpin, the index's
 * runs are exactly the maximal runs of pinned blocks, and the indexed window
 * search returns the same window as the plain walk over every block, for
 * both objectives, with and without lower bounds, for random request sizes,
 * while visiting no more blocks; and with bounds (best bound first, some of
 * them exact) the window of the exhaustive search that evaluates every exact
 * cost. COOP_TEST_SEED sets the seed (printed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "pool_internal.h"
#include "remat/breaker_index.h"
#include "remat/window.h"
#include "test_seed.h"

#define SEG_BYTES (256u * 1024u)
#define MAX_LIVE 96

typedef struct owner {
    void *ptr;
    double cost;
    int pinned;
    int exact_bound; /* owner_bound returns the cost itself */
} owner;

static uint64_t rng_state;

static uint64_t rng(void)
{
    return test_xorshift64(&rng_state);
}

static double owner_cost(void *o, const arena_block *b, void *ctx)
{
    (void)b;
    (void)ctx;
    const owner *w = o;
    return w->pinned ? WINDOW_BLOCKED : w->cost;
}

/* Half the cost, or the cost itself (exact, as a cache would know it) for
 * the owners marked so (a third of them). */
static double owner_bound(void *o, const arena_block *b, void *ctx, bool *exact)
{
    double c = owner_cost(o, b, ctx);
    if (c >= 0 && ((const owner *)o)->exact_bound) {
        *exact = true;
        return c;
    }
    return c < 0 ? c : c * 0.5;
}

/* The index's runs against the arena: runs in address order, each a maximal
 * run of pinned blocks, and every pinned block in one. */
static void check_runs(arena *a, const breaker_index *x)
{
    size_t r = 0, pinned = 0;
    for (arena_segment *seg = arena_first_segment(a); seg; seg = seg->next) {
        for (arena_block *b = seg->first; b; b = b->next) {
            int is_pinned = b->state == COOP_BLOCK_ALLOCATED && ((owner *)b->owner)->pinned;
            if (!is_pinned)
                continue;
            pinned++;
            if (!b->prev || b->prev->state != COOP_BLOCK_ALLOCATED ||
                !((owner *)b->prev->owner)->pinned) { /* a run starts here */
                assert_true(r < x->len);
                assert_ptr_equal(x->runs[r].first, b);
                assert_int_equal(x->runs[r].start, b->addr);
                arena_block *e = b;
                while (e->next && e->next->state == COOP_BLOCK_ALLOCATED &&
                       ((owner *)e->next->owner)->pinned)
                    e = e->next;
                assert_ptr_equal(x->runs[r].last, e);
                assert_int_equal(x->runs[r].end, e->addr + e->size);
                r++;
            }
        }
    }
    assert_int_equal(r, x->len);
    assert_int_equal(pinned, x->blocks);
}

static void compare_searches(arena *a, const breaker_index *x, uint64_t size)
{
    window_scratch scratch = {0};
    for (int obj = WINDOW_SUM; obj <= WINDOW_PER_BYTE; obj++) {
        window exhaustive = {0}; /* without bound: every exact cost evaluated */
        for (int with_bound = 0; with_bound < 2; with_bound++) {
            window_bound_fn bound = with_bound ? owner_bound : NULL;
            window plain, fast;
            int rp = window_search(a, size, 0, (window_objective)obj, owner_cost, bound, NULL,
                                   &scratch, &plain);
            int rf = window_search_indexed(a, size, 0, (window_objective)obj, owner_cost, bound,
                                           NULL, x, &scratch, &fast);
            assert_int_equal(rp, rf);
            assert_true(fast.blocks_visited <= plain.blocks_visited);
            if (rp)
                continue;
            assert_ptr_equal(plain.first, fast.first);
            assert_ptr_equal(plain.last, fast.last);
            assert_int_equal(plain.size, fast.size);
            assert_true(plain.cost == fast.cost);
            if (!with_bound) {
                exhaustive = plain;
                continue;
            }
            /* bounds and best-first evaluation choose the exhaustive window */
            assert_ptr_equal(fast.first, exhaustive.first);
            assert_ptr_equal(fast.last, exhaustive.last);
            assert_true(fast.cost == exhaustive.cost);
            assert_true(fast.evals <= exhaustive.evals);
        }
    }
    window_scratch_free(&scratch);
}

/* A pool of one fixed SEG_BYTES segment (no VMM: blocks never move),
 * returned locked so tests can call the arena's internal hooks. */
static coop_pool *locked_segment_pool(void)
{
    coop_config c;
    coop_config_default(&c);
    c.backend = COOP_BACKEND_HOST;
    c.use_vmm = false;
    c.page_size = 4096;
    c.capacity = SEG_BYTES;
    c.segment_size = SEG_BYTES;
    c.min_split = COOP_ALIGN;
    coop_pool *pool;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    pool_lock(pool);
    return pool;
}

static void random_arenas_give_the_plain_walks_windows(void **state)
{
    (void)state;
    uint64_t seed = test_seed("breaker_index_test", 7);
    for (int round = 0; round < 20; round++) {
        rng_state = seed * 0x9E3779B97F4A7C15ull + (uint64_t)round + 1;
        coop_pool *pool = locked_segment_pool();
        arena *a = pool_arena(pool);
        breaker_index x = {0};
        owner owners[MAX_LIVE] = {{0}};
        int live = 0;
        for (int step = 0; step < 400; step++) {
            unsigned op = (unsigned)(rng() % 8);
            if (op < 3 && live < MAX_LIVE) { /* allocate, pinned one time in three */
                uint64_t bytes = (1 + rng() % 16) * COOP_ALIGN - rng() % 2 * 100;
                coop_status st;
                void *p = pool_malloc_locked(pool, bytes, 0,
                                             rng() % 2 ? COOP_ALLOC_LOW : COOP_ALLOC_HIGH, &st);
                if (!p)
                    continue;
                owner *o = &owners[live++];
                double cost = (double)(rng() % 100);
                *o = (owner){p, cost, rng() % 3 == 0, (int)cost % 3 == 0};
                arena_block *b = arena_lookup(a, (uintptr_t)p);
                b->owner = o;
                if (o->pinned)
                    assert_int_equal(breaker_index_add(&x, b), 0);
            } else if (op < 5 && live) { /* free (unindexed first) */
                int i = (int)(rng() % (uint64_t)live);
                arena_block *b = arena_lookup(a, (uintptr_t)owners[i].ptr);
                if (owners[i].pinned)
                    assert_int_equal(breaker_index_remove(&x, b), 0);
                pool_free_locked(pool, owners[i].ptr, NULL);
                owners[i] = owners[--live];
                /* the moved owner's block points at its old slot */
                if (i < live)
                    arena_lookup(a, (uintptr_t)owners[i].ptr)->owner = &owners[i];
            } else if (live) { /* pin or unpin */
                int i = (int)(rng() % (uint64_t)live);
                arena_block *b = arena_lookup(a, (uintptr_t)owners[i].ptr);
                if (owners[i].pinned)
                    assert_int_equal(breaker_index_remove(&x, b), 0);
                owners[i].pinned = !owners[i].pinned;
                if (owners[i].pinned)
                    assert_int_equal(breaker_index_add(&x, b), 0);
            }
            check_runs(a, &x);
            compare_searches(a, &x, (1 + rng() % 48) * COOP_ALIGN);
        }
        breaker_index_free(&x);
        pool_unlock(pool);
        coop_pool_destroy(pool);
    }
}

/* A long run of pinned blocks is skipped without visiting its blocks. */
static void pinned_runs_are_not_visited(void **state)
{
    (void)state;
    coop_pool *pool = locked_segment_pool();
    arena *a = pool_arena(pool);
    breaker_index x = {0};
    owner owners[64];
    coop_status st;
    /* 60 pinned 1 KiB blocks, then 4 evictable ones, then the free rest */
    for (int i = 0; i < 64; i++) {
        owners[i] = (owner){pool_malloc_locked(pool, 1024, 0, COOP_ALLOC_LOW, &st), i, i < 60, 0};
        assert_non_null(owners[i].ptr);
        arena_block *b = arena_lookup(a, (uintptr_t)owners[i].ptr);
        b->owner = &owners[i];
        if (owners[i].pinned)
            assert_int_equal(breaker_index_add(&x, b), 0);
    }
    assert_int_equal(x.len, 1);
    assert_int_equal(x.blocks, 60);
    window_scratch scratch = {0};
    window plain, fast;
    assert_int_equal(
        window_search(a, 2048, 0, WINDOW_SUM, owner_cost, NULL, NULL, &scratch, &plain), 0);
    assert_int_equal(
        window_search_indexed(a, 2048, 0, WINDOW_SUM, owner_cost, NULL, NULL, &x, &scratch, &fast),
        0);
    assert_ptr_equal(plain.first, fast.first);
    assert_int_equal(plain.blocks_visited, 65);
    assert_int_equal(fast.blocks_visited, 5); /* the evictable blocks and the free rest */
    assert_int_equal(fast.runs_skipped, 1);
    /* unpinning one in the middle splits the run in two */
    arena_block *mid = arena_lookup(a, (uintptr_t)owners[30].ptr);
    assert_int_equal(breaker_index_remove(&x, mid), 0);
    owners[30].pinned = 0;
    assert_int_equal(x.len, 2);
    check_runs(a, &x);
    /* a request larger than the gap [block 30] skips it wholesale */
    assert_int_equal(
        window_search_indexed(a, 2048, 0, WINDOW_SUM, owner_cost, NULL, NULL, &x, &scratch, &fast),
        0);
    assert_int_equal(fast.blocks_visited, 5);
    window_scratch_free(&scratch);
    breaker_index_free(&x);
    pool_unlock(pool);
    coop_pool_destroy(pool);
}

/* Blocks adjacent in address but in two segments (the last of one, the
 * first of the next: no block links join them) stay two runs: a window may
 * not span a segment boundary, and the search visits each segment's gaps. */
static void runs_do_not_join_across_segments(void **state)
{
    (void)state;
    arena_block a = {0}, b = {0};
    a.addr = 0x10000;
    a.size = 4096;
    b.addr = 0x11000; /* a's end */
    b.size = 4096;
    breaker_index x = {0};
    assert_int_equal(breaker_index_add(&x, &a), 0);
    assert_int_equal(breaker_index_add(&x, &b), 0);
    assert_int_equal(x.len, 2);
    assert_int_equal(x.blocks, 2);
    assert_ptr_equal(x.runs[0].last, &a);
    assert_ptr_equal(x.runs[1].first, &b);
    breaker_index_free(&x);
    /* linked, they are one run */
    a.next = &b;
    b.prev = &a;
    assert_int_equal(breaker_index_add(&x, &a), 0);
    assert_int_equal(breaker_index_add(&x, &b), 0);
    assert_int_equal(x.len, 1);
    assert_int_equal(x.runs[0].end, 0x12000);
    breaker_index_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pinned_runs_are_not_visited),
        cmocka_unit_test(runs_do_not_join_across_segments),
        cmocka_unit_test(random_arenas_give_the_plain_walks_windows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
