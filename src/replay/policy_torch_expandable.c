/*
 * `torch-expandable`: an emulation of PyTorch's CUDACachingAllocator under
 * PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (c10/cuda/
 * CUDACachingAllocator.cpp), PyTorch's own remedy for fragmentation and so
 * the peer a virtual-memory allocator has to beat. Written from its rules:
 *  - sizes round up to 512 bytes; rounded sizes <= 1 MiB use the small pool,
 *    larger ones the large pool, as without expandable segments;
 *  - each (stream, pool) grows one expandable segment: a virtual range of
 *    9/8 of the device (here: of the capacity) mapped in pages of 2 MiB
 *    (small pool) or 20 MiB (large pool). A segment's blocks are allocated,
 *    free (mapped) or unmapped; free blocks merge only with free blocks,
 *    unmapped only with unmapped;
 *  - a request first takes the best fit among the pool's free mapped blocks
 *    of its stream, by (size, address), except that it moves on to the next
 *    larger block while that one's "expandable size" (its size plus an
 *    unmapped block right after it) is smaller: it prefers blocks that
 *    cannot grow, keeping the growing end for requests that need it;
 *  - failing that, it takes the unmapped block of its stream, lowest
 *    address first, whose address space (with a free block right before it, and
 *    free or unmapped blocks after) covers the request, and maps pages from
 *    its start until the request fits, merging them with the free block
 *    before. Only where none has room is a new segment reserved;
 *  - a block is split whenever at least 512 bytes remain (both pools: with
 *    expandable segments the large pool's 1 MiB rule is off);
 *  - when mapping would exceed the capacity, every free block's whole pages
 *    are unmapped (release_cached_blocks; a segment left wholly unmapped is
 *    released) and the request is tried once more; failing that, out of
 *    memory. A mapping that fails half way leaves what it mapped, as torch's
 *    does, for that release to unmap.
 * Left out, as in `torch`: stream events (replay frees at free_completed),
 * garbage_collection_threshold, roundup_power2_divisions, max_split_size.
 *
 * Addresses are labels: each segment takes a slot of 9/8 of the capacity
 * above a device-like address, a released one first. Nothing is reserved or mapped on the host
 * (an emulation makes no device accesses, and 9/8 of a large capacity per
 * stream and pool is more address space than a host may want to give).
 * "reserved" is mapped bytes, as torch's reserved_bytes counts them.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "replay/block_map.h"
#include "replay/block_tree.h"
#include "replay/policy.h"
#include "replay/torch_rules.h"
#include "status.h"

/* Where the first segment starts: above any host pointer, like a device's,
 * and a multiple of both pools' pages (20 TiB), as every slot is: pages are
 * found by rounding addresses. */
#define XS_FIRST_ADDR ((uint64_t)TORCH_LARGE_BUFFER << 20)

typedef struct xs_block {
    block_tree_node node; /* key while free or unmapped: (stream, size, addr) */
    uint64_t addr, size, stream;
    bool allocated, mapped, small;
    struct xs_block *prev, *next; /* neighbours inside the segment */
} xs_block;

typedef struct xs_state {
    uint64_t capacity, segment_bytes;
    /* segment labels: slot i is [XS_FIRST_ADDR + i * slot_bytes, + slot_bytes);
     * released slots are taken again first (free_slots, a stack) */
    uint64_t slot_bytes, next_slot, max_slots;
    uint64_t *free_slots;
    size_t num_free_slots, cap_free_slots;
    /* per pool ([small]): free blocks by (stream, size, address), as torch's
     * pool.blocks; unmapped blocks by (stream, address), as its pool.unmapped
     * (filed with size 0) */
    block_tree free[2], unmapped[2];
    block_map allocated; /* address -> allocated block */
    xs_block *spare;     /* recycled records (via next) */
    uint64_t reserved, map_bytes, active, free_bytes, segments;
} xs_state;

static uint64_t page_of(bool small)
{
    return small ? TORCH_SMALL_BUFFER : TORCH_LARGE_BUFFER;
}

static xs_block *block_new(xs_state *s)
{
    xs_block *b = s->spare;
    if (b)
        s->spare = b->next;
    else
        b = malloc(sizeof *b);
    if (b)
        *b = (xs_block){0};
    return b;
}

static void block_recycle(xs_state *s, xs_block *b)
{
    b->next = s->spare;
    s->spare = b;
}

/* The tree a free or unmapped block is kept in. */
static block_tree *tree_of(xs_state *s, const xs_block *b)
{
    return b->mapped ? &s->free[b->small] : &s->unmapped[b->small];
}

