/*
 * A remat call that fails (no room, a failed recompute callback) leaves the
 * context as it found it: the clock, the counters, the records, and the
 * last accesses that decide what is evicted next. A last access is not
 * read back through the API; it shows in what a later allocation evicts.
 * So each case plays one program twice, on two contexts, with and without
 * the failing call, and compares what the API shows after the call and
 * after that allocation. Host backend, pools of 8 KiB blocks
 * (tests/remat_block_fixture.h); nothing touches device memory.
 */
#include <stdio.h>
#include <string.h>

#include "remat_block_fixture.h"

enum { NT = 6 }; /* tensors a program names */

/* What the API shows of a context and its tensors. */
typedef struct seen {
    coop_remat_stats stats;
    bool resident[NT];
    uint32_t remats[NT];
} seen;

static void look(coop_remat *r, coop_tensor *const *t, seen *s)
{
    memset(s, 0, sizeof *s);
    coop_remat_get_stats(r, &s->stats);
    /* CPU time, which differs from run to run */
    s->stats.search_ns = s->stats.last_search_ns = 0;
    for (int i = 0; i < NT; i++) {
        s->resident[i] = t[i] && coop_tensor_resident(t[i]);
        s->remats[i] = t[i] ? coop_tensor_recomputes(t[i]) : 0;
    }
}

/* The failed call's search is counted, as the work it did: a case that
 * searched compares the rest. */
static void forget_searches(seen *s)
{
    s->stats.searches = s->stats.heuristic_evals = s->stats.frag_failures = 0;
    s->stats.search_free_bytes = 0;
}

static void same(const seen *a, const seen *b, bool searched, const char *what)
{
    seen x = *a, y = *b;
    if (searched) {
        forget_searches(&x);
        forget_searches(&y);
    }
    if (memcmp(&x.stats, &y.stats, sizeof x.stats)) {
        print_message(
            "%s: statistics differ: clock %llu / %llu, records %llu / %llu, evictions "
            "%llu / %llu, recomputes %llu / %llu, resident %llu / %llu\n",
            what, (unsigned long long)x.stats.clock, (unsigned long long)y.stats.clock,
            (unsigned long long)x.stats.records, (unsigned long long)y.stats.records,
            (unsigned long long)x.stats.evictions, (unsigned long long)y.stats.evictions,
            (unsigned long long)x.stats.recomputes, (unsigned long long)y.stats.recomputes,
            (unsigned long long)x.stats.resident_bytes, (unsigned long long)y.stats.resident_bytes);
        fail();
    }
    for (int i = 0; i < NT; i++)
        if (x.resident[i] != y.resident[i] || x.remats[i] != y.remats[i]) {
            print_message("%s: tensor %d: resident %d / %d, recomputed %u / %u times\n", what, i,
                          x.resident[i], y.resident[i], x.remats[i], y.remats[i]);
            fail();
        }
}

typedef struct program {
    coop_remat_policy policy;
    bool copy_on_write;
    /* every op's: 0 keeps the clock at its start, every last access equal,
     * and the policies evict the tensor made resident earliest */
    uint64_t cost;
} program;

static coop_remat *context_of(coop_pool *pool, const program *p)
{
    if (!p->copy_on_write)
        return context(pool, p->policy);
    coop_remat_config cfg = {.policy = p->policy,
                             .cheap_threshold = -1,
                             .copy_on_write = p->copy_on_write,
                             .recompute = recompute};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    return r;
}

/* a, b and c; then fail (when not NULL) the call on a; then c goes, d (2
 * blocks, kept) takes its place, and e (1 block) must evict a or b: a,
 * read longer ago, unless the failed call marked it read. */
typedef coop_status (*failing_call)(coop_remat *r, coop_tensor *const *t, bool *searched);

