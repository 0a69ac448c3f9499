/*
 * The remat API under misuse and failure: what a runtime integrating it
 * gets wrong (a handle of another context, a released handle, NULLs, a
 * call from inside a callback, a coop_free of a tensor's buffer) is refused
 * with a status and a message and changes nothing; a recompute callback
 * that fails leaves its tensor evicted (never a buffer returned as a
 * value); requests that cannot fit evict nothing; a chain of recomputations
 * longer than any C stack works; a stale handle from the latest collection
 * gets an error, not freed memory. Host backend, small pools of 8 KiB
 * blocks (tests/remat_block_fixture.h); nothing touches device memory.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "remat/remat_internal.h" /* pin counts set near their limit */
#include "remat_block_fixture.h"

/* A recompute callback that fails for the producers named in fail, and
 * records the producers it ran (one letter each). */
typedef struct script {
    const char *fail;
    char ran[64];
    unsigned evictions_told;
    coop_remat *r;       /* for the callbacks that call back in */
    coop_tensor *victim; /* released or accessed from on_evict */
    coop_status nested;  /* what that call returned */
    bool destroy;        /* on_evict destroys the context (refused) */
    /* the recompute callback accesses the tensor it recomputes (refused),
     * keeps that call's message and returns its status */
    bool access_itself;
    char inner[1024];
    /* or asks this pool for more than its capacity (refused), then fails
     * with COOP_ERR_BACKEND */
    coop_pool *overask;
    coop_pool *pool;     /* the callbacks call the pool (allowed: no lock held) */
    unsigned pool_calls; /* callbacks whose pool calls all answered as documented */
} script;

/* What a callback may do with the pool: allocate and free on another
 * stream (out of memory is an answer too: the pool is full while room is
 * made), read the statistics, check the invariants. Under the pool's lock
 * any of these would wait for it forever. */
static void call_the_pool(script *s)
{
    coop_status st;
    void *p = coop_malloc(s->pool, 512, 7, 0, &st);
    coop_stats stats;
    coop_get_stats(s->pool, &stats);
    if ((p || st == COOP_ERR_NOMEM) && coop_free(s->pool, p) == COOP_OK &&
        coop_pool_check(s->pool) == COOP_OK)
        s->pool_calls++;
}

static coop_status scripted_recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                                      void *out, void *user)
{
    (void)t, (void)inputs, (void)n, (void)out;
    script *s = user;
    const char *p = producer;
    if (strlen(s->ran) + 1 < sizeof s->ran) /* the first ones (a long chain runs 20,000) */
        strncat(s->ran, p, 1);
    if (s->access_itself) {
        coop_status st = coop_tensor_access(s->r, t, NULL);
        snprintf(s->inner, sizeof s->inner, "%s", coop_last_error());
        return st;
    }
    if (s->overask) {
        coop_status st;
        void *q = coop_malloc(s->overask, 1u << 30, 0, 0, &st);
        coop_free(s->overask, q); /* NULL: refused */
        snprintf(s->inner, sizeof s->inner, "%s", coop_last_error());
        return COOP_ERR_BACKEND;
    }
    if (s->pool)
        call_the_pool(s);
    if (s->fail && strchr(s->fail, p[0]))
        return COOP_ERR_BACKEND;
    if (s->r) { /* calls the context from inside: refused */
        coop_tensor *tmp;
        s->nested = coop_tensor_create(s->r, U, 1, "t", NULL, 0, EV, &tmp);
    }
    return COOP_OK;
}

static void count_eviction(coop_tensor *t, void *user)
{
    (void)t;
    script *s = user;
    s->evictions_told++;
    if (s->pool)
        call_the_pool(s);
    if (s->r && s->victim)
        s->nested = coop_tensor_release(s->r, s->victim);
    if (s->r && s->destroy)
        coop_remat_destroy(s->r);
}

static coop_remat *scripted(coop_pool *pool, coop_remat_policy policy, script *s)
{
    coop_remat_config cfg = {.policy = policy,
                             .cheap_threshold = -1,
                             .recompute = scripted_recompute,
                             .on_evict = count_eviction,
                             .user = s};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    return r;
}

static bool error_says(const char *what)
{
    return strstr(coop_last_error(), what) != NULL;
}

/* a -> b -> c on a pool of 4 blocks; a filler of 3 blocks (not evictable)
 * then evicts b and c: recomputing c runs b first, which fails. */
