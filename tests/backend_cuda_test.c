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
 * The test's own driver calls (streams, memset, copy) are tests/cuda_device.h's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#include <cmocka.h>

#include "coop.h"
#include "pool_sequence.h"

#include "cuda_device.h"

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
        /* A pool that never waits cannot unmap a's pages before it sees the
         * memset finish: on 2026-11-27, with five other test processes on
         * the H200, it had not yet, and the allocation failed. With waiting
         * the pool waits for stream own itself. */
        if (never_wait)
            DRV_OK(drv.stream_synchronize(own));
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
    int open = cuda_device_open("backend_cuda_test");
    if (open != 0)
        return open;
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
    if (cuda_map_streams_setup("random model on the device")) {
        setenv("COOP_TEST_OPS", "100000", 0);
        failed += random_model_main();
    }
    cuda_map_streams_teardown();
    cuda_device_close();
    return failed;
}
