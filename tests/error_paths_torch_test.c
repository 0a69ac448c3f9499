/*
 * Error paths of the PyTorch ABI, one call at a time, as error_paths_test.c
 * does for the pool and the remat API: each coop_torch_* entry point runs on
 * a prepared state with its N-th host allocation (tests/host_alloc_fault.h),
 * its N-th metadata allocation (meta_fail_nth) or, where a pool exists, its
 * N-th backend call (coop_inject_fault) failing, N = 1, 2, ... until the
 * call no longer reaches the fault.
 *
 * The ABI's state is per process and its pools are never destroyed, so each
 * (case, kind, N) runs in a child forked from a parent that never calls the
 * ABI (as torch_abi_fresh_test.c does): every child starts from a new
 * process's state. The child tells the parent through its exit status
 * whether the fault was reached.
 *
 * A refused call (a NULL malloc, a non-OK status, or, for the void hooks, a
 * new coop_torch_last_error) must: say so in coop_torch_last_error with a
 * message naming the failure ("host memory", or the injected backend fault);
 * for a malloc, count one failed malloc on the device with that message;
 * leave the device's pool passing coop_pool_check with what the caller owns
 * unchanged (and, for host and metadata failures, the cache too); leave the
 * history as it was but for what coop.h documents (a refused malloc records
 * one OOM event); and, after the child frees everything and destroys the
 * pools, leave as many live host blocks as the child had at its start.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "coop.h"
#include "meta.h"
#include "status.h"

#include "host_alloc_fault.h"
#include "error_paths_faults.h"

#define MiB (UINT64_C(1) << 20)
#define STREAM(n) ((void *)(uintptr_t)(n))
#define SLOTS 8
#define MAX_BLOCKS 256
#define MAX_SEGMENTS 16
#define MAX_EVENTS 64
/* bounds one sweep: a call making more allocations is a bad pick */
#define MAX_N 3000

/* the child's exit statuses */
#define CHILD_HIT 0
#define CHILD_NOT_HIT 10
#define CHILD_FAILED 1

typedef struct fixture {
    bool vmm;
    void *p[SLOTS];
    size_t size[SLOTS];
    coop_torch_snapshot *snap; /* the snapshot case's result */
    char text[512];            /* the settings case's result */
    coop_status st;            /* what a call_case.returns_status call returned */
} fixture;

typedef struct call_case {
    const char *name;
    void (*setup)(fixture *f); /* faults off */
    /* Makes the call; true if it was refused. */
    bool (*call)(fixture *f);
    bool is_malloc; /* a refusal counts a failed malloc and records an OOM */
    /* the call releases cached memory (empty_cache, a fraction below the
     * reserved bytes): what it released before its failure stays released */
    bool cache_may_change;
    /* returns a coop_status, whose message is the thread's coop_last_error
     * (as python/coop/torch.py reads it), not coop_torch_last_error (the
     * hooks' channel: PyTorch gives them no other) */
    bool returns_status;
} call_case;

static char where[200];
static int problems;

#define PROBLEM(...)                                                                               \
    do {                                                                                           \
        printf("%s: ", where);                                                                     \
        printf(__VA_ARGS__);                                                                       \
        putchar('\n');                                                                             \
        problems++;                                                                                \
    } while (0)

/* ---- State a caller can see ---- */

typedef struct snapshot {
    bool has_pool;
    coop_stats stats;
    size_t num_blocks, num_segments;
    coop_block_info blocks[MAX_BLOCKS];
    coop_segment_info segments[MAX_SEGMENTS];
    size_t num_events;
    coop_torch_event events[MAX_EVENTS];
    uint64_t failed_mallocs;
    char failure[512];
    char settings[512];
} snapshot;

static int on_segment(const coop_segment_info *s, void *ctx)
{
    snapshot *sn = ctx;
    if (sn->num_segments < MAX_SEGMENTS)
        sn->segments[sn->num_segments++] = *s;
    return 0;
}

static int on_block(const coop_block_info *b, void *ctx)
{
    snapshot *sn = ctx;
    if (sn->num_blocks < MAX_BLOCKS)
        sn->blocks[sn->num_blocks++] = *b;
    return 0;
}