static void a_failed_recompute_leaves_the_tensor_evicted(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(4);
    script s = {.fail = "b"};
    coop_remat *r = scripted(pool, policy, &s);
    coop_tensor *a, *b, *c, *fill;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, 0, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", &a, 1, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "c", &b, 1, EV, &c), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_false(coop_tensor_resident(b) || coop_tensor_resident(c));
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    void *p = (void *)1;
    assert_int_equal(coop_tensor_access(r, c, &p), COOP_ERR_BACKEND);
    assert_null(p);
    assert_true(error_says("recompute callback failed"));
    assert_string_equal(s.ran, "b");
    /* neither b (the callback's garbage) nor c is resident: no value */
    assert_false(coop_tensor_resident(b) || coop_tensor_resident(c));
    assert_null(coop_tensor_data(b));
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.recomputes, 0); /* only callbacks that succeeded */
    assert_int_equal(coop_tensor_recomputes(b), 0);
    assert_int_equal(s.evictions_told, 2); /* b and c by the filler; not b's failure */
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    /* the retry recomputes both */
    s.fail = NULL;
    s.ran[0] = 0;
    assert_int_equal(coop_tensor_access(r, c, &p), COOP_OK);
    assert_non_null(p);
    assert_string_equal(s.ran, "bc");
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.recomputes, 2);
    assert_int_equal(s.evictions_told, 2); /* b's failed attempt is never told, later either */
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The failure's message says which call failed, which tensor's callback
 * failed and, when that is an input recomputed on the way, which tensor
 * was asked for: "coop_remat: ... for a tensor of 8192 bytes" named none
 * (rev30-F, a user's program whose pin failed deep in a chain). */
static void a_failed_recompute_names_the_call_and_the_tensors(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {.fail = "b"};
    coop_remat *r = scripted(pool, COOP_REMAT_COOP, &s);
    coop_tensor *a, *b, *c, *fill;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, 0, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", &a, 1, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "c", &b, 1, EV, &c), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    char want[160];
    void *p;
    assert_int_equal(coop_tensor_pin(r, c, &p), COOP_ERR_BACKEND);
    assert_true(strncmp(coop_last_error(), "coop_tensor_pin: ", 17) == 0);
    snprintf(want, sizeof want, "for tensor %p (%u bytes), an input recomputed for tensor %p",
             (void *)b, (unsigned)U, (void *)c);
    assert_true(error_says(want));
    /* asked for b itself: no "input" clause */
    assert_int_equal(coop_tensor_access(r, b, &p), COOP_ERR_BACKEND);
    assert_true(strncmp(coop_last_error(), "coop_tensor_access: ", 20) == 0);
    snprintf(want, sizeof want, "for tensor %p (%u bytes); it stays evicted", (void *)b,
             (unsigned)U);
    assert_true(error_says(want));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A callback that fails because a call it made was refused: the outer
 * message keeps the refused call's own words (what was refused, why).
 * "the recompute callback failed (object is in use)" alone overwrote them
 * (rev33-D, from an adversarial review). A plain failure adds nothing. */
static void a_failed_recompute_quotes_the_refused_call(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_COOP, &s);
    coop_tensor *a, *b, *fill;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, 0, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", &a, 1, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    assert_false(coop_tensor_resident(b));
    s.r = r;
    s.access_itself = true;
    assert_int_equal(coop_tensor_access(r, b, NULL), COOP_ERR_BUSY);
    assert_true(
        strncmp(s.inner, "coop_tensor_access: called from inside a coop_remat callback", 60) == 0);
    char want[256];
    snprintf(want, sizeof want,
             "coop_tensor_access: the recompute callback failed (object is in use) for tensor %p "
             "(%u bytes); it stays evicted and is recomputed at its next access; ",
             (void *)b, (unsigned)U);
    assert_true(strncmp(coop_last_error(), want, strlen(want)) == 0);
    assert_true(error_says(s.inner));
    assert_false(coop_tensor_resident(b));
    /* a refused call of the pool's, then a failure of the callback's own */
    s.access_itself = false;
    s.overask = pool;
    assert_int_equal(coop_tensor_access(r, b, NULL), COOP_ERR_BACKEND);
    assert_true(strncmp(s.inner, "coop_malloc: out of memory", 26) == 0); /* the call named */
    assert_true(error_says(s.inner));
    /* no refused call: the message ends where it did */
    s.overask = NULL;
    s.r = NULL;
    s.fail = "b";
    coop_status st;
    assert_null(coop_malloc(pool, 1u << 30, 0, 0, &st)); /* refused before the callback */
    assert_int_equal(st, COOP_ERR_NOMEM);
    assert_int_equal(coop_tensor_access(r, b, NULL), COOP_ERR_BACKEND);
    const char *e = coop_last_error(), *end = "recomputed at its next access";
    assert_string_equal(e + strlen(e) - strlen(end), end);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* coop_tensor_create_outputs whose outputs, rounded to 512 bytes as the
 * pool places them, add up past the capacity can never be placed (each
 * output stays pinned while the next is placed): refused at once, nothing
 * evicted. It evicted the tensors in the way of its first outputs (on_evict
 * told) before failing (rev33-D). Another output that finds no room says
 * which one. */
static void outputs_past_the_capacity_evict_nothing(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, policy, &s);
    coop_tensor *t[3], *outs[2] = {0}, *f;
    for (int i = 0; i < 3; i++)
        assert_int_equal(coop_tensor_create(r, U, 10, "t", NULL, 0, EV, &t[i]), COOP_OK);
    /* 4U bytes asked, 4U + 512 placed */
    size_t sizes[2] = {2 * U + 1, 2 * U - 1};
    assert_int_equal(coop_tensor_create_outputs(r, 2, sizes, 10, "o", NULL, 0, EV, outs),
                     COOP_ERR_NOMEM);
    char want[256];
    snprintf(want, sizeof want,
             "coop_tensor_create_outputs: the 2 outputs' sizes, each rounded up to 512 bytes, "
             "add up to %u bytes, past the pool's capacity of %u bytes",
             4 * U + 512, 4 * U);
    assert_true(strncmp(coop_last_error(), want, strlen(want)) == 0);
    assert_int_equal(s.evictions_told, 0);
    for (int i = 0; i < 3; i++)
        assert_true(coop_tensor_resident(t[i]));
    assert_null(outs[0]);
    assert_null(outs[1]);
    /* within the capacity, but f (not evictable) leaves no room for the
     * second: named by its index and size */
    assert_int_equal(coop_tensor_create(r, U, 10, "f", NULL, 0, 0, &f), COOP_OK);
    size_t fit[2] = {U, 2 * U + 1};
    assert_int_equal(coop_tensor_create_outputs(r, 2, fit, 10, "o", NULL, 0, EV, outs),
                     COOP_ERR_NOMEM);
    snprintf(want, sizeof want,
             "coop_tensor_create_outputs: no room for output 2 of 2 (%u bytes): ", 2 * U + 1);
    assert_true(strncmp(coop_last_error(), want, strlen(want)) == 0);
    assert_null(outs[0]);
    /* one output past the capacity: remat_alloc's refusal, naming it */
    size_t one = 4 * U + 1;
    assert_int_equal(coop_tensor_create_outputs(r, 1, &one, 10, "o", NULL, 0, EV, outs),
                     COOP_ERR_NOMEM);
    snprintf(want, sizeof want,
             "coop_tensor_create_outputs: output 1 of 1 (%u bytes) is larger than the pool's "
             "capacity of %u bytes",
             4 * U + 1, 4 * U);
    assert_string_equal(coop_last_error(), want);
    /* outputs that add up to the capacity exactly are placed */
    assert_int_equal(coop_tensor_release(r, f), COOP_OK);
    size_t exact[2] = {2 * U, 2 * U - 511};
    assert_int_equal(coop_tensor_create_outputs(r, 2, exact, 10, "o", NULL, 0, EV, outs), COOP_OK);
    assert_int_equal(coop_tensor_release(r, outs[0]), COOP_OK);
    assert_int_equal(coop_tensor_release(r, outs[1]), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* After coop_tensor_create_outputs has placed its outputs, a later call
 * out of room names no output: a copy-on-write coop_tensor_mutate that
 * finds no room for the new value says its bytes, not "output 2 of 2"
 * (the outputs being placed are forgotten once the loop ends). Nothing
 * evictable: f and the outputs are not, the old value is pinned. */
static void no_room_after_outputs_names_no_output(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat_config cfg = {.policy = COOP_REMAT_COOP,
                             .cheap_threshold = -1,
                             .copy_on_write = true,
                             .recompute = recompute};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    coop_tensor *f, *outs[2];
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "f", NULL, 0, 0, &f), COOP_OK);
    size_t sizes[2] = {U, U};
    assert_int_equal(coop_tensor_create_outputs(r, 2, sizes, 10, "o", NULL, 0, 0, outs), COOP_OK);
    void *old = NULL, *data = coop_tensor_data(outs[0]);
    assert_int_equal(coop_tensor_mutate(r, outs[0], 10, "m", NULL, 0, &old), COOP_ERR_NOMEM);
    char want[320];
    snprintf(want, sizeof want,
             "coop_tensor_mutate: no room for %u bytes: capacity %u, allocated %u of which 0 "
             "evictable, free 0, largest free block 0; evicting cannot free a contiguous range "
             "that large",
             U, 4 * U, 4 * U);
    assert_string_equal(coop_last_error(), want);
    assert_null(old);
    assert_ptr_equal(coop_tensor_data(outs[0]), data);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Out of room deep inside a call says which call: the messages began
 * "coop_remat: no room" whether a create, a pin or an access (recomputing
 * an input) ran out (rev30-F). */
static void no_room_names_the_call(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_COOP, &s);
    coop_tensor *a, *b, *f, *x;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, 0, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", &a, 1, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "f", NULL, 0, 0, &f), COOP_OK);
    assert_false(coop_tensor_resident(b));
    void *p;
    assert_int_equal(coop_tensor_pin(r, b, &p), COOP_ERR_NOMEM);
    assert_true(strncmp(coop_last_error(), "coop_tensor_pin: no room for ", 29) == 0);
    assert_int_equal(coop_tensor_create(r, 5 * U, 10, "x", NULL, 0, EV, &x), COOP_ERR_NOMEM);
    assert_true(strncmp(coop_last_error(), "coop_tensor_create: a tensor of ", 32) == 0);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Out of room while recomputing says for which tensor: a -> b -> c with b
 * and c evicted and room for one block; b is recomputed and pinned, and c
 * then finds none. "coop_tensor_access: no room for 8192 bytes" named
 * neither, though the owner asked for c and the request was c's own
 * (rev33-A). */
static void no_room_while_recomputing_names_the_tensor(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_COOP, &s);
    coop_tensor *a, *b, *c, *f;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, 0, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", &a, 1, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "c", &b, 1, EV, &c), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "f", NULL, 0, 0, &f), COOP_OK);
    assert_int_equal(coop_tensor_release(r, f), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "f", NULL, 0, 0, &f), COOP_OK);
    assert_false(coop_tensor_resident(b) || coop_tensor_resident(c));
    assert_int_equal(coop_tensor_access(r, c, NULL), COOP_ERR_NOMEM);
    char want[160];
    snprintf(want, sizeof want,
             "coop_tensor_access: no room for %u bytes to recompute tensor %p (%u bytes): "
             "capacity ",
             (unsigned)U, (void *)c, (unsigned)U);
    assert_true(strncmp(coop_last_error(), want, strlen(want)) == 0);
    assert_true(coop_tensor_resident(b)); /* recomputed on the way: stays */
    assert_false(coop_tensor_resident(c));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The recomputable in-place path fails too: the old value's buffer taken
 * over, the callback fails, and both stay evicted. */
static void a_failed_in_place_recompute_leaves_both_evicted(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_DTR, &s);
    coop_tensor *w, *x, *fill;
    assert_int_equal(coop_tensor_create(r, U, 10, "w", NULL, 0, 0, &w), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "x", &w, 1, EV, &x), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, x, 10, "m", NULL, 0, NULL), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_false(coop_tensor_resident(x));
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    s.fail = "m";
    assert_int_equal(coop_tensor_access(r, x, NULL), COOP_ERR_BACKEND);
    assert_string_equal(s.ran, "xm");
    assert_false(coop_tensor_resident(x));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    s.fail = NULL;
    s.ran[0] = 0;
    assert_int_equal(coop_tensor_access(r, x, NULL), COOP_OK);
    assert_string_equal(s.ran, "xm");
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Larger than the capacity, or than what evicting everything could free:
 * out of memory at once, with the numbers, and nothing evicted. */
static void requests_that_cannot_fit_evict_nothing(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(8);
    script s = {0};
    coop_remat *r = scripted(pool, policy, &s);
    coop_tensor *a, *b, *pinned, *t;
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "b", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 4 * U, 10, "p", NULL, 0, 0, &pinned), COOP_OK);
    const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 100, (size_t)1 << 62, 9 * U};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(coop_tensor_create(r, sizes[i], 1, "t", NULL, 0, EV, &t), COOP_ERR_NOMEM);
        assert_null(t);
        assert_true(error_says("larger than the pool's capacity of 65536 bytes"));
    }
    /* 5 blocks: within the capacity, but the 4 not evictable leave 4 */
    assert_int_equal(coop_tensor_create(r, 5 * U, 1, "t", NULL, 0, EV, &t), COOP_ERR_NOMEM);
    assert_true(error_says("capacity 65536"));
    assert_true(error_says("of which 32768 evictable"));
    assert_true(coop_tensor_resident(a) && coop_tensor_resident(b));
    assert_int_equal(s.evictions_told, 0);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.frag_failures, 0);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A request that fits the capacity but not between the blocks nothing can
 * evict: [a][k][b][free 2], 5 units asked, k not evictable. Every policy
 * sees that no run of free and evictable blocks covers it and evicts
 * nothing: without VMM (the argmin policies evicted a and b first, before
 * fits_in_segments), and with VMM whose address range is the capacity,
 * which binds as a segment does (fits_in_range: every policy evicted a and
 * b, failed, and said that nothing evictable was left). */
