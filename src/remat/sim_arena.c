/*
 * The simulator's arena memory model: every storage is a block of libcoop's
 * pool on the host backend, whose capacity is the budget, so placement and
 * fragmentation are real.
 *
 * The pool has one fixed segment of the budget's size (no VMM): with
 * virtual memory and small pages, free pages anywhere could be unmapped and
 * remapped at the top, which hides fragmentation entirely; with 2 MiB pages
 * it would hide it at page granularity. A fixed segment is what an
 * allocator without remapping (or a GPU with a hard budget) sees, at the
 * pool's 512-byte block granularity. The segment is the budget rounded
 * down to 512 bytes (sim_arena_capacity), with the host backend simulating
 * 512-byte pages: with its default 4 KiB pages the capacity lost up to
 * 3.5 KiB of the budget, and a floor of one page made budgets below 4 KiB
 * into 4 KiB, which gave nonsense on small logs (review2 F3). No block fits
 * a budget below 512 bytes: such a run is out of memory at its first block.
 *
 * Eviction when a block does not fit:
 *  - argmin policies (dtr, dtr-full, dtr-local, dte, lru, size): evict the
 *    argmin, retry, repeat (as DTR's PyTorch implementation does);
 *  - coop: one window search over the address-ordered blocks, evict the
 *    window's tensors, place the block inside the window.
 * Either way, everything done for one failing request is one search.
 */
#include <math.h>
#include <stdlib.h>

#include "pool_internal.h"
#include "remat/breaker_index.h"
#include "remat/coop_cost.h"
#include "remat/sim_internal.h"
#include "remat/sim_live.h"
#include "remat/window.h"
#include "status.h"

#define SIM_ARENA_PAGE COOP_ALIGN /* the host backend's page: the block granularity */
#define SIM_SCRATCH_BLOCKS 16384u /* blocks a window search has room for at first */

uint64_t sim_arena_capacity(uint64_t budget)
{
    return budget / SIM_ARENA_PAGE * SIM_ARENA_PAGE;
}

void sim_arena_pool_config(uint64_t budget, coop_config *c)
{
    /* a pool holds at least one page; a capacity of 0 is no room, which the
     * callers enforce themselves (sim_arena_place, sim_lib_run) */
    uint64_t cap = sim_arena_capacity(budget);
    if (cap < SIM_ARENA_PAGE)
        cap = SIM_ARENA_PAGE;
    coop_config_default(c);
    c->backend = COOP_BACKEND_HOST;
    c->use_vmm = false;
    c->page_size = SIM_ARENA_PAGE;
    c->capacity = cap;
    c->segment_size = cap;
    c->min_split = COOP_ALIGN;
}

int sim_arena_open(sim_runtime *rt)
{
    coop_config c;
    sim_arena_pool_config(rt->budget, &c);
    if (coop_pool_create(&c, &rt->mem_pool))
        return -1;
    pool_set_quiet_oom(rt->mem_pool, true); /* a refusal means evict and retry */
    rt->scratch = calloc(1, sizeof *rt->scratch);
    if (!rt->scratch)
        return -1;
    /* room for searches over every block (at most two per storage plus one,
     * up to a limit; larger searches grow it): a search that grows its
     * arrays pays for the copy and the fresh pages (measured: +8 us on the
     * one densenet search that first walked more than 512 blocks) */
    size_t blocks = 2 * (size_t)rt->prog->num_storages + 1;
    if (window_scratch_reserve(rt->scratch,
                               blocks < SIM_SCRATCH_BLOCKS ? blocks : SIM_SCRATCH_BLOCKS))
        return -1;
    if (!rt->cfg.plain_window_walk) {
        rt->breakers = calloc(1, sizeof *rt->breakers);
        if (!rt->breakers)
            return -1;
    }
    /* the same for a window's victims */
    rt->victims_cap = 64;
    rt->victims = malloc(rt->victims_cap * sizeof *rt->victims);
    if (!rt->victims)
        return -1;
    rt->budget = sim_arena_capacity(rt->budget);
    pool_lock(rt->mem_pool); /* the simulator is the only user: hold it for the run */
    return 0;
}

