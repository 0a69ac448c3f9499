/* Arena: blocks over segments, best fit, split / coalesce, page mapping. See arena.h. */
#include <stddef.h>
#include <stdio.h>

#include "hot_path.h"
#include "arena.h"
#include "stat.h"
#include "status.h"

#define BLOCK_OF(node) ((arena_block *)((char *)(node)-offsetof(arena_block, index_node)))

static inline coop_stream merged_tag(coop_stream a, coop_stream b)
{
    return a == COOP_STREAM_ANY ? b : a;
}

static inline uint64_t round_up(uint64_t x, uint64_t align)
{
    return (x + align - 1) & ~(align - 1);
}

/* ---- Block records: reserved before a commit so that it cannot fail ---- */

static coop_status reserve_records_slow(arena *a, int n)
{
    if (!meta_slab_reserve(&a->records, (size_t)n))
        return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory for a block record");
    return addr_map_reserve(&a->map, 1);
}

/* Every allocation calls this; free records and map room are nearly always there. */
static inline coop_status reserve_records(arena *a, int n)
{
    if (__builtin_expect(a->records.num_free >= (size_t)n && addr_map_has_room(&a->map, 1), 1))
        return COOP_OK;
    return reserve_records_slow(a, n);
}

/* Makes sure blocks allocated on stream can be freed into the index later. */
static inline coop_status reserve_stream(arena *a, coop_stream stream)
{
    if (stream == a->reserved_stream)
        return COOP_OK;
    coop_status st = free_index_reserve(&a->index, stream);
    if (st == COOP_OK)
        a->reserved_stream = stream;
    return st;
}

/* A reserved record with links, owner and stream uses cleared; the caller
 * sets address, size, state and stream. */
static COOP_INLINE arena_block *take_record(arena *a)
{
    arena_block *b = meta_slab_take(&a->records);
    b->index_node.left = b->index_node.right = b->index_node.parent = NULL;
    b->prev = b->next = NULL;
    b->size_word_ = 0; /* size, state and counted_split: the caller sets them */
    return b;
}

static COOP_INLINE void drop_record(arena *a, arena_block *b)
{
    meta_slab_give(&a->records, b);
}

/* ---- Free-index membership, with the free counters it implies ---- */

static COOP_INLINE void index_add(arena *a, arena_block *b)
{
    free_index_insert(&a->index, &b->index_node, b->size, b->addr, b->stream);
    a->counters.free_bytes += b->size;
    if (b->prev || b->next) {
        block_set_counted(b, true);
        stat_count_up(&a->counters.inactive_split);
        stat_grow(&a->counters.inactive_split_bytes, (int64_t)b->size);
    }
}

static COOP_INLINE void index_del(arena *a, arena_block *b)
{
    free_index_remove(&a->index, &b->index_node);
    a->counters.free_bytes -= b->size;
    if (b->counted_split) {
        block_set_counted(b, false);
        stat_count_down(&a->counters.inactive_split);
        stat_shrink(&a->counters.inactive_split_bytes, (int64_t)b->size);
    }
}

/* A free block that just gained a neighbour without leaving the index. */
static void recount_split(arena *a, arena_block *b)
{
    if (b->state == COOP_BLOCK_FREE && !b->counted_split && (b->prev || b->next)) {
        block_set_counted(b, true);
        stat_count_up(&a->counters.inactive_split);
        stat_grow(&a->counters.inactive_split_bytes, (int64_t)b->size);
    }
}

/* ---- Address order ---- */

/* Links b after pos (NULL: first in seg). seg may be NULL when pos is given:
 * it is looked up (by b's end address) only if b becomes the segment's last
 * block, so b's address and size must be set. */
static COOP_INLINE void link_after(arena *a, arena_segment *seg, arena_block *pos, arena_block *b)
{
    b->prev = pos;
    b->next = pos ? pos->next : seg->first;
    if (b->next) {
        b->next->prev = b;
    } else {
        if (!seg)
            seg = a->params.vmm ? a->first_segment
                                : (arena_segment *)addr_map_find(&a->seg_ends, b->addr + b->size);
        seg->last = b;
    }
    if (pos)
        pos->next = b;
    else
        seg->first = b;
    a->counters.num_blocks++;
}

/* seg may be NULL: looked up only when b is its segment's first or last block. */
static COOP_INLINE void unlink_block(arena *a, arena_block *b, arena_segment *seg)
{
    arena_block *prev = b->prev, *next = b->next;
    if (!seg && (!prev || !next))
        seg = arena_block_segment(a, b);
    if (prev)
        prev->next = next;
    else
        seg->first = next;
    if (next)
        next->prev = prev;
    else
        seg->last = prev;
    a->counters.num_blocks--;
}

arena_block *arena_lookup(const arena *a, uintptr_t addr)
{
    return addr_map_find(&a->map, addr);
}

arena_segment *arena_segment_of(const arena *a, uintptr_t addr)
{
    for (arena_segment *s = a->first_segment; s; s = s->next)
        if (addr >= s->base && addr - s->base < s->reserved)
            return s;
    return NULL;
}

arena_block *arena_find_containing(const arena *a, uintptr_t addr)
{
    arena_segment *s = arena_segment_of(a, addr);
    for (arena_block *b = s ? s->first : NULL; b; b = b->next)
        if (addr >= b->addr && addr - b->addr < b->size)
            return b;
    return NULL;
}

uint64_t arena_largest_free(const arena *a)
{
    free_index_node *n = free_index_max(&a->index);
    return n ? n->size : 0;
}

/* ---- Pages (VMM) ---- */

static inline size_t page_floor(const arena *a, const arena_segment *s, uintptr_t addr)
{
    return (size_t)((addr - s->base) >> a->page_shift);
}

static inline size_t page_ceil(const arena *a, const arena_segment *s, uintptr_t addr)
{
    return (size_t)((addr - s->base + a->params.page_size - 1) >> a->page_shift);
}

uint64_t arena_mapped_bytes_in(const arena *a, const arena_segment *seg, uintptr_t addr,
                               uint64_t size)
{
    if (!a->params.vmm)
        return size;
    uint64_t ps = a->params.page_size, total = 0;
    for (size_t p = page_floor(a, seg, addr); p < page_ceil(a, seg, addr + size); p++) {
        if (!page_map_test(&seg->pages, p))
            continue;
        uintptr_t lo = seg->base + p * ps, hi = lo + ps;
        lo = lo < addr ? addr : lo;
        hi = hi > addr + size ? addr + size : hi;
        total += hi - lo;
    }
    return total;
}

