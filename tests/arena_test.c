/* Arena: placement, split / coalesce, stream tags, exact placement, reclaim, checker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "arena.h"
#include "status.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

typedef struct fixture {
    coop_backend *be;
    meta_heap heap;
    arena a;
} fixture;

static fixture F;

/* An arena of capacity bytes on a simulated device of device bytes: a
 * device smaller than the capacity stands for memory used outside the pool
 * (the device refuses pages the capacity allows). */
static void open_arena_on(uint64_t device, bool vmm, uint64_t capacity, uint64_t va,
                          uint64_t min_split)
{
    assert_int_equal(coop_backend_host_create(device, 64 * KiB, vmm, &F.be), COOP_OK);
    assert_int_equal(meta_heap_init(&F.heap), COOP_OK);
    arena_params p = {.vmm = vmm,
                      .page_size = 64 * KiB,
                      .va_size = va,
                      .segment_size = 1 * MiB,
                      .capacity = capacity,
                      .min_split = min_split};
    assert_int_equal(arena_init(&F.a, F.be, &F.heap, &p), COOP_OK);
}

static void open_arena(bool vmm, uint64_t capacity, uint64_t va, uint64_t min_split)
{
    open_arena_on(capacity, vmm, capacity, va, min_split);
}

static void close_arena(void)
{
    arena_fini(&F.a);
    assert_int_equal(coop_backend_host_live_ranges(F.be), 0);
    meta_heap_fini(&F.heap);
    assert_int_equal(F.heap.live, 0);
    coop_backend_destroy(F.be);
}

static void check(void)
{
    char msg[400];
    if (!arena_check(&F.a, msg, sizeof msg))
        fail_msg("arena_check: %s", msg);
}

static arena_block *alloc(uint64_t size, coop_stream s, bool high)
{
    arena_block *b = NULL;
    bool reclaimed = false;
    coop_status st = arena_alloc(&F.a, size, s, high, &b, &reclaimed);
    if (st == COOP_ERR_NOMEM) /* the device is full: the tests that expect it assert NULL */
        return NULL;
    assert_int_equal(st, COOP_OK); /* host out of memory fails the test here, not later */
    check();
    return b;
}

static void release(arena_block *b, coop_stream tag)
{
    arena_release(&F.a, b, tag);
    check();
}

/* The whole-word setters change exactly the bitfield they name. */
static void test_block_word_setters(void **state)
{
    (void)state;
    arena_block b = {0};
    uint64_t size = (UINT64_C(1) << BLOCK_SIZE_BITS) - 512;
    b.size = size;
    for (unsigned s = 0; s < 4; s++)
        for (int c = 0; c < 2; c++) {
            block_set_state(&b, s);
            block_set_counted(&b, c);
            assert_int_equal(b.state, s);
            assert_int_equal(b.counted_split, c);
            assert_int_equal(b.size, size);
            block_set_state(&b, 3 - s);
            assert_int_equal(b.state, 3 - s);
            assert_int_equal(b.counted_split, c);
            assert_int_equal(b.size, size);
        }
}

static void test_split_and_coalesce(void **state)
{
    (void)state;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *x = alloc(4 * KiB, 0, false);
    arena_block *y = alloc(8 * KiB, 0, false);
    arena_block *z = alloc(4 * KiB, 0, false);
    uintptr_t base = x->addr;
    assert_int_equal(y->addr, base + 4 * KiB);
    assert_int_equal(z->addr, base + 12 * KiB);
    release(y, 0);
    arena_block *hi = alloc(2 * KiB, 0, true);
    assert_int_equal(hi->addr, base + 10 * KiB); /* top end of y's hole */
    arena_block *lo = alloc(2 * KiB, 0, false);
    assert_int_equal(lo->addr, base + 4 * KiB);
    assert_int_equal(F.a.index.count, 1); /* the 4 KiB middle */
    release(lo, 0);
    release(hi, 0);
    assert_int_equal(F.a.index.count, 1); /* one 8 KiB block again */
    assert_int_equal(arena_largest_free(&F.a), 8 * KiB);
    release(x, 0);
    arena_block *f = arena_release(&F.a, z, 0);
    check();
    assert_int_equal(f->addr, base); /* everything merged into the first record */
    assert_int_equal(f->size, 16 * KiB);
    assert_int_equal(F.a.counters.inactive_split.current, 0);
    close_arena();
}

static void test_min_split(void **state)
{
    (void)state;
    open_arena(true, 16 * MiB, 64 * MiB, 2 * KiB);
    arena_block *x = alloc(4 * KiB, 0, false);
    arena_block *g = alloc(512, 0, false);
    release(x, 0);
    arena_block *y = alloc(3 * KiB, 0, false); /* 1 KiB rest < min_split: absorbed */
    assert_int_equal(y->size, 4 * KiB);
    release(y, 0);
    arena_block *w = alloc(2 * KiB, 0, false); /* 2 KiB rest: split */
    assert_int_equal(w->size, 2 * KiB);
    release(w, 0);
    release(g, 0);
    close_arena();
}

/* A remainder below min_split stays with the allocation at either end: a
 * high placement takes the whole block rather than split off a free part
 * smaller than min_split before it (VMM best fit, and a new segment). */
static void test_min_split_high(void **state)
{
    (void)state;
    open_arena(true, 16 * MiB, 64 * MiB, 2 * KiB);
    arena_block *x = alloc(4 * KiB, 0, false);
    arena_block *g = alloc(512, 0, false);
    uintptr_t x_addr = x->addr;
    release(x, 0);
    arena_block *y = alloc(3 * KiB, 0, true); /* 1 KiB rest < min_split */
    assert_int_equal(y->addr, x_addr);
    assert_int_equal(y->size, 4 * KiB);
    assert_int_equal(F.a.counters.free_bytes, 0);
    release(y, 0);
    arena_block *w = alloc(2 * KiB, 0, true); /* 2 KiB rest: split, at the high end */
    assert_int_equal(w->addr, x_addr + 2 * KiB);
    assert_int_equal(w->size, 2 * KiB);
    release(w, 0);
    release(g, 0);
    close_arena();

    open_arena(false, 16 * MiB, 0, 2 * KiB);
    arena_block *s = alloc(MiB - KiB, 0, true); /* a segment of its own: 1 KiB rest */
    assert_int_equal(s->size, MiB);
    assert_null(s->prev);
    assert_int_equal(F.a.counters.free_bytes, 0);
    release(s, 0);
    close_arena();
}

static void test_stream_tags(void **state)
{
    (void)state;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *a1 = alloc(4 * KiB, 1, false);
    arena_block *a2 = alloc(4 * KiB, 2, false);
    arena_block *g = alloc(512, 1, false);
    uintptr_t a1_addr = a1->addr, a2_addr = a2->addr;
    release(a1, 1);
    release(a2, 2);
    assert_int_equal(F.a.index.count, 2);          /* different tags: not merged */
    arena_block *grown = alloc(8 * KiB, 1, false); /* no 8 KiB fit: the top grows */
    assert_true(grown->addr > g->addr);
    arena_block *r2 = alloc(4 * KiB, 2, false); /* stream 2 reuses its own block */
    assert_int_equal(r2->addr, a2_addr);
    release(r2, 2);
    arena_retag_any(&F.a, 1); /* a1 becomes "any" and merges into a2's tag */
    check();
    assert_int_equal(F.a.index.count, 1); /* [a1 a2], tagged 2 */
    arena_retag_any(&F.a, 2);
    check();
    arena_block *any = alloc(8 * KiB, 3, false); /* usable from any stream now */
    assert_int_equal(any->addr, a1_addr);
    release(any, 3);
    release(grown, 1);
    release(g, 1);
    close_arena();
}

