/* Address map: insert / find / remove against a plain array, through growth.
 * Random keys: seed printed, COOP_TEST_SEED sets it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "addr_map.h"
#include "test_seed.h"

#define N 20000

static void test_against_array(void **state)
{
    (void)state;
    meta_heap heap;
    assert_int_equal(meta_heap_init(&heap), COOP_OK);
    addr_map m;
    assert_int_equal(addr_map_init(&m, &heap), COOP_OK);
    static bool present[N];
    srand((unsigned)test_seed("addr_map_test", 7));
    for (int op = 0; op < 200000; op++) {
        int i = rand() % N;
        /* Clustered keys (neighbouring blocks) stress linear probing. */
        uintptr_t key = 0x7f0000000000u + (uintptr_t)i * 512;
        if (present[i]) {
            assert_ptr_equal(addr_map_find(&m, key), (void *)(uintptr_t)(i + 1));
            addr_map_remove(&m, key);
            present[i] = false;
        } else {
            assert_null(addr_map_find(&m, key));
            assert_int_equal(addr_map_reserve(&m, 1), COOP_OK);
            addr_map_insert(&m, key, (void *)(uintptr_t)(i + 1));
            present[i] = true;
        }
        if (op % 20000 == 0) {
            size_t n = 0;
            for (int k = 0; k < N; k++) {
                uintptr_t kk = 0x7f0000000000u + (uintptr_t)k * 512;
                void *v = addr_map_find(&m, kk);
                assert_ptr_equal(v, present[k] ? (void *)(uintptr_t)(k + 1) : NULL);
                n += present[k];
            }
            assert_int_equal(m.count, n);
            assert_true(2 * m.count <= m.mask + 1);
        }
    }
    addr_map_remove(&m, 0x1234000); /* absent: no effect */
    addr_map_fini(&m);
    meta_heap_fini(&heap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_against_array)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
