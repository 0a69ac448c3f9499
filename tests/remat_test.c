/*
 * The remat API on a small pool (one 64 KiB segment, host backend): eviction
 * and its notice, recursive recomputation with pinned inputs, pins, views,
 * recomputable in-place versus copy-on-write, and Coop's window placement.
 * The device memory is never touched (the host backend maps it PROT_NONE):
 * the recompute callback only records what it was asked to do.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"

#define KiB 1024u

typedef struct journal {
    char log[256];     /* producers recomputed, in order, one letter each */
    char evicted[256]; /* producers of tensors evicted, in order */
    void *inputs[8];   /* inputs of the last recompute */
    size_t num_inputs;
    void *out;
} journal;

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t;
    journal *j = user;
    strncat(j->log, (const char *)producer, 1);
    j->num_inputs = n < 8 ? n : 8;
    if (j->num_inputs) /* a producer of no inputs may get NULL: memcpy must not */
        memcpy(j->inputs, inputs, j->num_inputs * sizeof *inputs);
    j->out = out;
    return COOP_OK;
}

static journal *current;
static void on_evict(coop_tensor *t, void *user)
{
    (void)t;
    (void)user;
    strcat(current->evicted, "x");
}

/* A request just refused with COOP_ERR_NOMEM and a message holding msg,
 * having evicted nothing: each of the n tensors t still resident, no
 * eviction counted or reported to the owner. */
static void assert_refused_evicting_nothing(coop_remat *r, const journal *j, coop_tensor *const *t,
                                            int n, const char *msg)
{
    assert_non_null(strstr(coop_last_error(), msg));
    for (int i = 0; i < n; i++)
        assert_true(coop_tensor_resident(t[i]));
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 0);
    assert_string_equal(j->evicted, "");
}

/* 64 KiB without VMM, in segments of segment_size */
static coop_pool *pool_of_segments(uint64_t segment_size)
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = false;
    c.page_size = 4096;
    c.capacity = 64 * KiB;
    c.segment_size = segment_size;
    coop_pool *p;
    assert_int_equal(coop_pool_create(&c, &p), COOP_OK);
    return p;
}

/* A VMM pool of 4 KiB pages, capacity bytes, va_size bytes of addresses. */
static coop_pool *vmm_pool(uint64_t capacity, uint64_t va_size)
{
    coop_config c;
    coop_config_default(&c);
    c.page_size = 4096;
    c.capacity = capacity;
    c.va_size = va_size;
    coop_pool *p;
    assert_int_equal(coop_pool_create(&c, &p), COOP_OK);
    return p;
}

static coop_pool *small_pool(void)
{
    return pool_of_segments(64 * KiB);
}

static coop_remat *context(coop_pool *pool, journal *j, coop_remat_policy policy, bool cow)
{
    memset(j, 0, sizeof *j);
    current = j;
    coop_remat_config cfg = {.policy = policy,
                             .cheap_threshold = -1,
                             .copy_on_write = cow,
                             .on_evict = on_evict,
                             .recompute = recompute,
                             .user = j};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    return r;
}

#define EV COOP_TENSOR_EVICTABLE

/* w (constant) -> a -> b; filling memory evicts a or b; access recomputes
 * a chain, inputs first, each resident when its consumer runs. */
static void evicts_and_recomputes_recursively(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *w, *a, *b, *fill;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 0, "W", NULL, 0, 0, &w), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 100, "A", &w, 1, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 100, "B", &a, 1, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "F", &b, 1, EV, &fill), COOP_OK);
    /* full: 64 KiB. Three unevictable 16 KiB tensors evict a, b and fill */
    coop_tensor *g[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "G", &w, 1, 0, &g[i]), COOP_OK);
    assert_true(coop_tensor_resident(w)); /* not evictable */
    assert_false(coop_tensor_resident(a) || coop_tensor_resident(b) || coop_tensor_resident(fill));
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 3);
    assert_string_equal(j.evicted, "xxx"); /* the owner heard of each */
    /* no room to recompute anything until the owner lets go of two */
    void *pb;
    assert_int_equal(coop_tensor_access(r, b, &pb), COOP_ERR_NOMEM);
    assert_int_equal(coop_tensor_release(r, g[0]), COOP_OK);
    assert_int_equal(coop_tensor_release(r, g[1]), COOP_OK);
    j.log[0] = 0;
    assert_int_equal(coop_tensor_access(r, b, &pb), COOP_OK);
    assert_string_equal(j.log, "AB"); /* inputs first */
    assert_int_equal(j.num_inputs, 1);
    assert_ptr_equal(j.inputs[0], coop_tensor_data(a)); /* a resident while B ran */
    assert_ptr_equal(j.out, pb);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* t = T(a, b), a evicted, b resident and the cheapest tensor: recomputing
 * a for t must not evict b (only to recompute it next, "ABT"): the
 * resident inputs are pinned before the missing ones are recomputed. 8 KiB
 * tensors, 8 slots. */
static void recomputing_an_input_keeps_the_resident_ones(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, false);
    const size_t sz = 8 * KiB;
    coop_tensor *w, *a, *b, *t, *c, *d, *f[4];
    assert_int_equal(coop_tensor_create(r, sz, 0, "W", NULL, 0, 0, &w), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 100, "A", &w, 1, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 1, "B", &w, 1, EV, &b), COOP_OK);
    coop_tensor *ab[2] = {a, b};
    assert_int_equal(coop_tensor_create(r, sz, 100, "T", ab, 2, EV, &t), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 10000, "C", &w, 1, EV, &c), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 10000, "D", &w, 1, EV, &d), COOP_OK);
    /* evict a and t only, then fill the pool */
    assert_int_equal(coop_tensor_pin(r, b, NULL), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, c, NULL), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, d, NULL), COOP_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, sz, 1, "F", NULL, 0, 0, &f[i]), COOP_OK);
    assert_false(coop_tensor_resident(a) || coop_tensor_resident(t));
    assert_int_equal(coop_tensor_unpin(r, b), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, c), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, d), COOP_OK);
    j.log[0] = 0;
    assert_int_equal(coop_tensor_access(r, t, NULL), COOP_OK);
    assert_string_equal(j.log, "AT"); /* before: "ABT" */
    assert_false(coop_tensor_resident(c) || coop_tensor_resident(d));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* An op with three results: the clock advances by its cost once, all three
 * are stamped at its end, and placing one does not evict another (the
 * cheapest tensor while unstamped) but the evictable fillers. */
static void one_op_with_several_outputs(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, false);
    coop_tensor *f[3], *o[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 10000, "F", NULL, 0, EV, &f[i]), COOP_OK);
    coop_remat_stats before, after;
    coop_remat_get_stats(r, &before);
    const size_t sizes[3] = {16 * KiB, 16 * KiB, 16 * KiB};
    assert_int_equal(coop_tensor_create_outputs(r, 3, sizes, 500, "O", NULL, 0, EV, o), COOP_OK);
    coop_remat_get_stats(r, &after);
    assert_int_equal(after.clock - before.clock, 500); /* once, not 3 x 500 */
    assert_int_equal(after.evictions - before.evictions, 2);
    for (int i = 0; i < 3; i++)
        assert_true(coop_tensor_resident(o[i]));
    /* refused whole: an output of 0 bytes, or more than fits */
    coop_tensor *bad[2] = {(coop_tensor *)1, (coop_tensor *)1};
    const size_t zero[2] = {16 * KiB, 0}, huge[2] = {16 * KiB, 128 * KiB};
    assert_int_equal(coop_tensor_create_outputs(r, 2, zero, 1, "B", NULL, 0, EV, bad),
                     COOP_ERR_INVALID);
    assert_null(bad[0]);
    coop_remat_destroy(r);
    /* on a pool holding one unevictable tensor, the first output fits and
     * the second cannot: the first is released, not left behind */
    r = context(pool, &j, COOP_REMAT_DTR, false);
    coop_tensor *w;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "W", NULL, 0, 0, &w), COOP_OK);
    assert_int_equal(coop_tensor_create_outputs(r, 2, huge, 1, "B", NULL, 0, EV, bad),
                     COOP_ERR_NOMEM);
    assert_null(bad[0]);
    assert_null(bad[1]);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocated_bytes.current, 16 * KiB); /* w alone */
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

static void pinned_tensors_stay(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, false);
    coop_tensor *t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 5, "T", NULL, 0, EV, &t[i]), COOP_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_pin(r, t[i], NULL), COOP_OK);
    coop_tensor *x;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 5, "X", NULL, 0, EV, &x), COOP_ERR_NOMEM);
    assert_int_equal(coop_tensor_unpin(r, t[2]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 5, "X", NULL, 0, EV, &x), COOP_OK);
    assert_false(coop_tensor_resident(t[2]));
    assert_true(coop_tensor_resident(t[0]) && coop_tensor_resident(t[1]) &&
                coop_tensor_resident(t[3]));
    assert_int_equal(coop_tensor_unpin(r, x), COOP_ERR_INVALID); /* never pinned */
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

