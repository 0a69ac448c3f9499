/* Treap of free blocks keyed by (stream, size, address); see block_tree.h. */
#include <stdbool.h>
#include <stddef.h>

#include "replay/block_tree.h"

/* Strict key order: stream, then size, then address. */
static bool key_less(const block_tree_node *a, const block_tree_node *b)
{
    if (a->stream != b->stream)
        return a->stream < b->stream;
    if (a->size != b->size)
        return a->size < b->size;
    return a->addr < b->addr;
}

/* A fixed mix of the address: deterministic runs, balanced trees. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t max_of(const block_tree_node *n)
{
    return n ? n->subtree_max_size : 0;
}

static void update(block_tree_node *n)
{
    uint64_t m = n->size;
    if (max_of(n->left) > m)
        m = max_of(n->left);
    if (max_of(n->right) > m)
        m = max_of(n->right);
    n->subtree_max_size = m;
}

/* Splits t into nodes with key < pivot (*lo) and key >= pivot (*hi). */
static void split(block_tree_node *t, const block_tree_node *pivot, block_tree_node **lo,
                  block_tree_node **hi)
{
    if (!t) {
        *lo = *hi = NULL;
        return;
    }
    if (key_less(t, pivot)) {
        split(t->right, pivot, &t->right, hi);
        *lo = t;
    } else {
        split(t->left, pivot, lo, &t->left);
        *hi = t;
    }
    update(t);
}

/* Joins two treaps where every key of a precedes every key of b. */
static block_tree_node *merge(block_tree_node *a, block_tree_node *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->priority > b->priority) {
        a->right = merge(a->right, b);
        update(a);
        return a;
    }
    b->left = merge(a, b->left);
    update(b);
    return b;
}

void block_tree_insert(block_tree *tree, block_tree_node *node)
{
    block_tree_node *lo, *hi;
    node->priority = mix(node->addr);
    node->left = node->right = NULL;
    node->subtree_max_size = node->size;
    split(tree->root, node, &lo, &hi);
    tree->root = merge(merge(lo, node), hi);
    tree->count++;
}

/* Removes node by descending to it: keys are unique, so the path is exact. */
void block_tree_remove(block_tree *tree, block_tree_node *node)
{
    block_tree_node **link = &tree->root;
    block_tree_node *path[128];
    size_t depth = 0;
    while (*link && *link != node) {
        if (depth < sizeof path / sizeof path[0])
            path[depth++] = *link;
        link = key_less(node, *link) ? &(*link)->left : &(*link)->right;
    }
    if (!*link)
        return; /* not in the tree: callers never do this */
    *link = merge(node->left, node->right);
    node->left = node->right = NULL;
    tree->count--;
    if (depth < sizeof path / sizeof path[0]) {
        while (depth > 0)
            update(path[--depth]);
    } else {
        /* pathologically deep (never for a treap in practice): rebuild aggregates */
        block_tree_node *lo, *hi;
        split(tree->root, node, &lo, &hi);
        tree->root = merge(lo, hi);
    }
}

block_tree_node *block_tree_lower_bound(const block_tree *tree, uint64_t stream, uint64_t size)
{
    block_tree_node key = {.stream = stream, .size = size, .addr = 0};
    block_tree_node *best = NULL, *n = tree->root;
    while (n) {
        if (key_less(n, &key)) {
            n = n->right;
        } else {
            best = n;
            n = n->left;
        }
    }
    return best;
}

uint64_t block_tree_max_size(const block_tree *tree)
{
    return max_of(tree->root);
}
