/*
 * The PyTorch ABI stopped between two of its steps, where another thread
 * could act, made deterministic and free of sleeps: the program is linked
 * with -Wl,--wrap=pthread_mutex_lock,--wrap=free (src/torch/torch.mk), so
 * the wrappers below run inside libcoop's calls and can hold a thread there,
 * or act on its behalf, at a known lock or free.
 *
 * - A fork while another thread is inside coop_torch_clear_history, holding
 *   device 0's history lock (held in free of the ring): the fork must wait
 *   for the clear (pool_fork.c's prepare takes the ABI's inner locks), so the
 *   child's history is the cleared one. Without that, the child would copy
 *   the ring half cleared: its memory about to be freed, its events counted.
 * - coop_torch_init lowering the device count while a malloc is between its
 *   device check and state_lock: pool_for checks the count again under the
 *   lock, so no pool is made on a device outside the new count.
 * - A coop_walk visitor of device 0's pool calling the ABI for other
 *   devices while another thread holds state_lock, waiting for the walked
 *   pool (its memory fraction): each call that would take state_lock is
 *   refused before it, the others are served.
 * - A visitor's refusal printed on stderr (a fresh child: the first error
 *   of its kind).
 *
 * Each case runs in a child of its own (cases_in_children.h): the ABI's state
 * is per process. Forks, so it stays out of CI's ThreadSanitizer run.
 */
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cases_in_children.h"
#include "coop.h"
#include "lifecycle_child.h"
#include "torch/history.h"
#include "torch/torch_abi.h"

#define STREAM(n) ((void *)(uintptr_t)(n))
#define MIB ((size_t)1 << 20)

/* Seconds a case may run (a lock left held must fail it, not hang). */
#define CASE_TIME_LIMIT 20

int __real_pthread_mutex_lock(pthread_mutex_t *m);
int __wrap_pthread_mutex_lock(pthread_mutex_t *m);
void __real_free(void *p);
void __wrap_free(void *p);

/* free of hold_ptr (once) signals inside and waits for go, its caller's
 * locks held. */
static _Atomic(void *) hold_ptr;
static sem_t inside, go;

void __wrap_free(void *p)
{
    void *want = p;
    if (p && atomic_compare_exchange_strong(&hold_ptr, &want, NULL)) {
        sem_post(&inside);
        while (sem_wait(&go) != 0)
            continue; /* EINTR */
    }
    __real_free(p);
}

/* The forking thread's lock of fork_target (set only on that thread) lets
 * the held free go on first. */
static _Thread_local pthread_mutex_t *fork_target;
static atomic_bool let_go_at_fork;
/* learn_lock: the first lock this thread takes is stored in learned. */
static _Thread_local bool learn_lock;
static pthread_mutex_t *learned;
/* The lock of lower_at (once): coop_torch_init(lower_to) first. */
static _Atomic(pthread_mutex_t *) lower_at;
static int lower_to;
static atomic_bool lowered;
/* signal_learned: once this thread holds learned, post holds_learned. */
static _Thread_local bool signal_learned;
static sem_t holds_learned;

int __wrap_pthread_mutex_lock(pthread_mutex_t *m)
{
    if (learn_lock) {
        learn_lock = false;
        learned = m;
    }
    if (fork_target && m == fork_target) {
        fork_target = NULL;
        atomic_store(&let_go_at_fork, true);
        sem_post(&go);
    }
    pthread_mutex_t *want = m;
    if (atomic_compare_exchange_strong(&lower_at, &want, NULL)) {
        coop_torch_init(lower_to); /* takes m itself: disarmed first */
        atomic_store(&lowered, true);
    }
    int rc = __real_pthread_mutex_lock(m);
    if (signal_learned && m == learned) {
        signal_learned = false;
        sem_post(&holds_learned);
    }
    return rc;
}

static void *clear_history(void *arg)
{
    (void)arg;
    coop_torch_clear_history();
    return NULL;
}

/* The child: 0 if device 0's history is empty, 2 if not (3: no snapshot). */
static int child_sees_cleared(void *arg)
{
    (void)arg;
    coop_torch_snapshot *snap = NULL;
    if (coop_torch_snapshot_take(0, &snap) != COOP_OK)
        return 3;
    size_t n = snap->num_events;
    coop_torch_snapshot_free(snap);
    if (n) {
        fprintf(stderr, "child: device 0's history has %zu events after its clear\n", n);
        return 2;
    }
    return 0;
}

