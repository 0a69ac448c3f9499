/*
 * Replay policies: one allocator each, placing the sizes of a trace on a
 * simulated device of a given capacity. Replay drives every policy through
 * this interface, in the same process, so their figures compare directly.
 *
 * A policy is an ops table plus an opaque state. malloc returns COOP_OK and an
 * address, or COOP_ERR_NOMEM when the policy's own retry path (freeing cached
 * segments, purging) could not find room within the capacity. Any other status
 * is a failure of the policy itself (metadata, backend), not of the trace.
 */
#ifndef COOP_REPLAY_POLICY_H
#define COOP_REPLAY_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "coop.h"
#include "saturating.h"

/* A policy's memory figures at one moment, all in bytes. */
typedef struct replay_policy_stats {
    uint64_t reserved_bytes; /* device memory held now (mapped pages, segments, commits) */
    /* the most reserved_bytes reached so far, inside calls too: a torch
     * emulation can map pages, fail, release and retry within one malloc, and
     * PyTorch's reserved_bytes peak counts those pages (map_block raises it at
     * once); 0 where the policy keeps none (replay then samples reserved_bytes
     * between events) */
    uint64_t peak_reserved_bytes;
    uint64_t map_bytes;    /* total bytes ever mapped / reserved, first mappings included;
                            * stops at UINT64_MAX (saturating_add_u64: a trace of 2^11
                            * maps of 2^53 bytes wrapped it) */
    uint64_t active_bytes; /* bytes of allocated blocks after the policy's rounding */
    uint64_t free_bytes;   /* bytes of free blocks inside reserved memory */
    uint64_t largest_free; /* the largest free block */
    bool has_free_blocks;  /* false where free_bytes / largest_free are unknown */
} replay_policy_stats;

typedef struct replay_policy_ops {
    const char *name;
    const char *summary; /* one line for --help */
    /* capacity: most device bytes the policy may hold at once.
     * page: physical mapping granularity (only page-mapping policies use it). */
    coop_status (*create)(uint64_t capacity, uint64_t page, void **state);
    /* size: requested bytes (> 0); stream: the trace's stream id. */
    coop_status (*malloc)(void *state, uint64_t size, uint64_t stream, uintptr_t *addr);
    /* size: the bytes requested at malloc (policies that track sizes ignore it). */
    coop_status (*free)(void *state, uintptr_t addr, uint64_t size);
    void (*stats)(void *state, replay_policy_stats *out);
    void (*destroy)(void *state);
    /* Optional (NULL where the policy has none): validates every invariant
     * of the policy's state, for tests and fuzzers; COOP_OK, or
     * COOP_ERR_INVALID with a message naming the first broken one. */
    coop_status (*check)(void *state);
    /* Optional (NULL: 1 byte): the step of replay_min_capacity's search
     * for the given page, which probes its multiples only. Where every
     * amount the policy holds against the capacity is a multiple of it (a
     * capacity allows what it allows rounded down to one), the answer is
     * exact; else it is within one step. */
    uint64_t (*capacity_step)(uint64_t page);
} replay_policy_ops;

/* The placement policies (the `recorded` figures come from the trace itself,
 * see recorded.h). Returns NULL for an unknown name. */
const replay_policy_ops *replay_policy_find(const char *name);

/* All placement policies in their default order; *count receives the number. */
const replay_policy_ops *const *replay_policy_all(size_t *count);

extern const replay_policy_ops replay_policy_coop;
extern const replay_policy_ops replay_policy_coop_segments;
extern const replay_policy_ops replay_policy_torch;
extern const replay_policy_ops replay_policy_torch_expandable;
extern const replay_policy_ops replay_policy_jemalloc;
extern const replay_policy_ops replay_policy_ideal;

#endif
