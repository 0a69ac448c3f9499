/*
 * For test programs that run allocator tests on the CUDA backend over the
 * mock driver (tests/mock_cuda_driver.c, libmockcuda.so): loads the mock,
 * points the backend at it (COOP_CUDA_DRIVER), creates streams in it, and
 * checks that the driver is left clean; the driver side of cuda_stream_map.h.
 * Include after <cmocka.h>, <cuda.h> and "coop.h".
 */
#ifndef COOP_TEST_CUDA_MOCK_H
#define COOP_TEST_CUDA_MOCK_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_mock_counters.h"

static struct {
    char path[4096];
    void *lib;
    void (*counters)(cuda_mock_counters *);
    void (*fail_nth)(const char *, int, int);
    void (*fail_call)(long, int);
    long (*calls)(void);
    int (*hold_stream)(CUstream, bool);
    int (*launch)(CUdeviceptr, size_t, CUstream);
    void (*set_granularity)(size_t);
    CUresult (*init)(unsigned);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*release)(CUdevice);
    CUresult (*push)(CUcontext);
    CUresult (*pop)(CUcontext *);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_destroy)(CUstream);
} cuda_mock;

#define CUDA_MOCK_STRINGIFY(x) #x
/* cuda.h maps some entry points to versioned names: expand, then quote */
#define CUDA_MOCK_SYMBOL(x) CUDA_MOCK_STRINGIFY(x)

/* Loads the mock from the build tree and makes the backend use it. Exits
 * with status 1 if it cannot (a build problem, not a skip). */
static inline void cuda_mock_load(const char *program, const char *default_builddir)
{
    const char *builddir = getenv("COOP_TEST_BUILDDIR");
    snprintf(cuda_mock.path, sizeof cuda_mock.path, "%s/tests/.libs/libmockcuda.so",
             builddir ? builddir : default_builddir);
    cuda_mock.lib = dlopen(cuda_mock.path, RTLD_NOW | RTLD_LOCAL);
    if (!cuda_mock.lib) {
        fprintf(stderr, "%s: cannot load the mock driver: %s\n", program, dlerror());
        exit(1);
    }
    setenv("COOP_CUDA_DRIVER", cuda_mock.path, 1);
    static const struct {
        const char *symbol;
        size_t offset;
    } syms[] = {
        {"mock_cuda_counters", offsetof(__typeof__(cuda_mock), counters)},
        {"mock_cuda_fail_nth", offsetof(__typeof__(cuda_mock), fail_nth)},
        {"mock_cuda_fail_call", offsetof(__typeof__(cuda_mock), fail_call)},
        {"mock_cuda_calls", offsetof(__typeof__(cuda_mock), calls)},
        {"mock_cuda_hold_stream", offsetof(__typeof__(cuda_mock), hold_stream)},
        {"mock_cuda_launch", offsetof(__typeof__(cuda_mock), launch)},
        {"mock_cuda_set_granularity", offsetof(__typeof__(cuda_mock), set_granularity)},
        {"cuInit", offsetof(__typeof__(cuda_mock), init)},
        {"cuDevicePrimaryCtxRetain", offsetof(__typeof__(cuda_mock), retain)},
        {CUDA_MOCK_SYMBOL(cuDevicePrimaryCtxRelease), offsetof(__typeof__(cuda_mock), release)},
        {CUDA_MOCK_SYMBOL(cuCtxPushCurrent), offsetof(__typeof__(cuda_mock), push)},
        {CUDA_MOCK_SYMBOL(cuCtxPopCurrent), offsetof(__typeof__(cuda_mock), pop)},
        {"cuStreamCreate", offsetof(__typeof__(cuda_mock), stream_create)},
        {CUDA_MOCK_SYMBOL(cuStreamDestroy), offsetof(__typeof__(cuda_mock), stream_destroy)},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *sym = dlsym(cuda_mock.lib, syms[i].symbol);
        if (!sym) {
            fprintf(stderr, "%s: the mock driver lacks %s\n", program, syms[i].symbol);
            exit(1);
        }
        memcpy((char *)&cuda_mock + syms[i].offset, &sym, sizeof sym);
    }
}

