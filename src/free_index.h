/*
 * Free index: the free blocks of an arena, one ordered set per stream tag,
 * each keyed by (size, address). Best fit for a request on stream s is the
 * smaller (by that key) of the lower bounds in s's set and in the
 * "any stream" set: the smallest block that fits, lowest address on ties.
 *
 * A set is segregated into size bins (TLSF-style: 1024 bins per power of two
 * of 512-byte units) with a bitmap of non-empty bins. Each bin is a treap
 * keyed by (size, address) whose priorities are a hash of the node's own
 * address, so it needs no balancing metadata and comparing priorities
 * loads no child; parent links make removal O(1) expected
 * (a few rotations, no search from the root). A lower bound searches the request's own
 * bin, then takes the smallest block of the next non-empty bin (found in
 * the bitmap): every block there is larger. Bins hold few blocks, so the
 * treap paths are short (about log2 of the bin's population rather than of
 * all free blocks), which is what the per-pair cost depends on. All
 * operations are O(log n) in the worst expected case, with no linear scan.
 *
 * The number of stream tags is small (streams of one process), so the sets
 * sit in a short array searched linearly.
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
    struct free_index_node *left, *right, *parent;
    uint64_t size : 56;       /* the key's size; the rest of the word is the owner's */
    uint64_t owner_bits_ : 8; /* untouched by the index (arena: block state) */
    uintptr_t addr;
    coop_stream stream;
} free_index_node;

/* Bins: sizes in 512-byte units u; bin = 1024 * (floor(log2 u) - 9) + the
 * next 10 bits of u (u < 1024: bin = u), so every bin below 1 MiB holds a
 * single size. Sizes below 2^56 bytes (the node's size field; u < 2^47)
 * need fewer than 40 * 1024 bins. Finer bins keep each treap shallow, and
 * the treap depth is what a pair's cache misses grow with: coop bench at
 * 10k / 100k live blocks took, with 64 bins per power of two, 207-219 /
 * 573-696 ns per pair; 128: 191-196 / 470-496 (those two with an older
 * harness); 256: 168-172 / 403-432;
 * 1024: 163-165 / 356-362; 2048: 167-171 / 354-356; 4096: 168-170 /
 * 365 (the bin array outgrows the cache). A set's bin array is 320 KiB
 * (calloc'ed: pages of bins never used are never touched). */
#define FREE_INDEX_SUBBIN_BITS 10
#define FREE_INDEX_BINS 40960 /* 40 * 1024, a multiple of 64 */

typedef struct free_index_set {
    coop_stream stream;
    size_t count;
    uint64_t nonempty[FREE_INDEX_BINS / 64]; /* bit b: bins[b] holds a node */
    /* bit w: nonempty[w] != 0, so finding the next or last non-empty bin
     * reads at most a few words instead of scanning all of nonempty */
    uint64_t nonempty_words[(FREE_INDEX_BINS / 64 + 63) / 64];
    free_index_node *bins[FREE_INDEX_BINS]; /* treap roots */
} free_index_set;

typedef struct free_index {
    free_index_set **sets; /* unordered; a set stays (possibly empty) once created, until
                            * free_index_drop */
    size_t num_sets, cap_sets;
    size_t count;             /* nodes over all sets */
    coop_stream any;          /* the tag usable from every stream */
    free_index_set *any_set;  /* the set of "any" (once reserved) */
    free_index_set *last_set; /* the set found last: streams repeat */
    meta_heap *heap;
} free_index;

void free_index_init(free_index *fi, coop_stream any_tag, meta_heap *heap);
void free_index_fini(free_index *fi);

/* Makes sure a set for stream exists so a later insert cannot fail.
 * COOP_ERR_HOST_NOMEM if it cannot be created. */
coop_status free_index_reserve(free_index *fi, coop_stream stream);
/* Frees stream's set (never the any set) if it exists and is empty: a
 * stream the owner will not use again (coop_forget_stream) must not keep a
 * set of about 330 KiB, nor lengthen every walk over the sets. Returns
 * whether it was freed. A later free_index_reserve makes a new one. */
bool free_index_drop(free_index *fi, coop_stream stream);
/* Inserts node keyed (size, addr) in stream's set, which must exist
 * (free_index_reserve). */
void free_index_insert(free_index *fi, free_index_node *node, uint64_t size, uintptr_t addr,
                       coop_stream stream);
void free_index_remove(free_index *fi, free_index_node *node);
/* Removes old and inserts node keyed (size, addr) in stream's set (which
 * must exist, as for free_index_insert): what a split does to the block it
 * cuts (the free part replaces it) and a merge to the neighbour it keeps,
 * with one set lookup when the tag stays and the total count unchanged.
 * node may be old itself. */
void free_index_replace(free_index *fi, free_index_node *old, free_index_node *node, uint64_t size,
                        uintptr_t addr, coop_stream stream);

/* Smallest (size, addr) >= (size, 0) among stream's set and the any set;
 * NULL if none fits. */
free_index_node *free_index_best_fit(free_index *fi, uint64_t size, coop_stream stream);
/* Smallest node of stream's set alone with size >= size (NULL if none, or
 * no set): with free_index_next, a walk over that set's fits in key order. */
free_index_node *free_index_set_fit(free_index *fi, uint64_t size, coop_stream stream);
/* The node after n in its set by (size, address), NULL after the last: the
 * treap's successor by parent links (amortized O(1) over a walk), else the
 * smallest node of the set's next non-empty bin (a bitmap look). */
free_index_node *free_index_next(free_index *fi, const free_index_node *n);
/* Smallest node of one stream's set (NULL if empty or no set). */
free_index_node *free_index_first(free_index *fi, coop_stream stream);
/* Largest node over all sets, NULL if empty. O(sets x depth). */
free_index_node *free_index_max(const free_index *fi);
/* True iff node is reachable in its stream's set by key search. */
bool free_index_contains(const free_index *fi, const free_index_node *node);
/* Validates order, heap property and counts; returns a static message on
 * the first violation, NULL when sound. */
const char *free_index_check(const free_index *fi);

#endif
