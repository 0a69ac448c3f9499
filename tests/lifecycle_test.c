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

static int visit_count(const coop_block_info *block, void *ctx)
{
    (void)block;
    ++*(size_t *)ctx;
    return 0;
}

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

/* Another thread's call waits for a walk to end, also when the walk's
 * visitor reads the pool (statistics, check, configuration, backend calls)
 * or walks it again: those are answered without relocking (the walk holds
 * the lock) and must not let it go either. The visitor gives the other
 * thread 50 ms to get in; an allocation done before the walk returns is a
 * walk that let the lock go (pass or fail does not depend on the timing:
 * a lock that is held cannot be taken however long the wait). */
typedef struct walk_hold {
    coop_pool *pool;
    bool reads;
    atomic_bool started, done;
    bool done_inside;
    void *got;
} walk_hold;

static void *alloc_during_walk(void *arg)
{
    walk_hold *w = arg;
    while (!atomic_load(&w->started))
        sleep_ms(1);
    w->got = coop_malloc(w->pool, 512, 0, 0, NULL);
    atomic_store(&w->done, true);
    return NULL;
}

static int visit_nothing(const coop_block_info *b, void *ctx)
{
    (void)b;
    (void)ctx;
    return 0;
}

static int read_then_wait(const coop_block_info *b, void *ctx)
{
    (void)b;
    walk_hold *w = ctx;
    if (w->reads) {
        coop_stats s;
        coop_get_stats(w->pool, &s);
        coop_config c;
        coop_pool_config(w->pool, &c);
        assert_int_equal(coop_pool_check(w->pool), COOP_OK);
        (void)coop_backend_calls(w->pool, COOP_FAULT_ALL);
        assert_int_equal(coop_walk(w->pool, NULL, visit_nothing, NULL), COOP_OK);
    }
    atomic_store(&w->started, true);
    for (int i = 0; i < 50 && !atomic_load(&w->done); i++)
        sleep_ms(1);
    w->done_inside = atomic_load(&w->done);
    return 1;
}

static void test_a_walk_holds_the_pool_against_other_threads(void **state)
{
    (void)state;
    for (int reads = 0; reads < 2; reads++) {
        coop_pool *pool = host_pool();
        void *live = coop_malloc(pool, 4096, 0, 0, NULL);
        assert_non_null(live);
        walk_hold w = {.pool = pool, .reads = reads};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, alloc_during_walk, &w), 0);
        assert_int_equal(coop_walk(pool, NULL, read_then_wait, &w), COOP_OK);
        assert_int_equal(pthread_join(t, NULL), 0);
        if (w.done_inside)
            fail_msg("reads %d: another thread allocated while the walk ran", reads);
        assert_non_null(w.got); /* once the walk let the pool go */
        assert_int_equal(coop_free(pool, w.got), COOP_OK);
        assert_int_equal(coop_free(pool, live), COOP_OK);
        coop_pool_destroy(pool);
    }
}

/* fork() from inside coop_walk's visitors: the walking thread holds the
 * pool's lock, which the prepare handler took too before the fix (the
 * fork, in the parent, then waited for itself forever). A visitor of pool
 * A walks pool B, whose visitor forks, so that both are held; a third pool
 * C, not walked, and a thread waiting for A's lock (a coop_malloc that
 * blocked on it) stand beside. Each process goes on with the visitor and
 * returns through both walks, which unlock: the child finds its copies
 * consistent and usable (C was locked and released by the handlers as
 * before), and the parent's walks, the waiting thread and pools are as
 * without the fork. */
typedef struct walk_fork {
    coop_pool *a, *b, *c;
    void *a_block, *a2, *b_block;
    size_t a_blocks, b_blocks;     /* blocks each walk visited, in this process */
    size_t a_expected, b_expected; /* their blocks, walked before */
    bool forked, in_child;
    /* right after the fork: the parent's A still held by its walk (the
     * waiter still waiting); the child's A and B held by the walks, no
     * waiter (state 1) */
    bool parent_kept_a;
    int child_a_state, child_b_state;
    pid_t pid;
    pthread_t waiter;
    atomic_bool waiting;
    void *waited; /* the waiter's block, once A's lock was free */
} walk_fork;

