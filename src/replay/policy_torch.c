/*
 * `torch`: an emulation of PyTorch's native CUDACachingAllocator placement
 * (c10/cuda/CUDACachingAllocator.cpp, default settings), written from its
 * documented rules:
 *  - requests round up to 512 bytes (kMinBlockSize);
 *  - rounded sizes <= 1 MiB (kSmallSize) use the small pool, carved from 2 MiB
 *    segments (kSmallBuffer); larger ones the large pool, whose segments are
 *    20 MiB (kLargeBuffer) for requests under 10 MiB (kMinLargeAlloc) and the
 *    request rounded up to 2 MiB (kRoundLarge) otherwise;
 *  - a pool is searched best fit in (stream, size, address) order, and only
 *    blocks of the request's stream qualify;
 *  - a block is split when the remainder is >= 512 bytes (small pool) or
 *    > 1 MiB (large pool); max_split_size is unlimited (the default), so the
 *    oversize-block rules never apply;
 *  - a freed block merges with free neighbours of its segment at once;
 *  - when a new segment would exceed the capacity (cudaMalloc fails), every
 *    cached segment that is wholly free is released and the segment is tried
 *    again once (release_cached_blocks); failing that, out of memory.
 * The emulation leaves out what replay cannot see or what is off by default:
 * garbage_collection_threshold, expandable segments, roundup_power2_divisions,
 * stream events (replay frees at free_completed, when reuse is safe anyway).
 *
 * Segments come from the host backend (a reserved, never-touched range), so
 * addresses look like a device's.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "backend.h"
#include "replay/block_map.h"
#include "replay/block_tree.h"
#include "replay/policy.h"
#include "replay/torch_rules.h"
#include "status.h"

typedef struct torch_block {
    block_tree_node node; /* key while free: (stream, size, addr) */
    uint64_t addr, size, stream;
    bool allocated;
    bool small;                      /* which pool the segment belongs to */
    struct torch_block *prev, *next; /* neighbours inside the segment */
} torch_block;

typedef struct torch_state {
    coop_backend *device;
    uint64_t capacity;
    block_tree small_pool, large_pool; /* free blocks */
    block_map allocated;               /* address -> allocated block */
    torch_block *spare;                /* recycled block records (via next) */
    uint64_t reserved, map_bytes, active, free_bytes;
} torch_state;

static uint64_t segment_size_for(uint64_t rounded)
{
    if (rounded <= TORCH_SMALL_SIZE)
        return TORCH_SMALL_BUFFER;
    if (rounded < TORCH_MIN_LARGE_ALLOC)
        return TORCH_LARGE_BUFFER;
    return torch_round_up(rounded, TORCH_ROUND_LARGE);
}

static torch_block *block_new(torch_state *s)
{
    torch_block *b = s->spare;
    if (b)
        s->spare = b->next;
    else
        b = malloc(sizeof *b);
    if (b)
        *b = (torch_block){0};
    return b;
}

static void block_recycle(torch_state *s, torch_block *b)
{
    b->next = s->spare;
    s->spare = b;
}

static block_tree *pool_of(torch_state *s, const torch_block *b)
{
    return b->small ? &s->small_pool : &s->large_pool;
}

static void free_insert(torch_state *s, torch_block *b)
{
    b->node.stream = b->stream;
    b->node.size = b->size;
    b->node.addr = b->addr;
    block_tree_insert(pool_of(s, b), &b->node);
    s->free_bytes += b->size;
}

static void free_remove(torch_state *s, torch_block *b)
{
    block_tree_remove(pool_of(s, b), &b->node);
    s->free_bytes -= b->size;
}

