/*
 * Thread-safety audit of the public API (the ThreadSanitizer pass of .ci/run
 * runs it): every call that include/coop.h calls thread-safe, made from
 * several threads at once, so that TSan sees each one beside the others.
 * stress_test and stress_torch_abi_test cover the allocation paths; here
 * the rest races with them too.
 *
 * test_pool_calls: four threads on one pool mix malloc / free /
 * record_stream with the statistics getters, reset_peak_stats, walk,
 * pool_check, pool_config, set_capacity, empty_cache, forget_stream, the
 * host backend's stream holds, fault injection and backend_calls; thread 0
 * also drives a rematerialization context on the pool (a context is one
 * thread's, the pool stays shared), which evicts and recomputes under the
 * capacity while the others allocate.
 *
 * test_torch_calls (the ABI's state is the process's: it runs first, on a
 * fresh ABI): six threads start together, so that coop_torch_configure,
 * coop_torch_init, coop_torch_memory_fraction, coop_torch_record_history
 * and coop_torch_settings race with the first mallocs that create the
 * pools; then they mix mallocs and frees with fractions, history on and
 * off, snapshots, empty_cache, forget_stream, record_stream and the error
 * getters (coop_torch_last_error, coop_torch_failed_mallocs).
 *
 * Whatever the interleaving, each call's outcome must be one of those it
 * documents, and at the end every pool's invariants hold and, everything
 * freed, nothing is allocated. Each thread's random choices derive from
 * COOP_TEST_SEED (printed).
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

#define MiB (UINT64_C(1) << 20)
#define LIVE 32

typedef struct worker {
    int id;
    uint64_t rng;
    coop_pool *pool;
    void *live[LIVE];
    size_t size[LIVE];
    int device[LIVE];
    char error[256];
} worker;

static pthread_barrier_t start_line;

static uint64_t pick(worker *w, uint64_t n)
{
    return test_xorshift64star(&w->rng) % n;
}

/* Records the first unexpected outcome of a thread. */
static void bad(worker *w, const char *call, coop_status st)
{
    if (!w->error[0])
        snprintf(w->error, sizeof w->error, "%s: %s (%s)", call, coop_strerror(st),
                 coop_last_error());
}

static int count_blocks(const coop_block_info *b, void *ctx)
{
    (void)b;
    ++*(size_t *)ctx;
    return 0;
}

/* ---- One pool, every pool call ---- */

#define POOL_THREADS 4
#define POOL_OPS 3000
#define TENSORS 16

/* Thread 0's rematerialization context (a context is one thread's; the
 * pool stays shared) and its tensors. */
static coop_remat *remat;
static coop_tensor *tensors[TENSORS];

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t num_inputs,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)num_inputs, (void)out, (void)user;
    return COOP_OK;
}

/* Creates, accesses or releases one of thread 0's tensors (4 MiB each, so
 * that the pool's capacity makes the context evict while the other
 * threads allocate). */
static void remat_op(worker *w)
{
    int i = (int)pick(w, TENSORS);
    coop_status st;
    if (!tensors[i]) {
        coop_tensor *input = tensors[(i + 1) % TENSORS];
        void *ptr; /* an input must be resident: recomputed if evicted */
        if (input && coop_tensor_access(remat, input, &ptr) != COOP_OK)
            input = NULL;
        st = coop_tensor_create(remat, 4 * MiB, 1000 + pick(w, 1000), NULL, &input, input ? 1 : 0,
                                COOP_TENSOR_EVICTABLE, &tensors[i]);
        if (st != COOP_OK && st != COOP_ERR_NOMEM && st != COOP_ERR_BACKEND)
            bad(w, "coop_tensor_create", st);
    } else if (pick(w, 2)) {
        void *ptr;
        st = coop_tensor_access(remat, tensors[i], &ptr);
        if (st != COOP_OK && st != COOP_ERR_NOMEM && st != COOP_ERR_BACKEND)
            bad(w, "coop_tensor_access", st);
    } else {
        if ((st = coop_tensor_release(remat, tensors[i])) != COOP_OK)
            bad(w, "coop_tensor_release", st);
        tensors[i] = NULL;
    }
}