/* Pages mapped or unmapped, or (without VMM) a segment allocated or freed. */
static void count_mapping(arena *a, uint64_t bytes, bool mapped)
{
    if (mapped) {
        a->reserved += bytes;
        a->counters.num_maps++;
        /* cumulative: saturates (2^20 maps of 16 TiB wrapped it to 0) */
        a->counters.map_bytes = saturating_add_u64(a->counters.map_bytes, bytes);
        stat_grow(&a->counters.reserved_bytes, (int64_t)bytes);
    } else {
        a->reserved -= bytes;
        a->counters.num_unmaps++;
        stat_shrink(&a->counters.reserved_bytes, (int64_t)bytes);
    }
}

/* Unmaps the mapped pages of [first, end); stops at the first failure. A
 * failed unmap leaves its run mapped, or a first part of it unmapped when the
 * backend could not map that part back: the page map follows the device, so
 * that those pages are mapped again before they are handed out. */
static coop_status unmap_pages(arena *a, arena_segment *s, size_t first, size_t end,
                               uint64_t *released)
{
    uint64_t ps = a->params.page_size;
    size_t rf, re;
    while (first < end && page_map_next_run(&s->pages, first, end, true, &rf, &re)) {
        uint64_t unmapped = 0;
        coop_status st =
            a->backend->ops->unmap(a->backend, s->base + rf * ps, (re - rf) * ps, &unmapped);
        size_t gone = (size_t)(unmapped / ps);
        if (gone) {
            page_map_set(&s->pages, rf, rf + gone, false);
            count_mapping(a, (uint64_t)gone * ps, false);
            *released += (uint64_t)gone * ps;
        }
        if (st != COOP_OK)
            return st;
        first = re;
    }
    return COOP_OK;
}

/* Whether a reclaim of VMM segment s is sure to release less than want,
 * with no walk. First two counters: the mapped pages less those the blocks
 * in use (allocated or pending: the tiled range less its free blocks) must
 * touch, a page holding at most a page of their bytes. Then a bounded
 * look: a reclaim unmaps whole pages of runs of free
 * space, and where at most one stream tags free blocks (two of the same
 * or mergeable tags side by side would have merged) a run below the top is
 * one free block. So the whole pages inside free blocks of a page or more
 * (the free index's, in size order), and those of the run at the top (the
 * last block if free, and the range above the top, where pages are mapped
 * only by a map that failed part way), bound what it can release.
 * The counters' bound is loose where pages are larger than blocks
 * (CUDA's 2 MiB pages, small tensors scattered): there every failed map
 * walked every block, once per eviction of a remat search. False as soon
 * as the bound reaches want, or after RECLAIM_LOOK free blocks. */
#define RECLAIM_LOOK 64
#define RECLAIM_COUNT 4096 /* pages: 64 words of the page map */
static bool reclaim_falls_short(arena *a, const arena_segment *s, uint64_t want)
{
    uint64_t ps = a->params.page_size;
    uint64_t in_use = (s->top - a->counters.free_bytes + ps - 1) / ps * ps;
    if (a->reserved < in_use + want)
        return true;
    size_t tagged = 0;
    for (size_t i = 0; i < a->index.num_sets; i++)
        if (a->index.sets[i]->stream != a->index.any && a->index.sets[i]->count && ++tagged == 2)
            return false; /* free blocks of two streams may lie side by side */
    const arena_block *last = s->last;
    uintptr_t top = s->base + s->top;
    bool last_free = last && last->state == COOP_BLOCK_FREE;
    size_t top_end = page_ceil(a, s, top), from = page_ceil(a, s, last_free ? last->addr : top);
    if (a->mapped_above_top) {
        size_t rf, re;
        if (page_map_next_run(&s->pages, top_end, s->pages.num_pages, true, &rf, &re))
            return false;
        a->mapped_above_top = false;
    }
    size_t looked = 0;
    uint64_t bound = 0;
    if (from < top_end) /* the top run's pages below the range above the top */
        bound =
            (uint64_t)(top_end - from <= RECLAIM_COUNT ? page_map_count(&s->pages, from, top_end)
                                                       : top_end - from) *
            ps;
    for (size_t i = 0; i < a->index.num_sets; i++) {
        free_index_node *n = free_index_set_fit(&a->index, ps, a->index.sets[i]->stream);
        for (; n && bound < want; n = free_index_next(&a->index, n)) {
            if (++looked > RECLAIM_LOOK)
                return false;
            size_t lo = page_ceil(a, s, n->addr), hi = page_floor(a, s, n->addr + n->size);
            if (hi <= lo || (last_free && n->addr == last->addr)) /* (the top run's) */
                continue;
            /* its mapped pages (a reclaim before may have unmapped them),
             * counted where that is a few words of the page map */
            size_t pages = hi - lo <= RECLAIM_COUNT ? page_map_count(&s->pages, lo, hi) : hi - lo;
            bound += (uint64_t)pages * ps;
        }
    }
    return bound < want;
}

/* Maps the unmapped pages of [first, end), reclaiming cached pages elsewhere
 * first if the capacity requires. If a map call fails, the pages mapped
 * before it stay mapped: they lie in free space or above the top, which the
 * invariants allow (cached pages, counted in reserved and within capacity).
 * A map that finds the device full (COOP_ERR_NOMEM: memory used outside
 * the pool, which the capacity cannot see) releases the idle cached pages
 * outside the placement, as many as it still lacks, and is tried once more,
 * as PyTorch frees its cached blocks and retries a failed cudaMalloc. */
