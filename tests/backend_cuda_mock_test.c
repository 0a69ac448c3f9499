/*
 * backend_cuda.c against tests/mock_cuda_driver.c (libmockcuda.so, selected
 * through COOP_CUDA_DRIVER): every backend operation, its error paths, the
 * context discipline and that unmap needs no device-wide synchronisation
 * (the mock reports an unmap under unfinished work), without a GPU.
 * Also: creation without any driver fails cleanly.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>

#include "backend.h"
#include "coop.h"
#include "cuda_mock_counters.h"
#include "pool_sequence.h"
#include "status.h"

#define MIB (1ull << 20)
/* cuda.h's CU_STREAM_PER_THREAD as a coop_stream */
#define CU_STREAM_PER_THREAD_HANDLE ((coop_stream)(uintptr_t)CU_STREAM_PER_THREAD)

static char mock_path[4096];
static void *mock_lib;
static void (*mock_counters_fn)(cuda_mock_counters *);
static void (*mock_fail_nth)(const char *, int, int);
static void (*mock_fail_from)(const char *, int, int);
static void (*mock_hold_streams)(bool);
static void (*mock_set_memory)(long);

static int (*mock_hold_stream)(CUstream, bool);
static void (*mock_set_granularity)(size_t);
static long (*mock_take_unsafe)(void);
static void (*mock_fail_call)(long, int);
static long (*mock_calls)(void);

/* The driver entry point name (cuda.h maps some to versioned names). */
#define MOCK_STRINGIFY(x) #x
#define MOCK_SYMBOL(x) MOCK_STRINGIFY(x)

/* Runs fn with device 0's primary context current, as an application would. */
static CUresult with_primary_context(CUresult (*fn)(void *), void *arg)
{
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*release)(CUdevice);
    CUresult (*push)(CUcontext);
    CUresult (*pop)(CUcontext *);
    *(void **)&retain = dlsym(mock_lib, "cuDevicePrimaryCtxRetain");
    *(void **)&release = dlsym(mock_lib, MOCK_SYMBOL(cuDevicePrimaryCtxRelease));
    *(void **)&push = dlsym(mock_lib, MOCK_SYMBOL(cuCtxPushCurrent));
    *(void **)&pop = dlsym(mock_lib, MOCK_SYMBOL(cuCtxPopCurrent));
    CUcontext ctx = NULL;
    assert_int_equal(retain(&ctx, 0), CUDA_SUCCESS);
    assert_int_equal(push(ctx), CUDA_SUCCESS);
    CUresult rc = fn(arg);
    assert_int_equal(pop(&ctx), CUDA_SUCCESS);
    assert_int_equal(release(0), CUDA_SUCCESS);
    return rc;
}

static CUresult create_stream_in_context(void *arg)
{
    CUresult (*create)(CUstream *, unsigned);
    *(void **)&create = dlsym(mock_lib, "cuStreamCreate");
    return create((CUstream *)arg, CU_STREAM_NON_BLOCKING);
}

static CUresult destroy_stream_in_context(void *arg)
{
    CUresult (*destroy)(CUstream);
    *(void **)&destroy = dlsym(mock_lib, MOCK_SYMBOL(cuStreamDestroy));
    return destroy(*(CUstream *)arg);
}

typedef struct memset_args {
    uintptr_t ptr;
    size_t size;
    coop_stream stream;
} memset_args;

static CUresult memset_in_context(void *arg)
{
    const memset_args *m = arg;
    CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream);
    *(void **)&memset_async = dlsym(mock_lib, MOCK_SYMBOL(cuMemsetD8Async));
    return memset_async((CUdeviceptr)m->ptr, 0x5a, m->size, (CUstream)m->stream);
}

/* Work an application queues on stream over [ptr, +size): a kernel using it. */
static void launch_work(uintptr_t ptr, size_t size, coop_stream stream)
{
    memset_args m = {ptr, size, stream};
    assert_int_equal(with_primary_context(memset_in_context, &m), CUDA_SUCCESS);
}

/* A stream created as an application creates one (cuStreamCreate). */
static coop_stream new_stream(void)
{
    CUstream s = NULL;
    assert_int_equal(with_primary_context(create_stream_in_context, &s), CUDA_SUCCESS);
    return (coop_stream)s;
}

static void destroy_stream(coop_stream stream)
{
    CUstream s = (CUstream)stream;
    assert_int_equal(with_primary_context(destroy_stream_in_context, &s), CUDA_SUCCESS);
}

static cuda_mock_counters counters(void)
{
    cuda_mock_counters c;
    mock_counters_fn(&c);
    return c;
}

static int use_mock(void **state)
{
    (void)state;
    setenv("COOP_CUDA_DRIVER", mock_path, 1);
    unsetenv("MOCK_CUDA_NO_VMM");
    unsetenv("MOCK_CUDA_NO_DEVICE");
    mock_set_memory(1l << 30);
    mock_set_granularity(2 * MIB);
    mock_hold_streams(false);
    return 0;
}

/* After each test: nothing leaked, nothing unmapped unsafely, no call
 * without a context. */
static int check_clean(void **state)
{
    (void)state;
    cuda_mock_counters c = counters();
    assert_int_equal(c.mapped_bytes, 0);
    assert_int_equal(c.live_handles, 0);
    assert_int_equal(c.live_events, 0);
    assert_int_equal(c.live_segments, 0);
    assert_int_equal(c.unsafe_releases, 0);
    assert_int_equal(c.no_context, 0);
    assert_int_equal(c.retained, 0);
    assert_int_equal(c.accessible_bytes, 0);
    assert_int_equal(c.live_reservations, 0);
    assert_int_equal(c.live_streams, 0);
    return 0;
}

static coop_backend *create_vmm(void)
{
    coop_backend *be = NULL;
    assert_int_equal(coop_backend_cuda_create(0, true, &be), COOP_OK);
    assert_non_null(be);
    assert_true(be->has_vmm);
    assert_int_equal(be->page_size, 2 * MIB);
    assert_int_equal(be->device_memory, 1ull << 30);
    return be;
}

static void test_no_driver_fails_cleanly(void **state)
{
    (void)state;
    setenv("COOP_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    coop_backend *be = (coop_backend *)0x1;
    assert_int_equal(coop_backend_cuda_create(0, true, &be), COOP_ERR_NO_DRIVER);
    assert_null(be);
    assert_non_null(strstr(coop_last_error(), "no CUDA driver (/nonexistent/libcuda.so.1"));
    /* glibc's message starts with the name: it is not said twice */
    const char *name = strstr(coop_last_error(), "/nonexistent/libcuda.so.1");
    if (strstr(name + 1, "/nonexistent/libcuda.so.1")) {
        fail_msg("the library's name is said twice: \"%s\"", coop_last_error());
        return;
    }
    /* a library that is not a driver: loads, lacks the entry points */
    setenv("COOP_CUDA_DRIVER", "libm.so.6", 1);
    assert_int_equal(coop_backend_cuda_create(0, true, &be), COOP_ERR_NO_DRIVER);
    assert_non_null(strstr(coop_last_error(), "no CUDA driver (libm.so.6 lacks cuGetErrorName: "));
}

/* COOP_CUDA_DRIVER set but empty names no library: the default driver,
 * libcuda.so.1, is loaded (dlopen("") would give the program itself). Where
 * a real driver is installed the creation may succeed; where it is not, the
 * message names the default. */
static void test_empty_driver_variable_means_the_default(void **state)
{
    (void)state;
    setenv("COOP_CUDA_DRIVER", "", 1);
    coop_backend *be = NULL;
    if (coop_backend_cuda_create(0, true, &be) == COOP_OK) {
        coop_backend_destroy(be);
        return;
    }
    assert_null(be);
    if (!strstr(coop_last_error(), "libcuda.so.1"))
        fail_msg("an empty COOP_CUDA_DRIVER did not load libcuda.so.1: %s", coop_last_error());
}

static void test_no_device(void **state)
{
    (void)state;
    setenv("MOCK_CUDA_NO_DEVICE", "1", 1);
    coop_backend *be = NULL;
    assert_int_equal(coop_backend_cuda_create(0, true, &be), COOP_ERR_NO_DRIVER);
    assert_null(be);
    assert_non_null(strstr(coop_last_error(), "CUDA_ERROR_NO_DEVICE"));
}

static void test_bad_device(void **state)
{
    (void)state;
    coop_backend *be = NULL;
    assert_int_equal(coop_backend_cuda_create(5, true, &be), COOP_ERR_INVALID);
    assert_null(be);
    assert_non_null(strstr(coop_last_error(), "device 5 does not exist (2 CUDA devices)"));
    /* the first ordinal past the last device is refused as such, not by the driver */
    assert_int_equal(coop_backend_cuda_create(2, true, &be), COOP_ERR_INVALID);
    assert_null(be);
    assert_non_null(strstr(coop_last_error(), "device 2 does not exist (2 CUDA devices)"));
    assert_int_equal(coop_backend_cuda_create(-1, true, &be), COOP_ERR_INVALID);
}

static void test_vmm_pages_unmap_alone(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    uint64_t unmapped = 0;
    assert_int_equal(be->ops->reserve(be, 64 * MIB, &base), COOP_OK);
    assert_int_equal(base % (2 * MIB), 0);
    long access_calls = counters().access_calls;
    assert_int_equal(be->ops->map(be, base, 6 * MIB), COOP_OK);
    assert_int_equal(counters().mapped_bytes, 6 * MIB);
    assert_int_equal(counters().live_handles, 3);
    /* one handle per page, opened by a single cuMemSetAccess over the range */
    assert_int_equal(counters().accessible_bytes, 6 * MIB);
    assert_int_equal(counters().access_calls, access_calls + 1);

    /* Work queued over the middle page, then the page unmapped alone. unmap
     * does not wait (the pool unmaps only pages whose streams it has seen
     * finish): unmapped before the work is seen finished, the mock reports
     * it; after an event on the stream completes, it is safe, and no
     * device-wide synchronize was needed. */
    coop_event ev;
    coop_stream stream = new_stream();
    long syncs = counters().syncs;
    launch_work(base + 2 * MIB + 4096, 8192, stream);
    assert_int_equal(be->ops->unmap(be, base + 2 * MIB, 2 * MIB, &unmapped), COOP_OK);
    assert_int_equal(mock_take_unsafe(), 1);
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 2 * MIB), COOP_OK);
    launch_work(base + 2 * MIB + 4096, 8192, stream);
    assert_int_equal(be->ops->event_record(be, stream, &ev), COOP_OK);
    assert_int_equal(be->ops->event_wait(be, ev), COOP_OK);
    assert_int_equal(be->ops->unmap(be, base + 2 * MIB, 2 * MIB, &unmapped), COOP_OK);
    assert_int_equal(counters().unsafe_releases, 0);
    assert_int_equal(counters().syncs, syncs);
    assert_int_equal(counters().mapped_bytes, 4 * MIB);
    be->ops->event_destroy(be, ev);
    /* work the application synchronized itself, then synchronize (what a
     * pool's destruction calls before unmapping everything) */
    launch_work(base + 4096, 512, stream);
    assert_int_equal(be->ops->synchronize(be), COOP_OK);
    assert_int_equal(counters().syncs, syncs + 1);

    /* the hole can be mapped again; its neighbours were untouched */
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 2 * MIB), COOP_OK);
    assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_OK);
    assert_int_equal(counters().mapped_bytes, 0);
    assert_int_equal(be->ops->release(be, base, 64 * MIB), COOP_OK);
    coop_backend_destroy(be);
    destroy_stream(stream);
}

