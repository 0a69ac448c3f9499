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
 */
#ifndef COOP_POOL_FORK_H
#define COOP_POOL_FORK_H

#include <stdbool.h>

typedef struct coop_pool coop_pool;

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

#endif
