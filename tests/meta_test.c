/* Metadata heap: private arena, sized frees, leak accounting, injected failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "meta.h"

static void test_alloc_free_and_leaks(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
    char *p = meta_alloc(&h, 128);
    uint64_t *z = meta_zalloc(&h, 64 * sizeof *z);
    assert_non_null(p);
    assert_non_null(z);
    assert_int_equal((uintptr_t)p % 128, 0); /* block records rely on this */
    for (int i = 0; i < 64; i++)
        assert_int_equal(z[i], 0);
    memset(p, 1, 128);
    assert_int_equal(h.live, 2);
    meta_free(&h, p, 128);
    meta_free(&h, z, 64 * sizeof *z);
    meta_free(&h, NULL, 0);
    assert_int_equal(h.live, 0);
    int64_t before = meta_leaked_allocations();
    void *leak = meta_alloc(&h, 32);
    meta_heap_fini(&h);
    assert_int_equal(meta_leaked_allocations(), before + 1);
    (void)leak; /* still owned by the private arena: deliberately leaked */
}

static void test_injected_failure(void **state)
{
    (void)state;
    meta_heap h;
    assert_int_equal(meta_heap_init(&h), COOP_OK);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