static coop_status map_missing(arena *a, arena_segment *s, size_t first, size_t end,
                               bool *reclaimed)
{
    uint64_t ps = a->params.page_size;
    size_t rf, re;
    uint64_t need = (uint64_t)(end - first - page_map_count(&s->pages, first, end)) * ps;
    if (a->reserved + need > a->params.capacity) {
        uint64_t released = 0;
        uint64_t short_by = a->reserved + need - a->params.capacity;
        *reclaimed = true;
        /* a reclaim that cannot release short_by walks every block above
         * the pages it finds and fails anyway: on a full pool every failing
         * request paid that walk (twice, with the pool's retry), and every
         * search of the remat API begins with one. Skipped, it asks no
         * stream: no failed question (an earlier reclaim's) is the cause. */
        coop_status st = COOP_OK;
        if (reclaim_falls_short(a, s, short_by))
            a->idle_failure = COOP_OK;
        else
            st = arena_reclaim(a, short_by, s->base + first * ps, s->base + end * ps, &released);
        if (st != COOP_OK)
            return st;
        if (a->reserved + need > a->params.capacity) {
            a->nomem = ARENA_NOMEM_CAPACITY;
            return COOP_ERR_NOMEM;
        }
    }
    size_t from = first;
    bool retried = false;
    while (from < end && page_map_next_run(&s->pages, from, end, false, &rf, &re)) {
        coop_status st = a->backend->ops->map(a->backend, s->base + rf * ps, (re - rf) * ps);
        if (st == COOP_ERR_NOMEM && !retried) {
            uint64_t released = 0;
            uint64_t missing = (uint64_t)(end - rf - page_map_count(&s->pages, rf, end)) * ps;
            retried = *reclaimed = true;
            st = arena_reclaim(a, missing, s->base + first * ps, s->base + end * ps, &released);
            /* tried again even when nothing was released (memory may have
             * been freed outside meanwhile): the message of a second refusal
             * is then the backend's, not one of reclaim's stream queries */
            if (st == COOP_OK)
                st = a->backend->ops->map(a->backend, s->base + rf * ps, (re - rf) * ps);
        }
        if (st == COOP_ERR_NOMEM)
            a->nomem = ARENA_NOMEM_DEVICE;
        if (st != COOP_OK) {
            a->mapped_above_top |= from > first; /* the runs mapped so far stay */
            return st;
        }
        page_map_set(&s->pages, rf, re, true);
        count_mapping(a, (re - rf) * ps, true);
        from = re;
    }
    return COOP_OK;
}

/* Maps every unmapped page under [lo, hi) (VMM); the check is inline
 * because nearly every allocation reuses mapped space. */
static inline coop_status ensure_mapped(arena *a, arena_segment *s, uintptr_t lo, uintptr_t hi,
                                        bool *reclaimed)
{
    if (!a->params.vmm)
        return COOP_OK;
    size_t first = page_floor(a, s, lo), end = page_ceil(a, s, hi);
    if (__builtin_expect(page_map_all_set(&s->pages, first, end), 1))
        return COOP_OK; /* the common case: reusing mapped space */
    return map_missing(a, s, first, end, reclaimed);
}

/* ---- Segments ---- */

static coop_status segment_create(arena *a, uintptr_t base, uint64_t size, bool vmm,
                                  arena_segment **out)
{
    arena_segment *s = a->spare_segment;
    a->spare_segment = NULL;
    if (!s)
        s = meta_zalloc(a->heap, sizeof *s);
    if (!s)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory for a segment record");
    s->base = base;
    s->reserved = size;
    if (vmm) {
        coop_status st = page_map_init(&s->pages, (size_t)(size / a->params.page_size), a->heap);
        if (st != COOP_OK) {
            meta_free(a->heap, s, sizeof *s);
            return st;
        }
    }
    *out = s;
    return COOP_OK;
}

/* The segment below s in address order (NULL: s goes first). Found at
 * once where s lies above the last segment or below the first (addresses
 * that only grow or only shrink), or borders one (a segment ending at s's
 * base is the one below it; one starting at s's end is the one above): the
 * host backend carves each new segment just below the previous one, and a
 * walk down from the last cost every malloc that grows a segment one step
 * per segment. Else, that walk. */
static arena_segment *segment_below(const arena *a, const arena_segment *s)
{
    arena_segment *pos = a->last_segment;
    if (!pos || pos->base < s->base)
        return pos;
    if (s->base < a->first_segment->base)
        return NULL;
    if (!a->params.vmm) { /* (with VMM: one segment, and no segment maps) */
        arena_segment *below = addr_map_find(&a->seg_ends, s->base);
        if (below)
            return below;
        arena_segment *above = addr_map_find(&a->seg_starts, s->base + s->reserved);
        if (above)
            return above->prev;
    }
    while (pos && pos->base > s->base)
        pos = pos->prev;
    return pos;
}

static void segment_link(arena *a, arena_segment *s)
{
    arena_segment *pos = segment_below(a, s);
    s->prev = pos;
    s->next = pos ? pos->next : a->first_segment;
    if (s->next)
        s->next->prev = s;
    else
        a->last_segment = s;
    if (pos)
        pos->next = s;
    else
        a->first_segment = s;
    a->num_segments++;
    stat_count_up(&a->counters.segment);
}

static void segment_unlink(arena *a, arena_segment *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        a->first_segment = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        a->last_segment = s->prev;
    a->num_segments--;
    stat_count_down(&a->counters.segment);
}

static void segment_destroy(arena *a, arena_segment *s)
{
    if (a->params.vmm)
        page_map_fini(&s->pages, a->heap);
    meta_free(a->heap, s, sizeof *s);
}

/* A segment record grow_segments made but could not use: kept as the spare
 * (arena_reserve_segment's promise outlives a failed attempt). */
static void segment_discard(arena *a, arena_segment *s)
{
    if (a->params.vmm || a->spare_segment) {
        segment_destroy(a, s);
        return;
    }
    *s = (arena_segment){0};
    a->spare_segment = s;
}

/* Without VMM: a new segment holding one free block of at least size bytes.
 * The returned block is not in the free index. A request of half a segment
 * or more gets a segment of its own size (in pages), as PyTorch's allocator
 * does from 10 MiB with its 20 MiB buffers: rounded up to a whole segment it
 * would leave a remainder that requests of its own size, often repeated,
 * never fit (GPT-2-small's 12 MiB activations left 8 MiB each: 4.7% more
 * reserved than PyTorch on an H200, reproduced to the byte by `coop replay`).
 * Not where one segment is the whole capacity in force: that pool is one
 * fixed arena (coop sim's arena model), whose first request must not shrink
 * it. (A segment_size above the capacity never fits: every segment then takes
 * the request's own size, below.) Near the capacity, a smaller request also
 * gets a segment of its own size, where a whole one does not fit even once
 * idle cached segments are released. */
