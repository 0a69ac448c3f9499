/* Metadata heap: allocation, leak accounting, record slabs, injected failure. */
#include <setjmp.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "meta.h"

/* Whether the mapping holding p carries the transparent huge page advice
 * (MADV_HUGEPAGE: "hg" among its VmFlags in /proc/self/smaps). */
static bool advised_huge(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    bool inside = false, found = false, hg = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            inside = lo <= (uintptr_t)p && (uintptr_t)p < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0)
            found = true, hg = strstr(line, " hg") != NULL;
    }
    fclose(f);
    assert_true(found);
    return hg;
}

/* The advice needs a kernel with transparent huge pages. */
static bool thp_kernel(void)
{
#ifdef MADV_HUGEPAGE
    return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
#else
    return false;
#endif
}

static void test_alloc_free_and_leaks(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
    char *p = meta_alloc(&h, 128);
    uint64_t *z = meta_zalloc(&h, 64 * sizeof *z);
    assert_non_null(p);
    assert_non_null(z);
    for (int i = 0; i < 64; i++)
        assert_int_equal(z[i], 0);
    memset(p, 1, 128);
    assert_int_equal(h.live, 2);
    meta_free(&h, p, 128);
    meta_free(&h, z, 64 * sizeof *z);
    meta_free(&h, NULL, 0);
    assert_int_equal(h.live, 0);
    /* zeroed even where the C library hands the same memory out again */
    unsigned char *dirty = meta_alloc(&h, 256);
    assert_non_null(dirty);
    memset(dirty, 0xff, 256);
    meta_free(&h, dirty, 256);
    unsigned char *clean = meta_zalloc(&h, 256);
    assert_non_null(clean);
    for (int i = 0; i < 256; i++)
        assert_int_equal(clean[i], 0);
    meta_free(&h, clean, 256);
    int64_t before = meta_leaked_allocations();
    void *leak = meta_alloc(&h, 32);
    void *leak2 = meta_zalloc(&h, 32);
    meta_heap_fini(&h);
    assert_int_equal(meta_leaked_allocations(), before + 2); /* each allocation counts */
    free(leak); /* counted as leaked above; released so LeakSanitizer stays quiet */
    free(leak2);
}

/* Records are cache-line aligned, distinct, recycled LIFO, and span chunks. */
static void test_slab(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
    meta_slab slab;
    meta_slab_init(&slab, &h, 64, 3);
    void *r[7];
    for (int i = 0; i < 7; i++) {
        r[i] = meta_slab_take(&slab);
        assert_non_null(r[i]);
        assert_int_equal((uintptr_t)r[i] % 64, 0);
        memset(r[i], 0xab, 64);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(r[i], r[j]);
    }
    assert_int_equal(slab.live, 7);
    assert_int_equal(h.live, 3); /* three chunks of three records */
    /* a chunk's records are taken from its lowest address up */
    assert_ptr_equal(r[1], (unsigned char *)r[0] + 64);
    assert_ptr_equal(r[2], (unsigned char *)r[1] + 64);
    meta_slab_give(&slab, r[4]);
    assert_int_equal(slab.live, 6);
    assert_int_equal(slab.num_free, 3);
    assert_ptr_equal(meta_slab_take(&slab), r[4]);
    /* reserving what is free already grows nothing */
    assert_true(meta_slab_reserve(&slab, 2));
    assert_int_equal(h.live, 3);
    meta_slab_fini(&slab);
    assert_int_equal(h.live, 0);
    assert_int_equal(slab.live, 0);
    assert_int_equal(slab.num_free, 0);
    /* an emptied slab is usable again */
    assert_non_null(meta_slab_take(&slab));
    assert_int_equal(slab.num_free, 2);
    meta_slab_fini(&slab);
    meta_heap_fini(&h);
}

/* Past a huge page of records the slab grows by aligned huge-page chunks:
 * records stay aligned, distinct and recyclable across the switch. */
static void test_slab_huge_chunks(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
    meta_slab slab;
    meta_slab_init(&slab, &h, 64, 1023);
    size_t n = 3 * META_HUGE_PAGE / 64; /* small chunks, then two or more huge ones */
    unsigned char **r = malloc(n * sizeof *r);
    assert_non_null(r);
    for (size_t i = 0; i < n; i++) {
        r[i] = meta_slab_take(&slab);
        assert_non_null(r[i]);
        assert_int_equal((uintptr_t)r[i] % 64, 0);
        r[i][0] = (unsigned char)i; /* the first byte of a record, as the free list uses it */
        r[i][63] = (unsigned char)(i >> 8);
    }
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r[i][0], (unsigned char)i);
        assert_int_equal(r[i][63], (unsigned char)(i >> 8));
    }
    size_t small = (META_HUGE_PAGE / 64 + 1022) / 1023; /* chunks before the switch */
    assert_true((size_t)h.live > small);
    assert_true((size_t)h.live < small + 4);
    assert_int_equal(slab.live, n);
    meta_slab_give(&slab, r[n - 1]);
    assert_ptr_equal(meta_slab_take(&slab), r[n - 1]);
    free(r);
    meta_slab_fini(&slab);
    assert_int_equal(h.live, 0);
    meta_heap_fini(&h);
}

/* The switch comes when the records reach exactly a huge page's bytes,
 * and a huge chunk holds as many records as fit in the huge page after its
 * header (one cache line). */
