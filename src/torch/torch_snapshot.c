/* coop_torch_snapshot_take: one device's blocks and history for snapshot(). */
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "status.h"
#include "torch/torch_abi.h"

/* Growable copies of what the walk visits (the walk holds the pool's lock:
 * only plain host allocations here). */
typedef struct walk_copy {
    coop_torch_snapshot *snap;
    size_t seg_cap, block_cap;
    bool out_of_memory;
} walk_copy;

/* The first capacity (items) of the copies' arrays (GROW_ARRAY). */
#define COPY_ARRAY_FIRST 64

static int copy_segment(const coop_segment_info *segment, void *ctx)
{
    walk_copy *w = ctx;
    coop_torch_snapshot *s = w->snap;
    if (GROW_ARRAY(s->segments, w->seg_cap, s->num_segments + 1, COPY_ARRAY_FIRST)) {
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
    *out = NULL;
    if (device < 0 || device >= COOP_TORCH_MAX_DEVICES)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop torch: snapshot of device %d: devices are "
                              "0..%d",
                              device, COOP_TORCH_MAX_DEVICES - 1);
    coop_torch_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "coop torch: no host memory for a snapshot");
    snap->device = device;
    coop_status st = COOP_OK;
    coop_pool *pool = coop_torch_pool(device);
    if (pool) {
        coop_config config;
        coop_pool_config(pool, &config);
        snap->vmm = config.use_vmm;
        walk_copy w = {snap, 0, 0, false};
        st = coop_walk(pool, copy_segment, copy_block, &w);
        if (st == COOP_OK && w.out_of_memory)
            st = coop_set_error(COOP_ERR_HOST_NOMEM, "coop torch: no host memory for a snapshot");
    }
    if (st == COOP_OK)
        st = torch_history_copy(torch_abi_history(device), &snap->events, &snap->num_events);
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
    free(snapshot);
}