static void tree_insert(xs_state *s, xs_block *b)
{
    b->node.stream = b->stream;
    b->node.size = b->mapped ? b->size : 0;
    b->node.addr = b->addr;
    block_tree_insert(tree_of(s, b), &b->node);
    if (b->mapped)
        s->free_bytes += b->size;
}

static void tree_remove(xs_state *s, xs_block *b)
{
    block_tree_remove(tree_of(s, b), &b->node);
    if (b->mapped)
        s->free_bytes -= b->size;
}

/* Splits b at offset at (0 < at < b->size): the new block [b + at, end)
 * follows b with b's state; neither is in a tree. */
static xs_block *split_off(xs_state *s, xs_block *b, uint64_t at)
{
    xs_block *rest = block_new(s);
    if (!rest)
        return NULL;
    *rest = (xs_block){.addr = b->addr + at,
                       .size = b->size - at,
                       .stream = b->stream,
                       .mapped = b->mapped,
                       .small = b->small,
                       .prev = b,
                       .next = b->next};
    if (b->next)
        b->next->prev = rest;
    b->next = rest;
    b->size = at;
    return rest;
}

/* Merges into b (not in a tree) its neighbour n when n is free, or
 * unmapped, as b is (torch's try_merge_blocks); n leaves its tree. */
static void merge_neighbour(xs_state *s, xs_block *b, xs_block *n)
{
    if (!n || n->allocated || n->mapped != b->mapped)
        return;
    tree_remove(s, n);
    if (n == b->prev) {
        b->addr = n->addr;
        b->prev = n->prev;
        if (n->prev)
            n->prev->next = b;
    } else {
        b->next = n->next;
        if (n->next)
            n->next->prev = b;
    }
    b->size += n->size;
    block_recycle(s, n);
}

/* Reserves a new segment for (stream, pool): one unmapped block, in its tree. */
static xs_block *segment_new(xs_state *s, uint64_t stream, bool small)
{
    uint64_t page = page_of(small);
    uint64_t size = torch_round_up(s->segment_bytes, page);
    uint64_t slot;
    if (s->num_free_slots)
        slot = s->free_slots[s->num_free_slots - 1];
    else if (s->next_slot < s->max_slots)
        slot = s->next_slot;
    else
        return NULL; /* more live ranges than 64-bit labels hold: out of memory */
    xs_block *b = block_new(s);
    if (!b)
        return NULL;
    if (s->num_free_slots)
        s->num_free_slots--;
    else
        s->next_slot++;
    *b = (xs_block){.addr = XS_FIRST_ADDR + slot * s->slot_bytes,
                    .size = size,
                    .stream = stream,
                    .small = small};
    s->segments++;
    tree_insert(s, b);
    return b;
}

/* torch's map_block: maps the pages covering the first size bytes of the
 * unmapped block b (in its tree), merges them with free neighbours and
 * files the result as free. NULL when the capacity has no room (b is then
 * untouched). */
static xs_block *map_front(xs_state *s, xs_block *b, uint64_t size)
{
    uint64_t bytes = torch_round_up(size, page_of(b->small));
    if (bytes > b->size)
        bytes = b->size; /* unmapped blocks are whole pages: cannot happen */
    if (bytes > s->capacity - s->reserved)
        return NULL;
    tree_remove(s, b);
    if (bytes < b->size) {
        xs_block *rest = split_off(s, b, bytes);
        if (!rest) {
            tree_insert(s, b);
            return NULL;
        }
        tree_insert(s, rest); /* still unmapped */
    }
    b->mapped = true;
    s->reserved += bytes;
    s->map_bytes += bytes;
    merge_neighbour(s, b, b->prev);
    merge_neighbour(s, b, b->next);
    tree_insert(s, b);
    return b;
}

/* A block a request can grow over: free or unmapped (no events in replay). */
static bool allocatable(const xs_block *b)
{
    return b && !b->allocated;
}

static bool has_room(const xs_block *b, uint64_t size)
{
    uint64_t bytes = 0;
    for (; bytes < size && allocatable(b); b = b->next)
        bytes += b->size;
    return bytes >= size;
}

/* torch's find_expandable_block: the first run of free and unmapped blocks
 * with room, starting at an unmapped block (lowest address first) or the
 * free block right before it; a new segment when none has room. */