static void views_share_storage_and_release_frees(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, false);
    coop_tensor *a, *v;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 5, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, a, &v), COOP_OK);
    assert_ptr_equal(coop_tensor_data(v), coop_tensor_data(a));
    assert_int_equal(coop_tensor_release(r, a), COOP_OK);
    assert_true(coop_tensor_resident(v)); /* the view still names the storage */
    assert_int_equal(coop_tensor_release(r, v), COOP_OK);
    assert_false(coop_tensor_resident(a));  /* freed at once, record kept */
    assert_int_equal(strlen(j.evicted), 0); /* a release is not an eviction */
    assert_int_equal(coop_tensor_release(r, v), COOP_ERR_INVALID);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocated_bytes.current, 0);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* y = x.view(); del x; z = y.view(): the view names the storage after its
 * base was released, so it can be viewed again (as every DTR log of a
 * model with views does); a released view cannot. */
static void a_view_outlives_its_released_base(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, false);
    coop_tensor *x, *y, *z;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 5, "X", NULL, 0, EV, &x), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, x, &y), COOP_OK);
    assert_int_equal(coop_tensor_release(r, x), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, y, &z), COOP_OK);
    assert_ptr_equal(coop_tensor_data(z), coop_tensor_data(y));
    assert_int_equal(coop_tensor_release(r, y), COOP_OK);
    assert_true(coop_tensor_resident(z)); /* z still names the storage */
    coop_tensor *again;
    assert_int_equal(coop_tensor_alias(r, y, &again), COOP_ERR_INVALID); /* y released */
    assert_int_equal(coop_tensor_release(r, z), COOP_OK);
    assert_false(coop_tensor_resident(x));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* t = A(); t.mutate(M): in place t keeps its address; evicting t and
 * accessing it recomputes A (the old value) then M on it, inside the
 * buffer A was recomputed into. */
static void inplace_keeps_address_and_recomputes_old_value(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, false);
    coop_tensor *t, *reader;
    void *before, *after, *old = (void *)1;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 50, "A", NULL, 0, EV, &t), COOP_OK);
    before = coop_tensor_data(t);
    /* an op that read t before the mutation */
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "R", &t, 1, EV, &reader), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, t, 20, "M", NULL, 0, &old), COOP_OK);
    assert_null(old); /* in place: no separate old buffer */
    assert_ptr_equal(coop_tensor_data(t), before);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocated_bytes.current, 32 * KiB); /* t and reader only */
    /* fill the pool so t and reader get evicted, then ask for t */
    coop_tensor *f[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 1000, "F", NULL, 0, 0, &f[i]),
                         i < 4 ? COOP_OK : COOP_OK);
    assert_false(coop_tensor_resident(t));
    assert_int_equal(coop_tensor_release(r, f[0]), COOP_OK);
    assert_int_equal(coop_tensor_release(r, f[1]), COOP_OK);
    assert_int_equal(coop_tensor_access(r, t, &after), COOP_OK);
    assert_string_equal(j.log, "AM"); /* old value first, then the in-place op */
    assert_int_equal(j.num_inputs, 1);
    /* in t's buffer: M read and wrote the one buffer the old value was
     * recomputed into, and the old value is evicted again, so t costs its
     * bytes only (before, the old value stayed resident in a buffer of its
     * own: 48 KiB) */
    assert_ptr_equal(j.inputs[0], after);
    assert_ptr_equal(j.out, after);
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocated_bytes.current, (2 + 1) * 16 * KiB); /* f[2], f[3], t */
    /* recomputing the reader reads the old value, recomputed again into a
     * buffer of its own, not t's new one */
    j.log[0] = 0;
    assert_int_equal(coop_tensor_access(r, reader, NULL), COOP_OK);
    assert_string_equal(j.log, "AR");
    assert_int_equal(j.num_inputs, 1);
    assert_ptr_not_equal(j.inputs[0], coop_tensor_data(t));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* t.mul_(t): an in-place op reading its own target reads the old value,
 * so recomputing t runs A (the old value) then M on it, M's inputs being
 * the old value twice; t never becomes its own input (which would recurse
 * without end: before the fix this test overflowed the stack). Both
 * in-place modes. */
static void inplace_op_reading_its_target_reads_the_old_value(void **state)
{
    bool cow = *(bool *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, cow);
    coop_tensor *t, *v;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 50, "A", NULL, 0, EV, &t), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, t, &v), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, t, 20, "M", &v, 1, NULL), COOP_OK);
    assert_int_equal(coop_tensor_release(r, v), COOP_OK);
    /* fill the pool with unevictable tensors until t is evicted */
    coop_tensor *f[4];
    int n = 0;
    while (coop_tensor_resident(t))
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 1000, "F", NULL, 0, 0, &f[n++]), COOP_OK);
    assert_int_equal(coop_tensor_release(r, f[0]), COOP_OK);
    if (n > 1)
        assert_int_equal(coop_tensor_release(r, f[1]), COOP_OK);
    j.log[0] = 0;
    void *pt;
    assert_int_equal(coop_tensor_access(r, t, &pt), COOP_OK);
    /* in place the old value was evicted with t; copy-on-write it may
     * still be resident in its own buffer */
    assert_string_equal(j.log, cow && !strcmp(j.log, "M") ? "M" : "AM");
    assert_int_equal(j.num_inputs, 2);
    assert_ptr_equal(j.inputs[0], j.inputs[1]); /* the old value, twice */
    if (cow)
        assert_ptr_not_equal(j.inputs[0], pt);
    else /* rebuilt inside t's buffer */
        assert_ptr_equal(j.inputs[0], pt);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* t = A(); t.add_(M); t.mul_(N): recomputing t rebuilds both old values
 * inside one buffer, each in-place op taking over its input's (the middle
 * value inherits "produced in place" from t; before, it got a buffer of its
 * own and A's value stayed resident beside it). */
static void a_chain_of_inplace_ops_recomputes_in_one_buffer(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, false);
    coop_tensor *t, *f[4];
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 50, "A", NULL, 0, EV, &t), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, t, 20, "M", NULL, 0, NULL), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, t, 20, "N", NULL, 0, NULL), COOP_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 1000, "F", NULL, 0, 0, &f[i]), COOP_OK);
    assert_false(coop_tensor_resident(t));
    assert_int_equal(coop_tensor_release(r, f[0]), COOP_OK);
    j.log[0] = 0;
    void *pt;
    assert_int_equal(coop_tensor_access(r, t, &pt), COOP_OK); /* one free slot suffices */
    assert_string_equal(j.log, "AMN");
    assert_ptr_equal(j.inputs[0], pt);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocated_bytes.current, 4 * 16 * KiB); /* f[1..3] and t */
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

static void copy_on_write_moves_the_new_value(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, true);
    coop_tensor *t;
    void *before, *old = NULL;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 50, "A", NULL, 0, EV, &t), COOP_OK);
    before = coop_tensor_data(t);
    assert_int_equal(coop_tensor_mutate(r, t, 20, "M", NULL, 0, &old), COOP_OK);
    assert_ptr_equal(old, before); /* the old value keeps the old buffer */
    assert_ptr_not_equal(coop_tensor_data(t), before);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocated_bytes.current, 32 * KiB);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Copy-on-write with no room for the new value: the op is refused and
 * leaves t as it was, buffer, producer and consumers: recomputed later,
 * t is A's output again (from W), not M's, and its reader R reads t. */
static void a_refused_copy_on_write_leaves_the_tensor_as_it_was(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, true);
    coop_tensor *w, *t, *reader, *g[2];
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 0, "W", NULL, 0, 0, &w), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 50, "A", &w, 1, EV, &t), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 50, "R", &t, 1, EV, &reader), COOP_OK);
    for (int i = 0; i < 2; i++) /* 56 KiB of 64 taken, none of it evictable but t and R */
        assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "G", NULL, 0, 0, &g[i]), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, reader, NULL), COOP_OK);
    void *before = coop_tensor_data(t), *old = NULL;
    /* t's buffer is the old value, pinned while the new one is placed: no room */
    assert_int_equal(coop_tensor_mutate(r, t, 20, "M", &w, 1, &old), COOP_ERR_NOMEM);
    assert_null(old);
    assert_ptr_equal(coop_tensor_data(t), before);
    assert_int_equal(coop_tensor_unpin(r, reader), COOP_OK);
    /* evict both (t's unpinned now): a 40 KiB unevictable tensor needs their room */
    coop_tensor *big;
    assert_int_equal(coop_tensor_release(r, g[0]), COOP_OK);
    assert_int_equal(coop_tensor_release(r, g[1]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 40 * KiB, 10, "H", NULL, 0, 0, &big), COOP_OK);
    assert_false(coop_tensor_resident(t) || coop_tensor_resident(reader));
    assert_int_equal(coop_tensor_release(r, big), COOP_OK);
    j.log[0] = 0;
    assert_int_equal(coop_tensor_access(r, reader, NULL), COOP_OK);
    assert_string_equal(j.log, "AR"); /* t as A made it, then its reader */
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Coop: four 16 KiB tensors fill the pool; a 32 KiB request evicts the
 * cheapest adjacent pair and lands exactly where it was. */
