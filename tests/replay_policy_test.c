/* Replay policies and engine on small hand-built traces with known answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jemalloc/jemalloc.h>

#include "replay/engine.h"
#include "replay/measure.h"
#include "replay/policy.h"
#include "replay/recorded.h"
#include "replay/report.h"
#include "replay/timeline.h"
#include "status.h"
#include "test_seed.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* ---- Building traces in memory ---- */

typedef struct built {
    trace t;
    size_t cap;
} built;

static void add(built *b, trace_event_kind kind, uint32_t id, uint64_t size, uint64_t stream)
{
    if (b->t.num_events == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->t.events = realloc(b->t.events, b->cap * sizeof *b->t.events);
        assert_non_null(b->t.events);
    }
    b->t.events[b->t.num_events++] =
        (trace_event){.kind = kind, .id = id, .size = size, .stream = stream, .time_us = -1};
    if (kind <= TRACE_FREE && id + 1 > b->t.num_ids)
        b->t.num_ids = id + 1;
}

static void alloc_ev(built *b, uint32_t id, uint64_t size)
{
    add(b, TRACE_ALLOC, id, size, 0);
}

static void free_ev(built *b, uint32_t id, uint64_t size)
{
    add(b, TRACE_FREE, id, size, 0);
}

static void built_free(built *b)
{
    free(b->t.events);
    free(b->t.live_at_start);
    free(b->t.final_segments);
}

/* Runs t under ops at capacity; asserts success, returns the run. */
static replay_run run(const built *b, const replay_policy_ops *ops, uint64_t capacity)
{
    replay_prepared p;
    assert_int_equal(replay_prepare(&b->t, &p), COOP_OK);
    replay_run r;
    assert_int_equal(replay_run_trace(&p, ops, capacity, 2 * MiB, NULL, &r), COOP_OK);
    replay_prepared_free(&p);
    return r;
}

/* ---- A policy driven directly ---- */

typedef struct driven {
    const replay_policy_ops *ops;
    void *state;
} driven;

static driven start(const replay_policy_ops *ops, uint64_t capacity)
{
    driven d = {.ops = ops};
    assert_int_equal(ops->create(capacity, 2 * MiB, &d.state), COOP_OK);
    return d;
}

static uintptr_t must_malloc(driven *d, uint64_t size, uint64_t stream)
{
    uintptr_t addr = 0;
    assert_int_equal(d->ops->malloc(d->state, size, stream, &addr), COOP_OK);
    assert_true(addr != 0);
    return addr;
}

static replay_policy_stats stats_of(driven *d)
{
    replay_policy_stats s;
    d->ops->stats(d->state, &s);
    return s;
}

/* ---- ideal ---- */

static void ideal_peak_is_peak_of_live_bytes(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 100);
    alloc_ev(&b, 1, 200);
    free_ev(&b, 0, 100);
    alloc_ev(&b, 2, 50);
    alloc_ev(&b, 3, 40); /* live: 200 + 50 + 40 = 290 < 300 */
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    assert_int_equal(p.peak_live, 300);
    assert_int_equal(p.num_ops, 5);
    replay_prepared_free(&p);
    replay_run r = run(&b, &replay_policy_ideal, GiB);
    assert_false(r.oom);
    assert_int_equal(r.peak_reserved, 300);
    assert_int_equal(r.map_bytes, 300);
    /* one byte less than the peak: OOM at the second allocation (event 1) */
    r = run(&b, &replay_policy_ideal, 299);
    assert_true(r.oom);
    assert_int_equal(r.oom_event, 1);
    built_free(&b);
}

/* ideal maps each byte once, at the first need: map_bytes is the peak of live
 * bytes, however the frees and allocations before it interleave (a third
 * allocation that raises the peak by 1 MiB maps that 1 MiB, not its 2 MiB). */
static void ideal_maps_only_the_rise_of_the_peak(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, MiB);
    alloc_ev(&b, 1, MiB);
    free_ev(&b, 0, MiB);
    alloc_ev(&b, 2, 2 * MiB); /* live 3 MiB: the peak rises by 1 MiB */
    replay_run r = run(&b, &replay_policy_ideal, GiB);
    assert_false(r.oom);
    assert_int_equal(r.peak_reserved, 3 * MiB);
    assert_int_equal(r.map_bytes, 3 * MiB);
    built_free(&b);
}

/* free_requested keeps the bytes live: only free_completed releases them. */
static void free_requested_does_not_release(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 1000);
    add(&b, TRACE_FREE_REQUESTED, 0, 1000, 0);
    alloc_ev(&b, 1, 1000);
    free_ev(&b, 0, 1000);
    free_ev(&b, 1, 1000);
    replay_run r = run(&b, &replay_policy_ideal, GiB);
    assert_int_equal(r.peak_reserved, 2000);
    built_free(&b);
}

/* A free without an allocation (nothing known about the block) is skipped. */
static void unknown_free_is_skipped(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 1, 500);
    free_ev(&b, 0, 700); /* id 0 was never allocated */
    free_ev(&b, 1, 500);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    assert_int_equal(p.peak_live, 500);
    assert_int_equal(p.unknown_frees, 1);
    assert_int_equal(p.num_ops, 2);
    replay_prepared_free(&p);
    replay_run r = run(&b, &replay_policy_ideal, GiB);
    assert_false(r.oom);
    assert_int_equal(r.peak_reserved, 500);
    built_free(&b);
}

static void double_alloc_is_an_input_error(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 100);
    alloc_ev(&b, 0, 100);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_ERR_INVALID);
    built_free(&b);
}

/* Sizes below 2^56 each can still add up past 2^64: 128 live blocks of
 * 2^56 - 1 bytes make 2^63 - 128, the 129th passes 2^63, and 257 wrapped
 * the peak (it was printed as a negative JSON integer). */
static void live_bytes_stay_below_2_63(void **unused)
{
    (void)unused;
    const uint64_t big = (1ull << 56) - 1;
    built b = {0};
    for (uint32_t id = 0; id < 128; id++)
        alloc_ev(&b, id, big);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    assert_true(p.peak_live == 128 * big);
    alloc_ev(&b, 128, big);
    assert_int_equal(replay_prepare(&b.t, &p), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "event 128 (id 128, 72057594037927935 bytes) brings "
                                              "the live bytes to 2^63 or more"));
    built_free(&b);
}

/* The bound is 2^63 itself: live bytes of exactly 2^63 are refused, one
 * byte less is not. */
static void live_bytes_of_exactly_2_63_are_refused(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 1ull << 62);
    alloc_ev(&b, 1, (1ull << 62) - 1);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    assert_true(p.peak_live == (1ull << 63) - 1);
    free_ev(&b, 1, (1ull << 62) - 1);
    alloc_ev(&b, 2, 1ull << 62);
    assert_int_equal(replay_prepare(&b.t, &p), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "event 3 (id 2, 4611686018427387904 bytes) brings "
                                              "the live bytes to 2^63 or more"));
    built_free(&b);
}

/* ---- torch ---- */

/* A trace that allocates no bytes (a header only, or only size-0 blocks) has
 * a peak of 0, and the bisection then creates each policy at capacity 0:
 * torch asked its backend for a 0-byte device and was "skipped" (exit 1). */
static void torch_runs_at_capacity_zero(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, 0);
    uintptr_t addr = 0;
    assert_int_equal(d.ops->malloc(d.state, 512, 0, &addr), COOP_ERR_NOMEM);
    d.ops->destroy(d.state);

    built b = {0};
    alloc_ev(&b, 0, 0);
    free_ev(&b, 0, 0);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    assert_int_equal(p.peak_live, 0);
    uint64_t cap = 1;
    replay_run at;
    assert_int_equal(replay_min_capacity(&p, &replay_policy_torch, 2 * MiB, 0, 0, &cap, &at),
                     COOP_OK);
    assert_int_equal(cap, 0);
    built_free(&b);
}

/* A request near 2^64 rounded up to 512 bytes wrapped to a small block,
 * which was then placed in a 2 MiB segment: it must be out of memory. */
static void torch_refuses_sizes_that_round_past_2_64(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, GiB);
    uintptr_t addr = 0;
    static const uint64_t sizes[] = {UINT64_MAX, UINT64_MAX - 511, 1ull << 63};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        assert_int_equal(d.ops->malloc(d.state, sizes[i], 0, &addr), COOP_ERR_NOMEM);
    assert_int_equal(stats_of(&d).reserved_bytes, 0);
    d.ops->destroy(d.state);
}

static void torch_medium_request_takes_one_20mib_segment(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, GiB);
    uintptr_t a = must_malloc(&d, 3 * MiB / 2, 0);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 20 * MiB);
    assert_int_equal(s.active_bytes, 3 * MiB / 2);
    assert_int_equal(s.free_bytes, 20 * MiB - 3 * MiB / 2);
    /* a second one splits the same segment, right after the first */
    uintptr_t b2 = must_malloc(&d, 3 * MiB / 2, 0);
    assert_int_equal(b2, a + 3 * MiB / 2);
    assert_int_equal(stats_of(&d).reserved_bytes, 20 * MiB);
    d.ops->destroy(d.state);
}

static void torch_segment_sizes(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, GiB);
    must_malloc(&d, 1000, 0); /* small: 2 MiB segment, 1024 bytes */
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 2 * MiB);
    assert_int_equal(s.active_bytes, 1024);
    must_malloc(&d, 11 * MiB + 1, 0); /* >= 10 MiB: rounded up to 2 MiB */
    s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 2 * MiB + 12 * MiB);
    must_malloc(&d, 1 * MiB, 0); /* exactly 1 MiB: small, fits the first small segment */
    assert_int_equal(stats_of(&d).reserved_bytes, 14 * MiB);
    must_malloc(&d, 1 * MiB, 0); /* 2 MiB - 1024 - 1 MiB left there: a new small segment */
    assert_int_equal(stats_of(&d).reserved_bytes, 16 * MiB);
    d.ops->destroy(d.state);
}

/* kMinLargeAlloc (10 MiB) is the first size with a segment of its own, the
 * request rounded up to 2 MiB: exactly 10 MiB takes a 10 MiB segment, and
 * 10 MiB - 512 still a shared 20 MiB one. */
static void torch_10_mib_takes_a_segment_of_its_own(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, GiB);
    must_malloc(&d, 10 * MiB, 0);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 10 * MiB);
    assert_int_equal(s.free_bytes, 0);
    must_malloc(&d, 10 * MiB - 512, 0);
    s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 30 * MiB);
    assert_int_equal(s.free_bytes, 10 * MiB + 512);
    d.ops->destroy(d.state);
}

/* The small pool splits a remainder of exactly kMinBlockSize (512 bytes):
 * 1 MiB and 1 MiB - 512 leave 512 bytes of the 2 MiB segment free, where a
 * 1-byte request then goes, with no second segment. */
static void torch_small_pool_splits_a_512_byte_remainder(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, GiB);
    uintptr_t a = must_malloc(&d, MiB, 0);
    uintptr_t b2 = must_malloc(&d, MiB - 512, 0);
    assert_int_equal(b2, a + MiB);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.active_bytes, 2 * MiB - 512);
    assert_int_equal(s.free_bytes, 512);
    assert_int_equal(must_malloc(&d, 1, 0), b2 + MiB - 512);
    assert_int_equal(stats_of(&d).reserved_bytes, 2 * MiB);
    d.ops->destroy(d.state);
}

