/*
 * Arena: address-ordered blocks tiling segments. Knows addresses and sizes
 * only: no locks, no tensors, no events. Streams appear only as a tag on free
 * blocks so the free index can keep per-stream reuse safe, and reclaim asks
 * the pool (stream_idle) whether a tag's stream has finished before it
 * releases that block's space.
 *
 * With VMM there is one segment: a virtual reservation of va_size bytes whose
 * blocks tile [base, base + top); top grows when no free block fits. Pages
 * are mapped when an allocation first needs them, stay mapped when it is
 * freed, and are unmapped only by arena_reclaim (empty_cache, or when
 * mapping would exceed the capacity). Reuse of mapped space before mapping
 * new pages follows from that: free space below the top stays mapped unless
 * the capacity forced it out, and the top grows (mapping) only when no free
 * block fits. Best fit itself does not rank candidates by mapping state: that
 * is not cheap to know per candidate, and under pressure reclaim unmaps
 * cached pages outside the chosen placement first. Without VMM, segments are fixed
 * backend allocations (segment_size, or larger for big requests), blocks
 * never coalesce across segments, and wholly free segments are released by
 * arena_reclaim.
 *
 * Invariants (checked by arena_check):
 *  - the blocks of a segment tile [seg->base, seg->base + seg->top) in address
 *    order, no gaps, no overlaps; sizes and addresses are multiples of 512;
 *  - no two address-adjacent free blocks are mergeable (same stream tag, or
 *    one of them tagged COOP_STREAM_ANY);
 *  - every free block is in the free index exactly once, nothing else is;
 *  - every allocated or pending block start is in the address map exactly
 *    once, and nothing else is;
 *  - with VMM, every page overlapped by a non-free block is mapped, and the
 *    mapped pages times the page size equal the reserved bytes;
 *  - the counters (free bytes, inactive split, reserved) equal a walk.
 *
 * Internal hooks for the rematerialization layer (call under the pool lock):
 * walk segments with arena_first_segment / seg->next and blocks with
 * seg->first / block->next; block->owner is theirs; arena_release returns the
 * free block that absorbed a released block, and arena_alloc_in places an
 * allocation at an exact address inside one free block (an evicted window).
 */
#ifndef COOP_ARENA_H
#define COOP_ARENA_H

#include <stddef.h>

#include "addr_map.h"
#include "backend.h"
#include "free_index.h"
#include "meta.h"
#include "page_map.h"

#define COOP_ALIGN 512u
/* Free blocks whose last user is unknown or synchronized: reusable on any stream. */
#define COOP_STREAM_ANY ((coop_stream)UINTPTR_MAX)

typedef struct arena_segment arena_segment;
struct block_uses; /* pool-owned: record_stream set and pending events */

/* Block sizes are below 2^BLOCK_SIZE_BITS bytes (64 PiB): the size shares
 * its word with the state bits. */
#define BLOCK_SIZE_BITS 56

/*
 * One 64-byte record, one cache line: best fit, split, coalescing and free
 * read nothing else. The free index's node overlays the block's own links,
 * size, address and tag. Its tree links are needed only while the block is
 * free; requested, owner and uses only while it is allocated or pending, so
 * they share those bytes (read them only when state says so). The segment is
 * not stored: with VMM there is one, without it arena_block_segment finds it
 * (only at segment boundaries).
 */
typedef struct arena_block {
    union {
        free_index_node index_node; /* membership in the free index (free blocks) */
        struct {
            union {
                free_index_node *index_links_[3]; /* free: the node's left, right, parent */
                struct {                          /* allocated or pending */
                    uint64_t requested;           /* bytes asked for */
                    void *owner;                  /* remat: the tensor living here, or NULL */
                    struct block_uses *uses;      /* pool: record_stream set, NULL if none */
                };
            };
            union {
                struct {
                    uint64_t size : BLOCK_SIZE_BITS;
                    uint64_t state : 2;         /* coop_block_state: write with block_set_state */
                    uint64_t counted_split : 1; /* counted in inactive_split (free, segment
                                                 * split): write with block_set_counted */
                };
                uint64_t size_word_; /* the three above as one word (block_set_*) */
            };
            uintptr_t addr;
            coop_stream stream; /* allocation stream, or a free block's tag */
        };
    };
    struct arena_block *prev, *next; /* address order inside the segment */
} arena_block;

