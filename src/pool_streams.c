/*
 * Pool: pending frees and stream synchronization (the semantics are in
 * pool.c's header). A block used on other streams waits, pending, for the
 * events its free recorded; free blocks carry their stream as a tag until
 * an event shows that stream finished; cached memory is released only where
 * no stream can still use it; and coop_forget_stream takes a stream out of
 * all of that before the application destroys it. Everything here runs
 * under the pool lock.
 */
#include <stdio.h>

#include "pool_internal.h"
#include "stat.h"
#include "status.h"

void pool_uses_free(coop_pool *pool, block_uses *u)
{
    meta_free(&pool->heap, u->slots, u->cap_streams * sizeof *u->slots);
    meta_free(&pool->heap, u->streams, u->cap_streams * sizeof *u->streams);
    meta_free(&pool->heap, u, sizeof *u);
}

/* ---- Pending frees ---- */

static void pending_unlink(coop_pool *pool, block_uses *u)
{
    if (!u->pending_next) /* the oldest: the one before it is the oldest now */
        pool->pending_oldest = u->pending_prev;
    if (u->pending_prev)
        u->pending_prev->pending_next = u->pending_next;
    else
        pool->pending = u->pending_next;
    if (u->pending_next)
        u->pending_next->pending_prev = u->pending_prev;
    u->pending_prev = u->pending_next = NULL;
    pool->num_pending--;
}

/* The streams one processing pass has seen an event of not yet complete.
 * A stream runs its work in order, so an event recorded on it after an
 * incomplete one is not complete either: the pass need not ask (on CUDA a
 * driver call under the pool's lock per pending free, every allocation).
 * Streams beyond the memo's room are asked, as before. */
#define BUSY_MEMO 16
typedef struct busy_memo {
    coop_stream stream[BUSY_MEMO];
    int n;
} busy_memo;

static bool memo_busy(const busy_memo *m, coop_stream stream)
{
    for (int i = 0; i < m->n; i++)
        if (m->stream[i] == stream)
            return true;
    return false;
}

/* True when every event of u has completed (a failed query counts as not
 * yet). Records the events that coop_free could not record; one that fails
 * again keeps the block pending. An event on a stream the pass has seen
 * busy counts as not yet without a query: blocks are visited oldest first,
 * so its event was recorded after the incomplete one (or, recorded here,
 * was recorded later than the others anyway; that only keeps a block
 * pending until a later pass, never frees one early). */
static bool events_done(coop_pool *pool, block_uses *u, busy_memo *busy)
{
    for (size_t i = 0; i < u->num_streams; i++) {
        if (memo_busy(busy, u->streams[i]))
            return false;
        if (u->events[i] == NO_EVENT &&
            pool->backend->ops->event_record(pool->backend, u->streams[i], &u->events[i]) !=
                COOP_OK) {
            u->events[i] = NO_EVENT;
            return false;
        }
        bool done = false;
        if (pool->backend->ops->event_query(pool->backend, u->events[i], &done) != COOP_OK)
            return false;
        if (!done) {
            if (busy->n < BUSY_MEMO)
                busy->stream[busy->n++] = u->streams[i];
            return false;
        }
    }
    return true;
}

/* Oldest first, so that an incomplete event ends the queries on its stream
 * for this pass (see events_done): with many frees pending on one busy
 * stream, one query per pass instead of one per pending free. */
void pool_process_pending_locked(coop_pool *pool)
{
    block_uses *u = pool->pending_oldest;
    if (!u && pool->pending) {
        for (u = pool->pending; u->pending_next; u = u->pending_next)
            ;
        pool->pending_oldest = u;
    }
    busy_memo busy = {.n = 0};
    while (u) {
        block_uses *next = u->pending_prev; /* the next newer one */
        if (events_done(pool, u, &busy)) {
            arena_block *b = u->block;
            coop_stream tag = u->release_any ? COOP_STREAM_ANY : b->stream;
            pending_unlink(pool, u);
            for (size_t i = 0; i < u->num_streams; i++)
                pool->backend->ops->event_destroy(pool->backend, u->events[i]);
            pool_uses_free(pool, u); /* (events_done: no slot is NO_EVENT) */
            stat_add(&pool->active, -1);
            stat_add(&pool->active_bytes, -(int64_t)b->size);
            arena_release(&pool->arena, b, tag);
        }
        u = next;
    }
}

/* ---- Stream synchronization ---- */

/* Whether ev has completed; if not and wait is set, waits for it (a failed
 * wait, such as the host backend's for a stream blocked on the host, counts
 * as not completed). *busy is set when it had not completed by itself. */
static bool event_settled(coop_pool *pool, coop_event ev, bool wait, bool *busy)
{
    coop_backend *be = pool->backend;
    bool done = false;
    if (be->ops->event_query(be, ev, &done) != COOP_OK)
        return false;
    if (!done) {
        *busy = true;
        done = wait && be->ops->event_wait(be, ev) == COOP_OK;
    }
    return done;
}

/* Whether everything queued on stream so far has finished: an event
 * recorded now, settled as event_settled does. A failed record is returned
 * (*done false). */
static coop_status stream_settled(coop_pool *pool, coop_stream stream, bool wait, bool *busy,
                                  bool *done)
{
    coop_backend *be = pool->backend;
    coop_event ev;
    *done = false;
    coop_status st = be->ops->event_record(be, stream, &ev);
    if (st != COOP_OK)
        return st;
    *done = event_settled(pool, ev, wait, busy);
    be->ops->event_destroy(be, ev);
    return COOP_OK;
}