static void test_alloc_in(void **state)
{
    (void)state;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *x = alloc(64 * KiB, 0, false);
    arena_block *g = alloc(512, 0, false);
    uintptr_t base = x->addr;
    arena_block *f = arena_release(&F.a, x, 0);
    arena_block *b = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc_in(&F.a, f, base + 8 * KiB, 16 * KiB, 0, &b, &reclaimed), COOP_OK);
    check();
    assert_int_equal(b->addr, base + 8 * KiB);
    assert_int_equal(b->size, 16 * KiB);
    assert_int_equal(b->prev->size, 8 * KiB);
    assert_int_equal(b->next->size, 40 * KiB);
    /* Outside a free block, or not free: refused, nothing changes. */
    assert_int_equal(arena_alloc_in(&F.a, b, b->addr, 512, 0, &f, &reclaimed), COOP_ERR_INVALID);
    assert_int_equal(arena_alloc_in(&F.a, b->next, b->next->addr, 41 * KiB, 0, &f, &reclaimed),
                     COOP_ERR_INVALID);
    /* b->next is tagged stream 0: not usable from stream 9. */
    assert_int_equal(arena_alloc_in(&F.a, b->next, b->next->addr, 512, 9, &f, &reclaimed),
                     COOP_ERR_INVALID);
    check();
    release(b, 0);
    release(g, 0);
    close_arena();
}

static void test_reclaim_keeps_range_and_capacity(void **state)
{
    (void)state;
    open_arena(true, 1 * MiB, 8 * MiB, 512);
    arena_block *x = alloc(512 * KiB, 0, false);
    arena_block *g = alloc(512, 0, false);
    assert_int_equal(F.a.reserved, 576 * KiB); /* 9 pages of 64 KiB */
    release(x, 0);
    uint64_t released = 0;
    /* Keep the first two pages: seven of the eight wholly free pages minus those. */
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, x->addr, x->addr + 128 * KiB, &released),
                     COOP_OK);
    check();
    assert_int_equal(released, 384 * KiB);
    /* A 1 MiB request needs 16 pages: more than the capacity allows. */
    assert_null(alloc(1 * MiB, 0, false));
    /* 768 KiB fits (the failed attempt left pages 0 and 1 unmapped too). */
    arena_block *y = alloc(768 * KiB, 0, false);
    assert_non_null(y);
    assert_true(F.a.reserved <= 1 * MiB);
    release(y, 0);
    release(g, 0);
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    assert_int_equal(F.a.reserved, 0);
    check();
    close_arena();
}

/* The device itself full (memory used outside the pool, which the capacity
 * cannot see): a map refused with COOP_ERR_NOMEM releases the arena's idle
 * cached pages outside the placement and is tried once more. The arena
 * used to return the refusal as it was, with enough cached memory to serve
 * the request (the review's r08). */
static void test_device_full_releases_cached_pages(void **state)
{
    (void)state;
    open_arena_on(4 * MiB, true, 8 * MiB, 32 * MiB, 512); /* 4 MiB used elsewhere */
    arena_block *x = alloc(2 * MiB, 0, false);
    arena_block *g = alloc(512, 0, false);
    release(x, 0); /* 2 MiB of cached pages; 64 KiB for g */
    assert_int_equal(F.a.reserved, 2 * MiB + 64 * KiB);
    uint64_t unmaps = F.a.counters.num_unmaps;
    /* past g: 2.5 MiB of new pages, within the capacity, but the device
     * has 1984 KiB left until x's pages are unmapped */
    arena_block *b = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc(&F.a, 2 * MiB + 512 * KiB, 0, false, &b, &reclaimed), COOP_OK);
    check();
    assert_true(reclaimed);
    assert_true(b->addr > g->addr);
    assert_true(F.a.counters.num_unmaps > unmaps);
    assert_int_equal(F.a.reserved, 64 * KiB + 2 * MiB + 512 * KiB);
    /* nothing idle left to release: the refusal stands, and says so */
    reclaimed = false;
    arena_block *c = NULL;
    assert_int_equal(arena_alloc(&F.a, 2 * MiB, 0, false, &c, &reclaimed), COOP_ERR_NOMEM);
    assert_true(reclaimed);
    assert_int_equal(F.a.nomem, ARENA_NOMEM_DEVICE);
    assert_non_null(strstr(coop_last_error(), "simulated device full"));
    check();
    release(b, 0);
    release(g, 0);
    close_arena();
}

/* The same without VMM: idle free segments are released, and the retry asks
 * for the request's own size, since rounding it up to segment_size may be
 * what the device cannot hold. */
static void test_device_full_releases_free_segments(void **state)
{
    (void)state;
    open_arena_on(4 * MiB, false, 8 * MiB, 0, 512); /* segment_size 1 MiB */
    arena_block *x = alloc(2 * MiB, 0, false);      /* its own 2 MiB segment */
    release(x, 0);                                  /* cached */
    assert_int_equal(F.a.reserved, 2 * MiB);
    /* 3.5 MiB: within the capacity, but only 2 MiB left on the device */
    arena_block *y = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc(&F.a, 3 * MiB + 512 * KiB, 0, false, &y, &reclaimed), COOP_OK);
    check();
    assert_true(reclaimed);
    assert_int_equal(F.a.num_segments, 1); /* x's was released */
    assert_int_equal(F.a.reserved, 3 * MiB + 512 * KiB);
    /* 256 KiB would take a 1 MiB segment; the device has 512 KiB left */
    arena_block *z = NULL;
    reclaimed = false;
    assert_int_equal(arena_alloc(&F.a, 256 * KiB, 0, false, &z, &reclaimed), COOP_OK);
    check();
    assert_true(reclaimed);
    assert_int_equal(F.a.reserved, 3 * MiB + 768 * KiB);
    release(y, 0);
    release(z, 0);
    close_arena();
}

/* Without VMM, a device that refuses a whole segment: reclaim is asked for
 * the request's own size (the size tried again), not the segment_size the
 * refused try wanted, so one small idle segment is released, not every
 * one. A request that still does not fit is the device's refusal
 * (ARENA_NOMEM_DEVICE: the pool's message then quotes the backend), not the
 * capacity's. */
static void test_device_full_releases_segments_for_the_request_size(void **state)
{
    (void)state;
    open_arena_on(1 * MiB + 128 * KiB, false, 8 * MiB, 0, 512); /* segment_size 1 MiB */
    arena_block *big = alloc(1 * MiB, 0, false);                /* its own segment */
    arena_block *a = alloc(64 * KiB, 1, false); /* 1 MiB refused: a 64 KiB segment */
    arena_block *b = alloc(64 * KiB, 1, false); /* another: the device is full */
    assert_int_equal(F.a.num_segments, 3);
    assert_int_equal(F.a.reserved, 1 * MiB + 128 * KiB);
    release(a, 1);
    release(b, 1);
    /* stream 2 cannot use stream 1's free segments; 1 MiB is refused, and
     * 64 KiB needs one of them released */
    arena_block *c = alloc(64 * KiB, 2, false);
    assert_non_null(c);
    assert_int_equal(F.a.num_segments, 3);
    assert_int_equal(F.a.reserved, 1 * MiB + 128 * KiB);
    /* 256 KiB: the last idle segment released, still 128 KiB short */
    assert_null(alloc(256 * KiB, 2, false));
    assert_int_equal(F.a.nomem, ARENA_NOMEM_DEVICE);
    assert_int_equal(F.a.num_segments, 2);
    check();
    release(c, 2);
    release(big, 0);
    close_arena();
}

static void test_va_exhausted(void **state)
{
    (void)state;
    open_arena(true, 4 * MiB, 1 * MiB, 512);
    arena_block *x = alloc(768 * KiB, 0, false);
    assert_non_null(x);
    assert_null(alloc(512 * KiB, 0, false)); /* beyond the reservation */
    assert_int_equal(F.a.nomem, ARENA_NOMEM_VA);
    release(x, 0);
    close_arena();
}

