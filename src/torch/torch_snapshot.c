/* coop_torch_snapshot_take: one device's blocks, mapped ranges and history
 * for snapshot(). */
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "pool_internal.h"
#include "status.h"
#include "torch/torch_abi.h"

/* Growable copies of what the walk visits (the walk holds the pool's lock:
 * only plain host allocations here). */
typedef struct walk_copy {
    coop_torch_snapshot *snap;
    size_t seg_cap, block_cap, range_cap;
    coop_pool *pool;
    const arena_segment *seg; /* the arena segment the walk is at */
    bool out_of_memory;
} walk_copy;

void (*torch_snapshot_gap_hook)(int device);

/* The first capacity (items) of the copies' arrays (GROW_ARRAY). */
#define COPY_ARRAY_FIRST 64

/* The arena segment coop_walk reports as segment: the one after the last
 * (the walk goes in the arena's order), else found by address. */
static const arena_segment *arena_segment_at(walk_copy *w, const coop_segment_info *segment)
{
    const arena *a = pool_arena(w->pool);
    const arena_segment *s = w->seg ? w->seg->next : arena_first_segment(a);
    if (!s || s->base != segment->address)
        for (s = arena_first_segment(a); s && s->base != segment->address; s = s->next)
            ;
    w->seg = s;
    return s;
}

/* Appends the segment's runs of mapped pages (VMM). coop_walk's visitors
 * run under the pool's lock, so the page map agrees with the blocks. */
static bool copy_ranges(walk_copy *w, const coop_segment_info *segment)
{
    const arena *a = pool_arena(w->pool);
    const arena_segment *seg = arena_segment_at(w, segment);
    if (!a->params.vmm || !seg)
        return true;
    coop_torch_snapshot *s = w->snap;
    size_t first, end;
    for (size_t from = 0;
         page_map_next_run(&seg->pages, from, seg->pages.num_pages, true, &first, &end);
         from = end) {
        if (GROW_ARRAY(s->ranges, w->range_cap, s->num_ranges + 1, COPY_ARRAY_FIRST))
            return false;
        s->ranges[s->num_ranges++] = (coop_torch_range){
            seg->base + ((uintptr_t)first << a->page_shift),
            (uint64_t)(end - first) << a->page_shift,
        };
    }
    return true;
}

static int copy_segment(const coop_segment_info *segment, void *ctx)
{
    walk_copy *w = ctx;
    coop_torch_snapshot *s = w->snap;
    if (GROW_ARRAY(s->segments, w->seg_cap, s->num_segments + 1, COPY_ARRAY_FIRST) ||
        !copy_ranges(w, segment)) {
        w->out_of_memory = true;
        return 1;
    }
    s->segments[s->num_segments++] = *segment;
    return 0;
}

static int copy_block(const coop_block_info *block, void *ctx)
{
    walk_copy *w = ctx;
    coop_torch_snapshot *s = w->snap;
    if (GROW_ARRAY(s->blocks, w->block_cap, s->num_blocks + 1, COPY_ARRAY_FIRST)) {
        w->out_of_memory = true;
        return 1;
    }
    s->blocks[s->num_blocks++] = *block;
    return 0;
}

coop_status coop_torch_snapshot_take(int device, coop_torch_snapshot **out)
{
    if (!out)
        return coop_set_error(COOP_ERR_INVALID, "coop torch: snapshot of device %d: out is NULL",
                              device);
    *out = NULL;
    if (device < 0 || device >= COOP_TORCH_MAX_DEVICES)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop torch: snapshot of device %d: devices are "
                              "0..%d",
                              device, COOP_TORCH_MAX_DEVICES - 1);
    coop_status st =
        torch_forked_device(coop_torch_pool(device), device, "coop_torch_snapshot_take");
    if (st != COOP_OK)
        return st;
    /* before the order lock: another thread's free may hold it, waiting
     * for the walk's lock of the pool */
    if (torch_walked_here(coop_torch_pool(device)))
        return torch_walked_error("coop_torch_snapshot_take", device);
    coop_torch_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "coop torch: no host memory for a snapshot");
    snap->device = device;
    /* The blocks and the events are read in one critical section, so they
     * agree: the order lock keeps out a malloc between its pool call and
     * its alloc event (and a free), and the pool's lock keeps out a pending
     * block's free_completed (recorded under it by any pool call). This is
     * the order the alloc / free paths take them in, so it cannot deadlock.
     * A malloc that began while recording was off records nothing: its
     * block is one allocated before the recording, as a reader expects. */
    pthread_mutex_t *order = torch_abi_order_lock(device);
    pthread_mutex_lock(order);
    coop_pool *pool = coop_torch_pool(device);
    if (pool) {
        coop_config config;
        coop_pool_config(pool, &config);
        snap->vmm = config.use_vmm;
        walk_copy w = {.snap = snap, .pool = pool};
        pool_lock(pool);
        pool_walk_locked(pool, copy_segment, copy_block, &w);
        if (w.out_of_memory)
            st = coop_set_error(COOP_ERR_HOST_NOMEM, "coop torch: no host memory for a snapshot");
    }
    if (torch_snapshot_gap_hook)
        torch_snapshot_gap_hook(device);
    if (st == COOP_OK)
        st = torch_history_copy(torch_abi_history(device), &snap->events, &snap->num_events);
    if (pool)
        pool_unlock(pool);
    pthread_mutex_unlock(order);
    if (st != COOP_OK) {
        coop_torch_snapshot_free(snap);
        return st;
    }
    *out = snap;
    return COOP_OK;
}

void coop_torch_snapshot_free(coop_torch_snapshot *snapshot)
{
    if (!snapshot)
        return;
    free(snapshot->segments);
    free(snapshot->blocks);
    free(snapshot->events);
    free(snapshot->ranges);
    free(snapshot);
}