static void a_request_split_by_a_kept_block_evicts_nothing(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    for (int vmm = 0; vmm < 2; vmm++) {
        coop_config c;
        coop_config_default(&c);
        c.use_vmm = vmm;
        c.page_size = 4096;
        c.capacity = c.va_size = c.segment_size = 8 * U;
        coop_pool *pool;
        assert_int_equal(coop_pool_create(&c, &pool), COOP_OK);
        script s = {0};
        coop_remat *r = scripted(pool, policy, &s);
        coop_tensor *a, *kept, *b, *t;
        assert_int_equal(coop_tensor_create(r, 2 * U, 10, "a", NULL, 0, EV, &a), COOP_OK);
        assert_int_equal(coop_tensor_create(r, 2 * U, 10, "k", NULL, 0, 0, &kept), COOP_OK);
        assert_int_equal(coop_tensor_create(r, 2 * U, 10, "b", NULL, 0, EV, &b), COOP_OK);
        assert_ptr_equal(coop_tensor_data(b), (char *)coop_tensor_data(a) + 4 * U);
        /* free: 2 blocks above b; evicting a and b leaves 2 and 4, never 5 */
        assert_int_equal(coop_tensor_create(r, 5 * U, 1, "t", NULL, 0, EV, &t), COOP_ERR_NOMEM);
        assert_true(error_says("of which 32768 evictable"));
        /* with VMM the 2 free units lie above the top, tiled by no block */
        assert_true(error_says(vmm ? "free 0, largest free block 0, address range above the top "
                                     "16384;"
                                   : "free 16384, largest free block 16384;"));
        assert_true(coop_tensor_resident(a) && coop_tensor_resident(b));
        assert_true(coop_tensor_resident(kept));
        assert_int_equal(s.evictions_told, 0);
        assert_int_equal(coop_pool_check(pool), COOP_OK);
        coop_remat_destroy(r);
        coop_pool_destroy(pool);
    }
}

/* A chain as long as the C stack of a small thread could never recurse
 * over (each level of the old recursion took ~140 bytes). */
#define CHAIN 20000
typedef struct chain_job {
    coop_remat *r;
    coop_tensor *end;
    coop_status st;
} chain_job;

static void *access_end(void *arg)
{
    chain_job *job = arg;
    job->st = coop_tensor_access(job->r, job->end, NULL);
    return NULL;
}

