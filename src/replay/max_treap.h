/*
 * A treap by split and merge whose nodes keep the largest weight (a size) of
 * their subtree: the ordered sets of the replay policies are built on it
 * (block_tree: the torch emulation's free blocks by (stream, size, address);
 * free_ranges: the jemalloc policy's free address ranges by start), and each
 * asks for its largest member in O(1). O(log n) expected per split or merge.
 *
 * Nodes are intrusive and the order is the caller's: split takes a
 * predicate saying which nodes go before the pivot. Priorities are the
 * caller's too (a hash of something unique and stable, for deterministic
 * shapes).
 */
#ifndef COOP_REPLAY_MAX_TREAP_H
#define COOP_REPLAY_MAX_TREAP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct max_treap_node {
    struct max_treap_node *left, *right;
    uint64_t priority;    /* heap order: the largest at the root */
    uint64_t weight;      /* this node's size */
    uint64_t subtree_max; /* the largest weight in this subtree */
} max_treap_node;

/* True when n belongs before pivot in the caller's order. */
typedef bool (*max_treap_before)(const max_treap_node *n, const void *pivot);

/* A fixed 64-bit mix (for priorities). */
uint64_t max_treap_mix(uint64_t x);

/* Makes n a detached node of the given weight and priority. */
void max_treap_node_init(max_treap_node *n, uint64_t weight, uint64_t priority);
/* Sets a detached node's weight (its subtree is just itself). */
void max_treap_set_weight(max_treap_node *n, uint64_t weight);

/* Joins two treaps where every node of a comes before every node of b. */
max_treap_node *max_treap_merge(max_treap_node *a, max_treap_node *b);
/* Detaches and returns the first / last node of *t (NULL if empty). */
max_treap_node *max_treap_pop_first(max_treap_node **t);
max_treap_node *max_treap_pop_last(max_treap_node **t);

static inline uint64_t max_treap_max(const max_treap_node *t)
{
    return t ? t->subtree_max : 0;
}

/* Recomputes n's subtree maximum from its weight and its children's. */
static inline void max_treap_update(max_treap_node *n)
{
    uint64_t m = n->weight;
    if (max_treap_max(n->left) > m)
        m = max_treap_max(n->left);
    if (max_treap_max(n->right) > m)
        m = max_treap_max(n->right);
    n->subtree_max = m;
}

/* The two walks that take the caller's order are inline here, so that the
 * compiler can specialize them for the caller's predicate (an indirect call
 * per level cost the torch emulation about a tenth of its time). */

/* Splits t into the nodes before pivot (*lo) and the others (*hi). */
static inline void max_treap_split(max_treap_node *t, max_treap_before before, const void *pivot,
                                   max_treap_node **lo, max_treap_node **hi)
{
    if (!t) {
        *lo = *hi = NULL;
        return;
    }
    if (before(t, pivot)) {
        max_treap_split(t->right, before, pivot, &t->right, hi);
        *lo = t;
    } else {
        max_treap_split(t->left, before, pivot, lo, &t->left);
        *hi = t;
    }
    max_treap_update(t);
}

/* The subtree t without node (NULL-safe: a node not in t changes nothing);
 * the aggregates on the path are recomputed. */
static inline max_treap_node *max_treap_without(max_treap_node *t, max_treap_node *node,
                                                max_treap_before before, const void *pivot)
{
    if (!t)
        return NULL;
    if (t == node) {
        max_treap_node *rest = max_treap_merge(t->left, t->right);
        t->left = t->right = NULL;
        max_treap_update(t);
        return rest;
    }
    if (before(t, pivot))
        t->right = max_treap_without(t->right, node, before, pivot);
    else
        t->left = max_treap_without(t->left, node, before, pivot);
    max_treap_update(t);
    return t;
}

/* Removes node, which must be in *root, by one descent: pivot is node's own
 * key, so before(n, pivot) says which side of n the node lies on. */
static inline void max_treap_remove(max_treap_node **root, max_treap_node *node,
                                    max_treap_before before, const void *pivot)
{
    *root = max_treap_without(*root, node, before, pivot);
}

#endif
