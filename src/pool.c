/*
 * Pool: what an allocator user sees on top of the arena: rounding, stream
 * safety, the capacity, the out-of-memory path, statistics and the lock.
 * Pending frees, waiting for streams and coop_forget_stream are in
 * pool_streams.c, statistics in pool_stats.c, the checker in pool_check.c.
 *
 * Streams (PyTorch's caching-allocator semantics):
 *  - An allocation belongs to the stream it was made on. Freed without other
 *    uses, its block is free at once, tagged with that stream: a later
 *    allocation on the same stream may reuse it immediately (the stream
 *    orders the old and the new use), another stream may not.
 *  - coop_record_stream(ptr, s) adds s to the block's uses. Freeing such a
 *    block records one event on each used stream and makes the block
 *    PENDING: still active, no longer allocated, not reusable. Pending blocks
 *    are examined at the start of every allocation and on the OOM path; once
 *    every event has completed the block becomes free, tagged with its
 *    allocation stream. A failed event query leaves the block pending.
 *  - Free space never used (new pages, new segments) is tagged "any stream".
 *    On the OOM path the pool records an event on each stream that has free
 *    blocks and, where it has already completed (the stream is idle), retags
 *    those blocks "any stream": every use before the free is finished, so any
 *    stream may reuse them. Adjacent free blocks merge when their tags are
 *    equal or one of them is "any stream" (the merged block keeps the
 *    specific tag).
 *  - Waiting: a stream that is still busy (its queued kernels running, as
 *    the GPU usually runs behind the host) would keep its free blocks and
 *    pending frees from every other stream, and a pool would report out of
 *    memory with that memory about to be free. So, like PyTorch's caching
 *    allocator (synchronize_and_free_events), the OOM path and empty_cache
 *    wait for those streams' events, under the pool's lock. A stream blocked
 *    on the host (waiting for a value only this thread would write, a
 *    collective waiting for a peer that waits for us) would never finish:
 *    config.never_wait turns waiting off, and such memory is then reported
 *    out of memory instead of hanging.
 *
 *  - Releasing memory: the backend's unmap and segment free do not wait
 *    for the device. The arena releases only idle free space: free blocks
 *    tagged "any stream", or whose stream an event recorded now shows
 *    finished (pool_stream_idle; waited for unless never_wait), and space
 *    never used. As PyTorch's expandable segments synchronize their own
 *    stream before unmapping, not the device, so that a stream blocked on
 *    the host that never used the pages cannot block the unmap.
 *
 * Out of memory: process pending frees, try; if mapping would exceed the
 * capacity, or the backend finds the device itself full (memory used
 * outside the pool), unmap idle cached pages outside the placement (or
 * release idle free segments) and retry; if still failing, retag idle
 * streams and try once more: best fit, then, if its pages cannot be mapped,
 * the best free block whose pages can (a busy stream's own free blocks are
 * never unmapped, but are reusable on it); if some stream was busy and
 * waiting is allowed, wait for it, retag, and try both a last time. Then NULL with
 * COOP_ERR_NOMEM and a message with the numbers (and the driver's message
 * when the device refused). num_alloc_retries counts allocations that
 * released memory or took the slow path; num_ooms counts failures.
 *
 * Locking: one mutex per pool (pool_lock.h), held for the whole of every public call.
 * Every operation touches the shared address-ordered structure (free index,
 * neighbours for coalescing, page map, counters), so finer locks would have to
 * be taken together on nearly every path; the critical sections are short
 * (about a hundred nanoseconds), and PyTorch's caching allocator also uses one
 * mutex per device. Backends and the metadata heap's cache are only used
 * under it, so they need no locking of their own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "hot_path.h"
#include "pool_fork.h"
#include "pool_internal.h"
#include "stat.h"
#include "status.h"

#define GiB (UINT64_C(1) << 30)
#define MiB (UINT64_C(1) << 20)

static inline uint64_t round_up(uint64_t x, uint64_t align)
{
    return (x + align - 1) & ~(align - 1);
}

/* A capacity of requested bytes in whole pages: rounded up, but never past
 * the device's last whole page (a GPU's total is not always a multiple of
 * the 2 MiB page: an H100 reports 85,031,714,816 bytes, so "the whole
 * device", rounded up, would exceed it). 0 when requested is 0, exceeds the
 * device (compared before rounding, which could wrap near 2^64), or the
 * device holds no whole page. */
static uint64_t capacity_in_pages(uint64_t requested, uint64_t device, uint64_t page)
{
    if (requested == 0 || requested > device)
        return 0;
    uint64_t c = round_up(requested, page), whole = device / page * page;
    return c > whole ? whole : c;
}

void coop_config_default(coop_config *config)
{
    if (!config)
        return;
    *config = (coop_config){.backend = COOP_BACKEND_HOST, .use_vmm = true};
}

/* ---- Creation ---- */

/* Refuses size fields that would overflow when rounded up to pages (and
 * would then read as 0): every size must lie below 2^BLOCK_SIZE_BITS. */
static coop_status check_size_fields(const coop_config *c)
{
    const uint64_t limit = UINT64_C(1) << BLOCK_SIZE_BITS;
    const struct {
        const char *name;
        uint64_t value;
    } fields[] = {
        {"capacity", c->capacity},   {"va_size", c->va_size},     {"segment_size", c->segment_size},
        {"min_split", c->min_split}, {"page_size", c->page_size},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i].value >= limit)
            return coop_set_error(COOP_ERR_INVALID,
                                  "coop_pool_create: config.%s = %llu is too large: sizes must "
                                  "be below 2^%d (%llu) bytes",
                                  fields[i].name, (unsigned long long)fields[i].value,
                                  BLOCK_SIZE_BITS, (unsigned long long)limit);
    return COOP_OK;
}

/* A page size any pool can take: a power of two, at least a block's
 * alignment (the backend's granularity is checked where it is known). */
static bool is_page_size(uint64_t page_size)
{
    return page_size >= COOP_ALIGN && !(page_size & (page_size - 1));
}

static coop_status bad_page_size(uint64_t page_size)
{
    return coop_set_error(COOP_ERR_INVALID,
                          "coop_pool_create: config.page_size %llu must be a power of two of at "
                          "least %u bytes (0 = the backend's)",
                          (unsigned long long)page_size, COOP_ALIGN);
}