static void a_long_chain_recomputes_on_a_small_stack(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4); /* released links are evicted at once */
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_DTR, &s);
    coop_tensor *prev;
    assert_int_equal(coop_tensor_create(r, 512, 1, "w", NULL, 0, 0, &prev), COOP_OK);
    for (int i = 0; i < CHAIN; i++) {
        coop_tensor *next;
        assert_int_equal(coop_tensor_create(r, 512, 1, "c", &prev, 1, EV, &next), COOP_OK);
        if (i > 0)
            assert_int_equal(coop_tensor_release(r, prev), COOP_OK);
        prev = next;
    }
    coop_tensor *fill; /* evicts the end: every link is evicted now */
    assert_int_equal(coop_tensor_create(r, 4 * U - 512, 1, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_false(coop_tensor_resident(prev));
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    chain_job job = {.r = r, .end = prev};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t th;
    assert_int_equal(pthread_create(&th, &attr, access_end, &job), 0);
    pthread_join(th, NULL);
    pthread_attr_destroy(&attr);
    assert_int_equal(job.st, COOP_OK);
    assert_true(coop_tensor_resident(prev));
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_true(st.recomputes >= CHAIN);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A tensor updated in place again and again by an op that reads the same
 * other tensor (h.add_(w) in a loop, recomputable in-place and
 * copy-on-write): each op moves the target's link in w's consumers to the
 * old value. rev37-C: that link was searched from the front of w's
 * consumers, which every earlier op's old value keeps, so 100,000 such
 * ops took 2.2 s (N^2 / 2 links read); now the work per op stays constant.
 * Counted in links read, not timed. The old values then recompute. */
static void in_place_ops_on_one_input_stay_linear(void **state)
{
    (void)state;
    enum { OPS = 2000 };
    for (int cow = 0; cow < 2; cow++) {
        coop_pool *pool = pool_of(4);
        coop_remat_config cfg = {.policy = COOP_REMAT_DTR,
                                 .cheap_threshold = -1,
                                 .copy_on_write = cow,
                                 .recompute = recompute};
        coop_remat *r;
        assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
        coop_tensor *w, *h;
        assert_int_equal(coop_tensor_create(r, 512, 1, "w", NULL, 0, 0, &w), COOP_OK);
        assert_int_equal(coop_tensor_create(r, 512, 1, "h", &w, 1, EV, &h), COOP_OK);
        coop_tensor *both[2] = {w, w}; /* w read twice: two links to move */
        for (int i = 0; i < OPS; i++)
            assert_int_equal(coop_tensor_mutate(r, h, 1, "m", both, 2, NULL), COOP_OK);
        /* two links moved per op, each read once at least (mutant R03) */
        assert_true(r->link_scans >= 2u * OPS && r->link_scans <= 8u * OPS);
        coop_tensor *fill; /* evicts h (and every old value) */
        assert_int_equal(coop_tensor_create(r, 4 * U - 512, 1, "f", NULL, 0, 0, &fill), COOP_OK);
        assert_false(coop_tensor_resident(h));
        assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
        assert_int_equal(coop_tensor_access(r, h, NULL), COOP_OK);
        assert_int_equal(coop_pool_check(pool), COOP_OK);
        coop_remat_destroy(r);
        coop_pool_destroy(pool);
    }
}

/* The whole message of each misuse a user can make with a live handle
 * names the call, the tensor (its handle, as the user holds it) and the
 * numbers (rev31-B: "tensor already released", "tensor is not pinned",
 * "input 0 is not resident", "size 0 (output 0)", "unknown flags 0x100"
 * named no tensor, no count, no valid value; a foreign handle's message
 * named neither context). Nothing changes (the pool check passes). */
static void misuse_names_the_call_the_tensor_and_the_numbers(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(8), *pool2 = pool_of(8);
    coop_remat *r = context(pool, COOP_REMAT_DTR), *r2 = context(pool2, COOP_REMAT_DTR);
    coop_tensor *a, *b, *t = NULL, *outs[2];
    char want[256];
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", &a, 1, EV, &b), COOP_OK);
    /* a foreign handle: both contexts */
    assert_int_equal(coop_tensor_access(r2, a, NULL), COOP_ERR_INVALID);
    snprintf(want, sizeof want,
             "coop_tensor_access: tensor (%p) belongs to another coop_remat (%p, not %p)",
             (void *)a, (void *)r, (void *)r2);
    assert_string_equal(coop_last_error(), want);
    /* unpinning what this handle never pinned: the storage's pins */
    assert_int_equal(coop_tensor_unpin(r, a), COOP_ERR_INVALID);
    snprintf(want, sizeof want,
             "coop_tensor_unpin: tensor (%p) is not pinned through this handle (its storage has 0 "
             "pins)",
             (void *)a);
    assert_string_equal(coop_last_error(), want);
    /* a second release */
    assert_int_equal(coop_tensor_release(r, b), COOP_OK);
    assert_int_equal(coop_tensor_release(r, b), COOP_ERR_INVALID);
    snprintf(want, sizeof want, "coop_tensor_release: tensor (%p) was already released", (void *)b);
    assert_string_equal(coop_last_error(), want);
    /* zero sizes: which one */
    assert_int_equal(coop_tensor_create(r, 0, 1, "t", NULL, 0, EV, &t), COOP_ERR_INVALID);
    assert_string_equal(coop_last_error(), "coop_tensor_create: size is 0");
    const size_t sizes[2] = {U, 0};
    assert_int_equal(coop_tensor_create_outputs(r, 2, sizes, 1, "o", NULL, 0, EV, outs),
                     COOP_ERR_INVALID);
    assert_string_equal(coop_last_error(), "coop_tensor_create_outputs: sizes[1] is 0");
    /* bad flags: the unknown bits and the known ones */
    assert_int_equal(coop_tensor_create(r, U, 1, "t", NULL, 0, 0x103, &t), COOP_ERR_INVALID);
    assert_string_equal(coop_last_error(),
                        "coop_tensor_create: unknown flags 0x100 in 0x103 (known: "
                        "COOP_TENSOR_EVICTABLE 0x1, COOP_TENSOR_CHEAP 0x2)");
    /* an evicted input: which handle */
    coop_tensor *fill;
    assert_int_equal(coop_tensor_create(r, 8 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    assert_false(coop_tensor_resident(a));
    assert_int_equal(coop_tensor_create(r, U, 1, "t", &a, 1, EV, &t), COOP_ERR_INVALID);
    snprintf(want, sizeof want,
             "coop_tensor_create: input 0 (%p) is not resident (access or pin it first)",
             (void *)a);
    assert_string_equal(coop_last_error(), want);
    assert_null(t);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    assert_int_equal(coop_pool_check(pool2), COOP_OK);
    /* and the calls work */
    assert_int_equal(coop_tensor_access(r, a, NULL), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 1, "t", &a, 1, EV, &t), COOP_OK);
    coop_remat_destroy(r2);
    coop_remat_destroy(r);
    coop_pool_destroy(pool2);
    coop_pool_destroy(pool);
}

/* Through a view, the messages name the handle the user passed (not its
 * storage) and the storage's pins (not the handle's). rev31-G: mutants
 * naming the storage of an evicted input, or this handle's pins in
 * coop_tensor_unpin's message, survived misuse_names_the_call_... */
static void misuse_through_a_view_names_the_view(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(8);
    coop_remat *r = context(pool, COOP_REMAT_DTR);
    coop_tensor *a, *v, *t = NULL;
    char want[256];
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, a, &v), COOP_OK);
    /* pinned through a, unpinned through v: the storage has the pin */
    assert_int_equal(coop_tensor_pin(r, a, NULL), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, v), COOP_ERR_INVALID);
    snprintf(want, sizeof want,
             "coop_tensor_unpin: tensor (%p) is not pinned through this handle (its storage has 1 "
             "pin)",
             (void *)v);
    assert_string_equal(coop_last_error(), want);
    assert_int_equal(coop_tensor_unpin(r, a), COOP_OK);
    /* v's storage evicted: the input named is v */
    coop_tensor *fill;
    assert_int_equal(coop_tensor_create(r, 8 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    assert_false(coop_tensor_resident(v));
    assert_int_equal(coop_tensor_create(r, U, 1, "t", &v, 1, EV, &t), COOP_ERR_INVALID);
    snprintf(want, sizeof want,
             "coop_tensor_create: input 0 (%p) is not resident (access or pin it first)",
             (void *)v);
    assert_string_equal(coop_last_error(), want);
    assert_null(t);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Another context's tensor, a released one, NULLs, bad flags and costs. */
static void bad_handles_and_arguments_change_nothing(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(8), *pool2 = pool_of(8);
    coop_remat *r = context(pool, COOP_REMAT_COOP), *r2 = context(pool2, COOP_REMAT_COOP);
    coop_tensor *a, *b, *v, *t = NULL;
    void *p;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", &a, 1, EV, &b), COOP_OK);
    /* another context's */
    assert_int_equal(coop_tensor_access(r2, a, &p), COOP_ERR_INVALID);
    assert_true(error_says("belongs to another coop_remat"));
    assert_int_equal(coop_tensor_create(r2, U, 1, "t", &a, 1, EV, &t), COOP_ERR_INVALID);
    assert_true(error_says("input 0"));
    assert_int_equal(coop_tensor_release(r2, a), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_alias(r2, a, &v), COOP_ERR_INVALID);
    /* NULLs and bad values */
    assert_int_equal(coop_tensor_create(NULL, U, 1, "t", NULL, 0, EV, &t), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_create(r, U, 1, "t", NULL, 1, EV, &t), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_create(r, U, 1, "t", NULL, 0, 0x100, &t), COOP_ERR_INVALID);
    assert_true(error_says("unknown flags"));
    assert_int_equal(coop_tensor_create(r, U, COOP_TENSOR_MAX_COST_NS + 1, "t", NULL, 0, EV, &t),
                     COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_mutate(r, a, UINT64_MAX, "m", NULL, 0, NULL), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_alias(r, a, NULL), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_access(NULL, a, &p), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_pin(r, NULL, &p), COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_pin"));
    assert_int_equal(coop_tensor_mutate(r, a, 1, "m", NULL, 2, NULL), COOP_ERR_INVALID);
    coop_remat_stats st;
    coop_remat_get_stats(NULL, &st); /* zeroes */
    assert_int_equal(st.records, 0);
    /* released: every call with it is refused, and nothing is recomputed */
    assert_int_equal(coop_tensor_release(r, b), COOP_OK);
    assert_int_equal(coop_tensor_access(r, b, &p), COOP_ERR_INVALID);
    assert_true(error_says("was released"));
    assert_int_equal(coop_tensor_pin(r, b, &p), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_unpin(r, b), COOP_ERR_INVALID);
    assert_true(error_says("was released")); /* not "not pinned": it never was */
    assert_int_equal(coop_tensor_release(r, b), COOP_ERR_INVALID);
    assert_true(error_says("already released"));
    assert_int_equal(coop_tensor_create(r, U, 1, "t", &b, 1, EV, &t), COOP_ERR_INVALID);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    assert_int_equal(coop_pool_check(pool2), COOP_OK);
    coop_remat_get_stats(r2, &st);
    assert_int_equal(st.records, 0);
    coop_remat_destroy(r2);
    coop_remat_destroy(r);
    coop_pool_destroy(pool2);
    coop_pool_destroy(pool);
}

/* A released handle in every call that takes one, a second release, an
 * unpin without a pin: each refused by name, and neither the context nor
 * the pool changes (their statistics compare equal, invariants hold). */
static void released_handles_and_unbalanced_pins_change_nothing(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(8);
    coop_remat *r = context(pool, COOP_REMAT_DTR);
    coop_tensor *a, *b, *v = NULL, *t = NULL;
    void *p = (void *)1, *old = (void *)1;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", &a, 1, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_release(r, b), COOP_OK);
    coop_remat_stats before, after;
    coop_stats pool_before, pool_after;
    coop_remat_get_stats(r, &before);
    coop_get_stats(pool, &pool_before);
    assert_int_equal(coop_tensor_alias(r, b, &v), COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_alias: base"));
    assert_true(error_says("was released (used after coop_tensor_release)"));
    assert_null(v);
    assert_int_equal(coop_tensor_mutate(r, b, 1, "m", NULL, 0, &old), COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_mutate: tensor"));
    assert_true(error_says("was released"));
    assert_null(old);
    assert_int_equal(coop_tensor_mutate(r, a, 1, "m", &b, 1, NULL), COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_mutate: input 0"));
    assert_int_equal(coop_tensor_pin(r, b, &p), COOP_ERR_INVALID);
    assert_null(p);
    assert_int_equal(coop_tensor_release(r, b), COOP_ERR_INVALID);
    assert_true(error_says("was already released"));
    /* pins: an unpin without a pin, a second unpin after a balanced pair */
    assert_int_equal(coop_tensor_unpin(r, a), COOP_ERR_INVALID);
    assert_true(error_says("is not pinned through this handle"));
    assert_int_equal(coop_tensor_pin(r, a, NULL), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, a), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, a), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_unpin(r, NULL), COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_unpin: tensor is NULL"));
    assert_int_equal(coop_tensor_release(r, NULL), COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_release: tensor is NULL"));
    assert_int_equal(coop_tensor_create(r, U, 1, "t", &b, 1, EV, &t), COOP_ERR_INVALID);
    assert_null(t);
    coop_remat_get_stats(r, &after);
    coop_get_stats(pool, &pool_after);
    /* the pin and unpin of a touch a's access time and the clock only */
    before.clock = after.clock;
    assert_memory_equal(&after, &before, sizeof after);
    assert_memory_equal(&pool_after, &pool_before, sizeof pool_after);
    assert_true(coop_tensor_resident(a));
    /* an evicted input: refused, nothing recomputed behind the caller's back */
    coop_tensor *fill;
    assert_int_equal(coop_tensor_create(r, 8 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_false(coop_tensor_resident(a));
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 1, "t", &a, 1, EV, &t), COOP_ERR_INVALID);
    assert_true(error_says("is not resident (access or pin it first)"));
    assert_null(t);
    assert_false(coop_tensor_resident(a));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* coop_remat_create names the argument it refuses. */
static void context_refusals_name_the_argument(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat_config cfg = {.recompute = recompute};
    coop_remat *r = (coop_remat *)1;
    coop_remat_stats st;
    assert_int_equal(coop_remat_create(NULL, &cfg, &r), COOP_ERR_INVALID);
    assert_null(r);
    assert_true(error_says("coop_remat_create: pool is NULL"));
    assert_int_equal(coop_remat_create(pool, NULL, &r), COOP_ERR_INVALID);
    assert_true(error_says("coop_remat_create: config is NULL"));
    cfg.recompute = NULL;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_ERR_INVALID);
    assert_true(error_says("coop_remat_create: config->recompute is NULL"));
    cfg.recompute = recompute;
    cfg.policy = (coop_remat_policy)(COOP_REMAT_COOP_COMP + 1);
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_ERR_INVALID);
    assert_true(error_says("coop_remat_create: config->policy 8 is not a coop_remat_policy"));
    cfg.policy = (coop_remat_policy)-1;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_ERR_INVALID);
    assert_true(error_says("config->policy -1"));
    assert_null(r);
    assert_int_equal(coop_remat_create(pool, &cfg, NULL), COOP_ERR_INVALID);
    assert_true(error_says("coop_remat_create: out is NULL"));
    cfg.policy = COOP_REMAT_COOP;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 1, "t", NULL, 0, EV, NULL), COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_create: out is NULL"));
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.records, 0);
    coop_remat_destroy(r);
    coop_remat_destroy(NULL);
    coop_remat_get_stats(NULL, NULL);
    memset(&st, 0xff, sizeof st);
    coop_remat_get_stats(NULL, &st);
    assert_int_equal(st.records, 0);
    assert_int_equal(coop_tensor_size(NULL), 0);
    assert_int_equal(coop_tensor_recomputes(NULL), 0);
    assert_false(coop_tensor_resident(NULL));
    assert_null(coop_tensor_data(NULL));
    coop_stats s;
    coop_get_stats(pool, &s);
    assert_int_equal(s.allocation.current, 0);
    coop_pool_destroy(pool);
}

/* Pins count per handle; a handle's pins go when it is released. */
static void pins_belong_to_their_handle(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat *r = context(pool, COOP_REMAT_DTR);
    coop_tensor *a, *v, *t;
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, a, &v), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, v, NULL), COOP_OK);
    /* a never pinned: its unpin must not take the view's pin */
    assert_int_equal(coop_tensor_unpin(r, a), COOP_ERR_INVALID);
    assert_true(error_says("not pinned"));
    assert_int_equal(coop_tensor_create(r, 3 * U, 1, "t", NULL, 0, EV, &t), COOP_ERR_NOMEM);
    assert_true(coop_tensor_resident(a));
    /* a released view's pin stays until unpinned through it */
    assert_int_equal(coop_tensor_release(r, v), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 1, "t", NULL, 0, EV, &t), COOP_ERR_NOMEM);
    assert_int_equal(coop_tensor_access(r, v, NULL), COOP_ERR_INVALID);
    assert_int_equal(coop_tensor_unpin(r, v), COOP_OK);
    assert_int_equal(coop_tensor_unpin(r, v), COOP_ERR_INVALID); /* now released, unpinned */
    assert_int_equal(coop_tensor_create(r, 3 * U, 1, "t", NULL, 0, EV, &t), COOP_OK);
    assert_false(coop_tensor_resident(a));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A recompute callback that records the pin count of its first input's
 * storage, as the recomputation holds it. */
