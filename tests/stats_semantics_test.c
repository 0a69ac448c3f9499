/* The pool's statistics event by event, with exact numbers, against the
 * rules of PyTorch's CUDACachingAllocator (tests/README.md, "Statistics
 * against PyTorch's definitions", has the table): each test names the
 * rule it pins, and where coop's definition differs on purpose, says so.
 * Host backend, 16 KiB pages, 64 KiB segments, min_split 512; every
 * invariant checked after each operation (coop_config.check). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "coop.h"

#define KiB (UINT64_C(1) << 10)

static coop_pool *make(uint64_t capacity, bool vmm)
{
    coop_config c;
    coop_config_default(&c);
    c.capacity = capacity;
    c.page_size = 16 * KiB;
    c.segment_size = 64 * KiB;
    c.use_vmm = vmm;
    c.check = true;
    coop_pool *p = NULL;
    assert_int_equal(coop_pool_create(&c, &p), COOP_OK);
    return p;
}

static coop_stats stats_of(coop_pool *p)
{
    coop_stats s;
    coop_get_stats(p, &s);
    return s;
}

/* One counter against {current, peak, allocated, freed}, named in the
 * failure message. */
#define expect_stat(stat, cur, pk, al, fr)                                                         \
    expect_stat_at(#stat, __LINE__, (stat), (cur), (pk), (al), (fr))
static void expect_stat_at(const char *name, int line, coop_stat s, int64_t cur, int64_t pk,
                           int64_t al, int64_t fr)
{
    if (s.current != cur || s.peak != pk || s.allocated != al || s.freed != fr)
        fail_msg("line %d: %s is {%lld, %lld, %lld, %lld}, expected {%lld, %lld, %lld, %lld}", line,
                 name, (long long)s.current, (long long)s.peak, (long long)s.allocated,
                 (long long)s.freed, (long long)cur, (long long)pk, (long long)al, (long long)fr);
}

static void *alloc(coop_pool *p, size_t size, coop_stream stream)
{
    coop_status st;
    void *ptr = coop_malloc(p, size, stream, 0, &st);
    if (!ptr)
        fail_msg("malloc %zu: %s", size, coop_last_error());
    return ptr;
}

/* VMM. A new pool: the reservation is coop's one segment (PyTorch's
 * expandable segments count none), nothing mapped. Growing the range maps
 * pages (reserved_bytes, num_maps: PyTorch's map_block); a split of a free
 * block with neighbours shrinks inactive_split_bytes by the size taken
 * and keeps the count; an exact fit removes the block from both; a free
 * that merges with both neighbours applies the net change (-2 + 1). */
static void test_vmm_malloc_split_fit_merge(void **state)
{
    (void)state;
    coop_pool *p = make(256 * KiB, true);
    coop_stats s = stats_of(p);
    expect_stat(s.segment, 1, 1, 1, 0);
    expect_stat(s.reserved_bytes, 0, 0, 0, 0);
    expect_stat(s.allocation, 0, 0, 0, 0);
    assert_int_equal(s.num_maps, 0);

    /* grows the range: maps page 0; requested is the size asked */
    char *a = alloc(p, 1000, 0);
    s = stats_of(p);
    expect_stat(s.allocation, 1, 1, 1, 0);
    expect_stat(s.active, 1, 1, 1, 0);
    expect_stat(s.allocated_bytes, 1024, 1024, 1024, 0);
    expect_stat(s.active_bytes, 1024, 1024, 1024, 0);
    expect_stat(s.requested_bytes, 1000, 1000, 1000, 0);
    expect_stat(s.reserved_bytes, 16384, 16384, 16384, 0);
    expect_stat(s.inactive_split, 0, 0, 0, 0);
    assert_int_equal(s.num_maps, 1);
    assert_int_equal(s.map_bytes, 16384);
    assert_int_equal(s.free_bytes, 0); /* the mapped rest lies above the range */

    char *b = alloc(p, 2048, 0); /* inside page 0: nothing mapped */
    assert_ptr_equal(b, a + 1024);
    char *c = alloc(p, 16384, 0); /* [3 KiB, 19 KiB): maps page 1 */
    assert_ptr_equal(c, a + 3072);
    s = stats_of(p);
    expect_stat(s.reserved_bytes, 32768, 32768, 32768, 0);
    assert_int_equal(s.num_maps, 2);

    /* a free block with a neighbour: inactive split (PyTorch counts none
     * in expandable segments: coop's own definition under VMM) */
    assert_int_equal(coop_free(p, a), COOP_OK);
    s = stats_of(p);
    expect_stat(s.allocation, 2, 3, 3, 1);
    expect_stat(s.requested_bytes, 18432, 19432, 19432, 1000);
    expect_stat(s.inactive_split, 1, 1, 1, 0);
    expect_stat(s.inactive_split_bytes, 1024, 1024, 1024, 0);

    /* split of an already split free block: bytes shrink by the size taken */
    char *d = alloc(p, 512, 0);
    assert_ptr_equal(d, a);
    s = stats_of(p);
    expect_stat(s.inactive_split, 1, 1, 1, 0);
    expect_stat(s.inactive_split_bytes, 512, 1024, 1024, 512);

    /* exact fit of a split free block: it leaves both */
    char *e = alloc(p, 512, 0);
    assert_ptr_equal(e, a + 512);
    s = stats_of(p);
    expect_stat(s.inactive_split, 0, 1, 1, 1);
    expect_stat(s.inactive_split_bytes, 0, 1024, 1024, 1024);
    expect_stat(s.allocation, 4, 4, 5, 1);

    /* d and b free (each next to an allocated block), then e merges both */
    assert_int_equal(coop_free(p, d), COOP_OK);
    assert_int_equal(coop_free(p, b), COOP_OK);
    s = stats_of(p);
    expect_stat(s.inactive_split, 2, 2, 3, 1);
    expect_stat(s.inactive_split_bytes, 2560, 2560, 3584, 1024);
    assert_int_equal(coop_free(p, e), COOP_OK);
    s = stats_of(p);
    expect_stat(s.inactive_split, 1, 2, 3, 2);                   /* net -1 */
    expect_stat(s.inactive_split_bytes, 3072, 3072, 4096, 1024); /* net +512 */
    assert_int_equal(s.num_free_blocks, 1);
    assert_int_equal(s.free_bytes, 3072);

    /* the last free merges into one block without neighbours: not split */
    assert_int_equal(coop_free(p, c), COOP_OK);
    s = stats_of(p);
    expect_stat(s.inactive_split, 0, 2, 3, 3);
    expect_stat(s.inactive_split_bytes, 0, 3072, 4096, 4096);
    expect_stat(s.allocation, 0, 4, 5, 5);
    expect_stat(s.active, 0, 4, 5, 5);
    expect_stat(s.allocated_bytes, 0, 19456, 20480, 20480);
    expect_stat(s.active_bytes, 0, 19456, 20480, 20480);
    expect_stat(s.requested_bytes, 0, 19456, 20456, 20456);
    expect_stat(s.reserved_bytes, 32768, 32768, 32768, 0); /* cached */

    /* empty_cache: the two mapped pages, one run, one unmap (PyTorch:
     * unmap_block once per free block); the reservation stays */
    assert_int_equal(coop_empty_cache(p), COOP_OK);
    s = stats_of(p);
    expect_stat(s.reserved_bytes, 0, 32768, 32768, 32768);
    expect_stat(s.segment, 1, 1, 1, 0);
    assert_int_equal(s.num_unmaps, 1);
    assert_int_equal(s.num_maps, 2);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.num_ooms, 0);
    coop_pool_destroy(p);
}

