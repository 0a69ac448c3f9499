/*
 * The allocator on the real CUDA backend (libcuda.so.1, or the library
 * COOP_CUDA_DRIVER names, and a device), with virtual memory management and
 * with cuMemAlloc segments:
 *   - the pool sequence (tests/pool_sequence.h) with a second, created stream;
 *   - a cross-stream free: a block written by an asynchronous memset on
 *     another stream, recorded there and freed, is read back (the mapping is
 *     readable and writable by the device), and is reused only once the
 *     stream's work has completed;
 *   - out of memory with the only block pending on a stream blocked (by
 *     cuStreamWaitValue32) until another thread writes a host word 200 ms
 *     later: the pool waits for the stream's event and reuses the block, or
 *     with never_wait reports out of memory at once;
 *   - the randomized model test (tests/random_model_test.c, compiled again
 *     here through tests/cuda_stream_map.h), VMM and segments, 2 MiB pages,
 *     10^5 operations unless COOP_TEST_OPS says otherwise, without holds
 *     (RANDOM_MODEL_HOLDS below). Its streams are created streams, and after
 *     every free they are waited for, so that events complete when the model
 *     says.
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
#include <time.h>
#include <sched.h>
#include <pthread.h>

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
        {"cuStreamQuery", &drv.stream_query},
        {"cuMemHostAlloc", &drv.host_alloc},
        {"cuMemHostGetDevicePointer_v2", &drv.host_device_pointer},
        {"cuMemFreeHost", &drv.host_free},
        {"cuStreamWaitValue32_v2", &drv.wait_value32},
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

/* A checked pool on device 0. */
static coop_pool *create_pool_with(uint64_t capacity, bool use_vmm, bool never_wait)
{
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_CUDA;
    config.device = 0;
    config.capacity = capacity;
    config.use_vmm = use_vmm;
    config.never_wait = never_wait;
    config.check = true;
    coop_pool *pool = NULL;
    if (coop_pool_create(&config, &pool) != COOP_OK)
        fail_msg("coop_pool_create (vmm=%d): %s", use_vmm, coop_last_error());
    return pool;
}

/* A word of host memory the device reads (cuStreamWaitValue32), set to 0. */
typedef struct host_word {
    volatile uint32_t *word;
    drv_ptr device;
} host_word;

static host_word host_word_alloc(void)
{
    void *words = NULL;
    host_word w;
    DRV_OK(drv.host_alloc(&words, 4096, DRV_MEMHOSTALLOC_PORTABLE | DRV_MEMHOSTALLOC_DEVICEMAP));
    DRV_OK(drv.host_device_pointer(&w.device, words, 0));
    w.word = words;
    *w.word = 0;
    return w;
}

