/*
 * The block records of both PyTorch emulations, `torch` (policy_torch.c) and
 * `torch-expandable` (policy_torch_expandable.c): blocks tile each segment in
 * address order and link to their neighbours; free blocks are filed per pool
 * by (stream, size, address), as torch's pool.blocks, unmapped ones
 * (expandable segments only) by (stream, address), as its pool.unmapped;
 * allocated ones are found by address. How segments are made, grown and
 * released differs between the two and stays in each policy.
 */
#ifndef COOP_REPLAY_TORCH_BLOCK_H
#define COOP_REPLAY_TORCH_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "replay/block_map.h"
#include "replay/block_tree.h"
#include "replay/policy.h"
#include "status.h"

typedef struct torch_block {
    block_tree_node node; /* first member; the key while free or unmapped */
    uint64_t addr, size, stream;
    bool allocated;
    bool mapped;                     /* false: address space of an expandable segment, no pages */
    bool small;                      /* which pool the segment belongs to */
    struct torch_block *prev, *next; /* neighbours inside the segment */
    /* while free, mapped and its segment's only block (no prev, no next):
     * the neighbours in its pool's list of whole free segments */
    struct torch_block *whole_prev, *whole_next;
} torch_block;

typedef struct torch_blocks {
    block_tree free[2], unmapped[2]; /* indexed by small */
    block_map allocated;             /* address -> allocated block */
    torch_block *spare;              /* recycled records (via next) */
    /* per pool (indexed by small): the free mapped blocks that span a whole
     * segment, as torch_block_file and torch_block_unfile file them (a
     * filed block's prev and next stay NULL or not while it is filed: the
     * splits and merges that change them take blocks out of the trees
     * first), so that a release of cached segments need not walk every
     * free block */
    torch_block *whole[2];
    size_t num_whole[2];
    /* reserved: bytes of device memory held (whole segments for `torch`,
     * mapped pages for `torch-expandable`), kept by the policy; map_bytes:
     * all it ever mapped; free_bytes and active: the free and allocated
     * blocks' sizes; peak_reserved: the most reserved ever, as torch's
     * reserved_bytes stat keeps it (torch_blocks_reserve) */
    uint64_t reserved, map_bytes, free_bytes, active, peak_reserved;
} torch_blocks;

/* A zeroed record, recycled or new; NULL when host memory runs out. */
torch_block *torch_block_new(torch_blocks *t);
/* Keeps b (in no tree, no map) for torch_block_new. */
void torch_block_recycle(torch_blocks *t, torch_block *b);

/* Files the free or unmapped block b in its tree (b's key is set here). */
void torch_block_file(torch_blocks *t, torch_block *b);
/* Takes b out of the tree it is filed in. */
void torch_block_unfile(torch_blocks *t, torch_block *b);

/* Splits b (in no tree) at offset at, 0 < at < b->size: returns the new
 * block [b + at, end), which follows b with b's state and is in no tree;
 * NULL (b untouched) when host memory runs out. */
torch_block *torch_block_split(torch_blocks *t, torch_block *b, uint64_t at);

/* Merges into b (in no tree) its neighbour n when n is free, or unmapped,
 * as b is (torch's try_merge_blocks); n leaves its tree and is recycled.
 * Does nothing when n is NULL, allocated or of the other kind. */
void torch_block_merge(torch_blocks *t, torch_block *b, torch_block *n);

/* Marks b (mapped, in no tree) allocated and files it by address. When host
 * memory runs out it merges b with a free block after it (the remainder a
 * split just made), files it as free and sets a COOP_ERR_HOST_NOMEM error
 * naming policy. */
coop_status torch_blocks_allocate(torch_blocks *t, torch_block *b, const char *policy);

/* Frees the allocated block at addr: it merges with free neighbours and is
 * filed as free. COOP_ERR_FOREIGN_PTR, naming policy, when no block is
 * allocated there (state untouched). */
coop_status torch_blocks_free(torch_blocks *t, uintptr_t addr, const char *policy);

/* Counts bytes of device memory newly held (a segment, mapped pages) in
 * reserved, map_bytes and the peak, as torch's increase_stat does the moment
 * it maps them (alloc_block, map_block). */
void torch_blocks_reserve(torch_blocks *t, uint64_t bytes);

/* The counters replay reports (reserved, map_bytes, active, free, largest). */
void torch_blocks_stats(const torch_blocks *t, replay_policy_stats *out);

/* Collects the free blocks of pool small into *out, a malloc'ed array of
 * *count the caller frees, so that the caller can release or unmap them
 * (that changes the tree under a walk). false (nothing collected) when host
 * memory runs out. */
bool torch_blocks_collect_free(const torch_blocks *t, bool small, torch_block ***out,
                               size_t *count);

/* The first free mapped block of pool small that spans a whole segment
 * (no prev, no next), or NULL: releasing cached segments takes them one by
 * one (each unfiled before the next is asked for). */
torch_block *torch_blocks_first_whole(const torch_blocks *t, bool small);

/* Calls fn on every record filed (free, unmapped, allocated; not spares);
 * fn must not change the trees or the map. */
void torch_blocks_each(const torch_blocks *t, void (*fn)(torch_block *, void *), void *ctx);

/* Validates every record and counter (neighbours meet, no two free or two
 * unmapped blocks side by side, unmapped blocks whole pages, keys and
 * totals, the lists of whole free segments, reserved = free + active <=
 * capacity); COOP_ERR_INVALID naming
 * policy and the first broken rule otherwise. */
coop_status torch_blocks_check(const torch_blocks *t, const char *policy, uint64_t capacity);

/* replay_min_capacity's step for both emulations (replay_policy_ops
 * capacity_step; page unused): what they hold against the capacity is a
 * multiple of 2 MiB, segments (torch: every segment's size is) or mapped
 * pages (torch-expandable: 2 MiB or 20 MiB). torch-expandable's ranges are
 * 9/8 of the capacity, not stepped: a capacity between two multiples can
 * lay blocks out otherwise (placement only; what it may map is the lower
 * multiple's). */
uint64_t torch_capacity_step(uint64_t page);

/* Frees every record (the policy releases its segments first). */
void torch_blocks_destroy(torch_blocks *t);

#endif
