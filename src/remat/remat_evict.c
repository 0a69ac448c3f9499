/*
 * Eviction for the remat API: policies, Coop's window, placement
 * (remat_internal.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "growable.h"
#include "remat/coop_cost.h"
#include "remat/remat_internal.h"
#include "status.h"

#define REMAT_DIRTY_BATCH 128 /* tensors touched before an allocation syncs them */

/* The stream the context places its tensors on (coop_record_stream refuses
 * their buffers, so they are used on it alone). */
#define REMAT_STREAM ((coop_stream)0)

/* Whether b is a free block the context's allocations can take and its
 * evicted blocks merge with: tagged its stream or any stream. Others are a
 * busy stream's (the out-of-memory path that precedes every search retags
 * those of finished streams): pending until that stream is seen finished. */
static inline bool free_for_context(const arena_block *b)
{
    return b->state == COOP_BLOCK_FREE && arena_tags_mergeable(b->stream, REMAT_STREAM);
}

/* A storage nobody holds (no handle: its tensor and every view released)
 * is evictable whatever its flags; one a view still names is not, unless
 * created evictable, even once its base handle is released (a constant
 * seen through a view, which its producer may not be able to recompute). */
bool remat_evictable(const coop_tensor *t)
{
    return t->base == t && t->ptr && !t->pins &&
           ((t->flags & COOP_TENSOR_EVICTABLE) || !t->handles);
}

static void resident_unlink(coop_remat *r, coop_tensor *t)
{
    if (t->prev_resident)
        t->prev_resident->next_resident = t->next_resident;
    else
        r->resident = t->next_resident;
    r->num_resident--;
    if (t->next_resident)
        t->next_resident->prev_resident = t->prev_resident;
    t->prev_resident = t->next_resident = NULL;
}

void remat_make_resident(coop_remat *r, coop_tensor *t, void *ptr)
{
    t->ptr = ptr;
    t->resident_seq = ++r->resident_seq; /* the resident list's head */
    remat_touch(r, t);
    t->prev_resident = NULL;
    t->next_resident = r->resident;
    if (r->resident)
        r->resident->prev_resident = t;
    r->resident = t;
    r->num_resident++;
    r->stats.resident_bytes += t->size;
    if (t->uf != REMAT_NONE) { /* leaves its class: the class loses its cost, is cut */
        remat_comp_forget(t);  /* and its component may split */
        uf_leave(&r->uf, t->uf, (int64_t)t->cost);
        t->uf = REMAT_NONE;
        remat_eq_forget_around(t); /* t no longer counts in its neighbours' c_eq */
    } else {
        /* a new tensor (or one whose class could not be made) counts in
         * nobody's c_eq: its neighbours' caches stay */
        t->eq_valid = false;
    }
}

void remat_hand_over(coop_remat *r, coop_tensor *from, coop_tensor *to)
{
    void *buf = from->ptr;
    pool_lock(r->pool);
    /* the block stays allocated and in the breaker index if it was; from
     * leaves the evictable set; to is looked at again (make_resident
     * touches it) */
    to->breaking = from->breaking;
    from->breaking = false;
    remat_search_index_forget_locked(r, from);
    resident_unlink(r, from);
    from->ptr = NULL;
    r->stats.resident_bytes -= from->size;
    remat_make_resident(r, to, buf);
    arena_lookup(pool_arena(r->pool), (uintptr_t)buf)->owner = to;
    pool_unlock(r->pool);
}

/* Evicted tensors adjacent to t (inputs, children) in union-find classes. */
static void join_evicted_neighbours(coop_remat *r, coop_tensor *t)
{
    remat_comp_forget(t);      /* no-op: a tensor with a buffer has a stale label */
    remat_eq_forget_around(t); /* t now counts in its neighbours' c_eq */
    t->uf = uf_make(&r->uf, (int64_t)t->cost);
    if (t->uf == REMAT_NONE)
        return; /* not reached: a node is kept for every resident tensor
                 * (num_resident); else no class, its cost counted by none */
    for (size_t i = 0; i < remat_num_neighbours(t); i++) {
        coop_tensor *n = remat_neighbour(t, i);
        if (n != t && remat_is_evicted(n)) { /* their components merge with t */
            uf_merge(&r->uf, n->uf, t->uf);
            remat_comp_forget(n);
        }
    }
}

void remat_mark_evicted(coop_remat *r, coop_tensor *t)
{
    join_evicted_neighbours(r, t);
}

int remat_reserve_nodes(coop_remat *r, size_t n)
{
    size_t need = n + r->num_resident;
    return need >= UINT32_MAX || uf_reserve(&r->uf, (uint32_t)need) ? -1 : 0;
}

/* Room for n more slots in r->victims: 0, or -1 out of host memory. */
static int reserve_victims(coop_remat *r, size_t n)
{
    return GROW_ARRAY(r->victims, r->cap_victims, r->num_victims + n, 16);
}

/* Room for n more evictions: their slots in r->victims, so that each can be
 * told to the owner, and their union-find nodes, so that each joins its
 * evicted neighbours' class (beyond those kept for the resident tensors).
 * 0, or -1 when host memory ran out (then nothing has been evicted: callers
 * reserve before the first eviction). */
int remat_reserve_evictions(coop_remat *r, size_t n)
{
    return remat_reserve_nodes(r, n) || reserve_victims(r, n) ? -1 : 0;
}

arena_block *remat_evict_locked(coop_remat *r, coop_tensor *t)
{
    arena_block *merged = NULL;
    remat_search_index_forget_locked(r, t); /* both name resident tensors only */
    pool_free_locked(r->pool, t->ptr, &merged);
    t->ptr = NULL;
    resident_unlink(r, t);
    r->stats.resident_bytes -= t->size;
    join_evicted_neighbours(r, t);
    /* searches reserve first (remat_reserve_evictions); a release, which discards
     * the list (drop_if_unused), may find no room: nobody is to be told */
    if (reserve_victims(r, 1))
        return merged;
    r->victims[r->num_victims++] = t;
    return merged;
}

