/*
 * The readers' set of disjoint byte ranges (src/trace/live_ranges.c): its
 * edges (ranges touching at one byte, the ends of the address space, a
 * remove that must not act), its node reuse and growth, out of memory on
 * insert, and a random run against a plain array. Seed printed;
 * COOP_TEST_SEED replays.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "host_alloc_fault.h"
#include "test_seed.h"
#include "trace/live_ranges.h"

/* The range overlapping [addr, last] must be the one starting at want. */
static void expect_overlap(const live_ranges *s, uint64_t addr, uint64_t last, uint64_t want)
{
    const live_range *r = live_ranges_overlap(s, addr, last);
    assert_non_null(r);
    assert_int_equal(r->addr, want);
}

/* Ranges touching at one byte: [0x100, 0x1ff] and [0x200, 0x2ff] are
 * disjoint; byte 0x1ff belongs to the first only, 0x200 to the second. */
static void test_touching_ranges(void **state)
{
    (void)state;
    live_ranges s = {0};
    assert_int_equal(live_ranges_insert(&s, 0x100, 0x1ff, 0, 1), 0);
    assert_null(live_ranges_overlap(&s, 0x200, 0x2ff));
    assert_null(live_ranges_overlap(&s, 0, 0xff));
    assert_int_equal(live_ranges_insert(&s, 0x200, 0x2ff, 0, 2), 0);
    expect_overlap(&s, 0x1ff, 0x1ff, 0x100);
    expect_overlap(&s, 0x200, 0x200, 0x200);
    expect_overlap(&s, 0xff, 0x100, 0x100);
    expect_overlap(&s, 0x2ff, 0x300, 0x200);
    assert_null(live_ranges_overlap(&s, 0x300, 0x300));
    assert_null(live_ranges_overlap(&s, 0xff, 0xff));
    /* a query spanning both answers one of them */
    const live_range *r = live_ranges_overlap(&s, 0x1f0, 0x210);
    assert_non_null(r);
    assert_true(r->addr == 0x100 || r->addr == 0x200);
    live_ranges_free(&s);
}

/* The ends of the address space: [0, 0] and [x, UINT64_MAX]; last + 1
 * would wrap, so nothing may compute it. */
static void test_address_space_ends(void **state)
{
    (void)state;
    live_ranges s = {0};
    assert_null(live_ranges_overlap(&s, 0, UINT64_MAX));
    assert_int_equal(live_ranges_insert(&s, 0, 0, 7, 1), 0);
    assert_int_equal(live_ranges_insert(&s, UINT64_MAX - 0xff, UINT64_MAX, 8, 2), 0);
    expect_overlap(&s, 0, 0, 0);
    expect_overlap(&s, UINT64_MAX, UINT64_MAX, UINT64_MAX - 0xff);
    expect_overlap(&s, UINT64_MAX - 0x100, UINT64_MAX - 0xff, UINT64_MAX - 0xff);
    assert_null(live_ranges_overlap(&s, 1, UINT64_MAX - 0x100));
    const live_range *r = live_ranges_overlap(&s, 0, 0);
    assert_int_equal(r->last, 0);
    assert_int_equal(r->stream, 7);
    assert_int_equal(r->id, 1);
    live_ranges_remove(&s, 0, 1);
    assert_null(live_ranges_overlap(&s, 0, 0));
    expect_overlap(&s, 0, UINT64_MAX, UINT64_MAX - 0xff);
    live_ranges_remove(&s, UINT64_MAX - 0xff, 2);
    assert_null(live_ranges_overlap(&s, 0, UINT64_MAX));
    assert_int_equal(s.root, 0);
    live_ranges_free(&s);
}

/* remove acts only on the range starting at addr with that id: a wrong id,
 * an address inside a range, or one no range starts at leave s as it was. */
