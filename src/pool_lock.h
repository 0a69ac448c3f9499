/*
 * The pool lock: a futex-based mutex (the classic three-state design:
 * 0 unlocked, 1 locked, 2 locked with waiters). Uncontended lock and unlock
 * are one atomic instruction each, about a tenth of the instructions of
 * pthread_mutex_lock / unlock, which matters when a whole malloc+free pair
 * costs a few hundred instructions. Contended waiters sleep in the kernel
 * (no spinning on the shared cores of a busy machine).
 */
#ifndef COOP_POOL_LOCK_H
#define COOP_POOL_LOCK_H

#include <linux/futex.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct pool_mutex {
    _Atomic int state;
} pool_mutex;

static inline void pool_mutex_init(pool_mutex *m)
{
    atomic_init(&m->state, 0);
}

/* In a forked child, where no other thread is left to wait: unlocked, or
 * held (by the one thread, which unlocks it later) without waiters. */
static inline void pool_mutex_reset(pool_mutex *m, bool held)
{
    atomic_store_explicit(&m->state, held ? 1 : 0, memory_order_relaxed);
}

static inline void pool_mutex_lock(pool_mutex *m)
{
    int expected = 0;
    if (atomic_compare_exchange_strong_explicit(&m->state, &expected, 1, memory_order_acquire,
                                                memory_order_relaxed))
        return;
    /* Contended: announce a waiter (2) and sleep until the holder wakes us. */
    if (expected != 2)
        expected = atomic_exchange_explicit(&m->state, 2, memory_order_acquire);
    while (expected != 0) {
        syscall(SYS_futex, &m->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
        expected = atomic_exchange_explicit(&m->state, 2, memory_order_acquire);
    }
}

static inline void pool_mutex_unlock(pool_mutex *m)
{
    if (atomic_exchange_explicit(&m->state, 0, memory_order_release) == 2)
        syscall(SYS_futex, &m->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

#endif
