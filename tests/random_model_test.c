/*
 * Randomized model-based test: random malloc / free / record_stream /
 * empty_cache / stream hold / set_capacity / bad-free operations against a
 * reference model of what must be live and pending. After every operation:
 * coop_pool_check() holds, the counters equal the model's, and allocations
 * are 512-aligned and never overlap a live or pending block.
 *
 * COOP_TEST_SEED sets the seed (printed), COOP_TEST_OPS the operation count
 * (default 10^6, split between a VMM pool and a segment pool).
 */
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

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define MAX_BLOCKS 4096
#define NUM_STREAMS 4
#define TARGET_LIVE 128
/* The pool's page size. A program that compiles this file again on another
 * backend may set its own (tests/backend_cuda_test.c: a GPU's 2 MiB). */
#ifndef RANDOM_MODEL_PAGE
#define RANDOM_MODEL_PAGE (64 * KiB)
#endif
/* Whether the operations include stream holds: an expression, evaluated at
 * each hold (the includer may turn them off, for all runs or for the
 * segments run through M.vmm: tests/backend_cuda_test.c, where a hold is a
 * stream blocked on the host, which cuMemFree may wait for forever). */
#ifndef RANDOM_MODEL_HOLDS
#define RANDOM_MODEL_HOLDS 1
#endif

/* ---- Random numbers: xorshift64*, reproducible from the seed ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    return test_xorshift64star(&rng_state);
}

static uint64_t rnd_below(uint64_t n)
{
    return rnd() % n;
}

/* Log-uniform in [1, max]. */
static uint64_t rnd_size(uint64_t max)
{
    int bits = 0;
    while ((UINT64_C(1) << bits) < max)
        bits++;
    uint64_t hi = UINT64_C(1) << rnd_below((uint64_t)bits + 1);
    uint64_t s = hi + rnd_below(hi);
    return s > max ? max : s;
}

/* ---- The model ---- */

typedef struct event_model {
    coop_stream stream;
    uint64_t generation; /* 0: complete when recorded */
} event_model;

typedef struct block_model {
    uintptr_t addr;
    uint64_t size; /* rounded */
    uint64_t requested;
    coop_stream stream;
    unsigned uses; /* bit i: used on stream i (record_stream) */
    event_model events[NUM_STREAMS];
    int num_events;
} block_model;

typedef struct model {
    block_model live[MAX_BLOCKS];
    int num_live;
    block_model pending[MAX_BLOCKS];
    int num_pending;
    bool held[NUM_STREAMS];
    uint64_t generation[NUM_STREAMS];
    uintptr_t freed[64]; /* recently freed addresses, for double frees */
    int num_freed;
    uint64_t capacity;
    bool vmm; /* the run's pool maps pages (else segments) */
} model;

static model M;

static bool event_done(const event_model *e)
{
    return e->generation == 0 || !M.held[e->stream] || M.generation[e->stream] != e->generation;
}

/* Mirrors pool_process_pending: drop pending blocks whose events all completed. */
static void model_process_pending(void)
{
    for (int i = 0; i < M.num_pending;) {
        bool done = true;
        for (int e = 0; e < M.pending[i].num_events; e++)
            done = done && event_done(&M.pending[i].events[e]);
        if (done)
            M.pending[i] = M.pending[--M.num_pending];
        else
            i++;
    }
}

static void check_against_model(coop_pool *pool, uint64_t op)
{
    coop_status st = coop_pool_check(pool);
    if (st != COOP_OK)
        fail_msg("op %llu: coop_pool_check: %s", (unsigned long long)op, coop_last_error());
    coop_stats s;
    coop_get_stats(pool, &s);
    int64_t bytes = 0, requested = 0, pending_bytes = 0;
    for (int i = 0; i < M.num_live; i++) {
        bytes += (int64_t)M.live[i].size;
        requested += (int64_t)M.live[i].requested;
    }
    for (int i = 0; i < M.num_pending; i++)
        pending_bytes += (int64_t)M.pending[i].size;
    if (s.allocation.current != M.num_live || s.allocated_bytes.current != bytes ||
        s.requested_bytes.current != requested || s.active.current != M.num_live + M.num_pending ||
        s.active_bytes.current != bytes + pending_bytes || s.capacity != M.capacity)
        fail_msg("op %llu: stats (%lld blocks %lld bytes %lld requested, active %lld / %lld, "
                 "capacity %llu) differ from the model (%d, %lld, %lld, %d / %lld, %llu)",
                 (unsigned long long)op, (long long)s.allocation.current,
                 (long long)s.allocated_bytes.current, (long long)s.requested_bytes.current,
                 (long long)s.active.current, (long long)s.active_bytes.current,
                 (unsigned long long)s.capacity, M.num_live, (long long)bytes, (long long)requested,
                 M.num_live + M.num_pending, (long long)(bytes + pending_bytes),
                 (unsigned long long)M.capacity);
    if ((uint64_t)s.reserved_bytes.current > s.capacity)
        fail_msg("op %llu: reserved %lld above capacity %llu", (unsigned long long)op,
                 (long long)s.reserved_bytes.current, (unsigned long long)s.capacity);
}

