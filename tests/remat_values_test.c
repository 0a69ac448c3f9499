/*
 * The values a remat context hands back, for every policy, on a pool of
 * segments (no VMM: a window cannot span two, tensors larger than a segment
 * make the window policies evict whole segments) in both in-place modes,
 * and on a VMM pool for comparison. A random program (ops with up to three
 * pinned inputs, releases, accesses, pins, views, in-place ops reading
 * other tensors or the target's own view, plain coop_malloc blocks beside
 * the tensors) runs against a model of each storage's value:
 *
 * - the device memory is never touched (the host backend maps it
 *   PROT_NONE), so a shadow map from each 512-byte granule's address to a
 *   value stands for it: the test writes an op's result over the whole
 *   buffer coop_tensor_create returns (and over the new value's buffer after
 *   coop_tensor_mutate), the recompute callback writes its result computed
 *   from the shadow values of the buffers it is given;
 * - a value is a hash of the op and its inputs' values, in order (an
 *   in-place op's first input is the target's old value), so a recomputation
 *   that runs the wrong op, reads the wrong buffer or an input not yet
 *   recomputed, or lands over another resident tensor, gives another value;
 * - checked: every buffer access and pin return, every input an op pins,
 *   and, after every operation, every resident storage's whole buffer
 *   holds its value; pinned storage stays where its pin returned;
 *   coop_pool_check passes.
 *
 * COOP_TEST_SEED sets the seed (printed); each run adds its number.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"
#include "shadow_values.h"
#include "test_seed.h"

#define KiB 1024u
#define UNIT (4 * KiB)
#define MAX_HANDLES 2048
#define MAX_INPUTS 3
#define MAX_PLAIN 4
#define OPS 4000

/* ---- Shadow memory: granule address -> value (open addressing) ---- */

static shadow_slot *shadow;

static void shadow_write(const void *ptr, size_t size, uint64_t value)
{
    if (!shadow_store(shadow, ptr, size, value))
        fail_msg("shadow map full");
}

/* The value at ptr (its first granule); 0 if never written. */
static uint64_t shadow_read(const void *ptr)
{
    uint64_t v = 0;
    if (!shadow_load(shadow, ptr, &v))
        fail_msg("shadow map full");
    return v;
}

/* ---- The model ---- */

typedef struct world {
    coop_pool *pool;
    coop_remat *r;
    bool cow;
    uint64_t segment_size; /* 0: VMM */
    coop_tensor *h[MAX_HANDLES];
    int store[MAX_HANDLES]; /* the handle whose index names the storage (a view's base) */
    bool live[MAX_HANDLES];
    int live_list[MAX_HANDLES], live_pos[MAX_HANDLES]; /* the live handles, unordered */
    size_t num_live;
    uint32_t pins[MAX_HANDLES];
    void *pinned_at[MAX_HANDLES];
    uint64_t value[MAX_HANDLES]; /* by storage */
    size_t size[MAX_HANDLES];    /* by storage */
    size_t n;
    void *plain[MAX_PLAIN];
    uint64_t rng, op_ids, op;
    /* what the program exercised */
    uint64_t recomputes, mutates, cow_refusals, over_segment, views, value_checks;
} world;

static world W;
static uint64_t base_seed;

static uint64_t next(void)
{
    return test_xorshift64(&W.rng);
}

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)user;
    uint64_t in[MAX_INPUTS + 1];
    assert_true(n <= MAX_INPUTS + 1);
    for (size_t i = 0; i < n; i++)
        in[i] = shadow_read(inputs[i]);
    shadow_write(out, coop_tensor_size(t), op_value((uint64_t)(uintptr_t)producer, in, n));
    W.recomputes++;
    return COOP_OK;
}

/* Every granule of storage s's buffer ptr holds its value. */
static void check_value(int s, const void *ptr, const char *what)
{
    for (uintptr_t a = (uintptr_t)ptr; a < (uintptr_t)ptr + W.size[s]; a += GRANULE)
        if (shadow_read((void *)a) != W.value[s])
            fail_msg("op %llu: %s: storage %d at %p: granule +%lu holds %#llx, not %#llx",
                     (unsigned long long)W.op, what, s, ptr, (unsigned long)(a - (uintptr_t)ptr),
                     (unsigned long long)shadow_read((void *)a), (unsigned long long)W.value[s]);
    W.value_checks++;
}