static coop_status grow_segments(arena *a, uint64_t size, arena_block **out, bool *reclaimed)
{
    uint64_t ps = a->params.page_size;
    uint64_t seg = a->params.segment_size;
    uint64_t exact = round_up(size, ps);
    bool own = exact > seg || (size >= seg / 2 && seg < a->params.capacity);
    uint64_t want = own ? exact : seg;
    if (a->reserved + want > a->params.capacity)
        want = exact; /* a smaller segment may still fit */
    /* The host memory first: running out of it must not have released
     * cached segments for nothing (a refused call changes nothing). */
    coop_status st = arena_reserve_segment(a);
    arena_segment *s = NULL;
    if (st == COOP_OK)
        st = segment_create(a, 0, want, false, &s); /* takes the spare record */
    if (st != COOP_OK)
        return st;
    if (a->reserved + want > a->params.capacity) {
        uint64_t released = 0;
        *reclaimed = true;
        st = arena_reclaim(a, a->reserved + want - a->params.capacity, 0, 0, &released);
        if (st == COOP_OK && a->reserved + want > a->params.capacity) {
            a->nomem = ARENA_NOMEM_CAPACITY;
            st = COOP_ERR_NOMEM;
        }
        if (st != COOP_OK) {
            segment_discard(a, s);
            return st;
        }
        /* reclaim releases whole segments, often more than the request
         * lacked: where a whole segment fits now, take it, as PyTorch tries
         * the same size again after freeing its cache (else every later
         * small request would release a cached segment for a segment of
         * its own size) */
        if (!own && a->reserved + seg <= a->params.capacity)
            want = s->reserved = seg;
    }
    uintptr_t base;
    st = a->backend->ops->segment_alloc(a->backend, want, &base);
    if (st == COOP_ERR_NOMEM) {
        /* The device itself is full (memory used outside the pool): release
         * idle free segments, as many bytes as the request needs, and try
         * once more at the request's own size (rounding it up to
         * segment_size may be what did not fit); tried even when nothing
         * was released, so that a second refusal reports the backend's
         * message. */
        uint64_t released = 0;
        *reclaimed = true;
        st = arena_reclaim(a, exact, 0, 0, &released);
        if (st == COOP_OK) {
            want = s->reserved = exact;
            st = a->backend->ops->segment_alloc(a->backend, want, &base);
        }
    }
    if (st != COOP_OK) {
        if (st == COOP_ERR_NOMEM)
            a->nomem = ARENA_NOMEM_DEVICE;
        segment_discard(a, s);
        return st;
    }
    s->base = base;
    s->top = want;
    segment_link(a, s);
    addr_map_insert(&a->seg_starts, base, s);
    addr_map_insert(&a->seg_ends, base + want, s);
    count_mapping(a, want, true);
    arena_block *b = take_record(a);
    b->addr = base;
    b->size = want;
    block_set_state(b, COOP_BLOCK_FREE);
    b->stream = COOP_STREAM_ANY;
    link_after(a, s, NULL, b);
    *out = b;
    return COOP_OK;
}

coop_status arena_reserve_segment(arena *a)
{
    coop_status st = reserve_records(a, 2);
    if (st == COOP_OK)
        st = addr_map_reserve(&a->seg_starts, 1);
    if (st == COOP_OK)
        st = addr_map_reserve(&a->seg_ends, 1);
    if (st == COOP_OK && !a->spare_segment &&
        !(a->spare_segment = meta_zalloc(a->heap, sizeof *a->spare_segment)))
        st = coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory for a segment record");
    return st;
}

/* ---- Init and teardown ---- */

coop_status arena_init(arena *a, coop_backend *backend, meta_heap *heap, const arena_params *p)
{
    *a = (arena){.backend = backend,
                 .heap = heap,
                 .params = *p,
                 .page_shift = (unsigned)__builtin_ctzll(p->page_size),
                 .reserved_stream = COOP_STREAM_ANY};
    meta_slab_init(&a->records, heap, sizeof(arena_block), ARENA_RECORDS_PER_CHUNK);
    free_index_init(&a->index, COOP_STREAM_ANY, heap);
    coop_status st = free_index_reserve(&a->index, COOP_STREAM_ANY);
    if (st == COOP_OK)
        st = addr_map_init(&a->map, heap);
    if (st == COOP_OK)
        st = addr_map_init(&a->seg_starts, heap);
    if (st == COOP_OK)
        st = addr_map_init(&a->seg_ends, heap);
    if (st != COOP_OK) {
        addr_map_fini(&a->map); /* (an unset map's table is NULL: nothing to free) */
        addr_map_fini(&a->seg_starts);
        free_index_fini(&a->index);
        return st;
    }
    if (p->vmm) {
        uintptr_t base;
        st = backend->ops->reserve(backend, p->va_size, &base);
        arena_segment *s = NULL;
        if (st == COOP_OK) {
            st = segment_create(a, base, p->va_size, true, &s);
            if (st != COOP_OK)
                backend->ops->release(backend, base, p->va_size);
        }
        if (st != COOP_OK) {
            addr_map_fini(&a->map);
            addr_map_fini(&a->seg_starts);
            addr_map_fini(&a->seg_ends);
            free_index_fini(&a->index);
            return st;
        }
        segment_link(a, s);
    }
    return COOP_OK;
}

void arena_fini(arena *a)
{
    arena_segment *s = a->first_segment;
    /* unmap and segment_free do not wait, and any memory may still be in
     * use: wait for the whole device once, when there is memory to give back
     * (reserved: mapped pages or segments). If that fails (a stream blocked
     * for good), nothing is unmapped or freed: segments stay allocated, and
     * pages are left to release, which the CUDA backend does only after a
     * synchronize of its own. */
    bool synced = a->reserved == 0 || a->backend->ops->synchronize(a->backend) == COOP_OK;
    while (s) {
        arena_segment *next = s->next;
        arena_block *b = s->first;
        while (b) {
            arena_block *bn = b->next;
            meta_slab_give(&a->records, b);
            b = bn;
        }
        if (a->params.vmm) {
            uint64_t ps = a->params.page_size;
            size_t rf, re, from = synced ? 0 : s->pages.num_pages;
            while (page_map_next_run(&s->pages, from, s->pages.num_pages, true, &rf, &re)) {
                uint64_t unmapped; /* release below unmaps whatever is left */
                a->backend->ops->unmap(a->backend, s->base + rf * ps, (re - rf) * ps, &unmapped);
                from = re;
            }
            a->backend->ops->release(a->backend, s->base, s->reserved);
        } else if (synced) {
            a->backend->ops->segment_free(a->backend, s->base, s->reserved);
        }
        segment_destroy(a, s);
        s = next;
    }
    if (a->spare_segment)
        meta_free(a->heap, a->spare_segment, sizeof *a->spare_segment);
    a->spare_segment = NULL;
    meta_slab_fini(&a->records);
    addr_map_fini(&a->map);
    addr_map_fini(&a->seg_starts);
    addr_map_fini(&a->seg_ends);
    free_index_fini(&a->index);
    a->first_segment = a->last_segment = NULL;
}