_Static_assert(offsetof(arena_block, addr) == offsetof(free_index_node, addr) &&
                   offsetof(arena_block, stream) == offsetof(free_index_node, stream) &&
                   offsetof(arena_block, requested) == offsetof(free_index_node, left),
               "arena_block must overlay free_index_node's key fields");
_Static_assert(sizeof(arena_block) == 64, "block records are one cache line");

/* state and counted_split share the size's word. A bitfield store to them
 * is a one-byte store, and the next read of the size (an eight-byte load of
 * that word, on nearly every path) cannot be forwarded from it: the load
 * waits for the store to retire. perf put a third of carve's samples on that
 * stall. These setters change the word in a register and store all of it.
 * The bit positions assume bitfields allocated from the least significant
 * bit, as on the ABIs coop builds for (System V x86-64 and AArch64);
 * tests/arena_test checks the setters against the bitfields. */
#define BLOCK_STATE_SHIFT BLOCK_SIZE_BITS
#define BLOCK_COUNTED_SHIFT (BLOCK_SIZE_BITS + 2)

static inline void block_set_state(arena_block *b, unsigned state)
{
    uint64_t w = b->size_word_ & ~(UINT64_C(3) << BLOCK_STATE_SHIFT);
    b->size_word_ = w | (uint64_t)(state & 3u) << BLOCK_STATE_SHIFT;
}

static inline void block_set_counted(arena_block *b, bool counted)
{
    uint64_t w = b->size_word_ & ~(UINT64_C(1) << BLOCK_COUNTED_SHIFT);
    b->size_word_ = w | (uint64_t)counted << BLOCK_COUNTED_SHIFT;
}

struct arena_segment {
    uintptr_t base;
    uint64_t reserved; /* VA reserved (VMM) or segment size */
    uint64_t top;      /* bytes tiled by blocks, from base */
    arena_block *first, *last;
    arena_segment *prev, *next; /* segments in address order */
    page_map pages;             /* VMM: mapped pages of the reservation */
};

typedef struct arena_params {
    bool vmm;
    uint64_t page_size;    /* power of two, multiple of COOP_ALIGN */
    uint64_t va_size;      /* VMM reservation, multiple of page_size */
    uint64_t segment_size; /* without VMM, multiple of page_size */
    uint64_t capacity;     /* most bytes reserved (mapped or in segments) */
    uint64_t min_split;    /* smallest remainder a split leaves, multiple of 512 */
} arena_params;

/* Counters kept incrementally, torch-style where the concept matches. */
typedef struct arena_counters {
    coop_stat segment, reserved_bytes, inactive_split, inactive_split_bytes;
    uint64_t num_maps, num_unmaps, map_bytes;
    uint64_t free_bytes;
    size_t num_blocks;
} arena_counters;

/* Whether every piece of work queued on stream so far has finished (*idle).
 * The pool answers it with an event (arena_set_stream_idle); without an
 * answer (arena-only tests) every stream counts as idle. A status other than
 * COOP_OK: the question could not be asked (no host memory, the backend
 * refused the event), the thread's last error says why; the stream then
 * counts as busy. */
typedef coop_status (*arena_stream_idle_fn)(void *ctx, coop_stream stream, bool *idle);

/* What the last COOP_ERR_NOMEM of arena_alloc / arena_alloc_in ran into,
 * for the pool's out-of-memory message (set on every such return). */
typedef enum arena_nomem {
    ARENA_NOMEM_CAPACITY, /* the capacity, after releasing what was idle */
    ARENA_NOMEM_DEVICE,   /* the backend refused (device full, memory used outside the
                           * pool) after the arena released idle cached memory and
                           * tried again; the backend's message is the thread's last
                           * error */
    ARENA_NOMEM_VA        /* VMM: the tiled range would pass the end of the reservation
                           * (va_size) and no free block fits: holes between live
                           * blocks cannot be given back, whatever the capacity */
} arena_nomem;

/* Block records per slab chunk: 64 KiB of 64-byte records. */
#define ARENA_RECORDS_PER_CHUNK 1023