static void coop_evicts_a_window_and_places_inside(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_COOP, false);
    coop_tensor *t[4];
    const uint64_t costs[4] = {900, 10, 10, 900};
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, costs[i], "T", NULL, 0, EV, &t[i]),
                         COOP_OK);
    void *where = coop_tensor_data(t[1]);
    coop_tensor *x;
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    assert_false(coop_tensor_resident(t[1]) || coop_tensor_resident(t[2]));
    assert_true(coop_tensor_resident(t[0]) && coop_tensor_resident(t[3]));
    assert_ptr_equal(coop_tensor_data(x), where);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.searches, 1);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The pool's num_alloc_retries and num_ooms count a remat allocation once,
 * as coop.h defines them for any allocation: once if it took the
 * out-of-memory path, once if it failed. The searches try the pool after
 * every eviction (argmin policies) or once per window; those tries are the
 * context's, not the caller's allocations (rev38-E: one create that evicted
 * three tensors counted 4 and 4 under dtr and lru, 1 and 1 under coop). */
static void pool_counts_each_allocation_once(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *t[4], *x, *y;
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 10 + (uint64_t)i, "T", NULL, 0, EV, &t[i]),
                         COOP_OK);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.num_alloc_retries, 0);
    /* 48 KiB: three evictions */
    assert_int_equal(coop_tensor_create(r, 48 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 3);
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.num_alloc_retries, 1);
    assert_int_equal(ps.num_ooms, 0);
    /* everything pinned: refused, once */
    assert_int_equal(coop_tensor_pin(r, x, NULL), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 1, "Y", NULL, 0, EV, &y), COOP_ERR_NOMEM);
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.num_alloc_retries, 2);
    assert_int_equal(ps.num_ooms, 1);
    /* above the capacity: refused before any try, still a failed allocation */
    assert_int_equal(coop_tensor_create(r, 128 * KiB, 1, "Y", NULL, 0, EV, &y), COOP_ERR_NOMEM);
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.num_ooms, 2);
    assert_int_equal(coop_tensor_unpin(r, x), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* With VMM, where the address range binds (va_size = capacity = 32 KiB):
 * [dear 16 KiB][cheap 8 KiB], 8 KiB above the top, 16 KiB asked. The pool
 * extends a free last block over the range above the top, so evicting
 * cheap alone makes room there; the window search looks only below the
 * top, and its cheapest window per byte, [dear, cheap], evicted both (a
 * cost of 10^6 ns for a 1 ns choice). Every window policy. */
static void coop_takes_the_run_at_the_top_with_the_range_above(void **state)
{
    (void)state;
    static const coop_remat_policy policies[3] = {COOP_REMAT_COOP, COOP_REMAT_COOP_EQ,
                                                  COOP_REMAT_COOP_COMP};
    for (int k = 0; k < 3; k++) {
        coop_pool *pool = vmm_pool(32 * KiB, 32 * KiB);
        journal j;
        coop_remat *r = context(pool, &j, policies[k], false);
        coop_tensor *dear, *cheap, *x;
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 1000000, "D", NULL, 0, EV, &dear),
                         COOP_OK);
        assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "C", NULL, 0, EV, &cheap), COOP_OK);
        void *where = coop_tensor_data(cheap);
        assert_ptr_equal((char *)coop_tensor_data(dear) + 16 * KiB, where);
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
        if (!coop_tensor_resident(dear))
            fail_msg("policy %d evicted the dear tensor (%s evicted)", (int)policies[k], j.evicted);
        assert_false(coop_tensor_resident(cheap));
        assert_ptr_equal(coop_tensor_data(x), where);
        coop_remat_stats st;
        coop_remat_get_stats(r, &st);
        assert_int_equal(st.searches, 1);
        assert_int_equal(st.evictions, 1);
        assert_string_equal(j.evicted, "x");
        assert_int_equal(coop_pool_check(pool), COOP_OK);
        coop_remat_destroy(r);
        coop_pool_destroy(pool);
    }
}

/* Without VMM every tensor of half a segment or more gets a segment of its
 * own (8 KiB tensors, 16 KiB segments), and a window cannot span two
 * segments: a 20 KiB tensor in a full 64 KiB pool finds no window. Coop
 * then evicts whole segments, cheapest per byte first, until the pool can
 * give them back and grow one of 20 KiB: here the three cheapest (5, 10
 * and 10 ns; the staleness spread is far smaller than the cost ratios), so
 * 24 KiB are given back for the 20 KiB; the 900 ns tensors stay. */
static coop_pool *segments_pool(void)
{
    return pool_of_segments(16 * KiB);
}

static void coop_evicts_whole_segments_without_vmm(void **state)
{
    (void)state;
    coop_pool *pool = segments_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_COOP, false);
    const uint64_t costs[8] = {900, 900, 10, 10, 900, 5, 900, 900};
    coop_tensor *t[8], *x;
    for (int i = 0; i < 8; i++)
        assert_int_equal(coop_tensor_create(r, 8 * KiB, costs[i], "T", NULL, 0, EV, &t[i]),
                         COOP_OK);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.segment.current, 8);
    assert_int_equal(coop_tensor_create(r, 20 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    for (int i = 0; i < 8; i++)
        assert_int_equal(coop_tensor_resident(t[i]), costs[i] == 900);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.searches, 1);
    assert_int_equal(st.evictions, 3);
    assert_string_equal(j.evicted, "xxx");
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.segment.current, 6); /* 5 of 8 KiB and the new one */
    assert_true(ps.reserved_bytes.current <= (int64_t)(64 * KiB));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Segments go cheapest per byte first, not cheapest in all: A's 24 KiB
 * segment costs 300 ns (12.5 ns per KiB), B's 8 KiB one 150 ns (18.75 ns
 * per KiB); the expensive C and D, made after them, put the two far in
 * the past (their staleness alike). A 28 KiB request with 8 KiB free needs
 * A's segment alone; taking B first (the cheaper in all) would evict both. */