/* ---- Allocation ---- */

/* The bytes carve() gives an allocation of size at lo inside the free block
 * b: size, plus the remainder after it when that is below min_split. The
 * whole carved block is in use, so all of its pages must be mapped (and
 * counted) before carving: map [lo, lo + carved_size) rather than
 * [lo, lo + size), or an absorbed tail can lie in an unmapped page. */
static inline uint64_t carved_size(const arena *a, const arena_block *b, uintptr_t lo,
                                   uint64_t size)
{
    uint64_t after = b->addr + b->size - (lo + size);
    return after > 0 && after < a->params.min_split ? size + after : size;
}

/* Where an allocation of size bytes goes in the free block b: its high end
 * when asked and a remainder of at least min_split is left before it, else
 * its start (a remainder below min_split stays with the allocation, which
 * then takes the whole block from its start, as carved_size says). */
static inline uintptr_t placement_lo(const arena *a, const arena_block *b, uint64_t size, bool high)
{
    return high && b->size - size >= a->params.min_split ? b->addr + b->size - size : b->addr;
}

/* Makes b an allocated block of size bytes on stream, entered in the
 * address map (its free-index links are no longer needed: not indexed). */
static COOP_INLINE arena_block *mark_allocated(arena *a, arena_block *b, uint64_t size,
                                               coop_stream stream)
{
    block_set_state(b, COOP_BLOCK_ALLOCATED);
    b->stream = stream;
    b->requested = size;
    b->owner = NULL;
    b->uses = NULL;
    addr_map_insert(&a->map, b->addr, b);
    return b;
}

/* Carves [lo, lo + size) out of the free block b (not in the index), leaving
 * the parts before and after it free in the index. A remainder after the
 * allocation smaller than min_split stays with the allocation; the part
 * before it is always split off (exact placement). Needs two spare records. */
COOP_HOT static arena_block *carve(arena *a, arena_block *b, uintptr_t lo, uint64_t size,
                                   coop_stream stream)
{
    uint64_t before = lo - b->addr;
    uint64_t after = b->addr + b->size - (lo + size);
    if (after > 0 && after < a->params.min_split) {
        size += after;
        after = 0;
    }
    arena_block *used = b;
    if (before > 0) {
        /* b keeps its record as the free part before the allocation. */
        used = take_record(a);
        used->addr = lo;
        used->size = b->size - before;
        b->size = before;
        link_after(a, NULL, b, used);
        index_add(a, b);
    }
    if (after > 0) {
        arena_block *rest = take_record(a);
        rest->addr = lo + size;
        rest->size = after;
        block_set_state(rest, COOP_BLOCK_FREE);
        rest->stream = b->stream;
        used->size = size;
        link_after(a, NULL, used, rest);
        index_add(a, rest);
    }
    return mark_allocated(a, used, size, stream);
}

/* Carves an allocation of size bytes from the low or the high end of the
 * free block b (in the index) when that leaves a free part of at least
 * min_split bytes, as most best fits do: the part replaces b in the index in
 * one update, and the free counters change by their net amounts, instead of
 * b leaving the index (and the counters) and the part entering them as
 * carve() does: 3.3% fewer instructions in coop's calls over the bert
 * trace (callgrind). coop bench, alternating runs, medians at 1k / 10k live
 * blocks: 1-4 / 2-11 ns per pair faster over three comparisons (100k: no
 * change), the spread being that of code layout: the same source linked
 * into a binary with other unrelated changes moved the 10k figure by 7 ns. */
COOP_HOT static arena_block *carve_end(arena *a, arena_block *b, bool high, uint64_t size,
                                       coop_stream stream)
{
    uint64_t left_size = b->size - size;
    arena_block *part = take_record(a);
    /* high end: b stays the free part before the allocation; low end: b
     * becomes the allocation and the new record the free rest */
    arena_block *used = high ? part : b, *left = high ? b : part;
    part->addr = high ? b->addr + left_size : b->addr + size;
    part->stream = b->stream;
    /* while b's size (the key it is filed under) is unchanged; this sets
     * the free part's size */
    free_index_replace(&a->index, &b->index_node, &left->index_node, left_size, left->addr,
                       b->stream);
    block_set_state(part, high ? COOP_BLOCK_ALLOCATED : COOP_BLOCK_FREE);
    used->size = size;
    link_after(a, NULL, b, part);
    a->counters.free_bytes -= size;
    /* the free part has a neighbour (the allocation): it counts as split */
    if (b->counted_split) {
        block_set_counted(b, false);
        stat_shrink(&a->counters.inactive_split_bytes, (int64_t)size);
    } else {
        stat_count_up(&a->counters.inactive_split);
        stat_grow(&a->counters.inactive_split_bytes, (int64_t)left_size);
    }
    block_set_counted(left, true);
    return mark_allocated(a, used, size, stream);
}

/* A high placement whose remainder is below min_split (placement_lo): the
 * remainder stays with the allocation, so the whole free block b is taken
 * from its start, and all of its pages must be mapped. Out of line: a
 * placement_lo on arena_alloc's path cost 0.4% of coop bench's instructions
 * (callgrind) for a case that needs a non-default min_split. */
static __attribute__((cold, noinline)) coop_status take_whole(arena *a, arena_block *b,
                                                              bool *reclaimed)
{
    return a->params.vmm ? ensure_mapped(a, a->first_segment, b->addr, b->addr + b->size, reclaimed)
                         : COOP_OK;
}