void remat_restore_resident_seq(coop_remat *r, coop_tensor *t, uint64_t seq)
{
    resident_unlink(r, t);
    t->resident_seq = seq;
    /* the list runs from the newest: t goes before the first older one */
    coop_tensor *prev = NULL, *next = r->resident;
    while (next && next->resident_seq > seq) {
        prev = next;
        next = next->next_resident;
    }
    t->prev_resident = prev;
    t->next_resident = next;
    if (prev)
        prev->next_resident = t;
    else
        r->resident = t;
    if (next)
        next->prev_resident = t;
    r->num_resident++;
}

void remat_discard_locked(coop_remat *r, coop_tensor *t)
{
    remat_search_index_drop_locked(r, t); /* reads t's block while it is there */
    if (!t->ptr)
        return;
    pool_free_locked(r->pool, t->ptr, NULL);
    t->ptr = NULL;
    resident_unlink(r, t);
    r->stats.resident_bytes -= t->size;
}

void remat_notify_victims(coop_remat *r)
{
    r->in_callback++; /* the context's calls refuse to run from on_evict */
    for (size_t i = 0; i < r->num_victims; i++)
        if (r->cfg.on_evict)
            r->cfg.on_evict(r->victims[i], r->cfg.user);
    r->in_callback--;
    r->num_victims = 0;
}

static uint64_t adjacent_free(coop_remat *r, const coop_tensor *t)
{
    arena_block *b = arena_lookup(pool_arena(r->pool), (uintptr_t)t->ptr);
    uint64_t bytes = 0;
    /* a busy stream's free block does not merge with t's: no room */
    if (b && b->prev && free_for_context(b->prev))
        bytes += b->prev->size;
    if (b && b->next && free_for_context(b->next))
        bytes += b->next->size;
    return bytes;
}

/* Argmin policies' score (lower: evict first). */
static double score(coop_remat *r, coop_tensor *t)
{
    double stale = (double)(r->clock - t->last_access);
    double m = (double)t->size;
    r->stats.heuristic_evals++;
    switch (r->cfg.policy) {
    case COOP_REMAT_LRU:
        return (double)t->last_access;
    case COOP_REMAT_SIZE:
        return 1.0 / m;
    case COOP_REMAT_DTR_LOCAL:
        return stale > 0 ? (double)t->cost / (m * stale) : INFINITY;
    case COOP_REMAT_DTE:
        return stale > 0 ? (double)t->cost / ((m + (double)adjacent_free(r, t)) * stale) : INFINITY;
    case COOP_REMAT_DTR:
    default:
        return stale > 0 ? (double)remat_eq_compute(r, t) / (m * stale) : INFINITY;
    }
}

/* Whether a window may take the block of tensor t: the context's own
 * evictable tensor. Another context's tensor on the same pool (its
 * records, pins and callbacks are that context's) breaks windows, as any
 * other user's block does. */
static inline bool window_may_evict(const coop_remat *r, const coop_tensor *t)
{
    return t->owner == r && remat_evictable(t);
}

/* COOP_REMAT_COOP's window cost (window_cost) as far as window_search_lazy
 * needs it: c_live's walks stop once the cost passes limit
 * (remat_live_compute_upto). Counted as an evaluation either way. */
static double window_cost_upto(void *owner, const arena_block *b, void *ctx, double limit,
                               bool *complete)
{
    (void)b;
    coop_remat *r = ctx;
    coop_tensor *t = owner;
    *complete = true;
    if (!window_may_evict(r, t))
        return WINDOW_BLOCKED;
    r->stats.heuristic_evals++;
    double weight = coop_cost_weight(t->remats, coop_cost_staleness(r->clock, t->last_access));
    return (double)remat_live_compute_upto(r, t, weight, limit, complete) * weight;
}

/* Window cost of a block's tensor: COOP_REMAT_COOP c_live (remat_live.c)
 * x (1 + 0.1 x remats) / staleness (coop_cost.h), COOP_REMAT_COOP_COMP the
 * same with c_comp, COOP_REMAT_COOP_EQ c_eq / staleness; the search
 * divides their sum by the window's bytes. */
static double window_cost(void *owner, const arena_block *b, void *ctx)
{
    coop_remat *r = ctx;
    if (r->cfg.policy == COOP_REMAT_COOP) { /* c_live walked in full */
        bool complete;
        return window_cost_upto(owner, b, ctx, INFINITY, &complete);
    }
    coop_tensor *t = owner;
    if (!window_may_evict(r, t))
        return WINDOW_BLOCKED;
    r->stats.heuristic_evals++;
    uint64_t stale = coop_cost_staleness(r->clock, t->last_access);
    if (r->cfg.policy == COOP_REMAT_COOP_EQ)
        return (double)remat_eq_compute(r, t) / (double)stale;
    return (double)remat_component_compute(r, t) * coop_cost_weight(t->remats, stale);
}

/* window_cost without the neighbourhood walk: a lower bound (c_eq and
 * c_comp are at least the tensor's own cost: classes and costs are never
 * negative; c_live at least its own cost plus its evicted inputs and held
 * evicted children, remat_live_bound), or window_cost itself when the
 * tensor's c_eq is cached (exact; for COOP_REMAT_COOP_COMP only where c_comp
 * is that c_eq: no class cut) or, for COOP_REMAT_COOP, when it has no
 * evicted neighbour (c_live is its cost). The same expressions as
 * window_cost, so an exact bound is the very value the cost would return;
 * reading it counts as an evaluation. */
