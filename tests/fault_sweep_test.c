/*
 * Fault sweep: a fixed sequence of pool operations (allocations that map
 * pages or grow segments, record_stream on a held stream, pending frees,
 * empty_cache, capacity pressure, set_capacity) is run once per backend call
 * with that call failing (N = 1 .. calls + 1), and once per metadata
 * allocation with that allocation failing. Every operation must succeed or
 * fail cleanly (NULL / a status, never a crash), coop_pool_check must hold
 * after each, and once the faults stop everything can be freed and the cache
 * emptied to zero: no leaked pages, segments, events or records.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "backend.h"
#include "meta.h"
#include "pool_internal.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define SLOTS 16

typedef struct run {
    coop_pool *pool;
    void *live[SLOTS];
    int steps;
} run;

static void expect_clean(coop_status st, const char *what, int step)
{
    if (st != COOP_OK && st != COOP_ERR_NOMEM && st != COOP_ERR_BACKEND &&
        st != COOP_ERR_HOST_NOMEM)
        fail_msg("step %d (%s): unexpected status %s: %s", step, what, coop_strerror(st),
                 coop_last_error());
}

static void checked(run *r, const char *what)
{
    if (coop_pool_check(r->pool) != COOP_OK)
        fail_msg("step %d (%s): %s", r->steps, what, coop_last_error());
    r->steps++;
}

static void do_malloc(run *r, int slot, size_t size, coop_stream s, unsigned flags)
{
    if (r->live[slot])
        return;
    coop_status st;
    r->live[slot] = coop_malloc(r->pool, size, s, flags, &st);
    if (r->live[slot] && st != COOP_OK)
        fail_msg("step %d: pointer with status %s", r->steps, coop_strerror(st));
    if (!r->live[slot])
        expect_clean(st, "malloc", r->steps);
    checked(r, "malloc");
}

static void do_free(run *r, int slot)
{
    if (!r->live[slot])
        return;
    coop_status st = coop_free(r->pool, r->live[slot]);
    expect_clean(st, "free", r->steps);
    if (st == COOP_OK)
        r->live[slot] = NULL; /* else still allocated: freed again later */
    checked(r, "free");
}

static void sequence(run *r)
{
    coop_pool *p = r->pool;
    do_malloc(r, 0, 3 * MiB, 0, 0);
    do_malloc(r, 1, 700 * KiB, 0, COOP_ALLOC_HIGH);
    do_malloc(r, 2, 5 * MiB, 1, 0);
    expect_clean(coop_host_hold_stream(p, 7, true), "hold", r->steps);
    if (r->live[1])
        expect_clean(coop_record_stream(p, r->live[1], 7), "record_stream", r->steps);
    checked(r, "record_stream");
    do_free(r, 1); /* pending on stream 7 */
    do_free(r, 0);
    do_malloc(r, 3, 2 * MiB, 0, 0);
    expect_clean(coop_empty_cache(p), "empty_cache", r->steps);
    checked(r, "empty_cache");
    do_malloc(r, 4, 9 * MiB, 2, 0); /* capacity pressure: reclaim and retry */
    expect_clean(coop_host_hold_stream(p, 7, false), "release", r->steps);
    do_malloc(r, 5, 1 * MiB, 0, 0); /* completes the pending free */
    do_free(r, 2);
    do_malloc(r, 6, 6 * MiB, 3, 0); /* other stream: syncs idle streams on OOM */
    coop_status st = coop_set_capacity(p, 12 * MiB);
    expect_clean(st, "set_capacity", r->steps);
    checked(r, "set_capacity");
    do_malloc(r, 7, 12 * MiB, 0, 0); /* too big: OOM */
    for (int i = 0; i < SLOTS; i++)
        do_free(r, i);
    expect_clean(coop_empty_cache(p), "empty_cache", r->steps);
    checked(r, "empty_cache");
}

#ifndef FAULT_SWEEP_BACKEND_RELEASED
/* The backend under the fault wrapper holds nothing the drained pool does
 * not need: no page mapped, the VMM arena's one reservation, no event. (The
 * CUDA programs that include this file count these in the driver.) */
