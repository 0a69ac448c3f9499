/*
 * Steady-state host memory: a pool, the PyTorch ABI and a remat context
 * live as long as a training job, so their host-side metadata must stop
 * growing under a repeating workload, not only be freed at exit (which is
 * all a leak checker sees). Each test runs a workload for a warm-up, notes
 * the host memory in use, runs it four times as long again, and requires
 * the memory at each checkpoint to stay within a small slack of the noted
 * value: a structure that grows by even a few bytes per iteration grows at
 * least fourfold past the warm-up and crosses a doubling of its array.
 * (tests/README.md, "Steady state", lists the patterns.)
 *
 * Host memory is counted through -Wl,--wrap of the allocation functions
 * (Makefile.am): every malloc, calloc, realloc, aligned_alloc, strdup and
 * free of the statically linked test, libcoop and libcooptools updates a
 * live block count and a live byte count (malloc_usable_size, so the
 * counts are exact whatever the request). The pool's own counters (its
 * metadata heap's live allocations, the host backend's live events) are
 * checked besides.
 *
 * Randomized workloads print their seed (COOP_TEST_SEED replays one).
 */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "coop.h"
#include "pool_internal.h"
#include "remat/remat_internal.h"
#include "test_seed.h"
#include "torch/history.h"
#include "torch/torch_abi.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* ---- Counting host allocations ---- */

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void __real_free(void *p);
char *__real_strdup(const char *s);
void *__real_aligned_alloc(size_t align, size_t size);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
void *__wrap_aligned_alloc(size_t align, size_t size);

/* Single-threaded: plain counters. */
static long live_blocks, live_bytes;

/* The most of each since peak_reset. */
static long peak_blocks, peak_bytes;

static void note_peak(void)
{
    if (live_blocks > peak_blocks)
        peak_blocks = live_blocks;
    if (live_bytes > peak_bytes)
        peak_bytes = live_bytes;
}

static void *counted(void *p)
{
    if (p) {
        live_blocks++;
        live_bytes += (long)malloc_usable_size(p);
        note_peak();
    }
    return p;
}

void *__wrap_malloc(size_t size)
{
    return counted(__real_malloc(size));
}

void *__wrap_calloc(size_t n, size_t size)
{
    return counted(__real_calloc(n, size));
}

void *__wrap_realloc(void *p, size_t size)
{
    long old = p ? (long)malloc_usable_size(p) : 0;
    void *q = __real_realloc(p, size);
    if (!q)
        return NULL; /* p stays */
    if (!p)
        live_blocks++;
    live_bytes += (long)malloc_usable_size(q) - old;
    note_peak();
    return q;
}

void __wrap_free(void *p)
{
    if (!p)
        return;
    live_blocks--;
    live_bytes -= (long)malloc_usable_size(p);
    __real_free(p);
}

char *__wrap_strdup(const char *s)
{
    return counted(__real_strdup(s));
}

void *__wrap_aligned_alloc(size_t align, size_t size)
{
    return counted(__real_aligned_alloc(align, size));
}

/* ---- The steady-state check ---- */

typedef struct host_use {
    long blocks, bytes;
} host_use;

static host_use host_now(void)
{
    return (host_use){live_blocks, live_bytes};
}

/* The peak since the last call, which starts the next from what is live. */
static host_use host_peak_reset(void)
{
    host_use peak = {peak_blocks, peak_bytes};
    peak_blocks = live_blocks;
    peak_bytes = live_bytes;
    return peak;
}

/* One iteration of a workload; extra checks of its own counters may
 * compare against what it noted at the end of the warm-up (base true). */
typedef struct workload {
    const char *name;
    void (*step)(void *ctx, uint64_t i);
    /* optional: called at the end of the warm-up (base) and at each checkpoint */
    void (*checkpoint)(void *ctx, bool base);
    void *ctx;
} workload;

/* Runs w for warm iterations, then 4 x warm more in four windows: the
 * peak of live host blocks and bytes in each window must stay within
 * slack_blocks / slack_bytes of the peak during the warm-up (peaks, not
 * values at one moment: structures that are trimmed in batches, such as
 * the remat context's quarantine, swing between collections; the warm-up
 * must hold a whole swing). */
