/*
 * An ordered set of free blocks keyed by (stream, size, address): the order
 * PyTorch's caching allocator searches its pools in (best fit on the same
 * stream, lowest address among equal sizes). A max_treap: O(log n) expected
 * per insert, remove and lower_bound, and the largest free block of the
 * whole set in O(1).
 *
 * Nodes are intrusive: the caller embeds a block_tree_node in its block and
 * sets the key fields before inserting; keys must be unique (addresses are).
 */
#ifndef COOP_REPLAY_BLOCK_TREE_H
#define COOP_REPLAY_BLOCK_TREE_H

#include <stdint.h>

#include "replay/max_treap.h"

typedef struct block_tree_node {
    max_treap_node link;         /* first member: the node is its link */
    uint64_t stream, size, addr; /* the key, compared in this order */
} block_tree_node;

typedef struct block_tree {
    max_treap_node *root;
    uint64_t count;
} block_tree;

void block_tree_insert(block_tree *tree, block_tree_node *node);
/* node must be in the tree. */
void block_tree_remove(block_tree *tree, block_tree_node *node);

/* The smallest node whose key is >= (stream, size, 0), or NULL. */
block_tree_node *block_tree_lower_bound(const block_tree *tree, uint64_t stream, uint64_t size);

/* The node after node in key order (node must be in the tree), or NULL. */
block_tree_node *block_tree_next(const block_tree *tree, const block_tree_node *node);

/* The largest size in the set, 0 when empty. */
uint64_t block_tree_max_size(const block_tree *tree);

/* Calls fn on every node in key order; fn may free the node it is given
 * (the walk has read what it needs from it), but must not change the tree. */
void block_tree_each(const block_tree *tree, void (*fn)(block_tree_node *, void *), void *ctx);

#endif
