/*
 * The real driver's side of the CUDA tests (tests/backend_cuda_test.c,
 * tests/backend_cuda_stress_test.c, tests/backend_cuda_fault_test.c): the
 * driver calls the tests make themselves (streams, memsets, host-mapped
 * words, free memory) loaded with dlopen as the backend loads its own, with
 * prototypes written out so that the tests build without cuda.h; device 0's
 * primary context; and the driver side of tests/cuda_stream_map.h, so that a
 * host-backend test program's source runs on the device.
 *
 * The library is libcuda.so.1, or the one COOP_CUDA_DRIVER names (the mock,
 * tests/libmockcuda.so, in tests/cuda_tests_on_mock.sh). The names are the
 * versioned ones cuda.h maps them to.
 *
 * Every test-side driver call is made with the primary context pushed and
 * popped around it, so that it works from any thread and leaves a thread
 * without a current context as it found it (the stress test's threads have
 * none: the backend must make its own current).
 *
 * The includer defines CUDA_MAP_STREAMS (the streams its program uses,
 * default 4) before including this, after <cmocka.h> and "coop.h".
 */
#ifndef COOP_TEST_CUDA_DEVICE_H
#define COOP_TEST_CUDA_DEVICE_H

#include <dlfcn.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The driver API types the tests need, as cuda.h defines them (64-bit). */
typedef int drv_result;             /* CUresult; 0 is CUDA_SUCCESS */
typedef int drv_device;             /* CUdevice */
typedef void *drv_context;          /* CUcontext */
typedef void *drv_stream;           /* CUstream */
typedef unsigned long long drv_ptr; /* CUdeviceptr */
#define DRV_STREAM_NON_BLOCKING 0x1u
#define DRV_NOT_READY 600               /* CUDA_ERROR_NOT_READY */
#define DRV_MEMHOSTALLOC_PORTABLE 0x1u  /* CU_MEMHOSTALLOC_PORTABLE */
#define DRV_MEMHOSTALLOC_DEVICEMAP 0x2u /* CU_MEMHOSTALLOC_DEVICEMAP */
#define DRV_STREAM_WAIT_VALUE_GEQ 0x0u  /* CU_STREAM_WAIT_VALUE_GEQ */

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
    drv_result (*stream_query)(drv_stream);
    drv_result (*host_alloc)(void **, size_t, unsigned);
    drv_result (*host_device_pointer)(drv_ptr *, void *, unsigned);
    drv_result (*host_free)(void *);
    drv_result (*wait_value32)(drv_stream, drv_ptr, uint32_t, unsigned);
    drv_result (*mem_get_info)(size_t *, size_t *);
    drv_result (*mem_alloc)(drv_ptr *, size_t);
    drv_result (*mem_free)(drv_ptr);
} drv;

static drv_device device;
static drv_context context;

/* Loads the entry points; NULL on success, else what is missing. */
static inline const char *load_driver(void)
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
        {"cuStreamQuery", &drv.stream_query},
        {"cuMemHostAlloc", &drv.host_alloc},
        {"cuMemHostGetDevicePointer_v2", &drv.host_device_pointer},
        {"cuMemFreeHost", &drv.host_free},
        {"cuStreamWaitValue32_v2", &drv.wait_value32},
        {"cuMemGetInfo_v2", &drv.mem_get_info},
        {"cuMemAlloc_v2", &drv.mem_alloc},
        {"cuMemFree_v2", &drv.mem_free},
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

/* Device 0's page (allocation granularity), read from a probe pool. */
static uint64_t device_page;

/* The test-side calls run with the primary context pushed, from any thread. */
static inline void drv_enter(void)
{
    if (drv.push(context) != 0)
        fail_msg("cuCtxPushCurrent of device 0's primary context failed");
}

static inline void drv_leave(void)
{
    drv_context popped;
    drv.pop(&popped);
}

