/*
 * Stress test of the PyTorch ABI entry points under concurrency (the
 * ThreadSanitizer pass of .ci/run runs it): 8 threads start together (so the
 * first use, the configuration and every device's pool creation race) and
 * then mix coop_torch_malloc / coop_torch_free / coop_torch_record_stream over
 * 4 devices and 4 streams, hand blocks to each other through a shared table
 * (so a block is freed by another thread, on another stream, than the one
 * that allocated it), and now and then call coop_torch_empty_cache and
 * coop_torch_snapshot_take (a walk under the pool lock while others allocate).
 *
 * Configured through the environment as PyTorch would load it:
 * COOP_ALLOC_CONF=backend:host,capacity:256M,history:4096,check:true
 * (every pool operation also validates every invariant under the lock);
 * tests/stress_torch_abi_segments_test is this program built with
 * STRESS_TORCH_CONF naming pools of 1 MiB segments without VMM (64 KiB
 * pages: requests run up to 2 MiB, so from 512 KiB each gets a segment of
 * its own), as the ABI runs where the device has no VMM.
 *
 * Checked: the blocks live at any checkpoint are pairwise disjoint per device
 * and never handed out twice, every pool's invariants hold
 * (coop_pool_check) after the threads join, and once everything is freed no
 * allocation remains. Seeded: COOP_TEST_SEED (printed); each thread's seed is
 * derived from it.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "coop.h"
#include "test_seed.h"

#define THREADS 8
#define DEVICES 4
#define STREAMS 4
#define SLOTS 24        /* per thread */
#define HANDOFF 64      /* shared table */
#define ITERATIONS 4000 /* per thread */
#define KiB ((size_t)1 << 10)
#ifndef STRESS_TORCH_CONF
#define STRESS_TORCH_CONF "backend:host,capacity:256M,history:4096,check:true"
#endif

typedef struct block {
    void *ptr;
    size_t size;
    int device;
    void *stream; /* allocation stream, as PyTorch passes it back to free */
} block;

static pthread_barrier_t start_line;
static pthread_mutex_t handoff_lock = PTHREAD_MUTEX_INITIALIZER;
static block handoff[HANDOFF];
static unsigned long base_seed;

typedef struct worker {
    unsigned seed;
    block mine[SLOTS];
    unsigned long mallocs, ooms, frees, records, handed, empties, snapshots;
    char error[256];
} worker;

static worker workers[THREADS];

static unsigned next(unsigned *seed)
{
    *seed ^= *seed << 13;
    *seed ^= *seed >> 17;
    *seed ^= *seed << 5;
    return *seed;
}

static void *stream_handle(unsigned i)
{
    return (void *)(uintptr_t)(0x100 + i);
}

static void free_block(block *b)
{
    coop_torch_free(b->ptr, b->size, b->device, b->stream);
    b->ptr = NULL;
}

/* Puts b in a free slot of the shared table, or takes the slot's block
 * (freed by this thread) when it is full. */
static void exchange(worker *w, block *b, unsigned where)
{
    block taken = {0};
    pthread_mutex_lock(&handoff_lock);
    block *h = &handoff[where % HANDOFF];
    if (h->ptr) {
        taken = *h;
        h->ptr = NULL;
    } else {
        *h = *b;
        b->ptr = NULL;
    }
    pthread_mutex_unlock(&handoff_lock);
    if (taken.ptr) {
        /* used on this thread's stream too before it goes */
        coop_torch_record_stream(taken.ptr, stream_handle(w->seed % STREAMS));
        free_block(&taken);
        w->handed++;
    }
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(&start_line);
    /* everyone's first call hits device 0 at once: pool creation races */
    block first = {coop_torch_malloc(4 * KiB, 0, stream_handle(0)), 4 * KiB, 0, stream_handle(0)};
    if (!first.ptr)
        snprintf(w->error, sizeof w->error, "first malloc failed");
    else
        free_block(&first);
    for (int i = 0; i < ITERATIONS && !w->error[0]; i++) {
        unsigned r = next(&w->seed), s = (r >> 8) % SLOTS;
        block *b = &w->mine[s];
        switch (r % 16) {
        case 0:
            if (b->ptr)
                exchange(w, b, r >> 16);
            break;
        case 1:
            if (b->ptr) {
                coop_torch_record_stream(b->ptr, stream_handle((r >> 16) % STREAMS));
                w->records++;
            }
            break;
        case 2:
            if ((r >> 12) % 64 == 0) {
                coop_torch_empty_cache();
                w->empties++;
            } else if ((r >> 12) % 64 == 1) {
                coop_torch_snapshot *snap = NULL;
                if (coop_torch_snapshot_take((int)((r >> 20) % DEVICES), &snap) != COOP_OK)
                    snprintf(w->error, sizeof w->error, "snapshot failed");
                coop_torch_snapshot_free(snap);
                w->snapshots++;
            }
            break;
        default:
            if (b->ptr) {
                free_block(b);
                w->frees++;
            } else {
                /* sizes from 1 byte to 2 MiB, mostly small */
                size_t size = 1 + (size_t)(next(&w->seed) % (r & 0x100 ? 2048 * KiB : 64 * KiB));
                int device = (int)((r >> 16) % DEVICES);
                void *stream = stream_handle((r >> 20) % STREAMS);
                b->ptr = coop_torch_malloc(size, device, stream);
                b->size = size, b->device = device, b->stream = stream;
                w->mallocs++;
                w->ooms += b->ptr == NULL;
            }
            break;
        }
    }
    return NULL;
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const block *)a)->ptr, y = (uintptr_t)((const block *)b)->ptr;
    return x < y ? -1 : x > y;
}

