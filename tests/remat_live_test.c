/*
 * COOP_REMAT_COOP's window cost, c_live (src/remat/remat_live.c):
 * own cost + evicted ancestors reached through evicted tensors + evicted
 * descendants reached through evicted tensors that are still held (a
 * tensor on their storage not released), against COOP_REMAT_COOP_COMP's c_comp
 * (every evicted tensor connected through evicted tensors). One small
 * host-backend pool of nine one-block tensors, every layout the tests rely
 * on asserted:
 *
 *     M (resident, not evictable) -> G -> P -> Y -> R -> H
 *     M -> X -> D
 *     Z
 *
 * G, R and D released (evicted at once), P and H held and evicted by
 * requests, costs G 50, P 5, Y 10, R 7, H 100, X 10, D 1000, Z 130:
 *
 *     c_live(X) = 10          (D released: not counted)   c_comp(X) = 1010
 *     c_live(Y) = 10 + 5 + 50 (P, and G through P)
 *                 + 100       (H held, reached through the released R,
 *                              which is not counted)       c_comp(Y) = 172
 *     c_live(Z) = c_comp(Z) = 130
 *
 * With X, Y and Z the only evictable blocks (equal bytes, staleness and
 * history), two one-block requests evict by the policy's cost: coop-comp Z
 * then Y, coop X then Z. Counting D would make coop evict Z first;
 * not counting G, or H, or not walking through R, would make it evict Y
 * second.
 */
#include <math.h>
#include <string.h>

#include "remat/remat_internal.h"
#include "remat_block_fixture.h"

static coop_tensor *make(coop_remat *r, uint64_t cost, coop_tensor *input, unsigned flags)
{
    coop_tensor *t;
    assert_int_equal(
        coop_tensor_create(r, U, cost, "op", input ? &input : NULL, input ? 1 : 0, flags, &t),
        COOP_OK);
    return t;
}

typedef struct graph {
    coop_pool *pool;
    coop_remat *r;
    coop_tensor *m, *g, *p, *y, *rr, *h, *x, *d, *z;
} graph;

/* The graph above, nine blocks full: X, Y and Z resident, evictable,
 * unpinned and equally stale, every other block not evictable. */
static void build(graph *gr, coop_remat_policy policy)
{
    gr->pool = pool_of(9);
    coop_remat *r = gr->r = context(gr->pool, policy);
    gr->m = make(r, 1, NULL, 0);
    gr->g = make(r, 50, gr->m, EV);
    gr->p = make(r, 5, gr->g, EV);
    gr->y = make(r, 10, gr->p, EV);
    gr->rr = make(r, 7, gr->y, EV);
    gr->h = make(r, 100, gr->rr, EV);
    gr->x = make(r, 10, gr->m, EV);
    gr->d = make(r, 1000, gr->x, EV);
    gr->z = make(r, 130, NULL, EV);
    /* released: evicted at once, their blocks freed */
    assert_int_equal(coop_tensor_release(r, gr->g), COOP_OK);
    assert_int_equal(coop_tensor_release(r, gr->rr), COOP_OK);
    assert_int_equal(coop_tensor_release(r, gr->d), COOP_OK);
    assert_false(coop_tensor_resident(gr->g) || coop_tensor_resident(gr->rr) ||
                 coop_tensor_resident(gr->d));
    /* X, Y, Z pinned: fill the freed blocks, then two requests evict the
     * only evictable tensors left, P and H (held) */
    coop_tensor *cand[3] = {gr->x, gr->y, gr->z};
    for (int i = 0; i < 3; i++)
        assert_int_equal(coop_tensor_pin(r, cand[i], NULL), COOP_OK);
    for (int i = 0; i < 3; i++)
        make(r, 1, NULL, 0);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.searches, 0);
    make(r, 1, NULL, 0);
    make(r, 1, NULL, 0);
    assert_false(coop_tensor_resident(gr->p) || coop_tensor_resident(gr->h));
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 2);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(coop_tensor_unpin(r, cand[i]), COOP_OK);
        assert_int_equal(coop_tensor_access(r, cand[i], NULL), COOP_OK); /* same staleness */
        assert_true(coop_tensor_resident(cand[i]));
        assert_int_equal(coop_tensor_recomputes(cand[i]), 0);
    }
}

static void destroy(graph *gr)
{
    assert_int_equal(coop_pool_check(gr->pool), COOP_OK);
    coop_remat_destroy(gr->r);
    coop_pool_destroy(gr->pool);
}

/* The three costs as the header defines them, whatever the policy. */
static void c_live_counts_what_recomputation_needs(void **state)
{
    (void)state;
    graph gr;
    build(&gr, COOP_REMAT_COOP);
    assert_int_equal(remat_live_compute(gr.r, gr.x), 10);
    assert_int_equal(remat_component_compute(gr.r, gr.x), 10 + 1000);
    assert_int_equal(remat_live_compute(gr.r, gr.y), 10 + 5 + 50 + 100);
    assert_int_equal(remat_component_compute(gr.r, gr.y), 10 + 5 + 50 + 7 + 100);
    assert_int_equal(remat_live_compute(gr.r, gr.z), 130);
    assert_int_equal(remat_component_compute(gr.r, gr.z), 130);
    /* an evicted tensor's c_live: P's recomputation needs G; its
     * descendants count only through evicted tensors, and Y is resident:
     * neither R nor H counts for P */
    assert_int_equal(remat_live_compute(gr.r, gr.p), 5 + 50);
    /* the window's bound, from neighbours alone: evicted inputs and held
     * evicted children; exact only without an evicted neighbour */
    bool exact = true;
    assert_int_equal(remat_live_bound(gr.r, gr.x, &exact), 10); /* D released */
    assert_false(exact);
    assert_int_equal(remat_live_bound(gr.r, gr.y, &exact), 10 + 5); /* P, not G; R released */
    assert_false(exact);
    assert_int_equal(remat_live_bound(gr.r, gr.z, &exact), 130);
    assert_true(exact);
    assert_int_equal(remat_live_bound(gr.r, gr.rr, &exact), 7 + 100); /* Y resident, H held */
    assert_false(exact);
    destroy(&gr);
}