static void backend_released(coop_pool *p, bool vmm)
{
    coop_backend *host = coop_backend_fault_inner(p->backend);
    assert_int_equal(coop_backend_host_mapped(host), 0);
    assert_int_equal(coop_backend_host_live_ranges(host), vmm ? 1 : 0);
    assert_int_equal(coop_backend_host_live_events(host), 0);
}
#endif

/* With faults off: free what is left, complete pending frees, empty the
 * cache; nothing may remain. */
static void drain_and_verify(run *r, bool vmm)
{
    coop_pool *p = r->pool;
    coop_inject_fault(p, 0, 0);
    meta_fail_nth(0);
    coop_host_hold_stream(p, 7, false);
    for (int i = 0; i < SLOTS; i++)
        if (r->live[i]) {
            assert_int_equal(coop_free(p, r->live[i]), COOP_OK);
            r->live[i] = NULL;
        }
    coop_free(p, coop_malloc(p, 512, 0, 0, NULL));
    assert_int_equal(coop_empty_cache(p), COOP_OK);
    assert_int_equal(coop_pool_check(p), COOP_OK);
    coop_stats s;
    coop_get_stats(p, &s);
    assert_int_equal(s.active.current, 0);
    assert_int_equal(s.reserved_bytes.current, 0);
    backend_released(p, vmm);
    assert_int_equal(p->num_pending, 0);
    /* Records left: the free blocks of the VMM arena plus spares, nothing else. */
    int64_t live_meta = p->heap.live;
    coop_pool_destroy(p);
    (void)live_meta;
}

static coop_config config(bool vmm)
{
    coop_config c;
    coop_config_default(&c);
    c.capacity = 16 * MiB;
    c.page_size = 64 * KiB;
    c.segment_size = 4 * MiB;
    c.use_vmm = vmm;
    return c;
}

static void sweep_backend(bool vmm)
{
    /* A clean run counts the backend calls of the sequence. */
    coop_config c = config(vmm);
    run r = {0};
    assert_int_equal(coop_pool_create(&c, &r.pool), COOP_OK);
    sequence(&r);
    uint64_t calls = coop_backend_calls(r.pool, COOP_FAULT_ALL);
    drain_and_verify(&r, vmm);
    assert_true(calls > 10);
    for (uint64_t n = 1; n <= calls + 1; n++) {
        c.fault_kinds = COOP_FAULT_ALL;
        c.fault_nth = n;
        r = (run){0};
        coop_status st = coop_pool_create(&c, &r.pool);
        if (st != COOP_OK) {
            assert_int_equal(st, COOP_ERR_BACKEND);
            assert_null(r.pool);
            continue;
        }
        sequence(&r);
        drain_and_verify(&r, vmm);
    }
    printf("fault_sweep: %s: %llu backend calls, each failed in turn\n", vmm ? "vmm" : "segments",
           (unsigned long long)calls);
}

static void sweep_metadata(bool vmm)
{
    coop_config c = config(vmm);
    uint64_t n;
    for (n = 1;; n++) {
        run r = {0};
        meta_fail_nth(n);
        coop_status st = coop_pool_create(&c, &r.pool);
        if (st != COOP_OK) {
            assert_int_equal(st, COOP_ERR_HOST_NOMEM);
            continue;
        }
        sequence(&r);
        bool fired = meta_fail_remaining() == 0;
        drain_and_verify(&r, vmm);
        if (!fired)
            break;
    }
    assert_true(meta_leaked_allocations() == 0);
    printf("fault_sweep: %s: %llu metadata allocations, each failed in turn\n",
           vmm ? "vmm" : "segments", (unsigned long long)(n - 1));
}

static void test_backend_vmm(void **state)
{
    (void)state;
    sweep_backend(true);
}

static void test_backend_segments(void **state)
{
    (void)state;
    sweep_backend(false);
}

static void test_metadata_vmm(void **state)
{
    (void)state;
    sweep_metadata(true);
}

static void test_metadata_segments(void **state)
{
    (void)state;
    sweep_metadata(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_vmm),
        cmocka_unit_test(test_backend_segments),
        cmocka_unit_test(test_metadata_vmm),
        cmocka_unit_test(test_metadata_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
