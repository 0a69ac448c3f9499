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

/* Splits t into the nodes before pivot (*lo) and the others (*hi). */
void max_treap_split(max_treap_node *t, max_treap_before before, const void *pivot,
                     max_treap_node **lo, max_treap_node **hi);
/* Joins two treaps where every node of a comes before every node of b. */
max_treap_node *max_treap_merge(max_treap_node *a, max_treap_node *b);
/* Detaches and returns the first / last node of *t (NULL if empty). */
max_treap_node *max_treap_pop_first(max_treap_node **t);
max_treap_node *max_treap_pop_last(max_treap_node **t);

static inline uint64_t max_treap_max(const max_treap_node *t)
{
    return t ? t->subtree_max : 0;
}

#endif