static void test_vmm_bad_ranges_leave_state(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    uint64_t unmapped = 0;
    assert_int_equal(be->ops->reserve(be, 3 * MIB, &base), COOP_ERR_INVALID);
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
    assert_int_equal(be->ops->map(be, base, 4 * MIB), COOP_OK);
    assert_int_equal(be->ops->map(be, base + 4096, 2 * MIB), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "not aligned"));
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 4 * MIB), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "already mapped"));
    assert_int_equal(be->ops->unmap(be, base + 4 * MIB, 2 * MIB, &unmapped), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "not mapped"));
    assert_int_equal(be->ops->map(be, base + 16 * MIB, 2 * MIB), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "outside every reservation"));
    assert_int_equal(be->ops->release(be, base, 8 * MIB), COOP_ERR_INVALID);
    assert_int_equal(counters().mapped_bytes, 4 * MIB);
    /* release with pages still mapped unmaps them (after a sync) */
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
    assert_int_equal(counters().mapped_bytes, 0);
    coop_backend_destroy(be);
}

static void test_vmm_driver_failure_midway(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
    assert_int_equal(be->ops->map(be, base, 2 * MIB), COOP_OK);
    /* the third page of this call fails: all or nothing */
    mock_fail_nth("cuMemMap", 3, CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 6 * MIB), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "cuMemMap"));
    assert_non_null(strstr(coop_last_error(), "CUDA_ERROR_ILLEGAL_ADDRESS"));
    assert_int_equal(counters().mapped_bytes, 2 * MIB);
    /* opening the mapped range fails: its pages are unmapped and released */
    mock_fail_nth("cuMemSetAccess", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 6 * MIB), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "cuMemSetAccess"));
    assert_int_equal(counters().mapped_bytes, 2 * MIB);
    assert_int_equal(counters().accessible_bytes, 2 * MIB);
    /* out of device memory is COOP_ERR_NOMEM, the pool's retry signal */
    mock_set_memory(8 * MIB);
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 8 * MIB), COOP_ERR_NOMEM);
    assert_non_null(strstr(coop_last_error(), "CUDA_ERROR_OUT_OF_MEMORY (2: out of memory)"));
    assert_int_equal(counters().mapped_bytes, 2 * MIB);
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 6 * MIB), COOP_OK);
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
    mock_fail_nth("cuMemAddressReserve", 1, CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_ERR_NOMEM);
    assert_non_null(strstr(coop_last_error(), "cuMemAddressReserve"));
    coop_backend_destroy(be);
}

/* backend.h: "A failure leaves the pages mapped". A cuMemUnmap failing on
 * the second page of three must not leave the first unmapped: the pool keeps
 * the range as mapped and may hand it out again. */
static void test_vmm_unmap_failure_leaves_range_mapped(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    uint64_t unmapped = 0;
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
    assert_int_equal(be->ops->map(be, base, 6 * MIB), COOP_OK);
    mock_fail_nth("cuMemUnmap", 2, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "cuMemUnmap"));
    assert_non_null(strstr(coop_last_error(), "CUDA_ERROR_UNKNOWN"));
    assert_int_equal(unmapped, 0);
    assert_int_equal(counters().mapped_bytes, 6 * MIB);
    assert_int_equal(counters().accessible_bytes, 6 * MIB);
    /* the pool's retry finds every page mapped, as it believes */
    assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_OK);
    assert_int_equal(counters().mapped_bytes, 0);
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
    coop_backend_destroy(be);
}

/* The same, when the device's memory freed by the pages unmapped before the
 * failure is taken meanwhile (another process on a shared device): mapping
 * them again must not need new physical memory, or the range is left partly
 * unmapped, and partly mapped without access, while the pool hands it out. */
static void test_vmm_unmap_failure_remaps_without_new_memory(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    uint64_t unmapped = 0;
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
    assert_int_equal(be->ops->map(be, base, 6 * MIB), COOP_OK);
    mock_fail_nth("cuMemUnmap", 3, CUDA_ERROR_UNKNOWN);
    mock_fail_nth("cuMemCreate", 1, CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "cuMemUnmap"));
    assert_null(strstr(coop_last_error(), "no longer match"));
    assert_int_equal(counters().accessible_bytes, 6 * MIB);
    assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_OK);
    mock_fail_nth("cuMemCreate", 1, CUDA_SUCCESS); /* disarm, if unused */
    assert_int_equal(counters().live_handles, 0);
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
    coop_backend_destroy(be);
}

/* When mapping back the pages before a failed unmap fails too, those pages
 * are left unmapped, not mapped without access, and their handles
 * released; the call says how many, for the pool's page map, and its
 * message names both failures. The backend's pages then match the driver:
 * they map again, and the page that failed to unmap unmaps. */
static void test_vmm_unmap_undo_failure(void **state)
{
    (void)state;
    static const char *const undo_fails[] = {"cuMemMap", "cuMemSetAccess"};
    for (int k = 0; k < 2; k++) {
        coop_backend *be = create_vmm();
        uintptr_t base = 0;
        uint64_t unmapped = 0;
        coop_backend_cuda_held held;
        assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
        assert_int_equal(be->ops->map(be, base, 6 * MIB), COOP_OK);
        mock_fail_nth("cuMemUnmap", 3, CUDA_ERROR_UNKNOWN);
        mock_fail_nth(undo_fails[k], 1, CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_ERR_BACKEND);
        assert_non_null(strstr(coop_last_error(), "cuMemUnmap failed with CUDA_ERROR_UNKNOWN"));
        assert_non_null(strstr(coop_last_error(), undo_fails[k]));
        assert_non_null(strstr(coop_last_error(), "CUDA_ERROR_ILLEGAL_ADDRESS"));
        assert_int_equal(unmapped, 4 * MIB);
        cuda_mock_counters c = counters();
        assert_int_equal(c.live_handles, 1);
        assert_int_equal(c.accessible_bytes, 2 * MIB);
        coop_backend_cuda_held_now(be, &held);
        assert_int_equal(held.handles, 1);
        assert_int_equal(held.mapped_bytes, 2 * MIB);
        assert_int_equal(be->ops->map(be, base, 4 * MIB), COOP_OK);
        assert_int_equal(counters().accessible_bytes, 6 * MIB);
        assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_OK);
        assert_int_equal(unmapped, 6 * MIB);
        assert_int_equal(counters().live_handles, 0);
        assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
        coop_backend_destroy(be);
    }
}

/* Unmaps [base, +6 MiB) of a fresh reservation with its third page's
 * cuMemUnmap failing and the undo's second cuMemMap failing too, so that the
 * undo unmaps its first page again; with fail_at, that unmap (the call's
 * last counted one) fails as well. Returns the calls counted. */
static long unmap_with_failed_undo(coop_backend *be, uintptr_t *base, long fail_at)
{
    uint64_t unmapped = 0;
    assert_int_equal(be->ops->reserve(be, 16 * MIB, base), COOP_OK);
    assert_int_equal(be->ops->map(be, *base, 6 * MIB), COOP_OK);
    mock_fail_call(fail_at, CUDA_ERROR_UNKNOWN);
    mock_fail_nth("cuMemUnmap", 3, CUDA_ERROR_UNKNOWN);
    mock_fail_nth("cuMemMap", 2, CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(be->ops->unmap(be, *base, 6 * MIB, &unmapped), COOP_ERR_BACKEND);
    long calls = mock_calls();
    mock_fail_call(0, CUDA_SUCCESS);
    assert_int_equal(unmapped, 4 * MIB); /* the first two pages: the undo failed */
    return calls;
}

/* An unmap whose undo fails leaves the pages it could not unmap again
 * strays: their handles are kept (not released as the unmapped pages' are),
 * so that releasing the reservation unmaps them and frees its range. */
static void test_vmm_unmap_undo_leaves_strays_mapped(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    /* first, the calls up to the undo's unmap of the first page */
    long last = unmap_with_failed_undo(be, &base, 0);
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
    coop_backend_destroy(be);
    be = create_vmm();
    long calls = unmap_with_failed_undo(be, &base, last);
    assert_int_equal(calls, last);
    coop_backend_cuda_held held;
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.handles, 2); /* the stray first page and the third */
    assert_int_equal(counters().mapped_bytes, 4 * MIB);
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
    assert_int_equal(counters().mapped_bytes, 0);
    coop_backend_destroy(be);
}

/* A failed map is undone page by page; if undoing a page fails too, that
 * page stays mapped in the driver while the pool believes the range
 * unmapped. The pool's next map of the range must still succeed. */
static void test_vmm_map_rollback_failure(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    uint64_t unmapped = 0;
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
    mock_fail_nth("cuMemSetAccess", 1, CUDA_ERROR_UNKNOWN);
    mock_fail_nth("cuMemUnmap", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->map(be, base, 6 * MIB), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "cuMemSetAccess"));
    assert_int_equal(counters().mapped_bytes, 2 * MIB); /* the page whose undo failed */
    assert_int_equal(be->ops->map(be, base, 6 * MIB), COOP_OK);
    assert_int_equal(counters().mapped_bytes, 6 * MIB);
    assert_int_equal(counters().accessible_bytes, 6 * MIB);
    assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_OK);
    assert_int_equal(counters().mapped_bytes, 0);
    /* and a page left so is released with its reservation */
    mock_fail_nth("cuMemSetAccess", 1, CUDA_ERROR_UNKNOWN);
    mock_fail_nth("cuMemUnmap", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 4 * MIB), COOP_ERR_BACKEND);
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
    coop_backend_destroy(be);
}

/* A cuMemRelease that fails after its page was unmapped must not lose the
 * handle: the driver would keep the physical page for the life of the
 * process. The range is unmapped all the same (the pool sees it so); the
 * handle is kept, mapped again by the next map of its page, and released by
 * a later unmap, the reservation's release or destroy. */