static void coop_evicts_segments_by_cost_per_byte(void **state)
{
    (void)state;
    coop_pool *pool = segments_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_COOP, false);
    coop_tensor *a, *b, *c, *d, *x;
    assert_int_equal(coop_tensor_create(r, 24 * KiB, 300, "T", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 150, "T", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 90000, "T", NULL, 0, EV, &c), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 90000, "T", NULL, 0, EV, &d), COOP_OK);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.segment.current, 4);
    assert_int_equal(ps.reserved_bytes.current, 56 * KiB);
    assert_int_equal(coop_tensor_create(r, 28 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    assert_false(coop_tensor_resident(a));
    assert_true(coop_tensor_resident(b));
    assert_true(coop_tensor_resident(c));
    assert_true(coop_tensor_resident(d));
    assert_string_equal(j.evicted, "x");
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The same pool where evicting every segment that can be would still leave
 * less than the request under the capacity: nothing is evicted for it. */
static void coop_evicts_no_segment_for_a_request_that_cannot_fit(void **state)
{
    (void)state;
    coop_pool *pool = segments_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_COOP, false);
    coop_tensor *t[8], *x;
    for (int i = 0; i < 8; i++) /* two evictable: 16 KiB could be given back */
        assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "T", NULL, 0, i < 2 ? EV : 0, &t[i]),
                         COOP_OK);
    assert_int_equal(coop_tensor_create(r, 20 * KiB, 1, "X", NULL, 0, EV, &x), COOP_ERR_NOMEM);
    assert_refused_evicting_nothing(r, &j, t, 8, "no room for 20480 bytes");
    /* a third evictable one (released: evictable whatever its flags) makes it fit */
    assert_int_equal(coop_tensor_release(r, t[2]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 20 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Argmin policies without VMM: a request fits in one run of free and
 * evictable blocks inside a segment, or in a new segment once enough whole
 * segments (free or evictable) are given back; a byte count says neither.
 * One 64 KiB segment, [A][U][B][V] of 16 KiB (U and V unevictable): 32 KiB
 * are evictable, as many as asked, but no run covers 32 KiB and the segment
 * cannot go. Nothing is evicted (they evicted A and B for nothing, then
 * answered "no room"). Once V is released (evictable: no handle), [B][V]
 * covers it: it fits there. */
static void argmin_evicts_nothing_where_no_run_covers(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *t[4], *x;
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "T", NULL, 0, i % 2 ? 0 : EV, &t[i]),
                         COOP_OK);
    char *base = coop_tensor_data(t[0]);
    for (int i = 1; i < 4; i++) /* the layout meant: one segment, in order */
        assert_ptr_equal(coop_tensor_data(t[i]), base + i * 16 * KiB);
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 1, "X", NULL, 0, EV, &x), COOP_ERR_NOMEM);
    assert_refused_evicting_nothing(r, &j, t, 4, "no room for 32768 bytes");
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.searches, 1);
    assert_int_equal(coop_tensor_release(r, t[3]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    assert_ptr_equal(coop_tensor_data(x), base + 32 * KiB);
    assert_true(coop_tensor_resident(t[1]));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Two 32 KiB segments of 8 KiB tensors, [A][U][B][C] and [D][E][V][F] (U
 * and V unevictable): 24 KiB (a segment of its own) fit in bytes, but no
 * run covers them and neither segment can be given back: nothing evicted
 * (all six were). 16 KiB are covered by [B][C] or [D][E]: they fit. */
static void argmin_evicts_nothing_where_no_segment_can_go(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of_segments(32 * KiB);
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *t[8], *x;
    for (int i = 0; i < 8; i++)
        assert_int_equal(
            coop_tensor_create(r, 8 * KiB, 10, "T", NULL, 0, i == 1 || i == 6 ? 0 : EV, &t[i]),
            COOP_OK);
    for (int i = 0; i < 8; i++) /* the layout meant: two segments, each in order */
        assert_ptr_equal(coop_tensor_data(t[i]),
                         (char *)coop_tensor_data(t[i / 4 * 4]) + i % 4 * 8 * KiB);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.segment.current, 2);
    assert_int_equal(coop_tensor_create(r, 24 * KiB, 1, "X", NULL, 0, EV, &x), COOP_ERR_NOMEM);
    assert_refused_evicting_nothing(r, &j, t, 8, "no room for 24576 bytes");
    coop_remat_stats st;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    assert_true(coop_tensor_resident(t[1]) && coop_tensor_resident(t[6]));
    coop_remat_get_stats(r, &st);
    assert_true(st.evictions >= 2);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Four 16 KiB segments, [A] [U] [B] [V] (U and V unevictable): no run
 * covers 20 KiB, but A's and B's segments can be given back, and then the
 * capacity holds a segment of 20 KiB: the argmin policies evict both and
 * place it (the feasibility test must not refuse it). */
static void argmin_gives_back_whole_segments(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = segments_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *t[4], *x;
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "T", NULL, 0, i % 2 ? 0 : EV, &t[i]),
                         COOP_OK);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.segment.current, 4);
    assert_int_equal(coop_tensor_create(r, 20 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    assert_false(coop_tensor_resident(t[0]) || coop_tensor_resident(t[2]));
    assert_true(coop_tensor_resident(t[1]) && coop_tensor_resident(t[3]));
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 2);
    assert_string_equal(j.evicted, "xx");
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.segment.current, 3); /* U's, V's and the new one */
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* With VMM the tiled range outgrows the capacity, and reclaim unmaps idle
 * free pages: B, D and E (all evictable) hold 56 of the 64 KiB, the holes
 * where A and C were are free but unmapped. F (16 KiB) fits either hole,
 * which needs 16 KiB of pages the capacity does not allow, and a window of
 * free space evicts nothing: the window policies failed ("no room", with
 * every resident tensor evictable) where an argmin policy evicts one and
 * succeeds. They now evict tensors, cheapest per byte first, until the pool
 * can map the request: here one (B, the cheapest). */
static void window_policies_evict_for_pages_with_vmm(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = vmm_pool(64 * KiB, 256 * KiB);
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *a, *b, *cc, *d, *e, *f;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 5, "B", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "C", NULL, 0, EV, &cc), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "D", NULL, 0, EV, &d), COOP_OK);
    assert_int_equal(coop_tensor_release(r, a), COOP_OK);
    assert_int_equal(coop_tensor_release(r, cc), COOP_OK);
    assert_int_equal(coop_empty_cache(pool), COOP_OK); /* the holes unmapped */
    /* fits no hole: the top grows past the capacity's 64 KiB of addresses */
    assert_int_equal(coop_tensor_create(r, 24 * KiB, 10, "E", NULL, 0, EV, &e), COOP_OK);
    assert_true((uintptr_t)coop_tensor_data(e) - (uintptr_t)coop_tensor_data(b) >= 48 * KiB);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.reserved_bytes.current, 56 * KiB);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "F", NULL, 0, EV, &f), COOP_OK);
    assert_false(coop_tensor_resident(b));
    assert_true(coop_tensor_resident(d) && coop_tensor_resident(e));
    assert_string_equal(j.evicted, "x");
    coop_get_stats(pool, &ps);
    assert_true(ps.reserved_bytes.current <= (int64_t)(64 * KiB));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A VMM pool whose address range is its capacity (va_size == capacity)
 * binds as a segment does: K, E, K, E, ... of 8 KiB fill it, K not
 * evictable, and no run of free and evictable blocks holds 16 KiB, nor
 * could the range above the top (there is none). Every policy evicted
 * every E (by pages, or one argmin at a time), then failed; now none is
 * evicted, and the message counts the evictable bytes left. */
static void a_bound_address_range_evicts_nothing_for_a_hopeless_request(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = vmm_pool(64 * KiB, 64 * KiB); /* the address range is the capacity */
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *t[8], *big;
    for (int i = 0; i < 8; i++)
        assert_int_equal(
            coop_tensor_create(r, 8 * KiB, 10, i % 2 ? "E" : "K", NULL, 0, i % 2 ? EV : 0, &t[i]),
            COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "B", NULL, 0, EV, &big), COOP_ERR_NOMEM);
    assert_refused_evicting_nothing(r, &j, t, 8, "of which 32768 evictable");
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    /* the search's tries left the pool's messages off (pool_set_quiet_oom);
     * a plain allocation's refusal has its own again */
    assert_null(coop_malloc(pool, 16 * KiB, 0, 0, NULL));
    assert_non_null(strstr(coop_last_error(), "out of memory: cannot allocate 16384 bytes"));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The same bound range with room above the top: E1 (cheapest), K, K, E2,
 * E3 tile 40 of 64 KiB. 32 KiB fits no run below the top; only the run
 * E2 E3 at the top, with the 24 KiB above it, can hold it, and only E3
 * must go. The window policies evicted the cheapest per byte first (E1,
 * E2, then E3); now they evict E3 alone and place the request over it. */
static void a_bound_address_range_evicts_the_top_run_it_needs(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = vmm_pool(64 * KiB, 64 * KiB); /* the address range is the capacity */
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *e1, *k1, *k2, *e2, *e3, *big;
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "a", NULL, 0, EV, &e1), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "K", NULL, 0, 0, &k1), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "K", NULL, 0, 0, &k2), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 50, "b", NULL, 0, EV, &e2), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 50, "c", NULL, 0, EV, &e3), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 10, "B", NULL, 0, EV, &big), COOP_OK);
    assert_string_equal(j.evicted, "x");
    assert_true(coop_tensor_resident(e1) && coop_tensor_resident(e2));
    assert_false(coop_tensor_resident(e3));
    assert_ptr_equal(coop_tensor_data(big), (char *)coop_tensor_data(e2) + 8 * KiB);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Without VMM, eight 8 KiB tensors in segments of their own fill the 64 KiB;
 * the first three are evictable. Their segments given back leave exactly
 * the 24 KiB a 24 KiB request needs: every policy evicts the three and
 * places it (room equal to the need is room: alloc_in_segments,
 * fits_in_segments). */
static void segments_that_free_exactly_the_request_are_given_back(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = segments_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *t[8], *x;
    for (int i = 0; i < 8; i++)
        assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "T", NULL, 0, i < 3 ? EV : 0, &t[i]),
                         COOP_OK);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.segment.current, 8);
    assert_int_equal(coop_tensor_create(r, 24 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    for (int i = 0; i < 8; i++)
        assert_int_equal(coop_tensor_resident(t[i]), i >= 3);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 3);
    assert_string_equal(j.evicted, "xxx");
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.segment.current, 6); /* the five kept and the new one */
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The same pool, one byte more: a segment holds whole pages, so 24 KiB + 1
 * needs 28 KiB, and the three segments that can go leave 24 KiB. Nothing is
 * evicted (rounded down, the need matched the room: the three were evicted
 * for a request that then failed). */
static void a_request_one_byte_past_the_segments_evicts_nothing(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = segments_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *t[8], *x;
    for (int i = 0; i < 8; i++)
        assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "T", NULL, 0, i < 3 ? EV : 0, &t[i]),
                         COOP_OK);
    assert_int_equal(coop_tensor_create(r, 24 * KiB + 1, 1, "X", NULL, 0, EV, &x), COOP_ERR_NOMEM);
    assert_refused_evicting_nothing(r, &j, t, 8, "no room for 24577 bytes");
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A VMM pool whose 24 KiB address range is its capacity: K (kept) and E
 * (evictable), 8 KiB each, tile 16 KiB, 8 KiB above the top. 16 KiB fits
 * only over E with the range above it, exactly: every policy evicts E and
 * places the request at E's address. */