typedef struct arena {
    coop_backend *backend;
    meta_heap *heap;
    arena_params params;
    unsigned page_shift;         /* log2(params.page_size): page arithmetic without division */
    coop_stream reserved_stream; /* last stream whose free-index set is known to exist */
    arena_segment *first_segment, *last_segment;
    size_t num_segments;
    uint64_t reserved; /* bytes mapped (VMM) or in segments */
    free_index index;
    addr_map map;
    size_t release_hint;           /* map slot found by arena_lookup_to_release */
    addr_map seg_starts, seg_ends; /* without VMM: segment by base / end address */
    arena_counters counters;
    meta_slab records;                /* block records (see meta.h); reserved before commits */
    arena_stream_idle_fn stream_idle; /* reclaim asks it before releasing free space */
    void *stream_idle_ctx;
    arena_nomem nomem; /* why the last COOP_ERR_NOMEM (read only after one) */
    /* VMM: a map that failed part way may have left pages mapped above the
     * top (the only way any are); cleared once none is seen there */
    bool mapped_above_top;
    /* The first stream_idle question of the last reclaim that failed
     * (COOP_OK: none did) and its message: the memory of that stream stayed
     * cached, so a COOP_ERR_NOMEM (capacity) after that reclaim, or a
     * capacity it could not reach, is that failure rather than the
     * capacity's (the pool reports it as such). */
    coop_status idle_failure;
    /* A zeroed segment record set aside by arena_reserve_segment, taken by
     * the next segment created (NULL: none). */
    arena_segment *spare_segment;
    char idle_failure_why[384];
} arena;

/* Reserves the VMM range (if any). COOP_ERR_BACKEND / COOP_ERR_NOMEM /
 * COOP_ERR_HOST_NOMEM leave nothing behind. */
coop_status arena_init(arena *a, coop_backend *backend, meta_heap *heap, const arena_params *p);
/* Unmaps, frees and releases everything. */
void arena_fini(arena *a);

/* Best-fit allocation of size bytes (a multiple of 512) usable on stream,
 * at the low or high end of the chosen free block (a remainder below
 * min_split stays with the allocation at either end: the block is then
 * taken whole, from its start). Maps pages as needed,
 * releasing cached pages / free segments not needed by this placement when
 * the capacity would be exceeded, or when the backend's map / segment_alloc
 * finds the device itself full (COOP_ERR_NOMEM: memory used outside the
 * pool), then trying that call once more (*reclaimed is then set true).
 * COOP_ERR_NOMEM: no room (a->nomem says which limit); COOP_ERR_BACKEND /
 * COOP_ERR_HOST_NOMEM: a call failed. On failure the arena is unchanged
 * apart from released cache (and, with VMM, pages mapped for the placement,
 * which stay mapped as cached free pages). */
coop_status arena_alloc(arena *a, uint64_t size, coop_stream stream, bool high, arena_block **out,
                        bool *reclaimed);

/* After arena_alloc's COOP_ERR_NOMEM (VMM), before the caller waits for
 * streams: the best fit among the free blocks usable on stream whose
 * placement needs no more pages than can still be mapped (none when the
 * device refused). arena_alloc's best fit may lie in unmapped space, and
 * reclaim never unmaps the free blocks of a stream still at work, though a
 * request on that stream may reuse them at once: a fitting free block
 * already mapped would otherwise be reported out of memory. A walk over
 * the blocks (out-of-memory path only), skipped in O(log n) when no free
 * block of size is usable on stream at all. COOP_ERR_NOMEM, a->nomem as it
 * was, when none qualifies (always without VMM). */
coop_status arena_alloc_mapped(arena *a, uint64_t size, coop_stream stream, bool high,
                               arena_block **out, bool *reclaimed);

/* Allocates exactly [addr, addr + size) inside the free block fb, which must
 * contain it and be usable on stream. Same errors as arena_alloc plus
 * COOP_ERR_INVALID for a range outside fb or a block not free. */
coop_status arena_alloc_in(arena *a, arena_block *fb, uintptr_t addr, uint64_t size,
                           coop_stream stream, arena_block **out, bool *reclaimed);

/* Turns a non-free block into a free block tagged tag, coalescing with
 * mergeable neighbours. Returns the free block now containing its range. */
arena_block *arena_release(arena *a, arena_block *b, coop_stream tag);

/* Without VMM: the host memory the next new segment needs (its record,
 * its block records and its address-map slots), set aside now, so that a
 * caller about to change something it cannot undo (the remat context
 * evicting whole segments for a new one) does not then fail for lack of it.
 * COOP_OK or COOP_ERR_HOST_NOMEM (message set). */
coop_status arena_reserve_segment(arena *a);
/* Releases cached memory, highest addresses first, until at least want bytes
 * are released (UINT64_MAX: all): with VMM the mapped pages outside
 * [keep_lo, keep_hi) that lie wholly in idle free space (free blocks tagged
 * COOP_STREAM_ANY or whose stream the stream_idle answer says has finished,
 * and the space above the top), so that no queued work can still use a page
 * unmapped; without VMM the wholly free segments whose blocks are idle.
 * *released gets the bytes released. A backend failure stops it and is
 * returned; what was released stays released. */