static void test_vmm_release_failure_keeps_handle(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    uint64_t unmapped = 0;
    coop_backend_cuda_held held;
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
    assert_int_equal(be->ops->map(be, base, 6 * MIB), COOP_OK);
    mock_fail_nth("cuMemRelease", 2, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_OK);
    assert_int_equal(counters().accessible_bytes, 0);
    assert_int_equal(counters().live_handles, 1);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.handles, 1);
    assert_int_equal(held.mapped_bytes, 0);
    /* mapped again with its handle: two new ones, not three */
    assert_int_equal(be->ops->map(be, base, 6 * MIB), COOP_OK);
    assert_int_equal(counters().live_handles, 3);
    assert_int_equal(counters().accessible_bytes, 6 * MIB);
    assert_int_equal(be->ops->unmap(be, base, 6 * MIB, &unmapped), COOP_OK);
    assert_int_equal(counters().live_handles, 0);
    /* the reservation's release stops at the failure, and tries again */
    assert_int_equal(be->ops->map(be, base, 4 * MIB), COOP_OK);
    mock_fail_nth("cuMemRelease", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "cuMemRelease"));
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.handles, (uint64_t)counters().live_handles);
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
    assert_int_equal(counters().live_handles, 0);
    /* and destroy releases a held handle */
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
    assert_int_equal(be->ops->map(be, base, 2 * MIB), COOP_OK);
    mock_fail_nth("cuMemRelease", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->unmap(be, base, 2 * MIB, &unmapped), COOP_OK);
    assert_int_equal(counters().live_handles, 1);
    coop_backend_destroy(be);
}

static void test_events(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    coop_event ev;
    bool done = false;
    coop_stream stream = new_stream();
    mock_hold_streams(true);
    assert_int_equal(be->ops->event_record(be, stream, &ev), COOP_OK);
    assert_int_equal(be->ops->event_query(be, ev, &done), COOP_OK);
    assert_false(done);
    mock_hold_streams(false);
    assert_int_equal(be->ops->event_query(be, ev, &done), COOP_OK);
    assert_true(done);
    mock_fail_nth("cuEventQuery", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(be->ops->event_query(be, ev, &done), COOP_ERR_BACKEND);
    /* a wait the driver fails is an error, not a completed wait */
    mock_fail_nth("cuEventSynchronize", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(be->ops->event_wait(be, ev), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "cuEventSynchronize failed with"));
    be->ops->event_destroy(be, ev);
    mock_fail_nth("cuEventRecord", 1, CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(be->ops->event_record(be, 1, &ev), COOP_ERR_BACKEND);
    /* destroyed events are reused: a hundred records create no new event */
    long creates = counters().event_creates;
    for (int i = 0; i < 100; i++) {
        assert_int_equal(be->ops->event_record(be, 2, &ev), COOP_OK);
        be->ops->event_destroy(be, ev);
    }
    assert_int_equal(counters().event_creates, creates);
    /* past the cache's 64, destroy really destroys */
    coop_event many[80];
    for (int i = 0; i < 80; i++)
        assert_int_equal(be->ops->event_record(be, 2, &many[i]), COOP_OK);
    assert_int_equal(counters().live_events, 80);
    for (int i = 0; i < 80; i++)
        be->ops->event_destroy(be, many[i]);
    assert_int_equal(counters().live_events, 64);
    /* an event captures the work queued before it, on its own stream only */
    coop_event before, after, other;
    assert_int_equal(be->ops->event_record(be, stream, &before), COOP_OK);
    assert_int_equal(mock_hold_stream((CUstream)stream, true), 0);
    assert_int_equal(be->ops->event_record(be, stream, &after), COOP_OK);
    assert_int_equal(be->ops->event_record(be, 0, &other), COOP_OK);
    assert_int_equal(be->ops->event_query(be, before, &done), COOP_OK);
    assert_true(done);
    assert_int_equal(be->ops->event_query(be, after, &done), COOP_OK);
    assert_false(done);
    assert_int_equal(be->ops->event_query(be, other, &done), COOP_OK);
    assert_true(done);
    assert_int_equal(mock_hold_stream((CUstream)stream, false), 0);
    assert_int_equal(be->ops->event_query(be, after, &done), COOP_OK);
    assert_true(done);
    be->ops->event_destroy(be, before);
    be->ops->event_destroy(be, after);
    be->ops->event_destroy(be, other);
    /* a stream nobody created is the driver's CUDA_ERROR_INVALID_HANDLE */
    assert_int_equal(be->ops->event_record(be, 0x7f00, &ev), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "CUDA_ERROR_INVALID_HANDLE"));
    coop_backend_destroy(be);
    assert_int_equal(counters().live_events, 0);
    destroy_stream(stream);
}

/* An event given back when the cache is full is destroyed, which needs the
 * primary context current; when it cannot be made current (here
 * cuCtxPushCurrent fails: the test thread has no context) the event must
 * not be lost. It is kept, reused by the next record, and destroyed by the
 * next destroy that enters the context, or by the backend's. */
enum { EVENTS_PAST_CACHE = 64 + 3 };

/* A backend whose event cache is full, with the three events past it still
 * recorded in ev[64..66]. */
static coop_backend *full_event_cache(coop_event ev[EVENTS_PAST_CACHE])
{
    coop_backend *be = create_vmm();
    for (int i = 0; i < EVENTS_PAST_CACHE; i++)
        assert_int_equal(be->ops->event_record(be, 2, &ev[i]), COOP_OK);
    for (int i = 0; i < 64; i++)
        be->ops->event_destroy(be, ev[i]);
    return be;
}

static void test_event_destroy_without_context(void **state)
{
    (void)state;
    coop_event ev[EVENTS_PAST_CACHE];
    coop_backend *be = full_event_cache(ev);
    be->ops->event_destroy(be, ev[65]);
    be->ops->event_destroy(be, ev[66]);
    mock_fail_nth("cuCtxPushCurrent", 1, CUDA_ERROR_UNKNOWN);
    be->ops->event_destroy(be, ev[64]);
    assert_int_equal(counters().live_events, 65);
    coop_backend_destroy(be);
    assert_int_equal(counters().live_events, 0);

    be = full_event_cache(ev);
    mock_fail_nth("cuCtxPushCurrent", 1, CUDA_ERROR_UNKNOWN);
    be->ops->event_destroy(be, ev[64]);
    assert_int_equal(counters().live_events, EVENTS_PAST_CACHE);
    /* the next record reuses it */
    long creates = counters().event_creates;
    coop_event again;
    assert_int_equal(be->ops->event_record(be, 2, &again), COOP_OK);
    assert_true(again == ev[64]);
    assert_int_equal(counters().event_creates, creates);
    /* kept again, then destroyed by the next destroy that enters the context */
    mock_fail_nth("cuCtxPushCurrent", 1, CUDA_ERROR_UNKNOWN);
    be->ops->event_destroy(be, again);
    be->ops->event_destroy(be, ev[65]);
    assert_int_equal(counters().live_events, EVENTS_PAST_CACHE - 2);
    be->ops->event_destroy(be, ev[66]);
    coop_backend_destroy(be);
}

static void test_segments_without_vmm(void **state)
{
    (void)state;
    coop_backend *be = NULL;
    assert_int_equal(coop_backend_cuda_create(1, false, &be), COOP_OK);
    assert_false(be->has_vmm);
    uintptr_t a = 0, b = 0;
    assert_int_equal(be->ops->segment_alloc(be, 20 * MIB, &a), COOP_OK);
    assert_int_equal(be->ops->segment_alloc(be, 4 * MIB, &b), COOP_OK);
    assert_int_equal(counters().live_segments, 2);
    /* the mock's cuMemAlloc gives 256-byte alignment only, as documented;
     * the pool's blocks need 512: each segment was aligned up, and its
     * record keeps the address cuMemFree needs */
    assert_int_equal(a % 512, 0);
    assert_int_equal(b % 512, 0);
    coop_backend_cuda_held held;
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.segment_records, 2);
    coop_event ev;
    assert_int_equal(be->ops->event_record(be, CU_STREAM_PER_THREAD_HANDLE, &ev), COOP_OK);
    be->ops->event_destroy(be, ev);
    assert_int_equal(be->ops->segment_free(be, a, 20 * MIB), COOP_OK);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.segment_records, 1); /* a freed segment's record goes with it */
    assert_int_equal(be->ops->segment_free(be, b, 4 * MIB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, b, 4 * MIB), COOP_ERR_BACKEND);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.segments, 0);
    assert_int_equal(held.segment_records, 0);
    mock_set_memory(8 * MIB);
    assert_int_equal(be->ops->segment_alloc(be, 20 * MIB, &a), COOP_ERR_NOMEM);
    coop_backend_destroy(be);

    /* a device without VMM gives segments even when VMM is wanted */
    setenv("MOCK_CUDA_NO_VMM", "1", 1);
    assert_int_equal(coop_backend_cuda_create(0, true, &be), COOP_OK);
    assert_false(be->has_vmm);
    coop_backend_destroy(be);
}

/* The mock's cuMemAlloc is 256-byte aligned only, so every segment is
 * allocated again with room to align up, after freeing the first try. If
 * that cuMemFree fails, the first try is not lost: the next allocation
 * frees it, or the destroy does. */
static void test_segments_misaligned_free_failure(void **state)
{
    (void)state;
    coop_backend *be = NULL;
    coop_backend_cuda_held held;
    assert_int_equal(coop_backend_cuda_create(1, false, &be), COOP_OK);
    uintptr_t a = 0, b = 0, c = 0;
    mock_fail_nth("cuMemFree", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->segment_alloc(be, 4 * MIB, &a), COOP_OK);
    assert_int_equal(a % 512, 0);
    assert_int_equal(counters().live_segments, 2);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.segments, 2);
    assert_int_equal(held.segment_records, 2); /* a's shift and the kept first try */
    assert_int_equal(be->ops->segment_alloc(be, 4 * MIB, &b), COOP_OK);
    assert_int_equal(counters().live_segments, 2);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.segments, 2);
    assert_int_equal(held.segment_records, 2); /* a's shift and b's */
    mock_fail_nth("cuMemFree", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->segment_alloc(be, 2 * MIB, &c), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, a, 4 * MIB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, b, 4 * MIB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, c, 2 * MIB), COOP_OK);
    assert_int_equal(counters().live_segments, 1);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.segments, 1);
    assert_int_equal(held.segment_records, 1); /* c's first try, for destroy to free */
    coop_backend_destroy(be);
}

