/* Free index: best fit, max, per-stream sets, replace, against a brute-force model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "free_index.h"
#include "test_seed.h"

#define N 3000
#define ANY ((coop_stream)UINTPTR_MAX)

static meta_heap heap;
static free_index fi;
static free_index_node nodes[N];
static bool present[N];

static int setup(void **state)
{
    (void)state;
    assert_int_equal(meta_heap_init(&heap), COOP_OK);
    free_index_init(&fi, ANY, &heap);
    assert_int_equal(free_index_reserve(&fi, ANY), COOP_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free_index_fini(&fi);
    meta_heap_fini(&heap);
    return 0;
}

static bool less(const free_index_node *a, const free_index_node *b)
{
    return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

/* Brute force: smallest (size, addr) >= size among stream's and any's nodes. */
static free_index_node *model_best_fit(uint64_t size, coop_stream stream)
{
    free_index_node *best = NULL;
    for (int i = 0; i < N; i++)
        if (present[i] && nodes[i].size >= size &&
            (nodes[i].stream == stream || nodes[i].stream == ANY) &&
            (!best || less(&nodes[i], best)))
            best = &nodes[i];
    return best;
}

/* free_index_set_fit and free_index_next walk stream's set alone: every
 * node of size >= want there, once each, in (size, addr) order. */
static void walk_matches_model(uint64_t want, coop_stream stream)
{
    size_t expected = 0, seen = 0;
    for (int i = 0; i < N; i++)
        expected += present[i] && nodes[i].stream == stream && nodes[i].size >= want;
    const free_index_node *prev = NULL;
    for (free_index_node *n = free_index_set_fit(&fi, want, stream); n;
         n = free_index_next(&fi, n)) {
        ptrdiff_t i = n - nodes;
        assert_true(i >= 0 && i < N && present[i]);
        assert_true(n->stream == stream && n->size >= want);
        assert_true(!prev || less(prev, n));
        prev = n;
        seen++;
    }
    assert_int_equal(seen, expected);
}

static void test_small_cases(void **state)
{
    (void)state;
    assert_null(free_index_best_fit(&fi, 512, 0));
    assert_null(free_index_max(&fi));
    assert_int_equal(free_index_reserve(&fi, 1), COOP_OK);
    free_index_node a, b, c;
    free_index_insert(&fi, &a, 4096, 0x10000, 1);
    free_index_insert(&fi, &b, 4096, 0x8000, ANY);
    free_index_insert(&fi, &c, 1024, 0x20000, 1);
    assert_ptr_equal(free_index_best_fit(&fi, 512, 1), &c);
    assert_ptr_equal(free_index_best_fit(&fi, 2048, 1), &b); /* tie on size: lower address */
    assert_ptr_equal(free_index_best_fit(&fi, 512, 2), &b);  /* stream 2 sees only "any" */
    assert_null(free_index_best_fit(&fi, 8192, 1));
    assert_ptr_equal(free_index_max(&fi), &a);
    assert_ptr_equal(free_index_first(&fi, 1), &c);
    assert_ptr_equal(free_index_set_fit(&fi, 512, 1), &c); /* stream 1's set alone */
    assert_ptr_equal(free_index_next(&fi, &c), &a);
    assert_null(free_index_next(&fi, &a));
    assert_ptr_equal(free_index_set_fit(&fi, 2048, ANY), &b);
    assert_null(free_index_next(&fi, &b));
    assert_null(free_index_set_fit(&fi, 512, 7)); /* no set */
    assert_true(free_index_contains(&fi, &b));
    free_index_remove(&fi, &b);
    assert_false(free_index_contains(&fi, &b));
    assert_ptr_equal(free_index_best_fit(&fi, 2048, 1), &a);
    free_index_remove(&fi, &a);
    free_index_remove(&fi, &c);
    assert_int_equal(fi.count, 0);
    assert_null(free_index_check(&fi));
}