static walk_fork wf;

static void *wait_for_a(void *arg)
{
    (void)arg;
    atomic_store(&wf.waiting, true);
    coop_status st;
    wf.waited = coop_malloc(wf.a, 4096, (coop_stream)0, COOP_ALLOC_LOW, &st);
    return NULL;
}

static int visit_b(const coop_block_info *block, void *ctx)
{
    (void)block, (void)ctx;
    if (wf.b_blocks++ == 0 && !wf.forked) {
        wf.forked = true;
        fflush(stdout);
        fflush(stderr);
        wf.pid = fork(); /* both walks' locks held by this thread */
        if (wf.pid == 0) {
            alarm(CHILD_LIMIT);
            wf.in_child = true;
            wf.child_a_state = atomic_load(&wf.a->lock.state);
            wf.child_b_state = atomic_load(&wf.b->lock.state);
        } else {
            sleep_ms(20);
            wf.parent_kept_a = atomic_load(&wf.a->lock.state) == 2 && !wf.waited;
        }
    }
    return 0;
}

static int visit_a(const coop_block_info *block, void *ctx)
{
    (void)block, (void)ctx;
    if (wf.a_blocks++ == 0) {
        assert_int_equal(pthread_create(&wf.waiter, NULL, wait_for_a, NULL), 0);
        while (!atomic_load(&wf.waiting))
            sleep_ms(1);
        sleep_ms(50); /* let it block on A's lock (a waiter's state) */
        if (coop_walk(wf.b, NULL, visit_b, NULL) != COOP_OK)
            return 1;
    }
    return 0;
}

/* The child, after both walks returned: its copies are usable. */
static int child_after_walks(void)
{
    if (wf.child_a_state != 1 || wf.child_b_state != 1)
        return 39;
    if (wf.a_blocks != wf.a_expected || wf.b_blocks != wf.b_expected)
        return 40; /* the walks went on over every block */
    if (atomic_load(&wf.a->lock.state) != 0 || atomic_load(&wf.b->lock.state) != 0)
        return 41; /* the walks' unlocks left them free */
    for (coop_pool *p = wf.a; p; p = p == wf.a ? wf.b : p == wf.b ? wf.c : NULL) {
        int st = use_pool(p);
        if (st)
            return st;
    }
    if (coop_free(wf.a, wf.a_block) != COOP_OK || coop_free(wf.a, wf.a2) != COOP_OK ||
        coop_free(wf.b, wf.b_block) != COOP_OK)
        return 42; /* the parent's blocks, in the child's copies */
    coop_stats s;
    coop_get_stats(wf.a, &s);
    if (s.allocation.current != 0 || coop_pool_check(wf.a) != COOP_OK)
        return 43; /* the waiter's block is the parent's only: no thread here */
    size_t n = 0;
    if (coop_walk(wf.b, NULL, visit_count, &n) != COOP_OK || n == 0)
        return 44;
    coop_pool_destroy(wf.a);
    coop_pool_destroy(wf.b);
    coop_pool_destroy(wf.c);
    return 0;
}

