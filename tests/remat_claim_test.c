/*
 * One remat context used from two threads at once (include/coop.h: a
 * context is one thread's at a time). Each public remat call claims the
 * context for its thread (src/remat/remat.c, "One thread at a time"); a
 * second thread is refused with COOP_ERR_BUSY and a message naming its
 * call, the holder's call and both threads, and the context is left to the
 * holder.
 *
 * - second_thread_refused_while_one_is_inside: deterministic. The main
 *   thread accesses an evicted tensor; its recompute callback stops at a
 *   barrier while a second thread makes every call that takes the context
 *   (and the queries, coop_remat_get_stats, coop_remat_destroy): each is
 *   refused, and the context's statistics, read by the holder before and
 *   after, are unchanged. The holder's own calls from the callback keep
 *   their behaviour (queries answer; the others get the callback refusal).
 *   Once the holder returns, another thread uses the context normally.
 * - two_threads_hammering_one_context: two threads run a seeded program
 *   of creates, accesses, pins and releases on one context, each on its
 *   own tensors, under a capacity that evicts all the time. Every call
 *   returns COOP_OK or the refusal, nothing else; the callbacks' counters
 *   (plain integers: the claim orders them) match the context's
 *   statistics; the pool checks; the pool's requested bytes are the
 *   context's resident bytes and those the threads' tensors hold; once
 *   all is released and destroyed, nothing is allocated. Before the claim
 *   this crashed or broke those sums (and ThreadSanitizer, which .ci/run
 *   runs it under, reported the races); with it, the callers see
 *   refusals. COOP_TEST_SEED sets the seed (printed).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"
#include "test_seed.h"

#define KiB 1024u

static coop_pool *make_pool(uint64_t capacity)
{
    coop_config pc;
    coop_config_default(&pc);
    pc.capacity = capacity;
    pc.page_size = 64 * KiB;
    coop_pool *pool = NULL;
    assert_int_equal(coop_pool_create(&pc, &pool), COOP_OK);
    return pool;
}

/* ---- deterministic: a second thread while the first is in a callback ---- */

typedef struct refusal {
    const char *fn;
    coop_status st;    /* COOP_OK for the calls without a status */
    bool answered;     /* a query or get_stats gave something other than zero */
    char message[512]; /* coop_last_error() right after the call */
} refusal;

#define MAX_REFUSALS 16

typedef struct held {
    coop_remat *r;
    coop_tensor *a, *b; /* a: accessed (evicted), b: resident */
    pthread_barrier_t inside, done;
    bool stop; /* the callback waits for the second thread */
    pthread_t holder, other;
    refusal seen[MAX_REFUSALS];
    size_t num_seen;
    coop_remat_stats before, after; /* read by the holder, inside */
    size_t own_size;                /* the holder's query, inside */
    coop_status own_access;         /* the holder's call, inside */
    char own_message[512];
} held;

static coop_status held_recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                                  void *out, void *user)
{
    (void)producer, (void)inputs, (void)n, (void)out;
    held *h = user;
    if (!h->stop)
        return COOP_OK;
    coop_remat_get_stats(h->r, &h->before);
    pthread_barrier_wait(&h->inside); /* the other thread calls in now */
    pthread_barrier_wait(&h->done);
    coop_remat_get_stats(h->r, &h->after);
    h->own_size = coop_tensor_size(t);
    h->own_access = coop_tensor_access(h->r, h->b, NULL);
    snprintf(h->own_message, sizeof h->own_message, "%s", coop_last_error());
    return COOP_OK;
}

static void note(held *h, const char *fn, coop_status st, bool answered)
{
    refusal *s = &h->seen[h->num_seen++];
    s->fn = fn;
    s->st = st;
    s->answered = answered;
    snprintf(s->message, sizeof s->message, "%s", coop_last_error());
}