COOP_HOT coop_status arena_alloc(arena *a, uint64_t size, coop_stream stream, bool high,
                                 arena_block **out, bool *reclaimed)
{
    *out = NULL;
    coop_status st = reserve_records(a, 2);
    if (st == COOP_OK)
        st = reserve_stream(a, stream);
    if (st != COOP_OK)
        return st;
    free_index_node *fit = free_index_best_fit(&a->index, size, stream);
    if (fit) {
        arena_block *b = BLOCK_OF(fit);
        /* placement_lo's rule, split for speed: the high end first (most
         * fits split), the whole block from its start where they do not */
        uintptr_t lo = high ? b->addr + b->size - size : b->addr;
        st = a->params.vmm ? ensure_mapped(a, a->first_segment, lo,
                                           lo + carved_size(a, b, lo, size), reclaimed)
                           : COOP_OK;
        if (st != COOP_OK)
            return st;
        if (b->size - size >= a->params.min_split) {
            *out = carve_end(a, b, high, size, stream);
            return COOP_OK;
        }
        if (__builtin_expect(lo != b->addr, 0)) {
            st = take_whole(a, b, reclaimed);
            if (st != COOP_OK)
                return st;
            lo = b->addr;
        }
        index_del(a, b);
        if (b->size == size) {
            /* an exact fit (a third of bert's small mallocs): carve's
             * tests of the parts before and after, and the call, skipped */
            *out = mark_allocated(a, b, size, stream);
            return COOP_OK;
        }
        *out = carve(a, b, lo, size, stream);
        return COOP_OK;
    }
    if (!a->params.vmm) {
        arena_block *b = NULL; /* set on success; gcc -O1 cannot see it through the retry */
        st = grow_segments(a, size, &b, reclaimed);
        if (st != COOP_OK)
            return st;
        *out = carve(a, b, placement_lo(a, b, size, high), size, stream);
        return COOP_OK;
    }
    /* VMM: grow the tiled range. The last block joins if it is free and usable here. */
    arena_segment *s = a->first_segment;
    arena_block *last = s->last;
    bool extend_last =
        last && last->state == COOP_BLOCK_FREE && arena_tags_mergeable(last->stream, stream);
    uintptr_t lo = extend_last ? last->addr : s->base + s->top;
    uint64_t grow = lo + size - (s->base + s->top);
    if (grow > s->reserved - s->top) {
        a->nomem = ARENA_NOMEM_VA;
        return COOP_ERR_NOMEM;
    }
    st = ensure_mapped(a, s, lo, lo + size, reclaimed);
    if (st != COOP_OK)
        return st;
    arena_block *b;
    if (extend_last) {
        b = last;
        index_del(a, b);
        b->size += grow;
    } else {
        b = take_record(a);
        b->addr = lo;
        b->size = size;
        block_set_state(b, COOP_BLOCK_FREE);
        b->stream = COOP_STREAM_ANY;
        link_after(a, s, last, b);
        if (last)
            recount_split(a, last);
    }
    s->top += grow;
    *out = carve(a, b, lo, size, stream);
    return COOP_OK;
}

coop_status arena_alloc_in(arena *a, arena_block *fb, uintptr_t addr, uint64_t size,
                           coop_stream stream, arena_block **out, bool *reclaimed)
{
    *out = NULL;
    if (fb->state != COOP_BLOCK_FREE || addr < fb->addr || size == 0 || size % COOP_ALIGN ||
        addr % COOP_ALIGN || size > fb->addr + fb->size - addr)
        return coop_set_error(
            COOP_ERR_INVALID, "cannot place [%#lx, +%llu) inside block [%#lx, +%llu) (%s)",
            (unsigned long)addr, (unsigned long long)size, (unsigned long)fb->addr,
            (unsigned long long)fb->size, fb->state == COOP_BLOCK_FREE ? "free" : "not free");
    if (!arena_tags_mergeable(fb->stream, stream))
        return coop_set_error(
            COOP_ERR_INVALID, "free block at %#lx belongs to stream %#lx, not %#lx",
            (unsigned long)fb->addr, (unsigned long)fb->stream, (unsigned long)stream);
    coop_status st = reserve_records(a, 2);
    if (st == COOP_OK)
        st = reserve_stream(a, stream);
    if (st == COOP_OK)
        st = a->params.vmm ? ensure_mapped(a, a->first_segment, addr,
                                           addr + carved_size(a, fb, addr, size), reclaimed)
                           : COOP_OK;
    if (st != COOP_OK)
        return st;
    index_del(a, fb);
    *out = carve(a, fb, addr, size, stream);
    return COOP_OK;
}

/* VMM: whether the placement of size bytes in the free block b, as
 * arena_alloc places it (a remainder below min_split stays), needs at most
 * room bytes of pages mapped; *lo and *len get its range. */
static bool placement_fits(const arena *a, const arena_block *b, uint64_t size, bool high,
                           uint64_t room, uintptr_t *lo, uint64_t *len)
{
    const arena_segment *s = a->first_segment;
    *lo = placement_lo(a, b, size, high);
    *len = carved_size(a, b, *lo, size);
    size_t first = page_floor(a, s, *lo), end = page_ceil(a, s, *lo + *len);
    uint64_t missing = (uint64_t)(end - first - page_map_count(&s->pages, first, end))
                       << a->page_shift;
    return missing <= room;
}