/* Takes the state; faults must be off (the history copy allocates). */
static void take(snapshot *sn)
{
    memset(sn, 0, sizeof *sn);
    coop_pool *pool = coop_torch_pool(0);
    sn->has_pool = pool != NULL;
    if (pool) {
        coop_get_stats(pool, &sn->stats);
        if (coop_walk(pool, on_segment, on_block, sn) != COOP_OK)
            PROBLEM("walk: %s", coop_last_error());
    }
    coop_torch_snapshot *s = NULL;
    if (coop_torch_snapshot_take(0, &s) != COOP_OK) {
        PROBLEM("snapshot: %s", coop_last_error());
    } else {
        sn->num_events = s->num_events;
        for (size_t i = 0; i < s->num_events && i < MAX_EVENTS; i++) {
            sn->events[i] = s->events[i];
            sn->events[i].time_us = 0;
        }
        coop_torch_snapshot_free(s);
    }
    sn->failed_mallocs = coop_torch_failed_mallocs(0, sn->failure, sizeof sn->failure);
    coop_torch_settings(sn->settings, sizeof sn->settings);
}

#define SAME(field)                                                                                \
    do {                                                                                           \
        if (a->field != b->field)                                                                  \
            PROBLEM(#field " changed from %llu to %llu", (unsigned long long)a->field,             \
                    (unsigned long long)b->field);                                                 \
    } while (0)

/* Whether a block at address was pending in sn. */
static bool was_pending(const snapshot *sn, uintptr_t address)
{
    for (size_t i = 0; i < sn->num_blocks; i++)
        if (sn->blocks[i].address == address && sn->blocks[i].state == COOP_BLOCK_PENDING)
            return true;
    return false;
}

static void same_state(const call_case *c, fault_kind kind, const snapshot *a, const snapshot *b)
{
    if (!a->has_pool && b->has_pool) {
        /* the first malloc made the pool, then failed: the pool stays (the
         * next malloc would make it anyway), empty, and the failure is
         * recorded as an OOM on it */
        if (b->stats.allocation.current || b->stats.active.current)
            PROBLEM("a pool made by a refused malloc holds %lld blocks",
                    (long long)b->stats.allocation.current);
        if (b->num_events != (c->is_malloc ? 1 : 0))
            PROBLEM("a pool made by a refused malloc has %zu events", b->num_events);
        if (strcmp(a->settings, b->settings))
            PROBLEM("settings changed from '%s' to '%s'", a->settings, b->settings);
        return;
    }
    SAME(has_pool);
    SAME(stats.allocation.current);
    SAME(stats.allocated_bytes.current);
    SAME(stats.requested_bytes.current);
    /* a call that releases cache may also apply a memory limit that was
     * waiting for frees (coop.h, coop_torch_memory_fraction), before its
     * failure: the capacity may then drop, never rise */
    if (c->cache_may_change ? b->stats.capacity > a->stats.capacity
                            : b->stats.capacity != a->stats.capacity)
        PROBLEM("stats.capacity changed from %llu to %llu", (unsigned long long)a->stats.capacity,
                (unsigned long long)b->stats.capacity);
    /* A block freed earlier and pending on a stream the pool now sees
     * finished becomes reusable at any pool call, this one too: the caller
     * gave it up already, and its free_completed is recorded then (as torch's
     * process_events does). So active may only drop, by such blocks. */
    if (b->stats.active.current > a->stats.active.current)
        PROBLEM("stats.active.current went up from %lld to %lld",
                (long long)a->stats.active.current, (long long)b->stats.active.current);
    /* the allocated blocks, in address order, exactly; the pending ones of
     * after among those of before */
    size_t ia = 0, ib = 0;
    for (;;) {
        while (ia < a->num_blocks && a->blocks[ia].state != COOP_BLOCK_ALLOCATED)
            ia++;
        while (ib < b->num_blocks && b->blocks[ib].state != COOP_BLOCK_ALLOCATED)
            ib++;
        if (ia == a->num_blocks || ib == b->num_blocks)
            break;
        if (a->blocks[ia].address != b->blocks[ib].address ||
            a->blocks[ia].size != b->blocks[ib].size ||
            a->blocks[ia].stream != b->blocks[ib].stream)
            PROBLEM("allocated block %zu changed", ia);
        ia++, ib++;
    }
    if ((ia == a->num_blocks) != (ib == b->num_blocks))
        PROBLEM("the number of allocated blocks changed");
    for (size_t j = 0; j < b->num_blocks; j++)
        if (b->blocks[j].state == COOP_BLOCK_PENDING && !was_pending(a, b->blocks[j].address))
            PROBLEM("block %#lx is pending after, not before", (unsigned long)b->blocks[j].address);
    /* the cache, for host and metadata failures, unless a pending block
     * completed (it is free now, and may have merged with its neighbours) */
    if (kind != FAULT_BACKEND && !c->cache_may_change &&
        a->stats.active.current == b->stats.active.current) {
        SAME(stats.reserved_bytes.current);
        SAME(stats.reserved_bytes.peak);
        SAME(stats.segment.current);
        SAME(stats.num_maps);
        SAME(stats.num_unmaps);
        SAME(stats.free_bytes);
        SAME(num_blocks);
        SAME(num_segments);
        for (size_t i = 0; i < a->num_blocks && i < b->num_blocks; i++) {
            SAME(blocks[i].address);
            SAME(blocks[i].size);
            SAME(blocks[i].state);
            SAME(blocks[i].mapped_bytes);
        }
    }
    /* history: as it was, but for the OOM event a refused malloc records on
     * a device that has a pool (with none, no history is recorded) */
    size_t added = c->is_malloc && a->has_pool ? 1 : 0;
    snapshot *bb = (snapshot *)b; /* drops the completions of pending blocks */
    size_t kept = a->num_events;
    for (size_t i = a->num_events; i < b->num_events && i < MAX_EVENTS; i++)
        if (!(b->events[i].action == COOP_TORCH_FREE_COMPLETED &&
              was_pending(a, b->events[i].address)))
            bb->events[kept++] = b->events[i];
    if (b->num_events <= MAX_EVENTS)
        bb->num_events = kept;
    if (b->num_events != a->num_events + added)
        PROBLEM("history went from %zu to %zu events (%zu expected)", a->num_events, b->num_events,
                a->num_events + added);
    else {
        for (size_t i = 0; i < a->num_events && i < MAX_EVENTS; i++)
            if (memcmp(&a->events[i], &b->events[i], sizeof a->events[i]))
                PROBLEM("history event %zu changed", i);
        if (added && b->num_events <= MAX_EVENTS &&
            b->events[b->num_events - 1].action != COOP_TORCH_OOM)
            PROBLEM("the event a refused malloc recorded is action %d, not an OOM",
                    (int)b->events[b->num_events - 1].action);
    }
    if (strcmp(a->settings, b->settings))
        PROBLEM("settings changed from '%s' to '%s'", a->settings, b->settings);
}