/* The second thread: every call on the context while the holder is inside. */
static void *call_in(void *arg)
{
    held *h = arg;
    h->other = pthread_self();
    pthread_barrier_wait(&h->inside);
    coop_remat *r = h->r;
    coop_tensor *t = NULL, *outs[2] = {NULL, NULL}, *in[1] = {h->b};
    size_t sizes[2] = {64 * KiB, 64 * KiB};
    void *ptr = (void *)1;
    coop_status st; /* each call before its note: argument order is unspecified */
    st = coop_tensor_create(r, 64 * KiB, 10, NULL, in, 1, COOP_TENSOR_EVICTABLE, &t);
    note(h, "coop_tensor_create", st, t != NULL);
    st = coop_tensor_create_outputs(r, 2, sizes, 10, NULL, NULL, 0, 0, outs);
    note(h, "coop_tensor_create_outputs", st, outs[0] != NULL);
    st = coop_tensor_alias(r, h->b, &t);
    note(h, "coop_tensor_alias", st, t != NULL);
    st = coop_tensor_access(r, h->b, &ptr);
    note(h, "coop_tensor_access", st, ptr != NULL);
    ptr = (void *)1;
    st = coop_tensor_pin(r, h->b, &ptr);
    note(h, "coop_tensor_pin", st, ptr != NULL);
    st = coop_tensor_unpin(r, h->b);
    note(h, "coop_tensor_unpin", st, false);
    void *old = (void *)1; /* cleared even when refused */
    st = coop_tensor_mutate(r, h->b, 10, NULL, NULL, 0, &old);
    note(h, "coop_tensor_mutate", st, old != NULL);
    st = coop_tensor_release(r, h->b);
    note(h, "coop_tensor_release", st, false);
    coop_remat_stats stats;
    memset(&stats, 0xff, sizeof stats);
    coop_remat_get_stats(r, &stats);
    note(h, "coop_remat_get_stats", COOP_OK, stats.clock != 0 || stats.resident_bytes != 0);
    bool answered = coop_tensor_size(h->b) != 0;
    note(h, "coop_tensor_size", COOP_OK, answered);
    answered = coop_tensor_recomputes(h->a) != 0;
    note(h, "coop_tensor_recomputes", COOP_OK, answered);
    answered = coop_tensor_resident(h->b);
    note(h, "coop_tensor_resident", COOP_OK, answered);
    answered = coop_tensor_data(h->b) != NULL;
    note(h, "coop_tensor_data", COOP_OK, answered);
    coop_remat_destroy(r); /* refused: the holder still uses it */
    note(h, "coop_remat_destroy", COOP_OK, false);
    pthread_barrier_wait(&h->done);
    return NULL;
}

/* After the holder returned: another thread uses the context as its own. */
static void *use_after(void *arg)
{
    held *h = arg;
    void *ptr = NULL;
    if (coop_tensor_access(h->r, h->a, &ptr) != COOP_OK || !ptr)
        return (void *)1;
    if (coop_tensor_release(h->r, h->a) != COOP_OK)
        return (void *)2;
    return NULL;
}

/* ---- every call, queries too, gives the context back when it returns ---- */

typedef struct after_calls {
    coop_remat *r;
    coop_tensor *t;
    coop_status access, release;
} after_calls;

static void *use_from_another_thread(void *arg)
{
    after_calls *a = arg;
    void *ptr = NULL;
    a->access = coop_tensor_access(a->r, a->t, &ptr);
    a->release = coop_tensor_release(a->r, a->t);
    return NULL;
}

/* The main thread makes each call of the API once (the queries and the
 * statistics included), then a second thread uses the context: nothing
 * the main thread called kept it claimed. */