static void the_top_run_and_the_range_above_hold_the_request_exactly(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = vmm_pool(24 * KiB, 24 * KiB);
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *k, *e, *big;
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "K", NULL, 0, 0, &k), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "E", NULL, 0, EV, &e), COOP_OK);
    char *at = coop_tensor_data(e);
    assert_ptr_equal(at, (char *)coop_tensor_data(k) + 8 * KiB);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "B", NULL, 0, EV, &big), COOP_OK);
    assert_false(coop_tensor_resident(e));
    assert_true(coop_tensor_resident(k));
    assert_string_equal(j.evicted, "x");
    assert_ptr_equal(coop_tensor_data(big), at);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* With VMM, 32 KiB of capacity and 40 KiB of addresses: A (cheap), K (kept)
 * and D (dear), 8 KiB each, tile 24 KiB; the 16 KiB above the top hold a
 * 16 KiB request exactly, but mapping it needs 8 KiB of pages back. No
 * window covers it (K breaks both), so the window policies evict by pages,
 * cheapest first: A alone, and the request goes above the top. D is in no
 * run the request needs (the range above holds it alone). */
static void the_range_above_that_holds_the_request_needs_no_top_run(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = vmm_pool(32 * KiB, 40 * KiB);
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *a, *k, *d, *big;
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "K", NULL, 0, 0, &k), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 100000, "D", NULL, 0, EV, &d), COOP_OK);
    char *top = (char *)coop_tensor_data(d) + 8 * KiB;
    assert_ptr_equal(top, (char *)coop_tensor_data(a) + 24 * KiB);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "B", NULL, 0, EV, &big), COOP_OK);
    assert_false(coop_tensor_resident(a));
    assert_true(coop_tensor_resident(k) && coop_tensor_resident(d));
    assert_string_equal(j.evicted, "x");
    assert_ptr_equal(coop_tensor_data(big), top);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_true(ps.reserved_bytes.current <= (int64_t)(32 * KiB));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* With VMM a window's pages may not all be mappable once its tensors go:
 * 40 KiB of capacity, A (cheap), B, C (kept), D (dear) of 8 KiB; B released
 * and its pages unmapped, then G (16 KiB, kept) fits no hole and goes above
 * the top: 40 KiB mapped. A 16 KiB request's one window is A and B's hole
 * (C and G break the others); evicting A leaves 8 KiB to map there, which
 * the capacity does not allow. The search then evicts by pages (D, whose
 * pages the pool unmaps to map the window's) and places it in the window,
 * rather than failing with A evicted for nothing. */
static void an_unmappable_window_falls_back_to_eviction_by_pages(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = vmm_pool(40 * KiB, 128 * KiB);
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *a, *b, *c, *d, *g, *x;
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "B", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "C", NULL, 0, 0, &c), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 100000, "D", NULL, 0, EV, &d), COOP_OK);
    char *base = coop_tensor_data(a);
    assert_int_equal(coop_tensor_release(r, b), COOP_OK);
    assert_int_equal(coop_empty_cache(pool), COOP_OK); /* B's hole unmapped */
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "G", NULL, 0, 0, &g), COOP_OK);
    assert_ptr_equal(coop_tensor_data(g), base + 32 * KiB);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.reserved_bytes.current, 40 * KiB);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "X", NULL, 0, EV, &x), COOP_OK);
    assert_ptr_equal(coop_tensor_data(x), base);
    assert_false(coop_tensor_resident(a) || coop_tensor_resident(d));
    assert_true(coop_tensor_resident(c) && coop_tensor_resident(g));
    assert_string_equal(j.evicted, "xx");
    coop_get_stats(pool, &ps);
    assert_true(ps.reserved_bytes.current <= (int64_t)(40 * KiB));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* LRU ties go to the tensor made resident earlier, whatever order the
 * evictable set lists them in: A, then o0 and o1 (outputs of one op: one
 * last access), then V fill the 64 KiB. N evicts A (the least recent),
 * which moves o1 to A's place in the set, ahead of o0. M then finds o0 and
 * o1 tied: o0 goes. */
static void lru_ties_evict_the_earlier_resident_in_any_set_order(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_LRU, false);
    coop_tensor *a, *o[2], *v, *n, *m;
    const size_t sizes[2] = {16 * KiB, 16 * KiB};
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 100, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create_outputs(r, 2, sizes, 100, "O", NULL, 0, EV, o), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "V", NULL, 0, 0, &v), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "N", NULL, 0, 0, &n), COOP_OK);
    assert_false(coop_tensor_resident(a));
    assert_true(coop_tensor_resident(o[0]) && coop_tensor_resident(o[1]));
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "M", NULL, 0, 0, &m), COOP_OK);
    assert_false(coop_tensor_resident(o[0]));
    assert_true(coop_tensor_resident(o[1]));
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

static void bad_arguments_are_refused(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    coop_remat_config cfg = {0};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_ERR_INVALID); /* no recompute */
    journal j;
    r = context(pool, &j, COOP_REMAT_DTR, false);
    coop_tensor *a, *b;
    assert_int_equal(coop_tensor_create(r, 0, 1, "A", NULL, 0, EV, &a), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_release(r, a), COOP_OK);
    /* a released tensor cannot feed a new op */
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "B", &a, 1, EV, &b), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "was released"));
    assert_int_equal(coop_tensor_create(r, 128 * KiB, 1, "B", NULL, 0, EV, &b), COOP_ERR_NOMEM);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* COOP_REMAT_DTE scores a tensor by its bytes plus its free neighbours'
 * (include/coop.h), DTR-local by its bytes alone. 64 KiB: B [0, 8K), U
 * [8K, 16K), H [16K, 24K), A [24K, 32K), V [32K, 64K); U and V are not
 * evictable, H is released (8 KiB free beside A). A and B cost the same, B is
 * a little staler: DTR-local takes B first, which frees no 16 KiB range, then
 * A; DTE counts H's hole with A (16 KiB) and evicts A alone, which frees
 * [16K, 32K) for the new 16 KiB tensor. */
static void dte_counts_the_free_neighbours(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *b, *u, *h, *a, *v, *n;
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 100, "B", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "U", NULL, 0, 0, &u), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "H", NULL, 0, 0, &h), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 100, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 1000, "V", NULL, 0, 0, &v), COOP_OK);
    uintptr_t base = (uintptr_t)coop_tensor_data(b);
    assert_int_equal((uintptr_t)coop_tensor_data(u) - base, 8 * KiB);
    assert_int_equal((uintptr_t)coop_tensor_data(h) - base, 16 * KiB);
    assert_int_equal((uintptr_t)coop_tensor_data(a) - base, 24 * KiB);
    assert_int_equal(coop_tensor_release(r, h), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "N", NULL, 0, 0, &n), COOP_OK);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_false(coop_tensor_resident(a));
    if (policy == COOP_REMAT_DTE) {
        assert_true(coop_tensor_resident(b));
        assert_int_equal(st.evictions, 1);
    } else {
        assert_false(coop_tensor_resident(b));
        assert_int_equal(st.evictions, 2);
    }
    assert_int_equal((uintptr_t)coop_tensor_data(n) - base, 16 * KiB);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Ties go to the tensor made resident earlier, whatever the order the
 * search scores them in (src/remat/remat_evict.c, scores_before): two outputs
 * of one op have the same size, cost and last access, so every argmin
 * policy scores them the same; the first output is evicted. */
static void ties_evict_the_earlier_resident(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *o[2], *v, *n;
    const size_t sizes[2] = {16 * KiB, 16 * KiB};
    assert_int_equal(coop_tensor_create_outputs(r, 2, sizes, 100, "O", NULL, 0, EV, o), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 1, "V", NULL, 0, 0, &v), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "N", NULL, 0, 0, &n), COOP_OK);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 1);
    assert_false(coop_tensor_resident(o[0]));
    assert_true(coop_tensor_resident(o[1]));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* COOP_REMAT_LRU evicts the least recently accessed tensor (include/coop.h):
 * a, b, c made in that order, a accessed again; b goes, not a. */
static void lru_evicts_the_least_recently_accessed(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_LRU, false);
    coop_tensor *a, *b, *c, *v, *n;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "B", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "C", NULL, 0, EV, &c), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "V", NULL, 0, 0, &v), COOP_OK);
    assert_int_equal(coop_tensor_access(r, a, NULL), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "N", NULL, 0, 0, &n), COOP_OK);
    assert_false(coop_tensor_resident(b));
    assert_true(coop_tensor_resident(a) && coop_tensor_resident(c));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* COOP_REMAT_SIZE evicts the largest tensor first: s (8 KiB, made first, the
 * stalest) stays, l (16 KiB) goes for an 8 KiB request. */
