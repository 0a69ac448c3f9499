/*
 * Pool internals: the pool object, and the hooks that in-library layers
 * (rematerialization, replay, tools) use under the pool lock.
 *
 * Hooks for the rematerialization layer:
 *   pool_lock / pool_unlock      hold the pool while inspecting or evicting;
 *   pool_arena(pool)             the arena: walk segments (arena_first_segment,
 *                                seg->next) and blocks in address order
 *                                (seg->first, b->next); b->owner is free for
 *                                the caller's tensor pointer (reset on free);
 *   pool_malloc_locked / pool_free_locked
 *                                the public calls without taking the lock;
 *                                pool_free_locked reports the free block that
 *                                absorbed the freed one (after coalescing);
 *   pool_alloc_in_locked         allocate exactly [addr, addr + size) inside a
 *                                free block (an evicted contiguous window),
 *                                mapping pages as needed, with statistics.
 * All of them keep the invariants coop_pool_check validates.
 */
#ifndef COOP_POOL_INTERNAL_H
#define COOP_POOL_INTERNAL_H

#include "arena.h"
#include "backend.h"
#include "meta.h"
#include "pool_fork.h"
#include "pool_lock.h"
#include "status.h"

/* A pending block at addr (requested bytes asked for, allocated on stream)
 * has become reusable: its other streams' events completed. */
typedef void (*pool_pending_release_fn)(void *ctx, uintptr_t addr, uint64_t requested,
                                        coop_stream stream);

/* Streams a block was used on besides its own (coop_record_stream), and,
 * once freed, the events recorded on them; the block is PENDING until all
 * complete. Allocated from the metadata heap only for such blocks.
 *
 * The event slots are allocated with the streams (record_stream), so that
 * coop_free never allocates and never fails on a valid pointer: a slot whose
 * event could not be recorded at free time holds NO_EVENT and is recorded
 * again when pending frees are processed (an event recorded later covers at
 * least the work queued at free time, so the block still waits for it). */
#define NO_EVENT ((coop_event)0) /* backends never return 0 (pointers) */
typedef struct block_uses {
    arena_block *block;
    coop_stream *streams;
    size_t num_streams, cap_streams;
    coop_event *slots;  /* cap_streams slots: the events while pending */
    coop_event *events; /* == slots while pending (num_streams used), else NULL */
    struct block_uses *pending_prev, *pending_next;
    /* while pending: its events not yet seen complete, the unrecorded
     * (NO_EVENT) ones included; released at 0 */
    size_t undone;
    bool release_any; /* its allocation stream was forgotten (coop_forget_stream): the
                       * block becomes free usable on any stream, not on that one */
} block_uses;

/* One stream's events of pending frees, in the order they were recorded.
 * A stream runs its work in order, so they complete in that order:
 * processing asks only each queue's oldest, and pops while they are done
 * (as PyTorch's per-stream event queues), instead of asking every pending
 * free at every allocation. refs[head .. head + len) are in use. */
typedef struct pending_ref {
    block_uses *u;
    size_t slot; /* u->events[slot], recorded on the queue's stream */
} pending_ref;

typedef struct pending_queue {
    coop_stream stream;
    pending_ref *refs;
    size_t cap, head, len;
} pending_queue;

/* Whether stream is one of u's uses (u may be NULL: none). */
static inline bool block_uses_has(const block_uses *u, coop_stream stream)
{
    for (size_t i = 0; u && i < u->num_streams; i++)
        if (u->streams[i] == stream)
            return true;
    return false;
}