static double window_bound(void *owner, const arena_block *b, void *ctx, bool *exact)
{
    (void)b;
    coop_remat *r = ctx;
    coop_tensor *t = owner;
    if (!window_may_evict(r, t))
        return WINDOW_BLOCKED;
    uint64_t stale = coop_cost_staleness(r->clock, t->last_access);
    if (r->cfg.policy == COOP_REMAT_COOP) {
        int64_t live = remat_live_bound(r, t, exact);
        if (*exact)
            r->stats.heuristic_evals++;
        return (double)live * coop_cost_weight(t->remats, stale);
    }
    int64_t eq;
    bool cached = !r->eq_cache_off && remat_eq_cached(r, t, &eq);
    if (r->cfg.policy == COOP_REMAT_COOP_EQ) {
        if (cached) {
            r->stats.heuristic_evals++;
            *exact = true;
            return (double)eq / (double)stale;
        }
        return (double)t->cost / (double)stale;
    }
    double weight = coop_cost_weight(t->remats, stale);
    if (cached && remat_classes_uncut(r, t)) {
        r->stats.heuristic_evals++;
        *exact = true;
        return (double)eq * weight;
    }
    return (double)t->cost * weight;
}

/* Whether c goes before best (NULL: none yet): the lower score, ties to
 * the tensor made resident earlier (the last of the resident list's scan),
 * so the argmin does not depend on the order tensors are scored in. LRU
 * compares the last accesses themselves: its score, the clock as a double,
 * is exact only up to 2^53 ns, and above that accesses a few ns apart tied
 * (and went to the tensor made resident earlier, however recently used). */
static inline bool scores_before(const coop_remat *r, const coop_tensor *c, double s,
                                 const coop_tensor *best, double best_score)
{
    if (!best)
        return true;
    if (r->cfg.policy == COOP_REMAT_LRU) {
        if (c->last_access != best->last_access)
            return c->last_access < best->last_access;
    } else if (s != best_score) {
        return s < best_score; /* never a score that is not a number */
    }
    return c->resident_seq < best->resident_seq;
}

/* The argmin over the evictable set (remat_search_index.c). */
static coop_tensor *argmin_set(coop_remat *r)
{
    coop_tensor *best = NULL;
    double best_score = INFINITY;
    for (size_t i = 0; i < r->num_cands; i++) {
        coop_tensor *c = r->cands[i];
        double s = score(r, c);
        if (scores_before(r, c, s, best, best_score)) {
            best = c;
            best_score = s;
        }
    }
    return best;
}

/* The same over every resident tensor (no evictable set). */
static coop_tensor *argmin_resident(coop_remat *r)
{
    coop_tensor *best = NULL;
    double best_score = INFINITY;
    for (coop_tensor *c = r->resident; c; c = c->next_resident) {
        if (!remat_evictable(c))
            continue;
        double s = score(r, c);
        if (scores_before(r, c, s, best, best_score)) {
            best = c;
            best_score = s;
        }
    }
    return best;
}

static unsigned placement(const coop_remat *r, const coop_tensor *t)
{
    if (t->flags & COOP_TENSOR_CHEAP)
        return COOP_ALLOC_HIGH;
    if (r->cfg.cheap_threshold < 0)
        return COOP_ALLOC_LOW;
    return (double)t->cost / (double)t->size < r->cfg.cheap_threshold ? COOP_ALLOC_HIGH
                                                                      : COOP_ALLOC_LOW;
}

/* Whether b is space evicting could hand the context: a free block it can
 * take, or the block of one of its tensors a window may evict. */
static inline bool block_could_go(const coop_remat *r, const arena_block *b)
{
    return free_for_context(b) ||
           (b->state == COOP_BLOCK_ALLOCATED && b->owner && window_may_evict(r, b->owner));
}

/* A segment every block of which is free or the context's evictable
 * tensor, and what evicting its tensors costs per byte it gives back. */
typedef struct segment_victim {
    arena_segment *seg;
    double cost_per_byte; /* its blocks' window costs summed, over its bytes */
    size_t tensors;
} segment_victim;

static int segment_victims_order(const void *x, const void *y)
{
    const segment_victim *a = x, *b = y;
    if (a->cost_per_byte != b->cost_per_byte)
        return a->cost_per_byte < b->cost_per_byte ? -1 : 1;
    return a->seg->base < b->seg->base ? -1 : a->seg->base > b->seg->base; /* total order */
}

/* Whether every block of seg is free for the context or one a window may
 * take, counting its tensors (no cost read: a pool where no segment can go
 * evicts none, and its searches count no more evaluations than before). A
 * busy stream's free block keeps its segment: the pool gives back only
 * segments whose free blocks' streams have finished. */
static bool segment_evictable(coop_remat *r, arena_segment *seg, segment_victim *v)
{
    *v = (segment_victim){.seg = seg};
    for (arena_block *b = seg->first; b; b = b->next) {
        if (!block_could_go(r, b))
            return false;
        v->tensors += !free_for_context(b);
    }
    return v->tensors > 0;
}

/* What evicting v's tensors costs per byte of its segment: their window
 * costs summed, as a window of the whole segment would. */
static void segment_cost(coop_remat *r, segment_victim *v)
{
    double sum = 0;
    for (arena_block *b = v->seg->first; b; b = b->next)
        if (b->state == COOP_BLOCK_ALLOCATED)
            sum += window_cost(b->owner, b, r);
    v->cost_per_byte = sum / (double)v->seg->reserved;
}

/* The bytes the pool takes for t: its size rounded up to COOP_ALIGN (t is
 * at most the capacity, remat_alloc's first check, so this cannot wrap). */
static inline uint64_t placed_bytes(const coop_tensor *t)
{
    return (t->size + COOP_ALIGN - 1) / COOP_ALIGN * COOP_ALIGN;
}

/* Evicts t to make room (pool lock held), counted in the statistics;
 * returns the free block now covering its range. */
static arena_block *evict_for_room(coop_remat *r, coop_tensor *t)
{
    r->stats.evictions++;
    return remat_evict_locked(r, t);
}

/* Asks the pool to place t (pool lock held). NULL with *st COOP_ERR_NOMEM
 * when it has no room (evicting more may help), else with the pool's
 * failure (metadata or backend: evicting more would not) in a message
 * naming the call and t. */
