/*
 * `coop` and `coop-segments`: libcoop's pool on the host backend.
 *  - coop: one expandable virtual range, physical pages of --page bytes mapped
 *    on demand and unmapped under pressure (the pool's own OOM path);
 *  - coop-segments: the same placement over fixed segments (use_vmm = false),
 *    as on a device without virtual memory management.
 * The capacity is the pool's: the most bytes mapped (or in segments) at once.
 */
#include <stdlib.h>

#include "replay/policy.h"
#include "status.h"

static coop_status create_pool(uint64_t capacity, uint64_t page, bool vmm, void **state)
{
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_HOST;
    config.page_size = page;
    config.use_vmm = vmm;
    /* Mapping happens in whole pages: a capacity between two page multiples
     * allows exactly what the lower multiple allows. */
    config.capacity = vmm && capacity >= page ? capacity / page * page : capacity;
    coop_pool *pool = NULL;
    coop_status st = coop_pool_create(&config, &pool);
    if (st != COOP_OK)
        return st;
    *state = pool;
    return COOP_OK;
}

static coop_status coop_vmm_create(uint64_t capacity, uint64_t page, void **state)
{
    return create_pool(capacity, page, true, state);
}

static coop_status coop_segments_create(uint64_t capacity, uint64_t page, void **state)
{
    return create_pool(capacity, page, false, state);
}

static coop_status coop_policy_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    coop_status st = COOP_OK;
    void *p = coop_malloc(state, (size_t)size, (coop_stream)stream, COOP_ALLOC_LOW, &st);
    if (!p)
        return st == COOP_OK ? COOP_ERR_NOMEM : st;
    *addr = (uintptr_t)p;
    return COOP_OK;
}

static coop_status coop_policy_free(void *state, uintptr_t addr, uint64_t size)
{
    (void)size;
    return coop_free(state, (void *)addr);
}

static void coop_policy_stats(void *state, replay_policy_stats *out)
{
    coop_stats s;
    coop_get_stats(state, &s);
    *out = (replay_policy_stats){
        .reserved_bytes = (uint64_t)s.reserved_bytes.current,
        .map_bytes = s.map_bytes,
        .active_bytes = (uint64_t)s.allocated_bytes.current,
        .free_bytes = s.free_bytes,
        .largest_free = s.largest_free_block,
        .has_free_blocks = true,
    };
}

static void coop_policy_destroy(void *state)
{
    coop_pool_destroy(state);
}

const replay_policy_ops replay_policy_coop = {
    .name = "coop",
    .summary = "libcoop: best fit over one virtual range, pages of --page mapped on demand",
    .create = coop_vmm_create,
    .malloc = coop_policy_malloc,
    .free = coop_policy_free,
    .stats = coop_policy_stats,
    .destroy = coop_policy_destroy,
};

const replay_policy_ops replay_policy_coop_segments = {
    .name = "coop-segments",
    .summary = "libcoop's placement over fixed segments (no virtual memory management)",
    .create = coop_segments_create,
    .malloc = coop_policy_malloc,
    .free = coop_policy_free,
    .stats = coop_policy_stats,
    .destroy = coop_policy_destroy,
};