static void test_segments(void **state)
{
    (void)state;
    open_arena(false, 8 * MiB, 0, 512);          /* segment_size 1 MiB */
    arena_block *x = alloc(384 * KiB, 0, false); /* below half a segment: a whole one */
    assert_int_equal(F.a.reserved, 1 * MiB);
    arena_block *y = alloc(768 * KiB, 0, false); /* does not fit x's segment rest */
    assert_ptr_not_equal(arena_block_segment(&F.a, x), arena_block_segment(&F.a, y));
    assert_int_equal(F.a.num_segments, 2);
    arena_block *z = alloc(256 * KiB, 0, false); /* fits x's segment rest */
    assert_ptr_equal(arena_block_segment(&F.a, x), arena_block_segment(&F.a, z));
    arena_block *big = alloc(3 * MiB, 0, true); /* own segment, high end */
    assert_int_equal(big->size, 3 * MiB);
    assert_int_equal(F.a.reserved, 1 * MiB + 768 * KiB + 3 * MiB);
    assert_null(alloc(4 * MiB, 0, false)); /* capacity */
    release(big, 0);
    arena_block *again = alloc(4 * MiB, 0, false); /* after releasing big's free segment */
    assert_non_null(again);
    release(again, 0);
    release(x, 0);
    release(y, 0);
    release(z, 0);
    uint64_t released;
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    assert_int_equal(F.a.reserved, 0);
    assert_int_equal(F.a.num_segments, 0);
    check();
    close_arena();
}

/* A new segment is a whole segment_size for a request below half of it, and
 * the request's own size in pages from half on (PyTorch's 10 of 20 MiB): a
 * whole segment around such a request leaves a rest that the next request of
 * its size does not fit, so repeated sizes would take a segment each and
 * strand the rests. */
static void test_segment_of_its_own_from_half_a_segment(void **state)
{
    (void)state;
    open_arena(false, 64 * MiB, 0, 512); /* segment_size 1 MiB, pages 64 KiB */
    arena_block *below = alloc(512 * KiB - 512, 0, false);
    assert_int_equal(F.a.reserved, 1 * MiB);
    arena_block *half = alloc(512 * KiB, 0, false); /* fits below's rest: no new segment */
    assert_ptr_equal(arena_block_segment(&F.a, below), arena_block_segment(&F.a, half));
    arena_block *own[3];
    for (int i = 0; i < 3; i++) { /* each its own 640 KiB segment, no rest stranded */
        own[i] = alloc(600 * KiB, 0, false);
        assert_int_equal(F.a.reserved, 1 * MiB + (uint64_t)(i + 1) * 640 * KiB);
    }
    assert_int_equal(F.a.num_segments, 4);
    arena_block *exact_half = alloc(512 * KiB, 0, false); /* fits no rest: exactly its size */
    assert_int_equal(F.a.reserved, 1 * MiB + 3 * 640 * KiB + 512 * KiB);
    release(exact_half, 0);
    release(half, 0);
    release(below, 0);
    for (int i = 0; i < 3; i++)
        release(own[i], 0);
    close_arena();
}

/* Where one segment is the whole capacity the pool is one fixed arena (coop
 * sim's arena model): its first request takes the whole segment whatever its
 * size, and the next ones share it. */
static void test_one_segment_of_the_whole_capacity_stays_whole(void **state)
{
    (void)state;
    open_arena(false, 1 * MiB, 0, 512); /* segment_size 1 MiB = capacity */
    arena_block *x = alloc(600 * KiB, 0, false);
    assert_int_equal(F.a.reserved, 1 * MiB);
    arena_block *y = alloc(300 * KiB, 0, false);
    assert_ptr_equal(arena_block_segment(&F.a, x), arena_block_segment(&F.a, y));
    release(x, 0);
    release(y, 0);
    close_arena();
}

/* Reclaim under capacity pressure that brings the mapped bytes to exactly
 * the capacity is enough: the placement is mapped, not refused. */
static void test_reclaim_to_exactly_the_capacity(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 4 * P, 1 * MiB, 512);
    arena_block *a = alloc(2 * P, 0, false);
    arena_block *g = alloc(P, 0, false);
    release(a, 0); /* 2 cached pages below g */
    assert_int_equal(F.a.reserved, 3 * P);
    /* no free block fits 3 pages: the top grows by 3 pages, and unmapping
     * a's 2 leaves 1 + 3 = the capacity */
    arena_block *c = alloc(3 * P, 0, false);
    assert_non_null(c);
    assert_true(c->addr > g->addr);
    assert_int_equal(F.a.reserved, 4 * P);
    release(c, 0);
    release(g, 0);
    close_arena();
}

/* Without VMM, where a whole segment would pass the capacity, a segment of
 * the request's own size that fits is taken instead of failing. */
static void test_segment_of_the_request_size_where_a_whole_one_does_not_fit(void **state)
{
    (void)state;
    open_arena(false, 1 * MiB + 512 * KiB, 0, 512); /* segment_size 1 MiB */
    arena_block *x = alloc(384 * KiB, 0, false);    /* a whole segment */
    arena_block *y = alloc(384 * KiB, 0, false);    /* fits its rest */
    assert_int_equal(F.a.reserved, 1 * MiB);
    arena_block *z = alloc(320 * KiB, 0, false); /* rest 256 KiB: a new segment */
    assert_non_null(z);
    assert_int_equal(F.a.num_segments, 2);
    assert_int_equal(F.a.reserved, 1 * MiB + 320 * KiB);
    release(z, 0);
    release(y, 0);
    release(x, 0);
    close_arena();
}

/* Without VMM, a pool at its capacity whose cached segments another
 * stream freed: a small request releases one of them (it cannot use them)
 * and, the room now there, takes a whole segment, as PyTorch retries the
 * same size after freeing its cache. It took a segment of its own size in
 * pages (128 KiB for 100 KiB) before: the capacity was full when the size
 * was chosen, and every following request released another cached
 * segment for another small one (eight 100 KiB requests: eight segments of
 * 128 KiB, four 1 MiB segments released). */
static void test_a_whole_segment_once_reclaim_made_room(void **state)
{
    (void)state;
    open_arena(false, 4 * MiB, 0, 512); /* segment_size 1 MiB */
    arena_block *x[8], *y[8];
    for (int i = 0; i < 8; i++) /* two per segment on stream 2: the capacity is full */
        x[i] = alloc(400 * KiB, 2, false);
    assert_int_equal(F.a.num_segments, 4);
    assert_int_equal(F.a.reserved, 4 * MiB);
    for (int i = 0; i < 8; i++)
        release(x[i], 2); /* four free segments, usable on stream 2 only */
    for (int i = 0; i < 8; i++) {
        y[i] = alloc(100 * KiB, 1, false);
        assert_non_null(y[i]);
        assert_int_equal(arena_block_segment(&F.a, y[i])->reserved, 1 * MiB);
        assert_ptr_equal(arena_block_segment(&F.a, y[i]), arena_block_segment(&F.a, y[0]));
    }
    assert_int_equal(F.a.num_segments, 4); /* one of stream 2's released, one made */
    assert_int_equal(F.a.reserved, 4 * MiB);
    assert_int_equal(F.a.counters.num_unmaps, 1);
    for (int i = 0; i < 8; i++)
        release(y[i], 1);
    close_arena();
}

/* An allocation maps the pages of the block it keeps, not those of the
 * remainder it splits off (a remainder of exactly min_split is split). */
static void test_split_remainder_stays_unmapped(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 16 * MiB, 64 * MiB, 4 * KiB);
    arena_block *a = alloc(P + 4 * KiB, 0, false);
    assert_int_equal(F.a.reserved, 2 * P);
    release(a, 0);
    uint64_t released = 0;
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    assert_int_equal(F.a.reserved, 0);
    arena_block *b = alloc(P, 0, false); /* the 4 KiB rest lies in page 1 */
    assert_int_equal(b->size, P);
    assert_non_null(b->next);
    assert_int_equal(b->next->size, 4 * KiB);
    assert_int_equal(F.a.reserved, P);
    release(b, 0);
    close_arena();
}

/* Without VMM, a new segment's remainder of exactly min_split is split off
 * at either end: the low placement leaves it after the block, the high one
 * before it. */