static void check_steady(const workload *w, uint64_t warm, long slack_blocks, long slack_bytes)
{
    uint64_t i = 0;
    (void)host_peak_reset();
    for (; i < warm; i++)
        w->step(w->ctx, i);
    if (w->checkpoint)
        w->checkpoint(w->ctx, true);
    host_use base = host_peak_reset();
    print_message("%s: warm-up (%llu iterations) peak: %ld blocks, %ld bytes\n", w->name,
                  (unsigned long long)warm, base.blocks, base.bytes);
    for (int k = 1; k <= 4; k++) {
        for (uint64_t end = i + warm; i < end; i++)
            w->step(w->ctx, i);
        host_use u = host_peak_reset();
        print_message("%s: peak up to %llu iterations: %ld blocks (%+ld), %ld bytes (%+ld)\n",
                      w->name, (unsigned long long)i, u.blocks, u.blocks - base.blocks, u.bytes,
                      u.bytes - base.bytes);
        if (w->checkpoint)
            w->checkpoint(w->ctx, false);
        assert_true(u.blocks <= base.blocks + slack_blocks);
        assert_true(u.bytes <= base.bytes + slack_bytes);
    }
}

/* ---- Pools ---- */

static coop_pool *make_pool(bool vmm, uint64_t capacity)
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = vmm;
    c.capacity = capacity;
    if (!vmm)
        c.segment_size = 8 * MiB;
    coop_pool *p = NULL;
    assert_int_equal(coop_pool_create(&c, &p), COOP_OK);
    return p;
}

static size_t host_events(coop_pool *pool)
{
    return coop_backend_host_live_events(coop_backend_fault_inner(pool->backend));
}

#define SLOTS 64

static size_t host_streams(coop_pool *pool)
{
    return coop_backend_host_streams(coop_backend_fault_inner(pool->backend));
}

typedef struct pool_ctx {
    coop_pool *pool;
    void *slot[SLOTS];
    uint64_t rng;
    int64_t base_meta;
    size_t base_events, base_streams;
} pool_ctx;

/* The pool's metadata heap (live allocations) and the host backend's live
 * events stay where the warm-up left them, within a few records. */
static void pool_counters(void *ctx, bool base)
{
    pool_ctx *c = ctx;
    if (base) {
        c->base_meta = c->pool->heap.live;
        c->base_events = host_events(c->pool);
        c->base_streams = host_streams(c->pool);
        return;
    }
    print_message("  meta heap %lld (base %lld), host events %zu (base %zu), host streams %zu "
                  "(base %zu), pending %zu\n",
                  (long long)c->pool->heap.live, (long long)c->base_meta, host_events(c->pool),
                  c->base_events, host_streams(c->pool), c->base_streams, c->pool->num_pending);
    assert_true(c->pool->heap.live <= c->base_meta + 16);
    assert_true(host_events(c->pool) <= c->base_events + 64);
    assert_true(host_streams(c->pool) <= c->base_streams + 2);
}

static void pool_ctx_init(pool_ctx *c, bool vmm, uint64_t capacity, const char *seed_name)
{
    memset(c, 0, sizeof *c);
    c->pool = make_pool(vmm, capacity);
    c->rng = test_seed(seed_name, UINT64_C(0x57eadd57a7e));
    if (!c->rng)
        c->rng = 1;
}

static void pool_ctx_fini(pool_ctx *c)
{
    for (int k = 0; k < SLOTS; k++)
        if (c->slot[k])
            assert_int_equal(coop_free(c->pool, c->slot[k]), COOP_OK);
    assert_int_equal(coop_pool_check(c->pool), COOP_OK);
    coop_pool_destroy(c->pool);
}

/* A size from 512 bytes to about 2 MiB, small ones most often. */
static size_t mixed_size(uint64_t x)
{
    unsigned shift = (unsigned)(x % 13);
    return ((size_t)512 << shift) + (size_t)((x >> 8) % 4096);
}

/* One slot replaced: its block freed, a new one of a mixed size allocated
 * on one of two streams. */
