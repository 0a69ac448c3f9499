/*
 * Four threads share one pool, each allocating and freeing on its own
 * stream (and recording uses on the others'), with coop_pool_check from
 * every thread along the way, under capacity pressure: the out-of-memory
 * path (pending frees processed, idle pages released, retry) runs
 * thousands of times while the other threads allocate. At the end every thread's live blocks must
 * be distinct, non-overlapping allocated blocks of the pool, and freeing
 * them all must empty it. Twice: a VMM pool, then a pool of 2 MiB segments
 * (no VMM: idle free segments released, requests of 1 MiB and more in
 * segments of their own). COOP_TEST_SEED sets the seed.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "coop.h"
#include "test_seed.h"

#define THREADS 4
#define OPS 40000 /* per thread, each pool */
#define LIVE 64
#define MiB (UINT64_C(1) << 20)

typedef struct worker {
    coop_pool *pool;
    int id;
    int ops;
    uint64_t rng;
    void *live[LIVE];
    size_t size[LIVE];
    int failures;
    char error[256];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    coop_stream own = (coop_stream)w->id + 1;
    for (int op = 0; op < w->ops && !w->failures; op++) {
        int slot = (int)(test_xorshift64star(&w->rng) % LIVE);
        uint64_t r = test_xorshift64star(&w->rng) % 100;
        if (w->live[slot]) {
            if (r < 10) {
                coop_stream other = 1 + test_xorshift64star(&w->rng) % THREADS;
                if (coop_record_stream(w->pool, w->live[slot], other) != COOP_OK) {
                    snprintf(w->error, sizeof w->error, "record_stream: %s", coop_last_error());
                    w->failures++;
                }
                continue;
            }
            if (coop_free(w->pool, w->live[slot]) != COOP_OK) {
                snprintf(w->error, sizeof w->error, "free: %s", coop_last_error());
                w->failures++;
            }
            w->live[slot] = NULL;
        } else {
            size_t size = (size_t)1 << (9 + test_xorshift64star(&w->rng) % 13);
            size += test_xorshift64star(&w->rng) % size;
            coop_status st;
            w->live[slot] = coop_malloc(w->pool, size, own, r < 30 ? COOP_ALLOC_HIGH : 0, &st);
            w->size[slot] = size;
            if (!w->live[slot] && st != COOP_ERR_NOMEM) {
                snprintf(w->error, sizeof w->error, "malloc: %s", coop_last_error());
                w->failures++;
            }
        }
        if (op % 5000 == 0 && coop_pool_check(w->pool) != COOP_OK) {
            snprintf(w->error, sizeof w->error, "check: %s", coop_last_error());
            w->failures++;
        }
        if (op % 3000 == 0)
            coop_empty_cache(w->pool);
    }
    return NULL;
}

typedef struct range {
    uintptr_t lo, hi;
} range;

static int by_lo(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static int count_allocated(const coop_block_info *b, void *ctx)
{
    *(int *)ctx += b->state == COOP_BLOCK_ALLOCATED;
    return 0;
}

static uint64_t seed;

static void run(bool vmm, int ops)
{
    coop_config c;
    coop_config_default(&c);
    c.capacity = 48 * MiB; /* below the ~80 MiB the threads keep live at their peak */
    c.page_size = 64 * 1024;
    c.use_vmm = vmm;
    c.segment_size = 2 * MiB; /* (segments) requests run up to 4 MiB */
    coop_pool *pool;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    static worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        /* each thread's seed derived from the one printed (and the mode) */
        w[i] = (worker){
            .pool = pool, .id = i, .ops = ops, .rng = (seed + 1 + !vmm) * (uint64_t)(i + 7) | 1};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        if (w[i].failures)
            fail_msg("thread %d: %s", i, w[i].error);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    /* Every live block is allocated in the pool, and no two overlap. */
    range all[THREADS * LIVE];
    int n = 0;
    for (int i = 0; i < THREADS; i++)
        for (int s = 0; s < LIVE; s++)
            if (w[i].live[s])
                all[n++] = (range){(uintptr_t)w[i].live[s], (uintptr_t)w[i].live[s] + w[i].size[s]};
    qsort(all, (size_t)n, sizeof all[0], by_lo);
    for (int i = 1; i < n; i++)
        if (all[i].lo < all[i - 1].hi)
            fail_msg("blocks %#lx and %#lx overlap", (unsigned long)all[i - 1].lo,
                     (unsigned long)all[i].lo);
    int allocated = 0;
    coop_walk(pool, NULL, count_allocated, &allocated);
    assert_int_equal(allocated, n);
    coop_stats s;
    coop_get_stats(pool, &s);
    assert_int_equal(s.allocation.current, n);
    for (int i = 0; i < THREADS; i++)
        for (int k = 0; k < LIVE; k++)
            if (w[i].live[k])
                assert_int_equal(coop_free(pool, w[i].live[k]), COOP_OK);
    coop_free(pool, coop_malloc(pool, 512, 1, 0, NULL)); /* completes pending frees */
    assert_int_equal(coop_empty_cache(pool), COOP_OK);
    coop_get_stats(pool, &s);
    assert_int_equal(s.active.current, 0);
    assert_int_equal(s.reserved_bytes.current, 0);
    /* The capacity is below what the threads keep live at their peak, so
     * that the out-of-memory path (release idle pages, retry) runs while
     * other threads allocate: with 256 MiB it never did (0 retries). */
    assert_true(s.num_alloc_retries > 0);
    printf("stress: %s: %d threads x %d ops, %llu retries, %llu ooms, peak %lld blocks, %lld "
           "segments\n",
           vmm ? "vmm" : "segments", THREADS, ops, (unsigned long long)s.num_alloc_retries,
           (unsigned long long)s.num_ooms, (long long)s.allocation.peak, (long long)s.segment.peak);
    coop_pool_destroy(pool);
}

static void test_four_threads(void **state)
{
    (void)state;
    run(true, OPS);
}

static void test_four_threads_segments(void **state)
{
    (void)state;
    run(false, OPS);
}

int main(void)
{
    seed = test_seed("stress_test", test_seed_from_clock());
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_four_threads),
                                       cmocka_unit_test(test_four_threads_segments)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