static void test_segment_remainder_of_min_split(void **state)
{
    (void)state;
    open_arena(false, 8 * MiB, 0, 512); /* segment_size 1 MiB */
    arena_block *lo = alloc(1 * MiB - 512, 0, false);
    assert_int_equal(lo->size, 1 * MiB - 512);
    assert_null(lo->prev);
    assert_non_null(lo->next);
    assert_int_equal(lo->next->size, 512);
    arena_block *hi = alloc(1 * MiB - 512, 0, true);
    assert_int_equal(hi->size, 1 * MiB - 512);
    assert_non_null(hi->prev);
    assert_int_equal(hi->prev->size, 512);
    assert_int_equal(hi->addr, arena_block_segment(&F.a, hi)->base + 512);
    assert_null(hi->next);
    assert_int_equal(F.a.counters.free_bytes, 1024);
    release(hi, 0);
    release(lo, 0);
    close_arena();
}

/* Exact placement may end where the free block ends. */
static void test_alloc_in_up_to_the_end(void **state)
{
    (void)state;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *x = alloc(64 * KiB, 0, false);
    arena_block *g = alloc(512, 0, false);
    uintptr_t base = x->addr;
    arena_block *f = arena_release(&F.a, x, 0);
    arena_block *b = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc_in(&F.a, f, base + 48 * KiB, 16 * KiB, 0, &b, &reclaimed),
                     COOP_OK);
    check();
    assert_int_equal(b->addr, base + 48 * KiB);
    assert_int_equal(b->size, 16 * KiB);
    assert_ptr_equal(b->next, g);
    release(b, 0);
    release(g, 0);
    close_arena();
}

/* arena_alloc_mapped is a best fit: of two equal free blocks, the lower one. */
static void test_alloc_mapped_prefers_the_lowest_address(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *f1 = alloc(2 * P, 0, false);
    arena_block *s1 = alloc(P, 0, false);
    arena_block *f2 = alloc(2 * P, 0, false);
    arena_block *s2 = alloc(P, 0, false);
    uintptr_t low = f1->addr;
    release(f1, 0);
    release(f2, 0);
    arena_block *b = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc_mapped(&F.a, 2 * P, 0, false, &b, &reclaimed), COOP_OK);
    check();
    assert_int_equal(b->addr, low);
    release(b, 0);
    release(s1, 0);
    release(s2, 0);
    close_arena();
}

/* Reclaim releases what it was asked for, highest addresses first, and
 * stops there: lower cached pages stay mapped. */
static void test_reclaim_stops_once_enough_is_released(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *a = alloc(2 * P, 0, false);
    arena_block *x = alloc(P, 0, false);
    arena_block *b = alloc(2 * P, 0, false);
    arena_block *y = alloc(P, 0, false);
    arena_segment *s = arena_first_segment(&F.a);
    uintptr_t a_addr = a->addr, b_addr = b->addr;
    release(a, 0);
    release(b, 0);
    uint64_t released = 0;
    assert_int_equal(arena_reclaim(&F.a, 2 * P, 0, 0, &released), COOP_OK);
    check();
    assert_int_equal(released, 2 * P);
    assert_int_equal(F.a.reserved, 4 * P);
    assert_int_equal(arena_mapped_bytes_in(&F.a, s, b_addr, 2 * P), 0);
    assert_int_equal(arena_mapped_bytes_in(&F.a, s, a_addr, 2 * P), 2 * P);
    release(x, 0);
    release(y, 0);
    close_arena();
}

/* Without VMM the same: a new segment that needs one free segment released
 * releases one, not every idle one. */
static void test_reclaim_releases_only_the_segments_needed(void **state)
{
    (void)state;
    open_arena(false, 4 * MiB, 0, 512); /* segment_size 1 MiB */
    arena_block *seg[4];
    for (int i = 0; i < 4; i++)
        seg[i] = alloc(1 * MiB, 1, false);
    assert_int_equal(F.a.reserved, 4 * MiB);
    release(seg[1], 1);
    release(seg[2], 1);
    /* stream 2 cannot use stream 1's free segments: one is released */
    arena_block *n = alloc(1 * MiB, 2, false);
    assert_non_null(n);
    assert_int_equal(F.a.num_segments, 4);
    assert_int_equal(F.a.reserved, 4 * MiB);
    assert_int_equal(F.a.index.count, 1);
    release(n, 2);
    release(seg[0], 1);
    release(seg[3], 1);
    close_arena();
}

static coop_status stream_1_busy(void *ctx, coop_stream stream, bool *idle)
{
    (void)ctx;
    *idle = stream != 1;
    return COOP_OK;
}

/* After the device refused pages (memory used outside the pool),
 * arena_alloc_mapped takes only free blocks that need no new page: here the
 * mapped block of a busy stream, not the smaller unmapped one that best fit
 * chose and the device cannot back. */
static void test_alloc_mapped_after_the_device_refused(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena_on(3 * P, true, 8 * P, 4 * MiB, 512); /* the device holds 3 pages */
    arena_block *a1 = alloc(P, 2, false);
    arena_block *a2 = alloc(P, 2, false);
    release(a1, COOP_STREAM_ANY);
    uint64_t released = 0;
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    assert_int_equal(F.a.reserved, P);       /* [0, P) free and unmapped */
    arena_block *l = alloc(2 * P, 1, false); /* the top block */
    uintptr_t l_addr = l->addr;
    assert_int_equal(F.a.reserved, 3 * P); /* the device is full */
    release(l, 1);
    arena_set_stream_idle(&F.a, stream_1_busy, NULL);
    arena_block *b = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc(&F.a, P, 1, false, &b, &reclaimed), COOP_ERR_NOMEM);
    assert_int_equal(F.a.nomem, ARENA_NOMEM_DEVICE);
    check();
    assert_int_equal(arena_alloc_mapped(&F.a, P, 1, false, &b, &reclaimed), COOP_OK);
    check();
    assert_int_equal(b->addr, l_addr);
    arena_set_stream_idle(&F.a, NULL, NULL);
    release(b, 1);
    release(a2, 2);
    close_arena();
}

/* The mapped-block fallback keeps to the stream rule as best fit does.
 * Stream 2's request fits u, whose 2 pages are unmapped, but the capacity
 * (5 pages, 4 mapped) allows 1 more, and stream 1's cached pages cannot be
 * released while it is busy. w, mapped, would need no page, but it is
 * stream 1's free block, which stream 1's queued work may still use. */
static void test_alloc_mapped_keeps_to_the_stream_rule(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *u = alloc(2 * P, 0, false);
    arena_block *g = alloc(P, 0, false);
    arena_block *w = alloc(2 * P, 1, false);
    arena_block *g2 = alloc(P, 0, false);
    release(u, COOP_STREAM_ANY);
    uint64_t released = 0;
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    assert_int_equal(F.a.reserved, 4 * P); /* u's pages unmapped */
    release(w, 1);                         /* mapped, stream 1's */
    arena_set_stream_idle(&F.a, stream_1_busy, NULL);
    F.a.params.capacity = 5 * P; /* as coop_set_capacity sets it */
    arena_block *b = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc(&F.a, 2 * P, 2, false, &b, &reclaimed), COOP_ERR_NOMEM);
    assert_int_equal(F.a.nomem, ARENA_NOMEM_CAPACITY);
    assert_int_equal(arena_alloc_mapped(&F.a, 2 * P, 2, false, &b, &reclaimed), COOP_ERR_NOMEM);
    assert_null(b);
    check();
    arena_set_stream_idle(&F.a, NULL, NULL);
    release(g, 0);
    release(g2, 0);
    close_arena();
}

/* arena_alloc_mapped's order is best fit's, (size, address), over the
 * stream's free blocks and the "any" ones merged, passing those whose
 * placement needs pages: a (3 pages, mapped, lowest), u (2, unmapped,
 * "any") and c (2, mapped, highest); stream 1 busy, so a's and c's cached
 * pages stay, and the capacity allows no page more. u is the best fit but
 * needs 2 pages; c, not a, is taken: the smaller size wins over the lower
 * address. */