/* A random live handle, or -1. */
static int pick(void)
{
    return W.num_live ? W.live_list[next() % W.num_live] : -1;
}

static void set_live(int i, bool live)
{
    if (live) {
        W.live_pos[i] = W.num_live;
        W.live_list[W.num_live++] = i;
    } else {
        int last = W.live_list[--W.num_live];
        W.live_list[W.live_pos[i]] = last;
        W.live_pos[last] = W.live_pos[i];
    }
    W.live[i] = live;
}

/* Pins idx[0 .. k) (each checked); on a failure unpins those pinned. */
static coop_status pin_inputs(const int *idx, size_t k, coop_tensor **in)
{
    for (size_t j = 0; j < k; j++) {
        void *p;
        coop_status st = coop_tensor_pin(W.r, W.h[idx[j]], &p);
        if (st) {
            assert_int_equal(st, COOP_ERR_NOMEM);
            while (j--)
                assert_int_equal(coop_tensor_unpin(W.r, W.h[idx[j]]), COOP_OK);
            return st;
        }
        check_value(W.store[idx[j]], p, "a pinned input");
        in[j] = W.h[idx[j]];
    }
    return COOP_OK;
}

static void unpin_inputs(const int *idx, size_t k)
{
    for (size_t j = 0; j < k; j++)
        assert_int_equal(coop_tensor_unpin(W.r, W.h[idx[j]]), COOP_OK);
}

static void op_create(const int *idx, size_t k)
{
    if (W.n == MAX_HANDLES)
        return;
    size_t size = (1 + next() % 12) * UNIT - (next() % 2) * GRANULE;
    unsigned flags = next() % 5 ? COOP_TENSOR_EVICTABLE : 0;
    flags |= next() % 8 ? 0 : COOP_TENSOR_CHEAP;
    uint64_t id = ++W.op_ids, cost = 1 + next() % 1000;
    coop_tensor *in[MAX_INPUTS];
    uint64_t vals[MAX_INPUTS];
    coop_status st = pin_inputs(idx, k, in);
    if (st)
        return;
    for (size_t j = 0; j < k; j++)
        vals[j] = W.value[W.store[idx[j]]];
    size_t i = W.n;
    st = coop_tensor_create(W.r, size, cost, (void *)(uintptr_t)id, in, k, flags, &W.h[i]);
    unpin_inputs(idx, k);
    if (st == COOP_ERR_NOMEM)
        return;
    assert_int_equal(st, COOP_OK);
    set_live((int)i, true);
    W.store[i] = (int)i;
    W.size[i] = size;
    W.value[i] = op_value(id, vals, k);
    shadow_write(coop_tensor_data(W.h[i]), size, W.value[i]);
    W.over_segment += W.segment_size && size > W.segment_size;
    W.n++;
}

/* An in-place op on target reading k other handles (which may name the
 * target's own storage: they then read its old value). */
static void op_mutate(int target, const int *idx, size_t k)
{
    int s = W.store[target];
    coop_tensor *in[MAX_INPUTS];
    uint64_t vals[MAX_INPUTS + 1];
    coop_status st = pin_inputs(idx, k, in);
    if (st)
        return;
    bool pinned = false; /* the target's storage pinned (copy-on-write refuses) */
    for (size_t i = 0; i < W.n; i++)
        pinned = pinned || (W.store[i] == s && W.pins[i]);
    for (size_t j = 0; j < k; j++)
        pinned = pinned || W.store[idx[j]] == s;
    vals[0] = W.value[s];
    for (size_t j = 0; j < k; j++)
        vals[j + 1] = W.value[W.store[idx[j]]];
    uint64_t id = ++W.op_ids, cost = 1 + next() % 1000;
    void *old = NULL;
    void *before = coop_tensor_data(W.h[target]);
    st = coop_tensor_mutate(W.r, W.h[target], cost, (void *)(uintptr_t)id, in, k, &old);
    unpin_inputs(idx, k);
    if (W.cow && pinned) {
        assert_int_equal(st, COOP_ERR_BUSY);
        W.cow_refusals++;
        return;
    }
    if (st == COOP_ERR_NOMEM)
        return;
    assert_int_equal(st, COOP_OK);
    void *now = coop_tensor_data(W.h[target]);
    assert_non_null(now);
    if (W.cow) { /* the caller computes the new value from the old buffer */
        assert_non_null(old);
        assert_ptr_not_equal(old, now);
        check_value(s, old, "copy-on-write's old value");
    } else {
        assert_null(old);
        if (before)
            assert_ptr_equal(before, now); /* in place: the address stays */
        check_value(s, now, "the in-place target before the op");
    }
    W.value[s] = op_value(id, vals, k + 1);
    shadow_write(now, W.size[s], W.value[s]);
    W.mutates++;
}