static void mixed_step(void *ctx, uint64_t i)
{
    pool_ctx *c = ctx;
    (void)i;
    uint64_t x = test_xorshift64(&c->rng);
    size_t k = (size_t)(x % SLOTS);
    if (c->slot[k])
        assert_int_equal(coop_free(c->pool, c->slot[k]), COOP_OK);
    coop_status st;
    c->slot[k] = coop_malloc(c->pool, mixed_size(x >> 8), 1 + (x >> 40) % 2, 0, &st);
    assert_non_null(c->slot[k]);
}

static void mixed_sizes(bool vmm)
{
    pool_ctx c;
    pool_ctx_init(&c, vmm, 512 * MiB, "steady_state_test");
    workload w = {vmm ? "mixed sizes, VMM" : "mixed sizes, segments", mixed_step, pool_counters,
                  &c};
    check_steady(&w, 4000, 16, 64 * (long)KiB);
    pool_ctx_fini(&c);
}

static void test_pool_mixed_sizes_vmm(void **state)
{
    (void)state;
    mixed_sizes(true);
}

static void test_pool_mixed_sizes_segments(void **state)
{
    (void)state;
    mixed_sizes(false);
}

/* record_stream on eight streams, each held busy in turn for 16
 * iterations, so frees go pending on it and complete when the hold ends
 * (or when the out-of-memory path waits for it). */
static void streams_step(void *ctx, uint64_t i)
{
    pool_ctx *c = ctx;
    if (i % 16 == 0) {
        coop_stream prev = 10 + (i / 16 + 7) % 8, next = 10 + (i / 16) % 8;
        assert_int_equal(coop_host_hold_stream(c->pool, prev, false), COOP_OK);
        assert_int_equal(coop_host_busy_stream(c->pool, next), COOP_OK);
    }
    uint64_t x = test_xorshift64(&c->rng);
    size_t k = (size_t)(x % SLOTS);
    if (c->slot[k])
        assert_int_equal(coop_free(c->pool, c->slot[k]), COOP_OK);
    coop_status st;
    void *p = coop_malloc(c->pool, mixed_size(x >> 8), 1, 0, &st);
    assert_non_null(p);
    for (unsigned u = 0; u < 1 + (x >> 50) % 3; u++)
        assert_int_equal(coop_record_stream(c->pool, p, 10 + (x >> (20 + 4 * u)) % 8), COOP_OK);
    c->slot[k] = p;
}

static void test_pool_record_stream_pending(void **state)
{
    (void)state;
    pool_ctx c;
    pool_ctx_init(&c, true, 256 * MiB, "steady_state_test");
    workload w = {"record_stream, pending frees on 8 streams", streams_step, pool_counters, &c};
    check_steady(&w, 4000, 64, 64 * (long)KiB);
    for (coop_stream s = 10; s < 18; s++)
        assert_int_equal(coop_host_hold_stream(c.pool, s, false), COOP_OK);
    pool_ctx_fini(&c);
}

/* A program that makes a stream per request: each iteration uses a new
 * handle (allocates on it, and records it on a block of another stream,
 * whose free then waits for it), then calls coop_forget_stream before it
 * would destroy the stream, as include/coop.h asks. */
static void new_stream_step(void *ctx, uint64_t i)
{
    pool_ctx *c = ctx;
    coop_stream s = 1000 + i;
    coop_status st;
    void *own = coop_malloc(c->pool, 4 * KiB, s, 0, &st);
    void *shared = coop_malloc(c->pool, 64 * KiB, 1, 0, &st);
    assert_non_null(own);
    assert_non_null(shared);
    assert_int_equal(coop_record_stream(c->pool, shared, s), COOP_OK);
    if (i % 3 == 0) /* its work still queued when the block is freed */
        assert_int_equal(coop_host_busy_stream(c->pool, s), COOP_OK);
    assert_int_equal(coop_free(c->pool, own), COOP_OK);
    assert_int_equal(coop_free(c->pool, shared), COOP_OK);
    assert_int_equal(coop_forget_stream(c->pool, s), COOP_OK);
}