static void test_alloc_mapped_takes_the_smallest_that_needs_no_page(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *a = alloc(3 * P, 1, false);
    arena_block *g1 = alloc(P, 0, false);
    arena_block *u = alloc(2 * P, 0, false);
    arena_block *g2 = alloc(P, 0, false);
    arena_block *c = alloc(2 * P, 1, false);
    arena_block *g3 = alloc(P, 0, false);
    uintptr_t c_addr = c->addr;
    release(u, COOP_STREAM_ANY);
    uint64_t released = 0;
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    release(a, 1);
    release(c, 1);
    assert_int_equal(F.a.reserved, 8 * P); /* u's pages unmapped */
    arena_set_stream_idle(&F.a, stream_1_busy, NULL);
    F.a.params.capacity = 8 * P; /* as coop_set_capacity sets it */
    arena_block *b = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc(&F.a, 2 * P, 1, false, &b, &reclaimed), COOP_ERR_NOMEM);
    assert_int_equal(F.a.nomem, ARENA_NOMEM_CAPACITY);
    assert_int_equal(arena_alloc_mapped(&F.a, 2 * P, 1, false, &b, &reclaimed), COOP_OK);
    check();
    assert_int_equal(b->addr, c_addr);
    assert_int_equal(F.a.reserved, 8 * P);
    arena_set_stream_idle(&F.a, NULL, NULL);
    release(b, 1);
    release(g1, 0);
    release(g2, 0);
    release(g3, 0);
    close_arena();
}

/* One reclaim asks each stream once and remembers the answer, a busy one
 * included: two free blocks of a busy stream, apart, both stay mapped. */
static void test_reclaim_remembers_a_busy_stream(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *f1 = alloc(2 * P, 1, false);
    arena_block *g1 = alloc(P, 0, false);
    arena_block *f2 = alloc(2 * P, 1, false);
    arena_block *g2 = alloc(P, 0, false);
    release(f1, 1);
    release(f2, 1);
    arena_set_stream_idle(&F.a, stream_1_busy, NULL);
    uint64_t released = 0;
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    check();
    assert_int_equal(released, 0);
    assert_int_equal(F.a.reserved, 6 * P);
    arena_set_stream_idle(&F.a, NULL, NULL);
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    assert_int_equal(released, 4 * P); /* idle now: both go */
    release(g1, 0);
    release(g2, 0);
    close_arena();
}

/* Without VMM, reclaim finds every segment with no block in use, after
 * skipping the walk where counters show there is none
 * (arena_may_hold_free_segment): x (stream 1) and y (stream 2) share a
 * segment; freed, they stay two free blocks (their tags do not merge) with
 * no free block alone in a segment, and that segment is released all the
 * same; then g's segment, one free block. With a block in use in every
 * segment there is none, and nothing is released. */
static void test_reclaim_finds_every_free_segment(void **state)
{
    (void)state;
    open_arena(false, 16 * MiB, 0, 512);
    arena_block *x = alloc(64 * KiB, 1, false); /* a 1 MiB segment */
    arena_block *y = alloc(64 * KiB, 2, false); /* the same, from its rest */
    arena_block *g = alloc(1 * MiB, 0, false);  /* a segment of its own */
    assert_ptr_equal(arena_segment_of(&F.a, x->addr), arena_segment_of(&F.a, y->addr));
    assert_int_equal(F.a.num_segments, 2);
    assert_false(arena_may_hold_free_segment(&F.a));
    uint64_t released = 1;
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    assert_int_equal(released, 0);
    release(x, 1);
    release(y, 2);
    assert_int_equal(F.a.index.count, 2);
    assert_int_equal(F.a.counters.inactive_split.current, 2); /* none alone in a segment */
    assert_true(arena_may_hold_free_segment(&F.a));
    assert_int_equal(arena_reclaim(&F.a, 1, 0, 0, &released), COOP_OK);
    check();
    assert_int_equal(released, 1 * MiB);
    assert_int_equal(F.a.num_segments, 1);
    assert_false(arena_may_hold_free_segment(&F.a));
    release(g, 0);
    assert_true(arena_may_hold_free_segment(&F.a));
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    check();
    assert_int_equal(released, 1 * MiB);
    assert_int_equal(F.a.num_segments, 0);
    close_arena();
}

/* Without VMM, a new segment goes into the address order by its
 * neighbours where it borders one, by the ends of the list where it lies
 * beyond them: the host backend carves a, b, c each below the one before
 * (each goes first); b's segment given back, d takes the top of its hole
 * (ending where a starts: it goes below a) and e the rest (starting where
 * c ends: it goes above c). The checker holds the list to address order. */
static void test_segments_link_in_address_order(void **state)
{
    (void)state;
    open_arena(false, 16 * MiB, 0, 512);
    arena_block *a = alloc(1 * MiB, 0, false); /* each a segment of its own */
    arena_block *b = alloc(1 * MiB, 0, false);
    arena_block *c = alloc(1 * MiB, 0, false);
    assert_true(c->addr + 1 * MiB == b->addr && b->addr + 1 * MiB == a->addr);
    assert_int_equal(F.a.first_segment->base, c->addr);
    uintptr_t hole = b->addr;
    release(b, 0);
    uint64_t released = 0;
    assert_int_equal(arena_reclaim(&F.a, 1, 0, 0, &released), COOP_OK);
    assert_int_equal(released, 1 * MiB);
    arena_block *d = alloc(512 * KiB, 0, false);
    assert_int_equal(d->addr, hole + 512 * KiB);
    arena_block *e = alloc(512 * KiB, 0, false);
    assert_int_equal(e->addr, hole);
    const uintptr_t order[] = {c->addr, e->addr, d->addr, a->addr};
    const arena_segment *s = F.a.first_segment;
    for (size_t i = 0; i < 4; i++, s = s->next)
        assert_int_equal(s->base, order[i]);
    assert_null(s);
    assert_int_equal(F.a.last_segment->base, a->addr);
    release(a, 0);
    release(c, 0);
    release(d, 0);
    release(e, 0);
    close_arena();
}

/* Counts the stream questions of a reclaim; every stream idle. */
static int idle_questions;
static coop_status count_question(void *ctx, coop_stream stream, bool *idle)
{
    (void)ctx, (void)stream;
    idle_questions++;
    *idle = true;
    return COOP_OK;
}

/* A map the capacity forbids, where mapped bytes less the pages in use
 * suggest room (reclaim_falls_short's counters) but no free block holds a whole page:
 * four free halves of pages (stream 1's), apart. The reclaim is skipped by
 * a look at the free blocks of a page or more (none), asks no stream, and
 * the map fails with the cache as it was; the walk asked stream 1 and
 * unmapped nothing. */
static void test_reclaim_skipped_where_no_free_block_holds_a_page(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 4 * P, 64 * MiB, 512);
    arena_block *h[8];
    for (int i = 0; i < 8; i++)
        h[i] = alloc(P / 2, 1, false);
    for (int i = 0; i < 8; i += 2)
        release(h[i], 1);
    assert_int_equal(F.a.reserved, 4 * P);
    arena_set_stream_idle(&F.a, count_question, NULL);
    idle_questions = 0;
    uint64_t unmaps = F.a.counters.num_unmaps;
    arena_block *b = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc(&F.a, 2 * P, 1, false, &b, &reclaimed), COOP_ERR_NOMEM);
    assert_int_equal(F.a.nomem, ARENA_NOMEM_CAPACITY);
    assert_int_equal(idle_questions, 0);
    assert_int_equal(F.a.counters.num_unmaps, unmaps);
    assert_int_equal(F.a.reserved, 4 * P);
    check();
    arena_set_stream_idle(&F.a, NULL, NULL);
    for (int i = 1; i < 8; i += 2)
        release(h[i], 1);
    close_arena();
}