static void test_slab_switch_point(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
    meta_slab slab;
    size_t per = META_HUGE_PAGE / 64 / 32; /* 32 small chunks make a huge page */
    meta_slab_init(&slab, &h, 64, per);
    for (size_t i = 0; i < 32 * per; i++)
        assert_non_null(meta_slab_take(&slab));
    assert_int_equal(h.live, 32);
    assert_int_equal(slab.num_free, 0);
    assert_non_null(meta_slab_take(&slab));
    assert_int_equal(h.live, 33);
    assert_int_equal(slab.num_free, (META_HUGE_PAGE - 64) / 64 - 1);
    meta_slab_fini(&slab);
    meta_heap_fini(&h);
}

/* Records of half a huge page switch too: the third comes from a huge
 * page chunk of its own, right after the chunk's header line, and the
 * chunk is advised for huge pages. */
static void test_slab_switch_with_large_records(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
    meta_slab slab;
    meta_slab_init(&slab, &h, META_HUGE_PAGE / 2, 1);
    assert_non_null(meta_slab_take(&slab));
    assert_non_null(meta_slab_take(&slab)); /* two chunks: a huge page of records */
    unsigned char *r = meta_slab_take(&slab);
    assert_non_null(r);
    assert_int_equal(h.live, 3);
    assert_int_equal(slab.num_free, 0); /* one record after the header */
    assert_int_equal((uintptr_t)r % META_HUGE_PAGE, 64);
    if (thp_kernel())
        assert_true(advised_huge(r));
    meta_slab_fini(&slab);
    meta_heap_fini(&h);
}

/* Hot zeroed allocations (huge-page aligned and advised from META_HUGE_MIN
 * on) come back zeroed, small ones too. */
static void test_large_zalloc(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
    size_t sizes[] = {META_HUGE_MIN + 4096 + 8 /* not a multiple of the huge page */, 4096,
                      META_HUGE_MIN + 4096 + 8, META_HUGE_MIN /* the first aligned size */};
    for (int round = 0; round < 4; round++) {
        size_t size = sizes[round];
        unsigned char *p = meta_zalloc_hot(&h, size);
        assert_non_null(p);
        for (size_t i = 0; i < size; i += 997)
            assert_int_equal(p[i], 0);
        assert_int_equal(p[size - 1], 0);
        if (size >= META_HUGE_MIN) {
            /* aligned, and whole huge pages, all of them advised */
            assert_int_equal((uintptr_t)p % META_HUGE_PAGE, 0);
            size_t whole = (size + META_HUGE_PAGE - 1) / META_HUGE_PAGE * META_HUGE_PAGE;
            assert_true(malloc_usable_size(p) >= whole);
            if (thp_kernel())
                assert_true(advised_huge(p + whole - 1));
        }
        memset(p, 0xcd, size); /* a later round may get this memory back */
        meta_free(&h, p, size);
    }
    assert_int_equal(h.live, 0);
    meta_heap_fini(&h);
}

/* The slab fails only when it must grow, and then stays usable. */
static void test_slab_failure(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
    meta_slab slab;
    meta_slab_init(&slab, &h, 64, 2);
    void *a = meta_slab_take(&slab);
    assert_non_null(a);
    meta_fail_nth(1);
    void *b = meta_slab_take(&slab); /* from the first chunk: no allocation */
    assert_non_null(b);
    assert_null(meta_slab_take(&slab)); /* must grow: the injected failure fires */
    assert_int_equal(slab.live, 2);
    assert_non_null(meta_slab_take(&slab));
    /* Reserving grows as many chunks as needed, or fails without taking any. */
    assert_int_equal(slab.num_free, 1);
    meta_fail_nth(2);
    assert_false(meta_slab_reserve(&slab, 6)); /* one chunk grows, the second fails */
    assert_int_equal(slab.num_free, 3);
    assert_int_equal(slab.live, 3);
    assert_true(meta_slab_reserve(&slab, 6));
    assert_true(slab.num_free >= 6);
    assert_int_equal(h.live, 5); /* chunks: 1, 2, 3 above, then 4 and 5 */
    meta_slab_fini(&slab);
    assert_int_equal(h.live, 0);
    meta_heap_fini(&h);
}

static void test_injected_failure(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
    /* a hot allocation counts and fails like any other */
    meta_fail_nth(1);
    assert_null(meta_zalloc_hot(&h, META_HUGE_MIN));
    assert_int_equal(meta_fail_remaining(), 0);
    void *hot = meta_zalloc_hot(&h, META_HUGE_MIN);
    assert_non_null(hot);
    meta_free(&h, hot, META_HUGE_MIN);
    meta_fail_nth(2);
    void *a = meta_alloc(&h, 64);
    void *b = meta_alloc(&h, 64);
    void *c = meta_alloc(&h, 64);
    assert_non_null(a);
    assert_null(b);
    assert_non_null(c);
    meta_free(&h, a, 64);
    meta_free(&h, c, 64);
    meta_heap_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_free_and_leaks),
        cmocka_unit_test(test_injected_failure),
        cmocka_unit_test(test_slab),
        cmocka_unit_test(test_slab_huge_chunks),
        cmocka_unit_test(test_slab_switch_point),
        cmocka_unit_test(test_slab_switch_with_large_records),
        cmocka_unit_test(test_large_zalloc),
        cmocka_unit_test(test_slab_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
