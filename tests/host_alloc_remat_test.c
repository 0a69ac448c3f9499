/*
 * Host allocation fault sweeps (host_alloc_sweep.h) through the remat API:
 * remat_test's shapes (dtr, dtr with copy-on-write, coop) and many small
 * tensors, so that a search evicts dozens, and a collection of records, on
 * a small pool made inside each run (its metadata's growth is freed with it). After every refused
 * call the pool is valid (coop_pool_check), every tensor is still accessible, and every eviction
 * was told to the owner (on_evict).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "coop.h"
#include "remat/remat_internal.h"

#include "host_alloc_fault.h"
#include "host_alloc_sweep.h"

#define KiB 1024u
#define EV COOP_TENSOR_EVICTABLE
#define TENSORS 16

/* Each producer's inputs in the sequences below ("M", the in-place op,
 * reads the old value and W; "Q", in place on h, its old value twice): a
 * recomputation with another count means a refused call left a tensor with
 * the wrong producer or inputs. */
static size_t producer_inputs(const char *producer)
{
    switch (producer[0]) {
    case 'W':
    case 'S':
        return 0;
    case 'M':
    case 'Q':
        return 2;
    default:
        return 1;
    }
}

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)inputs, (void)out, (void)user;
    if (n != producer_inputs(producer))
        fail_msg("allocation call %ld failed: %s recomputed with %zu inputs, not %zu",
                 host_alloc_sweep_call(), (const char *)producer, n, producer_inputs(producer));
    return COOP_OK;
}

typedef struct api_ctx {
    coop_remat_policy policy;
    bool cow;
    coop_pool *pool;
    coop_remat *r;
    coop_tensor *t[TENSORS];
    uint64_t notices;    /* on_evict calls */
    bool counts_notices; /* many_run: on_evict counts them */
    bool swept;          /* collect_run: under host_alloc_sweep (re-arm after the setup) */
} api_ctx;

static void count_notice(coop_tensor *t, void *user)
{
    (void)t;
    ((api_ctx *)user)->notices++;
}

/* One 64 KiB segment, host backend (remat_test's pool). Made inside each
 * run, so that what the pool's metadata grows by is freed with it. */
static coop_status small_pool(coop_pool **out)
{
    coop_config cfg;
    coop_config_default(&cfg);
    cfg.use_vmm = false;
    cfg.page_size = 4096;
    cfg.capacity = 64 * KiB;
    cfg.segment_size = 64 * KiB;
    return coop_pool_create(&cfg, out);
}

/* One call of the sequence: through, or refused for host memory with the
 * pool still valid. */