static void test_remove_that_must_not_act(void **state)
{
    (void)state;
    live_ranges s = {0};
    live_ranges_remove(&s, 0x100, 1); /* empty set */
    assert_int_equal(live_ranges_insert(&s, 0x100, 0x1ff, 0, 1), 0);
    assert_int_equal(live_ranges_insert(&s, 0x400, 0x4ff, 0, 2), 0);
    live_ranges_remove(&s, 0x100, 2);  /* wrong id */
    live_ranges_remove(&s, 0x180, 1);  /* inside, not the start */
    live_ranges_remove(&s, 0x300, 1);  /* absent */
    live_ranges_remove(&s, 0x1000, 2); /* past every range */
    expect_overlap(&s, 0x100, 0x100, 0x100);
    expect_overlap(&s, 0x4ff, 0x4ff, 0x400);
    assert_int_equal(s.free_list, 0);
    live_ranges_remove(&s, 0x100, 1);
    assert_null(live_ranges_overlap(&s, 0, 0x3ff));
    live_ranges_remove(&s, 0x100, 1); /* again: now absent */
    expect_overlap(&s, 0x400, 0x400, 0x400);
    live_ranges_free(&s);
}

/* A removed range can come back, with another size and id, and reuses the
 * freed node rather than making one. */
static void test_reinsert_reuses_nodes(void **state)
{
    (void)state;
    live_ranges s = {0};
    for (uint32_t i = 0; i < 8; i++)
        assert_int_equal(live_ranges_insert(&s, 0x1000 * (i + 1), 0x1000 * (i + 1) + 0xff, 0, i),
                         0);
    assert_int_equal(s.num_nodes, 8);
    live_ranges_remove(&s, 0x3000, 2);
    live_ranges_remove(&s, 0x5000, 4);
    assert_null(live_ranges_overlap(&s, 0x3000, 0x30ff));
    assert_int_equal(live_ranges_insert(&s, 0x3000, 0x3fff, 1, 42), 0);
    assert_int_equal(live_ranges_insert(&s, 0x5080, 0x50ff, 1, 43), 0);
    assert_int_equal(s.num_nodes, 8); /* both from the free list */
    assert_int_equal(s.free_list, 0);
    const live_range *r = live_ranges_overlap(&s, 0x3800, 0x3800);
    assert_non_null(r);
    assert_int_equal(r->id, 42);
    assert_int_equal(r->last, 0x3fff);
    assert_null(live_ranges_overlap(&s, 0x5000, 0x507f));
    expect_overlap(&s, 0x5000, 0x5080, 0x5080);
    assert_int_equal(live_ranges_insert(&s, 0x100000, 0x1000ff, 0, 9), 0);
    assert_int_equal(s.num_nodes, 9); /* free list empty: a new node */
    live_ranges_free(&s);
    assert_null(s.nodes);
    assert_int_equal(s.root, 0);
}

/* Past the first capacity (256 nodes) the array is realloc'ed: every range
 * must still be found, in descending and ascending address order. */
static void test_growth(void **state)
{
    (void)state;
    enum { N = 2000 };
    live_ranges s = {0};
    for (uint32_t i = 0; i < N; i++) {
        uint64_t a = (uint64_t)(N - i) * 0x200;
        assert_int_equal(live_ranges_insert(&s, a, a + 0x1ff, 0, i), 0);
    }
    assert_true(s.cap >= N + 1);
    for (uint32_t i = 0; i < N; i++) {
        uint64_t a = (uint64_t)(N - i) * 0x200;
        const live_range *r = live_ranges_overlap(&s, a + 0x100, a + 0x100);
        assert_non_null(r);
        assert_int_equal(r->id, i);
    }
    assert_null(live_ranges_overlap(&s, 0, 0x1ff));
    assert_null(live_ranges_overlap(&s, (uint64_t)(N + 1) * 0x200, UINT64_MAX));
    live_ranges_free(&s);
}