static coop_status make_backend(const coop_config *c, coop_backend **out)
{
    coop_backend *inner = NULL;
    coop_status st;
    switch (c->backend) {
    case COOP_BACKEND_HOST: {
        uint64_t ps = c->page_size ? c->page_size : 2 * MiB;
        /* Capacity 0: the 80 GiB device up to its last whole page, as a
         * CUDA device's capacity stops there (coop.h); the host backend
         * simulates whole pages only. */
        uint64_t device = c->capacity ? round_up(c->capacity, ps) : 80 * GiB / ps * ps;
        if (device == 0)
            return coop_set_error(COOP_ERR_INVALID,
                                  "coop_pool_create: config.page_size %llu is larger than the "
                                  "host backend's default device of %llu bytes (config.capacity "
                                  "0): set config.capacity, or a smaller page",
                                  (unsigned long long)ps, (unsigned long long)(80 * GiB));
        st = coop_backend_host_create(device, ps, c->use_vmm, &inner);
        break;
    }
    case COOP_BACKEND_CUDA:
        /* Defined in every build: backend_cuda_absent.c reports the missing support. */
        st = coop_backend_cuda_create(c->device, c->use_vmm, &inner);
        break;
    default:
        st = coop_set_error(COOP_ERR_INVALID,
                            "coop_pool_create: config.backend %d is not a backend "
                            "(COOP_BACKEND_HOST or COOP_BACKEND_CUDA)",
                            (int)c->backend);
    }
    if (st != COOP_OK)
        return st;
    return coop_backend_fault_create(inner, out);
}

/* rounded()'s note: two 20-digit numbers, WHAT and the words around them */
#define ROUNDED_NOTE_MAX 96

/* " (R in whole UNIT-byte WHAT)" in buf where the size given was
 * rounded up to r, else "": a message quotes the value the caller gave
 * first, which the caller can find, then the one that failed. */
static const char *rounded(uint64_t given, uint64_t r, uint64_t unit, const char *what,
                           char buf[ROUNDED_NOTE_MAX])
{
    buf[0] = '\0';
    if (r != given)
        snprintf(buf, ROUNDED_NOTE_MAX, " (%llu in whole %llu-byte %s)", (unsigned long long)r,
                 (unsigned long long)unit, what);
    return buf;
}

/* Fills in defaults against the backend and validates the result. */
static coop_status resolve_config(const coop_config *in, const coop_backend *be, coop_config *c)
{
    char note[ROUNDED_NOTE_MAX];
    *c = *in;
    c->use_vmm = in->use_vmm && be->has_vmm;
    if (!c->page_size)
        c->page_size = be->page_size;
    /* Only mapped pages need the backend's granularity: without VMM its page
     * is a default (segments, e.g. cuMemAlloc's, take any size), so a
     * segments pool does not depend on the device reporting one. */
    if (!is_page_size(c->page_size))
        return bad_page_size(c->page_size);
    if (c->use_vmm && c->page_size % be->page_size)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_pool_create: config.page_size %llu must be a multiple of "
                              "the %s backend's %llu-byte pages (with VMM)",
                              (unsigned long long)c->page_size, be->name,
                              (unsigned long long)be->page_size);
    c->capacity = capacity_in_pages(c->capacity ? c->capacity : be->device_memory,
                                    be->device_memory, c->page_size);
    if (!c->capacity)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_pool_create: config.capacity %llu exceeds the device's %llu "
                              "bytes (or the device holds no whole %llu-byte page)",
                              (unsigned long long)in->capacity,
                              (unsigned long long)be->device_memory,
                              (unsigned long long)c->page_size);
    if (!c->va_size)
        c->va_size = c->capacity > UINT64_MAX / 4 ? UINT64_MAX / 4 : 4 * c->capacity;
    c->va_size = round_up(c->va_size, c->page_size);
    /* Values below 2^56 (check_size_fields) can reach it in whole pages:
     * the message quotes the value given, which the caller can find, and
     * then the rounded one that failed. */
    uint64_t size_limit = UINT64_C(1) << BLOCK_SIZE_BITS;
    if (c->capacity >= size_limit)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_pool_create: config.capacity %llu is %llu in whole %llu-byte "
                              "pages: block sizes are limited to 2^%d bytes; choose less",
                              (unsigned long long)in->capacity, (unsigned long long)c->capacity,
                              (unsigned long long)c->page_size, BLOCK_SIZE_BITS);
    if (c->use_vmm && c->va_size >= size_limit && in->va_size)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_pool_create: config.va_size %llu is %llu in whole %llu-byte "
                              "pages: block sizes are limited to 2^%d bytes; choose less",
                              (unsigned long long)in->va_size, (unsigned long long)c->va_size,
                              (unsigned long long)c->page_size, BLOCK_SIZE_BITS);
    if (c->use_vmm && c->va_size >= size_limit)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_pool_create: config.va_size 0 (4 x the capacity %llu = %llu) "
                              "reaches 2^%d bytes, the limit of block sizes: set va_size below "
                              "it (at least the capacity) or choose a smaller capacity",
                              (unsigned long long)c->capacity, (unsigned long long)c->va_size,
                              BLOCK_SIZE_BITS);
    /* A smaller reservation could never hold the capacity: allocations would
     * fail with an out-of-memory error that blames the capacity. Refused
     * rather than silently raised, since the caller chose the value. */
    if (c->use_vmm && in->va_size && c->va_size < c->capacity)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_pool_create: config.va_size %llu%s is below the capacity %llu: "
                              "the reserved range must hold the capacity (0 = 4 x capacity)",
                              (unsigned long long)in->va_size,
                              rounded(in->va_size, c->va_size, c->page_size, "pages", note),
                              (unsigned long long)c->capacity);
    if (!c->segment_size)
        c->segment_size = 20 * MiB;
    c->segment_size = round_up(c->segment_size, c->page_size);
    if (!c->min_split)
        c->min_split = COOP_ALIGN;
    c->min_split = round_up(c->min_split, COOP_ALIGN);
    /* A remainder below min_split stays with the allocation (and is mapped
     * with it): above a page (a segment), one small allocation could take a
     * whole free block, larger than the capacity when the tiled range has
     * grown past it, and fail in an empty pool. */
    uint64_t split_limit = c->use_vmm ? c->page_size : c->segment_size;
    if (c->min_split > split_limit)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_pool_create: config.min_split %llu%s exceeds config.%s "
                              "%llu: a remainder below min_split stays with the allocation, so "
                              "it must be at most one %s",
                              (unsigned long long)in->min_split,
                              rounded(in->min_split, c->min_split, COOP_ALIGN, "units", note),
                              c->use_vmm ? "page_size" : "segment_size",
                              (unsigned long long)split_limit, c->use_vmm ? "page" : "segment");
    return COOP_OK;
}