/* Best fit by size, then lowest address; large-pool remainders <= 1 MiB are not split. */
static void torch_best_fit_order(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, GiB);
    uintptr_t a = must_malloc(&d, 4 * MiB, 0);
    uintptr_t b2 = must_malloc(&d, 2 * MiB, 0);
    uintptr_t c = must_malloc(&d, 6 * MiB, 0);
    uintptr_t e = must_malloc(&d, 2 * MiB, 0); /* leaves a 6 MiB tail */
    assert_int_equal(b2, a + 4 * MiB);
    assert_int_equal(c, b2 + 2 * MiB);
    assert_int_equal(e, c + 6 * MiB);
    assert_int_equal(d.ops->free(d.state, a, 4 * MiB), COOP_OK);
    assert_int_equal(d.ops->free(d.state, c, 6 * MiB), COOP_OK);
    /* 3 MiB: the 4 MiB block fits best; its 1 MiB remainder is not split */
    assert_int_equal(must_malloc(&d, 3 * MiB, 0), a);
    assert_int_equal(stats_of(&d).active_bytes, 4 * MiB + 2 * MiB + 2 * MiB);
    /* 5 MiB: two 6 MiB blocks (c and the tail); the lower address wins */
    assert_int_equal(must_malloc(&d, 5 * MiB, 0), c);
    assert_int_equal(stats_of(&d).reserved_bytes, 20 * MiB);
    d.ops->destroy(d.state);
}

static void torch_blocks_are_per_stream(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, GiB);
    uintptr_t a = must_malloc(&d, 3 * MiB, 1);
    assert_int_equal(d.ops->free(d.state, a, 3 * MiB), COOP_OK);
    uintptr_t b2 = must_malloc(&d, 3 * MiB, 2);
    assert_true(b2 != a);
    assert_int_equal(stats_of(&d).reserved_bytes, 40 * MiB);
    assert_int_equal(must_malloc(&d, 3 * MiB, 1), a); /* stream 1 gets its block back */
    d.ops->destroy(d.state);
}

static void torch_frees_cached_segments_and_retries(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, 40 * MiB);
    uintptr_t a = must_malloc(&d, 3 * MiB / 2, 0);
    assert_int_equal(d.ops->free(d.state, a, 3 * MiB / 2), COOP_OK);
    must_malloc(&d, 30 * MiB, 0); /* 20 + 30 > 40: the cached 20 MiB goes */
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 30 * MiB);
    assert_int_equal(s.map_bytes, 50 * MiB);
    /* a split segment is not released: 30 + 20 > 40 with the 12 MiB one kept */
    driven d2 = start(&replay_policy_torch, 40 * MiB);
    must_malloc(&d2, 12 * MiB, 0);
    uintptr_t x;
    assert_int_equal(d2.ops->malloc(d2.state, 30 * MiB, 0, &x), COOP_ERR_NOMEM);
    d.ops->destroy(d.state);
    d2.ops->destroy(d2.state);
}

/* Freed neighbours merge, and the largest free block reflects it. */
static void torch_merges_neighbours(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, GiB);
    uintptr_t a = must_malloc(&d, 4 * MiB, 0);
    uintptr_t b2 = must_malloc(&d, 4 * MiB, 0);
    uintptr_t c = must_malloc(&d, 4 * MiB, 0);
    assert_int_equal(stats_of(&d).largest_free, 8 * MiB);
    assert_int_equal(d.ops->free(d.state, a, 4 * MiB), COOP_OK);
    assert_int_equal(d.ops->free(d.state, c, 4 * MiB), COOP_OK);
    assert_int_equal(stats_of(&d).largest_free, 12 * MiB); /* c merged with the tail */
    assert_int_equal(d.ops->free(d.state, b2, 4 * MiB), COOP_OK);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.largest_free, 20 * MiB);
    assert_int_equal(s.free_bytes, 20 * MiB);
    assert_int_equal(s.active_bytes, 0);
    d.ops->destroy(d.state);
}

/* map_bytes stops at UINT64_MAX: 2^11 maps of 2^53 bytes (a range per
 * stream, the other stream's unmapped to make room) took it past 2^64, and
 * it wrapped to a small figure in the report's map column. */
static void map_bytes_saturate(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, 3ull << 52);
    const uint64_t size = 1ull << 53;
    for (unsigned i = 0; i < 2050; i++) {
        uintptr_t a = must_malloc(&d, size, i % 2);
        assert_int_equal(d.ops->free(d.state, a, size), COOP_OK);
    }
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.map_bytes, UINT64_MAX);
    assert_true(s.reserved_bytes >= size && s.reserved_bytes <= 3ull << 52);
    d.ops->destroy(d.state);
    assert_int_equal(saturating_add_u64(UINT64_MAX - 1, 1), UINT64_MAX);
    assert_int_equal(saturating_add_u64(UINT64_MAX - 1, 2), UINT64_MAX);
    assert_int_equal(saturating_add_u64(5, 7), 12);
}

/* ---- torch-expandable ---- */

/* Pages of 20 MiB mapped as the large pool's range grows; a request that
 * outgrows the free tail maps from the tail's end and starts in the tail. */
static void expandable_maps_pages_as_needed(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, GiB);
    uintptr_t a = must_malloc(&d, 3 * MiB, 0);
    assert_int_equal(stats_of(&d).reserved_bytes, 20 * MiB);
    assert_int_equal(must_malloc(&d, 3 * MiB, 0), a + 3 * MiB);
    /* 30 MiB: the 14 MiB free tail plus one more page (not two) */
    assert_int_equal(must_malloc(&d, 30 * MiB, 0), a + 6 * MiB);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 40 * MiB);
    assert_int_equal(s.free_bytes, 4 * MiB);
    assert_int_equal(s.largest_free, 4 * MiB);
    assert_int_equal(s.active_bytes, 36 * MiB);
    /* the small pool grows its own range in 2 MiB pages */
    uintptr_t small = must_malloc(&d, 100 * 1024, 0);
    assert_true(small >= a + 40 * MiB);
    assert_int_equal(stats_of(&d).reserved_bytes, 42 * MiB);
    assert_int_equal(stats_of(&d).map_bytes, 42 * MiB);
    d.ops->destroy(d.state);
}

/* With expandable segments the large pool splits off any remainder of 512
 * bytes or more (without them, only one above 1 MiB). */
/* Exactly 1 MiB (kSmallSize) is a small request: a 2 MiB small page, not a
 * 20 MiB large one. */
static void expandable_1_mib_is_small(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, GiB);
    must_malloc(&d, MiB, 0);
    assert_int_equal(stats_of(&d).reserved_bytes, 2 * MiB);
    must_malloc(&d, MiB + 1, 0);
    assert_int_equal(stats_of(&d).reserved_bytes, 22 * MiB);
    d.ops->destroy(d.state);
}

static void expandable_splits_small_remainders(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, GiB);
    uintptr_t a = must_malloc(&d, 4 * MiB, 0);
    must_malloc(&d, 4 * MiB, 0);
    assert_int_equal(d.ops->free(d.state, a, 4 * MiB), COOP_OK);
    assert_int_equal(must_malloc(&d, 4 * MiB - 512, 0), a);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.active_bytes, 8 * MiB - 512);
    assert_int_equal(s.free_bytes, 12 * MiB + 512);
    d.ops->destroy(d.state);
}

/* Best fit passes over a block that could grow into unmapped space for a
 * larger one that cannot: the free tail (8.5 MiB, before the unmapped rest)
 * fits an 8 MiB request best by size, but the 9.5 MiB hole is taken. */
static void expandable_prefers_blocks_that_cannot_grow(void **unused)
{
    (void)unused;
    const uint64_t hole = 19 * MiB / 2;
    driven d = start(&replay_policy_torch_expandable, GiB);
    uintptr_t x = must_malloc(&d, hole, 0);
    uintptr_t y = must_malloc(&d, 2 * MiB, 0);
    assert_int_equal(y, x + hole);
    assert_int_equal(d.ops->free(d.state, x, hole), COOP_OK);
    assert_int_equal(must_malloc(&d, 8 * MiB, 0), x);
    /* the default emulation, same requests in one 20 MiB segment, takes the tail */
    driven t = start(&replay_policy_torch, GiB);
    uintptr_t tx = must_malloc(&t, hole, 0);
    assert_int_equal(must_malloc(&t, 2 * MiB, 0), tx + hole);
    assert_int_equal(t.ops->free(t.state, tx, hole), COOP_OK);
    assert_int_equal(must_malloc(&t, 8 * MiB, 0), tx + hole + 2 * MiB);
    d.ops->destroy(d.state);
    t.ops->destroy(t.state);
}

/* Equal growth ties to the block first in the free tree (smaller, or at a
 * lower address): two 4 MiB holes, each before an allocated block, take a
 * 4 MiB request at the lower one, as torch's get_free_block stops at the
 * first block that the next does not beat. */
static void expandable_ties_go_to_the_lower_address(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, GiB);
    uintptr_t x = must_malloc(&d, 4 * MiB, 0);
    must_malloc(&d, 2 * MiB, 0);
    uintptr_t z = must_malloc(&d, 4 * MiB, 0);
    must_malloc(&d, 2 * MiB, 0);
    assert_int_equal(z, x + 6 * MiB);
    assert_int_equal(d.ops->free(d.state, z, 4 * MiB), COOP_OK);
    assert_int_equal(d.ops->free(d.state, x, 4 * MiB), COOP_OK);
    assert_int_equal(must_malloc(&d, 4 * MiB, 0), x);
    assert_int_equal(must_malloc(&d, 4 * MiB, 0), z);
    d.ops->destroy(d.state);
}

/* Out of capacity: free blocks' whole pages are unmapped (a range left
 * wholly unmapped is released) and the request tried once more. */
static void expandable_unmaps_free_pages_and_retries(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, 40 * MiB);
    uintptr_t a = must_malloc(&d, 30 * MiB, 0); /* two pages */
    assert_int_equal(stats_of(&d).reserved_bytes, 40 * MiB);
    assert_int_equal(d.ops->free(d.state, a, 30 * MiB), COOP_OK);
    must_malloc(&d, 100 * 1024, 0); /* a 2 MiB small page: 42 > 40 */
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 2 * MiB);
    assert_int_equal(s.map_bytes, 42 * MiB);
    assert_int_equal(s.free_bytes, 2 * MiB - 100 * 1024);
    /* a page only partly free stays: 30 MiB live keeps both pages */
    driven e = start(&replay_policy_torch_expandable, 40 * MiB);
    must_malloc(&e, 30 * MiB, 0);
    uintptr_t x;
    assert_int_equal(e.ops->malloc(e.state, 100 * 1024, 0, &x), COOP_ERR_NOMEM);
    assert_int_equal(stats_of(&e).reserved_bytes, 40 * MiB);
    /* the small segment made for it stays, wholly unmapped: not in the
     * list of whole free segments, which holds mapped ones only */
    assert_int_equal(e.ops->check(e.state), COOP_OK);
    /* after the failure, frees and mallocs still work */
    assert_int_equal(must_malloc(&e, 10 * MiB, 0) % (2 * MiB), 0);
    d.ops->destroy(d.state);
    e.ops->destroy(e.state);
}

/* Requests beyond any range or capacity are out of memory, not a crash: a
 * capacity near 2^64 (ranges of 2^62, whose labels run out after a few) and
 * requests up to 2^64 - 1, many times over. */
