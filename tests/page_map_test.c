/* Page map: counts, runs and ranges across word boundaries, against a bool array.
 * Random ranges: seed printed, COOP_TEST_SEED sets it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "page_map.h"
#include "test_seed.h"

#define PAGES 1000

static void test_against_array(void **state)
{
    (void)state;
    meta_heap heap;
    assert_int_equal(meta_heap_init(&heap), COOP_OK);
    page_map pm;
    assert_int_equal(page_map_init(&pm, PAGES, &heap), COOP_OK);
    bool bits[PAGES] = {0};
    srand((unsigned)test_seed("page_map_test", 3));
    for (int op = 0; op < 20000; op++) {
        size_t a = (size_t)rand() % PAGES, b = (size_t)rand() % (PAGES + 1);
        size_t lo = a < b ? a : b, hi = a < b ? b : a;
        if (op % 3 != 2) {
            bool v = rand() % 2;
            page_map_set(&pm, lo, hi, v);
            for (size_t i = lo; i < hi; i++)
                bits[i] = v;
        }
        size_t n = 0, total = 0;
        for (size_t i = lo; i < hi; i++)
            n += bits[i];
        for (size_t i = 0; i < PAGES; i++)
            total += bits[i];
        assert_int_equal(page_map_count(&pm, lo, hi), n);
        if (lo < hi)
            assert_int_equal(page_map_all_set(&pm, lo, hi), n == hi - lo);
        assert_int_equal(pm.num_mapped, total);
        assert_int_equal(page_map_popcount(&pm), total);
        bool want = rand() % 2;
        size_t rf, re;
        bool found = page_map_next_run(&pm, lo, hi, want, &rf, &re);
        size_t i = lo;
        while (i < hi && bits[i] != want)
            i++;
        assert_int_equal(found, i < hi);
        if (found) {
            assert_int_equal(rf, i);
            while (i < hi && bits[i] == want)
                i++;
            assert_int_equal(re, i);
            assert_int_equal(page_map_test(&pm, rf), want);
        }
    }
    page_map_fini(&pm, &heap);
    meta_heap_fini(&heap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_against_array)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