/* L3-14 in docs/mutation-testing.md. */
static void test_fork_waits_for_a_history_clear(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M,page:64K,history:64"),
                     COOP_OK);
    void *p = coop_torch_malloc(4096, 0, STREAM(0));
    assert_non_null(p);
    coop_torch_free(p, 4096, 0, STREAM(0));
    torch_history *h = torch_abi_history(0);
    assert_non_null(h->ring); /* alloc, free_requested, free_completed */
    assert_int_equal(h->count, 3);

    assert_int_equal(sem_init(&inside, 0, 0), 0);
    assert_int_equal(sem_init(&go, 0, 0), 0);
    atomic_store(&hold_ptr, h->ring);
    pthread_t clearer;
    assert_int_equal(pthread_create(&clearer, NULL, clear_history, NULL), 0);
    while (sem_wait(&inside) != 0)
        continue;
    /* the clearer is in free(ring), device 0's history lock held */
    fork_target = &h->lock;
    int status = in_fork(child_sees_cleared, NULL);
    fork_target = NULL;
    if (!atomic_load(&let_go_at_fork))
        sem_post(&go); /* the fork did not wait: let the clearer end */
    assert_int_equal(pthread_join(clearer, NULL), 0);
    assert_exited(status, 0);

    /* and the parent's history is cleared and records again */
    assert_int_equal(h->count, 0);
    p = coop_torch_malloc(4096, 0, STREAM(0));
    assert_non_null(p);
    coop_torch_free(p, 4096, 0, STREAM(0));
    assert_int_equal(h->count, 3);
}

/* T4-50 in docs/mutation-testing.md. */
static void test_init_lowers_the_count_during_a_malloc(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M,page:64K"), COOP_OK);
    learn_lock = true;
    coop_torch_init(4); /* its first lock is state_lock */
    assert_false(learn_lock);
    assert_non_null(learned);
    lower_to = 1;
    atomic_store(&lower_at, learned);
    /* device 1 passes the first check (4 devices); init makes it 1 before
     * the malloc takes state_lock to create the pool */
    assert_null(coop_torch_malloc(4096, 1, STREAM(0)));
    assert_true(atomic_load(&lowered));
    char msg[1024];
    coop_torch_last_error(msg, sizeof msg);
    assert_non_null(strstr(msg, "malloc on device 1: devices are 0..0"));
    assert_null(coop_torch_pool(1));
    assert_int_equal(coop_torch_failed_mallocs(1, NULL, 0), 1);
    /* device 0 is still in */
    void *p = coop_torch_malloc(4096, 0, STREAM(0));
    assert_non_null(p);
    coop_torch_free(p, 4096, 0, STREAM(0));
}

/* Thread B: device 0's memory fraction, which takes state_lock (posting
 * holds_learned) and then waits, holding it, for device 0's pool. */
static void *fraction_of_the_walked_device(void *arg)
{
    (void)arg;
    signal_learned = true;
    coop_torch_memory_fraction(0.5, 0);
    return NULL;
}

/* apply_limit_locked's refusals to lower each device's capacity to its
 * limit (torch_limit_refused_hook): a count of the limit's tries. */
static atomic_int limit_tries[8];

static void count_limit_try(int device)
{
    if (device >= 0 && device < 8)
        atomic_fetch_add(&limit_tries[device], 1);
}

static void expect_refused(const char *msg, const char *fn)
{
    char want[160];
    snprintf(want, sizeof want, "%s: called from inside a coop_walk visitor of device 0's pool",
             fn);
    if (!strstr(msg, want))
        fail_msg("wanted \"%s\" in \"%s\"", want, msg);
    assert_non_null(strstr(msg, "state lock"));
}

static void expect_abi_refused_by_walk(const char *fn)
{
    char msg[1024], want[160];
    coop_torch_last_error(msg, sizeof msg);
    snprintf(want, sizeof want, "%s: called from inside a coop_walk visitor of device 0's pool",
             fn);
    if (!strstr(msg, want))
        fail_msg("wanted \"%s\" in \"%s\"", want, msg);
}

static void expect_abi_refused(const char *fn)
{
    char msg[1024];
    coop_torch_last_error(msg, sizeof msg);
    expect_refused(msg, fn);
}

typedef struct other_devices {
    pthread_t b;
    int visits;
    char settings[512];
} other_devices;

