/*
 * libFuzzer harness: an API sequence read from the input drives a host-backend
 * pool (and a remat context over it) through coop_malloc, coop_free (valid,
 * double, interior and foreign pointers), coop_record_stream,
 * coop_empty_cache, coop_set_capacity, coop_forget_stream,
 * coop_host_hold_stream and coop_host_busy_stream (a busy stream the pool may
 * wait for, on pools that wait and pools that never do), injected backend
 * faults and the tensor calls of the remat API.
 *
 * Checked after every step: the call returned a status from its documented
 * set, and coop_pool_check() holds. At the end, once every hold and fault is
 * lifted and everything freed, empty_cache must leave nothing mapped, no
 * allocation and no segment (no leaked pages, events or records), and
 * LeakSanitizer checks the host heap at exit.
 *
 * FUZZ_API_NO_REMAT=1 leaves the remat calls out (to fuzz the pool alone).
 *
 * Input layout: byte 0 picks the pool configuration, then each step is an
 * opcode byte followed by the argument bytes it reads (missing bytes read 0).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coop.h"
#include "fuzz_input.h"
#include "remat/remat_internal.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define SLOTS 32
#define TENSORS 16
#define STREAMS 4
#define MAX_STEPS 256

typedef struct slot {
    void *ptr;
    size_t size;
} slot;

typedef struct state {
    coop_pool *pool;
    coop_remat *remat;
    uint64_t capacity;
    slot live[SLOTS];
    void *stale[SLOTS]; /* pointers freed before: double-free candidates */
    coop_tensor *tensors[TENSORS];
    bool pinned[TENSORS];
    size_t num_tensors;
} state;

static void fail(const char *what, coop_status st)
{
    fprintf(stderr, "%s: unexpected %s: %s\n", what, coop_strerror(st), coop_last_error());
    abort();
}

/* Statuses any call may return once backend faults or capacity pressure are in play. */
static bool resource_status(coop_status st)
{
    return st == COOP_OK || st == COOP_ERR_NOMEM || st == COOP_ERR_BACKEND ||
           st == COOP_ERR_HOST_NOMEM;
}

static void check_pool(state *s, const char *after)
{
    coop_status st = coop_pool_check(s->pool);
    if (st != COOP_OK)
        fail(after, st);
}

/* A size: mostly small or page-scale, sometimes 0, odd, near the capacity or huge. */
static size_t pick_size(fuzz_input *in, uint64_t capacity)
{
    unsigned kind = fuzz_byte(in), v = fuzz_u16(in);
    switch (kind & 7) {
    case 0:
        return 0;
    case 1:
        return (size_t)v + 1; /* unaligned, tiny */
    case 2:
    case 3:
        return (size_t)v * 512;
    case 4:
        return (size_t)(v % 64 + 1) * 2 * MiB - (kind >> 3) * 512;
    case 5:
        return (size_t)(capacity - v * KiB % capacity);
    case 6:
        return (size_t)capacity + v;
    default:
        return SIZE_MAX - v; /* overflows any rounding */
    }
}

static bool is_live(const state *s, const void *p)
{
    for (int i = 0; i < SLOTS; i++)
        if (s->live[i].ptr == p)
            return true;
    return false;
}

static void op_malloc(state *s, fuzz_input *in)
{
    unsigned i = fuzz_byte(in) % SLOTS, stream = fuzz_byte(in);
    size_t size = pick_size(in, s->capacity);
    if (s->live[i].ptr)
        return;
    coop_status st = COOP_ERR_CORRUPT;
    /* now and then the reserved stream value or undefined flags: refused */
    coop_stream on = stream & 0x20 ? UINTPTR_MAX : stream % STREAMS;
    void *p = coop_malloc(s->pool, size, on, stream >> 6, &st);
    if (p && st != COOP_OK)
        fail("malloc returned a block", st);
    if (!p && (st == COOP_OK ? size != 0 : !(resource_status(st) || st == COOP_ERR_INVALID)))
        fail("malloc returned NULL", st);
    s->live[i] = (slot){p, size};
}

static void op_free(state *s, fuzz_input *in)
{
    unsigned i = fuzz_byte(in) % SLOTS;
    if (!s->live[i].ptr)
        return;
    coop_status st = coop_free(s->pool, s->live[i].ptr);
    if (!resource_status(st))
        fail("free", st);
    if (st != COOP_OK)
        return; /* an event could not be recorded: still allocated, freed later */
    memmove(s->stale + 1, s->stale, (SLOTS - 1) * sizeof *s->stale);
    s->stale[0] = s->live[i].ptr;
    s->live[i].ptr = NULL;
}