static uint64_t input_pins_seen;

static coop_status record_input_pins(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                                     void *out, void *user)
{
    (void)producer, (void)inputs, (void)out, (void)user;
    if (n)
        input_pins_seen = t->inputs[0]->pins;
    return COOP_OK;
}

/* Pin counts cannot wrap: a handle holding UINT32_MAX pins refuses
 * another, naming the tensor and the count, and a storage's count (user
 * pins through all its handles plus those of recomputations and creates
 * in progress) goes past UINT32_MAX without wrapping to 0, which made a
 * pinned tensor evictable while an op read it. Counts are set near the
 * limit directly: four billion pin calls would take minutes (rev33-D). */
static void pin_counts_do_not_wrap(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(4);
    coop_remat_config cfg = {
        .policy = policy, .cheap_threshold = -1, .recompute = record_input_pins};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    coop_tensor *a, *b, *f, *x;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "b", &a, 1, EV, &b), COOP_OK);
    void *p;
    assert_int_equal(coop_tensor_pin(r, a, &p), COOP_OK);
    a->user_pins = UINT32_MAX;
    a->pins = (uint64_t)UINT32_MAX + 2; /* and two through views, not this handle's */
    /* the handle's limit: refused, nothing changed, the handle's count said */
    assert_int_equal(coop_tensor_pin(r, a, &p), COOP_ERR_BUSY);
    char want[160];
    snprintf(want, sizeof want,
             "coop_tensor_pin: tensor %p (%u bytes) is pinned 4294967295 times through this "
             "handle already",
             (void *)a, (unsigned)U);
    assert_true(strncmp(coop_last_error(), want, strlen(want)) == 0);
    assert_int_equal(a->user_pins, UINT32_MAX);
    assert_true(a->pins == (uint64_t)UINT32_MAX + 2);
    a->pins = UINT32_MAX;
    /* a create reading a pins it once more: past UINT32_MAX, so placing x
     * cannot evict it */
    assert_int_equal(coop_tensor_create(r, 4 * U, 10, "x", &a, 1, EV, &x), COOP_ERR_NOMEM);
    assert_true(coop_tensor_resident(a));
    assert_int_equal(a->pins, UINT32_MAX);
    /* so does the recomputation of b (evicted by f) */
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "f", NULL, 0, 0, &f), COOP_OK);
    assert_false(coop_tensor_resident(b));
    assert_int_equal(coop_tensor_release(r, f), COOP_OK);
    assert_int_equal(coop_tensor_access(r, b, NULL), COOP_OK);
    assert_true(input_pins_seen == (uint64_t)UINT32_MAX + 1);
    assert_true(coop_tensor_resident(a));
    assert_int_equal(a->pins, UINT32_MAX);
    a->user_pins = 1;
    a->pins = 1;
    assert_int_equal(coop_tensor_unpin(r, a), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The refusal of a pin past a view's limit names the storage's size: a
 * view has no size of its own (its record's is 0), and the message said
 * "(0 bytes)" (rev38-C's review). */
static void a_views_pin_limit_names_the_storage_size(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat *r = context(pool, COOP_REMAT_DTR);
    coop_tensor *a, *v;
    void *p;
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, a, &v), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, v, &p), COOP_OK);
    v->user_pins = UINT32_MAX; /* as pin_counts_do_not_wrap: not four billion calls */
    assert_int_equal(coop_tensor_pin(r, v, &p), COOP_ERR_BUSY);
    char want[128];
    snprintf(want, sizeof want, "coop_tensor_pin: tensor %p (%u bytes) is pinned 4294967295 times",
             (void *)v, 2 * U);
    if (strncmp(coop_last_error(), want, strlen(want)) != 0)
        fail_msg("got \"%s\", want \"%s...\"", coop_last_error(), want);
    v->user_pins = 1;
    assert_int_equal(coop_tensor_unpin(r, v), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Every refusal of create, create_outputs and alias leaves *out (outs[i])
 * NULL, as the later checks did: the refusals before them (a NULL context,
 * a call from a callback) left whatever the caller's variable held, which
 * a caller testing it for NULL took for a tensor (rev38-C's review). outs
 * overlapping inputs is still left alone: the caller's inputs stay. */
static coop_remat *nested_r;
static coop_tensor *nested_out[2];
static coop_status nested_st[3];

static void create_from_on_evict(coop_tensor *t, void *user)
{
    (void)t, (void)user;
    size_t sizes[2] = {U, U};
    nested_out[0] = nested_out[1] = (coop_tensor *)&nested_r; /* not NULL */
    nested_st[0] = coop_tensor_create(nested_r, U, 1, "x", NULL, 0, EV, &nested_out[0]);
    nested_st[1] = coop_tensor_create_outputs(nested_r, 2, sizes, 1, "x", NULL, 0, EV, nested_out);
    nested_out[1] = (coop_tensor *)&nested_r;
    nested_st[2] = coop_tensor_alias(nested_r, t, &nested_out[1]);
}

static void refused_creates_leave_their_outputs_null(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat_config cfg = {.policy = COOP_REMAT_DTR,
                             .cheap_threshold = -1,
                             .recompute = recompute,
                             .on_evict = create_from_on_evict};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    coop_tensor *a, *b, *junk = (coop_tensor *)&cfg, *outs[2] = {junk, junk}, *v = junk;
    size_t sizes[2] = {U, U};
    assert_int_equal(coop_tensor_create(r, 4 * U, 1, "a", NULL, 0, EV, &a), COOP_OK);
    /* a NULL context */
    coop_tensor *o = junk;
    assert_int_equal(coop_tensor_create(NULL, U, 1, "x", NULL, 0, EV, &o), COOP_ERR_INVALID);
    assert_null(o);
    assert_int_equal(coop_tensor_create_outputs(NULL, 2, sizes, 1, "x", NULL, 0, EV, outs),
                     COOP_ERR_INVALID);
    assert_null(outs[0]);
    assert_null(outs[1]);
    assert_int_equal(coop_tensor_alias(NULL, a, &v), COOP_ERR_INVALID);
    assert_null(v);
    /* from on_evict (b's placement evicts a) */
    nested_r = r;
    assert_int_equal(coop_tensor_create(r, 4 * U, 1, "b", NULL, 0, EV, &b), COOP_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(nested_st[i], COOP_ERR_BUSY);
    assert_null(nested_out[0]);
    assert_null(nested_out[1]);
    /* outs overlapping inputs: refused, the inputs kept */
    coop_tensor *io[2] = {b, b};
    assert_int_equal(coop_tensor_create(r, U, 1, "x", io, 2, EV, &io[1]), COOP_ERR_INVALID);
    assert_ptr_equal(io[1], b);
    assert_int_equal(coop_tensor_create(NULL, U, 1, "x", io, 2, EV, &io[1]), COOP_ERR_INVALID);
    assert_ptr_equal(io[1], b);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.records, 2);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A storage's recompute count (coop_tensor_recomputes, and COOP_COMP's
 * window cost, 1 + 0.1 x recomputes) stops at UINT32_MAX: it wrapped to
 * 0, making the most recomputed tensor look never recomputed (rev38-C's
 * review). Set near the limit directly, as the pin counts above. */
static void recompute_counts_do_not_wrap(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(2);
    coop_remat *r = context(pool, COOP_REMAT_COOP_COMP);
    coop_tensor *a, *b;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    a->remats = UINT32_MAX - 1;
    for (int i = 0; i < 2; i++) { /* b evicts a, then a's access evicts b */
        assert_int_equal(coop_tensor_create(r, 2 * U, 1, "b", NULL, 0, EV, &b), COOP_OK);
        assert_false(coop_tensor_resident(a));
        assert_int_equal(coop_tensor_release(r, b), COOP_OK);
        assert_int_equal(coop_tensor_access(r, a, NULL), COOP_OK);
    }
    assert_int_equal(coop_tensor_recomputes(a), UINT32_MAX);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.recomputes, 2);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Copy-on-write would move a pinned tensor to a new buffer and leave the
 * pinned one to the old value, unpinned: filling the pool then evicted it
 * while the pin was held. Refused (COOP_ERR_BUSY), nothing changed, for a
 * pin through the tensor or through a view, for a mutation through either;
 * fine once unpinned. */
static void copy_on_write_refuses_a_pinned_tensor(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(4);
    coop_remat_config cfg = {
        .policy = policy, .cheap_threshold = -1, .copy_on_write = true, .recompute = recompute};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    coop_tensor *a, *v, *f[2];
    void *pinned, *old = NULL;
    assert_int_equal(coop_tensor_create(r, U, 100, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, a, &v), COOP_OK);
    assert_int_equal(coop_tensor_pin(r, a, &pinned), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, a, 100, "m", NULL, 0, &old), COOP_ERR_BUSY);
    char want[96]; /* which tensor, and its pins (rev31-B) */
    snprintf(want, sizeof want, "coop_tensor_mutate: the storage of tensor (%p) is pinned (1 pin)",
             (void *)a);
    assert_true(error_says(want));
    assert_null(old);
    assert_ptr_equal(coop_tensor_data(a), pinned);
    /* the pinned buffer stays: three more blocks fill the pool, evicting nothing */
    assert_int_equal(coop_tensor_create(r, U, 1, "f", NULL, 0, 0, &f[0]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 2 * U, 1, "f", NULL, 0, 0, &f[1]), COOP_OK);
    assert_ptr_equal(coop_tensor_data(a), pinned);
    /* the same through a view of the pinned storage */
    assert_int_equal(coop_tensor_mutate(r, v, 100, "m", NULL, 0, &old), COOP_ERR_BUSY);
    assert_null(old);
    assert_ptr_equal(coop_tensor_data(a), pinned);
    assert_int_equal(coop_tensor_unpin(r, a), COOP_OK);
    assert_int_equal(coop_tensor_release(r, f[0]), COOP_OK);
    assert_int_equal(coop_tensor_release(r, f[1]), COOP_OK);
    /* a pin through a view holds the same storage */
    assert_int_equal(coop_tensor_pin(r, v, NULL), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, a, 100, "m", NULL, 0, NULL), COOP_ERR_BUSY);
    assert_int_equal(coop_tensor_unpin(r, v), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, a, 100, "m", NULL, 0, &old), COOP_OK);
    assert_ptr_equal(old, pinned);
    assert_ptr_not_equal(coop_tensor_data(a), pinned);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A tensor created not evictable (a constant: weights its producer cannot
 * recompute) stays resident while a view names it, its own handle
 * released (w.t() kept, w dropped): it was evicted, and its producer run
 * to "recompute" it at the view's next access. Released with its views,
 * its memory is freed. */
static void a_constant_held_by_a_view_is_not_evicted(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(4);
    coop_remat *r = context(pool, policy);
    coop_tensor *w, *v, *t;
    void *before, *after;
    assert_int_equal(coop_tensor_create(r, 2 * U, 0, "w", NULL, 0, 0, &w), COOP_OK);
    assert_int_equal(coop_tensor_alias(r, w, &v), COOP_OK);
    assert_int_equal(coop_tensor_release(r, w), COOP_OK);
    assert_int_equal(coop_tensor_access(r, v, &before), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "t", NULL, 0, EV, &t), COOP_ERR_NOMEM);
    assert_true(coop_tensor_resident(v));
    assert_int_equal(coop_tensor_access(r, v, &after), COOP_OK);
    assert_ptr_equal(after, before);
    assert_int_equal(coop_tensor_recomputes(v), 0);
    assert_int_equal(coop_tensor_release(r, v), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "t", NULL, 0, EV, &t), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The pool refuses to free or stream-record a tensor's buffer. */
static void the_pool_refuses_a_tensors_buffer(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat *r = context(pool, COOP_REMAT_COOP);
    coop_tensor *a, *b;
    void *p;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_access(r, a, &p), COOP_OK);
    assert_int_equal(coop_free(pool, p), COOP_ERR_INVALID);
    assert_true(error_says("buffer of a coop_tensor"));
    assert_int_equal(coop_record_stream(pool, p, 7), COOP_ERR_INVALID);
    assert_true(coop_tensor_resident(a));
    assert_int_equal(coop_tensor_create(r, U, 10, "b", NULL, 0, EV, &b), COOP_OK);
    assert_ptr_not_equal(coop_tensor_data(b), p); /* a's block was not freed */
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocation.current, 2);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocation.current, 0); /* destroy frees both */
    coop_pool_destroy(pool);
}