static void test_pool_new_stream_forgotten(void **state)
{
    (void)state;
    pool_ctx c;
    pool_ctx_init(&c, true, 256 * MiB, "steady_state_test");
    workload w = {"a new stream each iteration, forgotten", new_stream_step, pool_counters, &c};
    check_steady(&w, 2000, 16, 16 * (long)KiB);
    pool_ctx_fini(&c);
}

/* The same without coop_forget_stream: the pool cannot know that a handle
 * is dead, so each one keeps its records (a free-index set, a pending
 * queue, the host backend's stream slot) until it is forgotten; forgetting
 * them later gives all of it back for the next ones to reuse. */
static void test_pool_new_stream_kept_until_forgotten(void **state)
{
    (void)state;
    pool_ctx c;
    pool_ctx_init(&c, true, 256 * MiB, "steady_state_test");
    const uint64_t n = 300;
    host_use before = host_now();
    int64_t meta_before = c.pool->heap.live;
    host_use after_first = {0, 0};
    for (int round = 0; round < 3; round++) {
        for (uint64_t i = 0; i < n; i++) {
            coop_stream s = 1000 + round * n + i;
            coop_status st;
            void *own = coop_malloc(c.pool, 4 * KiB, s, 0, &st);
            void *shared = coop_malloc(c.pool, 64 * KiB, 1, 0, &st);
            assert_non_null(own);
            assert_non_null(shared);
            assert_int_equal(coop_record_stream(c.pool, shared, s), COOP_OK);
            assert_int_equal(coop_free(c.pool, own), COOP_OK);
            assert_int_equal(coop_free(c.pool, shared), COOP_OK);
        }
        host_use kept = host_now();
        print_message("round %d: %llu streams not forgotten: %+ld blocks, %+ld bytes, meta heap "
                      "%+lld\n",
                      round, (unsigned long long)n, kept.blocks - before.blocks,
                      kept.bytes - before.bytes, (long long)(c.pool->heap.live - meta_before));
        /* a set of the free index per stream at least */
        assert_true(c.pool->heap.live >= meta_before + (int64_t)n);
        for (uint64_t i = 0; i < n; i++)
            assert_int_equal(coop_forget_stream(c.pool, 1000 + round * n + i), COOP_OK);
        host_use done = host_now();
        print_message("round %d: forgotten: %+ld blocks, %+ld bytes, meta heap %+lld\n", round,
                      done.blocks - before.blocks, done.bytes - before.bytes,
                      (long long)(c.pool->heap.live - meta_before));
        assert_true(c.pool->heap.live <= meta_before + 4);
        assert_true(host_streams(c.pool) <= 2); /* stream 1, and the pool's own */
        if (round == 0)
            after_first = done;
        else /* the tables' room is reused, not grown */
            assert_true(done.bytes <= after_first.bytes + 4 * (long)KiB);
    }
    pool_ctx_fini(&c);
}

/* A stream forgotten while an event recorded on it is still live (a
 * pending block waits for another stream too) keeps its host backend slot
 * until that event is destroyed, then the slot is reused. */
static void test_pool_forgotten_stream_slot_outlives_its_events(void **state)
{
    (void)state;
    coop_pool *pool = make_pool(true, 64 * MiB);
    coop_status st;
    void *p = coop_malloc(pool, 64 * KiB, 1, 0, &st);
    assert_non_null(p);
    assert_int_equal(coop_record_stream(pool, p, 2), COOP_OK);
    assert_int_equal(coop_record_stream(pool, p, 3), COOP_OK);
    assert_int_equal(coop_host_hold_stream(pool, 3, true), COOP_OK); /* blocked on the host */
    assert_int_equal(coop_free(pool, p), COOP_OK);
    size_t before = host_streams(pool);
    assert_int_equal(coop_forget_stream(pool, 2), COOP_OK);
    assert_int_equal(host_streams(pool), before); /* p's event on 2 still names it */
    assert_int_equal(coop_host_hold_stream(pool, 3, false), COOP_OK);
    void *q = coop_malloc(pool, 4 * KiB, 1, 0, &st); /* completes p's pending free */
    assert_non_null(q);
    assert_int_equal(pool->num_pending, 0);
    assert_int_equal(host_streams(pool), before - 1);
    assert_int_equal(coop_record_stream(pool, q, 4), COOP_OK); /* a new one takes the slot */
    assert_int_equal(coop_free(pool, q), COOP_OK);
    assert_int_equal(host_streams(pool), before);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_pool_destroy(pool);
}