static void step(void)
{
    unsigned what = (unsigned)(next() % 100);
    int idx[MAX_INPUTS];
    size_t k = next() % (MAX_INPUTS + 1);
    for (size_t j = 0; j < k; j++)
        if ((idx[j] = pick()) < 0)
            k = j;
    int target = pick();
    void *p;
    if (what < 45 || target < 0) {
        op_create(idx, k);
    } else if (what < 60) { /* release, with the test's pins */
        for (; W.pins[target]; W.pins[target]--)
            assert_int_equal(coop_tensor_unpin(W.r, W.h[target]), COOP_OK);
        assert_int_equal(coop_tensor_release(W.r, W.h[target]), COOP_OK);
        set_live(target, false);
    } else if (what < 78) { /* access: recomputes an evicted storage */
        coop_status st = coop_tensor_access(W.r, W.h[target], &p);
        if (st != COOP_ERR_NOMEM) {
            assert_int_equal(st, COOP_OK);
            check_value(W.store[target], p, "an access");
        }
    } else if (what < 84) { /* pin (at most two per handle), or unpin */
        if (W.pins[target] && (W.pins[target] == 2 || next() % 2)) {
            assert_int_equal(coop_tensor_unpin(W.r, W.h[target]), COOP_OK);
            W.pins[target]--;
        } else {
            coop_status st = coop_tensor_pin(W.r, W.h[target], &p);
            if (st != COOP_ERR_NOMEM) {
                assert_int_equal(st, COOP_OK);
                check_value(W.store[target], p, "a pin");
                W.pinned_at[target] = p;
                W.pins[target]++;
            }
        }
    } else if (what < 88) { /* a view */
        if (W.n == MAX_HANDLES)
            return;
        assert_int_equal(coop_tensor_alias(W.r, W.h[target], &W.h[W.n]), COOP_OK);
        set_live((int)W.n, true);
        W.store[W.n] = W.store[target];
        W.n++;
        W.views++;
    } else if (what < 96) {
        op_mutate(target, idx, k);
    } else { /* a plain block beside the tensors, or its free */
        size_t slot = next() % MAX_PLAIN;
        if (W.plain[slot]) {
            assert_int_equal(coop_free(W.pool, W.plain[slot]), COOP_OK);
            W.plain[slot] = NULL;
        } else {
            W.plain[slot] = coop_malloc(W.pool, (1 + next() % 4) * UNIT, 0, COOP_ALLOC_LOW, NULL);
        }
    }
}

/* After every operation: the pool is sound, pinned storage stays put, and
 * every resident storage holds its value. */
static void check_all(void)
{
    if (coop_pool_check(W.pool) != COOP_OK)
        fail_msg("op %llu: %s", (unsigned long long)W.op, coop_last_error());
    for (size_t i = 0; i < W.n; i++) {
        if (!W.live[i])
            continue;
        void *p = coop_tensor_data(W.h[i]);
        if (W.pins[i])
            assert_ptr_equal(p, W.pinned_at[i]);
        if (p && W.store[i] == (int)i)
            check_value((int)i, p, "a resident storage");
    }
}

typedef struct run_case {
    coop_remat_policy policy;
    const char *name;
    bool segments, cow;
} run_case;