static void size_evicts_the_largest_first(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_SIZE, false);
    coop_tensor *s, *l, *v, *n;
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 10, "S", NULL, 0, EV, &s), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "L", NULL, 0, EV, &l), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 40 * KiB, 10, "V", NULL, 0, 0, &v), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "N", NULL, 0, 0, &n), COOP_OK);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 1);
    assert_false(coop_tensor_resident(l));
    assert_true(coop_tensor_resident(s));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* DTR scores c_eq / (bytes x staleness), DTR-local c / (bytes x
 * staleness): x (10 ns) has an evicted input e (10^6 ns), y (100 ns) none;
 * both 8 KiB, pinned and unpinned together (same staleness). DTR-local
 * evicts x (10 < 100), DTR y (10 + 10^6 > 100). */
static void dtr_counts_evicted_neighbours_and_dtr_local_does_not(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    const size_t sz = 8 * KiB;
    coop_tensor *e, *x, *y, *k[4], *n;
    assert_int_equal(coop_tensor_create(r, sz, 1000000, "E", NULL, 0, EV, &e), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 10, "X", &e, 1, EV, &x), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 100, "Y", NULL, 0, EV, &y), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, x, NULL), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, y, NULL), COOP_OK);
    /* 40 KiB of unevictable tensors fill the pool, 8 KiB more evict e, the
     * only candidate */
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "K", NULL, 0, 0, &k[0]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "K", NULL, 0, 0, &k[1]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 1, "K", NULL, 0, 0, &k[2]), COOP_OK);
    assert_true(coop_tensor_resident(e));
    assert_int_equal(coop_tensor_create(r, sz, 1, "K", NULL, 0, 0, &k[3]), COOP_OK);
    assert_false(coop_tensor_resident(e));
    assert_int_equal(coop_tensor_unpin(r, x), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, y), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 1, "N", NULL, 0, 0, &n), COOP_OK);
    coop_tensor *kept = policy == COOP_REMAT_DTR ? x : y;
    coop_tensor *gone = policy == COOP_REMAT_DTR ? y : x;
    assert_false(coop_tensor_resident(gone));
    assert_true(coop_tensor_resident(kept));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The mirror of dte_counts_the_free_neighbours, the hole after the tensor:
 * P [0, 8K) is made and released so that A, made after B, lands there; H
 * [8K, 16K) released (free after A), U [16K, 24K) and V [32K, 64K) not
 * evictable, B [24K, 32K) evictable and staler. DTR-local evicts B first
 * (which frees no 16 KiB range), then A; DTE counts H with A and evicts A
 * alone, which frees [0, 16K). */
static void dte_counts_the_free_block_after_a_tensor(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *p, *h, *u, *b, *a, *v, *n;
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "P", NULL, 0, 0, &p), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "H", NULL, 0, 0, &h), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 1, "U", NULL, 0, 0, &u), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 100, "B", NULL, 0, EV, &b), COOP_OK);
    uintptr_t base = (uintptr_t)coop_tensor_data(p);
    assert_int_equal(coop_tensor_release(r, p), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 8 * KiB, 100, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 1000, "V", NULL, 0, 0, &v), COOP_OK);
    assert_int_equal((uintptr_t)coop_tensor_data(a) - base, 0);
    assert_int_equal((uintptr_t)coop_tensor_data(h) - base, 8 * KiB);
    assert_int_equal((uintptr_t)coop_tensor_data(b) - base, 24 * KiB);
    assert_int_equal(coop_tensor_release(r, h), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "N", NULL, 0, 0, &n), COOP_OK);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_false(coop_tensor_resident(a));
    if (policy == COOP_REMAT_DTE) {
        assert_true(coop_tensor_resident(b));
        assert_int_equal(st.evictions, 1);
    } else {
        assert_false(coop_tensor_resident(b));
        assert_int_equal(st.evictions, 2);
    }
    assert_int_equal((uintptr_t)coop_tensor_data(n) - base, 0);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* An op reads its inputs when it runs: creating c from a (after b and v)
 * refreshes a's last access, so LRU then evicts b, not a. */
static void an_op_refreshes_its_inputs(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_LRU, false);
    coop_tensor *a, *b, *c, *v, *n;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "B", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "V", NULL, 0, 0, &v), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "C", &a, 1, 0, &c), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "N", NULL, 0, 0, &n), COOP_OK);
    assert_false(coop_tensor_resident(b));
    assert_true(coop_tensor_resident(a));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* An in-place op stamps its tensor at the op's end, as creating one does:
 * after a.mutate(M), a is more recent than b (made after a), so LRU
 * evicts b. */
static void an_inplace_op_stamps_its_tensor(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_LRU, false);
    coop_tensor *v, *a, *b, *n;
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 10, "V", NULL, 0, 0, &v), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "B", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, a, 5, "M", NULL, 0, NULL), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "N", NULL, 0, 0, &n), COOP_OK);
    assert_false(coop_tensor_resident(b));
    assert_true(coop_tensor_resident(a));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A recomputation reads its inputs when it runs, including one an earlier
 * input's recomputation made resident: t = T(a, b) with a = A(b), all
 * evicted; accessing t recomputes b, then a (1,000 ns), then t (10 ns),
 * and t reads b after a's 1,000 ns: b's staleness is then 10, not 1,010.
 * DTR-local then scores b (100 ns) at 100/10 and d (accessed just before,
 * 200 ns, staleness 1,110) at 200/1,110: d goes; with b stamped at its own
 * recomputation (100/1,010) b would. */
static void a_recomputation_stamps_every_input_it_reads(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR_LOCAL, false);
    const size_t sz = 8 * KiB;
    coop_tensor *w, *b, *a, *t, *d, *f[2], *n;
    assert_int_equal(coop_tensor_create(r, sz, 0, "W", NULL, 0, 0, &w), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 100, "B", &w, 1, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 1000, "A", &b, 1, EV, &a), COOP_OK);
    coop_tensor *ab[2] = {a, b};
    assert_int_equal(coop_tensor_create(r, sz, 10, "T", ab, 2, EV, &t), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 200, "D", NULL, 0, EV, &d), COOP_OK);
    /* w b a t d: 40 KiB; with d pinned, 24 + 24 KiB evict b, a and t */
    assert_int_equal(coop_tensor_pin(r, d, NULL), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 24 * KiB, 1, "F", NULL, 0, 0, &f[0]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 24 * KiB, 1, "F", NULL, 0, 0, &f[1]), COOP_OK);
    assert_false(coop_tensor_resident(b) || coop_tensor_resident(a) || coop_tensor_resident(t));
    assert_int_equal(coop_tensor_release(r, f[1]), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, d), COOP_OK);
    assert_int_equal(coop_tensor_access(r, d, NULL), COOP_OK);
    j.log[0] = 0;
    assert_int_equal(coop_tensor_access(r, t, NULL), COOP_OK);
    assert_string_equal(j.log, "BAT");
    assert_int_equal(coop_tensor_create(r, sz, 1, "N", NULL, 0, 0, &n), COOP_OK);
    assert_false(coop_tensor_resident(d));
    assert_true(coop_tensor_resident(b) && coop_tensor_resident(a) && coop_tensor_resident(t));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Coop places a cheap tensor at the high end of the window it evicted, at
 * an aligned address: the window t1 t2 ([16K, 48K)) for 24 KiB less 100
 * bytes (24 KiB once aligned) puts it at [24K, 48K). */
static void coop_places_a_cheap_tensor_at_the_windows_aligned_high_end(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_COOP, false);
    coop_tensor *t[4];
    const uint64_t costs[4] = {900, 10, 10, 900};
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, costs[i], "T", NULL, 0, EV, &t[i]),
                         COOP_OK);
    uintptr_t base = (uintptr_t)coop_tensor_data(t[0]);
    coop_tensor *x;
    assert_int_equal(
        coop_tensor_create(r, 24 * KiB - 100, 1, "X", NULL, 0, EV | COOP_TENSOR_CHEAP, &x),
        COOP_OK);
    assert_false(coop_tensor_resident(t[1]) || coop_tensor_resident(t[2]));
    assert_int_equal((uintptr_t)coop_tensor_data(x) - base, 24 * KiB);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* frag_failures counts the searches that began although the free bytes
 * covered the request: 32 KiB free in two 16 KiB holes, a 32 KiB request
 * (free bytes equal to it) is one. */
