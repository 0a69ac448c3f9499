/*
 * The readers' hash map against a plain array, under random inserts and
 * removals over a small key space (many collisions, long probe chains,
 * wrap-around at the table's end). Seed printed; COOP_TEST_SEED replays.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "test_seed.h"
#include "trace/id_map.h"

#define KEYS 512

static void count_entry(const id_map_slot *slot, void *ctx)
{
    (void)slot;
    (*(size_t *)ctx)++;
}

static void test_against_array(void **state)
{
    (void)state;
    uint64_t rng = test_seed("trace_id_map_test", 7);
    id_map m = {0};
    int present[KEYS] = {0};
    uint32_t value[KEYS];
    size_t count = 0;
    for (int step = 0; step < 200000; step++) {
        unsigned k = (unsigned)(test_splitmix64(&rng) % KEYS);
        /* keys alike in their low bits, as addresses are; the second word
         * splits some of them, as streams do */
        uint64_t a = 0x7f0000000000ull + (uint64_t)(k / 2) * 512, b = k % 2;
        id_map_slot *s = id_map_find(&m, a, b);
        assert_int_equal(s != NULL, present[k]);
        if (s) {
            assert_int_equal(s->id, value[k]);
            if (test_splitmix64(&rng) % 2) {
                id_map_remove(&m, s);
                present[k] = 0;
                count--;
            }
        } else if (test_splitmix64(&rng) % 3) {
            s = id_map_insert(&m, a, b);
            assert_non_null(s);
            s->id = value[k] = (uint32_t)step;
            present[k] = 1;
            count++;
        }
        assert_int_equal(m.count, count);
    }
    size_t visited = 0;
    id_map_each(&m, count_entry, &visited);
    assert_int_equal(visited, count);
    for (unsigned k = 0; k < KEYS; k++) {
        id_map_slot *s = id_map_find(&m, 0x7f0000000000ull + (uint64_t)(k / 2) * 512, k % 2);
        assert_int_equal(s != NULL, present[k]);
    }
    id_map_free(&m);
    assert_null(id_map_find(&m, 1, 2));
}

/* The slot key a goes to in a map holding nothing else: its home. */
static size_t home_of(id_map *m, uint64_t a)
{
    id_map_slot *s = id_map_insert(m, a, 0);
    assert_non_null(s);
    size_t i = (size_t)(s - m->slots);
    id_map_remove(m, s);
    return i;
}

/* A removal whose probe chain wraps past the table's end: the member found
 * after the wrap, at its own home slot 0, must stay there (its home lies
 * between the hole and it, cyclically). Moving it back into the hole at the
 * table's end would put it before its home, where no find looks. The
 * random test rarely builds this chain. */
static void test_removal_across_the_wrap(void **state)
{
    (void)state;
    id_map m = {0};
    home_of(&m, 0); /* allocates the 64 slots and fixes the map's seed */
    size_t last = m.mask;
    uint64_t at_end[2] = {0}, at_zero = 0;
    size_t n_end = 0;
    for (uint64_t a = 1; n_end < 2 || !at_zero; a++) {
        size_t h = home_of(&m, a);
        if (h == last - 1 && n_end < 2)
            at_end[n_end++] = a;
        else if (h == 0 && !at_zero)
            at_zero = a;
    }
    /* slots last-1, last and 0: two keys homed at last-1, one at 0 */
    uint64_t keys[3] = {at_end[0], at_end[1], at_zero};
    size_t want[3] = {last - 1, last, 0};
    for (int k = 0; k < 3; k++) {
        id_map_slot *s = id_map_insert(&m, keys[k], 0);
        assert_int_equal((size_t)(s - m.slots), want[k]);
        s->id = (uint32_t)k + 1;
    }
    id_map_remove(&m, id_map_find(&m, keys[0], 0));
    for (int k = 1; k < 3; k++) {
        id_map_slot *s = id_map_find(&m, keys[k], 0);
        if (!s) {
            fail_msg("key %d is lost after a removal across the wrap", k);
            return;
        }
        assert_int_equal(s->id, k + 1);
    }
    assert_int_equal(m.count, 2);
    id_map_free(&m);
}

/* Undoes x ^= x >> shift. */
static uint64_t unxorshift(uint64_t y, unsigned shift)
{
    uint64_t x = y;
    for (unsigned i = 0; i < 64 / shift + 1; i++)
        x = y ^ (x >> shift);
    return x;
}

/* The inverse of an odd number modulo 2^64 (Newton's iteration). */
static uint64_t odd_inverse(uint64_t a)
{
    uint64_t x = a;
    for (int i = 0; i < 6; i++)
        x *= 2 - a * x;
    return x;
}

/* The key a whose unkeyed splitmix64 finalizer (the map's hash until it
 * took a per-map seed) is h, with b = 0. */
static uint64_t splitmix_preimage(uint64_t h)
{
    uint64_t x = unxorshift(h, 31);
    x *= odd_inverse(0x94d049bb133111ebull);
    x = unxorshift(x, 27);
    x *= odd_inverse(0xbf58476d1ce4e5b9ull);
    return unxorshift(x, 30);
}

/* Keys a file chose so that an unkeyed hash sends them all to one slot
 * (hash values with 40 low zero bits): linear probing then walked one
 * cluster of every key per insert and find, quadratic in the file (40,000
 * such ids in a text trace took 1.2 s to read, a million would take
 * minutes). With a seed only chance clusters form: the longest run of used
 * slots stays short. */
static void test_chosen_keys_do_not_cluster(void **state)
{
    (void)state;
    assert_true(splitmix_preimage(0) == 0);
    enum { N = 20000 };
    id_map m = {0};
    for (uint64_t k = 1; k <= N; k++) {
        id_map_slot *s = id_map_insert(&m, splitmix_preimage(k << 40), 0);
        assert_non_null(s);
        s->id = (uint32_t)k;
    }
    size_t longest = 0, run = 0;
    for (size_t i = 0; i <= m.mask; i++) {
        run = m.slots[i].used ? run + 1 : 0;
        if (run > longest)
            longest = run;
    }
    if (longest > 200)
        fail_msg("a run of %zu used slots among %d keys", longest, N);
    for (uint64_t k = 1; k <= N; k++)
        assert_int_equal(id_map_find(&m, splitmix_preimage(k << 40), 0)->id, k);
    id_map_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_against_array),
                                       cmocka_unit_test(test_removal_across_the_wrap),
                                       cmocka_unit_test(test_chosen_keys_do_not_cluster)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
