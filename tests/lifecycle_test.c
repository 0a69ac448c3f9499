/*
 * A process's lifecycle with pools alive, as a PyTorch user meets it
 * (tests/README.md, "Process lifecycle: fork, exit, unload"): fork() while
 * other threads are inside the allocator (DataLoader workers), exit() while
 * a thread allocates, frees after main returns (the interpreter frees
 * tensors late), and many short-lived threads. Host backend, so no device.
 *
 * Each case runs in a child of its own (cases_in_children.h); the forks a
 * case makes set an alarm first, so a child that deadlocks is killed and
 * the case fails instead of hanging.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cases_in_children.h"
#include "lifecycle_child.h"
#include "coop.h"
#include "pool_internal.h"
#include "status.h"
#include "torch/torch_abi.h"

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static coop_pool *host_pool(void)
{
    coop_config c;
    coop_config_default(&c);
    c.backend = COOP_BACKEND_HOST;
    c.capacity = 64u << 20;
    coop_pool *pool = NULL;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    return pool;
}

/* A malloc, a free and a check of the pool in a child: 0 if all worked. */
static int use_pool(void *arg)
{
    coop_pool *pool = arg;
    coop_status st;
    void *p = coop_malloc(pool, 4096, (coop_stream)0, COOP_ALLOC_LOW, &st);
    if (!p || st != COOP_OK)
        return 10;
    if (coop_free(pool, p) != COOP_OK)
        return 11;
    if (coop_pool_check(pool) != COOP_OK)
        return 12;
    return 0;
}

/* ---- fork ---- */

/* The child gets a copy of each host pool, unlocked and consistent: it may
 * free the parent's blocks in its copy, allocate and destroy it, and the
 * parent's pool is untouched. */
static int child_frees_and_destroys(void *arg)
{
    void **ptrs = arg;
    coop_pool *pool = ptrs[0];
    if (coop_free(pool, ptrs[1]) != COOP_OK)
        return 20;
    int st = use_pool(pool);
    if (st)
        return st;
    coop_pool_destroy(pool);
    return 0;
}

static void test_fork_child_has_a_usable_copy_of_a_host_pool(void **state)
{
    (void)state;
    coop_pool *pool = host_pool();
    coop_status st;
    void *p = coop_malloc(pool, 1 << 20, (coop_stream)0, COOP_ALLOC_LOW, &st);
    assert_non_null(p);
    void *args[] = {pool, p};
    assert_exited(in_fork(child_frees_and_destroys, args), 0);
    coop_stats s;
    coop_get_stats(pool, &s);
    assert_int_equal(s.allocation.current, 1); /* the child's free was its own */
    assert_int_equal(coop_free(pool, p), COOP_OK);
    coop_pool_destroy(pool);
}

/* A thread holds a lock for a while: the fork must wait for it (before the
 * fix the child inherited the lock held, by a thread it does not have, and
 * blocked on its first call). */
typedef struct holder {
    atomic_bool holding;
    coop_pool *pool;
} holder;

static void *hold_pool_lock(void *arg)
{
    holder *h = arg;
    pool_lock(h->pool);
    atomic_store(&h->holding, true);
    sleep_ms(200);
    pool_unlock(h->pool);
    return NULL;
}

static void test_fork_while_a_thread_holds_the_pool_lock(void **state)
{
    (void)state;
    holder h = {.pool = host_pool()};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, hold_pool_lock, &h), 0);
    while (!atomic_load(&h.holding))
        sleep_ms(1);
    assert_exited(in_fork(use_pool, h.pool), 0);
    pthread_join(t, NULL);
    assert_int_equal(use_pool(h.pool), 0);
    coop_pool_destroy(h.pool);
}

/* The PyTorch ABI: a hook that runs under one of its locks signals, then
 * keeps the lock a while. */
static atomic_bool hook_entered;

static void hold_in_hook(int device)
{
    (void)device;
    atomic_store(&hook_entered, true);
    sleep_ms(200);
}

