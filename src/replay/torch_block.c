/* Block records of the PyTorch emulations: see torch_block.h. */
#include "replay/torch_block.h"

#include <stdlib.h>

#include "replay/torch_rules.h"

torch_block *torch_block_new(torch_blocks *t)
{
    torch_block *b = t->spare;
    if (b)
        t->spare = b->next;
    else
        b = malloc(sizeof *b);
    if (b)
        *b = (torch_block){0};
    return b;
}

void torch_block_recycle(torch_blocks *t, torch_block *b)
{
    b->next = t->spare;
    t->spare = b;
}

static block_tree *tree_of(torch_blocks *t, const torch_block *b)
{
    return b->mapped ? &t->free[b->small] : &t->unmapped[b->small];
}

/* Whether filed block b belongs in its pool's list of whole free segments. */
static bool spans_segment(const torch_block *b)
{
    return b->mapped && !b->prev && !b->next;
}

void torch_block_file(torch_blocks *t, torch_block *b)
{
    b->node.stream = b->stream;
    b->node.size = b->mapped ? b->size : 0; /* unmapped: by (stream, address) */
    b->node.addr = b->addr;
    block_tree_insert(tree_of(t, b), &b->node);
    if (b->mapped)
        t->free_bytes += b->size;
    if (spans_segment(b)) {
        b->whole_prev = NULL;
        b->whole_next = t->whole[b->small];
        if (b->whole_next)
            b->whole_next->whole_prev = b;
        t->whole[b->small] = b;
        t->num_whole[b->small]++;
    }
}

void torch_block_unfile(torch_blocks *t, torch_block *b)
{
    block_tree_remove(tree_of(t, b), &b->node);
    if (b->mapped)
        t->free_bytes -= b->size;
    if (spans_segment(b)) {
        if (b->whole_prev)
            b->whole_prev->whole_next = b->whole_next;
        else
            t->whole[b->small] = b->whole_next;
        if (b->whole_next)
            b->whole_next->whole_prev = b->whole_prev;
        b->whole_prev = b->whole_next = NULL;
        t->num_whole[b->small]--;
    }
}