/* Walk: every allocated block is a model block with the same size, request and stream. */
typedef struct walk_ctx {
    int allocated, pending;
    const char *error;
} walk_ctx;

static int compare_block(const coop_block_info *b, void *p)
{
    walk_ctx *w = p;
    if (b->state == COOP_BLOCK_FREE)
        return 0;
    const block_model *set = b->state == COOP_BLOCK_ALLOCATED ? M.live : M.pending;
    int n = b->state == COOP_BLOCK_ALLOCATED ? M.num_live : M.num_pending;
    for (int i = 0; i < n; i++)
        if (set[i].addr == b->address) {
            if (set[i].size != b->size || set[i].requested != b->requested_size ||
                set[i].stream != b->stream || b->mapped_bytes != b->size)
                w->error = "a walked block differs from its model";
            *(b->state == COOP_BLOCK_ALLOCATED ? &w->allocated : &w->pending) += 1;
            return 0;
        }
    w->error = "the walk found a block the model does not have";
    return 1;
}

static void walk_against_model(coop_pool *pool, uint64_t op)
{
    walk_ctx w = {0};
    coop_walk(pool, NULL, compare_block, &w);
    if (w.error || w.allocated != M.num_live || w.pending != M.num_pending)
        fail_msg("op %llu: walk: %s (%d allocated, %d pending; model %d, %d)",
                 (unsigned long long)op, w.error ? w.error : "counts differ", w.allocated,
                 w.pending, M.num_live, M.num_pending);
}

static void assert_no_overlap(uintptr_t addr, uint64_t size, uint64_t op)
{
    if (addr % 512)
        fail_msg("op %llu: %#lx is not 512-aligned", (unsigned long long)op, (unsigned long)addr);
    for (int k = 0; k < 2; k++) {
        const block_model *set = k ? M.pending : M.live;
        int n = k ? M.num_pending : M.num_live;
        for (int i = 0; i < n; i++)
            if (addr < set[i].addr + set[i].size && set[i].addr < addr + size)
                fail_msg("op %llu: [%#lx, +%llu) overlaps %s block [%#lx, +%llu)",
                         (unsigned long long)op, (unsigned long)addr, (unsigned long long)size,
                         k ? "pending" : "live", (unsigned long)set[i].addr,
                         (unsigned long long)set[i].size);
    }
}

/* ---- Operations ---- */

static void op_malloc(coop_pool *pool, uint64_t op, uint64_t max_size)
{
    uint64_t size = rnd_size(max_size);
    coop_stream stream = rnd_below(NUM_STREAMS);
    unsigned flags = rnd_below(3) == 0 ? COOP_ALLOC_HIGH : COOP_ALLOC_LOW;
    uint64_t rounded = (size + 511) & ~UINT64_C(511);
    model_process_pending();
    coop_status st;
    void *p = coop_malloc(pool, size, stream, flags, &st);
    if (!p) {
        if (st != COOP_ERR_NOMEM)
            fail_msg("op %llu: malloc(%llu) failed with %s: %s", (unsigned long long)op,
                     (unsigned long long)size, coop_strerror(st), coop_last_error());
        int64_t active = 0;
        for (int i = 0; i < M.num_live; i++)
            active += (int64_t)M.live[i].size;
        for (int i = 0; i < M.num_pending; i++)
            active += (int64_t)M.pending[i].size;
        /* With no stream held, the OOM path makes every free block usable on
         * any stream; with plenty of room left, failing would be a bug, not
         * fragmentation. (A held stream keeps its free blocks to itself.) */
        bool any_held = false;
        for (int s = 0; s < NUM_STREAMS; s++)
            any_held = any_held || M.held[s];
        if (!any_held && (uint64_t)active + rounded <= M.capacity / 4)
            fail_msg("op %llu: malloc(%llu) ran out with only %lld of %llu bytes active: %s",
                     (unsigned long long)op, (unsigned long long)size, (long long)active,
                     (unsigned long long)M.capacity, coop_last_error());
        return;
    }
    assert_no_overlap((uintptr_t)p, rounded, op);
    block_model *b = &M.live[M.num_live++];
    *b = (block_model){.addr = (uintptr_t)p, .size = rounded, .requested = size, .stream = stream};
}

