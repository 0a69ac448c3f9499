/*
 * Arena: address-ordered blocks tiling segments. Knows addresses and sizes
 * only: no locks, no tensors. Streams appear only as a tag on blocks so the
 * free index can keep per-stream reuse safe.
 *
 * Invariants (checked by arena_check):
 *  - the blocks of a segment tile [seg->base, seg->base + seg->top) in address
 *    order, no gaps, no overlaps;
 *  - no two address-adjacent free blocks are mergeable (same stream tag, or
 *    one of them tagged COOP_STREAM_ANY);
 *  - every free block is in the free index exactly once, nothing else is;
 *  - every block start is in the address map exactly once;
 *  - with VMM, a page is mapped if any non-free block overlaps it.
 */
#ifndef COOP_ARENA_H
#define COOP_ARENA_H

#include "backend.h"
#include "free_index.h" /* written with the arena */

#define COOP_ALIGN 512u
/* Free blocks whose last user is unknown or synchronized: reusable on any stream. */
#define COOP_STREAM_ANY ((coop_stream)UINTPTR_MAX)

typedef struct arena_segment arena_segment;

typedef struct arena_block {
    uintptr_t addr;
    uint64_t size;
    struct arena_block *prev, *next; /* address order inside the segment */
    arena_segment *segment;
    coop_block_state state;
    coop_stream stream;              /* allocation stream, or free block's tag */
    uint64_t requested;              /* bytes asked for (allocated blocks) */
    free_index_node index_node;      /* membership in the free index (free blocks) */
    struct arena_block *hash_next;   /* address map chain */
    void *owner;                     /* remat: the tensor living here, or NULL */
    struct block_streams *used_on;   /* record_stream set, NULL if none */
} arena_block;

struct arena_segment {
    uintptr_t base;
    uint64_t reserved;               /* VA reserved (VMM) or segment size */
    uint64_t top;                    /* bytes tiled by blocks, from base */
    arena_block *first, *last;
    arena_segment *prev, *next;      /* segments in address order */
    uint64_t *page_live;             /* VMM: per page, non-free blocks overlapping it */
    uint8_t *page_mapped;            /* VMM: per page, 1 when mapped */
    size_t num_blocks;
};

typedef struct arena arena;

/* Lookup and walk (address order). */
arena_segment *arena_first_segment(const arena *a);
arena_block *arena_lookup(const arena *a, uintptr_t addr); /* exact block start or NULL */
/* The block containing addr (any byte of it), or NULL: error path, may be linear. */
arena_block *arena_find_containing(const arena *a, uintptr_t addr);

#endif