static void *try_place(coop_remat *r, coop_tensor *t, unsigned flags, coop_status *st)
{
    void *ptr = pool_malloc_locked(r->pool, t->size, 0, flags, st);
    if (!ptr && *st != COOP_ERR_NOMEM)
        *st = remat_placing_failed(r, t, *st);
    return ptr;
}

/* t for a message (remat_describe): recomputing when materialize runs. */
static const char *describe(const coop_remat *r, const coop_tensor *t, char who[REMAT_DESCRIBE_MAX])
{
    return remat_describe(r, t, r->num_frames > 0, who, REMAT_DESCRIBE_MAX);
}

/* No host memory to list (or reserve the evictions of) the n tensors of
 * the window chosen for t: nothing evicted. */
static coop_status window_list_failed(const coop_remat *r, const coop_tensor *t, size_t n)
{
    char who[REMAT_DESCRIBE_MAX];
    return remat_host_nomem(r, "listing the %zu tensors of a window to evict for %s", n,
                            describe(r, t, who));
}

/* No host memory to reserve an argmin eviction for t, after evicted
 * others (which stay evicted, their owner told). */
static coop_status argmin_eviction_failed(const coop_remat *r, const coop_tensor *t, size_t evicted)
{
    char who[REMAT_DESCRIBE_MAX];
    if (!evicted)
        return remat_host_nomem(r, "evicting for %s", describe(r, t, who));
    return remat_host_nomem(r, "evicting for %s (%zu evicted before, which stay evicted)",
                            describe(r, t, who), evicted);
}

/* A pool without VMM holds its blocks in separate segments, and a window
 * cannot span two of them: a request larger than any segment's windows finds
 * none, although evicting every tensor of some segments would let the pool
 * give those back (free and idle) and grow a segment of the request's size,
 * as an argmin policy ends up doing one tensor at a time. So: the segments
 * whose blocks are all free or evictable, cheapest per byte first, each
 * evicted whole, until the allocation fits. Nothing is evicted when even all
 * of them would leave too little room under the capacity. One pass over the
 * blocks, as the window search. NULL with *st as alloc_in_window's. */
