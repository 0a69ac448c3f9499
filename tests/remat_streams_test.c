/*
 * The remat API on a pool shared with other streams (host backend). The
 * context places its tensors on stream 0; next to them lie blocks it must
 * not take: free blocks tagged with another stream whose work is not seen
 * finished (held with coop_host_hold_stream, or busy under never_wait),
 * pending blocks (coop_record_stream on such a stream, then coop_free),
 * and other users' live blocks. For every policy, with VMM and with
 * segments, each case checks that
 *  - a search that evicts places the tensor (window policies: exactly the
 *    window's tensors), and one that cannot succeed evicts nothing;
 *  - no tensor overlaps a busy stream's free or pending block while the
 *    stream is busy, and every tensor's block is allocated on stream 0;
 *  - coop_pool_check passes (config.check runs it after every call too)
 *    and the statistics agree with the tensors and blocks;
 *  - once the other stream finishes, its space is usable.
 * Layouts are in units of U bytes; addresses are checked, so a layout the
 * pool did not make fails loudly rather than testing something else.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"

#define U (8u * 1024u)
#define EV COOP_TENSOR_EVICTABLE
#define OTHER ((coop_stream)5) /* the busy stream */
#define USER ((coop_stream)7)  /* another user's stream (idle) */

/* How the other stream's work is unfinished. */
typedef enum busy_kind {
    BUSY_HELD,       /* coop_host_hold_stream: waits fail */
    BUSY_NEVER_WAIT, /* coop_host_busy_stream on a never_wait pool: never waited for */
    BUSY_WAITED      /* coop_host_busy_stream: the out-of-memory path's wait ends it */
} busy_kind;

/* What lies in the busy range. */
typedef enum busy_block {
    BUSY_FREE,   /* a free block tagged OTHER */
    BUSY_PENDING /* a block of USER recorded on OTHER, then freed */
} busy_block;

typedef struct param {
    coop_remat_policy policy;
    bool vmm;
} param;

static const char *policy_name(coop_remat_policy p)
{
    static const char *names[] = {"coop", "dtr",  "dtr-local", "dte",
                                  "lru",  "size", "coop-eq",   "coop-comp"};
    return names[p];
}

static bool windowed(coop_remat_policy p)
{
    return p == COOP_REMAT_COOP || p == COOP_REMAT_COOP_EQ || p == COOP_REMAT_COOP_COMP;
}

static unsigned evicted_count;
static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out, (void)user;
    return COOP_OK;
}
static void on_evict(coop_tensor *t, void *user)
{
    (void)t, (void)user;
    evicted_count++;
}

/* units x U of capacity; segments: one segment of seg_units (0: all). */
static coop_pool *make_pool(const param *p, unsigned units, unsigned seg_units, bool never_wait)
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = p->vmm;
    c.page_size = 4096;
    c.capacity = (uint64_t)units * U;
    if (p->vmm)
        c.va_size = 4 * c.capacity;
    else
        c.segment_size = (uint64_t)(seg_units ? seg_units : units) * U;
    c.check = true;
    c.never_wait = never_wait;
    coop_pool *pool;
    assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
    return pool;
}

static coop_remat *make_context(coop_pool *pool, coop_remat_policy policy)
{
    evicted_count = 0;
    coop_remat_config cfg = {
        .policy = policy, .cheap_threshold = -1, .on_evict = on_evict, .recompute = recompute};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    return r;
}

static coop_tensor *tensor(coop_remat *r, unsigned units, uint64_t cost, unsigned flags)
{
    coop_tensor *t;
    assert_int_equal(coop_tensor_create(r, (size_t)units * U, cost, "p", NULL, 0, flags, &t),
                     COOP_OK);
    return t;
}

static void *user_block(coop_pool *pool, unsigned units, coop_stream stream)
{
    coop_status st;
    void *p = coop_malloc(pool, (size_t)units * U, stream, 0, &st);
    assert_int_equal(st, COOP_OK);
    return p;
}