/* The caller's own current context stays current around every call. */
static void test_caller_context_preserved(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    CUresult (*push)(CUcontext) = (CUresult(*)(CUcontext))dlsym(mock_lib, "cuCtxPushCurrent_v2");
    CUresult (*pop)(CUcontext *) = (CUresult(*)(CUcontext *))dlsym(mock_lib, "cuCtxPopCurrent_v2");
    CUresult (*get)(CUcontext *) = (CUresult(*)(CUcontext *))dlsym(mock_lib, "cuCtxGetCurrent");
    assert_non_null(push);
    static char other_ctx;
    assert_int_equal(push((CUcontext)(void *)&other_ctx), CUDA_SUCCESS);
    uintptr_t base;
    assert_int_equal(be->ops->reserve(be, 4 * MIB, &base), COOP_OK);
    assert_int_equal(be->ops->map(be, base, 4 * MIB), COOP_OK);
    CUcontext cur = NULL;
    get(&cur);
    assert_ptr_equal(cur, &other_ctx);
    assert_int_equal(be->ops->release(be, base, 4 * MIB), COOP_OK);
    get(&cur);
    assert_ptr_equal(cur, &other_ctx);
    pop(&cur);
    coop_backend_destroy(be);
}

/* stderr goes to a temporary file between these two; stderr_end returns
 * what was written there. */
static int stderr_saved = -1;
static FILE *stderr_file;

static void stderr_begin(void)
{
    fflush(stderr);
    stderr_file = tmpfile();
    assert_non_null(stderr_file);
    stderr_saved = dup(STDERR_FILENO);
    assert_true(stderr_saved >= 0);
    assert_true(dup2(fileno(stderr_file), STDERR_FILENO) >= 0);
}

static const char *stderr_end(void)
{
    static char text[2048];
    fflush(stderr);
    assert_true(dup2(stderr_saved, STDERR_FILENO) >= 0);
    close(stderr_saved);
    rewind(stderr_file);
    size_t n = fread(text, 1, sizeof text - 1, stderr_file);
    text[n] = '\0';
    fclose(stderr_file);
    return text;
}

/* The mock's context calls, as an application would make them. */
typedef struct ctx_calls {
    CUresult (*get)(CUcontext *);
    CUresult (*push)(CUcontext);
    CUresult (*pop)(CUcontext *);
} ctx_calls;

static ctx_calls resolve_ctx_calls(void)
{
    ctx_calls c;
    *(void **)&c.get = dlsym(mock_lib, "cuCtxGetCurrent");
    *(void **)&c.push = dlsym(mock_lib, MOCK_SYMBOL(cuCtxPushCurrent));
    *(void **)&c.pop = dlsym(mock_lib, MOCK_SYMBOL(cuCtxPopCurrent));
    return c;
}

/* Reserves 8 MiB at *base with the reservation's cuCtxPopCurrent failing,
 * which leaves the primary context current on this thread; returns that
 * context. *said: what the reservation wrote on stderr. */
static CUcontext reserve_leaving_primary_current(coop_backend *be, const ctx_calls *c,
                                                 uintptr_t *base, const char **said)
{
    mock_fail_nth("cuCtxPopCurrent", 1, CUDA_ERROR_UNKNOWN);
    stderr_begin();
    assert_int_equal(be->ops->reserve(be, 8 * MIB, base), COOP_OK);
    *said = stderr_end();
    CUcontext primary = NULL;
    assert_int_equal(c->get(&primary), CUDA_SUCCESS);
    assert_non_null(primary);
    return primary;
}

/* A push of the primary context whose cuCtxPopCurrent fails leaves it
 * current on the caller's thread (here a thread with no context). The call
 * itself succeeded and says so, with stderr saying what stays; the next
 * call on the thread pops it. A call that failed keeps its own message. */
static void test_failed_pop_is_popped_later(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    ctx_calls c = resolve_ctx_calls();
    CUcontext cur = NULL;
    uintptr_t base = 0;
    const char *said;
    CUcontext primary = reserve_leaving_primary_current(be, &c, &base, &said);
    assert_non_null(strstr(said, "cuCtxPopCurrent failed with CUDA_ERROR_UNKNOWN"));
    assert_non_null(strstr(said, "primary context may stay current on this thread"));
    assert_int_equal(be->ops->map(be, base, 2 * MIB), COOP_OK);
    assert_int_equal(c.get(&cur), CUDA_SUCCESS);
    assert_null(cur);

    /* a failed call keeps its message */
    mock_fail_nth("cuMemCreate", 1, CUDA_ERROR_OUT_OF_MEMORY);
    mock_fail_nth("cuCtxPopCurrent", 1, CUDA_ERROR_UNKNOWN);
    stderr_begin();
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 2 * MIB), COOP_ERR_NOMEM);
    (void)stderr_end();
    assert_non_null(strstr(coop_last_error(), "cuMemCreate failed"));
    assert_null(strstr(coop_last_error(), "cuCtxPopCurrent"));

    /* once another context is current over it, it is not coop's to pop */
    static char other_ctx;
    assert_int_equal(c.push((CUcontext)(void *)&other_ctx), CUDA_SUCCESS);
    assert_int_equal(be->ops->unmap(be, base, 2 * MIB, &(uint64_t){0}), COOP_OK);
    assert_int_equal(c.get(&cur), CUDA_SUCCESS);
    assert_ptr_equal(cur, &other_ctx);
    assert_int_equal(c.pop(&cur), CUDA_SUCCESS);
    assert_int_equal(be->ops->release(be, base, 8 * MIB), COOP_OK);
    assert_int_equal(c.get(&cur), CUDA_SUCCESS);
    assert_ptr_equal(cur, primary);
    assert_int_equal(c.pop(&cur), CUDA_SUCCESS);
    coop_backend_destroy(be);
}

/* Once a scope has popped the context a failed pop left current, the note
 * is gone: when the application later makes the primary context current
 * itself, coop's calls leave it current (it is the application's, not
 * coop's to pop). */
static void test_popped_context_note_is_dropped(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    ctx_calls c = resolve_ctx_calls();
    CUcontext cur = NULL;
    uintptr_t base = 0;
    const char *said;
    CUcontext primary = reserve_leaving_primary_current(be, &c, &base, &said);
    assert_int_equal(be->ops->map(be, base, 2 * MIB), COOP_OK); /* pops it */
    assert_int_equal(c.get(&cur), CUDA_SUCCESS);
    assert_null(cur);
    /* the application's own push of the primary context */
    assert_int_equal(c.push(primary), CUDA_SUCCESS);
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 2 * MIB), COOP_OK);
    assert_int_equal(c.get(&cur), CUDA_SUCCESS);
    assert_ptr_equal(cur, primary);
    assert_int_equal(be->ops->release(be, base, 8 * MIB), COOP_OK);
    assert_int_equal(c.get(&cur), CUDA_SUCCESS);
    assert_ptr_equal(cur, primary);
    assert_int_equal(c.pop(&cur), CUDA_SUCCESS);
    coop_backend_destroy(be);
}

/* device_memory is the device's total memory, not what is free when the
 * backend is created: another backend's pages in use do not shrink it. */
static void test_device_memory_is_the_total(void **state)
{
    (void)state;
    coop_backend *first = create_vmm();
    uintptr_t base = 0;
    assert_int_equal(first->ops->reserve(first, 8 * MIB, &base), COOP_OK);
    assert_int_equal(first->ops->map(first, base, 8 * MIB), COOP_OK);
    coop_backend *second = create_vmm(); /* checks device_memory is 1 GiB */
    assert_int_equal(second->device_memory, 1ull << 30);
    coop_backend_destroy(second);
    assert_int_equal(first->ops->release(first, base, 8 * MIB), COOP_OK);
    coop_backend_destroy(first);
}

/* A pool of config over the mock, or the test fails with the reason. */
static coop_pool *created(const coop_config *config)
{
    coop_pool *pool = NULL;
    if (coop_pool_create(config, &pool) != COOP_OK)
        fail_msg("coop_pool_create: %s", coop_last_error());
    return pool;
}

/* The pool's capacity as resolved (rounded to pages, set_capacity's). */
static uint64_t capacity_of(coop_pool *pool)
{
    coop_config c;
    coop_pool_config(pool, &c);
    return c.capacity;
}

/* destroy unmaps and releases whatever the pool left behind */
static void test_destroy_releases_everything(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t a, b;
    assert_int_equal(be->ops->reserve(be, 8 * MIB, &a), COOP_OK);
    assert_int_equal(be->ops->reserve(be, 8 * MIB, &b), COOP_OK);
    assert_int_equal(be->ops->map(be, a + 2 * MIB, 4 * MIB), COOP_OK);
    assert_int_equal(be->ops->map(be, b, 2 * MIB), COOP_OK);
    coop_backend_destroy(be);
}

/* What a destroy left in the driver, for a test to give back itself (with
 * the primary context current) once it has checked it. */
typedef struct leftovers {
    uintptr_t base; /* a reservation of size bytes, 0: none */
    uint64_t size;
    uintptr_t mapped[4]; /* pages of 2 MiB still mapped in it */
    int num_mapped;
    coop_event events[4]; /* events not destroyed */
    int num_events;
} leftovers;

static CUresult give_back_in_context(void *arg)
{
    const leftovers *l = arg;
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*event_destroy)(CUevent);
    *(void **)&unmap = dlsym(mock_lib, "cuMemUnmap");
    *(void **)&address_free = dlsym(mock_lib, "cuMemAddressFree");
    *(void **)&event_destroy = dlsym(mock_lib, MOCK_SYMBOL(cuEventDestroy));
    CUresult rc = CUDA_SUCCESS;
    for (int i = 0; i < l->num_mapped && rc == CUDA_SUCCESS; i++)
        rc = unmap((CUdeviceptr)l->mapped[i], 2 * MIB);
    if (rc == CUDA_SUCCESS && l->base)
        rc = address_free((CUdeviceptr)l->base, l->size);
    for (int i = 0; i < l->num_events && rc == CUDA_SUCCESS; i++)
        rc = event_destroy((CUevent)l->events[i]);
    return rc;
}

/* The report of a destroy that left something (coop_last_error; stderr has
 * the same line) names what and the first failure. */
static void assert_reported(const char *what, const char *call)
{
    const char *msg = coop_last_error();
    if (!strstr(msg, what) || !strstr(msg, call))
        fail_msg("destroy's report lacks \"%s\" or \"%s\": \"%s\"", what, call, msg);
}

/* A destroy whose pages will not all unmap still gives back what the driver
 * takes: the other pages, and every handle (a handle may be released while
 * mapped: its memory goes with the last mapping); the range that keeps a
 * mapping stays reserved (freeing it is not documented), and the destroy
 * says so. */
