/* Union-find: class values add on merge, finds compress, merging twice is a no-op. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "remat/union_find.h"

static void singletons_keep_their_values(void **state)
{
    (void)state;
    union_find uf = {0};
    uint32_t a = uf_make(&uf, 5), b = uf_make(&uf, 7);
    assert_int_not_equal(uf_find(&uf, a), uf_find(&uf, b));
    assert_int_equal(uf_value(&uf, a), 5);
    assert_int_equal(uf_value(&uf, b), 7);
    uf_free(&uf);
}

static void merge_sums_once(void **state)
{
    (void)state;
    union_find uf = {0};
    uint32_t a = uf_make(&uf, 5), b = uf_make(&uf, 7), c = uf_make(&uf, 11);
    uint32_t r = uf_merge(&uf, a, b);
    assert_int_equal(r, uf_find(&uf, b)); /* the second argument's root stays root */
    assert_int_equal(uf_value(&uf, a), 12);
    uf_merge(&uf, b, a); /* same class: nothing changes */
    assert_int_equal(uf_value(&uf, a), 12);
    uf_merge(&uf, c, a);
    assert_int_equal(uf_value(&uf, b), 23);
    assert_int_equal(uf_find(&uf, a), uf_find(&uf, c));
    uf_add(&uf, c, -5); /* a member leaves: the class value drops, membership stays */
    assert_int_equal(uf_value(&uf, a), 18);
    uf_free(&uf);
}

static void long_chain_compresses(void **state)
{
    (void)state;
    union_find uf = {0};
    enum { N = 5000 };
    uint32_t first = uf_make(&uf, 1), prev = first;
    for (int i = 1; i < N; i++) {
        uint32_t x = uf_make(&uf, 1);
        uf_merge(&uf, prev, x); /* builds a chain first -> ... -> last */
        prev = x;
    }
    assert_int_equal(uf_value(&uf, first), N);
    /* after one find every node on the path points at the root */
    uint32_t root = uf_find(&uf, first);
    assert_int_equal(uf.parent[first], root);
    uf_free(&uf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(singletons_keep_their_values),
        cmocka_unit_test(merge_sums_once),
        cmocka_unit_test(long_chain_compresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