static void a_search_with_exactly_enough_free_bytes_is_a_frag_failure(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *t[4], *x;
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "T", NULL, 0, EV, &t[i]), COOP_OK);
    assert_int_equal(coop_tensor_release(r, t[0]), COOP_OK);
    assert_int_equal(coop_tensor_release(r, t[2]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 32 * KiB, 1, "X", NULL, 0, EV, &x), COOP_OK);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.searches, 1);
    assert_int_equal(st.frag_failures, 1);
    assert_int_equal(st.search_free_bytes, 32 * KiB);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* c_eq counts each evicted neighbour's class once: x = X(e1, e2) with e2 =
 * E2(e1), both evicted (one class, 2,000 ns); c_eq(x) = 10 + 2,000 below y's
 * 3,000, so DTR evicts x (counting the class twice, 4,010, it took y). */
static void dtr_counts_a_shared_class_once(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, false);
    const size_t sz = 8 * KiB;
    coop_tensor *e1, *e2, *x, *y, *k[3], *n;
    assert_int_equal(coop_tensor_create(r, sz, 1000, "E", NULL, 0, EV, &e1), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 1000, "E", &e1, 1, EV, &e2), COOP_OK);
    coop_tensor *both[2] = {e1, e2};
    assert_int_equal(coop_tensor_create(r, sz, 10, "X", both, 2, EV, &x), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 3000, "Y", NULL, 0, EV, &y), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, x, NULL), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, y, NULL), COOP_OK);
    /* 32 KiB of unevictable tensors fill the pool; 16 KiB more evict e1 and e2 */
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "K", NULL, 0, 0, &k[0]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "K", NULL, 0, 0, &k[1]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "K", NULL, 0, 0, &k[2]), COOP_OK);
    assert_false(coop_tensor_resident(e1) || coop_tensor_resident(e2));
    assert_int_equal(coop_tensor_unpin(r, x), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, y), COOP_OK);
    assert_int_equal(coop_tensor_create(r, sz, 1, "N", NULL, 0, 0, &n), COOP_OK);
    assert_false(coop_tensor_resident(x));
    assert_true(coop_tensor_resident(y));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Cheap tensor partitioning: a tensor whose cost per byte is below
 * cheap_threshold goes to the high end of free blocks, one at the
 * threshold (not below it) to the low end (include/coop.h). Threshold 0.5
 * ns/byte, 16 KiB tensors: d (dense) low at 0, b (8,192 ns: exactly 0.5)
 * low after it, c (8,191 ns) high at 48K. */
static void the_cheap_threshold_is_strict(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    memset(&j, 0, sizeof j);
    current = &j;
    coop_remat_config cfg = {
        .policy = COOP_REMAT_DTR, .cheap_threshold = 0.5, .recompute = recompute, .user = &j};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    coop_tensor *d, *b, *c;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1000000, "D", NULL, 0, EV, &d), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 8192, "B", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 8191, "C", NULL, 0, EV, &c), COOP_OK);
    uintptr_t base = (uintptr_t)coop_tensor_data(d);
    assert_int_equal((uintptr_t)coop_tensor_data(b) - base, 16 * KiB);
    assert_int_equal((uintptr_t)coop_tensor_data(c) - base, 48 * KiB);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* search_ns sums every search's time, last_search_ns the latest
 * (coop_remat_stats): two searches, the sum grows by the second. */
static void search_time_sums_every_search(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, policy, false);
    coop_tensor *t[4], *x, *y;
    for (int i = 0; i < 4; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "T", NULL, 0, EV, &t[i]), COOP_OK);
    coop_remat_stats s0, s1, s2;
    coop_remat_get_stats(r, &s0);
    assert_int_equal(s0.searches, 0);
    assert_int_equal(s0.search_ns, 0);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "X", NULL, 0, 0, &x), COOP_OK);
    coop_remat_get_stats(r, &s1);
    assert_int_equal(s1.searches, 1);
    assert_int_equal(s1.search_ns, s1.last_search_ns);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 1, "Y", NULL, 0, 0, &y), COOP_OK);
    coop_remat_get_stats(r, &s2);
    assert_int_equal(s2.searches, 2);
    assert_int_equal(s2.search_ns, s1.search_ns + s2.last_search_ns);
    assert_true(s2.search_ns > 0); /* thread CPU time in ns: a search takes some */
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A view answers for its storage: size, data, residency and recompute
 * count are its base's (a view's own record holds none of them). */
static void a_view_reports_its_storage(void **state)
{
    (void)state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, false);
    coop_tensor *a, *v, *f[3];
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 5, "A", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, a, &v), COOP_OK);
    assert_int_equal(coop_tensor_size(v), 16 * KiB);
    assert_ptr_equal(coop_tensor_data(v), coop_tensor_data(a));
    for (int i = 0; i < 3; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "F", NULL, 0, 0, &f[i]), COOP_OK);
    coop_tensor *g;
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "G", NULL, 0, 0, &g), COOP_OK);
    assert_false(coop_tensor_resident(v)); /* a evicted for g */
    assert_int_equal(coop_tensor_release(r, g), COOP_OK);
    assert_int_equal(coop_tensor_access(r, v, NULL), COOP_OK);
    assert_string_equal(j.log, "A");
    assert_int_equal(coop_tensor_recomputes(v), 1);
    assert_int_equal(coop_tensor_size(v), 16 * KiB);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* x.add_(x) with x evicted: the op's own target among its inputs need not
 * be resident (the mutation recomputes it first), so it is not refused. */
static void an_in_place_op_may_read_its_evicted_target(void **state)
{
    bool cow = *(bool *)*state;
    coop_pool *pool = small_pool();
    journal j;
    coop_remat *r = context(pool, &j, COOP_REMAT_DTR, cow);
    coop_tensor *x, *f[4];
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 50, "A", NULL, 0, EV, &x), COOP_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "F", NULL, 0, 0, &f[i]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 16 * KiB, 10, "F", NULL, 0, 0, &f[3]), COOP_OK);
    assert_false(coop_tensor_resident(x));
    assert_int_equal(coop_tensor_release(r, f[3]), COOP_OK);
    if (cow) /* room for the new value beside the old one */
        assert_int_equal(coop_tensor_release(r, f[2]), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, x, 20, "M", &x, 1, NULL), COOP_OK);
    assert_string_equal(j.log, "A"); /* the old value recomputed for the op */
    assert_true(coop_tensor_resident(x));
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

