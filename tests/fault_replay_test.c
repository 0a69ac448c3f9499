/*
 * Fault injection through a whole replay of a shipped trace
 * (traces/unet-train-step.trace.gz, read with the trace readers, replayed
 * on libcoop directly): first one clean replay counts the backend calls it
 * makes (reserve, map, unmap, event record / query, segment alloc / free),
 * then the replay is repeated once per call index N with the Nth call
 * failing (coop_inject_fault, every kind at once).
 *
 * The replay runs at a capacity just above the trace's peak of live bytes,
 * so the pool must unmap free pages (or release segments) to make room;
 * every 5th allocation is also used on a second stream that is held and
 * released in turns, so frees wait on events that are recorded and queried.
 * Both pool kinds are swept: VMM (pages mapped on demand) and segments.
 *
 * Every call must succeed or fail cleanly (NULL / a status out of memory or
 * backend error, never a crash); coop_pool_check must hold right after the
 * operation that met the fault and at the end; once the faults stop,
 * everything can be freed and empty_cache leaves nothing mapped, no
 * allocation, no pending block (no leaked pages, segments, events or
 * records); LeakSanitizer checks the host heap in the sanitized pass.
 *
 * The whole sweep (every index, both pool kinds: ~2300 replays) takes about
 * a second, 3 s under ASan, so CI runs all of it. COOP_FAULT_STRIDE=K sweeps
 * every Kth index only; COOP_FAULT_TRACE=PATH sweeps another trace (any
 * format trace_read reads); COOP_FAULT_CHECK_EVERY_OP=1 also runs
 * coop_pool_check after every operation of every replay (the pool's check
 * mode: a minute or more, for a one-off deep run).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "coop.h"
#include "trace/trace.h"

#define MiB (UINT64_C(1) << 20)
#define SIDE_STREAM ((coop_stream)0x5eed)

static trace t;
static uint64_t peak_live; /* peak of live bytes, each rounded up to 512 */

typedef struct replay {
    coop_pool *pool;
    void **live;         /* by trace id */
    uint64_t fault_at;   /* call index that fails (0 = none) */
    bool fault_checked;  /* pool checked right after the faulty call */
    uint64_t failed_ops; /* operations that returned an error */
} replay;

static void expect_clean(coop_status st, const char *what, size_t event)
{
    if (st != COOP_OK && st != COOP_ERR_NOMEM && st != COOP_ERR_BACKEND &&
        st != COOP_ERR_HOST_NOMEM)
        fail_msg("event %zu (%s): unexpected %s: %s", event, what, coop_strerror(st),
                 coop_last_error());
}

/* Checks the pool once, right after the operation during which the fault fired. */
static void check_after_fault(replay *r, size_t event)
{
    if (r->fault_checked || !r->fault_at ||
        coop_backend_calls(r->pool, COOP_FAULT_ALL) < r->fault_at)
        return;
    r->fault_checked = true;
    if (coop_pool_check(r->pool) != COOP_OK)
        fail_msg("fault at call %llu, event %zu: %s", (unsigned long long)r->fault_at, event,
                 coop_last_error());
}

static void replay_events(replay *r)
{
    uint64_t allocs = 0;
    for (size_t i = 0; i < t.num_events; i++) {
        const trace_event *e = &t.events[i];
        coop_status st = COOP_OK;
        if (e->kind == TRACE_ALLOC && !r->live[e->id]) {
            r->live[e->id] = coop_malloc(r->pool, e->size, e->stream, 0, &st);
            if (r->live[e->id] ? st != COOP_OK : st == COOP_OK && e->size)
                fail_msg("event %zu: malloc returned %p with %s", i, r->live[e->id],
                         coop_strerror(st));
            expect_clean(st, "malloc", i);
            if (r->live[e->id] && ++allocs % 5 == 0) {
                st = coop_record_stream(r->pool, r->live[e->id], SIDE_STREAM);
                expect_clean(st, "record_stream", i);
            }
        } else if (e->kind == TRACE_FREE && r->live[e->id]) {
            st = coop_free(r->pool, r->live[e->id]);
            expect_clean(st, "free", i);
            if (st == COOP_OK)
                r->live[e->id] = NULL; /* else still allocated: freed at the end */
        }
        r->failed_ops += st != COOP_OK;
        if (i % 64 == 0) /* the side stream's events stay pending for a while */
            expect_clean(coop_host_hold_stream(r->pool, SIDE_STREAM, i % 128 == 0), "hold", i);
        check_after_fault(r, i);
    }
}

/* Lifts faults and holds, frees what is live: the pool must end empty. */
static void drain(replay *r)
{
    if (coop_pool_check(r->pool) != COOP_OK)
        fail_msg("fault at call %llu: at the end: %s", (unsigned long long)r->fault_at,
                 coop_last_error());
    assert_int_equal(coop_inject_fault(r->pool, 0, 0), COOP_OK);
    assert_int_equal(coop_host_hold_stream(r->pool, SIDE_STREAM, false), COOP_OK);
    for (uint32_t id = 0; id < t.num_ids; id++)
        if (r->live[id]) {
            coop_status st = coop_free(r->pool, r->live[id]);
            if (st != COOP_OK)
                fail_msg("fault at call %llu: final free of id %u: %s: %s",
                         (unsigned long long)r->fault_at, id, coop_strerror(st), coop_last_error());
            r->live[id] = NULL;
        }
    assert_int_equal(coop_empty_cache(r->pool), COOP_OK);
    assert_int_equal(coop_pool_check(r->pool), COOP_OK);
    coop_stats s;
    coop_get_stats(r->pool, &s);
    if (s.allocation.current || s.active.current || s.reserved_bytes.current ||
        s.allocated_bytes.current)
        fail_msg("fault at call %llu: leaked %lld allocations, %lld active, %lld bytes mapped",
                 (unsigned long long)r->fault_at, (long long)s.allocation.current,
                 (long long)s.active.current, (long long)s.reserved_bytes.current);
}