static inline cuda_mock_counters cuda_mock_now(void)
{
    cuda_mock_counters c;
    cuda_mock.counters(&c);
    return c;
}

/* Creates (or, with *stream set, destroys) a stream with device 0's primary
 * context current, as an application does. */
static inline void cuda_mock_stream(CUstream *stream, bool create)
{
    CUcontext ctx = NULL;
    assert_int_equal(cuda_mock.init(0), CUDA_SUCCESS);
    assert_int_equal(cuda_mock.retain(&ctx, 0), CUDA_SUCCESS);
    assert_int_equal(cuda_mock.push(ctx), CUDA_SUCCESS);
    if (create)
        assert_int_equal(cuda_mock.stream_create(stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    else
        assert_int_equal(cuda_mock.stream_destroy(*stream), CUDA_SUCCESS);
    assert_int_equal(cuda_mock.pop(&ctx), CUDA_SUCCESS);
    assert_int_equal(cuda_mock.release(0), CUDA_SUCCESS);
}

/* Nothing the backend made is left in the driver, nothing was unmapped or
 * freed under queued work, no call ran without a context. Streams are the
 * test's own and not counted. */
static inline void cuda_mock_assert_clean(const char *when)
{
    cuda_mock_counters c = cuda_mock_now();
    if (c.mapped_bytes || c.live_handles || c.live_events || c.live_segments ||
        c.live_reservations || c.retained || c.accessible_bytes || c.unsafe_releases ||
        c.no_context || c.deadlocks)
        fail_msg("%s: the mock driver is not clean: %ld bytes mapped, %ld handles, %ld events, "
                 "%ld segments, %ld reservations, %ld context retains, %ld accessible bytes, "
                 "%ld unsafe releases, %ld calls without a context, %ld deadlocks",
                 when, c.mapped_bytes, c.live_handles, c.live_events, c.live_segments,
                 c.live_reservations, c.retained, c.accessible_bytes, c.unsafe_releases,
                 c.no_context, c.deadlocks);
}

/* ---- the driver side of cuda_stream_map.h, on the mock ---- */

#define CUDA_MAP_STREAMS 8
static coop_stream cuda_map_streams[CUDA_MAP_STREAMS];

static inline void cuda_mock_streams_create(void)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++) {
        CUstream s = NULL;
        cuda_mock_stream(&s, true);
        cuda_map_streams[i] = (coop_stream)(uintptr_t)s;
    }
}

static inline void cuda_mock_streams_destroy(void)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++) {
        CUstream s = (CUstream)cuda_map_streams[i];
        cuda_mock_stream(&s, false);
    }
}

/* The mock completes an event as soon as its stream is not held. */
static inline coop_status cuda_map_hold(coop_stream stream, bool hold)
{
    return cuda_mock.hold_stream((CUstream)stream, hold) == 0 ? COOP_OK : COOP_ERR_INVALID;
}

static inline void cuda_map_after_free(void) {}

/* A kernel using [ptr, +size) on the stream, unfinished in the mock until
 * something sees the stream finish it: unmapping or freeing its memory
 * before then is reported as unsafe. */
static inline void cuda_map_use(void *ptr, size_t size, coop_stream stream)
{
    if (cuda_mock.launch((CUdeviceptr)(uintptr_t)ptr, size, (CUstream)stream) != 0)
        fail_msg("a kernel on stream %#jx over [%p, +%zu) would fault: not mapped and accessible",
                 (uintmax_t)stream, ptr, size);
}

/* The mock's granularity is set to the programs' pages. */
static inline void cuda_map_before_create(coop_config *config)
{
    (void)config;
}

/* A pool created runs on the CUDA backend: it holds the primary context. */
static inline void cuda_map_after_create(coop_status st)
{
    if (st == COOP_OK && cuda_mock_now().retained != 1)
        fail_msg("the pool does not hold the mock driver's primary context");
}

/* The pool left the driver clean. */
static inline void cuda_map_after_destroy(void)
{
    cuda_mock_assert_clean("after coop_pool_destroy");
}

#endif