/* Segments (no VMM): a new segment is +1 segment and its bytes reserved
 * (num_maps: PyTorch's num_device_alloc); the rest split off it is a new
 * inactive split block; a free that makes the segment one free block
 * takes it out; an exact fit of an unsplit block changes no split
 * counter; empty_cache releases wholly free segments (-1 segment, bytes,
 * num_unmaps: PyTorch's release_block). */
static void test_segments_malloc_split_fit_merge_release(void **state)
{
    (void)state;
    coop_pool *p = make(256 * KiB, false);
    coop_stats s = stats_of(p);
    expect_stat(s.segment, 0, 0, 0, 0);
    expect_stat(s.reserved_bytes, 0, 0, 0, 0);

    char *a = alloc(p, 1000, 0); /* a 64 KiB segment, the rest split off */
    s = stats_of(p);
    expect_stat(s.segment, 1, 1, 1, 0);
    expect_stat(s.reserved_bytes, 65536, 65536, 65536, 0);
    expect_stat(s.inactive_split, 1, 1, 1, 0);
    expect_stat(s.inactive_split_bytes, 64512, 64512, 64512, 0);
    assert_int_equal(s.num_maps, 1);
    assert_int_equal(s.map_bytes, 65536); /* without VMM: segment bytes */

    char *b = alloc(p, 40 * KiB, 0); /* best fit: the rest of segment 1 */
    assert_ptr_equal(b, a + 1024);
    s = stats_of(p);
    expect_stat(s.segment, 1, 1, 1, 0);
    expect_stat(s.inactive_split, 1, 1, 1, 0);
    expect_stat(s.inactive_split_bytes, 23552, 64512, 64512, 40960);

    /* larger than any free block, half a segment or more: a segment of
     * its own size, fitted exactly (no split) */
    char *c = alloc(p, 48 * KiB, 0);
    s = stats_of(p);
    expect_stat(s.segment, 2, 2, 2, 0);
    expect_stat(s.reserved_bytes, 114688, 114688, 114688, 0);
    expect_stat(s.inactive_split, 1, 1, 1, 0);
    assert_int_equal(s.num_maps, 2);
    assert_int_equal(s.map_bytes, 114688);

    /* freeing the whole-segment block: free, not split; reusing it is an
     * exact fit of an unsplit block: no split counter moves */
    assert_int_equal(coop_free(p, c), COOP_OK);
    assert_ptr_equal(alloc(p, 48 * KiB, 0), c);
    assert_int_equal(coop_free(p, c), COOP_OK);
    s = stats_of(p);
    expect_stat(s.inactive_split, 1, 1, 1, 0);
    expect_stat(s.inactive_split_bytes, 23552, 64512, 64512, 40960);
    expect_stat(s.segment, 2, 2, 2, 0);

    assert_int_equal(coop_empty_cache(p), COOP_OK); /* c's segment */
    s = stats_of(p);
    expect_stat(s.segment, 1, 2, 2, 1);
    expect_stat(s.reserved_bytes, 65536, 114688, 114688, 49152);
    assert_int_equal(s.num_unmaps, 1);

    /* a free next to an allocated block: +1; then b merges with both
     * neighbours into the whole segment: net -2 */
    assert_int_equal(coop_free(p, a), COOP_OK);
    s = stats_of(p);
    expect_stat(s.inactive_split, 2, 2, 2, 0);
    expect_stat(s.inactive_split_bytes, 24576, 64512, 65536, 40960);
    assert_int_equal(coop_free(p, b), COOP_OK);
    s = stats_of(p);
    expect_stat(s.inactive_split, 0, 2, 2, 2);
    expect_stat(s.inactive_split_bytes, 0, 64512, 65536, 65536);
    expect_stat(s.allocation, 0, 3, 4, 4);

    assert_int_equal(coop_empty_cache(p), COOP_OK);
    s = stats_of(p);
    expect_stat(s.segment, 0, 2, 2, 2);
    expect_stat(s.reserved_bytes, 0, 114688, 114688, 114688);
    assert_int_equal(s.num_unmaps, 2);
    assert_int_equal(s.num_maps, 2);
    coop_pool_destroy(p);
}