/* Allocations, then empty_cache and a capacity lowered and raised again,
 * every few iterations. */
typedef struct cache_ctx {
    pool_ctx p;
    uint64_t capacity;
} cache_ctx;

static void cache_step(void *ctx, uint64_t i)
{
    cache_ctx *c = ctx;
    mixed_step(&c->p, i);
    if (i % 50 == 49) {
        assert_int_equal(coop_empty_cache(c->p.pool), COOP_OK);
        coop_stats s;
        coop_get_stats(c->p.pool, &s);
        uint64_t low = (uint64_t)s.reserved_bytes.current + 32 * MiB;
        assert_int_equal(coop_set_capacity(c->p.pool, low), COOP_OK);
        assert_int_equal(coop_set_capacity(c->p.pool, c->capacity), COOP_OK);
    }
}

static void cache_cycles(bool vmm)
{
    cache_ctx c;
    c.capacity = 512 * MiB;
    pool_ctx_init(&c.p, vmm, c.capacity, "steady_state_test");
    workload w = {vmm ? "empty_cache / set_capacity, VMM" : "empty_cache / set_capacity, segments",
                  cache_step, pool_counters, &c.p};
    check_steady(&w, 2000, 16, 64 * (long)KiB);
    pool_ctx_fini(&c.p);
}

static void test_pool_cache_cycles_vmm(void **state)
{
    (void)state;
    cache_cycles(true);
}

static void test_pool_cache_cycles_segments(void **state)
{
    (void)state;
    cache_cycles(false);
}

static int count_segment(const coop_segment_info *s, void *ctx)
{
    (void)s;
    ++*(size_t *)ctx;
    return 0;
}

static int count_block(const coop_block_info *b, void *ctx)
{
    (void)b;
    ++*(size_t *)ctx;
    return 0;
}

/* coop_walk, the statistics and the checker between allocations. */
static void walk_step(void *ctx, uint64_t i)
{
    pool_ctx *c = ctx;
    mixed_step(c, i);
    size_t n = 0;
    assert_int_equal(coop_walk(c->pool, count_segment, count_block, &n), COOP_OK);
    assert_true(n > 0);
    coop_stats s;
    coop_get_stats(c->pool, &s);
    if (i % 16 == 0)
        assert_int_equal(coop_pool_check(c->pool), COOP_OK);
}

static void test_pool_walk_and_stats(void **state)
{
    (void)state;
    pool_ctx c;
    pool_ctx_init(&c, false, 256 * MiB, "steady_state_test");
    workload w = {"coop_walk, stats, check", walk_step, pool_counters, &c};
    check_steady(&w, 1000, 16, 64 * (long)KiB);
    pool_ctx_fini(&c);
}

/* ---- PyTorch ABI ---- */

#define TORCH_DEVICES 4
#define TORCH_HISTORY 1000

typedef struct torch_ctx {
    void *slot[SLOTS];
    size_t size[SLOTS];
    int device[SLOTS];
    uint64_t rng;
} torch_ctx;

/* Through the pluggable-allocator entry points, on four devices and three
 * streams, history recording on: a slot replaced; every 7th iteration a
 * block also used on a new stream handle, which is forgotten after the
 * free (coop_torch_forget_stream); every 100th a snapshot taken and freed. */
static void torch_step(void *ctx, uint64_t i)
{
    torch_ctx *c = ctx;
    uint64_t x = test_xorshift64(&c->rng);
    size_t k = (size_t)(x % SLOTS);
    void *stream = (void *)(uintptr_t)(1 + (i / TORCH_DEVICES) % 3);
    if (c->slot[k])
        coop_torch_free(c->slot[k], c->size[k], c->device[k], stream);
    int d = (int)(i % TORCH_DEVICES);
    size_t size = mixed_size(x >> 8);
    c->slot[k] = coop_torch_malloc(size, d, stream);
    assert_non_null(c->slot[k]);
    c->size[k] = size;
    c->device[k] = d;
    if (i % 7 == 0) {
        void *once = (void *)(uintptr_t)(100000 + i);
        void *p = coop_torch_malloc(4 * KiB, d, stream);
        assert_non_null(p);
        coop_torch_record_stream(p, once);
        coop_torch_free(p, 4 * KiB, d, stream);
        assert_int_equal(coop_torch_forget_stream(once), COOP_OK);
    }
    if (i % 100 == 99) {
        coop_torch_snapshot *snap = NULL;
        assert_int_equal(coop_torch_snapshot_take(d, &snap), COOP_OK);
        assert_true(snap->num_events <= TORCH_HISTORY);
        coop_torch_snapshot_free(snap);
    }
}