/* ---- Faults ---- */

/* ---- Set-up and teardown ---- */

static void configure(fixture *f)
{
    const char *conf = f->vmm ? "backend:host,capacity:16M,page:64K,vmm:true,check:true"
                              : "backend:host,capacity:16M,page:64K,vmm:false,segment:4M,"
                                "check:true";
    if (coop_torch_configure(conf) != COOP_OK)
        PROBLEM("configure: %s", coop_last_error());
    coop_torch_record_history(4096);
}

static void must_malloc(fixture *f, int slot, size_t size, int stream)
{
    f->p[slot] = coop_torch_malloc(size, 0, STREAM(stream));
    f->size[slot] = size;
    if (!f->p[slot]) {
        char msg[512];
        coop_torch_last_error(msg, sizeof msg);
        PROBLEM("set-up malloc of %zu: %s", size, msg);
        exit(CHILD_FAILED);
    }
}

/* Frees everything, destroys the pools (the child ends next: the ABI's
 * slot keeps a dangling pointer nobody reads) and drops the history. */
static void teardown(fixture *f)
{
    coop_torch_snapshot_free(f->snap);
    for (int i = 0; i < SLOTS; i++)
        if (f->p[i])
            coop_torch_free(f->p[i], f->size[i], 0, STREAM(0));
    coop_torch_record_history(0);
    for (int d = 0; d < 64; d++) {
        coop_pool *pool = coop_torch_pool(d);
        if (!pool)
            continue;
        coop_host_hold_stream(pool, 7, false);
        if (coop_empty_cache(pool) != COOP_OK)
            PROBLEM("teardown empty_cache: %s", coop_last_error());
        coop_stats s;
        coop_get_stats(pool, &s);
        if (s.active.current)
            PROBLEM("teardown: %lld blocks still active", (long long)s.active.current);
        if (coop_pool_check(pool) != COOP_OK)
            PROBLEM("teardown pool check: %s", coop_last_error());
        coop_pool_destroy(pool);
    }
}

