/*
 * An ordered set of free blocks keyed by (stream, size, address): the order
 * PyTorch's caching allocator searches its pools in (best fit on the same
 * stream, lowest address among equal sizes). A treap: O(log n) expected per
 * insert, remove and lower_bound. Each node also keeps the largest size in its
 * subtree, so the largest free block of the whole set is O(1).
 *
 * Nodes are intrusive: the caller embeds a block_tree_node in its block and
 * sets the key fields before inserting; keys must be unique (addresses are).
 */
#ifndef COOP_REPLAY_BLOCK_TREE_H
#define COOP_REPLAY_BLOCK_TREE_H

#include <stdint.h>

typedef struct block_tree_node {
    uint64_t stream, size, addr; /* the key, compared in this order */
    uint64_t priority;           /* heap order: derived from addr */
    uint64_t subtree_max_size;
    struct block_tree_node *left, *right;
} block_tree_node;

typedef struct block_tree {
    block_tree_node *root;
    uint64_t count;
} block_tree;

void block_tree_insert(block_tree *tree, block_tree_node *node);
void block_tree_remove(block_tree *tree, block_tree_node *node);

/* The smallest node whose key is >= (stream, size, 0), or NULL. */
block_tree_node *block_tree_lower_bound(const block_tree *tree, uint64_t stream, uint64_t size);

/* The largest size in the set, 0 when empty. */
uint64_t block_tree_max_size(const block_tree *tree);

#endif
