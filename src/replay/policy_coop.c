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

typedef struct coop_policy {
    coop_pool *pool;
    bool below_one_page; /* the capacity holds no whole page: every malloc fails */
} coop_policy;

static coop_status create_pool(uint64_t capacity, uint64_t page, bool vmm, void **state)
{
    coop_policy *p = calloc(1, sizeof *p);
    if (!p)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "coop policy: out of host memory");
    coop_config config;
    coop_config_default(&config);
    config.backend = COOP_BACKEND_HOST;
    config.page_size = page;
    config.use_vmm = vmm;
    config.single_thread = true; /* the replay is the pool's only user */
    /* The pool rounds its capacity up to whole pages; replay must not hand
     * it more than asked, so round down (mapping is in whole pages anyway:
     * a capacity between two multiples allows what the lower one allows). */
    config.capacity = capacity / page * page;
    if (config.capacity == 0) {
        p->below_one_page = true;
        config.capacity = page;
    }
    coop_status st = coop_pool_create(&config, &p->pool);
    if (st != COOP_OK) {
        free(p);
        return st;
    }
    *state = p;
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
    coop_policy *cp = state;
    if (cp->below_one_page)
        return coop_set_error(COOP_ERR_NOMEM, "coop policy: the capacity holds no whole page");
    coop_status st = COOP_OK;
    /* The pool reserves the all-ones stream (its "any stream" tag), but a
     * snapshot may hold it (stream -1, read as its two's complement): replayed
     * as all-ones minus 1 instead. Only a trace that also holds -2 would see
     * the two merged; CUDA stream handles are pointers, never either. */
    if (stream == (uint64_t)UINTPTR_MAX)
        stream--;
    void *p = coop_malloc(cp->pool, (size_t)size, (coop_stream)stream, COOP_ALLOC_LOW, &st);
    if (!p)
        return st == COOP_OK ? COOP_ERR_NOMEM : st;
    *addr = (uintptr_t)p;
    return COOP_OK;
}

static coop_status coop_policy_free(void *state, uintptr_t addr, uint64_t size)
{
    (void)size;
    return coop_free(((coop_policy *)state)->pool, (void *)addr);
}

static void coop_policy_stats(void *state, replay_policy_stats *out)
{
    coop_stats s;
    coop_get_stats(((coop_policy *)state)->pool, &s);
    *out = (replay_policy_stats){
        .reserved_bytes = (uint64_t)s.reserved_bytes.current,
        /* every byte that ever became reserved: page mappings (VMM) or whole
         * segments (without VMM; the pool's map_bytes counts those too, but
         * stops at UINT64_MAX where this stops at INT64_MAX) */
        .map_bytes = (uint64_t)s.reserved_bytes.allocated,
        .active_bytes = (uint64_t)s.allocated_bytes.current,
        .free_bytes = s.free_bytes,
        .largest_free = s.largest_free_block,
        .has_free_blocks = true,
    };
}

static void coop_policy_destroy(void *state)
{
    coop_policy *p = state;
    if (!p)
        return;
    coop_pool_destroy(p->pool);
    free(p);
}

/* The pool's capacity is whole pages (create_pool rounds it down). */
static uint64_t coop_capacity_step(uint64_t page)
{
    return page;
}

const replay_policy_ops replay_policy_coop = {
    .name = "coop",
    .summary = "libcoop: best fit over one virtual range, pages of --page mapped on demand",
    .create = coop_vmm_create,
    .malloc = coop_policy_malloc,
    .free = coop_policy_free,
    .stats = coop_policy_stats,
    .destroy = coop_policy_destroy,
    .capacity_step = coop_capacity_step,
};

const replay_policy_ops replay_policy_coop_segments = {
    .name = "coop-segments",
    .summary = "libcoop's placement over fixed segments (no virtual memory management)",
    .create = coop_segments_create,
    .malloc = coop_policy_malloc,
    .free = coop_policy_free,
    .stats = coop_policy_stats,
    .destroy = coop_policy_destroy,
    .capacity_step = coop_capacity_step,
};