static coop_pool *create_pool(bool use_vmm)
{
    coop_pool *pool = create_pool_with(256 * SEQ_MIB, use_vmm, false);
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

/* A host word written by another thread after a delay. */
typedef struct late_write {
    volatile uint32_t *word;
    int written; /* set just before the word */
    long delay_ms;
} late_write;

static void *write_later(void *arg)
{
    late_write *w = arg;
    nanosleep(&(struct timespec){.tv_sec = w->delay_ms / 1000,
                                 .tv_nsec = w->delay_ms % 1000 * 1000 * 1000},
              NULL);
    __atomic_store_n(&w->written, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(w->word, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Out of memory, the pool's only block pending on a stream that waits for a
 * host word: with waiting (the default) the allocation returns that block
 * once another thread has written the word; with never_wait it fails at
 * once, and succeeds after the stream is done. */
static void run_oom_wait(bool never_wait)
{
    const size_t size = 8 * SEQ_MIB;
    coop_pool *pool = create_pool_with(size, true, never_wait);
    host_word hw = host_word_alloc();
    volatile uint32_t *word = hw.word;
    drv_stream side = NULL;
    DRV_OK(drv.stream_create(&side, DRV_STREAM_NON_BLOCKING));
    drv_result rc = drv.wait_value32(side, hw.device, 1, DRV_STREAM_WAIT_VALUE_GEQ);
    if (rc != 0) {
        printf("SKIP out-of-memory wait: cuStreamWaitValue32 failed with CUresult %d\n", rc);
    } else {
        coop_status st;
        void *block = coop_malloc(pool, size, 0, COOP_ALLOC_LOW, &st);
        if (!block)
            fail_msg("coop_malloc: %s", coop_last_error());
        DRV_OK(drv.memset_async((drv_ptr)(uintptr_t)block, 0xcd, size, side));
        assert_int_equal(coop_record_stream(pool, block, (coop_stream)(uintptr_t)side), COOP_OK);
        assert_int_equal(coop_free(pool, block), COOP_OK);
        if (never_wait) {
            assert_null(coop_malloc(pool, size, 0, COOP_ALLOC_LOW, &st));
            assert_int_equal(st, COOP_ERR_NOMEM);
            __atomic_store_n(word, 1, __ATOMIC_SEQ_CST);
            DRV_OK(drv.stream_synchronize(side));
        } else {
            late_write w = {.word = word, .delay_ms = 200};
            pthread_t writer;
            assert_int_equal(pthread_create(&writer, NULL, write_later, &w), 0);
            void *again = coop_malloc(pool, size, 0, COOP_ALLOC_LOW, &st);
            int written = __atomic_load_n(&w.written, __ATOMIC_SEQ_CST);
            pthread_join(writer, NULL);
            if (again != block)
                fail_msg("coop_malloc while the block was pending: %p (%s), not %p", again,
                         again ? "another block" : coop_last_error(), block);
            assert_int_equal(written, 1); /* it returned only once the stream could finish */
            assert_int_equal(coop_free(pool, again), COOP_OK);
        }
        void *after = coop_malloc(pool, size, 0, COOP_ALLOC_LOW, &st);
        assert_ptr_equal(after, block);
        assert_int_equal(coop_free(pool, after), COOP_OK);
        coop_stats stats;
        coop_get_stats(pool, &stats);
        assert_int_equal(stats.num_ooms, never_wait ? 1 : 0);
    }
    __atomic_store_n(word, 1, __ATOMIC_SEQ_CST);
    DRV_OK(drv.stream_synchronize(side));
    coop_pool_destroy(pool);
    DRV_OK(drv.stream_destroy(side));
    DRV_OK(drv.host_free((void *)hw.word));
}

/* Pages cached on stream 0 are unmapped to make room while another stream
 * (that never used them) waits for a host word: the unmap waits for stream
 * 0 only, so the allocation returns long before the word is written, with
 * or without never_wait. (A context-wide synchronize before the unmap, as
 * the backend did before, waits for the blocked stream too: on a device
 * until another thread writes the word, here 1.5 s later, or forever.) */
static void run_unmap_beside_blocked_stream(bool never_wait)
{
    coop_pool *pool = create_pool_with(16 * SEQ_MIB, true, never_wait);
    coop_config resolved;
    coop_pool_config(pool, &resolved);
    host_word hw = host_word_alloc();
    volatile uint32_t *word = hw.word;
    drv_stream side = NULL, own = NULL;
    DRV_OK(drv.stream_create(&side, DRV_STREAM_NON_BLOCKING));
    DRV_OK(drv.stream_create(&own, DRV_STREAM_NON_BLOCKING));
    drv_result rc = drv.wait_value32(side, hw.device, 1, DRV_STREAM_WAIT_VALUE_GEQ);
    if (!resolved.use_vmm) {
        printf("SKIP unmap beside a blocked stream: no virtual memory management\n");
    } else if (rc != 0) {
        printf("SKIP unmap beside a blocked stream: cuStreamWaitValue32 failed with CUresult %d\n",
               rc);
    } else {
        coop_stream s = (coop_stream)(uintptr_t)own;
        coop_status st;
        void *a = coop_malloc(pool, 8 * SEQ_MIB, s, COOP_ALLOC_LOW, &st);
        void *guard = coop_malloc(pool, 2 * SEQ_MIB, s, COOP_ALLOC_LOW, &st);
        if (!a || !guard)
            fail_msg("coop_malloc: %s", coop_last_error());
        DRV_OK(drv.memset_async((drv_ptr)(uintptr_t)a, 0x11, 8 * SEQ_MIB, own));
        assert_int_equal(coop_free(pool, a), COOP_OK);
        late_write w = {.word = word, .delay_ms = 1500};
        pthread_t writer;
        assert_int_equal(pthread_create(&writer, NULL, write_later, &w), 0);
        /* 10 MiB: past the guard, over the capacity unless a's pages go */
        void *b = coop_malloc(pool, 10 * SEQ_MIB, s, COOP_ALLOC_LOW, &st);
        int written = __atomic_load_n(&w.written, __ATOMIC_SEQ_CST);
        pthread_join(writer, NULL);
        if (!b)
            fail_msg("coop_malloc of 10 MiB: %s", coop_last_error());
        if (written)
            fail_msg("the allocation waited for a stream that never used the pages it unmapped");
        coop_stats stats;
        coop_get_stats(pool, &stats);
        assert_true(stats.num_unmaps >= 1);
        assert_int_equal(coop_free(pool, b), COOP_OK);
        assert_int_equal(coop_free(pool, guard), COOP_OK);
    }
    __atomic_store_n(word, 1, __ATOMIC_SEQ_CST);
    DRV_OK(drv.stream_synchronize(side));
    coop_pool_destroy(pool);
    DRV_OK(drv.stream_destroy(side));
    DRV_OK(drv.stream_destroy(own));
    DRV_OK(drv.host_free((void *)hw.word));
}

static void test_unmap_beside_blocked_stream(void **state)
{
    (void)state;
    run_unmap_beside_blocked_stream(false);
    run_unmap_beside_blocked_stream(true);
}

static void test_oom_waits(void **state)
{
    (void)state;
    run_oom_wait(false);
}

static void test_oom_never_waits(void **state)
{
    (void)state;
    run_oom_wait(true);
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

/* 0 when a CUDA pool can be made; 77 (printed reason) without a driver or
 * device; 1 on any other failure. */
static int probe_pool(void)
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
    return 0;
}

/* ---- the driver side of cuda_stream_map.h on the device ---- */

#define CUDA_MAP_STREAMS 4 /* random_model_test.c's NUM_STREAMS */
#define DEVICE_WAIT_SECONDS 20
static coop_stream cuda_map_streams[CUDA_MAP_STREAMS];
static volatile uint32_t *hold_words; /* host memory the device can read */
static drv_ptr hold_words_device;
static uint32_t hold_generation[CUDA_MAP_STREAMS];
static bool held[CUDA_MAP_STREAMS];

/* Waits until the stream has done all its work, or fails the test after
 * DEVICE_WAIT_SECONDS (a hold that never ends would otherwise hang it). */
static void wait_stream_idle(coop_stream stream)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        drv_result rc = drv.stream_query((drv_stream)stream);
        if (rc == 0)
            return;
        if (rc != DRV_NOT_READY)
            fail_msg("cuStreamQuery failed with CUresult %d", rc);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > DEVICE_WAIT_SECONDS)
            fail_msg("stream %#jx still busy after %d s (a hold not released? the device "
                     "serialised streams behind a held one?)",
                     (uintmax_t)stream, DEVICE_WAIT_SECONDS);
        sched_yield();
    }
}

static int stream_slot(coop_stream stream)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++)
        if (cuda_map_streams[i] == stream)
            return i;
    fail_msg("stream %#jx is not one of the test's", (uintmax_t)stream);
    return -1;
}