static void test_fork_inside_a_walk_visitor(void **state)
{
    (void)state;
    wf.a = host_pool();
    wf.b = host_pool();
    wf.c = host_pool();
    coop_status st;
    wf.a_block = coop_malloc(wf.a, 1 << 20, (coop_stream)0, COOP_ALLOC_LOW, &st);
    wf.a2 = coop_malloc(wf.a, 1 << 20, (coop_stream)0, COOP_ALLOC_LOW, &st);
    wf.b_block = coop_malloc(wf.b, 1 << 20, (coop_stream)0, COOP_ALLOC_LOW, &st);
    assert_non_null(wf.a_block);
    assert_non_null(wf.a2);
    assert_non_null(wf.b_block);
    assert_int_equal(coop_walk(wf.a, NULL, visit_count, &wf.a_expected), COOP_OK);
    assert_int_equal(coop_walk(wf.b, NULL, visit_count, &wf.b_expected), COOP_OK);
    assert_true(wf.a_expected >= 2 && wf.b_expected >= 1);

    alarm(CHILD_LIMIT); /* before the fix the fork itself blocked, here */
    st = coop_walk(wf.a, NULL, visit_a, NULL);
    if (wf.in_child) /* never back into cmocka: its state is the parent's */
        _exit(st != COOP_OK ? 49 : child_after_walks());
    alarm(0);
    assert_int_equal(st, COOP_OK);
    assert_true(wf.forked);
    assert_true(wf.pid > 0);
    int status = 0;
    assert_int_equal(waitpid(wf.pid, &status, 0), wf.pid);
    assert_exited(status, 0);
    /* the parent: both walks went on over every block; the waiter got its
     * block once A's walk returned; every pool as it was */
    assert_true(wf.parent_kept_a);
    assert_int_equal(wf.a_blocks, wf.a_expected);
    assert_int_equal(wf.b_blocks, wf.b_expected);
    assert_int_equal(pthread_join(wf.waiter, NULL), 0);
    assert_non_null(wf.waited);
    coop_stats s;
    coop_get_stats(wf.a, &s);
    assert_int_equal(s.allocation.current, 3);
    coop_get_stats(wf.b, &s);
    assert_int_equal(s.allocation.current, 1);
    for (coop_pool *p = wf.a; p; p = p == wf.a ? wf.b : p == wf.b ? wf.c : NULL)
        assert_int_equal(use_pool(p), 0);
    assert_int_equal(coop_free(wf.a, wf.waited), COOP_OK);
    assert_int_equal(coop_free(wf.a, wf.a_block), COOP_OK);
    assert_int_equal(coop_free(wf.a, wf.a2), COOP_OK);
    assert_int_equal(coop_free(wf.b, wf.b_block), COOP_OK);
    coop_pool_destroy(wf.a);
    coop_pool_destroy(wf.b);
    coop_pool_destroy(wf.c);
}

/* A fork while another thread is inside a remat context's call (its
 * recompute callback waits): the context is not locked at fork, and its
 * records are mid-call in the child, where the holder thread does not
 * exist. The child's copy stays claimed by that thread, so its calls are
 * refused (coop.h, coop_remat_create); the parent's holder finishes. */
typedef struct remat_fork {
    coop_remat *r;
    coop_tensor *a, *b;
    pthread_barrier_t inside, go;
    bool stop;
    coop_status accessed; /* the holder's access */
    pthread_t holder;     /* the thread inside the call at the fork */
} remat_fork;

static remat_fork rf;

static coop_status waiting_recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                                     void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out, (void)user;
    if (rf.stop) {
        pthread_barrier_wait(&rf.inside);
        pthread_barrier_wait(&rf.go);
    }
    return COOP_OK;
}

static void *access_a(void *arg)
{
    (void)arg;
    rf.holder = pthread_self();
    rf.accessed = coop_tensor_access(rf.r, rf.a, NULL);
    return NULL;
}

static int child_calls_remat(void *arg)
{
    (void)arg;
    if (coop_tensor_access(rf.r, rf.b, NULL) != COOP_ERR_BUSY)
        return 50;
    if (!strstr(coop_last_error(), "coop_tensor_access: the context is in use by another thread"))
        return 51;
    coop_remat_stats s;
    memset(&s, 0xff, sizeof s);
    coop_remat_get_stats(rf.r, &s);
    if (s.clock != 0 || coop_tensor_resident(rf.b))
        return 52;
    return 0;
}