static void pool_op(worker *w)
{
    coop_pool *pool = w->pool;
    coop_stream own = (coop_stream)w->id + 1;
    coop_status st;
    int slot = (int)pick(w, LIVE);
    if (w->id == 0 && pick(w, 4) == 0) {
        remat_op(w);
        return;
    }
    switch (pick(w, 16)) {
    case 0: { /* a stream of this thread's own, used, then forgotten */
        coop_stream temp = 0x1000 + (coop_stream)w->id;
        void *p = coop_malloc(pool, 4096, temp, 0, &st);
        if (!p && st != COOP_ERR_NOMEM && st != COOP_ERR_BACKEND)
            bad(w, "malloc on a temporary stream", st);
        if ((st = coop_free(pool, p)) != COOP_OK)
            bad(w, "free on a temporary stream", st);
        st = coop_forget_stream(pool, temp);
        if (st != COOP_OK && st != COOP_ERR_BUSY && st != COOP_ERR_BACKEND)
            bad(w, "forget_stream", st);
        break;
    }
    case 1: {
        coop_stats s;
        coop_get_stats(pool, &s);
        if (s.allocation.current < 0 || s.allocated_bytes.current > s.reserved_bytes.current ||
            s.allocation.peak < s.allocation.current)
            bad(w, "get_stats: inconsistent counters", COOP_OK);
        break;
    }
    case 2:
        coop_reset_peak_stats(pool);
        break;
    case 3: {
        size_t n = 0;
        if ((st = coop_walk(pool, NULL, count_blocks, &n)) != COOP_OK)
            bad(w, "walk", st);
        break;
    }
    case 4:
        if ((st = coop_pool_check(pool)) != COOP_OK)
            bad(w, "pool_check", st);
        break;
    case 5: {
        coop_config c;
        coop_pool_config(pool, &c);
        if (c.capacity != 32 * MiB && c.capacity != 64 * MiB)
            bad(w, "pool_config: a capacity never set", COOP_OK);
        break;
    }
    case 6:
        st = coop_set_capacity(pool, pick(w, 2) ? 32 * MiB : 64 * MiB);
        if (st != COOP_OK && st != COOP_ERR_NOMEM && st != COOP_ERR_BACKEND)
            bad(w, "set_capacity", st);
        break;
    case 7:
        st = coop_empty_cache(pool);
        if (st != COOP_OK && st != COOP_ERR_BACKEND)
            bad(w, "empty_cache", st);
        break;
    case 8: /* held a moment: a wait for a held stream fails, a busy one's ends the hold */
        if ((st = coop_host_hold_stream(pool, own, true)) != COOP_OK ||
            (st = coop_host_busy_stream(pool, own)) != COOP_OK ||
            (st = coop_host_hold_stream(pool, own, false)) != COOP_OK)
            bad(w, "host stream hold", st);
        break;
    case 9:
        if ((st = coop_inject_fault(pool, COOP_FAULT_MAP | COOP_FAULT_EVENT, 1 + pick(w, 200))) !=
            COOP_OK)
            bad(w, "inject_fault", st);
        (void)coop_backend_calls(pool, COOP_FAULT_ALL);
        break;
    case 10:
        if (w->live[slot] &&
            (st = coop_record_stream(pool, w->live[slot], 1 + pick(w, POOL_THREADS))) != COOP_OK)
            bad(w, "record_stream", st);
        break;
    default:
        if (w->live[slot]) {
            if ((st = coop_free(pool, w->live[slot])) != COOP_OK)
                bad(w, "free", st);
            w->live[slot] = NULL;
        } else {
            size_t size = (size_t)512 << pick(w, 12);
            w->live[slot] = coop_malloc(pool, size, own, pick(w, 2) ? COOP_ALLOC_HIGH : 0, &st);
            if (!w->live[slot] && st != COOP_ERR_NOMEM && st != COOP_ERR_BACKEND)
                bad(w, "malloc", st);
        }
    }
}

static void *pool_worker(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(&start_line);
    for (int op = 0; op < POOL_OPS && !w->error[0]; op++)
        pool_op(w);
    return NULL;
}