static void run(void **state)
{
    const run_case *c = *state;
    memset(&W, 0, sizeof W);
    memset(shadow, 0, SHADOW_SLOTS * sizeof *shadow);
    uint64_t add = (uint64_t)c->policy * 4 + c->segments * 2 + c->cow;
    W.rng = base_seed + add;
    W.rng = W.rng ? W.rng : 1;
    printf("remat_values_test %s %s %s: the seed + %llu\n", c->name,
           c->segments ? "segments" : "vmm", c->cow ? "copy-on-write" : "in place",
           (unsigned long long)add);
    coop_config pc;
    coop_config_default(&pc);
    pc.page_size = UNIT;
    pc.capacity = 64 * UNIT;
    pc.use_vmm = !c->segments;
    pc.segment_size = 8 * UNIT; /* tensors up to 12 units: half of them a segment's own */
    W.segment_size = c->segments ? pc.segment_size : 0;
    W.cow = c->cow;
    assert_int_equal(coop_pool_create(&pc, &W.pool), COOP_OK);
    coop_remat_config rc = {.policy = c->policy, .copy_on_write = c->cow, .recompute = recompute};
    assert_int_equal(coop_remat_create(W.pool, &rc, &W.r), COOP_OK);
    for (W.op = 0; W.op < OPS; W.op++) {
        step();
        check_all();
    }
    coop_remat_stats x;
    coop_remat_get_stats(W.r, &x);
    coop_stats ps;
    coop_get_stats(W.pool, &ps);
    printf("  %llu evictions, %llu recomputations, %llu in-place ops (%llu refused), %llu views, "
           "%llu tensors larger than a segment, %llu values checked, %lld segments at most\n",
           (unsigned long long)x.evictions, (unsigned long long)W.recomputes,
           (unsigned long long)W.mutates, (unsigned long long)W.cow_refusals,
           (unsigned long long)W.views, (unsigned long long)W.over_segment,
           (unsigned long long)W.value_checks, (long long)ps.segment.peak);
    /* the program exercised what the values must survive */
    assert_true(x.evictions > 200 && W.recomputes > 100 && W.mutates > 20);
    assert_int_equal(W.recomputes, x.recomputes);
    if (c->segments)
        assert_true(ps.segment.peak > 4 && W.over_segment > 5);
    for (size_t i = 0; i < MAX_PLAIN; i++)
        coop_free(W.pool, W.plain[i]);
    coop_remat_destroy(W.r);
    assert_int_equal(coop_pool_check(W.pool), COOP_OK);
    coop_pool_destroy(W.pool);
}

int main(void)
{
    base_seed = test_seed("remat_values_test", 0x5eed5eed5eedull);
    static const struct {
        coop_remat_policy policy;
        const char *name;
    } policies[] = {
        {COOP_REMAT_COOP, "coop"},
        {COOP_REMAT_COOP_EQ, "coop-eq"},
        {COOP_REMAT_COOP_COMP, "coop-comp"},
        {COOP_REMAT_DTR, "dtr"},
        {COOP_REMAT_DTR_LOCAL, "dtr-local"},
        {COOP_REMAT_DTE, "dte"},
        {COOP_REMAT_LRU, "lru"},
        {COOP_REMAT_SIZE, "size"},
    };
    enum { P = sizeof policies / sizeof policies[0] };
    /* per policy: segments in place, segments copy-on-write, VMM (one mode) */
    static run_case cases[3 * P];
    static char names[3 * P][48];
    struct CMUnitTest tests[3 * P];
    for (size_t i = 0; i < 3 * P; i++) {
        const size_t p = i / 3, kind = i % 3;
        cases[i] = (run_case){policies[p].policy, policies[p].name, kind < 2,
                              kind == 1 || (kind == 2 && p % 2)};
        snprintf(names[i], sizeof names[i], "%s_%s_%s", policies[p].name,
                 cases[i].segments ? "segments" : "vmm", cases[i].cow ? "cow" : "in_place");
        tests[i] = (struct CMUnitTest){names[i], run, NULL, NULL, &cases[i]};
    }
    shadow = calloc(SHADOW_SLOTS, sizeof *shadow);
    assert_non_null(shadow);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    free(shadow);
    return failed;
}
