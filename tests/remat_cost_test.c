/*
 * The remat API's window costs (src/remat/remat_cost.c, coop_cost.h):
 * COOP_REMAT_COOP_COMP (coop sim's coop-comp) costs a window member by c_comp x (1 + 0.1 x remats)
 * / staleness, COOP_REMAT_COOP_EQ by c_eq / staleness. Small host-backend pools laid out block by
 * block (every layout the tests rely on is asserted), with windows between unevictable blocks so
 * that a request has exactly two candidate windows of equal bytes and equal staleness: the tensor
 * each evicts is the one its policy costs lower.
 */
#include <string.h>

#include "remat/coop_cost.h"
#include "remat/remat_internal.h"
#include "remat_block_fixture.h"

static coop_tensor *make(coop_remat *r, unsigned units, uint64_t cost, coop_tensor *input,
                         unsigned flags)
{
    coop_tensor *t;
    assert_int_equal(coop_tensor_create(r, (size_t)units * U, cost, "op", input ? &input : NULL,
                                        input ? 1 : 0, flags, &t),
                     COOP_OK);
    return t;
}

/* t's block starts `unit` blocks after base */
static void assert_at(const coop_tensor *t, const char *base, unsigned unit)
{
    assert_true(coop_tensor_resident(t));
    assert_ptr_equal(coop_tensor_data(t), base + (size_t)unit * U);
}

/* Evicts m, the only evictable tensor in the run of blocks [first, first +
 * units) (the others free): a request of that many blocks, with pins
 * elsewhere, evicts it; the request is then released. */
static void evict_by_request(coop_remat *r, coop_tensor *m, unsigned units)
{
    coop_tensor *f = make(r, units, 1, NULL, 0);
    assert_false(coop_tensor_resident(m));
    assert_int_equal(coop_tensor_release(r, f), COOP_OK);
}

/*
 * M -> A -> X and M -> B, D -> Y. A, B, D released (evicted), M evicted by
 * a request: A, M, B form one class (cost 10 + 1 + 1000). M recomputed: it
 * leaves the class, which keeps A and B (1010) although nothing connects
 * them any more. Then
 *
 *   [M pinned][G1 G1][free][X][P][Y][free][G2 G2 G2 G2]
 *
 * and a request of two blocks has two windows, free + X and Y + free:
 * c_eq(X) = 10 + 1010 against c_eq(Y) = 10 + 100 (COOP_EQ evicts Y), but
 * c_comp(X) = 10 + 10 against c_comp(Y) = 10 + 100 (COOP evicts X).
 */
static void a_cut_class_window_follows_c_comp(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(12);
    coop_remat *r = context(pool, policy);
    coop_tensor *d = make(r, 1, 100, NULL, EV);
    const char *base = coop_tensor_data(d);
    coop_tensor *m = make(r, 1, 1, NULL, EV);
    coop_tensor *a = make(r, 1, 10, m, EV);
    coop_tensor *b = make(r, 1, 1000, m, EV);
    coop_tensor *x = make(r, 1, 10, a, EV);
    coop_tensor *p = make(r, 1, 1, NULL, 0);
    coop_tensor *y = make(r, 1, 10, d, EV);
    coop_tensor *h = make(r, 5, 1, NULL, 0);
    assert_at(x, base, 4);
    assert_at(p, base, 5);
    assert_at(y, base, 6);
    assert_at(h, base, 7);
    assert_int_equal(coop_tensor_release(r, d), COOP_OK);
    assert_int_equal(coop_tensor_release(r, a), COOP_OK);
    assert_int_equal(coop_tensor_release(r, b), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, x, NULL), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, y, NULL), COOP_OK);
    evict_by_request(r, m, 3); /* blocks 0-3: free, M, free, free */
    assert_int_equal(coop_tensor_unpin(r, x), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, y), COOP_OK);
    assert_int_equal(coop_tensor_access(r, m, NULL), COOP_OK); /* into blocks 0-3 */
    assert_int_equal(coop_tensor_recomputes(m), 1);
    assert_at(m, base, 0);
    assert_int_equal(coop_tensor_pin(r, m, NULL), COOP_OK);
    assert_int_equal(coop_tensor_release(r, h), COOP_OK);
    coop_tensor *g1 = make(r, 2, 1, NULL, 0);
    coop_tensor *g2 = make(r, 4, 1, NULL, COOP_TENSOR_CHEAP); /* high end of 7-11 */
    assert_at(g1, base, 1);
    assert_at(g2, base, 8);
    /* the two costs as the window sees them */
    assert_int_equal(remat_eq_compute(r, x), 10 + 1010);
    assert_int_equal(remat_component_compute(r, x), 10 + 10);
    assert_int_equal(remat_eq_compute(r, y), 10 + 100);
    assert_int_equal(remat_component_compute(r, y), 10 + 100);
    assert_int_equal(coop_tensor_access(r, x, NULL), COOP_OK); /* the same staleness */
    assert_int_equal(coop_tensor_access(r, y, NULL), COOP_OK);
    coop_remat_stats before, after;
    coop_remat_get_stats(r, &before);
    coop_tensor *req = make(r, 2, 1, NULL, 0);
    coop_remat_get_stats(r, &after);
    assert_int_equal(after.searches, before.searches + 1);
    assert_int_equal(after.evictions, before.evictions + 1);
    if (policy == COOP_REMAT_COOP_COMP) {
        assert_false(coop_tensor_resident(x));
        assert_true(coop_tensor_resident(y));
        assert_at(req, base, 3);
    } else {
        assert_true(coop_tensor_resident(x));
        assert_false(coop_tensor_resident(y));
        assert_at(req, base, 6);
    }
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