/* Asserts that ptr lies unit units above base (the layout the case means). */
static void at_unit(const void *base, const void *ptr, unsigned unit)
{
    assert_int_equal((uintptr_t)ptr - (uintptr_t)base, (uintptr_t)unit * U);
}

/* Makes [ptr, ptr + units) busy: frees it as a block of OTHER whose work is
 * unfinished, or as USER's block recorded on OTHER (pending). ptr was
 * allocated on OTHER (BUSY_FREE) or USER (BUSY_PENDING). */
static void make_busy(coop_pool *pool, void *ptr, busy_block what, busy_kind how)
{
    if (what == BUSY_PENDING)
        assert_int_equal(coop_record_stream(pool, ptr, OTHER), COOP_OK);
    if (how == BUSY_HELD)
        assert_int_equal(coop_host_hold_stream(pool, OTHER, true), COOP_OK);
    else
        assert_int_equal(coop_host_busy_stream(pool, OTHER), COOP_OK);
    assert_int_equal(coop_free(pool, ptr), COOP_OK);
}

/* The stream a busy range is allocated on before make_busy. */
static coop_stream busy_stream_of(busy_block what)
{
    return what == BUSY_FREE ? OTHER : USER;
}

typedef struct walk_state {
    uintptr_t lo, hi;  /* the busy range */
    bool busy_intact;  /* one block covers it, free tagged OTHER or pending */
    uint64_t free_sum; /* free blocks' bytes */
    uint64_t allocated;
} walk_state;

static int visit(const coop_block_info *b, void *ctx)
{
    walk_state *w = ctx;
    if (b->state == COOP_BLOCK_FREE)
        w->free_sum += b->size;
    if (b->state == COOP_BLOCK_ALLOCATED)
        w->allocated += b->size;
    if (b->address <= w->lo && b->address + b->size >= w->hi &&
        ((b->state == COOP_BLOCK_FREE && b->stream == OTHER) || b->state == COOP_BLOCK_PENDING))
        w->busy_intact = true;
    return 0;
}

/* The pool's and the context's state agree: the checker passes, the busy
 * range [lo, hi) (lo == hi: none) is still one busy block, no resident
 * tensor overlaps it and each sits in an allocated block of stream 0, the
 * statistics add up (the context's evictions are the notices given, its
 * resident bytes the tensors', the pool's allocated bytes the tensors' and
 * the other users'). */
static void check_state(coop_pool *pool, coop_remat *r, coop_tensor *const *ts, size_t n,
                        uintptr_t lo, uintptr_t hi, uint64_t user_bytes)
{
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    walk_state w = {.lo = lo, .hi = hi};
    assert_int_equal(coop_walk(pool, NULL, visit, &w), COOP_OK);
    if (lo != hi)
        assert_true(w.busy_intact);
    uint64_t resident = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ts[i] || !coop_tensor_resident(ts[i]))
            continue;
        uintptr_t a = (uintptr_t)coop_tensor_data(ts[i]);
        uint64_t size = coop_tensor_size(ts[i]);
        resident += size;
        assert_true(a + size <= lo || a >= hi);
    }
    coop_remat_stats rs;
    coop_remat_get_stats(r, &rs);
    assert_int_equal(rs.evictions, evicted_count);
    assert_int_equal(rs.resident_bytes, resident);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocated_bytes.current, (int64_t)(resident + user_bytes));
    assert_int_equal((uint64_t)ps.allocated_bytes.current, w.allocated);
    assert_int_equal(ps.free_bytes, w.free_sum);
}

/*
 * A busy block of one unit between cheap and dear tensors:
 *   [t0 c10][t1 c1][busy][t2 c10][t3 c10][user 3U]
 * and a request of 2U. Taking the busy unit into a window ([t1, busy],
 * the cheapest per byte) evicted t1 for nothing: its block cannot merge
 * with a block of another stream (or a pending one), so the tensor did not
 * fit (segments: "no room" with t1 gone; VMM: then evicting by pages, a
 * third tensor). The window must be [t0, t1]: two evictions, t2 and t3
 * stay. Argmin policies evict one at a time until the tensor fits (they do
 * not look at placement): it fits, outside the busy unit. Once the stream
 * finishes, the busy unit takes a tensor without evicting.
 */