coop_status arena_alloc_mapped(arena *a, uint64_t size, coop_stream stream, bool high,
                               arena_block **out, bool *reclaimed)
{
    *out = NULL;
    /* no free block of size usable on stream (the index holds every free
     * block, by the same stream rule): the walk would find none either, and
     * a caller that evicts and retries (remat's one-at-a-time policies) must
     * not pay a walk per eviction */
    if (!a->params.vmm || !free_index_best_fit(&a->index, size, stream))
        return COOP_ERR_NOMEM;
    uint64_t room = a->nomem == ARENA_NOMEM_CAPACITY && a->params.capacity > a->reserved
                        ? a->params.capacity - a->reserved
                        : 0;
    arena_block *best = NULL;
    uintptr_t best_lo = 0;
    uint64_t best_len = 0;
    /* The free blocks usable on stream (its set and the "any" set, merged)
     * in (size, address) order, the first whose placement fits: best fit's
     * order. Over the free blocks that fit in size, not every block (a
     * walk in address order did that, on every failed retry: per eviction
     * for remat's one-at-a-time policies). */
    free_index_node *own =
        stream == a->index.any ? NULL : free_index_set_fit(&a->index, size, stream);
    free_index_node *any = free_index_set_fit(&a->index, size, a->index.any);
    while (own || any) {
        free_index_node **next =
            !any || (own &&
                     (own->size < any->size || (own->size == any->size && own->addr < any->addr)))
                ? &own
                : &any;
        arena_block *b = BLOCK_OF(*next);
        if (placement_fits(a, b, size, high, room, &best_lo, &best_len)) {
            best = b;
            break;
        }
        *next = free_index_next(&a->index, *next);
    }
    if (!best)
        return COOP_ERR_NOMEM; /* a->nomem stays as the failed attempt left it */
    coop_status st = reserve_records(a, 2);
    if (st == COOP_OK)
        st = reserve_stream(a, stream);
    if (st == COOP_OK)
        st = ensure_mapped(a, a->first_segment, best_lo, best_lo + best_len, reclaimed);
    if (st != COOP_OK)
        return st;
    index_del(a, best); /* (carve_end stays inlined in arena_alloc alone) */
    *out = carve(a, best, best_lo, size, stream);
    return COOP_OK;
}

/* ---- Release and coalescing ---- */

/* b is free and outside the index: merge it with mergeable neighbours (the
 * lower block's record survives), then index the result. When it merges,
 * the result replaces a merged neighbour in the free index in one update
 * (retagged if the merge changes the tag), and the free counters change by
 * their net amounts (as PyTorch's free_block does), instead of every merged
 * neighbour leaving the index and the counters and the result entering
 * them: one free-index update instead of two for a free that merges, the
 * case of most small frees on the bert trace. */
COOP_HOT static arena_block *coalesce(arena *a, arena_block *b)
{
    arena_block *p = b->prev, *n = b->next;
    bool with_prev = p && p->state == COOP_BLOCK_FREE && arena_tags_mergeable(p->stream, b->stream);
    coop_stream tag = with_prev ? merged_tag(p->stream, b->stream) : b->stream;
    bool with_next = n && n->state == COOP_BLOCK_FREE && arena_tags_mergeable(n->stream, tag);
    if (with_next)
        tag = merged_tag(tag, n->stream);
    /* the indexed neighbour whose place in the index the result takes */
    arena_block *kept = with_prev ? p : n;
    if (!with_prev && !with_next) {
        index_add(a, b);
        return b;
    }
    int64_t split_before = 0, split_bytes_before = 0;
    if (with_prev && p->counted_split) {
        split_before++;
        split_bytes_before += (int64_t)p->size;
    }
    if (with_next && n->counted_split) {
        split_before++;
        split_bytes_before += (int64_t)n->size;
    }
    a->counters.free_bytes += b->size;  /* the neighbours' bytes are counted already */
    arena_block *r = with_prev ? p : b; /* the lower record survives */
    uint64_t size = b->size;
    if (with_prev) {
        size += p->size;
        unlink_block(a, b, NULL);
        drop_record(a, b);
    }
    if (with_next) {
        size += n->size;
        if (with_prev)
            free_index_remove(&a->index, &n->index_node);
        unlink_block(a, n, NULL);
        /* with_prev: n left the index above; else the result takes its place */
        if (with_prev)
            drop_record(a, n);
    }
    /* sets r's size and tag (the node's key overlays them); not before:
     * kept may be r, and replace finds kept's set by its old tag */
    free_index_replace(&a->index, &kept->index_node, &r->index_node, size, r->addr, tag);
    if (!with_prev)
        drop_record(a, n); /* only now: replace read its node */
    bool split_now = r->prev || r->next;
    block_set_counted(r, split_now);
    stat_add(&a->counters.inactive_split, (split_now ? 1 : 0) - split_before);
    stat_add(&a->counters.inactive_split_bytes,
             (split_now ? (int64_t)size : 0) - split_bytes_before);
    return r;
}

COOP_HOT arena_block *arena_release(arena *a, arena_block *b, coop_stream tag)
{
    size_t i = a->release_hint;
    if (i <= a->map.mask && a->map.slots[i].key == b->addr)
        addr_map_remove_slot(&a->map, i); /* found by arena_lookup_to_release */
    else
        addr_map_remove(&a->map, b->addr);
    block_set_state(b, COOP_BLOCK_FREE);
    b->stream = tag;
    b->requested = 0; /* owner and uses too: they become free-index links */
    b->owner = NULL;
    b->uses = NULL;
    return coalesce(a, b);
}

/* Whether a free neighbour of b is tagged with a stream still at work:
 * neither any stream nor one of the n in settled. */
static bool borders_busy(const arena_block *b, const coop_stream *settled, size_t n)
{
    const arena_block *side[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++) {
        const arena_block *nb = side[i];
        if (!nb || nb->state != COOP_BLOCK_FREE || nb->stream == COOP_STREAM_ANY)
            continue;
        bool done = false;
        for (size_t k = 0; k < n && !done; k++)
            done = settled[k] == nb->stream;
        if (!done)
            return true;
    }
    return false;
}

/* arena_retag_settled, or (every) each block retagged whatever its
 * neighbours. */
static void retag(arena *a, coop_stream stream, const coop_stream *settled, size_t n, bool every)
{
    if (stream == COOP_STREAM_ANY)
        return;
    arena_block *kept = NULL; /* blocks that keep their tag, out of the index meanwhile */
    free_index_node *fn;
    while ((fn = free_index_first(&a->index, stream)) != NULL) {
        arena_block *b = BLOCK_OF(fn);
        index_del(a, b);
        if (!every && borders_busy(b, settled, n)) {
            /* Out of the index its tree links are unused: they chain the
             * kept blocks. No other block of stream borders it (two would
             * have merged), so no coalesce below reaches it. */
            b->owner = kept;
            kept = b;
            continue;
        }
        b->stream = COOP_STREAM_ANY;
        coalesce(a, b);
    }
    while (kept) {
        arena_block *b = kept;
        kept = b->owner;
        index_add(a, b);
    }
}

void arena_retag_any(arena *a, coop_stream stream)
{
    retag(a, stream, NULL, 0, true);
}

void arena_retag_settled(arena *a, coop_stream stream, const coop_stream *settled, size_t n)
{
    retag(a, stream, settled, n, false);
}