static coop_status pool_create(const coop_config *config, coop_pool **out)
{
    coop_config defaults;
    if (!config) {
        coop_config_default(&defaults);
        config = &defaults;
    }
    coop_status st = check_size_fields(config);
    if (st != COOP_OK)
        return st;
    /* before the backend, which would refuse it in its own words */
    if (config->page_size && !is_page_size(config->page_size))
        return bad_page_size(config->page_size);
    /* coop_inject_fault refuses them too: a mask with a typo must not arm
     * fewer faults than the test expects without a word */
    if (config->fault_kinds & ~(unsigned)COOP_FAULT_ALL)
        return coop_set_error(COOP_ERR_INVALID,
                              "coop_pool_create: config.fault_kinds %#x has unknown bits %#x "
                              "(COOP_FAULT_* values only)",
                              config->fault_kinds, config->fault_kinds & ~(unsigned)COOP_FAULT_ALL);
    /* before the backend, whose creation would call the driver */
    if (config->backend == COOP_BACKEND_CUDA && (st = pool_fork_cuda_creatable()) != COOP_OK)
        return st;
    coop_backend *be;
    st = make_backend(config, &be);
    if (st != COOP_OK)
        return st;
    if (config->fault_nth)
        coop_backend_fault_arm(be, config->fault_kinds, config->fault_nth);
    coop_pool *pool = calloc(1, sizeof *pool);
    if (!pool) {
        coop_backend_destroy(be);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "out of host memory for a pool");
    }
    pool->backend = be;
    st = resolve_config(config, be, &pool->config);
    if (st == COOP_OK)
        st = meta_heap_init(&pool->heap);
    if (st != COOP_OK) {
        coop_backend_destroy(be);
        free(pool);
        return st;
    }
    coop_backend_fault_adopt_page(be, pool->config.page_size);
    arena_params p = {
        .vmm = pool->config.use_vmm,
        .page_size = pool->config.page_size,
        .va_size = pool->config.va_size,
        .segment_size = pool->config.segment_size,
        .capacity = pool->config.capacity,
        .min_split = pool->config.min_split,
    };
    st = arena_init(&pool->arena, be, &pool->heap, &p);
    if (st != COOP_OK) {
        /* the backend's message names the driver call and its error (a
         * CUDA reservation refused, and why): kept, after what it was for */
        if (st == COOP_ERR_BACKEND || st == COOP_ERR_NOMEM) {
            char why[COOP_ERROR_MAX - 80];
            coop_copy_last_error(why, sizeof why);
            coop_set_error(st, "cannot reserve %llu bytes of device address space: %s",
                           (unsigned long long)p.va_size, why[0] ? why : coop_strerror(st));
        }
        meta_heap_fini(&pool->heap);
        coop_backend_destroy(be);
        free(pool);
        return st;
    }
    arena_set_stream_idle(&pool->arena, pool_stream_idle, pool);
    pool_mutex_init(&pool->lock);
    atomic_init(&pool->walks, 0);
    pool->created_pid = (int)getpid();
    pool_fork_register(pool);
    *out = pool;
    return COOP_OK;
}

/* Under the call's name, whatever failed: a backend's refusal (a
 * reservation of the address space, the driver) names only itself. */
coop_status coop_pool_create(const coop_config *config, coop_pool **out)
{
    if (!out)
        return coop_set_error(COOP_ERR_INVALID, "coop_pool_create: out is NULL");
    *out = NULL;
    coop_status st = pool_create(config, out);
    return coop_error_in("coop_pool_create", st);
}

void coop_pool_destroy(coop_pool *pool)
{
    if (!pool)
        return;
    if (pool_walked_here(pool)) { /* the walk goes on over it */
        (void)pool_walk_reentry_error("coop_pool_destroy");
        return;
    }
    /* a forked child's copy: its backend makes no device call (the
     * events, pages and segments are the parent's), the rest is host
     * memory of this process, freed as usual */
    int created = pool->created_pid, forked = pool->forked_pid;
    pool_fork_unregister(pool);
    for (arena_segment *s = arena_first_segment(&pool->arena); s; s = s->next)
        for (arena_block *b = s->first; b; b = b->next)
            if (b->state != COOP_BLOCK_FREE && b->uses) {
                block_uses *u = b->uses;
                if (u->events)
                    for (size_t i = 0; i < u->num_streams; i++)
                        if (u->events[i] != NO_EVENT)
                            pool->backend->ops->event_destroy(pool->backend, u->events[i]);
                pool_uses_free(pool, u);
                b->uses = NULL;
            }
    pool_queues_free(pool);
    arena_fini(&pool->arena);
    meta_heap_fini(&pool->heap);
    coop_backend_destroy(pool->backend);
    free(pool);
    if (forked) /* what the backend's refusals said is not the news */
        coop_set_error(COOP_ERR_UNSUPPORTED,
                       "coop_pool_destroy: this CUDA pool was created in process %d; CUDA cannot "
                       "be used in a forked child (process %d): its host metadata is freed, its "
                       "device memory left to process %d",
                       created, forked, created);
}

void coop_pool_config(const coop_pool *pool, coop_config *out)
{
    if (!out)
        return;
    if (!pool) {
        *out = (coop_config){0};
        return;
    }
    coop_pool *p = (coop_pool *)pool;
    bool locked = pool_lock_read(p);
    *out = p->config;
    pool_unlock_read(p, locked);
}

/* ---- Allocation ---- */

static COOP_INLINE void count_alloc(coop_pool *pool, arena_block *b, size_t requested)
{
    b->requested = requested;
    stat_count_up(&pool->allocation);
    stat_count_up(&pool->active);
    stat_grow(&pool->allocated_bytes, (int64_t)b->size);
    stat_grow(&pool->active_bytes, (int64_t)b->size);
    stat_grow(&pool->requested_bytes, (int64_t)requested);
}