static void drop_breakers(sim_runtime *rt)
{
    if (!rt->breakers)
        return;
    breaker_index_free(rt->breakers);
    free(rt->breakers);
    rt->breakers = NULL;
}

/* The index only needs every indexed block to break windows: a breaker left
 * out (no memory to add it) costs search time, never a different window; a
 * block that cannot be taken out (no memory to split its run) would be
 * skipped wrongly, so the index is dropped and searches walk every block. */
void sim_arena_sync(sim_runtime *rt, uint32_t s)
{
    rt_storage *r = &rt->storages[s];
    if (!rt->breakers)
        return;
    bool breaks = r->ptr && r->pool_pos == SIM_NONE;
    if (breaks == r->breaking)
        return;
    arena_block *b = arena_lookup(pool_arena(rt->mem_pool), (uintptr_t)r->ptr);
    if (breaks) {
        if (b && !breaker_index_add(rt->breakers, b))
            r->breaking = true;
        return;
    }
    r->breaking = false;
    if (!b || breaker_index_remove(rt->breakers, b))
        drop_breakers(rt);
}

static void sim_arena_unindex(sim_runtime *rt, uint32_t s)
{
    rt_storage *r = &rt->storages[s];
    if (!r->breaking)
        return;
    r->breaking = false;
    arena_block *b = arena_lookup(pool_arena(rt->mem_pool), (uintptr_t)r->ptr);
    if (!rt->breakers || !b || breaker_index_remove(rt->breakers, b))
        drop_breakers(rt);
}

void sim_arena_close(sim_runtime *rt)
{
    if (!rt->mem_pool)
        return;
    pool_unlock(rt->mem_pool);
    coop_pool_destroy(rt->mem_pool);
    rt->mem_pool = NULL;
    if (rt->scratch)
        window_scratch_free(rt->scratch);
    free(rt->scratch);
    rt->scratch = NULL;
    drop_breakers(rt);
}

static uint32_t storage_of(const sim_runtime *rt, const void *owner)
{
    return (uint32_t)((const rt_storage *)owner - rt->storages);
}

/* Cheap tensor partitioning: storages cheap to recompute per byte go to the
 * high end of free blocks, the others to the low end. */
static unsigned placement(const sim_runtime *rt, uint32_t s)
{
    double t = rt->cfg.cheap_threshold;
    uint64_t size = rt->prog->storages[s].size;
    if (t < 0 || !size)
        return COOP_ALLOC_LOW;
    double density =
        (double)rt->prog->ops[rt->prog->tensors[rt->prog->storages[s].root].op].cost / (double)size;
    return density < t ? COOP_ALLOC_HIGH : COOP_ALLOC_LOW;
}

static void bind_block(sim_runtime *rt, uint32_t s, arena_block *b)
{
    rt_storage *r = &rt->storages[s];
    r->ptr = (void *)b->addr;
    r->placed = b->size;
    b->owner = r;
    rt->memory += b->size;
    if (rt->memory > rt->stats.peak_memory)
        rt->stats.peak_memory = rt->memory;
    sim_arena_sync(rt, s);
}

/* Places s if a free block fits: SIM_OK placed, SIM_OOM no room (evict and
 * retry), SIM_ERROR the pool failed otherwise (its metadata ran out of host
 * memory: evicting would not help, and must not read as the budget's OOM). */
static sim_result try_alloc(sim_runtime *rt, uint32_t s)
{
    coop_status st;
    void *ptr =
        pool_malloc_locked(rt->mem_pool, rt->prog->storages[s].size, 0, placement(rt, s), &st);
    if (!ptr)
        return st == COOP_ERR_NOMEM ? SIM_OOM : SIM_ERROR;
    bind_block(rt, s, arena_lookup(pool_arena(rt->mem_pool), (uintptr_t)ptr));
    return SIM_OK;
}

void sim_arena_free(sim_runtime *rt, uint32_t s)
{
    rt_storage *r = &rt->storages[s];
    if (!r->ptr)
        return;
    sim_arena_unindex(rt, s); /* while the block and its neighbours stand */
    pool_free_locked(rt->mem_pool, r->ptr, &rt->last_freed);
    r->ptr = NULL;
    r->placed = 0;
}