static void test_each_call_releases_the_context(void **state)
{
    (void)state;
    coop_pool *pool = make_pool(4096 * KiB);
    coop_remat_config rc = {.policy = COOP_REMAT_COOP, .recompute = held_recompute};
    held h0 = {0};
    rc.user = &h0;
    coop_remat *r = NULL;
    assert_int_equal(coop_remat_create(pool, &rc, &r), COOP_OK);
    coop_tensor *t = NULL, *v = NULL;
    assert_int_equal(coop_tensor_create(r, 64 * KiB, 10, NULL, NULL, 0, 0, &t), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, t, &v), COOP_OK);
    void *ptr = NULL;
    assert_int_equal(coop_tensor_pin(r, t, &ptr), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, t), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, t, 10, NULL, NULL, 0, NULL), COOP_OK);
    assert_int_equal(coop_tensor_size(t), 64 * KiB);
    assert_int_equal(coop_tensor_recomputes(t), 0);
    assert_true(coop_tensor_resident(t));
    assert_non_null(coop_tensor_data(t));
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(coop_tensor_release(r, v), COOP_OK);
    after_calls a = {r, t, COOP_ERR_INVALID, COOP_ERR_INVALID};
    pthread_t other;
    assert_int_equal(pthread_create(&other, NULL, use_from_another_thread, &a), 0);
    assert_int_equal(pthread_join(other, NULL), 0);
    assert_int_equal(a.access, COOP_OK);
    assert_int_equal(a.release, COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

static void test_second_thread_refused_while_one_is_inside(void **state)
{
    (void)state;
    /* room for one of the two 512 KiB tensors: b evicts a */
    coop_pool *pool = make_pool(768 * KiB);
    held *h = calloc(1, sizeof *h);
    assert_non_null(h);
    coop_remat_config rc = {.policy = COOP_REMAT_COOP, .recompute = held_recompute, .user = h};
    assert_int_equal(coop_remat_create(pool, &rc, &h->r), COOP_OK);
    assert_int_equal(
        coop_tensor_create(h->r, 512 * KiB, 100, NULL, NULL, 0, COOP_TENSOR_EVICTABLE, &h->a),
        COOP_OK);
    coop_tensor *c = NULL; /* evicts a, then freed: room for a beside b */
    assert_int_equal(
        coop_tensor_create(h->r, 512 * KiB, 100, NULL, NULL, 0, COOP_TENSOR_EVICTABLE, &c),
        COOP_OK);
    assert_false(coop_tensor_resident(h->a));
    assert_int_equal(coop_tensor_release(h->r, c), COOP_OK);
    assert_int_equal(
        coop_tensor_create(h->r, 128 * KiB, 100, NULL, NULL, 0, COOP_TENSOR_EVICTABLE, &h->b),
        COOP_OK);
    pthread_barrier_init(&h->inside, NULL, 2);
    pthread_barrier_init(&h->done, NULL, 2);
    h->stop = true;
    h->holder = pthread_self();
    pthread_t other;
    assert_int_equal(pthread_create(&other, NULL, call_in, h), 0);
    void *ptr = NULL;
    assert_int_equal(coop_tensor_access(h->r, h->a, &ptr), COOP_OK); /* the callback waits */
    assert_non_null(ptr);
    assert_int_equal(pthread_join(other, NULL), 0);
    h->stop = false;

    char holder[96], other_name[64];
    snprintf(holder, sizeof holder, "thread %#lx, in coop_tensor_access", (unsigned long)h->holder);
    snprintf(other_name, sizeof other_name, "this is thread %#lx", (unsigned long)h->other);
    assert_int_equal(h->num_seen, 14);
    for (size_t i = 0; i < h->num_seen; i++) {
        refusal *s = &h->seen[i];
        if (strncmp(s->message, s->fn, strlen(s->fn)) || !strstr(s->message, holder) ||
            !strstr(s->message, other_name) || !strstr(s->message, "in use by another thread"))
            fail_msg("%s: message \"%s\" lacks the call or the threads (%s; %s)", s->fn, s->message,
                     holder, other_name);
        if (s->answered)
            fail_msg("%s: answered while another thread held the context", s->fn);
        if (i < 8 && s->st != COOP_ERR_BUSY)
            fail_msg("%s: status %d, not COOP_ERR_BUSY", s->fn, (int)s->st);
    }
    /* nothing changed while the second thread called in */
    assert_memory_equal(&h->before, &h->after, sizeof h->before);
    /* the holder's own calls from inside: as before the claim */
    assert_int_equal(h->own_size, 512 * KiB);
    assert_int_equal(h->own_access, COOP_ERR_BUSY);
    assert_non_null(strstr(h->own_message, "called from inside a coop_remat callback"));

    /* the context was not destroyed; another thread now uses it */
    assert_true(coop_tensor_resident(h->a));
    assert_true(coop_tensor_resident(h->b));
    void *rc_thread = (void *)-1;
    assert_int_equal(pthread_create(&other, NULL, use_after, h), 0);
    assert_int_equal(pthread_join(other, &rc_thread), 0);
    assert_null(rc_thread);
    assert_int_equal(coop_tensor_release(h->r, h->b), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(h->r);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocation.current, 0);
    pthread_barrier_destroy(&h->inside);
    pthread_barrier_destroy(&h->done);
    free(h);
    coop_pool_destroy(pool);
}

/* ---- two threads hammering one context ---- */

/* calls each thread gets done: a refused thread tries again, so both run
 * to the end, in the gaps between the other's calls */
#define HAMMER_CALLS 60000
#define HAMMER_TRIES 50000000 /* steps before a thread gives up (starved) */
#define HAMMER_HANDLES 12

typedef struct shared_ctx {
    coop_remat *r;
    /* the callbacks' counts: plain integers, written only under the claim */
    uint64_t evicted, recomputed;
    pthread_barrier_t start;
} shared_ctx;

typedef struct hammer {
    shared_ctx *c;
    uint64_t rng;
    coop_tensor *h[HAMMER_HANDLES];
    bool pinned[HAMMER_HANDLES];
    uint64_t ok, refused;
    uint64_t work; /* the spin between calls, kept so that it is not optimized out */
    char bad[512]; /* the first unexpected result, if any */
} hammer;

static uint64_t hammer_seed; /* main reads it first: a bad COOP_TEST_SEED stops it at once */

static void hammer_evict(coop_tensor *t, void *user)
{
    (void)t;
    ((shared_ctx *)user)->evicted++;
}

static coop_status hammer_recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                                    void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out;
    ((shared_ctx *)user)->recomputed++;
    return COOP_OK;
}

