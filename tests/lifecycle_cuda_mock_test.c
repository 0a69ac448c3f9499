/*
 * A CUDA pool in a forked child (tests/README.md, "Process lifecycle:
 * fork, exit, unload"), on the mock driver (libmockcuda.so): CUDA does not
 * survive fork, so every call on the parent's CUDA pool in the child, and
 * the PyTorch ABI's calls for a CUDA device, must fail at once with
 * COOP_ERR_UNSUPPORTED and a message naming the call, the pool's process
 * and the child's, without a driver call (the mock counts every entry
 * point's calls); a free of the parent's block is a no-op, destroy frees
 * host memory only, a new CUDA pool is refused, and a host pool beside it
 * stays usable. The parent's pool is untouched afterwards.
 *
 * Each case runs in a child of its own (cases_in_children.h), so that the
 * process that creates the CUDA pools is the case's; its forks set an
 * alarm first, so a child that hangs fails the case instead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>

#include "cases_in_children.h"
#include "lifecycle_child.h"
#include "coop.h"
#include "cuda_mock.h"
#include "status.h"

#define MIB (UINT64_C(1) << 20)

/* Fails the case unless fn, run in a forked child under the alarm,
 * returned 0 (every check held; a failed one is on stderr). */
static void in_fork_ok(int (*fn)(void *), void *arg)
{
    assert_exited(in_fork(fn, arg), 0);
}

/* A check in a forked child (cmocka's asserts jump back into the child's
 * copy of the runner): says what failed and makes the child exit with 1. */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "child %d: %s:%d: check failed: %s\n", (int)getpid(), __FILE__,        \
                    __LINE__, #cond);                                                              \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Whether got is the message printf(fmt, ...) makes; says both if not. */