static void expandable_refuses_what_no_range_holds(void **unused)
{
    (void)unused;
    uintptr_t x;
    driven d = start(&replay_policy_torch_expandable, UINT64_MAX);
    /* each failed request leaves its stream's last range mapped and free (as
     * in torch): with four streams the three slots run out, and the fourth
     * stream's request gets one only after the release */
    for (int i = 0; i < 100; i++) {
        assert_int_equal(d.ops->malloc(d.state, UINT64_MAX, i % 4, &x), COOP_ERR_NOMEM);
        assert_int_equal(d.ops->malloc(d.state, UINT64_MAX >> 1, i % 4, &x), COOP_ERR_NOMEM);
    }
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.active_bytes, 0);
    assert_true(s.reserved_bytes >= UINT64_MAX / 4); /* a whole range, mapped and free */
    assert_int_equal(s.reserved_bytes, s.free_bytes);
    d.ops->destroy(d.state);
    /* ranges of 2^62: three labels. Three streams' blocks hold them; the
     * fourth stream is out of memory until a range is wholly free again */
    d = start(&replay_policy_torch_expandable, UINT64_MAX);
    uintptr_t held[3];
    for (int i = 0; i < 3; i++)
        held[i] = must_malloc(&d, 3 * MiB, (uint64_t)i);
    assert_int_equal(d.ops->malloc(d.state, 3 * MiB, 3, &x), COOP_ERR_NOMEM);
    assert_int_equal(d.ops->free(d.state, held[0], 3 * MiB), COOP_OK);
    assert_int_equal(must_malloc(&d, 3 * MiB, 3), held[0]); /* its slot, labelled again */
    assert_int_equal(stats_of(&d).reserved_bytes, 60 * MiB);
    d.ops->destroy(d.state);
    driven e = start(&replay_policy_torch_expandable, 0);
    assert_int_equal(e.ops->malloc(e.state, 1, 0, &x), COOP_ERR_NOMEM);
    e.ops->destroy(e.state);
}

/* Each stream grows its own range; a block freed on one is not reused on another. */
static void expandable_ranges_are_per_stream(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, GiB);
    uintptr_t a = must_malloc(&d, 3 * MiB, 1);
    assert_int_equal(d.ops->free(d.state, a, 3 * MiB), COOP_OK);
    uintptr_t b2 = must_malloc(&d, 3 * MiB, 2);
    assert_true(b2 != a);
    assert_int_equal(stats_of(&d).reserved_bytes, 40 * MiB);
    assert_int_equal(must_malloc(&d, 3 * MiB, 1), a);
    assert_int_equal(d.ops->free(d.state, a + 1, 3 * MiB), COOP_ERR_FOREIGN_PTR);
    d.ops->destroy(d.state);
}

/* Random mallocs and frees on two streams, sizes log-uniform from 256 B to
 * 64 MiB, in 1 GiB, under either torch emulation: after every call, live
 * blocks do not overlap; every reserved byte is in an allocated or a free
 * block (reserved == active + free) and the policy's own check passes;
 * reserved bytes are whole 2 MiB pages within the capacity; an allocation
 * holds its rounded size and less than the policy's split rule leaves (512
 * bytes; `torch`'s large pool: 1 MiB); out of memory happens only where the
 * segment or pages the request needs would pass the capacity once cached
 * segments or free pages were released. */
#define XS_LIVE 256

/* The device bytes a request of rounded bytes needs when no free block fits. */
static uint64_t bytes_needed(const replay_policy_ops *ops, uint64_t rounded)
{
    if (ops == &replay_policy_torch_expandable) {
        uint64_t page = rounded <= MiB ? 2 * MiB : 20 * MiB;
        return (rounded + page - 1) / page * page;
    }
    if (rounded <= MiB)
        return 2 * MiB;
    return rounded < 10 * MiB ? 20 * MiB : (rounded + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
}

static void random_calls_keep_the_invariants(const replay_policy_ops *ops)
{
    uint64_t rng = test_seed("replay_policy_test", 0x5eed) | 1;
    const uint64_t capacity = GiB;
    const uint64_t slack = ops == &replay_policy_torch ? MiB + 1 : 512;
    driven d = start(ops, capacity);
    struct {
        uintptr_t addr;
        uint64_t size, rounded;
    } live[XS_LIVE] = {{0}};
    uint64_t live_rounded = 0, ooms = 0, calls = 0;
    for (int step = 0; step < 20000; step++) {
        size_t i = test_xorshift64(&rng) % XS_LIVE;
        if (live[i].addr) {
            assert_int_equal(d.ops->free(d.state, live[i].addr, live[i].size), COOP_OK);
            live_rounded -= live[i].rounded;
            live[i].addr = 0;
        } else {
            /* log-uniform: 2^(8 + u * 18) */
            double u = (double)(test_xorshift64(&rng) >> 11) / 9007199254740992.0;
            uint64_t size = (uint64_t)(256.0 * __builtin_exp2(u * 18.0));
            uint64_t stream = test_xorshift64(&rng) % 2;
            uint64_t rounded = size < 512 ? 512 : (size + 511) / 512 * 512;
            uintptr_t addr = 0;
            coop_status st = d.ops->malloc(d.state, size, stream, &addr);
            calls++;
            if (st == COOP_ERR_NOMEM) {
                ooms++;
                /* only when what it needed would pass the capacity, after
                 * the release */
                assert_true(stats_of(&d).reserved_bytes + bytes_needed(ops, rounded) > capacity);
            } else {
                assert_int_equal(st, COOP_OK);
                for (size_t j = 0; j < XS_LIVE; j++)
                    if (live[j].addr)
                        assert_true(addr + rounded <= live[j].addr ||
                                    live[j].addr + live[j].rounded <= addr);
                live[i].addr = addr;
                live[i].size = size;
                live[i].rounded = rounded;
                live_rounded += rounded;
            }
        }
        if (d.ops->check(d.state) != COOP_OK)
            fail_msg("step %d: %s", step, coop_last_error());
        replay_policy_stats s = stats_of(&d);
        assert_int_equal(s.reserved_bytes, s.active_bytes + s.free_bytes);
        assert_true(s.reserved_bytes <= capacity);
        assert_int_equal(s.reserved_bytes % (2 * MiB), 0);
        assert_true(s.largest_free <= s.free_bytes);
        assert_true(s.active_bytes >= live_rounded);
        assert_true(s.active_bytes - live_rounded < slack * XS_LIVE);
    }
    /* both outcomes were exercised */
    assert_true(ooms > 0 && ooms < calls);
    for (size_t i = 0; i < XS_LIVE; i++)
        if (live[i].addr)
            assert_int_equal(d.ops->free(d.state, live[i].addr, live[i].size), COOP_OK);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.active_bytes, 0);
    assert_int_equal(s.free_bytes, s.reserved_bytes);
    d.ops->destroy(d.state);
}

static void torch_random_calls_keep_the_invariants(void **unused)
{
    (void)unused;
    random_calls_keep_the_invariants(&replay_policy_torch);
}

static void expandable_random_calls_keep_the_invariants(void **unused)
{
    (void)unused;
    random_calls_keep_the_invariants(&replay_policy_torch_expandable);
}

/* Every placement policy (coop, coop-segments, torch, torch-expandable,
 * jemalloc, ideal) under random mallocs and frees on two streams, sizes
 * log-uniform from 256 B to 64 MiB, in 256 MiB, so that both outcomes
 * happen: malloc places a block (non-zero address) or reports out of memory,
 * nothing else; live blocks never overlap over their requested bytes;
 * reserved bytes stay within the capacity and never pass the bytes ever
 * mapped; active bytes cover the live requested bytes; the largest free block
 * fits in the free bytes; the policy's own check passes where it has one.
 * Where free blocks tile the reservation (both torch emulations, jemalloc's
 * committed ranges, ideal's nothing), reserved == active + free, and ideal's
 * active bytes are the live requested bytes. With every block freed no active
 * byte is left. (coop's free bytes include unmapped address space: only the
 * common checks apply to it.) */
#define ALL_LIVE 64

static void every_policy_keeps_its_accounting(void **unused)
{
    (void)unused;
    size_t count;
    const replay_policy_ops *const *all = replay_policy_all(&count);
    const uint64_t capacity = 256 * MiB;
    for (size_t k = 0; k < count; k++) {
        const replay_policy_ops *ops = all[k];
        bool tiles = ops == &replay_policy_torch || ops == &replay_policy_torch_expandable ||
                     ops == &replay_policy_jemalloc || ops == &replay_policy_ideal;
        uint64_t rng = test_seed("replay_policy_test", 0x5eed) | 1;
        driven d = start(ops, capacity);
        struct {
            uintptr_t addr;
            uint64_t size;
        } live[ALL_LIVE] = {{0}};
        uint64_t live_bytes = 0, ooms = 0, placed = 0;
        for (int step = 0; step < 4000; step++) {
            size_t i = test_xorshift64(&rng) % ALL_LIVE;
            if (live[i].addr) {
                if (d.ops->free(d.state, live[i].addr, live[i].size) != COOP_OK)
                    fail_msg("%s step %d: free refused: %s", ops->name, step, coop_last_error());
                live_bytes -= live[i].size;
                live[i].addr = 0;
            } else {
                double u = (double)(test_xorshift64(&rng) >> 11) / 9007199254740992.0;
                uint64_t size = (uint64_t)(256.0 * __builtin_exp2(u * 18.0));
                uint64_t stream = test_xorshift64(&rng) % 2;
                uintptr_t addr = 0;
                coop_status st = d.ops->malloc(d.state, size, stream, &addr);
                if (st == COOP_ERR_NOMEM) {
                    ooms++;
                } else {
                    if (st != COOP_OK || !addr)
                        fail_msg("%s step %d: malloc returned %d, address %#llx: %s", ops->name,
                                 step, (int)st, (unsigned long long)addr, coop_last_error());
                    for (size_t j = 0; j < ALL_LIVE; j++)
                        if (live[j].addr &&
                            !(addr + size <= live[j].addr || live[j].addr + live[j].size <= addr))
                            fail_msg("%s step %d: overlapping live blocks", ops->name, step);
                    live[i].addr = addr;
                    live[i].size = size;
                    live_bytes += size;
                    placed++;
                }
            }
            replay_policy_stats s = stats_of(&d);
            if (s.reserved_bytes > capacity || s.reserved_bytes > s.map_bytes ||
                s.active_bytes < live_bytes ||
                (s.has_free_blocks && s.largest_free > s.free_bytes) ||
                (tiles &&
                 (!s.has_free_blocks || s.reserved_bytes != s.active_bytes + s.free_bytes)) ||
                (ops == &replay_policy_ideal && s.active_bytes != live_bytes))
                fail_msg("%s step %d: reserved %llu (mapped %llu), active %llu for %llu live, "
                         "free %llu, largest %llu",
                         ops->name, step, (unsigned long long)s.reserved_bytes,
                         (unsigned long long)s.map_bytes, (unsigned long long)s.active_bytes,
                         (unsigned long long)live_bytes, (unsigned long long)s.free_bytes,
                         (unsigned long long)s.largest_free);
            if (d.ops->check && d.ops->check(d.state) != COOP_OK)
                fail_msg("%s step %d: %s", ops->name, step, coop_last_error());
        }
        if (!ooms || !placed)
            fail_msg("%s: %llu placed, %llu out of memory: both must happen", ops->name,
                     (unsigned long long)placed, (unsigned long long)ooms);
        for (size_t i = 0; i < ALL_LIVE; i++)
            if (live[i].addr)
                assert_int_equal(d.ops->free(d.state, live[i].addr, live[i].size), COOP_OK);
        replay_policy_stats s = stats_of(&d);
        if (s.active_bytes || (tiles && s.free_bytes != s.reserved_bytes))
            fail_msg("%s: all freed, yet %llu active and %llu free of %llu reserved", ops->name,
                     (unsigned long long)s.active_bytes, (unsigned long long)s.free_bytes,
                     (unsigned long long)s.reserved_bytes);
        d.ops->destroy(d.state);
    }
}

/* ---- coop ---- */

/* A snapshot's stream -1 (all ones, the pool's own "any stream" tag) is
 * replayed as a stream of its own, not refused. */