/* Misuse: each must be refused with its own status and change nothing. */
static void op_bad_free(state *s, fuzz_input *in)
{
    unsigned kind = fuzz_byte(in), i = fuzz_byte(in) % SLOTS, off = fuzz_u16(in);
    int local;
    void *p;
    coop_status want;
    switch (kind % 3) {
    case 0: /* double free of a pointer nobody owns now */
        p = s->stale[i];
        if (!p || is_live(s, p) || s->remat)
            return; /* remat allocates on its own (recomputes, old values): p may be its */
        want = COOP_ERR_DOUBLE_FREE;
        break;
    case 1: /* inside a live block */
        if (!s->live[i].ptr || s->live[i].size < 2)
            return;
        p = (char *)s->live[i].ptr + 1 + off % (s->live[i].size - 1);
        want = COOP_ERR_INTERIOR_PTR;
        break;
    default:
        p = kind & 8 ? (void *)&local : (void *)(uintptr_t)(off + 1);
        want = COOP_ERR_FOREIGN_PTR;
        break;
    }
    coop_status st = coop_free(s->pool, p);
    /* a stale pointer may now lie inside a block allocated since, or in a
     * segment released since (no longer the pool's) */
    if (st != want && !(want == COOP_ERR_DOUBLE_FREE &&
                        (st == COOP_ERR_INTERIOR_PTR || st == COOP_ERR_FOREIGN_PTR))) {
        fprintf(stderr, "bad free of %p (%s) returned %s\n", p,
                want == COOP_ERR_DOUBLE_FREE    ? "freed before"
                : want == COOP_ERR_INTERIOR_PTR ? "inside a live block"
                                                : "foreign",
                coop_strerror(st));
        fail("bad free", st);
    }
}

static void op_record_stream(state *s, fuzz_input *in)
{
    unsigned i = fuzz_byte(in) % SLOTS, stream = fuzz_byte(in) % STREAMS;
    void *p = s->live[i].ptr;
    coop_status st;
    if (p) {
        st = coop_record_stream(s->pool, p, stream);
        if (!resource_status(st))
            fail("record_stream", st);
    } else if ((p = s->stale[i]) && !is_live(s, p) && !s->remat) {
        /* a pointer freed before: refused (it may lie inside a newer block,
         * or in a segment released since) */
        st = coop_record_stream(s->pool, p, stream);
        if (st != COOP_ERR_DOUBLE_FREE && st != COOP_ERR_INTERIOR_PTR && st != COOP_ERR_FOREIGN_PTR)
            fail("record_stream on a freed pointer", st);
    }
}

static void op_set_capacity(state *s, fuzz_input *in)
{
    unsigned v = fuzz_u16(in);
    uint64_t cap = v & 0x8000 ? 0 : (uint64_t)(v + 1) * 64 * KiB;
    coop_status st = coop_set_capacity(s->pool, cap);
    if (!(resource_status(st) || st == COOP_ERR_INVALID || st == COOP_ERR_BUSY))
        fail("set_capacity", st);
    if (st == COOP_OK)
        s->capacity = cap;
}

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out, (void)user;
    return COOP_OK;
}

static coop_tensor *pick_tensor(state *s, fuzz_input *in, size_t *index)
{
    size_t i = fuzz_byte(in);
    if (!s->num_tensors)
        return NULL;
    *index = i % s->num_tensors;
    return s->tensors[*index];
}