coop_status arena_reclaim(arena *a, uint64_t want, uintptr_t keep_lo, uintptr_t keep_hi,
                          uint64_t *released);

/* Without VMM, whether some segment may hold no block in use (only such a
 * segment can be released or left out of a footprint): false only where
 * none can, from counters, no walk. Such a segment is one free block (a
 * free block with no neighbour, not counted as split), or free blocks
 * that did not merge because their tags are two streams other than "any"
 * (free blocks of mergeable tags side by side merge). */
bool arena_may_hold_free_segment(const arena *a);
/* Sets the answer arena_reclaim asks of a free block's stream. */
static inline void arena_set_stream_idle(arena *a, arena_stream_idle_fn fn, void *ctx)
{
    a->stream_idle = fn;
    a->stream_idle_ctx = ctx;
}

/* Retags every free block tagged stream as usable on any stream (the stream
 * has been synchronized), coalescing where that makes neighbours mergeable. */
void arena_retag_any(arena *a, coop_stream stream);
/* The same, except a block next to a free block of a stream still at work
 * (tagged neither "any stream" nor one of the n streams in settled, the
 * streams seen finished, stream among them): that block keeps its tag.
 * Retagged, it would merge into the busy stream's block and take its tag,
 * and its space would then wait for that stream; kept, its own stream can
 * still use it. */
void arena_retag_settled(arena *a, coop_stream stream, const coop_stream *settled, size_t n);

/* Retags stream's free blocks as arena_retag_any does, then frees its
 * free-index set: for a stream its owner is about to destroy, when no
 * block in use can come back tagged with it (the caller has seen to that).
 * A later allocation on the same handle makes a new set. */
void arena_forget_stream(arena *a, coop_stream stream);

/* Lookup and walk (address order). */
/* Whether free space tagged a and space of b may merge, or a free block
 * tagged a serve a request on stream b: the same stream, or either one
 * "any stream". */
static inline bool arena_tags_mergeable(coop_stream a, coop_stream b)
{
    return a == b || a == COOP_STREAM_ANY || b == COOP_STREAM_ANY;
}

static inline arena_segment *arena_first_segment(const arena *a)
{
    return a->first_segment;
}
/* The allocated or pending block starting exactly at addr, or NULL. The
 * address map holds only blocks in use: free blocks are found through the
 * free index and their neighbours, so splits and merges never touch it. */
arena_block *arena_lookup(const arena *a, uintptr_t addr);
/* The same, remembering where the map holds it: the arena_release that
 * usually follows (a free) then removes it without probing again. Inline:
 * every coop_free calls it from pool.c. */
static inline arena_block *arena_lookup_to_release(arena *a, uintptr_t addr)
{
    size_t i = addr_map_find_slot(&a->map, addr);
    if (i == SIZE_MAX)
        return NULL;
    a->release_hint = i;
    return a->map.slots[i].value;
}
/* The block containing addr (any byte of it), or NULL. Linear in the blocks
 * of the segment: for error reporting only. */
arena_block *arena_find_containing(const arena *a, uintptr_t addr);
/* The segment whose reserved range contains addr, or NULL. */
arena_segment *arena_segment_of(const arena *a, uintptr_t addr);
/* The segment holding block b: the only one with VMM; without it, a
 * segment's first and last blocks are found by its base and end addresses
 * in O(1) (the arena asks only at segment boundaries), other blocks by a
 * linear search of the segments. */
static inline arena_segment *arena_block_segment(const arena *a, const arena_block *b)
{
    if (a->params.vmm)
        return a->first_segment;
    if (!b->prev)
        return (arena_segment *)addr_map_find(&a->seg_starts, b->addr);
    if (!b->next)
        return (arena_segment *)addr_map_find(&a->seg_ends, b->addr + b->size);
    return arena_segment_of(a, b->addr);
}

/* Bytes of [addr, addr + size) backed by mapped pages. */
uint64_t arena_mapped_bytes_in(const arena *a, const arena_segment *seg, uintptr_t addr,
                               uint64_t size);
/* The largest free block (the free index's maximum), 0 if none. */
uint64_t arena_largest_free(const arena *a);

/* Validates every invariant above; on a violation writes a message naming it
 * (with addresses) into msg and returns false. */
bool arena_check(const arena *a, char *msg, size_t len);

#endif