/* A free of a block used on another stream (record_stream): allocation and
 * allocated_bytes drop at the free, active and active_bytes when the
 * stream's event completes (as PyTorch). requested_bytes drops at the free
 * (PyTorch: at completion, with active_bytes; coop.h, docs/pytorch.md).
 * The completed block then joins the free space as any free does. Both
 * pool kinds. */
static void test_pending_free_and_completion(void **state)
{
    (void)state;
    for (int vmm = 0; vmm < 2; vmm++) {
        coop_pool *p = make(256 * KiB, vmm);
        char *a = alloc(p, 1000, 1);
        char *g = alloc(p, 512, 1);
        assert_ptr_equal(g, a + 1024);
        assert_int_equal(coop_host_hold_stream(p, 7, true), COOP_OK);
        assert_int_equal(coop_record_stream(p, a, 7), COOP_OK);
        coop_stats before = stats_of(p);
        assert_int_equal(coop_free(p, a), COOP_OK);
        coop_stats s = stats_of(p);
        expect_stat(s.allocation, 1, 2, 2, 1);
        expect_stat(s.allocated_bytes, 512, 1536, 1536, 1024);
        expect_stat(s.active, 2, 2, 2, 0);
        expect_stat(s.active_bytes, 1536, 1536, 1536, 0);
        expect_stat(s.requested_bytes, 512, 1512, 1512, 1000);
        /* pending is not free: no split counter, no free byte moved */
        expect_stat(s.inactive_split, before.inactive_split.current, before.inactive_split.peak,
                    before.inactive_split.allocated, before.inactive_split.freed);
        assert_int_equal(s.free_bytes, before.free_bytes);

        /* the event completes: seen at the next allocation, which then
         * takes the first half of the released block */
        assert_int_equal(coop_host_hold_stream(p, 7, false), COOP_OK);
        assert_ptr_equal(alloc(p, 512, 1), a);
        s = stats_of(p);
        expect_stat(s.allocation, 2, 2, 3, 1);
        expect_stat(s.active, 2, 2, 3, 1);
        expect_stat(s.active_bytes, 1024, 1536, 2048, 1024);
        expect_stat(s.requested_bytes, 1024, 1512, 2024, 1000);
        /* [512, 1024) free between two allocated blocks */
        assert_int_equal(s.inactive_split.current, before.inactive_split.current + 1);
        assert_int_equal(s.inactive_split_bytes.current, before.inactive_split_bytes.current + 512);
        assert_int_equal(s.num_alloc_retries, 0);
        coop_pool_destroy(p);
    }
}