void arena_forget_stream(arena *a, coop_stream stream)
{
    arena_retag_any(a, stream);
    if (free_index_drop(&a->index, stream) && a->reserved_stream == stream)
        a->reserved_stream = COOP_STREAM_ANY; /* its set always exists */
}

/* ---- Reclaiming cached memory ---- */

/* VMM: unmaps pages wholly inside the free run [lo, hi) but outside [keep_lo, keep_hi). */
static coop_status reclaim_run(arena *a, arena_segment *s, uintptr_t lo, uintptr_t hi,
                               uintptr_t keep_lo, uintptr_t keep_hi, uint64_t *released)
{
    size_t first = page_ceil(a, s, lo), end = page_floor(a, s, hi);
    if (first >= end)
        return COOP_OK;
    if (keep_hi > keep_lo && keep_lo < hi && keep_hi > lo) {
        size_t kf = page_floor(a, s, keep_lo > lo ? keep_lo : lo);
        size_t ke = page_ceil(a, s, keep_hi < hi ? keep_hi : hi);
        coop_status st = COOP_OK;
        if (ke < end)
            st = unmap_pages(a, s, ke, end, released);
        if (st == COOP_OK && first < kf)
            st = unmap_pages(a, s, first, kf, released);
        return st;
    }
    return unmap_pages(a, s, first, end, released);
}

/* The streams one reclaim has asked about, so that each is asked once
 * (an event recorded and queried, or waited for). */
#define IDLE_MEMO 8
typedef struct idle_memo {
    coop_stream stream[IDLE_MEMO];
    bool idle[IDLE_MEMO];
    int n;
} idle_memo;

/* Whether no queued work can use a free block tagged tag: tagged any
 * stream (its last users were seen to finish, or it was never used), or its
 * stream is idle now. */
static bool tag_idle(arena *a, coop_stream tag, idle_memo *m)
{
    if (tag == COOP_STREAM_ANY || !a->stream_idle)
        return true;
    for (int i = 0; i < m->n; i++)
        if (m->stream[i] == tag)
            return m->idle[i];
    bool idle = false;
    /* a failure is kept in idle_failure, for the call that needs the
     * memory to report; a call that does not leaves the message as it was */
    coop_error_kept kept;
    coop_error_keep(&kept);
    coop_status st = a->stream_idle(a->stream_idle_ctx, tag, &idle);
    if (st != COOP_OK && a->idle_failure == COOP_OK) {
        a->idle_failure = st;
        coop_format_message(
            a->idle_failure_why, sizeof a->idle_failure_why,
            "cannot tell whether stream %#lx has finished, so its cached memory stays: %s",
            (unsigned long)tag, coop_last_error());
    }
    coop_error_restore(&kept);
    if (m->n < IDLE_MEMO) {
        m->stream[m->n] = tag;
        m->idle[m->n++] = idle;
    }
    return idle;
}

static coop_status reclaim_pages(arena *a, uint64_t want, uintptr_t keep_lo, uintptr_t keep_hi,
                                 uint64_t *released)
{
    arena_segment *s = a->first_segment;
    idle_memo memo = {.n = 0};
    /* Walk down from the end of the reservation: [top, end) is free space
     * too, never used. A free block whose stream may still be using it ends
     * a run as a block in use does. */
    uintptr_t run_hi = s->base + s->reserved, run_lo = s->base + s->top;
    for (arena_block *b = s->last;; b = b->prev) {
        if (b && b->state == COOP_BLOCK_FREE && tag_idle(a, b->stream, &memo)) {
            run_lo = b->addr;
            continue;
        }
        coop_status st = reclaim_run(a, s, run_lo, run_hi, keep_lo, keep_hi, released);
        if (st != COOP_OK)
            return st;
        if (!b || *released >= want)
            return COOP_OK;
        run_hi = run_lo = b->addr;
    }
}

/* A segment whose blocks are all free (possibly several, tagged with
 * different streams and so not merged) and idle. */
static bool segment_idle_free(arena *a, const arena_segment *s, idle_memo *memo)
{
    for (const arena_block *b = s->first; b; b = b->next)
        if (b->state != COOP_BLOCK_FREE)
            return false;
    for (const arena_block *b = s->first; b; b = b->next)
        if (!tag_idle(a, b->stream, memo))
            return false;
    return true;
}

bool arena_may_hold_free_segment(const arena *a)
{
    if (a->index.count > (uint64_t)a->counters.inactive_split.current)
        return true; /* a free block with no neighbour: a whole segment */
    size_t tagged = 0;
    for (size_t i = 0; i < a->index.num_sets; i++)
        if (a->index.sets[i]->stream != a->index.any && a->index.sets[i]->count && ++tagged == 2)
            return true;
    return false;
}

static coop_status reclaim_segments(arena *a, uint64_t want, uint64_t *released)
{
    arena_segment *s = a->last_segment;
    idle_memo memo = {.n = 0};
    /* no segment without a block in use: the walk would release nothing
     * and ask no stream (segment_idle_free stops at a block in use before
     * it asks); on a full pool every refused request paid it, twice with
     * the pool's retry, and a remat search once per eviction */
    if (!arena_may_hold_free_segment(a))
        return COOP_OK;
    while (s && *released < want) {
        arena_segment *prev = s->prev;
        if (segment_idle_free(a, s, &memo)) {
            coop_status st = a->backend->ops->segment_free(a->backend, s->base, s->reserved);
            if (st != COOP_OK)
                return st;
            while (s->first) {
                arena_block *b = s->first;
                index_del(a, b);
                unlink_block(a, b, s);
                drop_record(a, b);
            }
            addr_map_remove(&a->seg_starts, s->base);
            addr_map_remove(&a->seg_ends, s->base + s->reserved);
            segment_unlink(a, s);
            count_mapping(a, s->reserved, false);
            *released += s->reserved;
            segment_destroy(a, s);
        }
        s = prev;
    }
    return COOP_OK;
}

coop_status arena_reclaim(arena *a, uint64_t want, uintptr_t keep_lo, uintptr_t keep_hi,
                          uint64_t *released)
{
    *released = 0;
    a->idle_failure = COOP_OK;
    if (a->params.vmm)
        return reclaim_pages(a, want, keep_lo, keep_hi, released);
    return reclaim_segments(a, want, released);
}