static void test_destroy_unmap_failure(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
    assert_int_equal(be->ops->map(be, base, 6 * MIB), COOP_OK);
    mock_fail_nth("cuMemUnmap", 2, CUDA_ERROR_UNKNOWN);
    coop_clear_error();
    long refused = counters().refused_address_frees;
    coop_backend_destroy(be);
    cuda_mock_counters c = counters();
    /* not even tried: freeing a range that keeps a mapping is undocumented */
    assert_int_equal(c.refused_address_frees, refused);
    assert_int_equal(c.live_handles, 0);
    assert_int_equal(c.mapped_bytes, 2 * MIB);
    assert_int_equal(c.live_reservations, 1);
    assert_reported("0 page handles, 2097152 bytes mapped, 1 reservations",
                    "cuMemUnmap failed with CUDA_ERROR_UNKNOWN");
    leftovers l = {.base = base, .size = 16 * MIB, .mapped = {base + 2 * MIB}, .num_mapped = 1};
    assert_int_equal(with_primary_context(give_back_in_context, &l), CUDA_SUCCESS);
}

/* When the device cannot be synchronized, no page is unmapped (a kernel may
 * still use it), but every handle is still released. */
static void test_destroy_sync_failure(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    assert_int_equal(be->ops->reserve(be, 8 * MIB, &base), COOP_OK);
    assert_int_equal(be->ops->map(be, base + 2 * MIB, 4 * MIB), COOP_OK);
    mock_fail_nth("cuCtxSynchronize", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    coop_clear_error();
    long refused = counters().refused_address_frees;
    coop_backend_destroy(be);
    cuda_mock_counters c = counters();
    assert_int_equal(c.refused_address_frees, refused);
    assert_int_equal(c.live_handles, 0);
    assert_int_equal(c.mapped_bytes, 4 * MIB);
    assert_int_equal(c.live_reservations, 1);
    assert_reported("0 page handles, 4194304 bytes mapped, 1 reservations",
                    "cuCtxSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS");
    leftovers l = {
        .base = base, .size = 8 * MIB, .mapped = {base + 2 * MIB, base + 4 * MIB}, .num_mapped = 2};
    assert_int_equal(with_primary_context(give_back_in_context, &l), CUDA_SUCCESS);
}

/* A stray page (mapped in the driver although a failed map's undo could not
 * unmap it) keeps its range reserved at a destroy that could not synchronize,
 * as a mapped page does: the range is not freed under it. */
static void test_destroy_sync_failure_with_a_stray(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    assert_int_equal(be->ops->reserve(be, 8 * MIB, &base), COOP_OK);
    mock_fail_nth("cuMemSetAccess", 1, CUDA_ERROR_UNKNOWN);
    mock_fail_nth("cuMemUnmap", 1, CUDA_ERROR_UNKNOWN); /* the undo's first: the second page */
    assert_int_equal(be->ops->map(be, base, 4 * MIB), COOP_ERR_BACKEND);
    assert_int_equal(counters().mapped_bytes, 2 * MIB);
    mock_fail_nth("cuCtxSynchronize", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    coop_clear_error();
    long refused = counters().refused_address_frees;
    coop_backend_destroy(be);
    cuda_mock_counters c = counters();
    assert_int_equal(c.refused_address_frees, refused);
    assert_int_equal(c.live_handles, 0);
    assert_int_equal(c.mapped_bytes, 2 * MIB);
    assert_int_equal(c.live_reservations, 1);
    assert_reported("0 page handles, 2097152 bytes mapped, 1 reservations",
                    "cuCtxSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS");
    leftovers l = {.base = base, .size = 8 * MIB, .mapped = {base + 2 * MIB}, .num_mapped = 1};
    assert_int_equal(with_primary_context(give_back_in_context, &l), CUDA_SUCCESS);
}

static CUresult free_segment_in_context(void *arg)
{
    CUresult (*mem_free)(CUdeviceptr);
    *(void **)&mem_free = dlsym(mock_lib, MOCK_SYMBOL(cuMemFree));
    return mem_free(*(CUdeviceptr *)arg);
}

/* A segment the pool never gave back is device memory left with the driver
 * for the life of the process: the destroy says so, as it does of pages
 * (the backend cannot free it: the pool may still hand it out). */
static void test_destroy_reports_a_segment_left(void **state)
{
    (void)state;
    coop_backend *be = NULL;
    assert_int_equal(coop_backend_cuda_create(0, false, &be), COOP_OK);
    uintptr_t seg = 0;
    assert_int_equal(be->ops->segment_alloc(be, 4 * MIB, &seg), COOP_OK);
    coop_clear_error();
    stderr_begin();
    coop_backend_destroy(be);
    const char *said = stderr_end();
    assert_non_null(strstr(said, "0 reservations, 1 segments and 0 events left"));
    assert_reported("0 reservations, 1 segments and 0 events left",
                    "none here: the pool had not given them back");
    assert_int_equal(counters().live_segments, 1);
    /* the mock's cuMemAlloc gives 256 bytes past a 512-byte boundary: the
     * backend handed the segment out 256 bytes above what cuMemFree takes */
    CUdeviceptr dptr = (CUdeviceptr)seg - 256;
    assert_int_equal(with_primary_context(free_segment_in_context, &dptr), CUDA_SUCCESS);
}

/* The address after "unused segment at " in msg, or 0. */
static CUdeviceptr unused_segment_named(const char *msg)
{
    const char *at = strstr(msg, "unused segment at ");
    return at ? (CUdeviceptr)strtoull(at + strlen("unused segment at "), NULL, 16) : 0;
}

/* Two first tries (misaligned) kept because their cuMemFree failed, and
 * failing again at the destroy: the destroy names the first failure (the
 * first kept segment in its list, the one kept last), not the last. */
static void test_destroy_names_the_first_unused_segment_failure(void **state)
{
    (void)state;
    coop_backend *be = NULL;
    assert_int_equal(coop_backend_cuda_create(0, false, &be), COOP_OK);
    uintptr_t a = 0, b = 0;
    mock_fail_from("cuMemFree", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->segment_alloc(be, 4 * MIB, &a), COOP_OK); /* keeps k1 */
    coop_clear_error();
    assert_int_equal(be->ops->segment_alloc(be, 4 * MIB, &b), COOP_OK); /* keeps k2 */
    CUdeviceptr k1 = unused_segment_named(coop_last_error());           /* its free failed again */
    assert_int_not_equal(k1, 0);
    coop_backend_cuda_held held;
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.segment_records, 4); /* a's and b's shifts, k1 and k2 */
    mock_fail_nth("cuMemFree", 0, CUDA_SUCCESS);
    assert_int_equal(be->ops->segment_free(be, a, 4 * MIB), COOP_OK);
    assert_int_equal(be->ops->segment_free(be, b, 4 * MIB), COOP_OK);
    mock_fail_from("cuMemFree", 1, CUDA_ERROR_UNKNOWN);
    stderr_begin();
    coop_backend_destroy(be);
    (void)stderr_end();
    mock_fail_nth("cuMemFree", 0, CUDA_SUCCESS);
    assert_reported("2 segments and 0 events left", "cuMemFree failed with CUDA_ERROR_UNKNOWN");
    CUdeviceptr k2 = unused_segment_named(coop_last_error());
    assert_int_not_equal(k2, 0);
    if (k2 == k1)
        fail_msg("destroy named the last failure, not the first: %s", coop_last_error());
    assert_int_equal(with_primary_context(free_segment_in_context, &k1), CUDA_SUCCESS);
    assert_int_equal(with_primary_context(free_segment_in_context, &k2), CUDA_SUCCESS);
}

/* Without the context (cuCtxPushCurrent fails on this thread, which has
 * none) the destroy makes no driver call, and says what it leaves. A clean
 * destroy says nothing and leaves the thread's error as it was. */
static void test_destroy_without_context(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    coop_event ev[2];
    assert_int_equal(be->ops->reserve(be, 4 * MIB, &base), COOP_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(be->ops->event_record(be, 2, &ev[i]), COOP_OK);
    for (int i = 0; i < 2; i++)
        be->ops->event_destroy(be, ev[i]); /* kept for reuse */
    mock_fail_nth("cuCtxPushCurrent", 1, CUDA_ERROR_UNKNOWN);
    coop_clear_error();
    coop_backend_destroy(be);
    cuda_mock_counters c = counters();
    assert_int_equal(c.live_reservations, 1);
    assert_int_equal(c.live_events, 2);
    assert_reported("1 reservations, 0 segments and 2 events left",
                    "cuCtxPushCurrent failed with CUDA_ERROR_UNKNOWN");
    leftovers l = {.base = base, .size = 4 * MIB, .events = {ev[0], ev[1]}, .num_events = 2};
    assert_int_equal(with_primary_context(give_back_in_context, &l), CUDA_SUCCESS);

    be = create_vmm();
    coop_set_error(COOP_ERR_INVALID, "the caller's message");
    coop_backend_destroy(be);
    assert_string_equal(coop_last_error(), "the caller's message");
    /* nor does a failure that leaves nothing behind: nothing is reported */
    be = create_vmm();
    coop_set_error(COOP_ERR_INVALID, "the caller's message");
    mock_fail_nth("cuCtxPushCurrent", 1, CUDA_ERROR_UNKNOWN);
    coop_backend_destroy(be);
    assert_string_equal(coop_last_error(), "the caller's message");
}

/* A release with pages still mapped (the pool's release after a failed
 * unmap, or its destroy) waits for the device once, then unmaps and releases
 * every page down to the reservation's last; the handles of a successful
 * unmap go back to the driver at once (the device memory is free for
 * others), and the backend's counts of what it holds follow. */
static void test_vmm_release_unmaps_what_is_still_mapped(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    uint64_t unmapped = 0;
    coop_backend_cuda_held held;
    coop_stream stream = new_stream();
    assert_int_equal(be->ops->reserve(be, 8 * MIB, &base), COOP_OK);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.reservations, 1);
    assert_int_equal(be->ops->map(be, base, 4 * MIB), COOP_OK);
    assert_int_equal(be->ops->unmap(be, base, 4 * MIB, &unmapped), COOP_OK);
    assert_int_equal(unmapped, 4 * MIB);
    assert_int_equal(counters().live_handles, 0);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.handles, 0);
    /* only the last page mapped, with work queued over it */
    assert_int_equal(be->ops->map(be, base + 6 * MIB, 2 * MIB), COOP_OK);
    launch_work(base + 6 * MIB + 4096, 8192, stream);
    long syncs = counters().syncs;
    assert_int_equal(be->ops->release(be, base, 8 * MIB), COOP_OK);
    assert_int_equal(counters().syncs, syncs + 1);
    assert_int_equal(mock_take_unsafe(), 0);
    cuda_mock_counters c = counters();
    assert_int_equal(c.mapped_bytes, 0);
    assert_int_equal(c.live_handles, 0);
    assert_int_equal(c.live_reservations, 0);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.reservations, 0);
    assert_int_equal(held.handles, 0);
    assert_int_equal(held.mapped_bytes, 0);
    /* nothing left: the destroy reports nothing */
    coop_set_error(COOP_ERR_INVALID, "the caller's message");
    coop_backend_destroy(be);
    assert_string_equal(coop_last_error(), "the caller's message");
    destroy_stream(stream);
}