/* Whether b counts as live: allocated, or (with_pending) pending too. */
static inline bool counts_live(const arena_block *b, bool with_pending)
{
    return b->state == COOP_BLOCK_ALLOCATED || (with_pending && b->state == COOP_BLOCK_PENDING);
}

/* Bytes live blocks keep reserved (allocated ones, and pending ones if
 * with_pending): with VMM the pages they overlap, without it the segments
 * holding one. Walks every block (without VMM, every segment up to its
 * first live block, and not even that where no segment can be free):
 * for error messages only. */
static uint64_t footprint(const arena *a, bool with_pending)
{
    /* without VMM every segment but those with no block in use: all of
     * them where counters show there is none (no walk) */
    if (!a->params.vmm && with_pending && !arena_may_hold_free_segment(a))
        return a->reserved;
    uint64_t bytes = 0;
    for (const arena_segment *s = arena_first_segment(a); s; s = s->next) {
        if (!a->params.vmm) {
            for (const arena_block *b = s->first; b; b = b->next)
                if (counts_live(b, with_pending)) {
                    bytes += s->reserved;
                    break;
                }
            continue;
        }
        uint64_t ps = a->params.page_size;
        uint64_t counted_end = 0; /* pages below this offset are counted */
        for (const arena_block *b = s->first; b; b = b->next) {
            if (!counts_live(b, with_pending))
                continue;
            uint64_t lo = (b->addr - s->base) / ps * ps;
            uint64_t hi = (b->addr - s->base + b->size + ps - 1) / ps * ps;
            lo = lo < counted_end ? counted_end : lo;
            if (hi > lo)
                bytes += hi - lo;
            counted_end = hi > counted_end ? hi : counted_end;
        }
    }
    return bytes;
}

/* Free bytes in blocks usable on one other stream only, and how many of
 * them are mapped. */
typedef struct {
    uint64_t bytes, mapped;
} kept_bytes;

static void add_kept(kept_bytes *k, const arena *a, const arena_segment *s, const arena_block *b)
{
    k->bytes += b->size;
    k->mapped += arena_mapped_bytes_in(a, s, b->addr, b->size);
}

/* Whether a free neighbour of b is tagged with stream. */
static bool borders_free_of(const arena_block *b, coop_stream stream)
{
    return (b->prev && b->prev->state == COOP_BLOCK_FREE && b->prev->stream == stream) ||
           (b->next && b->next->state == COOP_BLOCK_FREE && b->next->stream == stream);
}

/* Whether a free neighbour of b is tagged with a stream, neither "any
 * stream" nor b's own. */
static bool borders_other_tag(const arena_block *b)
{
    const arena_block *side[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++)
        if (side[i] && side[i]->state == COOP_BLOCK_FREE && side[i]->stream != COOP_STREAM_ANY &&
            side[i]->stream != b->stream)
            return true;
    return false;
}

/* The free bytes usable on streams other than stream only, in two parts.
 * busy: tagged with a stream not seen finished (asked again here, without
 * waiting); its work may still use them. beside: tagged with a stream seen
 * finished, kept with that tag because "any stream" would merge the block
 * into a neighbouring free block of a stream not seen finished
 * (arena_retag_settled); *own counts those of them beside a free block of
 * stream itself, which its own work keeps apart. A finished stream's block
 * beside none is in busy: the attempt did not see its stream finished (its
 * question failed, or the stream finished since; pool_alloc_in_locked
 * does not settle), so it was not usable on stream.
 * Walks every block and asks each stream once (more past 16 of them): for
 * error messages only. */
static void kept_for_others(coop_pool *pool, coop_stream stream, kept_bytes *busy,
                            kept_bytes *beside, uint64_t *own)
{
    const arena *a = &pool->arena;
    *busy = *beside = (kept_bytes){0, 0};
    *own = 0;
    coop_stream asked[16];
    bool finished[16];
    size_t n = 0;
    for (const arena_segment *s = arena_first_segment(a); s; s = s->next)
        for (const arena_block *b = s->first; b; b = b->next) {
            if (b->state != COOP_BLOCK_FREE || b->stream == COOP_STREAM_ANY || b->stream == stream)
                continue;
            size_t k = 0;
            while (k < n && asked[k] != b->stream)
                k++;
            bool done;
            if (k < n) {
                done = finished[k];
            } else {
                done = pool_stream_seen_finished(pool, b->stream);
                if (n < sizeof asked / sizeof asked[0]) {
                    asked[n] = b->stream;
                    finished[n++] = done;
                }
            }
            if (done && borders_other_tag(b)) {
                add_kept(beside, a, s, b);
                if (borders_free_of(b, stream))
                    *own += b->size;
            } else {
                add_kept(busy, a, s, b);
            }
        }
}

/* Says what a user needs to act: the request, the capacity and what is
 * mapped and allocated, the headroom (capacity minus what live blocks keep
 * mapped: at most this much more can ever be mapped without freeing), and
 * the free space in blocks with its largest block (a request larger than
 * both the largest free block and the headroom cannot fit). from_arena: the
 * arena's last answer was this COOP_ERR_NOMEM; then a limit the headroom
 * cannot show is named: the device itself refused (memory used outside the
 * pool), in the backend's words, or the virtual range is used up. */
