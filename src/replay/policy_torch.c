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
#include "replay/policy.h"
#include "replay/torch_block.h"
#include "replay/torch_rules.h"
#include "status.h"

/* Blocks are always mapped here: a segment is one cudaMalloc. */
typedef struct torch_state {
    coop_backend *device;
    uint64_t capacity;
    torch_blocks blocks;
    /* COOP_OK, or what failed in this torch_malloc other than the capacity
     * (host memory, the backend's records), its message set: the call fails
     * with it, not as a device out of memory (whose cache release and retry
     * changed the figures without a word) */
    coop_status failure;
} torch_state;

static uint64_t segment_size_for(uint64_t rounded)
{
    if (rounded <= TORCH_SMALL_SIZE)
        return TORCH_SMALL_BUFFER;
    if (rounded < TORCH_MIN_LARGE_ALLOC)
        return TORCH_LARGE_BUFFER;
    return torch_round_up(rounded, TORCH_ROUND_LARGE);
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

/* Releases every cached segment that is wholly free (all streams, both
 * pools), taken from the pools' lists of whole free segments: PyTorch's
 * release_blocks walks every free block to find them, which here had made
 * each release cost the pools' free blocks (every allocation that replaced a
 * cached segment of another stream). The order does not matter: the host
 * backend merges the released ranges into the same holes whatever it is. */
static void release_cached_segments(torch_state *s)
{
    for (int small = 0; small < 2; small++) {
        torch_block *b;
        while ((b = torch_blocks_first_whole(&s->blocks, small))) {
            torch_block_unfile(&s->blocks, b);
            s->device->ops->segment_free(s->device, (uintptr_t)b->addr, b->size);
            s->blocks.reserved -= b->size;
            torch_block_recycle(&s->blocks, b);
        }
    }
}

/* cudaMalloc of a new segment, bounded by the capacity: one block, in no tree. */
static torch_block *segment_new(torch_state *s, uint64_t size, uint64_t stream, bool small)
{
    if (size > s->capacity - s->blocks.reserved) /* reserved <= capacity; a sum could wrap */
        return NULL;
    uintptr_t addr;
    coop_status st = s->device->ops->segment_alloc(s->device, size, &addr);
    if (st != COOP_OK) {
        if (st != COOP_ERR_NOMEM) /* the backend's own records */
            s->failure = st;
        return NULL;
    }
    torch_block *b = torch_block_new(&s->blocks);
    if (!b) {
        s->device->ops->segment_free(s->device, addr, size);
        s->failure = coop_set_error(COOP_ERR_HOST_NOMEM, "torch policy: out of host memory");
        return NULL;
    }
    *b =
        (torch_block){.addr = addr, .size = size, .stream = stream, .mapped = true, .small = small};
    torch_blocks_reserve(&s->blocks, size);
    return b;
}

static coop_status torch_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    torch_state *s = state;
    uint64_t rounded = torch_round_size(size);
    bool small = rounded <= TORCH_SMALL_SIZE;

    torch_block *b = NULL;
    block_tree_node *fit = block_tree_lower_bound(&s->blocks.free[small], stream, rounded);
    if (fit && fit->stream == stream) {
        b = (torch_block *)fit;
        torch_block_unfile(&s->blocks, b);
    } else {
        uint64_t seg = segment_size_for(rounded);
        s->failure = COOP_OK;
        b = segment_new(s, seg, stream, small);
        if (!b && s->failure == COOP_OK) {
            release_cached_segments(s);
            b = s->failure == COOP_OK ? segment_new(s, seg, stream, small) : NULL;
        }
        if (s->failure != COOP_OK)
            return s->failure;
        if (!b)
            return coop_set_error(COOP_ERR_NOMEM,
                                  "torch policy: %llu bytes do not fit (reserved %llu of %llu)",
                                  (unsigned long long)size, (unsigned long long)s->blocks.reserved,
                                  (unsigned long long)s->capacity);
    }

    uint64_t remaining = b->size - rounded;
    bool split = small ? remaining >= TORCH_MIN_BLOCK : remaining > TORCH_SMALL_SIZE;
    if (split) {
        torch_block *rest = torch_block_split(&s->blocks, b, rounded);
        if (!rest) {
            torch_block_file(&s->blocks, b);
            return coop_set_error(COOP_ERR_HOST_NOMEM, "torch policy: out of host memory");
        }
        torch_block_file(&s->blocks, rest);
    }
    coop_status st = torch_blocks_allocate(&s->blocks, b, "torch");
    if (st == COOP_OK)
        *addr = (uintptr_t)b->addr;
    return st;
}

static coop_status torch_free(void *state, uintptr_t addr, uint64_t size)
{
    (void)size;
    torch_state *s = state;
    return torch_blocks_free(&s->blocks, addr, "torch");
}

static void torch_stats(void *state, replay_policy_stats *out)
{
    torch_state *s = state;
    torch_blocks_stats(&s->blocks, out);
}

static coop_status torch_check(void *state)
{
    torch_state *s = state;
    return torch_blocks_check(&s->blocks, "torch", s->capacity);
}

/* Segment heads (no prev) release their whole segment: sum of the chain. */
static void release_segment_of(torch_block *b, void *ctx)
{
    torch_state *s = ctx;
    if (b->prev)
        return;
    uint64_t size = 0;
    for (torch_block *it = b; it; it = it->next)
        size += it->size;
    s->device->ops->segment_free(s->device, (uintptr_t)b->addr, size);
}

static void torch_destroy(void *state)
{
    torch_state *s = state;
    if (!s)
        return;
    /* segments first (they walk the chains), then the records */
    torch_blocks_each(&s->blocks, release_segment_of, s);
    torch_blocks_destroy(&s->blocks);
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
    .check = torch_check,
    .capacity_step = torch_capacity_step,
};
