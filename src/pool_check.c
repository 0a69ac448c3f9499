/* Pool walk and checker: arena invariants plus the pool's own bookkeeping
 * (statistics equal a walk, pending list and stream queues, stream uses). */
#include <stdio.h>
#include <stdlib.h>

#include "pool_fork.h"
#include "pool_internal.h"
#include "stat.h"
#include "status.h"

void pool_walk_locked(coop_pool *pool, coop_segment_visitor on_segment, coop_block_visitor on_block,
                      void *ctx)
{
    const arena *a = &pool->arena;
    for (const arena_segment *s = arena_first_segment(a); s; s = s->next) {
        if (on_segment) {
            size_t num_blocks = 0;
            for (const arena_block *b = s->first; b; b = b->next)
                num_blocks++;
            coop_segment_info si = {
                .address = s->base,
                .size = s->top,
                .mapped_bytes =
                    a->params.vmm ? s->pages.num_mapped * a->params.page_size : s->reserved,
                .num_blocks = num_blocks,
            };
            if (on_segment(&si, ctx))
                break;
        }
        if (!on_block)
            continue;
        for (const arena_block *b = s->first; b; b = b->next) {
            coop_block_info bi = {
                .address = b->addr,
                .size = b->size,
                .requested_size = b->state == COOP_BLOCK_FREE ? 0 : b->requested,
                .state = b->state,
                .stream = b->stream,
                .mapped_bytes = arena_mapped_bytes_in(a, s, b->addr, b->size),
            };
            if (on_block(&bi, ctx))
                return;
        }
    }
}

coop_status coop_walk(coop_pool *pool, coop_segment_visitor on_segment, coop_block_visitor on_block,
                      void *ctx)
{
    if (!pool)
        return null_argument("coop_walk", "pool");
    if (pool_forked(pool))
        return pool_forked_error(pool, "coop_walk");
    bool locked = pool_lock_read(pool); /* nested in a visitor's: held for it already */
    atomic_fetch_add_explicit(&pool->walks, 1, memory_order_relaxed);
    pool_walk_frame frame; /* a visitor may fork (pool_fork.h), or call back in */
    pool_fork_walk_begin(&frame, pool);
    pool_walk_locked(pool, on_segment, on_block, ctx);
    pool_fork_walk_end(&frame);
    atomic_fetch_sub_explicit(&pool->walks, 1, memory_order_relaxed);
    pool_unlock_read(pool, locked);
    return COOP_OK;
}

coop_status pool_walk_reentry_error(const char *fn)
{
    return coop_set_error(COOP_ERR_BUSY,
                          "%s: called from inside a coop_walk visitor of this pool, which the "
                          "walk holds: nothing changed (call it after coop_walk returns; the "
                          "calls that only read the pool are answered in a visitor)",
                          fn);
}