static coop_status torch_create(uint64_t capacity, uint64_t page, void **state)
{
    (void)page; /* segments are whole allocations: no page granularity */
    torch_state *s = calloc(1, sizeof *s);
    if (!s)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "torch policy: out of host memory");
    s->capacity = capacity;
    /* Segments are multiples of 2 MiB, so a device of the capacity rounded up
     * to 2 MiB holds what the capacity allows; the exact limit is checked here
     * (segment_new). Each segment is its own range of the simulated device.
     * The device has at least one 2 MiB page, as the backend wants: a
     * capacity of 0 (the bisection's for a trace that allocates no bytes) is
     * then enforced by segment_new alone. */
    uint64_t device = torch_round_up(capacity, TORCH_ROUND_LARGE);
    coop_status st = coop_backend_host_create(device ? device : TORCH_ROUND_LARGE,
                                              TORCH_ROUND_LARGE, false, &s->device);
    if (st != COOP_OK) {
        free(s);
        return st;
    }
    *state = s;
    return COOP_OK;
}

/* Collects the free blocks that span a whole segment. */
typedef struct whole_segments {
    torch_block **out;
    size_t count;
} whole_segments;

static void collect_whole_segment(block_tree_node *n, void *ctx)
{
    whole_segments *w = ctx;
    torch_block *b = (torch_block *)n; /* the node is the block's first member */
    if (!b->prev && !b->next)
        w->out[w->count++] = b;
}

/* Releases every cached segment that is wholly free (all streams, both pools). */
static void release_cached_segments(torch_state *s)
{
    block_tree *pools[2] = {&s->small_pool, &s->large_pool};
    for (int p = 0; p < 2; p++) {
        /* collect first: releasing changes the tree under an in-order walk */
        size_t cap = pools[p]->count;
        whole_segments whole = {.out = cap ? malloc(cap * sizeof *whole.out) : NULL};
        if (cap && !whole.out)
            return; /* no host memory: behave as if nothing were cached */
        block_tree_each(pools[p], collect_whole_segment, &whole);
        for (size_t i = 0; i < whole.count; i++) {
            torch_block *b = whole.out[i];
            free_remove(s, b);
            s->device->ops->segment_free(s->device, (uintptr_t)b->addr, b->size);
            s->reserved -= b->size;
            block_recycle(s, b);
        }
        free(whole.out);
    }
}

/* cudaMalloc of a new segment, bounded by the capacity. */
static torch_block *segment_new(torch_state *s, uint64_t size, uint64_t stream, bool small)
{
    if (size > s->capacity - s->reserved) /* reserved <= capacity; a sum could wrap */
        return NULL;
    uintptr_t addr;
    if (s->device->ops->segment_alloc(s->device, size, &addr) != COOP_OK)
        return NULL;
    torch_block *b = block_new(s);
    if (!b) {
        s->device->ops->segment_free(s->device, addr, size);
        return NULL;
    }
    b->addr = addr;
    b->size = size;
    b->stream = stream;
    b->small = small;
    s->reserved += size;
    s->map_bytes += size;
    return b;
}

static coop_status torch_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    torch_state *s = state;
    uint64_t rounded = torch_round_size(size);
    bool small = rounded <= TORCH_SMALL_SIZE;
    block_tree *pool = small ? &s->small_pool : &s->large_pool;

    torch_block *b = NULL;
    block_tree_node *fit = block_tree_lower_bound(pool, stream, rounded);
    if (fit && fit->stream == stream) {
        b = (torch_block *)fit;
        free_remove(s, b);
    } else {
        uint64_t seg = segment_size_for(rounded);
        b = segment_new(s, seg, stream, small);
        if (!b) {
            release_cached_segments(s);
            b = segment_new(s, seg, stream, small);
        }
        if (!b)
            return coop_set_error(COOP_ERR_NOMEM,
                                  "torch policy: %llu bytes do not fit (reserved %llu of %llu)",
                                  (unsigned long long)size, (unsigned long long)s->reserved,
                                  (unsigned long long)s->capacity);
    }

    uint64_t remaining = b->size - rounded;
    bool split = small ? remaining >= TORCH_MIN_BLOCK : remaining > TORCH_SMALL_SIZE;
    if (split) {
        torch_block *rest = block_new(s);
        if (!rest) {
            free_insert(s, b);
            return coop_set_error(COOP_ERR_HOST_NOMEM, "torch policy: out of host memory");
        }
        rest->addr = b->addr + rounded;
        rest->size = remaining;
        rest->stream = b->stream;
        rest->small = b->small;
        rest->prev = b;
        rest->next = b->next;
        if (b->next)
            b->next->prev = rest;
        b->next = rest;
        b->size = rounded;
        free_insert(s, rest);
    }
    if (!block_map_put(&s->allocated, (uintptr_t)b->addr, b)) {
        free_insert(s, b); /* neighbours stay unmerged: harmless for an emulation */
        return coop_set_error(COOP_ERR_HOST_NOMEM, "torch policy: out of host memory");
    }
    b->allocated = true;
    s->active += b->size;
    *addr = (uintptr_t)b->addr;
    return COOP_OK;
}