/* Calls from inside callbacks are refused, and every eviction is told. */
static void callbacks_cannot_call_the_context(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_COOP, &s);
    coop_tensor *t[3], *big;
    for (int i = 0; i < 3; i++)
        assert_int_equal(coop_tensor_create(r, U, 10, "t", NULL, 0, EV, &t[i]), COOP_OK);
    s.r = r;
    s.victim = t[2];
    assert_int_equal(coop_tensor_create(r, 4 * U, 1, "B", NULL, 0, EV, &big), COOP_OK);
    assert_int_equal(s.nested, COOP_ERR_BUSY);
    assert_int_equal(s.evictions_told, 3);
    assert_true(coop_tensor_resident(big));
    assert_int_equal(coop_tensor_release(r, big), COOP_OK); /* t[2] was not released inside */
    /* from the recompute callback */
    s.victim = NULL;
    s.nested = COOP_OK;
    void *p;
    assert_int_equal(coop_tensor_access(r, t[0], &p), COOP_OK);
    assert_int_equal(s.nested, COOP_ERR_BUSY);
    assert_non_null(p);
    assert_true(coop_tensor_resident(t[0]));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A refused call changes nothing, not even the context's records: the
 * collection of released records ran before create's and mutate's check
 * that their inputs are resident, so a refused call could reclaim records
 * (stats.records, records_reclaimed) and turn a stale handle's "released"
 * into "reclaimed" (rev33-Q's review). Collection is due at every call here
 * (collect_at 1). */
static void refused_calls_collect_nothing(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_COOP, &s);
    coop_tensor *a, *g, *big, *out = NULL;
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "g", NULL, 0, EV, &g), COOP_OK);
    assert_int_equal(coop_tensor_release(r, g), COOP_OK); /* its record: garbage */
    assert_int_equal(coop_tensor_create(r, 4 * U, 1, "B", NULL, 0, EV, &big), COOP_OK);
    assert_false(coop_tensor_resident(a));
    r->collect_at = 1;
    coop_remat_stats before, after;
    coop_remat_get_stats(r, &before);
    assert_int_equal(coop_tensor_create(r, U, 1, "o", &a, 1, EV, &out), COOP_ERR_INVALID);
    assert_null(out);
    assert_int_equal(coop_tensor_mutate(r, big, 1, "m", &a, 1, NULL), COOP_ERR_INVALID);
    coop_remat_get_stats(r, &after);
    assert_int_equal(after.records, before.records);
    assert_int_equal(after.records_reclaimed, before.records_reclaimed);
    /* a call that goes ahead collects as before */
    void *p;
    assert_int_equal(coop_tensor_access(r, big, &p), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 1, "o", &big, 1, EV, &out), COOP_ERR_NOMEM);
    coop_remat_get_stats(r, &after);
    assert_true(after.records_reclaimed > before.records_reclaimed);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* The callbacks may call the pool the context is over (coop.h): neither
 * runs under the pool's lock. */
static void callbacks_may_call_the_pool(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {.pool = pool};
    coop_remat *r = scripted(pool, COOP_REMAT_COOP, &s);
    coop_tensor *t[3], *big;
    for (int i = 0; i < 3; i++)
        assert_int_equal(coop_tensor_create(r, U, 10, "t", NULL, 0, EV, &t[i]), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 4 * U, 1, "B", NULL, 0, EV, &big), COOP_OK);
    assert_int_equal(s.evictions_told, 3);
    assert_int_equal(s.pool_calls, 3);
    assert_int_equal(coop_tensor_access(r, t[0], NULL), COOP_OK); /* evicts B, recomputes t */
    assert_int_equal(s.evictions_told, 4);
    assert_int_equal(s.pool_calls, 5);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocation.current, 0);
    coop_pool_destroy(pool);
}