struct coop_pool {
    pool_mutex lock;
    coop_pool *fork_prev, *fork_next; /* the pools locked at fork (pool_fork.c) */
    /* A CUDA pool's copy in a forked child: the process it was created in,
     * and this child's id, set by the fork handler (pool_fork.c); 0 while
     * usable. Read first by every entry point (pool_forked), so a call
     * fails at once without the driver, and without a getpid per call. */
    int created_pid, forked_pid;
    /* coop_walk's walks in progress (changed under the lock, read without
     * it by every entry point): see pool_walked_here */
    _Atomic unsigned walks;
    coop_config config;    /* as resolved at creation; capacity follows set_capacity */
    coop_backend *backend; /* fault wrapper around the device backend */
    meta_heap heap;
    arena arena;
    block_uses *pending; /* freed blocks waiting for events, newest first */
    size_t num_pending;
    /* their recorded events by stream (queues stay while the pool lives,
     * but for a forgotten stream's); and how many of their slots hold no
     * event yet (NO_EVENT: recorded, and queued, when pending frees are
     * next processed) */
    pending_queue *queues;
    size_t num_queues, cap_queues;
    size_t num_unqueued;
    coop_stat allocation, active, allocated_bytes, active_bytes, requested_bytes;
    uint64_t num_alloc_retries, num_ooms;
    /* called under the lock when a pending block becomes reusable, before
     * it joins the free space (pool_set_pending_release_hook); NULL: none */
    pool_pending_release_fn pending_released;
    void *pending_released_ctx;
    /* failed allocations leave the message as it was (pool_set_quiet_oom) */
    bool quiet_oom;
};

/* Whether pool is a CUDA pool's copy in a forked child, which no call may
 * use (pool_forked_error says so, naming the call). */
static inline bool pool_forked(const coop_pool *pool)
{
    return __builtin_expect(pool->forked_pid != 0, 0);
}

/* Whether the calling thread is inside a coop_walk visitor of pool: that
 * walk holds the pool's lock (a single_thread pool: its blocks, mid-walk),
 * so a call that locked the pool again would wait for this thread forever.
 * One relaxed load while no walk runs (the thread's own walks are asked
 * only while one does: another thread's walk is waited for as usual). */
static inline bool pool_walked_here(const coop_pool *pool)
{
    return __builtin_expect(atomic_load_explicit(&pool->walks, memory_order_relaxed) != 0, 0) &&
           pool_fork_walked_here(pool);
}

/* fn's refusal from inside a visitor of the pool's walk (pool_walked_here):
 * COOP_ERR_BUSY, nothing changed. */
coop_status pool_walk_reentry_error(const char *fn);

/* fn's refusal where no call may change pool from here: a forked child's
 * copy of a CUDA pool (pool_forked_error), or a visitor of this thread's
 * walk of it (pool_walk_reentry_error); else COOP_OK. Every entry point
 * that changes the pool asks it first. */
static inline coop_status pool_refuse_change(const coop_pool *pool, const char *fn)
{
    if (pool_forked(pool))
        return pool_forked_error(pool, fn);
    if (pool_walked_here(pool))
        return pool_walk_reentry_error(fn);
    return COOP_OK;
}

/* Quiet (true): an allocation refused for room returns COOP_ERR_NOMEM and
 * leaves the thread's message as it was, for a caller that retries and then
 * writes its own (remat's searches, the simulator's arena): the pool's
 * message reads the live blocks' footprint, a walk over every block, which
 * those callers paid on every failed try (per eviction for the argmin
 * policies). Counted in num_ooms as before. Pool lock held. */
static inline void pool_set_quiet_oom(coop_pool *pool, bool quiet)
{
    pool->quiet_oom = quiet;
}

/* A pool created single_thread is serialized by its caller: the two atomic
 * instructions of an uncontended lock and unlock (about 10 ns per call on
 * the development machine, a quarter of a small malloc) are skipped. */
static inline void pool_lock(coop_pool *pool)
{
    if (!pool->config.single_thread)
        pool_mutex_lock(&pool->lock);
}

static inline void pool_unlock(coop_pool *pool)
{
    if (!pool->config.single_thread)
        pool_mutex_unlock(&pool->lock);
}

/* For a call that only reads pool: locks it, unless this thread's walk
 * holds it already (a visitor reading the pool it walks is answered as the
 * pool is). Returns whether it locked, for pool_unlock_read. */
static inline bool pool_lock_read(coop_pool *pool)
{
    if (pool_walked_here(pool))
        return false;
    pool_lock(pool);
    return true;
}

static inline void pool_unlock_read(coop_pool *pool, bool locked)
{
    if (locked)
        pool_unlock(pool);
}

