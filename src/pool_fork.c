/* The pools locked across fork() (pool_fork.h). */
#include <pthread.h>
#include <stdatomic.h>

#include "pool_fork.h"
#include "pool_internal.h"

/* Every live pool, linked through fork_prev / fork_next, under registry. */
static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;
static coop_pool *first;
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static _Atomic(const pool_fork_hooks *) hooks;

/* A pool created single_thread has no lock: its caller serializes it, and a
 * fork from another thread while it is in use is the caller's to avoid. */
static void prepare(void)
{
    const pool_fork_hooks *h = atomic_load(&hooks);
    if (h)
        h->outer_prepare();
    pthread_mutex_lock(&registry);
    for (coop_pool *p = first; p; p = p->fork_next)
        pool_lock(p);
    if (h)
        h->inner_prepare();
}

static void release(bool child)
{
    const pool_fork_hooks *h = atomic_load(&hooks);
    if (h)
        h->inner_release(child);
    for (coop_pool *p = first; p; p = p->fork_next) {
        if (child) /* nobody else is left to wait: back to "unlocked" */
            pool_mutex_init(&p->lock);
        else
            pool_unlock(p);
    }
    pthread_mutex_unlock(&registry);
    if (h)
        h->outer_release(child);
}

static void parent(void)
{
    release(false);
}

static void child(void)
{
    release(true);
}

/* glibc's pthread_atfork registers with the library's __dso_handle, so
 * dlclose of libcoop removes these handlers (tests/lifecycle_unload_test). */
static void install(void)
{
    pthread_atfork(prepare, parent, child);
}

void pool_fork_set_hooks(const pool_fork_hooks *h)
{
    pthread_once(&handlers_once, install);
    atomic_store(&hooks, h);
}

void pool_fork_register(coop_pool *pool)
{
    pthread_once(&handlers_once, install);
    pthread_mutex_lock(&registry);
    pool->fork_prev = NULL;
    pool->fork_next = first;
    if (first)
        first->fork_prev = pool;
    first = pool;
    pthread_mutex_unlock(&registry);
}

void pool_fork_unregister(coop_pool *pool)
{
    pthread_mutex_lock(&registry);
    if (pool->fork_prev)
        pool->fork_prev->fork_next = pool->fork_next;
    else
        first = pool->fork_next;
    if (pool->fork_next)
        pool->fork_next->fork_prev = pool->fork_prev;
    pthread_mutex_unlock(&registry);
}