static coop_status oom_message(coop_pool *pool, size_t size, uint64_t rounded, coop_stream stream,
                               bool from_arena)
{
    const arena *a = &pool->arena;
    /* Not out of memory but out of knowledge: the cached memory of a
     * stream whose event could not be recorded or queried (no host memory,
     * the backend refused) stayed, and that failure is what the caller must
     * see (status and cause), not a capacity that was never reached. */
    if (from_arena && a->nomem == ARENA_NOMEM_CAPACITY && a->idle_failure != COOP_OK)
        return coop_set_error(a->idle_failure, "cannot allocate %zu bytes on stream %#lx: %s", size,
                              (unsigned long)stream, a->idle_failure_why);
    if (pool->quiet_oom) /* the caller writes its own */
        return COOP_ERR_NOMEM;
    uint64_t live = footprint(a, true);
    uint64_t headroom = a->params.capacity > live ? a->params.capacity - live : 0;
    /* Pending frees are neither allocated nor free: named, so that what is
     * mapped is accounted for (the headroom counts them as live). */
    char pending[128] = "";
    int64_t pending_bytes = pool->active_bytes.current - pool->allocated_bytes.current;
    if (pending_bytes > 0)
        snprintf(pending, sizeof pending,
                 ", pending frees %lld (freed blocks waiting for other streams' events)",
                 (long long)pending_bytes);
    /* Free space another stream keeps counts in the free bytes, the
     * largest block and the headroom, yet this stream cannot have it: said,
     * or a request below all three reads as if it fitted. */
    char others[256] = "", kept_beside[320] = "";
    kept_bytes kept = {0, 0}, beside = {0, 0};
    uint64_t own = 0;
    if (from_arena)
        kept_for_others(pool, stream, &kept, &beside, &own);
    if (kept.bytes)
        snprintf(others, sizeof others,
                 "; %llu of the free bytes (%llu mapped) are kept for other streams not seen "
                 "finished, usable on those streams only (coop_config.never_wait, or a stream "
                 "blocked on the host)",
                 (unsigned long long)kept.bytes, (unsigned long long)kept.mapped);
    /* A finished stream's block kept beside a busy one is not kept for a
     * busy stream, and the busy one may be this very stream: said apart,
     * last (a message cut at COOP_ERROR_MAX loses it, not the cause). */
    if (beside.bytes) {
        char whose[64] = "";
        if (own == beside.bytes)
            snprintf(whose, sizeof whose, " (this stream's own)");
        else if (own)
            snprintf(whose, sizeof whose, " (this stream's own for %llu of them)",
                     (unsigned long long)own);
        snprintf(kept_beside, sizeof kept_beside,
                 "; %llu of the free bytes (%llu mapped) are of streams seen finished, kept with "
                 "their stream beside a free block of a stream not seen finished%s, usable on "
                 "their streams only",
                 (unsigned long long)beside.bytes, (unsigned long long)beside.mapped, whose);
    }
    char why[512] = "";
    if (from_arena && a->nomem == ARENA_NOMEM_DEVICE) /* copied: formatted into the same buffer */
        coop_format_message(why, sizeof why,
                            "; the device is full (memory used outside this pool): %s",
                            coop_last_error());
    else if (from_arena && a->nomem == ARENA_NOMEM_VA) /* the headroom may well cover it */
        snprintf(why, sizeof why,
                 "; virtual range of config.va_size %llu exhausted: top %llu, request %llu, "
                 "no free block fits; raise config.va_size",
                 (unsigned long long)a->params.va_size,
                 (unsigned long long)arena_first_segment(a)->top, (unsigned long long)rounded);
    return coop_set_error(
        COOP_ERR_NOMEM,
        "out of memory: cannot allocate %zu bytes (%llu rounded) on stream %#lx: capacity %llu, "
        "mapped %llu, allocated %lld, headroom %llu (capacity minus the %llu bytes live blocks "
        "keep mapped), free %llu in %zu blocks, largest free block %llu%s%s%s%s",
        size, (unsigned long long)rounded, (unsigned long)stream,
        (unsigned long long)a->params.capacity, (unsigned long long)a->reserved,
        (long long)pool->allocated_bytes.current, (unsigned long long)headroom,
        (unsigned long long)live, (unsigned long long)a->counters.free_bytes, a->index.count,
        (unsigned long long)arena_largest_free(a), pending, others, why, kept_beside);
}

/* One more try of the out-of-memory path, after streams were settled: best
 * fit again, then, if its pages cannot be mapped, the best free block whose
 * pages can (arena_alloc_mapped), so that no stream is waited for while one
 * fits. */
static coop_status retry_alloc(coop_pool *pool, uint64_t rounded, coop_stream stream, bool high,
                               arena_block **b, bool *reclaimed)
{
    coop_status st = arena_alloc(&pool->arena, rounded, stream, high, b, reclaimed);
    if (st == COOP_ERR_NOMEM)
        st = arena_alloc_mapped(&pool->arena, rounded, stream, high, b, reclaimed);
    return st;
}

/* From arena_alloc's first answer on, when that was not a plain success:
 * the out-of-memory retry, the counts and the status. */
static void *malloc_finish(coop_pool *pool, size_t size, coop_stream stream, bool high,
                           coop_status st, arena_block *b, bool reclaimed, coop_status *status,
                           const char *fn)
{
    uint64_t rounded = round_up((uint64_t)size, COOP_ALIGN);
    if (st == COOP_ERR_NOMEM) {
        reclaimed = true;
        bool busy = pool_settle_streams(pool, false);
        st = retry_alloc(pool, rounded, stream, high, &b, &reclaimed);
        if (st == COOP_ERR_NOMEM && busy && !pool->config.never_wait) {
            pool_settle_streams(pool, true);
            st = retry_alloc(pool, rounded, stream, high, &b, &reclaimed);
        }
    }
    if (reclaimed)
        pool->num_alloc_retries++;
    if (st == COOP_ERR_NOMEM) {
        st = oom_message(pool, size, rounded, stream, true);
        pool->num_ooms += st == COOP_ERR_NOMEM;
    }
    if (st == COOP_OK)
        count_alloc(pool, b, size);
    else if (fn)
        st = coop_error_in(fn, st);
    if (status)
        *status = st;
    return b ? (void *)b->addr : NULL;
}

/* Size 0, bad arguments, a request above the capacity, and pending frees
 * to process first; then as malloc_locked. */
static void *malloc_checked(coop_pool *pool, size_t size, coop_stream stream, unsigned flags,
                            coop_status *status, const char *fn)
{
    coop_status st = COOP_OK;
    if (stream == COOP_STREAM_ANY) {
        st = reserved_stream("coop_malloc");
        goto out;
    }
    if (flags & ~(unsigned)COOP_ALLOC_HIGH) {
        st = coop_set_error(COOP_ERR_INVALID,
                            "coop_malloc: flags %#x has unknown bits %#x (COOP_ALLOC_LOW or "
                            "COOP_ALLOC_HIGH)",
                            flags, flags & ~(unsigned)COOP_ALLOC_HIGH);
        goto out;
    }
    if (size == 0) /* after the checks: misuse is reported at size 0 too */
        goto out;
    if ((uint64_t)size > pool->arena.params.capacity) {
        pool->num_ooms++;
        /* rounded as malloc would, short of wrapping: the top 511 sizes
         * round to 2^64, named by its largest multiple of 512 below */
        uint64_t rounded = (uint64_t)size > UINT64_MAX - (COOP_ALIGN - 1)
                               ? UINT64_MAX / COOP_ALIGN * COOP_ALIGN
                               : round_up((uint64_t)size, COOP_ALIGN);
        st = oom_message(pool, size, rounded, stream, false);
        goto out;
    }
    bool high = flags & COOP_ALLOC_HIGH, reclaimed = false;
    arena_block *b = NULL;
    if (pool->pending)
        pool_process_pending_locked(pool);
    st = arena_alloc(&pool->arena, round_up((uint64_t)size, COOP_ALIGN), stream, high, &b,
                     &reclaimed);
    return malloc_finish(pool, size, stream, high, st, b, reclaimed, status, fn);
out:
    if (fn)
        st = coop_error_in(fn, st);
    if (status)
        *status = st;
    return NULL;
}