/* Whether the call was done (COOP_OK); the refusal, with its message, and
 * no room (every tensor pinned) are expected failures; anything else is
 * kept in w->bad. */
static bool expected(hammer *w, coop_status st, const char *fn)
{
    if (st == COOP_OK) {
        w->ok++;
        return true;
    }
    if (st == COOP_ERR_NOMEM)
        return false;
    if (st == COOP_ERR_BUSY && strstr(coop_last_error(), "in use by another thread")) {
        w->refused++;
        return false;
    }
    if (!w->bad[0])
        snprintf(w->bad, sizeof w->bad, "%s: status %d: %s", fn, (int)st, coop_last_error());
    return false;
}

/* A call the thread must get through (its own handle's release or unpin):
 * retried while refused. */
static void until_done(hammer *w, coop_status (*call)(coop_remat *, coop_tensor *), coop_tensor *t,
                       const char *fn)
{
    coop_status st;
    while ((st = call(w->c->r, t)) == COOP_ERR_BUSY &&
           strstr(coop_last_error(), "in use by another thread"))
        w->refused++;
    (void)expected(w, st, fn);
}

static void *hammer_thread(void *arg)
{
    hammer *w = arg;
    coop_remat *r = w->c->r;
    pthread_barrier_wait(&w->c->start);
    for (uint64_t tries = 0; w->ok < HAMMER_CALLS && !w->bad[0]; tries++) {
        if (tries == HAMMER_TRIES) {
            snprintf(w->bad, sizeof w->bad, "%llu calls done in %llu steps: starved",
                     (unsigned long long)w->ok, (unsigned long long)tries);
            break;
        }
        uint64_t x = test_xorshift64star(&w->rng);
        /* the program's own work between calls, up to about a microsecond:
         * without it the thread inside takes the context again before the
         * other's next try, and the two never take turns */
        for (uint64_t spin = x % 256, y = x; spin; spin--)
            w->work += (y = test_xorshift64(&y));
        int i = (int)(x % HAMMER_HANDLES);
        coop_tensor *t = w->h[i];
        switch ((x >> 8) % 4) {
        case 0: /* create into an empty slot, else release it */
            if (!t) {
                size_t size = (size_t)(16 + (x >> 16) % 113) * KiB;
                coop_tensor *made = NULL;
                if (expected(w,
                             coop_tensor_create(r, size, 1 + (x >> 24) % 1000, NULL, NULL, 0,
                                                COOP_TENSOR_EVICTABLE, &made),
                             "coop_tensor_create"))
                    w->h[i] = made;
            } else if (!w->pinned[i]) {
                until_done(w, coop_tensor_release, t, "coop_tensor_release");
                w->h[i] = NULL;
            }
            break;
        case 1: /* access: recomputes an evicted one */
            if (t)
                (void)expected(w, coop_tensor_access(r, t, NULL), "coop_tensor_access");
            break;
        case 2: /* pin, or unpin */
            if (t && !w->pinned[i]) {
                w->pinned[i] = expected(w, coop_tensor_pin(r, t, NULL), "coop_tensor_pin");
            } else if (t) {
                until_done(w, coop_tensor_unpin, t, "coop_tensor_unpin");
                w->pinned[i] = false;
            }
            break;
        default: { /* the queries and the statistics: read, never trusted */
            coop_remat_stats s;
            coop_remat_get_stats(r, &s);
            if (t)
                (void)coop_tensor_resident(t);
            break;
        }
        }
    }
    return NULL;
}