/* coop_tensor_mutate keeps its inputs resident while it recomputes its
 * target: no room is then no room, not an input evicted and refused. */
static void mutate_keeps_its_inputs(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_LRU, &s);
    coop_tensor *b, *x, *fill;
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "b", NULL, 0, EV, &b), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 3 * U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    assert_false(coop_tensor_resident(b));
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "x", NULL, 0, EV, &x), COOP_OK);
    assert_int_equal(coop_tensor_create(r, U, 10, "f", NULL, 0, 0, &fill), COOP_OK);
    /* b needs 2 blocks; only x (an input) could make room */
    assert_int_equal(coop_tensor_mutate(r, b, 1, "m", &x, 1, NULL), COOP_ERR_NOMEM);
    assert_true(coop_tensor_resident(x));
    assert_string_equal(s.ran, "");
    assert_int_equal(coop_tensor_release(r, fill), COOP_OK);
    assert_int_equal(coop_tensor_mutate(r, b, 1, "m", &x, 1, NULL), COOP_OK);
    assert_string_equal(s.ran, "b");
    assert_true(coop_tensor_resident(x) && coop_tensor_resident(b));
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* More records reclaimed at once than the quarantine's bound: the latest
 * collection's stay readable (ASan would see a use after free). */
#define HELD 6000
static void handles_from_the_latest_collection_stay_refused(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(8);
    coop_remat *r = context(pool, COOP_REMAT_DTR);
    static coop_tensor *held[HELD];
    for (int i = 0; i < HELD; i++)
        assert_int_equal(coop_tensor_create(r, 512, 1, "h", NULL, 0, EV, &held[i]), COOP_OK);
    for (int i = 0; i < HELD; i++)
        assert_int_equal(coop_tensor_release(r, held[i]), COOP_OK);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    uint64_t before = st.records_reclaimed;
    while (st.records_reclaimed - before < HELD) { /* until a collection takes them */
        coop_tensor *t;
        assert_int_equal(coop_tensor_create(r, 512, 1, "t", NULL, 0, EV, &t), COOP_OK);
        coop_remat_get_stats(r, &st);
    }
    for (int i = 0; i < HELD; i++) {
        assert_int_equal(coop_tensor_access(r, held[i], NULL), COOP_ERR_INVALID);
        assert_true(error_says("reclaimed"));
    }
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* Two contexts over one pool: each one's tensors are, to the other, blocks
 * of another user of the pool, which break its windows; neither evicts
 * (or tells its owner of) a tensor of the other. */
static void contexts_sharing_a_pool_keep_to_their_own(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(4);
    script s1 = {0}, s2 = {0};
    coop_remat *r1 = scripted(pool, policy, &s1), *r2 = scripted(pool, policy, &s2);
    coop_tensor *a, *b, *x;
    assert_int_equal(coop_tensor_create(r2, 2 * U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    assert_int_equal(coop_tensor_create(r1, 2 * U, 10, "b", NULL, 0, EV, &b), COOP_OK);
    /* only r2's a could make room for 3 blocks: no room for r1 */
    assert_int_equal(coop_tensor_create(r1, 3 * U, 10, "x", NULL, 0, EV, &x), COOP_ERR_NOMEM);
    assert_true(coop_tensor_resident(a));
    /* 2 blocks: r1 evicts its own b */
    assert_int_equal(coop_tensor_create(r1, 2 * U, 10, "x", NULL, 0, EV, &x), COOP_OK);
    assert_true(coop_tensor_resident(a));
    assert_false(coop_tensor_resident(b));
    assert_int_equal(s1.evictions_told, 1);
    assert_int_equal(s2.evictions_told, 0);
    coop_remat_stats st1, st2;
    coop_remat_get_stats(r1, &st1);
    coop_remat_get_stats(r2, &st2);
    assert_int_equal(st1.resident_bytes, 2 * U);
    assert_int_equal(st2.resident_bytes, 2 * U);
    assert_int_equal(st2.evictions, 0);
    /* and the other way round: r2 has only a to evict */
    coop_tensor *y;
    assert_int_equal(coop_tensor_create(r2, 3 * U, 10, "y", NULL, 0, EV, &y), COOP_ERR_NOMEM);
    assert_true(coop_tensor_resident(x));
    assert_int_equal(s1.evictions_told, 1);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r1);
    assert_true(coop_tensor_resident(a));
    assert_int_equal(coop_tensor_access(r2, a, NULL), COOP_OK);
    coop_remat_destroy(r2);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocation.current, 0);
    coop_pool_destroy(pool);
}

/* coop_remat_destroy from on_evict frees nothing: the call that runs the
 * callback still walks its victims and places its tensor. */
static void a_callback_cannot_destroy_the_context(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_COOP, &s);
    coop_tensor *a, *big;
    assert_int_equal(coop_tensor_create(r, 2 * U, 10, "a", NULL, 0, EV, &a), COOP_OK);
    s.r = r;
    s.destroy = true;
    assert_int_equal(coop_tensor_create(r, 4 * U, 1, "B", NULL, 0, EV, &big), COOP_OK);
    assert_int_equal(s.evictions_told, 1);
    assert_true(error_says("coop_remat_destroy"));
    assert_true(coop_tensor_resident(big));
    s.destroy = false;
    assert_int_equal(coop_tensor_access(r, a, NULL), COOP_OK); /* the context still works */
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocation.current, 0);
    coop_pool_destroy(pool);
}

/* A coop_walk visitor calling a remat context over the walked pool: the
 * walk holds the pool's lock, which the context's calls take, so each
 * waited for this thread forever. Refused now as the pool's own calls are
 * (COOP_ERR_BUSY naming the call and the walk, nothing changed);
 * coop_remat_destroy does nothing and sets that message. The alarm turns a
 * regression (a deadlock) into a failure. */
typedef struct walk_calls {
    coop_remat *r;
    coop_tensor *t;
    coop_status create, access, release;
    bool destroy_refused;
} walk_calls;

static int call_the_context(const coop_block_info *b, void *ctx)
{
    (void)b;
    walk_calls *w = ctx;
    coop_tensor *t = NULL;
    w->create = coop_tensor_create(w->r, U, 1, "w", NULL, 0, EV, &t);
    assert_null(t);
    assert_true(error_says("coop_tensor_create: called from inside a coop_walk visitor"));
    w->access = coop_tensor_access(w->r, w->t, NULL);
    w->release = coop_tensor_release(w->r, w->t);
    coop_remat_destroy(w->r);
    w->destroy_refused = error_says("coop_remat_destroy: called from inside a coop_walk visitor");
    return 1;
}