/* Out of memory when the array must grow: -1 and s as it was. */
static void test_insert_out_of_memory(void **state)
{
    (void)state;
    live_ranges s = {0};
    host_fault_arm(1);
    assert_int_equal(live_ranges_insert(&s, 0x100, 0x1ff, 0, 1), -1);
    assert_true(host_fault_disarm());
    assert_null(s.nodes);
    assert_int_equal(s.num_nodes, 0);
    assert_int_equal(s.root, 0);
    /* fill the first capacity, then fail the growth */
    uint32_t n = 0;
    while (s.num_nodes + 2 <= s.cap || !s.cap) {
        assert_int_equal(
            live_ranges_insert(&s, 0x1000 * (uint64_t)(n + 1), 0x1000 * (n + 1) + 1, 0, n), 0);
        n++;
    }
    live_ranges before = s;
    host_fault_arm(1);
    assert_int_equal(live_ranges_insert(&s, 0x10, 0x20, 0, 999), -1);
    assert_true(host_fault_disarm());
    assert_memory_equal(&before, &s, sizeof s);
    assert_null(live_ranges_overlap(&s, 0x10, 0x20));
    for (uint32_t i = 0; i < n; i++)
        expect_overlap(&s, 0x1000 * (uint64_t)(i + 1) + 1, 0x1000 * (uint64_t)(i + 1) + 1,
                       0x1000 * (uint64_t)(i + 1));
    /* and it works once memory is back */
    assert_int_equal(live_ranges_insert(&s, 0x10, 0x20, 0, 999), 0);
    expect_overlap(&s, 0x15, 0x15, 0x10);
    live_ranges_free(&s);
}

/* A random run against an array of ranges: inserts of ranges that overlap
 * nothing (others are refused by the caller, as the reader does), removes
 * with right and wrong ids, and overlap queries, all over a small address
 * space so that ranges touch and queries hit. */
#define SLOTS 4096 /* addresses are slot * 16 .. slot * 16 + 15 */
#define MAX_LIVE 512

typedef struct {
    uint64_t addr, last;
    uint32_t id;
} plain_range;

static const plain_range *plain_overlap(const plain_range *p, size_t n, uint64_t addr,
                                        uint64_t last)
{
    for (size_t i = 0; i < n; i++)
        if (p[i].addr <= last && p[i].last >= addr)
            return &p[i];
    return NULL;
}

static void test_against_array(void **state)
{
    (void)state;
    uint64_t rng = test_seed("live_ranges_test", 0x11fe);
    live_ranges s = {0};
    static plain_range plain[MAX_LIVE];
    size_t n = 0;
    uint32_t next_id = 1;
    for (int step = 0; step < 40000; step++) {
        uint64_t r = test_splitmix64(&rng);
        uint64_t addr = (r % SLOTS) * 16 + (r >> 12) % 16;
        uint64_t last = addr + (r >> 16) % 64;
        unsigned op = (unsigned)((r >> 32) % 8);
        const plain_range *want = plain_overlap(plain, n, addr, last);
        const live_range *got = live_ranges_overlap(&s, addr, last);
        assert_int_equal(got != NULL, want != NULL);
        if (got) {
            /* the range found overlaps and is in the array */
            assert_true(got->addr <= last && got->last >= addr);
            const plain_range *same = plain_overlap(plain, n, got->addr, got->addr);
            assert_non_null(same);
            assert_int_equal(same->addr, got->addr);
            assert_int_equal(same->last, got->last);
            assert_int_equal(same->id, got->id);
            assert_int_equal(got->stream, got->id ^ 0x5a5a);
        }
        if (op < 4 && !want && n < MAX_LIVE) {
            assert_int_equal(live_ranges_insert(&s, addr, last, next_id ^ 0x5a5a, next_id), 0);
            plain[n++] = (plain_range){addr, last, next_id++};
        } else if (op < 7 && n) {
            size_t i = (size_t)((r >> 40) % n);
            bool wrong = (r >> 60) % 4 == 0;
            live_ranges_remove(&s, plain[i].addr, plain[i].id + (wrong ? 1 : 0));
            if (!wrong)
                plain[i] = plain[--n];
        } else if (op == 7) {
            live_ranges_remove(&s, addr, next_id); /* no range has that id */
        }
    }
    /* every byte of every range is found, and only there */
    for (size_t i = 0; i < n; i++) {
        expect_overlap(&s, plain[i].addr, plain[i].addr, plain[i].addr);
        expect_overlap(&s, plain[i].last, plain[i].last, plain[i].addr);
    }
    for (uint64_t a = 0; a < SLOTS * 16 + 64; a += 7)
        assert_int_equal(live_ranges_overlap(&s, a, a) != NULL,
                         plain_overlap(plain, n, a, a) != NULL);
    live_ranges_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_touching_ranges),
        cmocka_unit_test(test_address_space_ends),
        cmocka_unit_test(test_remove_that_must_not_act),
        cmocka_unit_test(test_reinsert_reuses_nodes),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_insert_out_of_memory),
        cmocka_unit_test(test_against_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