/* The body of pool_malloc_locked, inlined into coop_malloc too: a call
 * between the two cost the split small malloc (coop replay's median on
 * bert) its own saves and restores. The common case (valid arguments,
 * nothing pending, the arena allocates at once) is one straight path; the
 * rest is out of line. */
static COOP_INLINE void *malloc_locked(coop_pool *pool, size_t size, coop_stream stream,
                                       unsigned flags, coop_status *status, const char *fn)
{
    if (__builtin_expect((uint64_t)size - 1 >= pool->arena.params.capacity ||
                             stream == COOP_STREAM_ANY || (flags & ~(unsigned)COOP_ALLOC_HIGH) ||
                             pool->pending,
                         0))
        return malloc_checked(pool, size, stream, flags, status, fn);
    arena_block *b = NULL;
    bool high = flags & COOP_ALLOC_HIGH, reclaimed = false;
    coop_status st = arena_alloc(&pool->arena, round_up((uint64_t)size, COOP_ALIGN), stream, high,
                                 &b, &reclaimed);
    if (__builtin_expect(st != COOP_OK || reclaimed, 0))
        return malloc_finish(pool, size, stream, high, st, b, reclaimed, status, fn);
    count_alloc(pool, b, size);
    if (status)
        *status = COOP_OK;
    return (void *)b->addr;
}

COOP_HOT void *pool_malloc_locked(coop_pool *pool, size_t size, coop_stream stream, unsigned flags,
                                  coop_status *status)
{
    return malloc_locked(pool, size, stream, flags, status, NULL); /* callers name their call */
}

COOP_HOT void *coop_malloc(coop_pool *pool, size_t size, coop_stream stream, unsigned flags,
                           coop_status *status)
{
    if (!pool) {
        coop_status st = null_argument("coop_malloc", "pool");
        if (status)
            *status = st;
        return NULL;
    }
    coop_status refused = pool_refuse_change(pool, "coop_malloc");
    if (refused != COOP_OK) {
        if (status)
            *status = refused;
        return NULL;
    }
    pool_lock(pool);
    void *p = malloc_locked(pool, size, stream, flags, status, "coop_malloc");
    pool_after_op_locked(pool, "malloc");
    pool_unlock(pool);
    return p;
}

coop_status pool_alloc_in_locked(coop_pool *pool, arena_block *free_block, uintptr_t addr,
                                 size_t size, coop_stream stream, arena_block **out)
{
    bool reclaimed = false;
    coop_status st = arena_alloc_in(&pool->arena, free_block, addr,
                                    round_up((uint64_t)size, COOP_ALIGN), stream, out, &reclaimed);
    if (reclaimed)
        pool->num_alloc_retries++;
    if (st == COOP_ERR_NOMEM) {
        st = oom_message(pool, size, round_up((uint64_t)size, COOP_ALIGN), stream, true);
        pool->num_ooms += st == COOP_ERR_NOMEM;
    }
    if (st == COOP_OK)
        count_alloc(pool, *out, size);
    return st;
}

/* ---- Free and record_stream ---- */

/* The error naming what ptr is, when it is not an allocated block's start
 * (b: the block the address map holds at ptr, or NULL). */
static coop_status not_allocated(coop_pool *pool, void *ptr, const char *op, arena_block *b)
{
    uintptr_t addr = (uintptr_t)ptr;
    if (b)
        return coop_set_error(COOP_ERR_DOUBLE_FREE, "%s(%p): already freed (block is %s)", op, ptr,
                              b->state == COOP_BLOCK_PENDING ? "pending on stream events" : "free");
    b = arena_find_containing(&pool->arena, addr);
    /* inside a pending block too: it is freed already, and its start (an
     * interior pointer's advice) would be refused as a double free */
    if (b && b->state != COOP_BLOCK_ALLOCATED)
        return coop_set_error(COOP_ERR_DOUBLE_FREE,
                              "%s(%p): lies in %s block [%#lx, +%llu): already freed", op, ptr,
                              b->state == COOP_BLOCK_PENDING ? "pending" : "free",
                              (unsigned long)b->addr, (unsigned long long)b->size);
    if (b)
        return coop_set_error(COOP_ERR_INTERIOR_PTR,
                              "%s(%p): %llu bytes inside the block at %#lx (%llu bytes); pass the "
                              "block's start",
                              op, ptr, (unsigned long long)(addr - b->addr), (unsigned long)b->addr,
                              (unsigned long long)b->size);
    return coop_set_error(COOP_ERR_FOREIGN_PTR, "%s(%p): not allocated by this pool", op, ptr);
}

/* The allocated block starting at ptr, or an error naming what ptr is.
 * Inline, with the errors out of line: every free passes here. */
static COOP_INLINE coop_status find_allocated(coop_pool *pool, void *ptr, const char *op,
                                              arena_block **out)
{
    arena_block *b = arena_lookup_to_release(&pool->arena, (uintptr_t)ptr);
    if (__builtin_expect(b && b->state == COOP_BLOCK_ALLOCATED, 1)) {
        *out = b;
        return COOP_OK;
    }
    return not_allocated(pool, ptr, op, b);
}

/* A coop_tensor's buffer given to coop_free or coop_record_stream: its
 * context owns it (it frees the block when it evicts or releases the
 * tensor, and expects the space free at once). */
static __attribute__((cold, noinline)) coop_status tensor_block(const char *op, const void *ptr)
{
    return coop_set_error(COOP_ERR_INVALID,
                          "%s: %p is the buffer of a coop_tensor: its coop_remat context owns it "
                          "(release the tensor instead)",
                          op, ptr);
}