/* ---- One (case, kind, N) in a child ---- */

static int run_child(const call_case *c, bool vmm, fault_kind kind, uint64_t n)
{
    long live_start = host_fault_live();
    int64_t leaked_start = meta_leaked_allocations();
    fixture f = {.vmm = vmm};
    configure(&f);
    c->setup(&f);
    if (kind == FAULT_BACKEND && !coop_torch_pool(0))
        return CHILD_NOT_HIT; /* no pool: no backend to fail */
    snapshot before, after;
    take(&before);
    /* a sentinel in the ABI's last error: a void hook that reports a failure
     * replaces it */
    coop_torch_init(-1);
    char sentinel[1024];
    coop_torch_last_error(sentinel, sizeof sentinel);
    coop_clear_error();
    fault_arm(kind, n, coop_torch_pool(0));
    bool refused = c->call(&f);
    bool hit = fault_disarm(kind, n, coop_torch_pool(0));
    char msg[1024];
    if (c->returns_status)
        snprintf(msg, sizeof msg, "%s", coop_last_error());
    else
        coop_torch_last_error(msg, sizeof msg);
    if (refused) {
        if (!hit)
            PROBLEM("refused without reaching the fault: %s", msg);
        if (!strcmp(msg, sentinel) || !msg[0])
            PROBLEM("refused without a message in %s",
                    c->returns_status ? "coop_last_error" : "coop_torch_last_error");
        else if (!strstr(msg, kind == FAULT_BACKEND ? "injected fault" : "memory"))
            PROBLEM("the message does not name the %s failure: %s", kind_names[kind], msg);
        coop_status want = kind == FAULT_BACKEND ? COOP_ERR_BACKEND : COOP_ERR_HOST_NOMEM;
        if (c->returns_status && f.st != want)
            PROBLEM("status %s, not %s", coop_strerror(f.st), coop_strerror(want));
        if (coop_torch_pool(0) && coop_pool_check(coop_torch_pool(0)) != COOP_OK)
            PROBLEM("pool check: %s", coop_last_error());
        take(&after);
        if (c->is_malloc) {
            if (after.failed_mallocs != before.failed_mallocs + 1)
                PROBLEM("failed mallocs went from %llu to %llu",
                        (unsigned long long)before.failed_mallocs,
                        (unsigned long long)after.failed_mallocs);
            if (strcmp(after.failure, msg))
                PROBLEM("the failed malloc's message '%s' is not the last error '%s'",
                        after.failure, msg);
            after.failed_mallocs = before.failed_mallocs;
            snprintf(after.failure, sizeof after.failure, "%s", before.failure);
        }
        {
            const snapshot *a = &before, *b = &after;
            SAME(failed_mallocs);
            same_state(c, kind, a, b);
        }
        /* the same malloc again, no fault armed, succeeds: the failure was
         * not kept (a pool that could not be made is made now) */
        if (c->is_malloc && c->call(&f)) {
            coop_torch_last_error(msg, sizeof msg);
            PROBLEM("the same malloc, no fault armed, still fails: %s", msg);
        }
    }
    teardown(&f);
    if (host_fault_live() != live_start)
        PROBLEM("%ld host blocks leaked (%s)", host_fault_live() - live_start,
                refused ? "refused" : "succeeded");
    if (meta_leaked_allocations() != leaked_start)
        PROBLEM("a pool was destroyed with %lld metadata allocations live",
                (long long)(meta_leaked_allocations() - leaked_start));
    if (problems)
        return CHILD_FAILED;
    return hit ? CHILD_HIT : CHILD_NOT_HIT;
}

/* Runs c with each allocation (kind) failing in turn, each in a child;
 * returns how many were failed. */