static void remember_freed(uintptr_t addr)
{
    if (M.num_freed < 64)
        M.freed[M.num_freed++] = addr;
    else
        M.freed[rnd_below(64)] = addr;
}

static void op_free(coop_pool *pool, uint64_t op)
{
    if (!M.num_live)
        return;
    int i = (int)rnd_below((uint64_t)M.num_live);
    block_model b = M.live[i];
    coop_status st = coop_free(pool, (void *)b.addr);
    if (st != COOP_OK)
        fail_msg("op %llu: free(%#lx): %s", (unsigned long long)op, (unsigned long)b.addr,
                 coop_last_error());
    M.live[i] = M.live[--M.num_live];
    remember_freed(b.addr);
    if (b.uses) {
        for (int s = 0; s < NUM_STREAMS; s++)
            if (b.uses & (1u << s))
                b.events[b.num_events++] = (event_model){
                    .stream = (coop_stream)s, .generation = M.held[s] ? M.generation[s] : 0};
        M.pending[M.num_pending++] = b;
    }
}

static void op_record_stream(coop_pool *pool, uint64_t op)
{
    if (!M.num_live)
        return;
    block_model *b = &M.live[rnd_below((uint64_t)M.num_live)];
    coop_stream s = rnd_below(NUM_STREAMS);
    if (coop_record_stream(pool, (void *)b->addr, s) != COOP_OK)
        fail_msg("op %llu: record_stream: %s", (unsigned long long)op, coop_last_error());
    if (s != b->stream)
        b->uses |= 1u << s;
}

static void op_hold(coop_pool *pool, uint64_t op)
{
    if (!RANDOM_MODEL_HOLDS) {
        (void)rnd_below(NUM_STREAMS); /* the same draws: a seed gives the same sequence */
        return;
    }
    coop_stream s = rnd_below(NUM_STREAMS);
    bool hold = !M.held[s];
    if (coop_host_hold_stream(pool, s, hold) != COOP_OK)
        fail_msg("op %llu: hold_stream: %s", (unsigned long long)op, coop_last_error());
    if (hold)
        M.generation[s]++;
    M.held[s] = hold;
}

static void op_empty_cache(coop_pool *pool, uint64_t op)
{
    model_process_pending();
    if (coop_empty_cache(pool) != COOP_OK)
        fail_msg("op %llu: empty_cache: %s", (unsigned long long)op, coop_last_error());
}

static void op_set_capacity(coop_pool *pool, uint64_t op, uint64_t max_capacity, uint64_t page)
{
    uint64_t c = max_capacity / 2 + rnd_below(max_capacity / 2 / page + 1) * page;
    coop_stats s;
    coop_get_stats(pool, &s);
    if (c < (uint64_t)s.reserved_bytes.current)
        model_process_pending();
    coop_status st = coop_set_capacity(pool, c);
    if (st == COOP_OK)
        M.capacity = c;
    else if (st != COOP_ERR_NOMEM)
        fail_msg("op %llu: set_capacity(%llu): %s", (unsigned long long)op, (unsigned long long)c,
                 coop_last_error());
}