void sim_arena_transfer(sim_runtime *rt, uint32_t from, uint32_t to)
{
    rt_storage *a = &rt->storages[from], *b = &rt->storages[to];
    sim_arena_unindex(rt, from);
    b->ptr = a->ptr;
    b->placed = a->placed;
    a->ptr = NULL;
    a->placed = 0;
    if (b->ptr) {
        arena_block *blk = arena_lookup(pool_arena(rt->mem_pool), (uintptr_t)b->ptr);
        if (blk)
            blk->owner = b;
    }
    sim_arena_sync(rt, to);
}

/* Logical time since r was last used, at least 1 (coop_cost.h). */
static uint64_t staleness(const sim_runtime *rt, const rt_storage *r)
{
    return coop_cost_staleness(rt->clock, (uint64_t)r->last_access);
}

/* What the coop cost multiplies c_live (coop-comp: c_comp, or c_eq where
 * that equals it) by,
 * the same for window_cost and window_bound (coop_cost.h). */
static double coop_weight(const sim_runtime *rt, const rt_storage *r)
{
    return coop_cost_weight(r->remats, staleness(rt, r));
}

/* Window cost of an allocated block: its tensor's Coop cost, or blocked. */
static double window_cost(void *owner, const arena_block *b, void *ctx)
{
    (void)b;
    sim_runtime *rt = ctx;
    uint32_t s = storage_of(rt, owner);
    rt_storage *r = &rt->storages[s];
    if (r->pool_pos == SIM_NONE) /* locked, pinned, or being placed */
        return WINDOW_BLOCKED;
    uint64_t stale = staleness(rt, r);
    rt->stats.heuristic_evals++;
    if (rt->cfg.window_cost == SIM_WINDOW_DTE) {
        uint64_t m = rt->prog->storages[s].size + sim_adjacent_free(rt, s);
        return m ? (double)r->compute / ((double)m * (double)stale) : (double)r->compute;
    }
    if (rt->cfg.window_cost == SIM_WINDOW_LIVE)
        return (double)sim_live_compute(rt, s) * coop_weight(rt, r);
    if (rt->cfg.window_cost == SIM_WINDOW_COMP)
        return (double)sim_component_compute(rt, s) * coop_weight(rt, r);
    return (double)sim_eq_compute(rt, s) / (double)stale;
}

/* A lower bound of window_cost that needs no neighbourhood walk: the
 * storage's own compute (c_eq, c_comp, c_live >= c: class values and
 * computes are never negative), or window_cost itself when the storage's
 * c_eq is cached (exact; for coop-comp only where c_comp is that c_eq: no
 * class cut), or for coop (c_live) its c_live is, or else a c_live invalidated only
 * by changes that add to it (sim_live_known). */
static double window_bound(void *owner, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    sim_runtime *rt = ctx;
    rt_storage *r = owner;
    if (r->pool_pos == SIM_NONE)
        return WINDOW_BLOCKED;
    int64_t eq;
    if (rt->cfg.window_cost == SIM_WINDOW_COMP) {
        double weight = coop_weight(rt, r);
        uint32_t s = storage_of(rt, owner);
        if (sim_eq_cached(rt, s, &eq) && sim_classes_uncut(rt, s)) {
            rt->stats.heuristic_evals++;
            *exact = true;
            return (double)eq * weight;
        }
        return (double)r->compute * weight;
    }
    if (rt->cfg.window_cost == SIM_WINDOW_LIVE) {
        int64_t live;
        int known = sim_live_known(rt, storage_of(rt, owner), &live);
        if (known > 0) {
            rt->stats.heuristic_evals++;
            *exact = true;
        }
        if (known < 0 || live < (int64_t)r->compute)
            live = (int64_t)r->compute;
        return (double)live * coop_weight(rt, r);
    }
    double stale = (double)staleness(rt, r);
    if (rt->cfg.window_cost != SIM_WINDOW_DTE && sim_eq_cached(rt, storage_of(rt, owner), &eq)) {
        rt->stats.heuristic_evals++;
        *exact = true;
        return (double)eq / stale;
    }
    return (double)r->compute / stale;
}