static void coop_takes_the_all_ones_stream(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_coop, GiB);
    uintptr_t a = must_malloc(&d, 4096, UINT64_MAX);
    assert_int_equal(d.ops->free(d.state, a, 4096), COOP_OK);
    d.ops->destroy(d.state);
}

static void coop_maps_whole_pages(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_coop, GiB);
    uintptr_t a = must_malloc(&d, 3 * MiB / 2, 0);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 2 * MiB);
    assert_int_equal(s.map_bytes, 2 * MiB);
    assert_int_equal(s.active_bytes, 3 * MiB / 2);
    must_malloc(&d, 3 * MiB / 2, 0); /* straddles into a second page */
    assert_int_equal(stats_of(&d).reserved_bytes, 4 * MiB);
    assert_int_equal(d.ops->free(d.state, a, 3 * MiB / 2), COOP_OK);
    assert_int_equal(stats_of(&d).active_bytes, 3 * MiB / 2);
    d.ops->destroy(d.state);
}

static void coop_segments_count_segment_bytes_as_mapped(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_coop_segments, GiB);
    must_malloc(&d, 3 * MiB / 2, 0);
    replay_policy_stats s = stats_of(&d);
    assert_true(s.reserved_bytes >= 3 * MiB / 2);
    assert_int_equal(s.map_bytes, s.reserved_bytes);
    d.ops->destroy(d.state);
}

/* ---- jemalloc ---- */

static void jemalloc_places_in_its_range_within_capacity(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_jemalloc, 64 * MiB);
    uintptr_t a = must_malloc(&d, 3 * MiB, 0);
    uintptr_t b2 = must_malloc(&d, 100, 0);
    assert_true(a != b2);
    replay_policy_stats s = stats_of(&d);
    assert_true(s.reserved_bytes >= 3 * MiB + 100);
    assert_true(s.reserved_bytes <= 64 * MiB);
    assert_true(s.active_bytes >= 3 * MiB + 100);
    /* beyond the capacity: OOM, not a crash */
    uintptr_t x;
    assert_int_equal(d.ops->malloc(d.state, 100 * MiB, 0, &x), COOP_ERR_NOMEM);
    assert_int_equal(d.ops->free(d.state, a, 3 * MiB), COOP_OK);
    assert_int_equal(d.ops->free(d.state, b2, 100), COOP_OK);
    assert_int_equal(stats_of(&d).active_bytes, 0);
    d.ops->destroy(d.state);
}

/* Page alignment (against cache_oblivious's random offsets) is for large
 * sizes only: jemalloc's largest small size class keeps its own usable
 * size, where a page-aligned request would round it up to whole pages. */
static void jemalloc_keeps_the_largest_small_size_unaligned(void **unused)
{
    (void)unused;
    unsigned nbins = 0;
    size_t small_max = 0, len = sizeof nbins;
    assert_int_equal(mallctl("arenas.nbins", &nbins, &len, NULL, 0), 0);
    assert_true(nbins > 1);
    char name[64];
    snprintf(name, sizeof name, "arenas.bin.%u.size", nbins - 1);
    len = sizeof small_max;
    assert_int_equal(mallctl(name, &small_max, &len, NULL, 0), 0);
    driven d = start(&replay_policy_jemalloc, 64 * MiB);
    uintptr_t a = must_malloc(&d, small_max, 0);
    assert_int_equal(stats_of(&d).active_bytes, small_max);
    uintptr_t b = must_malloc(&d, small_max + 1, 0); /* the first large size: a page multiple */
    assert_int_equal(stats_of(&d).active_bytes, small_max + nallocx(small_max + 1, 0));
    assert_int_equal(d.ops->free(d.state, a, small_max), COOP_OK);
    assert_int_equal(d.ops->free(d.state, b, small_max + 1), COOP_OK);
    assert_int_equal(stats_of(&d).active_bytes, 0);
    d.ops->destroy(d.state);
}

/* ---- the same calls, the same figures ---- */

/* Every placement policy, two instances alive at once (so at two different
 * base addresses, as two runs get under ASLR), given the same random mallocs
 * and frees (sizes log-uniform from 256 B to 64 MiB, two streams): each
 * malloc has the same outcome in both, each block lies at the same offset
 * from the instance's first block, and the figures (reserved, mapped,
 * active, free, largest free) agree after every call. jemalloc's
 * cache-oblivious offsets, drawn from a generator seeded with an address,
 * once gave its largest free range (frag_mean, frag_max) other values from
 * run to run. */
static void every_policy_repeats_at_another_base(void **unused)
{
    (void)unused;
    size_t count;
    const replay_policy_ops *const *all = replay_policy_all(&count);
    const uint64_t capacity = 256 * MiB;
    for (size_t k = 0; k < count; k++) {
        const replay_policy_ops *ops = all[k];
        uint64_t rng = test_seed("replay_policy_test", 0x5eed) | 1;
        driven d[2] = {start(ops, capacity), start(ops, capacity)};
        uintptr_t live[2][ALL_LIVE] = {{0}}, first[2] = {0};
        uint64_t sizes[ALL_LIVE] = {0};
        for (int step = 0; step < 2000; step++) {
            size_t i = test_xorshift64(&rng) % ALL_LIVE;
            if (live[0][i]) {
                for (int c = 0; c < 2; c++)
                    assert_int_equal(d[c].ops->free(d[c].state, live[c][i], sizes[i]), COOP_OK);
                live[0][i] = live[1][i] = 0;
            } else {
                double u = (double)(test_xorshift64(&rng) >> 11) / 9007199254740992.0;
                uint64_t size = (uint64_t)(256.0 * __builtin_exp2(u * 18.0));
                uint64_t stream = test_xorshift64(&rng) % 2;
                coop_status st[2];
                for (int c = 0; c < 2; c++) {
                    st[c] = d[c].ops->malloc(d[c].state, size, stream, &live[c][i]);
                    if (st[c] == COOP_OK && !first[c])
                        first[c] = live[c][i];
                }
                if (st[0] != st[1])
                    fail_msg("%s step %d: malloc(%llu) returned %d in one, %d in the other",
                             ops->name, step, (unsigned long long)size, (int)st[0], (int)st[1]);
                if (st[0] != COOP_OK) {
                    live[0][i] = live[1][i] = 0;
                } else if (live[0][i] - first[0] != live[1][i] - first[1]) {
                    fail_msg("%s step %d: malloc(%llu) at offset %+lld in one, %+lld in the other",
                             ops->name, step, (unsigned long long)size,
                             (long long)(live[0][i] - first[0]),
                             (long long)(live[1][i] - first[1]));
                }
                sizes[i] = size;
            }
            replay_policy_stats s0 = stats_of(&d[0]), s1 = stats_of(&d[1]);
            if (s0.reserved_bytes != s1.reserved_bytes || s0.map_bytes != s1.map_bytes ||
                s0.active_bytes != s1.active_bytes || s0.free_bytes != s1.free_bytes ||
                s0.largest_free != s1.largest_free || s0.has_free_blocks != s1.has_free_blocks)
                fail_msg("%s step %d: reserved %llu / %llu, mapped %llu / %llu, active %llu / "
                         "%llu, free %llu / %llu, largest free %llu / %llu",
                         ops->name, step, (unsigned long long)s0.reserved_bytes,
                         (unsigned long long)s1.reserved_bytes, (unsigned long long)s0.map_bytes,
                         (unsigned long long)s1.map_bytes, (unsigned long long)s0.active_bytes,
                         (unsigned long long)s1.active_bytes, (unsigned long long)s0.free_bytes,
                         (unsigned long long)s1.free_bytes, (unsigned long long)s0.largest_free,
                         (unsigned long long)s1.largest_free);
        }
        for (int c = 0; c < 2; c++)
            d[c].ops->destroy(d[c].state);
    }
}

/* ---- minimum capacity ---- */

static void bisection_finds_the_threshold(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 3 * MiB / 2);
    free_ev(&b, 0, 3 * MiB / 2);
    alloc_ev(&b, 1, 1000);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    uint64_t cap;
    replay_run at;
    /* ideal: exactly the peak of live bytes */
    assert_int_equal(
        replay_min_capacity(&p, &replay_policy_ideal, 2 * MiB, p.peak_live, GiB, &cap, &at),
        COOP_OK);
    assert_int_equal(cap, 3 * MiB / 2);
    /* torch: the 20 MiB segment must fit, and the small request then needs a
     * 2 MiB segment: 22 MiB, unless the cached 20 MiB is released first
     * (it is: wholly free), so 20 MiB, exactly: torch's step is 2 MiB,
     * the granularity of its segments (to within 0.1% before). */
    assert_int_equal(
        replay_min_capacity(&p, &replay_policy_torch, 2 * MiB, p.peak_live, GiB, &cap, &at),
        COOP_OK);
    assert_int_equal(cap, 20 * MiB);
    assert_true(run(&b, &replay_policy_torch, cap - 1).oom);
    assert_false(at.oom);
    assert_int_equal(at.map_bytes, 22 * MiB); /* 20 MiB, released, then 2 MiB */
    /* coop: whole 2 MiB pages; the 1.5 MiB block's page is reused */
    assert_int_equal(
        replay_min_capacity(&p, &replay_policy_coop, 2 * MiB, p.peak_live, GiB, &cap, &at),
        COOP_OK);
    assert_int_equal(cap, 2 * MiB); /* exact: its step is the page */
    assert_int_equal(at.map_bytes, 2 * MiB);
    /* bounds off the step (a --capacity of the user's, jemalloc's peak):
     * the multiple between them is still probed, 20 MiB, not hi or a
     * probe a step above lo (rev35-K mutants answered 20.9 and 20.5 MiB) */
    assert_int_equal(replay_min_capacity(&p, &replay_policy_torch, 2 * MiB, 37 * MiB / 2,
                                         20 * MiB + 900 * 1024, &cap, &at),
                     COOP_OK);
    assert_int_equal(cap, 20 * MiB);
    /* an upper bound that does not fit is an error */
    assert_int_equal(replay_min_capacity(&p, &replay_policy_torch, 2 * MiB, 1, 10 * MiB, &cap, &at),
                     COOP_ERR_NOMEM);
    replay_prepared_free(&p);
    built_free(&b);
    /* coop's step is --page, whatever it is: 1,000,000 bytes take 16 pages
     * of 64 KiB (the pool's capacity is whole pages: the peak fails) */
    built one = {0};
    alloc_ev(&one, 0, 1000000);
    assert_int_equal(replay_prepare(&one.t, &p), COOP_OK);
    assert_int_equal(
        replay_min_capacity(&p, &replay_policy_coop, 64 * 1024, p.peak_live, GiB, &cap, &at),
        COOP_OK);
    assert_int_equal(cap, 16 * 64 * 1024);
    assert_int_equal(
        replay_run_trace(&p, &replay_policy_coop, cap - 64 * 1024, 64 * 1024, NULL, &at), COOP_OK);
    assert_true(at.oom);
    replay_prepared_free(&p);
    built_free(&one);
}

/* Feasibility is not monotone in the capacity, so the bisection's answer is
 * a capacity that runs, with the step's multiple below it failing, and not always
 * the smallest that runs. Under torch-expandable this trace runs in 140 and
 * 142 MiB, fails from 144 to 158 MiB and runs again from 160 MiB: the range
 * is 9/8 of the capacity (160 MiB of address space at 140 MiB, 180 MiB at
 * 144), so at 144 MiB the free block at the range's end can grow further,
 * best fit passes it over for the freed 53 MiB block at the start, and the
 * last request finds no room even after free pages are unmapped; at 140 MiB
 * the 2 MiB request takes the end block instead and the last request gets
 * a fresh range. Both are PyTorch's rules on a device of that size. The
 * bisection, from the peak of live bytes to the peak reserved at 80 GiB,
 * answers 160 MiB. */