static int torch_calls_in_child(void *arg)
{
    (void)arg;
    for (int device = 0; device < 3; device++) { /* 2: a pool made in the child */
        void *p = coop_torch_malloc(4096, device, NULL);
        if (!p)
            return 30 + device;
        coop_torch_free(p, 4096, device, NULL);
    }
    char msg[256];
    if (coop_torch_last_error(msg, sizeof msg) != 0)
        return 40;
    return 0;
}

static void *fraction_refused(void *arg)
{
    (void)arg;
    coop_torch_memory_fraction(0.01, 3); /* live blocks map more: refused under state_lock */
    return NULL;
}

static void *malloc_with_history(void *arg)
{
    void **out = arg;
    *out = coop_torch_malloc(4096, 1, NULL); /* the gap hook runs under device 1's order lock */
    return NULL;
}

static void torch_setup(void)
{
    assert_int_equal(coop_torch_configure("backend:host,capacity:256M"), COOP_OK);
}

static void test_fork_while_a_thread_holds_the_torch_state_lock(void **state)
{
    (void)state;
    torch_setup();
    void *big = coop_torch_malloc(64u << 20, 3, NULL);
    assert_non_null(big);
    void *one = coop_torch_malloc(4096, 1, NULL);
    assert_non_null(one);
    torch_limit_refused_hook = hold_in_hook;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fraction_refused, NULL), 0);
    while (!atomic_load(&hook_entered))
        sleep_ms(1);
    int status = in_fork(torch_calls_in_child, NULL);
    pthread_join(t, NULL);
    torch_limit_refused_hook = NULL;
    assert_exited(status, 0);
}

static void test_fork_while_a_thread_holds_a_torch_order_lock(void **state)
{
    (void)state;
    torch_setup();
    coop_torch_record_history(1000);
    void *first = coop_torch_malloc(4096, 0, NULL);
    assert_non_null(first);
    torch_malloc_gap_hook = hold_in_hook;
    void *p = NULL;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, malloc_with_history, &p), 0);
    while (!atomic_load(&hook_entered))
        sleep_ms(1);
    int status = in_fork(torch_calls_in_child, NULL);
    pthread_join(t, NULL);
    torch_malloc_gap_hook = NULL;
    assert_exited(status, 0);
    assert_non_null(p);
    coop_torch_free(p, 4096, 1, NULL);
}

/* Threads allocate and free without pause (the PyTorch ABI with history on,
 * and a plain pool) while the main thread forks again and again: every
 * child must be able to use both. */
static atomic_bool stop;

static void *churn(void *arg)
{
    coop_pool *pool = arg;
    while (!atomic_load(&stop)) {
        void *a = coop_torch_malloc(8192, 0, NULL);
        coop_status st;
        void *b = coop_malloc(pool, 8192, (coop_stream)0, COOP_ALLOC_LOW, &st);
        if (a)
            coop_torch_free(a, 8192, 0, NULL);
        if (b)
            coop_free(pool, b);
    }
    return NULL;
}

static int child_under_churn(void *arg)
{
    int st = use_pool(arg);
    return st ? st : torch_calls_in_child(NULL);
}

static void test_fork_repeatedly_while_threads_allocate(void **state)
{
    (void)state;
    torch_setup();
    coop_torch_record_history(64);
    coop_pool *pool = host_pool();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, pool), 0);
    for (int i = 0; i < 60; i++)
        assert_exited(in_fork(child_under_churn, pool), 0);
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    coop_pool_destroy(pool);
}

/* ---- exit ---- */

/* libcoop has no destructor or atexit handler: exit() while another thread
 * is inside coop_torch_malloc / coop_malloc tears nothing down under it. */
static int exit_during_churn(void *arg)
{
    coop_pool *pool = arg;
    pthread_t t;
    if (pthread_create(&t, NULL, churn, pool))
        return 50;
    sleep_ms(20);
    exit(3);
}

static void test_exit_while_a_thread_allocates(void **state)
{
    (void)state;
    torch_setup();
    coop_pool *pool = host_pool();
    assert_exited(in_fork(exit_during_churn, pool), 3);
    coop_pool_destroy(pool);
}