/* Remat: any tensor, released or not, may be named: misuse must be refused. */
static void op_remat(state *s, fuzz_input *in)
{
    unsigned kind = fuzz_byte(in);
    size_t i = 0, j = 0;
    void *ptr = NULL;
    coop_status st = COOP_OK;
    if (!s->remat) {
        /* kind % 6, and where that picks coop's window COOP_REMAT_COOP_EQ
         * if bit 64 is set, else COOP_REMAT_COOP_COMP if bit 128 is
         * (since coop's cost became c_live, recorded inputs that picked
         * COOP_REMAT_COOP run c_live and those with bit 128 alone c_comp:
         * the two swapped, both still covered) */
        coop_remat_policy policy = kind % 6;
        if (policy == COOP_REMAT_COOP && (kind & 64))
            policy = COOP_REMAT_COOP_EQ;
        else if (policy == COOP_REMAT_COOP && (kind & 128))
            policy = COOP_REMAT_COOP_COMP;
        coop_remat_config cfg = {.policy = policy,
                                 .copy_on_write = kind & 8,
                                 .cheap_threshold = kind & 16 ? -1 : 0,
                                 .recompute = recompute};
        st = coop_remat_create(s->pool, &cfg, &s->remat);
        if (st != COOP_OK && st != COOP_ERR_HOST_NOMEM)
            fail("remat_create", st);
        if (s->remat) /* collect records every few calls, not every 4,096: stale
                       * handles then meet reclaimed records (the quarantine
                       * outlasts any input) */
            s->remat->collect_min = 2;
        return;
    }
    switch (kind % 7) {
    case 0:
    case 1: {
        coop_tensor *inputs[2] = {pick_tensor(s, in, &i), pick_tensor(s, in, &j)};
        size_t n = inputs[0] ? 1 + (inputs[1] != NULL && kind & 8) : 0;
        size_t size = (size_t)(fuzz_u16(in) % 4096 + 1) * 512;
        coop_tensor *t = NULL;
        if (s->num_tensors == TENSORS)
            return;
        for (size_t k = 0; k < n; k++) /* inputs must be resident: pin them */
            if (coop_tensor_pin(s->remat, inputs[k], &ptr) != COOP_OK)
                n = k;
        st = coop_tensor_create(s->remat, size, fuzz_byte(in) * 1000u, "op", inputs, n,
                                (kind >> 5) & 3, &t);
        for (size_t k = 0; k < n; k++)
            coop_tensor_unpin(s->remat, inputs[k]);
        if (st == COOP_OK)
            s->tensors[s->num_tensors++] = t;
        break;
    }
    case 2:
        if (pick_tensor(s, in, &i))
            st = coop_tensor_access(s->remat, s->tensors[i], &ptr);
        break;
    case 3:
        if (pick_tensor(s, in, &i)) {
            st = coop_tensor_pin(s->remat, s->tensors[i], &ptr);
            if (st == COOP_OK && s->pinned[i]) /* one pin at a time: keep the bookkeeping simple */
                coop_tensor_unpin(s->remat, s->tensors[i]);
            s->pinned[i] |= st == COOP_OK;
        }
        break;
    case 4:
        if (pick_tensor(s, in, &i)) {
            st = coop_tensor_unpin(s->remat, s->tensors[i]);
            s->pinned[i] = false;
        }
        break;
    case 5:
        if (pick_tensor(s, in, &i))
            st = coop_tensor_release(s->remat, s->tensors[i]);
        break;
    default:
        if (!pick_tensor(s, in, &i))
            break;
        if (kind & 64) {
            coop_tensor *v = NULL;
            if (s->num_tensors == TENSORS)
                break;
            st = coop_tensor_alias(s->remat, s->tensors[i], &v);
            if (st == COOP_OK)
                s->tensors[s->num_tensors++] = v;
        } else {
            st = coop_tensor_mutate(s->remat, s->tensors[i], 500, "mut", NULL, 0, &ptr);
        }
        break;
    }
    if (!(resource_status(st) || st == COOP_ERR_INVALID || st == COOP_ERR_BUSY))
        fail("remat", st);
}

typedef struct walk_result {
    coop_block_info blocks[4096];
    size_t num_blocks, allocated;
} walk_result;

static int on_block(const coop_block_info *b, void *ctx)
{
    walk_result *w = ctx;
    w->allocated += b->state == COOP_BLOCK_ALLOCATED;
    if (w->num_blocks < sizeof w->blocks / sizeof w->blocks[0])
        w->blocks[w->num_blocks++] = *b;
    return 0;
}

/* The walk agrees with the statistics, and every live slot is an allocated
 * block starting at its pointer, at least as large as asked. */
static void op_walk(state *s)
{
    static walk_result w;
    w.num_blocks = w.allocated = 0;
    coop_status st = coop_walk(s->pool, NULL, on_block, &w);
    if (st != COOP_OK)
        fail("walk", st);
    coop_stats stats;
    coop_get_stats(s->pool, &stats);
    if ((int64_t)w.allocated != stats.allocation.current)
        fail("walk: allocated blocks differ from stats.allocation.current", COOP_ERR_CORRUPT);
    if (w.num_blocks == sizeof w.blocks / sizeof w.blocks[0])
        return; /* too many blocks to look up the slots */
    for (int i = 0; i < SLOTS; i++) {
        if (!s->live[i].ptr)
            continue;
        size_t k = 0;
        while (k < w.num_blocks && w.blocks[k].address != (uintptr_t)s->live[i].ptr)
            k++;
        if (k == w.num_blocks || w.blocks[k].state != COOP_BLOCK_ALLOCATED ||
            w.blocks[k].size < s->live[i].size || w.blocks[k].requested_size != s->live[i].size)
            fail("walk: a live block is missing or wrong", COOP_ERR_CORRUPT);
    }
}

/* coop_forget_stream: refused (live blocks on the stream, its work not
 * finished, a fault) or done; when done, no block the pool keeps is tagged
 * with the stream any more (only pending blocks allocated on it could
 * become free later, and they become usable on any stream). */
