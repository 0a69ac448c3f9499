/* Pool statistics: torch.cuda.memory_stats() counters plus free-space shape. */
#include "pool_fork.h"
#include "pool_internal.h"
#include "stat.h"

void coop_get_stats(coop_pool *pool, coop_stats *out)
{
    if (!out)
        return;
    if (!pool) {
        *out = (coop_stats){0};
        return;
    }
    bool locked = pool_lock_read(pool);
    const arena *a = &pool->arena;
    *out = (coop_stats){
        .allocation = pool->allocation,
        .segment = a->counters.segment,
        .active = pool->active,
        .inactive_split = a->counters.inactive_split,
        .allocated_bytes = pool->allocated_bytes,
        .reserved_bytes = a->counters.reserved_bytes,
        .active_bytes = pool->active_bytes,
        .inactive_split_bytes = a->counters.inactive_split_bytes,
        .requested_bytes = pool->requested_bytes,
        .num_alloc_retries = pool->num_alloc_retries,
        .num_ooms = pool->num_ooms,
        .num_maps = a->counters.num_maps,
        .num_unmaps = a->counters.num_unmaps,
        .map_bytes = a->counters.map_bytes,
        .capacity = a->params.capacity,
        .free_bytes = a->counters.free_bytes,
        .largest_free_block = arena_largest_free(a),
        .num_free_blocks = a->index.count,
    };
    pool_unlock_read(pool, locked);
    if (out->free_bytes)
        out->fragmentation = 1.0 - (double)out->largest_free_block / (double)out->free_bytes;
    if (out->allocated_bytes.current > 0)
        out->reserved_over_allocated =
            (double)out->reserved_bytes.current / (double)out->allocated_bytes.current;
}

void coop_reset_peak_stats(coop_pool *pool)
{
    if (!pool)
        return;
    /* refused as the calls with a status: the message says why */
    if (pool_refuse_change(pool, "coop_reset_peak_stats") != COOP_OK)
        return;
    pool_lock(pool);
    coop_stat *all[] = {&pool->allocation,
                        &pool->active,
                        &pool->allocated_bytes,
                        &pool->active_bytes,
                        &pool->requested_bytes,
                        &pool->arena.counters.segment,
                        &pool->arena.counters.reserved_bytes,
                        &pool->arena.counters.inactive_split,
                        &pool->arena.counters.inactive_split_bytes};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        stat_reset_peak(all[i]);
    pool_unlock(pool);
}