static uint64_t sweep(const call_case *c, bool vmm, fault_kind kind)
{
    for (uint64_t n = 1; n <= MAX_N; n++) {
        snprintf(where, sizeof where, "%s (%s): %s allocation %llu failed", c->name,
                 vmm ? "vmm" : "segments", kind_names[kind], (unsigned long long)n);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            /* the ABI prints the first error of each kind to stderr: once
             * per child here, which says nothing */
            int null = open("/dev/null", O_WRONLY);
            if (null >= 0)
                dup2(null, 2);
            int rc = run_child(c, vmm, kind, n);
            fflush(stdout);
            _exit(rc);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status))
            fail_msg("%s: the child died (signal %d)", where, WTERMSIG(status));
        if (WEXITSTATUS(status) == CHILD_NOT_HIT)
            return n - 1;
        if (WEXITSTATUS(status) != CHILD_HIT)
            fail_msg("%s: failed (above)", where);
    }
    fail_msg("%s: more than %d allocations", c->name, MAX_N);
    return 0;
}

static void sweep_all(const call_case *c, bool vmm)
{
    /* COOP_ERROR_PATHS_ONLY=TEXT: only the cases whose name contains it */
    const char *only = getenv("COOP_ERROR_PATHS_ONLY");
    if (only && !strstr(c->name, only))
        return;
    uint64_t n[3];
    for (int k = 0; k < 3; k++)
        n[k] = sweep(c, vmm, (fault_kind)k);
    printf("%-44s %-8s host %3llu  meta %3llu  backend %3llu\n", c->name, vmm ? "vmm" : "segments",
           (unsigned long long)n[0], (unsigned long long)n[1], (unsigned long long)n[2]);
}

/* ---- Cases ---- */

static void nothing(fixture *f)
{
    (void)f;
}

/* a memory fraction set before the first malloc: applied when the pool is
 * made */
static void fraction_before_pool(fixture *f)
{
    (void)f;
    coop_torch_memory_fraction(0.5, 0);
}

/* a pool with a 1 MiB block on stream 0 and 2 MiB cached on stream 1 */
static void one_block(fixture *f)
{
    must_malloc(f, 0, 1 * MiB, 0);
    must_malloc(f, 1, 1 * MiB, 0);
    void *q = coop_torch_malloc(2 * MiB, 0, STREAM(1));
    if (!q)
        exit(CHILD_FAILED);
    coop_torch_free(q, 2 * MiB, 0, STREAM(1));
}

static bool malloc_3m(fixture *f)
{
    f->p[7] = coop_torch_malloc(3 * MiB, 0, STREAM(0));
    f->size[7] = 3 * MiB;
    return f->p[7] == NULL;
}

static bool malloc_new_stream(fixture *f)
{
    f->p[7] = coop_torch_malloc(512 * 1024, 0, STREAM(5));
    f->size[7] = 512 * 1024;
    return f->p[7] == NULL;
}

/* p[0] used on stream 7 (held busy), freed: pending */
static void pending_free(fixture *f)
{
    one_block(f);
    coop_pool *pool = coop_torch_pool(0);
    if (coop_host_hold_stream(pool, 7, true) != COOP_OK)
        exit(CHILD_FAILED);
    coop_torch_record_stream(f->p[0], STREAM(7));
    coop_torch_free(f->p[0], f->size[0], 0, STREAM(0));
    f->p[0] = NULL;
    coop_host_hold_stream(pool, 7, false);
}

/* The void hooks say a refusal only through coop_torch_last_error: a call
 * was refused iff the message changed across it (error_mark before,
 * error_changed after). */
typedef struct error_mark {
    char text[1024];
} error_mark;

static void mark_error(error_mark *m)
{
    coop_torch_last_error(m->text, sizeof m->text);
}

static bool error_changed(const error_mark *m)
{
    char now[sizeof m->text];
    coop_torch_last_error(now, sizeof now);
    return strcmp(m->text, now) != 0;
}

/* record_stream of p[0] on stream: refused? */
static bool record_refused(fixture *f, void *stream)
{
    error_mark m;
    mark_error(&m);
    coop_torch_record_stream(f->p[0], stream);
    return error_changed(&m);
}

static bool record_first(fixture *f)
{
    return record_refused(f, STREAM(3));
}

static void two_uses(fixture *f)
{
    one_block(f);
    coop_torch_record_stream(f->p[0], STREAM(3));
    coop_torch_record_stream(f->p[0], STREAM(4));
}

static bool record_third(fixture *f)
{
    return record_refused(f, STREAM(5));
}