static xs_block *find_expandable(xs_state *s, uint64_t stream, bool small, uint64_t size)
{
    block_tree *tree = &s->unmapped[small];
    for (block_tree_node *n = block_tree_lower_bound(tree, stream, 0); n && n->stream == stream;
         n = block_tree_next(tree, n)) {
        xs_block *c = (xs_block *)n;
        if (allocatable(c->prev))
            c = c->prev;
        if (has_room(c, size))
            return c;
    }
    return segment_new(s, stream, small);
}

/* torch's try_allocate_expandable_block: maps until the run from the
 * candidate holds size bytes; the block, out of its tree, or NULL (what was
 * mapped stays mapped and free). */
static xs_block *allocate_expandable(xs_state *s, uint64_t stream, bool small, uint64_t size)
{
    xs_block *c = find_expandable(s, stream, small, size);
    if (!c)
        return NULL;
    if (!c->mapped && !(c = map_front(s, c, c->size < size ? c->size : size)))
        return NULL;
    while (c->size < size) {
        /* free -> unmapped -> ...: map the next block's front; it merges with c */
        uint64_t need = size - c->size;
        xs_block *n = c->next;
        if (!n) /* a request beyond the range: only with a capacity near 2^64 */
            return NULL;
        if (!(c = map_front(s, n, n->size < need ? n->size : need)))
            return NULL;
    }
    tree_remove(s, c);
    return c;
}

/* torch's get_free_block: best fit among the free blocks of the stream,
 * moving on past blocks that could grow into unmapped space. */
static xs_block *best_free(xs_state *s, uint64_t stream, bool small, uint64_t size)
{
    block_tree *tree = &s->free[small];
    block_tree_node *it = block_tree_lower_bound(tree, stream, size);
    if (!it || it->stream != stream)
        return NULL;
    for (;;) {
        block_tree_node *next = block_tree_next(tree, it);
        if (!next || next->stream != stream)
            break;
        const xs_block *a = (const xs_block *)it, *b = (const xs_block *)next;
        uint64_t grow_a = a->size + (a->next && !a->next->mapped ? a->next->size : 0);
        uint64_t grow_b = b->size + (b->next && !b->next->mapped ? b->next->size : 0);
        if (grow_b >= grow_a)
            break;
        it = next;
    }
    xs_block *b = (xs_block *)it;
    tree_remove(s, b);
    return b;
}

/* Collects the free blocks of a tree (unmapping changes the tree). */
typedef struct collected {
    xs_block **out;
    size_t count;
} collected;

static void collect(block_tree_node *n, void *ctx)
{
    collected *c = ctx;
    c->out[c->count++] = (xs_block *)n;
}

/* torch's unmap_block: unmaps the whole pages inside the free block b (in
 * its tree); the parts before and after stay free. */
static void unmap_pages(xs_state *s, xs_block *b)
{
    uint64_t page = page_of(b->small);
    uint64_t lo = torch_round_up(b->addr, page), hi = (b->addr + b->size) / page * page;
    if (lo >= hi)
        return;
    tree_remove(s, b);
    if (hi < b->addr + b->size) {
        xs_block *after = split_off(s, b, hi - b->addr);
        if (!after) {
            tree_insert(s, b);
            return;
        }
        tree_insert(s, after);
    }
    if (lo > b->addr) {
        xs_block *middle = split_off(s, b, lo - b->addr);
        if (!middle) {
            tree_insert(s, b);
            return;
        }
        tree_insert(s, b); /* the part before */
        b = middle;
    }
    b->mapped = false;
    s->reserved -= b->size;
    merge_neighbour(s, b, b->prev);
    merge_neighbour(s, b, b->next);
    if (!b->prev && !b->next) { /* the whole segment unmapped: released */
        /* its slot is labelled again first: torch reserves a new range each
         * time, and labels must not run out over many OOM retries */
        if (s->num_free_slots == s->cap_free_slots) {
            size_t cap = s->cap_free_slots ? 2 * s->cap_free_slots : 8;
            uint64_t *grown = realloc(s->free_slots, cap * sizeof *grown);
            if (!grown) { /* no host memory: the slot stays used, a label lost */
                s->segments--;
                block_recycle(s, b);
                return;
            }
            s->free_slots = grown;
            s->cap_free_slots = cap;
        }
        s->free_slots[s->num_free_slots++] = (b->addr - XS_FIRST_ADDR) / s->slot_bytes;
        s->segments--;
        block_recycle(s, b);
        return;
    }
    tree_insert(s, b);
}

/* torch's release_cached_blocks: large pool first, then small. */
static void release_cached(xs_state *s)
{
    for (int small = 0; small < 2; small++) {
        size_t cap = s->free[small].count;
        collected c = {.out = cap ? malloc(cap * sizeof *c.out) : NULL};
        if (cap && !c.out)
            return; /* no host memory: behave as if nothing were cached */
        block_tree_each(&s->free[small], collect, &c);
        for (size_t i = 0; i < c.count; i++)
            unmap_pages(s, c.out[i]);
        free(c.out);
    }
}