static void run_middle(const param *p, busy_block what, busy_kind how)
{
    coop_pool *pool = make_pool(p, 8, 0, how == BUSY_NEVER_WAIT);
    coop_remat *r = make_context(pool, p->policy);
    coop_tensor *t[6] = {0};
    t[0] = tensor(r, 1, 10, EV);
    void *base = coop_tensor_data(t[0]);
    t[1] = tensor(r, 1, 1, EV);
    void *busy = user_block(pool, 1, busy_stream_of(what));
    t[2] = tensor(r, 1, 10, EV);
    t[3] = tensor(r, 1, 10, EV);
    void *user = user_block(pool, 3, USER);
    at_unit(base, coop_tensor_data(t[1]), 1);
    at_unit(base, busy, 2);
    at_unit(base, coop_tensor_data(t[3]), 4);
    at_unit(base, user, 5);
    make_busy(pool, busy, what, how);
    uintptr_t lo = (uintptr_t)busy, hi = lo + U;

    coop_status st = coop_tensor_create(r, 2 * U, 5, "n", NULL, 0, EV, &t[4]);
    /* an argmin policy evicts t1, and the pool's next try settles streams:
     * stream 0's idle free unit next to the busy block keeps its tag
     * (arena_retag_settled) rather than merging into the busy stream's
     * block, so the evicted units stay stream 0's (this ended "no room"
     * with every tensor evicted before) */
    assert_int_equal(st, COOP_OK);
    if (how == BUSY_WAITED) {
        /* the out-of-memory path waited: the unit is free for any stream */
        check_state(pool, r, t, 6, 0, 0, 3 * U);
    } else {
        check_state(pool, r, t, 6, lo, hi, 3 * U);
        if (windowed(p->policy)) {
            assert_int_equal(evicted_count, 2);
            assert_ptr_equal(coop_tensor_data(t[4]), base);
            assert_true(coop_tensor_resident(t[2]) && coop_tensor_resident(t[3]));
        }
        /* the stream finishes: its unit takes a tensor, nothing evicted */
        assert_int_equal(coop_host_hold_stream(pool, OTHER, false), COOP_OK);
        unsigned before = evicted_count;
        assert_int_equal(coop_tensor_create(r, U, 5, "m", NULL, 0, EV, &t[5]), COOP_OK);
        assert_int_equal(evicted_count, before);
        if (windowed(p->policy) && !p->vmm) /* VMM may unmap it and map at the top */
            assert_ptr_equal(coop_tensor_data(t[5]), busy);
        check_state(pool, r, t, 6, 0, 0, 3 * U);
    }
    assert_int_equal(coop_free(pool, user), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/*
 * A request nothing can make room for while the stream is busy:
 *   [t0][t1][busy 2U][t2][t3][user 2U]
 * and 6U asked. The busy 2U and the user's 2U leave at most 4U to take:
 * every policy must evict nothing ("no room"). A window through the busy
 * block (VMM: [t0 .. t3], 6U) evicted all four tensors for nothing, and
 * the argmin policies and the VMM fallback (evicting by pages) counted a
 * busy free block's or a pending block's pages as room and evicted
 * everything too. Once the stream finishes, 6U fit.
 */
static void run_hopeless(const param *p, busy_block what, busy_kind how)
{
    coop_pool *pool = make_pool(p, 8, 0, how == BUSY_NEVER_WAIT);
    coop_remat *r = make_context(pool, p->policy);
    coop_tensor *t[5] = {0};
    t[0] = tensor(r, 1, 10, EV);
    void *base = coop_tensor_data(t[0]);
    t[1] = tensor(r, 1, 1, EV);
    void *busy = user_block(pool, 2, busy_stream_of(what));
    t[2] = tensor(r, 1, 10, EV);
    t[3] = tensor(r, 1, 10, EV);
    void *user = user_block(pool, 2, USER);
    at_unit(base, busy, 2);
    at_unit(base, coop_tensor_data(t[3]), 5);
    at_unit(base, user, 6);
    make_busy(pool, busy, what, how);
    uintptr_t lo = (uintptr_t)busy, hi = lo + 2 * U;

    coop_status st = coop_tensor_create(r, 6 * U, 5, "n", NULL, 0, EV, &t[4]);
    if (how == BUSY_WAITED) {
        assert_int_equal(st, COOP_OK); /* waited for: the 2U joined the rest */
        check_state(pool, r, t, 5, 0, 0, 2 * U);
    } else {
        assert_int_equal(st, COOP_ERR_NOMEM);
        assert_int_equal(evicted_count, 0);
        for (int i = 0; i < 4; i++)
            assert_true(coop_tensor_resident(t[i]));
        check_state(pool, r, t, 5, lo, hi, 2 * U);
        assert_int_equal(coop_host_hold_stream(pool, OTHER, false), COOP_OK);
        assert_int_equal(coop_tensor_create(r, 6 * U, 5, "n", NULL, 0, EV, &t[4]), COOP_OK);
        assert_int_equal(evicted_count, 4);
        check_state(pool, r, t, 5, 0, 0, 2 * U);
    }
    assert_int_equal(coop_free(pool, user), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/*
 * Segments (VMM has no segments to give back): two segments of 4U,
 *   A: [t0][t1][busy][t2]   B: [t3][t4][user][t5]
 * and 4U asked (a segment of its own; the capacity has none left). No
 * window covers it (A's busy unit breaks A; B holds the user's block), so
 * the window policies turn to whole segments: A's blocks were all "free or
 * evictable", so its three tensors were evicted, but a segment holding a
 * busy stream's free block cannot be given back: all for nothing. A
 * segment with a busy block is no victim: nothing evicted. The argmin
 * policies evicted all six, their test counting bytes: they now find no run
 * and no segment to give back, and evict none. Once the stream finishes,
 * A's window takes it.
 */
static void run_segment(const param *p, busy_block what, busy_kind how)
{
    coop_pool *pool = make_pool(p, 8, 4, how == BUSY_NEVER_WAIT);
    coop_remat *r = make_context(pool, p->policy);
    coop_tensor *t[7] = {0};
    t[0] = tensor(r, 1, 10, EV);
    void *base = coop_tensor_data(t[0]);
    t[1] = tensor(r, 1, 1, EV);
    void *busy = user_block(pool, 1, busy_stream_of(what));
    t[2] = tensor(r, 1, 10, EV);
    t[3] = tensor(r, 1, 10, EV);
    void *seg_b = coop_tensor_data(t[3]);
    t[4] = tensor(r, 1, 10, EV);
    void *user = user_block(pool, 1, USER);
    t[5] = tensor(r, 1, 10, EV);
    at_unit(base, busy, 2);
    at_unit(base, coop_tensor_data(t[2]), 3);
    at_unit(seg_b, user, 2);
    at_unit(seg_b, coop_tensor_data(t[5]), 3);
    make_busy(pool, busy, what, how);
    uintptr_t lo = (uintptr_t)busy, hi = lo + U;

    coop_status st = coop_tensor_create(r, 4 * U, 5, "n", NULL, 0, EV, &t[6]);
    unsigned before = 0;
    if (how != BUSY_WAITED) {
        /* 4U is a segment of its own: never while both segments keep a
         * block. The argmin policies evicted every tensor first (their test
         * of what could fit counted bytes, not segments): now none either */
        assert_int_equal(st, COOP_ERR_NOMEM);
        assert_int_equal(evicted_count, 0);
        check_state(pool, r, t, 7, lo, hi, U);
        assert_int_equal(coop_host_hold_stream(pool, OTHER, false), COOP_OK);
        before = evicted_count;
        st = coop_tensor_create(r, 4 * U, 5, "n", NULL, 0, EV, &t[6]);
    }
    /* waited for (the out-of-memory path's wait, or released) */
    assert_int_equal(st, COOP_OK);
    if (windowed(p->policy)) {
        assert_int_equal(evicted_count - before, 3); /* A's tensors */
        assert_ptr_equal(coop_tensor_data(t[6]), base);
    }
    check_state(pool, r, t, 7, 0, 0, U);
    assert_int_equal(coop_free(pool, user), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

#define CASES(name, runner)                                                                        \
    static void name##_free_held(void **s)                                                         \
    {                                                                                              \
        runner(*s, BUSY_FREE, BUSY_HELD);                                                          \
    }                                                                                              \
    static void name##_free_never_wait(void **s)                                                   \
    {                                                                                              \
        runner(*s, BUSY_FREE, BUSY_NEVER_WAIT);                                                    \
    }                                                                                              \
    static void name##_free_waited(void **s)                                                       \
    {                                                                                              \
        runner(*s, BUSY_FREE, BUSY_WAITED);                                                        \
    }                                                                                              \
    static void name##_pending_held(void **s)                                                      \
    {                                                                                              \
        runner(*s, BUSY_PENDING, BUSY_HELD);                                                       \
    }                                                                                              \
    static void name##_pending_never_wait(void **s)                                                \
    {                                                                                              \
        runner(*s, BUSY_PENDING, BUSY_NEVER_WAIT);                                                 \
    }                                                                                              \
    static void name##_pending_waited(void **s)                                                    \
    {                                                                                              \
        runner(*s, BUSY_PENDING, BUSY_WAITED);                                                     \
    }

CASES(middle, run_middle)
CASES(hopeless, run_hopeless)
CASES(segment, run_segment)

/*
 * DTE counts the free blocks next to a tensor as room its eviction makes;
 * a busy stream's free block does not merge with it and is no room:
 *   [ta][busy 2U][user][tb][free 1U][user 2U]
 * ta and tb cost the same, as stale as each other. Counting the busy 2U,
 * DTE evicted ta (3U of "room") first, for nothing; tb (with its 1U of
 * free space, 2U) is the one to evict.
 */
static void dte_ignores_busy_neighbours(void **state)
{
    const param *p = *state;
    coop_pool *pool = make_pool(p, 8, 0, false);
    coop_remat *r = make_context(pool, COOP_REMAT_DTE);
    coop_tensor *t[4] = {0};
    t[0] = tensor(r, 1, 10, EV);
    void *base = coop_tensor_data(t[0]);
    void *busy = user_block(pool, 2, OTHER);
    void *u1 = user_block(pool, 1, USER);
    t[1] = tensor(r, 1, 10, EV);
    t[2] = tensor(r, 1, 1000000, 0); /* advances the clock: ta and tb equally stale */
    void *u2 = user_block(pool, 2, USER);
    at_unit(base, busy, 1);
    at_unit(base, coop_tensor_data(t[1]), 4);
    at_unit(base, coop_tensor_data(t[2]), 5);
    at_unit(base, u2, 6);
    assert_int_equal(coop_tensor_release(r, t[2]), COOP_OK);
    t[2] = NULL;
    make_busy(pool, busy, BUSY_FREE, BUSY_HELD);
    assert_int_equal(coop_tensor_create(r, 2 * U, 5, "n", NULL, 0, EV, &t[3]), COOP_OK);
    assert_int_equal(evicted_count, 1);
    assert_true(coop_tensor_resident(t[0]));
    assert_false(coop_tensor_resident(t[1]));
    uintptr_t lo = (uintptr_t)busy;
    check_state(pool, r, t, 4, lo, lo + 2 * U, 3 * U);
    assert_int_equal(coop_host_hold_stream(pool, OTHER, false), COOP_OK);
    assert_int_equal(coop_free(pool, u1), COOP_OK);
    assert_int_equal(coop_free(pool, u2), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/*
 * The same with the busy block before the tensor (its previous block):
 *   [user][busy 2U][ta][user][tb][free 1U][user]
 * ta and tb cost the same, as stale as each other. Counting the busy 2U
 * before it, DTE would evict ta (3U of "room") first, for nothing, then
 * tb; tb (with its 1U of free space, 2U) is the one to evict, alone.
 */
static void dte_ignores_a_busy_block_before_a_tensor(void **state)
{
    const param *p = *state;
    coop_pool *pool = make_pool(p, 8, 0, false);
    coop_remat *r = make_context(pool, COOP_REMAT_DTE);
    coop_tensor *t[4] = {0};
    void *u0 = user_block(pool, 1, USER);
    void *busy = user_block(pool, 2, OTHER);
    t[0] = tensor(r, 1, 10, EV);
    void *u1 = user_block(pool, 1, USER);
    t[1] = tensor(r, 1, 10, EV);
    t[2] = tensor(r, 1, 1000000, 0); /* advances the clock: ta and tb equally stale */
    void *u2 = user_block(pool, 1, USER);
    at_unit(u0, busy, 1);
    at_unit(u0, coop_tensor_data(t[0]), 3);
    at_unit(u0, u1, 4);
    at_unit(u0, coop_tensor_data(t[1]), 5);
    at_unit(u0, coop_tensor_data(t[2]), 6);
    at_unit(u0, u2, 7);
    assert_int_equal(coop_tensor_release(r, t[2]), COOP_OK);
    t[2] = NULL;
    make_busy(pool, busy, BUSY_FREE, BUSY_HELD);
    assert_int_equal(coop_tensor_create(r, 2 * U, 5, "n", NULL, 0, EV, &t[3]), COOP_OK);
    assert_int_equal(evicted_count, 1);
    assert_true(coop_tensor_resident(t[0]));
    assert_false(coop_tensor_resident(t[1]));
    at_unit(u0, coop_tensor_data(t[3]), 5);
    uintptr_t lo = (uintptr_t)busy;
    check_state(pool, r, t, 4, lo, lo + 2 * U, 3 * U);
    assert_int_equal(coop_host_hold_stream(pool, OTHER, false), COOP_OK);
    assert_int_equal(coop_free(pool, u0), COOP_OK);
    assert_int_equal(coop_free(pool, u1), COOP_OK);
    assert_int_equal(coop_free(pool, u2), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The block that begins at lo, as the walk reports it. */
typedef struct busy_free_walk {
    uintptr_t lo;
    coop_block_info found;
} busy_free_walk;

static int find_block(const coop_block_info *b, void *ctx)
{
    busy_free_walk *w = ctx;
    if (b->address == w->lo)
        w->found = *b;
    return 0;
}

/*
 * A busy stream's free block with unmapped pages (VMM): only its mapped
 * pages hold capacity. [x 2U][y 2U][t0][t1][user 2U] fill the 8U; y (a
 * user's, stream 0) freed and unmapped by coop_empty_cache, then x
 * (OTHER's) freed while OTHER is held: one free block of OTHER, 4U, 2U of
 * them mapped. 4U asked: 2U mapped there, 2U of the user's, 2U of
 * tensors leave 2U of capacity plus what evicting t0 and t1 gives back,
 * enough above the top. Counting the busy block's unmapped pages as held
 * (6U kept, 2U left) called it hopeless; every policy evicts and places it.
 */
static void a_busy_blocks_unmapped_pages_hold_no_capacity(void **state)
{
    const param *p = *state;
    coop_pool *pool = make_pool(p, 8, 0, false);
    coop_remat *r = make_context(pool, p->policy);
    coop_tensor *t[3] = {0};
    void *x = user_block(pool, 2, OTHER);
    void *y = user_block(pool, 2, 0);
    t[0] = tensor(r, 1, 10, EV);
    t[1] = tensor(r, 1, 10, EV);
    void *user = user_block(pool, 2, USER);
    at_unit(x, y, 2);
    at_unit(x, coop_tensor_data(t[0]), 4);
    at_unit(x, coop_tensor_data(t[1]), 5);
    at_unit(x, user, 6);
    assert_int_equal(coop_free(pool, y), COOP_OK);
    assert_int_equal(coop_empty_cache(pool), COOP_OK); /* y's pages unmapped */
    make_busy(pool, x, BUSY_FREE, BUSY_HELD);
    busy_free_walk w = {.lo = (uintptr_t)x};
    assert_int_equal(coop_walk(pool, NULL, find_block, &w), COOP_OK);
    assert_int_equal(w.found.state, COOP_BLOCK_FREE);
    assert_int_equal(w.found.stream, OTHER);
    assert_int_equal(w.found.size, 4 * U);
    assert_int_equal(w.found.mapped_bytes, 2 * U);
    assert_int_equal(coop_tensor_create(r, 4 * U, 5, "n", NULL, 0, EV, &t[2]), COOP_OK);
    assert_true(evicted_count >= 1);
    uintptr_t lo = (uintptr_t)x;
    check_state(pool, r, t, 3, lo, lo + 4 * U, 2 * U);
    assert_int_equal(coop_host_hold_stream(pool, OTHER, false), COOP_OK);
    assert_int_equal(coop_free(pool, user), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/*
 * The no-room message accounts for the free bytes the context cannot take:
 *   [ta][busy 6U][tb]
 * 4U asked. The 6U are a busy stream's free block (held), or a pending
 * block (a user's, recorded on the busy stream, freed). Nothing can make
 * room. The message said "free 49152, largest free block 49152; evicting
 * cannot free a contiguous range that large" for a 32768-byte request (the
 * busy stream's block read as free space the context could use), and left
 * a pending block's bytes out of every figure; it now says how much of the
 * free space other streams keep, the largest free block the context's
 * stream can take, and the pending frees.
 */
static void no_room_says_what_other_streams_keep(void **state)
{
    const param *p = *state;
    static const coop_remat_policy policies[2] = {COOP_REMAT_COOP, COOP_REMAT_DTR};
    for (int k = 0; k < 2; k++)
        for (busy_block what = BUSY_FREE; what <= BUSY_PENDING; what++) {
            coop_pool *pool = make_pool(p, 8, 0, false);
            coop_remat *r = make_context(pool, policies[k]);
            coop_tensor *t[3] = {0};
            t[0] = tensor(r, 1, 10, EV);
            void *busy = user_block(pool, 6, busy_stream_of(what));
            t[1] = tensor(r, 1, 10, EV);
            at_unit(coop_tensor_data(t[0]), busy, 1);
            at_unit(coop_tensor_data(t[0]), coop_tensor_data(t[1]), 7);
            make_busy(pool, busy, what, BUSY_HELD);
            assert_int_equal(coop_tensor_create(r, 4 * U, 5, "n", NULL, 0, EV, &t[2]),
                             COOP_ERR_NOMEM);
            const char *m = coop_last_error();
            assert_int_equal(evicted_count, 0);
            if (what == BUSY_FREE) {
                assert_non_null(strstr(m, "free 49152, largest free block 49152"));
                if (!strstr(m, "; 49152 of the free bytes (49152 mapped) are kept for other "
                               "streams not seen finished, usable on those only: the largest "
                               "free block this context can take is 0;"))
                    fail_msg("%s: %s", policy_name(policies[k]), m);
            } else {
                assert_non_null(strstr(m, "free 0, largest free block 0"));
                if (!strstr(m, ", pending frees 49152 (freed blocks waiting for other streams' "
                               "events);"))
                    fail_msg("%s: %s", policy_name(policies[k]), m);
            }
            check_state(pool, r, t, 3, (uintptr_t)busy, (uintptr_t)busy + 6 * U, 0);
            assert_int_equal(coop_host_hold_stream(pool, OTHER, false), COOP_OK);
            coop_remat_destroy(r);
            coop_pool_destroy(pool);
        }
}

typedef struct named_case {
    const char *name;
    CMUnitTestFunction fn;
    bool with_vmm; /* false: segments only */
} named_case;

int main(void)
{
    static const coop_remat_policy policies[8] = {
        COOP_REMAT_COOP,      COOP_REMAT_COOP_EQ, COOP_REMAT_COOP_COMP, COOP_REMAT_DTR,
        COOP_REMAT_DTR_LOCAL, COOP_REMAT_DTE,     COOP_REMAT_LRU,       COOP_REMAT_SIZE};
    static const named_case cases[] = {
        {"middle_free_held", middle_free_held, true},
        {"middle_free_never_wait", middle_free_never_wait, true},
        {"middle_free_waited", middle_free_waited, true},
        {"middle_pending_held", middle_pending_held, true},
        {"middle_pending_never_wait", middle_pending_never_wait, true},
        {"middle_pending_waited", middle_pending_waited, true},
        {"hopeless_free_held", hopeless_free_held, true},
        {"hopeless_free_never_wait", hopeless_free_never_wait, true},
        {"hopeless_free_waited", hopeless_free_waited, true},
        {"hopeless_pending_held", hopeless_pending_held, true},
        {"hopeless_pending_never_wait", hopeless_pending_never_wait, true},
        {"hopeless_pending_waited", hopeless_pending_waited, true},
        {"segment_free_held", segment_free_held, false},
        {"segment_free_never_wait", segment_free_never_wait, false},
        {"segment_free_waited", segment_free_waited, false},
        {"segment_pending_held", segment_pending_held, false},
        {"segment_pending_never_wait", segment_pending_never_wait, false},
        {"segment_pending_waited", segment_pending_waited, false},
    };
    enum { NCASES = sizeof cases / sizeof cases[0] };
    static param params[2][8];
    /* every case under every policy and pool kind, named "case/policy/kind" */
    static struct CMUnitTest tests[NCASES * 16 + 14];
    static char names[NCASES * 16 + 14][96];
    size_t n = 0;
    for (int v = 0; v < 2; v++)
        for (int k = 0; k < 8; k++) {
            params[v][k] = (param){policies[k], v == 1};
            for (size_t c = 0; c < NCASES; c++) {
                if (v == 1 && !cases[c].with_vmm)
                    continue;
                snprintf(names[n], sizeof names[n], "%s/%s/%s", cases[c].name,
                         policy_name(policies[k]), v ? "vmm" : "segments");
                tests[n] = (struct CMUnitTest){names[n], cases[c].fn, NULL, NULL, &params[v][k]};
                n++;
            }
        }
    for (int v = 0; v < 2; v++) {
        snprintf(names[n], sizeof names[n], "dte_ignores_busy_neighbours/%s",
                 v ? "vmm" : "segments");
        tests[n] =
            (struct CMUnitTest){names[n], dte_ignores_busy_neighbours, NULL, NULL, &params[v][5]};
        n++;
    }
    for (int v = 0; v < 2; v++) {
        snprintf(names[n], sizeof names[n], "dte_ignores_a_busy_block_before_a_tensor/%s",
                 v ? "vmm" : "segments");
        tests[n] = (struct CMUnitTest){names[n], dte_ignores_a_busy_block_before_a_tensor, NULL,
                                       NULL, &params[v][5]};
        n++;
    }
    for (int v = 0; v < 2; v++) {
        snprintf(names[n], sizeof names[n], "no_room_says_what_other_streams_keep/%s",
                 v ? "vmm" : "segments");
        tests[n] = (struct CMUnitTest){names[n], no_room_says_what_other_streams_keep, NULL, NULL,
                                       &params[v][0]};
        n++;
    }
    for (int k = 0; k < 8; k++) { /* VMM only: pages */
        snprintf(names[n], sizeof names[n], "a_busy_blocks_unmapped_pages_hold_no_capacity/%s",
                 policy_name(policies[k]));
        tests[n] = (struct CMUnitTest){names[n], a_busy_blocks_unmapped_pages_hold_no_capacity,
                                       NULL, NULL, &params[1][k]};
        n++;
    }
    return _cmocka_run_group_tests("remat_streams_test", tests, n, NULL, NULL);
}