static bool free_first(fixture *f)
{
    error_mark m;
    mark_error(&m);
    coop_torch_free(f->p[0], f->size[0], 0, STREAM(0));
    bool refused = error_changed(&m);
    if (!refused)
        f->p[0] = NULL;
    return refused;
}

static bool empty_cache(fixture *f)
{
    (void)f;
    error_mark m;
    mark_error(&m);
    coop_torch_empty_cache();
    return error_changed(&m);
}

static bool forget_stream(fixture *f)
{
    f->st = coop_torch_forget_stream(STREAM(7));
    return f->st != COOP_OK;
}

/* 1 MiB of the 16 for a pool holding 2 MiB live and 2 MiB cached */
static bool fraction_below_reserved(fixture *f)
{
    (void)f;
    error_mark m;
    mark_error(&m);
    coop_torch_memory_fraction(1.0 / 16, 0);
    return error_changed(&m);
}

/* A limit of 1.5 MiB waiting for frees (2 MiB live when it was
 * set), then p[1] freed: the next malloc tries the limit again, releasing the
 * cache, before its own work */
static void limit_pending(fixture *f)
{
    one_block(f);
    coop_torch_memory_fraction(1.5 / 16, 0);
    coop_torch_free(f->p[1], f->size[1], 0, STREAM(0));
    f->p[1] = NULL;
}

static bool malloc_retries_limit(fixture *f)
{
    f->p[7] = coop_torch_malloc(512 * 1024, 0, STREAM(0));
    f->size[7] = 512 * 1024;
    return f->p[7] == NULL;
}

static bool snapshot_take(fixture *f)
{
    coop_torch_snapshot *s = (coop_torch_snapshot *)f; /* must be set to NULL on failure */
    f->st = coop_torch_snapshot_take(0, &s);
    if (f->st != COOP_OK) {
        if (s)
            PROBLEM("a refused snapshot left *out %p", (void *)s);
        return true;
    }
    f->snap = s;
    return false;
}

static bool settings(fixture *f)
{
    f->st = coop_torch_settings(f->text, sizeof f->text);
    return f->st != COOP_OK;
}

static const call_case cases[] = {
    {"coop_torch_malloc: first, creates the pool", nothing, malloc_3m, true, false, false},
    {"coop_torch_malloc: first, with a fraction", fraction_before_pool, malloc_3m, true, false,
     false},
    {"coop_torch_malloc: maps / grows", one_block, malloc_3m, true, false, false},
    {"coop_torch_malloc: a new stream", one_block, malloc_new_stream, true, false, false},
    {"coop_torch_malloc: pending free due", pending_free, malloc_3m, true, false, false},
    {"coop_torch_malloc: a pending limit retried", limit_pending, malloc_retries_limit, true, true,
     false},
    {"coop_torch_record_stream: first use", one_block, record_first, false, false, false},
    {"coop_torch_record_stream: third use", two_uses, record_third, false, false, false},
    {"coop_torch_free: recorded block", two_uses, free_first, false, false, false},
    {"coop_torch_free: plain block", one_block, free_first, false, false, false},
    {"coop_torch_empty_cache", pending_free, empty_cache, false, true, false},
    {"coop_torch_forget_stream: pending free", pending_free, forget_stream, false, false, true},
    {"coop_torch_memory_fraction: below mapped", one_block, fraction_below_reserved, false, true,
     false},
    {"coop_torch_snapshot_take", two_uses, snapshot_take, false, false, true},
    {"coop_torch_settings", one_block, settings, false, false, true},
};

static void test_torch_calls(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sweep_all(&cases[i], true);
        sweep_all(&cases[i], false);
    }
}

/* Events device 0's history holds now. */
static size_t history_events(void)
{
    coop_torch_snapshot *snap = NULL;
    if (coop_torch_snapshot_take(0, &snap) != COOP_OK)
        return (size_t)-1;
    size_t n = snap->num_events;
    coop_torch_snapshot_free(snap);
    return n;
}

/* The history's ring cannot grow (its first 1024 slots are full, a bound of
 * 4096): the malloc still succeeds, the ring keeps its last 1024 events,
 * the failure is reported once, naming it, and clear_history gives the ring
 * its bound back. Returns the number of problems. */