static coop_status xs_create(uint64_t capacity, uint64_t page, void **state)
{
    (void)page; /* the pages are torch's: 2 MiB small, 20 MiB large */
    xs_state *s = calloc(1, sizeof *s);
    if (!s)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "torch-expandable policy: out of host memory");
    s->capacity = capacity;
    /* 9/8 of the device, as torch reserves; at least one page of each pool */
    uint64_t ninth = capacity / 8;
    s->segment_bytes = capacity > UINT64_MAX / 2 ? UINT64_MAX / 4 : capacity + ninth;
    if (s->segment_bytes < TORCH_LARGE_BUFFER)
        s->segment_bytes = TORCH_LARGE_BUFFER;
    /* slots of whole large pages, so both pools' pages align */
    s->slot_bytes = torch_round_up(s->segment_bytes, TORCH_LARGE_BUFFER);
    s->max_slots = (UINT64_MAX - XS_FIRST_ADDR) / s->slot_bytes;
    *state = s;
    return COOP_OK;
}

static coop_status xs_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    xs_state *s = state;
    uint64_t rounded = torch_round_size(size);
    bool small = rounded <= TORCH_SMALL_SIZE;
    xs_block *b = best_free(s, stream, small, rounded);
    if (!b)
        b = allocate_expandable(s, stream, small, rounded);
    if (!b) {
        release_cached(s);
        b = allocate_expandable(s, stream, small, rounded);
    }
    if (!b)
        return coop_set_error(COOP_ERR_NOMEM,
                              "torch-expandable policy: %llu bytes do not fit (mapped %llu of "
                              "%llu)",
                              (unsigned long long)size, (unsigned long long)s->reserved,
                              (unsigned long long)s->capacity);
    if (b->size - rounded >= TORCH_MIN_BLOCK) {
        xs_block *rest = split_off(s, b, rounded);
        if (!rest) {
            tree_insert(s, b);
            return coop_set_error(COOP_ERR_HOST_NOMEM,
                                  "torch-expandable policy: out of host memory");
        }
        tree_insert(s, rest);
    }
    if (!block_map_put(&s->allocated, (uintptr_t)b->addr, b)) {
        merge_neighbour(s, b, b->next); /* the remainder split off above: whole again */
        tree_insert(s, b);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "torch-expandable policy: out of host memory");
    }
    b->allocated = true;
    s->active += b->size;
    *addr = (uintptr_t)b->addr;
    return COOP_OK;
}

static coop_status xs_free(void *state, uintptr_t addr, uint64_t size)
{
    (void)size;
    xs_state *s = state;
    xs_block *b = block_map_take(&s->allocated, addr);
    if (!b)
        return coop_set_error(COOP_ERR_FOREIGN_PTR,
                              "torch-expandable policy: free of unknown address %#llx",
                              (unsigned long long)addr);
    b->allocated = false;
    s->active -= b->size;
    merge_neighbour(s, b, b->prev);
    merge_neighbour(s, b, b->next);
    tree_insert(s, b);
    return COOP_OK;
}

static void xs_stats(void *state, replay_policy_stats *out)
{
    xs_state *s = state;
    uint64_t a = block_tree_max_size(&s->free[0]), b = block_tree_max_size(&s->free[1]);
    *out = (replay_policy_stats){
        .reserved_bytes = s->reserved,
        .map_bytes = s->map_bytes,
        .active_bytes = s->active,
        .free_bytes = s->free_bytes,
        .largest_free = a > b ? a : b,
        .has_free_blocks = true,
    };
}

static void free_record(block_tree_node *n, void *ctx)
{
    (void)ctx;
    free(n); /* the node is the record's first member */
}

static void xs_destroy(void *state)
{
    xs_state *s = state;
    if (!s)
        return;
    for (int small = 0; small < 2; small++) {
        block_tree_each(&s->free[small], free_record, NULL);
        block_tree_each(&s->unmapped[small], free_record, NULL);
    }
    if (s->allocated.slots)
        for (size_t i = 0; i <= s->allocated.mask; i++)
            free(s->allocated.slots[i].value);
    block_map_free(&s->allocated);
    while (s->spare) {
        xs_block *next = s->spare->next;
        free(s->spare);
        s->spare = next;
    }
    free(s->free_slots);
    free(s);
}