/* A hold: the stream waits on the device until its word reaches the hold's
 * generation; the release writes it and waits for the stream to drain. */
static coop_status cuda_map_hold(coop_stream stream, bool hold)
{
    int i = stream_slot(stream);
    if (hold && !held[i]) {
        hold_generation[i]++;
        drv_result rc = drv.wait_value32((drv_stream)stream, hold_words_device + 4 * (unsigned)i,
                                         hold_generation[i], DRV_STREAM_WAIT_VALUE_GEQ);
        if (rc != 0)
            fail_msg("cuStreamWaitValue32 failed with CUresult %d", rc);
        held[i] = true;
    } else if (!hold && held[i]) {
        __atomic_store_n(&hold_words[i], hold_generation[i], __ATOMIC_SEQ_CST);
        held[i] = false;
        wait_stream_idle(stream);
    }
    return COOP_OK;
}

static void cuda_map_after_free(void)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++)
        if (!held[i])
            wait_stream_idle(cuda_map_streams[i]);
}

/* A kernel using the memory: a memset of it on the stream (a device faults
 * on pages the pool unmapped too early, the mock reports them). On a stream
 * that is not held it is waited for, as the model takes such a stream to be
 * idle; on a held one it runs after the hold. */
static void cuda_map_use(void *ptr, size_t size, coop_stream stream)
{
    DRV_OK(drv.memset_async((drv_ptr)(uintptr_t)ptr, 0x3c, size, (drv_stream)stream));
    if (!held[stream_slot(stream)])
        wait_stream_idle(stream);
}

