/*
 * `torch-expandable`: an emulation of PyTorch's CUDACachingAllocator under
 * PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (c10/cuda/
 * CUDACachingAllocator.cpp), PyTorch's own remedy for fragmentation and so
 * the peer a virtual-memory allocator has to beat. Written from its rules:
 *  - sizes round up to 512 bytes; rounded sizes <= 1 MiB use the small pool,
 *    larger ones the large pool, as without expandable segments;
 *  - each (stream, pool) grows one expandable segment: a virtual range of
 *    9/8 of the device (here: of the capacity) mapped in pages of 2 MiB
 *    (small pool) or 20 MiB (large pool). A segment's blocks are allocated,
 *    free (mapped) or unmapped; free blocks merge only with free blocks,
 *    unmapped only with unmapped;
 *  - a request first takes the best fit among the pool's free mapped blocks
 *    of its stream, by (size, address), except that it moves on to the next
 *    larger block while that one's "expandable size" (its size plus an
 *    unmapped block right after it) is smaller: it prefers blocks that
 *    cannot grow, keeping the growing end for requests that need it;
 *  - failing that, it takes the unmapped block of its stream, lowest
 *    address first, whose address space (with a free block right before it, and
 *    free or unmapped blocks after) covers the request, and maps pages from
 *    its start until the request fits, merging them with the free block
 *    before. Only where none has room is a new segment reserved;
 *  - a block is split whenever at least 512 bytes remain (both pools: with
 *    expandable segments the large pool's 1 MiB rule is off);
 *  - when mapping would exceed the capacity, every free block's whole pages
 *    are unmapped (release_cached_blocks; a segment left wholly unmapped is
 *    released) and the request is tried once more; failing that, out of
 *    memory. A mapping that fails half way leaves what it mapped, as torch's
 *    does, for that release to unmap.
 * Left out, as in `torch`: stream events (replay frees at free_completed),
 * garbage_collection_threshold, roundup_power2_divisions, max_split_size.
 *
 * Addresses are labels: each segment takes a slot of 9/8 of the capacity
 * above a device-like address, a released one first. Nothing is reserved or mapped on the host
 * (an emulation makes no device accesses, and 9/8 of a large capacity per
 * stream and pool is more address space than a host may want to give).
 * "reserved" is mapped bytes, as torch's reserved_bytes counts them.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "replay/policy.h"
#include "replay/torch_block.h"
#include "replay/torch_rules.h"
#include "status.h"

/* Where the first segment starts: above any host pointer, like a device's,
 * and a multiple of both pools' pages (20 TiB), as every slot is: pages are
 * found by rounding addresses. */
#define XS_FIRST_ADDR ((uint64_t)TORCH_LARGE_BUFFER << 20)

typedef struct xs_state {
    uint64_t capacity, segment_bytes;
    /* segment labels: slot i is [XS_FIRST_ADDR + i * slot_bytes, + slot_bytes);
     * released slots are taken again first (free_slots, a stack) */
    uint64_t slot_bytes, next_slot, max_slots;
    uint64_t *free_slots;
    size_t num_free_slots, cap_free_slots;
    torch_blocks blocks; /* reserved: mapped bytes */
    uint64_t segments;
    /* a host allocation failed in this xs_malloc: it fails with
     * COOP_ERR_HOST_NOMEM, not as a device out of memory (whose cache
     * release and retry, or a release left half done, changed the figures
     * without a word) */
    bool out_of_host;
} xs_state;

/* Reserves a new segment for (stream, pool): one unmapped block, in its tree. */
static torch_block *segment_new(xs_state *s, uint64_t stream, bool small)
{
    uint64_t page = torch_page_of(small);
    uint64_t size = torch_round_up(s->segment_bytes, page);
    uint64_t slot;
    if (s->num_free_slots)
        slot = s->free_slots[s->num_free_slots - 1];
    else if (s->next_slot < s->max_slots)
        slot = s->next_slot;
    else
        return NULL; /* more live ranges than 64-bit labels hold: out of memory */
    torch_block *b = torch_block_new(&s->blocks);
    if (!b) {
        s->out_of_host = true;
        return NULL;
    }
    if (s->num_free_slots)
        s->num_free_slots--;
    else
        s->next_slot++;
    *b = (torch_block){.addr = XS_FIRST_ADDR + slot * s->slot_bytes,
                       .size = size,
                       .stream = stream,
                       .small = small};
    s->segments++;
    torch_block_file(&s->blocks, b);
    return b;
}

/* torch's map_block: maps the pages covering the first size bytes of the
 * unmapped block b (in its tree), merges them with free neighbours and
 * files the result as free. NULL when the capacity has no room (b is then
 * untouched). */