torch_block *torch_block_split(torch_blocks *t, torch_block *b, uint64_t at)
{
    torch_block *rest = torch_block_new(t);
    if (!rest)
        return NULL;
    *rest = (torch_block){.addr = b->addr + at,
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

void torch_block_merge(torch_blocks *t, torch_block *b, torch_block *n)
{
    if (!n || n->allocated || n->mapped != b->mapped)
        return;
    torch_block_unfile(t, n);
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
    torch_block_recycle(t, n);
}

coop_status torch_blocks_allocate(torch_blocks *t, torch_block *b, const char *policy)
{
    if (!block_map_put(&t->allocated, (uintptr_t)b->addr, b)) {
        torch_block_merge(t, b, b->next); /* a remainder split off: whole again */
        torch_block_file(t, b);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s policy: out of host memory", policy);
    }
    b->allocated = true;
    t->active += b->size;
    return COOP_OK;
}

coop_status torch_blocks_free(torch_blocks *t, uintptr_t addr, const char *policy)
{
    torch_block *b = block_map_take(&t->allocated, addr);
    if (!b)
        return coop_set_error(COOP_ERR_FOREIGN_PTR, "%s policy: free of unknown address %#llx",
                              policy, (unsigned long long)addr);
    b->allocated = false;
    t->active -= b->size;
    torch_block_merge(t, b, b->prev);
    torch_block_merge(t, b, b->next);
    torch_block_file(t, b);
    return COOP_OK;
}

void torch_blocks_reserve(torch_blocks *t, uint64_t bytes)
{
    t->reserved += bytes;
    t->map_bytes = saturating_add_u64(t->map_bytes, bytes);
    if (t->reserved > t->peak_reserved)
        t->peak_reserved = t->reserved;
}

void torch_blocks_stats(const torch_blocks *t, replay_policy_stats *out)
{
    uint64_t a = block_tree_max_size(&t->free[0]), b = block_tree_max_size(&t->free[1]);
    *out = (replay_policy_stats){
        .reserved_bytes = t->reserved,
        .peak_reserved_bytes = t->peak_reserved,
        .map_bytes = t->map_bytes,
        .active_bytes = t->active,
        .free_bytes = t->free_bytes,
        .largest_free = a > b ? a : b,
        .has_free_blocks = true,
    };
}

typedef struct collected {
    torch_block **out;
    size_t count;
} collected;

static void collect_free(block_tree_node *n, void *ctx)
{
    collected *c = ctx;
    c->out[c->count++] = (torch_block *)n; /* the node is the record's first member */
}

bool torch_blocks_collect_free(const torch_blocks *t, bool small, torch_block ***out, size_t *count)
{
    const block_tree *tree = &t->free[small];
    collected c = {.out = tree->count ? malloc(tree->count * sizeof *c.out) : NULL};
    *out = NULL;
    *count = 0;
    if (tree->count && !c.out)
        return false;
    block_tree_each(tree, collect_free, &c);
    *out = c.out;
    *count = c.count;
    return true;
}

torch_block *torch_blocks_first_whole(const torch_blocks *t, bool small)
{
    return t->whole[small];
}

typedef struct each_ctx {
    void (*fn)(torch_block *, void *);
    void *ctx;
} each_ctx;

static void each_filed(block_tree_node *n, void *ctx)
{
    each_ctx *e = ctx;
    e->fn((torch_block *)n, e->ctx); /* the node is the record's first member */
}

void torch_blocks_each(const torch_blocks *t, void (*fn)(torch_block *, void *), void *ctx)
{
    each_ctx e = {fn, ctx};
    for (int small = 0; small < 2; small++) {
        block_tree_each(&t->free[small], each_filed, &e);
        block_tree_each(&t->unmapped[small], each_filed, &e);
    }
    if (t->allocated.slots)
        for (size_t i = 0; i <= t->allocated.mask; i++)
            if (t->allocated.slots[i].key)
                fn(t->allocated.slots[i].value, ctx);
}

/* ---- checking (tests and fuzzers) ---------------------------------------- */

/* The invariants every block keeps, wherever it is filed. */
static const char *block_broken(const torch_block *b)
{
    uint64_t page = torch_page_of(b->small);
    if (b->prev && (b->prev->addr + b->prev->size != b->addr || b->prev->next != b ||
                    b->prev->small != b->small || b->prev->stream != b->stream))
        return "a block and its previous neighbour do not meet";
    if (b->next && (b->addr + b->size != b->next->addr || b->next->prev != b))
        return "a block and its next neighbour do not meet";
    if (!b->mapped && (b->addr % page || b->size % page))
        return "an unmapped block is not whole pages";
    if (b->prev && b->prev->mapped != b->mapped && b->addr % page)
        return "a mapped / unmapped edge is not on a page boundary";
    const torch_block *sides[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++)
        if (sides[i] && !sides[i]->allocated && !b->allocated && sides[i]->mapped == b->mapped)
            return b->mapped ? "two free blocks side by side (unmerged)"
                             : "two unmapped blocks side by side (unmerged)";
    return NULL;
}

typedef struct check_walk {
    const torch_blocks *t;
    bool small, in_free; /* the tree being walked */
    uint64_t bytes;      /* sizes summed */
    size_t whole;        /* blocks spanning a whole segment */
    const char *broken;  /* the first invariant found broken */
    uint64_t at;         /* its block's address */
} check_walk;

static void check_filed(block_tree_node *n, void *ctx)
{
    check_walk *w = ctx;
    const torch_block *b = (const torch_block *)n;
    const char *broken = NULL;
    if (b->allocated || b->mapped != w->in_free || b->small != w->small)
        broken = w->in_free ? "the free tree holds a block that is not free in its pool"
                            : "the unmapped tree holds a block that is not unmapped in its pool";
    else if (n->stream != b->stream || n->addr != b->addr || n->size != (b->mapped ? b->size : 0))
        broken = "a block's tree key does not match the block";
    else
        broken = block_broken(b);
    if (!broken && w->in_free && !b->prev && !b->next) {
        w->whole++;
        /* linked into its pool's list: the head, or its predecessor's next
         * (check_whole_list walks the list and compares the counts) */
        const torch_block *at = b->whole_prev ? b->whole_prev->whole_next : w->t->whole[b->small];
        if (at != b)
            broken = "a free block spanning a segment is not in its pool's list";
    }
    if (broken && !w->broken) {
        w->broken = broken;
        w->at = b->addr;
    }
    w->bytes += b->size;
}

/* Whether pool small's list of whole free segments holds whole blocks only,
 * each free, mapped and filed in the pool (the tree walk counted expected
 * of them), its links and count consistent. */
static bool check_whole_list(const torch_blocks *t, bool small, size_t expected)
{
    size_t n = 0;
    const torch_block *before = NULL;
    for (const torch_block *b = t->whole[small]; b; before = b, b = b->whole_next) {
        if (++n > expected || b->whole_prev != before || b->allocated || !b->mapped || b->prev ||
            b->next || b->small != small)
            return false;
    }
    return n == expected && t->num_whole[small] == expected;
}

coop_status torch_blocks_check(const torch_blocks *t, const char *policy, uint64_t capacity)
{
    uint64_t free_bytes = 0;
    for (int small = 0; small < 2; small++) {
        for (int in_free = 0; in_free < 2; in_free++) {
            check_walk w = {.t = t, .small = small, .in_free = in_free};
            block_tree_each(in_free ? &t->free[small] : &t->unmapped[small], check_filed, &w);
            if (w.broken)
                return coop_set_error(COOP_ERR_INVALID, "%s: %s (at %#llx)", policy, w.broken,
                                      (unsigned long long)w.at);
            if (in_free)
                free_bytes += w.bytes;
            if (in_free && !check_whole_list(t, small, w.whole))
                return coop_set_error(COOP_ERR_INVALID,
                                      "%s: the list of whole free segments does not hold exactly "
                                      "the %zu free blocks that span a segment (small pool: %d)",
                                      policy, w.whole, small);
        }
    }
    uint64_t active = 0;
    if (t->allocated.slots)
        for (size_t i = 0; i <= t->allocated.mask; i++) {
            const torch_block *b = t->allocated.slots[i].value;
            if (!t->allocated.slots[i].key)
                continue;
            const char *broken = !b->allocated || !b->mapped || b->addr != t->allocated.slots[i].key
                                     ? "the address map holds a block that is not allocated there"
                                     : block_broken(b);
            if (broken)
                return coop_set_error(COOP_ERR_INVALID, "%s: %s (at %#llx)", policy, broken,
                                      (unsigned long long)b->addr);
            active += b->size;
        }
    if (free_bytes != t->free_bytes || active != t->active)
        return coop_set_error(COOP_ERR_INVALID,
                              "%s: counted %llu free and %llu active bytes, the totals say %llu "
                              "and %llu",
                              policy, (unsigned long long)free_bytes, (unsigned long long)active,
                              (unsigned long long)t->free_bytes, (unsigned long long)t->active);
    if (t->reserved != free_bytes + active || t->reserved > capacity)
        return coop_set_error(COOP_ERR_INVALID,
                              "%s: %llu bytes reserved, not the %llu free and active (or above "
                              "the capacity %llu)",
                              policy, (unsigned long long)t->reserved,
                              (unsigned long long)(free_bytes + active),
                              (unsigned long long)capacity);
    return COOP_OK;
}

static void free_record(torch_block *b, void *ctx)
{
    (void)ctx;
    free(b);
}

void torch_blocks_destroy(torch_blocks *t)
{
    torch_blocks_each(t, free_record, NULL); /* each frees only what it was given */
    block_map_free(&t->allocated);
    while (t->spare) {
        torch_block *next = t->spare->next;
        free(t->spare);
        t->spare = next;
    }
}

uint64_t torch_capacity_step(uint64_t page)
{
    (void)page;
    return TORCH_ROUND_LARGE;
}