static void *alloc_in_segments(coop_remat *r, coop_tensor *t, unsigned flags, coop_status *st)
{
    arena *a = pool_arena(r->pool);
    uint64_t ps = a->params.page_size;
    uint64_t need = (t->size + ps - 1) / ps * ps; /* the smallest segment that holds t */
    uint64_t room = a->params.capacity > a->reserved ? a->params.capacity - a->reserved : 0;
    size_t n = 0, cap = 0, tensors = 0;
    segment_victim *v = NULL;
    for (arena_segment *seg = arena_first_segment(a); seg; seg = seg->next) {
        segment_victim c;
        if (!segment_evictable(r, seg, &c))
            continue;
        if (GROW_ARRAY(v, cap, n + 1, 16)) {
            free(v);
            char who[REMAT_DESCRIBE_MAX];
            *st = remat_host_nomem(r, "listing the segments to evict for %s", describe(r, t, who));
            return NULL;
        }
        v[n++] = c;
        room += seg->reserved;
        tensors += c.tensors;
    }
    coop_tensor **list = NULL;
    if (room < need || !n) { /* *st stays COOP_ERR_NOMEM: no room */
        free(v);
        return NULL;
    }
    /* host memory first, the new segment's included: evictions cannot be
     * undone, and a refused call must change nothing */
    if (remat_reserve_evictions(r, tensors) || !(list = malloc(tensors * sizeof *list)) ||
        arena_reserve_segment(a) != COOP_OK) {
        free(list);
        free(v);
        char who[REMAT_DESCRIBE_MAX];
        *st = remat_host_nomem(r, "listing the %zu tensors of %zu segments to evict for %s",
                               tensors, n, describe(r, t, who));
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        segment_cost(r, &v[i]);
    qsort(v, n, sizeof *v, segment_victims_order);
    void *ptr = NULL;
    for (size_t i = 0; i < n && !ptr; i++) {
        /* collect first: freeing coalesces blocks under the walk */
        size_t k = 0;
        for (arena_block *b = v[i].seg->first; b; b = b->next)
            if (b->state == COOP_BLOCK_ALLOCATED)
                list[k++] = b->owner;
        for (size_t j = 0; j < k; j++)
            evict_for_room(r, list[j]);
        ptr = try_place(r, t, flags, st);
        if (!ptr && *st != COOP_ERR_NOMEM)
            break;
    }
    free(list);
    free(v);
    return ptr;
}

static bool could_fit(coop_remat *r, uint64_t want, uint64_t evictable);

/* Whether a run of adjacent blocks of segment s, each free for the context
 * or one of its evictable tensors (block_could_go), covers want bytes: one
 * pass, ending at the first run that does. Otherwise *tail is the run that
 * ends at the segment's last block, and *whole whether that run is the
 * whole segment (both may be NULL). */
static bool run_covers(coop_remat *r, const arena_segment *s, uint64_t want, uint64_t *tail,
                       bool *whole)
{
    uint64_t run = 0;
    bool all = true;
    for (const arena_block *b = s->first; b; b = b->next) {
        if (!block_could_go(r, b)) {
            run = 0;
            all = false;
            continue;
        }
        run += b->size;
        if (run >= want)
            return true;
    }
    if (tail)
        *tail = run;
    if (whole)
        *whole = all;
    return false;
}

/* With VMM, what could_fit cannot tell: whether the address range could
 * hold want bytes once the context's evictable tensors go (a run of blocks
 * each free for the context or such a tensor), where the run that ends at
 * the top also takes the range above it (the pool extends the last free
 * block there). That range binds where the tiled range has reached va_size
 * (va_size == capacity above all), as a segment does without VMM. *top_run
 * (may be NULL): NULL where a run below the top, or the range above it
 * alone, holds want; else the lowest block of the shortest run ending at
 * the top that holds it with the range above: the blocks from there up
 * must go, whatever else does. One pass over the blocks, ending at the
 * first run that holds want. */
static bool fits_in_range(coop_remat *r, uint64_t want, const arena_block **top_run)
{
    const arena *a = pool_arena(r->pool);
    const arena_segment *s = arena_first_segment(a);
    uint64_t above = s->reserved - s->top;
    if (top_run)
        *top_run = NULL;
    uint64_t run = 0;
    if (above >= want || run_covers(r, s, want, &run, NULL))
        return true;
    if (run + above < want)
        return false;
    const arena_block *b = s->last;
    for (uint64_t held = above + b->size; held < want; held += b->size)
        b = b->prev;
    if (top_run)
        *top_run = b;
    return true;
}

/* A tensor alloc_by_pages may evict and what that costs per byte. */
typedef struct page_victim {
    coop_tensor *t;
    bool top_run; /* in the run at the top the request needs (fits_in_range): first */
    double cost_per_byte;
} page_victim;

static int page_victims_order(const void *x, const void *y)
{
    const page_victim *a = x, *b = y;
    if (a->top_run != b->top_run)
        return a->top_run ? -1 : 1;
    if (a->cost_per_byte != b->cost_per_byte)
        return a->cost_per_byte < b->cost_per_byte ? -1 : 1;
    return a->t->resident_seq < b->t->resident_seq ? -1 : a->t->resident_seq > b->t->resident_seq;
}

/* With VMM a window frees address space, and the pool maps pages where the
 * tensor lands: a window over free space whose pages are not mapped (the
 * tiled range outgrows the capacity, and reclaim unmaps idle free pages)
 * costs nothing and evicts nothing, but its placement needs pages the
 * capacity does not allow; so does a request no window covers, which the
 * pool would place above the top. There the capacity binds, not the
 * address range: evicting any tensor frees its pages for the pool to
 * unmap and map again where the request goes. So: the context's evictable
 * tensors, cheapest per byte first (window cost over block bytes, as a
 * window is ranked), evicted one at a time until the pool can place the
 * request (the window search chose a window of free space for ever before,
 * and the context failed with "no room" although every resident tensor
 * was evictable). None when even all of them would leave too little room
 * under the capacity, or no room in the address range (fits_in_range);
 * where only the run at the top can hold the request, its tensors go
 * first. NULL with *st as alloc_in_window's. */
static void *alloc_by_pages(coop_remat *r, coop_tensor *t, unsigned flags, coop_status *st)
{
    const arena *a = pool_arena(r->pool);
    size_t n = 0;
    uint64_t bytes = 0;
    for (coop_tensor *c = r->resident; c; c = c->next_resident)
        if (window_may_evict(r, c)) {
            n++;
            bytes += arena_lookup(a, (uintptr_t)c->ptr)->size;
        }
    uint64_t want = placed_bytes(t);
    const arena_block *top_run;
    if (!n || !could_fit(r, want, bytes) || !fits_in_range(r, want, &top_run))
        return NULL; /* *st stays COOP_ERR_NOMEM */
    /* host memory first: evictions cannot be undone */
    page_victim *v = NULL;
    if (remat_reserve_evictions(r, n) || !(v = malloc(n * sizeof *v))) {
        char who[REMAT_DESCRIBE_MAX];
        *st = remat_host_nomem(r, "listing %zu tensors to evict for %s", n, describe(r, t, who));
        return NULL;
    }
    n = 0;
    for (coop_tensor *c = r->resident; c; c = c->next_resident)
        if (window_may_evict(r, c)) {
            arena_block *b = arena_lookup(a, (uintptr_t)c->ptr);
            v[n++] = (page_victim){c, top_run && b->addr >= top_run->addr,
                                   window_cost(c, b, r) / (double)b->size};
        }
    qsort(v, n, sizeof *v, page_victims_order);
    void *ptr = NULL;
    for (size_t i = 0; i < n && !ptr; i++) {
        evict_for_room(r, v[i].t);
        ptr = try_place(r, t, flags, st);
        if (!ptr && *st != COOP_ERR_NOMEM)
            break;
    }
    free(v);
    return ptr;
}

/* With VMM, a window the search does not see: the shortest run of blocks
 * ending at the top, each free for the context or one of its evictable
 * tensors, that holds want bytes with the address range above the top (the
 * pool extends a free last block over it). Asked only where that range is
 * short of want, the tiled range near va_size (else it holds the request
 * alone, and what binds is the capacity: alloc_by_pages). true where such a
 * run holds a tensor and the capacity left maps the pages above the top it
 * needs: *first its lowest block, *cost its tensors' window
 * costs summed, *bytes its bytes with the range above (the per-byte key a
 * window of those bytes would have). */
static bool top_window(coop_remat *r, uint64_t want, arena_block **first, double *cost,
                       uint64_t *bytes)
{
    const arena_segment *s = arena_first_segment(pool_arena(r->pool));
    uint64_t held = s->reserved - s->top;
    if (held >= want)
        return false;
    double sum = 0;
    size_t tensors = 0;
    arena_block *low = NULL;
    for (arena_block *b = s->last; b && held < want; b = b->prev) {
        if (!block_could_go(r, b))
            return false;
        held += b->size;
        if (b->state == COOP_BLOCK_ALLOCATED) {
            sum += window_cost(b->owner, b, r);
            tensors++;
        }
        low = b;
    }
    if (held < want || !tensors)
        return false;
    /* the pages above the top it needs, within the capacity left: else
     * placing there would evict more (by pages) where the search's window
     * needs no page mapped */
    const arena *a = pool_arena(r->pool);
    uint64_t ps = a->params.page_size, run = held - (s->reserved - s->top);
    uint64_t pages = (want - run + ps - 1) / ps * ps;
    if (a->params.capacity < a->reserved || pages > a->params.capacity - a->reserved)
        return false;
    *first = low;
    *cost = sum;
    *bytes = held;
    return true;
}

/* Coop: evict the cheapest covering window, allocate inside it. NULL with
 * *st COOP_ERR_NOMEM when no window covers t, another status (message set)
 * when host memory ran out (before anything was evicted) or the pool failed. */
static void *alloc_in_window(coop_remat *r, coop_tensor *t, unsigned flags, coop_status *st)
{
    uint64_t want = placed_bytes(t);
    window w;
    remat_search_index_sync_locked(r); /* exact for this search */
    /* c_live's walks can be long (a dear tensor behind a long evicted
     * region): its windows are evaluated lazily, each walk only as far as
     * its window could still win; the other costs read cached classes */
    int found =
        r->cfg.policy == COOP_REMAT_COOP
            ? window_search_lazy(pool_arena(r->pool), want, 0, WINDOW_PER_BYTE, window_cost_upto,
                                 window_bound, r, r->breakers, &r->scratch, &w)
            : window_search_indexed(pool_arena(r->pool), want, 0, WINDOW_PER_BYTE, window_cost,
                                    window_bound, r, r->breakers, &r->scratch, &w);
    if (found == -2) {
        char who[REMAT_DESCRIBE_MAX];
        *st = remat_host_nomem(r, "searching a window for %s", describe(r, t, who));
    }
    bool vmm = pool_arena(r->pool)->params.vmm;
    if (found == -1)
        return vmm ? alloc_by_pages(r, t, flags, st) : alloc_in_segments(r, t, flags, st);
    if (found)
        return NULL;
    /* the run at the top with the range above, where it is cheaper per
     * byte than the search's window: the search looked only below the top
     * and, where va_size binds, evicted a dear window for a cheap run */
    arena_block *top_first;
    double top_cost;
    uint64_t top_bytes;
    bool at_top = vmm && top_window(r, want, &top_first, &top_cost, &top_bytes) &&
                  top_cost / (double)top_bytes < w.cost / (double)w.size;
    if (at_top) {
        w.first = top_first;
        w.last = arena_first_segment(pool_arena(r->pool))->last;
    }
    /* collect first: freeing coalesces blocks under the walk */
    size_t n = 0;
    coop_tensor *small[32], **list = small;
    for (arena_block *b = w.first;; b = b->next) {
        if (b->state == COOP_BLOCK_ALLOCATED)
            n++;
        if (b == w.last)
            break;
    }
    /* free space alone, where the pool could not place the request: its
     * pages could not be mapped (VMM; without VMM free space needs none) */
    if (!n)
        return vmm ? alloc_by_pages(r, t, flags, st) : NULL;
    if (n > 32 && !(list = malloc(n * sizeof *list))) {
        *st = window_list_failed(r, t, n);
        return NULL;
    }
    n = 0;
    for (arena_block *b = w.first;; b = b->next) {
        if (b->state == COOP_BLOCK_ALLOCATED)
            list[n++] = b->owner;
        if (b == w.last)
            break;
    }
    if (remat_reserve_evictions(r, n)) {
        if (list != small)
            free(list);
        *st = window_list_failed(r, t, n);
        return NULL;
    }
    arena_block *merged = NULL;
    for (size_t i = 0; i < n; i++)
        merged = evict_for_room(r, list[i]);
    if (list != small)
        free(list);
    if (at_top) { /* the pool places it over the freed run and the range above */
        void *ptr = try_place(r, t, flags, st);
        return ptr || *st != COOP_ERR_NOMEM ? ptr : alloc_by_pages(r, t, flags, st);
    }
    if (!merged || merged->state != COOP_BLOCK_FREE || merged->addr > w.addr ||
        merged->addr + merged->size < w.addr + w.size)
        return vmm ? alloc_by_pages(r, t, flags, st) : NULL;
    uintptr_t at = flags & COOP_ALLOC_HIGH ? w.addr + w.size - want : w.addr;
    arena_block *out;
    coop_status placed = pool_alloc_in_locked(r->pool, merged, at, t->size, 0, &out);
    if (placed == COOP_ERR_NOMEM && vmm) /* the window's pages could not all be mapped */
        return alloc_by_pages(r, t, flags, st);
    if (placed != COOP_OK) {
        *st = placed == COOP_ERR_NOMEM ? placed : remat_placing_failed(r, t, placed);
        return NULL;
    }
    return (void *)out->addr;
}

/* The calling thread's CPU time (ns). Searches are timed by the library
 * itself, where the search starts and ends, rather than by a caller around
 * its API calls: one call can search several times (an op's outputs, a
 * chain of recomputations), and a caller's clock would also charge the
 * recompute callbacks. Only searches read it: an allocation that fits
 * costs no clock call. A sum alone gives no percentiles, and a per-search
 * array would grow without bound in a long-running allocator, so the
 * stats keep the sum and the last search's time (coop_remat_stats). */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The bytes of the evictable tensors' blocks (pool lock held). */
static uint64_t evictable_bytes(coop_remat *r)
{
    const arena *a = pool_arena(r->pool);
    uint64_t bytes = 0;
    if (r->cands_on) {
        for (size_t i = 0; i < r->num_cands; i++)
            bytes += arena_lookup(a, (uintptr_t)r->cands[i]->ptr)->size;
        return bytes;
    }
    for (coop_tensor *c = r->resident; c; c = c->next_resident)
        if (remat_evictable(c))
            bytes += arena_lookup(a, (uintptr_t)c->ptr)->size;
    return bytes;
}

/* Whether a free block of a busy stream (tagged neither the context's
 * stream nor any stream) exists: the free index has a non-empty set of
 * another stream. A look at its sets. */
static bool any_busy_free(const arena *a)
{
    bool any = false;
    for (size_t i = 0; i < a->index.num_sets && !any; i++) {
        coop_stream s = a->index.sets[i]->stream;
        any = !arena_tags_mergeable(s, REMAT_STREAM) && a->index.sets[i]->count;
    }
    return any;
}

/* The mapped bytes of the free blocks of busy streams: cached for work
 * still queued, nothing the context can evict or the pool reclaim. A walk,
 * but only where such a block exists (any_busy_free): a pool of one stream
 * pays a look at its sets. */
static uint64_t busy_free_bytes(const arena *a)
{
    if (!any_busy_free(a))
        return 0;
    uint64_t bytes = 0;
    for (const arena_segment *seg = arena_first_segment(a); seg; seg = seg->next)
        for (const arena_block *b = seg->first; b; b = b->next)
            if (b->state == COOP_BLOCK_FREE && !free_for_context(b))
                bytes += arena_mapped_bytes_in(a, seg, b->addr, b->size);
    return bytes;
}

/* Whether evicting every evictable tensor could make room for want bytes
 * at all: the blocks nothing can evict keep their bytes of the capacity
 * mapped; so do pending blocks (freed, waiting for another stream's events:
 * active minus allocated bytes) and busy streams' free blocks. Only a
 * necessary condition (those blocks may also split the free space), but it
 * spares an argmin policy, or eviction by pages, evicting everything for a
 * request that cannot fit. */
static bool could_fit(coop_remat *r, uint64_t want, uint64_t evictable)
{
    coop_pool *pool = r->pool;
    const arena *a = pool_arena(pool);
    uint64_t capacity = a->params.capacity;
    uint64_t allocated = (uint64_t)pool->allocated_bytes.current;
    uint64_t kept = allocated > evictable ? allocated - evictable : 0;
    kept += (uint64_t)(pool->active_bytes.current - pool->allocated_bytes.current);
    kept += busy_free_bytes(a);
    return kept <= capacity && want <= capacity - kept;
}

/* Without VMM, what could_fit cannot tell: whether evicting every evictable
 * tensor of the context could place want bytes at all. Blocks never span
 * two segments, so the request fits only in one run of adjacent blocks of a
 * segment, each free for the context or one of its evictable tensors
 * (window_may_evict: an evicted block merges with those), or in a new
 * segment of want in pages once enough whole segments of such blocks are
 * given back to let the capacity hold it (the pool gives back idle
 * segments for a segment that does not fit; alloc_in_segments). Pending
 * blocks, busy streams' free blocks and other users' blocks break runs and
 * keep their segment. One pass over the blocks, ending at the first run
 * that covers want or once the segments given back would make room. */
static bool fits_in_segments(coop_remat *r, uint64_t want)
{
    const arena *a = pool_arena(r->pool);
    uint64_t ps = a->params.page_size;
    uint64_t need = (want + ps - 1) / ps * ps; /* the new segment grow_segments makes */
    uint64_t room = a->params.capacity > a->reserved ? a->params.capacity - a->reserved : 0;
    for (const arena_segment *seg = arena_first_segment(a); seg; seg = seg->next) {
        bool whole = false;
        if (run_covers(r, seg, want, NULL, &whole) || (whole && (room += seg->reserved) >= need))
            return true;
    }
    return false;
}

/* The free block evicting t alone would leave: its block and the free
 * blocks beside it that merge with it. */
static uint64_t freed_by_evicting(coop_remat *r, const coop_tensor *t)
{
    return arena_lookup(pool_arena(r->pool), (uintptr_t)t->ptr)->size + adjacent_free(r, t);
}

/* The argmin policies' search (pool lock held): evicts the policy's
 * argmin, one tensor at a time, until the pool can place t. NULL with *st
 * as alloc_in_window's; *evictable_left is then the evictable bytes left,
 * for no_room's message. Nothing is evicted where evicting every
 * evictable tensor could not make room (could_fit, then fits_in_segments
 * or fits_in_range). */
static void *alloc_by_argmin(coop_remat *r, coop_tensor *t, unsigned flags, coop_status *st,
                             uint64_t *evictable_left)
{
    uint64_t want = placed_bytes(t);
    remat_search_index_sync_locked(r); /* the evictable set, exact */
    *evictable_left = evictable_bytes(r);
    if (!could_fit(r, want, *evictable_left))
        return NULL;
    /* whether a run or whole segments (without VMM: fits_in_segments), or
     * a run with the range above the top (with VMM: fits_in_range) could
     * hold t is asked once, before the first eviction; not where evicting
     * the first victim alone makes a free block that covers it (its block
     * and the free ones beside it): the search needs no walk then, as most
     * do */
    bool asked_placeable = false;
    size_t evicted = 0; /* by this search, for the message */
    void *ptr = NULL;
    while (!ptr) {
        coop_tensor *best = r->cands_on ? argmin_set(r) : argmin_resident(r);
        if (!best) {
            *evictable_left = 0; /* evicted them all */
            break;
        }
        if (!asked_placeable) {
            asked_placeable = true;
            bool vmm = pool_arena(r->pool)->params.vmm;
            if (freed_by_evicting(r, best) < want &&
                !(vmm ? fits_in_range(r, want, NULL) : fits_in_segments(r, want)))
                break; /* hopeless: nothing evicted */
        }
        if (remat_reserve_evictions(r, 1)) { /* else the owner would not hear of it */
            *st = argmin_eviction_failed(r, t, evicted);
            break;
        }
        evict_for_room(r, best);
        evicted++;
        ptr = try_place(r, t, flags, st);
        if (!ptr && *st != COOP_ERR_NOMEM)
            break;
    }
    return ptr;
}

/* For no_room: the free bytes the context cannot take (a busy stream's
 * free blocks, which the out-of-memory path did not retag) and the pending
 * frees, which the free and allocated figures leave out; "" where there
 * are none. Without it a busy stream's block read as free space larger than
 * the request ("largest free block" above what "cannot" be freed). A walk
 * over the blocks, on failure only and where such a block exists. */
static void kept_elsewhere(coop_remat *r, char *buf, size_t size)
{
    const arena *a = pool_arena(r->pool);
    uint64_t kept = 0, mapped = 0, largest = 0;
    if (any_busy_free(a))
        for (const arena_segment *seg = arena_first_segment(a); seg; seg = seg->next)
            for (const arena_block *b = seg->first; b; b = b->next) {
                if (b->state != COOP_BLOCK_FREE)
                    continue;
                if (free_for_context(b)) {
                    largest = b->size > largest ? b->size : largest;
                    continue;
                }
                kept += b->size;
                mapped += arena_mapped_bytes_in(a, seg, b->addr, b->size);
            }
    int64_t pending = r->pool->active_bytes.current - r->pool->allocated_bytes.current;
    char part[96] = "";
    if (pending > 0)
        snprintf(part, sizeof part,
                 ", pending frees %lld (freed blocks waiting for other streams' events)",
                 (long long)pending);
    if (kept)
        snprintf(buf, size,
                 "%s; %llu of the free bytes (%llu mapped) are kept for other streams not seen "
                 "finished, usable on those only: the largest free block this context can take "
                 "is %llu",
                 part, (unsigned long long)kept, (unsigned long long)mapped,
                 (unsigned long long)largest);
    else
        snprintf(buf, size, "%s", part);
}

/* The out-of-memory message, with what the user needs to act (pool lock
 * held). */
static coop_status no_room(coop_remat *r, const coop_tensor *t, uint64_t evictable)
{
    const arena *a = pool_arena(r->pool);
    char elsewhere[320];
    kept_elsewhere(r, elsewhere, sizeof elsewhere);
    /* with VMM the free blocks tile only up to the top: the address range
     * above it is free too, and the one that binds where it is short */
    char above[64] = "";
    if (a->params.vmm) {
        const arena_segment *s = arena_first_segment(a);
        snprintf(above, sizeof above, ", address range above the top %llu",
                 (unsigned long long)(s->reserved - s->top));
    }
    /* recomputing (an access or pin, maybe deep in a chain): which tensor,
     * and for which one the owner asked; placing outputs: which one */
    char what[REMAT_DESCRIBE_MAX + 48];
    char name[REMAT_DESCRIBE_MAX];
    if (r->num_frames)
        snprintf(what, sizeof what, "%zu bytes to recompute %s", t->size, describe(r, t, name));
    else if (r->placing_outputs)
        snprintf(what, sizeof what, "%s", describe(r, t, name));
    else
        snprintf(what, sizeof what, "%zu bytes", t->size);
    return coop_set_error(
        COOP_ERR_NOMEM,
        "%s: no room for %s: capacity %llu, allocated %lld of which %llu "
        "evictable, free %llu, largest free block %llu%s%s; evicting cannot free a "
        "contiguous range that large",
        remat_call_name(r), what, (unsigned long long)a->params.capacity,
        (long long)r->pool->allocated_bytes.current, (unsigned long long)evictable,
        (unsigned long long)a->counters.free_bytes, (unsigned long long)arena_largest_free(a),
        above, elsewhere);
}

coop_status remat_alloc(coop_remat *r, coop_tensor *t)
{
    if (remat_reserve_nodes(r, 1)) { /* t's node, should it be evicted later */
        char who[REMAT_DESCRIBE_MAX];
        return remat_host_nomem(r, "placing %s", describe(r, t, who));
    }
    unsigned flags = placement(r, t);
    coop_status st = COOP_OK;
    pool_lock(r->pool);
    uint64_t capacity = pool_arena(r->pool)->params.capacity;
    if (t->size > capacity) {         /* nothing to search for (and no rounding to wrap) */
        char who[REMAT_DESCRIBE_MAX]; /* a recomputed one after coop_set_capacity lowered it */
        r->pool->num_ooms++;          /* a failed allocation, as the pool counts its own */
        st = coop_set_error(COOP_ERR_NOMEM,
                            "%s: %s is larger than the pool's capacity of %llu bytes",
                            remat_call_name(r), describe(r, t, who), (unsigned long long)capacity);
        pool_unlock(r->pool);
        return st;
    }
    /* every refusal for room below ends in no_room's message */
    pool_set_quiet_oom(r->pool, true);
    /* the pool counts each of the tries below (one per eviction for the
     * argmin policies); the caller made one allocation (coop.h: once each) */
    uint64_t retries = r->pool->num_alloc_retries, ooms = r->pool->num_ooms;
    uint64_t want = placed_bytes(t);
    void *ptr = try_place(r, t, flags, &st);
    /* the search index catches up in batches at allocations that fit, so
     * that a search (the first above all: every tensor made so far is
     * dirty) brings up to date at most a batch */
    if (ptr && r->num_dirty >= REMAT_DIRTY_BATCH)
        remat_search_index_sync_locked(r);
    if (!ptr && st == COOP_ERR_NOMEM) {
        uint64_t t0 = thread_cpu_ns();
        uint64_t free_bytes = pool_arena(r->pool)->counters.free_bytes;
        r->stats.searches++;
        r->stats.search_free_bytes = saturating_add_u64(r->stats.search_free_bytes, free_bytes);
        if (free_bytes >= want)
            r->stats.frag_failures++;
        /* the evictable bytes the message gives if this fails; UINT64_MAX:
         * not known without a walk */
        uint64_t evictable_left = UINT64_MAX;
        if (remat_policy_windowed(r->cfg.policy)) {
            ptr = alloc_in_window(r, t, flags, &st);
        } else {
            ptr = alloc_by_argmin(r, t, flags, &st, &evictable_left);
        }
        r->stats.last_search_ns = thread_cpu_ns() - t0;
        r->stats.search_ns += r->stats.last_search_ns;
        if (!ptr && st == COOP_ERR_NOMEM)
            st = no_room(r, t, evictable_left != UINT64_MAX ? evictable_left : evictable_bytes(r));
    }
    if (ptr) {
        arena_lookup(pool_arena(r->pool), (uintptr_t)ptr)->owner = t;
        remat_make_resident(r, t, ptr);
        st = COOP_OK;
    }
    r->pool->num_alloc_retries = retries + (r->pool->num_alloc_retries != retries);
    r->pool->num_ooms = ooms + (st == COOP_ERR_NOMEM);
    pool_set_quiet_oom(r->pool, false);
    pool_unlock(r->pool);
    remat_notify_victims(r);
    return st;
}
