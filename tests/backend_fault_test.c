/* Fault wrapper: counts calls per kind and fails exactly the Nth armed call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "backend.h"

#define MiB (UINT64_C(1) << 20)

static coop_backend *make(void)
{
    coop_backend *inner, *be;
    assert_int_equal(coop_backend_host_create(64 * MiB, 2 * MiB, true, &inner), COOP_OK);
    assert_int_equal(coop_backend_fault_create(inner, &be), COOP_OK);
    assert_ptr_equal(coop_backend_fault_inner(be), inner);
    assert_int_equal(be->page_size, 2 * MiB);
    return be;
}

static void test_counts_and_nth(void **state)
{
    (void)state;
    coop_backend *be = make();
    uintptr_t va;
    uint64_t unmapped;
    assert_int_equal(be->ops->reserve(be, 64 * MiB, &va), COOP_OK);
    coop_backend_fault_arm(be, COOP_FAULT_MAP, 3);
    assert_int_equal(be->ops->map(be, va, 2 * MiB), COOP_OK);
    assert_int_equal(be->ops->unmap(be, va, 2 * MiB, &unmapped), COOP_OK); /* not counted down */
    assert_int_equal(be->ops->map(be, va, 2 * MiB), COOP_OK);
    assert_int_equal(be->ops->map(be, va + 2 * MiB, 2 * MiB), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "injected fault: map call #3"));
    assert_int_equal(be->ops->map(be, va + 2 * MiB, 2 * MiB), COOP_OK); /* fails once */
    assert_int_equal(coop_backend_fault_calls(be, COOP_FAULT_MAP), 4);
    assert_int_equal(coop_backend_fault_calls(be, COOP_FAULT_UNMAP), 1);
    assert_int_equal(coop_backend_fault_calls(be, COOP_FAULT_MAP | COOP_FAULT_RESERVE), 5);
    /* A failed call leaves the device untouched: 2 maps of 2 MiB succeeded after the unmap. */
    assert_int_equal(coop_backend_host_mapped(coop_backend_fault_inner(be)), 4 * MiB);
    /* an injected unmap failure unmaps nothing */
    coop_backend_fault_arm(be, COOP_FAULT_UNMAP, 1);
    assert_int_equal(be->ops->unmap(be, va, 4 * MiB, &unmapped), COOP_ERR_BACKEND);
    assert_int_equal(unmapped, 0);
    assert_int_equal(coop_backend_host_mapped(coop_backend_fault_inner(be)), 4 * MiB);
    assert_int_equal(be->ops->unmap(be, va, 4 * MiB, &unmapped), COOP_OK);
    assert_int_equal(unmapped, 4 * MiB);
    assert_int_equal(be->ops->release(be, va, 64 * MiB), COOP_OK);
    coop_backend_destroy(be);
}

static void test_events_and_disarm(void **state)
{
    (void)state;
    coop_backend *be = make();
    coop_event ev;
    coop_backend_fault_arm(be, COOP_FAULT_EVENT, 1);
    assert_int_equal(be->ops->event_record(be, 0, &ev), COOP_ERR_BACKEND);
    coop_backend_fault_arm(be, COOP_FAULT_EVENT, 2);
    coop_backend_fault_arm(be, COOP_FAULT_EVENT, 0); /* disarmed */
    assert_int_equal(be->ops->event_record(be, 0, &ev), COOP_OK);
    bool done;
    assert_int_equal(be->ops->event_query(be, ev, &done), COOP_OK);
    uint64_t before = coop_backend_fault_calls(be, COOP_FAULT_EVENT);
    coop_backend_fault_arm(be, COOP_FAULT_EVENT, 1); /* a wait is an event call */
    assert_int_equal(be->ops->event_wait(be, ev), COOP_ERR_BACKEND);
    assert_int_equal(be->ops->event_wait(be, ev), COOP_OK);
    assert_int_equal(coop_backend_fault_calls(be, COOP_FAULT_EVENT), before + 2);
    be->ops->event_destroy(be, ev);
    assert_int_equal(be->ops->hold_stream(be, 0, true, false), COOP_OK); /* forwarded */
    coop_backend_destroy(be);
}

/* Segment allocations and frees are both SEGMENT calls: counted, and
 * either can be the one that fails (a failed free keeps the segment). */