/* num_alloc_retries: once per malloc that had to release cached memory,
 * whatever number of retries it took (PyTorch: once per malloc that
 * reached its release-everything retry); num_ooms: once per failed malloc.
 * A request above the capacity fails at once: num_ooms, no retry (PyTorch
 * would release its cache and retry first). Size 0 and a refused argument
 * count neither. VMM, 64 KiB capacity. */
static void test_retries_and_ooms_vmm(void **state)
{
    (void)state;
    coop_pool *p = make(64 * KiB, true);
    char *a = alloc(p, 32 * KiB, 0); /* pages 0-1 */
    char *b = alloc(p, 16 * KiB, 0); /* page 2 */
    assert_ptr_equal(b, a + 32 * KiB);
    assert_int_equal(coop_free(p, a), COOP_OK); /* 2 pages cached */

    /* 48 KiB more: 3 pages past 48 KiB mapped; the 2 cached ones are
     * released to make room, and the malloc succeeds: one retry */
    char *c = alloc(p, 48 * KiB, 0);
    assert_ptr_equal(c, a + 48 * KiB);
    coop_stats s = stats_of(p);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.num_ooms, 0);
    expect_stat(s.reserved_bytes, 65536, 65536, 98304, 32768); /* released, then mapped */
    assert_int_equal(s.num_maps, 3);
    assert_int_equal(s.num_unmaps, 1);

    /* nothing left to release: one more retry, and one OOM */
    coop_status st;
    assert_null(coop_malloc(p, 32 * KiB, 0, 0, &st));
    assert_int_equal(st, COOP_ERR_NOMEM);
    s = stats_of(p);
    assert_int_equal(s.num_alloc_retries, 2);
    assert_int_equal(s.num_ooms, 1);

    /* above the capacity: an OOM, no retry */
    assert_null(coop_malloc(p, 64 * KiB + 1, 0, 0, &st));
    assert_int_equal(st, COOP_ERR_NOMEM);
    /* size 0 and bad flags: neither */
    assert_null(coop_malloc(p, 0, 0, 0, &st));
    assert_int_equal(st, COOP_OK);
    assert_null(coop_malloc(p, 512, 0, 4, &st));
    assert_int_equal(st, COOP_ERR_INVALID);
    s = stats_of(p);
    assert_int_equal(s.num_alloc_retries, 2);
    assert_int_equal(s.num_ooms, 2);
    /* failures leave the other counters as they were */
    expect_stat(s.allocation, 2, 2, 3, 1);
    expect_stat(s.allocated_bytes, 65536, 65536, 98304, 32768);
    coop_free(p, b);
    coop_free(p, c);
    coop_pool_destroy(p);
}

/* Segments: over the capacity, an idle free segment is released for the
 * new one (one retry; segment and reserved_bytes down, num_unmaps up);
 * with none left, one more retry and an OOM. 192 KiB capacity. */