typedef struct history_case {
    coop_remat_policy policy;
    bool recompute_x_first;
    bool evicts_x;
} history_case;

/*
 * [free][X 100][P][Y 105][free][G G G], no evicted neighbours (c_comp =
 * c_eq = own cost), the same staleness: a two-block request evicts X,
 * unless X has been recomputed once and the policy weighs that history:
 * COOP costs X 100 x 1.1 = 110 > 105 and evicts Y.
 */
static void recompute_history_changes_the_window(void **state)
{
    const history_case *c = *state;
    coop_pool *pool = pool_of(8);
    coop_remat *r = context(pool, c->policy);
    coop_tensor *s = make(r, 1, 1, NULL, 0);
    const char *base = coop_tensor_data(s);
    coop_tensor *x = make(r, 1, 100, NULL, EV);
    coop_tensor *p = make(r, 1, 1, NULL, 0);
    coop_tensor *y = make(r, 1, 105, NULL, EV);
    coop_tensor *h = make(r, 4, 1, NULL, 0);
    assert_at(x, base, 1);
    assert_at(p, base, 2);
    assert_at(y, base, 3);
    assert_at(h, base, 4);
    if (c->recompute_x_first) {
        assert_int_equal(coop_tensor_pin(r, y, NULL), COOP_OK);
        evict_by_request(r, x, 1);
        assert_int_equal(coop_tensor_unpin(r, y), COOP_OK);
        assert_int_equal(coop_tensor_access(r, x, NULL), COOP_OK); /* the one free block */
        assert_at(x, base, 1);
    }
    assert_int_equal(coop_tensor_recomputes(x), c->recompute_x_first ? 1 : 0);
    assert_int_equal(coop_tensor_recomputes(y), 0);
    assert_int_equal(coop_tensor_release(r, h), COOP_OK);
    coop_tensor *g = make(r, 3, 1, NULL, COOP_TENSOR_CHEAP); /* high end of 4-7 */
    assert_at(g, base, 5);
    assert_int_equal(coop_tensor_release(r, s), COOP_OK);
    assert_int_equal(coop_tensor_access(r, x, NULL), COOP_OK); /* the same staleness */
    assert_int_equal(coop_tensor_access(r, y, NULL), COOP_OK);
    coop_tensor *req = make(r, 2, 1, NULL, 0);
    assert_true(coop_tensor_resident(x) != c->evicts_x);
    assert_true(coop_tensor_resident(y) == c->evicts_x);
    assert_at(req, base, c->evicts_x ? 0 : 3);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* An in-place op gives the tensor a new producer: its count starts afresh
 * (the old value, an evicted record of its own, keeps the history). */
static void an_inplace_op_restarts_the_count(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(2);
    coop_remat *r = context(pool, COOP_REMAT_COOP_COMP);
    coop_tensor *x = make(r, 1, 100, NULL, EV);
    coop_tensor *v;
    assert_int_equal(coop_tensor_alias(r, x, &v), COOP_OK);
    coop_tensor *f = make(r, 2, 1, NULL, 0); /* evicts x */
    assert_false(coop_tensor_resident(x));
    assert_int_equal(coop_tensor_release(r, f), COOP_OK);
    assert_int_equal(coop_tensor_access(r, x, NULL), COOP_OK);
    assert_int_equal(coop_tensor_recomputes(x), 1);
    assert_int_equal(coop_tensor_recomputes(v), 1); /* a view reads its base's */
    assert_int_equal(coop_tensor_mutate(r, x, 5, "M", NULL, 0, NULL), COOP_OK);
    assert_int_equal(coop_tensor_recomputes(x), 0);
    assert_int_equal(x->inputs[0]->remats, 1); /* the old value */
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/*
 * X1..X4 all read A, whose class (A, B, M) was cut when M was recomputed.
 * Every X's c_comp needs A's component: it is walked once per change of
 * the evicted set, however many X ask, and again after a change. A window
 * search that evaluates all four (equal costs: no bound prunes one) walks
 * it once too.
 */
static void a_component_is_walked_once_per_epoch(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(8);
    coop_remat *r = context(pool, COOP_REMAT_COOP_COMP);
    coop_tensor *m = make(r, 1, 1, NULL, EV);
    const char *base = coop_tensor_data(m);
    coop_tensor *a = make(r, 1, 10, m, EV);
    coop_tensor *b = make(r, 1, 1000, m, EV);
    coop_tensor *x[4];
    for (int i = 0; i < 4; i++)
        x[i] = make(r, 1, 10, a, EV);
    coop_tensor *h = make(r, 1, 1, NULL, 0);
    assert_at(x[0], base, 3);
    assert_at(h, base, 7);
    assert_int_equal(coop_tensor_release(r, a), COOP_OK);
    assert_int_equal(coop_tensor_release(r, b), COOP_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_pin(r, x[i], NULL), COOP_OK);
    evict_by_request(r, m, 3);
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_unpin(r, x[i]), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, m, NULL), COOP_OK); /* recomputed, cuts the class */
    assert_at(m, base, 0);
    make(r, 2, 1, NULL, 0); /* fills blocks 1-2: the pool is full */
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_access(r, x[i], NULL), COOP_OK);

    uint64_t walks = r->comp_walks;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(remat_component_compute(r, x[i]), 10 + 10);
        assert_int_equal(remat_eq_compute(r, x[i]), 10 + 1010);
    }
    assert_int_equal(r->comp_walks, walks + 1);
    remat_comp_forget(a); /* as when A's component changes */
    assert_int_equal(remat_component_compute(r, x[3]), 10 + 10);
    assert_int_equal(r->comp_walks, walks + 2);
    /* no stamp left: every label is forgotten before the evaluation */
    r->comp_stamp = UINT32_MAX;
    assert_int_equal(remat_component_compute(r, x[2]), 10 + 10);
    assert_int_equal(r->comp_walks, walks + 3);
    assert_int_equal(r->comp_stamp, 1);

    /* creating a resident tensor changes no component: the search that
     * places it evaluates all four from the label */
    walks = r->comp_walks;
    coop_tensor *req = make(r, 1, 1, NULL, 0); /* four one-block windows, equal */
    assert_int_equal(r->comp_walks, walks);
    assert_false(coop_tensor_resident(x[0])); /* ties go to the lowest address */
    assert_at(req, base, 3);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The library's weight is the simulator's (one definition). */