static bool message_is(const char *got, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool message_is(const char *got, const char *fmt, ...)
{
    char want[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    if (strcmp(got, want) == 0)
        return true;
    fprintf(stderr, "child %d: message\n  got:  %s\n  want: %s\n", (int)getpid(), got, want);
    return false;
}

/* st is the refusal of fn on a pool created in process created, here. */
static bool refused(coop_status st, const char *fn, int created)
{
    if (st != COOP_ERR_UNSUPPORTED) {
        fprintf(stderr, "child %d: %s returned %s, not COOP_ERR_UNSUPPORTED\n", (int)getpid(), fn,
                coop_strerror(st));
        return false;
    }
    return message_is(coop_last_error(),
                      "%s: this CUDA pool was created in process %d; CUDA cannot be used in a "
                      "forked child (process %d)",
                      fn, created, (int)getpid());
}

static long driver_calls(void)
{
    return cuda_mock_now().entry_calls;
}

static coop_config cuda_config(bool vmm)
{
    coop_config c;
    coop_config_default(&c);
    c.backend = COOP_BACKEND_CUDA;
    c.capacity = 64 * MIB;
    c.use_vmm = vmm;
    return c;
}

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t num_inputs,
                             void *out, void *user)
{
    (void)t;
    (void)producer;
    (void)inputs;
    (void)num_inputs;
    (void)out;
    (void)user;
    return COOP_OK;
}

/* ---- every pool call in the child ---- */

typedef struct parent_state {
    coop_pool *pool;
    void *live;    /* allocated on stream 0 */
    void *pending; /* freed, waiting for an event on a held stream */
    coop_stream held;
    coop_remat *remat;
    coop_tensor *tensor;
    int pid;
    bool vmm;
} parent_state;

static int every_pool_call_refused(void *arg)
{
    parent_state *ps = arg;
    coop_pool *pool = ps->pool;
    int created = ps->pid;
    long before = driver_calls();
    coop_status st = COOP_OK;
    CHECK(coop_malloc(pool, 4096, 0, COOP_ALLOC_LOW, &st) == NULL);
    CHECK(refused(st, "coop_malloc", created));
    CHECK(coop_malloc(pool, 0, 0, COOP_ALLOC_LOW, &st) == NULL);
    CHECK(refused(st, "coop_malloc", created));
    /* the parent's block: a no-op (a DataLoader worker dropping a tensor) */
    CHECK(refused(coop_free(pool, ps->live), "coop_free", created));
    CHECK(refused(coop_free(pool, NULL), "coop_free", created));
    CHECK(refused(coop_record_stream(pool, ps->live, ps->held), "coop_record_stream", created));
    CHECK(refused(coop_empty_cache(pool), "coop_empty_cache", created));
    CHECK(refused(coop_forget_stream(pool, ps->held), "coop_forget_stream", created));
    CHECK(refused(coop_set_capacity(pool, 32 * MIB), "coop_set_capacity", created));
    CHECK(refused(coop_walk(pool, NULL, NULL, NULL), "coop_walk", created));
    CHECK(refused(coop_pool_check(pool), "coop_pool_check", created));
    CHECK(refused(coop_host_hold_stream(pool, ps->held, true), "coop_host_hold_stream", created));
    CHECK(refused(coop_host_busy_stream(pool, ps->held), "coop_host_busy_stream", created));
    CHECK(refused(coop_inject_fault(pool, COOP_FAULT_MAP, 1), "coop_inject_fault", created));
    coop_clear_error();
    coop_reset_peak_stats(pool); /* no status: does nothing, says why */
    CHECK(refused(COOP_ERR_UNSUPPORTED, "coop_reset_peak_stats", created));
    /* the remat layer over it */
    void *ptr = &ptr;
    CHECK(refused(coop_tensor_access(ps->remat, ps->tensor, &ptr), "coop_tensor_access", created));
    CHECK(ptr == NULL);
    coop_remat_config rc = {.recompute = recompute};
    coop_remat *r2 = (coop_remat *)&r2;
    CHECK(refused(coop_remat_create(pool, &rc, &r2), "coop_remat_create", created));
    CHECK(r2 == NULL);
    /* the readers answer from the copy: the parent's state at the fork */
    coop_stats s;
    coop_get_stats(pool, &s);
    CHECK(s.allocation.current == 2); /* live and the tensor's; pending is not allocated */
    CHECK(s.active.current == 3);
    coop_config c;
    coop_pool_config(pool, &c);
    CHECK(c.backend == COOP_BACKEND_CUDA && c.use_vmm == ps->vmm);
    /* a new CUDA pool: the driver was initialized in the parent */
    coop_config cc = cuda_config(ps->vmm);
    coop_pool *again = (coop_pool *)&again;
    CHECK(coop_pool_create(&cc, &again) == COOP_ERR_UNSUPPORTED);
    CHECK(again == NULL);
    CHECK(message_is(coop_last_error(),
                     "coop_pool_create: the CUDA driver was initialized in process %d; CUDA "
                     "cannot be used in a forked child (process %d)",
                     created, (int)getpid()));
    /* host memory only: the remat records, then the pool's (with a
     * pending event and mapped pages or segments the parent's) */
    coop_clear_error();
    coop_remat_destroy(ps->remat); /* not refused: its records go, its blocks stay */
    CHECK(message_is(coop_last_error(), "%s", ""));
    coop_get_stats(pool, &s);
    CHECK(s.allocation.current == 2); /* the tensor's block, the parent's memory */
    coop_pool_destroy(pool);
    CHECK(message_is(coop_last_error(),
                     "coop_pool_destroy: this CUDA pool was created in process %d; CUDA cannot "
                     "be used in a forked child (process %d): its host metadata is freed, its "
                     "device memory left to process %d",
                     created, (int)getpid(), created));
    long after = driver_calls();
    if (after != before)
        fprintf(stderr, "child: %ld driver calls\n", after - before);
    CHECK(after == before);
    return 0;
}

static void fork_refuses_every_pool_call(bool vmm)
{
    cuda_mock_streams_create();
    parent_state ps = {.pid = (int)getpid(), .vmm = vmm, .held = cuda_map_streams[1]};
    coop_config c = cuda_config(vmm);
    assert_int_equal(coop_pool_create(&c, &ps.pool), COOP_OK);
    coop_status st;
    ps.live = coop_malloc(ps.pool, 1 * MIB, 0, COOP_ALLOC_LOW, &st);
    assert_non_null(ps.live);
    ps.pending = coop_malloc(ps.pool, 4096, 0, COOP_ALLOC_LOW, &st);
    assert_non_null(ps.pending);
    assert_int_equal(coop_record_stream(ps.pool, ps.pending, ps.held), COOP_OK);
    assert_int_equal(cuda_map_hold(ps.held, true), COOP_OK);
    assert_int_equal(coop_free(ps.pool, ps.pending), COOP_OK); /* an event on held */
    coop_remat_config rc = {.recompute = recompute};
    assert_int_equal(coop_remat_create(ps.pool, &rc, &ps.remat), COOP_OK);
    assert_int_equal(coop_tensor_create(ps.remat, 8192, 10, NULL, NULL, 0, 0, &ps.tensor), COOP_OK);

    in_fork_ok(every_pool_call_refused, &ps);

    /* the parent's pool as it was, and usable */
    coop_stats s;
    coop_get_stats(ps.pool, &s);
    assert_int_equal(s.allocation.current, 2);
    assert_int_equal(coop_pool_check(ps.pool), COOP_OK);
    void *p = NULL;
    assert_int_equal(coop_tensor_access(ps.remat, ps.tensor, &p), COOP_OK);
    assert_non_null(p);
    coop_remat_destroy(ps.remat);
    assert_int_equal(coop_free(ps.pool, ps.live), COOP_OK);
    assert_int_equal(cuda_map_hold(ps.held, false), COOP_OK);
    void *q = coop_malloc(ps.pool, 4096, 0, COOP_ALLOC_LOW, &st);
    assert_non_null(q);
    assert_int_equal(coop_free(ps.pool, q), COOP_OK);
    assert_int_equal(coop_empty_cache(ps.pool), COOP_OK);
    coop_get_stats(ps.pool, &s);
    assert_int_equal(s.active.current, 0); /* the pending block completed */
    coop_pool_destroy(ps.pool);
    cuda_mock_streams_destroy();
    cuda_mock_assert_clean("after the parent destroyed its pool");
}

static void test_fork_refuses_every_call_on_a_vmm_cuda_pool(void **state)
{
    (void)state;
    fork_refuses_every_pool_call(true);
}

static void test_fork_refuses_every_call_on_a_segments_cuda_pool(void **state)
{
    (void)state;
    fork_refuses_every_pool_call(false);
}

/* ---- a host pool beside it, and a grandchild ---- */

typedef struct mixed {
    coop_pool *cuda, *host;
    int pid;
} mixed;

static int use_host_pool(coop_pool *pool)
{
    coop_status st;
    void *p = coop_malloc(pool, 4096, 0, COOP_ALLOC_LOW, &st);
    CHECK(p != NULL && st == COOP_OK);
    CHECK(coop_free(pool, p) == COOP_OK);
    CHECK(coop_pool_check(pool) == COOP_OK);
    return 0;
}

static int grandchild(void *arg)
{
    mixed *m = arg;
    long before = driver_calls();
    coop_status st = COOP_OK;
    CHECK(coop_malloc(m->cuda, 4096, 0, COOP_ALLOC_LOW, &st) == NULL);
    CHECK(refused(st, "coop_malloc", m->pid)); /* names this process, not its parent */
    CHECK(use_host_pool(m->host) == 0);
    CHECK(driver_calls() == before);
    return 0;
}

static int child_forks_again(void *arg)
{
    mixed *m = arg;
    long before = driver_calls();
    CHECK(use_host_pool(m->host) == 0);
    CHECK(refused(coop_empty_cache(m->cuda), "coop_empty_cache", m->pid));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(CHILD_LIMIT);
        _exit(grandchild(m));
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the fork's parent handler ran here too: the pool stays this
     * process's refused copy, not unmarked by the fork that made a child */
    CHECK(refused(coop_empty_cache(m->cuda), "coop_empty_cache", m->pid));
    CHECK(driver_calls() == before);
    return 0;
}

static void test_host_pool_beside_stays_usable_and_grandchild_refused(void **state)
{
    (void)state;
    mixed m = {.pid = (int)getpid()};
    coop_config c = cuda_config(true);
    assert_int_equal(coop_pool_create(&c, &m.cuda), COOP_OK);
    coop_config h;
    coop_config_default(&h);
    h.capacity = 64 * MIB;
    assert_int_equal(coop_pool_create(&h, &m.host), COOP_OK);
    in_fork_ok(child_forks_again, &m);
    assert_int_equal(coop_empty_cache(m.cuda), COOP_OK); /* the parent's own */
    coop_pool_destroy(m.host);
    coop_pool_destroy(m.cuda);
    cuda_mock_assert_clean("after the parent destroyed its pool");
}

/* ---- the PyTorch ABI ---- */

typedef struct torch_state {
    void *block;
    coop_stream stream;
    int pid;
} torch_state;

static bool torch_message_is(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool torch_message_is(const char *fmt, ...)
{
    char got[1024], want[1024];
    coop_torch_last_error(got, sizeof got);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    return message_is(got, "%s", want);
}

#define TORCH_REFUSAL                                                                              \
    "%s: device 0's CUDA pool was created in process %d; CUDA cannot be used "                     \
    "in a forked child (process %d)"

/* What the child wrote on its stderr so far (a file in its place). */
static size_t stderr_bytes(void)
{
    fflush(stderr);
    off_t end = lseek(2, 0, SEEK_CUR);
    return end < 0 ? 0 : (size_t)end;
}

static int torch_calls_refused(void *arg)
{
    torch_state *ts = arg;
    int me = (int)getpid();
    /* stderr into a file of its own, to see what is printed */
    FILE *f = tmpfile();
    CHECK(f != NULL);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(fileno(f), 2) == 2);
    long before = driver_calls();
    /* an inherited tensor dropped: a no-op, remembered, not printed */
    coop_torch_free(ts->block, 4096, 0, NULL);
    size_t printed = stderr_bytes();
    CHECK(torch_message_is(TORCH_REFUSAL, "coop_torch_free", ts->pid, me));
    CHECK(printed == 0);
    /* a malloc is an error: printed, counted */
    uint64_t failed = coop_torch_failed_mallocs(0, NULL, 0);
    CHECK(coop_torch_malloc(4096, 0, NULL) == NULL);
    CHECK(torch_message_is(TORCH_REFUSAL, "coop_torch_malloc", ts->pid, me));
    char msg[1024];
    CHECK(coop_torch_failed_mallocs(0, msg, sizeof msg) == failed + 1);
    CHECK(strstr(msg, "coop_torch_malloc: device 0's CUDA pool") == msg);
    CHECK(stderr_bytes() > printed);
    /* device 1 has no pool: creating one is refused */
    CHECK(coop_torch_malloc(4096, 1, NULL) == NULL);
    CHECK(torch_message_is("coop torch: malloc on device 1: coop_pool_create: the CUDA driver was "
                           "initialized in process %d; CUDA cannot be used in a forked child "
                           "(process %d)",
                           ts->pid, me));
    CHECK(coop_torch_pool(1) == NULL);
    coop_torch_empty_cache();
    CHECK(torch_message_is(TORCH_REFUSAL, "coop_torch_empty_cache", ts->pid, me));
    coop_torch_memory_fraction(0.5, 0);
    CHECK(torch_message_is(TORCH_REFUSAL, "coop_torch_memory_fraction", ts->pid, me));
    coop_torch_record_stream(ts->block, (void *)ts->stream);
    CHECK(torch_message_is(TORCH_REFUSAL, "coop_torch_record_stream", ts->pid, me));
    CHECK(coop_torch_forget_stream((void *)ts->stream) == COOP_ERR_UNSUPPORTED);
    CHECK(message_is(coop_last_error(), TORCH_REFUSAL, "coop_torch_forget_stream", ts->pid, me));
    coop_torch_snapshot *snap = (coop_torch_snapshot *)&snap;
    CHECK(coop_torch_snapshot_take(0, &snap) == COOP_ERR_UNSUPPORTED);
    CHECK(snap == NULL);
    CHECK(message_is(coop_last_error(), TORCH_REFUSAL, "coop_torch_snapshot_take", ts->pid, me));
    /* the child's copy of the pool still holds the block: the free did nothing */
    coop_stats s;
    coop_get_stats(coop_torch_pool(0), &s);
    CHECK(s.allocation.current == 1);
    CHECK(driver_calls() == before);
    dup2(saved, 2);
    return 0;
}

static void test_fork_refuses_the_torch_abi_on_cuda(void **state)
{
    (void)state;
    cuda_mock_streams_create();
    assert_int_equal(coop_torch_configure("backend:cuda,capacity:64M"), COOP_OK);
    torch_state ts = {.pid = (int)getpid(), .stream = cuda_map_streams[2]};
    ts.block = coop_torch_malloc(4096, 0, NULL);
    assert_non_null(ts.block);
    in_fork_ok(torch_calls_refused, &ts);
    /* the parent's pool is its own still */
    char msg[1024];
    size_t before = coop_torch_last_error(msg, sizeof msg);
    coop_torch_free(ts.block, 4096, 0, NULL);
    coop_stats s;
    coop_get_stats(coop_torch_pool(0), &s);
    assert_int_equal(s.allocation.current, 0);
    void *p = coop_torch_malloc(4096, 1, NULL); /* and a new device's pool */
    assert_non_null(p);
    coop_torch_free(p, 4096, 1, NULL);
    assert_int_equal(coop_torch_last_error(msg, sizeof msg), before);
}

/* ---- the child's destroy with the event cache full ---- */

/* The backend keeps up to 64 destroyed events for reuse and destroys the
 * next one through the driver. In a child, destroy hands the parent's
 * pending event to nobody: with the parent's cache full at the fork,
 * handing it to the copied backend would be a driver call. */
static int destroy_makes_no_driver_call(void *arg)
{
    coop_pool *pool = arg;
    long before = driver_calls();
    coop_pool_destroy(pool);
    long after = driver_calls();
    if (after != before)
        fprintf(stderr, "child: %ld driver calls\n", after - before);
    CHECK(after == before);
    return 0;
}

static void test_fork_destroy_with_the_event_cache_full(void **state)
{
    (void)state;
    enum { EVENTS = 80 }; /* more than the backend's cache of 64 */
    cuda_mock_streams_create();
    coop_stream held = cuda_map_streams[1], other = cuda_map_streams[2];
    coop_config c = cuda_config(true);
    coop_pool *pool;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    void *p[EVENTS];
    coop_status st;
    for (int i = 0; i < EVENTS; i++) {
        p[i] = coop_malloc(pool, 4096, 0, COOP_ALLOC_LOW, &st);
        assert_non_null(p[i]);
        assert_int_equal(coop_record_stream(pool, p[i], other), COOP_OK);
    }
    void *pending = coop_malloc(pool, 4096, 0, COOP_ALLOC_LOW, &st);
    assert_non_null(pending);
    assert_int_equal(coop_record_stream(pool, pending, held), COOP_OK);
    assert_int_equal(cuda_map_hold(held, true), COOP_OK);
    assert_int_equal(cuda_map_hold(other, true), COOP_OK); /* all live at once */
    for (int i = 0; i < EVENTS; i++)
        assert_int_equal(coop_free(pool, p[i]), COOP_OK);
    assert_int_equal(coop_free(pool, pending), COOP_OK); /* the event left at the fork */
    coop_stats s;
    coop_get_stats(pool, &s);
    assert_int_equal(s.active.current, EVENTS + 1); /* blocks: all pending */
    assert_int_equal(cuda_map_hold(other, false), COOP_OK);
    /* an allocation looks at the pending blocks: EVENTS complete, 64 cached
     * (coop_empty_cache would wait for held too) */
    void *q = coop_malloc(pool, 4096, 0, COOP_ALLOC_LOW, &st);
    assert_non_null(q);
    assert_int_equal(coop_free(pool, q), COOP_OK);
    coop_get_stats(pool, &s);
    assert_int_equal(s.active.current, 1);

    in_fork_ok(destroy_makes_no_driver_call, pool);

    assert_int_equal(cuda_map_hold(held, false), COOP_OK);
    assert_int_equal(coop_empty_cache(pool), COOP_OK);
    coop_get_stats(pool, &s);
    assert_int_equal(s.active.current, 0);
    coop_pool_destroy(pool);
    cuda_mock_streams_destroy();
    cuda_mock_assert_clean("after the parent destroyed its pool");
}

/* ---- a child forked inside a walk visitor ---- */

/* The child goes on inside the visitor, its copy of the pool held for the
 * walk: coop_remat_destroy, which a child may call on its copy of a CUDA
 * pool (its records freed under the pool's lock), is refused there as in
 * the parent, not a wait for the walk's lock (before: the alarm). */
static int remat_destroy_in_the_walk(void *arg)
{
    parent_state *ps = arg;
    coop_clear_error();
    coop_remat_destroy(ps->remat);
    CHECK(message_is(coop_last_error(),
                     "coop_remat_destroy: called from inside a coop_walk visitor of this pool, "
                     "which the walk holds: nothing changed (call it after coop_walk returns; "
                     "the calls that only read the pool are answered in a visitor)"));
    coop_stats s;
    coop_get_stats(ps->pool, &s); /* answered from the walk's copy */
    CHECK(s.allocation.current == 1);
    return 0;
}

static int fork_in_visitor(const coop_block_info *b, void *ctx)
{
    (void)b;
    in_fork_ok(remat_destroy_in_the_walk, ctx);
    return 1;
}

static void test_fork_in_a_walk_visitor_refuses_remat_destroy(void **state)
{
    (void)state;
    parent_state ps = {.pid = (int)getpid()};
    coop_config c = cuda_config(true);
    assert_int_equal(coop_pool_create(&c, &ps.pool), COOP_OK);
    coop_remat_config rc = {.recompute = recompute};
    assert_int_equal(coop_remat_create(ps.pool, &rc, &ps.remat), COOP_OK);
    assert_int_equal(coop_tensor_create(ps.remat, 8192, 10, NULL, NULL, 0, 0, &ps.tensor), COOP_OK);
    assert_int_equal(coop_walk(ps.pool, NULL, fork_in_visitor, &ps), COOP_OK);
    void *p = NULL;
    assert_int_equal(coop_tensor_access(ps.remat, ps.tensor, &p), COOP_OK);
    assert_non_null(p);
    coop_remat_destroy(ps.remat);
    coop_pool_destroy(ps.pool);
    cuda_mock_assert_clean("after the parent destroyed its pool");
}

int main(void)
{
    cuda_mock_load("lifecycle_cuda_mock_test", COOP_TEST_BUILDDIR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_refuses_every_call_on_a_vmm_cuda_pool),
        cmocka_unit_test(test_fork_refuses_every_call_on_a_segments_cuda_pool),
        cmocka_unit_test(test_host_pool_beside_stays_usable_and_grandchild_refused),
        cmocka_unit_test(test_fork_refuses_the_torch_abi_on_cuda),
        cmocka_unit_test(test_fork_destroy_with_the_event_cache_full),
        cmocka_unit_test(test_fork_in_a_walk_visitor_refuses_remat_destroy),
    };
    return cases_in_children("lifecycle_cuda_mock_test", tests, sizeof tests / sizeof tests[0], 60);
}