static void test_pool_calls(void **state)
{
    (void)state;
    uint64_t seed = test_seed("threads_api_test", test_seed_from_clock());
    coop_config c;
    coop_config_default(&c);
    c.capacity = 64 * MiB;
    c.page_size = 64 * 1024;
    coop_pool *pool;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    coop_remat_config rc = {.policy = COOP_REMAT_COOP, .recompute = recompute};
    assert_int_equal(coop_remat_create(pool, &rc, &remat), COOP_OK);
    static worker w[POOL_THREADS];
    pthread_t t[POOL_THREADS];
    assert_int_equal(pthread_barrier_init(&start_line, NULL, POOL_THREADS), 0);
    for (int i = 0; i < POOL_THREADS; i++) {
        w[i] = (worker){.id = i, .pool = pool, .rng = (seed + 1) * (uint64_t)(2 * i + 3) | 1};
        assert_int_equal(pthread_create(&t[i], NULL, pool_worker, &w[i]), 0);
    }
    for (int i = 0; i < POOL_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start_line);
    for (int i = 0; i < POOL_THREADS; i++)
        if (w[i].error[0])
            fail_msg("thread %d: %s", i, w[i].error);
    assert_int_equal(coop_inject_fault(pool, COOP_FAULT_ALL, 0), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_stats rs;
    coop_remat_get_stats(remat, &rs);
    printf("remat: %llu evictions, %llu recomputes\n", (unsigned long long)rs.evictions,
           (unsigned long long)rs.recomputes);
    for (int i = 0; i < TENSORS; i++)
        if (tensors[i])
            assert_int_equal(coop_tensor_release(remat, tensors[i]), COOP_OK);
    coop_remat_destroy(remat);
    for (int i = 0; i < POOL_THREADS; i++)
        for (int k = 0; k < LIVE; k++)
            assert_int_equal(coop_free(pool, w[i].live[k]), COOP_OK);
    coop_stats s;
    coop_get_stats(pool, &s);
    assert_int_equal(s.allocation.current, 0);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    printf("pool: %lld allocations, %llu out of memory, %llu retries\n",
           (long long)s.allocation.allocated, (unsigned long long)s.num_ooms,
           (unsigned long long)s.num_alloc_retries);
    coop_pool_destroy(pool);
}

/* ---- The PyTorch ABI, from its first call on ---- */

#define TORCH_THREADS 6
#define TORCH_OPS 1500
#define TORCH_DEVICES 2
/* COOP_ALLOC_CONF, and what coop_torch_configure sets: the same pools
 * either way (the history bound differs), whichever call comes first */
#define TORCH_ENV "backend:host,capacity:64M,page:64K"
#define TORCH_CONF "backend:host,capacity:64M,page:64K,history:512"

static void *torch_stream(worker *w)
{
    return (void *)(uintptr_t)(0x100 + pick(w, 3));
}

/* The calls that race with the first mallocs: each thread starts with one. */
static void torch_first_call(worker *w)
{
    char buf[256];
    coop_status st;
    switch (w->id) {
    case 0:
        st = coop_torch_configure(TORCH_CONF);
        if (st != COOP_OK && st != COOP_ERR_BUSY)
            bad(w, "coop_torch_configure", st);
        break;
    case 1:
        coop_torch_init(TORCH_DEVICES);
        break;
    case 2:
        coop_torch_memory_fraction(0.5, 0);
        break;
    case 3:
        coop_torch_record_history(256);
        break;
    case 4:
        if ((st = coop_torch_settings(buf, sizeof buf)) != COOP_OK)
            bad(w, "coop_torch_settings", st);
        break;
    default:
        break;
    }
}

static void torch_op(worker *w)
{
    char buf[256];
    coop_status st;
    int slot = (int)pick(w, LIVE);
    switch (pick(w, 24)) {
    case 0:
        /* 1/16: below what the threads keep live, so that the limit waits
         * for frees (and mallocs fail, counted) */
        coop_torch_memory_fraction(pick(w, 2) ? 0.0625 : 1.0, (int)pick(w, TORCH_DEVICES));
        break;
    case 1:
        coop_torch_record_history(pick(w, 2) ? 64 : 0);
        break;
    case 2:
        coop_torch_clear_history();
        break;
    case 3: {
        coop_torch_snapshot *snap = NULL;
        if ((st = coop_torch_snapshot_take((int)pick(w, TORCH_DEVICES), &snap)) != COOP_OK)
            bad(w, "coop_torch_snapshot_take", st);
        coop_torch_snapshot_free(snap);
        break;
    }
    case 4:
        coop_torch_empty_cache();
        break;
    case 5: /* a stream no block was ever used on */
        if ((st = coop_torch_forget_stream((void *)(uintptr_t)0x999)) != COOP_OK)
            bad(w, "coop_torch_forget_stream", st);
        break;
    case 6:
        (void)coop_torch_last_error(buf, sizeof buf);
        (void)coop_torch_failed_mallocs((int)pick(w, TORCH_DEVICES), buf, sizeof buf);
        break;
    case 7:
        if ((st = coop_torch_settings(buf, sizeof buf)) != COOP_OK)
            bad(w, "coop_torch_settings", st);
        if ((st = coop_torch_normalize_conf(TORCH_CONF, buf, sizeof buf)) != COOP_OK)
            bad(w, "coop_torch_normalize_conf", st);
        break;
    case 8:
        st = coop_torch_configure(TORCH_CONF); /* refused once a pool exists */
        if (st != COOP_OK && st != COOP_ERR_BUSY)
            bad(w, "coop_torch_configure", st);
        coop_torch_init(TORCH_DEVICES);
        break;
    case 9:
        if (w->live[slot])
            coop_torch_record_stream(w->live[slot], torch_stream(w));
        break;
    case 10: {
        coop_pool *pool = coop_torch_pool((int)pick(w, TORCH_DEVICES));
        coop_stats s;
        coop_get_stats(pool, &s);
        break;
    }
    default:
        if (w->live[slot]) {
            coop_torch_free(w->live[slot], w->size[slot], w->device[slot], (void *)0x100);
            w->live[slot] = NULL;
        } else {
            w->size[slot] = (size_t)512 << pick(w, 12);
            w->device[slot] = (int)pick(w, TORCH_DEVICES);
            /* NULL when out of memory under a fraction: counted, not an error here */
            w->live[slot] = coop_torch_malloc(w->size[slot], w->device[slot], (void *)0x100);
        }
    }
}

static void *torch_worker(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(&start_line);
    torch_first_call(w);
    for (int op = 0; op < TORCH_OPS && !w->error[0]; op++)
        torch_op(w);
    return NULL;
}

static void test_torch_calls(void **state)
{
    (void)state;
    uint64_t seed = test_seed("threads_api_test", test_seed_from_clock());
    assert_int_equal(setenv("COOP_ALLOC_CONF", TORCH_ENV, 1), 0);
    assert_null(coop_torch_pool(0)); /* the ABI's first use is below */
    static worker w[TORCH_THREADS];
    pthread_t t[TORCH_THREADS];
    assert_int_equal(pthread_barrier_init(&start_line, NULL, TORCH_THREADS), 0);
    for (int i = 0; i < TORCH_THREADS; i++) {
        w[i] = (worker){.id = i, .rng = (seed + 1) * (uint64_t)(2 * i + 5) | 1};
        assert_int_equal(pthread_create(&t[i], NULL, torch_worker, &w[i]), 0);
    }
    for (int i = 0; i < TORCH_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start_line);
    for (int i = 0; i < TORCH_THREADS; i++)
        if (w[i].error[0])
            fail_msg("thread %d: %s", i, w[i].error);
    for (int i = 0; i < TORCH_THREADS; i++)
        for (int k = 0; k < LIVE; k++)
            if (w[i].live[k])
                coop_torch_free(w[i].live[k], w[i].size[k], w[i].device[k], (void *)0x100);
    char buf[256];
    assert_int_equal(coop_torch_settings(buf, sizeof buf), COOP_OK);
    assert_non_null(strstr(buf, "backend:host,capacity:67108864"));
    for (int d = 0; d < TORCH_DEVICES; d++) {
        coop_pool *pool = coop_torch_pool(d);
        assert_non_null(pool);
        assert_int_equal(coop_pool_check(pool), COOP_OK);
        coop_stats s;
        coop_get_stats(pool, &s);
        assert_int_equal(s.allocation.current, 0);
        printf("device %d: %lld allocations, %llu failed, %llu retries\n", d,
               (long long)s.allocation.allocated,
               (unsigned long long)coop_torch_failed_mallocs(d, NULL, 0),
               (unsigned long long)s.num_alloc_retries);
    }
    coop_torch_record_history(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_calls),
        cmocka_unit_test(test_pool_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