/* A failed map whose undo unmaps a page but cannot release its handle
 * leaves that page held (unmapped, its handle kept), not stray (mapped in
 * the driver): the next map maps the kept handle again and opens it. */
static void test_vmm_map_rollback_release_failure(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    uintptr_t base = 0;
    uint64_t unmapped = 0;
    coop_backend_cuda_held held;
    assert_int_equal(be->ops->reserve(be, 16 * MIB, &base), COOP_OK);
    mock_fail_nth("cuMemSetAccess", 1, CUDA_ERROR_UNKNOWN);
    mock_fail_nth("cuMemRelease", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(be->ops->map(be, base, 4 * MIB), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "cuMemSetAccess"));
    assert_int_equal(counters().mapped_bytes, 2 * MIB); /* the kept handle's memory */
    assert_int_equal(counters().accessible_bytes, 0);
    assert_int_equal(counters().live_handles, 1);
    coop_backend_cuda_held_now(be, &held);
    assert_int_equal(held.handles, 1);
    assert_int_equal(held.mapped_bytes, 0);
    assert_int_equal(be->ops->map(be, base, 4 * MIB), COOP_OK);
    assert_int_equal(counters().live_handles, 2);
    assert_int_equal(counters().accessible_bytes, 4 * MIB);
    assert_int_equal(be->ops->unmap(be, base, 4 * MIB, &unmapped), COOP_OK);
    assert_int_equal(be->ops->release(be, base, 16 * MIB), COOP_OK);
    coop_backend_destroy(be);
}

/* A cached event the driver will not destroy at the backend's destroy is
 * counted in its report. */
static void test_destroy_event_failure_is_reported(void **state)
{
    (void)state;
    coop_backend *be = create_vmm();
    coop_event ev;
    assert_int_equal(be->ops->event_record(be, 2, &ev), COOP_OK);
    be->ops->event_destroy(be, ev); /* kept for reuse */
    mock_fail_nth("cuEventDestroy", 1, CUDA_ERROR_UNKNOWN);
    coop_clear_error();
    coop_backend_destroy(be);
    assert_int_equal(counters().live_events, 1);
    assert_reported("0 segments and 1 events left",
                    "cuEventDestroy failed with CUDA_ERROR_UNKNOWN");
    leftovers l = {.events = {ev}, .num_events = 1};
    assert_int_equal(with_primary_context(give_back_in_context, &l), CUDA_SUCCESS);
}

/* The allocator's essential sequence on the CUDA backend (mock driver). */
static void run_pool_on_mock(bool use_vmm)
{
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.capacity = 256 * MIB;
    config.use_vmm = use_vmm;
    config.check = true;
    coop_pool *pool = created(&config);
    coop_config resolved;
    coop_pool_config(pool, &resolved);
    assert_int_equal(resolved.use_vmm, use_vmm);
    coop_stream side = new_stream();
    run_pool_sequence(pool, side);
    coop_pool_destroy(pool);
    destroy_stream(side);
}

static void test_pool_sequence_vmm(void **state)
{
    (void)state;
    run_pool_on_mock(true);
}

static void test_pool_sequence_segments(void **state)
{
    (void)state;
    run_pool_on_mock(false);
}

/* A pool on a device whose memory another user took (here a second pool,
 * through cuMemAlloc): the driver refuses pages the capacity allows, and
 * the pool releases its own idle cached pages and maps again, as PyTorch
 * frees its cached blocks and retries. It used to report out of memory
 * while caching more than the request (the review's r08). When nothing is
 * left to release, the message says the device refused, in the driver's
 * words. */
/* A device whose total is not a whole number of pages (an H100 reports
 * 85,031,714,816 bytes: 40,546 pages of 2 MiB and 576 KiB): "the whole
 * device" is its whole pages, at creation and in coop_set_capacity, not a
 * refusal for rounding up past the device. */
static void test_capacity_of_a_device_with_a_partial_page(void **state)
{
    (void)state;
    mock_set_memory(256 * MIB + 576 * 1024);
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    coop_pool *pool = created(&config);
    assert_int_equal(capacity_of(pool), 256 * MIB);
    assert_int_equal(coop_set_capacity(pool, 100 * MIB + 1), COOP_OK); /* rounded up */
    assert_int_equal(capacity_of(pool), 102 * MIB);
    assert_int_equal(coop_set_capacity(pool, 256 * MIB + 576 * 1024), COOP_OK); /* the total */
    assert_int_equal(capacity_of(pool), 256 * MIB);
    assert_int_equal(coop_set_capacity(pool, 256 * MIB + 576 * 1024 + 1), COOP_ERR_INVALID);
    void *p = coop_malloc(pool, 256 * MIB, 0, 0, NULL);
    assert_non_null(p);
    assert_int_equal(coop_free(pool, p), COOP_OK);
    coop_pool_destroy(pool);
    config.capacity = 256 * MIB + 4096; /* explicit, within the device: its whole pages */
    pool = created(&config);
    assert_int_equal(capacity_of(pool), 256 * MIB);
    /* the host backend's controls are refused by name on this one */
    assert_int_equal(coop_host_hold_stream(pool, 1, true), COOP_ERR_UNSUPPORTED);
    assert_non_null(strstr(coop_last_error(), "coop_host_hold_stream: the pool's backend is"));
    assert_int_equal(coop_host_busy_stream(pool, 1), COOP_ERR_UNSUPPORTED);
    coop_pool_destroy(pool);
    /* beyond the device: refused at creation, naming the field */
    config.capacity = 256 * MIB + 576 * 1024 + 1;
    pool = (coop_pool *)&config;
    assert_int_equal(coop_pool_create(&config, &pool), COOP_ERR_INVALID);
    assert_null(pool);
    assert_non_null(strstr(coop_last_error(), "coop_pool_create: config.capacity 269025281 exceeds "
                                              "the device's 269025280 bytes"));
}