/* The same look must count the run at the top: b, the last block, freed,
 * holds the lower half of the page the top ends in, the range above the
 * top its upper half; that page is the only one a reclaim can release
 * (u's were released before). A 2-page request in u needs one page more
 * than the capacity allows: the top page goes, and it fits. */
static void test_reclaim_counts_the_page_at_the_top(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *u = alloc(2 * P, 0, false);
    arena_block *g = alloc(P, 0, false);
    arena_block *b = alloc(P / 2, 0, false);
    uintptr_t u_addr = u->addr;
    release(u, 0);
    uint64_t released = 0;
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    assert_int_equal(F.a.reserved, 2 * P); /* g's page and the top one */
    release(b, 0);
    F.a.params.capacity = 3 * P; /* as coop_set_capacity sets it */
    arena_block *c = alloc(2 * P, 0, false);
    assert_non_null(c);
    assert_int_equal(c->addr, u_addr);
    assert_int_equal(F.a.reserved, 3 * P);
    assert_int_equal(arena_mapped_bytes_in(&F.a, F.a.first_segment, g->addr + P, P / 2), 0);
    release(c, 0);
    release(g, 0);
    close_arena();
}

/* And free blocks of two streams side by side are one run: x (stream 1)
 * and y (stream 2), half a page each, fill a page together, the only one
 * a reclaim can release; the look cannot count it block by block, so it
 * leaves the reclaim to the walk, which releases it for a one-page request
 * in u (its page released before). */
static void test_reclaim_finds_a_page_across_two_streams_blocks(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *x = alloc(P / 2, 1, false);
    arena_block *y = alloc(P / 2, 2, false);
    arena_block *g = alloc(P, 0, false);
    arena_block *u = alloc(2 * P, 0, false);
    arena_block *h = alloc(P, 0, false);
    uintptr_t u_addr = u->addr;
    release(u, COOP_STREAM_ANY);
    uint64_t released = 0;
    assert_int_equal(arena_reclaim(&F.a, UINT64_MAX, 0, 0, &released), COOP_OK);
    assert_int_equal(F.a.reserved, 3 * P);
    release(x, 1);
    release(y, 2); /* not merged: the tags of two streams */
    F.a.params.capacity = 3 * P;
    arena_block *c = alloc(P, 0, false);
    assert_non_null(c);
    assert_int_equal(c->addr, u_addr);
    assert_int_equal(F.a.reserved, 3 * P); /* x's and y's page went */
    release(c, 0);
    release(g, 0);
    release(h, 0);
    close_arena();
}

/* Stream 1's event cannot be queried (the status a backend's failure gives). */
static coop_status stream_1_unknown(void *ctx, coop_stream stream, bool *idle)
{
    (void)ctx;
    *idle = stream != 1;
    return stream == 1 ? coop_set_error(COOP_ERR_BACKEND, "query failed") : COOP_OK;
}

/* idle_failure names the last reclaim's failed question, and one that a
 * bound skips asks none: a first map the capacity forbids reclaims, asks
 * stream 1 (its free block a is the room), and that question fails; a is
 * then taken again, and the next map the capacity forbids has no room at
 * all (reclaim_falls_short): no question, so no failure to report, and the
 * pool must not report the first one again as the cause (it did: the
 * status of a query long past, for a request stream 1 had no part in). */
static void test_skipped_reclaim_leaves_no_stale_idle_failure(void **state)
{
    (void)state;
    const uint64_t P = 64 * KiB;
    open_arena(true, 4 * P, 64 * MiB, 512);
    arena_block *a = alloc(2 * P, 1, false);
    arena_block *g = alloc(P, 0, false);
    release(a, 1);
    arena_set_stream_idle(&F.a, stream_1_unknown, NULL);
    arena_block *b = NULL;
    bool reclaimed = false;
    assert_int_equal(arena_alloc(&F.a, 2 * P, 2, false, &b, &reclaimed), COOP_ERR_NOMEM);
    assert_int_equal(F.a.nomem, ARENA_NOMEM_CAPACITY);
    assert_int_equal(F.a.idle_failure, COOP_ERR_BACKEND); /* the reclaim asked */
    arena_set_stream_idle(&F.a, NULL, NULL);
    a = alloc(2 * P, 1, false); /* a's place again: no free block left */
    assert_int_equal(F.a.index.count, 0);
    assert_int_equal(arena_alloc(&F.a, 2 * P, 2, false, &b, &reclaimed), COOP_ERR_NOMEM);
    assert_int_equal(F.a.nomem, ARENA_NOMEM_CAPACITY);
    assert_int_equal(F.a.idle_failure, COOP_OK);
    check();
    release(a, 1);
    release(g, 0);
    close_arena();
}

/* arena_check fails and its message names the invariant. */
static void assert_check_fails_with(const char *what)
{
    char msg[400];
    if (arena_check(&F.a, msg, sizeof msg))
        fail_msg("arena_check passed a broken arena (expected '%s')", what);
    if (!strstr(msg, what))
        fail_msg("arena_check: '%s' does not say '%s'", msg, what);
}

/* The checker must be able to fail: break invariants one at a time, each in
 * a way that only its own check can see (the others stay consistent), so that
 * a check that stopped working fails here. */
static void test_check_detects_corruption(void **state)
{
    (void)state;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *x = alloc(4 * KiB, 0, false);
    arena_block *y = alloc(4 * KiB, 0, false);
    arena_block *g = alloc(4 * KiB, 0, false);
    char msg[400];
    release(y, 0);
    x->size += 512; /* overlap */
    assert_check_fails_with("was expected (gap or overlap)");
    x->size -= 512;
    F.a.counters.free_bytes++;
    assert_check_fails_with("free bytes: walk finds");
    F.a.counters.free_bytes--;
    x->state = COOP_BLOCK_FREE; /* free but not indexed, and adjacent to a free block */
    assert_false(arena_check(&F.a, msg, sizeof msg));
    x->state = COOP_BLOCK_ALLOCATED;
    /* x's page unmapped, with the mapped-page and reserved-byte counts agreeing
     * (as after a reclaim that unmapped a page under a block in use): only the
     * per-block page check sees it */
    const uint64_t page = F.a.params.page_size;
    page_map_set(&F.a.first_segment->pages, 0, 1, false);
    F.a.reserved -= page;
    F.a.counters.reserved_bytes.current -= (int64_t)page;
    assert_check_fails_with("is in use but 1 of its 1 pages are unmapped");
    page_map_set(&F.a.first_segment->pages, 0, 1, true);
    F.a.reserved += page;
    F.a.counters.reserved_bytes.current += (int64_t)page;
    assert_true(arena_check(&F.a, msg, sizeof msg));
    release(x, 0);
    release(g, 0);
    close_arena();
}

/* Breaks one invariant, expects the checker to name it, then repairs it and
 * expects the arena sound again (so each case starts from a sound arena). */
#define EXPECT_CAUGHT(what, breaking, repairing)                                                   \
    do {                                                                                           \
        breaking;                                                                                  \
        assert_check_fails_with(what);                                                             \
        repairing;                                                                                 \
        check();                                                                                   \
    } while (0)

/* Every check of arena_check on a VMM arena, one at a time: each corruption
 * is one that only the named check can see. */