static void test_segments_count_and_fail(void **state)
{
    (void)state;
    coop_backend *inner, *be;
    assert_int_equal(coop_backend_host_create(64 * MiB, 2 * MiB, false, &inner), COOP_OK);
    assert_int_equal(coop_backend_fault_create(inner, &be), COOP_OK);
    uintptr_t seg;
    coop_backend_fault_arm(be, COOP_FAULT_SEGMENT, 2);
    assert_int_equal(be->ops->segment_alloc(be, 4 * MiB, &seg), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, seg, 4 * MiB), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "injected fault: segment call #2"));
    assert_int_equal(coop_backend_host_mapped(inner), 4 * MiB);
    assert_int_equal(be->ops->segment_free(be, seg, 4 * MiB), COOP_OK);
    assert_int_equal(coop_backend_host_mapped(inner), 0);
    assert_int_equal(coop_backend_fault_calls(be, COOP_FAULT_SEGMENT), 3);
    assert_int_equal(coop_backend_fault_calls(be, COOP_FAULT_RESERVE), 0);
    assert_int_equal(coop_backend_fault_calls(be, COOP_FAULT_ALL), 3);
    coop_backend_destroy(be);
}

/* synchronize is not a fault kind but reaches the inner backend: the
 * device finishes a busy hold's work, and a stream held on the host is
 * refused there. */
static void test_synchronize_is_forwarded(void **state)
{
    (void)state;
    coop_backend *be = make();
    coop_event ev;
    bool done = true;
    assert_int_equal(be->ops->hold_stream(be, 1, true, true), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 1, &ev), COOP_OK);
    assert_int_equal(be->ops->event_query(be, ev, &done), COOP_OK);
    assert_false(done);
    assert_int_equal(be->ops->synchronize(be), COOP_OK);
    assert_int_equal(be->ops->event_query(be, ev, &done), COOP_OK);
    assert_true(done);
    assert_int_equal(be->ops->hold_stream(be, 2, true, false), COOP_OK);
    assert_int_equal(be->ops->synchronize(be), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "stream 0x2 is held"));
    assert_int_equal(coop_backend_fault_calls(be, COOP_FAULT_ALL), 3); /* record, 2 queries */
    be->ops->event_destroy(be, ev);
    coop_backend_destroy(be);
}

/* The pool's page becomes the wrapper's and the inner backend's: the
 * inner one then checks whole pages of that size. */
static void test_adopt_page(void **state)
{
    (void)state;
    coop_backend *be = make();
    coop_backend_fault_adopt_page(be, 4 * MiB);
    assert_int_equal(be->page_size, 4 * MiB);
    assert_int_equal(coop_backend_fault_inner(be)->page_size, 4 * MiB);
    uintptr_t va;
    assert_int_equal(be->ops->reserve(be, 16 * MiB, &va), COOP_OK);
    assert_int_equal(va % (4 * MiB), 0);
    assert_int_equal(be->ops->map(be, va, 2 * MiB), COOP_ERR_INVALID); /* half a page now */
    assert_int_equal(be->ops->release(be, va, 16 * MiB), COOP_OK);
    coop_backend_destroy(be);
}

/* An inner backend that cannot hold streams (as the CUDA one): the
 * wrapper refuses, naming it, instead of calling through NULL. */
static int plain_destroyed;
static void plain_destroy(coop_backend *be)
{
    (void)be;
    plain_destroyed++;
}
static const coop_backend_ops plain_ops = {.destroy = plain_destroy};

static void test_hold_unsupported(void **state)
{
    (void)state;
    coop_backend plain = {.ops = &plain_ops, .name = "plain", .page_size = 2 * MiB};
    coop_backend *be;
    assert_int_equal(coop_backend_fault_create(&plain, &be), COOP_OK);
    assert_int_equal(be->ops->hold_stream(be, 1, true, false), COOP_ERR_UNSUPPORTED);
    assert_non_null(strstr(coop_last_error(), "the plain backend cannot hold streams"));
    coop_backend_destroy(be);
    assert_int_equal(plain_destroyed, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_and_nth),
        cmocka_unit_test(test_events_and_disarm),
        cmocka_unit_test(test_segments_count_and_fail),
        cmocka_unit_test(test_hold_unsupported),
        cmocka_unit_test(test_adopt_page),
        cmocka_unit_test(test_synchronize_is_forwarded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
