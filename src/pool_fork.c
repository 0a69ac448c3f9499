/* The pools locked across fork() (pool_fork.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "pool_fork.h"
#include "pool_internal.h"
#include "status.h"

/* Every live pool, linked through fork_prev / fork_next, under registry. */
static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;
static coop_pool *first;
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static _Atomic(const pool_fork_hooks *) hooks;
/* The pools this thread holds locked inside coop_walk (pool_walk_frame). */
static _Thread_local pool_walk_frame *walking;

void pool_fork_walk_begin(pool_walk_frame *frame, coop_pool *pool)
{
    frame->pool = pool;
    frame->outer = walking;
    walking = frame;
}

void pool_fork_walk_end(pool_walk_frame *frame)
{
    walking = frame->outer;
}

/* Whether this thread holds p's lock for a walk: the fork handlers ask it
 * on the forking thread (in the child, its copy); the entry points, for a
 * visitor calling back in (pool_walked_here). */
bool pool_fork_walked_here(const coop_pool *p)
{
    for (const pool_walk_frame *f = walking; f; f = f->outer)
        if (f->pool == p)
            return true;
    return false;
}

const pool_walk_frame *pool_fork_walks(void)
{
    return walking;
}

/* A pool created single_thread has no lock: its caller serializes it, and a
 * fork from another thread while it is in use is the caller's to avoid. */
static void prepare(void)
{
    const pool_fork_hooks *h = atomic_load(&hooks);
    if (h)
        h->outer_prepare();
    pthread_mutex_lock(&registry);
    for (coop_pool *p = first; p; p = p->fork_next)
        if (!pool_fork_walked_here(p)) /* held already, by this thread's walk */
            pool_lock(p);
    if (h)
        h->inner_prepare();
}

static void release(bool child)
{
    const pool_fork_hooks *h = atomic_load(&hooks);
    if (h)
        h->inner_release(child);
    int me = child ? (int)getpid() : 0; /* async-signal-safe, as a child handler needs */
    for (coop_pool *p = first; p; p = p->fork_next) {
        if (child && p->config.backend == COOP_BACKEND_CUDA) {
            /* in a grandchild too: created_pid stays the creator's */
            p->forked_pid = me;
            coop_backend_fault_forked(p->backend, p->created_pid, me);
        }
        bool walked = pool_fork_walked_here(p);
        if (child) /* nobody else is left to wait: unlocked, or the walk's */
            pool_mutex_reset(&p->lock, walked);
        else if (!walked) /* a walk keeps its lock until it returns */
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

coop_status pool_forked_error(const coop_pool *pool, const char *fn)
{
    return coop_set_error(COOP_ERR_UNSUPPORTED,
                          "%s: this CUDA pool was created in process %d; CUDA cannot be used in "
                          "a forked child (process %d)",
                          fn, pool->created_pid, pool->forked_pid);
}

coop_status pool_fork_cuda_creatable(void)
{
    int init = coop_backend_cuda_init_pid(), me = (int)getpid();
    if (!init || init == me)
        return COOP_OK;
    return coop_set_error(COOP_ERR_UNSUPPORTED,
                          "coop_pool_create: the CUDA driver was initialized in process %d; CUDA "
                          "cannot be used in a forked child (process %d)",
                          init, me);
}