static void test_check_detects_each_corruption_vmm(void **state)
{
    (void)state;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *x = alloc(4 * KiB, 5, false);
    arena_block *y = alloc(4 * KiB, 0, false);
    arena_block *g = alloc(4 * KiB, 0, false);
    release(y, 0);
    arena_segment *s = F.a.first_segment;
    const uint64_t page = F.a.params.page_size;
    EXPECT_CAUGHT("not a positive multiple of 512", x->size += 1, x->size -= 1);
    EXPECT_CAUGHT("ends beyond the segment's top", g->size += 512, g->size -= 512);
    const uint64_t top = s->top;
    EXPECT_CAUGHT("beyond its", s->top = s->reserved + 512, s->top = top);
    EXPECT_CAUGHT("blocks end at", s->top += 512, s->top -= 512);
    EXPECT_CAUGHT("broken prev or segment link", y->prev = NULL, y->prev = x);
    EXPECT_CAUGHT("last block link is stale", s->last = y, s->last = g);
    EXPECT_CAUGHT("has an unknown state", block_set_state(x, 3),
                  block_set_state(x, COOP_BLOCK_ALLOCATED));
    EXPECT_CAUGHT("in use has no stream", x->stream = COOP_STREAM_ANY, x->stream = 5);
    EXPECT_CAUGHT("in use is counted as inactive split", block_set_counted(x, true),
                  block_set_counted(x, false));
    EXPECT_CAUGHT("inactive-split accounting is stale", block_set_counted(y, false),
                  block_set_counted(y, true));
    /* the address map: a block in use missing, a free block present, an
     * address that is no block's start present */
    EXPECT_CAUGHT("(in use) is missing from the address map", addr_map_remove(&F.a.map, x->addr),
                  addr_map_insert(&F.a.map, x->addr, x));
    assert_int_equal(addr_map_reserve(&F.a.map, 1), COOP_OK);
    EXPECT_CAUGHT("(free) is in the address map", addr_map_insert(&F.a.map, y->addr, y),
                  addr_map_remove(&F.a.map, y->addr));
    EXPECT_CAUGHT("address map holds", addr_map_insert(&F.a.map, g->addr + 4 * KiB, g),
                  addr_map_remove(&F.a.map, g->addr + 4 * KiB));
    EXPECT_CAUGHT("address map holds", F.a.counters.num_blocks++, F.a.counters.num_blocks--);
    /* the free index: a free block missing, a node that is no free block present */
    EXPECT_CAUGHT("is not in the free index under its key",
                  free_index_remove(&F.a.index, &y->index_node),
                  free_index_insert(&F.a.index, &y->index_node, y->size, y->addr, 0));
    EXPECT_CAUGHT("free index: total count differs", F.a.index.count++, F.a.index.count--);
    free_index_node stray;
    EXPECT_CAUGHT("free index holds", free_index_insert(&F.a.index, &stray, 512, 0x200, 0),
                  free_index_remove(&F.a.index, &stray));
    /* pages and bytes */
    EXPECT_CAUGHT("pages mapped, counted as", s->pages.num_mapped++, s->pages.num_mapped--);
    EXPECT_CAUGHT("reserved bytes: walk finds", F.a.reserved += page, F.a.reserved -= page);
    EXPECT_CAUGHT("reserved bytes: walk finds",
                  F.a.counters.reserved_bytes.current += (int64_t)page,
                  F.a.counters.reserved_bytes.current -= (int64_t)page);
    uint64_t capacity = F.a.params.capacity;
    EXPECT_CAUGHT("exceed the capacity", F.a.params.capacity = F.a.reserved - page,
                  F.a.params.capacity = capacity);
    EXPECT_CAUGHT("segments: walk finds", F.a.counters.segment.current++,
                  F.a.counters.segment.current--);
    EXPECT_CAUGHT("last link or count is stale", F.a.num_segments++, F.a.num_segments--);
    EXPECT_CAUGHT("inactive split: walk finds", F.a.counters.inactive_split.current++,
                  F.a.counters.inactive_split.current--);
    EXPECT_CAUGHT("inactive split: walk finds", F.a.counters.inactive_split_bytes.current += 512,
                  F.a.counters.inactive_split_bytes.current -= 512);
    /* each counter's own bookkeeping: peak at least current, current = added - removed */
    EXPECT_CAUGHT("counter segment:", F.a.counters.segment.peak = 0, F.a.counters.segment.peak = 1);
    EXPECT_CAUGHT("counter reserved_bytes:", F.a.counters.reserved_bytes.freed++,
                  F.a.counters.reserved_bytes.freed--);
    EXPECT_CAUGHT("counter inactive_split:", F.a.counters.inactive_split.allocated++,
                  F.a.counters.inactive_split.allocated--);
    int64_t split_peak = F.a.counters.inactive_split_bytes.peak;
    EXPECT_CAUGHT("counter inactive_split_bytes:", F.a.counters.inactive_split_bytes.peak = 0,
                  F.a.counters.inactive_split_bytes.peak = split_peak);
    /* x freed tagged 5 next to y tagged 0: adjacent free blocks that are not
     * mergeable are allowed; retagging x 0 makes them mergeable */
    release(x, 5);
    assert_int_equal(x->state, COOP_BLOCK_FREE);
    assert_ptr_equal(x->next, y);
    EXPECT_CAUGHT(
        "are adjacent and mergeable",
        (free_index_remove(&F.a.index, &x->index_node),
         free_index_insert(&F.a.index, &x->index_node, x->size, x->addr, 0), x->stream = 0),
        (free_index_remove(&F.a.index, &x->index_node),
         free_index_insert(&F.a.index, &x->index_node, x->size, x->addr, 5), x->stream = 5));
    /* so does retagging x ANY: a block of any stream merges with every tag */
    EXPECT_CAUGHT("are adjacent and mergeable",
                  (free_index_remove(&F.a.index, &x->index_node),
                   free_index_insert(&F.a.index, &x->index_node, x->size, x->addr, COOP_STREAM_ANY),
                   x->stream = COOP_STREAM_ANY),
                  (free_index_remove(&F.a.index, &x->index_node),
                   free_index_insert(&F.a.index, &x->index_node, x->size, x->addr, 5),
                   x->stream = 5));
    release(g, 0);
    close_arena();
}

/* A pending block's pages must stay mapped as an allocated block's do (its
 * streams may still use them): its last page, which no other block in use
 * touches, unmapped with the mapped-page and reserved-byte counts agreeing. */
static void test_check_sees_a_pending_blocks_unmapped_page(void **state)
{
    (void)state;
    open_arena(true, 16 * MiB, 64 * MiB, 512);
    arena_block *x = alloc(4 * KiB, 0, false);
    arena_block *w = alloc(128 * KiB, 0, false);
    arena_segment *s = F.a.first_segment;
    const uint64_t page = F.a.params.page_size;
    size_t last = (size_t)((w->addr + w->size - 1 - s->base) / page);
    assert_true(x->addr + x->size - s->base <= last * page); /* x is not on it */
    assert_true(page_map_count(&s->pages, last, last + 1) == 1);
    EXPECT_CAUGHT(
        "is in use but 1 of its 3 pages are unmapped",
        (block_set_state(w, COOP_BLOCK_PENDING), page_map_set(&s->pages, last, last + 1, false),
         F.a.reserved -= page, F.a.counters.reserved_bytes.current -= (int64_t)page,
         F.a.counters.reserved_bytes.freed += (int64_t)page),
        (block_set_state(w, COOP_BLOCK_ALLOCATED), page_map_set(&s->pages, last, last + 1, true),
         F.a.reserved += page, F.a.counters.reserved_bytes.current += (int64_t)page,
         F.a.counters.reserved_bytes.freed -= (int64_t)page));
    release(w, 0);
    release(x, 0);
    close_arena();
}

/* Links (or, given NULL, unlinks) an empty segment of zero bytes after the
 * last one, every list, map and count agreeing: only its lack of blocks is
 * wrong (a segment without VMM is wholly tiled by at least one block). */
static void link_empty_segment(arena_segment *empty, arena_segment *after)
{
    coop_stat *c = &F.a.counters.segment;
    static int64_t peak;
    if (empty) {
        peak = c->peak;
        *empty = (arena_segment){.base = after->base + after->reserved + 1 * MiB, .prev = after};
        after->next = empty;
        F.a.last_segment = empty;
        F.a.num_segments++;
        c->current++;
        c->allocated++;
        c->peak = c->current > peak ? c->current : peak;
        assert_int_equal(addr_map_reserve(&F.a.seg_starts, 1), COOP_OK);
        addr_map_insert(&F.a.seg_starts, empty->base, empty);
        assert_int_equal(addr_map_reserve(&F.a.seg_ends, 1), COOP_OK);
        addr_map_insert(&F.a.seg_ends, empty->base, empty);
    } else {
        empty = after->next;
        addr_map_remove(&F.a.seg_starts, empty->base);
        addr_map_remove(&F.a.seg_ends, empty->base);
        after->next = NULL;
        F.a.last_segment = after;
        F.a.num_segments--;
        c->current--;
        c->allocated--;
        c->peak = peak;
    }
}