static void play(const program *p, failing_call call, seen *after_call, seen *after_all,
                 bool *searched)
{
    coop_pool *pool = pool_of(4);
    coop_remat *r = context_of(pool, p);
    coop_tensor *t[NT] = {0};
    assert_int_equal(coop_tensor_create(r, U, p->cost, "a", NULL, 0, EV, &t[0]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, p->cost, "b", NULL, 0, EV, &t[1]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 2 * U, p->cost, "c", NULL, 0, 0, &t[2]), COOP_OK);
    if (call)
        assert_int_not_equal(call(r, t, searched), COOP_OK);
    look(r, t, after_call);
    assert_int_equal(coop_tensor_release(r, t[2]), COOP_OK);
    t[2] = NULL;
    assert_int_equal(coop_tensor_create(r, 2 * U, p->cost, "d", NULL, 0, 0, &t[3]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, p->cost, "e", NULL, 0, EV, &t[4]), COOP_OK);
    look(r, t, after_all);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Plays the program with and without call and compares: right after the
 * call (against the state before it) and at the end. */
static void leaves_no_trace(const program *p, failing_call call, const char *name)
{
    seen before, plain, call_done, failed;
    bool searched = false;
    play(p, NULL, &before, &plain, &searched);
    play(p, call, &call_done, &failed, &searched);
    char what[128];
    snprintf(what, sizeof what, "%s, policy %d, right after the call", name, (int)p->policy);
    same(&before, &call_done, searched, what);
    snprintf(what, sizeof what, "%s, policy %d, at the end", name, (int)p->policy);
    same(&plain, &failed, searched, what);
}

static coop_status create_too_large(coop_remat *r, coop_tensor *const *t, bool *searched)
{
    coop_tensor *out = NULL;
    *searched = false;
    coop_status st = coop_tensor_create(r, 5 * U, 10, "f", &t[0], 1, EV, &out);
    assert_null(out);
    return st;
}

static coop_status create_no_room(coop_remat *r, coop_tensor *const *t, bool *searched)
{
    coop_tensor *out = NULL;
    *searched = true;
    coop_status st = coop_tensor_create(r, 2 * U, 10, "f", &t[0], 1, EV, &out);
    assert_null(out);
    return st;
}

static coop_status mutate_no_room(coop_remat *r, coop_tensor *const *t, bool *searched)
{
    /* copy-on-write: the new value needs a block, the old one (a) and the
     * input (b) are pinned while it is placed, c is kept */
    *searched = true;
    return coop_tensor_mutate(r, t[0], 10, "m", &t[1], 1, NULL);
}

/* A recompute callback that fails for producer "y". */
static coop_status fails_for_y(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                               void *out, void *user)
{
    (void)t, (void)inputs, (void)n, (void)out, (void)user;
    return strcmp(producer, "y") ? COOP_OK : COOP_ERR_BACKEND;
}

typedef coop_status (*failing_access)(coop_remat *r, coop_tensor *x);

/* x = op(a, y), both x and y evicted, a and b resident, b read after a;
 * then (when not NULL) an access of x fails in y's recompute callback,
 * after x's frame pinned a; then two kept tensors fill the pool, and e
 * (1 block) must evict a or b: a, read longer ago, unless the failed
 * access marked it read. Blocks: a y x b z, z released for room. */
static void play_chain(coop_remat_policy policy, failing_access call, seen *after_call,
                       seen *after_all)
{
    coop_pool *pool = pool_of(5);
    coop_remat_config cfg = {.policy = policy, .cheap_threshold = -1, .recompute = fails_for_y};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    coop_tensor *t[NT] = {0}, *z, *k;
    enum { A, Y, X, B, K2, E };
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &t[A]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 1, "y", NULL, 0, EV, &t[Y]), COOP_OK);
    coop_tensor *ay[2] = {t[A], t[Y]};
    assert_int_equal(coop_tensor_create(r, U, 1, "x", ay, 2, EV, &t[X]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", NULL, 0, EV, &t[B]), COOP_OK);
    /* a read, the clock moved on, b read; then k evicts y and x, the only
     * evictable tensors, and goes */
    assert_int_equal(coop_tensor_pin(r, t[A], NULL), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "z", NULL, 0, 0, &z), COOP_OK);
    assert_int_equal(coop_tensor_release(r, z), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, t[B], NULL), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "k", NULL, 0, 0, &k), COOP_OK);
    assert_false(coop_tensor_resident(t[X]) || coop_tensor_resident(t[Y]));
    assert_int_equal(coop_tensor_unpin(r, t[A]), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, t[B]), COOP_OK);
    assert_int_equal(coop_tensor_release(r, k), COOP_OK);
    if (call) {
        assert_int_equal(call(r, t[X]), COOP_ERR_BACKEND);
        assert_false(coop_tensor_resident(t[X]) || coop_tensor_resident(t[Y]));
    }
    look(r, t, after_call);
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "k2", NULL, 0, 0, &t[K2]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "e1", NULL, 0, 0, &k), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "e", NULL, 0, EV, &t[E]), COOP_OK);
    look(r, t, after_all);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