static void test_pool_device_full_releases_cache(void **state)
{
    (void)state;
    mock_set_memory(256 * MIB);
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA; /* capacity: the whole device */
    config.check = true;
    coop_pool *b = created(&config), *other = NULL;
    void *p1 = coop_malloc(b, 64 * MIB, 0, 0, NULL), *g1 = coop_malloc(b, 2 * MIB, 0, 0, NULL);
    void *p3 = coop_malloc(b, 64 * MIB, 0, 0, NULL), *g2 = coop_malloc(b, 2 * MIB, 0, 0, NULL);
    assert_non_null(p3);
    assert_non_null(g2);
    assert_int_equal(coop_free(b, p1), COOP_OK);
    assert_int_equal(coop_free(b, p3), COOP_OK); /* 128 MiB cached */
    coop_config oc = config;
    oc.use_vmm = false;
    oc.capacity = oc.segment_size = 108 * MIB;
    other = created(&oc);
    void *taken = coop_malloc(other, 108 * MIB, 0, 0, NULL);
    assert_non_null(taken);
    coop_status st;
    void *x = coop_malloc(b, 100 * MIB, 0, 0, &st);
    if (!x)
        fail_msg("malloc(100 MiB) with 128 MiB cached: %s", coop_last_error());
    coop_stats s;
    coop_get_stats(b, &s);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.num_ooms, 0);
    assert_true(s.num_unmaps >= 1);
    /* 44 MiB left on the device, nothing cached: refused, in the driver's words */
    assert_null(coop_malloc(b, 140 * MIB, 0, 0, &st));
    assert_int_equal(st, COOP_ERR_NOMEM);
    assert_non_null(strstr(coop_last_error(), "cannot allocate 146800640 bytes"));
    assert_non_null(strstr(coop_last_error(), "the device is full"));
    assert_non_null(strstr(coop_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
    coop_get_stats(b, &s);
    assert_int_equal(s.num_ooms, 1);
    /* a request above the capacity is refused before the arena is asked:
     * the device's refusal above is not its reason */
    assert_null(coop_malloc(b, 257 * MIB, 0, 0, &st));
    assert_int_equal(st, COOP_ERR_NOMEM);
    assert_null(strstr(coop_last_error(), "the device is full"));
    assert_int_equal(coop_free(b, x), COOP_OK);
    assert_int_equal(coop_free(b, g1), COOP_OK);
    assert_int_equal(coop_free(b, g2), COOP_OK);
    assert_int_equal(coop_free(other, taken), COOP_OK);
    coop_pool_destroy(other);
    coop_pool_destroy(b);
}

/* The device's refusal is what a refusal names even where a reclaim's
 * stream question failed: x, free on a held stream, keeps its 64 MiB of
 * pages (never_wait: nothing waits for it), another pool takes the rest of
 * the device, and 100 MiB within the capacity cannot be mapped. The nth
 * event call fails, for each n the request reaches (the question about x's
 * stream among them): the request is refused COOP_ERR_NOMEM, "the device is
 * full", never the question's COOP_ERR_BACKEND (a stream question that
 * failed explains a refusal only where the capacity bound, not the device). */
static void test_device_full_is_reported_over_a_failed_stream_question(void **state)
{
    (void)state;
    mock_set_memory(256 * MIB);
    for (uint64_t nth = 1; nth <= 12; nth++) {
        coop_config config;
        coop_config_default(&config);
        config.backend = COOP_BACKEND_CUDA; /* capacity: the whole device */
        config.never_wait = true;
        coop_pool *b = created(&config);
        coop_stream held = new_stream();
        void *x = coop_malloc(b, 64 * MIB, held, 0, NULL);
        void *g = coop_malloc(b, 2 * MIB, 0, 0, NULL);
        assert_true(x && g);
        assert_int_equal(mock_hold_stream((CUstream)held, true), 0);
        assert_int_equal(coop_free(b, x), COOP_OK); /* cached, tagged the held stream */
        coop_config oc = config;
        oc.use_vmm = false;
        oc.capacity = oc.segment_size = 150 * MIB;
        coop_pool *other = created(&oc);
        void *taken = coop_malloc(other, 150 * MIB, 0, 0, NULL);
        assert_non_null(taken);
        assert_int_equal(coop_inject_fault(b, COOP_FAULT_EVENT, nth), COOP_OK);
        coop_status st;
        assert_null(coop_malloc(b, 100 * MIB, 0, 0, &st));
        if (st != COOP_ERR_NOMEM || !strstr(coop_last_error(), "the device is full"))
            fail_msg("event call %llu failed: %s: %s", (unsigned long long)nth, coop_strerror(st),
                     coop_last_error());
        assert_int_equal(coop_inject_fault(b, 0, 0), COOP_OK);
        assert_int_equal(mock_hold_stream((CUstream)held, false), 0);
        assert_int_equal(coop_free(b, g), COOP_OK);
        assert_int_equal(coop_free(other, taken), COOP_OK);
        coop_pool_destroy(other);
        coop_pool_destroy(b);
        destroy_stream(held);
    }
}

/* A word of host memory the device reads (cuMemHostAlloc, mapped), and a
 * stream made to wait until it is 1 (cuStreamWaitValue32). */
typedef struct host_wait {
    volatile uint32_t *word;
    coop_stream stream;
    int written; /* set by write_word_later just before the word */
} host_wait;

static CUresult host_word_in_context(void *arg)
{
    CUresult (*host_alloc)(void **, size_t, unsigned);
    *(void **)&host_alloc = dlsym(mock_lib, MOCK_SYMBOL(cuMemHostAlloc));
    host_wait *w = arg;
    void *p = NULL;
    CUresult rc = host_alloc(&p, 4096, CU_MEMHOSTALLOC_DEVICEMAP);
    w->word = p;
    if (p)
        *w->word = 0;
    return rc;
}

static CUresult wait_word_in_context(void *arg)
{
    CUresult (*wait_value)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
    *(void **)&wait_value = dlsym(mock_lib, MOCK_SYMBOL(cuStreamWaitValue32));
    host_wait *w = arg;
    return wait_value((CUstream)w->stream, (CUdeviceptr)(uintptr_t)w->word, 1,
                      CU_STREAM_WAIT_VALUE_GEQ);
}

static CUresult free_word_in_context(void *arg)
{
    CUresult (*host_free)(void *);
    *(void **)&host_free = dlsym(mock_lib, MOCK_SYMBOL(cuMemFreeHost));
    return host_free((void *)((host_wait *)arg)->word);
}

static void *write_word_later(void *arg)
{
    host_wait *w = arg;
    nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL);
    __atomic_store_n(&w->written, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(w->word, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Out of memory with two frees pending on one stream: the pool waits for
 * the stream's newest event, which covers both (its work runs in order),
 * not the oldest. Here the older event's work is only held (a running
 * kernel: waiting for it ends it), while the newer one waits behind a
 * cuStreamWaitValue32 for a host word that another thread writes 200 ms
 * later: waiting for the older event alone would release the newer block
 * with its stream's work still queued. The allocation returns only once
 * the word is written. */
static void test_pool_oom_waits_for_the_newest_pending_event(void **state)
{
    (void)state;
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.capacity = 8 * MIB;
    config.check = true;
    coop_pool *pool = created(&config);
    host_wait w = {.stream = new_stream()};
    assert_int_equal(with_primary_context(host_word_in_context, &w), CUDA_SUCCESS);
    void *a = coop_malloc(pool, 4 * MIB, 0, 0, NULL);
    void *b = coop_malloc(pool, 4 * MIB, 0, 0, NULL);
    assert_non_null(b);
    assert_int_equal(coop_record_stream(pool, a, w.stream), COOP_OK);
    assert_int_equal(coop_record_stream(pool, b, w.stream), COOP_OK);
    assert_int_equal(mock_hold_stream((CUstream)w.stream, true), 0);
    assert_int_equal(coop_free(pool, a), COOP_OK); /* its event: held */
    assert_int_equal(with_primary_context(wait_word_in_context, &w), CUDA_SUCCESS);
    assert_int_equal(coop_free(pool, b), COOP_OK); /* its event: behind the wait */
    pthread_t writer;
    assert_int_equal(pthread_create(&writer, NULL, write_word_later, &w), 0);
    coop_status st;
    void *again = coop_malloc(pool, 4 * MIB, 0, 0, &st);
    int written = __atomic_load_n(&w.written, __ATOMIC_SEQ_CST);
    pthread_join(writer, NULL);
    if (!again)
        fail_msg("coop_malloc with both blocks pending: %s", coop_last_error());
    assert_int_equal(written, 1); /* returned only once the newer event could complete */
    assert_int_equal(coop_free(pool, again), COOP_OK);
    coop_pool_destroy(pool);
    destroy_stream(w.stream);
    assert_int_equal(with_primary_context(free_word_in_context, &w), CUDA_SUCCESS);
}

/* An unmap failing midway maps back the pages it had unmapped; when that
 * undo fails too (its cuMemMap, or its cuMemSetAccess), those pages cannot
 * be left as they are: unmapped, or mapped without access, while the pool
 * believes them mapped, it would hand them out and a kernel would fault. The
 * backend unmaps them and says so, the pool marks them unmapped, and the
 * error names both failures. The pool then matches the driver: its check
 * passes, its reserved bytes are what the driver holds, and a block over
 * the range maps what is missing and is accessible. */
static void test_pool_unmap_undo_failure(void **state)
{
    (void)state;
    static const char *const undo_fails[] = {"cuMemMap", "cuMemSetAccess"};
    coop_stream stream = new_stream();
    for (int k = 0; k < 2; k++) {
        coop_config config;
        coop_config_default(&config);
        config.backend = COOP_BACKEND_CUDA;
        config.capacity = 64 * MIB;
        config.check = true;
        coop_pool *pool = created(&config);
        void *p = coop_malloc(pool, 6 * MIB, stream, 0, NULL); /* 3 pages */
        assert_non_null(p);
        assert_int_equal(coop_free(pool, p), COOP_OK);
        /* the third page will not unmap, and the first two not map back */
        mock_fail_nth("cuMemUnmap", 3, CUDA_ERROR_UNKNOWN);
        mock_fail_nth(undo_fails[k], 1, CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_int_equal(coop_empty_cache(pool), COOP_ERR_BACKEND);
        assert_non_null(strstr(coop_last_error(), "cuMemUnmap"));
        assert_non_null(strstr(coop_last_error(), undo_fails[k]));
        assert_int_equal(coop_pool_check(pool), COOP_OK);
        coop_stats s;
        coop_get_stats(pool, &s);
        cuda_mock_counters c = counters();
        assert_int_equal(s.reserved_bytes.current, 2 * MIB);
        assert_int_equal(c.mapped_bytes, 2 * MIB); /* one live handle: the third page's */
        assert_int_equal(c.accessible_bytes, 2 * MIB);
        void *q = coop_malloc(pool, 6 * MIB, stream, 0, NULL);
        assert_ptr_equal(q, p);
        launch_work((uintptr_t)q, 6 * MIB, stream); /* fails on an inaccessible page */
        assert_int_equal(coop_free(pool, q), COOP_OK);
        assert_int_equal(coop_empty_cache(pool), COOP_OK);
        assert_int_equal(counters().mapped_bytes, 0);
        coop_pool_destroy(pool);
    }
    destroy_stream(stream);
}

/* A pool page larger than the device's granule is one physical allocation:
 * the driver's per-allocation costs (on an H200, cuMemSetAccess, cuMemUnmap
 * and cuMemRelease cost 10 to 26 us per handle; 34.8 ms for 1 GiB of 2 MiB
 * handles, 0.4 ms as one) fall with the page size. 20 MiB are 10 handles of
 * the 2 MiB granule, 3 of an 8 MiB page; all are released by empty_cache. */
static void test_pool_page_is_one_handle(void **state)
{
    (void)state;
    const uint64_t pages[] = {2 * MIB, 8 * MIB};
    const long handles[] = {10, 3};
    for (int i = 0; i < 2; i++) {
        coop_config config;
        coop_config_default(&config);
        config.backend = COOP_BACKEND_CUDA;
        config.capacity = 64 * MIB;
        config.page_size = pages[i];
        config.check = true;
        coop_pool *pool = created(&config);
        void *p = coop_malloc(pool, 20 * MIB, 0, 0, NULL);
        assert_non_null(p);
        cuda_mock_counters c = counters();
        assert_int_equal(c.live_handles, handles[i]);
        assert_int_equal(c.mapped_bytes, handles[i] * (long)pages[i]);
        assert_int_equal(c.accessible_bytes, c.mapped_bytes);
        assert_int_equal(coop_free(pool, p), COOP_OK);
        assert_int_equal(coop_empty_cache(pool), COOP_OK);
        c = counters();
        assert_int_equal(c.live_handles, 0);
        assert_int_equal(c.mapped_bytes, 0);
        coop_pool_destroy(pool);
    }
}

/* With VMM the capacity cannot grow past the range reserved at creation
 * (va_size, 4 x the creation capacity by default): coop_set_capacity
 * refuses it by name, as coop_pool_create refuses a va_size below the
 * capacity. It used to accept it, and allocations within the new capacity
 * then failed with an out-of-memory message that blamed nothing. The host
 * backend cannot show it: its device is the creation capacity. */
static void test_set_capacity_above_va_size(void **state)
{
    (void)state;
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.capacity = 16 * MIB; /* of the mock's 1 GiB device */
    config.check = true;
    coop_pool *pool = created(&config);
    coop_config resolved;
    coop_pool_config(pool, &resolved);
    assert_int_equal(resolved.va_size, 64 * MIB);
    assert_int_equal(coop_set_capacity(pool, 256 * MIB), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "config.va_size 67108864"));
    assert_non_null(strstr(coop_last_error(), "capacity stays 16777216"));
    coop_pool_config(pool, &resolved);
    assert_int_equal(resolved.capacity, 16 * MIB);
    assert_int_equal(coop_set_capacity(pool, 64 * MIB), COOP_OK); /* up to va_size */
    void *p = coop_malloc(pool, 60 * MIB, 0, 0, NULL);
    assert_non_null(p);
    assert_int_equal(coop_free(pool, p), COOP_OK);
    coop_pool_destroy(pool);
    /* without VMM there is no reservation to outgrow */
    config.use_vmm = false;
    pool = created(&config);
    assert_int_equal(coop_set_capacity(pool, 256 * MIB), COOP_OK);
    coop_pool_destroy(pool);
}

/* Segments (cuMemAlloc) need no allocation granularity: a failed
 * cuMemGetAllocationGranularity refuses a VMM backend, whose pages must be
 * granularity multiples, with the driver's error, but not a segments one,
 * which keeps the 2 MiB default page. A segments pool takes any power-of-two
 * page of 512 bytes or more, the device's granularity or not (the driver
 * fault sweep's 64 KiB page on a device whose query failed, or a device
 * without VMM, which is never asked). */
static void test_segments_need_no_granularity(void **state)
{
    (void)state;
    coop_backend *be = NULL;
    mock_set_granularity(64 * 1024);
    mock_fail_nth("cuMemGetAllocationGranularity", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(coop_backend_cuda_create(0, true, &be), COOP_ERR_BACKEND);
    assert_null(be);
    assert_non_null(strstr(coop_last_error(), "cuMemGetAllocationGranularity"));
    mock_fail_nth("cuMemGetAllocationGranularity", 1, CUDA_ERROR_UNKNOWN);
    assert_int_equal(coop_backend_cuda_create(0, false, &be), COOP_OK);
    assert_false(be->has_vmm);
    assert_int_equal(be->page_size, 2 * MIB);
    coop_backend_destroy(be);

    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.capacity = 16 * MIB;
    config.segment_size = 4 * MIB;
    config.use_vmm = false;
    config.check = true;
    for (int k = 0; k < 2; k++) {
        if (k == 0) /* the query fails */
            mock_fail_nth("cuMemGetAllocationGranularity", 1, CUDA_ERROR_UNKNOWN);
        else /* a device without VMM: its granularity is not asked */
            setenv("MOCK_CUDA_NO_VMM", "1", 1);
        for (uint64_t page = 512; page <= 4 * MIB; page *= 8) {
            config.page_size = page;
            coop_pool *pool = created(&config);
            coop_config resolved;
            coop_pool_config(pool, &resolved);
            assert_false(resolved.use_vmm);
            assert_int_equal(resolved.page_size, page);
            void *p = coop_malloc(pool, 3 * MIB, 0, 0, NULL);
            assert_non_null(p);
            assert_int_equal(coop_free(pool, p), COOP_OK);
            coop_pool_destroy(pool);
        }
        /* still a power of two */
        config.page_size = 96 * 1024;
        coop_pool *pool = NULL;
        assert_int_equal(coop_pool_create(&config, &pool), COOP_ERR_INVALID);
        assert_non_null(strstr(coop_last_error(), "page_size 98304 must be a power of two"));
    }
    unsetenv("MOCK_CUDA_NO_VMM");

    /* with VMM the page is still a multiple of the device's granularity */
    config.use_vmm = true;
    config.page_size = 32 * 1024;
    coop_pool *pool = NULL;
    assert_int_equal(coop_pool_create(&config, &pool), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "multiple of the cuda backend's 65536-byte pages"));
}

/* An answer that is no page size (0, or not a power of two) refuses a VMM
 * backend, whose pages must be granularity multiples, but not a segments
 * one, which keeps the 2 MiB default page as when the query fails. */
static void test_segments_ignore_a_bad_granularity(void **state)
{
    (void)state;
    static const size_t bad[] = {0, 3 * MIB};
    for (int k = 0; k < 2; k++) {
        coop_backend *be = NULL;
        mock_set_granularity(bad[k]);
        assert_int_equal(coop_backend_cuda_create(0, true, &be), COOP_ERR_BACKEND);
        assert_null(be);
        assert_non_null(strstr(coop_last_error(), "not a power of two"));
        if (coop_backend_cuda_create(0, false, &be) != COOP_OK) {
            fail_msg("granularity %zu refuses a segments backend: %s", bad[k], coop_last_error());
            return;
        }
        assert_false(be->has_vmm);
        assert_int_equal(be->page_size, 2 * MIB);
        coop_backend_destroy(be);

        coop_config config;
        coop_config_default(&config);
        config.backend = COOP_BACKEND_CUDA;
        config.capacity = 16 * MIB;
        config.use_vmm = false;
        config.page_size = 64 * 1024;
        coop_pool *pool = created(&config);
        void *p = coop_malloc(pool, 3 * MIB, 0, 0, NULL);
        assert_non_null(p);
        assert_int_equal(coop_free(pool, p), COOP_OK);
        assert_int_equal(coop_pool_check(pool), COOP_OK);
        coop_pool_destroy(pool);
    }
}

/* Without a driver the pool fails cleanly too. */
static void test_pool_without_driver(void **state)
{
    (void)state;
    setenv("COOP_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    coop_pool *pool = (coop_pool *)0x1;
    assert_int_equal(coop_pool_create(&config, &pool), COOP_ERR_NO_DRIVER);
    assert_null(pool);
    assert_non_null(strstr(coop_last_error(), "no CUDA driver"));
}

/* A pool on device 1 used from a thread where device 0's primary context
 * is current (as PyTorch leaves it after work on device 0): its pages
 * (cuMemCreate's location) and its segments (cuMemAlloc, made in the
 * current context) are device 1's, none device 0's, and the caller's
 * context is current again after each call. */
static CUresult pools_on_device_one(void *arg)
{
    (void)arg;
    long (*device_bytes)(int);
    *(void **)&device_bytes = dlsym(mock_lib, "mock_cuda_device_bytes");
    assert_non_null(device_bytes);
    CUresult (*get_current)(CUcontext *);
    *(void **)&get_current = dlsym(mock_lib, "cuCtxGetCurrent");
    CUcontext before = NULL, after = NULL;
    assert_int_equal(get_current(&before), CUDA_SUCCESS);
    for (int vmm = 1; vmm >= 0; vmm--) {
        coop_config config;
        coop_config_default(&config);
        config.backend = COOP_BACKEND_CUDA;
        config.device = 1;
        config.use_vmm = vmm;
        config.capacity = 64 * MIB;
        coop_pool *pool = created(&config);
        void *p = coop_malloc(pool, 4 * MIB, 0, 0, NULL);
        assert_non_null(p);
        assert_true(device_bytes(1) >= 4 * (long)MIB);
        assert_int_equal(device_bytes(0), 0);
        assert_int_equal(get_current(&after), CUDA_SUCCESS);
        assert_ptr_equal(after, before);
        assert_int_equal(coop_free(pool, p), COOP_OK);
        coop_pool_destroy(pool);
        assert_int_equal(device_bytes(1), 0);
    }
    return CUDA_SUCCESS;
}

static void test_pool_on_the_second_device(void **state)
{
    (void)state;
    assert_int_equal(with_primary_context(pools_on_device_one, NULL), CUDA_SUCCESS);
}

/* A pool whose address range the driver refuses (cuMemAddressReserve) says
 * so with the driver's words: the call, the error's name and description,
 * under the pool's own "cannot reserve" (it used to keep only the status's
 * generic text). Nothing is left in the driver. */
static void test_pool_reserve_failure_names_the_call(void **state)
{
    (void)state;
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.capacity = 16 * MIB;
    mock_fail_nth("cuMemAddressReserve", 1, CUDA_ERROR_OUT_OF_MEMORY);
    coop_pool *pool = (coop_pool *)0x1;
    assert_int_equal(coop_pool_create(&config, &pool), COOP_ERR_NOMEM);
    assert_null(pool);
    const char *msg = coop_last_error();
    assert_non_null(strstr(msg, "cannot reserve 67108864 bytes of device address space"));
    assert_non_null(strstr(msg, "cuMemAddressReserve failed with CUDA_ERROR_OUT_OF_MEMORY"));
    assert_non_null(strstr(msg, "out of memory"));
    mock_fail_nth("cuMemAddressReserve", 1, CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(coop_pool_create(&config, &pool), COOP_ERR_BACKEND);
    assert_non_null(strstr(coop_last_error(), "cuMemAddressReserve failed with"));
    assert_non_null(strstr(coop_last_error(), "(801: "));
}

int main(void)
{
    const char *builddir = getenv("COOP_TEST_BUILDDIR");
    snprintf(mock_path, sizeof mock_path, "%s/tests/.libs/libmockcuda.so",
             builddir ? builddir : COOP_TEST_BUILDDIR);
    mock_lib = dlopen(mock_path, RTLD_NOW | RTLD_LOCAL);
    if (!mock_lib) {
        fprintf(stderr, "backend_cuda_mock_test: cannot load the mock driver: %s\n", dlerror());
        return 1;
    }
    *(void **)&mock_counters_fn = dlsym(mock_lib, "mock_cuda_counters");
    *(void **)&mock_fail_nth = dlsym(mock_lib, "mock_cuda_fail_nth");
    *(void **)&mock_fail_from = dlsym(mock_lib, "mock_cuda_fail_from");
    *(void **)&mock_hold_streams = dlsym(mock_lib, "mock_cuda_hold_streams");
    *(void **)&mock_set_memory = dlsym(mock_lib, "mock_cuda_set_memory");
    *(void **)&mock_hold_stream = dlsym(mock_lib, "mock_cuda_hold_stream");
    *(void **)&mock_set_granularity = dlsym(mock_lib, "mock_cuda_set_granularity");
    *(void **)&mock_take_unsafe = dlsym(mock_lib, "mock_cuda_take_unsafe_releases");
    *(void **)&mock_fail_call = dlsym(mock_lib, "mock_cuda_fail_call");
    *(void **)&mock_calls = dlsym(mock_lib, "mock_cuda_calls");
    if (!mock_counters_fn || !mock_fail_nth || !mock_hold_streams || !mock_set_memory ||
        !mock_hold_stream || !mock_set_granularity || !mock_fail_call || !mock_calls ||
        !mock_fail_from) {
        fprintf(stderr, "backend_cuda_mock_test: mock driver lacks its controls\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_driver_fails_cleanly, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_empty_driver_variable_means_the_default, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_no_device, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_bad_device, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_device_memory_is_the_total, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_pages_unmap_alone, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_bad_ranges_leave_state, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_driver_failure_midway, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_unmap_failure_leaves_range_mapped, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_unmap_failure_remaps_without_new_memory, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_unmap_undo_failure, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_unmap_undo_leaves_strays_mapped, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_map_rollback_failure, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_pool_unmap_undo_failure, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_pool_oom_waits_for_the_newest_pending_event, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_release_failure_keeps_handle, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_events, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_release_unmaps_what_is_still_mapped, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_vmm_map_rollback_release_failure, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_destroy_event_failure_is_reported, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_event_destroy_without_context, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_segments_without_vmm, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_segments_misaligned_free_failure, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_caller_context_preserved, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_failed_pop_is_popped_later, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_popped_context_note_is_dropped, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_segments_need_no_granularity, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_segments_ignore_a_bad_granularity, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_destroy_releases_everything, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_destroy_unmap_failure, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_destroy_sync_failure, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_destroy_reports_a_segment_left, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_destroy_names_the_first_unused_segment_failure,
                                        use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_destroy_sync_failure_with_a_stray, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_destroy_without_context, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_pool_sequence_vmm, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_pool_sequence_segments, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_pool_without_driver, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_pool_on_the_second_device, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_pool_reserve_failure_names_the_call, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_set_capacity_above_va_size, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_pool_page_is_one_handle, use_mock, check_clean),
        cmocka_unit_test_setup_teardown(test_capacity_of_a_device_with_a_partial_page, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_pool_device_full_releases_cache, use_mock,
                                        check_clean),
        cmocka_unit_test_setup_teardown(test_device_full_is_reported_over_a_failed_stream_question,
                                        use_mock, check_clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