/* The history ring never holds more than its bound. */
static void torch_counters(void *ctx, bool base)
{
    (void)ctx, (void)base;
    for (int d = 0; d < TORCH_DEVICES; d++) {
        const torch_history *h = torch_abi_history(d);
        assert_true(h->slots <= TORCH_HISTORY);
        assert_true(h->count <= TORCH_HISTORY);
        if (!base)
            print_message("  device %d: history %zu events in %zu slots, pool meta heap %lld\n", d,
                          h->count, h->slots, (long long)coop_torch_pool(d)->heap.live);
    }
}

static void test_torch_abi(void **state)
{
    (void)state;
    assert_int_equal(coop_torch_configure("backend:host,capacity:256M"), COOP_OK);
    coop_torch_init(TORCH_DEVICES);
    coop_torch_record_history(TORCH_HISTORY);
    torch_ctx c;
    memset(&c, 0, sizeof c);
    c.rng = test_seed("steady_state_test", UINT64_C(0x57eadd57a7e));
    if (!c.rng)
        c.rng = 1;
    workload w = {"torch ABI, 4 devices, history, snapshots, record_stream", torch_step,
                  torch_counters, &c};
    check_steady(&w, 3000, 32, 64 * (long)KiB);
    for (int k = 0; k < SLOTS; k++)
        if (c.slot[k])
            coop_torch_free(c.slot[k], c.size[k], c.device[k], NULL);
    coop_torch_record_history(0);
    for (int d = 0; d < TORCH_DEVICES; d++)
        assert_null(torch_abi_history(d)->ring);
}

/* ---- Rematerialization ---- */

#define PARAMS 6
#define MAX_LIVE 24

typedef struct remat_ctx {
    coop_remat *r;
    coop_pool *pool;
    coop_tensor *param[PARAMS];
    coop_tensor *held[32];
    uintptr_t next_op;
    uint64_t rng;
    size_t base_uf;
} remat_ctx;

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)user;
    assert_non_null(out);
    for (size_t i = 0; i < n; i++)
        assert_non_null(inputs[i]);
    return COOP_OK;
}

static void remat_ctx_init(remat_ctx *c, coop_remat_policy policy, bool vmm, size_t capacity)
{
    memset(c, 0, sizeof *c);
    coop_config cfg;
    coop_config_default(&cfg);
    cfg.use_vmm = vmm;
    cfg.page_size = 4096;
    cfg.capacity = capacity;
    if (!vmm)
        cfg.segment_size = capacity;
    assert_int_equal(coop_pool_create(&cfg, &c->pool), COOP_OK);
    coop_remat_config rc = {.policy = policy, .recompute = recompute};
    assert_int_equal(coop_remat_create(c->pool, &rc, &c->r), COOP_OK);
    c->next_op = 1;
    c->rng = test_seed("steady_state_test", UINT64_C(0x57eadd57a7e));
    if (!c->rng)
        c->rng = 1;
    for (int i = 0; i < PARAMS; i++)
        assert_int_equal(
            coop_tensor_create(c->r, 8 * KiB, 50, (void *)c->next_op++, NULL, 0, 0, &c->param[i]),
            COOP_OK);
}

static void remat_ctx_fini(remat_ctx *c)
{
    assert_int_equal(coop_pool_check(c->pool), COOP_OK);
    coop_remat_destroy(c->r);
    coop_pool_destroy(c->pool);
}