static void test_retries_and_ooms_segments(void **state)
{
    (void)state;
    coop_pool *p = make(192 * KiB, false);
    char *a = alloc(p, 64 * KiB, 0); /* segment 1, whole */
    char *b = alloc(p, 64 * KiB, 0); /* segment 2, whole */
    assert_int_equal(coop_free(p, a), COOP_OK);
    char *c = alloc(p, 40 * KiB, 0); /* fits a's free segment: no retry */
    assert_ptr_equal(c, a);
    assert_int_equal(coop_free(p, c), COOP_OK);
    assert_int_equal(stats_of(p).num_alloc_retries, 0);

    /* 96 KiB: 128 + 96 > 192, a's idle segment released: one retry */
    char *d = alloc(p, 96 * KiB, 0);
    coop_stats s = stats_of(p);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.num_ooms, 0);
    expect_stat(s.segment, 2, 2, 3, 1);
    expect_stat(s.reserved_bytes, 163840, 163840, 229376, 65536);
    assert_int_equal(s.num_maps, 3);
    assert_int_equal(s.num_unmaps, 1);

    /* 64 KiB more: nothing idle to release: a retry and an OOM */
    coop_status st;
    assert_null(coop_malloc(p, 64 * KiB, 0, 0, &st));
    assert_int_equal(st, COOP_ERR_NOMEM);
    s = stats_of(p);
    assert_int_equal(s.num_alloc_retries, 2);
    assert_int_equal(s.num_ooms, 1);
    expect_stat(s.segment, 2, 2, 3, 1);
    assert_int_equal(s.num_maps, 3);
    coop_free(p, b);
    coop_free(p, d);
    coop_pool_destroy(p);
}

/* coop_reset_peak_stats: every counter's peak becomes its current value
 * (PyTorch's resetPeakStats); the cumulative amounts and the num_*
 * counters stay (PyTorch resets those only in resetAccumulatedStats,
 * which the Python layer gives, coop.torch.reset_accumulated_memory_stats). */
static void test_reset_peak(void **state)
{
    (void)state;
    for (int vmm = 0; vmm < 2; vmm++) {
        coop_pool *p = make(256 * KiB, vmm);
        char *a = alloc(p, 1000, 0);
        char *b = alloc(p, 20 * KiB, 0);
        assert_int_equal(coop_free(p, b), COOP_OK);
        coop_stats before = stats_of(p);
        coop_reset_peak_stats(p);
        coop_stats s = stats_of(p);
        const coop_stat *now[] = {
            &s.allocation,      &s.segment,        &s.active,       &s.inactive_split,
            &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes,
            &s.requested_bytes};
        const coop_stat *was[] = {&before.allocation,      &before.segment,
                                  &before.active,          &before.inactive_split,
                                  &before.allocated_bytes, &before.reserved_bytes,
                                  &before.active_bytes,    &before.inactive_split_bytes,
                                  &before.requested_bytes};
        for (size_t i = 0; i < sizeof now / sizeof now[0]; i++) {
            assert_int_equal(now[i]->peak, now[i]->current);
            assert_int_equal(now[i]->current, was[i]->current);
            assert_int_equal(now[i]->allocated, was[i]->allocated);
            assert_int_equal(now[i]->freed, was[i]->freed);
        }
        assert_true(before.allocated_bytes.peak > s.allocated_bytes.peak); /* it did move */
        assert_int_equal(s.num_maps, before.num_maps);
        assert_int_equal(s.num_unmaps, before.num_unmaps);
        coop_free(p, a);
        coop_pool_destroy(p);
    }
}

/* coop_set_capacity below the mapped bytes releases idle cached memory:
 * reserved_bytes and num_unmaps as empty_cache's, no retry or OOM counted
 * (PyTorch's set_per_process_memory_fraction releases nothing). */
static void test_set_capacity_releases(void **state)
{
    (void)state;
    coop_pool *p = make(64 * KiB, true);
    char *a = alloc(p, 32 * KiB, 0);
    char *b = alloc(p, 16 * KiB, 0);
    assert_int_equal(coop_free(p, a), COOP_OK);
    assert_int_equal(coop_set_capacity(p, 32 * KiB), COOP_OK);
    coop_stats s = stats_of(p);
    assert_true(s.reserved_bytes.current <= 32768);
    assert_int_equal(s.reserved_bytes.peak, 49152);
    assert_int_equal(s.reserved_bytes.freed, 49152 - s.reserved_bytes.current);
    assert_true(s.num_unmaps >= 1);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.num_ooms, 0);
    expect_stat(s.allocation, 1, 2, 2, 1);
    coop_free(p, b);
    coop_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vmm_malloc_split_fit_merge),
        cmocka_unit_test(test_segments_malloc_split_fit_merge_release),
        cmocka_unit_test(test_pending_free_and_completion),
        cmocka_unit_test(test_retries_and_ooms_vmm),
        cmocka_unit_test(test_retries_and_ooms_segments),
        cmocka_unit_test(test_reset_peak),
        cmocka_unit_test(test_set_capacity_releases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
