/*
 * Out of host memory inside each call of the remat API, path by path: a
 * scene is set up, the call runs with its N-th host allocation failing
 * (tests/host_alloc_fault.h), N = 1, 2, ... until the call no longer
 * reaches the fault. Every refusal must be COOP_ERR_HOST_NOMEM with a
 * message that names the public call, what it was doing and the numbers
 * (the tensor's bytes, the tensors it would evict), exactly one of the
 * scene's expected messages; each message of a path the scene reaches for
 * sure must be seen (must_see: the path was forced). After each refusal the pool passes
 * coop_pool_check, the same call succeeds with memory available, and every tensor of the scene can
 * still be accessed. Before rev31-B these messages began "coop_remat: out of host memory", naming
 * no call, and a failure inside the pool (a block record) came out with the pool's words only.
 *
 * error_paths_test sweeps the same calls for state left unchanged; this
 * one reads the words. Host backend, pools of 8 KiB blocks; milliseconds.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat_block_fixture.h"

#include "host_alloc_fault.h"
#include "remat/remat_internal.h"

#define TENSORS 1200
#define MAX_EXPECTED 12
#define MAX_N 500

typedef struct scene {
    coop_pool *pool;
    coop_remat *r;
    coop_tensor *t[TENSORS];
    coop_tensor *out[4]; /* what the call makes */
    size_t n;            /* tensors in t */
    /* the messages a refusal may give, fnmatch patterns: '*' stands for
     * the pool's own words, or a number the case does not pin down */
    char expected[MAX_EXPECTED][256];
    bool seen[MAX_EXPECTED];
    size_t num_expected;
} scene;

typedef struct scene_case {
    const char *name;
    void (*setup)(scene *s);
    coop_status (*call)(scene *s);
    void (*expect)(scene *s); /* fills s->expected, after the set-up */
    /* paths must_see leaves optional, required in this case: expected
     * messages containing it */
    const char *required;
} scene_case;

static void expect(scene *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect(scene *s, const char *fmt, ...)
{
    assert_true(s->num_expected < MAX_EXPECTED);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->expected[s->num_expected++], sizeof s->expected[0], fmt, ap);
    va_end(ap);
}

static bool matches(const char *want, const char *got)
{
    return fnmatch(want, got, 0) == 0;
}

static coop_pool *pool_with(unsigned units, unsigned segment_units, bool vmm)
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = vmm;
    c.page_size = 4096;
    c.capacity = (uint64_t)units * U;
    c.segment_size = (uint64_t)segment_units * U;
    coop_pool *p;
    assert_int_equal(coop_pool_create(&c, &p), COOP_OK);
    return p;
}

static coop_tensor *make(scene *s, size_t size, coop_tensor *input, unsigned flags)
{
    assert_true(s->n < TENSORS);
    coop_tensor *t;
    coop_status st =
        coop_tensor_create(s->r, size, 10, "op", input ? &input : NULL, input ? 1 : 0, flags, &t);
    if (st != COOP_OK)
        fail_msg("set-up tensor %zu: %s", s->n, coop_last_error());
    s->t[s->n++] = t;
    return t;
}

/* ---- scenes ---- */
/* What every coop_tensor_create of size bytes may meet, beside its
 * searches: its record, its slot in the union-find, the pool's own
 * failures (a block or segment record) */
static void expect_create_common(scene *s, size_t size)
{
    expect(s, "coop_tensor_create: out of host memory recording a tensor of %zu bytes", size);
    expect(s, "coop_tensor_create: out of host memory placing a tensor of %zu bytes", size);
    expect(s, "coop_tensor_create: placing a tensor of %zu bytes: *", size);
}

static void pool_only(scene *s)
{
    s->pool = pool_of(4);
}

static coop_status remat_create(scene *s)
{
    coop_remat_config cfg = {
        .policy = COOP_REMAT_COOP, .cheap_threshold = -1, .recompute = recompute};
    return coop_remat_create(s->pool, &cfg, &s->r);
}

static void expect_remat_create(scene *s)
{
    expect(s, "coop_remat_create: out of host memory for a context (%zu bytes)",
           sizeof(coop_remat));
}

