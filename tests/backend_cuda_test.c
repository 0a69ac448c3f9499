/*
 * The allocator on the real CUDA backend (libcuda.so.1, or the library
 * COOP_CUDA_DRIVER names, and a device), with virtual memory management and
 * with cuMemAlloc segments:
 *   - the pool sequence (tests/pool_sequence.h) with a second, created stream;
 *   - a cross-stream free: a block written by an asynchronous memset on
 *     another stream, recorded there and freed, is read back (the mapping is
 *     readable and writable by the device), and is reused only once the
 *     stream's work has completed.
 * Exits 77 (skip) with the reason when no driver or device exists.
 *
 * The test's own driver calls (streams, memset, copy) go through dlopen as
 * the backend's do, with prototypes written out here so that the test builds
 * without cuda.h; the names are the versioned ones cuda.h maps them to.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"
#include "pool_sequence.h"

/* The driver API types the test needs, as cuda.h defines them (64-bit). */
typedef int drv_result;             /* CUresult; 0 is CUDA_SUCCESS */
typedef int drv_device;             /* CUdevice */
typedef void *drv_context;          /* CUcontext */
typedef void *drv_stream;           /* CUstream */
typedef unsigned long long drv_ptr; /* CUdeviceptr */
#define DRV_STREAM_NON_BLOCKING 0x1u

static struct {
    void *lib;
    drv_result (*init)(unsigned);
    drv_result (*device_get)(drv_device *, int);
    drv_result (*primary_retain)(drv_context *, drv_device);
    drv_result (*primary_release)(drv_device);
    drv_result (*push)(drv_context);
    drv_result (*pop)(drv_context *);
    drv_result (*stream_create)(drv_stream *, unsigned);
    drv_result (*stream_destroy)(drv_stream);
    drv_result (*stream_synchronize)(drv_stream);
    drv_result (*memset_async)(drv_ptr, unsigned char, size_t, drv_stream);
    drv_result (*copy_to_host)(void *, drv_ptr, size_t);
} drv;

static drv_device device;
static drv_context context;

/* Loads the entry points; NULL on success, else what is missing. */
static const char *load_driver(void)
{
    const char *name = getenv("COOP_CUDA_DRIVER");
    drv.lib = dlopen(name && name[0] ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv.lib)
        return "libcuda.so.1";
    static const struct {
        const char *symbol;
        void *slot;
    } syms[] = {
        {"cuInit", &drv.init},
        {"cuDeviceGet", &drv.device_get},
        {"cuDevicePrimaryCtxRetain", &drv.primary_retain},
        {"cuDevicePrimaryCtxRelease_v2", &drv.primary_release},
        {"cuCtxPushCurrent_v2", &drv.push},
        {"cuCtxPopCurrent_v2", &drv.pop},
        {"cuStreamCreate", &drv.stream_create},
        {"cuStreamDestroy_v2", &drv.stream_destroy},
        {"cuStreamSynchronize", &drv.stream_synchronize},
        {"cuMemsetD8Async", &drv.memset_async},
        {"cuMemcpyDtoH_v2", &drv.copy_to_host},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *sym = dlsym(drv.lib, syms[i].symbol);
        if (!sym)
            return syms[i].symbol;
        memcpy(syms[i].slot, &sym, sizeof sym);
    }
    return NULL;
}