/* Moves segment s of one block, and the block, by delta bytes, with the
 * address map and both segment maps keyed anew: every link and count stays
 * true, only the addresses change. */
static void move_lone_block_segment(arena_segment *s, intptr_t delta)
{
    arena_block *b = s->first;
    assert_ptr_equal(b, s->last);
    addr_map_remove(&F.a.map, b->addr);
    addr_map_remove(&F.a.seg_starts, s->base);
    addr_map_remove(&F.a.seg_ends, s->base + s->reserved);
    s->base += (uintptr_t)delta;
    b->addr += (uintptr_t)delta;
    assert_int_equal(addr_map_reserve(&F.a.map, 1), COOP_OK);
    addr_map_insert(&F.a.map, b->addr, b);
    assert_int_equal(addr_map_reserve(&F.a.seg_starts, 1), COOP_OK);
    addr_map_insert(&F.a.seg_starts, s->base, s);
    assert_int_equal(addr_map_reserve(&F.a.seg_ends, 1), COOP_OK);
    addr_map_insert(&F.a.seg_ends, s->base + s->reserved, s);
}

/* The segment-list checks, on an arena of two fixed segments (no VMM). */
static void test_check_detects_each_corruption_segments(void **state)
{
    (void)state;
    open_arena(false, 4 * MiB, 0, 512);
    arena_block *x = alloc(1 * MiB, 0, false);
    arena_block *y = alloc(1 * MiB, 0, false);
    arena_segment *s1 = F.a.first_segment, *s2 = s1->next;
    assert_non_null(s2);
    assert_ptr_equal(F.a.last_segment, s2);
    EXPECT_CAUGHT("broken prev link", s2->prev = NULL, s2->prev = s1);
    EXPECT_CAUGHT("not wholly tiled", s2->reserved += 512, s2->reserved -= 512);
    /* listed out of address order */
    EXPECT_CAUGHT("overlap or are out of order",
                  (F.a.first_segment = s2, s2->prev = NULL, s2->next = s1, s1->prev = s2,
                   s1->next = NULL, F.a.last_segment = s1),
                  (F.a.first_segment = s1, s1->prev = NULL, s1->next = s2, s2->prev = s1,
                   s2->next = NULL, F.a.last_segment = s2));
    /* a segment's base maps to the other segment */
    size_t slot = addr_map_find_slot(&F.a.seg_starts, s2->base);
    assert_int_not_equal(slot, SIZE_MAX);
    EXPECT_CAUGHT("broken prev or segment link", F.a.seg_starts.slots[slot].value = s1,
                  F.a.seg_starts.slots[slot].value = s2);
    assert_int_equal(addr_map_reserve(&F.a.seg_ends, 1), COOP_OK);
    EXPECT_CAUGHT("segment maps hold", addr_map_insert(&F.a.seg_ends, 0x1000, s1),
                  addr_map_remove(&F.a.seg_ends, 0x1000));
    assert_int_equal(addr_map_reserve(&F.a.seg_starts, 1), COOP_OK);
    EXPECT_CAUGHT("segment maps hold", addr_map_insert(&F.a.seg_starts, 0x1000, s1),
                  addr_map_remove(&F.a.seg_starts, 0x1000));
    EXPECT_CAUGHT("last link or count is stale", F.a.last_segment = s1, F.a.last_segment = s2);
    /* a segment 256 bytes off the alignment: its lone block's address is the
     * only thing wrong */
    EXPECT_CAUGHT("not a positive multiple of 512", move_lone_block_segment(s1, -256),
                  move_lone_block_segment(s1, 256));
    /* s2 moved to start inside s1 (and so to end beyond it) */
    intptr_t into_s1 = (intptr_t)(s1->base + 512 * KiB) - (intptr_t)s2->base;
    EXPECT_CAUGHT("overlap or are out of order", move_lone_block_segment(s2, into_s1),
                  move_lone_block_segment(s2, -into_s1));
    /* the first block of a segment of two found in another segment's map
     * entry (the segment's last block is still found under its end) */
    arena_block *z = alloc(4 * KiB, 0, false);
    arena_segment *s3 = arena_block_segment(&F.a, z);
    assert_non_null(s3);
    assert_ptr_equal(s3->first, z);
    assert_non_null(z->next);
    slot = addr_map_find_slot(&F.a.seg_starts, s3->base);
    assert_int_not_equal(slot, SIZE_MAX);
    EXPECT_CAUGHT("broken prev or segment link", F.a.seg_starts.slots[slot].value = s1,
                  F.a.seg_starts.slots[slot].value = s3);
    arena_segment empty;
    arena_segment *last = F.a.last_segment;
    EXPECT_CAUGHT("not wholly tiled", link_empty_segment(&empty, last),
                  link_empty_segment(NULL, last));
    release(z, 0);
    release(x, 0);
    release(y, 0);
    close_arena();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_word_setters),
        cmocka_unit_test(test_split_and_coalesce),
        cmocka_unit_test(test_min_split),
        cmocka_unit_test(test_min_split_high),
        cmocka_unit_test(test_stream_tags),
        cmocka_unit_test(test_alloc_in),
        cmocka_unit_test(test_reclaim_keeps_range_and_capacity),
        cmocka_unit_test(test_va_exhausted),
        cmocka_unit_test(test_device_full_releases_cached_pages),
        cmocka_unit_test(test_device_full_releases_free_segments),
        cmocka_unit_test(test_device_full_releases_segments_for_the_request_size),
        cmocka_unit_test(test_segments),
        cmocka_unit_test(test_segment_of_its_own_from_half_a_segment),
        cmocka_unit_test(test_one_segment_of_the_whole_capacity_stays_whole),
        cmocka_unit_test(test_reclaim_to_exactly_the_capacity),
        cmocka_unit_test(test_segment_of_the_request_size_where_a_whole_one_does_not_fit),
        cmocka_unit_test(test_a_whole_segment_once_reclaim_made_room),
        cmocka_unit_test(test_split_remainder_stays_unmapped),
        cmocka_unit_test(test_segment_remainder_of_min_split),
        cmocka_unit_test(test_alloc_in_up_to_the_end),
        cmocka_unit_test(test_alloc_mapped_prefers_the_lowest_address),
        cmocka_unit_test(test_reclaim_stops_once_enough_is_released),
        cmocka_unit_test(test_reclaim_releases_only_the_segments_needed),
        cmocka_unit_test(test_alloc_mapped_after_the_device_refused),
        cmocka_unit_test(test_alloc_mapped_takes_the_smallest_that_needs_no_page),
        cmocka_unit_test(test_alloc_mapped_keeps_to_the_stream_rule),
        cmocka_unit_test(test_reclaim_remembers_a_busy_stream),
        cmocka_unit_test(test_reclaim_finds_every_free_segment),
        cmocka_unit_test(test_segments_link_in_address_order),
        cmocka_unit_test(test_reclaim_skipped_where_no_free_block_holds_a_page),
        cmocka_unit_test(test_reclaim_counts_the_page_at_the_top),
        cmocka_unit_test(test_reclaim_finds_a_page_across_two_streams_blocks),
        cmocka_unit_test(test_skipped_reclaim_leaves_no_stale_idle_failure),
        cmocka_unit_test(test_check_detects_corruption),
        cmocka_unit_test(test_check_detects_each_corruption_vmm),
        cmocka_unit_test(test_check_sees_a_pending_blocks_unmapped_page),
        cmocka_unit_test(test_check_detects_each_corruption_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