/* Every live block of every thread and the table: disjoint per device. */
static void check_disjoint(void)
{
    static block all[THREADS * SLOTS + HANDOFF];
    size_t n = 0;
    for (int t = 0; t < THREADS; t++)
        for (int s = 0; s < SLOTS; s++)
            if (workers[t].mine[s].ptr)
                all[n++] = workers[t].mine[s];
    for (int h = 0; h < HANDOFF; h++)
        if (handoff[h].ptr)
            all[n++] = handoff[h];
    qsort(all, n, sizeof *all, by_address);
    /* pools of different devices reserve different ranges, so address
     * order alone must show no overlap (and no block handed out twice) */
    for (size_t i = 1; i < n; i++) {
        uintptr_t end = (uintptr_t)all[i - 1].ptr + all[i - 1].size;
        if ((uintptr_t)all[i].ptr < end)
            fail_msg("blocks %p (+%zu, device %d) and %p (device %d) overlap", all[i - 1].ptr,
                     all[i - 1].size, all[i - 1].device, all[i].ptr, all[i].device);
    }
    printf("%zu blocks live at the checkpoint, pairwise disjoint\n", n);
}

static void eight_threads_devices_and_streams(void **state)
{
    (void)state;
    pthread_t threads[THREADS];
    assert_int_equal(pthread_barrier_init(&start_line, NULL, THREADS), 0);
    for (int t = 0; t < THREADS; t++) {
        workers[t].seed = (unsigned)(base_seed * 2654435761u + (unsigned long)t * 40503u) | 1;
        assert_int_equal(pthread_create(&threads[t], NULL, run_worker, &workers[t]), 0);
    }
    unsigned long mallocs = 0, ooms = 0, handed = 0, records = 0;
    for (int t = 0; t < THREADS; t++) {
        assert_int_equal(pthread_join(threads[t], NULL), 0);
        if (workers[t].error[0])
            fail_msg("thread %d: %s", t, workers[t].error);
        mallocs += workers[t].mallocs, ooms += workers[t].ooms;
        handed += workers[t].handed, records += workers[t].records;
    }
    pthread_barrier_destroy(&start_line);
    printf("%lu mallocs (%lu out of memory), %lu record_stream, %lu freed by another thread\n",
           mallocs, ooms, records, handed);
    char msg[512];
    if (ooms) {
        coop_torch_last_error(msg, sizeof msg);
        printf("last error: %s\n", msg);
    }
    /* 256 MiB per device and at most ~48 MiB live per device: no OOM is expected */
    assert_int_equal(ooms, 0);
    assert_true(handed > 0);

    check_disjoint();
    for (int d = 0; d < DEVICES; d++) {
        assert_non_null(coop_torch_pool(d));
        assert_int_equal(coop_pool_check(coop_torch_pool(d)), COOP_OK);
        /* the pools the configuration asked for */
        coop_config c;
        coop_pool_config(coop_torch_pool(d), &c);
        assert_int_equal(c.use_vmm, strstr(STRESS_TORCH_CONF, "vmm:false") == NULL);
        coop_stats st;
        coop_get_stats(coop_torch_pool(d), &st);
        if (d == 0)
            printf("device 0: %s, %lld segments at most\n", c.use_vmm ? "vmm" : "segments",
                   (long long)st.segment.peak);
    }
    for (int t = 0; t < THREADS; t++)
        for (int s = 0; s < SLOTS; s++)
            if (workers[t].mine[s].ptr)
                free_block(&workers[t].mine[s]);
    for (int h = 0; h < HANDOFF; h++)
        if (handoff[h].ptr)
            free_block(&handoff[h]);
    coop_torch_empty_cache();
    for (int d = 0; d < DEVICES; d++) {
        coop_stats s;
        coop_get_stats(coop_torch_pool(d), &s);
        assert_int_equal(s.allocation.current, 0);
        assert_int_equal(s.active.current, 0);
        assert_int_equal(s.reserved_bytes.current, 0);
        assert_int_equal(coop_pool_check(coop_torch_pool(d)), COOP_OK);
    }
    /* the history ring saw every thread's events without tearing, and in an
     * order the allocator could have had: no address allocated again while
     * the trace still shows it live (a free recorded after another thread's
     * malloc of the same address would) */
    for (int d = 0; d < DEVICES; d++) {
        coop_torch_snapshot *snap = NULL;
        assert_int_equal(coop_torch_snapshot_take(d, &snap), COOP_OK);
        assert_true(snap->num_events > 0);
        static uintptr_t live[4096];
        size_t num_live = 0;
        for (size_t i = 0; i < snap->num_events; i++) {
            const coop_torch_event *e = &snap->events[i];
            assert_true(e->action >= COOP_TORCH_ALLOC && e->action <= COOP_TORCH_OOM &&
                        e->device == d);
            size_t j = 0;
            while (j < num_live && live[j] != e->address)
                j++;
            if (e->action == COOP_TORCH_ALLOC) {
                if (j < num_live)
                    fail_msg("device %d event %zu: %#jx allocated while the trace shows it live", d,
                             i, (uintmax_t)e->address);
                assert_true(num_live < sizeof live / sizeof live[0]);
                live[num_live++] = e->address;
            } else if (e->action == COOP_TORCH_FREE_COMPLETED && j < num_live) {
                live[j] = live[--num_live];
            }
        }
        coop_torch_snapshot_free(snap);
    }
}

int main(void)
{
    base_seed = test_seed("stress_torch_abi_test", 20261121);
    /* as PyTorch would load it, before the first call */
    setenv("COOP_ALLOC_CONF", STRESS_TORCH_CONF, 1);
    printf("COOP_ALLOC_CONF=%s\n", STRESS_TORCH_CONF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eight_threads_devices_and_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