#define STEP(call)                                                                                 \
    do {                                                                                           \
        coop_status st_ = (call);                                                                  \
        if (st_ != COOP_OK) {                                                                      \
            if (c->pool && coop_pool_check(c->pool) != COOP_OK)                                    \
                fail_msg("pool broken after %s failed: %s", #call, coop_last_error());             \
            return st_;                                                                            \
        }                                                                                          \
    } while (0)

/* A run's start: the context cleared, a fresh small pool and a remat
 * context over it (with on_evict counting notices when asked). */
static coop_status open_run(api_ctx *c, bool count_notices)
{
    memset(c->t, 0, sizeof c->t);
    c->pool = NULL;
    c->r = NULL;
    c->notices = 0;
    c->counts_notices = count_notices;
    coop_remat_config cfg = {.policy = c->policy,
                             .cheap_threshold = -1,
                             .copy_on_write = c->cow,
                             .on_evict = count_notices ? count_notice : NULL,
                             .recompute = recompute,
                             .user = c};
    STEP(small_pool(&c->pool));
    STEP(coop_remat_create(c->pool, &cfg, &c->r));
    return COOP_OK;
}

/* remat_test's shapes on one 64 KiB pool: a constant, a chain that fills
 * the pool and is evicted by unevictable tensors, releases, recomputation
 * by access, an op with three outputs, a view, pins, in-place ops (one
 * reading its own target). */
static coop_status api_run(void *ctx)
{
    api_ctx *c = ctx;
    coop_tensor **t = c->t;
    STEP(open_run(c, false));
    coop_remat *r = c->r;
    STEP(coop_tensor_create(r, 8 * KiB, 0, "W", NULL, 0, 0, &t[0]));
    STEP(coop_tensor_create(r, 8 * KiB, 100, "A", &t[0], 1, EV, &t[1]));
    STEP(coop_tensor_create(r, 8 * KiB, 100, "B", &t[1], 1, EV, &t[2]));
    STEP(coop_tensor_alias(r, t[2], &t[3]));
    STEP(coop_tensor_create(r, 8 * KiB, 10, "C", &t[2], 1, EV, &t[4]));
    const size_t sizes[3] = {8 * KiB, 4 * KiB, 4 * KiB};
    STEP(coop_tensor_create_outputs(r, 3, sizes, 500, "O", &t[4], 1, EV, &t[5]));
    STEP(coop_tensor_pin(r, t[4], NULL));
    for (int i = 8; i < 11; i++) /* unevictable: the chain is evicted */
        STEP(coop_tensor_create(r, 8 * KiB, 10, "G", &t[0], 1, 0, &t[i]));
    STEP(coop_tensor_unpin(r, t[4]));
    STEP(coop_tensor_release(r, t[8]));
    t[8] = NULL;
    STEP(coop_tensor_release(r, t[9]));
    t[9] = NULL;
    STEP(coop_tensor_access(r, t[3], NULL)); /* recomputes A, B through the view */
    void *old = NULL;
    STEP(coop_tensor_mutate(r, t[2], 20, "M", &t[0], 1, &old));
    STEP(coop_tensor_create(r, 16 * KiB, 10, "H", &t[2], 1, EV, &t[11]));
    /* three readers of h fill its first 4 child slots but one; h.mul_(h)
     * then needs two (its old value's, for h and for the read of h), taken
     * before anything changes (prepare_in_place) */
    for (int i = 12; i < 15; i++)
        STEP(coop_tensor_create(r, 512, 1, "R", &t[11], 1, EV, &t[i]));
    STEP(coop_tensor_mutate(r, t[11], 5, "Q", &t[11], 1, NULL));
    STEP(coop_tensor_access(r, t[1], NULL));
    STEP(coop_tensor_access(r, t[6], NULL));
    STEP(coop_tensor_release(r, t[3]));
    t[3] = NULL;
    STEP(coop_tensor_access(r, t[2], NULL));
    return COOP_OK;
}

/* Many small tensors, then big ones: a search evicts dozens at once (coop's
 * window collects more victims than its 32 inline slots; the on_evict list
 * grows past its first 16). */
static coop_status many_run(void *ctx)
{
    api_ctx *c = ctx;
    coop_tensor **t = c->t;
    STEP(open_run(c, true));
    coop_remat *r = c->r;
    for (int i = 0; i < 120; i++) {
        coop_tensor *small;
        STEP(coop_tensor_create(c->r, 512, 1 + (uint64_t)i % 7, "S", NULL, 0, EV, &small));
    } /* 60 KiB of the 64 resident, held until coop_remat_destroy */
    STEP(coop_tensor_create(r, 24 * KiB, 10, "B", NULL, 0, 0, &t[0]));
    STEP(coop_tensor_create(r, 24 * KiB, 10, "C", NULL, 0, 0, &t[1]));
    return COOP_OK;
}

/* A collection of records (remat_collect.c) failing at each of its
 * allocations (marking stack, union-find renumbering) or at the create
 * that triggers it: the setup, 4,096 records whose garbage is reclaimed,
 * runs unarmed, so only the calls from the trigger on are failed. A held
 * tensor's released ancestor must survive whatever the collection did: B,
 * evicted in the setup, is recomputed from it afterwards. */
static coop_status collect_run(void *ctx)
{
    api_ctx *c = ctx;
    long armed = c->swept ? host_alloc_sweep_call() : 0;
    if (armed)
        host_fault_disarm();
    coop_tensor **t = c->t;
    STEP(open_run(c, false)); /* B's eviction below is no search's */
    coop_remat *r = c->r;
    coop_tensor *a;
    STEP(coop_tensor_create(r, 8 * KiB, 0, "W", NULL, 0, 0, &t[0]));
    STEP(coop_tensor_create(r, 8 * KiB, 100, "A", &t[0], 1, EV, &a));
    STEP(coop_tensor_create(r, 8 * KiB, 100, "B", &a, 1, EV, &t[1]));
    STEP(coop_tensor_release(r, a)); /* evicted at once, needed by B */
    pool_lock(r->pool);              /* B evicted as a search would */
    remat_evict_locked(r, t[1]);
    pool_unlock(r->pool);
    remat_notify_victims(r);
    while (r->num_records < 4096) { /* the next create collects */
        coop_tensor *g;
        STEP(coop_tensor_create(r, 512, 1, "S", NULL, 0, EV, &g));
        STEP(coop_tensor_release(r, g));
    }
    if (armed)
        host_fault_arm(armed);
    STEP(coop_tensor_create(r, 16 * KiB, 10, "C", &t[0], 1, EV, &t[2]));
    STEP(coop_tensor_access(r, t[1], NULL));
    return COOP_OK;
}

static void api_cleanup(void *ctx)
{
    api_ctx *c = ctx;
    if (c->r && c->counts_notices) {
        /* every eviction was told to the owner, faults or not */
        coop_remat_stats st;
        coop_remat_get_stats(c->r, &st);
        if (c->notices != st.evictions)
            fail_msg("allocation call %ld failed: %llu evictions, %llu on_evict notices",
                     host_alloc_sweep_call(), (unsigned long long)st.evictions,
                     (unsigned long long)c->notices);
    }
    if (c->r && !c->counts_notices) {
        /* every tensor left, recomputed: with its own producer's inputs
         * (recompute checks the count). Evicted directly, as no search
         * would evict them all (no notices are counted here) */
        for (int i = 0; i < TENSORS; i++) {
            coop_tensor *b = c->t[i] ? c->t[i]->base : NULL;
            if (b && b->ptr && remat_evictable(b)) {
                pool_lock(c->r->pool);
                remat_evict_locked(c->r, b);
                pool_unlock(c->r->pool);
                c->r->num_victims = 0;
            }
        }
    }
    if (c->r) {
        /* whatever a refused call left must still be usable */
        for (int i = 0; i < TENSORS; i++)
            if (c->t[i]) {
                coop_status st = coop_tensor_access(c->r, c->t[i], NULL);
                if (st != COOP_OK && st != COOP_ERR_NOMEM)
                    fail_msg("tensor %d unusable after a refused call: %s", i, coop_last_error());
            }
        coop_remat_destroy(c->r);
        c->r = NULL;
    }
    if (!c->pool)
        return;
    if (coop_pool_check(c->pool) != COOP_OK)
        fail_msg("pool broken after the sequence: %s", coop_last_error());
    coop_stats ps;
    coop_get_stats(c->pool, &ps);
    if (ps.allocated_bytes.current != 0)
        fail_msg("%llu bytes left allocated after coop_remat_destroy",
                 (unsigned long long)ps.allocated_bytes.current);
    coop_pool_destroy(c->pool);
    c->pool = NULL;
}

static void remat_api(void **state)
{
    (void)state;
    static const struct {
        coop_remat_policy policy;
        bool cow;
        const char *name;
    } runs[] = {
        {COOP_REMAT_DTR, false, "remat API dtr"},
        {COOP_REMAT_DTR, true, "remat API dtr copy-on-write"},
        {COOP_REMAT_COOP, false, "remat API coop"},
    };
    static const struct {
        coop_remat_policy policy;
        const char *name;
    } many[] = {
        {COOP_REMAT_DTR, "remat API dtr, many small"},
        {COOP_REMAT_COOP, "remat API coop, many small"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        api_ctx c = {.policy = runs[i].policy, .cow = runs[i].cow};
        assert_int_equal(api_run(&c), COOP_OK);
        coop_remat_stats st;
        coop_remat_get_stats(c.r, &st);
        if (st.evictions == 0 || st.recomputes == 0)
            fail_msg("%s: the unfaulted sequence must evict and recompute", runs[i].name);
        api_cleanup(&c);
        operation op = {runs[i].name, api_run, api_cleanup, api_cleanup, &c};
        host_alloc_report(op.name, host_alloc_sweep(&op));
    }
    {
        api_ctx c = {.policy = COOP_REMAT_COOP};
        if (collect_run(&c))
            fail_msg("collection run: %s", coop_last_error());
        coop_remat_stats st;
        coop_remat_get_stats(c.r, &st);
        if (st.records_reclaimed < 4000 || st.recomputes != 2)
            fail_msg("collection: %llu records reclaimed, %llu recomputations",
                     (unsigned long long)st.records_reclaimed, (unsigned long long)st.recomputes);
        api_cleanup(&c);
        c.swept = true;
        operation op = {"remat API coop, a collection", collect_run, api_cleanup, api_cleanup, &c};
        host_alloc_report(op.name, host_alloc_sweep(&op));
    }
    for (size_t i = 0; i < sizeof many / sizeof many[0]; i++) {
        api_ctx c = {.policy = many[i].policy};
        assert_int_equal(many_run(&c), COOP_OK);
        coop_remat_stats st;
        coop_remat_get_stats(c.r, &st);
        if (st.evictions < 48 || c.notices != st.evictions)
            fail_msg("%s: %llu evictions, %llu notices", many[i].name,
                     (unsigned long long)st.evictions, (unsigned long long)c.notices);
        api_cleanup(&c);
        operation op = {many[i].name, many_run, api_cleanup, api_cleanup, &c};
        host_alloc_report(op.name, host_alloc_sweep(&op));
    }
}

/* Eviction by whole segments (coop without VMM, alloc_in_segments) with
 * each allocation call from the request on failed in turn: eight 8 KiB
 * tensors in segments of their own fill 64 KiB, three evictable, and a
 * 24 KiB request needs their three segments. A request refused for host
 * memory has evicted nothing (evictions cannot be undone): all eight are
 * resident, no eviction counted or told; a request that goes through
 * despite a failed call (one some structure does without) evicts the three.
 * The sweep ends at the first call number the request does not reach. */
static void segment_eviction_refused_for_host_memory_evicts_nothing(void **state)
{
    (void)state;
    long refused = 0;
    for (long n = 1;; n++) {
        api_ctx c = {.policy = COOP_REMAT_COOP};
        coop_config cfg;
        coop_config_default(&cfg);
        cfg.use_vmm = false;
        cfg.page_size = 4096;
        cfg.capacity = 64 * KiB;
        cfg.segment_size = 16 * KiB;
        coop_remat_config rc = {.policy = COOP_REMAT_COOP,
                                .cheap_threshold = -1,
                                .on_evict = count_notice,
                                .recompute = recompute,
                                .user = &c};
        assert_int_equal(coop_pool_create(&cfg, &c.pool), COOP_OK);
        assert_int_equal(coop_remat_create(c.pool, &rc, &c.r), COOP_OK);
        for (int i = 0; i < 8; i++)
            assert_int_equal(
                coop_tensor_create(c.r, 8 * KiB, 10, "S", NULL, 0, i < 3 ? EV : 0, &c.t[i]),
                COOP_OK);
        coop_tensor *x = NULL;
        host_fault_arm(n);
        coop_status st = coop_tensor_create(c.r, 24 * KiB, 1, "S", NULL, 0, EV, &x);
        bool hit = host_fault_disarm();
        coop_remat_stats rs;
        coop_remat_get_stats(c.r, &rs);
        assert_int_equal(coop_pool_check(c.pool), COOP_OK);
        if (st != COOP_OK) {
            if (!hit || st != COOP_ERR_HOST_NOMEM)
                fail_msg("allocation call %ld failed: status %d, not COOP_ERR_HOST_NOMEM", n,
                         (int)st);
            for (int i = 0; i < 8; i++)
                if (!coop_tensor_resident(c.t[i]))
                    fail_msg("allocation call %ld failed: tensor %d evicted by a refused call", n,
                             i);
            assert_int_equal(rs.evictions, 0);
            assert_int_equal(c.notices, 0);
            refused++;
        } else { /* a failure some structure can do without (the search index) */
            assert_true(coop_tensor_resident(x));
            assert_int_equal(rs.evictions, 3);
            assert_int_equal(c.notices, 3);
        }
        coop_remat_destroy(c.r);
        coop_pool_destroy(c.pool);
        if (!hit) {
            print_message("segment eviction: %ld allocation calls failed in turn, %ld refused\n",
                          n - 1, refused);
            assert_true(refused > 0);
            return;
        }
    }
}

/* The pool under the remat API, without host memory for its list of
 * settled streams: empty_cache lists the streams it saw finished (16 on
 * the stack, then on the heap) before it retags their free blocks "any
 * stream"; where the list cannot grow, each stream left out is retagged
 * at once instead. Twenty streams, one free block each between live
 * guards; the host backend's stream table made before (a hold), so that
 * empty_cache's allocations are one event per stream and the list's
 * growth: the 18th, after the 17th stream's event. Once the guards go, all
 * the free space is one block: every stream was retagged. */
static void settle_without_memory_for_the_list(void **state)
{
    (void)state;
    enum { STREAMS = 20 };
    coop_config pc;
    coop_config_default(&pc);
    pc.capacity = 64u << 20;
    coop_pool *p = NULL;
    assert_int_equal(coop_pool_create(&pc, &p), COOP_OK);
    void *freed[STREAMS], *guard[STREAMS];
    for (int i = 0; i < STREAMS; i++) {
        coop_stream s = (coop_stream)(i + 1);
        assert_int_equal(coop_host_hold_stream(p, s, true), COOP_OK);
        assert_int_equal(coop_host_hold_stream(p, s, false), COOP_OK);
        freed[i] = coop_malloc(p, 64 * KiB, s, 0, NULL);
        guard[i] = coop_malloc(p, 64 * KiB, 0, 0, NULL);
        assert_non_null(freed[i]);
        assert_non_null(guard[i]);
    }
    for (int i = 0; i < STREAMS; i++)
        assert_int_equal(coop_free(p, freed[i]), COOP_OK);
    host_fault_arm(18);
    assert_int_equal(coop_empty_cache(p), COOP_OK);
    assert_true(host_fault_disarm());
    for (int i = 0; i < STREAMS; i++)
        assert_int_equal(coop_free(p, guard[i]), COOP_OK);
    coop_stats s;
    coop_get_stats(p, &s);
    assert_int_equal(s.num_free_blocks, 1);
    assert_int_equal(coop_pool_check(p), COOP_OK);
    coop_pool_destroy(p);
}

/* Host memory stays bounded over a long run of accesses that evict and
 * recompute (no new tensor): every eviction makes a union-find node, and
 * the context compacts its classes before evicting (access_storage), so
 * the host memory it holds after 40,000 accesses is what it held after
 * 4,000, within 16 KiB. Without the compaction it grew with every
 * eviction. */
static void accesses_that_evict_keep_host_memory_bounded(void **state)
{
    (void)state;
    api_ctx c = {.policy = COOP_REMAT_DTR};
    assert_int_equal(open_run(&c, false), COOP_OK);
    coop_tensor *t[12];
    assert_int_equal(coop_tensor_create(c.r, 8 * KiB, 1, "W", NULL, 0, 0, &t[0]), COOP_OK);
    for (int i = 1; i < 12; i++) /* a chain of 11: more than the pool holds */
        assert_int_equal(coop_tensor_create(c.r, 8 * KiB, 10, "A", &t[i - 1], 1, EV, &t[i]),
                         COOP_OK);
    long long at_start = 0;
    for (int step = 0; step < 40000; step++) {
        if (step == 4000)
            at_start = host_fault_bytes();
        assert_int_equal(coop_tensor_access(c.r, t[1 + (step * 5) % 11], NULL), COOP_OK);
    }
    long long grown = host_fault_bytes() - at_start;
    coop_remat_stats st;
    coop_remat_get_stats(c.r, &st);
    print_message("%llu evictions, host memory grown by %lld bytes\n",
                  (unsigned long long)st.evictions, grown);
    assert_true(st.evictions > 30000);
    assert_true(grown < 16 * 1024);
    api_cleanup(&c);
}

int main(void)
{
    host_fault_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(remat_api),
        cmocka_unit_test(settle_without_memory_for_the_list),
        cmocka_unit_test(segment_eviction_refused_for_host_memory_evicts_nothing),
        cmocka_unit_test(accesses_that_evict_keep_host_memory_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