static void a_walk_visitor_cannot_call_the_context(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    script s = {0};
    coop_remat *r = scripted(pool, COOP_REMAT_COOP, &s);
    walk_calls w = {.r = r};
    assert_int_equal(coop_tensor_create(r, U, 10, "a", NULL, 0, EV, &w.t), COOP_OK);
    coop_stats before;
    coop_get_stats(pool, &before);
    alarm(10);
    assert_int_equal(coop_walk(pool, NULL, call_the_context, &w), COOP_OK);
    alarm(0);
    assert_int_equal(w.create, COOP_ERR_BUSY);
    assert_int_equal(w.access, COOP_ERR_BUSY);
    assert_int_equal(w.release, COOP_ERR_BUSY);
    assert_true(w.destroy_refused);
    coop_stats after;
    coop_get_stats(pool, &after);
    assert_memory_equal(&after, &before, sizeof after);
    assert_true(coop_tensor_resident(w.t));
    assert_int_equal(coop_tensor_access(r, w.t, NULL), COOP_OK); /* the context still works */
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* A NaN partitioning threshold compares false with every cost per byte:
 * refused, rather than silently turning partitioning off. */
static void a_nan_threshold_is_refused(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat_config cfg = {.cheap_threshold = NAN, .recompute = recompute};
    coop_remat *r = (coop_remat *)1;
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_ERR_INVALID);
    assert_null(r);
    assert_true(error_says("cheap_threshold"));
    cfg.cheap_threshold = INFINITY; /* every tensor cheap: a choice, accepted */
    assert_int_equal(coop_remat_create(pool, &cfg, &r), COOP_OK);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* coop_tensor_create_outputs' refusals name it and the argument at fault;
 * coop_tensor_create's name it. */
static void create_refusals_name_the_call_and_argument(void **state)
{
    (void)state;
    coop_pool *pool = pool_of(4);
    coop_remat *r = context(pool, COOP_REMAT_COOP);
    coop_tensor *outs[2], *t;
    const size_t sizes[2] = {U, 0};
    assert_int_equal(coop_tensor_create_outputs(r, 2, NULL, 1, "o", NULL, 0, EV, outs),
                     COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_create_outputs: sizes is NULL"));
    assert_int_equal(coop_tensor_create_outputs(r, 2, sizes, 1, "o", NULL, 0, EV, NULL),
                     COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_create_outputs: outs is NULL"));
    assert_int_equal(coop_tensor_create_outputs(r, 0, sizes, 1, "o", NULL, 0, EV, outs),
                     COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_create_outputs: num_outputs is 0"));
    assert_int_equal(coop_tensor_create_outputs(r, 2, sizes, 1, "o", NULL, 0, EV, outs),
                     COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_create_outputs: sizes[1] is 0"));
    assert_int_equal(coop_tensor_create_outputs(r, 2, sizes, 1, "o", NULL, 0, 0x100, outs),
                     COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_create_outputs: "));
    assert_int_equal(coop_tensor_create(r, 0, 1, "t", NULL, 0, EV, &t), COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_create: size is 0"));
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_int_equal(st.records, 0); /* no refusal above left a record */
    /* outs over the inputs: refused before either is touched */
    const size_t two[2] = {U, U};
    coop_tensor *io[3];
    assert_int_equal(coop_tensor_create(r, U, 1, "in", NULL, 0, EV, &io[0]), COOP_OK);
    io[1] = io[0];
    coop_tensor *in0 = io[0];
    assert_int_equal(coop_tensor_create_outputs(r, 2, two, 1, "o", io, 2, EV, io + 1),
                     COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_create_outputs: outs overlaps inputs"));
    assert_ptr_equal(io[0], in0);
    assert_ptr_equal(io[1], in0);
    assert_int_equal(coop_tensor_create(r, U, 1, "t", io, 1, EV, io), COOP_ERR_INVALID);
    assert_true(error_says("coop_tensor_create: out overlaps inputs"));
    assert_ptr_equal(io[0], in0);
    /* adjacent, not overlapping: fine */
    assert_int_equal(coop_tensor_create_outputs(r, 2, two, 1, "o", io, 1, EV, io + 1), COOP_OK);
    assert_ptr_equal(io[0], in0);
    for (int i = 0; i < 3; i++)
        coop_tensor_release(r, io[i]);
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
}

/* coop.h: a call that succeeds leaves coop_last_error as it was. The remat
 * calls that succeed after a failure inside (the allocation that did not
 * fit, then the eviction and the placement; an access that recomputes
 * into evicted space) must not leave the pool's out-of-memory message. */
#define EXPECT_MESSAGE_KEPT(call)                                                                  \
    do {                                                                                           \
        assert_int_equal(call, COOP_OK);                                                           \
        if (strcmp(coop_last_error(), kept) != 0)                                                  \
            fail_msg("%s succeeded and replaced the message with '%s'", #call, coop_last_error()); \
    } while (0)

static void successful_calls_keep_the_last_error(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    coop_pool *pool = pool_of(4);
    coop_remat *r = context(pool, policy);
    coop_tensor *t[4], *more, *view, *outs[2];
    assert_int_equal(coop_tensor_release(r, NULL), COOP_ERR_INVALID);
    char kept[512];
    snprintf(kept, sizeof kept, "%s", coop_last_error());
    for (int i = 0; i < 4; i++)
        EXPECT_MESSAGE_KEPT(coop_tensor_create(r, U, 1000 + (uint64_t)i, NULL, NULL, 0, EV, &t[i]));
    /* the pool is full: each of these evicts */
    EXPECT_MESSAGE_KEPT(coop_tensor_create(r, U, 10, NULL, NULL, 0, EV, &more));
    void *ptr;
    for (int i = 0; i < 4; i++)
        EXPECT_MESSAGE_KEPT(coop_tensor_access(r, t[i], &ptr)); /* one was evicted */
    const size_t sizes[2] = {U, U};
    EXPECT_MESSAGE_KEPT(coop_tensor_create_outputs(r, 2, sizes, 10, NULL, NULL, 0, EV, outs));
    EXPECT_MESSAGE_KEPT(coop_tensor_pin(r, t[0], &ptr));
    EXPECT_MESSAGE_KEPT(coop_tensor_alias(r, t[0], &view));
    EXPECT_MESSAGE_KEPT(coop_tensor_mutate(r, t[1], 10, NULL, NULL, 0, NULL));
    EXPECT_MESSAGE_KEPT(coop_tensor_unpin(r, t[0]));
    EXPECT_MESSAGE_KEPT(coop_tensor_release(r, view));
    EXPECT_MESSAGE_KEPT(coop_tensor_release(r, more));
    coop_remat_stats rs;
    EXPECT_MESSAGE_KEPT((coop_remat_get_stats(r, &rs), COOP_OK));
    assert_true(rs.evictions > 0);
    coop_remat_destroy(r);
    assert_string_equal(coop_last_error(), kept);
    coop_pool_destroy(pool);
}

int main(void)
{
    static coop_remat_policy policies[] = {COOP_REMAT_COOP, COOP_REMAT_DTR, COOP_REMAT_LRU};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(a_failed_recompute_leaves_the_tensor_evicted, &policies[0]),
        cmocka_unit_test_prestate(a_failed_recompute_leaves_the_tensor_evicted, &policies[1]),
        cmocka_unit_test(a_failed_recompute_names_the_call_and_the_tensors),
        cmocka_unit_test(a_failed_recompute_quotes_the_refused_call),
        cmocka_unit_test(no_room_names_the_call),
        cmocka_unit_test(refused_calls_collect_nothing),
        cmocka_unit_test_prestate(outputs_past_the_capacity_evict_nothing, &policies[0]),
        cmocka_unit_test_prestate(outputs_past_the_capacity_evict_nothing, &policies[1]),
        cmocka_unit_test(no_room_after_outputs_names_no_output),
        cmocka_unit_test(no_room_while_recomputing_names_the_tensor),
        cmocka_unit_test(a_failed_in_place_recompute_leaves_both_evicted),
        cmocka_unit_test_prestate(requests_that_cannot_fit_evict_nothing, &policies[0]),
        cmocka_unit_test_prestate(requests_that_cannot_fit_evict_nothing, &policies[1]),
        cmocka_unit_test_prestate(requests_that_cannot_fit_evict_nothing, &policies[2]),
        cmocka_unit_test_prestate(a_request_split_by_a_kept_block_evicts_nothing, &policies[0]),
        cmocka_unit_test_prestate(a_request_split_by_a_kept_block_evicts_nothing, &policies[1]),
        cmocka_unit_test_prestate(a_request_split_by_a_kept_block_evicts_nothing, &policies[2]),
        cmocka_unit_test(a_long_chain_recomputes_on_a_small_stack),
        cmocka_unit_test(in_place_ops_on_one_input_stay_linear),
        cmocka_unit_test(bad_handles_and_arguments_change_nothing),
        cmocka_unit_test(misuse_names_the_call_the_tensor_and_the_numbers),
        cmocka_unit_test(misuse_through_a_view_names_the_view),
        cmocka_unit_test(a_nan_threshold_is_refused),
        cmocka_unit_test(create_refusals_name_the_call_and_argument),
        cmocka_unit_test(pins_belong_to_their_handle),
        cmocka_unit_test_prestate(pin_counts_do_not_wrap, &policies[0]),
        cmocka_unit_test_prestate(pin_counts_do_not_wrap, &policies[1]),
        cmocka_unit_test(a_views_pin_limit_names_the_storage_size),
        cmocka_unit_test(refused_creates_leave_their_outputs_null),
        cmocka_unit_test(recompute_counts_do_not_wrap),
        cmocka_unit_test(released_handles_and_unbalanced_pins_change_nothing),
        cmocka_unit_test(context_refusals_name_the_argument),
        cmocka_unit_test_prestate(a_constant_held_by_a_view_is_not_evicted, &policies[0]),
        cmocka_unit_test_prestate(a_constant_held_by_a_view_is_not_evicted, &policies[1]),
        cmocka_unit_test_prestate(copy_on_write_refuses_a_pinned_tensor, &policies[0]),
        cmocka_unit_test_prestate(copy_on_write_refuses_a_pinned_tensor, &policies[1]),
        cmocka_unit_test(the_pool_refuses_a_tensors_buffer),
        cmocka_unit_test(callbacks_cannot_call_the_context),
        cmocka_unit_test(callbacks_may_call_the_pool),
        cmocka_unit_test(a_callback_cannot_destroy_the_context),
        cmocka_unit_test(a_walk_visitor_cannot_call_the_context),
        cmocka_unit_test(mutate_keeps_its_inputs),
        cmocka_unit_test(handles_from_the_latest_collection_stay_refused),
        cmocka_unit_test_prestate(contexts_sharing_a_pool_keep_to_their_own, &policies[0]),
        cmocka_unit_test_prestate(contexts_sharing_a_pool_keep_to_their_own, &policies[1]),
        cmocka_unit_test_prestate(successful_calls_keep_the_last_error, &policies[0]),
        cmocka_unit_test_prestate(successful_calls_keep_the_last_error, &policies[1]),
        cmocka_unit_test_prestate(successful_calls_keep_the_last_error, &policies[2]),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