/* The context's own structures, printed at each checkpoint; the
 * union-find keeps room for an eviction of every resident tensor, and
 * holds no more nodes than a collection or compaction leaves plus what
 * was made since (bounded in the same proportion as the records). */
static void remat_counters(void *ctx, bool base)
{
    remat_ctx *c = ctx;
    coop_remat *r = c->r;
    assert_true(r->uf.cap - r->uf.count >= r->num_resident);
    /* compacted once it holds more than twice the classes named, at most
     * as many nodes as records (4,096 at least) after the last try */
    assert_true(r->uf.count <= 3 * (r->num_records + 4096));
    if (base)
        return;
    print_message("  records %zu, quarantined %zu, uf %u nodes (cap %u), eq roots %zu, dirty %zu, "
                  "cands %zu (cap %zu), victims cap %zu, frames cap %zu, stack cap %zu\n",
                  r->num_records, r->num_quarantined, r->uf.count, r->uf.cap, r->eq_roots_len,
                  r->num_dirty, r->num_cands, r->cap_cands, r->cap_victims, r->cap_frames,
                  r->cap_stack);
}

static void pin_all(coop_remat *r, coop_tensor **in, size_t n, bool *pinned)
{
    for (size_t i = 0; i < n; i++)
        pinned[i] = coop_tensor_pin(r, in[i], NULL) == COOP_OK;
}

static void unpin_all(coop_remat *r, coop_tensor **in, size_t n, const bool *pinned)
{
    for (size_t i = 0; i < n; i++)
        if (pinned[i])
            assert_int_equal(coop_tensor_unpin(r, in[i]), COOP_OK);
}

/* One training step: activations made from parameters and earlier
 * activations, read again (recomputing evicted ones), viewed, updated in
 * place, released in random order, all released by the step's end. */
static void training_step(void *ctx, uint64_t step)
{
    remat_ctx *c = ctx;
    coop_remat *r = c->r;
    (void)step;
    coop_tensor *live[MAX_LIVE];
    size_t num_live = 0;
    for (int op = 0; op < 40; op++) {
        uint64_t x = test_xorshift64(&c->rng);
        unsigned kind = (unsigned)(x % 10);
        if (kind < 5 || num_live == 0) {
            coop_tensor *in[3];
            bool pinned[3];
            size_t n = 1 + (size_t)((x >> 8) % 3);
            for (size_t i = 0; i < n; i++) {
                uint64_t pick = test_xorshift64(&c->rng);
                in[i] = num_live && (pick & 1) ? live[(pick >> 1) % num_live]
                                               : c->param[(pick >> 1) % PARAMS];
            }
            pin_all(r, in, n, pinned);
            coop_tensor *t = NULL;
            coop_status st =
                coop_tensor_create(r, (1 + (size_t)((x >> 16) % 16)) * KiB, 10 + (x >> 24) % 1000,
                                   (void *)c->next_op++, in, n, COOP_TENSOR_EVICTABLE, &t);
            unpin_all(r, in, n, pinned);
            assert_true(st == COOP_OK || st == COOP_ERR_NOMEM);
            if (t && num_live < MAX_LIVE)
                live[num_live++] = t;
            else if (t)
                assert_int_equal(coop_tensor_release(r, t), COOP_OK);
        } else if (kind < 7) {
            coop_status st = coop_tensor_access(r, live[(x >> 8) % num_live], NULL);
            assert_true(st == COOP_OK || st == COOP_ERR_NOMEM);
        } else if (kind == 7) {
            size_t k = (x >> 8) % num_live;
            coop_tensor *v;
            assert_int_equal(coop_tensor_alias(r, live[k], &v), COOP_OK);
            assert_int_equal(coop_tensor_release(r, live[k]), COOP_OK);
            live[k] = v;
        } else if (kind == 8) {
            coop_tensor *t = live[(x >> 8) % num_live], *in = live[(x >> 16) % num_live];
            bool pinned;
            pin_all(r, &in, 1, &pinned);
            coop_status st = coop_tensor_mutate(r, t, 20, (void *)c->next_op++, &in, 1, NULL);
            unpin_all(r, &in, 1, &pinned);
            assert_true(st == COOP_OK || st == COOP_ERR_NOMEM);
        } else {
            size_t k = (x >> 8) % num_live;
            assert_int_equal(coop_tensor_release(r, live[k]), COOP_OK);
            live[k] = live[--num_live];
        }
    }
    while (num_live)
        assert_int_equal(coop_tensor_release(r, live[--num_live]), COOP_OK);
}

