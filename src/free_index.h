/*
 * Free index: the free blocks of an arena, one ordered set per stream tag,
 * each keyed by (size, address). Best fit for a request on stream s is the
 * smaller (by that key) of the lower bounds in s's set and in the
 * "any stream" set: the smallest block that fits, lowest address on ties.
 *
 * Each set is a treap whose priorities are a hash of the address, so its
 * expected depth is O(log n) without storing priorities or balancing
 * metadata; lower bound, insert and remove walk one root-to-leaf path. The
 * number of stream tags is small (streams of one process), so the sets sit
 * in a short array searched linearly.
 *
 * Nodes are intrusive (embedded in the arena's block records); the key is
 * copied into the node on insert and must not change while it is indexed.
 */
#ifndef COOP_FREE_INDEX_H
#define COOP_FREE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coop.h"
#include "meta.h"

typedef struct free_index_node {
    struct free_index_node *left, *right;
    uint64_t size;
    uintptr_t addr;
    coop_stream stream;
} free_index_node;

typedef struct free_index_set {
    coop_stream stream;
    free_index_node *root;
    size_t count;
} free_index_set;

typedef struct free_index {
    free_index_set *sets; /* unordered; a set stays (possibly empty) once created */
    size_t num_sets, cap_sets;
    size_t count;    /* nodes over all sets */
    coop_stream any; /* the tag usable from every stream */
    meta_heap *heap;
} free_index;

void free_index_init(free_index *fi, coop_stream any_tag, meta_heap *heap);
void free_index_fini(free_index *fi);

/* Makes sure a set for stream exists so a later insert cannot fail.
 * COOP_ERR_HOST_NOMEM if it cannot be created. */
coop_status free_index_reserve(free_index *fi, coop_stream stream);
/* Inserts node keyed (size, addr) in stream's set, which must exist
 * (free_index_reserve). */
void free_index_insert(free_index *fi, free_index_node *node, uint64_t size, uintptr_t addr,
                       coop_stream stream);
void free_index_remove(free_index *fi, free_index_node *node);

/* Smallest (size, addr) >= (size, 0) among stream's set and the any set;
 * NULL if none fits. */
free_index_node *free_index_best_fit(const free_index *fi, uint64_t size, coop_stream stream);
/* Smallest node of one stream's set (NULL if empty or no set). */
free_index_node *free_index_first(const free_index *fi, coop_stream stream);
/* Largest node over all sets, NULL if empty. O(sets x depth). */
free_index_node *free_index_max(const free_index *fi);
/* True iff node is reachable in its stream's set by key search. */
bool free_index_contains(const free_index *fi, const free_index_node *node);
/* Validates order, heap property and counts; returns a static message on
 * the first violation, NULL when sound. */
const char *free_index_check(const free_index *fi);

#endif