static void the_weight_is_coop_sims(void **state)
{
    (void)state;
    assert_true(COOP_COST_REMAT_WEIGHT == 0.1);
    assert_true(coop_cost_weight(0, 4) == 0.25);
    assert_true(coop_cost_weight(10, 1) == 2.0);
    assert_int_equal(coop_cost_staleness(7, 7), 1); /* just used: dearest, but finite */
    assert_int_equal(coop_cost_staleness(9, 7), 2);
}

/* Costs of up to COOP_TENSOR_MAX_COST_NS summed over more than 2^15
 * evicted tensors pass INT64_MAX: the sums saturate there. (They wrapped
 * negative: dtr then evicted first the tensor dearest to recompute, and a
 * window policy read it as a blocked block.) A chain of such links, each
 * evicted at its release, ends in a resident tensor that a request must
 * spare for a cheap one of the same size. */
#define HUGE_CHAIN 33000
static void costs_summed_past_int64_saturate(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(4);
    coop_remat *r = context(pool, policy);
    const uint64_t c = COOP_TENSOR_MAX_COST_NS;
    coop_tensor *prev, *next, *end, *cheap, *fill, *x;
    assert_int_equal(coop_tensor_create(r, 512, c, "w", NULL, 0, EV, &prev), COOP_OK);
    for (int i = 0; i < HUGE_CHAIN; i++) {
        assert_int_equal(coop_tensor_create(r, 512, c, "c", &prev, 1, EV, &next), COOP_OK);
        assert_int_equal(coop_tensor_release(r, prev), COOP_OK);
        prev = next;
    }
    assert_int_equal(coop_tensor_create(r, U, c, "e", &prev, 1, EV, &end), COOP_OK);
    assert_int_equal(coop_tensor_release(r, prev), COOP_OK);
    assert_true(remat_eq_compute(r, end) == INT64_MAX);
    assert_true(remat_component_compute(r, end) == INT64_MAX);
    assert_true(remat_live_compute(r, end) == INT64_MAX);
    assert_int_equal(coop_tensor_create(r, U, 1, "o", NULL, 0, EV, &cheap), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 2 * U - 512, 1, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_true(coop_tensor_resident(end) && coop_tensor_resident(cheap));
    assert_int_equal(coop_tensor_create(r, U, 1, "x", NULL, 0, EV, &x), COOP_OK);
    assert_true(coop_tensor_resident(end));
    assert_false(coop_tensor_resident(cheap));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The statistics' sums saturate as the clock does: 2^16 recomputes at the
 * cost cap took recompute_ns past 2^64 (it wrapped to a small number while
 * the clock stopped at UINT64_MAX), and search_free_bytes adds up to a
 * pool's free bytes per search. Two tensors take turns in a pool of one. */
static void statistics_sums_saturate(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(1);
    coop_remat *r = context(pool, COOP_REMAT_LRU);
    const uint64_t c = COOP_TENSOR_MAX_COST_NS;
    coop_tensor *t[2];
    assert_int_equal(coop_tensor_create(r, U, c, "a", NULL, 0, EV, &t[0]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, c, "b", NULL, 0, EV, &t[1]), COOP_OK);
    const unsigned turns = (1u << 16) + 2;
    void *ptr;
    for (unsigned i = 0; i < turns; i++)
        assert_int_equal(coop_tensor_access(r, t[i % 2], &ptr), COOP_OK);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.recomputes, turns);
    assert_int_equal(st.clock, UINT64_MAX);
    assert_int_equal(st.recompute_ns, UINT64_MAX);
    /* a search where U - 512 bytes are free, the sum one below the top */
    assert_int_equal(coop_tensor_create(r, 512, 1, "s", NULL, 0, EV, &t[0]), COOP_OK);
    r->stats.search_free_bytes = UINT64_MAX - 1;
    coop_remat_get_stats(r, &st);
    uint64_t searches = st.searches;
    assert_int_equal(coop_tensor_create(r, U, 1, "x", NULL, 0, EV, &t[1]), COOP_OK);
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.searches, searches + 1);
    assert_int_equal(st.search_free_bytes, UINT64_MAX);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A recomputation that takes over its old value's buffer evicts the old
 * value again, into a class of its own: x's c_eq counts it (10 + 7). */
static void a_taken_over_old_value_counts_as_evicted(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat *r = context(pool, COOP_REMAT_DTR);
    coop_tensor *w = make(r, 1, 1, NULL, 0);
    coop_tensor *x = make(r, 1, 10, w, EV);
    assert_int_equal(coop_tensor_mutate(r, x, 7, "M", NULL, 0, NULL), COOP_OK);
    assert_int_equal(remat_eq_compute(r, x), 7 + 10); /* the old value, evicted in place */
    evict_by_request(r, x, 3);
    assert_int_equal(coop_tensor_access(r, x, NULL), COOP_OK);
    assert_int_equal(coop_tensor_recomputes(x), 1);
    assert_int_equal(x->inputs[0]->remats, 1); /* the old value, recomputed for it */
    assert_false(coop_tensor_resident(x->inputs[0]));
    assert_int_equal(remat_eq_compute(r, x), 7 + 10);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/*
 * COOP's exact cost weighs the recompute history too, not only its bound:
 * [S][Z2 20][Z 0][X 100][P][Y 125][F F], Z2 -> Z -> X. X is recomputed
 * once, then Z2, Z and F released (evicted, freed). A three-block request
 * has two windows, free free X and Y free free: X's bound (its cost plus
 * its evicted input Z) is 110, below Y's 125, so its exact cost is
 * evaluated: c_live (100 + 0 + 20) x 1.1 = 132 > 125 evicts Y.
 */
static void coops_exact_cost_weighs_the_history(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(8);
    coop_remat *r = context(pool, COOP_REMAT_COOP);
    coop_tensor *s = make(r, 1, 1, NULL, 0);
    const char *base = coop_tensor_data(s);
    coop_tensor *z2 = make(r, 1, 20, NULL, 0);
    coop_tensor *z = make(r, 1, 0, z2, 0);
    coop_tensor *x = make(r, 1, 100, z, EV);
    coop_tensor *p = make(r, 1, 1, NULL, 0);
    coop_tensor *y = make(r, 1, 125, NULL, EV);
    coop_tensor *f = make(r, 2, 1, NULL, 0);
    assert_at(x, base, 3);
    assert_at(y, base, 5);
    assert_int_equal(coop_tensor_pin(r, y, NULL), COOP_OK);
    evict_by_request(r, x, 1);
    assert_int_equal(coop_tensor_unpin(r, y), COOP_OK);
    assert_int_equal(coop_tensor_access(r, x, NULL), COOP_OK);
    assert_at(x, base, 3);
    assert_int_equal(coop_tensor_recomputes(x), 1);
    assert_int_equal(coop_tensor_release(r, z2), COOP_OK);
    assert_int_equal(coop_tensor_release(r, z), COOP_OK);
    assert_int_equal(coop_tensor_release(r, f), COOP_OK);
    assert_false(coop_tensor_resident(z));
    assert_int_equal(coop_tensor_access(r, x, NULL), COOP_OK); /* the same staleness */
    assert_int_equal(coop_tensor_access(r, y, NULL), COOP_OK);
    coop_tensor *req = make(r, 3, 1, NULL, 0);
    assert_true(coop_tensor_resident(x));
    assert_false(coop_tensor_resident(y));
    assert_at(req, base, 5);
    (void)p;
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

int main(void)
{
    static coop_remat_policy window_policies[] = {COOP_REMAT_COOP_COMP, COOP_REMAT_COOP_EQ};
    static coop_remat_policy saturating[] = {COOP_REMAT_COOP, COOP_REMAT_COOP_COMP,
                                             COOP_REMAT_COOP_EQ, COOP_REMAT_DTR};
    static history_case history[] = {
        {COOP_REMAT_COOP_COMP, false, true},
        {COOP_REMAT_COOP_COMP, true, false},
        {COOP_REMAT_COOP_EQ, true, true},
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(a_cut_class_window_follows_c_comp, &window_policies[0]),
        cmocka_unit_test_prestate(a_cut_class_window_follows_c_comp, &window_policies[1]),
        cmocka_unit_test_prestate(recompute_history_changes_the_window, &history[0]),
        cmocka_unit_test_prestate(recompute_history_changes_the_window, &history[1]),
        cmocka_unit_test_prestate(recompute_history_changes_the_window, &history[2]),
        cmocka_unit_test(an_inplace_op_restarts_the_count),
        cmocka_unit_test(a_component_is_walked_once_per_epoch),
        cmocka_unit_test(the_weight_is_coop_sims),
        cmocka_unit_test_prestate(costs_summed_past_int64_saturate, &saturating[0]),
        cmocka_unit_test_prestate(costs_summed_past_int64_saturate, &saturating[1]),
        cmocka_unit_test_prestate(costs_summed_past_int64_saturate, &saturating[2]),
        cmocka_unit_test_prestate(costs_summed_past_int64_saturate, &saturating[3]),
        cmocka_unit_test(statistics_sums_saturate),
        cmocka_unit_test(a_taken_over_old_value_counts_as_evicted),
        cmocka_unit_test(coops_exact_cost_weighs_the_history),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