/* c_live as far as a window search needs it (remat_live_compute_upto):
 * Y's walks are 10 (own), + 5 (P) + 50 (G) backward, + 100 (H) forward.
 * Whole when c_live x weight is at most the limit, equal included; else
 * cut as soon as the running value x weight passes it (never before), the
 * forward walk not started after a cut backward one. */
static void c_live_upto_stops_once_past_the_limit(void **state)
{
    (void)state;
    graph gr;
    build(&gr, COOP_REMAT_COOP);
    bool complete = false;
    assert_int_equal(remat_live_compute_upto(gr.r, gr.y, 1, INFINITY, &complete), 165);
    assert_true(complete);
    complete = false;
    assert_int_equal(remat_live_compute_upto(gr.r, gr.y, 1, 165, &complete), 165);
    assert_true(complete);
    assert_int_equal(remat_live_compute_upto(gr.r, gr.y, 1, 164, &complete), 165);
    assert_false(complete);
    complete = true;
    assert_int_equal(remat_live_compute_upto(gr.r, gr.y, 1, 64, &complete), 65); /* at G */
    assert_false(complete);
    complete = true;
    /* own cost exactly the limit: the walk starts, and stops at P */
    assert_int_equal(remat_live_compute_upto(gr.r, gr.y, 1, 10, &complete), 15);
    assert_false(complete);
    complete = true;
    assert_int_equal(remat_live_compute_upto(gr.r, gr.y, 1, 9, &complete), 10); /* own cost */
    assert_false(complete);
    /* the weight scales the value compared: 65 x 2 passes 100 at G, 15 x 2
     * does not at P */
    complete = true;
    assert_int_equal(remat_live_compute_upto(gr.r, gr.y, 2, 100, &complete), 65);
    assert_false(complete);
    complete = false;
    assert_int_equal(remat_live_compute_upto(gr.r, gr.y, 0.5, 82.5, &complete), 165);
    assert_true(complete);
    destroy(&gr);
}

/* "Held" is any unreleased tensor on the storage: a view keeps H counted
 * after its base is released; releasing the view too drops it. */
static void a_view_keeps_a_descendant_held(void **state)
{
    (void)state;
    graph gr;
    build(&gr, COOP_REMAT_COOP);
    coop_tensor *v;
    assert_int_equal(coop_tensor_alias(gr.r, gr.h, &v), COOP_OK);
    assert_int_equal(coop_tensor_release(gr.r, gr.h), COOP_OK);
    assert_int_equal(remat_live_compute(gr.r, gr.y), 10 + 5 + 50 + 100);
    assert_int_equal(coop_tensor_release(gr.r, v), COOP_OK);
    assert_int_equal(remat_live_compute(gr.r, gr.y), 10 + 5 + 50);
    assert_int_equal(remat_component_compute(gr.r, gr.y), 10 + 5 + 50 + 7 + 100);
    destroy(&gr);
}

typedef struct window_case {
    coop_remat_policy policy;
    int first, second; /* 0 X, 1 Y, 2 Z: evicted by the first and second request */
} window_case;

static void the_window_follows_the_policy_s_cost(void **state)
{
    const window_case *c = *state;
    graph gr;
    build(&gr, c->policy);
    coop_tensor *cand[3] = {gr.x, gr.y, gr.z};
    coop_remat_stats before, after;
    for (int req = 0; req < 2; req++) {
        coop_remat_get_stats(gr.r, &before);
        make(gr.r, 1, NULL, 0);
        coop_remat_get_stats(gr.r, &after);
        assert_int_equal(after.searches, before.searches + 1);
        assert_int_equal(after.evictions, before.evictions + 1);
        int gone = req ? c->second : c->first;
        for (int i = 0; i < 3; i++) {
            bool evicted = i == c->first || (req && i == c->second);
            if (coop_tensor_resident(cand[i]) == evicted)
                fail_msg("request %d: candidate %d %s, expected %s (evicted: %d)", req, i,
                         evicted ? "resident" : "evicted", evicted ? "evicted" : "resident", gone);
        }
    }
    destroy(&gr);
}

/* The enum's last member is accepted; one past it is refused. */
static void the_policy_is_known(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(2);
    coop_remat *r = context(pool, COOP_REMAT_COOP_COMP);
    assert_non_null(r->breakers); /* a window policy: the breaker index kept */
    coop_remat_destroy(r);
    coop_remat_config cfg = {.policy = (coop_remat_policy)(COOP_REMAT_COOP_COMP + 1),
                             .recompute = recompute};
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_ERR_INVALID);
    assert_null(r);
    coop_pool_destroy(pool);
}

int main(void)
{
    static const window_case comp = {COOP_REMAT_COOP_COMP, 2, 1};
    static const window_case live = {COOP_REMAT_COOP, 0, 2};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(c_live_counts_what_recomputation_needs),
        cmocka_unit_test(c_live_upto_stops_once_past_the_limit),
        cmocka_unit_test(a_view_keeps_a_descendant_held),
        cmocka_unit_test_prestate(the_window_follows_the_policy_s_cost, (void *)&comp),
        cmocka_unit_test_prestate(the_window_follows_the_policy_s_cost, (void *)&live),
        cmocka_unit_test(the_policy_is_known),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