static void expandable_feasibility_is_not_monotone(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 881385);
    alloc_ev(&b, 1, 53409560);
    alloc_ev(&b, 2, 3791692);
    free_ev(&b, 1, 53409560);
    alloc_ev(&b, 3, 61394611);
    free_ev(&b, 0, 881385);
    alloc_ev(&b, 4, 2023503);
    alloc_ev(&b, 5, 53911888);
    const replay_policy_ops *ops = &replay_policy_torch_expandable;
    assert_false(run(&b, ops, 140 * MiB).oom);
    assert_false(run(&b, ops, 142 * MiB).oom);
    for (uint64_t c = 144; c < 160; c += 2)
        assert_true(run(&b, ops, c * MiB).oom);
    assert_false(run(&b, ops, 160 * MiB).oom);
    replay_run main_run = run(&b, ops, 80 * GiB);
    assert_int_equal(main_run.peak_reserved, 182 * MiB);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    uint64_t cap;
    replay_run at;
    assert_int_equal(
        replay_min_capacity(&p, ops, 2 * MiB, p.peak_live, main_run.peak_reserved, &cap, &at),
        COOP_OK);
    assert_false(at.oom);
    assert_true(cap >= 160 * MiB && cap <= 160 * MiB + 160 * MiB / 1000);
    replay_prepared_free(&p);
    built_free(&b);
}

/* frag_mean weights each sample by the events until the next allocation;
 * the last allocation's sample holds until the end of the trace. Under torch
 * the 512-byte request at event 3 finds 1 MiB and 512 KiB free apart in the
 * 2 MiB segment (fragmentation 1/3) and nothing is allocated after it, so
 * that 1/3 covers events 3..101 of 102 (the earlier samples are 0). */
/* Events 0..99 of both frag_mean tests: a 1 MiB and a 512 KiB block, the
 * first freed, 512 bytes placed (the sample of 1/3), then 96 events of
 * size-0 requests, which place nothing (and sample nothing): only time
 * passes. */
static void frag_holes_then_time(built *b)
{
    alloc_ev(b, 0, MiB);
    alloc_ev(b, 1, MiB / 2);
    free_ev(b, 0, MiB);
    alloc_ev(b, 2, 512);
    for (uint32_t id = 3; id <= 50; id++) {
        alloc_ev(b, id, 0);
        free_ev(b, id, 0);
    }
}

static void frag_mean_counts_the_last_interval(void **unused)
{
    (void)unused;
    built b = {0};
    frag_holes_then_time(&b);
    free_ev(&b, 1, MiB / 2);
    free_ev(&b, 2, 512);
    assert_int_equal(b.t.num_events, 102);
    replay_run r = run(&b, &replay_policy_torch, GiB);
    assert_false(r.oom);
    assert_true(r.has_frag);
    assert_float_equal(r.frag_max, 1.0 / 3, 1e-12);
    assert_float_equal(r.frag_mean, 1.0 / 3 * 99 / 102, 1e-12);
    built_free(&b);
}

/* As above, with a second non-zero sample before the end: each sample is
 * weighted by the events until the next allocation (in
 * frag_mean_counts_the_last_interval every sample before the last is 0, so an
 * unweighted earlier sample went unseen). The 512 bytes at event 3 split the
 * 512 KiB hole (best fit), leaving holes of 1 MiB and 512 KiB - 512; the 512
 * bytes at event 100 face that, (512 KiB - 512) / (1.5 MiB - 512). So 1/3
 * holds for events 3..99 (97) and the second sample for 100..103 (4) of 104. */
static void frag_mean_weights_each_sample_by_its_interval(void **unused)
{
    (void)unused;
    built b = {0};
    frag_holes_then_time(&b);
    alloc_ev(&b, 51, 512);
    free_ev(&b, 1, MiB / 2);
    free_ev(&b, 2, 512);
    free_ev(&b, 51, 512);
    assert_int_equal(b.t.num_events, 104);
    replay_run r = run(&b, &replay_policy_torch, GiB);
    assert_false(r.oom);
    assert_true(r.has_frag);
    const double second = (double)(MiB / 2 - 512) / (double)(MiB + MiB / 2 - 512);
    assert_float_equal(r.frag_max, 1.0 / 3, 1e-12);
    assert_float_equal(r.frag_mean, (97.0 / 3 + 4 * second) / 104, 1e-12);
    built_free(&b);
}

/* The mean runs from the first sample, not from event 0: four events of
 * size-0 requests before the first allocation (no sample) leave the mean of
 * frag_mean_counts_the_last_interval as it was (1/3 over 99 of 102 events). */
static void frag_mean_starts_at_the_first_sample(void **unused)
{
    (void)unused;
    built b = {0};
    for (uint32_t id = 60; id < 62; id++) {
        alloc_ev(&b, id, 0);
        free_ev(&b, id, 0);
    }
    frag_holes_then_time(&b);
    free_ev(&b, 1, MiB / 2);
    free_ev(&b, 2, 512);
    assert_int_equal(b.t.num_events, 106);
    replay_run r = run(&b, &replay_policy_torch, GiB);
    assert_true(r.has_frag);
    assert_float_equal(r.frag_mean, 1.0 / 3 * 99 / 102, 1e-12);
    built_free(&b);
}

/* ---- recorded ---- */

static void recorded_curve_rebuilt_backwards(void **unused)
{
    (void)unused;
    built b = {0};
    /* 20 MiB existed before recording; a 2 MiB segment comes and goes, a
     * 4 MiB one comes and stays */
    add(&b, TRACE_SEGMENT_ALLOC, 0, 2 * MiB, 0);
    alloc_ev(&b, 0, 1000);
    free_ev(&b, 0, 1000);
    add(&b, TRACE_SEGMENT_FREE, 0, 2 * MiB, 0);
    add(&b, TRACE_SEGMENT_ALLOC, 0, 4 * MiB, 0);
    b.t.final_segments = calloc(2, sizeof *b.t.final_segments);
    assert_non_null(b.t.final_segments);
    b.t.final_segments[0].size = 20 * MiB;
    b.t.final_segments[1].size = 4 * MiB;
    b.t.num_final_segments = 2;
    b.t.has_segment_events = 1;
    replay_recorded rec;
    uint64_t curve[5];
    assert_int_equal(replay_recorded_compute(&b.t, &rec, curve), COOP_OK);
    assert_true(rec.available);
    assert_int_equal(rec.initial_reserved, 20 * MiB);
    assert_int_equal(rec.final_reserved, 24 * MiB);
    assert_int_equal(rec.peak_reserved, 24 * MiB);
    assert_int_equal(rec.map_bytes, 26 * MiB);
    assert_int_equal(curve[0], 22 * MiB);
    assert_int_equal(curve[3], 20 * MiB);
    assert_int_equal(curve[4], 24 * MiB);
    /* a free of more than existed is inconsistent */
    b.t.final_segments[0].size = 0;
    b.t.final_segments[1].size = 1 * MiB;
    assert_int_equal(replay_recorded_compute(&b.t, &rec, NULL), COOP_ERR_INVALID);
    built_free(&b);
}

/* Reserved bytes that would reach 2^63 are inconsistent input, not a wrap:
 * final segments adding up to 2^64 - 1 + 2 made a peak of 1 byte. */
static void recorded_sums_do_not_wrap(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 4096);
    free_ev(&b, 0, 4096);
    b.t.final_segments = calloc(2, sizeof *b.t.final_segments);
    assert_non_null(b.t.final_segments);
    b.t.final_segments[0].size = UINT64_MAX;
    b.t.final_segments[1].size = 2;
    b.t.num_final_segments = 2;
    replay_recorded rec;
    assert_int_equal(replay_recorded_compute(&b.t, &rec, NULL), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "the final segments add up to 2^63 bytes or more"));
    /* a segment free before the end that takes the reserved bytes past 2^63 */
    b.t.final_segments[0].size = 1ull << 62;
    b.t.final_segments[1].size = 0;
    add(&b, TRACE_SEGMENT_FREE, 0, 1ull << 62, 0);
    b.t.has_segment_events = 1;
    assert_int_equal(replay_recorded_compute(&b.t, &rec, NULL), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "segment_free of 4611686018427387904 bytes at 0x0 "
                                              "(event 2): the reserved bytes before it would be "
                                              "2^63 or more"));
    built_free(&b);
}

/* The peak may be where the recording began: 20 MiB released by the first
 * event leave 2 MiB, so the peak is the 22 MiB held before it. */
static void recorded_peak_before_the_first_event(void **unused)
{
    (void)unused;
    built b = {0};
    add(&b, TRACE_SEGMENT_FREE, 0, 20 * MiB, 0);
    alloc_ev(&b, 0, 1000);
    b.t.final_segments = calloc(1, sizeof *b.t.final_segments);
    assert_non_null(b.t.final_segments);
    b.t.final_segments[0].size = 2 * MiB;
    b.t.num_final_segments = 1;
    b.t.has_segment_events = 1;
    replay_recorded rec;
    assert_int_equal(replay_recorded_compute(&b.t, &rec, NULL), COOP_OK);
    assert_int_equal(rec.initial_reserved, 22 * MiB);
    assert_int_equal(rec.final_reserved, 2 * MiB);
    assert_int_equal(rec.peak_reserved, 22 * MiB);
    built_free(&b);
}

static void recorded_absent_without_segments(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 1000);
    replay_recorded rec;
    assert_int_equal(replay_recorded_compute(&b.t, &rec, NULL), COOP_OK);
    assert_false(rec.available);
    built_free(&b);
}

/* ---- Timed runs ---- */

/* The ideal policy with its calls counted: what a timed run may touch. */
static struct {
    int creates, stats, mallocs, frees;
} counted;

static coop_status counted_create(uint64_t capacity, uint64_t page, void **state)
{
    counted.creates++;
    return replay_policy_ideal.create(capacity, page, state);
}
static coop_status counted_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    counted.mallocs++;
    return replay_policy_ideal.malloc(state, size, stream, addr);
}
static coop_status counted_free(void *state, uintptr_t addr, uint64_t size)
{
    counted.frees++;
    return replay_policy_ideal.free(state, addr, size);
}
static void counted_stats(void *state, replay_policy_stats *out)
{
    counted.stats++;
    replay_policy_ideal.stats(state, out);
}

static void timed_run_reads_no_statistics(void **unused)
{
    (void)unused;
    replay_policy_ops ops = replay_policy_ideal;
    ops.create = counted_create;
    ops.malloc = counted_malloc;
    ops.free = counted_free;
    ops.stats = counted_stats;
    built b = {0};
    for (uint32_t i = 0; i < 10; i++)
        alloc_ev(&b, i, (i + 1) * 1000);
    for (uint32_t i = 0; i < 10; i += 2)
        free_ev(&b, i, (i + 1) * 1000);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    replay_run r;
    /* untimed: figures read after every event, no timing */
    memset(&counted, 0, sizeof counted);
    assert_int_equal(replay_run_trace(&p, &ops, GiB, 2 * MiB, NULL, &r), COOP_OK);
    assert_true(counted.stats >= 15);
    assert_int_equal(counted.creates, 1);
    assert_true(r.peak_active > 0);
    /* timed, three passes: only the calls, each pass with a fresh policy */
    memset(&counted, 0, sizeof counted);
    replay_run_options opt = {.measure_time = true, .timed_passes = 3};
    assert_int_equal(replay_run_trace(&p, &ops, GiB, 2 * MiB, &opt, &r), COOP_OK);
    assert_int_equal(counted.stats, 0);
    assert_int_equal(counted.creates, 3);
    assert_int_equal(counted.mallocs, 30);
    assert_int_equal(counted.frees, 15);
    assert_int_equal(r.num_timed, 45);
    assert_true(r.ns_per_op > 0);
    /* a timed run keeps no series */
    replay_series series;
    opt.series = &series;
    assert_int_equal(replay_run_trace(&p, &ops, GiB, 2 * MiB, &opt, &r), COOP_ERR_INVALID);
    replay_prepared_free(&p);
    built_free(&b);
}

