/* Internal: what the snapshot code needs from the ABI's per-device state. */
#ifndef COOP_TORCH_ABI_H
#define COOP_TORCH_ABI_H

#include "coop.h"
#include "pool_internal.h"
#include "torch/history.h"

/* Highest device index the ABI accepts, plus one. */
#define COOP_TORCH_MAX_DEVICES 64

/* Device's history (device in [0, COOP_TORCH_MAX_DEVICES)). */
torch_history *torch_abi_history(int device);

/* Device's order lock: held by coop_torch_malloc / coop_torch_free around
 * their pool call and the events it records, while recording is on. Lock
 * order: the order lock, then the pool's lock, then the history's. */
pthread_mutex_t *torch_abi_order_lock(int device);

/* fn's refusal (COOP_ERR_UNSUPPORTED, the message set) of device's pool
 * when it is a CUDA pool's copy in a forked child (pool_forked): "FN:
 * device D's CUDA pool was created in process P; CUDA cannot be used in a
 * forked child (process C)"; COOP_OK otherwise. */
coop_status torch_forked_device(const coop_pool *pool, int device, const char *fn);

/* Whether this thread is inside a coop_walk visitor of pool (NULL: no),
 * with one relaxed load while no walk runs (pool_walked_here), and fn's
 * refusal then: COOP_ERR_BUSY, "FN: called from inside a coop_walk visitor
 * of device D's pool ...". Asked before any of the ABI's locks: the walk
 * holds the pool's, which they would wait for (coop.h, coop_walk). */
static inline bool torch_walked_here(const coop_pool *pool)
{
    return pool && pool_walked_here(pool);
}
coop_status torch_walked_error(const char *fn, int device);

/* For tests: if set, coop_torch_snapshot_take calls it between copying
 * device's blocks and copying its events (with what it holds then), so a
 * test can put an allocation or a free in that gap. NULL otherwise. */
extern void (*torch_snapshot_gap_hook)(int device);

/* For tests: if set, called (under the ABI's state lock) when a memory limit
 * on device was just refused because live blocks keep more mapped, before
 * the limit is held pending, so a test can free a block at that moment.
 * NULL otherwise. */
extern void (*torch_limit_refused_hook)(int device);

/* For tests: if set, coop_torch_malloc calls it between a successful pool
 * call and the alloc event, so a test can switch recording on or off at
 * that moment, or take a snapshot where recording was off when the malloc
 * began (else the malloc holds the order lock, which a snapshot takes).
 * NULL otherwise. */
extern void (*torch_malloc_gap_hook)(int device);

/* For tests: the same in coop_torch_free, between its reading whether
 * recording is on and its pool call (whose events it records under the
 * pool's lock). NULL otherwise. */
extern void (*torch_free_gap_hook)(int device);

#endif