static void test_random_against_model(void **state)
{
    (void)state;
    /* libc's rand(), as before test_seed.h, so that a seed from an older
     * log repeats its run (srand takes the seed's low 32 bits) */
    srand((unsigned)test_seed("free_index_test", 42));
    for (coop_stream s = 0; s < 3; s++)
        assert_int_equal(free_index_reserve(&fi, s), COOP_OK);
    for (int op = 0; op < 60000; op++) {
        int i = rand() % N, j = rand() % N;
        if (present[i] && rand() % 3 == 0) {
            /* replace, as a split or a merge does: by another node (its own
             * address) or by itself with a new size, in i's stream or, a
             * time in four, another (a merge that retags) */
            uint64_t size = (uint64_t)(1 + rand() % 64) << (9 + rand() % 22);
            coop_stream s = nodes[i].stream;
            if (rand() % 4 == 0)
                s = rand() % 4 == 3 ? ANY : (coop_stream)(rand() % 3);
            if (present[j] || j == i) {
                free_index_replace(&fi, &nodes[i], &nodes[i], size, nodes[i].addr, s);
                assert_int_equal(nodes[i].stream, s);
            } else {
                free_index_replace(&fi, &nodes[i], &nodes[j], size, 0x100000 + (uintptr_t)j * 512,
                                   s);
                assert_int_equal(nodes[j].stream, s);
                present[i] = false;
                present[j] = true;
            }
        } else if (present[i]) {
            free_index_remove(&fi, &nodes[i]);
            present[i] = false;
        } else {
            /* Sizes from 512 B to 1 GiB with many duplicates; unique addresses. */
            uint64_t size = (uint64_t)(1 + rand() % 64) << (9 + rand() % 22);
            coop_stream s = rand() % 4 == 3 ? ANY : (coop_stream)(rand() % 3);
            free_index_insert(&fi, &nodes[i], size, 0x100000 + (uintptr_t)i * 512, s);
            present[i] = true;
        }
        uint64_t want = (uint64_t)(1 + rand() % 64) << (9 + rand() % 22);
        coop_stream s = (coop_stream)(rand() % 3);
        assert_ptr_equal(free_index_best_fit(&fi, want, s), model_best_fit(want, s));
        if (op % 1000 == 0) {
            const char *why = free_index_check(&fi);
            if (why)
                fail_msg("op %d: %s", op, why);
            free_index_node *max = NULL;
            for (int k = 0; k < N; k++)
                if (present[k] && (!max || less(max, &nodes[k])))
                    max = &nodes[k];
            assert_ptr_equal(free_index_max(&fi), max);
            walk_matches_model(want, rand() % 4 == 3 ? ANY : s);
        }
    }
    for (int i = 0; i < N; i++)
        if (present[i]) {
            assert_true(free_index_contains(&fi, &nodes[i]));
            free_index_remove(&fi, &nodes[i]);
            present[i] = false;
        }
    assert_int_equal(fi.count, 0);
    assert_null(free_index_check(&fi));
}

/* The checker notices a broken tree (it must be able to fail). */
static void test_check_detects_corruption(void **state)
{
    (void)state;
    free_index_node a, b;
    free_index_insert(&fi, &a, 4096, 0x10000, ANY);
    free_index_insert(&fi, &b, 8192, 0x20000, ANY);
    assert_null(free_index_check(&fi));
    uint64_t saved = a.size;
    a.size = 1 << 30; /* key changed while indexed */
    assert_non_null(free_index_check(&fi));
    a.size = saved;
    fi.count++;
    assert_non_null(free_index_check(&fi));
    fi.count--;
    free_index_remove(&fi, &a);
    free_index_remove(&fi, &b);
    assert_null(free_index_check(&fi));
}

/* Breaks one property, expects free_index_check to name it, repairs it and
 * expects the index sound again. */
#define EXPECT_CAUGHT(what, breaking, repairing)                                                   \
    do {                                                                                           \
        breaking;                                                                                  \
        const char *why_ = free_index_check(&fi);                                                  \
        if (!why_ || !strstr(why_, what))                                                          \
            fail_msg("free_index_check: '%s' does not say '%s'", why_ ? why_ : "(sound)", what);   \
        repairing;                                                                                 \
        assert_null(free_index_check(&fi));                                                        \
    } while (0)

/* Each check of free_index_check, one at a time: every corruption is one
 * that only the named check can see (the counts stay consistent). */