/* ideal that runs out of memory at any capacity below 64 MiB: its main run
 * at 64 MiB reserves 1 MiB, yet it does not run at 1 MiB. One policy is
 * created at a time, so its capacity can be kept here. */
static uint64_t picky_capacity;

static coop_status picky_create(uint64_t capacity, uint64_t page, void **state)
{
    picky_capacity = capacity;
    return replay_policy_ideal.create(capacity, page, state);
}

static coop_status picky_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    if (picky_capacity < 64 * MiB)
        return coop_set_error(COOP_ERR_NOMEM, "picky: below 64 MiB");
    return replay_policy_ideal.malloc(state, size, stream, addr);
}

/* A policy whose placement depends on the capacity may fail at its own peak
 * reserved: the bisection then starts again from the full capacity, and the
 * row has a minimum (64 MiB, to within 0.1%), not "skipped". */
static void measure_bisects_again_up_to_the_capacity(void **unused)
{
    (void)unused;
    replay_policy_ops ops = replay_policy_ideal;
    ops.name = "picky";
    ops.create = picky_create;
    ops.malloc = picky_malloc;
    built b = {0};
    alloc_ev(&b, 0, MiB);
    free_ev(&b, 0, MiB);
    replay_choice choice = {.name = "picky", .ops = &ops};
    replay_measure_options opt = {.capacity = 64 * MiB, .page = 2 * MiB};
    replay_row row;
    size_t filled = 0, failed = 0;
    assert_int_equal(replay_measure(&b.t, &choice, 1, &opt, &row, &filled, &failed), COOP_OK);
    assert_int_equal(filled, 1);
    assert_int_equal(failed, 0);
    assert_int_equal(row.peak_reserved, MiB);
    assert_true(row.has_min_capacity);
    if (row.min_capacity < 64 * MiB - 64 * MiB / 1000 || row.min_capacity > 64 * MiB) {
        fail_msg("min capacity %llu", (unsigned long long)row.min_capacity);
        return;
    }
    built_free(&b);
}

/* ---- What the second mutation round found unchecked ---- */

/* A size-0 allocation places nothing and is never live (engine.c says its
 * free is skipped too): the same id allocated again with size 0, without a
 * free between, is no double allocation, and no call counts. */
static void zero_size_allocations_are_never_live(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 0);
    alloc_ev(&b, 0, 0);
    alloc_ev(&b, 1, 100);
    free_ev(&b, 1, 100);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    assert_int_equal(p.num_ops, 2);
    assert_int_equal(p.peak_live, 100);
    replay_prepared_free(&p);
    built_free(&b);
}

/* ideal whose statistics carry no free-block figures (as jemalloc's when
 * its free-space log ran out of host memory): no fragmentation is sampled,
 * so the row has none, rather than a 0 computed from absent figures. */
static void no_free_block_stats(void *state, replay_policy_stats *out)
{
    replay_policy_ideal.stats(state, out);
    out->has_free_blocks = false;
}

static void fragmentation_needs_free_block_figures(void **unused)
{
    (void)unused;
    replay_policy_ops ops = replay_policy_ideal;
    ops.stats = no_free_block_stats;
    built b = {0};
    alloc_ev(&b, 0, 1000);
    alloc_ev(&b, 1, 1000);
    replay_run r = run(&b, &ops, GiB);
    assert_false(r.has_frag);
    assert_true(r.frag_max == 0.0);
    r = run(&b, &replay_policy_ideal, GiB); /* the same figures with them: 0, measured */
    assert_true(r.has_frag);
    built_free(&b);
}

/* The series a --timeline draws: live bytes after every event (a free
 * lowers them), and each placement from the event that placed it to the
 * event that freed it (the trace's length if never freed). */
static void series_follow_every_event(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 1000); /* event 0 */
    alloc_ev(&b, 1, 3000); /* event 1 */
    free_ev(&b, 0, 1000);  /* event 2 */
    alloc_ev(&b, 2, 500);  /* event 3 */
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    replay_series s;
    replay_run_options opt = {.series = &s};
    replay_run r;
    assert_int_equal(replay_run_trace(&p, &replay_policy_ideal, GiB, 2 * MiB, &opt, &r), COOP_OK);
    static const uint64_t live[] = {1000, 4000, 3000, 3500};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(s.live[i], live[i]);
        assert_int_equal(s.reserved[i], live[i]); /* ideal reserves the live bytes */
    }
    assert_int_equal(s.num_placements, 3);
    static const uint64_t start[] = {0, 1, 3}, end[] = {2, 4, 4}, size[] = {1000, 3000, 500};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(s.placements[k].start_event, start[k]);
        assert_int_equal(s.placements[k].end_event, end[k]);
        assert_int_equal(s.placements[k].size, size[k]);
    }
    replay_series_free(&s);
    replay_prepared_free(&p);
    built_free(&b);
}

/* The answer lies in [lo, hi]: a lower bound above the upper one is the
 * upper one (not a bisection over the wrapped difference). */
static void min_capacity_with_lo_above_hi_is_hi(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, MiB);
    replay_prepared p;
    assert_int_equal(replay_prepare(&b.t, &p), COOP_OK);
    uint64_t cap = 0;
    replay_run at;
    assert_int_equal(
        replay_min_capacity(&p, &replay_policy_ideal, 2 * MiB, 8 * MiB, 4 * MiB, &cap, &at),
        COOP_OK);
    assert_int_equal(cap, 4 * MiB);
    replay_prepared_free(&p);
    built_free(&b);
}

/* Under torch a small block and a large one take turns: at the minimum
 * capacity (26 MiB: the 25 MiB block's own segment) each turn releases the
 * other pool's cached segment, so 2 + 26 + 2 + 26 MiB get mapped, where the
 * main run at 1 GiB keeps both and maps 28 MiB. The row's map_bytes are
 * those of the run at its min_capacity, not of the main run or of a probe
 * above the minimum. */
static void min_capacity_row_maps_what_the_minimum_maps(void **unused)
{
    (void)unused;
    built b = {0};
    for (uint32_t turn = 0; turn < 2; turn++) {
        alloc_ev(&b, 4 * turn, 1000);
        free_ev(&b, 4 * turn, 1000);
        alloc_ev(&b, 4 * turn + 1, 25 * MiB);
        free_ev(&b, 4 * turn + 1, 25 * MiB);
    }
    replay_choice choice = {.name = "torch", .ops = &replay_policy_torch};
    replay_measure_options opt = {.capacity = GiB, .page = 2 * MiB};
    replay_row row;
    size_t filled = 0, failed = 0;
    assert_int_equal(replay_measure(&b.t, &choice, 1, &opt, &row, &filled, &failed), COOP_OK);
    assert_int_equal(filled, 1);
    assert_int_equal(row.peak_reserved, 28 * MiB);
    assert_true(row.has_min_capacity && row.has_map_bytes);
    if (row.min_capacity < 26 * MiB || row.min_capacity > 26 * MiB + 26 * MiB / 1000)
        fail_msg("min capacity %llu", (unsigned long long)row.min_capacity);
    assert_int_equal(row.map_bytes, 56 * MiB);
    assert_int_equal(run(&b, &replay_policy_torch, row.min_capacity).map_bytes, 56 * MiB);
    built_free(&b);
}

/* torch with its policies created counted (one run each). */
static int torch_runs;

static coop_status torch_counted_create(uint64_t capacity, uint64_t page, void **state)
{
    torch_runs++;
    return replay_policy_torch.create(capacity, page, state);
}

/* The bisection's upper bound is the main run's peak reserved (28 MiB for
 * the trace above), which passes: the bracket [25 MiB peak of live bytes,
 * 28 MiB] needs the two end probes and 7 halvings to come within 0.1% (28
 * KiB), 9 runs after the main and timed ones. Starting from the peak of
 * live bytes alone fails at once and bisects up from --capacity (1 GiB):
 * some 16 more halvings for the same answer. */
static void bisection_starts_at_the_main_runs_peak(void **unused)
{
    (void)unused;
    built b = {0};
    for (uint32_t turn = 0; turn < 2; turn++) {
        alloc_ev(&b, 4 * turn, 1000);
        free_ev(&b, 4 * turn, 1000);
        alloc_ev(&b, 4 * turn + 1, 25 * MiB);
        free_ev(&b, 4 * turn + 1, 25 * MiB);
    }
    replay_policy_ops ops = replay_policy_torch;
    ops.create = torch_counted_create;
    replay_choice choice = {.name = "torch", .ops = &ops};
    replay_measure_options opt = {.capacity = GiB, .page = 2 * MiB};
    replay_row row;
    size_t filled = 0, failed = 0;
    torch_runs = 0;
    assert_int_equal(replay_measure(&b.t, &choice, 1, &opt, &row, &filled, &failed), COOP_OK);
    assert_true(row.has_min_capacity);
    if (torch_runs > 1 + REPLAY_TIMED_PASSES + 9)
        fail_msg("%d runs", torch_runs);
    built_free(&b);
}

/* When a policy fits in exactly the peak of live bytes, the row's minimum is
 * that peak to the byte (min_cap/live 1.0000): the bisection's first probe
 * is the peak. A bisection from 0 would stop anywhere within a step above it.
 * torch here: a cached 2 MiB small segment, then a 10 MiB block in its own
 * 10 MiB segment (12 MiB reserved at 1 GiB), which fits in 10 MiB once the
 * small segment is released. */
static void measured_minimum_at_the_peak_is_exact(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 1000);
    free_ev(&b, 0, 1000);
    alloc_ev(&b, 1, 10 * MiB);
    replay_choice choices[] = {{.name = "ideal", .ops = &replay_policy_ideal},
                               {.name = "torch", .ops = &replay_policy_torch}};
    replay_measure_options opt = {.capacity = GiB, .page = 2 * MiB};
    replay_row rows[2];
    size_t filled = 0, failed = 0;
    assert_int_equal(replay_measure(&b.t, choices, 2, &opt, rows, &filled, &failed), COOP_OK);
    assert_int_equal(filled, 2);
    assert_int_equal(rows[1].peak_reserved, 12 * MiB);
    for (size_t i = 0; i < 2; i++) {
        assert_true(rows[i].has_min_capacity);
        assert_int_equal(rows[i].min_capacity, 10 * MiB);
    }
    built_free(&b);
}

/* `recorded` on a trace that recorded no segments gives no row: the rows
 * filled are the other policies' only. */
static void recorded_on_a_plain_trace_fills_no_row(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 1000);
    replay_choice choices[] = {{.name = "recorded", .ops = NULL},
                               {.name = "ideal", .ops = &replay_policy_ideal}};
    replay_measure_options opt = {.capacity = GiB, .page = 2 * MiB};
    replay_row rows[2];
    size_t filled = 0, failed = 0;
    assert_int_equal(replay_measure(&b.t, choices, 2, &opt, rows, &filled, &failed), COOP_OK);
    assert_int_equal(filled, 1);
    assert_int_equal(failed, 0);
    assert_string_equal(rows[0].policy, "ideal");
    built_free(&b);
}

/* Out of capacity, torch releases exactly the segments wholly free at that
 * moment, whatever their stream and pool, taken from its lists of whole free
 * segments (not a walk of every free block): one freed whole (stream 1,
 * small), one cached (stream 3), one made whole by a merge (stream 2, both
 * its blocks freed), but not one split (stream 2, small, a block live) nor
 * one whole while cached and split again by a later request (stream 5). */