static coop_status access_x(coop_remat *r, coop_tensor *x)
{
    void *ptr = &ptr;
    coop_status st = coop_tensor_access(r, x, &ptr);
    assert_null(ptr);
    return st;
}

static coop_status pin_x(coop_remat *r, coop_tensor *x)
{
    coop_status st = coop_tensor_pin(r, x, NULL);
    /* no pin taken: an unpin is refused */
    assert_int_equal(coop_tensor_unpin(r, x), COOP_ERR_INVALID);
    return st;
}

static void a_failed_recompute_leaves_no_trace(void **state)
{
    const program *p = *state;
    failing_access calls[] = {access_x, pin_x};
    const char *names[] = {"access", "pin"};
    for (int i = 0; i < 2; i++) {
        seen before, plain, call_done, failed;
        play_chain(p->policy, NULL, &before, &plain);
        play_chain(p->policy, calls[i], &call_done, &failed);
        char what[128];
        snprintf(what, sizeof what, "%s failing in an input's recompute, policy %d, %s", names[i],
                 (int)p->policy, "right after the call");
        same(&before, &call_done, false, what);
        snprintf(what, sizeof what, "%s failing in an input's recompute, policy %d, %s", names[i],
                 (int)p->policy, "at the end");
        same(&plain, &failed, false, what);
    }
}

/* coop_tensor_create_outputs whose second output finds no room: the first,
 * placed already, goes with the call (its record and its buffer), nothing
 * evicted for it. a (kept as input, pinned) and b (not evictable) leave
 * 2 blocks free: output 1 (1 block) fits, output 2 (2 blocks) does not. */
static void outputs_after_the_first(const program *p, bool fail, seen *s)
{
    coop_pool *pool = pool_of(4);
    coop_remat *r = context_of(pool, p);
    coop_tensor *t[NT] = {0};
    assert_int_equal(coop_tensor_create(r, U, p->cost, "a", NULL, 0, EV, &t[0]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, p->cost, "b", NULL, 0, 0, &t[1]), COOP_OK);
    if (fail) {
        const size_t sizes[2] = {U, 2 * U};
        coop_tensor *outs[2] = {0};
        assert_int_equal(coop_tensor_create_outputs(r, 2, sizes, 10, "f", &t[0], 1, EV, outs),
                         COOP_ERR_NOMEM);
        assert_null(outs[0]);
        assert_null(outs[1]);
    }
    look(r, t, s);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocated_bytes.current, 2 * U); /* a and b: output 1's block went */
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

static void a_failed_create_outputs_frees_the_placed_ones(void **state)
{
    const program *p = *state;
    seen plain, failed;
    outputs_after_the_first(p, false, &plain);
    outputs_after_the_first(p, true, &failed);
    same(&plain, &failed, true, "create_outputs out of room at output 2");
}

/* A recomputation that succeeds marks each input read at its latest read:
 * x = op(a, y, w), y = op(z), w = op(a), x, y and w evicted. Accessing x
 * pins a (x's frame), recomputes y, then w, which reads a later; x's frame
 * finishing last must not set a's last access back to its pin. lru then
 * evicts z (read only when y was recomputed), not a. */