static void test_two_threads_hammering_one_context(void **state)
{
    (void)state;
    uint64_t seed = hammer_seed;
    coop_pool *pool = make_pool(1024 * KiB);
    shared_ctx c = {0};
    coop_remat_config rc = {.policy = COOP_REMAT_COOP,
                            .on_evict = hammer_evict,
                            .recompute = hammer_recompute,
                            .user = &c};
    assert_int_equal(coop_remat_create(pool, &rc, &c.r), COOP_OK);
    pthread_barrier_init(&c.start, NULL, 2);
    hammer w[2];
    memset(w, 0, sizeof w);
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        w[k].c = &c;
        w[k].rng = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
        assert_int_equal(pthread_create(&th[k], NULL, hammer_thread, &w[k]), 0);
    }
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_join(th[k], NULL), 0);
    for (int k = 0; k < 2; k++)
        if (w[k].bad[0])
            fail_msg("thread %d: %s", k, w[k].bad);
    fprintf(stderr, "remat_claim_test: calls done %llu + %llu, refused %llu + %llu (%llx)\n",
            (unsigned long long)w[0].ok, (unsigned long long)w[1].ok,
            (unsigned long long)w[0].refused, (unsigned long long)w[1].refused,
            (unsigned long long)((w[0].work ^ w[1].work) & 0xf));

    /* the context is whole: its counts, the pool's, the tensors' */
    coop_remat_stats s;
    coop_remat_get_stats(c.r, &s);
    assert_int_equal(s.evictions, c.evicted);
    assert_int_equal(s.recomputes, c.recomputed);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    uint64_t resident = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < HAMMER_HANDLES; i++)
            if (w[k].h[i] && coop_tensor_resident(w[k].h[i]))
                resident += coop_tensor_size(w[k].h[i]);
    assert_int_equal(s.resident_bytes, resident);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal((uint64_t)ps.requested_bytes.current, s.resident_bytes);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < HAMMER_HANDLES; i++) {
            if (!w[k].h[i])
                continue;
            if (w[k].pinned[i])
                assert_int_equal(coop_tensor_unpin(c.r, w[k].h[i]), COOP_OK);
            assert_int_equal(coop_tensor_release(c.r, w[k].h[i]), COOP_OK);
        }
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocation.current, 0);
    coop_remat_destroy(c.r);
    pthread_barrier_destroy(&c.start);
    coop_pool_destroy(pool);
}

int main(void)
{
    hammer_seed = test_seed("remat_claim_test", test_seed_from_clock());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_thread_refused_while_one_is_inside),
        cmocka_unit_test(test_each_call_releases_the_context),
        cmocka_unit_test(test_two_threads_hammering_one_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