static void torch_releases_exactly_the_whole_free_segments(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, 100 * MiB);
    assert_int_equal(d.ops->free(d.state, must_malloc(&d, 1000, 1), 1000), COOP_OK);
    uintptr_t kept_small = must_malloc(&d, 1000, 2);
    assert_int_equal(d.ops->free(d.state, must_malloc(&d, 1000, 2), 1000), COOP_OK);
    assert_int_equal(d.ops->free(d.state, must_malloc(&d, 3 * MiB, 3), 3 * MiB), COOP_OK);
    uintptr_t a = must_malloc(&d, 3 * MiB, 2), b = must_malloc(&d, 3 * MiB, 2);
    assert_int_equal(b, a + 3 * MiB); /* one 20 MiB segment */
    assert_int_equal(d.ops->free(d.state, a, 3 * MiB), COOP_OK);
    assert_int_equal(d.ops->free(d.state, b, 3 * MiB), COOP_OK); /* merged: whole */
    uintptr_t c = must_malloc(&d, 3 * MiB, 5);
    assert_int_equal(d.ops->free(d.state, c, 3 * MiB), COOP_OK);
    assert_int_equal(must_malloc(&d, 3 * MiB, 5), c); /* whole again, then split */
    assert_int_equal(stats_of(&d).reserved_bytes, 64 * MiB);
    assert_int_equal(d.ops->check(d.state), COOP_OK);
    /* 64 + 60 > 100: the 2 + 20 + 20 MiB wholly free go, 22 MiB stay */
    uintptr_t big = must_malloc(&d, 60 * MiB, 4);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 82 * MiB);
    assert_int_equal(s.map_bytes, 124 * MiB);
    assert_int_equal(s.active_bytes, 60 * MiB + 3 * MiB + 1024);
    assert_int_equal(d.ops->check(d.state), COOP_OK);
    /* the kept segments still hold their blocks: freed, they are whole and
     * the next release takes them */
    assert_int_equal(d.ops->free(d.state, kept_small, 1000), COOP_OK);
    assert_int_equal(d.ops->free(d.state, c, 3 * MiB), COOP_OK);
    assert_int_equal(d.ops->free(d.state, big, 60 * MiB), COOP_OK);
    assert_int_equal(d.ops->check(d.state), COOP_OK);
    must_malloc(&d, 99 * MiB, 6); /* 82 + 100 > 100: all three go */
    assert_int_equal(stats_of(&d).reserved_bytes, 100 * MiB);
    assert_int_equal(d.ops->check(d.state), COOP_OK);
    d.ops->destroy(d.state);
}

/* Out of capacity, torch releases the cached segments of both pools: a
 * wholly free 2 MiB small segment goes too, so a 20 MiB segment fits a
 * 20 MiB capacity. */
static void torch_releases_cached_small_segments_too(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, 20 * MiB);
    uintptr_t a = must_malloc(&d, 1000, 0);
    assert_int_equal(d.ops->free(d.state, a, 1000), COOP_OK);
    must_malloc(&d, 19 * MiB, 0); /* its own segment, rounded to 20 MiB: 2 + 20 > 20 */
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 20 * MiB);
    assert_int_equal(s.map_bytes, 22 * MiB);
    d.ops->destroy(d.state);
}

/* torch-expandable takes an unmapped run that holds the request exactly
 * (torch's find_expandable_block checks room with >=). At 160 MiB (ranges of
 * 180 MiB, nine 20 MiB pages), 20 + 40 + 20 MiB are mapped and the 40 MiB
 * block is freed; 100 MiB more would pass the capacity, so the free pages are
 * unmapped, and then the range's last 100 MiB, exactly the request, take it:
 * right after the 20 MiB block, not in a second range. */
static void expandable_takes_a_run_that_holds_the_request_exactly(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, 160 * MiB);
    uintptr_t a = must_malloc(&d, 20 * MiB, 0);
    uintptr_t x = must_malloc(&d, 40 * MiB, 0);
    uintptr_t y = must_malloc(&d, 20 * MiB, 0);
    assert_int_equal(y, a + 60 * MiB);
    assert_int_equal(d.ops->free(d.state, x, 40 * MiB), COOP_OK);
    assert_int_equal(must_malloc(&d, 100 * MiB, 0), a + 80 * MiB);
    assert_int_equal(stats_of(&d).reserved_bytes, 140 * MiB);
    d.ops->destroy(d.state);
}

/* Best fit compares "expandable sizes" on both sides (torch's get_free_block:
 * a block's size plus the unmapped block right after it). At 60 MiB (ranges
 * of four 20 MiB pages): a 5 MiB, B 35 MiB and D 10 MiB blocks, B freed, and
 * a 50 MiB request that cannot fit unmaps B's whole page. That leaves two
 * free blocks that can grow: 10 MiB after D (+20 unmapped: 30) and 15 MiB
 * after A (+20 unmapped: 35). A 10 MiB request stays with the first (35 is
 * not smaller than 30); compared by its bare 15 MiB, it would move on. */
static void expandable_best_fit_counts_the_next_blocks_growth(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, 60 * MiB);
    uintptr_t a = must_malloc(&d, 5 * MiB, 0);
    uintptr_t b2 = must_malloc(&d, 35 * MiB, 0);
    uintptr_t c = must_malloc(&d, 10 * MiB, 0);
    assert_int_equal(b2, a + 5 * MiB);
    assert_int_equal(c, a + 40 * MiB);
    assert_int_equal(d.ops->free(d.state, b2, 35 * MiB), COOP_OK);
    uintptr_t x;
    assert_int_equal(d.ops->malloc(d.state, 50 * MiB, 0, &x), COOP_ERR_NOMEM);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 40 * MiB); /* B's page [20, 40) unmapped */
    assert_int_equal(s.free_bytes, 25 * MiB);
    assert_int_equal(must_malloc(&d, 10 * MiB, 0), c + 10 * MiB);
    d.ops->destroy(d.state);
}

/* The pool boundary and the large pool's split rule at their edges
 * (get_pool: rounded size <= kSmallSize is small; should_split: a large
 * remainder must pass kSmallSize). 1 MiB + 1 byte rounds to 1 MiB + 512: the
 * large pool, a 20 MiB segment. 19 MiB - 512 takes a segment of its own,
 * 20 MiB, and its remainder of 1 MiB + 512 is split off; 19 MiB in a 20 MiB
 * segment leaves exactly 1 MiB, kept in the block. */
static void torch_pool_and_split_boundaries(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch, GiB);
    must_malloc(&d, MiB + 1, 0);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 20 * MiB);
    assert_int_equal(s.active_bytes, MiB + 512);
    d.ops->destroy(d.state);
    d = start(&replay_policy_torch, GiB);
    must_malloc(&d, 19 * MiB - 512, 0);
    s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 20 * MiB);
    assert_int_equal(s.active_bytes, 19 * MiB - 512);
    assert_int_equal(s.free_bytes, MiB + 512);
    must_malloc(&d, 19 * MiB, 0);
    s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 40 * MiB);
    assert_int_equal(s.active_bytes, 39 * MiB - 512);
    assert_int_equal(s.free_bytes, MiB + 512);
    d.ops->destroy(d.state);
}

/* The peak counts pages mapped during a call that then runs out and retries
 * (torch's increase_stat in map_block raises reserved_bytes' peak at once).
 * At 150 MiB: stream 0 maps five 20 MiB pages (A 10, X1 30, B 10, X2 30,
 * C 10 MiB), frees X1 and X2; stream 1's 60 MiB then unmaps their whole pages
 * [20, 40) and [60, 80) and maps 60: 120 MiB. With S, B and C freed, stream
 * 0 asks for 80 MiB: from the free 10 MiB at 10 it maps [20, 40) (140 MiB),
 * then [60, 80) would pass 150, so every free page is unmapped (20 MiB left)
 * and the retry maps four pages: 100 MiB. PyTorch's peak is 140 MiB; sampled
 * only between events it read 120. */
static void expandable_peak_counts_pages_mapped_before_a_retry(void **unused)
{
    (void)unused;
    built b = {0};
    const uint64_t sizes[5] = {10 * MiB, 30 * MiB, 10 * MiB, 30 * MiB, 10 * MiB};
    for (uint32_t i = 0; i < 5; i++)
        alloc_ev(&b, i, sizes[i]);
    free_ev(&b, 1, 30 * MiB);
    free_ev(&b, 3, 30 * MiB);
    add(&b, TRACE_ALLOC, 5, 60 * MiB, 1);
    add(&b, TRACE_FREE, 5, 60 * MiB, 1);
    free_ev(&b, 2, 10 * MiB);
    free_ev(&b, 4, 10 * MiB);
    alloc_ev(&b, 6, 80 * MiB);
    replay_run r = run(&b, &replay_policy_torch_expandable, 150 * MiB);
    assert_false(r.oom);
    assert_int_equal(r.final_reserved, 100 * MiB);
    assert_int_equal(r.peak_reserved, 140 * MiB);
    /* torch maps whole segments after a release, never before one: its peak
     * stays the largest reserved between events */
    driven d = start(&replay_policy_torch, 40 * MiB);
    uintptr_t a = must_malloc(&d, 3 * MiB, 0);
    assert_int_equal(d.ops->free(d.state, a, 3 * MiB), COOP_OK);
    must_malloc(&d, 30 * MiB, 0);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 30 * MiB);
    assert_int_equal(s.peak_reserved_bytes, 30 * MiB);
    d.ops->destroy(d.state);
    built_free(&b);
}

/* Released ranges' labels are reused, each once: two ranges released by one
 * out-of-memory retry are labelled again for two new ranges, which must not
 * share an address. */
static void expandable_released_labels_are_reused_once(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_torch_expandable, 60 * MiB);
    uintptr_t a = must_malloc(&d, 30 * MiB, 1);
    uintptr_t b2 = must_malloc(&d, 20 * MiB, 2);
    assert_int_equal(d.ops->free(d.state, a, 30 * MiB), COOP_OK);
    assert_int_equal(d.ops->free(d.state, b2, 20 * MiB), COOP_OK);
    must_malloc(&d, 100 * 1024, 3); /* a 2 MiB page: 62 > 60, both ranges released */
    assert_int_equal(stats_of(&d).reserved_bytes, 2 * MiB);
    uintptr_t x = must_malloc(&d, 3 * MiB, 4);
    uintptr_t y = must_malloc(&d, 3 * MiB, 5);
    assert_true(x != y);
    assert_true(x == a || x == b2);
    assert_true(y == a || y == b2);
    assert_int_equal(d.ops->free(d.state, x, 3 * MiB), COOP_OK);
    assert_int_equal(d.ops->free(d.state, y, 3 * MiB), COOP_OK);
    assert_int_equal(d.ops->check(d.state), COOP_OK);
    d.ops->destroy(d.state);
}

/* coop's map_bytes count every page mapping, not the peak: at 6 MiB (2 MiB
 * pages) two 2 MiB blocks map two pages; the first is freed, and a 3 MiB
 * block maps two more above them, which needs the freed page unmapped: 8
 * MiB mapped in all, at most 6 at once. */
static void coop_map_bytes_count_every_mapping(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_coop, 6 * MiB);
    uintptr_t a = must_malloc(&d, 2 * MiB, 0);
    must_malloc(&d, 2 * MiB, 0);
    assert_int_equal(d.ops->free(d.state, a, 2 * MiB), COOP_OK);
    must_malloc(&d, 3 * MiB, 0);
    replay_policy_stats s = stats_of(&d);
    assert_int_equal(s.reserved_bytes, 6 * MiB);
    assert_int_equal(s.map_bytes, 8 * MiB);
    d.ops->destroy(d.state);
}