#define DRV_OK(call)                                                                               \
    do {                                                                                           \
        drv_result rc_ = (call);                                                                   \
        if (rc_ != 0)                                                                              \
            fail_msg("%s failed with CUresult %d", #call, rc_);                                    \
    } while (0)

static coop_pool *create_pool(bool use_vmm)
{
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.device = 0;
    config.capacity = 256 * SEQ_MIB;
    config.use_vmm = use_vmm;
    config.check = true;
    coop_pool *pool = NULL;
    if (coop_pool_create(&config, &pool) != COOP_OK)
        fail_msg("coop_pool_create (vmm=%d): %s", use_vmm, coop_last_error());
    coop_config resolved;
    coop_pool_config(pool, &resolved);
    if (use_vmm && !resolved.use_vmm)
        printf("note: device 0 lacks virtual memory management: the VMM run used segments\n");
    return pool;
}

static void run_sequence(bool use_vmm)
{
    coop_pool *pool = create_pool(use_vmm);
    drv_stream side = NULL;
    DRV_OK(drv.stream_create(&side, DRV_STREAM_NON_BLOCKING));
    run_pool_sequence(pool, (coop_stream)(uintptr_t)side);
    coop_pool_destroy(pool);
    DRV_OK(drv.stream_destroy(side));
}

/* A block written on another stream, recorded there, freed: the data is
 * there, and the pool reuses the block only after the stream's work. */
static void run_cross_stream_free(bool use_vmm)
{
    const size_t size = 8 * SEQ_MIB;
    coop_pool *pool = create_pool(use_vmm);
    drv_stream side = NULL;
    DRV_OK(drv.stream_create(&side, DRV_STREAM_NON_BLOCKING));
    coop_status st;
    void *block = coop_malloc(pool, size, 0, COOP_ALLOC_LOW, &st);
    if (!block)
        fail_msg("coop_malloc: %s", coop_last_error());
    DRV_OK(drv.memset_async((drv_ptr)(uintptr_t)block, 0xab, size, side));
    assert_int_equal(coop_record_stream(pool, block, (coop_stream)(uintptr_t)side), COOP_OK);
    assert_int_equal(coop_free(pool, block), COOP_OK);
    coop_stats stats;
    coop_get_stats(pool, &stats);
    assert_int_equal(stats.allocation.current, 0);
    assert_int_equal(stats.active.current, 1); /* pending until the memset is done */

    DRV_OK(drv.stream_synchronize(side));
    unsigned char head[64], tail[64];
    DRV_OK(drv.copy_to_host(head, (drv_ptr)(uintptr_t)block, sizeof head));
    DRV_OK(drv.copy_to_host(tail, (drv_ptr)(uintptr_t)block + size - sizeof tail, sizeof tail));
    for (size_t i = 0; i < sizeof head; i++)
        if (head[i] != 0xab || tail[i] != 0xab)
            fail_msg("byte %zu of the block reads %#x / %#x after a memset of 0xab", i, head[i],
                     tail[i]);

    /* the stream is idle now: the next allocation completes the pending free */
    void *again = coop_malloc(pool, size, 0, COOP_ALLOC_LOW, &st);
    if (!again)
        fail_msg("coop_malloc after the stream finished: %s", coop_last_error());
    coop_get_stats(pool, &stats);
    assert_int_equal(stats.active.current, 1);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    assert_int_equal(coop_free(pool, again), COOP_OK);
    assert_int_equal(coop_empty_cache(pool), COOP_OK);
    coop_get_stats(pool, &stats);
    assert_int_equal(stats.active.current, 0);
    coop_pool_destroy(pool);
    DRV_OK(drv.stream_destroy(side));
}

static void test_sequence_vmm(void **state)
{
    (void)state;
    run_sequence(true);
}

static void test_sequence_segments(void **state)
{
    (void)state;
    run_sequence(false);
}

static void test_cross_stream_free_vmm(void **state)
{
    (void)state;
    run_cross_stream_free(true);
}

static void test_cross_stream_free_segments(void **state)
{
    (void)state;
    run_cross_stream_free(false);
}

int main(void)
{
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.capacity = 64 * SEQ_MIB;
    coop_pool *probe = NULL;
    coop_status st = coop_pool_create(&config, &probe);
    if (st == COOP_ERR_NO_DRIVER || st == COOP_ERR_UNSUPPORTED) {
        printf("SKIP backend_cuda_test: %s\n", coop_last_error());
        return 77;
    }
    if (st != COOP_OK) {
        fprintf(stderr, "backend_cuda_test: cannot create a CUDA pool: %s\n", coop_last_error());
        return 1;
    }
    coop_pool_destroy(probe);
    const char *missing = load_driver();
    if (missing) {
        fprintf(stderr, "backend_cuda_test: the driver lacks %s\n", missing);
        return 1;
    }
    /* the test's own stream and memory calls run in device 0's primary
     * context, as a CUDA runtime program's would */
    if (drv.init(0) != 0 || drv.device_get(&device, 0) != 0 ||
        drv.primary_retain(&context, device) != 0 || drv.push(context) != 0) {
        fprintf(stderr, "backend_cuda_test: cannot make device 0's primary context current\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequence_vmm),
        cmocka_unit_test(test_sequence_segments),
        cmocka_unit_test(test_cross_stream_free_vmm),
        cmocka_unit_test(test_cross_stream_free_segments),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    drv_context popped;
    drv.pop(&popped);
    drv.primary_release(device);
    dlclose(drv.lib);
    return failed;
}