/* Bad frees: the pool must refuse them with the right status and change nothing. */
static void op_bad_free(coop_pool *pool, uint64_t op)
{
    int kind = (int)rnd_below(3);
    coop_status st;
    if (kind == 0 && M.num_live) {
        block_model *b = &M.live[rnd_below((uint64_t)M.num_live)];
        if (b->size <= 512)
            return;
        st = coop_free(pool, (void *)(b->addr + 512 * (1 + rnd_below(b->size / 512 - 1))));
        if (st != COOP_ERR_INTERIOR_PTR)
            fail_msg("op %llu: interior free gave %s", (unsigned long long)op, coop_strerror(st));
    } else if (kind == 1 && M.num_freed) {
        uintptr_t a = M.freed[rnd_below((uint64_t)M.num_freed)];
        for (int i = 0; i < M.num_live; i++)
            if (M.live[i].addr == a)
                return; /* reused since: freeing it would be legal */
        st = coop_free(pool, (void *)a);
        if (st != COOP_ERR_DOUBLE_FREE && st != COOP_ERR_INTERIOR_PTR && st != COOP_ERR_FOREIGN_PTR)
            fail_msg("op %llu: double free of %#lx gave %s", (unsigned long long)op,
                     (unsigned long)a, coop_strerror(st));
    } else {
        st = coop_free(pool, &kind);
        if (st != COOP_ERR_FOREIGN_PTR)
            fail_msg("op %llu: foreign free gave %s", (unsigned long long)op, coop_strerror(st));
    }
}

static void run_model(bool vmm, uint64_t ops)
{
    const uint64_t page = RANDOM_MODEL_PAGE, capacity = 128 * MiB, max_size = 4 * MiB;
    memset(&M, 0, sizeof M);
    M.capacity = capacity;
    M.vmm = vmm;
    coop_config c;
    coop_config_default(&c);
    c.capacity = capacity;
    c.page_size = page;
    c.use_vmm = vmm;
    c.segment_size = 2 * MiB;
    coop_pool *pool;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    for (uint64_t op = 0; op < ops; op++) {
        uint64_t r = rnd_below(1000);
        /* Keep the live set near TARGET_LIVE: the per-op check walks every block. */
        uint64_t malloc_share = M.num_live < TARGET_LIVE ? 480 : 360;
        if (M.num_live + M.num_pending >= MAX_BLOCKS - 1)
            malloc_share = 0;
        if (r < malloc_share)
            op_malloc(pool, op, max_size);
        else if (r < 800)
            op_free(pool, op);
        else if (r < 880)
            op_record_stream(pool, op);
        else if (r < 950)
            op_hold(pool, op);
        else if (r < 960)
            op_empty_cache(pool, op);
        else if (r < 965)
            op_set_capacity(pool, op, capacity, page);
        else
            op_bad_free(pool, op);
        check_against_model(pool, op);
        if (op % 4096 == 0)
            walk_against_model(pool, op);
    }
    /* Drain: release holds, free everything, and the cache must empty completely. */
    for (int s = 0; s < NUM_STREAMS; s++)
        coop_host_hold_stream(pool, (coop_stream)s, false);
    while (M.num_live)
        op_free(pool, ops);
    assert_null(coop_malloc(pool, 0, 0, 0, NULL));       /* size 0: no processing */
    coop_free(pool, coop_malloc(pool, 512, 0, 0, NULL)); /* processes pending */
    assert_int_equal(coop_empty_cache(pool), COOP_OK);
    coop_stats s;
    coop_get_stats(pool, &s);
    assert_int_equal(s.active.current, 0);
    assert_int_equal(s.reserved_bytes.current, 0);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    printf("random_model: %s: %llu ops, %llu retries, %llu ooms, %llu maps, %llu unmaps, peak "
           "%lld live blocks\n",
           vmm ? "vmm" : "segments", (unsigned long long)ops,
           (unsigned long long)s.num_alloc_retries, (unsigned long long)s.num_ooms,
           (unsigned long long)s.num_maps, (unsigned long long)s.num_unmaps,
           (long long)s.allocation.peak);
    coop_pool_destroy(pool);
}

static uint64_t total_ops;

static void test_vmm(void **state)
{
    (void)state;
    run_model(true, total_ops - total_ops / 3);
}

static void test_segments(void **state)
{
    (void)state;
    run_model(false, total_ops / 3);
}

int main(void)
{
    const char *ops_env = getenv("COOP_TEST_OPS");
    uint64_t seed = test_seed("random_model_test", test_seed_from_clock());
    total_ops = ops_env ? strtoull(ops_env, NULL, 0) : 1000000;
    printf("random_model: %llu ops (COOP_TEST_OPS)\n", (unsigned long long)total_ops);
    rng_state = seed * UINT64_C(0x9E3779B97F4A7C15) | 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vmm),
        cmocka_unit_test(test_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