/* The same calls from a thread the child creates. glibc gives it the dead
 * holder's stack back, so its pthread_self is the holder's (printed): a
 * claim by pthread_self took it for the holder re-entering and let it in
 * (the queries answered, coop_tensor_access got the callback refusal)
 * where coop.h says the child's calls are refused. */
static void *child_thread_calls(void *arg)
{
    *(int *)arg = child_calls_remat(NULL);
    printf("child thread %#lx, the holder was %#lx (%s)\n", (unsigned long)pthread_self(),
           (unsigned long)rf.holder,
           pthread_equal(pthread_self(), rf.holder) ? "the same id" : "another id");
    fflush(stdout);
    return NULL;
}

static int child_thread_calls_remat(void *arg)
{
    (void)arg;
    int result = 60;
    pthread_t t;
    if (pthread_create(&t, NULL, child_thread_calls, &result) || pthread_join(t, NULL))
        return 61;
    return result;
}

static void test_fork_while_a_thread_is_inside_a_remat_call(void **state)
{
    (void)state;
    coop_config c;
    coop_config_default(&c);
    c.capacity = 768u << 10;
    c.page_size = 64u << 10;
    coop_pool *pool = NULL;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    coop_remat_config rc = {.recompute = waiting_recompute};
    assert_int_equal(coop_remat_create(pool, &rc, &rf.r), COOP_OK);
    coop_tensor *big = NULL; /* evicts a, then freed */
    assert_int_equal(
        coop_tensor_create(rf.r, 512u << 10, 1, NULL, NULL, 0, COOP_TENSOR_EVICTABLE, &rf.a),
        COOP_OK);
    assert_int_equal(
        coop_tensor_create(rf.r, 512u << 10, 1, NULL, NULL, 0, COOP_TENSOR_EVICTABLE, &big),
        COOP_OK);
    assert_int_equal(coop_tensor_release(rf.r, big), COOP_OK);
    assert_int_equal(coop_tensor_create(rf.r, 64u << 10, 1, NULL, NULL, 0, 0, &rf.b), COOP_OK);
    pthread_barrier_init(&rf.inside, NULL, 2);
    pthread_barrier_init(&rf.go, NULL, 2);
    rf.stop = true;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, access_a, NULL), 0);
    pthread_barrier_wait(&rf.inside);
    assert_exited(in_fork(child_calls_remat, NULL), 0);
    assert_exited(in_fork(child_thread_calls_remat, NULL), 0);
    pthread_barrier_wait(&rf.go);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(rf.accessed, COOP_OK);
    rf.stop = false;
    assert_true(coop_tensor_resident(rf.a)); /* the parent's context: its own again */
    assert_int_equal(coop_tensor_release(rf.r, rf.a), COOP_OK);
    assert_int_equal(coop_tensor_release(rf.r, rf.b), COOP_OK);
    coop_remat_destroy(rf.r);
    pthread_barrier_destroy(&rf.inside);
    pthread_barrier_destroy(&rf.go);
    coop_pool_destroy(pool);
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
        cmocka_unit_test(test_fork_inside_a_walk_visitor),
        cmocka_unit_test(test_a_walk_holds_the_pool_against_other_threads),
        cmocka_unit_test(test_fork_while_a_thread_is_inside_a_remat_call),
        cmocka_unit_test(test_fork_while_a_thread_holds_the_torch_state_lock),
        cmocka_unit_test(test_fork_while_a_thread_holds_a_torch_order_lock),
        cmocka_unit_test(test_fork_repeatedly_while_threads_allocate),
        cmocka_unit_test(test_exit_while_a_thread_allocates),
        cmocka_unit_test(test_frees_after_exit_began),
        cmocka_unit_test(test_short_lived_threads_leave_no_state),
    };
    return cases_in_children("lifecycle_test", tests, sizeof tests / sizeof tests[0], 120);
}