static void op_forget_stream(state *s, fuzz_input *in)
{
    coop_stream stream = fuzz_byte(in) % STREAMS;
    coop_status st = coop_forget_stream(s->pool, stream);
    if (st == COOP_ERR_BUSY)
        return;
    if (!resource_status(st))
        fail("forget_stream", st);
    if (st != COOP_OK)
        return;
    static walk_result w;
    w.num_blocks = w.allocated = 0;
    if (coop_walk(s->pool, NULL, on_block, &w) != COOP_OK)
        fail("walk after forget_stream", COOP_ERR_CORRUPT);
    for (size_t k = 0; k < w.num_blocks; k++)
        if (w.blocks[k].state != COOP_BLOCK_PENDING && w.blocks[k].stream == stream)
            fail("forget_stream: a block still belongs to the stream", COOP_ERR_CORRUPT);
}

static void create_pool(state *s, unsigned shape)
{
    coop_config cfg;
    coop_config_default(&cfg);
    cfg.use_vmm = !(shape & 1);
    cfg.page_size = shape & 2 ? 64 * KiB : 0;
    cfg.capacity = (uint64_t)((shape >> 2) % 8 + 1) * 8 * MiB;
    cfg.segment_size = shape & 32 ? 4 * MiB : 0;
    cfg.min_split = shape & 64 ? 4 * KiB : 0;
    cfg.never_wait = shape & 128;
    coop_status st = coop_pool_create(&cfg, &s->pool);
    if (st != COOP_OK)
        fail("pool_create", st);
    s->capacity = cfg.capacity;
}

/* Lifts every hold and fault, frees everything: the pool must be empty. */
static void drain(state *s)
{
    coop_inject_fault(s->pool, 0, 0);
    for (int k = 0; k < STREAMS; k++)
        if (coop_host_hold_stream(s->pool, k, false) != COOP_OK)
            fail("release hold", COOP_ERR_CORRUPT);
    if (s->remat)
        coop_remat_destroy(s->remat);
    for (int i = 0; i < SLOTS; i++)
        if (s->live[i].ptr && coop_free(s->pool, s->live[i].ptr) != COOP_OK)
            fail("final free", COOP_ERR_CORRUPT);
    coop_status st = coop_empty_cache(s->pool);
    if (st != COOP_OK)
        fail("final empty_cache", st);
    check_pool(s, "drain");
    coop_stats stats;
    coop_get_stats(s->pool, &stats);
    if (stats.allocation.current || stats.active.current || stats.reserved_bytes.current ||
        stats.allocated_bytes.current) {
        fprintf(stderr,
                "leak after drain: %lld allocations, %lld active, %lld reserved bytes, %lld "
                "allocated bytes\n",
                (long long)stats.allocation.current, (long long)stats.active.current,
                (long long)stats.reserved_bytes.current, (long long)stats.allocated_bytes.current);
        abort();
    }
    coop_pool_destroy(s->pool);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    fuzz_input in = {data, len, 0};
    state s = {0};
    create_pool(&s, fuzz_byte(&in));
    for (int step = 0; step < MAX_STEPS && in.pos < in.len; step++) {
        unsigned op = fuzz_byte(&in);
        coop_status st;
        switch (op % 11) {
        case 0:
        case 1:
            op_malloc(&s, &in);
            break;
        case 2:
            op_free(&s, &in);
            break;
        case 3:
            op_bad_free(&s, &in);
            break;
        case 4:
            op_record_stream(&s, &in);
            break;
        case 5:
            st = coop_empty_cache(s.pool);
            if (!resource_status(st))
                fail("empty_cache", st);
            break;
        case 6:
            op_set_capacity(&s, &in);
            break;
        case 7:
            if (op & 0x40) /* kernels still running: waiting for it ends the hold */
                st = coop_host_busy_stream(s.pool, fuzz_byte(&in) % STREAMS);
            else
                st = coop_host_hold_stream(s.pool, fuzz_byte(&in) % STREAMS, op & 0x80);
            if (st != COOP_OK)
                fail("hold_stream", st);
            break;
        case 8:
            /* the Nth next backend call of some kinds fails */
            st = coop_inject_fault(s.pool, fuzz_byte(&in) & COOP_FAULT_ALL, fuzz_byte(&in) % 8);
            if (st != COOP_OK)
                fail("inject_fault", st);
            break;
        case 9:
            if (!getenv("FUZZ_API_NO_REMAT"))
                op_remat(&s, &in);
            break;
        default:
            if (op & 0x80)
                op_forget_stream(&s, &in);
            else
                op_walk(&s);
            break;
        }
        check_pool(&s, "step");
    }
    drain(&s);
    return 0;
}