/* The arena's question before it unmaps pages of free blocks tagged with
 * stream: has everything queued on it finished? Waited for unless
 * never_wait (a stream blocked on the host then keeps its cached pages
 * mapped instead of blocking this thread). A stream the event cannot be
 * recorded on counts as busy. */
bool pool_stream_idle(void *ctx, coop_stream stream)
{
    coop_pool *pool = ctx;
    bool busy = false, done;
    stream_settled(pool, stream, !pool->config.never_wait, &busy, &done);
    return done;
}

/* OOM path and empty_cache: processes the pending frees that can be; with
 * wait, waits for the events of the others and processes them too; then
 * retags the free blocks of every stream whose work has finished (or, with
 * wait, has been waited for) "any stream". Returns whether some stream or
 * pending free was still busy. */
bool pool_settle_streams(coop_pool *pool, bool wait)
{
    bool busy = false;
    pool_process_pending_locked(pool);
    if (wait && pool->pending) {
        for (block_uses *u = pool->pending; u; u = u->pending_next)
            for (size_t i = 0; i < u->num_streams; i++)
                if (u->events[i] != NO_EVENT)
                    event_settled(pool, u->events[i], true, &busy);
        pool_process_pending_locked(pool);
    }
    const free_index *fi = &pool->arena.index;
    for (size_t i = 0; i < fi->num_sets; i++) {
        coop_stream s = fi->sets[i]->stream;
        if (s == COOP_STREAM_ANY || fi->sets[i]->count == 0)
            continue;
        bool done;
        if (stream_settled(pool, s, wait, &busy, &done) == COOP_OK && done)
            arena_retag_any(&pool->arena, s);
    }
    return busy || pool->pending;
}

/* ---- Forgetting a stream ---- */

/* The backend's message, kept: it is formatted into the same buffer. */
static coop_status cannot_record(coop_stream stream, const char *what)
{
    char why[512];
    snprintf(why, sizeof why, "%s", coop_last_error());
    return coop_set_error(COOP_ERR_BACKEND,
                          "coop_forget_stream: cannot record %s on stream %#lx: %s", what,
                          (unsigned long)stream, why);
}

/* coop_forget_stream under the lock. The pool keeps a stream's handle in
 * the tags of the blocks freed on it and in pending blocks' uses, and later
 * records events on it (out of memory, empty_cache, releasing cached
 * memory): on a destroyed handle that is undefined. So: refuse while live
 * blocks would bring the handle back (they are allocated on it, or will
 * record an event on it when freed); record the pending frees' events that
 * are still missing on it; see it finish (waiting unless never_wait); then
 * nothing the pool keeps needs it: its free blocks, and the pending blocks
 * allocated on it, become usable on any stream. A linear walk over the
 * blocks: not a hot path. */
static coop_status forget_stream_locked(coop_pool *pool, coop_stream stream)
{
    coop_backend *be = pool->backend;
    size_t live = 0;
    for (const arena_segment *sg = arena_first_segment(&pool->arena); sg; sg = sg->next)
        for (const arena_block *b = sg->first; b; b = b->next)
            if (b->state == COOP_BLOCK_ALLOCATED &&
                (b->stream == stream || block_uses_has(b->uses, stream)))
                live++;
    if (live)
        return coop_set_error(COOP_ERR_BUSY,
                              "coop_forget_stream: %zu live blocks are allocated on stream %#lx or "
                              "used on it (coop_record_stream): free them first",
                              live, (unsigned long)stream);
    for (block_uses *u = pool->pending; u; u = u->pending_next)
        for (size_t i = 0; i < u->num_streams; i++)
            if (u->streams[i] == stream && u->events[i] == NO_EVENT &&
                be->ops->event_record(be, stream, &u->events[i]) != COOP_OK) {
                u->events[i] = NO_EVENT;
                return cannot_record(stream, "the event of a pending free");
            }
    bool busy = false, done;
    if (stream_settled(pool, stream, !pool->config.never_wait, &busy, &done) != COOP_OK)
        return cannot_record(stream, "an event");
    if (!done)
        return coop_set_error(COOP_ERR_BUSY,
                              "coop_forget_stream: stream %#lx still has work queued (%s): call "
                              "again once it has finished",
                              (unsigned long)stream,
                              pool->config.never_wait ? "the pool never waits"
                                                      : "waiting for it failed");
    for (block_uses *u = pool->pending; u; u = u->pending_next)
        if (u->block->stream == stream)
            u->release_any = true;
    /* Nothing can come back tagged with the stream now (live blocks on it
     * were refused above, pending ones are released "any stream"), so its
     * free-index set goes too: a server that makes a stream per request
     * would otherwise keep one set (about 330 KiB of address space) per
     * stream it ever saw, and every walk over the sets (coop_get_stats,
     * the out-of-memory path) would grow with them. */
    arena_forget_stream(&pool->arena, stream);
    pool_process_pending_locked(pool);
    return COOP_OK;
}

coop_status coop_forget_stream(coop_pool *pool, coop_stream stream)
{
    if (!pool)
        return null_argument("coop_forget_stream", "pool");
    if (stream == COOP_STREAM_ANY)
        return coop_set_error(COOP_ERR_INVALID, "coop_forget_stream: stream %#lx not allowed",
                              (unsigned long)stream);
    pool_lock(pool);
    coop_status st = forget_stream_locked(pool, stream);
    pool_after_op_locked(pool, "forget_stream");
    pool_unlock(pool);
    return st;
}
