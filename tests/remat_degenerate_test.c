/*
 * The remat API's policies on degenerate numbers (tests/README.md,
 * "Degenerate numbers in eviction"): costs of 0 everywhere, a logical
 * clock that never advances (staleness 0), a clock above 2^53 ns (where a
 * double no longer holds it exactly) and one saturated at UINT64_MAX, and
 * a pool where one tensor is evictable among pinned ones. Each decision is
 * checked against the rule coop.h documents, and run twice: the same.
 */
#include <stdio.h>
#include <string.h>

#include "remat_block_fixture.h"

static const coop_remat_policy all_policies[] = {
    COOP_REMAT_COOP, COOP_REMAT_DTR,  COOP_REMAT_DTR_LOCAL, COOP_REMAT_DTE,
    COOP_REMAT_LRU,  COOP_REMAT_SIZE, COOP_REMAT_COOP_EQ,   COOP_REMAT_COOP_COMP};
#define NUM_POLICIES (sizeof all_policies / sizeof all_policies[0])

static coop_tensor *make(coop_remat *r, unsigned units, uint64_t cost, unsigned flags)
{
    coop_tensor *t;
    assert_int_equal(coop_tensor_create(r, (size_t)units * U, cost, "op", NULL, 0, flags, &t),
                     COOP_OK);
    return t;
}

static uint64_t clock_of(const coop_remat *r)
{
    coop_remat_stats s;
    coop_remat_get_stats(r, &s);
    return s.clock;
}

static uint64_t evictions_of(const coop_remat *r)
{
    coop_remat_stats s;
    coop_remat_get_stats(r, &s);
    return s.evictions;
}

/* Advances r's clock by ns (at least; to UINT64_MAX, where it saturates,
 * if it would pass it) with ops of the largest cost, whose tensors are
 * released at once (their blocks freed). */
static void advance_clock(coop_remat *r, uint64_t ns)
{
    uint64_t now = clock_of(r);
    uint64_t target = ns > UINT64_MAX - now ? UINT64_MAX : now + ns;
    while (clock_of(r) < target)
        assert_int_equal(coop_tensor_release(r, make(r, 1, COOP_TENSOR_MAX_COST_NS, 0)), COOP_OK);
}

/* Six evictable tensors of cost 0 fill the pool and a request of two blocks
 * comes: every score ties (the clock never moved, so every staleness is 0:
 * the argmin policies score each tensor as dearest, infinity, and LRU sees
 * one last access; the window policies cost every window 0). The documented
 * rules: the argmin policies take the tensor made resident earliest, the
 * window policies the window that ends lowest: blocks 0 and 1 either way,
 * the same in a second run. */
static void zero_costs_tie_to_the_earliest_tensor(void **state)
{
    (void)state;
    for (size_t p = 0; p < NUM_POLICIES; p++) {
        for (int run = 0; run < 2; run++) {
            coop_pool *pool = pool_of(6);
            coop_remat *r = context(pool, all_policies[p]);
            coop_tensor *t[6];
            for (int i = 0; i < 6; i++)
                t[i] = make(r, 1, 0, EV);
            assert_int_equal(clock_of(r), 1); /* nothing cost anything */
            coop_tensor *q = make(r, 2, 0, 0);
            assert_ptr_equal(coop_tensor_data(q), (char *)coop_tensor_data(t[2]) - 2 * (size_t)U);
            for (int i = 0; i < 6; i++)
                assert_int_equal(coop_tensor_resident(t[i]), i >= 2);
            assert_int_equal(evictions_of(r), 2);
            coop_remat_destroy(r);
            coop_pool_destroy(pool);
        }
    }
}

/* LRU above 2^53 ns of logical clock: b is made resident before a, then
 * used after a was made (one op later, 1 ns), so a is the least recently
 * used. As doubles the two last accesses are one number (the clock is
 * about 2^60, where a double's step is 256), and the tie went to the
 * tensor made resident earliest: b, the one just used. The argmin compares
 * the last accesses exactly now. */
