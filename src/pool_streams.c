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
#include <string.h>

#include "growable.h"
#include "pool_fork.h"
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
    if (u->pending_prev)
        u->pending_prev->pending_next = u->pending_next;
    else
        pool->pending = u->pending_next;
    if (u->pending_next)
        u->pending_next->pending_prev = u->pending_prev;
    u->pending_prev = u->pending_next = NULL;
    pool->num_pending--;
}

/* The queue of stream, made if needed; NULL out of host memory. A linear
 * search: a program has a handful of streams, and only frees of blocks
 * used on other streams come here. */
static pending_queue *queue_of(coop_pool *pool, coop_stream stream)
{
    for (size_t i = 0; i < pool->num_queues; i++)
        if (pool->queues[i].stream == stream)
            return &pool->queues[i];
    if (GROW_ARRAY(pool->queues, pool->cap_queues, pool->num_queues + 1, 4))
        return NULL;
    pending_queue *q = &pool->queues[pool->num_queues++];
    *q = (pending_queue){.stream = stream};
    return q;
}

/* Queues u's recorded event in slot i on its stream: 0, or -1 out of host
 * memory (nothing queued). */
static int queue_push(coop_pool *pool, block_uses *u, size_t i)
{
    pending_queue *q = queue_of(pool, u->streams[i]);
    if (!q)
        return -1;
    if (q->head + q->len == q->cap && q->head) { /* slide down: amortized O(1) */
        memmove(q->refs, q->refs + q->head, q->len * sizeof *q->refs);
        q->head = 0;
    }
    if (GROW_ARRAY(q->refs, q->cap, q->head + q->len + 1, 16))
        return -1;
    q->refs[q->head + q->len++] = (pending_ref){.u = u, .slot = i};
    return 0;
}

/* Records u's event in slot i now and queues it: COOP_OK, or the failure
 * (the slot then holds NO_EVENT, to be tried again). */
static coop_status record_and_queue(coop_pool *pool, block_uses *u, size_t i)
{
    coop_backend *be = pool->backend;
    coop_status st = be->ops->event_record(be, u->streams[i], &u->events[i]);
    if (st != COOP_OK) {
        u->events[i] = NO_EVENT;
        return st;
    }
    if (queue_push(pool, u, i)) {
        be->ops->event_destroy(be, u->events[i]);
        u->events[i] = NO_EVENT;
        return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory to queue a stream event");
    }
    return COOP_OK;
}

void pool_pending_add(coop_pool *pool, block_uses *u)
{
    u->events = u->slots;
    u->undone = u->num_streams;
    coop_error_kept kept; /* the free succeeds: a failed record leaves no message */
    coop_error_keep(&kept);
    for (size_t i = 0; i < u->num_streams; i++)
        if (record_and_queue(pool, u, i) != COOP_OK)
            pool->num_unqueued++; /* an event recorded later covers the work queued now */
    coop_error_restore(&kept);
    block_set_state(u->block, COOP_BLOCK_PENDING);
    u->pending_prev = NULL;
    u->pending_next = pool->pending;
    if (pool->pending)
        pool->pending->pending_prev = u;
    pool->pending = u;
    pool->num_pending++;
}

/* Records and queues the events coop_free (or an earlier pass) could not;
 * only of stream's slots unless stream is COOP_STREAM_ANY. The first
 * failure is returned (its slot stays NO_EVENT; the others are tried). */
static coop_status queue_missing(coop_pool *pool, coop_stream stream)
{
    coop_status first = COOP_OK;
    for (block_uses *u = pool->pending; u && pool->num_unqueued; u = u->pending_next)
        for (size_t i = 0; i < u->num_streams; i++) {
            if (u->events[i] != NO_EVENT || (stream != COOP_STREAM_ANY && u->streams[i] != stream))
                continue;
            coop_status st = record_and_queue(pool, u, i);
            if (st == COOP_OK)
                pool->num_unqueued--;
            else if (first == COOP_OK)
                first = st;
        }
    return first;
}

/* u's last event is done: its block becomes free, usable on its stream
 * (on any once that stream was forgotten). */
static void release_pending(coop_pool *pool, block_uses *u)
{
    arena_block *b = u->block;
    coop_stream tag = u->release_any ? COOP_STREAM_ANY : b->stream;
    if (pool->pending_released)
        pool->pending_released(pool->pending_released_ctx, b->addr, b->requested, b->stream);
    pending_unlink(pool, u);
    for (size_t i = 0; i < u->num_streams; i++)
        pool->backend->ops->event_destroy(pool->backend, u->events[i]);
    pool_uses_free(pool, u);
    stat_count_down(&pool->active);
    stat_shrink(&pool->active_bytes, (int64_t)b->size);
    arena_release(&pool->arena, b, tag);
}