static coop_status torch_free(void *state, uintptr_t addr, uint64_t size)
{
    (void)size;
    torch_state *s = state;
    torch_block *b = block_map_take(&s->allocated, addr);
    if (!b)
        return coop_set_error(COOP_ERR_FOREIGN_PTR, "torch policy: free of unknown address %#llx",
                              (unsigned long long)addr);
    b->allocated = false;
    s->active -= b->size;
    torch_block *prev = b->prev, *next = b->next;
    if (prev && !prev->allocated) {
        free_remove(s, prev);
        prev->size += b->size;
        prev->next = next;
        if (next)
            next->prev = prev;
        block_recycle(s, b);
        b = prev;
    }
    if (next && !next->allocated) {
        free_remove(s, next);
        b->size += next->size;
        b->next = next->next;
        if (next->next)
            next->next->prev = b;
        block_recycle(s, next);
    }
    free_insert(s, b);
    return COOP_OK;
}

static void torch_stats(void *state, replay_policy_stats *out)
{
    torch_state *s = state;
    uint64_t a = block_tree_max_size(&s->small_pool), b = block_tree_max_size(&s->large_pool);
    *out = (replay_policy_stats){
        .reserved_bytes = s->reserved,
        .map_bytes = s->map_bytes,
        .active_bytes = s->active,
        .free_bytes = s->free_bytes,
        .largest_free = a > b ? a : b,
        .has_free_blocks = true,
    };
}

/* Segment heads (no prev) release their whole segment: sum of the chain. */
static void release_segment_of(block_tree_node *n, void *ctx)
{
    torch_state *s = ctx;
    torch_block *b = (torch_block *)n;
    if (b->prev)
        return;
    uint64_t size = 0;
    for (torch_block *it = b; it; it = it->next)
        size += it->size;
    s->device->ops->segment_free(s->device, (uintptr_t)b->addr, size);
}

static void free_record(block_tree_node *n, void *ctx)
{
    (void)ctx;
    free(n); /* the node is the record's first member */
}

static void torch_destroy(void *state)
{
    torch_state *s = state;
    if (!s)
        return;
    /* segments first (they walk the chains), then the records */
    block_tree_each(&s->small_pool, release_segment_of, s);
    block_tree_each(&s->large_pool, release_segment_of, s);
    if (s->allocated.slots)
        for (size_t i = 0; i <= s->allocated.mask; i++)
            if (s->allocated.slots[i].key)
                release_segment_of(s->allocated.slots[i].value, s);
    block_tree_each(&s->small_pool, free_record, NULL);
    block_tree_each(&s->large_pool, free_record, NULL);
    if (s->allocated.slots)
        for (size_t i = 0; i <= s->allocated.mask; i++)
            free(s->allocated.slots[i].value);
    block_map_free(&s->allocated);
    while (s->spare) {
        torch_block *next = s->spare->next;
        free(s->spare);
        s->spare = next;
    }
    coop_backend_destroy(s->device);
    free(s);
}

const replay_policy_ops replay_policy_torch = {
    .name = "torch",
    .summary = "emulation of PyTorch's CUDACachingAllocator (segments, best fit, split rules)",
    .create = torch_create,
    .malloc = torch_malloc,
    .free = torch_free,
    .stats = torch_stats,
    .destroy = torch_destroy,
};