static torch_block *map_front(xs_state *s, torch_block *b, uint64_t size)
{
    uint64_t bytes = torch_round_up(size, torch_page_of(b->small));
    if (bytes > b->size)
        bytes = b->size; /* unmapped blocks are whole pages: cannot happen */
    if (bytes > s->capacity - s->blocks.reserved)
        return NULL;
    torch_block_unfile(&s->blocks, b);
    if (bytes < b->size) {
        torch_block *rest = torch_block_split(&s->blocks, b, bytes);
        if (!rest) {
            torch_block_file(&s->blocks, b);
            s->out_of_host = true;
            return NULL;
        }
        torch_block_file(&s->blocks, rest); /* still unmapped */
    }
    b->mapped = true;
    torch_blocks_reserve(&s->blocks, bytes);
    torch_block_merge(&s->blocks, b, b->prev);
    torch_block_merge(&s->blocks, b, b->next);
    torch_block_file(&s->blocks, b);
    return b;
}

/* A block a request can grow over: free or unmapped (no events in replay). */
static bool allocatable(const torch_block *b)
{
    return b && !b->allocated;
}

static bool has_room(const torch_block *b, uint64_t size)
{
    uint64_t bytes = 0;
    for (; bytes < size && allocatable(b); b = b->next)
        bytes += b->size;
    return bytes >= size;
}

/* torch's find_expandable_block: the first run of free and unmapped blocks
 * with room, starting at an unmapped block (lowest address first) or the
 * free block right before it; a new segment when none has room. */
static torch_block *find_expandable(xs_state *s, uint64_t stream, bool small, uint64_t size)
{
    block_tree *tree = &s->blocks.unmapped[small];
    for (block_tree_node *n = block_tree_lower_bound(tree, stream, 0); n && n->stream == stream;
         n = block_tree_next(tree, n)) {
        torch_block *c = (torch_block *)n;
        if (allocatable(c->prev))
            c = c->prev;
        if (has_room(c, size))
            return c;
    }
    return segment_new(s, stream, small);
}

/* torch's try_allocate_expandable_block: maps until the run from the
 * candidate holds size bytes; the block, out of its tree, or NULL (what was
 * mapped stays mapped and free). */
static torch_block *allocate_expandable(xs_state *s, uint64_t stream, bool small, uint64_t size)
{
    torch_block *c = find_expandable(s, stream, small, size);
    if (!c)
        return NULL;
    if (!c->mapped && !(c = map_front(s, c, c->size < size ? c->size : size)))
        return NULL;
    while (c->size < size) {
        /* free -> unmapped -> ...: map the next block's front; it merges with c */
        uint64_t need = size - c->size;
        torch_block *n = c->next;
        if (!n) /* a request beyond the range: only with a capacity near 2^64 */
            return NULL;
        if (!(c = map_front(s, n, n->size < need ? n->size : need)))
            return NULL;
    }
    torch_block_unfile(&s->blocks, c);
    return c;
}

/* torch's get_free_block: best fit among the free blocks of the stream,
 * moving on past blocks that could grow into unmapped space. */
static torch_block *best_free(xs_state *s, uint64_t stream, bool small, uint64_t size)
{
    block_tree *tree = &s->blocks.free[small];
    block_tree_node *it = block_tree_lower_bound(tree, stream, size);
    if (!it || it->stream != stream)
        return NULL;
    for (;;) {
        block_tree_node *next = block_tree_next(tree, it);
        if (!next || next->stream != stream)
            break;
        const torch_block *a = (const torch_block *)it, *b = (const torch_block *)next;
        uint64_t grow_a = a->size + (a->next && !a->next->mapped ? a->next->size : 0);
        uint64_t grow_b = b->size + (b->next && !b->next->mapped ? b->next->size : 0);
        if (grow_b >= grow_a)
            break;
        it = next;
    }
    torch_block *b = (torch_block *)it;
    torch_block_unfile(&s->blocks, b);
    return b;
}

/* torch's unmap_block: unmaps the whole pages inside the free block b (in
 * its tree); the parts before and after stay free. */
static void unmap_pages(xs_state *s, torch_block *b)
{
    uint64_t page = torch_page_of(b->small);
    uint64_t lo = torch_round_up(b->addr, page), hi = (b->addr + b->size) / page * page;
    if (lo >= hi)
        return;
    torch_block_unfile(&s->blocks, b);
    if (hi < b->addr + b->size) {
        torch_block *after = torch_block_split(&s->blocks, b, hi - b->addr);
        if (!after) {
            torch_block_file(&s->blocks, b);
            s->out_of_host = true;
            return;
        }
        torch_block_file(&s->blocks, after);
    }
    if (lo > b->addr) {
        torch_block *middle = torch_block_split(&s->blocks, b, lo - b->addr);
        if (!middle) {
            torch_block_file(&s->blocks, b);
            s->out_of_host = true;
            return;
        }
        torch_block_file(&s->blocks, b); /* the part before */
        b = middle;
    }
    b->mapped = false;
    s->blocks.reserved -= b->size;
    torch_block_merge(&s->blocks, b, b->prev);
    torch_block_merge(&s->blocks, b, b->next);
    if (!b->prev && !b->next) { /* the whole segment unmapped: released */
        /* its slot is labelled again first: torch reserves a new range each
         * time, and labels must not run out over many OOM retries */
        if (s->num_free_slots == s->cap_free_slots) {
            size_t cap = s->cap_free_slots ? 2 * s->cap_free_slots : 8;
            uint64_t *grown = realloc(s->free_slots, cap * sizeof *grown);
            if (!grown) { /* no host memory: the slot stays used, a label lost */
                s->out_of_host = true;
                s->segments--;
                torch_block_recycle(&s->blocks, b);
                return;
            }
            s->free_slots = grown;
            s->cap_free_slots = cap;
        }
        s->free_slots[s->num_free_slots++] = (b->addr - XS_FIRST_ADDR) / s->slot_bytes;
        s->segments--;
        torch_block_recycle(&s->blocks, b);
        return;
    }
    torch_block_file(&s->blocks, b);
}