/* The body of pool_free_locked, inlined into coop_free too (as
 * malloc_locked); from_user: coop_free's call, which a tensor's block
 * refuses (a constant where inlined). */
static COOP_INLINE coop_status free_locked(coop_pool *pool, void *ptr, arena_block **merged,
                                           bool from_user)
{
    if (merged)
        *merged = NULL;
    if (!ptr)
        return COOP_OK;
    arena_block *b = NULL;
    coop_status st = find_allocated(pool, ptr, "coop_free", &b);
    if (st != COOP_OK)
        return st;
    if (from_user && __builtin_expect(b->owner != NULL, 0))
        return tensor_block("coop_free", ptr);
    block_uses *u = b->uses;
    if (u) /* never fails: see pool_pending_add */
        pool_pending_add(pool, u);
    stat_count_down(&pool->allocation);
    stat_shrink(&pool->allocated_bytes, (int64_t)b->size);
    stat_shrink(&pool->requested_bytes, (int64_t)b->requested);
    if (u)
        return COOP_OK;
    stat_count_down(&pool->active);
    stat_shrink(&pool->active_bytes, (int64_t)b->size);
    arena_block *f = arena_release(&pool->arena, b, b->stream);
    if (merged)
        *merged = f;
    return COOP_OK;
}

COOP_HOT coop_status pool_free_locked(coop_pool *pool, void *ptr, arena_block **merged)
{
    return free_locked(pool, ptr, merged, false);
}

coop_status pool_free_user_locked(coop_pool *pool, void *ptr, arena_block **merged)
{
    return free_locked(pool, ptr, merged, true);
}

COOP_HOT coop_status coop_free(coop_pool *pool, void *ptr)
{
    if (!pool)
        return null_argument("coop_free", "pool");
    /* the block stays allocated in the child's copy: its memory is the
     * parent's, and nothing here may reuse it */
    coop_status refused = pool_refuse_change(pool, "coop_free");
    if (refused != COOP_OK)
        return refused;
    pool_lock(pool);
    coop_status st = free_locked(pool, ptr, NULL, true);
    pool_after_op_locked(pool, "free");
    pool_unlock(pool);
    return st;
}

static coop_status record_stream_locked(coop_pool *pool, void *ptr, coop_stream stream)
{
    if (stream == COOP_STREAM_ANY)
        return reserved_stream("coop_record_stream");
    arena_block *b = NULL;
    coop_status st = find_allocated(pool, ptr, "coop_record_stream", &b);
    if (st != COOP_OK)
        return st;
    if (b->owner)
        return tensor_block("coop_record_stream", ptr);
    if (stream == b->stream)
        return COOP_OK;
    block_uses *u = b->uses;
    if (block_uses_has(u, stream))
        return COOP_OK;
    if (!u) {
        u = meta_zalloc(&pool->heap, sizeof *u);
        if (!u)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory to record a stream use");
        u->block = b;
        b->uses = u;
    }
    if (u->num_streams == u->cap_streams) {
        size_t cap = u->cap_streams ? 2 * u->cap_streams : 2;
        coop_stream *s = meta_alloc(&pool->heap, cap * sizeof *s);
        coop_event *slots = s ? meta_zalloc(&pool->heap, cap * sizeof *slots) : NULL;
        if (!slots) {
            if (s)
                meta_free(&pool->heap, s, cap * sizeof *s);
            if (u->num_streams == 0) {
                b->uses = NULL;
                pool_uses_free(pool, u);
            }
            return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory to record a stream use");
        }
        for (size_t i = 0; i < u->num_streams; i++)
            s[i] = u->streams[i];
        meta_free(&pool->heap, u->streams, u->cap_streams * sizeof *u->streams);
        meta_free(&pool->heap, u->slots, u->cap_streams * sizeof *u->slots);
        u->streams = s;
        u->slots = slots;
        u->cap_streams = cap;
    }
    u->streams[u->num_streams++] = stream;
    return COOP_OK;
}

coop_status coop_record_stream(coop_pool *pool, void *ptr, coop_stream stream)
{
    if (!pool)
        return null_argument("coop_record_stream", "pool");
    coop_status refused = pool_refuse_change(pool, "coop_record_stream");
    if (refused != COOP_OK)
        return refused;
    pool_lock(pool);
    coop_status st = record_stream_locked(pool, ptr, stream);
    pool_after_op_locked(pool, "record_stream");
    pool_unlock(pool);
    return coop_error_in("coop_record_stream", st);
}

/* ---- Cache and capacity ---- */

/* A release the backend refused (an unmap or segment free), under the
 * call's name: the backend's message alone does not say which call failed.
 * stays: the capacity kept, for coop_set_capacity (0: not said). */
static coop_status release_failed(coop_status st, const char *fn, uint64_t stays)
{
    char why[512];
    coop_copy_last_error(why, sizeof why);
    if (!stays)
        return coop_set_error(st, "%s: cannot release cached memory: %s", fn, why);
    return coop_set_error(st, "%s: cannot release cached memory: %s; capacity stays %llu", fn, why,
                          (unsigned long long)stays);
}

/* Completes what can be completed (waiting for busy streams unless
 * never_wait), then retags the free blocks of every idle stream "any stream"
 * (their last uses are finished) and coalesces them, so free space split
 * only by stream tags becomes one block, and releases cached memory:
 * unmappable pages (VMM) or wholly free segments. A stream with work
 * outstanding that was not waited for keeps its tags (its blocks stay
 * reusable on it). */
coop_status coop_empty_cache(coop_pool *pool)
{
    if (!pool)
        return null_argument("coop_empty_cache", "pool");
    coop_status refused = pool_refuse_change(pool, "coop_empty_cache");
    if (refused != COOP_OK)
        return refused;
    pool_lock(pool);
    pool_settle_streams(pool, !pool->config.never_wait);
    uint64_t released;
    coop_status st = arena_reclaim(&pool->arena, UINT64_MAX, 0, 0, &released);
    if (st != COOP_OK)
        st = release_failed(st, "coop_empty_cache", 0);
    pool_after_op_locked(pool, "empty_cache");
    pool_unlock(pool);
    return coop_error_in("coop_empty_cache", st);
}