/* ---- checking (tests and fuzzers) ---------------------------------------- */

typedef struct check_walk {
    const xs_state *s;
    bool small, in_free; /* the tree being walked */
    uint64_t bytes;      /* sizes summed */
    const char *broken;  /* the first invariant found broken */
    uint64_t at;         /* its block's address */
} check_walk;

/* The invariants every block keeps, wherever it is filed. */
static const char *block_broken(const xs_block *b)
{
    uint64_t page = page_of(b->small);
    if (b->prev && (b->prev->addr + b->prev->size != b->addr || b->prev->next != b ||
                    b->prev->small != b->small || b->prev->stream != b->stream))
        return "a block and its previous neighbour do not meet";
    if (b->next && (b->addr + b->size != b->next->addr || b->next->prev != b))
        return "a block and its next neighbour do not meet";
    if (!b->mapped && (b->addr % page || b->size % page))
        return "an unmapped block is not whole pages";
    if (b->prev && b->prev->mapped != b->mapped && b->addr % page)
        return "a mapped / unmapped edge is not on a page boundary";
    const xs_block *sides[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++)
        if (sides[i] && !sides[i]->allocated && !b->allocated && sides[i]->mapped == b->mapped)
            return b->mapped ? "two free blocks side by side (unmerged)"
                             : "two unmapped blocks side by side (unmerged)";
    return NULL;
}

static void check_filed(block_tree_node *n, void *ctx)
{
    check_walk *w = ctx;
    const xs_block *b = (const xs_block *)n;
    const char *broken = NULL;
    if (b->allocated || b->mapped != w->in_free || b->small != w->small)
        broken = w->in_free ? "the free tree holds a block that is not free in its pool"
                            : "the unmapped tree holds a block that is not unmapped in its pool";
    else if (n->stream != b->stream || n->addr != b->addr || n->size != (b->mapped ? b->size : 0))
        broken = "a block's tree key does not match the block";
    else
        broken = block_broken(b);
    if (broken && !w->broken) {
        w->broken = broken;
        w->at = b->addr;
    }
    w->bytes += b->size;
}

static coop_status xs_check(void *state)
{
    const xs_state *s = state;
    uint64_t free_bytes = 0;
    for (int small = 0; small < 2; small++) {
        for (int in_free = 0; in_free < 2; in_free++) {
            check_walk w = {.s = s, .small = small, .in_free = in_free};
            block_tree_each(in_free ? &s->free[small] : &s->unmapped[small], check_filed, &w);
            if (w.broken)
                return coop_set_error(COOP_ERR_INVALID, "torch-expandable: %s (at %#llx)", w.broken,
                                      (unsigned long long)w.at);
            if (in_free)
                free_bytes += w.bytes;
        }
    }
    uint64_t active = 0;
    if (s->allocated.slots)
        for (size_t i = 0; i <= s->allocated.mask; i++) {
            const xs_block *b = s->allocated.slots[i].value;
            if (!s->allocated.slots[i].key)
                continue;
            const char *broken = !b->allocated || !b->mapped || b->addr != s->allocated.slots[i].key
                                     ? "the address map holds a block that is not allocated there"
                                     : block_broken(b);
            if (broken)
                return coop_set_error(COOP_ERR_INVALID, "torch-expandable: %s (at %#llx)", broken,
                                      (unsigned long long)b->addr);
            active += b->size;
        }
    if (free_bytes != s->free_bytes || active != s->active)
        return coop_set_error(COOP_ERR_INVALID,
                              "torch-expandable: counted %llu free and %llu active bytes, the "
                              "totals say %llu and %llu",
                              (unsigned long long)free_bytes, (unsigned long long)active,
                              (unsigned long long)s->free_bytes, (unsigned long long)s->active);
    if (s->reserved != free_bytes + active || s->reserved > s->capacity)
        return coop_set_error(COOP_ERR_INVALID,
                              "torch-expandable: %llu bytes mapped, not the %llu free and active "
                              "(or above the capacity %llu)",
                              (unsigned long long)s->reserved,
                              (unsigned long long)(free_bytes + active),
                              (unsigned long long)s->capacity);
    return COOP_OK;
}

const replay_policy_ops replay_policy_torch_expandable = {
    .name = "torch-expandable",
    .summary = "emulation of PyTorch's allocator with expandable_segments:True (one growing "
               "range per stream and pool, 2 / 20 MiB pages)",
    .create = xs_create,
    .malloc = xs_malloc,
    .free = xs_free,
    .stats = xs_stats,
    .destroy = xs_destroy,
    .check = xs_check,
};
