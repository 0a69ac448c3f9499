/*
 * tests/fault_sweep_test.c on the CUDA backend over the mock driver, plus a
 * sweep of the driver itself.
 *
 * 1. The host program's sweeps, unchanged: its operation sequence with every
 *    backend call failing in turn (at the fault wrapper, above the CUDA
 *    backend), and every metadata allocation failing in turn, with VMM and
 *    with segments. Its checks of the host backend's mapped bytes and live
 *    ranges read the mock driver's counters instead.
 * 2. The same sequence with every driver call that acquires or acts failing
 *    in turn inside the mock (cuMemCreate, cuMemMap, cuMemSetAccess,
 *    cuMemUnmap, cuCtxSynchronize, cuEventRecord, cuEventQuery, context
 *    calls, ...): the CUDA backend's own error paths under the pool. Every
 *    operation must succeed or fail cleanly, the pool's invariants hold, and
 *    once the faults stop everything drains and the driver is left clean.
 *
 * What it cannot show: a real driver's own failure modes (sticky errors
 * after a faulting kernel, for which nothing but a new process helps).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include <cuda.h>

#include "coop.h"
#include "cuda_mock.h"
#include "cuda_stream_map.h"

#include "backend.h"

/* drain_and_verify's host-backend introspection, answered by the mock */
static uint64_t cuda_mock_mapped(const coop_backend *be)
{
    (void)be;
    return (uint64_t)cuda_mock_now().mapped_bytes;
}

static size_t cuda_mock_live_ranges(const coop_backend *be)
{
    (void)be;
    cuda_mock_counters c = cuda_mock_now();
    return (size_t)(c.live_reservations + c.live_segments);
}

/* The backend keeps destroyed events for reuse, so the driver's count is not
 * the pool's; coop_pool_destroy's check (every event destroyed) stands in. */
static size_t cuda_mock_live_events(const coop_backend *be)
{
    (void)be;
    return 0;
}

#define coop_backend_host_mapped(be) cuda_mock_mapped(be)
#define coop_backend_host_live_ranges(be) cuda_mock_live_ranges(be)
#define coop_backend_host_live_events(be) cuda_mock_live_events(be)

#define main fault_sweep_main
int fault_sweep_main(void);
#include "fault_sweep_test.c"
#undef main

/* Part 2: every counted driver call of a pool's life failing in turn. */
static void sweep_driver(bool vmm)
{
    coop_config c = config(vmm);
    run r = {0};
    cuda_mock.fail_call(0, 0);
    assert_int_equal(coop_pool_create(&c, &r.pool), COOP_OK);
    sequence(&r);
    drain_and_verify(&r, vmm);
    long calls = cuda_mock.calls();
    assert_true(calls > 20);
    long failed_creates = 0;
    for (long n = 1; n <= calls + 1; n++) {
        r = (run){0};
        cuda_mock.fail_call(n, CUDA_ERROR_UNKNOWN);
        coop_status st = coop_pool_create(&c, &r.pool);
        if (st != COOP_OK) {
            if (st != COOP_ERR_BACKEND && st != COOP_ERR_NO_DRIVER)
                fail_msg("driver call %ld failing: pool creation gave %s: %s", n, coop_strerror(st),
                         coop_last_error());
            assert_null(r.pool);
            cuda_mock_assert_clean("after a failed pool creation");
            failed_creates++;
            continue;
        }
        sequence(&r);
        cuda_mock.fail_call(0, 0);
        drain_and_verify(&r, vmm);
    }
    printf("cuda_mock_fault_sweep: %s: %ld driver calls, each failed in turn (%ld in creation)\n",
           vmm ? "vmm" : "segments", calls, failed_creates);
}

static void test_driver_vmm(void **state)
{
    (void)state;
    sweep_driver(true);
}

static void test_driver_segments(void **state)
{
    (void)state;
    sweep_driver(false);
}

int main(void)
{
    cuda_mock_load("cuda_mock_fault_sweep_test", COOP_TEST_BUILDDIR);
    cuda_mock.set_granularity(64 * KiB);
    cuda_mock_streams_create();
    int failed = fault_sweep_main();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_driver_vmm),
        cmocka_unit_test(test_driver_segments),
    };
    failed += cmocka_run_group_tests(tests, NULL, NULL);
    cuda_mock_streams_destroy();
    return failed;
}
