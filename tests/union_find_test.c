/* Union-find: class values add on merge, the bigger class keeps its root, finds
 * compress, merging twice is a no-op. */
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
    uf_leave(&uf, c, 5); /* a member leaves: the class value drops, membership stays */
    assert_int_equal(uf_value(&uf, a), 18);
    uf_free(&uf);
}

/* A sum past INT64_MAX saturates there and stays there when members leave
 * (what it summed is unknown; less would make the rest read cheap), and a
 * negative operand cannot make the saturating test overflow. */
static void saturated_sums_stay_saturated(void **state)
{
    (void)state;
    union_find uf = {0};
    const int64_t big = INT64_C(1) << 62;
    uint32_t a = uf_make(&uf, big), b = uf_make(&uf, big / 2), c = uf_make(&uf, big);
    uf_merge(&uf, a, b);
    assert_true(uf_value(&uf, a) == big + big / 2); /* exact below the limit */
    uf_merge(&uf, c, a);
    assert_true(uf_value(&uf, a) == INT64_MAX); /* 2.5 x 2^62 */
    uf_leave(&uf, c, big);
    uf_leave(&uf, b, big / 2);
    assert_true(uf_value(&uf, a) == INT64_MAX);
    assert_true(uf_value_add(INT64_MAX, 1) == INT64_MAX);
    assert_true(uf_value_add(-5, 7) == 7);
    assert_true(uf_value_add(INT64_MAX, -1) == INT64_MAX);
    uf_free(&uf);
}

/* A class is cut once a member leaves it, and a merge with a cut class is
 * cut: it may no longer be one connected set. */
static void leaving_cuts_the_class_and_merges_carry_it(void **state)
{
    (void)state;
    union_find uf = {0};
    uint32_t a = uf_make(&uf, 5), b = uf_make(&uf, 7), c = uf_make(&uf, 11), d = uf_make(&uf, 1);
    uf_merge(&uf, a, b);
    assert_false(uf_is_cut(&uf, uf_find(&uf, a)));
    uf_leave(&uf, a, 5);
    assert_true(uf_is_cut(&uf, uf_find(&uf, b)));
    assert_int_equal(uf_value(&uf, b), 7);
    assert_false(uf_is_cut(&uf, uf_find(&uf, c)));
    uf_merge(&uf, c, d); /* two clean classes: clean */
    assert_false(uf_is_cut(&uf, uf_find(&uf, d)));
    uf_merge(&uf, d, b); /* clean with cut, either order: cut */
    assert_true(uf_is_cut(&uf, uf_find(&uf, c)));
    uint32_t e = uf_make(&uf, 2); /* a new node starts clean */
    assert_false(uf_is_cut(&uf, e));
    uf_merge(&uf, a, e);
    assert_true(uf_is_cut(&uf, uf_find(&uf, e)));
    uf_free(&uf);
}

static void big_classes_keep_their_root(void **state)
{
    (void)state;
    union_find uf = {0};
    enum { N = 5000 };
    uint32_t first = uf_make(&uf, 1), second = uf_make(&uf, 1);
    uint32_t root = uf_merge(&uf, first, second); /* equal sizes: the second's */
    assert_int_equal(root, second);
    for (int i = 2; i < N; i++) {
        uint32_t x = uf_make(&uf, 1);
        /* the new singleton is the second argument, yet the bigger class's
         * root stays: callers caching roots see it unchanged */
        assert_int_equal(uf_merge(&uf, first, x), root);
    }
    assert_int_equal(uf_value(&uf, first), N);
    assert_true(uf_is_root(&uf, root));
    for (uint32_t i = 0; i < N; i++) /* union by size: every node hangs off the root */
        assert_int_equal(uf.parent[i], root);
    uf_free(&uf);
}

static void finds_compress_paths(void **state)
{
    (void)state;
    union_find uf = {0};
    /* equal sizes at every level: a binary tree of depth 4 */
    enum { N = 16 };
    uint32_t nodes[N];
    for (int i = 0; i < N; i++)
        nodes[i] = uf_make(&uf, 1);
    for (int step = 1; step < N; step *= 2)
        for (int i = 0; i + step < N; i += 2 * step)
            uf_merge(&uf, nodes[i], nodes[i + step]);
    uint32_t root = uf_find(&uf, nodes[0]);
    assert_int_equal(uf_value(&uf, nodes[0]), N);
    for (int i = 0; i < N; i++) { /* after one find each node points at the root */
        uf_find(&uf, nodes[i]);
        assert_int_equal(uf.parent[nodes[i]], root);
    }
    uf_free(&uf);
}