/* Coop: evict the cheapest covering window and place s inside it. */
static sim_result place_in_window(sim_runtime *rt, uint32_t s)
{
    uint64_t size = (rt->prog->storages[s].size + COOP_ALIGN - 1) / COOP_ALIGN * COOP_ALIGN;
    window w;
    window_objective obj = rt->cfg.window_cost == SIM_WINDOW_COMP ||
                                   rt->cfg.window_cost == SIM_WINDOW_EQ ||
                                   rt->cfg.window_cost == SIM_WINDOW_LIVE
                               ? WINDOW_PER_BYTE
                               : WINDOW_SUM;
    int found = window_search_indexed(pool_arena(rt->mem_pool), size, 0, obj, window_cost,
                                      rt->cfg.window_cost == SIM_WINDOW_DTE ? NULL : window_bound,
                                      rt, rt->breakers, rt->scratch, &w);
    rt->stats.blocks_visited += w.blocks_visited;
    if (found == -2)
        return SIM_ERROR;
    if (found < 0)
        return SIM_OOM;
    /* evict the window's tensors (collected first: freeing coalesces blocks);
     * the window then is one free block, the one the last free left */
    uint32_t n = 0;
    for (arena_block *b = w.first;; b = b->next) {
        if (b->state == COOP_BLOCK_ALLOCATED) {
            if (n == rt->victims_cap) {
                uint32_t cap = rt->victims_cap ? rt->victims_cap * 2 : 64;
                uint32_t *v = realloc(rt->victims, cap * sizeof *v);
                if (!v)
                    return SIM_ERROR;
                rt->victims = v;
                rt->victims_cap = cap;
            }
            rt->victims[n++] = storage_of(rt, b->owner);
        }
        if (b == w.last)
            break;
    }
    uintptr_t lo = w.addr;
    for (uint32_t i = 0; i < n; i++) {
        if (sim_evict(rt, rt->victims[i]))
            return SIM_ERROR;
        rt->stats.evictions++;
    }
    arena_block *fb = rt->last_freed;
    if (!n || !fb || fb->state != COOP_BLOCK_FREE || fb->addr > lo ||
        fb->addr + fb->size < lo + w.size) {
        /* cannot happen: a covering free block would have fit */
        coop_set_error_message("simulator: no free block covers the evicted window");
        return SIM_ERROR;
    }
    uintptr_t at = placement(rt, s) == COOP_ALLOC_HIGH ? lo + w.size - size : lo;
    arena_block *out;
    if (pool_alloc_in_locked(rt->mem_pool, fb, at, rt->prog->storages[s].size, 0, &out))
        return SIM_ERROR;
    bind_block(rt, s, out);
    return SIM_OK;
}

sim_result sim_arena_place(sim_runtime *rt, uint32_t s)
{
    /* a budget below one block: the pool (one page, sim_arena_pool_config)
     * would hold a block the budget does not */
    if (!rt->budget)
        return SIM_OOM;
    sim_result placed = try_alloc(rt, s);
    if (placed != SIM_OOM)
        return placed;
    uint64_t want = (rt->prog->storages[s].size + COOP_ALIGN - 1) / COOP_ALIGN * COOP_ALIGN;
    uint64_t free_bytes = rt->budget - rt->memory;
    rt->stats.frag_sum += (double)free_bytes / (double)rt->budget;
    if (free_bytes >= want)
        rt->stats.frag_failures++;
    /* what coop's window pass is about to read (the other policies check
     * before each choice, sim_evict_choice) */
    if (rt->cfg.check_caches && rt->policy == SIM_POLICY_COOP)
        sim_check_caches(rt);
    uint64_t t0 = sim_now_ns();
    sim_result res = SIM_OK;
    if (rt->policy == SIM_POLICY_COOP) {
        res = place_in_window(rt, s);
    } else {
        do {
            res = sim_evict_choice(rt);
            if (res == SIM_OK)
                placed = try_alloc(rt, s);
        } while (res == SIM_OK && placed == SIM_OOM);
        if (res == SIM_OK)
            res = placed;
    }
    if (sim_record_search(&rt->stats, sim_now_ns() - t0))
        return SIM_ERROR;
    return res;
}