static void inputs_keep_their_latest_read(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(5);
    coop_remat *r = context(pool, COOP_REMAT_LRU);
    coop_tensor *a, *z, *y, *w, *x, *k, *e;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "z", NULL, 0, EV, &z), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 1, "y", &z, 1, EV, &y), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 1, "w", &a, 1, EV, &w), COOP_OK);
    coop_tensor *ayw[3] = {a, y, w};
    assert_int_equal(coop_tensor_create(r, U, 1, "x", ayw, 3, EV, &x), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, a, NULL), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, z, NULL), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "k", NULL, 0, 0, &k), COOP_OK);
    assert_false(coop_tensor_resident(x) || coop_tensor_resident(y) || coop_tensor_resident(w));
    assert_int_equal(coop_tensor_release(r, k), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, a), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, z), COOP_OK);
    void *ptr;
    assert_int_equal(coop_tensor_access(r, x, &ptr), COOP_OK);
    assert_true(coop_tensor_resident(y) && coop_tensor_resident(w));
    assert_int_equal(coop_tensor_create(r, U, 10, "e", NULL, 0, EV, &e), COOP_OK);
    assert_true(coop_tensor_resident(a));
    assert_false(coop_tensor_resident(z));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

static const program programs[] = {
    {COOP_REMAT_COOP, false, 10}, {COOP_REMAT_DTR, false, 10}, {COOP_REMAT_LRU, false, 10},
    {COOP_REMAT_COOP, true, 10},  {COOP_REMAT_DTR, true, 10},  {COOP_REMAT_LRU, true, 10},
    {COOP_REMAT_COOP, true, 0},   {COOP_REMAT_DTR, true, 0},   {COOP_REMAT_LRU, true, 0},
};

static void a_failed_create_leaves_no_trace(void **state)
{
    const program *p = *state;
    leaves_no_trace(p, create_too_large, "create larger than the capacity");
    leaves_no_trace(p, create_no_room, "create out of room");
}

static void a_failed_mutate_leaves_no_trace(void **state)
{
    const program *p = *state;
    if (p->copy_on_write) /* recomputable in place needs no room */
        leaves_no_trace(p, mutate_no_room, "copy-on-write mutate out of room");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(a_failed_create_leaves_no_trace, (void *)&programs[0]),
        cmocka_unit_test_prestate(a_failed_create_leaves_no_trace, (void *)&programs[1]),
        cmocka_unit_test_prestate(a_failed_create_leaves_no_trace, (void *)&programs[2]),
        cmocka_unit_test_prestate(a_failed_mutate_leaves_no_trace, (void *)&programs[3]),
        cmocka_unit_test_prestate(a_failed_mutate_leaves_no_trace, (void *)&programs[4]),
        cmocka_unit_test_prestate(a_failed_mutate_leaves_no_trace, (void *)&programs[5]),
        cmocka_unit_test_prestate(a_failed_create_leaves_no_trace, (void *)&programs[6]),
        cmocka_unit_test_prestate(a_failed_create_leaves_no_trace, (void *)&programs[7]),
        cmocka_unit_test_prestate(a_failed_create_leaves_no_trace, (void *)&programs[8]),
        cmocka_unit_test_prestate(a_failed_mutate_leaves_no_trace, (void *)&programs[6]),
        cmocka_unit_test_prestate(a_failed_mutate_leaves_no_trace, (void *)&programs[7]),
        cmocka_unit_test_prestate(a_failed_mutate_leaves_no_trace, (void *)&programs[8]),
        cmocka_unit_test_prestate(a_failed_create_outputs_frees_the_placed_ones,
                                  (void *)&programs[0]),
        cmocka_unit_test_prestate(a_failed_create_outputs_frees_the_placed_ones,
                                  (void *)&programs[1]),
        cmocka_unit_test_prestate(a_failed_create_outputs_frees_the_placed_ones,
                                  (void *)&programs[2]),
        cmocka_unit_test(inputs_keep_their_latest_read),
        cmocka_unit_test_prestate(a_failed_recompute_leaves_no_trace, (void *)&programs[0]),
        cmocka_unit_test_prestate(a_failed_recompute_leaves_no_trace, (void *)&programs[1]),
        cmocka_unit_test_prestate(a_failed_recompute_leaves_no_trace, (void *)&programs[2]),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