static int call_other_devices(const coop_block_info *block, void *ctx)
{
    (void)block;
    other_devices *o = ctx;
    if (o->visits++)
        return 1;
    assert_int_equal(pthread_create(&o->b, NULL, fraction_of_the_walked_device, NULL), 0);
    while (sem_wait(&holds_learned) != 0)
        continue;
    /* B holds state_lock until it gets device 0's pool, which this walk
     * holds: each call below that took state_lock would wait forever */
    coop_torch_memory_fraction(0.25, 1);
    expect_abi_refused("coop_torch_memory_fraction");
    assert_null(coop_torch_malloc(4096, 2, STREAM(0))); /* no pool yet: making it */
    expect_abi_refused("coop_torch_malloc");
    coop_status why = COOP_OK; /* kept with the failure: busy, not out of memory */
    coop_torch_failed_malloc_status(2, NULL, 0, &why);
    assert_int_equal(why, COOP_ERR_BUSY);
    assert_null(coop_torch_malloc(4096, 1, STREAM(0))); /* its limit, waiting for frees */
    char msg[1024];
    coop_torch_last_error(msg, sizeof msg);
    expect_refused(msg, "coop_torch_malloc");
    assert_non_null(strstr(msg, "the memory limit waiting for frees of device 1 takes"));
    why = COOP_OK;
    coop_torch_failed_malloc_status(1, NULL, 0, &why);
    assert_int_equal(why, COOP_ERR_BUSY);
    /* device 4's limit waits for frees, none since its try: no state_lock */
    void *q = coop_torch_malloc(4096, 4, STREAM(0));
    assert_non_null(q);
    coop_torch_free(q, 4096, 4, STREAM(0));
    coop_torch_init(4);
    expect_abi_refused("coop_torch_init");
    coop_torch_record_history(64);
    expect_abi_refused("coop_torch_record_history");
    assert_int_equal(coop_torch_configure("backend:host"), COOP_ERR_BUSY);
    expect_refused(coop_last_error(), "coop_torch_configure");
    assert_int_equal(coop_torch_settings(o->settings, sizeof o->settings), COOP_ERR_BUSY);
    expect_refused(o->settings, "coop_torch_settings");
    /* device 3's pool exists and keeps no history: no state_lock */
    void *p = coop_torch_malloc(4096, 3, STREAM(0));
    assert_non_null(p);
    coop_torch_free(p, 4096, 3, STREAM(0));
    coop_torch_snapshot *snap = NULL;
    assert_int_equal(coop_torch_snapshot_take(3, &snap), COOP_OK);
    coop_torch_snapshot_free(snap);
    return 1;
}

/* Before the fix the visitor's first call waited for state_lock, B for the
 * walk: killed at CASE_TIME_LIMIT. */
