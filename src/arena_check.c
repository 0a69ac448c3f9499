/* Arena checker: validates every invariant listed in arena.h by a full walk. */
#include <stdarg.h>
#include <stdio.h>

#include "arena.h"
#include "stat.h"

static bool fail(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool fail(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return false;
}

static inline bool mergeable(coop_stream a, coop_stream b)
{
    return a == b || a == COOP_STREAM_ANY || b == COOP_STREAM_ANY;
}

/* Pages overlapped by non-free blocks must be mapped (VMM). */
static bool check_pages(const arena *a, const arena_segment *s, const arena_block *b, char *msg,
                        size_t len)
{
    uint64_t ps = a->params.page_size;
    size_t first = (size_t)((b->addr - s->base) / ps);
    size_t end = (size_t)((b->addr + b->size - s->base + ps - 1) / ps);
    size_t mapped = page_map_count(&s->pages, first, end);
    if (mapped != end - first)
        return fail(msg, len, "block [%#lx, +%llu) is in use but %zu of its %zu pages are unmapped",
                    (unsigned long)b->addr, (unsigned long long)b->size, end - first - mapped,
                    end - first);
    return true;
}

static bool check_segment(const arena *a, const arena_segment *s, char *msg, size_t len,
                          uint64_t *free_bytes, size_t *free_blocks, int64_t *split,
                          int64_t *split_bytes, size_t *blocks)
{
    uintptr_t expect = s->base;
    size_t n = 0;
    const arena_block *prev = NULL;
    if (s->top > s->reserved)
        return fail(msg, len, "segment %#lx: top %llu beyond its %llu reserved bytes",
                    (unsigned long)s->base, (unsigned long long)s->top,
                    (unsigned long long)s->reserved);
    for (const arena_block *b = s->first; b; prev = b, b = b->next) {
        if (b->prev != prev || ((!b->prev || !b->next) && arena_block_segment(a, b) != s))
            return fail(msg, len, "block %#lx: broken prev or segment link",
                        (unsigned long)b->addr);
        if (b->addr != expect)
            return fail(msg, len,
                        "segment %#lx: block at %#lx where %#lx was expected (gap or overlap)",
                        (unsigned long)s->base, (unsigned long)b->addr, (unsigned long)expect);
        if (b->size == 0 || b->size % COOP_ALIGN || b->addr % COOP_ALIGN)
            return fail(msg, len, "block [%#lx, +%llu): not a positive multiple of %u bytes",
                        (unsigned long)b->addr, (unsigned long long)b->size, COOP_ALIGN);
        if (b->size > s->base + s->top - b->addr)
            return fail(msg, len, "block [%#lx, +%llu) ends beyond the segment's top",
                        (unsigned long)b->addr, (unsigned long long)b->size);
        bool is_free = b->state == COOP_BLOCK_FREE;
        if (arena_lookup(a, b->addr) != (is_free ? NULL : b))
            return fail(msg, len, "block %#lx (%s) is %s the address map", (unsigned long)b->addr,
                        is_free ? "free" : "in use", is_free ? "in" : "missing from");
        if (is_free) {
            if (prev && prev->state == COOP_BLOCK_FREE && mergeable(prev->stream, b->stream))
                return fail(msg, len, "free blocks %#lx and %#lx are adjacent and mergeable",
                            (unsigned long)prev->addr, (unsigned long)b->addr);
            if (!free_index_contains(&a->index, &b->index_node) || b->index_node.size != b->size ||
                b->index_node.addr != b->addr || b->index_node.stream != b->stream)
                return fail(msg, len,
                            "free block [%#lx, +%llu) is not in the free index under its key",
                            (unsigned long)b->addr, (unsigned long long)b->size);
            bool split_now = b->prev || b->next;
            if (split_now != b->counted_split)
                return fail(msg, len, "free block %#lx: inactive-split accounting is stale",
                            (unsigned long)b->addr);
            *free_bytes += b->size;
            (*free_blocks)++;
            if (split_now) {
                (*split)++;
                *split_bytes += (int64_t)b->size;
            }
        } else {
            if (b->state != COOP_BLOCK_ALLOCATED && b->state != COOP_BLOCK_PENDING)
                return fail(msg, len, "block %#lx has an unknown state %d", (unsigned long)b->addr,
                            (int)b->state);
            if (b->counted_split)
                return fail(msg, len, "block %#lx in use is counted as inactive split",
                            (unsigned long)b->addr);
            if (b->stream == COOP_STREAM_ANY)
                return fail(msg, len, "block %#lx in use has no stream", (unsigned long)b->addr);
            if (a->params.vmm && !check_pages(a, s, b, msg, len))
                return false;
        }
        expect = b->addr + b->size;
        n++;
    }
    if (s->last != prev)
        return fail(msg, len, "segment %#lx: last block link is stale", (unsigned long)s->base);
    if (expect != s->base + s->top)
        return fail(msg, len, "segment %#lx: blocks end at %#lx but the top is %#lx",
                    (unsigned long)s->base, (unsigned long)expect,
                    (unsigned long)(s->base + s->top));
    if (!a->params.vmm && (s->top != s->reserved || n == 0))
        return fail(msg, len, "segment %#lx: not wholly tiled", (unsigned long)s->base);
    *blocks += n;
    return true;
}

bool arena_check(const arena *a, char *msg, size_t len)
{
    const char *why = free_index_check(&a->index);
    if (why)
        return fail(msg, len, "%s", why);
    uint64_t free_bytes = 0, reserved = 0;
    size_t free_blocks = 0, blocks = 0, segments = 0;
    int64_t split = 0, split_bytes = 0;
    const arena_segment *prev = NULL;
    for (const arena_segment *s = a->first_segment; s; prev = s, s = s->next) {
        if (s->prev != prev)
            return fail(msg, len, "segment %#lx: broken prev link", (unsigned long)s->base);
        if (prev && prev->base + prev->reserved > s->base)
            return fail(msg, len, "segments %#lx and %#lx overlap or are out of order",
                        (unsigned long)prev->base, (unsigned long)s->base);
        if (!check_segment(a, s, msg, len, &free_bytes, &free_blocks, &split, &split_bytes,
                           &blocks))
            return false;
        if (a->params.vmm) {
            size_t pop = page_map_popcount(&s->pages);
            if (pop != s->pages.num_mapped)
                return fail(msg, len, "segment %#lx: %zu pages mapped, counted as %zu",
                            (unsigned long)s->base, pop, s->pages.num_mapped);
            reserved += (uint64_t)pop * a->params.page_size;
        } else {
            reserved += s->reserved;
        }
        segments++;
    }
    if (a->last_segment != prev || segments != a->num_segments)
        return fail(msg, len, "segment list: last link or count is stale");
    if (reserved != a->reserved || (int64_t)reserved != a->counters.reserved_bytes.current)
        return fail(msg, len, "reserved bytes: walk finds %llu, counters say %llu / %lld",
                    (unsigned long long)reserved, (unsigned long long)a->reserved,
                    (long long)a->counters.reserved_bytes.current);
    if (reserved > a->params.capacity)
        return fail(msg, len, "reserved bytes %llu exceed the capacity %llu",
                    (unsigned long long)reserved, (unsigned long long)a->params.capacity);
    if ((int64_t)segments != a->counters.segment.current)
        return fail(msg, len, "segments: walk finds %zu, counter says %lld", segments,
                    (long long)a->counters.segment.current);
    if (free_blocks != a->index.count)
        return fail(msg, len, "free index holds %zu blocks, the walk finds %zu free",
                    a->index.count, free_blocks);
    if (free_bytes != a->counters.free_bytes)
        return fail(msg, len, "free bytes: walk finds %llu, counter says %llu",
                    (unsigned long long)free_bytes, (unsigned long long)a->counters.free_bytes);
    if (split != a->counters.inactive_split.current ||
        split_bytes != a->counters.inactive_split_bytes.current)
        return fail(msg, len,
                    "inactive split: walk finds %lld blocks / %lld bytes, counters say "
                    "%lld / %lld",
                    (long long)split, (long long)split_bytes,
                    (long long)a->counters.inactive_split.current,
                    (long long)a->counters.inactive_split_bytes.current);
    if (blocks != a->counters.num_blocks || blocks - free_blocks != a->map.count)
        return fail(msg, len, "address map holds %zu entries, the walk finds %zu blocks in use",
                    a->map.count, blocks - free_blocks);
    const coop_stat *stats[] = {&a->counters.segment, &a->counters.reserved_bytes,
                                &a->counters.inactive_split, &a->counters.inactive_split_bytes};
    static const char *const names[] = {"segment", "reserved_bytes", "inactive_split",
                                        "inactive_split_bytes"};
    for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++)
        if (!stat_sound(stats[i]))
            return fail(msg, len, "counter %s: current %lld, peak %lld, added %lld, removed %lld",
                        names[i], (long long)stats[i]->current, (long long)stats[i]->peak,
                        (long long)stats[i]->allocated, (long long)stats[i]->freed);
    size_t seg_keys = a->params.vmm ? 0 : a->num_segments;
    if (a->seg_starts.count != seg_keys || a->seg_ends.count != seg_keys)
        return fail(msg, len, "segment maps hold %zu / %zu entries for %zu segments",
                    a->seg_starts.count, a->seg_ends.count, seg_keys);
    return true;
}