/* Free device memory as the driver reports it (cuMemGetInfo). */
static inline uint64_t device_free_bytes(void)
{
    size_t free_bytes = 0, total = 0;
    drv_enter();
    drv_result rc = drv.mem_get_info(&free_bytes, &total);
    drv_leave();
    if (rc != 0)
        fail_msg("cuMemGetInfo failed with CUresult %d", rc);
    return free_bytes;
}

/* 0 once a CUDA pool can be made on device 0 and the driver's entry points
 * are loaded, with the primary context current on this thread; 77 (reason
 * printed) without a driver or device; 1 on any other failure. */
static inline int cuda_device_open(const char *program)
{
    /* more hardware queues than the default 8, so that held streams are not
     * serialised with the others (read by cuInit) */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.capacity = 64 * 1024 * 1024;
    coop_pool *probe = NULL;
    coop_status st = coop_pool_create(&config, &probe);
    if (st == COOP_ERR_NO_DRIVER || st == COOP_ERR_UNSUPPORTED) {
        printf("SKIP %s: %s\n", program, coop_last_error());
        return 77;
    }
    if (st != COOP_OK) {
        fprintf(stderr, "%s: cannot create a CUDA pool: %s\n", program, coop_last_error());
        return 1;
    }
    coop_config resolved;
    coop_pool_config(probe, &resolved);
    device_page = resolved.page_size;
    coop_pool_destroy(probe);
    const char *missing = load_driver();
    if (missing) {
        fprintf(stderr, "%s: the driver lacks %s\n", program, missing);
        return 1;
    }
    /* the tests' own stream and memory calls run in device 0's primary
     * context, as a CUDA runtime program's would */
    if (drv.init(0) != 0 || drv.device_get(&device, 0) != 0 ||
        drv.primary_retain(&context, device) != 0 || drv.push(context) != 0) {
        fprintf(stderr, "%s: cannot make device 0's primary context current\n", program);
        return 1;
    }
    return 0;
}

static inline void cuda_device_close(void)
{
    drv_leave();
    drv.primary_release(device);
    dlclose(drv.lib);
}

/* ---- the driver side of cuda_stream_map.h on the device ---- */

#ifndef CUDA_MAP_STREAMS
#define CUDA_MAP_STREAMS 4 /* random_model_test.c's NUM_STREAMS */
#endif
#define DEVICE_WAIT_SECONDS 20
static coop_stream cuda_map_streams[CUDA_MAP_STREAMS];
static volatile uint32_t *hold_words; /* host memory the device can read */
static drv_ptr hold_words_device;
static uint32_t hold_generation[CUDA_MAP_STREAMS];
static bool stream_held[CUDA_MAP_STREAMS];
/* Whether the pool last created may see held streams: with VMM only. A
 * hold ends when this thread writes its word; with cuMemAlloc segments the
 * pool's cuMemFree may wait for the whole device, as cudaFree is documented
 * to, and so for the held stream forever. On a segments pool a hold is
 * therefore not made: the stream runs on, and a free pending on it
 * completes when the stream's work does. */
static bool holds_allowed = true;

/* Waits until the stream has done all its work, or fails the test after
 * DEVICE_WAIT_SECONDS (a hold that never ends would otherwise hang it). */
static inline void wait_stream_idle(coop_stream stream)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    drv_enter();
    for (;;) {
        drv_result rc = drv.stream_query((drv_stream)stream);
        if (rc == 0)
            break;
        if (rc != DRV_NOT_READY)
            fail_msg("cuStreamQuery failed with CUresult %d", rc);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > DEVICE_WAIT_SECONDS)
            fail_msg("stream %#jx still busy after %d s (a hold not released? the device "
                     "serialised streams behind a held one?)",
                     (uintmax_t)stream, DEVICE_WAIT_SECONDS);
        sched_yield();
    }
    drv_leave();
}

static inline int stream_slot(coop_stream stream)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++)
        if (cuda_map_streams[i] == stream)
            return i;
    fail_msg("stream %#jx is not one of the test's", (uintmax_t)stream);
    return -1;
}

/* A hold: the stream waits on the device until its word reaches the hold's
 * generation; the release writes it and waits for the stream to drain. */