static inline arena *pool_arena(coop_pool *pool)
{
    return &pool->arena;
}

void *pool_malloc_locked(coop_pool *pool, size_t size, coop_stream stream, unsigned flags,
                         coop_status *status);
/* merged (may be NULL) receives the free block now covering ptr's range, or
 * NULL when the block went pending. */
coop_status pool_free_locked(coop_pool *pool, void *ptr, arena_block **merged);
/* pool_free_locked as coop_free checks it: a rematerialized tensor's block
 * is refused (COOP_ERR_INVALID) rather than freed under its tensor. */
coop_status pool_free_user_locked(coop_pool *pool, void *ptr, arena_block **merged);
coop_status pool_alloc_in_locked(coop_pool *pool, arena_block *free_block, uintptr_t addr,
                                 size_t size, coop_stream stream, arena_block **out);
/* pool_streams.c. Makes the freed block of u pending: records an event on
 * each stream of its uses and queues it. Never fails (a slot whose event
 * cannot be recorded or queued now holds NO_EVENT until the next
 * processing). */
void pool_pending_add(coop_pool *pool, block_uses *u);
/* Sets the hook told of every pending block that becomes reusable (the
 * PyTorch layer's history records torch's free_completed then, as torch
 * does, rather than at the free). Set once, before the pool is shared. */
static inline void pool_set_pending_release_hook(coop_pool *pool, pool_pending_release_fn fn,
                                                 void *ctx)
{
    pool->pending_released = fn;
    pool->pending_released_ctx = ctx;
}
/* Completes pending frees whose events are done: O(streams + completed). */
void pool_process_pending_locked(coop_pool *pool);
/* Frees the queues (pool destruction; the events are the blocks'). */
void pool_queues_free(coop_pool *pool);
/* Frees a block's uses record. */
void pool_uses_free(coop_pool *pool, block_uses *u);
/* The arena's stream_idle answer (ctx: the pool): an event recorded on the
 * stream now has completed, waited for unless never_wait; the event's
 * failure (the stream then counts as busy) otherwise. */
coop_status pool_stream_idle(void *ctx, coop_stream stream, bool *idle);
/* Whether everything queued on stream so far has finished: an event
 * recorded now and queried, never waited for (after pool_settle_streams,
 * what it saw: a stream it waited for has finished). One that cannot be
 * asked counts as not finished; the last error is kept. For out-of-memory
 * messages. */
bool pool_stream_seen_finished(coop_pool *pool, coop_stream stream);
/* Out-of-memory path and empty_cache: processes pending frees (with wait,
 * after waiting for their events) and retags the free blocks of every
 * stream seen finished "any stream". Returns whether something was still
 * busy. */
bool pool_settle_streams(coop_pool *pool, bool wait);
coop_status pool_check_locked(coop_pool *pool);
/* coop_walk without taking the lock (the PyTorch snapshot holds it while it
 * copies the history too). */
void pool_walk_locked(coop_pool *pool, coop_segment_visitor on_segment, coop_block_visitor on_block,
                      void *ctx);
/* With config.check: runs the checker and aborts with its message on failure. */
void pool_check_or_abort_locked(coop_pool *pool, const char *op);
static inline void pool_after_op_locked(coop_pool *pool, const char *op)
{
    if (pool->config.check)
        pool_check_or_abort_locked(pool, op);
}

/* The error for a NULL handle or output pointer passed to fn: API misuse
 * is reported (COOP_ERR_INVALID), never dereferenced. */
static inline coop_status null_argument(const char *fn, const char *arg)
{
    return coop_set_error(COOP_ERR_INVALID, "%s: %s is NULL", fn, arg);
}

/* The error for the stream value COOP_STREAM_ANY passed to fn: the pool
 * keeps it for blocks usable on every stream, so every call that takes a
 * stream refuses it. */
static inline coop_status reserved_stream(const char *fn)
{
    return coop_set_error(COOP_ERR_INVALID, "%s: stream %#lx not allowed (the value is reserved)",
                          fn, (unsigned long)COOP_STREAM_ANY);
}

#endif