/* coop_set_capacity's refusal when c is below what stays mapped, by cause:
 * the user frees live blocks, but waits for streams (or stops blocking
 * them) for pending frees, and cached says why the free space cached is
 * still mapped. */
static coop_status capacity_kept(const arena *a, uint64_t c, const char *cached)
{
    uint64_t allocated = footprint(a, false), kept = footprint(a, true);
    return coop_set_error(
        COOP_ERR_NOMEM,
        "coop_set_capacity: capacity %llu is below the %llu bytes still mapped: live blocks "
        "keep %llu mapped, pending frees (blocks waiting for other streams' events) %llu more, "
        "and %llu are free space cached%s; capacity stays %llu",
        (unsigned long long)c, (unsigned long long)a->reserved, (unsigned long long)allocated,
        (unsigned long long)(kept - allocated), (unsigned long long)(a->reserved - kept), cached,
        (unsigned long long)a->params.capacity);
}

/* coop_set_capacity below the mapped bytes: completes the pending frees
 * whose events are done and releases cached memory down to c, or says by
 * cause what stays mapped above it. */
static coop_status lower_capacity_locked(coop_pool *pool, uint64_t c)
{
    arena *a = &pool->arena;
    pool_process_pending_locked(pool);
    /* Releasing never frees what live blocks and pending frees keep
     * mapped: below that, refused with the cache kept, as a malloc that
     * cannot fit keeps it (a refused call changes nothing). */
    if (c < footprint(a, true))
        return capacity_kept(a, c,
                             ", not released: the live blocks and pending frees alone exceed "
                             "the capacity");
    uint64_t released;
    coop_status st = arena_reclaim(a, a->reserved - c, 0, 0, &released);
    if (st != COOP_OK)
        return release_failed(st, "coop_set_capacity", a->params.capacity);
    if (c >= a->reserved)
        return COOP_OK;
    if (a->idle_failure != COOP_OK)
        return coop_set_error(a->idle_failure,
                              "coop_set_capacity: capacity %llu is below the %llu bytes still "
                              "mapped: %s; capacity stays %llu",
                              (unsigned long long)c, (unsigned long long)a->reserved,
                              a->idle_failure_why, (unsigned long long)a->params.capacity);
    /* the rest is cached for streams reclaim skipped, because queued work
     * may still use it */
    return capacity_kept(a, c,
                         " for streams not seen finished (coop_config.never_wait, or a stream "
                         "blocked on the host)");
}

coop_status coop_set_capacity(coop_pool *pool, uint64_t capacity)
{
    if (!pool)
        return null_argument("coop_set_capacity", "pool");
    coop_status refused = pool_refuse_change(pool, "coop_set_capacity");
    if (refused != COOP_OK)
        return refused;
    pool_lock(pool);
    coop_status st = COOP_OK;
    arena *a = &pool->arena;
    uint64_t device = pool->backend->device_memory;
    uint64_t c = capacity_in_pages(capacity, device, a->params.page_size);
    if (c == 0) {
        st = coop_set_error(COOP_ERR_INVALID,
                            "coop_set_capacity: capacity %llu must be between 1 and the device's "
                            "%llu bytes; capacity stays %llu",
                            (unsigned long long)capacity, (unsigned long long)device,
                            (unsigned long long)a->params.capacity);
    } else if (a->params.vmm && c > a->params.va_size) {
        /* The pages must lie in the one range reserved at creation:
         * coop_pool_create refuses a va_size below the capacity for the same
         * reason (allocations would fail blaming a capacity that is not the
         * limit). The range cannot grow in place. */
        st = coop_set_error(COOP_ERR_INVALID,
                            "coop_set_capacity: capacity %llu exceeds the pool's virtual range "
                            "(config.va_size %llu, fixed at creation; create the pool with a "
                            "larger va_size); capacity stays %llu",
                            (unsigned long long)c, (unsigned long long)a->params.va_size,
                            (unsigned long long)a->params.capacity);
    } else if (c < a->reserved) {
        st = lower_capacity_locked(pool, c);
    }
    if (st == COOP_OK)
        a->params.capacity = pool->config.capacity = c;
    pool_after_op_locked(pool, "set_capacity");
    pool_unlock(pool);
    return coop_error_in("coop_set_capacity", st);
}

/* ---- Test controls ---- */

static coop_status host_hold(coop_pool *pool, const char *fn, coop_stream stream, bool hold,
                             bool busy)
{
    if (!pool)
        return null_argument(fn, "pool");
    coop_status refused = pool_refuse_change(pool, fn);
    if (refused != COOP_OK)
        return refused;
    pool_lock(pool);
    coop_status st;
    if (!coop_backend_is_host(coop_backend_fault_inner(pool->backend)))
        st = coop_set_error(COOP_ERR_UNSUPPORTED, "%s: the pool's backend is %s", fn,
                            pool->backend->name);
    else if (stream == COOP_STREAM_ANY)
        st = reserved_stream(fn);
    else
        st = pool->backend->ops->hold_stream(pool->backend, stream, hold, busy);
    pool_unlock(pool);
    return coop_error_in(fn, st);
}

coop_status coop_host_hold_stream(coop_pool *pool, coop_stream stream, bool hold)
{
    return host_hold(pool, "coop_host_hold_stream", stream, hold, false);
}

coop_status coop_host_busy_stream(coop_pool *pool, coop_stream stream)
{
    return host_hold(pool, "coop_host_busy_stream", stream, true, true);
}

coop_status coop_inject_fault(coop_pool *pool, unsigned kinds, uint64_t nth)
{
    if (!pool)
        return null_argument("coop_inject_fault", "pool");
    coop_status refused = pool_refuse_change(pool, "coop_inject_fault");
    if (refused != COOP_OK)
        return refused;
    if (kinds & ~(unsigned)COOP_FAULT_ALL)
        return coop_set_error(COOP_ERR_INVALID, "coop_inject_fault: unknown kinds %#x", kinds);
    pool_lock(pool);
    coop_backend_fault_arm(pool->backend, kinds, nth);
    pool_unlock(pool);
    return COOP_OK;
}

uint64_t coop_backend_calls(coop_pool *pool, unsigned kinds)
{
    if (!pool)
        return 0;
    bool locked = pool_lock_read(pool);
    uint64_t n = coop_backend_fault_calls(pool->backend, kinds);
    pool_unlock_read(pool, locked);
    return n;
}