/* one constant tensor a, room for more */
static void one_constant(scene *s)
{
    s->pool = pool_of(8);
    s->r = context(s->pool, COOP_REMAT_COOP);
    make(s, U, NULL, 0);
}

static coop_status create_fits(scene *s)
{
    coop_tensor *in[2] = {s->t[0], s->t[0]};
    return coop_tensor_create(s->r, 2 * U, 10, "x", in, 2, EV, &s->out[0]);
}

static void expect_create_fits(scene *s)
{
    expect_create_common(s, 2 * U);
    expect(s, "coop_tensor_create: out of host memory linking a tensor of %u bytes to its 2 inputs",
           2 * U);
}

/* two constants a and b, neither consumed yet: a create reading both grows
 * a's list of consumers, then b's, so a failure at b's leaves a's grown */
static void two_constants(scene *s)
{
    one_constant(s);
    make(s, U, NULL, 0);
}

static coop_status create_two_inputs(scene *s)
{
    coop_tensor *in[2] = {s->t[0], s->t[1]};
    return coop_tensor_create(s->r, 2 * U, 10, "x", in, 2, EV, &s->out[0]);
}

static coop_status create_outputs(scene *s)
{
    const size_t sizes[2] = {U, 2 * U};
    return coop_tensor_create_outputs(s->r, 2, sizes, 10, "x", &s->t[0], 1, EV, s->out);
}

static void expect_create_outputs(scene *s)
{
    const char *fn = "coop_tensor_create_outputs";
    for (unsigned i = 0; i < 2; i++) {
        expect(s, "%s: out of host memory recording output %u of 2 (%u bytes)", fn, i + 1,
               (i + 1) * U);
        expect(s, "%s: out of host memory linking output %u of 2 (%u bytes) to its 1 input", fn,
               i + 1, (i + 1) * U);
        /* optional (must_see): the pool's cache decides whether placing
         * allocates; an output is named as one, never "a tensor of" */
        expect(s, "%s: placing output %u of 2 (%u bytes): *", fn, i + 1, (i + 1) * U);
        expect(s, "%s: out of host memory placing output %u of 2 (%u bytes)", fn, i + 1,
               (i + 1) * U);
    }
}

/* one output alone: named as an output of coop_tensor_create_outputs, not
 * as coop_tensor_create's tensor (rev31-G) */
static coop_status create_one_output(scene *s)
{
    const size_t sizes[1] = {U};
    return coop_tensor_create_outputs(s->r, 1, sizes, 10, "x", &s->t[0], 1, EV, s->out);
}

static void expect_create_one_output(scene *s)
{
    const char *fn = "coop_tensor_create_outputs";
    expect(s, "%s: out of host memory recording output 1 of 1 (%u bytes)", fn, U);
    expect(s, "%s: out of host memory linking output 1 of 1 (%u bytes) to its 1 input", fn, U);
    expect(s, "%s: placing output 1 of 1 (%u bytes): *", fn, U);
    expect(s, "%s: out of host memory placing output 1 of 1 (%u bytes)", fn, U);
}

static coop_status alias(scene *s)
{
    return coop_tensor_alias(s->r, s->t[0], &s->out[0]);
}

static void expect_alias(scene *s)
{
    expect(s, "coop_tensor_alias: out of host memory for a view of tensor %p (%u bytes)",
           (void *)s->t[0], U);
}

/* a constant and a view of it: the view's message names the view and its
 * storage's bytes (a view's record holds no size; rev31-G) */
static void constant_and_view(scene *s)
{
    one_constant(s);
    assert_int_equal(coop_tensor_alias(s->r, s->t[0], &s->t[1]), COOP_OK);
    s->n++;
}

static coop_status alias_of_view(scene *s)
{
    return coop_tensor_alias(s->r, s->t[1], &s->out[0]);
}

static void expect_alias_of_view(scene *s)
{
    expect(s, "coop_tensor_alias: out of host memory for a view of tensor %p (%u bytes)",
           (void *)s->t[1], U);
}

/* a constant, then a chain of CHAIN tensors from it, all evicted by a
 * filler since released: accessing the last recomputes the chain, one
 * frame a tensor; the 17th frame outgrows materialize's first 16 */