/* Pops q's oldest event, known done; its block is released once all its
 * events are. */
static void queue_pop(coop_pool *pool, pending_queue *q)
{
    pending_ref r = q->refs[q->head];
    q->head++;
    if (!--q->len)
        q->head = 0;
    if (!--r.u->undone)
        release_pending(pool, r.u);
}

/* Per queue, pops the events that are done, oldest first, and stops at
 * the first that is not (a failed query counts as not yet): one query per
 * stream with pending frees, plus one per event completed. */
void pool_process_pending_locked(coop_pool *pool)
{
    coop_error_kept kept; /* failures here are tried again later: no message */
    coop_error_keep(&kept);
    if (pool->num_unqueued)
        (void)queue_missing(pool, COOP_STREAM_ANY);
    coop_backend *be = pool->backend;
    for (size_t k = 0; k < pool->num_queues; k++) {
        pending_queue *q = &pool->queues[k];
        while (q->len) {
            pending_ref r = q->refs[q->head];
            bool done = false;
            if (be->ops->event_query(be, r.u->events[r.slot], &done) != COOP_OK || !done)
                break;
            queue_pop(pool, q);
        }
    }
    coop_error_restore(&kept);
}

/* Drops stream's queue if it is empty (a forgotten stream's handle must
 * not stay in the pool). */
static void drop_queue(coop_pool *pool, coop_stream stream)
{
    for (size_t i = 0; i < pool->num_queues; i++) {
        pending_queue *q = &pool->queues[i];
        if (q->stream != stream || q->len)
            continue;
        free(q->refs);
        *q = pool->queues[--pool->num_queues];
        return;
    }
}

void pool_queues_free(coop_pool *pool)
{
    for (size_t i = 0; i < pool->num_queues; i++)
        free(pool->queues[i].refs);
    free(pool->queues);
    pool->queues = NULL;
    pool->num_queues = pool->cap_queues = 0;
}

/* ---- Stream synchronization ---- */

/* Whether ev has completed; if not and wait is set, waits for it (a failed
 * wait, such as the host backend's for a stream blocked on the host, counts
 * as not completed). *busy is set when it had not completed by itself. */
static bool event_settled(coop_pool *pool, coop_event ev, bool wait, bool *busy,
                          coop_status *failure)
{
    coop_backend *be = pool->backend;
    bool done = false;
    coop_status st = be->ops->event_query(be, ev, &done);
    if (st != COOP_OK) {
        if (failure)
            *failure = st;
        return false;
    }
    if (!done) {
        *busy = true;
        done = wait && be->ops->event_wait(be, ev) == COOP_OK;
    }
    return done;
}

/* Whether everything queued on stream so far has finished: an event
 * recorded now, settled as event_settled does. A failed record or query is
 * returned (*done false); a failed wait is not (the stream is busy). */
static coop_status stream_settled(coop_pool *pool, coop_stream stream, bool wait, bool *busy,
                                  bool *done)
{
    coop_backend *be = pool->backend;
    coop_event ev;
    *done = false;
    coop_status st = be->ops->event_record(be, stream, &ev);
    if (st != COOP_OK)
        return st;
    *done = event_settled(pool, ev, wait, busy, &st);
    be->ops->event_destroy(be, ev);
    return st;
}

/* The arena's question before it unmaps pages of free blocks tagged with
 * stream: has everything queued on it finished? Waited for unless
 * never_wait (a stream blocked on the host then keeps its cached pages
 * mapped instead of blocking this thread). A stream the event cannot be
 * recorded on counts as busy, and the failure is returned: the arena
 * reports it when the memory it kept was needed (arena.h, idle_failure). */
coop_status pool_stream_idle(void *ctx, coop_stream stream, bool *idle)
{
    coop_pool *pool = ctx;
    bool busy = false;
    return stream_settled(pool, stream, !pool->config.never_wait, &busy, idle);
}

bool pool_stream_seen_finished(coop_pool *pool, coop_stream stream)
{
    coop_error_kept kept; /* a stream that cannot be asked counts as busy: no message */
    coop_error_keep(&kept);
    bool busy = false, done;
    (void)stream_settled(pool, stream, false, &busy, &done);
    coop_error_restore(&kept);
    return done;
}

