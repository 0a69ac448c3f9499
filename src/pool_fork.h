/*
 * fork() with pools alive (PyTorch's DataLoader forks its workers while
 * other threads may be inside the allocator): pthread_atfork handlers take
 * every pool's lock before the fork and release them on both sides, so the
 * child's copy of each pool is consistent and unlocked rather than frozen
 * mid-operation under a lock whose owner does not exist in the child.
 *
 * Lock order across the fork: the hooks' outer locks (the PyTorch ABI's
 * state and order locks, taken before pool calls), the registry, every
 * pool's lock, the hooks' inner locks (history and error locks, taken under
 * a pool's lock).
 *
 * CUDA does not survive fork: the parent's context, its mappings and its
 * streams are not valid in the child, and a driver call there fails or
 * worse. The child handler marks every CUDA pool (coop_pool.forked_pid)
 * and cuts its backend off from the driver (coop_backend_fault_forked):
 * each entry point then fails with COOP_ERR_UNSUPPORTED, naming itself,
 * the pool's process and the child (pool_forked_error); coop_pool_destroy
 * frees the host metadata only. Marked once at the fork, so that no call
 * asks getpid(). As PyTorch, which refuses CUDA in a child forked after
 * CUDA was initialized ("Cannot re-initialize CUDA in forked subprocess").
 */
#ifndef COOP_POOL_FORK_H
#define COOP_POOL_FORK_H

#include <stdbool.h>

#include "coop.h" /* coop_pool, coop_status */

/* Locks of a layer above the pools (the PyTorch ABI), taken and released
 * around the pools' at fork. release(child): true in the child. */
typedef struct pool_fork_hooks {
    void (*outer_prepare)(void);
    void (*outer_release)(bool child);
    void (*inner_prepare)(void);
    void (*inner_release)(bool child);
} pool_fork_hooks;

/* Installs hooks (at most one set; static storage) and the fork handlers. */
void pool_fork_set_hooks(const pool_fork_hooks *hooks);

/* Adds a created pool to (removes a destroyed one from) the set locked at
 * fork; registers the fork handlers on first use. */
void pool_fork_register(coop_pool *pool);
void pool_fork_unregister(coop_pool *pool);

/* A fork() from inside a coop_walk visitor: the walking thread holds the
 * pool's lock across the visitors, and would wait for it forever in the
 * prepare handler. coop_walk records each pool it holds in a frame on its
 * stack, linked per thread (innermost first: a visitor may walk another
 * pool); the handlers leave those pools' locks to the walk: not taken
 * before the fork, kept by the walk in the parent, and in the child set
 * held by the one thread, the walker's, whose coop_walk releases it as it
 * returns. Held under the lock, the pool is consistent on both sides (a
 * walk changes nothing). */
typedef struct pool_walk_frame {
    coop_pool *pool;
    struct pool_walk_frame *outer;
} pool_walk_frame;

/* Around the visitors of a walk of pool, its lock held. */
void pool_fork_walk_begin(pool_walk_frame *frame, coop_pool *pool);
void pool_fork_walk_end(pool_walk_frame *frame);

/* Whether this thread is inside a walk of pool (a frame names it). */
bool pool_fork_walked_here(const coop_pool *pool);

/* This thread's walks, innermost first; NULL (one thread-local read) when
 * it walks nothing: for a caller asking about several pools at once (the
 * PyTorch ABI's, torch_abi.c's walked_device). */
const pool_walk_frame *pool_fork_walks(void);

/* fn's error for a pool that pool_forked reports: COOP_ERR_UNSUPPORTED,
 * "FN: this CUDA pool was created in process P; CUDA cannot be used in a
 * forked child (process C)". */
coop_status pool_forked_error(const coop_pool *pool, const char *fn);

/* coop_pool_create's refusal of a CUDA pool in a process forked after the
 * driver was initialized in an ancestor (COOP_ERR_UNSUPPORTED, naming
 * both processes); COOP_OK elsewhere. Asks getpid(): creation only. */
coop_status pool_fork_cuda_creatable(void);

#endif