/* torch's release_cached_blocks: large pool first, then small. */
static void release_cached(xs_state *s)
{
    for (int small = 0; small < 2; small++) {
        torch_block **free_blocks;
        size_t count;
        if (!torch_blocks_collect_free(&s->blocks, small, &free_blocks, &count)) {
            s->out_of_host = true;
            return;
        }
        for (size_t i = 0; i < count; i++)
            unmap_pages(s, free_blocks[i]);
        free(free_blocks);
    }
}

static coop_status xs_create(uint64_t capacity, uint64_t page, void **state)
{
    (void)page; /* the pages are torch's: 2 MiB small, 20 MiB large */
    xs_state *s = calloc(1, sizeof *s);
    if (!s)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "torch-expandable policy: out of host memory");
    s->capacity = capacity;
    /* 9/8 of the device, as torch reserves; at least one page of each pool */
    uint64_t ninth = capacity / 8;
    s->segment_bytes = capacity > UINT64_MAX / 2 ? UINT64_MAX / 4 : capacity + ninth;
    if (s->segment_bytes < TORCH_LARGE_BUFFER)
        s->segment_bytes = TORCH_LARGE_BUFFER;
    /* slots of whole large pages, so both pools' pages align */
    s->slot_bytes = torch_round_up(s->segment_bytes, TORCH_LARGE_BUFFER);
    s->max_slots = (UINT64_MAX - XS_FIRST_ADDR) / s->slot_bytes;
    *state = s;
    return COOP_OK;
}

static coop_status xs_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    xs_state *s = state;
    uint64_t rounded = torch_round_size(size);
    bool small = rounded <= TORCH_SMALL_SIZE;
    s->out_of_host = false;
    torch_block *b = best_free(s, stream, small, rounded);
    if (!b)
        b = allocate_expandable(s, stream, small, rounded);
    if (!b && !s->out_of_host) {
        release_cached(s);
        b = s->out_of_host ? NULL : allocate_expandable(s, stream, small, rounded);
    }
    if (s->out_of_host) /* what allocate_expandable mapped stays mapped and free */
        return coop_set_error(COOP_ERR_HOST_NOMEM, "torch-expandable policy: out of host memory");
    if (!b)
        return coop_set_error(COOP_ERR_NOMEM,
                              "torch-expandable policy: %llu bytes do not fit (mapped %llu of "
                              "%llu)",
                              (unsigned long long)size, (unsigned long long)s->blocks.reserved,
                              (unsigned long long)s->capacity);
    if (b->size - rounded >= TORCH_MIN_BLOCK) {
        torch_block *rest = torch_block_split(&s->blocks, b, rounded);
        if (!rest) {
            torch_block_file(&s->blocks, b);
            return coop_set_error(COOP_ERR_HOST_NOMEM,
                                  "torch-expandable policy: out of host memory");
        }
        torch_block_file(&s->blocks, rest);
    }
    coop_status st = torch_blocks_allocate(&s->blocks, b, "torch-expandable");
    if (st == COOP_OK)
        *addr = (uintptr_t)b->addr;
    return st;
}

static coop_status xs_free(void *state, uintptr_t addr, uint64_t size)
{
    (void)size;
    xs_state *s = state;
    return torch_blocks_free(&s->blocks, addr, "torch-expandable");
}

static void xs_stats(void *state, replay_policy_stats *out)
{
    xs_state *s = state;
    torch_blocks_stats(&s->blocks, out);
}

static void xs_destroy(void *state)
{
    xs_state *s = state;
    if (!s)
        return;
    torch_blocks_destroy(&s->blocks); /* nothing is mapped on the host */
    free(s->free_slots);
    free(s);
}

static coop_status xs_check(void *state)
{
    const xs_state *s = state;
    return torch_blocks_check(&s->blocks, "torch-expandable", s->capacity);
}

const replay_policy_ops replay_policy_torch_expandable = {
    .name = "torch-expandable",
    .summary = "emulation of PyTorch's allocator with expandable_segments:True (one growing "
               "range per stream and pool, 2 / 20 MiB pages)",
    .create = xs_create,
    .malloc = xs_malloc,
    .free = xs_free,
    .stats = xs_stats,
    .destroy = xs_destroy,
    .check = xs_check,
    .capacity_step = torch_capacity_step,
};