/* One replay with call fault_at failing; returns the backend calls made
 * (and, if asked, the pool's statistics before the drain). */
static uint64_t capacity; /* of the sweep in progress */

static uint64_t run_once(bool vmm, uint64_t fault_at, uint64_t *failed_ops, coop_stats *stats)
{
    coop_config cfg;
    coop_config_default(&cfg);
    cfg.use_vmm = vmm;
    cfg.page_size = 2 * MiB;
    cfg.segment_size = 4 * MiB;
    cfg.check = getenv("COOP_FAULT_CHECK_EVERY_OP") != NULL;
    /* just above the peak: room runs out unless free pages are given back */
    cfg.capacity = capacity;
    replay r = {.fault_at = fault_at};
    r.live = calloc(t.num_ids ? t.num_ids : 1, sizeof *r.live);
    assert_non_null(r.live);
    assert_int_equal(coop_pool_create(&cfg, &r.pool), COOP_OK);
    if (fault_at)
        assert_int_equal(coop_inject_fault(r.pool, COOP_FAULT_ALL, fault_at), COOP_OK);
    replay_events(&r);
    uint64_t calls = coop_backend_calls(r.pool, COOP_FAULT_ALL);
    if (stats)
        coop_get_stats(r.pool, stats);
    drain(&r);
    coop_pool_destroy(r.pool);
    free(r.live);
    if (failed_ops)
        *failed_ops = r.failed_ops;
    return calls;
}

static uint64_t stride(void)
{
    const char *s = getenv("COOP_FAULT_STRIDE");
    uint64_t k = s ? strtoull(s, NULL, 10) : 1;
    return k ? k : 1;
}

static void sweep(bool vmm)
{
    /* The tightest capacity just above the peak (in 2 MiB pages, 1/128 of
     * the peak apart) at which a clean replay runs without running out of
     * memory but has to give memory back (unmaps); the loosest if none does. */
    coop_stats clean;
    uint64_t failed = 0, clean_calls = 0;
    for (uint64_t k = 1; k <= 16; k++) {
        capacity = (peak_live + peak_live / 128 * k + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
        clean_calls = run_once(vmm, 0, &failed, &clean);
        if (failed == 0 && clean.num_unmaps > 0)
            break;
    }
    printf("%s: %zu events, peak live %llu bytes, capacity %llu; a clean replay makes %llu "
           "backend calls, %llu maps, %llu unmaps, %llu retries, %llu OOMs\n",
           vmm ? "vmm" : "segments", t.num_events, (unsigned long long)peak_live,
           (unsigned long long)clean.capacity, (unsigned long long)clean_calls,
           (unsigned long long)clean.num_maps, (unsigned long long)clean.num_unmaps,
           (unsigned long long)clean.num_alloc_retries, (unsigned long long)clean.num_ooms);
    assert_true(clean_calls > 10);
    assert_int_equal(failed, 0);
    /* the capacity is tight enough that memory is given back during the step */
    assert_true(clean.num_unmaps > 0);
    uint64_t step = stride(), runs = 0, runs_with_errors = 0, fired = 0;
    /* one past the last index: a fault that never fires changes nothing */
    for (uint64_t n = 1; n <= clean_calls + 1; n += step) {
        uint64_t calls = run_once(vmm, n, &failed, NULL);
        runs++;
        runs_with_errors += failed > 0;
        fired += calls >= n;
    }
    printf("%s: %llu replays (every %llu call index), the fault fired in %llu, %llu saw an "
           "operation fail\n",
           vmm ? "vmm" : "segments", (unsigned long long)runs, (unsigned long long)step,
           (unsigned long long)fired, (unsigned long long)runs_with_errors);
    assert_true(fired > 0);
}

static void sweep_vmm(void **state)
{
    (void)state;
    sweep(true);
}

static void sweep_segments(void **state)
{
    (void)state;
    sweep(false);
}

static int load(void **state)
{
    (void)state;
    const char *path = getenv("COOP_FAULT_TRACE");
    if (!path)
        path = COOP_TEST_SRCDIR "/traces/unet-train-step.trace.gz";
    printf("trace %s\n", path);
    if (trace_read(path, &t) != COOP_OK) {
        fprintf(stderr, "%s\n", coop_last_error());
        return -1;
    }
    uint64_t live = 0;
    uint64_t *sizes = calloc(t.num_ids ? t.num_ids : 1, sizeof *sizes);
    if (!sizes)
        return -1;
    for (size_t i = 0; i < t.num_events; i++) {
        const trace_event *e = &t.events[i];
        if (e->kind == TRACE_ALLOC) {
            sizes[e->id] = (e->size + 511) / 512 * 512;
            live += sizes[e->id];
        } else if (e->kind == TRACE_FREE) {
            live -= sizes[e->id];
            sizes[e->id] = 0;
        }
        if (live > peak_live)
            peak_live = live;
    }
    free(sizes);
    return 0;
}

static int unload(void **state)
{
    (void)state;
    trace_free(&t);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sweep_vmm),
        cmocka_unit_test(sweep_segments),
    };
    return cmocka_run_group_tests(tests, load, unload);
}