static void lru_orders_accesses_above_2_53(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat *r = context(pool, COOP_REMAT_LRU);
    advance_clock(r, (uint64_t)1 << 60);
    uint64_t start = clock_of(r);
    assert_true(start > (uint64_t)1 << 60);
    coop_tensor *b = make(r, 1, 1, EV);                        /* last access start + 1 */
    coop_tensor *a = make(r, 1, 1, EV);                        /* start + 2 */
    make(r, 1, 1, 0);                                          /* start + 3 */
    assert_int_equal(coop_tensor_access(r, b, NULL), COOP_OK); /* b: start + 3 */
    make(r, 1, 1, 0);                                          /* the pool is full */
    /* the premise: as doubles, a's and b's last accesses are equal */
    assert_true((double)(start + 2) == (double)(start + 3));
    make(r, 1, 1, 0);
    assert_int_equal(evictions_of(r), 1);
    assert_false(coop_tensor_resident(a));
    assert_true(coop_tensor_resident(b));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A clock saturated at UINT64_MAX (2^16 ops at the largest cost) stays
 * there, every later access is stamped with it, and the policies still
 * choose by the rules: what was used before saturation is older than what
 * was used at it (LRU, and DTR's staleness), and among tensors all used at
 * the saturated clock (staleness 0, scored as dearest) the earliest made
 * resident goes. */
static void a_saturated_clock_still_chooses(void **state)
{
    (void)state;
    const coop_remat_policy argmins[] = {COOP_REMAT_DTR, COOP_REMAT_DTR_LOCAL, COOP_REMAT_DTE,
                                         COOP_REMAT_LRU};
    for (size_t p = 0; p < sizeof argmins / sizeof argmins[0]; p++) {
        coop_pool *pool = pool_of(4);
        coop_remat *r = context(pool, argmins[p]);
        coop_tensor *old = make(r, 1, 1, EV); /* used before saturation */
        advance_clock(r, UINT64_MAX);
        assert_true(clock_of(r) == UINT64_MAX);
        coop_tensor *x = make(r, 1, 1, EV);
        coop_tensor *y = make(r, 1, 1, EV);
        make(r, 1, 1, 0);
        assert_true(clock_of(r) == UINT64_MAX);
        make(r, 1, 1, 0); /* old goes: stale by nearly 2^64 */
        assert_false(coop_tensor_resident(old));
        assert_true(coop_tensor_resident(x) && coop_tensor_resident(y));
        make(r, 1, 1, 0); /* x and y both at staleness 0: the earlier, x */
        assert_false(coop_tensor_resident(x));
        assert_true(coop_tensor_resident(y));
        assert_int_equal(evictions_of(r), 2);
        coop_remat_destroy(r);
        coop_pool_destroy(pool);
    }
}

/* One evictable tensor among pinned and unevictable ones (window breakers
 * on every side): a request it cannot make room for evicts nothing and
 * fails with the pool's numbers; one it can evicts exactly it. */
static void one_evictable_among_breakers(void **state)
{
    (void)state;
    for (size_t p = 0; p < NUM_POLICIES; p++) {
        coop_pool *pool = pool_of(6);
        coop_remat *r = context(pool, all_policies[p]);
        coop_tensor *t[6];
        for (int i = 0; i < 6; i++)
            t[i] = make(r, 1, i, i == 3 || i == 1 ? EV : 0);
        assert_int_equal(coop_tensor_pin(r, t[1], NULL), COOP_OK);
        coop_tensor *q = NULL;
        assert_int_equal(coop_tensor_create(r, 2 * U, 1, "op", NULL, 0, 0, &q), COOP_ERR_NOMEM);
        assert_null(q);
        assert_int_equal(evictions_of(r), 0);
        const char *msg = coop_last_error();
        printf("policy %d: %s\n", (int)all_policies[p], msg);
        assert_non_null(strstr(msg, "no room for 16384 bytes: capacity 49152, allocated 49152 of "
                                    "which 8192 evictable"));
        q = make(r, 1, 1, 0);
        assert_int_equal(evictions_of(r), 1);
        assert_false(coop_tensor_resident(t[3]));
        assert_ptr_equal(coop_tensor_data(q), (char *)coop_tensor_data(t[2]) + U);
        assert_int_equal(coop_pool_check(pool), COOP_OK);
        coop_remat_destroy(r);
        coop_pool_destroy(pool);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(zero_costs_tie_to_the_earliest_tensor),
        cmocka_unit_test(lru_orders_accesses_above_2_53),
        cmocka_unit_test(a_saturated_clock_still_chooses),
        cmocka_unit_test(one_evictable_among_breakers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