int main(void)
{
    static bool modes[] = {false, true}; /* copy_on_write */
    static coop_remat_policy policies[] = {
        COOP_REMAT_COOP, COOP_REMAT_DTR,  COOP_REMAT_DTR_LOCAL, COOP_REMAT_DTE,
        COOP_REMAT_LRU,  COOP_REMAT_SIZE, COOP_REMAT_COOP_EQ,   COOP_REMAT_COOP_COMP};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(evicts_and_recomputes_recursively, &policies[0]),
        cmocka_unit_test_prestate(evicts_and_recomputes_recursively, &policies[1]),
        cmocka_unit_test_prestate(evicts_and_recomputes_recursively, &policies[2]),
        cmocka_unit_test_prestate(evicts_and_recomputes_recursively, &policies[3]),
        cmocka_unit_test_prestate(evicts_and_recomputes_recursively, &policies[4]),
        cmocka_unit_test_prestate(evicts_and_recomputes_recursively, &policies[5]),
        cmocka_unit_test_prestate(evicts_and_recomputes_recursively, &policies[6]),
        cmocka_unit_test_prestate(evicts_and_recomputes_recursively, &policies[7]),
        cmocka_unit_test_prestate(pool_counts_each_allocation_once, &policies[0]),
        cmocka_unit_test_prestate(pool_counts_each_allocation_once, &policies[1]),
        cmocka_unit_test_prestate(pool_counts_each_allocation_once, &policies[2]),
        cmocka_unit_test_prestate(pool_counts_each_allocation_once, &policies[3]),
        cmocka_unit_test_prestate(pool_counts_each_allocation_once, &policies[4]),
        cmocka_unit_test_prestate(pool_counts_each_allocation_once, &policies[5]),
        cmocka_unit_test_prestate(pool_counts_each_allocation_once, &policies[6]),
        cmocka_unit_test_prestate(pool_counts_each_allocation_once, &policies[7]),
        cmocka_unit_test(pinned_tensors_stay),
        cmocka_unit_test(one_op_with_several_outputs),
        cmocka_unit_test(recomputing_an_input_keeps_the_resident_ones),
        cmocka_unit_test(views_share_storage_and_release_frees),
        cmocka_unit_test(a_view_outlives_its_released_base),
        cmocka_unit_test(inplace_keeps_address_and_recomputes_old_value),
        cmocka_unit_test(copy_on_write_moves_the_new_value),
        cmocka_unit_test(a_refused_copy_on_write_leaves_the_tensor_as_it_was),
        cmocka_unit_test(a_chain_of_inplace_ops_recomputes_in_one_buffer),
        cmocka_unit_test_prestate(inplace_op_reading_its_target_reads_the_old_value, &modes[0]),
        cmocka_unit_test_prestate(inplace_op_reading_its_target_reads_the_old_value, &modes[1]),
        cmocka_unit_test(coop_evicts_a_window_and_places_inside),
        cmocka_unit_test(coop_takes_the_run_at_the_top_with_the_range_above),
        cmocka_unit_test(coop_evicts_whole_segments_without_vmm),
        cmocka_unit_test(coop_evicts_segments_by_cost_per_byte),
        cmocka_unit_test(coop_evicts_no_segment_for_a_request_that_cannot_fit),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_run_covers, &policies[1]),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_run_covers, &policies[2]),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_run_covers, &policies[3]),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_run_covers, &policies[4]),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_run_covers, &policies[5]),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_segment_can_go, &policies[1]),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_segment_can_go, &policies[2]),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_segment_can_go, &policies[3]),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_segment_can_go, &policies[4]),
        cmocka_unit_test_prestate(argmin_evicts_nothing_where_no_segment_can_go, &policies[5]),
        cmocka_unit_test_prestate(argmin_gives_back_whole_segments, &policies[1]),
        cmocka_unit_test_prestate(argmin_gives_back_whole_segments, &policies[2]),
        cmocka_unit_test_prestate(argmin_gives_back_whole_segments, &policies[3]),
        cmocka_unit_test_prestate(argmin_gives_back_whole_segments, &policies[4]),
        cmocka_unit_test_prestate(argmin_gives_back_whole_segments, &policies[5]),
        cmocka_unit_test_prestate(window_policies_evict_for_pages_with_vmm, &policies[0]),
        cmocka_unit_test_prestate(window_policies_evict_for_pages_with_vmm, &policies[6]),
        cmocka_unit_test_prestate(window_policies_evict_for_pages_with_vmm, &policies[7]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_nothing_for_a_hopeless_request,
                                  &policies[0]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_nothing_for_a_hopeless_request,
                                  &policies[1]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_nothing_for_a_hopeless_request,
                                  &policies[2]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_nothing_for_a_hopeless_request,
                                  &policies[3]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_nothing_for_a_hopeless_request,
                                  &policies[4]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_nothing_for_a_hopeless_request,
                                  &policies[5]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_nothing_for_a_hopeless_request,
                                  &policies[6]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_nothing_for_a_hopeless_request,
                                  &policies[7]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_the_top_run_it_needs, &policies[0]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_the_top_run_it_needs, &policies[6]),
        cmocka_unit_test_prestate(a_bound_address_range_evicts_the_top_run_it_needs, &policies[7]),
        cmocka_unit_test_prestate(segments_that_free_exactly_the_request_are_given_back,
                                  &policies[0]),
        cmocka_unit_test_prestate(segments_that_free_exactly_the_request_are_given_back,
                                  &policies[1]),
        cmocka_unit_test_prestate(segments_that_free_exactly_the_request_are_given_back,
                                  &policies[2]),
        cmocka_unit_test_prestate(segments_that_free_exactly_the_request_are_given_back,
                                  &policies[3]),
        cmocka_unit_test_prestate(segments_that_free_exactly_the_request_are_given_back,
                                  &policies[4]),
        cmocka_unit_test_prestate(segments_that_free_exactly_the_request_are_given_back,
                                  &policies[5]),
        cmocka_unit_test_prestate(segments_that_free_exactly_the_request_are_given_back,
                                  &policies[6]),
        cmocka_unit_test_prestate(segments_that_free_exactly_the_request_are_given_back,
                                  &policies[7]),
        cmocka_unit_test_prestate(a_request_one_byte_past_the_segments_evicts_nothing,
                                  &policies[0]),
        cmocka_unit_test_prestate(a_request_one_byte_past_the_segments_evicts_nothing,
                                  &policies[1]),
        cmocka_unit_test_prestate(a_request_one_byte_past_the_segments_evicts_nothing,
                                  &policies[2]),
        cmocka_unit_test_prestate(a_request_one_byte_past_the_segments_evicts_nothing,
                                  &policies[3]),
        cmocka_unit_test_prestate(a_request_one_byte_past_the_segments_evicts_nothing,
                                  &policies[4]),
        cmocka_unit_test_prestate(a_request_one_byte_past_the_segments_evicts_nothing,
                                  &policies[5]),
        cmocka_unit_test_prestate(a_request_one_byte_past_the_segments_evicts_nothing,
                                  &policies[6]),
        cmocka_unit_test_prestate(a_request_one_byte_past_the_segments_evicts_nothing,
                                  &policies[7]),
        cmocka_unit_test_prestate(the_top_run_and_the_range_above_hold_the_request_exactly,
                                  &policies[0]),
        cmocka_unit_test_prestate(the_top_run_and_the_range_above_hold_the_request_exactly,
                                  &policies[1]),
        cmocka_unit_test_prestate(the_top_run_and_the_range_above_hold_the_request_exactly,
                                  &policies[2]),
        cmocka_unit_test_prestate(the_top_run_and_the_range_above_hold_the_request_exactly,
                                  &policies[3]),
        cmocka_unit_test_prestate(the_top_run_and_the_range_above_hold_the_request_exactly,
                                  &policies[4]),
        cmocka_unit_test_prestate(the_top_run_and_the_range_above_hold_the_request_exactly,
                                  &policies[5]),
        cmocka_unit_test_prestate(the_top_run_and_the_range_above_hold_the_request_exactly,
                                  &policies[6]),
        cmocka_unit_test_prestate(the_top_run_and_the_range_above_hold_the_request_exactly,
                                  &policies[7]),
        cmocka_unit_test_prestate(the_range_above_that_holds_the_request_needs_no_top_run,
                                  &policies[0]),
        cmocka_unit_test_prestate(the_range_above_that_holds_the_request_needs_no_top_run,
                                  &policies[6]),
        cmocka_unit_test_prestate(the_range_above_that_holds_the_request_needs_no_top_run,
                                  &policies[7]),
        cmocka_unit_test_prestate(an_unmappable_window_falls_back_to_eviction_by_pages,
                                  &policies[0]),
        cmocka_unit_test_prestate(an_unmappable_window_falls_back_to_eviction_by_pages,
                                  &policies[6]),
        cmocka_unit_test_prestate(an_unmappable_window_falls_back_to_eviction_by_pages,
                                  &policies[7]),
        cmocka_unit_test(lru_ties_evict_the_earlier_resident_in_any_set_order),
        cmocka_unit_test(bad_arguments_are_refused),
        cmocka_unit_test(a_view_reports_its_storage),
        cmocka_unit_test_prestate(an_in_place_op_may_read_its_evicted_target, &modes[0]),
        cmocka_unit_test_prestate(an_in_place_op_may_read_its_evicted_target, &modes[1]),
        cmocka_unit_test_prestate(dte_counts_the_free_neighbours, &policies[2]),  /* dtr-local */
        cmocka_unit_test_prestate(dte_counts_the_free_neighbours, &policies[3]),  /* dte */
        cmocka_unit_test_prestate(ties_evict_the_earlier_resident, &policies[1]), /* dtr */
        cmocka_unit_test_prestate(ties_evict_the_earlier_resident, &policies[2]), /* dtr-local */
        cmocka_unit_test_prestate(ties_evict_the_earlier_resident, &policies[3]), /* dte */
        cmocka_unit_test_prestate(ties_evict_the_earlier_resident, &policies[4]), /* lru */
        cmocka_unit_test_prestate(ties_evict_the_earlier_resident, &policies[5]), /* size */
        cmocka_unit_test(lru_evicts_the_least_recently_accessed),
        cmocka_unit_test(size_evicts_the_largest_first),
        cmocka_unit_test_prestate(dtr_counts_evicted_neighbours_and_dtr_local_does_not,
                                  &policies[1]),
        cmocka_unit_test_prestate(dtr_counts_evicted_neighbours_and_dtr_local_does_not,
                                  &policies[2]),
        cmocka_unit_test_prestate(dte_counts_the_free_block_after_a_tensor,
                                  &policies[2]), /* dtr-local */
        cmocka_unit_test_prestate(dte_counts_the_free_block_after_a_tensor, &policies[3]), /* dte */
        cmocka_unit_test(an_op_refreshes_its_inputs),
        cmocka_unit_test(an_inplace_op_stamps_its_tensor),
        cmocka_unit_test(a_recomputation_stamps_every_input_it_reads),
        cmocka_unit_test(coop_places_a_cheap_tensor_at_the_windows_aligned_high_end),
        cmocka_unit_test_prestate(a_search_with_exactly_enough_free_bytes_is_a_frag_failure,
                                  &policies[0]),
        cmocka_unit_test_prestate(a_search_with_exactly_enough_free_bytes_is_a_frag_failure,
                                  &policies[1]),
        cmocka_unit_test(dtr_counts_a_shared_class_once),
        cmocka_unit_test(the_cheap_threshold_is_strict),
        cmocka_unit_test_prestate(search_time_sums_every_search, &policies[0]),
        cmocka_unit_test_prestate(search_time_sums_every_search, &policies[1]),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