static int history_growth_child(bool vmm)
{
    long live_start = host_fault_live();
    fixture f = {.vmm = vmm};
    configure(&f);
    /* 341 malloc / free pairs of a cached block (3 events each), then one
     * malloc: 1024 events; the malloc after that reuses the cache, so its
     * only host allocation is the ring's growth */
    for (int i = 0; i < 341; i++) {
        must_malloc(&f, 0, 1 * MiB, 0);
        coop_torch_free(f.p[0], f.size[0], 0, STREAM(0));
        f.p[0] = NULL;
    }
    must_malloc(&f, 0, 1 * MiB, 0);
    must_malloc(&f, 1, 1 * MiB, 0); /* maps its pages */
    coop_torch_free(f.p[1], f.size[1], 0, STREAM(0));
    f.p[1] = NULL;
    snprintf(where, sizeof where, "history growth (%s)", vmm ? "vmm" : "segments");
    size_t n = history_events();
    if (n != 1027)
        PROBLEM("%zu events before, not 1027", n);
    coop_torch_clear_history();
    for (int i = 0; i < 341; i++) {
        must_malloc(&f, 1, 1 * MiB, 0);
        coop_torch_free(f.p[1], f.size[1], 0, STREAM(0));
        f.p[1] = NULL;
    }
    must_malloc(&f, 1, 1 * MiB, 0);
    if ((n = history_events()) != 1024)
        PROBLEM("%zu events, not 1024", n);
    coop_torch_init(-1); /* sentinel */
    uint64_t failed = coop_torch_failed_mallocs(0, NULL, 0);
    host_fault_arm(1);
    void *p = coop_torch_malloc(1 * MiB / 2, 0, STREAM(0));
    bool hit = host_fault_disarm();
    char msg[1024];
    coop_torch_last_error(msg, sizeof msg);
    if (!hit)
        PROBLEM("the malloc made no host allocation (the ring did not grow?)");
    if (!p)
        PROBLEM("the malloc failed: %s", msg);
    f.p[2] = p, f.size[2] = 1 * MiB / 2;
    if (!strstr(msg, "history") || !strstr(msg, "host memory"))
        PROBLEM("the report does not name the history's growth: %s", msg);
    if (coop_torch_failed_mallocs(0, NULL, 0) != failed)
        PROBLEM("a malloc that succeeded was counted as failed");
    coop_torch_snapshot *snap = NULL;
    if (coop_torch_snapshot_take(0, &snap) != COOP_OK) {
        PROBLEM("snapshot: %s", coop_last_error());
    } else {
        if (snap->num_events != 1024)
            PROBLEM("%zu events after, not 1024 (the last it has room for)", snap->num_events);
        else if (snap->events[1023].action != COOP_TORCH_ALLOC ||
                 snap->events[1023].address != (uintptr_t)p)
            PROBLEM("the newest event is not the malloc's");
        coop_torch_snapshot_free(snap);
    }
    /* reported once: the next event that finds the ring full says nothing */
    coop_torch_init(-1);
    coop_torch_free(f.p[2], f.size[2], 0, STREAM(0));
    f.p[2] = NULL;
    char again[1024];
    coop_torch_last_error(again, sizeof again);
    if (strstr(again, "history"))
        PROBLEM("reported again: %s", again);
    if ((n = history_events()) != 1024)
        PROBLEM("%zu events after a free, not 1024", n);
    /* cleared: the ring grows again up to its bound */
    coop_torch_clear_history();
    for (int i = 0; i < 400; i++) {
        must_malloc(&f, 2, 1 * MiB, 0);
        coop_torch_free(f.p[2], f.size[2], 0, STREAM(0));
        f.p[2] = NULL;
    }
    if ((n = history_events()) != 1200)
        PROBLEM("%zu events after clear_history, not 1200", n);
    teardown(&f);
    if (host_fault_live() != live_start)
        PROBLEM("%ld host blocks leaked", host_fault_live() - live_start);
    return problems;
}

static void test_history_cannot_grow(void **state)
{
    (void)state;
    for (int vmm = 1; vmm >= 0; vmm--) {
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            if (null >= 0)
                dup2(null, 2);
            int rc = history_growth_child(vmm) ? CHILD_FAILED : 0;
            fflush(stdout);
            _exit(rc);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
}

int main(void)
{
    unsetenv("COOP_ALLOC_CONF");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_calls),
        cmocka_unit_test(test_history_cannot_grow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