static void training_loop(coop_remat_policy policy, bool vmm, const char *name)
{
    remat_ctx c;
    remat_ctx_init(&c, policy, vmm, 160 * KiB);
    workload w = {name, training_step, remat_counters, &c};
    check_steady(&w, 600, 64, 256 * (long)KiB);
    coop_remat_stats s;
    coop_remat_get_stats(c.r, &s);
    print_message("  %llu evictions, %llu recomputes, %llu records reclaimed\n",
                  (unsigned long long)s.evictions, (unsigned long long)s.recomputes,
                  (unsigned long long)s.records_reclaimed);
    assert_true(s.evictions > 1000 && s.recomputes > 1000); /* it did evict and recompute */
    remat_ctx_fini(&c);
}

static void test_remat_training_loop_window(void **state)
{
    (void)state;
    training_loop(COOP_REMAT_COOP, false, "remat training loop, coop (window), segments");
}

static void test_remat_training_loop_argmin(void **state)
{
    (void)state;
    training_loop(COOP_REMAT_DTR, true, "remat training loop, dtr (argmin), VMM");
}

/* Held tensors read over and over in a pool too small for them: every
 * access evicts and recomputes, and no call makes a record. */
static void access_step(void *ctx, uint64_t i)
{
    remat_ctx *c = ctx;
    void *ptr;
    assert_int_equal(coop_tensor_access(c->r, c->held[i % 32], &ptr), COOP_OK);
}

static void access_loop(coop_remat_policy policy, bool vmm, const char *name)
{
    remat_ctx c;
    remat_ctx_init(&c, policy, vmm, 192 * KiB);
    for (int i = 0; i < 32; i++) {
        coop_tensor *in = c.param[i % PARAMS];
        assert_int_equal(coop_tensor_pin(c.r, in, NULL), COOP_OK);
        assert_int_equal(coop_tensor_create(c.r, 8 * KiB, 100 + i, (void *)c.next_op++, &in, 1,
                                            COOP_TENSOR_EVICTABLE, &c.held[i]),
                         COOP_OK);
        assert_int_equal(coop_tensor_unpin(c.r, in), COOP_OK);
    }
    workload w = {name, access_step, remat_counters, &c};
    check_steady(&w, 5000, 16, 16 * (long)KiB);
    coop_remat_stats s;
    coop_remat_get_stats(c.r, &s);
    print_message("  %llu evictions, %llu recomputes\n", (unsigned long long)s.evictions,
                  (unsigned long long)s.recomputes);
    assert_true(s.evictions > 20000);
    remat_ctx_fini(&c);
}

static void test_remat_access_loop_window(void **state)
{
    (void)state;
    access_loop(COOP_REMAT_COOP, false, "remat access loop, coop (window), segments");
}

static void test_remat_access_loop_argmin(void **state)
{
    (void)state;
    access_loop(COOP_REMAT_DTR, true, "remat access loop, dtr (argmin), VMM");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_mixed_sizes_vmm),
        cmocka_unit_test(test_pool_mixed_sizes_segments),
        cmocka_unit_test(test_pool_record_stream_pending),
        cmocka_unit_test(test_pool_new_stream_forgotten),
        cmocka_unit_test(test_pool_new_stream_kept_until_forgotten),
        cmocka_unit_test(test_pool_forgotten_stream_slot_outlives_its_events),
        cmocka_unit_test(test_pool_cache_cycles_vmm),
        cmocka_unit_test(test_pool_cache_cycles_segments),
        cmocka_unit_test(test_pool_walk_and_stats),
        cmocka_unit_test(test_torch_abi),
        cmocka_unit_test(test_remat_training_loop_window),
        cmocka_unit_test(test_remat_training_loop_argmin),
        cmocka_unit_test(test_remat_access_loop_window),
        cmocka_unit_test(test_remat_access_loop_argmin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