static void test_check_detects_each_corruption(void **state)
{
    (void)state;
    /* three nodes of one size (one bin: bin 8, 4096 bytes), on different
     * cache lines (priorities hash the node's address >> 6) */
    static free_index_node pool[9];
    free_index_node *n[3] = {&pool[0], &pool[4], &pool[8]};
    for (int i = 0; i < 3; i++)
        free_index_insert(&fi, n[i], 4096, 0x10000 * (uintptr_t)(i + 1), ANY);
    free_index_set *set = fi.any_set;
    free_index_node *root = set->bins[8];
    /* again with the root's node in the middle: a root and two leaves */
    for (int i = 0; i < 3; i++)
        free_index_remove(&fi, n[i]);
    for (int i = 0, k = 0; i < 3; i++)
        if (n[i] != root)
            n[k++] = n[i];
    free_index_insert(&fi, root, 4096, 0x20000, ANY);
    free_index_insert(&fi, n[0], 4096, 0x10000, ANY);
    free_index_insert(&fi, n[1], 4096, 0x30000, ANY);
    assert_ptr_equal(set->bins[8], root);
    free_index_node *l = root->left, *r = root->right;
    assert_ptr_equal(l, n[0]);
    assert_ptr_equal(r, n[1]);
    assert_null(l->left);
    assert_null(l->right);
    assert_null(r->left);
    assert_null(r->right);
    assert_null(free_index_check(&fi));
    const char *tree = "a bin breaks key order";
    uintptr_t addr = l->addr;
    EXPECT_CAUGHT(tree, l->addr = root->addr + 512,
                  l->addr = addr); /* left leaf above its parent */
    addr = r->addr;
    EXPECT_CAUGHT(tree, r->addr = root->addr - 512, r->addr = addr); /* right leaf below */
    EXPECT_CAUGHT(tree, l->parent = l, l->parent = root);
    EXPECT_CAUGHT(tree, r->parent = r, r->parent = root);
    EXPECT_CAUGHT(tree, l->stream = 7, l->stream = ANY);
    EXPECT_CAUGHT("a bin's root has a parent", root->parent = l, root->parent = NULL);
    EXPECT_CAUGHT("an empty bin is marked non-empty", set->nonempty[0] |= 2,
                  set->nonempty[0] &= ~UINT64_C(2)); /* bin 1 (512 bytes) holds nothing */
    /* word 0 (bins 0-63) unmarked in the summary: next_bin reads the word it
     * starts in without the summary, so only the check sees it */
    EXPECT_CAUGHT("the word summary disagrees", set->nonempty_words[0] &= ~UINT64_C(1),
                  set->nonempty_words[0] |= UINT64_C(1));
    EXPECT_CAUGHT("a set's node count differs", (set->count++, fi.count++),
                  (set->count--, fi.count--));
    EXPECT_CAUGHT("total count differs", fi.count++, fi.count--);
    assert_int_equal(free_index_reserve(&fi, 7), COOP_OK);
    free_index_set *seven = fi.sets[fi.num_sets - 1];
    assert_true(seven->stream == 7);
    EXPECT_CAUGHT("two sets for one stream", seven->stream = ANY, seven->stream = 7);
    assert_true(free_index_drop(&fi, 7));
    free_index_remove(&fi, root);
    free_index_remove(&fi, l);
    free_index_remove(&fi, r);
    assert_null(free_index_check(&fi));
}

/* free_index_drop frees only an empty set of a stream, never the any set,
 * and forgets it as the set found last (find_set's cache), so that a later
 * lookup of the stream finds no set rather than freed memory. */
static void test_drop(void **state)
{
    (void)state;
    free_index_node a;
    size_t sets = fi.num_sets;
    assert_int_equal(free_index_reserve(&fi, 7), COOP_OK);
    free_index_insert(&fi, &a, 4096, 0x10000, 7);
    assert_false(free_index_drop(&fi, 7)); /* not empty */
    assert_false(free_index_drop(&fi, ANY));
    assert_false(free_index_drop(&fi, 8)); /* no set */
    assert_ptr_equal(free_index_first(&fi, 7), &a);
    free_index_remove(&fi, &a); /* leaves set 7 as the set found last */
    assert_int_equal(fi.num_sets, sets + 1);
    assert_true(free_index_drop(&fi, 7));
    assert_int_equal(fi.num_sets, sets);
    assert_null(fi.last_set);
    assert_null(free_index_first(&fi, 7));
    assert_null(free_index_best_fit(&fi, 512, 7));
    assert_null(free_index_check(&fi));
    assert_int_equal(free_index_reserve(&fi, 7), COOP_OK); /* again, a new set */
    assert_int_equal(fi.num_sets, sets + 1);
    assert_true(free_index_drop(&fi, 7));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_cases),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_check_detects_corruption),
        cmocka_unit_test(test_check_detects_each_corruption),
        cmocka_unit_test(test_drop),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
