/* Free blocks keyed by (stream, size, address) in a max_treap; see block_tree.h. */
#include <stdbool.h>
#include <stddef.h>

#include "replay/block_tree.h"

static inline const block_tree_node *node_of(const max_treap_node *l)
{
    return (const block_tree_node *)l; /* link is the first member */
}

/* Strict key order: stream, then size, then address. */
static bool key_less(const block_tree_node *a, const block_tree_node *b)
{
    if (a->stream != b->stream)
        return a->stream < b->stream;
    if (a->size != b->size)
        return a->size < b->size;
    return a->addr < b->addr;
}

static bool before(const max_treap_node *n, const void *pivot)
{
    return key_less(node_of(n), pivot);
}

void block_tree_insert(block_tree *tree, block_tree_node *node)
{
    max_treap_node *lo, *hi;
    max_treap_node_init(&node->link, node->size, max_treap_mix(node->addr));
    max_treap_split(tree->root, before, node, &lo, &hi);
    tree->root = max_treap_merge(max_treap_merge(lo, &node->link), hi);
    tree->count++;
}

void block_tree_remove(block_tree *tree, block_tree_node *node)
{
    max_treap_remove(&tree->root, &node->link, before, node);
    tree->count--;
}

block_tree_node *block_tree_lower_bound(const block_tree *tree, uint64_t stream, uint64_t size)
{
    block_tree_node key = {.stream = stream, .size = size, .addr = 0};
    const max_treap_node *best = NULL, *n = tree->root;
    while (n) {
        if (key_less(node_of(n), &key)) {
            n = n->right;
        } else {
            best = n;
            n = n->left;
        }
    }
    return (block_tree_node *)node_of(best);
}

block_tree_node *block_tree_next(const block_tree *tree, const block_tree_node *node)
{
    const max_treap_node *best = NULL, *n = tree->root;
    while (n) {
        if (key_less(node, node_of(n))) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return (block_tree_node *)node_of(best);
}

uint64_t block_tree_max_size(const block_tree *tree)
{
    return max_treap_max(tree->root);
}

static void each(max_treap_node *n, void (*fn)(block_tree_node *, void *), void *ctx)
{
    while (n) {
        each(n->left, fn, ctx);
        max_treap_node *right = n->right;
        fn((block_tree_node *)n, ctx);
        n = right;
    }
}

void block_tree_each(const block_tree *tree, void (*fn)(block_tree_node *, void *), void *ctx)
{
    each(tree->root, fn, ctx);
}
