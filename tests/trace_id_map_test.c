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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_against_array)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
