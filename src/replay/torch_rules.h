/*
 * The sizes and rounding of PyTorch's CUDACachingAllocator
 * (c10/cuda/CUDACachingAllocator.cpp), shared by its two emulations: `torch`
 * (default settings, policy_torch.c) and `torch-expandable`
 * (expandable_segments:True, policy_torch_expandable.c).
 */
#ifndef COOP_REPLAY_TORCH_RULES_H
#define COOP_REPLAY_TORCH_RULES_H

#include <stdbool.h>
#include <stdint.h>

enum {
    TORCH_MIN_BLOCK = 512,            /* kMinBlockSize: every size rounds up to it */
    TORCH_SMALL_SIZE = 1 << 20,       /* kSmallSize: the small pool's largest request */
    TORCH_SMALL_BUFFER = 2 << 20,     /* kSmallBuffer: a small segment, a small page */
    TORCH_LARGE_BUFFER = 20 << 20,    /* kLargeBuffer: a large segment, a large page */
    TORCH_MIN_LARGE_ALLOC = 10 << 20, /* kMinLargeAlloc: from here a segment of its own */
    TORCH_ROUND_LARGE = 2 << 20,      /* kRoundLarge: those segments' rounding */
};

/* x rounded up to a multiple of to; the largest multiple when that would
 * wrap (a size near 2^64 then asks for more than any capacity, an OOM, and
 * never a 0-byte block or device). */
static inline uint64_t torch_round_up(uint64_t x, uint64_t to)
{
    if (x > UINT64_MAX - (to - 1))
        return UINT64_MAX / to * to;
    return (x + to - 1) / to * to;
}

/* A request's size as the allocator keeps it (round_size, without
 * roundup_power2_divisions). */
static inline uint64_t torch_round_size(uint64_t size)
{
    return size < TORCH_MIN_BLOCK ? TORCH_MIN_BLOCK : torch_round_up(size, TORCH_MIN_BLOCK);
}

/* An expandable segment's page in a pool: what it maps and unmaps at once. */
static inline uint64_t torch_page_of(bool small)
{
    return small ? TORCH_SMALL_BUFFER : TORCH_LARGE_BUFFER;
}

#endif