/* Compaction keeps the classes still named, with their values, cut flags
 * and sizes, one node per class shared by its named nodes; the rest go. */
static void compaction_keeps_the_named_classes(void **state)
{
    (void)state;
    union_find uf = {0};
    uint32_t n[8];
    for (int i = 0; i < 8; i++)
        n[i] = uf_make(&uf, 10 + i);
    uf_merge(&uf, n[0], n[1]);
    uf_merge(&uf, n[1], n[2]); /* {0, 1, 2}: 33, three members */
    uf_merge(&uf, n[3], n[4]);
    uf_leave(&uf, n[4], 14);   /* {3, 4}: 13, cut */
    uf_merge(&uf, n[5], n[6]); /* {5, 6}: named by nobody below */
    /* the caller holds 0 and 2 (one class), 3 (the cut one), 7 (a singleton) */
    uint32_t held[4] = {n[0], n[2], n[3], n[7]};
    uint32_t *refs[4] = {&held[0], &held[1], &held[2], &held[3]};
    assert_int_equal(uf_compact(&uf, refs, 4, 100), 0);
    assert_int_equal(uf.count, 3);
    assert_true(uf.cap - uf.count >= 100); /* the spare room asked for */
    assert_int_equal(held[0], held[1]);
    assert_int_equal(uf_value(&uf, held[0]), 33);
    assert_false(uf_is_cut(&uf, uf_find(&uf, held[0])));
    assert_int_equal(uf_value(&uf, held[2]), 13);
    assert_true(uf_is_cut(&uf, uf_find(&uf, held[2])));
    assert_int_equal(uf_value(&uf, held[3]), 17);
    for (int i = 0; i < 4; i++)
        assert_true(uf_is_root(&uf, held[i]));
    /* sizes kept: the three-member class stays the root of a merge with
     * the singleton, as before compaction */
    assert_int_equal(uf_merge(&uf, held[0], held[3]), held[0]);
    assert_int_equal(uf_value(&uf, held[3]), 50);
    /* nothing named: everything goes, and the union-find still works */
    assert_int_equal(uf_compact(&uf, NULL, 0, 0), 0);
    assert_int_equal(uf.count, 0);
    uint32_t x = uf_make(&uf, 5);
    assert_int_equal(uf_value(&uf, x), 5);
    uf_free(&uf);
}

/* A clean class absorbing a smaller cut one (the clean root stays the
 * root) is cut: the merge carries the cut flag from the class that joins,
 * not only from the root's. */
static void a_clean_root_absorbing_a_cut_class_is_cut(void **state)
{
    (void)state;
    union_find uf = {0};
    uint32_t p = uf_make(&uf, 1), q = uf_make(&uf, 2), s = uf_make(&uf, 3);
    uint32_t c = uf_make(&uf, 4), d = uf_make(&uf, 5);
    uf_merge(&uf, p, q);
    uint32_t clean = uf_merge(&uf, p, s); /* {p, q, s}: three members, clean */
    uf_merge(&uf, c, d);
    uf_leave(&uf, c, 4); /* {c, d}: two members, cut */
    assert_int_equal(uf_merge(&uf, d, p), clean);
    assert_true(uf_is_cut(&uf, clean));
    assert_int_equal(uf_value(&uf, c), 1 + 2 + 3 + 5);
    uf_free(&uf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(singletons_keep_their_values),
        cmocka_unit_test(merge_sums_once),
        cmocka_unit_test(leaving_cuts_the_class_and_merges_carry_it),
        cmocka_unit_test(a_clean_root_absorbing_a_cut_class_is_cut),
        cmocka_unit_test(saturated_sums_stay_saturated),
        cmocka_unit_test(big_classes_keep_their_root),
        cmocka_unit_test(finds_compress_paths),
        cmocka_unit_test(compaction_keeps_the_named_classes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