static inline coop_status cuda_map_hold(coop_stream stream, bool hold)
{
    int i = stream_slot(stream);
    if (hold && !stream_held[i] && holds_allowed) {
        hold_generation[i]++;
        drv_enter();
        drv_result rc = drv.wait_value32((drv_stream)stream, hold_words_device + 4 * (unsigned)i,
                                         hold_generation[i], DRV_STREAM_WAIT_VALUE_GEQ);
        drv_leave();
        if (rc != 0)
            fail_msg("cuStreamWaitValue32 failed with CUresult %d", rc);
        stream_held[i] = true;
    } else if (!hold && stream_held[i]) {
        __atomic_store_n(&hold_words[i], hold_generation[i], __ATOMIC_SEQ_CST);
        stream_held[i] = false;
        wait_stream_idle(stream);
    }
    return COOP_OK;
}

static inline void cuda_map_after_free(void)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++)
        if (!stream_held[i])
            wait_stream_idle(cuda_map_streams[i]);
}

/* A kernel using the memory: a memset of it on the stream (a device faults
 * on pages the pool unmapped too early, the mock reports them). On a stream
 * that is not held it is waited for, as the model takes such a stream to be
 * idle; on a held one it runs after the hold. */
static inline void cuda_map_use(void *ptr, size_t size, coop_stream stream)
{
    drv_enter();
    DRV_OK(drv.memset_async((drv_ptr)(uintptr_t)ptr, 0x3c, size, (drv_stream)stream));
    drv_leave();
    if (!stream_held[stream_slot(stream)])
        wait_stream_idle(stream);
}

/* The host programs' pages (64 KiB) are below a device's granularity (2 MiB
 * on an H100 / H200), which a pool refuses: they get the device's. */
static inline void cuda_map_before_create(coop_config *config)
{
    if (device_page && config->page_size % device_page)
        config->page_size = 0;
    holds_allowed = config->use_vmm;
}

static inline void cuda_map_after_create(coop_status st)
{
    (void)st;
}

static inline void cuda_map_after_destroy(void) {}

/* The streams and hold words of cuda_stream_map.h; false (with the reason
 * printed, after "SKIP what: ") when the device cannot hold a stream on a
 * host-written word. */
static inline bool cuda_map_streams_setup(const char *what)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++) {
        drv_stream s = NULL;
        if (drv.stream_create(&s, DRV_STREAM_NON_BLOCKING) != 0) {
            printf("SKIP %s: cuStreamCreate failed\n", what);
            return false;
        }
        cuda_map_streams[i] = (coop_stream)(uintptr_t)s;
    }
    void *words = NULL;
    if (drv.host_alloc(&words, 4096, DRV_MEMHOSTALLOC_PORTABLE | DRV_MEMHOSTALLOC_DEVICEMAP) != 0 ||
        drv.host_device_pointer(&hold_words_device, words, 0) != 0) {
        printf("SKIP %s: no host memory mapped for the device\n", what);
        return false;
    }
    hold_words = words;
    memset(words, 0, 4096);
    /* one hold and release, to find out whether the device supports it */
    drv_result rc = drv.wait_value32((drv_stream)cuda_map_streams[0], hold_words_device, 1,
                                     DRV_STREAM_WAIT_VALUE_GEQ);
    if (rc != 0) {
        printf("SKIP %s: cuStreamWaitValue32 failed with CUresult %d\n", what, rc);
        return false;
    }
    __atomic_store_n(&hold_words[0], 1, __ATOMIC_SEQ_CST);
    hold_generation[0] = 1;
    for (int i = 0; i < CUDA_MAP_STREAMS; i++)
        if (drv.stream_synchronize((drv_stream)cuda_map_streams[i]) != 0) {
            printf("SKIP %s: cuStreamSynchronize failed\n", what);
            return false;
        }
    return true;
}

static inline void cuda_map_streams_teardown(void)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++)
        if (cuda_map_streams[i])
            drv.stream_destroy((drv_stream)cuda_map_streams[i]);
    if (hold_words)
        drv.host_free((void *)hold_words);
}

#endif
