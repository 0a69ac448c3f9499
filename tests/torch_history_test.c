/*
 * The PyTorch ABI's history ring (src/torch/history.c): any bound is
 * accepted without reserving it, the ring grows as events come and wraps
 * at its bound, a new bound keeps the last events that fit, and a failed
 * growth keeps the last events it has room for until the ring is cleared;
 * and a snapshot (which copies the ring) without host memory is refused.
 * Host allocations go through tests/host_alloc_fault.c's wrappers (counted,
 * and failed on demand).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"
#include "host_alloc_fault.h"
#include "torch/history.h"
#include "torch/torch_abi.h"

/* Records n events numbered first, first + 1, ... (the number is the address). */
static void record(torch_history *h, uintptr_t first, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_false(torch_history_record(h, COOP_TORCH_ALLOC, first + i, 512, 7, 0));
}

/* A ring bounded at 100,000 events, filled to the slots its first
 * allocation made: the next event needs it to grow. Returns the slots. */
static size_t fill_first_slots(torch_history *h)
{
    torch_history_resize(h, 100000);
    record(h, 0, 1); /* the first allocation */
    size_t slots = h->slots;
    assert_true(slots > 1 && slots < 100000);
    record(h, 1, slots - 1);
    return slots;
}

/* Records event id into a full ring whose growth (its realloc) fails: the
 * record reports the failure. */
static void record_failing_growth(torch_history *h, uintptr_t id, int device)
{
    host_fault_arm(1);
    assert_true(torch_history_record(h, COOP_TORCH_ALLOC, id, 512, 7, device));
    assert_true(host_fault_disarm());
}

/* The ring holds exactly the events numbered first .. first + n - 1, oldest first. */
static void expect_events(torch_history *h, uintptr_t first, size_t n)
{
    coop_torch_event *events = NULL;
    size_t count = 0;
    assert_int_equal(torch_history_copy(h, &events, &count), COOP_OK);
    assert_int_equal(count, n);
    for (size_t i = 0; i < n; i++) {
        if (events[i].address != first + i)
            fail_msg("event %zu is number %ju, expected %ju", i, (uintmax_t)events[i].address,
                     (uintmax_t)(first + i));
        assert_int_equal(events[i].size, 512);
        assert_int_equal(events[i].stream, 7);
        assert_int_equal(events[i].action, COOP_TORCH_ALLOC);
    }
    free(events);
}

/* A bound whose byte count wraps size_t (n * 40 mod 2^64 = 24) and the
 * largest one: nothing is reserved for them, and events are kept intact. */
static void test_huge_bound_reserves_nothing(void **state)
{
    (void)state;
    const size_t bounds[] = {SIZE_MAX / sizeof(coop_torch_event) + 1, SIZE_MAX};
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        torch_history h = TORCH_HISTORY_INIT;
        long live = host_fault_live();
        torch_history_resize(&h, bounds[i]);
        assert_int_equal(host_fault_live(), live);
        record(&h, 1, 5000);
        expect_events(&h, 1, 5000);
        torch_history_resize(&h, 0);
        assert_int_equal(host_fault_live(), live);
    }
}

/* Growth past the first allocation, then wrap-around at the bound. */
static void test_ring_grows_then_wraps(void **state)
{
    (void)state;
    torch_history h = TORCH_HISTORY_INIT;
    torch_history_resize(&h, 3000);
    record(&h, 0, 2500);
    expect_events(&h, 0, 2500);
    record(&h, 2500, 4500);
    expect_events(&h, 4000, 3000);
    /* clearing drops what was recorded and keeps recording; 0 turns it off */
    torch_history_clear(&h);
    expect_events(&h, 0, 0);
    record(&h, 100, 12);
    expect_events(&h, 100, 12);
    torch_history_resize(&h, 0);
    assert_false(torch_history_record(&h, COOP_TORCH_ALLOC, 1, 512, 7, 0));
    expect_events(&h, 0, 0);
}

/* A new bound keeps the last events that fit, whatever state the ring is
 * in (empty, filling, full with its oldest anywhere), and recording goes on
 * from there, as torch's _record_memory_history without clear_history. */