static void test_walk_visitor_refuses_what_takes_the_state_lock(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M,page:64K"), COOP_OK);
    learn_lock = true;
    coop_torch_init(0); /* its first lock is state_lock; 0 changes nothing */
    assert_false(learn_lock);
    assert_non_null(learned);
    void *walked = coop_torch_malloc(4096, 0, STREAM(0));
    assert_non_null(walked);
    /* device 1: a limit waiting for frees, and a free since its try */
    void *big = coop_torch_malloc(8 * MIB, 1, STREAM(0));
    void *keep = coop_torch_malloc(8 * MIB, 1, STREAM(0));
    assert_non_null(big);
    assert_non_null(keep);
    coop_torch_memory_fraction(0.0, 1);
    coop_torch_free(big, 8 * MIB, 1, STREAM(0));
    void *p = coop_torch_malloc(4096, 3, STREAM(0));
    assert_non_null(p);
    coop_torch_free(p, 4096, 3, STREAM(0));
    /* device 4: a limit waiting for frees, none since its try, and a
     * cached block to serve a malloc under the held capacity */
    void *cached4 = coop_torch_malloc(4096, 4, STREAM(0));
    void *keep4 = coop_torch_malloc(8 * MIB, 4, STREAM(0));
    assert_non_null(cached4);
    assert_non_null(keep4);
    coop_torch_free(cached4, 4096, 4, STREAM(0));
    coop_torch_memory_fraction(0.0, 4);
    coop_stats one, after;
    coop_get_stats(coop_torch_pool(1), &one);
    torch_limit_refused_hook = count_limit_try;
    assert_int_equal(sem_init(&holds_learned, 0, 0), 0);

    other_devices o = {.visits = 0};
    assert_int_equal(coop_walk(coop_torch_pool(0), NULL, call_other_devices, &o), COOP_OK);
    assert_int_equal(o.visits, 1);
    assert_int_equal(pthread_join(o.b, NULL), 0);

    /* B's fraction went through after the walk; the refused calls changed
     * nothing */
    coop_get_stats(coop_torch_pool(0), &after);
    assert_int_equal(after.capacity, 32 * MIB);
    coop_get_stats(coop_torch_pool(1), &after);
    assert_int_equal(after.capacity, one.capacity);
    assert_int_equal(after.reserved_bytes.current, one.reserved_bytes.current);
    assert_null(coop_torch_pool(2));
    assert_int_equal(coop_torch_failed_mallocs(2, NULL, 0), 1);
    assert_int_equal(coop_torch_failed_mallocs(1, NULL, 0), 1); /* the limit's refusal */
    assert_int_equal(coop_torch_failed_mallocs(4, NULL, 0), 0);
    /* the refused try was left for the next malloc (its free flag kept) */
    assert_int_equal(atomic_load(&limit_tries[1]), 0);
    void *q = coop_torch_malloc(4096, 1, STREAM(0)); /* NULL: the limit leaves no room */
    assert_int_equal(atomic_load(&limit_tries[1]), 1);
    coop_torch_free(q, 4096, 1, STREAM(0));
    /* empty_cache tries device 4's limit though nothing was freed since
     * (r4's malloc took the flag the visitor's free set) */
    void *r4 = coop_torch_malloc(4096, 4, STREAM(0));
    int tries4 = atomic_load(&limit_tries[4]);
    coop_torch_empty_cache();
    assert_int_equal(atomic_load(&limit_tries[4]), tries4 + 1);
    coop_torch_free(r4, 4096, 4, STREAM(0));
    torch_limit_refused_hook = NULL;
    coop_torch_free(keep4, 8 * MIB, 4, STREAM(0));
    assert_false(atomic_load(&torch_abi_history(3)->enabled));
    char buf[512];
    assert_int_equal(coop_torch_settings(buf, sizeof buf), COOP_OK);
    assert_non_null(strstr(buf, "capacity:67108864"));
    coop_torch_free(keep, 8 * MIB, 1, STREAM(0));
    coop_torch_free(walked, 4096, 0, STREAM(0));
}

/* A visitor's refusal is reported as the hooks' other errors are: kept
 * for coop_torch_last_error and printed, the first of its kind (a fresh
 * child: none printed before). */
static int free_from_the_visitor(const coop_block_info *block, void *ctx)
{
    (void)block;
    coop_torch_free(ctx, 4096, 0, STREAM(0));
    return 1;
}

static void test_walk_refusal_is_printed(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:64M,page:64K"), COOP_OK);
    void *p = coop_torch_malloc(4096, 0, STREAM(0));
    assert_non_null(p);
    FILE *err = tmpfile();
    assert_non_null(err);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(err), 2) >= 0);
    coop_status st = coop_walk(coop_torch_pool(0), NULL, free_from_the_visitor, p);
    assert_true(dup2(saved, 2) >= 0);
    close(saved);
    assert_int_equal(st, COOP_OK);
    char text[1024];
    rewind(err);
    size_t n = fread(text, 1, sizeof text - 1, err);
    text[n] = '\0';
    fclose(err);
    if (!strstr(text, "coop: coop_torch_free: called from inside a coop_walk visitor of device "
                      "0's pool"))
        fail_msg("stderr: \"%s\"", text);
    expect_abi_refused_by_walk("coop_torch_free");
    coop_torch_free(p, 4096, 0, STREAM(0)); /* after the walk: served */
    coop_stats stats;
    coop_get_stats(coop_torch_pool(0), &stats);
    assert_int_equal(stats.allocation.current, 0);
}

int main(void)
{
    /* each case's own configuration, whatever the environment says */
    unsetenv("COOP_ALLOC_CONF");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_waits_for_a_history_clear),
        cmocka_unit_test(test_init_lowers_the_count_during_a_malloc),
        cmocka_unit_test(test_walk_visitor_refuses_what_takes_the_state_lock),
        cmocka_unit_test(test_walk_refusal_is_printed),
    };
    return cases_in_children("torch_lock_seams_test", tests, sizeof tests / sizeof tests[0],
                             CASE_TIME_LIMIT);
}