#define CHAIN 20
static void evicted_chain(scene *s)
{
    s->pool = pool_of(4);
    s->r = context(s->pool, COOP_REMAT_DTR);
    coop_tensor *prev = make(s, U, NULL, 0);
    for (int i = 0; i < CHAIN; i++)
        prev = make(s, U, prev, EV);
    coop_tensor *fill;
    assert_int_equal(coop_tensor_create(s->r, 3 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_int_equal(coop_tensor_release(s->r, fill), COOP_OK);
    for (int i = 1; i <= CHAIN; i++)
        assert_false(coop_tensor_resident(s->t[i]));
}

static void expect_recompute(scene *s, const char *fn)
{
    /* frame k (depth k + 1) recomputes t[CHAIN - k] */
    coop_tensor *c = s->t[CHAIN], *deep = s->t[CHAIN - 16];
    expect(s, "%s: out of host memory recomputing tensor %p (%u bytes), chain depth 1", fn,
           (void *)c, U);
    expect(s,
           "%s: out of host memory recomputing tensor %p (%u bytes), an input recomputed for "
           "tensor %p, chain depth 17",
           fn, (void *)deep, U, (void *)c);
    /* placing (and the pool's failures): whichever tensor of the chain */
    expect(s, "%s: out of host memory placing tensor %p (%u bytes)", fn, (void *)c, U);
    expect(s,
           "%s: out of host memory placing tensor * (%u bytes), an input recomputed for "
           "tensor %p",
           fn, U, (void *)c);
    expect(s, "%s: placing tensor %p (%u bytes): *", fn, (void *)c, U);
    expect(s, "%s: placing tensor * (%u bytes), an input recomputed for tensor %p: *", fn, U,
           (void *)c);
}

static coop_status access_chain(scene *s)
{
    void *p;
    return coop_tensor_access(s->r, s->t[CHAIN], &p);
}

static void expect_access_chain(scene *s)
{
    expect_recompute(s, "coop_tensor_access");
}

static coop_status pin_chain(scene *s)
{
    void *p;
    coop_status st = coop_tensor_pin(s->r, s->t[CHAIN], &p);
    if (st == COOP_OK)
        assert_int_equal(coop_tensor_unpin(s->r, s->t[CHAIN]), COOP_OK);
    return st;
}

static void expect_pin_chain(scene *s)
{
    expect_recompute(s, "coop_tensor_pin");
}

/* x = op(w), then x.relu_() in place (recomputable in-place); a filler
 * evicts x and its old value: recomputing x recomputes the old value and
 * takes its buffer over */
static void evicted_in_place(scene *s)
{
    s->pool = pool_of(4);
    s->r = context(s->pool, COOP_REMAT_DTR);
    coop_tensor *w = make(s, U, NULL, 0);
    coop_tensor *x = make(s, U, w, EV);
    assert_int_equal(coop_tensor_mutate(s->r, x, 10, "m", NULL, 0, NULL), COOP_OK);
    coop_tensor *fill;
    assert_int_equal(coop_tensor_create(s->r, 3 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_int_equal(coop_tensor_release(s->r, fill), COOP_OK);
    assert_false(coop_tensor_resident(x));
    /* as in a context that never evicted: the victims' list is not there
     * yet, so reserving the old value's eviction must allocate it (after
     * the filler's evictions it has room, and that path is never failed) */
    free(s->r->victims);
    s->r->victims = NULL;
    s->r->cap_victims = 0;
}

static coop_status access_in_place(scene *s)
{
    return coop_tensor_access(s->r, s->t[1], NULL);
}

static void expect_access_in_place(scene *s)
{
    const char *fn = "coop_tensor_access";
    coop_tensor *x = s->t[1];
    /* the old value is a record of the library's own: its pointer is not
     * the caller's, so only its role is checked (by prefix) */
    expect(s, "%s: out of host memory recomputing tensor %p (%u bytes), chain depth 1", fn,
           (void *)x, U);
    expect(s, "%s: out of host memory recomputing tensor %p (%u bytes) in its old value's buffer",
           fn, (void *)x, U);
    expect(s, "%s: out of host memory recomputing tensor *", fn);
    expect(s, "%s: out of host memory placing tensor *", fn);
    expect(s, "%s: placing tensor *", fn);
}

/* w, x = op(w) and y = op(x), all resident */
static void three(scene *s, bool cow)
{
    s->pool = pool_of(8);
    coop_remat_config cfg = {.policy = COOP_REMAT_COOP,
                             .cheap_threshold = -1,
                             .copy_on_write = cow,
                             .recompute = recompute};
    assert_int_equal(coop_remat_create(s->pool, &cfg, &s->r), COOP_OK);
    coop_tensor *w = make(s, U, NULL, 0);
    coop_tensor *x = make(s, U, w, EV);
    make(s, U, x, EV);
}

static void three_in_place(scene *s)
{
    three(s, false);
}

static void three_cow(scene *s)
{
    three(s, true);
}

static coop_status mutate(scene *s)
{
    return coop_tensor_mutate(s->r, s->t[1], 10, "m", &s->t[0], 1, NULL);
}

static void expect_mutate(scene *s)
{
    expect(s,
           "coop_tensor_mutate: out of host memory recording an in-place op on tensor %p (%u "
           "bytes) with 1 input",
           (void *)s->t[1], U);
    expect(s, "coop_tensor_mutate: out of host memory placing a tensor of %u bytes", U);
    expect(s, "coop_tensor_mutate: placing a tensor of %u bytes: *", U);
}

/* three, and a view of x mutated: the message names the view and its
 * storage's bytes (rev31-G) */
static void three_and_view(scene *s)
{
    three(s, false);
    assert_int_equal(coop_tensor_alias(s->r, s->t[1], &s->t[3]), COOP_OK);
    s->n++;
}

static coop_status mutate_view(scene *s)
{
    return coop_tensor_mutate(s->r, s->t[3], 10, "m", &s->t[0], 1, NULL);
}

static void expect_mutate_view(scene *s)
{
    expect(s,
           "coop_tensor_mutate: out of host memory recording an in-place op on tensor %p (%u "
           "bytes) with 1 input",
           (void *)s->t[3], U);
    expect(s, "coop_tensor_mutate: out of host memory placing a tensor of %u bytes", U);
    expect(s, "coop_tensor_mutate: placing a tensor of %u bytes: *", U);
}

/* 40 one-block tensors on 48 blocks: a 44-block tensor's window holds the
 * 8 free blocks and 36 tensors (more than the 32 listed on the stack) */
static void many_tensors(scene *s)
{
    s->pool = pool_of(48);
    s->r = context(s->pool, COOP_REMAT_COOP);
    for (int i = 0; i < 40; i++)
        make(s, U, NULL, EV);
}

static coop_status create_in_window(scene *s)
{
    return coop_tensor_create(s->r, 44 * U, 10, "x", NULL, 0, EV, &s->out[0]);
}

static void expect_create_in_window(scene *s)
{
    const char *fn = "coop_tensor_create";
    expect(s,
           "%s: out of host memory listing the 36 tensors of a window to evict for a tensor of %u "
           "bytes",
           fn, 44 * U);
    expect_create_common(s, 44 * U);
}

/* 1,100 tensors of 512 bytes in one run: a window search walks more blocks
 * than the context set aside (1,024) and grows its arrays */
static void tiny_tensors(scene *s)
{
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = false;
    c.page_size = 4096;
    c.capacity = 1104 * 512;
    c.segment_size = c.capacity;
    assert_int_equal(coop_pool_create(&c, &s->pool), COOP_OK);
    s->r = context(s->pool, COOP_REMAT_COOP);
    for (int i = 0; i < 1100; i++)
        make(s, 512, NULL, EV);
}

static coop_status create_after_search(scene *s)
{
    return coop_tensor_create(s->r, 4096, 10, "x", NULL, 0, EV, &s->out[0]);
}

static void expect_create_after_search(scene *s)
{
    const char *fn = "coop_tensor_create";
    expect(s, "%s: out of host memory searching a window for a tensor of 4096 bytes", fn);
    expect(s,
           "%s: out of host memory listing the * tensors of a window to evict for a tensor of "
           "4096 bytes*",
           fn);
    expect_create_common(s, 4096);
}

/* segments of 2 blocks, each holding one 2-block tensor, on 8 blocks: a
 * 4-block tensor fits no window (a window cannot span two segments), so
 * whole segments are evicted */
static void full_segments(scene *s)
{
    s->pool = pool_with(8, 2, false);
    s->r = context(s->pool, COOP_REMAT_COOP);
    for (int i = 0; i < 4; i++)
        make(s, 2 * U, NULL, EV);
}

static coop_status create_in_segments(scene *s)
{
    return coop_tensor_create(s->r, 4 * U, 10, "x", NULL, 0, EV, &s->out[0]);
}

static void expect_create_in_segments(scene *s)
{
    const char *fn = "coop_tensor_create";
    expect(s, "%s: out of host memory listing the segments to evict for a tensor of %u bytes", fn,
           4 * U);
    expect(s,
           "%s: out of host memory listing the 4 tensors of 4 segments to evict for a tensor of "
           "%u bytes",
           fn, 4 * U);
    expect_create_common(s, 4 * U);
}

/* segments of 2 blocks, each holding two 1-block tensors (made in the
 * segments four released 2-block ones left cached): the message's
 * tensors and segments differ in number (rev31-G) */
static void shared_segments(scene *s)
{
    s->pool = pool_with(8, 2, false);
    s->r = context(s->pool, COOP_REMAT_COOP);
    for (int i = 0; i < 4; i++)
        make(s, 2 * U, NULL, EV);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(coop_tensor_release(s->r, s->t[i]), COOP_OK);
        s->t[i] = NULL;
    }
    for (int i = 0; i < 8; i++)
        make(s, U, NULL, EV);
}

static void expect_create_in_shared_segments(scene *s)
{
    const char *fn = "coop_tensor_create";
    expect(s, "%s: out of host memory listing the segments to evict for a tensor of %u bytes", fn,
           4 * U);
    expect(s,
           "%s: out of host memory listing the 8 tensors of 4 segments to evict for a tensor of "
           "%u bytes",
           fn, 4 * U);
    expect_create_common(s, 4 * U);
}

/* VMM: four 2-block tensors, the first and third released and their pages
 * unmapped, then a 3-block tensor above them: a 2-block tensor fits either
 * hole but the capacity does not allow its pages, so tensors are evicted
 * for pages */
static void holes_unmapped(scene *s)
{
    s->pool = pool_with(8, 8, true);
    s->r = context(s->pool, COOP_REMAT_COOP);
    for (int i = 0; i < 4; i++)
        make(s, 2 * U, NULL, EV);
    assert_int_equal(coop_tensor_release(s->r, s->t[0]), COOP_OK);
    assert_int_equal(coop_tensor_release(s->r, s->t[2]), COOP_OK);
    s->t[0] = s->t[2] = NULL;
    assert_int_equal(coop_empty_cache(s->pool), COOP_OK);
    make(s, 3 * U, NULL, EV);
}

static coop_status create_for_pages(scene *s)
{
    return coop_tensor_create(s->r, 2 * U, 10, "x", NULL, 0, EV, &s->out[0]);
}

static void expect_create_for_pages(scene *s)
{
    const char *fn = "coop_tensor_create";
    expect(s, "%s: out of host memory listing * tensors to evict for a tensor of %u bytes", fn,
           2 * U);
    expect(s,
           "%s: out of host memory listing the * tensors of a window to evict for a tensor of "
           "%u bytes",
           fn, 2 * U);
    expect_create_common(s, 2 * U);
}

/* dtr (argmin): four one-block tensors fill the pool; a 2-block one evicts
 * them one at a time */
static void full_argmin(scene *s)
{
    s->pool = pool_of(4);
    s->r = context(s->pool, COOP_REMAT_DTR);
    for (int i = 0; i < 4; i++)
        make(s, U, NULL, EV);
}

static coop_status create_argmin(scene *s)
{
    return coop_tensor_create(s->r, 2 * U, 10, "x", NULL, 0, EV, &s->out[0]);
}

static void expect_create_argmin(scene *s)
{
    const char *fn = "coop_tensor_create";
    expect(s, "%s: out of host memory evicting for a tensor of %u bytes", fn, 2 * U);
    expect(s, "%s: out of host memory evicting for a tensor of %u bytes (* evicted before*", fn,
           2 * U);
    expect_create_common(s, 2 * U);
}

/* full_argmin with room for one victim only: the second eviction's
 * reservation grows the list, after one tensor was evicted (rev31-G) */
static void full_argmin_one_victim(scene *s)
{
    full_argmin(s);
    free(s->r->victims);
    s->r->victims = malloc(sizeof *s->r->victims);
    assert_non_null(s->r->victims);
    s->r->cap_victims = 1;
}

static void expect_create_argmin_second(scene *s)
{
    expect(s,
           "coop_tensor_create: out of host memory evicting for a tensor of %u bytes (1 evicted "
           "before, which stay evicted)",
           2 * U);
    expect_create_common(s, 2 * U);
}

/* a context with nothing in it yet */
static void empty_context(scene *s)
{
    s->pool = pool_of(4);
    s->r = context(s->pool, COOP_REMAT_COOP);
}

static coop_status create_first(scene *s)
{
    return coop_tensor_create(s->r, U, 10, "x", NULL, 0, EV, &s->out[0]);
}

static void expect_create_first(scene *s)
{
    expect_create_common(s, U);
}

static const scene_case cases[] = {
    {"coop_remat_create", pool_only, remat_create, expect_remat_create, NULL},
    /* the union-find's first nodes and the pool's first segment */
    {"coop_tensor_create: the first", empty_context, create_first, expect_create_first, "placing"},
    {"coop_tensor_create: fits", one_constant, create_fits, expect_create_fits, NULL},
    {"coop_tensor_create: two inputs", two_constants, create_two_inputs, expect_create_fits, NULL},
    {"coop_tensor_create_outputs", one_constant, create_outputs, expect_create_outputs, NULL},
    {"coop_tensor_alias", one_constant, alias, expect_alias, NULL},
    {"coop_tensor_alias: of a view", constant_and_view, alias_of_view, expect_alias_of_view, NULL},
    {"coop_tensor_create_outputs: one", one_constant, create_one_output, expect_create_one_output,
     NULL},
    {"coop_tensor_access: a chain", evicted_chain, access_chain, expect_access_chain, NULL},
    {"coop_tensor_pin: a chain", evicted_chain, pin_chain, expect_pin_chain, NULL},
    {"coop_tensor_access: in place", evicted_in_place, access_in_place, expect_access_in_place,
     NULL},
    {"coop_tensor_mutate: in place", three_in_place, mutate, expect_mutate, NULL},
    {"coop_tensor_mutate: copy-on-write", three_cow, mutate, expect_mutate, NULL},
    {"coop_tensor_mutate: a view", three_and_view, mutate_view, expect_mutate_view, NULL},
    {"coop_tensor_create: window", many_tensors, create_in_window, expect_create_in_window, NULL},
    {"coop_tensor_create: long search", tiny_tensors, create_after_search,
     expect_create_after_search, NULL},
    {"coop_tensor_create: segments", full_segments, create_in_segments, expect_create_in_segments,
     NULL},
    {"coop_tensor_create: shared segments", shared_segments, create_in_segments,
     expect_create_in_shared_segments, NULL},
    {"coop_tensor_create: pages", holes_unmapped, create_for_pages, expect_create_for_pages, NULL},
    {"coop_tensor_create: argmin", full_argmin, create_argmin, expect_create_argmin, NULL},
    {"coop_tensor_create: argmin, a second eviction", full_argmin_one_victim, create_argmin,
     expect_create_argmin_second, "evicted before"},
};

/* The paths each case must force: the expected messages that are not a
 * fallback (those the case lists for allocations it may or may not reach
 * are marked by the case's name in must_see). */
static bool must_see(const scene_case *c, size_t i, const scene *s)
{
    const char *e = s->expected[i];
    if (c->required && strstr(e, c->required))
        return true;
    /* the pool's own failures and the placing of a recomputed tensor are
     * reached or not depending on what the pool has cached: not required */
    if (strstr(e, ": placing ") || strstr(e, "memory placing "))
        return false;
    /* the variants for a second eviction, a window after pages, a tensor
     * of the library's own */
    if (strstr(e, "evicted before") || strstr(e, "listing the * tensors of a window") ||
        strstr(e, "recomputing tensor *") || strstr(e, "output 2 of 2 (16384 bytes) to"))
        return false;
    return true;
}

static void teardown(scene *s)
{
    coop_remat_destroy(s->r);
    if (s->pool) {
        assert_int_equal(coop_pool_check(s->pool), COOP_OK);
        coop_pool_destroy(s->pool);
    }
}

/* Every tensor of the scene can be accessed (the context is intact). */
static void all_accessible(scene *s, const char *where)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->t[i] && coop_tensor_access(s->r, s->t[i], NULL) != COOP_OK)
            fail_msg("%s: tensor %zu not accessible afterwards: %s", where, i, coop_last_error());
}

/* Every consumer link is a producer's input: p among the inputs of each
 * of p's children. A refused coop_tensor_create whose linking failed
 * half-way had left links on its first inputs to a record with none. */
static void links_consistent(const scene *s, const char *where)
{
    for (const coop_tensor *p = s->r ? s->r->all : NULL; p; p = p->next_all)
        for (size_t i = 0; i < p->num_children; i++) {
            const coop_tensor *c = p->children[i];
            size_t k = 0;
            while (k < c->num_inputs && c->inputs[k] != p)
                k++;
            if (k == c->num_inputs)
                fail_msg("%s: tensor %p links to consumer %p, whose producer's %zu inputs do not "
                         "include it",
                         where, (const void *)p, (const void *)c, c->num_inputs);
        }
}

static void run_case(const scene_case *c)
{
    static scene s;
    bool seen[MAX_EXPECTED] = {false};
    size_t refusals = 0;
    for (long n = 1; n <= MAX_N; n++) {
        memset(&s, 0, sizeof s);
        char where[160];
        snprintf(where, sizeof where, "%s, host allocation %ld failed", c->name, n);
        long live = host_fault_live();
        c->setup(&s);
        c->expect(&s);
        coop_clear_error();
        host_fault_arm(n);
        coop_status st = c->call(&s);
        bool hit = host_fault_disarm();
        if (st != COOP_OK) {
            refusals++;
            const char *msg = coop_last_error();
            if (!hit)
                fail_msg("%s: refused without reaching the fault: %s", where, msg);
            if (st != COOP_ERR_HOST_NOMEM)
                fail_msg("%s: %s, not COOP_ERR_HOST_NOMEM: %s", where, coop_strerror(st), msg);
            size_t k = 0;
            while (k < s.num_expected && !matches(s.expected[k], msg))
                k++;
            if (k == s.num_expected)
                fail_msg("%s: unexpected message \"%s\"", where, msg);
            seen[k] = true;
            if (coop_pool_check(s.pool) != COOP_OK)
                fail_msg("%s: pool check: %s", where, coop_last_error());
            links_consistent(&s, where);
            /* the same call with memory available */
            memset(s.out, 0, sizeof s.out);
            if (c->call(&s) != COOP_OK)
                fail_msg("%s: the retry failed: %s", where, coop_last_error());
            if (coop_pool_check(s.pool) != COOP_OK)
                fail_msg("%s: pool check after the retry: %s", where, coop_last_error());
            all_accessible(&s, where);
        }
        teardown(&s);
        if (host_fault_live() != live)
            fail_msg("%s: %ld host blocks leaked", where, host_fault_live() - live);
        if (!hit)
            break;
    }
    for (size_t k = 0; k < s.num_expected; k++)
        if (!seen[k] && must_see(c, k, &s))
            fail_msg("%s: never refused with \"%s\"", c->name, s.expected[k]);
    printf("%-36s %zu refusals\n", c->name, refusals);
}

static void every_refusal_names_the_call_and_the_numbers(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
}

int main(void)
{
    host_fault_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_refusal_names_the_call_and_the_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