/* jemalloc fits in exactly the bytes it commits: the committed total may
 * reach the capacity, not only stay below it. The capacity is what a
 * 12 MiB block commits at 1 GiB (its size class and jemalloc's own pages). */
static void jemalloc_commits_up_to_the_capacity_exactly(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_jemalloc, GiB);
    must_malloc(&d, 12 * MiB, 0);
    uint64_t committed = stats_of(&d).reserved_bytes;
    d.ops->destroy(d.state);
    d = start(&replay_policy_jemalloc, committed);
    must_malloc(&d, 12 * MiB, 0);
    assert_int_equal(stats_of(&d).reserved_bytes, committed);
    d.ops->destroy(d.state);
    d = start(&replay_policy_jemalloc, committed - 1);
    uintptr_t x;
    assert_int_equal(d.ops->malloc(d.state, 12 * MiB, 0, &x), COOP_ERR_NOMEM);
    d.ops->destroy(d.state);
}

/* Out of capacity, jemalloc's cached pages are purged and the request tried
 * again: a freed 12 MiB block's pages stay committed (decay is off), so a
 * 20 MiB block fits in 24 MiB only after the purge. */
static void jemalloc_purges_and_retries(void **unused)
{
    (void)unused;
    driven d = start(&replay_policy_jemalloc, 24 * MiB);
    uintptr_t a = must_malloc(&d, 12 * MiB, 0);
    assert_int_equal(d.ops->free(d.state, a, 12 * MiB), COOP_OK);
    assert_true(stats_of(&d).reserved_bytes >= 12 * MiB); /* cached */
    must_malloc(&d, 20 * MiB, 0);
    replay_policy_stats s = stats_of(&d);
    assert_true(s.reserved_bytes <= 24 * MiB);
    assert_true(s.map_bytes >= 32 * MiB); /* both blocks' pages, committed in turn */
    d.ops->destroy(d.state);
}

/* Final segments adding up to exactly 2^63 are refused (the bound is 2^63
 * itself); one byte less is a valid recording. */
static void recorded_final_segments_of_exactly_2_63_are_refused(void **unused)
{
    (void)unused;
    built b = {0};
    alloc_ev(&b, 0, 4096);
    b.t.final_segments = calloc(2, sizeof *b.t.final_segments);
    assert_non_null(b.t.final_segments);
    b.t.final_segments[0].size = 1ull << 62;
    b.t.final_segments[1].size = (1ull << 62) - 1;
    b.t.num_final_segments = 2;
    replay_recorded rec;
    assert_int_equal(replay_recorded_compute(&b.t, &rec, NULL), COOP_OK);
    assert_true(rec.peak_reserved == (1ull << 63) - 1);
    b.t.final_segments[1].size = 1ull << 62;
    assert_int_equal(replay_recorded_compute(&b.t, &rec, NULL), COOP_ERR_INVALID);
    built_free(&b);
}

/* A bad segment event is named by its own line: its index among the
 * segment events counts every kind before it, segment_unmap included. */
static void recorded_message_names_the_events_own_line(void **unused)
{
    (void)unused;
    built b = {0};
    add(&b, TRACE_SEGMENT_MAP, 0, 2 * MiB, 0);
    add(&b, TRACE_SEGMENT_UNMAP, 0, 2 * MiB, 0);
    add(&b, TRACE_SEGMENT_ALLOC, 0, 4 * MiB, 0); /* more than the final segments hold */
    b.t.has_segment_events = 1;
    uint64_t where[] = {10, 11, 12};
    b.t.segment_where = where;
    b.t.num_segment_where = 3;
    replay_recorded rec;
    assert_int_equal(replay_recorded_compute(&b.t, &rec, NULL), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "line 12: segment_alloc of 4194304 bytes at 0x0 "
                                              "(event 2): segment events and final segments "
                                              "disagree"));
    b.t.segment_where = NULL;
    built_free(&b);
}

/* ---- Reports and the timeline ---- */

/* Writes with fn into a temporary file and returns its text (static). */
static const char *written(void (*fn)(FILE *, const void *), const void *arg)
{
    static char text[4096];
    FILE *f = tmpfile();
    assert_non_null(f);
    fn(f, arg);
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static void row_json(FILE *f, const void *row)
{
    assert_true(replay_report_json(f, row));
}

static void row_table(FILE *f, const void *row)
{
    replay_report_table(f, row, 1);
}

/* Each JSON figure under its own name: frag_mean and frag_max apart, and
 * GMLake's fragmentation as the share of the peak reserved never active (a
 * quarter of 4 MiB here). */
static void report_json_names_each_figure(void **unused)
{
    (void)unused;
    replay_row row = {.trace = "t",
                      .policy = "torch",
                      .events = 2,
                      .peak_live = 3 * MiB,
                      .peak_reserved = 4 * MiB,
                      .peak_active = 3 * MiB,
                      .has_frag = true,
                      .frag_mean = 0.25,
                      .frag_max = 0.5};
    const char *text = written(row_json, &row);
    assert_non_null(strstr(text, "\"frag_mean\":0.25,"));
    assert_non_null(strstr(text, "\"frag_max\":0.5,"));
    assert_non_null(strstr(text, "\"gmlake_frag\":0.25,"));
}

/* The table switches to KiB only below 64 MiB: a largest peak of exactly
 * 64 MiB prints in MiB. */
static void report_table_uses_mib_from_64_mib(void **unused)
{
    (void)unused;
    replay_row row = {
        .trace = "t", .policy = "ideal", .peak_live = 64 * MiB, .peak_reserved = 64 * MiB};
    assert_non_null(strstr(written(row_table, &row), "live_MiB"));
    row.peak_reserved = row.peak_live = 64 * MiB - 1;
    assert_non_null(strstr(written(row_table, &row), "live_KiB"));
}

/* The unit follows the trace's size, not only what was reserved: a large
 * trace that ran out of --capacity at once (reserved 0, live 1 GiB) still
 * prints in MiB, as `coop replay --capacity 1k` on a bundled trace does. */
static void report_table_unit_counts_live_bytes(void **unused)
{
    (void)unused;
    replay_row row = {.trace = "t",
                      .policy = "coop",
                      .peak_live = 1024 * MiB,
                      .peak_reserved = 0,
                      .oom = true,
                      .oom_event = 0};
    assert_non_null(strstr(written(row_table, &row), "live_MiB"));
}

static void timeline_trace_line(FILE *f, const void *name)
{
    assert_true(replay_timeline_trace(f, name, 3));
}

/* A timeline line is split on white space: a name's spaces, tabs and
 * newlines are written as '_'. */
static void timeline_names_have_no_white_space(void **unused)
{
    (void)unused;
    assert_string_equal(written(timeline_trace_line, "a b\tc\nd"), "trace a_b_c_d 3\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ideal_peak_is_peak_of_live_bytes),
        cmocka_unit_test(free_requested_does_not_release),
        cmocka_unit_test(unknown_free_is_skipped),
        cmocka_unit_test(double_alloc_is_an_input_error),
        cmocka_unit_test(torch_medium_request_takes_one_20mib_segment),
        cmocka_unit_test(torch_segment_sizes),
        cmocka_unit_test(torch_best_fit_order),
        cmocka_unit_test(torch_blocks_are_per_stream),
        cmocka_unit_test(torch_frees_cached_segments_and_retries),
        cmocka_unit_test(torch_merges_neighbours),
        cmocka_unit_test(map_bytes_saturate),
        cmocka_unit_test(torch_random_calls_keep_the_invariants),
        cmocka_unit_test(expandable_maps_pages_as_needed),
        cmocka_unit_test(expandable_splits_small_remainders),
        cmocka_unit_test(expandable_1_mib_is_small),
        cmocka_unit_test(expandable_ties_go_to_the_lower_address),
        cmocka_unit_test(expandable_prefers_blocks_that_cannot_grow),
        cmocka_unit_test(expandable_unmaps_free_pages_and_retries),
        cmocka_unit_test(expandable_ranges_are_per_stream),
        cmocka_unit_test(expandable_random_calls_keep_the_invariants),
        cmocka_unit_test(expandable_refuses_what_no_range_holds),
        cmocka_unit_test(every_policy_keeps_its_accounting),
        cmocka_unit_test(every_policy_repeats_at_another_base),
        cmocka_unit_test(coop_takes_the_all_ones_stream),
        cmocka_unit_test(coop_maps_whole_pages),
        cmocka_unit_test(coop_segments_count_segment_bytes_as_mapped),
        cmocka_unit_test(jemalloc_places_in_its_range_within_capacity),
        cmocka_unit_test(jemalloc_keeps_the_largest_small_size_unaligned),
        cmocka_unit_test(bisection_finds_the_threshold),
        cmocka_unit_test(expandable_feasibility_is_not_monotone),
        cmocka_unit_test(frag_mean_counts_the_last_interval),
        cmocka_unit_test(frag_mean_weights_each_sample_by_its_interval),
        cmocka_unit_test(timed_run_reads_no_statistics),
        cmocka_unit_test(recorded_curve_rebuilt_backwards),
        cmocka_unit_test(recorded_absent_without_segments),
        cmocka_unit_test(recorded_peak_before_the_first_event),
        cmocka_unit_test(recorded_sums_do_not_wrap),
        cmocka_unit_test(live_bytes_stay_below_2_63),
        cmocka_unit_test(torch_refuses_sizes_that_round_past_2_64),
        cmocka_unit_test(torch_runs_at_capacity_zero),
        cmocka_unit_test(ideal_maps_only_the_rise_of_the_peak),
        cmocka_unit_test(live_bytes_of_exactly_2_63_are_refused),
        cmocka_unit_test(torch_10_mib_takes_a_segment_of_its_own),
        cmocka_unit_test(torch_small_pool_splits_a_512_byte_remainder),
        cmocka_unit_test(frag_mean_starts_at_the_first_sample),
        cmocka_unit_test(measure_bisects_again_up_to_the_capacity),
        cmocka_unit_test(zero_size_allocations_are_never_live),
        cmocka_unit_test(fragmentation_needs_free_block_figures),
        cmocka_unit_test(series_follow_every_event),
        cmocka_unit_test(min_capacity_with_lo_above_hi_is_hi),
        cmocka_unit_test(min_capacity_row_maps_what_the_minimum_maps),
        cmocka_unit_test(measured_minimum_at_the_peak_is_exact),
        cmocka_unit_test(bisection_starts_at_the_main_runs_peak),
        cmocka_unit_test(recorded_on_a_plain_trace_fills_no_row),
        cmocka_unit_test(torch_releases_cached_small_segments_too),
        cmocka_unit_test(torch_releases_exactly_the_whole_free_segments),
        cmocka_unit_test(expandable_takes_a_run_that_holds_the_request_exactly),
        cmocka_unit_test(expandable_best_fit_counts_the_next_blocks_growth),
        cmocka_unit_test(expandable_released_labels_are_reused_once),
        cmocka_unit_test(expandable_peak_counts_pages_mapped_before_a_retry),
        cmocka_unit_test(torch_pool_and_split_boundaries),
        cmocka_unit_test(coop_map_bytes_count_every_mapping),
        cmocka_unit_test(jemalloc_commits_up_to_the_capacity_exactly),
        cmocka_unit_test(jemalloc_purges_and_retries),
        cmocka_unit_test(recorded_final_segments_of_exactly_2_63_are_refused),
        cmocka_unit_test(recorded_message_names_the_events_own_line),
        cmocka_unit_test(report_json_names_each_figure),
        cmocka_unit_test(report_table_uses_mib_from_64_mib),
        cmocka_unit_test(report_table_unit_counts_live_bytes),
        cmocka_unit_test(timeline_names_have_no_white_space),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