/* Python frees tensors during interpreter shutdown, after main's return,
 * some from other threads: the ABI's state is still whole then. */
enum { LATE = 64 };
static void *late[LATE];

static void *free_half(void *arg)
{
    (void)arg;
    for (int i = 0; i < LATE / 2; i++)
        coop_torch_free(late[i], 4096, 0, NULL);
    return NULL;
}

static void free_late(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, free_half, NULL))
        _exit(60);
    pthread_join(t, NULL);
    for (int i = LATE / 2; i < LATE; i++)
        coop_torch_free(late[i], 4096, 0, NULL);
    char msg[256];
    coop_stats s;
    coop_get_stats(coop_torch_pool(0), &s);
    _exit(coop_torch_last_error(msg, sizeof msg) || s.allocation.current ? 61 : 4);
}

static int allocate_then_exit(void *arg)
{
    (void)arg;
    for (int i = 0; i < LATE; i++)
        if (!(late[i] = coop_torch_malloc(4096, 0, NULL)))
            return 62;
    atexit(free_late);
    exit(0);
}

static void test_frees_after_exit_began(void **state)
{
    (void)state;
    torch_setup();
    assert_exited(in_fork(allocate_then_exit, NULL), 4);
}

/* ---- threads ---- */

/* The last error is a fixed-size thread-local buffer (no heap, no key
 * destructor): a thread that exits with a message leaves nothing behind,
 * and a new thread starts with an empty message. */
static void *error_and_exit(void *arg)
{
    intptr_t bad = 0;
    if (coop_last_error()[0] != '\0')
        bad = 1; /* a fresh thread inherited a message */
    coop_config c;
    coop_config_default(&c);
    c.backend = COOP_BACKEND_HOST;
    c.page_size = 3; /* refused, with a message */
    coop_pool *pool;
    if (coop_pool_create(&c, &pool) == COOP_OK || coop_last_error()[0] == '\0')
        bad = 2;
    (void)arg;
    return (void *)bad;
}

/* "VmRSS" / mapping count of this process. */
static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void run_threads(int n)
{
    for (int i = 0; i < n; i++) {
        pthread_t t;
        void *bad = NULL;
        assert_int_equal(pthread_create(&t, NULL, error_and_exit, NULL), 0);
        pthread_join(t, &bad);
        assert_null(bad);
    }
}

static void test_short_lived_threads_leave_no_state(void **state)
{
    (void)state;
    /* the sanitizers' runtimes keep memory and mappings of their own
     * (ASan's quarantine of freed blocks, shadow pages): a count of growth
     * measures them, not coop (.ci/run sets COOP_SANITIZED) */
    if (getenv("COOP_SANITIZED"))
        skip();
    coop_clear_error();
    run_threads(100); /* glibc's stack cache and allocator settle */
    long rss = rss_kb(), maps = mappings();
    run_threads(3000);
    long rss_after = rss_kb(), maps_after = mappings();
    printf("VmRSS %ld -> %ld kB, mappings %ld -> %ld over 3000 threads\n", rss, rss_after, maps,
           maps_after);
    assert_true(maps_after <= maps + 2);
    assert_true(rss_after <= rss + 1024);
    assert_string_equal(coop_last_error(), ""); /* the threads' messages were their own */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_child_has_a_usable_copy_of_a_host_pool),
        cmocka_unit_test(test_fork_while_a_thread_holds_the_pool_lock),
        cmocka_unit_test(test_fork_while_a_thread_holds_the_torch_state_lock),
        cmocka_unit_test(test_fork_while_a_thread_holds_a_torch_order_lock),
        cmocka_unit_test(test_fork_repeatedly_while_threads_allocate),
        cmocka_unit_test(test_exit_while_a_thread_allocates),
        cmocka_unit_test(test_frees_after_exit_began),
        cmocka_unit_test(test_short_lived_threads_leave_no_state),
    };
    return cases_in_children("lifecycle_test", tests, sizeof tests / sizeof tests[0], 120);
}
