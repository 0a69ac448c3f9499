/* The max-augmented split/merge treap under the replay's ordered sets,
 * against a sorted-array model: in-order keys, heap order on priorities,
 * every subtree's maximum weight, pops from both ends. Randomized: prints
 * its seed, takes COOP_TEST_SEED. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "replay/max_treap.h"
#include "test_seed.h"

#define KEYS 512

typedef struct item {
    max_treap_node link; /* first member */
    uint64_t key;
    bool present;
} item;

static bool key_before(const max_treap_node *n, const void *pivot)
{
    return ((const item *)n)->key < *(const uint64_t *)pivot;
}

static uint64_t rng;
static uint64_t next(void)
{
    return test_xorshift64(&rng);
}

/* Walks t in order, checking heap order and subtree maxima; appends keys. */
static uint64_t walk(const max_treap_node *t, uint64_t *keys, size_t *n)
{
    if (!t)
        return 0;
    if (t->left)
        assert_true(t->left->priority <= t->priority);
    if (t->right)
        assert_true(t->right->priority <= t->priority);
    uint64_t m = walk(t->left, keys, n);
    keys[(*n)++] = ((const item *)t)->key;
    if (t->weight > m)
        m = t->weight;
    uint64_t r = walk(t->right, keys, n);
    if (r > m)
        m = r;
    assert_int_equal(t->subtree_max, m);
    return m;
}

static void matches_model(void **unused)
{
    (void)unused;
    uint64_t seed = test_seed("replay_max_treap_test", 11);
    rng = seed * 0x9E3779B97F4A7C15ull | 1;
    static item items[KEYS];
    for (uint64_t k = 0; k < KEYS; k++)
        items[k] = (item){.key = k};
    max_treap_node *root = NULL;
    for (int step = 0; step < 20000; step++) {
        item *it = &items[next() % KEYS];
        max_treap_node *lo, *hi;
        max_treap_split(root, key_before, &it->key, &lo, &hi);
        if (it->present) {
            if (next() % 4 == 0) {
                /* re-weigh it: detach, change, re-attach */
                max_treap_node *self = max_treap_pop_first(&hi);
                assert_ptr_equal(self, &it->link);
                max_treap_set_weight(self, next() % 100000);
                hi = max_treap_merge(self, hi);
            } else if (next() % 2) {
                assert_ptr_equal(max_treap_pop_first(&hi), &it->link);
                it->present = false;
            } else {
                /* removal by descent, from the whole tree */
                root = max_treap_merge(lo, hi);
                max_treap_remove(&root, &it->link, key_before, &it->key);
                assert_null(it->link.left);
                assert_null(it->link.right);
                it->present = false;
                max_treap_split(root, key_before, &it->key, &lo, &hi);
            }
        } else {
            max_treap_node_init(&it->link, next() % 100000, max_treap_mix(it->key));
            hi = max_treap_merge(&it->link, hi);
            it->present = true;
        }
        root = max_treap_merge(lo, hi);
        if (step % 50 == 0) {
            uint64_t keys[KEYS], expect_max = 0;
            size_t n = 0, expect_n = 0;
            assert_int_equal(walk(root, keys, &n), max_treap_max(root));
            for (uint64_t k = 0; k < KEYS; k++)
                if (items[k].present) {
                    assert_true(expect_n < n);
                    assert_int_equal(keys[expect_n++], k);
                    if (items[k].link.weight > expect_max)
                        expect_max = items[k].link.weight;
                }
            assert_int_equal(n, expect_n);
            assert_int_equal(max_treap_max(root), expect_max);
        }
    }
    /* pops from both ends come out in order */
    uint64_t last_first = 0, last_last = UINT64_MAX;
    bool first = true;
    while (root) {
        max_treap_node *a = max_treap_pop_first(&root);
        assert_true(first || ((item *)a)->key > last_first);
        last_first = ((item *)a)->key;
        first = false;
        max_treap_node *b = max_treap_pop_last(&root);
        if (b) {
            assert_true(((item *)b)->key < last_last);
            assert_true(((item *)b)->key > last_first);
            last_last = ((item *)b)->key;
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(matches_model)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