coop_status pool_check_locked(coop_pool *pool)
{
    char msg[400];
    const arena *a = &pool->arena;
    if (!arena_check(a, msg, sizeof msg))
        return coop_set_error(COOP_ERR_CORRUPT, "coop_pool_check: %s", msg);
    int64_t allocated = 0, allocated_bytes = 0, active = 0, active_bytes = 0, requested = 0;
    size_t pending = 0;
    uint64_t largest = 0;
    for (const arena_segment *s = arena_first_segment(a); s; s = s->next)
        for (const arena_block *b = s->first; b; b = b->next) {
            if (b->state == COOP_BLOCK_FREE) {
                /* (a free block's uses and owner bytes are its free-index links) */
                largest = b->size > largest ? b->size : largest;
                continue;
            }
            active++;
            active_bytes += (int64_t)b->size;
            if (b->uses && (b->uses->block != b || b->uses->num_streams == 0 ||
                            b->uses->num_streams > b->uses->cap_streams))
                return coop_set_error(COOP_ERR_CORRUPT,
                                      "coop_pool_check: block %#lx: stream uses are stale",
                                      (unsigned long)b->addr);
            if (b->state == COOP_BLOCK_PENDING) {
                pending++;
                if (!b->uses || !b->uses->events || b->uses->events != b->uses->slots)
                    return coop_set_error(
                        COOP_ERR_CORRUPT,
                        "coop_pool_check: pending block %#lx has no events in its slots",
                        (unsigned long)b->addr);
                continue;
            }
            if (b->uses && b->uses->events)
                return coop_set_error(COOP_ERR_CORRUPT,
                                      "coop_pool_check: allocated block %#lx has events",
                                      (unsigned long)b->addr);
            if (b->requested == 0 || b->requested > b->size)
                return coop_set_error(COOP_ERR_CORRUPT,
                                      "coop_pool_check: block %#lx: requested %llu of %llu bytes",
                                      (unsigned long)b->addr, (unsigned long long)b->requested,
                                      (unsigned long long)b->size);
            allocated++;
            allocated_bytes += (int64_t)b->size;
            requested += (int64_t)b->requested;
        }
    size_t listed = 0, unrecorded = 0, undone = 0;
    const block_uses *prev = NULL;
    for (const block_uses *u = pool->pending; u; prev = u, u = u->pending_next, listed++) {
        if (u->block->state != COOP_BLOCK_PENDING || u->block->uses != u || u->pending_prev != prev)
            return coop_set_error(COOP_ERR_CORRUPT,
                                  "coop_pool_check: pending list entry %#lx is stale",
                                  (unsigned long)u->block->addr);
        for (size_t i = 0; i < u->num_streams; i++)
            unrecorded += u->events[i] == NO_EVENT;
        if (u->undone > u->num_streams)
            return coop_set_error(COOP_ERR_CORRUPT,
                                  "coop_pool_check: pending block %#lx waits for %zu of %zu events",
                                  (unsigned long)u->block->addr, u->undone, u->num_streams);
        undone += u->undone;
    }
    /* every event not yet seen done is queued on its stream, or unrecorded */
    size_t queued = 0;
    for (size_t k = 0; k < pool->num_queues; k++) {
        const pending_queue *q = &pool->queues[k];
        if (q->head + q->len > q->cap)
            return coop_set_error(COOP_ERR_CORRUPT, "coop_pool_check: a stream queue overflows");
        for (size_t j = q->head; j < q->head + q->len; j++) {
            const pending_ref *r = &q->refs[j];
            if (r->u->block->uses != r->u || r->u->block->state != COOP_BLOCK_PENDING ||
                r->slot >= r->u->num_streams || r->u->streams[r->slot] != q->stream ||
                r->u->events[r->slot] == NO_EVENT)
                return coop_set_error(COOP_ERR_CORRUPT,
                                      "coop_pool_check: stream %#lx's queue holds a stale event",
                                      (unsigned long)q->stream);
        }
        queued += q->len;
    }
    if (unrecorded != pool->num_unqueued || queued + unrecorded != undone)
        return coop_set_error(COOP_ERR_CORRUPT,
                              "coop_pool_check: pending events: %zu queued, %zu unrecorded "
                              "(%zu counted), %zu not yet done",
                              queued, unrecorded, pool->num_unqueued, undone);
    if (listed != pending || pending != pool->num_pending)
        return coop_set_error(COOP_ERR_CORRUPT,
                              "coop_pool_check: %zu pending blocks, %zu listed, %zu counted",
                              pending, listed, pool->num_pending);
    if (allocated != pool->allocation.current || allocated_bytes != pool->allocated_bytes.current ||
        active != pool->active.current || active_bytes != pool->active_bytes.current ||
        requested != pool->requested_bytes.current)
        return coop_set_error(
            COOP_ERR_CORRUPT,
            "coop_pool_check: walk finds %lld allocated (%lld bytes, %lld "
            "requested), %lld active (%lld bytes); counters say %lld (%lld, "
            "%lld), %lld (%lld)",
            (long long)allocated, (long long)allocated_bytes, (long long)requested,
            (long long)active, (long long)active_bytes, (long long)pool->allocation.current,
            (long long)pool->allocated_bytes.current, (long long)pool->requested_bytes.current,
            (long long)pool->active.current, (long long)pool->active_bytes.current);
    const coop_stat *stats[] = {&pool->allocation, &pool->active, &pool->allocated_bytes,
                                &pool->active_bytes, &pool->requested_bytes};
    static const char *const names[] = {"allocation", "active", "allocated_bytes", "active_bytes",
                                        "requested_bytes"};
    for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++)
        if (!stat_sound(stats[i]))
            return coop_set_error(COOP_ERR_CORRUPT,
                                  "coop_pool_check: counter %s: current %lld, peak %lld, "
                                  "added %lld, removed %lld",
                                  names[i], (long long)stats[i]->current, (long long)stats[i]->peak,
                                  (long long)stats[i]->allocated, (long long)stats[i]->freed);
    if (largest != arena_largest_free(a))
        return coop_set_error(
            COOP_ERR_CORRUPT, "coop_pool_check: largest free block %llu, the index says %llu",
            (unsigned long long)largest, (unsigned long long)arena_largest_free(a));
    if (a->params.capacity != pool->config.capacity)
        return coop_set_error(COOP_ERR_CORRUPT, "coop_pool_check: capacity out of sync");
    return COOP_OK;
}

coop_status coop_pool_check(coop_pool *pool)
{
    if (!pool)
        return null_argument("coop_pool_check", "pool");
    if (pool_forked(pool))
        return pool_forked_error(pool, "coop_pool_check");
    bool locked = pool_lock_read(pool);
    coop_status st = pool_check_locked(pool);
    pool_unlock_read(pool, locked);
    return coop_error_in("coop_pool_check", st);
}

void pool_check_or_abort_locked(coop_pool *pool, const char *op)
{
    coop_error_kept saved; /* whole: the checker must not hide or cut the op's message */
    coop_error_keep(&saved);
    if (pool_check_locked(pool) != COOP_OK) {
        fprintf(stderr, "coop: invariant broken after %s: %s\n", op, coop_last_error());
        abort();
    }
    coop_error_restore(&saved);
}