/* OOM path and empty_cache: processes the pending frees that can be; with
 * wait, waits for each stream's newest pending event, which releases all of
 * that stream's (a stream finishes its work in order); then
 * retags the free blocks of every stream whose work has finished (or, with
 * wait, has been waited for) "any stream". Returns whether some stream or
 * pending free was still busy. */
bool pool_settle_streams(coop_pool *pool, bool wait)
{
    bool busy = false;
    coop_error_kept kept; /* a stream that cannot be asked counts as busy: no message */
    coop_error_keep(&kept);
    pool_process_pending_locked(pool);
    if (wait && pool->pending) {
        /* one wait per stream, not per free, and no query per free */
        for (size_t k = 0; k < pool->num_queues; k++) {
            pending_queue *q = &pool->queues[k];
            if (!q->len)
                continue;
            pending_ref newest = q->refs[q->head + q->len - 1];
            if (event_settled(pool, newest.u->events[newest.slot], true, &busy, NULL))
                while (q->len)
                    queue_pop(pool, q);
        }
    }
    /* The streams seen finished first, then their blocks retagged: a
     * block next to a free block of a stream still at work keeps its tag
     * (arena_retag_settled), so it needs to know which streams finished.
     * Without host memory for the list, every block is retagged (its space
     * may then wait for the busy neighbour's stream, as before). */
    const free_index *fi = &pool->arena.index;
    coop_stream small[16], *settled = small;
    size_t n = 0, cap = sizeof small / sizeof small[0];
    bool listed = true;
    for (size_t i = 0; i < fi->num_sets; i++) {
        coop_stream s = fi->sets[i]->stream;
        if (s == COOP_STREAM_ANY || fi->sets[i]->count == 0)
            continue;
        bool done;
        if (stream_settled(pool, s, wait, &busy, &done) != COOP_OK || !done)
            continue;
        if (listed && n == cap) {
            coop_stream *more = malloc(2 * cap * sizeof *more);
            if (more) {
                memcpy(more, settled, n * sizeof *more);
                if (settled != small)
                    free(settled);
                settled = more;
                cap *= 2;
            } else {
                listed = false;
            }
        }
        if (listed)
            settled[n++] = s;
        else
            arena_retag_any(&pool->arena, s);
    }
    for (size_t k = 0; k < n; k++)
        arena_retag_settled(&pool->arena, settled[k], settled, n);
    if (settled != small)
        free(settled);
    coop_error_restore(&kept);
    return busy || pool->pending;
}

/* ---- Forgetting a stream ---- */

/* The backend's status and message, kept (the message is formatted into
 * the same buffer): no host memory for an event is COOP_ERR_HOST_NOMEM,
 * not the device's failure. */
static coop_status cannot_record(coop_status st, coop_stream stream, const char *what)
{
    char why[512];
    coop_copy_last_error(why, sizeof why);
    return coop_set_error(st, "coop_forget_stream: cannot record %s on stream %#lx: %s", what,
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
    coop_status st = pool->num_unqueued ? queue_missing(pool, stream) : COOP_OK;
    if (st != COOP_OK)
        return cannot_record(st, stream, "the event of a pending free");
    bool busy = false, done;
    st = stream_settled(pool, stream, !pool->config.never_wait, &busy, &done);
    if (st != COOP_OK)
        return cannot_record(st, stream, "or query an event");
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
    drop_queue(pool, stream); /* empty: its events were all seen done */
    /* and the backend's record of it (the host backend's stream table),
     * once the events still naming it (a pending block's, waiting for
     * another stream too) are destroyed */
    if (pool->backend->ops->forget_stream)
        pool->backend->ops->forget_stream(pool->backend, stream);
    return COOP_OK;
}

coop_status coop_forget_stream(coop_pool *pool, coop_stream stream)
{
    if (!pool)
        return null_argument("coop_forget_stream", "pool");
    coop_status refused = pool_refuse_change(pool, "coop_forget_stream");
    if (refused != COOP_OK)
        return refused;
    if (stream == COOP_STREAM_ANY)
        return reserved_stream("coop_forget_stream");
    pool_lock(pool);
    coop_status st = forget_stream_locked(pool, stream);
    pool_after_op_locked(pool, "forget_stream");
    pool_unlock(pool);
    return coop_error_in("coop_forget_stream", st);
}