static void cuda_map_after_create(coop_status st)
{
    (void)st;
}

static void cuda_map_after_destroy(void) {}

/* Streams and hold words for the model; false (with the reason printed)
 * when the device cannot hold a stream on a host-written word. */
static bool model_setup(void)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++) {
        drv_stream s = NULL;
        if (drv.stream_create(&s, DRV_STREAM_NON_BLOCKING) != 0) {
            printf("SKIP random model on the device: cuStreamCreate failed\n");
            return false;
        }
        cuda_map_streams[i] = (coop_stream)(uintptr_t)s;
    }
    void *words = NULL;
    if (drv.host_alloc(&words, 4096, DRV_MEMHOSTALLOC_PORTABLE | DRV_MEMHOSTALLOC_DEVICEMAP) != 0 ||
        drv.host_device_pointer(&hold_words_device, words, 0) != 0) {
        printf("SKIP random model on the device: no host memory mapped for the device\n");
        return false;
    }
    hold_words = words;
    memset(words, 0, 4096);
    /* one hold and release, to find out whether the device supports it */
    drv_result rc = drv.wait_value32((drv_stream)cuda_map_streams[0], hold_words_device, 1,
                                     DRV_STREAM_WAIT_VALUE_GEQ);
    if (rc != 0) {
        printf("SKIP random model on the device: cuStreamWaitValue32 failed with CUresult %d\n",
               rc);
        return false;
    }
    __atomic_store_n(&hold_words[0], 1, __ATOMIC_SEQ_CST);
    hold_generation[0] = 1;
    for (int i = 0; i < CUDA_MAP_STREAMS; i++)
        if (drv.stream_synchronize((drv_stream)cuda_map_streams[i]) != 0) {
            printf("SKIP random model on the device: cuStreamSynchronize failed\n");
            return false;
        }
    return true;
}

static void model_teardown(void)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++)
        if (cuda_map_streams[i])
            drv.stream_destroy((drv_stream)cuda_map_streams[i]);
    if (hold_words)
        drv.host_free((void *)hold_words);
}

#include "cuda_stream_map.h"

#define RANDOM_MODEL_PAGE (2 * MiB)
/* Holds (streams blocked by cuStreamWaitValue32 on a word only this thread
 * writes) with VMM only: the pool never waits for them (cuda_stream_map.h
 * sets never_wait) and unmaps only pages of streams seen to finish, with no
 * device-wide synchronize; but without VMM, cuMemFree may synchronize the
 * device by itself, as cudaFree is documented to, and would wait for a held
 * stream forever. (When the backend synchronized the device before every
 * unmap, the VMM run could not have holds either: the mock counted that
 * deadlock at the model's 35th operation.) */
#define RANDOM_MODEL_HOLDS (M.vmm)
#define main random_model_main
int random_model_main(void);
#include "random_model_test.c"
#undef main

int main(void)
{
    /* more hardware queues than the default 8, so that the model's held
     * streams are not serialised with the others (read by cuInit) */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    int probe = probe_pool();
    if (probe != 0)
        return probe;
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
        cmocka_unit_test(test_oom_waits),
        cmocka_unit_test(test_oom_never_waits),
        cmocka_unit_test(test_unmap_beside_blocked_stream),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (model_setup()) {
        setenv("COOP_TEST_OPS", "100000", 0);
        failed += random_model_main();
    }
    model_teardown();
    drv_context popped;
    drv.pop(&popped);
    drv.primary_release(device);
    dlclose(drv.lib);
    return failed;
}