static void test_resize_keeps_the_last_events(void **state)
{
    (void)state;
    const size_t bounds[] = {1, 2, 5, 1024, 1500};
    const size_t new_bounds[] = {1, 3, 1024, 2000, 5000};
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
        size_t cap = bounds[b];
        const size_t counts[] = {0, 1, cap - 1, cap, cap + 1, 3 * cap + 2};
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            for (size_t n = 0; n < sizeof new_bounds / sizeof new_bounds[0]; n++) {
                size_t recorded = counts[c], new_cap = new_bounds[n];
                torch_history h = TORCH_HISTORY_INIT;
                torch_history_resize(&h, cap);
                record(&h, 0, recorded);
                torch_history_resize(&h, new_cap);
                /* a smaller bound gives back the slots it no longer allows */
                if (h.slots > new_cap) {
                    fail_msg("bound %zu -> %zu: %zu slots kept", cap, new_cap, h.slots);
                    return;
                }
                size_t held = recorded < cap ? recorded : cap;
                size_t kept = held < new_cap ? held : new_cap;
                expect_events(&h, recorded - kept, kept);
                /* recording goes on after them */
                record(&h, recorded, 7);
                size_t after = kept + 7 < new_cap ? kept + 7 : new_cap;
                expect_events(&h, recorded + 7 - after, after);
                torch_history_resize(&h, 0);
            }
        }
    }
}

/* The ring cannot grow: it says so once and keeps the last events it has
 * room for. */
static void test_failed_growth_keeps_the_last_events(void **state)
{
    (void)state;
    torch_history h = TORCH_HISTORY_INIT;
    size_t slots = fill_first_slots(&h);
    record_failing_growth(&h, slots, 3);
    assert_non_null(strstr(coop_last_error(), "device 3's history"));
    record(&h, slots + 1, 99); /* no second report */
    expect_events(&h, 100, slots);
    torch_history_resize(&h, 0);
}

/* Clearing a ring that could not grow gives it its bound back: it grows
 * past the slots it had then, and a new failure is reported again. It used
 * to keep that many events for good. */
static void test_clear_after_a_failed_growth_grows_again(void **state)
{
    (void)state;
    torch_history h = TORCH_HISTORY_INIT;
    size_t slots = fill_first_slots(&h);
    record_failing_growth(&h, slots, 0);
    torch_history_clear(&h);
    record(&h, 0, 3 * slots);
    expect_events(&h, 0, 3 * slots);
    size_t grown = h.slots; /* filled, then a failed growth again */
    record(&h, 3 * slots, grown - 3 * slots);
    record_failing_growth(&h, grown, 0);
    expect_events(&h, 1, grown);
    torch_history_resize(&h, 0);
}

/* A new bound after a failed growth lets the ring grow again, and a new
 * failure is reported again (its message is the only sign events are lost). */
static void test_resize_after_a_failed_growth_reports_again(void **state)
{
    (void)state;
    torch_history h = TORCH_HISTORY_INIT;
    size_t slots = fill_first_slots(&h);
    record_failing_growth(&h, slots, 0);
    torch_history_resize(&h, 200000);
    expect_events(&h, 1, slots);
    record(&h, slots + 1, slots); /* grows to twice the slots, and fills them */
    expect_events(&h, 1, 2 * slots);
    assert_int_equal(h.slots, 2 * slots);
    record_failing_growth(&h, 2 * slots + 1, 0);
    torch_history_resize(&h, 0);
}

/* A snapshot whose copies cannot grow (every host allocation failing in
 * turn, through the ABI on the host backend) is refused with
 * COOP_ERR_HOST_NOMEM, never handed out with blocks missing. */
static void test_snapshot_without_host_memory_is_refused(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:256M,page:64K"), COOP_OK);
    enum { BLOCKS = 200 }; /* past the copies' first 64 items: they grow */
    void *p[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        p[i] = coop_torch_malloc(i % 2 ? 4096 : 100000, 0, (void *)(uintptr_t)(i % 3));
        assert_non_null(p[i]);
    }
    for (long n = 1;; n++) {
        coop_torch_snapshot *snap = NULL;
        host_fault_arm(n);
        coop_status st = coop_torch_snapshot_take(0, &snap);
        bool failed = host_fault_disarm();
        if (!failed) {
            assert_int_equal(st, COOP_OK);
            assert_int_equal(snap->num_blocks, BLOCKS);
            coop_torch_snapshot_free(snap);
            assert_true(n > 3);
            break;
        }
        if (st != COOP_ERR_HOST_NOMEM || snap) {
            fail_msg("allocation %ld failing: status %d, snapshot %p", n, (int)st, (void *)snap);
            return;
        }
    }
    for (int i = 0; i < BLOCKS; i++)
        coop_torch_free(p[i], i % 2 ? 4096 : 100000, 0, (void *)(uintptr_t)(i % 3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_bound_reserves_nothing),
        cmocka_unit_test(test_ring_grows_then_wraps),
        cmocka_unit_test(test_resize_keeps_the_last_events),
        cmocka_unit_test(test_failed_growth_keeps_the_last_events),
        cmocka_unit_test(test_clear_after_a_failed_growth_grows_again),
        cmocka_unit_test(test_resize_after_a_failed_growth_reports_again),
        cmocka_unit_test(test_snapshot_without_host_memory_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
